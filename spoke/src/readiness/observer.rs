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
//!
//! A revision tracked with a [`StartupCheck`] is ready only once the Ready
//! Pod's plugin startup status (`clawfed_proto::startup`) is valid: the
//! observer reads it for that exact Pod through the apiserver's Pod proxy
//! after every change of the Pod (a restarted runtime is a change, so its
//! new status replaces the old result) and again, with a bounded backoff,
//! while it is not valid.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use clawfed_proto::labels;
use clawfed_proto::link::v1::{ReadinessObservation, Report, StartupWarning, report};
use clawfed_proto::readiness::{
    HARNESS_ROLE, PodListObservation, PodObservation, ReadinessQuery, evaluate,
};
use clawfed_proto::startup::{self, Accepted, StartupError};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::observe;

/// Agent and revision of a Pod group.
type GroupKey = (String, String);

/// One incarnation of a Pod: name, uid, resourceVersion. A startup status
/// read is for exactly one; any change of the Pod asks for a new read.
type PodKey = (String, String, String);

/// `reason` of a ready Pod whose startup status is still being read.
pub const STARTUP_PENDING: &str = "startup status pending";
/// `reason` of a ready Pod whose startup status is not valid (the why is in
/// `startup_reason`).
pub const STARTUP_NOT_VALID: &str = "startup status not valid";
/// Reads of one Pod incarnation's startup status while it is not valid.
const STARTUP_MAX_READS: u32 = 120;
/// Backoff between those reads: doubling from the first, at most the cap.
const STARTUP_RETRY_FIRST: Duration = Duration::from_millis(500);
const STARTUP_RETRY_CAP: Duration = Duration::from_secs(5);
/// How long one read may take.
const STARTUP_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What a revision's plugin startup status must satisfy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartupCheck {
    /// The admitted selections.
    pub selections: Vec<String>,
    /// The Harness port the status is served on.
    pub port: i32,
}

/// The startup status read of one Pod incarnation.
#[derive(Debug, Clone)]
struct StartupRead {
    key: PodKey,
    /// `None` until the first read finished.
    result: Option<Result<Accepted, StartupError>>,
}

/// A read to start (outside the state lock).
#[derive(Debug, Clone)]
struct ReadJob {
    namespace: String,
    group: GroupKey,
    key: PodKey,
    revision_id: String,
    check: StartupCheck,
}

/// A revision whose readiness is reported.
#[derive(Debug, Clone)]
struct Tracked {
    query: ReadinessQuery,
    target: String,
    generation: i64,
    revision_id: String,
    last: Option<ReadinessObservation>,
    startup: Option<StartupCheck>,
    read: Option<StartupRead>,
}

#[derive(Debug)]
struct NsState {
    synced: bool,
    pods: HashMap<String, PodObservation>,
    /// uid and resourceVersion of each Pod in `pods`.
    meta: HashMap<String, (String, String)>,
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
            meta: HashMap::new(),
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
        self.meta.remove(name);
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
        self.meta.retain(|name, _| self.pods.contains_key(name));
        self.synced = true;
    }

    /// Re-evaluates the tracked revisions in `keys`; returns reports for those
    /// whose observation changed, and the startup status reads to start.
    fn evaluate(
        &mut self,
        keys: impl IntoIterator<Item = GroupKey>,
        cancelled: bool,
    ) -> (Vec<Report>, Vec<ReadJob>) {
        if !self.synced {
            return (Vec::new(), Vec::new());
        }
        let mut out = Vec::new();
        let mut jobs = Vec::new();
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
            let mut obs = observation(&t.query, &t.revision_id, &list, cancelled);
            if let Some(check) = &t.startup {
                if obs.ready {
                    let (uid, rv) = self.meta.get(&obs.pod).cloned().unwrap_or_default();
                    let pod_key = (obs.pod.clone(), uid, rv);
                    if t.read.as_ref().is_none_or(|r| r.key != pod_key) {
                        t.read = Some(StartupRead {
                            key: pod_key.clone(),
                            result: None,
                        });
                        jobs.push(ReadJob {
                            namespace: t.query.namespace.clone(),
                            group: key.clone(),
                            key: pod_key,
                            revision_id: t.revision_id.clone(),
                            check: check.clone(),
                        });
                    }
                    let result = t.read.as_ref().and_then(|r| r.result.as_ref());
                    // A re-read of the Pod that was ready a moment ago is
                    // not news: its verdict stands until the read answers.
                    let rereading = result.is_none()
                        && t.last.as_ref().is_some_and(|l| l.ready && l.pod == obs.pod);
                    if rereading {
                        continue;
                    }
                    obs = gate(obs, result);
                } else {
                    t.read = None;
                }
            }
            if t.last.as_ref() != Some(&obs) {
                t.last = Some(obs.clone());
                out.push(Report {
                    target: t.target.clone(),
                    generation: t.generation,
                    body: Some(report::Body::Readiness(obs)),
                });
            }
        }
        (out, jobs)
    }
}

/// Gates a contract verdict on the startup status read of its ready Pod:
/// `None` while the read is pending. A valid status keeps it ready and adds
/// its warnings; pending or not valid makes it not ready, with the reason.
pub fn gate(
    obs: ReadinessObservation,
    read: Option<&Result<Accepted, StartupError>>,
) -> ReadinessObservation {
    if !obs.ready {
        return obs;
    }
    match read {
        Some(Ok(accepted)) => ReadinessObservation {
            startup_warnings: accepted
                .warnings
                .iter()
                .map(|w| StartupWarning {
                    selection: w.selection.clone(),
                    code: w.code.as_str().to_owned(),
                })
                .collect(),
            ..obs
        },
        Some(Err(e)) => ReadinessObservation {
            ready: false,
            reason: STARTUP_NOT_VALID.into(),
            startup_reason: e.to_string(),
            ..obs
        },
        None => ReadinessObservation {
            ready: false,
            reason: STARTUP_PENDING.into(),
            ..obs
        },
    }
}

/// Reads the startup status of Pod `pod` through the apiserver's Pod proxy
/// and validates it for the exact Pod (`uid`) and revision.
async fn read_startup(
    client: &Client,
    namespace: &str,
    key: &PodKey,
    port: i32,
    revision_id: &str,
    selections: &[String],
) -> Result<Accepted, StartupError> {
    use crate::podproxy::{self, ProxyError};
    let (pod, uid, _) = key;
    let body = podproxy::get(
        client,
        namespace,
        pod,
        port,
        startup::PATH,
        startup::MAX_BODY_BYTES,
        STARTUP_READ_TIMEOUT,
    )
    .await
    .map_err(|e| match e {
        ProxyError::Status(404) => StartupError::Missing,
        ProxyError::Request(ref source) => StartupError::Unreadable(format!("{e}: {source}")),
        e => StartupError::Unreadable(e.to_string()),
    })?;
    startup::parse(
        &body,
        &startup::Expected {
            revision_id,
            runtime_instance: uid,
            admitted: selections,
        },
    )
}

fn retry_delay(read: u32) -> Duration {
    STARTUP_RETRY_FIRST
        .saturating_mul(1u32 << read.min(8))
        .min(STARTUP_RETRY_CAP)
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
        tokio::spawn(
            async move {
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = this.run_watcher(&ns) => {}
                }
                tracing::debug!(namespace = %ns, "spoke.readiness.watch_stopped");
            }
            .instrument(tracing::info_span!("readiness.watch", namespace)),
        );
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
        self.track_with_startup(query, target, generation, revision_id, None)
            .await;
    }

    /// As [`Self::track`]; with `startup`, ready also needs a valid plugin
    /// startup status of the ready Pod.
    pub async fn track_with_startup(
        &self,
        query: ReadinessQuery,
        target: &str,
        generation: i64,
        revision_id: &str,
        startup: Option<StartupCheck>,
    ) {
        self.watch_namespace(&query.namespace);
        let key = (query.agent.clone(), query.revision.clone());
        let reports = {
            let mut st = self.lock();
            let Some(ns) = st.namespaces.get_mut(&query.namespace) else {
                return;
            };
            let same = ns.tracked.get(&key).filter(|t| {
                t.target == target
                    && t.generation == generation
                    && t.query == query
                    && t.startup == startup
            });
            let keep_last = same.and_then(|t| t.last.clone());
            let keep_read = same.and_then(|t| t.read.clone());
            ns.tracked.insert(
                key.clone(),
                Tracked {
                    query,
                    target: target.to_string(),
                    generation,
                    revision_id: revision_id.to_string(),
                    last: keep_last,
                    startup,
                    read: keep_read,
                },
            );
            ns.evaluate([key], self.inner.cancel.is_cancelled())
        };
        self.finish(reports).await;
    }

    /// Sends the reports and starts the reads of one evaluation.
    async fn finish(&self, (reports, jobs): (Vec<Report>, Vec<ReadJob>)) {
        for job in jobs {
            self.spawn_read(job);
        }
        self.send(reports).await;
    }

    /// Reads one Pod incarnation's startup status, and again with backoff
    /// while it is not valid; stops when the Pod changed (a newer read took
    /// over), the revision is no longer tracked, or the namespace's watch
    /// ends.
    fn spawn_read(&self, job: ReadJob) {
        let Some(stop) = self
            .lock()
            .namespaces
            .get(&job.namespace)
            .map(|n| n.stop.clone())
        else {
            return;
        };
        let this = self.clone();
        let span = tracing::info_span!(
            "readiness.read",
            namespace = %job.namespace,
            pod = %job.key.0,
            revision = %job.revision_id
        );
        tokio::spawn(async move {
            for attempt in 0..STARTUP_MAX_READS {
                if attempt > 0 {
                    tokio::select! {
                        () = tokio::time::sleep(retry_delay(attempt - 1)) => {}
                        () = stop.cancelled() => return,
                    }
                }
                let result = tokio::select! {
                    r = read_startup(
                        &this.inner.client,
                        &job.namespace,
                        &job.key,
                        job.check.port,
                        &job.revision_id,
                        &job.check.selections,
                    ) => r,
                    () = stop.cancelled() => return,
                };
                let valid = result.is_ok();
                if let Err(e) = &result {
                    tracing::debug!(namespace = %job.namespace, pod = %job.key.0, attempt, error = %e, "spoke.readiness.startup_not_valid");
                }
                let evaluated = {
                    let cancelled = this.inner.cancel.is_cancelled();
                    let mut st = this.lock();
                    let Some(ns) = st.namespaces.get_mut(&job.namespace) else {
                        return;
                    };
                    let Some(t) = ns.tracked.get_mut(&job.group) else {
                        return;
                    };
                    match t.read.as_mut() {
                        Some(r) if r.key == job.key => r.result = Some(result),
                        _ => return,
                    }
                    ns.evaluate([job.group.clone()], cancelled)
                };
                this.finish_boxed(evaluated).await;
                if valid {
                    return;
                }
            }
        }
        .instrument(span));
    }

    /// [`Self::finish`] behind a box: a read's evaluation may start reads
    /// itself, and an async fn cannot contain its own future.
    fn finish_boxed(
        &self,
        evaluated: (Vec<Report>, Vec<ReadJob>),
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(self.finish(evaluated))
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
                        (Vec::new(), Vec::new())
                    }
                    watcher::Event::InitApply(pod) => {
                        ns.meta.insert(
                            pod.metadata.name.clone().unwrap_or_default(),
                            pod_meta(&pod),
                        );
                        let o = observe(&pod);
                        if let Some(buf) = ns.init.as_mut() {
                            buf.insert(o.name.clone().unwrap_or_default(), o);
                        }
                        (Vec::new(), Vec::new())
                    }
                    watcher::Event::InitDone => {
                        let buf = ns.init.take().unwrap_or_default();
                        ns.replace_all(buf);
                        let keys: Vec<GroupKey> = ns.tracked.keys().cloned().collect();
                        ns.evaluate(keys, cancelled)
                    }
                    watcher::Event::Apply(pod) => {
                        ns.meta.insert(
                            pod.metadata.name.clone().unwrap_or_default(),
                            pod_meta(&pod),
                        );
                        let keys = ns.upsert(observe(&pod));
                        ns.evaluate(keys, cancelled)
                    }
                    watcher::Event::Delete(pod) => {
                        let keys = ns.remove(&pod.metadata.name.clone().unwrap_or_default());
                        ns.evaluate(keys, cancelled)
                    }
                }
            };
            self.finish(reports).await;
        }
    }
}

fn pod_meta(pod: &Pod) -> (String, String) {
    (
        pod.metadata.uid.clone().unwrap_or_default(),
        pod.metadata.resource_version.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clawfed_proto::startup::{Warning, WarningCode};

    fn ready() -> ReadinessObservation {
        ReadinessObservation {
            revision_id: "rev-1".into(),
            ready: true,
            live_candidates: 1,
            ready_candidates: 1,
            reason: "ready".into(),
            pod: "p-1".into(),
            ..Default::default()
        }
    }

    /// Issue 12: only a valid startup status lets a ready verdict through;
    /// its warnings travel with it; pending and invalid keep it unready
    /// with the reason; a not-ready verdict is never made ready.
    #[test]
    fn startup_status_gates_a_ready_verdict() {
        let accepted = Accepted {
            successful: vec!["alpha".into()],
            warnings: vec![Warning {
                selection: "beta".into(),
                code: WarningCode::PluginAuthRequired,
            }],
        };
        let ok = gate(ready(), Some(&Ok(accepted.clone())));
        assert!(ok.ready);
        assert_eq!(
            ok.startup_warnings,
            [StartupWarning {
                selection: "beta".into(),
                code: "PLUGIN_AUTH_REQUIRED".into()
            }]
        );
        let pending = gate(ready(), None);
        assert!(!pending.ready);
        assert_eq!(pending.reason, STARTUP_PENDING);
        for e in [
            StartupError::Missing,
            StartupError::Malformed("expected value".into()),
            StartupError::ForeignRevision {
                got: "rev-0".into(),
                want: "rev-1".into(),
            },
            StartupError::UnknownCode {
                selection: "beta".into(),
                code: "PLUGIN_EXPLODED".into(),
            },
        ] {
            let bad = gate(ready(), Some(&Err(e.clone())));
            assert!(!bad.ready, "{e}");
            assert_eq!(bad.reason, STARTUP_NOT_VALID);
            assert_eq!(bad.startup_reason, e.to_string());
            assert!(bad.startup_warnings.is_empty());
        }
        let not_ready = ReadinessObservation {
            ready: false,
            reason: "candidate not ready".into(),
            ..ready()
        };
        assert_eq!(gate(not_ready.clone(), Some(&Ok(accepted))), not_ready);
    }

    #[test]
    fn startup_retries_back_off_to_a_cap() {
        assert_eq!(retry_delay(0), STARTUP_RETRY_FIRST);
        assert!(retry_delay(1) > retry_delay(0));
        assert_eq!(retry_delay(30), STARTUP_RETRY_CAP);
    }
}
