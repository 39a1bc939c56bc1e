//! Each Agent's live Harness Pods across execution clusters, kept by a
//! watch of each cluster: the most one Agent ever had at once is the
//! "never runs twice" invariant of drains and failovers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use clawfed_proto::labels;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What counts as live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Liveness {
    /// Not terminating and not finished.
    #[default]
    Running,
    /// Until the Pod is gone (a terminating Pod's process may still run):
    /// the strict count failover is held to.
    UntilGone,
}

/// The live Pods seen so far.
#[derive(Debug, Default)]
pub struct LivePods {
    pub liveness: Liveness,
    /// (cluster index, Pod name) -> Agent, for live Pods.
    pub live: BTreeMap<(usize, String), String>,
    /// The most live Pods each Agent had at once.
    pub most: BTreeMap<String, usize>,
}

impl LivePods {
    /// Counting live Pods by `liveness`.
    pub fn new(liveness: Liveness) -> Self {
        Self {
            liveness,
            ..Default::default()
        }
    }

    /// Pod `pod` of cluster `cluster` as a watch event shows it.
    pub fn seen(&mut self, cluster: usize, pod: &Pod) {
        let key = (cluster, pod.name_any());
        let terminal = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let live = !terminal && (self.liveness == Liveness::UntilGone || !terminating);
        match pod.labels().get(labels::AGENT) {
            Some(agent) if live => {
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

    /// Agents with a live Pod on cluster `cluster`.
    pub fn agents_on(&self, cluster: usize) -> Vec<String> {
        let mut out: Vec<String> = self
            .live
            .iter()
            .filter(|((c, _), _)| *c == cluster)
            .map(|(_, a)| a.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// Watches of the Pods of one data-plane namespace on each cluster (its
/// index in the list is its number), kept in a [`LivePods`].
pub struct PodWatch {
    pods: Arc<Mutex<LivePods>>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl PodWatch {
    /// Starts watching `dpns` on each of `clusters`, counting by `liveness`.
    pub fn start(clusters: Vec<Client>, dpns: &str, liveness: Liveness) -> Self {
        let pods = Arc::new(Mutex::new(LivePods::new(liveness)));
        let stop = CancellationToken::new();
        let tasks = clusters
            .into_iter()
            .enumerate()
            .map(|(i, client)| {
                tokio::spawn(watch_one(
                    i,
                    Api::<Pod>::namespaced(client, dpns),
                    pods.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        Self { pods, stop, tasks }
    }

    /// What the watches have seen so far.
    pub fn now(&self) -> std::sync::MutexGuard<'_, LivePods> {
        self.pods.lock().expect("pods")
    }

    /// Ends the watches; what they saw.
    pub async fn stop(self) -> LivePods {
        self.stop.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
        std::mem::take(&mut *self.pods.lock().expect("pods"))
    }
}

async fn watch_one(i: usize, api: Api<Pod>, pods: Arc<Mutex<LivePods>>, stop: CancellationToken) {
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
}
