//! `proptest-bench`: the long run of the property-based tests of the pure
//! cores (issue 10). It runs the same properties as
//! `tests/tests/properties.rs` (`clawfed_tests::properties`) in batches,
//! each from its own seed, for a share of `--minutes` per property, and
//! prints cases per property, cases per second and every failure with the
//! seed that reproduces it (`PROPTEST_RNG_SEED=<seed> cargo test -p
//! clawfed-tests --test properties <name>`).
//!
//! The outbox properties run on SQLite and, when
//! `CLAWFED_TEST_DATABASE_URL` is set, on PostgreSQL. A batch that cannot
//! start (PostgreSQL unreachable) is a setup error, not a verdict: counted,
//! and the next batch tries again. Exits 1 when any property failed or ran
//! no case.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Parser;
use clawfed_tests::properties::{self, Property};

#[derive(Parser, Debug)]
#[command(about = "Runs the property-based tests for a given time and prints their figures")]
struct Args {
    /// Total wall time, shared equally by the properties run.
    #[arg(long, default_value_t = 1.0)]
    minutes: f64,
    /// Run only these properties (repeatable); see --list.
    #[arg(long)]
    only: Vec<String>,
    /// Cases per batch (each batch has its own seed); the SQL properties
    /// use a tenth of it.
    #[arg(long, default_value_t = 512)]
    batch: u32,
    /// First seed (batch i uses seed + i); random when not given.
    #[arg(long)]
    seed: Option<u64>,
    /// List the properties and exit.
    #[arg(long)]
    list: bool,
}

struct Figures {
    name: &'static str,
    batches: u32,
    cases: u64,
    failures: Vec<(u64, u32, String)>,
    setup_errors: u32,
    elapsed: Duration,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let postgres = std::env::var_os("CLAWFED_TEST_DATABASE_URL").is_some();
    let mut chosen: Vec<Property> = properties::all()
        .into_iter()
        .filter(|p| postgres || p.name != properties::outbox::POSTGRES.name)
        .collect();
    if args.list {
        for p in properties::all() {
            println!("{} (suite: {} cases)", p.name, p.suite_cases);
        }
        return Ok(());
    }
    if !args.only.is_empty() {
        for name in &args.only {
            if properties::by_name(name).is_none() {
                bail!("--only: no property named {name:?} (see --list)");
            }
        }
        chosen.retain(|p| args.only.iter().any(|n| n == p.name));
    }
    if args.minutes.is_nan() || args.minutes <= 0.0 {
        bail!("--minutes must be above zero");
    }
    let share = Duration::from_secs_f64(args.minutes * 60.0 / chosen.len() as f64);
    let mut seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    println!(
        "proptest-bench: {} properties, {:.1} min total, {:.1} s each, batch {} cases, first seed {seed}{}",
        chosen.len(),
        args.minutes,
        share.as_secs_f64(),
        args.batch,
        if postgres {
            ""
        } else {
            " (no CLAWFED_TEST_DATABASE_URL: PostgreSQL skipped)"
        }
    );
    let mut all = Vec::new();
    for p in &chosen {
        let sql = p.name.starts_with("outbox_");
        let batch = if sql {
            (args.batch / 10).max(1)
        } else {
            args.batch
        };
        let started = Instant::now();
        let mut f = Figures {
            name: p.name,
            batches: 0,
            cases: 0,
            failures: Vec::new(),
            setup_errors: 0,
            elapsed: Duration::ZERO,
        };
        // Bounded: stops once its share of time is spent.
        while started.elapsed() < share {
            let outcome = properties::run(p, batch, Some(seed));
            seed = seed.wrapping_add(1);
            f.batches += 1;
            f.cases += u64::from(outcome.cases);
            if let Some(error) = outcome.setup_error {
                // E.g. PostgreSQL restarted under us: no verdict; try the
                // next batch after a pause (the loop ends with the share).
                println!("SETUP {} seed {}: {error}", p.name, outcome.seed);
                f.setup_errors += 1;
                std::thread::sleep(Duration::from_secs(1));
            }
            if let Some(failure) = outcome.failure {
                println!("FAIL {} seed {}:\n{failure}", p.name, outcome.seed);
                f.failures.push((outcome.seed, batch, failure));
            }
        }
        f.elapsed = started.elapsed();
        println!(
            "{:<32} {:>10} cases {:>6} batches {:>9.0} cases/s {:>3} failures {:>3} setup errors",
            f.name,
            f.cases,
            f.batches,
            f.cases as f64 / f.elapsed.as_secs_f64(),
            f.failures.len(),
            f.setup_errors
        );
        all.push(f);
    }
    let cases: u64 = all.iter().map(|f| f.cases).sum();
    let failures: usize = all.iter().map(|f| f.failures.len()).sum();
    let wall: f64 = all.iter().map(|f| f.elapsed.as_secs_f64()).sum();
    let setup: u32 = all.iter().map(|f| f.setup_errors).sum();
    println!(
        "total: {cases} cases in {wall:.0} s, {failures} failures, {setup} batches without a verdict (setup errors)"
    );
    for f in &all {
        for (seed, batch, _) in &f.failures {
            println!(
                "reproduce: PROPTEST_RNG_SEED={seed} PROPTEST_CASES={batch} cargo test -p clawfed-tests --test properties {}",
                f.name
            );
        }
    }
    if failures > 0 {
        bail!("{failures} property failures");
    }
    if let Some(f) = all.iter().find(|f| f.cases == 0) {
        bail!("property {} ran no case (setup errors)", f.name);
    }
    Ok(())
}
