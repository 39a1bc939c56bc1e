//! The spoke's apply limit follows the apiserver's throttling: its client
//! sees every `429` (below kube's retry, which still retries it), and the
//! limit halves.
//!
//! The apiserver here is a stand-in on loopback that answers the first
//! writes `429 Too Many Requests` with `Retry-After: 0`: a real
//! kube-apiserver throttles only under a load these machines cannot make
//! on demand. What it proves is the one error path: the layering and the
//! limit's reaction.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use clawfed_spoke::pressure::{self, ApplyLimit};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// Serves HTTP/1.1 on loopback: the first `throttle` requests get 429,
/// the rest a ConfigMap. Returns the address and the request count.
async fn throttling_apiserver(throttle: usize) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let (r, mut w) = conn.into_split();
                let mut r = BufReader::new(r);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    let mut first = true;
                    loop {
                        line.clear();
                        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" && !first {
                            break;
                        }
                        first = false;
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if r.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let n = seen.fetch_add(1, Ordering::SeqCst);
                    let (status, extra, body) = if n < throttle {
                        (
                            "429 Too Many Requests",
                            "Retry-After: 0\r\n",
                            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429}"#.to_string(),
                        )
                    } else {
                        (
                            "200 OK",
                            "",
                            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"n"}}"#.to_string(),
                        )
                    };
                    let answer = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if w.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, count)
}

#[tokio::test]
async fn a_throttled_write_is_retried_and_halves_the_apply_limit() {
    let (addr, requests) = throttling_apiserver(3).await;
    let limit = Arc::new(ApplyLimit::new(16, 2, 64));
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let client = pressure::client(config, limit.clone()).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "n");
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("c".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let applied = api
        .patch("c", &PatchParams::apply("test"), &Patch::Apply(&cm))
        .await
        .expect("retried past the 429s");
    assert_eq!(applied.metadata.name.as_deref(), Some("c"));
    assert_eq!(
        requests.load(Ordering::SeqCst),
        4,
        "three 429s, then the answer"
    );
    assert_eq!(
        limit.throttled_total(),
        3,
        "every attempt seen, not only the last"
    );
    assert_eq!(limit.current(), 8, "one burst halves the limit once");
    // Unthrottled writes grow it back, one step per round.
    for _ in 0..8 {
        api.patch("c", &PatchParams::apply("test"), &Patch::Apply(&cm))
            .await
            .unwrap();
    }
    assert_eq!(limit.current(), 9);
}
