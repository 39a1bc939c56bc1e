//! Loading the configuration: the file (every key checked, the Compute
//! Driver section folded in), then the environment overrides, then the
//! defaults that depend on the backend and the mode.

use std::collections::HashMap;
use std::path::Path;

use super::drivers::SHARED_KEYS;
use super::{
    Config, ConfigError, ExplicitPolls, InstallationMode, KUBERNETES_COMPUTE_DRIVER, LogFormat,
    POSTGRES_SAFETY_POLL,
};

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
    /// `CLAWFED_DATABASE_URL`, `CLAWFED_DATABASE_MIGRATE_ON_START`,
    /// `CLAWFED_DATABASE_APPLICATION_ROLE`, `CLAWFED_REST_ADDR`, `CLAWFED_GRPC_ADDR`,
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

    /// The defaults that depend on the database: on PostgreSQL the safety
    /// polls the file did not set become [`POSTGRES_SAFETY_POLL`] (after
    /// the environment, which may name the database).
    pub fn apply_backend_defaults(&mut self) {
        if !self.database.is_postgres() {
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
                "CLAWFED_DATABASE_MIGRATE_ON_START" => {
                    self.database.migrate_on_start = Some(parse(name, value)?)
                }
                "CLAWFED_DATABASE_APPLICATION_ROLE" => {
                    self.database.application_role = Some(value.clone())
                }
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
}

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
