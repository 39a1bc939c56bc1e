//! The hub process: its configuration, the release `clawfed-hub serve`
//! started as a child, and the audit record of the setup written straight
//! in the store (its PostgreSQL database comes from `clawfed_bench::pg`).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;
use clawfed_bench::MIGRATE_ON_START;
use clawfed_bench::hubconf::{HubYaml, LOOPBACK_SERVER_NAMES, listening_line};
use clawfed_hub::store::{Effects, NewAudit};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub(super) fn hub_config(
    dir: &Path,
    db_url: &str,
    batch_ms: Option<u64>,
) -> anyhow::Result<PathBuf> {
    let watch = batch_ms.map_or_else(String::new, |ms| format!("watch:\n  batchMs: {ms}\n"));
    HubYaml {
        link_extra: LOOPBACK_SERVER_NAMES,
        sections: &format!(
            "tunnel:
  enabled: false
pipeline:
  enabled: false
{watch}"
        ),
        ..HubYaml::new(db_url)
    }
    .write(dir)
}

pub(super) struct Hub {
    pub(super) child: Child,
    pub(super) pid: u32,
    pub(super) rest: String,
    pub(super) grpc: String,
    pub(super) link: String,
}

pub(super) async fn spawn_hub(bin: &Path, config: &Path, log: &Path) -> anyhow::Result<Hub> {
    let log = std::fs::File::create(log)?;
    let mut child = Command::new(bin)
        .arg("--config")
        .arg(config)
        .arg("serve")
        .env(MIGRATE_ON_START.0, MIGRATE_ON_START.1)
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
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
    Ok(Hub {
        pid,
        rest: field("rest=")?,
        grpc: field("grpc=")?,
        link: field("link=")?,
        child,
    })
}

pub(super) fn audit(target: &str) -> Effects {
    Effects::audit(NewAudit {
        actor: "watch-bench".into(),
        action: "bench.setup".into(),
        namespace: None,
        target: target.into(),
        result: "ok".into(),
        detail: None,
    })
}
