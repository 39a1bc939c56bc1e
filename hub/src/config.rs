//! Hub configuration: a versioned YAML file (unknown fields rejected) with
//! typed environment overrides. Every setting has a default that works with
//! no file: SQLite at `./clawfed.db`, REST on 127.0.0.1:8080, gRPC on
//! 127.0.0.1:8081, metrics on 127.0.0.1:9464.
//!
//! The loader takes the environment as an argument, so tests need no global
//! state.
//!
//! This file holds the whole file's type ([`Config`]), its errors and the
//! installation mode; the sections' types are in `sections`, the Compute
//! Driver section and its merge in `drivers`, file and environment loading
//! in `load`, the checks in `validate`, and what the rest of the hub reads
//! (each component's options) in `runtime`.

use std::time::Duration;

use serde::Deserialize;

mod drivers;
mod load;
mod runtime;
mod sections;
mod validate;

pub use drivers::{ComputeDriverSection, DriversConfig, KUBERNETES_COMPUTE_DRIVER};
pub use sections::{
    ApiConfig, ApiTlsSettings, DatabaseConfig, GatewaySettings, LinkSettings, LogConfig, LogFormat,
    PipelineSettings, PolicyConfig, SecretsSettings, TunnelSettings, WorkerSettings,
};

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
    /// Each tenant's limits: Agents, running Agents, revisions an hour,
    /// credentials.
    #[serde(default)]
    pub quotas: crate::quota::QuotaSettings,
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

fn one() -> u32 {
    1
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
            quotas: Default::default(),
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

#[cfg(test)]
mod tests;
