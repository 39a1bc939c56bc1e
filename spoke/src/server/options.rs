//! The spoke's flags, and what they name turned into typed settings; every
//! refusal names the flag.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use clap::{Parser, ValueEnum};

use super::ServerError;
use crate::apply::environment::{ClusterEnvironment, WorkloadProxy};
use crate::link::proxy;
use crate::link::tls::HubAddress;

/// What applies the hub's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Applier {
    /// The Kubernetes executor (namespaces, Harness objects, readiness).
    Kube,
    /// A durable file ledger in --state-dir, for runs without a cluster.
    Ledger,
}

/// The SandboxDriver the Kubernetes executor runs Harnesses with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxDriverKind {
    /// Ordinary Deployments (the default).
    Deployment,
    /// The CRD-owning provider (`sandbox.clawfed.io` SandboxHarness); its
    /// CRD and rights must be installed.
    Crd,
}

/// A containment the sandbox runtime guarantees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Containment {
    Networking,
    Filesystem,
    Process,
}

impl Containment {
    pub fn capability(self) -> &'static str {
        use clawfed_proto::capability as c;
        match self {
            Containment::Networking => c::CONTAINMENT_NETWORKING,
            Containment::Filesystem => c::CONTAINMENT_FILESYSTEM,
            Containment::Process => c::CONTAINMENT_PROCESS,
        }
    }
}

/// The clawfed spoke's settings (flags, each also an environment variable).
#[derive(Debug, Parser)]
#[command(name = "clawfed-spoke", version, about)]
pub struct Options {
    /// The hub's link endpoint, e.g. https://hub.example:8443; several hub
    /// replicas as a comma-separated list (or the flag repeated): the
    /// spoke starts at a random one and moves to the next whenever a dial
    /// fails or a session is lost.
    #[arg(long, env = "CLAWFED_HUB_URL", value_delimiter = ',', required = true)]
    pub hub_url: Vec<String>,
    /// The name checked against the hub's serving certificate on every
    /// address (when they are IPs or per-replica names the certificate
    /// does not carry); default: each address's own host.
    #[arg(long, env = "CLAWFED_HUB_SERVER_NAME")]
    pub hub_server_name: Option<String>,
    /// The hub's link CA certificate (PEM) to pin.
    #[arg(long, env = "CLAWFED_HUB_CA_FILE")]
    pub ca_file: PathBuf,
    /// This execution cluster's name (as enrolled).
    #[arg(long, env = "CLAWFED_CLUSTER_NAME")]
    pub cluster_name: String,
    /// File holding the single-use bootstrap token (first start only).
    #[arg(long, env = "CLAWFED_BOOTSTRAP_TOKEN_FILE")]
    pub bootstrap_token_file: Option<PathBuf>,
    /// Keep the key and certificate in this directory (local runs).
    #[arg(long, env = "CLAWFED_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Keep the key and certificate in this Secret of --identity-namespace
    /// (in cluster).
    #[arg(long, env = "CLAWFED_IDENTITY_SECRET")]
    pub identity_secret: Option<String>,
    #[arg(
        long,
        env = "CLAWFED_IDENTITY_NAMESPACE",
        default_value = "clawfed-system"
    )]
    pub identity_namespace: String,
    #[arg(long, value_enum, default_value = "kube", env = "CLAWFED_APPLIER")]
    pub applier: Applier,
    /// Kubeconfig file of the execution cluster (its current context).
    /// Without it the spoke uses its in-cluster ServiceAccount credentials
    /// and nothing else: never an ambient KUBECONFIG or ~/.kube/config.
    #[arg(long, env = "CLAWFED_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The SandboxDriver of the Kubernetes executor (advertised to the hub
    /// as capability `sandbox-driver:<name>`).
    #[arg(
        long,
        value_enum,
        default_value = "deployment",
        env = "CLAWFED_SANDBOX_DRIVER"
    )]
    pub sandbox_driver: SandboxDriverKind,
    /// Containment the sandbox runtime behind `--sandbox-driver crd`
    /// guarantees (comma separated: networking, filesystem, process),
    /// advertised as `sandbox-containment:<kind>`. Dedicated native
    /// OpenClaw is placed only on a cluster declaring all three.
    #[arg(long, value_delimiter = ',', env = "CLAWFED_SANDBOX_CONTAINMENT")]
    pub sandbox_containment: Vec<Containment>,
    /// Prometheus metrics listener.
    #[arg(
        long,
        env = "CLAWFED_SPOKE_METRICS_ADDR",
        default_value = "127.0.0.1:9465"
    )]
    pub metrics_addr: SocketAddr,
    /// Reconnect backoff cap in seconds.
    #[arg(long, default_value_t = 30)]
    pub backoff_max_seconds: u64,
    /// HTTP CONNECT proxy for every connection to the hub,
    /// `http://[user:password@]host:port`, or `direct` for none. Overrides
    /// HTTPS_PROXY / https_proxy and NO_PROXY / no_proxy, which apply
    /// without it. mTLS stays end to end, inside the tunnel.
    #[arg(long, env = "CLAWFED_HUB_PROXY")]
    pub hub_proxy: Option<String>,
    /// File holding the proxy's Basic credentials as `user:password` (e.g.
    /// a mounted Secret key); overrides credentials in the proxy URL.
    #[arg(long, env = "CLAWFED_HUB_PROXY_CREDENTIALS_FILE")]
    pub hub_proxy_credentials_file: Option<PathBuf>,
    /// Air-gapped clusters: pull Harness images from a mirror, `FROM=TO`
    /// (registry hosts, optional path), e.g.
    /// `registry.example=mirror.internal:5000`; repeat or comma-separate.
    /// The digest is kept.
    #[arg(long, env = "CLAWFED_REGISTRY_MIRRORS", value_delimiter = ',')]
    pub registry_mirror: Vec<crate::apply::environment::RegistryMirror>,
    /// A `.dockerconfigjson` file (e.g. a mounted Secret key): written as
    /// Secret clawfed-image-pull into every data-plane namespace and named
    /// in every Harness Pod's imagePullSecrets.
    #[arg(long, env = "CLAWFED_IMAGE_PULL_SECRET_FILE")]
    pub image_pull_secret_file: Option<PathBuf>,
    /// The proxy Harness Pods reach the model API through
    /// (`http://host:port`; no credentials: they would be readable in the
    /// Pod spec): HTTPS_PROXY/HTTP_PROXY/NO_PROXY of every Harness. An IP
    /// literal host also gets a NetworkPolicy egress rule.
    #[arg(long, env = "CLAWFED_WORKLOAD_PROXY")]
    pub workload_proxy: Option<String>,
    /// Extra NO_PROXY entries of Harness Pods (comma-separated), beside the
    /// cluster's own addresses.
    #[arg(long, env = "CLAWFED_WORKLOAD_NO_PROXY", value_delimiter = ',')]
    pub workload_no_proxy: Vec<String>,
    /// PEM certificates Harness runtimes trust besides the system's (e.g. a
    /// proxy's re-signing CA): ConfigMap clawfed-ca-bundle in every
    /// data-plane namespace, mounted read-only, named by
    /// NODE_EXTRA_CA_CERTS and SSL_CERT_FILE (give the full bundle).
    #[arg(long, env = "CLAWFED_CA_BUNDLE_FILE")]
    pub ca_bundle_file: Option<PathBuf>,
    /// With --sandbox-driver crd: the operator-approved RuntimeClass the
    /// provider's Pods run under (deploy/spoke/provider-crd.yaml admits a
    /// provider's privileged parts only under `clawfed-sandbox`). It must
    /// exist: the spoke refuses to start otherwise.
    #[arg(long, env = "CLAWFED_SANDBOX_RUNTIME_CLASS")]
    pub sandbox_runtime_class: Option<String>,
    /// Enrol although another cluster name of the hub is this Kubernetes
    /// cluster (the same kube-system UID). Shared execution clusters are
    /// not supported: without this the hub refuses the enrolment.
    #[arg(long, env = "CLAWFED_ALLOW_SHARED_CLUSTER")]
    pub allow_shared_cluster: bool,
    /// A label of this cluster, `key=value` (a Kubernetes label key and
    /// value), reported to the hub in every Hello: Agents' placement
    /// selectors match them. Repeat or comma-separate.
    #[arg(
        long,
        env = "CLAWFED_CLUSTER_LABELS",
        value_delimiter = ',',
        value_parser = clawfed_proto::capacity::parse_label
    )]
    pub cluster_label: Vec<(String, String)>,
    /// Namespace of the spoke's own ServiceAccount: each data-plane
    /// namespace binds --tenant-cluster-role to it (a Helm release names it).
    #[arg(
        long,
        env = "CLAWFED_SERVICE_ACCOUNT_NAMESPACE",
        default_value = "clawfed-system"
    )]
    pub service_account_namespace: String,
    /// Name of the spoke's own ServiceAccount.
    #[arg(
        long,
        env = "CLAWFED_SERVICE_ACCOUNT_NAME",
        default_value = "clawfed-spoke"
    )]
    pub service_account_name: String,
    /// The ClusterRole the spoke binds in each data-plane namespace (its
    /// rights there; deploy/spoke/rbac.yaml or the chart installs it).
    #[arg(
        long,
        env = "CLAWFED_TENANT_CLUSTER_ROLE",
        default_value = "clawfed-spoke-tenant"
    )]
    pub tenant_cluster_role: String,
}

impl Options {
    /// The cluster's labels (`--cluster-label`); a key given twice is
    /// refused rather than one of its values silently winning.
    pub fn cluster_labels(&self) -> Result<BTreeMap<String, String>, ServerError> {
        let mut labels = BTreeMap::new();
        for (k, v) in &self.cluster_label {
            if labels.insert(k.clone(), v.clone()).is_some() {
                return Err(flag(
                    "--cluster-label",
                    format!("{k} is given more than once"),
                ));
            }
        }
        Ok(labels)
    }

    /// The addresses of `--hub-url` (each through its proxy, checked against
    /// `--hub-server-name` when given).
    pub fn hub_addresses(&self) -> Result<Vec<HubAddress>, ServerError> {
        let joined = self.hub_url.join(",");
        let parsed = HubAddress::parse_list(&joined).map_err(|e| flag("--hub-url", e))?;
        let name = self.server_name()?;
        parsed
            .into_iter()
            .map(|hub| {
                let hub = match &name {
                    Some(n) => hub.with_server_name(n.clone()),
                    None => hub,
                };
                self.with_proxy(hub)
            })
            .collect()
    }

    /// `--hub-server-name`, when given.
    pub fn server_name(
        &self,
    ) -> Result<Option<rustls::pki_types::ServerName<'static>>, ServerError> {
        self.hub_server_name
            .as_deref()
            .map(|name| {
                rustls::pki_types::ServerName::try_from(name.to_owned())
                    .map_err(|e| flag("--hub-server-name", format!("{name:?}: {e}")))
            })
            .transpose()
    }

    /// The hub reached through the proxy `--hub-proxy` or the environment
    /// names (see `crate::link::proxy`), logged without credentials.
    fn with_proxy(&self, hub: HubAddress) -> Result<HubAddress, ServerError> {
        let (host, port) = hub.host_port();
        let proxy = proxy::select(
            host,
            port,
            self.hub_proxy.as_deref(),
            "--hub-proxy",
            &|name| std::env::var(name).ok(),
        )?;
        let proxy = match (proxy, &self.hub_proxy_credentials_file) {
            (Some(p), Some(file)) => {
                Some(p.with_credentials_file(file, "--hub-proxy-credentials-file")?)
            }
            (proxy, _) => proxy,
        };
        match &proxy {
            Some(p) => tracing::info!(proxy = %p, credentials = p.has_credentials(), "link.proxy"),
            None => tracing::info!(proxy = "direct", "link.proxy"),
        }
        Ok(hub.with_proxy(proxy))
    }

    /// The single-use bootstrap token of `--bootstrap-token-file`, trimmed.
    pub fn bootstrap_token(&self) -> Result<Option<String>, ServerError> {
        self.bootstrap_token_file
            .as_deref()
            .map(|path| read("--bootstrap-token-file", path).map(|t| t.trim().to_owned()))
            .transpose()
    }

    /// Refuses sandbox flags the chosen driver cannot honour.
    pub fn check_sandbox(&self) -> Result<(), ServerError> {
        if self.sandbox_runtime_class.is_some() && self.sandbox_driver != SandboxDriverKind::Crd {
            return Err(flag(
                "--sandbox-runtime-class",
                "only a provisioning driver runs Pods under a sandbox runtime (use --sandbox-driver crd)",
            ));
        }
        if !self.sandbox_containment.is_empty() && self.sandbox_driver != SandboxDriverKind::Crd {
            // Ordinary Deployments contain nothing beyond the Pod's hardening:
            // declaring more would place dedicated native OpenClaw unsafely.
            return Err(flag(
                "--sandbox-containment",
                "only a provisioning driver declares containment (use --sandbox-driver crd)",
            ));
        }
        Ok(())
    }

    /// This cluster's requirements of workload Pods, from the flags.
    pub fn cluster_environment(&self) -> Result<ClusterEnvironment, ServerError> {
        let read_opt = |name: &'static str, path: &Option<PathBuf>| {
            path.as_deref().map(|p| read(name, p)).transpose()
        };
        let proxy = match &self.workload_proxy {
            Some(url) => Some(
                WorkloadProxy::parse(url, self.workload_no_proxy.clone())
                    .map_err(|e| flag("--workload-proxy", e))?,
            ),
            None if !self.workload_no_proxy.is_empty() => {
                return Err(flag("--workload-no-proxy", "only with --workload-proxy"));
            }
            None => None,
        };
        let pull_credentials = read_opt("--image-pull-secret-file", &self.image_pull_secret_file)?;
        if let Some(c) = &pull_credentials
            && serde_json::from_str::<serde_json::Value>(c)
                .ok()
                .filter(|v| v.get("auths").is_some())
                .is_none()
        {
            return Err(flag(
                "--image-pull-secret-file",
                "not a .dockerconfigjson document (no \"auths\")",
            ));
        }
        let ca_bundle = read_opt("--ca-bundle-file", &self.ca_bundle_file)?;
        if let Some(pem) = &ca_bundle
            && !pem.contains("-----BEGIN CERTIFICATE-----")
        {
            return Err(flag("--ca-bundle-file", "no PEM certificate in it"));
        }
        Ok(ClusterEnvironment {
            registry_mirrors: self.registry_mirror.clone(),
            pull_credentials,
            proxy,
            ca_bundle,
        })
    }
}

/// A flag whose value cannot be used.
pub(super) fn flag(name: &'static str, reason: impl std::fmt::Display) -> ServerError {
    ServerError::Flag {
        flag: name,
        reason: reason.to_string(),
    }
}

/// The file a flag names, read whole.
pub(super) fn read(name: &'static str, path: &Path) -> Result<String, ServerError> {
    std::fs::read_to_string(path).map_err(|source| ServerError::File {
        flag: name,
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests;
