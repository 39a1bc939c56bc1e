//! Agents' drafts: created, read, replaced and deleted (a deleted Agent's
//! runtime state follows once the pipeline runs). Deploys and stops are in
//! `revisions.rs`.

use super::access::audit;
use super::{Result, Service, ServiceError, validate};
use crate::auth::{Action, Principal};
use crate::model::{Agent, CreateAgent, UpdateAgent};
use crate::store::{Effects, NewAgent, StoreError};

impl Service {
    /// Creates an Agent draft.
    pub async fn create_agent(&self, p: &Principal, ns: &str, req: CreateAgent) -> Result<Agent> {
        let target = format!("agents/{}", req.name);
        let what = "agent.create";
        self.check_mutation(p, Action::EditDraft, Some(ns), what, &target)
            .await?;
        let result = async {
            validate::agent_name("name", &req.name)?;
            validate::agent_spec(&req.spec, self.policy.default_agent_image.is_some())?;
            self.check_configuration_exists(ns, req.spec.configuration.as_deref())
                .await?;
            let fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
            let new = NewAgent {
                namespace: ns.to_owned(),
                name: req.name.clone(),
                spec: req.spec,
            };
            Ok(self.store.create_agent(&new, &fx).await?)
        }
        .await;
        self.record(p, what, Some(ns), &target, result).await
    }

    async fn check_configuration_exists(&self, ns: &str, name: Option<&str>) -> Result<()> {
        let Some(name) = name else { return Ok(()) };
        match self.store.get_configuration(ns, name).await {
            Ok(_) => Ok(()),
            Err(StoreError::NotFound { .. }) => Err(ServiceError::InvalidArgument {
                field: "spec.configuration".into(),
                reason: format!("configuration {name:?} does not exist in namespace {ns:?}"),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// Agents of a namespace.
    pub async fn list_agents(&self, p: &Principal, ns: &str) -> Result<Vec<Agent>> {
        self.check_read(p, Action::Read, Some(ns))?;
        self.store.get_namespace(ns).await?;
        Ok(self.store.list_agents(ns).await?)
    }

    /// One Agent.
    pub async fn get_agent(&self, p: &Principal, ns: &str, name: &str) -> Result<Agent> {
        self.check_read(p, Action::Read, Some(ns))?;
        Ok(self.store.get_agent(ns, name).await?)
    }

    /// Replaces an Agent's draft spec. Running revisions are not affected.
    pub async fn update_agent(
        &self,
        p: &Principal,
        ns: &str,
        name: &str,
        req: UpdateAgent,
    ) -> Result<Agent> {
        let target = format!("agents/{name}");
        let what = "agent.update";
        self.check_mutation(p, Action::EditDraft, Some(ns), what, &target)
            .await?;
        let result = async {
            validate::agent_spec(&req.spec, self.policy.default_agent_image.is_some())?;
            self.check_configuration_exists(ns, req.spec.configuration.as_deref())
                .await?;
            let fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
            Ok(self
                .store
                .update_agent(ns, name, &req.spec, req.version, &fx)
                .await?)
        }
        .await;
        self.record(p, what, Some(ns), &target, result).await
    }

    /// Deletes a stopped Agent.
    pub async fn delete_agent(&self, p: &Principal, ns: &str, name: &str) -> Result<()> {
        let target = format!("agents/{name}");
        let what = "agent.delete";
        self.check_mutation(p, Action::EditDraft, Some(ns), what, &target)
            .await?;
        let mut fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
        if self.policy.pipeline {
            // Its history stays in the store; its runtime state in the
            // clusters follows pipeline.retainOnAgentDelete.
            let namespace = self.store.get_namespace(ns).await?;
            fx.work.push(crate::worker::kinds::delete_work(
                name,
                &namespace.id,
                Some(p.token_id.clone()),
                self.policy.work_max_attempts,
            ));
        }
        let result = self
            .store
            .delete_agent(ns, name, &fx)
            .await
            .map_err(Into::into);
        self.record(p, what, Some(ns), &target, result).await
    }
}
