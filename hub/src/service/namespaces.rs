//! Namespaces (tenants): created with their provisioning queued, listed
//! with where each stands in its clusters, deleted (torn down first when
//! the pipeline runs).

use chrono::Utc;
use uuid::Uuid;

use super::access::Mutation;
use super::{Result, Service, ServiceError, validate};
use crate::auth::{Action, Principal};
use crate::model::{CreateNamespace, Namespace};
use crate::store::{Effects, NewNamespace, NewWork};
use crate::worker::kinds;

impl Service {
    /// Creates a tenant and queues its provisioning.
    pub async fn create_namespace(&self, p: &Principal, req: CreateNamespace) -> Result<Namespace> {
        let m = Mutation::new(
            p,
            "namespace.create",
            None,
            format!("namespaces/{}", req.name),
        );
        self.authorize(Action::Installation, &m).await?;
        let m = m.in_namespace(&req.name);
        let result = async {
            validate::dns_label("name", &req.name)?;
            let display_name = req.display_name.clone().unwrap_or_else(|| req.name.clone());
            validate::display_name("displayName", &display_name)?;
            if let Some(adopt) = &req.adopt_namespace {
                validate::dns_label("adoptNamespace", adopt)?;
            }
            let id = Uuid::now_v7().to_string();
            let data_plane_namespace = req
                .adopt_namespace
                .clone()
                .unwrap_or_else(|| clawfed_proto::naming::data_plane_namespace(&id));
            let new = NewNamespace {
                id: id.clone(),
                name: req.name.clone(),
                display_name,
                data_plane_namespace: data_plane_namespace.clone(),
                adopted: req.adopt_namespace.is_some(),
            };
            let fx = Effects {
                quotas: Vec::new(),
                audit: m.event("ok", None),
                work: vec![NewWork {
                    kind: kinds::NAMESPACE_PROVISION.into(),
                    namespace_id: Some(id.clone()),
                    target: id,
                    payload: serde_json::json!({ "dataPlaneNamespace": data_plane_namespace }),
                    requested_by: Some(p.token_id.clone()),
                    max_attempts: self.policy.work_max_attempts,
                    run_at: Utc::now(),
                    coalesce: false,
                }],
            };
            Ok(self.store.create_namespace(&new, &fx).await?)
        }
        .await;
        self.finish(&m, result).await
    }

    /// The namespaces the caller may see.
    pub async fn list_namespaces(&self, p: &Principal) -> Result<Vec<Namespace>> {
        let list = if p.is_installation_admin() {
            self.store.list_namespaces(None).await?
        } else {
            match p.namespace.as_deref() {
                Some(ns) => self.store.list_namespaces(Some(ns)).await?,
                None => Vec::new(),
            }
        };
        let mut out = Vec::with_capacity(list.len());
        for ns in list {
            out.push(self.with_cluster_status(ns).await?);
        }
        Ok(out)
    }

    /// One namespace.
    pub async fn get_namespace(&self, p: &Principal, name: &str) -> Result<Namespace> {
        self.check_read(p, Action::Read, Some(name))?;
        let ns = self.store.get_namespace(name).await?;
        self.with_cluster_status(ns).await
    }

    /// `ns` with where it stands in each cluster it was sent to, as their
    /// spokes reported it.
    async fn with_cluster_status(&self, mut ns: Namespace) -> Result<Namespace> {
        let target = clawfed_proto::work::target::namespace(&ns.id);
        ns.clusters = self
            .store
            .target_reports(&target, crate::link::report::WORK_RESULT)
            .await?
            .into_iter()
            .map(|(cluster, report)| {
                crate::link::report::namespace_status(cluster, report.as_ref())
            })
            .collect();
        Ok(ns)
    }

    /// Deletes an empty namespace. With the pipeline on, the namespace is
    /// torn down in its execution clusters first (provider cleanup first;
    /// a failure keeps it): returns false when that teardown was queued,
    /// true when the namespace is already gone.
    pub async fn delete_namespace(&self, p: &Principal, name: &str) -> Result<bool> {
        let m = Mutation::new(
            p,
            "namespace.delete",
            Some(name),
            format!("namespaces/{name}"),
        );
        self.mutate(Action::DeleteNamespace, &m, async {
            if !self.policy.pipeline {
                let fx = m.ok();
                self.store.delete_namespace(name, &fx).await?;
                return Ok(true);
            }
            let ns = self.store.get_namespace(name).await?;
            let agents = self.store.list_agents(name).await?;
            if !agents.is_empty() {
                return Err(ServiceError::FailedPrecondition(format!(
                    "namespace {name:?} still has {} agent(s); delete them first",
                    agents.len()
                )));
            }
            let fx = Effects {
                quotas: Vec::new(),
                audit: m.event("ok", Some("teardown queued".into())),
                work: vec![crate::worker::kinds::teardown_work(
                    &ns.id,
                    Some(p.token_id.clone()),
                    self.policy.work_max_attempts,
                )],
            };
            self.store
                .set_namespace_state(&ns.id, crate::model::NamespaceState::Deleting, None, &fx)
                .await?;
            Ok(false)
        })
        .await
    }
}
