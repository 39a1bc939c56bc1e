//! gRPC `clawfed.admin.v1.AdminService`: converts messages to the service
//! layer's types and back. Credentials come from the `authorization:
//! Bearer <token>` metadata, or else the verified client certificate (TLS
//! with `api.tls.clientCaFile`), as on REST.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use clawfed_proto::admin::v1 as pb;
use clawfed_proto::admin::v1::admin_service_server::AdminService;
use tonic::{Request, Response, Status};

use crate::auth::Principal;
use crate::model::{
    self, AgentSpec, CreateAgent, CreateConfiguration, CreateNamespace, DeployRequest,
    ExecutionMode, HarnessKind, Placement, Resources, UpdateAgent, UpdateConfiguration,
};
use crate::service::{Service, ServiceError};

/// The gRPC admin service.
#[derive(Debug, Clone)]
pub struct AdminApi {
    service: Service,
}

impl AdminApi {
    /// An adapter over `service`.
    pub fn new(service: Service) -> Self {
        Self { service }
    }

    async fn caller<T>(&self, req: &Request<T>) -> Result<Principal, Status> {
        let bearer = match req.metadata().get("authorization") {
            None => None,
            Some(v) => {
                let v = v.to_str().unwrap_or_default();
                match v.strip_prefix("Bearer ") {
                    Some(t) if !t.trim().is_empty() => Some(t.trim().to_owned()),
                    _ => {
                        return Err(ServiceError::Unauthenticated(
                            "authorization metadata must be 'Bearer <token>'".into(),
                        )
                        .into());
                    }
                }
            }
        };
        let client_cert = req.peer_certs().and_then(|certs| {
            certs
                .first()
                .map(|leaf| crate::auth::client_cert_token_name(leaf))
        });
        Ok(self
            .service
            .authenticate_request(bearer.as_deref(), client_cert.as_ref())
            .await?)
    }
}

type Reply<T> = Result<Response<T>, Status>;

/// tonic's codec answers a request message over the size limit with
/// `OUT_OF_RANGE` and one that does not decode with `INTERNAL`, before any
/// handler runs; the error table (`api::error`) says `RESOURCE_EXHAUSTED`
/// (like REST's 413) and `INVALID_ARGUMENT` (like REST's 400). This maps
/// those answers (trailers-only, so the status is in the headers), as a
/// `MapResponse` layer on the admin server. No handler answers
/// `OUT_OF_RANGE`, and handlers' `INTERNAL` says only "internal error", so
/// nothing of theirs is changed.
pub fn codec_status_codes<B>(mut response: http::Response<B>) -> http::Response<B> {
    let Some(status) = Status::from_header_map(response.headers()) else {
        return response;
    };
    let message = status.message();
    let code = match status.code() {
        tonic::Code::OutOfRange => tonic::Code::ResourceExhausted,
        tonic::Code::Internal
            if message.starts_with("failed to decode Protobuf message")
                || message == "Missing request message." =>
        {
            tonic::Code::InvalidArgument
        }
        _ => return response,
    };
    let mapped = Status::new(code, format!("request message refused: {message}"));
    // The message is percent-encoded, so writing the headers cannot fail.
    let _ = mapped.add_header(response.headers_mut());
    response
}

fn invalid(field: &str, reason: impl Into<String>) -> Status {
    ServiceError::InvalidArgument {
        field: field.into(),
        reason: reason.into(),
    }
    .into()
}

fn required<'a>(field: &str, value: &'a str) -> Result<&'a str, Status> {
    if value.is_empty() {
        Err(invalid(field, "is required"))
    } else {
        no_nul(field, value)
    }
}

/// PostgreSQL text cannot hold NUL, so a NUL in a name or id would fail in
/// the database as `Internal`; it is a malformed field, named here.
fn no_nul<'a>(field: &str, value: &'a str) -> Result<&'a str, Status> {
    if value.contains('\0') {
        Err(invalid(field, "must not contain NUL characters"))
    } else {
        Ok(value)
    }
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn json_object(field: &str, text: &str) -> Result<serde_json::Value, Status> {
    serde_json::from_str(text).map_err(|e| invalid(field, format!("malformed JSON: {e}")))
}

fn non_empty(s: String) -> Option<String> {
    if s.is_empty() { None } else { Some(s) }
}

fn spec_from_pb(spec: Option<pb::AgentSpec>) -> Result<AgentSpec, Status> {
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
    }
}

fn namespace_to_pb(n: model::Namespace) -> pb::Namespace {
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

fn configuration_to_pb(c: model::Configuration) -> pb::Configuration {
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

fn agent_to_pb(a: model::Agent) -> pb::Agent {
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

fn credential_to_pb(c: model::CredentialMeta) -> pb::AgentCredential {
    pb::AgentCredential {
        kind: c.kind,
        version: c.version,
        set_at: time(c.set_at),
    }
}

fn revision_to_pb(r: model::AgentRevision) -> pb::AgentRevision {
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

fn diagnosis_to_pb(d: model::Diagnosis) -> pb::Diagnosis {
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

fn cluster_to_pb(c: model::Cluster) -> pb::Cluster {
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
    }
}

fn work_to_pb(w: model::WorkItem) -> pb::WorkItem {
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

fn limit(n: i64) -> Option<i64> {
    if n == 0 { None } else { Some(n) }
}

/// A frame of a watch stream as a gRPC message; a token that stopped being
/// valid ends the stream with `UNAUTHENTICATED`.
fn watch_message(frame: crate::watch::Frame) -> Result<pb::WatchEvent, Status> {
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

#[tonic::async_trait]
impl AdminService for AdminApi {
    type WatchStream = std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<pb::WatchEvent, Status>> + Send + 'static>,
    >;

    async fn watch(&self, req: Request<pb::WatchRequest>) -> Reply<Self::WatchStream> {
        use crate::model::event::{RelistEvent, RelistReason};
        use crate::watch::Frame;
        use futures::StreamExt;
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        match self
            .service
            .watch(&p, r.cursor, r.follow.unwrap_or(true))
            .await
        {
            Ok(subscription) => Ok(Response::new(Box::pin(
                subscription.into_stream().map(watch_message),
            ))),
            // A terminal event, not OUT_OF_RANGE: the codec layer reserves
            // that code's trailers-only answers (see `codec_status_codes`).
            Err(ServiceError::OutOfRange(message)) => {
                let relist = Frame::Relist(RelistEvent {
                    reason: RelistReason::CursorTooOld,
                    message,
                });
                Ok(Response::new(Box::pin(futures::stream::once(async move {
                    watch_message(relist)
                }))))
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn create_namespace(
        &self,
        req: Request<pb::CreateNamespaceRequest>,
    ) -> Reply<pb::Namespace> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let created = self
            .service
            .create_namespace(
                &p,
                CreateNamespace {
                    name: r.name,
                    display_name: non_empty(r.display_name),
                    adopt_namespace: r.adopt_namespace,
                },
            )
            .await?;
        Ok(Response::new(namespace_to_pb(created)))
    }

    async fn list_namespaces(
        &self,
        req: Request<pb::ListNamespacesRequest>,
    ) -> Reply<pb::ListNamespacesResponse> {
        let p = self.caller(&req).await?;
        let items = self.service.list_namespaces(&p).await?;
        Ok(Response::new(pb::ListNamespacesResponse {
            items: items.into_iter().map(namespace_to_pb).collect(),
        }))
    }

    async fn get_namespace(&self, req: Request<pb::GetNamespaceRequest>) -> Reply<pb::Namespace> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let ns = self
            .service
            .get_namespace(&p, required("name", &r.name)?)
            .await?;
        Ok(Response::new(namespace_to_pb(ns)))
    }

    async fn delete_namespace(
        &self,
        req: Request<pb::DeleteNamespaceRequest>,
    ) -> Reply<pb::DeleteNamespaceResponse> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        self.service
            .delete_namespace(&p, required("name", &r.name)?)
            .await?;
        Ok(Response::new(pb::DeleteNamespaceResponse {}))
    }

    async fn create_configuration(
        &self,
        req: Request<pb::CreateConfigurationRequest>,
    ) -> Reply<pb::Configuration> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let data = json_object("data_json", &r.data_json)?;
        let c = self
            .service
            .create_configuration(
                &p,
                required("namespace", &r.namespace)?,
                CreateConfiguration { name: r.name, data },
            )
            .await?;
        Ok(Response::new(configuration_to_pb(c)))
    }

    async fn list_configurations(
        &self,
        req: Request<pb::ListConfigurationsRequest>,
    ) -> Reply<pb::ListConfigurationsResponse> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let items = self
            .service
            .list_configurations(&p, required("namespace", &r.namespace)?)
            .await?;
        Ok(Response::new(pb::ListConfigurationsResponse {
            items: items.into_iter().map(configuration_to_pb).collect(),
        }))
    }

    async fn get_configuration(
        &self,
        req: Request<pb::GetConfigurationRequest>,
    ) -> Reply<pb::Configuration> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let c = self
            .service
            .get_configuration(
                &p,
                required("namespace", &r.namespace)?,
                required("name", &r.name)?,
            )
            .await?;
        Ok(Response::new(configuration_to_pb(c)))
    }

    async fn update_configuration(
        &self,
        req: Request<pb::UpdateConfigurationRequest>,
    ) -> Reply<pb::Configuration> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let data = json_object("data_json", &r.data_json)?;
        let c = self
            .service
            .update_configuration(
                &p,
                required("namespace", &r.namespace)?,
                required("name", &r.name)?,
                UpdateConfiguration {
                    data,
                    version: r.expected_version,
                },
            )
            .await?;
        Ok(Response::new(configuration_to_pb(c)))
    }

    async fn delete_configuration(
        &self,
        req: Request<pb::DeleteConfigurationRequest>,
    ) -> Reply<pb::DeleteConfigurationResponse> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        self.service
            .delete_configuration(
                &p,
                required("namespace", &r.namespace)?,
                required("name", &r.name)?,
            )
            .await?;
        Ok(Response::new(pb::DeleteConfigurationResponse {}))
    }

    async fn create_agent(&self, req: Request<pb::CreateAgentRequest>) -> Reply<pb::Agent> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let spec = spec_from_pb(r.spec)?;
        let a = self
            .service
            .create_agent(
                &p,
                required("namespace", &r.namespace)?,
                CreateAgent { name: r.name, spec },
            )
            .await?;
        Ok(Response::new(agent_to_pb(a)))
    }

    async fn list_agents(
        &self,
        req: Request<pb::ListAgentsRequest>,
    ) -> Reply<pb::ListAgentsResponse> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let items = self
            .service
            .list_agents(&p, required("namespace", &r.namespace)?)
            .await?;
        Ok(Response::new(pb::ListAgentsResponse {
            items: items.into_iter().map(agent_to_pb).collect(),
        }))
    }

    async fn get_agent(&self, req: Request<pb::GetAgentRequest>) -> Reply<pb::Agent> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let a = self
            .service
            .get_agent(
                &p,
                required("namespace", &r.namespace)?,
                required("name", &r.name)?,
            )
            .await?;
        Ok(Response::new(agent_to_pb(a)))
    }

    async fn update_agent(&self, req: Request<pb::UpdateAgentRequest>) -> Reply<pb::Agent> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let spec = spec_from_pb(r.spec)?;
        let a = self
            .service
            .update_agent(
                &p,
                required("namespace", &r.namespace)?,
                required("name", &r.name)?,
                UpdateAgent {
                    spec,
                    version: r.expected_version,
                },
            )
            .await?;
        Ok(Response::new(agent_to_pb(a)))
    }

    async fn delete_agent(
        &self,
        req: Request<pb::DeleteAgentRequest>,
    ) -> Reply<pb::DeleteAgentResponse> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        self.service
            .delete_agent(
                &p,
                required("namespace", &r.namespace)?,
                required("name", &r.name)?,
            )
            .await?;
        Ok(Response::new(pb::DeleteAgentResponse {}))
    }

    async fn deploy(&self, req: Request<pb::DeployRequest>) -> Reply<pb::AgentRevision> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let (rev, _created) = self
            .service
            .deploy(
                &p,
                required("namespace", &r.namespace)?,
                required("agent", &r.agent)?,
                DeployRequest {
                    from_revision: r.from_revision,
                },
                non_empty(r.idempotency_key),
            )
            .await?;
        Ok(Response::new(revision_to_pb(rev)))
    }

    async fn stop(&self, req: Request<pb::StopRequest>) -> Reply<pb::Agent> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let a = self
            .service
            .stop(
                &p,
                required("namespace", &r.namespace)?,
                required("agent", &r.agent)?,
            )
            .await?;
        Ok(Response::new(agent_to_pb(a)))
    }

    async fn list_revisions(
        &self,
        req: Request<pb::ListRevisionsRequest>,
    ) -> Reply<pb::ListRevisionsResponse> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let items = self
            .service
            .list_revisions(
                &p,
                required("namespace", &r.namespace)?,
                required("agent", &r.agent)?,
            )
            .await?;
        Ok(Response::new(pb::ListRevisionsResponse {
            items: items.into_iter().map(revision_to_pb).collect(),
        }))
    }

    async fn diagnose_agent(&self, req: Request<pb::DiagnoseAgentRequest>) -> Reply<pb::Diagnosis> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let d = self
            .service
            .diagnose(
                &p,
                required("namespace", &r.namespace)?,
                required("name", &r.name)?,
                (r.revision != 0).then_some(r.revision),
            )
            .await?;
        Ok(Response::new(diagnosis_to_pb(d)))
    }

    async fn chat_agent(&self, req: Request<pb::ChatAgentRequest>) -> Reply<pb::ChatAnswer> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let a = self
            .service
            .chat(
                &p,
                required("namespace", &r.namespace)?,
                required("name", &r.name)?,
                model::ChatRequest {
                    message: r.message,
                    conversation: (!r.conversation.is_empty()).then_some(r.conversation),
                },
            )
            .await?;
        Ok(Response::new(pb::ChatAnswer {
            namespace: a.namespace,
            agent: a.agent,
            revision: a.revision,
            conversation: a.conversation,
            answer: a.answer,
            elapsed_ms: a.elapsed_ms,
        }))
    }

    async fn get_revision(&self, req: Request<pb::GetRevisionRequest>) -> Reply<pb::AgentRevision> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        if r.number <= 0 {
            return Err(invalid("number", "must be a positive integer"));
        }
        let rev = self
            .service
            .get_revision(
                &p,
                required("namespace", &r.namespace)?,
                required("agent", &r.agent)?,
                r.number,
            )
            .await?;
        Ok(Response::new(revision_to_pb(rev)))
    }

    async fn list_clusters(
        &self,
        req: Request<pb::ListClustersRequest>,
    ) -> Reply<pb::ListClustersResponse> {
        let p = self.caller(&req).await?;
        let items = self.service.list_clusters(&p).await?;
        Ok(Response::new(pb::ListClustersResponse {
            items: items.into_iter().map(cluster_to_pb).collect(),
        }))
    }

    async fn get_cluster(&self, req: Request<pb::GetClusterRequest>) -> Reply<pb::Cluster> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let c = self
            .service
            .get_cluster(&p, required("name", &r.name)?)
            .await?;
        Ok(Response::new(cluster_to_pb(c)))
    }

    async fn create_bootstrap_token(
        &self,
        req: Request<pb::CreateBootstrapTokenRequest>,
    ) -> Reply<pb::BootstrapToken> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let created = self
            .service
            .create_bootstrap_token(
                &p,
                required("cluster_name", &r.cluster_name)?,
                model::CreateBootstrapToken {
                    ttl_seconds: limit(r.ttl_seconds),
                    reenroll: r.reenroll,
                    require_approval: r.require_approval,
                },
            )
            .await?;
        Ok(Response::new(pb::BootstrapToken {
            cluster_name: created.cluster_name,
            token: created.token,
            expires_at: time(created.expires_at),
            reenroll: created.reenroll,
        }))
    }

    async fn revoke_cluster(&self, req: Request<pb::RevokeClusterRequest>) -> Reply<pb::Cluster> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let c = self
            .service
            .revoke_cluster(&p, required("name", &r.name)?)
            .await?;
        Ok(Response::new(cluster_to_pb(c)))
    }

    async fn approve_cluster(
        &self,
        req: Request<pb::ApproveClusterRequest>,
    ) -> Reply<pb::ApproveClusterResponse> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        self.service
            .approve_cluster(&p, required("name", &r.name)?)
            .await?;
        Ok(Response::new(pb::ApproveClusterResponse {}))
    }

    async fn get_fleet_summary(
        &self,
        req: Request<pb::GetFleetSummaryRequest>,
    ) -> Reply<pb::FleetSummary> {
        let p = self.caller(&req).await?;
        let f = self.service.fleet_summary(&p).await?;
        Ok(Response::new(pb::FleetSummary {
            namespaces: f.namespaces,
            agents: f.agents,
            agents_running: f.agents_running,
            agents_stopped: f.agents_stopped,
            revisions_by_phase: f
                .revisions_by_phase
                .into_iter()
                .collect::<BTreeMap<_, _>>()
                .into_iter()
                .collect(),
            clusters: f.clusters,
            clusters_online: f.clusters_online,
            work_pending: f.work_pending,
            work_failed: f.work_failed,
            agents_desired_running: f.agents_desired_running,
            agents_not_running: f.agents_not_running,
        }))
    }

    async fn list_audit_events(
        &self,
        req: Request<pb::ListAuditEventsRequest>,
    ) -> Reply<pb::ListAuditEventsResponse> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let ns = non_empty(r.namespace);
        if let Some(ns) = &ns {
            no_nul("namespace", ns)?;
        }
        let items = self
            .service
            .list_audit(&p, ns.as_deref(), limit(r.limit))
            .await?;
        Ok(Response::new(pb::ListAuditEventsResponse {
            items: items
                .into_iter()
                .map(|e| pb::AuditEvent {
                    id: e.id,
                    at: time(e.at),
                    actor: e.actor,
                    action: e.action,
                    namespace: e.namespace.unwrap_or_default(),
                    target: e.target,
                    result: e.result,
                    detail: e.detail.unwrap_or_default(),
                })
                .collect(),
        }))
    }

    async fn list_work(&self, req: Request<pb::ListWorkRequest>) -> Reply<pb::ListWorkResponse> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let ns = non_empty(r.namespace);
        if let Some(ns) = &ns {
            no_nul("namespace", ns)?;
        }
        let state = non_empty(r.state);
        let items = self
            .service
            .list_work(&p, ns.as_deref(), state.as_deref(), limit(r.limit))
            .await?;
        Ok(Response::new(pb::ListWorkResponse {
            items: items.into_iter().map(work_to_pb).collect(),
        }))
    }

    async fn get_work(&self, req: Request<pb::GetWorkRequest>) -> Reply<pb::WorkItem> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let w = self.service.get_work(&p, required("id", &r.id)?).await?;
        Ok(Response::new(work_to_pb(w)))
    }

    async fn set_agent_credential(
        &self,
        req: Request<pb::SetAgentCredentialRequest>,
    ) -> Reply<pb::AgentCredential> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let value = crate::secrets::SecretValue::new(r.value);
        let c = self
            .service
            .set_credential(
                &p,
                required("namespace", &r.namespace)?,
                required("agent", &r.agent)?,
                required("kind", &r.kind)?,
                value,
            )
            .await?;
        Ok(Response::new(credential_to_pb(c)))
    }

    async fn delete_agent_credential(
        &self,
        req: Request<pb::DeleteAgentCredentialRequest>,
    ) -> Reply<pb::DeleteAgentCredentialResponse> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        self.service
            .delete_credential(
                &p,
                required("namespace", &r.namespace)?,
                required("agent", &r.agent)?,
                required("kind", &r.kind)?,
            )
            .await?;
        Ok(Response::new(pb::DeleteAgentCredentialResponse {}))
    }

    async fn list_agent_credentials(
        &self,
        req: Request<pb::ListAgentCredentialsRequest>,
    ) -> Reply<pb::ListAgentCredentialsResponse> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        let items = self
            .service
            .list_credentials(
                &p,
                required("namespace", &r.namespace)?,
                required("agent", &r.agent)?,
            )
            .await?;
        Ok(Response::new(pb::ListAgentCredentialsResponse {
            items: items.into_iter().map(credential_to_pb).collect(),
        }))
    }

    async fn list_revision_credentials(
        &self,
        req: Request<pb::ListRevisionCredentialsRequest>,
    ) -> Reply<pb::ListAgentCredentialsResponse> {
        let p = self.caller(&req).await?;
        let r = req.into_inner();
        if r.number <= 0 {
            return Err(invalid("number", "must be a positive integer"));
        }
        let items = self
            .service
            .list_revision_credentials(
                &p,
                required("namespace", &r.namespace)?,
                required("agent", &r.agent)?,
                r.number,
            )
            .await?;
        Ok(Response::new(pb::ListAgentCredentialsResponse {
            items: items.into_iter().map(credential_to_pb).collect(),
        }))
    }
}
