//! The checks of a loaded configuration: ranges, and that the settings
//! agree with each other (the admin API's TLS and plain HTTP rule among
//! them).

use std::net::SocketAddr;

use super::{Config, ConfigError, InstallationMode};

impl Config {
    /// Checks ranges and that the settings agree with each other.
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
        if let Some(role) = &self.database.application_role {
            if !self.database.is_postgres() {
                return Err(invalid(
                    "database.applicationRole",
                    "applies to PostgreSQL only",
                ));
            }
            // PostgreSQL's NAMEDATALEN; quoted, any other character is fine.
            if role.is_empty() || role.len() > 63 || role.contains('\0') {
                return Err(invalid(
                    "database.applicationRole",
                    "must be a PostgreSQL role name of 1-63 bytes",
                ));
            }
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
            && let Err(e) = super::runtime::resolve_advertise_url(url, self.link.addr.port().max(1))
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
    pub(super) fn exposed_api_addr(&self) -> Option<SocketAddr> {
        [self.api.rest_addr, self.api.grpc_addr]
            .into_iter()
            .find(|a| !a.ip().is_loopback())
    }
}
