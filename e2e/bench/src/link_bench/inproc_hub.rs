//! The in-process hub of the latency phase: the hub started with its store
//! in this process, a bare gRPC echo beside it, and the offered load sent
//! with `LinkHandle::send` on each "go" from the generator.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use clawfed_bench::fleet::{KIND, quantile, unix_nanos};
use clawfed_bench::statements::StatementCounter;
use clawfed_hub::store::{self, Store};
use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::enrollment_server::{Enrollment, EnrollmentServer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::InprocArgs;
use super::database::{server_cpu, server_xacts};

#[derive(Debug, Clone, Copy)]
struct Echo;

#[tonic::async_trait]
impl Enrollment for Echo {
    async fn enroll(
        &self,
        _request: tonic::Request<pb::EnrollRequest>,
    ) -> Result<tonic::Response<pb::EnrollResponse>, tonic::Status> {
        Ok(tonic::Response::new(pb::EnrollResponse::default()))
    }
}

pub(super) async fn inproc_hub(a: InprocArgs) -> anyhow::Result<bool> {
    let statements = StatementCounter::install();
    let env: HashMap<String, String> = std::env::vars().collect();
    let config = clawfed_hub::config::Config::load(Some(&a.config), &env)?;
    let sql = Arc::new(store::connect(&config.database.url).await?);
    let store: Arc<dyn Store> = sql.clone();
    let (hub, link) = clawfed_bench::fleet::start_hub_in_process(&config, store.clone()).await?;
    let echo_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let echo_addr = echo_listener.local_addr()?;
    let echo_stop = CancellationToken::new();
    let token = echo_stop.clone();
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(EnrollmentServer::new(Echo))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(echo_listener),
                token.cancelled_owned(),
            )
            .await;
    });
    println!(
        "clawfed-hub listening: rest=http://{} grpc=http://{} metrics=http://{}/metrics link=https://{} database=in-process",
        hub.rest_addr, hub.grpc_addr, hub.metrics_addr, link.addr
    );
    println!("echo={echo_addr}");
    let targets: Vec<String> = std::fs::read_to_string(&a.targets)?
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if targets.is_empty() {
        bail!("no targets");
    }
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = stdin.next_line().await? {
        if line.trim() != "go" {
            break;
        }
        let postgres = config.database.url.starts_with("postgres");
        let xacts_0 = if postgres {
            Some(server_xacts(&config.database.url).await?)
        } else {
            None
        };
        let server_cpu_0 = if postgres {
            Some(server_cpu(&config.database.url).await?)
        } else {
            None
        };
        let statements_0 = statements.snapshot();
        let groups_0 = sql.link_group_stats();
        let measured = Instant::now();
        let total = a.rate * a.seconds;
        let window = 1024;
        let inflight = Arc::new(Semaphore::new(window));
        let put_us = Arc::new(Mutex::new(Vec::with_capacity(total as usize)));
        let errors = Arc::new(AtomicU64::new(0));
        let start = tokio::time::Instant::now();
        for i in 0..total {
            tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / a.rate as f64))
                .await;
            let permit = inflight.clone().acquire_owned().await?;
            let (link, put_us, errors) = (link.clone(), put_us.clone(), errors.clone());
            let cluster = targets[i as usize % targets.len()].clone();
            let target = format!("{}/{i}", a.tag);
            tokio::spawn(async move {
                let t = Instant::now();
                let spec = serde_json::json!({ "t": unix_nanos() });
                match link.send(&cluster, &target, KIND, 1, &spec).await {
                    Ok(Some(_)) => {
                        if let Ok(mut v) = put_us.lock() {
                            v.push(t.elapsed().as_micros() as u64);
                        }
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                drop(permit);
            });
        }
        let _all = tokio::time::timeout(
            Duration::from_secs(60),
            inflight.acquire_many(window as u32),
        )
        .await;
        let elapsed = start.elapsed();
        // Wait (bounded) for every item to be acked.
        let drain = Instant::now();
        for _ in 0..600 {
            let depth: i64 = store.outbox_summary().await?.iter().map(|s| s.depth).sum();
            if depth == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut put = put_us.lock().map(|v| v.clone()).unwrap_or_default();
        put.sort_unstable();
        let drained_ms = drain.elapsed().as_millis();
        // Statements of the load and its drain, by kind, most frequent
        // first ("stmt" lines, read by the generator).
        let statements_1 = statements.snapshot();
        let mut by_kind: Vec<(u64, f64, String)> = statements_1
            .into_iter()
            .map(|(label, (n, secs))| {
                let (n0, secs0) = statements_0.get(&label).copied().unwrap_or_default();
                (n - n0, secs - secs0, label)
            })
            .filter(|(n, _, _)| *n > 0)
            .collect();
        by_kind.sort_by_key(|k| std::cmp::Reverse(k.0));
        let statement_total: u64 = by_kind.iter().map(|k| k.0).sum();
        let groups_1 = sql.link_group_stats();
        // Backends that started during the load count from 0; those that
        // ended are missed (the pool keeps its connections).
        let server_cpu_s = match &server_cpu_0 {
            Some(before) => {
                let after = server_cpu(&config.database.url).await?;
                let used: f64 = after
                    .iter()
                    .map(|(pid, s)| s - before.get(pid).copied().unwrap_or(0.0))
                    .sum();
                format!(" server_cpu_s={used:.2}")
            }
            None => String::new(),
        };
        let group_ms: f64 = by_kind
            .iter()
            .filter(|k| k.2.contains("clawfed_link_group") || k.2.starts_with("WITH p AS"))
            .map(|k| k.1 * 1000.0)
            .sum();
        for (n, secs, label) in by_kind.iter().take(12) {
            println!("stmt\t{n}\t{secs:.3}\t{label}");
        }
        // The server publishes a backend's counts when it goes idle, up to
        // 10 s late (PostgreSQL 15): read 11 s after the drain, then the
        // same span again with the hub idle, as the background (other
        // clients of this database, the hub's own timers) to subtract.
        let xacts = match xacts_0 {
            Some(x0) => {
                tokio::time::sleep(Duration::from_secs(11)).await;
                let x1 = server_xacts(&config.database.url).await?;
                let window = measured.elapsed();
                tokio::time::sleep(Duration::from_secs(11)).await;
                let x2 = server_xacts(&config.database.url).await?;
                let background = (x2 - x1) as f64 / 11.0;
                format!(
                    " xacts={} xacts_background_per_s={background:.1} xacts_window_s={:.1}",
                    x1 - x0,
                    window.as_secs_f64()
                )
            }
            None => String::new(),
        };
        println!(
            "done sent={} errors={} rate={:.1} put_p50_us={} put_p99_us={} drained_ms={drained_ms} statements={statement_total} groups={} grouped_writes={} group_ms={group_ms:.1}{server_cpu_s}{xacts}",
            put.len(),
            errors.load(Ordering::Relaxed),
            total as f64 / elapsed.as_secs_f64(),
            quantile(&put, 0.5),
            quantile(&put, 0.99),
            groups_1.groups - groups_0.groups,
            groups_1.writes - groups_0.writes,
        );
    }
    echo_stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), hub.stop()).await;
    Ok(true)
}
