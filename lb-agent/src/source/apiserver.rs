//! Which client configuration `run` uses, decided from its flags and the
//! environment before anything is read: and the refusal to start in a pod
//! that was given no apiserver address.
//!
//! In a pod, without `--kubeconfig` or `--master`, kube-rs (like
//! client-go) reaches the apiserver at `KUBERNETES_SERVICE_HOST`. The
//! kubelet sets it to the `kubernetes` Service's ClusterIP, which nothing
//! translates on a node without kube-proxy until this agent has programmed
//! it: so the DaemonSet sets it from the ConfigMap
//! [`APISERVER_CONFIGMAP`], and an empty value there stops the agent with
//! an error that says what to set, rather than a hang on an address that
//! answers nobody.

use std::path::Path;

/// The ConfigMap the DaemonSet reads the apiserver's address from
/// (`manifests/apiserver.yaml`).
pub const APISERVER_CONFIGMAP: &str = "kube-system/lb-agent-apiserver";

/// The environment variable the in-cluster configuration reads the
/// apiserver's host from.
pub const SERVICE_HOST_ENV: &str = "KUBERNETES_SERVICE_HOST";

/// The service account token every pod that may call the apiserver has:
/// its presence is what tells a pod from a developer's shell, where the
/// default kubeconfig is the fallback.
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// Where the client's configuration comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `--kubeconfig` (or the file's `clientConnection.kubeconfig`).
    Kubeconfig,
    /// The pod's service account and `KUBERNETES_SERVICE_HOST`/`_PORT`;
    /// `--master`, if given, overrides the address.
    InCluster,
    /// A bare `--master`, no credentials (kube-proxy allows it).
    Master,
    /// Outside a pod: the default kubeconfig (`$KUBECONFIG`,
    /// `~/.kube/config`).
    Infer,
}

/// What the agent found about its apiserver address.
#[derive(Debug, PartialEq, Eq)]
pub struct Inputs<'a> {
    /// `--kubeconfig` or the config file's kubeconfig was given.
    pub kubeconfig: bool,
    /// `--master` was given.
    pub master: bool,
    /// `$KUBERNETES_SERVICE_HOST`; `None` when unset.
    pub service_host: Option<&'a str>,
    /// [`SERVICE_ACCOUNT_TOKEN`] exists: the agent runs in a pod.
    pub in_pod: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApiserverError {
    /// In a pod with no apiserver address: the DaemonSet's ConfigMap was
    /// left empty.
    #[error(
        "no apiserver address: {SERVICE_HOST_ENV} is {found} and neither --kubeconfig nor \
         --master is given. Set key `host` (and `port`) of ConfigMap {APISERVER_CONFIGMAP} \
         (manifests/apiserver.yaml) to the apiserver's own address, not the `kubernetes` \
         Service's ClusterIP, which nothing translates on a node without kube-proxy until \
         this agent runs"
    )]
    NoServiceHost {
        /// `empty` or `unset`.
        found: &'static str,
    },
}

impl Inputs<'_> {
    /// This process's flags and environment.
    pub fn decide_here(
        kubeconfig: Option<&Path>,
        master: Option<&str>,
    ) -> Result<Origin, ApiserverError> {
        let host = std::env::var(SERVICE_HOST_ENV).ok();
        Inputs {
            kubeconfig: kubeconfig.is_some(),
            master: master.is_some(),
            service_host: host.as_deref(),
            in_pod: Path::new(SERVICE_ACCOUNT_TOKEN).exists(),
        }
        .decide()
    }

    /// kube-proxy's order: a kubeconfig, else the in-cluster config, else
    /// a bare `--master`, else the default kubeconfig; except that in a
    /// pod, an empty or unset `KUBERNETES_SERVICE_HOST` with neither flag
    /// is an error. Outside a pod an empty one is too: only a deployment
    /// that forgot the ConfigMap's value sets it empty.
    pub fn decide(&self) -> Result<Origin, ApiserverError> {
        if self.kubeconfig {
            return Ok(Origin::Kubeconfig);
        }
        match self.service_host.map(str::trim) {
            Some(host) if !host.is_empty() => Ok(Origin::InCluster),
            _ if self.master => Ok(Origin::Master),
            Some(_) => Err(ApiserverError::NoServiceHost { found: "empty" }),
            None if self.in_pod => Err(ApiserverError::NoServiceHost { found: "unset" }),
            None => Ok(Origin::Infer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(
        kubeconfig: bool,
        master: bool,
        host: Option<&str>,
        in_pod: bool,
    ) -> Result<Origin, ApiserverError> {
        Inputs {
            kubeconfig,
            master,
            service_host: host,
            in_pod,
        }
        .decide()
    }

    #[test]
    fn a_pod_without_an_apiserver_address_is_refused() {
        for host in [None, Some(""), Some("  ")] {
            assert!(
                decide(false, false, host, true).is_err(),
                "host {host:?} in a pod"
            );
        }
        assert_eq!(
            decide(false, false, Some(""), false),
            Err(ApiserverError::NoServiceHost { found: "empty" }),
            "an empty host is a forgotten ConfigMap value even outside a pod"
        );
    }

    #[test]
    fn the_error_names_the_configmap_and_its_key() {
        let text = decide(false, false, None, true).unwrap_err().to_string();
        assert!(text.contains("kube-system/lb-agent-apiserver"), "{text}");
        assert!(text.contains("`host`"), "{text}");
        assert!(text.contains("KUBERNETES_SERVICE_HOST is unset"), "{text}");
    }

    #[test]
    fn a_flag_or_an_address_is_enough() {
        assert_eq!(
            decide(false, false, Some("10.0.0.1"), true),
            Ok(Origin::InCluster)
        );
        assert_eq!(
            decide(false, true, Some("10.0.0.1"), true),
            Ok(Origin::InCluster)
        );
        for host in [None, Some("")] {
            assert_eq!(decide(true, false, host, true), Ok(Origin::Kubeconfig));
            assert_eq!(decide(false, true, host, true), Ok(Origin::Master));
        }
    }

    #[test]
    fn outside_a_pod_the_default_kubeconfig_is_the_fallback() {
        assert_eq!(decide(false, false, None, false), Ok(Origin::Infer));
    }
}
