//! The watch API's in-process fan-out (issue 15).
//!
//! The store keeps the durable, ordered event log; this room streams it.
//! One tail task per hub reads events appended after the last one it saw,
//! woken by the store's `events` signal (commits in this process) or by a
//! slow safety poll (commits by other replicas), and broadcasts them over
//! one bounded ring shared by every stream. Each stream has its own task:
//! it catches up from the store from its cursor, then follows the ring,
//! and falls back to the store whenever the ring skipped ahead of it (it
//! lagged, or events arrived out of reach), so a stream never has a gap
//! or a duplicate. Its output is a bounded buffer: a consumer that leaves
//! it full for `slowConsumerMs` is cut off with a final `relist` event, so
//! no client can make the hub hold more than `bufferEvents` for it.
//!
//! Scoping (which events a caller sees) is decided per event by [`Scope`];
//! which cursor a stream starts after, by [`start_after`]. Both are pure
//! apart from the tenant's placed-cluster lookup.
//!
//! Every stream of one event shares one [`SharedEvent`], which encodes the
//! event once (SSE data, gRPC body) for all of them: with a thousand
//! watchers, encoding per stream was most of the hub's work per event.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::model::event::{RelistEvent, RelistReason, WatchEvent};
use crate::store::{EventBounds, Store};

/// Events read from the store per query.
const PAGE: i64 = 512;

/// `watch`: the event log's bound and the streams' limits.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
// Every field is optional: a partial section keeps the other defaults.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WatchSettings {
    /// Events the log keeps (the newest); older ones are trimmed.
    pub retention_events: i64,
    /// How often the log is trimmed.
    pub trim_interval_seconds: u64,
    /// Events buffered per stream for its client.
    pub buffer_events: usize,
    /// A stream whose buffer stays full this long is cut off (`relist`).
    pub slow_consumer_ms: u64,
    /// Events the shared in-memory ring holds for streams that follow live.
    pub ring_events: usize,
    /// How often the tail looks for events other hub replicas wrote.
    pub safety_poll_ms: u64,
    /// How often an open stream re-checks its caller's token (and at the
    /// token's expiry): a revoked or expired token's stream ends with an
    /// `unauthenticated` frame.
    pub token_recheck_ms: u64,
    /// How long the tail gathers commits before it reads and passes them
    /// on as one burst (0: at once). Each stream then wakes and writes to
    /// its client once per burst instead of once per event: at a thousand
    /// events a second and a thousand streams, the difference between a
    /// million wake-ups and socket writes a second and a hundred thousand.
    pub batch_ms: u64,
}

impl Default for WatchSettings {
    fn default() -> Self {
        Self {
            retention_events: 100_000,
            trim_interval_seconds: 60,
            buffer_events: 256,
            slow_consumer_ms: 2_000,
            ring_events: 4_096,
            safety_poll_ms: 2_000,
            token_recheck_ms: 5_000,
            batch_ms: 10,
        }
    }
}

impl WatchSettings {
    /// The first invalid field and why.
    pub fn invalid(&self) -> Option<(&'static str, &'static str)> {
        if self.retention_events < 1 {
            return Some(("watch.retentionEvents", "must be at least 1"));
        }
        if self.trim_interval_seconds == 0 {
            return Some(("watch.trimIntervalSeconds", "must be at least 1"));
        }
        if !(1..=65_536).contains(&self.buffer_events) {
            return Some(("watch.bufferEvents", "must be between 1 and 65536"));
        }
        if self.slow_consumer_ms == 0 {
            return Some(("watch.slowConsumerMs", "must be at least 1"));
        }
        if !(16..=1_048_576).contains(&self.ring_events) {
            return Some(("watch.ringEvents", "must be between 16 and 1048576"));
        }
        if self.safety_poll_ms == 0 {
            return Some(("watch.safetyPollMs", "must be at least 1"));
        }
        if self.batch_ms > 1_000 {
            return Some(("watch.batchMs", "must be between 0 and 1000"));
        }
        if !(10..=300_000).contains(&self.token_recheck_ms) {
            return Some(("watch.tokenRecheckMs", "must be between 10 and 300000"));
        }
        None
    }
}

/// Why a stream cannot start at the cursor asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    /// A negative cursor.
    #[error("cursor must be 0 or more, got {0}")]
    Negative(i64),
    /// Events after the cursor were trimmed: the client missed them.
    #[error(
        "cursor {cursor} is older than the oldest kept event {oldest}: events after it were \
         trimmed; re-list, then watch without a cursor"
    )]
    TooOld { cursor: i64, oldest: i64 },
    /// The cursor was never given out by this log (it was reset).
    #[error(
        "cursor {cursor} is ahead of the log (newest event {head}): the hub's event log was \
         reset; re-list, then watch without a cursor"
    )]
    Ahead { cursor: i64, head: i64 },
}

/// The cursor a stream starts after: without one, the newest event (only
/// what happens from now on); `0`, everything kept; `N`, the events after
/// N, which must all still be kept.
pub fn start_after(cursor: Option<i64>, bounds: EventBounds) -> Result<i64, CursorError> {
    let Some(cursor) = cursor else {
        return Ok(bounds.head);
    };
    if cursor < 0 {
        return Err(CursorError::Negative(cursor));
    }
    if cursor == 0 {
        return Ok(0);
    }
    if cursor > bounds.head {
        return Err(CursorError::Ahead {
            cursor,
            head: bounds.head,
        });
    }
    // Event `cursor + 1` must be kept (or not exist yet).
    match bounds.oldest {
        Some(oldest) if cursor + 1 < oldest => Err(CursorError::TooOld { cursor, oldest }),
        // Nothing kept although events were given out: all trimmed.
        None if cursor < bounds.head => Err(CursorError::TooOld {
            cursor,
            oldest: bounds.head + 1,
        }),
        _ => Ok(cursor),
    }
}

/// Which events a caller sees.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Installation admins: every event.
    All,
    /// A tenant: its own namespace's events, and events of the clusters
    /// its revisions are placed on.
    Tenant {
        namespace: String,
        namespace_id: String,
        /// The clusters its work runs on, as last looked up.
        clusters: HashSet<String>,
    },
}

impl Scope {
    /// A tenant's scope, knowing the clusters its revisions are placed on
    /// when the stream opens.
    pub fn tenant(
        namespace: String,
        namespace_id: String,
        placed: impl IntoIterator<Item = String>,
    ) -> Self {
        Self::Tenant {
            namespace,
            namespace_id,
            clusters: placed.into_iter().collect(),
        }
    }

    /// Whether the caller sees `event`, from memory: no store read per
    /// event (a failover's thousands of cluster events, times every tenant
    /// stream, would each have been one). A cluster the tenant's work is
    /// placed on later is learnt from the tenant's own events, which name
    /// their revision's cluster (a revision's phase event is written in the
    /// transaction that changes it).
    pub fn sees(&mut self, event: &WatchEvent) -> bool {
        let Self::Tenant {
            namespace_id,
            clusters,
            ..
        } = self
        else {
            return true;
        };
        if let Some(id) = &event.namespace_id {
            let own = id == namespace_id;
            if own && let Some(cluster) = &event.cluster {
                clusters.insert(cluster.clone());
            }
            return own;
        }
        event
            .cluster
            .as_ref()
            .is_some_and(|cluster| clusters.contains(cluster))
    }
}

/// An event as the streams pass it, with its encodings made once for all.
#[derive(Debug)]
pub struct SharedEvent {
    event: WatchEvent,
    json: OnceLock<String>,
    body_json: OnceLock<String>,
    at: OnceLock<String>,
}

impl SharedEvent {
    pub fn new(event: WatchEvent) -> Self {
        Self {
            event,
            json: OnceLock::new(),
            body_json: OnceLock::new(),
            at: OnceLock::new(),
        }
    }

    /// The event as JSON (SSE `data`).
    pub fn json(&self) -> &str {
        // Serializing these types cannot fail; empty if it did.
        self.json
            .get_or_init(|| serde_json::to_string(&self.event).unwrap_or_default())
    }

    /// The body alone as JSON (gRPC `body_json`).
    pub fn body_json(&self) -> &str {
        self.body_json
            .get_or_init(|| self.event.body.body_json().to_string())
    }

    /// The event's time, RFC 3339 (gRPC `at`).
    pub fn at_rfc3339(&self) -> &str {
        self.at.get_or_init(|| self.event.at.to_rfc3339())
    }
}

impl std::ops::Deref for SharedEvent {
    type Target = WatchEvent;
    fn deref(&self) -> &WatchEvent {
        &self.event
    }
}

impl serde::Serialize for SharedEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.event.serialize(s)
    }
}

/// What a stream yields.
#[derive(Debug, Clone)]
pub enum Frame {
    Event(Arc<SharedEvent>),
    /// The last frame: the client must re-list.
    Relist(RelistEvent),
    /// The last frame: the caller's token was revoked or expired (why).
    Unauthenticated(String),
}

/// Resolves, with the reason, once the caller's token stops being valid.
pub type TokenGuard = std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>;

/// A caller's stream: the buffered events, then possibly a terminal
/// `relist`, or an `unauthenticated` frame when its token stops being
/// valid. Dropping it stops its task.
pub struct Subscription {
    events: mpsc::Receiver<Arc<SharedEvent>>,
    end: Option<oneshot::Receiver<RelistEvent>>,
    guard: Option<TokenGuard>,
    ended: bool,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("guarded", &self.guard.is_some())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl Subscription {
    /// Ends the stream with [`Frame::Unauthenticated`] once `guard`
    /// resolves (the caller's token was revoked or expired).
    pub fn until_invalid(mut self, guard: TokenGuard) -> Self {
        self.guard = Some(guard);
        self
    }

    /// The next frame; `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Frame> {
        if self.ended {
            return None;
        }
        let event = match self.guard.as_mut() {
            Some(guard) => tokio::select! {
                // A revoked token gets nothing more, however much is buffered.
                biased;
                reason = guard => {
                    self.ended = true;
                    return Some(Frame::Unauthenticated(reason));
                }
                event = self.events.recv() => event,
            },
            None => self.events.recv().await,
        };
        if let Some(event) = event {
            return Some(Frame::Event(event));
        }
        self.ended = true;
        let end = self.end.take()?;
        end.await.ok().map(Frame::Relist)
    }

    /// As a `futures` stream.
    pub fn into_stream(self) -> impl futures::Stream<Item = Frame> + Send + 'static {
        futures::stream::unfold(self, |mut s| async move { s.next().await.map(|f| (f, s)) })
    }
}

/// The hub's event feed: the tail task and the shared ring.
pub struct Feed {
    store: Arc<dyn Store>,
    ring: broadcast::Sender<Arc<SharedEvent>>,
    settings: WatchSettings,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("backend", &self.store.backend())
            .field("settings", &self.settings)
            .finish()
    }
}

impl Feed {
    /// How often open streams re-check their caller's token.
    pub fn token_recheck(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.settings.token_recheck_ms)
    }

    /// Starts the tail and the trim task (ending on `shutdown`). The tail's
    /// starting point (the log's head) is read before this returns, so
    /// before any stream opens: read later, an event committed between a
    /// stream's read of the store and the tail's first read would reach
    /// neither, and a stream with nothing after it would wait for good (a
    /// watch test hung on PostgreSQL). If the store cannot answer now, the
    /// tail reads the head when it can.
    pub async fn start(
        store: Arc<dyn Store>,
        settings: WatchSettings,
        shutdown: CancellationToken,
        tasks: &mut JoinSet<()>,
    ) -> Arc<Self> {
        let (ring, _) = broadcast::channel(settings.ring_events);
        let feed = Arc::new(Self {
            store,
            ring,
            settings,
            shutdown,
        });
        // Subscribed before the head is read: a commit after the read
        // wakes the tail.
        let waiter = feed.store.signals().events.subscribe();
        let head = match feed.store.event_bounds().await {
            Ok(b) => Some(b.head),
            Err(e) => {
                tracing::warn!(error = %e, "watch.tail_error");
                None
            }
        };
        tasks.spawn(
            feed.clone()
                .tail(waiter, head)
                .instrument(tracing::info_span!("watch.tail")),
        );
        tasks.spawn(
            feed.clone()
                .trim()
                .instrument(tracing::info_span!("watch.trim")),
        );
        feed
    }

    /// Reads what is appended to the log after `head` and broadcasts it, in
    /// order.
    async fn tail(self: Arc<Self>, mut waiter: crate::wake::Waiter, head: Option<i64>) {
        let poll = Duration::from_millis(self.settings.safety_poll_ms);
        let gather = Duration::from_millis(self.settings.batch_ms);
        let mut last = head;
        tracing::info!("watch.tail_started");
        loop {
            waiter.mark_seen();
            let caught_up = match last {
                // Streams read history from the store; the ring only
                // carries what comes after the tail started.
                None => match self.store.event_bounds().await {
                    Ok(b) => {
                        last = Some(b.head);
                        true
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "watch.tail_error");
                        true
                    }
                },
                Some(after) => match self.store.events_after(after, PAGE).await {
                    Ok(batch) => {
                        let full = batch.len() as i64 == PAGE;
                        for event in batch {
                            last = Some(event.cursor);
                            // No receiver is fine: nobody follows live now.
                            let _ = self.ring.send(Arc::new(SharedEvent::new(event)));
                        }
                        !full
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "watch.tail_error");
                        true
                    }
                },
            };
            if !caught_up {
                continue;
            }
            tokio::select! {
                _ = waiter.notified() => {}
                _ = tokio::time::sleep(poll) => {}
                _ = self.shutdown.cancelled() => break,
            }
            if !gather.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(gather) => {}
                    _ = self.shutdown.cancelled() => break,
                }
            }
        }
        tracing::info!("watch.tail_stopped");
    }

    /// Keeps the newest `retentionEvents` events.
    async fn trim(self: Arc<Self>) {
        let every = Duration::from_secs(self.settings.trim_interval_seconds);
        loop {
            match self.store.trim_events(self.settings.retention_events).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(trimmed = n, "watch.trimmed"),
                Err(e) => tracing::warn!(error = %e, "watch.trim_error"),
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = self.shutdown.cancelled() => break,
            }
        }
    }

    /// A stream of the events after `after` that `scope` sees; with
    /// `follow` false it ends once it has caught up with the log.
    pub fn open(self: &Arc<Self>, scope: Scope, after: i64, follow: bool) -> Subscription {
        let (tx, events) = mpsc::channel(self.settings.buffer_events);
        let (end_tx, end) = oneshot::channel();
        // Subscribed before the first read of the store, so nothing
        // committed after that read can be missed.
        let live = self.ring.subscribe();
        let stream = Stream {
            feed: self.clone(),
            scope,
            last: after,
            tx,
        };
        let span = tracing::info_span!("watch.stream", after, follow);
        tokio::spawn(stream.run(live, follow, end_tx).instrument(span));
        Subscription {
            events,
            end: Some(end),
            guard: None,
            ended: false,
        }
    }
}

/// One stream's producer.
struct Stream {
    feed: Arc<Feed>,
    scope: Scope,
    /// The cursor of the last event passed (delivered or not visible).
    last: i64,
    tx: mpsc::Sender<Arc<SharedEvent>>,
}

/// Why a stream's producer stops.
enum Stop {
    /// The client went away, the hub shuts down, or the store failed (the
    /// client resumes from its cursor).
    Quiet,
    /// The client did not keep up.
    Slow,
}

impl Stream {
    async fn run(
        mut self,
        mut live: broadcast::Receiver<Arc<SharedEvent>>,
        follow: bool,
        end: oneshot::Sender<RelistEvent>,
    ) {
        let stop = self.produce(&mut live, follow).await;
        if let Err(Stop::Slow) = stop {
            tracing::info!(cursor = self.last, "watch.slow_consumer_cut_off");
            let _ = end.send(RelistEvent {
                reason: RelistReason::SlowConsumer,
                message: format!(
                    "the stream's buffer stayed full for {} ms: re-list, or watch again from \
                     the cursor of the last event received",
                    self.feed.settings.slow_consumer_ms
                ),
            });
        }
    }

    async fn produce(
        &mut self,
        live: &mut broadcast::Receiver<Arc<SharedEvent>>,
        follow: bool,
    ) -> Result<(), Stop> {
        loop {
            self.catch_up().await?;
            if !follow {
                return Ok(());
            }
            // Live: the ring, while it continues exactly after `last`.
            loop {
                // A burst is taken without waiting; only an empty ring
                // waits (with the client's and the hub's ends).
                let received = match live.try_recv() {
                    Ok(event) => Ok(event),
                    Err(broadcast::error::TryRecvError::Lagged(n)) => {
                        Err(broadcast::error::RecvError::Lagged(n))
                    }
                    Err(broadcast::error::TryRecvError::Closed) => {
                        Err(broadcast::error::RecvError::Closed)
                    }
                    Err(broadcast::error::TryRecvError::Empty) => tokio::select! {
                        r = live.recv() => r,
                        _ = self.tx.closed() => return Err(Stop::Quiet),
                        _ = self.feed.shutdown.cancelled() => return Err(Stop::Quiet),
                    },
                };
                match received {
                    Ok(event) if event.cursor <= self.last => {}
                    Ok(event) if event.cursor == self.last + 1 => self.pass(event).await?,
                    // Ahead of `last` (the ring began after it) or lagged:
                    // the store has what was skipped.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => return Err(Stop::Quiet),
                }
            }
        }
    }

    /// Passes everything the store has after `last`.
    async fn catch_up(&mut self) -> Result<(), Stop> {
        loop {
            let page = match self.feed.store.events_after(self.last, PAGE).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(error = %e, "watch.read_error");
                    return Err(Stop::Quiet);
                }
            };
            let n = page.len() as i64;
            for event in page {
                self.pass(Arc::new(SharedEvent::new(event))).await?;
            }
            if n < PAGE {
                return Ok(());
            }
        }
    }

    /// Delivers `event` when the caller sees it; advances `last` either way.
    async fn pass(&mut self, event: Arc<SharedEvent>) -> Result<(), Stop> {
        self.last = event.cursor;
        if !self.scope.sees(&event) {
            return Ok(());
        }
        // Room in the buffer (the usual case): no timer, no select.
        let event = match self.tx.try_send(event) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(Stop::Quiet),
            Err(mpsc::error::TrySendError::Full(event)) => event,
        };
        let grace = Duration::from_millis(self.feed.settings.slow_consumer_ms);
        tokio::select! {
            sent = tokio::time::timeout(grace, self.tx.send(event)) => match sent {
                Ok(Ok(())) => Ok(()),
                Ok(Err(_)) => Err(Stop::Quiet),
                Err(_) => Err(Stop::Slow),
            },
            _ = self.feed.shutdown.cancelled() => Err(Stop::Quiet),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 31 item 11: scoping is decided from memory. A tenant sees its
    /// own events, and cluster events of the clusters it was placed on when
    /// the stream opened or that its own events named since; nothing else.
    #[test]
    fn a_tenant_scope_learns_its_clusters_from_its_own_events() {
        use crate::model::ConnectionState;
        use crate::model::event::{ClusterEvent, EventBody, WorkFailedEvent, WorkFailureSource};
        let cluster = |name: &str| WatchEvent {
            cursor: 1,
            at: chrono::Utc::now(),
            namespace: None,
            cluster: Some(name.into()),
            namespace_id: None,
            body: EventBody::ClusterOffline(ClusterEvent {
                state: ConnectionState::Offline,
                last_seen: None,
                version: String::new(),
                capabilities: vec![],
                certificate_expires_at: None,
            }),
        };
        let own = |ns_id: &str, cluster: &str| WatchEvent {
            cursor: 2,
            at: chrono::Utc::now(),
            namespace: Some("team".into()),
            cluster: Some(cluster.into()),
            namespace_id: Some(ns_id.into()),
            body: EventBody::WorkFailed(WorkFailedEvent {
                source: WorkFailureSource::Queue,
                work_id: None,
                work_kind: "k".into(),
                target: "t".into(),
                error: "e".into(),
                attempts: None,
            }),
        };
        let mut scope = Scope::tenant("team".into(), "id-1".into(), ["exec-a".to_owned()]);
        assert!(scope.sees(&cluster("exec-a")));
        assert!(!scope.sees(&cluster("exec-b")), "not placed there");
        assert!(!scope.sees(&own("id-2", "exec-b")), "another tenant's");
        assert!(
            !scope.sees(&cluster("exec-b")),
            "another tenant's placement"
        );
        assert!(scope.sees(&own("id-1", "exec-b")), "its own");
        assert!(scope.sees(&cluster("exec-b")), "placed there since");
        assert!(Scope::All.sees(&cluster("exec-z")));
    }

    fn bounds(oldest: Option<i64>, head: i64) -> EventBounds {
        EventBounds { oldest, head }
    }

    #[test]
    fn where_a_stream_starts() {
        // No cursor: from now on.
        assert_eq!(start_after(None, bounds(Some(5), 9)), Ok(9));
        // 0: everything kept, even after trimming.
        assert_eq!(start_after(Some(0), bounds(Some(5), 9)), Ok(0));
        // A kept position, including "just before the oldest".
        assert_eq!(start_after(Some(4), bounds(Some(5), 9)), Ok(4));
        assert_eq!(start_after(Some(9), bounds(Some(5), 9)), Ok(9));
        assert_eq!(start_after(Some(3), bounds(None, 3)), Ok(3));
        assert_eq!(start_after(Some(0), bounds(None, 0)), Ok(0));
        // Events after 3 were trimmed (5 is the oldest): a gap.
        assert_eq!(
            start_after(Some(3), bounds(Some(5), 9)),
            Err(CursorError::TooOld {
                cursor: 3,
                oldest: 5
            })
        );
        assert_eq!(
            start_after(Some(2), bounds(None, 7)),
            Err(CursorError::TooOld {
                cursor: 2,
                oldest: 8
            })
        );
        assert_eq!(
            start_after(Some(10), bounds(Some(5), 9)),
            Err(CursorError::Ahead {
                cursor: 10,
                head: 9
            })
        );
        assert_eq!(
            start_after(Some(-1), bounds(None, 0)),
            Err(CursorError::Negative(-1))
        );
    }

    #[test]
    fn a_shared_event_encodes_as_the_event_itself() {
        use crate::model::event::{EventBody, WorkFailedEvent, WorkFailureSource};
        let event = WatchEvent {
            cursor: 3,
            at: chrono::DateTime::from_timestamp_millis(1_700_000_000_123).unwrap(),
            namespace: Some("team".into()),
            cluster: Some("exec-a".into()),
            namespace_id: Some("ns-1".into()),
            body: EventBody::WorkFailed(WorkFailedEvent {
                source: WorkFailureSource::Spoke,
                work_id: None,
                work_kind: "harness.apply".into(),
                target: "t".into(),
                error: "quota \"pods\" exceeded".into(),
                attempts: None,
            }),
        };
        let shared = SharedEvent::new(event.clone());
        assert_eq!(shared.json(), serde_json::to_string(&event).unwrap());
        assert_eq!(shared.body_json(), event.body.body_json().to_string());
        assert_eq!(shared.at_rfc3339(), event.at.to_rfc3339());
        // Asked again: the same encoding, not a new one.
        assert!(std::ptr::eq(shared.json(), shared.json()));
        assert_eq!(shared.cursor, 3);
    }

    #[test]
    fn settings_are_checked() {
        assert_eq!(WatchSettings::default().invalid(), None);
        let zero = WatchSettings {
            buffer_events: 0,
            ..WatchSettings::default()
        };
        assert_eq!(zero.invalid().map(|(f, _)| f), Some("watch.bufferEvents"));
        let slow = WatchSettings {
            batch_ms: 1_001,
            ..WatchSettings::default()
        };
        assert_eq!(slow.invalid().map(|(f, _)| f), Some("watch.batchMs"));
        let unbatched = WatchSettings {
            batch_ms: 0,
            ..WatchSettings::default()
        };
        assert_eq!(unbatched.invalid(), None);
    }
}
