//! The revision pipeline as a pure state machine: given what is durably
//! known about a revision (its facts), decide the one next step. No I/O:
//! the driver (`worker/rollout.rs`) gathers the facts and performs steps.
//!
//! provision namespace → prepare (stop the predecessors, each on its
//! own cluster; Harness via the spoke, then the Gateway's ensure queued as
//! work of its own lane, which applies it in the control cluster) →
//! readiness → activate (route to the new
//! revision; an activation error happens before routing changes) → retire
//! the predecessors.
//!
//! Every effect the driver performs is idempotent and its completion is
//! recorded before the next decision, so a hub killed at any point resumes
//! from the facts and never repeats an effect in a way that matters.
//!
//! Every phase that waits for someone else has a deadline that ends in a
//! failure naming what was missing, except `stopping`: a stop waits for the
//! spoke to confirm it, because calling it done earlier would hide a Harness
//! that may still run.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::RevisionPhase;

pub mod placement;

pub use placement::{
    Placement, Reason as UnplacedReason, Request as PlacementRequest, WAITING_FOR_PLACEMENT,
    choose_cluster, unplaced_reason, why_not,
};

/// The default of `pipeline.gatewayRecheckMs`: how soon a pass looks at
/// the Gateway again while it alone is not Ready. No spoke report announces
/// control-cluster state; the hub's watch of the Gateways wakes the pass
/// when one turns Ready (`gateway::watch`), so this is only a slow safety
/// net (a wake-up lost to a failed store write, or a runtime without a
/// watch).
pub const DEFAULT_GATEWAY_RECHECK: Duration = Duration::from_secs(10);

/// A spoke's answer to one piece of work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkOutcome {
    /// Not answered yet.
    Waiting,
    /// Not applied yet; the spoke keeps retrying a transient failure.
    Retrying(String),
    Applied,
    /// Refused for good, with the spoke's reason.
    Failed(String),
}

impl WorkOutcome {
    pub fn is_applied(&self) -> bool {
        matches!(self, WorkOutcome::Applied)
    }

    /// What the hub is waiting for, for a deadline failure.
    fn waiting_for(&self, what: &str) -> String {
        match self {
            WorkOutcome::Retrying(reason) => {
                format!("{what}: the spoke is still retrying: {reason}")
            }
            _ => format!("{what}: no result from the spoke"),
        }
    }
}

/// What the latest readiness report of the revision says (the spoke's
/// verdict under the readiness contract, kept whole).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Readiness {
    pub ready: bool,
    pub live_candidates: u32,
    pub ready_candidates: u32,
    /// The spoke's reason for its verdict.
    pub reason: String,
    /// Set when the observation was malformed or incomplete: an error, not
    /// a verdict.
    pub error: Option<String>,
}

impl Readiness {
    /// Why the revision is not ready, for a deadline failure.
    fn not_ready_because(&self) -> String {
        if let Some(error) = &self.error {
            return format!("the Harness Pods could not be observed: {error}");
        }
        let base = match self.live_candidates {
            0 => "no live Harness Pod".to_owned(),
            1 => "the Harness Pod is not Ready".to_owned(),
            n => format!("{n} live Harness Pods carry the revision's labels (must be exactly one)"),
        };
        if self.reason.is_empty() {
            base
        } else {
            format!("{base} ({})", self.reason)
        }
    }
}

/// An earlier revision of the same Agent that is not retired yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Predecessor {
    pub number: i64,
    pub phase: RevisionPhase,
    /// The cluster it was placed on: its own, which need not be the
    /// successor's.
    pub cluster: Option<String>,
    /// Harness work for it is (or was) in its cluster's outbox.
    pub harness_sent: bool,
    /// A stop (or a retirement, which includes one) was sent to its cluster.
    pub stop_sent: bool,
    /// The result of that stop (or retirement).
    pub stop: WorkOutcome,
    pub retire_sent: bool,
    pub retire: WorkOutcome,
    /// Its cluster's spoke has fenced it: the failover period plus its
    /// margin passed since the cluster's lease was last renewed
    /// (`crate::failover::lapsed`). Nothing of it runs, although the
    /// cluster (lost) cannot confirm the stop.
    pub fenced: bool,
}

impl Predecessor {
    /// Nothing of it runs any more as far as its cluster confirmed, or
    /// its spoke fenced it.
    fn stopped(&self) -> bool {
        !self.harness_sent || self.stop.is_applied() || self.retire.is_applied() || self.fenced
    }

    fn retired(&self) -> bool {
        self.phase == RevisionPhase::Retired
    }
}

/// What is durably known about a revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub phase: RevisionPhase,
    /// The Agent's desired state is still `running` for this revision (it
    /// is the latest and was not stopped).
    pub wanted: bool,
    /// The deployer may no longer deploy here (token revoked, expired or
    /// its role changed): the reason. Checked before every effect.
    pub denied: Option<String>,
    /// The cluster the revision is placed on is known.
    pub placed: bool,
    /// The name of the cluster it is placed on, as recorded.
    pub cluster: Option<String>,
    /// The Agent's desired state is `stopped` (not merely superseded).
    pub agent_stopped: bool,
    /// The cluster it is placed on cannot serve it (its spoke lacks a
    /// capability the revision needs): why.
    pub unservable: Option<String>,
    /// The namespace work is in the cluster's outbox.
    pub namespace_sent: bool,
    pub namespace: WorkOutcome,
    /// The revision has a Gateway of its own in the control cluster
    /// (dedicated runtimes); embedded OpenClaw serves its gateway from the
    /// data-plane workload.
    pub control_gateway: bool,
    /// The Gateway's ensure is queued (`gateway.ensure`); it applies the
    /// Gateway and records `gateway_applied`, or fails the revision.
    pub gateway_queued: bool,
    pub gateway_applied: bool,
    /// The replacement is exclusive: every predecessor is stopped before
    /// the Harness starts (the Agent-owned RWO claim is mounted by one
    /// runtime at a time; see `HarnessKind::replaces_exclusively`).
    pub exclusive: bool,
    pub predecessors: Vec<Predecessor>,
    /// The Harness work is in the cluster's outbox.
    pub harness_sent: bool,
    pub harness: WorkOutcome,
    /// This revision's own Harness stop (superseded or stopped Agent).
    pub stop_sent: bool,
    pub stop: WorkOutcome,
    pub readiness: Option<Readiness>,
    pub gateway_ready: bool,
    pub activated: bool,
    pub predecessors_retired: bool,
    /// The time of this decision (the store's clock).
    pub now: DateTime<Utc>,
    /// The current phase's deadline ([`phase_deadline`]), if it has one.
    pub deadline: Option<DateTime<Utc>>,
    /// How soon a pass looks at the Gateway again while it alone is not
    /// Ready (`pipeline.gatewayRecheckMs`): no report announces it.
    pub gateway_recheck: Duration,
    /// Unplaced: why, as the last placement attempt found it
    /// ([`placement_wait`]); a failure while unplaced carries it.
    pub placement_wait: Option<String>,
}

impl Facts {
    /// The current phase's deadline has passed.
    fn deadline_passed(&self) -> bool {
        self.deadline.is_some_and(|d| d <= self.now)
    }

    /// The deadline, while it is still ahead: when a waiting pass must
    /// look again even if no report comes.
    fn deadline_ahead(&self) -> Option<DateTime<Utc>> {
        self.deadline.filter(|d| *d > self.now)
    }
}

/// The next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do until a report or a wake-up arrives; the driver
    /// queues a pass at `until` (the phase's deadline, or sooner the
    /// Gateway's recheck), since nothing else may come.
    Wait {
        until: Option<DateTime<Utc>>,
    },
    /// Choose a cluster for the revision.
    Place,
    SendNamespace,
    /// Queue the Gateway's ensure (its own work item and lane, so this
    /// pass does not wait on the control apiserver).
    QueueGateway,
    /// Send Harness stops for these predecessors, each to its own cluster.
    StopPredecessors(Vec<i64>),
    SendHarness,
    Activate,
    /// Send the destructive cleanup for these predecessors (each to its
    /// own cluster) and remove their Gateway revision.
    RetirePredecessors(Vec<i64>),
    /// Their clusters confirmed the cleanup (or never ran them): retired.
    MarkRetired(Vec<i64>),
    /// Every predecessor is retired: activation is complete.
    PredecessorsRetired,
    /// Send this revision's own Harness stop to its cluster.
    StopHarness,
    /// Record the phase, with the reason the revision shows; nothing else
    /// changes.
    Enter {
        phase: RevisionPhase,
        reason: Option<EnterReason>,
    },
    /// The revision failed: why.
    Fail(FailReason),
    /// Terminal: nothing more to do.
    Finished,
}

/// Why a revision enters a phase, as the revision shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnterReason {
    /// Stopping: its cluster has not confirmed the Harness stop yet.
    ConfirmingStop { cluster: String },
    /// Stopped because its Agent was stopped.
    AgentStopped,
    /// Stopped because a newer revision took over.
    Superseded,
}

impl fmt::Display for EnterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ConfirmingStop { cluster } => {
                write!(
                    f,
                    "waiting for cluster {cluster} to confirm the Harness stop"
                )
            }
            Self::AgentStopped => f.write_str("agent stopped"),
            Self::Superseded => f.write_str("superseded by a newer revision"),
        }
    }
}

/// The phase whose deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlinePhase {
    Provisioning,
    Preparation,
    Readiness,
}

impl DeadlinePhase {
    fn as_str(self) -> &'static str {
        match self {
            Self::Provisioning => "provisioning",
            Self::Preparation => "preparation",
            Self::Readiness => "readiness",
        }
    }
}

/// Why a revision failed, as the revision shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailReason {
    /// Its deployer may no longer deploy here.
    Denied(String),
    /// No online cluster matched the placement before the deadline.
    PlacementDeadline,
    /// The clusters that match cannot serve it (see [`cannot_serve`]).
    PlacementRefused(String),
    /// The spoke refused the namespace work.
    Namespace(String),
    /// A phase's deadline passed while waiting for what is named.
    Deadline {
        phase: DeadlinePhase,
        waiting_for: String,
    },
    /// A predecessor's stop, needed before the new Harness starts, failed.
    PredecessorStop { number: i64, reason: String },
    /// The spoke refused the Harness work.
    Harness(String),
    /// The spoke refused this revision's own Harness stop.
    StopRefused(String),
    /// `reason`, while the revision was still unplaced: `why` it was.
    Unplaced {
        reason: Box<FailReason>,
        why: String,
    },
}

impl fmt::Display for FailReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Denied(r) => write!(f, "authorization re-check failed: {r}"),
            Self::PlacementDeadline => {
                f.write_str("placement deadline passed: no online cluster matches the placement")
            }
            Self::PlacementRefused(why) => write!(f, "placement refused: {why}"),
            Self::Namespace(r) => write!(f, "namespace provisioning failed: {r}"),
            Self::Deadline { phase, waiting_for } => {
                write!(f, "{} deadline passed: {waiting_for}", phase.as_str())
            }
            Self::PredecessorStop { number, reason } => write!(
                f,
                "stopping revision {number} before the new Harness starts failed: {reason}"
            ),
            Self::Harness(r) => write!(f, "harness preparation failed: {r}"),
            Self::StopRefused(r) => write!(f, "the spoke refused the stop: {r}"),
            Self::Unplaced { reason, why } => write!(f, "{reason} ({why})"),
        }
    }
}

/// Waits until the phase's deadline (if still ahead).
fn wait(f: &Facts) -> Step {
    Step::Wait {
        until: f.deadline_ahead(),
    }
}

/// Enters `phase` with nothing to add.
fn enter(phase: RevisionPhase) -> Step {
    Step::Enter {
        phase,
        reason: None,
    }
}

/// A deadline failure.
fn deadline(phase: DeadlinePhase, waiting_for: String) -> Step {
    Step::Fail(FailReason::Deadline { phase, waiting_for })
}

/// What a revision's Harness needs of its cluster's spoke: provider
/// execution needs a provisioning SandboxDriver; dedicated native OpenClaw
/// also needs that driver to declare networking, filesystem and process
/// containment.
pub fn needs(spec: &crate::model::AgentSpec) -> clawfed_proto::capability::Needs {
    use crate::model::{ExecutionMode, HarnessKind};
    clawfed_proto::capability::Needs {
        provisioning_driver: spec.execution_mode == ExecutionMode::Provider,
        containment: spec.harness_kind == HarnessKind::DedicatedOpenclaw,
    }
}

/// Why `cluster` cannot serve a revision with `needs`, or `None` when it
/// can. A cluster whose spoke never connected has advertised nothing yet:
/// it is not refused on that account.
pub fn cannot_serve(
    cluster: &crate::model::Cluster,
    needs: clawfed_proto::capability::Needs,
) -> Option<String> {
    if cluster.connection_state == crate::model::ConnectionState::Pending {
        return None;
    }
    let missing = needs.missing(&cluster.capabilities);
    (!missing.is_empty()).then(|| {
        format!(
            "cluster {} cannot serve the revision: its spoke does not advertise {}",
            cluster.name,
            missing.join(", ")
        )
    })
}

/// Why revision `rev` is still unplaced, as its last placement attempt
/// found it ([`unplaced_reason`]); `None` once it is placed.
pub fn placement_wait(rev: &crate::model::AgentRevision) -> Option<String> {
    rev.resolved_cluster
        .is_none()
        .then(|| rev.reason.clone())
        .flatten()
        .filter(|why| why.starts_with(WAITING_FOR_PLACEMENT))
}

/// The deadline of `rev`'s current phase: `phase_deadline` after it was
/// created (pending) or entered the phase (provisioning, preparing); the
/// readiness deadline set on entering waiting-ready; none for the others.
pub fn phase_deadline(
    rev: &crate::model::AgentRevision,
    phase_deadline: Duration,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let phase_deadline = chrono::Duration::from_std(phase_deadline).unwrap_or_default();
    let entered = |p: RevisionPhase| rev.progress.phases.get(p.as_str()).copied();
    match rev.phase {
        RevisionPhase::Pending => Some(rev.created_at + phase_deadline),
        RevisionPhase::Provisioning | RevisionPhase::Preparing => {
            entered(rev.phase).map(|at| at + phase_deadline)
        }
        RevisionPhase::WaitingReady => rev.progress.ready_deadline,
        _ => None,
    }
}

/// Decides the next step from the facts.
pub fn decide(f: &Facts) -> Step {
    match (decide_step(f), &f.placement_wait) {
        // A failure while unplaced keeps the why the Place steps found.
        (Step::Fail(reason), Some(why)) if !f.placed => Step::Fail(FailReason::Unplaced {
            reason: Box::new(reason),
            why: why.clone(),
        }),
        (step, _) => step,
    }
}

fn decide_step(f: &Facts) -> Step {
    use RevisionPhase as P;
    match f.phase {
        P::Retired | P::Stopped | P::Failed => return Step::Finished,
        // Retiring predecessors is the tail of activation. Stopping an
        // active revision is the stop handler's (or a successor's) job.
        P::Active => return retire(f),
        P::Stopping => return decide_stop(f),
        P::Pending | P::Provisioning | P::Preparing | P::WaitingReady => {}
    }
    if !f.wanted {
        // A newer revision or a stop took over before this one activated.
        return decide_stop(f);
    }
    if let Some(reason) = &f.denied {
        return Step::Fail(FailReason::Denied(reason.clone()));
    }
    if !f.placed {
        if f.deadline_passed() {
            return Step::Fail(FailReason::PlacementDeadline);
        }
        return Step::Place;
    }
    if let Some(why) = &f.unservable
        && !f.harness_sent
    {
        return Step::Fail(FailReason::PlacementRefused(why.clone()));
    }
    match &f.namespace {
        WorkOutcome::Failed(reason) => {
            return Step::Fail(FailReason::Namespace(reason.clone()));
        }
        WorkOutcome::Applied => {}
        _ if !f.namespace_sent => return Step::SendNamespace,
        _ if f.phase == P::Pending => return enter(P::Provisioning),
        waiting if f.deadline_passed() => {
            return deadline(
                DeadlinePhase::Provisioning,
                waiting.waiting_for("namespace"),
            );
        }
        _ => return wait(f),
    }
    if f.phase == P::Pending || f.phase == P::Provisioning {
        return enter(P::Preparing);
    }
    if f.exclusive && !f.harness_sent {
        // The Agent-owned RWO claim: every predecessor is stopped, on its
        // own cluster, before the new Harness starts.
        let to_stop: Vec<i64> = f
            .predecessors
            .iter()
            .filter(|p| !p.retired() && p.harness_sent && !p.stop_sent)
            .map(|p| p.number)
            .collect();
        if !to_stop.is_empty() {
            return Step::StopPredecessors(to_stop);
        }
        if let Some(p) = f.predecessors.iter().find(|p| !p.retired() && !p.stopped()) {
            if let WorkOutcome::Failed(reason) = &p.stop {
                return Step::Fail(FailReason::PredecessorStop {
                    number: p.number,
                    reason: reason.clone(),
                });
            }
            if f.deadline_passed() {
                return deadline(
                    DeadlinePhase::Preparation,
                    p.stop
                        .waiting_for(&format!("stop of revision {}", p.number)),
                );
            }
            // The Gateway needs no predecessor stopped: prepare it meanwhile.
            if gateway_due(f) {
                return Step::QueueGateway;
            }
            return wait(f);
        }
    }
    // The Harness goes out before the Gateway's ensure is queued, in the
    // same pass: the execution cluster's Pod is usually the slower part,
    // and it starts while the control cluster applies the Gateway. Neither
    // needs the other to prepare; readiness waits for both, and routing
    // changes only at activation.
    if !f.harness_sent && matches!(f.harness, WorkOutcome::Waiting | WorkOutcome::Retrying(_)) {
        return Step::SendHarness;
    }
    if let WorkOutcome::Failed(reason) = &f.harness {
        return Step::Fail(FailReason::Harness(reason.clone()));
    }
    if gateway_due(f) {
        return Step::QueueGateway;
    }
    match &f.harness {
        WorkOutcome::Failed(reason) => {
            return Step::Fail(FailReason::Harness(reason.clone()));
        }
        WorkOutcome::Applied => {
            if f.phase == P::Preparing {
                return enter(P::WaitingReady);
            }
        }
        _ if !f.harness_sent => return Step::SendHarness,
        waiting if f.deadline_passed() => {
            return deadline(DeadlinePhase::Preparation, waiting.waiting_for("harness"));
        }
        _ => return wait(f),
    }
    // Waiting for readiness: the Harness (spoke report) and, when the
    // revision has one, its control-cluster Gateway must be ready.
    let harness_ready = f.readiness.as_ref().is_some_and(|r| r.ready);
    let gateway_ready = !f.control_gateway || f.gateway_ready;
    if f.activated {
        return enter(P::Active);
    }
    if harness_ready && gateway_ready {
        return Step::Activate;
    }
    if f.deadline_passed() {
        let why = match &f.readiness {
            None => "no readiness report from the spoke".to_owned(),
            Some(r) if !r.ready => r.not_ready_because(),
            Some(_) if !f.gateway_applied => {
                "the Gateway was never applied (its gateway.ensure work did not succeed)".to_owned()
            }
            Some(_) => "the Gateway is not Ready".to_owned(),
        };
        return deadline(DeadlinePhase::Readiness, why);
    }
    if harness_ready {
        // Only the Gateway is missing, and no report announces it: look
        // again after the recheck (or at the deadline, if sooner).
        let recheck = f.now + chrono::Duration::from_std(f.gateway_recheck).unwrap_or_default();
        return Step::Wait {
            until: Some(f.deadline_ahead().map_or(recheck, |d| d.min(recheck))),
        };
    }
    wait(f)
}

/// The revision's control-cluster Gateway has no ensure queued yet.
fn gateway_due(f: &Facts) -> bool {
    f.control_gateway && !f.gateway_applied && !f.gateway_queued
}

/// What a queued Gateway ensure may still apply: a wanted revision, its
/// deployer still allowed, not yet applied, before a terminal phase
/// (checked again under the Agent's lease when the ensure runs, since the
/// revision may have been superseded, stopped or failed since it was
/// queued).
pub fn gateway_ensure_allowed(f: &Facts) -> bool {
    f.control_gateway
        && f.wanted
        && f.denied.is_none()
        && !f.gateway_applied
        && matches!(
            f.phase,
            RevisionPhase::Pending
                | RevisionPhase::Provisioning
                | RevisionPhase::Preparing
                | RevisionPhase::WaitingReady
        )
}

/// A revision that must not run (superseded before it activated, or its
/// Agent stopped, active or not): stopped only once its cluster confirms
/// the stop.
pub fn decide_stop(f: &Facts) -> Step {
    if matches!(
        f.phase,
        RevisionPhase::Retired | RevisionPhase::Stopped | RevisionPhase::Failed
    ) {
        return Step::Finished;
    }
    let stopped = Step::Enter {
        phase: RevisionPhase::Stopped,
        reason: Some(match f.agent_stopped {
            true => EnterReason::AgentStopped,
            false => EnterReason::Superseded,
        }),
    };
    if !f.harness_sent {
        // No Harness work ever went out: nothing can run.
        return stopped;
    }
    if !f.stop_sent {
        return Step::StopHarness;
    }
    match &f.stop {
        WorkOutcome::Applied => stopped,
        WorkOutcome::Failed(reason) => Step::Fail(FailReason::StopRefused(reason.clone())),
        WorkOutcome::Waiting | WorkOutcome::Retrying(_) if f.phase != RevisionPhase::Stopping => {
            Step::Enter {
                phase: RevisionPhase::Stopping,
                reason: Some(EnterReason::ConfirmingStop {
                    cluster: f.cluster.clone().unwrap_or_else(|| "?".into()),
                }),
            }
        }
        _ => wait(f),
    }
}

/// The tail of activation: retire every predecessor on its own cluster.
fn retire(f: &Facts) -> Step {
    if f.predecessors_retired {
        return Step::Finished;
    }
    let live: Vec<&Predecessor> = f.predecessors.iter().filter(|p| !p.retired()).collect();
    let to_send: Vec<i64> = live
        .iter()
        .filter(|p| p.harness_sent && !p.retire_sent)
        .map(|p| p.number)
        .collect();
    if !to_send.is_empty() {
        return Step::RetirePredecessors(to_send);
    }
    let done: Vec<i64> = live
        .iter()
        .filter(|p| !p.harness_sent || p.retire.is_applied())
        .map(|p| p.number)
        .collect();
    if !done.is_empty() {
        return Step::MarkRetired(done);
    }
    if live.is_empty() {
        return Step::PredecessorsRetired;
    }
    // Waiting for the spokes (a refused retirement stays visible on the
    // predecessor's cluster report and is not retried blindly).
    wait(f)
}

#[cfg(test)]
mod tests;
