//! Property-based tests of the pure cores (issue 10), shared by the test
//! suite (`tests/tests/properties.rs`, a bounded case count per property)
//! and the long run (`e2e/bench` `proptest-bench --minutes N`).
//!
//! # Layout
//! - [`readiness`]: the Harness readiness verdict over any Pod list.
//! - [`pipeline`]: the revision pipeline's `decide` driven through any
//!   sequence of fact changes.
//! - [`naming`]: the data-plane namespace name rule and legacy resolution.
//! - [`outbox`]: outbox supersession on the real SQL store (SQLite and
//!   PostgreSQL) against a delivering, acking, reconnecting spoke.
//! - [`decoders`]: link message decoders fed arbitrary and mutated bytes.
//!
//! Each property is a `check` over an input its strategy generates; the
//! rule under test is a parameter, so a test can hand in a deliberately
//! broken copy of the rule and see the property fail (proof that it can).

use std::time::Instant;

use proptest::test_runner::{Config, RngSeed, TestError, TestRunner};

pub mod decoders;
pub mod naming;
pub mod outbox;
pub mod pipeline;
pub mod readiness;

/// One property, runnable for a given number of cases.
#[derive(Debug, Clone, Copy)]
pub struct Property {
    /// Stable name (test and bench output).
    pub name: &'static str,
    /// Cases per run in the normal test suite (kept small: the whole
    /// suite's share stays well under 20 s on a 2-core machine).
    pub suite_cases: u32,
    /// Runs the property with `runner`; `Err` is the (shrunk) failure.
    pub run: fn(&mut TestRunner) -> Result<(), String>,
}

/// Every property, in a fixed order.
pub fn all() -> Vec<Property> {
    vec![
        readiness::VERDICT,
        readiness::REQUIRED_LABELS,
        pipeline::DECIDE,
        naming::NAME_RULE,
        naming::RESOLVE,
        outbox::SQLITE,
        outbox::POSTGRES,
        decoders::WORK_SPEC,
        decoders::LINK_MESSAGES,
        decoders::STARTUP_STATUS,
        decoders::DIAGNOSTICS,
    ]
}

/// The property named `name`.
pub fn by_name(name: &str) -> Option<Property> {
    all().into_iter().find(|p| p.name == name)
}

/// What one run of a property did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Cases that passed.
    pub cases: u32,
    /// The seed the run's RNG started from (reproduces the run).
    pub seed: u64,
    /// The minimal failing input and why, when the property failed.
    pub failure: Option<String>,
    /// Why the run could not start (a panic outside the cases, e.g. the
    /// PostgreSQL test server unreachable): no verdict on the property.
    pub setup_error: Option<String>,
    /// Wall time.
    pub elapsed: std::time::Duration,
}

/// Runs `property` for `cases` cases from `seed` (random when `None`).
/// Failures are not persisted to files: the seed and the shrunk input in
/// the outcome reproduce them.
pub fn run(property: &Property, cases: u32, seed: Option<u64>) -> Outcome {
    let seed = seed.unwrap_or_else(rand_seed);
    let config = Config {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        // Shrinking a failure is bounded too (the SQL property is slow).
        max_shrink_iters: 2048,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let started = Instant::now();
    // The runner turns a panic inside a case into a failure; one that
    // escapes it comes from the property's setup.
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (property.run)(&mut runner)));
    let (failure, setup_error) = match result {
        Ok(Ok(())) => (None, None),
        Ok(Err(failure)) => (Some(failure), None),
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "setup panicked".to_owned());
            (None, Some(why))
        }
    };
    Outcome {
        cases: if failure.is_none() && setup_error.is_none() {
            cases
        } else {
            0
        },
        seed,
        failure,
        setup_error,
        elapsed: started.elapsed(),
    }
}

/// Cases for a suite run: `PROPTEST_CASES` when set, else the property's.
pub fn suite_cases(property: &Property) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(property.suite_cases)
}

/// `PROPTEST_RNG_SEED` when set (reproduces a suite run), else random.
pub fn suite_seed() -> Option<u64> {
    std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
}

fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    // A fresh RandomState is randomly keyed per process and instance.
    RandomState::new().hash_one(Instant::now())
}

/// Formats a runner result: the failure names the minimal input.
pub(crate) fn report<T: std::fmt::Debug>(result: Result<(), TestError<T>>) -> Result<(), String> {
    match result {
        Ok(()) => Ok(()),
        Err(TestError::Fail(reason, input)) => {
            Err(format!("{reason}\nminimal failing input: {input:#?}"))
        }
        Err(TestError::Abort(reason)) => Err(format!("aborted: {reason}")),
    }
}
