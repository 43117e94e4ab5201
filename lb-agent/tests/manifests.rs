//! The deployment manifests agree with the agent they deploy.
//!
//! Every YAML document under `manifests/` is parsed into its k8s-openapi type
//! and must serialize back to the same document, so a misspelt or misplaced
//! field fails here rather than being dropped by the apiserver. Then the
//! pieces are checked against each other and against the agent's own CLI,
//! config parser, RBAC needs and model.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    net::SocketAddr,
    path::{Path, PathBuf},
};

use clap::Parser as _;
use k8s_openapi::{
    api::{
        apps::v1::DaemonSet,
        core::v1::{
            ConfigMap, Container, Namespace, PodSpec, Service, ServiceAccount, Volume, VolumeMount,
        },
        discovery::v1::EndpointSlice,
        rbac::v1::{ClusterRole, ClusterRoleBinding},
    },
    apimachinery::pkg::util::intstr::IntOrString,
};
use lb_agent::{
    cli::{Cli, Command, RunArgs},
    config::{DEFAULT_HEALTHZ_BIND_ADDRESS, FileConfig},
    model::{self, ExcludedCidrs},
    source::{file, kube::API_ACCESS},
};
use serde::{Deserialize as _, Serialize, de::DeserializeOwned};
use yaml_serde::Value;

/// Verbs a read-only watcher may hold; anything else is a grant too many.
const READ_VERBS: [&str; 3] = ["get", "list", "watch"];

/// The capabilities the agent container adds. Found minimal on kernel 6.18
/// by running `lb-agent run` under `setpriv --bounding-set`: without BPF no
/// maps, without NET_ADMIN no cgroup/sock_addr programs, without PERFMON the
/// verifier refuses the programs' variable-offset stack writes. SYS_ADMIN
/// (setns) and SYS_PTRACE (other users' /proc/<pid>/ns/net) let the agent
/// destroy stale UDP sockets in pod network namespaces.
const AGENT_CAPABILITIES: [&str; 5] = ["BPF", "NET_ADMIN", "PERFMON", "SYS_ADMIN", "SYS_PTRACE"];

/// The kustomization's own `namespace:`; the objects must already say it,
/// so that `kubectl apply -f` without kustomize lands in the same place.
const NAMESPACE: &str = "kube-system";

#[derive(Debug)]
enum Object {
    DaemonSet(Box<DaemonSet>),
    ClusterRole(ClusterRole),
    ClusterRoleBinding(ClusterRoleBinding),
    ServiceAccount(ServiceAccount),
    ConfigMap(ConfigMap),
    // Examples are only checked to parse here; the agent's own reader
    // loads them for the model.
    Service,
    EndpointSlice,
    Namespace,
}

/// One parsed document and where it came from.
#[derive(Debug)]
struct Doc {
    origin: String,
    object: Object,
}

fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests")
}

/// `*.yaml` files in `dir` (not below it), sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for f in &files {
        assert!(
            matches!(f.extension().and_then(|e| e.to_str()), Some("yaml")),
            "{}: manifests are *.yaml (kustomize and --from-file both read those)",
            f.display()
        );
    }
    files
}

/// Parses `value` as `T`; it must serialize back to the same document.
fn typed<T: DeserializeOwned + Serialize>(origin: &str, value: &Value) -> T {
    let object: T = yaml_serde::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{origin}: not a valid {}: {e}", std::any::type_name::<T>()));
    let back = yaml_serde::to_value(&object).unwrap();
    assert_eq!(
        &back, value,
        "{origin}: fields were lost or changed in parsing (unknown or misplaced field?)"
    );
    object
}

/// Every document of a multi-document file, as a typed object.
fn parse_file(path: &Path) -> Vec<Doc> {
    let text = fs::read_to_string(path).unwrap();
    let mut docs = Vec::new();
    for (i, de) in yaml_serde::Deserializer::from_str(&text).enumerate() {
        let origin = format!("{}#{i}", path.display());
        let value = Value::deserialize(de).unwrap_or_else(|e| panic!("{origin}: {e}"));
        if value.is_null() {
            continue;
        }
        let s = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or_default();
        let object = match (s("apiVersion"), s("kind")) {
            ("apps/v1", "DaemonSet") => Object::DaemonSet(Box::new(typed(&origin, &value))),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                Object::ClusterRole(typed(&origin, &value))
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                Object::ClusterRoleBinding(typed(&origin, &value))
            }
            ("v1", "ServiceAccount") => Object::ServiceAccount(typed(&origin, &value)),
            ("v1", "ConfigMap") => Object::ConfigMap(typed(&origin, &value)),
            ("v1", "Service") => {
                typed::<Service>(&origin, &value);
                Object::Service
            }
            ("discovery.k8s.io/v1", "EndpointSlice") => {
                typed::<EndpointSlice>(&origin, &value);
                Object::EndpointSlice
            }
            ("v1", "Namespace") => {
                typed::<Namespace>(&origin, &value);
                Object::Namespace
            }
            (api, kind) => panic!("{origin}: unexpected kind {api}/{kind}"),
        };
        docs.push(Doc { origin, object });
    }
    assert!(!docs.is_empty(), "{}: no documents", path.display());
    docs
}

/// The deployable set: what kustomization.yaml lists, parsed.
struct Deploy {
    kustomization: Value,
    docs: Vec<Doc>,
}

impl Deploy {
    fn load() -> Self {
        let dir = manifests_dir();
        let kustomization: Value =
            yaml_serde::from_str(&fs::read_to_string(dir.join("kustomization.yaml")).unwrap())
                .unwrap();
        let listed: BTreeSet<String> = kustomization["resources"]
            .as_sequence()
            .expect("kustomization.yaml lists resources")
            .iter()
            .map(|r| r.as_str().unwrap().to_owned())
            .collect();
        let present: BTreeSet<String> = yaml_files(&dir)
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
            // kind-config.yaml configures kind's cluster, not the cluster's
            // objects.
            .filter(|n| n != "kustomization.yaml" && n != "kind-config.yaml")
            .collect();
        assert_eq!(
            listed, present,
            "kustomization.yaml must list every manifest in manifests/ (its subdirectories \
             excepted)"
        );
        let docs = listed
            .iter()
            .flat_map(|f| parse_file(&dir.join(f)))
            .collect();
        Self {
            kustomization,
            docs,
        }
    }

    fn one<'a, T>(&'a self, what: &str, pick: impl Fn(&'a Object) -> Option<&'a T>) -> &'a T {
        let found: Vec<&T> = self.docs.iter().filter_map(|d| pick(&d.object)).collect();
        assert_eq!(found.len(), 1, "expected exactly one {what}");
        found[0]
    }

    fn daemonset(&self) -> &DaemonSet {
        self.one("DaemonSet", |o| match o {
            Object::DaemonSet(d) => Some(&**d),
            _ => None,
        })
    }

    fn cluster_role(&self) -> &ClusterRole {
        self.one("ClusterRole", |o| match o {
            Object::ClusterRole(r) => Some(r),
            _ => None,
        })
    }

    fn binding(&self) -> &ClusterRoleBinding {
        self.one("ClusterRoleBinding", |o| match o {
            Object::ClusterRoleBinding(b) => Some(b),
            _ => None,
        })
    }

    fn service_account(&self) -> &ServiceAccount {
        self.one("ServiceAccount", |o| match o {
            Object::ServiceAccount(s) => Some(s),
            _ => None,
        })
    }

    fn config_map(&self, name: &str) -> &ConfigMap {
        self.one(&format!("ConfigMap {name}"), |o| match o {
            Object::ConfigMap(c) if c.metadata.name.as_deref() == Some(name) => Some(c),
            _ => None,
        })
    }
}

fn pod_spec(ds: &DaemonSet) -> &PodSpec {
    ds.spec
        .template
        .spec
        .as_ref()
        .expect("DaemonSet has a pod spec")
}

/// The container running `lb-agent run`, and its parsed flags.
fn agent(spec: &PodSpec) -> (&Container, RunArgs) {
    let mut found = Vec::new();
    for c in &spec.containers {
        let argv: Vec<&str> = c
            .command
            .iter()
            .chain(&c.args)
            .flatten()
            .map(String::as_str)
            .collect();
        assert_eq!(
            argv.first().copied(),
            Some("lb-agent"),
            "container {}: command must be set (the image's entrypoint is not checked here)",
            c.name
        );
        let cli = Cli::try_parse_from(argv.iter().copied())
            .unwrap_or_else(|e| panic!("container {}: {argv:?} does not parse: {e}", c.name));
        match cli.command {
            Command::Run(args) => found.push((c, args)),
            other => panic!("container {}: expected `run`, got {other:?}", c.name),
        }
    }
    assert_eq!(found.len(), 1, "exactly one agent container");
    found.pop().unwrap()
}

fn mount<'a>(c: &'a Container, volume: &str) -> &'a VolumeMount {
    c.volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == volume)
        .unwrap_or_else(|| panic!("container {} does not mount volume {volume}", c.name))
}

/// The volume backed by host path `path`.
fn host_volume<'a>(spec: &'a PodSpec, path: &str) -> &'a Volume {
    let found: Vec<&Volume> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.host_path.as_ref().is_some_and(|h| h.path == path))
        .collect();
    assert_eq!(found.len(), 1, "exactly one hostPath volume for {path}");
    found[0]
}

#[test]
fn cluster_role_grants_exactly_what_the_agent_uses() {
    let deploy = Deploy::load();
    let role = deploy.cluster_role();
    let needed_resources: BTreeSet<(&str, &str)> =
        API_ACCESS.iter().map(|a| (a.group, a.resource)).collect();

    let mut granted = BTreeSet::new();
    for rule in role.rules.iter().flatten() {
        assert!(
            rule.non_resource_urls.as_ref().is_none_or(Vec::is_empty),
            "{rule:?}: no non-resource URLs"
        );
        assert!(
            rule.resource_names.as_ref().is_none_or(Vec::is_empty),
            "{rule:?}: list/watch cannot be limited by resourceNames"
        );
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    assert!(
                        needed_resources.contains(&(group.as_str(), resource.as_str())),
                        "ClusterRole grants {verb} on {group:?}/{resource}, which the agent \
                         does not read (wildcards included)"
                    );
                    assert!(
                        READ_VERBS.contains(&verb.as_str()),
                        "ClusterRole grants {verb} on {group:?}/{resource}; read-only verbs only"
                    );
                    granted.insert((group.as_str(), resource.as_str(), verb.as_str()));
                }
            }
        }
    }
    for access in API_ACCESS {
        for verb in access.verbs {
            assert!(
                granted.contains(&(access.group, access.resource, verb)),
                "ClusterRole lacks {verb} on {:?}/{}, which the agent needs",
                access.group,
                access.resource
            );
        }
    }
    assert!(
        role.aggregation_rule.is_none(),
        "an aggregated role could grow"
    );

    // The binding ties that role to the DaemonSet's service account.
    let ds = deploy.daemonset();
    let sa = deploy.service_account();
    let sa_name = sa.metadata.name.as_deref().unwrap();
    assert_eq!(
        pod_spec(ds).service_account_name.as_deref(),
        Some(sa_name),
        "DaemonSet runs as the ServiceAccount the role is bound to"
    );
    assert_eq!(sa.metadata.namespace.as_deref(), Some(NAMESPACE));
    let binding = deploy.binding();
    assert_eq!(
        binding.role_ref.api_group.as_deref(),
        Some("rbac.authorization.k8s.io")
    );
    assert_eq!(binding.role_ref.kind, "ClusterRole");
    assert_eq!(Some(&binding.role_ref.name), role.metadata.name.as_ref());
    assert!(
        binding
            .subjects
            .iter()
            .flatten()
            .any(|s| s.kind == "ServiceAccount"
                && s.name == sa_name
                && s.namespace.as_deref() == ds.metadata.namespace.as_deref()),
        "ClusterRoleBinding must name ServiceAccount {NAMESPACE}/{sa_name}"
    );
}

#[test]
fn daemonset_runs_the_agent_as_configured() {
    let deploy = Deploy::load();
    let ds = deploy.daemonset();
    let spec = pod_spec(ds);
    let (container, args) = agent(spec);

    // --config names a key of the mounted ConfigMap, which the agent accepts whole.
    let config_path = args.config.clone().expect("--config is passed");
    let config_volume = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.config_map.is_some())
        .expect("a ConfigMap volume");
    let config_mount = mount(container, &config_volume.name);
    assert_eq!(
        config_path.parent(),
        Some(Path::new(&config_mount.mount_path)),
        "--config lies in the ConfigMap's mount"
    );
    let cm_name = &config_volume.config_map.as_ref().unwrap().name;
    let cm = deploy.config_map(cm_name);
    let key = config_path.file_name().unwrap().to_str().unwrap();
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .unwrap_or_else(|| panic!("ConfigMap {cm_name} has no key {key}"));
    let file = FileConfig::parse(text, &config_path).expect("the agent parses its config");
    assert_eq!(
        file.ignored,
        Vec::<String>::new(),
        "the config holds only fields the agent applies"
    );

    // Probes reach the healthz server the config (or a flag) binds.
    let healthz: SocketAddr = args
        .healthz_bind_address
        .clone()
        .or(file.healthz_bind_address)
        .unwrap_or(DEFAULT_HEALTHZ_BIND_ADDRESS.to_owned())
        .parse()
        .expect("healthz address is IP:PORT");
    assert!(
        healthz.ip().is_unspecified(),
        "kubelet probes the node IP (host network), so healthz must listen on every address"
    );
    for (probe, path) in [
        (&container.liveness_probe, "/livez"),
        (&container.readiness_probe, "/healthz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("an httpGet probe on {path}"));
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(
            get.port,
            IntOrString::Int(healthz.port().into()),
            "probe on {path} uses the healthz port"
        );
    }

    // Node name from the downward API.
    assert_eq!(args.hostname_override.as_deref(), Some("$(NODE_NAME)"));
    let node_name = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "NODE_NAME")
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.field_ref.as_ref())
        .expect("NODE_NAME comes from a fieldRef");
    assert_eq!(node_name.field_path, "spec.nodeName");

    // The host's cgroup2 root and bpffs.
    let cgroup = host_volume(spec, "/sys/fs/cgroup");
    assert_eq!(
        args.cgroup_path.as_deref(),
        Some(Path::new(&mount(container, &cgroup.name).mount_path)),
        "--cgroup-path is where the host's cgroup2 root is mounted"
    );
    let bpffs = host_volume(spec, "/sys/fs/bpf");
    let bpffs_mount = mount(container, &bpffs.name);
    assert!(
        args.bpffs_dir.starts_with(&bpffs_mount.mount_path)
            && args.bpffs_dir != Path::new(&bpffs_mount.mount_path),
        "--bpffs-dir {} lies below the bpffs mount {}",
        args.bpffs_dir.display(),
        bpffs_mount.mount_path
    );
    assert_eq!(
        bpffs_mount.mount_propagation.as_deref(),
        Some("HostToContainer"),
        "the agent sees bpffs mounted on the host after it started"
    );
    // Kubernetes rejects Bidirectional outside privileged containers.
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        for m in c.volume_mounts.iter().flatten() {
            if m.mount_propagation.as_deref() == Some("Bidirectional") {
                assert_eq!(
                    c.security_context.as_ref().and_then(|s| s.privileged),
                    Some(true),
                    "container {}: Bidirectional propagation needs privileged",
                    c.name
                );
            }
        }
    }

    // Least privilege for the long-running container.
    let sc = container
        .security_context
        .as_ref()
        .expect("agent securityContext");
    assert_ne!(sc.privileged, Some(true), "agent is not privileged");
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    let caps = sc.capabilities.as_ref().expect("explicit capabilities");
    assert_eq!(
        caps.drop.as_deref(),
        Some(&["ALL".to_owned()][..]),
        "drop ALL, then add"
    );
    let added: BTreeSet<&str> = caps.add.iter().flatten().map(String::as_str).collect();
    assert_eq!(added, BTreeSet::from(AGENT_CAPABILITIES));

    // Every node, first in line.
    assert_eq!(spec.host_network, Some(true));
    // Pod network namespaces, for stale UDP sockets, through /proc.
    assert_eq!(spec.host_pid, Some(true));
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirstWithHostNet"));
    assert_eq!(
        spec.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
    assert!(
        spec.tolerations.iter().flatten().any(|t| {
            t.operator.as_deref() == Some("Exists") && t.key.is_none() && t.effect.is_none()
        }),
        "tolerates every taint"
    );
    let strategy = ds.spec.update_strategy.as_ref().expect("updateStrategy");
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    assert_eq!(
        strategy
            .rolling_update
            .as_ref()
            .and_then(|r| r.max_unavailable.as_ref()),
        Some(&IntOrString::Int(1))
    );
    let resources = container.resources.as_ref().expect("resources");
    for (what, map) in [
        ("requests", &resources.requests),
        ("limits", &resources.limits),
    ] {
        assert!(
            map.as_ref().is_some_and(|m| m.contains_key("memory")),
            "memory {what} set"
        );
    }
}

#[test]
fn images_and_namespaces_match_the_kustomization() {
    let deploy = Deploy::load();
    assert_eq!(deploy.kustomization["namespace"].as_str(), Some(NAMESPACE));
    // The image is set in one component, which manifests/cleanup/ includes
    // too.
    let components: Vec<Value> = deploy.kustomization["components"]
        .as_sequence()
        .expect("kustomization includes the image component")
        .iter()
        .map(|c| {
            let path = manifests_dir()
                .join(c.as_str().expect("component path"))
                .join("kustomization.yaml");
            yaml_serde::from_str(&fs::read_to_string(path).unwrap()).unwrap()
        })
        .collect();
    let images: BTreeMap<&str, &Value> = components
        .iter()
        .filter_map(|c| c["images"].as_sequence())
        .flatten()
        .map(|i| (i["name"].as_str().expect("image name"), i))
        .collect();
    let spec = pod_spec(deploy.daemonset());
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        let image = c.image.as_deref().expect("image set");
        let entry = images
            .get(image)
            .unwrap_or_else(|| panic!("container {}: image {image} has no images: entry", c.name));
        assert!(
            entry["newTag"].as_str().is_some_and(|t| !t.is_empty()),
            "{image}: images: entry sets newTag"
        );
        assert_eq!(
            c.image_pull_policy.as_deref(),
            Some("IfNotPresent"),
            "container {}: an image loaded into kind is not pulled",
            c.name
        );
    }
    for doc in &deploy.docs {
        let meta = match &doc.object {
            Object::DaemonSet(o) => &o.metadata,
            Object::ServiceAccount(o) => &o.metadata,
            Object::ConfigMap(o) => &o.metadata,
            Object::ClusterRole(_) | Object::ClusterRoleBinding(_) => continue,
            other => panic!(
                "{}: {other:?} does not belong to the deployment",
                doc.origin
            ),
        };
        assert_eq!(
            meta.namespace.as_deref(),
            Some(NAMESPACE),
            "{}: namespace",
            doc.origin
        );
    }
}

#[test]
fn examples_produce_frontends() {
    let dir = manifests_dir().join("examples");
    let files = yaml_files(&dir);
    assert!(!files.is_empty(), "examples/ holds manifests");
    for f in &files {
        for doc in parse_file(f) {
            assert!(
                matches!(
                    doc.object,
                    Object::Service | Object::EndpointSlice | Object::Namespace
                ),
                "{}: examples hold Services and EndpointSlices",
                doc.origin
            );
        }
    }

    // Read as `lb-agent run --from-file manifests/examples/` reads them.
    let objects = file::load(&dir).unwrap();
    assert!(objects.skipped.is_empty(), "{:?}", objects.skipped);
    let (desired, report) = model::compute(
        &objects.services,
        &objects.slices,
        &ExcludedCidrs::default(),
        &model::NodeContext::named("node-a"),
    );
    assert!(report.invalid.is_empty(), "{:?}", report.invalid);
    assert!(report.conflicts.is_empty(), "{:?}", report.conflicts);
    assert!(report.ignored.is_empty(), "{:?}", report.ignored);
    for svc in &objects.services {
        let (ns, name) = (
            svc.metadata.namespace.as_deref().unwrap_or("default"),
            svc.metadata.name.as_deref().unwrap(),
        );
        let frontends: Vec<_> = desired
            .owners
            .iter()
            .filter(|(fe, o)| &*o.namespace == ns && &*o.name == name && !fe.is_wildcard())
            .map(|(fe, _)| fe)
            .collect();
        assert!(!frontends.is_empty(), "{ns}/{name} produces no frontend");
        for fe in frontends {
            assert!(
                !desired.frontends[fe].backends.is_empty(),
                "{ns}/{name}: {fe} has no backends"
            );
        }
    }

    // The seed's point: the other CNI's range takes its Services out.
    let seed = ExcludedCidrs::parse(["10.244.0.0/16"]).unwrap();
    let (with_seed, report) = model::compute(
        &objects.services,
        &objects.slices,
        &seed,
        &model::NodeContext::named("node-a"),
    );
    assert!(
        !report.passthrough.is_empty(),
        "with the seed's exclusion some example Service is left to its CNI"
    );
    assert!(with_seed.frontends.len() < desired.frontends.len());
}
