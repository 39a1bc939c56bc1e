//! The audit log as a stream (issue 36, part 4) on a real in-process hub,
//! on SQLite and PostgreSQL: REST Server-Sent Events (read with the hub's
//! own client, as `clawfed audit --follow` reads it) and gRPC
//! `StreamAuditEvents`. A stream resumes from a cursor (the query's or
//! `Last-Event-ID`) with no gap and no duplicate; a tenant admin reads its
//! own namespace only, a deployer not at all; bad cursors are refused with
//! their reason; a revoked token's stream ends; another replica's writes
//! reach a stream on this one.

use std::time::Duration;

use chrono::Utc;
use clawfed_hub::auth::Role;
use clawfed_hub::client::HubClient;
use clawfed_hub::client::events::{EventReader, ReadError};
use clawfed_hub::model::AuditEvent;
use clawfed_hub::worker::Handlers;
use clawfed_proto::admin::v1 as pb;
use clawfed_tests::hub::{Backend, TestHub, authed, test_config};
use serde_json::json;

clawfed_tests::on_both_backends!(
    a_stream_resumes_from_its_cursor_with_no_gap_or_duplicate,
    a_stream_is_held_to_the_callers_tenant_and_cursor,
    a_replicas_writes_reach_a_stream_on_another,
    a_tenants_stream_rests_while_other_tenants_write,
);

const WAIT: Duration = Duration::from_secs(30);

async fn hub(backend: Backend) -> TestHub {
    TestHub::start_with(
        backend,
        |c| {
            // A revoked token's stream ends within a fraction of a second;
            // another replica's commits are stamped within one.
            c.watch.token_recheck_ms = 100;
            c.watch.safety_poll_ms = 200;
        },
        Handlers::builtin(),
    )
    .await
}

fn client(hub: &TestHub, token: &str) -> HubClient {
    HubClient::new(&hub.rest, Some(token.to_owned())).expect("client")
}

/// Creates Configurations `names` in `ns` as the installation admin.
async fn create_configurations(hub: &TestHub, ns: &str, names: &[String]) {
    for name in names {
        hub.post_ok(
            &format!("/namespaces/{ns}/configurations"),
            json!({ "name": name, "data": {} }),
        )
        .await;
    }
}

fn names(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}{i}")).collect()
}

/// The next `n` events of `reader`.
async fn take(reader: &mut EventReader, n: usize) -> Vec<AuditEvent> {
    let mut events = Vec::new();
    while events.len() < n {
        let next = tokio::time::timeout(WAIT, reader.next_audit())
            .await
            .unwrap_or_else(|_| panic!("waited for event {} of {n}: {events:?}", events.len()))
            .expect("read the audit stream")
            .expect("the stream ended early");
        events.push(next);
    }
    events
}

/// Every event of a stream that ends once caught up.
async fn drain(reader: &mut EventReader) -> Vec<AuditEvent> {
    let mut events = Vec::new();
    while let Some(e) = tokio::time::timeout(WAIT, reader.next_audit())
        .await
        .expect("the caught-up stream ends")
        .expect("read the audit stream")
    {
        events.push(e);
    }
    events
}

fn status_of(e: &clawfed_hub::client::ClientError) -> u16 {
    match e {
        clawfed_hub::client::ClientError::Api { status, .. } => *status,
        other => panic!("expected an answer from the hub, got {other}"),
    }
}

fn targets(events: &[AuditEvent]) -> Vec<String> {
    events.iter().map(|e| e.target.clone()).collect()
}

fn cursor(e: &AuditEvent) -> i64 {
    e.cursor.expect("a streamed event has its cursor")
}

async fn a_stream_resumes_from_its_cursor_with_no_gap_or_duplicate(backend: Backend) {
    let hub = hub(backend).await;
    hub.post_ok("/namespaces", json!({ "name": "a" })).await;
    let root = client(&hub, &hub.root_token);

    // Opened "from now on": it says where that is, and carries only what
    // comes after.
    let mut live = root
        .stream_audit(None, None, true)
        .await
        .expect("open the stream");
    let start = live.starts_after().expect("the stream names its start");
    assert!(start >= 1, "the namespace's creation came before: {start}");
    create_configurations(&hub, "a", &names("c", 0..5)).await;
    let first = take(&mut live, 3).await;
    let want: Vec<String> = names("configurations/c", 0..3);
    assert_eq!(targets(&first), want);
    assert!(first.iter().all(|e| e.action == "configuration.create"));
    assert!(cursor(&first[0]) > start);
    assert!(first.windows(2).all(|w| cursor(&w[0]) < cursor(&w[1])));
    // The client goes away mid-stream; more is written meanwhile.
    drop(live);
    create_configurations(&hub, "a", &names("c", 5..8)).await;

    // Resumed after the last event received: the rest, each once.
    let resume_at = cursor(&first[2]);
    let mut resumed = root
        .stream_audit(None, Some(resume_at), true)
        .await
        .expect("resume");
    assert_eq!(resumed.starts_after(), Some(resume_at));
    let rest = take(&mut resumed, 5).await;
    assert_eq!(targets(&rest), names("configurations/c", 3..8));
    assert!(cursor(&rest[0]) > resume_at);

    // An SSE client's own reconnect: `Last-Event-ID` instead of a cursor.
    let response = hub
        .http
        .get(hub.url("/audit/stream?follow=false"))
        .bearer_auth(&hub.root_token)
        .header("last-event-id", resume_at.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let by_header = drain(&mut EventReader::new(response)).await;
    assert_eq!(targets(&by_header), names("configurations/c", 3..8));
    // A reconnecting EventSource repeats its URL (here `cursor=0`) and adds
    // the header: the header wins, so nothing is replayed.
    let response = hub
        .http
        .get(hub.url("/audit/stream?cursor=0&follow=false"))
        .bearer_auth(&hub.root_token)
        .header("last-event-id", resume_at.to_string())
        .send()
        .await
        .unwrap();
    let reconnected = drain(&mut EventReader::new(response)).await;
    assert_eq!(targets(&reconnected), names("configurations/c", 3..8));

    // From 0 without following: the whole log, oldest first, then the end;
    // the same events the listing shows, newest first.
    let whole = drain(&mut root.stream_audit(None, Some(0), false).await.unwrap()).await;
    let listed: Vec<AuditEvent> = hub.get_root_json("/audit?limit=1000").await["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| serde_json::from_value(v.clone()).unwrap())
        .collect();
    let mut listed_ids: Vec<i64> = listed.iter().map(|e| e.id).collect();
    listed_ids.reverse();
    assert_eq!(whole.iter().map(|e| e.id).collect::<Vec<_>>(), listed_ids);
    assert!(whole.windows(2).all(|w| cursor(&w[0]) < cursor(&w[1])));

    // The CLI: `clawfed audit --cursor N -o json`, one JSON line each.
    let (rest_url, token) = (hub.rest.clone(), hub.root_token.clone());
    let out = tokio::task::spawn_blocking(move || {
        let args = ["audit", "--cursor", &resume_at.to_string(), "-o", "json"].map(str::to_owned);
        clawfed_tests::procs::clawfed(&rest_url, &token, &args)
    })
    .await
    .unwrap()
    .expect("clawfed audit --cursor");
    let lines: Vec<AuditEvent> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(targets(&lines), names("configurations/c", 3..8));

    // gRPC: the same events from the same cursor, its start in metadata.
    let mut grpc = hub.grpc().await;
    let response = grpc
        .stream_audit_events(authed(
            &hub.root_token,
            pb::StreamAuditEventsRequest {
                cursor: Some(resume_at),
                follow: Some(false),
                ..Default::default()
            },
        ))
        .await
        .expect("open the gRPC stream");
    assert_eq!(
        response.metadata().get("clawfed-audit-after").unwrap(),
        resume_at.to_string().as_str()
    );
    let mut stream = response.into_inner();
    let mut over_grpc = Vec::new();
    while let Some(e) = tokio::time::timeout(WAIT, stream.message())
        .await
        .unwrap()
        .expect("read the gRPC stream")
    {
        over_grpc.push((e.cursor, e.target));
    }
    let over_sse: Vec<(i64, String)> = rest.iter().map(|e| (cursor(e), e.target.clone())).collect();
    assert_eq!(over_grpc, over_sse);
}

async fn a_stream_is_held_to_the_callers_tenant_and_cursor(backend: Backend) {
    let hub = hub(backend).await;
    for ns in ["a", "b"] {
        hub.post_ok("/namespaces", json!({ "name": ns })).await;
    }
    create_configurations(&hub, "a", &names("a", 0..3)).await;
    create_configurations(&hub, "b", &names("b", 0..2)).await;
    let a_admin = hub.token("a-admin", Some("a"), Role::Admin).await;
    let a_deployer = hub.token("a-deployer", Some("a"), Role::Deployer).await;

    // A tenant admin reads its own namespace's events, and no other's.
    let tenant = client(&hub, &a_admin);
    let own = drain(&mut tenant.stream_audit(None, Some(0), false).await.unwrap()).await;
    assert!(!own.is_empty());
    assert!(
        own.iter().all(|e| e.namespace.as_deref() == Some("a")),
        "{own:?}"
    );
    assert!(targets(&own).contains(&"configurations/a2".to_owned()));
    let refused = tenant
        .stream_audit(Some("b"), Some(0), false)
        .await
        .unwrap_err();
    assert_eq!(status_of(&refused), 403, "{refused}");
    // An installation admin may pick one namespace.
    let only_b = drain(
        &mut client(&hub, &hub.root_token)
            .stream_audit(Some("b"), Some(0), false)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        targets(&only_b)
            .into_iter()
            .filter(|t| t.starts_with("configurations/"))
            .collect::<Vec<_>>(),
        ["configurations/b0", "configurations/b1"]
    );
    assert!(only_b.iter().all(|e| e.namespace.as_deref() == Some("b")));
    // A deployer may not read the audit log at all.
    let denied = client(&hub, &a_deployer)
        .stream_audit(None, Some(0), false)
        .await
        .unwrap_err();
    assert_eq!(status_of(&denied), 403, "{denied}");

    // Bad cursors, with their reasons.
    let head = cursor(own.last().unwrap()).max(cursor(only_b.last().unwrap()));
    let ahead = hub
        .http
        .get(hub.url(&format!("/audit/stream?cursor={}", head + 1000)))
        .bearer_auth(&hub.root_token)
        .send()
        .await
        .unwrap();
    assert_eq!(ahead.status(), 410);
    let body: serde_json::Value = ahead.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ahead of the audit log"),
        "{body}"
    );
    let negative = hub
        .http
        .get(hub.url("/audit/stream?cursor=-1"))
        .bearer_auth(&hub.root_token)
        .send()
        .await
        .unwrap();
    assert_eq!(negative.status(), 400);
    let body: serde_json::Value = negative.json().await.unwrap();
    assert_eq!(body["error"]["field"], "cursor", "{body}");
    let mut grpc = hub.grpc().await;
    let status = grpc
        .stream_audit_events(authed(
            &hub.root_token,
            pb::StreamAuditEventsRequest {
                cursor: Some(head + 1000),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}");
    // Over gRPC, the tenant's stream is its own too.
    let response = grpc
        .stream_audit_events(authed(
            &a_admin,
            pb::StreamAuditEventsRequest {
                cursor: Some(0),
                follow: Some(false),
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    let mut stream = response.into_inner();
    let mut count = 0;
    while let Some(e) = stream.message().await.unwrap() {
        assert_eq!(e.namespace, "a");
        count += 1;
    }
    assert_eq!(count, own.len());

    // A following stream ends once its token is revoked, with the reason.
    let mut following = tenant.stream_audit(None, None, true).await.unwrap();
    create_configurations(&hub, "a", &names("late", 0..1)).await;
    let got = take(&mut following, 1).await;
    assert_eq!(targets(&got), ["configurations/late0"]);
    hub.store()
        .revoke_token("a-admin", Utc::now())
        .await
        .unwrap();
    let end = tokio::time::timeout(WAIT, following.next_audit())
        .await
        .expect("the revoked token's stream ends");
    match end {
        Err(ReadError::Unauthenticated(reason)) => {
            assert!(reason.contains("revoked"), "{reason}")
        }
        other => panic!("expected the end for a revoked token, got {other:?}"),
    }
}

async fn a_replicas_writes_reach_a_stream_on_another(backend: Backend) {
    let hub = hub(backend).await;
    hub.post_ok("/namespaces", json!({ "name": "a" })).await;
    // A second replica: its own store connection, so no in-process signal
    // reaches the first. The second stamps its own commits; the first
    // learns the new head on its sequencer's poll.
    let mut config = test_config(&hub.db.url);
    config.watch.safety_poll_ms = 200;
    let other_store = clawfed_hub::store::connect(&hub.db.url).await.unwrap();
    let other = clawfed_hub::server::start_with_parts(
        &config,
        std::sync::Arc::new(other_store),
        Handlers::builtin(),
        None,
    )
    .await
    .expect("start the second replica");
    let mut stream = client(&hub, &hub.root_token)
        .stream_audit(None, None, true)
        .await
        .unwrap();
    let other_client = HubClient::new(
        &format!("http://{}", other.rest_addr),
        Some(hub.root_token.clone()),
    )
    .unwrap();
    for name in names("r", 0..3) {
        let _: serde_json::Value = other_client
            .post(
                "/namespaces/a/configurations",
                &json!({ "name": name, "data": {} }),
            )
            .await
            .expect("write on the second replica");
    }
    // Before any write on this replica: only its sequencer's poll can
    // learn the head the other replica stamped.
    let remote = take(&mut stream, 3).await;
    assert_eq!(targets(&remote), names("configurations/r", 0..3));
    create_configurations(&hub, "a", &names("l", 0..1)).await;
    let local = take(&mut stream, 1).await;
    assert_eq!(targets(&local), ["configurations/l0"]);
    let got: Vec<AuditEvent> = remote.into_iter().chain(local).collect();
    assert!(got.windows(2).all(|w| cursor(&w[0]) < cursor(&w[1])));
    other.stop().await;
    let _ = std::fs::remove_dir_all(&config.link.ca_dir);
}

/// `occ_audit_stream_reads_total`: pages the audit streams read.
async fn stream_reads(hub: &TestHub) -> u64 {
    let text = hub.scrape_metrics().await;
    text.lines()
        .find_map(|l| l.strip_prefix("occ_audit_stream_reads_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no occ_audit_stream_reads_total in\n{text}"))
}

/// A tenant's following stream passes over other tenants' events without
/// reading the store again for each, and rests once it has: other tenants'
/// writes move the log's head past everything it reads, and a stream that
/// waited only for the head to pass its own last event would read in a
/// loop for good.
async fn a_tenants_stream_rests_while_other_tenants_write(backend: Backend) {
    let hub = hub(backend).await;
    for ns in ["a", "b"] {
        hub.post_ok("/namespaces", json!({ "name": ns })).await;
    }
    let a_admin = hub.token("a-admin", Some("a"), Role::Admin).await;
    let mut stream = client(&hub, &a_admin)
        .stream_audit(None, None, true)
        .await
        .unwrap();
    create_configurations(&hub, "b", &names("b", 0..20)).await;
    // b's events are stamped (a listing stamps first), so a's stream has
    // been told of the head past them.
    let listed = hub.get_root_json("/audit?limit=1").await;
    assert_eq!(listed["items"][0]["target"], "configurations/b19");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = stream_reads(&hub).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = stream_reads(&hub).await;
    assert!(
        after - before <= 3,
        "a resting stream read the store {} times in a second",
        after - before
    );
    // And it still follows its own tenant.
    create_configurations(&hub, "a", &names("a", 0..1)).await;
    assert_eq!(targets(&take(&mut stream, 1).await), ["configurations/a0"]);
}
