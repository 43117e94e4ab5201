//! Prometheus metrics, kept with `prometheus-client`. Names mirror
//! kube-proxy's where the meaning matches (`kubeproxy_*`); the rest are ours
//! (`lbagent_*`), plus the standard `process_*` set.
//!
//! Rendered in the OpenMetrics text format, which Prometheus scrapes. A
//! counter is registered without its `_total` suffix: the encoder names the
//! family `x` and its sample `x_total`, so the series keep today's names.

mod datapath;
mod process;
#[cfg(test)]
mod tests;

use std::{
    fmt::Write as _,
    path::PathBuf,
    sync::{Arc, OnceLock, atomic::AtomicU64},
    time::Duration,
};

use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder, text},
    metrics::{family::Family, histogram},
    registry::Registry,
};

use crate::{
    model::{Feature, IpFamily, ObjectKind},
    reconcile::MapEntries,
};

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Histogram bucket bounds in seconds: fine enough below 10 ms to read a
/// per-event latency, wide enough for a 10,000-Service full sync.
const BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_2, 0.000_3, 0.000_5, 0.000_75, 0.001, 0.001_5, 0.002, 0.003, 0.005,
    0.007_5, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

pub type Counter = prometheus_client::metrics::counter::Counter;
pub type Gauge = prometheus_client::metrics::gauge::Gauge<f64, AtomicU64>;

/// A histogram of durations, in seconds, over [`BUCKETS`].
#[derive(Clone, Debug)]
pub struct Histogram(histogram::Histogram);

impl Default for Histogram {
    fn default() -> Self {
        Self(histogram::Histogram::new(BUCKETS.iter().copied()))
    }
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        self.0.observe(d.as_secs_f64());
    }
}

impl EncodeLabelValue for ObjectKind {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

impl EncodeLabelValue for Feature {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

/// kube-proxy's spelling of the families (`v1.IPFamily`).
impl EncodeLabelValue for IpFamily {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        })
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FamilyLabel {
    family: IpFamily,
}

/// A device of the XDP fast path and how it ended up: `native`, or
/// `tc-only` (best-effort, the driver refused).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct XdpLabel {
    pub device: String,
    pub mode: String,
}

/// client-go's labels of `rest_client_requests_total`: the response's
/// status code (`<error>` when none came), the HTTP method, and the
/// apiserver's `host[:port]` as the client's URL names it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub code: String,
    pub method: String,
    pub host: String,
}

/// Every request the kube client made, by [`RequestLabels`].
pub type RestClientRequests = Family<RequestLabels, Counter>;

/// kube-proxy's `traffic_policy` label: which policy is `Local` with no
/// endpoint on this node.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum TrafficPolicy {
    Internal,
    External,
}

impl EncodeLabelValue for TrafficPolicy {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(match self {
            TrafficPolicy::Internal => "internal",
            TrafficPolicy::External => "external",
        })
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TrafficPolicyLabel {
    traffic_policy: TrafficPolicy,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: ObjectKind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FeatureLabel {
    feature: Feature,
}

/// Every metric the agent exports.
#[derive(Debug)]
pub struct Metrics {
    /// Every sync, full or partial.
    pub sync_duration: Histogram,
    pub sync_full_duration: Histogram,
    pub sync_partial_duration: Histogram,
    /// Unix time of the last completed sync.
    pub sync_last_timestamp: Gauge,
    /// EndpointSlice `last-change-trigger-time` to map write.
    pub network_programming: Histogram,
    /// Watch event received by the agent to its map write.
    pub event_to_write: Histogram,
    pub service_changes: Counter,
    pub endpoint_changes: Counter,
    pub services_programmed: Gauge,
    /// Both families' map entries; the per-family split is below.
    frontends_programmed: Gauge,
    backends_programmed: Gauge,
    /// Each family has maps of its own, each sized by the same flags: the
    /// split shows how full each is.
    frontends_per_family: Family<FamilyLabel, Gauge>,
    backends_per_family: Family<FamilyLabel, Gauge>,
    pub excluded_endpoints: Counter,
    invalid_objects: Family<KindLabel, Counter>,
    /// Documents of `--from-file` manifests that could not be read as
    /// objects (bad syntax, too deeply nested), at each read of the files.
    pub skipped_documents: Counter,
    ignored_objects: Family<KindLabel, Counter>,
    unsupported_features: Family<FeatureLabel, Counter>,
    /// Frontends refused by a full map, once per wait for room.
    pub map_full_errors: Counter,
    /// Frontends waiting for room in a full map now.
    pub frontends_waiting_for_room: Gauge,
    pub map_write_errors: Counter,
    /// Connected UDP sockets destroyed because their endpoint stopped serving.
    pub udp_sockets_destroyed: Counter,
    /// Stale UDP sockets that could not be destroyed, and network
    /// namespaces that could not be searched.
    pub udp_socket_destroy_errors: Counter,
    /// `healthCheckNodePort` listeners open now, one per port and family.
    pub service_health_listeners: Gauge,
    /// Devices the tc programs should be on but could not be attached to
    /// (missing, say); retried at each sync and every 5 s.
    pub tc_devices_unattached: Gauge,
    /// 1 per device the XDP fast path was tried on
    /// (`--bpf-lb-acceleration`), labelled with how it ended up.
    pub xdp_attached: Family<XdpLabel, Gauge>,
    /// Veths among the devices the XDP fast path runs on natively: the
    /// frames it sends back out of one reach its peer only if the peer
    /// runs an XDP program of its own (the log names each once).
    pub xdp_veth_devices: Gauge,
    /// Devices native XDP failed on at the last attachment: best-effort
    /// left them on tc (`mode="tc-only"` above); native refuses to run.
    pub xdp_attach_failures: Gauge,
    /// 1 while the maps are programmed without this node's Node: the first
    /// sync's wait for it ended without it.
    pub node_missing: Gauge,
    /// Refusals (401, 403) of the list or watch of every Node: without
    /// it, the node networks of DSR are the endpoints' only.
    pub node_list_refused: Counter,
    /// Entries of `LB4_NODE_NETS` and `LB6_NODE_NETS`, as last written.
    pub node_networks: Gauge,
    /// Pods of this node that opted out of socket load balancing: whose
    /// Service traffic goes per packet at their interface, and those that
    /// cannot (not found, on the host's network, without an address yet).
    pub sock_lb_opted_out_pods: Gauge,
    pub sock_lb_unprogrammed_pods: Gauge,
    /// Pods and Namespaces whose `lb-agent.io/socket-lb` is neither
    /// `enabled` nor `disabled` (read as unset).
    pub sock_lb_invalid_settings: Gauge,
    /// Entries of the tc programs' conntrack (`LB4_CT`, two per flow) and
    /// SNAT (`LB4_NAT`) maps, as the collector last counted them.
    pub conntrack_entries: Gauge,
    pub nat_entries: Gauge,
    /// Conntrack entries the collector deleted: expired, or of flows whose
    /// endpoint stopped serving their frontend.
    pub conntrack_collected: Counter,
    /// Health-check listeners that could not be opened, once per failure
    /// until they open.
    pub service_health_listen_errors: Counter,
    /// Capacity of each family's conntrack map (`--bpf-ct-global-max`)
    /// and SNAT map (`--bpf-nat-global-max`), as loaded.
    pub conntrack_max_entries: Gauge,
    pub nat_max_entries: Gauge,
    /// Syncs that left a change unwritten for a reason other than a full
    /// map (a write or delete failed, or the address bits could not be set).
    pub sync_failures: Counter,
    /// 1 while `/healthz` answers 200; set at each scrape.
    pub ready: Gauge,
    /// client-go's `rest_client_requests_total`: one per HTTP request the
    /// kube client made.
    pub rest_client_requests: RestClientRequests,
    /// kube-proxy's `sync_proxy_rules_no_local_endpoints_total`, by policy.
    no_local_endpoints: Family<TrafficPolicyLabel, Gauge>,
    /// The pinned maps directory whose `LB_STATS` counters are read at
    /// every scrape; set once the programs are loaded.
    pub datapath_maps: Arc<OnceLock<PathBuf>>,
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut m = Self {
            sync_duration: Histogram::default(),
            sync_full_duration: Histogram::default(),
            sync_partial_duration: Histogram::default(),
            sync_last_timestamp: Gauge::default(),
            network_programming: Histogram::default(),
            event_to_write: Histogram::default(),
            service_changes: Counter::default(),
            endpoint_changes: Counter::default(),
            services_programmed: Gauge::default(),
            frontends_programmed: Gauge::default(),
            backends_programmed: Gauge::default(),
            frontends_per_family: Family::default(),
            backends_per_family: Family::default(),
            excluded_endpoints: Counter::default(),
            invalid_objects: Family::default(),
            skipped_documents: Counter::default(),
            ignored_objects: Family::default(),
            unsupported_features: Family::default(),
            map_full_errors: Counter::default(),
            frontends_waiting_for_room: Gauge::default(),
            map_write_errors: Counter::default(),
            udp_sockets_destroyed: Counter::default(),
            udp_socket_destroy_errors: Counter::default(),
            service_health_listeners: Gauge::default(),
            tc_devices_unattached: Gauge::default(),
            xdp_attached: Family::default(),
            xdp_veth_devices: Gauge::default(),
            xdp_attach_failures: Gauge::default(),
            node_missing: Gauge::default(),
            node_list_refused: Counter::default(),
            node_networks: Gauge::default(),
            sock_lb_opted_out_pods: Gauge::default(),
            sock_lb_unprogrammed_pods: Gauge::default(),
            sock_lb_invalid_settings: Gauge::default(),
            conntrack_entries: Gauge::default(),
            nat_entries: Gauge::default(),
            conntrack_collected: Counter::default(),
            service_health_listen_errors: Counter::default(),
            conntrack_max_entries: Gauge::default(),
            nat_max_entries: Gauge::default(),
            sync_failures: Counter::default(),
            ready: Gauge::default(),
            rest_client_requests: Family::default(),
            no_local_endpoints: Family::default(),
            datapath_maps: Arc::default(),
            registry: Registry::default(),
        };
        // Every series exists from the start, at 0, so a rate() over it
        // does not begin at the first event.
        for kind in [ObjectKind::Service, ObjectKind::EndpointSlice] {
            m.invalid(kind);
            m.ignored(kind);
        }
        for feature in Feature::ALL {
            m.unsupported(feature);
        }
        m.set_no_local_endpoints(0, 0);
        m.map_entries(&[IpFamily::V4, IpFamily::V6].map(|family| MapEntries {
            family,
            frontends: 0,
            backends: 0,
        }));
        m.register();
        m
    }
}

impl Metrics {
    /// Malformed objects of `kind` skipped.
    pub fn invalid(&self, kind: ObjectKind) -> Counter {
        self.invalid_objects
            .get_or_create_owned(&KindLabel { kind })
    }

    /// Objects of `kind` deliberately not programmed.
    pub fn ignored(&self, kind: ObjectKind) -> Counter {
        self.ignored_objects
            .get_or_create_owned(&KindLabel { kind })
    }

    /// Services found using `feature`, which is not programmed yet.
    pub fn unsupported(&self, feature: Feature) -> Counter {
        self.unsupported_features
            .get_or_create_owned(&FeatureLabel { feature })
    }

    /// Service ports whose `internalTrafficPolicy` (resp., for Services
    /// reachable from outside, `externalTrafficPolicy`) is `Local` and that
    /// have endpoints, none of them on this node, as of the last sync.
    pub fn set_no_local_endpoints(&self, internal: usize, external: usize) {
        for (policy, n) in [
            (TrafficPolicy::Internal, internal),
            (TrafficPolicy::External, external),
        ] {
            self.no_local_endpoints
                .get_or_create(&TrafficPolicyLabel {
                    traffic_policy: policy,
                })
                .set(n as f64);
        }
    }

    /// The entries of each family's frontends and backends maps, and
    /// their totals.
    pub fn map_entries(&self, entries: &[MapEntries]) {
        let (mut frontends, mut backends) = (0, 0);
        for e in entries {
            let label = FamilyLabel { family: e.family };
            self.frontends_per_family
                .get_or_create(&label)
                .set(e.frontends as f64);
            self.backends_per_family
                .get_or_create(&label)
                .set(e.backends as f64);
            frontends += e.frontends;
            backends += e.backends;
        }
        self.frontends_programmed.set(frontends as f64);
        self.backends_programmed.set(backends as f64);
    }

    /// The whole exposition, in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        text::encode(&mut out, &self.registry)
            .expect("writing to a String fails only if a collector fails, and ours do not");
        out
    }

    /// The registry encodes in registration order. It ends every help text
    /// with a period, so the texts here have none.
    fn register(&mut self) {
        let r = &mut self.registry;
        r.register(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "Time to recompute and write the changed map entries, full or partial",
            self.sync_duration.0.clone(),
        );
        r.register(
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "Time of full syncs (initial lists, relists)",
            self.sync_full_duration.0.clone(),
        );
        r.register(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "Time of partial syncs (the Services touched by events)",
            self.sync_partial_duration.0.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "Unix time of the last completed sync",
            self.sync_last_timestamp.clone(),
        );
        r.register(
            "kubeproxy_network_programming_duration_seconds",
            "From an EndpointSlice's last-change-trigger-time to the map write",
            self.network_programming.0.clone(),
        );
        r.register(
            "lbagent_watch_event_to_map_write_seconds",
            "From the agent receiving a watch event to the map write it caused",
            self.event_to_write.0.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_service_changes",
            "Service add/update/delete events seen",
            self.service_changes.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes",
            "EndpointSlice add/update/delete events seen",
            self.endpoint_changes.clone(),
        );
        r.register(
            "lbagent_services_programmed",
            "Services with at least one programmed frontend",
            self.services_programmed.clone(),
        );
        r.register(
            "lbagent_frontends_programmed",
            "VIP:port/protocol entries in the services maps of both families",
            self.frontends_programmed.clone(),
        );
        r.register(
            "lbagent_backends_programmed",
            "Entries in the backends maps of both families",
            self.backends_programmed.clone(),
        );
        r.register(
            "lbagent_frontends_programmed_per_family",
            "VIP:port/protocol entries in each family's services map (LB4_FRONTENDS, LB6_FRONTENDS)",
            self.frontends_per_family.clone(),
        );
        r.register(
            "lbagent_backends_programmed_per_family",
            "Entries in each family's backends map (LB4_BACKENDS, LB6_BACKENDS)",
            self.backends_per_family.clone(),
        );
        r.register(
            "lbagent_excluded_endpoints",
            "Endpoints newly found in an --exclude-cluster-cidr range and not programmed",
            self.excluded_endpoints.clone(),
        );
        r.register(
            "lbagent_invalid_objects",
            "Malformed objects skipped",
            self.invalid_objects.clone(),
        );
        r.register(
            "lbagent_skipped_documents",
            "Documents of --from-file manifests skipped unread (malformed, or nested too deeply), at each read",
            self.skipped_documents.clone(),
        );
        r.register(
            "lbagent_ignored_objects",
            "Objects deliberately not programmed (headless, ExternalName, labelled for another proxy, FQDN slices)",
            self.ignored_objects.clone(),
        );
        r.register(
            "lbagent_unsupported_features",
            "Services found using a feature that is not programmed yet, once per Service and feature",
            self.unsupported_features.clone(),
        );
        r.register(
            "lbagent_map_full_errors",
            "Frontends refused because a map is full, counted once per wait for room",
            self.map_full_errors.clone(),
        );
        r.register(
            "lbagent_frontends_waiting_for_room",
            "Frontends not written because a map is full; each is written as soon as entries are freed",
            self.frontends_waiting_for_room.clone(),
        );
        r.register(
            "lbagent_map_write_errors",
            "Map writes or deletes that failed for another reason",
            self.map_write_errors.clone(),
        );
        r.register(
            "lbagent_udp_sockets_destroyed",
            "Connected UDP sockets destroyed because the endpoint they were sent to stopped serving",
            self.udp_sockets_destroyed.clone(),
        );
        r.register(
            "lbagent_udp_socket_destroy_errors",
            "Stale UDP sockets not destroyed, and network namespaces not searched, because of an error",
            self.udp_socket_destroy_errors.clone(),
        );
        r.register(
            "lbagent_service_health_check_listeners",
            "healthCheckNodePort listeners open, one per port and family",
            self.service_health_listeners.clone(),
        );
        r.register(
            "lbagent_tc_devices_unattached",
            "Devices the tc programs should be on but could not be attached to (retried every 5 s)",
            self.tc_devices_unattached.clone(),
        );
        r.register(
            "lbagent_xdp_attached",
            "1 per external device the XDP fast path was tried on, by mode: native, or tc-only (best-effort, the driver refused native XDP)",
            self.xdp_attached.clone(),
        );
        r.register(
            "lbagent_xdp_veth_devices",
            "Veths the XDP fast path runs on natively: frames it sends back out of one (XDP_TX) reach its peer only if the peer runs an XDP program of its own, else they are lost (the log names each device once)",
            self.xdp_veth_devices.clone(),
        );
        r.register(
            "lbagent_xdp_attach_failures",
            "Devices native XDP could not be attached to at the last attachment (--bpf-lb-acceleration): best-effort left them on tc only (their traffic from outside takes the slower path), native makes the agent refuse to run",
            self.xdp_attach_failures.clone(),
        );
        r.register(
            "lbagent_node_missing",
            "1 while the maps are programmed without this node's Node (the first sync waited 30 s for it in vain, or it cannot be read): no zone for topology hints, no primary addresses for NodePorts; 0 once it is seen",
            self.node_missing.clone(),
        );
        r.register(
            "lbagent_node_list_refused",
            "Refusals (401, 403) to list or watch every Node (the agent's ClusterRole lacks it): meanwhile DSR knows a node's addresses and pod CIDRs only from the endpoints' node names, and a flow from a node to a backend on that same node may fail (logged once)",
            self.node_list_refused.clone(),
        );
        r.register(
            "lbagent_node_networks",
            "Entries of LB4_NODE_NETS and LB6_NODE_NETS as last written: every Node's addresses and pod CIDRs and every DSR endpoint, each with its node's number, which a DSR flow's client and backend are looked up in (the same node: SNAT instead)",
            self.node_networks.clone(),
        );
        r.register(
            "lbagent_sock_lb_opted_out_pods",
            "Pods of this node that opted out of socket load balancing (lb-agent.io/socket-lb: disabled on the Pod or its Namespace, or --bpf-lb-sock-hostns-only) and whose Service traffic is translated per packet at their interface",
            self.sock_lb_opted_out_pods.clone(),
        );
        r.register(
            "lbagent_sock_lb_unprogrammed_pods",
            "Pods of this node that opted out of socket load balancing but cannot be served so (their interface not found, on the host's network, no address yet): they keep socket load balancing; each is logged",
            self.sock_lb_unprogrammed_pods.clone(),
        );
        r.register(
            "lbagent_sock_lb_invalid_settings",
            "Pods of this node and Namespaces whose lb-agent.io/socket-lb label or annotation is neither enabled nor disabled (read as unset; each is logged)",
            self.sock_lb_invalid_settings.clone(),
        );
        r.register(
            "lbagent_conntrack_entries",
            "Entries of the tc programs' conntrack map (two per flow from outside the node), as last counted (every 30 s and after syncs that stop an endpoint)",
            self.conntrack_entries.clone(),
        );
        r.register(
            "lbagent_nat_entries",
            "Entries of the tc programs' SNAT map (one per SNATed flow), as last counted",
            self.nat_entries.clone(),
        );
        r.register(
            "lbagent_conntrack_collected",
            "Conntrack entries deleted: expired, or of flows whose endpoint stopped serving",
            self.conntrack_collected.clone(),
        );
        r.register(
            "lbagent_service_health_check_listen_errors",
            "healthCheckNodePort listeners that could not be opened (retried every 5 s), once per failure until they open",
            self.service_health_listen_errors.clone(),
        );
        r.register(
            "lbagent_conntrack_max_entries",
            "Capacity of each family's conntrack map (--bpf-ct-global-max); lbagent_conntrack_entries counts both families",
            self.conntrack_max_entries.clone(),
        );
        r.register(
            "lbagent_nat_max_entries",
            "Capacity of each family's SNAT map (--bpf-nat-global-max); lbagent_nat_entries counts both families",
            self.nat_max_entries.clone(),
        );
        r.register(
            "lbagent_sync_failures",
            "Syncs that left a change unwritten for a reason other than a full map (a map write or delete failed, or the frontend address bits could not be set); what failed is retried",
            self.sync_failures.clone(),
        );
        r.register(
            "lbagent_ready",
            "1 while /healthz answers 200 (the readiness probe): the first sync is done, no change has waited more than 60 s, this Node is not being deleted",
            self.ready.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "Service ports with a Local traffic policy and endpoints, none of them on this node, as of the last sync (external: only Services reachable from outside)",
            self.no_local_endpoints.clone(),
        );
        r.register(
            "rest_client_requests",
            "Number of HTTP requests to the apiserver, partitioned by status code (<error> without a response), method, and host",
            self.rest_client_requests.clone(),
        );
        r.register_collector(Box::new(datapath::Events(self.datapath_maps.clone())));
        r.register_collector(Box::new(process::Process));
    }
}
