//! `pipeline-bench`: the revision pipeline end to end with one hub and two
//! execution clusters (issue 6).
//!
//! In one process: a hub (`clawfed_hub::server::start_with_parts`, pipeline
//! on, SQLite in a temp dir or a fresh schema on `CLAWFED_TEST_DATABASE_URL`
//! with `--postgres`) and two real spokes
//! (`clawfed_spoke::link::Link` over mTLS, each with its own
//! `clawfed_spoke::exec::Executor` acting as the spoke ServiceAccount of
//! `deploy/spoke` on exec-a and exec-b). The bench watches Deployments and
//! Pods in the tenant's data-plane namespace on both clusters as admin and
//! timestamps every event at µs resolution.
//!
//! Gateways (`--gateways on`, the default): the hub's Gateway room runs in
//! the control cluster as the hub's own ServiceAccount (`deploy/hub`,
//! installed as `tests/src/control_env.rs` does: the tests' StorageClass
//! with a pre-bound PV per Gateway PVC, the edge Gateway for the routes), so
//! every revision also gets its Gateway Deployment, Service and HTTPRoute.
//! The bench then watches the Gateway Deployments and Pods in control too,
//! and Kubernetes' share runs to the later of the Harness and Gateway Pod
//! Ready. `--gateways off` runs the hub with `GatewaysDisabled`.
//!
//! 1. Latency: M Agents deployed one at a time (placement alternating), each
//!    `POST .../deploy` → revision `active` seen by `GET` polled every 5 ms.
//!    Kubernetes' share is Harness Deployment seen → its Pod Ready seen (the
//!    ReplicaSet controller, scheduler and kwok); clawfed's overhead is the
//!    rest, split into deploy → Deployment (hub pass, link, spoke apply) and
//!    Pod Ready → Active (spoke report, link, hub pass).
//! 2. Throughput: N Agents deployed at once across both clusters; revisions
//!    per second from the first deploy request to the last `active` phase
//!    time the hub recorded (followed on the hub's watch stream, so the
//!    bench does not load the hub with GETs), and deploy → Active under
//!    that load; the machine's busy cores and this process's over the run,
//!    and each Gateway's apply time (the hub's `gateway_ensure` histogram)
//!    beside Kubernetes alone's.
//!
//! Every verdict line names its conditions (Gateways, clusters, how many
//! deploys at once, backend, worker poll).
//!
//! Exits 1 when a revision fails or anything times out. Everything it makes
//! (hub, spokes, data-plane namespaces, Gateways and their PVs, the
//! PostgreSQL schema) is removed at the end; the spoke RBAC of `deploy/spoke` stays installed, as the tests
//! leave it. `e2e/bench/pipeline-bench.sh` starts the clusters if needed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use clawfed_bench::procfs::CpuSpan;
use clawfed_bench::statements::{self, StatementCounter};
use clawfed_hub::auth::{self, Role};
use clawfed_hub::client::HubClient;
use clawfed_hub::client::events::Frame;
use clawfed_hub::config::Config as HubConfig;
use clawfed_hub::gateway::{Gateways, TransportCredentials};
use clawfed_hub::model::event::{EventBody, RevisionPhaseEvent};
use clawfed_hub::model::{Agent, AgentRevision, ConnectionState, List, Namespace, RevisionPhase};
use clawfed_hub::store::{self, NewToken, Store};
use clawfed_hub::worker::Handlers;
use clawfed_hub::worker::rollout::{GatewayRuntime, GatewaysDisabled};
use clawfed_spoke::config::SpokeConfig;
use clawfed_spoke::exec::Executor;
use clawfed_spoke::link::identity::FileIdentityStore;
use clawfed_spoke::link::tls::HubAddress;
use clawfed_spoke::link::{Link, LinkConfig, SpokeMetrics};
use clawfed_tests::control_env;
use clawfed_tests::kube_env::{self, TestCluster};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace as KubeNamespace, Pod};
use kube::api::DeleteParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;
use sqlx::Connection;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
#[command(about = "Deploy-to-Active latency and revisions/s through the real pipeline")]
struct Args {
    /// Execution clusters (names under the e2e clusters dir).
    #[arg(long, value_delimiter = ',', default_value = "exec-a,exec-b")]
    clusters: Vec<String>,
    /// Agents deployed one at a time (latency phase).
    #[arg(long, default_value_t = 50)]
    latency_agents: usize,
    /// Agents deployed at once (throughput phase).
    #[arg(long, default_value_t = 200)]
    throughput_agents: usize,
    /// Poll interval of the latency phase's `GET revision`.
    #[arg(long, default_value_t = 5)]
    poll_ms: u64,
    /// Hub worker poll interval (`worker.pollIntervalMs`); the hub default
    /// when unset.
    #[arg(long)]
    worker_poll_ms: Option<u64>,
    /// Per-revision limit in the latency phase.
    #[arg(long, default_value_t = 60)]
    revision_timeout_seconds: u64,
    /// Limit of the throughput phase.
    #[arg(long, default_value_t = 300)]
    throughput_timeout_seconds: u64,
    /// PostgreSQL (a fresh schema on CLAWFED_TEST_DATABASE_URL) instead of
    /// SQLite.
    #[arg(long)]
    postgres: bool,
    /// Gateways in the control cluster (`on`), or the hub without them
    /// (`off`, `GatewaysDisabled`).
    #[arg(long, value_enum, default_value_t = GatewayMode::On)]
    gateways: GatewayMode,
    /// The control cluster the Gateways run in (with `--gateways on`).
    #[arg(long, default_value = "control")]
    control: String,
    /// Skip the Kubernetes-alone reference (and the ratio).
    #[arg(long)]
    no_direct: bool,
    /// Count the hub's SQL statements over the throughput phase and print
    /// them per revision (sqlx's statement events; costs some CPU).
    #[arg(long)]
    count_statements: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum GatewayMode {
    On,
    Off,
}

const IMAGE: &str = "ghcr.io/openclaw/openclaw:1.0";
/// Issue 17's goals: clawfed's overhead one deploy at a time (p50, ms), and
/// its revisions/s under 200 deploys at once over Kubernetes alone's.
const OVERHEAD_GOAL_MS: f64 = 50.0;
const RATIO_GOAL: f64 = 0.8;
/// Gateway image: the control cluster's Gateway config requires a digest;
/// kwok runs nothing, so the registry is never asked.
const GATEWAY_IMAGE: &str = "registry.invalid/openclaw-gateway@sha256:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd";

/// Wall-clock milliseconds (fractional), the clock the hub's timestamps use.
fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or_default()
}

fn chrono_ms(t: chrono::DateTime<chrono::Utc>) -> f64 {
    t.timestamp_micros() as f64 / 1000.0
}

use clawfed_bench::load;
use clawfed_bench::percentile as pct;

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

// ---------------------------------------------------------------- clusters

fn clusters_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CLAWFED_CLUSTERS_DIR") {
        return PathBuf::from(d);
    }
    std::env::var_os("CLAWFED_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
                .join(".cache/clawfed")
        })
        .join("clusters")
}

struct ExecCluster {
    name: String,
    admin: Client,
}

async fn exec_cluster(name: &str) -> Result<ExecCluster> {
    let path = clusters_dir().join(name).join("admin.kubeconfig");
    let kc = Kubeconfig::read_from(&path).with_context(|| {
        format!(
            "{} (start the cluster: e2e/cluster.sh up {name})",
            path.display()
        )
    })?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    cfg.connect_timeout = Some(Duration::from_secs(5));
    cfg.read_timeout = Some(Duration::from_secs(60));
    let admin = Client::try_from(cfg)?;
    tokio::time::timeout(Duration::from_secs(10), admin.apiserver_version())
        .await
        .with_context(|| format!("cluster {name}: /version timed out"))?
        .with_context(|| format!("cluster {name} does not answer"))?;
    Ok(ExecCluster {
        name: name.to_owned(),
        admin,
    })
}

/// A client acting as the spoke's ServiceAccount, after deploy/spoke is
/// installed (the tests' own helper: one parser of those manifests).
async fn spoke_client(c: &ExecCluster) -> Result<Client> {
    let cluster = kube_env::cluster(&c.name).await?;
    clawfed_tests::spoke_env::spoke_client(&cluster).await
}

// ------------------------------------------------------- Kubernetes timing

/// When the bench's own watches saw a Harness's objects (wall-clock ms).
#[derive(Debug, Default, Clone, Copy)]
struct KubeTimes {
    deployment: Option<f64>,
    pod: Option<f64>,
    pod_ready: Option<f64>,
    /// The Gateway's Pod Ready in the control cluster (Gateways on).
    gateway_deployment: Option<f64>,
    gateway_pod_ready: Option<f64>,
}

type Times = Arc<Mutex<HashMap<(usize, String), KubeTimes>>>;

fn agent_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<String> {
    meta.labels
        .as_ref()?
        .get(clawfed_proto::labels::AGENT)
        .cloned()
}

/// Where a watch looks: a Harness cluster (by index) or the control
/// cluster's Gateway namespace.
#[derive(Debug, Clone, Copy)]
enum Watched {
    Harness(usize),
    Gateway,
}

/// Watches Deployments (`pods == false`) or Pods in `ns`; signals `synced`
/// after the initial list. Gateway events are filed under the cluster the
/// Agent's Harness is placed on (`placed`), so one entry holds both.
fn spawn_watch(
    (client, ns, watched, pods): (Client, String, Watched, bool),
    times: Times,
    placed: Arc<Mutex<HashMap<String, usize>>>,
    synced: tokio::sync::oneshot::Sender<()>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut synced = Some(synced);
        let record = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
                      ready: bool| {
            if meta.deletion_timestamp.is_some() {
                return;
            }
            let Some(agent) = agent_of(meta) else { return };
            let t = now_ms();
            let cluster = match watched {
                Watched::Harness(c) => c,
                Watched::Gateway => {
                    // The shared Gateway namespace holds other runs' Agents too.
                    let placed = placed.lock().unwrap_or_else(|p| p.into_inner());
                    let Some(c) = placed.get(&agent) else { return };
                    *c
                }
            };
            let mut m = times.lock().unwrap_or_else(|p| p.into_inner());
            let e = m.entry((cluster, agent)).or_default();
            match (watched, pods) {
                (Watched::Harness(_), true) => {
                    e.pod.get_or_insert(t);
                    if ready {
                        e.pod_ready.get_or_insert(t);
                    }
                }
                (Watched::Harness(_), false) => {
                    e.deployment.get_or_insert(t);
                }
                (Watched::Gateway, true) => {
                    if ready {
                        e.gateway_pod_ready.get_or_insert(t);
                    }
                }
                (Watched::Gateway, false) => {
                    e.gateway_deployment.get_or_insert(t);
                }
            }
        };
        if pods {
            let api: Api<Pod> = Api::namespaced(client, &ns);
            let mut s = std::pin::pin!(watcher(api, watcher::Config::default()));
            loop {
                let ev = tokio::select! {
                    _ = stop.cancelled() => break,
                    ev = s.next() => ev,
                };
                match ev {
                    Some(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p))) => {
                        let ready = p
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|cs| {
                                cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            });
                        record(&p.metadata, ready);
                    }
                    Some(Ok(watcher::Event::InitDone)) => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
                    None => break,
                }
            }
        } else {
            let api: Api<Deployment> = Api::namespaced(client, &ns);
            let mut s = std::pin::pin!(watcher(api, watcher::Config::default()));
            loop {
                let ev = tokio::select! {
                    _ = stop.cancelled() => break,
                    ev = s.next() => ev,
                };
                match ev {
                    Some(Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d))) => {
                        record(&d.metadata, false)
                    }
                    Some(Ok(watcher::Event::InitDone)) => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
                    None => break,
                }
            }
        }
    })
}

// ------------------------------------------------ Kubernetes alone

/// The reference: what the execution clusters' apiservers (and, Gateways
/// on, the control cluster's) do alone with the throughput phase's
/// Harnesses (and Gateways).
struct Direct {
    count: usize,
    concurrency: usize,
    /// First write → last Pod Ready, over all clusters.
    ready_in: Duration,
    /// Each Harness's first write → its Pod Ready, ms, sorted (queueing
    /// behind the concurrency limit included, as clawfed's deploy → Active
    /// includes its queueing).
    ready_ms: Vec<f64>,
    /// Gateways on: the control cluster's share, run at the same time.
    gateways: Option<DirectGatewayFigures>,
    /// CPU over the run (the clusters share the machine's cores).
    cpu: String,
}

/// Kubernetes alone in the control cluster (Gateways on).
struct DirectGatewayFigures {
    count: usize,
    concurrency: usize,
    /// First write → each Gateway Pod Ready, ms, sorted.
    ready_ms: Vec<f64>,
    /// First write → the last Gateway Pod Ready.
    ready_in: Duration,
    /// First write → the last Gateway object written.
    applied_in: Duration,
    /// Each Gateway's applies, ms, sorted.
    apply_ms: Vec<f64>,
}

impl Direct {
    fn rate(&self) -> f64 {
        self.count as f64 / self.ready_in.as_secs_f64()
    }
}

/// Kubernetes alone, before clawfed's run on the same clusters: as many
/// Harnesses as the throughput phase, placed alternately like it, their
/// objects (the spoke's own builders: ServiceAccount, credential Secret,
/// Service, Deployment, desired-state record) applied by a plain client
/// acting as the spoke's ServiceAccount (so API priority and fairness treats
/// both alike), at the spoke's starting apply limit per cluster, all
/// clusters at once; timed until every Pod is Ready. Namespaces are deleted
/// and gone before clawfed's run.
///
/// Gateways on (`gateway_world`): at the same time, each Agent's Gateway
/// objects (the hub's builders, as `Gateways::ensure` writes them) applied
/// to the control cluster by a plain client acting as the hub's
/// ServiceAccount, as many at a time as the hub runs Gateway ensures
/// (`worker.gatewayBatchSize`); timed until the later of the last Harness
/// and the last Gateway Pod Ready. The Gateways and their PVs are deleted before
/// clawfed's run.
async fn direct(
    args: &Args,
    clusters: &[ExecCluster],
    gateway_world: Option<&GatewayWorld>,
) -> Result<Direct> {
    let n = clusters.len();
    let concurrency = clawfed_spoke::pressure::ApplyLimit::START;
    let labels = std::collections::BTreeMap::from([(
        "sandbox.clawfed.io/class".to_owned(),
        "standard".to_owned(),
    )]);
    let mut runs = Vec::new();
    for (c, cluster) in clusters.iter().enumerate() {
        let share = (0..args.throughput_agents).filter(|i| i % n == c).count();
        let writer = spoke_client(cluster).await?;
        let run =
            load::DirectRun::prepare(cluster.admin.clone(), "pbdirect", share, labels.clone())
                .await?;
        runs.push((run, writer));
    }
    let gateway_concurrency = HubConfig::default().worker.gateway_batch_size as usize;
    let mut gateway_run = match gateway_world {
        Some(world) => {
            let run = load::DirectGateways::prepare(
                world.control.admin(),
                control_env::gateway_config(),
                "pbdirect",
                "pbd",
                args.throughput_agents,
                GATEWAY_IMAGE,
                |agent| clawfed_proto::work::harness::service_url(agent, 1, "oce-pbdirect", 8080),
            )
            .await?;
            Some((run, control_env::hub_client(&world.control).await?))
        }
        None => None,
    };
    let limit = Duration::from_secs(args.throughput_timeout_seconds);
    let cpu = CpuSpan::start();
    let started = Instant::now();
    let harnesses = futures::future::join_all(
        runs.iter_mut()
            .map(|(run, writer)| run.run(writer, concurrency, true, limit)),
    );
    let gateways = async {
        match &mut gateway_run {
            Some((run, writer)) => Some(run.run(writer, gateway_concurrency, limit).await),
            None => None,
        }
    };
    let (results, gateway_result) = futures::future::join(harnesses, gateways).await;
    let ready_in = started.elapsed();
    let cpu = cpu.note();
    for (run, _) in runs {
        run.cleanup().await;
    }
    if let Some((run, _)) = gateway_run {
        run.cleanup().await;
    }
    let mut ready_ms = Vec::new();
    for r in results {
        ready_ms.extend(r?.ready_ms);
    }
    let gateways = match gateway_result {
        Some(r) => {
            let t = r?;
            Some(DirectGatewayFigures {
                count: t.ready_ms.len(),
                concurrency: gateway_concurrency,
                ready_ms: t.ready_ms,
                ready_in: t.ready_in,
                applied_in: t.applied_in,
                apply_ms: t.apply_ms,
            })
        }
        None => None,
    };
    Ok(Direct {
        count: args.throughput_agents,
        concurrency,
        ready_in,
        ready_ms: sorted(ready_ms),
        gateways,
        cpu,
    })
}

// ---------------------------------------------------------------- hub REST

/// The revision phase changes of `tenant`, from the hub's watch stream
/// (Server-Sent Events), as a user's dashboard follows a rollout; the
/// channel closes when the stream ends (or is cut off with `relist`).
async fn phase_events(
    rest: &HubClient,
    tenant: &str,
) -> Result<tokio::sync::mpsc::UnboundedReceiver<RevisionPhaseEvent>> {
    let mut events = rest.watch(None, true).await?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let tenant = tenant.to_owned();
    tokio::spawn(async move {
        while let Ok(Some(frame)) = events.next().await {
            let Frame::Event(event) = frame else {
                return; // relist: the stream was cut off
            };
            let ours = event.namespace.as_deref() == Some(tenant.as_str());
            if let EventBody::RevisionPhase(p) = event.body
                && ours
                && tx.send(p).is_err()
            {
                return;
            }
        }
    });
    Ok(rx)
}

/// The hub's Gateway ensures so far, from its own histogram
/// `occ_agent_operation_duration_seconds{operation="gateway_ensure"}` on
/// its metrics listener `metrics` (`host:port`).
async fn ensure_totals(metrics: &str) -> Result<EnsureTotals> {
    let text = reqwest::Client::new()
        .get(format!("http://{metrics}/metrics"))
        .timeout(Duration::from_secs(10))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    const NAME: &str = "occ_agent_operation_duration_seconds";
    let value = |suffix: &str, result: &str| {
        clawfed_bench::fleet::labelled_metric(
            &text,
            &format!("{NAME}{suffix}"),
            &[("operation", "gateway_ensure"), ("result", result)],
        )
        .unwrap_or(0.0)
    };
    let t = EnsureTotals {
        ok: value("_count", "ok"),
        failed: value("_count", "failed"),
        ok_seconds: value("_sum", "ok"),
    };
    Ok(t)
}

/// Makes Agent `agent` of `tenant` placed on `cluster` in the hub.
async fn create_agent(
    rest: &HubClient,
    tenant: &str,
    agent: &str,
    cluster: &str,
    gateways: bool,
) -> Result<()> {
    // Embedded OpenClaw has no control-cluster Gateway: with Gateways
    // on, the Agents are dedicated (Gateway in control, a workspace
    // PVC in the execution cluster).
    let mut spec = json!({
        "harnessKind": if gateways { "dedicated-codex" } else { "embedded-openclaw" },
        "image": IMAGE,
        "placement": { "cluster": cluster },
    });
    if gateways {
        spec["gatewayImage"] = GATEWAY_IMAGE.into();
    }
    let _: Agent = rest
        .call(
            reqwest::Method::POST,
            &format!("/namespaces/{tenant}/agents"),
            Some(json!({ "name": agent, "spec": spec })),
        )
        .await?;
    Ok(())
}

/// Totals of the hub's Gateway ensure histogram.
#[derive(Debug, Clone, Copy, Default)]
struct EnsureTotals {
    ok: f64,
    failed: f64,
    /// Seconds spent in the successful ones.
    ok_seconds: f64,
}

impl EnsureTotals {
    fn since(self, before: Self) -> Self {
        Self {
            ok: self.ok - before.ok,
            failed: self.failed - before.failed,
            ok_seconds: self.ok_seconds - before.ok_seconds,
        }
    }
}

// ------------------------------------------------------------------- phases

/// One revision's figures (ms).
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// deploy request → `active` (observed by GET in the latency phase;
    /// the hub's recorded `active` time in the throughput phase).
    total: f64,
    /// Harness Deployment seen → the later of its Pod Ready and (Gateways
    /// on) the Gateway's Pod Ready.
    kube: f64,
    /// Gateway Deployment seen → Gateway Pod Ready seen (NaN: Gateways off).
    gateway: f64,
    /// Pod seen → Pod Ready seen.
    pod: f64,
    /// deploy request → Deployment seen.
    before: f64,
    /// The last Pod Ready seen (Harness, Gateway) → `active`.
    after: f64,
    /// deploy request → the first pipeline pass (phase `preparing` entered
    /// by the worker).
    first_pass: f64,
    /// The Gateway's ensure queued → applied (its own worker lane; NaN:
    /// no Gateway).
    gateway_ensure: f64,
}

impl Sample {
    fn overhead(&self) -> f64 {
        self.total - self.kube
    }
}

struct Bench {
    args: Args,
    rest: HubClient,
    /// The hub's metrics listener (`host:port`).
    metrics: String,
    tenant: String,
    /// The tenant's clawfed namespace id (names its Gateway namespace).
    namespace_id: String,
    /// Hub cluster names, by index of `args.clusters`.
    hub_clusters: Vec<String>,
    times: Times,
    /// Agent names are per run (the Gateway namespace is shared).
    suffix: String,
    /// Gateways on: the control cluster's side of each Agent.
    gateways: Option<Arc<GatewayWorld>>,
    /// Agent -> index of the cluster its Harness is placed on.
    placed: Arc<Mutex<HashMap<String, usize>>>,
}

impl Bench {
    async fn kube_times(&self, cluster: usize, agent: &str) -> Result<KubeTimes> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let t = self
                .times
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&(cluster, agent.to_owned()))
                .copied()
                .unwrap_or_default();
            let gateway_seen = self.gateways.is_none() || t.gateway_pod_ready.is_some();
            if t.deployment.is_some() && t.pod.is_some() && t.pod_ready.is_some() && gateway_seen {
                return Ok(t);
            }
            if Instant::now() > deadline {
                bail!(
                    "agent {agent}: the bench's watches on {} (and the Gateway namespace) did not see its Deployment and Ready Pod ({t:?})",
                    self.args.clusters[cluster]
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn sample(&self, t0: f64, active: f64, k: KubeTimes, rev: &AgentRevision) -> Sample {
        let (d, p, r) = (
            k.deployment.unwrap_or(f64::NAN),
            k.pod.unwrap_or(f64::NAN),
            k.pod_ready.unwrap_or(f64::NAN),
        );
        let gateway = match (k.gateway_deployment, k.gateway_pod_ready) {
            (Some(d), Some(r)) => r - d,
            _ => f64::NAN,
        };
        // Activation waits for both Pods; the later one ends Kubernetes' part.
        let last_ready = k.gateway_pod_ready.map_or(r, |g| g.max(r));
        Sample {
            total: active - t0,
            kube: last_ready - d,
            gateway,
            pod: r - p,
            before: d - t0,
            after: active - last_ready,
            first_pass: rev
                .progress
                .phases
                .get(RevisionPhase::Preparing.as_str())
                .map_or(f64::NAN, |t| chrono_ms(*t) - t0),
            gateway_ensure: match (
                rev.progress.gateway_queued_at,
                rev.progress.gateway_applied_at,
            ) {
                (Some(q), Some(a)) => chrono_ms(a) - chrono_ms(q),
                _ => f64::NAN,
            },
        }
    }

    /// Makes the Agent in the hub (and, Gateways on, its Gateway PV).
    async fn create_agent(&self, agent: &str, cluster: usize) -> Result<()> {
        self.placed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(agent.to_owned(), cluster);
        if let Some(g) = &self.gateways {
            // The Agent-owned workspace claims get volumes from the
            // execution clusters' provisioner.
            g.prepare(&self.namespace_id, agent).await?;
        }
        create_agent(
            &self.rest,
            &self.tenant,
            agent,
            &self.hub_clusters[cluster],
            self.gateways.is_some(),
        )
        .await
    }

    /// Deploys `agent` and polls its revision until `active`.
    async fn deploy_one(&self, agent: &str, cluster: usize) -> Result<Sample> {
        self.create_agent(agent, cluster).await?;
        let t0 = now_ms();
        let started = Instant::now();
        self.rest.deploy_current(&self.tenant, agent).await?;
        let limit = Duration::from_secs(self.args.revision_timeout_seconds);
        let (active, rev) = loop {
            let r = self.rest.revision(&self.tenant, agent, 1).await?;
            match r.phase {
                RevisionPhase::Active => break (now_ms(), r),
                RevisionPhase::Failed | RevisionPhase::Stopped | RevisionPhase::Retired => {
                    bail!("agent {agent}: revision 1 {:?}: {:?}", r.phase, r.reason)
                }
                _ => {}
            }
            if started.elapsed() > limit {
                bail!(
                    "agent {agent}: revision 1 not Active after {limit:?} (phase {:?})",
                    r.phase
                );
            }
            tokio::time::sleep(Duration::from_millis(self.args.poll_ms)).await;
        };
        let k = self.kube_times(cluster, agent).await?;
        Ok(self.sample(t0, active, k, &rev))
    }

    async fn latency(&self) -> Result<(Vec<Sample>, Vec<Sample>)> {
        let n = self.args.clusters.len();
        let mut warm = Vec::new();
        for c in 0..n {
            warm.push(
                self.deploy_one(&format!("warm{c}-{}", self.suffix), c)
                    .await?,
            );
        }
        let mut out = Vec::with_capacity(self.args.latency_agents);
        for i in 0..self.args.latency_agents {
            out.push(
                self.deploy_one(&format!("lat{i}-{}", self.suffix), i % n)
                    .await?,
            );
        }
        Ok((warm, out))
    }

    /// One poll round (when the watch stream is gone): Agents whose
    /// revision 1 turned Active since, with the hub's recorded time.
    async fn poll_active(
        &self,
        t0s: &HashMap<String, f64>,
        active: &mut HashMap<String, f64>,
    ) -> Result<()> {
        let agents: List<Agent> = self
            .rest
            .get(&format!("/namespaces/{}/agents", self.tenant))
            .await?;
        for a in agents.items {
            if !t0s.contains_key(&a.name) || active.contains_key(&a.name) {
                continue;
            }
            let r = self.rest.revision(&self.tenant, &a.name, 1).await?;
            match r.phase {
                RevisionPhase::Active => {
                    if let Some(at) = r.progress.phases.get(RevisionPhase::Active.as_str()) {
                        active.insert(a.name.clone(), chrono_ms(*at));
                    }
                }
                RevisionPhase::Failed | RevisionPhase::Stopped => {
                    bail!(
                        "throughput: {} revision 1 {:?}: {:?}",
                        a.name,
                        r.phase,
                        r.reason
                    )
                }
                _ => {}
            }
        }
        Ok(())
    }

    async fn throughput(&self) -> Result<Throughput> {
        let n = self.args.clusters.len();
        let count = self.args.throughput_agents;
        let names: Vec<(String, usize)> = (0..count)
            .map(|i| (format!("tp{i}-{}", self.suffix), i % n))
            .collect();
        // Drafts first (not measured).
        let created: Vec<Result<()>> = futures::stream::iter(names.iter())
            .map(|(a, c)| self.create_agent(a, *c))
            .buffer_unordered(16)
            .collect()
            .await;
        for r in created {
            r?;
        }
        let ensures_before = ensure_totals(&self.metrics).await?;
        // Followed on the watch stream, opened before the first deploy (a
        // poll of 200 revisions would load the hub it measures).
        let mut events = Some(phase_events(&self.rest, &self.tenant).await?);
        let cpu = CpuSpan::start();
        let t_start = now_ms();
        let started = Instant::now();
        let deploys = futures::future::join_all(names.iter().map(|(a, _)| async move {
            let t0 = now_ms();
            let r = self.rest.deploy_current(&self.tenant, a).await;
            (t0, now_ms() - t0, r)
        }))
        .await;
        let mut t0s = HashMap::new();
        let mut post_ms = Vec::new();
        for ((a, _), (t0, took, r)) in names.iter().zip(deploys) {
            r.with_context(|| format!("deploy {a}"))?;
            t0s.insert(a.clone(), t0);
            post_ms.push(took);
        }
        let deployed_in = now_ms() - t_start;
        let limit = Duration::from_secs(self.args.throughput_timeout_seconds);
        // Agent -> the hub's recorded Active time.
        let mut active: HashMap<String, f64> = HashMap::new();
        while active.len() < count {
            if started.elapsed() > limit {
                bail!(
                    "throughput: {} of {count} Active after {limit:?}",
                    active.len()
                );
            }
            let Some(rx) = &mut events else {
                self.poll_active(&t0s, &mut active).await?;
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            match tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
                Ok(Some(ev)) if ev.number == 1 && t0s.contains_key(&ev.agent) => match ev.phase {
                    RevisionPhase::Active => {
                        if let Some(at) = ev.phases.get(RevisionPhase::Active.as_str()) {
                            active.insert(ev.agent, chrono_ms(*at));
                        }
                    }
                    RevisionPhase::Failed | RevisionPhase::Stopped => bail!(
                        "throughput: {} revision 1 {:?}: {:?}",
                        ev.agent,
                        ev.phase,
                        ev.reason
                    ),
                    _ => {}
                },
                Ok(Some(_)) | Err(_) => {}
                Ok(None) => {
                    eprintln!("pipeline-bench: the watch stream ended; polling instead");
                    events = None;
                }
            }
        }
        let cpu = cpu.note();
        let mut samples = Vec::with_capacity(count);
        let mut last_gateway_applied = f64::NAN;
        for (a, c) in &names {
            let k = self.kube_times(*c, a).await?;
            let rev = self.rest.revision(&self.tenant, a, 1).await?;
            if let Some(at) = rev.progress.gateway_applied_at {
                last_gateway_applied = last_gateway_applied.max(chrono_ms(at));
            }
            samples.push(self.sample(t0s[a], active[a], k, &rev));
        }
        let done = sorted(active.values().copied().collect());
        // How fast each spoke turned Harness work into Deployments.
        let apply_rates = {
            let m = self.times.lock().unwrap_or_else(|p| p.into_inner());
            (0..n)
                .map(|c| {
                    let seen: Vec<f64> = names
                        .iter()
                        .filter(|(_, cc)| *cc == c)
                        .filter_map(|(a, _)| m.get(&(c, a.clone()))?.deployment)
                        .collect();
                    let span = seen.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                        - seen.iter().copied().fold(f64::INFINITY, f64::min);
                    (
                        self.args.clusters[c].clone(),
                        seen.len() as f64 / (span / 1000.0),
                    )
                })
                .collect()
        };
        let first = t0s.values().copied().fold(f64::INFINITY, f64::min);
        let last = done.last().copied().unwrap_or(f64::NAN);
        let ensures = ensure_totals(&self.metrics).await?.since(ensures_before);
        let (p10, p90) = (pct(&done, 10.0), pct(&done, 90.0));
        Ok(Throughput {
            samples,
            post_ms: sorted(post_ms),
            deployed_in,
            window_ms: last - first,
            rate: count as f64 / ((last - first) / 1000.0),
            sustained: (0.8 * count as f64) / ((p90 - p10) / 1000.0),
            apply_rates,
            gateways_applied_in: last_gateway_applied - first,
            ensures,
            cpu,
        })
    }
}

struct Throughput {
    samples: Vec<Sample>,
    post_ms: Vec<f64>,
    deployed_in: f64,
    window_ms: f64,
    rate: f64,
    sustained: f64,
    /// Harness Deployments created per second, per cluster.
    apply_rates: Vec<(String, f64)>,
    /// First deploy → the last Gateway applied, ms (NaN: Gateways off).
    gateways_applied_in: f64,
    /// The hub's Gateway ensures during the phase.
    ensures: EnsureTotals,
    /// CPU from the first deploy to the last Active (this process is the
    /// hub, both spokes and the bench's watches).
    cpu: String,
}

fn row(name: &str, v: Vec<f64>, goal: &str) {
    let v = sorted(v);
    println!(
        "| {name:<58} | {:>8.1} | {:>8.1} | {:>8.1} | {goal:<16} |",
        pct(&v, 50.0),
        pct(&v, 99.0),
        v.last().copied().unwrap_or(f64::NAN)
    );
}

fn header(title: &str) {
    println!();
    println!("{title}");
    println!(
        "| {:<58} | {:>8} | {:>8} | {:>8} | {:<16} |",
        "figure (ms)", "p50", "p99", "max", "goal"
    );
    println!(
        "|{}|{}|{}|{}|{}|",
        "-".repeat(60),
        "-".repeat(10),
        "-".repeat(10),
        "-".repeat(10),
        "-".repeat(18)
    );
}

fn sample_rows(s: &[Sample], goal_overhead: &str, conditions: &str, gateways: bool) {
    let col = |f: fn(&Sample) -> f64| s.iter().map(f).collect::<Vec<_>>();
    row(
        "deploy request -> revision Active (total)",
        col(|x| x.total),
        "-",
    );
    if gateways {
        row(
            "Kubernetes: Harness Deployment -> last Pod Ready (H, GW)",
            col(|x| x.kube),
            "-",
        );
        row(
            "  Gateway (control): Deployment -> Pod Ready",
            col(|x| x.gateway),
            "-",
        );
    } else {
        row(
            "Kubernetes: Harness Deployment -> Pod Ready",
            col(|x| x.kube),
            "-",
        );
    }
    row("  Harness Pod created -> Pod Ready", col(|x| x.pod), "-");
    row(
        "clawfed overhead (total - Kubernetes)",
        col(Sample::overhead),
        goal_overhead,
    );
    row(
        "  deploy -> Deployment created (hub, link, spoke apply)",
        col(|x| x.before),
        "-",
    );
    row(
        "    of which deploy -> first pipeline pass (worker pickup)",
        col(|x| x.first_pass),
        "-",
    );
    if gateways {
        row(
            "  Gateway ensure queued -> applied (control, own lane)",
            col(|x| x.gateway_ensure),
            "-",
        );
    }
    row(
        "  last Pod Ready -> Active (spoke report, link, hub pass)",
        col(|x| x.after),
        "-",
    );
    let p50 = |v: Vec<f64>| pct(&sorted(v), 50.0);
    println!(
        "overhead / total at p50: {:.2} ({:.1} of {:.1} ms) [{conditions}]",
        p50(col(Sample::overhead)) / p50(col(|x| x.total)),
        p50(col(Sample::overhead)),
        p50(col(|x| x.total))
    );
}

/// The conditions a figure was measured under, printed beside each verdict.
struct Conditions {
    gateways: bool,
    clusters: String,
    backend: &'static str,
    poll: u64,
}

impl Conditions {
    fn at(&self, at_once: &str) -> String {
        format!(
            "Gateways {}, clusters {}, {at_once}, {}, worker poll {} ms",
            if self.gateways { "on" } else { "off" },
            self.clusters,
            self.backend,
            self.poll
        )
    }
}

fn report(args: &Args, cond: &Conditions, warm: &[Sample], lat: &[Sample], tp: &Throughput) {
    println!();
    println!(
        "pipeline-bench: one in-process hub ({}, worker poll {} ms, {}), {} spokes over mTLS ({}), embedded-openclaw, placement alternating",
        cond.backend,
        cond.poll,
        if cond.gateways {
            format!("Gateways on in {}", args.control)
        } else {
            "Gateways disabled".to_owned()
        },
        args.clusters.len(),
        args.clusters.join(", ")
    );
    let one = cond.at("1 deploy at a time");
    let many = cond.at(&format!("{} deploys at once", tp.samples.len()));
    header(&format!(
        "Latency: {} Agents deployed one at a time (revision GET polled every {} ms)",
        lat.len(),
        args.poll_ms
    ));
    sample_rows(
        lat,
        &format!("overhead p50<={OVERHEAD_GOAL_MS}"),
        &one,
        cond.gateways,
    );
    println!(
        "first deploy per cluster (namespace provisioning, not in the figures above): {}",
        warm.iter()
            .map(|s| format!("{:.0} ms", s.total))
            .collect::<Vec<_>>()
            .join(", ")
    );
    header(&format!(
        "Throughput: {} Agents deployed at once (Active time as recorded by the hub)",
        tp.samples.len()
    ));
    sample_rows(&tp.samples, "-", &many, cond.gateways);
    row("POST deploy response under load", tp.post_ms.clone(), "-");
    println!(
        "all {} deploy requests answered in {:.0} ms; first deploy -> last Active {:.0} ms",
        tp.samples.len(),
        tp.deployed_in,
        tp.window_ms
    );
    println!(
        "revisions/s: {:.1} over the whole window, {:.1} sustained (10% -> 90% of completions) [{many}]",
        tp.rate, tp.sustained
    );
    println!(
        "CPU, first deploy -> last Active: {} (the hub, both spokes, the bench's watches)",
        tp.cpu
    );
    println!(
        "Harness Deployments created per second by each spoke: {}",
        tp.apply_rates
            .iter()
            .map(|(c, r)| format!("{c} {r:.1}/s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The hub's SQL statements over the throughput phase, per revision (the
/// phase includes the bench's own reads of each revision at its end).
fn statement_rows(by_label: &[(String, u64, f64)], revisions: usize) {
    let total: u64 = by_label.iter().map(|(_, n, _)| n).sum();
    println!(
        "hub SQL statements over the throughput phase: {total} ({:.1} per revision); the most frequent (per revision, client seconds in all):",
        total as f64 / revisions as f64
    );
    for (label, n, secs) in by_label.iter().take(25) {
        println!(
            "  {:>7.2}  {secs:>7.2} s  {label}",
            *n as f64 / revisions as f64
        );
    }
}

/// The hub's work items of the whole run by kind and state, per
/// revision of the throughput phase, and how many targets they name.
async fn work_item_rows(url: &str, revisions: usize) -> Result<()> {
    use sqlx::Row as _;
    let mut c = sqlx::AnyConnection::connect(url).await?;
    let rows = sqlx::query(
        "SELECT kind, state, COUNT(*) AS n, COUNT(DISTINCT target) AS targets, \
         CAST(SUM(attempts) AS BIGINT) AS attempts FROM work_items GROUP BY kind, state \
         ORDER BY n DESC",
    )
    .fetch_all(&mut c)
    .await?;
    println!("hub work items of the run (kind, state: per revision, targets, attempts):");
    for r in rows {
        let n: i64 = r.try_get("n")?;
        println!(
            "  {:<20} {:<8} {:>7.2}  {:>5}  {:>6}",
            r.try_get::<String, _>("kind")?,
            r.try_get::<String, _>("state")?,
            n as f64 / revisions as f64,
            r.try_get::<i64, _>("targets")?,
            r.try_get::<Option<i64>, _>("attempts")?.unwrap_or(0)
        );
    }
    c.close().await?;
    Ok(())
}

/// clawfed's throughput beside Kubernetes alone, and the ratio goal.
fn reference_rows(d: &Direct, tp: &Throughput, cond: &Conditions) {
    let gateways = match &d.gateways {
        Some(g) => format!(
            "; at the same time {} Gateways' objects (ServiceAccount, transport Secret, PVC, NetworkPolicy, Service, Deployment; the hub's builders, no route) applied to the control cluster as the hub's ServiceAccount, {} at a time (worker.gatewayBatchSize)",
            g.count, g.concurrency
        ),
        None if cond.gateways => "; no Gateway".to_owned(),
        None => String::new(),
    };
    header(&format!(
        "Kubernetes alone (reference, before clawfed's run): {} Harnesses' objects (ServiceAccount, Secret, Service, Deployment, record Secret{}) applied as the spoke's ServiceAccount, {} at a time per cluster, clusters at once{gateways}",
        d.count,
        if cond.gateways {
            "; no workspace PVC"
        } else {
            ""
        },
        d.concurrency
    ));
    row(
        "first write -> each Harness Pod Ready (ms)",
        d.ready_ms.clone(),
        "-",
    );
    if let Some(g) = &d.gateways {
        row(
            "first write -> each Gateway Pod Ready, control (ms)",
            g.ready_ms.clone(),
            "-",
        );
        row(
            "one Gateway's six applies, control (ms)",
            g.apply_ms.clone(),
            "-",
        );
        println!(
            "Kubernetes alone: all Gateway objects written {:.0} ms, all Gateway Pods Ready {:.0} ms after the first write",
            g.applied_in.as_secs_f64() * 1e3,
            g.ready_in.as_secs_f64() * 1e3
        );
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let e = &tp.ensures;
        println!(
            "Gateways, clawfed beside Kubernetes alone: last Gateway applied {:.0} ms after the first deploy / {:.0} ms after the first write = {:.2}; one Gateway's apply, mean {:.0} ms (gateway.ensure, hub metric: {} ok, {} failed) / {:.0} ms = {:.2} [{} at a time]",
            tp.gateways_applied_in,
            g.applied_in.as_secs_f64() * 1e3,
            tp.gateways_applied_in / (g.applied_in.as_secs_f64() * 1e3),
            e.ok_seconds * 1e3 / e.ok,
            e.ok,
            e.failed,
            mean(&g.apply_ms),
            e.ok_seconds * 1e3 / e.ok / mean(&g.apply_ms),
            g.concurrency
        );
    }
    println!(
        "Kubernetes alone: all Pods{} Ready {:.0} ms after the first write: {:.1} revisions/s",
        if d.gateways.is_some() {
            " (Harness and Gateway)"
        } else {
            ""
        },
        d.ready_in.as_secs_f64() * 1e3,
        d.rate()
    );
    println!(
        "CPU, Kubernetes alone: {} (the direct clients and the bench's watches)",
        d.cpu
    );
    let ratio = tp.rate / d.rate();
    println!(
        "goal ratio >= {RATIO_GOAL}: {} (clawfed {:.1} revisions/s, first deploy -> last Active, / Kubernetes alone {:.1} revisions/s, first write -> last Pod Ready = {ratio:.2}) [{}]",
        if ratio >= RATIO_GOAL {
            "met"
        } else {
            "NOT met"
        },
        tp.rate,
        d.rate(),
        cond.at(&format!("{} deploys at once", tp.samples.len()))
    );
}

// ------------------------------------------------------------------- setup

struct Db {
    url: String,
    /// (admin URL, schema) to drop at the end.
    pg: Option<(String, String)>,
    _dir: tempfile::TempDir,
}

async fn database(postgres: bool) -> Result<Db> {
    let dir = tempfile::tempdir()?;
    if !postgres {
        return Ok(Db {
            url: format!("sqlite://{}", dir.path().join("hub.db").display()),
            pg: None,
            _dir: dir,
        });
    }
    let base = std::env::var("CLAWFED_TEST_DATABASE_URL").context(
        "--postgres needs CLAWFED_TEST_DATABASE_URL (eval \"$(scripts/postgres.sh env)\")",
    )?;
    let schema = format!("pbench_{}", uuid::Uuid::new_v4().simple());
    let mut c = sqlx::PgConnection::connect(&base).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&mut c)
        .await?;
    let sep = if base.contains('?') { '&' } else { '?' };
    Ok(Db {
        url: format!("{base}{sep}options[search_path]={schema}"),
        pg: Some((base, schema)),
        _dir: dir,
    })
}

/// The control cluster's side of a run with Gateways on.
struct GatewayWorld {
    control: TestCluster,
    /// The same Gateway room as the admin, for cleanup after the hub stopped.
    admin: Gateways,
    /// (tenant, agent) of every Gateway this run may have made.
    made: Mutex<Vec<String>>,
    /// The pre-bound PVs of their PVCs.
    pvs: Mutex<Vec<String>>,
}

impl GatewayWorld {
    /// Installs deploy/hub (RBAC, the tests' StorageClass, the edge Gateway)
    /// in `control` and returns the world and the hub's Gateway runtime,
    /// acting as the hub's ServiceAccount.
    async fn start(control: &str) -> Result<(Arc<Self>, Gateways)> {
        let control = kube_env::cluster(control)
            .await
            .with_context(|| format!("control cluster {control} (e2e/cluster.sh up {control})"))?;
        control_env::install_hub(&control).await?;
        let runtime = Gateways::new(
            control_env::hub_client(&control).await?,
            control_env::gateway_config(),
        )?;
        let admin = Gateways::new(control.admin(), control_env::gateway_config())?;
        let world = Arc::new(Self {
            control,
            admin,
            made: Mutex::default(),
            pvs: Mutex::default(),
        });
        Ok((world, runtime))
    }

    /// The PV the Agent's Gateway PVC binds to (the test clusters have no
    /// provisioner); records both for cleanup.
    async fn prepare(&self, namespace_id: &str, agent: &str) -> Result<()> {
        {
            let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
            if !made.iter().any(|id| id == namespace_id) {
                made.push(namespace_id.to_owned());
            }
        }
        let pv = control_env::volume_for(
            &self.control.admin(),
            &control_env::gateway_ns(namespace_id),
            agent,
        )
        .await?;
        self.pvs.lock().unwrap_or_else(|p| p.into_inner()).push(pv);
        Ok(())
    }

    /// Deletes every tenant's Gateway namespace (with its Gateways) and
    /// the PVs.
    async fn cleanup(&self) {
        let made = std::mem::take(&mut *self.made.lock().unwrap_or_else(|p| p.into_inner()));
        for namespace_id in made {
            if let Err(e) = self.admin.delete_namespace(&namespace_id).await {
                eprintln!("deleting the Gateway namespace of {namespace_id}: {e}");
            }
        }
        let pvs = std::mem::take(&mut *self.pvs.lock().unwrap_or_else(|p| p.into_inner()));
        for pv in pvs {
            control_env::delete_volume(&self.control.admin(), &pv).await;
        }
    }
}

struct Spoke {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), clawfed_spoke::link::LinkError>>,
    exec: Arc<Executor>,
    _dir: tempfile::TempDir,
}

async fn run(args: Args) -> Result<()> {
    ensure!(!args.clusters.is_empty(), "--clusters is empty");
    let statement_counter = args.count_statements.then(StatementCounter::install);
    let mut clusters = Vec::new();
    for name in &args.clusters {
        clusters.push(exec_cluster(name).await?);
    }
    // Before the database: a control cluster that is not there fails the
    // run before anything needs removing. Before the reference too: it
    // applies Gateways as the hub's ServiceAccount this installs.
    let (gateway_world, gateways) = match args.gateways {
        GatewayMode::On => {
            let (world, gateways) = GatewayWorld::start(&args.control).await?;
            (Some(world), Some(gateways))
        }
        GatewayMode::Off => (None, None),
    };
    let reference = if args.no_direct {
        None
    } else {
        let d = direct(&args, &clusters, gateway_world.as_deref()).await?;
        println!(
            "Kubernetes alone: {} Harnesses{}, all Pods Ready in {:.1} s",
            d.count,
            d.gateways
                .as_ref()
                .map_or(String::new(), |g| format!(" and {} Gateways", g.count)),
            d.ready_in.as_secs_f64()
        );
        Some(d)
    };
    let db = database(args.postgres).await?;
    let backend = if args.postgres {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    let store: Arc<dyn Store> = Arc::new(store::connect(&db.url).await?);
    let ca_dir = tempfile::tempdir()?;
    let mut config = HubConfig::default();
    config.database.url = db.url.clone();
    config.api.rest_addr = "127.0.0.1:0".parse()?;
    config.api.grpc_addr = "127.0.0.1:0".parse()?;
    config.api.metrics_addr = "127.0.0.1:0".parse()?;
    config.link.addr = "127.0.0.1:0".parse()?;
    config.link.ca_dir = ca_dir.path().to_owned();
    config.pipeline.enabled = true;
    // kwok Pods run no process: none publishes a plugin startup status or
    // answers a data path probe (tunnel-bench measures that path).
    config.pipeline.startup_status = false;
    config.pipeline.path_probe = false;
    config.tunnel.addr = "127.0.0.1:0".parse()?;
    if let Some(ms) = args.worker_poll_ms {
        config.worker.poll_interval_ms = ms;
    }
    let poll = config.worker.poll_interval_ms;
    let cond = Conditions {
        gateways: gateway_world.is_some(),
        clusters: args.clusters.join("+"),
        backend,
        poll,
    };
    // The hub's Gateways derive each revision's transport credential from a
    // key kept in the store, sealed with the hub's secrets key (as
    // `clawfed-hub serve` sets them up).
    let secrets = clawfed_hub::server::load_secrets_key(&config).await?;
    let runtime: Arc<dyn GatewayRuntime> = match gateways {
        Some(g) => {
            Arc::new(g.with_transport(TransportCredentials::load(store.clone(), &secrets).await?))
        }
        None => Arc::new(GatewaysDisabled),
    };
    let hub = clawfed_hub::server::start_with_parts(
        &config,
        store.clone(),
        Handlers::builtin(),
        Some(runtime),
    )
    .await?;
    let minted = auth::mint_token();
    store
        .create_token(&NewToken {
            name: "bench-root".into(),
            namespace: None,
            role: Role::InstallationAdmin,
            hash: minted.hash,
            expires_at: None,
        })
        .await?;
    let rest = HubClient::new(&format!("http://{}", hub.rest_addr), Some(minted.secret))?;
    let metrics = hub.metrics_addr.to_string();
    let link = hub.link.clone().context("hub link")?;
    let hub_url = format!("https://127.0.0.1:{}", link.addr.port());

    let stop_watch = CancellationToken::new();
    let times: Times = Arc::default();
    let mut spokes = Vec::new();
    let mut watches = Vec::new();
    let mut data_plane = None;
    let mut namespace_id = None;
    let placed: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..6];
    let tenant = format!("pb{suffix}");
    let hub_clusters: Vec<String> = args
        .clusters
        .iter()
        .map(|c| format!("{c}-{suffix}"))
        .collect();

    let result = async {
        // Spokes: enroll each with a bootstrap token, wait Online.
        for (c, hub_name) in clusters.iter().zip(&hub_clusters) {
            let client = spoke_client(c).await?;
            let token = rest.bootstrap_token(hub_name).await?;
            let (tx, rx) = tokio::sync::mpsc::channel(4096);
            let exec = Arc::new(Executor::new(client, SpokeConfig::default(), tx));
            let dir = tempfile::tempdir()?;
            let l = Link::new(
                LinkConfig {
                    hub: HubAddress::parse(&hub_url).map_err(anyhow::Error::msg)?,
                    ca_pem: link.ca_pem().to_owned(),
                    cluster_name: hub_name.clone(),
                    bootstrap_token: Some(token),
                    version: "pipeline-bench".into(),
                    capabilities: vec!["applier:kube".into()],
                    backoff_min: Duration::from_millis(50),
                    backoff_max: Duration::from_millis(500),
                },
                Arc::new(FileIdentityStore::new(dir.path())),
                exec.clone(),
                SpokeMetrics::default(),
            );
            let shutdown = CancellationToken::new();
            let task = tokio::spawn(l.run(rx, shutdown.clone()));
            spokes.push(Spoke {
                shutdown,
                task,
                exec,
                _dir: dir,
            });
        }
        let enrolled = Instant::now();
        for name in &hub_clusters {
            loop {
                let c = rest.cluster(name).await;
                if c.is_ok_and(|c| c.connection_state == ConnectionState::Online) {
                    break;
                }
                ensure!(
                    enrolled.elapsed() < Duration::from_secs(60),
                    "spoke {name} not Online after 60 s"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        println!(
            "spokes enrolled and Online in {:.0} ms",
            enrolled.elapsed().as_secs_f64() * 1000.0
        );

        let ns: Namespace = rest
            .call(
                reqwest::Method::POST,
                "/namespaces",
                Some(json!({ "name": tenant })),
            )
            .await?;
        data_plane = Some(ns.data_plane_namespace.clone());
        namespace_id = Some(ns.id.clone());
        let mut synced = Vec::new();
        let mut watched: Vec<(Client, String, Watched)> = clusters
            .iter()
            .enumerate()
            .map(|(i, c)| {
                (
                    c.admin.clone(),
                    ns.data_plane_namespace.clone(),
                    Watched::Harness(i),
                )
            })
            .collect();
        if let Some(g) = &gateway_world {
            watched.push((
                g.control.admin(),
                control_env::gateway_ns(&ns.id),
                Watched::Gateway,
            ));
        }
        for (client, namespace, what) in watched {
            for pods in [false, true] {
                let (tx, rx) = tokio::sync::oneshot::channel();
                watches.push(spawn_watch(
                    (client.clone(), namespace.clone(), what, pods),
                    times.clone(),
                    placed.clone(),
                    tx,
                    stop_watch.clone(),
                ));
                synced.push(rx);
            }
        }
        for rx in synced {
            tokio::time::timeout(Duration::from_secs(30), rx)
                .await
                .context("watch initial list")??;
        }

        let bench = Bench {
            args,
            rest,
            metrics,
            tenant: tenant.clone(),
            namespace_id: namespace_id.clone().context("the tenant was created")?,
            hub_clusters: hub_clusters.clone(),
            times: times.clone(),
            suffix: suffix.to_owned(),
            gateways: gateway_world.clone(),
            placed: placed.clone(),
        };
        let (warm, lat) = bench.latency().await?;
        println!("latency phase done ({} revisions)", lat.len());
        let before = statement_counter.as_ref().map(StatementCounter::snapshot);
        let tp = bench.throughput().await?;
        report(&bench.args, &cond, &warm, &lat, &tp);
        if let Some(d) = &reference {
            reference_rows(d, &tp, &cond);
        }
        if let (Some(counter), Some(before)) = (&statement_counter, &before) {
            statement_rows(
                &statements::since(&counter.snapshot(), before),
                tp.samples.len(),
            );
            work_item_rows(&db.url, tp.samples.len()).await?;
        }
        let p50 = pct(&sorted(lat.iter().map(Sample::overhead).collect()), 50.0);
        println!(
            "goal overhead p50 <= {OVERHEAD_GOAL_MS} ms: {} ({:.1} ms over {} revisions) [{}]",
            if p50 <= OVERHEAD_GOAL_MS {
                "met"
            } else {
                "NOT met"
            },
            p50,
            lat.len(),
            cond.at("1 deploy at a time")
        );
        Ok(())
    }
    .await;

    // Tear down everything this run started or made, whatever happened.
    stop_watch.cancel();
    for w in watches {
        let _ = tokio::time::timeout(Duration::from_secs(5), w).await;
    }
    for s in spokes {
        s.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.task).await;
        s.exec.shutdown();
    }
    tokio::time::timeout(Duration::from_secs(30), hub.stop())
        .await
        .ok();
    if let Some(g) = &gateway_world {
        g.cleanup().await;
    }
    if let Some(ns) = &data_plane {
        for c in &clusters {
            let api: Api<KubeNamespace> = Api::all(c.admin.clone());
            match api.delete(ns, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => eprintln!("deleting namespace {ns} on {}: {e}", c.name),
            }
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        for c in &clusters {
            let api: Api<KubeNamespace> = Api::all(c.admin.clone());
            while Instant::now() < deadline {
                match api.get_opt(ns).await {
                    Ok(None) => break,
                    _ => tokio::time::sleep(Duration::from_millis(250)).await,
                }
            }
            if !matches!(api.get_opt(ns).await, Ok(None)) {
                eprintln!("namespace {ns} on {} still terminating after 120 s", c.name);
            }
        }
    }
    if let Some((base, schema)) = &db.pg
        && let Ok(mut c) = sqlx::PgConnection::connect(base).await
    {
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
            .execute(&mut c)
            .await;
    }
    result
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    if let Err(e) = run(args).await {
        eprintln!("pipeline-bench failed: {e:#}");
        std::process::exit(1);
    }
}
