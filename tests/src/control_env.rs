//! The hub's own identity in the test control cluster: applies
//! `deploy/hub/{namespace,rbac}.yaml` (parsed into typed k8s-openapi
//! objects, wildcards refused), a second identity without route rights, a
//! StorageClass with pre-bound PVs for Gateway PVCs (their claims name a
//! class, which the pod runner's provisioner leaves alone), and an edge
//! Gateway/GatewayClass for the routes' parentRefs. Gateway tests and pipeline tests share it.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail, ensure};
use clawfed_hub::gateway::objects::{route_api_resource, route_spec};
use clawfed_hub::gateway::{DEFAULT_ROUTE_API_VERSION, GatewayConfig, PrivateRouting};
use clawfed_proto::work::EgressRule;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, Namespace, ObjectReference, PersistentVolume, PersistentVolumeSpec,
    ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::OnceCell;

use crate::kube_env::{self, TestCluster};

/// The Gateway API routes in `gw_ns` (at the hub's default route API version).
pub fn routes(client: &Client, gw_ns: &str) -> Result<Api<DynamicObject>> {
    let ar = route_api_resource(DEFAULT_ROUTE_API_VERSION)?;
    Ok(Api::namespaced_with(client.clone(), gw_ns, &ar))
}

/// The Service `agent`'s route in `gw_ns` sends to (its first rule's first
/// backend), or None without a route.
pub async fn route_backend(client: &Client, gw_ns: &str, agent: &str) -> Result<Option<String>> {
    let Some(r) = routes(client, gw_ns)?.get_opt(agent).await? else {
        return Ok(None);
    };
    let s = route_spec(&r)?;
    Ok(s.rules
        .first()
        .and_then(|r| r.backend_refs.first())
        .map(|b| b.name.clone()))
}

/// Namespace of the hub's ServiceAccount.
pub const HUB_NS: &str = "clawfed-system";
/// The hub's ServiceAccount.
pub const HUB_SA: &str = "clawfed-hub";
/// A ServiceAccount with the hub's rights, its Gateway runtime role minus
/// the httproutes rule.
pub const NOROUTE_SA: &str = "clawfed-hub-noroute";
/// The Gateway runtime ClusterRole of [`NOROUTE_SA`].
pub const NOROUTE_RUNTIME_ROLE: &str = "clawfed-hub-noroute-gateway-runtime";

/// The managed Gateway namespace of the tenant whose clawfed namespace id
/// is `namespace_id` (the hub's default prefix).
pub fn gateway_ns(namespace_id: &str) -> String {
    clawfed_proto::naming::gateway_namespace(
        clawfed_proto::naming::GATEWAY_NAMESPACE_PREFIX,
        namespace_id,
    )
}
/// StorageClass of the Gateway PVCs (no provisioner; see [`volume_for`]).
pub const STORAGE_CLASS: &str = "clawfed-gateway-test";
/// Namespace of the edge Gateway the routes attach to.
pub const EDGE_NS: &str = "clawfed-edge";
/// The edge Gateway.
pub const EDGE_GATEWAY: &str = "edge";
/// Its GatewayClass.
pub const EDGE_CLASS: &str = "clawfed-test-edge";

fn deploy_file(name: &str) -> Result<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/hub/");
    std::fs::read_to_string(format!("{path}{name}"))
        .with_context(|| format!("reading deploy/hub/{name}"))
}

/// A JSON value as a typed object.
pub fn typed<T: DeserializeOwned>(v: &serde_json::Value) -> Result<T> {
    Ok(serde_json::from_value(v.clone())?)
}

fn pp() -> PatchParams {
    PatchParams::apply("clawfed-tests").force()
}

/// Server-side apply of `obj` as the test's field manager.
pub async fn ssa<K>(api: Api<K>, obj: &K) -> Result<()>
where
    K: kube::Resource + serde::Serialize + DeserializeOwned + Clone + std::fmt::Debug,
{
    api.patch(&obj.name_any(), &pp(), &Patch::Apply(obj))
        .await
        .with_context(|| format!("applying {}", obj.name_any()))?;
    Ok(())
}

/// The documents of a deploy/hub file, as JSON values.
fn documents(file: &str) -> Result<Vec<serde_json::Value>> {
    let text = deploy_file(file)?;
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

fn no_wildcards(role: &ClusterRole) -> Result<()> {
    for rule in role.rules.iter().flatten() {
        for field in [
            &rule.verbs,
            rule.resources.as_ref().unwrap_or(&vec![]),
            rule.api_groups.as_ref().unwrap_or(&vec![]),
        ] {
            ensure!(
                !field.iter().any(|s| s.contains('*')),
                "wildcard in {}",
                role.name_any()
            );
        }
    }
    Ok(())
}

/// The Gateway API resource `kind` (`plural`) at v1.
pub fn gateway_api(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", kind),
        plural,
    )
}

/// Applies deploy/hub/{namespace,rbac,admission}.yaml as admin, each
/// document parsed into its typed k8s-openapi object, plus a second
/// identity whose Gateway runtime role is the hub's without the httproutes
/// rule, the Gateway StorageClass and the edge Gateway. Idempotent.
pub async fn install_hub(c: &TestCluster) -> Result<()> {
    let admin = c.admin();
    let mut roles = BTreeMap::new();
    for file in ["namespace.yaml", "rbac.yaml", "admission.yaml"] {
        for v in documents(file)? {
            match v["kind"].as_str().unwrap_or_default() {
                "Namespace" => ssa(Api::all(admin.clone()), &typed::<Namespace>(&v)?).await?,
                "ServiceAccount" => {
                    let sa: ServiceAccount = typed(&v)?;
                    let ns = sa.namespace().context("sa namespace")?;
                    ssa(Api::namespaced(admin.clone(), &ns), &sa).await?
                }
                "ClusterRole" => {
                    let role: ClusterRole = typed(&v)?;
                    no_wildcards(&role)?;
                    ssa(Api::all(admin.clone()), &role).await?;
                    roles.insert(role.name_any(), role);
                }
                "ClusterRoleBinding" => {
                    ssa(Api::all(admin.clone()), &typed::<ClusterRoleBinding>(&v)?).await?
                }
                "ValidatingAdmissionPolicy" => {
                    ssa(
                        Api::all(admin.clone()),
                        &typed::<ValidatingAdmissionPolicy>(&v)?,
                    )
                    .await?
                }
                "ValidatingAdmissionPolicyBinding" => {
                    ssa(
                        Api::all(admin.clone()),
                        &typed::<ValidatingAdmissionPolicyBinding>(&v)?,
                    )
                    .await?
                }
                other => bail!("unexpected kind {other} in deploy/hub/{file}"),
            }
        }
    }
    ensure!(!roles.is_empty(), "deploy/hub/rbac.yaml has no ClusterRole");
    // The same rights for a second ServiceAccount, its Gateway runtime role
    // without route rights.
    let mut runtime = roles
        .remove(clawfed_hub::gateway::DEFAULT_RUNTIME_CLUSTER_ROLE)
        .context("deploy/hub/rbac.yaml has no Gateway runtime ClusterRole")?;
    runtime.metadata = ObjectMeta {
        name: Some(NOROUTE_RUNTIME_ROLE.into()),
        ..Default::default()
    };
    let before = runtime.rules.as_ref().map_or(0, Vec::len);
    runtime.rules = runtime.rules.map(|rules| {
        rules
            .into_iter()
            .filter(|r| !r.resources.iter().flatten().any(|x| x == "httproutes"))
            .collect()
    });
    ensure!(
        runtime.rules.as_ref().map_or(0, Vec::len) + 1 == before,
        "one httproutes rule"
    );
    ssa(Api::all(admin.clone()), &runtime).await?;
    let mut cluster = roles
        .remove(HUB_SA)
        .context("deploy/hub/rbac.yaml has no ClusterRole clawfed-hub")?;
    cluster.metadata = ObjectMeta {
        name: Some(NOROUTE_SA.into()),
        ..Default::default()
    };
    for rule in cluster.rules.iter_mut().flatten() {
        if let Some(names) = rule.resource_names.as_mut() {
            *names = vec![NOROUTE_RUNTIME_ROLE.into()];
        }
    }
    ssa(Api::all(admin.clone()), &cluster).await?;
    let sa: ServiceAccount = typed(&json!({
        "metadata": { "name": NOROUTE_SA, "namespace": HUB_NS }
    }))?;
    ssa(Api::namespaced(admin.clone(), HUB_NS), &sa).await?;
    let crb: ClusterRoleBinding = typed(&json!({
        "metadata": { "name": NOROUTE_SA },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NOROUTE_SA },
        "subjects": [{ "kind": "ServiceAccount", "name": NOROUTE_SA, "namespace": HUB_NS }]
    }))?;
    ssa(Api::all(admin.clone()), &crb).await?;

    // Storage for the Gateway PVCs (pre-bound PVs, see `volume_for`).
    install_storage_class(&admin, STORAGE_CLASS).await?;

    // A Gateway for the routes' parentRefs.
    let ns: Namespace = typed(&json!({ "metadata": { "name": EDGE_NS } }))?;
    ssa(Api::all(admin.clone()), &ns).await?;
    let class: DynamicObject = typed(&json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": { "name": EDGE_CLASS },
        "spec": { "controllerName": "clawfed.dev/test-controller" }
    }))?;
    ssa(
        Api::all_with(
            admin.clone(),
            &gateway_api("GatewayClass", "gatewayclasses"),
        ),
        &class,
    )
    .await?;
    let gw: DynamicObject = typed(&json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": { "name": EDGE_GATEWAY, "namespace": EDGE_NS },
        "spec": {
            "gatewayClassName": EDGE_CLASS,
            "listeners": [{
                "name": "http", "protocol": "HTTP", "port": 80,
                "allowedRoutes": { "namespaces": { "from": "All" } }
            }]
        }
    }))?;
    ssa(
        Api::namespaced_with(admin, EDGE_NS, &gateway_api("Gateway", "gateways")),
        &gw,
    )
    .await?;
    Ok(())
}

/// A StorageClass without a provisioner (volumes are pre-bound PVs).
pub async fn install_storage_class(admin: &Client, name: &str) -> Result<()> {
    let sc: StorageClass = typed(&json!({
        "metadata": { "name": name },
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "Immediate",
        "reclaimPolicy": "Retain"
    }))?;
    ssa(Api::all(admin.clone()), &sc).await
}

static INSTALLED: OnceCell<()> = OnceCell::const_new();

/// The control cluster with [`install_hub`] applied (once per process).
pub async fn control() -> Result<TestCluster> {
    let cluster = kube_env::cluster("control").await?;
    INSTALLED
        .get_or_try_init(|| async { install_hub(&cluster).await })
        .await?;
    Ok(cluster)
}

/// A client acting as the hub's ServiceAccount (token via TokenRequest).
pub async fn hub_client(control: &TestCluster) -> Result<Client> {
    control.service_account_client(HUB_NS, HUB_SA, None).await
}

/// Gateway settings for the test control cluster: the test StorageClass,
/// the kwok node, routes through the edge Gateway, digests required.
pub fn gateway_config() -> GatewayConfig {
    GatewayConfig {
        storage_class: Some(STORAGE_CLASS.into()),
        workspace_size: "1Gi".into(),
        node_selector: BTreeMap::from([("type".into(), "kwok".into())]),
        trusted_proxy_cidrs: vec!["10.244.0.0/24".into()],
        approved_client_namespace_labels: BTreeMap::from([(
            "clawfed.test/gateway-clients".into(),
            "true".into(),
        )]),
        harness_egress: vec![EgressRule {
            cidr: "198.51.100.0/24".into(),
            ports: vec![8080],
        }],
        private_routing: Some(PrivateRouting {
            gateway_name: EDGE_GATEWAY.into(),
            gateway_namespace: EDGE_NS.into(),
            hostname_suffix: "agents.clawfed.test".into(),
            api_version: DEFAULT_ROUTE_API_VERSION.into(),
        }),
        require_immutable_digest: true,
        delete_timeout_seconds: 60,
        ..Default::default()
    }
}

/// A PV pre-bound to PVC `namespace/claim` of `storage_class` (`None`: the
/// claim names no class). The pod runner provisions only class-less claims
/// no PV is pre-bound to; kwok mounts nothing. Its `hostPath` is under the
/// cluster dirs, not `/tmp`: a runtime Pod's `/tmp` is an emptyDir mounted
/// before its claims, which would hide the volume's directory. Returns the
/// PV's name.
pub async fn pre_bound_volume(
    admin: &Client,
    name: &str,
    storage_class: Option<&str>,
    namespace: &str,
    claim: &str,
) -> Result<String> {
    let pv = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: storage_class.map(str::to_owned),
            persistent_volume_reclaim_policy: Some("Retain".into()),
            host_path: Some(HostPathVolumeSource {
                path: pre_bound_dir(name).to_string_lossy().into_owned(),
                type_: None,
            }),
            claim_ref: Some(ObjectReference {
                namespace: Some(namespace.to_owned()),
                name: Some(claim.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    ssa(Api::all(admin.clone()), &pv).await?;
    Ok(name.to_owned())
}

/// The host directory of [`pre_bound_volume`] `name` (where a test reads
/// what a Pod wrote on it).
pub fn pre_bound_dir(name: &str) -> std::path::PathBuf {
    crate::kube_env::clusters_dir()
        .join("test-volumes")
        .join(name)
}

/// A PV pre-bound to the Agent's Gateway PVC in Gateway namespace
/// `gateway_ns` ([`gateway_ns`]).
pub async fn volume_for(admin: &Client, gateway_ns: &str, agent: &str) -> Result<String> {
    pre_bound_volume(
        admin,
        &format!("gwtest-{agent}"),
        Some(STORAGE_CLASS),
        gateway_ns,
        &format!("{agent}-gateway-data"),
    )
    .await
}

/// Deletes a PV (ignoring errors: cleanup).
pub async fn delete_volume(admin: &Client, name: &str) {
    let _ = Api::<PersistentVolume>::all(admin.clone())
        .delete(name, &DeleteParams::background())
        .await;
}

/// Writes a kubeconfig for `cluster` that authenticates as ServiceAccount
/// `namespace/sa` (a TokenRequest token valid `seconds`) and trusts the
/// cluster CA, for a child process acting as that identity.
pub async fn write_service_account_kubeconfig(
    cluster: &TestCluster,
    namespace: &str,
    sa: &str,
    seconds: i64,
    path: &Path,
) -> Result<()> {
    let token = cluster
        .service_account_token(namespace, sa, None, seconds)
        .await?;
    let admin = kube::config::Kubeconfig::read_from(cluster.kubeconfig_path())?;
    let ca = admin
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.certificate_authority_data.clone())
        .context("admin kubeconfig without certificate-authority-data")?;
    let name = cluster.name();
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": name, "cluster": {
            "server": cluster.server_url(),
            "certificate-authority-data": ca,
        }}],
        "users": [{ "name": sa, "user": { "token": token } }],
        "contexts": [{ "name": name, "context": {
            "cluster": name, "user": sa, "namespace": namespace,
        }}],
        "current-context": name,
    });
    std::fs::write(path, serde_yaml_ng::to_string(&doc)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
