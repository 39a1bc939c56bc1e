//! Work-queue throughput on a real PostgreSQL server and on SQLite.
//!
//! For each backend: enqueue N items, then drain them (a) with the hub's
//! real `Worker` (W concurrent workers, no-op handler) and (b) with W raw
//! claim/complete loops that time every claim. On PostgreSQL the same run
//! also measures `pgbench -N` against the same server and compares like with
//! like: the queue's transactions/s (one claim statement per batch of up to
//! `--batch` items, then one complete statement) against pgbench's
//! transactions/s (one UPDATE, one SELECT, one INSERT each). Items/s ÷
//! pgbench transactions/s is printed separately and labelled as such: it
//! is larger than the transaction ratio by the batch size.
//!
//! `cargo run --release -p clawfed-bench --bin queue-bench -- --items 100000`
//! (needs CLAWFED_TEST_DATABASE_URL; `eval "$(scripts/postgres.sh env)"`).

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use async_trait::async_trait;
use chrono::Utc;
use clap::Parser;
use clawfed_hub::auth::Action;
use clawfed_hub::model::WorkItem;
use clawfed_hub::store::{self, NewWork, Store, WorkLane};
use clawfed_hub::worker::backoff::Backoff;
use clawfed_hub::worker::{Handlers, WorkError, WorkHandler, Worker, WorkerConfig};
use sqlx::Connection;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
struct Args {
    /// Work items per run.
    #[arg(long, default_value_t = 100_000)]
    items: usize,
    /// Concurrent workers.
    #[arg(long, default_value_t = 4)]
    workers: u32,
    /// Items claimed per round trip.
    #[arg(long, default_value_t = 64)]
    batch: u32,
    /// Seconds of `pgbench -N`.
    #[arg(long, default_value_t = 15)]
    pgbench_seconds: u32,
    /// Skip the SQLite figures.
    #[arg(long)]
    no_sqlite: bool,
}

const KIND: &str = "bench.noop";

struct Noop;

#[async_trait]
impl WorkHandler for Noop {
    fn required_action(&self) -> Action {
        Action::Read
    }
    async fn handle(
        &self,
        _store: &dyn Store,
        _item: &WorkItem,
        _cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pg_url = std::env::var("CLAWFED_TEST_DATABASE_URL")
        .context("CLAWFED_TEST_DATABASE_URL is not set: eval \"$(scripts/postgres.sh env)\"")?;
    println!(
        "queue bench: {} items, {} workers, batch {}",
        args.items, args.workers, args.batch
    );

    let pg = run_backend("postgres", &fresh_schema(&pg_url).await?, &args).await?;
    let tps = pgbench(&pg_url, args.workers, args.pgbench_seconds)?;
    println!(
        "postgres  pgbench -N -c {} -j 2 -T {}: {tps:.0} transactions/s (each 1 UPDATE + 1 SELECT + 1 INSERT)",
        args.workers, args.pgbench_seconds
    );
    println!(
        "postgres  like with like, queue transactions/s ÷ pgbench transactions/s: Worker {:.2} ({:.0} ÷ {tps:.0}), raw loop {:.2} ({:.0} ÷ {tps:.0})",
        pg.worker.transactions_per_s() / tps,
        pg.worker.transactions_per_s(),
        pg.raw.transactions_per_s() / tps,
        pg.raw.transactions_per_s(),
    );
    println!(
        "postgres  claims/s (batches/s) ÷ pgbench transactions/s: Worker {:.2}, raw loop {:.2}",
        pg.worker.batches_per_s() / tps,
        pg.raw.batches_per_s() / tps,
    );
    println!(
        "postgres  items/s ÷ pgbench transactions/s (not like with like: up to {} items per claim): Worker {:.2}, raw loop {:.2}",
        args.batch,
        pg.worker.items_per_s() / tps,
        pg.raw.items_per_s() / tps,
    );

    if !args.no_sqlite {
        let dir = tempfile::tempdir()?;
        let url = format!("sqlite://{}", dir.path().join("bench.db").display());
        run_backend("sqlite", &url, &args).await?;
    }
    Ok(())
}

struct Figures {
    worker: Drain,
    raw: Drain,
}

/// What one drain did, counted where it happened.
struct Drain {
    elapsed: Duration,
    items: u64,
    /// Claims that returned work: one claim transaction per batch.
    batches: u64,
    /// Every queue transaction: claims (also empty ones, where counted)
    /// and the complete of each batch.
    transactions: u64,
}

impl Drain {
    fn per_s(&self, n: u64) -> f64 {
        n as f64 / self.elapsed.as_secs_f64()
    }
    fn items_per_s(&self) -> f64 {
        self.per_s(self.items)
    }
    fn batches_per_s(&self) -> f64 {
        self.per_s(self.batches)
    }
    fn transactions_per_s(&self) -> f64 {
        self.per_s(self.transactions)
    }
    /// `N items/s, B batches/s, T transactions/s (X s)`.
    fn rates(&self) -> String {
        format!(
            "{:.0} items/s, {:.0} claims/s ({:.1} items per claim on average), {:.0} queue transactions/s ({:.2} s)",
            self.items_per_s(),
            self.batches_per_s(),
            self.items as f64 / self.batches.max(1) as f64,
            self.transactions_per_s(),
            self.elapsed.as_secs_f64()
        )
    }
}

async fn run_backend(name: &str, url: &str, args: &Args) -> anyhow::Result<Figures> {
    let store: Arc<dyn Store> = Arc::new(store::connect(url).await?);

    let enqueue_time = enqueue(store.as_ref(), args.items).await?;
    println!(
        "{name:<9} enqueue: {:.0} items/s ({:.2} s)",
        args.items as f64 / enqueue_time.as_secs_f64(),
        enqueue_time.as_secs_f64()
    );
    let worker = drain_with_workers(store.clone(), args).await?;
    println!(
        "{name:<9} Worker drain: {} (transactions: claim + complete per batch; empty polls not counted)",
        worker.rates()
    );

    enqueue(store.as_ref(), args.items).await?;
    let (raw, mut claims) = drain_raw(store.clone(), args).await?;
    claims.sort_unstable();
    println!(
        "{name:<9} raw claim loop: {} (transactions: every claim, the last empty one per loop included, + complete per batch); claim latency p50 {:.2} ms, p99 {:.2} ms over {} claims",
        raw.rates(),
        percentile(&claims, 0.50).as_secs_f64() * 1e3,
        percentile(&claims, 0.99).as_secs_f64() * 1e3,
        claims.len()
    );
    Ok(Figures { worker, raw })
}

async fn enqueue(store: &dyn Store, n: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let now = Utc::now();
    let items: Vec<NewWork> = (0..n)
        .map(|i| NewWork {
            kind: KIND.into(),
            namespace_id: None,
            target: i.to_string(),
            payload: serde_json::json!({}),
            requested_by: None,
            max_attempts: 3,
            run_at: now,
            coalesce: false,
        })
        .collect();
    for chunk in items.chunks(1000) {
        store.enqueue_work(chunk).await?;
    }
    Ok(started.elapsed())
}

async fn wait_drained(store: &dyn Store) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        if store.work_stats(Utc::now()).await?.pending == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("queue did not drain within 30 minutes");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn drain_with_workers(store: Arc<dyn Store>, args: &Args) -> anyhow::Result<Drain> {
    let mut handlers = Handlers::default();
    handlers.register(KIND, Noop);
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..args.workers {
        let config = WorkerConfig {
            id: format!("bench-{i}"),
            batch_size: args.batch,
            lease: Duration::from_secs(60),
            poll_interval: Duration::from_millis(5),
            backoff: Backoff {
                base: Duration::from_millis(10),
                cap: Duration::from_secs(1),
            },
            health_interval: Duration::from_secs(3600),
            lane: WorkLane::All,
            periodic_recovery: true,
        };
        let worker = Worker::new(store.clone(), handlers.clone(), config);
        tasks.push(tokio::spawn(worker.run(shutdown.clone())));
    }
    wait_drained(store.as_ref()).await?;
    let elapsed = started.elapsed();
    shutdown.cancel();
    let (mut completed, mut batches) = (0, 0);
    for t in tasks {
        let totals = t.await?;
        completed += totals.completed;
        batches += totals.batches;
    }
    if completed != args.items as u64 {
        bail!(
            "workers completed {completed} items, expected {}",
            args.items
        );
    }
    Ok(Drain {
        elapsed,
        items: completed,
        batches,
        transactions: 2 * batches,
    })
}

async fn drain_raw(store: Arc<dyn Store>, args: &Args) -> anyhow::Result<(Drain, Vec<Duration>)> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..args.workers {
        let store = store.clone();
        let batch = args.batch;
        tasks.push(tokio::spawn(async move {
            let id = format!("raw-{i}");
            let mut claims = Vec::new();
            let (mut done, mut completes) = (0u64, 0u64);
            loop {
                let t = Instant::now();
                let items = store
                    .claim_work(
                        &id,
                        batch,
                        Duration::from_secs(60),
                        Utc::now(),
                        &WorkLane::All,
                    )
                    .await?;
                claims.push(t.elapsed());
                if items.is_empty() {
                    return anyhow::Ok((claims, done, completes));
                }
                let ids: Vec<String> = items.into_iter().map(|i| i.id).collect();
                done += store.complete_work(&id, &ids, Utc::now()).await?;
                completes += 1;
            }
        }));
    }
    let mut all = Vec::new();
    let (mut done, mut completes) = (0, 0);
    for t in tasks {
        let (claims, n, c) = t.await??;
        all.extend(claims);
        done += n;
        completes += c;
    }
    let elapsed = started.elapsed();
    if done != args.items as u64 {
        bail!("raw loops completed {done} items, expected {}", args.items);
    }
    let drain = Drain {
        elapsed,
        items: done,
        // Every non-empty claim is followed by exactly one complete.
        batches: completes,
        transactions: all.len() as u64 + completes,
    };
    Ok((drain, all))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// A schema of its own on the server, so the bench never touches test data.
async fn fresh_schema(base: &str) -> anyhow::Result<String> {
    let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(base).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&mut conn)
        .await?;
    let sep = if base.contains('?') { '&' } else { '?' };
    Ok(format!("{base}{sep}options[search_path]={schema}"))
}

/// Runs `pgbench -N` (simple updates, no branch/teller contention) against
/// its own database on the same server and returns the TPS it reports.
fn pgbench(url: &str, clients: u32, seconds: u32) -> anyhow::Result<f64> {
    let parsed = url::Url::parse(url)?;
    let host = parsed.host_str().unwrap_or("127.0.0.1").to_owned();
    let port = parsed.port().unwrap_or(5432).to_string();
    let user = parsed.username().to_owned();
    let password = parsed.password().unwrap_or_default().to_owned();
    let db = "clawfed_pgbench";
    let bin = pg_bin("pgbench")?;
    let run = |cmd: &mut Command| -> anyhow::Result<String> {
        let out = cmd
            .env("PGPASSWORD", &password)
            .output()
            .with_context(|| format!("running {cmd:?}"))?;
        if !out.status.success() {
            bail!(
                "{cmd:?} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let common = [
        "-h",
        host.as_str(),
        "-p",
        port.as_str(),
        "-U",
        user.as_str(),
    ];
    let _ = run(Command::new(pg_bin("dropdb")?)
        .args(common)
        .args(["--if-exists", db]));
    run(Command::new(pg_bin("createdb")?).args(common).arg(db))?;
    run(Command::new(&bin)
        .args(common)
        .args(["-i", "-q", "-s", "10", db]))?;
    let out = run(Command::new(&bin).args(common).args([
        "-N",
        "-c",
        &clients.to_string(),
        "-j",
        "2",
        "-T",
        &seconds.to_string(),
        db,
    ]))?;
    let tps = out
        .lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l.trim_start_matches("tps = ").split_whitespace().next())
        .and_then(|n| n.parse::<f64>().ok())
        .with_context(|| format!("no tps line in pgbench output:\n{out}"))?;
    Ok(tps)
}

fn pg_bin(name: &str) -> anyhow::Result<String> {
    let mut versions: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .context("PostgreSQL binaries not found under /usr/lib/postgresql")?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|p| p.display().to_string())
        .with_context(|| format!("{name} not found"))
}
