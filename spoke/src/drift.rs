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
//! - `watch.rs`: the watches.
//! - `index.rs`: the event index (records, desired objects, live copies).
//! - `repair.rs`: repair tasks and drift reports.
//! - this file: the [`Repairer`], its status and metrics.

pub mod check;
pub mod desired;
pub mod limit;
pub mod objects;

mod index;
mod repair;
mod watch;

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::exec::Executor;
use index::State;
use limit::{Budget, Limiter};
use watch::{Observed, watch_kind};

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
        let ns_watch = tokio::spawn(
            watch_kind::<Namespace>(
                Api::all(client),
                "Namespace",
                None,
                self.inner.tx.clone(),
                self.inner.cancel.clone(),
            )
            .instrument(tracing::info_span!("drift.watch", kind = "Namespace")),
        );
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
}
