//! Simulated spokes for the link benchmarks (`link-bench`,
//! `failover-bench`): every one is the product's own
//! `clawfed_spoke::link::Link` with an identity store in memory
//! ([`MemoryIdentityStore`]) and an applier that records in memory and acks
//! at once ([`BenchApplier`]); a [`Fleet`] starts them staggered and reads
//! each Link's [`LinkStatus`] to time connects and reconnects. Also the hub
//! as a child process ([`HubProc`]) and the figures' small helpers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use async_trait::async_trait;
use chrono::Utc;
use clawfed_hub::store::{Effects, NewAudit, NewBootstrapToken, Store};
use clawfed_proto::link::v1 as pb;
use clawfed_spoke::link::identity::{Identity, MemoryIdentityStore};
use clawfed_spoke::link::{ApplyError, Link, LinkConfig, LinkStatus, SpokeMetrics, WorkApplier};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// The work kind the benchmarks dispatch: the applier acks it at once.
pub const KIND: &str = "bench.noop";

/// Now, ns since the Unix epoch (CLOCK_REALTIME: comparable across processes).
pub fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The p-quantile (0..=1) of sorted values.
pub fn quantile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The body of `GET path` over HTTP/1.0 (the hub's metrics), within 10 s.
pub async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut body = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut s, &mut body).await?;
        anyhow::Ok(String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(10), fetch)
        .await
        .context("metrics scrape timed out")?
}

/// A metric's value (first sample of `name` without or with labels).
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The value of `name`'s sample whose labels include every `labels` pair
/// (`name` may end in `_sum`, `_count`).
pub fn labelled_metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| Some((l, l.strip_prefix(name)?.strip_prefix('{')?)))
        .find(|(_, rest)| {
            labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|(l, _)| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The (upper bound, cumulative count) of each bucket of the unlabelled
/// Prometheus histogram `name` in `text`, in the order written.
pub fn histogram_buckets(text: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (le, count) = rest.split_once("\"}")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect()
}

/// p-quantile (seconds) of a Prometheus histogram, linear within a bucket.
pub fn histogram_quantile(text: &str, name: &str, p: f64) -> Option<f64> {
    let mut buckets = histogram_buckets(text, name);
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let want = p * total;
    let (mut lo, mut below) = (0.0, 0.0);
    for (le, count) in buckets {
        if count >= want {
            if le.is_infinite() {
                return Some(lo);
            }
            let inside = count - below;
            let frac = if inside > 0.0 {
                (want - below) / inside
            } else {
                1.0
            };
            return Some(lo + (le - lo) * frac);
        }
        lo = le;
        below = count;
    }
    None
}

// ---------------------------------------------------------------------------
// Child processes (killed on drop).

/// The hub as a child process (killed on drop), with the addresses its
/// "listening" line names.
pub struct HubProc {
    pub child: Child,
    pub pid: u32,
    pub stdin: Option<ChildStdin>,
    pub stdout: tokio::io::Lines<BufReader<ChildStdout>>,
    pub metrics: SocketAddr,
    /// The REST API (plain HTTP on loopback).
    pub rest: SocketAddr,
    pub link: SocketAddr,
    pub echo: Option<SocketAddr>,
    pub started: Instant,
}

impl HubProc {
    /// Starts `cmd` (stderr appended to `log`) and waits up to 60 s for its
    /// "listening" line (and, `want_echo`, the in-process hub's echo line).
    pub async fn spawn(mut cmd: Command, log: &Path, want_echo: bool) -> anyhow::Result<Self> {
        let started = Instant::now();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        let mut child = cmd.spawn().context("spawn hub")?;
        let pid = child.id().context("hub pid")?;
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().context("hub stdout")?).lines();
        let line = crate::hubconf::listening_line(
            &mut stdout,
            "hub exited before listening (see its log)",
        )
        .await?;
        let field = |key: &str| -> anyhow::Result<SocketAddr> {
            let v = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .with_context(|| format!("no {key} in {line:?}"))?;
            let v = v
                .trim_start_matches("http://")
                .trim_start_matches("https://")
                .trim_end_matches("/metrics");
            Ok(v.parse()?)
        };
        let metrics = field("metrics=")?;
        let rest = field("rest=")?;
        let link = field("link=")?;
        let echo = if want_echo {
            let l = tokio::time::timeout(Duration::from_secs(10), stdout.next_line())
                .await
                .context("no echo line")??
                .context("hub exited")?;
            Some(l.strip_prefix("echo=").context("echo=")?.parse()?)
        } else {
            None
        };
        Ok(Self {
            child,
            pid,
            stdin,
            stdout,
            metrics,
            rest,
            link,
            echo,
            started,
        })
    }

    /// `kill -9`, and waits until it is gone.
    pub async fn kill9(mut self) -> anyhow::Result<()> {
        self.child.start_kill()?;
        tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .context("hub did not die")??;
        Ok(())
    }

    /// Its `/metrics` text.
    pub async fn scrape(&self) -> anyhow::Result<String> {
        http_get(self.metrics, "/metrics").await
    }
}

/// Work arrivals of every spoke: microseconds from the enqueue time the
/// in-process hub wrote into the spec ("t", CLOCK_REALTIME) to the call of
/// the applier.
#[derive(Default)]
pub struct Receipts {
    pub us: Mutex<Vec<u64>>,
    pub works: AtomicU64,
}

/// The bench's applier: applies nothing, records the generation per target
/// in memory (durable enough: the record lives as long as the spoke does)
/// and returns at once, so the link acks. `applied` and the current reports
/// come from the record, as a real applier's come from its durable state.
///
/// For the revision pipeline's work it answers as a spoke whose cluster
/// does everything at once: a `namespace.ensure` result names the
/// data-plane namespace, and a `harness.apply` is followed by a ready
/// readiness observation of its revision (sent into the Link's report
/// channel, as the spoke's executor does), so a deploy can reach `active`
/// with no cluster behind the spoke.
pub struct BenchApplier {
    /// target → (generation, kind).
    pub record: Mutex<HashMap<String, (i64, String)>>,
    pub receipts: Arc<Receipts>,
    /// The Link's report channel (readiness observations).
    pub reports: mpsc::Sender<pb::Report>,
}

impl BenchApplier {
    /// What the spoke applied: target → (generation, kind).
    pub fn record(&self) -> std::sync::MutexGuard<'_, HashMap<String, (i64, String)>> {
        self.record.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pipeline's work: the namespace a `namespace.ensure` resolved to,
    /// and a ready observation after a `harness.apply`.
    fn pipeline_result(&self, work: &pb::Work) -> pb::WorkResult {
        use clawfed_proto::work::WorkSpec;
        let mut result = applied_result(&work.kind);
        match WorkSpec::decode(&work.kind, &work.spec) {
            Ok(WorkSpec::NamespaceEnsure(ns)) => {
                result.namespace = ns.adopt.unwrap_or_else(|| {
                    clawfed_proto::naming::data_plane_namespace(&ns.namespace_id)
                });
            }
            Ok(WorkSpec::HarnessApply(h)) => {
                let report = pb::Report {
                    target: work.target.clone(),
                    generation: work.generation,
                    body: Some(pb::report::Body::Readiness(pb::ReadinessObservation {
                        revision_id: h.revision_id.clone(),
                        ready: true,
                        live_candidates: 1,
                        ready_candidates: 1,
                        reason: "bench: ready at once".into(),
                        pod: format!("{}-bench", h.agent),
                        namespace: h.data_plane_namespace.clone(),
                        ..Default::default()
                    })),
                };
                // After this apply returns (and its result is sent): the
                // link reads reports in the loop that called it.
                let reports = self.reports.clone();
                tokio::spawn(async move {
                    let _ = reports.send(report).await;
                });
            }
            _ => {}
        }
        result
    }
}

/// An `applied` work result of `kind`.
pub fn applied_result(kind: &str) -> pb::WorkResult {
    pb::WorkResult {
        applied: true,
        reason: String::new(),
        kind: kind.to_owned(),
        namespace: String::new(),
        retrying: false,
    }
}

#[async_trait]
impl WorkApplier for BenchApplier {
    async fn apply(&self, work: &pb::Work) -> Result<pb::WorkResult, ApplyError> {
        let sent = serde_json::from_slice::<serde_json::Value>(&work.spec)
            .ok()
            .and_then(|v| v["t"].as_u64());
        if let Some(t) = sent {
            let us = unix_nanos().saturating_sub(t) / 1000;
            if let Ok(mut v) = self.receipts.us.lock() {
                v.push(us);
            }
        }
        self.receipts.works.fetch_add(1, Ordering::Relaxed);
        let mut record = self.record();
        let entry = record
            .entry(work.target.clone())
            .or_insert_with(|| (0, work.kind.clone()));
        entry.0 = entry.0.max(work.generation);
        drop(record);
        if work.kind == KIND {
            return Ok(applied_result(&work.kind));
        }
        Ok(self.pipeline_result(work))
    }

    async fn applied(&self) -> Result<HashMap<String, i64>, ApplyError> {
        Ok(self
            .record()
            .iter()
            .map(|(t, (g, _))| (t.clone(), *g))
            .collect())
    }

    async fn current_reports(&self) -> Vec<pb::Report> {
        self.record()
            .iter()
            .map(|(t, (g, kind))| pb::Report {
                target: t.clone(),
                generation: *g,
                body: Some(pb::report::Body::WorkResult(applied_result(kind))),
            })
            .collect()
    }
}

/// One simulated spoke, as the bench sees it from outside its Link.
pub struct BenchSpoke {
    pub name: String,
    pub identity: Arc<MemoryIdentityStore>,
    pub applier: Arc<BenchApplier>,
    pub status: watch::Receiver<LinkStatus>,
    /// The link's report channel, held open: a closed channel is not a
    /// case the link has.
    _reports: mpsc::Sender<pb::Report>,
}

impl BenchSpoke {
    /// A session is open.
    pub fn connected(&self) -> bool {
        self.status.borrow().connected
    }

    /// Connected on a session welcomed after `t`: how long after `t`.
    pub fn welcomed_after(&self, t: tokio::time::Instant) -> Option<Duration> {
        let s = self.status.borrow();
        s.last_welcome
            .filter(|w| s.connected && *w > t)
            .map(|w| w - t)
    }
}

/// The spokes and how their Links ended, if any did (a Link ends only on
/// shutdown, revocation or a refused enrollment).
pub struct Fleet {
    pub spokes: Vec<BenchSpoke>,
    pub ended: Arc<Mutex<Vec<String>>>,
    pub tasks: tokio::task::JoinSet<()>,
}

impl Fleet {
    /// Builds one Link per identity (saved: enrolled before; else a
    /// bootstrap token, so the Link enrolls) and starts them staggered,
    /// `per_second` of them a second.
    pub fn start(
        config: &LinkConfig,
        spokes: Vec<(String, Result<Identity, String>)>,
        receipts: &Arc<Receipts>,
        per_second: u64,
        stop: &CancellationToken,
    ) -> Self {
        let ended = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = tokio::task::JoinSet::new();
        let mut out = Vec::with_capacity(spokes.len());
        let start = tokio::time::Instant::now();
        for (i, (name, identity)) in spokes.into_iter().enumerate() {
            let (store, token) = match identity {
                Ok(id) => (MemoryIdentityStore::with_identity(id), None),
                Err(token) => (MemoryIdentityStore::new(), Some(token)),
            };
            let store = Arc::new(store);
            let (reports, reports_rx) = mpsc::channel(16);
            let applier = Arc::new(BenchApplier {
                record: Mutex::new(HashMap::new()),
                receipts: receipts.clone(),
                reports: reports.clone(),
            });
            let link = Link::new(
                LinkConfig {
                    cluster_name: name.clone(),
                    bootstrap_token: token,
                    ..config.clone()
                },
                store.clone(),
                applier.clone(),
                SpokeMetrics::default(),
            );
            out.push(BenchSpoke {
                name: name.clone(),
                identity: store,
                applier,
                status: link.status(),
                _reports: reports,
            });
            let at = start + Duration::from_secs_f64(i as f64 / per_second.max(1) as f64);
            let (stop, ended) = (stop.clone(), ended.clone());
            tasks.spawn(async move {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep_until(at) => {}
                }
                if let Err(e) = link.run(reports_rx, stop).await
                    && let Ok(mut v) = ended.lock()
                {
                    v.push(format!("{name}: {e}"));
                }
            });
        }
        Self {
            spokes: out,
            ended,
            tasks,
        }
    }

    /// How many spokes.
    pub fn len(&self) -> usize {
        self.spokes.len()
    }

    /// No spokes.
    pub fn is_empty(&self) -> bool {
        self.spokes.is_empty()
    }

    /// How many have a session open.
    pub fn connected(&self) -> usize {
        self.spokes.iter().filter(|s| s.connected()).count()
    }

    /// How many hold a certificate.
    pub fn enrolled(&self) -> usize {
        self.spokes
            .iter()
            .filter(|s| s.identity.current().is_some())
            .count()
    }

    /// Sum of every Link's status counters.
    pub fn totals(&self) -> LinkStatus {
        let mut t = LinkStatus::default();
        for s in &self.spokes {
            let s = s.status.borrow();
            t.welcomes += s.welcomes;
            t.go_aways += s.go_aways;
            t.failures += s.failures;
            if s.last_failure.is_some() {
                t.last_failure.clone_from(&s.last_failure);
            }
        }
        t
    }

    /// Connected, enrolled and the Links' counters, for an error message.
    pub fn summary(&self) -> String {
        let t = self.totals();
        format!(
            "{} of {} connected, {} enrolled; Links: {} welcomes, {} failures, {} go-aways; a last failure: {}",
            self.connected(),
            self.len(),
            self.enrolled(),
            t.welcomes,
            t.failures,
            t.go_aways,
            t.last_failure.as_deref().unwrap_or("none")
        )
    }

    /// Polls until `done` holds, at most `within`; fails early when a Link
    /// ended. Returns the time it took.
    pub async fn wait(
        &self,
        within: Duration,
        what: &str,
        mut done: impl FnMut(&Self) -> bool,
    ) -> anyhow::Result<Duration> {
        let start = Instant::now();
        loop {
            if let Some(e) = self.ended.lock().ok().and_then(|v| v.first().cloned()) {
                bail!(
                    "waiting for {what}, a spoke's Link ended: {e} ({})",
                    self.summary()
                );
            }
            if done(self) {
                return Ok(start.elapsed());
            }
            if start.elapsed() > within {
                bail!(
                    "timed out after {within:?} waiting for {what}: {}",
                    self.summary()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every spoke is connected on a session welcomed after
    /// `since`; returns each spoke's time from `since` to its Welcome,
    /// sorted, in ms.
    pub async fn reconnected(
        &self,
        within: Duration,
        what: &str,
        since: tokio::time::Instant,
    ) -> anyhow::Result<Vec<u64>> {
        self.wait(within, what, |f| {
            f.spokes.iter().all(|s| s.welcomed_after(since).is_some())
        })
        .await?;
        Ok(self.welcomed_after_ms(since))
    }

    /// Each spoke's time from `since` to its Welcome (those welcomed since),
    /// sorted, in ms.
    pub fn welcomed_after_ms(&self, since: tokio::time::Instant) -> Vec<u64> {
        let mut times: Vec<u64> = self
            .spokes
            .iter()
            .filter_map(|s| s.welcomed_after(since))
            .map(|d| d.as_millis() as u64)
            .collect();
        times.sort_unstable();
        times
    }

    /// Stops every Link (bounded: 10 s).
    pub async fn stop(mut self, stop: &CancellationToken) {
        stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
    }
}

/// "p50 / p99 / max" of sorted ms values.
pub fn spread_ms(sorted: &[u64]) -> String {
    format!(
        "{} / {} / {} ms",
        quantile(sorted, 0.5),
        quantile(sorted, 0.99),
        sorted.last().copied().unwrap_or(0)
    )
}

/// The hub in this process on `store`, with the built-in handlers, and its
/// link (an error when the configuration disables it).
pub async fn start_hub_in_process(
    config: &clawfed_hub::config::Config,
    store: Arc<dyn Store>,
) -> anyhow::Result<(
    clawfed_hub::server::Hub,
    clawfed_hub::link::server::LinkHandle,
)> {
    let hub = clawfed_hub::server::start_with_store(
        config,
        store,
        clawfed_hub::worker::Handlers::builtin(),
    )
    .await?;
    let link = hub.link.clone().context("link disabled")?;
    Ok((hub, link))
}

/// A fresh installation-admin API token named `name`, straight into the
/// store (as `clawfed-hub token create` writes it); its secret.
pub async fn mint_admin_token(store: &dyn Store, name: &str) -> anyhow::Result<String> {
    let minted = clawfed_hub::auth::mint_token();
    store
        .create_token(&clawfed_hub::store::NewToken {
            name: name.into(),
            namespace: None,
            role: clawfed_hub::auth::Role::InstallationAdmin,
            hash: minted.hash,
            expires_at: None,
        })
        .await?;
    Ok(minted.secret)
}

/// One single-use bootstrap token per name, straight into the store (the
/// hub's own minting), as an admin would create them.
pub async fn mint_tokens(store: &dyn Store, names: &[String]) -> anyhow::Result<Vec<String>> {
    mint_tokens_as(store, names, "clawfed-bench", |name| {
        Effects::audit(NewAudit {
            actor: "clawfed-bench".into(),
            action: "cluster.token.create".into(),
            namespace: None,
            target: name.into(),
            result: "ok".into(),
            detail: None,
        })
    })
    .await
}

/// [`mint_tokens`] created by `created_by`, each token's write carrying
/// `audit(name)`.
pub async fn mint_tokens_as(
    store: &dyn Store,
    names: &[String],
    created_by: &str,
    audit: impl Fn(&str) -> Effects,
) -> anyhow::Result<Vec<String>> {
    let expires_at = Utc::now() + chrono::Duration::hours(2);
    let mut tokens = Vec::with_capacity(names.len());
    for name in names {
        let (secret, hash) = clawfed_hub::link::enroll::mint_bootstrap_token();
        store
            .create_bootstrap_token(
                &NewBootstrapToken {
                    cluster_name: name.clone(),
                    hash,
                    reenroll: false,
                    require_approval: false,
                    created_by: created_by.into(),
                    expires_at,
                },
                &audit(name),
            )
            .await?;
        tokens.push(secret);
    }
    Ok(tokens)
}

/// Enqueue → ack (ms, as the hub recorded them) of the acked [`KIND`]
/// items whose target starts with `tag/`.
pub async fn outbox_latencies(db_url: &str, tag: &str) -> anyhow::Result<Vec<u64>> {
    use sqlx::Row as _;
    sqlx::any::install_default_drivers();
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(db_url)
        .await?;
    // The tag is our own hex string.
    let sql = format!(
        "SELECT acked_at - created_at FROM outbox WHERE kind = '{KIND}' \
         AND target LIKE '{tag}/%' AND acked_at IS NOT NULL"
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_all(&pool)
        .await?;
    pool.close().await;
    Ok(rows
        .iter()
        .map(|r| r.try_get::<i64, _>(0).unwrap_or(0).max(0) as u64)
        .collect())
}

#[cfg(test)]
mod labelled_metric_tests {
    use super::labelled_metric;

    #[test]
    fn finds_the_sample_with_every_label() {
        let text = "# TYPE x histogram\n\
            x_sum{operation=\"deploy\",result=\"ok\"} 9\n\
            x_sum{operation=\"gateway_ensure\",result=\"ok\"} 1.5\n\
            x_count{operation=\"gateway_ensure\",result=\"failed\"} 2\n";
        let ensure = |r| [("operation", "gateway_ensure"), ("result", r)];
        assert_eq!(labelled_metric(text, "x_sum", &ensure("ok")), Some(1.5));
        assert_eq!(
            labelled_metric(text, "x_count", &ensure("failed")),
            Some(2.0)
        );
        assert_eq!(labelled_metric(text, "x_count", &ensure("ok")), None);
    }
}
