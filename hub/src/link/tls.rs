//! TLS for the link port: TLS 1.3 only (rustls, ring), client certificates
//! from the hub CA verified during the handshake, revoked serials refused
//! there too, and the cluster identity read from the verified certificate.
//!
//! Client authentication is optional at the TLS layer only because
//! enrollment happens before a spoke has a certificate; every `SpokeLink`
//! call requires one (see [`peer_identity`]).

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use rustls::DistinguishedName;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};

use super::ca::CertificateAuthority;

/// Errors building the TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client verifier could not be built.
    #[error("client verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// The serving certificate could not be issued.
    #[error("serving certificate: {0}")]
    Certificate(#[from] rcgen::Error),
}

/// Revoked certificate serials (lower-case hex). Checked in the handshake,
/// kept current from the store by the revocation watcher.
#[derive(Debug, Default)]
pub struct DenyList(RwLock<HashSet<String>>);

impl DenyList {
    /// Adds serials; returns how many were new.
    pub fn insert_all(&self, serials: impl IntoIterator<Item = String>) -> usize {
        let mut set = self.0.write().unwrap_or_else(|p| p.into_inner());
        serials
            .into_iter()
            .filter(|s| set.insert(s.clone()))
            .count()
    }

    /// Whether `serial` is revoked.
    pub fn contains(&self, serial: &str) -> bool {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(serial)
    }
}

/// WebPKI client verification against the hub CA, then the deny-list.
#[derive(Debug)]
struct DenyingVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    deny: Arc<DenyList>,
}

impl ClientCertVerifier for DenyingVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let serial = x509_parser::parse_x509_certificate(end_entity)
            .map(|(_, c)| hex::encode(c.raw_serial()))
            .map_err(|_| {
                rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding)
            })?;
        if self.deny.contains(&serial) {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Revoked,
            ));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The process-wide crypto provider: ring, installed once.
pub fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// The tunnel ingress' server configuration: TLS 1.3 with a serving
/// certificate from the link CA (Gateways get the CA with their transport
/// credential), no client certificate (the credential authenticates).
pub fn ingress_server_config(
    ca: &CertificateAuthority,
    server_names: &[String],
) -> Result<ServerConfig, TlsError> {
    let (chain, key) = ca.issue_server(
        server_names,
        std::time::Duration::from_secs(365 * 24 * 3600),
    )?;
    let mut config = ServerConfig::builder_with_provider(crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The link port's server configuration.
pub fn server_config(
    ca: &CertificateAuthority,
    server_names: &[String],
    deny: Arc<DenyList>,
) -> Result<ServerConfig, TlsError> {
    let provider = crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.ca_der().clone())?;
    let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()?;
    let verifier = Arc::new(DenyingVerifier { inner, deny });
    let (chain, key) = ca.issue_server(
        server_names,
        std::time::Duration::from_secs(365 * 24 * 3600),
    )?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    // No session resumption: a resumed session would skip client
    // certificate verification, letting a revoked or replaced certificate
    // back in. Every connection does a full handshake.
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(config)
}

/// Who a verified client certificate names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerIdentity {
    pub cluster_id: String,
    /// Lower-case hex of the serial's bytes.
    pub serial: String,
    pub not_after: DateTime<Utc>,
}

/// Why a connection has no usable cluster identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// No client certificate was presented.
    #[error("a client certificate issued by the hub is required")]
    Missing,
    /// The certificate could not be parsed.
    #[error("client certificate is malformed")]
    Malformed,
    /// The certificate names no cluster.
    #[error(
        "client certificate names no cluster (expected a spiffe://clawfed/cluster/<id> URI SAN)"
    )]
    NoCluster,
}

/// The cluster identity of the (already verified) peer chain.
pub fn peer_identity(certs: Option<&[CertificateDer<'_>]>) -> Result<PeerIdentity, IdentityError> {
    let leaf = certs
        .and_then(|c| c.first())
        .ok_or(IdentityError::Missing)?;
    let (_, cert) =
        x509_parser::parse_x509_certificate(leaf).map_err(|_| IdentityError::Malformed)?;
    let san = cert
        .subject_alternative_name()
        .map_err(|_| IdentityError::Malformed)?
        .ok_or(IdentityError::NoCluster)?;
    let cluster_id = san
        .value
        .general_names
        .iter()
        .find_map(|name| match name {
            x509_parser::extensions::GeneralName::URI(uri) => {
                clawfed_proto::identity::cluster_id_from_uri(uri).map(str::to_owned)
            }
            _ => None,
        })
        .ok_or(IdentityError::NoCluster)?;
    let not_after = DateTime::from_timestamp(cert.validity().not_after.timestamp(), 0)
        .ok_or(IdentityError::Malformed)?;
    Ok(PeerIdentity {
        cluster_id,
        serial: hex::encode(cert.raw_serial()),
        not_after,
    })
}
