//! Hub replicas on one PostgreSQL (issue 14), in one run: release
//! `clawfed-hub serve` processes (replica A, B and, `--replicas 3`, C) on a
//! fresh database of the server at `CLAWFED_TEST_DATABASE_URL`, sharing one
//! CA directory, and `--spokes` simulated spokes: the product's own
//! `clawfed_spoke::link::Link` each (enrollment with a bootstrap token,
//! mTLS, Hello, heartbeat, the reconnect rule of `spoke/src/link/reconnect.rs`),
//! held by this process
//! ([`clawfed_bench::fleet`], shared with `link-bench`).
//!
//! The spokes dial one address in front of the replicas ([`Front`](front::Front), a TCP
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

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use clawfed_spoke::link::LinkConfig;
use clawfed_spoke::link::tls::HubAddress;
use sqlx::Row as _;

// A binary's root looks for its modules next to it: its parts live in
// `failover_bench/`, named by path.
#[path = "failover_bench/deploy.rs"]
mod deploy;
#[path = "failover_bench/diagnosis.rs"]
mod diagnosis;
#[path = "failover_bench/failover.rs"]
mod failover;
#[path = "failover_bench/front.rs"]
mod front;
#[path = "failover_bench/idle.rs"]
mod idle;
#[path = "failover_bench/pg.rs"]
mod pg;
#[path = "failover_bench/replicas.rs"]
mod replicas;

use deploy::deploys;
use failover::failover;
use idle::idle;
use pg::Pg;

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
    let Some(result) = clawfed_bench::cli::block_on_multi_thread(
        "error: runtime",
        clawfed_bench::cli::until_interrupted(run(args)),
    ) else {
        return std::process::ExitCode::FAILURE;
    };
    clawfed_bench::cli::verdict_exit("failover-bench", result, 2)
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

fn hub_bin(a: &Args) -> anyhow::Result<PathBuf> {
    clawfed_bench::hub_bin_built_by(a.hub_bin.clone(), "cargo build --release -p clawfed-hub")
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
    let part = Part {
        a,
        pg,
        dir,
        hub_bin: &hub_bin,
        profile,
        cores,
    };
    let mut figures = Vec::new();
    if !a.no_idle {
        figures.extend(idle(&part).await?);
    }
    if !a.no_deploy {
        figures.push(deploys(&part).await?);
    }
    figures.extend(failover(&part).await?);
    Ok(figures)
}

/// What every part of the run (idle, deploys, failover) works with.
#[derive(Clone, Copy)]
struct Part<'a> {
    a: &'a Args,
    pg: &'a Pg,
    dir: &'a Path,
    hub_bin: &'a Path,
    profile: &'a str,
    cores: usize,
}

/// One part's replicas, not started yet, and what they share.
struct PartSet {
    set: replicas::ReplicaSet,
    /// Their fresh database's URL and name.
    url: String,
    name: String,
    /// Their link CA (in `<dir>/<part dir>/ca`).
    ca_pem: String,
}

impl Part<'_> {
    /// A fresh database `fbench_<db>_...`, the link CA in `<dir>/<sub>/ca`,
    /// and the replicas' configuration there (`safety_poll_ms`: see
    /// [`replicas::hub_config`]).
    async fn replica_set(
        &self,
        db: &str,
        sub: &str,
        safety_poll_ms: Option<u64>,
    ) -> anyhow::Result<PartSet> {
        let (url, name) = self.pg.create(db).await?;
        let d = self.dir.join(sub);
        let ca = clawfed_hub::link::ca::CertificateAuthority::load_or_create(&d.join("ca"))?;
        let ca_pem = ca.ca_pem().to_owned();
        drop(ca);
        let set = replicas::ReplicaSet {
            hub_bin: self.hub_bin.to_owned(),
            config: replicas::hub_config(&d, &url, self.a, safety_poll_ms)?,
            log_dir: d,
        };
        Ok(PartSet {
            set,
            url,
            name,
            ca_pem,
        })
    }
}

// ---------------------------------------------------------------------------
// The simulated spokes' Link (failover and deploy spokes).

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
