//! The event index: per managed namespace, its desired-state records, the
//! desired objects they name (indexed by kind and name), the watch's
//! copies of the live ones; [`Repairer::handle`] takes one watch event in
//! and judges what it touched.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::Secret;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::check::{self, Drift};
use super::desired::{self, Record};
use super::limit::Limiter;
use super::objects;
use super::watch::Observed;
use super::{DriftStatus, ObjectKey, Repairer};
use crate::apply::FIELD_MANAGER;
use crate::exec::Executor;

/// A desired object and the JSON it is compared by.
/// A JSON document kept as text: a thousand revisions' objects as parsed
/// `Value` trees took several times the memory of their text, and each is
/// read only when an event for its object comes.
#[derive(Clone)]
pub(super) struct Json(Box<str>);

impl Json {
    pub(super) fn new(v: &Value) -> Self {
        Json(v.to_string().into_boxed_str())
    }

    pub(super) fn value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

pub(super) struct Indexed {
    target: String,
    /// The desired JSON live copies are compared with.
    value: Json,
    /// The credential Secret: its copy holds digests, never values.
    credential: bool,
}

impl Indexed {
    /// The copy of `live` the repairer keeps: cut down to what the verdict
    /// reads (`check::compact`), a credential's values as digests.
    pub(super) fn keep(&self, kind: &str, live: Value) -> Value {
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
pub(super) struct NsState {
    pub(super) stop: CancellationToken,
    pub(super) records: HashMap<String, Record>,
    /// Record Secret name -> target.
    pub(super) record_names: HashMap<String, String>,
    pub(super) index: HashMap<(&'static str, String), Indexed>,
    pub(super) live: HashMap<(&'static str, String), Json>,
    pub(super) synced: HashSet<&'static str>,
    pub(super) listing: HashMap<&'static str, HashSet<String>>,
}

pub(super) struct State {
    pub(super) namespaces: HashMap<String, NsState>,
    pub(super) namespaces_synced: bool,
    pub(super) limiter: Limiter<ObjectKey>,
    /// Repairs running; `true` when another event came meanwhile.
    pub(super) inflight: HashMap<ObjectKey, bool>,
    pub(super) status: HashMap<String, DriftStatus>,
}

impl Repairer {
    pub(super) fn handle(&self, ev: Observed) {
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
pub(super) fn older_than(copy: &Value, have: Option<Value>) -> bool {
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
