//! The printed tables and verdicts: the phases' figures, the hub's SQL
//! statements and work items, clawfed beside Kubernetes alone.

use anyhow::Result;
use clawfed_bench::percentile as pct;
use sqlx::Connection;

use super::direct::Direct;
use super::phases::{Sample, Throughput};
use super::{Args, OVERHEAD_GOAL_MS, RATIO_GOAL, sorted};

fn row(name: &str, v: Vec<f64>, goal: &str) {
    let v = sorted(v);
    println!(
        "| {name:<58} | {:>8.1} | {:>8.1} | {:>8.1} | {goal:<16} |",
        pct(&v, 50.0),
        pct(&v, 99.0),
        v.last().copied().unwrap_or(f64::NAN)
    );
}

fn header(title: &str) {
    println!();
    println!("{title}");
    println!(
        "| {:<58} | {:>8} | {:>8} | {:>8} | {:<16} |",
        "figure (ms)", "p50", "p99", "max", "goal"
    );
    println!(
        "|{}|{}|{}|{}|{}|",
        "-".repeat(60),
        "-".repeat(10),
        "-".repeat(10),
        "-".repeat(10),
        "-".repeat(18)
    );
}

fn sample_rows(s: &[Sample], goal_overhead: &str, conditions: &str, gateways: bool) {
    let col = |f: fn(&Sample) -> f64| s.iter().map(f).collect::<Vec<_>>();
    row(
        "deploy request -> revision Active (total)",
        col(|x| x.total),
        "-",
    );
    if gateways {
        row(
            "Kubernetes: Harness Deployment -> last Pod Ready (H, GW)",
            col(|x| x.kube),
            "-",
        );
        row(
            "  Gateway (control): Deployment -> Pod Ready",
            col(|x| x.gateway),
            "-",
        );
    } else {
        row(
            "Kubernetes: Harness Deployment -> Pod Ready",
            col(|x| x.kube),
            "-",
        );
    }
    row("  Harness Pod created -> Pod Ready", col(|x| x.pod), "-");
    row(
        "clawfed overhead (total - Kubernetes)",
        col(Sample::overhead),
        goal_overhead,
    );
    row(
        "  deploy -> Deployment created (hub, link, spoke apply)",
        col(|x| x.before),
        "-",
    );
    row(
        "    of which deploy -> first pipeline pass (worker pickup)",
        col(|x| x.first_pass),
        "-",
    );
    if gateways {
        row(
            "  Gateway ensure queued -> applied (control, own lane)",
            col(|x| x.gateway_ensure),
            "-",
        );
    }
    row(
        "  last Pod Ready -> Active (spoke report, link, hub pass)",
        col(|x| x.after),
        "-",
    );
    let p50 = |v: Vec<f64>| pct(&sorted(v), 50.0);
    println!(
        "overhead / total at p50: {:.2} ({:.1} of {:.1} ms) [{conditions}]",
        p50(col(Sample::overhead)) / p50(col(|x| x.total)),
        p50(col(Sample::overhead)),
        p50(col(|x| x.total))
    );
}

/// The conditions a figure was measured under, printed beside each verdict.
pub(super) struct Conditions {
    pub(super) gateways: bool,
    pub(super) clusters: String,
    pub(super) backend: &'static str,
    pub(super) poll: u64,
}

impl Conditions {
    pub(super) fn at(&self, at_once: &str) -> String {
        format!(
            "Gateways {}, clusters {}, {at_once}, {}, worker poll {} ms",
            if self.gateways { "on" } else { "off" },
            self.clusters,
            self.backend,
            self.poll
        )
    }
}

pub(super) fn report(
    args: &Args,
    cond: &Conditions,
    warm: &[Sample],
    lat: &[Sample],
    tp: &Throughput,
) {
    println!();
    println!(
        "pipeline-bench: one in-process hub ({}, worker poll {} ms, {}), {} spokes over mTLS ({}), embedded-openclaw, placement alternating",
        cond.backend,
        cond.poll,
        if cond.gateways {
            format!("Gateways on in {}", args.control)
        } else {
            "Gateways disabled".to_owned()
        },
        args.clusters.len(),
        args.clusters.join(", ")
    );
    let one = cond.at("1 deploy at a time");
    let many = cond.at(&format!("{} deploys at once", tp.samples.len()));
    header(&format!(
        "Latency: {} Agents deployed one at a time (revision GET polled every {} ms)",
        lat.len(),
        args.poll_ms
    ));
    sample_rows(
        lat,
        &format!("overhead p50<={OVERHEAD_GOAL_MS}"),
        &one,
        cond.gateways,
    );
    println!(
        "first deploy per cluster (namespace provisioning, not in the figures above): {}",
        warm.iter()
            .map(|s| format!("{:.0} ms", s.total))
            .collect::<Vec<_>>()
            .join(", ")
    );
    header(&format!(
        "Throughput: {} Agents deployed at once (Active time as recorded by the hub)",
        tp.samples.len()
    ));
    sample_rows(&tp.samples, "-", &many, cond.gateways);
    row("POST deploy response under load", tp.post_ms.clone(), "-");
    println!(
        "all {} deploy requests answered in {:.0} ms; first deploy -> last Active {:.0} ms",
        tp.samples.len(),
        tp.deployed_in,
        tp.window_ms
    );
    println!(
        "revisions/s: {:.1} over the whole window, {:.1} sustained (10% -> 90% of completions) [{many}]",
        tp.rate, tp.sustained
    );
    println!(
        "CPU, first deploy -> last Active: {} (the hub, both spokes, the bench's watches)",
        tp.cpu
    );
    println!(
        "Harness Deployments created per second by each spoke: {}",
        tp.apply_rates
            .iter()
            .map(|(c, r)| format!("{c} {r:.1}/s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The hub's SQL statements over the throughput phase, per revision (the
/// phase includes the bench's own reads of each revision at its end).
pub(super) fn statement_rows(by_label: &[(String, u64, f64)], revisions: usize) {
    let total: u64 = by_label.iter().map(|(_, n, _)| n).sum();
    println!(
        "hub SQL statements over the throughput phase: {total} ({:.1} per revision); the most frequent (per revision, client seconds in all):",
        total as f64 / revisions as f64
    );
    for (label, n, secs) in by_label.iter().take(25) {
        println!(
            "  {:>7.2}  {secs:>7.2} s  {label}",
            *n as f64 / revisions as f64
        );
    }
}

/// The hub's work items of the whole run by kind and state, per
/// revision of the throughput phase, and how many targets they name.
pub(super) async fn work_item_rows(url: &str, revisions: usize) -> Result<()> {
    use sqlx::Row as _;
    let mut c = sqlx::AnyConnection::connect(url).await?;
    let rows = sqlx::query(
        "SELECT kind, state, COUNT(*) AS n, COUNT(DISTINCT target) AS targets, \
         CAST(SUM(attempts) AS BIGINT) AS attempts FROM work_items GROUP BY kind, state \
         ORDER BY n DESC",
    )
    .fetch_all(&mut c)
    .await?;
    println!("hub work items of the run (kind, state: per revision, targets, attempts):");
    for r in rows {
        let n: i64 = r.try_get("n")?;
        println!(
            "  {:<20} {:<8} {:>7.2}  {:>5}  {:>6}",
            r.try_get::<String, _>("kind")?,
            r.try_get::<String, _>("state")?,
            n as f64 / revisions as f64,
            r.try_get::<i64, _>("targets")?,
            r.try_get::<Option<i64>, _>("attempts")?.unwrap_or(0)
        );
    }
    c.close().await?;
    Ok(())
}

/// clawfed's throughput beside Kubernetes alone, and the ratio goal.
pub(super) fn reference_rows(d: &Direct, tp: &Throughput, cond: &Conditions) {
    let gateways = match &d.gateways {
        Some(g) => format!(
            "; at the same time {} Gateways' objects (ServiceAccount, transport Secret, PVC, NetworkPolicy, Service, Deployment; the hub's builders, no route) applied to the control cluster as the hub's ServiceAccount, {} at a time (worker.gatewayBatchSize)",
            g.count, g.concurrency
        ),
        None if cond.gateways => "; no Gateway".to_owned(),
        None => String::new(),
    };
    header(&format!(
        "Kubernetes alone (reference, before clawfed's run): {} Harnesses' objects (ServiceAccount, Secret, Service, Deployment, record Secret{}) applied as the spoke's ServiceAccount, {} at a time per cluster, clusters at once{gateways}",
        d.count,
        if cond.gateways {
            "; no workspace PVC"
        } else {
            ""
        },
        d.concurrency
    ));
    row(
        "first write -> each Harness Pod Ready (ms)",
        d.ready_ms.clone(),
        "-",
    );
    if let Some(g) = &d.gateways {
        row(
            "first write -> each Gateway Pod Ready, control (ms)",
            g.ready_ms.clone(),
            "-",
        );
        row(
            "one Gateway's six applies, control (ms)",
            g.apply_ms.clone(),
            "-",
        );
        println!(
            "Kubernetes alone: all Gateway objects written {:.0} ms, all Gateway Pods Ready {:.0} ms after the first write",
            g.applied_in.as_secs_f64() * 1e3,
            g.ready_in.as_secs_f64() * 1e3
        );
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let e = &tp.ensures;
        println!(
            "Gateways, clawfed beside Kubernetes alone: last Gateway applied {:.0} ms after the first deploy / {:.0} ms after the first write = {:.2}; one Gateway's apply, mean {:.0} ms (gateway.ensure, hub metric: {} ok, {} failed) / {:.0} ms = {:.2} [{} at a time]",
            tp.gateways_applied_in,
            g.applied_in.as_secs_f64() * 1e3,
            tp.gateways_applied_in / (g.applied_in.as_secs_f64() * 1e3),
            e.ok_seconds * 1e3 / e.ok,
            e.ok,
            e.failed,
            mean(&g.apply_ms),
            e.ok_seconds * 1e3 / e.ok / mean(&g.apply_ms),
            g.concurrency
        );
    }
    println!(
        "Kubernetes alone: all Pods{} Ready {:.0} ms after the first write: {:.1} revisions/s",
        if d.gateways.is_some() {
            " (Harness and Gateway)"
        } else {
            ""
        },
        d.ready_in.as_secs_f64() * 1e3,
        d.rate()
    );
    println!(
        "CPU, Kubernetes alone: {} (the direct clients and the bench's watches)",
        d.cpu
    );
    let ratio = tp.rate / d.rate();
    println!(
        "goal ratio >= {RATIO_GOAL}: {} (clawfed {:.1} revisions/s, first deploy -> last Active, / Kubernetes alone {:.1} revisions/s, first write -> last Pod Ready = {ratio:.2}) [{}]",
        if ratio >= RATIO_GOAL {
            "met"
        } else {
            "NOT met"
        },
        tp.rate,
        d.rate(),
        cond.at(&format!("{} deploys at once", tp.samples.len()))
    );
}
