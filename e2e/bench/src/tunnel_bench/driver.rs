//! The driver: its Harness servers, the hub and spoke roles it starts, the
//! phases it runs in order, and the summary.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clawfed_bench::procfs::rss_kib;
use clawfed_proto::tunnel::MAX_FRAME;

use super::harnesses::{Harnesses, block};
use super::measure::verdict;
use super::observe::{http_get, metric};
use super::phases::{held, isolation, latency, setup, throughput};
use super::role_proc::RoleProc;
use super::traffic::{Via, ping};
use super::{Args, HubInfo, KIB, RevInfo, SINK, SLOW, SOURCE};

pub(super) struct Env {
    pub(super) args: Args,
    pub(super) hub: RoleProc,
    pub(super) spoke: RoleProc,
    pub(super) info: HubInfo,
    pub(super) harnesses: Harnesses,
    pub(super) block: Arc<Vec<u8>>,
}

impl Env {
    pub(super) fn rev(&self, agent: &str) -> anyhow::Result<RevInfo> {
        self.info
            .revisions
            .iter()
            .find(|r| r.agent == agent)
            .cloned()
            .with_context(|| format!("no revision of {agent}"))
    }

    pub(super) fn echo_revs(&self) -> Vec<RevInfo> {
        self.info
            .revisions
            .iter()
            .filter(|r| ![SOURCE, SINK, SLOW].contains(&r.agent.as_str()))
            .cloned()
            .collect()
    }

    pub(super) fn first_echo(&self) -> anyhow::Result<RevInfo> {
        self.echo_revs().first().cloned().context("no revisions")
    }

    pub(super) fn tunnel(&self, agent: &str) -> anyhow::Result<Via> {
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
    pub(super) async fn wait_open(&mut self, n: u64, within: Duration) -> anyhow::Result<()> {
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

pub(super) async fn driver(args: &Args) -> anyhow::Result<bool> {
    let (dir, _tmp) = clawfed_bench::kept_or_temp_dir(args.keep_dir.as_deref())?;
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
