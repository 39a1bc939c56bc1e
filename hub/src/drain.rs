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
    let mut retiring = false;
    for ((ns, agent), mut revs) in by_agent {
        revs.sort_by_key(|r| r.number);
        let (entry, movable) = standing(cluster, drain, ns, agent, &revs);
        if let Some(m) = movable {
            candidates.push((ns.to_owned(), agent.to_owned(), m));
        }
        retiring |= entry.as_ref().is_some_and(|e| e.retiring.is_some());
        agents.extend(entry.map(|e| e.agent));
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
    // Over once nothing of the moved Agents is left to retire there either.
    let finished = progress.waiting == 0 && progress.moving == 0 && !retiring;
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

/// An Agent's entry in the progress, and the revision still to retire on
/// the drained cluster once it moved (it was stopped before the move
/// started, so it no longer takes a slot).
struct Entry {
    agent: DrainAgent,
    retiring: Option<i64>,
}

impl From<DrainAgent> for Entry {
    fn from(agent: DrainAgent) -> Self {
        Self {
            agent,
            retiring: None,
        }
    }
}

/// One Agent's standing, and the move to make if it is to move.
fn standing(
    cluster: &str,
    drain: &Drain,
    ns: &str,
    agent: &str,
    revs: &[&AgentRevision],
) -> (Option<Entry>, Option<Move>) {
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
        let entry = match m.phase {
            RevisionPhase::Failed => entry(DrainAgentState::Failed, m.reason.clone()).into(),
            RevisionPhase::Active => Entry {
                agent: DrainAgent {
                    workspace: Some(WorkspaceOrigin::Fresh),
                    ..entry(
                        DrainAgentState::Moved,
                        here.map(|h| format!("revision {} is retiring there", h.number)),
                    )
                },
                retiring: here.map(|h| h.number),
            },
            // Stopped or superseded after the move: it left anyway.
            RevisionPhase::Stopped | RevisionPhase::Retired if here.is_none() => entry(
                DrainAgentState::Moved,
                Some(format!(
                    "revision {} was {} after the move",
                    m.number,
                    m.phase.as_str()
                )),
            )
            .into(),
            _ => entry(DrainAgentState::Moving, None).into(),
        };
        return (Some(entry), None);
    }
    let Some(here) = here else {
        return (None, None);
    };
    if let Some(newer) = revs
        .iter()
        .find(|r| r.number > here.number && unfinished(r.phase))
    {
        return (
            Some(
                entry(
                    DrainAgentState::Moving,
                    Some(format!("revision {} replaces it", newer.number)),
                )
                .into(),
            ),
            None,
        );
    }
    if here.spec.placement.cluster.as_deref() == Some(cluster) {
        return (
            Some(
                entry(
                    DrainAgentState::Blocked,
                    Some(format!("spec.placement.cluster pins it to {cluster}")),
                )
                .into(),
            ),
            None,
        );
    }
    if here.phase != RevisionPhase::Active {
        let why = format!("revision {} is {}", here.number, here.phase.as_str());
        return (
            Some(entry(DrainAgentState::Waiting, Some(why)).into()),
            None,
        );
    }
    (
        Some(entry(DrainAgentState::Waiting, None).into()),
        Some(Move {
            cluster: cluster.to_owned(),
            revision: here.number,
        }),
    )
}

#[cfg(test)]
mod tests;
