//! Drops what the model never reads from each object as it arrives, before
//! a (re)list is collected: `managedFields`, most annotations, owner
//! references, a Service's selector, an endpoint's `targetRef`. On a real
//! cluster these are most of an object's size (kubectl's
//! `last-applied-configuration` alone repeats the whole Service), so
//! without this a 10,000-Service list holds them all until the first sync.
//!
//! Kept: whatever the model reads now or will read for traffic policies,
//! topology, affinity and external traffic. Applied to every object from
//! the watchers and from files.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        core::v1::{LoadBalancerStatus, Service, ServiceStatus},
        discovery::v1::{Endpoint, EndpointSlice},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// The one annotation read: when the change behind a slice was triggered,
/// for the network-programming latency.
const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// Keeps name, namespace, labels and resourceVersion; the whole spec but the
/// selector (which pods back it is the slice controller's business); of the
/// status, the load balancer's ingress points.
pub fn service(svc: &mut Service) {
    svc.metadata = identity(std::mem::take(&mut svc.metadata));
    if let Some(spec) = &mut svc.spec {
        spec.selector = None;
    }
    if let Some(status) = svc.status.take() {
        svc.status = Some(ServiceStatus {
            load_balancer: status.load_balancer.map(|lb| LoadBalancerStatus {
                ingress: lb.ingress,
            }),
            ..ServiceStatus::default()
        });
    }
}

/// Keeps name, namespace, labels, resourceVersion and the trigger-time
/// annotation; the address type and ports; of each endpoint its addresses,
/// conditions, node, zone and hints.
pub fn slice(slice: &mut EndpointSlice) {
    let mut meta = std::mem::take(&mut slice.metadata);
    let trigger = meta
        .annotations
        .take()
        .and_then(|mut a| a.remove_entry(TRIGGER_TIME_ANNOTATION));
    slice.metadata = ObjectMeta {
        annotations: trigger.map(|(k, v)| BTreeMap::from([(k, v)])),
        ..identity(meta)
    };
    for ep in slice.endpoints.iter_mut().flatten() {
        let e = std::mem::take(ep);
        *ep = Endpoint {
            addresses: e.addresses,
            conditions: e.conditions,
            node_name: e.node_name,
            zone: e.zone,
            hints: e.hints,
            ..Endpoint::default()
        };
    }
}

/// What names an object and what the label checks read.
fn identity(meta: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        labels: meta.labels,
        resource_version: meta.resource_version,
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;

    use super::*;

    /// Every field of `value` (as JSON paths), for comparing what is left.
    fn paths(value: &serde_json::Value) -> BTreeSet<String> {
        fn walk(prefix: &str, v: &serde_json::Value, out: &mut BTreeSet<String>) {
            match v {
                serde_json::Value::Object(map) if !map.is_empty() => {
                    for (k, v) in map {
                        walk(&format!("{prefix}.{k}"), v, out);
                    }
                }
                serde_json::Value::Array(items) if !items.is_empty() => {
                    for v in items {
                        walk(&format!("{prefix}[]"), v, out);
                    }
                }
                _ => {
                    out.insert(prefix.to_owned());
                }
            }
        }
        let mut out = BTreeSet::new();
        walk("", value, &mut out);
        out
    }

    fn set(paths: &[&str]) -> BTreeSet<String> {
        paths.iter().map(|p| p.to_string()).collect()
    }

    fn managed_fields() -> serde_json::Value {
        json!([{
            "apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubectl",
            "operation": "Update", "time": "2025-05-12T08:30:00Z",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}},
        }])
    }

    #[test]
    fn a_service_keeps_its_spec_and_identity_and_loses_the_rest() {
        let mut svc: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": "web", "namespace": "shop", "uid": "u-1",
                "resourceVersion": "42", "generation": 3,
                "creationTimestamp": "2025-05-12T08:30:00Z",
                "labels": {"app": "web", "service.kubernetes.io/headless": ""},
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                    "endpoints.kubernetes.io/last-change-trigger-time": "2025-05-12T08:30:00Z",
                },
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"}],
                "finalizers": ["service.kubernetes.io/load-balancer-cleanup"],
                "managedFields": managed_fields(),
            },
            "spec": {
                "type": "LoadBalancer",
                "clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1", "fd00::1"],
                "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "PreferDualStack",
                "ports": [{"name": "http", "port": 80, "protocol": "TCP",
                           "targetPort": 8080, "nodePort": 30080}],
                "selector": {"app": "web"},
                "externalIPs": ["192.0.2.1"],
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
                "internalTrafficPolicy": "Local", "externalTrafficPolicy": "Local",
                "healthCheckNodePort": 31000, "trafficDistribution": "PreferClose",
                "loadBalancerSourceRanges": ["192.0.2.0/24"],
            },
            "status": {
                "loadBalancer": {"ingress": [{"ip": "198.51.100.1", "ipMode": "VIP"}]},
                "conditions": [{"type": "Ready", "status": "True", "reason": "R",
                                "message": "m", "lastTransitionTime": "2025-05-12T08:30:00Z"}],
            },
        }))
        .unwrap();
        service(&mut svc);
        let left = serde_json::to_value(&svc).unwrap();
        assert_eq!(
            paths(&left),
            set(&[
                ".apiVersion",
                ".kind",
                ".metadata.labels.app",
                ".metadata.labels.service.kubernetes.io/headless",
                ".metadata.name",
                ".metadata.namespace",
                ".metadata.resourceVersion",
                ".spec.clusterIP",
                ".spec.clusterIPs[]",
                ".spec.externalIPs[]",
                ".spec.externalTrafficPolicy",
                ".spec.healthCheckNodePort",
                ".spec.internalTrafficPolicy",
                ".spec.ipFamilies[]",
                ".spec.ipFamilyPolicy",
                ".spec.loadBalancerSourceRanges[]",
                ".spec.ports[].name",
                ".spec.ports[].nodePort",
                ".spec.ports[].port",
                ".spec.ports[].protocol",
                ".spec.ports[].targetPort",
                ".spec.sessionAffinity",
                ".spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                ".spec.trafficDistribution",
                ".spec.type",
                ".status.loadBalancer.ingress[].ip",
                ".status.loadBalancer.ingress[].ipMode",
            ])
        );
        assert_eq!(left["spec"]["clusterIPs"], json!(["10.96.0.1", "fd00::1"]));
    }

    #[test]
    fn a_slice_keeps_its_endpoints_and_trigger_time_and_loses_the_rest() {
        let mut slice_obj: EndpointSlice = serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "name": "web-abcde", "generateName": "web-", "namespace": "shop",
                "uid": "u-2", "resourceVersion": "43", "generation": 7,
                "labels": {"kubernetes.io/service-name": "web",
                           "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
                "annotations": {
                    "endpoints.kubernetes.io/last-change-trigger-time": "2025-05-12T08:30:00Z",
                    "example.com/other": "x",
                },
                "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "web",
                                     "uid": "u-1", "controller": true}],
                "managedFields": managed_fields(),
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "http"}],
            "endpoints": [{
                "addresses": ["10.0.0.1"],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": "node-1", "zone": "zone-a", "hostname": "web-0",
                "hints": {"forZones": [{"name": "zone-a"}]},
                "targetRef": {"kind": "Pod", "name": "web-0", "namespace": "shop", "uid": "p"},
                "deprecatedTopology": {"kubernetes.io/hostname": "node-1"},
            }, {
                "addresses": ["10.0.0.2"],
            }],
        }))
        .unwrap();
        slice(&mut slice_obj);
        let left = serde_json::to_value(&slice_obj).unwrap();
        assert_eq!(
            paths(&left),
            set(&[
                ".addressType",
                ".apiVersion",
                ".endpoints[].addresses[]",
                ".endpoints[].conditions.ready",
                ".endpoints[].conditions.serving",
                ".endpoints[].conditions.terminating",
                ".endpoints[].hints.forZones[].name",
                ".endpoints[].nodeName",
                ".endpoints[].zone",
                ".kind",
                ".metadata.annotations.endpoints.kubernetes.io/last-change-trigger-time",
                ".metadata.labels.endpointslice.kubernetes.io/managed-by",
                ".metadata.labels.kubernetes.io/service-name",
                ".metadata.name",
                ".metadata.namespace",
                ".metadata.resourceVersion",
                ".ports[].appProtocol",
                ".ports[].name",
                ".ports[].port",
                ".ports[].protocol",
            ])
        );
        // The second endpoint, with nothing but an address, is still there.
        assert_eq!(left["endpoints"][1], json!({"addresses": ["10.0.0.2"]}));
    }

    #[test]
    fn objects_without_the_optional_parts_stay_as_they_are() {
        let mut svc = Service::default();
        service(&mut svc);
        assert_eq!(svc, Service::default());
        let mut s = EndpointSlice::default();
        slice(&mut s);
        assert_eq!(s, EndpointSlice::default());
    }
}
