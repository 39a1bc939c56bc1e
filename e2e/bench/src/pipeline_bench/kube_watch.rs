//! Kubernetes timing: the bench's own watches of Deployments and Pods,
//! timestamping when each Agent's Harness (and Gateway) objects were seen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use super::now_ms;

/// When the bench's own watches saw a Harness's objects (wall-clock ms).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct KubeTimes {
    pub(super) deployment: Option<f64>,
    pub(super) pod: Option<f64>,
    pub(super) pod_ready: Option<f64>,
    /// The Gateway's Pod Ready in the control cluster (Gateways on).
    pub(super) gateway_deployment: Option<f64>,
    pub(super) gateway_pod_ready: Option<f64>,
}

pub(super) type Times = Arc<Mutex<HashMap<(usize, String), KubeTimes>>>;

fn agent_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<String> {
    meta.labels
        .as_ref()?
        .get(clawfed_proto::labels::AGENT)
        .cloned()
}

/// Where a watch looks: a Harness cluster (by index) or the control
/// cluster's Gateway namespace.
#[derive(Debug, Clone, Copy)]
pub(super) enum Watched {
    Harness(usize),
    Gateway,
}

/// Watches Deployments (`pods == false`) or Pods in `ns`; signals `synced`
/// after the initial list. Gateway events are filed under the cluster the
/// Agent's Harness is placed on (`placed`), so one entry holds both.
pub(super) fn spawn_watch(
    (client, ns, watched, pods): (Client, String, Watched, bool),
    times: Times,
    placed: Arc<Mutex<HashMap<String, usize>>>,
    synced: tokio::sync::oneshot::Sender<()>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let record = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
                      ready: bool| {
            if meta.deletion_timestamp.is_some() {
                return;
            }
            let Some(agent) = agent_of(meta) else { return };
            let t = now_ms();
            let cluster = match watched {
                Watched::Harness(c) => c,
                Watched::Gateway => {
                    // The shared Gateway namespace holds other runs' Agents too.
                    let placed = placed.lock().unwrap_or_else(|p| p.into_inner());
                    let Some(c) = placed.get(&agent) else { return };
                    *c
                }
            };
            let mut m = times.lock().unwrap_or_else(|p| p.into_inner());
            let e = m.entry((cluster, agent)).or_default();
            match (watched, pods) {
                (Watched::Harness(_), true) => {
                    e.pod.get_or_insert(t);
                    if ready {
                        e.pod_ready.get_or_insert(t);
                    }
                }
                (Watched::Harness(_), false) => {
                    e.deployment.get_or_insert(t);
                }
                (Watched::Gateway, true) => {
                    if ready {
                        e.gateway_pod_ready.get_or_insert(t);
                    }
                }
                (Watched::Gateway, false) => {
                    e.gateway_deployment.get_or_insert(t);
                }
            }
        };
        if pods {
            let api: Api<Pod> = Api::namespaced(client, &ns);
            watch_until(api, &stop, synced, |p| {
                let ready = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                record(&p.metadata, ready);
            })
            .await;
        } else {
            let api: Api<Deployment> = Api::namespaced(client, &ns);
            watch_until(api, &stop, synced, |d| record(&d.metadata, false)).await;
        }
    })
}

/// Watches `api` until `stop` or the watch's end, calling `seen` on each
/// object applied and signalling `synced` after the initial list.
async fn watch_until<K>(
    api: Api<K>,
    stop: &CancellationToken,
    synced: tokio::sync::oneshot::Sender<()>,
    mut seen: impl FnMut(&K),
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut synced = Some(synced);
    let mut s = std::pin::pin!(watcher(api, watcher::Config::default()));
    loop {
        let ev = tokio::select! {
            _ = stop.cancelled() => break,
            ev = s.next() => ev,
        };
        match ev {
            Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => seen(&o),
            Some(Ok(watcher::Event::InitDone)) => {
                if let Some(tx) = synced.take() {
                    let _ = tx.send(());
                }
            }
            Some(Ok(_)) => {}
            Some(Err(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            None => break,
        }
    }
}
