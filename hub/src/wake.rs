//! In-process wake-ups: the store signals what it committed (work queued or
//! put back, a cluster revoked), and the loops that wait for such changes
//! (the worker, the link's revocation watcher) wake at once instead of
//! polling. Their polls remain only as a slow safety net for writes made by
//! other processes on the same database.
//!
//! A signal is a counter in a `watch` channel: a waiter marks the current
//! value seen *before* it looks at the store, so a change committed between
//! its look and its wait is never missed (the wait returns at once).
//!
//! On PostgreSQL, [`pg`] carries the same signals across replicas: the
//! database NOTIFYs on commit, and each replica's one LISTEN connection
//! raises the signals here.

pub mod pg;

use std::sync::Arc;

use tokio::sync::{broadcast, watch};

/// One kind of change, signalled after it is committed.
#[derive(Debug, Clone)]
pub struct Signal(Arc<watch::Sender<u64>>);

impl Default for Signal {
    fn default() -> Self {
        Self(Arc::new(watch::channel(0).0))
    }
}

impl Signal {
    /// Tells every waiter that the change happened (call after the commit).
    pub fn notify(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A waiter for later notifications.
    pub fn subscribe(&self) -> Waiter {
        Waiter(self.0.subscribe())
    }
}

/// Waits for a [`Signal`].
#[derive(Debug)]
pub struct Waiter(watch::Receiver<u64>);

impl Waiter {
    /// Marks every notification so far as seen; call before looking at the
    /// store, so a change committed after the look wakes the next
    /// [`Waiter::notified`].
    pub fn mark_seen(&mut self) {
        self.0.borrow_and_update();
    }

    /// Completes when a notification came since the last [`Waiter::mark_seen`]
    /// (at once if one already did). Never completes once the signal is
    /// gone, so a timer beside it still ends the wait.
    pub async fn notified(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Whose outbox grew (written by another replica or process).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutboxWake {
    /// The outbox of cluster `id`, up to sequence `head` when the writer
    /// said (older replicas' notifications do not).
    Cluster { id: String, head: Option<i64> },
    /// Any outbox may have grown (notifications may have been missed).
    All,
}

/// Outbox growth, per cluster. Puts in this process wake their session
/// directly; this carries those of other replicas.
#[derive(Debug, Clone)]
pub struct OutboxSignal(broadcast::Sender<OutboxWake>);

impl Default for OutboxSignal {
    fn default() -> Self {
        // A receiver that falls this far behind treats it as `All`.
        Self(broadcast::channel(1024).0)
    }
}

impl OutboxSignal {
    /// Tells every subscriber (none listening is fine).
    pub fn notify(&self, wake: OutboxWake) {
        let _ = self.0.send(wake);
    }

    /// A receiver of later notifications; `Lagged` means "maybe missed".
    pub fn subscribe(&self) -> broadcast::Receiver<OutboxWake> {
        self.0.subscribe()
    }
}

/// The signals a store raises.
#[derive(Debug, Clone, Default)]
pub struct StoreSignals {
    /// Work was queued, or claimed work was put back (retry, defer,
    /// release, recovered lease): a worker may have something to claim.
    pub work: Signal,
    /// A cluster was revoked: its certificates joined the deny-list.
    pub revocations: Signal,
    /// Events were appended to the watch log.
    pub events: Signal,
    /// Audit events were committed: the audit stream stamps and passes
    /// them on.
    pub audit: Signal,
    /// A cluster's outbox grew in another replica (PostgreSQL only).
    pub outbox: OutboxSignal,
}

impl StoreSignals {
    /// Raises every signal: notifications may have been missed (the
    /// LISTEN connection was lost), so every waiter looks once.
    pub fn wake_all(&self) {
        self.work.notify();
        self.revocations.notify();
        self.events.notify();
        self.audit.notify();
        self.outbox.notify(OutboxWake::All);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_notification_between_look_and_wait_is_not_missed() {
        let signal = Signal::default();
        let mut waiter = signal.subscribe();
        waiter.mark_seen();
        // Committed after the waiter looked at the store, before it waits.
        signal.notify();
        tokio::time::timeout(Duration::from_millis(1), waiter.notified())
            .await
            .expect("woken at once");
        // Seen now: the next wait blocks until the next notification.
        waiter.mark_seen();
        assert!(
            tokio::time::timeout(Duration::from_secs(60), waiter.notified())
                .await
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_waiter_is_woken() {
        let signal = Signal::default();
        let mut a = signal.subscribe();
        let mut b = signal.subscribe();
        a.mark_seen();
        b.mark_seen();
        signal.notify();
        for w in [&mut a, &mut b] {
            tokio::time::timeout(Duration::from_millis(1), w.notified())
                .await
                .expect("woken");
        }
    }
}
