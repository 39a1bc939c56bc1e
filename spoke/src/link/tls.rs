//! TLS for the spoke's side of the link: TLS 1.3 only, the hub's CA pinned,
//! and a client certificate that can be swapped while running (renewal):
//! new connections present the new certificate, established ones finish.

use std::sync::{Arc, RwLock};

use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::identity::Identity;

/// Errors of TLS set-up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The CA or certificate PEM is unusable.
    #[error("PEM: {0}")]
    Pem(String),
    /// rustls refused the configuration.
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The process-wide crypto provider (ring).
pub fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

fn roots(ca_pem: &str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.map_err(|e| TlsError::Pem(e.to_string()))?)?;
    }
    if roots.is_empty() {
        return Err(TlsError::Pem("no CA certificate in the CA file".into()));
    }
    Ok(roots)
}

/// The current client certificate, swappable at renewal.
#[derive(Debug, Default)]
pub struct SwappableCert(RwLock<Option<Arc<CertifiedKey>>>);

impl SwappableCert {
    /// Installs `identity` as the certificate new connections present.
    pub fn install(&self, identity: &Identity) -> Result<(), TlsError> {
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| TlsError::Pem(e.to_string()))?;
        let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes())
            .map_err(|e| TlsError::Pem(e.to_string()))?;
        let signer = crypto_provider().key_provider.load_private_key(key)?;
        *self.0.write().unwrap_or_else(|p| p.into_inner()) =
            Some(Arc::new(CertifiedKey::new(chain, signer)));
        Ok(())
    }
}

impl ResolvesClientCert for SwappableCert {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn has_certs(&self) -> bool {
        self.0.read().unwrap_or_else(|p| p.into_inner()).is_some()
    }
}

/// Server-authenticated TLS (enrollment, before the spoke has a certificate).
pub fn enroll_config(ca_pem: &str) -> Result<Arc<ClientConfig>, TlsError> {
    let mut config = ClientConfig::builder_with_provider(crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots(ca_pem)?)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Mutual TLS with the swappable client certificate.
pub fn mtls_config(ca_pem: &str, cert: Arc<SwappableCert>) -> Result<Arc<ClientConfig>, TlsError> {
    let mut config = ClientConfig::builder_with_provider(crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots(ca_pem)?)
        .with_client_cert_resolver(cert);
    config.alpn_protocols = vec![b"h2".to_vec()];
    // A resumed session would keep presenting the identity of the original
    // handshake, so a renewed certificate would never be used.
    config.resumption = rustls::client::Resumption::disabled();
    Ok(Arc::new(config))
}

/// Where the hub's link port is.
#[derive(Debug, Clone)]
pub struct HubAddress {
    /// `host:port` to dial.
    pub authority: String,
    /// The name checked against the hub's certificate.
    pub server_name: ServerName<'static>,
}

impl HubAddress {
    /// Parses `https://host:port`.
    pub fn parse(url: &str) -> Result<Self, String> {
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| format!("hub URL {url:?} must start with https://"))?;
        let authority = rest.trim_end_matches('/').to_owned();
        let host = match authority.rsplit_once(':') {
            Some((h, p)) if p.parse::<u16>().is_ok() => h,
            _ => return Err(format!("hub URL {url:?} must name a port")),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let server_name =
            ServerName::try_from(host.to_owned()).map_err(|e| format!("hub URL {url:?}: {e}"))?;
        Ok(Self {
            authority,
            server_name,
        })
    }
}

/// Dials the hub and completes a TLS handshake.
pub async fn dial(
    hub: &HubAddress,
    config: Arc<ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(&hub.authority).await?;
    let _ = tcp.set_nodelay(true);
    TlsConnector::from(config)
        .connect(hub.server_name.clone(), tcp)
        .await
}

/// A tonic channel whose connections are made by [`dial`].
pub async fn channel(
    hub: &HubAddress,
    config: Arc<ClientConfig>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let hub = hub.clone();
    // The scheme is http because TLS is done by the connector, not tonic.
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", hub.authority))?
        .connect_timeout(std::time::Duration::from_secs(10));
    endpoint
        .connect_with_connector(tower::service_fn(move |_uri| {
            let hub = hub.clone();
            let config = config.clone();
            async move { dial(&hub, config).await.map(hyper_util::rt::TokioIo::new) }
        }))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_urls() {
        let a = HubAddress::parse("https://127.0.0.1:8443").unwrap();
        assert_eq!(a.authority, "127.0.0.1:8443");
        assert!(HubAddress::parse("https://hub.example:8443/").is_ok());
        assert!(HubAddress::parse("http://hub:8443").is_err());
        assert!(HubAddress::parse("https://hub").is_err());
    }
}
