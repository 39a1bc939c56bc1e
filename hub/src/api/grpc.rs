//! gRPC `clawfed.admin.v1.AdminService`: converts messages to the service
//! layer's types and back. Credentials come from the `authorization:
//! Bearer <token>` metadata, or else the verified client certificate (TLS
//! with `api.tls.clientCaFile`), as on REST.
//!
//! # Layout
//! - `fields.rs`: the checks of request fields (required, no NUL, JSON).
//! - `convert.rs`: messages to the service layer's types and back, and
//!   watch frames as messages.
//! - `codec.rs`: the codes of tonic's own codec refusals, mapped to the
//!   error table's.

mod codec;
mod convert;
mod fields;

use std::collections::BTreeMap;

use clawfed_proto::admin::v1 as pb;
use clawfed_proto::admin::v1::admin_service_server::AdminService;
use tonic::{Request, Response, Status};

use crate::auth::Principal;
use crate::model::{
    self, CreateAgent, CreateConfiguration, CreateNamespace, DeployRequest, UpdateAgent,
    UpdateConfiguration,
};
use crate::service::{Service, ServiceError};

pub use codec::codec_status_codes;

use convert::{
    agent_to_pb, audit_to_pb, cluster_to_pb, configuration_to_pb, credential_to_pb,
    diagnosis_to_pb, namespace_to_pb, revision_to_pb, spec_from_pb, time, watch_message,
    work_to_pb,
};
use fields::{json_object, limit, namespace_filter, non_empty, positive, required, scoped};

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

    /// The caller and the request's message: every RPC authenticates first.
    async fn open<T>(&self, req: Request<T>) -> Result<(Principal, T), Status> {
        let p = self.caller(&req).await?;
        Ok((p, req.into_inner()))
    }
}

type Reply<T> = Result<Response<T>, Status>;

/// The answer of an RPC that succeeded.
fn reply<T>(message: T) -> Reply<T> {
    Ok(Response::new(message))
}

/// A listing's items as messages.
fn all<T, U>(items: Vec<T>, to_pb: impl FnMut(T) -> U) -> Vec<U> {
    items.into_iter().map(to_pb).collect()
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    type WatchStream = std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<pb::WatchEvent, Status>> + Send + 'static>,
    >;

    type StreamAuditEventsStream = std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<pb::AuditEvent, Status>> + Send + 'static>,
    >;

    async fn watch(&self, req: Request<pb::WatchRequest>) -> Reply<Self::WatchStream> {
        use crate::model::event::{RelistEvent, RelistReason};
        use crate::watch::Frame;
        use futures::StreamExt;
        let (p, r) = self.open(req).await?;
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
        let (p, r) = self.open(req).await?;
        let create = CreateNamespace {
            name: r.name,
            display_name: non_empty(r.display_name),
            adopt_namespace: r.adopt_namespace,
        };
        let created = self.service.create_namespace(&p, create).await?;
        reply(namespace_to_pb(created))
    }

    async fn list_namespaces(
        &self,
        req: Request<pb::ListNamespacesRequest>,
    ) -> Reply<pb::ListNamespacesResponse> {
        let (p, _) = self.open(req).await?;
        let items = self.service.list_namespaces(&p).await?;
        reply(pb::ListNamespacesResponse {
            items: all(items, namespace_to_pb),
        })
    }

    async fn get_namespace(&self, req: Request<pb::GetNamespaceRequest>) -> Reply<pb::Namespace> {
        let (p, r) = self.open(req).await?;
        let ns = self
            .service
            .get_namespace(&p, required("name", &r.name)?)
            .await?;
        reply(namespace_to_pb(ns))
    }

    async fn delete_namespace(
        &self,
        req: Request<pb::DeleteNamespaceRequest>,
    ) -> Reply<pb::DeleteNamespaceResponse> {
        let (p, r) = self.open(req).await?;
        self.service
            .delete_namespace(&p, required("name", &r.name)?)
            .await?;
        reply(pb::DeleteNamespaceResponse {})
    }

    async fn get_quota(&self, req: Request<pb::GetQuotaRequest>) -> Reply<pb::TenantQuota> {
        let (p, r) = self.open(req).await?;
        let status = self
            .service
            .quota(&p, required("namespace", &r.namespace)?)
            .await?;
        reply(pb::TenantQuota {
            namespace: status.namespace,
            items: all(status.items, |i| pb::QuotaItem {
                name: i.name,
                limit: i.limit,
                used: i.used,
            }),
        })
    }

    async fn create_configuration(
        &self,
        req: Request<pb::CreateConfigurationRequest>,
    ) -> Reply<pb::Configuration> {
        let (p, r) = self.open(req).await?;
        let data = json_object("data_json", &r.data_json)?;
        let ns = required("namespace", &r.namespace)?;
        let create = CreateConfiguration { name: r.name, data };
        let c = self.service.create_configuration(&p, ns, create).await?;
        reply(configuration_to_pb(c))
    }

    async fn list_configurations(
        &self,
        req: Request<pb::ListConfigurationsRequest>,
    ) -> Reply<pb::ListConfigurationsResponse> {
        let (p, r) = self.open(req).await?;
        let ns = required("namespace", &r.namespace)?;
        let items = self.service.list_configurations(&p, ns).await?;
        reply(pb::ListConfigurationsResponse {
            items: all(items, configuration_to_pb),
        })
    }

    async fn get_configuration(
        &self,
        req: Request<pb::GetConfigurationRequest>,
    ) -> Reply<pb::Configuration> {
        let (p, r) = self.open(req).await?;
        let (ns, name) = scoped(&r.namespace, "name", &r.name)?;
        let c = self.service.get_configuration(&p, ns, name).await?;
        reply(configuration_to_pb(c))
    }

    async fn update_configuration(
        &self,
        req: Request<pb::UpdateConfigurationRequest>,
    ) -> Reply<pb::Configuration> {
        let (p, r) = self.open(req).await?;
        let data = json_object("data_json", &r.data_json)?;
        let (ns, name) = scoped(&r.namespace, "name", &r.name)?;
        let update = UpdateConfiguration {
            data,
            version: r.expected_version,
        };
        let c = self
            .service
            .update_configuration(&p, ns, name, update)
            .await?;
        reply(configuration_to_pb(c))
    }

    async fn delete_configuration(
        &self,
        req: Request<pb::DeleteConfigurationRequest>,
    ) -> Reply<pb::DeleteConfigurationResponse> {
        let (p, r) = self.open(req).await?;
        let (ns, name) = scoped(&r.namespace, "name", &r.name)?;
        self.service.delete_configuration(&p, ns, name).await?;
        reply(pb::DeleteConfigurationResponse {})
    }

    async fn create_agent(&self, req: Request<pb::CreateAgentRequest>) -> Reply<pb::Agent> {
        let (p, r) = self.open(req).await?;
        let spec = spec_from_pb(r.spec)?;
        let ns = required("namespace", &r.namespace)?;
        let create = CreateAgent { name: r.name, spec };
        let a = self.service.create_agent(&p, ns, create).await?;
        reply(agent_to_pb(a))
    }

    async fn list_agents(
        &self,
        req: Request<pb::ListAgentsRequest>,
    ) -> Reply<pb::ListAgentsResponse> {
        let (p, r) = self.open(req).await?;
        let ns = required("namespace", &r.namespace)?;
        let items = self.service.list_agents(&p, ns).await?;
        reply(pb::ListAgentsResponse {
            items: all(items, agent_to_pb),
        })
    }

    async fn get_agent(&self, req: Request<pb::GetAgentRequest>) -> Reply<pb::Agent> {
        let (p, r) = self.open(req).await?;
        let (ns, name) = scoped(&r.namespace, "name", &r.name)?;
        let a = self.service.get_agent(&p, ns, name).await?;
        reply(agent_to_pb(a))
    }

    async fn update_agent(&self, req: Request<pb::UpdateAgentRequest>) -> Reply<pb::Agent> {
        let (p, r) = self.open(req).await?;
        let spec = spec_from_pb(r.spec)?;
        let (ns, name) = scoped(&r.namespace, "name", &r.name)?;
        let update = UpdateAgent {
            spec,
            version: r.expected_version,
        };
        let a = self.service.update_agent(&p, ns, name, update).await?;
        reply(agent_to_pb(a))
    }

    async fn delete_agent(
        &self,
        req: Request<pb::DeleteAgentRequest>,
    ) -> Reply<pb::DeleteAgentResponse> {
        let (p, r) = self.open(req).await?;
        let (ns, name) = scoped(&r.namespace, "name", &r.name)?;
        self.service.delete_agent(&p, ns, name).await?;
        reply(pb::DeleteAgentResponse {})
    }

    async fn deploy(&self, req: Request<pb::DeployRequest>) -> Reply<pb::AgentRevision> {
        let (p, r) = self.open(req).await?;
        let (ns, agent) = scoped(&r.namespace, "agent", &r.agent)?;
        let deploy = DeployRequest {
            from_revision: r.from_revision,
        };
        let key = non_empty(r.idempotency_key);
        let (rev, _created) = self.service.deploy(&p, ns, agent, deploy, key).await?;
        reply(revision_to_pb(rev))
    }

    async fn stop(&self, req: Request<pb::StopRequest>) -> Reply<pb::Agent> {
        let (p, r) = self.open(req).await?;
        let (ns, agent) = scoped(&r.namespace, "agent", &r.agent)?;
        let a = self.service.stop(&p, ns, agent).await?;
        reply(agent_to_pb(a))
    }

    async fn list_revisions(
        &self,
        req: Request<pb::ListRevisionsRequest>,
    ) -> Reply<pb::ListRevisionsResponse> {
        let (p, r) = self.open(req).await?;
        let (ns, agent) = scoped(&r.namespace, "agent", &r.agent)?;
        let items = self.service.list_revisions(&p, ns, agent).await?;
        reply(pb::ListRevisionsResponse {
            items: all(items, revision_to_pb),
        })
    }

    async fn diagnose_agent(&self, req: Request<pb::DiagnoseAgentRequest>) -> Reply<pb::Diagnosis> {
        let (p, r) = self.open(req).await?;
        let (ns, name) = scoped(&r.namespace, "name", &r.name)?;
        let revision = (r.revision != 0).then_some(r.revision);
        let d = self.service.diagnose(&p, ns, name, revision).await?;
        reply(diagnosis_to_pb(d))
    }

    async fn chat_agent(&self, req: Request<pb::ChatAgentRequest>) -> Reply<pb::ChatAnswer> {
        let (p, r) = self.open(req).await?;
        let (ns, name) = scoped(&r.namespace, "name", &r.name)?;
        let chat = model::ChatRequest {
            message: r.message,
            conversation: (!r.conversation.is_empty()).then_some(r.conversation),
        };
        let a = self.service.chat(&p, ns, name, chat).await?;
        reply(pb::ChatAnswer {
            namespace: a.namespace,
            agent: a.agent,
            revision: a.revision,
            conversation: a.conversation,
            answer: a.answer,
            elapsed_ms: a.elapsed_ms,
        })
    }

    async fn get_revision(&self, req: Request<pb::GetRevisionRequest>) -> Reply<pb::AgentRevision> {
        let (p, r) = self.open(req).await?;
        let number = positive("number", r.number)?;
        let (ns, agent) = scoped(&r.namespace, "agent", &r.agent)?;
        let rev = self.service.get_revision(&p, ns, agent, number).await?;
        reply(revision_to_pb(rev))
    }

    async fn list_clusters(
        &self,
        req: Request<pb::ListClustersRequest>,
    ) -> Reply<pb::ListClustersResponse> {
        let (p, _) = self.open(req).await?;
        let items = self.service.list_clusters(&p).await?;
        reply(pb::ListClustersResponse {
            items: all(items, cluster_to_pb),
        })
    }

    async fn get_cluster(&self, req: Request<pb::GetClusterRequest>) -> Reply<pb::Cluster> {
        let (p, r) = self.open(req).await?;
        let c = self
            .service
            .get_cluster(&p, required("name", &r.name)?)
            .await?;
        reply(cluster_to_pb(c))
    }

    async fn create_bootstrap_token(
        &self,
        req: Request<pb::CreateBootstrapTokenRequest>,
    ) -> Reply<pb::BootstrapToken> {
        let (p, r) = self.open(req).await?;
        let cluster = required("cluster_name", &r.cluster_name)?;
        let create = model::CreateBootstrapToken {
            ttl_seconds: limit(r.ttl_seconds),
            reenroll: r.reenroll,
            require_approval: r.require_approval,
        };
        let created = self
            .service
            .create_bootstrap_token(&p, cluster, create)
            .await?;
        reply(pb::BootstrapToken {
            cluster_name: created.cluster_name,
            token: created.token,
            expires_at: time(created.expires_at),
            reenroll: created.reenroll,
        })
    }

    async fn revoke_cluster(&self, req: Request<pb::RevokeClusterRequest>) -> Reply<pb::Cluster> {
        let (p, r) = self.open(req).await?;
        let c = self
            .service
            .revoke_cluster(&p, required("name", &r.name)?)
            .await?;
        reply(cluster_to_pb(c))
    }

    async fn cordon_cluster(&self, req: Request<pb::CordonClusterRequest>) -> Reply<pb::Cluster> {
        let (p, r) = self.open(req).await?;
        let c = self
            .service
            .cordon_cluster(&p, required("name", &r.name)?)
            .await?;
        reply(cluster_to_pb(c))
    }

    async fn uncordon_cluster(
        &self,
        req: Request<pb::UncordonClusterRequest>,
    ) -> Reply<pb::Cluster> {
        let (p, r) = self.open(req).await?;
        let c = self
            .service
            .uncordon_cluster(&p, required("name", &r.name)?)
            .await?;
        reply(cluster_to_pb(c))
    }

    async fn drain_cluster(&self, req: Request<pb::DrainClusterRequest>) -> Reply<pb::Cluster> {
        let (p, r) = self.open(req).await?;
        let body = crate::model::DrainRequest {
            parallelism: (r.parallelism != 0).then_some(r.parallelism),
        };
        let c = self
            .service
            .drain_cluster(&p, required("name", &r.name)?, body)
            .await?;
        reply(cluster_to_pb(c))
    }

    async fn approve_cluster(
        &self,
        req: Request<pb::ApproveClusterRequest>,
    ) -> Reply<pb::ApproveClusterResponse> {
        let (p, r) = self.open(req).await?;
        self.service
            .approve_cluster(&p, required("name", &r.name)?)
            .await?;
        reply(pb::ApproveClusterResponse {})
    }

    async fn get_fleet_summary(
        &self,
        req: Request<pb::GetFleetSummaryRequest>,
    ) -> Reply<pb::FleetSummary> {
        let (p, _) = self.open(req).await?;
        let f = self.service.fleet_summary(&p).await?;
        reply(pb::FleetSummary {
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
        })
    }

    async fn list_audit_events(
        &self,
        req: Request<pb::ListAuditEventsRequest>,
    ) -> Reply<pb::ListAuditEventsResponse> {
        let (p, r) = self.open(req).await?;
        let ns = namespace_filter(r.namespace)?;
        let items = self
            .service
            .list_audit(&p, ns.as_deref(), limit(r.limit))
            .await?;
        reply(pb::ListAuditEventsResponse {
            items: all(items, audit_to_pb),
        })
    }

    async fn stream_audit_events(
        &self,
        req: Request<pb::StreamAuditEventsRequest>,
    ) -> Reply<Self::StreamAuditEventsStream> {
        use crate::audit_stream::AuditFrame;
        use futures::StreamExt;
        let (p, r) = self.open(req).await?;
        let ns = namespace_filter(r.namespace)?;
        let subscription = match self
            .service
            .stream_audit(&p, ns.as_deref(), r.cursor, r.follow.unwrap_or(true))
            .await
        {
            Ok(s) => s,
            // Not OUT_OF_RANGE: the codec layer reserves that code's
            // trailers-only answers (see `codec_status_codes`).
            Err(ServiceError::OutOfRange(message)) => {
                return Err(Status::failed_precondition(message));
            }
            Err(e) => return Err(e.into()),
        };
        let after = subscription.after();
        let mut response = Response::new(Box::pin(subscription.into_stream().map(
            |frame| match frame {
                AuditFrame::Event(e) => Ok(audit_to_pb(e)),
                AuditFrame::Unauthenticated(reason) => Err(Status::unauthenticated(reason)),
                AuditFrame::Unavailable(reason) => Err(Status::unavailable(reason)),
            },
        )) as Self::StreamAuditEventsStream);
        response.metadata_mut().insert(
            crate::audit_stream::AFTER_HEADER,
            tonic::metadata::MetadataValue::from(after),
        );
        Ok(response)
    }

    async fn list_work(&self, req: Request<pb::ListWorkRequest>) -> Reply<pb::ListWorkResponse> {
        let (p, r) = self.open(req).await?;
        let ns = namespace_filter(r.namespace)?;
        let state = non_empty(r.state);
        let items = self
            .service
            .list_work(&p, ns.as_deref(), state.as_deref(), limit(r.limit))
            .await?;
        reply(pb::ListWorkResponse {
            items: all(items, work_to_pb),
        })
    }

    async fn get_work(&self, req: Request<pb::GetWorkRequest>) -> Reply<pb::WorkItem> {
        let (p, r) = self.open(req).await?;
        let w = self.service.get_work(&p, required("id", &r.id)?).await?;
        reply(work_to_pb(w))
    }

    async fn set_agent_credential(
        &self,
        req: Request<pb::SetAgentCredentialRequest>,
    ) -> Reply<pb::AgentCredential> {
        let (p, r) = self.open(req).await?;
        let value = crate::secrets::SecretValue::new(r.value);
        let (ns, agent) = scoped(&r.namespace, "agent", &r.agent)?;
        let kind = required("kind", &r.kind)?;
        let c = self
            .service
            .set_credential(&p, ns, agent, kind, value)
            .await?;
        reply(credential_to_pb(c))
    }

    async fn delete_agent_credential(
        &self,
        req: Request<pb::DeleteAgentCredentialRequest>,
    ) -> Reply<pb::DeleteAgentCredentialResponse> {
        let (p, r) = self.open(req).await?;
        let (ns, agent) = scoped(&r.namespace, "agent", &r.agent)?;
        let kind = required("kind", &r.kind)?;
        self.service.delete_credential(&p, ns, agent, kind).await?;
        reply(pb::DeleteAgentCredentialResponse {})
    }

    async fn list_agent_credentials(
        &self,
        req: Request<pb::ListAgentCredentialsRequest>,
    ) -> Reply<pb::ListAgentCredentialsResponse> {
        let (p, r) = self.open(req).await?;
        let (ns, agent) = scoped(&r.namespace, "agent", &r.agent)?;
        let items = self.service.list_credentials(&p, ns, agent).await?;
        reply(pb::ListAgentCredentialsResponse {
            items: all(items, credential_to_pb),
        })
    }

    async fn list_revision_credentials(
        &self,
        req: Request<pb::ListRevisionCredentialsRequest>,
    ) -> Reply<pb::ListAgentCredentialsResponse> {
        let (p, r) = self.open(req).await?;
        let number = positive("number", r.number)?;
        let (ns, agent) = scoped(&r.namespace, "agent", &r.agent)?;
        let items = self
            .service
            .list_revision_credentials(&p, ns, agent, number)
            .await?;
        reply(pb::ListAgentCredentialsResponse {
            items: all(items, credential_to_pb),
        })
    }
}
