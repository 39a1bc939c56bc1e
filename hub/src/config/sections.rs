//! clawfed's own sections of the config file, each with its defaults:
//! `database`, `api` (and `api.tls`), `worker`, `gateway`, `pipeline`,
//! `link`, `tunnel`, `policy`, `secrets` and `log`.

use std::net::SocketAddr;

use serde::Deserialize;

use crate::service::Policy;

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
    /// Whether `serve` (and the other commands but `migrate`) apply
    /// pending migrations when they open the database. Unset: yes on
    /// SQLite (a file the hub owns: the embedded one-command start), no on
    /// PostgreSQL, where `clawfed-hub migrate` runs them with the migration
    /// role and the hub, with an application role that has no DDL rights,
    /// refuses to start while one is pending.
    pub migrate_on_start: Option<bool>,
    /// PostgreSQL: the role `clawfed-hub migrate` grants the rows of every
    /// table (SELECT, INSERT, UPDATE, DELETE), the sequences and functions
    /// of the schema, after migrating: the application role `serve` runs
    /// as. Unset: no grants (one role owns and uses the schema).
    pub application_role: Option<String>,
}

impl DatabaseConfig {
    /// Whether the URL names PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        self.url.starts_with("postgres://") || self.url.starts_with("postgresql://")
    }

    /// What opening the store does about migrations (see
    /// [`Self::migrate_on_start`]).
    pub fn migrations(&self) -> crate::store::Migrations {
        if self.migrate_on_start.unwrap_or(!self.is_postgres()) {
            crate::store::Migrations::Apply
        } else {
            crate::store::Migrations::Require
        }
    }
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: "sqlite://./clawfed.db".into(),
            max_connections: None,
            acquire_timeout_seconds: 10,
            migrate_on_start: None,
            application_role: None,
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
    /// Request rates admitted per caller and per tenant; none unless set.
    pub rate_limit: crate::ratelimit::RateLimitSettings,
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
            rate_limit: Default::default(),
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::Config;
    use crate::store::Migrations;

    fn load(yaml: &str, env: &[(&str, &str)]) -> Result<Config, super::super::ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.yaml");
        std::fs::write(&path, yaml).unwrap();
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load(Some(&path), &env)
    }

    const PG: &str = "postgres://app@127.0.0.1/clawfed";

    #[test]
    fn sqlite_migrates_on_start_and_postgres_requires_migrate() {
        let c = load("version: 1\n", &[]).unwrap();
        assert_eq!(c.database.migrations(), Migrations::Apply);
        let c = load("version: 1\n", &[("CLAWFED_DATABASE_URL", PG)]).unwrap();
        assert_eq!(c.database.migrations(), Migrations::Require);
        let c = load(
            "version: 1\ndatabase: { migrateOnStart: true }\n",
            &[("CLAWFED_DATABASE_URL", PG)],
        )
        .unwrap();
        assert_eq!(c.database.migrations(), Migrations::Apply);
        let c = load(
            "version: 1\n",
            &[("CLAWFED_DATABASE_MIGRATE_ON_START", "false")],
        )
        .unwrap();
        assert_eq!(c.database.migrations(), Migrations::Require);
        assert!(
            load(
                "version: 1\n",
                &[("CLAWFED_DATABASE_MIGRATE_ON_START", "sometimes")]
            )
            .is_err()
        );
    }

    #[test]
    fn the_application_role_is_a_postgres_role_name() {
        let c = load(
            "version: 1\ndatabase: { applicationRole: clawfed_app }\n",
            &[("CLAWFED_DATABASE_URL", PG)],
        )
        .unwrap();
        assert_eq!(c.database.application_role.as_deref(), Some("clawfed_app"));
        let c = load(
            "version: 1\n",
            &[
                ("CLAWFED_DATABASE_URL", PG),
                ("CLAWFED_DATABASE_APPLICATION_ROLE", "app"),
            ],
        )
        .unwrap();
        assert_eq!(c.database.application_role.as_deref(), Some("app"));
        let sqlite = load("version: 1\ndatabase: { applicationRole: app }\n", &[]).unwrap_err();
        assert!(
            sqlite.to_string().contains("database.applicationRole"),
            "{sqlite}"
        );
        let long = format!(
            "version: 1\ndatabase: {{ applicationRole: {} }}\n",
            "r".repeat(64)
        );
        assert!(load(&long, &[("CLAWFED_DATABASE_URL", PG)]).is_err());
    }
}
