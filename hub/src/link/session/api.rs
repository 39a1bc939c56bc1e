//! The `SpokeLink` service: `Connect` (admitted up to `max_sessions`, then
//! served by its own session task), `Renew` and `Tunnel`.

use std::sync::Arc;

use chrono::Utc;
use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::hub_message;
use clawfed_proto::link::v1::spoke_link_server::SpokeLink;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::{HubStream, hub, jittered_retry_after, merged, run};
use crate::link::LinkState;
use crate::link::enroll::{authenticate, renew};
use crate::link::registry::CloseReason;
use crate::model::ConnectionState;

/// The `SpokeLink` service.
#[derive(Debug, Clone)]
pub struct SpokeLinkApi {
    state: Arc<LinkState>,
}

impl SpokeLinkApi {
    /// The service over the link state.
    pub fn new(state: Arc<LinkState>) -> Self {
        Self { state }
    }
}

/// Messages that are not outbox work (tunnel opens, diagnose requests)
/// waiting for the spoke's stream.
const CONTROL_QUEUE: usize = 256;
#[tonic::async_trait]
impl SpokeLink for SpokeLinkApi {
    type ConnectStream = HubStream;

    async fn connect(
        &self,
        request: Request<Streaming<pb::SpokeMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let identity = authenticate(&self.state, &request).await?;
        let cluster = self
            .state
            .store
            .get_cluster_by_id(&identity.cluster_id)
            .await
            .map_err(|_| Status::unauthenticated("unknown cluster"))?;
        if cluster.connection_state == ConnectionState::Revoked {
            return Err(CloseReason::Revoked.status("cluster revoked"));
        }
        let (tx, rx) = mpsc::channel(64);
        // Tunnel opens and diagnose requests have a channel of their own,
        // sent ahead of queued work: a spoke receiving its backlog must
        // still get a CONNECT's open at once.
        let (control, control_rx) = mpsc::channel(CONTROL_QUEUE);
        let at_capacity = self.state.registry.len() >= self.state.config.max_sessions
            && !self.state.registry.is_connected(&cluster.id);
        if at_capacity {
            self.state.metrics.sessions_shed.inc();
            let retry_after_seconds = jittered_retry_after(5, 30);
            let _ = tx
                .send(Ok(hub(hub_message::Body::GoAway(pb::GoAway {
                    reason: "hub at session capacity".into(),
                    retry_after_seconds,
                    redirect_url: String::new(),
                }))))
                .await;
            return Ok(Response::new(merged(control_rx, rx)));
        }
        let state = self.state.clone();
        let inbound = request.into_inner();
        let span =
            tracing::info_span!("link.session", cluster = %cluster.name, cluster_id = %cluster.id);
        tokio::spawn(
            async move {
                run(state, identity, cluster, inbound, tx, control).await;
            }
            .instrument(span),
        );
        Ok(Response::new(merged(control_rx, rx)))
    }

    async fn renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        renew(&self.state, request).await
    }

    type TunnelStream = ReceiverStream<Result<pb::TunnelFrame, Status>>;

    /// One tunneled connection. The id pairing binds it to a cluster with a
    /// live (authenticated) session, so only the certificate itself is
    /// checked here, in memory: no store round trip on the setup path.
    async fn tunnel(
        &self,
        request: Request<Streaming<pb::TunnelFrame>>,
    ) -> Result<Response<Self::TunnelStream>, Status> {
        let certs = request.peer_certs();
        let identity = crate::link::tls::peer_identity(certs.as_ref().map(|c| c.as_slice()))
            .map_err(|e| Status::unauthenticated(e.to_string()))?;
        if identity.not_after <= Utc::now() {
            return Err(CloseReason::CertificateExpired.status("client certificate expired"));
        }
        if self.state.deny.contains(&identity.serial) {
            return Err(CloseReason::Revoked.status("cluster certificate revoked"));
        }
        let stream = self
            .state
            .tunnels
            .accept(&identity.cluster_id, request.into_inner())
            .await?;
        Ok(Response::new(stream))
    }
}
