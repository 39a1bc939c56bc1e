//! The fault-injection run (issue 10): a seeded random workload through the
//! hub's REST API against the REAL binaries (`clawfed-hub` on a PostgreSQL
//! cluster of its own, `clawfed-spoke --applier kube` on exec-a and exec-b),
//! with real faults injected at random points, most a few milliseconds
//! after a workload call, then a wait for convergence and a check of the
//! invariants in the hub and in all three clusters.
//!
//! # Layout
//! - [`run`]: the whole run for [`Options`], returning a [`Report`].
//! - `PgCluster`: a PostgreSQL cluster owned by the run (`pg_createcluster`
//!   on a free port), so restarting it disturbs no one; dropped at the end.
//! - `Proxy`: each spoke reaches the hub through a TCP proxy on 127.0.0.1;
//!   a partition drops the spoke's connections and refuses new ones.
//! - `World`: hub and spokes as child processes, the REST client, the
//!   model of what the run asked for (tenants, Agents, deploys, mutations).
//! - `Fault`: the kinds and how each is injected and healed.
//! - `check_agent`: desired vs observed state of one Agent.
//!
//! Faults (each healed before the next): kill -9 of the hub (restarted on
//! the same database, CA and ports), kill -9 of a spoke (restarted with its
//! identity), SIGSTOP of a spoke past two heartbeats then SIGCONT, an
//! immediate-mode PostgreSQL restart, a network partition of a spoke, a
//! partition across the spoke's certificate renewal (`link.certTtlSeconds`
//! 45: renewal at two thirds, the partition starts just before it and ends
//! 4 s before the certificate expires, so the renewal fails and must be
//! retried in time), and, only with [`Options::apiserver_faults`], kill -9
//! and restart of exec-b's kube-apiserver (`e2e/cluster.sh restart`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use crate::until;
use chrono::{DateTime, Utc};
use clawfed_hub::auth::Role;
use clawfed_hub::client::HubClient;
use clawfed_hub::gateway::Gateways;
use clawfed_hub::gateway::objects::{route_api_resource, route_spec};
use clawfed_hub::model::{
    Agent, AgentRevision, ConnectionState, DesiredState, Namespace, RevisionPhase,
};
use clawfed_proto::labels;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, PersistentVolume, PersistentVolumeClaim, Pod, PodSpec, PodTemplateSpec, Secret,
    Service, ServiceAccount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::{Api, Client, ResourceExt};
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::control_env::{self, gateway_ns};
use crate::kube_env::{self, TestCluster, agent_selector, live_names};
use crate::procs::{Proc, bin};
use crate::proxy::Proxy;
use crate::spoke_env;

const HARNESS_IMAGE: &str = "ghcr.io/openclaw/openclaw";
const HEARTBEAT: Duration = Duration::from_secs(1);
/// Short, so renewals (at two thirds) happen during the run and its faults,
/// yet with a renewal window (a third: 15 s) longer than a few back-to-back
/// outages: a certificate that expires while the hub is unreachable needs a
/// new enrollment, by design.
const CERT_TTL_SECONDS: u64 = 45;
const EXEC: [&str; 2] = ["exec-a", "exec-b"];

fn gateway_image() -> String {
    format!(
        "registry.invalid/openclaw-gateway@sha256:{}",
        "cd".repeat(32)
    )
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Reproduces the workload, the fault sequence and their timing.
    pub seed: u64,
    /// Faults to inject.
    pub faults: usize,
    /// Agents alive at a time (deleted ones are replaced by new tenants).
    pub agents: usize,
    /// Also kill -9 and restart exec-b's kube-apiserver (long run only: it
    /// disturbs every other user of exec-b).
    pub apiserver_faults: bool,
    /// Check convergence every this many faults (the last round ends
    /// with the final check).
    pub round: usize,
    /// How long convergence may take after a round's last fault.
    pub converge_within: Duration,
    /// Keep the run's directory (logs, configs) instead of removing it.
    pub keep_dir: bool,
    /// After the final check, plant an extra Harness Deployment for one
    /// Agent and see the checker report it (proof it can fail).
    pub self_check: bool,
    /// Inject only hub kills (each timed into the calls as the others):
    /// what a pass cut by a kill costs a deploy.
    pub hub_kills_only: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            seed: 1,
            faults: 10,
            agents: 6,
            apiserver_faults: false,
            round: 10,
            converge_within: Duration::from_secs(180),
            keep_dir: false,
            self_check: false,
            hub_kills_only: false,
        }
    }
}

/// What a run found.
#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, usize>,
    /// Faults injected while a revision was in a non-terminal phase
    /// (pending … waiting-ready, stopping): read from the database just
    /// before the fault.
    pub mid_pipeline: usize,
    /// Faults injected while work items were pending or claimed.
    pub mid_work: usize,
    /// Faults injected within 100 ms after a workload call.
    pub timed: usize,
    /// Workload calls made, by action.
    pub operations: BTreeMap<&'static str, usize>,
    /// Every invariant violation, "seed N: description".
    pub violations: Vec<String>,
    /// Revisions that failed (allowed: with a reason), "tenant/agent rN: reason".
    pub failed_revisions: Vec<String>,
    /// Per Agent and round: time from the round's last fault (healed) until
    /// its state first matched the desired one.
    pub converge: Vec<Duration>,
    /// Per revision that went active: from its creation (the deploy call)
    /// to its activation, both as the hub recorded them.
    pub deploy_to_active: BTreeMap<String, Duration>,
    pub elapsed: Duration,
    pub dir: Option<PathBuf>,
    /// With [`Options::self_check`]: whether the planted extra object was
    /// reported (`None`: no Agent to plant it for).
    pub self_check: Option<bool>,
}

impl Report {
    pub fn total_faults(&self) -> usize {
        self.faults.values().sum()
    }

    /// The p-th percentile (0..=100) of the convergence times.
    pub fn converge_percentile(&self, p: f64) -> Option<Duration> {
        percentile(&self.converge, p)
    }

    /// The report as printed by the benchmark.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let n = self.total_faults();
        s += &format!(
            "fault run: seed {}  {} faults in {:.1} s\n",
            self.seed,
            n,
            self.elapsed.as_secs_f64()
        );
        s += "faults by kind:\n";
        for (k, v) in &self.faults {
            s += &format!("  {k:<22} {v}\n");
        }
        let frac = |x: usize| {
            if n == 0 { 0.0 } else { x as f64 / n as f64 }
        };
        s += &format!(
            "timed within 100 ms after a workload call: {}/{n} ({:.0} %)\n",
            self.timed,
            100.0 * frac(self.timed)
        );
        s += &format!(
            "caught a revision mid-pipeline: {}/{n} ({:.0} %); work items pending or claimed: {}/{n} ({:.0} %)\n",
            self.mid_pipeline,
            100.0 * frac(self.mid_pipeline),
            self.mid_work,
            100.0 * frac(self.mid_work)
        );
        s += "workload calls: ";
        s += &self
            .operations
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        s += "\n";
        match (
            self.converge_percentile(50.0),
            self.converge_percentile(99.0),
        ) {
            (Some(p50), Some(p99)) => {
                s += &format!(
                    "converged after the last fault: p50 {:.2} s  p99 {:.2} s  ({} samples)\n",
                    p50.as_secs_f64(),
                    p99.as_secs_f64(),
                    self.converge.len()
                )
            }
            _ => s += "converged after the last fault: no samples\n",
        }
        let activations: Vec<Duration> = self.deploy_to_active.values().copied().collect();
        match (
            percentile(&activations, 50.0),
            percentile(&activations, 95.0),
            activations.iter().max(),
        ) {
            (Some(p50), Some(p95), Some(max)) => {
                s += &format!(
                    "deploy -> active: p50 {:.2} s  p95 {:.2} s  max {:.2} s  ({} revisions)\n",
                    p50.as_secs_f64(),
                    p95.as_secs_f64(),
                    max.as_secs_f64(),
                    activations.len()
                )
            }
            _ => s += "deploy -> active: no revision went active\n",
        }
        s += &format!(
            "failed revisions (with reason): {}\n",
            self.failed_revisions.len()
        );
        for f in &self.failed_revisions {
            s += &format!("  {f}\n");
        }
        s += &format!("invariant violations: {}\n", self.violations.len());
        for v in &self.violations {
            s += &format!("  {v}\n");
        }
        if let Some(found) = self.self_check {
            s += &format!("self-check (planted extra Harness reported): {found}\n");
        }
        if let Some(d) = &self.dir {
            s += &format!("logs: {}\n", d.display());
        }
        s
    }
}

fn percentile(samples: &[Duration], p: f64) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort();
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v.get(i.min(v.len() - 1)).copied()
}

fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

// ------------------------------------------------------------ PostgreSQL

/// A PostgreSQL cluster of the run's own (Debian's `pg_createcluster`), on
/// a free port, with the clawfed role and one database. Dropped at the end.
pub struct PgCluster {
    version: String,
    name: String,
    port: u16,
}

fn run_cmd(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn as_postgres(args: &[&str]) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--"]).args(args);
    c
}

impl PgCluster {
    /// A new cluster on the next free port (pg_createcluster probes for
    /// one), started, with role and database `clawfed`/`faults`.
    pub fn create() -> Result<Self> {
        let mut versions: Vec<String> = std::fs::read_dir("/usr/lib/postgresql")
            .context("PostgreSQL is not installed (scripts/postgres.sh installs it)")?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        versions.sort_by_key(|v| v.parse::<u32>().unwrap_or(0));
        let version = versions.pop().context("no PostgreSQL version")?;
        let name = format!("cffault{}", short_id());
        run_cmd(Command::new("pg_createcluster").args([
            &version,
            &name,
            "--",
            "--auth-local=peer",
            "--auth-host=scram-sha-256",
        ]))?;
        let port: u16 =
            run_cmd(Command::new("pg_conftool").args(["-s", &version, &name, "show", "port"]))?
                .trim()
                .parse()
                .context("the new cluster's port (pg_conftool show port)")?;
        let me = Self {
            version,
            name,
            port,
        };
        me.ctl(&["start"])?;
        me.wait_ready(Duration::from_secs(30))?;
        run_cmd(&mut as_postgres(&[
            "psql",
            "-q",
            "-p",
            &port.to_string(),
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            "CREATE ROLE clawfed LOGIN PASSWORD 'clawfed'",
        ]))?;
        run_cmd(&mut as_postgres(&[
            "createdb",
            "-p",
            &port.to_string(),
            "-O",
            "clawfed",
            "faults",
        ]))?;
        Ok(me)
    }

    /// The run database's URL.
    pub fn url(&self) -> String {
        format!("postgres://clawfed:clawfed@127.0.0.1:{}/faults", self.port)
    }

    /// `pg_ctlcluster VERSION NAME args…`.
    pub fn ctl(&self, args: &[&str]) -> Result<()> {
        run_cmd(
            Command::new("pg_ctlcluster")
                .args([&self.version, &self.name])
                .args(args),
        )?;
        Ok(())
    }

    /// Waits until `pg_isready` answers.
    pub fn wait_ready(&self, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            let ok = as_postgres(&["pg_isready", "-q", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "PostgreSQL {} not ready",
                self.name
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = Command::new("pg_dropcluster")
            .args(["--stop", &self.version, &self.name])
            .output();
    }
}

// ------------------------------------------------------------------ REST

/// The outcome of a mutating call retried across hub and database outages.
struct Outcome {
    status: StatusCode,
    body: String,
    /// An earlier attempt may have been applied (no answer was received).
    uncertain: bool,
}

/// The run's calls on the hub, retried across hub and database outages.
trait RetriedCalls {
    /// `GET path`: `None` on 404.
    async fn get_opt<T: DeserializeOwned>(&self, path: &str) -> Result<Option<T>>;
    /// [`Self::get_opt`], retried (bounded) while the hub gives no answer or a
    /// 5xx (a fault was just healed).
    async fn get_retry<T: DeserializeOwned>(&self, path: &str) -> Result<Option<T>>;
    /// Retries (bounded) while the hub gives no answer or a 5xx.
    async fn mutate(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        idempotency_key: Option<&str>,
    ) -> Result<Outcome>;
}

impl RetriedCalls for HubClient {
    async fn get_opt<T: DeserializeOwned>(&self, path: &str) -> Result<Option<T>> {
        let (status, text) = self.exchange(Method::GET, path, None, None).await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        ensure!(status.is_success(), "GET {path}: {status} {text}");
        Ok(Some(serde_json::from_str(&text)?))
    }

    async fn get_retry<T: DeserializeOwned>(&self, path: &str) -> Result<Option<T>> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.get_opt(path).await {
                Ok(v) => return Ok(v),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    async fn mutate(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        idempotency_key: Option<&str>,
    ) -> Result<Outcome> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut uncertain = false;
        loop {
            match self
                .exchange(method.clone(), path, body.as_ref(), idempotency_key)
                .await
            {
                Ok((status, body)) if !status.is_server_error() => {
                    return Ok(Outcome {
                        status,
                        body,
                        uncertain,
                    });
                }
                Ok((status, text)) => {
                    uncertain = true;
                    if Instant::now() >= deadline {
                        bail!("{method} {path}: {status} {text}");
                    }
                }
                Err(e) => {
                    uncertain = true;
                    if Instant::now() >= deadline {
                        return Err(anyhow::Error::new(e).context(format!("{method} {path}")));
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

// ------------------------------------------------------------ processes

/// `clawfed-hub serve` on the run's PostgreSQL, Gateways on in control as
/// the hub's ServiceAccount, fixed ports and CA dir so restarts keep them.
struct HubProc {
    config: PathBuf,
    rest_port: u16,
    link_port: u16,
    logs: PathBuf,
    starts: u32,
}

impl HubProc {
    async fn new(dir: &Path, control: &TestCluster, db_url: &str) -> Result<Self> {
        let kubeconfig = dir.join("hub.kubeconfig");
        control_env::write_service_account_kubeconfig(
            control,
            control_env::HUB_NS,
            control_env::HUB_SA,
            4 * 3600,
            &kubeconfig,
        )
        .await?;
        // Port 0 at the first start; then pinned to what it bound.
        let (rest_port, link_port) = (0, 0);
        let config = json!({
            "version": 1,
            "database": { "url": db_url },
            "api": {
                "restAddr": format!("127.0.0.1:{rest_port}"),
                "grpcAddr": "127.0.0.1:0",
                "metricsAddr": "127.0.0.1:0",
                "maxBodyBytes": 1048576
            },
            // Retries span ~75 s: longer than the 15 s Agent pass lease a
            // killed hub leaves behind (a shorter budget loses the work:
            // see e2e/README.md, findings). The instance id survives the
            // hub's restarts, as the chart's Pod name does: a restarted
            // hub takes back its dead incarnation's claims and passes.
            "worker": {
                "instanceId": "fault-hub",
                "enabled": true, "batchSize": 32, "leaseSeconds": 2,
                "pollIntervalMs": 20, "maxAttempts": 20, "backoffBaseMs": 200,
                "backoffCapMs": 5000, "healthIntervalSeconds": 60
            },
            "link": {
                "enabled": true,
                "addr": format!("127.0.0.1:{link_port}"),
                "caDir": dir.join("ca"),
                "serverNames": ["127.0.0.1", "localhost"],
                "certTtlSeconds": CERT_TTL_SECONDS,
                "heartbeatSeconds": HEARTBEAT.as_secs(),
                "maxSessions": 100,
                "maxConcurrentHandshakes": 16,
                "maxMessageBytes": 4194304
            },
            "pipeline": { "enabled": true, "readyDeadlineSeconds": 120, "pathProbe": false, "startupStatus": false },
            "tunnel": { "addr": "127.0.0.1:0" },
            "gateway": {
                "enabled": true,
                "kubeconfig": kubeconfig,
                "options": control_env::gateway_config()
            },
            "log": { "format": "json", "filter": "info" }
        });
        let path = dir.join("hub.yaml");
        std::fs::write(&path, serde_yaml_ng::to_string(&config)?)?;
        Ok(Self {
            config: path,
            rest_port,
            link_port,
            logs: dir.join("logs"),
            starts: 0,
        })
    }

    /// Starts `clawfed-hub serve` and waits for its "listening" line.
    async fn serve(&mut self) -> Result<Proc> {
        self.starts += 1;
        let mut c = Command::new(bin("clawfed-hub")?);
        c.arg("--config").arg(&self.config).arg("serve");
        for (k, _) in std::env::vars() {
            if k.starts_with("CLAWFED_") {
                c.env_remove(k);
            }
        }
        let mut p = Proc::spawn(&format!("hub-{}", self.starts), &mut c, &self.logs)?;
        let listening = p.hub_listening(Duration::from_secs(60)).await?;
        if self.rest_port == 0 {
            (self.rest_port, self.link_port) = listening.pin_hub_ports(&self.config)?;
        }
        Ok(p)
    }
}

/// `clawfed-spoke --applier kube` for one execution cluster, dialing the
/// hub through its proxy.
struct SpokeProc {
    exec: &'static str,
    cluster_name: String,
    kubeconfig: PathBuf,
    state: PathBuf,
    token_file: PathBuf,
    ca_file: PathBuf,
    logs: PathBuf,
    proxy: Proxy,
    starts: u32,
    proc: Option<Proc>,
}

impl SpokeProc {
    async fn new(
        dir: &Path,
        exec: &'static str,
        cluster: &TestCluster,
        rest: &HubClient,
        cluster_name: String,
        link_port: u16,
    ) -> Result<Self> {
        spoke_env::install_spoke_rbac(cluster).await?;
        let kubeconfig = dir.join(format!("{exec}.kubeconfig"));
        control_env::write_service_account_kubeconfig(
            cluster,
            spoke_env::SPOKE_NAMESPACE,
            spoke_env::SPOKE_SERVICE_ACCOUNT,
            4 * 3600,
            &kubeconfig,
        )
        .await?;
        let created = rest
            .mutate(
                Method::POST,
                &format!("/clusters/{cluster_name}/bootstrap-tokens"),
                Some(json!({ "reenroll": false })),
                None,
            )
            .await?;
        ensure!(
            created.status.is_success(),
            "bootstrap token: {}",
            created.body
        );
        let body: serde_json::Value = serde_json::from_str(&created.body)?;
        let token_file = dir.join(format!("{exec}.bootstrap-token"));
        std::fs::write(&token_file, body["token"].as_str().context("token")?)?;
        let ca_file = dir.join("hub-ca.pem");
        std::fs::copy(dir.join("ca/ca.crt"), &ca_file)?;
        Ok(Self {
            exec,
            cluster_name,
            kubeconfig,
            state: dir.join(format!("{exec}-state")),
            token_file,
            ca_file,
            logs: dir.join("logs"),
            proxy: Proxy::start(link_port).await?,
            starts: 0,
            proc: None,
        })
    }

    /// Starts the spoke; the bootstrap token only on its first start.
    fn spawn(&mut self) -> Result<()> {
        self.starts += 1;
        let mut c = Command::new(bin("clawfed-spoke")?);
        for (k, _) in std::env::vars() {
            if k.starts_with("CLAWFED_") || k == "KUBECONFIG" {
                c.env_remove(k);
            }
        }
        c.args([
            "--hub-url",
            &format!("https://127.0.0.1:{}", self.proxy.port),
        ])
        .arg("--ca-file")
        .arg(&self.ca_file)
        .args(["--cluster-name", &self.cluster_name])
        .arg("--state-dir")
        .arg(&self.state)
        .args(["--applier", "kube"])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .args(["--backoff-max-seconds", "1"])
        .arg("--kubeconfig")
        .arg(&self.kubeconfig)
        .env("CLAWFED_LOG", "info");
        if self.starts == 1 {
            c.arg("--bootstrap-token-file").arg(&self.token_file);
        }
        let tag = format!("spoke-{}-{}", self.exec, self.starts);
        self.proc = Some(Proc::spawn(&tag, &mut c, &self.logs)?);
        Ok(())
    }

    /// The newest certificate expiry the spoke logged (loaded or renewed).
    fn not_after(&self) -> Option<DateTime<Utc>> {
        let mut best = None;
        for n in 1..=self.starts {
            let text = Proc::text(&self.logs.join(format!("spoke-{}-{n}.err", self.exec)));
            for (i, _) in text.match_indices("notAfter") {
                let rest = &text[i + "notAfter".len()..];
                let start = rest.find(|c: char| c.is_ascii_digit());
                let Some(start) = start else { continue };
                let s: String = rest[start..]
                    .chars()
                    .take_while(|c| *c != '"' && *c != ',' && *c != '}')
                    .collect();
                let s = s.trim().trim_end_matches(" UTC");
                if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f") {
                    let t = t.and_utc();
                    if best.is_none_or(|b| t > b) {
                        best = Some(t);
                    }
                }
            }
        }
        best
    }
}

// ----------------------------------------------------------------- model

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Desired {
    /// Created, never deployed.
    Draft,
    Running,
    Stopped,
    Deleted,
}

#[derive(Debug, Clone)]
struct AgentModel {
    tenant: usize,
    name: String,
    dedicated: bool,
    exec: usize,
    desired: Desired,
    /// Revision numbers the run's deploys and rollbacks created.
    revisions: Vec<i64>,
    /// The image tag of the draft (changes bump it).
    tag: u32,
}

#[derive(Debug, Clone)]
struct TenantModel {
    ns: Namespace,
    torn_down: bool,
}

/// A successful mutation, to find in the audit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Mutation {
    namespace: String,
    action: &'static str,
    target: String,
}

// ----------------------------------------------------------------- faults

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    HubKill,
    SpokeKill,
    SpokeStop,
    PgRestart,
    Partition,
    CertRenewalPartition,
    ApiserverKill,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Self::HubKill => "hub kill -9",
            Self::SpokeKill => "spoke kill -9",
            Self::SpokeStop => "spoke SIGSTOP",
            Self::PgRestart => "postgres restart",
            Self::Partition => "spoke partition",
            Self::CertRenewalPartition => "cert renewal partition",
            Self::ApiserverKill => "exec-b apiserver kill -9",
        }
    }
}

/// The fault sequence: every kind in turn (so a short run sees each),
/// shuffled per turn by the seed.
fn fault_plan(rng: &mut StdRng, n: usize, apiserver: bool, hub_kills_only: bool) -> Vec<Fault> {
    if hub_kills_only {
        return vec![Fault::HubKill; n];
    }
    let mut kinds = vec![
        Fault::HubKill,
        Fault::SpokeKill,
        Fault::SpokeStop,
        Fault::PgRestart,
        Fault::Partition,
        Fault::CertRenewalPartition,
    ];
    if apiserver {
        kinds.push(Fault::ApiserverKill);
    }
    let mut plan = Vec::with_capacity(n);
    while plan.len() < n {
        let mut turn = kinds.clone();
        turn.shuffle(rng);
        plan.extend(turn);
    }
    plan.truncate(n);
    plan
}

// ----------------------------------------------------------------- world

struct World {
    seed: u64,
    control: TestCluster,
    execs: [TestCluster; 2],
    pg: PgCluster,
    hub: HubProc,
    hub_proc: Option<Proc>,
    spokes: Vec<SpokeProc>,
    rest: HubClient,
    rng: StdRng,
    tenants: Vec<TenantModel>,
    agents: Vec<AgentModel>,
    mutations: Vec<Mutation>,
    /// Deploy calls answered 201 or 200, per Agent index.
    report: Report,
    /// PVs the run made (cluster index: 0 control, 1 exec-a, 2 exec-b).
    pvs: Vec<(usize, String)>,
    /// Agents that did not converge in a round (reported then): later
    /// rounds do not wait for them again.
    broken: BTreeSet<usize>,
    /// Spokes whose certificate expired while offline (reported then):
    /// they cannot come back without a new enrollment, so later rounds
    /// do not wait for them.
    expired: BTreeSet<usize>,
    last_call: Instant,
}

/// Runs the whole program for `opts`. Errors are setup or harness failures;
/// what the system did wrong is in [`Report::violations`].
pub async fn run(opts: Options) -> Result<Report> {
    let started = Instant::now();
    let control = control_env::control().await?;
    let execs = [
        kube_env::cluster("exec-a").await?,
        kube_env::cluster("exec-b").await?,
    ];
    let tmp = tempfile::Builder::new()
        .prefix("clawfed-faults-")
        .tempdir()?;
    let dir = tmp.path().to_path_buf();
    std::fs::create_dir_all(dir.join("logs"))?;
    let pg = tokio::task::spawn_blocking(PgCluster::create).await??;
    let mut hub = HubProc::new(&dir, &control, &pg.url()).await?;
    // The schema first (opening the store as the owner migrates it: the
    // hub requires it on PostgreSQL), and the root token written straight
    // into the database.
    let store = clawfed_hub::store::connect(&pg.url()).await?;
    let root = crate::hub::mint(&store, "faults", None, Role::InstallationAdmin).await;
    drop(store);
    let hub_proc = hub.serve().await?;
    let rest = HubClient::new(&format!("http://127.0.0.1:{}", hub.rest_port), Some(root))?
        .with_request_timeout(Duration::from_secs(10));
    let id = &short_id()[..6];
    let mut spokes = Vec::new();
    for (i, exec) in EXEC.into_iter().enumerate() {
        let name = format!("f{}-{id}", &exec[5..]);
        let mut s = SpokeProc::new(&dir, exec, &execs[i], &rest, name, hub.link_port).await?;
        s.spawn()?;
        spokes.push(s);
    }
    let mut w = World {
        seed: opts.seed,
        control,
        execs,
        pg,
        hub,
        hub_proc: Some(hub_proc),
        spokes,
        rest,
        rng: StdRng::seed_from_u64(opts.seed),
        tenants: Vec::new(),
        agents: Vec::new(),
        mutations: Vec::new(),
        report: Report {
            seed: opts.seed,
            ..Default::default()
        },
        pvs: Vec::new(),
        broken: BTreeSet::new(),
        expired: BTreeSet::new(),
        last_call: Instant::now(),
    };
    let result = w.drive(&opts).await;
    let cleanup = w.cleanup().await;
    let mut report = std::mem::take(&mut w.report);
    drop(w);
    report.elapsed = started.elapsed();
    if opts.keep_dir || result.is_err() || !report.violations.is_empty() {
        report.dir = Some(tmp.keep());
    }
    result?;
    if let Err(e) = cleanup {
        eprintln!("fault run cleanup: {e:#}");
    }
    Ok(report)
}

impl Drop for World {
    fn drop(&mut self) {
        // Processes first (a stopped spoke is continued), then the
        // PostgreSQL cluster (a field) is dropped.
        for s in &mut self.spokes {
            s.proxy.partition(false);
            if let Some(p) = s.proc.as_ref() {
                let _ = p.signal("-CONT");
            }
            s.proc.take();
        }
        self.hub_proc.take();
    }
}

impl World {
    fn violation(&mut self, what: String) {
        let v = format!("seed {}: {what}", self.seed);
        eprintln!("VIOLATION {v}");
        self.report.violations.push(v);
    }

    async fn drive(&mut self, opts: &Options) -> Result<()> {
        for i in 0..2 {
            let name = self.spokes[i].cluster_name.clone();
            until(Duration::from_secs(60), &format!("{name} online"), || {
                self.online(&name)
            })
            .await?;
        }
        while self.live_agents() < opts.agents {
            self.new_tenant().await?;
        }
        let plan = fault_plan(
            &mut self.rng,
            opts.faults,
            opts.apiserver_faults,
            opts.hub_kills_only,
        );
        let round = opts.round.max(1);
        for (i, fault) in plan.iter().enumerate() {
            let calls = self.rng.random_range(1..=3);
            for _ in 0..calls {
                // A call the hub does not answer within its retries (60 s
                // after a healed fault) is a finding, not the end of the run.
                if let Err(e) = self.operation(opts).await {
                    self.violation(format!("workload call failed after its retries: {e:#}"));
                }
            }
            // Most faults a few ms after the last call, some later.
            let delay = if self.rng.random_bool(0.85) {
                Duration::from_millis(self.rng.random_range(0..40))
            } else {
                Duration::from_millis(self.rng.random_range(100..2000))
            };
            tokio::time::sleep(delay.saturating_sub(self.last_call.elapsed())).await;
            self.inject(*fault).await?;
            if (i + 1) % round == 0 || i + 1 == plan.len() {
                self.converge(opts.converge_within).await?;
            }
        }
        if plan.is_empty() {
            self.converge(opts.converge_within).await?;
        }
        self.check_audit().await?;
        if opts.self_check {
            self.report.self_check = self.plant_and_detect().await?;
        }
        Ok(())
    }

    /// Plants a Harness Deployment no revision asked for beside one Agent
    /// and returns whether [`Self::check_agent`] reports it; removes it.
    async fn plant_and_detect(&mut self) -> Result<Option<bool>> {
        let Some(i) =
            (0..self.agents.len()).find(|&i| !self.tenants[self.agents[i].tenant].torn_down)
        else {
            return Ok(None);
        };
        let a = self.agents[i].clone();
        let dpns = self.tenants[a.tenant].ns.data_plane_namespace.clone();
        let name = format!("{}-r999-harness", a.name);
        let labels = BTreeMap::from([
            (labels::AGENT.to_owned(), a.name.clone()),
            ("app".to_owned(), name.clone()),
        ]);
        let d = Deployment {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels.clone()),
                ..Default::default()
            },
            spec: DeploymentSpec {
                replicas: Some(0),
                selector: LabelSelector {
                    match_labels: Some(labels.clone()),
                    ..Default::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        ..Default::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "planted".into(),
                            image: Some("registry.invalid/planted:1".into()),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                },
                ..Default::default()
            },
            ..Default::default()
        };
        let api = Api::<Deployment>::namespaced(self.execs[a.exec].admin(), &dpns);
        api.create(&PostParams::default(), &d).await?;
        let problems = self.check_agent(i).await;
        let _ = api.delete(&name, &DeleteParams::background()).await;
        let problems = problems?;
        eprintln!("fault run: self-check on {dpns}/{name}: {problems:?}");
        Ok(Some(problems.iter().any(|p| p.contains(&name))))
    }

    async fn online(&self, cluster: &str) -> Result<Option<()>> {
        let c: Option<clawfed_hub::model::Cluster> =
            self.rest.get_opt(&format!("/clusters/{cluster}")).await?;
        Ok(c.filter(|c| c.connection_state == ConnectionState::Online)
            .map(|_| ()))
    }

    fn live_agents(&self) -> usize {
        self.agents
            .iter()
            .filter(|a| a.desired != Desired::Deleted)
            .count()
    }

    fn record(&mut self, namespace: &str, action: &'static str, target: String) {
        *self.report.operations.entry(action).or_default() += 1;
        self.mutations.push(Mutation {
            namespace: namespace.to_owned(),
            action,
            target,
        });
        self.last_call = Instant::now();
    }

    /// A tenant with one or two Agents, each placed on exec-a or exec-b,
    /// dedicated (Gateway in control, workspace PVC) or embedded.
    async fn new_tenant(&mut self) -> Result<()> {
        let name = format!("ft{}", short_id());
        let out = self
            .rest
            .mutate(
                Method::POST,
                "/namespaces",
                Some(json!({ "name": name })),
                None,
            )
            .await?;
        ensure!(
            out.status.is_success(),
            "create tenant {name}: {} {}",
            out.status,
            out.body
        );
        let ns: Namespace = serde_json::from_str(&out.body)?;
        self.record(&name, "namespace.create", format!("namespaces/{name}"));
        let t = self.tenants.len();
        self.tenants.push(TenantModel {
            ns,
            torn_down: false,
        });
        for _ in 0..self.rng.random_range(1..=2) {
            let agent = format!("a{}", short_id());
            let dedicated = self.rng.random_bool(0.6);
            let exec = self.rng.random_range(0..2);
            if dedicated {
                let pv = control_env::volume_for(
                    &self.control.admin(),
                    &gateway_ns(&self.tenants[t].ns.id),
                    &agent,
                )
                .await?;
                self.pvs.push((0, pv));
            }
            let spec = self.spec(dedicated, exec, 0);
            let out = self
                .rest
                .mutate(
                    Method::POST,
                    &format!("/namespaces/{name}/agents"),
                    Some(json!({ "name": agent, "spec": spec })),
                    None,
                )
                .await?;
            ensure!(
                out.status.is_success(),
                "create agent {name}/{agent}: {} {}",
                out.status,
                out.body
            );
            self.record(&name, "agent.create", format!("agents/{agent}"));
            self.agents.push(AgentModel {
                tenant: t,
                name: agent,
                dedicated,
                exec,
                desired: Desired::Draft,
                revisions: Vec::new(),
                tag: 0,
            });
        }
        Ok(())
    }

    fn spec(&self, dedicated: bool, exec: usize, tag: u32) -> serde_json::Value {
        json!({
            "harnessKind": if dedicated { "dedicated-codex" } else { "embedded-openclaw" },
            "image": format!("{HARNESS_IMAGE}:1.{tag}"),
            "gatewayImage": gateway_image(),
            "placement": { "cluster": self.spokes[exec].cluster_name },
            "requirementLabels": { "example.com/pool": "general" }
        })
    }

    /// One random workload call on a random live Agent (or tenant).
    async fn operation(&mut self, opts: &Options) -> Result<()> {
        if self.live_agents() < opts.agents {
            return self.new_tenant().await;
        }
        let live: Vec<usize> = (0..self.agents.len())
            .filter(|&i| self.agents[i].desired != Desired::Deleted)
            .collect();
        let Some(&i) = live.choose(&mut self.rng) else {
            return self.new_tenant().await;
        };
        let roll = self.rng.random_range(0..100);
        match self.agents[i].desired {
            Desired::Draft => self.deploy(i, None).await,
            Desired::Running if roll < 35 => self.change(i).await,
            Desired::Running if roll < 50 => {
                let revs = self.agents[i].revisions.clone();
                let from = *revs.choose(&mut self.rng).context("a revision")?;
                self.deploy(i, Some(from)).await
            }
            Desired::Running if roll < 85 => self.stop(i).await,
            Desired::Running => self.deploy(i, None).await,
            Desired::Stopped if roll < 50 => self.deploy(i, None).await,
            Desired::Stopped => self.delete(i).await,
            Desired::Deleted => Ok(()),
        }
    }

    fn agent_path(&self, i: usize) -> (String, String) {
        let a = &self.agents[i];
        let ns = self.tenants[a.tenant].ns.name.clone();
        let path = format!("/namespaces/{ns}/agents/{}", a.name);
        (ns, path)
    }

    /// Deploy (or rollback `from`): a new revision. Its Agent-owned claim
    /// gets a volume from the test clusters' provisioner.
    async fn deploy(&mut self, i: usize, from: Option<i64>) -> Result<()> {
        let (ns, path) = self.agent_path(i);
        let a = self.agents[i].clone();
        let next = a.revisions.last().copied().unwrap_or(0) + 1;
        let key = uuid::Uuid::new_v4().to_string();
        let body = from.map(|r| json!({ "fromRevision": r }));
        let out = self
            .rest
            .mutate(Method::POST, &format!("{path}/deploy"), body, Some(&key))
            .await?;
        let action = if from.is_some() {
            "agent.rollback"
        } else {
            "agent.deploy"
        };
        if !out.status.is_success() {
            eprintln!(
                "fault run: {action} {ns}/{}: {} {}",
                a.name, out.status, out.body
            );
            *self.report.operations.entry("refused").or_default() += 1;
            return Ok(());
        }
        let r: AgentRevision = serde_json::from_str(&out.body)?;
        if r.number != next {
            self.violation(format!(
                "{ns}/{}: {action} made revision {} where {next} was next",
                a.name, r.number
            ));
        }
        self.record(&ns, action, format!("agents/{}", a.name));
        let m = &mut self.agents[i];
        m.revisions.push(r.number);
        m.desired = Desired::Running;
        Ok(())
    }

    /// Change: a new image in the draft, then deploy it.
    async fn change(&mut self, i: usize) -> Result<()> {
        let (ns, path) = self.agent_path(i);
        let Some(agent) = self.rest.get_retry::<Agent>(&path).await? else {
            bail!("{path} is missing");
        };
        let a = self.agents[i].clone();
        let spec = self.spec(a.dedicated, a.exec, a.tag + 1);
        let out = self
            .rest
            .mutate(
                Method::PUT,
                &path,
                Some(json!({ "spec": spec, "version": agent.version })),
                None,
            )
            .await?;
        let applied = out.status.is_success()
            || (out.uncertain
                && out.status == StatusCode::CONFLICT
                && self
                    .rest
                    .get_retry::<Agent>(&path)
                    .await?
                    .is_some_and(|now| now.spec.image.ends_with(&format!(":1.{}", a.tag + 1))));
        if !applied {
            eprintln!(
                "fault run: change {ns}/{}: {} {}",
                a.name, out.status, out.body
            );
            return Ok(());
        }
        if out.status.is_success() {
            self.record(&ns, "agent.update", format!("agents/{}", a.name));
        }
        self.agents[i].tag += 1;
        self.deploy(i, None).await
    }

    async fn stop(&mut self, i: usize) -> Result<()> {
        let (ns, path) = self.agent_path(i);
        let out = self
            .rest
            .mutate(Method::POST, &format!("{path}/stop"), Some(json!({})), None)
            .await?;
        ensure!(
            out.status.is_success(),
            "stop {path}: {} {}",
            out.status,
            out.body
        );
        let name = self.agents[i].name.clone();
        self.record(&ns, "agent.stop", format!("agents/{name}"));
        self.agents[i].desired = Desired::Stopped;
        Ok(())
    }

    /// Deletes a stopped Agent; the tenant's last one also tears the
    /// tenant down.
    async fn delete(&mut self, i: usize) -> Result<()> {
        let (ns, path) = self.agent_path(i);
        let out = self.rest.mutate(Method::DELETE, &path, None, None).await?;
        let name = self.agents[i].name.clone();
        if out.status == StatusCode::NO_CONTENT {
            self.record(&ns, "agent.delete", format!("agents/{name}"));
        } else if !(out.uncertain && out.status == StatusCode::NOT_FOUND) {
            eprintln!("fault run: delete {ns}/{name}: {} {}", out.status, out.body);
            *self.report.operations.entry("refused").or_default() += 1;
            return Ok(());
        }
        self.agents[i].desired = Desired::Deleted;
        let t = self.agents[i].tenant;
        let all_gone = self
            .agents
            .iter()
            .filter(|a| a.tenant == t)
            .all(|a| a.desired == Desired::Deleted);
        if all_gone && self.rng.random_bool(0.7) {
            let out = self
                .rest
                .mutate(Method::DELETE, &format!("/namespaces/{ns}"), None, None)
                .await?;
            if out.status == StatusCode::NO_CONTENT || out.status == StatusCode::ACCEPTED {
                self.record(&ns, "namespace.delete", format!("namespaces/{ns}"));
                self.tenants[t].torn_down = true;
            } else if out.uncertain && out.status == StatusCode::NOT_FOUND {
                self.tenants[t].torn_down = true;
            } else {
                eprintln!("fault run: teardown {ns}: {} {}", out.status, out.body);
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------ faults

    /// Revisions not yet terminal and work not yet done, read from the
    /// database just before a fault.
    async fn in_flight(&self) -> (bool, bool) {
        let q = async {
            let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&self.pg.url()).await?;
            let revisions: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM agent_revisions WHERE phase IN \
                 ('pending','provisioning','preparing','waiting-ready','stopping')",
            )
            .fetch_one(&mut c)
            .await?;
            let work: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM work_items WHERE state IN ('pending','claimed')",
            )
            .fetch_one(&mut c)
            .await?;
            anyhow::Ok((revisions > 0, work > 0))
        };
        match tokio::time::timeout(Duration::from_secs(2), q).await {
            Ok(Ok(v)) => v,
            _ => (false, false),
        }
    }

    async fn inject(&mut self, fault: Fault) -> Result<()> {
        let spoke = self.rng.random_range(0..2);
        let hold = Duration::from_millis(self.rng.random_range(200..3000));
        // The renewal partition waits for its moment, so its in-flight
        // reading is taken then.
        if fault == Fault::CertRenewalPartition {
            return self.cert_renewal_partition(spoke).await;
        }
        let timed = self.last_call.elapsed() < Duration::from_millis(100);
        let (mid, work) = self.in_flight().await;
        self.count(fault, timed, mid, work);
        match fault {
            Fault::HubKill => {
                self.hub_proc.take().context("hub")?.kill9()?;
                tokio::time::sleep(hold).await;
                self.hub_proc = Some(self.hub.serve().await?);
            }
            Fault::SpokeKill => {
                self.spokes[spoke].proc.take().context("spoke")?.kill9()?;
                tokio::time::sleep(hold).await;
                self.spokes[spoke].spawn()?;
            }
            Fault::SpokeStop => {
                let p = self.spokes[spoke].proc.as_ref().context("spoke")?;
                p.signal("-STOP")?;
                // Past two heartbeats: the hub must mark it offline.
                tokio::time::sleep(2 * HEARTBEAT + Duration::from_millis(700)).await;
                p.signal("-CONT")?;
            }
            Fault::PgRestart => {
                self.pg.ctl(&["stop", "-m", "immediate"])?;
                tokio::time::sleep(hold).await;
                self.pg.ctl(&["start"])?;
                self.pg.wait_ready(Duration::from_secs(30))?;
            }
            Fault::Partition => {
                let p = &self.spokes[spoke].proxy;
                p.partition(true);
                tokio::time::sleep(hold + Duration::from_secs(2)).await;
                p.partition(false);
            }
            Fault::ApiserverKill => {
                let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../e2e/cluster.sh");
                tokio::task::spawn_blocking(move || {
                    run_cmd(Command::new(script).args(["restart", "exec-b", "kube-apiserver"]))
                })
                .await??;
            }
            Fault::CertRenewalPartition => unreachable!("handled above"),
        }
        Ok(())
    }

    fn count(&mut self, fault: Fault, timed: bool, mid: bool, work: bool) {
        *self.report.faults.entry(fault.name()).or_default() += 1;
        self.report.timed += usize::from(timed);
        self.report.mid_pipeline += usize::from(mid);
        self.report.mid_work += usize::from(work);
        eprintln!(
            "fault run: {} {} (timed {timed}, revision in flight {mid}, work in flight {work})",
            Utc::now().format("%H:%M:%S%.3f"),
            fault.name()
        );
    }

    /// Partitions the spoke from just before its renewal (two thirds of
    /// the certificate's life) until a few seconds before it expires: the
    /// renewal fails during the partition and must succeed after it.
    async fn cert_renewal_partition(&mut self, spoke: usize) -> Result<()> {
        let ttl = chrono::Duration::seconds(CERT_TTL_SECONDS as i64);
        let s = &self.spokes[spoke];
        if let Some(not_after) = s.not_after() {
            let renew_at = not_after - ttl / 3;
            let start = renew_at - chrono::Duration::milliseconds(500);
            let wait = (start - Utc::now()).to_std().unwrap_or(Duration::ZERO);
            // Only within the current certificate's life; a renewal may be
            // logged later than it happened, so the wait is bounded.
            tokio::time::sleep(wait.min(Duration::from_secs(CERT_TTL_SECONDS))).await;
        }
        let timed = self.last_call.elapsed() < Duration::from_millis(100);
        let (mid, work) = self.in_flight().await;
        self.count(Fault::CertRenewalPartition, timed, mid, work);
        let before = self.spokes[spoke].not_after();
        let s = &self.spokes[spoke];
        s.proxy.partition(true);
        // A third of the life is left at renewal: heal with 4 s to spare.
        let hold = Duration::from_secs(CERT_TTL_SECONDS / 3).saturating_sub(Duration::from_secs(4));
        tokio::time::sleep(hold + Duration::from_millis(500)).await;
        s.proxy.partition(false);
        // Healed once the spoke holds a renewed certificate.
        let renewed = until(
            Duration::from_secs(4),
            "the renewal after the partition",
            || async { Ok((self.spokes[spoke].not_after() > before).then_some(())) },
        )
        .await;
        if renewed.is_err() && !self.expired.contains(&spoke) {
            let name = self.spokes[spoke].cluster_name.clone();
            self.violation(format!(
                "spoke {name}: no renewed certificate 4 s after a partition across its renewal (notAfter {before:?})"
            ));
        }
        Ok(())
    }

    // ------------------------------------------------------- convergence

    /// Waits (bounded) until every Agent's state matches, recording when
    /// each first did; afterwards checks every Agent once more (a
    /// violation each for what still differs).
    async fn converge(&mut self, within: Duration) -> Result<()> {
        let start = Instant::now();
        let deadline = start + within;
        let mut done: BTreeSet<usize> = BTreeSet::new();
        let mut last: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        let mut spokes_online = false;
        while Instant::now() < deadline {
            if !spokes_online {
                let mut all = true;
                for i in 0..2 {
                    let name = self.spokes[i].cluster_name.clone();
                    all &= self.expired.contains(&i)
                        || matches!(self.online(&name).await, Ok(Some(())));
                }
                spokes_online = all;
            }
            let pending: Vec<usize> = (0..self.agents.len())
                .filter(|i| !done.contains(i) && !self.broken.contains(i))
                .collect();
            let results =
                futures::future::join_all(pending.iter().map(|&i| self.check_agent(i))).await;
            for (i, result) in pending.into_iter().zip(results) {
                match result {
                    Ok(problems) if problems.is_empty() => {
                        done.insert(i);
                        let took = start.elapsed();
                        self.report.converge.push(took);
                        if took > Duration::from_secs(5) {
                            eprintln!(
                                "fault run: {} converged after {took:?}; last seen: {:?}",
                                self.agents[i].name,
                                last.get(&i)
                            );
                        }
                    }
                    Ok(problems) => {
                        last.insert(i, problems);
                    }
                    Err(e) => {
                        last.insert(i, vec![format!("check failed: {e:#}")]);
                    }
                }
            }
            if done.len() + self.broken.len() >= self.agents.len() && spokes_online {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if !spokes_online {
            for i in 0..2 {
                let name = self.spokes[i].cluster_name.clone();
                if self.expired.contains(&i) || matches!(self.online(&name).await, Ok(Some(()))) {
                    continue;
                }
                let why = match self.spokes[i].not_after() {
                    Some(t) if t < Utc::now() => {
                        self.expired.insert(i);
                        format!(
                            "its certificate expired at {t} while it could not reach the hub (renewal failed; it needs a new enrollment)"
                        )
                    }
                    other => format!("certificate valid until {other:?}"),
                };
                self.violation(format!(
                    "spoke {name} not online {within:?} after the last fault: {why}"
                ));
            }
        }
        for i in 0..self.agents.len() {
            if !done.contains(&i) && self.broken.insert(i) {
                for p in last.remove(&i).unwrap_or_default() {
                    self.violation(format!("not converged within {within:?}: {p}"));
                }
            }
        }
        // Converged once must stay so.
        for i in done {
            for p in self
                .check_agent(i)
                .await
                .unwrap_or_else(|e| vec![format!("{e:#}")])
            {
                self.violation(format!("changed after converging: {p}"));
            }
        }
        self.record_activations().await?;
        self.check_revisions().await
    }

    /// Notes deploy -> active of every revision that went active so far
    /// (read each round: a deleted Agent's revisions go with it).
    async fn record_activations(&mut self) -> Result<()> {
        use clawfed_hub::store::Store;
        let store = clawfed_hub::store::connect(&self.pg.url()).await?;
        for ns in store.list_namespaces(None).await? {
            for agent in store.list_agents(&ns.name).await? {
                for r in store.list_revisions(&ns.name, &agent.name).await? {
                    if let Some(at) = r.progress.activated_at {
                        let took = (at - r.created_at).to_std().unwrap_or_default();
                        self.report.deploy_to_active.insert(r.id.clone(), took);
                    }
                }
            }
        }
        Ok(())
    }

    /// Every revision active or terminal, with a reason where it failed,
    /// stopped or was retired; failed ones listed in the report.
    async fn check_revisions(&mut self) -> Result<()> {
        let mut found = Vec::new();
        for (i, a) in self.agents.clone().into_iter().enumerate() {
            // Reported already, when it did not converge.
            if self.broken.contains(&i) {
                continue;
            }
            let ns = self.tenants[a.tenant].ns.name.clone();
            let list: Option<serde_json::Value> = self
                .rest
                .get_retry(&format!(
                    "/namespaces/{ns}/agents/{}/revisions?limit=1000",
                    a.name
                ))
                .await?;
            let Some(list) = list else {
                if !self.tenants[a.tenant].torn_down {
                    found.push(format!("{ns}/{}: revision history missing", a.name));
                }
                continue;
            };
            let revisions: Vec<AgentRevision> =
                serde_json::from_value(list["items"].clone()).unwrap_or_default();
            for r in &revisions {
                let terminal = matches!(
                    r.phase,
                    RevisionPhase::Active
                        | RevisionPhase::Retired
                        | RevisionPhase::Stopped
                        | RevisionPhase::Failed
                );
                if !terminal {
                    found.push(format!(
                        "{ns}/{} r{}: still {:?} ({:?})",
                        a.name, r.number, r.phase, r.reason
                    ));
                }
                if r.phase == RevisionPhase::Failed {
                    match &r.reason {
                        Some(reason) => self
                            .report
                            .failed_revisions
                            .push(format!("{ns}/{} r{}: {reason}", a.name, r.number)),
                        None => found.push(format!(
                            "{ns}/{} r{}: failed without a reason",
                            a.name, r.number
                        )),
                    }
                }
            }
            // Nothing applied twice: one revision per deploy the run made.
            let numbers: Vec<i64> = revisions.iter().map(|r| r.number).collect();
            if numbers != a.revisions {
                found.push(format!(
                    "{ns}/{}: revisions {numbers:?}, the run deployed {:?}",
                    a.name, a.revisions
                ));
            }
        }
        for f in found {
            self.violation(f);
        }
        self.report.failed_revisions.sort();
        self.report.failed_revisions.dedup();
        Ok(())
    }

    /// What differs between Agent `i`'s desired state and the hub and the
    /// clusters (empty: converged).
    async fn check_agent(&self, i: usize) -> Result<Vec<String>> {
        let a = &self.agents[i];
        let t = &self.tenants[a.tenant];
        let ns = &t.ns.name;
        let dpns = &t.ns.data_plane_namespace;
        let gw_ns = &gateway_ns(&t.ns.id);
        let who = format!("{ns}/{}", a.name);
        let exec = self.execs[a.exec].admin();
        let control = self.control.admin();
        let mut p = Vec::new();
        let agent: Option<Agent> = self
            .rest
            .get_opt(&format!("/namespaces/{ns}/agents/{}", a.name))
            .await?;
        let revisions: Vec<AgentRevision> = match self
            .rest
            .get_opt::<serde_json::Value>(&format!(
                "/namespaces/{ns}/agents/{}/revisions?limit=1000",
                a.name
            ))
            .await?
        {
            Some(v) => serde_json::from_value(v["items"].clone())?,
            None => Vec::new(),
        };
        let phase = |n: i64| revisions.iter().find(|r| r.number == n).map(|r| r.phase);
        if let Some(r) = revisions.iter().find(|r| {
            !matches!(
                r.phase,
                RevisionPhase::Active
                    | RevisionPhase::Retired
                    | RevisionPhase::Stopped
                    | RevisionPhase::Failed
            )
        }) {
            p.push(format!("{who} r{} is {:?}", r.number, r.phase));
        }
        let harness = live::<Deployment>(&exec, dpns, &a.name).await?;
        let harness: Vec<Deployment> = harness
            .into_iter()
            .filter(|d| d.name_any().ends_with("-harness"))
            .collect();
        let harness_names: Vec<String> = harness.iter().map(|d| d.name_any()).collect();
        let gw_deployments = live_names::<Deployment>(&control, gw_ns, &a.name).await?;
        let route = routes(&control, gw_ns)?.get_opt(&a.name).await?;
        // Secrets and PVCs of retired revisions are destroyed by the
        // retirement: none may be left.
        for (kind, names) in [
            ("Secret", live_names::<Secret>(&exec, dpns, &a.name).await?),
            (
                "PersistentVolumeClaim",
                live_names::<PersistentVolumeClaim>(&exec, dpns, &a.name).await?,
            ),
        ] {
            for n in names {
                let rev = revision_of(&n, &a.name);
                let kept = match a.desired {
                    Desired::Deleted => false,
                    _ => rev.is_none_or(|r| phase(r) != Some(RevisionPhase::Retired)),
                };
                if !kept {
                    p.push(format!("{who}: extra {kind} {n} in {dpns}"));
                }
            }
        }
        match a.desired {
            Desired::Deleted => {
                if agent.is_some() {
                    p.push(format!("{who}: deleted Agent still readable"));
                }
                if !harness_names.is_empty() {
                    p.push(format!(
                        "{who}: deleted Agent has Harness {harness_names:?}"
                    ));
                }
                for (kind, names) in [
                    ("Deployment", gw_deployments.clone()),
                    (
                        "Service",
                        live_names::<Service>(&control, gw_ns, &a.name).await?,
                    ),
                    (
                        "Secret",
                        live_names::<Secret>(&control, gw_ns, &a.name).await?,
                    ),
                    (
                        "ServiceAccount",
                        live_names::<ServiceAccount>(&control, gw_ns, &a.name).await?,
                    ),
                    (
                        "PersistentVolumeClaim",
                        live_names::<PersistentVolumeClaim>(&control, gw_ns, &a.name).await?,
                    ),
                ] {
                    if !names.is_empty() {
                        p.push(format!(
                            "{who}: deleted Agent has control {kind}s {names:?}"
                        ));
                    }
                }
                if route.is_some() {
                    p.push(format!("{who}: deleted Agent has a route"));
                }
                if t.torn_down {
                    let tenant: Option<Namespace> =
                        self.rest.get_opt(&format!("/namespaces/{ns}")).await?;
                    if tenant.is_some() {
                        p.push(format!("{who}: torn-down tenant {ns} still readable"));
                    }
                    let phys: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(exec.clone());
                    if phys
                        .get_opt(dpns)
                        .await?
                        .is_some_and(|n| n.metadata.deletion_timestamp.is_none())
                    {
                        p.push(format!(
                            "{who}: torn-down tenant's namespace {dpns} is live"
                        ));
                    }
                }
            }
            Desired::Draft | Desired::Stopped => {
                let Some(agent) = agent else {
                    p.push(format!("{who}: Agent missing"));
                    return Ok(p);
                };
                if a.desired == Desired::Stopped && agent.desired_state != DesiredState::Stopped {
                    p.push(format!(
                        "{who}: desired {:?}, wanted stopped",
                        agent.desired_state
                    ));
                }
                if let Some(r) = revisions.iter().find(|r| r.phase == RevisionPhase::Active) {
                    p.push(format!("{who}: stopped, yet r{} is active", r.number));
                }
                if !harness_names.is_empty() {
                    p.push(format!("{who}: stopped, yet Harness {harness_names:?}"));
                }
                if !gw_deployments.is_empty() {
                    p.push(format!("{who}: stopped, yet Gateway {gw_deployments:?}"));
                }
                if route.is_some() {
                    p.push(format!("{who}: stopped, yet a route"));
                }
                // A stop keeps the Gateway's storage.
                let gateway_made = revisions
                    .iter()
                    .any(|r| r.progress.gateway_applied_at.is_some());
                if a.dedicated && gateway_made {
                    let pvcs =
                        live_names::<PersistentVolumeClaim>(&control, gw_ns, &a.name).await?;
                    let want = format!("{}-gateway-data", a.name);
                    if !pvcs.contains(&want) {
                        p.push(format!(
                            "{who}: stopped, the Gateway PVC {want} is gone ({pvcs:?})"
                        ));
                    }
                }
            }
            Desired::Running => {
                let Some(agent) = agent else {
                    p.push(format!("{who}: Agent missing"));
                    return Ok(p);
                };
                let latest = a.revisions.last().copied().unwrap_or(0);
                let active: Vec<i64> = revisions
                    .iter()
                    .filter(|r| r.phase == RevisionPhase::Active)
                    .map(|r| r.number)
                    .collect();
                // The newest revision serves, unless it failed (with a
                // reason): then the one the hub kept.
                let want = if phase(latest) == Some(RevisionPhase::Failed) {
                    agent.active_revision
                } else {
                    Some(latest)
                };
                if agent.desired_state != DesiredState::Running {
                    p.push(format!(
                        "{who}: desired {:?}, wanted running",
                        agent.desired_state
                    ));
                }
                if active.len() > 1 {
                    p.push(format!("{who}: several active revisions {active:?}"));
                }
                if agent.active_revision != want || active.first().copied() != want {
                    p.push(format!(
                        "{who}: active {:?} (revisions {active:?}), wanted r{want:?}",
                        agent.active_revision
                    ));
                }
                let Some(n) = want else {
                    return Ok(p);
                };
                let want_harness = format!("{}-r{n}-harness", a.name);
                if harness_names != [want_harness.clone()] {
                    p.push(format!(
                        "{who}: Harness {harness_names:?}, wanted [{want_harness}]"
                    ));
                }
                for d in &harness {
                    // Applied once: the spec never changed after creation.
                    if d.metadata.generation.unwrap_or(0) > 1 {
                        p.push(format!(
                            "{who}: Harness {} at generation {:?} (written more than once)",
                            d.name_any(),
                            d.metadata.generation
                        ));
                    }
                    let ready = d
                        .status
                        .as_ref()
                        .and_then(|s| s.ready_replicas)
                        .unwrap_or(0);
                    if ready < 1 {
                        p.push(format!("{who}: Harness {} not ready", d.name_any()));
                    }
                }
                let pods = live_names::<Pod>(&exec, dpns, &a.name).await?;
                if pods.len() != 1 {
                    p.push(format!("{who}: {} live Harness Pods {pods:?}", pods.len()));
                }
                if a.dedicated {
                    let want_gw = format!("{}-gateway", a.name);
                    if gw_deployments != [want_gw.clone()] {
                        p.push(format!(
                            "{who}: Gateway {gw_deployments:?}, wanted [{want_gw}]"
                        ));
                    }
                    let backend = route.as_ref().map(route_spec).transpose()?.and_then(|s| {
                        s.rules
                            .first()
                            .and_then(|r| r.backend_refs.first())
                            .map(|b| b.name.clone())
                    });
                    let want_backend = format!("{}-r{n}-gateway", a.name);
                    if backend.as_deref() != Some(&want_backend) {
                        p.push(format!(
                            "{who}: route backend {backend:?}, wanted {want_backend}"
                        ));
                    }
                } else {
                    if !gw_deployments.is_empty() {
                        p.push(format!("{who}: embedded, yet Gateway {gw_deployments:?}"));
                    }
                    if route.is_some() {
                        p.push(format!("{who}: embedded, yet a route"));
                    }
                }
            }
        }
        Ok(p)
    }

    /// Audit complete: every call the hub answered with success has its
    /// `ok` record (by namespace, action and target).
    async fn check_audit(&mut self) -> Result<()> {
        let mut want: BTreeMap<Mutation, usize> = BTreeMap::new();
        for m in &self.mutations {
            *want.entry(m.clone()).or_default() += 1;
        }
        let namespaces: BTreeSet<String> =
            self.mutations.iter().map(|m| m.namespace.clone()).collect();
        let mut have: BTreeMap<Mutation, usize> = BTreeMap::new();
        for ns in namespaces {
            let Some(list) = self
                .rest
                .get_retry::<serde_json::Value>(&format!("/audit?namespace={ns}&limit=1000"))
                .await?
            else {
                continue;
            };
            for e in list["items"].as_array().into_iter().flatten() {
                if e["result"] != "ok" {
                    continue;
                }
                let action = e["action"].as_str().unwrap_or_default();
                let Some(action) = want.keys().map(|m| m.action).find(|a| *a == action) else {
                    continue;
                };
                let m = Mutation {
                    namespace: ns.clone(),
                    action,
                    target: e["target"].as_str().unwrap_or_default().to_owned(),
                };
                *have.entry(m).or_default() += 1;
            }
        }
        let mut missing = Vec::new();
        for (m, n) in &want {
            let got = have.get(m).copied().unwrap_or(0);
            if got < *n {
                missing.push(format!(
                    "audit: {} {} in {}: {got} ok records for {n} successful calls",
                    m.action, m.target, m.namespace
                ));
            }
        }
        for v in missing {
            self.violation(v);
        }
        Ok(())
    }

    /// Removes what the run made in the clusters: Gateway objects, the
    /// tenants' namespaces in both execution clusters, the PVs; stops the
    /// processes.
    async fn cleanup(&mut self) -> Result<()> {
        for s in &mut self.spokes {
            s.proxy.partition(false);
            if let Some(mut p) = s.proc.take() {
                p.terminate().await;
            }
        }
        if let Some(mut p) = self.hub_proc.take() {
            p.terminate().await;
        }
        // Each tenant's Gateway namespace goes with everything in it.
        let g = Gateways::new(self.control.admin(), control_env::gateway_config())?;
        for t in &self.tenants {
            if let Err(e) = g.delete_namespace(&t.ns.id).await {
                eprintln!("cleanup: gateway namespace of {}: {e}", t.ns.name);
            }
        }
        for exec in &self.execs {
            let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(exec.admin());
            for t in &self.tenants {
                match namespaces
                    .delete(&t.ns.data_plane_namespace, &DeleteParams::background())
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => eprintln!("cleanup: namespace {}: {e}", t.ns.data_plane_namespace),
                }
            }
        }
        for (c, pv) in self.pvs.drain(..) {
            let client = if c == 0 {
                self.control.admin()
            } else {
                self.execs[c - 1].admin()
            };
            let _ = Api::<PersistentVolume>::all(client)
                .delete(&pv, &DeleteParams::background())
                .await;
        }
        Ok(())
    }
}

/// The revision number in an object name `<agent>-r<N>-...`.
fn revision_of(name: &str, agent: &str) -> Option<i64> {
    let rest = name.strip_prefix(agent)?.strip_prefix("-r")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn routes(client: &Client, gateway_ns: &str) -> Result<Api<DynamicObject>> {
    let ar = route_api_resource(clawfed_hub::gateway::DEFAULT_ROUTE_API_VERSION)?;
    Ok(Api::namespaced_with(client.clone(), gateway_ns, &ar))
}

/// The live (not deleting) objects of `agent` in `ns`.
async fn live<K>(client: &Client, ns: &str, agent: &str) -> Result<Vec<K>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    Ok(Api::<K>::namespaced(client.clone(), ns)
        .list(&agent_selector(agent))
        .await?
        .items
        .into_iter()
        .filter(|o| o.meta().deletion_timestamp.is_none())
        .collect())
}
