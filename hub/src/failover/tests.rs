//! The failover decision, with the time passed in.

use chrono::{DateTime, Duration, Utc};

use super::*;
use crate::model::AgentRevision;

fn at(seconds: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .expect("time")
        .with_timezone(&Utc)
        + Duration::seconds(seconds)
}

/// Revision 2 of `a1`, active since second 0 on exec-a, failover after
/// `after` seconds (none: no failover).
fn rev(after: Option<u32>, phase: RevisionPhase) -> AgentRevision {
    let failover = after.map(|s| serde_json::json!({ "afterSeconds": s }));
    serde_json::from_value(serde_json::json!({
        "id": "r2",
        "namespace": "team",
        "agent": "a1",
        "number": 2,
        "spec": {
            "harnessKind": "embedded-openclaw",
            "image": "reg.example/h:1",
            "failover": failover,
        },
        "configuration": null,
        "images": [],
        "resolvedCluster": "exec-a",
        "phase": phase.as_str(),
        "reason": null,
        "rolledBackFrom": null,
        "progress": { "phases": {}, "activatedAt": at(0).to_rfc3339() },
        "createdAt": at(0).to_rfc3339(),
        "updatedAt": at(0).to_rfc3339(),
    }))
    .expect("revision")
}

fn candidate(rev: AgentRevision, renewed: Option<i64>, fenced: &[&str]) -> FailoverCandidate {
    FailoverCandidate {
        latest_revision: rev.number,
        revision: rev,
        namespace_id: "ns-1".into(),
        lease_renewed_at: renewed.map(at),
        fenced_targets: fenced.iter().map(|t| (*t).to_owned()).collect(),
    }
}

#[test]
fn a_lapsed_lease_moves_only_after_the_fence_period_and_its_margin() {
    // F = 30 s: the hub waits 30 + 5 + 5 + 0.6 s after the newest renewal.
    let c = candidate(rev(Some(30), RevisionPhase::Active), Some(100), &[]);
    assert_eq!(decide(&c, at(140)), None);
    assert_eq!(
        decide(&c, at(141)),
        Some(MoveReason::LeaseLapsed { since: at(100) })
    );
    // Never renewed since the activation: counted from the activation.
    let c = candidate(rev(Some(30), RevisionPhase::Active), None, &[]);
    assert_eq!(decide(&c, at(40)), None);
    assert!(decide(&c, at(41)).is_some());
    // A renewal older than the activation: the activation counts.
    let c = candidate(rev(Some(30), RevisionPhase::Active), Some(-500), &[]);
    assert_eq!(decide(&c, at(40)), None);
}

#[test]
fn a_reported_fence_moves_at_once_and_only_its_own_target() {
    let own = clawfed_proto::work::target::harness("ns-1", "a1", 2);
    let c = candidate(rev(Some(600), RevisionPhase::Active), Some(0), &[&own]);
    assert_eq!(decide(&c, at(1)), Some(MoveReason::Fenced));
    let other = clawfed_proto::work::target::harness("ns-1", "a1", 1);
    let c = candidate(rev(Some(600), RevisionPhase::Active), Some(0), &[&other]);
    assert_eq!(decide(&c, at(1)), None);
}

#[test]
fn no_failover_or_not_active_never_moves() {
    let c = candidate(rev(None, RevisionPhase::Active), Some(0), &[]);
    assert_eq!(decide(&c, at(100_000)), None);
    let c = candidate(rev(Some(10), RevisionPhase::Stopping), Some(0), &[]);
    assert_eq!(decide(&c, at(100_000)), None);
}

#[test]
fn a_predecessor_never_activated_is_never_taken_as_fenced() {
    assert!(!lapsed(Some(at(0)), None, 10, at(100_000)));
    assert!(lapsed(Some(at(0)), Some(at(0)), 10, at(21)));
    assert!(!lapsed(Some(at(0)), Some(at(0)), 10, at(20)));
}

#[test]
fn the_scan_cutoff_is_the_shortest_period_before_now() {
    let shortest = periods(clawfed_proto::failover::MIN_AFTER_SECONDS).replace_after;
    assert_eq!(
        scan_cutoff(at(100)),
        at(100) - Duration::from_std(shortest).expect("duration")
    );
}
