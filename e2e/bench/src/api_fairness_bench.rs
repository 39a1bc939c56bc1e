//! One tenant flooding the API against another tenant's latency (issue 36,
//! part 3). The hub is `clawfed-hub serve`, a child process, on SQLite (the
//! embedded default) or a fresh PostgreSQL database (`--postgres`).
//!
//! Tenant B reads at a steady `--b-rate` (open loop: each request is sent
//! on schedule whether or not the one before has been answered, so a slow
//! hub cannot hide its slowness by slowing B down): `GET` of its
//! Configurations. Tenant A floods with `--flooders` connections writing
//! Configurations at `--a-rate` a second in all, ignoring `Retry-After`
//! (the worst neighbour); the same offered rate on both hubs, so the
//! limit is the only difference. Four phases of `--seconds` each,
//! on two hubs: without `api.rateLimit`, B alone then B beside A's flood;
//! with it (`--tenant-rate`, burst twice that), the same two. The verdict
//! compares like with like: B's p99 beside the flood divided by B's p99
//! alone on the same hub.
//!
//! `cargo build --release -p clawfed-bench --bin api-fairness-bench -p clawfed-hub --bin clawfed-hub &&
//!  "$CARGO_TARGET_DIR"/release/api-fairness-bench [--postgres]`

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use clawfed_bench::hubconf::{HubYaml, spawn_hub};
use clawfed_hub::auth::Role;
use clawfed_hub::client::HubClient;
use clawfed_hub::store::{self, NewToken, Store};
use reqwest::Method;
use serde_json::json;

#[derive(Debug, Parser)]
#[command(name = "api-fairness-bench")]
struct Args {
    /// Tenant B's requests per second (open loop), well inside its own
    /// tenant's limit.
    #[arg(long, default_value_t = 20)]
    b_rate: u64,
    /// Tenant A's concurrent flooding connections.
    #[arg(long, default_value_t = 32)]
    flooders: usize,
    /// Tenant A's offered writes per second, over all its connections,
    /// the same on both hubs (each connection waits for its answer, so
    /// a slower hub is offered fewer).
    #[arg(long, default_value_t = 2000)]
    a_rate: u64,
    /// Seconds each phase is measured.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// `api.rateLimit.perTenant.perSecond` of the limited hub (burst
    /// twice that); each token's own limit is set above it.
    #[arg(long, default_value_t = 50)]
    tenant_rate: u32,
    /// Use a fresh database on the PostgreSQL server at
    /// CLAWFED_TEST_DATABASE_URL instead of SQLite.
    #[arg(long)]
    postgres: bool,
    /// The hub binary (default: `clawfed-hub` next to this binary).
    #[arg(long)]
    hub_bin: Option<PathBuf>,
    /// Goal: with the limits, B's p99 beside the flood over B's p99 alone.
    #[arg(long, default_value_t = 2.0)]
    goal_ratio: f64,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    clawfed_bench::cli::verdict_exit(
        "api-fairness-bench",
        clawfed_bench::cli::until_interrupted(run(Args::parse())).await,
        2,
    )
}

/// What one phase measured.
struct Phase {
    /// B's latencies, ms, sorted.
    b_ms: Vec<f64>,
    /// B's requests not answered 200 (refused or failed).
    b_errors: u64,
    /// A's writes admitted and refused, per second.
    a_admitted_per_s: f64,
    a_refused_per_s: f64,
}

impl Phase {
    fn p(&self, q: f64) -> f64 {
        clawfed_bench::percentile(&self.b_ms, q)
    }
}

async fn run(a: Args) -> anyhow::Result<bool> {
    anyhow::ensure!(
        a.b_rate > 0 && a.seconds > 0 && a.tenant_rate > 0 && a.a_rate > 0 && a.flooders > 0,
        "--b-rate, --a-rate, --flooders, --seconds and --tenant-rate must be at least 1"
    );
    let hub_bin = clawfed_bench::hub_bin_built_by(
        a.hub_bin.clone(),
        "cargo build --release -p clawfed-hub --bin clawfed-hub",
    )?;
    println!(
        "api-fairness-bench: hub {} ({}), {}, B {} req/s open loop (GET its Configurations), \
         A {} connections writing Configurations at {} req/s offered, {} s a phase",
        hub_bin.display(),
        clawfed_bench::profile_of(&hub_bin),
        if a.postgres { "PostgreSQL" } else { "SQLite" },
        a.b_rate,
        a.flooders,
        a.a_rate,
        a.seconds
    );
    let limits = format!(
        "  rateLimit:\n    perSubject: {{ perSecond: {s}, burst: {sb} }}\n    perTenant: {{ perSecond: {t}, burst: {tb} }}\n",
        s = a.tenant_rate * 4,
        sb = a.tenant_rate * 8,
        t = a.tenant_rate,
        tb = a.tenant_rate * 2,
    );
    let mut rows = Vec::new();
    for (name, api_extra) in [("no limits", String::new()), ("api.rateLimit", limits)] {
        let dir = tempfile::tempdir()?;
        let (db_url, pg) =
            clawfed_bench::pg::hub_database(a.postgres, dir.path(), "fairness").await?;
        let result = on_one_hub(&a, &hub_bin, dir.path(), &db_url, &api_extra).await;
        if let Some(pg) = &pg {
            clawfed_bench::pg::drop_database(pg).await;
        }
        let (alone, flooded) = result?;
        rows.push((name, alone, flooded));
    }

    println!();
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10} {:>12} {:>12}",
        "hub",
        "B p50 ms",
        "B p99 ms",
        "+A p50 ms",
        "+A p99 ms",
        "p99 ratio",
        "B errors",
        "A admitted/s",
        "A refused/s"
    );
    for (name, alone, flooded) in &rows {
        println!(
            "{:<14} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>12.2} {:>10} {:>12.0} {:>12.0}",
            name,
            alone.p(50.0),
            alone.p(99.0),
            flooded.p(50.0),
            flooded.p(99.0),
            flooded.p(99.0) / alone.p(99.0),
            alone.b_errors + flooded.b_errors,
            flooded.a_admitted_per_s,
            flooded.a_refused_per_s
        );
    }
    println!(
        "(p99 ratio = B's p99 beside A's flood / B's p99 alone, on the same hub; \
         B errors = B's requests not answered 200, both phases)"
    );
    let (_, alone, flooded) = &rows[1];
    let ratio = flooded.p(99.0) / alone.p(99.0);
    let met = ratio <= a.goal_ratio && alone.b_errors + flooded.b_errors == 0;
    println!(
        "goal: with api.rateLimit (perTenant {}/s), B's p99 beside {} flooding connections \
         <= {:.1}x B's p99 alone and no B request refused: {:.2}x, {} B errors: {}",
        a.tenant_rate,
        a.flooders,
        a.goal_ratio,
        ratio,
        alone.b_errors + flooded.b_errors,
        if met { "MET" } else { "MISSED" }
    );
    Ok(met)
}

/// B alone, then B beside A's flood, on one hub with `api_extra` lines.
async fn on_one_hub(
    a: &Args,
    hub_bin: &Path,
    dir: &Path,
    db_url: &str,
    api_extra: &str,
) -> anyhow::Result<(Phase, Phase)> {
    // Tokens straight in the store, as `clawfed-hub token create` does
    // (the tenants' once their namespaces exist).
    let store: Arc<dyn Store> = Arc::new(store::connect(db_url).await?);
    let root = clawfed_bench::fleet::mint_admin_token(store.as_ref(), "fairness-root").await?;

    let config = HubYaml {
        api_extra,
        sections: "tunnel:\n  enabled: false\npipeline:\n  enabled: false\n",
        ..HubYaml::new(db_url)
    }
    .write(dir)?;
    let hub = spawn_hub(hub_bin, &config, &dir.join("hub.log")).await?;
    let rest = hub.rest.clone();
    let admin = HubClient::new(&rest, Some(root))?;
    for ns in ["tenant-a", "tenant-b"] {
        admin
            .call::<serde_json::Value>(Method::POST, "/namespaces", Some(json!({ "name": ns })))
            .await?;
    }
    let token_a = mint(store.as_ref(), "tenant-a", "tenant-a").await?;
    let token_b = mint(store.as_ref(), "tenant-b", "tenant-b").await?;
    drop(store);
    let b = HubClient::new(&rest, Some(token_b))?;
    for i in 0..20 {
        b.call::<serde_json::Value>(
            Method::POST,
            "/namespaces/tenant-b/configurations",
            Some(json!({ "name": format!("b-{i}"), "data": { "model": "m" } })),
        )
        .await?;
    }
    let window = Duration::from_secs(a.seconds);
    let alone = phase(a, &b, None, window).await?;
    let a_client = HubClient::new(&rest, Some(token_a))?;
    let flooded = phase(a, &b, Some(&a_client), window).await?;
    Ok((alone, flooded))
}

async fn mint(store: &dyn Store, name: &str, ns: &str) -> anyhow::Result<String> {
    let minted = clawfed_hub::auth::mint_token();
    store
        .create_token(&NewToken {
            name: name.into(),
            namespace: Some(ns.into()),
            role: Role::Deployer,
            hash: minted.hash,
            expires_at: None,
        })
        .await?;
    Ok(minted.secret)
}

/// B at its rate for `window`, with A flooding when `flood` is given.
async fn phase(
    a: &Args,
    b: &HubClient,
    flood: Option<&HubClient>,
    window: Duration,
) -> anyhow::Result<Phase> {
    let stop = Arc::new(AtomicBool::new(false));
    let admitted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let mut flooders = tokio::task::JoinSet::new();
    if let Some(client) = flood {
        for f in 0..a.flooders {
            let (client, stop) = (client.clone(), stop.clone());
            let (admitted, refused) = (admitted.clone(), refused.clone());
            let pace = Duration::from_secs_f64(a.flooders as f64 / a.a_rate as f64);
            flooders.spawn(async move {
                let mut ticker = tokio::time::interval(pace);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    ticker.tick().await;
                    i += 1;
                    let body = json!({ "name": format!("a-{f}-{i}"), "data": { "model": "m" } });
                    match client
                        .exchange(
                            Method::POST,
                            "/namespaces/tenant-a/configurations",
                            Some(&body),
                            None,
                        )
                        .await
                    {
                        Ok((s, _)) if s.as_u16() == 201 => admitted.fetch_add(1, Ordering::Relaxed),
                        Ok((s, _)) if s.as_u16() == 429 => refused.fetch_add(1, Ordering::Relaxed),
                        Ok(_) | Err(_) => 0,
                    };
                }
            });
        }
        // The flood reaches its pace before B is measured.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let (before_admitted, before_refused) = (
        admitted.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    let started = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / a.b_rate as f64);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut requests = tokio::task::JoinSet::new();
    while started.elapsed() < window {
        ticker.tick().await;
        let b = b.clone();
        requests.spawn(async move {
            let sent = Instant::now();
            let answer = b
                .exchange(
                    Method::GET,
                    "/namespaces/tenant-b/configurations",
                    None,
                    None,
                )
                .await;
            let ok = matches!(&answer, Ok((s, _)) if s.as_u16() == 200);
            (sent.elapsed().as_secs_f64() * 1000.0, ok)
        });
    }
    let measured = started.elapsed().as_secs_f64();
    let (a_admitted, a_refused) = (
        admitted.load(Ordering::Relaxed) - before_admitted,
        refused.load(Ordering::Relaxed) - before_refused,
    );
    let mut b_ms = Vec::new();
    let mut b_errors = 0;
    while let Some(done) = requests.join_next().await {
        let (ms, ok) = done?;
        b_ms.push(ms);
        b_errors += u64::from(!ok);
    }
    stop.store(true, Ordering::Relaxed);
    while flooders.join_next().await.is_some() {}
    b_ms.sort_by(f64::total_cmp);
    Ok(Phase {
        b_ms,
        b_errors,
        a_admitted_per_s: a_admitted as f64 / measured,
        a_refused_per_s: a_refused as f64 / measured,
    })
}
