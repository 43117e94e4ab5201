use std::{collections::BTreeSet, time::SystemTime};

use super::*;

/// The value of the sample whose name and labels are exactly `sample`, read
/// as the integration tests read `/metrics`.
fn sample(text: &str, sample: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        l.strip_prefix(sample)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

fn families(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().expect("a name"))
        .collect()
}

#[test]
fn histogram_keeps_the_buckets_is_cumulative_and_counts_everything() {
    let m = Metrics::default();
    m.sync_duration.observe(Duration::from_micros(40));
    m.sync_duration.observe(Duration::from_millis(4));
    m.sync_duration.observe(Duration::from_secs(100));
    let text = m.render();
    let name = "kubeproxy_sync_proxy_rules_duration_seconds";
    let buckets: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{name}_bucket{{le=\"")))
        .map(|l| {
            let (le, n) = l.split_once("\"} ").expect("le=\"..\"} n");
            (le.parse().expect("a bound"), n.parse().expect("a count"))
        })
        .collect();
    let bounds: Vec<f64> = buckets.iter().map(|(le, _)| *le).collect();
    let expected: Vec<f64> = BUCKETS.iter().copied().chain([f64::INFINITY]).collect();
    assert_eq!(bounds, expected, "{text}");
    let count = |bound: f64| buckets.iter().find(|(le, _)| *le == bound).map(|(_, n)| *n);
    assert_eq!(count(0.000_05), Some(1.0), "{text}");
    assert_eq!(count(0.005), Some(2.0), "{text}");
    assert_eq!(count(30.0), Some(2.0), "{text}");
    assert_eq!(count(f64::INFINITY), Some(3.0), "{text}");
    assert_eq!(sample(&text, &format!("{name}_count")), Some(3.0));
    let sum = sample(&text, &format!("{name}_sum")).expect("a sum");
    assert!((sum - 100.004_04).abs() < 1e-9, "{sum}");
}

#[test]
fn render_names_every_family_once_with_every_label() {
    let m = Metrics::default();
    m.invalid(ObjectKind::EndpointSlice).inc();
    m.unsupported(Feature::Sctp).inc();
    m.unsupported(Feature::Sctp).inc();
    m.service_changes.inc();
    let eth0 = XdpLabel {
        device: "eth0".to_owned(),
        mode: "native".to_owned(),
    };
    m.xdp_attached.get_or_create(&eth0).set(1.0);
    m.map_entries(&[
        MapEntries {
            family: IpFamily::V4,
            frontends: 4,
            backends: 3,
        },
        MapEntries {
            family: IpFamily::V6,
            frontends: 2,
            backends: 1,
        },
    ]);
    let text = m.render();

    let names = families(&text);
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(unique.len(), names.len(), "a family twice:\n{text}");
    let expected = BTreeSet::from([
        "kubeproxy_sync_proxy_rules_duration_seconds",
        "kubeproxy_sync_full_proxy_rules_duration_seconds",
        "kubeproxy_sync_partial_proxy_rules_duration_seconds",
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        "kubeproxy_network_programming_duration_seconds",
        "lbagent_watch_event_to_map_write_seconds",
        "kubeproxy_sync_proxy_rules_service_changes",
        "kubeproxy_sync_proxy_rules_endpoint_changes",
        "lbagent_services_programmed",
        "lbagent_frontends_programmed",
        "lbagent_backends_programmed",
        "lbagent_frontends_programmed_per_family",
        "lbagent_backends_programmed_per_family",
        "lbagent_excluded_endpoints",
        "lbagent_invalid_objects",
        "lbagent_skipped_documents",
        "lbagent_ignored_objects",
        "lbagent_unsupported_features",
        "lbagent_map_full_errors",
        "lbagent_frontends_waiting_for_room",
        "lbagent_map_write_errors",
        "lbagent_udp_sockets_destroyed",
        "lbagent_udp_socket_destroy_errors",
        "lbagent_service_health_check_listeners",
        "lbagent_service_health_check_listen_errors",
        "lbagent_tc_devices_unattached",
        "lbagent_xdp_attached",
        "lbagent_xdp_veth_devices",
        "lbagent_xdp_attach_failures",
        "lbagent_node_missing",
        "lbagent_node_list_refused",
        "lbagent_node_networks",
        "lbagent_sock_lb_opted_out_pods",
        "lbagent_sock_lb_unprogrammed_pods",
        "lbagent_sock_lb_invalid_settings",
        "lbagent_conntrack_entries",
        "lbagent_nat_entries",
        "lbagent_conntrack_collected",
        "lbagent_conntrack_max_entries",
        "lbagent_nat_max_entries",
        "lbagent_sync_failures",
        "lbagent_ready",
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
        // rest_client_requests: absent until the kube client's first request.
        "process_cpu_seconds",
        "process_virtual_memory_bytes",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
        "process_open_fds",
        "process_max_fds",
    ]);
    assert_eq!(unique, expected, "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.contains(
            "# HELP lbagent_map_full_errors Frontends refused because a map is full, counted once per wait for room.\n\
             # TYPE lbagent_map_full_errors counter\n\
             lbagent_map_full_errors_total 0\n"
        ),
        "{text}"
    );

    let value = |s: &str| sample(&text, s).unwrap_or_else(|| panic!("no {s} in\n{text}"));
    assert_eq!(
        value(r#"lbagent_xdp_attached{device="eth0",mode="native"}"#),
        1.0
    );
    assert_eq!(
        value("kubeproxy_sync_proxy_rules_service_changes_total"),
        1.0
    );
    assert_eq!(
        value("kubeproxy_sync_proxy_rules_endpoint_changes_total"),
        0.0
    );
    assert_eq!(value("lbagent_frontends_programmed"), 6.0);
    assert_eq!(value("lbagent_backends_programmed"), 4.0);
    assert_eq!(
        value(r#"lbagent_frontends_programmed_per_family{family="IPv4"}"#),
        4.0
    );
    assert_eq!(
        value(r#"lbagent_frontends_programmed_per_family{family="IPv6"}"#),
        2.0
    );
    assert_eq!(
        value(r#"lbagent_backends_programmed_per_family{family="IPv4"}"#),
        3.0
    );
    assert_eq!(
        value(r#"lbagent_backends_programmed_per_family{family="IPv6"}"#),
        1.0
    );
    assert_eq!(
        value(r#"lbagent_invalid_objects_total{kind="EndpointSlice"}"#),
        1.0
    );
    assert_eq!(
        value(r#"lbagent_invalid_objects_total{kind="Service"}"#),
        0.0
    );
    assert_eq!(
        value(r#"lbagent_ignored_objects_total{kind="Service"}"#),
        0.0
    );
    assert_eq!(
        value(r#"lbagent_ignored_objects_total{kind="EndpointSlice"}"#),
        0.0
    );
    for feature in Feature::ALL {
        let n = value(&format!(
            "lbagent_unsupported_features_total{{feature=\"{}\"}}",
            feature.as_str()
        ));
        let want = if feature == Feature::Sctp { 2.0 } else { 0.0 };
        assert_eq!(n, want, "{feature}");
    }
    assert_eq!(
        text.matches("lbagent_unsupported_features_total{").count(),
        Feature::ALL.len()
    );
}

#[test]
fn process_metrics_describe_this_process() {
    let text = Metrics::default().render();
    let value = |s: &str| sample(&text, s).unwrap_or_else(|| panic!("no {s} in\n{text}"));
    let open = value("process_open_fds");
    assert!(open >= 3.0 && open <= value("process_max_fds"), "{text}");
    let rss = value("process_resident_memory_bytes");
    assert!(
        rss > 0.0 && rss <= value("process_virtual_memory_bytes"),
        "{text}"
    );
    assert!(value("process_cpu_seconds_total") >= 0.0, "{text}");
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    let start = value("process_start_time_seconds");
    // This test process started before now, and not days ago.
    assert!(
        start <= now + 1.0 && start > now - 86_400.0,
        "{start} vs {now}"
    );
}

#[test]
fn datapath_events_are_left_out_while_their_map_cannot_be_read() {
    let m = Metrics::default();
    assert!(!m.render().contains("lbagent_datapath_events"));
    m.datapath_maps
        .set(PathBuf::from("/nonexistent/lb-agent/maps"))
        .expect("set once");
    let text = m.render();
    assert!(!text.contains("lbagent_datapath_events"), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
}

#[test]
fn no_local_endpoints_start_at_zero_in_both_policies_and_follow_each_sync() {
    let m = Metrics::default();
    let internal =
        r#"kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy="internal"}"#;
    let external =
        r#"kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy="external"}"#;
    let text = m.render();
    assert_eq!(sample(&text, internal), Some(0.0), "{text}");
    assert_eq!(sample(&text, external), Some(0.0), "{text}");
    assert!(
        text.contains("# TYPE kubeproxy_sync_proxy_rules_no_local_endpoints_total gauge\n"),
        "kube-proxy's gauge keeps its name: {text}"
    );
    m.set_no_local_endpoints(3, 1);
    let text = m.render();
    assert_eq!(sample(&text, internal), Some(3.0), "{text}");
    assert_eq!(sample(&text, external), Some(1.0), "{text}");
    m.set_no_local_endpoints(0, 2);
    let text = m.render();
    assert_eq!(sample(&text, internal), Some(0.0), "{text}");
    assert_eq!(sample(&text, external), Some(2.0), "{text}");
}

#[test]
fn rest_client_requests_are_a_counter_by_code_method_and_host() {
    let m = Metrics::default();
    let labels = RequestLabels {
        code: "200".to_owned(),
        method: "GET".to_owned(),
        host: "10.96.0.1:443".to_owned(),
    };
    m.rest_client_requests.get_or_create(&labels).inc_by(2);
    let text = m.render();
    assert!(
        text.contains("# TYPE rest_client_requests counter\n"),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"rest_client_requests_total{code="200",method="GET",host="10.96.0.1:443"}"#
        ),
        Some(2.0),
        "{text}"
    );
}
