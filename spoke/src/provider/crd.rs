//! A provider that owns the Harness through a custom resource it installs and
//! manages: CRD `sandboxharnesses.sandbox.clawfed.io` (kind `SandboxHarness`).
//!
//! For provider-mode work the driver applies a `SandboxHarness` holding the
//! hardened Pod spec and labels, and runs the Harness Pod as a dependent of
//! it (controller owner reference), so deleting the custom resource in the
//! foreground removes the Pod through the garbage collector. Revision
//! cleanup deletes the `SandboxHarness` of the revision and waits until it
//! and its Pod are gone; namespace cleanup does the same for every
//! `SandboxHarness` in the namespace.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use clawfed_kube::RequestError;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
    CustomResourceDefinitionVersion, CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch};
use kube::core::GroupVersionKind;
use kube::{Api, Client, ResourceExt};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::{HarnessContext, NamespaceContext, ProviderError, RevisionContext, SandboxDriver};
use crate::apply::{self, apply_params, is_not_found, ssa, wait_gone};

/// API group of the custom resource.
pub const GROUP: &str = "sandbox.clawfed.io";
/// Version of the custom resource.
pub const VERSION: &str = "v1alpha1";
/// Kind of the custom resource.
pub const KIND: &str = "SandboxHarness";
/// Plural of the custom resource.
pub const PLURAL: &str = "sandboxharnesses";
/// Name of the CRD.
pub const CRD_NAME: &str = "sandboxharnesses.sandbox.clawfed.io";

/// The `SandboxHarness` API resource.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// The CRD the driver installs.
pub fn crd() -> CustomResourceDefinition {
    let object = |props: BTreeMap<String, JSONSchemaProps>| JSONSchemaProps {
        type_: Some("object".into()),
        properties: Some(props),
        ..Default::default()
    };
    let preserve = JSONSchemaProps {
        type_: Some("object".into()),
        x_kubernetes_preserve_unknown_fields: Some(true),
        ..Default::default()
    };
    let string = JSONSchemaProps {
        type_: Some("string".into()),
        ..Default::default()
    };
    let spec = object(BTreeMap::from([
        ("agent".to_string(), string.clone()),
        (
            "revision".to_string(),
            JSONSchemaProps {
                type_: Some("integer".into()),
                ..Default::default()
            },
        ),
        ("revisionId".to_string(), string),
        ("podLabels".to_string(), preserve.clone()),
        ("podSpec".to_string(), preserve),
    ]));
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(CRD_NAME.into()),
            labels: Some(BTreeMap::from([(
                clawfed_proto::labels::MANAGED_BY.to_string(),
                clawfed_proto::labels::MANAGER.to_string(),
            )])),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: GROUP.into(),
            names: CustomResourceDefinitionNames {
                kind: KIND.into(),
                plural: PLURAL.into(),
                singular: Some("sandboxharness".into()),
                list_kind: Some(format!("{KIND}List")),
                ..Default::default()
            },
            scope: "Namespaced".into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: VERSION.into(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(object(BTreeMap::from([("spec".to_string(), spec)]))),
                }),
                ..Default::default()
            }],
            ..Default::default()
        },
        status: None,
    }
}

/// The longest namespace a SandboxHarness workspace can name: the sandbox
/// runtime derives workspace ids `<namespace>.<name>` of at most 63 bytes,
/// and harness names take up to 22 of them.
pub const WORKSPACE_NAMESPACE_LIMIT: usize = 40;

/// The CRD-backed driver.
pub struct CrdSandboxDriver {
    client: Client,
    installed: OnceCell<()>,
    delete_timeout: Duration,
    /// What the runtime behind the custom resource guarantees, as the
    /// operator declared it (`--sandbox-containment`).
    containment: Vec<&'static str>,
    /// The operator-approved RuntimeClass the provider's Pods run under
    /// (`--sandbox-runtime-class`); the admission policy admits a
    /// provider's privileged parts only under it.
    runtime_class: Option<String>,
}

impl std::fmt::Debug for CrdSandboxDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdSandboxDriver").finish_non_exhaustive()
    }
}

impl CrdSandboxDriver {
    /// A driver acting with `client` (the spoke's own credentials).
    pub fn new(client: Client) -> Self {
        CrdSandboxDriver {
            client,
            installed: OnceCell::new(),
            delete_timeout: Duration::from_secs(60),
            containment: Vec::new(),
            runtime_class: None,
        }
    }

    /// Runs the provider's Pods under `runtime_class` (an operator-approved
    /// RuntimeClass the caller checked exists).
    pub fn with_runtime_class(mut self, runtime_class: Option<String>) -> Self {
        self.runtime_class = runtime_class;
        self
    }

    /// Declares the containment of the sandbox runtime behind the custom
    /// resource (`clawfed_proto::capability::CONTAINMENT_*`).
    pub fn with_containment(mut self, containment: Vec<&'static str>) -> Self {
        self.containment = containment;
        self
    }

    /// Installs the CRD (server-side apply) and waits until it is Established.
    pub async fn install(&self, cancel: &CancellationToken) -> Result<(), ProviderError> {
        self.installed
            .get_or_try_init(|| async {
                let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
                api.patch(CRD_NAME, &apply_params(), &Patch::Apply(crd()))
                    .await
                    .map_err(|source| {
                        RequestError::new("apply", "CustomResourceDefinition", "", CRD_NAME, source)
                    })?;
                let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                loop {
                    let got = api.get(CRD_NAME).await.map_err(|source| {
                        RequestError::new("get", "CustomResourceDefinition", "", CRD_NAME, source)
                    })?;
                    let established = got
                        .status
                        .and_then(|s| s.conditions)
                        .into_iter()
                        .flatten()
                        .any(|c| c.type_ == "Established" && c.status == "True");
                    if established {
                        return Ok(());
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return Err(ProviderError::Failed(format!(
                            "CRD {CRD_NAME} not established"
                        )));
                    }
                    tokio::select! {
                        () = cancel.cancelled() => return Err(ProviderError::Cancelled),
                        () = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
            })
            .await
            .map(|_| ())
    }

    fn harnesses(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &api_resource())
    }

    /// Deletes one `SandboxHarness` (foreground) and waits until it and its Pod are gone.
    async fn delete_harness(
        &self,
        namespace: &str,
        name: &str,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        let api = self.harnesses(namespace);
        match api.delete(name, &DeleteParams::foreground()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(source) => {
                return Err(RequestError::new("delete", KIND, namespace, name, source).into());
            }
        }
        let deadline = tokio::time::Instant::now() + self.delete_timeout;
        loop {
            match api.get_opt(name).await {
                Ok(None) => break,
                Ok(Some(_)) => {}
                Err(source) => {
                    return Err(RequestError::new("get", KIND, namespace, name, source).into());
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ProviderError::Failed(format!(
                    "{KIND} {namespace}/{name} not gone"
                )));
            }
            tokio::select! {
                () = cancel.cancelled() => return Err(ProviderError::Cancelled),
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        wait_gone(&pods, name, self.delete_timeout, cancel).await?;
        Ok(())
    }
}

#[async_trait]
impl SandboxDriver for CrdSandboxDriver {
    fn name(&self) -> &str {
        "sandboxharness-crd"
    }

    async fn ensure_namespace(
        &self,
        _ns: &NamespaceContext,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        self.install(cancel).await
    }

    fn provisions_harness(&self) -> bool {
        true
    }

    fn containment(&self) -> Vec<&'static str> {
        self.containment.clone()
    }

    fn max_namespace_len(&self) -> Option<usize> {
        Some(WORKSPACE_NAMESPACE_LIMIT)
    }

    async fn provision_harness(
        &self,
        h: &HarnessContext<'_>,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        self.install(cancel).await?;
        let ns = h.work.data_plane_namespace.as_str();
        let mut annotations = apply::work_annotations(&h.target, h.generation);
        annotations.insert(
            clawfed_proto::labels::REVISION_ID_ANNOTATION.into(),
            h.work.revision_id.clone(),
        );
        let mut pod_spec = h.pod_spec.clone();
        if let Some(class) = &self.runtime_class {
            pod_spec.runtime_class_name = Some(class.clone());
        }
        let spec = serde_json::json!({
            "spec": {
                "agent": h.work.agent,
                "revision": h.work.revision,
                "revisionId": h.work.revision_id,
                "podLabels": h.pod_labels,
                "podSpec": pod_spec,
            }
        });
        let mut cr = DynamicObject::new(&h.name, &api_resource())
            .within(ns)
            .data(spec);
        cr.metadata.labels = Some(h.object_labels.clone());
        cr.metadata.annotations = Some(annotations.clone());
        let api = self.harnesses(ns);
        let applied = api
            .patch(&h.name, &apply_params(), &Patch::Apply(&cr))
            .await
            .map_err(|source| RequestError::new("apply", KIND, ns, &h.name, source))?;
        let uid = applied
            .uid()
            .ok_or_else(|| ProviderError::Failed(format!("{KIND} {ns}/{} has no uid", h.name)))?;
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(h.name.clone()),
                namespace: Some(ns.into()),
                labels: Some(h.pod_labels.clone()),
                annotations: Some(annotations),
                owner_references: Some(vec![OwnerReference {
                    api_version: format!("{GROUP}/{VERSION}"),
                    kind: KIND.into(),
                    name: h.name.clone(),
                    uid,
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..Default::default()
            },
            spec: Some(pod_spec),
            status: None,
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        ssa(&pods, &pod).await?;
        Ok(())
    }

    async fn cleanup_revision(
        &self,
        r: &RevisionContext,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        self.delete_harness(&r.namespace, &r.name, cancel).await
    }

    async fn cleanup_namespace(
        &self,
        ns: &NamespaceContext,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        let api = self.harnesses(&ns.namespace);
        let list = match api.list(&ListParams::default()).await {
            Ok(l) => l,
            // No CRD installed yet: nothing of ours can exist.
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(source) => {
                return Err(RequestError::new("list", KIND, &ns.namespace, "", source).into());
            }
        };
        for cr in list.items {
            self.delete_harness(&ns.namespace, &cr.name_any(), cancel)
                .await?;
        }
        Ok(())
    }
}
