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
}

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Format version of this file; only 1 exists.
    #[serde(default = "one")]
    pub version: u32,
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
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: "sqlite://./clawfed.db".into(),
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
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            rest_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            grpc_addr: SocketAddr::from(([127, 0, 0, 1], 8081)),
            metrics_addr: SocketAddr::from(([127, 0, 0, 1], 9464)),
            max_body_bytes: 1024 * 1024,
        }
    }
}

/// The worker.
#[derive(Debug, Clone, Deserialize)]
// Every field is optional: a partial section keeps the other defaults.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WorkerSettings {
    pub enabled: bool,
    pub batch_size: u32,
    pub lease_seconds: u64,
    /// Sleep when no work is due. A pipeline pass queued by a spoke report
    /// waits for it, so it adds up to this per step to deploy → Active.
    pub poll_interval_ms: u64,
    pub max_attempts: i32,
    pub backoff_base_ms: u64,
    pub backoff_cap_ms: u64,
    pub health_interval_seconds: u64,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            batch_size: 32,
            lease_seconds: 30,
            poll_interval_ms: 50,
            max_attempts: 8,
            backoff_base_ms: 1000,
            backoff_cap_ms: 300_000,
            health_interval_seconds: 60,
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
    /// The spoke reports a Harness ready only once the Ready Pod's plugin
    /// startup status (`/_clawfed/startup`, read through the Pod proxy) is
    /// valid for the revision; its warnings are recorded with the
    /// revision's readiness. Off only for Harness images that publish no
    /// status (never in production).
    pub startup_status: bool,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            ready_deadline_seconds: 300,
            phase_deadline_seconds: 300,
            path_probe: true,
            startup_status: true,
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
    /// Directory of the link CA (`ca.key` mode 0600, `ca.crt`); created on
    /// first start, or supplied by the operator.
    pub ca_dir: std::path::PathBuf,
    /// Names and IPs on the link's serving certificate.
    pub server_names: Vec<String>,
    pub cert_ttl_seconds: u64,
    pub heartbeat_seconds: u64,
    pub max_sessions: usize,
    pub max_concurrent_handshakes: usize,
    /// TLS handshakes in progress from one source address at most.
    pub max_handshakes_per_source: usize,
    pub max_message_bytes: usize,
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
            max_message_bytes: d.max_message_bytes,
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
}

impl Default for PolicyConfig {
    fn default() -> Self {
        let p = Policy::default();
        Self {
            require_immutable_digest: p.require_immutable_digest,
            default_gateway_image: p.default_gateway_image,
        }
    }
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
        }
    }
}

impl Config {
    /// Loads `path` (when given), applies overrides from `env` and checks
    /// the result ([`Self::validate`]). Overrides:
    /// `CLAWFED_DATABASE_URL`, `CLAWFED_REST_ADDR`, `CLAWFED_GRPC_ADDR`,
    /// `CLAWFED_METRICS_ADDR`, `CLAWFED_WORKER_ENABLED`,
    /// `CLAWFED_REQUIRE_IMMUTABLE_DIGEST`, `CLAWFED_LOG_FORMAT`,
    /// `CLAWFED_LOG`.
    pub fn load(path: Option<&Path>, env: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let mut config = match path {
            Some(path) => {
                let shown = path.display().to_string();
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: shown.clone(),
                    source,
                })?;
                serde_yaml_ng::from_str::<Config>(&text).map_err(|source| ConfigError::Parse {
                    path: shown,
                    source,
                })?
            }
            None => Config::default(),
        };
        config.apply_env(env)?;
        config.validate()?;
        Ok(config)
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
                "CLAWFED_LINK_CA_DIR" => self.link.ca_dir = value.into(),
                "CLAWFED_LINK_CERT_TTL_SECONDS" => self.link.cert_ttl_seconds = parse(name, value)?,
                "CLAWFED_LINK_HEARTBEAT_SECONDS" => {
                    self.link.heartbeat_seconds = parse(name, value)?
                }
                "CLAWFED_LINK_MAX_SESSIONS" => self.link.max_sessions = parse(name, value)?,
                "CLAWFED_REQUIRE_IMMUTABLE_DIGEST" => {
                    self.policy.require_immutable_digest = parse(name, value)?
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
                _ => {}
            }
        }
        Ok(())
    }

    /// Checks ranges and that the settings agree with each other.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: &str, reason: &str| ConfigError::Invalid {
            field: field.into(),
            reason: reason.into(),
        };
        if self.version != 1 {
            return Err(invalid("version", "only version 1 is supported"));
        }
        if self.worker.batch_size == 0 || self.worker.batch_size > 1000 {
            return Err(invalid("worker.batchSize", "must be between 1 and 1000"));
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
        if self.link.max_concurrent_handshakes == 0 {
            return Err(invalid(
                "link.maxConcurrentHandshakes",
                "must be at least 1",
            ));
        }
        if self.link.max_handshakes_per_source == 0 {
            return Err(invalid("link.maxHandshakesPerSource", "must be at least 1"));
        }
        if self.api.max_body_bytes < 1024 {
            return Err(invalid("api.maxBodyBytes", "must be at least 1024"));
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

    /// The Gateway settings with the installation policy applied: the
    /// digest rule and the default image come from `policy`, so a deploy
    /// the hub admits is one its Gateways accept.
    pub fn gateway_options(&self) -> crate::gateway::GatewayConfig {
        let mut options = self.gateway.options.clone();
        options.require_immutable_digest = self.policy.require_immutable_digest;
        if options.default_image.is_none() {
            options.default_image = Some(self.policy.default_gateway_image.clone());
        }
        options
    }

    /// The service policy this configuration sets.
    pub fn policy(&self) -> Policy {
        Policy {
            require_immutable_digest: self.policy.require_immutable_digest,
            default_gateway_image: self.policy.default_gateway_image.clone(),
            work_max_attempts: self.worker.max_attempts,
            pipeline: self.pipeline_enabled(),
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
            max_message_bytes: self.link.max_message_bytes,
            tunnel: self.tunnel_config(),
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
            ..crate::tunnel::TunnelConfig::default()
        }
    }

    /// The worker settings this configuration sets.
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
}
