//! Hub replicas on one PostgreSQL (issue 14), in one run: release
//! `clawfed-hub serve` processes (replica A, B and, `--replicas 3`, C) on a
//! fresh database of the server at `CLAWFED_TEST_DATABASE_URL`, sharing one
//! CA directory, and `--spokes` simulated spokes: the product's own
//! `clawfed_spoke::link::Link` each (enrollment with a bootstrap token,
//! mTLS, Hello, heartbeat, the reconnect rule of `spoke/src/link/reconnect.rs`),
//! held by this process
//! ([`clawfed_bench::fleet`], shared with `link-bench`).
//!
//! The spokes dial one address in front of the replicas ([`Front`], a TCP
//! forwarder in this process, as a Service in front of the replicas would
//! be; a spoke may also take every replica's address): each connection goes
//! to A while A accepts, else to the surviving replicas in turn.
//!
//! Figures, each with its goal, verdict and conditions:
//! 1. failover: every spoke holds its session on A; `kill -9` A; each
//!    spoke's time until its Link has a new Welcome (p50/p99), the time
//!    until all have, and the time until the store's `cluster_sessions`
//!    rows show every session live on a surviving replica;
//! 2. cross-replica dispatch, before the kill: work for spokes whose
//!    sessions are on A is enqueued from another process at `--rate`/s,
//!    with `Store::outbox_put` (what replica B's `LinkHandle::send` does:
//!    the put, and a local wake that finds no session on B). Only
//!    PostgreSQL's NOTIFY reaches A. Enqueue → ack from the outbox rows
//!    (ms), and enqueue → arrival at the spoke's applier (µs);
//! 3. idle database transactions per second per replica: `--replicas`
//!    replicas with worker, link and pipeline on and no spoke, on their own
//!    database, `pg_stat_database` (commits + rollbacks) over
//!    `--idle-seconds`; at the default safety polls and with
//!    `--tuned-poll-ms` (`worker.safetyPollMs`, `link.safetyPollMs`,
//!    `watch.safetyPollMs`), both at once on two databases;
//! 4. deploy throughput with one replica and with two on one database:
//!    `--deploys` Agents deployed through the REST API (spread over the
//!    replicas' APIs), driven by the replicas' workers through the real
//!    pipeline to `active`; the spokes' applier answers as a cluster that
//!    does everything at once (namespace, Harness, a ready observation).
//!
//! Exits 2 only when a part cannot complete (a replica that does not
//! start, a spoke that does not come back within `--phase-timeout-seconds`,
//! a failed revision); a missed goal is printed as MISS.
//!
//! `cargo build --release -p clawfed-hub -p clawfed-bench &&
//!  eval "$(scripts/postgres.sh env)" &&
//!  "$CARGO_TARGET_DIR"/release/failover-bench`

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use clawfed_bench::fleet::{
    Fleet, HubProc, KIND, Receipts, http_get, mint_tokens, outbox_latencies, quantile, spread_ms,
    unix_nanos,
};
use clawfed_hub::auth::{self, Role};
use clawfed_hub::client::{ClientResult, HubClient};
use clawfed_hub::store::{self, NewToken, PoolSettings, Store};
use clawfed_spoke::link::LinkConfig;
use clawfed_spoke::link::identity::Identity;
use clawfed_spoke::link::tls::HubAddress;
use sqlx::{Connection, Row as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::Command;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
#[command(name = "failover-bench")]
struct Args {
    /// Spokes held on replica A and failed over.
    #[arg(long, default_value_t = 3_000)]
    spokes: usize,
    /// Hub replicas (2 or 3).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=3))]
    replicas: u8,
    /// Spokes the dispatch phase sends to.
    #[arg(long, default_value_t = 1_000)]
    dispatch_spokes: usize,
    /// Offered dispatch rate, items/s.
    #[arg(long, default_value_t = 1_000)]
    rate: u64,
    /// Seconds of dispatch load.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seconds the idle replicas are measured.
    #[arg(long, default_value_t = 30)]
    idle_seconds: u64,
    /// Seconds between the idle replicas' start and the measurement (idle
    /// backends report their start-up transactions up to 10 s late).
    #[arg(long, default_value_t = 15)]
    idle_warmup_seconds: u64,
    /// The safety polls (worker, link and watch, ms) of the second idle set.
    #[arg(long, default_value_t = 30_000)]
    tuned_poll_ms: u64,
    /// Agents deployed per batch (one replica, then two).
    #[arg(long, default_value_t = 100)]
    deploys: usize,
    /// Deploy requests in flight at once.
    #[arg(long, default_value_t = 16)]
    deploy_concurrency: usize,
    /// Spokes of the deploy phase (revisions go to the first online one).
    #[arg(long, default_value_t = 2)]
    deploy_spokes: usize,
    /// The replicas' link heartbeat (their session leases last 1.5 of it).
    #[arg(long, default_value_t = 10)]
    heartbeat_seconds: u64,
    /// Links started per second when they first enroll and connect.
    #[arg(long, default_value_t = 500)]
    ramp_per_second: u64,
    /// The Links' reconnect backoff cap (s) after failed attempts; a lost
    /// session is first retried within [0, 1 s] (`reconnect.rs`).
    #[arg(long, default_value_t = 30)]
    backoff_max_seconds: u64,
    /// Each replica's link.maxConcurrentHandshakes (and per source: every
    /// simulated spoke dials from 127.0.0.1).
    #[arg(long, default_value_t = 128)]
    max_concurrent_handshakes: usize,
    /// Seconds a phase may take before the run is declared failed.
    #[arg(long, default_value_t = 180)]
    phase_timeout_seconds: u64,
    /// Skip the idle figure.
    #[arg(long)]
    no_idle: bool,
    /// Skip the deploy figure.
    #[arg(long)]
    no_deploy: bool,
    /// The release hub binary (default: next to this binary).
    #[arg(long)]
    hub_bin: Option<PathBuf>,
    /// Keep the run's directory (configs, replica logs).
    #[arg(long)]
    keep_dir: bool,
    /// Each replica's `database.maxConnections`. Default: what fits the
    /// server's `max_connections` with this many replicas plus the bench's
    /// own pools (the hub's default, the worker batch + 16 = 48, times two
    /// replicas under deploy load exceeds PostgreSQL's default 100: the
    /// second replica then cannot start, or requests fail as "database
    /// unavailable").
    #[arg(long)]
    replica_max_connections: Option<u32>,
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
        tokio::select! {
            r = run(args) => r,
            _ = tokio::signal::ctrl_c() => bail!("interrupted"),
        }
    });
    // Spoke tasks may still be winding down; do not wait for them.
    runtime.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("failover-bench: error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

// ---------------------------------------------------------------------------
// PostgreSQL: one fresh database per part, so pg_stat_database counts each
// part's replicas alone.

struct Pg {
    base: String,
    created: std::sync::Mutex<Vec<String>>,
}

impl Pg {
    fn from_env() -> anyhow::Result<Self> {
        let base = std::env::var("CLAWFED_TEST_DATABASE_URL").context(
            "CLAWFED_TEST_DATABASE_URL is not set (eval \"$(scripts/postgres.sh env)\")",
        )?;
        Ok(Self {
            base,
            created: Default::default(),
        })
    }

    async fn admin(&self) -> anyhow::Result<sqlx::PgConnection> {
        Ok(sqlx::PgConnection::connect(&self.base).await?)
    }

    /// A fresh database: its URL and name.
    async fn create(&self, part: &str) -> anyhow::Result<(String, String)> {
        let name = format!("fbench_{part}_{}", uuid::Uuid::new_v4().simple());
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut self.admin().await?)
            .await?;
        if let Ok(mut v) = self.created.lock() {
            v.push(name.clone());
        }
        let mut url = url::Url::parse(&self.base)?;
        url.set_path(&format!("/{name}"));
        Ok((url.to_string(), name))
    }

    async fn version(&self) -> String {
        match self.admin().await {
            Ok(mut c) => sqlx::query("SHOW server_version")
                .fetch_one(&mut c)
                .await
                .and_then(|r| r.try_get::<String, _>(0))
                .unwrap_or_else(|e| format!("unknown ({e})")),
            Err(e) => format!("unknown ({e})"),
        }
    }

    /// Transactions committed and rolled back in database `name` so far.
    async fn xacts(&self, name: &str) -> anyhow::Result<i64> {
        // The statistics snapshot is per transaction: a fresh connection
        // sees the counters as the server last flushed them.
        let row = sqlx::query(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1",
        )
        .bind(name)
        .fetch_one(&mut self.admin().await?)
        .await?;
        Ok(row.try_get::<i64, _>(0)?)
    }

    async fn drop_all(&self) {
        let names = self.created.lock().map(|v| v.clone()).unwrap_or_default();
        let Ok(mut admin) = self.admin().await else {
            return;
        };
        for name in names {
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&mut admin)
            .await;
        }
    }
}

// ---------------------------------------------------------------------------
// Replicas.

/// What every replica of one database shares.
struct ReplicaSet {
    hub_bin: PathBuf,
    config: PathBuf,
    log_dir: PathBuf,
}

/// One running replica.
struct Replica {
    tag: String,
    proc: HubProc,
    id: String,
    link_port: u16,
}

impl Replica {
    fn link_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.link_port))
    }

    fn link_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.link_port)
    }

    fn rest_url(&self) -> String {
        format!("http://{}", self.proc.rest)
    }
}

/// The hub configuration of one database. `safety_poll_ms` sets the
/// worker's, the link's and the watch's safety polls (the defaults when
/// `None`).
fn hub_config(
    dir: &Path,
    db_url: &str,
    a: &Args,
    safety_poll_ms: Option<u64>,
) -> anyhow::Result<PathBuf> {
    let pool = a
        .replica_max_connections
        .map(|n| format!("  maxConnections: {n}\n"))
        .unwrap_or_default();
    std::fs::create_dir_all(dir)?;
    let path = dir.join("hub.yaml");
    let (worker_poll, link_poll) = match safety_poll_ms {
        Some(ms) => (
            format!("worker:\n  safetyPollMs: {ms}\nwatch:\n  safetyPollMs: {ms}\n"),
            format!("  safetyPollMs: {ms}\n"),
        ),
        None => (String::new(), String::new()),
    };
    let yaml = format!(
        "version: 1
database:
  url: \"{db_url}\"
{pool}api:
  restAddr: 127.0.0.1:0
  grpcAddr: 127.0.0.1:0
  metricsAddr: 127.0.0.1:0
link:
  enabled: true
  addr: 127.0.0.1:0
  caDir: \"{ca}\"
  serverNames: [localhost, 127.0.0.1]
  heartbeatSeconds: {hb}
  maxSessions: {max}
  maxConcurrentHandshakes: {hs}
  # Every simulated spoke dials from 127.0.0.1: one source address.
  maxHandshakesPerSource: {hs}
{link_poll}{worker_poll}tunnel:
  enabled: true
  addr: 127.0.0.1:0
pipeline:
  enabled: true
  # No process behind the simulated spokes' Harnesses (see the deploy figure).
  pathProbe: false
  startupStatus: false
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

impl ReplicaSet {
    /// Starts a replica with its link on a free port and waits until its
    /// `/readyz` names it.
    async fn start(&self, tag: &str) -> anyhow::Result<Replica> {
        let link_port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut cmd = Command::new(&self.hub_bin);
        cmd.arg("--config")
            .arg(&self.config)
            .arg("serve")
            .env_remove("CLAWFED_CONFIG")
            .env("CLAWFED_LINK_ADDR", format!("127.0.0.1:{link_port}"));
        let log = self.log_dir.join(format!("{tag}.log"));
        let proc = HubProc::spawn(cmd, &log, false)
            .await
            .with_context(|| format!("{tag} (log {})", log.display()))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let id = loop {
            let answer = http_get(proc.metrics, "/readyz").await.unwrap_or_default();
            let id = answer.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("clawfed-replica")
                    .then(|| v.trim().to_owned())
            });
            if let Some(id) = id.filter(|i| !i.is_empty()) {
                break id;
            }
            if Instant::now() > deadline {
                bail!("{tag}: /readyz named no replica within 30 s: {answer:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        Ok(Replica {
            tag: tag.to_owned(),
            proc,
            id,
            link_port,
        })
    }
}

// ---------------------------------------------------------------------------
// One address in front of the replicas.

/// How long the front waits for `first` to accept a connection.
const FIRST_DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// A TCP forwarder: each connection goes to `first` while it accepts, else
/// to the others, starting with the next one in turn (a Service in front of
/// the replicas, one address for every spoke).
struct Front {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Front {
    async fn start(first: SocketAddr, others: Vec<SocketAddr>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let turn = Arc::new(AtomicUsize::new(0));
        let others = Arc::new(others);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let (turn, others) = (turn.clone(), others.clone());
                tokio::spawn(async move {
                    let k = turn.fetch_add(1, Ordering::Relaxed);
                    let order = std::iter::once(first)
                        .chain((0..others.len()).map(|i| others[(k + i) % others.len()]));
                    for backend in order {
                        // A dead replica refuses at once; a live one whose
                        // accept queue is full drops the SYN, which the
                        // kernel resends after 1 s: `first` gets that long
                        // and more, so a busy ramp does not spill spokes
                        // onto the others.
                        let wait = if backend == first {
                            FIRST_DIAL_TIMEOUT
                        } else {
                            Duration::from_secs(1)
                        };
                        let dialed = tokio::time::timeout(wait, TcpStream::connect(backend)).await;
                        if let Ok(Ok(mut upstream)) = dialed {
                            let _ = client.set_nodelay(true);
                            let _ = upstream.set_nodelay(true);
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                            return;
                        }
                    }
                });
            }
        });
        Ok(Self { addr, task })
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.addr.port())
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------
// Figures.

struct Figure {
    what: String,
    value: String,
    goal: String,
    verdict: &'static str,
    conditions: String,
}

/// PASS, MISS, or PASS at a scale below the goal's (which proves less).
fn verdict(ok: bool, at_goal_scale: bool) -> &'static str {
    match (ok, at_goal_scale) {
        (false, _) => "MISS",
        (true, true) => "PASS",
        (true, false) => "PASS below the goal's scale",
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Live sessions per replica id, from the store's rows.
async fn sessions_by_replica(pool: &sqlx::PgPool) -> anyhow::Result<BTreeMap<String, i64>> {
    let now = chrono::Utc::now().timestamp_millis();
    let rows = sqlx::query(
        "SELECT replica_id, count(*) FROM cluster_sessions WHERE lease_expires_at > $1 GROUP BY replica_id",
    )
    .bind(now)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| Ok((r.try_get::<String, _>(0)?, r.try_get::<i64, _>(1)?)))
        .collect()
}

async fn offline_clusters(pool: &sqlx::PgPool) -> anyhow::Result<i64> {
    Ok(
        sqlx::query("SELECT count(*) FROM clusters WHERE connection_state = 'offline'")
            .fetch_one(pool)
            .await?
            .try_get::<i64, _>(0)?,
    )
}

/// The machine's TCP `ListenOverflows` and `ListenDrops` counters
/// (`/proc/net/netstat`): connections a full accept queue dropped (their
/// SYN or final ACK), which the client only retries after its SYN
/// retransmission timeout (1 s, then 3 s, ...). Machine-wide.
fn listen_drops() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return (0, 0);
    };
    let field = |name: &str| {
        names
            .split_whitespace()
            .position(|n| n == name)
            .and_then(|i| values.split_whitespace().nth(i))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("ListenOverflows"), field("ListenDrops"))
}

/// A replica's link handshakes by result and sessions shed, from its
/// `/metrics` (what refused or gave up connections on the hub side).
async fn hub_refusals(replica: &Replica) -> BTreeMap<String, f64> {
    let text = replica.proc.scrape().await.unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        if let Some(rest) = key.strip_prefix("occ_link_handshakes_total{result=\"") {
            out.insert(format!("handshake {}", rest.trim_end_matches("\"}")), value);
        } else if key == "occ_link_sessions_shed_total" {
            out.insert("sessions shed".into(), value);
        }
    }
    out
}

/// `after - before` per key, the keys that moved.
fn moved(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> String {
    let parts: Vec<String> = after
        .iter()
        .map(|(k, v)| (k, v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .map(|(k, d)| format!("{k} {d:.0}"))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// Where the failover time of the spokes went, from each Link's status:
/// attempts after the kill, the wait from losing the session to the first
/// attempt, from that attempt to the Welcome, and why attempts failed.
fn failover_diagnosis(
    fleet: &Fleet,
    attempts_before: &[u64],
    killed: tokio::time::Instant,
) -> String {
    let mut attempts = Vec::new();
    let mut first_wait = Vec::new();
    let mut to_welcome = Vec::new();
    let mut lost_after = Vec::new();
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for (s, before) in fleet.spokes.iter().zip(attempts_before) {
        let st = s.status.borrow();
        let n = st.attempts - before;
        attempts.push(n);
        if let Some(lost) = st.session_lost.filter(|l| *l > killed) {
            lost_after.push((lost - killed).as_millis() as u64);
        }
        if let (Some(lost), Some(first)) = (st.session_lost, st.first_attempt_after_loss) {
            first_wait.push((first - lost).as_millis() as u64);
            if let Some(w) = st.last_welcome.filter(|w| *w > killed) {
                to_welcome.push(w.saturating_duration_since(first).as_millis() as u64);
            }
        }
        if n > 1
            && let Some(r) = &st.last_failure
        {
            // The reason's kind, without addresses and details.
            let kind: String = r
                .split([':', '('])
                .next()
                .unwrap_or(r)
                .chars()
                .take(48)
                .collect();
            *reasons.entry(kind).or_default() += 1;
        }
    }
    attempts.sort_unstable();
    first_wait.sort_unstable();
    to_welcome.sort_unstable();
    lost_after.sort_unstable();
    let retried = attempts.iter().filter(|n| **n > 1).count();
    let reasons: Vec<String> = reasons.iter().map(|(k, v)| format!("{v}× {k}")).collect();
    format!(
        "attempts per spoke p50 / p99 / max {} / {} / {} ({retried} spokes needed more than one); kill → session lost p50 / p99 / max {}; session lost → first attempt p50 / p99 / max {}; first attempt → Welcome p50 / p99 / max {}; last failure of the retried: {}",
        quantile(&attempts, 0.5),
        quantile(&attempts, 0.99),
        attempts.last().copied().unwrap_or(0),
        spread_ms(&lost_after),
        spread_ms(&first_wait),
        spread_ms(&to_welcome),
        if reasons.is_empty() {
            "none".into()
        } else {
            reasons.join(", ")
        }
    )
}

fn hub_bin(a: &Args) -> anyhow::Result<PathBuf> {
    let bin = match &a.hub_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("exe dir")?
            .join("clawfed-hub"),
    };
    if !bin.exists() {
        bail!(
            "{} not found: cargo build --release -p clawfed-hub",
            bin.display()
        );
    }
    Ok(bin)
}

/// The `database.maxConnections` of each replica: the server's
/// connection slots (less the superuser reserve and 24 for the bench's own
/// pools and other clients of the server) shared by the replicas, one
/// more connection each for LISTEN; at most the hub's default.
async fn replica_pool(pg: &Pg, replicas: u8) -> anyhow::Result<u32> {
    let mut admin = pg.admin().await?;
    let row = sqlx::query(
        "SELECT current_setting('max_connections')::int, \
         current_setting('superuser_reserved_connections')::int",
    )
    .fetch_one(&mut admin)
    .await?;
    let slots = row.try_get::<i32, _>(0)?.max(0) as u32;
    let reserved = row.try_get::<i32, _>(1)?.max(0) as u32;
    let share = slots.saturating_sub(reserved + 24) / u32::from(replicas.max(1));
    Ok(share.saturating_sub(1).clamp(4, 48))
}

async fn run(mut a: Args) -> anyhow::Result<bool> {
    let pg = Pg::from_env()?;
    if a.replica_max_connections.is_none() {
        a.replica_max_connections = Some(replica_pool(&pg, a.replicas.max(2)).await?);
    }
    let tmp = tempfile::tempdir()?;
    let dir = if a.keep_dir {
        tmp.keep()
    } else {
        tmp.path().to_owned()
    };
    println!("failover-bench: run directory {}", dir.display());
    let result = run_parts(&a, &pg, &dir).await;
    pg.drop_all().await;
    let figures = result?;
    let hub_bin = hub_bin(&a)?;
    println!();
    println!(
        "failover benchmark: {} replicas (hub {}, {}; database.maxConnections {} each), generator {}, {} cores, PostgreSQL {}",
        a.replicas,
        hub_bin.display(),
        clawfed_bench::profile_of(&hub_bin),
        a.replica_max_connections.unwrap_or(0),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        pg.version().await,
    );
    println!(
        "spokes: the product's clawfed_spoke::link::Link, in this process, dialing one address in front of the replicas (a TCP forwarder here, as a Service would be)"
    );
    // A missed goal is a figure (MISS), not a failed run: the default
    // idle setting is printed as the "before" and misses by design.
    for f in &figures {
        println!("{}: {}", f.what, f.value);
        println!("    goal {}: {}", f.goal, f.verdict);
        println!("    conditions: {}", f.conditions);
    }
    Ok(true)
}

async fn run_parts(a: &Args, pg: &Pg, dir: &Path) -> anyhow::Result<Vec<Figure>> {
    let hub_bin = hub_bin(a)?;
    let profile = clawfed_bench::profile_of(&hub_bin);
    let cores = std::thread::available_parallelism().map_or(0, |p| p.get());
    let mut figures = Vec::new();
    if !a.no_idle {
        figures.extend(idle(a, pg, dir, &hub_bin, profile, cores).await?);
    }
    if !a.no_deploy {
        figures.push(deploys(a, pg, dir, &hub_bin, profile, cores).await?);
    }
    figures.extend(failover(a, pg, dir, &hub_bin, profile, cores).await?);
    Ok(figures)
}

// ---------------------------------------------------------------------------
// 3. Idle.

async fn idle(
    a: &Args,
    pg: &Pg,
    dir: &Path,
    hub_bin: &Path,
    profile: &str,
    cores: usize,
) -> anyhow::Result<Vec<Figure>> {
    let sets = [("default", None), ("tuned", Some(a.tuned_poll_ms))];
    let mut running = Vec::new();
    for (label, poll) in sets {
        let (url, name) = pg.create(&format!("idle_{label}")).await?;
        let d = dir.join(format!("idle-{label}"));
        clawfed_hub::link::ca::CertificateAuthority::load_or_create(&d.join("ca"))?;
        let set = ReplicaSet {
            hub_bin: hub_bin.to_owned(),
            config: hub_config(&d, &url, a, poll)?,
            log_dir: d.clone(),
        };
        let mut replicas = Vec::new();
        for i in 0..a.replicas {
            replicas.push(set.start(&format!("idle-{label}-{i}")).await?);
        }
        running.push((label, poll, name, replicas));
    }
    println!(
        "failover-bench: idle: {} replicas at the default safety polls and {} at {} ms, no spoke; warm-up {} s, then {} s",
        a.replicas, a.replicas, a.tuned_poll_ms, a.idle_warmup_seconds, a.idle_seconds
    );
    // Start-up work (migrations, CA import) is not idle work.
    tokio::time::sleep(Duration::from_secs(a.idle_warmup_seconds)).await;
    let mut before = Vec::new();
    for (_, _, name, _) in &running {
        before.push(pg.xacts(name).await?);
    }
    let t0 = Instant::now();
    // The measured window: nothing of this process touches these databases.
    tokio::time::sleep(Duration::from_secs(a.idle_seconds)).await;
    let wall = t0.elapsed().as_secs_f64();
    let mut figures = Vec::new();
    for ((label, poll, name, replicas), x0) in running.iter().zip(before) {
        let x1 = pg.xacts(name).await?;
        let per = (x1 - x0) as f64 / wall / replicas.len() as f64;
        let setting = match poll {
            None => format!(
                "the default safety polls (worker {} ms, link {} ms, watch {} ms; the default)",
                clawfed_hub::worker::DEFAULT_SAFETY_POLL.as_millis(),
                clawfed_hub::watch::WatchSettings::default().safety_poll_ms,
                clawfed_hub::link::LinkConfig::default()
                    .poll_interval
                    .as_millis()
            ),
            Some(ms) => format!(
                "worker.safetyPollMs = link.safetyPollMs = watch.safetyPollMs = {ms} (not the default)"
            ),
        };
        figures.push(Figure {
            what: format!("idle database transactions per replica, {label}"),
            value: format!(
                "{per:.2}/s ({} in {wall:.1} s over {} replicas; {setting})",
                x1 - x0,
                replicas.len()
            ),
            goal: "≤ 1/s per replica".into(),
            verdict: verdict(per <= 1.0, true),
            conditions: format!(
                "pg_stat_database xact_commit + xact_rollback of the replicas' own database; worker, link (heartbeat {} s: lease renewal and sweep every {} s), pipeline and tunnel on; no spoke; hub {profile}; {cores} cores; load average {}",
                a.heartbeat_seconds,
                a.heartbeat_seconds as f64 / 2.0,
                load_average()
            ),
        });
    }
    drop(running);
    Ok(figures)
}

// ---------------------------------------------------------------------------
// 4. Deploy throughput, one replica vs two.

/// Revisions by phase in the deploy database.
async fn phases(pool: &sqlx::PgPool) -> anyhow::Result<BTreeMap<String, i64>> {
    let rows = sqlx::query("SELECT phase, count(*) FROM agent_revisions GROUP BY phase")
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get::<String, _>(0)?, r.try_get::<i64, _>(1)?)))
        .collect()
}

/// Deploys `names` (drafts created first, not timed) spread over the
/// replicas' APIs and waits until `active_before + names.len()` revisions
/// are active. Returns revisions/s from the first deploy request to the
/// last one seen active (polled every 50 ms) and the time.
async fn deploy_batch(
    a: &Args,
    replicas: &[HubClient],
    pool: &sqlx::PgPool,
    names: &[String],
    active_before: i64,
) -> anyhow::Result<(f64, Duration)> {
    use futures::StreamExt;
    let created: Vec<ClientResult<serde_json::Value>> =
        futures::stream::iter(names.iter().enumerate())
            .map(|(i, n)| async move {
                let body = serde_json::json!({
                    "name": n,
                    "spec": { "harnessKind": "embedded-openclaw", "image": "bench:1" }
                });
                replicas[i % replicas.len()]
                    .post("/namespaces/bench/agents", &body)
                    .await
            })
            .buffer_unordered(a.deploy_concurrency)
            .collect()
            .await;
    for r in created {
        r?;
    }
    let started = Instant::now();
    let deployed: Vec<ClientResult<serde_json::Value>> =
        futures::stream::iter(names.iter().enumerate())
            .map(|(i, n)| async move {
                let path = format!("/namespaces/bench/agents/{n}/deploy");
                replicas[i % replicas.len()]
                    .post(&path, &serde_json::json!({}))
                    .await
            })
            .buffer_unordered(a.deploy_concurrency)
            .collect()
            .await;
    for r in deployed {
        r?;
    }
    let want = active_before + names.len() as i64;
    let limit = Duration::from_secs(a.phase_timeout_seconds);
    loop {
        let p = phases(pool).await?;
        let active = p.get("active").copied().unwrap_or(0);
        if active >= want {
            let took = started.elapsed();
            return Ok((names.len() as f64 / took.as_secs_f64(), took));
        }
        let failed = p.get("failed").copied().unwrap_or(0);
        if failed > 0 || started.elapsed() > limit {
            let reason: Option<String> =
                sqlx::query("SELECT reason FROM agent_revisions WHERE phase = 'failed' LIMIT 1")
                    .fetch_optional(pool)
                    .await?
                    .and_then(|r| r.try_get(0).ok());
            bail!(
                "deploys: {active} of {want} active after {:?}, phases {p:?}; a failure: {reason:?}",
                started.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn deploys(
    a: &Args,
    pg: &Pg,
    dir: &Path,
    hub_bin: &Path,
    profile: &str,
    cores: usize,
) -> anyhow::Result<Figure> {
    let (url, _) = pg.create("deploy").await?;
    let d = dir.join("deploy");
    let ca = clawfed_hub::link::ca::CertificateAuthority::load_or_create(&d.join("ca"))?;
    let ca_pem = ca.ca_pem().to_owned();
    drop(ca);
    let set = ReplicaSet {
        hub_bin: hub_bin.to_owned(),
        config: hub_config(&d, &url, a, None)?,
        log_dir: d.clone(),
    };
    let one = set.start("deploy-1").await?;
    let store = store::connect(&url).await?;
    let pool = sqlx::PgPool::connect(&url).await?;
    let minted = auth::mint_token();
    store
        .create_token(&NewToken {
            name: "failover-bench".into(),
            namespace: None,
            role: Role::InstallationAdmin,
            hash: minted.hash,
            expires_at: None,
        })
        .await?;
    let names: Vec<String> = (0..a.deploy_spokes.max(1))
        .map(|i| format!("deploy-{i}"))
        .collect();
    let tokens = mint_tokens(&store, &names).await?;
    drop(store);
    let stop = CancellationToken::new();
    let _stop_guard = stop.clone().drop_guard();
    let config = link_config(&one.link_url(), &ca_pem, a)?;
    let fleet = Fleet::start(
        &config,
        names.into_iter().zip(tokens.into_iter().map(Err)).collect(),
        &Arc::new(Receipts::default()),
        a.ramp_per_second,
        &stop,
    );
    fleet
        .wait(
            Duration::from_secs(a.phase_timeout_seconds),
            "the deploy spokes connected",
            |f| f.connected() == f.len(),
        )
        .await?;
    let rest = HubClient::new(&one.rest_url(), Some(minted.secret))?;
    let _: serde_json::Value = rest
        .post("/namespaces", &serde_json::json!({ "name": "bench" }))
        .await?;
    println!(
        "failover-bench: deploy: {} Agents through 1 replica",
        a.deploys
    );
    let first: Vec<String> = (0..a.deploys).map(|i| format!("one{i:04}")).collect();
    let (rate1, took1) = deploy_batch(a, std::slice::from_ref(&rest), &pool, &first, 0).await?;
    let load1 = load_average();
    let two = set.start("deploy-2").await?;
    println!(
        "failover-bench: deploy: {} Agents through 2 replicas",
        a.deploys
    );
    let second: Vec<String> = (0..a.deploys).map(|i| format!("two{i:04}")).collect();
    let (rate2, took2) = deploy_batch(
        a,
        &[rest.clone(), rest.at(&two.rest_url())],
        &pool,
        &second,
        a.deploys as i64,
    )
    .await?;
    let load2 = load_average();
    fleet.stop(&stop).await;
    pool.close().await;
    drop((one, two));
    Ok(Figure {
        what: "deploy throughput, two replicas ÷ one replica".into(),
        value: format!(
            "{:.2} (revisions active per second: two replicas {rate2:.1}/s ({} in {took2:.1?}) ÷ one replica {rate1:.1}/s ({} in {took1:.1?}))",
            rate2 / rate1,
            a.deploys,
            a.deploys
        ),
        goal: "- (reported)".into(),
        verdict: "reported",
        conditions: format!(
            "deploy → active through the real pipeline (placement, namespace, Harness, readiness, activation; Gateways off, path probe and startup status off: no process behind the simulated spokes), {} requests in flight spread over the replicas' REST APIs; the spokes' sessions on replica 1; the replicas' workers share the queue; hub {profile}; {cores} cores; load average {load1} (one) / {load2} (two)",
            a.deploy_concurrency
        ),
    })
}

// ---------------------------------------------------------------------------
// 1 and 2. Failover and cross-replica dispatch.

fn link_config(url: &str, ca_pem: &str, a: &Args) -> anyhow::Result<LinkConfig> {
    Ok(LinkConfig {
        hub: HubAddress::parse(url).map_err(anyhow::Error::msg)?,
        ca_pem: ca_pem.to_owned(),
        cluster_name: String::new(),
        bootstrap_token: None,
        version: "failover-bench".into(),
        capabilities: vec!["applier:bench".into()],
        // The spoke binary's first delay.
        backoff_min: Duration::from_millis(200),
        backoff_max: Duration::from_secs(a.backoff_max_seconds),
    })
}

async fn failover(
    a: &Args,
    pg: &Pg,
    dir: &Path,
    hub_bin: &Path,
    profile: &str,
    cores: usize,
) -> anyhow::Result<Vec<Figure>> {
    let phase = Duration::from_secs(a.phase_timeout_seconds);
    let (url, _) = pg.create("main").await?;
    let d = dir.join("main");
    let ca = clawfed_hub::link::ca::CertificateAuthority::load_or_create(&d.join("ca"))?;
    let ca_pem = ca.ca_pem().to_owned();
    drop(ca);
    let set = ReplicaSet {
        hub_bin: hub_bin.to_owned(),
        config: hub_config(&d, &url, a, None)?,
        log_dir: d.clone(),
    };
    // A first: it imports the CA the others load.
    let mut replicas = Vec::new();
    for tag in ["hub-a", "hub-b", "hub-c"]
        .into_iter()
        .take(a.replicas as usize)
    {
        replicas.push(set.start(tag).await?);
    }
    let front = Front::start(
        replicas[0].link_addr(),
        replicas[1..].iter().map(Replica::link_addr).collect(),
    )
    .await?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await?;

    // Every spoke enrolls and connects through the front: to A.
    let n = a.spokes;
    let store: Arc<dyn Store> = Arc::new(
        store::connect_with(
            &url,
            PoolSettings {
                max_connections: 16,
                ..PoolSettings::default()
            },
        )
        .await?,
    );
    let tag = format!("{:08x}", rand::random::<u32>());
    let names: Vec<String> = (0..n).map(|i| format!("f{tag}-{i:05}")).collect();
    let tokens = mint_tokens(store.as_ref(), &names).await?;
    let spokes: Vec<(String, Result<Identity, String>)> =
        names.into_iter().zip(tokens.into_iter().map(Err)).collect();
    let stop = CancellationToken::new();
    let _stop_guard = stop.clone().drop_guard();
    let receipts = Arc::new(Receipts::default());
    println!(
        "failover-bench: {n} spokes enroll and connect through the front at {}/s",
        a.ramp_per_second
    );
    let ramp = Instant::now();
    let fleet = Fleet::start(
        &link_config(&front.url(), &ca_pem, a)?,
        spokes,
        &receipts,
        a.ramp_per_second,
        &stop,
    );
    fleet
        .wait(phase, "every spoke connected", |f| f.connected() == n)
        .await?;
    let a_id = replicas[0].id.clone();
    let deadline = Instant::now() + phase;
    loop {
        let by = sessions_by_replica(&pool).await?;
        if by.get(&a_id).copied().unwrap_or(0) == n as i64 && by.len() == 1 {
            break;
        }
        if Instant::now() > deadline {
            bail!("the store does not show all {n} sessions on hub-a: {by:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "failover-bench: {n} sessions on hub-a ({a_id}) after {:.1?}",
        ramp.elapsed()
    );

    // 2. Dispatch from another process to the sessions on A.
    let m = a.dispatch_spokes.min(n).max(1);
    let clusters: Vec<String> = fleet.spokes[..m]
        .iter()
        .map(|s| s.identity.current().map(|i| i.cluster_id))
        .collect::<Option<_>>()
        .context("an enrolled spoke without identity")?;
    if let Ok(mut v) = receipts.us.lock() {
        v.clear();
    }
    let total = a.rate * a.seconds;
    println!(
        "failover-bench: dispatch: {total} items at {}/s to {m} spokes on hub-a, put from this process",
        a.rate
    );
    let window = 1024;
    let inflight = Arc::new(Semaphore::new(window));
    let errors = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    for i in 0..total {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / a.rate as f64)).await;
        let permit = inflight.clone().acquire_owned().await?;
        let (store, errors) = (store.clone(), errors.clone());
        let cluster = clusters[i as usize % m].clone();
        let target = format!("{tag}/{i}");
        tokio::spawn(async move {
            let spec = serde_json::json!({ "t": unix_nanos() }).to_string();
            if !matches!(
                store.outbox_put(&cluster, &target, KIND, 1, &spec).await,
                Ok(Some(_))
            ) {
                errors.fetch_add(1, Ordering::Relaxed);
            }
            drop(permit);
        });
    }
    let _all = tokio::time::timeout(phase, inflight.acquire_many(window as u32)).await;
    let offered_in = start.elapsed();
    let achieved = total as f64 / offered_in.as_secs_f64();
    // Every item acked (bounded).
    let drain = Instant::now();
    let pattern = format!("{tag}/%");
    loop {
        let left: i64 =
            sqlx::query("SELECT count(*) FROM outbox WHERE target LIKE $1 AND acked_at IS NULL")
                .bind(&pattern)
                .fetch_one(&pool)
                .await?
                .try_get(0)?;
        if left == 0 || drain.elapsed() > Duration::from_secs(60) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut acked = outbox_latencies(&url, &tag).await?;
    acked.sort_unstable();
    let mut arrived = receipts.us.lock().map(|v| v.clone()).unwrap_or_default();
    arrived.sort_unstable();
    let put_errors = errors.load(Ordering::Relaxed);
    let unacked = (total as usize).saturating_sub(acked.len());
    let p99 = quantile(&acked, 0.99);
    let dispatch = Figure {
        what: format!(
            "cross-replica dispatch→ack p50 / p99 ({} items acked)",
            acked.len()
        ),
        value: format!(
            "{} / {p99} ms enqueue→ack row (ms resolution); enqueue→spoke applier p50 / p99 {:.2} / {:.2} ms; offered {}/s, achieved {achieved:.0}/s, {put_errors} put errors, {unacked} unacked",
            quantile(&acked, 0.5),
            quantile(&arrived, 0.5) as f64 / 1000.0,
            quantile(&arrived, 0.99) as f64 / 1000.0,
            a.rate,
        ),
        goal: "p99 ≤ 50 ms at 1,000 items/s".into(),
        verdict: verdict(p99 <= 50 && unacked == 0 && put_errors == 0, a.rate >= 1000),
        conditions: format!(
            "enqueued with Store::outbox_put from this process (what replica B's LinkHandle::send does; hub-a is woken by PostgreSQL NOTIFY only) for {m} spokes whose sessions are on hub-a, {} other idle spokes connected; {} replicas; hub {profile}; {cores} cores; load average {}",
            n - m,
            a.replicas,
            load_average()
        ),
    };

    // 1. kill -9 A.
    let before = fleet.totals();
    let mut replicas = replicas.into_iter();
    let hub_a = replicas.next().context("hub-a")?;
    let survivors: Vec<Replica> = replicas.collect();
    let attempts_before: Vec<u64> = fleet
        .spokes
        .iter()
        .map(|s| s.status.borrow().attempts)
        .collect();
    let mut refusals_before = Vec::new();
    for r in &survivors {
        refusals_before.push(hub_refusals(r).await);
    }
    let drops_before = listen_drops();
    println!("failover-bench: kill -9 hub-a (pid {})", hub_a.proc.pid);
    let killed = tokio::time::Instant::now();
    hub_a.proc.kill9().await?;
    let mut clients_all = None;
    let mut store_all = None;
    let mut max_offline = 0i64;
    let survivor_ids: Vec<String> = survivors.iter().map(|r| r.id.clone()).collect();
    let mut last = BTreeMap::new();
    // When each Link was first seen without its session (50 ms polls).
    let mut lost: Vec<Option<Duration>> = vec![None; n];
    while clients_all.is_none() || store_all.is_none() {
        for (s, l) in fleet.spokes.iter().zip(lost.iter_mut()) {
            if l.is_none() && (!s.connected() || s.welcomed_after(killed).is_some()) {
                *l = Some(killed.elapsed());
            }
        }
        if killed.elapsed() > phase {
            bail!(
                "failover: after {phase:?}: {} of {n} spokes welcomed again, sessions {last:?}; {}",
                fleet
                    .spokes
                    .iter()
                    .filter(|s| s.welcomed_after(killed).is_some())
                    .count(),
                fleet.summary()
            );
        }
        if clients_all.is_none()
            && fleet
                .spokes
                .iter()
                .all(|s| s.welcomed_after(killed).is_some())
        {
            clients_all = Some(killed.elapsed());
        }
        if store_all.is_none() {
            last = sessions_by_replica(&pool).await?;
            let on_survivors: i64 = survivor_ids
                .iter()
                .map(|id| last.get(id).copied().unwrap_or(0))
                .sum();
            if on_survivors == n as i64 {
                store_all = Some(killed.elapsed());
            }
        }
        max_offline = max_offline.max(offline_clusters(&pool).await?);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (clients_all, store_all) = (
        clients_all.unwrap_or_default(),
        store_all.unwrap_or_default(),
    );
    let mut per_spoke: Vec<u64> = fleet
        .spokes
        .iter()
        .filter_map(|s| s.welcomed_after(killed))
        .map(|d| d.as_millis() as u64)
        .collect();
    per_spoke.sort_unstable();
    let mut lost: Vec<u64> = lost
        .into_iter()
        .flatten()
        .map(|d| d.as_millis() as u64)
        .collect();
    lost.sort_unstable();
    let after = fleet.totals();
    let drops_after = listen_drops();
    let mut refused = Vec::new();
    for (r, before) in survivors.iter().zip(&refusals_before) {
        refused.push(format!(
            "{}: {}",
            r.tag,
            moved(before, &hub_refusals(r).await)
        ));
    }
    let diagnosis = format!(
        "{}; hub side: {}; kernel accept queue (machine-wide) ListenOverflows {} ListenDrops {}",
        failover_diagnosis(&fleet, &attempts_before, killed),
        refused.join("; "),
        drops_after.0 - drops_before.0,
        drops_after.1 - drops_before.1,
    );
    println!("failover-bench: where the failover time went: {diagnosis}");
    let spread: Vec<String> = survivors
        .iter()
        .map(|r| format!("{} {}", r.tag, last.get(&r.id).copied().unwrap_or(0)))
        .collect();
    let all = clients_all.max(store_all);
    let failover = Figure {
        what: format!("failover of {n} spokes after kill -9 of their replica"),
        value: format!(
            "all back in {all:.1?} (every Link welcomed again {clients_all:.1?}; every session row live on a survivor {store_all:.1?}); per spoke p50 / p99 / max {} (its Link saw the session end after p50 / p99 {} / {} ms); sessions now {}; {} failed attempts and {} go-aways (the {n} broken sessions included); clusters shown offline at most {max_offline}; a last failure: {}; {diagnosis}",
            spread_ms(&per_spoke),
            quantile(&lost, 0.5),
            quantile(&lost, 0.99),
            spread.join(", "),
            after.failures - before.failures,
            after.go_aways - before.go_aways,
            after.last_failure.as_deref().unwrap_or("none"),
        ),
        goal: "all 3,000 back in ≤ 10 s".into(),
        verdict: verdict(all <= Duration::from_secs(10), n >= 3000),
        conditions: format!(
            "{} replicas on one PostgreSQL; the spokes dial one front address (TCP forwarder in this process) that sends to hub-a while it accepts, else to the survivors in turn; reconnect: a lost session retries within [0, 1 s], failed attempts back off 200 ms..{} s; heartbeat {} s; maxConcurrentHandshakes {} per replica; store polled every 50 ms; hub {profile}; {cores} cores; load average {}",
            a.replicas,
            a.backoff_max_seconds,
            a.heartbeat_seconds,
            a.max_concurrent_handshakes,
            load_average()
        ),
    };
    fleet.stop(&stop).await;
    pool.close().await;
    drop(front);
    drop(survivors);
    Ok(vec![failover, dispatch])
}
