//! A byte stream to a revision's Harness from the hub itself (its
//! activation turn, `agents chat`, the health probe): through this
//! replica's link session when it holds the cluster's, else through the
//! replica that does (its tunnel ingress, as a Gateway's CONNECT is
//! forwarded: see `forward.rs`), with the revision's transport credential.

use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::DuplexStream;
use tokio_util::either::Either;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::Instrument;

use super::Refusal;
use super::broker::{Broker, Slot};
use super::route::{Route, route_span};

/// How long the hub's own tunnel may sit idle.
const IDLE: Duration = Duration::from_secs(120);

/// The bytes of the Harness connection: one end of an in-memory pipe
/// whose other end this replica's tunnel pump serves, or the connection
/// the holder replica relays.
pub type HarnessIo = Either<DuplexStream, TokioIo<hyper::upgrade::Upgraded>>;

/// What keeps a local tunnel up: its pump stops, and the connection's
/// place in the limits is given back, when this drops.
pub struct LocalTunnel {
    _pump: DropGuard,
    _slot: Slot,
}

/// Opens a byte stream to `route`'s Harness; `credential` (the revision's
/// transport credential) lets another replica's ingress admit it. Keep the
/// returned [`LocalTunnel`] as long as the stream is used.
pub async fn open(
    broker: &Broker,
    route: &Route,
    credential: &str,
) -> Result<(HarnessIo, Option<LocalTunnel>), Refusal> {
    if let Some(upstream) = broker.through_holder(route, credential).await {
        return Ok((Either::Right(TokioIo::new(upstream?)), None));
    }
    let opened = broker.open(route).await?;
    let (io, tunnel_io) = tokio::io::duplex(64 * 1024);
    let cancel = CancellationToken::new();
    let span = route_span!("tunnel.local", route);
    // The cluster's revocation ends the stream, as it ends a Gateway's.
    tokio::spawn({
        let (cancel, revoked) = (cancel.clone(), opened.revoked);
        async move {
            tokio::select! {
                _ = revoked.cancelled() => cancel.cancel(),
                _ = cancel.cancelled() => {}
            }
        }
        .instrument(span.clone())
    });
    tokio::spawn(
        clawfed_tunnel::pump(
            tunnel_io,
            opened.inbound,
            opened.outbound,
            IDLE,
            cancel.clone(),
            Default::default(),
        )
        .instrument(span),
    );
    let local = LocalTunnel {
        _pump: cancel.drop_guard(),
        _slot: opened.slot,
    };
    Ok((Either::Left(io), Some(local)))
}
