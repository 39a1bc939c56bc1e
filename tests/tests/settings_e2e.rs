//! Installation settings end to end on real clusters: a hub whose config
//! carries the OpenClaw Compute Driver's own section
//! (`drivers.compute.configuration`, the seed's example byte for byte,
//! `deploy/examples/seed-compute-driver.yaml`), a real spoke on exec-a over mTLS and
//! the hub's Gateways in control. Every setting is read back from the
//! objects it governs: ResourceQuota, LimitRange and NetworkPolicies in the
//! tenant's exec namespace, the Harness Deployments and workspace PVC, and
//! the Gateway's Deployment, PVC, NetworkPolicy and transport Secret.
//!
//! Needs `e2e/cluster.sh up control exec-a` and `eval "$(scripts/postgres.sh
//! env)"`; skips when the clusters were never started. Objects are only
//! inspected (kwok fakes, no process): the revisions need not become active.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use clawfed_hub::client::HubClient;
use clawfed_hub::config::Config;
use clawfed_hub::gateway::Gateways;
use clawfed_hub::model::{Agent, AgentRevision, Namespace};
use clawfed_spoke::config::SpokeConfig;
use clawfed_spoke::exec::Executor;
use clawfed_tests::api::HubTestExt;
use clawfed_tests::control_env::{self, gateway_ns};
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::kube_env;
use clawfed_tests::spoke_env;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Container, LimitRange, PersistentVolumeClaim, PodSpec, ResourceQuota, Secret,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::DeleteParams;
use kube::{Api, Client};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(90);

/// The trusted proxy CIDR filled into the seed's placeholder.
const PROXY_CIDR: &str = "198.18.77.0/24";

fn pinned(name: &str, c: &str) -> String {
    format!("registry.example/{name}@sha256:{}", c.repeat(64))
}

/// The test hub's settings: the test control cluster's Gateway options
/// (namespace, routing, approved clients), then the seed's Compute Driver
/// section, loaded as a hub config file loads it (byte for byte, its
/// placeholder filled).
fn configure(c: &mut Config) {
    let seed = Config::from_yaml(
        &clawfed_tests::seed::compute_driver_section(PROXY_CIDR),
        "seed-compute-driver.yaml",
    )
    .expect("the seed's section loads");
    let section = seed.drivers.compute.expect("section").configuration;
    c.gateway.options = control_env::gateway_config();
    c.set_compute_driver(section)
        .expect("driver section accepted");
    c.pipeline.enabled = true;
    c.pipeline.ready_deadline_seconds = 120;
    c.worker.max_attempts = 8;
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn quantities(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect(),
    )
}

async fn get_when<K>(api: &Api<K>, name: &str) -> Result<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    kube_env::eventually(WAIT, &format!("object {name}"), || async {
        Ok(api.get_opt(name).await?)
    })
    .await
}

fn pod(d: &Deployment) -> PodSpec {
    d.spec.template.spec.clone().expect("pod template")
}

fn env_of(c: &Container, name: &str) -> Option<String> {
    c.env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

/// The projected service principal token: (audience, expiration, mounted
/// read-only).
fn service_principal(pod: &PodSpec) -> Option<(String, i64, bool)> {
    let token = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == clawfed_kube::token::VOLUME)?
        .projected
        .clone()?
        .sources?
        .first()?
        .service_account_token
        .clone()?;
    let read_only = pod.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.name == clawfed_kube::token::VOLUME && m.read_only == Some(true));
    Some((token.audience?, token.expiration_seconds?, read_only))
}

fn seccomp(pod: &PodSpec) -> (Option<String>, Option<String>, Option<String>) {
    let p = pod
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.clone())
        .expect("pod seccomp");
    let c = pod.containers[0]
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.clone())
        .expect("container seccomp");
    assert_eq!(p, c, "pod and container agree");
    (Some(p.type_), p.localhost_profile, c.localhost_profile)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_installation_setting_is_visible_on_the_objects_it_governs() -> Result<()> {
    let (Some(_), Some(exec_a)) = (
        kube_env::cluster_or_skip("control").await?,
        kube_env::cluster_or_skip("exec-a").await?,
    ) else {
        return Ok(());
    };
    clawfed_tests::link::init_test_logging();
    let control = control_env::control().await?;
    let mut probe = Config::default();
    configure(&mut probe);
    let options = probe.gateway_options();
    let gateways = Gateways::new(control_env::hub_client(&control).await?, options.clone())?;
    let mut hub = TestHub::start_with_gateways(
        Backend::Postgres,
        configure,
        clawfed_hub::worker::Handlers::builtin(),
        Some(gateways),
    )
    .await;
    let rest = HubClient::new(&hub.rest, Some(hub.root_token.clone()))?;
    let id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let cluster = format!("exec-a-s{}", &id[..6]);

    // A real spoke on exec-a, as its own ServiceAccount.
    let shutdown = CancellationToken::new();
    let dir = tempfile::tempdir()?;
    let spoke_client = spoke_env::spoke_client(&exec_a).await?;
    let (reports_tx, reports_rx) = tokio::sync::mpsc::channel(1024);
    let executor = Arc::new(Executor::new(
        spoke_client,
        SpokeConfig::default(),
        reports_tx,
    ));
    let token = clawfed_tests::link::bootstrap_token(&hub, &cluster, false).await;
    let link = clawfed_tests::link::kube_link(&hub, &cluster, token, dir.path(), executor)?;
    let spoke = tokio::spawn(link.run(reports_rx, shutdown.clone()));

    let tenant = format!("t{id}");
    let ns: Namespace = rest.create_namespace(&tenant).await?;
    // A second tenant, with an Agent of the same name.
    let other: Namespace = rest.create_namespace(&format!("u{id}")).await?;
    let codex = format!("c{id}");
    let native = format!("o{id}");
    let result = check(
        &rest,
        &control.admin(),
        &exec_a.admin(),
        &ns,
        &cluster,
        &codex,
        &native,
    )
    .await;
    let result = match result {
        Ok(()) => {
            two_tenants_one_agent_name(&rest, &control.admin(), &ns, &other, &cluster, &codex).await
        }
        e => e,
    };

    // Clean up whatever happened: Gateway objects (by the prefixed
    // transport Secret name too), the exec namespace.
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), spoke).await;
    hub.stop().await;
    let cleanup = Gateways::new(control.admin(), options)?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(exec_a.admin());
    for t in [&ns, &other] {
        if let Err(e) = cleanup.delete_namespace(&t.id).await {
            eprintln!("cleanup: gateway namespace of {}: {e}", t.name);
        }
        match namespaces
            .delete(&t.data_plane_namespace, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => eprintln!("cleanup: namespace: {e}"),
        }
    }
    result
}

async fn check(
    rest: &HubClient,
    control: &Client,
    exec: &Client,
    ns: &Namespace,
    cluster: &str,
    codex: &str,
    native: &str,
) -> Result<()> {
    rest.wait_online(cluster, WAIT).await?;
    // Neither Agent names an image: the installation's images are used.
    for (name, kind, resources) in [
        (codex, "dedicated-codex", json!({ "memoryLimit": "2Gi" })),
        (native, "embedded-openclaw", json!({})),
    ] {
        let _: Agent = rest
            .call(
                reqwest::Method::POST,
                &format!("/namespaces/{}/agents", ns.name),
                Some(json!({
                    "name": name,
                    "spec": {
                        "harnessKind": kind,
                        "resources": resources,
                        "placement": { "cluster": cluster },
                    }
                })),
            )
            .await?;
        let r: AgentRevision = rest
            .call(
                reqwest::Method::POST,
                &format!("/namespaces/{}/agents/{name}/deploy", ns.name),
                None,
            )
            .await?;
        ensure!(r.number == 1);
    }
    let dpns = &ns.data_plane_namespace;

    // The namespace's guard rails.
    let quota = get_when(
        &Api::<ResourceQuota>::namespaced(exec.clone(), dpns),
        "clawfed-quota",
    )
    .await?;
    assert_eq!(
        quota.spec.and_then(|s| s.hard),
        quantities(&[("pods", "10")])
    );
    let limits = get_when(
        &Api::<LimitRange>::namespaced(exec.clone(), dpns),
        "clawfed-defaults",
    )
    .await?;
    let item = limits.spec.expect("spec").limits[0].clone();
    assert_eq!(item.type_, "Container");
    assert_eq!(
        item.default_request,
        quantities(&[("cpu", "100m"), ("memory", "128Mi")])
    );
    assert_eq!(
        item.default,
        quantities(&[("cpu", "500m"), ("memory", "256Mi")])
    );
    let policies = Api::<NetworkPolicy>::namespaced(exec.clone(), dpns);
    let dns = get_when(&policies, "clawfed-allow-dns").await?;
    let peer = dns.spec.expect("spec").egress.expect("egress")[0]
        .to
        .clone()
        .expect("to")[0]
        .clone();
    assert_eq!(
        peer.namespace_selector.and_then(|s| s.match_labels),
        Some(map(&[("kubernetes.io/metadata.name", "kube-system")])),
        "the installation's DNS target"
    );
    assert_eq!(
        peer.pod_selector.and_then(|s| s.match_labels),
        Some(map(&[("k8s-app", "kube-dns")]))
    );
    let flows = get_when(&policies, "clawfed-harness-flows")
        .await?
        .spec
        .expect("spec");
    let ingress_port = flows.ingress.expect("ingress")[0]
        .ports
        .clone()
        .expect("ports")[0]
        .port
        .clone();
    assert_eq!(
        ingress_port,
        Some(
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(
                clawfed_proto::work::harness::DEFAULT_PORT
            )
        )
    );

    // The Harness Deployments.
    let deployments = Api::<Deployment>::namespaced(exec.clone(), dpns);
    let agent_image = pinned("openclaw-codex", "b");
    let sp = Some(("openclaw-enterprise".to_string(), 900, true));
    let c = pod(&get_when(&deployments, &format!("{codex}-r1-harness")).await?);
    assert_eq!(c.automount_service_account_token, Some(false));
    assert_eq!(c.node_selector, Some(map(&[("oce-role", "agents")])));
    let ctr = &c.containers[0];
    assert_eq!(ctr.image.as_deref(), Some(agent_image.as_str()));
    let res = ctr.resources.clone().expect("resources");
    assert_eq!(
        res.requests,
        quantities(&[("cpu", "100m"), ("memory", "128Mi")])
    );
    assert_eq!(
        res.limits,
        quantities(&[("cpu", "500m"), ("memory", "2Gi")]),
        "the Agent's memory limit overrides the installation's"
    );
    assert_eq!(
        ctr.ports.clone().expect("ports")[0].container_port,
        clawfed_proto::work::harness::DEFAULT_PORT
    );
    assert_eq!(
        seccomp(&c),
        (
            Some("Localhost".to_string()),
            Some("profiles/codex-0.158.0.json".to_string()),
            Some("profiles/codex-0.158.0.json".to_string())
        )
    );
    assert_eq!(
        env_of(ctr, "OPENCLAW_SESSION_CAPACITY"),
        None,
        "not OpenClaw"
    );
    assert_eq!(service_principal(&c), sp);
    let o = pod(&get_when(&deployments, &format!("{native}-r1-harness")).await?);
    assert_eq!(
        env_of(&o.containers[0], "OPENCLAW_SESSION_CAPACITY").as_deref(),
        Some("8")
    );
    assert_eq!(
        seccomp(&o).0.as_deref(),
        Some("RuntimeDefault"),
        "not Codex"
    );
    assert_eq!(o.automount_service_account_token, Some(false));
    assert_eq!(service_principal(&o), sp);
    let workspace = get_when(
        &Api::<PersistentVolumeClaim>::namespaced(exec.clone(), dpns),
        &format!("{codex}-workspace"),
    )
    .await?
    .spec
    .expect("spec");
    assert_eq!(
        workspace.storage_class_name, None,
        "the seed names no workspace class: the cluster's default"
    );
    assert_eq!(
        workspace.resources.and_then(|r| r.requests),
        quantities(&[("storage", "1Gi")])
    );

    // The Gateway objects in control, in the tenant's own Gateway
    // namespace.
    let gw_ns = gateway_ns(&ns.id);
    let g = pod(&get_when(
        &Api::<Deployment>::namespaced(control.clone(), &gw_ns),
        &format!("{codex}-gateway"),
    )
    .await?);
    assert_eq!(g.automount_service_account_token, Some(false));
    assert_eq!(g.node_selector, Some(map(&[("oce-role", "control-plane")])));
    let gctr = &g.containers[0];
    let gateway_image = pinned("openclaw-gateway", "a");
    assert_eq!(gctr.image.as_deref(), Some(gateway_image.as_str()));
    let res = gctr.resources.clone().expect("resources");
    assert_eq!(
        res.requests,
        quantities(&[("cpu", "100m"), ("memory", "128Mi")])
    );
    assert_eq!(
        res.limits,
        quantities(&[("cpu", "500m"), ("memory", "256Mi")])
    );
    assert_eq!(gctr.ports.clone().expect("ports")[0].container_port, 8080);
    assert_eq!(service_principal(&g), sp);
    assert!(
        env_of(gctr, clawfed_hub::gateway::objects::HARNESS_ENDPOINT_ENV).is_some_and(
            |e| e.ends_with(&format!(":{}", clawfed_proto::work::harness::DEFAULT_PORT))
        ),
        "the Gateway is pointed at the Harness port"
    );
    let data = get_when(
        &Api::<PersistentVolumeClaim>::namespaced(control.clone(), &gw_ns),
        &format!("{codex}-gateway-data"),
    )
    .await?;
    assert_eq!(
        data.spec.and_then(|s| s.storage_class_name).as_deref(),
        Some("sqlite-block")
    );
    let secrets = Api::<Secret>::namespaced(control.clone(), &gw_ns);
    get_when(&secrets, &format!("openclaw-agent-transport-{codex}")).await?;
    assert!(
        secrets
            .get_opt(&format!("{codex}-gateway-transport"))
            .await?
            .is_none(),
        "the prefix names the transport Secret"
    );
    let np = get_when(
        &Api::<NetworkPolicy>::namespaced(control.clone(), &gw_ns),
        &format!("{codex}-gateway"),
    )
    .await?
    .spec
    .expect("spec");
    let rule = np.ingress.expect("ingress")[0].clone();
    assert!(
        rule.from
            .iter()
            .flatten()
            .any(|p| p.ip_block.as_ref().is_some_and(|b| b.cidr == PROXY_CIDR)),
        "trusted proxy CIDR admitted"
    );
    assert!(
        rule.from.iter().flatten().any(|p| {
            p.namespace_selector
                .as_ref()
                .and_then(|s| s.match_labels.clone())
                == Some(map(&[("kubernetes.io/metadata.name", "openclaw-system")]))
                && p.pod_selector.as_ref().and_then(|s| s.match_labels.clone())
                    == Some(map(&[("app", "approved-gateway-client")]))
        }),
        "the seed's gateway client admitted"
    );
    assert_eq!(
        rule.ports.expect("ports")[0].port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(8080))
    );
    let dns_peer = np.egress.expect("egress")[0].to.clone().expect("to")[0].clone();
    assert_eq!(
        dns_peer.namespace_selector.and_then(|s| s.match_labels),
        Some(map(&[("kubernetes.io/metadata.name", "kube-system")]))
    );
    Ok(())
}

/// Two tenants deploy an Agent of one name: each Gateway lands in its own
/// tenant's Gateway namespace, each namespace carrying the installation's
/// quota and container defaults (the seed's `resources.namespace`, applied
/// to each physical namespace).
async fn two_tenants_one_agent_name(
    rest: &HubClient,
    control: &Client,
    first: &Namespace,
    second: &Namespace,
    cluster: &str,
    agent: &str,
) -> Result<()> {
    let _: Agent = rest
        .call(
            reqwest::Method::POST,
            &format!("/namespaces/{}/agents", second.name),
            Some(json!({
                "name": agent,
                "spec": { "harnessKind": "dedicated-codex", "placement": { "cluster": cluster } }
            })),
        )
        .await?;
    let _: AgentRevision = rest
        .call(
            reqwest::Method::POST,
            &format!("/namespaces/{}/agents/{agent}/deploy", second.name),
            None,
        )
        .await?;
    let (a, b) = (gateway_ns(&first.id), gateway_ns(&second.id));
    assert_ne!(a, b);
    for (tenant, gw_ns) in [(first, &a), (second, &b)] {
        let d = get_when(
            &Api::<Deployment>::namespaced(control.clone(), gw_ns),
            &format!("{agent}-gateway"),
        )
        .await?;
        assert_eq!(
            d.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(clawfed_proto::labels::TENANT)),
            Some(&tenant.name),
            "{gw_ns} holds {}'s Gateway",
            tenant.name
        );
        let namespace = Api::<k8s_openapi::api::core::v1::Namespace>::all(control.clone())
            .get(gw_ns)
            .await?;
        assert_eq!(
            namespace
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(clawfed_proto::labels::GATEWAY_NAMESPACE)),
            Some(&tenant.id),
            "marked with its tenant's namespace id"
        );
        let quota = get_when(
            &Api::<ResourceQuota>::namespaced(control.clone(), gw_ns),
            clawfed_hub::gateway::objects::NAMESPACE_QUOTA,
        )
        .await?;
        assert_eq!(
            quota.spec.and_then(|s| s.hard),
            quantities(&[("pods", "10")])
        );
        let limits = get_when(
            &Api::<LimitRange>::namespaced(control.clone(), gw_ns),
            clawfed_hub::gateway::objects::NAMESPACE_LIMITS,
        )
        .await?;
        let item = limits.spec.expect("spec").limits[0].clone();
        assert_eq!(
            item.default,
            quantities(&[("cpu", "500m"), ("memory", "256Mi")])
        );
        // The quota counts the Gateway Pod: it is in force there.
        kube_env::eventually(WAIT, "the quota counting the Gateway Pod", || async {
            let q = Api::<ResourceQuota>::namespaced(control.clone(), gw_ns)
                .get(clawfed_hub::gateway::objects::NAMESPACE_QUOTA)
                .await?;
            let used = q
                .status
                .and_then(|s| s.used)
                .and_then(|u| u.get("pods").cloned());
            Ok((used == Some(Quantity("1".into()))).then_some(()))
        })
        .await?;
    }
    // The second tenant's teardown deletes its Gateway namespace, and only
    // its own: the first tenant's Gateway of the same name stays.
    // An Agent is deleted once stopped.
    let _: serde_json::Value = rest
        .call(
            reqwest::Method::POST,
            &format!("/namespaces/{}/agents/{agent}/stop", second.name),
            None,
        )
        .await?;
    kube_env::eventually(WAIT, "the second tenant's Agent deleted", || async {
        let (status, _) = rest
            .exchange(
                reqwest::Method::DELETE,
                &format!("/namespaces/{}/agents/{agent}", second.name),
                None,
                None,
            )
            .await?;
        Ok(status.is_success().then_some(()))
    })
    .await?;
    // Accepted once the Agent is gone from the tenant.
    kube_env::eventually(WAIT, "the second tenant's teardown accepted", || async {
        let (status, _) = rest
            .exchange(
                reqwest::Method::DELETE,
                &format!("/namespaces/{}", second.name),
                None,
                None,
            )
            .await?;
        Ok(status.is_success().then_some(()))
    })
    .await?;
    kube_env::eventually(WAIT, "the second tenant deleted", || async {
        let (status, _) = rest
            .exchange(
                reqwest::Method::GET,
                &format!("/namespaces/{}", second.name),
                None,
                None,
            )
            .await?;
        Ok((status == reqwest::StatusCode::NOT_FOUND).then_some(()))
    })
    .await?;
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(control.clone());
    kube_env::eventually(
        WAIT,
        "the second tenant's Gateway namespace gone",
        || async { Ok(namespaces.get_opt(&b).await?.is_none().then_some(())) },
    )
    .await?;
    Api::<Deployment>::namespaced(control.clone(), &a)
        .get(&format!("{agent}-gateway"))
        .await
        .context("the first tenant's Gateway stays")?;
    Ok(())
}
