//! Issue 33, failover with fencing, on the real clusters: a hub with the
//! pipeline (Gateways in control), a real spoke on exec-a reaching the hub
//! through a proxy the test partitions, and one on exec-b. Two Agents with
//! `failover.afterSeconds: 10` prefer exec-a. Watchers of both clusters'
//! Pods count each Agent's Harness Pods until they are gone (terminating
//! ones included): never two at once.
//!
//! 0. A cluster merely slow (cut off for less than the period): nothing
//!    is fenced or moved.
//! 1. A short partition: exec-a's spoke fences the Agents itself when its
//!    lease lapses, says so when it reconnects, and the hub deploys them
//!    again; exec-a, first in their preference and online, takes them back
//!    with their workspace.
//! 2. A partition that lasts: the hub waits out the fence period and its
//!    margin, then moves the Agents to exec-b with a fresh workspace,
//!    counting the fenced predecessors as stopped. When the partition
//!    heals, exec-a's spoke retires what it fenced.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use clawfed_hub::client::HubClient;
use clawfed_hub::model::{AgentRevision, Failover, Namespace, RevisionPhase};
use clawfed_tests::api::HubTestExt;
use clawfed_tests::cleanup::Cleanup;
use clawfed_tests::hub::TestHub;
use clawfed_tests::kube_env::TestCluster;
use clawfed_tests::kube_spoke::{KubeSpoke, TwoClusters};
use clawfed_tests::live_pods::{Liveness, PodWatch};
use clawfed_tests::procs::clawfed;
use clawfed_tests::until;

const WAIT: Duration = Duration::from_secs(90);
const AFTER_SECONDS: u32 = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_cluster_fences_its_agents_before_the_hub_moves_them() -> Result<()> {
    let mut two = TwoClusters::start(true).await?;
    let mut cleanup = Cleanup::default();
    let world = World {
        hub: &two.hub,
        rest: &two.rest,
        ns: &two.ns,
        a_name: &two.names[0],
        b_name: &two.names[1],
        spoke_a: &two.spokes[0],
    };
    let result = scenario(
        &world,
        &two.control,
        [&two.execs[0], &two.execs[1]],
        &mut cleanup,
    )
    .await;
    two.stop().await;
    result?;
    cleanup.run().await
}

struct World<'a> {
    hub: &'a TestHub,
    rest: &'a HubClient,
    ns: &'a Namespace,
    a_name: &'a str,
    b_name: &'a str,
    spoke_a: &'a KubeSpoke,
}

impl World<'_> {
    /// Waits until revision `number` of every Agent is active, and returns them.
    async fn active(&self, agents: &[String], number: i64) -> Result<Vec<AgentRevision>> {
        let mut out = Vec::new();
        for agent in agents {
            out.push(
                self.rest
                    .wait_phase(&self.ns.name, agent, number, RevisionPhase::Active)
                    .await?,
            );
        }
        Ok(out)
    }

    /// Waits until revision `number` of every Agent is retired.
    async fn retired(&self, agents: &[String], number: i64) -> Result<()> {
        for agent in agents {
            self.rest
                .wait_phase(&self.ns.name, agent, number, RevisionPhase::Retired)
                .await?;
        }
        Ok(())
    }
}

async fn scenario(
    w: &World<'_>,
    control: &TestCluster,
    execs: [&TestCluster; 2],
    cleanup: &mut Cleanup,
) -> Result<()> {
    let (rest, ns) = (w.rest, w.ns);
    // Two Agents preferring exec-a, with failover; a pinned one is refused.
    let mut agents = Vec::new();
    for _ in 0..2 {
        let agent = rest
            .new_agent(&ns.name, w.a_name, "dedicated-codex")
            .await?;
        cleanup.track(&control.admin(), ns, &agent.name).await?;
        let refused = rest
            .edit_spec(&ns.name, &agent.name, |s| {
                s.failover = Some(Failover {
                    after_seconds: AFTER_SECONDS,
                })
            })
            .await;
        ensure!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains("spec.failover")),
            "failover on a pinned Agent: {refused:?}"
        );
        let (a, b) = (w.a_name.to_owned(), w.b_name.to_owned());
        rest.edit_spec(&ns.name, &agent.name, move |s| {
            s.placement = Default::default();
            s.placement.clusters = vec![a, b];
            s.failover = Some(Failover {
                after_seconds: AFTER_SECONDS,
            });
        })
        .await?;
        rest.deploy_current(&ns.name, &agent.name).await?;
        agents.push(agent.name);
    }
    for r in w.active(&agents, 1).await? {
        ensure!(r.resolved_cluster.as_deref() == Some(w.a_name), "{r:?}");
    }
    let watch = PodWatch::start(
        execs.iter().map(|c| c.admin()).collect(),
        &ns.data_plane_namespace,
        Liveness::UntilGone,
    );
    until(WAIT, "the watchers see both Agents on exec-a", || async {
        Ok((watch.now().agents_on(0) == sorted(&agents)).then_some(()))
    })
    .await?;

    // 0. A cluster merely slow to answer (cut off for less than F, then
    // back): its spoke renews in time, so nothing is fenced or moved, as
    // seen well past the moment the lease would have lapsed.
    w.spoke_a.partition(true);
    tokio::time::sleep(Duration::from_secs(4)).await;
    w.spoke_a.partition(false);
    tokio::time::sleep(Duration::from_secs(u64::from(AFTER_SECONDS) + 4)).await;
    ensure!(
        watch.now().agents_on(0) == sorted(&agents),
        "a 4 s partition fenced: {:?}",
        watch.now().live
    );
    for agent in &agents {
        let a = rest.agent(&ns.name, agent).await?;
        ensure!(
            a.latest_revision == Some(1),
            "a 4 s partition moved {agent}"
        );
    }

    // 1. A short partition: the spoke fences, reconnects and reports it;
    // the hub deploys the Agents again and exec-a takes them back.
    let cut = Instant::now();
    w.spoke_a.partition(true);
    until(WAIT, "exec-a's spoke fences both Agents", || async {
        Ok(watch.now().agents_on(0).is_empty().then_some(()))
    })
    .await?;
    let fenced_after = cut.elapsed();
    w.spoke_a.partition(false);
    let back = w.active(&agents, 2).await?;
    for r in &back {
        ensure!(r.moved_from.as_deref() == Some(w.a_name), "{r:?}");
    }
    w.retired(&agents, 1).await?;
    let moved_back = back
        .iter()
        .filter(|r| r.resolved_cluster.as_deref() == Some(w.a_name))
        .count();

    // 2. A partition that lasts: fenced on exec-a, moved to exec-b once
    // the hub's period has passed.
    until(WAIT, "both Agents run on exec-a's side again", || async {
        let p = watch.now();
        Ok((p.agents_on(0).len() + p.agents_on(1).len() == 2).then_some(()))
    })
    .await?;
    let on_a: Vec<String> = back
        .iter()
        .filter(|r| r.resolved_cluster.as_deref() == Some(w.a_name))
        .map(|r| r.agent.clone())
        .collect();
    let cut = Instant::now();
    w.spoke_a.partition(true);
    let moved = match on_a.is_empty() {
        true => Vec::new(),
        false => w.active(&on_a, 3).await?,
    };
    let moved_after = cut.elapsed();
    for r in &moved {
        ensure!(
            r.moved_from.as_deref() == Some(w.a_name)
                && r.resolved_cluster.as_deref() == Some(w.b_name),
            "{r:?}"
        );
    }
    ensure!(watch.now().agents_on(0).is_empty(), "fenced on exec-a");
    let listed = clawfed(
        &w.hub.rest,
        &w.hub.root_token,
        &["revisions", "list", "-n", &ns.name, "-a", &agents[0]],
    )?;
    ensure!(listed.contains("moved from"), "{listed}");
    // The partition heals: exec-a's spoke retires what it fenced.
    w.spoke_a.partition(false);
    w.retired(&on_a, 2).await?;
    let pods = watch.stop().await;
    ensure!(pods.most.len() == 2, "watched {:?}", pods.most);
    for (agent, most) in &pods.most {
        ensure!(
            *most == 1,
            "{agent} had {most} Harness Pods at once (terminating ones counted)"
        );
    }
    eprintln!(
        "failover: fenced {fenced_after:?} after the cut; {moved_back} of 2 moved back to exec-a; \
         {} moved to exec-b {moved_after:?} after the second cut (F = {AFTER_SECONDS} s, \
         hub period {:?})",
        moved.len(),
        clawfed_proto::failover::periods(AFTER_SECONDS).replace_after
    );
    ensure!(
        !moved.is_empty(),
        "the second partition moved nothing: {back:?}"
    );
    Ok(())
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v
}
