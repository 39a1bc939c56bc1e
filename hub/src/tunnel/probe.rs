//! The hub's own request through the data path to a Harness, for revisions
//! without a control-cluster Gateway (embedded OpenClaw serves its gateway
//! from the data-plane workload): hub → spoke link → Harness. "Active"
//! still means a real request was answered end to end.

use std::time::Duration;

use clawfed_proto::link::v1::{TunnelFrame, tunnel_frame};

use super::broker::Broker;
use super::route::Route;

/// The status line and headers are read at most this far.
const MAX_HEAD: usize = 16 * 1024;

/// Why the probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The tunnel was refused (offline cluster, no ready endpoint, ...).
    #[error("tunnel refused ({reason}): {message}")]
    Refused {
        reason: &'static str,
        message: String,
    },
    /// The Harness answered with a status other than 2xx.
    #[error("the Harness answered {path} with HTTP {status}")]
    Status { path: String, status: u16 },
    /// The connection ended or broke before a status line arrived.
    #[error("the Harness connection ended without an HTTP answer: {0}")]
    NoAnswer(String),
    #[error("no answer from the Harness within {0:?}")]
    Timeout(Duration),
}

/// `GET path` on the Harness of `route` through the tunnel; Ok on 2xx.
pub async fn http_get(
    broker: &Broker,
    route: &Route,
    path: &str,
    timeout: Duration,
) -> Result<(), ProbeError> {
    tokio::time::timeout(timeout, get(broker, route, path))
        .await
        .map_err(|_| ProbeError::Timeout(timeout))?
}

async fn get(broker: &Broker, route: &Route, path: &str) -> Result<(), ProbeError> {
    let mut opened = broker.open(route).await.map_err(|r| ProbeError::Refused {
        reason: r.reason,
        message: r.message,
    })?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: clawfed-hub-probe\r\nConnection: close\r\n\r\n",
        route.authority
    );
    // No half-close after the request: some servers end the connection on
    // read EOF before they answer. `Connection: close` ends it instead.
    opened
        .outbound
        .send(Ok(TunnelFrame {
            body: Some(tunnel_frame::Body::Data(request.into_bytes())),
        }))
        .await
        .map_err(|_| ProbeError::NoAnswer("the tunnel closed before the request".into()))?;
    let mut head = Vec::new();
    while !head.windows(2).any(|w| w == b"\r\n") {
        let frame = opened
            .inbound
            .message()
            .await
            .map_err(|s| ProbeError::NoAnswer(s.message().to_owned()))?;
        match frame.and_then(|f| f.body) {
            Some(tunnel_frame::Body::Data(bytes)) => head.extend_from_slice(&bytes),
            Some(tunnel_frame::Body::Fin(_)) | None => {
                return Err(ProbeError::NoAnswer(format!(
                    "{} bytes before the end",
                    head.len()
                )));
            }
            Some(tunnel_frame::Body::Accept(_)) => {}
        }
        if head.len() > MAX_HEAD {
            return Err(ProbeError::NoAnswer("no status line".into()));
        }
    }
    let status = status_code(&head)
        .ok_or_else(|| ProbeError::NoAnswer("malformed HTTP status line".into()))?;
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(ProbeError::Status {
            path: path.to_owned(),
            status,
        })
    }
}

/// The status code of `HTTP/1.x NNN ...`.
fn status_code(head: &[u8]) -> Option<u16> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end();
    let mut parts = line.splitn(3, ' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::status_code;

    #[test]
    fn status_lines() {
        assert_eq!(status_code(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(
            status_code(b"HTTP/1.0 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(status_code(b"SSH-2.0-x\r\n"), None);
        assert_eq!(status_code(b"HTTP/1.1 abc\r\n"), None);
    }
}
