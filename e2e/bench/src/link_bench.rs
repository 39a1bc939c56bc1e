//! The spoke link at scale, over real TLS 1.3 mTLS on loopback: one hub
//! process, N spokes held by this load generator (a separate process, so
//! each side stays under its file-descriptor limit). Every simulated spoke
//! is the product's own `clawfed_spoke::link::Link`: its enrollment with a
//! bootstrap token, its Hello (with `applied` from its applier), its
//! reconnect backoff (exponential with full jitter, reset when a session
//! gets its Welcome), its GoAway handling, its heartbeat, its acks and
//! reports. The bench only supplies what a spoke process would:
//! - an identity store in memory ([`MemoryIdentityStore`]), so 10,000
//!   identities do not hit the disk;
//! - an applier ([`BenchApplier`]) that records in memory, acks at once and
//!   timestamps each item's arrival;
//! - staggered starts (`--ramp-per-second`), as a fleet of spokes coming up;
//!
//! and reads each link's [`LinkStatus`] (Welcome, GoAway, failures) to time
//! every spoke's reconnect.
//!
//! Phases:
//! 1. bootstrap tokens written to the store directly (the hub's own
//!    minting), the CA created, the release `clawfed-hub serve` started as
//!    a child;
//! 2. the Links without an identity start, staggered, and enroll (key +
//!    CSR, `Enroll`, each on its own connection); once all have, they stop
//!    and the hub restarts (its allocator keeps what enrollment used); with
//!    `--state-dir` identities are kept between runs and this is skipped.
//!    Then every Link starts from its identity, staggered, and all are held
//!    idle: max held, hub RSS per idle spoke;
//! 3. `kill -9` the hub, restart it on the same database and CA: time until
//!    every Link has a new Welcome (each spoke's time is its own Welcome);
//! 4. dispatch-to-ack latency at a fixed offered rate over M spokes. The
//!    release hub only sees outbox rows written by another process on its
//!    ~0.5 s outbox poll, so this phase runs the hub in process
//!    (`clawfed_hub::server::start_with_store`, in a child process of this
//!    binary) and enqueues with `LinkHandle::send`, which wakes the session
//!    directly, as the hub's own callers do. Latency is read from the
//!    outbox rows (`acked_at − created_at`), from the spoke side (enqueue
//!    timestamp in the spec → arrival at the applier) and from the hub's
//!    `occ_link_ack_latency_seconds` histogram. In the same run, the round
//!    trip of a bare gRPC unary call to that same process over loopback is
//!    the physical reference;
//! 5. `kill -9` of that hub and a release hub started again: the storm once
//!    more, now with M spokes whose Hello carries what they applied and who
//!    re-send their current reports.
//!
//! `cargo build --release -p clawfed-hub -p clawfed-bench &&
//!  "$CARGO_TARGET_DIR"/release/link-bench --spokes 10000`

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use clawfed_bench::fleet::{
    Fleet, HubProc, KIND, Receipts, histogram_quantile, metric, mint_tokens, outbox_latencies,
    quantile, spread_ms, unix_nanos,
};
use clawfed_bench::procfs::{cpu_secs, rss_kib};
use clawfed_bench::statements::StatementCounter;
use clawfed_hub::store::{self, Store};
use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::enrollment_client::EnrollmentClient;
use clawfed_proto::link::v1::enrollment_server::{Enrollment, EnrollmentServer};
use clawfed_spoke::link::identity::Identity;
use clawfed_spoke::link::tls::HubAddress;
use clawfed_spoke::link::{LinkConfig, LinkStatus};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
#[command(name = "link-bench")]
struct Args {
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Internal: the in-process hub of the latency phase.
    InprocHub(InprocArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Spokes to enroll and hold.
    #[arg(long, default_value_t = 10_000)]
    spokes: usize,
    /// Spokes the latency phase dispatches to (the others stay idle).
    #[arg(long, default_value_t = 1_000)]
    latency_spokes: usize,
    /// Offered dispatch rate (items/s) of the latency phase.
    #[arg(long, default_value_t = 1_000)]
    rate: u64,
    /// Seconds of offered load.
    #[arg(long, default_value_t = 20)]
    load_seconds: u64,
    /// Hub heartbeat interval (idle spokes send one per interval).
    #[arg(long, default_value_t = 30)]
    heartbeat_seconds: u64,
    /// The hub's link.maxConcurrentHandshakes.
    #[arg(long, default_value_t = 128)]
    max_concurrent_handshakes: usize,
    /// Seconds the N idle spokes are held before RSS is read.
    #[arg(long, default_value_t = 10)]
    hold_seconds: u64,
    /// Links started per second in the first ramp (spoke i starts at
    /// i / rate). Restarts are not staggered: every Link reconnects on
    /// its own backoff.
    #[arg(long, default_value_t = 1_000)]
    ramp_per_second: u64,
    /// The Links' reconnect backoff (`LinkConfig`): first delay (ms) and
    /// cap (s), full jitter.
    #[arg(long, default_value_t = 200)]
    backoff_min_ms: u64,
    #[arg(long, default_value_t = 30)]
    backoff_max_seconds: u64,
    /// Seconds a phase may take before the run is declared failed.
    #[arg(long, default_value_t = 180)]
    phase_timeout_seconds: u64,
    /// Keep the database, CA and spoke identities here and reuse them on the
    /// next run (skips enrollment). A temp dir when omitted.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Use PostgreSQL at CLAWFED_TEST_DATABASE_URL instead of SQLite.
    #[arg(long)]
    postgres: bool,
    /// The release hub binary (default: next to this binary).
    #[arg(long)]
    hub_bin: Option<PathBuf>,
    /// Run a CPU-heavy neighbour beside the whole run: `yes` writing to
    /// /dev/null (one busy core), as the "machine is busy" figures.
    #[arg(long)]
    cpu_neighbour: bool,
}

#[derive(Debug, clap::Args)]
struct InprocArgs {
    #[arg(long)]
    config: PathBuf,
    /// Cluster ids to dispatch to, one per line.
    #[arg(long)]
    targets: PathBuf,
    #[arg(long)]
    rate: u64,
    #[arg(long)]
    seconds: u64,
    /// Prefix of the targets this run puts (to find its rows).
    #[arg(long)]
    tag: String,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match args.mode {
            Some(Mode::InprocHub(a)) => inproc_hub(a).await,
            None => {
                tokio::select! {
                    r = run(args.run) => r,
                    _ = tokio::signal::ctrl_c() => bail!("interrupted"),
                }
            }
        }
    });
    // Spoke tasks may still be winding down; do not wait for them.
    runtime.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("link-bench: error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

// ---------------------------------------------------------------------------
// Small helpers.

/// "hub X s + generator Y s CPU in Z s" since `(hub0, gen0, t0)`.
fn cpu_note(hub: u32, since: (f64, f64, Instant)) -> String {
    let me = std::process::id();
    let wall = since.2.elapsed().as_secs_f64();
    let h = cpu_secs(hub) - since.0;
    let g = cpu_secs(me) - since.1;
    format!(
        "CPU: hub {h:.1} s + generator {g:.1} s in {wall:.1} s wall ({:.0}% of 2 cores)",
        (h + g) / (2.0 * wall) * 100.0
    )
}

fn cpu_mark(hub: u32) -> (f64, f64, Instant) {
    (cpu_secs(hub), cpu_secs(std::process::id()), Instant::now())
}

fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

// ---------------------------------------------------------------------------
// Spokes: the product's Link, with an applier and an identity store in memory.

/// An enrolled spoke as `--state-dir` keeps it between runs.
#[derive(Clone, Serialize, Deserialize)]
struct SavedIdentity {
    name: String,
    cluster_id: String,
    key_pem: String,
    cert_pem: String,
}

// ---------------------------------------------------------------------------
// Setup: bootstrap tokens.

fn hub_config(dir: &Path, db_url: &str, link_port: u16, a: &RunArgs) -> anyhow::Result<PathBuf> {
    let path = dir.join("hub.yaml");
    let yaml = format!(
        "version: 1
database:
  url: \"{db_url}\"
api:
  restAddr: 127.0.0.1:0
  grpcAddr: 127.0.0.1:0
  metricsAddr: 127.0.0.1:0
  maxBodyBytes: 1048576
link:
  enabled: true
  addr: 127.0.0.1:{link_port}
  caDir: \"{ca}\"
  serverNames: [localhost, 127.0.0.1]
  certTtlSeconds: 604800
  heartbeatSeconds: {hb}
  maxSessions: {max}
  maxConcurrentHandshakes: {hs}
  # Every simulated spoke dials from 127.0.0.1: one source address.
  maxHandshakesPerSource: {hs}
  maxMessageBytes: 4194304
tunnel:
  enabled: false
log:
  format: text
  filter: warn
",
        ca = dir.join("ca").display(),
        hb = a.heartbeat_seconds,
        max = a.spokes + 1000,
        hs = a.max_concurrent_handshakes,
    );
    std::fs::write(&path, yaml)?;
    Ok(path)
}

// ---------------------------------------------------------------------------
// The run.

struct Row {
    what: String,
    value: String,
    goal: String,
    limit: String,
}

/// PASS, MISS, or PASS at a scale below the goal's (which proves less).
fn verdict(ok: bool, at_goal_scale: bool) -> &'static str {
    match (ok, at_goal_scale) {
        (false, _) => "MISS",
        (true, true) => "PASS",
        (true, false) => "PASS below the goal's scale",
    }
}

async fn run(a: RunArgs) -> anyhow::Result<bool> {
    let phase = Duration::from_secs(a.phase_timeout_seconds);
    // Killed when the run ends (kill_on_drop), whichever way it ends.
    let _neighbour = if a.cpu_neighbour {
        Some(
            Command::new("yes")
                .stdout(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .context("starting the CPU neighbour (yes)")?,
        )
    } else {
        None
    };
    let tmp;
    let dir = match &a.state_dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_owned()
        }
    };
    let db_url = if a.postgres {
        let base = std::env::var("CLAWFED_TEST_DATABASE_URL")
            .context("--postgres needs CLAWFED_TEST_DATABASE_URL")?;
        // One schema per state directory, named in it: a reused directory
        // finds its clusters, CA and secrets key again, a new one starts
        // clean (the hub's link CA in the store is sealed with the key
        // beside the directory's CA, so another directory cannot open it).
        let schema_file = dir.join("pg-schema");
        let schema = match std::fs::read_to_string(&schema_file) {
            Ok(s) => s.trim().to_owned(),
            Err(_) => {
                let s = format!("lbench_{}", uuid::Uuid::new_v4().simple());
                std::fs::write(&schema_file, &s)?;
                s
            }
        };
        let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&base).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}"
        )))
        .execute(&mut c)
        .await?;
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}options[search_path]={schema}")
    } else {
        format!("sqlite://{}", dir.join("hub.db").display())
    };
    let hub_bin = match &a.hub_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("exe dir")?
            .join("clawfed-hub"),
    };
    if !hub_bin.exists() {
        bail!(
            "{} not found: cargo build --release -p clawfed-hub",
            hub_bin.display()
        );
    }
    let log = dir.join("hub.log");
    let link_port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let config = hub_config(&dir, &db_url, link_port, &a)?;
    let hub_cmd = || {
        let mut c = Command::new(&hub_bin);
        c.arg("--config")
            .arg(&config)
            .arg("serve")
            .env("CLAWFED_WORKER_ENABLED", "false");
        c
    };
    println!(
        "link-bench: state in {} (hub log: {})",
        dir.display(),
        log.display()
    );

    // 1. Store, CA, tokens for the spokes not enrolled yet; the hub.
    let t = Instant::now();
    let store: Arc<dyn Store> = Arc::new(store::connect(&db_url).await?);
    let ca = clawfed_hub::link::ca::CertificateAuthority::load_or_create(&dir.join("ca"))?;
    let ca_pem = ca.ca_pem().to_owned();
    drop(ca);
    let ids_path = dir.join("identities.json");
    let mut saved: Vec<SavedIdentity> = match std::fs::read(&ids_path) {
        Ok(b) => serde_json::from_slice(&b)?,
        Err(_) => Vec::new(),
    };
    saved.truncate(a.spokes);
    let tag = format!("{:08x}", rand::random::<u32>());
    let missing = a.spokes - saved.len();
    let names = (0..missing)
        .map(|i| format!("b{tag}-{i:05}"))
        .collect::<Vec<_>>();
    let tokens = mint_tokens(store.as_ref(), &names).await?;
    drop(store);
    let mut spokes: Vec<(String, Result<Identity, String>)> = Vec::with_capacity(a.spokes);
    for s in saved {
        let id = Identity::new(s.cluster_id, s.key_pem, s.cert_pem)?;
        spokes.push((s.name, Ok(id)));
    }
    spokes.extend(names.into_iter().zip(tokens.into_iter().map(Err)));
    let mut hub = HubProc::spawn(hub_cmd(), &log, false).await?;
    let hub_addr =
        HubAddress::parse(&format!("https://{}", hub.link)).map_err(anyhow::Error::msg)?;
    println!(
        "link-bench: hub pid {} link {} started in {:?}",
        hub.pid,
        hub.link,
        hub.started.elapsed()
    );
    let setup = t.elapsed();
    let n = spokes.len();
    let hub_profile = clawfed_bench::profile_of(&hub_bin);
    let gen_profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    // The conditions every verdict holds under.
    let conditions = format!(
        "N={n} Links, heartbeat {} s, maxConcurrentHandshakes {hs} (per source {hs}), maxSessions {}, backoff {} ms..{} s, hub {hub_profile}, generator {gen_profile}, {}, {}",
        a.heartbeat_seconds,
        a.spokes + 1000,
        a.backoff_min_ms,
        a.backoff_max_seconds,
        if a.postgres { "PostgreSQL" } else { "SQLite" },
        if a.cpu_neighbour {
            "CPU neighbour: yes > /dev/null"
        } else {
            "no CPU neighbour started by the bench"
        },
        hs = a.max_concurrent_handshakes,
    );
    let full_scale = n >= 10_000;

    // 2. The Links, staggered. Those without an identity enroll first, in
    //    a fleet of their own that is stopped once all are enrolled, and
    //    the hub is restarted: its allocator keeps what enrollment used, so
    //    the held figures below are of connections alone. Then the measured
    //    ramp: every Link from its identity, held idle.
    let link_config = LinkConfig {
        hub: hub_addr.clone(),
        ca_pem: ca_pem.clone(),
        cluster_name: String::new(),
        bootstrap_token: None,
        version: "link-bench".into(),
        capabilities: vec!["applier:bench".into()],
        backoff_min: Duration::from_millis(a.backoff_min_ms),
        backoff_max: Duration::from_secs(a.backoff_max_seconds),
    };
    let receipts = Arc::new(Receipts::default());
    // The generator's baseline is taken before any Link ran (an upper
    // bound per Link: what enrollment left in the allocator counts).
    let gen_rss_0 = rss_kib(std::process::id())?;
    let mut enrollment = None;
    if missing > 0 {
        println!(
            "link-bench: {missing} Links enroll, started at {}/s",
            a.ramp_per_second
        );
        let stop_enrolling = CancellationToken::new();
        let cpu = cpu_mark(hub.pid);
        let started = Instant::now();
        let enrolling = Fleet::start(
            &link_config,
            spokes,
            &receipts,
            a.ramp_per_second,
            &stop_enrolling,
        );
        let done = enrolling
            .wait(phase, "every Link enrolled", |f| f.enrolled() == n)
            .await;
        if let Err(e) = done {
            eprintln!("link-bench: {e:#}");
            return Ok(false);
        }
        let took = started.elapsed();
        let note = cpu_note(hub.pid, cpu);
        let totals = enrolling.totals();
        let mut saved = Vec::with_capacity(n);
        spokes = Vec::with_capacity(n);
        for s in &enrolling.spokes {
            let id = s.identity.current().context("an enrolled Link")?;
            saved.push(SavedIdentity {
                name: s.name.clone(),
                cluster_id: id.cluster_id.clone(),
                key_pem: id.key_pem.clone(),
                cert_pem: id.cert_pem.clone(),
            });
            spokes.push((s.name.clone(), Ok(id)));
        }
        std::fs::write(&ids_path, serde_json::to_vec(&saved)?)?;
        enrolling.stop(&stop_enrolling).await;
        println!("link-bench: {missing} enrolled in {took:.1?} ({note}); restarting the hub");
        enrollment = Some((took, note, totals));
        hub.kill9().await?;
        hub = HubProc::spawn(hub_cmd(), &log, false).await?;
    }
    let stop = CancellationToken::new();
    let _stop_guard = stop.clone().drop_guard();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let hub_rss_0 = rss_kib(hub.pid)?;
    let cpu0 = cpu_mark(hub.pid);
    println!("link-bench: starting {n} Links at {}/s", a.ramp_per_second);
    let started = Instant::now();
    let fleet = Fleet::start(&link_config, spokes, &receipts, a.ramp_per_second, &stop);
    let ramp = fleet
        .wait(phase, "every Link connected (ramp)", |f| f.connected() == n)
        .await;
    let ramp = match ramp {
        Ok(_) => started.elapsed(),
        Err(e) => {
            eprintln!("link-bench: {e:#}");
            return Ok(false);
        }
    };
    let ramp_cpu = cpu_note(hub.pid, cpu0);
    let ramp_totals = fleet.totals();
    println!(
        "link-bench: {n} Links connected in {ramp:.1?} ({ramp_cpu}); holding {} s",
        a.hold_seconds
    );
    let cpu_hold = cpu_mark(hub.pid);
    tokio::time::sleep(Duration::from_secs(a.hold_seconds)).await;
    let hold_cpu = cpu_note(hub.pid, cpu_hold);
    let held = fleet.connected();
    let hub_rss_n = rss_kib(hub.pid)?;
    let gen_rss_n = rss_kib(std::process::id())?;
    let scraped = hub.scrape().await?;
    let hub_gauge = metric(&scraped, "occ_link_connected_spokes").unwrap_or(f64::NAN);
    let per_spoke_hub = (hub_rss_n.saturating_sub(hub_rss_0)) as f64 / n as f64;
    let per_spoke_gen = (gen_rss_n.saturating_sub(gen_rss_0)) as f64 / n as f64;
    println!(
        "link-bench: held {held}/{n} (hub gauge {hub_gauge}); hub RSS {hub_rss_0} → {hub_rss_n} KiB = {per_spoke_hub:.1} KiB/spoke; generator {per_spoke_gen:.1} KiB/Link"
    );

    // 3. kill -9, restart, every Link reconnects on its own backoff.
    let killed = tokio::time::Instant::now();
    let before_storm = fleet.totals();
    hub.kill9().await?;
    let gen_cpu_killed = cpu_secs(std::process::id());
    let hub2 = HubProc::spawn(hub_cmd(), &log, false).await?;
    let hub_up = killed.elapsed();
    let cpu1 = (0.0, gen_cpu_killed, killed.into_std());
    let storm = match fleet
        .reconnected(phase, "every Link reconnected after kill -9", killed)
        .await
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("link-bench: {e:#}");
            return Ok(false);
        }
    };
    let reconnect = Duration::from_millis(storm.last().copied().unwrap_or(0));
    let storm_totals = fleet.totals();
    let reconnect_cpu = cpu_note(hub2.pid, cpu1);
    let hub_rss_restart = rss_kib(hub2.pid)?;
    let scraped2 = hub2.scrape().await?;
    let handshakes_ok = scraped2
        .lines()
        .find(|l| l.starts_with("occ_link_handshakes_total{result=\"ok\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or("?")
        .to_owned();
    println!(
        "link-bench: all {n} reconnected {reconnect:.1?} after kill -9 (per Link p50/p99/max {}; hub listening again after {hub_up:.1?}; {handshakes_ok} handshakes; {} failures, the {n} broken sessions included; {} go-aways; {reconnect_cpu})",
        spread_ms(&storm),
        storm_totals.failures - before_storm.failures,
        storm_totals.go_aways - before_storm.go_aways,
    );

    // 4. Latency: the in-process hub on the same database and CA.
    let m = a.latency_spokes.min(n);
    let targets = dir.join("targets.txt");
    let mut ids = String::new();
    for s in &fleet.spokes[..m] {
        let id = s.identity.current().context("an enrolled spoke")?;
        ids.push_str(&id.cluster_id);
        ids.push('\n');
    }
    std::fs::write(&targets, ids)?;
    let killed = tokio::time::Instant::now();
    hub2.kill9().await?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("inproc-hub")
        .arg("--config")
        .arg(&config)
        .arg("--targets")
        .arg(&targets)
        .arg("--rate")
        .arg(a.rate.to_string())
        .arg("--seconds")
        .arg(a.load_seconds.to_string())
        .arg("--tag")
        .arg(&tag)
        .env("CLAWFED_WORKER_ENABLED", "false");
    let mut hub3 = HubProc::spawn(cmd, &log, true).await?;
    let storm_inproc = fleet
        .reconnected(
            phase,
            "every Link reconnected to the in-process hub",
            killed,
        )
        .await?;
    let reconnect_inproc = Duration::from_millis(storm_inproc.last().copied().unwrap_or(0));
    println!(
        "link-bench: all {n} reconnected to the in-process hub in {reconnect_inproc:.1?}; echo at {:?}",
        hub3.echo
    );

    // The physical reference: a bare unary gRPC call to the hub process.
    let echo_addr = hub3.echo.context("echo address")?;
    let echo = tonic::transport::Endpoint::from_shared(format!("http://{echo_addr}"))?
        .connect()
        .await?;
    let mut echo = EnrollmentClient::new(echo);
    let mut idle_rtt = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let t = Instant::now();
        echo.enroll(pb::EnrollRequest::default()).await?;
        idle_rtt.push(t.elapsed().as_micros() as u64);
    }
    idle_rtt.sort_unstable();
    tokio::time::sleep(Duration::from_secs(1)).await;

    if let Ok(mut v) = receipts.us.lock() {
        v.clear();
    }
    let works_0 = receipts.works.load(Ordering::Relaxed);
    let loadavg_before = loadavg();
    let cpu2 = cpu_mark(hub3.pid);
    let stdin = hub3.stdin.as_mut().context("stdin")?;
    stdin.write_all(b"go\n").await?;
    stdin.flush().await?;
    // Unary round trips paced at 100/s while the load runs.
    let mut load_rtt = Vec::new();
    let load_end = Instant::now() + Duration::from_secs(a.load_seconds);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    while Instant::now() < load_end {
        tick.tick().await;
        let t = Instant::now();
        echo.enroll(pb::EnrollRequest::default()).await?;
        load_rtt.push(t.elapsed().as_micros() as u64);
    }
    load_rtt.sort_unstable();
    let mut statement_kinds: Vec<String> = Vec::new();
    let done = tokio::time::timeout(phase, async {
        loop {
            match hub3.stdout.next_line().await? {
                Some(l) if l.starts_with("done ") => return anyhow::Ok(l),
                Some(l) => {
                    if let Some(kind) = l.strip_prefix("stmt\t") {
                        statement_kinds.push(kind.to_owned());
                    }
                }
                None => bail!("in-process hub exited during the load"),
            }
        }
    })
    .await
    .context("latency phase timed out")??;
    let kv: HashMap<&str, &str> = done
        .split_whitespace()
        .skip(1)
        .filter_map(|w| w.split_once('='))
        .collect();
    let num = |k: &str| {
        kv.get(k)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let load_cpu = cpu_note(hub3.pid, cpu2);
    let loadavg_after = loadavg();
    let hub3_rss = rss_kib(hub3.pid)?;
    let scraped3 = hub3.scrape().await?;
    let hist = "occ_link_ack_latency_seconds";
    let h50 = histogram_quantile(&scraped3, hist, 0.50).unwrap_or(f64::NAN) * 1000.0;
    let h99 = histogram_quantile(&scraped3, hist, 0.99).unwrap_or(f64::NAN) * 1000.0;
    let hcount = metric(&scraped3, &format!("{hist}_count")).unwrap_or(f64::NAN);
    let mut receipt = receipts.us.lock().map(|v| v.clone()).unwrap_or_default();
    receipt.sort_unstable();
    let works = receipts.works.load(Ordering::Relaxed) - works_0;

    // Enqueue → ack as the hub recorded it (ms resolution), from the rows.
    let mut e2e = outbox_latencies(&db_url, &tag).await?;
    e2e.sort_unstable();
    let unacked = (num("sent") as usize).saturating_sub(e2e.len());

    // 5. The storm again, now with applied state: kill -9 of the in-process
    //    hub, the release hub back; the M spokes that applied work say so in
    //    Hello and re-send their current reports.
    let with_applied = fleet.spokes[..m]
        .iter()
        .filter(|s| !s.applier.record().is_empty())
        .count();
    let applied_targets: usize = fleet.spokes[..m]
        .iter()
        .map(|s| s.applier.record().len())
        .sum();
    let killed = tokio::time::Instant::now();
    let before_applied = fleet.totals();
    hub3.kill9().await?;
    let gen_cpu_killed = cpu_secs(std::process::id());
    let hub4 = HubProc::spawn(hub_cmd(), &log, false).await?;
    let cpu4 = (0.0, gen_cpu_killed, killed.into_std());
    let storm_applied = match fleet
        .reconnected(
            phase,
            "every Link reconnected after kill -9, with applied state",
            killed,
        )
        .await
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("link-bench: {e:#}");
            return Ok(false);
        }
    };
    let reconnect_applied = Duration::from_millis(storm_applied.last().copied().unwrap_or(0));
    let applied_totals = fleet.totals();
    let applied_cpu = cpu_note(hub4.pid, cpu4);
    println!(
        "link-bench: all {n} reconnected {reconnect_applied:.1?} after kill -9 with {applied_targets} applied targets in {with_applied} Hellos ({applied_cpu})"
    );
    let totals = fleet.totals();
    fleet.stop(&stop).await;
    drop(hub4);

    // The table.
    let e2e_p99 = quantile(&e2e, 0.99);
    let offered = a.rate as f64;
    let achieved = num("rate");
    let storm_note = |after: &LinkStatus, before: &LinkStatus| {
        format!(
            "{} failures, the {n} sessions the kill broke included; {} go-aways",
            after.failures - before.failures,
            after.go_aways - before.go_aways
        )
    };
    let within_30s = |d: Duration| d <= Duration::from_secs(30);
    let mut rows = vec![
        Row {
            what: "spokes enrolled (this run)".into(),
            value: match &enrollment {
                Some((took, note, totals)) => format!(
                    "{missing} in {took:.1?} ({:.0}/s; each Link's own Enroll on its own connection, started at {}/s; {} failed attempts; {note})",
                    missing as f64 / took.as_secs_f64(),
                    a.ramp_per_second,
                    totals.failures,
                ),
                None => format!("0 (reused {n} from --state-dir)"),
            },
            goal: "-".into(),
            limit: if a.postgres {
                "PostgreSQL: 4 write txns per spoke (token, enrollment, certificate, state)"
            } else {
                "single-writer SQLite: 4 write txns per spoke (token, enrollment, certificate, state)"
            }
            .into(),
        },
        Row {
            what: "max concurrent connected spokes held".into(),
            value: format!(
                "{held} of {n} (hub gauge {hub_gauge}; ramp {ramp:.1?} at {}/s, {} failed attempts, {} go-aways; ramp {ramp_cpu})",
                a.ramp_per_second, ramp_totals.failures, ramp_totals.go_aways
            ),
            goal: format!(
                "10000: {} [{conditions}]",
                verdict(held == n, full_scale)
            ),
            limit: "N asked for; fds (20000/process) cap one hub near 19.9k".into(),
        },
        Row {
            what: "hub RSS per idle connected spoke".into(),
            value: format!("{per_spoke_hub:.1} KiB ({hub_rss_0} → {hub_rss_n} KiB; idle {hold_cpu})"),
            goal: format!(
                "≤ 64 KiB: {} [{conditions}]",
                verdict(per_spoke_hub <= 64.0, full_scale)
            ),
            limit: "TLS + h2 + tonic buffers and two tasks per connection".into(),
        },
        Row {
            what: "generator RSS per Link (for reference)".into(),
            value: format!("{per_spoke_gen:.1} KiB ({gen_rss_0} → {gen_rss_n} KiB)"),
            goal: "-".into(),
            limit: "per Link: its rustls ClientConfig, renewal task, tonic Channel (buffer task + h2 connection), session channels".into(),
        },
        Row {
            what: format!("all {n} reconnected after kill -9 + restart"),
            value: format!(
                "{reconnect:.1?}; per Link p50/p99/max {} (hub listening again after {hub_up:.1?}; RSS then {hub_rss_restart} KiB; {}; {reconnect_cpu})",
                spread_ms(&storm),
                storm_note(&storm_totals, &before_storm),
            ),
            goal: format!(
                "≤ 30 s: {} [{conditions}]",
                verdict(within_30s(reconnect), full_scale)
            ),
            limit: "handshake CPU on 2 cores shared by hub and generator; accept backlog; the Links' backoff jitter".into(),
        },
        Row {
            what: "  same, onto the in-process hub".into(),
            value: format!("{reconnect_inproc:.1?}; per Link p50/p99/max {}", spread_ms(&storm_inproc)),
            goal: "-".into(),
            limit: "".into(),
        },
        Row {
            what: format!("  same, {with_applied} Hellos carrying {applied_targets} applied targets"),
            value: format!(
                "{reconnect_applied:.1?}; per Link p50/p99/max {} ({}; {applied_cpu})",
                spread_ms(&storm_applied),
                storm_note(&applied_totals, &before_applied),
            ),
            goal: format!(
                "≤ 30 s: {} [{conditions}]",
                verdict(within_30s(reconnect_applied), full_scale)
            ),
            limit: "as above, plus acking Hello.applied and storing the re-sent reports".into(),
        },
        Row {
            what: format!("dispatch→ack p50 / p99, enqueue→ack row ({} items)", e2e.len()),
            value: format!("{} / {} ms (ms resolution; {load_cpu})", quantile(&e2e, 0.5), e2e_p99),
            goal: format!(
                "p99 ≤ 50 ms: {} [{conditions}, {offered:.0}/s over {m} Links]",
                verdict(e2e_p99 <= 50 && unacked == 0, full_scale && a.rate >= 1000 && m >= 1000)
            ),
            limit: if a.postgres {
                "PostgreSQL: put, ack and the Link's work-result report per item, committed in groups (one set-based statement per group, 2 groups at a time)"
            } else {
                "SQLite single writer: put + ack + the Link's work-result report per item (grouped commits)"
            }
            .into(),
        },
        Row {
            what: format!("  offered {offered:.0}/s over {m} spokes for {} s", a.load_seconds),
            value: format!("achieved {achieved:.0}/s, {} sent, {unacked} unacked, put p50/p99 {:.2}/{:.2} ms", num("sent"), num("put_p50_us") / 1000.0, num("put_p99_us") / 1000.0),
            goal: "-".into(),
            limit: "in-process hub (LinkHandle::send); idle spokes stay connected".into(),
        },
        Row {
            what: "  machine load average (1 min) before / after the load".into(),
            value: format!("{loadavg_before} / {loadavg_after}"),
            goal: "-".into(),
            limit: "/proc/loadavg; every process on the machine".into(),
        },
        Row {
            what: "  database work per item (load and drain)".into(),
            value: database_per_item(&num, &statement_kinds),
            goal: "-".into(),
            limit: "statements: sqlx's statement events in the hub process (each a round trip); transactions: pg_stat_database of the whole database, less its background rate measured right after".into(),
        },
        Row {
            what: format!("  enqueue→work at the applier p50 / p99 ({works} items)"),
            value: format!("{} / {}", ms(quantile(&receipt, 0.5)), ms(quantile(&receipt, 0.99))),
            goal: "-".into(),
            limit: "spoke clock, CLOCK_REALTIME in both processes".into(),
        },
        Row {
            what: format!("  hub send→ack p50 / p99 (histogram, {hcount} obs)"),
            value: format!("{h50:.2} / {h99:.2} ms"),
            goal: "-".into(),
            limit: "occ_link_ack_latency_seconds, interpolated in ×2 buckets".into(),
        },
        Row {
            what: "bare gRPC unary RTT, idle p50 / p99".into(),
            value: format!("{} / {}", ms(quantile(&idle_rtt, 0.5)), ms(quantile(&idle_rtt, 0.99))),
            goal: "reference".into(),
            limit: "plaintext h2 to the hub process, sequential".into(),
        },
        Row {
            what: "bare gRPC unary RTT, under load p50 / p99".into(),
            value: format!("{} / {}", ms(quantile(&load_rtt, 0.5)), ms(quantile(&load_rtt, 0.99))),
            goal: "reference".into(),
            limit: format!("{} calls at 100/s during the load", load_rtt.len()),
        },
        Row {
            what: "hub RSS with load (in-process hub)".into(),
            value: format!("{hub3_rss} KiB"),
            goal: "-".into(),
            limit: "".into(),
        },
        Row {
            what: "setup (store, CA, tokens, hub start)".into(),
            value: format!("{setup:.1?}"),
            goal: "-".into(),
            limit: "".into(),
        },
    ];
    rows.push(Row {
        what: "Links: welcomes / failures / go-aways".into(),
        value: format!(
            "{} / {} / {}",
            totals.welcomes, totals.failures, totals.go_aways
        ),
        goal: "-".into(),
        limit: "LinkStatus of every Link, whole run".into(),
    });
    println!();
    println!(
        "link benchmark: N={n}, heartbeat {} s, maxConcurrentHandshakes {}, {} cores, database {}, hub {hub_profile}, generator {gen_profile}",
        a.heartbeat_seconds,
        a.max_concurrent_handshakes,
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        if a.postgres { "PostgreSQL" } else { "SQLite" }
    );
    println!(
        "spokes: the product's clawfed_spoke::link::Link, {n} in this process (its enrollment, Hello with applied, backoff reset on Welcome, GoAway, heartbeat), started at {}/s",
        a.ramp_per_second
    );
    println!("conditions of every verdict: {conditions}");
    for r in &rows {
        println!("{}: {}", r.what, r.value);
        if r.goal != "-" {
            println!("    goal {}", r.goal);
        }
        if !r.limit.is_empty() {
            println!("    limited by: {}", r.limit);
        }
    }
    Ok(held == n && unacked == 0)
}

/// "X statements, Y transactions per item; by kind: ..." from the
/// in-process hub's `done` figures and its "stmt" lines.
fn database_per_item(num: &dyn Fn(&str) -> f64, kinds: &[String]) -> String {
    let items = num("sent").max(1.0);
    let mut out = format!("{:.2} statements", num("statements") / items);
    let xacts = num("xacts");
    if xacts.is_finite() {
        let background = num("xacts_background_per_s") * num("xacts_window_s");
        out.push_str(&format!(
            ", {:.2} server transactions ({xacts:.0} in {:.1} s, {background:.0} of them background)",
            (xacts - background).max(0.0) / items,
            num("xacts_window_s"),
        ));
    }
    let server_cpu = num("server_cpu_s");
    if server_cpu.is_finite() {
        out.push_str(&format!(
            ", {:.3} ms of PostgreSQL CPU ({server_cpu:.1} s in the database's backends)",
            server_cpu * 1000.0 / items
        ));
    }
    out.push_str(&format!(
        " per item; link writes (put, ack, report) in {:.0} group commits, {:.1} writes each",
        num("groups"),
        num("grouped_writes") / num("groups").max(1.0),
    ));
    // PostgreSQL: a group is one statement, timed by the client.
    if num("group_ms") > 0.0 {
        out.push_str(&format!(
            ", the group statement {:.1} ms each on the client's clock",
            num("group_ms") / num("groups").max(1.0)
        ));
    }
    out.push(';');
    out.push_str(" by statement (count, client s):");
    for kind in kinds {
        let mut f = kind.splitn(3, '\t');
        let (n, secs, label) = (f.next(), f.next(), f.next());
        if let (Some(n), Some(secs), Some(label)) = (n, secs, label) {
            let per_item = n.parse::<f64>().unwrap_or(0.0) / items;
            out.push_str(&format!("\n      {per_item:.2}/item {n} {secs} s  {label}"));
        }
    }
    out
}

// ---------------------------------------------------------------------------
// What the database does per item: statements as this process sends them,
// transactions as the PostgreSQL server counts them.

/// Transactions committed and rolled back in this database so far, as the
/// server counts them (every client's; PostgreSQL only).
async fn server_xacts(url: &str) -> anyhow::Result<i64> {
    use sqlx::Connection as _;
    use sqlx::Row as _;
    let mut c = sqlx::PgConnection::connect(url).await?;
    let row = sqlx::query(
        "SELECT (xact_commit + xact_rollback)::BIGINT FROM pg_stat_database \
         WHERE datname = current_database()",
    )
    .fetch_one(&mut c)
    .await?;
    let n = row.try_get::<i64, _>(0)?;
    c.close().await?;
    Ok(n)
}

/// CPU seconds used so far by each server process of this database (its
/// backends, the hub's pool and LISTEN connections among them), by pid;
/// PostgreSQL on this machine only (it reads /proc).
async fn server_cpu(url: &str) -> anyhow::Result<HashMap<i32, f64>> {
    use sqlx::Connection as _;
    use sqlx::Row as _;
    let mut c = sqlx::PgConnection::connect(url).await?;
    let rows = sqlx::query(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
         AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut c)
    .await?;
    c.close().await?;
    Ok(rows
        .iter()
        .filter_map(|r| r.try_get::<i32, _>(0).ok())
        .map(|pid| (pid, cpu_secs(pid as u32)))
        .filter(|(_, s)| s.is_finite())
        .collect())
}

/// The 1-minute load average.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

// ---------------------------------------------------------------------------
// The in-process hub of the latency phase.

#[derive(Debug, Clone, Copy)]
struct Echo;

#[tonic::async_trait]
impl Enrollment for Echo {
    async fn enroll(
        &self,
        _request: tonic::Request<pb::EnrollRequest>,
    ) -> Result<tonic::Response<pb::EnrollResponse>, tonic::Status> {
        Ok(tonic::Response::new(pb::EnrollResponse::default()))
    }
}

async fn inproc_hub(a: InprocArgs) -> anyhow::Result<bool> {
    let statements = StatementCounter::install();
    let env: HashMap<String, String> = std::env::vars().collect();
    let config = clawfed_hub::config::Config::load(Some(&a.config), &env)?;
    let sql = Arc::new(store::connect(&config.database.url).await?);
    let store: Arc<dyn Store> = sql.clone();
    let hub = clawfed_hub::server::start_with_store(
        &config,
        store.clone(),
        clawfed_hub::worker::Handlers::builtin(),
    )
    .await?;
    let link = hub.link.clone().context("link disabled")?;
    let echo_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let echo_addr = echo_listener.local_addr()?;
    let echo_stop = CancellationToken::new();
    let token = echo_stop.clone();
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(EnrollmentServer::new(Echo))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(echo_listener),
                token.cancelled_owned(),
            )
            .await;
    });
    println!(
        "clawfed-hub listening: rest=http://{} grpc=http://{} metrics=http://{}/metrics link=https://{} database=in-process",
        hub.rest_addr, hub.grpc_addr, hub.metrics_addr, link.addr
    );
    println!("echo={echo_addr}");
    let targets: Vec<String> = std::fs::read_to_string(&a.targets)?
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if targets.is_empty() {
        bail!("no targets");
    }
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = stdin.next_line().await? {
        if line.trim() != "go" {
            break;
        }
        let postgres = config.database.url.starts_with("postgres");
        let xacts_0 = if postgres {
            Some(server_xacts(&config.database.url).await?)
        } else {
            None
        };
        let server_cpu_0 = if postgres {
            Some(server_cpu(&config.database.url).await?)
        } else {
            None
        };
        let statements_0 = statements.snapshot();
        let groups_0 = sql.link_group_stats();
        let measured = Instant::now();
        let total = a.rate * a.seconds;
        let window = 1024;
        let inflight = Arc::new(Semaphore::new(window));
        let put_us = Arc::new(Mutex::new(Vec::with_capacity(total as usize)));
        let errors = Arc::new(AtomicU64::new(0));
        let start = tokio::time::Instant::now();
        for i in 0..total {
            tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / a.rate as f64))
                .await;
            let permit = inflight.clone().acquire_owned().await?;
            let (link, put_us, errors) = (link.clone(), put_us.clone(), errors.clone());
            let cluster = targets[i as usize % targets.len()].clone();
            let target = format!("{}/{i}", a.tag);
            tokio::spawn(async move {
                let t = Instant::now();
                let spec = serde_json::json!({ "t": unix_nanos() });
                match link.send(&cluster, &target, KIND, 1, &spec).await {
                    Ok(Some(_)) => {
                        if let Ok(mut v) = put_us.lock() {
                            v.push(t.elapsed().as_micros() as u64);
                        }
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                drop(permit);
            });
        }
        let _all = tokio::time::timeout(
            Duration::from_secs(60),
            inflight.acquire_many(window as u32),
        )
        .await;
        let elapsed = start.elapsed();
        // Wait (bounded) for every item to be acked.
        let drain = Instant::now();
        for _ in 0..600 {
            let depth: i64 = store.outbox_summary().await?.iter().map(|s| s.depth).sum();
            if depth == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut put = put_us.lock().map(|v| v.clone()).unwrap_or_default();
        put.sort_unstable();
        let drained_ms = drain.elapsed().as_millis();
        // Statements of the load and its drain, by kind, most frequent
        // first ("stmt" lines, read by the generator).
        let statements_1 = statements.snapshot();
        let mut by_kind: Vec<(u64, f64, String)> = statements_1
            .into_iter()
            .map(|(label, (n, secs))| {
                let (n0, secs0) = statements_0.get(&label).copied().unwrap_or_default();
                (n - n0, secs - secs0, label)
            })
            .filter(|(n, _, _)| *n > 0)
            .collect();
        by_kind.sort_by_key(|k| std::cmp::Reverse(k.0));
        let statement_total: u64 = by_kind.iter().map(|k| k.0).sum();
        let groups_1 = sql.link_group_stats();
        // Backends that started during the load count from 0; those that
        // ended are missed (the pool keeps its connections).
        let server_cpu_s = match &server_cpu_0 {
            Some(before) => {
                let after = server_cpu(&config.database.url).await?;
                let used: f64 = after
                    .iter()
                    .map(|(pid, s)| s - before.get(pid).copied().unwrap_or(0.0))
                    .sum();
                format!(" server_cpu_s={used:.2}")
            }
            None => String::new(),
        };
        let group_ms: f64 = by_kind
            .iter()
            .filter(|k| k.2.contains("clawfed_link_group") || k.2.starts_with("WITH p AS"))
            .map(|k| k.1 * 1000.0)
            .sum();
        for (n, secs, label) in by_kind.iter().take(12) {
            println!("stmt\t{n}\t{secs:.3}\t{label}");
        }
        // The server publishes a backend's counts when it goes idle, up to
        // 10 s late (PostgreSQL 15): read 11 s after the drain, then the
        // same span again with the hub idle, as the background (other
        // clients of this database, the hub's own timers) to subtract.
        let xacts = match xacts_0 {
            Some(x0) => {
                tokio::time::sleep(Duration::from_secs(11)).await;
                let x1 = server_xacts(&config.database.url).await?;
                let window = measured.elapsed();
                tokio::time::sleep(Duration::from_secs(11)).await;
                let x2 = server_xacts(&config.database.url).await?;
                let background = (x2 - x1) as f64 / 11.0;
                format!(
                    " xacts={} xacts_background_per_s={background:.1} xacts_window_s={:.1}",
                    x1 - x0,
                    window.as_secs_f64()
                )
            }
            None => String::new(),
        };
        println!(
            "done sent={} errors={} rate={:.1} put_p50_us={} put_p99_us={} drained_ms={drained_ms} statements={statement_total} groups={} grouped_writes={} group_ms={group_ms:.1}{server_cpu_s}{xacts}",
            put.len(),
            errors.load(Ordering::Relaxed),
            total as f64 / elapsed.as_secs_f64(),
            quantile(&put, 0.5),
            quantile(&put, 0.99),
            groups_1.groups - groups_0.groups,
            groups_1.writes - groups_0.writes,
        );
    }
    echo_stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), hub.stop()).await;
    Ok(true)
}
