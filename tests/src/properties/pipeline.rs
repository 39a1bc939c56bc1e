//! The revision pipeline's `decide` (`clawfed_hub::pipeline`) as a state
//! machine driven through any sequence of fact changes.
//!
//! A case is a revision's static shape (dedicated with its control-cluster
//! Gateway, or embedded; placed at deploy or not; predecessors in any
//! phase with any stop state) and a sequence of events: hub passes of a few
//! steps (a hub killed mid-pass resumes from the facts), spoke answers to
//! each piece of work (retrying, applied, refused), readiness reports,
//! the Gateway's ensure (its own work item) applying, retrying or refusing,
//! Gateway readiness, phase deadlines, the Agent stopped or superseded, the
//! deployer denied, the cluster losing a capability, placement finding a
//! cluster or not. The model applies each step's effect to the facts the
//! way the driver (`worker/rollout.rs`) records it. After the events, the
//! world is fair (every sent work is answered, deadlines pass) until the
//! machine settles.
//!
//! Checked at every step: nothing but `Finished` after a terminal phase;
//! no effect for a denied deployer or an unwanted revision; no work sent
//! twice; the Gateway's ensure queued once, applied at most once and only
//! while the revision wants it; Harness work only after the namespace
//! applied and, for a dedicated Harness, every predecessor confirmed
//! stopped; activation only with a Ready Harness
//! report and, with a control-cluster Gateway, that Gateway Ready; every
//! failure with a reason; every step changes the facts and a pass settles
//! within 32 steps (never loops). At the end: active, failed (with a
//! reason) or stopped, and quiescent.

use clawfed_hub::model::RevisionPhase as P;
use clawfed_hub::pipeline::{
    Facts, Predecessor, Readiness, Step, WorkOutcome, decide, decide_stop, gateway_ensure_allowed,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

use super::{Property, report};

/// The rule under test: `decide` and `decide_stop` (real or broken copies).
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    pub decide: fn(&Facts) -> Step,
    pub decide_stop: fn(&Facts) -> Step,
}

/// The real rules.
pub const REAL: Rules = Rules {
    decide,
    decide_stop,
};

/// The pipeline property.
pub const DECIDE: Property = Property {
    name: "pipeline_decide",
    suite_cases: 384,
    run: |runner| run_decide(runner, REAL),
};

/// Passes of a hub settle within this many steps (as `advance_held`).
const PASS_LIMIT: usize = 32;
/// Fair rounds after the events before the machine must have settled.
const FAIR_ROUNDS: usize = 24;

/// What placement finds when the driver places.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placing {
    Chosen,
    Unavailable,
    Refused,
}

/// A spoke's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Retrying,
    Applied,
    Failed,
}

/// One change of the world, or a hub pass.
#[derive(Debug, Clone)]
pub enum Event {
    /// The hub runs at most `steps` steps; `stop_handler`: the stop
    /// handler's pass (`decide_stop`) when the Agent was stopped.
    Pass {
        steps: usize,
        stop_handler: bool,
    },
    Namespace(Answer),
    Harness(Answer),
    Stop(Answer),
    PredecessorStop(usize, Answer),
    PredecessorRetire(usize, Answer),
    Readiness {
        ready: bool,
        live: u32,
        error: bool,
    },
    /// The queued `gateway.ensure` work runs (under the Agent's lease):
    /// applied, a transient failure (retried later), or refused.
    GatewayEnsure(Answer),
    GatewayReady(bool),
    Deadline,
    AgentStopped,
    Superseded,
    Denied,
    CapabilityLost,
    Placing(Placing),
}

/// One generated run.
#[derive(Debug, Clone)]
pub struct Case {
    /// Dedicated runtime (its own control-cluster Gateway, predecessors
    /// stopped first) or embedded OpenClaw.
    pub dedicated: bool,
    pub placed: bool,
    pub placing: Placing,
    pub predecessors: Vec<Predecessor>,
    pub events: Vec<Event>,
    /// The fair world's answers, in turn: applied (true) or refused.
    pub answers: Vec<bool>,
}

fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        1 => Just(Answer::Retrying),
        4 => Just(Answer::Applied),
        1 => Just(Answer::Failed),
    ]
}

fn placing() -> impl Strategy<Value = Placing> {
    prop_oneof![
        6 => Just(Placing::Chosen),
        2 => Just(Placing::Unavailable),
        1 => Just(Placing::Refused),
    ]
}

fn outcome(a: Answer) -> WorkOutcome {
    match a {
        Answer::Retrying => WorkOutcome::Retrying("apiserver unavailable".into()),
        Answer::Applied => WorkOutcome::Applied,
        Answer::Failed => WorkOutcome::Failed("refused by the spoke".into()),
    }
}

fn predecessor() -> impl Strategy<Value = Predecessor> {
    let phase = proptest::sample::select(vec![
        P::Active,
        P::Active,
        P::WaitingReady,
        P::Stopping,
        P::Stopped,
        P::Failed,
        P::Retired,
    ]);
    let stop = proptest::option::of(answer());
    (
        phase,
        any::<bool>(),
        stop,
        proptest::sample::select(vec!["exec-a", "exec-b"]),
    )
        .prop_map(|(phase, harness_sent, stop, cluster)| {
            let mut p = Predecessor {
                number: 0,
                phase,
                cluster: Some(cluster.to_owned()),
                harness_sent,
                stop_sent: harness_sent && stop.is_some(),
                stop: match stop {
                    Some(a) if harness_sent => outcome(a),
                    _ => WorkOutcome::Waiting,
                },
                retire_sent: false,
                retire: WorkOutcome::Waiting,
                fenced: false,
            };
            // A stopped predecessor's cluster confirmed its stop.
            if phase == P::Stopped && harness_sent {
                p.stop_sent = true;
                p.stop = WorkOutcome::Applied;
            }
            p
        })
}

/// Events; the ones that end a revision early (stop, supersession,
/// denial, a lost capability) are rarer, so that most runs get far.
fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        24 => (1usize..8, prop_oneof![4 => Just(false), 1 => Just(true)])
            .prop_map(|(steps, stop_handler)| Event::Pass { steps, stop_handler }),
        9 => answer().prop_map(Event::Namespace),
        9 => answer().prop_map(Event::Harness),
        3 => answer().prop_map(Event::Stop),
        6 => (0usize..3, answer()).prop_map(|(i, a)| Event::PredecessorStop(i, a)),
        6 => (0usize..3, answer()).prop_map(|(i, a)| Event::PredecessorRetire(i, a)),
        9 => (any::<bool>(), 0u32..3, prop_oneof![5 => Just(false), 1 => Just(true)])
            .prop_map(|(ready, live, error)| Event::Readiness { ready, live, error }),
        6 => answer().prop_map(Event::GatewayEnsure),
        6 => any::<bool>().prop_map(Event::GatewayReady),
        2 => Just(Event::Deadline),
        1 => Just(Event::AgentStopped),
        1 => Just(Event::Superseded),
        1 => Just(Event::Denied),
        1 => Just(Event::CapabilityLost),
        2 => placing().prop_map(Event::Placing),
    ]
}

/// Any run.
pub fn case() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        prop_oneof![3 => Just(true), 1 => Just(false)],
        placing(),
        vec(predecessor(), 0..3),
        vec(event(), 0..40),
        vec(prop_oneof![3 => Just(true), 1 => Just(false)], 1..6),
    )
        .prop_map(
            |(dedicated, placed, placing, mut predecessors, events, answers)| {
                for (i, p) in predecessors.iter_mut().enumerate() {
                    p.number = i as i64 + 1;
                }
                Case {
                    dedicated,
                    placed,
                    placing,
                    predecessors,
                    events,
                    answers,
                }
            },
        )
}

/// The revision, the world around it, and what the driver recorded.
#[derive(Debug)]
struct Model {
    rules: Rules,
    facts: Facts,
    placing: Placing,
    agent_stopped: bool,
    /// The Gateway reports Ready (the driver reads it in `waiting-ready`).
    gateway_world: bool,
    /// The current phase's deadline passed (a new phase has a new one).
    deadline_world: bool,
    fail_reason: Option<String>,
    trace: Vec<Step>,
}

fn terminal(p: P) -> bool {
    matches!(p, P::Failed | P::Stopped | P::Retired)
}

fn has_deadline(p: P) -> bool {
    matches!(
        p,
        P::Pending | P::Provisioning | P::Preparing | P::WaitingReady
    )
}

fn open(o: &WorkOutcome) -> bool {
    matches!(o, WorkOutcome::Waiting | WorkOutcome::Retrying(_))
}

fn stopped(p: &Predecessor) -> bool {
    p.phase == P::Retired
        || !p.harness_sent
        || p.stop == WorkOutcome::Applied
        || p.retire == WorkOutcome::Applied
}

impl Model {
    fn new(c: &Case, rules: Rules) -> Self {
        Model {
            rules,
            facts: Facts {
                phase: P::Pending,
                wanted: true,
                denied: None,
                placed: c.placed,
                cluster: c.placed.then(|| "exec-a".to_owned()),
                agent_stopped: false,
                unservable: None,
                namespace_sent: false,
                namespace: WorkOutcome::Waiting,
                control_gateway: c.dedicated,
                gateway_queued: false,
                gateway_applied: false,
                exclusive: c.dedicated,
                predecessors: c.predecessors.clone(),
                harness_sent: false,
                harness: WorkOutcome::Waiting,
                stop_sent: false,
                stop: WorkOutcome::Waiting,
                readiness: None,
                gateway_ready: false,
                activated: false,
                predecessors_retired: false,
                now: chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("a valid time"),
                deadline: None,
                gateway_recheck: clawfed_hub::pipeline::DEFAULT_GATEWAY_RECHECK,
                placement_wait: None,
            },
            placing: c.placing,
            agent_stopped: false,
            gateway_world: false,
            deadline_world: false,
            fail_reason: None,
            trace: Vec::new(),
        }
    }

    /// The facts as the driver gathers them now.
    fn gathered(&mut self) -> Facts {
        let f = &mut self.facts;
        f.gateway_ready = f.control_gateway
            && f.gateway_applied
            && f.phase == P::WaitingReady
            && self.gateway_world;
        // A passed deadline is one at the decision's time.
        f.deadline = (self.deadline_world && has_deadline(f.phase)).then_some(f.now);
        f.agent_stopped = self.agent_stopped;
        f.clone()
    }

    /// Runs a pass of at most `limit` steps; true when it settled.
    fn pass(&mut self, limit: usize, stop_handler: bool) -> Result<bool, TestCaseError> {
        for _ in 0..limit {
            let f = self.gathered();
            let step = if stop_handler && self.agent_stopped {
                (self.rules.decide_stop)(&f)
            } else {
                (self.rules.decide)(&f)
            };
            self.trace.push(step.clone());
            check_step(&f, &step)?;
            if self.perform(&step) {
                return Ok(true);
            }
            let after = self.gathered();
            prop_assert!(
                after != f,
                "step {step:?} changed nothing: the machine would loop on it"
            );
        }
        Ok(false)
    }

    /// Applies a step's effect; true when the pass settles.
    fn perform(&mut self, step: &Step) -> bool {
        let f = &mut self.facts;
        let pick = |ps: &mut Vec<Predecessor>, ns: &[i64], g: &mut dyn FnMut(&mut Predecessor)| {
            ps.iter_mut().filter(|p| ns.contains(&p.number)).for_each(g);
        };
        match step {
            Step::Wait { .. } | Step::Finished => return true,
            Step::Place => match self.placing {
                Placing::Chosen => f.placed = true,
                Placing::Unavailable => return true,
                Placing::Refused => {
                    f.phase = P::Failed;
                    self.fail_reason = Some("placement refused: no capability".into());
                }
            },
            Step::SendNamespace => f.namespace_sent = true,
            Step::QueueGateway => f.gateway_queued = true,
            Step::StopPredecessors(ns) => {
                pick(&mut f.predecessors, ns, &mut |p| p.stop_sent = true);
            }
            Step::SendHarness => f.harness_sent = true,
            Step::Activate => f.activated = true,
            Step::RetirePredecessors(ns) => {
                pick(&mut f.predecessors, ns, &mut |p| p.retire_sent = true);
            }
            Step::MarkRetired(ns) => {
                pick(&mut f.predecessors, ns, &mut |p| p.phase = P::Retired);
            }
            Step::PredecessorsRetired => f.predecessors_retired = true,
            Step::StopHarness => f.stop_sent = true,
            Step::Enter { phase, .. } => {
                f.phase = *phase;
                self.deadline_world = false;
            }
            Step::Fail(reason) => {
                f.phase = P::Failed;
                self.fail_reason = Some(reason.to_string());
            }
        }
        false
    }

    fn event(&mut self, e: &Event) -> Result<(), TestCaseError> {
        let f = &mut self.facts;
        let answer = |sent: bool, o: &mut WorkOutcome, a: Answer| {
            if sent && open(o) {
                *o = outcome(a);
            }
        };
        match e {
            Event::Pass {
                steps,
                stop_handler,
            } => {
                self.pass(*steps, *stop_handler)?;
            }
            Event::Namespace(a) => answer(f.namespace_sent, &mut f.namespace, *a),
            Event::Harness(a) => answer(f.harness_sent, &mut f.harness, *a),
            Event::Stop(a) => answer(f.stop_sent, &mut f.stop, *a),
            Event::PredecessorStop(i, a) => {
                if let Some(p) = f.predecessors.get_mut(*i) {
                    answer(p.stop_sent, &mut p.stop, *a);
                }
            }
            Event::PredecessorRetire(i, a) => {
                if let Some(p) = f.predecessors.get_mut(*i) {
                    answer(p.retire_sent, &mut p.retire, *a);
                }
            }
            Event::Readiness { ready, live, error } => {
                if f.harness_sent {
                    f.readiness = Some(Readiness {
                        ready: *ready && !*error,
                        live_candidates: *live,
                        ready_candidates: u32::from(*ready && !*error),
                        reason: String::new(),
                        error: error.then(|| "incomplete pod list".to_owned()),
                    });
                }
            }
            Event::GatewayEnsure(a) => self.ensure_gateway(*a)?,
            Event::GatewayReady(r) => self.gateway_world = *r,
            Event::Deadline => self.deadline_world = true,
            Event::AgentStopped => {
                f.wanted = false;
                self.agent_stopped = true;
            }
            Event::Superseded => f.wanted = false,
            Event::Denied => f.denied = Some("bootstrap token revoked".into()),
            Event::CapabilityLost => {
                if f.placed {
                    f.unservable = Some("no provisioning SandboxDriver".into());
                }
            }
            Event::Placing(p) => self.placing = *p,
        }
        Ok(())
    }

    /// The queued Gateway ensure runs with answer `a`, as the
    /// `gateway.ensure` handler does: nothing unless it is queued and the
    /// revision still wants it; applied, or the revision failed.
    fn ensure_gateway(&mut self, a: Answer) -> Result<(), TestCaseError> {
        let f = &mut self.facts;
        if !f.gateway_queued || !gateway_ensure_allowed(f) {
            return Ok(());
        }
        prop_assert!(
            f.wanted && f.denied.is_none() && !terminal(f.phase) && f.phase != P::Active,
            "a Gateway applied for a revision that does not want it: {f:?}"
        );
        match a {
            Answer::Applied => f.gateway_applied = true,
            Answer::Retrying => {}
            Answer::Failed => {
                f.phase = P::Failed;
                self.fail_reason = Some("gateway: refused by the control cluster".into());
            }
        }
        Ok(())
    }

    /// The fair world, first half: every open piece of sent work is
    /// answered, placement finds a cluster, and a Harness that applied
    /// gets a readiness report and its Gateway a state (each a turn of
    /// `answers`).
    /// True when anything changed.
    fn answer_all(&mut self, answers: &[bool], turn: &mut usize) -> bool {
        let mut next = || {
            let a = answers[*turn % answers.len()];
            *turn += 1;
            a
        };
        let before = (self.facts.clone(), self.gateway_world, self.placing);
        let f = &mut self.facts;
        let mut settle = |sent: bool, o: &mut WorkOutcome| {
            if sent && open(o) {
                *o = outcome(if next() {
                    Answer::Applied
                } else {
                    Answer::Failed
                });
            }
        };
        settle(f.namespace_sent, &mut f.namespace);
        settle(f.harness_sent, &mut f.harness);
        settle(f.stop_sent, &mut f.stop);
        for p in &mut f.predecessors {
            settle(p.stop_sent, &mut p.stop);
            settle(p.retire_sent, &mut p.retire);
        }
        if f.harness == WorkOutcome::Applied && f.readiness.is_none() {
            let ready = next();
            f.readiness = Some(Readiness {
                ready,
                live_candidates: 1,
                ready_candidates: u32::from(ready),
                reason: String::new(),
                error: None,
            });
        }
        if f.gateway_applied && !self.gateway_world {
            self.gateway_world = next();
        }
        if f.gateway_queued && gateway_ensure_allowed(f) {
            let a = if next() {
                Answer::Applied
            } else {
                Answer::Failed
            };
            // Allowed, so the handler's own check cannot fail here.
            let _ = self.ensure_gateway(a);
        }
        if self.placing == Placing::Unavailable {
            self.placing = Placing::Chosen;
        }
        before != (self.facts.clone(), self.gateway_world, self.placing)
    }
}

/// The safety rules of one step decided from `f`.
fn check_step(f: &Facts, step: &Step) -> Result<(), TestCaseError> {
    if terminal(f.phase) {
        prop_assert_eq!(step, &Step::Finished, "a step after terminal {:?}", f.phase);
        return Ok(());
    }
    let effect_allowed = f.wanted && f.denied.is_none();
    match step {
        Step::Wait { .. } | Step::Finished => {}
        Step::Place => {
            prop_assert!(effect_allowed && !f.placed, "placing: {f:?}");
        }
        Step::SendNamespace => {
            prop_assert!(effect_allowed && f.placed, "namespace work: {f:?}");
            prop_assert!(!f.namespace_sent, "namespace work sent twice");
        }
        Step::QueueGateway => {
            prop_assert!(effect_allowed && f.control_gateway, "gateway: {f:?}");
            prop_assert!(!f.gateway_queued, "gateway ensure queued twice");
            prop_assert!(!f.gateway_applied, "gateway applied twice");
            prop_assert_eq!(&f.namespace, &WorkOutcome::Applied);
        }
        Step::StopPredecessors(ns) => {
            prop_assert!(effect_allowed && !ns.is_empty(), "stop predecessors: {f:?}");
            for n in ns {
                let p = f.predecessors.iter().find(|p| p.number == *n);
                prop_assert!(
                    p.is_some_and(|p| p.harness_sent && !p.stop_sent && p.phase != P::Retired),
                    "stop of predecessor {n} not due: {f:?}"
                );
            }
        }
        Step::SendHarness => {
            prop_assert!(effect_allowed && f.placed, "harness work: {f:?}");
            prop_assert!(!f.harness_sent, "harness work sent twice");
            prop_assert_eq!(&f.namespace, &WorkOutcome::Applied);
            prop_assert!(f.unservable.is_none(), "harness to an unservable cluster");
            // Gateway and Harness are prepared together (the Harness goes
            // out first, in the same pass); activation still requires the
            // Gateway Ready (checked at `Activate`).
            if f.exclusive {
                for p in &f.predecessors {
                    prop_assert!(
                        stopped(p),
                        "dedicated Harness sent before predecessor {} is stopped: {p:?}",
                        p.number
                    );
                }
            }
        }
        Step::Activate => {
            prop_assert!(effect_allowed && !f.activated, "activation: {f:?}");
            prop_assert_eq!(f.phase, P::WaitingReady);
            prop_assert_eq!(&f.harness, &WorkOutcome::Applied);
            prop_assert!(
                f.readiness.as_ref().is_some_and(|r| r.ready),
                "activated without a Ready Harness report: {:?}",
                f.readiness
            );
            if f.control_gateway {
                prop_assert!(
                    f.gateway_applied && f.gateway_ready,
                    "activated without its Gateway Ready"
                );
            }
        }
        Step::RetirePredecessors(ns) => {
            prop_assert_eq!(f.phase, P::Active);
            prop_assert!(!ns.is_empty());
            for n in ns {
                let p = f.predecessors.iter().find(|p| p.number == *n);
                prop_assert!(
                    p.is_some_and(|p| p.harness_sent && !p.retire_sent && p.phase != P::Retired),
                    "retirement of predecessor {n} not due: {f:?}"
                );
            }
        }
        Step::MarkRetired(ns) => {
            prop_assert_eq!(f.phase, P::Active);
            for n in ns {
                let p = f.predecessors.iter().find(|p| p.number == *n);
                prop_assert!(
                    p.is_some_and(|p| !p.harness_sent || p.retire == WorkOutcome::Applied),
                    "predecessor {n} marked retired before its cluster confirmed: {f:?}"
                );
            }
        }
        Step::PredecessorsRetired => {
            prop_assert_eq!(f.phase, P::Active);
            prop_assert!(f.predecessors.iter().all(|p| p.phase == P::Retired));
        }
        Step::StopHarness => {
            prop_assert!(!f.wanted, "stopping a wanted revision");
            prop_assert!(f.harness_sent && !f.stop_sent, "stop not due: {f:?}");
        }
        Step::Enter { phase: p, reason } => match p {
            P::Active => prop_assert!(f.activated, "active without activation"),
            P::Stopping => {
                prop_assert!(!f.wanted && f.stop_sent);
                prop_assert!(
                    reason.is_some(),
                    "stopping without saying what it waits for"
                );
            }
            P::Stopped => {
                prop_assert!(!f.wanted, "a wanted revision stopped");
                prop_assert!(reason.is_some(), "stopped without saying why");
                prop_assert!(
                    !f.harness_sent || f.stop == WorkOutcome::Applied,
                    "stopped before its cluster confirmed the stop"
                );
            }
            P::Preparing => prop_assert_eq!(&f.namespace, &WorkOutcome::Applied),
            P::WaitingReady => prop_assert_eq!(&f.harness, &WorkOutcome::Applied),
            P::Failed | P::Retired => prop_assert!(false, "{p:?} entered without a reason"),
            _ => {}
        },
        Step::Fail(reason) => {
            prop_assert!(!reason.to_string().is_empty(), "a failure without a reason")
        }
    }
    Ok(())
}

/// The property for one run.
pub fn check_run(rules: Rules, c: &Case) -> Result<(), TestCaseError> {
    let mut m = Model::new(c, rules);
    for e in &c.events {
        m.event(e)?;
    }
    // The fair world: answers; the phase's deadline passes only when
    // nothing else is left to happen.
    let mut turn = 0;
    for _ in 0..FAIR_ROUNDS {
        prop_assert!(
            m.pass(PASS_LIMIT, true)?,
            "a pass did not settle in {PASS_LIMIT} steps"
        );
        let f = &m.facts;
        if terminal(f.phase) || (f.phase == P::Active && f.predecessors_retired) {
            break;
        }
        if !m.answer_all(&c.answers, &mut turn) {
            m.deadline_world = true;
        }
    }
    let f = m.gathered();
    let waiting_on_refused_retirement = f
        .predecessors
        .iter()
        .any(|p| p.phase != P::Retired && matches!(p.retire, WorkOutcome::Failed(_)));
    match f.phase {
        P::Failed => prop_assert!(
            m.fail_reason.as_deref().is_some_and(|r| !r.is_empty()),
            "failed without a reason"
        ),
        P::Stopped => prop_assert!(!f.wanted),
        P::Active => prop_assert!(
            f.activated && (f.predecessors_retired || waiting_on_refused_retirement),
            "active, yet its predecessors are neither retired nor refused: {f:?}"
        ),
        other => prop_assert!(
            false,
            "did not end active, failed or stopped: {other:?}, steps {:?}",
            m.trace
        ),
    }
    // Quiescent: nothing more to do in the end state.
    let step = if m.agent_stopped {
        (rules.decide_stop)(&f)
    } else {
        (rules.decide)(&f)
    };
    prop_assert!(
        matches!(step, Step::Wait { .. } | Step::Finished),
        "end state still decides {step:?}"
    );
    Ok(())
}

/// Runs the pipeline property against `rules`.
pub fn run_decide(runner: &mut TestRunner, rules: Rules) -> Result<(), String> {
    report(runner.run(&case(), |c| check_run(rules, &c)))
}

/// A deliberately broken copy of `decide`: activates once the Harness is
/// Ready, without waiting for the control-cluster Gateway.
pub fn broken_ignores_gateway(f: &Facts) -> Step {
    let step = decide(f);
    let harness_ready = f.readiness.as_ref().is_some_and(|r| r.ready);
    if f.phase == P::WaitingReady
        && f.wanted
        && !f.activated
        && harness_ready
        && matches!(step, Step::Wait { .. })
    {
        return Step::Activate;
    }
    step
}

/// A deliberately broken copy of `decide`: a dedicated Harness is sent as
/// soon as the predecessors' stops are sent, not confirmed.
pub fn broken_does_not_wait_for_stops(f: &Facts) -> Step {
    let step = decide(f);
    if f.exclusive
        && f.phase == P::Preparing
        && !f.harness_sent
        && f.wanted
        && f.denied.is_none()
        && f.namespace == WorkOutcome::Applied
        && f.gateway_queued
        && matches!(step, Step::Wait { .. })
        && f.predecessors
            .iter()
            .all(|p| p.stop_sent || !p.harness_sent)
    {
        return Step::SendHarness;
    }
    step
}
