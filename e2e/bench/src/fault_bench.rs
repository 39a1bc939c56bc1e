//! The fault-injection benchmark (issue 10): a seeded random workload
//! against the real hub and two real spokes while faults are injected,
//! then convergence and invariant checks (`clawfed_tests::faults`). Prints
//! faults by kind, the fraction that caught a revision mid-pipeline,
//! violations with the seed, and time to converge after the last fault.
//! Exits 1 when an invariant was violated.

use std::time::Duration;

use anyhow::Result;
use clap::Parser;
use clawfed_tests::faults::{self, Options};

#[derive(Parser, Debug)]
#[command(about = "Fault-injection run against the real hub, spokes, PostgreSQL and clusters")]
struct Args {
    /// Reproduces the workload and the faults.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Faults to inject.
    #[arg(long, default_value_t = 100)]
    faults: usize,
    /// Agents alive at a time.
    #[arg(long, default_value_t = 8)]
    agents: usize,
    /// Check convergence after every this many faults.
    #[arg(long, default_value_t = 10)]
    round: usize,
    /// Seconds convergence may take after a round's last fault.
    #[arg(long, default_value_t = 180)]
    converge_seconds: u64,
    /// Also kill -9 and restart exec-b's kube-apiserver (disturbs other users of exec-b).
    #[arg(long)]
    apiserver: bool,
    /// Keep the run's directory (configs, logs).
    #[arg(long)]
    keep_dir: bool,
    /// Inject only hub kills (timed into the calls, most of them deploys):
    /// deploy -> active under kills that cut passes.
    #[arg(long)]
    hub_kills_only: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    let a = Args::parse();
    let report = faults::run(Options {
        seed: a.seed,
        faults: a.faults,
        agents: a.agents,
        apiserver_faults: a.apiserver,
        round: a.round,
        converge_within: Duration::from_secs(a.converge_seconds),
        keep_dir: a.keep_dir,
        self_check: false,
        hub_kills_only: a.hub_kills_only,
    })
    .await?;
    print!("{}", report.render());
    if !report.violations.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
