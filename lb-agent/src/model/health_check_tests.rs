//! `healthCheckNodePort`: which Services have one, and the local ready
//! endpoints it reports (kube-proxy's `LocalReadyEndpoints`).

use lb_fixtures::{Ep, Slice, Svc, SvcPort};

use super::*;

fn cache() -> Cache {
    Cache::new(ExcludedCidrs::default(), NodeContext::named("node-a"))
}

/// Dual-stack LoadBalancer `lb` with eTP Local and health-check port 32000.
fn local_lb() -> Svc {
    Svc::new("default", "lb")
        .type_("LoadBalancer")
        .cluster_ips(&["10.96.0.30", "fd00:96::30"])
        .external_traffic_policy("Local")
        .health_check_node_port(32000)
        .with_port(SvcPort::new("http", 80, "TCP").node_port(30080))
        .with_port(SvcPort::new("dns", 53, "UDP").node_port(30053))
}

fn check(c: &mut Cache) -> Option<HealthCheck> {
    c.flush();
    c.health_check(&ObjectRef::service("default", "lb"))
}

#[test]
fn counts_distinct_ready_local_addresses_per_family() {
    let mut c = cache();
    c.apply_service(&local_lb().build());
    assert_eq!(
        check(&mut c),
        Some(HealthCheck {
            port: 32000,
            v4: Some(0),
            v6: Some(0)
        }),
        "no slices yet: a listener that answers 503"
    );
    // The same address in two slices (one per port) counts once; other
    // nodes', not-ready and terminating endpoints do not count, even a
    // terminating one that still serves.
    for (name, port, proto) in [("lb-http", 8080, "TCP"), ("lb-dns", 5353, "UDP")] {
        let s = Slice::new("default", name)
            .service("lb")
            .port("", port, proto)
            .endpoints([
                Ep::new("10.1.0.1").ready(true).node("node-a"),
                Ep::new("10.1.0.2").node("node-a"),
                Ep::new("10.1.0.3").ready(true).node("node-b"),
                Ep::new("10.1.0.4").ready(false).node("node-a"),
                Ep::new("10.1.0.5")
                    .ready(false)
                    .serving(true)
                    .terminating(true)
                    .node("node-a"),
            ]);
        c.apply_slice(&s.build());
    }
    let v6 = Slice::new("default", "lb-v6")
        .service("lb")
        .address_type("IPv6")
        .port("http", 8080, "TCP")
        .endpoints([Ep::new("fd00:1::1").ready(true).node("node-a")]);
    c.apply_slice(&v6.build());
    assert_eq!(
        check(&mut c),
        Some(HealthCheck {
            port: 32000,
            v4: Some(2),
            v6: Some(1)
        })
    );
}

#[test]
fn a_slice_without_ports_contributes_nothing() {
    let mut c = cache();
    c.apply_service(&local_lb().build());
    let s = Slice::new("default", "lb-1")
        .service("lb")
        .endpoints([Ep::new("10.1.0.1").ready(true).node("node-a")]);
    c.apply_slice(&s.build());
    assert_eq!(check(&mut c).and_then(|h| h.v4), Some(0));
}

#[test]
fn only_the_families_of_the_service_are_served() {
    let mut c = cache();
    c.apply_service(&local_lb().cluster_ips(&["10.96.0.30"]).build());
    assert_eq!(
        check(&mut c),
        Some(HealthCheck {
            port: 32000,
            v4: Some(0),
            v6: None
        })
    );
}

#[test]
fn only_local_policy_load_balancers_with_a_port_have_one() {
    let cases = [
        ("a NodePort Service", local_lb().type_("NodePort")),
        (
            "externalTrafficPolicy Cluster",
            local_lb().external_traffic_policy("Cluster"),
        ),
        (
            "no healthCheckNodePort",
            Svc::new("default", "lb")
                .type_("LoadBalancer")
                .cluster_ip("10.96.0.30")
                .external_traffic_policy("Local")
                .port("http", 80, "TCP"),
        ),
    ];
    for (what, svc) in cases {
        let mut c = cache();
        c.apply_service(&svc.build());
        assert_eq!(check(&mut c), None, "{what}");
    }
    let mut c = cache();
    c.apply_service(&local_lb().build());
    assert!(check(&mut c).is_some());
    c.delete_service("default", "lb");
    assert_eq!(check(&mut c), None, "deleted");
}
