//! Agent revisions: deploy and rollback (admission: configuration, image
//! and placement checks, frozen into an immutable revision), stop, and the
//! revisions read back with their spokes' readiness and drift reports.

use chrono::Utc;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::access::Mutation;
use super::{Result, Service, ServiceError, validate};
use crate::auth::{Action, Principal};
use crate::model::{Agent, AgentRevision, DeployRequest, DesiredState};
use crate::quota::QuotaKind;
use crate::store::{IdempotencyKey, NewRevision, StoreError};

impl Service {
    /// Freezes the Agent's draft (or, for a rollback, an earlier revision)
    /// into a new immutable revision.
    pub async fn deploy(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
        req: DeployRequest,
        idempotency_key: Option<String>,
    ) -> Result<(AgentRevision, bool)> {
        let what = if req.from_revision.is_some() {
            "agent.rollback"
        } else {
            "agent.deploy"
        };
        let m = Mutation::new(p, what, Some(ns), format!("agents/{agent}"));
        self.authorize(Action::Deploy, &m).await?;
        let result = self.admit(p, ns, agent, &req, idempotency_key, &m).await;
        self.finish(&m, result).await
    }

    async fn admit(
        &self,
        p: &Principal,
        ns: &str,
        agent_name: &str,
        req: &DeployRequest,
        idempotency_key: Option<String>,
        m: &Mutation<'_>,
    ) -> Result<(AgentRevision, bool)> {
        if let Some(key) = &idempotency_key {
            validate::idempotency_key("Idempotency-Key", key)?;
        }
        let agent = self.store.get_agent(ns, agent_name).await?;
        let (spec, configuration) = match req.from_revision {
            Some(number) => {
                let earlier = match self.store.get_revision(ns, agent_name, number).await {
                    Err(StoreError::NotFound { .. }) => {
                        return Err(ServiceError::InvalidArgument {
                            field: "fromRevision".into(),
                            reason: format!("agent {agent_name:?} has no revision {number}"),
                        });
                    }
                    other => other?,
                };
                (earlier.spec, earlier.configuration)
            }
            None => {
                let configuration = match &agent.spec.configuration {
                    Some(name) => match self.store.get_configuration(ns, name).await {
                        Ok(c) => c.data,
                        Err(StoreError::NotFound { .. }) => {
                            return Err(ServiceError::FailedPrecondition(format!(
                                "spec.configuration names {name:?}, which no longer exists"
                            )));
                        }
                        Err(e) => return Err(e.into()),
                    },
                    None => serde_json::Value::Null,
                };
                (agent.spec.clone(), configuration)
            }
        };
        // An OpenClaw runtime gets the document as its config file: a key
        // clawfed owns there is refused now, not found wrong at run time.
        if spec.harness_kind.is_openclaw()
            && let Some(conflict) =
                crate::runtime_config::conflicts(&configuration, self.policy.harness_port).first()
        {
            return Err(ServiceError::InvalidArgument {
                field: format!(
                    "configuration {:?}: {}",
                    spec.configuration.as_deref().unwrap_or_default(),
                    conflict.key
                ),
                reason: conflict.to_string(),
            });
        }
        if self.policy.gateway_node_selector_required && spec.harness_kind.has_control_gateway() {
            return Err(ServiceError::FailedPrecondition(format!(
                "the installation is in production mode and sets no \
                 drivers.compute.configuration.runtime.gatewayNodeSelector \
                 (gateway.options.nodeSelector): a {} Agent's Gateway must run on the \
                 trusted nodes it selects",
                spec.harness_kind.as_str()
            )));
        }
        let gateway_image = spec
            .gateway_image
            .clone()
            .unwrap_or_else(|| self.policy.default_gateway_image.clone());
        // An empty spec image is the installation's agent image (admitted
        // only while one is configured), frozen into the revision here.
        let harness_image = match (spec.image.as_str(), &self.policy.default_agent_image) {
            ("", Some(default)) => default.clone(),
            ("", None) => {
                return Err(ServiceError::InvalidArgument {
                    field: "spec.image".into(),
                    reason: "must not be empty: the installation sets no default agent image \
                             (drivers.compute.configuration.images.agent)"
                        .into(),
                });
            }
            (image, _) => image.to_owned(),
        };
        let images = vec![
            validate::image_ref("harness", &harness_image),
            validate::image_ref("gateway", &gateway_image),
        ];
        // The spoke's and the Gateways' rule (`@sha256:` and 64 hex digits),
        // so a deploy admitted here is never refused there.
        if self.policy.require_immutable_digest
            && let Some(unpinned) = images
                .iter()
                .find(|i| clawfed_proto::work::check_image_digest(&i.reference).is_err())
        {
            let field = if unpinned.role == "harness" {
                "spec.image"
            } else {
                "spec.gatewayImage"
            };
            return Err(ServiceError::InvalidArgument {
                field: field.into(),
                reason: format!(
                    "policy.requireImmutableDigest is set: {:?} must be pinned as \
                     name@sha256:<64 hex digits>",
                    unpinned.reference
                ),
            });
        }
        let resolved_cluster = self.resolve_cluster(&spec).await?;
        let idempotency = idempotency_key.map(|key| IdempotencyKey {
            fingerprint: fingerprint(agent_name, req),
            key,
        });
        let new = NewRevision {
            id: Uuid::now_v7().to_string(),
            namespace: ns.to_owned(),
            agent: agent_name.to_owned(),
            agent_version: agent.version,
            spec,
            configuration,
            images,
            resolved_cluster,
            rolled_back_from: req.from_revision,
            moved: None,
            idempotency,
            requested_by: Some(p.token_id.clone()),
        };
        let mut fx = m.ok();
        fx.quotas = self.quota_checks(ns, &[QuotaKind::RunningAgents, QuotaKind::RevisionsPerHour]);
        if self.policy.pipeline {
            let namespace = self.store.get_namespace(ns).await?;
            fx.work.push(crate::worker::kinds::rollout_work(
                &new.id,
                &namespace.id,
                Some(p.token_id.clone()),
                Utc::now(),
                self.policy.work_max_attempts,
            ));
        }
        let deployed = self.store.deploy(&new, &fx).await?;
        Ok((deployed.revision, deployed.created))
    }

    /// An explicit placement must name an enrolled, uncordoned cluster that
    /// can serve the revision; placed now when a cluster takes it
    /// (`pipeline::choose_cluster`: the pinned one, or by the placement's
    /// rule), or not yet (the pipeline places it when one can, saying why
    /// meanwhile).
    async fn resolve_cluster(&self, spec: &crate::model::AgentSpec) -> Result<Option<String>> {
        let request = crate::pipeline::PlacementRequest {
            placement: &spec.placement,
            needs: crate::pipeline::needs(spec),
            demand: crate::worker::rollout::spec::harness_demand(spec, &self.policy.workload),
        };
        if let Some(name) = &spec.placement.cluster {
            match self.store.get_cluster(name).await {
                Ok(c) if c.cordoned() => {
                    return Err(ServiceError::FailedPrecondition(format!(
                        "spec.placement.cluster: cluster {name} is cordoned: it takes no new \
                         revisions until `clawfed clusters uncordon {name}`"
                    )));
                }
                Ok(c) => {
                    if let Some(why) = crate::pipeline::cannot_serve(&c, request.needs) {
                        return Err(ServiceError::FailedPrecondition(format!(
                            "spec.placement.cluster: {why}"
                        )));
                    }
                    // Pinned and fitting (or not reported yet): placed.
                    let fits = crate::pipeline::why_not(&c, &request).is_none();
                    return Ok(fits.then_some(c.name));
                }
                Err(StoreError::NotFound { .. }) => {
                    return Err(ServiceError::FailedPrecondition(format!(
                        "spec.placement.cluster names {name:?}, which is not enrolled"
                    )));
                }
                Err(e) => return Err(e.into()),
            }
        }
        let clusters = self.store.list_clusters().await?;
        // A refusal is left to the pipeline, which fails the revision naming
        // why (another cluster may come online before it places).
        Ok(match crate::pipeline::choose_cluster(&clusters, &request) {
            crate::pipeline::Placement::Chosen(c) => Some(c.name.clone()),
            _ => None,
        })
    }

    /// Stops an Agent: its desired state becomes `stopped`.
    pub async fn stop(&self, p: &Principal, ns: &str, agent: &str) -> Result<Agent> {
        let m = Mutation::new(p, "agent.stop", Some(ns), format!("agents/{agent}"));
        self.authorize(Action::Deploy, &m).await?;
        let fx = self
            .agent_effects(&m, ns, agent, crate::worker::kinds::stop_work)
            .await?;
        let result = self
            .store
            .set_desired_state(ns, agent, DesiredState::Stopped, &fx)
            .await
            .map_err(Into::into);
        self.finish(&m, result).await
    }

    /// Revisions of an Agent, oldest first.
    pub async fn list_revisions(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
    ) -> Result<Vec<AgentRevision>> {
        self.check_read(p, Action::Read, Some(ns))?;
        let mut revisions = self.store.list_revisions(ns, agent).await?;
        self.attach_readiness(ns, &mut revisions).await?;
        Ok(revisions)
    }

    /// The spoke's latest readiness verdict for each of `revisions` (all of
    /// namespace `ns`), from the cluster each is placed on.
    async fn attach_readiness(&self, ns: &str, revisions: &mut [AgentRevision]) -> Result<()> {
        use crate::link::report::{READINESS, ReadinessReport};
        if revisions.iter().all(|r| r.resolved_cluster.is_none()) {
            return Ok(());
        }
        let ns_id = self.store.get_namespace(ns).await?.id;
        let cluster_ids: std::collections::HashMap<String, String> = self
            .store
            .list_clusters()
            .await?
            .into_iter()
            .map(|c| (c.name, c.id))
            .collect();
        for rev in revisions {
            let Some(cluster_id) = rev
                .resolved_cluster
                .as_ref()
                .and_then(|c| cluster_ids.get(c))
            else {
                continue;
            };
            let target = clawfed_proto::work::target::harness(&ns_id, &rev.agent, rev.number);
            rev.readiness = self
                .store
                .get_report(cluster_id, &target, READINESS)
                .await?
                .and_then(|r| serde_json::from_value::<ReadinessReport>(r.body).ok())
                .filter(|r| r.revision_id.is_empty() || r.revision_id == rev.id);
            rev.drift = self
                .store
                .get_report(cluster_id, &target, crate::link::report::DRIFT)
                .await?
                .and_then(|r| serde_json::from_value(r.body).ok());
        }
        Ok(())
    }

    /// One revision.
    pub async fn get_revision(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
        number: i64,
    ) -> Result<AgentRevision> {
        self.check_read(p, Action::Read, Some(ns))?;
        let mut rev = self.store.get_revision(ns, agent, number).await?;
        self.attach_readiness(ns, std::slice::from_mut(&mut rev))
            .await?;
        Ok(rev)
    }
}

/// What a deploy asked for, so a reused Idempotency-Key with a different
/// request is caught.
fn fingerprint(agent: &str, req: &DeployRequest) -> String {
    let canonical = serde_json::json!({ "agent": agent, "fromRevision": req.from_revision });
    hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
}
