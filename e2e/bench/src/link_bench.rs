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

#[path = "link_bench/database.rs"]
mod database;
#[path = "link_bench/inproc_hub.rs"]
mod inproc_hub;
#[path = "link_bench/measure.rs"]
mod measure;
#[path = "link_bench/report.rs"]
mod report;
#[path = "link_bench/run.rs"]
mod run;
#[path = "link_bench/setup.rs"]
mod setup;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use inproc_hub::inproc_hub;
use run::run;

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
    let run = async move {
        match args.mode {
            Some(Mode::InprocHub(a)) => inproc_hub(a).await,
            None => clawfed_bench::cli::until_interrupted(run(args.run)).await,
        }
    };
    let Some(result) = clawfed_bench::cli::block_on_multi_thread("error: runtime", run) else {
        return std::process::ExitCode::FAILURE;
    };
    clawfed_bench::cli::verdict_exit("link-bench", result, 1)
}
