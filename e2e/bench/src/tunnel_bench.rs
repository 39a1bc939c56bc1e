//! The data path's figures (issue 11): a Gateway's connection through the
//! hub's tunnel ingress, the spoke's outbound link and the spoke's dial to
//! a Harness, side by side with direct loopback TCP to the same Harness
//! server (the physical reference), in one run.
//!
//! Three processes of this binary, so each side's RSS is its own:
//! - `--role hub`: an in-process `clawfed_hub::server` on a SQLite file in
//!   the run's directory, link and tunnel ingress on `127.0.0.1:0`, no
//!   worker and no pipeline. It seeds the Agents' revisions on cluster
//!   `bench` in phase `waiting-ready` as `tests/tests/tunnel.rs` does
//!   (REST deploy, then placement and phase through the store), with their
//!   transport credentials, and writes the addresses, a bootstrap token and
//!   `(token, authority, target)` per revision to `hub.json`.
//! - `--role spoke`: the product's `clawfed_spoke::link::Link` with
//!   `Tunnels`, enrolled with that token. The only stand-in is the
//!   dialer's target → address lookup ([`MapDialer`], from `map.json`),
//!   which replaces the EndpointSlice read; it dials like the product's
//!   (`TCP_NODELAY`).
//! - the driver (default): the local Harness servers (echo, byte source,
//!   sink, slow sink) and the load, as a Gateway would make it
//!   (`clawfed_tests::tunnel::connect`: HTTP/1.1 CONNECT with the
//!   transport credential).
//!
//! Phases, in the order they run (printed with the figure's number):
//! 3. connection setup: CONNECT → 200 → a 1-byte echo, one at a time;
//! 2. a 1 KiB request/response over an open connection, idle otherwise;
//! 4. `--connections` tunneled connections over `--revisions` revisions
//!    held open: hub and spoke RSS per connection, then all echo again
//!    (before the bulk phases, so their freed buffers do not hide growth);
//! 1. one connection's throughput: Harness → client, client → Harness and
//!    echo;
//! 5. slow-receiver isolation: `--isolation-streams` uploads to a fast
//!    Harness with and without `--slow-receivers` connections whose
//!    Harness reads `--slow-rate` bytes/s, alternating, medians.
//!
//! `cargo run --release -p clawfed-bench --bin tunnel-bench`

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::{Parser, ValueEnum};
use clawfed_bench::procfs::{cpu_secs, machine_ticks, rss_kib};
use clawfed_hub::auth::{self, Role as TokenRole};
use clawfed_hub::client::HubClient;
use clawfed_hub::gateway::TransportCredentials;
use clawfed_hub::model::RevisionPhase;
use clawfed_hub::store::{self, NewToken, Store};
use clawfed_proto::tunnel::{MAX_FRAME, harness_authority};
use clawfed_proto::work::{harness, target};
use clawfed_spoke::link::identity::FileIdentityStore;
use clawfed_spoke::link::ledger::FileLedger;
use clawfed_spoke::link::tls::HubAddress;
use clawfed_spoke::link::{Link, LinkConfig, SpokeMetrics};
use clawfed_spoke::tunnel::{TunnelSettings, Tunnels};
use clawfed_tests::tunnel::{Conn, Ingress, MapDialer};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

const CLUSTER: &str = "bench";
const TENANT: &str = "bench";
/// Agents with a special Harness; the others echo.
const SOURCE: &str = "source";
const SINK: &str = "sink";
const SLOW: &str = "slow";
/// Buffer of the Harness servers and the driver's bulk reads and writes.
const BULK: usize = 64 * 1024;
const KIB: usize = 1024;
const MIB: u64 = 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Role {
    Driver,
    Hub,
    Spoke,
}

#[derive(Debug, Clone, Parser)]
#[command(name = "tunnel-bench")]
struct Args {
    /// Which process this is; the driver starts the others.
    #[arg(long, value_enum, default_value_t = Role::Driver)]
    role: Role,
    /// The run's directory (hub and spoke roles; given by the driver).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Echoing revisions the held connections spread over.
    #[arg(long, default_value_t = 100)]
    revisions: usize,
    /// Tunneled connections held open at once (phase 4).
    #[arg(long, default_value_t = 1000)]
    connections: usize,
    /// Connections opened at a time while building up phase 4.
    #[arg(long, default_value_t = 50)]
    open_concurrency: usize,
    /// Seconds the held connections stay open before they echo again.
    #[arg(long, default_value_t = 5)]
    hold_seconds: u64,
    /// MiB moved one way per throughput sample (phase 1).
    #[arg(long, default_value_t = 1024)]
    one_way_mib: u64,
    /// MiB echoed per echo throughput sample (phase 1).
    #[arg(long, default_value_t = 256)]
    echo_mib: u64,
    /// Samples per throughput figure, tunnel and direct alternating; the
    /// median is reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// 1 KiB request/response samples per path (phase 2).
    #[arg(long, default_value_t = 2000)]
    latency_samples: usize,
    /// Connection setups per path (phase 3).
    #[arg(long, default_value_t = 500)]
    setup_samples: usize,
    /// Concurrent uploads whose throughput phase 5 compares.
    #[arg(long, default_value_t = 4)]
    isolation_streams: usize,
    /// MiB each of them uploads per round.
    #[arg(long, default_value_t = 128)]
    isolation_mib: u64,
    /// Rounds with and without the slow receivers (alternating).
    #[arg(long, default_value_t = 5)]
    isolation_rounds: usize,
    /// Connections to the slow Harness during the "with" rounds.
    #[arg(long, default_value_t = 1)]
    slow_receivers: usize,
    /// Bytes per second the slow Harness reads from each connection.
    #[arg(long, default_value_t = 1024)]
    slow_rate: usize,
    /// Phases to run (figure numbers, comma-separated); they run in the
    /// order 3, 2, 4, 1, 5 whatever the order given.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5")]
    phases: Vec<u8>,
    /// Keep the run's directory (database, CA, role logs) here.
    #[arg(long)]
    keep_dir: Option<PathBuf>,
}

/// What the hub role tells the others.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct HubInfo {
    link_url: String,
    ca_pem: String,
    ingress: SocketAddr,
    /// The CA of the ingress' TLS certificate (`None`: plain).
    ingress_ca: Option<String>,
    metrics: SocketAddr,
    bootstrap_token: String,
    revisions: Vec<RevInfo>,
}

impl HubInfo {
    /// The ingress as a Gateway reaches it (TLS when the hub serves it).
    fn ingress(&self) -> Ingress {
        Ingress {
            addr: self.ingress,
            ca_pem: self.ingress_ca.clone(),
        }
    }
}

/// One seeded revision: what its Gateway would be given.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RevInfo {
    agent: String,
    token: String,
    authority: String,
    target: String,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let role = args.role;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tunnel-bench: runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match args.role {
            Role::Hub => hub_role(&args).await.map(|()| true),
            Role::Spoke => spoke_role(&args).await.map(|()| true),
            Role::Driver => {
                tokio::select! {
                    r = driver(&args) => r,
                    _ = tokio::signal::ctrl_c() => bail!("interrupted"),
                }
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("tunnel-bench ({role:?}): error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn role_dir(args: &Args) -> anyhow::Result<&Path> {
    args.dir
        .as_deref()
        .context("--dir is required for this role")
}

/// Reads stdin until EOF (the driver closes it, or exits) and answers
/// `open` with `answer()`.
async fn serve_stdin(answer: impl Fn() -> String) -> anyhow::Result<()> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim() == "open" {
            println!("open {}", answer());
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The hub role.

async fn hub_role(args: &Args) -> anyhow::Result<()> {
    let dir = role_dir(args)?;
    let lo: SocketAddr = "127.0.0.1:0".parse()?;
    let mut config = clawfed_hub::config::Config::default();
    config.database.url = format!("sqlite://{}", dir.join("hub.db").display());
    config.api.rest_addr = lo;
    config.api.grpc_addr = lo;
    config.api.metrics_addr = lo;
    config.link.addr = lo;
    config.link.ca_dir = dir.join("ca");
    config.tunnel.addr = lo;
    // Nothing is rolled out: the bench plays the pipeline's part in the
    // store, so no worker polls it during the measurements.
    config.worker.enabled = false;
    config.pipeline.enabled = false;
    config.pipeline.path_probe = false;
    let store: Arc<dyn Store> = Arc::new(store::connect(&config.database.url).await?);
    let hub = clawfed_hub::server::start_with_store(
        &config,
        store.clone(),
        clawfed_hub::worker::Handlers::builtin(),
    )
    .await?;
    let link = hub.link.clone().context("link disabled")?;
    let ingress = hub.tunnel.clone().context("tunnel ingress disabled")?;

    let minted = auth::mint_token();
    store
        .create_token(&NewToken {
            name: "tunnel-bench".into(),
            namespace: None,
            role: TokenRole::InstallationAdmin,
            hash: minted.hash,
            expires_at: None,
        })
        .await?;
    let rest = HubClient::new(&format!("http://{}", hub.rest_addr), Some(minted.secret))?;
    let _: serde_json::Value = rest
        .post("/namespaces", &serde_json::json!({ "name": TENANT }))
        .await?;
    let bootstrap_token = rest.bootstrap_token(CLUSTER).await?;
    let ns = store.get_namespace(TENANT).await?;
    // Sealed with the hub's secrets key (the same key file the hub loaded).
    let secrets = clawfed_hub::server::load_secrets_key(&config).await?;
    let credentials = TransportCredentials::load(store.clone(), &secrets).await?;
    let mut agents: Vec<String> = (0..args.revisions).map(|i| format!("e{i:04}")).collect();
    agents.extend([SOURCE, SINK, SLOW].map(str::to_owned));
    let mut revisions = Vec::with_capacity(agents.len());
    for agent in agents {
        let _: serde_json::Value = rest
            .post(
                &format!("/namespaces/{TENANT}/agents"),
                &serde_json::json!({
                    "name": agent,
                    "spec": { "harnessKind": "embedded-openclaw", "image": "bench:1" }
                }),
            )
            .await?;
        let id = rest.deploy_current(TENANT, &agent).await?.id;
        store.place_revision(&id, CLUSTER).await?;
        let rev = store.get_revision_by_id(&id).await?;
        let rev = store
            .update_revision(
                &id,
                rev.version,
                RevisionPhase::WaitingReady,
                None,
                &rev.progress,
            )
            .await?;
        revisions.push(RevInfo {
            token: credentials.for_revision(&id).await?.gateway_token,
            authority: harness_authority(
                &agent,
                rev.number,
                &ns.data_plane_namespace,
                harness::DEFAULT_PORT,
            ),
            target: target::harness(&ns.id, &agent, rev.number),
            agent,
        });
    }
    let info = HubInfo {
        link_url: format!("https://127.0.0.1:{}", link.addr.port()),
        ca_pem: link.ca_pem().to_owned(),
        ingress: ingress.addr,
        ingress_ca: ingress.ca_pem.clone(),
        metrics: hub.metrics_addr,
        bootstrap_token,
        revisions,
    };
    let tmp = dir.join("hub.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(&info)?)?;
    std::fs::rename(&tmp, dir.join("hub.json"))?;
    println!("ready");
    serve_stdin(String::new).await?;
    let _ = tokio::time::timeout(Duration::from_secs(10), hub.stop()).await;
    Ok(())
}

// ---------------------------------------------------------------------------
// The spoke role.

async fn spoke_role(args: &Args) -> anyhow::Result<()> {
    let dir = role_dir(args)?;
    let info: HubInfo = serde_json::from_slice(&std::fs::read(dir.join("hub.json"))?)?;
    let map: HashMap<String, SocketAddr> =
        serde_json::from_slice(&std::fs::read(dir.join("map.json"))?)?;
    let state = dir.join("spoke");
    std::fs::create_dir_all(&state)?;
    let tunnels = Arc::new(Tunnels::new(
        Arc::new(MapDialer(map)),
        TunnelSettings::default(),
    ));
    let link = Link::new(
        LinkConfig {
            hub: HubAddress::parse(&info.link_url).map_err(|e| anyhow!("hub link URL: {e}"))?,
            ca_pem: info.ca_pem,
            cluster_name: CLUSTER.into(),
            bootstrap_token: Some(info.bootstrap_token),
            version: "tunnel-bench".into(),
            capabilities: vec!["applier:ledger".into()],
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
        },
        Arc::new(FileIdentityStore::new(&state)),
        Arc::new(FileLedger::open(&state)?),
        SpokeMetrics::default(),
    )
    .with_tunnels(tunnels.clone());
    let mut status = link.status();
    let shutdown = CancellationToken::new();
    let (_reports, reports_rx) = tokio::sync::mpsc::channel(16);
    let task = tokio::spawn(link.run(reports_rx, shutdown.clone()));
    tokio::time::timeout(Duration::from_secs(60), status.wait_for(|s| s.connected))
        .await
        .context("the spoke did not connect within 60 s")??;
    println!("connected");
    serve_stdin(|| tunnels.open().to_string()).await?;
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    Ok(())
}

// ---------------------------------------------------------------------------
// The driver's Harness servers.

/// The local Harness servers, each on its own port.
struct Harnesses {
    echo: SocketAddr,
    source: SocketAddr,
    sink: SocketAddr,
    slow: SocketAddr,
    /// Cancelling it closes the slow Harness' open connections.
    slow_stop: Arc<Mutex<CancellationToken>>,
}

/// A repeating block; byte `i` of a stream is `pattern_at(i)`.
fn block() -> Arc<Vec<u8>> {
    Arc::new((0..BULK).map(|i| (i * 31 % 251) as u8).collect())
}

async fn listen(serve: impl Fn(TcpStream) + Send + 'static) -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let _ = s.set_nodelay(true);
            serve(s);
        }
    });
    Ok(addr)
}

impl Harnesses {
    async fn start(slow_rate: usize) -> anyhow::Result<Self> {
        // Echo: bytes back until EOF, then EOF.
        let echo = listen(|mut s| {
            tokio::spawn(async move {
                let mut buf = vec![0u8; BULK];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = s.shutdown().await;
            });
        })
        .await?;
        // Byte source: a u64 length, then that many bytes and EOF.
        let data = block();
        let source = listen(move |mut s| {
            let data = data.clone();
            tokio::spawn(async move {
                let Ok(mut left) = s.read_u64().await else {
                    return;
                };
                while left > 0 {
                    let n = left.min(BULK as u64) as usize;
                    if s.write_all(&data[..n]).await.is_err() {
                        return;
                    }
                    left -= n as u64;
                }
                let _ = s.shutdown().await;
                let mut rest = [0u8; 64];
                while let Ok(n) = s.read(&mut rest).await {
                    if n == 0 {
                        break;
                    }
                }
            });
        })
        .await?;
        // Sink: reads to EOF, answers the byte count (u64) and EOF.
        let sink = listen(|mut s| {
            tokio::spawn(async move {
                let mut buf = vec![0u8; BULK];
                let mut total = 0u64;
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) => break,
                        Ok(n) => total += n as u64,
                        Err(_) => return,
                    }
                }
                let _ = s.write_u64(total).await;
                let _ = s.shutdown().await;
            });
        })
        .await?;
        // Slow sink: reads `slow_rate` bytes per second, in quarters.
        let slow_stop = Arc::new(Mutex::new(CancellationToken::new()));
        let stops = slow_stop.clone();
        let slow = listen(move |mut s| {
            let stop = stops.lock().unwrap_or_else(|p| p.into_inner()).clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; slow_rate.div_ceil(4).max(1)];
                let mut tick = tokio::time::interval(Duration::from_millis(250));
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tick.tick() => match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        },
                    }
                }
            });
        })
        .await?;
        Ok(Self {
            echo,
            source,
            sink,
            slow,
            slow_stop,
        })
    }

    /// Closes the slow Harness' connections; later ones get a new token.
    fn close_slow(&self) {
        let mut stop = self.slow_stop.lock().unwrap_or_else(|p| p.into_inner());
        stop.cancel();
        *stop = CancellationToken::new();
    }
}

// ---------------------------------------------------------------------------
// Child processes.

struct RoleProc {
    child: Child,
    pid: u32,
    stdin: Option<ChildStdin>,
    stdout: tokio::io::Lines<BufReader<ChildStdout>>,
}

impl RoleProc {
    async fn spawn(role: &str, dir: &Path, extra: &[String], ready: &str) -> anyhow::Result<Self> {
        let log = std::fs::File::create(dir.join(format!("{role}.log")))?;
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("--role")
            .arg(role)
            .arg("--dir")
            .arg(dir)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        let mut child = cmd.spawn().with_context(|| format!("spawn {role}"))?;
        let pid = child.id().context("pid")?;
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().context("stdout")?).lines();
        tokio::time::timeout(Duration::from_secs(120), async {
            loop {
                match stdout.next_line().await? {
                    Some(l) if l == ready => return anyhow::Ok(()),
                    Some(_) => continue,
                    None => bail!("{role} exited before it was {ready} (see {role}.log)"),
                }
            }
        })
        .await
        .with_context(|| format!("{role} not {ready} within 120 s"))??;
        Ok(Self {
            child,
            pid,
            stdin,
            stdout,
        })
    }

    /// Tunneled connections the role has open now.
    async fn open(&mut self) -> anyhow::Result<u64> {
        let stdin = self.stdin.as_mut().context("stdin closed")?;
        stdin.write_all(b"open\n").await?;
        stdin.flush().await?;
        let line = tokio::time::timeout(Duration::from_secs(10), self.stdout.next_line())
            .await
            .context("no answer")??
            .context("exited")?;
        Ok(line
            .strip_prefix("open ")
            .context("bad answer")?
            .trim()
            .parse()?)
    }

    /// Closes stdin (the role stops) and waits for it, bounded.
    async fn stop(mut self) {
        drop(self.stdin.take());
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }
}

/// CPU use of hub, spoke and driver (and the whole machine) over a span.
struct Cpu {
    pids: [u32; 3],
    start: [f64; 3],
    machine: (f64, f64),
    at: Instant,
}

/// CPU seconds of hub, spoke and driver, the machine's busy cores, wall.
#[derive(Debug, Clone, Copy, Default)]
struct CpuUse {
    secs: [f64; 3],
    machine_busy_cores: f64,
    wall: f64,
}

impl CpuUse {
    fn cores(&self) -> [f64; 3] {
        self.secs.map(|s| s / self.wall.max(1e-9))
    }

    /// Cores the rest of the machine used meanwhile.
    fn others(&self) -> f64 {
        (self.machine_busy_cores - self.cores().iter().sum::<f64>()).max(0.0)
    }
}

impl Cpu {
    fn mark(hub: u32, spoke: u32) -> Self {
        let pids = [hub, spoke, std::process::id()];
        Self {
            start: pids.map(cpu_secs),
            pids,
            machine: machine_ticks(),
            at: Instant::now(),
        }
    }

    fn used(&self) -> CpuUse {
        let wall = self.at.elapsed().as_secs_f64();
        let (busy, total) = machine_ticks();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let share = (busy - self.machine.0) / (total - self.machine.1).max(1.0);
        CpuUse {
            secs: std::array::from_fn(|i| cpu_secs(self.pids[i]) - self.start[i]),
            machine_busy_cores: share * cores,
            wall,
        }
    }
}

fn cores_note(u: CpuUse) -> String {
    let c = u.cores();
    format!(
        "cores: hub {:.2} + spoke {:.2} + driver {:.2} = {:.2}, other work {:.2}",
        c[0],
        c[1],
        c[2],
        c[0] + c[1] + c[2],
        u.others()
    )
}

async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let fetch = async {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut body = Vec::new();
        s.read_to_end(&mut body).await?;
        anyhow::Ok(String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(10), fetch)
        .await
        .context("metrics scrape timed out")?
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

// ---------------------------------------------------------------------------
// Measuring.

/// The p-quantile (0..=1) of sorted values.
fn quantile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[(v.len() - 1) / 2]
}

fn ms(us: u64) -> String {
    format!("{:.3} ms", us as f64 / 1000.0)
}

fn mb_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "MISS" }
}

/// How the driver reaches a Harness: through the tunnel as a Gateway, or
/// straight to its server.
#[derive(Clone)]
enum Via {
    Tunnel { ingress: Ingress, rev: RevInfo },
    Direct(SocketAddr),
}

impl Via {
    async fn connect(&self) -> anyhow::Result<Conn> {
        match self {
            Self::Tunnel { ingress, rev } => {
                clawfed_tests::tunnel::connect(ingress, &rev.authority, Some(&rev.token))
                    .await
                    .map_err(|r| anyhow!("tunnel refused: {r:?}"))
            }
            Self::Direct(addr) => {
                let s = TcpStream::connect(addr).await?;
                s.set_nodelay(true)?;
                Ok(Conn::Plain(s))
            }
        }
    }
}

/// Checks `data`, received at stream offset `at`, against the pattern.
fn matches_pattern(block: &[u8], at: u64, data: &[u8]) -> bool {
    let mut off = (at % BULK as u64) as usize;
    let mut rest = data;
    while !rest.is_empty() {
        let n = rest.len().min(BULK - off);
        if rest[..n] != block[off..off + n] {
            return false;
        }
        rest = &rest[n..];
        off = 0;
    }
    true
}

/// Writes `n` pattern bytes (from stream offset 0).
async fn write_pattern(
    w: &mut (impl AsyncWriteExt + Unpin),
    block: &[u8],
    n: u64,
) -> std::io::Result<()> {
    let mut left = n;
    while left > 0 {
        let k = left.min(BULK as u64) as usize;
        w.write_all(&block[..k]).await?;
        left -= k as u64;
    }
    Ok(())
}

/// Harness → client: asks the source for `n` bytes and reads them.
async fn download(mut s: Conn, n: u64, block: &[u8]) -> anyhow::Result<Duration> {
    let t = Instant::now();
    s.write_u64(n).await?;
    let mut buf = vec![0u8; BULK];
    let mut got = 0u64;
    loop {
        let k = s.read(&mut buf).await?;
        if k == 0 {
            break;
        }
        // Checked every 64th read only: the check must not be the limit.
        if got % (64 * BULK as u64) < k as u64 && !matches_pattern(block, got, &buf[..k]) {
            bail!("download: wrong bytes at offset {got}");
        }
        got += k as u64;
    }
    let d = t.elapsed();
    if got != n {
        bail!("download: {got} bytes of {n}");
    }
    s.shutdown().await?;
    Ok(d)
}

/// Client → Harness: `n` bytes to the sink, until it confirms the count.
async fn upload(mut s: Conn, n: u64, block: &[u8]) -> anyhow::Result<Duration> {
    let t = Instant::now();
    write_pattern(&mut s, block, n).await?;
    s.shutdown().await?;
    let got = s.read_u64().await?;
    let d = t.elapsed();
    if got != n {
        bail!("upload: the sink got {got} bytes of {n}");
    }
    Ok(d)
}

/// `n` bytes to the echo server and back, both directions at once.
async fn echo_bulk(mut s: Conn, n: u64, block: &[u8]) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let (mut r, mut w) = tokio::io::split(&mut s);
    let write = async {
        write_pattern(&mut w, block, n).await?;
        w.shutdown().await?;
        anyhow::Ok(())
    };
    let read = async {
        let mut buf = vec![0u8; BULK];
        let mut got = 0u64;
        loop {
            let k = r.read(&mut buf).await?;
            if k == 0 {
                break;
            }
            if got % (64 * BULK as u64) < k as u64 && !matches_pattern(block, got, &buf[..k]) {
                bail!("echo: wrong bytes at offset {got}");
            }
            got += k as u64;
        }
        anyhow::Ok(got)
    };
    let ((), got) = tokio::try_join!(write, read)?;
    if got != n {
        bail!("echo: {got} bytes of {n}");
    }
    Ok(t.elapsed())
}

/// One 1 KiB request/response on an open echo connection; µs.
async fn ping(s: &mut Conn, req: &[u8], back: &mut [u8]) -> anyhow::Result<u64> {
    let t = Instant::now();
    s.write_all(req).await?;
    s.read_exact(back).await?;
    let us = t.elapsed().as_micros() as u64;
    if back != req {
        bail!("echo answered other bytes");
    }
    Ok(us)
}

struct Env {
    args: Args,
    hub: RoleProc,
    spoke: RoleProc,
    info: HubInfo,
    harnesses: Harnesses,
    block: Arc<Vec<u8>>,
}

impl Env {
    fn rev(&self, agent: &str) -> anyhow::Result<RevInfo> {
        self.info
            .revisions
            .iter()
            .find(|r| r.agent == agent)
            .cloned()
            .with_context(|| format!("no revision of {agent}"))
    }

    fn echo_revs(&self) -> Vec<RevInfo> {
        self.info
            .revisions
            .iter()
            .filter(|r| ![SOURCE, SINK, SLOW].contains(&r.agent.as_str()))
            .cloned()
            .collect()
    }

    fn first_echo(&self) -> anyhow::Result<RevInfo> {
        self.echo_revs().first().cloned().context("no revisions")
    }

    fn tunnel(&self, agent: &str) -> anyhow::Result<Via> {
        Ok(Via::Tunnel {
            ingress: self.info.ingress(),
            rev: self.rev(agent)?,
        })
    }

    async fn hub_open(&self) -> anyhow::Result<u64> {
        let text = http_get(self.info.metrics, "/metrics").await?;
        Ok(metric(&text, "occ_tunnel_open_connections").unwrap_or(0.0) as u64)
    }

    /// Polls until hub and spoke both count `n` open tunnels.
    async fn wait_open(&mut self, n: u64, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            let (h, s) = (self.hub_open().await?, self.spoke.open().await?);
            if h == n && s == n {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("open tunnels: hub {h}, spoke {s}, expected {n} within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn driver(args: &Args) -> anyhow::Result<bool> {
    let tmp;
    let dir = match &args.keep_dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_owned()
        }
    };
    let started = Instant::now();
    let harnesses = Harnesses::start(args.slow_rate).await?;
    let hub = RoleProc::spawn(
        "hub",
        &dir,
        &["--revisions".into(), args.revisions.to_string()],
        "ready",
    )
    .await?;
    let info: HubInfo = serde_json::from_slice(&std::fs::read(dir.join("hub.json"))?)?;
    let map: HashMap<String, SocketAddr> = info
        .revisions
        .iter()
        .map(|r| {
            let addr = match r.agent.as_str() {
                SOURCE => harnesses.source,
                SINK => harnesses.sink,
                SLOW => harnesses.slow,
                _ => harnesses.echo,
            };
            (r.target.clone(), addr)
        })
        .collect();
    std::fs::write(dir.join("map.json"), serde_json::to_vec(&map)?)?;
    let spoke = RoleProc::spawn("spoke", &dir, &[], "connected").await?;
    let mut env = Env {
        args: args.clone(),
        hub,
        spoke,
        info,
        harnesses,
        block: block(),
    };
    // The session is registered a moment after the spoke's Welcome.
    let first = env.first_echo()?;
    let probe = Via::Tunnel {
        ingress: env.info.ingress(),
        rev: first,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match probe.connect().await {
            Ok(mut s) => {
                let req = [7u8; 16];
                let mut back = [0u8; 16];
                ping(&mut s, &req, &mut back).await?;
                break;
            }
            Err(e) if Instant::now() > deadline => return Err(e.context("first tunnel")),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "tunnel-bench: {cores} cores (shared with other work), load average {} at start; {} build; hub pid {} (RSS {} KiB), spoke pid {} (RSS {} KiB), driver pid {}; ready in {:.1} s",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        if cfg!(debug_assertions) {
            "DEBUG"
        } else {
            "release"
        },
        env.hub.pid,
        rss_kib(env.hub.pid).unwrap_or(0),
        env.spoke.pid,
        rss_kib(env.spoke.pid).unwrap_or(0),
        std::process::id(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "path: client -CONNECT (HTTP/1.1, TLS 1.3)-> hub ingress -> link (TLS 1.3 mTLS, one HTTP/2 stream per connection, frames <= {} KiB, stream window 256 KiB) -> spoke -TCP-> Harness; direct: client -TCP-> the same Harness server",
        MAX_FRAME / KIB
    );

    let mut summary = Vec::new();
    let r = async {
        let phases = env.args.phases.clone();
        let on = |n: u8| phases.contains(&n);
        if on(3) {
            summary.push((3, setup(&mut env).await?));
        }
        if on(2) {
            summary.push((2, latency(&mut env).await?));
        }
        if on(4) {
            summary.push((4, held(&mut env).await?));
        }
        if on(1) {
            summary.push((1, throughput(&mut env).await?));
        }
        if on(5) {
            summary.push((5, isolation(&mut env).await?));
        }
        anyhow::Ok(())
    }
    .await;
    let Env { hub, spoke, .. } = env;
    spoke.stop().await;
    hub.stop().await;
    r?;
    summary.sort_by_key(|(n, _)| *n);
    println!("\nsummary (goal verdicts):");
    for (n, (ok, line)) in &summary {
        println!("  {n}. {} {line}", verdict(*ok));
    }
    println!("total {:.1} s", started.elapsed().as_secs_f64());
    if args.keep_dir.is_some() {
        println!("logs: {}", dir.display());
    }
    // A missed goal is a figure, not a failure: the run completed.
    Ok(true)
}

/// Phase 3: CONNECT → 200 → 1-byte echo, one connection at a time.
async fn setup(env: &mut Env) -> anyhow::Result<(bool, String)> {
    let n = env.args.setup_samples.max(1);
    let rev = env.first_echo()?;
    let tunnel = Via::Tunnel {
        ingress: env.info.ingress(),
        rev,
    };
    let direct = Via::Direct(env.harnesses.echo);
    let (mut t_us, mut d_us) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let cpu = Cpu::mark(env.hub.pid, env.spoke.pid);
    for i in 0..n + 20 {
        for (path, out) in [(&tunnel, &mut t_us), (&direct, &mut d_us)] {
            let t = Instant::now();
            let mut s = path.connect().await?;
            let mut b = [0u8; 1];
            s.write_all(b"x").await?;
            s.read_exact(&mut b).await?;
            // The first 20 warm up.
            if i >= 20 {
                out.push(t.elapsed().as_micros() as u64);
            }
        }
    }
    let cores = cpu.used();
    t_us.sort_unstable();
    d_us.sort_unstable();
    let p99 = quantile(&t_us, 0.99);
    let ok = p99 <= 5_000;
    println!(
        "\n3. connection setup (CONNECT -> 200 -> 1-byte echo), {n} sequential, tunnel and direct alternating:\n   tunnel p50 {} p99 {} max {}; direct (TCP connect + 1-byte echo) p50 {} p99 {}\n   goal p99 <= 5 ms (idle, one at a time): {} ({})\n   limit: a CONNECT costs the spoke a TunnelOpen on the link, a dial and a new HTTP/2 stream back (about one link round trip + a TCP connect), the credential's route from the store once a second (route cache TTL 1 s)",
        ms(quantile(&t_us, 0.5)),
        ms(p99),
        ms(*t_us.last().unwrap_or(&0)),
        ms(quantile(&d_us, 0.5)),
        ms(quantile(&d_us, 0.99)),
        verdict(ok),
        cores_note(cores),
    );
    Ok((
        ok,
        format!(
            "setup p50 {} p99 {} (goal p99 <= 5 ms)",
            ms(quantile(&t_us, 0.5)),
            ms(p99)
        ),
    ))
}

/// Phase 2: 1 KiB request/response on an open connection.
async fn latency(env: &mut Env) -> anyhow::Result<(bool, String)> {
    let n = env.args.latency_samples.max(1);
    let rev = env.first_echo()?;
    let mut tunnel = Via::Tunnel {
        ingress: env.info.ingress(),
        rev,
    }
    .connect()
    .await?;
    let mut direct = Via::Direct(env.harnesses.echo).connect().await?;
    let req: Vec<u8> = env.block[..KIB].to_vec();
    let mut back = vec![0u8; KIB];
    let (mut t_us, mut d_us) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..100 {
        ping(&mut tunnel, &req, &mut back).await?;
        ping(&mut direct, &req, &mut back).await?;
    }
    // Batches of 50 alternate, so both see the same machine.
    let cpu = Cpu::mark(env.hub.pid, env.spoke.pid);
    let mut left = n;
    while left > 0 {
        let k = left.min(50);
        for _ in 0..k {
            t_us.push(ping(&mut tunnel, &req, &mut back).await?);
        }
        for _ in 0..k {
            d_us.push(ping(&mut direct, &req, &mut back).await?);
        }
        left -= k;
    }
    let used = cpu.used();
    t_us.sort_unstable();
    d_us.sort_unstable();
    let (tp50, tp99, dp50, dp99) = (
        quantile(&t_us, 0.5),
        quantile(&t_us, 0.99),
        quantile(&d_us, 0.5),
        quantile(&d_us, 0.99),
    );
    let ok = tp99 <= dp99 + 1_000;
    println!(
        "\n2. 1 KiB request/response over an open connection, {n} each, idle otherwise:\n   tunnel p50 {} p99 {} max {}; direct p50 {} p99 {} max {}\n   added p50 {} p99 {}; goal tunnel p99 <= direct p99 + 1 ms (idle): {} ({})\n   limit: 4 more loopback hops (client->hub, TLS over TCP hub<->spoke both ways, spoke->Harness) and a task wake-up per hop in hub and spoke; one TLS record + HTTP/2 DATA frame + gRPC message per direction",
        ms(tp50),
        ms(tp99),
        ms(*t_us.last().unwrap_or(&0)),
        ms(dp50),
        ms(dp99),
        ms(*d_us.last().unwrap_or(&0)),
        ms(tp50.saturating_sub(dp50)),
        ms(tp99.saturating_sub(dp99)),
        verdict(ok),
        cores_note(used),
    );
    Ok((
        ok,
        format!(
            "1 KiB req/resp added latency p50 {} p99 {} (tunnel p99 {} vs direct p99 {}; goal <= +1 ms)",
            ms(tp50.saturating_sub(dp50)),
            ms(tp99.saturating_sub(dp99)),
            ms(tp99),
            ms(dp99)
        ),
    ))
}

/// Phase 4: many tunneled connections held at once.
async fn held(env: &mut Env) -> anyhow::Result<(bool, String)> {
    let n = env.args.connections;
    let revs = env.echo_revs();
    if revs.is_empty() {
        bail!("no revisions");
    }
    env.wait_open(0, Duration::from_secs(30)).await?;
    let (hub0, spoke0) = (rss_kib(env.hub.pid)?, rss_kib(env.spoke.pid)?);
    let sem = Arc::new(Semaphore::new(env.args.open_concurrency.max(1)));
    let req: Arc<Vec<u8>> = Arc::new(env.block[..KIB].to_vec());
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let path = Via::Tunnel {
            ingress: env.info.ingress(),
            rev: revs[i % revs.len()].clone(),
        };
        let (sem, req) = (sem.clone(), req.clone());
        set.spawn(async move {
            let _permit = sem.acquire_owned().await?;
            let mut s = path.connect().await?;
            let mut back = vec![0u8; KIB];
            ping(&mut s, &req, &mut back).await?;
            anyhow::Ok(s)
        });
    }
    let mut conns = Vec::with_capacity(n);
    let mut failed = Vec::new();
    while let Some(r) = set.join_next().await {
        match r? {
            Ok(s) => conns.push(s),
            Err(e) => failed.push(e),
        }
    }
    let opened_in = t.elapsed();
    if let Some(e) = failed.first() {
        bail!(
            "{} of {n} connections failed to open; first: {e:#}",
            failed.len()
        );
    }
    env.wait_open(n as u64, Duration::from_secs(30)).await?;
    let (hub1, spoke1) = (rss_kib(env.hub.pid)?, rss_kib(env.spoke.pid)?);
    tokio::time::sleep(Duration::from_secs(env.args.hold_seconds)).await;
    // All of them again, `open_concurrency` at a time.
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for mut s in conns {
        let (sem, req) = (sem.clone(), req.clone());
        set.spawn(async move {
            let _permit = sem.acquire_owned().await?;
            let mut back = vec![0u8; KIB];
            ping(&mut s, &req, &mut back).await?;
            anyhow::Ok(s)
        });
    }
    let mut conns = Vec::with_capacity(n);
    let mut echo_failed = 0usize;
    while let Some(r) = set.join_next().await {
        match r? {
            Ok(s) => conns.push(s),
            Err(_) => echo_failed += 1,
        }
    }
    let echoed_in = t.elapsed();
    let (hub2, spoke2) = (rss_kib(env.hub.pid)?, rss_kib(env.spoke.pid)?);
    let per = |base: u64, now: u64| (now.saturating_sub(base)) as f64 / n.max(1) as f64;
    let hub_per = per(hub0, hub1).max(per(hub0, hub2));
    let spoke_per = per(spoke0, spoke1).max(per(spoke0, spoke2));
    let ok = echo_failed == 0 && hub_per <= 64.0 && spoke_per <= 64.0;
    println!(
        "\n4. {n} tunneled connections over {} revisions ({} each), opened {} at a time in {:.2} s, held {} s:\n   hub RSS {hub0} -> {hub1} KiB opened -> {hub2} KiB after all echoed again: {:.1} / {:.1} KiB per connection\n   spoke RSS {spoke0} -> {spoke1} KiB opened -> {spoke2} KiB after all echoed again: {:.1} / {:.1} KiB per connection\n   still echoing after the hold: {} of {n} (in {:.2} s)\n   goal <= 64 KiB per connection each, all echo: {}\n   limit: per connection each side holds a frame buffer per pump (64 KiB, allocated; touched only as far as reads fill it) plus the read buffers of its sockets and HTTP/2 stream state; hub also the upgraded HTTP/1 connection",
        env.args.revisions.min(revs.len()),
        n.div_ceil(revs.len()),
        env.args.open_concurrency,
        opened_in.as_secs_f64(),
        env.args.hold_seconds,
        per(hub0, hub1),
        per(hub0, hub2),
        per(spoke0, spoke1),
        per(spoke0, spoke2),
        n - echo_failed,
        echoed_in.as_secs_f64(),
        verdict(ok),
    );
    drop(conns);
    if echo_failed > 0 {
        bail!("{echo_failed} of {n} held connections no longer echo");
    }
    env.wait_open(0, Duration::from_secs(60)).await?;
    Ok((
        ok,
        format!(
            "{n} held connections: hub {hub_per:.1} KiB, spoke {spoke_per:.1} KiB per connection (goal <= 64 each); {} of {n} still echo",
            n - echo_failed
        ),
    ))
}

/// Phase 1: one connection's throughput, tunnel and direct alternating.
async fn throughput(env: &mut Env) -> anyhow::Result<(bool, String)> {
    let reps = env.args.reps.max(1);
    let (one_way, echo) = (env.args.one_way_mib * MIB, env.args.echo_mib * MIB);
    let block = env.block.clone();
    let mut lines = Vec::new();
    let mut worst_ratio = f64::INFINITY;
    println!(
        "\n1. one connection's throughput, {reps} samples each (median), tunnel and direct alternating:"
    );
    for kind in ["Harness -> client", "client -> Harness", "echo"] {
        let (rev, direct, bytes) = match kind {
            "Harness -> client" => (env.rev(SOURCE)?, env.harnesses.source, one_way),
            "client -> Harness" => (env.rev(SINK)?, env.harnesses.sink, one_way),
            _ => (env.first_echo()?, env.harnesses.echo, echo),
        };
        let tunnel = Via::Tunnel {
            ingress: env.info.ingress(),
            rev,
        };
        let direct = Via::Direct(direct);
        let (mut t_mb, mut d_mb) = (Vec::new(), Vec::new());
        // CPU seconds summed over the samples: tunnel, direct.
        let (mut t_cpu, mut d_cpu) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            for (path, out, cpu_out) in [
                (&tunnel, &mut t_mb, &mut t_cpu),
                (&direct, &mut d_mb, &mut d_cpu),
            ] {
                let s = path.connect().await?;
                let cpu = Cpu::mark(env.hub.pid, env.spoke.pid);
                let d = match kind {
                    "Harness -> client" => download(s, bytes, &block).await?,
                    "client -> Harness" => upload(s, bytes, &block).await?,
                    _ => echo_bulk(s, bytes, &block).await?,
                };
                out.push(mb_s(bytes, d));
                cpu_out.push(cpu.used());
            }
        }
        let (t, d) = (median(&t_mb), median(&d_mb));
        let ratio = t / d;
        worst_ratio = worst_ratio.min(ratio);
        // CPU per byte moved: the tunnel's three processes, and the driver
        // alone for the direct path (client and Harness live in it).
        let per_byte = |uses: &[CpuUse], i: usize| {
            uses.iter().map(|u| u.secs[i]).sum::<f64>() * 1e9 / (bytes as f64 * reps as f64)
        };
        let (hub_ns, spoke_ns, drv_ns) = (
            per_byte(&t_cpu, 0),
            per_byte(&t_cpu, 1),
            per_byte(&t_cpu, 2),
        );
        let direct_ns = per_byte(&d_cpu, 2);
        let busiest = t_cpu
            .iter()
            .copied()
            .max_by(|a, b| a.others().total_cmp(&b.others()))
            .unwrap_or_default();
        println!(
            "   {kind:<18} {} MiB: tunnel {t:7.1} MB/s, direct {d:7.1} MB/s, ratio {ratio:.3} (goal >= 0.5: {}); tunnel samples {:?}, direct {:?}\n      CPU per byte: tunnel hub {hub_ns:.2} + spoke {spoke_ns:.2} + driver {drv_ns:.2} = {:.2} ns/B, direct {direct_ns:.2} ns/B ({}); tunnel median sample {}; other work up to {:.2} cores",
            bytes / MIB,
            verdict(ratio >= 0.5),
            t_mb.iter().map(|v| v.round() as u64).collect::<Vec<_>>(),
            d_mb.iter().map(|v| v.round() as u64).collect::<Vec<_>>(),
            hub_ns + spoke_ns + drv_ns,
            if direct_ns > 0.0 {
                format!("{:.1}x", (hub_ns + spoke_ns + drv_ns) / direct_ns)
            } else {
                "too short to count at 100 Hz".to_owned()
            },
            cores_note(t_cpu[t_cpu.len() / 2]),
            busiest.others(),
        );
        lines.push(format!("{kind} {t:.0} vs {d:.0} MB/s ({ratio:.3})"));
    }
    println!(
        "   limit: CPU per byte. Each byte crosses 3 sockets instead of 1 (client->hub in TLS, hub->spoke in TLS, spoke->Harness), is encrypted (AES-GCM) and decrypted twice, copied into a frame Vec, a gRPC message and an HTTP/2 DATA frame, in frames of <= {} KiB (each a gRPC message and a wake-up of the pump, channel and connection tasks), on 2 cores shared by hub, spoke, driver and other work.",
        MAX_FRAME / KIB
    );
    let ok = worst_ratio >= 0.5;
    Ok((
        ok,
        format!("one connection: {} (goal ratio >= 0.5)", lines.join("; ")),
    ))
}

/// Phase 5: other connections' throughput with and without slow receivers.
async fn isolation(env: &mut Env) -> anyhow::Result<(bool, String)> {
    let k = env.args.isolation_streams.max(1);
    let bytes = env.args.isolation_mib * MIB;
    let m = env.args.slow_receivers;
    let sink = env.tunnel(SINK)?;
    let slow = env.tunnel(SLOW)?;
    let block = env.block.clone();
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let mut stalled_bytes = Vec::new();
    // What a "with" round could not do: the others were blocked.
    let mut blocked = None;
    let cpu = Cpu::mark(env.hub.pid, env.spoke.pid);
    'rounds: for _ in 0..env.args.isolation_rounds {
        for slow_on in [false, true] {
            env.wait_open(0, Duration::from_secs(30)).await?;
            let written = Arc::new(AtomicU64::new(0));
            let mut writers = Vec::new();
            let round = async {
                if slow_on {
                    // Fill the slow connections until every buffer on their
                    // path is full and their writes block.
                    for _ in 0..m {
                        let mut s = slow.connect().await?;
                        let (written, block) = (written.clone(), block.clone());
                        writers.push(tokio::spawn(async move {
                            while s.write_all(&block[..MAX_FRAME]).await.is_ok() {
                                written.fetch_add(MAX_FRAME as u64, Ordering::Relaxed);
                            }
                        }));
                    }
                    let deadline = Instant::now() + Duration::from_secs(30);
                    let (mut last, mut stable) = (u64::MAX, 0);
                    while stable < 6 {
                        if Instant::now() > deadline {
                            bail!("the slow connections did not fill within 30 s");
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let now = written.load(Ordering::Relaxed);
                        // At `slow_rate` a 50 ms tick moves less than a frame.
                        stable = if now == last { stable + 1 } else { 0 };
                        last = now;
                    }
                    stalled_bytes.push(last);
                }
                let t = Instant::now();
                let mut set = tokio::task::JoinSet::new();
                for _ in 0..k {
                    let (sink, block) = (sink.clone(), block.clone());
                    set.spawn(async move { upload(sink.connect().await?, bytes, &block).await });
                }
                let all = async {
                    while let Some(r) = set.join_next().await {
                        r??;
                    }
                    anyhow::Ok(())
                };
                tokio::time::timeout(Duration::from_secs(60), all)
                    .await
                    .context("the uploads did not finish within 60 s")??;
                anyhow::Ok(mb_s(bytes * k as u64, t.elapsed()))
            }
            .await;
            if slow_on {
                // Closing the slow Harness' sockets ends those tunnels.
                env.harnesses.close_slow();
                for w in &writers {
                    w.abort();
                }
            }
            match (round, slow_on) {
                (Ok(rate), true) => with.push(rate),
                (Ok(rate), false) => without.push(rate),
                (Err(e), true) => {
                    blocked = Some(e);
                    break 'rounds;
                }
                (Err(e), false) => return Err(e),
            }
        }
    }
    let used = cpu.used();
    env.wait_open(0, Duration::from_secs(60)).await?;
    let in_flight = median(&stalled_bytes.iter().map(|&v| v as f64).collect::<Vec<_>>())
        / m.max(1) as f64
        / MIB as f64;
    println!(
        "\n5. slow-receiver isolation: {k} uploads of {} MiB each through the tunnel at once, with and without {m} connection(s) whose Harness reads {} B/s, {} rounds alternating:",
        bytes / MIB,
        env.args.slow_rate,
        env.args.isolation_rounds,
    );
    let limit = "   limit: a stalled tunnel holds its HTTP/2 stream window (256 KiB) until its reader drains it; tunnels ride their own connection to the hub whose window holds every tunnel the limits allow stalled (1024 x 256 KiB), so the others and the Connect stream (TunnelOpen) keep moving; what remains is CPU shared with the stalled ones";
    if let Some(e) = blocked {
        println!("   BLOCKED with {m} slow receivers: {e:#}\n   goal drop < 10%: MISS\n{limit}");
        return Ok((
            false,
            format!("slow receivers ({m}): the other connections were blocked ({e:#})"),
        ));
    }
    let (a, b) = (median(&without), median(&with));
    let drop_pct = (1.0 - b / a) * 100.0;
    let ok = drop_pct < 10.0;
    let spread = |v: &[f64]| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
        (hi - lo) / median(v) * 100.0
    };
    println!(
        "   slow connections filled until their writes block: {in_flight:.2} MiB in flight each (socket buffers + windows)\n   aggregate without {a:.1} MB/s, with {b:.1} MB/s (medians; without {:?}, with {:?}): drop {drop_pct:.1}%; run-to-run spread of the samples without: {:.0}% of their median\n   goal drop < 10%: {} ({} over the phase)\n{limit}",
        without.iter().map(|v| v.round() as u64).collect::<Vec<_>>(),
        with.iter().map(|v| v.round() as u64).collect::<Vec<_>>(),
        spread(&without),
        verdict(ok),
        cores_note(used),
    );
    Ok((
        ok,
        format!(
            "slow receivers ({m}): others {a:.0} -> {b:.0} MB/s, drop {drop_pct:.1}% (goal < 10%)"
        ),
    ))
}
