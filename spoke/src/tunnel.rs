//! The spoke's end of the data path: on the hub's `TunnelOpen` it checks
//! that the target is a Harness it manages for that revision, resolves a
//! Ready endpoint itself (never an address the hub names), connects, and
//! opens a `Tunnel` stream on the connection it already dialed to the hub,
//! so the execution cluster needs no inbound port.
//!
//! - `resolve.rs`: [`resolve::KubeHarnessDialer`], target -> Service ->
//!   EndpointSlices -> a Ready Pod endpoint.

pub mod resolve;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clawfed_proto::link::v1::{self as pb, spoke_link_client::SpokeLinkClient, tunnel_frame};
use clawfed_proto::tunnel::reason;
use clawfed_tunnel::{Counters, pump};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

pub use clawfed_tunnel::Refusal;

/// Connects to the Harness a `TunnelOpen` names, after checking the spoke
/// manages it.
#[async_trait]
pub trait HarnessDialer: Send + Sync + 'static {
    async fn dial(&self, open: &pb::TunnelOpen) -> Result<TcpStream, Refusal>;
}

/// Settings of the spoke's tunnels.
#[derive(Debug, Clone)]
pub struct TunnelSettings {
    /// Tunneled connections open at most.
    pub max_open: usize,
    /// A connection without a byte either way for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for TunnelSettings {
    fn default() -> Self {
        Self {
            max_open: 1024,
            idle_timeout: Duration::from_secs(600),
        }
    }
}

/// The spoke's tunnels: started per `TunnelOpen`, all cancelled on
/// shutdown. A tunnel outlives the `Connect` session that asked for it (it
/// has its own stream), so a certificate rotation does not cut it.
pub struct Tunnels {
    dialer: Arc<dyn HarnessDialer>,
    settings: TunnelSettings,
    slots: Arc<Semaphore>,
    tasks: TaskTracker,
    cancel: CancellationToken,
}

impl std::fmt::Debug for Tunnels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnels")
            .field("settings", &self.settings)
            .field("open", &self.open())
            .finish_non_exhaustive()
    }
}

/// Frames buffered towards the hub beyond the HTTP/2 window.
const FRAME_BUFFER: usize = 2;

impl Tunnels {
    pub fn new(dialer: Arc<dyn HarnessDialer>, settings: TunnelSettings) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(settings.max_open)),
            dialer,
            settings,
            tasks: TaskTracker::new(),
            cancel: CancellationToken::new(),
        }
    }

    /// Tunnels open at most.
    pub fn max_open(&self) -> usize {
        self.settings.max_open
    }

    /// Tunnels open (or being opened) now.
    pub fn open(&self) -> usize {
        self.settings.max_open - self.slots.available_permits()
    }

    /// Ends every tunnel.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Serves one `TunnelOpen` in the background over `channel`.
    pub fn start(&self, channel: tonic::transport::Channel, open: pb::TunnelOpen) {
        let dialer = self.dialer.clone();
        let slots = self.slots.clone();
        let idle = self.settings.idle_timeout;
        let cancel = self.cancel.child_token();
        let span = tracing::info_span!("tunnel", id = %open.tunnel_id, target = %open.target);
        self.tasks.spawn(
            async move {
                serve(dialer, slots, idle, cancel, channel, open).await;
            }
            .instrument(span),
        );
    }
}

async fn serve(
    dialer: Arc<dyn HarnessDialer>,
    slots: Arc<Semaphore>,
    idle: Duration,
    cancel: CancellationToken,
    channel: tonic::transport::Channel,
    open: pb::TunnelOpen,
) {
    let started = Instant::now();
    let permit = slots.try_acquire_owned();
    let dialed = match &permit {
        Ok(_) => {
            let timeout = Duration::from_millis(u64::from(open.dial_timeout_ms.max(100)));
            match tokio::time::timeout(timeout, dialer.dial(&open)).await {
                Ok(r) => r,
                Err(_) => Err(Refusal::new(
                    reason::DIAL_FAILED,
                    format!("no connection to the Harness within {timeout:?}"),
                )),
            }
        }
        Err(_) => Err(Refusal::new(
            reason::SPOKE_LIMIT,
            "the spoke's tunneled connection limit is reached",
        )),
    };
    let (tx, rx) = mpsc::channel::<pb::TunnelFrame>(FRAME_BUFFER);
    let accept = pb::TunnelAccept {
        tunnel_id: open.tunnel_id.clone(),
        reason: dialed
            .as_ref()
            .err()
            .map_or_else(String::new, |r| r.reason.to_owned()),
        message: dialed
            .as_ref()
            .err()
            .map_or_else(String::new, |r| r.message.clone()),
    };
    let _ = tx
        .send(pb::TunnelFrame {
            body: Some(tunnel_frame::Body::Accept(accept)),
        })
        .await;
    let mut client = SpokeLinkClient::new(channel);
    let inbound = match client.tunnel(ReceiverStream::new(rx)).await {
        Ok(r) => r.into_inner(),
        Err(status) => {
            tracing::warn!(target = %open.target, error = %status, "tunnel.stream_refused");
            return;
        }
    };
    let socket = match dialed {
        Ok(s) => s,
        Err(r) => {
            tracing::warn!(target = %open.target, revision_id = %open.revision_id, reason = r.reason, message = %r.message, "tunnel.refused");
            return;
        }
    };
    let setup_ms = started.elapsed().as_millis() as u64;
    let counters = Arc::new(Counters::default());
    let result = pump(socket, inbound, tx, idle, cancel, counters.clone()).await;
    drop(permit);
    let moved = counters.moved();
    tracing::info!(
        target = %open.target,
        revision_id = %open.revision_id,
        to_hub = moved.to_stream,
        to_harness = moved.to_socket,
        setup_ms,
        duration_ms = started.elapsed().as_millis() as u64,
        result = result.as_ref().map_or_else(|e| e.label(), |_| "ok"),
        "tunnel.closed"
    );
}
