//! `lbt`: identity backends and clients for the netns tests and the demo.
//!
//! `--cgroup` joins a cgroup and `--netns` enters a namespace with setns(2)
//! before anything else runs (`ip netns exec` would remount /sys and hide the
//! cgroup2 mount). Clients print one JSON report on stdout.

use std::{
    collections::BTreeMap,
    fs,
    io::{self, BufRead, BufReader, Write},
    net::{SocketAddr, TcpListener, TcpStream, UdpSocket},
    os::fd::AsRawFd,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use serde::Serialize;

#[derive(Parser)]
struct Cli {
    /// Join this cgroup (v2 directory) first.
    #[arg(long)]
    cgroup: Option<PathBuf>,
    /// Then enter this network namespace (a name under /run/netns).
    #[arg(long)]
    netns: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Answer every TCP line and UDP datagram with `--id`, forever.
    Serve {
        #[arg(long)]
        id: String,
        #[arg(long)]
        tcp: Vec<u16>,
        #[arg(long)]
        udp: Vec<u16>,
    },
    /// N short TCP connections: connect, one request, one reply, close.
    Tcp {
        #[arg(long)]
        to: SocketAddr,
        #[arg(short, default_value_t = 1)]
        n: u32,
    },
    /// N UDP requests, on one connected socket or as unconnected sendto.
    Udp {
        #[arg(long)]
        to: SocketAddr,
        #[arg(short, default_value_t = 1)]
        n: u32,
        #[arg(long)]
        connected: bool,
    },
    /// One TCP connection kept open; each stdin line is one request.
    Hold {
        #[arg(long)]
        to: SocketAddr,
    },
    /// Short TCP connections back to back until stdin closes.
    Churn {
        #[arg(long)]
        to: SocketAddr,
    },
}

const TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Default, Serialize)]
struct Report {
    /// Backend id -> replies.
    replies: BTreeMap<String, u32>,
    /// Error kind -> count.
    errors: BTreeMap<String, u32>,
    /// What getpeername() (TCP) or recvfrom() (UDP) said -> count.
    peers: BTreeMap<String, u32>,
    elapsed_ms: u128,
}

impl Report {
    fn error(&mut self, e: &io::Error) {
        *self.errors.entry(format!("{:?}", e.kind())).or_default() += 1;
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(cg) = &cli.cgroup {
        fs::write(cg.join("cgroup.procs"), std::process::id().to_string())
            .with_context(|| format!("joining cgroup {}", cg.display()))?;
    }
    if let Some(ns) = &cli.netns {
        let f =
            fs::File::open(format!("/run/netns/{ns}")).with_context(|| format!("netns {ns}"))?;
        // SAFETY: valid fd; still single-threaded, so the whole process moves.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            bail!("setns {ns}: {}", io::Error::last_os_error());
        }
    }
    match cli.cmd {
        Cmd::Serve { id, tcp, udp } => serve(&id, &tcp, &udp),
        Cmd::Tcp { to, n } => print(tcp(to, n)),
        Cmd::Udp { to, n, connected } => print(udp(to, n, connected)?),
        Cmd::Hold { to } => hold(to),
        Cmd::Churn { to } => print(churn(to)?),
    }
}

fn print(r: Report) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}

fn serve(id: &str, tcp: &[u16], udp: &[u16]) -> anyhow::Result<()> {
    let reply = format!("{id}\n");
    let mut threads = Vec::new();
    for &port in tcp {
        let l = TcpListener::bind(("0.0.0.0", port)).with_context(|| format!("tcp {port}"))?;
        let reply = reply.clone();
        threads.push(std::thread::spawn(move || {
            for conn in l.incoming().flatten() {
                let reply = reply.clone();
                std::thread::spawn(move || answer_lines(conn, reply.as_bytes()));
            }
        }));
    }
    for &port in udp {
        let s = UdpSocket::bind(("0.0.0.0", port)).with_context(|| format!("udp {port}"))?;
        let reply = reply.clone();
        threads.push(std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((_, from)) = s.recv_from(&mut buf) {
                let _ = s.send_to(reply.as_bytes(), from);
            }
        }));
    }
    println!("ready");
    io::stdout().flush()?;
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

fn answer_lines(conn: TcpStream, reply: &[u8]) {
    let mut writer = match conn.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    for line in BufReader::new(conn).lines() {
        if line.is_err() || writer.write_all(reply).is_err() {
            return;
        }
    }
}

/// One request on a connected stream; returns the backend id.
fn request(stream: &mut TcpStream, reader: &mut BufReader<TcpStream>) -> io::Result<String> {
    stream.write_all(b"?\n")?;
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line.trim().to_owned())
}

fn tcp_once(to: SocketAddr, r: &mut Report) -> io::Result<()> {
    let mut s = TcpStream::connect_timeout(&to, TIMEOUT)?;
    s.set_read_timeout(Some(TIMEOUT))?;
    let peer = s.peer_addr()?;
    *r.peers.entry(peer.to_string()).or_default() += 1;
    let mut reader = BufReader::new(s.try_clone()?);
    let id = request(&mut s, &mut reader)?;
    *r.replies.entry(id).or_default() += 1;
    Ok(())
}

fn tcp(to: SocketAddr, n: u32) -> Report {
    let start = Instant::now();
    let mut r = Report::default();
    for _ in 0..n {
        if let Err(e) = tcp_once(to, &mut r) {
            r.error(&e);
        }
    }
    r.elapsed_ms = start.elapsed().as_millis();
    r
}

fn udp(to: SocketAddr, n: u32, connected: bool) -> anyhow::Result<Report> {
    let start = Instant::now();
    let mut r = Report::default();
    let s = UdpSocket::bind("0.0.0.0:0")?;
    s.set_read_timeout(Some(TIMEOUT))?;
    if connected {
        if let Err(e) = s.connect(to) {
            r.error(&e);
            return Ok(r);
        }
        *r.peers
            .entry(format!("getpeername {}", s.peer_addr()?))
            .or_default() += 1;
    }
    let mut buf = [0u8; 512];
    for _ in 0..n {
        let sent = if connected {
            s.send(b"?")
        } else {
            s.send_to(b"?", to)
        };
        if let Err(e) = sent {
            r.error(&e);
            continue;
        }
        match s.recv_from(&mut buf) {
            Ok((len, from)) => {
                let id = String::from_utf8_lossy(&buf[..len]).trim().to_owned();
                *r.replies.entry(id).or_default() += 1;
                *r.peers.entry(from.to_string()).or_default() += 1;
            }
            Err(e) => r.error(&e),
        }
    }
    r.elapsed_ms = start.elapsed().as_millis();
    Ok(r)
}

fn hold(to: SocketAddr) -> anyhow::Result<()> {
    let mut s = TcpStream::connect_timeout(&to, TIMEOUT)?;
    s.set_read_timeout(Some(TIMEOUT))?;
    let mut reader = BufReader::new(s.try_clone()?);
    println!("connected {}", s.peer_addr()?);
    for line in io::stdin().lines() {
        line?;
        match request(&mut s, &mut reader) {
            Ok(id) => println!("reply {id}"),
            Err(e) => println!("error {:?}", e.kind()),
        }
        io::stdout().flush()?;
    }
    Ok(())
}

fn churn(to: SocketAddr) -> anyhow::Result<Report> {
    let start = Instant::now();
    // A reader thread notices stdin closing; the loop checks it between connects.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let _ = io::stdin().lines().count();
        let _ = tx.send(());
    });
    let mut r = Report::default();
    while rx.try_recv().is_err() {
        if let Err(e) = tcp_once(to, &mut r) {
            r.error(&e);
        }
    }
    r.elapsed_ms = start.elapsed().as_millis();
    Ok(r)
}
