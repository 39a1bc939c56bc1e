//! What the stand-ins share: where to listen, and how to stop.
//!
//! A stand-in reads its listen address from `CLAWFED_STANDIN_LISTEN` (the
//! runner sets `<podIP>:<first containerPort>`) and serves HTTP/1.1 until
//! SIGTERM; connections still open a short while later are cut.

pub mod gateway;
pub mod harness;
pub mod model;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Errors of a stand-in's start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A required environment variable is missing.
    #[error("environment variable {0} is not set")]
    MissingEnv(&'static str),
    /// An environment variable with a value of the wrong form.
    #[error("environment variable {name}={value:?}: {reason}")]
    BadEnv {
        name: &'static str,
        value: String,
        reason: String,
    },
    #[error("binding {0}")]
    Bind(SocketAddr, #[source] std::io::Error),
    #[error("serving HTTP")]
    Serve(#[source] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How long open connections may still finish after SIGTERM.
const DRAIN: Duration = Duration::from_secs(1);

pub fn required(name: &'static str) -> Result<String> {
    std::env::var(name).map_err(|_| Error::MissingEnv(name))
}

pub async fn bind_from_env() -> Result<TcpListener> {
    let raw = required("CLAWFED_STANDIN_LISTEN")?;
    let addr: SocketAddr = raw.parse().map_err(|e| Error::BadEnv {
        name: "CLAWFED_STANDIN_LISTEN",
        value: raw.clone(),
        reason: format!("not ip:port ({e})"),
    })?;
    TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Bind(addr, e))
}

/// A stand-in's log: plain text at info (no colour codes in the Pod log).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_env_filter("info")
        .init();
}

/// Cancelled on SIGTERM or Ctrl-C.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        t.cancel();
    });
    token
}

/// Serves `app` until `shutdown`, then gives open connections [`DRAIN`].
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    shutdown: CancellationToken,
) -> Result<()> {
    let graceful = shutdown.clone();
    let server = axum::serve(listener, app)
        .with_graceful_shutdown(async move { graceful.cancelled().await })
        .into_future();
    tokio::select! {
        r = server => r.map_err(Error::Serve),
        _ = async { shutdown.cancelled().await; tokio::time::sleep(DRAIN).await } => Ok(()),
    }
}
