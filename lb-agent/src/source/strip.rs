//! Services and EndpointSlices deserialized with only the fields the model
//! reads: what is dropped (`managedFields`, most annotations, owner
//! references, a Service's selector, an endpoint's `targetRef`, ...) is
//! skipped by the parser and never allocated. On a real cluster that is
//! most of an object (kubectl's `last-applied-configuration` alone repeats
//! the whole Service), and a 10,000-Service list would otherwise hold it
//! all until the first sync. Parsing the kept fields only, rather than
//! parsing everything and dropping parts, also leaves no holes in the heap
//! for the model's allocations to fill and pin once the list is freed.
//!
//! Kept: whatever the model reads now or will read for traffic policies,
//! topology, affinity and external traffic. Used by the watchers and the
//! file source alike; [`Kept`] stands in for the Kubernetes type in both.
//! Of the Nodes the watcher of every Node reads, only their names,
//! addresses and pod CIDRs (a Node's status, with its images and
//! conditions, is most of it, and changes at every heartbeat).

use std::{collections::BTreeMap, fmt};

use k8s_openapi::{
    api::{
        core::v1::{
            LoadBalancerStatus, Node, NodeAddress, NodeSpec, NodeStatus, Service, ServiceSpec,
            ServiceStatus,
        },
        discovery::v1::{Endpoint, EndpointConditions, EndpointHints, EndpointPort, EndpointSlice},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use serde::{Deserialize, Deserializer, de};

use super::TRIGGER_TIME_ANNOTATION;
use crate::model::{
    CILIUM_FORWARDING_MODE_ANNOTATION, CILIUM_LB_ALGORITHM_ANNOTATION, FORWARDING_MODE_ANNOTATION,
    LB_ALGORITHM_ANNOTATION,
    weight::{CILIUM_WEIGHT_ANNOTATION, WEIGHT_ANNOTATION},
};

/// The annotations kept (of any object): the others' keys are compared in
/// place and their values skipped unread.
const KEPT_ANNOTATIONS: [&str; 7] = [
    TRIGGER_TIME_ANNOTATION,
    LB_ALGORITHM_ANNOTATION,
    CILIUM_LB_ALGORITHM_ANNOTATION,
    FORWARDING_MODE_ANNOTATION,
    CILIUM_FORWARDING_MODE_ANNOTATION,
    WEIGHT_ANNOTATION,
    CILIUM_WEIGHT_ANNOTATION,
];

/// A Kubernetes object of type `K` holding only the kept fields; the same
/// resource as `K` for the API.
#[derive(Clone, Debug, Default, PartialEq)]
#[repr(transparent)]
pub struct Kept<K>(pub K);

impl<K: k8s_openapi::Resource> k8s_openapi::Resource for Kept<K> {
    const API_VERSION: &'static str = K::API_VERSION;
    const GROUP: &'static str = K::GROUP;
    const KIND: &'static str = K::KIND;
    const VERSION: &'static str = K::VERSION;
    const URL_PATH_SEGMENT: &'static str = K::URL_PATH_SEGMENT;
    type Scope = K::Scope;
}

impl<K: k8s_openapi::Metadata<Ty = ObjectMeta>> k8s_openapi::Metadata for Kept<K> {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        self.0.metadata()
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        self.0.metadata_mut()
    }
}

/// Of a Service: name, namespace, labels, resourceVersion, the
/// lb-algorithm and forwarding-mode annotations; the whole spec
/// but the selector (which pods back it is the slice controller's
/// business); of the status, the load balancer's ingress points.
fn service<'de, D: Deserializer<'de>>(d: D, kind: KindField) -> Result<Service, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Wire {
        api_version: Option<String>,
        kind: Option<String>,
        metadata: Option<Meta>,
        spec: Option<ServiceSpec>,
        status: Option<Status>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Status {
        load_balancer: Option<LoadBalancerStatus>,
    }
    let w = Wire::deserialize(d)?;
    check_type::<Service, D::Error>(w.api_version, w.kind, kind)?;
    Ok(Service {
        metadata: w.metadata.map(Meta::into_object_meta).unwrap_or_default(),
        spec: w.spec.map(|spec| ServiceSpec {
            selector: None,
            ..spec
        }),
        status: w.status.map(|s| ServiceStatus {
            load_balancer: s.load_balancer.map(|lb| LoadBalancerStatus {
                ingress: lb.ingress,
            }),
            ..ServiceStatus::default()
        }),
    })
}

/// Of an EndpointSlice: name, namespace, labels, resourceVersion and the
/// trigger-time annotation; the address type and ports; of each endpoint
/// its addresses, conditions, node, zone and hints.
fn endpoint_slice<'de, D: Deserializer<'de>>(
    d: D,
    kind: KindField,
) -> Result<EndpointSlice, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Wire {
        api_version: Option<String>,
        kind: Option<String>,
        metadata: Option<Meta>,
        address_type: Option<String>,
        endpoints: Option<Vec<WireEndpoint>>,
        ports: Option<Vec<EndpointPort>>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct WireEndpoint {
        addresses: Option<Vec<String>>,
        conditions: Option<EndpointConditions>,
        node_name: Option<String>,
        zone: Option<String>,
        hints: Option<EndpointHints>,
    }
    let w = Wire::deserialize(d)?;
    check_type::<EndpointSlice, D::Error>(w.api_version, w.kind, kind)?;
    let endpoints = w.endpoints.map(|eps| {
        eps.into_iter()
            .map(|e| Endpoint {
                addresses: e.addresses.unwrap_or_default(),
                conditions: e.conditions,
                node_name: e.node_name,
                zone: e.zone,
                hints: e.hints,
                ..Endpoint::default()
            })
            .collect()
    });
    Ok(EndpointSlice {
        metadata: w.metadata.map(Meta::into_object_meta).unwrap_or_default(),
        address_type: w.address_type.unwrap_or_default(),
        endpoints,
        ports: w.ports,
    })
}

/// Of a Node: name and resourceVersion, `spec.podCIDR(s)` and
/// `status.addresses`.
fn node<'de, D: Deserializer<'de>>(d: D, kind: KindField) -> Result<Node, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Wire {
        api_version: Option<String>,
        kind: Option<String>,
        metadata: Option<NodeMeta>,
        spec: Option<Spec>,
        status: Option<Status>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct NodeMeta {
        name: Option<String>,
        resource_version: Option<String>,
    }
    #[derive(Deserialize)]
    struct Spec {
        #[serde(rename = "podCIDR")]
        pod_cidr: Option<String>,
        #[serde(rename = "podCIDRs")]
        pod_cidrs: Option<Vec<String>>,
    }
    #[derive(Deserialize)]
    struct Status {
        addresses: Option<Vec<NodeAddress>>,
    }
    let w = Wire::deserialize(d)?;
    check_type::<Node, D::Error>(w.api_version, w.kind, kind)?;
    Ok(Node {
        metadata: w
            .metadata
            .map(|m| ObjectMeta {
                name: m.name,
                resource_version: m.resource_version,
                ..ObjectMeta::default()
            })
            .unwrap_or_default(),
        spec: w.spec.map(|s| NodeSpec {
            pod_cidr: s.pod_cidr,
            pod_cidrs: s.pod_cidrs,
            ..NodeSpec::default()
        }),
        status: w.status.map(|s| NodeStatus {
            addresses: s.addresses,
            ..NodeStatus::default()
        }),
    })
}

impl<'de> Deserialize<'de> for Kept<Node> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        node(d, KindField::Optional).map(Kept)
    }
}

impl<'de> Deserialize<'de> for Kept<Service> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        service(d, KindField::Optional).map(Kept)
    }
}

impl<'de> Deserialize<'de> for Kept<EndpointSlice> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        endpoint_slice(d, KindField::Optional).map(Kept)
    }
}

/// [`Kept`] read from a document on its own, which names its `kind`.
/// The file source's fast path takes a document for a Service or a slice
/// from a `kind:` line at its first column, which may lie inside a
/// multi-line string: the object must then say so itself.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Whole<K>(pub K);

impl<'de> Deserialize<'de> for Whole<Service> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        service(d, KindField::Required).map(Whole)
    }
}

impl<'de> Deserialize<'de> for Whole<EndpointSlice> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        endpoint_slice(d, KindField::Required).map(Whole)
    }
}

/// Whether an object must name its `kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KindField {
    /// List items and watch events may leave it out.
    Optional,
    Required,
}

/// As the Kubernetes types do: `apiVersion` and `kind` may be absent (list
/// items), but if present must be this type's; `kind` must be there when
/// `required`.
fn check_type<K: k8s_openapi::Resource, E: de::Error>(
    api_version: Option<String>,
    kind: Option<String>,
    field: KindField,
) -> Result<(), E> {
    if field == KindField::Required && kind.is_none() {
        return Err(E::missing_field("kind"));
    }
    for (value, want) in [(api_version, K::API_VERSION), (kind, K::KIND)] {
        if let Some(v) = value.filter(|v| v != want) {
            return Err(E::invalid_value(de::Unexpected::Str(&v), &want));
        }
    }
    Ok(())
}

/// The kept part of an object's metadata.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    resource_version: Option<String>,
    #[serde(default, deserialize_with = "kept_annotations")]
    annotations: Option<BTreeMap<String, String>>,
}

impl Meta {
    fn into_object_meta(self) -> ObjectMeta {
        ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            labels: self.labels,
            resource_version: self.resource_version,
            annotations: self.annotations,
            ..ObjectMeta::default()
        }
    }
}

/// The annotations, of which only [`KEPT_ANNOTATIONS`] are kept.
fn kept_annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct IsKept(Option<&'static str>);
    impl<'de> Deserialize<'de> for IsKept {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl de::Visitor<'_> for V {
                type Value = IsKept;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("an annotation key")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<IsKept, E> {
                    Ok(IsKept(KEPT_ANNOTATIONS.into_iter().find(|k| *k == v)))
                }
            }
            d.deserialize_str(V)
        }
    }
    struct Annotations;
    impl<'de> de::Visitor<'de> for Annotations {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of annotations")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut kept: Option<BTreeMap<String, String>> = None;
            while let Some(IsKept(key)) = map.next_key()? {
                match key {
                    Some(key) => {
                        let value: String = map.next_value()?;
                        kept.get_or_insert_default().insert(key.to_owned(), value);
                    }
                    None => {
                        map.next_value::<de::IgnoredAny>()?;
                    }
                }
            }
            Ok(kept)
        }
    }
    d.deserialize_option(Annotations)
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

    fn full_service() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": "web", "namespace": "shop", "uid": "u-1",
                "resourceVersion": "42", "generation": 3,
                "creationTimestamp": "2025-05-12T08:30:00Z",
                "labels": {"app": "web", "service.kubernetes.io/headless": ""},
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                    "service.cilium.io/lb-algorithm": "maglev",
                    "service.cilium.io/forwarding-mode": "dsr",
                    "service.cilium.io/other": "x",
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
        })
    }

    #[test]
    fn a_service_keeps_its_spec_and_identity_and_loses_the_rest() {
        let kept: Kept<Service> = serde_json::from_value(full_service()).unwrap();
        let left = serde_json::to_value(&kept.0).unwrap();
        assert_eq!(
            paths(&left),
            set(&[
                ".apiVersion",
                ".kind",
                ".metadata.annotations.service.cilium.io/forwarding-mode",
                ".metadata.annotations.service.cilium.io/lb-algorithm",
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
        // What is kept is what the full type reads.
        let full: Service = serde_json::from_value(full_service()).unwrap();
        assert_eq!(
            kept.0.spec.as_ref().unwrap().ports,
            full.spec.unwrap().ports
        );
        assert_eq!(kept.0.metadata.labels, full.metadata.labels);
    }

    #[test]
    fn a_slice_keeps_its_endpoints_trigger_time_and_weights_and_loses_the_rest() {
        let kept: Kept<EndpointSlice> = serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "name": "web-abcde", "generateName": "web-", "namespace": "shop",
                "uid": "u-2", "resourceVersion": "43", "generation": 7,
                "labels": {"kubernetes.io/service-name": "web",
                           "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
                "annotations": {
                    "example.com/before": "x",
                    "endpoints.kubernetes.io/last-change-trigger-time": "2025-05-12T08:30:00Z",
                    "lb-agent.io/weight": "0",
                    "service.cilium.io/weight": "50",
                    "example.com/after": "y",
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
        let left = serde_json::to_value(&kept.0).unwrap();
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
                ".metadata.annotations.lb-agent.io/weight",
                ".metadata.annotations.service.cilium.io/weight",
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
        assert_eq!(
            left["metadata"]["annotations"][TRIGGER_TIME_ANNOTATION],
            "2025-05-12T08:30:00Z"
        );
        // The second endpoint, with nothing but an address, is still there.
        assert_eq!(left["endpoints"][1], json!({"addresses": ["10.0.0.2"]}));
    }

    #[test]
    fn a_node_keeps_its_name_addresses_and_pod_cidrs_and_loses_the_rest() {
        let full = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "node-2", "uid": "u-3", "resourceVersion": "44",
                "labels": {"topology.kubernetes.io/zone": "zone-a", "kubernetes.io/os": "linux"},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                "managedFields": managed_fields(),
            },
            "spec": {
                "podCIDR": "10.42.2.0/24", "podCIDRs": ["10.42.2.0/24", "fd42:2::/64"],
                "providerID": "kind://docker/kind/node-2",
                "taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}],
            },
            "status": {
                "addresses": [{"type": "InternalIP", "address": "192.168.57.2"},
                              {"type": "Hostname", "address": "node-2"}],
                "capacity": {"cpu": "2", "memory": "4Gi"},
                "conditions": [{"type": "Ready", "status": "True",
                                "lastHeartbeatTime": "2025-05-12T08:30:00Z"}],
                "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320368}],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "architecture": "amd64",
                             "bootID": "b", "containerRuntimeVersion": "c", "kernelVersion": "k",
                             "kubeProxyVersion": "", "machineID": "m", "operatingSystem": "linux",
                             "osImage": "o", "systemUUID": "s"},
            },
        });
        let kept: Kept<Node> = serde_json::from_value(full.clone()).unwrap();
        let left = serde_json::to_value(&kept.0).unwrap();
        assert_eq!(
            paths(&left),
            set(&[
                ".apiVersion",
                ".kind",
                ".metadata.name",
                ".metadata.resourceVersion",
                ".spec.podCIDR",
                ".spec.podCIDRs[]",
                ".status.addresses[].address",
                ".status.addresses[].type",
            ])
        );
        // What the model reads of it is what it reads of the whole Node.
        let whole: Node = serde_json::from_value(full).unwrap();
        assert_eq!(
            super::super::NodeNetworks::of(&kept.0),
            super::super::NodeNetworks::of(&whole)
        );
        let empty: Kept<Node> = serde_json::from_value(json!({"metadata": null})).unwrap();
        assert_eq!(empty.0, Node::default());
        assert!(serde_json::from_value::<Kept<Node>>(json!({"kind": "Service"})).is_err());
    }

    #[test]
    fn missing_and_null_parts_read_as_the_kubernetes_types_read_them() {
        for (svc, slice) in [
            (json!({}), json!({})),
            (
                json!({"metadata": null, "spec": null, "status": null}),
                json!({"metadata": {"annotations": null}, "addressType": null,
                       "endpoints": [{}], "ports": null}),
            ),
        ] {
            let full: Service = serde_json::from_value(svc.clone()).unwrap();
            let kept: Kept<Service> = serde_json::from_value(svc).unwrap();
            assert_eq!(kept.0, full);
            let full: EndpointSlice = serde_json::from_value(slice.clone()).unwrap();
            let kept: Kept<EndpointSlice> = serde_json::from_value(slice).unwrap();
            assert_eq!(kept.0, full);
        }
    }

    #[test]
    fn another_api_version_or_kind_is_refused_as_the_kubernetes_types_refuse_it() {
        let svc = |api: &str, kind: &str| json!({"apiVersion": api, "kind": kind});
        for (doc, ok) in [
            (svc("v1", "Service"), true),
            (svc("v2", "Service"), false),
            (svc("v1", "Endpoints"), false),
        ] {
            assert_eq!(serde_json::from_value::<Service>(doc.clone()).is_ok(), ok);
            assert_eq!(serde_json::from_value::<Kept<Service>>(doc).is_ok(), ok);
        }
        let beta = json!({"apiVersion": "discovery.k8s.io/v1beta1", "kind": "EndpointSlice"});
        assert!(serde_json::from_value::<EndpointSlice>(beta.clone()).is_err());
        assert!(serde_json::from_value::<Kept<EndpointSlice>>(beta).is_err());
    }

    #[test]
    fn yaml_reads_the_same() {
        let text = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  annotations:\n    \
                    a: b\n    lb-agent.io/lb-algorithm: maglev\nspec:\n  clusterIP: 10.96.0.1\n  selector: {app: web}\n  \
                    ports: [{port: 80, targetPort: http}]\n";
        let kept: Kept<Service> = yaml_serde::from_str(text).unwrap();
        let spec = kept.0.spec.unwrap();
        assert_eq!(kept.0.metadata.name.as_deref(), Some("web"));
        assert_eq!(
            kept.0.metadata.annotations,
            Some(BTreeMap::from([(
                "lb-agent.io/lb-algorithm".to_owned(),
                "maglev".to_owned()
            )]))
        );
        assert_eq!(spec.selector, None);
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.1"));
        assert_eq!(spec.ports.unwrap()[0].port, 80);
    }
}
