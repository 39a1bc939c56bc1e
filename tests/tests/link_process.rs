//! The real `clawfed-hub` and `clawfed-spoke` binaries as child processes
//! on loopback: enrollment with a CLI-made bootstrap token, delivery,
//! `kill -9` of the spoke mid-stream and of the hub, restarts on the same
//! state, and SIGTERM drains of both; offline by silence for a SIGSTOPped
//! spoke and for one behind a partition (a network namespace this test
//! creates: needs root and iproute2); reconnects after quick hub restarts.
//!
//! The binaries are taken from the target directory this test runs from
//! (`<target>/debug/clawfed-hub`, `.../clawfed-spoke`):
//! `cargo test --workspace --all-targets` builds them; for this target
//! alone run `cargo build -p clawfed-hub -p clawfed-spoke --bins` first.
//!
//! Work is put into the hub's outbox by opening the same SQLite database
//! from this process, the way another hub process would; the running hub's
//! outbox poller picks it up.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use clawfed_hub::model::ConnectionState;
use clawfed_hub::store::{self, LinkStore, SqlStore, Store};
use clawfed_spoke::link::WorkApplier;
use clawfed_spoke::link::ledger::FileLedger;
use clawfed_tests::link::outbox_depth;
use clawfed_tests::netns::Netns;
use clawfed_tests::procs::Proc;
use clawfed_tests::wait_for;

const CLUSTER: &str = "exec-a";

fn bin(name: &str) -> PathBuf {
    // <target>/debug/deps/link_process-<hash> → <target>/debug/<name>
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build it first with `cargo build -p clawfed-hub -p clawfed-spoke --bins` \
         (scripts/test.sh does)",
        path.display()
    );
    path
}

/// Everything a hub process needs; restarts reuse it.
struct Env {
    root: PathBuf,
    logs: PathBuf,
    db_url: String,
    ca_dir: PathBuf,
    /// Where the hub's link listens and spokes dial: loopback, or the
    /// host side of a test network namespace's veth pair.
    link_host: String,
    /// 0 until the first hub binds a free port; fixed across restarts
    /// after that (the spoke's --hub-url does not change).
    link_port: AtomicU16,
}

impl Env {
    fn new(root: &Path) -> Self {
        let logs = root.join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        Self {
            root: root.to_owned(),
            logs,
            db_url: format!("sqlite://{}", root.join("hub.db").display()),
            ca_dir: root.join("ca"),
            link_host: "127.0.0.1".into(),
            link_port: AtomicU16::new(0),
        }
    }

    fn link_url(&self) -> String {
        format!(
            "https://{}:{}",
            self.link_host,
            self.link_port.load(Ordering::Relaxed)
        )
    }

    /// As [`Self::new`], with the link on `host` (its serving certificate
    /// names it).
    fn with_link_host(root: &Path, host: &str) -> Self {
        let env = Self {
            link_host: host.to_owned(),
            ..Self::new(root)
        };
        std::fs::write(
            env.config_file(),
            format!("version: 1\nlink:\n  serverNames: [\"{host}\"]\n"),
        )
        .unwrap();
        env
    }

    fn config_file(&self) -> PathBuf {
        self.root.join("hub.yaml")
    }

    fn hub(&self, args: &[&str]) -> Command {
        self.hub_by(Command::new(bin("clawfed-hub")), args)
    }

    /// As [`Self::hub`], started by `c` (e.g. `faketime -f +10s clawfed-hub`).
    fn hub_by(&self, mut c: Command, args: &[&str]) -> Command {
        c.args(args).env_remove("CLAWFED_CONFIG");
        if self.config_file().exists() {
            c.env("CLAWFED_CONFIG", self.config_file());
        }
        c.env("CLAWFED_DATABASE_URL", &self.db_url)
            .env("CLAWFED_REST_ADDR", "127.0.0.1:0")
            .env("CLAWFED_GRPC_ADDR", "127.0.0.1:0")
            .env("CLAWFED_METRICS_ADDR", "127.0.0.1:0")
            .env(
                "CLAWFED_LINK_ADDR",
                format!(
                    "{}:{}",
                    self.link_host,
                    self.link_port.load(Ordering::Relaxed)
                ),
            )
            .env("CLAWFED_LINK_CA_DIR", &self.ca_dir)
            .env("CLAWFED_TUNNEL_ADDR", "127.0.0.1:0")
            .env("CLAWFED_LINK_HEARTBEAT_SECONDS", "1")
            .env("CLAWFED_LOG", "info");
        c
    }

    /// Runs a hub CLI command to completion (bounded) and returns stdout.
    async fn cli(&self, args: &[&str]) -> String {
        let tag = format!("cli-{}", args.join("-"));
        let mut p = Proc::spawn(&tag, &mut self.hub(args), &self.logs).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = p.try_wait() {
                assert!(
                    status.success(),
                    "clawfed-hub {args:?}: {status}\n{}",
                    p.stderr_text()
                );
                return p.stdout_text();
            }
            assert!(Instant::now() < deadline, "clawfed-hub {args:?} hung");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts `clawfed-hub serve` and waits for its "listening" line.
    async fn serve(&self, n: u32) -> Proc {
        let mut p =
            Proc::spawn(&format!("hub-{n}"), &mut self.hub(&["serve"]), &self.logs).unwrap();
        let listening = p.hub_listening(Duration::from_secs(30)).await.unwrap();
        if self.link_port.load(Ordering::Relaxed) == 0 {
            let port = listening.port("link").unwrap();
            self.link_port.store(port, Ordering::Relaxed);
        }
        assert!(
            listening
                .line()
                .contains(&format!("link={}", self.link_url())),
            "{}",
            listening.line()
        );
        p
    }

    /// Starts `clawfed-spoke` with the ledger applier in `state`.
    fn spoke(&self, n: u32, state: &Path, token_file: Option<&Path>) -> Proc {
        self.spoke_with(n, state, token_file, Command::new(bin("clawfed-spoke")), 1)
    }

    /// As [`Self::spoke`], started by `c` (e.g. `ip netns exec … clawfed-spoke`)
    /// with a reconnect backoff capped at `backoff_max_seconds`.
    fn spoke_with(
        &self,
        n: u32,
        state: &Path,
        token_file: Option<&Path>,
        mut c: Command,
        backoff_max_seconds: u32,
    ) -> Proc {
        c.args(["--hub-url", &self.link_url()])
            .arg("--ca-file")
            .arg(self.root.join("ca.pem"))
            .args(["--cluster-name", CLUSTER])
            .arg("--state-dir")
            .arg(state)
            .args(["--applier", "ledger"])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(["--backoff-max-seconds", &backoff_max_seconds.to_string()])
            .env("CLAWFED_LOG", "info");
        if let Some(f) = token_file {
            c.arg("--bootstrap-token-file").arg(f);
        }
        Proc::spawn(&format!("spoke-{n}"), &mut c, &self.logs).unwrap()
    }
}

async fn state(store: &SqlStore) -> ConnectionState {
    store.get_cluster(CLUSTER).await.unwrap().connection_state
}

/// Generations put per target, in order.
#[derive(Default)]
struct Puts(HashMap<String, Vec<i64>>);

impl Puts {
    async fn put(&mut self, store: &SqlStore, cluster_id: &str, target: &str, generation: i64) {
        store
            .outbox_put(
                cluster_id,
                target,
                "namespace.ensure",
                generation,
                &serde_json::json!({ "target": target, "generation": generation }).to_string(),
            )
            .await
            .unwrap()
            .expect("queued");
        self.0
            .entry(target.to_owned())
            .or_default()
            .push(generation);
    }

    /// Every target applied at its newest generation, each written at most
    /// once per distinct generation put (replays change nothing).
    async fn check(&self, ledger_dir: &Path) {
        let ledger = FileLedger::open(ledger_dir).expect("ledger readable");
        let applied = ledger.applied().await.unwrap();
        for (target, generations) in &self.0 {
            let latest = *generations.iter().max().unwrap();
            assert_eq!(applied.get(target), Some(&latest), "{target}");
            let writes = ledger.writes(target).await;
            assert!(
                (1..=generations.len() as u64).contains(&writes),
                "{target}: written {writes} times for generations {generations:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binaries_resume_after_kill_9_of_either_side_and_drain_on_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::new(tmp.path());
    let mut hub = env.serve(1).await;

    // Enrollment material from the operator CLI, as an operator would.
    let token = env
        .cli(&["cluster", "token", "create", CLUSTER, "--ttl", "10m"])
        .await;
    let token = token.trim();
    assert!(token.starts_with("cfb_"), "{token}");
    let ca = env.cli(&["cluster", "ca"]).await;
    assert!(ca.contains("BEGIN CERTIFICATE"), "{ca}");
    std::fs::write(tmp.path().join("ca.pem"), &ca).unwrap();
    let token_file = tmp.path().join("bootstrap-token");
    std::fs::write(&token_file, token).unwrap();

    let store = store::connect(&env.db_url)
        .await
        .expect("open the hub's DB");
    let spoke_dir = tmp.path().join("spoke");
    let spoke = env.spoke(1, &spoke_dir, Some(&token_file));
    let id = wait_for(Duration::from_secs(30), "exec-a online", || async {
        let c = store.get_cluster(CLUSTER).await.ok()?;
        (c.connection_state == ConnectionState::Online).then_some(c.id)
    })
    .await;

    // --- kill -9 of the spoke while work is in flight -----------------------
    let mut puts = Puts::default();
    let mut killed_at_depth = 0;
    let mut batch = 0;
    let mut spoke = Some(spoke);
    while killed_at_depth == 0 {
        batch += 1;
        assert!(
            batch <= 3,
            "the spoke finished every batch before it could be killed"
        );
        for i in 0..300 {
            puts.put(&store, &id, &format!("ns/b{batch}-{i:03}"), 1)
                .await;
        }
        for i in (0..300).step_by(3) {
            puts.put(&store, &id, &format!("ns/b{batch}-{i:03}"), 2)
                .await;
        }
        let total = outbox_depth(&store, &id).await;
        // Kill once about a third of the batch is acked: the rest is in
        // flight (sent ahead in the window) or still queued.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let d = outbox_depth(&store, &id).await;
            if d == 0 {
                break;
            }
            if d <= total * 2 / 3 {
                spoke.take().unwrap().kill9().unwrap();
                killed_at_depth = d;
                break;
            }
            assert!(Instant::now() < deadline, "no progress on the batch");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    // The ledger the killed spoke left is whole, and never ahead of the hub.
    let at_kill = FileLedger::open(&spoke_dir)
        .expect("ledger intact after kill -9")
        .applied()
        .await
        .unwrap();
    for (target, generation) in &at_kill {
        assert!(puts.0[target].contains(generation), "{target}");
    }
    assert!(outbox_depth(&store, &id).await > 0, "killed mid-stream");
    eprintln!(
        "spoke killed in batch {batch} with {killed_at_depth} items unacked, {} targets applied",
        at_kill.len()
    );
    wait_for(Duration::from_secs(10), "exec-a offline", || async {
        (state(&store).await == ConnectionState::Offline).then_some(())
    })
    .await;

    // Restarted without a token: it keeps its identity and resumes.
    let mut spoke = env.spoke(2, &spoke_dir, None);
    // Its own session first: the outbox can drain and the cluster read
    // online from what the killed spoke's last session settled, and the hub
    // kill below must find this spoke connected (CI once killed the hub
    // before it had dialled, so it connected only once).
    wait_for(
        Duration::from_secs(60),
        "the restarted spoke connected",
        || async { spoke.stderr_text().contains("link.connected").then_some(()) },
    )
    .await;
    wait_for(Duration::from_secs(60), "outbox drained", || async {
        (outbox_depth(&store, &id).await == 0).then_some(())
    })
    .await;
    puts.check(&spoke_dir).await;
    // Online again (on a loaded machine the liveness sweep can mark a
    // session offline between heartbeats; it must come back by itself).
    wait_for(Duration::from_secs(10), "exec-a online again", || async {
        (state(&store).await == ConnectionState::Online).then_some(())
    })
    .await;

    // --- kill -9 of the hub --------------------------------------------------
    // The lost session and every failed dial log one of these.
    let disconnects = |p: &Proc| p.stderr_text().matches("link.disconnected").count();
    let before = disconnects(&spoke);
    hub.kill9().unwrap();
    assert!(spoke.alive(), "the spoke survives losing the hub");
    // Work queued while the hub is down (by another hub process, say).
    for i in 0..20 {
        puts.put(&store, &id, &format!("ns/after-{i:02}"), 1).await;
    }
    wait_for(
        Duration::from_secs(30),
        "the spoke to lose the hub and dial it again",
        || async { (disconnects(&spoke) >= before + 2).then_some(()) },
    )
    .await;
    assert!(spoke.alive(), "the spoke keeps running without the hub");
    let mut hub = env.serve(2).await;
    // The spoke reconnects by itself (backoff) and delivery resumes.
    wait_for(Duration::from_secs(30), "new work acked", || async {
        (outbox_depth(&store, &id).await == 0).then_some(())
    })
    .await;
    wait_for(Duration::from_secs(10), "exec-a online again", || async {
        (state(&store).await == ConnectionState::Online).then_some(())
    })
    .await;
    puts.check(&spoke_dir).await;
    let spoke_log = spoke.stderr_text();
    assert!(
        spoke_log.contains("link.disconnected") && spoke_log.matches("link.connected").count() >= 2,
        "the spoke reconnected on its own:\n{spoke_log}"
    );

    // --- SIGTERM drains both -------------------------------------------------
    let (status, log) = spoke
        .terminate_within(Duration::from_secs(15))
        .await
        .unwrap();
    assert!(status.success(), "spoke exit {status}:\n{log}");
    assert!(
        log.contains("spoke.draining") && log.contains("spoke.stopped"),
        "{log}"
    );
    wait_for(
        Duration::from_secs(10),
        "exec-a offline after the drain",
        || async { (state(&store).await == ConnectionState::Offline).then_some(()) },
    )
    .await;
    let (status, log) = hub.terminate_within(Duration::from_secs(20)).await.unwrap();
    assert!(status.success(), "hub exit {status}:\n{log}");
    assert!(
        log.contains("hub.draining") && log.contains("hub.stopped"),
        "{log}"
    );
    // The token and the spoke's key never reached either side's logs.
    for p in std::fs::read_dir(&env.logs).unwrap() {
        let path = p.unwrap().path();
        if path.extension().is_some_and(|e| e == "err") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(!text.contains(token), "{} logs the token", path.display());
            assert!(
                !text.contains("PRIVATE KEY"),
                "{} logs a key",
                path.display()
            );
        }
    }
}

/// Whether the cluster exists and is online.
async fn online(store: &SqlStore) -> bool {
    store
        .get_cluster(CLUSTER)
        .await
        .is_ok_and(|c| c.connection_state == ConnectionState::Online)
}

/// Whether the hub has the cluster online and the spoke has had its
/// `sessions`-th Welcome (the hub stores "online" just before it sends
/// Welcome, so the store alone can run ahead of the spoke).
async fn welcomed_again(store: &SqlStore, spoke: &Proc, sessions: usize) -> bool {
    online(store).await && spoke.stderr_text().matches("link.connected").count() >= sessions
}

/// The operator's enrollment material for [`CLUSTER`]: the CA the spoke
/// pins (written to `root/ca.pem`) and a bootstrap token file.
async fn enrollment(env: &Env) -> PathBuf {
    let token = env
        .cli(&["cluster", "token", "create", CLUSTER, "--ttl", "10m"])
        .await;
    let ca = env.cli(&["cluster", "ca"]).await;
    std::fs::write(env.root.join("ca.pem"), &ca).unwrap();
    let token_file = env.root.join("bootstrap-token");
    std::fs::write(&token_file, token.trim()).unwrap();
    token_file
}

/// `kill -<signal> <pid>`.
fn signal(p: &mut Proc, signal: &str) {
    let pid = p.pid().expect("running").to_string();
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .expect("kill");
    assert!(sent.success(), "kill -{signal} {pid}");
}

/// The hub's heartbeat in these tests (`CLAWFED_LINK_HEARTBEAT_SECONDS`).
const HEARTBEAT: Duration = Duration::from_secs(1);
/// Polling, the store write and a loaded 2-core machine. Before the
/// silence deadline, the hub noticed only on a heartbeat tick: about three
/// intervals after the last message.
const OFFLINE_MARGIN: Duration = Duration::from_millis(600);

/// Waits for the hub to mark the cluster offline and checks it did so
/// within two heartbeats of the last message it heard (the stored
/// last_seen) and of `since` (when the spoke went silent).
async fn offline_within_two_heartbeats(store: &SqlStore, since: chrono::DateTime<chrono::Utc>) {
    let bound = 2 * HEARTBEAT + OFFLINE_MARGIN;
    let (observed, last_seen) = wait_for(Duration::from_secs(15), "exec-a offline", || async {
        let c = store.get_cluster(CLUSTER).await.ok()?;
        (c.connection_state == ConnectionState::Offline).then(|| (chrono::Utc::now(), c.last_seen))
    })
    .await;
    let last_seen = last_seen.expect("an offline cluster has a last_seen");
    let after_silence = (observed - since).to_std().unwrap_or_default();
    let after_last_message = (observed - last_seen).to_std().unwrap_or_default();
    eprintln!(
        "offline {after_silence:?} after silence, {after_last_message:?} after the last message"
    );
    assert!(
        after_silence <= bound && after_last_message <= bound,
        "offline observed {after_silence:?} after the spoke went silent and \
         {after_last_message:?} after its last message (bound {bound:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_spoke_is_offline_within_two_heartbeats_and_back_after_sigcont() {
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::new(tmp.path());
    let _hub = env.serve(1).await;
    let token_file = enrollment(&env).await;
    let store = store::connect(&env.db_url).await.unwrap();
    let mut spoke = env.spoke(1, &tmp.path().join("spoke"), Some(&token_file));
    wait_for(Duration::from_secs(30), "exec-a online", || async {
        welcomed_again(&store, &spoke, 1).await.then_some(())
    })
    .await;

    // A hung spoke: its socket stays open, nothing is sent or read.
    let stopped = chrono::Utc::now();
    signal(&mut spoke, "STOP");
    offline_within_two_heartbeats(&store, stopped).await;

    signal(&mut spoke, "CONT");
    wait_for(
        Duration::from_secs(15),
        "exec-a online after SIGCONT",
        || async { welcomed_again(&store, &spoke, 2).await.then_some(()) },
    )
    .await;
    assert!(spoke.alive());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_spoke_is_offline_within_two_heartbeats_and_reconnects_when_healed() {
    // Declared first, dropped last: the spoke inside is killed first.
    let netns = Netns::create("p", [198, 18, 250, 1], [198, 18, 250, 2]).unwrap_or_else(|e| {
        panic!("this test needs root and iproute2 to create a network namespace: {e}")
    });
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::with_link_host(tmp.path(), &netns.host_addr);
    let _hub = env.serve(1).await;
    let token_file = enrollment(&env).await;
    let store = store::connect(&env.db_url).await.unwrap();
    let mut spoke = env.spoke_with(
        1,
        &tmp.path().join("spoke"),
        Some(&token_file),
        netns.command(&bin("clawfed-spoke")),
        1,
    );
    wait_for(Duration::from_secs(30), "exec-a online", || async {
        welcomed_again(&store, &spoke, 1).await.then_some(())
    })
    .await;

    // Packets stop crossing; neither side's socket is closed or reset.
    let cut = chrono::Utc::now();
    netns.cut().unwrap();
    offline_within_two_heartbeats(&store, cut).await;
    assert!(spoke.alive(), "the spoke keeps running while partitioned");

    netns.restore().unwrap();
    wait_for(
        Duration::from_secs(20),
        "exec-a online after the partition healed",
        || async { welcomed_again(&store, &spoke, 2).await.then_some(()) },
    )
    .await;
}

/// Each restart's spoke is back (online) within this of the hub listening
/// again. With the backoff kept across short sessions it grew towards its
/// cap (30 s by default) over a few restarts.
const BACK_WITHIN: Duration = Duration::from_secs(3);
const RESTARTS: u32 = 4;
/// Each outage lasts until the spoke has failed this many dials: the
/// restarts are short, but not so short that the spoke's backoff never
/// advances (as with a hub that takes a moment to be rescheduled).
const FAILED_DIALS_PER_OUTAGE: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spoke_is_back_within_seconds_of_each_of_several_quick_hub_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::new(tmp.path());
    let mut hub = env.serve(1).await;
    let token_file = enrollment(&env).await;
    let store = store::connect(&env.db_url).await.unwrap();
    // The spoke's default backoff cap.
    let mut spoke = env.spoke_with(
        1,
        &tmp.path().join("spoke"),
        Some(&token_file),
        Command::new(bin("clawfed-spoke")),
        30,
    );
    wait_for(Duration::from_secs(30), "exec-a online", || async {
        welcomed_again(&store, &spoke, 1).await.then_some(())
    })
    .await;
    // Every lost session and every failed dial logs one of these.
    let disconnects = |p: &Proc| p.stderr_text().matches("link.disconnected").count();
    let mut took = Vec::new();
    for round in 1..=RESTARTS {
        // A crash; the restarted hub marks every cluster offline as it
        // starts, then the spoke has to come back by itself.
        let before = disconnects(&spoke);
        hub.kill9().unwrap();
        wait_for(
            Duration::from_secs(120),
            &format!("{FAILED_DIALS_PER_OUTAGE} failed dials in outage {round}"),
            || async { (disconnects(&spoke) > before + FAILED_DIALS_PER_OUTAGE).then_some(()) },
        )
        .await;
        hub = env.serve(round + 1).await;
        let listening = Instant::now();
        // Back: the hub has it online and the spoke has its Welcome (the
        // hub marks it online just before sending Welcome).
        loop {
            let welcomed = spoke.stderr_text().matches("link.connected").count();
            if online(&store).await && welcomed > round as usize {
                break;
            }
            assert!(
                listening.elapsed() < Duration::from_secs(40),
                "exec-a not back 40 s after restart {round}; spoke log:\n{}\nhub log:\n{}",
                spoke.stderr_text(),
                hub.stderr_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let back = listening.elapsed();
        took.push(back);
        assert!(
            back <= BACK_WITHIN,
            "back {back:?} after restart {round} (bound {BACK_WITHIN:?}); all so far: {took:?}; spoke log:\n{}",
            spoke.stderr_text()
        );
    }
    eprintln!("back after each restart in {took:?}");
    assert!(spoke.alive());
    let log = spoke.stderr_text();
    assert_eq!(
        log.matches("link.connected").count(),
        1 + RESTARTS as usize,
        "{log}"
    );
}

/// The REST address a starting hub bound, from its `hub.listener_bound`
/// log line (JSON): known before the hub serves, or even if it never does.
async fn bound_rest_addr(hub: &Proc) -> String {
    wait_for(
        Duration::from_secs(30),
        "the hub binds its REST port",
        || async {
            hub.stderr_text().lines().find_map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).ok()?;
                (v["message"] == "hub.listener_bound" && v["what"] == "rest")
                    .then(|| v["addr"].as_str().map(str::to_owned))
                    .flatten()
            })
        },
    )
    .await
}

/// Issue 31 item 13: a hub binds every listener before any serves. With its
/// tunnel port still taken (held here, as a previous incarnation's socket
/// would be) it never answers `/healthz` and, after `api.bindRetrySeconds`,
/// exits naming the port; started again while the port is freed within
/// that window, it waits for the port, takes it and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_that_cannot_take_a_port_never_reports_healthy_and_takes_one_freed_in_time() {
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::new(tmp.path());
    std::fs::write(
        env.config_file(),
        "version: 1\napi:\n  bindRetrySeconds: 3\n",
    )
    .unwrap();
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tunnel_addr = held.local_addr().unwrap().to_string();
    let serve = |n: u32| {
        let mut c = env.hub(&["serve"]);
        c.env("CLAWFED_REST_ADDR", "127.0.0.1:0")
            .env("CLAWFED_TUNNEL_ENABLED", "true")
            .env("CLAWFED_TUNNEL_ADDR", &tunnel_addr);
        Proc::spawn(&format!("hub-port-{n}"), &mut c, &env.logs).unwrap()
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let healthy = |rest: String| {
        let http = http.clone();
        async move {
            let healthz = format!("http://{rest}/healthz");
            matches!(http.get(&healthz).send().await, Ok(r) if r.status().is_success())
        }
    };

    let mut hub = serve(1);
    // The REST port it bound (port 0), logged before it tries the tunnel's.
    let rest = bound_rest_addr(&hub).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut answered = 0;
    let status = loop {
        if let Some(status) = hub.try_wait() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the hub neither served nor exited"
        );
        if healthy(rest.clone()).await {
            answered += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stderr = hub.stderr_text();
    assert!(!status.success(), "{stderr}");
    assert_eq!(
        answered, 0,
        "/healthz answered by a hub that could not listen"
    );
    assert!(
        stderr.contains(&tunnel_addr) && stderr.contains("tunnel"),
        "the error names the port: {stderr}"
    );

    let hub = serve(2);
    let rest = bound_rest_addr(&hub).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !healthy(rest.clone()).await,
        "serving before every port is bound"
    );
    drop(held);
    wait_for(
        Duration::from_secs(20),
        "the hub serves once the port frees",
        || async { healthy(rest.clone()).await.then_some(()) },
    )
    .await;
    assert!(
        hub.stderr_text().contains("hub.listen_address_in_use"),
        "the wait is logged: {}",
        hub.stderr_text()
    );
}

/// Issue 31 item 9: a replica whose wall clock runs 10 s ahead (Debian's
/// `faketime`) shares a PostgreSQL store with one whose clock is right. The
/// spoke's session is on the right one; the skewed one sweeps lapsed
/// session leases like every replica. Leases are judged by the database's
/// clock, so the live cluster is never marked offline. It used to be, at
/// every sweep: the skewed replica read the other's lease as expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_clock_runs_ahead_marks_no_live_cluster_offline() {
    let libfaketime = libfaketime();
    let db = clawfed_tests::db::postgres().await;
    let tmp = tempfile::tempdir().unwrap();
    let right = Env {
        db_url: db.url.clone(),
        ..Env::new(tmp.path())
    };
    let ahead = Env {
        db_url: db.url.clone(),
        ca_dir: right.ca_dir.clone(),
        ..Env::new(&tmp.path().join("ahead"))
    };
    let _right_hub = right.serve(1).await;
    let token_file = enrollment(&right).await;
    let store = store::connect(&db.url).await.unwrap();
    let spoke = right.spoke(1, &tmp.path().join("spoke"), Some(&token_file));
    wait_for(Duration::from_secs(30), "exec-a online", || async {
        welcomed_again(&store, &spoke, 1).await.then_some(())
    })
    .await;

    // libfaketime preloaded into the hub itself (not the `faketime`
    // wrapper, whose child would outlive a kill of the wrapper).
    let mut c = Command::new(bin("clawfed-hub"));
    c.env("LD_PRELOAD", &libfaketime).env("FAKETIME", "+10s");
    let mut ahead_hub =
        Proc::spawn("hub-ahead", &mut ahead.hub_by(c, &["serve"]), &ahead.logs).unwrap();
    ahead_hub
        .hub_listening(Duration::from_secs(30))
        .await
        .expect("the skewed replica started");
    // Many sweeps of the skewed replica (one per heartbeat, 1 s here).
    let watch_for = Duration::from_secs(15);
    let until = Instant::now() + watch_for;
    let mut checks = 0;
    while Instant::now() < until {
        let c = store.get_cluster(CLUSTER).await.unwrap();
        assert_eq!(
            c.connection_state,
            ConnectionState::Online,
            "marked offline {:?} into the watch, after {checks} checks; skewed replica:\n{}",
            watch_for - (until - Instant::now()),
            ahead_hub.stderr_text()
        );
        checks += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        spoke.stderr_text().matches("link.connected").count() == 1,
        "the spoke's session was never lost"
    );
    // The skew took effect, and the replica measured it.
    let skewed = ahead_hub.stderr_text();
    let offset = skewed
        .lines()
        .find(|l| l.contains("store.clock_offset"))
        .unwrap_or_else(|| panic!("the skewed replica never measured its offset:\n{skewed}"));
    assert!(offset.contains("\"offsetMs\":-"), "{offset}");
    eprintln!("exec-a stayed online through {checks} checks over {watch_for:?}");
}

/// Debian's libfaketime (package `faketime`, which scripts/test.sh
/// installs): `/usr/lib/<triplet>/faketime/libfaketimeMT.so.1`.
fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.path().join("faketime/libfaketimeMT.so.1"))
        .find(|p| p.exists());
    found.expect("libfaketime is missing: `apt-get install faketime` (scripts/test.sh does)")
}

/// Issue 31 item 14: a hub killed with work claimed (here a namespace's
/// provisioning, claimed by its dead incarnation with a 10-minute lease)
/// takes that work back as it restarts (instance `embedded`, the SQLite
/// default) and runs it at once, instead of waiting for the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_hub_runs_its_dead_incarnations_claimed_work_at_once() {
    use clawfed_hub::store::WorkLane;
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::new(tmp.path());
    env.cli(&["migrate"]).await;
    let store: std::sync::Arc<dyn Store> =
        std::sync::Arc::new(store::connect(&env.db_url).await.unwrap());
    // A namespace and its provisioning, as the hub's API queues them.
    let id = uuid::Uuid::now_v7().to_string();
    let fx = clawfed_hub::store::Effects {
        quotas: Vec::new(),
        audit: clawfed_hub::store::NewAudit {
            actor: "test".into(),
            action: "namespace.create".into(),
            namespace: Some("team".into()),
            target: "namespaces/team".into(),
            result: "ok".into(),
            detail: None,
        },
        work: vec![clawfed_hub::store::NewWork {
            kind: clawfed_hub::worker::kinds::NAMESPACE_PROVISION.into(),
            namespace_id: Some(id.clone()),
            target: id.clone(),
            payload: serde_json::json!({}),
            requested_by: None,
            max_attempts: 8,
            run_at: chrono::Utc::now(),
            coalesce: false,
        }],
    };
    let ns = store
        .create_namespace(
            &clawfed_hub::store::NewNamespace {
                id: id.clone(),
                name: "team".into(),
                display_name: String::new(),
                data_plane_namespace: clawfed_proto::naming::data_plane_namespace(&id),
                adopted: false,
            },
            &fx,
        )
        .await
        .unwrap();
    let claimed = store
        .claim_work(
            "embedded~dead~worker-1",
            10,
            Duration::from_secs(600),
            chrono::Utc::now(),
            &WorkLane::All,
        )
        .await
        .unwrap();
    assert_eq!(
        claimed.len(),
        1,
        "the provisioning, claimed by the dead incarnation"
    );
    let _hub = env.serve(1).await;
    let provisioned = Instant::now();
    wait_for(
        Duration::from_secs(15),
        "the namespace provisioned by the restarted hub",
        || async {
            store
                .get_namespace(&ns.name)
                .await
                .ok()
                .and_then(|n| n.provisioned_at)
        },
    )
    .await;
    eprintln!(
        "provisioned {:?} after the restarted hub listened (its dead incarnation's lease: 600 s)",
        provisioned.elapsed()
    );
}
