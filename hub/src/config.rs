//! Hub configuration: a versioned YAML file (unknown fields rejected) with
//! typed environment overrides. Every setting has a default that works with
//! no file: SQLite at `./clawfed.db`, REST on 127.0.0.1:8080, gRPC on
//! 127.0.0.1:8081, metrics on 127.0.0.1:9464.
//!
//! The loader takes the environment as an argument, so tests need no global
//! state.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::service::Policy;
use crate::worker::WorkerConfig;
use crate::worker::backoff::Backoff;

/// Errors loading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid configuration.
    #[error("invalid config file {path}: {source}")]
    Parse {
        path: String,
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// An environment override has a bad value.
    #[error("environment variable {name}: {reason}")]
    Env { name: String, reason: String },
    /// A value is out of range.
    #[error("config field {field}: {reason}")]
    Invalid { field: String, reason: String },
    /// A key of the file cannot be read (unknown, wrong type); `key` is its
    /// full path, e.g. `drivers.compute.configuration.runtime.bogus`.
    #[error("invalid config file {path}: {key}: {source}")]
    Key {
        path: String,
        key: String,
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// One setting given both in the Compute Driver section and in one of
    /// clawfed's own sections: neither silently wins.
    #[error("config keys {driver_key} and {own_key} set the same thing: keep one of them")]
    Conflict { driver_key: String, own_key: String },
}

impl From<crate::compute_driver::Invalid> for ConfigError {
    fn from(e: crate::compute_driver::Invalid) -> Self {
        ConfigError::Invalid {
            field: e.key,
            reason: e.reason,
        }
    }
}

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Format version of this file; only 1 exists.
    #[serde(default = "one")]
    pub version: u32,
    /// What the installation is for: `production` keeps the seeds' rules
    /// (image digests required, no tagged default image, dedicated
    /// Gateways on their own nodes); `demo` (the default, and what the
    /// embedded quickstart runs) relaxes them and says so at start.
    #[serde(default)]
    pub mode: InstallationMode,
    #[serde(default)]
    pub database: DatabaseConfig,
    #[serde(default)]
    pub api: ApiConfig,
    #[serde(default)]
    pub worker: WorkerSettings,
    #[serde(default)]
    pub policy: PolicyConfig,
    #[serde(default)]
    pub link: LinkSettings,
    #[serde(default)]
    pub pipeline: PipelineSettings,
    #[serde(default)]
    pub gateway: GatewaySettings,
    #[serde(default)]
    pub tunnel: TunnelSettings,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub secrets: SecretsSettings,
    /// Driver installation sections brought as they are (today the OpenClaw
    /// Kubernetes Compute Driver's).
    #[serde(default)]
    pub drivers: DriversConfig,
    /// The watch API: event log retention and stream limits.
    #[serde(default)]
    pub watch: crate::watch::WatchSettings,
    /// Which safety polls the file set; the others take their backend's
    /// default ([`Config::apply_backend_defaults`]).
    #[serde(skip)]
    explicit_polls: ExplicitPolls,
    /// The file or the environment set the digest rule (else production
    /// turns it on, [`Config::apply_mode_defaults`]).
    #[serde(skip)]
    explicit_digest_rule: bool,
}

/// `mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum InstallationMode {
    /// The seeds' production rules hold; nothing relaxes them.
    Production,
    /// Relaxed for trying clawfed out; logged at start.
    #[default]
    Demo,
}

impl InstallationMode {
    /// The value as written in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Production => "production",
            Self::Demo => "demo",
        }
    }
}

/// The safety polls' default on PostgreSQL (worker, link and watch):
/// LISTEN/NOTIFY wakes every replica when any process writes, and the
/// listener raises every signal after it reconnects, so the polls only
/// bound how late a lost notification is noticed. On SQLite (one
/// process, in-process wake-ups) the polls keep their 2 s: they are what
/// notices a write by another process (the CLI) there.
pub const POSTGRES_SAFETY_POLL: Duration = Duration::from_secs(30);

/// Safety polls given in the file (`worker.safetyPollMs` or its old name
/// `worker.pollIntervalMs`, `link.safetyPollMs`, `watch.safetyPollMs`).
#[derive(Debug, Clone, Copy, Default)]
struct ExplicitPolls {
    worker: bool,
    link: bool,
    watch: bool,
}

/// `drivers`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DriversConfig {
    /// `drivers.compute`.
    #[serde(default)]
    pub compute: Option<ComputeDriverSection>,
}

/// `drivers.compute`: the Compute Driver's own installation YAML under
/// `configuration`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComputeDriverSection {
    /// `drivers.compute.id`: which driver the section is for. clawfed is the
    /// Kubernetes Compute Driver; another id is refused (absent: that one).
    #[serde(default)]
    pub id: Option<String>,
    /// `drivers.compute.configuration`.
    #[serde(default)]
    pub configuration: crate::compute_driver::ComputeDriverConfig,
}

fn one() -> u32 {
    1
}

/// Where desired state lives.
#[derive(Debug, Clone, Deserialize)]
// Every field is optional: a partial section keeps the other defaults.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// `sqlite://path` (embedded default) or `postgres://…`.
    pub url: String,
    /// PostgreSQL connections this replica holds at most. Unset: the
    /// worker's batch plus 16, so a full batch of pipeline passes never
    /// leaves the link sessions, lease heartbeats and API without one.
    /// SQLite always uses one (a single writer).
    pub max_connections: Option<u32>,
    /// How long a call waits for a pooled connection before it fails as
    /// "database unavailable".
    pub acquire_timeout_seconds: u64,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: "sqlite://./clawfed.db".into(),
            max_connections: None,
            acquire_timeout_seconds: 10,
        }
    }
}

/// Listen addresses and request limits.
#[derive(Debug, Clone, Deserialize)]
// Every field is optional: a partial section keeps the other defaults.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ApiConfig {
    pub rest_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// TLS for REST and gRPC.
    pub tls: ApiTlsSettings,
    /// Serve REST and gRPC as plain HTTP on an address that is not
    /// loopback. Without TLS the hub refuses to start on such an address
    /// unless this is set, and warns at every start when it is (local and
    /// development setups only: tokens would cross the network in clear).
    pub insecure: bool,
    /// How long a listen address still in use (a replaced hub's sockets
    /// not yet released) is retried before the hub fails to start. Every
    /// listener is bound before any serves, so a hub that cannot listen
    /// never answers `/healthz`.
    pub bind_retry_seconds: u64,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            rest_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            grpc_addr: SocketAddr::from(([127, 0, 0, 1], 8081)),
            metrics_addr: SocketAddr::from(([127, 0, 0, 1], 9464)),
            max_body_bytes: 1024 * 1024,
            tls: ApiTlsSettings::default(),
            insecure: false,
            bind_retry_seconds: 15,
        }
    }
}

/// `api.tls`: the admin API's certificate (PEM files, e.g. a cert-manager
/// Secret mounted as a volume), read again when they change.
#[derive(Debug, Clone, Deserialize)]
// Every field is optional: a partial section keeps the other defaults.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ApiTlsSettings {
    /// The serving certificate chain, leaf first. With `keyFile`, REST and
    /// gRPC speak TLS 1.3 and 1.2 only.
    pub cert_file: Option<std::path::PathBuf>,
    /// The certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<std::path::PathBuf>,
    /// CA certificates for client certificates. A client presenting one
    /// signed by this CA authenticates as the API token its subject CN
    /// names (role, namespace, expiry and revocation of that token apply);
    /// bearer tokens keep working. A certificate from another CA fails the
    /// handshake.
    pub client_ca_file: Option<std::path::PathBuf>,
    /// How often the files are read again (ms); a changed pair serves from
    /// the next connection on, a broken one is logged and not used.
    pub reload_interval_ms: u64,
}

impl Default for ApiTlsSettings {
    fn default() -> Self {
        Self {
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            reload_interval_ms: 10_000,
        }
    }
}

/// The worker.
#[derive(Debug, Clone, Deserialize)]
// Every field is optional: a partial section keeps the other defaults.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WorkerSettings {
    pub enabled: bool,
    /// How many work items run at once (pipeline passes, stops, teardowns).
    pub batch_size: u32,
    /// How many Gateway ensures run at once, in a lane of their own: they
    /// wait on the control cluster's apiserver, and in the shared lane a
    /// burst of them held every slot while the passes that send Harness
    /// work queued behind them.
    pub gateway_batch_size: u32,
    pub lease_seconds: u64,
    /// The worker's safety poll (`safetyPollMs`; the old key
    /// `pollIntervalMs` is accepted): work queued in this process wakes the
    /// worker at once and it wakes itself when retries fall due, so this
    /// only bounds how late it sees work queued by another process.
    #[serde(alias = "safetyPollMs")]
    pub poll_interval_ms: u64,
    pub max_attempts: i32,
    pub backoff_base_ms: u64,
    pub backoff_cap_ms: u64,
    pub health_interval_seconds: u64,
    /// This hub's name that survives its restarts (the chart sets the Pod
    /// name, which a container restart keeps; `CLAWFED_INSTANCE_ID`). Its
    /// work and Agent-pass claims carry it, so a restarted hub takes back
    /// its dead incarnation's claims at once instead of waiting for their
    /// leases. Unique among live replicas. On SQLite (one hub per database)
    /// it defaults to `embedded`; on PostgreSQL, unset, nothing is taken
    /// back early. Lowercase letters, digits, `-` and `.`.
    pub instance_id: Option<String>,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            batch_size: 32,
            gateway_batch_size: 32,
            lease_seconds: 30,
            poll_interval_ms: crate::worker::DEFAULT_SAFETY_POLL.as_millis() as u64,
            max_attempts: 8,
            backoff_base_ms: 1000,
            backoff_cap_ms: 300_000,
            health_interval_seconds: 60,
            instance_id: None,
        }
    }
}

/// Agent Gateways in the control cluster.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewaySettings {
    /// Off: revisions activate without a Gateway (logged at every
    /// activation); on: Gateways and routes are managed in the control
    /// cluster and their failures fail the revision.
    #[serde(default)]
    pub enabled: bool,
    /// Kubeconfig of the control cluster (its current context); when unset,
    /// the hub's in-cluster ServiceAccount credentials and nothing else
    /// (never an ambient KUBECONFIG).
    #[serde(default)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Gateway objects: namespace, storage class, node selector, trusted
    /// proxies, private routing, digest policy.
    #[serde(default)]
    pub options: crate::gateway::GatewayConfig,
}

/// The revision pipeline.
#[derive(Debug, Clone, Deserialize)]
// Every field is optional: a partial section keeps the other defaults.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PipelineSettings {
    /// Drive deployed revisions to spokes (needs the link).
    pub enabled: bool,
    /// How long a revision may wait for its Harness and Gateway to be
    /// Ready before it fails with the reason.
    pub ready_deadline_seconds: u64,
    /// How long a revision may wait for placement, its namespace or its
    /// Harness result before it fails naming what is missing.
    pub phase_deadline_seconds: u64,
    /// Before activation, send a request through the revision's Gateway,
    /// the tunnel and the spoke to its Harness (`GET /healthz`), and
    /// activate only when it is answered. Off only for Gateway images that
    /// forward nothing (never in production).
    pub path_probe: bool,
    /// What the data path probe of an OpenClaw Harness without a control
    /// Gateway (embedded) sends: `modelTurn` (default) is one real chat
    /// turn (`POST /v1/chat/completions` with the revision's gateway
    /// token), judged by its JSON answer; `health` is `GET /healthz`, for
    /// installations whose runtime has no model to ask (documented as the
    /// weaker proof).
    pub activation: crate::worker::rollout::Activation,
    /// The spoke reports a Harness ready only once the Ready Pod's plugin
    /// startup status (`/_clawfed/startup`, read through the Pod proxy) is
    /// valid for the revision; its warnings are recorded with the
    /// revision's readiness. Off only for Harness images that publish no
    /// status (never in production).
    pub startup_status: bool,
    /// Deleting an Agent keeps its revision history and audit either way.
    /// Its runtime state in both clusters (workspace PVCs and credential
    /// Secrets of its revisions, the Gateway's storage and transport
    /// Secret) is destroyed by default; true keeps it as the stop left it.
    pub retain_on_agent_delete: bool,
    /// How soon a revision waiting only for its control-cluster Gateway is
    /// looked at again by itself. The hub watches the Gateways and wakes
    /// the revision when its Gateway turns Ready, so this is a safety net.
    pub gateway_recheck_ms: u64,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            ready_deadline_seconds: 300,
            phase_deadline_seconds: 300,
            path_probe: true,
            activation: crate::worker::rollout::Activation::ModelTurn,
            startup_status: true,
            retain_on_agent_delete: false,
            gateway_recheck_ms: crate::pipeline::DEFAULT_GATEWAY_RECHECK.as_millis() as u64,
        }
    }
}

/// The spoke link (mTLS gRPC port spokes dial).
#[derive(Debug, Clone, Deserialize)]
// Every field is optional: a partial section keeps the other defaults.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LinkSettings {
    pub enabled: bool,
    pub addr: SocketAddr,
    /// Directory of an operator-supplied link CA (`ca.key`, `ca.crt`),
    /// imported into the store by the first replica; the CA itself lives in
    /// the store (key sealed), and the hub writes `ca.crt` here when the
    /// directory holds no key. Also names the default secrets key file.
    pub ca_dir: std::path::PathBuf,
    /// Names and IPs on the link's serving certificate.
    pub server_names: Vec<String>,
    pub cert_ttl_seconds: u64,
    pub heartbeat_seconds: u64,
    pub max_sessions: usize,
    pub max_concurrent_handshakes: usize,
    /// TLS handshakes in progress from one source address at most.
    pub max_handshakes_per_source: usize,
    /// Connections whose ClientHello is in that may wait for a handshake
    /// slot; beyond, newcomers are closed at once.
    pub max_waiting_handshakes: usize,
    pub max_message_bytes: usize,
    /// The safety poll (ms) for revocations and outbox writes made by other
    /// processes; those made by this hub wake the link at once.
    pub safety_poll_ms: u64,
    /// This replica's own link address as spokes reach it,
    /// `https://host:port` (e.g. its Pod's DNS name behind a headless
    /// Service). Set, the replica takes part in balancing: it publishes
    /// the address and its session count, other replicas redirect spokes
    /// to it, and it redirects its excess (and, on shutdown, all its)
    /// sessions to the others. Unset: no redirects to or from it.
    pub advertise_url: Option<String>,
    /// How often (seconds, jittered by a quarter) a replica compares its
    /// sessions with its share, `ceil(total / live replicas)`.
    pub balance_interval_seconds: u64,
    /// Sessions a replica may hold above its share before it moves any.
    pub balance_slack: usize,
    /// Sessions a replica moves per balancing tick at most.
    pub balance_max_moves: usize,
}

impl Default for LinkSettings {
    fn default() -> Self {
        let d = crate::link::LinkConfig::default();
        Self {
            enabled: true,
            addr: d.addr,
            ca_dir: d.ca_dir,
            server_names: d.server_names,
            cert_ttl_seconds: d.cert_ttl.as_secs(),
            heartbeat_seconds: d.heartbeat.as_secs(),
            max_sessions: d.max_sessions,
            max_concurrent_handshakes: d.max_concurrent_handshakes,
            max_handshakes_per_source: d.max_handshakes_per_source,
            max_waiting_handshakes: d.max_waiting_handshakes,
            max_message_bytes: d.max_message_bytes,
            safety_poll_ms: d.poll_interval.as_millis() as u64,
            advertise_url: d.advertise_url,
            balance_interval_seconds: d.balance.interval.as_secs(),
            balance_slack: d.balance.slack,
            balance_max_moves: d.balance.max_moves,
        }
    }
}

/// The data path: the tunnel ingress Gateways dial to reach their Harness
/// through the spoke's outbound link (needs the link).
#[derive(Debug, Clone, Deserialize)]
// Every field is optional: a partial section keeps the other defaults.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TunnelSettings {
    /// Serve the ingress and point Gateways at it. Off means direct mode:
    /// Gateways dial the Harness Service URL themselves, which needs a flat
    /// network between the clusters (and `gateway.options.harnessEgress`).
    pub enabled: bool,
    /// Where Gateways connect (inside the control cluster).
    pub addr: SocketAddr,
    /// The URL Gateways are given (e.g. the hub's tunnel Service,
    /// `http://clawfed-hub-tunnel.clawfed-system.svc:8444`); default
    /// `http://<addr>`.
    pub advertise_url: Option<String>,
    pub max_per_revision: usize,
    pub max_per_cluster: usize,
    pub open_timeout_ms: u64,
    pub idle_timeout_seconds: u64,
    /// TLS 1.3 on the ingress with a certificate from the link CA (the
    /// Gateways get the CA beside their credential).
    pub tls: bool,
    /// Extra names and IPs on the ingress certificate (the bound address
    /// and the advertised host are always on it).
    pub server_names: Vec<String>,
    /// This replica's own ingress address for the other replicas (the
    /// chart sets `https://$(POD_IP):<port>`), which forward it CONNECTs
    /// for the clusters whose sessions it holds; default
    /// `<scheme>://<addr>` unless `addr` is unspecified.
    pub peer_url: Option<String>,
}

impl Default for TunnelSettings {
    fn default() -> Self {
        let d = crate::tunnel::TunnelConfig::default();
        Self {
            enabled: true,
            addr: d.addr,
            advertise_url: d.advertise_url,
            max_per_revision: d.max_per_revision,
            max_per_cluster: d.max_per_cluster,
            open_timeout_ms: d.open_timeout.as_millis() as u64,
            idle_timeout_seconds: d.idle_timeout.as_secs(),
            tls: d.tls,
            server_names: d.server_names,
            peer_url: d.peer_url,
        }
    }
}

/// Installation policy.
#[derive(Debug, Clone, Deserialize)]
// Every field is optional: a partial section keeps the other defaults.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Images must be pinned as `name@sha256:<digest>`: the hub refuses
    /// other deploys, the spoke refuses other Harness images and the
    /// Gateways other Gateway images. Off by default, so the default
    /// (tagged) Gateway image deploys.
    pub require_immutable_digest: bool,
    /// Gateway image of Agents that name none; must be digest-pinned when
    /// `requireImmutableDigest` is set.
    pub default_gateway_image: String,
    /// Harness image of Agents whose spec names none; none by default (the
    /// spec must name one). Digest-pinned when `requireImmutableDigest`.
    pub default_agent_image: Option<String>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        let p = Policy::default();
        Self {
            require_immutable_digest: p.require_immutable_digest,
            default_gateway_image: p.default_gateway_image,
            default_agent_image: p.default_agent_image,
        }
    }
}

/// The key that seals Agent credentials at rest. At most one source; with
/// neither, a key file beside the link CA directory is created on first
/// start (`<link.caDir>.secrets.key`, mode 0600). Hub replicas sharing a
/// database must share the key (`keySecret`, or the same `keyFile`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretsSettings {
    /// A file holding exactly 32 random bytes; created (mode 0600) when
    /// missing.
    #[serde(default)]
    pub key_file: Option<std::path::PathBuf>,
    /// A key of a Secret in the control cluster holding exactly 32 bytes,
    /// read with the hub's explicit credentials (`gateway.kubeconfig`, or
    /// its in-cluster ServiceAccount).
    #[serde(default)]
    pub key_secret: Option<crate::secrets::KeySecretRef>,
}

/// Logging.
#[derive(Debug, Clone, Deserialize)]
// Every field is optional: a partial section keeps the other defaults.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LogConfig {
    /// `json` (default) or `text`.
    pub format: LogFormat,
    /// A tracing filter, e.g. `info,clawfed_hub=debug`.
    pub filter: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Json,
            filter: "info".into(),
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Json,
    Text,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            version: 1,
            database: DatabaseConfig::default(),
            api: ApiConfig::default(),
            worker: WorkerSettings::default(),
            policy: PolicyConfig::default(),
            link: LinkSettings::default(),
            pipeline: PipelineSettings::default(),
            gateway: GatewaySettings::default(),
            tunnel: TunnelSettings::default(),
            log: LogConfig::default(),
            drivers: DriversConfig::default(),
            secrets: SecretsSettings::default(),
            watch: crate::watch::WatchSettings::default(),
            explicit_polls: ExplicitPolls::default(),
            mode: InstallationMode::default(),
            explicit_digest_rule: false,
        }
    }
}

/// Settings of the Compute Driver section that clawfed also has keys of
/// its own for: (driver key under `drivers.compute.configuration`, the own
/// keys it would contradict).
const SHARED_KEYS: [(&str, &[&str]); 16] = [
    ("authentication", &["gateway.kubeconfig"]),
    (
        "images.gateway",
        &["policy.defaultGatewayImage", "gateway.options.defaultImage"],
    ),
    ("images.agent", &["policy.defaultAgentImage"]),
    (
        "images.requireImmutableDigest",
        &["policy.requireImmutableDigest"],
    ),
    ("resources.gateway", &["gateway.options.resources"]),
    ("network.gatewayPort", &["gateway.options.port"]),
    ("network.dns", &["gateway.options.dns"]),
    (
        "network.gatewayTrustedProxyCidrs",
        &["gateway.options.trustedProxyCidrs"],
    ),
    (
        "network.trustedProxyCidrs",
        &["gateway.options.trustedProxyCidrs"],
    ),
    ("network.gatewayClients", &["gateway.options.clients"]),
    (
        "runtime.gatewayNodeSelector",
        &["gateway.options.nodeSelector"],
    ),
    (
        "runtime.gatewayTolerations",
        &["gateway.options.tolerations"],
    ),
    (
        "runtime.gatewayStorageClassName",
        &["gateway.options.storageClass"],
    ),
    (
        "runtime.gatewayStorageClass",
        &["gateway.options.storageClass"],
    ),
    (
        "runtime.transportSecretPrefix",
        &["gateway.options.transportSecretPrefix"],
    ),
    (
        "servicePrincipalCredentials",
        &["gateway.options.servicePrincipal"],
    ),
];

/// The id of the OpenClaw Kubernetes Compute Driver (`drivers.compute.id`).
pub const KUBERNETES_COMPUTE_DRIVER: &str = "compute-kubernetes";

/// Whether the dotted `key` is present in the YAML document `doc`.
fn has_key(doc: &serde_yaml_ng::Value, key: &str) -> bool {
    let mut v = doc;
    for part in key.split('.') {
        match v.get(part) {
            Some(next) => v = next,
            None => return false,
        }
    }
    true
}

impl Config {
    /// Loads `path` (when given), applies overrides from `env` and checks
    /// the result ([`Self::validate`]). Overrides:
    /// `CLAWFED_DATABASE_URL`, `CLAWFED_REST_ADDR`, `CLAWFED_GRPC_ADDR`,
    /// `CLAWFED_METRICS_ADDR`, `CLAWFED_WORKER_ENABLED`,
    /// `CLAWFED_REQUIRE_IMMUTABLE_DIGEST`, `CLAWFED_LOG_FORMAT`,
    /// `CLAWFED_LOG`, `CLAWFED_API_TLS_CERT_FILE`, `CLAWFED_API_TLS_KEY_FILE`,
    /// `CLAWFED_API_TLS_CLIENT_CA_FILE`, `CLAWFED_API_INSECURE`.
    pub fn load(path: Option<&Path>, env: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let mut config = match path {
            Some(path) => {
                let shown = path.display().to_string();
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: shown.clone(),
                    source,
                })?;
                Config::from_yaml(&text, &shown)?
            }
            None => Config::default(),
        };
        config.apply_env(env)?;
        config.apply_backend_defaults();
        config.apply_mode_defaults();
        config.validate()?;
        Ok(config)
    }

    /// The defaults that depend on the installation's mode: in production
    /// the digest rule is on unless the file or the environment said
    /// otherwise (and [`Self::validate`] refuses that).
    pub fn apply_mode_defaults(&mut self) {
        if self.mode == InstallationMode::Production && !self.explicit_digest_rule {
            self.policy.require_immutable_digest = true;
        }
    }

    /// What demo mode relaxes, for the hub to say at start; empty in
    /// production.
    pub fn demo_relaxations(&self) -> Vec<&'static str> {
        if self.mode == InstallationMode::Production {
            return Vec::new();
        }
        let mut out = Vec::new();
        if !self.policy.require_immutable_digest {
            out.push("images need not be pinned by digest (policy.requireImmutableDigest is off)");
        }
        if clawfed_proto::work::check_image_digest(&self.policy.default_gateway_image).is_err() {
            out.push("the default Gateway image is a tag, not a digest");
        }
        if self.gateway.options.node_selector.is_empty() {
            out.push("dedicated Gateways may run on any node (no gatewayNodeSelector)");
        }
        out
    }

    /// The defaults that depend on the database: on PostgreSQL the safety
    /// polls the file did not set become [`POSTGRES_SAFETY_POLL`] (after
    /// the environment, which may name the database).
    pub fn apply_backend_defaults(&mut self) {
        let url = &self.database.url;
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return;
        }
        let ms = POSTGRES_SAFETY_POLL.as_millis() as u64;
        let set = self.explicit_polls;
        if !set.worker {
            self.worker.poll_interval_ms = ms;
        }
        if !set.link {
            self.link.safety_poll_ms = ms;
        }
        if !set.watch {
            self.watch.safety_poll_ms = ms;
        }
    }

    /// Parses the text of a config file (`shown` names it in errors): an
    /// unknown or mistyped key is an error naming its full path; the
    /// Compute Driver section is checked and folded into clawfed's own
    /// sections ([`Self::set_compute_driver`]), refusing any setting given
    /// in both. No environment overrides, no [`Self::validate`].
    pub fn from_yaml(text: &str, shown: &str) -> Result<Self, ConfigError> {
        let parse = |source| ConfigError::Parse {
            path: shown.to_string(),
            source,
        };
        // Syntax errors first, so a path is only reported for a readable file.
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).map_err(parse)?;
        let mut config: Config = serde_path_to_error::deserialize(
            serde_yaml_ng::Deserializer::from_str(text),
        )
        .map_err(|e| {
            let key = e.path().to_string();
            let source = e.into_inner();
            ConfigError::Key {
                path: shown.to_string(),
                key: unknown_key_path(&key, &source),
                source,
            }
        })?;
        config.explicit_digest_rule = has_key(&doc, "policy.requireImmutableDigest")
            || has_key(
                &doc,
                "drivers.compute.configuration.images.requireImmutableDigest",
            );
        config.explicit_polls = ExplicitPolls {
            worker: has_key(&doc, "worker.safetyPollMs") || has_key(&doc, "worker.pollIntervalMs"),
            link: has_key(&doc, "link.safetyPollMs"),
            watch: has_key(&doc, "watch.safetyPollMs"),
        };
        let driver_section = "drivers.compute.configuration";
        if let Some(section) = config.drivers.compute.clone() {
            if let Some(id) = section.id.as_deref()
                && id != KUBERNETES_COMPUTE_DRIVER
            {
                return Err(ConfigError::Invalid {
                    field: "drivers.compute.id".into(),
                    reason: format!(
                        "{id:?}: clawfed is the Kubernetes Compute Driver ({KUBERNETES_COMPUTE_DRIVER})"
                    ),
                });
            }
            for (driver_key, own_keys) in SHARED_KEYS {
                if !has_key(&doc, &format!("{driver_section}.{driver_key}")) {
                    continue;
                }
                if let Some(own) = own_keys.iter().find(|k| has_key(&doc, k)) {
                    return Err(ConfigError::Conflict {
                        driver_key: format!("{driver_section}.{driver_key}"),
                        own_key: (*own).to_string(),
                    });
                }
            }
            config.set_compute_driver(section.configuration)?;
        }
        Ok(config)
    }

    /// Takes `driver` (the Compute Driver's `configuration`) as this
    /// installation's: checks it, keeps it for the Harness settings
    /// ([`Self::workload_settings`]) and writes what it says about
    /// Gateways, images and control-cluster credentials into clawfed's own
    /// sections, so the rest of the hub reads one place. What it leaves out
    /// keeps clawfed's setting. (The file loader has already refused
    /// settings given both ways.)
    pub fn set_compute_driver(
        &mut self,
        driver: crate::compute_driver::ComputeDriverConfig,
    ) -> Result<(), ConfigError> {
        driver.validate()?;
        if let Some(a) = &driver.authentication {
            self.gateway.kubeconfig = match a.mode {
                crate::compute_driver::AuthMode::InCluster => None,
                crate::compute_driver::AuthMode::Kubeconfig => a.kubeconfig.clone(),
            };
        }
        let images = &driver.images;
        if let Some(image) = &images.gateway {
            self.policy.default_gateway_image = image.clone();
            self.gateway.options.default_image = None;
        }
        if let Some(image) = &images.agent {
            self.policy.default_agent_image = Some(image.clone());
        }
        if let Some(require) = images.require_immutable_digest {
            self.policy.require_immutable_digest = require;
        }
        let options = &mut self.gateway.options;
        if let Some(r) = &driver.resources.gateway {
            options.resources = r.clone();
        }
        let net = &driver.network;
        if let Some(port) = net.gateway_port {
            options.port = port;
        }
        if let Some(dns) = &net.dns {
            options.dns = crate::gateway::DnsPeer {
                namespace: dns.namespace.clone(),
                pod_labels: dns.pod_labels.clone(),
            };
        }
        if let Some(cidrs) = net.trusted_proxy_cidrs() {
            options.trusted_proxy_cidrs = cidrs.clone();
        }
        if let Some(clients) = &net.gateway_clients {
            options.clients = clients
                .iter()
                .map(|c| crate::gateway::ClientPeer {
                    namespace: c.namespace.clone(),
                    pod_labels: c.pod_labels.clone(),
                })
                .collect();
        }
        let rt = &driver.runtime;
        if let Some(sel) = &rt.gateway_node_selector {
            options.node_selector = sel.clone();
        }
        if let Some(t) = &rt.gateway_tolerations {
            options.tolerations = t.clone();
        }
        if let Some(class) = rt.gateway_storage_class() {
            options.storage_class = Some(class.clone());
        }
        if let Some(prefix) = &rt.transport_secret_prefix {
            options.transport_secret_prefix = Some(prefix.clone());
        }
        if let Some(sp) = driver.service_principal() {
            options.service_principal = Some(sp);
        }
        let id = self.drivers.compute.as_ref().and_then(|c| c.id.clone());
        self.drivers.compute = Some(ComputeDriverSection {
            id,
            configuration: driver,
        });
        Ok(())
    }

    /// The Harness and namespace settings of every revision: the Compute
    /// Driver section's, defaults where it (or the section) is absent.
    pub fn workload_settings(&self) -> crate::compute_driver::WorkloadSettings {
        self.drivers
            .compute
            .as_ref()
            .map(|c| c.configuration.workload())
            .unwrap_or_default()
    }

    fn apply_env(&mut self, env: &HashMap<String, String>) -> Result<(), ConfigError> {
        fn parse<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, ConfigError>
        where
            T::Err: std::fmt::Display,
        {
            value.parse().map_err(|e: T::Err| ConfigError::Env {
                name: name.into(),
                reason: format!("{value:?}: {e}"),
            })
        }
        for (name, value) in env {
            match name.as_str() {
                "CLAWFED_DATABASE_URL" => self.database.url = value.clone(),
                "CLAWFED_REST_ADDR" => self.api.rest_addr = parse(name, value)?,
                "CLAWFED_GRPC_ADDR" => self.api.grpc_addr = parse(name, value)?,
                "CLAWFED_METRICS_ADDR" => self.api.metrics_addr = parse(name, value)?,
                "CLAWFED_WORKER_ENABLED" => self.worker.enabled = parse(name, value)?,
                "CLAWFED_LINK_ENABLED" => self.link.enabled = parse(name, value)?,
                "CLAWFED_PIPELINE_ENABLED" => self.pipeline.enabled = parse(name, value)?,
                "CLAWFED_GATEWAY_ENABLED" => self.gateway.enabled = parse(name, value)?,
                "CLAWFED_GATEWAY_KUBECONFIG" => self.gateway.kubeconfig = Some(value.into()),
                "CLAWFED_LINK_ADDR" => self.link.addr = parse(name, value)?,
                "CLAWFED_TUNNEL_ENABLED" => self.tunnel.enabled = parse(name, value)?,
                "CLAWFED_TUNNEL_TLS" => self.tunnel.tls = parse(name, value)?,
                "CLAWFED_TUNNEL_ADDR" => self.tunnel.addr = parse(name, value)?,
                "CLAWFED_TUNNEL_ADVERTISE_URL" => self.tunnel.advertise_url = Some(value.clone()),
                "CLAWFED_TUNNEL_PEER_URL" => self.tunnel.peer_url = Some(value.clone()),
                "CLAWFED_INSTANCE_ID" => self.worker.instance_id = Some(value.clone()),
                "CLAWFED_LINK_CA_DIR" => self.link.ca_dir = value.into(),
                "CLAWFED_LINK_CERT_TTL_SECONDS" => self.link.cert_ttl_seconds = parse(name, value)?,
                "CLAWFED_LINK_HEARTBEAT_SECONDS" => {
                    self.link.heartbeat_seconds = parse(name, value)?
                }
                "CLAWFED_LINK_MAX_SESSIONS" => self.link.max_sessions = parse(name, value)?,
                "CLAWFED_LINK_ADVERTISE_URL" => self.link.advertise_url = Some(value.clone()),
                "CLAWFED_LINK_BALANCE_INTERVAL_SECONDS" => {
                    self.link.balance_interval_seconds = parse(name, value)?
                }
                "CLAWFED_LINK_BALANCE_SLACK" => self.link.balance_slack = parse(name, value)?,
                "CLAWFED_LINK_BALANCE_MAX_MOVES" => {
                    self.link.balance_max_moves = parse(name, value)?
                }
                "CLAWFED_REQUIRE_IMMUTABLE_DIGEST" => {
                    self.policy.require_immutable_digest = parse(name, value)?;
                    self.explicit_digest_rule = true;
                }
                "CLAWFED_MODE" => {
                    self.mode = match value.as_str() {
                        "production" => InstallationMode::Production,
                        "demo" => InstallationMode::Demo,
                        _ => {
                            return Err(ConfigError::Env {
                                name: name.clone(),
                                reason: format!("{value:?}: expected production or demo"),
                            });
                        }
                    }
                }
                "CLAWFED_LOG_FORMAT" => {
                    self.log.format = match value.as_str() {
                        "json" => LogFormat::Json,
                        "text" => LogFormat::Text,
                        _ => {
                            return Err(ConfigError::Env {
                                name: name.clone(),
                                reason: format!("{value:?}: must be json or text"),
                            });
                        }
                    }
                }
                "CLAWFED_LOG" => self.log.filter = value.clone(),
                "CLAWFED_SECRETS_KEY_FILE" => self.secrets.key_file = Some(value.into()),
                "CLAWFED_API_TLS_CERT_FILE" => self.api.tls.cert_file = Some(value.into()),
                "CLAWFED_API_TLS_KEY_FILE" => self.api.tls.key_file = Some(value.into()),
                "CLAWFED_API_TLS_CLIENT_CA_FILE" => {
                    self.api.tls.client_ca_file = Some(value.into())
                }
                "CLAWFED_API_INSECURE" => self.api.insecure = parse(name, value)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Checks ranges and that the settings agree with each other.
    /// The store's pool settings (see [`DatabaseConfig`]).
    pub fn pool_settings(&self) -> crate::store::PoolSettings {
        crate::store::PoolSettings {
            max_connections: self
                .database
                .max_connections
                .unwrap_or(self.worker.batch_size.saturating_add(16)),
            acquire_timeout: Duration::from_secs(self.database.acquire_timeout_seconds),
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: &str, reason: &str| ConfigError::Invalid {
            field: field.into(),
            reason: reason.into(),
        };
        if self.version != 1 {
            return Err(invalid("version", "only version 1 is supported"));
        }
        if let Some((field, reason)) = self.watch.invalid() {
            return Err(invalid(field, reason));
        }
        if let Some(id) = &self.worker.instance_id {
            let ok = !id.is_empty()
                && id.len() <= 253
                && id.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                });
            if !ok {
                return Err(invalid(
                    "worker.instanceId",
                    "must be 1-253 lowercase letters, digits, '-' or '.' (e.g. the Pod name)",
                ));
            }
        }
        if self.database.max_connections.is_some_and(|n| n < 2) {
            return Err(invalid("database.maxConnections", "must be at least 2"));
        }
        if self.database.acquire_timeout_seconds == 0 {
            return Err(invalid(
                "database.acquireTimeoutSeconds",
                "must be at least 1",
            ));
        }
        if self.worker.batch_size == 0 || self.worker.batch_size > 1000 {
            return Err(invalid("worker.batchSize", "must be between 1 and 1000"));
        }
        if self.worker.gateway_batch_size == 0 || self.worker.gateway_batch_size > 1000 {
            return Err(invalid(
                "worker.gatewayBatchSize",
                "must be between 1 and 1000",
            ));
        }
        if self.worker.lease_seconds == 0 {
            return Err(invalid("worker.leaseSeconds", "must be at least 1"));
        }
        if self.worker.max_attempts < 1 {
            return Err(invalid("worker.maxAttempts", "must be at least 1"));
        }
        if self.link.cert_ttl_seconds < 10 {
            return Err(invalid("link.certTtlSeconds", "must be at least 10"));
        }
        if self.link.safety_poll_ms == 0 {
            return Err(invalid("link.safetyPollMs", "must be at least 1"));
        }
        if self.pipeline.gateway_recheck_ms < 100 {
            return Err(invalid("pipeline.gatewayRecheckMs", "must be at least 100"));
        }
        if self.tunnel.max_per_revision == 0 || self.tunnel.max_per_cluster == 0 {
            return Err(invalid(
                "tunnel.maxPerRevision",
                "tunnel.maxPerRevision and tunnel.maxPerCluster must be at least 1",
            ));
        }
        if self.tunnel.open_timeout_ms < 100 {
            return Err(invalid("tunnel.openTimeoutMs", "must be at least 100"));
        }
        if self.tunnel.idle_timeout_seconds == 0 {
            return Err(invalid("tunnel.idleTimeoutSeconds", "must be at least 1"));
        }
        if let Some(url) = &self.tunnel.advertise_url {
            let want = if self.tunnel.tls {
                "https://"
            } else {
                "http://"
            };
            if !url.starts_with(want) {
                return Err(invalid(
                    "tunnel.advertiseUrl",
                    &format!(
                        "must be a {want} URL (host:port of the ingress; tunnel.tls decides the scheme)"
                    ),
                ));
            }
        }
        if self.link.heartbeat_seconds == 0 {
            return Err(invalid("link.heartbeatSeconds", "must be at least 1"));
        }
        if let Some(url) = &self.link.advertise_url
            && let Err(e) = clawfed_proto::link::address::LinkAddress::parse(url)
        {
            return Err(invalid("link.advertiseUrl", &e.to_string()));
        }
        if self.link.balance_interval_seconds == 0 {
            return Err(invalid("link.balanceIntervalSeconds", "must be at least 1"));
        }
        if self.link.balance_max_moves == 0 {
            return Err(invalid("link.balanceMaxMoves", "must be at least 1"));
        }
        if self.link.max_concurrent_handshakes == 0 {
            return Err(invalid(
                "link.maxConcurrentHandshakes",
                "must be at least 1",
            ));
        }
        if self.link.max_handshakes_per_source == 0 {
            return Err(invalid("link.maxHandshakesPerSource", "must be at least 1"));
        }
        if self.secrets.key_file.is_some() && self.secrets.key_secret.is_some() {
            return Err(invalid(
                "secrets",
                "set secrets.keyFile or secrets.keySecret, not both",
            ));
        }
        if let Some(r) = &self.secrets.key_secret {
            for (field, value) in [
                ("secrets.keySecret.namespace", &r.namespace),
                ("secrets.keySecret.name", &r.name),
                ("secrets.keySecret.key", &r.key),
            ] {
                if value.is_empty() {
                    return Err(invalid(field, "is required"));
                }
            }
        }
        if self.api.max_body_bytes < 1024 {
            return Err(invalid("api.maxBodyBytes", "must be at least 1024"));
        }
        self.validate_api_tls()?;
        if self.mode == InstallationMode::Production && !self.policy.require_immutable_digest {
            return Err(invalid(
                "policy.requireImmutableDigest",
                "mode is production, which requires image digests \
                 (policy.requireImmutableDigest or images.requireImmutableDigest true); \
                 mode: demo relaxes it",
            ));
        }
        if self.policy.require_immutable_digest {
            // The defaults are admitted into every revision that names no
            // image of its own: a tagged one would make every such deploy
            // fail, so refuse to start instead.
            let defaults = [
                (
                    "policy.defaultGatewayImage",
                    Some(&self.policy.default_gateway_image),
                ),
                (
                    "gateway.options.defaultImage",
                    self.gateway.options.default_image.as_ref(),
                ),
                (
                    "policy.defaultAgentImage",
                    self.policy.default_agent_image.as_ref(),
                ),
            ];
            for (field, image) in defaults {
                if let Some(image) = image
                    && clawfed_proto::work::check_image_digest(image).is_err()
                {
                    return Err(invalid(
                        field,
                        &format!(
                            "policy.requireImmutableDigest is set, so {image:?} must be pinned as \
                             name@sha256:<64 hex digits>"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `api.tls` and `api.insecure`: a pair or nothing, and plain HTTP
    /// beyond loopback only when asked for.
    fn validate_api_tls(&self) -> Result<(), ConfigError> {
        let invalid = |field: &str, reason: String| ConfigError::Invalid {
            field: field.into(),
            reason,
        };
        let tls = &self.api.tls;
        match (&tls.cert_file, &tls.key_file) {
            (Some(_), None) => {
                return Err(invalid(
                    "api.tls.keyFile",
                    "is required with api.tls.certFile".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "api.tls.certFile",
                    "is required with api.tls.keyFile".into(),
                ));
            }
            _ => {}
        }
        if tls.client_ca_file.is_some() && tls.cert_file.is_none() {
            return Err(invalid(
                "api.tls.clientCaFile",
                "needs api.tls.certFile and api.tls.keyFile (client certificates are only \
                 asked for over TLS)"
                    .into(),
            ));
        }
        if tls.reload_interval_ms < 100 {
            return Err(invalid(
                "api.tls.reloadIntervalMs",
                "must be at least 100".into(),
            ));
        }
        if self.api.insecure && tls.cert_file.is_some() {
            return Err(invalid(
                "api.insecure",
                "contradicts api.tls.certFile: the API serves TLS; remove one of them".into(),
            ));
        }
        if tls.cert_file.is_none()
            && !self.api.insecure
            && let Some(addr) = self.exposed_api_addr()
        {
            return Err(invalid(
                "api.tls",
                format!(
                    "REST and gRPC would serve plain HTTP on {addr}, which is not a loopback \
                     address: set api.tls.certFile and api.tls.keyFile, or api.insecure: true \
                     (CLAWFED_API_INSECURE=true) to accept plain HTTP there (local/dev only)"
                ),
            ));
        }
        Ok(())
    }

    /// The first admin API address that is not loopback.
    fn exposed_api_addr(&self) -> Option<SocketAddr> {
        [self.api.rest_addr, self.api.grpc_addr]
            .into_iter()
            .find(|a| !a.ip().is_loopback())
    }

    /// The admin API's TLS files, when TLS is configured.
    pub fn api_tls_files(&self) -> Option<crate::api::tls::TlsFiles> {
        let tls = &self.api.tls;
        Some(crate::api::tls::TlsFiles {
            cert_file: tls.cert_file.clone()?,
            key_file: tls.key_file.clone()?,
            client_ca_file: tls.client_ca_file.clone(),
        })
    }

    /// The warning the hub logs at every start when the admin API speaks
    /// plain HTTP beyond loopback (`api.insecure`).
    pub fn plain_http_warning(&self) -> Option<String> {
        if self.api.tls.cert_file.is_some() {
            return None;
        }
        let addr = self.exposed_api_addr()?;
        Some(format!(
            "INSECURE: the admin API serves plain HTTP on {addr} (api.insecure: true); bearer \
             tokens cross the network unencrypted. Configure api.tls.certFile and \
             api.tls.keyFile for anything but local development"
        ))
    }

    /// The Gateway settings with the installation policy applied: the
    /// digest rule and the default image come from `policy`, so a deploy
    /// the hub admits is one its Gateways accept.
    pub fn gateway_options(&self) -> crate::gateway::GatewayConfig {
        let mut options = self.gateway.options.clone();
        options.require_immutable_digest = self.policy.require_immutable_digest;
        let workload = self.workload_settings();
        options.namespace_quota = workload.namespace_quota;
        options.container_defaults = workload.container_defaults;
        if options.default_image.is_none() {
            options.default_image = Some(self.policy.default_gateway_image.clone());
        }
        options
    }

    /// Where the key sealing Agent credentials comes from.
    pub fn secrets_key_source(&self) -> crate::secrets::KeySource {
        use crate::secrets::{KeySource, default_key_file};
        match (&self.secrets.key_secret, &self.secrets.key_file) {
            (Some(r), _) => KeySource::KubeSecret(r.clone()),
            (None, Some(path)) => KeySource::File(path.clone()),
            (None, None) => KeySource::File(default_key_file(&self.link.ca_dir)),
        }
    }

    /// The service policy this configuration sets.
    pub fn policy(&self) -> Policy {
        Policy {
            require_immutable_digest: self.policy.require_immutable_digest,
            default_gateway_image: self.policy.default_gateway_image.clone(),
            default_agent_image: self.policy.default_agent_image.clone(),
            work_max_attempts: self.worker.max_attempts,
            pipeline: self.pipeline_enabled(),
            harness_port: self.workload_settings().harness_port,
            gateway_node_selector_required: self.mode == InstallationMode::Production
                && self.gateway.options.node_selector.is_empty(),
        }
    }

    /// Whether deployed revisions are driven through spokes.
    pub fn pipeline_enabled(&self) -> bool {
        self.link.enabled && self.pipeline.enabled
    }

    /// The link settings this configuration sets.
    pub fn link_config(&self) -> crate::link::LinkConfig {
        crate::link::LinkConfig {
            addr: self.link.addr,
            ca_dir: self.link.ca_dir.clone(),
            server_names: self.link.server_names.clone(),
            cert_ttl: Duration::from_secs(self.link.cert_ttl_seconds),
            heartbeat: Duration::from_secs(self.link.heartbeat_seconds),
            max_sessions: self.link.max_sessions,
            max_concurrent_handshakes: self.link.max_concurrent_handshakes,
            max_handshakes_per_source: self.link.max_handshakes_per_source,
            max_waiting_handshakes: self.link.max_waiting_handshakes,
            max_message_bytes: self.link.max_message_bytes,
            poll_interval: Duration::from_millis(self.link.safety_poll_ms),
            tunnel: self.tunnel_config(),
            advertise_url: self
                .link
                .advertise_url
                .as_deref()
                .and_then(|u| clawfed_proto::link::address::LinkAddress::parse(u).ok())
                .map(|a| a.to_string()),
            balance: crate::link::balance::BalanceConfig {
                interval: Duration::from_secs(self.link.balance_interval_seconds),
                slack: self.link.balance_slack,
                max_moves: self.link.balance_max_moves,
            },
            ..crate::link::LinkConfig::default()
        }
    }

    /// The tunnel settings this configuration sets.
    pub fn tunnel_config(&self) -> crate::tunnel::TunnelConfig {
        crate::tunnel::TunnelConfig {
            addr: self.tunnel.addr,
            advertise_url: self.tunnel.advertise_url.clone(),
            max_per_revision: self.tunnel.max_per_revision,
            max_per_cluster: self.tunnel.max_per_cluster,
            open_timeout: Duration::from_millis(self.tunnel.open_timeout_ms),
            idle_timeout: Duration::from_secs(self.tunnel.idle_timeout_seconds),
            tls: self.tunnel.tls,
            server_names: self.tunnel.server_names.clone(),
            peer_url: self.tunnel.peer_url.clone(),
            ..crate::tunnel::TunnelConfig::default()
        }
    }

    /// One worker per lane: with the pipeline on, Gateway ensures run in
    /// a lane of their own (`worker.gatewayBatchSize` at once) and every
    /// other kind in the main one (`worker.batchSize`).
    pub fn worker_lanes(&self) -> Vec<WorkerConfig> {
        let main = self.worker_config();
        if !self.pipeline_enabled() {
            return vec![main];
        }
        let gateways = vec![crate::worker::kinds::GATEWAY_ENSURE.to_owned()];
        vec![
            WorkerConfig {
                id: format!("gateway-{}", main.id),
                batch_size: self.worker.gateway_batch_size,
                lane: crate::store::WorkLane::Only(gateways.clone()),
                // Its items are queued by passes in this process (which
                // wake it) or another replica (NOTIFY), and it waits for
                // retries by their due time: its safety net can be slow. At
                // the main lane's 2 s it doubled an idle SQLite hub's CPU,
                // and at 30 s it added a third to an idle replica's
                // PostgreSQL transactions (claim, next due, recovery).
                poll_interval: main.poll_interval.max(GATEWAY_LANE_SAFETY_POLL),
                periodic_recovery: false,
                ..main.clone()
            },
            WorkerConfig {
                lane: crate::store::WorkLane::Except(gateways),
                ..main
            },
        ]
    }

    /// The worker settings this configuration sets.
    /// This hub's instance name ([`WorkerSettings::instance_id`]), with
    /// the SQLite default.
    pub fn instance_id(&self) -> Option<String> {
        self.worker.instance_id.clone().or_else(|| {
            self.database
                .url
                .starts_with("sqlite:")
                .then(|| "embedded".to_owned())
        })
    }

    pub fn worker_config(&self) -> WorkerConfig {
        WorkerConfig {
            batch_size: self.worker.batch_size,
            lease: Duration::from_secs(self.worker.lease_seconds),
            poll_interval: Duration::from_millis(self.worker.poll_interval_ms),
            backoff: Backoff {
                base: Duration::from_millis(self.worker.backoff_base_ms),
                cap: Duration::from_millis(self.worker.backoff_cap_ms),
            },
            health_interval: Duration::from_secs(self.worker.health_interval_seconds),
            ..WorkerConfig::default()
        }
    }
}

/// The Gateway lane's safety poll (at least): see [`Config::worker_lanes`].
const GATEWAY_LANE_SAFETY_POLL: Duration = Duration::from_secs(60);

/// The full path of the key an error is about: for an unknown field,
/// serde reports the enclosing map's path and the field only in its
/// message, so the field is appended.
fn unknown_key_path(path: &str, e: &serde_yaml_ng::Error) -> String {
    let message = e.to_string();
    let field = message
        .split_once("unknown field `")
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(field, _)| field);
    match (path, field) {
        (".", Some(f)) | ("", Some(f)) => f.to_string(),
        (p, Some(f)) if !p.ends_with(&format!(".{f}")) && p != f => format!("{p}.{f}"),
        (p, _) => p.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_work_without_a_file() {
        let c = Config::load(None, &env(&[])).unwrap();
        assert_eq!(c.database.url, "sqlite://./clawfed.db");
        assert_eq!(c.api.rest_addr.to_string(), "127.0.0.1:8080");
        assert_eq!(c.api.grpc_addr.to_string(), "127.0.0.1:8081");
        assert_eq!(c.api.metrics_addr.to_string(), "127.0.0.1:9464");
    }

    #[test]
    fn file_then_environment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.yaml");
        std::fs::write(
            &path,
            "version: 1\ndatabase:\n  url: postgres://x/y\nworker:\n  enabled: false\n  batchSize: 8\n  leaseSeconds: 5\n  pollIntervalMs: 10\n  maxAttempts: 3\n  backoffBaseMs: 10\n  backoffCapMs: 100\n  healthIntervalSeconds: 1\n",
        )
        .unwrap();
        let c = Config::load(
            Some(&path),
            &env(&[("CLAWFED_REST_ADDR", "127.0.0.1:9000")]),
        )
        .unwrap();
        assert_eq!(c.database.url, "postgres://x/y");
        assert!(!c.worker.enabled);
        assert_eq!(c.worker_config().batch_size, 8);
        assert_eq!(c.api.rest_addr.port(), 9000);
    }

    /// Issue 14: on PostgreSQL the safety polls the file leaves unset
    /// default to 30 s (NOTIFY wakes the replicas); SQLite keeps 2 s.
    #[test]
    fn safety_polls_default_per_backend() {
        let load = |yaml: &str, env: &[(&str, &str)]| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("hub.yaml");
            std::fs::write(&path, yaml).unwrap();
            let env = env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Config::load(Some(&path), &env).unwrap()
        };
        let polls = |c: &Config| {
            (
                c.worker_config().poll_interval,
                c.link_config().poll_interval,
                Duration::from_millis(c.watch.safety_poll_ms),
            )
        };
        let two = Duration::from_secs(2);
        // SQLite (the default database): 2 s.
        assert_eq!(polls(&load("version: 1\n", &[])), (two, two, two));
        // PostgreSQL, from the file or the environment: 30 s...
        let pg = "postgres://u@127.0.0.1/db";
        let thirty = POSTGRES_SAFETY_POLL;
        assert_eq!(
            polls(&load(&format!("database:\n  url: {pg}\n"), &[])),
            (thirty, thirty, thirty)
        );
        assert_eq!(
            polls(&load("version: 1\n", &[("CLAWFED_DATABASE_URL", pg)])),
            (thirty, thirty, thirty)
        );
        // ...except where the file says otherwise.
        let set = format!(
            "database:\n  url: {pg}\nworker:\n  pollIntervalMs: 100\nwatch:\n  safetyPollMs: 300\n"
        );
        assert_eq!(
            polls(&load(&set, &[])),
            (
                Duration::from_millis(100),
                thirty,
                Duration::from_millis(300)
            )
        );
        let set = format!("database:\n  url: {pg}\nlink:\n  safetyPollMs: 2000\n");
        assert_eq!(polls(&load(&set, &[])), (thirty, two, thirty));
    }

    /// Issue 17: the polls are safety polls now; the old worker key still
    /// works, the new ones are read, and a zero link poll is refused.
    #[test]
    fn safety_poll_keys_old_and_new() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.yaml");
        let c = Config::load(None, &env(&[])).unwrap();
        assert_eq!(c.worker_config().poll_interval, Duration::from_secs(2));
        assert_eq!(c.link_config().poll_interval, Duration::from_secs(2));
        std::fs::write(&path, "worker:\n  pollIntervalMs: 70\n").unwrap();
        let c = Config::load(Some(&path), &env(&[])).unwrap();
        assert_eq!(c.worker_config().poll_interval, Duration::from_millis(70));
        std::fs::write(
            &path,
            "worker:\n  safetyPollMs: 60000\nlink:\n  safetyPollMs: 30000\n",
        )
        .unwrap();
        let c = Config::load(Some(&path), &env(&[])).unwrap();
        assert_eq!(c.worker_config().poll_interval, Duration::from_secs(60));
        assert_eq!(c.link_config().poll_interval, Duration::from_secs(30));
        std::fs::write(&path, "link:\n  safetyPollMs: 0\n").unwrap();
        let err = Config::load(Some(&path), &env(&[])).unwrap_err();
        assert!(err.to_string().contains("link.safetyPollMs"), "{err}");
    }

    /// Issue 17: the Gateway recheck is a slow safety net (the watch wakes
    /// passes); too short a value is refused naming the key.
    #[test]
    fn gateway_recheck_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.yaml");
        let c = Config::load(None, &env(&[])).unwrap();
        assert_eq!(c.pipeline.gateway_recheck_ms, 10_000);
        std::fs::write(&path, "pipeline:\n  gatewayRecheckMs: 30000\n").unwrap();
        let c = Config::load(Some(&path), &env(&[])).unwrap();
        assert_eq!(c.pipeline.gateway_recheck_ms, 30_000);
        std::fs::write(&path, "pipeline:\n  gatewayRecheckMs: 5\n").unwrap();
        let err = Config::load(Some(&path), &env(&[])).unwrap_err();
        assert!(
            err.to_string().contains("pipeline.gatewayRecheckMs"),
            "{err}"
        );
    }

    /// Issue 17: with the pipeline on, Gateway ensures get a worker lane
    /// of their own (`worker.gatewayBatchSize`), every other kind the main
    /// one; with it off, one worker takes every kind.
    #[test]
    fn gateway_ensures_run_in_a_lane_of_their_own() {
        use crate::store::WorkLane;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.yaml");
        std::fs::write(
            &path,
            "pipeline:\n  enabled: true\nworker:\n  batchSize: 4\n  gatewayBatchSize: 64\n",
        )
        .unwrap();
        let c = Config::load(Some(&path), &env(&[])).unwrap();
        let lanes = c.worker_lanes();
        let ensure = vec![crate::worker::kinds::GATEWAY_ENSURE.to_owned()];
        let by_lane: Vec<_> = lanes
            .iter()
            .map(|w| (w.lane.clone(), w.batch_size))
            .collect();
        assert_eq!(
            by_lane,
            [
                (WorkLane::Only(ensure.clone()), 64),
                (WorkLane::Except(ensure), 4)
            ]
        );
        assert_ne!(
            lanes[0].id, lanes[1].id,
            "each worker leases under its own name"
        );
        assert_eq!(lanes[1].poll_interval, Duration::from_millis(2000));
        assert_eq!(
            lanes[0].poll_interval,
            Duration::from_secs(60),
            "the Gateway lane's safety net is slow"
        );
        assert!(
            lanes[1].periodic_recovery && !lanes[0].periodic_recovery,
            "one periodic recovery of expired claims per process"
        );
        std::fs::write(&path, "pipeline:\n  enabled: false\n").unwrap();
        let c = Config::load(Some(&path), &env(&[])).unwrap();
        let lanes = c.worker_lanes();
        assert_eq!(lanes.len(), 1);
        assert_eq!(lanes[0].lane, WorkLane::All);
        std::fs::write(&path, "worker:\n  gatewayBatchSize: 0\n").unwrap();
        let err = Config::load(Some(&path), &env(&[])).unwrap_err();
        assert!(err.to_string().contains("worker.gatewayBatchSize"), "{err}");
    }

    /// Issue 14, part 4: a replica's advertised link address and its
    /// balancing settings, from the file or the environment; a bad
    /// address is refused naming the key.
    #[test]
    fn advertise_url_and_balancing() {
        let c = Config::load(None, &env(&[])).unwrap();
        let link = c.link_config();
        assert_eq!(link.advertise_url, None, "off unless advertised");
        assert_eq!(link.balance.interval, Duration::from_secs(30));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.yaml");
        std::fs::write(
            &path,
            "link:\n  advertiseUrl: https://hub-1.hub.clawfed.svc:8443/\n  balanceIntervalSeconds: 5\n  balanceSlack: 0\n  balanceMaxMoves: 3\n",
        )
        .unwrap();
        let link = Config::load(Some(&path), &env(&[])).unwrap().link_config();
        assert_eq!(
            link.advertise_url.as_deref(),
            Some("https://hub-1.hub.clawfed.svc:8443")
        );
        assert_eq!(link.balance.interval, Duration::from_secs(5));
        assert_eq!((link.balance.slack, link.balance.max_moves), (0, 3));
        let link = Config::load(
            None,
            &env(&[
                ("CLAWFED_LINK_ADVERTISE_URL", "https://127.0.0.1:9443"),
                ("CLAWFED_LINK_BALANCE_INTERVAL_SECONDS", "2"),
            ]),
        )
        .unwrap()
        .link_config();
        assert_eq!(
            link.advertise_url.as_deref(),
            Some("https://127.0.0.1:9443")
        );
        assert_eq!(link.balance.interval, Duration::from_secs(2));
        for (yaml, key) in [
            (
                "link:\n  advertiseUrl: http://hub:8443\n",
                "link.advertiseUrl",
            ),
            ("link:\n  advertiseUrl: https://hub\n", "link.advertiseUrl"),
            (
                "link:\n  balanceIntervalSeconds: 0\n",
                "link.balanceIntervalSeconds",
            ),
            ("link:\n  balanceMaxMoves: 0\n", "link.balanceMaxMoves"),
        ] {
            std::fs::write(&path, yaml).unwrap();
            let err = Config::load(Some(&path), &env(&[])).unwrap_err();
            assert!(err.to_string().contains(key), "{yaml}: {err}");
        }
    }

    #[test]
    fn unknown_fields_and_bad_values_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.yaml");
        std::fs::write(&path, "databse:\n  url: x\n").unwrap();
        let err = Config::load(Some(&path), &env(&[])).unwrap_err();
        assert!(err.to_string().contains("unknown field `databse`"), "{err}");
        let err = Config::load(None, &env(&[("CLAWFED_REST_ADDR", "nope")])).unwrap_err();
        assert!(err.to_string().contains("CLAWFED_REST_ADDR"), "{err}");
        std::fs::write(&path, "version: 2\n").unwrap();
        let err = Config::load(Some(&path), &env(&[])).unwrap_err();
        assert!(err.to_string().contains("version"), "{err}");
    }

    /// Issue 17, part 4: the pool outgrows a full worker batch, so a batch
    /// of pipeline passes cannot take every connection from the link
    /// sessions, lease heartbeats and API.
    #[test]
    fn the_pool_holds_a_full_batch_and_room_beside_it() {
        let c = Config::load(None, &env(&[])).unwrap();
        let pool = c.pool_settings();
        assert_eq!(pool.max_connections, c.worker.batch_size + 16);
        assert_eq!(pool, crate::store::PoolSettings::default());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.yaml");
        std::fs::write(
            &path,
            "database:\n  url: postgres://x/y\n  maxConnections: 20\n  acquireTimeoutSeconds: 3\n",
        )
        .unwrap();
        let pool = Config::load(Some(&path), &env(&[]))
            .unwrap()
            .pool_settings();
        assert_eq!(pool.max_connections, 20);
        assert_eq!(pool.acquire_timeout, Duration::from_secs(3));
        std::fs::write(&path, "database:\n  maxConnections: 1\n").unwrap();
        let err = Config::load(Some(&path), &env(&[])).unwrap_err();
        assert!(err.to_string().contains("database.maxConnections"), "{err}");
    }

    fn pinned(name: &str) -> String {
        format!("{name}@sha256:{}", "0".repeat(64))
    }

    /// Issue 9, defect 7: one digest policy, consistent defaults.
    #[test]
    fn one_digest_policy_with_consistent_defaults() {
        // Defaults: the policy is off and the Gateways follow it, so the
        // tagged default Gateway image deploys.
        let c = Config::load(None, &env(&[])).unwrap();
        assert!(!c.policy.require_immutable_digest);
        let g = c.gateway_options();
        assert!(!g.require_immutable_digest);
        assert_eq!(
            g.default_image.as_deref(),
            Some(c.policy.default_gateway_image.as_str())
        );
        assert!(crate::gateway::objects::validate_config(&g).is_ok());
        let spec = crate::gateway::GatewaySpec {
            tenant: "team".into(),
            namespace_id: "team-id".into(),
            agent: "bot".into(),
            revision: 1,
            revision_id: "r1".into(),
            image: None,
            harness_endpoint: "http://bot-r1-harness.oce-0.svc:8080".into(),
            tunnel_proxy: None,
            tunnel_ca_pem: None,
            transport: crate::gateway::Transport {
                gateway_token: "t".into(),
                tls: None,
            },
            runtime: None,
        };
        assert_eq!(
            crate::gateway::objects::validate(&spec, &g).as_deref(),
            Ok(c.policy.default_gateway_image.as_str()),
            "the default Gateway image is accepted by the default Gateways"
        );

        // The policy on with the tagged default Gateway image: no start.
        let err =
            Config::load(None, &env(&[("CLAWFED_REQUIRE_IMMUTABLE_DIGEST", "true")])).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("policy.defaultGatewayImage"), "{text}");
        assert!(text.contains("sha256"), "{text}");

        // The policy on with a pinned default: the Gateways require digests.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.yaml");
        let image = pinned("reg.example/gateway");
        std::fs::write(
            &path,
            format!("policy:\n  requireImmutableDigest: true\n  defaultGatewayImage: {image}\n"),
        )
        .unwrap();
        let c = Config::load(Some(&path), &env(&[])).unwrap();
        let g = c.gateway_options();
        assert!(g.require_immutable_digest);
        assert_eq!(g.default_image.as_deref(), Some(image.as_str()));
        assert!(crate::gateway::objects::validate_config(&g).is_ok());

        // A tagged Gateway default of its own is refused too.
        std::fs::write(
            &path,
            format!(
                "policy:\n  requireImmutableDigest: true\n  defaultGatewayImage: {image}\n\
                 gateway:\n  options:\n    defaultImage: reg.example/gateway:2\n"
            ),
        )
        .unwrap();
        let err = Config::load(Some(&path), &env(&[])).unwrap_err();
        assert!(
            err.to_string().contains("gateway.options.defaultImage"),
            "{err}"
        );

        // The Gateway has no separate digest switch to contradict the policy.
        std::fs::write(
            &path,
            "gateway:\n  options:\n    requireImmutableDigest: true\n",
        )
        .unwrap();
        let err = Config::load(Some(&path), &env(&[])).unwrap_err();
        assert!(err.to_string().contains("requireImmutableDigest"), "{err}");
    }

    #[test]
    fn the_secrets_key_source_is_a_file_or_a_secret_never_both() {
        use crate::secrets::{KeySecretRef, KeySource};
        let c = Config::load(
            None,
            &env(&[("CLAWFED_LINK_CA_DIR", "/var/lib/clawfed/ca")]),
        )
        .unwrap();
        assert_eq!(
            c.secrets_key_source(),
            KeySource::File("/var/lib/clawfed/ca.secrets.key".into()),
            "beside the link CA directory"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.yaml");
        std::fs::write(
            &path,
            "secrets:\n  keySecret: { namespace: clawfed-system, name: hub-secrets, key: key }\n",
        )
        .unwrap();
        let c = Config::load(Some(&path), &env(&[])).unwrap();
        assert_eq!(
            c.secrets_key_source(),
            KeySource::KubeSecret(KeySecretRef {
                namespace: "clawfed-system".into(),
                name: "hub-secrets".into(),
                key: "key".into(),
            })
        );
        let err = Config::load(
            Some(&path),
            &env(&[("CLAWFED_SECRETS_KEY_FILE", "/etc/clawfed/secrets.key")]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("secrets"), "{err}");
        std::fs::write(&path, "secrets:\n  keyFile: /k\n  keyScret: x\n").unwrap();
        let err = Config::load(Some(&path), &env(&[])).unwrap_err();
        assert!(err.to_string().contains("keyScret"), "{err}");
        std::fs::write(
            &path,
            "secrets:\n  keySecret: { namespace: ns, name: '', key: k }\n",
        )
        .unwrap();
        let err = Config::load(Some(&path), &env(&[])).unwrap_err();
        assert!(err.to_string().contains("secrets.keySecret.name"), "{err}");
    }

    #[test]
    fn the_per_source_handshake_limit_is_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.yaml");
        std::fs::write(&path, "link:\n  maxHandshakesPerSource: 500\n").unwrap();
        let c = Config::load(Some(&path), &env(&[])).unwrap();
        assert_eq!(c.link_config().max_handshakes_per_source, 500);
        let d = Config::load(None, &env(&[])).unwrap();
        assert_eq!(
            d.link_config().max_handshakes_per_source,
            crate::link::LinkConfig::default().max_handshakes_per_source
        );
        std::fs::write(&path, "link:\n  maxHandshakesPerSource: 0\n").unwrap();
        let err = Config::load(Some(&path), &env(&[])).unwrap_err();
        assert!(
            err.to_string().contains("link.maxHandshakesPerSource"),
            "{err}"
        );
    }

    fn example_path() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/compute-driver.yaml")
    }

    fn example_text() -> String {
        std::fs::read_to_string(example_path()).expect("the checked-in example")
    }

    /// Loads `text` as a config file; the error's text when refused.
    fn load_text(text: &str) -> Result<Config, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.yaml");
        std::fs::write(&path, text).unwrap();
        Config::load(Some(&path), &env(&[])).map_err(|e| e.to_string())
    }

    fn map(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The Compute Driver's installation section, as an operator brings it,
    /// loads and reaches every setting it governs.
    #[test]
    fn the_compute_driver_example_loads_and_maps_every_field() {
        use clawfed_proto::work::{DnsTarget, EgressRule, ServicePrincipal, Workspace};
        let c = Config::load(Some(&example_path()), &env(&[])).expect("example loads");
        let pinned = |name: &str, digit: char| {
            format!(
                "ghcr.io/openclaw/{name}@sha256:{}",
                digit.to_string().repeat(64)
            )
        };
        // authentication -> the control-cluster credentials.
        assert_eq!(
            c.gateway.kubeconfig.as_deref(),
            Some(Path::new("/etc/openclaw/control.kubeconfig"))
        );
        // images -> the policy (and through it the Gateways).
        assert!(c.policy.require_immutable_digest);
        assert_eq!(
            c.policy.default_gateway_image,
            pinned("openclaw-gateway", '1')
        );
        assert_eq!(c.policy.default_agent_image, Some(pinned("openclaw", '2')));
        let p = c.policy();
        assert_eq!(p.default_agent_image, Some(pinned("openclaw", '2')));
        assert!(p.require_immutable_digest);
        // Gateway settings -> the Gateway objects' options.
        let g = c.gateway_options();
        assert!(g.require_immutable_digest);
        assert_eq!(g.default_image, Some(pinned("openclaw-gateway", '1')));
        assert_eq!(
            g.resources.requests,
            map(&[("cpu", "250m"), ("memory", "512Mi")])
        );
        assert_eq!(g.resources.limits, map(&[("cpu", "1"), ("memory", "1Gi")]));
        assert_eq!(g.port, 18789);
        assert_eq!(g.dns.namespace, "kube-system");
        assert_eq!(g.dns.pod_labels, map(&[("k8s-app", "kube-dns")]));
        assert_eq!(g.trusted_proxy_cidrs, vec!["10.0.0.0/24".to_string()]);
        assert_eq!(g.node_selector, map(&[("node-pool", "gateways")]));
        assert_eq!(g.storage_class.as_deref(), Some("fast-rwo"));
        assert_eq!(
            g.transport_secret_prefix.as_deref(),
            Some("openclaw-transport")
        );
        let sp = ServicePrincipal {
            audience: "openclaw.example.com".into(),
            expiration_seconds: 900,
        };
        assert_eq!(g.service_principal, Some(sp.clone()));
        assert_eq!(
            g.clients,
            vec![crate::gateway::ClientPeer {
                namespace: "openclaw-system".into(),
                pod_labels: std::collections::BTreeMap::from([(
                    "app".into(),
                    "approved-gateway-client".into()
                )]),
            }]
        );
        assert_eq!(g.namespace_quota, c.workload_settings().namespace_quota);
        assert!(crate::gateway::objects::validate_config(&g).is_ok());
        // Harness and namespace settings -> every work item.
        let w = c.workload_settings();
        assert_eq!(
            w.agent_resources.requests,
            map(&[("cpu", "500m"), ("memory", "1Gi")])
        );
        assert_eq!(
            w.agent_resources.limits,
            map(&[("cpu", "2"), ("memory", "4Gi")])
        );
        assert_eq!(
            w.namespace_quota,
            map(&[
                ("pods", "20"),
                ("requests.cpu", "8"),
                ("requests.memory", "16Gi"),
                ("limits.cpu", "16"),
                ("limits.memory", "32Gi"),
                ("persistentvolumeclaims", "10"),
            ])
        );
        assert_eq!(
            w.container_defaults.default_request,
            map(&[("cpu", "100m"), ("memory", "128Mi")])
        );
        assert_eq!(
            w.container_defaults.default_limit,
            map(&[("cpu", "500m"), ("memory", "512Mi")])
        );
        assert_eq!(w.harness_port, 8080);
        assert_eq!(
            w.dns,
            Some(DnsTarget {
                namespace: "kube-system".into(),
                pod_labels: map(&[("k8s-app", "kube-dns")]),
            })
        );
        assert_eq!(
            w.egress,
            vec![EgressRule {
                cidr: "203.0.113.0/24".into(),
                ports: vec![443],
            }]
        );
        assert_eq!(w.service_principal, Some(sp));
        assert_eq!(w.node_selector, map(&[("node-pool", "agents")]));
        assert_eq!(
            w.workspace,
            Workspace {
                size: "5Gi".into(),
                storage_class: Some("standard-rwo".into()),
            }
        );
        assert_eq!(w.session_capacity, 16);
        assert_eq!(
            w.codex_seccomp_profile.as_deref(),
            Some("profiles/openclaw-codex.json")
        );
    }

    /// A typo anywhere in the section names its full key path.
    #[test]
    fn an_unknown_driver_key_is_refused_naming_its_path() {
        let cases = [
            (
                "      runtime:\n",
                "      runtime:\n        bogusKey: 1\n",
                "drivers.compute.configuration.runtime.bogusKey",
            ),
            (
                "        gateway:\n          requests:",
                "        gateway:\n          request: {}\n          requests:",
                "drivers.compute.configuration.resources.gateway.request",
            ),
            (
                "      network:\n",
                "      network:\n        dnss: {}\n",
                "drivers.compute.configuration.network.dnss",
            ),
            (
                "    configuration:\n",
                "    configuration:\n      extra: true\n",
                "drivers.compute.configuration.extra",
            ),
        ];
        for (anchor, replacement, key) in cases {
            let text = example_text();
            assert!(text.contains(anchor), "{anchor}");
            let err = load_text(&text.replacen(anchor, replacement, 1)).unwrap_err();
            assert!(err.contains(key), "{key}: {err}");
        }
        // A wrong type names its key too.
        let text = example_text().replace(
            "nativeOpenClawSessionCapacity: 16",
            "nativeOpenClawSessionCapacity: lots",
        );
        let err = load_text(&text).unwrap_err();
        assert!(
            err.contains("drivers.compute.configuration.runtime.nativeOpenClawSessionCapacity"),
            "{err}"
        );
    }

    /// Each range or format error names its key.
    #[test]
    fn driver_range_and_format_errors_name_the_key() {
        let section = "drivers.compute.configuration";
        let cases = [
            (
                "nativeOpenClawSessionCapacity: 16",
                "nativeOpenClawSessionCapacity: 0",
                "runtime.nativeOpenClawSessionCapacity",
            ),
            (
                "nativeOpenClawSessionCapacity: 16",
                "nativeOpenClawSessionCapacity: 1025",
                "runtime.nativeOpenClawSessionCapacity",
            ),
            (
                "workspaceSize: 5Gi",
                "workspaceSize: 5GB",
                "runtime.workspaceSize",
            ),
            (
                "requests.memory: 16Gi",
                "requests.memory: lots",
                "resources.namespace.quota.requests.memory",
            ),
            (
                "requests: { cpu: 500m, memory: 1Gi }",
                "requests: { cpu: half, memory: 1Gi }",
                "resources.agent.requests.cpu",
            ),
            (
                "limits: { cpu: 500m, memory: 512Mi }",
                "limits: { cpu: -1, memory: 512Mi }",
                "resources.namespace.containerDefaults.limits.cpu",
            ),
            (
                "gatewayTrustedProxyCidrs: [10.0.0.0/24]",
                "gatewayTrustedProxyCidrs: [10.0.0.0/33]",
                "network.gatewayTrustedProxyCidrs[0]",
            ),
            (
                "- cidr: 203.0.113.0/24",
                "- cidr: 203.0.113.0",
                "network.egress[0].cidr",
            ),
            (
                "gatewayPort: 18789",
                "gatewayPort: 70000",
                "network.gatewayPort",
            ),
            ("harnessPort: 8080", "harnessPort: 0", "network.harnessPort"),
            (
                "nodeSelector: { node-pool: agents }",
                "nodeSelector: { node-pool: -agents }",
                "runtime.nodeSelector.node-pool",
            ),
            (
                "gatewayNodeSelector: { node-pool: gateways }",
                "gatewayNodeSelector: { \"bad key!\": x }",
                "runtime.gatewayNodeSelector.bad key!",
            ),
            (
                "podLabels: { k8s-app: kube-dns }",
                "podLabels: {}",
                "network.dns.podLabels",
            ),
            (
                "codexSeccompProfile: profiles/openclaw-codex.json",
                "codexSeccompProfile: /etc/seccomp/codex.json",
                "runtime.codexSeccompProfile",
            ),
            (
                "codexSeccompProfile: profiles/openclaw-codex.json",
                "codexSeccompProfile: ../codex.json",
                "runtime.codexSeccompProfile",
            ),
            (
                "expirationSeconds: 900",
                "expirationSeconds: 60",
                "servicePrincipalCredentials.expirationSeconds",
            ),
            (
                "audience: openclaw.example.com",
                "audience: \"\"",
                "servicePrincipalCredentials.audience",
            ),
            (
                "transportSecretPrefix: openclaw-transport",
                "transportSecretPrefix: Open_Claw",
                "runtime.transportSecretPrefix",
            ),
            (
                "gatewayStorageClassName: fast-rwo",
                "gatewayStorageClassName: Fast_RWO",
                "runtime.gatewayStorageClassName",
            ),
            (
                "kubeconfig: /etc/openclaw/control.kubeconfig",
                "",
                "authentication.kubeconfig",
            ),
            (
                "agent: ghcr.io/openclaw/openclaw@sha256:2222222222222222222222222222222222222222222222222222222222222222",
                "agent: ghcr.io/openclaw/openclaw:1.0",
                "images.agent",
            ),
        ];
        for (from, to, key) in cases {
            let text = example_text();
            assert!(text.contains(from), "{from}");
            let err = load_text(&text.replacen(from, to, 1)).unwrap_err();
            assert!(err.contains(&format!("{section}.{key}")), "{key}: {err}");
        }
        // The unchanged example is fine (so each refusal above is its key's).
        assert!(load_text(&example_text()).is_ok());
    }

    /// A setting given in the driver section and in clawfed's own section
    /// is refused naming both keys; neither wins silently.
    #[test]
    fn a_setting_given_twice_names_both_keys() {
        let cases = [
            (
                "    namespacePrefix: oce-gateways\n",
                "    namespacePrefix: oce-gateways\n    storageClass: other\n",
                "gateway.options.storageClass",
                "runtime.gatewayStorageClassName",
            ),
            (
                "    namespacePrefix: oce-gateways\n",
                "    namespacePrefix: oce-gateways\n    port: 8443\n",
                "gateway.options.port",
                "network.gatewayPort",
            ),
            (
                "    namespacePrefix: oce-gateways\n",
                "    namespacePrefix: oce-gateways\n    nodeSelector: { a: b }\n",
                "gateway.options.nodeSelector",
                "runtime.gatewayNodeSelector",
            ),
            (
                "    namespacePrefix: oce-gateways\n",
                "    namespacePrefix: oce-gateways\n    trustedProxyCidrs: []\n",
                "gateway.options.trustedProxyCidrs",
                "network.gatewayTrustedProxyCidrs",
            ),
            (
                "  enabled: true\n",
                "  enabled: true\n  kubeconfig: /x\n",
                "gateway.kubeconfig",
                "authentication",
            ),
            (
                "version: 1\n",
                "version: 1\npolicy: { requireImmutableDigest: false }\n",
                "policy.requireImmutableDigest",
                "images.requireImmutableDigest",
            ),
            (
                "version: 1\n",
                "version: 1\npolicy: { defaultGatewayImage: x }\n",
                "policy.defaultGatewayImage",
                "images.gateway",
            ),
        ];
        for (anchor, replacement, own, driver) in cases {
            let text = example_text();
            assert!(text.contains(anchor), "{anchor}");
            let err = load_text(&text.replacen(anchor, replacement, 1)).unwrap_err();
            assert!(err.contains(own), "{own}: {err}");
            assert!(
                err.contains(&format!("drivers.compute.configuration.{driver}")),
                "{driver}: {err}"
            );
        }
        // Without the driver's key, clawfed's own one is used as before.
        let text = example_text()
            .replacen("        gatewayStorageClassName: fast-rwo\n", "", 1)
            .replacen(
                "    namespacePrefix: oce-gateways\n",
                "    namespacePrefix: oce-gateways\n    storageClass: other\n",
                1,
            );
        let c = load_text(&text).expect("no conflict");
        assert_eq!(c.gateway_options().storage_class.as_deref(), Some("other"));
    }

    #[test]
    fn tolerations_reach_harness_and_gateway_settings_and_bad_ones_name_their_key() {
        let text = "drivers:\n  compute:\n    configuration:\n      runtime:\n        tolerations: [{ key: pool, operator: Equal, value: agents, effect: NoSchedule }]\n        gatewayTolerations: [{ key: trusted, operator: Exists }]\n";
        let c = Config::from_yaml(text, "t").unwrap();
        let w = c.workload_settings();
        assert_eq!(w.tolerations.len(), 1);
        assert_eq!(w.tolerations[0].value.as_deref(), Some("agents"));
        let g = c.gateway_options();
        assert_eq!(g.tolerations[0].key.as_deref(), Some("trusted"));
        for (bad, key) in [
            (
                "{ key: pool, operator: Maybe }",
                "runtime.tolerations[0].operator",
            ),
            (
                "{ key: pool, effect: Never }",
                "runtime.tolerations[0].effect",
            ),
            (
                "{ operator: Equal, value: x }",
                "runtime.tolerations[0].key",
            ),
            (
                "{ key: pool, operator: Exists, value: x }",
                "runtime.tolerations[0].value",
            ),
            (
                "{ key: pool, tolerationSeconds: 5 }",
                "runtime.tolerations[0].tolerationSeconds",
            ),
        ] {
            let text = format!(
                "drivers:\n  compute:\n    configuration:\n      runtime:\n        tolerations: [{bad}]\n"
            );
            let err = Config::from_yaml(&text, "t").unwrap_err().to_string();
            assert!(
                err.contains(&format!("drivers.compute.configuration.{key}")),
                "{bad}: {err}"
            );
        }
        let both = "gateway:\n  options:\n    tolerations: []\ndrivers:\n  compute:\n    configuration:\n      runtime:\n        gatewayTolerations: []\n";
        let err = Config::from_yaml(both, "t").unwrap_err().to_string();
        assert!(err.contains("gateway.options.tolerations"), "{err}");
    }

    #[test]
    fn no_driver_section_keeps_every_default() {
        let c = Config::load(None, &env(&[])).unwrap();
        let w = c.workload_settings();
        assert_eq!(w, crate::compute_driver::WorkloadSettings::default());
        assert_eq!(w.harness_port, 8080);
        assert_eq!(w.session_capacity, 8);
        assert_eq!(w.workspace.size, "1Gi");
        assert_eq!(c.gateway_options().transport_secret_prefix, None);
        assert_eq!(c.policy().default_agent_image, None);
    }

    /// Issue 16: TLS is a pair; plain HTTP beyond loopback needs
    /// `api.insecure` and is then warned about; loopback stays plain.
    #[test]
    fn api_tls_and_plain_http_beyond_loopback() {
        let load = |pairs: &[(&str, &str)]| Config::load(None, &env(pairs));
        // The default (loopback, plain) starts quietly.
        let c = load(&[]).unwrap();
        assert!(c.api_tls_files().is_none());
        assert_eq!(c.plain_http_warning(), None);

        let err = load(&[("CLAWFED_REST_ADDR", "0.0.0.0:8080")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("api.tls"), "{err}");
        assert!(err.contains("0.0.0.0:8080"), "{err}");
        assert!(err.contains("api.insecure: true"), "{err}");
        let err = load(&[("CLAWFED_GRPC_ADDR", "[::]:8081")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("[::]:8081"), "{err}");

        let c = load(&[
            ("CLAWFED_REST_ADDR", "0.0.0.0:8080"),
            ("CLAWFED_API_INSECURE", "true"),
        ])
        .unwrap();
        let warning = c.plain_http_warning().expect("a warning");
        assert!(warning.contains("INSECURE"), "{warning}");
        assert!(warning.contains("0.0.0.0:8080"), "{warning}");

        let c = load(&[
            ("CLAWFED_REST_ADDR", "0.0.0.0:8080"),
            ("CLAWFED_API_TLS_CERT_FILE", "/tls/tls.crt"),
            ("CLAWFED_API_TLS_KEY_FILE", "/tls/tls.key"),
            ("CLAWFED_API_TLS_CLIENT_CA_FILE", "/tls/ca.crt"),
        ])
        .unwrap();
        let files = c.api_tls_files().expect("tls files");
        assert_eq!(files.cert_file, std::path::Path::new("/tls/tls.crt"));
        assert_eq!(files.key_file, std::path::Path::new("/tls/tls.key"));
        assert_eq!(
            files.client_ca_file.as_deref(),
            Some(std::path::Path::new("/tls/ca.crt"))
        );
        assert_eq!(c.plain_http_warning(), None);

        for (pairs, field) in [
            (
                &[("CLAWFED_API_TLS_CERT_FILE", "/c")][..],
                "api.tls.keyFile",
            ),
            (
                &[("CLAWFED_API_TLS_KEY_FILE", "/k")][..],
                "api.tls.certFile",
            ),
            (
                &[("CLAWFED_API_TLS_CLIENT_CA_FILE", "/ca")][..],
                "api.tls.clientCaFile",
            ),
            (
                &[
                    ("CLAWFED_API_TLS_CERT_FILE", "/c"),
                    ("CLAWFED_API_TLS_KEY_FILE", "/k"),
                    ("CLAWFED_API_INSECURE", "true"),
                ][..],
                "api.insecure",
            ),
        ] {
            let err = load(pairs).unwrap_err().to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
        let err = load(&[("CLAWFED_API_INSECURE", "yes")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("CLAWFED_API_INSECURE"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.yaml");
        std::fs::write(
            &path,
            "api:\n  restAddr: 0.0.0.0:8080\n  tls:\n    certFile: /c\n    keyFile: /k\n    reloadIntervalMs: 500\n",
        )
        .unwrap();
        let c = Config::load(Some(&path), &env(&[])).unwrap();
        assert_eq!(c.api.tls.reload_interval_ms, 500);
        std::fs::write(&path, "api:\n  tls:\n    certfile: /c\n").unwrap();
        let err = Config::load(Some(&path), &env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("api.tls.certfile"), "{err}");
    }
}
