//! The revision pipeline end to end: a real hub (pipeline on), a real spoke
//! over mTLS running the Kubernetes executor as its own least-privilege
//! ServiceAccount on the `exec-a` cluster (kube-apiserver, controller-
//! manager, scheduler, kwok), deploy → Active, change → new revision Active
//! and the predecessor retired, stop → Harness gone and storage kept.
//!
//! Needs `e2e/cluster.sh up exec-a` (scripts/test.sh starts it).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use clawfed_hub::model::{Agent, AgentRevision, ConnectionState, Namespace, RevisionPhase};
use clawfed_spoke::config::SpokeConfig;
use clawfed_spoke::exec::Executor;
use clawfed_spoke::link::identity::FileIdentityStore;
use clawfed_spoke::link::{Link, SpokeMetrics};
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::link::{bootstrap_token, cluster, eventually, hub_ca, hub_url};
use clawfed_tests::{kube_env, spoke_env};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(90);

async fn rest<T: serde::de::DeserializeOwned>(
    hub: &TestHub,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<T> {
    let mut req = hub
        .http
        .request(method, hub.url(path))
        .bearer_auth(&hub.root_token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await?;
    let status = resp.status();
    let text = resp.text().await?;
    anyhow::ensure!(status.is_success(), "{path}: {status} {text}");
    Ok(serde_json::from_str(&text)?)
}

async fn revision(hub: &TestHub, ns: &str, agent: &str, n: i64) -> Result<AgentRevision> {
    rest(
        hub,
        reqwest::Method::GET,
        &format!("/namespaces/{ns}/agents/{agent}/revisions/{n}"),
        None,
    )
    .await
}

async fn wait_phase(
    hub: &TestHub,
    ns: &str,
    agent: &str,
    n: i64,
    phase: RevisionPhase,
) -> AgentRevision {
    eventually(WAIT, &format!("revision {n} {phase:?}"), || async {
        let r = revision(hub, ns, agent, n).await.ok()?;
        assert_ne!(
            r.phase,
            RevisionPhase::Failed,
            "revision {n} failed: {:?}",
            r.reason
        );
        (r.phase == phase).then_some(r)
    })
    .await
}

async fn harness_pods(client: &kube::Client, ns: &str, agent: &str) -> Result<Vec<Pod>> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{}={agent}", clawfed_proto::labels::AGENT)))
        .await?;
    Ok(pods
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_change_and_stop_through_a_real_spoke() -> Result<()> {
    clawfed_tests::link::init_test_logging();
    let exec_a = kube_env::cluster("exec-a").await?;
    let spoke_client = spoke_env::spoke_client(&exec_a).await?;
    let admin = exec_a.admin();

    let hub = TestHub::start_with(
        Backend::Sqlite,
        |c| {
            c.pipeline.enabled = true;
            c.pipeline.ready_deadline_seconds = 60;
        },
        clawfed_hub::worker::Handlers::builtin(),
    )
    .await;
    let cluster_name = format!("exec-a-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
    let token = bootstrap_token(&hub, &cluster_name, false).await;
    let dir = tempfile::tempdir()?;
    let (reports_tx, reports_rx) = tokio::sync::mpsc::channel(1024);
    let executor = Arc::new(Executor::new(
        spoke_client.clone(),
        SpokeConfig::default(),
        reports_tx,
    ));
    let shutdown = CancellationToken::new();
    let link = clawfed_tests::link::kube_link(&hub, &cluster_name, token, dir.path(), executor)?;
    let spoke = tokio::spawn(link.run(reports_rx, shutdown.clone()));
    eventually(WAIT, "spoke online", || async {
        cluster(&hub, &cluster_name)
            .await
            .filter(|c| c.connection_state == ConnectionState::Online)
    })
    .await;

    let tenant = format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let ns: Namespace = rest(
        &hub,
        reqwest::Method::POST,
        "/namespaces",
        Some(json!({ "name": tenant })),
    )
    .await?;
    let agent: Agent = rest(
        &hub,
        reqwest::Method::POST,
        &format!("/namespaces/{tenant}/agents"),
        Some(json!({
            "name": "bot",
            "spec": {
                "harnessKind": "embedded-openclaw",
                "image": "ghcr.io/openclaw/openclaw:1.0",
                "placement": { "cluster": cluster_name },
                "requirementLabels": { "example.com/pool": "general" }
            }
        })),
    )
    .await?;

    // Deploy → Active, with exactly one Ready Harness Pod in the tenant's
    // data-plane namespace.
    let _: AgentRevision = rest(
        &hub,
        reqwest::Method::POST,
        &format!("/namespaces/{tenant}/agents/bot/deploy"),
        None,
    )
    .await?;
    let r1 = wait_phase(&hub, &tenant, "bot", 1, RevisionPhase::Active).await;
    for key in ["elapsedMs", "prepareMs", "readinessWaitMs"] {
        assert!(
            r1.progress.durations_ms.contains_key(key),
            "{key} missing: {:?}",
            r1.progress
        );
    }
    let pods = harness_pods(&admin, &ns.data_plane_namespace, "bot").await?;
    assert_eq!(pods.len(), 1, "one Harness Pod");
    let labels = pods[0].metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get(clawfed_proto::labels::REVISION)
            .map(String::as_str),
        Some("1")
    );
    assert_eq!(
        labels.get("example.com/pool").map(String::as_str),
        Some("general")
    );
    let a: Agent = rest(
        &hub,
        reqwest::Method::GET,
        &format!("/namespaces/{tenant}/agents/bot"),
        None,
    )
    .await?;
    assert_eq!(a.active_revision, Some(1));

    // Change the Agent → revision 2 Active, revision 1 retired, and only
    // revision 2's Harness runs.
    let mut spec = agent.spec.clone();
    spec.image = "ghcr.io/openclaw/openclaw:1.1".into();
    let _: Agent = rest(
        &hub,
        reqwest::Method::PUT,
        &format!("/namespaces/{tenant}/agents/bot"),
        Some(json!({ "spec": spec, "version": agent.version })),
    )
    .await?;
    let _: AgentRevision = rest(
        &hub,
        reqwest::Method::POST,
        &format!("/namespaces/{tenant}/agents/bot/deploy"),
        None,
    )
    .await?;
    wait_phase(&hub, &tenant, "bot", 2, RevisionPhase::Active).await;
    wait_phase(&hub, &tenant, "bot", 1, RevisionPhase::Retired).await;
    let pods = eventually(WAIT, "only revision 2's Pod", || async {
        let pods = harness_pods(&admin, &ns.data_plane_namespace, "bot")
            .await
            .ok()?;
        let revisions: Vec<_> = pods
            .iter()
            .filter_map(|p| {
                p.metadata
                    .labels
                    .as_ref()?
                    .get(clawfed_proto::labels::REVISION)
                    .cloned()
            })
            .collect();
        (revisions == ["2"]).then_some(pods)
    })
    .await;
    assert_eq!(pods.len(), 1);

    // Stop → revision stopped, Harness Deployment gone, credential Secret
    // kept (stop is not the destructive cleanup).
    let _: Agent = rest(
        &hub,
        reqwest::Method::POST,
        &format!("/namespaces/{tenant}/agents/bot/stop"),
        Some(json!({})),
    )
    .await?;
    wait_phase(&hub, &tenant, "bot", 2, RevisionPhase::Stopped).await;
    let deployments = Api::<Deployment>::namespaced(admin.clone(), &ns.data_plane_namespace);
    eventually(WAIT, "Harness Deployment gone", || async {
        let list = deployments.list(&ListParams::default()).await.ok()?;
        list.items.is_empty().then_some(())
    })
    .await;
    let secrets = Api::<Secret>::namespaced(admin.clone(), &ns.data_plane_namespace)
        .list(&ListParams::default().labels(&format!("{}=bot", clawfed_proto::labels::AGENT)))
        .await?;
    assert!(
        !secrets.items.is_empty(),
        "stop keeps the Harness credential Secret"
    );

    // Delete the Agent, then the tenant: the spoke tears the data-plane
    // namespace down (provider cleanup first), then the tenant is gone.
    let deleted = hub
        .http
        .delete(hub.url(&format!("/namespaces/{tenant}/agents/bot")))
        .bearer_auth(&hub.root_token)
        .send()
        .await?;
    assert_eq!(deleted.status(), 204);
    let deleting = hub
        .http
        .delete(hub.url(&format!("/namespaces/{tenant}")))
        .bearer_auth(&hub.root_token)
        .send()
        .await?;
    assert_eq!(deleting.status(), 202, "teardown is queued");
    eventually(WAIT, "tenant deleted after teardown", || async {
        let r = hub
            .http
            .get(hub.url(&format!("/namespaces/{tenant}")))
            .bearer_auth(&hub.root_token)
            .send()
            .await
            .ok()?;
        (r.status() == 404).then_some(())
    })
    .await;
    let physical = Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .get_opt(&ns.data_plane_namespace)
        .await?;
    assert!(
        physical.is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
        "the data-plane namespace is deleted"
    );

    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), spoke).await;
    Ok(())
}

/// Issue 12, topology: a spoke advertises its SandboxDriver and the
/// containment it declares in Hello; the hub refuses to place dedicated
/// native OpenClaw on a cluster that cannot serve it, naming what is
/// missing: at deploy when the Agent pins the cluster (4xx), in the
/// pipeline (revision failed with the reason) when a selector chose it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_refuses_a_cluster_whose_spoke_lacks_what_the_revision_needs() -> Result<()> {
    use clawfed_proto::capability;
    clawfed_tests::link::init_test_logging();
    let exec_a = kube_env::cluster("exec-a").await?;
    let mut hub = TestHub::start_with(
        Backend::Sqlite,
        |c| c.pipeline.enabled = true,
        clawfed_hub::worker::Handlers::builtin(),
    )
    .await;
    let cluster_name = format!("caps-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
    let token = bootstrap_token(&hub, &cluster_name, false).await;
    let dir = tempfile::tempdir()?;
    // What the shipped spoke advertises for `--sandbox-driver crd
    // --sandbox-containment networking,filesystem` (no process containment).
    let driver = clawfed_spoke::provider::crd::CrdSandboxDriver::new(exec_a.admin())
        .with_containment(vec![
            capability::CONTAINMENT_NETWORKING,
            capability::CONTAINMENT_FILESYSTEM,
        ]);
    let mut capabilities = vec!["applier:ledger".to_owned()];
    capabilities.extend(clawfed_spoke::provider::capabilities(&driver));
    let ledger = Arc::new(clawfed_spoke::link::ledger::FileLedger::open(dir.path())?);
    let shutdown = CancellationToken::new();
    let link = Link::new(
        clawfed_spoke::link::LinkConfig {
            capabilities,
            ..clawfed_tests::link::kube_link_config(
                &hub_url(&hub),
                hub_ca(&hub),
                &cluster_name,
                Some(token),
            )?
        },
        Arc::new(FileIdentityStore::new(dir.path())),
        ledger,
        SpokeMetrics::default(),
    );
    let (_reports_tx, reports_rx) = tokio::sync::mpsc::channel(16);
    let spoke = tokio::spawn(link.run(reports_rx, shutdown.clone()));
    let online = eventually(WAIT, "spoke online", || async {
        cluster(&hub, &cluster_name)
            .await
            .filter(|c| c.connection_state == ConnectionState::Online)
    })
    .await;
    assert!(
        online
            .capabilities
            .iter()
            .any(|c| c == capability::SANDBOX_PROVISIONS),
        "{:?}",
        online.capabilities
    );

    let tenant = format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let _: Namespace = rest(
        &hub,
        reqwest::Method::POST,
        "/namespaces",
        Some(json!({ "name": tenant })),
    )
    .await?;
    let native = |placement: serde_json::Value| {
        json!({
            "harnessKind": "dedicated-openclaw",
            "executionMode": "provider",
            "image": "ghcr.io/openclaw/openclaw:1.0",
            "placement": placement,
        })
    };
    for (name, placement) in [
        ("pinned", json!({ "cluster": cluster_name })),
        ("chosen", json!({})),
    ] {
        let _: Agent = rest(
            &hub,
            reqwest::Method::POST,
            &format!("/namespaces/{tenant}/agents"),
            Some(json!({ "name": name, "spec": native(placement) })),
        )
        .await?;
    }

    // Pinned: the deploy itself is refused, naming the cluster and the gap.
    let refused = hub
        .http
        .post(hub.url(&format!("/namespaces/{tenant}/agents/pinned/deploy")))
        .bearer_auth(&hub.root_token)
        .send()
        .await?;
    let status = refused.status();
    let body = refused.text().await?;
    assert!(status.is_client_error(), "{status} {body}");
    assert!(body.contains(&cluster_name), "{body}");
    assert!(body.contains(capability::CONTAINMENT_PROCESS), "{body}");
    assert!(!body.contains(capability::CONTAINMENT_NETWORKING), "{body}");

    // Chosen by the pipeline: the revision fails with the reason, and no
    // work reaches the cluster.
    let _: AgentRevision = rest(
        &hub,
        reqwest::Method::POST,
        &format!("/namespaces/{tenant}/agents/chosen/deploy"),
        None,
    )
    .await?;
    let failed = eventually(WAIT, "revision 1 failed", || async {
        let r = revision(&hub, &tenant, "chosen", 1).await.ok()?;
        (r.phase == RevisionPhase::Failed).then_some(r)
    })
    .await;
    let reason = failed.reason.unwrap_or_default();
    assert!(reason.contains("placement refused"), "{reason}");
    assert!(reason.contains(&cluster_name), "{reason}");
    assert!(reason.contains(capability::CONTAINMENT_PROCESS), "{reason}");
    assert_eq!(failed.resolved_cluster, None, "never placed");

    shutdown.cancel();
    let _ = spoke.await;
    hub.stop().await;
    Ok(())
}
