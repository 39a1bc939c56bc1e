//! The hub's Gateway room against the real control cluster (`e2e/cluster.sh
//! up control`): the hub runs as its own ServiceAccount with the RBAC of
//! deploy/hub (parsed from the YAML into typed objects and applied), kwok
//! makes the Gateway Pods Running and Ready, the Gateway API CRDs are served.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use clawfed_hub::gateway::objects::{TRANSPORT_KEYS, route_spec};
use clawfed_hub::gateway::{
    Activation, Error, GatewayConfig, GatewaySpec, Gateways, PrivateRouting, Readiness, StepAction,
    TenantGateways, Transport,
};
use clawfed_proto::labels;
use clawfed_tests::control_env::{
    self, EDGE_GATEWAY, EDGE_NS, HUB_NS, NOROUTE_SA, STORAGE_CLASS, delete_volume, typed,
    volume_for,
};
use clawfed_tests::kube_env::{TestCluster, eventually, is_forbidden};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

/// The clawfed namespace id of the test tenant `team-gw`.
const NS_ID: &str = "0190e5a0-0000-7000-8000-00000000team";

/// Its managed Gateway namespace.
fn gw_ns() -> String {
    control_env::gateway_ns(NS_ID)
}

struct Env {
    cluster: TestCluster,
    hub: Client,
}

/// The control cluster with deploy/hub installed (see
/// `clawfed_tests::control_env`), and a client acting as the hub.
async fn env() -> Result<Env> {
    let cluster = control_env::control().await?;
    let hub = control_env::hub_client(&cluster).await?;
    Ok(Env { cluster, hub })
}

fn config() -> GatewayConfig {
    control_env::gateway_config()
}

fn agent_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

fn spec(agent: &str, revision: i64) -> GatewaySpec {
    GatewaySpec {
        tenant: "team-gw".into(),
        namespace_id: NS_ID.into(),
        agent: agent.into(),
        revision,
        revision_id: format!("rev-{revision}"),
        image: Some(format!(
            "registry.invalid/openclaw-gateway@sha256:{}",
            "cd".repeat(32)
        )),
        harness_endpoint: format!("http://{agent}-r{revision}-harness.oce-0123.svc:8080"),
        tunnel_proxy: None,
        tunnel_ca_pem: None,
        transport: Transport {
            gateway_token: "gw-token-not-real".into(),
            tls: None,
        },
        runtime: None,
    }
}

async fn wait_ready(g: &TenantGateways, agent: &str, revision: i64) -> Result<()> {
    eventually(
        WAIT,
        &format!("gateway {agent} r{revision} ready"),
        || async { Ok(g.is_ready(agent, revision).await?.is_ready().then_some(())) },
    )
    .await
}

fn routes(admin: &Client) -> Result<Api<DynamicObject>> {
    control_env::routes(admin, &gw_ns())
}

async fn backend(admin: &Client, agent: &str) -> Result<Option<String>> {
    control_env::route_backend(admin, &gw_ns(), agent).await
}

async fn count<K>(admin: &Client, agent: &str) -> Result<usize>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let lp = ListParams::default().labels(&format!("{}={agent}", labels::AGENT));
    Ok(Api::<K>::namespaced(admin.clone(), &gw_ns())
        .list_metadata(&lp)
        .await?
        .items
        .len())
}

#[tokio::test]
async fn gateway_lifecycle_ensure_ready_activate_stop_delete() -> Result<()> {
    let e = env().await?;
    let admin = e.cluster.admin();
    let g = Gateways::new(e.hub.clone(), config())?.tenant(NS_ID);
    let agent = agent_name("gwl");
    let pv = volume_for(&admin, &gw_ns(), &agent).await?;

    let steps = g.ensure(&spec(&agent, 1)).await?;
    let kinds: Vec<&str> = steps.iter().map(|s| s.kind).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "Secret",
            "PersistentVolumeClaim",
            "NetworkPolicy",
            "Service",
            "Deployment"
        ]
    );

    // What the hub applied, read back as admin.
    let d = Api::<Deployment>::namespaced(admin.clone(), &gw_ns())
        .get(&format!("{agent}-gateway"))
        .await?;
    assert_eq!(d.spec.replicas, Some(1));
    assert_eq!(
        d.spec.strategy.as_ref().and_then(|s| s.type_.as_deref()),
        Some("Recreate")
    );
    let tl = d
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .context("template labels")?;
    for (k, v) in [
        (labels::AGENT, agent.as_str()),
        (labels::REVISION, "1"),
        (labels::WORKLOAD_ROLE, "gateway"),
        (labels::TENANT, "team-gw"),
    ] {
        assert_eq!(tl.get(k).map(String::as_str), Some(v), "{k}");
    }
    let pod = d.spec.template.spec.clone().context("pod spec")?;
    let psc = pod
        .security_context
        .clone()
        .context("pod security context")?;
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(
        psc.seccomp_profile.map(|s| s.type_).as_deref(),
        Some("RuntimeDefault")
    );
    let sc = pod.containers[0].security_context.clone().context("sc")?;
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        sc.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_string()])
    );
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.service_account_name, Some(format!("{agent}-gateway")));
    assert_eq!(
        pod.node_selector
            .as_ref()
            .and_then(|n| n.get("type"))
            .map(String::as_str),
        Some("kwok")
    );
    let pvc = Api::<PersistentVolumeClaim>::namespaced(admin.clone(), &gw_ns())
        .get(&format!("{agent}-gateway-data"))
        .await?;
    let pvc_spec = pvc.spec.context("pvc spec")?;
    assert_eq!(pvc_spec.storage_class_name.as_deref(), Some(STORAGE_CLASS));
    assert_eq!(
        pvc_spec.access_modes,
        Some(vec!["ReadWriteOnce".to_string()])
    );
    let secret = Api::<Secret>::namespaced(admin.clone(), &gw_ns())
        .get(&format!("{agent}-gateway-transport"))
        .await?;
    let keys: Vec<String> = secret.data.unwrap_or_default().into_keys().collect();
    assert_eq!(keys, ["gateway-token"]);
    assert!(keys.iter().all(|k| TRANSPORT_KEYS.contains(&k.as_str())));
    let sa = Api::<ServiceAccount>::namespaced(admin.clone(), &gw_ns())
        .get(&format!("{agent}-gateway"))
        .await?;
    assert_eq!(sa.automount_service_account_token, Some(false));
    let np = Api::<NetworkPolicy>::namespaced(admin.clone(), &gw_ns())
        .get(&format!("{agent}-gateway"))
        .await?
        .spec
        .context("np spec")?;
    assert_eq!(
        np.policy_types,
        Some(vec!["Ingress".to_string(), "Egress".to_string()])
    );
    let svc = Api::<Service>::namespaced(admin.clone(), &gw_ns())
        .get(&format!("{agent}-r1-gateway"))
        .await?;
    let sel = svc.spec.and_then(|s| s.selector).context("selector")?;
    assert_eq!(sel.get(labels::REVISION).map(String::as_str), Some("1"));
    // Every object carries the manager label.
    for m in [&d.metadata, &pvc.metadata, &sa.metadata] {
        assert_eq!(
            m.labels
                .as_ref()
                .and_then(|l| l.get(labels::MANAGED_BY))
                .map(String::as_str),
            Some(labels::MANAGER)
        );
    }

    // The Pod (restricted Pod Security in the namespace admitted it) becomes
    // Ready on the kwok node; the route goes to r1.
    wait_ready(&g, &agent, 1).await?;
    assert!(matches!(
        g.activate("team-gw", &agent, 2).await,
        Err(Error::NotPrepared { revision: 2, .. })
    ));
    assert_eq!(
        g.activate("team-gw", &agent, 1).await?,
        Activation::Routed {
            route: agent.clone(),
            revision: 1,
            previous: None
        }
    );
    let route = routes(&admin)?.get(&agent).await?;
    let rs = route_spec(&route)?;
    assert_eq!(rs.parent_refs[0].name, EDGE_GATEWAY);
    assert_eq!(rs.parent_refs[0].namespace.as_deref(), Some(EDGE_NS));
    assert_eq!(rs.hostnames, [format!("{agent}.agents.clawfed.test")]);
    assert_eq!(
        route.labels().get(labels::AGENT).map(String::as_str),
        Some(agent.as_str())
    );
    assert_eq!(
        backend(&admin, &agent).await?,
        Some(format!("{agent}-r1-gateway"))
    );

    // Revision 2: Recreate replaces the Pod; activation switches the route.
    g.ensure(&spec(&agent, 2)).await?;
    wait_ready(&g, &agent, 2).await?;
    assert!(!g.is_ready(&agent, 1).await?.is_ready());
    assert_eq!(
        g.activate("team-gw", &agent, 2).await?,
        Activation::Routed {
            route: agent.clone(),
            revision: 2,
            previous: Some(1)
        }
    );
    assert_eq!(
        backend(&admin, &agent).await?,
        Some(format!("{agent}-r2-gateway"))
    );
    assert_eq!(g.active_revision(&agent).await?, Some(2));

    // A stale prepare of r1 cannot roll the Gateway back; the routed
    // revision cannot be retired; the predecessor can.
    assert!(matches!(
        g.ensure(&spec(&agent, 1)).await,
        Err(Error::Superseded {
            deployed: 2,
            requested: 1,
            ..
        })
    ));
    assert!(matches!(
        g.retire_revision("team-gw", &agent, 2).await,
        Err(Error::RevisionActive { revision: 2, .. })
    ));
    let retired = g.retire_revision("team-gw", &agent, 1).await?;
    assert_eq!(retired[0].action, StepAction::Deleted);
    assert_eq!(count::<Service>(&admin, &agent).await?, 1);

    // Stop: an observer polls the Deployment, then the route. Seeing the
    // Deployment deleting or gone while the route still exists would mean
    // the runtime went first.
    let violated = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(0));
    let stop_flag = Arc::new(AtomicBool::new(false));
    let observer = {
        let (admin, agent) = (admin.clone(), agent.clone());
        let (violated, rounds, stop_flag) = (violated.clone(), rounds.clone(), stop_flag.clone());
        tokio::spawn(async move {
            let deployments = Api::<Deployment>::namespaced(admin.clone(), &gw_ns());
            let routes = routes(&admin)?;
            while !stop_flag.load(Ordering::SeqCst) {
                let d = deployments.get_opt(&format!("{agent}-gateway")).await?;
                let runtime_going = d.is_none_or(|d| d.metadata.deletion_timestamp.is_some());
                let route_present = routes.get_opt(&agent).await?.is_some();
                if runtime_going && route_present {
                    violated.store(true, Ordering::SeqCst);
                }
                rounds.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            anyhow::Ok(())
        })
    };
    eventually(WAIT, "observer running", || async {
        Ok((rounds.load(Ordering::SeqCst) > 0).then_some(()))
    })
    .await?;
    let steps = g.stop("team-gw", &agent).await?;
    stop_flag.store(true, Ordering::SeqCst);
    observer.await??;
    assert!(
        !violated.load(Ordering::SeqCst),
        "runtime deleted while the route existed"
    );
    let order: Vec<(&str, StepAction)> = steps.iter().map(|s| (s.kind, s.action)).collect();
    assert_eq!(
        order,
        [
            ("HTTPRoute", StepAction::Deleted),
            ("Deployment", StepAction::Deleted),
            ("Service", StepAction::Deleted)
        ]
    );
    assert!(routes(&admin)?.get_opt(&agent).await?.is_none());
    assert_eq!(count::<Deployment>(&admin, &agent).await?, 0);
    assert_eq!(count::<Pod>(&admin, &agent).await?, 0);
    assert_eq!(count::<Service>(&admin, &agent).await?, 0);
    assert_eq!(
        count::<PersistentVolumeClaim>(&admin, &agent).await?,
        1,
        "stop keeps the PVC"
    );
    assert_eq!(count::<ServiceAccount>(&admin, &agent).await?, 1);
    assert_eq!(count::<Secret>(&admin, &agent).await?, 1);

    // Repeated stop converges.
    let again = g.stop("team-gw", &agent).await?;
    assert!(
        again.iter().all(|s| s.action == StepAction::Absent),
        "{again:?}"
    );
    assert_eq!(g.active_revision(&agent).await?, None);

    // A restart after stop reuses the kept PVC.
    g.ensure(&spec(&agent, 3)).await?;
    wait_ready(&g, &agent, 3).await?;

    // Delete is destructive: the PVC goes too.
    g.delete("team-gw", &agent).await?;
    for (kind, n) in [
        ("pvc", count::<PersistentVolumeClaim>(&admin, &agent).await?),
        ("secret", count::<Secret>(&admin, &agent).await?),
        ("sa", count::<ServiceAccount>(&admin, &agent).await?),
        ("np", count::<NetworkPolicy>(&admin, &agent).await?),
        ("deployment", count::<Deployment>(&admin, &agent).await?),
        ("service", count::<Service>(&admin, &agent).await?),
    ] {
        assert_eq!(n, 0, "{kind} left after delete");
    }
    delete_volume(&admin, &pv).await;
    Ok(())
}

#[tokio::test]
async fn ensure_refuses_tags_when_digests_are_required_and_a_missing_namespace() -> Result<()> {
    let e = env().await?;
    let admin = e.cluster.admin();
    let g = Gateways::new(e.hub.clone(), config())?.tenant(NS_ID);
    let agent = agent_name("gwd");
    let mut s = spec(&agent, 1);
    s.image = Some("registry.invalid/openclaw-gateway:latest".into());
    let err = g.ensure(&s).await.expect_err("a tag must be refused");
    assert!(matches!(err, Error::Invalid(_)), "{err}");
    assert!(err.to_string().contains("sha256"), "{err}");
    assert_eq!(
        count::<ServiceAccount>(&admin, &agent).await?,
        0,
        "nothing applied"
    );
    assert_eq!(count::<Deployment>(&admin, &agent).await?, 0);

    // The tag is fine once digests are not required.
    let relaxed = Gateways::new(
        e.hub.clone(),
        GatewayConfig {
            require_immutable_digest: false,
            ..config()
        },
    )?
    .tenant(NS_ID);
    relaxed.ensure(&s).await?;
    assert_eq!(count::<Deployment>(&admin, &agent).await?, 1);
    relaxed.delete("team-gw", &agent).await?;

    // A namespace of the Gateway namespace's name that is not the
    // tenant's (no mark: made by someone else) is refused, nothing applied.
    let squatter_id = agent_name("squatted");
    let squatted = control_env::gateway_ns(&squatter_id);
    let ns: Namespace = typed(&json!({ "metadata": { "name": squatted } }))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let mut s = spec(&agent, 1);
    s.namespace_id = squatter_id.clone();
    let err = Gateways::new(e.hub.clone(), config())?
        .tenant(&squatter_id)
        .ensure(&s)
        .await
        .expect_err("not the tenant's namespace");
    assert!(matches!(err, Error::NamespaceUnavailable { .. }), "{err}");
    assert_eq!(err.reason(), "GatewayNamespaceUnavailable");
    assert!(err.to_string().contains(labels::GATEWAY_NAMESPACE), "{err}");
    let sa = Api::<ServiceAccount>::namespaced(admin.clone(), &squatted)
        .get_opt(&format!("{agent}-gateway"))
        .await?;
    assert!(sa.is_none(), "nothing applied there");
    // Nor does the tenant's teardown delete it.
    let err = Gateways::new(e.hub.clone(), config())?
        .delete_namespace(&squatter_id)
        .await
        .expect_err("not the tenant's namespace");
    assert!(matches!(err, Error::NamespaceUnavailable { .. }), "{err}");
    Api::<Namespace>::all(admin)
        .delete(&squatted, &Default::default())
        .await?;
    Ok(())
}

#[tokio::test]
async fn routing_failures_fail_clearly_and_leave_the_route_unchanged() -> Result<()> {
    let e = env().await?;
    let admin = e.cluster.admin();
    let g = Gateways::new(e.hub.clone(), config())?.tenant(NS_ID);
    let agent = agent_name("gwr");
    let pv = volume_for(&admin, &gw_ns(), &agent).await?;
    g.ensure(&spec(&agent, 1)).await?;
    wait_ready(&g, &agent, 1).await?;
    g.activate("team-gw", &agent, 1).await?;
    g.ensure(&spec(&agent, 2)).await?;
    wait_ready(&g, &agent, 2).await?;
    let r1 = Some(format!("{agent}-r1-gateway"));
    let rv = routes(&admin)?.get(&agent).await?.resource_version();

    // A ServiceAccount with every gateway right except httproutes.
    let noroute_client = e
        .cluster
        .service_account_client(HUB_NS, NOROUTE_SA, None)
        .await?;
    let noroute = Gateways::new(
        noroute_client,
        GatewayConfig {
            runtime_cluster_role: control_env::NOROUTE_RUNTIME_ROLE.into(),
            service_account: clawfed_hub::gateway::ServiceAccountRef {
                namespace: HUB_NS.into(),
                name: NOROUTE_SA.into(),
            },
            ..config()
        },
    )?
    .tenant(NS_ID);
    let err = noroute
        .activate("team-gw", &agent, 2)
        .await
        .expect_err("no route rights");
    assert!(matches!(err, Error::RouteForbidden { .. }), "{err}");
    assert_eq!(err.reason(), "RouteForbidden");
    let msg = err.to_string();
    assert!(
        msg.contains("httproutes") && msg.contains("create"),
        "{msg}"
    );
    assert!(!err.is_transient());
    // ... and the same identity fails at prepare, before applying anything.
    let other = agent_name("gwr-x");
    let err = noroute
        .ensure(&spec(&other, 1))
        .await
        .expect_err("no route rights");
    assert!(matches!(err, Error::RouteForbidden { .. }), "{err}");
    assert_eq!(count::<ServiceAccount>(&admin, &other).await?, 0);

    // A route API version the control cluster does not serve.
    let bogus = Gateways::new(
        e.hub.clone(),
        GatewayConfig {
            private_routing: Some(PrivateRouting {
                api_version: "gateway.networking.k8s.io/v9".into(),
                ..config().private_routing.context("routing")?
            }),
            ..config()
        },
    )?
    .tenant(NS_ID);
    let err = bogus
        .activate("team-gw", &agent, 2)
        .await
        .expect_err("no such API");
    assert!(matches!(err, Error::RouteApiMissing { .. }), "{err}");
    assert!(
        err.to_string().contains("gateway.networking.k8s.io/v9"),
        "{err}"
    );
    let err = bogus
        .ensure(&spec(&other, 1))
        .await
        .expect_err("no such API");
    assert!(matches!(err, Error::RouteApiMissing { .. }), "{err}");
    assert_eq!(count::<ServiceAccount>(&admin, &other).await?, 0);

    // Neither touched the route.
    assert_eq!(backend(&admin, &agent).await?, r1);
    assert_eq!(routes(&admin)?.get(&agent).await?.resource_version(), rv);

    // Routing that is not configured is said so, not skipped silently.
    let unrouted = Gateways::new(
        e.hub.clone(),
        GatewayConfig {
            private_routing: None,
            ..config()
        },
    )?
    .tenant(NS_ID);
    assert_eq!(
        unrouted.activate("team-gw", &agent, 2).await?,
        Activation::RoutingDisabled
    );
    assert_eq!(backend(&admin, &agent).await?, r1);

    g.delete("team-gw", &agent).await?;
    assert!(routes(&admin)?.get_opt(&agent).await?.is_none());
    delete_volume(&admin, &pv).await;
    Ok(())
}

#[tokio::test]
async fn the_hub_identity_is_confined_to_its_gateway_namespaces() -> Result<()> {
    let e = env().await?;
    let admin = e.cluster.admin();
    let other = e.cluster.create_namespace("gw-outside").await?;
    let hub = e.hub.clone();

    let d: Deployment = typed(&json!({
        "metadata": { "name": "x" },
        "spec": {
            "selector": { "matchLabels": { "a": "b" } },
            "template": {
                "metadata": { "labels": { "a": "b" } },
                "spec": { "containers": [{ "name": "c", "image": "registry.invalid/x" }] }
            }
        }
    }))?;
    let err = Api::<Deployment>::namespaced(hub.clone(), &other.name)
        .create(&PostParams::default(), &d)
        .await
        .expect_err("outside the gateway namespace");
    assert!(is_forbidden(&err), "{err}");
    let err = Api::<Secret>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .expect_err("cluster-wide secrets");
    assert!(is_forbidden(&err), "{err}");
    let err = Api::<Secret>::namespaced(hub.clone(), &gw_ns())
        .list(&ListParams::default())
        .await
        .expect_err("secrets are write-only for the hub");
    assert!(is_forbidden(&err), "{err}");
    let err = Api::<ClusterRole>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .expect_err("cluster roles");
    assert!(is_forbidden(&err), "{err}");

    // Its cluster-wide namespace and RoleBinding rights are held to its own
    // Gateway namespaces by deploy/hub/admission.yaml: no unmarked
    // namespace, no label on another namespace, no deleting one, no binding
    // outside its namespaces, of another role, or to another subject.
    let namespaces = Api::<Namespace>::all(hub.clone());
    let unmarked: Namespace = typed(&json!({
        "metadata": { "name": control_env::gateway_ns("unmarked"),
                      "labels": { "app.kubernetes.io/managed-by": "clawfed" } }
    }))?;
    let err = namespaces
        .create(&PostParams::default(), &unmarked)
        .await
        .expect_err("an unmarked namespace");
    assert!(is_forbidden(&err), "{err}");
    let misnamed: Namespace = typed(&json!({
        "metadata": { "name": agent_name("misnamed"),
                      "labels": { "app.kubernetes.io/managed-by": "clawfed",
                                  labels::GATEWAY_NAMESPACE: "x" } }
    }))?;
    let err = namespaces
        .create(&PostParams::default(), &misnamed)
        .await
        .expect_err("not <prefix>-<24 hex>");
    assert!(is_forbidden(&err), "{err}");
    let mark = json!({ "metadata": { "labels": { labels::GATEWAY_NAMESPACE: "x" } } });
    let err = namespaces
        .patch(
            &other.name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&mark),
        )
        .await
        .expect_err("marking another namespace");
    assert!(is_forbidden(&err), "{err}");
    let err = namespaces
        .delete(&other.name, &Default::default())
        .await
        .expect_err("deleting another namespace");
    assert!(is_forbidden(&err), "{err}");
    let binding = |namespace: &str,
                   role: &str,
                   sa: &str|
     -> Result<k8s_openapi::api::rbac::v1::RoleBinding> {
        typed(&json!({
            "metadata": { "name": "clawfed-hub", "namespace": namespace },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
            "subjects": [{ "kind": "ServiceAccount", "name": sa, "namespace": HUB_NS }]
        }))
    };
    let runtime_role = clawfed_hub::gateway::DEFAULT_RUNTIME_CLUSTER_ROLE;
    let err = Api::namespaced(hub.clone(), &other.name)
        .create(
            &PostParams::default(),
            &binding(&other.name, runtime_role, "clawfed-hub")?,
        )
        .await
        .expect_err("binding outside its namespaces");
    assert!(is_forbidden(&err), "{err}");
    // In its own Gateway namespace (made by a first ensure): not another
    // role, not to another subject.
    let g = Gateways::new(hub.clone(), config())?.tenant(NS_ID);
    let agent = agent_name("gwo");
    g.ensure(&spec(&agent, 1)).await?;
    let own = gw_ns();
    for (role, sa) in [("cluster-admin", "clawfed-hub"), (runtime_role, "default")] {
        let err = Api::namespaced(hub.clone(), &own)
            .create(&PostParams::default(), &binding(&own, role, sa)?)
            .await
            .expect_err("another role or subject");
        assert!(is_forbidden(&err), "{role} to {sa}: {err}");
    }
    g.delete("team-gw", &agent).await?;
    let sas = Api::<ServiceAccount>::namespaced(admin, &other.name)
        .list_metadata(&ListParams::default())
        .await?;
    assert!(sas.items.iter().all(|sa| sa.name_any() == "default"));
    other.delete().await?;
    Ok(())
}

/// A tenant that never had a dedicated Gateway (embedded Agents only) has
/// no Gateway namespace, and the hub no rights in one: its Agents' stop,
/// retirement and deletion are done at once, readiness says there is no
/// Deployment, and nothing is created.
#[tokio::test]
async fn a_tenant_without_a_gateway_namespace_has_nothing_to_stop() -> Result<()> {
    let e = env().await?;
    let id = agent_name("no-gateways");
    let g = Gateways::new(e.hub.clone(), config())?.tenant(&id);
    assert!(g.stop("team-x", "bot").await?.is_empty());
    assert!(g.retire_revision("team-x", "bot", 1).await?.is_empty());
    assert!(g.delete("team-x", "bot").await?.is_empty());
    assert_eq!(g.active_revision("bot").await?, None);
    assert_eq!(
        g.is_ready("bot", 1).await?,
        Readiness::NotReady(clawfed_hub::gateway::NotReady::NoDeployment)
    );
    let ns = Api::<Namespace>::all(e.cluster.admin())
        .get_opt(g.namespace())
        .await?;
    assert!(ns.is_none(), "nothing was created");
    Ok(())
}

#[tokio::test]
async fn readiness_reports_why_not() -> Result<()> {
    let e = env().await?;
    let g = Gateways::new(e.hub.clone(), config())?.tenant(NS_ID);
    let agent = agent_name("gwn");
    assert_eq!(
        g.is_ready(&agent, 1).await?,
        Readiness::NotReady(clawfed_hub::gateway::NotReady::NoDeployment)
    );
    // Without a bound PVC the Pod stays Pending: never ready. Asked once
    // the scheduler has turned the Pod down, so the cluster had its say.
    g.ensure(&spec(&agent, 1)).await?;
    let pods = Api::<Pod>::namespaced(e.cluster.admin(), &gw_ns());
    let of_agent = ListParams::default().labels(&format!("{}={agent}", labels::AGENT));
    eventually(WAIT, "the Gateway Pod found unschedulable", || async {
        let unschedulable = pods.list(&of_agent).await?.items.iter().any(|p| {
            let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
            conditions.is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                })
            })
        });
        Ok(unschedulable.then_some(()))
    })
    .await?;
    assert!(!g.is_ready(&agent, 1).await?.is_ready());
    assert!(matches!(
        g.activate("team-gw", &agent, 1).await,
        Err(Error::NotReady { revision: 1, .. })
    ));
    assert!(routes(&e.cluster.admin())?.get_opt(&agent).await?.is_none());

    // Agent names are unique per tenant only: another tenant's Agent of the
    // same name can neither take this Gateway over nor stop or route it.
    let mut foreign = spec(&agent, 2);
    foreign.tenant = "team-other".into();
    for err in [
        g.ensure(&foreign).await.err(),
        g.stop("team-other", &agent).await.err(),
        g.delete("team-other", &agent).await.err(),
        g.activate("team-other", &agent, 1).await.err(),
        g.retire_revision("team-other", &agent, 1).await.err(),
    ] {
        assert!(
            matches!(err, Some(Error::OwnedByOtherTenant { .. })),
            "{err:?}"
        );
    }
    assert_eq!(count::<Deployment>(&e.cluster.admin(), &agent).await?, 1);
    assert!(
        g.is_ready(&agent, 1).await?
            != Readiness::NotReady(clawfed_hub::gateway::NotReady::OtherRevisionDeployed)
    );

    g.delete("team-gw", &agent).await?;
    Ok(())
}

/// Issue 9, defect 8: a revision's transport token is derived, not minted
/// per pipeline pass. Ensuring the same revision again (from this hub or
/// another replica on the same store) leaves the transport Secret as it was;
/// another revision gets another token; the store keeps only the token's
/// SHA-256, which matches the Secret.
#[tokio::test]
async fn transport_credential_is_stable_per_revision() -> Result<()> {
    use clawfed_hub::gateway::{TransportCredentials, transport};
    use clawfed_hub::worker::rollout::{GatewayRuntime, GatewayTarget};
    use clawfed_tests::hub::{Backend, TestHub};

    let e = env().await?;
    let admin = e.cluster.admin();

    // A store holding two real revisions of one Agent.
    let mut hub = TestHub::start(Backend::Sqlite).await;
    let agent = agent_name("tr");
    let (r1, r2) = two_revisions(&hub, &agent).await?;
    let image = format!(
        "registry.invalid/openclaw-gateway@sha256:{}",
        "cd".repeat(32)
    );
    let target = |rev: &serde_json::Value| GatewayTarget {
        tenant: "team-gw".into(),
        namespace_id: NS_ID.into(),
        agent: agent.clone(),
        agent_id: String::new(),
        revision: rev["number"].as_i64().unwrap_or_default(),
        revision_id: rev["id"].as_str().unwrap_or_default().to_owned(),
        image: image.clone(),
        harness_cluster: "exec-a".into(),
        harness_namespace: "oce-0123456789abcde".into(),
        harness_port: 8080,
        tunnel: None,
        configuration: serde_json::Value::Null,
        app_server: false,
    };
    let (t1, t2) = (target(&r1), target(&r2));

    let store = hub.store();
    let g = Gateways::new(e.hub.clone(), config())?
        .with_transport(TransportCredentials::load(store.clone(), &hub.secrets).await?);
    let secrets = Api::<Secret>::namespaced(admin.clone(), &gw_ns());
    let secret_name = format!("{agent}-gateway-transport");
    let token_of = |s: &Secret| -> Result<String> {
        let data = s.data.as_ref().context("secret data")?;
        let token = data.get("gateway-token").context("gateway-token")?;
        Ok(String::from_utf8(token.0.clone())?)
    };

    // Checks return errors rather than panic, so the cleanup below runs.
    let result = async {
        GatewayRuntime::ensure(&g, &t1).await?;
        let first = secrets.get(&secret_name).await?;
        GatewayRuntime::ensure(&g, &t1).await?;
        let second = secrets.get(&secret_name).await?;
        anyhow::ensure!(
            first.resource_version() == second.resource_version(),
            "a second pass rewrote the transport Secret: {:?} -> {:?}",
            first.resource_version(),
            second.resource_version()
        );
        anyhow::ensure!(first.data == second.data, "the token changed");

        // Another hub replica on the same store derives the same token.
        let replica = Gateways::new(e.hub.clone(), config())?
            .with_transport(TransportCredentials::load(store.clone(), &hub.secrets).await?);
        GatewayRuntime::ensure(&replica, &t1).await?;
        let third = secrets.get(&secret_name).await?;
        anyhow::ensure!(
            first.resource_version() == third.resource_version(),
            "another replica rewrote the transport Secret"
        );

        // The store keeps the token's hash, never the token.
        let token1 = token_of(&first)?;
        anyhow::ensure!(token1.len() == 64, "token {} characters", token1.len());
        let hash1 = transport::token_hash(&token1);
        let stored1 = store.transport_token_hash(&t1.revision_id).await?;
        anyhow::ensure!(
            stored1.as_deref() == Some(hash1.as_str()),
            "stored {stored1:?}, Secret's token hashes to {hash1}"
        );
        let found = store.revision_by_transport_hash(&hash1).await?;
        anyhow::ensure!(
            found.as_deref() == Some(t1.revision_id.as_str()),
            "{found:?}"
        );

        // The next revision gets its own token (and hash).
        GatewayRuntime::ensure(&g, &t2).await?;
        let token2 = token_of(&secrets.get(&secret_name).await?)?;
        anyhow::ensure!(token2 != token1, "revision 2 got revision 1's token");
        let stored2 = store.transport_token_hash(&t2.revision_id).await?;
        anyhow::ensure!(
            stored2 == Some(transport::token_hash(&token2)),
            "revision 2's stored hash {stored2:?}"
        );
        let still = store.transport_token_hash(&t1.revision_id).await?;
        anyhow::ensure!(still == stored1, "revision 1's hash changed: {still:?}");
        Ok::<_, anyhow::Error>(())
    }
    .await;
    g.tenant(NS_ID).delete("team-gw", &agent).await?;
    hub.stop().await;
    result
}

/// Namespace `team-gw`, Agent `agent` and two revisions of it, over REST.
async fn two_revisions(
    hub: &clawfed_tests::hub::TestHub,
    agent: &str,
) -> Result<(serde_json::Value, serde_json::Value)> {
    let post = |path: String, body: serde_json::Value| async move {
        let r = hub
            .http
            .post(hub.url(&path))
            .bearer_auth(&hub.root_token)
            .json(&body)
            .send()
            .await?;
        let status = r.status();
        let body: serde_json::Value = r.json().await?;
        anyhow::ensure!(status.is_success(), "{path}: {status}: {body}");
        Ok::<_, anyhow::Error>(body)
    };
    post("/namespaces".into(), json!({ "name": "team-gw" })).await?;
    let spec = json!({ "harnessKind": "embedded-openclaw", "image": "img:1" });
    post(
        "/namespaces/team-gw/agents".into(),
        json!({ "name": agent, "spec": spec }),
    )
    .await?;
    let deploy = format!("/namespaces/team-gw/agents/{agent}/deploy");
    let r1 = post(deploy.clone(), json!({})).await?;
    let r2 = post(deploy, json!({})).await?;
    Ok((r1, r2))
}
