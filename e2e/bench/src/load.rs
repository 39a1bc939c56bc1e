//! The spoke benchmarks' load: one tenant namespace and N ordinary Harness
//! revisions applied through the real `Executor`.
//!
//! Kubernetes alone, the reference the benchmarks compare clawfed with:
//! [`DirectRun`] on an execution cluster (in `direct_run`),
//! [`DirectGateways`] in the control cluster (in `direct_gateways`).

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Result, bail};
use clawfed_proto::link::v1::Work;
use clawfed_proto::work::{
    ContainerDefaults, HarnessWork, NamespaceWork, SecretData, WorkSpec, target,
};
use clawfed_spoke::exec::Executor;
use futures::{StreamExt, TryStreamExt};

mod direct_gateways;
mod direct_run;

pub use direct_gateways::{DirectGateways, GatewayTimes, apply_gateways};
pub use direct_run::{DirectRun, DirectTimes, apply_direct};

/// The Harness image (a digest the pod runner never starts: kwok Pods).
pub const IMAGE: &str = "registry.invalid/openclaw@sha256:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd";

/// A tenant name unique to the run (a deleting namespace of an earlier
/// run still claims its own tenant, and the spoke fails closed on two
/// claims).
pub fn tenant_of(prefix: &str, id: &str) -> String {
    format!("{prefix}-{}", &id[id.len().saturating_sub(8)..])
}

/// Revision 1 of Agent `a<i>` in namespace `ns` of tenant `tenant`.
pub fn harness(tenant: &str, id: &str, ns: &str, i: usize) -> HarnessWork {
    HarnessWork {
        revision_id: format!("rev-{i}"),
        image: IMAGE.into(),
        credential: SecretData(BTreeMap::from([(
            "CLAWFED_MODEL_API_KEY".into(),
            "bench".into(),
        )])),
        dedicated: false,
        // 1,000 ClusterIPs do not fit the test cluster's Service CIDR.
        headless_service: true,
        ..clawfed_tests::spoke_env::harness_work(tenant, id, ns, &format!("a{i:04}"))
    }
}

/// The tenant's namespace work: room for `pods` Pods, small defaults.
pub fn namespace(tenant: &str, id: &str, pods: usize) -> NamespaceWork {
    NamespaceWork {
        tenant: tenant.into(),
        namespace_id: id.into(),
        quota: BTreeMap::from([("pods".into(), pods.to_string())]),
        container_defaults: ContainerDefaults {
            default_request: BTreeMap::from([
                ("cpu".into(), "10m".into()),
                ("memory".into(), "16Mi".into()),
            ]),
            default_limit: BTreeMap::new(),
        },
        ..Default::default()
    }
}

/// A piece of work at generation 1.
pub fn work(sequence: u64, target: String, spec: WorkSpec) -> Work {
    Work {
        sequence,
        target,
        generation: 1,
        kind: spec.kind().as_str().into(),
        spec: spec.encode(),
    }
}

/// The Harness apply of `h`.
pub fn apply(sequence: u64, h: HarnessWork) -> Work {
    work(
        sequence,
        target::harness(&h.namespace_id, &h.agent, h.revision),
        WorkSpec::HarnessApply(Box::new(h)),
    )
}

/// Applies `works` through `exec`, `concurrency` at a time; an error
/// or a refusal ends it. Returns each apply's time, ms.
pub async fn apply_all(
    exec: &Arc<Executor>,
    works: Vec<Work>,
    concurrency: usize,
) -> Result<Vec<f64>> {
    futures::stream::iter(works)
        .map(|w| {
            let exec = exec.clone();
            async move {
                let start = std::time::Instant::now();
                let r = exec.apply(&w).await?;
                if !r.applied {
                    bail!("{}: {}", w.target, r.reason);
                }
                Ok(start.elapsed().as_secs_f64() * 1e3)
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<f64>>()
        .await
}

/// Server-side applies `obj` in `ns` as [`DIRECT_MANAGER`] (force):
/// one write of the Kubernetes-alone reference.
async fn put<K>(client: &kube::Client, ns: &str, obj: &K) -> Result<()>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug,
    <K as kube::Resource>::DynamicType: Default,
{
    use kube::api::{Patch, PatchParams};
    let api: kube::Api<K> = kube::Api::namespaced(client.clone(), ns);
    let name = obj.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(DIRECT_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await?;
    Ok(())
}

/// Whether `p` is Ready and not being deleted.
pub fn pod_ready(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Agent `p` belongs to (its Agent label); empty when unlabelled.
pub fn agent_of(p: &k8s_openapi::api::core::v1::Pod) -> String {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(clawfed_proto::labels::AGENT))
        .cloned()
        .unwrap_or_default()
}

/// The first-Ready times of a direct run's Pods, as a watch delivers them.
struct ReadyWatch {
    ready_rx: tokio::sync::mpsc::UnboundedReceiver<std::time::Instant>,
    watch: tokio::task::JoinHandle<()>,
}

/// Watches `pods` (selected by `config`) and sends the time each Pod the
/// run counts first turns Ready, `key` naming it (None: not counted).
/// Returns once the watch has synced (30 s at the most; `what` names the
/// Pods in the error).
async fn watch_first_ready(
    pods: kube::Api<k8s_openapi::api::core::v1::Pod>,
    config: kube::runtime::watcher::Config,
    what: &str,
    key: impl Fn(&k8s_openapi::api::core::v1::Pod) -> Option<String> + Send + 'static,
) -> Result<ReadyWatch> {
    use kube::runtime::watcher;
    let (ready_tx, ready_rx) = tokio::sync::mpsc::unbounded_channel();
    let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(async move {
        let mut synced = Some(synced_tx);
        let mut ready = std::collections::HashSet::new();
        let mut stream = std::pin::pin!(watcher(pods, config));
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    if let Some(k) = key(&p)
                        && pod_ready(&p)
                        && ready.insert(k)
                    {
                        let _ = ready_tx.send(std::time::Instant::now());
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = synced.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
    });
    tokio::time::timeout(std::time::Duration::from_secs(30), synced_rx)
        .await
        .map_err(|_| anyhow::anyhow!("direct: the {what} watch did not sync in 30 s"))?
        .map_err(|_| anyhow::anyhow!("direct: the {what} watch ended"))?;
    Ok(ReadyWatch { ready_rx, watch })
}

/// Waits (until `limit` after `start`) for `n` first-Ready times from
/// `ready_rx`; each in ms since `start`, in arrival order. `late` is the
/// error when the deadline comes with that many Ready.
async fn ready_times(
    ready_rx: &mut tokio::sync::mpsc::UnboundedReceiver<std::time::Instant>,
    n: usize,
    start: std::time::Instant,
    limit: std::time::Duration,
    what: &str,
    late: impl FnOnce(usize) -> anyhow::Error,
) -> Result<Vec<f64>> {
    let mut ready_ms = Vec::with_capacity(n);
    let deadline = tokio::time::Instant::from_std(start + limit);
    while ready_ms.len() < n {
        match tokio::time::timeout_at(deadline, ready_rx.recv()).await {
            Ok(Some(at)) => ready_ms.push(at.saturating_duration_since(start).as_secs_f64() * 1e3),
            Ok(None) => bail!("direct: the {what} watch ended"),
            Err(_) => return Err(late(ready_ms.len())),
        }
    }
    Ok(ready_ms)
}

/// Field manager of [`apply_direct`]'s writes.
pub const DIRECT_MANAGER: &str = "bench-direct";
