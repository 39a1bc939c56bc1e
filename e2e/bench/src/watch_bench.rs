//! The watch API under load (issue 15): `--watchers` concurrent watchers
//! (Server-Sent Events over loopback, `--grpc-percent` of them gRPC
//! `AdminService.Watch` streams, each watcher on its own connection) while
//! events flow at `--rate` per second. The hub is the release
//! `clawfed-hub serve`, a child process, so its RSS and CPU are its own.
//!
//! The events are real: readiness verdicts that `--spokes` spokes send
//! over the link. Every spoke is the product's own
//! `clawfed_spoke::link::Link` (enrolled with a bootstrap token, mTLS,
//! Hello, heartbeats); this program feeds readiness observations into
//! its report channel, as the spoke's executor does. The hub stores each
//! report, appends its `readiness` event to the durable log and fans it
//! out; the targets the reports name are Harness work put in the
//! clusters' outboxes first (the hub refuses reports on work it never
//! sent). Each observation's reason carries its send time, so a watcher
//! measures send (into the spoke's link) -> received latency; a tenth of
//! the watchers also measure the event's commit time (`at`, taken in the
//! transaction that appends it) -> received.
//!
//! Phases: warm-up under load; the same load with no watcher (hub CPU and
//! RSS: the baseline); the watchers connect, settle, and the same load is
//! measured again. RSS per watcher is (RSS with the watchers - baseline)
//! / watchers; CPU per 1,000 events delivered is the hub's CPU in the
//! measured window over the events all watchers received in it (and, net
//! of the baseline, what delivery alone costs). The generator and the
//! watchers run in this process on the same cores: their CPU is printed.
//!
//! `cargo build --release -p clawfed-bench --bin watch-bench -p clawfed-hub --bin clawfed-hub &&
//!  "$CARGO_TARGET_DIR"/release/watch-bench [--postgres]`

#[path = "watch_bench/histogram.rs"]
mod histogram;
#[path = "watch_bench/hub.rs"]
mod hub;
#[path = "watch_bench/load.rs"]
mod load;
#[path = "watch_bench/measure.rs"]
mod measure;
#[path = "watch_bench/tally.rs"]
mod tally;
#[path = "watch_bench/watchers.rs"]
mod watchers;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use clawfed_bench::procfs::rss_kib;
use clawfed_hub::store::{self, Store};
use clawfed_spoke::link::identity::MemoryIdentityStore;
use clawfed_spoke::link::tls::HubAddress;
use clawfed_spoke::link::{Link, LinkConfig, SpokeMetrics};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use clawfed_bench::hubconf::spawn_hub;
use histogram::Histogram;
use hub::{audit, hub_config};
use load::{AckAll, generate};
use measure::{measure, met, wait_for};
use tally::Tally;
use watchers::{grpc_watcher, sse_watcher};

/// What an observation's reason starts with; its send time follows.
const MARK: &str = "watch-bench ";

#[derive(Debug, Parser)]
#[command(name = "watch-bench")]
struct Args {
    /// Concurrent watchers.
    #[arg(long, default_value_t = 1_000)]
    watchers: usize,
    /// Percent of the watchers that use gRPC `Watch` (the rest SSE).
    #[arg(long, default_value_t = 20)]
    grpc_percent: usize,
    /// Offered events per second.
    #[arg(long, default_value_t = 1_000)]
    rate: u64,
    /// Seconds each phase is measured.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Seconds of load before the first measurement.
    #[arg(long, default_value_t = 5)]
    warmup_seconds: u64,
    /// Seconds between the last watcher connecting and the measurement.
    #[arg(long, default_value_t = 3)]
    settle_seconds: u64,
    /// Spokes sending the reports.
    #[arg(long, default_value_t = 4)]
    spokes: usize,
    /// Harness targets the reports are about (spread over the spokes).
    #[arg(long, default_value_t = 100)]
    targets: usize,
    /// Use a fresh database on the PostgreSQL server at
    /// CLAWFED_TEST_DATABASE_URL instead of SQLite.
    #[arg(long)]
    postgres: bool,
    /// The hub binary (default: `clawfed-hub` next to this binary).
    #[arg(long)]
    hub_bin: Option<PathBuf>,
    /// The hub's `watch.batchMs` (unset: the hub's default; 0 turns the
    /// gathering of commits into bursts off).
    #[arg(long)]
    batch_ms: Option<u64>,
    /// Goal: hub RSS per watcher, KiB.
    #[arg(long, default_value_t = 32.0)]
    goal_rss_kib: f64,
    /// Goal: p99 delivery latency, ms.
    #[arg(long, default_value_t = 100.0)]
    goal_p99_ms: f64,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    clawfed_bench::cli::verdict_exit("watch-bench", run(Args::parse()).await, 2)
}

fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

async fn run(a: Args) -> anyhow::Result<bool> {
    if a.watchers == 0 || a.targets == 0 || a.spokes == 0 || a.rate == 0 {
        bail!("--watchers, --targets, --spokes and --rate must be at least 1");
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let hub_bin = clawfed_bench::hub_bin_built_by(
        a.hub_bin.clone(),
        "cargo build --release -p clawfed-hub --bin clawfed-hub",
    )?;
    let dir = tempfile::tempdir()?;
    let (db_url, pg_name) =
        clawfed_bench::pg::hub_database(a.postgres, dir.path(), "watch").await?;
    let result = bench(&a, &hub_bin, dir.path(), &db_url).await;
    if let Some(name) = &pg_name {
        clawfed_bench::pg::drop_database(name).await;
    }
    result
}

async fn bench(a: &Args, hub_bin: &Path, dir: &Path, db_url: &str) -> anyhow::Result<bool> {
    // Setup straight in the store, as `clawfed-hub token create` and
    // `clawfed-hub cluster token create` do: an admin token, one bootstrap
    // token per spoke, the CA.
    let store: Arc<dyn Store> = Arc::new(store::connect(db_url).await?);
    let token = clawfed_bench::fleet::mint_admin_token(store.as_ref(), "watch-bench").await?;
    let ca = clawfed_hub::link::ca::CertificateAuthority::load_or_create(&dir.join("ca"))?;
    let ca_pem = ca.ca_pem().to_owned();
    drop(ca);
    let names: Vec<String> = (0..a.spokes).map(|i| format!("watch-{i:02}")).collect();
    let bootstrap =
        clawfed_bench::fleet::mint_tokens_as(store.as_ref(), &names, "watch-bench", audit).await?;

    let config = hub_config(dir, db_url, a.batch_ms)?;
    let log = dir.join("hub.log");
    let mut hub = spawn_hub(hub_bin, &config, &log).await?;
    println!(
        "watch-bench: hub pid {} rest {} grpc {} (log {})",
        hub.pid,
        hub.rest,
        hub.grpc,
        log.display()
    );

    // A tenant for the reports' events, through the REST API.
    let http = reqwest::Client::new();
    let ns: serde_json::Value = http
        .post(format!("{}/api/v1/namespaces", hub.rest))
        .bearer_auth(&token)
        .json(&serde_json::json!({"name": "watch-bench"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let ns_id = ns["id"].as_str().context("namespace id")?.to_owned();

    // The spokes: real Links, enrolled with their bootstrap tokens.
    let stop_links = CancellationToken::new();
    let mut links = tokio::task::JoinSet::new();
    let mut statuses = Vec::new();
    let mut reports = Vec::new();
    for (name, secret) in names.iter().zip(bootstrap) {
        let link = Link::new(
            LinkConfig {
                hub: HubAddress::parse(&hub.link).map_err(anyhow::Error::msg)?,
                ca_pem: ca_pem.clone(),
                cluster_name: name.clone(),
                bootstrap_token: Some(secret),
                version: "watch-bench".into(),
                capabilities: vec!["applier:bench".into()],
                backoff_min: Duration::from_millis(100),
                backoff_max: Duration::from_secs(2),
            },
            Arc::new(MemoryIdentityStore::new()),
            Arc::new(AckAll),
            SpokeMetrics::default(),
        );
        statuses.push(link.status());
        let (tx, rx) = mpsc::channel(4096);
        reports.push(tx);
        let stop = stop_links.clone();
        links.spawn(async move {
            if let Err(e) = link.run(rx, stop).await {
                eprintln!("watch-bench: link ended: {e}");
            }
        });
    }
    if !wait_for(Duration::from_secs(60), || {
        statuses.iter().all(|s| s.borrow().connected)
    })
    .await
    {
        bail!(
            "the spokes did not all connect within 60 s (see {})",
            log.display()
        );
    }

    // The Harness targets the reports are about, put in the spokes'
    // outboxes (the hub's own dispatch path then sends them).
    let mut targets = Vec::with_capacity(a.targets);
    for i in 0..a.targets {
        let cluster = store.get_cluster(&names[i % a.spokes]).await?;
        let target = clawfed_proto::work::target::harness(&ns_id, &format!("w{i:04}"), 1);
        store
            .outbox_put(&cluster.id, &target, "bench.noop", 1, "{}")
            .await?;
        targets.push(target);
    }

    let sent = Arc::new(AtomicU64::new(0));
    let stop_load = CancellationToken::new();
    let load = tokio::spawn(generate(
        a.rate,
        targets,
        reports,
        sent.clone(),
        stop_load.clone(),
    ));

    // Warm-up, then the baseline: the same load, no watcher.
    tokio::time::sleep(Duration::from_secs(a.warmup_seconds)).await;
    let base = measure(store.as_ref(), hub.pid, a.seconds).await?;
    let rss0 = rss_kib(hub.pid)?;
    println!(
        "watch-bench: baseline done: {:.0} events/s, hub RSS {rss0} KiB",
        base.events as f64 / base.wall
    );

    // The watchers, opened 50 at a time.
    let tally = Arc::new(Tally::default());
    let stop_watch = CancellationToken::new();
    let mut watchers = tokio::task::JoinSet::new();
    let grpc_n = a.watchers * a.grpc_percent.min(100) / 100;
    let t_open = Instant::now();
    for i in 0..a.watchers {
        let (t, stop, token) = (tally.clone(), stop_watch.clone(), token.clone());
        let commit_sample = i % 10 == 0;
        if i < grpc_n {
            watchers.spawn(grpc_watcher(
                hub.grpc.clone(),
                token,
                t,
                commit_sample,
                stop,
            ));
        } else {
            watchers.spawn(sse_watcher(hub.rest.clone(), token, t, commit_sample, stop));
        }
        if i % 50 == 49 {
            let want = i as u64 + 1;
            let t = tally.clone();
            wait_for(Duration::from_secs(30), || {
                t.connected.load(Ordering::Relaxed) + t.ended.load(Ordering::Relaxed) >= want
            })
            .await;
        }
    }
    let all = a.watchers as u64;
    wait_for(Duration::from_secs(60), || {
        tally.connected.load(Ordering::Relaxed) + tally.ended.load(Ordering::Relaxed) >= all
    })
    .await;
    let opened = t_open.elapsed();
    let connected = tally.connected.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(a.settle_seconds)).await;

    tally.measuring.store(true, Ordering::Relaxed);
    let with = measure(store.as_ref(), hub.pid, a.seconds).await?;
    tally.measuring.store(false, Ordering::Relaxed);
    let rss1 = rss_kib(hub.pid)?;
    let threads = clawfed_bench::procfs::threads(hub.pid);

    // Stop: watchers flush their samples as they end.
    stop_watch.cancel();
    while watchers.join_next().await.is_some() {}
    stop_load.cancel();
    let _ = load.await;
    stop_links.cancel();
    while links.join_next().await.is_some() {}
    let _ = hub.child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(10), hub.child.wait()).await;

    // The figures.
    let delivered = tally.delivered.load(Ordering::Relaxed);
    let take = |h: &Mutex<Option<Histogram>>| h.lock().ok().and_then(|mut h| h.take());
    let send = take(&tally.send_latency).unwrap_or_else(Histogram::new);
    let commit = take(&tally.commit_latency).unwrap_or_else(Histogram::new);
    let backend = if a.postgres { "PostgreSQL" } else { "SQLite" };
    let cores = std::thread::available_parallelism().map_or(0, |p| p.get());
    let rate_with = with.events as f64 / with.wall;
    let conditions = format!(
        "{backend}, hub {}, {cores} cores shared with the generator and watchers, {} watchers ({} SSE, {grpc_n} gRPC), {rate_with:.0} events/s committed of {} offered",
        clawfed_bench::profile_of(hub_bin),
        a.watchers,
        a.watchers - grpc_n,
        a.rate
    );
    let per_watcher = (rss1 as f64 - rss0 as f64) / a.watchers as f64;
    let p99 = send.percentile_ms(99.0);
    let cpu_per_k = with.cpu * 1000.0 / (delivered.max(1) as f64 / 1000.0);
    let base_cpu_rate = base.cpu / base.wall;
    let delivery_cpu = with.cpu - base_cpu_rate * with.wall;
    let lost = tally.ended.load(Ordering::Relaxed);
    let relists = tally.relists.load(Ordering::Relaxed);
    let gaps = tally.gaps.load(Ordering::Relaxed);
    let expected = with.events as u64 * connected;

    println!();
    println!(
        "watch benchmark: hub {} ({}), database {backend}, {cores} cores, watch settings: bufferEvents 256, slowConsumerMs 2000, ringEvents 4096 (defaults), batchMs {}",
        hub_bin.display(),
        clawfed_bench::profile_of(hub_bin),
        a.batch_ms
            .map_or_else(|| "default".to_owned(), |ms| ms.to_string()),
    );
    println!(
        "load: readiness observations from {} spokes (real Links, mTLS) over {} Harness targets, {} offered/s: {:.0} events/s committed (baseline), {rate_with:.0}/s (with watchers)",
        a.spokes,
        a.targets,
        a.rate,
        base.events as f64 / base.wall
    );
    println!(
        "watchers: {connected} of {} connected in {:.1} s ({} SSE, {grpc_n} gRPC, each on its own connection); during the measured {:.1} s: {relists} cut off (relist), {lost} ended early, {gaps} cursor gaps",
        a.watchers,
        opened.as_secs_f64(),
        a.watchers - grpc_n,
        with.wall,
    );
    println!(
        "delivered: {delivered} events ({:.0}/s; {:.1}% of events committed x watchers connected)",
        delivered as f64 / with.wall,
        delivered as f64 * 100.0 / expected.max(1) as f64
    );
    println!(
        "hub RSS: {rss0} KiB with 0 watchers, {rss1} KiB with {connected} ({threads} threads): {per_watcher:.1} KiB per watcher"
    );
    println!(
        "    goal <= {} KiB per watcher: {} ({conditions})",
        a.goal_rss_kib,
        met(per_watcher <= a.goal_rss_kib)
    );
    println!(
        "latency send (into the spoke's link) -> received: p50 {:.1} ms, p99 {p99:.1} ms, max {:.1} ms ({} samples)",
        send.percentile_ms(50.0),
        send.max_us as f64 / 1000.0,
        send.total
    );
    println!(
        "    goal p99 <= {} ms: {} ({conditions})",
        a.goal_p99_ms,
        met(p99 <= a.goal_p99_ms)
    );
    println!(
        "latency commit (event `at`) -> received: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} samples, every 10th watcher)",
        commit.percentile_ms(50.0),
        commit.percentile_ms(99.0),
        commit.max_us as f64 / 1000.0,
        commit.total
    );
    println!(
        "hub CPU: {:.1}% of a core with 0 watchers, {:.1}% with {connected}: {cpu_per_k:.2} ms per 1,000 events delivered (all hub work), {:.2} ms net of the baseline (delivery alone)",
        base_cpu_rate * 100.0,
        with.cpu / with.wall * 100.0,
        delivery_cpu * 1000.0 / (delivered.max(1) as f64 / 1000.0),
    );
    println!(
        "bench process CPU (generator, spokes, watchers): {:.1}% of a core with 0 watchers, {:.1}% with {connected}",
        base.bench_cpu / base.wall * 100.0,
        with.bench_cpu / with.wall * 100.0
    );
    if let Ok(Some(e)) = tally.first_error.lock().map(|e| e.clone()) {
        println!("first watcher error: {e}");
    }
    let sent = sent.load(Ordering::Relaxed);
    println!(
        "reports sent: {sent}; machine load average (1, 5, 15 min) at the end: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(per_watcher <= a.goal_rss_kib
        && p99 <= a.goal_p99_ms
        && connected == a.watchers as u64
        && lost == 0
        && gaps == 0)
}
