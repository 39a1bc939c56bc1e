//! Figure 4, deploy throughput: one replica vs two on one database.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use clawfed_bench::fleet::{Fleet, Receipts, mint_admin_token, mint_tokens};
use clawfed_hub::client::{ClientResult, HubClient};
use clawfed_hub::store;
use sqlx::Row as _;
use tokio_util::sync::CancellationToken;

use super::{Args, Figure, Part, PartSet, link_config, load_average};

/// Revisions by phase in the deploy database.
async fn phases(pool: &sqlx::PgPool) -> anyhow::Result<BTreeMap<String, i64>> {
    let rows = sqlx::query("SELECT phase, count(*) FROM agent_revisions GROUP BY phase")
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get::<String, _>(0)?, r.try_get::<i64, _>(1)?)))
        .collect()
}

/// Deploys `names` (drafts created first, not timed) spread over the
/// replicas' APIs and waits until `active_before + names.len()` revisions
/// are active. Returns revisions/s from the first deploy request to the
/// last one seen active (polled every 50 ms) and the time.
async fn deploy_batch(
    a: &Args,
    replicas: &[HubClient],
    pool: &sqlx::PgPool,
    names: &[String],
    active_before: i64,
) -> anyhow::Result<(f64, Duration)> {
    use futures::StreamExt;
    let created: Vec<ClientResult<serde_json::Value>> =
        futures::stream::iter(names.iter().enumerate())
            .map(|(i, n)| async move {
                let body = serde_json::json!({
                    "name": n,
                    "spec": { "harnessKind": "embedded-openclaw", "image": "bench:1" }
                });
                replicas[i % replicas.len()]
                    .post("/namespaces/bench/agents", &body)
                    .await
            })
            .buffer_unordered(a.deploy_concurrency)
            .collect()
            .await;
    for r in created {
        r?;
    }
    let started = Instant::now();
    let deployed: Vec<ClientResult<serde_json::Value>> =
        futures::stream::iter(names.iter().enumerate())
            .map(|(i, n)| async move {
                let path = format!("/namespaces/bench/agents/{n}/deploy");
                replicas[i % replicas.len()]
                    .post(&path, &serde_json::json!({}))
                    .await
            })
            .buffer_unordered(a.deploy_concurrency)
            .collect()
            .await;
    for r in deployed {
        r?;
    }
    let want = active_before + names.len() as i64;
    let limit = Duration::from_secs(a.phase_timeout_seconds);
    loop {
        let p = phases(pool).await?;
        let active = p.get("active").copied().unwrap_or(0);
        if active >= want {
            let took = started.elapsed();
            return Ok((names.len() as f64 / took.as_secs_f64(), took));
        }
        let failed = p.get("failed").copied().unwrap_or(0);
        if failed > 0 || started.elapsed() > limit {
            let reason: Option<String> =
                sqlx::query("SELECT reason FROM agent_revisions WHERE phase = 'failed' LIMIT 1")
                    .fetch_optional(pool)
                    .await?
                    .and_then(|r| r.try_get(0).ok());
            bail!(
                "deploys: {active} of {want} active after {:?}, phases {p:?}; a failure: {reason:?}",
                started.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(super) async fn deploys(part: &Part<'_>) -> anyhow::Result<Figure> {
    let Part {
        a, profile, cores, ..
    } = *part;
    let PartSet {
        set, url, ca_pem, ..
    } = part.replica_set("deploy", "deploy", None).await?;
    let one = set.start("deploy-1").await?;
    let store = store::connect(&url).await?;
    let pool = sqlx::PgPool::connect(&url).await?;
    let admin_secret = mint_admin_token(&store, "failover-bench").await?;
    let names: Vec<String> = (0..a.deploy_spokes.max(1))
        .map(|i| format!("deploy-{i}"))
        .collect();
    let tokens = mint_tokens(&store, &names).await?;
    drop(store);
    let stop = CancellationToken::new();
    let _stop_guard = stop.clone().drop_guard();
    let config = link_config(&one.link_url(), &ca_pem, a)?;
    let fleet = Fleet::start(
        &config,
        names.into_iter().zip(tokens.into_iter().map(Err)).collect(),
        &Arc::new(Receipts::default()),
        a.ramp_per_second,
        &stop,
    );
    fleet
        .wait(
            Duration::from_secs(a.phase_timeout_seconds),
            "the deploy spokes connected",
            |f| f.connected() == f.len(),
        )
        .await?;
    let rest = HubClient::new(&one.rest_url(), Some(admin_secret))?;
    let _: serde_json::Value = rest
        .post("/namespaces", &serde_json::json!({ "name": "bench" }))
        .await?;
    println!(
        "failover-bench: deploy: {} Agents through 1 replica",
        a.deploys
    );
    let first: Vec<String> = (0..a.deploys).map(|i| format!("one{i:04}")).collect();
    let (rate1, took1) = deploy_batch(a, std::slice::from_ref(&rest), &pool, &first, 0).await?;
    let load1 = load_average();
    let two = set.start("deploy-2").await?;
    println!(
        "failover-bench: deploy: {} Agents through 2 replicas",
        a.deploys
    );
    let second: Vec<String> = (0..a.deploys).map(|i| format!("two{i:04}")).collect();
    let (rate2, took2) = deploy_batch(
        a,
        &[rest.clone(), rest.at(&two.rest_url())],
        &pool,
        &second,
        a.deploys as i64,
    )
    .await?;
    let load2 = load_average();
    fleet.stop(&stop).await;
    pool.close().await;
    drop((one, two));
    Ok(Figure {
        what: "deploy throughput, two replicas ÷ one replica".into(),
        value: format!(
            "{:.2} (revisions active per second: two replicas {rate2:.1}/s ({} in {took2:.1?}) ÷ one replica {rate1:.1}/s ({} in {took1:.1?}))",
            rate2 / rate1,
            a.deploys,
            a.deploys
        ),
        goal: "- (reported)".into(),
        verdict: "reported",
        conditions: format!(
            "deploy → active through the real pipeline (placement, namespace, Harness, readiness, activation; Gateways off, path probe and startup status off: no process behind the simulated spokes), {} requests in flight spread over the replicas' REST APIs; the spokes' sessions on replica 1; the replicas' workers share the queue; hub {profile}; {cores} cores; load average {load1} (one) / {load2} (two)",
            a.deploy_concurrency
        ),
    })
}
