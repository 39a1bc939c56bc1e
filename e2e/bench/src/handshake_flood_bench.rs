//! Whether new spokes get in while one address floods the link port with
//! TLS handshakes that never finish (issue 31 item 15): spokes behind one
//! egress proxy share an address, so the flood comes from the spokes' own.
//!
//! The real `clawfed-hub serve` (SQLite). `--connections` connections from
//! 127.0.0.1 (the probes' address) hold the link port, each reopened as
//! soon as the hub closes it: a third send nothing, a third the start of a
//! ClientHello, a third a whole ClientHello (a real one, from rustls) and
//! then nothing (`--kinds` picks). The flood runs on a runtime of its own.
//! Meanwhile `--probes` new spokes (the spoke's own `Link`), one after
//! another, each enroll with a bootstrap token and connect; the bench
//! prints how long each took, until its session was welcomed.
//!
//! Goal: every probe enrolled and connected within `--goal-seconds`.
//!
//! `cargo build -p clawfed-hub -p clawfed-bench &&
//!  "$CARGO_TARGET_DIR"/debug/handshake-flood-bench [--hub-bin OLD]`

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use clawfed_bench::fleet::{Fleet, HubProc, Receipts, mint_tokens};
use clawfed_spoke::link::LinkConfig;
use clawfed_spoke::link::tls::HubAddress;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
#[command(name = "handshake-flood-bench")]
struct Args {
    /// Flood connections held open at once.
    #[arg(long, default_value_t = 2000)]
    connections: usize,
    /// What the flood's connections send, spread evenly: any of silent,
    /// partial, hello (comma separated).
    #[arg(long, default_value = "silent,partial,hello")]
    kinds: String,
    /// New spokes that enroll and connect under the flood, one after
    /// another.
    #[arg(long, default_value_t = 5)]
    probes: usize,
    /// How long a probe may take before it counts as locked out.
    #[arg(long, default_value_t = 30)]
    probe_timeout_seconds: u64,
    /// The goal: each probe enrolled and connected within this.
    #[arg(long, default_value_t = 3.0)]
    goal_seconds: f64,
    /// The hub binary (default: `clawfed-hub` next to this binary).
    #[arg(long)]
    hub_bin: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Connects and sends nothing.
    Silent,
    /// The first bytes of a ClientHello.
    Partial,
    /// A whole ClientHello, then nothing.
    Hello,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    clawfed_bench::cli::verdict_exit("handshake-flood-bench", run(Args::parse()).await, 2)
}

/// A ClientHello as a spoke sends it (rustls, TLS 1.3), record and all.
fn client_hello(ca_pem: &str) -> anyhow::Result<Vec<u8>> {
    let config = clawfed_spoke::link::tls::enroll_config(ca_pem)?;
    let name = rustls::pki_types::ServerName::IpAddress(rustls::pki_types::IpAddr::from(
        std::net::IpAddr::V4(Ipv4Addr::LOCALHOST),
    ));
    let mut conn = rustls::ClientConnection::new(config, name)?;
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello)?;
    }
    Ok(hello)
}

#[derive(Default)]
struct FloodCounts {
    /// TCP connections established.
    opened: AtomicU64,
    /// Of those, closed by the hub.
    closed_by_hub: AtomicU64,
}

/// Holds one flood connection open, reopened as soon as the hub closes it.
async fn flood_one(
    link: SocketAddr,
    first_bytes: Arc<Vec<u8>>,
    counts: Arc<FloodCounts>,
    stop: CancellationToken,
) {
    let mut sink = [0u8; 4096];
    while !stop.is_cancelled() {
        let Ok(mut tcp) = tokio::net::TcpStream::connect(link).await else {
            // The backlog is full: try again at once, as a flood does.
            tokio::task::yield_now().await;
            continue;
        };
        counts.opened.fetch_add(1, Ordering::Relaxed);
        if !first_bytes.is_empty() && tcp.write_all(&first_bytes).await.is_err() {
            counts.closed_by_hub.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = async { while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {} } => {
                counts.closed_by_hub.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

async fn run(a: Args) -> anyhow::Result<bool> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kinds = a
        .kinds
        .split(',')
        .map(|k| match k.trim() {
            "silent" => Ok(Kind::Silent),
            "partial" => Ok(Kind::Partial),
            "hello" => Ok(Kind::Hello),
            other => anyhow::bail!("--kinds: unknown kind {other:?} (silent, partial, hello)"),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let hub_bin = clawfed_bench::hub_bin(a.hub_bin.clone())?;
    let dir = tempfile::tempdir()?;
    let store =
        clawfed_hub::store::connect(&format!("sqlite://{}", dir.path().join("hub.db").display()))
            .await?;
    let names: Vec<String> = (0..a.probes).map(|i| format!("probe-{i}")).collect();
    let tokens = mint_tokens(&store, &names).await?;
    drop(store);
    let hub = HubProc::spawn(
        clawfed_bench::sqlite_hub(&hub_bin, dir.path(), &["serve"]),
        &dir.path().join("hub.log"),
        false,
    )
    .await?;
    let ca_pem = {
        let out = clawfed_bench::sqlite_hub(&hub_bin, dir.path(), &["cluster", "ca"])
            .output()
            .await?;
        anyhow::ensure!(out.status.success(), "clawfed-hub cluster ca failed");
        String::from_utf8(out.stdout)?
    };
    let hello = client_hello(&ca_pem)?;

    // The flood, on a runtime of its own.
    let counts = Arc::new(FloodCounts::default());
    let stop_flood = CancellationToken::new();
    let flood = {
        let (counts, stop, link, n) = (counts.clone(), stop_flood.clone(), hub.link, a.connections);
        let bytes: Vec<Arc<Vec<u8>>> = kinds
            .iter()
            .map(|k| {
                Arc::new(match k {
                    Kind::Silent => Vec::new(),
                    Kind::Partial => hello[..hello.len().min(20)].to_vec(),
                    Kind::Hello => hello.clone(),
                })
            })
            .collect();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("flood runtime");
            rt.block_on(async move {
                let mut set = tokio::task::JoinSet::new();
                for i in 0..n {
                    set.spawn(flood_one(
                        link,
                        bytes[i % bytes.len()].clone(),
                        counts.clone(),
                        stop.clone(),
                    ));
                }
                while set.join_next().await.is_some() {}
            });
        })
    };
    // The flood is up: every connection made at least once.
    let deadline = Instant::now() + Duration::from_secs(60);
    while counts.opened.load(Ordering::Relaxed) < a.connections as u64 {
        anyhow::ensure!(Instant::now() < deadline, "the flood did not connect");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let flood_start = (
        counts.opened.load(Ordering::Relaxed),
        counts.closed_by_hub.load(Ordering::Relaxed),
        Instant::now(),
    );

    let config = LinkConfig {
        hub: HubAddress::parse(&format!("https://{}", hub.link)).map_err(anyhow::Error::msg)?,
        ca_pem: ca_pem.clone(),
        cluster_name: String::new(),
        bootstrap_token: None,
        version: "handshake-flood-bench".into(),
        capabilities: vec!["applier:bench".into()],
        backoff_min: Duration::from_millis(200),
        backoff_max: Duration::from_secs(30),
    };
    let receipts = Arc::new(Receipts::default());
    let mut took = Vec::new();
    for (name, token) in names.iter().zip(tokens) {
        let stop = CancellationToken::new();
        let started = Instant::now();
        let fleet = Fleet::start(
            &config,
            vec![(name.clone(), Err(token))],
            &receipts,
            1,
            &stop,
        );
        let timeout = Duration::from_secs(a.probe_timeout_seconds);
        let welcomed = loop {
            if let Some(after) = fleet.spokes[0].welcomed_after(started) {
                break Some(after);
            }
            if started.elapsed() > timeout {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        match welcomed {
            Some(t) => println!("{name}: enrolled and connected in {:.2} s", t.as_secs_f64()),
            None => println!("{name}: not connected within {timeout:?}"),
        }
        took.push(welcomed);
        fleet.stop(&stop).await;
    }
    let (opened, closed, since) = flood_start;
    let secs = since.elapsed().as_secs_f64();
    let opened = counts.opened.load(Ordering::Relaxed) - opened;
    let closed = counts.closed_by_hub.load(Ordering::Relaxed) - closed;
    stop_flood.cancel();
    let _ = tokio::task::spawn_blocking(move || flood.join()).await;
    let metrics = hub.scrape().await.context("hub metrics")?;
    let handshakes: Vec<String> = metrics
        .lines()
        .filter(|l| l.starts_with("occ_link_handshakes_total"))
        .map(str::to_owned)
        .collect();

    let mut seconds: Vec<f64> = took
        .iter()
        .map(|t| t.map_or(f64::INFINITY, |d| d.as_secs_f64()))
        .collect();
    seconds.sort_by(f64::total_cmp);
    let median = seconds[seconds.len() / 2];
    let worst = seconds[seconds.len() - 1];
    let met = seconds.iter().all(|s| *s <= a.goal_seconds);
    println!(
        "conditions: hub {} ({}), SQLite, default link limits; flood {} connections from 127.0.0.1 (the probes' address), kinds {:?}, reopened at once; {} probes one after another, each a new spoke's enrollment and first connection",
        hub_bin.display(),
        clawfed_bench::profile_of(&hub_bin),
        a.connections,
        kinds,
        a.probes
    );
    println!(
        "flood during the probes: {opened} connections opened, {closed} closed by the hub ({:.0}/s)",
        closed as f64 / secs
    );
    for l in &handshakes {
        println!("hub: {l}");
    }
    println!(
        "probes: median {median:.2} s, worst {worst:.2} s; goal: every probe within {} s: {}",
        a.goal_seconds,
        if met { "MET" } else { "MISSED" }
    );
    Ok(met)
}
