//! The spoke process: builds the applier, the link, the drift repairer and
//! the metrics listener from [`Options`], and runs them until `shutdown`.
//! `main` only parses the flags, sets up logging and turns SIGTERM into
//! `shutdown`, like the hub's `server`.

mod options;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::drift::{DriftMetrics, Repairer};
use crate::link::hubs::Hubs;
use crate::link::identity::{FileIdentityStore, IdentityStore, SecretIdentityStore};
use crate::link::ledger::FileLedger;
use crate::link::{ClusterIdentity, Link, LinkConfig, LinkError, SpokeMetrics, WorkApplier};
use crate::pressure::ApplyLimit;
use crate::provider::SandboxDriver;
use crate::tunnel::resolve::KubeHarnessDialer;
use crate::tunnel::{TunnelSettings, Tunnels};
pub use options::{Applier, Containment, Options, SandboxDriverKind};
use options::{flag, read};

/// Why the spoke could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A flag's value cannot be used.
    #[error("{flag}: {reason}")]
    Flag { flag: &'static str, reason: String },
    /// The file a flag names cannot be read.
    #[error("{flag} {}", path.display())]
    File {
        flag: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The proxy to the hub is misconfigured.
    #[error(transparent)]
    Proxy(#[from] crate::link::proxy::ProxyConfigError),
    /// The execution cluster's kubeconfig cannot be loaded.
    #[error(transparent)]
    Kubeconfig(#[from] clawfed_kube::kubeconfig::KubeconfigError),
    /// In-cluster credentials are missing (outside a cluster, without
    /// `--kubeconfig`).
    #[error(
        "in-cluster credentials (the spoke's ServiceAccount) are not available; outside a cluster pass --kubeconfig FILE"
    )]
    InCluster(#[source] kube::config::InClusterError),
    /// A request to the execution cluster's apiserver failed.
    #[error("{what}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// A listener cannot be bound.
    #[error("{flag} {addr}")]
    Listen {
        flag: &'static str,
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The link ended with an error.
    #[error(transparent)]
    Link(#[from] LinkError),
}

/// Runs the spoke until `shutdown` is cancelled (or the link fails), then
/// drains its tasks.
pub async fn run(opts: Options, shutdown: CancellationToken) -> Result<(), ServerError> {
    opts.check_sandbox()?;
    let hubs = opts.hub_addresses()?;
    let ca_pem = read("--ca-file", &opts.ca_file)?;
    let bootstrap_token = opts.bootstrap_token()?;
    // Set by the apiserver's answers to the spoke's client.
    let apply_limit = Arc::new(ApplyLimit::default());
    let kube = match opts.applier == Applier::Kube || opts.identity_secret.is_some() {
        true => Some(kube_client(opts.kubeconfig.as_deref(), apply_limit.clone()).await?),
        false => None,
    };
    let identities = identity_store(&opts, kube.as_ref())?;

    let (reports_tx, reports_rx) = tokio::sync::mpsc::channel(1024);
    let drift_metrics = DriftMetrics::default();
    let parts = match (opts.applier, &kube) {
        (Applier::Kube, Some(client)) => {
            kube_applier(&opts, client, reports_tx, drift_metrics.clone()).await?
        }
        (Applier::Ledger, _) => {
            let dir = opts
                .state_dir
                .clone()
                .ok_or_else(|| flag("--state-dir", "required with --applier ledger"))?;
            drop(reports_tx);
            let ledger = FileLedger::open(&dir).map_err(|e| flag("--state-dir", e.0))?;
            Parts {
                applier: Arc::new(ledger),
                capabilities: vec![clawfed_proto::capability::applier("ledger")],
                repairer: None,
                tunnels: None,
            }
        }
        (Applier::Kube, None) => {
            return Err(flag("--applier", "kube needs a Kubernetes client"));
        }
    };

    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = SpokeMetrics::register(&mut registry);
    drift_metrics.register_into(&mut registry);
    apply_limit.register(&mut registry);
    let drift_task: Option<JoinHandle<()>> = parts.repairer.clone().map(|r| {
        let stop = shutdown.clone();
        tokio::spawn(
            async move {
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = r.run() => {}
                }
            }
            .instrument(tracing::info_span!("drift")),
        )
    });
    let metrics_listener = tokio::net::TcpListener::bind(opts.metrics_addr)
        .await
        .and_then(|l| Ok((l.local_addr()?, l)))
        .map_err(|source| ServerError::Listen {
            flag: "--metrics-addr",
            addr: opts.metrics_addr,
            source,
        });
    let (metrics_addr, metrics_listener) = metrics_listener?;
    // Printed on stdout so scripts (and tests binding port 0) read where
    // the spoke listens, as the hub prints its addresses.
    println!("clawfed-spoke listening: metrics=http://{metrics_addr}/metrics");
    let metrics_task = tokio::spawn(
        serve_metrics(metrics_listener, Arc::new(registry), shutdown.clone())
            .instrument(tracing::info_span!("metrics")),
    );

    let link = Link::new(
        LinkConfig {
            hub: hubs[0].clone(),
            ca_pem,
            cluster_name: opts.cluster_name.clone(),
            bootstrap_token,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            capabilities: parts.capabilities,
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(opts.backoff_max_seconds.max(1)),
        },
        identities,
        parts.applier,
        metrics,
    )
    .with_hubs(Hubs::random_start(hubs).with_server_name(opts.server_name()?))
    .with_apply_limit(apply_limit)
    .with_cluster(ClusterIdentity {
        kubernetes_uid: kubernetes_uid(kube.as_ref()).await?,
        allow_shared: opts.allow_shared_cluster,
    });
    let link = link.with_labels(opts.cluster_labels()?);
    // The Kubernetes applier reports capacity; the file ledger has no
    // cluster to measure.
    let link = match (&kube, opts.applier) {
        (Some(client), Applier::Kube) => link.with_capacity(crate::capacity::spawn(
            client.clone(),
            shutdown.child_token(),
        )),
        _ => link,
    };
    let link = match parts.tunnels {
        Some(t) => link.with_tunnels(t),
        None => link,
    };
    let link = match parts.repairer {
        Some(r) => link.with_applied_digest(Arc::new(move || r.applied_digest())),
        None => link,
    };
    tracing::info!(cluster = %opts.cluster_name, hub = %opts.hub_url.join(","), "spoke.started");
    let result = link
        .run(reports_rx, shutdown.clone())
        .instrument(tracing::info_span!("link", cluster = %opts.cluster_name))
        .await;
    shutdown.cancel();
    let _ = metrics_task.await;
    if let Some(t) = drift_task {
        let _ = t.await;
    }
    tracing::info!("spoke.stopped");
    result.map_err(Into::into)
}

/// What applies the hub's work, and what it brings with it.
struct Parts {
    applier: Arc<dyn WorkApplier>,
    capabilities: Vec<String>,
    /// Re-applies managed fields on drift (the Kubernetes applier only).
    repairer: Option<Repairer>,
    /// The data path: the hub's tunnel opens resolve to the Harness
    /// endpoints this spoke applied (the Kubernetes applier only).
    tunnels: Option<Arc<Tunnels>>,
}

/// The Kubernetes executor with its SandboxDriver, drift repairer and
/// tunnels.
async fn kube_applier(
    opts: &Options,
    client: &kube::Client,
    reports: tokio::sync::mpsc::Sender<clawfed_proto::link::v1::Report>,
    drift_metrics: DriftMetrics,
) -> Result<Parts, ServerError> {
    let driver = sandbox_driver(opts, client).await?;
    let mut capabilities = vec![clawfed_proto::capability::applier("kube")];
    capabilities.extend(crate::provider::capabilities(driver.as_ref()));
    capabilities.push(clawfed_proto::digest::CAPABILITY.to_string());
    let executor = Arc::new(crate::exec::Executor::with_driver(
        client.clone(),
        crate::config::SpokeConfig {
            service_account_namespace: opts.service_account_namespace.clone(),
            service_account_name: opts.service_account_name.clone(),
            tenant_cluster_role: opts.tenant_cluster_role.clone(),
            cluster: opts.cluster_environment()?,
            ..Default::default()
        },
        reports,
        driver,
    ));
    let repairer = Repairer::new(
        executor.clone(),
        drift_metrics,
        crate::drift::limit::Budget::default(),
        CancellationToken::new(),
    );
    let tunnels = Arc::new(Tunnels::new(
        Arc::new(KubeHarnessDialer::new(client.clone(), executor.clone())),
        TunnelSettings::default(),
    ));
    Ok(Parts {
        applier: executor,
        capabilities,
        repairer: Some(repairer),
        tunnels: Some(tunnels),
    })
}

/// The SandboxDriver `--sandbox-driver` names.
async fn sandbox_driver(
    opts: &Options,
    client: &kube::Client,
) -> Result<Arc<dyn SandboxDriver>, ServerError> {
    Ok(match opts.sandbox_driver {
        SandboxDriverKind::Deployment => Arc::new(crate::provider::ordinary::DeploymentDriver),
        SandboxDriverKind::Crd => {
            if let Some(class) = &opts.sandbox_runtime_class {
                // Fail closed at start: a Pod naming a missing
                // RuntimeClass would only fail later, per revision.
                kube::Api::<k8s_openapi::api::node::v1::RuntimeClass>::all(client.clone())
                    .get(class)
                    .await
                    .map_err(|source| ServerError::Kube {
                        what: format!(
                            "--sandbox-runtime-class {class}: the RuntimeClass must exist (the operator's approval)"
                        ),
                        source,
                    })?;
            }
            Arc::new(
                crate::provider::crd::CrdSandboxDriver::new(client.clone())
                    .with_containment(
                        opts.sandbox_containment
                            .iter()
                            .map(|c| c.capability())
                            .collect(),
                    )
                    .with_runtime_class(opts.sandbox_runtime_class.clone()),
            )
        }
    })
}

/// Where the spoke keeps its key and certificate.
fn identity_store(
    opts: &Options,
    kube: Option<&kube::Client>,
) -> Result<Arc<dyn IdentityStore>, ServerError> {
    match (&opts.identity_secret, &opts.state_dir, kube) {
        (Some(name), _, Some(client)) => Ok(Arc::new(SecretIdentityStore::new(
            client.clone(),
            &opts.identity_namespace,
            name,
        ))),
        (None, Some(dir), _) => Ok(Arc::new(FileIdentityStore::new(dir))),
        _ => Err(flag(
            "--state-dir or --identity-secret",
            "one is required to keep the spoke's identity",
        )),
    }
}

/// Which Kubernetes cluster this is, for enrolment's one-spoke-per-cluster
/// rule (only needed before the spoke has an identity).
async fn kubernetes_uid(kube: Option<&kube::Client>) -> Result<Option<String>, ServerError> {
    let Some(client) = kube else {
        return Ok(None);
    };
    let what = "reading namespace kube-system (the cluster's identity)";
    let namespace = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .get("kube-system")
        .await
        .map_err(|source| ServerError::Kube {
            what: what.to_owned(),
            source,
        })?;
    match namespace.metadata.uid {
        Some(uid) => Ok(Some(uid)),
        None => Err(flag("--kubeconfig", "namespace kube-system has no uid")),
    }
}

/// The execution cluster's client: the named kubeconfig, or in-cluster
/// credentials; no fallback between them.
async fn kube_client(
    kubeconfig: Option<&std::path::Path>,
    apply_limit: Arc<ApplyLimit>,
) -> Result<kube::Client, ServerError> {
    let mut config = match kubeconfig {
        Some(path) => clawfed_kube::kubeconfig::load("--kubeconfig", path).await?,
        None => kube::Config::incluster().map_err(ServerError::InCluster)?,
    };
    // HTTPS_PROXY is for the link to the hub (see --hub-proxy); the
    // apiserver is the execution cluster's own. kube would take the proxy
    // from the environment and then refuse it (its proxy feature is not
    // built), printing the URL with its password.
    config.proxy_url = None;
    crate::pressure::client(config, apply_limit).map_err(|source| ServerError::Kube {
        what: "Kubernetes client".to_owned(),
        source,
    })
}

/// `/metrics` and `/healthz` until `shutdown`.
async fn serve_metrics(
    listener: tokio::net::TcpListener,
    registry: Arc<prometheus_client::registry::Registry>,
    shutdown: CancellationToken,
) {
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let registry = registry.clone();
                async move {
                    let mut out = String::new();
                    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
                    out
                }
            }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok\n" }));
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await;
}
