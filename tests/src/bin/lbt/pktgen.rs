//! `lbt pktgen`: the XDP packet generator (`lb_tests::pktgen`) from the
//! command line, run in a client's namespace; prints what it sent.

use std::net::{IpAddr, SocketAddr};

use anyhow::{Context as _, bail};
use lb_tests::pktgen::{self, Generator, iface};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The veth to send out of.
    #[arg(long)]
    dev: String,
    /// The next hop's MAC (the veth peer's, or a router's behind it).
    #[arg(long)]
    dst_mac: String,
    /// Source address of the frames (the client's).
    #[arg(long)]
    src: IpAddr,
    /// Destination address and UDP (or TCP) port.
    #[arg(long)]
    to: SocketAddr,
    /// TCP SYNs, a SYN flood, instead of UDP datagrams (`--size` is
    /// then the headers').
    #[arg(long)]
    syn: bool,
    /// Frame length without the FCS.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Distinct source ports (flows), a power of two.
    #[arg(long, default_value_t = 1024)]
    flows: u32,
    /// How long to send.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Stop after this many frames, if sooner.
    #[arg(long)]
    count: Option<u64>,
    /// Run on this CPU only.
    #[arg(long)]
    cpu: Option<usize>,
}

pub(crate) fn run(a: &Args, in_netns: bool) -> anyhow::Result<pktgen::Sent> {
    if !in_netns {
        bail!("refusing to send frames from the root netns: pass --netns");
    }
    let dst_mac = iface::parse_mac(&a.dst_mac).context("--dst-mac: aa:bb:cc:dd:ee:ff")?;
    if let Some(cpu) = a.cpu {
        pktgen::pin_to_cpu(cpu).with_context(|| format!("pinning to CPU {cpu}"))?;
    }
    let ends = (a.src, a.to);
    let generator = if a.syn {
        Generator::syn(&a.dev, dst_mac, ends, a.flows)
    } else {
        Generator::new(&a.dev, dst_mac, ends, a.size, a.flows)
    }
    .context("loading the generator")?;
    Ok(generator.run(a.seconds, a.count)?)
}
