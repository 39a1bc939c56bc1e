//! `clawfed-spoke`: runs in an execution cluster and dials out to the hub.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use clawfed_spoke::link::hubs::Hubs;
use clawfed_spoke::link::identity::{FileIdentityStore, IdentityStore, SecretIdentityStore};
use clawfed_spoke::link::ledger::FileLedger;
use clawfed_spoke::link::proxy;
use clawfed_spoke::link::tls::HubAddress;
use clawfed_spoke::link::{Link, LinkConfig, SpokeMetrics, WorkApplier};
use clawfed_spoke::pressure::ApplyLimit;
use clawfed_spoke::tunnel::resolve::KubeHarnessDialer;
use clawfed_spoke::tunnel::{TunnelSettings, Tunnels};
use tokio_util::sync::CancellationToken;

/// What applies the hub's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Applier {
    /// The Kubernetes executor (namespaces, Harness objects, readiness).
    Kube,
    /// A durable file ledger in --state-dir, for runs without a cluster.
    Ledger,
}

/// The SandboxDriver the Kubernetes executor runs Harnesses with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SandboxDriverKind {
    /// Ordinary Deployments (the default).
    Deployment,
    /// The CRD-owning provider (`sandbox.clawfed.io` SandboxHarness); its
    /// CRD and rights must be installed.
    Crd,
}

/// A containment the sandbox runtime guarantees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Containment {
    Networking,
    Filesystem,
    Process,
}

impl Containment {
    fn capability(self) -> &'static str {
        use clawfed_proto::capability as c;
        match self {
            Containment::Networking => c::CONTAINMENT_NETWORKING,
            Containment::Filesystem => c::CONTAINMENT_FILESYSTEM,
            Containment::Process => c::CONTAINMENT_PROCESS,
        }
    }
}

/// The clawfed spoke.
#[derive(Debug, Parser)]
#[command(name = "clawfed-spoke", version, about)]
struct Args {
    /// The hub's link endpoint, e.g. https://hub.example:8443; several hub
    /// replicas as a comma-separated list (or the flag repeated): the
    /// spoke starts at a random one and moves to the next whenever a dial
    /// fails or a session is lost.
    #[arg(long, env = "CLAWFED_HUB_URL", value_delimiter = ',', required = true)]
    hub_url: Vec<String>,
    /// The name checked against the hub's serving certificate on every
    /// address (when they are IPs or per-replica names the certificate
    /// does not carry); default: each address's own host.
    #[arg(long, env = "CLAWFED_HUB_SERVER_NAME")]
    hub_server_name: Option<String>,
    /// The hub's link CA certificate (PEM) to pin.
    #[arg(long, env = "CLAWFED_HUB_CA_FILE")]
    ca_file: PathBuf,
    /// This execution cluster's name (as enrolled).
    #[arg(long, env = "CLAWFED_CLUSTER_NAME")]
    cluster_name: String,
    /// File holding the single-use bootstrap token (first start only).
    #[arg(long, env = "CLAWFED_BOOTSTRAP_TOKEN_FILE")]
    bootstrap_token_file: Option<PathBuf>,
    /// Keep the key and certificate in this directory (local runs).
    #[arg(long, env = "CLAWFED_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Keep the key and certificate in this Secret of --identity-namespace
    /// (in cluster).
    #[arg(long, env = "CLAWFED_IDENTITY_SECRET")]
    identity_secret: Option<String>,
    #[arg(
        long,
        env = "CLAWFED_IDENTITY_NAMESPACE",
        default_value = "clawfed-system"
    )]
    identity_namespace: String,
    #[arg(long, value_enum, default_value = "kube", env = "CLAWFED_APPLIER")]
    applier: Applier,
    /// Kubeconfig file of the execution cluster (its current context).
    /// Without it the spoke uses its in-cluster ServiceAccount credentials
    /// and nothing else: never an ambient KUBECONFIG or ~/.kube/config.
    #[arg(long, env = "CLAWFED_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The SandboxDriver of the Kubernetes executor (advertised to the hub
    /// as capability `sandbox-driver:<name>`).
    #[arg(
        long,
        value_enum,
        default_value = "deployment",
        env = "CLAWFED_SANDBOX_DRIVER"
    )]
    sandbox_driver: SandboxDriverKind,
    /// Containment the sandbox runtime behind `--sandbox-driver crd`
    /// guarantees (comma separated: networking, filesystem, process),
    /// advertised as `sandbox-containment:<kind>`. Dedicated native
    /// OpenClaw is placed only on a cluster declaring all three.
    #[arg(long, value_delimiter = ',', env = "CLAWFED_SANDBOX_CONTAINMENT")]
    sandbox_containment: Vec<Containment>,
    /// Prometheus metrics listener.
    #[arg(
        long,
        env = "CLAWFED_SPOKE_METRICS_ADDR",
        default_value = "127.0.0.1:9465"
    )]
    metrics_addr: SocketAddr,
    /// Reconnect backoff cap in seconds.
    #[arg(long, default_value_t = 30)]
    backoff_max_seconds: u64,
    /// HTTP CONNECT proxy for every connection to the hub,
    /// `http://[user:password@]host:port`, or `direct` for none. Overrides
    /// HTTPS_PROXY / https_proxy and NO_PROXY / no_proxy, which apply
    /// without it. mTLS stays end to end, inside the tunnel.
    #[arg(long, env = "CLAWFED_HUB_PROXY")]
    hub_proxy: Option<String>,
    /// File holding the proxy's Basic credentials as `user:password` (e.g.
    /// a mounted Secret key); overrides credentials in the proxy URL.
    #[arg(long, env = "CLAWFED_HUB_PROXY_CREDENTIALS_FILE")]
    hub_proxy_credentials_file: Option<PathBuf>,
    /// Air-gapped clusters: pull Harness images from a mirror, `FROM=TO`
    /// (registry hosts, optional path), e.g.
    /// `registry.example=mirror.internal:5000`; repeat or comma-separate.
    /// The digest is kept.
    #[arg(long, env = "CLAWFED_REGISTRY_MIRRORS", value_delimiter = ',')]
    registry_mirror: Vec<clawfed_spoke::apply::environment::RegistryMirror>,
    /// A `.dockerconfigjson` file (e.g. a mounted Secret key): written as
    /// Secret clawfed-image-pull into every data-plane namespace and named
    /// in every Harness Pod's imagePullSecrets.
    #[arg(long, env = "CLAWFED_IMAGE_PULL_SECRET_FILE")]
    image_pull_secret_file: Option<PathBuf>,
    /// The proxy Harness Pods reach the model API through
    /// (`http://host:port`; no credentials: they would be readable in the
    /// Pod spec): HTTPS_PROXY/HTTP_PROXY/NO_PROXY of every Harness. An IP
    /// literal host also gets a NetworkPolicy egress rule.
    #[arg(long, env = "CLAWFED_WORKLOAD_PROXY")]
    workload_proxy: Option<String>,
    /// Extra NO_PROXY entries of Harness Pods (comma-separated), beside the
    /// cluster's own addresses.
    #[arg(long, env = "CLAWFED_WORKLOAD_NO_PROXY", value_delimiter = ',')]
    workload_no_proxy: Vec<String>,
    /// PEM certificates Harness runtimes trust besides the system's (e.g. a
    /// proxy's re-signing CA): ConfigMap clawfed-ca-bundle in every
    /// data-plane namespace, mounted read-only, named by
    /// NODE_EXTRA_CA_CERTS and SSL_CERT_FILE (give the full bundle).
    #[arg(long, env = "CLAWFED_CA_BUNDLE_FILE")]
    ca_bundle_file: Option<PathBuf>,
    /// With --sandbox-driver crd: the operator-approved RuntimeClass the
    /// provider's Pods run under (deploy/spoke/provider-crd.yaml admits a
    /// provider's privileged parts only under `clawfed-sandbox`). It must
    /// exist: the spoke refuses to start otherwise.
    #[arg(long, env = "CLAWFED_SANDBOX_RUNTIME_CLASS")]
    sandbox_runtime_class: Option<String>,
    /// Enrol although another cluster name of the hub is this Kubernetes
    /// cluster (the same kube-system UID). Shared execution clusters are
    /// not supported: without this the hub refuses the enrolment.
    #[arg(long, env = "CLAWFED_ALLOW_SHARED_CLUSTER")]
    allow_shared_cluster: bool,
    /// Namespace of the spoke's own ServiceAccount: each data-plane
    /// namespace binds --tenant-cluster-role to it (a Helm release names it).
    #[arg(
        long,
        env = "CLAWFED_SERVICE_ACCOUNT_NAMESPACE",
        default_value = "clawfed-system"
    )]
    service_account_namespace: String,
    /// Name of the spoke's own ServiceAccount.
    #[arg(
        long,
        env = "CLAWFED_SERVICE_ACCOUNT_NAME",
        default_value = "clawfed-spoke"
    )]
    service_account_name: String,
    /// The ClusterRole the spoke binds in each data-plane namespace (its
    /// rights there; deploy/spoke/rbac.yaml or the chart installs it).
    #[arg(
        long,
        env = "CLAWFED_TENANT_CLUSTER_ROLE",
        default_value = "clawfed-spoke-tenant"
    )]
    tenant_cluster_role: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CLAWFED_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();

    let hubs = hub_addresses(&args)?;
    let hub = hubs[0].clone();
    let ca_pem = std::fs::read_to_string(&args.ca_file)
        .with_context(|| format!("--ca-file {}", args.ca_file.display()))?;
    let bootstrap_token = match &args.bootstrap_token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("--bootstrap-token-file {}", path.display()))?
                .trim()
                .to_owned(),
        ),
        None => None,
    };

    if args.sandbox_runtime_class.is_some() && args.sandbox_driver != SandboxDriverKind::Crd {
        anyhow::bail!(
            "--sandbox-runtime-class: only a provisioning driver runs Pods under a sandbox runtime (use --sandbox-driver crd)"
        );
    }
    if !args.sandbox_containment.is_empty() && args.sandbox_driver != SandboxDriverKind::Crd {
        // Ordinary Deployments contain nothing beyond the Pod's hardening:
        // declaring more would place dedicated native OpenClaw unsafely.
        anyhow::bail!(
            "--sandbox-containment: only a provisioning driver declares containment (use --sandbox-driver crd)"
        );
    }
    let needs_kube = args.applier == Applier::Kube || args.identity_secret.is_some();
    // Set by the apiserver's answers to the spoke's client.
    let apply_limit = Arc::new(ApplyLimit::default());
    let kube = if needs_kube {
        Some(kube_client(args.kubeconfig.as_deref(), apply_limit.clone()).await?)
    } else {
        None
    };
    let identities: Arc<dyn IdentityStore> = match (&args.identity_secret, &args.state_dir, &kube) {
        (Some(name), _, Some(client)) => Arc::new(SecretIdentityStore::new(
            client.clone(),
            &args.identity_namespace,
            name,
        )),
        (None, Some(dir), _) => Arc::new(FileIdentityStore::new(dir)),
        _ => anyhow::bail!(
            "--state-dir or --identity-secret: one is required to keep the spoke's identity"
        ),
    };

    let (reports_tx, reports_rx) = tokio::sync::mpsc::channel(1024);
    // With a Kubernetes applier the spoke also serves the data path: the
    // hub's tunnel opens resolve to the Harness endpoints it applied.
    let mut tunnels = None;
    let mut repairer = None;
    let drift_metrics = clawfed_spoke::drift::DriftMetrics::default();
    let applier_name = match args.applier {
        Applier::Kube => "kube",
        Applier::Ledger => "ledger",
    };
    let mut capabilities = vec![clawfed_proto::capability::applier(applier_name)];
    let applier: Arc<dyn WorkApplier> = match (args.applier, &kube) {
        (Applier::Kube, Some(client)) => {
            let driver: Arc<dyn clawfed_spoke::provider::SandboxDriver> = match args.sandbox_driver
            {
                SandboxDriverKind::Deployment => {
                    Arc::new(clawfed_spoke::provider::ordinary::DeploymentDriver)
                }
                SandboxDriverKind::Crd => {
                    if let Some(class) = &args.sandbox_runtime_class {
                        // Fail closed at start: a Pod naming a missing
                        // RuntimeClass would only fail later, per revision.
                        kube::Api::<k8s_openapi::api::node::v1::RuntimeClass>::all(client.clone())
                            .get(class)
                            .await
                            .with_context(|| {
                                format!("--sandbox-runtime-class {class}: the RuntimeClass must exist (the operator's approval)")
                            })?;
                    }
                    Arc::new(
                        clawfed_spoke::provider::crd::CrdSandboxDriver::new(client.clone())
                            .with_containment(
                                args.sandbox_containment
                                    .iter()
                                    .map(|c| c.capability())
                                    .collect(),
                            )
                            .with_runtime_class(args.sandbox_runtime_class.clone()),
                    )
                }
            };
            capabilities.extend(clawfed_spoke::provider::capabilities(driver.as_ref()));
            let executor = Arc::new(clawfed_spoke::exec::Executor::with_driver(
                client.clone(),
                clawfed_spoke::config::SpokeConfig {
                    service_account_namespace: args.service_account_namespace.clone(),
                    service_account_name: args.service_account_name.clone(),
                    tenant_cluster_role: args.tenant_cluster_role.clone(),
                    cluster: cluster_environment(&args)?,
                    ..Default::default()
                },
                reports_tx,
                driver,
            ));
            capabilities.push(clawfed_proto::digest::CAPABILITY.to_string());
            repairer = Some(clawfed_spoke::drift::Repairer::new(
                executor.clone(),
                drift_metrics.clone(),
                clawfed_spoke::drift::limit::Budget::default(),
                CancellationToken::new(),
            ));
            tunnels = Some(Arc::new(Tunnels::new(
                Arc::new(KubeHarnessDialer::new(client.clone(), executor.clone())),
                TunnelSettings::default(),
            )));
            executor
        }
        (Applier::Ledger, _) => {
            let dir = args
                .state_dir
                .clone()
                .context("--state-dir: required with --applier ledger")?;
            drop(reports_tx);
            Arc::new(FileLedger::open(dir).map_err(|e| anyhow::anyhow!("{e}"))?)
        }
        (Applier::Kube, None) => anyhow::bail!("--applier kube needs a Kubernetes client"),
    };

    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = SpokeMetrics::register(&mut registry);
    drift_metrics.register_into(&mut registry);
    apply_limit.register(&mut registry);
    let registry = Arc::new(registry);
    let shutdown = CancellationToken::new();
    let drift_task = repairer.clone().map(|r| {
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = r.run() => {}
            }
        })
    });
    let metrics_listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("--metrics-addr {}", args.metrics_addr))?;
    // Printed on stdout so scripts (and tests binding port 0) read where
    // the spoke listens, as the hub prints its addresses.
    let metrics_addr = metrics_listener
        .local_addr()
        .with_context(|| format!("--metrics-addr {}", args.metrics_addr))?;
    println!("clawfed-spoke listening: metrics=http://{metrics_addr}/metrics");
    let metrics_task = tokio::spawn(serve_metrics(metrics_listener, registry, shutdown.clone()));

    let link = Link::new(
        LinkConfig {
            hub,
            ca_pem,
            cluster_name: args.cluster_name.clone(),
            bootstrap_token,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            capabilities,
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(args.backoff_max_seconds.max(1)),
        },
        identities,
        applier,
        metrics,
    );
    let server_name = args
        .hub_server_name
        .as_deref()
        .map(server_name)
        .transpose()?;
    // Which Kubernetes cluster this is, for enrolment's one-spoke-per-
    // cluster rule (only needed before the spoke has an identity).
    let kubernetes_uid = match &kube {
        Some(client) => Some(
            kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
                .get("kube-system")
                .await
                .context("reading namespace kube-system (the cluster's identity)")?
                .metadata
                .uid
                .context("namespace kube-system has no uid")?,
        ),
        None => None,
    };
    let link = link
        .with_hubs(Hubs::random_start(hubs).with_server_name(server_name))
        .with_apply_limit(apply_limit.clone())
        .with_cluster(clawfed_spoke::link::ClusterIdentity {
            kubernetes_uid,
            allow_shared: args.allow_shared_cluster,
        });
    let link = match tunnels {
        Some(t) => link.with_tunnels(t),
        None => link,
    };
    let link = match &repairer {
        Some(r) => {
            let r = r.clone();
            link.with_applied_digest(Arc::new(move || r.applied_digest()))
        }
        None => link,
    };
    let stop = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("spoke.draining");
        stop.cancel();
    });
    tracing::info!(cluster = %args.cluster_name, hub = %args.hub_url.join(","), "spoke.started");
    let result = link.run(reports_rx, shutdown.clone()).await;
    shutdown.cancel();
    let _ = metrics_task.await;
    if let Some(t) = drift_task {
        let _ = t.await;
    }
    tracing::info!("spoke.stopped");
    result.map_err(Into::into)
}

/// The addresses of `--hub-url` (each through its proxy, checked against
/// `--hub-server-name` when given).
fn hub_addresses(args: &Args) -> anyhow::Result<Vec<HubAddress>> {
    let joined = args.hub_url.join(",");
    let parsed = HubAddress::parse_list(&joined).map_err(|e| anyhow::anyhow!("--hub-url: {e}"))?;
    let name = args
        .hub_server_name
        .as_deref()
        .map(server_name)
        .transpose()?;
    parsed
        .into_iter()
        .map(|hub| {
            let hub = match &name {
                Some(n) => hub.with_server_name(n.clone()),
                None => hub,
            };
            with_proxy(hub, args)
        })
        .collect()
}

fn server_name(name: &str) -> anyhow::Result<rustls::pki_types::ServerName<'static>> {
    rustls::pki_types::ServerName::try_from(name.to_owned())
        .map_err(|e| anyhow::anyhow!("--hub-server-name {name:?}: {e}"))
}

/// The hub reached through the proxy `--hub-proxy` or the environment
/// names (see `clawfed_spoke::link::proxy`), logged without credentials.
fn with_proxy(hub: HubAddress, args: &Args) -> anyhow::Result<HubAddress> {
    let (host, port) = hub.host_port();
    let proxy = proxy::select(
        host,
        port,
        args.hub_proxy.as_deref(),
        "--hub-proxy",
        &|name| std::env::var(name).ok(),
    )?;
    let proxy = match (proxy, &args.hub_proxy_credentials_file) {
        (Some(p), Some(file)) => {
            Some(p.with_credentials_file(file, "--hub-proxy-credentials-file")?)
        }
        (proxy, _) => proxy,
    };
    match &proxy {
        Some(p) => tracing::info!(proxy = %p, credentials = p.has_credentials(), "link.proxy"),
        None => tracing::info!(proxy = "direct", "link.proxy"),
    }
    Ok(hub.with_proxy(proxy))
}

/// The execution cluster's client: the named kubeconfig, or in-cluster
/// credentials; no fallback between them.
/// This cluster's requirements of workload Pods, from the flags.
fn cluster_environment(
    args: &Args,
) -> anyhow::Result<clawfed_spoke::apply::environment::ClusterEnvironment> {
    use clawfed_spoke::apply::environment::{ClusterEnvironment, WorkloadProxy};
    let read = |flag: &str, path: &Option<PathBuf>| -> anyhow::Result<Option<String>> {
        path.as_ref()
            .map(|p| std::fs::read_to_string(p).with_context(|| format!("{flag} {}", p.display())))
            .transpose()
    };
    let proxy = match &args.workload_proxy {
        Some(url) => Some(
            WorkloadProxy::parse(url, args.workload_no_proxy.clone())
                .map_err(|e| anyhow::anyhow!("--workload-proxy: {e}"))?,
        ),
        None => {
            anyhow::ensure!(
                args.workload_no_proxy.is_empty(),
                "--workload-no-proxy: only with --workload-proxy"
            );
            None
        }
    };
    let pull_credentials = read("--image-pull-secret-file", &args.image_pull_secret_file)?;
    if let Some(c) = &pull_credentials {
        serde_json::from_str::<serde_json::Value>(c)
            .ok()
            .filter(|v| v.get("auths").is_some())
            .context("--image-pull-secret-file: not a .dockerconfigjson document (no \"auths\")")?;
    }
    let ca_bundle = read("--ca-bundle-file", &args.ca_bundle_file)?;
    if let Some(pem) = &ca_bundle {
        anyhow::ensure!(
            pem.contains("-----BEGIN CERTIFICATE-----"),
            "--ca-bundle-file: no PEM certificate in it"
        );
    }
    Ok(ClusterEnvironment {
        registry_mirrors: args.registry_mirror.clone(),
        pull_credentials,
        proxy,
        ca_bundle,
    })
}

async fn kube_client(
    kubeconfig: Option<&std::path::Path>,
    apply_limit: Arc<ApplyLimit>,
) -> anyhow::Result<kube::Client> {
    let mut config = match kubeconfig {
        Some(path) => clawfed_kube::kubeconfig::load("--kubeconfig", path).await?,
        None => kube::Config::incluster().context(
            "in-cluster credentials (the spoke's ServiceAccount) are not available; outside a cluster pass --kubeconfig FILE",
        )?,
    };
    // HTTPS_PROXY is for the link to the hub (see --hub-proxy); the
    // apiserver is the execution cluster's own. kube would take the proxy
    // from the environment and then refuse it (its proxy feature is not
    // built), printing the URL with its password.
    config.proxy_url = None;
    clawfed_spoke::pressure::client(config, apply_limit).context("Kubernetes client")
}

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

async fn wait_for_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
