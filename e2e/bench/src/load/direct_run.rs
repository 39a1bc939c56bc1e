//! Kubernetes alone on one execution cluster: a tenant namespace set up
//! like the spoke's, each Harness's objects applied directly by a plain
//! client, timed until every Pod is Ready.

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use clawfed_proto::work::{HarnessWork, WorkSpec, target};
use clawfed_spoke::exec::Executor;
use futures::{StreamExt, TryStreamExt};

use super::{
    ReadyWatch, apply, harness, namespace, put, ready_times, tenant_of, watch_first_ready, work,
};

/// Kubernetes alone on one cluster, the reference clawfed is compared
/// with: a tenant namespace set up like the spoke's (by an `Executor`
/// that is then shut down), `n` Harnesses' objects applied directly by
/// a plain client ([`apply_direct`]) at a given concurrency, timed until
/// every Pod is Ready (watched). [`DirectRun::prepare`] does the set-up,
/// [`DirectRun::run`] the timed part, [`DirectRun::cleanup`] deletes the
/// namespace and waits until it is gone, so a later run sees the same
/// cluster state.
pub struct DirectRun {
    plain: kube::Client,
    ns: String,
    harnesses: Vec<HarnessWork>,
    ready_rx: tokio::sync::mpsc::UnboundedReceiver<std::time::Instant>,
    watch: tokio::task::JoinHandle<()>,
}

/// What [`DirectRun::run`] measured.
pub struct DirectTimes {
    /// Until the last object was written.
    pub applied_in: std::time::Duration,
    /// Until the last Pod was Ready.
    pub ready_in: std::time::Duration,
    /// Each Harness's writes, ms, sorted.
    pub apply_ms: Vec<f64>,
    /// Each Pod's Ready, ms after the start, sorted.
    pub ready_ms: Vec<f64>,
}

impl DirectRun {
    /// `prefix` names the tenant and namespace id (`<prefix>-<uuid>`).
    /// `plain` sets up, watches and cleans up; the timed writes go
    /// through the client given to [`DirectRun::run`].
    pub async fn prepare(
        plain: kube::Client,
        prefix: &str,
        n: usize,
        requirement_labels: BTreeMap<String, String>,
    ) -> Result<Self> {
        use clawfed_proto::link::v1::Report;
        use clawfed_spoke::config::SpokeConfig;
        use k8s_openapi::api::core::v1::Pod;
        let id = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
        let ns = clawfed_proto::naming::data_plane_namespace(&id);
        let tenant = tenant_of(prefix, &id);
        let (tx, _rx) = tokio::sync::mpsc::channel::<Report>(16);
        let setup = Executor::new(plain.clone(), SpokeConfig::default(), tx);
        let r = setup
            .apply(&work(
                1,
                target::namespace(&id),
                WorkSpec::NamespaceEnsure(namespace(&tenant, &id, n * 2 + 10)),
            ))
            .await?;
        setup.shutdown();
        if !r.applied {
            bail!("direct namespace: {}", r.reason);
        }
        let harnesses = (0..n)
            .map(|i| {
                let mut h = harness(&tenant, &id, &ns, i);
                h.requirement_labels = requirement_labels.clone();
                h
            })
            .collect();
        // Each Pod's first Ready, as the watch delivers it.
        let pods: kube::Api<Pod> = kube::Api::namespaced(plain.clone(), &ns);
        let ReadyWatch { ready_rx, watch } = watch_first_ready(
            pods,
            kube::runtime::watcher::Config::default(),
            "Pod",
            |p| Some(p.metadata.name.clone().unwrap_or_default()),
        )
        .await?;
        Ok(Self {
            plain,
            ns,
            harnesses,
            ready_rx,
            watch,
        })
    }

    /// The data-plane namespace the run writes into.
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// Applies every Harness through `writer`, `concurrency` at a time,
    /// and waits (up to `limit`) until every Pod is Ready.
    pub async fn run(
        &mut self,
        writer: &kube::Client,
        concurrency: usize,
        with_record: bool,
        limit: std::time::Duration,
    ) -> Result<DirectTimes> {
        let n = self.harnesses.len();
        let start = std::time::Instant::now();
        let mut apply_ms = apply_direct(
            writer,
            std::mem::take(&mut self.harnesses),
            concurrency,
            with_record,
        )
        .await?;
        let applied_in = start.elapsed();
        let ns = &self.ns;
        let mut ready_ms = ready_times(&mut self.ready_rx, n, start, limit, "Pod", |k| {
            anyhow::anyhow!("direct: {k} of {n} Pods Ready in {ns} after {limit:?}")
        })
        .await?;
        let ready_in = start.elapsed();
        apply_ms.sort_by(|a, b| a.total_cmp(b));
        ready_ms.sort_by(|a, b| a.total_cmp(b));
        Ok(DirectTimes {
            applied_in,
            ready_in,
            apply_ms,
            ready_ms,
        })
    }

    /// Deletes the namespace and waits (up to 300 s) until it is gone.
    pub async fn cleanup(self) {
        use k8s_openapi::api::core::v1::Namespace;
        self.watch.abort();
        let namespaces: kube::Api<Namespace> = kube::Api::all(self.plain);
        let _ = namespaces
            .delete(&self.ns, &kube::api::DeleteParams::background())
            .await;
        let gone = tokio::time::timeout(std::time::Duration::from_secs(300), async {
            while namespaces.get_opt(&self.ns).await.ok().flatten().is_some() {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
        })
        .await;
        if gone.is_err() {
            eprintln!(
                "namespace {} still terminating after 300 s; going on",
                self.ns
            );
        }
    }
}

/// Kubernetes alone, the reference: the objects of each Harness the
/// spoke writes for an ordinary revision (ServiceAccount, credential
/// Secret, Service, Deployment and, `with_record`, the desired-state
/// record Secret; built by the spoke's own builders), server-side
/// applied by a plain client one after another per Harness, as
/// `kubectl apply --server-side` would, `concurrency` Harnesses at a
/// time. Returns each Harness's time, ms.
pub async fn apply_direct(
    client: &kube::Client,
    harnesses: Vec<HarnessWork>,
    concurrency: usize,
    with_record: bool,
) -> Result<Vec<f64>> {
    use clawfed_spoke::apply::harness as build;
    use clawfed_spoke::drift::desired;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
    futures::stream::iter(harnesses)
        .map(|h| async move {
            let start = std::time::Instant::now();
            let t = target::harness(&h.namespace_id, &h.agent, h.revision);
            let ns = h.data_plane_namespace.clone();
            let ns = ns.as_str();
            put::<ServiceAccount>(client, ns, &build::service_account(&h, &t, 1)).await?;
            put::<Secret>(client, ns, &build::credential_secret(&h, &t, 1)).await?;
            put::<Service>(client, ns, &build::service(&h, &t, 1)).await?;
            put::<Deployment>(client, ns, &build::deployment(&h, &t, 1)).await?;
            if with_record {
                let tenant = h.tenant.clone();
                let work = apply(1, h);
                let record = desired::from_work(&work, ns, false, Some(1))?;
                put::<Secret>(client, ns, &desired::object(&tenant, &record)?).await?;
            }
            Ok(start.elapsed().as_secs_f64() * 1e3)
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<f64>>()
        .await
}
