//! Any replica serves any CONNECT: a Gateway's connection reaches the
//! replica behind the tunnel Service that the balancer picked, while the
//! cluster's link session may be held by another replica. That one is
//! found in the store (the session's live lease, and the tunnel ingress
//! the holder publishes), and the CONNECT goes to it, credential and all:
//! the holder authorizes it again and opens the tunnel through its session;
//! this replica only relays bytes. A forwarded CONNECT carries
//! [`FORWARDED_HEADER`] and is never forwarded again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use clawfed_proto::tunnel::{FORWARDED_HEADER, REASON_HEADER, reason};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tracing::Instrument;

use super::Refusal;
use crate::store::Store;

/// How long reaching the holder and its answer may take.
const FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The holder of a cluster's session as last read, and when.
type HolderCache = std::sync::Mutex<HashMap<String, (Instant, Option<(String, String)>)>>;

/// Forwards CONNECTs to the replica that holds a cluster's session.
pub struct Forwarding {
    store: Arc<dyn Store>,
    replica_id: String,
    /// How long a holder lookup is reused, as routes are: a CONNECT on a
    /// replica without the session costs no store read of its own.
    ttl: std::time::Duration,
    holders: HolderCache,
    /// Verifies the holders' ingress certificates (the link CA); `None`
    /// when ingresses speak plain HTTP.
    tls: Option<tokio_rustls::TlsConnector>,
}

impl std::fmt::Debug for Forwarding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarding")
            .field("replica_id", &self.replica_id)
            .finish_non_exhaustive()
    }
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

impl Forwarding {
    /// Forwarding for replica `replica_id`; `ca_der`: the link CA that
    /// issued every ingress certificate (TLS ingresses).
    pub fn new(
        store: Arc<dyn Store>,
        replica_id: String,
        ttl: std::time::Duration,
        ca_der: Option<&rustls_pki_types::CertificateDer<'static>>,
    ) -> Result<Self, crate::link::tls::TlsError> {
        let tls = match ca_der {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                roots.add(ca.clone())?;
                let mut config = rustls::ClientConfig::builder_with_provider(
                    crate::link::tls::crypto_provider(),
                )
                .with_protocol_versions(&[&rustls::version::TLS13])?
                .with_root_certificates(roots)
                .with_no_client_auth();
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                Some(tokio_rustls::TlsConnector::from(Arc::new(config)))
            }
            None => None,
        };
        Ok(Self {
            store,
            replica_id,
            ttl,
            holders: HolderCache::default(),
            tls,
        })
    }

    /// The tunnel ingress of the other replica holding `cluster_id`'s
    /// session, if one does: (replica id, ingress URL).
    pub async fn holder(&self, cluster_id: &str) -> Option<(String, String)> {
        let cache = || self.holders.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, holder)) = cache().get(cluster_id)
            && at.elapsed() < self.ttl
        {
            return holder.clone();
        }
        let holder = match self
            .store
            .session_holder_tunnel(cluster_id, &self.replica_id, self.store.now())
            .await
        {
            Ok(holder) => holder,
            Err(e) => {
                // Not cached: the next CONNECT asks again.
                tracing::warn!(cluster_id, error = %e, "tunnel.holder_lookup_failed");
                return None;
            }
        };
        cache().insert(cluster_id.to_owned(), (Instant::now(), holder.clone()));
        holder
    }

    /// Sends the CONNECT for `authority` with `token` to the ingress at
    /// `url`; the upgraded connection on its 200, else the holder's refusal.
    pub async fn open(&self, url: &str, authority: &str, token: &str) -> Result<Upgraded, Refusal> {
        let unreachable = |e: String| {
            Refusal::new(
                reason::CLUSTER_OFFLINE,
                format!("the replica holding the cluster's session ({url}) is unreachable: {e}"),
            )
        };
        tokio::time::timeout(FORWARD_TIMEOUT, self.connect(url, authority, token))
            .await
            .map_err(|_| unreachable(format!("no answer within {FORWARD_TIMEOUT:?}")))?
            .map_err(|e| match e {
                Forwarded::Refused(r) => r,
                Forwarded::Failed(e) => unreachable(e),
            })
    }

    /// An HTTP/1.1 connection to the replica ingress at `url` (verified
    /// with the link CA when it speaks TLS); also carries the requests
    /// replicas make of each other (`replica_diagnose.rs`).
    pub(super) async fn dial(&self, url: &str) -> Result<SendRequest<Full<Bytes>>, String> {
        let failed = |e: &dyn std::fmt::Display| e.to_string();
        let parsed: http::Uri = url.parse().map_err(|e| failed(&e))?;
        let https = parsed.scheme_str() == Some("https");
        let host = parsed.host().ok_or_else(|| failed(&"no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = parsed.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tcp = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| failed(&e))?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = match (https, &self.tls) {
            (true, Some(tls)) => {
                let name = rustls_pki_types::ServerName::try_from(host).map_err(|e| failed(&e))?;
                Box::new(tls.connect(name, tcp).await.map_err(|e| failed(&e))?)
            }
            (true, None) => return Err(failed(&"a TLS ingress, and no CA to verify it")),
            (false, _) => Box::new(tcp),
        };
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| failed(&e))?;
        tokio::spawn(
            connection
                .with_upgrades()
                .instrument(tracing::info_span!("tunnel.forward", %url)),
        );
        Ok(sender)
    }

    async fn connect(
        &self,
        url: &str,
        authority: &str,
        token: &str,
    ) -> Result<Upgraded, Forwarded> {
        let failed = |e: &dyn std::fmt::Display| Forwarded::Failed(e.to_string());
        let mut sender = self.dial(url).await.map_err(Forwarded::Failed)?;
        let request = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri(authority)
            .header(http::header::HOST, authority)
            .header(http::header::PROXY_AUTHORIZATION, format!("Bearer {token}"))
            .header(FORWARDED_HEADER, &self.replica_id)
            .body(Full::new(Bytes::new()))
            .map_err(|e| failed(&e))?;
        let response = sender.send_request(request).await.map_err(|e| failed(&e))?;
        if response.status() != http::StatusCode::OK {
            let said = response
                .headers()
                .get(REASON_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let known = reason::ALL
                .into_iter()
                .find(|r| *r == said)
                .unwrap_or(reason::SPOKE_ERROR);
            let body = response
                .into_body()
                .collect()
                .await
                .map(|b| String::from_utf8_lossy(&b.to_bytes()).trim().to_owned())
                .unwrap_or_default();
            // The body is the holder's `reason: message`.
            let message = body
                .strip_prefix(&format!("{said}: "))
                .unwrap_or(&body)
                .to_owned();
            return Err(Forwarded::Refused(Refusal::new(known, message)));
        }
        hyper::upgrade::on(response).await.map_err(|e| failed(&e))
    }
}

enum Forwarded {
    /// The holder answered with a refusal (passed on as it is).
    Refused(Refusal),
    /// The holder could not be reached or spoke no HTTP.
    Failed(String),
}
