//! The bench's Services and EndpointSlices dressed as a real cluster serves
//! them: a Helm chart's labels and annotations, kubectl's
//! `last-applied-configuration`, `managedFields`, the slice controller's
//! owner reference, and endpoints with `targetRef`, `nodeName` and `zone`.
//! Same Services, ports and endpoints as [`super::manifests::manifests`];
//! only the weight of each object differs, which is what stripping fields
//! on arrival is measured against.

use std::fmt::Write as _;

use lb_tests::kubeproxy::{Proto, SvcSpec};

/// When every object here was "last changed".
const TIME: &str = "2025-05-12T08:30:00Z";

pub(super) fn manifests(specs: &[SvcSpec]) -> String {
    let mut out = String::with_capacity(specs.len() * 6_000);
    for (i, s) in specs.iter().enumerate() {
        service(&mut out, i, s);
        slice(&mut out, i, s);
    }
    out
}

fn proto(s: &SvcSpec) -> &'static str {
    match s.proto {
        Proto::Tcp => "TCP",
        Proto::Udp => "UDP",
    }
}

/// A uid-shaped string, unique per object.
fn uid(kind: u8, i: usize) -> String {
    format!("5f0c{kind:02x}e1-7a3b-4c2d-9e8f-{i:012x}")
}

fn service(out: &mut String, i: usize, s: &SvcSpec) {
    let name = format!("{}-{}", s.name, s.port_name);
    let (ns, port, target, proto) = (
        &s.namespace,
        s.port,
        s.endpoints.first().map_or(1, |(_, p)| *p),
        proto(s),
    );
    let vip = s.vip;
    let pname = &s.port_name;
    let app = &s.name;
    let applied = format!(
        r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"annotations":{{"meta.helm.sh/release-name":"{app}","meta.helm.sh/release-namespace":"{ns}"}},"labels":{{"app.kubernetes.io/instance":"{app}","app.kubernetes.io/managed-by":"Helm","app.kubernetes.io/name":"{app}","app.kubernetes.io/version":"1.4.2","helm.sh/chart":"{app}-0.7.1"}},"name":"{name}","namespace":"{ns}"}},"spec":{{"ports":[{{"name":"{pname}","port":{port},"protocol":"{proto}","targetPort":{target}}}],"selector":{{"app.kubernetes.io/instance":"{app}","app.kubernetes.io/name":"{app}"}},"type":"ClusterIP"}}}}"#
    );
    let _ = write!(
        out,
        r#"---
apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: {ns}
  uid: {uid}
  resourceVersion: "{rv}"
  creationTimestamp: "{TIME}"
  labels:
    app.kubernetes.io/instance: {app}
    app.kubernetes.io/managed-by: Helm
    app.kubernetes.io/name: {app}
    app.kubernetes.io/version: 1.4.2
    helm.sh/chart: {app}-0.7.1
  annotations:
    meta.helm.sh/release-name: {app}
    meta.helm.sh/release-namespace: {ns}
    kubectl.kubernetes.io/last-applied-configuration: '{applied}'
  managedFields:
  - apiVersion: v1
    fieldsType: FieldsV1
    fieldsV1:
      f:metadata:
        f:annotations:
          .: {{}}
          f:kubectl.kubernetes.io/last-applied-configuration: {{}}
          f:meta.helm.sh/release-name: {{}}
          f:meta.helm.sh/release-namespace: {{}}
        f:labels:
          .: {{}}
          f:app.kubernetes.io/instance: {{}}
          f:app.kubernetes.io/managed-by: {{}}
          f:app.kubernetes.io/name: {{}}
          f:app.kubernetes.io/version: {{}}
          f:helm.sh/chart: {{}}
      f:spec:
        f:internalTrafficPolicy: {{}}
        f:ports:
          .: {{}}
          'k:{{"port":{port},"protocol":"{proto}"}}':
            .: {{}}
            f:name: {{}}
            f:port: {{}}
            f:protocol: {{}}
            f:targetPort: {{}}
        f:selector: {{}}
        f:sessionAffinity: {{}}
        f:type: {{}}
    manager: helm
    operation: Update
    time: "{TIME}"
spec:
  clusterIP: {vip}
  clusterIPs: [{vip}]
  internalTrafficPolicy: Cluster
  ipFamilies: [IPv4]
  ipFamilyPolicy: SingleStack
  ports:
  - name: {pname}
    port: {port}
    protocol: {proto}
    targetPort: {target}
  selector:
    app.kubernetes.io/instance: {app}
    app.kubernetes.io/name: {app}
  sessionAffinity: None
  type: ClusterIP
status:
  loadBalancer: {{}}
"#,
        uid = uid(1, i),
        rv = 1000 + 2 * i,
    );
}

fn slice(out: &mut String, i: usize, s: &SvcSpec) {
    let svc = format!("{}-{}", s.name, s.port_name);
    let (ns, app, pname, proto) = (&s.namespace, &s.name, &s.port_name, proto(s));
    let target = s.endpoints.first().map_or(1, |(_, p)| *p);
    let owner = uid(1, i);
    let _ = write!(
        out,
        r#"---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {svc}-1
  generateName: {svc}-
  namespace: {ns}
  uid: {uid}
  resourceVersion: "{rv}"
  generation: 3
  creationTimestamp: "{TIME}"
  labels:
    app.kubernetes.io/instance: {app}
    app.kubernetes.io/managed-by: Helm
    app.kubernetes.io/name: {app}
    app.kubernetes.io/version: 1.4.2
    endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io
    helm.sh/chart: {app}-0.7.1
    kubernetes.io/service-name: {svc}
  annotations:
    endpoints.kubernetes.io/last-change-trigger-time: "{TIME}"
  ownerReferences:
  - apiVersion: v1
    blockOwnerDeletion: true
    controller: true
    kind: Service
    name: {svc}
    uid: {owner}
  managedFields:
  - apiVersion: discovery.k8s.io/v1
    fieldsType: FieldsV1
    fieldsV1:
      f:addressType: {{}}
      f:endpoints: {{}}
      f:metadata:
        f:annotations:
          .: {{}}
          f:endpoints.kubernetes.io/last-change-trigger-time: {{}}
        f:generateName: {{}}
        f:labels:
          .: {{}}
          f:app.kubernetes.io/instance: {{}}
          f:app.kubernetes.io/managed-by: {{}}
          f:app.kubernetes.io/name: {{}}
          f:app.kubernetes.io/version: {{}}
          f:endpointslice.kubernetes.io/managed-by: {{}}
          f:helm.sh/chart: {{}}
          f:kubernetes.io/service-name: {{}}
        f:ownerReferences:
          .: {{}}
          'k:{{"uid":"{owner}"}}': {{}}
      f:ports: {{}}
    manager: kube-controller-manager
    operation: Update
    time: "{TIME}"
addressType: IPv4
ports:
- name: {pname}
  port: {target}
  protocol: {proto}
endpoints:
"#,
        uid = uid(2, i),
        rv = 1001 + 2 * i,
    );
    for (j, (ip, _)) in s.endpoints.iter().enumerate() {
        let _ = write!(
            out,
            r#"- addresses: ["{ip}"]
  conditions: {{ready: true, serving: true, terminating: false}}
  nodeName: node-{node}
  zone: zone-{zone}
  targetRef:
    kind: Pod
    name: {app}-7d9c8b6f4-{pod:05x}
    namespace: {ns}
    uid: {pod_uid}
"#,
            node = j % 8,
            zone = ["a", "b", "c"][j % 3],
            pod = i * 16 + j,
            pod_uid = uid(3, i * 16 + j),
        );
    }
}
