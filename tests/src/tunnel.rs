//! A Gateway's side of the data path, for tests and benchmarks: HTTP/1.1
//! `CONNECT` to the hub's tunnel ingress with a transport credential.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The ingress' refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    /// The `clawfed-tunnel-reason` header.
    pub reason: String,
    pub body: String,
}

/// Opens a tunnel to `authority` through the ingress at `ingress` with
/// `token`; the stream is connected to the Harness on success.
pub async fn connect(
    ingress: SocketAddr,
    authority: &str,
    token: Option<&str>,
) -> Result<TcpStream, Refused> {
    let io = |e: std::io::Error| Refused {
        status: 0,
        reason: "io".into(),
        body: e.to_string(),
    };
    let mut s = TcpStream::connect(ingress).await.map_err(io)?;
    let _ = s.set_nodelay(true);
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
