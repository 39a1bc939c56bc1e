//! A drain as a pure decision: given the revisions a drain of one cluster
//! concerns (`Store::drain_revisions`), where each Agent stands, which ones
//! to move now, and whether the drain is over. No I/O and no clock: the
//! driver (`worker::drain`) reads the revisions and deploys the moves.
//!
//! A move is a copy of the revision running on the drained cluster,
//! deployed as a new revision that the pipeline places elsewhere (the
//! cluster is cordoned) and that replaces its predecessor exclusively: the
//! Harness there is stopped and the stop confirmed before the new one
//! starts, so the Agent never runs twice.

use std::collections::BTreeMap;

use crate::model::{
    AgentRevision, Drain, DrainAgent, DrainAgentState, DrainProgress, RevisionPhase,
    WorkspaceOrigin,
};
use crate::store::Move;

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainPlan {
    pub progress: DrainProgress,
    /// The Agents to move now (namespace, Agent, the move), within the
    /// parallelism left by the moves in flight.
    pub start: Vec<(String, String, Move)>,
    /// Nothing waits or moves any more: the drain is over.
    pub finished: bool,
}

/// Where each Agent of a drain of `cluster` stands, from `revisions`
/// (every unfinished revision of the Agents concerned and the moves made
/// since `drain` started, as [`crate::store::Store::drain_revisions`]
/// returns them).
pub fn plan(cluster: &str, drain: &Drain, revisions: &[AgentRevision]) -> DrainPlan {
    let mut by_agent: BTreeMap<(&str, &str), Vec<&AgentRevision>> = BTreeMap::new();
    for r in revisions {
        by_agent
            .entry((r.namespace.as_str(), r.agent.as_str()))
            .or_default()
            .push(r);
    }
    let mut agents = Vec::new();
    let mut candidates = Vec::new();
    for ((ns, agent), mut revs) in by_agent {
        revs.sort_by_key(|r| r.number);
        let (entry, movable) = standing(cluster, drain, ns, agent, &revs);
        if let Some(m) = movable {
            candidates.push((ns.to_owned(), agent.to_owned(), m));
        }
        agents.extend(entry);
    }
    let moving = agents
        .iter()
        .filter(|a| a.state == DrainAgentState::Moving)
        .count();
    let slots = (drain.parallelism as usize).saturating_sub(moving);
    let start: Vec<_> = candidates.into_iter().take(slots).collect();
    let count = |s: DrainAgentState| agents.iter().filter(|a| a.state == s).count() as u32;
    let progress = DrainProgress {
        waiting: count(DrainAgentState::Waiting),
        moving: count(DrainAgentState::Moving),
        moved: count(DrainAgentState::Moved),
        blocked: count(DrainAgentState::Blocked),
        failed: count(DrainAgentState::Failed),
        agents,
    };
    let finished = progress.waiting == 0 && progress.moving == 0;
    DrainPlan {
        progress,
        start,
        finished,
    }
}

/// Phases in which a revision may still run a Harness.
fn unfinished(phase: RevisionPhase) -> bool {
    !matches!(
        phase,
        RevisionPhase::Retired | RevisionPhase::Stopped | RevisionPhase::Failed
    )
}

/// One Agent's standing, and the move to make if it is to move.
fn standing(
    cluster: &str,
    drain: &Drain,
    ns: &str,
    agent: &str,
    revs: &[&AgentRevision],
) -> (Option<DrainAgent>, Option<Move>) {
    let here = revs
        .iter()
        .rfind(|r| r.resolved_cluster.as_deref() == Some(cluster) && unfinished(r.phase));
    let moved = revs
        .iter()
        .rfind(|r| r.moved_from.as_deref() == Some(cluster) && r.created_at >= drain.started_at);
    let entry = |state, reason: Option<String>| DrainAgent {
        namespace: ns.to_owned(),
        agent: agent.to_owned(),
        state,
        from_revision: here
            .map(|r| r.number)
            .or(moved.and_then(|m| m.number.checked_sub(1))),
        to_revision: moved.map(|m| m.number),
        to_cluster: moved.and_then(|m| m.resolved_cluster.clone()),
        workspace: None,
        reason,
    };
    if let Some(m) = moved {
        return (
            Some(match m.phase {
                RevisionPhase::Failed => entry(DrainAgentState::Failed, m.reason.clone()),
                RevisionPhase::Active if here.is_none() => DrainAgent {
                    workspace: Some(WorkspaceOrigin::Fresh),
                    ..entry(DrainAgentState::Moved, None)
                },
                // Stopped or superseded after the move: it left anyway.
                RevisionPhase::Stopped | RevisionPhase::Retired if here.is_none() => entry(
                    DrainAgentState::Moved,
                    Some(format!(
                        "revision {} was {} after the move",
                        m.number,
                        m.phase.as_str()
                    )),
                ),
                _ => entry(DrainAgentState::Moving, None),
            }),
            None,
        );
    }
    let Some(here) = here else {
        return (None, None);
    };
    if let Some(newer) = revs
        .iter()
        .find(|r| r.number > here.number && unfinished(r.phase))
    {
        return (
            Some(entry(
                DrainAgentState::Moving,
                Some(format!("revision {} replaces it", newer.number)),
            )),
            None,
        );
    }
    if here.spec.placement.cluster.as_deref() == Some(cluster) {
        return (
            Some(entry(
                DrainAgentState::Blocked,
                Some(format!("spec.placement.cluster pins it to {cluster}")),
            )),
            None,
        );
    }
    if here.phase != RevisionPhase::Active {
        return (
            Some(entry(
                DrainAgentState::Waiting,
                Some(format!(
                    "revision {} is {}",
                    here.number,
                    here.phase.as_str()
                )),
            )),
            None,
        );
    }
    (
        Some(entry(DrainAgentState::Waiting, None)),
        Some(Move {
            cluster: cluster.to_owned(),
            revision: here.number,
        }),
    )
}

#[cfg(test)]
mod tests;
