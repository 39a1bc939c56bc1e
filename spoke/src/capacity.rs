//! What the execution cluster can still take, for the hub's placement: the
//! Ready, schedulable Nodes the installation's node selector selects (the
//! hub sends it in Welcome), their allocatable CPU and memory, and that
//! minus the requests of the non-terminated Pods bound to them.
//!
//! Two `kube::runtime::watcher`s (Nodes; Pods bound to a node and not
//! terminated, by field selector) keep a [`Tally`] of only what the sum
//! needs, never whole objects. A change marks the tally dirty; the report
//! is recomputed after [`DEBOUNCE`] of quiet (a rollout moves many Pods at
//! once) and published only when it differs. No periodic LIST: the
//! watchers list only to start or after their watch expired.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use clawfed_proto::capacity::{Capacity, Resources};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// How long the tally must be quiet before a report is recomputed.
pub const DEBOUNCE: Duration = Duration::from_millis(500);

/// Pods bound to a node that are not terminated: what the scheduler
/// counts against a node's allocatable.
const BOUND_LIVE_PODS: &str = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed";

/// What a Node contributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub labels: BTreeMap<String, String>,
    pub allocatable: Resources,
    /// Ready=True and not cordoned (`spec.unschedulable`).
    pub schedulable: bool,
}

impl NodeFacts {
    /// What counts of `node` (an unparsable allocatable counts as none:
    /// the node cannot be relied on).
    pub fn of(node: &Node) -> NodeFacts {
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let cordoned = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        let allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| Resources::from_list(|k| a.get(k).map(|q| q.0.as_str())).ok())
            .unwrap_or_default();
        NodeFacts {
            labels: node.labels().clone(),
            allocatable,
            schedulable: ready && !cordoned,
        }
    }
}

/// What a bound Pod takes of its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    pub node: String,
    pub requests: Resources,
}

impl PodFacts {
    /// `pod`'s node and effective requests as the scheduler counts them:
    /// the Pod-level requests when set, else the larger of the sum of its
    /// containers (with restartable init containers, the sidecars) and
    /// its largest init container; plus the Pod overhead. `None` for an
    /// unbound or terminated Pod.
    pub fn of(pod: &Pod) -> Option<PodFacts> {
        let spec = pod.spec.as_ref()?;
        let node = spec.node_name.clone().filter(|n| !n.is_empty())?;
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            return None;
        }
        let list = |r: Option<&k8s_openapi::api::core::v1::ResourceRequirements>| {
            r.and_then(|r| r.requests.as_ref())
                .and_then(|m| Resources::from_list(|k| m.get(k).map(|q| q.0.as_str())).ok())
                .unwrap_or_default()
        };
        let mut sum = Resources::default();
        for c in &spec.containers {
            sum = sum.plus(list(c.resources.as_ref()));
        }
        let mut init_max = Resources::default();
        for c in spec.init_containers.iter().flatten() {
            let r = list(c.resources.as_ref());
            if c.restart_policy.as_deref() == Some("Always") {
                sum = sum.plus(r);
            } else {
                init_max = Resources {
                    cpu_millis: init_max.cpu_millis.max(r.cpu_millis),
                    memory_bytes: init_max.memory_bytes.max(r.memory_bytes),
                };
            }
        }
        let mut requests = Resources {
            cpu_millis: sum.cpu_millis.max(init_max.cpu_millis),
            memory_bytes: sum.memory_bytes.max(init_max.memory_bytes),
        };
        // Pod-level resources (when set) replace the per-container sum.
        let pod_level = list(spec.resources.as_ref());
        if pod_level.cpu_millis > 0 {
            requests.cpu_millis = pod_level.cpu_millis;
        }
        if pod_level.memory_bytes > 0 {
            requests.memory_bytes = pod_level.memory_bytes;
        }
        if let Some(overhead) = &spec.overhead {
            let o =
                Resources::from_list(|k| overhead.get(k).map(|q| q.0.as_str())).unwrap_or_default();
            requests = requests.plus(o);
        }
        Some(PodFacts { node, requests })
    }
}

/// The Nodes and bound Pods the watchers saw, by name and by `ns/name`.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub nodes: HashMap<String, NodeFacts>,
    pub pods: HashMap<String, PodFacts>,
}

impl Tally {
    /// The capacity of the schedulable nodes whose labels carry every
    /// `selector` pair.
    pub fn capacity(&self, selector: &BTreeMap<String, String>) -> Capacity {
        let selected: HashMap<&str, &NodeFacts> = self
            .nodes
            .iter()
            .filter(|(_, n)| {
                n.schedulable && selector.iter().all(|(k, v)| n.labels.get(k) == Some(v))
            })
            .map(|(name, n)| (name.as_str(), n))
            .collect();
        // Used per node, so one over-committed node does not eat into
        // another's free capacity.
        let mut used: HashMap<&str, Resources> = HashMap::new();
        for p in self.pods.values() {
            if selected.contains_key(p.node.as_str()) {
                let e = used.entry(p.node.as_str()).or_default();
                *e = e.plus(p.requests);
            }
        }
        let (mut allocatable, mut free) = (Resources::default(), Resources::default());
        for (name, n) in &selected {
            allocatable = allocatable.plus(n.allocatable);
            free = free.plus(
                n.allocatable
                    .minus(used.get(name).copied().unwrap_or_default()),
            );
        }
        Capacity {
            nodes: selected.len() as u32,
            allocatable,
            free,
        }
    }
}

/// The link's side of the capacity watch: it hands over the node selector
/// from each Welcome and takes the current report.
#[derive(Debug, Clone)]
pub struct CapacityWatch {
    selector: watch::Sender<Option<BTreeMap<String, String>>>,
    report: watch::Receiver<Option<Capacity>>,
}

impl CapacityWatch {
    /// The node selector the hub sent (Welcome): reports count its nodes.
    pub fn set_selector(&self, selector: BTreeMap<String, String>) {
        self.selector.send_if_modified(|current| {
            let changed = current.as_ref() != Some(&selector);
            *current = Some(selector);
            changed
        });
    }

    /// The latest report (`None` until the watchers synced and a selector
    /// came), and changes to it.
    pub fn reports(&self) -> watch::Receiver<Option<Capacity>> {
        self.report.clone()
    }
}

/// Starts watching Nodes and bound Pods with `client` until `shutdown`.
pub fn spawn(client: Client, shutdown: CancellationToken) -> CapacityWatch {
    let (selector_tx, selector_rx) = watch::channel(None);
    let (report_tx, report_rx) = watch::channel(None);
    tokio::spawn(
        run(client, selector_rx, report_tx, shutdown)
            .instrument(tracing::info_span!("capacity.watch")),
    );
    CapacityWatch {
        selector: selector_tx,
        report: report_rx,
    }
}

/// One watcher's view while it (re)lists: the objects of the list in
/// progress replace the old ones when it is done.
struct Relist<T> {
    pending: Option<HashMap<String, T>>,
    synced: bool,
}

impl<T> Relist<T> {
    fn new() -> Self {
        Self {
            pending: None,
            synced: false,
        }
    }

    /// Applies `event` (the key and facts of its object) to `map`; true
    /// when `map` changed.
    fn apply<K>(
        &mut self,
        map: &mut HashMap<String, T>,
        event: watcher::Event<K>,
        facts: impl Fn(&K) -> Option<(String, T)>,
        key: impl Fn(&K) -> String,
    ) -> bool {
        match event {
            watcher::Event::Init => {
                self.pending = Some(HashMap::new());
                false
            }
            watcher::Event::InitApply(o) => {
                if let (Some(p), Some((k, v))) = (self.pending.as_mut(), facts(&o)) {
                    p.insert(k, v);
                }
                false
            }
            watcher::Event::InitDone => {
                if let Some(p) = self.pending.take() {
                    *map = p;
                }
                self.synced = true;
                true
            }
            watcher::Event::Apply(o) => {
                match facts(&o) {
                    Some((k, v)) => map.insert(k, v),
                    None => map.remove(&key(&o)),
                };
                true
            }
            watcher::Event::Delete(o) => map.remove(&key(&o)).is_some(),
        }
    }
}

async fn run(
    client: Client,
    mut selector: watch::Receiver<Option<BTreeMap<String, String>>>,
    report: watch::Sender<Option<Capacity>>,
    shutdown: CancellationToken,
) {
    let nodes_api: Api<Node> = Api::all(client.clone());
    let pods_api: Api<Pod> = Api::all(client);
    let mut nodes = std::pin::pin!(
        watcher(nodes_api, watcher::Config::default().any_semantic()).default_backoff()
    );
    let pod_cfg = watcher::Config::default()
        .fields(BOUND_LIVE_PODS)
        .any_semantic();
    let mut pods = std::pin::pin!(watcher(pods_api, pod_cfg).default_backoff());
    let mut tally = Tally::default();
    let (mut node_list, mut pod_list) = (Relist::new(), Relist::new());
    let mut dirty = false;
    let quiet = tokio::time::sleep(DEBOUNCE);
    tokio::pin!(quiet);
    let pod_key = |p: &Pod| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any());
    loop {
        let changed = tokio::select! {
            () = shutdown.cancelled() => return,
            event = nodes.next() => match event {
                Some(Ok(e)) => node_list.apply(
                    &mut tally.nodes,
                    e,
                    |n: &Node| Some((n.name_any(), NodeFacts::of(n))),
                    |n: &Node| n.name_any(),
                ),
                Some(Err(error)) => {
                    tracing::warn!(%error, "capacity.node_watch_failed");
                    false
                }
                None => return,
            },
            event = pods.next() => match event {
                Some(Ok(e)) => pod_list.apply(
                    &mut tally.pods,
                    e,
                    |p: &Pod| PodFacts::of(p).map(|f| (pod_key(p), f)),
                    pod_key,
                ),
                Some(Err(error)) => {
                    tracing::warn!(%error, "capacity.pod_watch_failed");
                    false
                }
                None => return,
            },
            r = selector.changed() => {
                if r.is_err() {
                    return;
                }
                true
            }
            () = &mut quiet, if dirty => {
                dirty = false;
                let Some(sel) = selector.borrow().clone() else { continue };
                if !(node_list.synced && pod_list.synced) {
                    continue;
                }
                let now = tally.capacity(&sel);
                report.send_if_modified(|current| {
                    let differs = *current != Some(now);
                    if differs {
                        tracing::debug!(nodes = now.nodes, free = %now.free, "capacity.changed");
                        *current = Some(now);
                    }
                    differs
                });
                false
            }
        };
        if changed {
            dirty = true;
            quiet.as_mut().reset(tokio::time::Instant::now() + DEBOUNCE);
        }
    }
}

#[cfg(test)]
mod tests;
