//! Configurations: the documents Agents name, created, read, replaced
//! (optimistic concurrency) and deleted.

use super::access::audit;
use super::{Result, Service, validate};
use crate::auth::{Action, Principal};
use crate::model::{Configuration, CreateConfiguration, UpdateConfiguration};
use crate::store::Effects;

impl Service {
    /// Creates a configuration document.
    pub async fn create_configuration(
        &self,
        p: &Principal,
        ns: &str,
        req: CreateConfiguration,
    ) -> Result<Configuration> {
        let target = format!("configurations/{}", req.name);
        let what = "configuration.create";
        self.check_mutation(p, Action::EditDraft, Some(ns), what, &target)
            .await?;
        let result = async {
            validate::dns_label("name", &req.name)?;
            validate::configuration_data("data", &req.data)?;
            let fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
            Ok(self
                .store
                .create_configuration(ns, &req.name, &req.data, &fx)
                .await?)
        }
        .await;
        self.record(p, what, Some(ns), &target, result).await
    }

    /// Configurations of a namespace.
    pub async fn list_configurations(&self, p: &Principal, ns: &str) -> Result<Vec<Configuration>> {
        self.check_read(p, Action::Read, Some(ns))?;
        self.store.get_namespace(ns).await?;
        Ok(self.store.list_configurations(ns).await?)
    }

    /// One configuration.
    pub async fn get_configuration(
        &self,
        p: &Principal,
        ns: &str,
        name: &str,
    ) -> Result<Configuration> {
        self.check_read(p, Action::Read, Some(ns))?;
        Ok(self.store.get_configuration(ns, name).await?)
    }

    /// Replaces a configuration document (optimistic concurrency).
    pub async fn update_configuration(
        &self,
        p: &Principal,
        ns: &str,
        name: &str,
        req: UpdateConfiguration,
    ) -> Result<Configuration> {
        let target = format!("configurations/{name}");
        let what = "configuration.update";
        self.check_mutation(p, Action::EditDraft, Some(ns), what, &target)
            .await?;
        let result = async {
            validate::configuration_data("data", &req.data)?;
            let fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
            Ok(self
                .store
                .update_configuration(ns, name, &req.data, req.version, &fx)
                .await?)
        }
        .await;
        self.record(p, what, Some(ns), &target, result).await
    }

    /// Deletes a configuration.
    pub async fn delete_configuration(&self, p: &Principal, ns: &str, name: &str) -> Result<()> {
        let target = format!("configurations/{name}");
        let what = "configuration.delete";
        self.check_mutation(p, Action::EditDraft, Some(ns), what, &target)
            .await?;
        let fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
        let result = self
            .store
            .delete_configuration(ns, name, &fx)
            .await
            .map_err(Into::into);
        self.record(p, what, Some(ns), &target, result).await
    }
}
