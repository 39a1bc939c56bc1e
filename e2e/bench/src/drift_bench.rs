//! `drift-bench`: drift repair at scale (issue 13). One spoke (the
//! clawfed-spoke `Executor` and drift `Repairer`, in a child process so its
//! RSS and requests are its own) manages N Harness revisions (default 1,000)
//! in one execution cluster. The parent then injects random drifts with its
//! own client (default 100 per second for 30 s): it deletes a Harness
//! Deployment, Service or ServiceAccount, scales a Deployment to 0, or
//! changes its image. Prints:
//! - repair latency p50/p99: from the drift write's answer to the watch event
//!   in which the parent sees the object back in its desired state
//!   (goal p99 <= 1 s), and drifts not repaired within the grace period,
//! - LIST requests by the spoke during the drift window (periodic LISTs;
//!   goal 0),
//! - apiserver writes by the spoke per repair (its writes in the window
//!   divided by the repairs its metric counted),
//! - spoke RSS at the end of the window (the child alone; goal <= 48 MiB).
//!
//! Usage: `drift-bench [--cluster exec-b] [--revisions 1000] [--rate 100]
//! [--seconds 30]`; the cluster must be up (`e2e/bench/drift-bench.sh`
//! starts and stops exec-b around it).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use clawfed_bench::kubeapi::{Counts, config};
use clawfed_bench::load::{self, IMAGE};
use clawfed_bench::percentile;
use clawfed_proto::labels;
use clawfed_proto::link::v1::Report;
use clawfed_proto::naming::data_plane_namespace;
use clawfed_proto::work::harness::object_name;
use clawfed_proto::work::{WorkSpec, target};
use clawfed_spoke::config::SpokeConfig;
use clawfed_spoke::drift::limit::Budget;
use clawfed_spoke::drift::objects::KINDS;
use clawfed_spoke::drift::{DriftMetrics, Repairer};
use clawfed_spoke::exec::Executor;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use rand::{Rng, SeedableRng};
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

const DRIFTED_IMAGE: &str = "registry.invalid/someone-else:latest";

#[derive(Debug, Parser)]
struct Args {
    /// Cluster name under the e2e clusters dir.
    #[arg(long, default_value = "exec-b")]
    cluster: String,
    /// Harness revisions the spoke manages.
    #[arg(long, default_value_t = 1000)]
    revisions: usize,
    /// Concurrent applies while setting up.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Drifts injected per second.
    #[arg(long, default_value_t = 100)]
    rate: u32,
    /// Length of the drift window.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// After the window: how long a drift may still take to be repaired.
    #[arg(long, default_value_t = 30)]
    grace_seconds: u64,
    /// Seed of the drift sequence.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run as the spoke child (internal).
    #[arg(long)]
    child: Option<String>,
}

/// What the parent does to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum DriftKind {
    DeleteDeployment,
    ScaleToZero,
    ChangeImage,
    DeleteService,
    DeleteServiceAccount,
}

impl DriftKind {
    const ALL: [DriftKind; 5] = [
        DriftKind::DeleteDeployment,
        DriftKind::ScaleToZero,
        DriftKind::ChangeImage,
        DriftKind::DeleteService,
        DriftKind::DeleteServiceAccount,
    ];

    fn object_kind(self) -> &'static str {
        match self {
            DriftKind::DeleteDeployment | DriftKind::ScaleToZero | DriftKind::ChangeImage => {
                "Deployment"
            }
            DriftKind::DeleteService => "Service",
            DriftKind::DeleteServiceAccount => "ServiceAccount",
        }
    }

    fn label(self) -> &'static str {
        match self {
            DriftKind::DeleteDeployment => "delete Deployment",
            DriftKind::ScaleToZero => "scale Deployment to 0",
            DriftKind::ChangeImage => "change Deployment image",
            DriftKind::DeleteService => "delete Service",
            DriftKind::DeleteServiceAccount => "delete ServiceAccount",
        }
    }
}

/// A drift waiting for its repair, keyed by (object kind, name).
#[derive(Debug, Clone)]
struct Pending {
    kind: DriftKind,
    at: Instant,
    /// The uid of the object the drift deleted (a repair is a new object).
    uid: Option<String>,
    /// The resourceVersion the drift wrote (a repair comes after it).
    version: Option<u64>,
    /// False while the drift's write has not answered: nothing seen before
    /// that can be its repair.
    armed: bool,
    /// When the parent's watch delivered the drift itself.
    seen: Option<Instant>,
    /// How long the apiserver took to answer the drift's write, ms.
    write_ms: f64,
}

type Key = (&'static str, String);

/// The times (ms) of `kind` among `times`, sorted for percentiles.
fn sorted_of_kind(times: &[(DriftKind, f64)], kind: DriftKind) -> Vec<f64> {
    let mut of_kind: Vec<f64> = times
        .iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, ms)| *ms)
        .collect();
    of_kind.sort_by(f64::total_cmp);
    of_kind
}

#[derive(Default)]
struct Tracker {
    pending: HashMap<Key, Pending>,
    repaired: Vec<(DriftKind, f64)>,
    /// Drift write answered -> the parent's watch delivered the drift, ms.
    seen: Vec<(DriftKind, f64)>,
    /// The drift writes' own answer times, ms.
    writes: Vec<(DriftKind, f64)>,
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The spoke: applies the namespace and the revisions, runs the repairer,
/// says `SYNCED` once its watches have listed, then answers `START` and
/// `END` on stdin with its counters.
async fn child(args: &Args, id: &str) -> Result<()> {
    // The spoke's own log lines (`RUST_LOG`, e.g. `clawfed_spoke=info`) on
    // stderr; stdout carries the figures.
    if let Ok(filter) = std::env::var("RUST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
    let counts = Arc::new(Counts::default());
    let client = counts.client(config(&args.cluster).await?)?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Report>(8192);
    // Reports go to the hub in a real spoke; here they are drained.
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let exec = Arc::new(Executor::new(client, SpokeConfig::default(), tx));
    let ns = data_plane_namespace(id);
    let n = args.revisions;
    let tenant = load::tenant_of("drift", id);
    let nsw = load::namespace(&tenant, id, n * 3 + 10);
    let r = exec
        .apply(&load::work(
            1,
            target::namespace(id),
            WorkSpec::NamespaceEnsure(nsw),
        ))
        .await?;
    if !r.applied {
        bail!("namespace.ensure: {}", r.reason);
    }
    let started = Instant::now();
    let works = (0..n)
        .map(|i| load::apply(i as u64 + 2, load::harness(&tenant, id, &ns, i)))
        .collect();
    load::apply_all(&exec, works, args.concurrency).await?;
    say(&format!(
        "APPLIED_SECONDS {:.1}",
        started.elapsed().as_secs_f64()
    ));
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = DriftMetrics::register(&mut registry);
    let cancel = CancellationToken::new();
    let repairer = Repairer::scoped(
        exec.clone(),
        metrics.clone(),
        Budget::default(),
        cancel.clone(),
        Some(HashSet::from([ns.clone()])),
    );
    let r = repairer.clone();
    tokio::spawn(async move { r.run().await });
    let deadline = Instant::now() + Duration::from_secs(300);
    while !repairer.synced() {
        if Instant::now() > deadline {
            bail!("the repairer's watches did not list within 300 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    say("SYNCED");
    let repairs = || KINDS.iter().map(|k| metrics.repairs_of(k)).sum::<u64>();
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut start = None;
    while let Some(line) = lines.next_line().await? {
        match line.as_str() {
            "START" => start = Some((counts.snapshot(), repairs())),
            "END" => {
                let (s0, r0) = start.context("END before START")?;
                let s1 = counts.snapshot();
                say(&format!("WINDOW_WRITES {}", s1.writes - s0.writes));
                say(&format!("WINDOW_LISTS {}", s1.lists - s0.lists));
                say(&format!("WINDOW_GETS {}", s1.gets - s0.gets));
                say(&format!("WINDOW_REPAIRS {}", repairs() - r0));
                say(&format!("STARTUP_LISTS {}", s0.lists));
                say(&format!("WATCHES {}", s1.watches));
                let by_kind: Vec<String> = KINDS
                    .iter()
                    .map(|k| format!("{k}={}", metrics.repairs_of(k)))
                    .collect();
                say(&format!("REPAIRS_BY_KIND {}", by_kind.join(",")));
                let mut text = String::new();
                prometheus_client::encoding::text::encode(&mut text, &registry)?;
                let q = |q| quantile_bound(&text, "clawfed_spoke_drift_repair_seconds", q);
                say(&format!(
                    "SPOKE_REPAIR {} {}",
                    q(0.5).map_or("?".into(), |b| format!("{}", b * 1000.0)),
                    q(0.99).map_or("?".into(), |b| format!("{}", b * 1000.0))
                ));
                say("DONE");
            }
            _ => {}
        }
    }
    cancel.cancel();
    exec.shutdown();
    Ok(())
}

/// The upper bound of the histogram bucket holding quantile `q` of
/// `name` in Prometheus text `text` (the bucket's resolution, not exact).
fn quantile_bound(text: &str, name: &str, q: f64) -> Option<f64> {
    let buckets = clawfed_bench::fleet::histogram_buckets(text, name);
    let total = buckets.last()?.1;
    if total == 0.0 {
        return None;
    }
    buckets
        .iter()
        .find(|(_, n)| *n >= q * total)
        .map(|(le, _)| *le)
}

fn version(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

/// Whether `obj` (seen by the watch) is the repair of `p`.
fn repairs<K: Resource>(obj: &K, p: &Pending, restored: impl Fn(&K) -> bool) -> bool {
    let meta = obj.meta();
    if !p.armed || meta.deletion_timestamp.is_some() {
        return false;
    }
    match (&p.uid, p.version) {
        (Some(uid), _) => meta.uid.as_deref() != Some(uid.as_str()),
        (None, Some(v)) => version(meta).is_some_and(|have| have > v) && restored(obj),
        (None, None) => restored(obj),
    }
}

/// Whether the watch event `obj` is the drift `p` wrote.
fn is_the_drift<K: Resource>(obj: &K, p: &Pending, deleted: bool) -> bool {
    let meta = obj.meta();
    match (&p.uid, p.version) {
        (Some(uid), _) => {
            (deleted || meta.deletion_timestamp.is_some()) && meta.uid.as_deref() == Some(uid)
        }
        (None, Some(v)) => version(meta) == Some(v),
        (None, None) => false,
    }
}

fn image_of(d: &Deployment) -> Option<&str> {
    d.spec
        .template
        .spec
        .as_ref()?
        .containers
        .first()?
        .image
        .as_deref()
}

/// Watches `K` in `ns` and settles the pending drifts it sees repaired.
fn watch_repairs<K>(
    client: Client,
    ns: &str,
    kind: &'static str,
    tracker: Arc<Mutex<Tracker>>,
    restored: fn(&K) -> bool,
) -> tokio::task::JoinHandle<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let api: Api<K> = Api::namespaced(client, ns);
    let cfg =
        watcher::Config::default().labels(&format!("{}={}", labels::MANAGED_BY, labels::MANAGER));
    tokio::spawn(async move {
        let mut events = watcher(api, cfg).boxed();
        while let Some(ev) = events.next().await {
            let (obj, deleted) = match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (o, false),
                Ok(watcher::Event::Delete(o)) => (o, true),
                _ => continue,
            };
            let now = Instant::now();
            let key = (kind, obj.name_any());
            let mut t = tracker.lock().unwrap_or_else(|p| p.into_inner());
            let Some(p) = t.pending.get_mut(&key) else {
                continue;
            };
            // The drift itself reaching this watch: the watch's own delay,
            // which the spoke's watch has too.
            if p.armed && p.seen.is_none() && is_the_drift(&obj, p, deleted) {
                p.seen = Some(now);
            }
            if deleted || !repairs(&obj, p, restored) {
                continue;
            }
            if let Some(p) = t.pending.remove(&key) {
                let ms = |t: Instant| t.duration_since(p.at).as_secs_f64() * 1000.0;
                t.repaired.push((p.kind, ms(now)));
                t.writes.push((p.kind, p.write_ms));
                if let Some(seen) = p.seen {
                    t.seen.push((p.kind, ms(seen)));
                }
            }
        }
    })
}

/// Writes one drift; returns what its repair must differ from.
async fn drift(client: &Client, ns: &str, kind: DriftKind, name: &str) -> Result<Pending> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let by = PatchParams {
        field_manager: Some("drift-bench".into()),
        ..Default::default()
    };
    // When the drift's write went out (after any read before it).
    let sent = Mutex::new(Instant::now());
    let at_answer = |uid: Option<String>, version: Option<u64>| Pending {
        kind,
        at: Instant::now(),
        write_ms: Instant::now()
            .duration_since(*sent.lock().unwrap_or_else(|p| p.into_inner()))
            .as_secs_f64()
            * 1000.0,
        uid,
        version,
        armed: true,
        seen: None,
    };
    Ok(match kind {
        DriftKind::DeleteDeployment => {
            let uid = deployments.get(name).await?.uid();
            *sent.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
            deployments
                .delete(name, &DeleteParams::background())
                .await?;
            at_answer(uid, None)
        }
        DriftKind::DeleteService => {
            let api: Api<Service> = Api::namespaced(client.clone(), ns);
            let uid = api.get(name).await?.uid();
            *sent.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
            api.delete(name, &DeleteParams::background()).await?;
            at_answer(uid, None)
        }
        DriftKind::DeleteServiceAccount => {
            let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
            let uid = api.get(name).await?.uid();
            *sent.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
            api.delete(name, &DeleteParams::background()).await?;
            at_answer(uid, None)
        }
        DriftKind::ScaleToZero => {
            let d = deployments
                .patch(
                    name,
                    &by,
                    &Patch::Merge(serde_json::json!({"spec": {"replicas": 0}})),
                )
                .await?;
            at_answer(None, version(&d.metadata))
        }
        DriftKind::ChangeImage => {
            let container = clawfed_spoke::apply::harness::CONTAINER;
            let d = deployments
                .patch(
                    name,
                    &by,
                    &Patch::Strategic(serde_json::json!({"spec": {"template": {"spec": {
                        "containers": [{"name": container, "image": DRIFTED_IMAGE}]
                    }}}})),
                )
                .await?;
            at_answer(None, version(&d.metadata))
        }
    })
}

async fn parent(args: &Args) -> Result<()> {
    let id = format!("drift-bench-{}", uuid::Uuid::new_v4().simple());
    let ns = data_plane_namespace(&id);
    let client = Client::try_from(config(&args.cluster).await?)?;
    let exe = std::env::current_exe()?;
    let mut child = std::process::Command::new(exe)
        .args(["--cluster", &args.cluster])
        .args(["--revisions", &args.revisions.to_string()])
        .args(["--concurrency", &args.concurrency.to_string()])
        .args(["--child", &id])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let pid = child.id();
    let mut stdin = child.stdin.take().context("child stdin")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let (line_tx, mut line_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut figures: BTreeMap<String, String> = BTreeMap::new();
    let mut expect = async |word: &str, figures: &mut BTreeMap<String, String>| -> Result<()> {
        while let Some(line) = line_rx.recv().await {
            if line == word {
                return Ok(());
            }
            if let Some((k, v)) = line.split_once(' ') {
                figures.insert(k.into(), v.into());
            }
        }
        bail!("the spoke child ended before {word}")
    };
    expect("SYNCED", &mut figures).await?;

    let tracker = Arc::new(Mutex::new(Tracker::default()));
    let watches = [
        watch_repairs::<Deployment>(client.clone(), &ns, "Deployment", tracker.clone(), |d| {
            d.spec.replicas == Some(1) && image_of(d) == Some(IMAGE)
        }),
        watch_repairs::<Service>(client.clone(), &ns, "Service", tracker.clone(), |_| true),
        watch_repairs::<ServiceAccount>(
            client.clone(),
            &ns,
            "ServiceAccount",
            tracker.clone(),
            |_| true,
        ),
    ];
    // The parent's watches list first: a repair is only seen after that.
    tokio::time::sleep(Duration::from_secs(2)).await;

    writeln!(stdin, "START")?;
    stdin.flush()?;
    let cpu_start = clawfed_bench::procfs::cpu_secs(pid);
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let interval = Duration::from_secs_f64(1.0 / f64::from(args.rate.max(1)));
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let window = Instant::now();
    let mut injected: BTreeMap<DriftKind, u64> = BTreeMap::new();
    let mut failed = 0u64;
    let mut inflight = futures::stream::FuturesUnordered::new();
    while window.elapsed() < Duration::from_secs(args.seconds) {
        tokio::select! {
            _ = tick.tick() => {
                let kind = DriftKind::ALL[rng.random_range(0..DriftKind::ALL.len())];
                let i = rng.random_range(0..args.revisions);
                let name = object_name(&format!("a{i:04}"), 1);
                let key = (kind.object_kind(), name.clone());
                // One drift at a time per object, so each latency is one
                // drift's repair.
                let busy = {
                    let mut t = tracker.lock().unwrap_or_else(|p| p.into_inner());
                    let busy = t.pending.contains_key(&key);
                    if !busy {
                        // Held until the write answers (a repair cannot
                        // come earlier); replaced then.
                        t.pending.insert(key.clone(), Pending { kind, at: Instant::now(), uid: None, version: None, armed: false, seen: None, write_ms: 0.0 });
                    }
                    busy
                };
                if busy {
                    continue;
                }
                let (client, ns, tracker) = (client.clone(), ns.clone(), tracker.clone());
                inflight.push(async move {
                    let r = drift(&client, &ns, kind, &name).await;
                    let mut t = tracker.lock().unwrap_or_else(|p| p.into_inner());
                    match r {
                        Ok(p) => {
                            t.pending.insert(key, p);
                            Ok(kind)
                        }
                        Err(e) => {
                            t.pending.remove(&key);
                            Err(e)
                        }
                    }
                });
            }
            Some(done) = inflight.next(), if !inflight.is_empty() => match done {
                Ok(kind) => *injected.entry(kind).or_default() += 1,
                Err(_) => failed += 1,
            },
        }
    }
    while let Some(done) = inflight.next().await {
        match done {
            Ok(kind) => *injected.entry(kind).or_default() += 1,
            Err(_) => failed += 1,
        }
    }
    let window_secs = window.elapsed().as_secs_f64();
    let spoke_cpu = clawfed_bench::procfs::cpu_secs(pid) - cpu_start;
    let grace = Instant::now() + Duration::from_secs(args.grace_seconds);
    while Instant::now() < grace {
        if tracker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pending
            .is_empty()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    writeln!(stdin, "END")?;
    stdin.flush()?;
    expect("DONE", &mut figures).await?;
    let rss = clawfed_bench::procfs::rss_kib(pid).ok();
    drop(stdin);
    let _ = child.wait();
    for w in watches {
        w.abort();
    }
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::background())
        .await;

    let t = tracker.lock().unwrap_or_else(|p| p.into_inner());
    let mut all: Vec<f64> = t.repaired.iter().map(|(_, ms)| *ms).collect();
    all.sort_by(f64::total_cmp);
    let total: u64 = injected.values().sum();
    let fig = |k: &str| figures.get(k).map_or("?".to_string(), Clone::clone);
    let num = |k: &str| fig(k).parse::<f64>().unwrap_or(f64::NAN);
    let p99 = percentile(&all, 99.0);
    let mut writes: Vec<f64> = t.writes.iter().map(|(_, ms)| *ms).collect();
    writes.sort_by(f64::total_cmp);
    let mut seen_all: Vec<f64> = t.seen.iter().map(|(_, ms)| *ms).collect();
    seen_all.sort_by(f64::total_cmp);
    let lists = num("WINDOW_LISTS");
    let rss_mib = rss.map_or(f64::NAN, |k| k as f64 / 1024.0);
    println!(
        "drift-bench: {} Harness revisions, one spoke, cluster {}, seed {}",
        args.revisions, args.cluster, args.seed
    );
    println!(
        "  set-up: applied in {} s; watches listed (lists at start-up: {})",
        fig("APPLIED_SECONDS"),
        fig("STARTUP_LISTS")
    );
    println!(
        "  drifts injected           {total} in {window_secs:.1} s ({:.1}/s; goal rate {}/s), {failed} writes failed",
        total as f64 / window_secs,
        args.rate
    );
    for (kind, n) in &injected {
        let lat = sorted_of_kind(&t.repaired, *kind);
        let seen = sorted_of_kind(&t.seen, *kind);
        println!(
            "    {:<24} {n:>5}  repair p50 {:>7.1} ms  p99 {:>7.1} ms   (the drift itself seen by the parent's watch: p50 {:>7.1} ms  p99 {:>7.1} ms)",
            kind.label(),
            percentile(&lat, 50.0),
            percentile(&lat, 99.0),
            percentile(&seen, 50.0),
            percentile(&seen, 99.0)
        );
    }
    println!(
        "  repaired                  {} of {total}; not repaired within {} s of the window's end: {}",
        all.len(),
        args.grace_seconds,
        t.pending.len()
    );
    println!(
        "  repair latency            p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (goal p99 <= 1000 ms: {})",
        percentile(&all, 50.0),
        p99,
        all.last().copied().unwrap_or(f64::NAN),
        verdict(p99 <= 1000.0 && t.pending.is_empty())
    );
    println!(
        "  Kubernetes alone, same load: the drift writes answered in p50 {:.1} ms, p99 {:.1} ms; the parent's watch delivered the drifts in p50 {:.1} ms, p99 {:.1} ms (a repair needs one delivery to the spoke, one write, one delivery back)",
        percentile(&writes, 50.0),
        percentile(&writes, 99.0),
        percentile(&seen_all, 50.0),
        percentile(&seen_all, 99.0)
    );
    let spoke = fig("SPOKE_REPAIR");
    let (s50, s99) = spoke.split_once(' ').unwrap_or(("?", "?"));
    println!(
        "  the spoke's own share     p50 <= {s50} ms, p99 <= {s99} ms: clawfed_spoke_drift_repair_seconds, from the watch event showing the drift to the repair's answer (bucket bounds)"
    );
    println!(
        "  spoke CPU in the window   {spoke_cpu:.1} s in {window_secs:.1} s ({:.0}% of one core; the machine has {})",
        100.0 * spoke_cpu / window_secs,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "  spoke LISTs in the window {lists} (goal 0: {}); watches opened in all {}",
        verdict(lists == 0.0),
        fig("WATCHES")
    );
    let writes = num("WINDOW_WRITES");
    let repairs = num("WINDOW_REPAIRS");
    println!(
        "  spoke writes per repair   {:.2} ({writes} writes / {repairs} repairs counted by clawfed_spoke_drift_repairs_total; by kind: {})",
        writes / repairs,
        fig("REPAIRS_BY_KIND")
    );
    println!(
        "  spoke GETs in the window  {} (re-reads of record and object before each repair)",
        fig("WINDOW_GETS")
    );
    println!(
        "  spoke RSS                 {rss_mib:.1} MiB at {} managed revisions (goal <= 48 MiB: {})",
        args.revisions,
        verdict(rss_mib <= 48.0)
    );
    println!(
        "  build                     {}",
        clawfed_bench::profile_of(&std::env::current_exe()?)
    );
    Ok(())
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    match &args.child {
        Some(id) => child(&args, id).await,
        None => parent(&args).await,
    }
}
