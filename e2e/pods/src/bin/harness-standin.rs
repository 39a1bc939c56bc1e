//! `harness-standin`: the Harness stand-in (see `clawfed_pods::standin::harness`).

use std::sync::Arc;

use anyhow::Result;
use clawfed_pods::standin::{self, harness::Harness};

#[tokio::main]
async fn main() -> Result<()> {
    standin::init_logging();
    let shutdown = standin::shutdown_on_signal();
    let h = Arc::new(Harness::from_env(std::env::vars().collect()).with_restart(shutdown.clone()));
    let listener = standin::bind_from_env().await?;
    tracing::info!(addr = %listener.local_addr()?, startup = %h.identity.startup_id, mode = h.startup.as_str(), "harness-standin serving");
    standin::serve(listener, standin::harness::router(h), shutdown).await?;
    Ok(())
}
