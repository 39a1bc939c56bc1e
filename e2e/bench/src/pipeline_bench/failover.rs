//! The failover phase (issue 33): F Agents with `failover.afterSeconds`
//! deployed onto the first cluster (it comes first in their preference
//! list), then that cluster's spoke partitioned from the hub (its link
//! goes through a proxy the bench cuts; the spoke keeps running, and
//! fences). Figures: each Agent's failover time, from the cut to its move
//! revision's `active` (the hub's recorded time; one host, one clock),
//! beside the periods of the contract (`clawfed_proto::failover`) that
//! bound it: the spoke fences F after its last answered renewal, the hub
//! moves P after the last one it recorded. The partition then heals and the
//! spoke retires what it fenced.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use clawfed_hub::model::Cluster;
use clawfed_tests::proxy::Proxy;
use serde_json::json;

use super::phases::Bench;
use super::{chrono_ms, now_ms, sorted};

/// What a failover took.
pub(super) struct FailedOver {
    pub(super) agents: usize,
    pub(super) after_seconds: u32,
    pub(super) from: String,
    /// Each Agent's cut → move active (ms), sorted.
    pub(super) times_ms: Vec<f64>,
    /// The cut → every predecessor retired on the healed cluster (ms).
    pub(super) retired_ms: f64,
}

impl Bench {
    /// Puts `agents` failover-enabled Agents on the first cluster and cuts
    /// its spoke off through `partition`.
    pub(super) async fn failover(
        &self,
        partition: &Proxy,
        agents: usize,
        after_seconds: u32,
        timeout: Duration,
    ) -> Result<FailedOver> {
        let from = self.hub_clusters[0].clone();
        let to = self
            .hub_clusters
            .get(1)
            .cloned()
            .context("a failover needs a second cluster")?;
        // A drain before leaves the first cluster cordoned.
        let _: Cluster = self
            .rest
            .post(&format!("/clusters/{from}/uncordon"), &())
            .await?;
        let names: Vec<String> = (0..agents)
            .map(|i| format!("fo{i}-{}", self.suffix))
            .collect();
        let (a, b) = (from.clone(), to.clone());
        self.deploy_with(
            &names,
            move |spec| {
                spec["placement"] = json!({ "clusters": [a, b] });
                spec["failover"] = json!({ "afterSeconds": after_seconds });
            },
            timeout,
        )
        .await?;
        for name in &names {
            let r = self.rest.revision(&self.tenant, name, 1).await?;
            ensure!(
                r.resolved_cluster.as_deref() == Some(from.as_str()),
                "{name} landed on {:?}",
                r.resolved_cluster
            );
        }
        let cut_ms = now_ms();
        let cut = Instant::now();
        partition.partition(true);
        self.wait_active(&names, 2, timeout).await?;
        let mut times = Vec::with_capacity(agents);
        for name in &names {
            let r = self.rest.revision(&self.tenant, name, 2).await?;
            ensure!(
                r.resolved_cluster.as_deref() == Some(to.as_str())
                    && r.moved_from.as_deref() == Some(from.as_str()),
                "{name}: {r:?}"
            );
            let active = r
                .progress
                .phases
                .get("active")
                .with_context(|| format!("{name}: the move has no active time"))?;
            times.push(chrono_ms(*active) - cut_ms);
        }
        partition.partition(false);
        let deadline = Instant::now() + timeout;
        for name in &names {
            loop {
                let r = self.rest.revision(&self.tenant, name, 1).await?;
                if r.phase == clawfed_hub::model::RevisionPhase::Retired {
                    break;
                }
                ensure!(
                    Instant::now() < deadline,
                    "{name} revision 1 not retired on {from} after the partition healed: {:?}",
                    r.phase
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(FailedOver {
            agents,
            after_seconds,
            from,
            times_ms: sorted(times),
            retired_ms: cut.elapsed().as_secs_f64() * 1000.0,
        })
    }
}
