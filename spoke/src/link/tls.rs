//! TLS for the spoke's side of the link: TLS 1.3 only, the hub's CA pinned,
//! and a client certificate that can be swapped while running (renewal):
//! new connections present the new certificate, established ones finish.

use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use clawfed_proto::link::address::LinkAddress;

use super::identity::Identity;
use super::proxy::{Proxy, ProxyError};

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
    /// The HTTP CONNECT proxy every connection to the hub goes through
    /// (see [`super::proxy`]); `None` dials directly.
    pub proxy: Option<Arc<Proxy>>,
}

impl HubAddress {
    /// Parses `https://host:port` (the rule of
    /// [`clawfed_proto::link::address`]); TLS checks the host as the
    /// hub's name.
    pub fn parse(url: &str) -> Result<Self, String> {
        let address = LinkAddress::parse(url).map_err(|e| e.to_string())?;
        let server_name = ServerName::try_from(address.host.clone())
            .map_err(|e| format!("hub URL {url:?}: {e}"))?;
        Ok(Self {
            authority: address.authority,
            server_name,
            proxy: None,
        })
    }

    /// Parses a comma-separated list of `https://host:port` (several hub
    /// replicas, or their Service address); at least one.
    pub fn parse_list(urls: &str) -> Result<Vec<Self>, String> {
        let list = LinkAddress::parse_list(urls).map_err(|e| e.to_string())?;
        list.iter().map(|a| Self::parse(&a.to_string())).collect()
    }

    /// The address as a URL (`https://host:port`), for logs and metrics.
    pub fn url(&self) -> String {
        format!("https://{}", self.authority)
    }

    /// The same address with TLS checking `name` instead of its host: every
    /// replica presents one serving identity, whatever address reaches it.
    pub fn with_server_name(mut self, name: ServerName<'static>) -> Self {
        self.server_name = name;
        self
    }

    /// The same hub, reached through `proxy` (`None`: directly).
    pub fn with_proxy(mut self, proxy: Option<Proxy>) -> Self {
        self.proxy = proxy.map(Arc::new);
        self
    }

    /// The host (without IPv6 brackets) and port of [`Self::authority`],
    /// as `NO_PROXY` rules match them.
    pub fn host_port(&self) -> (&str, u16) {
        match self.authority.rsplit_once(':') {
            Some((host, port)) => (
                host.trim_start_matches('[').trim_end_matches(']'),
                port.parse().unwrap_or(0),
            ),
            None => (&self.authority, 0),
        }
    }
}

/// Why a channel to the hub could not be opened, in words: the proxy's
/// error when the proxy failed (`proxy 127.0.0.1:3128 unreachable:
/// connection refused`), else `cannot reach the hub: ...`.
pub fn connect_failure(error: &tonic::transport::Error) -> String {
    match find_proxy_error(error) {
        Some(proxy) => proxy.report(),
        None => format!("cannot reach the hub: {error}"),
    }
}

/// The [`ProxyError`] somewhere in `error`'s chain. The connector returns
/// it inside an `io::Error`, whose `source()` skips the error it wraps, so
/// each `io::Error` on the way is looked into as well.
pub fn find_proxy_error<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a ProxyError> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(p) = e.downcast_ref::<ProxyError>() {
            return Some(p);
        }
        if let Some(p) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<ProxyError>())
        {
            return Some(p);
        }
        next = e.source();
    }
    None
}

/// Dials the hub (through its proxy, if it has one) and completes a TLS
/// handshake with the hub. A proxy failure is a [`ProxyError`] inside the
/// `io::Error` (see [`find_proxy_error`]).
pub async fn dial(
    hub: &HubAddress,
    config: Arc<ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = match &hub.proxy {
        // The proxy only relays: TLS below is with the hub, end to end.
        Some(proxy) => proxy
            .connect(&hub.authority)
            .await
            .map_err(std::io::Error::other)?,
        None => TcpStream::connect(&hub.authority).await?,
    };
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
    channel_noting_alerts(hub, config, ReceivedAlert::default()).await
}

/// As [`channel`], noting in `alert` the TLS alert the hub sends on any of
/// its connections, during the handshake or after.
pub async fn channel_noting_alerts(
    hub: &HubAddress,
    config: Arc<ClientConfig>,
    alert: ReceivedAlert,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let hub = hub.clone();
    // The scheme is http because TLS is done by the connector, not tonic.
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", hub.authority))?
        .connect_timeout(std::time::Duration::from_secs(10));
    endpoint
        .connect_with_connector(connector(hub, config, alert))
        .await
}

/// The channel tunneled connections ride: its own HTTP/2 connection to the
/// hub (made on first use), so stalled tunnels never hold up the Connect
/// stream, with a connection window that lets `max_tunnels` stall without
/// stopping the others.
pub fn tunnel_channel(
    hub: &HubAddress,
    config: Arc<ClientConfig>,
    alert: ReceivedAlert,
    max_tunnels: usize,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", hub.authority))?
        .connect_timeout(std::time::Duration::from_secs(10))
        .initial_stream_window_size(clawfed_proto::tunnel::STREAM_WINDOW)
        .initial_connection_window_size(clawfed_proto::tunnel::connection_window(max_tunnels));
    Ok(endpoint.connect_with_connector_lazy(connector(hub.clone(), config, alert)))
}

/// Dials the hub over TLS, noting any TLS alert it sends in `alert`.
fn connector(
    hub: HubAddress,
    config: Arc<ClientConfig>,
    alert: ReceivedAlert,
) -> impl tower::Service<
    http::Uri,
    Response = hyper_util::rt::TokioIo<NotingAlerts>,
    Error = std::io::Error,
    Future = impl Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |_uri: http::Uri| {
        let hub = hub.clone();
        let config = config.clone();
        let alert = alert.clone();
        async move {
            let stream = dial(&hub, config).await.inspect_err(|e| alert.note(e))?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(NotingAlerts {
                inner: stream,
                alert,
            }))
        }
    })
}

/// The fatal TLS alert the hub sent, kept by type.
///
/// The hub verifies the client certificate after the client has finished
/// its side of the TLS 1.3 handshake, so a refusal (a revoked certificate:
/// the `certificate_revoked` alert) usually arrives on the first read of
/// the HTTP/2 connection. h2 passes I/O errors on as text only, so the
/// status a call then fails with no longer holds the `rustls::Error`; the
/// stream under h2 notes it here instead.
#[derive(Debug, Clone, Default)]
pub struct ReceivedAlert(Arc<RwLock<Option<rustls::AlertDescription>>>);

impl ReceivedAlert {
    /// The alert received, if any.
    pub fn get(&self) -> Option<rustls::AlertDescription> {
        *self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the hub refused this spoke's certificate as revoked.
    pub fn revoked(&self) -> bool {
        self.get() == Some(rustls::AlertDescription::CertificateRevoked)
    }

    /// Notes the alert `error` reports, if it reports one received from
    /// the hub (tokio-rustls returns a `rustls::Error` in an `io::Error`).
    pub fn note(&self, error: &std::io::Error) {
        let received = error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        if let Some(rustls::Error::AlertReceived(alert)) = received {
            *self.0.write().unwrap_or_else(|p| p.into_inner()) = Some(*alert);
        }
    }

    fn note_poll<T>(&self, poll: &Poll<std::io::Result<T>>) {
        if let Poll::Ready(Err(e)) = poll {
            self.note(e);
        }
    }
}

/// A TLS stream that notes the alert of any error it returns.
struct NotingAlerts {
    inner: TlsStream<TcpStream>,
    alert: ReceivedAlert,
}

impl AsyncRead for NotingAlerts {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        this.alert.note_poll(&poll);
        poll
    }
}

impl AsyncWrite for NotingAlerts {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.alert.note_poll(&poll);
        poll
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.alert.note_poll(&poll);
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.alert.note_poll(&poll);
        poll
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.alert.note_poll(&poll);
        poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(description: rustls::AlertDescription) -> std::io::Error {
        // As tokio-rustls reports a fatal alert from the peer.
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(description),
        )
    }

    #[test]
    fn the_revoked_alert_is_noted_by_type() {
        let received = ReceivedAlert::default();
        assert!(!received.revoked());
        received.note(&alert(rustls::AlertDescription::CertificateRevoked));
        assert!(received.revoked());
        assert_eq!(
            received.get(),
            Some(rustls::AlertDescription::CertificateRevoked)
        );
    }

    #[test]
    fn other_errors_are_not_a_revocation() {
        let received = ReceivedAlert::default();
        received.note(&alert(rustls::AlertDescription::UnknownCA));
        received.note(&std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(received.get(), Some(rustls::AlertDescription::UnknownCA));
        assert!(!received.revoked());
        let other = ReceivedAlert::default();
        // The words of an alert are not the alert (h2 passes errors on so).
        other.note(&std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "received fatal alert: CertificateRevoked",
        ));
        // The spoke refusing the hub's certificate is not the hub's alert.
        other.note(&std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::Revoked),
        ));
        assert_eq!(other.get(), None);
    }

    #[test]
    fn a_proxy_error_is_found_inside_io_errors_and_sources() {
        #[derive(Debug, thiserror::Error)]
        #[error("transport error")]
        struct Outer(#[source] std::io::Error);
        let refused = || super::super::proxy::ProxyError::Unreachable {
            proxy: "127.0.0.1:3128".into(),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        };
        // As the connector returns it, under a wrapper as tonic's errors.
        let wrapped = Outer(std::io::Error::other(refused()));
        assert_eq!(
            find_proxy_error(&wrapped).map(|p| p.report()),
            Some("proxy 127.0.0.1:3128 unreachable: connection refused".into())
        );
        let plain = Outer(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(find_proxy_error(&plain).is_none());
    }

    #[test]
    fn hub_urls() {
        let a = HubAddress::parse("https://127.0.0.1:8443").unwrap();
        assert_eq!(a.authority, "127.0.0.1:8443");
        assert!(HubAddress::parse("https://hub.example:8443/").is_ok());
        assert!(HubAddress::parse("http://hub:8443").is_err());
        assert!(HubAddress::parse("https://hub").is_err());
        assert_eq!(a.host_port(), ("127.0.0.1", 8443));
        assert!(a.proxy.is_none());
        let v6 = HubAddress::parse("https://[::1]:8443").unwrap();
        assert_eq!(v6.host_port(), ("::1", 8443));
        let list = HubAddress::parse_list("https://127.0.0.1:1,https://localhost:2").unwrap();
        assert_eq!(
            list.iter().map(HubAddress::url).collect::<Vec<_>>(),
            ["https://127.0.0.1:1", "https://localhost:2"]
        );
        let err = HubAddress::parse_list("https://127.0.0.1:1,hub:2").unwrap_err();
        assert!(
            err.contains("\"hub:2\"") && err.contains("https://"),
            "{err}"
        );
    }
}
