//! The short fault run (issue 10): about 10 faults of every kind but the
//! apiserver kill, injected into a seeded workload against the real hub and
//! spoke binaries, on a PostgreSQL cluster, proxies and processes of its
//! own, so it runs beside the other cluster tests. It passes only when the
//! run converges and no invariant is violated. The long run is the
//! `fault-bench` benchmark (`e2e/bench`).
//!
//! Needs `e2e/cluster.sh up control exec-a exec-b`, Debian's PostgreSQL
//! (`scripts/postgres.sh`) and `cargo build -p clawfed-hub -p clawfed-spoke
//! --bins`. `CLAWFED_FAULT_SEED` picks the seed (default 10).

use std::time::Duration;

use anyhow::{Result, ensure};
use clawfed_tests::faults::{self, Options};
use clawfed_tests::kube_env;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_fault_run_converges_without_violations() -> Result<()> {
    clawfed_tests::link::init_test_logging();
    for name in kube_env::CLUSTER_NAMES {
        if kube_env::cluster_or_skip(name).await?.is_none() {
            return Ok(());
        }
    }
    let seed = std::env::var("CLAWFED_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let report = faults::run(Options {
        seed,
        faults: 10,
        agents: 5,
        apiserver_faults: false,
        round: 10,
        converge_within: Duration::from_secs(120),
        keep_dir: false,
        self_check: true,
        hub_kills_only: false,
    })
    .await?;
    eprintln!("{}", report.render());
    ensure!(
        report.total_faults() == 10,
        "{} faults",
        report.total_faults()
    );
    // Every kind of the short run was injected.
    ensure!(report.faults.len() == 6, "{:?}", report.faults);
    ensure!(!report.converge.is_empty(), "no Agent was checked");
    // The checker reports a planted extra Harness: it can fail.
    ensure!(
        report.self_check == Some(true),
        "self-check: {:?}",
        report.self_check
    );
    ensure!(
        report.violations.is_empty(),
        "{} violations (seed {seed}):\n{}",
        report.violations.len(),
        report.violations.join("\n")
    );
    Ok(())
}
