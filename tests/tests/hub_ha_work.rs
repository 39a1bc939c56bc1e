//! Hub high availability under work (issue 14): several real `clawfed-hub`
//! processes on one real PostgreSQL, each with its worker, pipeline and the
//! control cluster's Gateways on, and one real `clawfed-spoke` process
//! applying Harness work to the real `exec-a` cluster over real mTLS.
//!
//! - kill -9 of the replica holding the spoke's session while deploys are
//!   pending: the spoke is back on another replica within 5 s, every
//!   revision becomes active, and no Harness was applied twice with a
//!   different effect;
//! - two replicas driving the same revisions at once: every pipeline step
//!   happens once per revision;
//! - a rolling restart (SIGTERM, start again) of three replicas under a
//!   client that keeps deploying through one address: nothing it saw
//!   succeed is lost, no revision or work item is stuck or failed.
//!
//! The spoke and the client each dial one address in front of the
//! replicas: a TCP forwarder to a backend that accepts (a Service standing
//! in front of ready replicas). Replicas share the link CA directory (its
//! secrets key opens the CA sealed in the store) and a tunnel advertise
//! URL, as replicas behind one Service do.
//!
//! Needs `e2e/cluster.sh up control exec-a`, `eval "$(scripts/postgres.sh
//! env)"` and the binaries: `cargo build -p clawfed-hub -p clawfed-spoke
//! --bins`. The tests run one at a time (a lock): each starts two or three
//! hubs, and the machine is small.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clawfed_hub::auth::Role;
use clawfed_hub::client::HubClient;
use clawfed_hub::model::event::EventBody;
use clawfed_hub::model::{
    Agent, AgentRevision, ConnectionState, Namespace, RevisionPhase, WorkState,
};
use clawfed_hub::store::{SessionStore, SqlStore, Store, WatchStore, WorkFilter};
use clawfed_hub::worker::kinds::rollout_work;
use clawfed_proto::labels;
use clawfed_tests::api::{HubTestExt, short_id};
use clawfed_tests::cleanup::Cleanup;
use clawfed_tests::control_env::{self, gateway_ns};
use clawfed_tests::hub::mint;
use clawfed_tests::kube_env::{self, TestCluster};
use clawfed_tests::procs::{Proc, bin};
use clawfed_tests::{db, spoke_env, until};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use reqwest::{Method, StatusCode};
use serde_json::json;
use sqlx::Row;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How long a revision may take to become active on this loaded machine.
const WAIT: Duration = Duration::from_secs(90);
/// The replicas' link heartbeat: offline within two of them.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// How late past two heartbeats an offline run may be observed: the
/// sweep's statement and this test's sampling on a loaded machine.
const OFFLINE_MARGIN: Duration = Duration::from_millis(600);
/// Every replica advertises the same tunnel ingress, as replicas behind
/// one Service do (the Gateways' spec must not depend on which replica
/// applied it).
const TUNNEL_URL: &str = "https://clawfed-hub-tunnel.clawfed-system.svc:8444";

/// One test at a time: each runs two or three hubs and a spoke.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ------------------------------------------------------------- replicas

/// What every replica shares: the database, the CA directory (with the
/// secrets key beside it), the control cluster identity, the root token.
struct Env {
    dir: tempfile::TempDir,
    db: db::TestDb,
    ca_dir: PathBuf,
    hub_kubeconfig: PathBuf,
    rest: HubClient,
    control: TestCluster,
    exec: TestCluster,
}

/// One `clawfed-hub serve` process.
struct Replica {
    tag: String,
    proc: Proc,
    rest_port: u16,
    link_port: u16,
    /// Its id (`/readyz`'s `clawfed-replica` header).
    id: String,
}

impl Replica {
    fn rest_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.rest_port)
    }

    fn rest_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.rest_port))
    }

    fn link_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.link_port))
    }

    fn log(&self) -> String {
        Proc::text(&self.proc.stderr)
    }
}

impl Env {
    async fn new() -> Result<Option<Self>> {
        let Some(_) = kube_env::cluster_or_skip("control").await? else {
            return Ok(None);
        };
        let Some(exec) = kube_env::cluster_or_skip("exec-a").await? else {
            return Ok(None);
        };
        let control = control_env::control().await?;
        spoke_env::install_spoke_rbac(&exec).await?;
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("logs"))?;
        let db = db::postgres().await;
        let hub_kubeconfig = dir.path().join("hub.kubeconfig");
        control_env::write_service_account_kubeconfig(
            &control,
            control_env::HUB_NS,
            control_env::HUB_SA,
            3600,
            &hub_kubeconfig,
        )
        .await?;
        let root = mint(db.store.as_ref(), "root", None, Role::InstallationAdmin).await;
        // Pointed at a replica with `at` before every use.
        let rest = HubClient::new("", Some(root))?;
        Ok(Some(Self {
            ca_dir: dir.path().join("ca"),
            dir,
            db,
            hub_kubeconfig,
            rest,
            control,
            exec,
        }))
    }

    fn logs(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    fn store(&self) -> &SqlStore {
        &self.db.store
    }

    /// Writes the config of a replica listening on these ports.
    fn config(&self, tag: &str, rest_port: u16, link_port: u16) -> Result<PathBuf> {
        let config = json!({
            "version": 1,
            // Three replicas' pools (and this test's own) must fit the
            // server's max_connections (100 by default): the default pool,
            // the batch + 16, times three does not.
            "database": { "url": self.db.url, "maxConnections": 24 },
            "api": {
                "restAddr": format!("127.0.0.1:{rest_port}"),
                "grpcAddr": "127.0.0.1:0",
                "metricsAddr": "127.0.0.1:0"
            },
            "worker": {
                "enabled": true, "batchSize": 16, "leaseSeconds": 2,
                "safetyPollMs": 500, "maxAttempts": 8, "backoffBaseMs": 20,
                "backoffCapMs": 500, "healthIntervalSeconds": 60
            },
            "link": {
                "enabled": true,
                "addr": format!("127.0.0.1:{link_port}"),
                "caDir": self.ca_dir,
                "serverNames": ["127.0.0.1", "localhost"],
                "certTtlSeconds": 3600,
                "heartbeatSeconds": HEARTBEAT.as_secs(),
                "maxSessions": 100,
                "maxConcurrentHandshakes": 16
            },
            "pipeline": {
                "enabled": true, "readyDeadlineSeconds": 90, "phaseDeadlineSeconds": 90,
                "pathProbe": false, "startupStatus": false
            },
            "tunnel": { "addr": "127.0.0.1:0", "advertiseUrl": TUNNEL_URL },
            "gateway": {
                "enabled": true,
                "kubeconfig": self.hub_kubeconfig,
                "options": control_env::gateway_config()
            },
            "log": { "format": "json", "filter": "info" }
        });
        let path = self.dir.path().join(format!("{tag}.yaml"));
        std::fs::write(&path, serde_yaml_ng::to_string(&config)?)?;
        Ok(path)
    }

    /// Starts `clawfed-hub serve` on these ports and waits until its
    /// `/readyz` says ready.
    async fn serve(&self, tag: &str, rest_port: u16, link_port: u16) -> Result<Replica> {
        let config = self.config(tag, rest_port, link_port)?;
        let mut c = Command::new(bin("clawfed-hub")?);
        c.arg("--config").arg(&config).arg("serve");
        for (k, _) in std::env::vars() {
            if k.starts_with("CLAWFED_") {
                c.env_remove(k);
            }
        }
        let mut proc = Proc::spawn(tag, &mut c, &self.logs())?;
        // A first start binds port 0: its ports are read off the
        // "listening" line (a restart passes them back in).
        let listening = proc.hub_listening(Duration::from_secs(60)).await?;
        let (rest_port, link_port) = (listening.port("rest")?, listening.port("link")?);
        let readyz = format!("http://127.0.0.1:{rest_port}/readyz");
        let deadline = Instant::now() + Duration::from_secs(60);
        let id = loop {
            ensure!(
                proc.alive(),
                "{tag} exited during start-up:\n{}",
                Proc::text(&proc.stderr)
            );
            ensure!(
                Instant::now() < deadline,
                "{tag} did not become ready:\n{}",
                Proc::text(&proc.stderr)
            );
            if let Ok(r) = reqwest::get(&readyz).await
                && r.status() == StatusCode::OK
                && let Some(id) = r.headers().get("clawfed-replica")
            {
                break id.to_str()?.to_owned();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        Ok(Replica {
            tag: tag.to_owned(),
            proc,
            rest_port,
            link_port,
            id,
        })
    }

    /// Starts replicas `tags` one after the other (the first creates the
    /// CA the others load).
    async fn replicas(&self, tags: &[&str]) -> Result<Vec<Replica>> {
        let mut out = Vec::new();
        for tag in tags {
            out.push(self.serve(tag, 0, 0).await?);
        }
        Ok(out)
    }

    /// Enrolls and starts a `clawfed-spoke` for a fresh cluster name on
    /// exec-a, dialing `hub_url`; returns the process and the cluster name.
    async fn spoke(&self, hub_url: &str, via: &HubClient) -> Result<(Proc, String)> {
        let cluster = format!("exec-a-{}", &short_id()[..6]);
        let root = self.dir.path();
        let kubeconfig = root.join("spoke.kubeconfig");
        control_env::write_service_account_kubeconfig(
            &self.exec,
            spoke_env::SPOKE_NAMESPACE,
            spoke_env::SPOKE_SERVICE_ACCOUNT,
            3600,
            &kubeconfig,
        )
        .await?;
        let token_file = root.join("bootstrap-token");
        std::fs::write(&token_file, via.bootstrap_token(&cluster).await?)?;
        let ca_file = self.ca_dir.join("ca.crt");
        ensure!(ca_file.exists(), "{} missing", ca_file.display());
        let mut c = Command::new(bin("clawfed-spoke")?);
        for (k, _) in std::env::vars() {
            if k.starts_with("CLAWFED_") || k == "KUBECONFIG" {
                c.env_remove(k);
            }
        }
        c.args(["--hub-url", hub_url])
            .arg("--ca-file")
            .arg(&ca_file)
            .args(["--cluster-name", &cluster])
            .arg("--state-dir")
            .arg(root.join("spoke-state"))
            .args(["--applier", "kube"])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(["--backoff-max-seconds", "1"])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--bootstrap-token-file")
            .arg(&token_file)
            .env("CLAWFED_LOG", "info");
        let proc = Proc::spawn("spoke", &mut c, &self.logs())?;
        Ok((proc, cluster))
    }

    /// The cluster's id once it is online.
    async fn online(&self, cluster: &str) -> Result<String> {
        until(WAIT, &format!("{cluster} online"), || async {
            let c = self.store().get_cluster(cluster).await?;
            Ok((c.connection_state == ConnectionState::Online).then_some(c.id))
        })
        .await
    }

    /// The replica holding the cluster's live session and its epoch.
    async fn owner(&self, cluster_id: &str) -> Result<Option<(String, i64)>> {
        Ok(self
            .store()
            .get_session(cluster_id)
            .await?
            .filter(|s| s.lease_expires_at > chrono::Utc::now())
            .map(|s| (s.replica_id, s.epoch)))
    }
}

// ---------------------------------------------------------------- front

/// One address in front of the replicas: each connection goes to a
/// backend that accepts it. `rotate` spreads connections over the
/// backends (a Service); without it the first accepting backend in order
/// gets them, so a test knows where a spoke lands first.
struct Front {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Front {
    async fn start(backends: Vec<SocketAddr>, rotate: bool) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let next = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let start = if rotate {
                    next.fetch_add(1, Ordering::Relaxed)
                } else {
                    0
                };
                let order: Vec<SocketAddr> = (0..backends.len())
                    .map(|i| backends[(start + i) % backends.len()])
                    .collect();
                tokio::spawn(async move {
                    for backend in order {
                        let dialed = tokio::time::timeout(
                            Duration::from_secs(1),
                            TcpStream::connect(backend),
                        )
                        .await;
                        if let Ok(Ok(mut upstream)) = dialed {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                            return;
                        }
                    }
                });
            }
        });
        Ok(Self { addr, task })
    }

    fn https(&self) -> String {
        format!("https://{}", self.addr)
    }

    fn http(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------- cluster observers

/// Every version of a Deployment a watch saw.
#[derive(Debug, Default, Clone)]
struct Seen {
    uids: BTreeSet<String>,
    generations: BTreeSet<i64>,
    deleted: bool,
}

/// Watches the Deployments of namespace `ns` and records every uid and
/// spec generation each name had. A second uid means deleted and made
/// again; a second generation means its spec was written with something
/// else. Aborted when dropped; ends by itself after `WATCH_LIMIT`.
struct DeploymentLog {
    seen: Arc<Mutex<HashMap<String, Seen>>>,
    synced: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

const WATCH_LIMIT: Duration = Duration::from_secs(600);

impl DeploymentLog {
    async fn start(client: Client, ns: &str) -> Result<Self> {
        let seen = Arc::new(Mutex::new(HashMap::<String, Seen>::new()));
        let synced = Arc::new(AtomicBool::new(false));
        let api = Api::<Deployment>::namespaced(client, ns);
        let task = tokio::spawn({
            let (seen, synced) = (seen.clone(), synced.clone());
            async move {
                let mut events = watcher(api, watcher::Config::default()).boxed();
                let end = tokio::time::sleep(WATCH_LIMIT);
                tokio::pin!(end);
                loop {
                    let event = tokio::select! {
                        e = events.next() => e,
                        _ = &mut end => return,
                    };
                    let Some(event) = event else { return };
                    let (d, deleted) = match event {
                        Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => (d, false),
                        Ok(watcher::Event::Delete(d)) => (d, true),
                        Ok(watcher::Event::InitDone) => {
                            synced.store(true, Ordering::SeqCst);
                            continue;
                        }
                        // Init, or a watch error the watcher retries.
                        _ => continue,
                    };
                    let mut seen = seen.lock().unwrap();
                    let entry = seen.entry(d.name_any()).or_default();
                    entry.uids.extend(d.metadata.uid.clone());
                    entry.generations.extend(d.metadata.generation);
                    entry.deleted |= deleted;
                }
            }
        });
        let log = Self { seen, synced, task };
        until(
            Duration::from_secs(30),
            "the Deployment watch listed",
            || async { Ok(log.synced.load(Ordering::SeqCst).then_some(())) },
        )
        .await?;
        Ok(log)
    }

    fn get(&self, name: &str) -> Option<Seen> {
        self.seen.lock().unwrap().get(name).cloned()
    }

    /// Fails unless `name` was one object whose spec was written once
    /// (generation 1 throughout) and never deleted.
    fn assert_written_once(&self, name: &str) -> Result<Seen> {
        let seen = self
            .get(name)
            .with_context(|| format!("no Deployment {name} was ever seen"))?;
        ensure!(
            seen.uids.len() == 1 && !seen.deleted,
            "{name} was deleted or made again: {seen:?}"
        );
        ensure!(
            seen.generations == BTreeSet::from([1]),
            "{name}'s spec was written more than once with a different effect: {seen:?}"
        );
        Ok(seen)
    }
}

impl Drop for DeploymentLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// ReplicaSets owned by Deployment `name` in `ns`: a Deployment whose pod
/// template changed even once has two.
async fn replica_sets_of(client: &Client, ns: &str, name: &str) -> Result<usize> {
    Ok(Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .list_metadata(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|rs| {
            rs.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "Deployment" && o.name == name)
        })
        .count())
}

/// Samples the cluster's connection state every 20 ms for `window` and
/// returns the longest run it showed anything but online.
async fn longest_offline(store: Arc<SqlStore>, cluster: String, window: Duration) -> Duration {
    let end = Instant::now() + window;
    let (mut longest, mut since) = (Duration::ZERO, None::<Instant>);
    while Instant::now() < end {
        let now = Instant::now();
        let online = store
            .get_cluster(&cluster)
            .await
            .is_ok_and(|c| c.connection_state == ConnectionState::Online);
        if online {
            since = None;
        } else {
            let from = *since.get_or_insert(now);
            longest = longest.max(now - from);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    longest
}

// ---------------------------------------------------- store observations

/// Phases each revision ENTERED per the watch log (an event whose phase
/// differs from the previous one; a reason-only change is not an entry),
/// with how often.
async fn phase_entries(store: &SqlStore) -> Result<HashMap<String, BTreeMap<String, usize>>> {
    let mut out: HashMap<String, BTreeMap<String, usize>> = HashMap::new();
    for e in store.events_after(0, 1_000_000).await? {
        if let EventBody::RevisionPhase(p) = e.body
            && p.previous_phase != Some(p.phase)
        {
            *out.entry(p.revision_id)
                .or_default()
                .entry(p.phase.as_str().to_owned())
                .or_default() += 1;
        }
    }
    Ok(out)
}

/// Outbox rows that share a cluster, target and generation (must be none:
/// one put per target generation).
async fn duplicate_outbox_rows(store: &SqlStore) -> Result<Vec<(String, i64, i64)>> {
    let rows = sqlx::query(
        "SELECT target, generation, COUNT(*) AS n FROM outbox \
         GROUP BY cluster_id, target, generation HAVING COUNT(*) > 1",
    )
    .fetch_all(store.pool())
    .await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get("target")?,
                r.try_get("generation")?,
                r.try_get("n")?,
            ))
        })
        .collect()
}

/// Outbox rows per target (generations), for the printed figures.
async fn outbox_generations(store: &SqlStore) -> Result<BTreeMap<String, Vec<i64>>> {
    let rows = sqlx::query("SELECT target, generation FROM outbox ORDER BY target, generation")
        .fetch_all(store.pool())
        .await?;
    let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for r in rows {
        out.entry(r.try_get("target")?)
            .or_default()
            .push(r.try_get("generation")?);
    }
    Ok(out)
}

/// Work items that failed for good.
async fn failed_work(store: &SqlStore) -> Result<Vec<String>> {
    Ok(store
        .list_work(&WorkFilter {
            namespace: None,
            state: Some(WorkState::Failed),
            limit: 1000,
        })
        .await?
        .into_iter()
        .map(|w| format!("{} {} {:?}", w.kind, w.target, w.last_error))
        .collect())
}

/// Work items due and not finished (pending and due, or claimed), each as
/// kind, target, state, attempts, lease owner, due in ms and last error, so
/// a wait that times out says what was left.
async fn unfinished_due_work(store: &SqlStore) -> Result<Vec<String>> {
    let now = chrono::Utc::now().timestamp_millis();
    let rows = sqlx::query(
        "SELECT kind, target, state, attempts, lease_owner, run_at, last_error \
         FROM work_items WHERE state = 'claimed' \
         OR (state = 'pending' AND run_at <= $1) ORDER BY run_at",
    )
    .bind(now)
    .fetch_all(store.pool())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(format!(
                "{} {} {} attempts={} owner={:?} due_in_ms={} last_error={:?}",
                r.try_get::<String, _>("kind")?,
                r.try_get::<String, _>("target")?,
                r.try_get::<String, _>("state")?,
                r.try_get::<i64, _>("attempts")?,
                r.try_get::<Option<String>, _>("lease_owner")?,
                r.try_get::<i64, _>("run_at")? - now,
                r.try_get::<Option<String>, _>("last_error")?,
            ))
        })
        .collect()
}

/// What a test that timed out waiting on the pipeline needs to say: the
/// work items not done (kind, target, state, attempts, due in ms, error)
/// and each replica's warnings and errors (the last 20).
async fn diagnosis(store: &SqlStore, replicas: &[Replica]) -> String {
    let now = chrono::Utc::now().timestamp_millis();
    let mut out = String::from("work not done:\n");
    match sqlx::query(
        "SELECT kind, target, state, attempts, run_at, last_error FROM work_items \
         WHERE state <> 'done' ORDER BY run_at",
    )
    .fetch_all(store.pool())
    .await
    {
        Ok(rows) => {
            for r in rows {
                out.push_str(&format!(
                    "  {} {} {} attempts={} due_in_ms={} {:?}\n",
                    r.get::<String, _>("kind"),
                    r.get::<String, _>("target"),
                    r.get::<String, _>("state"),
                    r.get::<i64, _>("attempts"),
                    r.get::<i64, _>("run_at") - now,
                    r.get::<Option<String>, _>("last_error"),
                ));
            }
        }
        Err(e) => out.push_str(&format!("  (cannot list: {e})\n")),
    }
    for r in replicas {
        let log = r.log();
        let notable: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("\"WARN\"") || l.contains("\"ERROR\""))
            .collect();
        out.push_str(&format!("{} warnings and errors (last 20):\n", r.tag));
        for l in &notable[notable.len().saturating_sub(20)..] {
            out.push_str(&format!("  {l}\n"));
        }
    }
    out
}

/// Lines of `log` (a replica's JSON log) that carry `message` and mention
/// `id`.
/// A put never repeats a generation it already holds (the store refuses
/// it under the cluster row's lock), so an extra outbox row of a target and
/// generation is a resend the link made on purpose (a spoke's heartbeat
/// digest disagreed twice, or it asked, as after its session's replica
/// died): each must be one the replicas logged.
async fn outbox_rows_are_puts_or_logged_resends(store: &SqlStore, logs: &[String]) -> Result<()> {
    let duplicates = duplicate_outbox_rows(store).await?;
    let extra: i64 = duplicates.iter().map(|(_, _, n)| n - 1).sum();
    let resent: i64 = logs.iter().map(|l| logged_resends(l)).sum();
    ensure!(
        extra <= resent,
        "outbox puts repeated beyond the {resent} logged resends: {duplicates:?}"
    );
    Ok(())
}

/// Outbox rows the link resent (`link.digest_mismatch` and
/// `link.resend_requested` lines, their `resent` counts) in `log`.
fn logged_resends(log: &str) -> i64 {
    log.lines()
        .filter(|l| {
            l.contains("\"link.digest_mismatch\"") || l.contains("\"link.resend_requested\"")
        })
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            let fields = v.get("fields").unwrap_or(&v);
            fields.get("resent").and_then(serde_json::Value::as_i64)
        })
        .sum()
}

fn log_count(log: &str, message: &str, id: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(&format!("\"{message}\"")) && l.contains(id))
        .count()
}

// --------------------------------------------------------------- cleanup

/// A tenant with `n` Agents of `kind` on `cluster`, registered for cleanup.
async fn tenant_with_agents(
    env: &Env,
    rest: &HubClient,
    cleanup: &mut Cleanup,
    cluster: &str,
    kind: &str,
    n: usize,
) -> Result<(Namespace, Vec<Agent>)> {
    let ns = rest.new_tenant().await?;
    cleanup
        .exec_namespaces
        .push(ns.data_plane_namespace.clone());
    let mut agents = Vec::new();
    for _ in 0..n {
        let agent = rest.new_agent(&ns.name, cluster, kind).await?;
        if kind != "embedded-openclaw" {
            cleanup
                .gateway(&env.control.admin(), &ns, &agent.name)
                .await?;
        }
        agents.push(agent);
    }
    Ok((ns, agents))
}

// ================================================================ tests

/// kill -9 of the replica holding the spoke's session while deploys
/// queued through another replica are under way.
///
/// "Exactly once in effect" is asserted on the cluster, where an effect
/// is: a watch on exec-a's Deployments sees each Harness Deployment as one
/// object (one uid, never deleted) whose spec was written once
/// (`metadata.generation` 1 throughout, one ReplicaSet). A resend of the
/// same generation after the failover is allowed: the spoke's server-side
/// apply of the same spec changes nothing, so generation and ReplicaSet
/// stay. In the hub: one outbox row per target generation, and every
/// phase entered once per revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_of_the_session_owner_during_pending_deploys_applies_each_harness_once() -> Result<()>
{
    let _serial = SERIAL.lock().await;
    let Some(env) = Env::new().await? else {
        return Ok(());
    };
    let mut cleanup = Cleanup::default();
    let mut replicas = env.replicas(&["hub-a", "hub-b", "hub-c"]).await?;
    let link = Front::start(replicas.iter().map(Replica::link_addr).collect(), false).await?;
    let b_rest = env.rest.at(&replicas[1].rest_url());
    let (_spoke, cluster) = env.spoke(&link.https(), &b_rest).await?;
    let cluster_id = env.online(&cluster).await?;
    let a_id = replicas[0].id.clone();
    let (_, epoch) = until(WAIT, "hub-a holding the session", || async {
        Ok(env.owner(&cluster_id).await?.filter(|(r, _)| *r == a_id))
    })
    .await?;

    let (ns, agents) =
        tenant_with_agents(&env, &b_rest, &mut cleanup, &cluster, "dedicated-codex", 3).await?;
    let dpns = ns.data_plane_namespace.clone();
    let harness = DeploymentLog::start(env.exec.admin(), &dpns).await?;
    let gateways = DeploymentLog::start(env.control.admin(), &gateway_ns(&ns.id)).await?;

    // Deploys through B while A holds the session.
    let started = Instant::now();
    for a in &agents {
        b_rest.deploy_current(&ns.name, &a.name).await?;
    }
    // Mid-way: once the first Harness work is in the outbox (A is
    // delivering it), before every revision is active.
    let harness_targets: Vec<String> = agents
        .iter()
        .map(|a| clawfed_proto::work::target::harness(&ns.id, &a.name, 1))
        .collect();
    until(WAIT, "the first Harness work queued", || async {
        Ok(outbox_generations(env.store())
            .await?
            .keys()
            .any(|t| harness_targets.contains(t))
            .then_some(()))
    })
    .await?;
    let mut at_kill = Vec::new();
    for a in &agents {
        at_kill.push(b_rest.revision(&ns.name, &a.name, 1).await?.phase);
    }
    replicas[0].proc.kill9()?;
    let killed = Instant::now();
    let offline = tokio::spawn(longest_offline(
        env.db.store.clone(),
        cluster.clone(),
        8 * HEARTBEAT,
    ));
    let survivors = [replicas[1].id.clone(), replicas[2].id.clone()];
    let (owner, new_epoch) = until(
        Duration::from_secs(5),
        "the session on a surviving replica",
        || async {
            Ok(env
                .owner(&cluster_id)
                .await?
                .filter(|(r, _)| survivors.contains(r)))
        },
    )
    .await?;
    let failover = killed.elapsed();
    ensure!(new_epoch > epoch, "the new session bumps the epoch");

    for a in &agents {
        if let Err(e) = b_rest
            .wait_phase(&ns.name, &a.name, 1, RevisionPhase::Active)
            .await
        {
            let why = diagnosis(env.store(), &replicas).await;
            return Err(e.context(why));
        }
    }
    let all_active = started.elapsed();
    let longest = offline.await?;
    eprintln!(
        "phases at kill -9: {at_kill:?}; spoke on {} {failover:?} after the kill; longest offline {longest:?}; all {} active {all_active:?} after the deploys",
        if owner == survivors[0] {
            "hub-b"
        } else {
            "hub-c"
        },
        agents.len()
    );
    let bound = 2 * HEARTBEAT + OFFLINE_MARGIN;
    ensure!(longest <= bound, "offline for {longest:?}, bound {bound:?}");

    // Once in effect, on the clusters.
    for a in &agents {
        let name = format!("{}-r1-harness", a.name);
        let seen = harness.assert_written_once(&name)?;
        let d = Api::<Deployment>::namespaced(env.exec.admin(), &dpns)
            .get(&name)
            .await?;
        ensure!(seen.uids.contains(d.uid().as_deref().unwrap_or_default()));
        ensure!(
            d.annotations().get(labels::GENERATION_ANNOTATION)
                == Some(&clawfed_proto::work::generation::HARNESS_APPLY.to_string()),
            "{name} records generation {:?}",
            d.annotations().get(labels::GENERATION_ANNOTATION)
        );
        let sets = replica_sets_of(&env.exec.admin(), &dpns, &name).await?;
        ensure!(sets == 1, "{name} has {sets} ReplicaSets");
        let gw = format!("{}-gateway", a.name);
        let g = gateways
            .get(&gw)
            .with_context(|| format!("{gw} never seen"))?;
        ensure!(
            g.uids.len() == 1 && !g.deleted,
            "{gw} made more than once: {g:?}"
        );
    }
    // And in the hub's records: no put repeated, an extra row being a
    // resend a replica logged (see `logged_resends`).
    let logs: Vec<String> = replicas.iter().map(Replica::log).collect();
    outbox_rows_are_puts_or_logged_resends(env.store(), &logs).await?;
    for (revision, entered) in phase_entries(env.store()).await? {
        ensure!(
            entered.values().all(|n| *n == 1),
            "revision {revision} entered a phase twice: {entered:?}"
        );
    }
    let failed = failed_work(env.store()).await?;
    ensure!(failed.is_empty(), "failed work: {failed:?}");
    drop(replicas);
    cleanup.run().await
}

/// Two replicas, each with its worker, drive the same revisions at once:
/// deploys go through both, and passes over every revision are queued
/// again and again while they roll out (as spoke reports queue them), so
/// both workers claim passes of one revision at the same moment. Each
/// pipeline step must still happen once per revision: activated once
/// (`pipeline.active` in one replica's log), every phase entered once, one outbox row per target generation, one Gateway
/// Deployment and one Harness Deployment written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_driving_the_same_revisions_at_once_apply_each_step_once() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let Some(env) = Env::new().await? else {
        return Ok(());
    };
    let mut cleanup = Cleanup::default();
    let replicas = env.replicas(&["hub-a", "hub-b"]).await?;
    let link = Front::start(replicas.iter().map(Replica::link_addr).collect(), false).await?;
    let rests: Vec<HubClient> = replicas
        .iter()
        .map(|r| env.rest.at(&r.rest_url()))
        .collect();
    let (_spoke, cluster) = env.spoke(&link.https(), &rests[0]).await?;
    env.online(&cluster).await?;
    let (ns, agents) = tenant_with_agents(
        &env,
        &rests[1],
        &mut cleanup,
        &cluster,
        "dedicated-codex",
        3,
    )
    .await?;
    let dpns = ns.data_plane_namespace.clone();
    let harness = DeploymentLog::start(env.exec.admin(), &dpns).await?;
    let gateways = DeploymentLog::start(env.control.admin(), &gateway_ns(&ns.id)).await?;

    let started = Instant::now();
    let mut revisions = Vec::new();
    for (i, a) in agents.iter().enumerate() {
        revisions.push(rests[i % 2].deploy_current(&ns.name, &a.name).await?);
    }
    // Extra passes over every revision, two at a time, until all are
    // active: both workers claim them together.
    let pressure = tokio::spawn({
        let store = env.db.store.clone();
        let targets: Vec<(String, String)> = revisions
            .iter()
            .map(|r| (r.id.clone(), ns.id.clone()))
            .collect();
        async move {
            let deadline = Instant::now() + WAIT;
            let mut queued = 0usize;
            while Instant::now() < deadline {
                let mut work = Vec::new();
                for (revision, namespace) in &targets {
                    let phase = store.get_revision_by_id(revision).await?.phase;
                    if phase == RevisionPhase::Active {
                        continue;
                    }
                    for _ in 0..2 {
                        work.push(rollout_work(
                            revision,
                            namespace,
                            None,
                            chrono::Utc::now(),
                            8,
                        ));
                    }
                }
                if work.is_empty() {
                    break;
                }
                queued += work.len();
                store.enqueue_work(&work).await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            anyhow::Ok(queued)
        }
    });
    for a in &agents {
        rests[0]
            .wait_phase(&ns.name, &a.name, 1, RevisionPhase::Active)
            .await?;
    }
    let elapsed = started.elapsed();
    let queued = pressure.await??;
    // The passes still queued run out (each finds nothing to do).
    until(WAIT, "the queued passes done", || async {
        let left = unfinished_due_work(env.store()).await?;
        ensure!(left.is_empty(), "work left due: {left:#?}");
        Ok(Some(()))
    })
    .await?;

    let logs: Vec<String> = replicas.iter().map(Replica::log).collect();
    let claimed_by: Vec<usize> = logs
        .iter()
        .map(|l| l.matches("\"worker.completed\"").count())
        .collect();
    eprintln!(
        "{} revisions active after {elapsed:?}; {queued} extra passes queued; items completed per replica: {claimed_by:?}",
        revisions.len()
    );
    ensure!(
        claimed_by.iter().all(|n| *n > 0),
        "both replicas worked: {claimed_by:?}"
    );
    let entries = phase_entries(env.store()).await?;
    for r in &revisions {
        let activated: Vec<usize> = logs
            .iter()
            .map(|l| log_count(l, "pipeline.active", &r.id))
            .collect();
        ensure!(
            activated.iter().sum::<usize>() == 1,
            "revision {} {} activated {activated:?} times (per replica)",
            r.agent,
            r.id
        );
        let entered = entries
            .get(&r.id)
            .with_context(|| format!("no phase events of {}", r.id))?;
        // (A tenant already provisioned skips `provisioning`.)
        ensure!(
            entered.values().all(|n| *n == 1)
                && ["preparing", "waiting-ready", "active"]
                    .iter()
                    .all(|p| entered.contains_key(*p)),
            "{} entered phases {entered:?}",
            r.agent
        );
        harness.assert_written_once(&format!("{}-r1-harness", r.agent))?;
        let gw = format!("{}-gateway", r.agent);
        let g = gateways
            .get(&gw)
            .with_context(|| format!("{gw} never seen"))?;
        ensure!(
            g.uids.len() == 1 && !g.deleted,
            "{gw} made more than once: {g:?}"
        );
        let sets =
            replica_sets_of(&env.exec.admin(), &dpns, &format!("{}-r1-harness", r.agent)).await?;
        ensure!(sets == 1, "{} Harness has {sets} ReplicaSets", r.agent);
    }
    outbox_rows_are_puts_or_logged_resends(env.store(), &logs).await?;
    let failed = failed_work(env.store()).await?;
    ensure!(failed.is_empty(), "failed work: {failed:?}");
    drop(replicas);
    cleanup.run().await
}

/// What the deploying client saw succeed.
#[derive(Debug, Default)]
struct Seen3 {
    /// Per Agent: revision numbers whose deploy answered 2xx.
    deployed: BTreeMap<String, Vec<i64>>,
    /// Per Agent: the image its last successful update set.
    image: BTreeMap<String, String>,
    requests: usize,
    retries: usize,
}

/// One request, retried on connection errors and 5xx (a replica going
/// away, or one starting: 503) for up to `RETRY_FOR`.
async fn with_retries(
    rest: &HubClient,
    method: Method,
    path: &str,
    body: Option<serde_json::Value>,
    retries: &mut usize,
) -> Result<(StatusCode, String)> {
    const RETRY_FOR: Duration = Duration::from_secs(30);
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        let outcome = rest
            .exchange(method.clone(), path, body.as_ref(), None)
            .await;
        match outcome {
            Ok((status, text)) if !status.is_server_error() => return Ok((status, text)),
            Ok((status, text)) if Instant::now() >= deadline => {
                bail!("{method} {path}: {status} {text} (retried {RETRY_FOR:?})")
            }
            Err(e) if Instant::now() >= deadline => {
                bail!("{method} {path}: {e} (retried {RETRY_FOR:?})")
            }
            _ => {
                *retries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The client: rounds of update (a new image) then deploy for every
/// Agent, through the front address, until `stop`.
async fn deploy_loop(
    rest: HubClient,
    tenant: String,
    agents: Vec<String>,
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicUsize>,
) -> Result<Seen3> {
    let mut seen = Seen3::default();
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut round = 0;
    while !stop.load(Ordering::SeqCst) {
        ensure!(Instant::now() < deadline, "the client ran too long");
        round += 1;
        for agent in &agents {
            let path = format!("/namespaces/{tenant}/agents/{agent}");
            let image = format!("ghcr.io/openclaw/openclaw:2.{round}");
            // An update is a compare-and-swap on the Agent's version: a
            // retry after an answer that got lost finds its own write (409
            // and the image already set), which counts as success.
            loop {
                seen.requests += 1;
                let (status, text) =
                    with_retries(&rest, Method::GET, &path, None, &mut seen.retries).await?;
                ensure!(status.is_success(), "GET {path}: {status} {text}");
                let current: Agent = serde_json::from_str(&text)?;
                if current.spec.image == image {
                    break;
                }
                let mut spec = current.spec.clone();
                spec.image = image.clone();
                seen.requests += 1;
                let (status, text) = with_retries(
                    &rest,
                    Method::PUT,
                    &path,
                    Some(json!({ "spec": spec, "version": current.version })),
                    &mut seen.retries,
                )
                .await?;
                if status.is_success() {
                    break;
                }
                ensure!(
                    status == StatusCode::CONFLICT,
                    "PUT {path}: {status} {text}"
                );
            }
            seen.image.insert(agent.clone(), image);
            seen.requests += 1;
            let (status, text) = with_retries(
                &rest,
                Method::POST,
                &format!("{path}/deploy"),
                None,
                &mut seen.retries,
            )
            .await?;
            ensure!(status.is_success(), "deploy {agent}: {status} {text}");
            let r: AgentRevision = serde_json::from_str(&text)?;
            seen.deployed
                .entry(agent.clone())
                .or_default()
                .push(r.number);
        }
        rounds.fetch_add(1, Ordering::SeqCst);
        // Pacing, so revisions also get time to settle between rounds.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(seen)
}

/// Three replicas restarted one after the other (SIGTERM: graceful
/// handoff; start again on the same addresses; wait for `/readyz`) while a
/// client keeps updating and deploying Agents through one address,
/// retrying connection errors and 5xx. Afterwards every deploy the client
/// saw succeed is a revision, every Agent carries its last update, the
/// latest revision of each is active and every older one retired or
/// stopped (none failed), no work item failed and none is left due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_continuous_deploys_loses_no_request_and_no_work() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let Some(env) = Env::new().await? else {
        return Ok(());
    };
    let mut cleanup = Cleanup::default();
    let mut replicas = env.replicas(&["hub-a", "hub-b", "hub-c"]).await?;
    let link = Front::start(replicas.iter().map(Replica::link_addr).collect(), true).await?;
    let api = Front::start(replicas.iter().map(Replica::rest_addr).collect(), true).await?;
    let rest = env.rest.at(&api.http());
    let (_spoke, cluster) = env.spoke(&link.https(), &rest).await?;
    env.online(&cluster).await?;
    let (ns, agents) =
        tenant_with_agents(&env, &rest, &mut cleanup, &cluster, "embedded-openclaw", 2).await?;
    let names: Vec<String> = agents.iter().map(|a| a.name.clone()).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(0));
    let client = tokio::spawn(deploy_loop(
        rest.clone(),
        ns.name.clone(),
        names.clone(),
        stop.clone(),
        rounds.clone(),
    ));
    let round_after = |n: usize| {
        let rounds = rounds.clone();
        async move {
            until(WAIT, "a client round", || async {
                Ok((rounds.load(Ordering::SeqCst) > n).then_some(()))
            })
            .await
        }
    };
    round_after(0).await?;

    let mut restarts = Vec::new();
    for replica in replicas.iter_mut() {
        let began = Instant::now();
        replica.proc.signal("-TERM")?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while replica.proc.alive() {
            ensure!(
                Instant::now() < deadline,
                "{} did not exit after SIGTERM",
                replica.tag
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let exited = began.elapsed();
        // Reaped: nothing left for its drop to signal.
        let _ = replica.proc.kill9();
        let log = replica.log();
        ensure!(log.contains("hub.stopped"), "{} log:\n{log}", replica.tag);
        let tag = format!("{}-2", replica.tag);
        *replica = env
            .serve(&tag, replica.rest_port, replica.link_port)
            .await?;
        restarts.push((tag, exited, began.elapsed()));
        // The client got through after this restart before the next.
        round_after(rounds.load(Ordering::SeqCst)).await?;
    }
    stop.store(true, Ordering::SeqCst);
    let seen = client.await??;

    // Every Agent's latest revision active, every older one at rest.
    let direct = env.rest.at(&replicas[0].rest_url());
    let mut total = 0;
    for name in &names {
        let agent = direct.agent(&ns.name, name).await?;
        ensure!(
            Some(&agent.spec.image) == seen.image.get(name),
            "{name}: the last update the client saw succeed is lost: {} vs {:?}",
            agent.spec.image,
            seen.image.get(name)
        );
        let latest = agent.latest_revision.context("no revision")?;
        let deployed = &seen.deployed[name];
        ensure!(
            deployed.iter().all(|n| *n <= latest),
            "{name}: deploys {deployed:?} beyond the latest revision {latest}"
        );
        direct
            .wait_phase(&ns.name, name, latest, RevisionPhase::Active)
            .await?;
        let settled = until(
            WAIT,
            &format!("{name}'s older revisions at rest"),
            || async {
                let all = direct.revisions(&ns.name, name).await?;
                let at_rest = all.iter().all(|r| {
                    r.number == latest
                        || matches!(r.phase, RevisionPhase::Retired | RevisionPhase::Stopped)
                        || r.phase == RevisionPhase::Failed
                });
                Ok(at_rest.then_some(all))
            },
        )
        .await?;
        let numbers: BTreeSet<i64> = settled.iter().map(|r| r.number).collect();
        for n in deployed {
            ensure!(
                numbers.contains(n),
                "{name}: revision {n}, deployed, is missing"
            );
        }
        let failed: Vec<_> = settled
            .iter()
            .filter(|r| r.phase == RevisionPhase::Failed)
            .map(|r| (r.number, r.reason.clone()))
            .collect();
        ensure!(failed.is_empty(), "{name}: failed revisions {failed:?}");
        total += settled.len();
    }
    until(WAIT, "no work left due", || async {
        let left = unfinished_due_work(env.store()).await?;
        ensure!(left.is_empty(), "work left due: {left:#?}");
        Ok(Some(()))
    })
    .await?;
    let failed = failed_work(env.store()).await?;
    ensure!(failed.is_empty(), "failed work: {failed:?}");
    eprintln!(
        "rolling restart (tag, exit after SIGTERM, back ready): {restarts:?}; client: {} rounds, {} requests, {} retried, {} deploys; {total} revisions, all at rest",
        rounds.load(Ordering::SeqCst),
        seen.requests,
        seen.retries,
        seen.deployed.values().map(Vec::len).sum::<usize>()
    );
    drop(replicas);
    cleanup.run().await
}
