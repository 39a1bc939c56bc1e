//! The hub's YAML configuration as the benches write it, the hub started
//! as a child process, and the wait for its "listening" line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, Command};

/// A bench hub's configuration: the API listeners on free loopback ports,
/// the link on `link_addr` with its CA in `<dir>/ca`, text logs at warn.
/// The `*_extra` fields are indented YAML lines added to that section;
/// `sections` are whole top-level sections (tunnel, pipeline, worker, ...).
pub struct HubYaml<'a> {
    pub db_url: &'a str,
    pub database_extra: &'a str,
    pub api_extra: &'a str,
    pub link_addr: &'a str,
    pub link_extra: &'a str,
    pub sections: &'a str,
}

/// The link's server names when spokes dial the hub on loopback.
pub const LOOPBACK_SERVER_NAMES: &str = "  serverNames: [localhost, 127.0.0.1]\n";

impl<'a> HubYaml<'a> {
    /// On `db_url`, the link on a free port, nothing added.
    pub fn new(db_url: &'a str) -> Self {
        Self {
            db_url,
            database_extra: "",
            api_extra: "",
            link_addr: "127.0.0.1:0",
            link_extra: "",
            sections: "",
        }
    }

    /// Writes it to `<dir>/hub.yaml`; that path.
    pub fn write(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        let path = dir.join("hub.yaml");
        let yaml = format!(
            "version: 1
database:
  url: \"{db_url}\"
{database_extra}api:
  restAddr: 127.0.0.1:0
  grpcAddr: 127.0.0.1:0
  metricsAddr: 127.0.0.1:0
{api_extra}link:
  enabled: true
  addr: {link_addr}
  caDir: \"{ca}\"
{link_extra}{sections}log:
  format: text
  filter: warn
",
            db_url = self.db_url,
            database_extra = self.database_extra,
            api_extra = self.api_extra,
            link_addr = self.link_addr,
            ca = dir.join("ca").display(),
            link_extra = self.link_extra,
            sections = self.sections,
        );
        std::fs::write(&path, yaml)?;
        Ok(path)
    }
}

/// The link lines of a hub that many simulated spokes dial at once, all
/// from 127.0.0.1: loopback server names, the heartbeat, and the session
/// and handshake limits.
pub fn many_spokes_link(heartbeat_seconds: u64, max_sessions: usize, handshakes: usize) -> String {
    format!(
        "{LOOPBACK_SERVER_NAMES}  heartbeatSeconds: {heartbeat_seconds}
  maxSessions: {max_sessions}
  maxConcurrentHandshakes: {handshakes}
  # Every simulated spoke dials from 127.0.0.1: one source address.
  maxHandshakesPerSource: {handshakes}
"
    )
}

/// Reads the hub's stdout until its "clawfed-hub listening:" line (60 s at
/// the most) and returns that line; `exited` is the error when stdout ends
/// first.
pub async fn listening_line<R: AsyncBufRead + Unpin>(
    stdout: &mut Lines<R>,
    exited: &'static str,
) -> anyhow::Result<String> {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match stdout.next_line().await? {
                Some(l) if l.starts_with("clawfed-hub listening:") => return anyhow::Ok(l),
                Some(_) => continue,
                None => anyhow::bail!(exited),
            }
        }
    })
    .await
    .context("hub did not start within 60 s")?
}

/// A `clawfed-hub serve` a bench started: the child (killed on drop) and
/// the addresses its listening line gave.
pub struct SpawnedHub {
    pub child: Child,
    pub pid: u32,
    pub rest: String,
    pub grpc: String,
    pub link: String,
}

/// Starts `bin --config config serve` (it migrates its fresh database
/// itself), its log to `log`, and waits for its listening line.
pub async fn spawn_hub(bin: &Path, config: &Path, log: &Path) -> anyhow::Result<SpawnedHub> {
    let log = std::fs::File::create(log)?;
    let mut child = Command::new(bin)
        .arg("--config")
        .arg(config)
        .arg("serve")
        .env(crate::MIGRATE_ON_START.0, crate::MIGRATE_ON_START.1)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .context("spawn hub")?;
    let pid = child.id().context("hub pid")?;
    let mut stdout = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let line = listening_line(&mut stdout, "hub exited before listening (see its log)").await?;
    // Keep draining its stdout so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
    let field = |key: &str| -> anyhow::Result<String> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .map(str::to_owned)
            .with_context(|| format!("no {key} in {line:?}"))
    };
    Ok(SpawnedHub {
        pid,
        rest: field("rest=")?,
        grpc: field("grpc=")?,
        link: field("link=")?,
        child,
    })
}
