//! One readiness probe attempt, run from the root namespace against the Pod
//! IP (as a kubelet probes from the node).

use std::net::{Ipv4Addr, SocketAddr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::podspec::{ProbePlan, ProbeTarget};

/// Why a probe attempt failed; its text goes to the Ready condition.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("readiness probe: connecting to {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("readiness probe: {addr} did not answer in {timeout_ms} ms")]
    Timeout { addr: SocketAddr, timeout_ms: u128 },
    #[error("readiness probe: GET {path} on {addr}: http status {status}")]
    Status {
        addr: SocketAddr,
        path: String,
        status: u16,
    },
    #[error("readiness probe: GET {path} on {addr}: no HTTP status line in the answer")]
    BadResponse { addr: SocketAddr, path: String },
    #[error("readiness probe: talking to {addr}")]
    Io {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The message with its cause, for the Pod's Ready condition.
    pub fn describe(&self) -> String {
        match std::error::Error::source(self) {
            Some(cause) => format!("{self}: {cause}"),
            None => self.to_string(),
        }
    }
}

pub async fn probe(ip: Ipv4Addr, plan: &ProbePlan) -> Result<(), Error> {
    let port = match &plan.target {
        ProbeTarget::Http { port, .. } | ProbeTarget::Tcp { port } => *port,
    };
    let addr = SocketAddr::from((ip, port));
    let attempt = async {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|source| Error::Connect { addr, source })?;
        let ProbeTarget::Http { path, .. } = &plan.target else {
            return Ok(());
        };
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: clawfed-podrunner\r\nConnection: close\r\n\r\n"
        );
        let io = |source| Error::Io { addr, source };
        stream.write_all(request.as_bytes()).await.map_err(io)?;
        let mut head = Vec::with_capacity(256);
        let mut buf = [0u8; 256];
        // Only the status line matters; a bounded read finds it.
        while !head.contains(&b'\n') && head.len() < 4096 {
            let n = stream.read(&mut buf).await.map_err(io)?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let status = status_code(&head).ok_or_else(|| Error::BadResponse {
            addr,
            path: path.clone(),
        })?;
        if (200..400).contains(&status) {
            Ok(())
        } else {
            Err(Error::Status {
                addr,
                path: path.clone(),
                status,
            })
        }
    };
    tokio::time::timeout(plan.timeout, attempt)
        .await
        .unwrap_or(Err(Error::Timeout {
            addr,
            timeout_ms: plan.timeout.as_millis(),
        }))
}

/// `HTTP/1.1 503 Service Unavailable` -> 503.
fn status_code(head: &[u8]) -> Option<u16> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    parts.next().filter(|v| v.starts_with("HTTP/1."))?;
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::net::TcpListener;

    #[test]
    fn status_line_parses() {
        assert_eq!(
            status_code(b"HTTP/1.1 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(status_code(b"HTTP/1.0 200 OK\r\n"), Some(200));
        assert_eq!(status_code(b"SSH-2.0-x\r\n"), None);
    }

    async fn serve_once(answer: &'static str) -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(answer.as_bytes()).await;
        });
        port
    }

    fn http(port: u16) -> ProbePlan {
        ProbePlan {
            target: ProbeTarget::Http {
                port,
                path: "/healthz".into(),
            },
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            failure_threshold: 1,
        }
    }

    #[tokio::test]
    async fn http_probe_passes_on_2xx_and_fails_on_503() {
        let ok = serve_once("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
        probe(Ipv4Addr::LOCALHOST, &http(ok)).await.unwrap();
        let bad = serve_once("HTTP/1.1 503 Service Unavailable\r\n\r\n").await;
        let e = probe(Ipv4Addr::LOCALHOST, &http(bad)).await.unwrap_err();
        assert!(e.describe().contains("http status 503"), "{}", e.describe());
    }

    #[tokio::test]
    async fn probe_of_a_closed_port_fails_with_connect() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let e = probe(Ipv4Addr::LOCALHOST, &http(port)).await.unwrap_err();
        assert!(matches!(e, Error::Connect { .. }), "{e:?}");
    }
}
