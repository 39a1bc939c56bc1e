//! Agents' drafts: created, read, replaced and deleted (a deleted Agent's
//! runtime state follows once the pipeline runs). Deploys and stops are in
//! `revisions.rs`.

use super::access::Mutation;
use super::{Result, Service, ServiceError, validate};
use crate::auth::{Action, Principal};
use crate::model::{Agent, CreateAgent, UpdateAgent};
use crate::quota::QuotaKind;
use crate::store::{Effects, NewAgent, NewWork, StoreError};

impl Service {
    /// Creates an Agent draft.
    pub async fn create_agent(&self, p: &Principal, ns: &str, req: CreateAgent) -> Result<Agent> {
        let m = Mutation::new(p, "agent.create", Some(ns), format!("agents/{}", req.name));
        self.mutate(Action::EditDraft, &m, async {
            validate::agent_name("name", &req.name)?;
            validate::agent_spec(&req.spec, self.policy.default_agent_image.is_some())?;
            self.check_configuration_exists(ns, req.spec.configuration.as_deref())
                .await?;
            let mut fx = m.ok();
            fx.quotas = self.quota_checks(ns, &[QuotaKind::Agents]);
            let new = NewAgent {
                namespace: ns.to_owned(),
                name: req.name.clone(),
                spec: req.spec,
            };
            Ok(self.store.create_agent(&new, &fx).await?)
        })
        .await
    }

    /// The effects of `m` on Agent `agent`: its audit record, plus the
    /// work `work` makes for the pipeline when it runs.
    pub(super) async fn agent_effects(
        &self,
        m: &Mutation<'_>,
        ns: &str,
        agent: &str,
        work: fn(&str, &str, Option<String>, i32) -> NewWork,
    ) -> Result<Effects> {
        let mut fx = m.ok();
        if self.policy.pipeline {
            let namespace = self.store.get_namespace(ns).await?;
            fx.work.push(work(
                agent,
                &namespace.id,
                Some(m.p.token_id.clone()),
                self.policy.work_max_attempts,
            ));
        }
        Ok(fx)
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
        let m = Mutation::new(p, "agent.update", Some(ns), format!("agents/{name}"));
        self.mutate(Action::EditDraft, &m, async {
            validate::agent_spec(&req.spec, self.policy.default_agent_image.is_some())?;
            self.check_configuration_exists(ns, req.spec.configuration.as_deref())
                .await?;
            let fx = m.ok();
            Ok(self
                .store
                .update_agent(ns, name, &req.spec, req.version, &fx)
                .await?)
        })
        .await
    }

    /// Deletes a stopped Agent.
    pub async fn delete_agent(&self, p: &Principal, ns: &str, name: &str) -> Result<()> {
        let m = Mutation::new(p, "agent.delete", Some(ns), format!("agents/{name}"));
        self.authorize(Action::EditDraft, &m).await?;
        // Its history stays in the store; its runtime state in the
        // clusters follows pipeline.retainOnAgentDelete.
        let fx = self
            .agent_effects(&m, ns, name, crate::worker::kinds::delete_work)
            .await?;
        let result = self
            .store
            .delete_agent(ns, name, &fx)
            .await
            .map_err(Into::into);
        self.finish(&m, result).await
    }
}
