use std::path::Path;

use clap::Parser as _;

use super::*;
use crate::cli::{Cli, Command};

/// The ConfigMap of the seed notes (kube-proxy 1.2x, ipvs mode), plus the
/// exclusion list and an option that means nothing to a socket LB.
const SEED: &str = r#"
apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
enableProfiling: false
healthzBindAddress: ""
hostnameOverride: ""
iptables:
  masqueradeAll: true
  minSyncPeriod: 0s
ipvs:
  excludeCIDRs: null
  scheduler: ""
kind: KubeProxyConfiguration
metricsBindAddress: "0.0.0.0:10249"
mode: "ipvs"
excludeClusterCIDRs: ["10.244.0.0/16"]
"#;

fn args(argv: &[&str]) -> RunArgs {
    let mut full = vec!["lb-agent", "run"];
    full.extend_from_slice(argv);
    match Cli::try_parse_from(full).expect("valid flags").command {
        Command::Run(a) => a,
        _ => unreachable!("parsed run"),
    }
}

fn file() -> FileConfig {
    FileConfig::parse(SEED, Path::new("config.conf")).expect("seed config parses")
}

#[test]
fn reads_the_fields_that_apply_and_reports_the_set_others() {
    let f = file();
    assert_eq!(
        f.kubeconfig.as_deref(),
        Some(Path::new("/var/lib/kube-proxy/kubeconfig.conf"))
    );
    assert_eq!(f.metrics_bind_address.as_deref(), Some("0.0.0.0:10249"));
    assert_eq!(f.healthz_bind_address, None, "empty means default");
    assert_eq!(f.exclude_cluster_cidrs, ["10.244.0.0/16"]);
    // Zero-valued fields (most of a generated ConfigMap) are not noise.
    assert_eq!(f.ignored, ["mode=ipvs", "iptables.masqueradeAll=true"]);
}

#[test]
fn flags_override_the_file_and_defaults_fill_the_rest() {
    let a = args(&[
        "--metrics-bind-address=127.0.0.1:9999",
        "--exclude-cluster-cidr=10.1.0.0/16,",
        "--hostname-override=Node-A",
    ]);
    let c = RunConfig::merge(a, file(), Some("env-node".into()), None).unwrap();
    assert_eq!(c.metrics_addr, "127.0.0.1:9999".parse().unwrap());
    assert_eq!(
        c.healthz_addr,
        DEFAULT_HEALTHZ_BIND_ADDRESS.parse().unwrap()
    );
    assert_eq!(c.node_name, "node-a", "lowercased like kube-proxy");
    assert!(c.excluded.contains(std::net::Ipv4Addr::new(10, 1, 2, 3)));
    assert!(
        !c.excluded.contains(std::net::Ipv4Addr::new(10, 244, 0, 1)),
        "flag replaces file list"
    );
    assert_eq!(
        c.source,
        Source::Kube {
            kubeconfig: Some("/var/lib/kube-proxy/kubeconfig.conf".into()),
            master: None
        }
    );
}

#[test]
fn node_name_falls_back_to_env_then_host_name() {
    let c = RunConfig::merge(
        args(&[]),
        FileConfig::default(),
        Some("from-env".into()),
        Some("h".into()),
    );
    assert_eq!(c.unwrap().node_name, "from-env");
    let c = RunConfig::merge(args(&[]), FileConfig::default(), None, Some("host".into()));
    assert_eq!(c.unwrap().node_name, "host");
    let c = RunConfig::merge(args(&[]), FileConfig::default(), Some(String::new()), None);
    assert!(matches!(c, Err(ConfigError::NoNodeName)));
}

#[test]
fn addresses_accept_kube_proxy_forms() {
    let parse = |v: &str| addr("x", Some(v.into()), "127.0.0.1:10249");
    assert_eq!(
        parse("10.0.0.1").unwrap(),
        "10.0.0.1:10249".parse().unwrap()
    );
    assert_eq!(parse(":1234").unwrap(), "0.0.0.0:1234".parse().unwrap());
    assert_eq!(parse("[::1]:80").unwrap(), "[::1]:80".parse().unwrap());
    assert_eq!(parse("").unwrap(), "127.0.0.1:10249".parse().unwrap());
    assert!(matches!(parse("nope:1"), Err(ConfigError::Addr { .. })));
}

#[test]
fn rejects_other_kinds_and_bad_types() {
    let e = FileConfig::parse("kind: KubeletConfiguration\n", Path::new("f"));
    assert!(matches!(e, Err(FileError::Kind { .. })));
    let e = FileConfig::parse(
        "kind: KubeProxyConfiguration\nexcludeClusterCIDRs: [1]\n",
        Path::new("f"),
    );
    assert!(matches!(e, Err(FileError::Field { .. })));
    let e = FileConfig::parse(
        "kind: KubeProxyConfiguration\nhostnameOverride: {a: 1}\n",
        Path::new("f"),
    );
    assert!(matches!(e, Err(FileError::Field { .. })));
}

#[test]
fn from_file_conflicts_with_kube_flags() {
    let r = Cli::try_parse_from(["lb-agent", "run", "--from-file=x", "--kubeconfig=y"]);
    assert!(r.is_err());
}

#[test]
fn nodeport_addresses_come_from_the_flag_over_the_file_over_primary() {
    use crate::model::NodePortAddresses;
    let merged = |argv: &[&str], file: &str| {
        let f = FileConfig::parse(
            &format!("kind: KubeProxyConfiguration\n{file}"),
            Path::new("f"),
        )
        .expect("parses");
        RunConfig::merge(args(argv), f, Some("n".into()), None)
    };
    assert_eq!(
        merged(&[], "").unwrap().node_port_addresses,
        NodePortAddresses::Primary
    );
    let from_file = merged(&[], "nodePortAddresses: [192.0.2.0/24, '2001:db8::/64']\n").unwrap();
    assert_eq!(
        from_file.node_port_addresses,
        NodePortAddresses::Cidrs(vec![
            "192.0.2.0/24".parse().unwrap(),
            "2001:db8::/64".parse().unwrap()
        ])
    );
    assert!(from_file.ignored.is_empty(), "{:?}", from_file.ignored);
    let flag = merged(
        &["--nodeport-addresses=all"],
        "nodePortAddresses: [primary]\n",
    );
    assert_eq!(flag.unwrap().node_port_addresses, NodePortAddresses::All);
    assert!(matches!(
        merged(&["--nodeport-addresses=primary,10.0.0.0/8"], ""),
        Err(ConfigError::NodePortAddresses(_))
    ));
    assert!(matches!(
        FileConfig::parse(
            "kind: KubeProxyConfiguration\nnodePortAddresses: [1]\n",
            Path::new("f")
        ),
        Err(FileError::Field { .. })
    ));
}
