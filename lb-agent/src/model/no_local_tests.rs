//! [`Cache::no_local_endpoints`]: kube-proxy's count of Service ports with
//! a `Local` policy and no endpoint on this node, kept across events.

use lb_fixtures::{Ep, Slice, Svc, SvcPort};

use super::*;

/// A cache for node `node-a`.
fn cache() -> Cache {
    Cache::new(ExcludedCidrs::default(), NodeContext::named("node-a"))
}

/// `web`'s IPv4 slice with ports http and dns.
fn slice(eps: &[Ep]) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    Slice::new("default", "web-4")
        .service("web")
        .port("http", 8080, "TCP")
        .port("dns", 5353, "UDP")
        .endpoints(eps.iter().cloned())
        .build()
}

/// `web` with two ports, of `type_`, both policies as given.
fn web(type_: &str, internal: &str, external: &str) -> Svc {
    Svc::new("default", "web")
        .type_(type_)
        .cluster_ip("10.96.0.20")
        .internal_traffic_policy(internal)
        .external_traffic_policy(external)
        .with_port(SvcPort::new("http", 80, "TCP"))
        .with_port(SvcPort::new("dns", 53, "UDP"))
}

fn no_local(internal: usize, external: usize) -> NoLocalEndpoints {
    NoLocalEndpoints { internal, external }
}

#[test]
fn each_port_of_a_local_policy_without_a_local_endpoint_counts_until_one_appears() {
    let mut c = cache();
    c.apply_service(&web("NodePort", "Local", "Local").build());
    c.apply_slice(&slice(&[Ep::new("10.0.0.1").node("node-b")]));
    c.flush();
    assert_eq!(c.no_local_endpoints(), no_local(2, 2));

    c.apply_slice(&slice(&[
        Ep::new("10.0.0.1").node("node-b"),
        Ep::new("10.0.0.2").node("node-a"),
    ]));
    c.flush();
    assert_eq!(c.no_local_endpoints(), no_local(0, 0));

    // Terminating but serving on this node: used, as kube-proxy does.
    c.apply_slice(&slice(&[
        Ep::new("10.0.0.1").node("node-b"),
        Ep::new("10.0.0.2")
            .node("node-a")
            .ready(false)
            .serving(true)
            .terminating(true),
    ]));
    c.flush();
    assert_eq!(c.no_local_endpoints(), no_local(0, 0));

    c.delete_service("default", "web");
    c.apply_slice(&slice(&[Ep::new("10.0.0.1").node("node-b")]));
    c.flush();
    assert_eq!(c.no_local_endpoints(), no_local(0, 0), "deleted");
}

#[test]
fn only_local_policies_with_endpoints_somewhere_count() {
    let mut c = cache();
    // No endpoint anywhere: kube-proxy rejects, it does not count.
    c.apply_service(&web("NodePort", "Local", "Local").build());
    c.apply_slice(&slice(&[Ep::new("10.0.0.1").node("node-b").ready(false)]));
    c.flush();
    assert_eq!(c.no_local_endpoints(), no_local(0, 0));

    c.apply_slice(&slice(&[Ep::new("10.0.0.1").node("node-b")]));
    c.apply_service(&web("NodePort", "Cluster", "Local").build());
    c.flush();
    assert_eq!(c.no_local_endpoints(), no_local(0, 2));

    c.apply_service(&web("NodePort", "Local", "Cluster").build());
    c.flush();
    assert_eq!(c.no_local_endpoints(), no_local(2, 0));
}

#[test]
fn the_external_policy_counts_only_for_services_reachable_from_outside() {
    let mut c = cache();
    c.apply_service(&web("ClusterIP", "Cluster", "Local").build());
    c.apply_slice(&slice(&[Ep::new("10.0.0.1").node("node-b")]));
    c.flush();
    assert_eq!(c.no_local_endpoints(), no_local(0, 0), "ClusterIP");

    for svc in [
        web("ClusterIP", "Cluster", "Local").external_ips(&["192.0.2.50"]),
        web("LoadBalancer", "Cluster", "Local"),
    ] {
        c.apply_service(&svc.clone().build());
        c.flush();
        assert_eq!(c.no_local_endpoints(), no_local(0, 2), "{svc:?}");
    }
}

#[test]
fn services_add_up_and_each_counts_in_every_family_of_its_cluster_ips() {
    let mut c = cache();
    let other = Svc::new("default", "other")
        .cluster_ip("10.96.0.30")
        .internal_traffic_policy("Local")
        .with_port(SvcPort::new("http", 80, "TCP"));
    c.apply_service(&web("NodePort", "Local", "Local").build());
    c.apply_service(&other.build());
    c.apply_slice(&slice(&[Ep::new("10.0.0.1").node("node-b")]));
    c.apply_slice(
        &Slice::new("default", "other-4")
            .service("other")
            .port("http", 8080, "TCP")
            .endpoint(Ep::new("10.0.0.3").node("node-b"))
            .build(),
    );
    c.flush();
    assert_eq!(c.no_local_endpoints(), no_local(3, 2));

    // Dual-stack: the IPv6 cluster IP's ports count too, once its
    // family has endpoints.
    c.apply_service(
        &web("NodePort", "Local", "Local")
            .cluster_ips(&["10.96.0.20", "fd00:96::20"])
            .build(),
    );
    c.apply_slice(
        &Slice::new("default", "web-6")
            .service("web")
            .address_type("IPv6")
            .port("http", 8080, "TCP")
            .port("dns", 5353, "UDP")
            .endpoint(Ep::new("fd00::1").node("node-b"))
            .build(),
    );
    c.flush();
    assert_eq!(c.no_local_endpoints(), no_local(5, 4));

    c.delete_service("default", "other");
    c.flush();
    assert_eq!(c.no_local_endpoints(), no_local(4, 4));
}
