//! Reads a Pod-private path through the apiserver's Pod proxy
//! (`pods/<name>:<port>/proxy/<path>`, needs `pods/proxy get` in the
//! namespace): the spoke reaches the exact Pod it observed, with its own
//! credentials, and the workload needs no Service or open port for it.
//! Bodies and waits are bounded.

use std::time::Duration;

use futures::AsyncReadExt;
use kube::Client;

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The Pod (or the apiserver for it) answered with an HTTP error.
    #[error("HTTP {0}")]
    Status(u16),
    /// No answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The request failed otherwise.
    #[error("pod proxy request failed")]
    Request(#[source] Box<kube::Error>),
}

/// `GET <path>` of Pod `pod` on `port`; at most `max_bytes + 1` bytes of
/// the body are read (so a caller can tell an oversized body).
pub async fn get(
    client: &Client,
    namespace: &str,
    pod: &str,
    port: i32,
    path: &str,
    max_bytes: usize,
    timeout: Duration,
) -> Result<Vec<u8>, ProxyError> {
    let url = format!("/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy{path}");
    let request = http::Request::get(&url)
        .body(Vec::new())
        .map_err(|e| ProxyError::Request(Box::new(kube::Error::HttpError(e))))?;
    let read = async {
        let stream = client.request_stream(request).await?;
        let mut body = Vec::new();
        std::pin::pin!(stream)
            .take(max_bytes as u64 + 1)
            .read_to_end(&mut body)
            .await
            .map_err(kube::Error::ReadEvents)?;
        Ok::<_, kube::Error>(body)
    };
    match tokio::time::timeout(timeout, read).await {
        Err(_) => Err(ProxyError::Timeout(timeout)),
        Ok(Err(kube::Error::Api(status))) => Err(ProxyError::Status(status.code)),
        Ok(Err(e)) => Err(ProxyError::Request(Box::new(e))),
        Ok(Ok(body)) => Ok(body),
    }
}
