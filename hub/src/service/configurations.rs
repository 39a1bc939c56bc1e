//! Configurations: the documents Agents name, created, read, replaced
//! (optimistic concurrency) and deleted.

use super::access::Mutation;
use super::{Result, Service, validate};
use crate::auth::{Action, Principal};
use crate::model::{Configuration, CreateConfiguration, UpdateConfiguration};

impl Service {
    /// Creates a configuration document.
    pub async fn create_configuration(
        &self,
        p: &Principal,
        ns: &str,
        req: CreateConfiguration,
    ) -> Result<Configuration> {
        let m = Mutation::new(
            p,
            "configuration.create",
            Some(ns),
            format!("configurations/{}", req.name),
        );
        self.mutate(Action::EditDraft, &m, async {
            validate::dns_label("name", &req.name)?;
            validate::configuration_data("data", &req.data)?;
            let fx = m.ok();
            Ok(self
                .store
                .create_configuration(ns, &req.name, &req.data, &fx)
                .await?)
        })
        .await
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
        let m = Mutation::new(
            p,
            "configuration.update",
            Some(ns),
            format!("configurations/{name}"),
        );
        self.mutate(Action::EditDraft, &m, async {
            validate::configuration_data("data", &req.data)?;
            let fx = m.ok();
            Ok(self
                .store
                .update_configuration(ns, name, &req.data, req.version, &fx)
                .await?)
        })
        .await
    }

    /// Deletes a configuration.
    pub async fn delete_configuration(&self, p: &Principal, ns: &str, name: &str) -> Result<()> {
        let m = Mutation::new(
            p,
            "configuration.delete",
            Some(ns),
            format!("configurations/{name}"),
        );
        self.authorize(Action::EditDraft, &m).await?;
        let fx = m.ok();
        let result = self
            .store
            .delete_configuration(ns, name, &fx)
            .await
            .map_err(Into::into);
        self.finish(&m, result).await
    }
}
