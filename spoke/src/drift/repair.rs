//! Repair tasks: one per drifted object at a time, under the target's
//! executor lock; the record and the live object read again, the verdict
//! budgeted ([`Limiter`](super::limit::Limiter)), the object re-applied or
//! its work's resend asked of the hub, and the drift reported.

use std::time::Duration;

use clawfed_proto::link::v1::{DriftReport, Report, report};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::Value;
use tracing::Instrument;

use super::check::{self, Drift};
use super::desired::{self, Record};
use super::index::{Json, older_than};
use super::limit::Verdict;
use super::objects;
use super::watch::{Observed, strip};
use super::{DriftMetrics, DriftStatus, ObjectKey, Repairer};
use crate::apply::{self, FIELD_MANAGER};

/// Retry delay after a failed read or write of a repair.
const RETRY: Duration = Duration::from_secs(1);
/// How long a resend the spoke asked for may take before it asks again
/// (the link may have been down; the per-object budget still applies).
const RESEND_RECHECK: Duration = Duration::from_secs(30);

impl Repairer {
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

    pub(super) fn spawn_repair(
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
        let span = tracing::info_span!(
            "drift.repair",
            kind = key.kind,
            namespace = %key.namespace,
            name = %key.name,
            target = %target
        );
        tokio::spawn(
            async move {
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
            }
            .instrument(span),
        );
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
        }
        .in_current_span());
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
            Err(apply::Error::Kube(e)) if e.is_forbidden() => {
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
