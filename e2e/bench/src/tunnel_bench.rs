//! The data path's figures (issue 11): a Gateway's connection through the
//! hub's tunnel ingress, the spoke's outbound link and the spoke's dial to
//! a Harness, side by side with direct loopback TCP to the same Harness
//! server (the physical reference), in one run.
//!
//! Three processes of this binary, so each side's RSS is its own:
//! - `--role hub`: an in-process `clawfed_hub::server` on a SQLite file in
//!   the run's directory, link and tunnel ingress on `127.0.0.1:0`, no
//!   worker and no pipeline. It seeds the Agents' revisions on cluster
//!   `bench` in phase `waiting-ready` as `tests/tests/tunnel.rs` does
//!   (REST deploy, then placement and phase through the store), with their
//!   transport credentials, and writes the addresses, a bootstrap token and
//!   `(token, authority, target)` per revision to `hub.json`.
//! - `--role spoke`: the product's `clawfed_spoke::link::Link` with
//!   `Tunnels`, enrolled with that token. The only stand-in is the
//!   dialer's target → address lookup ([`MapDialer`](clawfed_tests::tunnel::MapDialer), from `map.json`),
//!   which replaces the EndpointSlice read; it dials like the product's
//!   (`TCP_NODELAY`).
//! - the driver (default): the local Harness servers (echo, byte source,
//!   sink, slow sink) and the load, as a Gateway would make it
//!   (`clawfed_tests::tunnel::connect`: HTTP/1.1 CONNECT with the
//!   transport credential).
//!
//! Phases, in the order they run (printed with the figure's number):
//! 3. connection setup: CONNECT → 200 → a 1-byte echo, one at a time;
//! 2. a 1 KiB request/response over an open connection, idle otherwise;
//! 4. `--connections` tunneled connections over `--revisions` revisions
//!    held open: hub and spoke RSS per connection, then all echo again
//!    (before the bulk phases, so their freed buffers do not hide growth);
//! 1. one connection's throughput: Harness → client, client → Harness and
//!    echo;
//! 5. slow-receiver isolation: `--isolation-streams` uploads to a fast
//!    Harness with and without `--slow-receivers` connections whose
//!    Harness reads `--slow-rate` bytes/s, alternating, medians.
//!
//! `cargo run --release -p clawfed-bench --bin tunnel-bench`

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, ValueEnum};
use clawfed_tests::tunnel::Ingress;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};

// A binary's root looks for its modules next to it: its parts live in
// `tunnel_bench/`, named by path.
#[path = "tunnel_bench/driver.rs"]
mod driver;
#[path = "tunnel_bench/harnesses.rs"]
mod harnesses;
#[path = "tunnel_bench/hub_role.rs"]
mod hub_role;
#[path = "tunnel_bench/measure.rs"]
mod measure;
#[path = "tunnel_bench/observe.rs"]
mod observe;
#[path = "tunnel_bench/phases.rs"]
mod phases;
#[path = "tunnel_bench/role_proc.rs"]
mod role_proc;
#[path = "tunnel_bench/spoke_role.rs"]
mod spoke_role;
#[path = "tunnel_bench/traffic.rs"]
mod traffic;

use driver::driver;
use hub_role::hub_role;
use spoke_role::spoke_role;

const CLUSTER: &str = "bench";
const TENANT: &str = "bench";
/// Agents with a special Harness; the others echo.
const SOURCE: &str = "source";
const SINK: &str = "sink";
const SLOW: &str = "slow";
/// Buffer of the Harness servers and the driver's bulk reads and writes.
const BULK: usize = 64 * 1024;
const KIB: usize = 1024;
const MIB: u64 = 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Role {
    Driver,
    Hub,
    Spoke,
}

#[derive(Debug, Clone, Parser)]
#[command(name = "tunnel-bench")]
struct Args {
    /// Which process this is; the driver starts the others.
    #[arg(long, value_enum, default_value_t = Role::Driver)]
    role: Role,
    /// The run's directory (hub and spoke roles; given by the driver).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Echoing revisions the held connections spread over.
    #[arg(long, default_value_t = 100)]
    revisions: usize,
    /// Tunneled connections held open at once (phase 4).
    #[arg(long, default_value_t = 1000)]
    connections: usize,
    /// Connections opened at a time while building up phase 4.
    #[arg(long, default_value_t = 50)]
    open_concurrency: usize,
    /// Seconds the held connections stay open before they echo again.
    #[arg(long, default_value_t = 5)]
    hold_seconds: u64,
    /// MiB moved one way per throughput sample (phase 1).
    #[arg(long, default_value_t = 1024)]
    one_way_mib: u64,
    /// MiB echoed per echo throughput sample (phase 1).
    #[arg(long, default_value_t = 256)]
    echo_mib: u64,
    /// Samples per throughput figure, tunnel and direct alternating; the
    /// median is reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// 1 KiB request/response samples per path (phase 2).
    #[arg(long, default_value_t = 2000)]
    latency_samples: usize,
    /// Connection setups per path (phase 3).
    #[arg(long, default_value_t = 500)]
    setup_samples: usize,
    /// Concurrent uploads whose throughput phase 5 compares.
    #[arg(long, default_value_t = 4)]
    isolation_streams: usize,
    /// MiB each of them uploads per round.
    #[arg(long, default_value_t = 128)]
    isolation_mib: u64,
    /// Rounds with and without the slow receivers (alternating).
    #[arg(long, default_value_t = 5)]
    isolation_rounds: usize,
    /// Connections to the slow Harness during the "with" rounds.
    #[arg(long, default_value_t = 1)]
    slow_receivers: usize,
    /// Bytes per second the slow Harness reads from each connection.
    #[arg(long, default_value_t = 1024)]
    slow_rate: usize,
    /// Phases to run (figure numbers, comma-separated); they run in the
    /// order 3, 2, 4, 1, 5 whatever the order given.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5")]
    phases: Vec<u8>,
    /// Keep the run's directory (database, CA, role logs) here.
    #[arg(long)]
    keep_dir: Option<PathBuf>,
}

/// What the hub role tells the others.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct HubInfo {
    link_url: String,
    ca_pem: String,
    ingress: SocketAddr,
    /// The CA of the ingress' TLS certificate (`None`: plain).
    ingress_ca: Option<String>,
    metrics: SocketAddr,
    bootstrap_token: String,
    revisions: Vec<RevInfo>,
}

impl HubInfo {
    /// The ingress as a Gateway reaches it (TLS when the hub serves it).
    fn ingress(&self) -> Ingress {
        Ingress {
            addr: self.ingress,
            ca_pem: self.ingress_ca.clone(),
        }
    }
}

/// One seeded revision: what its Gateway would be given.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RevInfo {
    agent: String,
    token: String,
    authority: String,
    target: String,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let role = args.role;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let run = async move {
        match args.role {
            Role::Hub => hub_role(&args).await.map(|()| true),
            Role::Spoke => spoke_role(&args).await.map(|()| true),
            Role::Driver => clawfed_bench::cli::until_interrupted(driver(&args)).await,
        }
    };
    let Some(result) = clawfed_bench::cli::block_on_multi_thread("tunnel-bench: runtime", run)
    else {
        return std::process::ExitCode::FAILURE;
    };
    clawfed_bench::cli::verdict_exit(&format!("tunnel-bench ({role:?})"), result, 1)
}

fn role_dir(args: &Args) -> anyhow::Result<&Path> {
    args.dir
        .as_deref()
        .context("--dir is required for this role")
}

/// Reads stdin until EOF (the driver closes it, or exits) and answers
/// `open` with `answer()`.
async fn serve_stdin(answer: impl Fn() -> String) -> anyhow::Result<()> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim() == "open" {
            println!("open {}", answer());
        }
    }
    Ok(())
}
