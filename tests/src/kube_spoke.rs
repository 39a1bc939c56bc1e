//! A real spoke (link and Kubernetes executor) in the test process, on
//! one of the test clusters: what drains and failovers move Agents
//! between. It may reach the hub through a [`Proxy`], so a test can
//! partition it while it keeps running (and fencing).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use clawfed_hub::client::HubClient;
use clawfed_spoke::config::SpokeConfig;
use clawfed_spoke::exec::Executor;
use clawfed_spoke::link::identity::FileIdentityStore;
use clawfed_spoke::link::{Link, LinkError, SpokeMetrics};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::HubTestExt;
use crate::hub::TestHub;
use crate::kube_env::TestCluster;
use crate::proxy::Proxy;
use crate::{link, spoke_env};

/// How long the spoke may take to come online.
const ONLINE: Duration = Duration::from_secs(90);

/// A running in-process Kubernetes spoke.
pub struct KubeSpoke {
    /// The proxy it reaches the hub through, when it was started with one.
    pub proxy: Option<Proxy>,
    shutdown: CancellationToken,
    task: Option<JoinHandle<Result<(), LinkError>>>,
    _dir: tempfile::TempDir,
}

impl KubeSpoke {
    /// Enrolls cluster `name` on `exec` with `hub` and waits until it is
    /// online; through a partitionable proxy when `proxied`.
    pub async fn start(
        hub: &TestHub,
        rest: &HubClient,
        name: &str,
        exec: &TestCluster,
        proxied: bool,
    ) -> Result<Self> {
        let token = rest.bootstrap_token(name).await?;
        let client = spoke_env::spoke_client(exec).await?;
        let (reports_tx, reports_rx) = tokio::sync::mpsc::channel(1024);
        let executor = Arc::new(Executor::new(client, SpokeConfig::default(), reports_tx));
        let dir = tempfile::tempdir()?;
        let proxy = match proxied {
            true => Some(Proxy::start(link::hub_port(hub)).await?),
            false => None,
        };
        let url = match &proxy {
            Some(p) => format!("https://127.0.0.1:{}", p.port),
            None => link::hub_url(hub),
        };
        let link = Link::new(
            link::kube_link_config(&url, link::hub_ca(hub), name, Some(token))?,
            Arc::new(FileIdentityStore::new(dir.path())),
            executor,
            SpokeMetrics::default(),
        );
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(link.run(reports_rx, shutdown.clone()));
        rest.wait_online(name, ONLINE).await?;
        Ok(Self {
            proxy,
            shutdown,
            task: Some(task),
            _dir: dir,
        })
    }

    /// Cuts (`true`) or heals (`false`) its path to the hub.
    pub fn partition(&self, on: bool) {
        if let Some(p) = &self.proxy {
            p.partition(on);
        }
    }

    /// Stops it gracefully.
    pub async fn stop(&mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }
}

impl Drop for KubeSpoke {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// What drain and failover tests run in: a hub on PostgreSQL with the
/// pipeline and Gateways in control, a real spoke on exec-a (behind a
/// partitionable proxy when asked) and one on exec-b, and a fresh tenant.
pub struct TwoClusters {
    pub control: TestCluster,
    /// exec-a, exec-b.
    pub execs: [TestCluster; 2],
    pub hub: TestHub,
    pub rest: HubClient,
    /// Their cluster names at the hub (unique per test).
    pub names: [String; 2],
    pub spokes: [KubeSpoke; 2],
    pub ns: clawfed_hub::model::Namespace,
}

impl TwoClusters {
    /// Starts it all; exec-a's spoke behind a proxy when `proxied_a`.
    pub async fn start(proxied_a: bool) -> Result<Self> {
        crate::link::init_test_logging();
        let control = crate::control_env::control().await?;
        let execs = [
            crate::kube_env::cluster("exec-a").await?,
            crate::kube_env::cluster("exec-b").await?,
        ];
        let gateways = clawfed_hub::gateway::Gateways::new(
            crate::control_env::hub_client(&control).await?,
            crate::control_env::gateway_config(),
        )?;
        let hub = TestHub::start_with_gateway_runtime(
            crate::hub::Backend::Postgres,
            |c| {
                c.pipeline.enabled = true;
                c.pipeline.ready_deadline_seconds = 60;
                c.worker.max_attempts = 8;
            },
            clawfed_hub::worker::Handlers::builtin(),
            Some(gateways),
            |g| g,
        )
        .await;
        let rest = HubClient::new(&hub.rest, Some(hub.root_token.clone()))?;
        let suffix = &crate::api::short_id()[..6];
        let names = [format!("exec-a-{suffix}"), format!("exec-b-{suffix}")];
        let spokes = [
            KubeSpoke::start(&hub, &rest, &names[0], &execs[0], proxied_a).await?,
            KubeSpoke::start(&hub, &rest, &names[1], &execs[1], false).await?,
        ];
        let ns = rest.new_tenant().await?;
        Ok(Self {
            control,
            execs,
            hub,
            rest,
            names,
            spokes,
            ns,
        })
    }

    /// Stops the spokes and the hub, and deletes the tenant's data-plane
    /// namespaces.
    pub async fn stop(&mut self) {
        for s in &mut self.spokes {
            s.stop().await;
        }
        self.hub.stop().await;
        for exec in &self.execs {
            let _ = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(exec.admin())
                .delete(
                    &self.ns.data_plane_namespace,
                    &kube::api::DeleteParams::background(),
                )
                .await;
        }
    }
}
