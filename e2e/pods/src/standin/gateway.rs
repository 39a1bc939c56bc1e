//! The Gateway stand-in: forwards every inbound HTTP request, streaming both
//! ways, to its Harness; through the hub's tunnel ingress (an HTTP CONNECT
//! with the revision's transport credential) when `CLAWFED_TUNNEL_PROXY` is
//! set, straight to the Harness endpoint otherwise (direct mode). An
//! `https://` proxy is spoken to over TLS, verified with the CA file named
//! by `CLAWFED_TUNNEL_CA_FILE` (from the transport Secret).
//!
//! It dials only 127.0.0.0/8 and 198.18.0.0/15: the addresses of this test
//! environment.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use clawfed_proto::diagnostics::{DiagnosticsBody, PublishedCheck};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_util::either::Either;

use super::{Error as EnvError, required};

/// Why a request could not be forwarded; the client gets 502 with this text.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("{0}:{1} is outside 127.0.0.0/8 and 198.18.0.0/15; the stand-in dials nothing else")]
    Forbidden(String, u16),
    #[error("connecting to {0}")]
    Connect(SocketAddr, #[source] std::io::Error),
    #[error("reading the tunnel token {0}")]
    Token(PathBuf, #[source] std::io::Error),
    #[error("the tunnel proxy's CA {0}")]
    Ca(PathBuf, #[source] std::io::Error),
    #[error("TLS to the tunnel proxy")]
    Tls(#[source] std::io::Error),
    #[error("talking to the tunnel proxy")]
    Proxy(#[source] std::io::Error),
    #[error("the tunnel proxy sent no HTTP status line")]
    ProxyAnswer,
    #[error("tunnel refused: {status} {body}")]
    Refused { status: u16, body: String },
    #[error("HTTP to the harness")]
    Http(#[source] hyper::Error),
}

/// `host:port` of an `http://host:port` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// `http://host[:port][/]` (port 80 by default); https is not spoken.
pub fn parse_http_url(name: &'static str, value: &str) -> Result<HostPort, EnvError> {
    let bad = |reason: &str| EnvError::BadEnv {
        name,
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let rest = value
        .strip_prefix("http://")
        .ok_or_else(|| bad("want http://host:port"))?;
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') {
        return Err(bad("want http://host:port with no path"));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().map_err(|_| bad("bad port"))?),
        None => (authority, 80),
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    Ok(HostPort {
        host: host.to_string(),
        port,
    })
}

#[derive(Debug, Clone)]
pub struct Gateway {
    pub harness: HostPort,
    pub proxy: Option<HostPort>,
    /// The CA file of an `https://` proxy (`None`: plain HTTP to it).
    pub proxy_ca: Option<PathBuf>,
    pub token_file: PathBuf,
}

impl Gateway {
    pub fn from_env() -> Result<Self, EnvError> {
        let harness = parse_http_url(
            "CLAWFED_HARNESS_ENDPOINT",
            &required("CLAWFED_HARNESS_ENDPOINT")?,
        )?;
        let root = std::env::var("CLAWFED_STANDIN_ROOT").unwrap_or_default();
        let (proxy, proxy_ca) = match std::env::var("CLAWFED_TUNNEL_PROXY") {
            Ok(v) if v.starts_with("https://") => {
                let ca = required("CLAWFED_TUNNEL_CA_FILE")?;
                let plain = format!("http://{}", &v["https://".len()..]);
                (
                    Some(parse_http_url("CLAWFED_TUNNEL_PROXY", &plain)?),
                    Some(PathBuf::from(format!("{root}{ca}"))),
                )
            }
            Ok(v) if !v.is_empty() => (Some(parse_http_url("CLAWFED_TUNNEL_PROXY", &v)?), None),
            _ => (None, None),
        };
        let transport = std::env::var("CLAWFED_TRANSPORT_DIR").unwrap_or_default();
        let token_file = PathBuf::from(format!("{root}{transport}")).join("gateway-token");
        Ok(Self {
            harness,
            proxy,
            proxy_ca,
            token_file,
        })
    }
}

/// The only addresses this environment lets a stand-in dial.
fn allowed(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || u32::from(v4) & 0xfffe_0000 == u32::from(Ipv4Addr::new(198, 18, 0, 0))
        }
        IpAddr::V6(_) => false,
    }
}

async fn dial(target: &HostPort) -> Result<TcpStream, ForwardError> {
    let ip: IpAddr = target
        .host
        .parse()
        .map_err(|_| ForwardError::Forbidden(target.host.clone(), target.port))?;
    if !allowed(ip) {
        return Err(ForwardError::Forbidden(target.host.clone(), target.port));
    }
    let addr = SocketAddr::new(ip, target.port);
    TcpStream::connect(addr)
        .await
        .map_err(|e| ForwardError::Connect(addr, e))
}

/// The tunnel proxy's answer head: status code and Content-Length.
async fn read_head<R: AsyncBufReadExt + Unpin>(
    r: &mut R,
) -> Result<(u16, Option<usize>), ForwardError> {
    let mut status = None;
    let mut length = None;
    let mut line = String::new();
    // At most 100 header lines: a proxy cannot make us read forever.
    for i in 0..100 {
        line.clear();
        let n = r.read_line(&mut line).await.map_err(ForwardError::Proxy)?;
        if n == 0 {
            return Err(ForwardError::ProxyAnswer);
        }
        let l = line.trim_end();
        if i == 0 {
            let code = l
                .strip_prefix("HTTP/1.")
                .and_then(|rest| rest.split_whitespace().nth(1))
                .and_then(|c| c.parse().ok());
            status = Some(code.ok_or(ForwardError::ProxyAnswer)?);
            continue;
        }
        if l.is_empty() {
            return Ok((status.ok_or(ForwardError::ProxyAnswer)?, length));
        }
        if let Some((k, v)) = l.split_once(':')
            && k.trim().eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().ok();
        }
    }
    Err(ForwardError::ProxyAnswer)
}

type Stream = Either<TcpStream, tokio_rustls::client::TlsStream<TcpStream>>;

/// TLS to the proxy at `ip`, verified with the CA in `ca_file`.
async fn tls(ca_file: &PathBuf, proxy: &HostPort, tcp: TcpStream) -> Result<Stream, ForwardError> {
    let pem = tokio::fs::read(ca_file)
        .await
        .map_err(|e| ForwardError::Ca(ca_file.clone(), e))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| ForwardError::Ca(ca_file.clone(), std::io::Error::other(e)))?;
        roots
            .add(cert)
            .map_err(|e| ForwardError::Ca(ca_file.clone(), std::io::Error::other(e)))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| ForwardError::Tls(std::io::Error::other(e)))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = match proxy.host.parse::<IpAddr>() {
        Ok(ip) => rustls::pki_types::ServerName::IpAddress(ip.into()),
        Err(_) => rustls::pki_types::ServerName::try_from(proxy.host.clone())
            .map_err(|e| ForwardError::Tls(std::io::Error::other(e)))?,
    };
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(ForwardError::Tls)?;
    Ok(Either::Right(stream))
}

/// A connection that reaches the Harness: through the tunnel or direct.
async fn connect(g: &Gateway) -> Result<BufReader<Stream>, ForwardError> {
    let Some(proxy) = &g.proxy else {
        return Ok(BufReader::new(Either::Left(dial(&g.harness).await?)));
    };
    let token = tokio::fs::read_to_string(&g.token_file)
        .await
        .map_err(|e| ForwardError::Token(g.token_file.clone(), e))?;
    let tcp = dial(proxy).await?;
    let mut stream = match &g.proxy_ca {
        Some(ca) => tls(ca, proxy, tcp).await?,
        None => Either::Left(tcp),
    };
    let target = &g.harness;
    let connect = format!(
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Bearer {}\r\n\r\n",
        token.trim()
    );
    stream
        .write_all(connect.as_bytes())
        .await
        .map_err(ForwardError::Proxy)?;
    // Buffered: bytes after the head belong to the tunneled connection and
    // stay in this reader, which hyper then reads from.
    let mut reader = BufReader::new(stream);
    let (status, length) = read_head(&mut reader).await?;
    if status == 200 {
        return Ok(reader);
    }
    let mut body = Vec::new();
    let limit = length.unwrap_or(4096).min(4096) as u64;
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        (&mut reader).take(limit).read_to_end(&mut body),
    )
    .await;
    Err(ForwardError::Refused {
        status,
        body: String::from_utf8_lossy(&body).trim().to_string(),
    })
}

/// Hop-by-hop headers (RFC 9110 7.6.1) are not forwarded.
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

async fn forward(g: &Gateway, req: Request) -> Result<Response, ForwardError> {
    let stream = connect(g).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(ForwardError::Http)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "harness connection ended");
        }
    });
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    parts.uri = path.parse().unwrap_or_default();
    for h in &HOP_BY_HOP {
        parts.headers.remove(h);
    }
    if let Ok(host) = HeaderValue::from_str(&g.harness.to_string()) {
        parts.headers.insert(header::HOST, host);
    }
    let resp = sender
        .send_request(Request::from_parts(parts, body))
        .await
        .map_err(ForwardError::Http)?;
    let (parts, body) = resp.into_parts();
    Ok(Response::from_parts(parts, Body::new(body)))
}

async fn handle(State(g): State<Arc<Gateway>>, req: Request) -> Response {
    match forward(&g, req).await {
        Ok(resp) => resp,
        Err(e) => {
            let text = match std::error::Error::source(&e) {
                Some(cause) => format!("{e}: {cause}"),
                None => e.to_string(),
            };
            tracing::warn!(error = %text, "forwarding failed");
            (StatusCode::BAD_GATEWAY, text).into_response()
        }
    }
}

/// The Gateway's own diagnostics (never forwarded): generic checks of its
/// configuration, no credential value.
async fn diagnostics(State(g): State<Arc<Gateway>>) -> axum::Json<DiagnosticsBody> {
    let check = |name: &str, ok: bool, detail: String| PublishedCheck {
        name: name.into(),
        status: if ok { "ok" } else { "fail" }.into(),
        detail,
    };
    axum::Json(DiagnosticsBody {
        checks: vec![
            check(
                "harness-endpoint",
                true,
                format!("{}:{}", g.harness.host, g.harness.port),
            ),
            check(
                "tunnel",
                true,
                if g.proxy.is_some() {
                    "through the hub's tunnel ingress".into()
                } else {
                    "direct".into()
                },
            ),
            {
                let mounted = g.token_file.is_file();
                let detail = if mounted { "mounted" } else { "not mounted" };
                check("transport-credential", mounted, detail.into())
            },
        ],
    })
}

pub fn router(g: Arc<Gateway>) -> axum::Router {
    axum::Router::new()
        .route("/_gateway/healthz", get(|| async { "ok" }))
        // The runtime's startup and readiness endpoints (the Gateway Pod's
        // probes), answered here as the OpenClaw runtime answers them;
        // `/healthz` is forwarded: the hub's data path probe uses it.
        .route(
            clawfed_proto::work::runtime::STARTUP_PATH,
            get(|| async { axum::Json(serde_json::json!({"ok": true, "status": "started"})) }),
        )
        .route(
            clawfed_proto::work::runtime::READY_PATH,
            get(|| async { axum::Json(serde_json::json!({"ready": true, "failing": []})) }),
        )
        .route(clawfed_proto::diagnostics::PATH, get(diagnostics))
        .fallback(handle)
        .with_state(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_bad_ones_name_the_variable() {
        assert_eq!(
            parse_http_url("X", "http://198.18.176.4:8080").unwrap(),
            HostPort {
                host: "198.18.176.4".into(),
                port: 8080
            }
        );
        assert_eq!(parse_http_url("X", "http://h/").unwrap().port, 80);
        let e = parse_http_url("CLAWFED_TUNNEL_PROXY", "https://h:1").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("environment variable CLAWFED_TUNNEL_PROXY="),
            "{e}"
        );
        assert!(parse_http_url("X", "http://h:1/path").is_err());
    }

    #[test]
    fn only_test_addresses_are_dialled() {
        for ok in ["127.0.0.1", "198.18.0.1", "198.19.255.1"] {
            assert!(allowed(ok.parse().unwrap()), "{ok}");
        }
        for bad in [
            "10.0.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "198.20.0.1",
            "8.8.8.8",
            "::1",
        ] {
            assert!(!allowed(bad.parse().unwrap()), "{bad}");
        }
    }
}
