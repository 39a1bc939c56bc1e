//! The measured phases: latency (one deploy at a time) and throughput
//! (many at once), and each revision's figures.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clawfed_bench::percentile as pct;
use clawfed_bench::procfs::CpuSpan;
use clawfed_hub::client::HubClient;
use clawfed_hub::model::{Agent, AgentRevision, List, RevisionPhase};
use futures::StreamExt;

use super::gateway_world::GatewayWorld;
use super::hub_rest::{EnsureTotals, create_agent, ensure_totals, phase_events};
use super::kube_watch::{KubeTimes, Times};
use super::{Args, chrono_ms, now_ms, sorted};

/// One revision's figures (ms).
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    /// deploy request → `active` (observed by GET in the latency phase;
    /// the hub's recorded `active` time in the throughput phase).
    pub(super) total: f64,
    /// Harness Deployment seen → the later of its Pod Ready and (Gateways
    /// on) the Gateway's Pod Ready.
    pub(super) kube: f64,
    /// Gateway Deployment seen → Gateway Pod Ready seen (NaN: Gateways off).
    pub(super) gateway: f64,
    /// Pod seen → Pod Ready seen.
    pub(super) pod: f64,
    /// deploy request → Deployment seen.
    pub(super) before: f64,
    /// The last Pod Ready seen (Harness, Gateway) → `active`.
    pub(super) after: f64,
    /// deploy request → the first pipeline pass (phase `preparing` entered
    /// by the worker).
    pub(super) first_pass: f64,
    /// The Gateway's ensure queued → applied (its own worker lane; NaN:
    /// no Gateway).
    pub(super) gateway_ensure: f64,
}

impl Sample {
    pub(super) fn overhead(&self) -> f64 {
        self.total - self.kube
    }
}

pub(super) struct Bench {
    pub(super) args: Args,
    pub(super) rest: HubClient,
    /// The hub's metrics listener (`host:port`).
    pub(super) metrics: String,
    pub(super) tenant: String,
    /// The tenant's clawfed namespace id (names its Gateway namespace).
    pub(super) namespace_id: String,
    /// Hub cluster names, by index of `args.clusters`.
    pub(super) hub_clusters: Vec<String>,
    pub(super) times: Times,
    /// Agent names are per run (the Gateway namespace is shared).
    pub(super) suffix: String,
    /// Gateways on: the control cluster's side of each Agent.
    pub(super) gateways: Option<Arc<GatewayWorld>>,
    /// Agent -> index of the cluster its Harness is placed on.
    pub(super) placed: Arc<Mutex<HashMap<String, usize>>>,
}

impl Bench {
    async fn kube_times(&self, cluster: usize, agent: &str) -> Result<KubeTimes> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let t = self
                .times
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&(cluster, agent.to_owned()))
                .copied()
                .unwrap_or_default();
            let gateway_seen = self.gateways.is_none() || t.gateway_pod_ready.is_some();
            if t.deployment.is_some() && t.pod.is_some() && t.pod_ready.is_some() && gateway_seen {
                return Ok(t);
            }
            if Instant::now() > deadline {
                bail!(
                    "agent {agent}: the bench's watches on {} (and the Gateway namespace) did not see its Deployment and Ready Pod ({t:?})",
                    self.args.clusters[cluster]
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn sample(&self, t0: f64, active: f64, k: KubeTimes, rev: &AgentRevision) -> Sample {
        let (d, p, r) = (
            k.deployment.unwrap_or(f64::NAN),
            k.pod.unwrap_or(f64::NAN),
            k.pod_ready.unwrap_or(f64::NAN),
        );
        let gateway = match (k.gateway_deployment, k.gateway_pod_ready) {
            (Some(d), Some(r)) => r - d,
            _ => f64::NAN,
        };
        // Activation waits for both Pods; the later one ends Kubernetes' part.
        let last_ready = k.gateway_pod_ready.map_or(r, |g| g.max(r));
        Sample {
            total: active - t0,
            kube: last_ready - d,
            gateway,
            pod: r - p,
            before: d - t0,
            after: active - last_ready,
            first_pass: rev
                .progress
                .phases
                .get(RevisionPhase::Preparing.as_str())
                .map_or(f64::NAN, |t| chrono_ms(*t) - t0),
            gateway_ensure: match (
                rev.progress.gateway_queued_at,
                rev.progress.gateway_applied_at,
            ) {
                (Some(q), Some(a)) => chrono_ms(a) - chrono_ms(q),
                _ => f64::NAN,
            },
        }
    }

    /// Makes the Agent in the hub (and, Gateways on, its Gateway PV).
    pub(super) async fn create_agent(&self, agent: &str, cluster: usize) -> Result<()> {
        self.placed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(agent.to_owned(), cluster);
        if let Some(g) = &self.gateways {
            // The Agent-owned workspace claims get volumes from the
            // execution clusters' provisioner.
            g.prepare(&self.namespace_id, agent).await?;
        }
        create_agent(
            &self.rest,
            &self.tenant,
            agent,
            &self.hub_clusters[cluster],
            self.gateways.is_some(),
        )
        .await
    }

    /// Deploys `agent` and polls its revision until `active`.
    async fn deploy_one(&self, agent: &str, cluster: usize) -> Result<Sample> {
        self.create_agent(agent, cluster).await?;
        let t0 = now_ms();
        let started = Instant::now();
        self.rest.deploy_current(&self.tenant, agent).await?;
        let limit = Duration::from_secs(self.args.revision_timeout_seconds);
        let (active, rev) = loop {
            let r = self.rest.revision(&self.tenant, agent, 1).await?;
            match r.phase {
                RevisionPhase::Active => break (now_ms(), r),
                RevisionPhase::Failed | RevisionPhase::Stopped | RevisionPhase::Retired => {
                    bail!("agent {agent}: revision 1 {:?}: {:?}", r.phase, r.reason)
                }
                _ => {}
            }
            if started.elapsed() > limit {
                bail!(
                    "agent {agent}: revision 1 not Active after {limit:?} (phase {:?})",
                    r.phase
                );
            }
            tokio::time::sleep(Duration::from_millis(self.args.poll_ms)).await;
        };
        let k = self.kube_times(cluster, agent).await?;
        Ok(self.sample(t0, active, k, &rev))
    }

    pub(super) async fn latency(&self) -> Result<(Vec<Sample>, Vec<Sample>)> {
        let n = self.args.clusters.len();
        let mut warm = Vec::new();
        for c in 0..n {
            warm.push(
                self.deploy_one(&format!("warm{c}-{}", self.suffix), c)
                    .await?,
            );
        }
        let mut out = Vec::with_capacity(self.args.latency_agents);
        for i in 0..self.args.latency_agents {
            out.push(
                self.deploy_one(&format!("lat{i}-{}", self.suffix), i % n)
                    .await?,
            );
        }
        Ok((warm, out))
    }

    /// One poll round (when the watch stream is gone): Agents whose
    /// revision 1 turned Active since, with the hub's recorded time.
    async fn poll_active(
        &self,
        t0s: &HashMap<String, f64>,
        active: &mut HashMap<String, f64>,
    ) -> Result<()> {
        let agents: List<Agent> = self
            .rest
            .get(&format!("/namespaces/{}/agents", self.tenant))
            .await?;
        for a in agents.items {
            if !t0s.contains_key(&a.name) || active.contains_key(&a.name) {
                continue;
            }
            let r = self.rest.revision(&self.tenant, &a.name, 1).await?;
            match r.phase {
                RevisionPhase::Active => {
                    if let Some(at) = r.progress.phases.get(RevisionPhase::Active.as_str()) {
                        active.insert(a.name.clone(), chrono_ms(*at));
                    }
                }
                RevisionPhase::Failed | RevisionPhase::Stopped => {
                    bail!(
                        "throughput: {} revision 1 {:?}: {:?}",
                        a.name,
                        r.phase,
                        r.reason
                    )
                }
                _ => {}
            }
        }
        Ok(())
    }

    pub(super) async fn throughput(&self) -> Result<Throughput> {
        let n = self.args.clusters.len();
        let count = self.args.throughput_agents;
        let names: Vec<(String, usize)> = (0..count)
            .map(|i| (format!("tp{i}-{}", self.suffix), i % n))
            .collect();
        // Drafts first (not measured).
        let created: Vec<Result<()>> = futures::stream::iter(names.iter())
            .map(|(a, c)| self.create_agent(a, *c))
            .buffer_unordered(16)
            .collect()
            .await;
        for r in created {
            r?;
        }
        let ensures_before = ensure_totals(&self.metrics).await?;
        // Followed on the watch stream, opened before the first deploy (a
        // poll of 200 revisions would load the hub it measures).
        let mut events = Some(phase_events(&self.rest, &self.tenant).await?);
        let cpu = CpuSpan::start();
        let t_start = now_ms();
        let started = Instant::now();
        let deploys = futures::future::join_all(names.iter().map(|(a, _)| async move {
            let t0 = now_ms();
            let r = self.rest.deploy_current(&self.tenant, a).await;
            (t0, now_ms() - t0, r)
        }))
        .await;
        let mut t0s = HashMap::new();
        let mut post_ms = Vec::new();
        for ((a, _), (t0, took, r)) in names.iter().zip(deploys) {
            r.with_context(|| format!("deploy {a}"))?;
            t0s.insert(a.clone(), t0);
            post_ms.push(took);
        }
        let deployed_in = now_ms() - t_start;
        let limit = Duration::from_secs(self.args.throughput_timeout_seconds);
        // Agent -> the hub's recorded Active time.
        let mut active: HashMap<String, f64> = HashMap::new();
        while active.len() < count {
            if started.elapsed() > limit {
                bail!(
                    "throughput: {} of {count} Active after {limit:?}",
                    active.len()
                );
            }
            let Some(rx) = &mut events else {
                self.poll_active(&t0s, &mut active).await?;
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            match tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
                Ok(Some(ev)) if ev.number == 1 && t0s.contains_key(&ev.agent) => match ev.phase {
                    RevisionPhase::Active => {
                        if let Some(at) = ev.phases.get(RevisionPhase::Active.as_str()) {
                            active.insert(ev.agent, chrono_ms(*at));
                        }
                    }
                    RevisionPhase::Failed | RevisionPhase::Stopped => bail!(
                        "throughput: {} revision 1 {:?}: {:?}",
                        ev.agent,
                        ev.phase,
                        ev.reason
                    ),
                    _ => {}
                },
                Ok(Some(_)) | Err(_) => {}
                Ok(None) => {
                    eprintln!("pipeline-bench: the watch stream ended; polling instead");
                    events = None;
                }
            }
        }
        let cpu = cpu.note();
        let mut samples = Vec::with_capacity(count);
        let mut last_gateway_applied = f64::NAN;
        for (a, c) in &names {
            let k = self.kube_times(*c, a).await?;
            let rev = self.rest.revision(&self.tenant, a, 1).await?;
            if let Some(at) = rev.progress.gateway_applied_at {
                last_gateway_applied = last_gateway_applied.max(chrono_ms(at));
            }
            samples.push(self.sample(t0s[a], active[a], k, &rev));
        }
        let done = sorted(active.values().copied().collect());
        // How fast each spoke turned Harness work into Deployments.
        let apply_rates = {
            let m = self.times.lock().unwrap_or_else(|p| p.into_inner());
            (0..n)
                .map(|c| {
                    let seen: Vec<f64> = names
                        .iter()
                        .filter(|(_, cc)| *cc == c)
                        .filter_map(|(a, _)| m.get(&(c, a.clone()))?.deployment)
                        .collect();
                    let span = seen.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                        - seen.iter().copied().fold(f64::INFINITY, f64::min);
                    (
                        self.args.clusters[c].clone(),
                        seen.len() as f64 / (span / 1000.0),
                    )
                })
                .collect()
        };
        let first = t0s.values().copied().fold(f64::INFINITY, f64::min);
        let last = done.last().copied().unwrap_or(f64::NAN);
        let ensures = ensure_totals(&self.metrics).await?.since(ensures_before);
        let (p10, p90) = (pct(&done, 10.0), pct(&done, 90.0));
        Ok(Throughput {
            samples,
            post_ms: sorted(post_ms),
            deployed_in,
            window_ms: last - first,
            rate: count as f64 / ((last - first) / 1000.0),
            sustained: (0.8 * count as f64) / ((p90 - p10) / 1000.0),
            apply_rates,
            gateways_applied_in: last_gateway_applied - first,
            ensures,
            cpu,
        })
    }
}

pub(super) struct Throughput {
    pub(super) samples: Vec<Sample>,
    pub(super) post_ms: Vec<f64>,
    pub(super) deployed_in: f64,
    pub(super) window_ms: f64,
    pub(super) rate: f64,
    pub(super) sustained: f64,
    /// Harness Deployments created per second, per cluster.
    pub(super) apply_rates: Vec<(String, f64)>,
    /// First deploy → the last Gateway applied, ms (NaN: Gateways off).
    pub(super) gateways_applied_in: f64,
    /// The hub's Gateway ensures during the phase.
    pub(super) ensures: EnsureTotals,
    /// CPU from the first deploy to the last Active (this process is the
    /// hub, both spokes and the bench's watches).
    pub(super) cpu: String,
}
