//! `model-standin`: the OpenAI-compatible model stand-in (see
//! `clawfed_pods::standin::model`).

use std::sync::Arc;

use anyhow::Result;
use clawfed_pods::standin::{self, model::Model};

#[tokio::main]
async fn main() -> Result<()> {
    standin::init_logging();
    let m = Arc::new(Model::from_env(std::env::vars().collect()));
    let listener = standin::bind_from_env().await?;
    tracing::info!(addr = %listener.local_addr()?, models = ?m.models, key_required = m.require_key.is_some(), "model-standin serving");
    let shutdown = standin::shutdown_on_signal();
    standin::serve(listener, standin::model::router(m), shutdown).await?;
    Ok(())
}
