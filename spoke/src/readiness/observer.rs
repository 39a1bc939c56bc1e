//! The watch-driven readiness observer.
//!
//! One `kube::runtime::watcher` per data-plane namespace streams the Harness
//! Pods (`clawfed.io/workload-role=harness`); there is no periodic LIST (the
//! watcher lists only to start or after its watch expired). The observer keeps
//! a small index of [`PodObservation`]s grouped by Agent and revision, and on
//! every change re-evaluates the contract for the revisions it tracks and
//! sends a `Report` with a `ReadinessObservation` to the hub whenever a
//! revision's observation changes. Verdicts are computed only once the
//! watcher's initial list is complete.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use clawfed_proto::labels;
use clawfed_proto::link::v1::{ReadinessObservation, Report, report};
use clawfed_proto::readiness::{
    HARNESS_ROLE, PodListObservation, PodObservation, ReadinessQuery, evaluate,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::observe;

/// Agent and revision of a Pod group.
type GroupKey = (String, String);

/// A revision whose readiness is reported.
#[derive(Debug, Clone)]
struct Tracked {
    query: ReadinessQuery,
    target: String,
    generation: i64,
    revision_id: String,
    last: Option<ReadinessObservation>,
}

#[derive(Debug)]
struct NsState {
    synced: bool,
    pods: HashMap<String, PodObservation>,
    groups: HashMap<GroupKey, BTreeSet<String>>,
    init: Option<HashMap<String, PodObservation>>,
    tracked: HashMap<GroupKey, Tracked>,
    stop: CancellationToken,
}

#[derive(Debug, Default)]
struct State {
    namespaces: HashMap<String, NsState>,
}

struct Inner {
    client: Client,
    reports: mpsc::Sender<Report>,
    cancel: CancellationToken,
    state: Mutex<State>,
}

/// The observer. Cheap to clone.
#[derive(Clone)]
pub struct Observer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").finish_non_exhaustive()
    }
}

fn group_of(p: &PodObservation) -> GroupKey {
    let get = |k: &str| p.labels.get(k).cloned().unwrap_or_default();
    (get(labels::AGENT), get(labels::REVISION))
}

impl NsState {
    fn new(stop: CancellationToken) -> Self {
        NsState {
            synced: false,
            pods: HashMap::new(),
            groups: HashMap::new(),
            init: None,
            tracked: HashMap::new(),
            stop,
        }
    }

    /// Upserts a Pod; returns the groups it touched.
    fn upsert(&mut self, p: PodObservation) -> Vec<GroupKey> {
        let name = p.name.clone().unwrap_or_default();
        let key = group_of(&p);
        let mut touched = vec![key.clone()];
        if let Some(old) = self.pods.insert(name.clone(), p) {
            let old_key = group_of(&old);
            if old_key != key {
                if let Some(g) = self.groups.get_mut(&old_key) {
                    g.remove(&name);
                }
                touched.push(old_key);
            }
        }
        self.groups.entry(key).or_default().insert(name);
        touched
    }

    fn remove(&mut self, name: &str) -> Vec<GroupKey> {
        let Some(old) = self.pods.remove(name) else {
            return Vec::new();
        };
        let key = group_of(&old);
        if let Some(g) = self.groups.get_mut(&key) {
            g.remove(name);
            if g.is_empty() {
                self.groups.remove(&key);
            }
        }
        vec![key]
    }

    fn replace_all(&mut self, pods: HashMap<String, PodObservation>) {
        self.pods.clear();
        self.groups.clear();
        for (_, p) in pods {
            self.upsert(p);
        }
        self.synced = true;
    }

    /// Re-evaluates the tracked revisions in `keys`; returns reports for those
    /// whose observation changed.
    fn evaluate(
        &mut self,
        keys: impl IntoIterator<Item = GroupKey>,
        cancelled: bool,
    ) -> Vec<Report> {
        if !self.synced {
            return Vec::new();
        }
        let mut out = Vec::new();
        for key in keys {
            let Some(t) = self.tracked.get_mut(&key) else {
                continue;
            };
            let items = self
                .groups
                .get(&key)
                .into_iter()
                .flatten()
                .filter_map(|n| self.pods.get(n).cloned())
                .collect();
            let list = PodListObservation {
                items,
                ..Default::default()
            };
            let obs = observation(&t.query, &t.revision_id, &list, cancelled);
            if t.last.as_ref() != Some(&obs) {
                t.last = Some(obs.clone());
                out.push(Report {
                    target: t.target.clone(),
                    generation: t.generation,
                    body: Some(report::Body::Readiness(obs)),
                });
            }
        }
        out
    }
}

/// Runs the pure contract and shapes its result as a report body.
pub fn observation(
    query: &ReadinessQuery,
    revision_id: &str,
    list: &PodListObservation,
    cancelled: bool,
) -> ReadinessObservation {
    let base = ReadinessObservation {
        revision_id: revision_id.to_string(),
        namespace: query.namespace.clone(),
        ..Default::default()
    };
    match evaluate(query, list, cancelled) {
        Ok(v) => ReadinessObservation {
            ready: v.ready,
            live_candidates: v.live_candidates,
            ready_candidates: v.ready_candidates,
            reason: v.reason().to_string(),
            pod: v.pod.clone().unwrap_or_default(),
            ..base
        },
        Err(e) => ReadinessObservation {
            ready: false,
            reason: "observation error".into(),
            error: e.to_string(),
            ..base
        },
    }
}

impl Observer {
    /// An observer sending reports on `reports`; `cancel` ends every watcher.
    pub fn new(client: Client, reports: mpsc::Sender<Report>, cancel: CancellationToken) -> Self {
        Observer {
            inner: Arc::new(Inner {
                client,
                reports,
                cancel,
                state: Mutex::new(State::default()),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state stays consistent across a panic of a holder (each update
        // is a few map operations), so a poisoned lock is still usable.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts watching `namespace` (idempotent).
    pub fn watch_namespace(&self, namespace: &str) {
        let stop = {
            let mut st = self.lock();
            if st.namespaces.contains_key(namespace) {
                return;
            }
            let stop = self.inner.cancel.child_token();
            st.namespaces
                .insert(namespace.to_string(), NsState::new(stop.clone()));
            stop
        };
        let this = self.clone();
        let ns = namespace.to_string();
        tokio::spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = this.run_watcher(&ns) => {}
            }
            tracing::debug!(namespace = %ns, "spoke.readiness.watch_stopped");
        });
    }

    /// Stops watching `namespace` and forgets its revisions.
    pub fn unwatch_namespace(&self, namespace: &str) {
        if let Some(ns) = self.lock().namespaces.remove(namespace) {
            ns.stop.cancel();
        }
    }

    /// Namespaces being watched.
    pub fn namespaces(&self) -> Vec<String> {
        self.lock().namespaces.keys().cloned().collect()
    }

    /// Tracks the readiness of a revision and reports it (now, if the
    /// namespace's Pods are known, and on every change).
    pub async fn track(
        &self,
        query: ReadinessQuery,
        target: &str,
        generation: i64,
        revision_id: &str,
    ) {
        self.watch_namespace(&query.namespace);
        let key = (query.agent.clone(), query.revision.clone());
        let reports = {
            let mut st = self.lock();
            let Some(ns) = st.namespaces.get_mut(&query.namespace) else {
                return;
            };
            let keep_last = ns
                .tracked
                .get(&key)
                .filter(|t| t.target == target && t.generation == generation && t.query == query)
                .and_then(|t| t.last.clone());
            ns.tracked.insert(
                key.clone(),
                Tracked {
                    query,
                    target: target.to_string(),
                    generation,
                    revision_id: revision_id.to_string(),
                    last: keep_last,
                },
            );
            ns.evaluate([key], self.inner.cancel.is_cancelled())
        };
        self.send(reports).await;
    }

    /// Stops reporting a revision.
    pub fn untrack(&self, namespace: &str, agent: &str, revision: i64) {
        if let Some(ns) = self.lock().namespaces.get_mut(namespace) {
            ns.tracked
                .remove(&(agent.to_string(), revision.to_string()));
        }
    }

    /// The last observation reported for a revision.
    pub fn last(
        &self,
        namespace: &str,
        agent: &str,
        revision: i64,
    ) -> Option<ReadinessObservation> {
        self.lock()
            .namespaces
            .get(namespace)?
            .tracked
            .get(&(agent.to_string(), revision.to_string()))?
            .last
            .clone()
    }

    /// The current verdict of every tracked revision that has one, to
    /// re-send after a reconnect (the observer otherwise reports only
    /// changes).
    pub fn current_reports(&self) -> Vec<Report> {
        let state = self.lock();
        state
            .namespaces
            .values()
            .flat_map(|ns| ns.tracked.values())
            .filter_map(|t| {
                t.last.clone().map(|last| Report {
                    target: t.target.clone(),
                    generation: t.generation,
                    body: Some(report::Body::Readiness(last)),
                })
            })
            .collect()
    }

    /// Number of Pods currently indexed (all namespaces).
    pub fn watched_pods(&self) -> usize {
        self.lock().namespaces.values().map(|n| n.pods.len()).sum()
    }

    async fn send(&self, reports: Vec<Report>) {
        for r in reports {
            if self.inner.reports.send(r).await.is_err() {
                tracing::warn!("spoke.readiness.report_dropped: report channel closed");
                return;
            }
        }
    }

    async fn run_watcher(&self, namespace: &str) {
        let api: Api<Pod> = Api::namespaced(self.inner.client.clone(), namespace);
        let selector = format!("{}={HARNESS_ROLE},{}", labels::WORKLOAD_ROLE, labels::AGENT);
        let cfg = watcher::Config::default().labels(&selector);
        let mut stream = std::pin::pin!(watcher(api, cfg).default_backoff());
        while let Some(ev) = stream.next().await {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(namespace, error = %e, "spoke.readiness.watch_error");
                    continue;
                }
            };
            let cancelled = self.inner.cancel.is_cancelled();
            let reports = {
                let mut st = self.lock();
                let Some(ns) = st.namespaces.get_mut(namespace) else {
                    return;
                };
                match ev {
                    watcher::Event::Init => {
                        ns.init = Some(HashMap::new());
                        Vec::new()
                    }
                    watcher::Event::InitApply(pod) => {
                        let o = observe(&pod);
                        if let Some(buf) = ns.init.as_mut() {
                            buf.insert(o.name.clone().unwrap_or_default(), o);
                        }
                        Vec::new()
                    }
                    watcher::Event::InitDone => {
                        let buf = ns.init.take().unwrap_or_default();
                        ns.replace_all(buf);
                        let keys: Vec<GroupKey> = ns.tracked.keys().cloned().collect();
                        ns.evaluate(keys, cancelled)
                    }
                    watcher::Event::Apply(pod) => {
                        let keys = ns.upsert(observe(&pod));
                        ns.evaluate(keys, cancelled)
                    }
                    watcher::Event::Delete(pod) => {
                        let keys = ns.remove(&pod.metadata.name.clone().unwrap_or_default());
                        ns.evaluate(keys, cancelled)
                    }
                }
            };
            self.send(reports).await;
        }
    }
}
