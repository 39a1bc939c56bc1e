//! `clawfed clusters drain`: starts (or re-paces) a drain and prints its
//! progress, Agent by Agent; with `--wait`, follows it to its end.

use std::time::Duration;

use super::output::{self, Format};
use crate::client::{ClientError, ClientResult, HubClient};
use crate::model::{Cluster, DrainRequest};

/// How often `--wait` reads the drain again.
const POLL: Duration = Duration::from_secs(1);

pub(super) async fn drain(
    c: &HubClient,
    f: Format,
    name: &str,
    parallelism: u32,
    wait: bool,
) -> ClientResult<String> {
    let req = DrainRequest {
        parallelism: Some(parallelism),
    };
    let mut cluster: Cluster = c.post(&format!("/clusters/{name}/drain"), &req).await?;
    let mut last = None;
    while wait && cluster.draining() {
        let counts = counts(&cluster);
        if last.as_ref() != Some(&counts) {
            eprintln!("{counts}");
            last = Some(counts);
        }
        tokio::time::sleep(POLL).await;
        cluster = c.get(&format!("/clusters/{name}")).await?;
    }
    output::print_drain(f, &cluster).map_err(|e| ClientError::Other(e.to_string()))
}

/// One progress line: `waiting 2, moving 1, moved 3, blocked 0, failed 0`.
fn counts(c: &Cluster) -> String {
    match c.drain.as_ref().and_then(|d| d.progress.as_ref()) {
        Some(p) => format!(
            "waiting {}, moving {}, moved {}, blocked {}, failed {}",
            p.waiting, p.moving, p.moved, p.blocked, p.failed
        ),
        None => "no progress reported".into(),
    }
}
