//! Figures 1 and 2, failover and cross-replica dispatch: the spokes held on
//! replica A, work put for them from this process, then `kill -9` A.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clawfed_bench::fleet::{
    Fleet, KIND, Receipts, mint_tokens, outbox_latencies, quantile, spread_ms, unix_nanos,
};
use clawfed_hub::store::{self, PoolSettings, Store};
use clawfed_spoke::link::identity::Identity;
use sqlx::Row as _;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::diagnosis::{
    failover_diagnosis, hub_refusals, listen_drops, moved, offline_clusters, sessions_by_replica,
};
use super::front::Front;
use super::replicas::Replica;
use super::{Figure, Part, PartSet, link_config, load_average, verdict};

pub(super) async fn failover(part: &Part<'_>) -> anyhow::Result<Vec<Figure>> {
    let Part {
        a, profile, cores, ..
    } = *part;
    let phase = Duration::from_secs(a.phase_timeout_seconds);
    let PartSet {
        set, url, ca_pem, ..
    } = part.replica_set("main", "main", None).await?;
    // A first: it imports the CA the others load.
    let mut replicas = Vec::new();
    for tag in ["hub-a", "hub-b", "hub-c"]
        .into_iter()
        .take(a.replicas as usize)
    {
        replicas.push(set.start(tag).await?);
    }
    let front = Front::start(
        replicas[0].link_addr(),
        replicas[1..].iter().map(Replica::link_addr).collect(),
    )
    .await?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await?;

    // Every spoke enrolls and connects through the front: to A.
    let n = a.spokes;
    let store: Arc<dyn Store> = Arc::new(
        store::connect_with(
            &url,
            PoolSettings {
                max_connections: 16,
                ..PoolSettings::default()
            },
        )
        .await?,
    );
    let tag = format!("{:08x}", rand::random::<u32>());
    let names: Vec<String> = (0..n).map(|i| format!("f{tag}-{i:05}")).collect();
    let tokens = mint_tokens(store.as_ref(), &names).await?;
    let spokes: Vec<(String, Result<Identity, String>)> =
        names.into_iter().zip(tokens.into_iter().map(Err)).collect();
    let stop = CancellationToken::new();
    let _stop_guard = stop.clone().drop_guard();
    let receipts = Arc::new(Receipts::default());
    println!(
        "failover-bench: {n} spokes enroll and connect through the front at {}/s",
        a.ramp_per_second
    );
    let ramp = Instant::now();
    let fleet = Fleet::start(
        &link_config(&front.url(), &ca_pem, a)?,
        spokes,
        &receipts,
        a.ramp_per_second,
        &stop,
    );
    fleet
        .wait(phase, "every spoke connected", |f| f.connected() == n)
        .await?;
    let a_id = replicas[0].id.clone();
    let deadline = Instant::now() + phase;
    loop {
        let by = sessions_by_replica(&pool).await?;
        if by.get(&a_id).copied().unwrap_or(0) == n as i64 && by.len() == 1 {
            break;
        }
        if Instant::now() > deadline {
            bail!("the store does not show all {n} sessions on hub-a: {by:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "failover-bench: {n} sessions on hub-a ({a_id}) after {:.1?}",
        ramp.elapsed()
    );

    // 2. Dispatch from another process to the sessions on A.
    let m = a.dispatch_spokes.min(n).max(1);
    let clusters: Vec<String> = fleet.spokes[..m]
        .iter()
        .map(|s| s.identity.current().map(|i| i.cluster_id))
        .collect::<Option<_>>()
        .context("an enrolled spoke without identity")?;
    if let Ok(mut v) = receipts.us.lock() {
        v.clear();
    }
    let total = a.rate * a.seconds;
    println!(
        "failover-bench: dispatch: {total} items at {}/s to {m} spokes on hub-a, put from this process",
        a.rate
    );
    let window = 1024;
    let inflight = Arc::new(Semaphore::new(window));
    let errors = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    for i in 0..total {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / a.rate as f64)).await;
        let permit = inflight.clone().acquire_owned().await?;
        let (store, errors) = (store.clone(), errors.clone());
        let cluster = clusters[i as usize % m].clone();
        let target = format!("{tag}/{i}");
        tokio::spawn(async move {
            let spec = serde_json::json!({ "t": unix_nanos() }).to_string();
            if !matches!(
                store.outbox_put(&cluster, &target, KIND, 1, &spec).await,
                Ok(Some(_))
            ) {
                errors.fetch_add(1, Ordering::Relaxed);
            }
            drop(permit);
        });
    }
    let _all = tokio::time::timeout(phase, inflight.acquire_many(window as u32)).await;
    let offered_in = start.elapsed();
    let achieved = total as f64 / offered_in.as_secs_f64();
    // Every item acked (bounded).
    let drain = Instant::now();
    let pattern = format!("{tag}/%");
    loop {
        let left: i64 =
            sqlx::query("SELECT count(*) FROM outbox WHERE target LIKE $1 AND acked_at IS NULL")
                .bind(&pattern)
                .fetch_one(&pool)
                .await?
                .try_get(0)?;
        if left == 0 || drain.elapsed() > Duration::from_secs(60) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut acked = outbox_latencies(&url, &tag).await?;
    acked.sort_unstable();
    let mut arrived = receipts.us.lock().map(|v| v.clone()).unwrap_or_default();
    arrived.sort_unstable();
    let put_errors = errors.load(Ordering::Relaxed);
    let unacked = (total as usize).saturating_sub(acked.len());
    let p99 = quantile(&acked, 0.99);
    let dispatch = Figure {
        what: format!(
            "cross-replica dispatch→ack p50 / p99 ({} items acked)",
            acked.len()
        ),
        value: format!(
            "{} / {p99} ms enqueue→ack row (ms resolution); enqueue→spoke applier p50 / p99 {:.2} / {:.2} ms; offered {}/s, achieved {achieved:.0}/s, {put_errors} put errors, {unacked} unacked",
            quantile(&acked, 0.5),
            quantile(&arrived, 0.5) as f64 / 1000.0,
            quantile(&arrived, 0.99) as f64 / 1000.0,
            a.rate,
        ),
        goal: "p99 ≤ 50 ms at 1,000 items/s".into(),
        verdict: verdict(p99 <= 50 && unacked == 0 && put_errors == 0, a.rate >= 1000),
        conditions: format!(
            "enqueued with Store::outbox_put from this process (what replica B's LinkHandle::send does; hub-a is woken by PostgreSQL NOTIFY only) for {m} spokes whose sessions are on hub-a, {} other idle spokes connected; {} replicas; hub {profile}; {cores} cores; load average {}",
            n - m,
            a.replicas,
            load_average()
        ),
    };

    // 1. kill -9 A.
    let before = fleet.totals();
    let mut replicas = replicas.into_iter();
    let hub_a = replicas.next().context("hub-a")?;
    let survivors: Vec<Replica> = replicas.collect();
    let attempts_before: Vec<u64> = fleet
        .spokes
        .iter()
        .map(|s| s.status.borrow().attempts)
        .collect();
    let mut refusals_before = Vec::new();
    for r in &survivors {
        refusals_before.push(hub_refusals(r).await);
    }
    let drops_before = listen_drops();
    println!("failover-bench: kill -9 hub-a (pid {})", hub_a.proc.pid);
    let killed = tokio::time::Instant::now();
    hub_a.proc.kill9().await?;
    let mut clients_all = None;
    let mut store_all = None;
    let mut max_offline = 0i64;
    let survivor_ids: Vec<String> = survivors.iter().map(|r| r.id.clone()).collect();
    let mut last = BTreeMap::new();
    // When each Link was first seen without its session (50 ms polls).
    let mut lost: Vec<Option<Duration>> = vec![None; n];
    while clients_all.is_none() || store_all.is_none() {
        for (s, l) in fleet.spokes.iter().zip(lost.iter_mut()) {
            if l.is_none() && (!s.connected() || s.welcomed_after(killed).is_some()) {
                *l = Some(killed.elapsed());
            }
        }
        if killed.elapsed() > phase {
            bail!(
                "failover: after {phase:?}: {} of {n} spokes welcomed again, sessions {last:?}; {}",
                fleet
                    .spokes
                    .iter()
                    .filter(|s| s.welcomed_after(killed).is_some())
                    .count(),
                fleet.summary()
            );
        }
        if clients_all.is_none()
            && fleet
                .spokes
                .iter()
                .all(|s| s.welcomed_after(killed).is_some())
        {
            clients_all = Some(killed.elapsed());
        }
        if store_all.is_none() {
            last = sessions_by_replica(&pool).await?;
            let on_survivors: i64 = survivor_ids
                .iter()
                .map(|id| last.get(id).copied().unwrap_or(0))
                .sum();
            if on_survivors == n as i64 {
                store_all = Some(killed.elapsed());
            }
        }
        max_offline = max_offline.max(offline_clusters(&pool).await?);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (clients_all, store_all) = (
        clients_all.unwrap_or_default(),
        store_all.unwrap_or_default(),
    );
    let per_spoke = fleet.welcomed_after_ms(killed);
    let mut lost: Vec<u64> = lost
        .into_iter()
        .flatten()
        .map(|d| d.as_millis() as u64)
        .collect();
    lost.sort_unstable();
    let after = fleet.totals();
    let drops_after = listen_drops();
    let mut refused = Vec::new();
    for (r, before) in survivors.iter().zip(&refusals_before) {
        refused.push(format!(
            "{}: {}",
            r.tag,
            moved(before, &hub_refusals(r).await)
        ));
    }
    let diagnosis = format!(
        "{}; hub side: {}; kernel accept queue (machine-wide) ListenOverflows {} ListenDrops {}",
        failover_diagnosis(&fleet, &attempts_before, killed),
        refused.join("; "),
        drops_after.0 - drops_before.0,
        drops_after.1 - drops_before.1,
    );
    println!("failover-bench: where the failover time went: {diagnosis}");
    let spread: Vec<String> = survivors
        .iter()
        .map(|r| format!("{} {}", r.tag, last.get(&r.id).copied().unwrap_or(0)))
        .collect();
    let all = clients_all.max(store_all);
    let failover = Figure {
        what: format!("failover of {n} spokes after kill -9 of their replica"),
        value: format!(
            "all back in {all:.1?} (every Link welcomed again {clients_all:.1?}; every session row live on a survivor {store_all:.1?}); per spoke p50 / p99 / max {} (its Link saw the session end after p50 / p99 {} / {} ms); sessions now {}; {} failed attempts and {} go-aways (the {n} broken sessions included); clusters shown offline at most {max_offline}; a last failure: {}; {diagnosis}",
            spread_ms(&per_spoke),
            quantile(&lost, 0.5),
            quantile(&lost, 0.99),
            spread.join(", "),
            after.failures - before.failures,
            after.go_aways - before.go_aways,
            after.last_failure.as_deref().unwrap_or("none"),
        ),
        goal: "all 3,000 back in ≤ 10 s".into(),
        verdict: verdict(all <= Duration::from_secs(10), n >= 3000),
        conditions: format!(
            "{} replicas on one PostgreSQL; the spokes dial one front address (TCP forwarder in this process) that sends to hub-a while it accepts, else to the survivors in turn; reconnect: a lost session retries within [0, 1 s], failed attempts back off 200 ms..{} s; heartbeat {} s; maxConcurrentHandshakes {} per replica; store polled every 50 ms; hub {profile}; {cores} cores; load average {}",
            a.replicas,
            a.backoff_max_seconds,
            a.heartbeat_seconds,
            a.max_concurrent_handshakes,
            load_average()
        ),
    };
    fleet.stop(&stop).await;
    pool.close().await;
    drop(front);
    drop(survivors);
    Ok(vec![failover, dispatch])
}
