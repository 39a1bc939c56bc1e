//! Proof that the Kubernetes test environment is real: these run against the
//! clusters `e2e/cluster.sh up control exec-a` starts (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok built from upstream).
//! Each test fails, telling how to start the cluster, when it is not running.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use clawfed_tests::kube_env::{self, TestCluster, eventually, is_forbidden};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use kube::{Api, ResourceExt};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);
const FAKE_NODE: &str = "kwok-node-0";

async fn control() -> Result<TestCluster> {
    kube_env::cluster("control").await
}

fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("valid object literal")
}

fn pod_is_running_ready(p: &Pod) -> bool {
    let Some(status) = &p.status else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn pod(name: &str, labels: serde_json::Value) -> Pod {
    typed(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": { "containers": [{ "name": "agent", "image": "fake.invalid/agent:1" }] }
    }))
}

#[tokio::test]
async fn deployment_becomes_running_ready_pod_and_deletion_removes_it() -> Result<()> {
    let c = control().await?;
    let ns = c.create_namespace("deploy").await?;
    let deployments: Api<Deployment> = Api::namespaced(c.admin(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(c.admin(), &ns.name);

    let d: Deployment = typed(json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "agent", "image": "fake.invalid/agent:1" }] }
            }
        }
    }));
    deployments.create(&PostParams::default(), &d).await?;

    // controller-manager: Deployment -> ReplicaSet -> Pod; scheduler binds it
    // to the kwok Node; kwok makes it Running and Ready.
    let lp = ListParams::default().labels("app=web");
    let ready = eventually(WAIT, "one Running+Ready Pod of Deployment web", || async {
        let list = pods.list(&lp).await?;
        Ok(
            (list.items.len() == 1 && pod_is_running_ready(&list.items[0]))
                .then(|| list.items[0].clone()),
        )
    })
    .await?;
    let spec = ready.spec.as_ref().context("pod spec")?;
    assert_eq!(
        spec.node_name.as_deref(),
        Some(FAKE_NODE),
        "bound by kube-scheduler to the kwok Node"
    );
    let owner = ready
        .owner_references()
        .first()
        .context("pod has an owner")?;
    assert_eq!(owner.kind, "ReplicaSet");
    eventually(WAIT, "Deployment web availableReplicas=1", || async {
        let d = deployments.get("web").await?;
        Ok((d.status.and_then(|s| s.available_replicas) == Some(1)).then_some(()))
    })
    .await?;

    // Foreground deletion: the garbage collector removes ReplicaSet and Pod,
    // kwok finishes the Pod's deletion, then the Deployment goes.
    deployments
        .delete("web", &DeleteParams::foreground())
        .await?;
    eventually(WAIT, "Deployment web and its Pod gone", || async {
        let left = pods.list(&lp).await?.items.len();
        let dep = deployments.get_opt("web").await?;
        Ok((left == 0 && dep.is_none()).then_some(()))
    })
    .await?;
    ns.delete().await
}

#[tokio::test]
async fn rbac_role_in_namespace_a_is_forbidden_in_b_and_cluster_wide() -> Result<()> {
    let c = control().await?;
    let a = c.create_namespace("rbac-a").await?;
    let b = c.create_namespace("rbac-b").await?;
    let admin = c.admin();

    Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(admin.clone(), &a.name)
        .create(
            &PostParams::default(),
            &typed(json!({ "metadata": { "name": "agent" } })),
        )
        .await?;
    let role: Role = typed(json!({
        "metadata": { "name": "configmaps" },
        "rules": [{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "delete"] }]
    }));
    Api::<Role>::namespaced(admin.clone(), &a.name)
        .create(&PostParams::default(), &role)
        .await?;
    let binding: RoleBinding = typed(json!({
        "metadata": { "name": "agent-configmaps" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmaps" },
        "subjects": [{ "kind": "ServiceAccount", "name": "agent", "namespace": a.name }]
    }));
    Api::<RoleBinding>::namespaced(admin.clone(), &a.name)
        .create(&PostParams::default(), &binding)
        .await?;
    // The same objects exist in B, so only authorization differs.
    let cm: ConfigMap = typed(json!({ "metadata": { "name": "probe" }, "data": { "k": "v" } }));
    Api::<ConfigMap>::namespaced(admin.clone(), &b.name)
        .create(&PostParams::default(), &cm)
        .await?;

    // Minted through TokenRequest, checked by the real authenticator and RBAC.
    let sa = c.service_account_client(&a.name, "agent", None).await?;
    let in_a: Api<ConfigMap> = Api::namespaced(sa.clone(), &a.name);
    in_a.create(&PostParams::default(), &cm)
        .await
        .context("create in own namespace")?;
    let names: BTreeSet<String> = in_a
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert!(names.contains("probe"), "own namespace lists: {names:?}");

    let in_b: Api<ConfigMap> = Api::namespaced(sa.clone(), &b.name);
    let err = in_b
        .list(&ListParams::default())
        .await
        .expect_err("list in namespace B must be forbidden");
    assert!(is_forbidden(&err), "namespace B: {err}");
    let err = in_b
        .get("probe")
        .await
        .expect_err("get in namespace B must be forbidden");
    assert!(is_forbidden(&err), "namespace B get: {err}");
    let err = Api::<ConfigMap>::all(sa.clone())
        .list(&ListParams::default())
        .await
        .expect_err("cluster-wide list");
    assert!(is_forbidden(&err), "cluster-wide configmaps: {err}");
    let err = Api::<Namespace>::all(sa.clone())
        .list(&ListParams::default())
        .await
        .expect_err("namespaces");
    assert!(is_forbidden(&err), "cluster-scoped namespaces: {err}");
    let err = Api::<Pod>::namespaced(sa.clone(), &a.name)
        .list(&ListParams::default())
        .await
        .expect_err("pods are not in the Role");
    assert!(is_forbidden(&err), "pods in own namespace: {err}");

    // A token for another audience is not accepted by the apiserver (401).
    let other = c
        .service_account_client(&a.name, "agent", Some("clawfed-not-the-apiserver"))
        .await?;
    let err = Api::<ConfigMap>::namespaced(other, &a.name)
        .list(&ListParams::default())
        .await
        .expect_err("wrong audience must be rejected");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 401),
        "wrong audience: {err}"
    );

    a.delete().await?;
    b.delete().await
}

#[tokio::test]
async fn list_pagination_with_limit_and_continue() -> Result<()> {
    let c = control().await?;
    let ns = c.create_namespace("paging").await?;
    let pods: Api<Pod> = Api::namespaced(c.admin(), &ns.name);
    for i in 0..25 {
        pods.create(
            &PostParams::default(),
            &pod(&format!("p-{i:02}"), json!({ "set": "paging" })),
        )
        .await?;
    }

    let mut seen = Vec::new();
    let mut pages = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(10);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = pods.list(&lp).await?;
        pages.push((page.items.len(), page.metadata.remaining_item_count));
        seen.extend(page.items.iter().map(|p| p.name_any()));
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
        ensure!(pages.len() < 10, "pagination does not end");
    }
    assert_eq!(
        pages,
        vec![(10, Some(15)), (10, Some(5)), (5, None)],
        "(items, remainingItemCount) per page"
    );
    let expected: Vec<String> = (0..25).map(|i| format!("p-{i:02}")).collect();
    assert_eq!(seen, expected, "every Pod exactly once, in name order");
    ns.delete().await
}

#[tokio::test]
async fn pod_with_finalizer_keeps_deletion_timestamp_until_finalizer_removed() -> Result<()> {
    let c = control().await?;
    let ns = c.create_namespace("finalizer").await?;
    let pods: Api<Pod> = Api::namespaced(c.admin(), &ns.name);
    let mut p = pod("held", json!({ "app": "held" }));
    p.metadata.finalizers = Some(vec!["clawfed.dev/test-hold".to_string()]);
    pods.create(&PostParams::default(), &p).await?;
    eventually(WAIT, "Pod held Running+Ready", || async {
        Ok(pod_is_running_ready(&pods.get("held").await?).then_some(()))
    })
    .await?;

    let deleting = pods
        .delete("held", &DeleteParams::default())
        .await?
        .left()
        .context("a graceful delete returns the Pod")?;
    ensure!(
        deleting.metadata.deletion_grace_period_seconds > Some(0),
        "graceful: {:?}",
        deleting.metadata.deletion_grace_period_seconds
    );
    // kwok's pod-delete stage finishes the deletion on the "node" (as a
    // kubelet does: a second delete with grace period 0); the finalizer
    // must still hold the object after that.
    let held = eventually(WAIT, "kwok's final delete of Pod held", || async {
        let held = pods
            .get_opt("held")
            .await?
            .context("pod must survive while its finalizer is set")?;
        Ok((held.metadata.deletion_grace_period_seconds == Some(0)).then_some(held))
    })
    .await?;
    assert!(
        held.metadata.deletion_timestamp.is_some(),
        "deletionTimestamp set"
    );
    assert_eq!(held.finalizers(), ["clawfed.dev/test-hold".to_string()]);

    pods.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
    )
    .await?;
    eventually(WAIT, "Pod held gone after finalizer removal", || async {
        Ok(pods.get_opt("held").await?.is_none().then_some(()))
    })
    .await?;
    ns.delete().await
}

fn gateway_api(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", kind),
        plural,
    )
}

#[tokio::test]
async fn gateway_api_crds_accept_gateway_and_httproute() -> Result<()> {
    let c = control().await?;
    let ns = c.create_namespace("gateway").await?;
    let class_ar = gateway_api("GatewayClass", "gatewayclasses");
    let gw_ar = gateway_api("Gateway", "gateways");
    let route_ar = gateway_api("HTTPRoute", "httproutes");

    let class_name = format!("clawfed-{}", ns.name);
    let classes: Api<DynamicObject> = Api::all_with(c.admin(), &class_ar);
    let class: DynamicObject = typed(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": { "name": class_name },
        "spec": { "controllerName": "clawfed.dev/test-controller" }
    }));
    classes.create(&PostParams::default(), &class).await?;

    let gateways: Api<DynamicObject> = Api::namespaced_with(c.admin(), &ns.name, &gw_ar);
    let gw: DynamicObject = typed(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": { "name": "edge" },
        "spec": {
            "gatewayClassName": class_name,
            "listeners": [{ "name": "http", "protocol": "HTTP", "port": 80 }]
        }
    }));
    gateways.create(&PostParams::default(), &gw).await?;

    let routes: Api<DynamicObject> = Api::namespaced_with(c.admin(), &ns.name, &route_ar);
    let route: DynamicObject = typed(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": { "name": "agent" },
        "spec": {
            "parentRefs": [{ "name": "edge" }],
            "hostnames": ["agent.clawfed.test"],
            "rules": [{
                "matches": [{ "path": { "type": "PathPrefix", "value": "/agents/a1" } }],
                "backendRefs": [{ "name": "agent-a1", "port": 8080 }]
            }]
        }
    }));
    routes.create(&PostParams::default(), &route).await?;
    let got = routes.get("agent").await?;
    assert_eq!(got.data["spec"]["rules"][0]["backendRefs"][0]["port"], 8080);
    // Defaulting from the CRD's structural schema ran.
    assert_eq!(
        got.data["spec"]["parentRefs"][0]["group"],
        "gateway.networking.k8s.io"
    );
    assert_eq!(got.data["spec"]["parentRefs"][0]["kind"], "Gateway");
    assert!(gateways.get("edge").await.is_ok());

    // ... and so does its validation: a negative port is rejected.
    let mut bad = route.clone();
    bad.metadata.name = Some("bad".into());
    bad.data["spec"]["rules"][0]["backendRefs"][0]["port"] = json!(-1);
    let err = routes
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("schema must reject port -1");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422),
        "invalid HTTPRoute: {err}"
    );

    classes
        .delete(&class_name, &DeleteParams::default())
        .await?;
    ns.delete().await
}

#[tokio::test]
async fn two_clusters_run_at_once_and_are_independent() -> Result<()> {
    let control = control().await?;
    let exec = kube_env::cluster("exec-a").await?;
    assert_ne!(control.server_url(), exec.server_url());

    let ns = control.create_namespace("independent").await?;
    let cm: ConfigMap =
        typed(json!({ "metadata": { "name": "only-here" }, "data": { "cluster": "control" } }));
    Api::<ConfigMap>::namespaced(control.admin(), &ns.name)
        .create(&PostParams::default(), &cm)
        .await?;

    assert!(
        Api::<Namespace>::all(exec.admin())
            .get_opt(&ns.name)
            .await?
            .is_none(),
        "namespace absent in exec-a"
    );
    assert!(
        Api::<ConfigMap>::namespaced(exec.admin(), &ns.name)
            .get_opt("only-here")
            .await?
            .is_none(),
        "configmap absent in exec-a"
    );
    // Each has its own CA: control's client config does not trust exec-a.
    let mut cross = control.admin_config().clone();
    cross.cluster_url = exec.admin_config().cluster_url.clone();
    let cross = kube::Client::try_from(cross)?;
    assert!(
        cross.apiserver_version().await.is_err(),
        "control's CA must not verify exec-a's apiserver"
    );

    // Both run their own controllers: a namespace in exec-a gets its own
    // default ServiceAccount.
    let ns_exec = exec.create_namespace("independent").await?;
    assert!(
        Api::<Namespace>::all(control.admin())
            .get_opt(&ns_exec.name)
            .await?
            .is_none()
    );
    ns_exec.delete().await?;
    ns.delete().await
}
