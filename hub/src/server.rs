//! Wires the store, service, APIs and worker together and runs them until
//! the shutdown signal. Every long-lived task is named and ends on drain.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use clawfed_proto::admin::v1::admin_service_server::AdminServiceServer;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::api::error::{ApiError, ErrorCode};
use crate::api::grpc::AdminApi;
use crate::api::{AppState, metrics, rest};
use crate::config::Config;
use crate::gateway::TransportCredentials;
use crate::service::Service;
use crate::store::{self, Store};
use crate::worker::drain::{CLUSTER_DRAIN, DrainHandler};
use crate::worker::rollout::{
    AGENT_DELETE, AGENT_STOP, DeleteHandler, GATEWAY_ENSURE, GatewayEnsureHandler, GatewayRuntime,
    GatewaysDisabled, NAMESPACE_TEARDOWN, REVISION_ROLLOUT, Rollout, RolloutConfig, RolloutHandler,
    RolloutTrigger, StopHandler, TeardownHandler,
};
use crate::worker::{Handlers, Worker};

mod listen;

/// Errors starting the hub.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A listen address could not be bound.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// The spoke link could not start.
    #[error(transparent)]
    Link(#[from] crate::link::server::LinkError),
    /// The control-cluster Gateways could not be set up.
    #[error(transparent)]
    Tunnel(#[from] crate::tunnel::ingress::IngressError),
    #[error("gateways: {0}")]
    Gateway(String),
    /// The configuration contradicts itself (e.g. a tagged default image
    /// under the digest policy).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The key sealing Agent credentials could not be loaded or created.
    #[error(transparent)]
    Secrets(#[from] crate::secrets::SecretsError),
    /// The admin API's certificate files could not be loaded.
    #[error(transparent)]
    ApiTls(#[from] crate::api::tls::ApiTlsError),
    /// The Gateway transport key could not be loaded or sealed.
    #[error(transparent)]
    TransportKey(#[from] crate::gateway::transport::TransportKeyError),
}

/// A running hub.
#[derive(Debug)]
pub struct Hub {
    pub rest_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// Whether REST and gRPC speak TLS (`api.tls`).
    pub api_tls: bool,
    /// The spoke link, when enabled.
    pub link: Option<crate::link::server::LinkHandle>,
    /// The tunnel ingress Gateways dial, when enabled (needs the link).
    pub tunnel: Option<crate::tunnel::ingress::IngressHandle>,
    shutdown: CancellationToken,
    tasks: JoinSet<()>,
}

impl Hub {
    /// The token that stops the hub when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Signals shutdown and waits for every task to finish draining.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        while let Some(joined) = self.tasks.join_next().await {
            if let Err(e) = joined {
                tracing::error!(error = %e, "hub.task_failed");
            }
        }
    }

    /// Waits until every task has ended (after the token is cancelled).
    pub async fn wait(mut self) {
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Where an admin API listener's connections come from: the socket
/// itself, or the TLS handshakes of [`crate::api::tls::accept_loop`].
enum Incoming {
    Plain(TcpListener),
    Tls(mpsc::Receiver<crate::api::tls::TlsConn>),
}

/// The connections of `listener`: plain, or through a TLS accept loop
/// (spawned into `tasks`, accepting once `open` is cancelled) when `tls`
/// gives its configuration.
fn incoming<F>(
    listener: TcpListener,
    tls: Option<F>,
    what: &'static str,
    open: &CancellationToken,
    shutdown: &CancellationToken,
    tasks: &mut JoinSet<()>,
) -> Incoming
where
    F: Fn() -> Arc<rustls::ServerConfig> + Send + 'static,
{
    let Some(config) = tls else {
        return Incoming::Plain(listener);
    };
    let (tx, rx) = mpsc::channel(64);
    let (open, shutdown) = (open.clone(), shutdown.clone());
    tasks.spawn(
        async move {
            if opened(&open, &shutdown).await {
                crate::api::tls::accept_loop(listener, config, what, tx, shutdown).await;
            }
        }
        .instrument(tracing::info_span!("api.accept", what)),
    );
    Incoming::Tls(rx)
}

/// Waits until the hub has started (`open`), or shutdown; true when it
/// started. Listeners bound before the start finishes accept nothing until
/// then: a hub whose start fails never answered a request.
async fn opened(open: &CancellationToken, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = open.cancelled() => true,
        _ = shutdown.cancelled() => false,
    }
}

/// Opens the configured store: migrations applied or required as
/// `database.migrateOnStart` says (required, by default, on PostgreSQL).
pub async fn open_store(config: &Config) -> Result<store::SqlStore, store::StoreError> {
    store::open(
        &config.database.url,
        config.pool_settings(),
        config.database.migrations(),
    )
    .await
}

/// Opens the configured store and starts the hub.
pub async fn start(config: &Config) -> Result<Hub, ServerError> {
    let store: Arc<dyn Store> = Arc::new(open_store(config).await?);
    start_with_store(config, store, Handlers::builtin()).await
}

/// Starts the hub over an already-open store.
pub async fn start_with_store(
    config: &Config,
    store: Arc<dyn Store>,
    handlers: Handlers,
) -> Result<Hub, ServerError> {
    start_with_parts(config, store, handlers, None).await
}

/// Starts the hub over an already-open store, with `gateways` instead of
/// the ones `config.gateway` describes (tests pass a runtime acting as the
/// hub's own ServiceAccount).
pub async fn start_with_parts(
    config: &Config,
    store: Arc<dyn Store>,
    handlers: Handlers,
    gateways: Option<Arc<dyn GatewayRuntime>>,
) -> Result<Hub, ServerError> {
    // `Config::load` checks too; a config built in code must not skip it.
    config.validate()?;
    let listeners = listen::Listeners::bind(config).await?;
    let (rest_listener, grpc_listener, metrics_listener) =
        (listeners.rest, listeners.grpc, listeners.metrics);
    let addr = |l: &TcpListener, what| {
        l.local_addr().map_err(|source| ServerError::Bind {
            what,
            addr: config.api.rest_addr,
            source,
        })
    };
    let rest_addr = addr(&rest_listener, "rest")?;
    let grpc_addr = addr(&grpc_listener, "grpc")?;
    let metrics_addr = addr(&metrics_listener, "metrics")?;
    if let Some(warning) = config.plain_http_warning() {
        // At every start, on purpose: plain HTTP beyond loopback is a
        // local/dev choice that must not go unnoticed in production.
        tracing::warn!(%rest_addr, %grpc_addr, "{warning}");
    }
    let relaxed = config.demo_relaxations();
    if !relaxed.is_empty() {
        // At every start too: a demo installation must not pass for a
        // production one. `mode: production` keeps the seeds' rules.
        tracing::warn!(
            mode = config.mode.as_str(),
            relaxed = %relaxed.join("; "),
            "installation.demo_mode"
        );
    }

    let secrets = Arc::new(load_secrets_key(config).await?);
    tracing::info!(key_id = %secrets.key_id(), "secrets.key_loaded");
    let mut metrics = metrics::Metrics::new();
    let rate_limits = Arc::new(crate::ratelimit::RateLimits::new(config.api.rate_limit));
    rate_limits.register(metrics.registry_mut());
    let service = Service::new(store.clone(), config.policy())
        .with_secrets(secrets.clone())
        .with_rate_limits(rate_limits);
    let link_metrics = crate::link::metrics::LinkMetrics::register(metrics.registry_mut());
    let pipeline_metrics =
        crate::worker::rollout::PipelineMetrics::register(metrics.registry_mut());
    let audit_metrics = crate::audit_stream::AuditStreamMetrics::register(metrics.registry_mut());
    metrics.set_phase_deadlines(
        std::time::Duration::from_secs(config.pipeline.phase_deadline_seconds),
        std::time::Duration::from_secs(config.pipeline.ready_deadline_seconds),
    );
    let api_tls = match config.api_tls_files() {
        Some(files) => {
            let tls_metrics = crate::api::tls::TlsMetrics::register(metrics.registry_mut());
            Some(Arc::new(crate::api::tls::ApiTls::load(files, tls_metrics)?))
        }
        None => None,
    };
    let metrics = Arc::new(metrics);
    // Who this process is among the hub's replicas: it owns the link
    // sessions it records in the store (see `link::server`).
    let replica_id = uuid::Uuid::new_v4().to_string();
    tracing::info!(replica = %replica_id, "hub.replica");
    // This instance's earlier incarnations (killed, then restarted) left
    // claims that no one else may take before their leases run out; this
    // incarnation takes them back at once, before its workers start. Its
    // own claims carry the same prefix and its incarnation.
    let instance = config.instance_id();
    let owner_prefix = instance
        .as_ref()
        .map(|i| format!("{i}~{}~", uuid::Uuid::new_v4().simple()));
    if let Some(instance) = &instance {
        let reclaimed = store
            .reclaim_incarnation(&format!("{instance}~"), store.now())
            .await?;
        tracing::info!(
            %instance,
            work = reclaimed.work,
            passes = reclaimed.passes,
            "hub.reclaimed_earlier_incarnation"
        );
    }
    let state = AppState {
        service: service.clone(),
        metrics: metrics.clone(),
        max_body_bytes: config.api.max_body_bytes,
    };
    let shutdown = CancellationToken::new();
    // Cancelled when the start has finished: the APIs accept from then on.
    let open = CancellationToken::new();
    let mut tasks = JoinSet::new();
    // Other replicas' writes wake this one at once (PostgreSQL); SQLite is
    // one process, whose store signals its own commits.
    if store.backend() == store::Backend::Postgres {
        tasks.spawn(
            store::clock::keep_in_sync(store.clone(), shutdown.clone())
                .instrument(tracing::info_span!("store.clock")),
        );
        tasks.spawn(
            crate::wake::pg::run(
                config.database.url.clone(),
                store.signals(),
                shutdown.clone(),
            )
            .instrument(tracing::info_span!("wake.pg")),
        );
    }
    // Before the APIs serve: a watch never finds the feed missing.
    service.set_audit_feed(crate::audit_stream::AuditFeed::start(
        store.clone(),
        &config.watch,
        audit_metrics,
        shutdown.clone(),
        &mut tasks,
    ));
    service.set_watch(
        crate::watch::Feed::start(
            store.clone(),
            config.watch.clone(),
            shutdown.clone(),
            &mut tasks,
        )
        .await,
    );

    if let Some(tls) = &api_tls {
        tasks.spawn(
            tls.clone()
                .watch(
                    std::time::Duration::from_millis(config.api.tls.reload_interval_ms),
                    shutdown.clone(),
                )
                .instrument(tracing::info_span!("api.tls_watch")),
        );
    }
    let rest_incoming = incoming(
        rest_listener,
        api_tls.clone().map(|t| move || t.rest_config()),
        "rest",
        &open,
        &shutdown,
        &mut tasks,
    );
    let grpc_incoming = incoming(
        grpc_listener,
        api_tls.clone().map(|t| move || t.grpc_config()),
        "grpc",
        &open,
        &shutdown,
        &mut tasks,
    );
    let tls = api_tls.is_some();

    // Requests finish even when their client goes away (see api::detach).
    let ready = metrics.clone();
    let rest_app = rest_app(state).layer(crate::api::detach::RunToCompletionLayer);
    let (token, rest_open) = (shutdown.clone(), open.clone());
    tasks.spawn(
        async move {
            if !opened(&rest_open, &token).await {
                return;
            }
            tracing::info!(addr = %rest_addr, tls, "rest.listening");
            let served = match rest_incoming {
                Incoming::Plain(listener) => {
                    axum::serve(listener, rest_app)
                        .with_graceful_shutdown(token.cancelled_owned())
                        .await
                }
                Incoming::Tls(conns) => {
                    // The connection's peer (and client certificate) reaches
                    // the handlers as `ConnectInfo<TlsPeer>`.
                    axum::serve(
                        crate::api::tls::TlsListener::new(conns, rest_addr),
                        rest_app.into_make_service_with_connect_info::<crate::api::tls::TlsPeer>(),
                    )
                    .with_graceful_shutdown(token.cancelled_owned())
                    .await
                }
            };
            if let Err(e) = served {
                tracing::error!(error = %e, "rest.failed");
            }
            tracing::info!("rest.stopped");
        }
        .instrument(tracing::info_span!("rest", addr = %rest_addr)),
    );

    let ops = metrics::ops_router(metrics, store.clone());
    let (token, metrics_open) = (shutdown.clone(), open.clone());
    tasks.spawn(
        async move {
            if !opened(&metrics_open, &token).await {
                return;
            }
            tracing::info!(addr = %metrics_addr, "metrics.listening");
            let served = axum::serve(metrics_listener, ops)
                .with_graceful_shutdown(token.cancelled_owned())
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "metrics.failed");
            }
        }
        .instrument(tracing::info_span!("metrics", addr = %metrics_addr)),
    );

    let max_message = config.api.max_body_bytes;
    let grpc = AdminServiceServer::new(AdminApi::new(service.clone()))
        .max_decoding_message_size(max_message)
        .max_encoding_message_size(16 * 1024 * 1024);
    let (token, grpc_open) = (shutdown.clone(), open.clone());
    tasks.spawn(
        async move {
            if !opened(&grpc_open, &token).await {
                return;
            }
            tracing::info!(addr = %grpc_addr, tls, "grpc.listening");
            let router = tonic::transport::Server::builder()
                .layer(tower::util::MapResponseLayer::new(
                    crate::api::grpc::codec_status_codes::<tonic::body::Body>,
                ))
                .layer(crate::api::detach::RunToCompletionLayer)
                .add_service(grpc);
            let served = match grpc_incoming {
                Incoming::Plain(listener) => {
                    router
                        .serve_with_incoming_shutdown(
                            TcpListenerStream::new(listener),
                            token.cancelled_owned(),
                        )
                        .await
                }
                Incoming::Tls(conns) => {
                    router
                        .serve_with_incoming_shutdown(
                            ReceiverStream::new(conns).map(Ok::<_, std::io::Error>),
                            token.cancelled_owned(),
                        )
                        .await
                }
            };
            if let Err(e) = served {
                tracing::error!(error = %e, "grpc.failed");
            }
            tracing::info!("grpc.stopped");
        }
        .instrument(tracing::info_span!("grpc", addr = %grpc_addr)),
    );

    // The pipeline needs the link: revisions are prepared through spokes.
    let mut handlers = handlers;
    let mut tunnel = None;
    let link = if config.link.enabled {
        let rollout_trigger = config.pipeline_enabled().then(|| {
            Arc::new(RolloutTrigger {
                store: store.clone(),
                max_attempts: config.worker.max_attempts,
            })
        });
        let trigger = rollout_trigger
            .clone()
            .map(|t| t as Arc<dyn crate::link::ReportListener>);
        let link_socket = listeners.link.expect("bound when the link is enabled");
        let link_port = link_socket
            .local_addr()
            .map_err(|source| ServerError::Bind {
                what: "link",
                addr: config.link.addr,
                source,
            })?
            .port();
        let link = crate::link::server::start(
            crate::link::server::LinkListener {
                config: crate::link::LinkConfig {
                    replica_id: replica_id.clone(),
                    advertise_url: config.link_advertise_url(link_port),
                    ..config.link_config()
                },
                socket: link_socket,
            },
            store.clone(),
            secrets.clone(),
            link_metrics,
            trigger,
            shutdown.clone(),
            &mut tasks,
        )
        .await?;
        if config.tunnel.enabled {
            tunnel = Some(
                crate::tunnel::ingress::start(
                    listeners.tunnel.expect("bound when the tunnel is enabled"),
                    crate::tunnel::route::Routes::new(
                        store.clone(),
                        config.tunnel_config().route_ttl,
                    )
                    .with_harness_port(config.workload_settings().harness_port),
                    link.state.clone(),
                    replica_id.clone(),
                    shutdown.clone(),
                    &mut tasks,
                )
                .await?,
            );
        }
        // Published with the replica's heartbeat: others forward the
        // CONNECTs for this replica's clusters here. Not on SQLite, which
        // has one hub: nobody to forward, and an idle embedded hub keeps
        // writing nothing.
        if store.backend() == store::Backend::Postgres
            && let Some(url) = tunnel.as_ref().and_then(|t| t.peer_url.clone())
        {
            let _ = link.state.tunnel_url.set(url);
        }
        let gateways: Arc<dyn GatewayRuntime> = match gateways {
            Some(g) => g,
            None if config.gateway.enabled => Arc::new(
                control_cluster_gateways(config)
                    .await?
                    .with_transport(TransportCredentials::load(store.clone(), &secrets).await?),
            ),
            None => Arc::new(GatewaysDisabled),
        };
        // A revision waiting for its Gateway is woken when the Gateway
        // turns Ready; readiness is answered from the same watch.
        if let Some(trigger) = &rollout_trigger
            && let Some(watch) = gateways.start_watch(trigger.clone(), shutdown.clone())
        {
            tasks.spawn(watch.instrument(tracing::info_span!("gateway.watch")));
        }
        service.set_diagnostics(Arc::new(crate::service::diagnose::LinkDiagnostics {
            link: link.state.clone(),
            gateways: gateways.clone(),
        }));
        service.set_chat(Arc::new(crate::service::chat::LinkChat {
            link: link.state.clone(),
            gateways: gateways.clone(),
            harness_port: config.workload_settings().harness_port,
        }));
        let rollout = Rollout::new(
            link.clone(),
            gateways,
            RolloutConfig {
                ready_deadline: std::time::Duration::from_secs(
                    config.pipeline.ready_deadline_seconds,
                ),
                phase_deadline: std::time::Duration::from_secs(
                    config.pipeline.phase_deadline_seconds,
                ),
                max_attempts: config.worker.max_attempts,
                require_immutable_digest: config.policy.require_immutable_digest,
                tunnel: tunnel.as_ref().map(|t| crate::gateway::TunnelEndpoint {
                    url: t.url.clone(),
                    ca_pem: t.ca_pem.clone(),
                }),
                path_probe: config.pipeline.path_probe,
                activation: config.pipeline.activation,
                workload: config.workload_settings(),
                startup_status: config.pipeline.startup_status,
                retain_on_agent_delete: config.pipeline.retain_on_agent_delete,
                gateway_recheck: std::time::Duration::from_millis(
                    config.pipeline.gateway_recheck_ms,
                ),
                ..RolloutConfig::default()
            },
        )
        .with_metrics(pipeline_metrics)
        .with_secrets(secrets.clone());
        let rollout = match &owner_prefix {
            Some(prefix) => rollout.with_owner_prefix(prefix),
            None => rollout,
        };
        if config.pipeline_enabled() {
            handlers.register(REVISION_ROLLOUT, RolloutHandler(rollout.clone()));
            handlers.register(GATEWAY_ENSURE, GatewayEnsureHandler(rollout.clone()));
            handlers.register(AGENT_STOP, StopHandler(rollout.clone()));
            handlers.register(AGENT_DELETE, DeleteHandler(rollout.clone()));
            handlers.register(NAMESPACE_TEARDOWN, TeardownHandler(rollout));
            handlers.register(
                CLUSTER_DRAIN,
                DrainHandler {
                    max_attempts: config.worker.max_attempts,
                },
            );
        }
        Some(link)
    } else {
        None
    };

    if config.worker.enabled && link.is_some() && config.pipeline_enabled() {
        tasks.spawn(
            crate::worker::failover::run(
                store.clone(),
                config.worker.max_attempts,
                shutdown.clone(),
            )
            .instrument(tracing::info_span!("failover.scan")),
        );
    }
    if config.worker.enabled {
        for mut lane in config.worker_lanes() {
            if let Some(prefix) = &owner_prefix {
                lane.id = format!("{prefix}{}", lane.id);
            }
            let span = tracing::info_span!("worker", worker = %lane.id);
            let worker = Worker::new(store.clone(), handlers.clone(), lane);
            let token = shutdown.clone();
            tasks.spawn(
                async move {
                    worker.run(token).await;
                }
                .instrument(span),
            );
        }
    }

    // The store is open and the link CA loaded (or the link is off).
    ready.set_replica_ready(&replica_id);
    open.cancel();
    Ok(Hub {
        rest_addr,
        grpc_addr,
        metrics_addr,
        api_tls: tls,
        link,
        tunnel,
        shutdown,
        tasks,
    })
}

/// The key that seals Agent credentials: `secrets.keySecret` from the
/// control cluster, else `secrets.keyFile` or the default file beside the
/// link CA directory (created on first start).
pub async fn load_secrets_key(config: &Config) -> Result<crate::secrets::SecretBox, ServerError> {
    use crate::secrets::KeySource;
    match config.secrets_key_source() {
        KeySource::File(path) => Ok(crate::secrets::load_or_create_key_file(&path)?),
        KeySource::KubeSecret(r) => {
            let client = control_cluster_client(config).await?;
            Ok(crate::secrets::load_from_kube_secret(client, &r).await?)
        }
    }
}

/// The Gateway room over the control cluster named by `gateway.kubeconfig`
/// (or the in-cluster credentials).
async fn control_cluster_gateways(
    config: &Config,
) -> Result<crate::gateway::Gateways, ServerError> {
    let client = control_cluster_client(config).await?;
    crate::gateway::Gateways::new(client, config.gateway_options())
        .map_err(|e| ServerError::Gateway(format!("gateway.options: {e}")))
}

/// A client of the control cluster as the hub: `gateway.kubeconfig` or the
/// in-cluster credentials, never an ambient kubeconfig.
async fn control_cluster_client(config: &Config) -> Result<kube::Client, ServerError> {
    let gateway = |e: String| ServerError::Gateway(e);
    let kube_config = match &config.gateway.kubeconfig {
        Some(path) => clawfed_kube::kubeconfig::load("gateway.kubeconfig", path)
            .await
            .map_err(|e| gateway(e.to_string()))?,
        // In-cluster credentials only: never an ambient KUBECONFIG or
        // ~/.kube/config the operator did not name.
        None => kube::Config::incluster().map_err(|e| {
            gateway(format!(
                "in-cluster credentials (the hub's ServiceAccount) are not available ({e}); outside the control cluster set gateway.kubeconfig"
            ))
        })?,
    };
    kube::Client::try_from(kube_config).map_err(|e| gateway(format!("control-cluster client: {e}")))
}

/// The REST application: `/api/v1`, `/openapi.json`, `/healthz`, `/readyz`,
/// and the web fleet view at `/ui`.
pub fn rest_app(state: AppState) -> Router {
    let (api, openapi) = rest::router();
    let openapi = Arc::new(rest::served_document(&openapi, state.service.policy()));
    let metrics_state = state.metrics.clone();
    api.route(
        "/openapi.json",
        get(move || {
            let doc = openapi.clone();
            async move { Json(doc.as_ref().clone()) }
        }),
    )
    .route("/healthz", get(metrics::healthz))
    .route("/readyz", get(readyz))
    .merge(crate::api::ui::router())
    .route_layer(axum::middleware::from_fn_with_state(
        metrics_state,
        metrics::track,
    ))
    .fallback(not_found)
    .with_state(state)
}

async fn readyz(State(state): State<AppState>) -> Response {
    metrics::readiness(state.service.store().as_ref(), &state.metrics).await
}

async fn not_found() -> Response {
    ApiError::response(ErrorCode::NotFound, "no such route".into(), None).into_response()
}

/// Completes when SIGTERM or SIGINT arrives.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "signal.sigterm_unavailable");
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
