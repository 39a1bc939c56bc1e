//! TLS for the admin API (REST and gRPC): certificate and key from PEM
//! files (`api.tls`), reloaded when they change, and optional client
//! certificates from `api.tls.clientCaFile`.
//!
//! The whole rustls configuration is rebuilt on a change and swapped in, so
//! a new serving pair and a rotated client CA take effect together for the
//! next handshake; connections already open keep theirs. A new pair that
//! does not load (unreadable, not PEM, key not matching the certificate) is
//! logged and the previous one keeps serving: a half-written rotation never
//! takes the API down. The files are read again on a poll rather than a
//! file watch: a Kubernetes Secret volume swaps a symlink, which inotify
//! reports inconsistently, and comparing a digest of three small files is
//! cheap.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use sha2::{Digest, Sha256};
use std::sync::atomic::AtomicU64;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::auth::{self, ClientCertError};
use crate::link::metrics::ResultLabel;

/// How long a client may take to complete its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes in progress on one listener at most; more wait in the backlog.
const MAX_HANDSHAKES: usize = 256;

/// Errors loading the admin API's TLS material.
#[derive(Debug, thiserror::Error)]
pub enum ApiTlsError {
    /// A configured file could not be read.
    #[error("cannot read {field} {path}")]
    Read {
        field: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file holds no usable PEM item of the expected kind.
    #[error("{field} {path}: no PEM {what} in it")]
    Pem {
        field: &'static str,
        path: PathBuf,
        what: &'static str,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// The serving certificate could not be parsed.
    #[error("api.tls.certFile {path}: not an X.509 certificate")]
    Certificate { path: PathBuf },
    /// rustls refused the pair (most often: the key does not match the
    /// certificate).
    #[error("api.tls.certFile and api.tls.keyFile do not form a usable pair")]
    Pair(#[source] rustls::Error),
    /// The client CA file does not make a verifier.
    #[error("api.tls.clientCaFile {path}: not a usable CA")]
    ClientCa {
        path: PathBuf,
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    /// A CA certificate was refused by the root store.
    #[error("api.tls.clientCaFile {path}: not a usable CA certificate")]
    ClientCaCert {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

/// The files the admin API's TLS is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// Clients presenting a certificate signed by this CA authenticate
    /// with it (see [`auth::client_cert_token_name`]).
    pub client_ca_file: Option<PathBuf>,
}

/// The admin API's TLS metrics.
#[derive(Debug, Clone, Default)]
pub struct TlsMetrics {
    /// When the serving certificate expires (Unix seconds).
    pub not_after: Gauge<f64, AtomicU64>,
    /// Loads of the files, by result (`ok`, `error`).
    pub reloads: Family<ResultLabel, Counter>,
}

impl TlsMetrics {
    /// Registers the metrics in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "occ_api_tls_certificate_not_after_timestamp_seconds",
            "When the admin API's serving certificate expires (Unix seconds); `… - time()` is the time left",
            m.not_after.clone(),
        );
        registry.register(
            "occ_api_tls_reloads",
            "Loads of the admin API's certificate files by result; an error keeps the previous certificate",
            m.reloads.clone(),
        );
        m
    }

    fn count(&self, result: &str) {
        self.reloads
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
    }
}

/// What one look at the files did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reload {
    /// Same content as served (or as the last refused attempt).
    Unchanged,
    /// A new pair serves from the next handshake on; it expires then.
    Reloaded { not_after: i64 },
}

/// The configurations a loaded pair makes: REST speaks HTTP/1.1, gRPC h2.
#[derive(Debug)]
struct Loaded {
    rest: Arc<ServerConfig>,
    grpc: Arc<ServerConfig>,
}

/// The admin API's TLS: the current configurations and the files they
/// come from.
#[derive(Debug)]
pub struct ApiTls {
    files: TlsFiles,
    current: RwLock<Arc<Loaded>>,
    /// Digests of the content now served and of the last refused content
    /// (so a broken pair is logged once, not at every poll).
    seen: Mutex<(Vec<u8>, Option<Vec<u8>>)>,
    metrics: TlsMetrics,
}

impl ApiTls {
    /// Loads the files; an error here stops the hub from starting.
    pub fn load(files: TlsFiles, metrics: TlsMetrics) -> Result<Self, ApiTlsError> {
        let content = Content::read(&files)?;
        let (loaded, not_after) = content
            .build(&files)
            .inspect_err(|_| metrics.count("error"))?;
        metrics.count("ok");
        metrics.not_after.set(not_after as f64);
        Ok(Self {
            seen: Mutex::new((content.digest(), None)),
            files,
            current: RwLock::new(Arc::new(loaded)),
            metrics,
        })
    }

    /// Reads the files again and swaps in a changed pair that loads.
    pub fn reload(&self) -> Result<Reload, ApiTlsError> {
        // A file briefly missing mid-rotation is an error like any other:
        // the old pair keeps serving.
        let content = Content::read(&self.files).inspect_err(|_| self.metrics.count("error"))?;
        let digest = content.digest();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if digest == seen.0 || seen.1.as_ref() == Some(&digest) {
            return Ok(Reload::Unchanged);
        }
        match content.build(&self.files) {
            Ok((loaded, not_after)) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(loaded);
                *seen = (digest, None);
                self.metrics.count("ok");
                self.metrics.not_after.set(not_after as f64);
                Ok(Reload::Reloaded { not_after })
            }
            Err(e) => {
                seen.1 = Some(digest);
                self.metrics.count("error");
                Err(e)
            }
        }
    }

    /// Polls the files every `every` until `shutdown`, logging each change
    /// and each refused pair.
    pub async fn watch(self: Arc<Self>, every: Duration, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        // A missing file repeats its error every poll; log it once until it
        // changes.
        let mut last_error = None;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let this = self.clone();
            // File reads are blocking; keep them off the async workers.
            let Ok(result) = tokio::task::spawn_blocking(move || this.reload()).await else {
                continue;
            };
            match result {
                Ok(Reload::Unchanged) => {}
                Ok(Reload::Reloaded { not_after }) => {
                    last_error = None;
                    tracing::info!(
                        cert_file = %self.files.cert_file.display(),
                        not_after = %chrono::DateTime::from_timestamp(not_after, 0).unwrap_or_default(),
                        "api.tls.reloaded"
                    );
                }
                Err(e) => {
                    let text = clawfed_proto::errors::chain(&e);
                    if last_error.as_ref() != Some(&text) {
                        tracing::error!(
                            error = %text,
                            kept = "the previous certificate",
                            "api.tls.reload_failed"
                        );
                        last_error = Some(text);
                    }
                }
            }
        }
    }

    /// The REST listener's configuration for the next handshake.
    pub fn rest_config(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .rest
            .clone()
    }

    /// The gRPC listener's configuration for the next handshake.
    pub fn grpc_config(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .grpc
            .clone()
    }
}

/// The bytes of the configured files.
struct Content {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

fn pem_error(
    field: &'static str,
    path: &Path,
    what: &'static str,
    source: rustls_pki_types::pem::Error,
) -> ApiTlsError {
    ApiTlsError::Pem {
        field,
        path: path.to_owned(),
        what,
        source,
    }
}

fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, ApiTlsError> {
    std::fs::read(path).map_err(|source| ApiTlsError::Read {
        field,
        path: path.to_owned(),
        source,
    })
}

impl Content {
    fn read(files: &TlsFiles) -> Result<Self, ApiTlsError> {
        Ok(Self {
            cert: read("api.tls.certFile", &files.cert_file)?,
            key: read("api.tls.keyFile", &files.key_file)?,
            client_ca: files
                .client_ca_file
                .as_deref()
                .map(|p| read("api.tls.clientCaFile", p))
                .transpose()?,
        })
    }

    fn digest(&self) -> Vec<u8> {
        let mut h = Sha256::new();
        for part in [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()] {
            let part = part.map_or(&[][..], |p| &p[..]);
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        h.finalize().to_vec()
    }

    /// The REST and gRPC configurations, and the certificate's expiry.
    fn build(&self, files: &TlsFiles) -> Result<(Loaded, i64), ApiTlsError> {
        let chain = CertificateDer::pem_slice_iter(&self.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem_error("api.tls.certFile", &files.cert_file, "certificate", e))?;
        let Some(leaf) = chain.first() else {
            return Err(pem_error(
                "api.tls.certFile",
                &files.cert_file,
                "certificate",
                rustls_pki_types::pem::Error::NoItemsFound,
            ));
        };
        let not_after = x509_parser::parse_x509_certificate(leaf)
            .map(|(_, c)| c.validity().not_after.timestamp())
            .map_err(|_| ApiTlsError::Certificate {
                path: files.cert_file.clone(),
            })?;
        let key = PrivateKeyDer::from_pem_slice(&self.key)
            .map_err(|e| pem_error("api.tls.keyFile", &files.key_file, "private key", e))?;
        let provider = crate::link::tls::crypto_provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            // TLS 1.3, and 1.2 for automation that has no 1.3 yet.
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(ApiTlsError::Pair)?;
        let with_client = match (&self.client_ca, &files.client_ca_file) {
            (Some(ca), Some(path)) => {
                let mut roots = rustls::RootCertStore::empty();
                let certs = CertificateDer::pem_slice_iter(ca)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| pem_error("api.tls.clientCaFile", path, "certificate", e))?;
                if certs.is_empty() {
                    return Err(pem_error(
                        "api.tls.clientCaFile",
                        path,
                        "certificate",
                        rustls_pki_types::pem::Error::NoItemsFound,
                    ));
                }
                for cert in certs {
                    roots
                        .add(cert)
                        .map_err(|source| ApiTlsError::ClientCaCert {
                            path: path.clone(),
                            source,
                        })?;
                }
                // Optional: bearer tokens keep working for clients without
                // a certificate; one that presents a certificate must chain
                // to this CA or the handshake fails.
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .allow_unauthenticated()
                        .build()
                        .map_err(|source| ApiTlsError::ClientCa {
                            path: path.clone(),
                            source,
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
            _ => builder.with_no_client_auth(),
        };
        let mut rest = with_client
            .with_single_cert(chain, key)
            .map_err(ApiTlsError::Pair)?;
        if self.client_ca.is_some() {
            // No resumption: a resumed session skips client certificate
            // verification, so a CA removed from the file would keep
            // admitting its certificates.
            rest.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
            rest.send_tls13_tickets = 0;
        }
        let mut grpc = rest.clone();
        rest.alpn_protocols = vec![b"http/1.1".to_vec()];
        grpc.alpn_protocols = vec![b"h2".to_vec()];
        Ok((
            Loaded {
                rest: Arc::new(rest),
                grpc: Arc::new(grpc),
            },
            not_after,
        ))
    }
}

/// One admin API connection after its TLS handshake.
pub type TlsConn = tokio_rustls::server::TlsStream<TcpStream>;

/// Accepts connections on `listener` and passes each to `conns` once its
/// handshake with `config()` (read per connection, so a reload applies to
/// the next one) completes. Handshakes run concurrently and have a
/// deadline, so a slow or silent client holds up nobody else.
pub async fn accept_loop(
    listener: TcpListener,
    config: impl Fn() -> Arc<ServerConfig> + Send + 'static,
    what: &'static str,
    conns: mpsc::Sender<TlsConn>,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: back off briefly.
                    tracing::warn!(what, error = %e, "api.accept_failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = tokio_rustls::TlsAcceptor::from(config());
        let conns = conns.clone();
        tokio::spawn(
            async move {
                let _slot = slot;
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => {
                        let _ = conns.send(tls).await;
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(what, %peer, error = %e, "api.tls_handshake_failed")
                    }
                    Err(_) => tracing::debug!(what, %peer, "api.tls_handshake_timeout"),
                }
            }
            .instrument(tracing::info_span!("api.handshake", %peer)),
        );
    }
}

/// The REST side of [`accept_loop`]: an axum listener of handshaken
/// connections, each with its peer (see [`TlsPeer`]).
#[derive(Debug)]
pub struct TlsListener {
    conns: mpsc::Receiver<TlsConn>,
    local: SocketAddr,
}

impl TlsListener {
    /// A listener over the connections `accept_loop` sends to `conns`.
    pub fn new(conns: mpsc::Receiver<TlsConn>, local: SocketAddr) -> Self {
        Self { conns, local }
    }
}

/// Who is on the other end of a REST connection over TLS.
#[derive(Debug, Clone)]
pub struct TlsPeer {
    pub addr: SocketAddr,
    /// The API token its verified client certificate names, if it
    /// presented one.
    pub client_cert: Option<Result<String, ClientCertError>>,
}

impl TlsPeer {
    fn of(conn: &TlsConn, fallback: SocketAddr) -> Self {
        let (tcp, session) = conn.get_ref();
        Self {
            addr: tcp.peer_addr().unwrap_or(fallback),
            client_cert: session
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|leaf| auth::client_cert_token_name(leaf)),
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsConn;
    type Addr = TlsPeer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.conns.recv().await {
            Some(conn) => {
                let peer = TlsPeer::of(&conn, self.local);
                (conn, peer)
            }
            // The accept loop ended (shutdown): nothing more comes, and
            // the server's graceful shutdown ends the serve.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(TlsPeer {
            addr: self.local,
            client_cert: None,
        })
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for TlsPeer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        stream.remote_addr().clone()
    }
}
