//! The tunnel's mechanics end to end over real TLS on loopback: a real hub
//! (ingress, broker, link), a real spoke `Link` with its `Tunnels`, and
//! local TCP servers standing in for Harness endpoints behind a dialer
//! that maps targets to them (`clawfed_tests::tunnel::MapDialer`). The
//! spoke's own resolution through EndpointSlices and real Pods is proven in
//! `pipeline_e2e.rs`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clawfed_hub::model::RevisionPhase;
use clawfed_hub::worker::Handlers;
use clawfed_proto::tunnel::reason;
use clawfed_spoke::tunnel::{TunnelSettings, Tunnels};
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::link::{
    TestSpoke, bootstrap_token, cluster, eventually, start_spoke_with_tunnels,
};
use clawfed_tests::tunnel::{Conn, Ingress, MapDialer, connect, echo_server};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const WAIT: Duration = Duration::from_secs(15);

/// Accepts connections and never reads from them (a stuck Harness).
async fn stuck_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    addr
}

struct Env {
    hub: TestHub,
    spoke: Option<TestSpoke>,
    ingress: Ingress,
    _dir: tempfile::TempDir,
}

type Rev = clawfed_tests::tunnel::TunnelTarget;

/// A deployed revision of `agent` in tenant `team`, placed on exec-a and
/// moved to `waiting-ready` (the pipeline is off: the test plays it).
async fn revision(hub: &TestHub, agent: &str) -> Rev {
    let store = hub.store();
    if store.get_namespace("team").await.is_err() {
        hub.post_ok("/namespaces", json!({ "name": "team" })).await;
    }
    hub.post_ok(
        "/namespaces/team/agents",
        json!({ "name": agent, "spec": { "harnessKind": "embedded-openclaw", "image": "x:1" } }),
    )
    .await;
    let deployed = hub
        .post_ok(
            &format!("/namespaces/team/agents/{agent}/deploy"),
            json!({}),
        )
        .await;
    let id = deployed["id"].as_str().expect("revision id").to_owned();
    clawfed_tests::tunnel::ready_to_tunnel(store, &hub.secrets, &id, "exec-a").await
}

async fn set_phase(hub: &TestHub, r: &Rev, phase: RevisionPhase) {
    let store = hub.store();
    let rev = store.get_revision_by_id(&r.rev.id).await.unwrap();
    store
        .update_revision(&rev.id, rev.version, phase, None, &rev.progress)
        .await
        .unwrap();
}

async fn start(backend: Backend, adjust: impl FnOnce(&mut clawfed_hub::config::Config)) -> Env {
    let hub = TestHub::start_with(backend, adjust, Handlers::builtin()).await;
    let ingress = Ingress::of(&hub);
    Env {
        hub,
        spoke: None,
        ingress,
        _dir: tempfile::tempdir().unwrap(),
    }
}

impl Env {
    /// Enrolls and connects the exec-a spoke, serving `harnesses`.
    async fn spoke(&mut self, harnesses: HashMap<String, SocketAddr>) {
        let token = match cluster(&self.hub, "exec-a").await {
            Some(_) => None,
            None => Some(bootstrap_token(&self.hub, "exec-a", false).await),
        };
        let tunnels = Arc::new(Tunnels::new(
            Arc::new(MapDialer(harnesses)),
            TunnelSettings::default(),
        ));
        self.spoke = Some(start_spoke_with_tunnels(
            &self.hub,
            "exec-a",
            token,
            self._dir.path(),
            Some(tunnels),
        ));
        eventually(WAIT, "exec-a online", || async {
            cluster(&self.hub, "exec-a")
                .await
                .filter(|c| c.connection_state == clawfed_hub::model::ConnectionState::Online)
                .map(|_| ())
        })
        .await;
    }
}

/// Writes `data`, half-closes, reads everything back.
async fn round_trip(s: Conn, data: &[u8]) -> Vec<u8> {
    let (mut r, mut w) = tokio::io::split(s);
    let write = async {
        w.write_all(data).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let read = async {
        let mut back = Vec::with_capacity(data.len());
        r.read_to_end(&mut back).await.unwrap();
        back
    };
    let ((), back) = tokio::join!(write, read);
    back
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

async fn bytes_round_trip_with_half_close(backend: Backend) {
    let mut e = start(backend, |_| {}).await;
    let r = revision(&e.hub, "bot").await;
    e.spoke(HashMap::from([(r.target.clone(), echo_server().await)]))
        .await;
    let data = pattern(8 * 1024 * 1024 + 17);
    let s = connect(&e.ingress, &r.authority, Some(&r.token))
        .await
        .unwrap();
    let back = round_trip(s, &data).await;
    assert!(
        back == data,
        "8 MiB came back altered ({} bytes)",
        back.len()
    );
    // Many small connections one after another, each a fresh tunnel.
    for i in 0..20 {
        let s = connect(&e.ingress, &r.authority, Some(&r.token))
            .await
            .unwrap();
        let msg = format!("hello {i}");
        assert_eq!(round_trip(s, msg.as_bytes()).await, msg.as_bytes());
    }
    let metrics = e.hub.scrape_metrics().await;
    // The series exists from the start at 0: the bytes must have counted.
    let to_harness = metrics.lines().find_map(|l| {
        l.strip_prefix("occ_tunnel_bytes_total{direction=\"to-harness\"} ")?
            .split_whitespace()
            .next()?
            .parse::<f64>()
            .ok()
    });
    assert!(
        to_harness.is_some_and(|b| b > 0.0),
        "no bytes counted to the Harness:\n{metrics}"
    );
}

#[tokio::test]
async fn sqlite_bytes_round_trip_with_half_close() {
    bytes_round_trip_with_half_close(Backend::Sqlite).await;
}

#[tokio::test]
async fn postgres_bytes_round_trip_with_half_close() {
    bytes_round_trip_with_half_close(Backend::Postgres).await;
}

/// Each refusal has its reason, status and a message naming what was
/// wrong; none reaches a Harness.
#[tokio::test]
async fn refusals_say_why() {
    let mut e = start(Backend::Sqlite, |_| {}).await;
    let a = revision(&e.hub, "bot").await;
    let b = revision(&e.hub, "other").await;
    let unmanaged = revision(&e.hub, "ghost").await;
    e.spoke(HashMap::from([
        (a.target.clone(), echo_server().await),
        (b.target.clone(), echo_server().await),
    ]))
    .await;

    let refused = |r: Result<Conn, clawfed_tests::tunnel::Refused>| r.expect_err("refused");
    let r = refused(connect(&e.ingress, &a.authority, None).await);
    assert_eq!(
        (r.status, r.reason.as_str()),
        (407, reason::UNAUTHENTICATED),
        "{r:?}"
    );
    let r = refused(connect(&e.ingress, &a.authority, Some(&"0".repeat(64))).await);
    assert_eq!(
        (r.status, r.reason.as_str()),
        (407, reason::UNAUTHENTICATED),
        "{r:?}"
    );
    // A's credential for B's Harness, the apiserver, any other address.
    for other in [
        b.authority.as_str(),
        "kubernetes.default.svc:443",
        "127.0.0.1:22",
        "198.18.0.1:8080",
    ] {
        let r = refused(connect(&e.ingress, other, Some(&a.token)).await);
        assert_eq!(
            (r.status, r.reason.as_str()),
            (403, reason::FORBIDDEN_TARGET),
            "{other}: {r:?}"
        );
        assert!(
            r.body.contains(&a.authority),
            "names what it may reach: {}",
            r.body
        );
    }
    // The spoke does not manage it: its refusal travels back.
    let r = refused(connect(&e.ingress, &unmanaged.authority, Some(&unmanaged.token)).await);
    assert_eq!(
        (r.status, r.reason.as_str()),
        (502, reason::NOT_MANAGED),
        "{r:?}"
    );
    assert!(r.body.contains("no Harness"), "{r:?}");
    // A retired revision (noticed within the route cache's second).
    set_phase(&e.hub, &b, RevisionPhase::Retired).await;
    let r = eventually(WAIT, "retired revision refused", || async {
        connect(&e.ingress, &b.authority, Some(&b.token))
            .await
            .err()
    })
    .await;
    assert_eq!(
        (r.status, r.reason.as_str()),
        (403, reason::REVISION_NOT_SERVING),
        "{r:?}"
    );
    // Plain HTTP to the ingress gets no HTTP answer: it speaks TLS only,
    // so no credential is ever read in the clear.
    let mut s = TcpStream::connect(e.ingress.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(WAIT, s.read_to_end(&mut answer)).await;
    assert!(
        !answer.starts_with(b"HTTP/"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    // Over TLS, a request without an authority is refused.
    let r = refused(connect(&e.ingress, "", Some(&a.token)).await);
    assert_eq!(r.status, 400, "{r:?}");
    // The cluster goes away.
    e.spoke.take().unwrap().stop().await.unwrap();
    let r = eventually(WAIT, "offline cluster refused", || async {
        connect(&e.ingress, &a.authority, Some(&a.token))
            .await
            .err()
            .filter(|r| r.reason == reason::CLUSTER_OFFLINE)
    })
    .await;
    assert_eq!(r.status, 503, "{r:?}");
}

/// Per-revision limits refuse with 429 and free up when a connection ends.
#[tokio::test]
async fn the_revision_limit_refuses_clearly() {
    let mut e = start(Backend::Sqlite, |c| c.tunnel.max_per_revision = 2).await;
    let a = revision(&e.hub, "bot").await;
    e.spoke(HashMap::from([(a.target.clone(), echo_server().await)]))
        .await;
    let s1 = connect(&e.ingress, &a.authority, Some(&a.token))
        .await
        .unwrap();
    let _s2 = connect(&e.ingress, &a.authority, Some(&a.token))
        .await
        .unwrap();
    let r = connect(&e.ingress, &a.authority, Some(&a.token))
        .await
        .expect_err("third refused");
    assert_eq!((r.status, r.reason.as_str()), (429, reason::LIMIT), "{r:?}");
    assert_eq!(round_trip(s1, b"bye").await, b"bye");
    let s3 = eventually(WAIT, "a slot freed", || async {
        connect(&e.ingress, &a.authority, Some(&a.token)).await.ok()
    })
    .await;
    assert_eq!(round_trip(s3, b"again").await, b"again");
}

/// Revokes exec-a through REST; `s` must end within 5 s.
async fn revoke_and_see_the_tunnel_end(e: &Env, s: &mut Conn) {
    let revoked = e.hub.post_root("/clusters/exec-a/revoke").await;
    assert_eq!(revoked.status(), 200);
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    assert!(ended.is_ok(), "the open tunnel ended after the revocation");
}

/// A revoked cluster's open tunnels end, and no new one opens.
#[tokio::test]
async fn revocation_ends_open_tunnels() {
    let (e, a, mut s) = echo_tunnel().await;
    revoke_and_see_the_tunnel_end(&e, &mut s).await;
    let r = connect(&e.ingress, &a.authority, Some(&a.token))
        .await
        .expect_err("refused");
    assert_eq!(r.reason, reason::CLUSTER_OFFLINE, "{r:?}");
}

/// Tunnels whose Harness stopped reading, more of them than a 16 MiB
/// connection window holds stalled streams (16 MiB / 256 KiB = 64), must
/// not stop the other tunnels on the same spoke, nor new ones opening.
/// Each stalled tunnel keeps its stream window of the connection's window
/// unreleased; found by `tunnel-bench --phases 5 --slow-receivers 72`
/// (e2e/README.md), failing with spoke-timeout before tunnels got their own
/// connection with a window sized to the tunnel limit.
#[tokio::test]
async fn many_stuck_harnesses_block_no_other_connection() {
    stuck_harnesses_block_no_other_connection(80, 1024 * 1024).await;
}

/// One connection whose Harness never reads does not slow another: each
/// tunnel is its own HTTP/2 stream with its own window.
#[tokio::test]
async fn a_stuck_harness_blocks_no_other_connection() {
    stuck_harnesses_block_no_other_connection(1, 16 * 1024 * 1024).await;
}

/// `stuck` tunnels to a Harness that never reads, each written until its
/// writes block (not fail); then a new tunnel to another Harness opens and
/// round-trips `bytes` in time.
async fn stuck_harnesses_block_no_other_connection(stuck_count: usize, bytes: usize) {
    let mut e = start(Backend::Sqlite, |_| {}).await;
    let stuck = revision(&e.hub, "stuck").await;
    let fine = revision(&e.hub, "fine").await;
    e.spoke(HashMap::from([
        (stuck.target.clone(), stuck_server().await),
        (fine.target.clone(), echo_server().await),
    ]))
    .await;
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut fillers = Vec::new();
    for _ in 0..stuck_count {
        let mut s = connect(&e.ingress, &stuck.authority, Some(&stuck.token))
            .await
            .unwrap();
        let written = written.clone();
        fillers.push(tokio::spawn(async move {
            let chunk = vec![7u8; 16 * 1024];
            while s.write_all(&chunk).await.is_ok() {
                written.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    // Blocked: no progress across 10 polls of 50 ms.
    let mut last = u64::MAX;
    let mut stable = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while stable < 10 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stuck tunnels never filled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = written.load(std::sync::atomic::Ordering::Relaxed);
        stable = if now == last { stable + 1 } else { 0 };
        last = now;
    }
    assert!(
        fillers.iter().all(|f| !f.is_finished()),
        "the stuck tunnels are blocked, not failed"
    );
    let s = connect(&e.ingress, &fine.authority, Some(&fine.token))
        .await
        .expect("a new tunnel opens beside the stalled ones");
    let data = pattern(bytes);
    let back = tokio::time::timeout(Duration::from_secs(20), round_trip(s, &data))
        .await
        .expect("the other tunnel is not blocked");
    assert!(back == data);
    for f in fillers {
        f.abort();
    }
}

/// Writes `data` on an open tunnel and reads it echoed back.
async fn echo_once(s: &mut Conn, data: &[u8]) -> Vec<u8> {
    s.write_all(data).await.unwrap();
    let mut buf = vec![0u8; data.len()];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut buf))
        .await
        .expect("echo within 5 s")
        .expect("the tunnel is open");
    buf
}

impl Env {
    fn link(&self) -> &clawfed_hub::link::server::LinkHandle {
        self.hub
            .hub
            .as_ref()
            .and_then(|h| h.link.as_ref())
            .expect("the link is on")
    }

    async fn cluster_id(&self) -> String {
        cluster(&self.hub, "exec-a").await.expect("exec-a").id
    }
}

/// A hub and the exec-a spoke with one tunnel open to an echoing Harness.
async fn echo_tunnel() -> (Env, Rev, Conn) {
    let mut e = start(Backend::Sqlite, |_| {}).await;
    let a = revision(&e.hub, "bot").await;
    e.spoke(HashMap::from([(a.target.clone(), echo_server().await)]))
        .await;
    let mut s = connect(&e.ingress, &a.authority, Some(&a.token))
        .await
        .unwrap();
    assert_eq!(echo_once(&mut s, b"ping").await, b"ping");
    (e, a, s)
}

/// Issue 31 item 8: a tunnel opened before its session was replaced (a
/// certificate rotation or a reconnect registers a newer session) still
/// ends when the cluster is revoked. It used to watch only the session
/// that opened it, which had already ended as `Replaced`.
#[tokio::test]
async fn a_tunnel_opened_before_its_session_was_replaced_ends_on_revocation() {
    let (e, _, mut s) = echo_tunnel().await;
    let (id, registry) = (e.cluster_id().await, e.link().state.registry.clone());
    // A newer session of the cluster takes over, as after a rotation.
    let old = registry.get(&id).expect("a live session");
    let newer = registry.register(&id, "exec-a", 0, None);
    assert_eq!(
        old.close_reason(),
        Some(clawfed_hub::link::registry::CloseReason::Replaced)
    );
    assert_eq!(
        echo_once(&mut s, b"still").await,
        b"still",
        "a replaced session leaves the tunnel open"
    );
    revoke_and_see_the_tunnel_end(&e, &mut s).await;
    assert!(newer.close.is_cancelled(), "the current session closed too");
}

/// Issue 31 item 8: a balancing move (the session is told to go to another
/// replica) does not cut the cluster's live tunnels: each is a stream of
/// its own and lives on until it ends.
#[tokio::test]
async fn a_balancing_move_leaves_live_tunnels_open() {
    let (e, _, mut s) = echo_tunnel().await;
    let (id, registry) = (e.cluster_id().await, e.link().state.registry.clone());
    let before = registry.get(&id).expect("a live session").id;
    // Moved to "another replica": this hub's own link address.
    let target = format!("https://{}", e.link().addr);
    let moved = registry.redirect(std::slice::from_ref(&target));
    assert_eq!(moved, vec![("exec-a".to_owned(), target)]);
    eventually(WAIT, "the spoke's session moved", || async {
        registry
            .get(&id)
            .filter(|s| s.id != before && !s.close.is_cancelled())
            .map(|_| ())
    })
    .await;
    assert_eq!(
        echo_once(&mut s, b"after the move").await,
        b"after the move",
        "the move cut a live tunnel"
    );
    assert_eq!(round_trip(s, b"bye").await, b"bye");
}
