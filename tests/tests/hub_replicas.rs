//! Issue 14, parts 2 and 3: several real `clawfed-hub` processes on one
//! real PostgreSQL schema, with real spokes over real mTLS.
//!
//! - Shared trust: replicas with separate (empty) CA directories present
//!   the same CA, so a spoke enrolled through replica A connects to B.
//! - Wake-ups instead of polls: with every safety poll at 10 s, an outbox
//!   item written by another process reaches the spoke held by A, and work
//!   queued through B's API is run by A's worker, each well under 300 ms
//!   (LISTEN/NOTIFY).
//! - A revoke through A closes the stream B holds within 1 s.
//! - Idle database transactions per second of one replica, with the
//!   default safety polls and with 10 s ones (printed; e2e/README.md).
//!
//! The binaries come from this target directory: run
//! `cargo build -p clawfed-hub -p clawfed-spoke --bins` first.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clawfed_hub::store::{LinkStore, SqlStore, Store};
use clawfed_tests::db::TestDb;
use clawfed_tests::link::outbox_depth;
use clawfed_tests::procs::{Proc, bin};
use clawfed_tests::wait_for_every;

const CLUSTER: &str = "exec-a";
/// Every safety poll of the replicas: a delivery faster than this was woken.
const SAFETY_POLL_MS: u64 = 10_000;
/// What "no poll delay" means here.
const WAKE_BOUND: Duration = Duration::from_millis(300);

/// One replica: its process and where it listens.
struct Replica {
    /// Killed when the replica is dropped.
    _proc: Proc,
    rest: String,
    metrics: String,
    link: String,
}

/// Replicas sharing one PostgreSQL schema and one secrets key; each with
/// its own (initially empty) CA directory and link port.
struct Env {
    root: PathBuf,
    logs: PathBuf,
    db_url: String,
    config: PathBuf,
}

impl Env {
    fn new(root: &Path, db_url: &str, safety_poll_ms: u64) -> Self {
        Self::with_polls(root, db_url, Some(safety_poll_ms))
    }

    /// `None`: the safety polls are not set (the defaults on PostgreSQL).
    fn with_polls(root: &Path, db_url: &str, safety_poll_ms: Option<u64>) -> Self {
        let logs = root.join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let config = root.join("hub.yaml");
        let text = match safety_poll_ms {
            Some(ms) => format!(
                "version: 1\nworker:\n  safetyPollMs: {ms}\nlink:\n  safetyPollMs: {ms}\n  serverNames: [\"127.0.0.1\"]\nwatch:\n  safetyPollMs: {ms}\n"
            ),
            None => "version: 1\nlink:\n  serverNames: [\"127.0.0.1\"]\n".to_owned(),
        };
        std::fs::write(&config, text).unwrap();
        Self {
            root: root.to_owned(),
            logs,
            db_url: db_url.to_owned(),
            config,
        }
    }

    fn ca_dir(&self, name: &str) -> PathBuf {
        self.root.join(name).join("ca")
    }

    fn hub(&self, name: &str, link_port: u16, args: &[&str]) -> Command {
        let mut c = Command::new(bin("clawfed-hub").unwrap());
        c.args(args)
            .env("CLAWFED_CONFIG", &self.config)
            .env("CLAWFED_DATABASE_URL", &self.db_url)
            .env("CLAWFED_REST_ADDR", "127.0.0.1:0")
            .env("CLAWFED_GRPC_ADDR", "127.0.0.1:0")
            .env("CLAWFED_METRICS_ADDR", "127.0.0.1:0")
            .env("CLAWFED_LINK_ADDR", format!("127.0.0.1:{link_port}"))
            .env("CLAWFED_LINK_CA_DIR", self.ca_dir(name))
            // One key for all replicas, as secrets.keyFile / keySecret.
            .env("CLAWFED_SECRETS_KEY_FILE", self.root.join("secrets.key"))
            .env("CLAWFED_TUNNEL_ENABLED", "false")
            .env("CLAWFED_LINK_HEARTBEAT_SECONDS", "1")
            .env("CLAWFED_LOG", "info");
        c
    }

    /// Starts replica `name` and waits for its "listening" line.
    async fn serve(&self, name: &str, extra_env: &[(&str, &str)]) -> Replica {
        // Port 0: the link address is read off the "listening" line.
        let mut c = self.hub(name, 0, &["serve"]);
        for (k, v) in extra_env {
            c.env(k, v);
        }
        let mut proc = Proc::spawn(&format!("hub-{name}"), &mut c, &self.logs).unwrap();
        let listening = proc.hub_listening(Duration::from_secs(60)).await.unwrap();
        let field = |key: &str| listening.field(key).unwrap();
        Replica {
            rest: field("rest"),
            metrics: field("metrics"),
            link: field("link"),
            _proc: proc,
        }
    }

    /// Runs a hub CLI command to completion (bounded), successful or not.
    async fn cli_output(&self, args: &[&str]) -> std::process::Output {
        let tag = format!("cli-{}", args.join("-"));
        let mut c = self.hub("cli", 0, args);
        tokio::time::timeout(Duration::from_secs(60), async move {
            tokio::task::spawn_blocking(move || c.output())
                .await
                .unwrap()
        })
        .await
        .unwrap_or_else(|_| panic!("{tag} hung"))
        .unwrap()
    }

    /// Runs a hub CLI command to completion (bounded); its stdout.
    async fn cli(&self, args: &[&str]) -> String {
        let tag = format!("cli-{}", args.join("-"));
        let out = self.cli_output(args).await;
        assert!(
            out.status.success(),
            "{tag}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Starts the spoke (ledger applier) against `hub_link`.
    fn spoke(&self, n: u32, hub_link: &str, token_file: Option<&Path>) -> Proc {
        let mut c = Command::new(bin("clawfed-spoke").unwrap());
        c.args(["--hub-url", hub_link])
            .arg("--ca-file")
            .arg(self.root.join("ca.pem"))
            .args(["--cluster-name", CLUSTER])
            .arg("--state-dir")
            .arg(self.root.join("spoke"))
            .args(["--applier", "ledger"])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(["--backoff-max-seconds", "1"])
            .env("CLAWFED_LOG", "info");
        if let Some(f) = token_file {
            c.arg("--bootstrap-token-file").arg(f);
        }
        Proc::spawn(&format!("spoke-{n}"), &mut c, &self.logs).unwrap()
    }

    /// The CA from the operator CLI (the store's), pinned by the spoke, and
    /// a bootstrap token for `CLUSTER` in a file.
    async fn enrollment(&self) -> (String, PathBuf) {
        let ca = self.cli(&["cluster", "ca"]).await;
        assert!(ca.contains("BEGIN CERTIFICATE"), "{ca}");
        std::fs::write(self.root.join("ca.pem"), &ca).unwrap();
        let token = self
            .cli(&["cluster", "token", "create", CLUSTER, "--ttl", "10m"])
            .await;
        let token_file = self.root.join("bootstrap-token");
        std::fs::write(&token_file, token.trim()).unwrap();
        (ca, token_file)
    }

    /// An installation-admin API token.
    async fn admin_token(&self) -> String {
        self.cli(&[
            "token",
            "create",
            "--name",
            "ops",
            "--role",
            "installation-admin",
        ])
        .await
        .trim()
        .to_owned()
    }
}

fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// `occ_link_connected_spokes` of a replica.
async fn connected_spokes(http: &reqwest::Client, replica: &Replica) -> Option<i64> {
    metric(http, replica, "occ_link_connected_spokes").await
}

async fn wait_connected(http: &reqwest::Client, replica: &Replica, n: i64, what: &str) {
    wait_for(Duration::from_secs(30), what, || async {
        (connected_spokes(http, replica).await == Some(n)).then_some(())
    })
    .await;
}

async fn open_store(db: &TestDb) -> SqlStore {
    clawfed_hub::store::connect(&db.url)
        .await
        .expect("open the replicas' database")
}

async fn cluster_id(store: &SqlStore) -> String {
    store.get_cluster(CLUSTER).await.unwrap().id
}

/// Two replicas without a shared CA directory present one CA (the
/// store's): the spoke enrolled through A reconnects to B with the same
/// pinned CA and certificate. Then outbox work written by another process
/// reaches the spoke on B with no poll delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_the_ca_and_wake_the_session_holder_at_once() {
    let db = clawfed_tests::db::postgres().await;
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::new(tmp.path(), &db.url, SAFETY_POLL_MS);
    let a = env.serve("a", &[]).await;
    let b = env.serve("b", &[]).await;
    let http = http_client();

    // Same CA everywhere: the CLI's (from the store) and what each replica
    // exported into its own, separate CA directory; neither holds a key.
    let (ca, token_file) = env.enrollment().await;
    for name in ["a", "b"] {
        let dir = env.ca_dir(name);
        assert_eq!(
            std::fs::read_to_string(dir.join("ca.crt")).unwrap(),
            ca,
            "replica {name} presents another CA"
        );
        assert!(!dir.join("ca.key").exists(), "replica {name} wrote the key");
    }

    // Enrolled through A ...
    let mut spoke = env.spoke(1, &a.link, Some(&token_file));
    wait_connected(&http, &a, 1, "the spoke on A").await;
    spoke.kill9().unwrap();
    wait_connected(&http, &a, 0, "A to notice the spoke gone").await;
    // ... connects to B with the same CA and its certificate from A.
    let _spoke = env.spoke(2, &b.link, None);
    wait_connected(&http, &b, 1, "the spoke enrolled via A on B").await;
    assert_eq!(connected_spokes(&http, &a).await, Some(0));

    // Work written by another process (as replica A's link writes it)
    // reaches the spoke held by B at once, not on B's 10 s safety poll.
    let store = open_store(&db).await;
    let id = cluster_id(&store).await;
    let mut took = Vec::new();
    // Item 0 warms the path (first ledger write); items 1..=7 are measured.
    for i in 0..=7 {
        let target = format!("ns/wake-{i}");
        let spec = serde_json::json!({ "target": target, "generation": 1 });
        let put = Instant::now();
        store
            .outbox_put(&id, &target, "namespace.ensure", 1, &spec.to_string())
            .await
            .unwrap()
            .expect("queued");
        wait_for(Duration::from_secs(30), "the ack", || {
            let (store, id) = (&store, &id);
            async move { (outbox_depth(store, id).await == 0).then_some(()) }
        })
        .await;
        if i > 0 {
            took.push(put.elapsed());
        }
    }
    took.sort();
    println!("outbox put by another process -> sent by replica b, applied and acked: {took:?}");
    // Every delivery is far below the 10 s safety poll (woken, not
    // polled); the typical one is within the wake bound even on a loaded
    // 2-core machine.
    let (median, worst) = (took[took.len() / 2], took[took.len() - 1]);
    assert!(
        median < WAKE_BOUND,
        "outbox writes took {took:?} (median {median:?}) to reach the spoke on the other replica (safety poll {SAFETY_POLL_MS} ms)"
    );
    assert!(worst < Duration::from_secs(1), "{took:?}");
    drop(a);
    drop(b);
}

/// Work queued through B's API (a namespace to provision) is run by A's
/// worker (B runs none) at once, not on A's 10 s safety poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_queued_through_one_replica_wakes_the_worker_of_another() {
    let db = clawfed_tests::db::postgres().await;
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::new(tmp.path(), &db.url, SAFETY_POLL_MS);
    let _a = env.serve("a", &[]).await;
    let b = env.serve("b", &[("CLAWFED_WORKER_ENABLED", "false")]).await;
    let token = env.admin_token().await;
    let http = http_client();
    let mut took = Vec::new();
    for i in 0..7 {
        let name = format!("team-{i}");
        let queued = Instant::now();
        let created = http
            .post(format!("{}/api/v1/namespaces", b.rest))
            .bearer_auth(&token)
            .json(&serde_json::json!({ "name": name }))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
        wait_for(Duration::from_secs(30), "the namespace provisioned", || {
            let (http, token, url) = (
                &http,
                &token,
                format!("{}/api/v1/namespaces/{name}", b.rest),
            );
            async move {
                let ns: serde_json::Value = http
                    .get(url)
                    .bearer_auth(token)
                    .send()
                    .await
                    .ok()?
                    .json()
                    .await
                    .ok()?;
                ns.get("provisionedAt").filter(|v| !v.is_null()).map(|_| ())
            }
        })
        .await;
        took.push(queued.elapsed());
    }
    took.sort();
    println!("namespace queued through replica b -> provisioned by replica a's worker: {took:?}");
    let (median, worst) = (took[took.len() / 2], took[took.len() - 1]);
    assert!(
        median < WAKE_BOUND,
        "work queued on B took {took:?} (median {median:?}) to run on A (safety poll {SAFETY_POLL_MS} ms)"
    );
    assert!(worst < Duration::from_secs(1), "{took:?}");
}

/// A revoke through A's API closes the stream B holds within 1 s (B's
/// safety poll is 10 s), and the spoke cannot come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_through_one_replica_closes_the_stream_on_another_within_1s() {
    let db = clawfed_tests::db::postgres().await;
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::new(tmp.path(), &db.url, SAFETY_POLL_MS);
    let a = env.serve("a", &[]).await;
    let b = env.serve("b", &[]).await;
    let http = http_client();
    let (_, token_file) = env.enrollment().await;
    let token = env.admin_token().await;
    let spoke = env.spoke(1, &b.link, Some(&token_file));
    wait_connected(&http, &b, 1, "the spoke on B").await;

    let revoked = http
        .post(format!("{}/api/v1/clusters/{CLUSTER}/revoke", a.rest))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    let at = Instant::now();
    assert_eq!(revoked.status(), 200, "{}", revoked.text().await.unwrap());
    wait_connected(&http, &b, 0, "B to close the revoked stream").await;
    let took = at.elapsed();
    println!("revoke on replica a -> stream closed on replica b: {took:?}");
    assert!(
        took < Duration::from_secs(1),
        "B closed the revoked stream after {took:?}"
    );
    // B said why: the spoke stops for good, as revoked.
    let mut spoke = spoke;
    wait_for(
        Duration::from_secs(30),
        "the spoke to stop as revoked",
        || {
            let stopped = !spoke.alive();
            async move { stopped.then_some(()) }
        },
    )
    .await;
    assert!(
        Proc::text(&spoke.stderr).contains("link.revoked"),
        "{}",
        Proc::text(&spoke.stderr)
    );
    // Started again against B, it is refused (B's deny-list and store).
    let mut again = env.spoke(2, &b.link, None);
    wait_for(
        Duration::from_secs(30),
        "the restarted spoke refused",
        || {
            let stopped = !again.alive();
            async move { stopped.then_some(()) }
        },
    )
    .await;
    assert!(
        Proc::text(&again.stderr).contains("link.revoked"),
        "{}",
        Proc::text(&again.stderr)
    );
    assert_eq!(connected_spokes(&http, &b).await, Some(0));
    assert_eq!(connected_spokes(&http, &a).await, Some(0));
}

/// Issue 31 item 2: a revocation committed by a revoker whose clock is an
/// hour behind (its `revoked_at` far older than any time window) still
/// closes the cluster's live stream: revocations are paged by their commit
/// sequence. (Paged by `revoked_at >= last check - 2 s`, it was never seen.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_stamped_by_a_clock_an_hour_behind_still_closes_the_stream() {
    let db = clawfed_tests::db::postgres().await;
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::new(tmp.path(), &db.url, SAFETY_POLL_MS);
    let a = env.serve("a", &[]).await;
    let http = http_client();
    let (_, token_file) = env.enrollment().await;
    let _spoke = env.spoke(1, &a.link, Some(&token_file));
    wait_connected(&http, &a, 1, "the spoke on A").await;

    // The revoker: another process on the same database, its clock behind.
    let store = clawfed_hub::store::connect(&db.url).await.unwrap();
    let behind = chrono::Utc::now() - chrono::Duration::hours(1);
    clawfed_hub::store::LinkStore::revoke_cluster(
        &store,
        CLUSTER,
        behind,
        &clawfed_hub::store::Effects::audit(clawfed_hub::store::NewAudit {
            actor: "system:test".into(),
            action: "cluster.revoke".into(),
            namespace: None,
            target: format!("clusters/{CLUSTER}"),
            result: "ok".into(),
            detail: None,
        }),
    )
    .await
    .unwrap();
    let at = Instant::now();
    // Within A's safety poll at the latest.
    wait_connected(&http, &a, 0, "A to close the revoked stream").await;
    println!(
        "revoked with a clock an hour behind -> stream closed in {:?}",
        at.elapsed()
    );
}

/// A counter or gauge line of a replica's metrics, by its full name.
async fn metric(http: &reqwest::Client, replica: &Replica, name: &str) -> Option<i64> {
    let body = http
        .get(&replica.metrics)
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as i64)
}

/// The backend pids holding a LISTEN connection on database `name`.
async fn listen_pids(admin: &mut sqlx::PgConnection, name: &str) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN %' ORDER BY pid",
    )
    .bind(name.to_owned())
    .fetch_all(admin)
    .await
    .unwrap()
}

/// Polls the LISTEN backends of database `name` until `check` is satisfied.
async fn wait_listen<T>(
    admin: &mut sqlx::PgConnection,
    name: &str,
    what: &str,
    check: impl Fn(&[i32]) -> Option<T>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = check(&listen_pids(admin, name).await) {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A real fault on the LISTEN connection: its backend is terminated
/// (`pg_terminate_backend`). Replica A reconnects on its own (a new
/// backend LISTENs) and wake-ups work again: work queued through B's API
/// still runs on A's worker at once, under a 10 s safety poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_listen_connection_is_reestablished_and_wakes_again() {
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect(&clawfed_tests::db::postgres_url())
        .await
        .unwrap();
    // A database of its own, so the LISTEN backends here are A's and B's.
    let db = OwnDatabase::create(&mut admin).await;
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::new(tmp.path(), &db.url, SAFETY_POLL_MS);
    env.cli(&["migrate"]).await;
    let a = env.serve("a", &[]).await;
    let a_listen = wait_listen(&mut admin, &db.name, "A's LISTEN backend", |pids| {
        (pids.len() == 1).then(|| pids[0])
    })
    .await;
    let b = env.serve("b", &[("CLAWFED_WORKER_ENABLED", "false")]).await;
    let token = env.admin_token().await;
    let http = http_client();

    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(a_listen)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert!(killed, "terminate A's LISTEN backend");
    wait_listen(&mut admin, &db.name, "A to LISTEN again", |pids| {
        // B's and a new one of A's.
        (pids.len() == 2 && !pids.contains(&a_listen)).then_some(())
    })
    .await;
    // The log line may trail the new LISTEN by a moment (stderr is read
    // by another thread): give it a bounded while.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = Proc::text(&a._proc.stderr);
        if log.contains("store.listen_lost")
            || log.contains("store.listen_reconnected")
            || std::time::Instant::now() > deadline
        {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        log.contains("store.listen_lost") || log.contains("store.listen_reconnected"),
        "A did not notice the lost LISTEN connection:\n{log}"
    );

    let mut took = Vec::new();
    for i in 0..5 {
        let name = format!("after-{i}");
        let queued = Instant::now();
        let created = http
            .post(format!("{}/api/v1/namespaces", b.rest))
            .bearer_auth(&token)
            .json(&serde_json::json!({ "name": name }))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
        wait_for(Duration::from_secs(30), "the namespace provisioned", || {
            let (http, token, url) = (
                &http,
                &token,
                format!("{}/api/v1/namespaces/{name}", b.rest),
            );
            async move {
                let ns: serde_json::Value = http
                    .get(url)
                    .bearer_auth(token)
                    .send()
                    .await
                    .ok()?
                    .json()
                    .await
                    .ok()?;
                ns.get("provisionedAt").filter(|v| !v.is_null()).map(|_| ())
            }
        })
        .await;
        took.push(queued.elapsed());
    }
    took.sort();
    println!("after the LISTEN backend was killed: queued on b -> provisioned by a: {took:?}");
    assert!(
        took[took.len() / 2] < WAKE_BOUND && took[took.len() - 1] < Duration::from_secs(1),
        "wake-ups after the reconnect took {took:?} (safety poll {SAFETY_POLL_MS} ms)"
    );
    drop(a);
    drop(b);
    db.drop_now(&mut admin).await;
}

/// Committed plus rolled-back transactions of database `name` so far.
async fn transactions(admin: &mut sqlx::PgConnection, name: &str) -> i64 {
    use sqlx::Row;
    sqlx::query(
        "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = $1",
    )
    .bind(name.to_owned())
    .fetch_one(admin)
    .await
    .unwrap()
    .get::<i64, _>(0)
}

/// A database of its own on the test server (`pg_stat_database` counts
/// per database), dropped when the test ends.
struct OwnDatabase {
    name: String,
    url: String,
}

impl OwnDatabase {
    async fn create(admin: &mut sqlx::PgConnection) -> Self {
        let base = clawfed_tests::db::postgres_url();
        let name = format!("clawfed_idle_{}", uuid::Uuid::new_v4().simple());
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut *admin)
            .await
            .expect("create a measurement database (the test role needs CREATEDB)");
        let (prefix, rest) = base.rsplit_once('/').unwrap();
        let query = rest.split_once('?').map(|(_, q)| format!("?{q}"));
        let url = format!("{prefix}/{name}{}", query.unwrap_or_default());
        Self { name, url }
    }

    async fn drop_now(self, admin: &mut sqlx::PgConnection) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE {} WITH (FORCE)",
            self.name
        )))
        .execute(admin)
        .await
        .unwrap();
    }
}

/// Idle database load of one replica (no spokes, no API calls), with the
/// default 2 s safety polls (the polling the hub relied on before
/// LISTEN/NOTIFY) and with 10 s and 30 s ones, which wake-ups make safe
/// (the tests above deliver in well under 300 ms with 10 s): committed plus
/// rolled-back transactions per second of each replica's own database,
/// from `pg_stat_database`, minus those of a database with the same schema
/// and no hub (autovacuum and the like), all over the same window. The
/// window starts after the 10 s in which idle backends may still report
/// their start-up transactions. The figures go to e2e/README.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_database_load_per_replica() {
    use sqlx::Connection;
    let window = Duration::from_secs(30);
    // The last: nothing set, the defaults (30 s on PostgreSQL).
    let polls_ms = [Some(2_000), Some(SAFETY_POLL_MS), Some(30_000), None];
    let mut admin = sqlx::PgConnection::connect(&clawfed_tests::db::postgres_url())
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // The baseline gets the schema only (a CLI run), no hub.
    let baseline = OwnDatabase::create(&mut admin).await;
    Env::new(&tmp.path().join("baseline"), &baseline.url, 2_000)
        .cli(&["migrate"])
        .await;
    let mut dbs = vec![baseline];
    let mut hubs = Vec::new();
    for poll_ms in polls_ms {
        let db = OwnDatabase::create(&mut admin).await;
        let name = poll_ms.map_or("defaults".to_owned(), |ms| ms.to_string());
        let env = Env::with_polls(&tmp.path().join(&name), &db.url, poll_ms);
        env.cli(&["migrate"]).await;
        // The defaults include the heartbeat (10 s): the session keeper's
        // lapsed-lease sweep runs every half heartbeat whatever the polls,
        // 2/s at the 1 s these tests use elsewhere.
        let heartbeat: &[(&str, &str)] = match poll_ms {
            Some(_) => &[],
            None => &[("CLAWFED_LINK_HEARTBEAT_SECONDS", "10")],
        };
        hubs.push(env.serve(&name, heartbeat).await);
        dbs.push(db);
    }
    // Not synchronization: start-up transactions are reported by idle
    // backends up to 10 s late (PGSTAT_IDLE_INTERVAL), and must not fall
    // into the window.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let mut before = Vec::new();
    for db in &dbs {
        before.push(transactions(&mut admin, &db.name).await);
    }
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let mut rates = Vec::new();
    for (db, before) in dbs.iter().zip(before) {
        let after = transactions(&mut admin, &db.name).await;
        rates.push((after - before) as f64 / started.elapsed().as_secs_f64());
    }
    drop(hubs);
    for db in dbs {
        db.drop_now(&mut admin).await;
    }
    let background = rates[0];
    let per_replica: Vec<f64> = rates[1..].iter().map(|r| r - background).collect();
    for (poll_ms, rate) in polls_ms.iter().zip(&per_replica) {
        let polls = poll_ms.map_or("the defaults".to_owned(), |ms| format!("{} s", ms / 1000));
        println!(
            "idle database transactions/s per replica, safety polls {polls}: {rate:.2} (over {window:?}, background {background:.2}/s subtracted)"
        );
    }
    assert!(
        per_replica[..3].windows(2).all(|w| w[1] < w[0]),
        "longer safety polls must lower the idle load: {per_replica:?}"
    );
    // The rate itself (issue 14's goal: at most 1/s at the defaults) is a
    // benchmark's verdict, `idle-bench --postgres`, not a test's: a shared
    // machine's noise moved it across any bound the suite kept.
}

/// Issue 14 (open behaviour of the last stop): a replica whose lease
/// renewals stall past the lease (here its renewal waits 3 s on a table
/// lock, as behind a slow database) has its cluster marked offline by
/// another replica's sweep, although its session lives on. Once the
/// renewal goes through, the replica marks the cluster online again at
/// once; it used to stay offline until the session's next last-seen write,
/// 30 s after the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_renewals_stalled_marks_its_clusters_online_again() {
    use clawfed_hub::model::ConnectionState;
    use sqlx::Connection;
    let db = clawfed_tests::db::postgres().await;
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::new(tmp.path(), &db.url, SAFETY_POLL_MS);
    let a = env.serve("a", &[]).await;
    let _b = env.serve("b", &[]).await;
    let http = http_client();
    let (_ca, token_file) = env.enrollment().await;
    let _spoke = env.spoke(1, &a.link, Some(&token_file));
    wait_connected(&http, &a, 1, "the spoke on A").await;
    let store = open_store(&db).await;
    let state_is = |want: ConnectionState| {
        let store = &store;
        move || async move {
            (store.get_cluster(CLUSTER).await.unwrap().connection_state == want).then_some(())
        }
    };
    wait_for(
        Duration::from_secs(10),
        "online",
        state_is(ConnectionState::Online),
    )
    .await;

    // A's renewal UPDATE waits on the lock; B's sweep only reads the table.
    let mut lock = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE cluster_sessions IN EXCLUSIVE MODE")
        .execute(&mut lock)
        .await
        .unwrap();
    // Lease 1.5 s (heartbeat 1 s), swept every 0.5 s by B.
    wait_for(
        Duration::from_secs(10),
        "B's sweep to mark the cluster offline",
        state_is(ConnectionState::Offline),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let released = Instant::now();
    sqlx::raw_sql("ROLLBACK").execute(&mut lock).await.unwrap();
    wait_for(
        Duration::from_secs(10),
        "A to mark its cluster online again",
        state_is(ConnectionState::Online),
    )
    .await;
    let took = released.elapsed();
    println!("renewal stall released -> cluster online again: {took:?}");
    assert!(
        took < Duration::from_secs(3),
        "online again {took:?} after the stall (the session's last-seen write is 30 s apart)"
    );
    // The session never moved, and it stays online (its lease is fresh).
    assert_eq!(connected_spokes(&http, &a).await, Some(1));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        store.get_cluster(CLUSTER).await.unwrap().connection_state,
        ConnectionState::Online
    );
}

/// Issue 14 (open behaviour of the last stop): the secrets key that sealed
/// the shared link CA is lost. Every command that needs the CA fails and
/// names the way out; `cluster ca reset` replaces the CA, refused without
/// its confirmation and while the stored CA still opens. A spoke that pins
/// the new CA enrolls and connects to a replica started afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_secrets_key_is_recovered_with_a_ca_reset() {
    let db = clawfed_tests::db::postgres().await;
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::new(tmp.path(), &db.url, SAFETY_POLL_MS);
    let stderr = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let reset = ["cluster", "ca", "reset", "--every-spoke-reenrolls"];
    let (old_ca, _) = env.enrollment().await;

    let out = env.cli_output(&reset).await;
    assert!(!out.status.success(), "a reset of a CA that opens");
    assert!(
        stderr(&out).contains("nothing to recover"),
        "{}",
        stderr(&out)
    );
    assert_eq!(env.cli(&["cluster", "ca"]).await, old_ca, "unchanged");

    // The key is lost: the next command makes a new one, which does not
    // open the stored CA.
    std::fs::remove_file(tmp.path().join("secrets.key")).unwrap();
    let out = env.cli_output(&["cluster", "ca"]).await;
    assert!(!out.status.success(), "the CA opened with another key");
    assert!(
        stderr(&out).contains("cluster ca reset"),
        "{}",
        stderr(&out)
    );
    let out = env.cli_output(&["cluster", "ca", "reset"]).await;
    assert!(!out.status.success(), "a reset without its confirmation");
    assert!(
        stderr(&out).contains("--every-spoke-reenrolls"),
        "{}",
        stderr(&out)
    );

    let new_ca = env.cli(&reset).await;
    assert!(new_ca.contains("BEGIN CERTIFICATE"), "{new_ca}");
    assert_ne!(new_ca, old_ca);
    // Readable again, and the same for every later command and replica.
    let (pinned, token_file) = env.enrollment().await;
    assert_eq!(pinned, new_ca);
    let a = env.serve("a", &[]).await;
    let http = http_client();
    let _spoke = env.spoke(1, &a.link, Some(&token_file));
    wait_connected(&http, &a, 1, "the spoke pinning the new CA").await;
}

/// Polls every 5 ms: the figures measured here end with the poll.
async fn wait_for<T, F, Fut>(within: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    wait_for_every(within, Duration::from_millis(5), what, check).await
}
