//! Replicas: the hub configuration of one database, and `clawfed-hub serve`
//! processes started on it, each found by the replica id its `/readyz` names.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clawfed_bench::MIGRATE_ON_START;
use clawfed_bench::fleet::{HubProc, http_get};
use clawfed_bench::hubconf::{HubYaml, many_spokes_link};
use tokio::process::Command;

use super::Args;

/// What every replica of one database shares.
pub(super) struct ReplicaSet {
    pub(super) hub_bin: PathBuf,
    pub(super) config: PathBuf,
    pub(super) log_dir: PathBuf,
}

/// One running replica.
pub(super) struct Replica {
    pub(super) tag: String,
    pub(super) proc: HubProc,
    pub(super) id: String,
    link_port: u16,
}

impl Replica {
    pub(super) fn link_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.link_port))
    }

    pub(super) fn link_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.link_port)
    }

    pub(super) fn rest_url(&self) -> String {
        format!("http://{}", self.proc.rest)
    }
}

/// The hub configuration of one database. `safety_poll_ms` sets the
/// worker's, the link's and the watch's safety polls (the defaults when
/// `None`).
pub(super) fn hub_config(
    dir: &Path,
    db_url: &str,
    a: &Args,
    safety_poll_ms: Option<u64>,
) -> anyhow::Result<PathBuf> {
    let pool = a
        .replica_max_connections
        .map(|n| format!("  maxConnections: {n}\n"))
        .unwrap_or_default();
    std::fs::create_dir_all(dir)?;
    let (worker_poll, link_poll) = match safety_poll_ms {
        Some(ms) => (
            format!("worker:\n  safetyPollMs: {ms}\nwatch:\n  safetyPollMs: {ms}\n"),
            format!("  safetyPollMs: {ms}\n"),
        ),
        None => (String::new(), String::new()),
    };
    let link = format!(
        "{}{link_poll}",
        many_spokes_link(
            a.heartbeat_seconds,
            a.spokes + 1000,
            a.max_concurrent_handshakes
        )
    );
    HubYaml {
        database_extra: &pool,
        link_extra: &link,
        sections: &format!(
            "{worker_poll}tunnel:
  enabled: true
  addr: 127.0.0.1:0
pipeline:
  enabled: true
  # No process behind the simulated spokes' Harnesses (see the deploy figure).
  pathProbe: false
  startupStatus: false
"
        ),
        ..HubYaml::new(db_url)
    }
    .write(dir)
}

impl ReplicaSet {
    /// Starts a replica with its link on a free port and waits until its
    /// `/readyz` names it.
    pub(super) async fn start(&self, tag: &str) -> anyhow::Result<Replica> {
        let mut cmd = Command::new(&self.hub_bin);
        cmd.arg("--config")
            .arg(&self.config)
            .arg("serve")
            .env_remove("CLAWFED_CONFIG")
            .env(MIGRATE_ON_START.0, MIGRATE_ON_START.1)
            // Port 0: the replica binds a free one and prints it.
            .env("CLAWFED_LINK_ADDR", "127.0.0.1:0");
        let log = self.log_dir.join(format!("{tag}.log"));
        let proc = HubProc::spawn(cmd, &log, false)
            .await
            .with_context(|| format!("{tag} (log {})", log.display()))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let id = loop {
            let answer = http_get(proc.metrics, "/readyz").await.unwrap_or_default();
            let id = answer.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("clawfed-replica")
                    .then(|| v.trim().to_owned())
            });
            if let Some(id) = id.filter(|i| !i.is_empty()) {
                break id;
            }
            if Instant::now() > deadline {
                bail!("{tag}: /readyz named no replica within 30 s: {answer:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        Ok(Replica {
            tag: tag.to_owned(),
            link_port: proc.link.port(),
            proc,
            id,
        })
    }
}
