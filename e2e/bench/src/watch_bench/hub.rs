//! The hub process: its configuration (started with
//! `clawfed_bench::hubconf::spawn_hub`), and the audit record of the setup
//! written straight in the store (its PostgreSQL database comes from
//! `clawfed_bench::pg`).

use std::path::{Path, PathBuf};

use clawfed_bench::hubconf::{HubYaml, LOOPBACK_SERVER_NAMES};
use clawfed_hub::store::{Effects, NewAudit};

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
