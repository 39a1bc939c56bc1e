//! Spoke reports as the hub stores them: typed bodies (JSON in the store),
//! kept whole so the pipeline and the API see the spoke's real verdict and
//! reasons, not a lossy summary.

use clawfed_proto::link::v1 as pb;
use serde::{Deserialize, Serialize};

/// `spoke_reports.kind` of a work result.
pub const WORK_RESULT: &str = "work-result";
/// `spoke_reports.kind` of a readiness observation.
pub const READINESS: &str = "readiness";
/// `spoke_reports.kind` of a drift report.
pub const DRIFT: &str = "drift";

/// Drift the spoke repaired on a target's objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftReport {
    /// Repairs written.
    pub repairs: u64,
    /// Times an object became contested (another writer kept changing it;
    /// the spoke backed off).
    #[serde(default)]
    pub contested: u64,
    /// When drift was last seen.
    pub last_drift_at: Option<chrono::DateTime<chrono::Utc>>,
    /// What drifted last: kind, object, reason, field manager.
    #[serde(default)]
    pub last_reason: String,
    /// Resends of the target's work the spoke asked for (drift it cannot
    /// restore alone, such as a deleted credential Secret).
    #[serde(default)]
    pub resends: u64,
}

impl From<pb::DriftReport> for DriftReport {
    fn from(r: pb::DriftReport) -> Self {
        DriftReport {
            repairs: r.repairs,
            contested: r.contested,
            last_drift_at: chrono::DateTime::from_timestamp_millis(r.last_drift_unix_millis),
            last_reason: r.last_reason,
            resends: r.resends,
        }
    }
}

/// A spoke's answer to one piece of work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct WorkResultReport {
    pub applied: bool,
    #[serde(default)]
    pub reason: String,
    /// Not applied yet, the spoke keeps retrying a transient failure.
    #[serde(default)]
    pub retrying: bool,
    /// The work kind answered.
    #[serde(default)]
    pub kind: String,
    /// The physical namespace the work resolved to (a legacy or adopted
    /// name the spoke found, for namespace work).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// What the spoke of `cluster` reported for a tenant's namespace target
/// (`None`: sent, no answer yet).
pub fn namespace_status(
    cluster: String,
    report: Option<&crate::store::SpokeReport>,
) -> crate::model::NamespaceClusterStatus {
    use crate::model::{NamespaceClusterState as S, NamespaceClusterStatus};
    let Some(report) = report else {
        return NamespaceClusterStatus {
            cluster,
            state: S::Pending,
            data_plane_namespace: None,
            reason: None,
            reported_at: None,
        };
    };
    let result = serde_json::from_value::<WorkResultReport>(report.body.clone());
    let (state, namespace, reason) = match &result {
        Err(e) => (S::Failed, None, Some(format!("unreadable report: {e}"))),
        Ok(r) if r.applied && r.kind == clawfed_proto::work::WorkKind::NamespaceDelete.as_str() => {
            (S::Deleted, None, None)
        }
        Ok(r) if r.applied => (
            S::Provisioned,
            r.ensured_namespace().map(str::to_owned),
            None,
        ),
        Ok(r) if r.retrying => (S::Retrying, None, Some(r.reason.clone())),
        Ok(r) => (S::Failed, None, Some(r.reason.clone())),
    };
    NamespaceClusterStatus {
        cluster,
        state,
        data_plane_namespace: namespace,
        reason,
        reported_at: Some(report.received_at),
    }
}

impl WorkResultReport {
    /// The physical namespace a `namespace.ensure` result says the spoke
    /// ensured (a legacy or adopted name), if it applied.
    pub fn ensured_namespace(&self) -> Option<&str> {
        (self.applied && !self.namespace.is_empty()).then_some(self.namespace.as_str())
    }
}

impl From<pb::WorkResult> for WorkResultReport {
    fn from(r: pb::WorkResult) -> Self {
        Self {
            applied: r.applied,
            reason: r.reason,
            retrying: r.retrying,
            kind: r.kind,
            namespace: r.namespace,
        }
    }
}

/// A spoke's readiness verdict for one revision under the readiness contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessReport {
    pub revision_id: String,
    pub ready: bool,
    pub live_candidates: u32,
    #[serde(default)]
    pub ready_candidates: u32,
    #[serde(default)]
    pub reason: String,
    /// Set when the observation was malformed or incomplete: an error, not
    /// a verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The ready Pod, when ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The physical namespace observed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The ready Pod's plugin startup warnings: the selections its start
    /// disabled, recorded with the verdict that completed the deployment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_warnings: Vec<StartupWarning>,
    /// Why the plugin startup status keeps the revision unready (missing,
    /// malformed, foreign revision or instance, unknown selection or code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_reason: Option<String>,
}

/// A selection the runtime disabled at startup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartupWarning {
    pub selection: String,
    /// `PLUGIN_INSTALL_FAILED` or `PLUGIN_AUTH_REQUIRED`.
    pub code: String,
}

impl From<pb::ReadinessObservation> for ReadinessReport {
    fn from(r: pb::ReadinessObservation) -> Self {
        let non_empty = |s: String| (!s.is_empty()).then_some(s);
        Self {
            revision_id: r.revision_id,
            ready: r.ready && r.error.is_empty(),
            live_candidates: r.live_candidates,
            ready_candidates: r.ready_candidates,
            reason: r.reason,
            error: non_empty(r.error),
            pod: non_empty(r.pod),
            namespace: r.namespace,
            startup_warnings: r
                .startup_warnings
                .into_iter()
                .map(|w| StartupWarning {
                    selection: w.selection,
                    code: w.code,
                })
                .collect(),
            startup_reason: non_empty(r.startup_reason),
        }
    }
}

/// The watch event a stored report makes, if any: a readiness verdict on
/// a Harness target, or a work result the spoke gave up on (`applied`
/// false, not retrying).
pub fn watch_event(
    cluster: &str,
    target: &str,
    kind: &str,
    body: &serde_json::Value,
) -> Option<crate::store::NewEvent> {
    use crate::model::event::{EventBody, ReadinessEvent, WorkFailedEvent, WorkFailureSource};
    use clawfed_proto::work::target::Target;
    let parsed: Target = target.parse().ok()?;
    let body = match kind {
        READINESS => {
            let Target::Harness {
                agent, revision, ..
            } = &parsed
            else {
                return None;
            };
            let r: ReadinessReport = serde_json::from_value(body.clone()).ok()?;
            EventBody::Readiness(ReadinessEvent {
                agent: agent.clone(),
                number: *revision,
                revision_id: r.revision_id,
                ready: r.ready,
                reason: r.reason,
                error: r.error,
                live_candidates: r.live_candidates,
                ready_candidates: r.ready_candidates,
                pod: r.pod,
                startup_reason: r.startup_reason,
            })
        }
        WORK_RESULT => {
            let r: WorkResultReport = serde_json::from_value(body.clone()).ok()?;
            if r.applied || r.retrying {
                return None;
            }
            EventBody::WorkFailed(WorkFailedEvent {
                source: WorkFailureSource::Spoke,
                work_id: None,
                work_kind: r.kind,
                target: target.to_owned(),
                error: r.reason,
                attempts: None,
            })
        }
        _ => return None,
    };
    Some(crate::store::NewEvent {
        namespace_id: Some(parsed.namespace_id().to_owned()),
        cluster: Some(cluster.to_owned()),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_the_spoke_said_is_dropped() {
        let r = ReadinessReport::from(pb::ReadinessObservation {
            revision_id: "r1".into(),
            ready: false,
            live_candidates: 2,
            reason: "2 live candidates".into(),
            ready_candidates: 1,
            error: String::new(),
            pod: String::new(),
            namespace: "oce-legacy".into(),
            startup_warnings: vec![pb::StartupWarning {
                selection: "mail".into(),
                code: "PLUGIN_AUTH_REQUIRED".into(),
            }],
            startup_reason: String::new(),
        });
        let back: ReadinessReport =
            serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.ready_candidates, 1);
        assert_eq!(back.namespace, "oce-legacy");
        assert_eq!(back.startup_warnings[0].code, "PLUGIN_AUTH_REQUIRED");
        assert_eq!(back.startup_reason, None);
        // An error is never a ready verdict, whatever the flag says.
        let e = ReadinessReport::from(pb::ReadinessObservation {
            ready: true,
            error: "duplicate condition type Ready".into(),
            ..Default::default()
        });
        assert!(!e.ready);
        assert_eq!(e.error.as_deref(), Some("duplicate condition type Ready"));
        let w = WorkResultReport::from(pb::WorkResult {
            applied: true,
            namespace: "oce-team-a-0123456789ab".into(),
            ..Default::default()
        });
        assert_eq!(w.namespace, "oce-team-a-0123456789ab");
    }
}

#[cfg(test)]
mod namespace_status_tests {
    use super::*;
    use crate::model::NamespaceClusterState as S;
    use crate::store::SpokeReport;

    fn report(body: serde_json::Value) -> SpokeReport {
        SpokeReport {
            cluster_id: "c1".into(),
            target: "namespace/n1".into(),
            kind: WORK_RESULT.into(),
            generation: 1,
            body,
            received_at: chrono::Utc::now(),
        }
    }

    /// Issue 12: a tenant is provisioned in a cluster only when that
    /// cluster's spoke said so.
    #[test]
    fn provisioned_only_when_the_spoke_reported_it() {
        assert_eq!(namespace_status("a".into(), None).state, S::Pending);
        let ok = report(
            serde_json::json!({"applied": true, "kind": "namespace.ensure", "namespace": "oce-x"}),
        );
        let s = namespace_status("a".into(), Some(&ok));
        assert_eq!(
            (s.state, s.data_plane_namespace.as_deref()),
            (S::Provisioned, Some("oce-x"))
        );
        let retry = report(
            serde_json::json!({"applied": false, "retrying": true, "reason": "forbidden", "kind": "namespace.ensure"}),
        );
        assert_eq!(
            namespace_status("a".into(), Some(&retry)).state,
            S::Retrying
        );
        let refused = report(
            serde_json::json!({"applied": false, "reason": "not marked for adoption", "kind": "namespace.ensure"}),
        );
        let s = namespace_status("a".into(), Some(&refused));
        assert_eq!(
            (s.state, s.reason.as_deref()),
            (S::Failed, Some("not marked for adoption"))
        );
        let gone = report(serde_json::json!({"applied": true, "kind": "namespace.delete"}));
        assert_eq!(namespace_status("a".into(), Some(&gone)).state, S::Deleted);
    }
}
