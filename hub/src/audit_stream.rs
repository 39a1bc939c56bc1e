//! The audit log as a stream, resumable by cursor, to feed a SIEM (issue
//! 36, part 4).
//!
//! The log is durable and never trimmed, so unlike the watch feed no ring
//! or cut-off is needed: each stream reads the store from its cursor, in
//! pages, and a slow client only slows its own reader (its buffer is
//! bounded, and the reader waits for room). What the stream needs is an
//! order in which nothing committed later can land behind a cursor already
//! passed; the store gives it by stamping committed rows with cursors
//! ([`Store::sequence_audit`]). One sequencer task per hub stamps on every
//! local commit's `audit` signal and on a safety poll (commits by other
//! replicas and by `clawfed-hub token create`), then tells the streams the
//! new head.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::model::AuditEvent;
use crate::store::Store;
use crate::watch::{TokenGuard, WatchSettings};

/// Events stamped, and read per page, per store query.
const PAGE: i64 = 512;

/// Why a stream cannot start at the cursor asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditCursorError {
    #[error("cursor must be 0 or more, got {0}")]
    Negative(i64),
    /// The cursor was never given out: the hub's store was replaced (a
    /// restore, a new database).
    #[error(
        "cursor {cursor} is ahead of the audit log (newest event {head}): the hub's store was \
         replaced; stream from 0, or without a cursor"
    )]
    Ahead { cursor: i64, head: i64 },
}

/// The cursor a stream starts after: without one, the newest (only what
/// happens from now on); `0`, the whole log; `N`, the events after N.
pub fn start_after(cursor: Option<i64>, head: i64) -> Result<i64, AuditCursorError> {
    match cursor {
        None => Ok(head),
        Some(c) if c < 0 => Err(AuditCursorError::Negative(c)),
        Some(c) if c > head => Err(AuditCursorError::Ahead { cursor: c, head }),
        Some(c) => Ok(c),
    }
}

/// Which audit events a caller sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditScope {
    /// One tenant's events only (`None`: every namespace's, and the
    /// installation's own).
    pub namespace: Option<String>,
    /// Only events at or after this time: a tenant re-created under an old
    /// name does not see the old one's events.
    pub since: Option<DateTime<Utc>>,
}

impl AuditScope {
    fn sees(&self, event: &AuditEvent) -> bool {
        self.since.is_none_or(|since| event.at >= since)
    }
}

/// What a stream yields.
#[derive(Debug, Clone)]
pub enum AuditFrame {
    Event(AuditEvent),
    /// The last frame: the caller's token was revoked or expired (why).
    Unauthenticated(String),
    /// The last frame: the store failed; resume from the last cursor.
    Unavailable(String),
}

/// What the audit streams cost: the store reads they make, and how many
/// are open.
#[derive(Debug, Clone, Default)]
pub struct AuditStreamMetrics {
    reads: Counter,
    open: Gauge,
}

impl AuditStreamMetrics {
    /// Registers `occ_audit_stream_reads_total` and `occ_audit_streams`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "occ_audit_stream_reads",
            "Pages the audit streams read from the store",
            metrics.reads.clone(),
        );
        registry.register(
            "occ_audit_streams",
            "Audit streams open",
            metrics.open.clone(),
        );
        metrics
    }
}

/// Counts a stream as open while it lives.
struct OpenStream(Gauge);

impl OpenStream {
    fn new(gauge: &Gauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The hub's audit sequencer and the head it last stamped.
pub struct AuditFeed {
    store: Arc<dyn Store>,
    head: watch::Sender<i64>,
    metrics: AuditStreamMetrics,
    buffer: usize,
    token_recheck: Duration,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for AuditFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditFeed")
            .field("head", &*self.head.borrow())
            .finish_non_exhaustive()
    }
}

impl AuditFeed {
    /// Starts the sequencer (ending on `shutdown`). The stream settings are
    /// the watch's: its buffer per stream, safety poll and token re-check.
    pub fn start(
        store: Arc<dyn Store>,
        settings: &WatchSettings,
        metrics: AuditStreamMetrics,
        shutdown: CancellationToken,
        tasks: &mut JoinSet<()>,
    ) -> Arc<Self> {
        let feed = Arc::new(Self {
            store,
            head: watch::channel(0).0,
            metrics,
            buffer: settings.buffer_events,
            token_recheck: Duration::from_millis(settings.token_recheck_ms),
            shutdown,
        });
        let waiter = feed.store.signals().audit.subscribe();
        let poll = Duration::from_millis(settings.safety_poll_ms);
        tasks.spawn(
            feed.clone()
                .sequence(waiter, poll)
                .instrument(tracing::info_span!("audit.sequencer")),
        );
        feed
    }

    /// How often open streams re-check their caller's token.
    pub fn token_recheck(&self) -> Duration {
        self.token_recheck
    }

    /// Stamps what was committed, on each signal and each `poll`.
    async fn sequence(self: Arc<Self>, mut waiter: crate::wake::Waiter, poll: Duration) {
        loop {
            // Marked before the store is read: a commit after the read
            // wakes the next wait at once.
            waiter.mark_seen();
            match self.stamp().await {
                Ok(done) => {
                    if done.stamped == PAGE as u64 {
                        continue;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "audit.sequence_error"),
            }
            tokio::select! {
                _ = waiter.notified() => {}
                _ = tokio::time::sleep(poll) => {}
                _ = self.shutdown.cancelled() => break,
            }
        }
    }

    /// The newest cursor given out, stamping what is committed first (so
    /// a stream opened right after a write can start at or before it).
    pub async fn head(&self) -> crate::store::Result<i64> {
        Ok(self.stamp().await?.head)
    }

    /// Stamps a page of what was committed, then tells the streams the
    /// head when it moved.
    async fn stamp(&self) -> crate::store::Result<crate::store::AuditSequenced> {
        let done = self.store.sequence_audit(PAGE).await?;
        self.head.send_if_modified(|head| {
            let moved = done.head > *head;
            *head = (*head).max(done.head);
            moved
        });
        Ok(done)
    }

    /// A stream of the events after `after` that `scope` sees; with
    /// `follow` false it ends once it has caught up with the log.
    pub fn open(
        self: &Arc<Self>,
        scope: AuditScope,
        after: i64,
        follow: bool,
    ) -> AuditSubscription {
        let (tx, frames) = mpsc::channel(self.buffer);
        let reader = Reader {
            feed: self.clone(),
            scope,
            last: after,
            tx,
        };
        let span = tracing::info_span!("audit.stream", after, follow);
        tokio::spawn(reader.run(follow).instrument(span));
        AuditSubscription {
            frames,
            after,
            guard: None,
            ended: false,
        }
    }
}

/// One stream's reader.
struct Reader {
    feed: Arc<AuditFeed>,
    scope: AuditScope,
    /// The cursor of the last event passed (delivered or not in scope).
    last: i64,
    tx: mpsc::Sender<AuditFrame>,
}

impl Reader {
    async fn run(mut self, follow: bool) {
        let _open = OpenStream::new(&self.feed.metrics.open);
        let mut head = self.feed.head.subscribe();
        loop {
            if self.tx.is_closed() || self.feed.shutdown.is_cancelled() {
                return;
            }
            // Stamped and committed before the read below, so every event
            // up to it is in what the read can see.
            let seen = *head.borrow_and_update();
            self.feed.metrics.reads.inc();
            let page = match self
                .feed
                .store
                .audit_after(self.last, self.scope.namespace.as_deref(), PAGE)
                .await
            {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(error = %e, "audit.stream_error");
                    let _ = self
                        .tx
                        .send(AuditFrame::Unavailable(format!(
                            "reading the audit log failed: {e}; resume from cursor {}",
                            self.last
                        )))
                        .await;
                    return;
                }
            };
            let full = page.len() as i64 == PAGE;
            for event in page {
                self.last = event.cursor.unwrap_or(self.last);
                if self.scope.sees(&event) && self.tx.send(AuditFrame::Event(event)).await.is_err()
                {
                    return; // the client went away
                }
            }
            if full {
                continue;
            }
            // Every event up to `seen` this stream reads was in the page:
            // passing the rest (other tenants') keeps a tenant's stream from
            // reading again for each of theirs, for good.
            self.last = self.last.max(seen);
            if !follow {
                return;
            }
            // Caught up: wait until the sequencer stamps past what was
            // read (a head already past it reads again at once).
            while *head.borrow_and_update() <= self.last {
                tokio::select! {
                    changed = head.changed() => if changed.is_err() { return },
                    _ = self.tx.closed() => return,
                    _ = self.feed.shutdown.cancelled() => return,
                }
            }
        }
    }
}

/// A caller's stream: the events in cursor order, then possibly a last
/// `unauthenticated` or `unavailable` frame. Dropping it stops its reader.
pub struct AuditSubscription {
    frames: mpsc::Receiver<AuditFrame>,
    after: i64,
    guard: Option<TokenGuard>,
    ended: bool,
}

impl std::fmt::Debug for AuditSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditSubscription")
            .field("guarded", &self.guard.is_some())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

/// The response header (and gRPC metadata) naming the cursor a stream
/// starts after: a client that opened "from now on" resumes from it if the
/// stream breaks before its first event.
pub const AFTER_HEADER: &str = "clawfed-audit-after";

impl AuditSubscription {
    /// The cursor the stream starts after.
    pub fn after(&self) -> i64 {
        self.after
    }

    /// Ends the stream with [`AuditFrame::Unauthenticated`] once `guard`
    /// resolves (the caller's token was revoked or expired).
    pub fn until_invalid(mut self, guard: TokenGuard) -> Self {
        self.guard = Some(guard);
        self
    }

    /// The next frame; `None` when the stream ended.
    pub async fn next(&mut self) -> Option<AuditFrame> {
        if self.ended {
            return None;
        }
        let frame = match self.guard.as_mut() {
            Some(guard) => tokio::select! {
                // A revoked token gets nothing more, however much is buffered.
                biased;
                reason = guard => Some(AuditFrame::Unauthenticated(reason)),
                frame = self.frames.recv() => frame,
            },
            None => self.frames.recv().await,
        };
        if !matches!(frame, Some(AuditFrame::Event(_))) {
            self.ended = true;
        }
        frame
    }

    /// As a `futures` stream.
    pub fn into_stream(self) -> impl futures::Stream<Item = AuditFrame> + Send + 'static {
        futures::stream::unfold(self, |mut s| async move { s.next().await.map(|f| (f, s)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_starts_after_its_cursor_or_at_the_head() {
        assert_eq!(start_after(None, 7), Ok(7));
        assert_eq!(start_after(Some(0), 7), Ok(0));
        assert_eq!(start_after(Some(7), 7), Ok(7));
        assert_eq!(start_after(Some(3), 7), Ok(3));
        assert_eq!(
            start_after(Some(-1), 7),
            Err(AuditCursorError::Negative(-1))
        );
        assert_eq!(
            start_after(Some(8), 7),
            Err(AuditCursorError::Ahead { cursor: 8, head: 7 })
        );
    }

    #[test]
    fn a_tenant_sees_only_events_of_its_current_incarnation() {
        let at = |s: i64| DateTime::from_timestamp(s, 0).unwrap();
        let event = |s| AuditEvent {
            id: 1,
            cursor: Some(1),
            at: at(s),
            actor: "token:a".into(),
            action: "agent.create".into(),
            namespace: Some("a".into()),
            target: "agents/x".into(),
            result: "ok".into(),
            detail: None,
        };
        let scope = AuditScope {
            namespace: Some("a".into()),
            since: Some(at(100)),
        };
        assert!(!scope.sees(&event(99)));
        assert!(scope.sees(&event(100)));
        let all = AuditScope {
            namespace: None,
            since: None,
        };
        assert!(all.sees(&event(1)));
    }
}
