//! The NodePort section of the report.

use std::fmt::Write as _;

use super::super::{
    plan::Plan,
    results::nodeport::{Family, Load, Mode, NodePort, find},
};
use super::rate_cells;

/// The NodePort section: its tables, the `tc_cost` bench's, and packets
/// per second.
pub(super) fn section(o: &mut String, plan: &Plan, np: &NodePort) {
    let _ = writeln!(
        o,
        "## NodePort from outside the node (externalTrafficPolicy: Cluster)\n\n\
         A client in its own namespace reaches the NodePort of a node namespace: ours (tc) runs \
         the agent with its tc programs on both of the node's devices, ours (XDP) with \
         `--bpf-lb-acceleration=native` (the XDP fast path before them; every pod and that \
         node's client send complete checksums, as a NIC delivers them); iptables and nftables \
         run kube-proxy v1.31's layouts (`KUBE-NODEPORTS` -> `KUBE-EXT-*`, `service-nodeports`) \
         for the same N NodePort Services ({} endpoints each; the measured ones last); direct \
         goes through a plain router to the pods. The pods are on other nodes as far as every \
         layout knows, so every flow is SNATed and answered through the node. Over IPv4, and \
         over IPv6: every link and Service is dual-stack, kube-proxy's layouts are loaded per \
         family as its proxier of each family writes them (`ip6tables-restore`, `table ip6`), \
         and the IPv6 tables compare with direct over IPv6. {} concurrent \
         clients, {} s per measurement, {} rounds in ABBA order, medians; conntrack of the \
         kube-proxy nodes flushed before each measurement.\n",
        plan.endpoints, plan.concurrency, plan.seconds, plan.rounds
    );
    rate_tables(o, plan, np);
    capacity_table(o, plan, np);
    let failed: u64 = np.rows.iter().map(|r| r.runs.failed()).sum();
    let _ = writeln!(
        o,
        "Failed requests over all NodePort runs: {failed}. \"tc ns/packet\": the kernel's mean \
         run time of our tc programs during our runs (`bpf_stats_enabled`), over every packet \
         both devices saw: client side and pod side, new flows and conntrack hits alike.\n\n\
         ### Our tc programs on crafted packets (`BPF_PROG_TEST_RUN`)\n\n```text\n{}```\n",
        np.tc_cost.table
    );
    super::pps::section(o, plan, &np.pps);
}

/// Rates and latencies of every mode at each N, one table per load and
/// family.
fn rate_tables(o: &mut String, plan: &Plan, np: &NodePort) {
    for (load, title, unit, lat) in [
        (
            Load::Tcp,
            "TCP short connections to a NodePort",
            "conn/s",
            "connect",
        ),
        (
            Load::Udp,
            "UDP request/response to a NodePort, one socket per client",
            "req/s",
            "round trip",
        ),
    ] {
        for family in Family::ALL {
            let row = |mode: Mode, n: usize| find(&np.rows, family, mode, n);
            let over = match family {
                Family::V4 => "",
                Family::V6 => ", over IPv6",
            };
            let _ = writeln!(o, "### {title}{over}\n");
            let _ = writeln!(
                o,
                "| N | mode | {unit} | vs direct | vs ours | spread | {lat} p50 µs | {lat} p99 µs | tc ns/packet in, out |"
            );
            let _ = writeln!(o, "|---:|---|---:|---:|---:|---:|---:|---:|---:|");
            for &n in &plan.nodeport_scales {
                let (d, us) = (row(Mode::Direct, n), row(Mode::Ours, n));
                for mode in Mode::ALL {
                    let r = row(mode, n);
                    let tc = if mode == Mode::Ours {
                        let (i, e) = r.tc_ns(load);
                        format!("{i:.0}, {e:.0}")
                    } else {
                        String::new()
                    };
                    let cells = rate_cells(n, mode.name(), load, [&r.runs, &d.runs, &us.runs]);
                    let _ = writeln!(o, "{cells} {tc} |");
                }
            }
            o.push('\n');
        }
    }
}

/// The SNAT capacity runs.
fn capacity_table(o: &mut String, plan: &Plan, np: &NodePort) {
    let secs = np.capacity_seconds;
    let _ = writeln!(
        o,
        "### SNAT ports: fresh-port flows to one remote endpoint\n\n\
         New flows, each from a new client port (UDP: a new connected socket per request, \
         as a resolver asks; TCP: short connections), to a NodePort whose one endpoint is \
         on another node, so every flow takes a SNAT port of that endpoint's: {} concurrent \
         clients for {secs} s, longer than the UDP timeout (ours 60 s, the kernel's 30 s); \
         over each family.\n\n\
         | family | mode | load | flows answered | flows/s | failed | dropped for want of a SNAT port |\n\
         |---|---|---|---:|---:|---:|---:|",
        plan.concurrency
    );
    for c in &np.capacity {
        let _ = writeln!(
            o,
            "| {} | {} | {:?} | {} | {:.0} | {} | {} |",
            c.family.name(),
            c.mode.name(),
            c.load,
            c.report.ok,
            c.report.rate,
            c.report.failed,
            c.exhausted.map_or_else(String::new, |n| n.to_string())
        );
    }
    o.push('\n');
}
