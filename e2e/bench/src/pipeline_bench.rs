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
//! 3. Drain (issue 33): `--drain-agents` Agents put on the first cluster,
//!    which is then drained at `--drain-parallelism`; the drain's wall
//!    time and each Agent's move time.
//! 4. Failover (issue 33): `--failover-agents` Agents with
//!    `failover.afterSeconds` on the first cluster, whose spoke (its link
//!    through a proxy in this process) is then cut off from the hub; each
//!    Agent's cut → active elsewhere, beside the contract's periods.
//!
//! Every verdict line names its conditions (Gateways, clusters, how many
//! deploys at once, backend, worker poll).
//!
//! Exits 1 when a revision fails or anything times out. Everything it makes
//! (hub, spokes, data-plane namespaces, Gateways and their PVs, the
//! PostgreSQL schema) is removed at the end; the spoke RBAC of `deploy/spoke` stays installed, as the tests
//! leave it. `e2e/bench/pipeline-bench.sh` starts the clusters if needed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, ensure};
use clap::Parser;
use clawfed_bench::statements::{self, StatementCounter};
use clawfed_hub::client::HubClient;
use clawfed_hub::config::Config as HubConfig;
use clawfed_hub::gateway::TransportCredentials;
use clawfed_hub::model::{ConnectionState, Namespace};
use clawfed_hub::store::{self, Store};
use clawfed_hub::worker::Handlers;
use clawfed_hub::worker::rollout::{GatewayRuntime, GatewaysDisabled};
use clawfed_spoke::config::SpokeConfig;
use clawfed_spoke::exec::Executor;
use clawfed_spoke::link::identity::FileIdentityStore;
use clawfed_spoke::link::tls::HubAddress;
use clawfed_spoke::link::{Link, LinkConfig, SpokeMetrics};
use clawfed_tests::control_env;
use k8s_openapi::api::core::v1::Namespace as KubeNamespace;
use kube::api::DeleteParams;
use kube::{Api, Client};
use serde_json::json;
use sqlx::Connection;
use tokio_util::sync::CancellationToken;

// A bin root's `mod part;` would resolve to src/part.rs, beside the other
// benches: this bench's parts live in pipeline_bench/, named by path.
#[path = "pipeline_bench/clusters.rs"]
mod clusters;
#[path = "pipeline_bench/database.rs"]
mod database;
#[path = "pipeline_bench/direct.rs"]
mod direct;
#[path = "pipeline_bench/drain.rs"]
mod drain;
#[path = "pipeline_bench/failover.rs"]
mod failover;
#[path = "pipeline_bench/gateway_world.rs"]
mod gateway_world;
#[path = "pipeline_bench/hub_rest.rs"]
mod hub_rest;
#[path = "pipeline_bench/kube_watch.rs"]
mod kube_watch;
#[path = "pipeline_bench/phases.rs"]
mod phases;
#[path = "pipeline_bench/report.rs"]
mod report;

use clusters::{exec_cluster, spoke_client};
use database::database;
use direct::direct;
use gateway_world::GatewayWorld;
use kube_watch::{Times, Watched, spawn_watch};
use phases::{Bench, Sample};
use report::{Conditions, reference_rows, report, statement_rows, work_item_rows};

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
    /// Agents put on the first cluster and then moved away by draining
    /// it (0 skips the drain phase).
    #[arg(long, default_value_t = 50)]
    drain_agents: usize,
    /// How many Agents the drain moves at once.
    #[arg(long, default_value_t = 10)]
    drain_parallelism: u32,
    /// Agents with failover put on the first cluster, whose spoke is then
    /// partitioned from the hub (0 skips the failover phase).
    #[arg(long, default_value_t = 50)]
    failover_agents: usize,
    /// Their `failover.afterSeconds`.
    #[arg(long, default_value_t = 10)]
    failover_after_seconds: u32,
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

use clawfed_bench::percentile as pct;

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

// ------------------------------------------------------------------- setup

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
    let admin_secret = clawfed_bench::fleet::mint_admin_token(store.as_ref(), "bench-root").await?;
    let rest = HubClient::new(&format!("http://{}", hub.rest_addr), Some(admin_secret))?;
    let metrics = hub.metrics_addr.to_string();
    let link = hub.link.clone().context("hub link")?;
    let hub_url = format!("https://127.0.0.1:{}", link.addr.port());

    let stop_watch = CancellationToken::new();
    let times: Times = Arc::default();
    let mut spokes = Vec::new();
    let mut partition: Option<clawfed_tests::proxy::Proxy> = None;
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
        // Spokes: enroll each with a bootstrap token, wait Online. The
        // first reaches the hub through a proxy the failover phase cuts.
        for (i, (c, hub_name)) in clusters.iter().zip(&hub_clusters).enumerate() {
            let hub_url = match i == 0 && args.failover_agents > 0 {
                true => {
                    let proxy = clawfed_tests::proxy::Proxy::start(link.addr.port()).await?;
                    let url = format!("https://127.0.0.1:{}", proxy.port);
                    partition = Some(proxy);
                    url
                }
                false => hub_url.clone(),
            };
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
        if bench.args.drain_agents > 0 {
            let d = bench
                .drain(
                    bench.args.drain_agents,
                    bench.args.drain_parallelism,
                    Duration::from_secs(bench.args.throughput_timeout_seconds),
                )
                .await?;
            println!(
                "drain: {} Agents moved off {} at parallelism {}: drain {:.1} s (hub's start to end), \
                 per-Agent move (move created to Active, the stop on {} confirmed in between) \
                 p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms [{}]",
                d.agents,
                d.from,
                d.parallelism,
                d.total_ms / 1000.0,
                d.from,
                pct(&d.moves_ms, 50.0),
                pct(&d.moves_ms, 99.0),
                d.moves_ms.last().copied().unwrap_or_default(),
                cond.at(&format!("{} moved at once", d.parallelism))
            );
        }
        if let Some(proxy) = &partition {
            let f = bench
                .failover(
                    proxy,
                    bench.args.failover_agents,
                    bench.args.failover_after_seconds,
                    Duration::from_secs(bench.args.throughput_timeout_seconds),
                )
                .await?;
            report_failover(&f, &cond);
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

/// The failover phase's figures, beside the contract's periods, and its
/// goal: every Agent active elsewhere within the hub's period, plus one
/// renewal interval (the last renewal may be that old at the cut), plus
/// 10 s to deploy it again.
fn report_failover(f: &failover::FailedOver, cond: &Conditions) {
    let periods = clawfed_proto::failover::periods(f.after_seconds);
    let p99 = pct(&f.times_ms, 99.0);
    let renew = periods.fence_after / 4;
    let bound = periods.replace_after + renew + Duration::from_secs(10);
    println!(
        "failover: {} Agents (failover.afterSeconds {}) cut off on {}: cut -> active elsewhere \
         p50 {:.1} s, p99 {:.1} s, max {:.1} s; the spoke fences {:.1} s and the hub moves {:.1} s \
         after the last renewal (renewed every {:.1} s); every fenced revision retired {:.1} s \
         after the cut, the partition healed [{}]",
        f.agents,
        f.after_seconds,
        f.from,
        pct(&f.times_ms, 50.0) / 1000.0,
        p99 / 1000.0,
        f.times_ms.last().copied().unwrap_or_default() / 1000.0,
        periods.fence_after.as_secs_f64(),
        periods.replace_after.as_secs_f64(),
        renew.as_secs_f64(),
        f.retired_ms / 1000.0,
        cond.at(&format!("{} cut off at once", f.agents))
    );
    println!(
        "goal failover p99 <= hub period + renewal interval + 10 s ({:.1} s): {} ({:.1} s) [{}]",
        bound.as_secs_f64(),
        if p99 <= bound.as_secs_f64() * 1000.0 {
            "met"
        } else {
            "NOT met"
        },
        p99 / 1000.0,
        cond.at(&format!("{} Agents", f.agents))
    );
}
