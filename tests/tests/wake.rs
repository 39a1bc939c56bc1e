//! The hub wakes on events instead of polling (issue 17, part 2): with every
//! safety poll set to a minute, work queued in process starts within
//! milliseconds, scheduled retries run when they fall due, a deploy's first
//! pipeline pass starts at once, and outbox writes and revocations reach a
//! connected spoke's session at once. Real stores (SQLite and the
//! PostgreSQL test server), a real hub and a real spoke over mTLS.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use clawfed_hub::auth::Action;
use clawfed_hub::model::{ConnectionState, WorkItem};
use clawfed_hub::store::{NewWork, Store, WorkFilter};
use clawfed_hub::worker::backoff::Backoff;
use clawfed_hub::worker::rollout::REVISION_ROLLOUT;
use clawfed_hub::worker::{Handlers, WorkError, WorkHandler, Worker, WorkerConfig};
use clawfed_tests::db;
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::link::{bootstrap_token, cluster, eventually, start_spoke};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Every safety poll in these tests: a test that waited for one would time
/// out long before it.
const SAFETY_POLL: Duration = Duration::from_secs(60);
/// What "at once" must stay under, with margin for a loaded 2-core machine
/// (the wake-up itself takes milliseconds).
const PROMPT: Duration = Duration::from_secs(1);
const WAIT: Duration = Duration::from_secs(20);

clawfed_tests::on_both_backends!(
    the_worker_wakes_on_enqueue_and_when_work_falls_due,
    a_deploy_starts_without_waiting_for_the_poll,
    outbox_writes_and_revocations_reach_the_session_without_the_poll,
    a_gateway_turning_ready_queues_a_pass_for_the_revision_waiting_for_it,
);

const KIND: &str = "test.wake";

/// Records when each item's handler was called; the first call of an item
/// whose payload says `"busyOnce"` or `"failOnce"` answers Busy or a
/// retryable error.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<HashMap<String, Vec<Instant>>>>);

impl Recorder {
    fn calls(&self, id: &str) -> Vec<Instant> {
        self.0.lock().unwrap().get(id).cloned().unwrap_or_default()
    }
}

#[async_trait]
impl WorkHandler for Recorder {
    fn required_action(&self) -> Action {
        Action::Installation
    }

    async fn handle(
        &self,
        _store: &dyn Store,
        item: &WorkItem,
        _cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        let first = {
            let mut calls = self.0.lock().unwrap();
            let calls = calls.entry(item.id.clone()).or_default();
            calls.push(Instant::now());
            calls.len() == 1
        };
        match item.payload.get("mode").and_then(|m| m.as_str()) {
            Some("busyOnce") if first => Err(WorkError::Busy("busy".into())),
            Some("failOnce") if first => Err(WorkError::retryable("flaky")),
            _ => Ok(()),
        }
    }
}

fn work(mode: &str) -> NewWork {
    NewWork {
        kind: KIND.to_owned(),
        namespace_id: None,
        target: format!("test/{}", uuid::Uuid::new_v4()),
        payload: json!({ "mode": mode }),
        requested_by: None,
        max_attempts: 5,
        run_at: Utc::now(),
        coalesce: false,
    }
}

/// Waits until the handler of `id` was called `n` times; their times.
async fn called(recorder: &Recorder, id: &str, n: usize) -> Vec<Instant> {
    eventually(WAIT, &format!("{n} calls of {id}"), || async {
        let calls = recorder.calls(id);
        (calls.len() >= n).then_some(calls)
    })
    .await
}

async fn the_worker_wakes_on_enqueue_and_when_work_falls_due(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.dyn_store();
    let recorder = Recorder::default();
    let mut handlers = Handlers::default();
    handlers.register(KIND, recorder.clone());
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(
        Worker::new(
            store.clone(),
            handlers,
            WorkerConfig {
                id: "wake-test".into(),
                poll_interval: SAFETY_POLL,
                backoff: Backoff {
                    base: Duration::from_millis(300),
                    cap: Duration::from_millis(300),
                },
                ..WorkerConfig::default()
            },
        )
        .run(shutdown.clone()),
    );

    // Enqueued while the worker sleeps (each round waits for the previous
    // item to be done first, so the worker is back in its idle wait).
    for round in 0..4 {
        let enqueued = Instant::now();
        let id = store.enqueue_work(&[work("ok")]).await.unwrap().remove(0);
        let started = called(&recorder, &id, 1).await[0];
        let took = started.duration_since(enqueued);
        assert!(
            took < PROMPT,
            "round {round}: work started {took:?} after it was enqueued (safety poll {SAFETY_POLL:?})"
        );
        eventually(WAIT, "item done", || async {
            let item = store.get_work(&id).await.unwrap();
            (item.state == clawfed_hub::model::WorkState::Done).then_some(())
        })
        .await;
    }

    // Put back for later: a busy item comes back after its 500 ms delay and
    // a retried one after its backoff (at most 300 ms), not at the poll.
    let busy = store
        .enqueue_work(&[work("busyOnce")])
        .await
        .unwrap()
        .remove(0);
    let calls = called(&recorder, &busy, 2).await;
    let gap = calls[1].duration_since(calls[0]);
    assert!(
        gap >= Duration::from_millis(450) && gap < Duration::from_millis(500) + PROMPT,
        "busy work ran again after {gap:?}"
    );
    let flaky = store
        .enqueue_work(&[work("failOnce")])
        .await
        .unwrap()
        .remove(0);
    let calls = called(&recorder, &flaky, 2).await;
    let gap = calls[1].duration_since(calls[0]);
    assert!(
        gap < Duration::from_millis(300) + PROMPT,
        "retried work ran again after {gap:?}"
    );

    shutdown.cancel();
    let totals = tokio::time::timeout(Duration::from_secs(10), worker)
        .await
        .expect("worker stops")
        .unwrap();
    assert_eq!(totals.completed, 6, "{totals:?}");
}

async fn a_deploy_starts_without_waiting_for_the_poll(backend: Backend) {
    let hub = TestHub::start_with(
        backend,
        |c| {
            c.pipeline.enabled = true;
            c.worker.poll_interval_ms = SAFETY_POLL.as_millis() as u64;
        },
        Handlers::builtin(),
    )
    .await;
    let store = hub.store();
    let tenant = format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    hub.post_ok("/namespaces", json!({ "name": tenant })).await;
    hub.post_ok(
        &format!("/namespaces/{tenant}/agents"),
        json!({
            "name": "bot",
            "spec": {
                "harnessKind": "embedded-openclaw",
                "image": "ghcr.io/openclaw/openclaw:1.0",
            }
        }),
    )
    .await;
    let deployed = Instant::now();
    hub.post_ok(
        &format!("/namespaces/{tenant}/agents/bot/deploy"),
        json!({}),
    )
    .await;
    // The first pass claims the rollout item (no cluster is online, so it
    // goes on to wait for placement; claiming it is what is timed).
    let started = eventually(WAIT, "first pipeline pass", || async {
        let items = store
            .list_work(&WorkFilter {
                namespace: Some(tenant.clone()),
                state: None,
                limit: 100,
            })
            .await
            .unwrap();
        items
            .iter()
            .any(|i| i.kind == REVISION_ROLLOUT && i.attempts >= 1)
            .then(Instant::now)
    })
    .await;
    let took = started.duration_since(deployed);
    assert!(
        took < PROMPT,
        "the first pass started {took:?} after the deploy (safety poll {SAFETY_POLL:?})"
    );
}

async fn outbox_writes_and_revocations_reach_the_session_without_the_poll(backend: Backend) {
    let hub = TestHub::start_with(
        backend,
        |c| {
            c.link.safety_poll_ms = SAFETY_POLL.as_millis() as u64;
            // The session re-dispatches on each heartbeat too; a minute
            // keeps that safety net out of the measurement as well.
            c.link.heartbeat_seconds = 60;
        },
        Handlers::builtin(),
    )
    .await;
    let link = hub.hub.as_ref().unwrap().link.clone().unwrap();
    let store = hub.store();
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, "wake-a", false).await;
    let spoke = start_spoke(&hub, "wake-a", Some(token), dir.path());
    let online = eventually(WAIT, "spoke online", || async {
        cluster(&hub, "wake-a")
            .await
            .filter(|c| c.connection_state == ConnectionState::Online)
    })
    .await;

    for generation in 1..=3 {
        let target = format!("ns/wake-{generation}");
        let sent = Instant::now();
        link.send(
            &online.id,
            &target,
            "namespace.ensure",
            1,
            &json!({ "n": generation }),
        )
        .await
        .unwrap()
        .expect("queued");
        let applied = eventually(WAIT, "the spoke applied it", || async {
            (spoke.ledger.writes(&target).await == 1).then(Instant::now)
        })
        .await;
        let took = applied.duration_since(sent);
        assert!(
            took < PROMPT,
            "outbox item {generation} reached the spoke {took:?} after the put (safety poll {SAFETY_POLL:?})"
        );
        eventually(WAIT, "ack", || async {
            let depth: i64 = store
                .outbox_summary()
                .await
                .unwrap()
                .iter()
                .map(|s| s.depth)
                .sum();
            (depth == 0).then_some(())
        })
        .await;
    }

    // A revocation in this process closes the session at once.
    let revoking = Instant::now();
    hub.post_ok("/clusters/wake-a/revoke", json!({})).await;
    let ended = spoke.ended(WAIT).await;
    assert!(
        matches!(ended, Err(clawfed_spoke::link::LinkError::Revoked(_))),
        "{ended:?}"
    );
    let took = revoking.elapsed();
    assert!(
        took < PROMPT,
        "the revoked session closed {took:?} after the revocation (safety poll {SAFETY_POLL:?})"
    );
}

/// Issue 17: the Gateway watch's wake-up. A Gateway turning Ready queues a
/// pass, due now, over the revision that waits for readiness, and nothing
/// for a revision in another phase or an unknown Agent (the watch reports
/// every Gateway; the store decides who waits).
async fn a_gateway_turning_ready_queues_a_pass_for_the_revision_waiting_for_it(backend: Backend) {
    use clawfed_hub::gateway::{GatewayReady, ReadyListener};
    use clawfed_hub::model::{RevisionPhase, WorkState};
    use clawfed_hub::worker::rollout::RolloutTrigger;

    // No worker: the queued items stay pending, to be looked at.
    let hub = TestHub::start_with(backend, |c| c.worker.enabled = false, Handlers::builtin()).await;
    let store = hub.store();
    let tenant = format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    hub.post_ok("/namespaces", json!({ "name": tenant })).await;
    hub.post_ok(
        &format!("/namespaces/{tenant}/agents"),
        json!({
            "name": "bot",
            "spec": {
                "harnessKind": "dedicated-codex",
                "image": "ghcr.io/openclaw/openclaw:1.0",
            }
        }),
    )
    .await;
    hub.post_ok(
        &format!("/namespaces/{tenant}/agents/bot/deploy"),
        json!({}),
    )
    .await;
    let passes = || async {
        store
            .list_work(&WorkFilter {
                namespace: Some(tenant.clone()),
                state: Some(WorkState::Pending),
                limit: 100,
            })
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.kind == REVISION_ROLLOUT)
            .collect::<Vec<_>>()
    };
    // (With the pipeline off the deploy queues no pass of its own.)
    let deployed = passes().await.len();
    let trigger: Arc<dyn ReadyListener> = Arc::new(RolloutTrigger {
        store: store.clone(),
        max_attempts: 3,
    });
    let ready = |agent: &str| GatewayReady {
        tenant: tenant.clone(),
        namespace: "oce-gateways-0".into(),
        agent: agent.into(),
        revision: 1,
    };

    // Still pending: the pass that moves it on reads the Gateway itself.
    trigger.gateway_ready(ready("bot")).await;
    assert_eq!(
        passes().await.len(),
        deployed,
        "no pass for a pending revision"
    );

    let rev = store.get_revision(&tenant, "bot", 1).await.unwrap();
    store
        .update_revision(
            &rev.id,
            rev.version,
            RevisionPhase::WaitingReady,
            None,
            &rev.progress,
        )
        .await
        .unwrap();
    let before = Utc::now();
    trigger.gateway_ready(ready("bot")).await;
    let after = passes().await;
    assert_eq!(
        after.len(),
        deployed + 1,
        "one pass for the waiting revision"
    );
    // The new one is due now (the store keeps milliseconds).
    let fresh: Vec<_> = after
        .iter()
        .filter(|i| i.run_at > before - chrono::Duration::milliseconds(1))
        .collect();
    assert_eq!(fresh.len(), 1, "{after:?}");
    assert_eq!(fresh[0].target, rev.id);
    assert!(
        fresh[0].run_at <= Utc::now(),
        "due now: {:?}",
        fresh[0].run_at
    );

    trigger.gateway_ready(ready("nobody")).await;
    assert_eq!(passes().await.len(), deployed + 1, "unknown Agent: nothing");
}
