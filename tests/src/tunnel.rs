//! A Gateway's side of the data path, for tests and benchmarks: HTTP/1.1
//! `CONNECT` to the hub's tunnel ingress (over TLS when it speaks TLS) with
//! a transport credential.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// The spoke's dialer with the EndpointSlice read replaced by a map from
/// Harness target to a local server; it dials as `KubeHarnessDialer` does.
/// (The real resolution is proven in `pipeline_e2e` on real clusters.)
#[derive(Debug, Clone, Default)]
pub struct MapDialer(pub HashMap<String, SocketAddr>);

#[async_trait::async_trait]
impl clawfed_spoke::tunnel::HarnessDialer for MapDialer {
    async fn dial(
        &self,
        open: &clawfed_proto::link::v1::TunnelOpen,
    ) -> Result<TcpStream, clawfed_spoke::tunnel::Refusal> {
        use clawfed_proto::tunnel::reason;
        use clawfed_spoke::tunnel::Refusal;
        let addr = self.0.get(&open.target).ok_or_else(|| {
            Refusal::new(reason::NOT_MANAGED, format!("no Harness {}", open.target))
        })?;
        let s = TcpStream::connect(addr).await.map_err(|e| {
            Refusal::new(
                reason::DIAL_FAILED,
                format!("connect to the Harness at {addr}: {e}"),
            )
        })?;
        let _ = s.set_nodelay(true);
        Ok(s)
    }
}

/// A Harness stand-in that echoes every connection: bytes back until EOF,
/// then EOF.
pub async fn echo_server() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}

/// A stand-in runtime for the hub's own requests through the data path:
/// answers every HTTP request with an OpenAI chat completion whose text is
/// `answer` (the real runtime's turn is proven in `openclaw_runtime.rs`;
/// this one proves the path to it).
pub async fn chat_completion_server(answer: &'static str) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // The head, then as many body bytes as it announces.
                loop {
                    let Ok(n) = s.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).to_string();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let length = head
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if body.len() >= length {
                            break;
                        }
                    }
                }
                let body = serde_json::json!({
                    "object": "chat.completion",
                    "choices": [{ "index": 0,
                        "message": { "role": "assistant", "content": answer } }],
                })
                .to_string();
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(response.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

/// A revision a Gateway may tunnel to, and what its Gateway would use.
#[derive(Debug, Clone)]
pub struct TunnelTarget {
    pub rev: clawfed_hub::model::AgentRevision,
    /// The Gateway's transport credential.
    pub token: String,
    /// The Harness authority it CONNECTs to.
    pub authority: String,
    /// The spoke's target for the Harness.
    pub target: String,
}

/// Places revision `id` on `cluster` and moves it to `waiting-ready`, as
/// the pipeline would before its Gateway connects (tests that play the
/// pipeline's part), and derives its Gateway's credential with `secrets`
/// (the hub's key, which seals the transport key in `store`).
pub async fn ready_to_tunnel(
    store: Arc<dyn clawfed_hub::store::Store>,
    secrets: &clawfed_hub::secrets::SecretBox,
    id: &str,
    cluster: &str,
) -> TunnelTarget {
    store.place_revision(id, cluster).await.expect("place");
    let rev = store.get_revision_by_id(id).await.expect("revision");
    let rev = store
        .update_revision(
            id,
            rev.version,
            clawfed_hub::model::RevisionPhase::WaitingReady,
            None,
            &rev.progress,
        )
        .await
        .expect("waiting-ready");
    let token = clawfed_hub::gateway::TransportCredentials::load(store.clone(), secrets)
        .await
        .expect("transport key")
        .for_revision(id)
        .await
        .expect("credential")
        .gateway_token;
    let ns = store
        .get_namespace(&rev.namespace)
        .await
        .expect("namespace");
    TunnelTarget {
        authority: clawfed_proto::tunnel::harness_authority(
            &rev.agent,
            rev.number,
            &ns.data_plane_namespace,
            8080,
        ),
        target: clawfed_proto::work::target::harness(&ns.id, &rev.agent, rev.number),
        token,
        rev,
    }
}

/// Where the ingress listens and the CA of its certificate (`None`: plain).
#[derive(Debug, Clone)]
pub struct Ingress {
    pub addr: SocketAddr,
    pub ca_pem: Option<String>,
}

impl Ingress {
    /// The ingress of a running test hub.
    pub fn of(hub: &crate::hub::TestHub) -> Self {
        let t = hub
            .hub
            .as_ref()
            .and_then(|h| h.tunnel.as_ref())
            .expect("tunnel enabled");
        Self {
            addr: t.addr,
            ca_pem: t.ca_pem.clone(),
        }
    }
}

/// A tunneled connection (plain or TLS to the ingress).
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Conn::Plain(_) => "Conn::Plain",
            Conn::Tls(_) => "Conn::Tls",
        })
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

fn tls_connector(ca_pem: &str) -> std::io::Result<tokio_rustls::TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(std::io::Error::other)?)
            .map_err(std::io::Error::other)?;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// The ingress' refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    /// The `clawfed-tunnel-reason` header.
    pub reason: String,
    pub body: String,
}

/// A connection to the ingress (TLS when it speaks TLS), nothing sent.
pub async fn dial(ingress: &Ingress) -> std::io::Result<Conn> {
    let tcp = TcpStream::connect(ingress.addr).await?;
    let _ = tcp.set_nodelay(true);
    Ok(match &ingress.ca_pem {
        None => Conn::Plain(tcp),
        Some(ca) => {
            let name = ServerName::IpAddress(ingress.addr.ip().into());
            Conn::Tls(Box::new(tls_connector(ca)?.connect(name, tcp).await?))
        }
    })
}

/// Opens a tunnel to `authority` through the ingress at `ingress` with
/// `token`; the stream is connected to the Harness on success.
pub async fn connect(
    ingress: &Ingress,
    authority: &str,
    token: Option<&str>,
) -> Result<Conn, Refused> {
    let io = |e: std::io::Error| Refused {
        status: 0,
        reason: "io".into(),
        body: e.to_string(),
    };
    let mut s = dial(ingress).await.map_err(io)?;
    let auth = token
        .map(|t| format!("Proxy-Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{auth}\r\n").as_bytes(),
    )
    .await
    .map_err(io)?;
    // Read the response head byte by byte: nothing after it may be consumed
    // (it belongs to the tunneled connection).
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        if s.read(&mut b).await.map_err(io)? == 0 {
            return Err(Refused {
                status: 0,
                reason: "closed".into(),
                body: String::from_utf8_lossy(&head).into_owned(),
            });
        }
        head.push(b[0]);
        if head.len() > 16 * 1024 {
            return Err(io(std::io::Error::other("response head too long")));
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if status == 200 {
        return Ok(s);
    }
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let len: usize = header("content-length").parse().unwrap_or(0);
    let mut body = vec![0u8; len.min(64 * 1024)];
    let _ = s.read_exact(&mut body).await;
    Err(Refused {
        status,
        reason: header(clawfed_proto::tunnel::REASON_HEADER),
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
