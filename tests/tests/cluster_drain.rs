//! Issue 33, cordon and drain, on the real clusters: a hub with the
//! pipeline (Gateways in control) and two real spokes, on exec-a and
//! exec-b. Cordoning keeps new revisions off a cluster; draining moves
//! each Agent away, never running two Harnesses of one Agent at once, as
//! watchers of both clusters' Pods see it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use clawfed_hub::client::{ClientError, HubClient};
use clawfed_hub::gateway::Gateways;
use clawfed_hub::model::{
    Agent, Cluster, DrainAgentState, Namespace, RevisionPhase, WorkspaceOrigin,
};
use clawfed_proto::labels;
use clawfed_spoke::config::SpokeConfig;
use clawfed_spoke::exec::Executor;
use clawfed_tests::api::{HubTestExt, short_id};
use clawfed_tests::cleanup::Cleanup;
use clawfed_tests::control_env;
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::kube_env::{self, TestCluster};
use clawfed_tests::procs::clawfed;
use clawfed_tests::{spoke_env, until};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(90);

/// A real spoke (link and Kubernetes executor) in this process.
struct Spoke {
    shutdown: CancellationToken,
    task: Option<JoinHandle<Result<(), clawfed_spoke::link::LinkError>>>,
    _dir: tempfile::TempDir,
}

impl Spoke {
    async fn start(
        hub: &TestHub,
        rest: &HubClient,
        name: &str,
        exec: &TestCluster,
    ) -> Result<Self> {
        let token = rest.bootstrap_token(name).await?;
        let client = spoke_env::spoke_client(exec).await?;
        let (reports_tx, reports_rx) = tokio::sync::mpsc::channel(1024);
        let executor = Arc::new(Executor::new(client, SpokeConfig::default(), reports_tx));
        let dir = tempfile::tempdir()?;
        let link = clawfed_tests::link::kube_link(hub, name, token, dir.path(), executor)?;
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(link.run(reports_rx, shutdown.clone()));
        rest.wait_online(name, WAIT).await?;
        Ok(Self {
            shutdown,
            task: Some(task),
            _dir: dir,
        })
    }

    async fn stop(&mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }
}

/// Live Harness Pods per Agent across both execution clusters, kept by a
/// watch of each; the most ever seen at once is the invariant.
#[derive(Default)]
struct LivePods {
    /// (cluster, Pod name) -> Agent, for Pods not terminating.
    live: BTreeMap<(usize, String), String>,
    /// The most live Pods one Agent had at once, and when it broke.
    most: BTreeMap<String, usize>,
}

impl LivePods {
    fn seen(&mut self, cluster: usize, pod: &Pod) {
        let key = (cluster, pod.name_any());
        let terminal = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        match pod.labels().get(labels::AGENT) {
            Some(agent) if pod.metadata.deletion_timestamp.is_none() && !terminal => {
                self.live.insert(key, agent.clone());
                let n = self.live.values().filter(|a| *a == agent).count();
                let most = self.most.entry(agent.clone()).or_default();
                *most = (*most).max(n);
            }
            _ => {
                self.live.remove(&key);
            }
        }
    }
}

/// Watches the Pods of data-plane namespace `dpns` on each cluster into
/// `pods` until `stop`.
fn watch_pods(
    clusters: Vec<Client>,
    dpns: &str,
    pods: Arc<Mutex<LivePods>>,
    stop: CancellationToken,
) -> Vec<JoinHandle<()>> {
    clusters
        .into_iter()
        .enumerate()
        .map(|(i, client)| {
            let api = Api::<Pod>::namespaced(client, dpns);
            let pods = pods.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut events = watcher(api, watcher::Config::default()).boxed();
                loop {
                    let event = tokio::select! {
                        _ = stop.cancelled() => return,
                        e = events.next() => e,
                    };
                    match event {
                        Some(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p))) => {
                            pods.lock().expect("pods").seen(i, &p)
                        }
                        Some(Ok(watcher::Event::Delete(p))) => {
                            pods.lock().expect("pods").live.remove(&(i, p.name_any()));
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => eprintln!("pod watch on cluster {i}: {e}"),
                        None => return,
                    }
                }
            })
        })
        .collect()
}

/// An Agent of `ns` placed by the pipeline (no pinned cluster).
async fn unpinned_agent(rest: &HubClient, ns: &str, any_cluster: &str) -> Result<Agent> {
    let agent = rest.new_agent(ns, any_cluster, "dedicated-codex").await?;
    rest.edit_spec(ns, &agent.name, |s| s.placement = Default::default())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_keeps_new_revisions_off_and_drain_moves_each_agent_exclusively() -> Result<()> {
    clawfed_tests::link::init_test_logging();
    let control = control_env::control().await?;
    let exec_a = kube_env::cluster("exec-a").await?;
    let exec_b = kube_env::cluster("exec-b").await?;
    let gateways = Gateways::new(
        control_env::hub_client(&control).await?,
        control_env::gateway_config(),
    )?;
    let mut hub = TestHub::start_with_gateway_runtime(
        Backend::Postgres,
        |c| {
            c.pipeline.enabled = true;
            c.pipeline.ready_deadline_seconds = 60;
            c.worker.max_attempts = 8;
        },
        clawfed_hub::worker::Handlers::builtin(),
        Some(gateways),
        |g| g,
    )
    .await;
    let rest = HubClient::new(&hub.rest, Some(hub.root_token.clone()))?;
    let suffix = &short_id()[..6];
    let (a_name, b_name) = (format!("exec-a-{suffix}"), format!("exec-b-{suffix}"));
    let mut spoke_a = Spoke::start(&hub, &rest, &a_name, &exec_a).await?;
    let mut spoke_b = Spoke::start(&hub, &rest, &b_name, &exec_b).await?;
    let ns = rest.new_tenant().await?;
    let mut cleanup = Cleanup::default();
    let result = drain_scenario(
        &hub,
        &rest,
        &control,
        [&exec_a, &exec_b],
        &ns,
        &a_name,
        &b_name,
        &mut cleanup,
    )
    .await;
    spoke_a.stop().await;
    spoke_b.stop().await;
    hub.stop().await;
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(exec_b.admin())
        .delete(&ns.data_plane_namespace, &DeleteParams::background())
        .await;
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
    let pods = Arc::new(Mutex::new(LivePods::default()));
    let stop_watch = CancellationToken::new();
    let watchers = watch_pods(
        execs.iter().map(|c| c.admin()).collect(),
        &ns.data_plane_namespace,
        pods.clone(),
        stop_watch.clone(),
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
    stop_watch.cancel();
    for w in watchers {
        let _ = w.await;
    }
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
    // The watch tasks ended: this is the last reader.
    let pods = std::mem::take(&mut *pods.lock().expect("pods"));
    let watched: BTreeSet<&String> = pods.most.keys().collect();
    ensure!(
        watched.len() == 3,
        "the watchers saw Harness Pods of {watched:?}"
    );
    for (agent, most) in &pods.most {
        ensure!(*most == 1, "{agent} had {most} live Harness Pods at once");
    }
    let on_b: BTreeSet<&String> = pods
        .live
        .iter()
        .filter(|((c, _), _)| *c == 1)
        .map(|(_, a)| a)
        .collect();
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
