//! Conversions between `clawfed.admin.v1` messages and the service layer's
//! types, and watch frames as messages.

use chrono::{DateTime, Utc};
use clawfed_proto::admin::v1 as pb;
use tonic::Status;

use super::fields::{invalid, non_empty};
use crate::model::{self, AgentSpec, ExecutionMode, HarnessKind, Placement, Resources};

pub(super) fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub(super) fn spec_from_pb(spec: Option<pb::AgentSpec>) -> Result<AgentSpec, Status> {
    let spec = spec.ok_or_else(|| invalid("spec", "is required"))?;
    let harness_kind = HarnessKind::parse(&spec.harness_kind).ok_or_else(|| {
        invalid(
            "spec.harness_kind",
            format!(
                "{:?} is not one of embedded-openclaw, dedicated-openclaw, dedicated-codex",
                spec.harness_kind
            ),
        )
    })?;
    let execution_mode = if spec.execution_mode.is_empty() {
        ExecutionMode::default()
    } else {
        ExecutionMode::parse(&spec.execution_mode).ok_or_else(|| {
            invalid(
                "spec.execution_mode",
                format!("{:?} is not one of ordinary, provider", spec.execution_mode),
            )
        })?
    };
    let resources = spec.resources.unwrap_or_default();
    let placement = spec.placement.unwrap_or_default();
    Ok(AgentSpec {
        harness_kind,
        execution_mode,
        image: spec.image,
        gateway_image: non_empty(spec.gateway_image),
        configuration: non_empty(spec.configuration),
        resources: Resources {
            cpu_request: non_empty(resources.cpu_request),
            cpu_limit: non_empty(resources.cpu_limit),
            memory_request: non_empty(resources.memory_request),
            memory_limit: non_empty(resources.memory_limit),
        },
        requirement_labels: spec.requirement_labels.into_iter().collect(),
        placement: Placement {
            cluster: non_empty(placement.cluster),
            cluster_selector: placement.cluster_selector.into_iter().collect(),
            clusters: placement.clusters,
            spread: match placement.spread.as_str() {
                "" => None,
                s => Some(model::Spread::parse(s).ok_or_else(|| {
                    invalid(
                        "spec.placement.spread",
                        format!("{s:?} is not one of spread, pack"),
                    )
                })?),
            },
        },
        plugins: spec.plugins,
        channels: spec
            .channels
            .into_iter()
            .map(|c| model::Channel {
                name: c.name,
                enabled: c.enabled,
            })
            .collect(),
        failover: spec.failover.map(|f| model::Failover {
            after_seconds: f.after_seconds,
        }),
    })
}

fn spec_to_pb(s: AgentSpec) -> pb::AgentSpec {
    pb::AgentSpec {
        harness_kind: s.harness_kind.as_str().into(),
        execution_mode: s.execution_mode.as_str().into(),
        image: s.image,
        gateway_image: s.gateway_image.unwrap_or_default(),
        configuration: s.configuration.unwrap_or_default(),
        resources: Some(pb::ResourceRequirements {
            cpu_request: s.resources.cpu_request.unwrap_or_default(),
            cpu_limit: s.resources.cpu_limit.unwrap_or_default(),
            memory_request: s.resources.memory_request.unwrap_or_default(),
            memory_limit: s.resources.memory_limit.unwrap_or_default(),
        }),
        requirement_labels: s.requirement_labels.into_iter().collect(),
        placement: Some(pb::Placement {
            cluster: s.placement.cluster.unwrap_or_default(),
            cluster_selector: s.placement.cluster_selector.into_iter().collect(),
            clusters: s.placement.clusters,
            spread: s
                .placement
                .spread
                .map(|s| s.as_str().to_owned())
                .unwrap_or_default(),
        }),
        plugins: s.plugins,
        channels: s
            .channels
            .into_iter()
            .map(|c| pb::Channel {
                name: c.name,
                enabled: c.enabled,
            })
            .collect(),
        failover: s.failover.map(|f| pb::Failover {
            after_seconds: f.after_seconds,
        }),
    }
}

pub(super) fn namespace_to_pb(n: model::Namespace) -> pb::Namespace {
    pb::Namespace {
        id: n.id,
        name: n.name,
        display_name: n.display_name,
        data_plane_namespace: n.data_plane_namespace,
        adopted: n.adopted,
        state: n.state.as_str().into(),
        provisioned_at: n.provisioned_at.map(time),
        clusters: n
            .clusters
            .into_iter()
            .map(|c| pb::NamespaceCluster {
                cluster: c.cluster,
                state: c.state.as_str().into(),
                data_plane_namespace: c.data_plane_namespace.unwrap_or_default(),
                reason: c.reason.unwrap_or_default(),
                reported_at: c.reported_at.map(time),
            })
            .collect(),
        version: n.version,
        created_at: time(n.created_at),
        updated_at: time(n.updated_at),
    }
}

pub(super) fn configuration_to_pb(c: model::Configuration) -> pb::Configuration {
    pb::Configuration {
        id: c.id,
        namespace: c.namespace,
        name: c.name,
        data_json: c.data.to_string(),
        version: c.version,
        created_at: time(c.created_at),
        updated_at: time(c.updated_at),
    }
}

pub(super) fn agent_to_pb(a: model::Agent) -> pb::Agent {
    pb::Agent {
        id: a.id,
        namespace: a.namespace,
        name: a.name,
        spec: Some(spec_to_pb(a.spec)),
        desired_state: a.desired_state.as_str().into(),
        active_revision: a.active_revision,
        latest_revision: a.latest_revision,
        version: a.version,
        created_at: time(a.created_at),
        updated_at: time(a.updated_at),
    }
}

pub(super) fn credential_to_pb(c: model::CredentialMeta) -> pb::AgentCredential {
    pb::AgentCredential {
        kind: c.kind,
        version: c.version,
        set_at: time(c.set_at),
    }
}

pub(super) fn revision_to_pb(r: model::AgentRevision) -> pb::AgentRevision {
    pb::AgentRevision {
        id: r.id,
        namespace: r.namespace,
        agent: r.agent,
        number: r.number,
        spec: Some(spec_to_pb(r.spec)),
        configuration_json: r.configuration.to_string(),
        images: r
            .images
            .into_iter()
            .map(|i| pb::ImageRef {
                role: i.role,
                reference: i.reference,
                digest: i.digest.unwrap_or_default(),
            })
            .collect(),
        resolved_cluster: r.resolved_cluster.unwrap_or_default(),
        phase: r.phase.as_str().into(),
        reason: r.reason.unwrap_or_default(),
        rolled_back_from: r.rolled_back_from,
        moved_from: r.moved_from,
        created_at: time(r.created_at),
        updated_at: time(r.updated_at),
        readiness: r.readiness.map(|v| pb::Readiness {
            ready: v.ready,
            live_candidates: v.live_candidates,
            ready_candidates: v.ready_candidates,
            reason: v.reason,
            error: v.error.unwrap_or_default(),
            pod: v.pod.unwrap_or_default(),
            namespace: v.namespace,
            startup_warnings: v
                .startup_warnings
                .into_iter()
                .map(|w| pb::StartupWarning {
                    selection: w.selection,
                    code: w.code,
                })
                .collect(),
            startup_reason: v.startup_reason.unwrap_or_default(),
        }),
        drift: r.drift.map(|d| pb::Drift {
            repairs: d.repairs,
            contested: d.contested,
            last_drift_at: d.last_drift_at.map(time).unwrap_or_default(),
            last_reason: d.last_reason,
            resends: d.resends,
        }),
    }
}

pub(super) fn diagnosis_to_pb(d: model::Diagnosis) -> pb::Diagnosis {
    let component = |c: model::ComponentDiagnosis| pb::ComponentDiagnosis {
        pod: c.pod.unwrap_or_default(),
        checks: c
            .checks
            .into_iter()
            .map(|k| pb::DiagnosticCheck {
                name: k.name,
                status: k.status,
                detail: k.detail,
            })
            .collect(),
    };
    pb::Diagnosis {
        namespace: d.namespace,
        agent: d.agent,
        revision: d.revision,
        revision_id: d.revision_id,
        cluster: d.cluster.unwrap_or_default(),
        harness: Some(component(d.harness)),
        gateway: Some(component(d.gateway)),
    }
}

pub(super) fn cluster_to_pb(c: model::Cluster) -> pb::Cluster {
    pb::Cluster {
        id: c.id,
        name: c.name,
        labels: c.labels.into_iter().collect(),
        capabilities: c.capabilities,
        certificate_serials: c.certificate_serials,
        connection_state: c.connection_state.as_str().into(),
        last_seen: c.last_seen.map(time),
        version: c.version,
        created_at: time(c.created_at),
        outbox_depth: c.outbox_depth,
        provider: c.provider,
        certificate_expires_at: c.certificate_expires_at.map(time),
        cordoned_at: c.cordoned_at.map(time),
        drain: c.drain.map(drain_to_pb),
        capacity: c.capacity.map(|k| pb::ClusterCapacity {
            nodes: k.nodes,
            allocatable_cpu_millis: k.allocatable.cpu_millis,
            allocatable_memory_bytes: k.allocatable.memory_bytes,
            free_cpu_millis: k.free.cpu_millis,
            free_memory_bytes: k.free.memory_bytes,
            reported_at: time(k.reported_at),
        }),
    }
}

fn drain_to_pb(d: model::Drain) -> pb::Drain {
    pb::Drain {
        parallelism: d.parallelism,
        started_at: time(d.started_at),
        finished_at: d.finished_at.map(time),
        progress: d.progress.map(|p| pb::DrainProgress {
            waiting: p.waiting,
            moving: p.moving,
            moved: p.moved,
            blocked: p.blocked,
            failed: p.failed,
            agents: p
                .agents
                .into_iter()
                .map(|a| pb::DrainAgent {
                    namespace: a.namespace,
                    agent: a.agent,
                    state: a.state.as_str().into(),
                    from_revision: a.from_revision,
                    to_revision: a.to_revision,
                    to_cluster: a.to_cluster,
                    workspace: a.workspace.map(|w| w.as_str().into()),
                    reason: a.reason,
                })
                .collect(),
        }),
    }
}

pub(super) fn work_to_pb(w: model::WorkItem) -> pb::WorkItem {
    pb::WorkItem {
        id: w.id,
        kind: w.kind,
        namespace: w.namespace.unwrap_or_default(),
        target: w.target,
        state: w.state.as_str().into(),
        attempts: w.attempts,
        max_attempts: w.max_attempts,
        run_at: time(w.run_at),
        last_error: w.last_error,
        created_at: time(w.created_at),
        updated_at: time(w.updated_at),
    }
}

pub(super) fn audit_to_pb(e: crate::model::AuditEvent) -> pb::AuditEvent {
    pb::AuditEvent {
        id: e.id,
        cursor: e.cursor.unwrap_or_default(),
        at: time(e.at),
        actor: e.actor,
        action: e.action,
        namespace: e.namespace.unwrap_or_default(),
        target: e.target,
        result: e.result,
        detail: e.detail.unwrap_or_default(),
    }
}

/// A frame of a watch stream as a gRPC message; a token that stopped being
/// valid ends the stream with `UNAUTHENTICATED`.
pub(super) fn watch_message(frame: crate::watch::Frame) -> Result<pb::WatchEvent, Status> {
    use crate::model::event::EventBody;
    use crate::watch::Frame;
    Ok(match frame {
        Frame::Unauthenticated(reason) => return Err(Status::unauthenticated(reason)),
        // Encoded once per event for every stream (`SharedEvent`).
        Frame::Event(e) => pb::WatchEvent {
            cursor: e.cursor,
            at: e.at_rfc3339().to_owned(),
            kind: e.body.kind().to_owned(),
            namespace: e.namespace.clone().unwrap_or_default(),
            cluster: e.cluster.clone().unwrap_or_default(),
            body_json: e.body_json().to_owned(),
        },
        Frame::Relist(r) => {
            let body = EventBody::Relist(r);
            pb::WatchEvent {
                cursor: 0,
                at: Utc::now().to_rfc3339(),
                kind: body.kind().to_owned(),
                namespace: String::new(),
                cluster: String::new(),
                body_json: body.body_json().to_string(),
            }
        }
    })
}
