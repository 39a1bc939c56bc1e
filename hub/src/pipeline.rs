//! The revision pipeline as a pure state machine: given what is durably
//! known about a revision (its facts), decide the one next step.
//!
//! provision namespace → prepare (Gateway in the control cluster; stop
//! dedicated predecessors; Harness via the spoke) → readiness → activate
//! (route to the new revision; an activation error happens before routing
//! changes) → retire the predecessors.
//!
//! Every effect the driver performs is idempotent and its completion is
//! recorded before the next decision, so a hub killed at any point resumes
//! from the facts and never repeats an effect in a way that matters.

use crate::model::RevisionPhase;

/// A spoke's answer to one piece of work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkOutcome {
    /// Not answered yet.
    Waiting,
    Applied,
    Failed(String),
}

/// What the latest readiness report says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Readiness {
    pub ready: bool,
    pub live_candidates: u32,
}

/// What is durably known about a revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub phase: RevisionPhase,
    /// The Agent's desired state is still `running` for this revision (it
    /// is the latest and was not stopped).
    pub wanted: bool,
    /// The cluster the revision is placed on is known.
    pub placed: bool,
    /// The namespace work is in the cluster's outbox.
    pub namespace_sent: bool,
    pub namespace: WorkOutcome,
    pub gateway_applied: bool,
    /// Dedicated Harnesses need their predecessors stopped first.
    pub dedicated: bool,
    pub predecessors_stopped: bool,
    /// The Harness work is in the cluster's outbox.
    pub harness_sent: bool,
    pub harness: WorkOutcome,
    pub readiness: Option<Readiness>,
    pub gateway_ready: bool,
    pub activated: bool,
    pub predecessors_retired: bool,
    /// The readiness deadline passed.
    pub deadline_passed: bool,
}

/// The next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do until a report or the deadline arrives.
    Wait,
    /// No cluster can take the revision yet; try again later.
    Place,
    SendNamespace,
    ApplyGateway,
    StopPredecessors,
    SendHarness,
    Activate,
    RetirePredecessors,
    /// Record the phase (and reason); nothing else changes.
    Enter(RevisionPhase),
    Fail(String),
    /// Terminal: nothing more to do.
    Finished,
}

/// Decides the next step from the facts.
pub fn decide(f: &Facts) -> Step {
    use RevisionPhase as P;
    match f.phase {
        P::Active | P::Retired | P::Stopped | P::Failed => {
            // Retiring predecessors is the tail of activation.
            if f.phase == P::Active && !f.predecessors_retired {
                return Step::RetirePredecessors;
            }
            return Step::Finished;
        }
        P::Pending | P::Provisioning | P::Preparing | P::WaitingReady => {}
    }
    if !f.wanted {
        // A newer revision or a stop took over before this one activated.
        return Step::Enter(P::Stopped);
    }
    if !f.placed {
        return Step::Place;
    }
    match &f.namespace {
        WorkOutcome::Failed(reason) => {
            return Step::Fail(format!("namespace provisioning failed: {reason}"));
        }
        WorkOutcome::Waiting if !f.namespace_sent => return Step::SendNamespace,
        WorkOutcome::Waiting if f.phase == P::Pending => return Step::Enter(P::Provisioning),
        WorkOutcome::Waiting => return Step::Wait,
        WorkOutcome::Applied => {}
    }
    if f.phase == P::Pending || f.phase == P::Provisioning {
        return Step::Enter(P::Preparing);
    }
    if !f.gateway_applied {
        return Step::ApplyGateway;
    }
    if f.dedicated && !f.predecessors_stopped {
        return Step::StopPredecessors;
    }
    match &f.harness {
        WorkOutcome::Failed(reason) => {
            return Step::Fail(format!("harness preparation failed: {reason}"));
        }
        WorkOutcome::Waiting if !f.harness_sent => return Step::SendHarness,
        WorkOutcome::Waiting => return Step::Wait,
        WorkOutcome::Applied if f.phase == P::Preparing => {
            return Step::Enter(P::WaitingReady);
        }
        WorkOutcome::Applied => {}
    }
    // Waiting for readiness: both the Harness (spoke report) and the
    // Gateway must be ready.
    let harness_ready = f.readiness.is_some_and(|r| r.ready);
    if harness_ready && f.gateway_ready && !f.activated {
        return Step::Activate;
    }
    if f.activated {
        return Step::Enter(P::Active);
    }
    if f.deadline_passed {
        let why = match f.readiness {
            None => "no readiness report from the spoke".to_owned(),
            Some(r) if r.live_candidates == 0 => "no live Harness Pod".to_owned(),
            Some(r) if r.live_candidates > 1 => {
                format!(
                    "{} live Harness Pods carry the revision's labels (must be exactly one)",
                    r.live_candidates
                )
            }
            Some(r) if !r.ready => "the Harness Pod is not Ready".to_owned(),
            Some(_) => "the Gateway is not Ready".to_owned(),
        };
        return Step::Fail(format!("readiness deadline passed: {why}"));
    }
    Step::Wait
}

#[cfg(test)]
mod tests {
    use super::*;
    use RevisionPhase as P;

    fn fresh() -> Facts {
        Facts {
            phase: P::Pending,
            wanted: true,
            placed: true,
            namespace_sent: false,
            namespace: WorkOutcome::Waiting,
            gateway_applied: false,
            dedicated: false,
            predecessors_stopped: false,
            harness_sent: false,
            harness: WorkOutcome::Waiting,
            readiness: None,
            gateway_ready: false,
            activated: false,
            predecessors_retired: false,
            deadline_passed: false,
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
                Step::Wait | Step::Finished | Step::Place => return (steps, f),
                Step::SendNamespace => {
                    f.namespace_sent = true;
                    f.phase = P::Provisioning;
                }
                Step::Enter(p) => f.phase = *p,
                Step::ApplyGateway => f.gateway_applied = true,
                Step::StopPredecessors => f.predecessors_stopped = true,
                Step::SendHarness => f.harness_sent = true,
                Step::Activate => f.activated = true,
                Step::RetirePredecessors => f.predecessors_retired = true,
                Step::Fail(_) => {
                    f.phase = P::Failed;
                }
            }
            world(&mut f);
        }
        panic!("did not settle: {steps:?}");
    }

    #[test]
    fn happy_path_in_order() {
        let (steps, f) = drive(fresh(), |f| {
            // The spoke answers everything at once; the Gateway is Ready.
            if f.phase == P::Provisioning {
                f.namespace = WorkOutcome::Applied;
            }
            if f.gateway_applied {
                f.gateway_ready = true;
            }
        });
        assert_eq!(
            steps,
            vec![
                Step::SendNamespace,
                Step::Enter(P::Preparing),
                Step::ApplyGateway,
                Step::SendHarness,
                Step::Wait,
            ]
        );
        // The Harness applies and becomes Ready: activation, then retire.
        let mut f = f;
        f.harness = WorkOutcome::Applied;
        let (steps, f) = drive(f, |f| {
            f.readiness = Some(Readiness {
                ready: true,
                live_candidates: 1,
            })
        });
        assert_eq!(
            steps,
            vec![
                Step::Enter(P::WaitingReady),
                Step::Activate,
                Step::Enter(P::Active),
                Step::RetirePredecessors,
                Step::Finished,
            ]
        );
        assert!(f.predecessors_retired);
    }

    #[test]
    fn dedicated_replacement_stops_predecessors_before_the_harness() {
        let mut f = fresh();
        f.phase = P::Preparing;
        f.namespace = WorkOutcome::Applied;
        f.gateway_applied = true;
        f.dedicated = true;
        assert_eq!(decide(&f), Step::StopPredecessors);
        f.predecessors_stopped = true;
        assert_eq!(decide(&f), Step::SendHarness);
        f.harness_sent = true;
        assert_eq!(decide(&f), Step::Wait, "sent once, then wait for the spoke");
    }

    #[test]
    fn activation_needs_exactly_ready_harness_and_gateway() {
        let mut f = fresh();
        f.phase = P::WaitingReady;
        f.namespace = WorkOutcome::Applied;
        f.gateway_applied = true;
        f.harness = WorkOutcome::Applied;
        f.gateway_ready = true;
        f.readiness = Some(Readiness {
            ready: false,
            live_candidates: 2,
        });
        assert_eq!(decide(&f), Step::Wait);
        f.deadline_passed = true;
        match decide(&f) {
            Step::Fail(reason) => assert!(reason.contains("2 live Harness Pods"), "{reason}"),
            other => panic!("{other:?}"),
        }
        f.deadline_passed = false;
        f.readiness = Some(Readiness {
            ready: true,
            live_candidates: 1,
        });
        f.gateway_ready = false;
        assert_eq!(decide(&f), Step::Wait, "gateway not ready yet");
        f.gateway_ready = true;
        assert_eq!(decide(&f), Step::Activate);
    }

    #[test]
    fn failures_and_aborts() {
        let mut f = fresh();
        f.phase = P::Provisioning;
        f.namespace_sent = true;
        f.namespace = WorkOutcome::Failed("quota".into());
        assert!(matches!(decide(&f), Step::Fail(r) if r.contains("quota")));
        let mut f = fresh();
        f.wanted = false;
        assert_eq!(decide(&f), Step::Enter(P::Stopped));
        let mut f = fresh();
        f.placed = false;
        assert_eq!(decide(&f), Step::Place);
        let mut f = fresh();
        f.phase = P::WaitingReady;
        f.namespace = WorkOutcome::Applied;
        f.gateway_applied = true;
        f.harness = WorkOutcome::Failed("image pull".into());
        assert!(matches!(decide(&f), Step::Fail(r) if r.contains("image pull")));
        for terminal in [P::Failed, P::Stopped, P::Retired] {
            let mut f = fresh();
            f.phase = terminal;
            assert_eq!(decide(&f), Step::Finished);
        }
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
        f.harness = WorkOutcome::Applied;
        f.phase = P::WaitingReady;
        f.activated = true;
        assert_eq!(decide(&f), Step::Enter(P::Active));
    }
}
