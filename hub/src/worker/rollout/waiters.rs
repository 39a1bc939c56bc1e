//! Passes turned away by a busy Agent lease, woken by the holder in this
//! process as it releases the lease. A Gateway ensure holds the lease for
//! seconds on a loaded control apiserver; a turned-away pass that retried
//! every 200 ms instead ran about 36 times per revision at 200 deploys at
//! once, each a claim, four reads and an insert. A holder in another
//! replica cannot wake them, so each turned-away pass also queues a
//! fallback pass. Queued passes coalesce (`NewWork::coalesce`): the
//! wake-up, the fallback and any trigger are one queued pass, due at the
//! earliest of them, so passes that keep turning each other away cannot
//! multiply. The fallback is queued on every turn-away, never skipped as
//! "still to come": a trigger that joined it ran it early, and a waiter
//! whose holder is in another replica would then wait for good.

use std::collections::HashMap;
use std::sync::Mutex;

/// Agent id → revision id → the namespace id of a revision waiting for
/// the Agent's lease.
#[derive(Debug, Default)]
pub(super) struct LeaseWaiters(Mutex<HashMap<String, HashMap<String, String>>>);

impl LeaseWaiters {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, String>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Revision `revision_id` (of namespace `namespace_id`) waits for
    /// `agent_id`'s lease.
    pub(super) fn add(&self, agent_id: &str, revision_id: &str, namespace_id: &str) {
        self.map()
            .entry(agent_id.to_owned())
            .or_default()
            .insert(revision_id.to_owned(), namespace_id.to_owned());
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
            .map(|r| r.into_iter().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::LeaseWaiters;

    fn w(rev: &str) -> (String, String) {
        (rev.to_owned(), "ns-1".to_owned())
    }

    #[test]
    fn a_release_takes_each_waiting_revision_once_and_only_its_agents() {
        let waiters = LeaseWaiters::default();
        waiters.add("agent-a", "r1", "ns-1");
        waiters.add("agent-a", "r1", "ns-1");
        waiters.add("agent-a", "r2", "ns-1");
        waiters.add("agent-b", "r3", "ns-1");
        let mut taken = waiters.take("agent-a");
        taken.sort();
        assert_eq!(taken, vec![w("r1"), w("r2")]);
        assert!(waiters.take("agent-a").is_empty(), "taken once");
        assert_eq!(waiters.take("agent-b"), vec![w("r3")]);
    }

    #[test]
    fn a_waiter_that_got_the_lease_is_not_woken() {
        let waiters = LeaseWaiters::default();
        waiters.add("agent-a", "r1", "ns-1");
        waiters.add("agent-a", "r2", "ns-1");
        waiters.remove("agent-a", "r1");
        assert_eq!(waiters.take("agent-a"), vec![w("r2")]);
        waiters.add("agent-a", "r1", "ns-1");
        waiters.remove("agent-a", "r1");
        assert!(waiters.take("agent-a").is_empty());
    }
}
