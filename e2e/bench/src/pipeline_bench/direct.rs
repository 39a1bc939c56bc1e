//! Kubernetes alone, the reference: the throughput phase's Harnesses (and
//! Gateways) applied by plain clients before clawfed's run.

use std::time::{Duration, Instant};

use anyhow::Result;
use clawfed_bench::load;
use clawfed_bench::procfs::CpuSpan;
use clawfed_hub::config::Config as HubConfig;
use clawfed_tests::control_env;

use super::clusters::{ExecCluster, spoke_client};
use super::gateway_world::GatewayWorld;
use super::{Args, GATEWAY_IMAGE, sorted};

/// The reference: what the execution clusters' apiservers (and, Gateways
/// on, the control cluster's) do alone with the throughput phase's
/// Harnesses (and Gateways).
pub(super) struct Direct {
    pub(super) count: usize,
    pub(super) concurrency: usize,
    /// First write → last Pod Ready, over all clusters.
    pub(super) ready_in: Duration,
    /// Each Harness's first write → its Pod Ready, ms, sorted (queueing
    /// behind the concurrency limit included, as clawfed's deploy → Active
    /// includes its queueing).
    pub(super) ready_ms: Vec<f64>,
    /// Gateways on: the control cluster's share, run at the same time.
    pub(super) gateways: Option<DirectGatewayFigures>,
    /// CPU over the run (the clusters share the machine's cores).
    pub(super) cpu: String,
}

/// Kubernetes alone in the control cluster (Gateways on).
pub(super) struct DirectGatewayFigures {
    pub(super) count: usize,
    pub(super) concurrency: usize,
    /// First write → each Gateway Pod Ready, ms, sorted.
    pub(super) ready_ms: Vec<f64>,
    /// First write → the last Gateway Pod Ready.
    pub(super) ready_in: Duration,
    /// First write → the last Gateway object written.
    pub(super) applied_in: Duration,
    /// Each Gateway's applies, ms, sorted.
    pub(super) apply_ms: Vec<f64>,
}

impl Direct {
    pub(super) fn rate(&self) -> f64 {
        self.count as f64 / self.ready_in.as_secs_f64()
    }
}

/// Kubernetes alone, before clawfed's run on the same clusters: as many
/// Harnesses as the throughput phase, placed alternately like it, their
/// objects (the spoke's own builders: ServiceAccount, credential Secret,
/// Service, Deployment, desired-state record) applied by a plain client
/// acting as the spoke's ServiceAccount (so API priority and fairness treats
/// both alike), at the spoke's starting apply limit per cluster, all
/// clusters at once; timed until every Pod is Ready. Namespaces are deleted
/// and gone before clawfed's run.
///
/// Gateways on (`gateway_world`): at the same time, each Agent's Gateway
/// objects (the hub's builders, as `Gateways::ensure` writes them) applied
/// to the control cluster by a plain client acting as the hub's
/// ServiceAccount, as many at a time as the hub runs Gateway ensures
/// (`worker.gatewayBatchSize`); timed until the later of the last Harness
/// and the last Gateway Pod Ready. The Gateways and their PVs are deleted before
/// clawfed's run.
pub(super) async fn direct(
    args: &Args,
    clusters: &[ExecCluster],
    gateway_world: Option<&GatewayWorld>,
) -> Result<Direct> {
    let n = clusters.len();
    let concurrency = clawfed_spoke::pressure::ApplyLimit::START;
    let labels = std::collections::BTreeMap::from([(
        "sandbox.clawfed.io/class".to_owned(),
        "standard".to_owned(),
    )]);
    let mut runs = Vec::new();
    for (c, cluster) in clusters.iter().enumerate() {
        let share = (0..args.throughput_agents).filter(|i| i % n == c).count();
        let writer = spoke_client(cluster).await?;
        let run =
            load::DirectRun::prepare(cluster.admin.clone(), "pbdirect", share, labels.clone())
                .await?;
        runs.push((run, writer));
    }
    let gateway_concurrency = HubConfig::default().worker.gateway_batch_size as usize;
    let mut gateway_run = match gateway_world {
        Some(world) => {
            let run = load::DirectGateways::prepare(
                world.control.admin(),
                control_env::gateway_config(),
                "pbdirect",
                "pbd",
                args.throughput_agents,
                GATEWAY_IMAGE,
                |agent| clawfed_proto::work::harness::service_url(agent, 1, "oce-pbdirect", 8080),
            )
            .await?;
            Some((run, control_env::hub_client(&world.control).await?))
        }
        None => None,
    };
    let limit = Duration::from_secs(args.throughput_timeout_seconds);
    let cpu = CpuSpan::start();
    let started = Instant::now();
    let harnesses = futures::future::join_all(
        runs.iter_mut()
            .map(|(run, writer)| run.run(writer, concurrency, true, limit)),
    );
    let gateways = async {
        match &mut gateway_run {
            Some((run, writer)) => Some(run.run(writer, gateway_concurrency, limit).await),
            None => None,
        }
    };
    let (results, gateway_result) = futures::future::join(harnesses, gateways).await;
    let ready_in = started.elapsed();
    let cpu = cpu.note();
    for (run, _) in runs {
        run.cleanup().await;
    }
    if let Some((run, _)) = gateway_run {
        run.cleanup().await;
    }
    let mut ready_ms = Vec::new();
    for r in results {
        ready_ms.extend(r?.ready_ms);
    }
    let gateways = match gateway_result {
        Some(r) => {
            let t = r?;
            Some(DirectGatewayFigures {
                count: t.ready_ms.len(),
                concurrency: gateway_concurrency,
                ready_ms: t.ready_ms,
                ready_in: t.ready_in,
                applied_in: t.applied_in,
                apply_ms: t.apply_ms,
            })
        }
        None => None,
    };
    Ok(Direct {
        count: args.throughput_agents,
        concurrency,
        ready_in,
        ready_ms: sorted(ready_ms),
        gateways,
        cpu,
    })
}
