//! Watch events: what `GET /api/v1/watch` and gRPC `Watch` stream, and what
//! the store's event log keeps (issue 15).
//!
//! An event has a cursor (its sequence in the log), a time, the tenant it
//! belongs to (none for cluster events), the cluster it concerns, and a
//! typed body tagged by its kind. The JSON of one event:
//!
//! ```json
//! {"cursor": 42, "at": "…", "namespace": "team-a", "cluster": "exec-a",
//!  "kind": "revision.phase", "body": {"agent": "bot", "number": 3, …}}
//! ```

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ConnectionState, RevisionPhase};

/// One event of the watch log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchEvent {
    /// The event's sequence in the log: resume after it with `cursor=N`.
    pub cursor: i64,
    pub at: DateTime<Utc>,
    /// The tenant (namespace name) the event belongs to; absent for
    /// cluster events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The cluster the event concerns or happened on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The tenant's id, which scopes tenant callers (not shown: a
    /// namespace re-created under an old name is another tenant).
    #[serde(skip)]
    pub namespace_id: Option<String>,
    #[serde(flatten)]
    pub body: EventBody,
}

/// The typed body of an event, tagged by its kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "body")]
pub enum EventBody {
    /// A spoke opened its stream (Hello): online, with what it said of itself.
    #[serde(rename = "cluster.connected")]
    ClusterConnected(ClusterEvent),
    /// A cluster went offline (stream closed, silent, or found stale).
    #[serde(rename = "cluster.offline")]
    ClusterOffline(ClusterEvent),
    /// A cluster was revoked.
    #[serde(rename = "cluster.revoked")]
    ClusterRevoked(ClusterEvent),
    /// A cluster was cordoned or uncordoned, or a drain of it started or
    /// ended.
    #[serde(rename = "cluster.scheduling")]
    ClusterScheduling(SchedulingEvent),
    /// A revision entered a phase, or its reason changed.
    #[serde(rename = "revision.phase")]
    RevisionPhase(RevisionPhaseEvent),
    /// A spoke's readiness verdict on a revision.
    #[serde(rename = "readiness")]
    Readiness(ReadinessEvent),
    /// Work failed: a queue item for good, or a spoke refused to apply.
    #[serde(rename = "work.failed")]
    WorkFailed(WorkFailedEvent),
    /// Terminal, never stored: the stream ends here and the client must
    /// re-list (it fell too far behind).
    #[serde(rename = "relist")]
    Relist(RelistEvent),
}

impl EventBody {
    /// The kind's wire name (SSE `event:` field, gRPC `kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::ClusterConnected(_) => "cluster.connected",
            Self::ClusterOffline(_) => "cluster.offline",
            Self::ClusterRevoked(_) => "cluster.revoked",
            Self::ClusterScheduling(_) => "cluster.scheduling",
            Self::RevisionPhase(_) => "revision.phase",
            Self::Readiness(_) => "readiness",
            Self::WorkFailed(_) => "work.failed",
            Self::Relist(_) => "relist",
        }
    }

    /// The body alone, as JSON (gRPC `body_json`).
    pub fn body_json(&self) -> serde_json::Value {
        let mut tagged = serde_json::to_value(self).unwrap_or_default();
        tagged
            .get_mut("body")
            .map(serde_json::Value::take)
            .unwrap_or_default()
    }
}

/// A cluster's connection state and what its spoke said of itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterEvent {
    pub state: ConnectionState,
    pub last_seen: Option<DateTime<Utc>>,
    pub version: String,
    /// Provider capabilities the spoke advertised.
    pub capabilities: Vec<String>,
    /// When the cluster's newest unrevoked client certificate expires.
    pub certificate_expires_at: Option<DateTime<Utc>>,
}

/// Whether a cluster takes new revisions, and its drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingEvent {
    /// When new placements there stopped; null: it takes them.
    pub cordoned_at: Option<DateTime<Utc>>,
    /// A drain is moving its Agents away.
    pub draining: bool,
}

/// A revision's phase change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionPhaseEvent {
    pub agent: String,
    pub number: i64,
    pub revision_id: String,
    pub phase: RevisionPhase,
    /// `None` for a new revision.
    pub previous_phase: Option<RevisionPhase>,
    pub reason: Option<String>,
    /// When each phase was entered.
    #[serde(default)]
    pub phases: BTreeMap<String, DateTime<Utc>>,
    /// prepareMs, readinessWaitMs, activationMs, elapsedMs once known.
    #[serde(default)]
    pub durations_ms: BTreeMap<String, i64>,
}

/// A readiness verdict (the readiness contract's answer, from the spoke).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessEvent {
    pub agent: String,
    pub number: i64,
    pub revision_id: String,
    pub ready: bool,
    pub reason: String,
    /// Set when the observation was an error, not a verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub live_candidates: u32,
    pub ready_candidates: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_reason: Option<String>,
}

/// Where a work failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WorkFailureSource {
    /// A hub work queue item used its last attempt.
    Queue,
    /// A spoke reported it could not apply work (and is not retrying).
    Spoke,
}

/// A work failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkFailedEvent {
    pub source: WorkFailureSource,
    /// The work item's id (queue failures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_id: Option<String>,
    /// The work kind.
    pub work_kind: String,
    pub target: String,
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i32>,
}

/// Why a stream ends with `relist`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RelistReason {
    /// The client did not read fast enough: its stream buffer stayed full.
    SlowConsumer,
    /// The cursor is older than the oldest kept event (gRPC; REST answers
    /// 410 before streaming).
    CursorTooOld,
}

/// The terminal `relist` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelistEvent {
    pub reason: RelistReason,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_flat_json_with_kind_and_typed_body() {
        let ev = WatchEvent {
            cursor: 7,
            at: DateTime::from_timestamp_millis(1_700_000_000_000).unwrap(),
            namespace: Some("team".into()),
            cluster: Some("exec-a".into()),
            namespace_id: Some("ns-1".into()),
            body: EventBody::Readiness(ReadinessEvent {
                agent: "bot".into(),
                number: 2,
                revision_id: "r".into(),
                ready: false,
                reason: "2 live candidates".into(),
                error: None,
                live_candidates: 2,
                ready_candidates: 1,
                pod: None,
                startup_reason: None,
            }),
        };
        let json = serde_json::to_value(&ev).unwrap();
        assert_eq!(json["kind"], "readiness");
        assert_eq!(json["body"]["reason"], "2 live candidates");
        assert_eq!(json["cursor"], 7);
        assert!(
            json.get("namespaceId").is_none(),
            "the tenant id is internal"
        );
        let back: WatchEvent = serde_json::from_value(json).unwrap();
        assert_eq!(back.body, ev.body);
        assert_eq!(ev.body.kind(), "readiness");
        assert_eq!(ev.body.body_json()["liveCandidates"], 2);
    }
}
