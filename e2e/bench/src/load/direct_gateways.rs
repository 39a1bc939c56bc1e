//! Kubernetes alone for the control cluster's share of a run with Gateways
//! on: each Agent's Gateway objects applied directly by a plain client,
//! timed until every Gateway Pod is Ready.

use anyhow::Result;
use futures::{StreamExt, TryStreamExt};

use super::{ReadyWatch, agent_of, put, ready_times, watch_first_ready};

/// Kubernetes alone for the control cluster's share of a run with
/// Gateways on: each Agent's Gateway objects (ServiceAccount, transport
/// Secret, PVC, NetworkPolicy, Service, Deployment: what the hub's
/// `Gateways::ensure` writes, built by the hub's own builders in
/// `clawfed_hub::gateway::objects`) applied directly by a plain client,
/// timed until every Gateway Pod is Ready (watched). The route is left
/// out: the hub writes it at activation, after both Pods are Ready.
/// [`DirectGateways::prepare`] makes the pre-bound PVs and starts the
/// watch, [`DirectGateways::run`] is the timed part,
/// [`DirectGateways::cleanup`] deletes the Gateways and PVs.
pub struct DirectGateways {
    admin: kube::Client,
    config: clawfed_hub::gateway::GatewayConfig,
    /// The run's tenant id: names its Gateway namespace.
    namespace_id: String,
    specs: Vec<clawfed_hub::gateway::GatewaySpec>,
    pvs: Vec<String>,
    ready_rx: tokio::sync::mpsc::UnboundedReceiver<std::time::Instant>,
    watch: tokio::task::JoinHandle<()>,
}

/// What [`DirectGateways::run`] measured.
pub struct GatewayTimes {
    /// Until the last object was written.
    pub applied_in: std::time::Duration,
    /// Each Gateway's six applies, ms (queueing behind the concurrency
    /// limit excluded), sorted.
    pub apply_ms: Vec<f64>,
    /// Until the last Gateway Pod was Ready.
    pub ready_in: std::time::Duration,
    /// Each Gateway Pod's Ready, ms after the start, sorted.
    pub ready_ms: Vec<f64>,
}

impl DirectGateways {
    /// `n` Gateways of tenant `tenant`, Agents `<prefix><i>-<8 hex>`,
    /// in `config`'s namespace of the control cluster `admin` reaches;
    /// `harness_endpoint(i)` is Agent i's Harness URL.
    pub async fn prepare(
        admin: kube::Client,
        config: clawfed_hub::gateway::GatewayConfig,
        tenant: &str,
        prefix: &str,
        n: usize,
        image: &str,
        harness_endpoint: impl Fn(&str) -> String,
    ) -> Result<Self> {
        use clawfed_hub::gateway::{GATEWAY_ROLE, GatewaySpec, Transport};
        use k8s_openapi::api::core::v1::Pod;
        let run = uuid::Uuid::new_v4().simple().to_string();
        // A Gateway namespace of this run's own (a tenant the hub would
        // make it for), created here as clawfed's hub would.
        let namespace_id = format!("bench-direct-{run}");
        let gateway_ns =
            clawfed_proto::naming::gateway_namespace(&config.namespace_prefix, &namespace_id);
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
            kube::Api::all(admin.clone());
        namespaces
            .create(
                &kube::api::PostParams::default(),
                &clawfed_hub::gateway::objects::gateway_namespace(
                    &gateway_ns,
                    &namespace_id,
                    tenant,
                ),
            )
            .await?;
        let specs: Vec<GatewaySpec> = (0..n)
            .map(|i| {
                let agent = format!("{prefix}{i}-{}", &run[..8]);
                GatewaySpec {
                    tenant: tenant.to_owned(),
                    namespace_id: namespace_id.clone(),
                    harness_endpoint: harness_endpoint(&agent),
                    revision: 1,
                    revision_id: format!("rev-{agent}"),
                    image: Some(image.to_owned()),
                    tunnel_proxy: None,
                    tunnel_ca_pem: None,
                    transport: Transport {
                        gateway_token: format!("bench-{run}-{i}"),
                        tls: None,
                    },
                    runtime: None,
                    agent,
                }
            })
            .collect();
        // The test clusters have no provisioner: a PV bound in advance
        // to each PVC, as the pipeline bench does for clawfed's run.
        let mut pvs = Vec::with_capacity(n);
        for spec in &specs {
            pvs.push(
                clawfed_tests::control_env::volume_for(&admin, &gateway_ns, &spec.agent).await?,
            );
        }
        let agents: std::collections::HashSet<String> =
            specs.iter().map(|s| s.agent.clone()).collect();
        let pods: kube::Api<Pod> = kube::Api::namespaced(admin.clone(), &gateway_ns);
        let selector = format!("{}={GATEWAY_ROLE}", clawfed_proto::labels::WORKLOAD_ROLE);
        let ReadyWatch { ready_rx, watch } = watch_first_ready(
            pods,
            kube::runtime::watcher::Config::default().labels(&selector),
            "Gateway Pod",
            move |p| Some(agent_of(p)).filter(|a| agents.contains(a)),
        )
        .await?;
        Ok(Self {
            admin,
            config,
            namespace_id,
            specs,
            pvs,
            ready_rx,
            watch,
        })
    }

    /// How many Gateways the run applies.
    pub fn len(&self) -> usize {
        self.specs.len()
    }

    /// Whether the run applies none.
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Applies every Gateway's objects through `writer`, `concurrency`
    /// Gateways at a time (each one's objects one after another, in
    /// `ensure`'s order), and waits (up to `limit`) until every Gateway
    /// Pod is Ready.
    pub async fn run(
        &mut self,
        writer: &kube::Client,
        concurrency: usize,
        limit: std::time::Duration,
    ) -> Result<GatewayTimes> {
        let n = self.specs.len();
        let start = std::time::Instant::now();
        let mut apply_ms = apply_gateways(writer, &self.config, &self.specs, concurrency).await?;
        apply_ms.sort_by(|a, b| a.total_cmp(b));
        let applied_in = start.elapsed();
        let mut ready_ms = ready_times(&mut self.ready_rx, n, start, limit, "Gateway Pod", |k| {
            anyhow::anyhow!("direct: {k} of {n} Gateway Pods Ready after {limit:?}")
        })
        .await?;
        let ready_in = start.elapsed();
        ready_ms.sort_by(|a, b| a.total_cmp(b));
        Ok(GatewayTimes {
            applied_in,
            apply_ms,
            ready_in,
            ready_ms,
        })
    }

    /// Deletes every Gateway (waiting for its PVC to go) and its PV.
    pub async fn cleanup(self) {
        self.watch.abort();
        let gateways =
            match clawfed_hub::gateway::Gateways::new(self.admin.clone(), self.config.clone()) {
                Ok(g) => g,
                Err(e) => {
                    eprintln!("direct Gateways cleanup: {e}");
                    return;
                }
            };
        let tenant = gateways.tenant(&self.namespace_id);
        let tenant = &tenant;
        let failed: Vec<String> = futures::stream::iter(&self.specs)
            .map(|s| async move {
                tenant
                    .delete(&s.tenant, &s.agent)
                    .await
                    .err()
                    .map(|e| format!("{}: {e}", s.agent))
            })
            .buffer_unordered(8)
            .filter_map(|e| async move { e })
            .collect()
            .await;
        for e in failed {
            eprintln!("deleting a direct Gateway: {e}");
        }
        if let Err(e) = gateways.delete_namespace(&self.namespace_id).await {
            eprintln!("deleting the direct Gateway namespace: {e}");
        }
        for pv in &self.pvs {
            clawfed_tests::control_env::delete_volume(&self.admin, pv).await;
        }
    }
}

/// The objects `Gateways::ensure` writes for each of `specs` (the hub's
/// builders), server-side applied by a plain client as
/// [`DIRECT_MANAGER`], one Gateway's objects after another,
/// `concurrency` Gateways at a time. Returns each Gateway's time, ms.
///
/// [`DIRECT_MANAGER`]: super::DIRECT_MANAGER
pub async fn apply_gateways(
    client: &kube::Client,
    config: &clawfed_hub::gateway::GatewayConfig,
    specs: &[clawfed_hub::gateway::GatewaySpec],
    concurrency: usize,
) -> Result<Vec<f64>> {
    use clawfed_hub::gateway::objects;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret, Service, ServiceAccount};
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    futures::stream::iter(specs)
        .map(|spec| async move {
            let namespace = objects::namespace_of(spec, config);
            let ns = namespace.as_str();
            let start = std::time::Instant::now();
            let image = objects::validate(spec, config)?;
            put::<ServiceAccount>(client, ns, &objects::service_account(spec, config)).await?;
            put::<Secret>(client, ns, &objects::transport_secret(spec, config)).await?;
            put::<PersistentVolumeClaim>(client, ns, &objects::data_claim(spec, config)).await?;
            put::<NetworkPolicy>(client, ns, &objects::network_policy(spec, config)).await?;
            put::<Service>(client, ns, &objects::service(spec, config)).await?;
            put::<Deployment>(client, ns, &objects::deployment(spec, config, &image)).await?;
            Ok(start.elapsed().as_secs_f64() * 1e3)
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<f64>>()
        .await
}
