//! The durable work queue end to end: real workers over a real store, on
//! SQLite and on the PostgreSQL test server (every scenario runs on both;
//! the PostgreSQL half needs `CLAWFED_TEST_DATABASE_URL`, see
//! `scripts/postgres.sh`).
//!
//! Scenarios: namespace provisioning through REST, retries with backoff,
//! giving up after `maxAttempts`, permanent failures, the authorization and
//! ownership re-check before effects, recovery of abandoned leases and lease
//! fencing, several workers over one queue, graceful shutdown, and the
//! worker's JSON log lines.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use clawfed_hub::auth::{self, Action, Role};
use clawfed_hub::model::{NamespaceState, WorkItem, WorkState};
use clawfed_hub::store::{Effects, NewAudit, NewNamespace, NewWork, Store, WorkFilter, WorkLane};
use clawfed_hub::worker::backoff::Backoff;
use clawfed_hub::worker::kinds::NAMESPACE_PROVISION;
use clawfed_hub::worker::{Handlers, WorkError, WorkHandler, Worker, WorkerConfig, WorkerTotals};
use clawfed_tests::db;
use clawfed_tests::hub::{Backend, TestHub};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::instrument::WithSubscriber;

/// Upper bound of every wait; generous for a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(30);

// Runs each scenario once per backend: `sqlite::NAME` and `postgres::NAME`.
clawfed_tests::on_both_backends!(
    namespace_provision_marks_the_namespace_active,
    retryable_failures_back_off_then_succeed,
    gives_up_after_max_attempts,
    permanent_failure_fails_at_once,
    busy_work_waits_without_using_its_attempts,
    lease_heartbeats_never_stall_a_batch_holding_the_pool,
    a_blocked_item_holds_one_slot_not_the_batch,
    recheck_refuses_revoked_tokens_wrong_scopes_and_lost_owners,
    expired_leases_are_recovered_and_fenced,
    concurrent_workers_complete_each_item_once,
    shutdown_releases_the_item_in_hand,
    logs_worker_lifecycle_as_json,
);

// ---- helpers ----------------------------------------------------------------

/// Polls `check` until it returns `Some`, failing the test after [`WAIT`].
async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    clawfed_tests::wait_for(WAIT, what, check).await
}

/// Waits until the item is done or failed and returns it.
async fn settled(store: &dyn Store, id: &str) -> WorkItem {
    eventually(&format!("work item {id} to settle"), || async {
        let item = store.get_work(id).await.expect("get work");
        matches!(item.state, WorkState::Done | WorkState::Failed).then_some(item)
    })
    .await
}

fn work(kind: &str, max_attempts: i32) -> NewWork {
    NewWork {
        kind: kind.to_owned(),
        namespace_id: None,
        target: format!("test/{}", uuid::Uuid::new_v4()),
        payload: json!({}),
        requested_by: None,
        max_attempts,
        run_at: Utc::now(),
        coalesce: false,
    }
}

fn worker_config(id: &str, lease: Duration) -> WorkerConfig {
    WorkerConfig {
        id: id.to_owned(),
        batch_size: 16,
        lease,
        poll_interval: Duration::from_millis(10),
        backoff: Backoff {
            base: Duration::from_millis(10),
            cap: Duration::from_millis(100),
        },
        health_interval: Duration::from_secs(3600),
        lane: WorkLane::All,
        periodic_recovery: true,
    }
}

/// A worker running on its own task.
struct RunningWorker {
    cancel: CancellationToken,
    task: JoinHandle<WorkerTotals>,
}

impl RunningWorker {
    fn spawn(store: Arc<dyn Store>, handlers: Handlers, config: WorkerConfig) -> Self {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(Worker::new(store, handlers, config).run(cancel.clone()));
        Self { cancel, task }
    }

    /// Cancels the worker and waits (bounded) for `run` to return.
    async fn stop(self) -> WorkerTotals {
        self.cancel.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("worker.run returns promptly after cancellation")
            .expect("worker task panicked")
    }
}

fn audit_only(action: &str) -> Effects {
    Effects::audit(NewAudit {
        actor: "system:test".into(),
        action: action.into(),
        namespace: None,
        target: "test".into(),
        result: "ok".into(),
        detail: None,
    })
}

/// Creates a namespace straight in the store, with no provisioning work.
async fn bare_namespace(store: &dyn Store, name: &str) -> clawfed_hub::model::Namespace {
    let id = uuid::Uuid::now_v7().to_string();
    store
        .create_namespace(
            &NewNamespace {
                id,
                name: name.to_owned(),
                display_name: name.to_owned(),
                data_plane_namespace: format!("test-{name}"),
                adopted: false,
            },
            &audit_only("namespace.create"),
        )
        .await
        .expect("create namespace")
}

async fn rest_get(hub: &TestHub, path: &str) -> Value {
    let resp = hub
        .http
        .get(hub.url(path))
        .bearer_auth(&hub.root_token)
        .send()
        .await
        .expect("GET");
    let status = resp.status();
    let body: Value = resp.json().await.expect("JSON body");
    assert!(status.is_success(), "GET {path}: {status} {body}");
    body
}

// ---- handlers ---------------------------------------------------------------

/// One call of a test handler.
#[derive(Debug, Clone)]
struct Call {
    id: String,
    attempt: i32,
    run_at: DateTime<Utc>,
    ended: DateTime<Utc>,
}

/// Records every call of a handler.
#[derive(Debug, Clone, Default)]
struct Calls(Arc<Mutex<Vec<Call>>>);

impl Calls {
    fn record(&self, item: &WorkItem) -> usize {
        let mut calls = self.0.lock().unwrap();
        calls.push(Call {
            id: item.id.clone(),
            attempt: item.attempts,
            run_at: item.run_at,
            ended: Utc::now(),
        });
        calls.iter().filter(|c| c.id == item.id).count()
    }

    fn of(&self, id: &str) -> Vec<Call> {
        let calls = self.0.lock().unwrap();
        calls.iter().filter(|c| c.id == id).cloned().collect()
    }

    fn per_item(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for c in self.0.lock().unwrap().iter() {
            *counts.entry(c.id.clone()).or_default() += 1;
        }
        counts
    }
}

/// Fails with a retryable error on its first `fails` calls for an item,
/// then succeeds.
struct Flaky {
    fails: usize,
    calls: Calls,
}

#[async_trait]
impl WorkHandler for Flaky {
    fn required_action(&self) -> Action {
        Action::Installation
    }

    async fn handle(
        &self,
        _store: &dyn Store,
        item: &WorkItem,
        _cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        let call = self.calls.record(item);
        if call <= self.fails {
            return Err(WorkError::retryable(format!(
                "flaky dependency unavailable (call {call})"
            )));
        }
        Ok(())
    }
}

/// Busy (another pass holds what it needs) on its first `busy` calls for
/// an item, then succeeds.
struct Busy {
    busy: usize,
    calls: Calls,
}

#[async_trait]
impl WorkHandler for Busy {
    fn required_action(&self) -> Action {
        Action::Installation
    }

    async fn handle(
        &self,
        _store: &dyn Store,
        item: &WorkItem,
        _cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        let call = self.calls.record(item);
        if call <= self.busy {
            return Err(WorkError::Busy(format!(
                "lease held elsewhere (call {call})"
            )));
        }
        Ok(())
    }
}

/// Keeps calling the store for `busy_for`, so the batch's handlers hold or
/// wait for every pooled connection.
struct StoreBound {
    busy_for: Duration,
}

#[async_trait]
impl WorkHandler for StoreBound {
    fn required_action(&self) -> Action {
        Action::Installation
    }

    async fn handle(
        &self,
        store: &dyn Store,
        _item: &WorkItem,
        _cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        let until = Instant::now() + self.busy_for;
        while Instant::now() < until {
            store
                .work_stats(Utc::now())
                .await
                .map_err(WorkError::from_store)?;
        }
        Ok(())
    }
}

/// Fails for good.
struct Broken {
    calls: Calls,
}

#[async_trait]
impl WorkHandler for Broken {
    fn required_action(&self) -> Action {
        Action::Installation
    }

    async fn handle(
        &self,
        _store: &dyn Store,
        item: &WorkItem,
        _cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        self.calls.record(item);
        Err(WorkError::permanent("payload names no such thing"))
    }
}

/// Succeeds after a short pause (so batches of several workers overlap).
struct Counting {
    calls: Calls,
    pause: Duration,
}

#[async_trait]
impl WorkHandler for Counting {
    fn required_action(&self) -> Action {
        Action::Installation
    }

    async fn handle(
        &self,
        _store: &dyn Store,
        item: &WorkItem,
        _cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        tokio::time::sleep(self.pause).await;
        self.calls.record(item);
        Ok(())
    }
}

/// Waits for shutdown (or a minute), announcing that it started.
struct Slow {
    started: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl WorkHandler for Slow {
    fn required_action(&self) -> Action {
        Action::Installation
    }

    async fn handle(
        &self,
        _store: &dyn Store,
        _item: &WorkItem,
        cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        self.started.notify_one();
        tokio::select! {
            _ = cancel.cancelled() => Err(WorkError::Cancelled),
            _ = tokio::time::sleep(Duration::from_secs(60)) => Ok(()),
        }
    }
}

/// Runs until released (or shutdown), announcing that it started.
struct Blocking {
    started: Arc<tokio::sync::Notify>,
    release: CancellationToken,
}

#[async_trait]
impl WorkHandler for Blocking {
    fn required_action(&self) -> Action {
        Action::Installation
    }

    async fn handle(
        &self,
        _store: &dyn Store,
        _item: &WorkItem,
        cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        self.started.notify_one();
        tokio::select! {
            _ = cancel.cancelled() => Err(WorkError::Cancelled),
            _ = self.release.cancelled() => Ok(()),
        }
    }
}

fn handlers_with(kind: &str, handler: impl WorkHandler) -> Handlers {
    let mut handlers = Handlers::builtin();
    handlers.register(kind, handler);
    handlers
}

// ---- scenarios --------------------------------------------------------------

/// 1. A namespace created through REST is provisioned by the hub's own
///    worker: its state becomes active and its work item is done after one
///    attempt.
async fn namespace_provision_marks_the_namespace_active(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let resp = hub
        .http
        .post(hub.url("/namespaces"))
        .bearer_auth(&hub.root_token)
        .json(&json!({ "name": "team-a" }))
        .send()
        .await
        .expect("POST /namespaces");
    assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());

    let ns = eventually("namespace team-a to become active", || async {
        let ns = rest_get(&hub, "/namespaces/team-a").await;
        (ns["state"] == "active").then_some(ns)
    })
    .await;
    assert!(ns["provisionedAt"].is_string(), "{ns}");

    // The handler's effect lands before the worker completes the item.
    let item = eventually("the provisioning work item to be done", || async {
        let listed = rest_get(&hub, "/work?namespace=team-a").await;
        let items = listed["items"].as_array().expect("items").clone();
        assert_eq!(items.len(), 1, "{listed}");
        (items[0]["state"] != "claimed").then(|| items[0].clone())
    })
    .await;
    assert_eq!(item["kind"], NAMESPACE_PROVISION);
    assert_eq!(item["namespace"], "team-a");
    assert_eq!(item["target"], ns["id"], "{item}");
    assert_eq!(item["state"], "done", "{item}");
    assert_eq!(item["attempts"], 1, "{item}");
    assert!(item["lastError"].is_null(), "{item}");
}

/// 2. A handler that fails retryably N times completes on attempt N+1; each
///    retry waits a jittered delay within the exponential ceiling, and the
///    delays grow from attempt to attempt.
async fn retryable_failures_back_off_then_succeed(backend: Backend) {
    const FAILS: usize = 3;
    const ITEMS: usize = 40;
    let base = Duration::from_millis(50);
    let calls = Calls::default();
    let handlers = handlers_with(
        "test.flaky",
        Flaky {
            fails: FAILS,
            calls: calls.clone(),
        },
    );
    let hub = TestHub::start_with(
        backend,
        |c| {
            c.worker.backoff_base_ms = base.as_millis() as u64;
            c.worker.backoff_cap_ms = 10_000;
        },
        handlers,
    )
    .await;
    let store = hub.store();
    let ids = store
        .enqueue_work(&vec![work("test.flaky", 10); ITEMS])
        .await
        .expect("enqueue");

    let backoff = Backoff {
        base,
        cap: Duration::from_secs(10),
    };
    // delays[k] holds the waits after failed attempt k+1, over all items.
    let mut delays: Vec<Vec<i64>> = vec![Vec::new(); FAILS];
    for id in &ids {
        let item = settled(store.as_ref(), id).await;
        assert_eq!(item.state, WorkState::Done, "{item:?}");
        assert_eq!(item.attempts, FAILS as i32 + 1, "{item:?}");
        assert!(item.lease_owner.is_none() && item.lease_expires_at.is_none());

        let mine = calls.of(id);
        let attempts: Vec<i32> = mine.iter().map(|c| c.attempt).collect();
        assert_eq!(attempts, vec![1, 2, 3, 4], "attempts are counted per call");
        for (k, pair) in mine.windows(2).enumerate() {
            let waited = (pair[1].run_at - pair[0].ended).num_milliseconds();
            let ceiling = backoff.ceiling(k as u32 + 1).as_millis() as i64;
            // run_at is stored in whole milliseconds: allow rounding below,
            // and scheduling slack between the handler and the worker above.
            assert!(
                (-2..=ceiling + 100).contains(&waited),
                "retry after attempt {} waited {waited}ms; ceiling {ceiling}ms",
                k + 1
            );
            delays[k].push(waited);
        }
    }
    let means: Vec<f64> = delays
        .iter()
        .map(|d| d.iter().sum::<i64>() as f64 / d.len() as f64)
        .collect();
    // Full jitter: mean ≈ ceiling / 2, i.e. about 25, 50 and 100 ms here.
    assert!(
        means.windows(2).all(|m| m[0] < m[1]),
        "mean retry delays should grow: {means:?}"
    );
}

/// 3. A handler that always fails retryably is given up on after
///    `maxAttempts`; REST shows the failure with the handler's message.
async fn gives_up_after_max_attempts(backend: Backend) {
    const MAX: i32 = 3;
    let calls = Calls::default();
    let handlers = handlers_with(
        "test.always-fails",
        Flaky {
            fails: usize::MAX,
            calls: calls.clone(),
        },
    );
    let hub = TestHub::start_with(backend, |_| {}, handlers).await;
    let store = hub.store();
    let id = store
        .enqueue_work(&[work("test.always-fails", MAX)])
        .await
        .expect("enqueue")
        .remove(0);
    let item = settled(store.as_ref(), &id).await;
    assert_eq!(item.state, WorkState::Failed, "{item:?}");
    assert_eq!(calls.of(&id).len(), MAX as usize);

    let shown = rest_get(&hub, &format!("/work/{id}")).await;
    assert_eq!(shown["state"], "failed", "{shown}");
    assert_eq!(shown["attempts"], MAX, "{shown}");
    assert_eq!(shown["maxAttempts"], MAX, "{shown}");
    let error = shown["lastError"].as_str().expect("lastError");
    assert!(error.contains("flaky dependency unavailable"), "{error}");
    assert!(error.contains("gave up"), "{error}");
}

/// 4. A permanent failure fails the item on its first attempt.
async fn permanent_failure_fails_at_once(backend: Backend) {
    let calls = Calls::default();
    let handlers = handlers_with(
        "test.broken",
        Broken {
            calls: calls.clone(),
        },
    );
    let hub = TestHub::start_with(backend, |_| {}, handlers).await;
    let store = hub.store();
    let id = store
        .enqueue_work(&[work("test.broken", 5)])
        .await
        .expect("enqueue")
        .remove(0);
    let item = settled(store.as_ref(), &id).await;
    assert_eq!(item.state, WorkState::Failed, "{item:?}");
    assert_eq!(item.attempts, 1, "{item:?}");
    assert_eq!(calls.of(&id).len(), 1);
    let error = item.last_error.expect("last error");
    assert!(error.contains("payload names no such thing"), "{error}");
    assert!(!error.contains("gave up"), "{error}");

    let shown = rest_get(&hub, &format!("/work/{id}")).await;
    assert_eq!(shown["state"], "failed");
    assert_eq!(shown["attempts"], 1);
}

/// Issue 10 (fault run, seed 1): work that finds another pass holding the
/// Agent's lease is busy, not failing: it is tried again shortly and the
/// attempt is not counted, so it outlasts any number of busy rounds (a stop
/// used to exhaust its attempts and be lost).
async fn busy_work_waits_without_using_its_attempts(backend: Backend) {
    let calls = Calls::default();
    let handlers = handlers_with(
        "test.busy",
        Busy {
            busy: 4,
            calls: calls.clone(),
        },
    );
    let hub = TestHub::start_with(backend, |_| {}, handlers).await;
    let store = hub.store();
    let id = store
        .enqueue_work(&[work("test.busy", 2)])
        .await
        .expect("enqueue")
        .remove(0);
    let item = settled(store.as_ref(), &id).await;
    assert_eq!(item.state, WorkState::Done, "{item:?}");
    assert_eq!(item.attempts, 1, "busy rounds are not attempts: {item:?}");
    assert_eq!(
        calls.of(&id).len(),
        5,
        "4 busy calls, then the one that ran"
    );
}

/// Fault run finding 3: the lease heartbeat of a batch ran in a `select!`
/// branch body, so while it waited for a pooled connection the batch's
/// handlers were not polled, and their queries held the connections it
/// waited for: the worker stalled for the pool's acquire timeout (10 s on
/// PostgreSQL, 30 s on SQLite) at each heartbeat. A batch of store-bound
/// handlers (more than the pool holds) with heartbeats every 100 ms must
/// finish in about the time its handlers take.
async fn lease_heartbeats_never_stall_a_batch_holding_the_pool(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.dyn_store();
    let handlers = handlers_with(
        "test.storebound",
        StoreBound {
            busy_for: Duration::from_secs(1),
        },
    );
    let items: Vec<NewWork> = (0..32).map(|_| work("test.storebound", 3)).collect();
    let ids = store.enqueue_work(&items).await.expect("enqueue");
    let started = Instant::now();
    let worker = RunningWorker::spawn(
        store.clone(),
        handlers,
        WorkerConfig {
            batch_size: 32,
            ..worker_config("storebound", Duration::from_millis(300))
        },
    );
    for id in &ids {
        let item = settled(store.as_ref(), id).await;
        assert_eq!(item.state, WorkState::Done, "{item:?}");
    }
    let took = started.elapsed();
    worker.stop().await;
    // Handlers take 1 s; a stall lasts an acquire timeout (>= 10 s).
    assert!(
        took < Duration::from_secs(8),
        "32 store-bound items took {took:?}: the heartbeat stalled the batch"
    );
}

/// Issue 17: a worker keeps up to `batch_size` items in flight and claims
/// more as slots free. With a batch barrier (claim, run all, claim again)
/// one slow item held back every slot of its batch: here, with 2 slots, a
/// blocked item and 5 quick ones queued after it, the quick ones all
/// complete through the one free slot while the blocked one still runs.
async fn a_blocked_item_holds_one_slot_not_the_batch(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.dyn_store();
    let started = Arc::new(tokio::sync::Notify::new());
    let release = CancellationToken::new();
    let calls = Calls::default();
    let mut handlers = handlers_with(
        "test.blocking",
        Blocking {
            started: started.clone(),
            release: release.clone(),
        },
    );
    handlers.register(
        "test.quick",
        Flaky {
            fails: 0,
            calls: calls.clone(),
        },
    );
    let blocker = store
        .enqueue_work(&[work("test.blocking", 3)])
        .await
        .expect("enqueue")
        .remove(0);
    let worker = RunningWorker::spawn(
        store.clone(),
        handlers,
        WorkerConfig {
            batch_size: 2,
            ..worker_config("slots", Duration::from_secs(30))
        },
    );
    tokio::time::timeout(WAIT, started.notified())
        .await
        .expect("the blocking handler starts");
    let quick = store
        .enqueue_work(&vec![work("test.quick", 3); 5])
        .await
        .expect("enqueue");
    for id in &quick {
        let item = settled(store.as_ref(), id).await;
        assert_eq!(item.state, WorkState::Done, "{item:?}");
    }
    let held = store.get_work(&blocker).await.unwrap();
    assert_eq!(
        held.state,
        WorkState::Claimed,
        "the blocked item still runs: {held:?}"
    );
    assert_eq!(calls.per_item().len(), 5, "each quick item ran");

    release.cancel();
    let item = settled(store.as_ref(), &blocker).await;
    assert_eq!(item.state, WorkState::Done, "{item:?}");
    let totals = worker.stop().await;
    assert_eq!((totals.claimed, totals.completed), (6, 6), "{totals:?}");
}

/// 5. Before any effect the worker re-checks who asked and what the work
///    acts on: a revoked token, a tenant token asking for installation work,
///    and work whose namespace is gone are all failed without effect.
async fn recheck_refuses_revoked_tokens_wrong_scopes_and_lost_owners(backend: Backend) {
    // No worker in the hub: the items are all queued before one runs.
    let hub = TestHub::start_with(backend, |c| c.worker.enabled = false, Handlers::builtin()).await;
    let store = hub.store();

    // a) Requested through REST by a token revoked before the work runs.
    let ops_secret = hub.token("ops", None, Role::InstallationAdmin).await;
    let ops = store
        .find_token(&auth::hash_token(&ops_secret))
        .await
        .expect("find token")
        .expect("ops token exists");
    let resp = hub
        .http
        .post(hub.url("/namespaces"))
        .bearer_auth(&ops_secret)
        .json(&json!({ "name": "revoked-ns" }))
        .send()
        .await
        .expect("POST /namespaces");
    assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());
    let queued = store
        .list_work(&WorkFilter {
            namespace: Some("revoked-ns".into()),
            state: None,
            limit: 10,
        })
        .await
        .expect("list work");
    assert_eq!(queued.len(), 1);
    let revoked_item = queued[0].clone();
    assert_eq!(revoked_item.requested_by.as_deref(), Some(ops.id.as_str()));
    store.revoke_token("ops", Utc::now()).await.expect("revoke");

    // b) A tenant admin's token asking for an installation-only kind.
    let tenant_ns = bare_namespace(store.as_ref(), "tenant-a").await;
    let tenant_secret = hub
        .token("tenant-a-admin", Some("tenant-a"), Role::Admin)
        .await;
    let tenant = store
        .find_token(&auth::hash_token(&tenant_secret))
        .await
        .expect("find token")
        .expect("tenant token exists");
    let tenant_item = store
        .enqueue_work(&[NewWork {
            namespace_id: Some(tenant_ns.id.clone()),
            target: tenant_ns.id.clone(),
            requested_by: Some(tenant.id.clone()),
            ..work(NAMESPACE_PROVISION, 3)
        }])
        .await
        .expect("enqueue")
        .remove(0);

    // c) Work for a namespace deleted before the work runs.
    let doomed = bare_namespace(store.as_ref(), "doomed").await;
    let orphan_item = store
        .enqueue_work(&[NewWork {
            namespace_id: Some(doomed.id.clone()),
            target: doomed.id.clone(),
            ..work(NAMESPACE_PROVISION, 3)
        }])
        .await
        .expect("enqueue")
        .remove(0);
    store
        .delete_namespace("doomed", &audit_only("namespace.delete"))
        .await
        .expect("delete namespace");

    let worker = RunningWorker::spawn(
        store.clone(),
        Handlers::builtin(),
        worker_config("rechecker", Duration::from_secs(10)),
    );
    let revoked = settled(store.as_ref(), &revoked_item.id).await;
    let denied = settled(store.as_ref(), &tenant_item).await;
    let orphan = settled(store.as_ref(), &orphan_item).await;
    let totals = worker.stop().await;
    assert_eq!(totals.failed, 3, "{totals:?}");
    assert_eq!(totals.completed, 0, "{totals:?}");

    for item in [&revoked, &denied, &orphan] {
        assert_eq!(item.state, WorkState::Failed, "{item:?}");
        assert_eq!(
            item.attempts, 1,
            "re-check failures are permanent: {item:?}"
        );
    }
    let error = |item: &WorkItem| item.last_error.clone().unwrap_or_default();
    assert!(
        error(&revoked).contains("authorization re-check failed"),
        "{revoked:?}"
    );
    assert!(error(&revoked).contains("revoked"), "{revoked:?}");
    assert!(
        error(&denied).contains("authorization re-check failed"),
        "{denied:?}"
    );
    assert!(
        error(&denied).contains("may not manage the installation"),
        "{denied:?}"
    );
    assert!(
        error(&orphan).contains("ownership check failed"),
        "{orphan:?}"
    );

    // Nothing was provisioned on behalf of the refused requests.
    for name in ["revoked-ns", "tenant-a"] {
        let ns = store.get_namespace(name).await.expect("get namespace");
        assert_eq!(ns.state, NamespaceState::Pending, "{ns:?}");
        assert!(ns.provisioned_at.is_none(), "{ns:?}");
    }
    let shown = rest_get(&hub, "/namespaces/revoked-ns").await;
    assert_eq!(shown["state"], "pending");
}

/// 6. Claims of a worker that crashed are recovered once their lease
///    expires and completed by a live worker (a second attempt); a lease
///    can only be settled by its holder.
async fn expired_leases_are_recovered_and_fenced(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.dyn_store();
    let mut ids = store
        .enqueue_work(&vec![work("test.count", 5); 3])
        .await
        .expect("enqueue");
    // One item is on its last attempt: an expired lease fails it instead.
    let last_chance = store
        .enqueue_work(&[work("test.count", 1)])
        .await
        .expect("enqueue")
        .remove(0);

    let claimed = store
        .claim_work(
            "crashed-worker",
            10,
            Duration::from_millis(300),
            Utc::now(),
            &WorkLane::All,
        )
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 4);
    for item in &claimed {
        assert_eq!(item.state, WorkState::Claimed);
        assert_eq!(item.attempts, 1);
        assert_eq!(item.lease_owner.as_deref(), Some("crashed-worker"));
    }

    // Fencing: nobody but the holder may settle or extend a lease.
    let all: Vec<String> = claimed.iter().map(|i| i.id.clone()).collect();
    let now = Utc::now();
    assert_eq!(store.complete_work("intruder", &all, now).await.unwrap(), 0);
    assert_eq!(
        store
            .heartbeat_work("intruder", &all, now + chrono::Duration::hours(1))
            .await
            .unwrap(),
        0
    );
    assert!(
        !store
            .retry_work("intruder", &ids[0], now, "nope", now)
            .await
            .unwrap()
    );
    assert!(
        !store
            .fail_work("intruder", &ids[0], "nope", now)
            .await
            .unwrap()
    );
    for id in &all {
        let item = store.get_work(id).await.unwrap();
        assert_eq!(item.state, WorkState::Claimed, "{item:?}");
        assert_eq!(item.lease_owner.as_deref(), Some("crashed-worker"));
    }

    let calls = Calls::default();
    let handlers = handlers_with(
        "test.count",
        Flaky {
            fails: 0,
            calls: calls.clone(),
        },
    );
    let worker = RunningWorker::spawn(
        store.clone(),
        handlers,
        worker_config("live-worker", Duration::from_secs(1)),
    );
    for id in &ids {
        let item = settled(store.as_ref(), id).await;
        assert_eq!(item.state, WorkState::Done, "{item:?}");
        assert_eq!(item.attempts, 2, "{item:?}");
        assert_eq!(calls.of(id).len(), 1, "only the live worker ran it");
    }
    let lost = settled(store.as_ref(), &last_chance).await;
    assert_eq!(lost.state, WorkState::Failed, "{lost:?}");
    assert!(
        lost.last_error
            .as_deref()
            .unwrap_or_default()
            .contains("lease expired"),
        "{lost:?}"
    );
    assert!(calls.of(&last_chance).is_empty());
    let totals = worker.stop().await;
    assert_eq!(totals.completed, 3, "{totals:?}");

    // The crashed worker coming back late cannot settle what it lost.
    ids.push(last_chance);
    assert_eq!(
        store
            .complete_work("crashed-worker", &ids, Utc::now())
            .await
            .unwrap(),
        0
    );
    assert!(
        !store
            .retry_work("crashed-worker", &ids[0], Utc::now(), "late", Utc::now())
            .await
            .unwrap()
    );
    assert_eq!(
        store.get_work(&ids[0]).await.unwrap().state,
        WorkState::Done
    );
}

/// 7. Four workers drain 500 items; with leases that never expire every
///    item is handled exactly once and completed exactly once (on
///    PostgreSQL the claims race through `FOR UPDATE SKIP LOCKED`).
async fn concurrent_workers_complete_each_item_once(backend: Backend) {
    const ITEMS: usize = 500;
    let db = db::open(backend).await;
    let store = db.dyn_store();

    let calls = Calls::default();
    // Each worker logs worker.health once its loop has been through the
    // store (recovery, then the stats the line reports).
    let _combine_interest = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    let logs: Vec<Captured> = (0..4).map(|_| Captured::default()).collect();
    let workers: Vec<RunningWorker> = logs
        .iter()
        .enumerate()
        .map(|(n, log)| {
            let handlers = handlers_with(
                "test.count",
                Counting {
                    calls: calls.clone(),
                    pause: Duration::from_millis(2),
                },
            );
            let writer = log.clone();
            let subscriber = tracing_subscriber::fmt()
                .json()
                .flatten_event(true)
                .with_max_level(tracing::Level::INFO)
                .with_writer(move || writer.clone())
                .finish();
            let config = WorkerConfig {
                batch_size: 8,
                health_interval: Duration::from_millis(50),
                ..worker_config(&format!("worker-{n}"), Duration::from_secs(300))
            };
            let cancel = CancellationToken::new();
            let task = tokio::spawn(
                Worker::new(store.clone(), handlers, config)
                    .run(cancel.clone())
                    .with_subscriber(subscriber),
            );
            RunningWorker { cancel, task }
        })
        .collect();
    // The work arrives once every worker is polling, so one that got the
    // pool's warm connection cannot drain the queue alone while the others
    // still open theirs.
    eventually("every worker polling the store", || async {
        logs.iter()
            .all(|log| log.lines().iter().any(|l| l["message"] == "worker.health"))
            .then_some(())
    })
    .await;
    let ids = store
        .enqueue_work(&vec![work("test.count", 3); ITEMS])
        .await
        .expect("enqueue");

    eventually("all 500 items to be done", || async {
        let stats = store.work_stats(Utc::now()).await.expect("stats");
        (stats.pending == 0).then_some(())
    })
    .await;
    let mut totals = Vec::new();
    for w in workers {
        totals.push(w.stop().await);
    }

    let done = store
        .list_work(&WorkFilter {
            namespace: None,
            state: Some(WorkState::Done),
            limit: 1000,
        })
        .await
        .expect("list done");
    assert_eq!(done.len(), ITEMS);
    assert!(
        done.iter().all(|i| i.attempts == 1),
        "no item was claimed twice"
    );

    let per_item = calls.per_item();
    assert_eq!(per_item.len(), ITEMS);
    for id in &ids {
        assert_eq!(per_item.get(id), Some(&1), "item {id} handled once");
    }
    let completed: u64 = totals.iter().map(|t| t.completed).sum();
    let claimed: u64 = totals.iter().map(|t| t.claimed).sum();
    assert_eq!(completed, ITEMS as u64, "{totals:?}");
    assert_eq!(claimed, ITEMS as u64, "{totals:?}");
    let busy = totals.iter().filter(|t| t.completed > 0).count();
    assert!(busy >= 2, "the workers shared the queue: {totals:?}");
}

/// 8. Cancelling a worker whose handler honours the cancellation token puts
///    the item back to pending with its lease cleared, and `run` returns;
///    the next worker picks it up.
async fn shutdown_releases_the_item_in_hand(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.dyn_store();
    let id = store
        .enqueue_work(&[work("test.slow", 5)])
        .await
        .expect("enqueue")
        .remove(0);
    let started = Arc::new(tokio::sync::Notify::new());
    let worker = RunningWorker::spawn(
        store.clone(),
        handlers_with(
            "test.slow",
            Slow {
                started: started.clone(),
            },
        ),
        worker_config("draining", Duration::from_secs(30)),
    );
    tokio::time::timeout(WAIT, started.notified())
        .await
        .expect("the slow handler starts");
    let claimed = store.get_work(&id).await.unwrap();
    assert_eq!(claimed.state, WorkState::Claimed);

    let stopping = Instant::now();
    let totals = worker.stop().await;
    assert!(stopping.elapsed() < Duration::from_secs(5));
    assert_eq!(totals.claimed, 1, "{totals:?}");
    assert_eq!((totals.completed, totals.failed), (0, 0), "{totals:?}");

    let released = store.get_work(&id).await.unwrap();
    assert_eq!(released.state, WorkState::Pending, "{released:?}");
    assert!(released.lease_owner.is_none(), "{released:?}");
    assert!(released.lease_expires_at.is_none(), "{released:?}");
    // Released untouched: the interrupted attempt is not counted.
    assert_eq!(released.attempts, 0);

    // Another worker (a restart) finishes it.
    let calls = Calls::default();
    let worker = RunningWorker::spawn(
        store.clone(),
        handlers_with(
            "test.slow",
            Flaky {
                fails: 0,
                calls: calls.clone(),
            },
        ),
        worker_config("restarted", Duration::from_secs(30)),
    );
    let item = settled(store.as_ref(), &id).await;
    worker.stop().await;
    assert_eq!(item.state, WorkState::Done, "{item:?}");
    assert_eq!(item.attempts, 1, "the released attempt was not counted");
}

/// A `MakeWriter` appending to a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<Value> {
        let bytes = self.0.lock().unwrap().clone();
        String::from_utf8(bytes)
            .expect("utf-8 logs")
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }
}

/// 9. One run logs, as flattened JSON: worker.started, worker.health,
///    worker.completed with durationMs, worker.error for a retry and a
///    failure, and worker.stopped with the totals.
async fn logs_worker_lifecycle_as_json(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.dyn_store();
    let mut handlers = Handlers::builtin();
    handlers.register(
        "test.flaky",
        Flaky {
            fails: 1,
            calls: Calls::default(),
        },
    );
    handlers.register(
        "test.broken",
        Broken {
            calls: Calls::default(),
        },
    );
    let ids = store
        .enqueue_work(&[work("test.flaky", 3), work("test.broken", 3)])
        .await
        .expect("enqueue");

    // Scoped to the worker's future: no global subscriber is installed.
    // tracing caches each callsite's interest when it is first hit, and
    // while only one dispatcher exists it asks the *hitting thread's*
    // default, which for the other tests running in parallel is none: a
    // worker callsite first reached by them would be cached as "never" and
    // this test would lose that line. A second registered dispatcher makes
    // tracing combine the interest of every dispatcher instead.
    let _combine_interest = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let cancel = CancellationToken::new();
    let config = WorkerConfig {
        health_interval: Duration::from_millis(50),
        ..worker_config("logged", Duration::from_secs(10))
    };
    let task = tokio::spawn(
        Worker::new(store.clone(), handlers, config)
            .run(cancel.clone())
            .with_subscriber(subscriber),
    );
    for id in &ids {
        settled(store.as_ref(), id).await;
    }
    eventually("a worker.health line", || async {
        let lines = captured.lines();
        lines
            .iter()
            .any(|l| l["message"] == "worker.health")
            .then_some(())
    })
    .await;
    cancel.cancel();
    let totals = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("worker stops")
        .expect("worker task");
    assert_eq!((totals.completed, totals.failed), (1, 1), "{totals:?}");

    let lines = captured.lines();
    let with = |message: &str| -> Vec<&Value> {
        lines.iter().filter(|l| l["message"] == message).collect()
    };
    let started = with("worker.started");
    assert_eq!(started.len(), 1, "{lines:#?}");
    assert_eq!(started[0]["worker"], "logged");
    assert_eq!(started[0]["level"], "INFO");
    let health = with("worker.health");
    assert!(health[0]["pending"].is_i64(), "{:?}", health[0]);
    assert!(health[0]["oldestPendingAgeMs"].is_u64(), "{:?}", health[0]);

    let completed = with("worker.completed");
    assert_eq!(completed.len(), 1, "{lines:#?}");
    assert_eq!(completed[0]["workId"], ids[0].as_str());
    assert_eq!(completed[0]["kind"], "test.flaky");
    assert_eq!(completed[0]["attempt"], 2);
    assert!(completed[0]["durationMs"].is_u64(), "{:?}", completed[0]);

    let errors = with("worker.error");
    let retry = errors
        .iter()
        .find(|l| l["workId"] == ids[0].as_str())
        .unwrap_or_else(|| panic!("a worker.error line for the retry: {lines:#?}"));
    assert_eq!(retry["level"], "WARN");
    assert!(retry["retryInMs"].is_u64(), "{retry}");
    assert!(retry["durationMs"].is_u64(), "{retry}");
    assert!(
        retry["error"]
            .as_str()
            .unwrap_or_default()
            .contains("flaky dependency unavailable"),
        "{retry}"
    );
    let failure = errors
        .iter()
        .find(|l| l["workId"] == ids[1].as_str())
        .unwrap_or_else(|| panic!("a worker.error line for the failure: {lines:#?}"));
    assert_eq!(failure["level"], "ERROR");
    assert!(
        failure["error"]
            .as_str()
            .unwrap_or_default()
            .contains("payload names no such thing"),
        "{failure}"
    );

    let stopped = with("worker.stopped");
    assert_eq!(stopped.len(), 1, "{lines:#?}");
    assert_eq!(stopped[0]["completed"], 1);
    assert_eq!(stopped[0]["failed"], 1);
    assert!(stopped[0]["elapsedMs"].is_u64(), "{:?}", stopped[0]);
    assert_eq!(
        lines.last().map(|l| &l["message"]),
        Some(&json!("worker.stopped")),
        "worker.stopped is the last line"
    );
}
