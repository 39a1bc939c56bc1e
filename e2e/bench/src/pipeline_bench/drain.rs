//! The drain phase (issue 33): D Agents deployed onto the first cluster
//! (the others cordoned meanwhile, so placement has one choice), then that
//! cluster drained at parallelism P. Figures: the drain's wall time (the
//! hub's recorded start to end) and each Agent's move, from the move
//! revision's creation to its `active` (the predecessor is stopped and
//! the stop confirmed in between: the Agent's downtime is inside it).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clawfed_hub::model::{Agent, Cluster, List};
use futures::StreamExt;
use serde_json::json;

use super::phases::Bench;
use super::{chrono_ms, sorted};

/// What a drain took.
pub(super) struct Drained {
    pub(super) agents: usize,
    pub(super) parallelism: u32,
    pub(super) from: String,
    /// The hub's drain start to end (ms).
    pub(super) total_ms: f64,
    /// Each Agent's move: created to Active (ms), sorted.
    pub(super) moves_ms: Vec<f64>,
}

impl Bench {
    /// Puts `agents` Agents on the first cluster and drains it.
    pub(super) async fn drain(
        &self,
        agents: usize,
        parallelism: u32,
        timeout: Duration,
    ) -> Result<Drained> {
        let from = self.hub_clusters[0].clone();
        let others = &self.hub_clusters[1..];
        ensure!(!others.is_empty(), "a drain needs a second cluster");
        for c in others {
            let _: Cluster = self
                .rest
                .post(&format!("/clusters/{c}/cordon"), &())
                .await?;
        }
        let names: Vec<String> = (0..agents)
            .map(|i| format!("drain{i}-{}", self.suffix))
            .collect();
        // Placed by the pipeline, not pinned: a pinned Agent cannot move.
        self.deploy_with(&names, |spec| spec["placement"] = json!({}), timeout)
            .await?;
        for c in others {
            let _: Cluster = self
                .rest
                .post(&format!("/clusters/{c}/uncordon"), &())
                .await?;
        }
        let _: Cluster = self
            .rest
            .post(
                &format!("/clusters/{from}/drain"),
                &json!({ "parallelism": parallelism }),
            )
            .await?;
        let started = Instant::now();
        let drain = loop {
            let c: Cluster = self.rest.get(&format!("/clusters/{from}")).await?;
            let d = c.drain.context("the drained cluster has no drain")?;
            if d.finished_at.is_some() {
                break d;
            }
            if started.elapsed() > timeout {
                bail!("the drain of {from} did not end within {timeout:?}: {d:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let progress = drain.progress.context("the drain's progress")?;
        ensure!(
            progress.moved as usize == agents && progress.failed == 0,
            "drain of {from}: {} moved, {} failed, {} blocked of {agents}",
            progress.moved,
            progress.failed,
            progress.blocked
        );
        let mut moves = Vec::with_capacity(agents);
        for name in &names {
            let r = self.rest.revision(&self.tenant, name, 2).await?;
            let active = r
                .progress
                .phases
                .get("active")
                .with_context(|| format!("{name}: the move has no active time"))?;
            moves.push(chrono_ms(*active) - chrono_ms(r.created_at));
        }
        Ok(Drained {
            agents,
            parallelism,
            from,
            total_ms: chrono_ms(drain.finished_at.context("finished")?)
                - chrono_ms(drain.started_at),
            moves_ms: sorted(moves),
        })
    }

    /// Creates `names` (on the first cluster), edits each spec with
    /// `edit`, deploys them 16 at a time and waits until all are active.
    pub(super) async fn deploy_with(
        &self,
        names: &[String],
        edit: impl Fn(&mut serde_json::Value),
        timeout: Duration,
    ) -> Result<()> {
        for name in names {
            self.create_agent(name, 0).await?;
            let a: Agent = self
                .rest
                .get(&format!("/namespaces/{}/agents/{name}", self.tenant))
                .await?;
            let mut spec = serde_json::to_value(&a.spec)?;
            edit(&mut spec);
            let _: Agent = self
                .rest
                .put(
                    &format!("/namespaces/{}/agents/{name}", self.tenant),
                    &json!({ "spec": spec, "version": a.version }),
                )
                .await?;
        }
        let deployed: Vec<Result<()>> = futures::stream::iter(names.iter())
            .map(|n| async move {
                self.rest.deploy_current(&self.tenant, n).await?;
                Ok(())
            })
            .buffer_unordered(16)
            .collect()
            .await;
        deployed.into_iter().collect::<Result<Vec<_>>>()?;
        self.wait_active(names, 1, timeout).await
    }

    /// Waits until each of `names` has revision `number` active.
    pub(super) async fn wait_active(
        &self,
        names: &[String],
        number: i64,
        timeout: Duration,
    ) -> Result<()> {
        let started = Instant::now();
        loop {
            let list: List<Agent> = self
                .rest
                .get(&format!("/namespaces/{}/agents", self.tenant))
                .await?;
            let waiting: Vec<&String> = names
                .iter()
                .filter(|n| {
                    !list
                        .items
                        .iter()
                        .any(|a| &a.name == *n && a.active_revision == Some(number))
                })
                .collect();
            let Some(first) = waiting.first() else {
                return Ok(());
            };
            if started.elapsed() > timeout {
                let r = self.rest.revision(&self.tenant, first, number).await;
                let why = match r {
                    Ok(r) => format!("{:?}: {}", r.phase, r.reason.unwrap_or_default()),
                    Err(e) => e.to_string(),
                };
                bail!(
                    "{} of {} Agents without revision {number} active within {timeout:?} \
                     ({first}'s: {why})",
                    waiting.len(),
                    names.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
