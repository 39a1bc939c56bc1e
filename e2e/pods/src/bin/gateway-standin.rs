//! `gateway-standin`: the Gateway stand-in (see `clawfed_pods::standin::gateway`).

use std::sync::Arc;

use anyhow::Result;
use clawfed_pods::standin::{self, gateway::Gateway};

#[tokio::main]
async fn main() -> Result<()> {
    standin::init_logging();
    let g = Arc::new(Gateway::from_env()?);
    let listener = standin::bind_from_env().await?;
    tracing::info!(addr = %listener.local_addr()?, harness = %g.harness, proxy = ?g.proxy, "gateway-standin serving");
    let shutdown = standin::shutdown_on_signal();
    standin::serve(listener, standin::gateway::router(g), shutdown).await?;
    Ok(())
}
