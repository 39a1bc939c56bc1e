//! The link's identity over time: enrolment with the bootstrap token when
//! none is stored (transport failures retried, refusals not), and the
//! certificate's renewal at two thirds of its lifetime.

use std::sync::Arc;
use std::time::Duration;

use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::enrollment_client::EnrollmentClient;
use clawfed_proto::link::v1::spoke_link_client::SpokeLinkClient;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::identity::{Identity, new_key_and_csr};
use super::tls::{self, SwappableCert};
use super::{Link, LinkError};

impl Link {
    /// The stored identity, or a new one from enrollment. `None` on shutdown.
    pub(super) async fn ensure_identity(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<Option<Identity>, LinkError> {
        if let Some(identity) = self.identities.load().await? {
            tracing::info!(clusterId = %identity.cluster_id, notAfter = %identity.not_after, "link.identity_loaded");
            return Ok(Some(identity));
        }
        let token = self
            .config
            .bootstrap_token
            .clone()
            .ok_or(LinkError::NoBootstrapToken)?;
        let tls = tls::enroll_config(&self.config.ca_pem)?;
        let mut delays = self.reconnect();
        loop {
            match self.enroll(tls.clone(), &token).await {
                Ok(identity) => {
                    self.identities.save(&identity).await?;
                    tracing::info!(clusterId = %identity.cluster_id, "link.enrolled");
                    return Ok(Some(identity));
                }
                Err(Err(fatal)) => return Err(fatal),
                Err(Ok(transient)) => {
                    let wait = delays.after_failed_attempt(rand::random::<f64>());
                    let hub = self.current_hub().url();
                    self.hubs_mut().advance();
                    tracing::warn!(%hub, reason = %transient, retryInMs = wait.as_millis() as u64, "link.enroll_retry");
                    tokio::select! {
                        _ = shutdown.cancelled() => return Ok(None),
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }

    /// One enrollment attempt: `Err(Ok(_))` may be retried, `Err(Err(_))`
    /// may not.
    async fn enroll(
        &self,
        tls: Arc<rustls::ClientConfig>,
        token: &str,
    ) -> Result<Identity, Result<String, LinkError>> {
        let (key_pem, csr_pem) = new_key_and_csr().map_err(|e| Err(e.into()))?;
        let channel = tls::channel(&self.current_hub(), tls)
            .await
            .map_err(|e| Ok(tls::connect_failure(&e)))?;
        let response = EnrollmentClient::new(channel)
            .enroll(pb::EnrollRequest {
                bootstrap_token: token.to_owned(),
                cluster_name: self.config.cluster_name.clone(),
                csr_pem,
                spoke_version: self.config.version.clone(),
                kubernetes_uid: self.cluster.kubernetes_uid.clone().unwrap_or_default(),
                allow_shared_cluster: self.cluster.allow_shared,
            })
            .await;
        let response = match response {
            Ok(r) => r.into_inner(),
            Err(status) => {
                return Err(if enroll_retryable(status.code()) {
                    Ok(status.message().to_owned())
                } else {
                    Err(LinkError::EnrollmentRefused(status.message().to_owned()))
                });
            }
        };
        Identity::new(response.cluster_id, key_pem, response.certificate_pem)
            .map_err(|e| Err(e.into()))
    }

    /// Renews at two thirds of the lifetime, stores the new identity,
    /// installs it for new connections and tells the session to move over.
    pub(super) async fn renew_loop(
        self,
        mtls: Arc<rustls::ClientConfig>,
        cert: Arc<SwappableCert>,
        identity_tx: watch::Sender<Identity>,
        shutdown: CancellationToken,
    ) {
        loop {
            let current = identity_tx.borrow().clone();
            let wait = (current.renew_at() - chrono::Utc::now())
                .to_std()
                .unwrap_or(Duration::ZERO);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            // Each attempt gets a deadline well inside the remaining
            // lifetime: one call hanging through a hub stall must not
            // outlive the certificate (fault run finding 3).
            let left = (current.not_after - chrono::Utc::now())
                .to_std()
                .unwrap_or(Duration::ZERO);
            let attempt = renew_attempt_timeout(left);
            let outcome =
                match tokio::time::timeout(attempt, self.renew(mtls.clone(), &current)).await {
                    Ok(r) => r,
                    Err(_) => Err(format!("no answer within {attempt:?}")),
                };
            match outcome {
                Ok(renewed) => {
                    if let Err(e) = self.identities.save(&renewed).await {
                        tracing::error!(error = %e, "link.renew_store_failed");
                    } else if let Err(e) = cert.install(&renewed) {
                        tracing::error!(error = %e, "link.renew_install_failed");
                    } else {
                        tracing::info!(notAfter = %renewed.not_after, "link.renewed");
                        let _ = identity_tx.send(renewed);
                        continue;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "link.renew_failed"),
            }
            // Retry well before expiry.
            let left = (current.not_after - chrono::Utc::now())
                .to_std()
                .unwrap_or(Duration::ZERO);
            let retry = (left / 10).clamp(Duration::from_millis(500), Duration::from_secs(60));
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(retry) => {}
            }
        }
    }

    async fn renew(
        &self,
        mtls: Arc<rustls::ClientConfig>,
        current: &Identity,
    ) -> Result<Identity, String> {
        let (key_pem, csr_pem) = new_key_and_csr().map_err(|e| e.to_string())?;
        // The replica the session is on (or will be next).
        let channel = tls::channel(&self.current_hub(), mtls)
            .await
            .map_err(|e| tls::connect_failure(&e))?;
        let response = SpokeLinkClient::new(channel)
            .renew(pb::RenewRequest { csr_pem })
            .await
            .map_err(|s| s.message().to_owned())?
            .into_inner();
        Identity::new(
            current.cluster_id.clone(),
            key_pem,
            response.certificate_pem,
        )
        .map_err(|e| e.to_string())
    }
}

/// Whether an enrollment that failed with `code` may be tried again. The
/// hub refuses with a definite code (invalid, unauthenticated, already
/// enrolled); a connection that broke on the way (the hub shed it under
/// load, a replica died) fails in the transport with `Unknown` or
/// `Cancelled`, and the token is still good for another attempt.
pub(super) fn enroll_retryable(code: tonic::Code) -> bool {
    use tonic::Code;
    matches!(
        code,
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Unknown
            | Code::Cancelled
            | Code::ResourceExhausted
            | Code::Aborted
    )
}

/// How long one renewal attempt may take: a quarter of the certificate's
/// remaining lifetime, between 1 s and 30 s, so several attempts fit in
/// the renewal window (a third of the lifetime).
pub(super) fn renew_attempt_timeout(left: Duration) -> Duration {
    (left / 4).clamp(Duration::from_secs(1), Duration::from_secs(30))
}
