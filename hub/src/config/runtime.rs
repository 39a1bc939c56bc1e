//! What the rest of the hub reads from the configuration: each component's
//! options (store pool, admin API TLS, Gateways, secrets key, service
//! policy, link, tunnel, worker lanes) and what the hub says at start.

use std::time::Duration;

use crate::service::Policy;
use crate::worker::WorkerConfig;
use crate::worker::backoff::Backoff;

use super::{Config, InstallationMode};

impl Config {
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

    /// The store's pool settings (see [`DatabaseConfig`](super::DatabaseConfig)).
    pub fn pool_settings(&self) -> crate::store::PoolSettings {
        crate::store::PoolSettings {
            max_connections: self
                .database
                .max_connections
                .unwrap_or(self.worker.batch_size.saturating_add(16)),
            acquire_timeout: Duration::from_secs(self.database.acquire_timeout_seconds),
        }
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
            workload: self.workload_settings(),
            quotas: self.quotas.clone(),
        }
    }

    /// Whether deployed revisions are driven through spokes.
    pub fn pipeline_enabled(&self) -> bool {
        self.link.enabled && self.pipeline.enabled
    }

    /// The link settings this configuration sets.
    /// `link.advertiseUrl` as published, its port 0 (a replica whose link
    /// binds port 0) replaced by `bound_port`, the port the link bound.
    pub fn link_advertise_url(&self, bound_port: u16) -> Option<String> {
        let url = self.link.advertise_url.as_deref()?;
        resolve_advertise_url(url, bound_port).ok()
    }

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
            advertise_url: self.link_advertise_url(self.link.addr.port()),
            balance: crate::link::balance::BalanceConfig {
                interval: Duration::from_secs(self.link.balance_interval_seconds),
                slack: self.link.balance_slack,
                max_moves: self.link.balance_max_moves,
            },
            node_selector: self.workload_settings().node_selector,
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

    /// This hub's instance name
    /// ([`WorkerSettings::instance_id`](super::WorkerSettings::instance_id)),
    /// with the SQLite default.
    pub fn instance_id(&self) -> Option<String> {
        self.worker.instance_id.clone().or_else(|| {
            self.database
                .url
                .starts_with("sqlite:")
                .then(|| "embedded".to_owned())
        })
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

/// The Gateway lane's safety poll (at least): see [`Config::worker_lanes`].
const GATEWAY_LANE_SAFETY_POLL: Duration = Duration::from_secs(60);

/// Parses an advertised link URL; a port of 0 stands for `bound_port`, so a
/// replica started on port 0 can advertise the port it was given.
pub(crate) fn resolve_advertise_url(
    url: &str,
    bound_port: u16,
) -> Result<String, clawfed_proto::link::address::AddressError> {
    let trimmed = url.trim();
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    let url = match trimmed.strip_suffix(":0") {
        Some(base) => format!("{base}:{bound_port}"),
        None => trimmed.to_owned(),
    };
    clawfed_proto::link::address::LinkAddress::parse(&url).map(|a| a.to_string())
}
