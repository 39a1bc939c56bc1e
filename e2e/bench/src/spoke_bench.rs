//! `spoke-bench`: one spoke (the clawfed-spoke `Executor`), one execution
//! cluster, N Harness revisions (default 1,000), each an ordinary Deployment
//! whose Pod kwok makes Ready. Prints:
//! - apiserver write requests per revision (a counting layer on the spoke's
//!   kube client, by verb),
//! - LIST requests: at start-up, during the run, and during an idle window
//!   after all revisions are ready (periodic LISTs; goal 0),
//! - readiness report latency after the Pod turns Ready, p50/p99: the parent
//!   process watches the Pods on its own connection and timestamps the event
//!   in which each Pod turns Ready; the spoke child timestamps the moment its
//!   ready report is on the report channel (goal p99 <= 100 ms),
//! - spoke RSS at N watched Pods (the child process alone; goal <= 32 MiB),
//! - where the spoke's requests went: answer times by verb and resource,
//! - Kubernetes alone, first, in the same run: the same Harness objects
//!   applied by a plain client at the same concurrency, timed to all Pods
//!   Ready, and the ratio of the two rates (goal >= 0.8).
//!
//! Usage: `spoke-bench [--cluster exec-b] [--revisions 1000] [--no-direct]`; the cluster
//! must be up (`e2e/bench/spoke-bench.sh` starts and stops exec-b around it).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::Parser;
use clawfed_bench::kubeapi::{Counts, config};
use clawfed_bench::load;
use clawfed_proto::link::v1::{Report, Work, report};
use clawfed_proto::naming::data_plane_namespace;
use clawfed_proto::work::{WorkSpec, target};
use clawfed_spoke::config::SpokeConfig;
use clawfed_spoke::exec::Executor;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::DeleteParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

#[derive(Debug, Parser)]
struct Args {
    /// Cluster name under the e2e clusters dir.
    #[arg(long, default_value = "exec-b")]
    cluster: String,
    /// Harness revisions.
    #[arg(long, default_value_t = 1000)]
    revisions: usize,
    /// Concurrent applies.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Idle window after all are ready, in which LISTs are counted.
    #[arg(long, default_value_t = 10)]
    idle_seconds: u64,
    /// Skip the "Kubernetes alone" reference runs.
    #[arg(long)]
    no_direct: bool,
    /// Run as the spoke child (internal).
    #[arg(long)]
    child: Option<String>,
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

/// The spoke: applies the work and prints `READY <agent> <nanos>` per first
/// ready report, then the counters, then waits for stdin to close.
async fn child(args: &Args, id: &str) -> Result<()> {
    let counts = Arc::new(Counts::default());
    let cfg = config(&args.cluster).await?;
    let client = counts.client(cfg)?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Report>(8192);
    let exec = Arc::new(Executor::new(client, SpokeConfig::default(), tx));
    let ns = data_plane_namespace(id);
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let o2 = out.clone();
    let n = args.revisions;
    let (all_ready_tx, all_ready_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut ready = std::collections::HashSet::new();
        let mut all_ready_tx = Some(all_ready_tx);
        while let Some(r) = rx.recv().await {
            if let Some(report::Body::Readiness(o)) = &r.body
                && o.ready
            {
                let t = now_nanos();
                let agent = r.target.split('/').nth(2).unwrap_or_default().to_string();
                if ready.insert(agent.clone())
                    && let Ok(mut w) = o2.lock()
                {
                    let _ = writeln!(w, "READY {agent} {t}");
                    let _ = w.flush();
                }
                if ready.len() == n
                    && let Some(tx) = all_ready_tx.take()
                {
                    let _ = tx.send(());
                }
            }
        }
    });
    let tenant = load::tenant_of("bench", id);
    let nsw = load::namespace(&tenant, id, n * 2 + 10);
    let r = exec
        .apply(&load::work(
            1,
            target::namespace(id),
            WorkSpec::NamespaceEnsure(nsw),
        ))
        .await?;
    if !r.applied {
        bail!("namespace.ensure: {}", r.reason);
    }
    let before = counts.snapshot();
    let works: Vec<Work> = (0..n)
        .map(|i| {
            let mut h = load::harness(&tenant, id, &ns, i);
            h.requirement_labels =
                BTreeMap::from([("sandbox.clawfed.io/class".into(), "standard".into())]);
            load::apply(i as u64 + 2, h)
        })
        .collect();
    counts.reset_timings();
    let start = Instant::now();
    let mut apply_ms = load::apply_all(&exec, works, args.concurrency).await?;
    let applied_in = start.elapsed();
    apply_ms.sort_by(|a, b| a.total_cmp(b));
    let timings = counts.timings();
    let after_apply = counts.snapshot();
    tokio::time::timeout(Duration::from_secs(600), all_ready_rx)
        .await
        .context("all ready")??;
    let ready_in = start.elapsed();
    let at_ready = counts.snapshot();
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let idle = counts.snapshot();
    let verbs = counts.by_verb();
    if let Ok(mut w) = out.lock() {
        let _ = writeln!(w, "APPLIED_SECONDS {:.2}", applied_in.as_secs_f64());
        let _ = writeln!(
            w,
            "APPLY_MS p50 {:.1} ms, p99 {:.1} ms",
            clawfed_bench::percentile(&apply_ms, 50.0),
            clawfed_bench::percentile(&apply_ms, 99.0)
        );
        for t in &timings {
            let _ = writeln!(
                w,
                "TIMING {:<40} {:>6} requests, p50 {:>6.1} ms, p99 {:>7.1} ms, sum {:>7.1} s",
                t.key, t.count, t.p50_ms, t.p99_ms, t.total_s
            );
        }
        let _ = writeln!(w, "READY_SECONDS {:.2}", ready_in.as_secs_f64());
        let _ = writeln!(w, "WRITES_HARNESS {}", after_apply.writes - before.writes);
        let _ = writeln!(w, "GETS_HARNESS {}", after_apply.gets - before.gets);
        let _ = writeln!(w, "LISTS_STARTUP {}", before.lists);
        let _ = writeln!(w, "LISTS_RUN {}", at_ready.lists - before.lists);
        let _ = writeln!(w, "LISTS_IDLE {}", idle.lists - at_ready.lists);
        let _ = writeln!(w, "WATCHES {}", idle.watches);
        let _ = writeln!(w, "VERBS {verbs:?}");
        let _ = writeln!(w, "WATCHED_PODS {}", exec.observer().watched_pods());
        let _ = writeln!(w, "DONE");
        let _ = w.flush();
    }
    // Stay alive (watching) until the parent has read our RSS.
    let _ = tokio::task::spawn_blocking(|| {
        let mut s = String::new();
        let _ = std::io::stdin().read_line(&mut s);
    })
    .await;
    exec.shutdown();
    Ok(())
}

/// What Kubernetes alone does with the same load (see [`load::apply_direct`]).
struct Direct {
    with_record: bool,
    ready_in: Duration,
    applied_in: Duration,
    apply_ms: Vec<f64>,
    writes: u64,
}

/// Kubernetes alone ([`load::DirectRun`]): the same Harness objects applied
/// by a plain client at the same concurrency, timed until every Pod is
/// Ready; the namespace is gone before clawfed's run.
async fn direct(args: &Args, with_record: bool) -> Result<Direct> {
    let plain = Client::try_from(config(&args.cluster).await?)?;
    let mut run = load::DirectRun::prepare(
        plain,
        "direct",
        args.revisions,
        BTreeMap::from([("sandbox.clawfed.io/class".into(), "standard".into())]),
    )
    .await?;
    let counts = Arc::new(Counts::default());
    let client = counts.client(config(&args.cluster).await?)?;
    let times = run
        .run(
            &client,
            args.concurrency,
            with_record,
            Duration::from_secs(600),
        )
        .await;
    run.cleanup().await;
    let times = times?;
    Ok(Direct {
        with_record,
        ready_in: times.ready_in,
        applied_in: times.applied_in,
        apply_ms: times.apply_ms,
        writes: counts.snapshot().writes,
    })
}

/// The Pods of `pods`' namespace as the watch delivers them, Ready ones only.
fn ready_pods(pods: Api<Pod>) -> impl futures::Stream<Item = Pod> {
    watcher(pods, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .take_while(|r| std::future::ready(r.is_ok()))
        .filter_map(|r| std::future::ready(r.ok().filter(load::pod_ready)))
}

async fn parent(args: &Args) -> Result<()> {
    // Both references first, in the same cluster state clawfed gets.
    let mut references = Vec::new();
    if !args.no_direct {
        references.push(direct(args, true).await?);
        references.push(direct(args, false).await?);
    }
    let client = Client::try_from(config(&args.cluster).await?)?;
    let id = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let ns = data_plane_namespace(&id);
    // Independent observer: when does each Pod turn Ready?
    let seen: Arc<std::sync::Mutex<HashMap<String, u128>>> = Default::default();
    let s2 = seen.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let watch = tokio::spawn(async move {
        let mut stream = std::pin::pin!(ready_pods(pods));
        while let Some(p) = stream.next().await {
            let t = now_nanos();
            let agent = load::agent_of(&p);
            if let Ok(mut m) = s2.lock() {
                m.entry(agent).or_insert(t);
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let exe = std::env::current_exe()?;
    let mut child = std::process::Command::new(exe)
        .args([
            "--cluster",
            &args.cluster,
            "--revisions",
            &args.revisions.to_string(),
        ])
        .args([
            "--concurrency",
            &args.concurrency.to_string(),
            "--idle-seconds",
            &args.idle_seconds.to_string(),
        ])
        .args(["--child", &id])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let pid = child.id();
    let stdout = child.stdout.take().context("child stdout")?;
    let mut reported: HashMap<String, u128> = HashMap::new();
    let mut timing_lines: Vec<String> = Vec::new();
    let mut figures: BTreeMap<String, String> = BTreeMap::new();
    let lines = tokio::task::spawn_blocking(move || {
        let mut v = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let done = line == "DONE";
            v.push(line);
            if done {
                break;
            }
        }
        v
    })
    .await?;
    let rss = clawfed_bench::procfs::rss_kib(pid).ok();
    drop(child.stdin.take());
    let _ = child.wait();
    watch.abort();
    for line in lines {
        let mut parts = line.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("READY"), Some(agent), Some(t)) => {
                reported.insert(agent.into(), t.parse().unwrap_or_default());
            }
            (Some("TIMING"), Some(v), rest) => {
                timing_lines.push(rest.map_or(v.to_string(), |r| format!("{v} {r}")));
            }
            (Some(k), Some(v), rest) if k != "READY" => {
                figures.insert(k.into(), rest.map_or(v.to_string(), |r| format!("{v} {r}")));
            }
            _ => {}
        }
    }
    let seen = seen.lock().map(|m| m.clone()).unwrap_or_default();
    let mut lat: Vec<f64> = reported
        .iter()
        .filter_map(|(a, t)| seen.get(a).map(|s| (*t as f64 - *s as f64) / 1e6))
        .collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    let n = args.revisions as f64;
    let writes: f64 = figures
        .get("WRITES_HARNESS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    println!(
        "spoke-bench: {} Harness revisions, one spoke, cluster {}",
        args.revisions, args.cluster
    );
    println!(
        "  applied in                      {} s (concurrency {})",
        figures.get("APPLIED_SECONDS").map_or("?", |s| s),
        args.concurrency
    );
    println!(
        "  all ready reported in           {} s",
        figures.get("READY_SECONDS").map_or("?", |s| s)
    );
    println!(
        "  one apply (Executor::apply)     {}",
        figures.get("APPLY_MS").map_or("?", |s| s)
    );
    println!(
        "  apiserver writes per revision   {:.2} ({} writes)",
        writes / n,
        writes
    );
    println!(
        "  GETs per revision               {:.2}",
        figures
            .get("GETS_HARNESS")
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
            / n
    );
    println!(
        "  requests by verb                {}",
        figures.get("VERBS").map_or("?", |s| s)
    );
    println!(
        "  LISTs: start-up {}, during run {}, idle {} s window {} (periodic LISTs; goal 0)",
        figures.get("LISTS_STARTUP").map_or("?", |s| s),
        figures.get("LISTS_RUN").map_or("?", |s| s),
        args.idle_seconds,
        figures.get("LISTS_IDLE").map_or("?", |s| s)
    );
    println!(
        "  watch requests                  {}",
        figures.get("WATCHES").map_or("?", |s| s)
    );
    println!(
        "  readiness report latency after Pod Ready: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} samples; goal p99 <= 100 ms)",
        clawfed_bench::percentile(&lat, 50.0),
        clawfed_bench::percentile(&lat, 99.0),
        lat.last().copied().unwrap_or(f64::NAN),
        lat.len()
    );
    println!(
        "  spoke RSS at {} watched Pods     {:.1} MiB (goal <= 32 MiB)",
        figures.get("WATCHED_PODS").map_or("?", |s| s),
        rss.unwrap_or_default() as f64 / 1024.0
    );
    println!("  where the spoke's requests went (request to answer, by verb and resource):");
    for line in &timing_lines {
        println!("    {line}");
    }
    let ready_s: f64 = figures
        .get("READY_SECONDS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    for d in &references {
        let direct_s = d.ready_in.as_secs_f64();
        println!(
            "  Kubernetes alone, same run and cluster: the same {} Harnesses' objects ({}) server-side applied by a plain client, one object after another per Harness, concurrency {}:",
            args.revisions,
            if d.with_record {
                "the five the spoke writes: ServiceAccount, Secret, Service, Deployment and the desired-state record Secret"
            } else {
                "the workload's four: ServiceAccount, Secret, Service, Deployment; no record"
            },
            args.concurrency
        );
        println!(
            "    applied in {:.2} s, all Pods Ready in {:.2} s ({:.1} revisions/s); one Harness p50 {:.1} ms, p99 {:.1} ms; {:.2} writes per revision",
            d.applied_in.as_secs_f64(),
            direct_s,
            n / direct_s,
            clawfed_bench::percentile(&d.apply_ms, 50.0),
            clawfed_bench::percentile(&d.apply_ms, 99.0),
            d.writes as f64 / n
        );
        println!(
            "    clawfed: all ready reported in {:.2} s ({:.1} revisions/s)",
            ready_s,
            n / ready_s
        );
        let ratio = direct_s / ready_s;
        println!(
            "  ratio: clawfed revisions/s / Kubernetes alone revisions/s ({} objects; each from its first write to all {} Ready) = {:.2}{}",
            if d.with_record { 5 } else { 4 },
            args.revisions,
            ratio,
            if d.with_record {
                if ratio >= 0.8 {
                    " (goal >= 0.8: met)"
                } else {
                    " (goal >= 0.8: NOT met)"
                }
            } else {
                " (for reference: what the record costs)"
            }
        );
    }
    let _ = Api::<Namespace>::all(client)
        .delete(&ns, &DeleteParams::background())
        .await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    match args.child.clone() {
        Some(id) => child(&args, &id).await,
        None => parent(&args).await,
    }
}
