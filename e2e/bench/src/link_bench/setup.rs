//! Setup: the enrolled spokes' identities as `--state-dir` keeps them,
//! and the hub's configuration.

use std::path::{Path, PathBuf};

use clawfed_bench::hubconf::{HubYaml, many_spokes_link};
use serde::{Deserialize, Serialize};

use super::RunArgs;

/// An enrolled spoke as `--state-dir` keeps it between runs.
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct SavedIdentity {
    pub(super) name: String,
    pub(super) cluster_id: String,
    pub(super) key_pem: String,
    pub(super) cert_pem: String,
}

pub(super) fn hub_config(
    dir: &Path,
    db_url: &str,
    link_port: u16,
    a: &RunArgs,
) -> anyhow::Result<PathBuf> {
    let link = format!(
        "  certTtlSeconds: 604800\n{}  maxMessageBytes: 4194304\n",
        many_spokes_link(
            a.heartbeat_seconds,
            a.spokes + 1000,
            a.max_concurrent_handshakes
        )
    );
    HubYaml {
        api_extra: "  maxBodyBytes: 1048576\n",
        link_addr: &format!("127.0.0.1:{link_port}"),
        link_extra: &link,
        sections: "tunnel:\n  enabled: false\n",
        ..HubYaml::new(db_url)
    }
    .write(dir)
}
