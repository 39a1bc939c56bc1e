//! The spoke's side of failover with fencing (`clawfed_proto::failover`):
//! the execution lease it renews over the link, and the fence it applies
//! itself when the lease lapses.
//!
//! The lease is measured on this process's monotonic clock only: it runs
//! from the moment the spoke *sent* the newest renewal the hub answered,
//! so a hub whose clock is set differently cannot stretch it. A process
//! that has not had a renewal answered yet (it just started, and cannot
//! know how long it was down) keeps its failover-enabled Harnesses at most
//! [`RESTART_GRACE`] (or F, if shorter) before it fences them.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use clawfed_proto::failover::{RESTART_GRACE, periods};
use tokio::time::Instant;

/// A failover-enabled Harness running under the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leased {
    /// Its work target.
    pub target: String,
    /// `failover.afterSeconds`.
    pub after_seconds: u32,
    /// When this process applied it (`None`: found on the cluster after a
    /// restart). The hub counts from no earlier than its activation, which
    /// follows the apply.
    pub since: Option<Instant>,
}

/// What the link needs of the failover-enabled Harnesses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailoverState {
    /// Running under the lease.
    pub running: Vec<Leased>,
    /// Fenced, waiting for the hub's stop or retirement.
    pub fenced: Vec<String>,
}

impl FailoverState {
    /// The shortest `afterSeconds` of the running ones.
    pub fn shortest(&self) -> Option<u32> {
        self.running.iter().map(|l| l.after_seconds).min()
    }
}

/// How many unanswered renewals are remembered (older ones are dropped:
/// their answer would not extend the lease past a newer one's).
const PENDING_MAX: usize = 64;

/// The execution lease of this spoke process.
#[derive(Debug)]
pub struct ExecutionLease {
    started: Instant,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    /// Renewals asked for and not answered yet: (sequence, sent at).
    pending: VecDeque<(u64, Instant)>,
    /// When the newest answered renewal was sent.
    renewed_sent: Option<Instant>,
    /// When the latest renewal was asked for.
    last_request: Option<Instant>,
}

impl ExecutionLease {
    /// A lease for a process started at `started`.
    pub fn new(started: Instant) -> Self {
        Self {
            started,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A renewal is due at `now` for Harnesses whose shortest F is
    /// `shortest`: four per F, and at least one per `heartbeat`.
    pub fn renewal_due(&self, now: Instant, shortest: Duration, heartbeat: Duration) -> bool {
        let every = (shortest / 4).min(heartbeat);
        self.inner()
            .last_request
            .is_none_or(|at| now.duration_since(at) >= every)
    }

    /// Asks for a renewal sent at `now`: the sequence to put in the
    /// heartbeat.
    pub fn request(&self, now: Instant) -> u64 {
        let mut inner = self.inner();
        inner.next += 1;
        let sequence = inner.next;
        inner.pending.push_back((sequence, now));
        if inner.pending.len() > PENDING_MAX {
            inner.pending.pop_front();
        }
        inner.last_request = Some(now);
        sequence
    }

    /// The hub recorded renewal `sequence`: the lease runs from when it
    /// was sent. An unknown or older sequence changes nothing.
    pub fn renewed(&self, sequence: u64) {
        let mut inner = self.inner();
        let Some(i) = inner.pending.iter().position(|(s, _)| *s == sequence) else {
            return;
        };
        let sent = inner.pending[i].1;
        inner.pending.drain(..=i);
        if inner.renewed_sent.is_none_or(|t| sent > t) {
            inner.renewed_sent = Some(sent);
        }
    }

    /// When `leased` is to be fenced.
    pub fn fence_at(&self, leased: &Leased) -> Instant {
        fence_at(
            self.inner().renewed_sent,
            leased.since,
            self.started,
            periods(leased.after_seconds).fence_after,
        )
    }
}

/// The fence deadline: F after the later of the newest answered renewal's
/// send and the Harness's apply (`since`); with neither (a restarted
/// process), the restart grace (or F, if shorter) after the process
/// started.
pub fn fence_at(
    renewed_sent: Option<Instant>,
    since: Option<Instant>,
    started: Instant,
    fence_after: Duration,
) -> Instant {
    match renewed_sent.max(since) {
        Some(from) => from + fence_after,
        None => started + fence_after.min(RESTART_GRACE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leased(after_seconds: u32, since: Option<Instant>) -> Leased {
        Leased {
            target: "harness/n/a/1".into(),
            after_seconds,
            since,
        }
    }

    #[test]
    fn the_lease_runs_from_the_send_of_the_newest_answered_renewal() {
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let lease = ExecutionLease::new(t0);
        // Found after a restart, nothing answered yet: the restart grace
        // (or F when shorter).
        assert_eq!(lease.fence_at(&leased(60, None)), t0 + RESTART_GRACE);
        assert_eq!(lease.fence_at(&leased(10, None)), s(10));
        // Applied by this process: F from the apply.
        assert_eq!(lease.fence_at(&leased(60, Some(s(2)))), s(62));
        let a = lease.request(s(1));
        let b = lease.request(s(3));
        // The later answer first: the earlier one cannot move it back.
        lease.renewed(b);
        lease.renewed(a);
        assert_eq!(lease.fence_at(&leased(30, None)), s(33));
        // An unknown sequence (another process's, or dropped) is ignored.
        lease.renewed(999);
        assert_eq!(lease.fence_at(&leased(30, None)), s(33));
        // A Harness applied after the renewal counts from its apply.
        assert_eq!(lease.fence_at(&leased(30, Some(s(7)))), s(37));
    }

    #[test]
    fn renewals_come_four_times_per_period_and_at_least_each_heartbeat() {
        let t0 = Instant::now();
        let lease = ExecutionLease::new(t0);
        let (f, beat) = (Duration::from_secs(20), Duration::from_secs(10));
        assert!(lease.renewal_due(t0, f, beat));
        lease.request(t0);
        assert!(!lease.renewal_due(t0 + Duration::from_millis(4_999), f, beat));
        assert!(lease.renewal_due(t0 + Duration::from_secs(5), f, beat));
        let long = Duration::from_secs(3600);
        assert!(!lease.renewal_due(t0 + Duration::from_millis(9_999), long, beat));
        assert!(lease.renewal_due(t0 + beat, long, beat));
    }
}
