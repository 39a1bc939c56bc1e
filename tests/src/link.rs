//! In-process spokes for link tests: the real `clawfed_spoke::link::Link`
//! over real TLS to a [`TestHub`], applying work with the durable file
//! ledger.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clawfed_hub::link::server::LinkHandle;
use clawfed_hub::model::{BootstrapTokenCreated, Cluster};
use clawfed_hub::store::LinkStore;
use clawfed_spoke::link::identity::FileIdentityStore;
use clawfed_spoke::link::ledger::FileLedger;
use clawfed_spoke::link::tls::HubAddress;
use clawfed_spoke::link::{Link, LinkConfig, LinkError, LinkStatus, SpokeMetrics, WorkApplier};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::hub::TestHub;

/// A running in-process spoke.
pub struct TestSpoke {
    pub ledger: Arc<FileLedger>,
    pub metrics: SpokeMetrics,
    /// What the link's sessions did ([`Link::status`]).
    pub status: tokio::sync::watch::Receiver<LinkStatus>,
    shutdown: CancellationToken,
    task: Option<JoinHandle<Result<(), LinkError>>>,
}

impl TestSpoke {
    /// Stops the spoke gracefully and returns how its link ended.
    pub async fn stop(mut self) -> Result<(), LinkError> {
        self.shutdown.cancel();
        match self.task.take() {
            Some(t) => t.await.expect("spoke task"),
            None => Ok(()),
        }
    }

    /// Waits for the link to end on its own (e.g. revocation).
    pub async fn ended(mut self, within: Duration) -> Result<(), LinkError> {
        let task = self.task.take().expect("running");
        tokio::time::timeout(within, task)
            .await
            .expect("spoke link did not end in time")
            .expect("spoke task")
    }

    /// Kills the spoke's task without a graceful close (like SIGKILL for
    /// the link: no stream close frame is sent on purpose).
    pub fn abort(mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Drop for TestSpoke {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The link settings of a test spoke applying with Kubernetes: `cluster`
/// dialing `hub_url` (trusting `ca_pem`), enrolling with `token` when it
/// has no identity yet, with short reconnect backoffs.
pub fn kube_link_config(
    hub_url: &str,
    ca_pem: String,
    cluster: &str,
    token: Option<String>,
) -> anyhow::Result<LinkConfig> {
    Ok(LinkConfig {
        hub: HubAddress::parse(hub_url).map_err(anyhow::Error::msg)?,
        ca_pem,
        cluster_name: cluster.to_owned(),
        bootstrap_token: token,
        version: "test".into(),
        capabilities: vec!["applier:kube".into()],
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(500),
    })
}

/// The test hub's link server (the tests here all enable it).
fn link(hub: &TestHub) -> &LinkHandle {
    hub.hub
        .as_ref()
        .and_then(|h| h.link.as_ref())
        .expect("link enabled")
}

/// The link of a test spoke applying with Kubernetes (`applier`):
/// `cluster` enrolling with `hub` by `token`, its identity kept in `dir`.
pub fn kube_link(
    hub: &TestHub,
    cluster: &str,
    token: String,
    dir: &Path,
    applier: Arc<dyn WorkApplier>,
) -> anyhow::Result<Link> {
    Ok(Link::new(
        kube_link_config(&hub_url(hub), hub_ca(hub), cluster, Some(token))?,
        Arc::new(FileIdentityStore::new(dir)),
        applier,
        SpokeMetrics::default(),
    ))
}

/// The hub's link URL.
pub fn hub_url(hub: &TestHub) -> String {
    format!("https://127.0.0.1:{}", hub_port(hub))
}

/// The hub's link port.
pub fn hub_port(hub: &TestHub) -> u16 {
    link(hub).addr.port()
}

/// The hub's link CA.
pub fn hub_ca(hub: &TestHub) -> String {
    link(hub).ca_pem().to_owned()
}

/// A bootstrap token for `cluster`, created through REST as the root admin.
pub async fn bootstrap_token(hub: &TestHub, cluster: &str, reenroll: bool) -> String {
    let response = hub
        .http
        .post(hub.url(&format!("/clusters/{cluster}/bootstrap-tokens")))
        .bearer_auth(&hub.root_token)
        .json(&serde_json::json!({ "reenroll": reenroll }))
        .send()
        .await
        .expect("create bootstrap token");
    assert_eq!(response.status(), 201, "{:?}", response.text().await);
    response
        .json::<BootstrapTokenCreated>()
        .await
        .expect("token body")
        .token
}

/// Logs to stderr when `CLAWFED_TEST_LOG` is set (e.g. `info`).
pub fn init_test_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(filter) = std::env::var("CLAWFED_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
    });
}

/// Starts a spoke keeping its identity and ledger in `dir`.
pub fn start_spoke(hub: &TestHub, cluster: &str, token: Option<String>, dir: &Path) -> TestSpoke {
    start_spoke_with_tunnels(hub, cluster, token, dir, None)
}

/// As [`start_spoke`], serving the hub's tunnel opens with `tunnels`.
pub fn start_spoke_with_tunnels(
    hub: &TestHub,
    cluster: &str,
    token: Option<String>,
    dir: &Path,
    tunnels: Option<Arc<clawfed_spoke::tunnel::Tunnels>>,
) -> TestSpoke {
    spawn_spoke(
        hub,
        cluster,
        token,
        dir,
        tunnels,
        vec!["applier:ledger".into()],
    )
}

/// As [`start_spoke`], advertising `capabilities` in its Hello.
pub fn start_spoke_advertising(
    hub: &TestHub,
    cluster: &str,
    token: Option<String>,
    dir: &Path,
    capabilities: Vec<String>,
) -> TestSpoke {
    spawn_spoke(hub, cluster, token, dir, None, capabilities)
}

fn spawn_spoke(
    hub: &TestHub,
    cluster: &str,
    token: Option<String>,
    dir: &Path,
    tunnels: Option<Arc<clawfed_spoke::tunnel::Tunnels>>,
    capabilities: Vec<String>,
) -> TestSpoke {
    spawn_spoke_to(
        &hub_url(hub),
        &hub_ca(hub),
        cluster,
        token,
        dir,
        tunnels,
        capabilities,
    )
}

/// As [`start_spoke`], dialing `hub_url` and pinning `ca_pem`: a hub in
/// another process (or an address in front of several), or several hub
/// replicas as a comma-separated list (`--hub-url a,b`: a random one
/// first, the next after each failure).
pub fn start_spoke_to(
    hub_url: &str,
    ca_pem: &str,
    cluster: &str,
    token: Option<String>,
    dir: &Path,
) -> TestSpoke {
    spawn_spoke_to(
        hub_url,
        ca_pem,
        cluster,
        token,
        dir,
        None,
        vec!["applier:ledger".into()],
    )
}

/// As [`start_spoke_to`], serving tunnels with `tunnels` (when given) and
/// advertising `capabilities`.
pub fn spawn_spoke_to(
    hub_url: &str,
    ca_pem: &str,
    cluster: &str,
    token: Option<String>,
    dir: &Path,
    tunnels: Option<Arc<clawfed_spoke::tunnel::Tunnels>>,
    capabilities: Vec<String>,
) -> TestSpoke {
    init_test_logging();
    let hubs = HubAddress::parse_list(hub_url).expect("hub url");
    let ledger = Arc::new(FileLedger::open(dir).expect("ledger"));
    let mut registry = prometheus_client_registry();
    let metrics = SpokeMetrics::register(&mut registry);
    let link = Link::new(
        LinkConfig {
            hub: hubs[0].clone(),
            ca_pem: ca_pem.to_owned(),
            cluster_name: cluster.to_owned(),
            bootstrap_token: token,
            version: "test".into(),
            capabilities,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
        },
        Arc::new(FileIdentityStore::new(dir)),
        ledger.clone(),
        metrics.clone(),
    );
    let link = link.with_hubs(clawfed_spoke::link::hubs::Hubs::random_start(hubs));
    let link = match tunnels {
        Some(t) => link.with_tunnels(t),
        None => link,
    };
    let shutdown = CancellationToken::new();
    let (_reports_tx, reports_rx) = tokio::sync::mpsc::channel(16);
    let status = link.status();
    let task = tokio::spawn(link.run(reports_rx, shutdown.clone()));
    TestSpoke {
        ledger,
        metrics,
        status,
        shutdown,
        task: Some(task),
    }
}

fn prometheus_client_registry() -> prometheus_client::registry::Registry {
    prometheus_client::registry::Registry::default()
}

/// GET /api/v1/clusters/{name} as root.
pub async fn cluster(hub: &TestHub, name: &str) -> Option<Cluster> {
    let response = hub
        .http
        .get(hub.url(&format!("/clusters/{name}")))
        .bearer_auth(&hub.root_token)
        .send()
        .await
        .expect("get cluster");
    if response.status() == 404 {
        return None;
    }
    Some(response.json().await.expect("cluster body"))
}

/// How many outbox items wait for `cluster_id` (0 when none): the tests'
/// measure of undelivered work.
pub async fn outbox_depth<S: LinkStore + ?Sized>(store: &S, cluster_id: &str) -> i64 {
    store
        .outbox_summary()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.cluster_id == cluster_id)
        .map_or(0, |s| s.depth)
}

/// Polls `check` every 20 ms until it returns Some, or panics after
/// `within` ([`crate::wait_for`]).
pub use crate::wait_for as eventually;
