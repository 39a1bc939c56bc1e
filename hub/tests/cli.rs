//! The `clawfed` and `clawfed-hub` binaries end to end: a real
//! `clawfed-hub serve` child process on a SQLite file in a temp dir, a token
//! minted with `clawfed-hub token create`, and `clawfed` driving it.
//!
//! Every child gets a cleared environment, so a developer's `CLAWFED_*`
//! variables cannot leak into the test.

use std::io::{BufRead, BufReader, Read};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

const CLAWFED: &str = env!("CARGO_BIN_EXE_clawfed");
const CLAWFED_HUB: &str = env!("CARGO_BIN_EXE_clawfed-hub");

/// Upper bound of every wait; generous for a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(30);

/// A temp dir holding the hub's SQLite database (and link CA).
struct Database {
    url: String,
    dir: tempfile::TempDir,
}

impl Database {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("hub.db").display());
        Self { url, dir }
    }

    /// `clawfed-hub ARGS` over this database, on ephemeral loopback ports.
    fn hub_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(CLAWFED_HUB);
        cmd.env_clear()
            .env("CLAWFED_DATABASE_URL", &self.url)
            .env("CLAWFED_REST_ADDR", "127.0.0.1:0")
            .env("CLAWFED_GRPC_ADDR", "127.0.0.1:0")
            .env("CLAWFED_METRICS_ADDR", "127.0.0.1:0")
            // The spoke link's listener and CA (unknown variables are ignored).
            .env("CLAWFED_LINK_ADDR", "127.0.0.1:0")
            .env("CLAWFED_TUNNEL_ADDR", "127.0.0.1:0")
            // No spoke in these tests: keep deploys in the store only.
            .env("CLAWFED_PIPELINE_ENABLED", "false")
            .env("CLAWFED_LINK_CA_DIR", self.dir.path().join("ca"))
            .args(args);
        cmd
    }

    /// Runs `clawfed-hub ARGS` to completion.
    fn hub(&self, args: &[&str]) -> Output {
        self.hub_command(args).output().expect("run clawfed-hub")
    }

    /// `clawfed-hub token create`; returns the printed secret.
    fn create_token(&self, name: &str, role: &str, namespace: Option<&str>) -> String {
        let mut args = vec!["token", "create", "--name", name, "--role", role];
        if let Some(ns) = namespace {
            args.extend(["--namespace", ns]);
        }
        let secret = stdout_of(&self.hub(&args)).trim().to_owned();
        assert!(secret.starts_with("cfd_"), "not a token: {secret:?}");
        secret
    }
}

/// A running `clawfed-hub serve`.
struct HubProcess {
    child: Child,
    /// `http://127.0.0.1:PORT`, read from the hub's stdout.
    rest: String,
    /// The root (installation-admin) token.
    token: String,
    stderr: Option<JoinHandle<String>>,
    /// Shared so a restarted hub can serve the same database.
    db: Arc<Database>,
}

impl HubProcess {
    /// Mints a root token, then starts the hub and waits until it listens.
    fn start() -> Self {
        let db = Arc::new(Database::new());
        let token = db.create_token("root", "installation-admin", None);
        Self::serve(db, token, "127.0.0.1:0")
    }

    /// Starts `clawfed-hub serve` over `db` with REST on `rest_addr` and
    /// waits until it listens; `token` is its root token.
    fn serve(db: Arc<Database>, token: String, rest_addr: &str) -> Self {
        let mut child = db
            .hub_command(&["serve"])
            .env("CLAWFED_REST_ADDR", rest_addr)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn clawfed-hub serve");
        let mut stderr_pipe = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr_pipe.read_to_string(&mut text);
            text
        });
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let line = match rx.recv_timeout(WAIT) {
            Ok(line) => line,
            Err(e) => {
                let _ = child.kill();
                let status = child.wait();
                let stderr = stderr.join().unwrap_or_default();
                panic!("clawfed-hub serve printed no address ({e}; {status:?}):\n{stderr}");
            }
        };
        let rest = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("rest="))
            .unwrap_or_else(|| panic!("no rest= in {line:?}"))
            .to_owned();
        assert!(rest.starts_with("http://127.0.0.1:"), "{line}");
        Self {
            child,
            rest,
            token,
            stderr: Some(stderr),
            db,
        }
    }

    /// `clawfed ARGS` against this hub with the root token.
    fn clawfed(&self, args: &[&str]) -> Output {
        self.clawfed_as(&self.token, args)
    }

    /// `clawfed ARGS` against this hub with `token`.
    fn clawfed_as(&self, token: &str, args: &[&str]) -> Output {
        Command::new(CLAWFED)
            .env_clear()
            .env("CLAWFED_SERVER", &self.rest)
            .env("CLAWFED_TOKEN", token)
            .args(args)
            .output()
            .expect("run clawfed")
    }

    /// `clawfed ARGS -o json`, which must succeed.
    fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        let out = stdout_of(&self.clawfed(&args));
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }

    /// `clawfed ARGS -o yaml`, which must succeed.
    fn yaml(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.extend(["-o", "yaml"]);
        let out = stdout_of(&self.clawfed(&args));
        serde_yaml_ng::from_str(&out).unwrap_or_else(|e| panic!("not YAML ({e}): {out}"))
    }

    /// Sends SIGTERM and waits (bounded) for the exit; returns its status
    /// and everything the hub wrote to stderr.
    fn terminate(mut self) -> (ExitStatus, String) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(10);
        let exit = loop {
            if let Some(exit) = self.child.try_wait().expect("wait for the hub") {
                break exit;
            }
            assert!(
                Instant::now() < deadline,
                "clawfed-hub did not exit within 10s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let stderr = self.stderr.take().expect("stderr reader").join().unwrap();
        (exit, stderr)
    }
}

impl Drop for HubProcess {
    fn drop(&mut self) {
        // Only our own child, by handle.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The stdout of a command that must have succeeded.
fn stdout_of(out: &Output) -> String {
    assert!(
        out.status.success(),
        "command failed ({}): stdout {:?} stderr {:?}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The stderr of a command that must have failed with `code`.
fn failure(out: &Output, code: i32) -> String {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout {:?} stderr {:?}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stderr)
}

/// The header and rows of a table, split on runs of two or more spaces.
fn table(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .map(|line| {
            line.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn clawfed_drives_a_real_hub() {
    let hub = HubProcess::start();

    // Namespaces: create (table), wait for provisioning, list, get.
    let out =
        stdout_of(&hub.clawfed(&["namespaces", "create", "team-a", "--display-name", "Team A"]));
    let rows = table(&out);
    assert_eq!(
        rows[0],
        [
            "NAME",
            "STATE",
            "DATA-PLANE NAMESPACE",
            "ADOPTED",
            "CLUSTERS",
            "AGE"
        ]
    );
    assert_eq!(rows.len(), 2, "{out}");
    assert_eq!(rows[1][0], "team-a");
    let ns = eventually("team-a to be provisioned", || {
        let ns = hub.json(&["namespaces", "get", "team-a"]);
        (ns["state"] == "active").then_some(ns)
    });
    assert!(ns["provisionedAt"].is_string(), "{ns}");

    let rows = table(&stdout_of(&hub.clawfed(&["ns", "list"])));
    assert_eq!(rows[0][0], "NAME");
    assert_eq!(rows[1][..2], ["team-a", "active"]);
    let listed = hub.json(&["namespaces", "list"]);
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    assert_eq!(listed["items"][0]["id"], ns["id"]);
    let got = hub.yaml(&["namespaces", "get", "team-a"]);
    assert_eq!(got["displayName"], "Team A");
    assert_eq!(got["dataPlaneNamespace"], ns["dataPlaneNamespace"]);

    // Agents: create, update (flags override the current draft), get.
    let created = hub.json(&[
        "agents",
        "create",
        "helper",
        "-n",
        "team-a",
        "--image",
        "ghcr.io/example/helper:1.0",
        "--requirement-label",
        "tier=gold",
        "--plugin",
        "web",
    ]);
    assert_eq!(created["spec"]["image"], "ghcr.io/example/helper:1.0");
    assert_eq!(created["spec"]["harnessKind"], "embedded-openclaw");
    let updated = hub.json(&[
        "agents",
        "update",
        "helper",
        "-n",
        "team-a",
        "--image",
        "ghcr.io/example/helper:1.1",
        "--cpu-request",
        "100m",
        "--failover-after",
        "30",
    ]);
    assert_eq!(updated["spec"]["image"], "ghcr.io/example/helper:1.1");
    assert_eq!(updated["spec"]["failover"]["afterSeconds"], 30);
    assert_eq!(updated["spec"]["requirementLabels"]["tier"], "gold");
    assert_eq!(updated["spec"]["plugins"][0], "web");
    assert_eq!(updated["spec"]["resources"]["cpuRequest"], "100m");
    assert_eq!(
        updated["version"].as_i64(),
        created["version"].as_i64().map(|v| v + 1)
    );
    let rows = table(&stdout_of(
        &hub.clawfed(&["agents", "get", "helper", "-n", "team-a"]),
    ));
    assert_eq!(rows[0][..2], ["NAME", "HARNESS"]);
    assert_eq!(rows[1][..2], ["helper", "embedded-openclaw"]);
    let got = hub.yaml(&["agents", "get", "helper", "-n", "team-a"]);
    assert_eq!(got["spec"]["image"], "ghcr.io/example/helper:1.1");
    let off = hub.json(&[
        "agents",
        "update",
        "helper",
        "-n",
        "team-a",
        "--failover-after",
        "0",
    ]);
    assert!(off["spec"].get("failover").is_none(), "{off}");

    // Deploy: a revision; the same idempotency key twice makes one revision.
    let first = hub.json(&["deploy", "helper", "-n", "team-a"]);
    assert_eq!(first["number"], 1, "{first}");
    assert_eq!(first["spec"]["image"], "ghcr.io/example/helper:1.1");
    let roles: Vec<&str> = first["images"]
        .as_array()
        .expect("images")
        .iter()
        .filter_map(|i| i["role"].as_str())
        .collect();
    assert_eq!(roles, ["harness", "gateway"]);
    let args = [
        "deploy",
        "helper",
        "-n",
        "team-a",
        "--idempotency-key",
        "release-2",
    ];
    let second = hub.json(&args);
    let retried = hub.json(&args);
    assert_eq!(second["number"], 2, "{second}");
    assert_eq!(retried["id"], second["id"], "an idempotent retry");

    // Revisions: list (table and JSON), get (YAML).
    let rows = table(&stdout_of(&hub.clawfed(&[
        "revisions",
        "list",
        "-a",
        "helper",
        "-n",
        "team-a",
    ])));
    assert_eq!(rows[0][..3], ["AGENT", "REVISION", "PHASE"]);
    assert_eq!(rows.len(), 3, "{rows:?}");
    let revisions = hub.json(&["revisions", "list", "-a", "helper", "-n", "team-a"]);
    let numbers: Vec<i64> = revisions["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|r| r["number"].as_i64())
        .collect();
    assert_eq!(numbers, [1, 2]);
    let rev = hub.yaml(&["revisions", "get", "1", "-a", "helper", "-n", "team-a"]);
    assert_eq!(rev["number"], 1);
    assert_eq!(rev["agent"], "helper");
    assert_eq!(rev["spec"]["requirementLabels"]["tier"], "gold");

    // Stop, fleet, clusters.
    let stopped = hub.json(&["stop", "helper", "-n", "team-a"]);
    assert_eq!(stopped["desiredState"], "stopped", "{stopped}");
    let fleet = hub.json(&["fleet"]);
    assert_eq!(fleet["namespaces"], 1, "{fleet}");
    assert_eq!(fleet["agents"], 1, "{fleet}");
    assert_eq!(fleet["agentsStopped"], 1, "{fleet}");
    assert_eq!(fleet["workFailed"], 0, "{fleet}");
    let rows = table(&stdout_of(&hub.clawfed(&["fleet"])));
    assert_eq!(rows[0][0], "NAMESPACES");
    assert_eq!(rows[1][..2], ["1", "1"]);
    let rows = table(&stdout_of(&hub.clawfed(&["clusters", "list"])));
    assert_eq!(
        rows,
        [["NAME", "STATE", "VERSION", "FREE", "OUTBOX", "LAST SEEN"]]
    );
    assert_eq!(
        hub.json(&["clusters", "list"])["items"],
        serde_json::json!([])
    );

    // Audit: every change above, by the root token.
    let audit = hub.json(&["audit", "-n", "team-a", "--limit", "50"]);
    let events = audit["items"].as_array().expect("items");
    let actions: Vec<&str> = events.iter().filter_map(|e| e["action"].as_str()).collect();
    for action in [
        "namespace.create",
        "agent.create",
        "agent.update",
        "agent.deploy",
        "agent.stop",
    ] {
        assert!(actions.contains(&action), "{action} missing in {actions:?}");
    }
    assert!(events.iter().all(|e| e["actor"] == "token:root"), "{audit}");
    let rows = table(&stdout_of(&hub.clawfed(&["audit", "--limit", "5"])));
    assert_eq!(rows[0][..3], ["TIME", "ACTOR", "ACTION"]);

    // Work: the namespace's provisioning, done on the first attempt.
    let work = hub.json(&["work", "list", "-n", "team-a"]);
    let items = work["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{work}");
    assert_eq!(items[0]["kind"], "namespace.provision");
    assert_eq!(items[0]["state"], "done");
    assert_eq!(items[0]["attempts"], 1);
    let id = items[0]["id"].as_str().expect("id");
    let rows = table(&stdout_of(
        &hub.clawfed(&["work", "list", "--state", "done"]),
    ));
    assert_eq!(rows[0][..2], ["ID", "KIND"]);
    assert_eq!(rows[1][..2], [id, "namespace.provision"]);
    assert_eq!(hub.json(&["work", "get", id])["target"], ns["id"]);

    // Delete the stopped Agent; it is gone afterwards.
    let out = stdout_of(&hub.clawfed(&["agents", "delete", "helper", "-n", "team-a"]));
    assert_eq!(out.trim(), "agent helper deleted");
    let err = failure(
        &hub.clawfed(&["agents", "get", "helper", "-n", "team-a"]),
        1,
    );
    assert!(err.contains("not_found"), "{err}");
}

#[test]
fn errors_have_exit_codes_and_name_the_field() {
    let hub = HubProcess::start();
    stdout_of(&hub.clawfed(&["namespaces", "create", "team-a"]));

    // The hub refuses: exit 1, the message names the field.
    let err = failure(&hub.clawfed(&["namespaces", "create", "Not_A_Label"]), 1);
    assert!(err.contains("name:"), "{err}");
    assert!(err.contains("invalid_argument"), "{err}");
    assert!(err.contains("HTTP 400"), "{err}");
    let err = failure(&hub.clawfed(&["work", "list", "--state", "sleeping"]), 1);
    assert!(err.contains("state:"), "{err}");
    let err = failure(&hub.clawfed(&["namespaces", "create", "team-a"]), 1);
    assert!(err.contains("already_exists"), "{err}");
    let err = failure(&hub.clawfed_as("cfd_not-a-real-token", &["fleet"]), 1);
    assert!(err.contains("unauthenticated"), "{err}");

    // A tenant token cannot do installation work.
    let viewer = hub.db.create_token("viewer-a", "viewer", Some("team-a"));
    let err = failure(
        &hub.clawfed_as(&viewer, &["namespaces", "create", "team-b"]),
        1,
    );
    assert!(err.contains("permission_denied"), "{err}");
    let seen = hub.clawfed_as(&viewer, &["namespaces", "list", "-o", "json"]);
    let seen: Value = serde_json::from_str(&stdout_of(&seen)).expect("JSON");
    assert_eq!(seen["items"].as_array().map(Vec::len), Some(1));

    // Bad command lines: exit 2, naming the flag; nothing is sent.
    let err = failure(&hub.clawfed(&["agents", "create", "x", "-n", "team-a"]), 2);
    assert!(err.contains("--image"), "{err}");
    let err = failure(
        &hub.clawfed(&[
            "agents",
            "create",
            "x",
            "-n",
            "team-a",
            "--image",
            "i:1",
            "--harness-kind",
            "nope",
        ]),
        2,
    );
    assert!(err.contains("--harness-kind"), "{err}");
    let err = failure(&hub.clawfed(&["agents", "create"]), 2);
    assert!(err.to_lowercase().contains("usage"), "{err}");
    let err = failure(&hub.clawfed(&["namespaces", "list", "-o", "xml"]), 2);
    assert!(err.contains("xml"), "{err}");

    // Nothing listens: exit 3.
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let out = Command::new(CLAWFED)
        .env_clear()
        .env("CLAWFED_TOKEN", &hub.token)
        .args(["--server", &format!("http://127.0.0.1:{port}"), "fleet"])
        .output()
        .expect("run clawfed");
    let err = failure(&out, 3);
    assert!(err.contains("cannot reach the hub"), "{err}");

    // clawfed-hub token create checks its flags.
    let out = hub
        .db
        .hub(&["token", "create", "--name", "t1", "--role", "admin"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--namespace"), "{out:?}");
    let out = hub
        .db
        .hub(&["token", "create", "--name", "t2", "--role", "boss"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--role"), "{out:?}");
    let out = hub.db.hub(&[
        "token",
        "create",
        "--name",
        "t3",
        "--role",
        "installation-admin",
        "--namespace",
        "team-a",
    ]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--namespace"), "{out:?}");
    let out = hub.db.hub(&[
        "token",
        "create",
        "--name",
        "t4",
        "--role",
        "viewer",
        "--namespace",
        "team-a",
        "--ttl",
        "soon",
    ]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--ttl"), "{out:?}");

    // A revoked token is refused from then on.
    assert!(stdout_of(&hub.db.hub(&["token", "revoke", "--name", "viewer-a"])).contains("revoked"));
    let err = failure(&hub.clawfed_as(&viewer, &["namespaces", "list"]), 1);
    assert!(err.contains("unauthenticated"), "{err}");
}

#[test]
fn serve_drains_and_exits_zero_on_sigterm() {
    let db = Database::new();
    let out = stdout_of(&db.hub(&["migrate"]));
    assert!(out.contains("migration(s) applied; schema at"), "{out}");
    drop(db);

    let hub = HubProcess::start();
    stdout_of(&hub.clawfed(&["namespaces", "list"]));
    let rest = hub.rest.clone();
    let token = hub.token.clone();

    let (status, stderr) = hub.terminate();
    assert!(status.success(), "exit {status}; stderr:\n{stderr}");
    let messages: Vec<String> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|l| l["message"].as_str().map(str::to_owned))
        .collect();
    for expected in [
        "worker.started",
        "hub.draining",
        "worker.stopped",
        "hub.stopped",
    ] {
        assert!(
            messages.iter().any(|m| m == expected),
            "{expected} missing from the hub's log:\n{stderr}"
        );
    }
    assert_eq!(messages.last().map(String::as_str), Some("hub.stopped"));
    assert!(!stderr.contains(&token), "the token secret reached a log");

    // Nothing listens any more.
    let out = Command::new(CLAWFED)
        .env_clear()
        .env("CLAWFED_TOKEN", &token)
        .args(["--server", &rest, "fleet"])
        .output()
        .expect("run clawfed");
    failure(&out, 3);
}

// ---- deploy retries (issue 9, defect 13) -------------------------------------

/// A loopback TCP proxy in front of the hub that loses the hub's answer on
/// its first `lose` connections: it relays the request, waits until the hub
/// starts answering (so the hub has done the work), then closes both sides
/// without passing a byte back. Later connections are relayed both ways.
struct LossyProxy {
    url: String,
    connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl LossyProxy {
    fn start(upstream: &str, lose: usize) -> Self {
        let upstream = upstream
            .strip_prefix("http://")
            .expect("http upstream")
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        listener.set_nonblocking(true).expect("nonblocking");
        let connections = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, stopped) = (connections.clone(), stop.clone());
        std::thread::spawn(move || {
            // Bounded: ends when the test drops the proxy, or after a while.
            let deadline = Instant::now() + 4 * WAIT;
            while !stopped.load(Ordering::Relaxed) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((client, _)) => {
                        let n = count.fetch_add(1, Ordering::SeqCst);
                        let upstream = upstream.clone();
                        std::thread::spawn(move || relay(client, &upstream, n < lose));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => panic!("proxy accept: {e}"),
                }
            }
        });
        Self {
            url,
            connections,
            stop,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for LossyProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Relays one connection; with `lose`, drops the answer (see [`LossyProxy`]).
fn relay(client: TcpStream, upstream: &str, lose: bool) {
    client.set_nonblocking(false).expect("blocking");
    let Ok(server) = TcpStream::connect(upstream) else {
        return;
    };
    let (mut from_client, mut to_server) = (
        client.try_clone().expect("clone"),
        server.try_clone().expect("clone"),
    );
    let requests = std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_client, &mut to_server);
        let _ = to_server.shutdown(Shutdown::Write);
    });
    if lose {
        let mut first = [0u8; 1];
        server.set_read_timeout(Some(WAIT)).expect("timeout");
        let _ = (&server).read(&mut first);
        let _ = client.shutdown(Shutdown::Both);
        let _ = server.shutdown(Shutdown::Both);
    } else {
        let (mut from_server, mut to_client) = (server, client);
        let _ = std::io::copy(&mut from_server, &mut to_client);
        let _ = to_client.shutdown(Shutdown::Both);
    }
    let _ = requests.join();
}

/// A hub with namespace `team-a` and Agent `helper`, ready to deploy.
fn hub_with_agent() -> HubProcess {
    let hub = HubProcess::start();
    stdout_of(&hub.clawfed(&["namespaces", "create", "team-a"]));
    stdout_of(&hub.clawfed(&[
        "agents",
        "create",
        "helper",
        "-n",
        "team-a",
        "--image",
        "ghcr.io/example/helper:1.0",
    ]));
    hub
}

/// The ids of `helper`'s revisions.
fn revision_ids(hub: &HubProcess) -> Vec<String> {
    hub.json(&["revisions", "list", "-a", "helper", "-n", "team-a"])["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect()
}

#[test]
fn deploy_retries_until_a_restarted_hub_answers() {
    let hub = hub_with_agent();
    let (db, token, rest) = (hub.db.clone(), hub.token.clone(), hub.rest.clone());
    let (status, stderr) = hub.terminate();
    assert!(status.success(), "{stderr}");

    // Deploy while nothing listens at the hub's address.
    let mut cli = Command::new(CLAWFED)
        .env_clear()
        .env("CLAWFED_SERVER", &rest)
        .env("CLAWFED_TOKEN", &token)
        .args(["deploy", "helper", "-n", "team-a", "-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn clawfed deploy");
    let stderr = cli.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let notice = rx
        .recv_timeout(WAIT)
        .expect("clawfed deploy said nothing (it gave up instead of retrying)");
    assert!(notice.contains("retrying"), "{notice}");
    assert!(notice.contains("cannot reach the hub"), "{notice}");

    // The hub comes back on the same address within the retry window.
    let addr = rest.strip_prefix("http://").expect("http");
    let hub = HubProcess::serve(db, token, addr);
    assert_eq!(hub.rest, rest);
    let mut stdout = cli.stdout.take().expect("stdout");
    let deadline = Instant::now() + 3 * WAIT;
    let status = loop {
        if let Some(status) = cli.try_wait().expect("wait for clawfed") {
            break status;
        }
        assert!(Instant::now() < deadline, "clawfed deploy did not finish");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    stdout.read_to_string(&mut out).expect("stdout");
    let notices: Vec<String> = rx.try_iter().collect();
    assert!(status.success(), "exit {status}: {notices:?}");
    let rev: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(revision_ids(&hub), [rev["id"].as_str().expect("id")]);
}

#[test]
fn deploy_retry_after_a_lost_answer_makes_one_revision() {
    let hub = hub_with_agent();
    // The hub saves the first attempt but its answer never arrives.
    let proxy = LossyProxy::start(&hub.rest, 1);
    let out = Command::new(CLAWFED)
        .env_clear()
        .env("CLAWFED_SERVER", &proxy.url)
        .env("CLAWFED_TOKEN", &hub.token)
        .args(["deploy", "helper", "-n", "team-a", "-o", "json"])
        .output()
        .expect("run clawfed");
    let rev: Value = serde_json::from_str(&stdout_of(&out)).expect("JSON");
    assert_eq!(proxy.connections(), 2, "one lost answer, one retry");
    assert!(text(&out.stderr).contains("retrying"), "{out:?}");
    assert_eq!(rev["number"], 1);
    assert_eq!(revision_ids(&hub), [rev["id"].as_str().expect("id")]);
}

#[test]
fn deploy_that_gives_up_prints_its_key_and_a_rerun_makes_no_second_revision() {
    let hub = hub_with_agent();
    let proxy = LossyProxy::start(&hub.rest, usize::MAX);
    let out = Command::new(CLAWFED)
        .env_clear()
        .env("CLAWFED_SERVER", &proxy.url)
        .env("CLAWFED_TOKEN", &hub.token)
        .args(["deploy", "helper", "-n", "team-a", "--retries", "2"])
        .output()
        .expect("run clawfed");
    let err = failure(&out, 3);
    assert_eq!(proxy.connections(), 3, "three attempts: {err}");
    let key = err
        .split("--idempotency-key ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no key printed: {err}"));
    assert!(!key.is_empty(), "{err}");

    // Every attempt reached the hub with that key: one revision.
    let saved = revision_ids(&hub);
    assert_eq!(saved.len(), 1, "{saved:?}");
    let again = hub.json(&["deploy", "helper", "-n", "team-a", "--idempotency-key", key]);
    assert_eq!(again["id"], saved[0].as_str(), "the saved revision");
    assert_eq!(revision_ids(&hub), saved, "no second revision");
}

/// Issue 12, item 3: the hub's control-cluster credentials are the named
/// `gateway.kubeconfig` or its in-cluster ServiceAccount, never an ambient
/// KUBECONFIG. Outside a cluster, with Gateways on and no kubeconfig named,
/// `serve` fails naming the setting, although $KUBECONFIG holds a usable
/// file (before, `Config::infer` picked that file up silently).
#[test]
fn the_hub_never_falls_back_to_an_ambient_kubeconfig() {
    let db = Database::new();
    let ambient = db.dir.path().join("ambient.kubeconfig");
    std::fs::write(
        &ambient,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
    )
    .expect("write kubeconfig");
    let mut child = db
        .hub_command(&["serve"])
        .env("CLAWFED_GATEWAY_ENABLED", "true")
        .env("CLAWFED_PIPELINE_ENABLED", "true")
        .env("KUBECONFIG", &ambient)
        .env("HOME", db.dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn clawfed-hub serve");
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the hub started with the ambient KUBECONFIG");
    };
    let out = child.wait_with_output().expect("output");
    assert!(!status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("in-cluster") && stderr.contains("gateway.kubeconfig"),
        "{stderr}"
    );
}

// ---- managed credentials (issue 12 item 1) -------------------------------------

/// `clawfed ARGS` with `stdin` piped in.
fn clawfed_with_stdin(hub: &HubProcess, args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(CLAWFED)
        .env_clear()
        .env("CLAWFED_SERVER", &hub.rest)
        .env("CLAWFED_TOKEN", &hub.token)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn clawfed");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("run clawfed")
}

/// Issue 12 item 1: `clawfed agents credentials set` reads the value from
/// stdin or `--from-file` (one trailing newline dropped), never from the
/// command line, and prints metadata only; the hub created its secrets
/// key (32 bytes, mode 0600) beside its CA directory; neither the CLI's
/// output nor the hub's log ever shows the value.
#[test]
fn credentials_are_set_from_stdin_or_a_file_never_from_argv() {
    let hub = hub_with_agent();
    let from_stdin = format!("sk-stdin-{}", uuid::Uuid::new_v4().simple());
    let from_file = format!("sk-file-{}", uuid::Uuid::new_v4().simple());
    let set = ["agents", "credentials", "set", "helper", "-n", "team-a"];

    let out = clawfed_with_stdin(
        &hub,
        &[&set[..], &["--kind", "model-api-key", "-o", "json"]].concat(),
        &format!("{from_stdin}\n"),
    );
    let printed = stdout_of(&out);
    let meta: Value = serde_json::from_str(&printed).expect("JSON");
    assert_eq!(meta["kind"], "model-api-key");
    assert_eq!(meta["version"], 1);
    assert!(!printed.contains(&from_stdin) && !text(&out.stderr).contains(&from_stdin));

    let file = hub.db.dir.path().join("model-key");
    std::fs::write(&file, format!("{from_file}\n")).expect("write the key file");
    let out = hub.clawfed(
        &[
            &set[..],
            &[
                "--kind",
                "model-api-key",
                "--from-file",
                file.to_str().unwrap(),
            ],
        ]
        .concat(),
    );
    let printed = stdout_of(&out);
    let rows = table(&printed);
    assert_eq!(rows[0], ["KIND", "VERSION", "SET"], "{printed}");
    assert_eq!(rows[1][..2], ["model-api-key", "2"], "{printed}");
    assert!(!printed.contains(&from_file));

    let listed = hub.json(&["agents", "credentials", "list", "helper", "-n", "team-a"]);
    assert_eq!(listed["items"][0]["version"], 2, "{listed}");

    // Never from argv; empty input, a missing file and a bad kind are
    // refused naming what is wrong.
    // (arguments after `set`, stdin, exit code, what the error names)
    let refusals: [(&[&str], Option<&str>, i32, &str); 5] = [
        (
            &["--kind", "model-api-key", "--value", "x"],
            None,
            2,
            "--value",
        ),
        (&["--kind", "model-api-key"], Some("\n"), 2, "stdin"),
        (
            &["--kind", "model-api-key", "--from-file", "/nonexistent/key"],
            None,
            2,
            "--from-file",
        ),
        (&["--kind", "password"], Some("x"), 1, "kind"),
        (
            &["--kind", "service-account"],
            Some("x"),
            1,
            "dedicated-codex",
        ),
    ];
    for (extra, stdin, code, named) in refusals {
        let args = [&set[..], extra].concat();
        let out = match stdin {
            Some(input) => clawfed_with_stdin(&hub, &args, input),
            None => hub.clawfed(&args),
        };
        let err = failure(&out, code);
        assert!(err.contains(named), "{err}");
    }

    let revision = hub.json(&["deploy", "helper", "-n", "team-a"]);
    let shown = format!(
        "{revision} {}",
        hub.json(&["agents", "get", "helper", "-n", "team-a"])
    );
    assert!(!shown.contains(&from_file), "{shown}");

    // The key the hub sealed them with: created beside the CA directory.
    let key = hub.db.dir.path().join("ca.secrets.key");
    let bytes = std::fs::read(&key).expect("the hub created its secrets key file");
    assert_eq!(bytes.len(), 32);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the key file is private");
    }

    out_of_log(hub, &[&from_stdin, &from_file]);
}

/// Stops the hub and asserts its whole log names none of `secrets`.
fn out_of_log(hub: HubProcess, secrets: &[&str]) {
    let (status, stderr) = hub.terminate();
    assert!(status.success(), "exit {status}; stderr:\n{stderr}");
    assert!(
        stderr.contains("secrets.key_created"),
        "the log is captured: {stderr}"
    );
    for s in secrets {
        assert!(!stderr.contains(s), "a credential reached the hub's log");
    }
}
