//! End-to-end proof of the revision pipeline on real parts: real
//! PostgreSQL, real mTLS on the spoke link, the hub's Gateway room acting as
//! the hub's own ServiceAccount in the `control` cluster, and a real spoke
//! (the Kubernetes executor as the spoke's ServiceAccount) on `exec-a`. Both
//! clusters are real kube-apiservers with controller-manager, scheduler and
//! kwok.
//!
//! Needs `e2e/cluster.sh up control exec-a` and `eval "$(scripts/postgres.sh
//! env)"`. The hub-process tests (SIGKILL of the hub, spoke and hub outages)
//! run the `clawfed-hub` and `clawfed-spoke` binaries of the target dir:
//! `cargo build -p clawfed-hub -p clawfed-spoke --bins` first.
//!
//! Every test cleans up what it made (tenant namespaces in exec-a, Gateway
//! objects in control, PVs), also when it fails.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use async_trait::async_trait;
use clawfed_hub::auth::Role;
use clawfed_hub::client::HubClient;
use clawfed_hub::gateway::Gateways;
use clawfed_hub::gateway::objects::HARNESS_ENDPOINT_ENV;
use clawfed_hub::model::{
    Agent, AgentRevision, ConnectionState, Namespace, RevisionPhase, WorkState,
};
use clawfed_hub::store::{LinkStore, Store, WorkFilter};
use clawfed_hub::worker::kinds::REVISION_ROLLOUT;
use clawfed_hub::worker::rollout::{GatewayFailure, GatewayRuntime, GatewayTarget};
use clawfed_proto::labels;
use clawfed_spoke::config::SpokeConfig;
use clawfed_spoke::exec::Executor;
use clawfed_spoke::link::identity::FileIdentityStore;
use clawfed_spoke::link::{Link, SpokeMetrics};
use clawfed_spoke::provider::{NamespaceContext, ProviderError, RevisionContext, SandboxDriver};
use clawfed_spoke::tunnel::resolve::KubeHarnessDialer;
use clawfed_spoke::tunnel::{TunnelSettings, Tunnels};
use clawfed_tests::api::{HARNESS_IMAGE, HubTestExt, gateway_image, short_id};
use clawfed_tests::cleanup::Cleanup;
use clawfed_tests::control_env::{self, gateway_ns, route_backend, routes};
use clawfed_tests::hub::{Backend, TestHub, mint};
use clawfed_tests::kube_env::{self, TestCluster, agent_selector, live_names};
use clawfed_tests::procs::{Proc, bin};
use clawfed_tests::until;
use clawfed_tests::{db, spoke_env};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(90);

// ------------------------------------------------------- spoke (in process)

/// When the provider's revision cleanup ran, and whether the Harness
/// Deployment was absent at that moment (read from the cluster).
#[derive(Debug, Clone)]
struct CleanupCall {
    agent: String,
    revision: i64,
    at: Instant,
    deployment_absent: bool,
}

/// The ordinary driver (owns nothing), recording every revision cleanup.
struct RecordingDriver {
    client: Client,
    calls: Arc<Mutex<Vec<CleanupCall>>>,
}

#[async_trait]
impl SandboxDriver for RecordingDriver {
    fn name(&self) -> &str {
        "deployment"
    }

    async fn ensure_namespace(
        &self,
        _ns: &NamespaceContext,
        _cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        Ok(())
    }

    async fn cleanup_revision(
        &self,
        r: &RevisionContext,
        _cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        let at = Instant::now();
        let absent = Api::<Deployment>::namespaced(self.client.clone(), &r.namespace)
            .get_opt(&r.name)
            .await
            .map(|d| d.is_none())
            .unwrap_or(false);
        self.calls.lock().unwrap().push(CleanupCall {
            agent: r.agent.clone(),
            revision: r.revision,
            at,
            deployment_absent: absent,
        });
        Ok(())
    }

    async fn cleanup_namespace(
        &self,
        _ns: &NamespaceContext,
        _cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        Ok(())
    }
}

/// The real spoke link and Kubernetes executor in this process.
struct InSpoke {
    shutdown: CancellationToken,
    task: Option<JoinHandle<Result<(), clawfed_spoke::link::LinkError>>>,
    cleanups: Arc<Mutex<Vec<CleanupCall>>>,
    _dir: tempfile::TempDir,
}

impl InSpoke {
    async fn start(
        hub_url: &str,
        ca_pem: String,
        cluster_name: &str,
        token: String,
        client: Client,
    ) -> Result<Self> {
        Self::run_in(
            tempfile::tempdir()?,
            hub_url,
            ca_pem,
            cluster_name,
            Some(token),
            client,
        )
    }

    /// A spoke with the identity kept in `dir` (enrolled there before, or
    /// enrolling with `token`): a fresh executor, as after a spoke restart.
    fn run_in(
        dir: tempfile::TempDir,
        hub_url: &str,
        ca_pem: String,
        cluster_name: &str,
        token: Option<String>,
        client: Client,
    ) -> Result<Self> {
        let (reports_tx, reports_rx) = tokio::sync::mpsc::channel(1024);
        let cleanups = Arc::new(Mutex::new(Vec::new()));
        let executor = Arc::new(Executor::with_driver(
            client.clone(),
            SpokeConfig::default(),
            reports_tx,
            Arc::new(RecordingDriver {
                client: client.clone(),
                calls: cleanups.clone(),
            }),
        ));
        let tunnels = Arc::new(Tunnels::new(
            Arc::new(KubeHarnessDialer::new(client, executor.clone())),
            TunnelSettings::default(),
        ));
        let shutdown = CancellationToken::new();
        let link = Link::new(
            clawfed_tests::link::kube_link_config(hub_url, ca_pem, cluster_name, token)?,
            Arc::new(FileIdentityStore::new(dir.path())),
            executor,
            SpokeMetrics::default(),
        )
        .with_tunnels(tunnels);
        let task = tokio::spawn(link.run(reports_rx, shutdown.clone()));
        Ok(Self {
            shutdown,
            task: Some(task),
            cleanups,
            _dir: dir,
        })
    }

    /// Stops this spoke and starts it again with its identity (a restart).
    async fn restart(&mut self, w_hub: &TestHub, cluster_name: &str, client: Client) -> Result<()> {
        self.stop().await;
        let dir = std::mem::replace(&mut self._dir, tempfile::tempdir()?);
        *self = Self::run_in(
            dir,
            &clawfed_tests::link::hub_url(w_hub),
            clawfed_tests::link::hub_ca(w_hub),
            cluster_name,
            None,
            client,
        )?;
        Ok(())
    }

    async fn stop(&mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }
}

impl Drop for InSpoke {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

// ------------------------------------------------------- cluster reads

/// Every object of `agent` in `ns`, deleting or not.
async fn all_names<K>(client: &Client, ns: &str, agent: &str) -> Result<Vec<String>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let mut names: Vec<String> = Api::<K>::namespaced(client.clone(), ns)
        .list_metadata(&agent_selector(agent))
        .await?
        .items
        .into_iter()
        .map(|o| o.name_any())
        .collect();
    names.sort();
    Ok(names)
}

fn ready_replicas(d: &Deployment) -> i32 {
    d.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

fn template_label(d: &Deployment, key: &str) -> Option<String> {
    d.spec
        .template
        .metadata
        .as_ref()?
        .labels
        .as_ref()?
        .get(key)
        .cloned()
}

fn env_value(d: &Deployment, name: &str) -> Option<String> {
    d.spec
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

fn going(meta: Option<&ObjectMeta>) -> bool {
    meta.is_none_or(|m| m.deletion_timestamp.is_some())
}

/// The Gateway of `agent` in control serves `revision` and the route
/// points at it; the Harness of `revision` is Ready in exec-a.
async fn assert_serving(
    control: &Client,
    exec: &Client,
    dpns: &str,
    gw_ns: &str,
    agent: &str,
    revision: i64,
) -> Result<()> {
    let gw = Api::<Deployment>::namespaced(control.clone(), gw_ns)
        .get(&format!("{agent}-gateway"))
        .await
        .context("gateway Deployment in control")?;
    ensure!(
        ready_replicas(&gw) == 1,
        "gateway not Ready: {:?}",
        gw.status
    );
    assert_eq!(
        template_label(&gw, labels::REVISION),
        Some(revision.to_string())
    );
    assert_eq!(
        env_value(&gw, HARNESS_ENDPOINT_ENV),
        Some(format!(
            "http://{agent}-r{revision}-harness.{dpns}.svc:8080"
        )),
        "the Gateway is pointed at the revision's Harness Service"
    );
    assert_eq!(
        live_names::<Service>(control, gw_ns, agent).await?,
        [format!("{agent}-r{revision}-gateway")],
        "one per-revision gateway Service"
    );
    assert_eq!(
        route_backend(control, gw_ns, agent).await?,
        Some(format!("{agent}-r{revision}-gateway")),
        "HTTPRoute backendRef"
    );
    assert_harness_serving(exec, dpns, agent, revision).await
}

/// The Harness of `revision` is Ready in exec-a, its Service exists, and
/// it is the Agent's only live Harness Pod.
async fn assert_harness_serving(
    exec: &Client,
    dpns: &str,
    agent: &str,
    revision: i64,
) -> Result<()> {
    // Active follows the spoke's Pod Ready; the Deployment controller
    // updates the Deployment's status on its own schedule (seconds behind
    // on a loaded machine), so its readyReplicas is awaited, not read once.
    let deployments = Api::<Deployment>::namespaced(exec.clone(), dpns);
    let name = format!("{agent}-r{revision}-harness");
    until(
        Duration::from_secs(15),
        "the Harness Deployment Ready",
        || async {
            let harness = deployments
                .get(&name)
                .await
                .context("Harness Deployment in exec-a")?;
            ensure!(
                ready_replicas(&harness) == 1,
                "Harness not Ready: {:?}",
                harness.status
            );
            Ok(Some(()))
        },
    )
    .await?;
    Api::<Service>::namespaced(exec.clone(), dpns)
        .get(&format!("{agent}-r{revision}-harness"))
        .await
        .context("the Harness Service the Gateway points at")?;
    let pods: Vec<Pod> = Api::<Pod>::namespaced(exec.clone(), dpns)
        .list(&agent_selector(agent))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    ensure!(pods.len() == 1, "{} live Harness Pods", pods.len());
    assert_eq!(
        pods[0].labels().get(labels::REVISION),
        Some(&revision.to_string())
    );
    Ok(())
}

// ----------------------------------------------------- in-process world

/// A hub on PostgreSQL (pipeline on, Gateways as the hub's ServiceAccount
/// in control) and a spoke on exec-a, connected over mTLS.
struct World {
    control: TestCluster,
    exec_a: TestCluster,
    hub: TestHub,
    rest: HubClient,
    cluster_name: String,
    spoke: InSpoke,
    cleanup: Cleanup,
}

impl World {
    async fn start() -> Result<Self> {
        Self::start_with(|_| {}).await
    }

    /// As [`Self::start`], after `adjust` edits the hub's config.
    async fn start_with(adjust: impl FnOnce(&mut clawfed_hub::config::Config)) -> Result<Self> {
        Self::start_wrapped(adjust, |g| g).await
    }

    /// As [`Self::start_with`], the hub's Gateways wrapped by `wrap`.
    async fn start_wrapped(
        adjust: impl FnOnce(&mut clawfed_hub::config::Config),
        wrap: impl FnOnce(Arc<dyn GatewayRuntime>) -> Arc<dyn GatewayRuntime>,
    ) -> Result<Self> {
        clawfed_tests::link::init_test_logging();
        let control = control_env::control().await?;
        let exec_a = kube_env::cluster("exec-a").await?;
        let spoke_client = spoke_env::spoke_client(&exec_a).await?;
        let gateways = Gateways::new(
            control_env::hub_client(&control).await?,
            control_env::gateway_config(),
        )?;
        let hub = TestHub::start_with_gateway_runtime(
            Backend::Postgres,
            |c| {
                c.pipeline.enabled = true;
                c.pipeline.ready_deadline_seconds = 60;
                c.worker.max_attempts = 8;
                adjust(c);
            },
            clawfed_hub::worker::Handlers::builtin(),
            Some(gateways),
            wrap,
        )
        .await;
        let rest = HubClient::new(&hub.rest, Some(hub.root_token.clone()))?;
        let cluster_name = format!("exec-a-{}", &short_id()[..6]);
        let token = rest.bootstrap_token(&cluster_name).await?;
        let spoke = InSpoke::start(
            &clawfed_tests::link::hub_url(&hub),
            clawfed_tests::link::hub_ca(&hub),
            &cluster_name,
            token,
            spoke_client,
        )
        .await?;
        rest.wait_online(&cluster_name, WAIT).await?;
        Ok(Self {
            control,
            exec_a,
            hub,
            rest,
            cluster_name,
            spoke,
            cleanup: Cleanup::default(),
        })
    }

    /// A tenant and Agent, with the Gateway's PV in control and everything
    /// registered for cleanup.
    async fn agent(&mut self, harness_kind: &str) -> Result<(Namespace, Agent)> {
        self.agent_with_images(harness_kind, HARNESS_IMAGE, &gateway_image())
            .await
    }

    /// As [`Self::agent`], with these images.
    async fn agent_with_images(
        &mut self,
        harness_kind: &str,
        harness_image: &str,
        gateway_image: &str,
    ) -> Result<(Namespace, Agent)> {
        let (ns, agent) = self
            .rest
            .tenant_with_images(
                &self.cluster_name,
                harness_kind,
                harness_image,
                gateway_image,
            )
            .await?;
        self.cleanup
            .track(&self.control.admin(), &ns, &agent.name)
            .await?;
        Ok((ns, agent))
    }

    async fn finish(mut self) -> Result<()> {
        self.spoke.stop().await;
        self.hub.stop().await;
        self.cleanup.run().await
    }
}

// ================================================================ tests

/// 1. deploy → revision Active: the Gateway runs in the CONTROL cluster
/// (Deployment `<agent>-gateway` Ready, per-revision Service, HTTPRoute →
/// r1), the Harness is Ready in exec-a, and the route points at the new
/// revision. Hub on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_puts_the_gateway_in_control_and_the_harness_in_exec_a() -> Result<()> {
    let mut w = World::start().await?;
    let (ns, agent) = w.agent("dedicated-codex").await?;
    let gw_ns = gateway_ns(&ns.id);
    let (control, exec) = (w.control.admin(), w.exec_a.admin());
    // Issue 12: the tenant is provisioned in no cluster before any spoke
    // reported it (the hub accepting it is not a provisioning).
    let before: Namespace = w
        .rest
        .call(Method::GET, &format!("/namespaces/{}", ns.name), None)
        .await?;
    assert!(before.clusters.is_empty(), "{:?}", before.clusters);

    let r = w.rest.deploy_current(&ns.name, &agent.name).await?;
    assert_eq!(r.number, 1);
    let r1 = w
        .rest
        .wait_phase(&ns.name, &agent.name, 1, RevisionPhase::Active)
        .await?;
    let after: Namespace = w
        .rest
        .call(Method::GET, &format!("/namespaces/{}", ns.name), None)
        .await?;
    assert_eq!(after.clusters.len(), 1, "{:?}", after.clusters);
    assert_eq!(after.clusters[0].cluster, w.cluster_name);
    assert_eq!(
        after.clusters[0].state,
        clawfed_hub::model::NamespaceClusterState::Provisioned
    );
    assert_eq!(
        after.clusters[0].data_plane_namespace.as_deref(),
        Some(ns.data_plane_namespace.as_str()),
        "the name the spoke reported"
    );
    for key in ["prepareMs", "readinessWaitMs", "activationMs", "elapsedMs"] {
        assert!(
            r1.progress.durations_ms.contains_key(key),
            "{key}: {:?}",
            r1.progress
        );
    }
    assert!(r1.progress.gateway_applied_at.is_some());
    assert!(r1.progress.activated_at.is_some());
    assert_eq!(
        r1.resolved_cluster.as_deref(),
        Some(w.cluster_name.as_str())
    );
    assert_serving(
        &control,
        &exec,
        &ns.data_plane_namespace,
        &gw_ns,
        &agent.name,
        1,
    )
    .await?;
    // The Gateway's objects live in the control cluster only.
    assert!(
        live_names::<Deployment>(&exec, &ns.data_plane_namespace, &agent.name)
            .await?
            .iter()
            .all(|n| !n.ends_with("-gateway")),
        "no Gateway in the execution cluster"
    );
    assert_eq!(
        w.rest.agent(&ns.name, &agent.name).await?.active_revision,
        Some(1)
    );
    eprintln!("revision 1 durations: {:?}", r1.progress.durations_ms);
    w.finish().await
}

/// The real Gateways, except that the ensure of the Agents named in `held`
/// waits until `open` (a control apiserver that is slow for them).
struct GatedEnsure {
    inner: Arc<dyn GatewayRuntime>,
    held: Arc<Mutex<Vec<String>>>,
    /// How many held ensures are waiting or went through.
    entered: Arc<AtomicUsize>,
    open: tokio::sync::watch::Receiver<bool>,
}

impl GatedEnsure {
    /// A wrapper for [`World::start_wrapped`], with the list of Agents
    /// whose ensures it holds, the count of held ensures, and the switch
    /// that lets them through.
    #[allow(clippy::type_complexity)]
    fn gate() -> (
        impl FnOnce(Arc<dyn GatewayRuntime>) -> Arc<dyn GatewayRuntime>,
        Arc<Mutex<Vec<String>>>,
        Arc<AtomicUsize>,
        tokio::sync::watch::Sender<bool>,
    ) {
        let held = Arc::new(Mutex::new(Vec::new()));
        let entered = Arc::new(AtomicUsize::new(0));
        let (open, open_rx) = tokio::sync::watch::channel(false);
        let wrap = {
            let (held, entered) = (held.clone(), entered.clone());
            move |inner| -> Arc<dyn GatewayRuntime> {
                Arc::new(GatedEnsure {
                    inner,
                    held,
                    entered,
                    open: open_rx,
                })
            }
        };
        (wrap, held, entered, open)
    }
}

/// A dedicated Agent deployed with its Gateway ensure held (its Agent
/// lease taken) until `open` is set.
struct HeldEnsure {
    w: World,
    ns: Namespace,
    agent: Agent,
    /// How many of its ensures were held or went through.
    entered: Arc<AtomicUsize>,
    open: tokio::sync::watch::Sender<bool>,
}

impl HeldEnsure {
    async fn deploy() -> Result<Self> {
        let (gate, held, entered, open) = GatedEnsure::gate();
        let mut w = World::start_wrapped(|_| {}, gate).await?;
        let (ns, agent) = w.agent("dedicated-codex").await?;
        held.lock().expect("held").push(agent.name.clone());
        w.rest.deploy_current(&ns.name, &agent.name).await?;
        until(WAIT, "the Agent's Gateway ensure is held", || async {
            Ok((entered.load(Ordering::SeqCst) > 0).then_some(()))
        })
        .await?;
        Ok(Self {
            w,
            ns,
            agent,
            entered,
            open,
        })
    }

    /// Lets the ensure through: the revision turns Active with its Gateway
    /// applied once. Returns how long that took; the world is finished.
    async fn release(self) -> Result<Duration> {
        let opened = Instant::now();
        self.open.send_replace(true);
        let r = self
            .w
            .rest
            .wait_phase(&self.ns.name, &self.agent.name, 1, RevisionPhase::Active)
            .await?;
        let active_in = opened.elapsed();
        assert!(r.progress.gateway_applied_at.is_some());
        assert_eq!(
            self.entered.load(Ordering::SeqCst),
            1,
            "the Gateway is applied once"
        );
        self.w.finish().await?;
        Ok(active_in)
    }
}

#[async_trait]
impl GatewayRuntime for GatedEnsure {
    async fn ensure(&self, t: &GatewayTarget) -> Result<(), GatewayFailure> {
        let held = self.held.lock().expect("held").contains(&t.agent);
        if held {
            self.entered.fetch_add(1, Ordering::SeqCst);
            let mut open = self.open.clone();
            let _ = open.wait_for(|o| *o).await;
        }
        self.inner.ensure(t).await
    }
    async fn ready(&self, t: &GatewayTarget) -> Result<bool, GatewayFailure> {
        self.inner.ready(t).await
    }
    async fn probe(&self, t: &GatewayTarget) -> Result<(), GatewayFailure> {
        self.inner.probe(t).await
    }
    async fn activate(&self, t: &GatewayTarget) -> Result<(), GatewayFailure> {
        self.inner.activate(t).await
    }
    async fn stop(&self, id: &str, tenant: &str, agent: &str) -> Result<(), GatewayFailure> {
        self.inner.stop(id, tenant, agent).await
    }
    async fn delete(&self, id: &str, tenant: &str, agent: &str) -> Result<(), GatewayFailure> {
        self.inner.delete(id, tenant, agent).await
    }
    async fn retire(
        &self,
        id: &str,
        tenant: &str,
        agent: &str,
        revision: i64,
    ) -> Result<(), GatewayFailure> {
        self.inner.retire(id, tenant, agent, revision).await
    }
    async fn delete_namespace(&self, id: &str) -> Result<(), GatewayFailure> {
        self.inner.delete_namespace(id).await
    }
    fn start_watch(
        &self,
        listener: Arc<dyn clawfed_hub::gateway::watch::ReadyListener>,
        shutdown: CancellationToken,
    ) -> Option<futures::future::BoxFuture<'static, ()>> {
        self.inner.start_watch(listener, shutdown)
    }
}

/// Issue 17: a Gateway ensure is a work item of its own, run in its own
/// worker lane, so a slow one (a loaded control apiserver) holds none of
/// the pipeline's slots. With one slot for passes, a second Agent deploys
/// to Active while the first Agent's ensure is held; the first has its
/// Harness sent already and activates once its ensure goes through.
/// (Before, the pass applied the Gateway itself and kept the only slot.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_gateway_ensure_holds_no_pipeline_slot() -> Result<()> {
    let (gate, held, entered, open) = GatedEnsure::gate();
    let mut w = World::start_wrapped(|c| c.worker.batch_size = 1, gate).await?;
    let (ns_slow, slow) = w.agent("dedicated-codex").await?;
    let (ns_fast, fast) = w.agent("dedicated-codex").await?;
    let exec = w.exec_a.admin();
    held.lock().expect("held").push(slow.name.clone());

    w.rest.deploy_current(&ns_slow.name, &slow.name).await?;
    until(WAIT, "the slow Agent's Gateway ensure is held", || async {
        Ok((entered.load(Ordering::SeqCst) > 0).then_some(()))
    })
    .await?;
    w.rest.deploy_current(&ns_fast.name, &fast.name).await?;
    let r = w
        .rest
        .wait_phase(&ns_fast.name, &fast.name, 1, RevisionPhase::Active)
        .await
        .context("the other Agent must activate while one Gateway ensure is held")?;
    assert!(r.progress.gateway_applied_at.is_some());
    let s = w.rest.revision(&ns_slow.name, &slow.name, 1).await?;
    ensure!(
        matches!(
            s.phase,
            RevisionPhase::Preparing | RevisionPhase::WaitingReady
        ) && s.progress.gateway_applied_at.is_none(),
        "the held Agent waits for its Gateway: {:?} {:?}",
        s.phase,
        s.progress
    );
    ensure!(
        s.progress.gateway_queued_at.is_some(),
        "its ensure is queued: {:?}",
        s.progress
    );
    // Its Harness went out in the pass that queued the ensure.
    let cluster = w.rest.cluster(&w.cluster_name).await?;
    let target = clawfed_proto::work::target::harness(&ns_slow.id, &slow.name, 1);
    let sent = w
        .hub
        .store()
        .outbox_latest_generation(&cluster.id, &target)
        .await?;
    ensure!(
        sent == Some(clawfed_proto::work::generation::HARNESS_APPLY),
        "the held Agent's Harness work was sent: {sent:?}"
    );

    open.send_replace(true);
    let s = w
        .rest
        .wait_phase(&ns_slow.name, &slow.name, 1, RevisionPhase::Active)
        .await?;
    assert!(s.progress.gateway_applied_at.is_some());
    assert_eq!(entered.load(Ordering::SeqCst), 1, "applied once");
    let control = w.control.admin();
    assert_serving(
        &control,
        &exec,
        &ns_slow.data_plane_namespace,
        &gateway_ns(&ns_slow.id),
        &slow.name,
        1,
    )
    .await?;
    w.finish().await
}

/// Issue 17: a Gateway ensure that outlasts the Agent's pass lease (15 s;
/// a loaded control apiserver took over 15 s for some at 200 at once)
/// keeps the lease: it is renewed while the ensure runs, so no pass of the
/// Agent runs beside it and the Gateway is applied once. (Before, the lease
/// ran out under the ensure, a pass got in and saved the revision, and the
/// ensure's own save came back stale, so it applied the Gateway again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_ensure_longer_than_the_pass_lease_keeps_the_lease() -> Result<()> {
    const PASS_LEASE: Duration = Duration::from_secs(15);
    let h = HeldEnsure::deploy().await?;
    let held_since = Instant::now();
    tokio::time::sleep(PASS_LEASE + Duration::from_secs(3)).await;
    let store = h.w.hub.store();
    let now = chrono::Utc::now();
    let intruder_got_it = store
        .begin_agent_pass(
            &h.agent.id,
            "intruder",
            now,
            now + chrono::Duration::seconds(1),
        )
        .await?;
    if intruder_got_it {
        store.end_agent_pass(&h.agent.id, "intruder").await?;
    }
    ensure!(
        !intruder_got_it,
        "the ensure held for {:?} lost its Agent lease",
        held_since.elapsed()
    );

    h.release().await?;
    Ok(())
}

/// Issue 17: a pass turned away by a busy Agent lease waits for the
/// holder to release it (the holder wakes it) instead of coming back every
/// 200 ms. While a Gateway ensure holds the lease, the spoke's reports on
/// the Harness (applied, Ready) each trigger a pass; over a 6 s hold they
/// queue a handful of passes (3), not chains of passes every 200 ms (110
/// before: each turned-away pass queued its own), and
/// the revision turns Active as soon as the ensure goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_turned_away_by_a_busy_lease_is_woken_not_polling() -> Result<()> {
    const HOLD: Duration = Duration::from_secs(6);
    let h = HeldEnsure::deploy().await?;
    let rev = h.w.rest.revision(&h.ns.name, &h.agent.name, 1).await?;
    let store = h.w.hub.store();
    let passes = || async {
        let items = store
            .list_work(&WorkFilter {
                namespace: Some(h.ns.name.clone()),
                state: None,
                limit: 1000,
            })
            .await?;
        anyhow::Ok(
            items
                .iter()
                .filter(|i| i.kind == REVISION_ROLLOUT && i.target == rev.id)
                .count(),
        )
    };
    let before = passes().await?;
    tokio::time::sleep(HOLD).await;
    let during = passes().await? - before;
    println!("passes queued for the revision over the {HOLD:?} hold: {during}");
    ensure!(
        during <= 10,
        "{during} passes queued for the revision over a {HOLD:?} hold of its Agent's lease"
    );
    let active_in = h.release().await?;
    ensure!(
        active_in < Duration::from_secs(10),
        "Active {active_in:?} after the ensure went through"
    );
    Ok(())
}

/// A burst of passes over one Agent's revisions, all due at once (say a
/// spoke's reconnect replaying reports while triggers arrive), runs out:
/// the passes contend for the Agent's lease, each turned-away pass queues
/// at most one more (a revision keeps one pending pass: later triggers
/// join it), so the contention shrinks by a winner each round. Before, a
/// turned-away pass queued a wake-up and a fallback of its own, and the
/// woken passes turned each other away again: a rolling restart of three
/// replicas left 20 passes of one Agent's revisions churning for over 90 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_passes_over_one_agents_revisions_runs_out() -> Result<()> {
    const REVISIONS: i64 = 5;
    const PER_REVISION: usize = 6;
    let mut w = World::start().await?;
    let (ns, agent) = w.agent("embedded-openclaw").await?;
    let name = agent.name.clone();
    for n in 1..=REVISIONS {
        if n > 1 {
            w.rest
                .edit_spec(&ns.name, &name, |s| {
                    s.image = format!("ghcr.io/openclaw/openclaw:1.{n}")
                })
                .await?;
        }
        w.rest.deploy_current(&ns.name, &name).await?;
        w.rest
            .wait_phase(&ns.name, &name, n, RevisionPhase::Active)
            .await?;
    }
    let mut ids = Vec::new();
    for n in 1..=REVISIONS {
        ids.push(w.rest.revision(&ns.name, &name, n).await?.id);
    }
    let store = w.hub.store();
    let passes = || async {
        let items = store
            .list_work(&WorkFilter {
                namespace: Some(ns.name.clone()),
                state: None,
                limit: 10_000,
            })
            .await?;
        anyhow::Ok(
            items
                .into_iter()
                .filter(|i| i.kind == REVISION_ROLLOUT && ids.contains(&i.target))
                .collect::<Vec<_>>(),
        )
    };
    // Settled first: no pass of these revisions left to run.
    until(WAIT, "the revisions' passes done", || async {
        let now = chrono::Utc::now();
        let left: Vec<_> = passes()
            .await?
            .into_iter()
            .filter(|i| !matches!(i.state, WorkState::Done))
            .map(|i| (i.target, i.state, (i.run_at - now).num_milliseconds()))
            .collect();
        ensure!(
            left.is_empty(),
            "passes left (target, state, due in ms): {left:?}"
        );
        Ok(Some(()))
    })
    .await?;
    let before: std::collections::HashSet<String> =
        passes().await?.into_iter().map(|i| i.id).collect();

    // The burst: each revision's passes queued one by one, as separate
    // triggers do.
    let burst = std::time::Instant::now();
    for _ in 0..PER_REVISION {
        for id in &ids {
            store
                .enqueue_work(&[clawfed_hub::worker::kinds::rollout_work(
                    id,
                    &ns.id,
                    None,
                    chrono::Utc::now(),
                    5,
                )])
                .await?;
        }
    }
    let ran_out = until(WAIT, "the burst's passes to run out", || async {
        let left: Vec<_> = passes()
            .await?
            .into_iter()
            .filter(|i| !matches!(i.state, WorkState::Done))
            .map(|i| (i.target, i.state, i.run_at))
            .collect();
        ensure!(left.is_empty(), "passes left: {left:?}");
        Ok(Some(()))
    })
    .await;
    let took = burst.elapsed();
    let ran = passes()
        .await?
        .into_iter()
        .filter(|i| !before.contains(&i.id))
        .count();
    let triggers = PER_REVISION * REVISIONS as usize;
    println!(
        "a burst of {triggers} triggers over {REVISIONS} revisions of one Agent: \
         {ran} passes queued, run out in {took:?}"
    );
    ran_out?;
    // Finite is the point (before, about 160 passes were queued every 2 s
    // without end). The bound follows the rules, not a timing: a revision
    // has at most one pass waiting, so a trigger adds at most one pass,
    // which holds the lease at most once and then turns away at most the
    // other revisions' passes, each queueing one more; and a revision not
    // woken retries once per fallback (`BUSY_FALLBACK`) while the burst
    // lasts. Runs counted 28 to 71.
    let fallback = clawfed_hub::worker::rollout::BUSY_FALLBACK;
    let fallbacks = REVISIONS as usize * (took.as_millis() / fallback.as_millis()) as usize
        + REVISIONS as usize;
    let bound = triggers * REVISIONS as usize + fallbacks;
    ensure!(
        ran <= bound,
        "{ran} passes queued for a burst of {triggers} triggers over {took:?} \
         (at most {bound} by the rules)"
    );
    for n in 1..=REVISIONS {
        let r = w.rest.revision(&ns.name, &name, n).await?;
        let want = if n == REVISIONS {
            RevisionPhase::Active
        } else {
            RevisionPhase::Retired
        };
        ensure!(
            r.phase == want,
            "revision {n} is {:?}, not {want:?}",
            r.phase
        );
    }
    Ok(())
}

/// A revision that nothing moves still fails at its readiness deadline
/// after a trigger joined the pass queued for that deadline (passes
/// coalesce: the joined pass runs at once, early). Its Harness Pod cannot
/// be scheduled (it asks for more CPU than any node has), so no report
/// will ever move it; each waiting pass queues its own wake-up at the
/// deadline. Without that, the trigger used up the deadline's pass and the
/// revision waited in `waiting_ready` for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_deadline_pass_still_fails_a_stuck_revision_at_its_deadline() -> Result<()> {
    const DEADLINE: Duration = Duration::from_secs(12);
    let mut w = World::start_with(|c| {
        c.pipeline.ready_deadline_seconds = DEADLINE.as_secs();
    })
    .await?;
    let (ns, agent) = w.agent("embedded-openclaw").await?;
    let name = agent.name.clone();
    w.rest
        .edit_spec(&ns.name, &name, |s| {
            s.resources.cpu_request = Some("100000".into())
        })
        .await?;
    let deployed = Instant::now();
    let rev = w.rest.deploy_current(&ns.name, &name).await?;
    until(WAIT, "revision 1 waiting for readiness", || async {
        let r = w.rest.revision(&ns.name, &name, 1).await?;
        ensure!(
            r.phase != RevisionPhase::Failed,
            "failed early: {:?}",
            r.reason
        );
        Ok((r.phase == RevisionPhase::WaitingReady).then_some(()))
    })
    .await?;
    // A trigger due now: it joins the revision's waiting pass, the one
    // queued for the deadline.
    w.hub
        .store()
        .enqueue_work(&[clawfed_hub::worker::kinds::rollout_work(
            &rev.id,
            &ns.id,
            None,
            chrono::Utc::now(),
            5,
        )])
        .await?;
    let failed = until(
        DEADLINE + Duration::from_secs(30),
        "revision 1 failed at its deadline",
        || async {
            let r = w.rest.revision(&ns.name, &name, 1).await?;
            Ok((r.phase == RevisionPhase::Failed).then_some(r))
        },
    )
    .await?;
    let reason = failed.reason.unwrap_or_default();
    println!("failed {:?} after the deploy: {reason}", deployed.elapsed());
    ensure!(
        reason.contains("readiness deadline passed"),
        "the deadline's reason: {reason}"
    );
    w.finish().await
}

/// A pass turned away by a lease held in another replica (whose release
/// wakes no one here) is not stranded when a trigger runs its fallback
/// early: the trigger joins the queued fallback (passes coalesce), is
/// turned away too, and queues the next fallback. Before, the second
/// turn-away skipped it as "still to come", so once the other replica let
/// go nothing was queued for the revision: kill -9 of the session owner
/// left a revision short of Active with no work queued at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_that_runs_a_fallback_early_does_not_strand_the_revision() -> Result<()> {
    let mut w = World::start().await?;
    let (ns, agent) = w.agent("embedded-openclaw").await?;
    let store = w.hub.store();
    // Another replica's pass holds the Agent's lease.
    let other = "replica-elsewhere/pass";
    let now = chrono::Utc::now();
    ensure!(
        store
            .begin_agent_pass(&agent.id, other, now, now + chrono::Duration::seconds(60))
            .await?,
        "the lease was free"
    );
    let rev = w.rest.deploy_current(&ns.name, &agent.name).await?;
    let queued = || async {
        let items = store
            .list_work(&WorkFilter {
                namespace: Some(ns.name.clone()),
                state: None,
                limit: 1000,
            })
            .await?;
        anyhow::Ok(
            items
                .into_iter()
                .filter(|i| i.kind == REVISION_ROLLOUT && i.target == rev.id)
                .collect::<Vec<_>>(),
        )
    };
    // The deploy's pass was turned away and queued its fallback.
    until(WAIT, "the fallback queued", || async {
        let items = queued().await?;
        Ok(items
            .iter()
            .any(|i| i.state == WorkState::Pending && i.run_at > chrono::Utc::now())
            .then_some(()))
    })
    .await?;
    // A trigger due now joins it and runs it early (turned away again).
    let joined = store
        .enqueue_work(&[clawfed_hub::worker::kinds::rollout_work(
            &rev.id,
            &ns.id,
            None,
            chrono::Utc::now(),
            5,
        )])
        .await?;
    until(WAIT, "the joined pass run", || async {
        let items = queued().await?;
        Ok(items
            .iter()
            .any(|i| i.id == joined[0] && i.state == WorkState::Done)
            .then_some(()))
    })
    .await?;
    // The other replica lets go; its release wakes no one in this hub.
    store.end_agent_pass(&agent.id, other).await?;
    let active = w
        .rest
        .wait_phase(&ns.name, &agent.name, 1, RevisionPhase::Active)
        .await;
    if active.is_err() {
        let items: Vec<_> = queued()
            .await?
            .into_iter()
            .map(|i| (i.state, i.run_at))
            .collect();
        bail!("revision 1 not Active; its passes: {items:?}");
    }
    w.finish().await
}

/// 2. change the Agent → revision 2 Active, the Agent now → r2, the
/// predecessor retired after the switch (phase retired, its Harness gone).
/// The replacement is exclusive (issue 29: every revision mounts the
/// Agent-owned ReadWriteOnce claim): no Pod of revision 2 exists before
/// every Pod of revision 1 is gone.
/// Embedded OpenClaw (issue 12): no Gateway of its own in the control
/// cluster at any point; its gateway runs inside the data-plane workload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_activates_the_new_revision_then_retires_the_old() -> Result<()> {
    let mut w = World::start().await?;
    let (ns, agent) = w.agent("embedded-openclaw").await?;
    let gw_ns = gateway_ns(&ns.id);
    let (control, exec) = (w.control.admin(), w.exec_a.admin());
    let dpns = ns.data_plane_namespace.clone();
    let name = agent.name.clone();
    w.rest.deploy_current(&ns.name, &name).await?;
    w.rest
        .wait_phase(&ns.name, &name, 1, RevisionPhase::Active)
        .await?;

    // Observer, from the Pod watch (events in the apiserver's order): a
    // Pod of revision 2 seen while one of revision 1 still exists would be
    // two runtimes on the Agent's claim.
    let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
    let observer = {
        let pods = Api::<Pod>::namespaced(exec.clone(), &dpns);
        let selector = format!("{}={name}", labels::AGENT);
        tokio::spawn(async move {
            use futures::StreamExt;
            use kube::runtime::watcher::{self, Event};
            let revision = |p: &Pod| p.labels().get(labels::REVISION).cloned();
            let mut synced = Some(synced_tx);
            let mut r1_live = std::collections::HashSet::new();
            let mut r1_seen = false;
            let mut stream = std::pin::pin!(watcher::watcher(
                pods,
                watcher::Config::default().labels(&selector)
            ));
            while let Some(event) = stream.next().await {
                match event? {
                    Event::InitDone => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                    }
                    Event::Apply(p) | Event::InitApply(p) => match revision(&p).as_deref() {
                        Some("1") => {
                            r1_seen = true;
                            r1_live.insert(p.uid().unwrap_or_default());
                        }
                        Some("2") => return anyhow::Ok((r1_seen, r1_live.len())),
                        _ => {}
                    },
                    Event::Delete(p) => {
                        r1_live.remove(&p.uid().unwrap_or_default());
                    }
                    Event::Init => {}
                }
            }
            bail!("the Pod watch ended")
        })
    };
    synced_rx.await.context("the Pod watch started")?;

    w.rest
        .edit_spec(&ns.name, &name, |s| {
            s.image = "ghcr.io/openclaw/openclaw:1.1".into()
        })
        .await?;
    let r = w.rest.deploy_current(&ns.name, &name).await?;
    assert_eq!(r.number, 2);
    let r2 = w
        .rest
        .wait_phase(&ns.name, &name, 2, RevisionPhase::Active)
        .await?;
    let r1 = w
        .rest
        .wait_phase(&ns.name, &name, 1, RevisionPhase::Retired)
        .await?;
    until(WAIT, "only r2's Harness", || async {
        let h = all_names::<Deployment>(&exec, &dpns, &name).await?;
        Ok((h == [format!("{name}-r2-harness")]).then_some(()))
    })
    .await?;
    // Embedded OpenClaw: nothing of the Agent in the control cluster.
    for (kind, names) in [
        (
            "Deployment",
            all_names::<Deployment>(&control, &gw_ns, &name).await?,
        ),
        (
            "Service",
            all_names::<Service>(&control, &gw_ns, &name).await?,
        ),
        (
            "Secret",
            all_names::<Secret>(&control, &gw_ns, &name).await?,
        ),
    ] {
        assert!(
            names.is_empty(),
            "embedded Agent has control {kind}s {names:?}"
        );
    }
    assert_eq!(
        route_backend(&control, &gw_ns, &name).await?,
        None,
        "no route"
    );
    let (r1_seen, r1_left) = observer.await??;
    assert!(r1_seen, "the observer saw revision 1's Pod");
    assert_eq!(
        r1_left, 0,
        "a Pod of revision 2 started while revision 1 still had Pods"
    );

    assert_harness_serving(&exec, &dpns, &name, 2).await?;
    // Retired after r2 was activated, in the recorded progress too.
    let retired_at = r1.progress.phases.get("retired").copied();
    let activated_at = r2.progress.activated_at;
    assert!(
        retired_at.zip(activated_at).is_some_and(|(r, a)| r >= a),
        "r1 retired at {retired_at:?}, r2 activated at {activated_at:?}"
    );
    // Retirement is the destructive cleanup: r1's credential Secret goes,
    // r2's stays.
    // (The hub records the phase once the retire work is queued; the spoke
    // finishes it moments later.)
    let secrets = until(WAIT, "r1's credential Secret gone", || async {
        let secrets = live_names::<Secret>(&exec, &dpns, &name).await?;
        Ok((!secrets.contains(&format!("{name}-r1-credentials"))).then_some(secrets))
    })
    .await?;
    assert!(
        secrets.contains(&format!("{name}-r2-credentials")),
        "{secrets:?}"
    );
    assert_eq!(
        w.rest.agent(&ns.name, &name).await?.active_revision,
        Some(2)
    );
    w.finish().await
}

/// 3. stop → the route and Gateway runtime go first (hub, control), then
/// the Harness Deployment (spoke, exec-a), then the provider's revision
/// cleanup; PVCs are kept (the Gateway's in control, the Agent-owned
/// workspace claim in exec-a, bound to a volume of the test clusters'
/// provisioner), and so is the Harness Secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_removes_route_and_gateway_then_harness_then_provider_state() -> Result<()> {
    let mut w = World::start().await?;
    let (ns, agent) = w.agent("dedicated-codex").await?;
    let gw_ns = gateway_ns(&ns.id);
    let (control, exec) = (w.control.admin(), w.exec_a.admin());
    let dpns = ns.data_plane_namespace.clone();
    let name = agent.name.clone();

    w.rest.deploy_current(&ns.name, &name).await?;
    w.rest
        .wait_phase(&ns.name, &name, 1, RevisionPhase::Active)
        .await?;
    assert_serving(&control, &exec, &dpns, &gw_ns, &name, 1).await?;
    let claim = Api::<PersistentVolumeClaim>::namespaced(exec.clone(), &dpns)
        .get(&format!("{name}-workspace"))
        .await?;
    assert_eq!(
        claim.status.and_then(|s| s.phase).as_deref(),
        Some("Bound"),
        "workspace bound"
    );

    // Observer, each round reading the later step first: the Harness
    // Deployment (exec-a), then the Gateway Deployment, then the route
    // (control). A step seen going while an earlier one is still in place
    // is a violation. First-seen times are kept for the report.
    #[derive(Default, Debug, Clone, Copy)]
    struct Seen {
        route: Option<Instant>,
        gateway: Option<Instant>,
        harness: Option<Instant>,
        harness_absent: Option<Instant>,
        /// Start of the last read that found the Harness Deployment live.
        harness_last_live: Option<Instant>,
        /// First round each step was seen in: route, Gateway, Harness.
        first_round: [Option<usize>; 3],
        violations: usize,
        rounds: usize,
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let observer = {
        let (control, exec, dpns, name) =
            (control.clone(), exec.clone(), dpns.clone(), name.clone());
        let (seen, stop, gw_ns) = (seen.clone(), stop.clone(), gw_ns.clone());
        tokio::spawn(async move {
            let harness = Api::<Deployment>::namespaced(exec, &dpns);
            let gateways = Api::<Deployment>::namespaced(control.clone(), &gw_ns);
            let routes = routes(&control, &gw_ns)?;
            while !stop.load(Ordering::SeqCst) {
                let read_h = Instant::now();
                let h = harness.get_opt(&format!("{name}-r1-harness")).await?;
                let now_h = Instant::now();
                let g = gateways.get_opt(&format!("{name}-gateway")).await?;
                let now_g = Instant::now();
                let r = routes.get_opt(&name).await?;
                let now_r = Instant::now();
                let (h_going, g_going, r_gone) = (
                    going(h.as_ref().map(|d| &d.metadata)),
                    going(g.as_ref().map(|d| &d.metadata)),
                    r.is_none(),
                );
                {
                    let mut s = seen.lock().unwrap();
                    // The Harness going needs the Gateway going; either going needs
                    // the route gone.
                    let harness_early = h_going && !g_going;
                    let runtime_early = (h_going || g_going) && !r_gone;
                    if harness_early || runtime_early {
                        s.violations += 1;
                    }
                    let round = s.rounds;
                    if r_gone {
                        s.route.get_or_insert(now_r);
                        s.first_round[0].get_or_insert(round);
                    }
                    if g_going {
                        s.gateway.get_or_insert(now_g);
                        s.first_round[1].get_or_insert(round);
                    }
                    if h_going {
                        s.harness.get_or_insert(now_h);
                        s.first_round[2].get_or_insert(round);
                    } else {
                        s.harness_last_live = Some(read_h);
                    }
                    if h.is_none() {
                        s.harness_absent.get_or_insert(now_h);
                    }
                    s.rounds += 1;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            anyhow::Ok(())
        })
    };
    until(WAIT, "observer running", || async {
        Ok((seen.lock().unwrap().rounds > 0).then_some(()))
    })
    .await?;
    let stop_sent = Instant::now();
    let _: Agent = w
        .rest
        .call(
            Method::POST,
            &format!("/namespaces/{}/agents/{name}/stop", ns.name),
            Some(json!({})),
        )
        .await?;
    w.rest
        .wait_phase(&ns.name, &name, 1, RevisionPhase::Stopped)
        .await?;
    until(
        WAIT,
        "Harness Deployment gone and provider cleanup run",
        || async {
            let gone = seen.lock().unwrap().harness_absent.is_some();
            let cleaned = w
                .spoke
                .cleanups
                .lock()
                .unwrap()
                .iter()
                .any(|c| c.agent == name && c.revision == 1);
            Ok((gone && cleaned).then_some(()))
        },
    )
    .await?;
    stop.store(true, Ordering::SeqCst);
    observer.await??;
    let s = *seen.lock().unwrap();
    let ms = |t: Option<Instant>| t.map(|t| t.duration_since(stop_sent).as_millis());
    let cleanup = w
        .spoke
        .cleanups
        .lock()
        .unwrap()
        .iter()
        .find(|c| c.agent == name && c.revision == 1)
        .cloned()
        .context("provider cleanup call")?;
    eprintln!(
        "stop order (ms after the request, {} observer rounds): route gone {:?}, gateway Deployment going {:?}, Harness Deployment going {:?}, absent {:?}, provider cleanup {}",
        s.rounds,
        ms(s.route),
        ms(s.gateway),
        ms(s.harness),
        ms(s.harness_absent),
        cleanup.at.duration_since(stop_sent).as_millis()
    );
    assert_eq!(
        s.violations, 0,
        "a later stop step was seen before an earlier one finished: {s:?}"
    );
    // Seen in that order (a round reads all three; several steps can
    // finish between two rounds on a loaded machine).
    let [route, gateway, harness] = s.first_round;
    let (route, gateway, harness) = (
        route.context("route never seen gone")?,
        gateway.context("gateway never seen going")?,
        harness.context("Harness never seen going")?,
    );
    assert!(route <= gateway && gateway <= harness, "{s:?}");
    // The provider cleanup read the Deployment as absent when it ran, and
    // ran after the last moment the observer saw the Deployment live.
    assert!(
        cleanup.deployment_absent,
        "the provider cleanup ran while the Harness Deployment existed"
    );
    let last_live = s.harness_last_live.context("Harness never seen live")?;
    assert!(
        cleanup.at > last_live,
        "provider cleanup while the Harness was live"
    );

    // Gone: route, Gateway runtime and Service, Harness Deployment,
    // Service and Pods.
    assert!(routes(&control, &gw_ns)?.get_opt(&name).await?.is_none());
    assert!(
        all_names::<Deployment>(&control, &gw_ns, &name)
            .await?
            .is_empty()
    );
    assert!(
        all_names::<Service>(&control, &gw_ns, &name)
            .await?
            .is_empty()
    );
    assert!(
        all_names::<Deployment>(&exec, &dpns, &name)
            .await?
            .is_empty()
    );
    assert!(all_names::<Service>(&exec, &dpns, &name).await?.is_empty());
    until(WAIT, "Harness Pods gone", || async {
        Ok(all_names::<Pod>(&exec, &dpns, &name)
            .await?
            .is_empty()
            .then_some(()))
    })
    .await?;
    // Kept: the Gateway PVC (control), the workspace PVC and the
    // credential Secret (exec-a).
    assert_eq!(
        live_names::<PersistentVolumeClaim>(&control, &gw_ns, &name).await?,
        [format!("{name}-gateway-data")]
    );
    assert_eq!(
        live_names::<PersistentVolumeClaim>(&exec, &dpns, &name).await?,
        [format!("{name}-workspace")]
    );
    assert!(
        live_names::<Secret>(&exec, &dpns, &name)
            .await?
            .contains(&format!("{name}-r1-credentials"))
    );
    assert_eq!(w.rest.agent(&ns.name, &name).await?.active_revision, None);
    w.finish().await
}

/// 6. A tenant's token cannot deploy into another tenant: 403, and nothing
/// is queued (no work item, no outbox item, no revision).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_token_cannot_deploy_into_another_tenant() -> Result<()> {
    let mut w = World::start().await?;
    let (ns_a, agent_a) = w.agent("embedded-openclaw").await?;
    let (ns_b, agent_b) = w.agent("embedded-openclaw").await?;
    let token_a = w
        .hub
        .token("deployer-a", Some(&ns_a.name), Role::Deployer)
        .await;
    let as_a = w.rest.with_token(&token_a);
    let store = w.hub.store();
    // Creating tenant B queued its own namespace work (as root); the
    // refused calls must add nothing to it.
    let work_b = || async {
        let mut items: Vec<(String, String)> = store
            .list_work(&WorkFilter {
                namespace: Some(ns_b.name.clone()),
                state: None,
                limit: 1000,
            })
            .await?
            .into_iter()
            .map(|w| (w.id, w.kind))
            .collect();
        items.sort();
        anyhow::Ok(items)
    };
    let work_before = work_b().await?;

    for (method, path, body) in [
        (
            Method::POST,
            format!("/namespaces/{}/agents/{}/deploy", ns_b.name, agent_b.name),
            None,
        ),
        (
            Method::POST,
            format!("/namespaces/{}/agents/{}/deploy", ns_b.name, agent_b.name),
            Some(json!({ "fromRevision": 1 })),
        ),
        (
            Method::POST,
            format!("/namespaces/{}/agents/{}/stop", ns_b.name, agent_b.name),
            Some(json!({})),
        ),
    ] {
        let (status, text) = as_a.exchange(method, &path, body.as_ref(), None).await?;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {text}");
    }
    // Tenant A's own deploy works (the token is valid), and runs.
    as_a.deploy_current(&ns_a.name, &agent_a.name).await?;
    w.rest
        .wait_phase(&ns_a.name, &agent_a.name, 1, RevisionPhase::Active)
        .await?;

    assert!(
        store
            .list_revisions(&ns_b.name, &agent_b.name)
            .await?
            .is_empty(),
        "no revision for tenant B"
    );
    let work_after = work_b().await?;
    assert_eq!(work_after, work_before, "no work queued for tenant B");
    assert!(
        work_after
            .iter()
            .all(|(_, kind)| kind != "revision.rollout" && kind != "agent.stop"),
        "{work_after:?}"
    );
    for target in [
        clawfed_proto::work::target::namespace(&ns_b.id),
        clawfed_proto::work::target::harness(&ns_b.id, &agent_b.name, 1),
    ] {
        assert!(
            !w.hub.db.store.outbox_target_exists(&target).await?,
            "outbox item {target}"
        );
    }
    let b = w.rest.agent(&ns_b.name, &agent_b.name).await?;
    assert_eq!(b.latest_revision, None);
    assert_eq!(b.active_revision, None);
    // Nothing of tenant B reached either cluster.
    assert!(
        all_names::<Deployment>(&w.control.admin(), &gateway_ns(&ns_b.id), &agent_b.name)
            .await?
            .is_empty()
    );
    let exec_ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(w.exec_a.admin());
    assert!(exec_ns.get_opt(&ns_b.data_plane_namespace).await?.is_none());
    w.finish().await
}

// ======================================================= hub processes

/// A `clawfed-hub serve` child on PostgreSQL with the pipeline and the
/// control-cluster Gateways on (YAML config; `gateway.kubeconfig` is a
/// kubeconfig for the hub's ServiceAccount), fixed REST and link ports and
/// CA dir so restarts keep them.
struct HubEnv {
    dir: tempfile::TempDir,
    _db: db::TestDb,
    config: PathBuf,
    rest_port: u16,
    link_port: u16,
    store: Arc<dyn Store>,
    rest: Option<HubClient>,
}

impl HubEnv {
    async fn new(control: &TestCluster) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("logs"))?;
        let db = db::postgres().await;
        let kubeconfig = dir.path().join("hub.kubeconfig");
        control_env::write_service_account_kubeconfig(
            control,
            control_env::HUB_NS,
            control_env::HUB_SA,
            3600,
            &kubeconfig,
        )
        .await?;
        // Port 0 at the first start; then pinned to what it bound.
        let (rest_port, link_port) = (0, 0);
        let config = json!({
            "version": 1,
            "database": { "url": db.url },
            "api": {
                "restAddr": format!("127.0.0.1:{rest_port}"),
                "grpcAddr": "127.0.0.1:0",
                "metricsAddr": "127.0.0.1:0",
                "maxBodyBytes": 1048576
            },
            "worker": {
                "enabled": true, "batchSize": 32, "leaseSeconds": 2,
                "pollIntervalMs": 20, "maxAttempts": 8, "backoffBaseMs": 20,
                "backoffCapMs": 500, "healthIntervalSeconds": 60
            },
            "link": {
                "enabled": true,
                "addr": format!("127.0.0.1:{link_port}"),
                "caDir": dir.path().join("ca"),
                "serverNames": ["127.0.0.1", "localhost"],
                "certTtlSeconds": 3600,
                "heartbeatSeconds": 1,
                "maxSessions": 100,
                "maxConcurrentHandshakes": 16,
                "maxMessageBytes": 4194304
            },
            "pipeline": { "enabled": true, "readyDeadlineSeconds": 60, "pathProbe": false, "startupStatus": false },
            "tunnel": { "addr": "127.0.0.1:0" },
            "gateway": {
                "enabled": true,
                "kubeconfig": kubeconfig,
                "options": control_env::gateway_config()
            },
            "log": { "format": "json", "filter": "info" }
        });
        let path = dir.path().join("hub.yaml");
        std::fs::write(&path, serde_yaml_ng::to_string(&config)?)?;
        let store = db.dyn_store();
        Ok(Self {
            dir,
            _db: db,
            config: path,
            rest_port,
            link_port,
            store,
            rest: None,
        })
    }

    fn logs(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    /// Serves the tunnel ingress on the root end of the test Pod network
    /// (port 0, pinned after the first start, so a restarted hub is where
    /// the Gateways were told) and turns the data path probe and the plugin
    /// startup status on (the Harness stand-in publishes one).
    fn data_path(&mut self) -> Result<()> {
        let mut config: serde_json::Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(&self.config)?)?;
        config["tunnel"] = json!({ "addr": format!("{POD_NET_ROOT}:0") });
        config["pipeline"]["pathProbe"] = json!(true);
        config["pipeline"]["startupStatus"] = json!(true);
        std::fs::write(&self.config, serde_yaml_ng::to_string(&config)?)?;
        Ok(())
    }

    fn link_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.link_port)
    }

    fn ca_pem(&self) -> Result<String> {
        Ok(std::fs::read_to_string(self.dir.path().join("ca/ca.crt"))?)
    }

    /// Starts `clawfed-hub serve` and waits for its "listening" line.
    async fn serve(&mut self, n: u32) -> Result<Proc> {
        let mut c = Command::new(bin("clawfed-hub")?);
        c.arg("--config").arg(&self.config).arg("serve");
        for (k, _) in std::env::vars() {
            if k.starts_with("CLAWFED_") {
                c.env_remove(k);
            }
        }
        let mut p = Proc::spawn(&format!("hub-{n}"), &mut c, &self.logs())?;
        let listening = p.hub_listening(Duration::from_secs(60)).await?;
        if self.rest_port == 0 {
            (self.rest_port, self.link_port) = listening.pin_hub_ports(&self.config)?;
        }
        if self.rest.is_none() {
            let root = mint(self.store.as_ref(), "root", None, Role::InstallationAdmin).await;
            self.rest = Some(HubClient::new(
                &format!("http://127.0.0.1:{}", self.rest_port),
                Some(root),
            )?);
        }
        Ok(p)
    }

    fn rest(&self) -> &HubClient {
        self.rest.as_ref().expect("hub started")
    }
}

/// `clawfed-spoke --applier kube` as a child acting as the spoke's
/// ServiceAccount on exec-a (a kubeconfig with its token and the CA).
struct SpokeEnv {
    kubeconfig: PathBuf,
    state: PathBuf,
    token_file: PathBuf,
    ca_file: PathBuf,
    cluster_name: String,
}

impl SpokeEnv {
    async fn new(hub: &HubEnv, exec_a: &TestCluster, cluster_name: &str) -> Result<Self> {
        spoke_env::install_spoke_rbac(exec_a).await?;
        let root = hub.dir.path();
        let kubeconfig = root.join("spoke.kubeconfig");
        control_env::write_service_account_kubeconfig(
            exec_a,
            spoke_env::SPOKE_NAMESPACE,
            spoke_env::SPOKE_SERVICE_ACCOUNT,
            3600,
            &kubeconfig,
        )
        .await?;
        let token_file = root.join("bootstrap-token");
        std::fs::write(&token_file, hub.rest().bootstrap_token(cluster_name).await?)?;
        let ca_file = root.join("hub-ca.pem");
        std::fs::write(&ca_file, hub.ca_pem()?)?;
        Ok(Self {
            kubeconfig,
            state: root.join("spoke-state"),
            token_file,
            ca_file,
            cluster_name: cluster_name.to_owned(),
        })
    }

    /// Starts the spoke; the bootstrap token only on its first start.
    fn spawn(&self, hub: &HubEnv, n: u32, enroll: bool) -> Result<Proc> {
        let mut c = Command::new(bin("clawfed-spoke")?);
        for (k, _) in std::env::vars() {
            if k.starts_with("CLAWFED_") || k == "KUBECONFIG" {
                c.env_remove(k);
            }
        }
        c.args(["--hub-url", &hub.link_url()])
            .arg("--ca-file")
            .arg(&self.ca_file)
            .args(["--cluster-name", &self.cluster_name])
            .arg("--state-dir")
            .arg(&self.state)
            .args(["--applier", "kube"])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(["--backoff-max-seconds", "1"])
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .env("CLAWFED_LOG", "info");
        if enroll {
            c.arg("--bootstrap-token-file").arg(&self.token_file);
        }
        Proc::spawn(&format!("spoke-{n}"), &mut c, &hub.logs())
    }
}

/// Identity and version of an object, to prove nothing touched it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Version {
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
}

fn version(meta: &ObjectMeta) -> Version {
    Version {
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        generation: meta.generation,
    }
}

/// The running workloads of `agent`: Harness Deployment and Pod (exec-a),
/// Gateway Deployment (control).
async fn workloads(
    control: &Client,
    exec: &Client,
    dpns: &str,
    gw_ns: &str,
    agent: &str,
) -> Result<Vec<(String, Version)>> {
    let mut out = Vec::new();
    let d = Api::<Deployment>::namespaced(exec.clone(), dpns)
        .get(&format!("{agent}-r1-harness"))
        .await?;
    out.push((d.name_any(), version(&d.metadata)));
    for p in Api::<Pod>::namespaced(exec.clone(), dpns)
        .list(&agent_selector(agent))
        .await?
        .items
    {
        out.push((p.name_any(), version(&p.metadata)));
    }
    let g = Api::<Deployment>::namespaced(control.clone(), gw_ns)
        .get(&format!("{agent}-gateway"))
        .await?;
    out.push((g.name_any(), version(&g.metadata)));
    Ok(out)
}

/// 4. the hub killed with SIGKILL while the revision is `preparing` →
/// after a restart on the same database, CA and link port the revision
/// completes, with exactly one of each object per revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_killed_during_prepare_completes_after_restart_without_duplicates() -> Result<()> {
    clawfed_tests::link::init_test_logging();
    let control = control_env::control().await?;
    let exec_a = kube_env::cluster("exec-a").await?;
    let spoke_client = spoke_env::spoke_client(&exec_a).await?;
    let mut env = HubEnv::new(&control).await?;
    let mut cleanup = Cleanup::default();
    let mut hub = env.serve(1).await?;
    let rest = env.rest().clone();
    let cluster_name = format!("exec-a-{}", &short_id()[..6]);
    let mut spoke = InSpoke::start(
        &env.link_url(),
        env.ca_pem()?,
        &cluster_name,
        rest.bootstrap_token(&cluster_name).await?,
        spoke_client,
    )
    .await?;
    rest.wait_online(&cluster_name, WAIT).await?;
    let (ns, agent) = rest
        .tenant_with_agent(&cluster_name, "dedicated-codex")
        .await?;
    let gw_ns = gateway_ns(&ns.id);
    let name = agent.name.clone();
    let dpns = ns.data_plane_namespace.clone();
    cleanup.track(&control.admin(), &ns, &name).await?;

    rest.deploy_current(&ns.name, &name).await?;
    let seen = until(WAIT, "revision 1 preparing", || async {
        let r = rest.revision(&ns.name, &name, 1).await?;
        match r.phase {
            RevisionPhase::Pending | RevisionPhase::Provisioning => Ok(None),
            RevisionPhase::Preparing => Ok(Some(r)),
            other => bail!("revision 1 went past preparing to {other:?} before the kill"),
        }
    })
    .await?;
    hub.kill9()?;
    let (control_admin, exec_admin) = (control.admin(), exec_a.admin());
    eprintln!(
        "killed in {:?}; gateway applied: {}; gateway objects then: deployments {:?}, services {:?}; harness {:?}",
        seen.phase,
        seen.progress.gateway_applied_at.is_some(),
        all_names::<Deployment>(&control_admin, &gw_ns, &name).await?,
        all_names::<Service>(&control_admin, &gw_ns, &name).await?,
        all_names::<Deployment>(&exec_admin, &dpns, &name).await?,
    );
    let at_kill = rest.revision(&ns.name, &name, 1).await;
    assert!(at_kill.is_err(), "the hub is down");

    let mut hub = env.serve(2).await?;
    let r1 = rest
        .wait_phase(&ns.name, &name, 1, RevisionPhase::Active)
        .await?;
    assert!(r1.progress.durations_ms.contains_key("elapsedMs"));
    assert_serving(&control_admin, &exec_admin, &dpns, &gw_ns, &name, 1).await?;
    // Exactly one of each, deleting or not.
    assert_eq!(
        all_names::<Deployment>(&exec_admin, &dpns, &name).await?,
        [format!("{name}-r1-harness")]
    );
    assert_eq!(
        all_names::<Service>(&exec_admin, &dpns, &name).await?,
        [format!("{name}-r1-harness")]
    );
    assert_eq!(
        all_names::<Deployment>(&control_admin, &gw_ns, &name).await?,
        [format!("{name}-gateway")]
    );
    assert_eq!(
        all_names::<Service>(&control_admin, &gw_ns, &name).await?,
        [format!("{name}-r1-gateway")]
    );
    assert_eq!(
        all_names::<PersistentVolumeClaim>(&control_admin, &gw_ns, &name).await?,
        [format!("{name}-gateway-data")]
    );
    let revisions = env.store.list_revisions(&ns.name, &name).await?;
    assert_eq!(revisions.len(), 1, "one revision");
    let r = rest.agent(&ns.name, &name).await?;
    assert_eq!(r.active_revision, Some(1));

    spoke.stop().await;
    hub.terminate().await;
    cleanup.run().await?;
    Ok(())
}

/// Waits until a readiness verdict the spoke sent after `since` reached the
/// hub: the spoke re-sends its verdicts last when it (re)connects, so it
/// has resumed in full.
async fn resumed(
    store: &dyn Store,
    cluster_id: &str,
    since: chrono::DateTime<chrono::Utc>,
) -> Result<()> {
    until(
        WAIT,
        "the spoke's verdicts re-sent after it reconnected",
        || async {
            let reports = store.list_reports(cluster_id).await?;
            Ok(reports
                .iter()
                .any(|r| r.kind == clawfed_hub::link::report::READINESS && r.received_at > since)
                .then_some(()))
        },
    )
    .await
}

/// 5. the spoke killed (SIGKILL), and separately the hub unreachable for a
/// while (killed, restarted only after several heartbeats): the running
/// workloads are untouched (same uid, resourceVersion, generation), the
/// cluster is shown offline within 2 heartbeats (link.heartbeatSeconds: 1),
/// and status is correct again within seconds of the reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoke_and_hub_outages_leave_workloads_untouched() -> Result<()> {
    const HEARTBEAT: Duration = Duration::from_secs(1);
    clawfed_tests::link::init_test_logging();
    let control = control_env::control().await?;
    let exec_a = kube_env::cluster("exec-a").await?;
    let mut env = HubEnv::new(&control).await?;
    let mut cleanup = Cleanup::default();
    let mut hub = env.serve(1).await?;
    let rest = env.rest().clone();
    let cluster_name = format!("exec-a-{}", &short_id()[..6]);
    let spoke_proc = SpokeEnv::new(&env, &exec_a, &cluster_name).await?;
    let mut spoke = spoke_proc.spawn(&env, 1, true)?;
    let online = rest.wait_online(&cluster_name, WAIT).await?;
    // The shipped spoke names its SandboxDriver (default: Deployments).
    assert!(
        online
            .capabilities
            .iter()
            .any(|c| c == "sandbox-driver:deployment"),
        "{:?}",
        online.capabilities
    );
    let (ns, agent) = rest
        .tenant_with_agent(&cluster_name, "dedicated-codex")
        .await?;
    let gw_ns = gateway_ns(&ns.id);
    let name = agent.name.clone();
    let dpns = ns.data_plane_namespace.clone();
    cleanup.track(&control.admin(), &ns, &name).await?;
    rest.deploy_current(&ns.name, &name).await?;
    rest.wait_phase(&ns.name, &name, 1, RevisionPhase::Active)
        .await?;
    let (control_admin, exec_admin) = (control.admin(), exec_a.admin());
    assert_serving(&control_admin, &exec_admin, &dpns, &gw_ns, &name, 1).await?;
    let before = workloads(&control_admin, &exec_admin, &dpns, &gw_ns, &name).await?;
    assert_eq!(before.len(), 3, "{before:?}");

    // --- the spoke killed -------------------------------------------------
    spoke.kill9()?;
    let killed = Instant::now();
    until(
        2 * HEARTBEAT + Duration::from_millis(500),
        "offline within 2 heartbeats",
        || async {
            let c = rest.cluster(&cluster_name).await?;
            Ok((c.connection_state == ConnectionState::Offline).then_some(()))
        },
    )
    .await?;
    let offline_after = killed.elapsed();
    // The fault itself, not a synchronization: the spoke stays down for
    // three heartbeats, and nothing may change meanwhile.
    tokio::time::sleep(3 * HEARTBEAT).await;
    assert_eq!(
        workloads(&control_admin, &exec_admin, &dpns, &gw_ns, &name).await?,
        before,
        "workloads changed while the spoke was down"
    );
    let cluster_id = rest.cluster(&cluster_name).await?.id;
    let restarted = Instant::now();
    let restarted_at = chrono::Utc::now();
    let mut spoke = spoke_proc.spawn(&env, 2, false)?;
    rest.wait_online(&cluster_name, Duration::from_secs(15))
        .await?;
    let online_after = restarted.elapsed();
    let r = rest.revision(&ns.name, &name, 1).await?;
    assert_eq!(r.phase, RevisionPhase::Active);
    resumed(env.store.as_ref(), &cluster_id, restarted_at).await?;
    assert_eq!(
        workloads(&control_admin, &exec_admin, &dpns, &gw_ns, &name).await?,
        before,
        "the restarted spoke changed running workloads"
    );

    // --- the hub unreachable ----------------------------------------------
    // The lost session and every failed dial log one of these.
    let disconnects = |p: &Proc| Proc::text(&p.stderr).matches("link.disconnected").count();
    let before_outage = disconnects(&spoke);
    hub.kill9()?;
    let hub_down = Instant::now();
    // Down until the spoke has lost the hub and failed to dial it again
    // three times: its whole reaction to a lost hub has run.
    until(
        WAIT,
        "the spoke to lose the hub and fail 3 dials",
        || async { Ok((disconnects(&spoke) > before_outage + 3).then_some(())) },
    )
    .await?;
    assert!(spoke.alive(), "the spoke keeps running without the hub");
    assert_eq!(
        workloads(&control_admin, &exec_admin, &dpns, &gw_ns, &name).await?,
        before,
        "the spoke changed workloads when it lost the hub"
    );
    let hub_back_at = chrono::Utc::now();
    let mut hub = env.serve(2).await?;
    let hub_back = Instant::now();
    // Online again with a last_seen from after the outage: a killed hub's
    // session lease (issue 14) keeps the cluster recorded online for up to
    // two heartbeats, so "online" alone may still be the old session.
    let outage = chrono::Duration::from_std(hub_down.elapsed()).unwrap_or_default();
    let since = chrono::Utc::now() - outage;
    let c = until(
        Duration::from_secs(15),
        "the spoke reconnected after the outage",
        || async {
            let c = rest.cluster(&cluster_name).await?;
            Ok((c.connection_state == ConnectionState::Online
                && c.last_seen.is_some_and(|t| t > since))
            .then_some(c))
        },
    )
    .await?;
    let reconnect_after = hub_back.elapsed();
    assert!(
        c.last_seen.is_some_and(|t| t > chrono::Utc::now()
            - chrono::Duration::from_std(hub_down.elapsed()).unwrap_or_default()),
        "last seen after the outage: {:?}",
        c.last_seen
    );
    let r = rest.revision(&ns.name, &name, 1).await?;
    assert_eq!(r.phase, RevisionPhase::Active);
    assert_eq!(rest.agent(&ns.name, &name).await?.active_revision, Some(1));
    resumed(env.store.as_ref(), &cluster_id, hub_back_at).await?;
    assert_eq!(
        workloads(&control_admin, &exec_admin, &dpns, &gw_ns, &name).await?,
        before,
        "workloads changed across the hub outage"
    );
    assert!(spoke.alive());
    let spoke_log = Proc::text(&spoke.stderr);
    assert!(
        spoke_log.contains("link.disconnected"),
        "the spoke saw the hub go:\n{spoke_log}"
    );
    eprintln!(
        "offline {offline_after:?} after the spoke's SIGKILL; online {online_after:?} after its restart; reconnected {reconnect_after:?} after the hub restart"
    );

    spoke.terminate().await;
    hub.terminate().await;
    cleanup.run().await?;
    Ok(())
}

// ================================================ issue 9: nothing lost, nothing raced

async fn revision_phase_is(
    rest: &HubClient,
    ns: &str,
    agent: &str,
    n: i64,
    want: &[RevisionPhase],
) -> Result<AgentRevision> {
    until(WAIT, &format!("revision {n} in {want:?}"), || async {
        let r = rest.revision(ns, agent, n).await?;
        Ok(want.contains(&r.phase).then_some(r))
    })
    .await
}

/// Waits (bounded) until no live Harness Deployment of `agent` is left.
async fn wait_no_harness(exec: &Client, dpns: &str, agent: &str) -> Result<()> {
    until(WAIT, "no Harness of the stopped Agent", || async {
        Ok(live_names::<Deployment>(exec, dpns, agent)
            .await?
            .iter()
            .all(|d| !d.ends_with("-harness"))
            .then_some(()))
    })
    .await
}

/// Defect 12: an Agent stopped while its second revision waits for a
/// paused spoke (the exclusive replacement queued revision 1's stop first;
/// revision 2's Harness waits for its confirmation). Revision 1 stays
/// `stopping` (not `stopped`) until the spoke confirms; revision 2's
/// Harness never appears; afterwards no Harness of the Agent exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_before_the_second_revision_is_active_leaves_no_harness() -> Result<()> {
    let mut w = World::start().await?;
    let (ns, agent) = w.agent("embedded-openclaw").await?;
    let exec = w.exec_a.admin();
    let (dpns, name) = (ns.data_plane_namespace.clone(), agent.name.clone());
    w.rest.deploy_current(&ns.name, &name).await?;
    w.rest
        .wait_phase(&ns.name, &name, 1, RevisionPhase::Active)
        .await?;

    // The spoke pauses; revision 1's stop, which revision 2's Harness
    // waits for, stays in the outbox.
    w.spoke.stop().await;
    w.rest.deploy_current(&ns.name, &name).await?;
    let store = w.hub.store();
    let cluster = store.get_cluster(&w.cluster_name).await?;
    let r1_target = clawfed_proto::work::target::harness(&ns.id, &name, 1);
    until(
        WAIT,
        "revision 1's stop queued before revision 2's Harness",
        || async {
            Ok(store
                .outbox_latest_generation(&cluster.id, &r1_target)
                .await?
                .filter(|g| *g == clawfed_proto::work::generation::HARNESS_STOP)
                .map(|_| ()))
        },
    )
    .await?;
    w.rest
        .call::<Agent>(
            Method::POST,
            &format!("/namespaces/{}/agents/{name}/stop", ns.name),
            None,
        )
        .await?;
    let r1 = revision_phase_is(
        &w.rest,
        &ns.name,
        &name,
        1,
        &[RevisionPhase::Stopping, RevisionPhase::Stopped],
    )
    .await?;
    ensure!(
        r1.phase == RevisionPhase::Stopping,
        "revision 1 is {:?} ({:?}) while its cluster has not confirmed the stop",
        r1.phase,
        r1.reason
    );
    // Revision 2 never had Harness work: nothing of it runs anywhere, so
    // it is stopped without waiting for the cluster.
    ensure!(
        store
            .outbox_latest_generation(
                &cluster.id,
                &clawfed_proto::work::target::harness(&ns.id, &name, 2)
            )
            .await?
            .is_none(),
        "revision 2's Harness went out before revision 1's stop was confirmed"
    );
    ensure!(
        live_names::<Deployment>(&exec, &dpns, &name)
            .await?
            .contains(&format!("{name}-r1-harness")),
        "the paused spoke changed nothing yet"
    );

    // The spoke comes back: the stops are delivered and confirmed.
    let client = spoke_env::spoke_client(&w.exec_a).await?;
    let cluster_name = w.cluster_name.clone();
    w.spoke.restart(&w.hub, &cluster_name, client).await?;
    for n in [1, 2] {
        let r = revision_phase_is(&w.rest, &ns.name, &name, n, &[RevisionPhase::Stopped]).await?;
        ensure!(r.reason.is_some(), "stopped with a reason");
    }
    wait_no_harness(&exec, &dpns, &name).await?;
    ensure!(
        !all_names::<Deployment>(&exec, &dpns, &name)
            .await?
            .contains(&format!("{name}-r2-harness")),
        "revision 2's Harness must never reach the cluster"
    );
    w.finish().await
}

/// Defect 4: the deployer's token is revoked while its revision waits for
/// the spoke. The pass the spoke's report triggers carries no requester,
/// yet it re-checks the deployer and fails the revision before any
/// Harness work is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_deployer_stops_the_pipeline_before_the_next_effect() -> Result<()> {
    let mut w = World::start().await?;
    let (ns, agent) = w.agent("embedded-openclaw").await?;
    let exec = w.exec_a.admin();
    let (dpns, name) = (ns.data_plane_namespace.clone(), agent.name.clone());
    let token_name = format!("ci-{}", short_id());
    let token = w
        .hub
        .token(&token_name, Some(&ns.name), Role::Deployer)
        .await;

    w.spoke.stop().await;
    w.rest
        .with_token(&token)
        .deploy_current(&ns.name, &name)
        .await?;
    revision_phase_is(&w.rest, &ns.name, &name, 1, &[RevisionPhase::Provisioning]).await?;
    let store = w.hub.store();
    store.revoke_token(&token_name, chrono::Utc::now()).await?;

    let client = spoke_env::spoke_client(&w.exec_a).await?;
    let cluster_name = w.cluster_name.clone();
    w.spoke.restart(&w.hub, &cluster_name, client).await?;
    let r = revision_phase_is(
        &w.rest,
        &ns.name,
        &name,
        1,
        &[RevisionPhase::Failed, RevisionPhase::Active],
    )
    .await?;
    ensure!(
        r.phase == RevisionPhase::Failed
            && r.reason
                .as_deref()
                .unwrap_or("")
                .contains("authorization re-check failed"),
        "revision 1 is {:?} ({:?})",
        r.phase,
        r.reason
    );
    let cluster = store.get_cluster(&w.cluster_name).await?;
    let r1_target = clawfed_proto::work::target::harness(&ns.id, &name, 1);
    ensure!(
        store
            .outbox_latest_generation(&cluster.id, &r1_target)
            .await?
            .is_none(),
        "no Harness work may go out after the deployer lost its right"
    );
    ensure!(
        all_names::<Deployment>(&exec, &dpns, &name)
            .await?
            .is_empty(),
        "no Harness in the cluster"
    );
    w.finish().await
}

/// Defect 3: revision 1 (dedicated, RWO workspace) runs on exec-a,
/// revision 2 is placed on exec-b. Revision 1 is stopped and retired on
/// exec-a, where it runs; exec-b is never sent work for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dedicated_predecessor_is_stopped_and_retired_on_its_own_cluster() -> Result<()> {
    let mut w = World::start().await?;
    let (ns, agent) = w.agent("dedicated-codex").await?;
    let exec_a = w.exec_a.admin();
    let (dpns, name) = (ns.data_plane_namespace.clone(), agent.name.clone());
    w.rest.deploy_current(&ns.name, &name).await?;
    w.rest
        .wait_phase(&ns.name, &name, 1, RevisionPhase::Active)
        .await?;

    let exec_b = kube_env::cluster("exec-b").await?;
    let exec_b_admin = exec_b.admin();
    let b_name = format!("exec-b-{}", &short_id()[..6]);
    let b_token = w.rest.bootstrap_token(&b_name).await?;
    let mut spoke_b = InSpoke::start(
        &clawfed_tests::link::hub_url(&w.hub),
        clawfed_tests::link::hub_ca(&w.hub),
        &b_name,
        b_token,
        spoke_env::spoke_client(&exec_b).await?,
    )
    .await?;
    w.rest.wait_online(&b_name, WAIT).await?;

    let result = async {
        let current = w.rest.agent(&ns.name, &name).await?;
        let mut spec = serde_json::to_value(&current.spec)?;
        spec["placement"] = json!({ "cluster": b_name });
        w.rest
            .call::<Agent>(
                Method::PUT,
                &format!("/namespaces/{}/agents/{name}", ns.name),
                Some(json!({ "spec": spec, "version": current.version })),
            )
            .await?;
        w.rest.deploy_current(&ns.name, &name).await?;
        let r2 = w
            .rest
            .wait_phase(&ns.name, &name, 2, RevisionPhase::Active)
            .await?;
        ensure!(r2.resolved_cluster.as_deref() == Some(b_name.as_str()));
        w.rest
            .wait_phase(&ns.name, &name, 1, RevisionPhase::Retired)
            .await?;
        let store = w.hub.store();
        let r1_target = clawfed_proto::work::target::harness(&ns.id, &name, 1);
        let b = store.get_cluster(&b_name).await?;
        ensure!(
            store
                .outbox_latest_generation(&b.id, &r1_target)
                .await?
                .is_none(),
            "exec-b was sent work for revision 1, which runs on exec-a"
        );
        let a = store.get_cluster(&w.cluster_name).await?;
        ensure!(
            store.outbox_latest_generation(&a.id, &r1_target).await?
                == Some(clawfed_proto::work::generation::HARNESS_RETIRE),
            "revision 1 retired where it runs"
        );
        until(WAIT, "revision 1's Harness gone from exec-a", || async {
            Ok((!live_names::<Deployment>(&exec_a, &dpns, &name)
                .await?
                .contains(&format!("{name}-r1-harness")))
            .then_some(()))
        })
        .await?;
        ensure!(
            live_names::<Deployment>(&exec_b_admin, &dpns, &name)
                .await?
                .contains(&format!("{name}-r2-harness")),
            "revision 2 runs on exec-b"
        );
        anyhow::Ok(())
    }
    .await;
    spoke_b.stop().await;
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(exec_b_admin.clone())
        .delete(&dpns, &DeleteParams::background())
        .await;
    result?;
    w.finish().await
}

/// Defect 12 without a pause: deploy, deploy again and stop at once, while
/// revision 2 is somewhere in its pipeline. Every revision ends stopped
/// (or retired, if revision 2 activated first) and no Harness is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_deploy_stop_without_a_pause_leaves_no_harness() -> Result<()> {
    let mut w = World::start().await?;
    let (ns, agent) = w.agent("embedded-openclaw").await?;
    let exec = w.exec_a.admin();
    let (dpns, name) = (ns.data_plane_namespace.clone(), agent.name.clone());
    w.rest.deploy_current(&ns.name, &name).await?;
    w.rest
        .wait_phase(&ns.name, &name, 1, RevisionPhase::Active)
        .await?;
    w.rest.deploy_current(&ns.name, &name).await?;
    w.rest
        .call::<Agent>(
            Method::POST,
            &format!("/namespaces/{}/agents/{name}/stop", ns.name),
            None,
        )
        .await?;
    for n in [1, 2] {
        let r = revision_phase_is(
            &w.rest,
            &ns.name,
            &name,
            n,
            &[
                RevisionPhase::Stopped,
                RevisionPhase::Retired,
                RevisionPhase::Failed,
            ],
        )
        .await?;
        ensure!(
            r.phase != RevisionPhase::Failed,
            "revision {n} failed: {:?}",
            r.reason
        );
    }
    wait_no_harness(&exec, &dpns, &name).await?;
    let agent = w.rest.agent(&ns.name, &name).await?;
    ensure!(
        agent.active_revision.is_none(),
        "nothing active after the stop"
    );
    w.finish().await
}

// ============================================================ data path

/// The Harness stand-in image (e2e/pods): the pod runner runs a real
/// process behind Pods of it.
const STANDIN_HARNESS: &str = "clawfed.test/harness-standin:e2e";

fn standin_gateway() -> String {
    format!("clawfed.test/gateway-standin@sha256:{}", "ab".repeat(32))
}

/// The root end of the test Pod network (e2e/podnet.sh): where Pods reach
/// processes of the root namespace, so the hub's tunnel ingress listens
/// there.
const POD_NET_ROOT: &str = "198.18.0.1";

/// Fails with the fix when the Pod network or its runner is missing.
fn require_pod_network() -> Result<()> {
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../e2e/podnet.sh"))
        .arg("check")
        .output()
        .context("e2e/podnet.sh check")?;
    ensure!(
        out.status.success(),
        "the test Pod network is not up ({}); run e2e/cluster.sh up control exec-a",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// The live Gateway Pod of `agent` in control: (name, IP).
async fn gateway_pod(control: &Client, gw_ns: &str, agent: &str) -> Result<(String, String)> {
    until(WAIT, "the Gateway Pod's IP", || async {
        let pods = Api::<Pod>::namespaced(control.clone(), gw_ns)
            .list(&agent_selector(agent))
            .await?;
        Ok(pods.items.into_iter().find_map(|p| {
            let ip = p.status.as_ref()?.pod_ip.clone()?;
            p.metadata
                .deletion_timestamp
                .is_none()
                .then(|| (p.name_any(), ip))
        }))
    })
    .await
}

/// Issue 11: "active" means a request got through. With stand-ins behind
/// the Pods (real processes), the hub's tunnel ingress on the Pod network
/// and the data path probe on, the revision activates only after a request
/// went Gateway (control) -> hub tunnel -> spoke link -> Harness (exec-a).
/// Then: requests through the Gateway reach the Harness (identity, a 64 MiB
/// body round trip, a streamed answer arriving in pieces); the Gateway's
/// credential reaches nothing but its own Harness; a spoke restart ends open
/// connections cleanly and new ones work once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_reaches_its_harness_through_the_tunnel() -> Result<()> {
    require_pod_network()?;
    let mut w = World::start_with(|c| {
        c.tunnel.addr = format!("{POD_NET_ROOT}:0").parse().expect("addr");
        c.pipeline.path_probe = true;
    })
    .await?;
    let (ns, agent) = w
        .agent_with_images("dedicated-codex", STANDIN_HARNESS, &standin_gateway())
        .await?;
    let gw_ns = gateway_ns(&ns.id);
    let control = w.control.admin();
    w.rest.deploy_current(&ns.name, &agent.name).await?;
    let r1 = w
        .rest
        .wait_phase(&ns.name, &agent.name, 1, RevisionPhase::Active)
        .await?;
    eprintln!("active after {:?}", r1.progress.durations_ms);

    let (pod, ip) = gateway_pod(&control, &gw_ns, &agent.name).await?;
    let port = control_env::gateway_config().port;
    let base = format!("http://{ip}:{port}");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;

    // Who answers: the Harness of this Agent's revision 1, in exec-a.
    let identity: serde_json::Value = http
        .get(format!("{base}/identity"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(identity["agent"], agent.name.as_str(), "{identity}");
    assert_eq!(
        identity["revision"].to_string().trim_matches('"'),
        "1",
        "{identity}"
    );
    assert_eq!(
        identity["namespace"],
        ns.data_plane_namespace.as_str(),
        "{identity}"
    );

    // The control cluster's Pod proxy reaches the Gateway stand-in too (the
    // path the probe took), and through it the Harness.
    let url = format!("/api/v1/namespaces/{gw_ns}/pods/{pod}:{port}/proxy/identity");
    let via_proxy = control
        .request_text(http::Request::get(&url).body(Vec::new())?)
        .await?;
    assert!(via_proxy.contains(&agent.name), "{via_proxy}");

    // 64 MiB round trip, intact.
    let body: Vec<u8> = (0..64 * 1024 * 1024usize)
        .map(|i| (i * 7 % 253) as u8)
        .collect();
    let back = http
        .post(format!("{base}/echo"))
        .body(body.clone())
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    ensure!(
        back.len() == body.len(),
        "echo returned {} bytes",
        back.len()
    );
    ensure!(
        back.as_ref() == body.as_slice(),
        "the 64 MiB body came back altered"
    );
    drop((body, back));

    // A streamed answer arrives piece by piece, not at the end.
    let started = Instant::now();
    let mut resp = http
        .get(format!("{base}/stream?chunks=5&interval_ms=300"))
        .send()
        .await?
        .error_for_status()?;
    let mut arrivals = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if !chunk.is_empty() {
            arrivals.push(started.elapsed());
        }
    }
    ensure!(arrivals.len() >= 3, "chunks: {arrivals:?}");
    ensure!(
        *arrivals.last().unwrap() - arrivals[0] >= Duration::from_millis(600),
        "the chunks came together: {arrivals:?}"
    );

    // The Gateway's credential reaches its own Harness only.
    let secret = Api::<Secret>::namespaced(control.clone(), &gw_ns)
        .get(&format!("{}-gateway-transport", agent.name))
        .await?;
    let token = secret
        .data
        .as_ref()
        .and_then(|d| d.get("gateway-token"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .context("gateway-token")?;
    let ingress = clawfed_tests::tunnel::Ingress::of(&w.hub);
    for other in [
        "kubernetes.default.svc:443",
        "127.0.0.1:16444",
        "198.18.0.2:22",
    ] {
        let refused = clawfed_tests::tunnel::connect(&ingress, other, Some(&token))
            .await
            .expect_err("refused");
        assert_eq!(refused.status, 403, "{other}: {refused:?}");
        assert_eq!(
            refused.reason,
            clawfed_proto::tunnel::reason::FORBIDDEN_TARGET
        );
    }

    // A spoke restart: an open streamed answer ends (it does not hang),
    // and once the spoke is back new requests go through.
    let mut open = http
        .get(format!("{base}/stream?chunks=200&interval_ms=100"))
        .send()
        .await?
        .error_for_status()?;
    open.chunk().await?;
    let exec_client = spoke_env::spoke_client(&w.exec_a).await?;
    let hub_ref = &w.hub;
    w.spoke
        .restart(hub_ref, &w.cluster_name, exec_client)
        .await?;
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match open.chunk().await {
                Ok(Some(_)) => continue,
                Ok(None) => return "ended",
                Err(_) => return "failed",
            }
        }
    })
    .await;
    ensure!(
        ended.is_ok(),
        "the open connection hung after the spoke restart"
    );
    until(WAIT, "a request through the restarted spoke", || async {
        let r = http.get(format!("{base}/identity")).send().await?;
        Ok(r.status().is_success().then_some(()))
    })
    .await?;
    w.finish().await
}

/// When (wall clock, as the hub records its phases) a live Pod of
/// `agent` in `ns` was first seen Ready, watched from now on.
fn first_ready(
    client: Client,
    ns: &str,
    agent: &str,
) -> JoinHandle<Result<chrono::DateTime<chrono::Utc>>> {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let api = Api::<Pod>::namespaced(client, ns);
    let cfg = watcher::Config::default().labels(&format!("{}={agent}", labels::AGENT));
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher::watcher(api, cfg));
        let ready = |p: &Pod| {
            p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        };
        tokio::time::timeout(WAIT, async {
            while let Some(e) = events.next().await {
                if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = e
                    && ready(&p)
                {
                    return Ok(chrono::Utc::now());
                }
            }
            bail!("the Pod watch ended")
        })
        .await
        .context("no Ready Pod")?
    })
}

/// Issue 17: the hub learns that a Gateway turned Ready from its watch of
/// the control cluster, not from a poll. The Gateway's PV is made only once
/// the Harness is Ready and its report is in (until then the Gateway PVC is
/// Pending and its Pod cannot be scheduled), so the revision waits for the
/// Gateway alone; with the hub's own recheck at 30 s, only the watch's
/// wake-up can activate it within 500 ms of the Gateway Pod turning Ready.
/// Real stand-ins behind both Pods and the data path probe on, so the
/// activation also includes a request Gateway -> tunnel -> spoke -> Harness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_activates_as_soon_as_its_gateway_turns_ready() -> Result<()> {
    require_pod_network()?;
    let mut w = World::start_with(|c| {
        c.tunnel.addr = format!("{POD_NET_ROOT}:0").parse().expect("addr");
        c.pipeline.path_probe = true;
        c.pipeline.gateway_recheck_ms = 30_000;
    })
    .await?;
    let (ns, agent) = w
        .rest
        .tenant_with_images(
            &w.cluster_name,
            "dedicated-codex",
            STANDIN_HARNESS,
            &standin_gateway(),
        )
        .await?;
    let gw_ns = gateway_ns(&ns.id);
    // Tracked for cleanup by hand: the Gateway's PV comes later.
    w.cleanup
        .exec_namespaces
        .push(ns.data_plane_namespace.clone());
    w.cleanup.gateways.push(ns.id.clone());
    w.cleanup.control_pvs.push(format!("gwtest-{}", agent.name));
    let (control, exec) = (w.control.admin(), w.exec_a.admin());
    let gateway_ready = first_ready(control.clone(), &gw_ns, &agent.name);

    w.rest.deploy_current(&ns.name, &agent.name).await?;
    let cluster = w.rest.cluster(&w.cluster_name).await?;
    let target = clawfed_proto::work::target::harness(&ns.id, &agent.name, 1);
    let store = w.hub.store();
    until(WAIT, "the Harness reported Ready", || async {
        let r = store.get_report(&cluster.id, &target, "readiness").await?;
        Ok(r.filter(|r| r.body["ready"] == json!(true)).map(|_| ()))
    })
    .await?;
    // The Harness goes out before the Gateway in the same pass, so it may
    // be Ready while the pass still applies the Gateway (Preparing).
    until(WAIT, "the revision waiting for its Gateway", || async {
        let r = w.rest.revision(&ns.name, &agent.name, 1).await?;
        ensure!(
            matches!(
                r.phase,
                RevisionPhase::Preparing | RevisionPhase::WaitingReady
            ),
            "waiting for the Gateway: {:?} ({:?})",
            r.phase,
            r.reason
        );
        Ok((r.phase == RevisionPhase::WaitingReady).then_some(()))
    })
    .await?;
    ensure!(
        !gateway_ready.is_finished(),
        "the Gateway Pod is Ready already"
    );

    // The Gateway may run now.
    control_env::volume_for(&control, &gw_ns, &agent.name).await?;
    let r1 = w
        .rest
        .wait_phase(&ns.name, &agent.name, 1, RevisionPhase::Active)
        .await?;
    let ready_at = gateway_ready.await??;
    let activated_at = r1.progress.activated_at.context("activatedAt")?;
    let after = activated_at - ready_at;
    eprintln!(
        "Gateway Pod Ready -> activation {} ms; durations {:?}",
        after.num_milliseconds(),
        r1.progress.durations_ms
    );
    ensure!(
        after < chrono::Duration::milliseconds(500),
        "activated {} ms after the Gateway Pod turned Ready (recheck 30 s: the watch did not wake the pass)",
        after.num_milliseconds()
    );
    assert_serving(
        &control,
        &exec,
        &ns.data_plane_namespace,
        &gw_ns,
        &agent.name,
        1,
    )
    .await?;
    w.finish().await
}

/// Issue 11: the hub killed with SIGKILL while a tunneled connection is
/// open: the connection ends (it does not hang), requests fail while the
/// hub is down, and once it is back on the same ports new requests go
/// through the same Gateway to the same Harness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_killed_ends_tunneled_connections_and_new_ones_work_after_restart() -> Result<()> {
    require_pod_network()?;
    clawfed_tests::link::init_test_logging();
    let control = control_env::control().await?;
    let exec_a = kube_env::cluster("exec-a").await?;
    let spoke_client = spoke_env::spoke_client(&exec_a).await?;
    let mut env = HubEnv::new(&control).await?;
    env.data_path()?;
    let mut cleanup = Cleanup::default();
    let mut hub = env.serve(1).await?;
    let rest = env.rest().clone();
    let cluster_name = format!("exec-a-{}", &short_id()[..6]);
    let mut spoke = InSpoke::start(
        &env.link_url(),
        env.ca_pem()?,
        &cluster_name,
        rest.bootstrap_token(&cluster_name).await?,
        spoke_client,
    )
    .await?;
    rest.wait_online(&cluster_name, WAIT).await?;
    let (ns, agent) = rest
        .tenant_with_images(
            &cluster_name,
            "dedicated-codex",
            STANDIN_HARNESS,
            &standin_gateway(),
        )
        .await?;
    let gw_ns = gateway_ns(&ns.id);
    let name = agent.name.clone();
    cleanup.track(&control.admin(), &ns, &name).await?;
    rest.deploy_current(&ns.name, &name).await?;
    rest.wait_phase(&ns.name, &name, 1, RevisionPhase::Active)
        .await?;

    let (_, ip) = gateway_pod(&control.admin(), &gw_ns, &name).await?;
    let base = format!("http://{ip}:{}", control_env::gateway_config().port);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let mut open = http
        .get(format!("{base}/stream?chunks=300&interval_ms=100"))
        .send()
        .await?
        .error_for_status()?;
    open.chunk().await?;
    hub.kill9()?;
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match open.chunk().await {
                Ok(Some(_)) => continue,
                _ => return,
            }
        }
    })
    .await;
    ensure!(
        ended.is_ok(),
        "the open connection hung after the hub was killed"
    );
    let down = http.get(format!("{base}/identity")).send().await?;
    ensure!(
        !down.status().is_success(),
        "a request got through with the hub down: {}",
        down.status()
    );

    let mut hub = env.serve(2).await?;
    until(WAIT, "a request through the restarted hub", || async {
        let r = http.get(format!("{base}/identity")).send().await?;
        Ok(r.status().is_success().then_some(()))
    })
    .await?;
    spoke.stop().await;
    hub.terminate().await;
    cleanup.run().await
}

/// Issue 11: a broken data path keeps a revision from activating and fails
/// it at the readiness deadline with the probe's reason, although its
/// Gateway and Harness are both Ready (here the Gateways are told a tunnel
/// address where nothing listens).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_data_path_fails_the_revision_with_the_reason() -> Result<()> {
    require_pod_network()?;
    let mut w = World::start_with(|c| {
        c.tunnel.addr = format!("{POD_NET_ROOT}:0").parse().expect("addr");
        c.tunnel.advertise_url = Some(format!("https://{POD_NET_ROOT}:1"));
        c.pipeline.path_probe = true;
        c.pipeline.ready_deadline_seconds = 8;
    })
    .await?;
    let (ns, agent) = w
        .agent_with_images("dedicated-codex", STANDIN_HARNESS, &standin_gateway())
        .await?;
    w.rest.deploy_current(&ns.name, &agent.name).await?;
    let r = until(WAIT, "revision 1 failed", || async {
        let r = w.rest.revision(&ns.name, &agent.name, 1).await?;
        ensure!(
            r.phase != RevisionPhase::Active,
            "activated over a broken path"
        );
        Ok((r.phase == RevisionPhase::Failed).then_some(r))
    })
    .await?;
    let reason = r.reason.unwrap_or_default();
    eprintln!("reason: {reason}");
    assert!(reason.contains("data path probe"), "{reason}");
    assert!(
        reason.contains("HTTP 502"),
        "the Gateway's answer: {reason}"
    );
    assert_eq!(
        w.rest.agent(&ns.name, &agent.name).await?.active_revision,
        None
    );
    w.finish().await
}

/// Issue 12, topology: embedded OpenClaw gets no Gateway in the control
/// cluster (its gateway runs inside the data-plane workload), and it is
/// active only after the hub's own request went hub -> spoke link ->
/// Harness and was answered: a real stand-in process activates, a kwok Pod
/// with nothing behind it (Ready, but no process) fails with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_openclaw_has_no_control_gateway_and_is_probed_through_the_link() -> Result<()> {
    require_pod_network()?;
    let mut w = World::start_with(|c| {
        c.pipeline.path_probe = true;
        c.pipeline.ready_deadline_seconds = 15;
    })
    .await?;
    let control = w.control.admin();
    let (live_ns, live) = w
        .agent_with_images("embedded-openclaw", STANDIN_HARNESS, &standin_gateway())
        .await?;
    let (dead_ns, dead) = w
        .agent_with_images("embedded-openclaw", HARNESS_IMAGE, &standin_gateway())
        .await?;
    w.rest.deploy_current(&live_ns.name, &live.name).await?;
    w.rest.deploy_current(&dead_ns.name, &dead.name).await?;

    let r = w
        .rest
        .wait_phase(&live_ns.name, &live.name, 1, RevisionPhase::Active)
        .await?;
    assert!(
        r.progress.gateway_applied_at.is_none(),
        "no Gateway step: {:?}",
        r.progress
    );
    assert_harness_serving(
        &w.exec_a.admin(),
        &live_ns.data_plane_namespace,
        &live.name,
        1,
    )
    .await?;
    for (ns, agent) in [(&live_ns, &live.name), (&dead_ns, &dead.name)] {
        let gw_ns = gateway_ns(&ns.id);
        for (kind, names) in [
            (
                "Deployment",
                all_names::<Deployment>(&control, &gw_ns, agent).await?,
            ),
            (
                "Service",
                all_names::<Service>(&control, &gw_ns, agent).await?,
            ),
            (
                "Secret",
                all_names::<Secret>(&control, &gw_ns, agent).await?,
            ),
        ] {
            assert!(
                names.is_empty(),
                "embedded {agent} has control {kind}s {names:?}"
            );
        }
    }

    let failed = until(WAIT, "the Harness without a process fails", || async {
        let r = w.rest.revision(&dead_ns.name, &dead.name, 1).await?;
        ensure!(
            r.phase != RevisionPhase::Active,
            "activated with nothing answering"
        );
        Ok((r.phase == RevisionPhase::Failed).then_some(r))
    })
    .await?;
    let reason = failed.reason.unwrap_or_default();
    assert!(
        reason.contains("data path probe (hub -> spoke -> Harness)"),
        "{reason}"
    );
    assert_eq!(
        w.rest
            .agent(&dead_ns.name, &dead.name)
            .await?
            .active_revision,
        None
    );
    w.finish().await
}

/// Issue 29: an embedded OpenClaw Agent runs the real runtime. Its
/// Configuration (OpenClaw's own document) reaches the runtime's config
/// file beside the keys clawfed owns: the model provider it names answers
/// a real turn, made with the Agent's managed key (the model stand-in
/// names its last four characters) and the gateway token clawfed put in
/// the Harness Secret. A Configuration that sets an owned key is refused
/// at deploy, naming the key. The revision turned Active only after the
/// hub's own model turn went hub -> spoke link -> the runtime -> the
/// model; a second Agent whose provider refuses its key is never Active
/// and fails with the runtime's answer. The conversation and a workspace
/// file of revision 1 are there in revision 2 after a redeploy and after
/// its Harness Pod is killed: the Agent-owned claim, which revision 1's
/// retirement keeps and the Agent's deletion removes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_openclaw_runs_the_real_runtime_with_the_agents_configuration() -> Result<()> {
    use clawfed_tests::openclaw;
    require_pod_network()?;
    let mut w = World::start_with(|c| {
        c.pipeline.path_probe = true;
        // The runtime needs 10-20 s to turn ready on an idle machine.
        c.pipeline.ready_deadline_seconds = 300;
    })
    .await?;
    let exec = w.exec_a.admin();
    let model_ns = w.exec_a.create_namespace("model").await?;
    let result = async {
        let model_url = openclaw::deploy_model(&exec, &model_ns.name).await?;
        let refusing_url = openclaw::deploy_model_named(
            &exec,
            &model_ns.name,
            "refusing-model",
            Some("sk-the-only-key"),
        )
        .await?;
        let (ns, agent) = w
            .agent_with_images("embedded-openclaw", &openclaw::image()?, &standin_gateway())
            .await?;
        let (bad_ns, bad) = w
            .agent_with_images("embedded-openclaw", &openclaw::image()?, &standin_gateway())
            .await?;
        // The refused Agent's runtime starts beside the other one.
        let bad_config = json!({
            "models": { "providers": { "standin": {
                "baseUrl": refusing_url, "api": "openai-completions",
                "models": [{ "id": openclaw::MODEL_ID, "name": openclaw::MODEL_ID }] } } },
            "agents": { "defaults": { "model": {
                "primary": format!("standin/{}", openclaw::MODEL_ID) } } }
        });
        w.rest
            .call::<serde_json::Value>(
                Method::POST,
                &format!("/namespaces/{}/configurations", bad_ns.name),
                Some(json!({ "name": "oc", "data": bad_config })),
            )
            .await?;
        w.rest
            .edit_spec(&bad_ns.name, &bad.name, |s| {
                s.configuration = Some("oc".into())
            })
            .await?;
        w.rest
            .call::<serde_json::Value>(
                Method::PUT,
                &format!(
                    "/namespaces/{}/agents/{}/credentials/model-api-key",
                    bad_ns.name, bad.name
                ),
                Some(json!({ "value": "sk-not-the-key" })),
            )
            .await?;
        w.rest.deploy_current(&bad_ns.name, &bad.name).await?;
        let configure = |name: &str, data: serde_json::Value| {
            let rest = w.rest.clone();
            let path = format!("/namespaces/{}/configurations", ns.name);
            let body = json!({ "name": name, "data": data });
            async move {
                rest.call::<serde_json::Value>(Method::POST, &path, Some(body))
                    .await
            }
        };
        let provider = json!({ "standin": {
            "baseUrl": model_url, "api": "openai-completions",
            "models": [{ "id": openclaw::MODEL_ID, "name": openclaw::MODEL_ID }]
        }});
        configure("owned", json!({ "gateway": { "port": 9999 } })).await?;
        configure(
            "oc",
            json!({
                "models": { "providers": provider },
                "agents": { "defaults": { "model": {
                    "primary": format!("standin/{}", openclaw::MODEL_ID) } } }
            }),
        )
        .await?;
        w.rest
            .edit_spec(&ns.name, &agent.name, |s| {
                s.configuration = Some("owned".into())
            })
            .await?;
        let (status, body) = w
            .rest
            .exchange(
                Method::POST,
                &format!("/namespaces/{}/agents/{}/deploy", ns.name, agent.name),
                None,
                None,
            )
            .await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.contains("gateway.port"), "names the owned key: {body}");

        w.rest
            .edit_spec(&ns.name, &agent.name, |s| {
                s.configuration = Some("oc".into())
            })
            .await?;
        let key = format!("sk-oc-{}", uuid::Uuid::new_v4().simple());
        let (status, body) = w
            .rest
            .exchange(
                Method::PUT,
                &format!(
                    "/namespaces/{}/agents/{}/credentials/model-api-key",
                    ns.name, agent.name
                ),
                Some(&json!({ "value": key })),
                None,
            )
            .await?;
        ensure!(status.is_success(), "set the key: {status} {body}");
        let deployed = Instant::now();
        w.rest.deploy_current(&ns.name, &agent.name).await?;
        let active = until(
            openclaw::START_WAIT,
            "revision 1 Active on the real runtime",
            || async {
                let r = w.rest.revision(&ns.name, &agent.name, 1).await?;
                ensure!(r.phase != RevisionPhase::Failed, "failed: {:?}", r.reason);
                Ok((r.phase == RevisionPhase::Active).then_some(r))
            },
        )
        .await?;
        println!(
            "deploy -> Active on the real runtime in {:?} ({:?})",
            deployed.elapsed(),
            active.progress.durations_ms
        );
        // The activation was a model turn: the model answered the hub's
        // own message before anything else asked it.
        let (count, users) = openclaw::model_requests(&model_url).await?;
        assert!(count >= 1, "no model turn before Active");
        assert!(
            users
                .iter()
                .any(|u| u.contains(clawfed_hub::tunnel::probe::MODEL_TURN_MESSAGE)),
            "the model was asked the activation turn: {users:?}"
        );

        let pods: Api<Pod> = Api::namespaced(exec.clone(), &ns.data_plane_namespace);
        let pod = openclaw::ready_pod(
            &pods,
            &format!("{}={}", labels::AGENT, agent.name),
            None,
            Duration::from_secs(10),
        )
        .await?;
        let secret: Secret = Api::namespaced(exec.clone(), &ns.data_plane_namespace)
            .get(&clawfed_proto::work::harness::credentials_name(
                &agent.name,
                1,
            ))
            .await?;
        let data = secret.data.unwrap_or_default();
        let token = data
            .get(clawfed_proto::work::runtime::GATEWAY_TOKEN_ENV)
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .context("the Harness Secret holds the gateway token")?;
        let config: serde_json::Value = serde_json::from_slice(
            &data
                .get(clawfed_proto::work::runtime::CONFIG_FILE)
                .context("the Harness Secret holds the config file")?
                .0,
        )?;
        assert_eq!(
            config["models"]["providers"]["standin"]["apiKey"],
            "${CLAWFED_MODEL_API_KEY}"
        );
        assert!(
            !config.to_string().contains(&key),
            "the key is never in the config file"
        );
        let addr = std::net::SocketAddr::from((openclaw::pod_ip(&pod)?, 8080));
        let answer = openclaw::chat(addr, &token, "conv-e2e", "hello from the hub test").await?;
        println!("model turn: {answer}");
        assert!(
            answer.contains("model-standin answer: hello from the hub test"),
            "the Configuration's provider answered: {answer}"
        );
        assert!(
            answer.contains(&format!("key: {}", &key[key.len() - 4..])),
            "with the Agent's managed key: {answer}"
        );
        // The same through the hub (`agents chat`): hub -> spoke -> runtime.
        let via_hub: serde_json::Value = w
            .rest
            .call(
                Method::POST,
                &format!("/namespaces/{}/agents/{}/chat", ns.name, agent.name),
                Some(json!({ "message": "hello through the hub", "conversation": "conv-hub" })),
            )
            .await?;
        println!("agents chat: {via_hub}");
        let hub_answer = via_hub["answer"].as_str().unwrap_or_default();
        assert!(
            hub_answer.contains("model-standin answer: hello through the hub")
                && hub_answer.contains(&format!("key: {}", &key[key.len() - 4..])),
            "the hub's chat reached the runtime and its model: {via_hub}"
        );
        assert_eq!(via_hub["revision"], 1);
        assert_eq!(via_hub["conversation"], "conv-hub");
        let answer = openclaw::chat(
            addr,
            &token,
            "conv-files",
            "write-file notes/r1.txt written-by-revision-1",
        )
        .await?;
        println!("write-file turn: {answer}");

        // The Agent-owned claim: revision 2 mounts the state revision 1
        // left, after revision 1 was stopped (one runtime at a time on the
        // RWO claim), and revision 1's retirement keeps it.
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(exec.clone(), &ns.data_plane_namespace);
        let claim_name = clawfed_proto::work::harness::workspace_name(&agent.name);
        let claim_uid = claims.get(&claim_name).await?.metadata.uid;
        let redeployed = Instant::now();
        w.rest.deploy_current(&ns.name, &agent.name).await?;
        until(openclaw::START_WAIT, "revision 2 Active", || async {
            let r = w.rest.revision(&ns.name, &agent.name, 2).await?;
            ensure!(r.phase != RevisionPhase::Failed, "failed: {:?}", r.reason);
            Ok((r.phase == RevisionPhase::Active).then_some(()))
        })
        .await?;
        println!(
            "redeploy -> revision 2 Active in {:?}",
            redeployed.elapsed()
        );
        w.rest
            .wait_phase(&ns.name, &agent.name, 1, RevisionPhase::Retired)
            .await?;
        let claim = claims.get(&claim_name).await?;
        assert_eq!(claim.metadata.uid, claim_uid, "the same claim");
        assert!(
            claim.metadata.deletion_timestamp.is_none(),
            "retiring revision 1 kept the Agent's claim"
        );
        let r2_pods = format!("{}={},{}=2", labels::AGENT, agent.name, labels::REVISION);
        let r2_token = |secret: Secret| {
            secret
                .data
                .unwrap_or_default()
                .get(clawfed_proto::work::runtime::GATEWAY_TOKEN_ENV)
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                .context("revision 2's gateway token")
        };
        let token = r2_token(
            Api::<Secret>::namespaced(exec.clone(), &ns.data_plane_namespace)
                .get(&clawfed_proto::work::harness::credentials_name(
                    &agent.name,
                    2,
                ))
                .await?,
        )?;
        let mut not_uid = None;
        for moment in ["after the redeploy", "after the Harness Pod was killed"] {
            let pod =
                openclaw::ready_pod(&pods, &r2_pods, not_uid.as_deref(), openclaw::START_WAIT)
                    .await?;
            let addr = std::net::SocketAddr::from((openclaw::pod_ip(&pod)?, 8080));
            let answer = openclaw::chat(addr, &token, "conv-e2e", moment).await?;
            println!("{moment}: {answer}");
            assert!(
                answer.contains("history: hello from the hub test"),
                "the conversation of revision 1 is there {moment}: {answer}"
            );
            let answer =
                openclaw::chat(addr, &token, "conv-files", "read-file notes/r1.txt").await?;
            assert!(
                answer.contains("written-by-revision-1"),
                "the workspace file of revision 1 is there {moment}: {answer}"
            );
            // Kill the Pod: its Deployment starts another on the same claim.
            not_uid = pod.metadata.uid.clone();
            pods.delete(
                pod.metadata.name.as_deref().unwrap_or_default(),
                &DeleteParams::default(),
            )
            .await?;
        }

        // The Agent's deletion (stopped first) removes its claim.
        let _: Agent = w
            .rest
            .call(
                Method::POST,
                &format!("/namespaces/{}/agents/{}/stop", ns.name, agent.name),
                Some(json!({})),
            )
            .await?;
        w.rest
            .wait_phase(&ns.name, &agent.name, 2, RevisionPhase::Stopped)
            .await?;
        let (status, body) = w
            .rest
            .exchange(
                Method::DELETE,
                &format!("/namespaces/{}/agents/{}", ns.name, agent.name),
                None,
                None,
            )
            .await?;
        ensure!(status.is_success(), "delete the Agent: {status} {body}");
        until(WAIT, "the Agent's claim goes with it", || async {
            let c = claims.get_opt(&claim_name).await?;
            Ok(going(c.as_ref().map(|c| &c.metadata)).then_some(()))
        })
        .await?;

        // The refused key: the runtime answered the turn with the
        // provider's 401, so the revision failed with that answer, without
        // ever being Active.
        let failed = until(
            openclaw::START_WAIT,
            "the refused Agent's revision fails",
            || async {
                let r = w.rest.revision(&bad_ns.name, &bad.name, 1).await?;
                ensure!(
                    r.phase != RevisionPhase::Active,
                    "Active with a refused key"
                );
                Ok((r.phase == RevisionPhase::Failed).then_some(r))
            },
        )
        .await?;
        let reason = failed.reason.unwrap_or_default();
        println!("refused key: {reason}");
        assert!(
            reason.contains("the runtime answered the model turn with HTTP")
                && reason.contains("invalid api key"),
            "the runtime's answer is the reason: {reason}"
        );
        assert_eq!(
            w.rest.agent(&bad_ns.name, &bad.name).await?.active_revision,
            None
        );
        anyhow::Ok(())
    }
    .await;
    model_ns.delete().await?;
    result?;
    w.finish().await
}

/// Issue 29: a dedicated Codex Agent on the real runtimes across clusters.
/// Its Gateway is the real OpenClaw gateway in the control cluster with the
/// bundled Codex plugin on; its Harness is the real `codex app-server` in
/// exec-a, holding the model key; the plugin reaches the app-server over
/// WebSocket through the hub's tunnel ingress and the spoke. Activation is
/// a real model turn over that path, and so is a chat sent to the Gateway:
/// the model stand-in (exec-a) answers with the user's text and the last
/// characters of the Agent's managed key, which only the Harness holds. A
/// redeploy keeps the conversation (the Gateway's claim in control, Codex's
/// home on the Harness' claim in exec-a), also after the Harness Pod is
/// killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedicated_codex_runs_the_real_gateway_and_app_server_across_clusters() -> Result<()> {
    use clawfed_hub::gateway::objects as gw;
    use clawfed_tests::openclaw;
    require_pod_network()?;
    let mut w = World::start_with(|c| {
        c.tunnel.addr = format!("{POD_NET_ROOT}:0").parse().expect("addr");
        c.pipeline.path_probe = true;
        c.pipeline.ready_deadline_seconds = 300;
    })
    .await?;
    let exec = w.exec_a.admin();
    let control = w.control.admin();
    let model_ns = w.exec_a.create_namespace("model").await?;
    let result = async {
        let model_url = openclaw::deploy_model(&exec, &model_ns.name).await?;
        let (ns, agent) = w
            .agent_with_images(
                "dedicated-codex",
                &openclaw::codex_image()?,
                &openclaw::pinned_image()?,
            )
            .await?;
        let gw_ns = gateway_ns(&ns.id);
        w.rest
            .call::<serde_json::Value>(
                Method::POST,
                &format!("/namespaces/{}/configurations", ns.name),
                Some(json!({ "name": "codex", "data": {
                    "models": { "providers": { "openai": { "baseUrl": model_url } } },
                    "agents": { "defaults": { "model": "openai/gpt-5.4" } }
                }})),
            )
            .await?;
        w.rest
            .edit_spec(&ns.name, &agent.name, |s| {
                s.configuration = Some("codex".into())
            })
            .await?;
        let key = format!("sk-codex-{}", uuid::Uuid::new_v4().simple());
        let tail = format!("key: {}", &key[key.len() - 4..]);
        let (status, body) = w
            .rest
            .exchange(
                Method::PUT,
                &format!(
                    "/namespaces/{}/agents/{}/credentials/model-api-key",
                    ns.name, agent.name
                ),
                Some(&json!({ "value": key })),
                None,
            )
            .await?;
        ensure!(status.is_success(), "set the key: {status} {body}");
        let deployed = Instant::now();
        w.rest.deploy_current(&ns.name, &agent.name).await?;
        let active = until(openclaw::START_WAIT, "revision 1 Active", || async {
            let r = w.rest.revision(&ns.name, &agent.name, 1).await?;
            ensure!(r.phase != RevisionPhase::Failed, "failed: {:?}", r.reason);
            Ok((r.phase == RevisionPhase::Active).then_some(r))
        })
        .await?;
        println!(
            "dedicated Codex: deploy -> Active in {:?} ({:?})",
            deployed.elapsed(),
            active.progress.durations_ms
        );
        // The activation was a model turn: Codex asked the model the hub's
        // message, with the Agent's key.
        let (_, users) = openclaw::model_requests(&model_url).await?;
        assert!(
            users
                .iter()
                .any(|u| u.contains(clawfed_hub::tunnel::probe::MODEL_TURN_MESSAGE)),
            "the model was asked the activation turn: {users:?}"
        );

        // The Gateway holds its config and tokens, never the model key;
        // the Harness holds the key.
        let transport: Secret = Api::namespaced(control.clone(), &gw_ns)
            .get(&format!("{}-gateway-transport", agent.name))
            .await?;
        let data = transport.data.clone().unwrap_or_default();
        let text = |k: &str| {
            data.get(k)
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                .with_context(|| format!("transport Secret key {k}"))
        };
        let config: serde_json::Value = serde_json::from_str(&text(gw::RUNTIME_CONFIG_KEY)?)?;
        assert_eq!(config["plugins"]["entries"]["codex"]["enabled"], true);
        assert!(
            config["plugins"]["entries"]["codex"]["config"]["appServer"]["url"]
                .as_str()
                .is_some_and(|u| u.starts_with("wss://")
                    && u.ends_with(&format!("/_clawfed/harness/{}/{}", ns.name, agent.name))),
            "the app-server is reached through the hub's tunnel ingress: {config}"
        );
        assert!(
            !config.to_string().contains(&model_url),
            "the model endpoint is the Harness'"
        );
        for v in data.values() {
            assert!(
                !String::from_utf8_lossy(&v.0).contains(&key),
                "the model key is never in the Gateway's Secret"
            );
        }
        let token = text(gw::RUNTIME_TOKEN_KEY)?;
        let gateway_addr = |ip: String| -> Result<std::net::SocketAddr> {
            Ok(std::net::SocketAddr::new(
                ip.parse()?,
                u16::try_from(control_env::gateway_config().port)?,
            ))
        };
        let (_, ip) = gateway_pod(&control, &gw_ns, &agent.name).await?;
        let nonce = format!("nonce-{}", &short_id()[..8]);
        let first = format!("hello codex {nonce}");
        let answer = openclaw::chat(gateway_addr(ip)?, &token, "conv-codex", &first).await?;
        println!("through the Gateway: {answer}");
        assert!(
            answer.contains(&format!("model-standin answer: {first}")) && answer.contains(&tail),
            "Codex in exec-a answered through the Gateway, with the Agent's key: {answer}"
        );

        // `agents chat` takes the same path: hub -> Gateway -> Harness.
        let via_hub: serde_json::Value = w
            .rest
            .call(
                Method::POST,
                &format!("/namespaces/{}/agents/{}/chat", ns.name, agent.name),
                Some(json!({ "message": "hello through the hub", "conversation": "conv-hub" })),
            )
            .await?;
        println!("agents chat: {via_hub}");
        let hub_answer = via_hub["answer"].as_str().unwrap_or_default();
        assert!(
            hub_answer.contains("model-standin answer: hello through the hub")
                && hub_answer.contains(&tail),
            "the hub's chat reached Codex through the Gateway: {via_hub}"
        );

        // Redeploy: revision 2 replaces both (Recreate Gateway, exclusive
        // Harness); the conversation is kept.
        let redeployed = Instant::now();
        w.rest.deploy_current(&ns.name, &agent.name).await?;
        until(openclaw::START_WAIT, "revision 2 Active", || async {
            let r = w.rest.revision(&ns.name, &agent.name, 2).await?;
            ensure!(r.phase != RevisionPhase::Failed, "failed: {:?}", r.reason);
            Ok((r.phase == RevisionPhase::Active).then_some(()))
        })
        .await?;
        println!(
            "dedicated Codex: redeploy -> revision 2 Active in {:?}",
            redeployed.elapsed()
        );
        let transport: Secret = Api::namespaced(control.clone(), &gw_ns)
            .get(&format!("{}-gateway-transport", agent.name))
            .await?;
        let token = transport
            .data
            .unwrap_or_default()
            .get(gw::RUNTIME_TOKEN_KEY)
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .context("revision 2's runtime token")?;
        let pods: Api<Pod> = Api::namespaced(exec.clone(), &ns.data_plane_namespace);
        let r2_pods = format!("{}={},{}=2", labels::AGENT, agent.name, labels::REVISION);
        let mut not_uid = None;
        for moment in ["after the redeploy", "after the Harness Pod was killed"] {
            let pod =
                openclaw::ready_pod(&pods, &r2_pods, not_uid.as_deref(), openclaw::START_WAIT)
                    .await?;
            let (_, ip) = gateway_pod(&control, &gw_ns, &agent.name).await?;
            // The Gateway's plugin reconnects to the new app-server.
            let answer = until(
                openclaw::START_WAIT,
                "a turn through revision 2",
                || async {
                    Ok(
                        openclaw::chat(gateway_addr(ip.clone())?, &token, "conv-codex", moment)
                            .await
                            .ok(),
                    )
                },
            )
            .await?;
            println!("{moment}: {answer}");
            assert!(
                answer.contains(&format!("model-standin answer: {moment}"))
                    && answer.contains(&first),
                "the conversation of revision 1 is there {moment}: {answer}"
            );
            not_uid = pod.metadata.uid.clone();
            pods.delete(
                pod.metadata.name.as_deref().unwrap_or_default(),
                &DeleteParams::default(),
            )
            .await?;
        }
        anyhow::Ok(())
    }
    .await;
    model_ns.delete().await?;
    result?;
    w.finish().await
}

// ========================================================== credentials

/// Everything tracing records on the threads it is installed on, as text.
#[derive(Clone, Default)]
struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    /// A subscriber writing into this capture: the hub's and the spoke's
    /// crates at every level, the rest at info (the hub's default).
    fn dispatch(&self) -> tracing::Dispatch {
        let buf = self.0.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "info,clawfed_hub=trace,clawfed_spoke=trace,clawfed_tunnel=trace,clawfed_kube=trace",
            ))
            .with_ansi(false)
            .with_writer(move || CaptureWriter(buf.clone()))
            .finish();
        tracing::Dispatch::new(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

struct CaptureWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for CaptureWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether `obj` (JSON of a Kubernetes object) holds `secret`: in any
/// string (annotations, stringData, ConfigMap data) or in the decoded
/// bytes of Secret `data`.
fn holds<K: serde::Serialize>(
    obj: &K,
    data: Option<&std::collections::BTreeMap<String, k8s_openapi::ByteString>>,
    secret: &str,
) -> Result<bool> {
    Ok(serde_json::to_string(obj)?.contains(secret)
        || data
            .into_iter()
            .flatten()
            .any(|(_, v)| String::from_utf8_lossy(&v.0).contains(secret)))
}

/// The Secrets and ConfigMaps of `client` (all namespaces, or `ns`)
/// holding `secret`, by namespace/name.
async fn holders(client: &Client, ns: Option<&str>, secret: &str) -> Result<Vec<String>> {
    let (secrets, maps): (Api<Secret>, Api<k8s_openapi::api::core::v1::ConfigMap>) = match ns {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let mut found = Vec::new();
    for s in secrets.list(&ListParams::default()).await?.items {
        if holds(&s, s.data.as_ref(), secret)? {
            found.push(format!(
                "Secret {}/{}",
                s.namespace().unwrap_or_default(),
                s.name_any()
            ));
        }
    }
    for m in maps.list(&ListParams::default()).await?.items {
        let binary = m.binary_data.clone();
        if holds(&m, binary.as_ref(), secret)? {
            found.push(format!(
                "ConfigMap {}/{}",
                m.namespace().unwrap_or_default(),
                m.name_any()
            ));
        }
    }
    Ok(found)
}

/// The `CLAWFED_MODEL_API_KEY` the Harness stand-in of revision `n` runs with,
/// read through exec-a's apiserver Pod proxy.
async fn harness_env(exec: &Client, dpns: &str, agent: &str, n: i64) -> Result<String> {
    until(WAIT, &format!("revision {n}'s Harness env"), || async {
        let selector = format!("{}={agent},{}={n}", labels::AGENT, labels::REVISION);
        let pods = Api::<Pod>::namespaced(exec.clone(), dpns)
            .list(&ListParams::default().labels(&selector))
            .await?;
        let Some(pod) = pods.items.into_iter().find(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some()
        }) else {
            return Ok(None);
        };
        let port = clawfed_proto::work::harness::DEFAULT_PORT;
        let url = format!(
            "/api/v1/namespaces/{dpns}/pods/{}:{port}/proxy/env/{}",
            pod.name_any(),
            clawfed_proto::work::credential::MODEL_API_KEY
        );
        Ok(Some(
            exec.request_text(http::Request::get(&url).body(Vec::new())?)
                .await?,
        ))
    })
    .await
}

/// The value under `CLAWFED_MODEL_API_KEY` of revision `n`'s credential Secret.
async fn credential_secret_value(
    exec: &Client,
    dpns: &str,
    agent: &str,
    n: i64,
) -> Result<Option<String>> {
    let name = clawfed_proto::work::harness::credentials_name(agent, n);
    Ok(Api::<Secret>::namespaced(exec.clone(), dpns)
        .get_opt(&name)
        .await?
        .and_then(|s| s.data)
        .and_then(|d| {
            d.get(clawfed_proto::work::credential::MODEL_API_KEY)
                .cloned()
        })
        .map(|b| String::from_utf8_lossy(&b.0).into_owned()))
}

/// Issue 12 item 1 on the real clusters, with stand-ins behind the Pods: a
/// model key set through the API reaches the Harness process (read through
/// the tunnel: Gateway -> hub -> spoke -> Harness) and the Harness Secret
/// in exec-a, and nothing else: no Secret or ConfigMap of the control
/// cluster, no API answer, no database row (the outbox keeps it sealed),
/// no log line of the hub or the spoke. A new key changes no running
/// revision; the next deploy carries it (revision 2's Secret and process
/// have the new key, revision 1's Secret never does).
#[test]
fn a_model_key_reaches_only_the_harness_and_rotates_with_a_new_revision() -> Result<()> {
    require_pod_network()?;
    let capture = LogCapture::default();
    // Every thread of this test's runtime records into the capture (the
    // hub and the spoke run in-process, their tasks on these threads).
    let on_thread = capture.dispatch();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(move || {
            // Kept for the thread's life.
            std::mem::forget(tracing::dispatcher::set_default(&on_thread));
        })
        .build()?;
    let _main = tracing::dispatcher::set_default(&capture.dispatch());
    rt.block_on(credentials_e2e(capture))
}

async fn credentials_e2e(capture: LogCapture) -> Result<()> {
    let mut w = World::start_with(|c| {
        c.tunnel.addr = format!("{POD_NET_ROOT}:0").parse().expect("addr");
        c.pipeline.path_probe = true;
    })
    .await?;
    // Dedicated: the key is asked through its control-cluster Gateway.
    let (ns, agent) = w
        .agent_with_images("dedicated-codex", STANDIN_HARNESS, &standin_gateway())
        .await?;
    let gw_ns = gateway_ns(&ns.id);
    let key1 = format!("sk-e2e-one-{}", uuid::Uuid::new_v4().simple());
    let key2 = format!("sk-e2e-two-{}", uuid::Uuid::new_v4().simple());
    let cred_path = format!(
        "/namespaces/{}/agents/{}/credentials/model-api-key",
        ns.name, agent.name
    );
    let control = w.control.admin();
    let exec = w.exec_a.admin();
    let dpns = ns.data_plane_namespace.clone();

    let (status, body) = w
        .rest
        .exchange(
            Method::PUT,
            &cred_path,
            Some(&json!({ "value": key1 })),
            None,
        )
        .await?;
    ensure!(status.is_success(), "set: {status} {body}");
    ensure!(
        !body.contains(&key1),
        "the set answer shows the key: {body}"
    );
    w.rest.deploy_current(&ns.name, &agent.name).await?;
    w.rest
        .wait_phase(&ns.name, &agent.name, 1, RevisionPhase::Active)
        .await?;

    // The Harness process has it, asked through the Gateway and the tunnel.
    let (_, ip) = gateway_pod(&control, &gw_ns, &agent.name).await?;
    let port = control_env::gateway_config().port;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let url = format!("http://{ip}:{port}/env/CLAWFED_MODEL_API_KEY");
    let through_tunnel = until(WAIT, "the key through the tunnel", || async {
        let r = http.get(&url).send().await?;
        Ok(r.status().is_success().then_some(r))
    })
    .await?
    .text()
    .await?;
    assert_eq!(through_tunnel, key1, "the Harness runs with the key");
    assert_eq!(harness_env(&exec, &dpns, &agent.name, 1).await?, key1);

    // Only the Harness Secret holds it: exec-a's credential Secret, and
    // nothing in the control cluster (Gateway Secrets included).
    assert_eq!(
        credential_secret_value(&exec, &dpns, &agent.name, 1)
            .await?
            .as_deref(),
        Some(key1.as_str())
    );
    assert_eq!(
        holders(&exec, Some(&dpns), &key1).await?,
        vec![format!(
            "Secret {dpns}/{}",
            clawfed_proto::work::harness::credentials_name(&agent.name, 1)
        )],
        "in exec-a only the Harness Secret holds it"
    );
    for d in Api::<Deployment>::namespaced(exec.clone(), &dpns)
        .list(&ListParams::default())
        .await?
        .items
    {
        ensure!(
            !serde_json::to_string(&d)?.contains(&key1),
            "Deployment {} holds the key (it must come from the Secret)",
            d.name_any()
        );
    }
    let in_control = holders(&control, None, &key1).await?;
    ensure!(
        in_control.is_empty(),
        "the control cluster holds the key: {in_control:?}"
    );

    // A new key: the running revision keeps its own.
    let (status, body) = w
        .rest
        .exchange(
            Method::PUT,
            &cred_path,
            Some(&json!({ "value": key2 })),
            None,
        )
        .await?;
    ensure!(status.is_success(), "replace: {status} {body}");
    assert_eq!(
        credential_secret_value(&exec, &dpns, &agent.name, 1)
            .await?
            .as_deref(),
        Some(key1.as_str()),
        "a set does not change a running revision"
    );
    assert_eq!(harness_env(&exec, &dpns, &agent.name, 1).await?, key1);

    // The next deploy carries it.
    w.rest.deploy_current(&ns.name, &agent.name).await?;
    w.rest
        .wait_phase(&ns.name, &agent.name, 2, RevisionPhase::Active)
        .await?;
    assert_eq!(
        credential_secret_value(&exec, &dpns, &agent.name, 2)
            .await?
            .as_deref(),
        Some(key2.as_str())
    );
    assert_eq!(harness_env(&exec, &dpns, &agent.name, 2).await?, key2);
    let r1_secret = credential_secret_value(&exec, &dpns, &agent.name, 1).await?;
    // Retirement may have removed it already; if not, it holds the old key.
    ensure!(
        r1_secret.is_none() || r1_secret.as_deref() == Some(key1.as_str()),
        "revision 1's Secret changed: {}",
        if r1_secret.as_deref() == Some(key2.as_str()) {
            "it got the new key"
        } else {
            "unexpected value"
        }
    );
    eprintln!(
        "revision 1's Secret after the rotation: {}",
        if r1_secret.is_some() {
            "kept with the old key"
        } else {
            "retired"
        }
    );
    let in_control = holders(&control, None, &key2).await?;
    ensure!(
        in_control.is_empty(),
        "the control cluster holds the new key: {in_control:?}"
    );

    // No API answer shows either key.
    let base = format!("/namespaces/{}/agents/{}", ns.name, agent.name);
    for path in [
        base.clone(),
        format!("{base}/revisions"),
        format!("{base}/revisions/1"),
        format!("{base}/revisions/2"),
        format!("{base}/credentials"),
        format!("{base}/revisions/2/credentials"),
        "/audit?limit=1000".to_owned(),
        "/work?limit=1000".to_owned(),
        "/fleet".to_owned(),
    ] {
        let (status, text) = w.rest.exchange(Method::GET, &path, None, None).await?;
        ensure!(status.is_success(), "{path}: {status} {text}");
        for k in [&key1, &key2] {
            ensure!(!text.contains(k.as_str()), "{path} shows a key: {text}");
        }
    }

    // No database row holds either key: the outbox kept the Harness work's
    // credential sealed.
    let raw = db::all_text(&w.hub.db).await;
    ensure!(
        raw.contains("clawfed-sealed:v1:"),
        "no sealed credential in the outbox"
    );
    for k in [&key1, &key2] {
        ensure!(
            !raw.contains(k.as_str()),
            "the database holds a key in plaintext"
        );
    }

    // No log line of the hub or the spoke.
    let logs = capture.text();
    ensure!(
        logs.contains("pipeline.active") && logs.contains("link.applied"),
        "the capture did not record the hub and the spoke ({} bytes)",
        logs.len()
    );
    for k in [&key1, &key2] {
        ensure!(!logs.contains(k.as_str()), "a key reached the log");
    }
    w.finish().await
}

// ============================================ plugin startup, diagnostics

/// The Harness stand-in's Pod label that picks its startup status mode
/// (e2e/pods `standin::harness`).
const STARTUP_LABEL: &str = "standin.clawfed.test/startup";

/// A tenant and an Agent of the stand-ins with plugin selections `alpha`
/// and `beta`, whose Harness starts in startup mode `mode`; registered for
/// cleanup.
async fn startup_agent(w: &mut World, mode: &str) -> Result<(Namespace, Agent)> {
    let tenant = format!("t{}", short_id());
    let ns: Namespace = w.rest.create_namespace(&tenant).await?;
    let agent: Agent = w
        .rest
        .call(
            Method::POST,
            &format!("/namespaces/{tenant}/agents"),
            Some(json!({
                "name": format!("a{}", short_id()),
                "spec": {
                    // Dedicated: a Gateway of its own in the control
                    // cluster, for diagnose to read too.
                    "harnessKind": "dedicated-codex",
                    "image": STANDIN_HARNESS,
                    "gatewayImage": standin_gateway(),
                    "placement": { "cluster": w.cluster_name },
                    "requirementLabels": { STARTUP_LABEL: mode },
                    "plugins": ["alpha", "beta"]
                }
            })),
        )
        .await?;
    w.cleanup
        .track(&w.control.admin(), &ns, &agent.name)
        .await?;
    Ok((ns, agent))
}

/// The live Harness Pod of `agent` (name).
async fn harness_pod(exec: &Client, dpns: &str, agent: &str) -> Result<String> {
    until(WAIT, "a live Harness Pod", || async {
        Ok(live_names::<Pod>(exec, dpns, agent)
            .await?
            .into_iter()
            .next())
    })
    .await
}

/// Restarts the Harness stand-in of `agent` with startup mode `mode` for
/// its next start (through the exec cluster's Pod proxy, as admin).
async fn restart_harness(exec: &Client, dpns: &str, agent: &str, mode: &str) -> Result<()> {
    let pod = harness_pod(exec, dpns, agent).await?;
    let url =
        format!("/api/v1/namespaces/{dpns}/pods/{pod}:8080/proxy/_standin/restart?startup={mode}");
    exec.request_text(http::Request::post(&url).body(Vec::new())?)
        .await
        .with_context(|| format!("restarting {pod} with startup mode {mode}"))?;
    Ok(())
}

/// Waits until the revision's readiness says `pred`; returns it.
async fn wait_readiness(
    rest: &HubClient,
    ns: &str,
    agent: &str,
    what: &str,
    pred: impl Fn(&clawfed_hub::link::report::ReadinessReport) -> bool,
) -> Result<AgentRevision> {
    let last = Mutex::new(None);
    until(WAIT, what, || async {
        let r = rest.revision(ns, agent, 1).await?;
        let hit = r.readiness.as_ref().is_some_and(&pred);
        *last.lock().expect("last") = Some((r.phase, r.readiness.clone()));
        Ok(hit.then_some(r))
    })
    .await
    .with_context(|| format!("last seen: {:?}", last.lock().expect("last")))
}

/// `clawfed ARGS` (the CLI binary of the target dir) as the root token.
fn cli(hub: &TestHub, args: &[&str]) -> Result<String> {
    clawfed_tests::procs::clawfed(&hub.rest, &hub.root_token, args)
}

/// Issue 12, plugin startup status, on the real clusters with the Harness
/// stand-in read through exec-a's Pod proxy by the spoke: a missing,
/// malformed, foreign-revision or unknown-code status keeps the revision
/// waiting with the reason (each change arriving through a restart of the
/// runtime, so a restart recomputes instead of keeping the first failure);
/// a `PLUGIN_AUTH_REQUIRED` warning lets it activate with the warning shown
/// by the API and the CLI; a later restart with a clean start replaces the
/// warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_startup_status_gates_readiness_and_warnings_are_shown() -> Result<()> {
    require_pod_network()?;
    let mut w = World::start_with(|c| {
        c.tunnel.addr = format!("{POD_NET_ROOT}:0").parse().expect("addr");
        c.pipeline.path_probe = true;
        c.pipeline.startup_status = true;
        c.pipeline.ready_deadline_seconds = 240;
    })
    .await?;
    let (ns, agent) = startup_agent(&mut w, "missing").await?;
    let (exec, dpns, name) = (
        w.exec_a.admin(),
        ns.data_plane_namespace.clone(),
        agent.name.clone(),
    );
    w.rest.deploy_current(&ns.name, &name).await?;

    let r = wait_readiness(&w.rest, &ns.name, &name, "startup status missing", |r| {
        r.startup_reason.as_deref() == Some("startup status missing")
    })
    .await?;
    let readiness = r.readiness.clone().context("readiness")?;
    ensure!(!readiness.ready, "{readiness:?}");
    // Not active: the Gateway may still be prepared, then it waits.
    let waiting =
        |p: RevisionPhase| matches!(p, RevisionPhase::Preparing | RevisionPhase::WaitingReady);
    ensure!(waiting(r.phase), "{:?} ({:?})", r.phase, r.reason);
    assert_eq!(readiness.live_candidates, 1, "the Pod itself is Ready");

    for (mode, says) in [
        ("malformed", "startup status malformed"),
        ("foreign", "startup status is for revision \"foreign-"),
        ("unknown-code", "unknown code \"PLUGIN_EXPLODED\""),
    ] {
        restart_harness(&exec, &dpns, &name, mode).await?;
        let r = wait_readiness(&w.rest, &ns.name, &name, mode, |r| {
            r.startup_reason
                .as_deref()
                .is_some_and(|s| s.contains(says))
        })
        .await?;
        ensure!(waiting(r.phase), "{mode}: {:?} ({:?})", r.phase, r.reason);
        ensure!(!r.readiness.as_ref().is_some_and(|x| x.ready), "{mode}");
    }

    restart_harness(&exec, &dpns, &name, "auth-required").await?;
    let r1 = w
        .rest
        .wait_phase(&ns.name, &name, 1, RevisionPhase::Active)
        .await?;
    let readiness = r1.readiness.context("readiness of the active revision")?;
    ensure!(
        readiness.ready && readiness.startup_reason.is_none(),
        "{readiness:?}"
    );
    assert_eq!(
        readiness.startup_warnings,
        [clawfed_hub::link::report::StartupWarning {
            selection: "beta".into(),
            code: "PLUGIN_AUTH_REQUIRED".into(),
        }]
    );
    let shown = cli(&w.hub, &["agents", "get", &name, "-n", &ns.name])?;
    ensure!(
        shown.contains("startup warnings: beta:PLUGIN_AUTH_REQUIRED"),
        "agents get: {shown}"
    );
    let listed = cli(&w.hub, &["revisions", "list", "-a", &name, "-n", &ns.name])?;
    ensure!(
        listed.contains("beta:PLUGIN_AUTH_REQUIRED"),
        "revisions list: {listed}"
    );

    restart_harness(&exec, &dpns, &name, "valid").await?;
    let r = wait_readiness(&w.rest, &ns.name, &name, "a clean restart", |r| {
        r.ready && r.startup_warnings.is_empty()
    })
    .await?;
    assert_eq!(r.phase, RevisionPhase::Active);
    w.finish().await
}

/// Issue 12, diagnostics: `agents diagnose` returns the Harness stand-in's
/// checks (read by the spoke through exec-a's Pod proxy) and the Gateway
/// stand-in's (read by the hub in control), while the revision waits and
/// once it is active, without changing its phase; once the Agent is
/// stopped (no Pods) both are `unknown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnose_returns_checks_and_unknown_for_a_stopped_pod() -> Result<()> {
    require_pod_network()?;
    let mut w = World::start_with(|c| {
        c.tunnel.addr = format!("{POD_NET_ROOT}:0").parse().expect("addr");
        c.pipeline.startup_status = true;
    })
    .await?;
    let (ns, agent) = startup_agent(&mut w, "install-failed").await?;
    let (exec, dpns, name) = (
        w.exec_a.admin(),
        ns.data_plane_namespace.clone(),
        agent.name.clone(),
    );
    w.rest.deploy_current(&ns.name, &name).await?;
    w.rest
        .wait_phase(&ns.name, &name, 1, RevisionPhase::Active)
        .await?;
    let path = format!("/namespaces/{}/agents/{name}/diagnose", ns.name);
    // Activation may roll the Gateway's Pod; while no live one exists its
    // checks are `unknown` by design, so wait for the Pod to be read.
    let d = until(WAIT, "diagnose reading both Pods", || async {
        let d: clawfed_hub::model::Diagnosis = w.rest.call(Method::GET, &path, None).await?;
        Ok((d.gateway.pod.is_some() && d.harness.pod.is_some()).then_some(d))
    })
    .await?;
    let status = |c: &clawfed_hub::model::ComponentDiagnosis, check: &str| {
        c.checks
            .iter()
            .find(|k| k.name == check)
            .map(|k| (k.status.clone(), k.detail.clone()))
    };
    assert_eq!(d.revision, 1);
    assert_eq!(
        d.harness.pod.as_deref(),
        Some(harness_pod(&exec, &dpns, &name).await?.as_str())
    );
    assert_eq!(
        status(&d.harness, "plugins"),
        Some(("warn".into(), "1 of 2 selections enabled".into())),
        "{d:?}"
    );
    assert_eq!(
        status(&d.harness, "startup").map(|s| s.0).as_deref(),
        Some("ok")
    );
    assert_eq!(
        status(&d.gateway, "transport-credential")
            .map(|s| s.0)
            .as_deref(),
        Some("ok"),
        "{d:?}"
    );
    let shown = cli(&w.hub, &["agents", "diagnose", &name, "-n", &ns.name])?;
    ensure!(
        shown.contains("plugins") && shown.contains("1 of 2 selections enabled"),
        "{shown}"
    );
    let r1 = w.rest.revision(&ns.name, &name, 1).await?;
    assert_eq!(r1.phase, RevisionPhase::Active, "diagnose changes nothing");

    // A chosen revision (issue 30): once revision 2 replaced revision 1,
    // `?revision=1` reads revision 1's (gone) Pods, `?revision=2` and the
    // default read revision 2's.
    w.rest.deploy_current(&ns.name, &name).await?;
    w.rest
        .wait_phase(&ns.name, &name, 2, RevisionPhase::Active)
        .await?;
    let d2 = until(WAIT, "diagnose of revision 2", || async {
        let d: clawfed_hub::model::Diagnosis = w
            .rest
            .call(Method::GET, &format!("{path}?revision=2"), None)
            .await?;
        Ok((d.gateway.pod.is_some() && d.harness.pod.is_some()).then_some(d))
    })
    .await?;
    let r2 = w.rest.revision(&ns.name, &name, 2).await?;
    assert_eq!((d2.revision, d2.revision_id.as_str()), (2, r2.id.as_str()));
    assert_ne!(
        d2.harness.pod, d.harness.pod,
        "revision 2's own Harness Pod"
    );
    let d1 = until(WAIT, "diagnose of the retired revision 1", || async {
        let d: clawfed_hub::model::Diagnosis = w
            .rest
            .call(Method::GET, &format!("{path}?revision=1"), None)
            .await?;
        Ok((d.harness.pod.is_none() && d.gateway.pod.is_none()).then_some(d))
    })
    .await?;
    assert_eq!((d1.revision, d1.revision_id.as_str()), (1, r1.id.as_str()));
    let latest: clawfed_hub::model::Diagnosis = w.rest.call(Method::GET, &path, None).await?;
    assert_eq!(latest.revision, 2, "the default is the active revision");
    let shown = cli(
        &w.hub,
        &[
            "agents",
            "diagnose",
            &name,
            "-n",
            &ns.name,
            "--revision",
            "1",
        ],
    )?;
    ensure!(shown.contains("revision 1"), "{shown}");

    w.rest
        .call::<Agent>(
            Method::POST,
            &format!("/namespaces/{}/agents/{name}/stop", ns.name),
            Some(json!({})),
        )
        .await?;
    wait_no_harness(&exec, &dpns, &name).await?;
    // The Pods go some time after their Deployments: until then the
    // checks are still read; once both are gone every check is `unknown`.
    let unknown = |c: &clawfed_hub::model::ComponentDiagnosis| {
        c.pod.is_none() && !c.checks.is_empty() && c.checks.iter().all(|k| k.status == "unknown")
    };
    let d = until(WAIT, "diagnose of the stopped Agent", || async {
        let d: clawfed_hub::model::Diagnosis = w.rest.call(Method::GET, &path, None).await?;
        Ok((unknown(&d.harness) && unknown(&d.gateway)).then_some(d))
    })
    .await?;
    assert_eq!(d.revision, 2, "the stopped revision is the one diagnosed");
    w.finish().await
}

// ============================================================ deletion

/// Deploys, stops and deletes a dedicated Agent; returns its names once the
/// hub ran the `agent.delete` work.
async fn deploy_stop_delete(w: &mut World) -> Result<(Namespace, String)> {
    let (ns, agent) = w.agent("dedicated-codex").await?;
    let exec = w.exec_a.admin();
    let name = agent.name.clone();
    w.rest.deploy_current(&ns.name, &name).await?;
    w.rest
        .wait_phase(&ns.name, &name, 1, RevisionPhase::Active)
        .await?;
    let _: Agent = w
        .rest
        .call(
            Method::POST,
            &format!("/namespaces/{}/agents/{name}/stop", ns.name),
            Some(json!({})),
        )
        .await?;
    w.rest
        .wait_phase(&ns.name, &name, 1, RevisionPhase::Stopped)
        .await?;
    // A stop keeps the workspace and the credential Secret.
    let dpns = ns.data_plane_namespace.clone();
    ensure!(
        Api::<PersistentVolumeClaim>::namespaced(exec.clone(), &dpns)
            .get_opt(&format!("{name}-workspace"))
            .await?
            .is_some(),
        "the stop kept the workspace"
    );
    let (status, body) = w
        .rest
        .exchange(
            Method::DELETE,
            &format!("/namespaces/{}/agents/{name}", ns.name),
            None,
            None,
        )
        .await?;
    ensure!(status == StatusCode::NO_CONTENT, "delete: {status} {body}");
    until(WAIT, "the agent.delete work done", || async {
        let work: serde_json::Value = w
            .rest
            .call(
                Method::GET,
                &format!("/work?namespace={}&limit=50", ns.name),
                None,
            )
            .await?;
        let item = work["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["kind"] == "agent.delete" && i["target"] == name.as_str())
            .cloned();
        match item {
            Some(i) if i["state"] == "done" => Ok(Some(())),
            Some(i) if i["state"] == "failed" => bail!("agent.delete failed: {i}"),
            _ => Ok(None),
        }
    })
    .await?;
    // The history stays readable under its name; the Agent is gone.
    let history: serde_json::Value = w
        .rest
        .call(
            Method::GET,
            &format!("/namespaces/{}/agents/{name}/revisions", ns.name),
            None,
        )
        .await?;
    ensure!(
        history["items"].as_array().map(Vec::len) == Some(1),
        "history: {history}"
    );
    let (status, _) = w
        .rest
        .exchange(
            Method::GET,
            &format!("/namespaces/{}/agents/{name}", ns.name),
            None,
            None,
        )
        .await?;
    ensure!(status == StatusCode::NOT_FOUND, "deleted Agent: {status}");
    Ok((ns, name))
}

/// Issue 12, lifecycle: deleting an Agent keeps its revision history and
/// audit, and by default (`pipeline.retainOnAgentDelete: false`) destroys
/// its runtime state in both clusters: each revision is retired on its
/// cluster (workspace PVC and credential Secret gone in exec-a), and the
/// Gateway's storage, transport Secret and ServiceAccount go in control.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_agent_keeps_its_history_and_removes_its_state_in_both_clusters() -> Result<()>
{
    let mut w = World::start().await?;
    let (control, exec) = (w.control.admin(), w.exec_a.admin());
    let (ns, name) = deploy_stop_delete(&mut w).await?;
    let gw_ns = gateway_ns(&ns.id);
    let dpns = ns.data_plane_namespace.clone();
    until(WAIT, "the Harness state gone in exec-a", || async {
        let pvc = Api::<PersistentVolumeClaim>::namespaced(exec.clone(), &dpns)
            .get_opt(&format!("{name}-workspace"))
            .await?;
        let secret = Api::<Secret>::namespaced(exec.clone(), &dpns)
            .get_opt(&format!("{name}-r1-credentials"))
            .await?;
        Ok((going(pvc.as_ref().map(|p| &p.metadata)) && secret.is_none()).then_some(()))
    })
    .await?;
    // PVCs may still be terminating (their Pods go first): live ones count.
    for (kind, live) in [
        (
            "Deployment",
            live_names::<Deployment>(&control, &gw_ns, &name).await?,
        ),
        (
            "Service",
            live_names::<Service>(&control, &gw_ns, &name).await?,
        ),
        (
            "Secret",
            live_names::<Secret>(&control, &gw_ns, &name).await?,
        ),
        (
            "ServiceAccount",
            live_names::<ServiceAccount>(&control, &gw_ns, &name).await?,
        ),
        (
            "PersistentVolumeClaim",
            live_names::<PersistentVolumeClaim>(&control, &gw_ns, &name).await?,
        ),
    ] {
        ensure!(live.is_empty(), "control still has {kind}s {live:?}");
    }
    let r1 = w.rest.revision(&ns.name, &name, 1).await?;
    assert_eq!(r1.phase, RevisionPhase::Retired);
    assert_eq!(r1.reason.as_deref(), Some("agent deleted"));
    let audit: serde_json::Value = w
        .rest
        .call(Method::GET, &format!("/audit?namespace={}", ns.name), None)
        .await?;
    ensure!(
        audit["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["action"] == "agent.delete"),
        "audit: {audit}"
    );
    w.finish().await
}

/// Issue 12, lifecycle: with `pipeline.retainOnAgentDelete: true` the
/// deleted Agent's runtime state is kept as the stop left it, in both
/// clusters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retain_on_agent_delete_keeps_its_state_in_both_clusters() -> Result<()> {
    let mut w = World::start_with(|c| c.pipeline.retain_on_agent_delete = true).await?;
    let (control, exec) = (w.control.admin(), w.exec_a.admin());
    let (ns, name) = deploy_stop_delete(&mut w).await?;
    let gw_ns = gateway_ns(&ns.id);
    let dpns = ns.data_plane_namespace.clone();
    ensure!(
        !live_names::<PersistentVolumeClaim>(&exec, &dpns, &name)
            .await?
            .is_empty(),
        "the workspace was kept"
    );
    ensure!(
        Api::<Secret>::namespaced(exec.clone(), &dpns)
            .get_opt(&format!("{name}-r1-credentials"))
            .await?
            .is_some(),
        "the credential Secret was kept"
    );
    ensure!(
        !live_names::<PersistentVolumeClaim>(&control, &gw_ns, &name)
            .await?
            .is_empty(),
        "the Gateway's storage was kept"
    );
    let r1 = w.rest.revision(&ns.name, &name, 1).await?;
    assert_eq!(r1.phase, RevisionPhase::Stopped, "not retired");
    w.finish().await
}

// ================================================ issue 15: the web fleet view

use clawfed_tests::webdriver::{self, Browser};

/// A display name that runs script if a page ever renders it as HTML.
const HOSTILE_NAME: &str =
    r#"<script>window.__xss=1</script> "double" & 'single' <img src=x onerror="window.__xss=2">"#;

/// A tenant with this display name and one Agent placed on `cluster`.
async fn tenant_displayed_as(
    rest: &HubClient,
    cluster: &str,
    display_name: &str,
) -> Result<(Namespace, Agent)> {
    let ns: Namespace = rest
        .call(
            Method::POST,
            "/namespaces",
            Some(json!({ "name": format!("t{}", short_id()), "displayName": display_name })),
        )
        .await?;
    let agent = rest.new_agent(&ns.name, cluster, "dedicated-codex").await?;
    Ok((ns, agent))
}

/// Stops Agent `agent`.
async fn stop_agent(rest: &HubClient, ns: &str, agent: &str) -> Result<()> {
    let (status, text) = rest
        .exchange(
            Method::POST,
            &format!("/namespaces/{ns}/agents/{agent}/stop"),
            None,
            None,
        )
        .await?;
    ensure!(status.is_success(), "stop {ns}/{agent}: {status} {text}");
    Ok(())
}

/// Where the web view test leaves its screenshots: `$CLAWFED_ARTIFACTS`,
/// else `<target>/tmp/web-view`.
fn artifacts_dir() -> PathBuf {
    std::env::var_os("CLAWFED_ARTIFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-view"))
}

/// The `data-state` of cluster `name`'s row, and when the page applied
/// its last change (the page's clock, ms since the epoch).
const CLUSTER_ROW: &str = "const r = document.querySelector(`[data-cluster=\"${CSS.escape(arguments[0])}\"]`); \
     return r && r.dataset.state === arguments[1] ? Number(r.dataset.changedAt || 0) : null;";

/// The `data-phase` of Agent `ns/name`'s row ('' when not deployed).
const AGENT_PHASE: &str = "const r = document.querySelector(`[data-agent=\"${CSS.escape(arguments[0])}\"]`); \
     return r ? r.dataset.phase : null;";

/// Signs in on the page shown (the sign-in form) by typing the token and
/// Enter, and waits for the first render with data.
async fn sign_in(browser: &Browser, token: &str) -> Result<()> {
    let input = browser.find("#token").await?;
    browser
        .send_keys(&input, &format!("{token}{}", webdriver::ENTER))
        .await?;
    browser
        .wait_for::<bool>(
            WAIT,
            "the overview after sign-in",
            "return document.body.dataset.rendered === '1' && document.getElementById('live').textContent === 'live' ? true : null",
            vec![],
        )
        .await?;
    Ok(())
}

/// Waits until the page has no refresh due or running (the counts and
/// lists it re-reads after events are in).
async fn settled(browser: &Browser) -> Result<()> {
    browser
        .wait_for::<bool>(
            WAIT,
            "the page to settle",
            "return document.body.dataset.refreshing ? null : true",
            vec![],
        )
        .await
        .map(drop)
}

/// Moves the keyboard focus to the element `css` selects and checks it
/// took it (a real link or button, not a bare element).
async fn focus(browser: &Browser, css: &str) -> Result<()> {
    let focused: bool = browser
        .eval(
            "const e = document.querySelector(arguments[0]); if (!e) return false; \
             e.focus(); return document.activeElement === e && \
             (e.tagName === 'A' && e.hasAttribute('href') || e.tagName === 'BUTTON');",
            vec![json!(css)],
        )
        .await?;
    ensure!(focused, "{css} cannot take the keyboard focus");
    Ok(())
}

/// Polls Agent `key`'s phase on the page until it is `want` (or failed),
/// returning the phases seen on the way.
async fn phases_until(browser: &Browser, key: &str, want: &[&str]) -> Result<Vec<String>> {
    let deadline = Instant::now() + WAIT;
    let mut seen: Vec<String> = Vec::new();
    loop {
        let phase: Option<String> = browser.eval(AGENT_PHASE, vec![json!(key)]).await?;
        if let Some(p) = phase
            && seen.last() != Some(&p)
        {
            seen.push(p.clone());
        }
        match seen.last().map(String::as_str) {
            Some(p) if want.contains(&p) => return Ok(seen),
            Some("failed") => bail!("{key} failed on the page; phases seen {seen:?}"),
            _ => {}
        }
        ensure!(
            Instant::now() < deadline,
            "{key} did not reach {want:?} on the page; phases seen {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Issue 15: the web fleet view at `/ui` in headless Chromium (Debian's
/// chromium and chromedriver, over WebDriver) against a real hub process
/// (PostgreSQL, Gateways in control, heartbeat 1 s) and a real spoke
/// process on exec-a: the page signs in with a token it keeps in session
/// storage only, shows the cluster online, offline within two heartbeats
/// of the spoke's SIGSTOP and online again after SIGCONT, an Agent going
/// to `active` live (no reload), a hostile tenant display name as text, an
/// Agent page (reached with the keyboard) with its revisions and phase
/// timings; a tenant's token shows none of another tenant's Agents or
/// events. Prints the first-render timings and saves screenshots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_shows_the_fleet_live_in_a_browser() -> Result<()> {
    const HEARTBEAT: Duration = Duration::from_secs(1); // HubEnv: link.heartbeatSeconds
    // The hub notices silence on a heartbeat tick; then the event's commit,
    // the watch stream and the page's render.
    const OFFLINE_MARGIN: Duration = Duration::from_millis(800);
    const FIRST_RENDER_GOAL_MS: f64 = 200.0;
    clawfed_tests::link::init_test_logging();
    let control = control_env::control().await?;
    let exec_a = kube_env::cluster("exec-a").await?;
    let mut env = HubEnv::new(&control).await?;
    let mut cleanup = Cleanup::default();
    let mut hub = env.serve(1).await?;
    let rest = env.rest().clone();
    let ui = format!("{}/ui/", rest.server());

    // The page's own answers: strict policy, no sniffing, no referrer.
    for path in ["/ui", "/ui/", "/ui/app.js", "/ui/app.css"] {
        let resp = reqwest::get(format!("{}{path}", rest.server())).await?;
        ensure!(resp.status().is_success(), "{path}: {}", resp.status());
        let h = resp.headers();
        let csp = h
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        ensure!(
            csp.starts_with("default-src 'self'")
                && csp.contains("frame-ancestors 'none'")
                && !csp.contains("unsafe-inline"),
            "{path}: Content-Security-Policy {csp:?}"
        );
        ensure!(
            h.get("x-content-type-options")
                .is_some_and(|v| v == "nosniff")
        );
        ensure!(h.get("referrer-policy").is_some_and(|v| v == "no-referrer"));
    }

    let cluster_name = format!("exec-a-{}", &short_id()[..6]);
    let spoke_env = SpokeEnv::new(&env, &exec_a, &cluster_name).await?;
    let mut spoke = spoke_env.spawn(&env, 1, true)?;
    rest.wait_online(&cluster_name, WAIT).await?;
    let (ns_a, agent_a) = tenant_displayed_as(&rest, &cluster_name, HOSTILE_NAME).await?;
    let (ns_b, agent_b) = rest
        .tenant_with_agent(&cluster_name, "dedicated-codex")
        .await?;
    for (ns, agent) in [(&ns_a, &agent_a), (&ns_b, &agent_b)] {
        cleanup.track(&control.admin(), ns, &agent.name).await?;
    }
    // Tenant B runs before anyone looks: its events are in the log.
    rest.deploy_current(&ns_b.name, &agent_b.name).await?;
    let key_a = format!("{}/{}", ns_a.name, agent_a.name);
    let token_a = mint(
        env.store.as_ref(),
        "viewer-a",
        Some(&ns_a.name),
        Role::Viewer,
    )
    .await;

    let browser = Browser::start(&env.logs(), 1280, 900).await?;
    browser.goto(&ui).await?;
    sign_in(&browser, rest.token().context("a token")?).await?;
    browser
        .wait_for::<f64>(
            WAIT,
            "the cluster online on the page",
            CLUSTER_ROW,
            vec![json!(cluster_name), json!("online")],
        )
        .await?;

    // Issue 33: a cordon shows on the page as it happens (its watch
    // event), and goes with the uncordon.
    for (verb, want) in [("cordon", true), ("uncordon", false)] {
        rest.post::<_, clawfed_hub::model::Cluster>(
            &format!("/clusters/{cluster_name}/{verb}"),
            &(),
        )
        .await?;
        browser
            .wait_for::<bool>(
                Duration::from_secs(15),
                &format!("the page after {verb}"),
                "const r = document.querySelector(`[data-cluster=\"${CSS.escape(arguments[0])}\"] td.state`); \
                 return r && (r.textContent.includes('cordoned') === arguments[1]) ? true : null;",
                vec![json!(cluster_name), json!(want)],
            )
            .await?;
    }

    // The token: in this tab's session storage, never in the URL, a
    // cookie or local storage.
    let (href, kept, cookie, local): (String, Option<String>, String, u32) = browser
        .eval(
            "return [location.href, sessionStorage.getItem('clawfed.token'), document.cookie, localStorage.length]",
            vec![],
        )
        .await?;
    ensure!(
        !href.contains(rest.token().unwrap_or_default()),
        "the token is in the URL {href}"
    );
    ensure!(
        kept.as_deref() == rest.token(),
        "the token is not in session storage"
    );
    ensure!(
        cookie.is_empty() && local == 0,
        "the token leaked to cookies or local storage"
    );

    // The hostile display name is text: exactly the string, nothing ran,
    // no element was made of it.
    let (text, xss, scripts, injected): (String, Option<i64>, u32, u32) = browser
        .eval(
            "const c = document.querySelector(`[data-tenant=\"${CSS.escape(arguments[0])}\"] .display-name`); \
             return [c ? c.textContent : '', window.__xss, document.querySelectorAll('script').length, \
                     document.querySelectorAll('#view img, #view script').length]",
            vec![json!(ns_a.name)],
        )
        .await?;
    ensure!(text == HOSTILE_NAME, "the display name reads {text:?}");
    ensure!(
        xss.is_none(),
        "markup in a display name ran: __xss = {xss:?}"
    );
    ensure!(
        scripts == 1 && injected == 0,
        "{scripts} scripts, {injected} injected elements"
    );

    // First render on loopback (the token already in session storage):
    // the browser's paint timing and the page's mark after the overview
    // with data. Best of three loads: the machine is shared.
    let mut renders = Vec::new();
    for _ in 0..3 {
        browser.refresh().await?;
        let (fcp, overview): (f64, f64) = browser
            .wait_for(
                WAIT,
                "the overview after a reload",
                "if (document.body.dataset.rendered !== '1') return null; \
                 const p = performance.getEntriesByName('first-contentful-paint')[0]; \
                 const m = performance.getEntriesByName('clawfed:first-render')[0]; \
                 return p && m ? [p.startTime, m.startTime] : null;",
                vec![],
            )
            .await?;
        renders.push((fcp, overview));
    }
    let best_fcp = renders.iter().map(|r| r.0).fold(f64::INFINITY, f64::min);
    let best_overview = renders.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!(
        "web view first render (ms, 3 loads): first contentful paint {:?}, overview with data {:?}; \
         best {best_fcp:.0} / {best_overview:.0} ms, goal {FIRST_RENDER_GOAL_MS} ms: {} \
         (debug hub, loopback, load average {})",
        renders.iter().map(|r| r.0.round()).collect::<Vec<_>>(),
        renders.iter().map(|r| r.1.round()).collect::<Vec<_>>(),
        if best_fcp <= FIRST_RENDER_GOAL_MS {
            "met"
        } else {
            "missed"
        },
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    // A regression bound that a loaded 2-core machine still meets; the
    // goal itself is printed above.
    ensure!(best_fcp < 1000.0, "first contentful paint {best_fcp} ms");

    // An Agent going to active, live: no reload (the marker survives).
    browser
        .eval::<serde_json::Value>("window.__sameDocument = 1; return null", vec![])
        .await?;
    rest.deploy_current(&ns_a.name, &agent_a.name).await?;
    let phases = phases_until(&browser, &key_a, &["active"]).await?;
    let same: Option<i64> = browser.eval("return window.__sameDocument", vec![]).await?;
    ensure!(same == Some(1), "the page reloaded");
    ensure!(
        phases.len() >= 2,
        "the page went straight to active: {phases:?}"
    );
    eprintln!("phases the page showed for {key_a}: {phases:?}");

    // SIGSTOP: offline on the page within two heartbeats; SIGCONT: online.
    let stopped_ms = chrono::Utc::now().timestamp_millis();
    spoke.signal("-STOP")?;
    let changed_ms: f64 = browser
        .wait_for(
            Duration::from_secs(15),
            "the cluster offline on the page",
            CLUSTER_ROW,
            vec![json!(cluster_name), json!("offline")],
        )
        .await?;
    let offline_after = Duration::from_millis((changed_ms as i64 - stopped_ms).max(0) as u64);
    spoke.signal("-CONT")?;
    let resumed_ms = chrono::Utc::now().timestamp_millis();
    let online_ms: f64 = browser
        .wait_for(
            Duration::from_secs(15),
            "the cluster online again on the page",
            CLUSTER_ROW,
            vec![json!(cluster_name), json!("online")],
        )
        .await?;
    eprintln!(
        "the page showed {cluster_name} offline {offline_after:?} after SIGSTOP (heartbeat {HEARTBEAT:?}), \
         online {} ms after SIGCONT",
        online_ms as i64 - resumed_ms
    );
    ensure!(
        offline_after <= 2 * HEARTBEAT + OFFLINE_MARGIN,
        "offline shown {offline_after:?} after SIGSTOP"
    );
    let expiry: String = browser
        .eval(
            "return document.querySelector(`[data-cluster=\"${CSS.escape(arguments[0])}\"] td:nth-child(5)`).textContent",
            vec![json!(cluster_name)],
        )
        .await?;
    ensure!(expiry != "-", "no certificate expiry shown");
    // The capacity the spoke reported, as the CLI's FREE column writes it
    // (the page lists the clusters again after each revision's phase).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page: String = browser
            .eval(
                "return document.querySelector(`[data-cluster=\"${CSS.escape(arguments[0])}\"] td.free`).textContent",
                vec![json!(cluster_name)],
            )
            .await?;
        let api = rest
            .cluster(&cluster_name)
            .await?
            .capacity
            .map(|c| clawfed_proto::capacity::Resources::from(c.free).to_string());
        if api.as_deref() == Some(page.as_str()) {
            eprintln!("the page shows {cluster_name} free: {page}");
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the page's Free cell {page:?}, the API's {api:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    settled(&browser).await?;
    let artifacts = artifacts_dir();
    browser.screenshot(&artifacts.join("overview.png")).await?;

    // The Agent page, reached with the keyboard: the Agent's link focused
    // (the page keeps focus across its live re-renders), then Enter.
    focus(&browser, &format!("[data-key=\"agent:{key_a}\"]")).await?;
    browser.press(webdriver::ENTER).await?;
    let (timings, tenant, failover): (u32, String, String) = browser
        .wait_for(
            WAIT,
            "revision 1 active with its phase timings on the Agent page",
            "const r = document.querySelector('[data-revision=\"1\"]'); \
             if (!r || r.dataset.phase !== 'active') return null; \
             const t = document.querySelector('dd.display-name'); \
             const f = document.querySelector('dd.failover'); \
             return [r.querySelectorAll('.timings li').length, t ? t.textContent : '', \
                     f ? f.textContent : ''];",
            vec![],
        )
        .await?;
    ensure!(timings >= 3, "{timings} phase timings");
    ensure!(
        failover == "off",
        "the Agent page shows failover {failover:?}"
    );
    ensure!(
        tenant == HOSTILE_NAME,
        "the Agent page shows the tenant as {tenant:?}"
    );
    let hash: String = browser.eval("return location.hash", vec![]).await?;
    ensure!(hash == format!("#/agent/{key_a}"), "{hash}");
    settled(&browser).await?;
    browser.screenshot(&artifacts.join("agent.png")).await?;

    // Tenant A's token: its own Agent, never tenant B's, not even from
    // events B's stop makes while A's page watches.
    browser.goto(&ui).await?;
    focus(&browser, "#signout").await?;
    browser.press(webdriver::ENTER).await?;
    let gone: Option<String> = browser
        .eval("return sessionStorage.getItem('clawfed.token')", vec![])
        .await?;
    ensure!(gone.is_none(), "sign-out kept the token");
    sign_in(&browser, &token_a).await?;
    phases_until(&browser, &key_a, &["active"]).await?;
    stop_agent(&rest, &ns_b.name, &agent_b.name).await?;
    until(WAIT, "tenant B's revision stopping", || async {
        let r = rest.revision(&ns_b.name, &agent_b.name, 1).await?;
        Ok(matches!(r.phase, RevisionPhase::Stopping | RevisionPhase::Stopped).then_some(()))
    })
    .await?;
    // Events are ordered: once A's stop shows, B's earlier ones were sent
    // to this page if they ever would be.
    stop_agent(&rest, &ns_a.name, &agent_a.name).await?;
    phases_until(&browser, &key_a, &["stopping", "stopped"]).await?;
    let (body, seen): (String, String) = browser
        .eval(
            "return [document.body.innerText, document.body.dataset.eventNamespaces || '']",
            vec![],
        )
        .await?;
    ensure!(
        !body.contains(&ns_b.name) && !body.contains(&agent_b.name),
        "tenant A's page shows tenant B:\n{body}"
    );
    let seen: Vec<&str> = seen.split_whitespace().collect();
    ensure!(
        seen.contains(&ns_a.name.as_str()) && !seen.contains(&ns_b.name.as_str()),
        "tenant A's page received events of {seen:?}"
    );

    let console = browser.console().await?;
    ensure!(
        !console
            .iter()
            .any(|l| l.starts_with("SEVERE") || l.contains("Content Security Policy")),
        "the browser console:\n{}",
        console.join("\n")
    );
    browser.close().await;
    spoke.terminate().await;
    hub.terminate().await;
    for log in [&hub.stdout, &hub.stderr] {
        let text = Proc::text(log);
        ensure!(
            !text.contains(rest.token().unwrap_or_default()) && !text.contains(&token_a),
            "a token reached the hub's log {}",
            log.display()
        );
    }
    eprintln!("screenshots: {}", artifacts.display());
    cleanup.run().await?;
    Ok(())
}
