//! Attach to the real Kubernetes test clusters started by `e2e/cluster.sh`.
//!
//! Each named cluster (`control`, `exec-a`, `exec-b`) is a real etcd,
//! kube-apiserver (RBAC, service-account issuer), kube-controller-manager,
//! kube-scheduler and kwok (one fake Node) on loopback, built from upstream
//! Go modules by `e2e/build.sh`. This module never starts processes: it reads
//! the cluster's admin kubeconfig from
//! `${CLAWFED_CLUSTERS_DIR:-${CLAWFED_CACHE:-$HOME/.cache/clawfed}/clusters}/NAME/admin.kubeconfig`
//! and fails with the command to run when the cluster is not up.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let c = clawfed_tests::kube_env::cluster("control").await?;
//! let ns = c.create_namespace("demo").await?;
//! let sa = c.service_account_client(&ns.name, "default", None).await?;
//! # let _ = sa; ns.delete().await?; Ok(()) }
//! ```

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// Names `e2e/cluster.sh` knows, with fixed loopback ports.
pub const CLUSTER_NAMES: [&str; 3] = ["control", "exec-a", "exec-b"];

/// The audience the test apiservers accept (`--api-audiences`, which is also
/// the `--service-account-issuer`).
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// Label put on every namespace made by [`TestCluster::create_namespace`].
pub const TEST_NAMESPACE_LABEL: &str = "clawfed.dev/test-namespace";

/// Base directory of the cluster dirs.
pub fn clusters_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CLAWFED_CLUSTERS_DIR") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("CLAWFED_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/root"));
            home.join(".cache").join("clawfed")
        });
    cache.join("clusters")
}

/// Path of a named cluster's admin kubeconfig (it may not exist).
pub fn admin_kubeconfig_path(name: &str) -> PathBuf {
    clusters_dir().join(name).join("admin.kubeconfig")
}

/// A running test cluster, reached as `system:masters` through its admin
/// kubeconfig.
#[derive(Clone)]
pub struct TestCluster {
    name: String,
    kubeconfig_path: PathBuf,
    config: Config,
    client: Client,
}

impl std::fmt::Debug for TestCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCluster")
            .field("name", &self.name)
            .field("server", &self.config.cluster_url.to_string())
            .field("kubeconfig", &self.kubeconfig_path)
            .finish()
    }
}

fn start_hint(name: &str) -> String {
    format!(
        "start it with `e2e/cluster.sh up {name}` (builds the binaries first if needed with e2e/build.sh)"
    )
}

/// Attach to the running cluster `name`, or fail telling how to start it.
pub async fn cluster(name: &str) -> Result<TestCluster> {
    let path = admin_kubeconfig_path(name);
    if !path.exists() {
        bail!(
            "Kubernetes test cluster '{name}' is not running: {} does not exist; {}",
            path.display(),
            start_hint(name)
        );
    }
    let kubeconfig = Kubeconfig::read_from(&path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(60));
    let client = Client::try_from(config.clone()).context("building the admin kube::Client")?;
    match tokio::time::timeout(Duration::from_secs(10), client.apiserver_version()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => bail!(
            "Kubernetes test cluster '{name}' at {} does not answer ({e}); {}",
            config.cluster_url,
            start_hint(name)
        ),
        Err(_) => bail!(
            "Kubernetes test cluster '{name}' at {} timed out answering /version; {}",
            config.cluster_url,
            start_hint(name)
        ),
    }
    Ok(TestCluster {
        name: name.to_string(),
        kubeconfig_path: path,
        config,
        client,
    })
}

/// Set (to anything) where the clusters must be up, as `scripts/test.sh`
/// does: [`cluster_or_skip`] then fails instead of skipping.
pub const REQUIRE_CLUSTERS_ENV: &str = "CLAWFED_REQUIRE_CLUSTERS";

/// Like [`cluster`], but a cluster that was never started (no kubeconfig)
/// skips the test with a note, unless [`REQUIRE_CLUSTERS_ENV`] is set. A
/// cluster that exists but does not answer is still an error.
pub async fn cluster_or_skip(name: &str) -> Result<Option<TestCluster>> {
    let path = admin_kubeconfig_path(name);
    if !path.exists() && std::env::var_os(REQUIRE_CLUSTERS_ENV).is_none() {
        eprintln!(
            "skipped: Kubernetes test cluster '{name}' is not running ({} missing; {}; set {REQUIRE_CLUSTERS_ENV}=1 to fail instead)",
            path.display(),
            start_hint(name)
        );
        return Ok(None);
    }
    cluster(name).await.map(Some)
}

/// The address ranges `e2e/cluster.sh` gave a cluster (from its
/// `ports.env`), all inside 198.18.0.0/15.
#[derive(Debug, Clone)]
pub struct PodNetwork {
    /// kwok's fake Pod IPs (ordinary images; nothing listens there).
    pub kwok_pod_cidr: String,
    /// Pod IPs the pod runner hands to stand-in Pods (real processes).
    pub runner_pod_cidr: String,
    pub service_cidr: String,
}

impl TestCluster {
    /// The cluster's Pod and Service ranges; fails for a cluster started
    /// before the pod runner existed (restart it with `e2e/cluster.sh`).
    pub fn pod_network(&self) -> Result<PodNetwork> {
        let path = clusters_dir().join(&self.name).join("ports.env");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let get = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(str::to_string)
                .ok_or_else(|| {
                    anyhow!(
                        "{} has no {key}: cluster '{}' was started without the pod runner; restart it: e2e/cluster.sh down {n} && e2e/cluster.sh up {n}",
                        path.display(),
                        self.name,
                        n = self.name
                    )
                })
        };
        Ok(PodNetwork {
            kwok_pod_cidr: get("KWOK_POD_CIDR")?,
            runner_pod_cidr: get("RUNNER_POD_CIDR")?,
            service_cidr: get("SERVICE_CIDR")?,
        })
    }

    /// The cluster's name (`control`, `exec-a`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The apiserver URL, e.g. `https://127.0.0.1:16443`.
    pub fn server_url(&self) -> String {
        self.config.cluster_url.to_string()
    }

    /// Path of the admin kubeconfig (for handing to a process under test).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The admin client config (cluster URL, CA, client certificate).
    pub fn admin_config(&self) -> &Config {
        &self.config
    }

    /// A client authenticated as `system:masters`.
    pub fn admin(&self) -> Client {
        self.client.clone()
    }

    /// A config for the cluster (URL and CA) with no credentials at all.
    pub fn anonymous_config(&self) -> Config {
        let mut c = Config::new(self.config.cluster_url.clone());
        c.root_cert = self.config.root_cert.clone();
        c.connect_timeout = self.config.connect_timeout;
        c.read_timeout = self.config.read_timeout;
        c
    }

    /// Mint a ServiceAccount token through the TokenRequest API.
    /// `audience: None` asks for the apiserver's own audience.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        sa_name: &str,
        audience: Option<&str>,
        expiration_seconds: i64,
    ) -> Result<String> {
        let sas: Api<ServiceAccount> = Api::namespaced(self.admin(), namespace);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: audience.map(|a| vec![a.to_string()]),
                expiration_seconds: Some(expiration_seconds),
                ..Default::default()
            }),
            ..Default::default()
        };
        let resp = sas
            .create_token_request(sa_name, &PostParams::default(), &request)
            .await
            .with_context(|| format!("TokenRequest for serviceaccount {namespace}/{sa_name}"))?;
        resp.status
            .and_then(|s| s.token)
            .ok_or_else(|| anyhow!("TokenRequest for {namespace}/{sa_name} returned no token"))
    }

    /// A client that authenticates with a freshly minted bearer token of
    /// ServiceAccount `namespace/sa_name` and trusts the cluster CA, with
    /// `namespace` as its default namespace. `audience: None` gives a token
    /// the apiserver accepts; another audience yields a token the apiserver
    /// rejects (useful to test audience checks).
    pub async fn service_account_client(
        &self,
        namespace: &str,
        sa_name: &str,
        audience: Option<&str>,
    ) -> Result<Client> {
        let token = self
            .service_account_token(namespace, sa_name, audience, 3600)
            .await?;
        self.bearer_client(namespace, token)
    }

    /// A client with the given bearer token and the cluster CA.
    pub fn bearer_client(&self, default_namespace: &str, token: String) -> Result<Client> {
        let mut config = self.anonymous_config();
        config.default_namespace = default_namespace.to_string();
        config.auth_info = AuthInfo {
            token: Some(token.into()),
            ..Default::default()
        };
        Client::try_from(config).context("building a bearer-token kube::Client")
    }

    /// Create a namespace `<prefix>-<random>` labelled [`TEST_NAMESPACE_LABEL`],
    /// and wait until kube-controller-manager has made its `default`
    /// ServiceAccount (Pods cannot be created before that).
    pub async fn create_namespace(&self, prefix: &str) -> Result<TestNamespace> {
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let mut name = format!("{}-{}", sanitize(prefix), &suffix[..10]);
        name.truncate(63);
        let namespaces: Api<Namespace> = Api::all(self.admin());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(TEST_NAMESPACE_LABEL.to_string(), "true".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name} in cluster {}", self.name))?;
        let sas: Api<ServiceAccount> = Api::namespaced(self.admin(), &name);
        eventually(
            Duration::from_secs(30),
            &format!("default ServiceAccount in {name}"),
            || async { Ok(sas.get_opt("default").await?.map(|_| ())) },
        )
        .await?;
        Ok(TestNamespace {
            name,
            client: self.admin(),
        })
    }
}

/// A namespace made for one test. Call [`TestNamespace::delete`] at the end;
/// leftovers are removed with the cluster by `e2e/cluster.sh down`.
#[derive(Clone)]
pub struct TestNamespace {
    pub name: String,
    client: Client,
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace")
            .field("name", &self.name)
            .finish()
    }
}

impl TestNamespace {
    /// Start deleting the namespace (the namespace controller finishes it).
    pub async fn delete(&self) -> Result<()> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        match namespaces
            .delete(&self.name, &DeleteParams::background())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting namespace {}", self.name)),
        }
    }
}

fn sanitize(prefix: &str) -> String {
    let s: String = prefix
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let s = s.trim_matches('-');
    if s.is_empty() {
        "test".to_string()
    } else {
        s.chars().take(40).collect()
    }
}

/// Whether the Pod's `Ready` condition is `True`.
pub fn pod_ready(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The Pod's IP, from its status.
pub fn pod_ip(p: &k8s_openapi::api::core::v1::Pod) -> Result<std::net::Ipv4Addr> {
    let ip = p
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .context("pod has no podIP")?;
    Ok(ip.parse()?)
}

/// [`crate::poll`] every 100 ms (apiserver reads): errors from `f` are
/// retried, the last one returned at the deadline.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    crate::poll(timeout, Duration::from_millis(100), what, f).await
}

/// True if `err` is an apiserver `Forbidden` (403): the rule hub and spoke use.
pub use clawfed_kube::is_forbidden;

/// The label selector of `agent`'s objects (`clawfed.io/agent=<agent>`).
pub fn agent_selector(agent: &str) -> kube::api::ListParams {
    kube::api::ListParams::default().labels(&format!("{}={agent}", clawfed_proto::labels::AGENT))
}

/// Names of the live (not deleting) objects of `agent` in `ns`, sorted.
pub async fn live_names<K>(client: &kube::Client, ns: &str, agent: &str) -> Result<Vec<String>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    use kube::ResourceExt;
    let mut names: Vec<String> = kube::Api::<K>::namespaced(client.clone(), ns)
        .list_metadata(&agent_selector(agent))
        .await?
        .items
        .into_iter()
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .map(|o| o.name_any())
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_makes_dns_labels() {
        assert_eq!(sanitize("Deploy_Test"), "deploy-test");
        assert_eq!(sanitize("--"), "test");
        assert!(sanitize(&"x".repeat(100)).len() <= 40);
    }
}
