//! The reconciling worker: claims durable work under a lease, re-checks
//! authorization and ownership, runs the kind's handler, and completes,
//! retries (exponential backoff, full jitter) or fails each item.
//!
//! # Layout
//! - this file: [`Worker`], the claim / heartbeat / complete loop.
//! - `backoff.rs`: retry delays (pure).
//! - `kinds.rs`: work kinds and their handlers.
//! - `rollout.rs`: the revision pipeline's driver (`revision.rollout`, `agent.stop`).
//! - `drain.rs`, `failover.rs`: the drain's passes and the failover scan;
//!   `moves.rs`: the move of an Agent off a cluster both deploy.

pub mod backoff;
pub mod drain;
pub mod failover;
pub mod kinds;
mod moves;
pub mod rollout;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing::instrument::WithSubscriber;

use crate::auth::{Action, Decision, Principal};
use crate::model::WorkItem;
use crate::store::{Store, StoreError, WorkLane};

use backoff::Backoff;

/// The cause a [`WorkError`] carries, kept as an error (not its text) so
/// a caller can inspect it.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// How a handler failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    /// May succeed later; retried with backoff until `maxAttempts`.
    #[error("{context}")]
    Retryable {
        context: String,
        #[source]
        source: Option<Cause>,
    },
    /// Can never succeed; failed at once.
    #[error("{context}")]
    Permanent {
        context: String,
        #[source]
        source: Option<Cause>,
    },
    /// Shutdown interrupted the handler; the item is released untouched.
    #[error("cancelled by shutdown")]
    Cancelled,
    /// The work cannot run now because other work holds what it needs (an
    /// Agent's pass lease): tried again shortly, and the attempt is not
    /// counted, so a busy Agent never exhausts a stop's attempts.
    #[error("{0}")]
    Busy(String),
}

impl WorkError {
    /// Retryable, for the reason `context` gives.
    pub fn retryable(context: impl Into<String>) -> Self {
        Self::Retryable {
            context: context.into(),
            source: None,
        }
    }

    /// Retryable: `context` failed because of `source`.
    pub fn retryable_because(context: impl Into<String>, source: impl Into<Cause>) -> Self {
        Self::Retryable {
            context: context.into(),
            source: Some(source.into()),
        }
    }

    /// Permanent, for the reason `context` gives.
    pub fn permanent(context: impl Into<String>) -> Self {
        Self::Permanent {
            context: context.into(),
            source: None,
        }
    }

    /// Permanent: `context` failed because of `source`.
    pub fn permanent_because(context: impl Into<String>, source: impl Into<Cause>) -> Self {
        Self::Permanent {
            context: context.into(),
            source: Some(source.into()),
        }
    }

    /// Store errors: unavailability is retryable, the rest permanent.
    pub fn from_store(err: StoreError) -> Self {
        match err {
            StoreError::Unavailable(_) => Self::retryable_because("store", err),
            _ => Self::permanent_because("store", err),
        }
    }

    /// What the queue records of it: the context and each cause,
    /// `context: cause: cause's cause`.
    pub fn record(&self) -> String {
        clawfed_proto::errors::chain(self)
    }
}

/// The handler of one work kind.
#[async_trait]
pub trait WorkHandler: Send + Sync + 'static {
    /// The permission the requesting token must still hold when the work
    /// runs.
    fn required_action(&self) -> Action;

    /// Performs the work. Must be idempotent: an item may run again after a
    /// lease expires.
    async fn handle(
        &self,
        store: &dyn Store,
        item: &WorkItem,
        cancel: &CancellationToken,
    ) -> Result<(), WorkError>;
}

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Lease owner name; unique per worker.
    pub id: String,
    /// The most items in flight at once; each claim takes as many as
    /// there are free slots.
    pub batch_size: u32,
    /// How long a claim is held without a heartbeat.
    pub lease: Duration,
    /// The safety poll: the longest an idle worker sleeps. Work queued in
    /// this process wakes it at once and it wakes itself when the next
    /// item falls due or a lease expires, so this only bounds how late it
    /// sees work queued by another process.
    pub poll_interval: Duration,
    pub backoff: Backoff,
    /// How often `worker.health` is logged.
    pub health_interval: Duration,
    /// The kinds this worker claims (the hub runs one worker per lane).
    pub lane: WorkLane,
    /// Recovers expired claims (of every kind) every half lease. A second
    /// lane's worker in the same process turns this off: the main lane's
    /// recovery covers its kinds too, and it still recovers when its own
    /// idle wait ends at one of its claims' expiry (so a crashed holder's
    /// item comes back as promptly as before), not on every safety poll.
    pub periodic_recovery: bool,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            id: format!("worker-{}", uuid::Uuid::new_v4()),
            batch_size: 32,
            lease: Duration::from_secs(30),
            poll_interval: DEFAULT_SAFETY_POLL,
            backoff: Backoff {
                base: Duration::from_secs(1),
                cap: Duration::from_secs(300),
            },
            health_interval: Duration::from_secs(60),
            lane: WorkLane::All,
            periodic_recovery: true,
        }
    }
}

/// Handlers by work kind.
#[derive(Clone, Default)]
pub struct Handlers(HashMap<String, Arc<dyn WorkHandler>>);

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

impl Handlers {
    /// The hub's built-in kinds.
    pub fn builtin() -> Self {
        let mut h = Self::default();
        h.register(kinds::NAMESPACE_PROVISION, kinds::ProvisionNamespace);
        h
    }

    /// Adds (or replaces) the handler of `kind`.
    pub fn register(&mut self, kind: &str, handler: impl WorkHandler) {
        self.0.insert(kind.to_owned(), Arc::new(handler));
    }
}

/// Counters a worker reports in `worker.health` and on stop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerTotals {
    /// Claims that returned work (one claim transaction each, for the
    /// free slots; the items that end together are completed in one
    /// transaction); empty polls not counted.
    pub batches: u64,
    pub claimed: u64,
    pub completed: u64,
    pub retried: u64,
    pub failed: u64,
}

/// A worker over a store.
pub struct Worker {
    store: Arc<dyn Store>,
    handlers: Handlers,
    config: WorkerConfig,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .field("handlers", &self.handlers)
            .finish()
    }
}

/// What happened to one item.
enum Outcome {
    Done,
    Retry(String),
    Fail(String),
    Release,
    /// Not now (busy); tried again after a short delay, attempt not counted.
    Defer(String),
}

/// One attempt of an item.
struct Ran {
    outcome: Outcome,
    elapsed: Duration,
    /// When the handler returned: retries and deferrals count from here.
    ended_at: chrono::DateTime<Utc>,
}

/// The items a worker runs, each on its own task.
#[derive(Default)]
struct InFlight {
    tasks: JoinSet<Ran>,
    /// Each task's item: its lease is heartbeated while it runs, and a
    /// panicked task's item is still settled.
    items: HashMap<tokio::task::Id, WorkItem>,
}

impl InFlight {
    fn len(&self) -> usize {
        self.items.len()
    }

    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn ids(&self) -> Vec<String> {
        self.items.values().map(|i| i.id.clone()).collect()
    }

    fn spawn(&mut self, worker: &Arc<Worker>, item: WorkItem, shutdown: &CancellationToken) {
        let (worker, shutdown, run) = (worker.clone(), shutdown.clone(), item.clone());
        // The handler's logs keep this worker's subscriber and span.
        let task = async move { worker.run_one(&run, &shutdown).await }
            .in_current_span()
            .with_current_subscriber();
        let handle = self.tasks.spawn(task);
        self.items.insert(handle.id(), item);
    }

    /// The item of the task that just ended and every other one already
    /// ended, with their outcomes (settled together).
    fn finished(
        &mut self,
        first: Result<(tokio::task::Id, Ran), JoinError>,
    ) -> Vec<(WorkItem, Ran)> {
        let mut out = Vec::new();
        let mut next = Some(first);
        while let Some(joined) = next {
            let (task, ran) = match joined {
                Ok((task, ran)) => (task, ran),
                Err(e) => {
                    let outcome = if e.is_panic() {
                        Outcome::Retry("the work handler panicked".into())
                    } else {
                        Outcome::Release
                    };
                    let ran = Ran {
                        outcome,
                        elapsed: Duration::ZERO,
                        ended_at: Utc::now(),
                    };
                    (e.id(), ran)
                }
            };
            if let Some(item) = self.items.remove(&task) {
                out.push((item, ran));
            }
            next = self.tasks.try_join_next_with_id();
        }
        out
    }
}

/// The default safety poll of an idle worker (see
/// [`WorkerConfig::poll_interval`]).
pub const DEFAULT_SAFETY_POLL: Duration = Duration::from_secs(2);

/// How soon the claim is tried again after a store error (at most the
/// safety poll).
const ERROR_RETRY: Duration = Duration::from_millis(500);

/// The shortest sleep of an idle worker whose next item is already due (on
/// PostgreSQL another worker may hold it locked): no busy loop.
const MIN_IDLE: Duration = Duration::from_millis(5);

/// How long busy work waits before it is tried again.
const BUSY_DELAY: std::time::Duration = std::time::Duration::from_millis(500);

impl Worker {
    /// A worker running `handlers` over `store`.
    pub fn new(store: Arc<dyn Store>, handlers: Handlers, config: WorkerConfig) -> Self {
        Self {
            store,
            handlers,
            config,
        }
    }

    /// Runs until `shutdown` fires; the items in flight are finished (or
    /// released) before returning.
    ///
    /// Up to `batch_size` items run at once, each on its own task, and the
    /// worker claims more as soon as slots free: a slow item (a Gateway
    /// ensure in a loaded control cluster) holds one slot, not a whole
    /// batch's worth (head-of-line blocking behind a batch barrier).
    pub async fn run(self, shutdown: CancellationToken) -> WorkerTotals {
        Arc::new(self).run_slots(shutdown).await
    }

    async fn run_slots(self: Arc<Self>, shutdown: CancellationToken) -> WorkerTotals {
        let started = Instant::now();
        let id = self.config.id.clone();
        let slots = self.config.batch_size.max(1);
        tracing::info!(worker = %id, batch = self.config.batch_size, lane = ?self.config.lane, leaseMs = self.config.lease.as_millis() as u64, "worker.started");
        let mut totals = WorkerTotals::default();
        let mut last_health = Instant::now();
        let mut last_recovery: Option<Instant> = None;
        let mut woken = self.store.signals().work.subscribe();
        let mut in_flight = InFlight::default();
        // Heartbeats run in this loop while the handlers run on their own
        // tasks: a heartbeat waiting for a pooled connection delays only
        // claims and settlements here, never the handlers whose queries
        // hold the connections (fault run finding 3).
        let mut heartbeat = tokio::time::interval(self.config.lease / 3);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !shutdown.is_cancelled() {
            // Before looking at the queue: work queued from here on wakes
            // the wait below even if this claim misses it.
            woken.mark_seen();
            // Expired claims of crashed workers go back to pending; checking
            // every half lease keeps recovery within 1.5 leases.
            let recovery_due = match last_recovery {
                None => true,
                Some(t) => self.config.periodic_recovery && t.elapsed() >= self.config.lease / 2,
            };
            if recovery_due {
                last_recovery = Some(Instant::now());
                match self.store.recover_expired_work(self.store.now()).await {
                    Ok(r) if r.requeued + r.failed > 0 => {
                        tracing::warn!(worker = %id, requeued = r.requeued, failed = r.failed, "worker.recovered");
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(worker = %id, error = %e, "worker.error"),
                }
            }
            if last_health.elapsed() >= self.config.health_interval {
                last_health = Instant::now();
                self.log_health(&totals).await;
            }
            // What ends the wait below besides a finished item, a
            // heartbeat or shutdown: `None` when every slot is taken.
            let mut wait: Option<(Duration, bool)> = None;
            let free = slots.saturating_sub(in_flight.len() as u32);
            if free > 0 {
                match self
                    .store
                    .claim_work(
                        &id,
                        free,
                        self.config.lease,
                        self.store.now(),
                        &self.config.lane,
                    )
                    .await
                {
                    Ok(batch) => {
                        let got = batch.len() as u32;
                        if got > 0 {
                            totals.batches += 1;
                            totals.claimed += u64::from(got);
                            if in_flight.is_empty() {
                                // The first heartbeat a third of a lease
                                // after this claim, not at once.
                                heartbeat.reset();
                            }
                            for item in batch {
                                in_flight.spawn(&self, item, &shutdown);
                            }
                        }
                        if got < free {
                            // Nothing more is due now: wait for the next
                            // due item, new work, or a free slot's claim.
                            let (d, recover) = self.idle_wait().await;
                            if recover {
                                last_recovery = None;
                            }
                            wait = Some((d, true));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(worker = %id, error = %e, "worker.error");
                        wait = Some((self.config.poll_interval.min(ERROR_RETRY), false));
                    }
                }
            }
            let (sleep_for, wake_on_work) = wait.unwrap_or((Duration::ZERO, false));
            tokio::select! {
                _ = shutdown.cancelled() => {}
                Some(joined) = in_flight.tasks.join_next_with_id(), if !in_flight.is_empty() => {
                    let finished = in_flight.finished(joined);
                    self.settle_all(finished, &mut totals).await;
                }
                _ = heartbeat.tick(), if !in_flight.is_empty() => {
                    self.heartbeat(&in_flight).await;
                }
                _ = woken.notified(), if wake_on_work => {}
                _ = tokio::time::sleep(sleep_for), if wait.is_some() => {}
            }
        }
        // Graceful stop: the handlers saw `shutdown` and end (a cancelled
        // one is released untouched); their leases stay fresh until then.
        while !in_flight.is_empty() {
            tokio::select! {
                Some(joined) = in_flight.tasks.join_next_with_id() => {
                    let finished = in_flight.finished(joined);
                    self.settle_all(finished, &mut totals).await;
                }
                _ = heartbeat.tick() => self.heartbeat(&in_flight).await,
            }
        }
        tracing::info!(
            worker = %id,
            claimed = totals.claimed,
            completed = totals.completed,
            retried = totals.retried,
            failed = totals.failed,
            elapsedMs = started.elapsed().as_millis() as u64,
            "worker.stopped"
        );
        totals
    }

    /// Extends the leases of the items in flight (and only those).
    async fn heartbeat(&self, in_flight: &InFlight) {
        let ids = in_flight.ids();
        if ids.is_empty() {
            return;
        }
        let until =
            self.store.now() + chrono::Duration::from_std(self.config.lease).unwrap_or_default();
        if let Err(e) = self
            .store
            .heartbeat_work(&self.config.id, &ids, until)
            .await
        {
            tracing::warn!(worker = %self.config.id, error = %e, "worker.error");
        }
    }

    /// How long the idle worker sleeps unless woken: until the next pending
    /// item falls due or the first claim's lease expires, at most the
    /// safety poll. The flag says the wait ends at a lease expiry, so the
    /// next round recovers expired claims whenever it last did.
    async fn idle_wait(&self) -> (Duration, bool) {
        let safety = self.config.poll_interval;
        let due = match self.store.next_work_due(&self.config.lane).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(worker = %self.config.id, error = %e, "worker.error");
                return (safety.min(ERROR_RETRY), false);
            }
        };
        // Due times and lease expiries are on the database's clock.
        let now = self.store.now();
        let until = |at: chrono::DateTime<Utc>| (at - now).to_std().unwrap_or_default();
        let run = due.next_run_at.map(until);
        // A lease is recoverable once strictly past its expiry (ms clock).
        let lease = due
            .next_lease_expiry
            .map(|at| until(at + chrono::Duration::milliseconds(1)));
        let mut wait = safety;
        let mut recover = false;
        if let Some(d) = run {
            wait = wait.min(d.max(MIN_IDLE));
        }
        if let Some(d) = lease
            && d.max(MIN_IDLE) <= wait
        {
            wait = d.max(MIN_IDLE);
            recover = true;
        }
        (wait, recover)
    }

    async fn log_health(&self, totals: &WorkerTotals) {
        match self.store.work_stats(self.store.now()).await {
            Ok(stats) => tracing::info!(
                worker = %self.config.id,
                pending = stats.pending,
                oldestPendingAgeMs = stats.oldest_pending_age.map_or(0, |d| d.as_millis() as u64),
                completed = totals.completed,
                failed = totals.failed,
                "worker.health"
            ),
            Err(e) => tracing::warn!(worker = %self.config.id, error = %e, "worker.error"),
        }
    }

    /// Settles finished items: retries, failures, deferrals and releases
    /// one by one, the done ones in one complete transaction.
    async fn settle_all(&self, finished: Vec<(WorkItem, Ran)>, totals: &mut WorkerTotals) {
        let now = self.store.now();
        let mut done = Vec::new();
        for (
            item,
            Ran {
                outcome,
                elapsed,
                ended_at,
            },
        ) in finished
        {
            let item = &item;
            let duration_ms = elapsed.as_millis() as u64;
            match outcome {
                Outcome::Done => {
                    done.push(item.id.clone());
                    tracing::info!(worker = %self.config.id, workId = %item.id, kind = %item.kind, attempt = item.attempts, durationMs = duration_ms, "worker.completed");
                }
                Outcome::Retry(error) if item.attempts < item.max_attempts => {
                    let delay = self.config.backoff.random_delay(item.attempts as u32);
                    // The backoff counts from the attempt's end, however
                    // long the settlement waited behind others.
                    let run_at = ended_at + chrono::Duration::from_std(delay).unwrap_or_default();
                    tracing::warn!(worker = %self.config.id, workId = %item.id, kind = %item.kind, attempt = item.attempts, retryInMs = delay.as_millis() as u64, durationMs = duration_ms, error = %error, "worker.error");
                    self.settle(
                        self.store
                            .retry_work(&self.config.id, &item.id, run_at, &error, now)
                            .await,
                        item,
                    );
                    totals.retried += 1;
                }
                Outcome::Retry(error) | Outcome::Fail(error) => {
                    let error = if item.attempts >= item.max_attempts {
                        format!("{error} (gave up after {} attempts)", item.attempts)
                    } else {
                        error
                    };
                    tracing::error!(worker = %self.config.id, workId = %item.id, kind = %item.kind, attempt = item.attempts, durationMs = duration_ms, error = %error, "worker.error");
                    self.settle(
                        self.store
                            .fail_work(&self.config.id, &item.id, &error, now)
                            .await,
                        item,
                    );
                    totals.failed += 1;
                }
                Outcome::Defer(reason) => {
                    let run_at =
                        ended_at + chrono::Duration::from_std(BUSY_DELAY).unwrap_or_default();
                    tracing::info!(worker = %self.config.id, workId = %item.id, kind = %item.kind, attempt = item.attempts, reason = %reason, "worker.deferred");
                    self.settle(
                        self.store
                            .defer_work(&self.config.id, &item.id, run_at, &reason, now)
                            .await,
                        item,
                    );
                }
                Outcome::Release => {
                    // Put back for another worker (or this one after restart).
                    self.settle(
                        self.store
                            .release_work(&self.config.id, &item.id, now)
                            .await,
                        item,
                    );
                }
            }
        }
        if done.is_empty() {
            return;
        }
        match self.store.complete_work(&self.config.id, &done, now).await {
            Ok(n) => {
                totals.completed += n;
                if n < done.len() as u64 {
                    tracing::warn!(worker = %self.config.id, lost = done.len() as u64 - n, "worker.lease_lost");
                }
            }
            Err(e) => tracing::warn!(worker = %self.config.id, error = %e, "worker.error"),
        }
    }

    fn settle(&self, result: Result<bool, StoreError>, item: &WorkItem) {
        match result {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(worker = %self.config.id, workId = %item.id, "worker.lease_lost")
            }
            Err(e) => {
                tracing::warn!(worker = %self.config.id, workId = %item.id, error = %e, "worker.error")
            }
        }
    }

    async fn run_one(&self, item: &WorkItem, shutdown: &CancellationToken) -> Ran {
        let started = Instant::now();
        let outcome = match self.handlers.0.get(&item.kind) {
            None => Outcome::Fail(format!("no handler for work kind {:?}", item.kind)),
            Some(handler) => match self.recheck(item, handler.required_action()).await {
                Err(WorkError::Busy(e)) => Outcome::Retry(e),
                Err(e @ WorkError::Retryable { .. }) => Outcome::Retry(e.record()),
                Err(e) => Outcome::Fail(e.record()),
                Ok(()) => match handler.handle(self.store.as_ref(), item, shutdown).await {
                    Ok(()) => Outcome::Done,
                    Err(e @ WorkError::Retryable { .. }) => Outcome::Retry(e.record()),
                    Err(e @ WorkError::Permanent { .. }) => Outcome::Fail(e.record()),
                    Err(WorkError::Cancelled) => Outcome::Release,
                    Err(WorkError::Busy(e)) => Outcome::Defer(e),
                },
            },
        };
        Ran {
            outcome,
            elapsed: started.elapsed(),
            ended_at: Utc::now(),
        }
    }

    /// Before any effect: the requesting token must still be valid and
    /// allowed, and the namespace the item acts in must still exist.
    async fn recheck(&self, item: &WorkItem, action: Action) -> Result<(), WorkError> {
        let namespace = match &item.namespace_id {
            Some(ns_id) => match self.store.get_namespace_by_id(ns_id).await {
                Ok(ns) => Some(ns.name),
                Err(StoreError::NotFound { .. }) => {
                    return Err(WorkError::permanent(format!(
                        "ownership check failed: namespace {ns_id} no longer exists"
                    )));
                }
                Err(e) => return Err(WorkError::from_store(e)),
            },
            None => None,
        };
        let Some(token_id) = &item.requested_by else {
            return Ok(()); // made by the hub itself
        };
        match recheck_token(self.store.as_ref(), token_id, action, namespace.as_deref()).await {
            Ok(None) => Ok(()),
            Ok(Some(reason)) => Err(WorkError::permanent(format!(
                "authorization re-check failed: {reason}"
            ))),
            Err(e) => Err(WorkError::from_store(e)),
        }
    }
}

/// Whether the token `token_id` may still do `action` in `namespace`:
/// `None` when it may, otherwise why not (missing, revoked, expired, or its
/// role no longer allows it).
pub async fn recheck_token(
    store: &dyn Store,
    token_id: &str,
    action: Action,
    namespace: Option<&str>,
) -> Result<Option<String>, StoreError> {
    let token = match store.get_token(token_id).await {
        Ok(t) => t,
        Err(StoreError::NotFound { .. }) => {
            return Ok(Some("the requesting token no longer exists".into()));
        }
        Err(e) => return Err(e),
    };
    if token.revoked_at.is_some() || token.expires_at.is_some_and(|at| at <= Utc::now()) {
        return Ok(Some(format!(
            "token {:?} is revoked or expired",
            token.name
        )));
    }
    Ok(match Principal::from(token).permits(action, namespace) {
        Decision::Allow => None,
        Decision::Deny(reason) => Some(reason),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that prints its cause too (as some libraries' do).
    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Loud(#[source] std::io::Error);

    #[test]
    fn a_record_names_each_cause_once() {
        let io = || std::io::Error::other("disk full");
        let err = WorkError::retryable_because("gateway stop", io());
        assert_eq!(err.to_string(), "gateway stop", "the context alone");
        assert_eq!(err.record(), "gateway stop: disk full");
        let loud = WorkError::permanent_because("encoding", Loud(io()));
        assert_eq!(loud.record(), "encoding: outer: disk full");
        assert!(
            std::error::Error::source(&loud).is_some_and(|c| c.is::<Loud>()),
            "the cause stays an error"
        );
        assert_eq!(WorkError::permanent("bad").record(), "bad");
    }
}
