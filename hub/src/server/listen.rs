//! Every listen address of the hub, bound before any of them serves: a hub
//! that cannot take one of its ports fails to start without ever having
//! answered `/healthz` (an orchestrator restarting it then sees the cause,
//! not a healthy hub that dies a moment later).

use std::net::SocketAddr;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use tokio::net::TcpListener;

use super::ServerError;
use crate::config::Config;

/// The hub's listeners, bound and not yet accepting.
#[derive(Debug)]
pub(super) struct Listeners {
    pub rest: TcpListener,
    pub grpc: TcpListener,
    pub metrics: TcpListener,
    /// The spoke link, when enabled.
    pub link: Option<TcpListener>,
    /// The tunnel ingress, when the link and the tunnel are enabled.
    pub tunnel: Option<TcpListener>,
}

impl Listeners {
    /// Binds every address `config` enables, each retried while it is in
    /// use for up to `api.bindRetrySeconds`.
    pub async fn bind(config: &Config) -> Result<Self, ServerError> {
        let retry_for = Duration::from_secs(config.api.bind_retry_seconds);
        let link_on = config.link.enabled;
        let tunnel_on = link_on && config.tunnel.enabled;
        Ok(Self {
            rest: bind("rest", config.api.rest_addr, retry_for).await?,
            grpc: bind("grpc", config.api.grpc_addr, retry_for).await?,
            metrics: bind("metrics", config.api.metrics_addr, retry_for).await?,
            link: match link_on {
                true => Some(bind("link", config.link.addr, retry_for).await?),
                false => None,
            },
            tunnel: match tunnel_on {
                true => Some(bind("tunnel", config.tunnel.addr, retry_for).await?),
                false => None,
            },
        })
    }
}

/// Binds `addr`, retrying with backoff while the address is in use, for at
/// most `retry_for`; any other error (no such address, permission) fails
/// at once.
pub(super) async fn bind(
    what: &'static str,
    addr: SocketAddr,
    retry_for: Duration,
) -> Result<TcpListener, ServerError> {
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(1))
        .with_total_delay(Some(retry_for))
        .without_max_times();
    let listener = (|| TcpListener::bind(addr))
        .retry(backoff)
        .when(|e| e.kind() == std::io::ErrorKind::AddrInUse && !retry_for.is_zero())
        .notify(|e, after| {
            tracing::warn!(what, %addr, error = %e, retry_in_ms = after.as_millis() as u64, "hub.listen_address_in_use");
        })
        .await
        .map_err(|source| ServerError::Bind { what, addr, source })?;
    // Port 0 binds a free port: say which, before any listener serves.
    if let Ok(bound) = listener.local_addr() {
        tracing::info!(what, addr = %bound, "hub.listener_bound");
    }
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_address_in_use_fails_after_the_retry_window_naming_it() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let err = bind("tunnel", addr, Duration::from_millis(300))
            .await
            .expect_err("the address is held");
        let text = err.to_string();
        assert!(
            text.contains("tunnel") && text.contains(&addr.to_string()),
            "{text}"
        );
    }

    #[tokio::test]
    async fn an_address_freed_within_the_window_is_taken() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(held);
        });
        let bound = bind("link", addr, Duration::from_secs(10)).await.unwrap();
        assert_eq!(bound.local_addr().unwrap(), addr);
        release.await.unwrap();
    }
}
