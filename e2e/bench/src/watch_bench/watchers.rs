//! The watchers: SSE and gRPC, each on its own connection, counting what
//! they receive into the shared tally.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use clawfed_proto::admin::v1 as admin;
use tokio_util::sync::CancellationToken;

use super::tally::{Seen, Tally, json_str};

/// An SSE watcher: `GET /api/v1/watch` on its own connection.
pub(super) async fn sse_watcher(
    rest: String,
    token: String,
    tally: Arc<Tally>,
    commit_sample: bool,
    stop: CancellationToken,
) {
    let client = match reqwest::Client::builder().pool_max_idle_per_host(0).build() {
        Ok(c) => c,
        Err(e) => return tally.error(format!("sse client: {e}")),
    };
    let response = client
        .get(format!("{rest}/api/v1/watch"))
        .bearer_auth(&token)
        .send()
        .await;
    let mut response = match response {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => return tally.error(format!("sse: HTTP {}", r.status())),
        Err(e) => return tally.error(format!("sse: {e}")),
    };
    tally.connected.fetch_add(1, Ordering::Relaxed);
    let mut seen = Seen::new(tally.clone(), commit_sample);
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    loop {
        let chunk = tokio::select! {
            c = response.chunk() => c,
            _ = stop.cancelled() => return,
        };
        let chunk = match chunk {
            Ok(Some(c)) => c,
            Ok(None) => return tally.error("sse: stream ended".into()),
            Err(e) => return tally.error(format!("sse: {e}")),
        };
        buf.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(end) = buf[start..].windows(2).position(|w| w == b"\n\n") {
            let block = &buf[start..start + end];
            start += end + 2;
            let Ok(text) = std::str::from_utf8(block) else {
                continue;
            };
            let (mut id, mut kind, mut data) = (None, "", "");
            for line in text.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().parse::<i64>().ok();
                } else if let Some(v) = line.strip_prefix("event:") {
                    kind = v.trim();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data = v;
                }
            }
            if kind == "relist" {
                tally.relists.fetch_add(1, Ordering::Relaxed);
                return tally.error(format!("sse: relist: {data}"));
            }
            if let Some(id) = id {
                seen.event(id, data, json_str(data, "at"));
            }
        }
        buf.drain(..start);
    }
}

/// A gRPC watcher: `AdminService.Watch` on its own connection.
pub(super) async fn grpc_watcher(
    grpc: String,
    token: String,
    tally: Arc<Tally>,
    commit_sample: bool,
    stop: CancellationToken,
) {
    let channel = match tonic::transport::Endpoint::from_shared(grpc) {
        Ok(e) => e.connect().await,
        Err(e) => return tally.error(format!("grpc endpoint: {e}")),
    };
    let mut client = match channel {
        Ok(c) => admin::admin_service_client::AdminServiceClient::new(c),
        Err(e) => return tally.error(format!("grpc connect: {e}")),
    };
    let mut req = tonic::Request::new(admin::WatchRequest {
        cursor: None,
        follow: Some(true),
    });
    match format!("Bearer {token}").parse() {
        Ok(v) => {
            req.metadata_mut().insert("authorization", v);
        }
        Err(e) => return tally.error(format!("grpc metadata: {e}")),
    }
    let mut stream = match client.watch(req).await {
        Ok(r) => r.into_inner(),
        Err(e) => return tally.error(format!("grpc watch: {e}")),
    };
    tally.connected.fetch_add(1, Ordering::Relaxed);
    let mut seen = Seen::new(tally.clone(), commit_sample);
    loop {
        let msg = tokio::select! {
            m = stream.message() => m,
            _ = stop.cancelled() => return,
        };
        match msg {
            Ok(Some(e)) if e.kind == "relist" => {
                tally.relists.fetch_add(1, Ordering::Relaxed);
                return tally.error(format!("grpc: relist: {}", e.body_json));
            }
            Ok(Some(e)) => seen.event(e.cursor, &e.body_json, Some(&e.at)),
            Ok(None) => return tally.error("grpc: stream ended".into()),
            Err(e) => return tally.error(format!("grpc: {e}")),
        }
    }
}
