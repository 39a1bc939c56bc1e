//! The spoke's own identity in a test execution cluster: applies
//! `deploy/spoke/{namespace,rbac,admission}.yaml` (parsed into typed
//! k8s-openapi objects, wildcards refused) and returns a client that acts as
//! the spoke's ServiceAccount; and the Harness work the spoke tests send.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail, ensure};
use clawfed_proto::work::{ContainerDefaults, ExecutionMode, HarnessWork, SecretData};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::{Api, Client, ResourceExt};
use serde::de::DeserializeOwned;

use crate::control_env::{ssa, typed};
use crate::kube_env::TestCluster;

/// Namespace of the spoke's ServiceAccount.
pub const SPOKE_NAMESPACE: &str = "clawfed-system";
/// The spoke's ServiceAccount.
pub const SPOKE_SERVICE_ACCOUNT: &str = "clawfed-spoke";
/// The Secret holding the spoke's link identity (`--identity-secret`), the
/// only one its Role in [`SPOKE_NAMESPACE`] reaches.
pub const SPOKE_IDENTITY_SECRET: &str = "clawfed-spoke-identity";

pub fn deploy_file(name: &str) -> Result<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/spoke/");
    std::fs::read_to_string(format!("{path}{name}"))
        .with_context(|| format!("reading deploy/spoke/{name}"))
}

/// Server-side applies `obj` in the namespace it names.
async fn apply_namespaced<K>(client: &Client, obj: K) -> Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + serde::Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let ns = obj
        .namespace()
        .with_context(|| format!("namespace of {}", obj.name_any()))?;
    ssa(Api::namespaced(client.clone(), &ns), &obj).await
}

/// Server-side applies cluster-scoped `obj`.
async fn apply_cluster_scoped<K>(client: &Client, obj: K) -> Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + serde::Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    ssa(Api::all(client.clone()), &obj).await
}

/// The ClusterRoles of deploy/spoke/`file`.
pub fn cluster_roles(file: &str) -> Result<Vec<ClusterRole>> {
    let text = deploy_file(file)?;
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        if v["kind"] == "ClusterRole" {
            out.push(typed(&v)?);
        }
    }
    Ok(out)
}

/// Installs the spoke's namespace, ServiceAccount, RBAC and admission
/// policy from deploy/spoke, as the cluster admin, with the CRD provider's
/// own rights (the tests run that provider too).
pub async fn install_spoke_rbac(cluster: &TestCluster) -> Result<()> {
    let admin = cluster.admin();
    for file in [
        "namespace.yaml",
        "rbac.yaml",
        "provider-crd.yaml",
        "admission.yaml",
    ] {
        let text = deploy_file(file)?;
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc)?;
            if v.is_null() {
                continue;
            }
            match v["kind"].as_str().unwrap_or_default() {
                "Namespace" => apply_cluster_scoped(&admin, typed::<Namespace>(&v)?).await?,
                "ServiceAccount" => apply_namespaced(&admin, typed::<ServiceAccount>(&v)?).await?,
                "ClusterRole" => {
                    let role: ClusterRole = typed(&v)?;
                    refuse_wildcards(&role.name_any(), role.rules.iter().flatten())?;
                    apply_cluster_scoped(&admin, role).await?
                }
                "Role" => {
                    let role: Role = typed(&v)?;
                    refuse_wildcards(&role.name_any(), role.rules.iter().flatten())?;
                    apply_namespaced(&admin, role).await?
                }
                "RoleBinding" => apply_namespaced(&admin, typed::<RoleBinding>(&v)?).await?,
                "ClusterRoleBinding" => {
                    apply_cluster_scoped(&admin, typed::<ClusterRoleBinding>(&v)?).await?
                }
                "ValidatingAdmissionPolicy" => {
                    apply_cluster_scoped(&admin, typed::<ValidatingAdmissionPolicy>(&v)?).await?
                }
                "ValidatingAdmissionPolicyBinding" => {
                    apply_cluster_scoped(&admin, typed::<ValidatingAdmissionPolicyBinding>(&v)?)
                        .await?
                }
                other => bail!("unexpected kind {other} in deploy/spoke/{file}"),
            }
        }
    }
    Ok(())
}

fn refuse_wildcards<'a>(
    name: &str,
    rules: impl Iterator<Item = &'a k8s_openapi::api::rbac::v1::PolicyRule>,
) -> Result<()> {
    for rule in rules {
        let wild = rule.verbs.iter().any(|s| s == "*")
            || rule.resources.iter().flatten().any(|s| s == "*")
            || rule.api_groups.iter().flatten().any(|s| s == "*");
        ensure!(!wild, "wildcard in {name}");
    }
    Ok(())
}

/// A client acting as the spoke's ServiceAccount (token via TokenRequest).
pub async fn spoke_client(cluster: &TestCluster) -> Result<Client> {
    install_spoke_rbac(cluster).await?;
    cluster
        .service_account_client(SPOKE_NAMESPACE, SPOKE_SERVICE_ACCOUNT, None)
        .await
}

/// A test execution cluster with a client acting as the spoke there.
pub struct SpokeEnv {
    pub cluster: TestCluster,
    /// Acts as the spoke's ServiceAccount ([`spoke_client`]).
    pub spoke: Client,
}

impl SpokeEnv {
    /// exec-a with the spoke's RBAC installed.
    pub async fn exec_a() -> Result<Self> {
        let cluster = crate::kube_env::cluster("exec-a").await?;
        let spoke = spoke_client(&cluster).await?;
        Ok(Self { cluster, spoke })
    }
}

/// Revision 1 of a dedicated `openclaw-native` Harness `agent` on a
/// digest-pinned image that is never pulled, with nothing else set: tests
/// change the fields they are about.
pub fn harness_work(
    tenant: &str,
    namespace_id: &str,
    data_plane_namespace: &str,
    agent: &str,
) -> HarnessWork {
    HarnessWork {
        tenant: tenant.into(),
        namespace_id: namespace_id.into(),
        data_plane_namespace: data_plane_namespace.into(),
        agent: agent.into(),
        revision: 1,
        revision_id: "rev-1".into(),
        harness_kind: "openclaw-native".into(),
        image: format!("registry.invalid/openclaw@sha256:{}", "ab".repeat(32)),
        require_digest: true,
        requirement_labels: BTreeMap::new(),
        resources: Default::default(),
        port: 8080,
        env: BTreeMap::new(),
        workspace: None,
        credential: SecretData(BTreeMap::new()),
        dedicated: true,
        predecessors: vec![],
        execution: ExecutionMode::Ordinary,
        node_selector: BTreeMap::new(),
        tolerations: Vec::new(),
        headless_service: false,
        seccomp_localhost_profile: None,
        service_principal: None,
        plugin_selections: Vec::new(),
        require_startup_status: false,
        runtime_config: None,
        app_server: None,
        failover_after_seconds: None,
    }
}

/// A model API key that is not real, as the Harness credential.
pub fn fake_model_credential() -> SecretData {
    SecretData(BTreeMap::from([(
        "CLAWFED_MODEL_API_KEY".into(),
        "sk-test-not-real".into(),
    )]))
}

/// Pins a Harness to kwok's node in the test clusters.
pub fn kwok_node_selector() -> BTreeMap<String, String> {
    BTreeMap::from([("kubernetes.io/hostname".into(), "kwok-node-0".into())])
}

/// Names for a fresh tenant: (tenant, namespace id, data-plane namespace),
/// new on every call so concurrent tests never share a namespace.
pub fn tenant_names(prefix: &str) -> (String, String, String) {
    let u = uuid::Uuid::new_v4().simple().to_string();
    let id = format!("{prefix}-{u}");
    let ns = clawfed_proto::naming::data_plane_namespace(&id);
    (format!("{prefix}-{}", &u[..8]), id, ns)
}

/// The container defaults the spoke tests give a tenant's LimitRange.
pub fn test_container_defaults() -> ContainerDefaults {
    ContainerDefaults {
        default_request: BTreeMap::from([
            ("cpu".into(), "50m".into()),
            ("memory".into(), "64Mi".into()),
        ]),
        default_limit: BTreeMap::from([("memory".into(), "256Mi".into())]),
    }
}
