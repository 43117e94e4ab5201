//! Reading a KubeProxyConfiguration (`kubeproxy.config.k8s.io/v1alpha1`),
//! the file kube-proxy's ConfigMap mounts, so an operator can keep theirs.

use std::path::{Path, PathBuf};

use yaml_serde::Value;

/// The fields of a KubeProxyConfiguration that this agent applies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileConfig {
    /// `clientConnection.kubeconfig`
    pub kubeconfig: Option<PathBuf>,
    /// `hostnameOverride`
    pub hostname_override: Option<String>,
    /// `metricsBindAddress`
    pub metrics_bind_address: Option<String>,
    /// `healthzBindAddress`
    pub healthz_bind_address: Option<String>,
    /// `excludeClusterCIDRs`: the patched kube-proxy's `--exclude-cluster-cidr`
    /// as a list (a comma-separated string is accepted too).
    pub exclude_cluster_cidrs: Vec<String>,
    /// `nodePortAddresses`: `primary`, `all`, or CIDRs.
    pub node_port_addresses: Vec<String>,
    /// `path=value` of every set field this agent does not apply.
    pub ignored: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Parse {
        path: PathBuf,
        source: yaml_serde::Error,
    },
    #[error("{path}: kind is {kind:?}, expected KubeProxyConfiguration")]
    Kind { path: PathBuf, kind: String },
    #[error("{path}: {field} must be {expected}")]
    Field {
        path: PathBuf,
        field: String,
        expected: &'static str,
    },
}

/// Fields that are read, or that have no meaning for a socket LB and are
/// accepted silently: identification, and values kube-proxy itself only uses
/// for masquerading (the socket LB never masquerades).
const QUIET: &[&str] = &["apiVersion", "kind", "clusterCIDR", "bindAddress"];

impl FileConfig {
    pub fn read(path: &Path) -> Result<Self, FileError> {
        let text = std::fs::read_to_string(path).map_err(|source| FileError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Self, FileError> {
        let doc: Value = yaml_serde::from_str(text).map_err(|source| FileError::Parse {
            path: path.to_owned(),
            source,
        })?;
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
        if kind != "KubeProxyConfiguration" {
            return Err(FileError::Kind {
                path: path.to_owned(),
                kind: kind.to_owned(),
            });
        }
        let string = |field: &str, v: Option<&Value>| -> Result<Option<String>, FileError> {
            match v {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.is_empty() => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(FileError::Field {
                    path: path.to_owned(),
                    field: field.to_owned(),
                    expected: "a string",
                }),
            }
        };
        let client = doc.get("clientConnection");
        let mut cfg = FileConfig {
            kubeconfig: string(
                "clientConnection.kubeconfig",
                client.and_then(|c| c.get("kubeconfig")),
            )?
            .map(PathBuf::from),
            hostname_override: string("hostnameOverride", doc.get("hostnameOverride"))?,
            metrics_bind_address: string("metricsBindAddress", doc.get("metricsBindAddress"))?,
            healthz_bind_address: string("healthzBindAddress", doc.get("healthzBindAddress"))?,
            ..FileConfig::default()
        };
        let strings = |field: &str| -> Result<Vec<String>, FileError> {
            let bad = || FileError::Field {
                path: path.to_owned(),
                field: field.to_owned(),
                expected: "a list of strings",
            };
            match doc.get(field) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::String(s)) => Ok(vec![s.clone()]),
                Some(Value::Sequence(items)) => items
                    .iter()
                    .map(|i| i.as_str().map(str::to_owned))
                    .collect::<Option<_>>()
                    .ok_or_else(bad),
                Some(_) => Err(bad()),
            }
        };
        cfg.exclude_cluster_cidrs = strings("excludeClusterCIDRs")?;
        cfg.node_port_addresses = strings("nodePortAddresses")?;
        // `mode` names kube-proxy's backend; ours is always eBPF.
        if let Some(mode) = string("mode", doc.get("mode"))?
            && mode != "ebpf"
        {
            cfg.ignored.push(format!("mode={mode}"));
        }
        if let Value::Mapping(map) = &doc {
            for (k, v) in map {
                let Some(k) = k.as_str() else { continue };
                let used = matches!(
                    k,
                    "hostnameOverride"
                        | "metricsBindAddress"
                        | "healthzBindAddress"
                        | "excludeClusterCIDRs"
                        | "nodePortAddresses"
                        | "mode"
                );
                if used || QUIET.contains(&k) {
                    continue;
                }
                if k == "clientConnection" {
                    collect_set(v, k, &mut cfg.ignored, &["kubeconfig"]);
                } else {
                    collect_set(v, k, &mut cfg.ignored, &[]);
                }
            }
        }
        Ok(cfg)
    }
}

/// Appends `path=value` for every leaf of `v` that differs from its zero
/// value. kube-proxy's generated ConfigMaps list every field at zero; only
/// the ones an operator set are worth a warning.
fn collect_set(v: &Value, path: &str, out: &mut Vec<String>, skip: &[&str]) {
    match v {
        Value::Null => {}
        Value::Bool(b) if !b => {}
        Value::String(s) if s.is_empty() || s == "0s" => {}
        Value::Number(n) if n.as_f64() == Some(0.0) => {}
        Value::Sequence(s) if s.is_empty() => {}
        Value::Mapping(m) => {
            for (k, v) in m {
                let Some(k) = k.as_str() else { continue };
                if !skip.contains(&k) {
                    collect_set(v, &format!("{path}.{k}"), out, &[]);
                }
            }
        }
        other => {
            let text = yaml_serde::to_string(other).unwrap_or_default();
            out.push(format!("{path}={}", text.trim()));
        }
    }
}
