//! Enrollment (bootstrap token + CSR over server-authenticated TLS) and
//! renewal (CSR over the live mTLS identity). The spoke's private key never
//! leaves it; the hub only ever sees CSRs.

use std::sync::Arc;

use chrono::Utc;
use clawfed_proto::link::close::CloseReason;
use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::enrollment_server::Enrollment;
use tonic::{Request, Response, Status};

use super::LinkState;
use super::metrics::ResultLabel;
use super::tls::{PeerIdentity, peer_identity};
use crate::auth;
use crate::model::ConnectionState;
use crate::store::EnrollRejected;

/// Prefix of bootstrap tokens (recognisable in leak scans).
pub const BOOTSTRAP_PREFIX: &str = "cfb_";

/// The `Enrollment` service.
#[derive(Debug, Clone)]
pub struct EnrollmentApi {
    state: Arc<LinkState>,
}

impl EnrollmentApi {
    /// The service over the link state.
    pub fn new(state: Arc<LinkState>) -> Self {
        Self { state }
    }

    fn count(&self, result: &str) {
        self.state
            .metrics
            .enrollments
            .get_or_create(&ResultLabel {
                result: result.to_owned(),
            })
            .inc();
    }
}

fn store_status(e: crate::store::StoreError) -> Status {
    tracing::error!(error = %e, "link.store_error");
    Status::unavailable("hub store unavailable")
}

#[tonic::async_trait]
impl Enrollment for EnrollmentApi {
    async fn enroll(
        &self,
        request: Request<pb::EnrollRequest>,
    ) -> Result<Response<pb::EnrollResponse>, Status> {
        let req = request.into_inner();
        if clawfed_proto::naming::validate_dns1123_label(&req.cluster_name).is_err() {
            self.count("invalid");
            return Err(Status::invalid_argument(
                "cluster_name: must be a DNS-1123 label",
            ));
        }
        if req.bootstrap_token.is_empty() {
            self.count("invalid");
            return Err(Status::unauthenticated("bootstrap_token: required"));
        }
        // Check the CSR before consuming the single-use token, so a broken
        // request does not burn it.
        if let Err(e) = super::ca::CertificateAuthority::check_csr(&req.csr_pem) {
            self.count("invalid");
            return Err(Status::invalid_argument(format!("csr_pem: {e}")));
        }
        let now = Utc::now();
        let hash = auth::hash_token(&req.bootstrap_token);
        let cluster = match self
            .state
            .store
            .begin_enrollment(
                &hash,
                &req.cluster_name,
                &crate::store::ClusterClaim {
                    kubernetes_uid: (!req.kubernetes_uid.is_empty())
                        .then(|| req.kubernetes_uid.clone()),
                    allow_shared: req.allow_shared_cluster,
                },
                now,
            )
            .await
            .map_err(store_status)?
        {
            Ok(c) => c,
            Err(rejected) => {
                tracing::warn!(cluster = %req.cluster_name, reason = %rejected, "link.enroll_refused");
                self.count("refused");
                return Err(match rejected {
                    EnrollRejected::AlreadyEnrolled(_) | EnrollRejected::SharedCluster { .. } => {
                        Status::failed_precondition(rejected.to_string())
                    }
                    // Retryable by the spoke: it keeps its key and asks again.
                    EnrollRejected::AwaitingApproval => Status::unavailable(rejected.to_string()),
                    _ => Status::unauthenticated(rejected.to_string()),
                });
            }
        };
        let issued = self
            .state
            .ca
            .sign_cluster_csr(
                &req.csr_pem,
                &cluster.id,
                &cluster.name,
                self.state.config.cert_ttl,
            )
            .map_err(|e| Status::invalid_argument(format!("csr_pem: {e}")))?;
        self.state
            .store
            .add_certificate(&cluster.id, &issued.serial, issued.not_after, now)
            .await
            .map_err(store_status)?;
        self.state
            .store
            .set_connection_state(
                &cluster.id,
                ConnectionState::Offline,
                now,
                Some(crate::store::SpokeHello {
                    version: &req.spoke_version,
                    capabilities: &[],
                    labels: &Default::default(),
                }),
            )
            .await
            .map_err(store_status)?;
        tracing::info!(cluster = %cluster.name, clusterId = %cluster.id, serial = %issued.serial, "link.enrolled");
        self.count("ok");
        Ok(Response::new(pb::EnrollResponse {
            cluster_id: cluster.id,
            certificate_pem: issued.pem,
            ca_pem: self.state.ca.ca_pem().to_owned(),
            not_after_unix: issued.not_after.timestamp(),
        }))
    }
}

/// The verified identity of a `SpokeLink` caller, checked against the
/// store: the certificate must be one the hub issued to that cluster, not
/// revoked, and the cluster not revoked.
pub async fn authenticate<T>(
    state: &LinkState,
    request: &Request<T>,
) -> Result<PeerIdentity, Status> {
    let certs = request.peer_certs();
    let identity = peer_identity(certs.as_ref().map(|c| c.as_slice()))
        .map_err(|e| Status::unauthenticated(e.to_string()))?;
    if identity.not_after <= Utc::now() {
        return Err(CloseReason::CertificateExpired.status("client certificate expired"));
    }
    let status = state
        .store
        .certificate_status(&identity.serial)
        .await
        .map_err(store_status)?;
    match status {
        None => Err(Status::unauthenticated(
            "client certificate was not issued by this hub",
        )),
        Some(s) if s.cluster_id != identity.cluster_id => Err(Status::unauthenticated(
            "client certificate does not belong to the cluster it names",
        )),
        Some(s) if s.revoked || state.deny.contains(&identity.serial) => {
            Err(CloseReason::Revoked.status("cluster certificate revoked"))
        }
        Some(_) => Ok(identity),
    }
}

/// `SpokeLink.Renew`: a new certificate for the caller's own cluster.
pub async fn renew(
    state: &LinkState,
    request: Request<pb::RenewRequest>,
) -> Result<Response<pb::RenewResponse>, Status> {
    let identity = authenticate(state, &request).await?;
    let cluster = state
        .store
        .get_cluster_by_id(&identity.cluster_id)
        .await
        .map_err(store_status)?;
    let issued = state
        .ca
        .sign_cluster_csr(
            &request.get_ref().csr_pem,
            &cluster.id,
            &cluster.name,
            state.config.cert_ttl,
        )
        .map_err(|e| Status::invalid_argument(format!("csr_pem: {e}")))?;
    state
        .store
        .add_certificate(&cluster.id, &issued.serial, issued.not_after, Utc::now())
        .await
        .map_err(store_status)?;
    tracing::info!(cluster = %cluster.name, serial = %issued.serial, previous = %identity.serial, "link.renewed");
    Ok(Response::new(pb::RenewResponse {
        certificate_pem: issued.pem,
        not_after_unix: issued.not_after.timestamp(),
    }))
}

/// Mints a bootstrap token secret and its stored hash.
pub fn mint_bootstrap_token() -> (String, String) {
    let bytes: [u8; 32] = rand::random();
    let secret = format!("{BOOTSTRAP_PREFIX}{}", hex::encode(bytes));
    let hash = auth::hash_token(&secret);
    (secret, hash)
}
