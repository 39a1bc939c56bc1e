//! The watches: one per managed kind and data-plane namespace, plus the
//! cluster-wide one of managed Namespaces, all filtered to the spoke's
//! manager label, each turning its events into [`Observed`] for the index.

use std::fmt::Debug;

use clawfed_proto::labels;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, LimitRange, ResourceQuota, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{ObjectKey, Repairer};

pub(super) enum Observed {
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

pub(super) fn strip(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    v
}

impl Repairer {
    pub(super) fn watch_namespace(&self, namespace: &str, stop: CancellationToken) {
        let c = self.inner.exec.client().clone();
        let tx = self.inner.tx.clone();
        let ns = Some(namespace.to_string());
        macro_rules! watch {
            ($t:ty, $kind:literal) => {
                tokio::spawn(
                    watch_kind::<$t>(
                        Api::namespaced(c.clone(), namespace),
                        $kind,
                        ns.clone(),
                        tx.clone(),
                        stop.clone(),
                    )
                    .instrument(tracing::info_span!(
                        "drift.watch",
                        kind = $kind,
                        namespace
                    )),
                );
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

    pub(super) fn forget_namespace(&self, namespace: &str) {
        if let Some(ns) = self.lock().namespaces.remove(namespace) {
            ns.stop.cancel();
            tracing::debug!(namespace, "spoke.drift.namespace_gone");
        }
    }
}

pub(super) async fn watch_kind<K>(
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
