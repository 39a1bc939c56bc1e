//! Figure 3, idle: database transactions per second of replicas with no
//! spoke, at the default safety polls and at `--tuned-poll-ms`.

use std::time::{Duration, Instant};

use super::{Figure, Part, PartSet, load_average, verdict};

pub(super) async fn idle(part: &Part<'_>) -> anyhow::Result<Vec<Figure>> {
    let Part {
        a,
        pg,
        profile,
        cores,
        ..
    } = *part;
    let sets = [("default", None), ("tuned", Some(a.tuned_poll_ms))];
    let mut running = Vec::new();
    for (label, poll) in sets {
        let PartSet { set, name, .. } = part
            .replica_set(&format!("idle_{label}"), &format!("idle-{label}"), poll)
            .await?;
        let mut replicas = Vec::new();
        for i in 0..a.replicas {
            replicas.push(set.start(&format!("idle-{label}-{i}")).await?);
        }
        running.push((label, poll, name, replicas));
    }
    println!(
        "failover-bench: idle: {} replicas at the default safety polls and {} at {} ms, no spoke; warm-up {} s, then {} s",
        a.replicas, a.replicas, a.tuned_poll_ms, a.idle_warmup_seconds, a.idle_seconds
    );
    // Start-up work (migrations, CA import) is not idle work.
    tokio::time::sleep(Duration::from_secs(a.idle_warmup_seconds)).await;
    let mut before = Vec::new();
    for (_, _, name, _) in &running {
        before.push(pg.xacts(name).await?);
    }
    let t0 = Instant::now();
    // The measured window: nothing of this process touches these databases.
    tokio::time::sleep(Duration::from_secs(a.idle_seconds)).await;
    let wall = t0.elapsed().as_secs_f64();
    let mut figures = Vec::new();
    for ((label, poll, name, replicas), x0) in running.iter().zip(before) {
        let x1 = pg.xacts(name).await?;
        let per = (x1 - x0) as f64 / wall / replicas.len() as f64;
        let setting = match poll {
            None => format!(
                "the default safety polls (worker {} ms, link {} ms, watch {} ms; the default)",
                clawfed_hub::worker::DEFAULT_SAFETY_POLL.as_millis(),
                clawfed_hub::watch::WatchSettings::default().safety_poll_ms,
                clawfed_hub::link::LinkConfig::default()
                    .poll_interval
                    .as_millis()
            ),
            Some(ms) => format!(
                "worker.safetyPollMs = link.safetyPollMs = watch.safetyPollMs = {ms} (not the default)"
            ),
        };
        figures.push(Figure {
            what: format!("idle database transactions per replica, {label}"),
            value: format!(
                "{per:.2}/s ({} in {wall:.1} s over {} replicas; {setting})",
                x1 - x0,
                replicas.len()
            ),
            goal: "≤ 1/s per replica".into(),
            verdict: verdict(per <= 1.0, true),
            conditions: format!(
                "pg_stat_database xact_commit + xact_rollback of the replicas' own database; worker, link (heartbeat {} s: lease renewal and sweep every {} s), pipeline and tunnel on; no spoke; hub {profile}; {cores} cores; load average {}",
                a.heartbeat_seconds,
                a.heartbeat_seconds as f64 / 2.0,
                load_average()
            ),
        });
    }
    drop(running);
    Ok(figures)
}
