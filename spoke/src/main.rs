//! `clawfed-spoke`: runs in an execution cluster and dials out to the hub.
//! The process itself is [`clawfed_spoke::server`]; this parses the flags,
//! sets up logging and turns SIGTERM (or Ctrl-C) into its shutdown.

use clap::Parser;
use clawfed_spoke::server::{self, Options};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let opts = Options::parse();
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CLAWFED_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(
        async move {
            wait_for_signal().await;
            tracing::info!("spoke.draining");
            stop.cancel();
        }
        .instrument(tracing::info_span!("signals")),
    );
    match server::run(opts, shutdown).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, each cause once (some errors print their source).
            eprintln!("error: {}", clawfed_proto::errors::chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

async fn wait_for_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
