//! Issue 33, cordon and drain, on the real clusters: a hub with the
//! pipeline (Gateways in control) and two real spokes, on exec-a and
//! exec-b. Cordoning keeps new revisions off a cluster; draining moves
//! each Agent away, never running two Harnesses of one Agent at once, as
//! watchers of both clusters' Pods see it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use clawfed_hub::client::{ClientError, HubClient};
use clawfed_hub::model::{
    Agent, Cluster, DrainAgentState, Namespace, RevisionPhase, WorkspaceOrigin,
};
use clawfed_tests::api::HubTestExt;
use clawfed_tests::cleanup::Cleanup;
use clawfed_tests::hub::TestHub;
use clawfed_tests::kube_env::TestCluster;
use clawfed_tests::kube_spoke::TwoClusters;
use clawfed_tests::live_pods::{Liveness, PodWatch};
use clawfed_tests::procs::clawfed;
use clawfed_tests::until;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);

/// An Agent of `ns` placed by the pipeline (no pinned cluster).
async fn unpinned_agent(rest: &HubClient, ns: &str, any_cluster: &str) -> Result<Agent> {
    let agent = rest.new_agent(ns, any_cluster, "dedicated-codex").await?;
    rest.edit_spec(ns, &agent.name, |s| s.placement = Default::default())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_keeps_new_revisions_off_and_drain_moves_each_agent_exclusively() -> Result<()> {
    let mut w = TwoClusters::start(false).await?;
    let mut cleanup = Cleanup::default();
    let result = drain_scenario(
        &w.hub,
        &w.rest,
        &w.control,
        [&w.execs[0], &w.execs[1]],
        &w.ns,
        &w.names[0],
        &w.names[1],
        &mut cleanup,
    )
    .await;
    w.stop().await;
    result?;
    cleanup.run().await
}

#[allow(clippy::too_many_arguments)]
async fn drain_scenario(
    hub: &TestHub,
    rest: &HubClient,
    control: &TestCluster,
    execs: [&TestCluster; 2],
    ns: &Namespace,
    a_name: &str,
    b_name: &str,
    cleanup: &mut Cleanup,
) -> Result<()> {
    // Cordoned exec-b takes nothing: three Agents land on exec-a.
    let cordoned: Cluster = rest
        .post(&format!("/clusters/{b_name}/cordon"), &())
        .await?;
    ensure!(cordoned.cordoned_at.is_some(), "{cordoned:?}");
    let mut agents = Vec::new();
    for _ in 0..3 {
        let agent = unpinned_agent(rest, &ns.name, a_name).await?;
        cleanup.track(&control.admin(), ns, &agent.name).await?;
        rest.deploy_current(&ns.name, &agent.name).await?;
        agents.push(agent.name);
    }
    for agent in &agents {
        let r1 = rest
            .wait_phase(&ns.name, agent, 1, RevisionPhase::Active)
            .await?;
        ensure!(
            r1.resolved_cluster.as_deref() == Some(a_name),
            "cordoned {b_name} took {agent}: {r1:?}"
        );
    }
    // A pinned Agent cannot be deployed onto a cordoned cluster.
    let pinned = rest.new_agent(&ns.name, b_name, "dedicated-codex").await?;
    match rest.deploy_current(&ns.name, &pinned.name).await {
        Err(ClientError::Api {
            status, message, ..
        }) => ensure!(
            status == 409 && message.contains("is cordoned"),
            "{status}: {message}"
        ),
        other => anyhow::bail!("deploy onto cordoned {b_name}: {other:?}"),
    }
    let listed = clawfed(&hub.rest, &hub.root_token, &["clusters", "list"])?;
    ensure!(listed.contains("online,cordoned"), "{listed}");
    rest.post::<_, Cluster>(&format!("/clusters/{b_name}/uncordon"), &())
        .await?;

    // Drain exec-a two at a time while watchers on both clusters count
    // each Agent's live Harness Pods.
    let watch = PodWatch::start(
        execs.iter().map(|c| c.admin()).collect(),
        &ns.data_plane_namespace,
        Liveness::Running,
    );
    let bad = rest
        .call::<serde_json::Value>(
            reqwest::Method::POST,
            &format!("/clusters/{a_name}/drain"),
            Some(json!({ "parallelism": 0 })),
        )
        .await;
    ensure!(
        matches!(&bad, Err(e) if e.to_string().contains("parallelism")),
        "{bad:?}"
    );
    let started: Cluster = rest
        .post(
            &format!("/clusters/{a_name}/drain"),
            &json!({ "parallelism": 2 }),
        )
        .await?;
    let progress = started
        .drain
        .as_ref()
        .and_then(|d| d.progress.as_ref())
        .context("the drain's answer carries its progress")?;
    ensure!(progress.agents.len() == 3, "{progress:?}");
    // The CLI joins the running drain (same start, same parallelism) and
    // follows it to its end.
    let cli_drain = {
        let args = ["clusters", "drain", a_name, "--parallelism", "2", "--wait"].map(String::from);
        let (rest_url, token) = (hub.rest.clone(), hub.root_token.clone());
        tokio::task::spawn_blocking(move || clawfed(&rest_url, &token, &args))
    };
    let most_moving = Arc::new(Mutex::new(0));
    let drained = until(WAIT * 2, "the drain of exec-a ends", || async {
        let c = rest.cluster(a_name).await?;
        let d = c.drain.clone().context("drain")?;
        let p = d.progress.clone().context("progress")?;
        let mut most = most_moving.lock().expect("most");
        *most = (*most).max(p.moving);
        Ok(d.finished_at.is_some().then_some(p))
    })
    .await?;
    let most_moving = *most_moving.lock().expect("most");
    let pods = watch.stop().await;
    ensure!(
        drained.moved == 3 && drained.failed == 0 && drained.blocked == 0,
        "{drained:?}"
    );
    ensure!(
        most_moving <= 2,
        "{most_moving} moved at once with parallelism 2"
    );
    for a in &drained.agents {
        ensure!(
            a.state == DrainAgentState::Moved
                && a.to_cluster.as_deref() == Some(b_name)
                && a.workspace == Some(WorkspaceOrigin::Fresh)
                && (a.from_revision, a.to_revision) == (Some(1), Some(2)),
            "{a:?}"
        );
    }
    for agent in &agents {
        let r2 = rest
            .wait_phase(&ns.name, agent, 2, RevisionPhase::Active)
            .await?;
        ensure!(r2.moved_from.as_deref() == Some(a_name), "{r2:?}");
        rest.wait_phase(&ns.name, agent, 1, RevisionPhase::Retired)
            .await?;
    }
    let watched: BTreeSet<&String> = pods.most.keys().collect();
    ensure!(
        watched.len() == 3,
        "the watchers saw Harness Pods of {watched:?}"
    );
    for (agent, most) in &pods.most {
        ensure!(*most == 1, "{agent} had {most} live Harness Pods at once");
    }
    let on_b = pods.agents_on(1);
    ensure!(on_b.len() == 3, "live on exec-b: {on_b:?}");

    // Still cordoned after the drain: a new revision goes to exec-b, and
    // the CLI shows the finished drain Agent by Agent.
    rest.deploy_current(&ns.name, &agents[0]).await?;
    let r3 = rest
        .wait_phase(&ns.name, &agents[0], 3, RevisionPhase::Active)
        .await?;
    ensure!(r3.resolved_cluster.as_deref() == Some(b_name), "{r3:?}");
    let shown = cli_drain.await??;
    ensure!(
        shown.contains(&format!("cluster {a_name}: "))
            && agents.iter().all(|a| shown.contains(a.as_str()))
            && shown.contains("fresh"),
        "{shown}"
    );
    let a = rest.cluster(a_name).await?;
    ensure!(a.cordoned_at.is_some(), "a drained cluster stays cordoned");
    Ok(())
}
