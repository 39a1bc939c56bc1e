//! The drain plan, from revisions as the store returns them.

use chrono::{DateTime, Duration, Utc};

use super::*;

fn at(minutes: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .expect("time")
        .with_timezone(&Utc)
        + Duration::minutes(minutes)
}

fn drain(parallelism: u32) -> Drain {
    Drain {
        parallelism,
        started_at: at(10),
        finished_at: None,
        progress: None,
        requested_by: Some("admin".into()),
    }
}

/// Revision `number` of `agent` (namespace `team`), on `cluster`.
fn rev(agent: &str, number: i64, cluster: Option<&str>, phase: RevisionPhase) -> AgentRevision {
    serde_json::from_value(serde_json::json!({
        "id": format!("{agent}-{number}"),
        "namespace": "team",
        "agent": agent,
        "number": number,
        "spec": { "harnessKind": "embedded-openclaw", "image": "reg.example/h:1" },
        "configuration": null,
        "images": [],
        "resolvedCluster": cluster,
        "phase": phase.as_str(),
        "reason": null,
        "rolledBackFrom": null,
        "createdAt": at(0).to_rfc3339(),
        "updatedAt": at(0).to_rfc3339(),
    }))
    .expect("revision")
}

/// A move of `agent` away from exec-a, made at minute `minute`.
fn moved(
    agent: &str,
    number: i64,
    to: Option<&str>,
    phase: RevisionPhase,
    minute: i64,
) -> AgentRevision {
    AgentRevision {
        moved_from: Some("exec-a".into()),
        created_at: at(minute),
        ..rev(agent, number, to, phase)
    }
}

fn states(p: &DrainPlan) -> Vec<(String, DrainAgentState)> {
    p.progress
        .agents
        .iter()
        .map(|a| (a.agent.clone(), a.state))
        .collect()
}

#[test]
fn active_agents_move_one_at_a_time_by_default() {
    let revs = [
        rev("a", 1, Some("exec-a"), RevisionPhase::Active),
        rev("b", 3, Some("exec-a"), RevisionPhase::Active),
    ];
    let p = plan("exec-a", &drain(1), &revs);
    assert_eq!(p.start.len(), 1);
    assert_eq!((p.start[0].1.as_str(), p.start[0].2.revision), ("a", 1));
    assert_eq!(p.progress.waiting, 2);
    assert!(!p.finished);

    let p = plan("exec-a", &drain(5), &revs);
    assert_eq!(p.start.len(), 2, "parallelism 5 starts both");
}

#[test]
fn a_move_in_flight_takes_a_slot_and_a_finished_one_frees_it() {
    let revs = [
        rev("a", 1, Some("exec-a"), RevisionPhase::Active),
        moved("a", 2, Some("exec-b"), RevisionPhase::WaitingReady, 11),
        rev("b", 1, Some("exec-a"), RevisionPhase::Active),
    ];
    let p = plan("exec-a", &drain(1), &revs);
    assert!(p.start.is_empty(), "a moves: no slot left");
    assert_eq!(
        states(&p),
        [
            ("a".into(), DrainAgentState::Moving),
            ("b".into(), DrainAgentState::Waiting)
        ]
    );

    // a is active on exec-b and revision 1 is retired (not returned).
    let revs = [
        moved("a", 2, Some("exec-b"), RevisionPhase::Active, 11),
        rev("b", 1, Some("exec-a"), RevisionPhase::Active),
    ];
    let p = plan("exec-a", &drain(1), &revs);
    assert_eq!(p.start.len(), 1);
    assert_eq!(p.start[0].1, "b");
    let a = &p.progress.agents[0];
    assert_eq!(a.state, DrainAgentState::Moved);
    assert_eq!((a.from_revision, a.to_revision), (Some(1), Some(2)));
    assert_eq!(a.to_cluster.as_deref(), Some("exec-b"));
    assert_eq!(a.workspace, Some(WorkspaceOrigin::Fresh));
}

#[test]
fn a_move_active_before_its_predecessor_retires_frees_its_slot_not_the_drain() {
    let revs = [
        rev("a", 1, Some("exec-a"), RevisionPhase::Active),
        moved("a", 2, Some("exec-b"), RevisionPhase::Active, 11),
        rev("b", 1, Some("exec-a"), RevisionPhase::Active),
    ];
    let p = plan("exec-a", &drain(1), &revs);
    assert_eq!(
        states(&p),
        [
            ("a".into(), DrainAgentState::Moved),
            ("b".into(), DrainAgentState::Waiting)
        ]
    );
    assert_eq!(p.start.len(), 1, "revision 1 was stopped before the move");
    assert_eq!(
        p.progress.agents[0].reason.as_deref(),
        Some("revision 1 is retiring there")
    );
    let p = plan("exec-a", &drain(1), &revs[..2]);
    assert!(!p.finished, "revision 1 still retires on exec-a");
}

#[test]
fn pinned_agents_are_blocked_and_failed_moves_end_the_drain() {
    let mut pinned = rev("p", 1, Some("exec-a"), RevisionPhase::Active);
    pinned.spec.placement.cluster = Some("exec-a".into());
    let mut failed = moved("f", 2, None, RevisionPhase::Failed, 12);
    failed.reason = Some("placement deadline passed".into());
    let revs = [
        pinned,
        rev("f", 1, Some("exec-a"), RevisionPhase::Active),
        failed,
    ];
    let p = plan("exec-a", &drain(1), &revs);
    assert!(p.start.is_empty(), "neither is moved again");
    assert!(p.finished);
    assert_eq!((p.progress.blocked, p.progress.failed), (1, 1));
    let f = &p.progress.agents[0];
    assert_eq!(f.reason.as_deref(), Some("placement deadline passed"));
}

#[test]
fn a_move_from_an_earlier_drain_does_not_count() {
    // A failed move at minute 5 belongs to an earlier drain: this one
    // moves the revision still active on exec-a again.
    let revs = [
        rev("a", 1, Some("exec-a"), RevisionPhase::Active),
        moved("a", 2, None, RevisionPhase::Failed, 5),
    ];
    let p = plan("exec-a", &drain(1), &revs);
    assert_eq!(p.start.len(), 1);
    assert_eq!(p.start[0].2.revision, 1);
}

#[test]
fn unsettled_or_replaced_revisions_wait_and_are_not_moved() {
    let revs = [
        rev("a", 1, Some("exec-a"), RevisionPhase::WaitingReady),
        rev("b", 1, Some("exec-a"), RevisionPhase::Active),
        rev("b", 2, Some("exec-b"), RevisionPhase::Preparing),
        rev("c", 4, Some("exec-a"), RevisionPhase::Stopping),
    ];
    let p = plan("exec-a", &drain(3), &revs);
    assert!(p.start.is_empty());
    assert_eq!(
        states(&p),
        [
            ("a".into(), DrainAgentState::Waiting),
            ("b".into(), DrainAgentState::Moving),
            ("c".into(), DrainAgentState::Waiting)
        ]
    );
    assert!(!p.finished);
}

#[test]
fn nothing_concerned_is_a_finished_drain() {
    let p = plan("exec-a", &drain(1), &[]);
    assert!(p.finished);
    assert_eq!(p.progress, DrainProgress::default());
}
