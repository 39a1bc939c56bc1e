//! The spoke link end to end over real TLS 1.3 mTLS on loopback: a real
//! hub, a real spoke (`clawfed_spoke::link::Link` with the durable file
//! ledger), enrollment, delivery with acks, supersession, resume after
//! restarts, offline detection, revocation and rotation.

use std::time::Duration;

use chrono::Utc;
use clawfed_hub::model::ConnectionState;
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::link::{bootstrap_token, cluster, eventually, outbox_depth, start_spoke};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(15);

async fn cluster_id(hub: &TestHub, name: &str) -> String {
    eventually(WAIT, "cluster enrolled", || async {
        cluster(hub, name).await.map(|c| c.id)
    })
    .await
}

async fn wait_state(hub: &TestHub, name: &str, state: ConnectionState) {
    eventually(WAIT, &format!("cluster {name} {state:?}"), || async {
        cluster(hub, name)
            .await
            .filter(|c| c.connection_state == state)
            .map(|_| ())
    })
    .await;
}

/// Issue 9, defect 1: a report lost on the way (here: gone from the hub's
/// store, as when it sat in a stream's send buffer that broke) comes back
/// after the spoke reconnects, although the work it answers is acked and
/// never delivered again: the spoke re-sends the current result of every
/// target it holds.
async fn a_lost_report_is_sent_again_after_reconnect(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let link = hub.hub.as_ref().unwrap().link.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let spoke = start_spoke(&hub, "exec-a", Some(token), dir.path());
    let id = cluster_id(&hub, "exec-a").await;
    wait_state(&hub, "exec-a", ConnectionState::Online).await;
    link.send(&id, "ns/team-a", "namespace.ensure", 1, &json!({"n": 1}))
        .await
        .unwrap()
        .expect("queued");
    let store = hub.store();
    eventually(WAIT, "work result report", || async {
        store
            .get_report(&id, "ns/team-a", "work-result")
            .await
            .unwrap()
    })
    .await;
    spoke.stop().await.unwrap();
    wait_state(&hub, "exec-a", ConnectionState::Offline).await;
    assert_eq!(
        outbox_depth(store.as_ref(), &id).await,
        0,
        "the work is acked"
    );
    sqlx::query("DELETE FROM spoke_reports WHERE cluster_id = $1")
        .bind(id.clone())
        .execute(hub.db.store.pool())
        .await
        .unwrap();

    let spoke = start_spoke(&hub, "exec-a", None, dir.path());
    let report = eventually(WAIT, "the result re-sent after reconnect", || async {
        store
            .get_report(&id, "ns/team-a", "work-result")
            .await
            .unwrap()
    })
    .await;
    assert_eq!(
        (report.generation, report.body["applied"].clone()),
        (1, json!(true))
    );
    assert_eq!(
        spoke.ledger.writes("ns/team-a").await,
        1,
        "nothing was applied again"
    );
    spoke.stop().await.unwrap();
}

async fn delivery_resumes_and_supersedes(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let link = hub.hub.as_ref().unwrap().link.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let spoke = start_spoke(&hub, "exec-a", Some(token), dir.path());
    let id = cluster_id(&hub, "exec-a").await;
    wait_state(&hub, "exec-a", ConnectionState::Online).await;

    // Delivered, applied once, acked, reported.
    link.send(&id, "ns/team-a", "namespace.ensure", 1, &json!({"n": 1}))
        .await
        .unwrap()
        .expect("queued");
    let store = hub.store();
    eventually(WAIT, "ack of generation 1", || async {
        (outbox_depth(store.as_ref(), &id).await == 0).then_some(())
    })
    .await;
    assert_eq!(spoke.ledger.writes("ns/team-a").await, 1);
    let reports = eventually(WAIT, "work result report", || async {
        let r = store.list_reports(&id).await.unwrap();
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!(reports[0].kind, "work-result");
    assert_eq!(reports[0].body["applied"], json!(true));

    // The same generation again is not queued twice.
    assert_eq!(
        link.send(&id, "ns/team-a", "namespace.ensure", 1, &json!({"n": 1}))
            .await
            .unwrap(),
        None
    );

    // While the spoke is away, three generations pile up; on reconnect only
    // the newest is delivered, and the spoke applies it once.
    spoke.stop().await.unwrap();
    wait_state(&hub, "exec-a", ConnectionState::Offline).await;
    for generation in 2..=4 {
        link.send(
            &id,
            "ns/team-a",
            "namespace.ensure",
            generation,
            &json!({"n": generation}),
        )
        .await
        .unwrap()
        .expect("queued");
    }
    assert_eq!(
        outbox_depth(store.as_ref(), &id).await,
        1,
        "older generations superseded"
    );
    let spoke = start_spoke(&hub, "exec-a", None, dir.path());
    eventually(WAIT, "ack of generation 4", || async {
        (outbox_depth(store.as_ref(), &id).await == 0).then_some(())
    })
    .await;
    assert_eq!(
        spoke.ledger.writes("ns/team-a").await,
        2,
        "gen 1 and gen 4 only"
    );
    let applied = clawfed_spoke::link::WorkApplier::applied(spoke.ledger.as_ref())
        .await
        .unwrap();
    assert_eq!(applied.get("ns/team-a"), Some(&4));

    // A spoke killed before acking: the item is re-sent after it comes
    // back, and the durable ledger turns the replay into a no-op.
    spoke.abort();
    link.send(&id, "ns/team-b", "namespace.ensure", 1, &json!({"n": "b"}))
        .await
        .unwrap();
    let spoke = start_spoke(&hub, "exec-a", None, dir.path());
    eventually(WAIT, "ack after restart", || async {
        (outbox_depth(store.as_ref(), &id).await == 0).then_some(())
    })
    .await;
    assert_eq!(spoke.ledger.writes("ns/team-b").await, 1);
    spoke.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_delivery_resumes_and_supersedes() {
    delivery_resumes_and_supersedes(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_delivery_resumes_and_supersedes() {
    delivery_resumes_and_supersedes(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_lost_report_is_sent_again_after_reconnect() {
    a_lost_report_is_sent_again_after_reconnect(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_lost_report_is_sent_again_after_reconnect() {
    a_lost_report_is_sent_again_after_reconnect(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silence_marks_offline_within_two_heartbeats() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let spoke = start_spoke(&hub, "exec-a", Some(token), dir.path());
    cluster_id(&hub, "exec-a").await;
    wait_state(&hub, "exec-a", ConnectionState::Online).await;
    // Abort the task: no close frame is sent, but the socket closes with
    // the process state; either way the hub must notice within 2 intervals
    // (heartbeat is 1 s in tests) and show the cluster offline.
    let started = std::time::Instant::now();
    spoke.abort();
    wait_state(&hub, "exec-a", ConnectionState::Offline).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "offline after {:?}",
        started.elapsed()
    );
}

/// The link's status (by which link-bench times each spoke's reconnect):
/// the Welcome shows as connected, the hub's GoAway when it shuts down and
/// the failed attempts while it is gone are counted, the Welcome is not
/// counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_link_status_follows_welcome_go_away_and_failures() {
    let mut hub = TestHub::start(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let spoke = start_spoke(&hub, "exec-a", Some(token), dir.path());
    let mut status = spoke.status.clone();
    let welcomed = tokio::time::timeout(WAIT, status.wait_for(|s| s.connected))
        .await
        .expect("no Welcome in time")
        .expect("link status")
        .clone();
    assert_eq!(
        (welcomed.welcomes, welcomed.go_aways, welcomed.failures),
        (1, 0, 0)
    );
    assert!(welcomed.last_welcome.is_some());

    hub.stop().await;
    let gone = tokio::time::timeout(
        WAIT,
        status.wait_for(|s| s.go_aways >= 1 && s.failures >= 1),
    )
    .await
    .expect("GoAway and a failed attempt not seen in time")
    .expect("link status")
    .clone();
    assert!(!gone.connected, "{gone:?}");
    assert_eq!(gone.welcomes, 1);
    assert_eq!(gone.last_welcome, welcomed.last_welcome);
    assert!(
        gone.last_failure
            .as_deref()
            .is_some_and(|r| r.contains("cannot reach the hub")),
        "{gone:?}"
    );
    spoke.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_closes_the_stream_within_a_second_and_refuses_reconnects() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let spoke = start_spoke(&hub, "exec-a", Some(token), dir.path());
    cluster_id(&hub, "exec-a").await;
    wait_state(&hub, "exec-a", ConnectionState::Online).await;
    let started = std::time::Instant::now();
    let revoked = hub.post_root("/clusters/exec-a/revoke").await;
    assert_eq!(revoked.status(), 200);
    let ended = spoke.ended(Duration::from_secs(5)).await;
    assert!(
        matches!(ended, Err(clawfed_spoke::link::LinkError::Revoked(_))),
        "{ended:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "stream closed after {:?}",
        started.elapsed()
    );
    // The same identity cannot come back.
    let again = start_spoke(&hub, "exec-a", None, dir.path());
    let refused = again.ended(Duration::from_secs(5)).await;
    assert!(
        matches!(refused, Err(clawfed_spoke::link::LinkError::Revoked(_))),
        "{refused:?}"
    );
    assert_eq!(
        cluster(&hub, "exec-a").await.unwrap().connection_state,
        ConnectionState::Revoked
    );
    // Re-enrollment is an admin decision: a plain token is refused…
    let plain = hub
        .post_root_json("/clusters/exec-a/bootstrap-tokens", &json!({}))
        .await;
    assert_eq!(plain.status(), 409);
    // …a re-enrollment token with a fresh identity works.
    let token = bootstrap_token(&hub, "exec-a", true).await;
    let fresh = tempfile::tempdir().unwrap();
    let spoke = start_spoke(&hub, "exec-a", Some(token), fresh.path());
    wait_state(&hub, "exec-a", ConnectionState::Online).await;
    spoke.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_without_dropping_work() {
    // 12 s certificates: the spoke renews at 8 s.
    let hub = TestHub::start_with(
        Backend::Sqlite,
        |c| c.link.cert_ttl_seconds = 12,
        clawfed_hub::worker::Handlers::builtin(),
    )
    .await;
    let link = hub.hub.as_ref().unwrap().link.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let spoke = start_spoke(&hub, "exec-a", Some(token), dir.path());
    let id = cluster_id(&hub, "exec-a").await;
    wait_state(&hub, "exec-a", ConnectionState::Online).await;
    let first = cluster(&hub, "exec-a").await.unwrap().certificate_serials;
    assert_eq!(first.len(), 1);
    let store = hub.store();
    // Keep work flowing across the rotation and past the first
    // certificate's expiry.
    let deadline = Utc::now() + chrono::Duration::seconds(16);
    let mut generation = 0;
    while Utc::now() < deadline {
        generation += 1;
        link.send(
            &id,
            "ns/rotating",
            "namespace.ensure",
            generation,
            &json!({"g": generation}),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eventually(WAIT, "all work acked", || async {
        (outbox_depth(store.as_ref(), &id).await == 0).then_some(())
    })
    .await;
    let serials = cluster(&hub, "exec-a").await.unwrap().certificate_serials;
    assert!(serials.len() >= 2, "renewed: {serials:?}");
    let applied = clawfed_spoke::link::WorkApplier::applied(spoke.ledger.as_ref())
        .await
        .unwrap();
    assert_eq!(applied.get("ns/rotating"), Some(&generation));
    // Still online on the renewed certificate after the first expired.
    assert_eq!(
        cluster(&hub, "exec-a").await.unwrap().connection_state,
        ConnectionState::Online
    );
    assert!(spoke.metrics.certificate_expiry_seconds.get() > 0.0);
    spoke.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enrollment_can_wait_for_manual_approval() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let created = hub
        .post_root_json(
            "/clusters/exec-a/bootstrap-tokens",
            &json!({ "requireApproval": true }),
        )
        .await;
    assert_eq!(created.status(), 201);
    let token = created
        .json::<clawfed_hub::model::BootstrapTokenCreated>()
        .await
        .unwrap()
        .token;
    // Nothing is pending before the spoke asks.
    let approve = |hub: &TestHub| {
        hub.http
            .post(hub.url("/clusters/exec-a/approve"))
            .bearer_auth(&hub.root_token)
            .send()
    };
    assert_eq!(approve(&hub).await.unwrap().status(), 404);
    let dir = tempfile::tempdir().unwrap();
    let spoke = start_spoke(&hub, "exec-a", Some(token), dir.path());
    // The spoke asks, is told to wait, and asks again (retrying); it gets
    // no certificate and there is no cluster yet.
    let link = hub.hub.as_ref().and_then(|h| h.link.clone()).expect("link");
    let told_to_wait = || {
        link.state
            .metrics
            .enrollments
            .get_or_create(&clawfed_hub::link::metrics::ResultLabel {
                result: "refused".into(),
            })
            .get()
    };
    eventually(
        WAIT,
        "the spoke asked twice and was told to wait",
        || async { (told_to_wait() >= 2).then_some(()) },
    )
    .await;
    assert!(cluster(&hub, "exec-a").await.is_none());
    assert!(!dir.path().join("identity.json").exists());
    assert_eq!(approve(&hub).await.unwrap().status(), 204);
    wait_state(&hub, "exec-a", ConnectionState::Online).await;
    assert!(dir.path().join("identity.json").exists());
    let audit: serde_json::Value = hub.get_root_json("/audit").await;
    let actions: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(actions.contains(&"cluster.approve"), "{actions:?}");
    assert!(actions.contains(&"cluster.enroll"), "{actions:?}");
    spoke.stop().await.unwrap();
}

/// A spoke link to `hub` as cluster exec-a, keeping its identity in `dir`.
fn test_link(
    hub: &TestHub,
    dir: &std::path::Path,
    token: String,
    applier: std::sync::Arc<dyn clawfed_spoke::link::WorkApplier>,
    capabilities: Vec<String>,
) -> clawfed_spoke::link::Link {
    use clawfed_spoke::link::identity::FileIdentityStore;
    use clawfed_spoke::link::tls::HubAddress;
    use clawfed_spoke::link::{Link, LinkConfig, SpokeMetrics};
    Link::new(
        LinkConfig {
            hub: HubAddress::parse(&clawfed_tests::link::hub_url(hub)).unwrap(),
            ca_pem: clawfed_tests::link::hub_ca(hub),
            cluster_name: "exec-a".into(),
            bootstrap_token: Some(token),
            version: "test".into(),
            capabilities,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
        },
        std::sync::Arc::new(FileIdentityStore::new(dir)),
        applier,
        SpokeMetrics::default(),
    )
}

/// An applier that is slow for one target, over the durable ledger.
struct SlowFor {
    target: String,
    ledger: clawfed_spoke::link::ledger::FileLedger,
}

#[async_trait::async_trait]
impl clawfed_spoke::link::WorkApplier for SlowFor {
    async fn apply(
        &self,
        work: &clawfed_proto::link::v1::Work,
    ) -> Result<clawfed_proto::link::v1::WorkResult, clawfed_spoke::link::ApplyError> {
        if work.target == self.target {
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        self.ledger.apply(work).await
    }

    async fn applied(
        &self,
    ) -> Result<std::collections::HashMap<String, i64>, clawfed_spoke::link::ApplyError> {
        self.ledger.applied().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_target_does_not_hold_up_the_others_and_each_target_stays_in_order() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let link = hub.hub.as_ref().unwrap().link.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let applier = std::sync::Arc::new(SlowFor {
        target: "ns/slow".into(),
        ledger: clawfed_spoke::link::ledger::FileLedger::open(dir.path()).unwrap(),
    });
    let spoke = test_link(&hub, dir.path(), token, applier.clone(), vec![]);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (_tx, rx) = tokio::sync::mpsc::channel(4);
    let task = tokio::spawn(spoke.run(rx, shutdown.clone()));
    let id = cluster_id(&hub, "exec-a").await;
    wait_state(&hub, "exec-a", ConnectionState::Online).await;
    let store = hub.store();
    // The slow target first, two generations of it, then fast ones.
    for g in 1..=2 {
        link.send(&id, "ns/slow", "namespace.ensure", g, &json!({"g": g}))
            .await
            .unwrap();
    }
    let started = std::time::Instant::now();
    for i in 0..5 {
        link.send(
            &id,
            &format!("ns/fast-{i}"),
            "namespace.ensure",
            1,
            &json!({}),
        )
        .await
        .unwrap();
    }
    eventually(WAIT, "fast targets acked", || async {
        let pending = store.outbox_pending(&id, 0, 100).await.unwrap();
        pending.iter().all(|p| p.target == "ns/slow").then_some(())
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "fast work waited for the slow target: {:?}",
        started.elapsed()
    );
    eventually(WAIT, "slow target acked", || async {
        (outbox_depth(store.as_ref(), &id).await == 0).then_some(())
    })
    .await;
    let applied = clawfed_spoke::link::WorkApplier::applied(applier.as_ref())
        .await
        .unwrap();
    assert_eq!(
        applied.get("ns/slow"),
        Some(&2),
        "the newest generation wins"
    );
    shutdown.cancel();
    let _ = task.await;
}

/// CPU seconds (user + system) the thread named `name` of this process has
/// used, from /proc (Linux; clock ticks of 100 Hz).
fn thread_cpu_secs(name: &str) -> Option<f64> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        let rest = stat.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
        return Some((tick(11)? + tick(12)?) / 100.0);
    }
    None
}

/// A spoke whose applier sends no reports (the file ledger: the spoke
/// binary drops the report sender) keeps an idle session idle: a closed
/// report channel is not polled again and again. The Link runs alone on a
/// thread of its own, so that thread's CPU time is the session's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_without_a_report_sender_does_not_spin() {
    use clawfed_spoke::link::ledger::FileLedger;

    const THREAD: &str = "idle-spoke";
    let hub = TestHub::start(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let link = test_link(
        &hub,
        dir.path(),
        token,
        std::sync::Arc::new(FileLedger::open(dir.path()).unwrap()),
        vec!["applier:ledger".into()],
    );
    let mut status = link.status();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    let spoke = std::thread::Builder::new()
        .name(THREAD.into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let (reports_tx, reports_rx) = tokio::sync::mpsc::channel(1);
            drop(reports_tx);
            rt.block_on(link.run(reports_rx, stop))
        })
        .unwrap();
    tokio::time::timeout(WAIT, status.wait_for(|s| s.connected))
        .await
        .expect("no Welcome in time")
        .unwrap();
    let before = thread_cpu_secs(THREAD).expect("the spoke's thread");
    let window = Duration::from_secs(3);
    tokio::time::sleep(window).await;
    let used = thread_cpu_secs(THREAD).expect("the spoke's thread") - before;
    assert!(status.borrow().connected, "the session stayed open");
    shutdown.cancel();
    spoke.join().unwrap().unwrap();
    // Idle, the session sends a heartbeat a second (1 s in tests); a
    // session polling a closed channel uses the whole thread.
    assert!(
        used < 0.25,
        "the idle session used {used:.2} s of CPU in {window:?}"
    );
}

/// An applier that records what runs at once: in flight per target and in
/// all, and the generations each target saw, in order.
#[derive(Default)]
struct Concurrency {
    state: std::sync::Mutex<ConcurrencyState>,
}

#[derive(Default)]
struct ConcurrencyState {
    in_flight: std::collections::HashMap<String, usize>,
    total: usize,
    max_total: usize,
    max_per_target: usize,
    seen: std::collections::HashMap<String, Vec<i64>>,
}

#[async_trait::async_trait]
impl clawfed_spoke::link::WorkApplier for Concurrency {
    async fn apply(
        &self,
        work: &clawfed_proto::link::v1::Work,
    ) -> Result<clawfed_proto::link::v1::WorkResult, clawfed_spoke::link::ApplyError> {
        {
            let mut s = self.state.lock().unwrap();
            let n = s.in_flight.entry(work.target.clone()).or_default();
            *n += 1;
            let n = *n;
            s.max_per_target = s.max_per_target.max(n);
            s.total += 1;
            s.max_total = s.max_total.max(s.total);
            s.seen
                .entry(work.target.clone())
                .or_default()
                .push(work.generation);
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
        {
            let mut s = self.state.lock().unwrap();
            *s.in_flight.entry(work.target.clone()).or_default() -= 1;
            s.total -= 1;
        }
        Ok(clawfed_proto::link::v1::WorkResult {
            applied: true,
            reason: "applied".into(),
            ..Default::default()
        })
    }

    async fn applied(
        &self,
    ) -> Result<std::collections::HashMap<String, i64>, clawfed_spoke::link::ApplyError> {
        Ok(Default::default())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_applies_keep_one_generation_at_a_time_per_target_within_the_limit() {
    use clawfed_spoke::pressure::ApplyLimit;
    let hub = TestHub::start(Backend::Sqlite).await;
    let link = hub.hub.as_ref().unwrap().link.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let applier = std::sync::Arc::new(Concurrency::default());
    let limit = std::sync::Arc::new(ApplyLimit::new(6, 1, 6));
    let spoke =
        test_link(&hub, dir.path(), token, applier.clone(), vec![]).with_apply_limit(limit.clone());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (_tx, rx) = tokio::sync::mpsc::channel(4);
    let task = tokio::spawn(spoke.run(rx, shutdown.clone()));
    let id = cluster_id(&hub, "exec-a").await;
    wait_state(&hub, "exec-a", ConnectionState::Online).await;
    let store = hub.store();
    // Generations of each target sent while earlier ones still run.
    let send_round = |round: usize| {
        let link = link.clone();
        let id = id.clone();
        async move {
            for g in 1..=4i64 {
                for t in 0..12 {
                    let g = g + 4 * round as i64;
                    link.send(
                        &id,
                        &format!("ns/t{t}"),
                        "namespace.ensure",
                        g,
                        &json!({"g": g}),
                    )
                    .await
                    .unwrap();
                }
            }
        }
    };
    send_round(0).await;
    eventually(WAIT, "round 0 acked", || async {
        (outbox_depth(store.as_ref(), &id).await == 0).then_some(())
    })
    .await;
    let check = |round: usize, bound: usize| {
        let s = applier.state.lock().unwrap();
        assert_eq!(s.max_per_target, 1, "two generations of one target at once");
        assert!(
            s.max_total <= bound,
            "{} at once, limit {bound}",
            s.max_total
        );
        assert!(s.max_total >= 2, "targets were not applied in parallel");
        for (t, gens) in &s.seen {
            assert!(
                gens.windows(2).all(|w| w[0] < w[1]),
                "{t} went back: {gens:?}"
            );
            assert_eq!(
                gens.last(),
                Some(&(4 + 4 * round as i64)),
                "{t}: newest wins"
            );
        }
    };
    check(0, 6);
    // The apiserver throttles: the limit halves and the next round keeps
    // within it.
    limit.on_throttled();
    assert_eq!(limit.current(), 3);
    {
        let mut s = applier.state.lock().unwrap();
        s.max_total = 0;
    }
    send_round(1).await;
    eventually(WAIT, "round 1 acked", || async {
        (outbox_depth(store.as_ref(), &id).await == 0).then_some(())
    })
    .await;
    check(1, 3);
    shutdown.cancel();
    let _ = task.await;
}

/// `occ_link_outbox_reads_total` of the hub.
async fn outbox_reads(hub: &TestHub) -> u64 {
    let text = hub.scrape_metrics().await;
    text.lines()
        .find_map(|l| l.strip_prefix("occ_link_outbox_reads_total "))
        .unwrap_or_else(|| panic!("no occ_link_outbox_reads_total in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

/// Issue 17 (PostgreSQL link path): a put in the replica holding the
/// session wakes it in process, and its NOTIFY wakes it again; the second
/// wake names a sequence already sent, so it reads nothing. One item at a
/// time, reads stay at one per item (plus the heartbeat's safety reads);
/// they were two per item.
async fn one_outbox_read_per_item_sent(backend: Backend) {
    const ITEMS: u64 = 20;
    let hub = TestHub::start(backend).await;
    let link = hub.hub.as_ref().unwrap().link.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let spoke = start_spoke(&hub, "exec-a", Some(token), dir.path());
    let id = cluster_id(&hub, "exec-a").await;
    wait_state(&hub, "exec-a", ConnectionState::Online).await;
    let store = hub.store();
    let before = outbox_reads(&hub).await;
    let started = std::time::Instant::now();
    for i in 0..ITEMS {
        link.send(
            &id,
            &format!("ns/t{i}"),
            "namespace.ensure",
            1,
            &json!({"i": i}),
        )
        .await
        .unwrap()
        .expect("queued");
        eventually(WAIT, "ack", || async {
            (outbox_depth(store.as_ref(), &id).await == 0).then_some(())
        })
        .await;
        // Room for the NOTIFY of this put to arrive before the next one.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reads = outbox_reads(&hub).await - before;
    // The session also reads on each heartbeat (1 s here), a safety net.
    let beats = started.elapsed().as_secs() + 1;
    assert!(
        reads <= ITEMS + beats,
        "{reads} outbox reads for {ITEMS} items and {beats} heartbeats"
    );
    assert!(reads >= ITEMS, "{reads} reads for {ITEMS} items sent");
    spoke.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_one_outbox_read_per_item_sent() {
    one_outbox_read_per_item_sent(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_one_outbox_read_per_item_sent() {
    one_outbox_read_per_item_sent(Backend::Postgres).await;
}
