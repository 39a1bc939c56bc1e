//! Drift repair: the spoke watches what it manages and puts back what it
//! applied.
//!
//! One watch per managed kind and data-plane namespace (the spoke holds
//! tenant rights per namespace only), plus one cluster-wide watch of the
//! managed Namespaces, all filtered to the spoke's manager label. A watch
//! lists once to start (and again only when the apiserver expires it); there
//! is no periodic LIST.
//!
//! The desired state comes from the durable records ([`desired`], one Secret
//! per target, written by the executor before it acks), seen through the
//! same watches. Each event runs the pure verdict ([`check`]); a drifted
//! object is repaired under the target's executor lock after re-reading its
//! record and the live object from the apiserver, with server-side apply,
//! forced, as the spoke's field manager ([`objects::Desired::apply`]).
//! Repairs are budgeted per object ([`limit`]); an object another controller
//! keeps changing is reported as contested and backed off, not looped.
//!
//! # Layout
//! - [`check`]: pure verdict (deleted, owned value changed, ownership taken).
//! - [`limit`]: pure per-object token bucket and backoff.
//! - [`desired`]: the durable desired-state record.
//! - [`objects`]: the desired objects of a record, their JSON, get and apply.
//! - this file: watches, the event index, repair tasks, status and metrics.

pub mod check;
pub mod desired;
pub mod limit;
pub mod objects;

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use clawfed_proto::labels;
use clawfed_proto::link::v1::{DriftReport, Report, report};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, LimitRange, Namespace, ResourceQuota, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::apply::{self, FIELD_MANAGER};
use crate::exec::Executor;
use check::Drift;
use desired::Record;
use limit::{Budget, Limiter, Verdict};

/// Drift metrics.
#[derive(Debug, Clone)]
pub struct DriftMetrics {
    /// Repairs written, by kind.
    pub repairs: Family<Vec<(String, String)>, Counter>,
    /// Objects that became contested, by kind.
    pub contested: Family<Vec<(String, String)>, Counter>,
    /// From the watch event that showed a drift to the repair's answer.
    pub repair_seconds: Histogram,
}

impl Default for DriftMetrics {
    fn default() -> Self {
        DriftMetrics {
            repairs: Family::default(),
            contested: Family::default(),
            repair_seconds: Histogram::new(REPAIR_BUCKETS),
        }
    }
}

/// Buckets of `clawfed_spoke_drift_repair_seconds` (5 ms to 30 s).
pub const REPAIR_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0,
];

impl DriftMetrics {
    /// Registers `clawfed_spoke_drift_repairs_total{kind}` and
    /// `clawfed_spoke_drift_contested_total{kind}`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        m.register_into(registry);
        m
    }

    /// Registers these (already shared) metrics in `registry`.
    pub fn register_into(&self, registry: &mut Registry) {
        let m = self;
        // Every watched kind at zero from the start, so `increase()` sees the
        // first repair or contest and dashboards show 0 rather than no data.
        for kind in objects::KINDS {
            let _ = m.repairs.get_or_create(&Self::kind(kind));
            let _ = m.contested.get_or_create(&Self::kind(kind));
        }
        registry.register(
            "clawfed_spoke_drift_repairs",
            "Managed objects re-applied after drift, by kind",
            m.repairs.clone(),
        );
        registry.register(
            "clawfed_spoke_drift_repair_seconds",
            "Time from the watch event showing a drift to the repair's answer",
            m.repair_seconds.clone(),
        );
        registry.register(
            "clawfed_spoke_drift_contested",
            "Managed objects another writer kept changing (repairs backed off), by kind",
            m.contested.clone(),
        );
    }

    fn kind(kind: &str) -> Vec<(String, String)> {
        vec![("kind".to_string(), kind.to_string())]
    }

    /// Repairs of `kind` so far.
    pub fn repairs_of(&self, kind: &str) -> u64 {
        self.repairs.get_or_create(&Self::kind(kind)).get()
    }
}

/// Drift seen on one target (revision or namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriftStatus {
    /// Repairs written.
    pub repairs: u64,
    /// Times an object of the target became contested.
    pub contested: u64,
    /// When drift was last seen (Unix milliseconds).
    pub last_drift_unix_millis: i64,
    /// What drifted last: kind, name, reason and field manager.
    pub last_reason: String,
    /// Resends of the target's work asked of the hub (drift of an object the
    /// record cannot restore: the credential Secret).
    pub resends: u64,
}

/// One managed object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    /// Its kind.
    pub kind: &'static str,
    /// Its namespace (for a Namespace, its own name).
    pub namespace: String,
    /// Its name.
    pub name: String,
}

enum Observed {
    Init {
        kind: &'static str,
        namespace: Option<String>,
    },
    Object {
        key: ObjectKey,
        live: Option<Value>,
        initial: bool,
        /// When the watch delivered it.
        at: tokio::time::Instant,
    },
    Synced {
        kind: &'static str,
        namespace: Option<String>,
    },
    Recheck(ObjectKey),
}

/// A desired object and the JSON it is compared by.
/// A JSON document kept as text: a thousand revisions' objects as parsed
/// `Value` trees took several times the memory of their text, and each is
/// read only when an event for its object comes.
#[derive(Clone)]
struct Json(Box<str>);

impl Json {
    fn new(v: &Value) -> Self {
        Json(v.to_string().into_boxed_str())
    }

    fn value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

struct Indexed {
    target: String,
    /// The desired JSON live copies are compared with.
    value: Json,
    /// The credential Secret: its copy holds digests, never values.
    credential: bool,
}

impl Indexed {
    /// The copy of `live` the repairer keeps: cut down to what the verdict
    /// reads (`check::compact`), a credential's values as digests.
    fn keep(&self, kind: &str, live: Value) -> Value {
        self.keep_against(kind, live, &self.value.value())
    }

    /// [`Indexed::keep`] with the desired JSON already parsed.
    fn keep_against(&self, kind: &str, live: Value, desired: &Value) -> Value {
        let live = if self.credential {
            objects::observe_credential(live)
        } else {
            live
        };
        check::compact(kind, FIELD_MANAGER, live, desired)
    }
}

#[derive(Default)]
struct NsState {
    stop: CancellationToken,
    records: HashMap<String, Record>,
    /// Record Secret name -> target.
    record_names: HashMap<String, String>,
    index: HashMap<(&'static str, String), Indexed>,
    live: HashMap<(&'static str, String), Json>,
    synced: HashSet<&'static str>,
    listing: HashMap<&'static str, HashSet<String>>,
}

struct State {
    namespaces: HashMap<String, NsState>,
    namespaces_synced: bool,
    limiter: Limiter<ObjectKey>,
    /// Repairs running; `true` when another event came meanwhile.
    inflight: HashMap<ObjectKey, bool>,
    status: HashMap<String, DriftStatus>,
}

struct Inner {
    exec: Arc<Executor>,
    /// Only these namespaces, when set (tests sharing one cluster).
    only: Option<HashSet<String>>,
    metrics: DriftMetrics,
    cancel: CancellationToken,
    tx: mpsc::Sender<Observed>,
    rx: Mutex<Option<mpsc::Receiver<Observed>>>,
    state: Mutex<State>,
}

/// The drift watcher and repairer of one spoke.
#[derive(Clone)]
pub struct Repairer {
    inner: Arc<Inner>,
}

impl Debug for Repairer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repairer").finish_non_exhaustive()
    }
}

/// Retry delay after a failed read or write of a repair.
const RETRY: Duration = Duration::from_secs(1);
/// How long a resend the spoke asked for may take before it asks again
/// (the link may have been down; the per-object budget still applies).
const RESEND_RECHECK: Duration = Duration::from_secs(30);

fn strip(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    v
}

impl Repairer {
    /// A repairer of what `exec` applies; `cancel` ends every watch.
    pub fn new(
        exec: Arc<Executor>,
        metrics: DriftMetrics,
        budget: Budget,
        cancel: CancellationToken,
    ) -> Self {
        Self::scoped(exec, metrics, budget, cancel, None)
    }

    /// A repairer of `only` these namespaces, when given (several spokes'
    /// tests share one cluster; a spoke in production manages its whole
    /// cluster).
    pub fn scoped(
        exec: Arc<Executor>,
        metrics: DriftMetrics,
        budget: Budget,
        cancel: CancellationToken,
        only: Option<HashSet<String>>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(4096);
        Repairer {
            inner: Arc::new(Inner {
                exec,
                only,
                metrics,
                cancel,
                tx,
                rx: Mutex::new(Some(rx)),
                state: Mutex::new(State {
                    namespaces: HashMap::new(),
                    namespaces_synced: false,
                    limiter: Limiter::new(budget),
                    inflight: HashMap::new(),
                    status: HashMap::new(),
                }),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Each update is a few map operations: a poisoned lock is consistent.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The drift seen on `target` so far.
    pub fn status(&self, target: &str) -> Option<DriftStatus> {
        self.lock().status.get(target).cloned()
    }

    /// Whether every watch has listed once: from then on, drift of any
    /// managed object is seen.
    pub fn synced(&self) -> bool {
        let st = self.lock();
        st.namespaces_synced
            && st.namespaces.values().all(|ns| {
                objects::KINDS
                    .iter()
                    .filter(|k| **k != "Namespace")
                    .all(|k| ns.synced.contains(k))
            })
    }

    /// The applied digest (`clawfed_proto::digest`, wire form) over the
    /// desired-state records, as the watches see them; `None` until every
    /// managed namespace's records are listed. Records in a namespace being
    /// deleted no longer count (the hub counts its deletion).
    pub fn applied_digest(&self) -> Option<String> {
        let st = self.lock();
        if !st.namespaces_synced
            || st
                .namespaces
                .values()
                .any(|ns| !ns.synced.contains("Secret"))
        {
            return None;
        }
        let entries = st.namespaces.iter().flat_map(|(name, ns)| {
            let terminating = ns
                .live
                .get(&("Namespace", name.clone()))
                .is_some_and(|v| v.value().pointer("/metadata/deletionTimestamp").is_some());
            ns.records
                .values()
                .filter(move |_| !terminating)
                .map(|r| (r.target.as_str(), r.kind.as_str(), r.generation))
        });
        Some(clawfed_proto::digest::AppliedDigest::compute(entries).to_wire())
    }

    /// Whether `key` is contested right now.
    pub fn contested(&self, key: &ObjectKey) -> bool {
        self.lock().limiter.contested(key)
    }

    /// The metrics.
    pub fn metrics(&self) -> &DriftMetrics {
        &self.inner.metrics
    }

    /// Runs the watches and repairs until cancelled. Call once.
    pub async fn run(&self) {
        let Some(mut rx) = self
            .inner
            .rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        let client = self.inner.exec.client().clone();
        let ns_watch = tokio::spawn(watch_kind::<Namespace>(
            Api::all(client),
            "Namespace",
            None,
            self.inner.tx.clone(),
            self.inner.cancel.clone(),
        ));
        loop {
            let ev = tokio::select! {
                () = self.inner.cancel.cancelled() => break,
                ev = rx.recv() => match ev { Some(ev) => ev, None => break },
            };
            self.handle(ev);
        }
        ns_watch.abort();
        for ns in self.lock().namespaces.values() {
            ns.stop.cancel();
        }
    }

    fn handle(&self, ev: Observed) {
        // Repair latency counts from the watch event that showed the drift.
        let seen = match &ev {
            Observed::Object { at, .. } => *at,
            _ => tokio::time::Instant::now(),
        };
        let mut due: Vec<(ObjectKey, String, Drift)> = Vec::new();
        {
            let mut st = self.lock();
            let st = &mut *st;
            match ev {
                Observed::Init { kind, namespace } => {
                    for (name, ns) in &mut st.namespaces {
                        if namespace.as_ref().is_none_or(|n| n == name) {
                            ns.listing.insert(kind, HashSet::new());
                        }
                    }
                }
                Observed::Synced { kind, namespace } => {
                    if namespace.is_none() {
                        st.namespaces_synced = true;
                    }
                    for (name, ns) in &mut st.namespaces {
                        if namespace.as_ref().is_some_and(|n| n != name) {
                            continue;
                        }
                        // Whatever the (re)list did not return is gone.
                        if let Some(seen) = ns.listing.remove(kind) {
                            ns.live.retain(|(k, n), _| *k != kind || seen.contains(n));
                        }
                        ns.synced.insert(kind);
                        let keys: Vec<_> = ns
                            .index
                            .keys()
                            .filter(|(k, _)| *k == kind)
                            .cloned()
                            .collect();
                        for k in keys {
                            due.extend(verdict(name, ns, &k, st.namespaces_synced));
                        }
                    }
                }
                Observed::Object {
                    key, live, initial, ..
                } => {
                    if key.kind == "Namespace"
                        && live.is_some()
                        && !st.namespaces.contains_key(&key.namespace)
                        && self
                            .inner
                            .only
                            .as_ref()
                            .is_none_or(|o| o.contains(&key.namespace))
                    {
                        let stop = self.inner.cancel.child_token();
                        st.namespaces.insert(
                            key.namespace.clone(),
                            NsState {
                                stop: stop.clone(),
                                ..Default::default()
                            },
                        );
                        self.watch_namespace(&key.namespace, stop);
                    }
                    let synced_all = st.namespaces_synced;
                    if let Some(ns) = st.namespaces.get_mut(&key.namespace) {
                        let k = (key.kind, key.name.clone());
                        if initial && let Some(seen) = ns.listing.get_mut(key.kind) {
                            seen.insert(key.name.clone());
                        }
                        let record = live.as_ref().map(is_record).unwrap_or_else(|| {
                            key.kind == "Secret" && ns.record_names.contains_key(&key.name)
                        });
                        if key.kind == "Secret" && record {
                            due.extend(reindex(&self.inner.exec, &key, live, ns, synced_all));
                        } else {
                            // An indexed object is cut down and judged on the
                            // value in hand (its desired JSON parsed once).
                            let mut stale = false;
                            let d = match (live, ns.index.get(&k)) {
                                // An event older than the copy in hand (a repair's
                                // own answer, kept by `cache_live`) says nothing new:
                                // judged, it would repair again what the repair
                                // already put back, and count it twice.
                                (Some(v), Some(_))
                                    if older_than(&v, ns.live.get(&k).map(Json::value)) =>
                                {
                                    stale = true;
                                    None
                                }
                                (Some(v), Some(ix)) => {
                                    let desired = ix.value.value();
                                    let kept = ix.keep_against(k.0, v, &desired);
                                    let d = judge(&key.namespace, ix, &k, &desired, Some(&kept));
                                    ns.live.insert(k.clone(), Json::new(&kept));
                                    d
                                }
                                (Some(v), None) => {
                                    ns.live.insert(k.clone(), Json::new(&v));
                                    None
                                }
                                (None, _) => {
                                    ns.live.remove(&k);
                                    verdict(&key.namespace, ns, &k, synced_all)
                                }
                            };
                            if d.is_none() && !stale && ns.index.contains_key(&k) {
                                st.limiter.settled(&key, tokio::time::Instant::now());
                            }
                            due.extend(d);
                        }
                    }
                }
                Observed::Recheck(key) => {
                    if let Some(ns) = st.namespaces.get(&key.namespace)
                        && let Some(ix) = ns.index.get(&(key.kind, key.name.clone()))
                    {
                        due.push((
                            key,
                            ix.target.clone(),
                            Drift {
                                reason: "recheck".into(),
                                manager: None,
                            },
                        ));
                    }
                }
            }
        }
        for (key, target, drift) in due {
            self.spawn_repair(key, target, drift, seen);
        }
    }

    fn watch_namespace(&self, namespace: &str, stop: CancellationToken) {
        let c = self.inner.exec.client().clone();
        let tx = self.inner.tx.clone();
        let ns = Some(namespace.to_string());
        macro_rules! watch {
            ($t:ty, $kind:literal) => {
                tokio::spawn(watch_kind::<$t>(
                    Api::namespaced(c.clone(), namespace),
                    $kind,
                    ns.clone(),
                    tx.clone(),
                    stop.clone(),
                ));
            };
        }
        watch!(Deployment, "Deployment");
        watch!(Service, "Service");
        watch!(Secret, "Secret");
        watch!(ServiceAccount, "ServiceAccount");
        watch!(ConfigMap, "ConfigMap");
        watch!(NetworkPolicy, "NetworkPolicy");
        watch!(ResourceQuota, "ResourceQuota");
        watch!(LimitRange, "LimitRange");
        watch!(RoleBinding, "RoleBinding");
        tracing::debug!(namespace, "spoke.drift.watching");
    }

    fn forget_namespace(&self, namespace: &str) {
        if let Some(ns) = self.lock().namespaces.remove(namespace) {
            ns.stop.cancel();
            tracing::debug!(namespace, "spoke.drift.namespace_gone");
        }
    }

    /// The namespace is being deleted (as its watch last saw it): what
    /// goes away with it is not put back.
    fn terminating(&self, namespace: &str) -> bool {
        self.lock().namespaces.get(namespace).is_some_and(|ns| {
            ns.live
                .get(&("Namespace", namespace.to_string()))
                .is_some_and(|v| v.value().pointer("/metadata/deletionTimestamp").is_some())
        })
    }

    /// The watch's copy of `key`: `Some(None)` when the watch has listed
    /// its kind and does not hold it (deleted); `None` when it cannot tell.
    fn cached_live(&self, key: &ObjectKey) -> Option<Option<Value>> {
        let st = self.lock();
        let ns = st.namespaces.get(&key.namespace)?;
        let synced = if key.kind == "Namespace" {
            st.namespaces_synced
        } else {
            ns.synced.contains(key.kind)
        };
        let live = ns.live.get(&(key.kind, key.name.clone())).map(Json::value);
        (live.is_some() || synced).then_some(live)
    }

    /// Keeps `answered` (a repair's answer) as the copy of `key`, unless the
    /// watch already holds a newer one.
    fn cache_live(&self, key: &ObjectKey, answered: Value) {
        let mut st = self.lock();
        let Some(ns) = st.namespaces.get_mut(&key.namespace) else {
            return;
        };
        let k = (key.kind, key.name.clone());
        let answered = match ns.index.get(&k) {
            Some(ix) => ix.keep(key.kind, answered),
            None => answered,
        };
        if !older_than(&answered, ns.live.get(&k).map(Json::value)) {
            ns.live.insert(k, Json::new(&answered));
        }
    }

    fn cached_record(&self, namespace: &str, target: &str) -> Option<Record> {
        self.lock()
            .namespaces
            .get(namespace)
            .and_then(|ns| ns.records.get(target).cloned())
    }

    fn spawn_repair(
        &self,
        key: ObjectKey,
        target: String,
        hint: Drift,
        seen: tokio::time::Instant,
    ) {
        {
            let mut st = self.lock();
            if let Some(again) = st.inflight.get_mut(&key) {
                *again = true;
                return;
            }
            st.inflight.insert(key.clone(), false);
        }
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                this.repair(&key, &target, &hint, seen).await;
                let mut st = this.lock();
                match st.inflight.get_mut(&key) {
                    Some(again) if *again => *again = false,
                    _ => {
                        st.inflight.remove(&key);
                        return;
                    }
                }
            }
        });
    }

    fn recheck_after(&self, key: &ObjectKey, after: Duration) {
        let tx = self.inner.tx.clone();
        let key = key.clone();
        let cancel = self.inner.cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = tokio::time::sleep(after) => { let _ = tx.send(Observed::Recheck(key)).await; }
            }
        });
    }

    async fn repair(
        &self,
        key: &ObjectKey,
        target: &str,
        hint: &Drift,
        seen: tokio::time::Instant,
    ) {
        let exec = &self.inner.exec;
        let client = exec.client().clone();
        let _guard = exec.lock_target(target).await;
        if exec.namespace_closing(&key.namespace) || self.terminating(&key.namespace) {
            return;
        }
        // The watched record is current when it is of the generation the
        // executor last applied (it writes the record before that, under
        // the lock held here); otherwise it is read again.
        let current = exec.recorded(target).map(|(_, g)| g);
        let cached = self
            .cached_record(&key.namespace, target)
            .filter(|r| current == Some(r.generation));
        let secrets = Api::<Secret>::namespaced(client.clone(), &key.namespace);
        let loaded = match cached {
            Some(r) => Ok(Some(r)),
            None => desired::load(&secrets, target).await,
        };
        let record = match loaded {
            Ok(Some(r)) => r,
            Ok(None) => return,
            // The spoke's own RoleBinding is gone (so are its rights to read
            // the record): the record it last saw through its watch is the
            // durable one, unchanged since.
            Err(apply::Error::Kube { source, .. }) if apply::is_forbidden(&source) => {
                match self.cached_record(&key.namespace, target) {
                    Some(r) => r,
                    None => return,
                }
            }
            Err(e) => {
                tracing::warn!(target_ = %target, error = %e, "spoke.drift.read_failed");
                self.recheck_after(key, RETRY);
                return;
            }
        };
        let Some(object) = objects::desired(&record, exec.config())
            .into_iter()
            .find(|o| o.kind() == key.kind && o.name() == key.name)
        else {
            return;
        };
        // The watch's copy of the object: the event that brought this
        // repair is at least as new. (A copy older than the apiserver's
        // costs at most a write that changes nothing.)
        let live = match self.cached_live(key) {
            Some(l) => l,
            None => match object.live(&client, &key.namespace).await {
                Ok(l) => l.map(|v| object.observe(v)),
                Err(e) => {
                    tracing::warn!(kind = key.kind, name = %key.name, error = %e, "spoke.drift.read_failed");
                    self.recheck_after(key, RETRY);
                    return;
                }
            },
        };
        if key.kind == "Namespace" && live.is_none() {
            // Deleted with everything in it, its records included: the
            // hub's digest comparison resends its work.
            self.forget_namespace(&key.namespace);
            return;
        }
        let now = tokio::time::Instant::now();
        let Some(drift) = check::check(key.kind, FIELD_MANAGER, &object.value(), live.as_ref())
        else {
            self.lock().limiter.settled(key, now);
            return;
        };
        let manager = drift
            .manager
            .clone()
            .or_else(|| hint.manager.clone())
            .unwrap_or_else(|| "unknown".into());
        let verdict = self.lock().limiter.admit(key, now);
        let reason = format!(
            "{} {}/{}: {} (field manager {manager})",
            key.kind, key.namespace, key.name, drift.reason
        );
        if let Verdict::Contested { retry_after, first } = verdict {
            if first {
                self.note(target, record.generation, &reason, false, |s| {
                    s.contested += 1
                })
                .await;
                self.inner
                    .metrics
                    .contested
                    .get_or_create(&DriftMetrics::kind(key.kind))
                    .inc();
                tracing::warn!(kind = key.kind, namespace = %key.namespace, name = %key.name,
                    target_ = %target, reason = %drift.reason, field_manager = %manager,
                    retry_after_ms = retry_after.as_millis() as u64, "spoke.drift.contested");
            }
            self.recheck_after(key, retry_after);
            return;
        }
        if !object.restorable() {
            // Only the hub holds the value: ask it to resend the work, and
            // look again later in case the request or the resend was lost.
            let reason = format!("{reason}; resend requested from the hub");
            self.note(target, record.generation, &reason, true, |s| s.resends += 1)
                .await;
            tracing::info!(kind = key.kind, namespace = %key.namespace, name = %key.name,
                target_ = %target, generation = record.generation, reason = %drift.reason,
                field_manager = %manager, "spoke.drift.resend_requested");
            self.recheck_after(key, RESEND_RECHECK);
            return;
        }
        match object.apply(&client, &key.namespace).await {
            Ok(answered) => {
                // What the write left, so a repair that runs again before
                // the watch delivers it does not write twice.
                self.cache_live(key, strip(answered));
                self.inner
                    .metrics
                    .repair_seconds
                    .observe(seen.elapsed().as_secs_f64());
                self.inner
                    .metrics
                    .repairs
                    .get_or_create(&DriftMetrics::kind(key.kind))
                    .inc();
                self.note(target, record.generation, &reason, false, |s| {
                    s.repairs += 1
                })
                .await;
                tracing::info!(kind = key.kind, namespace = %key.namespace, name = %key.name,
                    target_ = %target, generation = record.generation, reason = %drift.reason,
                    field_manager = %manager, "spoke.drift.repaired");
            }
            Err(e) => {
                tracing::warn!(kind = key.kind, namespace = %key.namespace, name = %key.name,
                    error = %e, "spoke.drift.repair_failed");
                self.recheck_after(key, RETRY);
            }
        }
    }

    /// Records drift on `target` and reports it to the hub (typed
    /// `DriftReport`, at the record's generation).
    async fn note(
        &self,
        target: &str,
        generation: i64,
        reason: &str,
        resend: bool,
        f: impl FnOnce(&mut DriftStatus),
    ) {
        let status = {
            let mut st = self.lock();
            let s = st.status.entry(target.to_string()).or_default();
            s.last_drift_unix_millis = chrono::Utc::now().timestamp_millis();
            s.last_reason = reason.to_string();
            f(s);
            s.clone()
        };
        let report = Report {
            target: target.to_string(),
            generation,
            body: Some(report::Body::Drift(DriftReport {
                repairs: status.repairs,
                contested: status.contested,
                last_drift_unix_millis: status.last_drift_unix_millis,
                last_reason: status.last_reason,
                resend,
                resends: status.resends,
            })),
        };
        // Never blocks a repair on a slow link: a full channel drops this
        // report; the next drift report carries the totals.
        if self.inner.exec.reports().try_send(report).is_err() {
            tracing::debug!(target_ = %target, "spoke.drift.report_dropped");
        }
    }
}

/// An object's resourceVersion as a number. The apiserver hands out etcd
/// revisions, which only grow; they are compared here only between copies of
/// one object.
fn resource_version(v: &Value) -> Option<u64> {
    v.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

/// Whether `copy` is an older version of the object than `have`. Unknown
/// versions are never older: the copy is then taken as news.
fn older_than(copy: &Value, have: Option<Value>) -> bool {
    match (
        resource_version(copy),
        have.as_ref().and_then(resource_version),
    ) {
        (Some(got), Some(have)) => got < have,
        _ => false,
    }
}

fn is_record(v: &Value) -> bool {
    v.pointer("/metadata/labels")
        .and_then(|l| l.get(desired::LABEL))
        .and_then(Value::as_str)
        == Some("true")
}

/// A record Secret changed: re-index its objects and judge them.
fn reindex(
    exec: &Executor,
    key: &ObjectKey,
    live: Option<Value>,
    ns: &mut NsState,
    synced_all: bool,
) -> Vec<(ObjectKey, String, Drift)> {
    if let Some(old) = ns.record_names.remove(&key.name) {
        ns.records.remove(&old);
        ns.index.retain(|_, ix| ix.target != old);
    }
    let Some(record) = live
        .and_then(|v| serde_json::from_value::<Secret>(v).ok())
        .as_ref()
        .and_then(desired::parse)
    else {
        return Vec::new();
    };
    let mut keys = Vec::new();
    for object in objects::desired(&record, exec.config()) {
        let k = (object.kind(), object.name());
        keys.push(k.clone());
        let ix = Indexed {
            target: record.target.clone(),
            value: Json::new(&object.value()),
            credential: !object.restorable(),
        };
        if let Some(v) = ns.live.remove(&k) {
            ns.live
                .insert(k.clone(), Json::new(&ix.keep(k.0, v.value())));
        }
        ns.index.insert(k, ix);
    }
    tracing::debug!(namespace = %key.namespace, target = %record.target, generation = record.generation, "spoke.drift.record_indexed");
    ns.record_names
        .insert(key.name.clone(), record.target.clone());
    ns.records.insert(record.target.clone(), record);
    keys.iter()
        .filter_map(|k| verdict(&key.namespace, ns, k, synced_all))
        .collect()
}

/// The verdict for one indexed object from the watch cache; `None` when it
/// is not indexed, in its desired state, or its kind is not listed yet.
fn verdict(
    namespace: &str,
    ns: &NsState,
    k: &(&'static str, String),
    synced_all: bool,
) -> Option<(ObjectKey, String, Drift)> {
    let ix = ns.index.get(k)?;
    let synced = if k.0 == "Namespace" {
        synced_all
    } else {
        ns.synced.contains(k.0)
    };
    let live = ns.live.get(k).map(Json::value);
    if live.is_none() && !synced {
        return None;
    }
    judge(namespace, ix, k, &ix.value.value(), live.as_ref())
}

/// The verdict on `live` (`None`: gone) against `desired`.
fn judge(
    namespace: &str,
    ix: &Indexed,
    k: &(&'static str, String),
    desired: &Value,
    live: Option<&Value>,
) -> Option<(ObjectKey, String, Drift)> {
    let drift = check::check(k.0, FIELD_MANAGER, desired, live)?;
    Some((
        ObjectKey {
            kind: k.0,
            namespace: namespace.to_string(),
            name: k.1.clone(),
        },
        ix.target.clone(),
        drift,
    ))
}

async fn watch_kind<K>(
    api: Api<K>,
    kind: &'static str,
    namespace: Option<String>,
    tx: mpsc::Sender<Observed>,
    stop: CancellationToken,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug + Send + 'static,
{
    let selector = format!("{}={}", labels::MANAGED_BY, labels::MANAGER);
    let cfg = watcher::Config::default().labels(&selector);
    let mut stream = std::pin::pin!(watcher(api, cfg).default_backoff());
    let key = |o: &K| ObjectKey {
        kind,
        namespace: namespace.clone().unwrap_or_else(|| o.name_any()),
        name: o.name_any(),
    };
    loop {
        let ev = tokio::select! {
            () = stop.cancelled() => return,
            ev = stream.next() => match ev { Some(ev) => ev, None => return },
        };
        let msg = match ev {
            Err(e) => {
                tracing::debug!(kind, namespace = ?namespace, error = %e, "spoke.drift.watch_error");
                continue;
            }

            Ok(watcher::Event::Init) => Observed::Init {
                kind,
                namespace: namespace.clone(),
            },
            Ok(watcher::Event::InitApply(o)) => Observed::Object {
                key: key(&o),
                live: Some(strip(serde_json::to_value(&o).unwrap_or(Value::Null))),
                initial: true,
                at: tokio::time::Instant::now(),
            },
            Ok(watcher::Event::Apply(o)) => Observed::Object {
                key: key(&o),
                live: Some(strip(serde_json::to_value(&o).unwrap_or(Value::Null))),
                initial: false,
                at: tokio::time::Instant::now(),
            },
            Ok(watcher::Event::Delete(o)) => Observed::Object {
                key: key(&o),
                live: None,
                initial: false,
                at: tokio::time::Instant::now(),
            },
            Ok(watcher::Event::InitDone) => Observed::Synced {
                kind,
                namespace: namespace.clone(),
            },
        };
        if tx.send(msg).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(rv: &str) -> Value {
        json!({"metadata": {"resourceVersion": rv}, "spec": {"replicas": 0}})
    }

    #[test]
    fn an_event_older_than_the_repairs_answer_is_stale() {
        // The controller's status write (rv 99) reaches the watch after the
        // repair's answer (rv 100) was kept: it is not drift.
        assert!(older_than(&at("99"), Some(at("100"))));
        assert!(!older_than(&at("100"), Some(at("100"))));
        assert!(!older_than(&at("101"), Some(at("100"))));
    }

    #[test]
    fn unknown_versions_are_news() {
        assert!(!older_than(&at("99"), None));
        assert!(!older_than(&json!({"metadata": {}}), Some(at("100"))));
        assert!(!older_than(&at("99"), Some(json!({}))));
        assert!(!older_than(&at("not-a-number"), Some(at("100"))));
    }
}
