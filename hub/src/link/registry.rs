//! Live sessions by cluster. A new session for a cluster replaces the old
//! one (the old stream is closed), so a reconnecting spoke never leaves a
//! stale stream holding its work.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use clawfed_proto::link::v1 as pb;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

/// The session's stream to the spoke.
pub type Outbound = mpsc::Sender<Result<pb::HubMessage, tonic::Status>>;

/// Why a session is being closed: the same reason the spoke is told
/// (`Revoked`, `Replaced`, `ShuttingDown`).
pub use clawfed_proto::link::close::CloseReason;

/// `known_head` after a wake-up that could not name the newest sequence:
/// above any real one, so the session reads.
pub const UNKNOWN_HEAD: i64 = i64::MAX;

/// A session's handles, shared with its stream task.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    pub id: u64,
    pub cluster_id: String,
    pub cluster_name: String,
    /// Cancelled to close the session; `reason` says why.
    pub close: CancellationToken,
    reason: Arc<Mutex<Option<CloseReason>>>,
    /// Notified when the cluster's outbox has new items.
    pub wake: Arc<Notify>,
    /// The newest outbox sequence the wake-ups since the session last
    /// looked say exists ([`UNKNOWN_HEAD`] when one could not say, 0 when
    /// none came): a wake for an item the session already read (a put's
    /// own wake, then its NOTIFY) costs no outbox read.
    pub known_head: Arc<AtomicI64>,
    /// Unix millis of the last message from the spoke.
    pub last_heard_ms: Arc<AtomicI64>,
    /// The session's stream to the spoke, for messages that are not outbox
    /// work (tunnel opens); `None` in unit tests.
    pub outbound: Option<Outbound>,
    /// The fencing epoch the store gave this session (0 until claimed).
    pub epoch: Arc<AtomicI64>,
    /// Where the spoke is told to reconnect when this replica moves the
    /// session to another (balancing).
    redirect: Arc<Mutex<Option<String>>>,
}

impl SessionHandle {
    /// Why the session was closed, if it was.
    pub fn close_reason(&self) -> Option<CloseReason> {
        *self.reason.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The replica this session was moved to, if it was.
    pub fn redirect_url(&self) -> Option<String> {
        self.redirect
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn close_with(&self, reason: CloseReason) {
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
        self.close.cancel();
    }
}

/// The registry of live sessions.
#[derive(Debug, Default)]
pub struct Registry {
    sessions: Mutex<HashMap<String, SessionHandle>>,
    next_id: AtomicU64,
    /// Per cluster, what its tunnels on this replica end on: cancelled
    /// when the cluster is revoked. A tunnel is its own stream and outlives
    /// the session that opened it (replaced by a reconnect or a rotated
    /// certificate, or moved to another replica), so it cannot end with
    /// that session; a revocation reaches it whatever session is current.
    tunnels_revoked: Mutex<HashMap<String, CancellationToken>>,
}

impl Registry {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, SessionHandle>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a session for `cluster_id`, closing any older one.
    pub fn register(
        &self,
        cluster_id: &str,
        cluster_name: &str,
        now_ms: i64,
        outbound: Option<Outbound>,
    ) -> SessionHandle {
        let handle = SessionHandle {
            id: self.next_id.fetch_add(1, Ordering::Relaxed) + 1,
            cluster_id: cluster_id.to_owned(),
            cluster_name: cluster_name.to_owned(),
            close: CancellationToken::new(),
            reason: Arc::new(Mutex::new(None)),
            wake: Arc::new(Notify::new()),
            known_head: Arc::new(AtomicI64::new(0)),
            last_heard_ms: Arc::new(AtomicI64::new(now_ms)),
            outbound,
            epoch: Arc::new(AtomicI64::new(0)),
            redirect: Arc::new(Mutex::new(None)),
        };
        if let Some(old) = self.map().insert(cluster_id.to_owned(), handle.clone()) {
            old.close_with(CloseReason::Replaced);
        }
        handle
    }

    /// Removes the session if it is still the cluster's current one.
    /// Returns whether it was.
    pub fn unregister(&self, handle: &SessionHandle) -> bool {
        let mut map = self.map();
        match map.get(&handle.cluster_id) {
            Some(current) if current.id == handle.id => {
                map.remove(&handle.cluster_id);
                true
            }
            _ => false,
        }
    }

    /// Wakes the cluster's session to send new outbox items, up to
    /// sequence `head` when the waker knows it (`None`: the session reads
    /// whatever is there).
    pub fn wake(&self, cluster_id: &str, head: Option<i64>) {
        if let Some(s) = self.map().get(cluster_id) {
            s.known_head
                .fetch_max(head.unwrap_or(UNKNOWN_HEAD), Ordering::AcqRel);
            s.wake.notify_one();
        }
    }

    /// What the cluster's tunnels opened from now on end on: cancelled by
    /// [`Self::revoke`].
    pub fn tunnel_revocation(&self, cluster_id: &str) -> CancellationToken {
        let mut map = self
            .tunnels_revoked
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let token = map.entry(cluster_id.to_owned()).or_default();
        if token.is_cancelled() {
            // Revoked before and enrolled again: a fresh start.
            *token = CancellationToken::new();
        }
        token.clone()
    }

    /// The cluster is revoked: its session closes (if it has one here) and
    /// every tunnel of it on this replica ends, whichever session opened
    /// it. Returns whether a session was closed.
    pub fn revoke(&self, cluster_id: &str) -> bool {
        if let Some(tunnels) = self
            .tunnels_revoked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(cluster_id)
        {
            tunnels.cancel();
        }
        self.close(cluster_id, CloseReason::Revoked)
    }

    /// Closes the cluster's session.
    pub fn close(&self, cluster_id: &str, reason: CloseReason) -> bool {
        match self.map().get(cluster_id) {
            Some(s) => {
                s.close_with(reason);
                true
            }
            None => false,
        }
    }

    /// Closes every session (shutdown).
    pub fn close_all(&self) {
        for s in self.map().values() {
            s.close_with(CloseReason::ShuttingDown);
        }
    }

    /// Live sessions.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// True when no session is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cluster's live session.
    pub fn get(&self, cluster_id: &str) -> Option<SessionHandle> {
        self.map().get(cluster_id).cloned()
    }

    /// Whether `cluster_id` has a live session.
    pub fn is_connected(&self, cluster_id: &str) -> bool {
        self.map().contains_key(cluster_id)
    }

    /// (cluster id, epoch) of every live session the store recorded.
    pub fn claimed(&self) -> Vec<(String, i64)> {
        self.map()
            .values()
            .map(|s| (s.cluster_id.clone(), s.epoch.load(Ordering::Acquire)))
            .filter(|(_, epoch)| *epoch > 0)
            .collect()
    }

    /// Closes as replaced every session of `claimed` (a snapshot taken
    /// before the store renewed this replica's leases) that is not among
    /// `held` (what the renewal found this replica still holds): a newer
    /// session of its cluster took over, here or on another replica.
    /// Returns the names of the clusters whose session it closed.
    pub fn close_superseded(
        &self,
        claimed: &[(String, i64)],
        held: &std::collections::HashSet<(String, i64)>,
    ) -> Vec<String> {
        let map = self.map();
        claimed
            .iter()
            .filter(|c| !held.contains(*c))
            .filter_map(|(cluster, epoch)| {
                let s = map.get(cluster)?;
                (s.epoch.load(Ordering::Acquire) == *epoch).then(|| {
                    s.close_with(CloseReason::Replaced);
                    s.cluster_name.clone()
                })
            })
            .collect()
    }

    /// Moves up to `targets.len()` live sessions (claimed, not closing),
    /// picked at random, each to its target: the spoke gets a GoAway
    /// naming that address. Returns (cluster name, target) of those moved.
    pub fn redirect(&self, targets: &[String]) -> Vec<(String, String)> {
        use rand::seq::SliceRandom;
        let map = self.map();
        let mut movable: Vec<&SessionHandle> = map
            .values()
            .filter(|s| s.epoch.load(Ordering::Acquire) > 0 && !s.close.is_cancelled())
            .collect();
        movable.shuffle(&mut rand::rng());
        movable
            .into_iter()
            .zip(targets)
            .map(|(s, target)| {
                *s.redirect.lock().unwrap_or_else(|p| p.into_inner()) = Some(target.clone());
                // Not a shutdown of this replica: the session ends with a
                // GoAway, its lease handed off to the target.
                s.close_with(CloseReason::ShuttingDown);
                (s.cluster_name.clone(), target.clone())
            })
            .collect()
    }

    /// (cluster name, last heard unix ms) of every live session.
    pub fn last_heard(&self) -> Vec<(String, i64)> {
        self.map()
            .values()
            .map(|s| {
                (
                    s.cluster_name.clone(),
                    s.last_heard_ms.load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_session_replaces_the_old_one() {
        let r = Registry::default();
        let a = r.register("c1", "one", 0, None);
        let b = r.register("c1", "one", 0, None);
        assert!(a.close.is_cancelled());
        assert_eq!(a.close_reason(), Some(CloseReason::Replaced));
        assert!(!b.close.is_cancelled());
        assert!(
            !r.unregister(&a),
            "the replaced session must not remove its successor"
        );
        assert!(r.is_connected("c1"));
        assert!(r.close("c1", CloseReason::Revoked));
        assert_eq!(b.close_reason(), Some(CloseReason::Revoked));
        assert!(r.unregister(&b));
        assert!(r.is_empty());
    }

    #[test]
    fn wakes_keep_the_newest_head_and_an_unknown_one_forces_a_read() {
        let r = Registry::default();
        let s = r.register("c1", "one", 0, None);
        r.wake("c1", Some(7));
        r.wake("c1", Some(5));
        assert_eq!(s.known_head.swap(0, Ordering::AcqRel), 7);
        r.wake("c1", Some(9));
        r.wake("c1", None);
        assert_eq!(s.known_head.swap(0, Ordering::AcqRel), UNKNOWN_HEAD);
        // No wake since the session looked: nothing to read.
        assert_eq!(s.known_head.load(Ordering::Acquire), 0);
        r.wake("no-session", Some(1));
    }

    #[test]
    fn redirects_move_claimed_live_sessions_only() {
        let r = Registry::default();
        let unclaimed = r.register("c0", "zero", 0, None);
        let mut claimed = Vec::new();
        for (i, name) in ["one", "two", "three"].into_iter().enumerate() {
            let s = r.register(&format!("c{}", i + 1), name, 0, None);
            s.epoch.store(1, Ordering::Release);
            claimed.push(s);
        }
        claimed[2].close_with(CloseReason::Replaced);
        let moved = r.redirect(&["https://b:1".to_owned(), "https://c:1".to_owned()]);
        assert_eq!(moved.len(), 2);
        let targets: Vec<_> = moved.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(targets, ["https://b:1", "https://c:1"]);
        assert!(!unclaimed.close.is_cancelled());
        assert_eq!(unclaimed.redirect_url(), None);
        for s in &claimed[..2] {
            assert_eq!(s.close_reason(), Some(CloseReason::ShuttingDown));
            assert!(s.redirect_url().is_some());
        }
        assert_eq!(claimed[2].close_reason(), Some(CloseReason::Replaced));
        // Nothing left to move.
        assert!(r.redirect(&["https://b:1".to_owned()]).is_empty());
    }

    #[test]
    fn only_sessions_the_store_no_longer_holds_are_superseded() {
        let r = Registry::default();
        let kept = r.register("c1", "one", 0, None);
        kept.epoch.store(3, Ordering::Release);
        let lost = r.register("c2", "two", 0, None);
        lost.epoch.store(7, Ordering::Release);
        // Not yet claimed: not in the snapshot, never closed.
        let fresh = r.register("c3", "three", 0, None);
        let claimed = r.claimed();
        assert_eq!(claimed.len(), 2);
        // Reconnected here after the snapshot: the new session stays.
        let again = r.register("c2", "two", 0, None);
        again.epoch.store(8, Ordering::Release);
        let held = [("c1".to_owned(), 3)].into_iter().collect();
        assert!(r.close_superseded(&claimed, &held).is_empty());
        assert!(!again.close.is_cancelled());

        let claimed = r.claimed();
        let held = [("c1".to_owned(), 3)].into_iter().collect();
        assert_eq!(r.close_superseded(&claimed, &held), ["two"]);
        assert_eq!(again.close_reason(), Some(CloseReason::Replaced));
        assert!(!kept.close.is_cancelled());
        assert!(!fresh.close.is_cancelled());
    }
}
