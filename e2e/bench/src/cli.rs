//! What a bench's `main` does around its run: the runtime, Ctrl-C, and the
//! exit code of its verdict.

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

/// The exit code of a bench's verdict: 0 when it passed, 1 when it missed,
/// `error_code` (after printing `<who>: error: ...`) when it failed to run.
pub fn verdict_exit(who: &str, result: anyhow::Result<bool>, error_code: u8) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("{who}: error: {e:#}");
            ExitCode::from(error_code)
        }
    }
}

/// `run`, or an "interrupted" error as soon as Ctrl-C comes.
pub async fn until_interrupted(
    run: impl Future<Output = anyhow::Result<bool>>,
) -> anyhow::Result<bool> {
    tokio::select! {
        r = run => r,
        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted"),
    }
}

/// Runs `fut` on a multi-thread runtime and leaves tasks still winding down
/// (spoke tasks) 2 s, not more; `None` after printing
/// `<runtime_failed>: <error>` when the runtime cannot be built.
pub fn block_on_multi_thread<F: Future>(runtime_failed: &str, fut: F) -> Option<F::Output> {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{runtime_failed}: {e}");
            return None;
        }
    };
    let out = runtime.block_on(fut);
    runtime.shutdown_timeout(Duration::from_secs(2));
    Some(out)
}
