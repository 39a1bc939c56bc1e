//! Namespace work: `namespace.ensure` (discover, resolve, apply the
//! namespace and its guard rails, record) and `namespace.delete` (the
//! teardown plan), and the check that a namespace is the tenant's before
//! Harness work goes into it.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use clawfed_kube::RequestError;
use clawfed_proto::labels;
use clawfed_proto::link::v1::Work;
use clawfed_proto::naming::validate_dns1123_label;
use clawfed_proto::work::{NamespaceDeleteWork, NamespaceWork};
use k8s_openapi::api::core::v1::{ConfigMap, LimitRange, Namespace, ResourceQuota, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, Patch};
use kube::{Api, ResourceExt};

use super::ops::NamespaceOps;
use super::outcome::{Done, Failure, refuse};
use super::{Executor, NAMESPACE_RECHECK};
use crate::apply::namespace::{self as nsapply, NamespaceError, NamespaceObservation, Resolution};
use crate::apply::{self, ledger, merge_params, retry_forbidden, ssa};
use crate::cleanup::{NAMESPACE_TEARDOWN, run_plan};
use crate::provider::NamespaceContext;

impl Executor {
    async fn discover(&self, w: &NamespaceWork) -> Result<Vec<NamespaceObservation>, Failure> {
        validate_dns1123_label(&w.tenant)
            .map_err(|e| refuse(format!("tenant {:?}: {e}", w.tenant)))?;
        let api: Api<Namespace> = Api::all(self.client.clone());
        let mut seen: BTreeMap<String, NamespaceObservation> = BTreeMap::new();
        for selector in [
            format!("{}={}", labels::TENANT, w.tenant),
            format!("{}={}", labels::MANAGED_BY, labels::MANAGER),
            // Namespaces an existing OpenClaw installation made.
            format!("{}={}", labels::openclaw::TENANT, w.tenant),
        ] {
            let list = api
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| RequestError::new("list", "Namespace", "", "", e))?;
            for ns in &list.items {
                seen.insert(ns.name_any(), ns.into());
            }
        }
        let expected = clawfed_proto::naming::data_plane_namespace(&w.namespace_id);
        for name in std::iter::once(expected.as_str()).chain(w.adopt.as_deref()) {
            if validate_dns1123_label(name).is_err() || seen.contains_key(name) {
                continue;
            }
            if let Some(ns) = api
                .get_opt(name)
                .await
                .map_err(|e| RequestError::new("get", "Namespace", "", name, e))?
            {
                seen.insert(name.to_string(), (&ns).into());
            }
        }
        Ok(seen.into_values().collect())
    }

    pub(super) async fn ensure_namespace(
        &self,
        w: &NamespaceWork,
        work: &Work,
    ) -> Result<Done, Failure> {
        let observed = self.discover(w).await?;
        let resolution = nsapply::resolve(w, &observed)?;
        let name = resolution.name().to_string();
        let adopted = resolution.adopted(&observed);
        if matches!(resolution, Resolution::Create(_)) {
            tracing::info!(namespace = %name, tenant = %w.tenant, "spoke.namespace.create");
        }
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        namespaces
            .patch(
                &name,
                &apply::apply_params(),
                &Patch::Apply(nsapply::namespace_object(w, &name, adopted, &self.config)),
            )
            .await
            .map_err(|e| RequestError::new("apply", "Namespace", "", &name, e))?;
        let c = &self.client;
        ssa(
            &Api::<RoleBinding>::namespaced(c.clone(), &name),
            &nsapply::spoke_binding(&name, &w.tenant, &self.config),
        )
        .await?;
        // The first write under the fresh binding may be refused until the
        // authorizer has seen it.
        let quotas = Api::<ResourceQuota>::namespaced(c.clone(), &name);
        let quota = nsapply::quota(w, &name);
        retry_forbidden(self.config.rbac_settle_timeout, || ssa(&quotas, &quota)).await?;
        ssa(
            &Api::<LimitRange>::namespaced(c.clone(), &name),
            &nsapply::limit_range(w, &name),
        )
        .await?;
        let policies = Api::<NetworkPolicy>::namespaced(c.clone(), &name);
        for p in nsapply::network_policies(w, &name, &self.config) {
            ssa(&policies, &p).await?;
        }
        // This cluster's pull credentials and CA bundle, for its Harness Pods.
        let (pull, bundle) = self
            .config
            .cluster
            .namespace_objects(&name, apply::owner_labels(&w.tenant));
        if let Some(secret) = pull {
            ssa(&Api::<Secret>::namespaced(c.clone(), &name), &secret).await?;
        }
        if let Some(bundle) = bundle {
            ssa(&Api::<ConfigMap>::namespaced(c.clone(), &name), &bundle).await?;
        }
        ssa(
            &Api::<ConfigMap>::namespaced(c.clone(), &name),
            &ledger::ledger_object(&name, &w.tenant),
        )
        .await?;
        let ctx = NamespaceContext {
            namespace: name.clone(),
            tenant: w.tenant.clone(),
            namespace_id: w.namespace_id.clone(),
        };
        self.driver
            .ensure_namespace(&ctx, &self.cancel.child_token())
            .await?;
        self.observer.watch_namespace(&name);
        self.record_desired(work, &name, &w.tenant, adopted, Some(work.generation))
            .await?;
        // Record last: the generation is on the cluster before the ack.
        let patch = Namespace {
            metadata: ObjectMeta {
                annotations: Some(apply::work_annotations(&work.target, work.generation)),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces
            .patch(&name, &merge_params(), &Patch::Merge(&patch))
            .await
            .map_err(|e| RequestError::new("patch", "Namespace", "", &name, e))?;
        self.recorded_lock()
            .insert(work.target.clone(), (name.clone(), work.generation));
        Ok(Done {
            reason: format!("namespace {name} ensured"),
            namespace: name,
        })
    }

    /// Whether `name` exists and is the tenant's, read again at most once
    /// per [`NAMESPACE_RECHECK`] (see there); Harness work only.
    pub(super) async fn usable_namespace(
        &self,
        name: &str,
        tenant: &str,
        id: &str,
    ) -> Result<bool, Failure> {
        let fresh = |(t, i, at): &(String, String, Instant)| {
            t == tenant && i == id && at.elapsed() < NAMESPACE_RECHECK
        };
        if self
            .owned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .is_some_and(fresh)
        {
            return Ok(true);
        }
        let found = self.owned_namespace(name, tenant, id).await?.is_some();
        let mut owned = self.owned.lock().unwrap_or_else(PoisonError::into_inner);
        if found {
            owned.insert(name.into(), (tenant.into(), id.into(), Instant::now()));
        } else {
            owned.remove(name);
        }
        Ok(found)
    }

    /// Fetches `name` and checks it is the tenant's (all three markers).
    /// `Ok(None)` when it does not exist.
    async fn owned_namespace(
        &self,
        name: &str,
        tenant: &str,
        id: &str,
    ) -> Result<Option<Namespace>, Failure> {
        validate_dns1123_label(name).map_err(|e| refuse(format!("namespace {name:?}: {e}")))?;
        let api: Api<Namespace> = Api::all(self.client.clone());
        let Some(ns) = api
            .get_opt(name)
            .await
            .map_err(|e| RequestError::new("get", "Namespace", "", name, e))?
        else {
            return Ok(None);
        };
        if !NamespaceObservation::from(&ns).has_all_markers(tenant, id) {
            return Err(NamespaceError::NotOwned {
                name: name.into(),
                tenant: tenant.into(),
            }
            .into());
        }
        Ok(Some(ns))
    }

    pub(super) async fn delete_namespace(
        &self,
        w: &NamespaceDeleteWork,
        work: &Work,
    ) -> Result<Done, Failure> {
        let name = w.data_plane_namespace.as_str();
        let Some(ns) = self
            .owned_namespace(name, &w.tenant, &w.namespace_id)
            .await?
        else {
            self.forget_namespace(name);
            return Ok(Done {
                reason: format!("namespace {name} already gone"),
                namespace: name.into(),
            });
        };
        let adopted = ns
            .labels()
            .get(labels::ADOPTED)
            .is_some_and(|v| v == "true");
        self.owned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
        let _closing = Closing::new(&self.closing, name);
        let ops = NamespaceOps {
            exec: self,
            ctx: NamespaceContext {
                namespace: name.into(),
                tenant: w.tenant.clone(),
                namespace_id: w.namespace_id.clone(),
            },
            adopted,
            cancel: self.cancel.child_token(),
        };
        run_plan(&ops, NAMESPACE_TEARDOWN).await?;
        self.forget_namespace(name);
        let _ = work;
        Ok(Done {
            reason: if adopted {
                format!("clawfed objects removed from adopted namespace {name}")
            } else {
                format!("namespace {name} deleted")
            },
            namespace: name.into(),
        })
    }

    fn forget_namespace(&self, name: &str) {
        self.owned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
        self.observer.unwatch_namespace(name);
        self.recorded_lock().retain(|_, (ns, _)| ns != name);
    }
}

/// Marks a namespace as being torn down while it lives.
struct Closing<'a> {
    set: &'a Mutex<HashSet<String>>,
    name: String,
}

impl<'a> Closing<'a> {
    fn new(set: &'a Mutex<HashSet<String>>, name: &str) -> Self {
        set.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_string());
        Closing {
            set,
            name: name.to_string(),
        }
    }
}

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.name);
    }
}
