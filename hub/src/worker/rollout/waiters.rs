//! Passes turned away by a busy Agent lease, woken by the holder in this
//! process as it releases the lease. A Gateway ensure holds the lease for
//! seconds on a loaded control apiserver; a turned-away pass that retried
//! every 200 ms instead ran about 36 times per revision at 200 deploys at
//! once, each a claim, four reads and an insert. A holder in another
//! replica cannot wake them, so each waiting revision also keeps one
//! fallback pass queued (not one per turned-away pass).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A waiting revision: its namespace id and when its fallback pass runs.
#[derive(Debug, Clone)]
struct Waiting {
    namespace_id: String,
    fallback_at: Instant,
}

/// Agent id → revision id → the revision waiting for the Agent's lease.
#[derive(Debug, Default)]
pub(super) struct LeaseWaiters(Mutex<HashMap<String, HashMap<String, Waiting>>>);

impl LeaseWaiters {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Waiting>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Revision `revision_id` (of namespace `namespace_id`) waits for
    /// `agent_id`'s lease. True when the caller is to queue its fallback
    /// pass, `fallback` from now: the revision was not waiting yet, or its
    /// fallback is the pass now turned away.
    pub(super) fn add(
        &self,
        agent_id: &str,
        revision_id: &str,
        namespace_id: &str,
        fallback: Duration,
    ) -> bool {
        let now = Instant::now();
        let mut map = self.map();
        let w = map
            .entry(agent_id.to_owned())
            .or_default()
            .entry(revision_id.to_owned())
            .or_insert_with(|| Waiting {
                namespace_id: namespace_id.to_owned(),
                fallback_at: now,
            });
        if w.fallback_at > now {
            return false;
        }
        w.fallback_at = now + fallback;
        true
    }

    /// Revision `revision_id` got the lease after all.
    pub(super) fn remove(&self, agent_id: &str, revision_id: &str) {
        let mut map = self.map();
        if let Some(revisions) = map.get_mut(agent_id) {
            revisions.remove(revision_id);
            if revisions.is_empty() {
                map.remove(agent_id);
            }
        }
    }

    /// The revisions (id, namespace id) waiting for `agent_id`'s lease,
    /// which its holder has just released.
    pub(super) fn take(&self, agent_id: &str) -> Vec<(String, String)> {
        self.map()
            .remove(agent_id)
            .map(|r| r.into_iter().map(|(id, w)| (id, w.namespace_id)).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::LeaseWaiters;

    const FALLBACK: Duration = Duration::from_secs(60);

    fn w(rev: &str) -> (String, String) {
        (rev.to_owned(), "ns-1".to_owned())
    }

    #[test]
    fn a_release_takes_each_waiting_revision_once_and_only_its_agents() {
        let waiters = LeaseWaiters::default();
        waiters.add("agent-a", "r1", "ns-1", FALLBACK);
        waiters.add("agent-a", "r1", "ns-1", FALLBACK);
        waiters.add("agent-a", "r2", "ns-1", FALLBACK);
        waiters.add("agent-b", "r3", "ns-1", FALLBACK);
        let mut taken = waiters.take("agent-a");
        taken.sort();
        assert_eq!(taken, vec![w("r1"), w("r2")]);
        assert!(waiters.take("agent-a").is_empty(), "taken once");
        assert_eq!(waiters.take("agent-b"), vec![w("r3")]);
    }

    #[test]
    fn a_waiting_revision_keeps_one_fallback_pass() {
        let waiters = LeaseWaiters::default();
        assert!(
            waiters.add("agent-a", "r1", "ns-1", FALLBACK),
            "first: queue it"
        );
        assert!(
            !waiters.add("agent-a", "r1", "ns-1", FALLBACK),
            "its fallback is still to come"
        );
        assert!(
            waiters.add("agent-a", "r2", "ns-1", FALLBACK),
            "another revision"
        );
        // A fallback that came (its time passed) and was turned away again
        // queues the next one.
        assert!(waiters.add("agent-b", "r3", "ns-1", Duration::ZERO));
        assert!(waiters.add("agent-b", "r3", "ns-1", FALLBACK));
        assert!(!waiters.add("agent-b", "r3", "ns-1", FALLBACK));
    }

    #[test]
    fn a_waiter_that_got_the_lease_is_not_woken() {
        let waiters = LeaseWaiters::default();
        waiters.add("agent-a", "r1", "ns-1", FALLBACK);
        waiters.add("agent-a", "r2", "ns-1", FALLBACK);
        waiters.remove("agent-a", "r1");
        assert_eq!(waiters.take("agent-a"), vec![w("r2")]);
        waiters.add("agent-a", "r1", "ns-1", FALLBACK);
        waiters.remove("agent-a", "r1");
        assert!(waiters.take("agent-a").is_empty());
    }
}
