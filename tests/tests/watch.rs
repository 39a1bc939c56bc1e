//! The watch API (issue 15 item 1) against a real hub: the store's event
//! log on SQLite and PostgreSQL, REST Server-Sent Events and gRPC `Watch`.
//! Events arrive in order; a stream resumes from a cursor without gaps or
//! duplicates, also across a hub restart; a too-old cursor is refused; a
//! slow consumer is cut off while another keeps up; a tenant never
//! receives another tenant's events.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use clawfed_hub::auth::Role;
use clawfed_hub::model::event::{ClusterEvent, EventBody, WorkFailedEvent, WorkFailureSource};
use clawfed_hub::model::{ConnectionState, RevisionPhase};
use clawfed_hub::store::{ClusterRecord, NewEvent, SpokeHello, Store};
use clawfed_proto::admin::v1 as pb;
use clawfed_tests::hub::{Backend, TestHub, authed, test_config};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

// ---- a Server-Sent Events reader ------------------------------------------------

#[derive(Debug, Clone)]
struct Sse {
    id: Option<i64>,
    event: String,
    data: Value,
}

struct SseStream {
    response: reqwest::Response,
    buf: Vec<u8>,
}

impl SseStream {
    /// Opens `GET {rest}/api/v1/watch{query}`; a refusal is its status and
    /// body.
    async fn open(rest: &str, token: &str, query: &str) -> Result<Self, (u16, Value)> {
        let response = reqwest::Client::new()
            .get(format!("{rest}/api/v1/watch{query}"))
            .header("authorization", format!("Bearer {token}"))
            .send()
            .await
            .expect("send watch request");
        let status = response.status().as_u16();
        if status != 200 {
            let body = response.json().await.unwrap_or(Value::Null);
            return Err((status, body));
        }
        let kind = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        Ok(Self {
            response,
            buf: Vec::new(),
        })
    }

    /// The next event; `None` when the stream ended. Keep-alive comments
    /// are skipped.
    async fn next(&mut self) -> Option<Sse> {
        // For the event, not each chunk: keep-alive comments come as chunks
        // and would otherwise hold a missing event's wait open for good.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buf.drain(..end + 2).collect();
                let text = String::from_utf8(block).expect("utf-8 event");
                let (mut id, mut event, mut data) = (None, String::new(), String::new());
                for line in text.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().parse().expect("numeric id"));
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue;
                }
                return Some(Sse {
                    id,
                    event,
                    data: serde_json::from_str(&data).expect("event data is JSON"),
                });
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .expect("an event within the deadline")
                .expect("read the stream")?;
            self.buf.extend_from_slice(&chunk);
        }
    }

    /// The next `n` events (panics if the stream ends first).
    async fn take(&mut self, n: usize) -> Vec<Sse> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            out.push(self.next().await.expect("stream ended early"));
        }
        out
    }

    /// Every event until the stream ends (`follow=false`).
    async fn rest(&mut self) -> Vec<Sse> {
        let mut out = Vec::new();
        while let Some(e) = self.next().await {
            out.push(e);
        }
        out
    }
}

/// A work failure event of `namespace_id` (or a cluster's when `None`).
fn failure(namespace_id: Option<&str>, cluster: Option<&str>, target: &str) -> NewEvent {
    NewEvent {
        namespace_id: namespace_id.map(str::to_owned),
        cluster: cluster.map(str::to_owned),
        body: EventBody::WorkFailed(WorkFailedEvent {
            source: WorkFailureSource::Queue,
            work_id: None,
            work_kind: "test".into(),
            target: target.into(),
            error: "boom".into(),
            attempts: Some(1),
        }),
    }
}

fn cluster_event(cluster: &str) -> NewEvent {
    NewEvent {
        namespace_id: None,
        cluster: Some(cluster.to_owned()),
        body: EventBody::ClusterOffline(ClusterEvent {
            state: ConnectionState::Offline,
            last_seen: Some(Utc::now()),
            version: "1".into(),
            capabilities: vec![],
            certificate_expires_at: None,
        }),
    }
}

async fn append(store: &dyn Store, n: usize) {
    for i in 0..n {
        store
            .append_event(&failure(None, Some("exec-a"), &format!("t{i}")))
            .await
            .expect("append event");
    }
}

fn cursors(events: &[Sse]) -> Vec<i64> {
    events.iter().map(|e| e.id.expect("an id")).collect()
}

// ---- store cases, on both backends ----------------------------------------------

mod store_cases {
    use super::*;
    use clawfed_hub::store::{Effects, NewAgent, NewAudit, NewNamespace, NewRevision};

    fn fx() -> Effects {
        Effects::audit(NewAudit {
            actor: "token:test".into(),
            action: "test".into(),
            namespace: None,
            target: "t".into(),
            result: "ok".into(),
            detail: None,
        })
    }

    /// Concurrent writers get gapless cursors that read back in order;
    /// trimming keeps exactly the newest N and the head.
    pub async fn the_log_is_ordered_gapless_and_bounded(s: Arc<dyn Store>) {
        let mut writers = tokio::task::JoinSet::new();
        for w in 0..8 {
            let s = s.clone();
            writers.spawn(async move {
                for i in 0..25 {
                    s.append_event(&failure(None, None, &format!("w{w}-{i}")))
                        .await
                        .expect("append");
                }
            });
        }
        while let Some(r) = writers.join_next().await {
            r.expect("writer");
        }
        let all = s.events_after(0, 1000).await.unwrap();
        let got: Vec<i64> = all.iter().map(|e| e.cursor).collect();
        assert_eq!(got, (1..=200).collect::<Vec<_>>());
        let bounds = s.event_bounds().await.unwrap();
        assert_eq!((bounds.oldest, bounds.head), (Some(1), 200));
        assert_eq!(s.trim_events(50).await.unwrap(), 150);
        let bounds = s.event_bounds().await.unwrap();
        assert_eq!((bounds.oldest, bounds.head), (Some(151), 200));
        let page = s.events_after(170, 10).await.unwrap();
        assert_eq!(page.first().map(|e| e.cursor), Some(171));
        assert_eq!(page.len(), 10);
        // The next event continues the sequence after trimming.
        assert_eq!(
            s.append_event(&failure(None, None, "x")).await.unwrap(),
            201
        );
    }

    /// A phase change writes its event with the change; a save that keeps
    /// phase and reason, and a stale save, write none.
    pub async fn phase_changes_carry_their_event(s: Arc<dyn Store>) {
        let ns = s
            .create_namespace(
                &NewNamespace {
                    id: "ns-1".into(),
                    name: "team".into(),
                    display_name: "Team".into(),
                    data_plane_namespace: "oce-team".into(),
                    adopted: false,
                },
                &fx(),
            )
            .await
            .unwrap();
        let spec: clawfed_hub::model::AgentSpec =
            serde_json::from_value(json!({ "harnessKind": "embedded-openclaw", "image": "img:1" }))
                .unwrap();
        let agent = s
            .create_agent(
                &NewAgent {
                    namespace: "team".into(),
                    name: "bot".into(),
                    spec: spec.clone(),
                },
                &fx(),
            )
            .await
            .unwrap();
        let rev = s
            .deploy(
                &NewRevision {
                    id: uuid::Uuid::now_v7().to_string(),
                    namespace: "team".into(),
                    agent: "bot".into(),
                    agent_version: agent.version,
                    spec,
                    configuration: json!({}),
                    images: vec![],
                    resolved_cluster: None,
                    rolled_back_from: None,
                    moved: None,
                    idempotency: None,
                    requested_by: None,
                },
                &fx(),
            )
            .await
            .unwrap()
            .revision;
        s.place_revision(&rev.id, "exec-a").await.unwrap();
        let head = s.event_bounds().await.unwrap().head;
        let mut progress = rev.progress.clone();
        progress.phases.insert("preparing".into(), Utc::now());
        let saved = s
            .update_revision(
                &rev.id,
                rev.version,
                RevisionPhase::Preparing,
                Some("why"),
                &progress,
            )
            .await
            .unwrap();
        // Same phase and reason: progress only, no event.
        let saved = s
            .update_revision(
                &rev.id,
                saved.version,
                RevisionPhase::Preparing,
                Some("why"),
                &progress,
            )
            .await
            .unwrap();
        // Stale: refused, no event.
        assert!(
            s.update_revision(&rev.id, rev.version, RevisionPhase::Active, None, &progress)
                .await
                .is_err()
        );
        let events = s.events_after(head, 100).await.unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        let e = &events[0];
        assert_eq!(e.namespace.as_deref(), Some("team"));
        assert_eq!(e.namespace_id.as_deref(), Some(ns.id.as_str()));
        assert_eq!(e.cluster.as_deref(), Some("exec-a"));
        let EventBody::RevisionPhase(p) = &e.body else {
            panic!("not a phase event: {e:?}");
        };
        assert_eq!(
            (p.phase, p.previous_phase, p.reason.as_deref()),
            (
                RevisionPhase::Preparing,
                Some(RevisionPhase::Pending),
                Some("why")
            )
        );
        assert_eq!((p.agent.as_str(), p.number), ("bot", 1));
        assert!(p.phases.contains_key("preparing"));
        assert_eq!(saved.phase, RevisionPhase::Preparing);
    }

    /// A Hello that changes nothing (the spoke moved to another replica,
    /// the cluster stayed online with the same version and capabilities)
    /// is no event: a failover of thousands of spokes would otherwise
    /// queue on the event sequence. A new version or capability is one.
    pub async fn a_hello_that_changes_nothing_is_no_event(s: Arc<dyn Store>) {
        let c = s
            .upsert_cluster(&ClusterRecord {
                name: "exec-b".into(),
                labels: Default::default(),
                capabilities: vec![],
                certificate_serials: vec![],
                connection_state: ConnectionState::Offline,
                last_seen: None,
                version: String::new(),
            })
            .await
            .unwrap();
        let caps = vec!["provider:kata".to_owned()];
        let hello = |v: &'static str, caps: &[String]| {
            let (s, id, caps) = (s.clone(), c.id.clone(), caps.to_vec());
            async move {
                let labels = BTreeMap::new();
                let hello = SpokeHello {
                    version: v,
                    capabilities: &caps,
                    labels: &labels,
                };
                s.set_connection_state(&id, ConnectionState::Online, Utc::now(), Some(hello))
                    .await
                    .unwrap()
            }
        };
        let head = s.events_after(0, 1000).await.unwrap().len();
        hello("1.0", &caps).await;
        hello("1.0", &caps).await;
        hello("1.0", &caps).await;
        let kinds = |from: usize| {
            let s = s.clone();
            async move {
                let events = s.events_after(0, 1000).await.unwrap();
                events[from..]
                    .iter()
                    .map(|e| e.body.kind().to_owned())
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(kinds(head).await, ["cluster.connected"]);
        hello("1.1", &caps).await;
        hello("1.1", &["provider:kata".into(), "gpu".into()]).await;
        assert_eq!(
            kinds(head).await,
            [
                "cluster.connected",
                "cluster.connected",
                "cluster.connected"
            ]
        );
        let fresh = s.get_cluster_by_id(&c.id).await.unwrap();
        assert_eq!(fresh.version, "1.1");
        assert_eq!(fresh.capabilities.len(), 2);
    }

    /// A Hello and a change of connection state are events (with version,
    /// capabilities, last seen); a heartbeat's last_seen is not.
    pub async fn connection_changes_are_events(s: Arc<dyn Store>) {
        let c = s
            .upsert_cluster(&ClusterRecord {
                name: "exec-a".into(),
                labels: Default::default(),
                capabilities: vec![],
                certificate_serials: vec![],
                connection_state: ConnectionState::Offline,
                last_seen: None,
                version: String::new(),
            })
            .await
            .unwrap();
        let caps = vec!["provider:kata".to_owned()];
        s.set_connection_state(
            &c.id,
            ConnectionState::Online,
            Utc::now(),
            Some(SpokeHello {
                version: "9.9",
                capabilities: &caps,
                labels: &BTreeMap::new(),
            }),
        )
        .await
        .unwrap();
        s.set_connection_state(&c.id, ConnectionState::Online, Utc::now(), None)
            .await
            .unwrap();
        s.set_connection_state(&c.id, ConnectionState::Offline, Utc::now(), None)
            .await
            .unwrap();
        s.set_connection_state(
            &c.id,
            ConnectionState::Online,
            Utc::now(),
            Some(SpokeHello {
                version: "9.9",
                capabilities: &caps,
                labels: &BTreeMap::new(),
            }),
        )
        .await
        .unwrap();
        assert_eq!(
            s.mark_stale_offline(Utc::now() + chrono::Duration::seconds(1))
                .await
                .unwrap(),
            1
        );
        let events = s.events_after(0, 100).await.unwrap();
        let kinds: Vec<&str> = events.iter().map(|e| e.body.kind()).collect();
        assert_eq!(
            kinds,
            [
                "cluster.connected",
                "cluster.offline",
                "cluster.connected",
                "cluster.offline"
            ]
        );
        let EventBody::ClusterConnected(first) = &events[0].body else {
            unreachable!()
        };
        assert_eq!(first.version, "9.9");
        assert_eq!(first.capabilities, caps);
        assert!(first.last_seen.is_some());
        assert!(
            events
                .iter()
                .all(|e| e.cluster.as_deref() == Some("exec-a") && e.namespace_id.is_none())
        );
    }
}

clawfed_tests::on_both_databases!(
    store_cases,
    sqlite,
    postgres,
    clawfed_tests::db::TestDb::dyn_store;
    the_log_is_ordered_gapless_and_bounded,
    phase_changes_carry_their_event,
    connection_changes_are_events,
    a_hello_that_changes_nothing_is_no_event,
);

// ---- the hub --------------------------------------------------------------------

/// Events arrive in order over SSE and gRPC; a stream resumed from the
/// last cursor it saw, on a restarted hub over the same database, gets
/// exactly the rest: no gap, no duplicate.
async fn resume_across_a_restart(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let root = hub.root_token.clone();
    let mut sse = SseStream::open(&hub.rest, &root, "").await.expect("watch");
    let mut grpc = hub
        .grpc()
        .await
        .watch(authed(&root, pb::WatchRequest::default()))
        .await
        .expect("grpc watch")
        .into_inner();
    append(hub.store().as_ref(), 30).await;
    let first = sse.take(30).await;
    assert_eq!(cursors(&first), (1..=30).collect::<Vec<_>>());
    assert!(first.iter().all(|e| e.event == "work.failed"));
    assert_eq!(first[0].data["kind"], "work.failed");
    assert_eq!(first[0].data["body"]["target"], "t0");
    assert_eq!(first[0].data["cursor"], 1);
    for want in 1..=30 {
        let m = tokio::time::timeout(WAIT, grpc.message())
            .await
            .expect("grpc event in time")
            .expect("grpc stream")
            .expect("not ended");
        assert_eq!((m.cursor, m.kind.as_str()), (want, "work.failed"));
        let body: Value = serde_json::from_str(&m.body_json).unwrap();
        assert_eq!(body["target"], format!("t{}", want - 1));
    }
    // Seen up to 20 only, say: the client resumes after 20.
    let seen = 20;
    drop(sse);
    drop(grpc);
    hub.stop().await;
    // A restarted hub: a new process's store over the same database.
    let store: Arc<dyn Store> = Arc::new(
        clawfed_hub::store::connect(&hub.db.url)
            .await
            .expect("reopen store"),
    );
    append(store.as_ref(), 5).await; // written while no hub ran
    let config = test_config(&hub.db.url);
    let restarted = clawfed_hub::server::start_with_parts(
        &config,
        store.clone(),
        clawfed_hub::worker::Handlers::builtin(),
        None,
    )
    .await
    .expect("restart hub");
    let rest = format!("http://{}", restarted.rest_addr);
    let mut resumed = SseStream::open(&rest, &root, &format!("?cursor={seen}"))
        .await
        .expect("resume");
    append(store.as_ref(), 5).await; // and after
    let rest_events = resumed.take(20).await;
    assert_eq!(cursors(&rest_events), (21..=40).collect::<Vec<_>>());
    // SSE's own resume header works the same.
    let mut by_header = reqwest::Client::new()
        .get(format!("{rest}/api/v1/watch?follow=false"))
        .header("authorization", format!("Bearer {root}"))
        .header("last-event-id", "38")
        .send()
        .await
        .unwrap();
    let mut text = String::new();
    while let Some(chunk) = by_header.chunk().await.unwrap() {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let ids: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("id:")).collect();
    assert_eq!(
        ids.iter().map(|s| s.trim()).collect::<Vec<_>>(),
        ["39", "40"]
    );
    drop(resumed);
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_resume_from_a_cursor_across_a_hub_restart_sqlite() {
    resume_across_a_restart(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_resume_from_a_cursor_across_a_hub_restart_postgres() {
    resume_across_a_restart(Backend::Postgres).await;
}

/// A cursor whose next events were trimmed is a 410 before any streaming
/// (gRPC: a terminal `relist` event); a cursor never given out too; a
/// negative one is a 400 / INVALID_ARGUMENT naming `cursor`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_too_old_cursor_is_refused_clearly() {
    let mut hub = TestHub::start(Backend::Sqlite).await;
    let root = hub.root_token.clone();
    append(hub.store().as_ref(), 20).await;
    hub.store().trim_events(5).await.unwrap(); // keeps 16..=20
    let Err((status, body)) = SseStream::open(&hub.rest, &root, "?cursor=3").await else {
        panic!("a trimmed cursor was accepted");
    };
    assert_eq!(status, 410, "{body}");
    assert_eq!(body["error"]["code"], "out_of_range");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("re-list"), "{message}");
    assert!(message.contains("oldest kept event 16"), "{message}");
    let Err((status, _)) = SseStream::open(&hub.rest, &root, "?cursor=99").await else {
        panic!("a cursor ahead of the log was accepted");
    };
    assert_eq!(status, 410);
    let Err((status, body)) = SseStream::open(&hub.rest, &root, "?cursor=-1").await else {
        panic!("a negative cursor was accepted");
    };
    assert_eq!((status, &body["error"]["field"]), (400, &json!("cursor")));
    // Just before the oldest kept event is still whole.
    let mut ok = SseStream::open(&hub.rest, &root, "?cursor=15&follow=false")
        .await
        .expect("cursor 15");
    assert_eq!(cursors(&ok.rest().await), (16..=20).collect::<Vec<_>>());
    // 0: everything kept.
    let mut all = SseStream::open(&hub.rest, &root, "?cursor=0&follow=false")
        .await
        .expect("cursor 0");
    assert_eq!(cursors(&all.rest().await), (16..=20).collect::<Vec<_>>());

    let mut g = hub.grpc().await;
    let mut stream = g
        .watch(authed(
            &root,
            pb::WatchRequest {
                cursor: Some(3),
                follow: None,
            },
        ))
        .await
        .expect("grpc watch")
        .into_inner();
    let relist = stream.message().await.unwrap().expect("a relist event");
    assert_eq!(relist.kind, "relist");
    let body: Value = serde_json::from_str(&relist.body_json).unwrap();
    assert_eq!(body["reason"], "cursor-too-old");
    assert!(stream.message().await.unwrap().is_none(), "the stream ends");
    let negative = g
        .watch(authed(
            &root,
            pb::WatchRequest {
                cursor: Some(-1),
                follow: None,
            },
        ))
        .await
        .expect_err("negative cursor");
    assert_eq!(negative.code(), tonic::Code::InvalidArgument);
    assert!(negative.message().contains("cursor"));
    hub.stop().await;
}

/// A gRPC client that stops reading fills its flow-control window, then
/// its stream's buffer: the hub cuts it off with a final `relist`
/// (the events before it still whole and in order), while an SSE client
/// reading along receives every event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_is_cut_off_while_another_keeps_up() {
    let mut hub = TestHub::start_with(
        Backend::Sqlite,
        |c| {
            c.watch.buffer_events = 8;
            c.watch.slow_consumer_ms = 200;
        },
        clawfed_hub::worker::Handlers::builtin(),
    )
    .await;
    let root = hub.root_token.clone();
    let total = 3000;
    let mut fast = SseStream::open(&hub.rest, &root, "").await.expect("watch");
    // A small HTTP/2 window (hyper's client default is 2 MiB): the hub
    // feels the slow reader after a few dozen events, not thousands.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", hub.grpc_addr))
        .unwrap()
        .initial_stream_window_size(16 * 1024)
        .initial_connection_window_size(16 * 1024)
        .connect()
        .await
        .expect("connect gRPC");
    let mut slow = pb::admin_service_client::AdminServiceClient::new(channel)
        .watch(authed(&root, pb::WatchRequest::default()))
        .await
        .expect("grpc watch")
        .into_inner();
    let store = hub.store();
    let writer = tokio::spawn(async move { append(store.as_ref(), total).await });
    let got = fast.take(total).await;
    assert_eq!(cursors(&got), (1..=total as i64).collect::<Vec<_>>());
    writer.await.unwrap();
    // Now the slow client reads what the hub still had for it.
    let mut last = 0;
    let end = loop {
        let m = tokio::time::timeout(WAIT, slow.message())
            .await
            .expect("in time")
            .expect("grpc stream")
            .expect("a terminal relist before the end");
        if m.kind == "relist" {
            break m;
        }
        assert_eq!(m.cursor, last + 1, "in order, no gap");
        last = m.cursor;
    };
    let body: Value = serde_json::from_str(&end.body_json).unwrap();
    assert_eq!(body["reason"], "slow-consumer");
    assert!(
        last < total as i64,
        "cut off before the end ({last} of {total})"
    );
    eprintln!("the slow consumer was cut off after {last} of {total} events");
    assert!(slow.message().await.unwrap().is_none(), "the stream ends");
    hub.stop().await;
}

/// Issue 31 item 5: a watch stream ends when its token stops being valid.
/// A token revoked while its SSE and gRPC streams are open: each gets a
/// last `unauthenticated` answer (an SSE `error` event, gRPC status
/// UNAUTHENTICATED) within one recheck, and nothing after; a reconnect is
/// a 401. A
/// token that expires while its stream is open ends it the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_or_expired_token_ends_its_open_streams() {
    let mut hub = TestHub::start_with(
        Backend::Sqlite,
        |c| c.watch.token_recheck_ms = 100,
        clawfed_hub::worker::Handlers::builtin(),
    )
    .await;
    let store = hub.store();
    let secret = hub.token("watcher", None, Role::InstallationAdmin).await;
    let mut sse = SseStream::open(&hub.rest, &secret, "")
        .await
        .expect("watch");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", hub.grpc_addr))
        .unwrap()
        .connect()
        .await
        .expect("connect gRPC");
    let mut grpc = pb::admin_service_client::AdminServiceClient::new(channel)
        .watch(authed(&secret, pb::WatchRequest::default()))
        .await
        .expect("grpc watch")
        .into_inner();
    append(store.as_ref(), 1).await;
    assert_eq!(cursors(&sse.take(1).await), vec![1]);
    let first = tokio::time::timeout(WAIT, grpc.message())
        .await
        .expect("in time")
        .expect("grpc stream")
        .expect("an event");
    assert_eq!(first.cursor, 1);

    store
        .revoke_token("watcher", Utc::now())
        .await
        .expect("revoke");
    // Within one recheck (100 ms here), without any event to carry it.
    let last = sse.next().await.expect("a last event");
    assert_eq!(last.event, "error", "{last:?}");
    assert_eq!(last.data["error"]["code"], "unauthenticated", "{last:?}");
    append(store.as_ref(), 1).await;
    assert!(sse.next().await.is_none(), "the stream ends there");
    let end = tokio::time::timeout(WAIT, async {
        loop {
            match grpc.message().await {
                // Written after the SSE stream ended; this stream's own
                // recheck may come a moment later.
                Ok(Some(m)) => assert_eq!(m.cursor, 2, "{m:?}"),
                Ok(None) => panic!("the stream ended without a status"),
                Err(status) => return status,
            }
        }
    })
    .await
    .expect("in time");
    assert_eq!(end.code(), tonic::Code::Unauthenticated, "{end:?}");
    assert!(end.message().contains("revoked"), "{end:?}");
    let (status, _) = SseStream::open(&hub.rest, &secret, "")
        .await
        .err()
        .expect("refused");
    assert_eq!(status, 401);

    // Expiry: a token valid for another 2 s when its stream opens.
    let minted = clawfed_hub::auth::mint_token();
    store
        .create_token(&clawfed_hub::store::NewToken {
            name: "short".into(),
            namespace: None,
            role: Role::InstallationAdmin,
            hash: minted.hash,
            expires_at: Some(Utc::now() + chrono::Duration::seconds(2)),
        })
        .await
        .expect("token");
    let mut short = SseStream::open(&hub.rest, &minted.secret, "?cursor=2")
        .await
        .expect("watch");
    let last = short.next().await.expect("a last event");
    assert_eq!(last.event, "error", "{last:?}");
    assert!(
        last.data["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("expired"),
        "{last:?}"
    );
    assert!(short.next().await.is_none(), "the stream ends there");
    hub.stop().await;
}

/// Tenant A's stream has A's events and the events of the cluster A's
/// revision is placed on, never B's nor another cluster's; B's has only
/// B's; an admin's has all. Over SSE and gRPC, on both backends.
async fn tenants_see_only_their_own(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let root = hub.root_token.clone();
    let http = reqwest::Client::new();
    for ns in ["team-a", "team-b"] {
        let r = http
            .post(hub.url("/namespaces"))
            .bearer_auth(&root)
            .json(&json!({ "name": ns }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let r = http
            .post(hub.url(&format!("/namespaces/{ns}/agents")))
            .bearer_auth(&root)
            .json(
                &json!({ "name": "bot", "spec": { "harnessKind": "embedded-openclaw",
                "image": "img:1" } }),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let r = http
            .post(hub.url(&format!("/namespaces/{ns}/agents/bot/deploy")))
            .bearer_auth(&root)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }
    let a = hub.token("a", Some("team-a"), Role::Viewer).await;
    let b = hub.token("b", Some("team-b"), Role::Viewer).await;
    let store = hub.store();
    let ns_a = store.get_namespace("team-a").await.unwrap();
    let ns_b = store.get_namespace("team-b").await.unwrap();
    // Real phase changes of both tenants' revisions; A's runs on exec-a.
    for (ns, cluster) in [("team-a", "exec-a"), ("team-b", "exec-b")] {
        let rev = store.get_revision(ns, "bot", 1).await.unwrap();
        store.place_revision(&rev.id, cluster).await.unwrap();
        store
            .update_revision(
                &rev.id,
                rev.version,
                RevisionPhase::Preparing,
                None,
                &rev.progress,
            )
            .await
            .unwrap();
    }
    store
        .append_event(&failure(Some(&ns_a.id), None, "a"))
        .await
        .unwrap();
    store
        .append_event(&failure(Some(&ns_b.id), None, "b"))
        .await
        .unwrap();
    store.append_event(&cluster_event("exec-a")).await.unwrap();
    store.append_event(&cluster_event("exec-b")).await.unwrap();
    store.append_event(&cluster_event("exec-c")).await.unwrap();

    let summary = |events: &[Sse]| -> Vec<String> {
        events
            .iter()
            .map(|e| {
                format!(
                    "{} {} {}",
                    e.event,
                    e.data["namespace"].as_str().unwrap_or("-"),
                    e.data["cluster"].as_str().unwrap_or("-")
                )
            })
            .collect()
    };
    let mut seen_a = SseStream::open(&hub.rest, &a, "?cursor=0&follow=false")
        .await
        .unwrap();
    assert_eq!(
        summary(&seen_a.rest().await),
        [
            "revision.phase team-a exec-a",
            "work.failed team-a -",
            "cluster.offline - exec-a"
        ]
    );
    let mut seen_b = SseStream::open(&hub.rest, &b, "?cursor=0&follow=false")
        .await
        .unwrap();
    assert_eq!(
        summary(&seen_b.rest().await),
        [
            "revision.phase team-b exec-b",
            "work.failed team-b -",
            "cluster.offline - exec-b"
        ]
    );
    let mut seen_root = SseStream::open(&hub.rest, &root, "?cursor=0&follow=false")
        .await
        .unwrap();
    assert_eq!(seen_root.rest().await.len(), 7);
    // gRPC, following: B's stream never carries A's namespace or cluster.
    let mut g = hub
        .grpc()
        .await
        .watch(authed(
            &b,
            pb::WatchRequest {
                cursor: Some(0),
                follow: Some(true),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    store
        .append_event(&failure(Some(&ns_a.id), Some("exec-a"), "a2"))
        .await
        .unwrap();
    store
        .append_event(&failure(Some(&ns_b.id), None, "b2"))
        .await
        .unwrap();
    let mut got = Vec::new();
    while got.len() < 4 {
        let m = tokio::time::timeout(WAIT, g.message())
            .await
            .expect("in time")
            .unwrap()
            .expect("not ended");
        assert_ne!(m.namespace, "team-a", "{m:?}");
        assert_ne!(m.cluster, "exec-a", "{m:?}");
        got.push(m.kind);
    }
    assert_eq!(
        got,
        [
            "revision.phase",
            "work.failed",
            "cluster.offline",
            "work.failed"
        ]
    );
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_never_receives_another_tenants_events_sqlite() {
    tenants_see_only_their_own(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_never_receives_another_tenants_events_postgres() {
    tenants_see_only_their_own(Backend::Postgres).await;
}
