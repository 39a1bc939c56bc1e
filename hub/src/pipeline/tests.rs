//! Unit tests of the pipeline state machine: each decision from its facts.

use super::*;
use RevisionPhase as P;

fn fresh() -> Facts {
    Facts {
        phase: P::Pending,
        wanted: true,
        denied: None,
        placed: true,
        cluster: Some("exec-a".into()),
        agent_stopped: false,
        unservable: None,
        namespace_sent: false,
        namespace: WorkOutcome::Waiting,
        control_gateway: true,
        gateway_queued: false,
        gateway_applied: false,
        exclusive: false,
        predecessors: Vec::new(),
        harness_sent: false,
        harness: WorkOutcome::Waiting,
        stop_sent: false,
        stop: WorkOutcome::Waiting,
        readiness: None,
        gateway_ready: false,
        activated: false,
        predecessors_retired: false,
        now: t0(),
        deadline: None,
        gateway_recheck: DEFAULT_GATEWAY_RECHECK,
        placement_wait: None,
    }
}

/// The time of every decision here.
fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).expect("a valid time")
}

/// A plain wait (no deadline ahead in these facts).
const WAIT: Step = Step::Wait { until: None };

/// Only the Gateway is missing: look again after the recheck.
fn gateway_recheck() -> Step {
    Step::Wait {
        until: Some(t0() + chrono::Duration::from_std(DEFAULT_GATEWAY_RECHECK).unwrap()),
    }
}

/// Enters `phase` for `reason`.
fn entered(phase: RevisionPhase, reason: EnterReason) -> Step {
    Step::Enter {
        phase,
        reason: Some(reason),
    }
}

/// The text of a failure, `None` for any other step.
fn failure(step: &Step) -> Option<String> {
    match step {
        Step::Fail(reason) => Some(reason.to_string()),
        _ => None,
    }
}

fn ready() -> Option<Readiness> {
    Some(Readiness {
        ready: true,
        live_candidates: 1,
        ready_candidates: 1,
        ..Default::default()
    })
}

fn pred(number: i64, cluster: &str) -> Predecessor {
    Predecessor {
        number,
        phase: P::Active,
        cluster: Some(cluster.into()),
        harness_sent: true,
        stop_sent: false,
        stop: WorkOutcome::Waiting,
        retire_sent: false,
        retire: WorkOutcome::Waiting,
        fenced: false,
    }
}

/// Runs the machine, applying each step's effect to the facts the way
/// the driver records it, until it waits or finishes.
fn drive(mut f: Facts, mut world: impl FnMut(&mut Facts)) -> (Vec<Step>, Facts) {
    let mut steps = Vec::new();
    for _ in 0..50 {
        let step = decide(&f);
        steps.push(step.clone());
        match &step {
            Step::Wait { .. } | Step::Finished | Step::Place => return (steps, f),
            Step::SendNamespace => f.namespace_sent = true,
            Step::Enter { phase, .. } => f.phase = *phase,
            Step::QueueGateway => f.gateway_queued = true,
            Step::StopPredecessors(ns) => {
                for p in f.predecessors.iter_mut().filter(|p| ns.contains(&p.number)) {
                    p.stop_sent = true;
                }
            }
            Step::SendHarness => f.harness_sent = true,
            Step::StopHarness => f.stop_sent = true,
            Step::Activate => f.activated = true,
            Step::RetirePredecessors(ns) => {
                for p in f.predecessors.iter_mut().filter(|p| ns.contains(&p.number)) {
                    p.retire_sent = true;
                }
            }
            Step::MarkRetired(ns) => {
                for p in f.predecessors.iter_mut().filter(|p| ns.contains(&p.number)) {
                    p.phase = P::Retired;
                }
            }
            Step::PredecessorsRetired => f.predecessors_retired = true,
            Step::Fail(_) => f.phase = P::Failed,
        }
        world(&mut f);
    }
    panic!("did not settle: {steps:?}");
}

#[test]
fn happy_path_in_order() {
    let (steps, f) = drive(fresh(), |f| {
        // The spoke answers the namespace at once; the Gateway's ensure
        // runs and the Gateway is Ready.
        if f.namespace_sent {
            f.namespace = WorkOutcome::Applied;
        }
        if f.gateway_queued {
            f.gateway_applied = true;
        }
        if f.gateway_applied {
            f.gateway_ready = true;
        }
    });
    assert_eq!(
        steps,
        vec![
            Step::SendNamespace,
            enter(P::Preparing),
            Step::SendHarness,
            Step::QueueGateway,
            WAIT,
        ]
    );
    // The Harness applies and becomes Ready: activation, then retire.
    let mut f = f;
    f.harness = WorkOutcome::Applied;
    let (steps, f) = drive(f, |f| f.readiness = ready());
    assert_eq!(
        steps,
        vec![
            enter(P::WaitingReady),
            Step::Activate,
            enter(P::Active),
            Step::PredecessorsRetired,
            Step::Finished,
        ]
    );
    assert!(f.predecessors_retired);
}

/// The Harness goes out before the Gateway's ensure is queued (the
/// remote Pod is the slower part), both in the first pass; the pass
/// does not wait for the ensure, and activation waits for the Gateway
/// Ready. A refused Harness fails the revision without a Gateway ensure
/// queued for it.
#[test]
fn the_harness_goes_out_before_the_gateway_in_one_pass() {
    let mut f = fresh();
    f.phase = P::Preparing;
    f.namespace = WorkOutcome::Applied;
    assert_eq!(decide(&f), Step::SendHarness);
    f.harness_sent = true;
    assert_eq!(decide(&f), Step::QueueGateway, "same pass, next step");
    f.gateway_queued = true;
    assert_eq!(
        decide(&f),
        WAIT,
        "the pass ends; the ensure runs in its lane"
    );
    f.harness = WorkOutcome::Applied;
    assert_eq!(decide(&f), enter(P::WaitingReady));
    f.phase = P::WaitingReady;
    f.readiness = ready();
    assert_eq!(
        decide(&f),
        gateway_recheck(),
        "a Ready Harness waits for its Gateway"
    );
    let mut late = f.clone();
    late.deadline = Some(t0());
    assert!(
        failure(&decide(&late)).is_some_and(|r| r.contains("never applied")),
        "the deadline names the ensure that never succeeded"
    );
    f.gateway_applied = true;
    f.gateway_ready = true;
    assert_eq!(decide(&f), Step::Activate);

    let mut f = fresh();
    f.phase = P::Preparing;
    f.namespace = WorkOutcome::Applied;
    f.harness_sent = true;
    f.harness = WorkOutcome::Failed("image refused".into());
    assert!(failure(&decide(&f)).is_some_and(|r| r.contains("image refused")));
}

/// A queued ensure applies only for a wanted revision of an allowed
/// deployer, once, before a terminal phase.
#[test]
fn a_queued_gateway_ensure_applies_only_while_the_revision_wants_it() {
    let mut f = fresh();
    f.phase = P::Preparing;
    f.gateway_queued = true;
    assert!(gateway_ensure_allowed(&f));
    for phase in [P::Pending, P::Provisioning, P::WaitingReady] {
        f.phase = phase;
        assert!(gateway_ensure_allowed(&f), "{phase:?}");
    }
    for phase in [P::Active, P::Stopping, P::Stopped, P::Failed, P::Retired] {
        f.phase = phase;
        assert!(!gateway_ensure_allowed(&f), "{phase:?}");
    }
    f.phase = P::Preparing;
    let mut g = f.clone();
    g.wanted = false;
    assert!(!gateway_ensure_allowed(&g), "superseded or stopped");
    let mut g = f.clone();
    g.denied = Some("token revoked".into());
    assert!(!gateway_ensure_allowed(&g), "deployer denied");
    let mut g = f.clone();
    g.gateway_applied = true;
    assert!(!gateway_ensure_allowed(&g), "applied once");
    let mut g = f;
    g.control_gateway = false;
    assert!(!gateway_ensure_allowed(&g), "embedded: no Gateway");
}

/// While dedicated predecessors stop, the Gateway is prepared; the
/// Harness still waits for every stop.
#[test]
fn the_gateway_is_prepared_while_dedicated_predecessors_stop() {
    let mut f = fresh();
    f.phase = P::Preparing;
    f.namespace = WorkOutcome::Applied;
    f.exclusive = true;
    f.predecessors = vec![pred(1, "exec-a")];
    assert_eq!(decide(&f), Step::StopPredecessors(vec![1]));
    f.predecessors[0].stop_sent = true;
    assert_eq!(decide(&f), Step::QueueGateway);
    f.gateway_queued = true;
    assert_eq!(decide(&f), WAIT, "the Harness waits for the stop");
    f.gateway_applied = true;
    assert_eq!(decide(&f), WAIT, "still");
    f.predecessors[0].stop = WorkOutcome::Applied;
    assert_eq!(decide(&f), Step::SendHarness);
}

#[test]
fn namespace_waits_in_provisioning_until_its_deadline() {
    let mut f = fresh();
    f.namespace_sent = true;
    assert_eq!(decide(&f), enter(P::Provisioning));
    f.phase = P::Provisioning;
    assert_eq!(decide(&f), WAIT);
    f.namespace = WorkOutcome::Retrying("apiserver unavailable".into());
    f.deadline = Some(t0());
    match failure(&decide(&f)) {
        Some(r) => {
            assert!(r.contains("provisioning deadline"), "{r}");
            assert!(r.contains("apiserver unavailable"), "{r}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_lost_harness_result_ends_at_the_preparation_deadline() {
    // The spoke applied the Harness but its result never arrived: the
    // revision must not hang in preparing.
    let mut f = fresh();
    f.phase = P::Preparing;
    f.namespace = WorkOutcome::Applied;
    f.gateway_applied = true;
    f.harness_sent = true;
    assert_eq!(decide(&f), WAIT);
    f.deadline = Some(t0());
    match failure(&decide(&f)) {
        Some(r) => assert!(r.contains("harness: no result from the spoke"), "{r}"),
        None => panic!("{:?}", decide(&f)),
    }
}

/// Issue 12: a placed revision whose cluster cannot serve it fails before
/// any Harness work is sent, naming why (placement itself: `placement/tests.rs`).
#[test]
fn a_placed_revision_its_cluster_cannot_serve_fails_before_harness_work() {
    let mut f = fresh();
    f.unservable = Some("cluster plain cannot serve the revision".into());
    assert!(failure(&decide(&f)).is_some_and(|r| r.contains("placement refused: cluster plain")));
}

/// Issue 12: embedded OpenClaw has no control-cluster Gateway: the
/// pipeline applies none and activates on the Harness alone.
#[test]
fn embedded_openclaw_activates_without_a_control_cluster_gateway() {
    let mut f = fresh();
    f.control_gateway = false;
    f.phase = P::Preparing;
    f.namespace = WorkOutcome::Applied;
    assert_eq!(decide(&f), Step::SendHarness, "no Gateway step");
    f.harness_sent = true;
    f.harness = WorkOutcome::Applied;
    f.phase = P::WaitingReady;
    assert_eq!(decide(&f), WAIT);
    f.readiness = ready();
    assert_eq!(decide(&f), Step::Activate, "no Gateway to wait for");
    // A dedicated revision waits for its Gateway.
    f.control_gateway = true;
    f.gateway_applied = true;
    assert_eq!(decide(&f), gateway_recheck());
    f.gateway_ready = true;
    assert_eq!(decide(&f), Step::Activate);
}

#[test]
fn placement_has_a_deadline() {
    let mut f = fresh();
    f.placed = false;
    assert_eq!(decide(&f), Step::Place);
    f.deadline = Some(t0());
    assert!(failure(&decide(&f)).is_some_and(|r| r.contains("placement")));
}

/// A revision preparing to replace its predecessors exclusively, its
/// namespace and Gateway done.
fn preparing_exclusive() -> Facts {
    let mut f = fresh();
    f.phase = P::Preparing;
    f.namespace = WorkOutcome::Applied;
    f.gateway_applied = true;
    f.exclusive = true;
    f
}

#[test]
fn dedicated_replacement_stops_each_predecessor_before_the_harness() {
    let mut f = preparing_exclusive();
    f.predecessors = vec![pred(1, "exec-a"), pred(2, "exec-b")];
    f.predecessors[0].phase = P::Stopped;
    f.predecessors[0].stop_sent = true;
    f.predecessors[0].stop = WorkOutcome::Applied;
    assert_eq!(decide(&f), Step::StopPredecessors(vec![2]));
    f.predecessors[1].stop_sent = true;
    assert_eq!(decide(&f), WAIT, "wait for revision 2's cluster");
    f.predecessors[1].stop = WorkOutcome::Applied;
    assert_eq!(decide(&f), Step::SendHarness);
    f.harness_sent = true;
    assert_eq!(decide(&f), WAIT, "sent once, then wait for the spoke");
}

#[test]
fn a_fenced_predecessor_on_a_lost_cluster_counts_as_stopped() {
    let mut f = preparing_exclusive();
    f.predecessors = vec![pred(1, "exec-a")];
    // The stop goes into the lost cluster's outbox all the same.
    assert_eq!(decide(&f), Step::StopPredecessors(vec![1]));
    f.predecessors[0].stop_sent = true;
    assert_eq!(decide(&f), WAIT, "no confirmation, not fenced yet");
    f.predecessors[0].fenced = true;
    assert_eq!(decide(&f), Step::SendHarness);
}

#[test]
fn a_refused_predecessor_stop_fails_the_dedicated_revision() {
    let mut f = preparing_exclusive();
    f.predecessors = vec![pred(1, "exec-a")];
    f.predecessors[0].stop_sent = true;
    f.predecessors[0].stop = WorkOutcome::Failed("forbidden".into());
    assert!(
        failure(&decide(&f)).is_some_and(|r| r.contains("revision 1") && r.contains("forbidden"))
    );
}

#[test]
fn retirement_sends_then_marks_each_predecessor() {
    let mut f = fresh();
    f.phase = P::Active;
    f.activated = true;
    let mut never_ran = pred(1, "exec-a");
    never_ran.harness_sent = false;
    never_ran.phase = P::Failed;
    f.predecessors = vec![never_ran, pred(2, "exec-a"), pred(3, "exec-b")];
    assert_eq!(decide(&f), Step::RetirePredecessors(vec![2, 3]));
    f.predecessors[1].retire_sent = true;
    f.predecessors[2].retire_sent = true;
    assert_eq!(decide(&f), Step::MarkRetired(vec![1]));
    f.predecessors[0].phase = P::Retired;
    assert_eq!(decide(&f), WAIT, "both clusters still owe their report");
    f.predecessors[2].retire = WorkOutcome::Applied;
    assert_eq!(decide(&f), Step::MarkRetired(vec![3]));
    f.predecessors[2].phase = P::Retired;
    f.predecessors[1].retire = WorkOutcome::Applied;
    assert_eq!(decide(&f), Step::MarkRetired(vec![2]));
    f.predecessors[1].phase = P::Retired;
    assert_eq!(decide(&f), Step::PredecessorsRetired);
    f.predecessors_retired = true;
    assert_eq!(decide(&f), Step::Finished);
}

#[test]
fn activation_needs_exactly_ready_harness_and_gateway() {
    let mut f = fresh();
    f.phase = P::WaitingReady;
    f.namespace = WorkOutcome::Applied;
    f.gateway_applied = true;
    f.harness_sent = true;
    f.harness = WorkOutcome::Applied;
    f.gateway_ready = true;
    f.readiness = Some(Readiness {
        ready: false,
        live_candidates: 2,
        ready_candidates: 1,
        ..Default::default()
    });
    assert_eq!(decide(&f), WAIT);
    f.deadline = Some(t0());
    match failure(&decide(&f)) {
        Some(reason) => assert!(reason.contains("2 live Harness Pods"), "{reason}"),
        None => panic!("{:?}", decide(&f)),
    }
    f.readiness = Some(Readiness {
        error: Some("duplicate condition type Ready".into()),
        ..Default::default()
    });
    match failure(&decide(&f)) {
        Some(reason) => {
            assert!(reason.contains("duplicate condition type"), "{reason}")
        }
        None => panic!("{:?}", decide(&f)),
    }
    f.deadline = None;
    f.readiness = ready();
    f.gateway_ready = false;
    assert_eq!(
        decide(&f),
        gateway_recheck(),
        "only the Gateway is missing: look again soon"
    );
    f.gateway_ready = true;
    assert_eq!(decide(&f), Step::Activate);
}

#[test]
fn failures_and_aborts() {
    let mut f = fresh();
    f.phase = P::Provisioning;
    f.namespace_sent = true;
    f.namespace = WorkOutcome::Failed("quota".into());
    assert!(failure(&decide(&f)).is_some_and(|r| r.contains("quota")));
    let mut f = fresh();
    f.wanted = false;
    assert_eq!(
        decide(&f),
        entered(P::Stopped, EnterReason::Superseded),
        "nothing was sent"
    );
    f.agent_stopped = true;
    assert_eq!(
        decide(&f),
        entered(P::Stopped, EnterReason::AgentStopped),
        "the Agent was stopped, not superseded"
    );
    let mut f = fresh();
    f.phase = P::WaitingReady;
    f.namespace = WorkOutcome::Applied;
    f.gateway_applied = true;
    f.harness_sent = true;
    f.harness = WorkOutcome::Failed("image pull".into());
    assert!(failure(&decide(&f)).is_some_and(|r| r.contains("image pull")));
    for terminal in [P::Failed, P::Stopped, P::Retired] {
        let mut f = fresh();
        f.phase = terminal;
        assert_eq!(decide(&f), Step::Finished);
    }
}

#[test]
fn a_superseded_revision_is_stopped_only_once_its_cluster_confirms() {
    let mut f = fresh();
    f.phase = P::WaitingReady;
    f.namespace = WorkOutcome::Applied;
    f.gateway_applied = true;
    f.harness_sent = true;
    f.wanted = false;
    assert_eq!(decide(&f), Step::StopHarness);
    f.stop_sent = true;
    assert_eq!(
        decide(&f),
        entered(
            P::Stopping,
            EnterReason::ConfirmingStop {
                cluster: "exec-a".into()
            }
        )
    );
    f.phase = P::Stopping;
    assert_eq!(decide(&f), WAIT);
    f.deadline = Some(t0());
    assert_eq!(
        decide(&f),
        WAIT,
        "a stop has no deadline: it waits for the spoke"
    );
    f.stop = WorkOutcome::Applied;
    assert_eq!(decide(&f), entered(P::Stopped, EnterReason::Superseded));
}

#[test]
fn a_revoked_deployer_stops_the_pipeline_before_any_effect() {
    let mut f = fresh();
    f.phase = P::Preparing;
    f.namespace = WorkOutcome::Applied;
    f.denied = Some("token \"ci\" is revoked".into());
    assert!(failure(&decide(&f)).is_some_and(|r| r.contains("authorization re-check failed")));
    // Stopping needs no authority: a stop must always converge.
    f.wanted = false;
    f.harness_sent = true;
    assert_eq!(decide(&f), Step::StopHarness);
}

#[test]
fn a_restart_resumes_without_repeating_effects() {
    // Killed after the namespace was sent and the gateway applied: the
    // next decision continues from there.
    let mut f = fresh();
    f.phase = P::Preparing;
    f.namespace = WorkOutcome::Applied;
    f.gateway_applied = true;
    assert_eq!(decide(&f), Step::SendHarness);
    // Killed after activation was recorded but before the phase.
    f.harness_sent = true;
    f.harness = WorkOutcome::Applied;
    f.phase = P::WaitingReady;
    f.activated = true;
    assert_eq!(decide(&f), enter(P::Active));
}

#[test]
fn an_unplaced_failure_carries_why_no_cluster_took_it() {
    let why = format!("{WAITING_FOR_PLACEMENT}: no execution cluster is enrolled");
    let f = Facts {
        placed: false,
        deadline: Some(t0()),
        placement_wait: Some(why.clone()),
        ..fresh()
    };
    assert_eq!(
        failure(&decide(&f)).as_deref(),
        Some(
            format!("placement deadline passed: no online cluster matches the placement ({why})")
                .as_str()
        )
    );
    // Any failure while unplaced carries it.
    let f = Facts {
        placed: false,
        denied: Some("token revoked".into()),
        placement_wait: Some(why.clone()),
        ..fresh()
    };
    assert_eq!(
        failure(&decide(&f)),
        Some(format!(
            "authorization re-check failed: token revoked ({why})"
        ))
    );
    // Placed: the why of an earlier wait is no longer the story.
    let f = Facts {
        denied: Some("token revoked".into()),
        placement_wait: Some(why),
        ..fresh()
    };
    assert_eq!(
        decide(&f),
        Step::Fail(FailReason::Denied("token revoked".into()))
    );
}

#[test]
fn phase_deadlines_count_from_entering_the_phase() {
    let mut rev: crate::model::AgentRevision = serde_json::from_value(serde_json::json!({
        "id": "0190a0b0-0000-7000-8000-000000000002",
        "namespace": "team",
        "agent": "bot",
        "number": 1,
        "spec": { "harnessKind": "embedded-openclaw", "image": "reg.example/h:1" },
        "configuration": null,
        "images": [],
        "resolvedCluster": null,
        "phase": "pending",
        "reason": null,
        "rolledBackFrom": null,
        "createdAt": "2026-01-01T00:00:00Z",
        "updatedAt": "2026-01-01T00:00:00Z",
    }))
    .expect("revision");
    let created = rev.created_at;
    let d = Duration::from_secs(60);
    assert_eq!(
        phase_deadline(&rev, d),
        Some(created + chrono::Duration::seconds(60))
    );
    rev.phase = P::Provisioning;
    assert_eq!(phase_deadline(&rev, d), None, "never entered: no deadline");
    let entered = created + chrono::Duration::seconds(30);
    rev.progress
        .phases
        .insert(P::Provisioning.as_str().into(), entered);
    assert_eq!(
        phase_deadline(&rev, d),
        Some(entered + chrono::Duration::seconds(60))
    );
    rev.phase = P::Active;
    assert_eq!(phase_deadline(&rev, d), None);
}
