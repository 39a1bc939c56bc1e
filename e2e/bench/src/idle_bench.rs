//! What an idle hub costs: the release `clawfed-hub serve` with the worker,
//! the link and the pipeline on, no spoke and no load, watched for
//! `--seconds` after a warm-up. Prints its CPU (utime + stime from
//! `/proc/<pid>/stat`, as a share of one core) and RSS, and the database
//! work it does while idle: on PostgreSQL the transactions committed in its
//! database (`pg_stat_database.xact_commit`; every statement outside an
//! explicit transaction is one), on SQLite the growth of the database and
//! WAL files (an idle hub writes nothing).
//!
//! Goal (issue 17): at most 0.1% of a core. Compare builds with `--hub-bin`:
//!
//! `cargo build --release -p clawfed-hub -p clawfed-bench &&
//!  "$CARGO_TARGET_DIR"/release/idle-bench [--postgres] [--hub-bin OLD]`

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use clawfed_bench::MIGRATE_ON_START;
use clawfed_bench::procfs::{cpu_secs, rss_kib};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

#[derive(Debug, Parser)]
#[command(name = "idle-bench")]
struct Args {
    /// Seconds the idle hub is measured.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Seconds after start-up before the measurement (migrations, key and
    /// CA creation are not idle work). 15: PostgreSQL's idle backends report
    /// their start-up transactions up to 10 s late (PGSTAT_IDLE_INTERVAL);
    /// with 5 a run counted them (4.13/s instead of 0.90/s).
    #[arg(long, default_value_t = 15)]
    warmup_seconds: u64,
    /// Use a fresh database on the PostgreSQL server at
    /// CLAWFED_TEST_DATABASE_URL instead of SQLite.
    #[arg(long)]
    postgres: bool,
    /// The hub binary (default: `clawfed-hub` next to this binary).
    #[arg(long)]
    hub_bin: Option<PathBuf>,
    /// The goal, percent of one core.
    #[arg(long, default_value_t = 0.1)]
    goal_percent: f64,
    /// The goal of idle database transactions per second (PostgreSQL; issue
    /// 14: at most 1/s per replica at the default safety polls).
    #[arg(long, default_value_t = 1.0)]
    goal_transactions_per_second: f64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    clawfed_bench::cli::verdict_exit("idle-bench", run(Args::parse()).await, 2)
}

fn config(dir: &Path, db_url: &str) -> anyhow::Result<PathBuf> {
    clawfed_bench::hubconf::HubYaml {
        sections: "tunnel:
  enabled: true
  addr: 127.0.0.1:0
pipeline:
  enabled: true
",
        ..clawfed_bench::hubconf::HubYaml::new(db_url)
    }
    .write(dir)
}

async fn xact_commits(name: &str) -> anyhow::Result<i64> {
    use sqlx::{Connection, Row};
    let base = std::env::var("CLAWFED_TEST_DATABASE_URL")?;
    let mut conn = sqlx::PgConnection::connect(&base).await?;
    // The statistics snapshot is per transaction; a fresh connection sees
    // the counters as the server last flushed them.
    let row = sqlx::query("SELECT xact_commit FROM pg_stat_database WHERE datname = $1")
        .bind(name)
        .fetch_one(&mut conn)
        .await?;
    Ok(row.try_get::<i64, _>(0)?)
}

fn sqlite_bytes(dir: &Path) -> u64 {
    ["hub.db", "hub.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

async fn run(a: Args) -> anyhow::Result<bool> {
    let hub_bin = clawfed_bench::hub_bin(a.hub_bin.clone())?;
    let dir = tempfile::tempdir()?;
    let (db_url, pg_name) = clawfed_bench::pg::hub_database(a.postgres, dir.path(), "idle").await?;
    let config = config(dir.path(), &db_url)?;
    let mut child = Command::new(&hub_bin)
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .env(MIGRATE_ON_START.0, MIGRATE_ON_START.1)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("spawn hub")?;
    let pid = child.id().context("hub pid")?;
    let mut stdout = BufReader::new(child.stdout.take().context("stdout")?).lines();
    clawfed_bench::hubconf::listening_line(&mut stdout, "hub exited before listening").await?;
    // Keep draining its stdout so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });

    tokio::time::sleep(Duration::from_secs(a.warmup_seconds)).await;
    let rss_before = rss_kib(pid)?;
    let cpu0 = cpu_secs(pid);
    let commits0 = match &pg_name {
        Some(n) => Some(xact_commits(n).await?),
        None => None,
    };
    let bytes0 = sqlite_bytes(dir.path());
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(a.seconds)).await;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_secs(pid) - cpu0;
    let commits1 = match &pg_name {
        Some(n) => Some(xact_commits(n).await?),
        None => None,
    };
    let bytes1 = sqlite_bytes(dir.path());
    let rss = rss_kib(pid)?;
    let threads = clawfed_bench::procfs::threads(pid);
    let _ = child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    if let Some(name) = &pg_name {
        clawfed_bench::pg::drop_database(name).await;
    }

    let percent = cpu / wall * 100.0;
    let database = if a.postgres { "PostgreSQL" } else { "SQLite" };
    println!(
        "idle benchmark: {} ({}), database {database}, worker + link + pipeline + tunnel on, no spoke, {} cores",
        hub_bin.display(),
        clawfed_bench::profile_of(&hub_bin),
        std::thread::available_parallelism().map_or(0, |p| p.get()),
    );
    println!(
        "hub CPU idle: {cpu:.3} s in {wall:.1} s = {percent:.3}% of one core (clock ticks of 10 ms: ±{:.3}%)",
        1.0 / wall
    );
    println!(
        "    goal ≤ {}% of a core: {}",
        a.goal_percent,
        if percent <= a.goal_percent {
            "met"
        } else {
            "NOT met"
        }
    );
    println!("hub RSS idle: {rss} KiB ({rss_before} KiB after warm-up; {threads} threads)");
    let transactions_met = match (commits0, commits1) {
        (Some(c0), Some(c1)) => {
            let rate = (c1 - c0) as f64 / wall;
            println!(
                "database work idle: {} transactions committed in {wall:.1} s = {rate:.2}/s (pg_stat_database.xact_commit of the hub's database)",
                c1 - c0,
            );
            let met = rate <= a.goal_transactions_per_second;
            println!(
                "    goal ≤ {}/s (one replica, default safety polls): {}",
                a.goal_transactions_per_second,
                if met { "met" } else { "NOT met" }
            );
            met
        }
        _ => {
            println!(
                "database work idle: SQLite files grew {} bytes in {wall:.1} s (reads are not counted)",
                bytes1.saturating_sub(bytes0)
            );
            true
        }
    };
    Ok(percent <= a.goal_percent && transactions_met)
}
