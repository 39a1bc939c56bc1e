//! Failover as a pure decision: whether a failover-enabled Agent's active
//! revision is to be moved off its cluster now, and whether a predecessor
//! counts as stopped without its cluster's confirmation. No I/O and no
//! clock: the scan (`worker::failover`) and the pipeline's facts pass the
//! time in.
//!
//! The hub counts from the later of its cluster's newest recorded lease
//! renewal and the revision's activation. Both are recorded after the
//! spoke event the spoke counts from (the renewal's send, the Harness's
//! apply), so the hub's period ends after the spoke's fence whatever the
//! clocks read (`clawfed_proto::failover`).

use chrono::{DateTime, Utc};
use clawfed_proto::failover::periods;

use crate::model::RevisionPhase;
use crate::store::FailoverCandidate;

/// Why an Agent is moved off its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveReason {
    /// The cluster's lease lapsed: nothing renewed it since `since`, and
    /// the spoke fenced the Harness by now.
    LeaseLapsed { since: DateTime<Utc> },
    /// The cluster's spoke reported it fenced the Harness.
    Fenced,
}

impl std::fmt::Display for MoveReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::LeaseLapsed { since } => write!(
                f,
                "its execution lease there lapsed (last renewed {})",
                since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
            Self::Fenced => f.write_str("its spoke fenced it there"),
        }
    }
}

/// A Harness activated at `activated_at` with `after_seconds`, on a
/// cluster whose newest renewal was recorded at `lease_renewed_at`, is
/// fenced at `now`: the hub's period has passed. A revision never
/// activated is not (the hub cannot tell when its spoke applied it).
pub fn lapsed(
    lease_renewed_at: Option<DateTime<Utc>>,
    activated_at: Option<DateTime<Utc>>,
    after_seconds: u32,
    now: DateTime<Utc>,
) -> bool {
    // The later of the two (`None` sorts first); never activated: none.
    let Some(from) = activated_at.and(lease_renewed_at.max(activated_at)) else {
        return false;
    };
    let wait = chrono::Duration::from_std(periods(after_seconds).replace_after)
        .unwrap_or(chrono::Duration::MAX);
    from + wait <= now
}

/// Whether `c` is to be moved at `now`, and why.
pub fn decide(c: &FailoverCandidate, now: DateTime<Utc>) -> Option<MoveReason> {
    let rev = &c.revision;
    let failover = rev.spec.failover?;
    if rev.phase != RevisionPhase::Active {
        return None;
    }
    let target = clawfed_proto::work::target::harness(&c.namespace_id, &rev.agent, rev.number);
    if c.fenced_targets.contains(&target) {
        return Some(MoveReason::Fenced);
    }
    let activated_at = rev.progress.activated_at;
    lapsed(
        c.lease_renewed_at,
        activated_at,
        failover.after_seconds,
        now,
    )
    .then(|| {
        MoveReason::LeaseLapsed {
            // Set: `lapsed` holds only for an activated revision.
            since: c.lease_renewed_at.max(activated_at).unwrap_or(now),
        }
    })
}

/// How long after a failover move failed (say, no cluster took it) the scan
/// moves the Agent again: each try waits out the placement deadline, so
/// this only spaces out tries that fail at once.
pub const RETRY_FAILED_MOVE_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// Failover moves that failed before this are retried at `now`.
pub fn retry_cutoff(now: DateTime<Utc>) -> DateTime<Utc> {
    now - chrono::Duration::from_std(RETRY_FAILED_MOVE_AFTER).unwrap_or_default()
}

/// The oldest renewal that may still hold a lease at `now`: a scan need
/// not look at clusters renewed since (the shortest period's cut-off).
pub fn scan_cutoff(now: DateTime<Utc>) -> DateTime<Utc> {
    let shortest = periods(clawfed_proto::failover::MIN_AFTER_SECONDS).replace_after;
    now - chrono::Duration::from_std(shortest).unwrap_or_default()
}

#[cfg(test)]
mod tests;
