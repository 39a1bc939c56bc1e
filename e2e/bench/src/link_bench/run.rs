//! The run: setup, the enrollment and the held ramp, the kill -9 storm,
//! the latency phase against the in-process hub, the storm again with
//! applied state, and the table of figures.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clawfed_bench::fleet::{
    Fleet, HubProc, Receipts, histogram_quantile, metric, mint_tokens, outbox_latencies, quantile,
    spread_ms,
};
use clawfed_bench::procfs::{cpu_secs, rss_kib};
use clawfed_hub::store::{self, Store};
use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::enrollment_client::EnrollmentClient;
use clawfed_spoke::link::identity::Identity;
use clawfed_spoke::link::tls::HubAddress;
use clawfed_spoke::link::{LinkConfig, LinkStatus};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::RunArgs;
use super::measure::{cpu_mark, cpu_note, loadavg};
use super::report::{Row, database_per_item, ms, verdict};
use super::setup::{SavedIdentity, hub_config};

pub(super) async fn run(a: RunArgs) -> anyhow::Result<bool> {
    let phase = Duration::from_secs(a.phase_timeout_seconds);
    // Killed when the run ends (kill_on_drop), whichever way it ends.
    let _neighbour = if a.cpu_neighbour {
        Some(
            Command::new("yes")
                .stdout(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .context("starting the CPU neighbour (yes)")?,
        )
    } else {
        None
    };
    let (dir, _tmp) = clawfed_bench::kept_or_temp_dir(a.state_dir.as_deref())?;
    let db_url = if a.postgres {
        let base = std::env::var("CLAWFED_TEST_DATABASE_URL")
            .context("--postgres needs CLAWFED_TEST_DATABASE_URL")?;
        // One schema per state directory, named in it: a reused directory
        // finds its clusters, CA and secrets key again, a new one starts
        // clean (the hub's link CA in the store is sealed with the key
        // beside the directory's CA, so another directory cannot open it).
        let schema_file = dir.join("pg-schema");
        let schema = match std::fs::read_to_string(&schema_file) {
            Ok(s) => s.trim().to_owned(),
            Err(_) => {
                let s = format!("lbench_{}", uuid::Uuid::new_v4().simple());
                std::fs::write(&schema_file, &s)?;
                s
            }
        };
        let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&base).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}"
        )))
        .execute(&mut c)
        .await?;
        clawfed_bench::pg::schema_url(&base, &schema)
    } else {
        format!("sqlite://{}", dir.join("hub.db").display())
    };
    let hub_bin =
        clawfed_bench::hub_bin_built_by(a.hub_bin.clone(), "cargo build --release -p clawfed-hub")?;
    let log = dir.join("hub.log");
    // Port 0: the first hub binds a free link port; the config is then
    // pinned to it so every restarted hub is where the spokes dial.
    let config = hub_config(&dir, &db_url, 0, &a)?;
    let hub_cmd = || {
        let mut c = Command::new(&hub_bin);
        c.arg("--config")
            .arg(&config)
            .arg("serve")
            .env("CLAWFED_WORKER_ENABLED", "false");
        c
    };
    println!(
        "link-bench: state in {} (hub log: {})",
        dir.display(),
        log.display()
    );

    // 1. Store, CA, tokens for the spokes not enrolled yet; the hub.
    let t = Instant::now();
    let store: Arc<dyn Store> = Arc::new(store::connect(&db_url).await?);
    let ca = clawfed_hub::link::ca::CertificateAuthority::load_or_create(&dir.join("ca"))?;
    let ca_pem = ca.ca_pem().to_owned();
    drop(ca);
    let ids_path = dir.join("identities.json");
    let mut saved: Vec<SavedIdentity> = match std::fs::read(&ids_path) {
        Ok(b) => serde_json::from_slice(&b)?,
        Err(_) => Vec::new(),
    };
    saved.truncate(a.spokes);
    let tag = format!("{:08x}", rand::random::<u32>());
    let missing = a.spokes - saved.len();
    let names = (0..missing)
        .map(|i| format!("b{tag}-{i:05}"))
        .collect::<Vec<_>>();
    let tokens = mint_tokens(store.as_ref(), &names).await?;
    drop(store);
    let mut spokes: Vec<(String, Result<Identity, String>)> = Vec::with_capacity(a.spokes);
    for s in saved {
        let id = Identity::new(s.cluster_id, s.key_pem, s.cert_pem)?;
        spokes.push((s.name, Ok(id)));
    }
    spokes.extend(names.into_iter().zip(tokens.into_iter().map(Err)));
    let mut hub = HubProc::spawn(hub_cmd(), &log, false).await?;
    hub_config(&dir, &db_url, hub.link.port(), &a)?;
    let hub_addr =
        HubAddress::parse(&format!("https://{}", hub.link)).map_err(anyhow::Error::msg)?;
    println!(
        "link-bench: hub pid {} link {} started in {:?}",
        hub.pid,
        hub.link,
        hub.started.elapsed()
    );
    let setup = t.elapsed();
    let n = spokes.len();
    let hub_profile = clawfed_bench::profile_of(&hub_bin);
    let gen_profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    // The conditions every verdict holds under.
    let conditions = format!(
        "N={n} Links, heartbeat {} s, maxConcurrentHandshakes {hs} (per source {hs}), maxSessions {}, backoff {} ms..{} s, hub {hub_profile}, generator {gen_profile}, {}, {}",
        a.heartbeat_seconds,
        a.spokes + 1000,
        a.backoff_min_ms,
        a.backoff_max_seconds,
        if a.postgres { "PostgreSQL" } else { "SQLite" },
        if a.cpu_neighbour {
            "CPU neighbour: yes > /dev/null"
        } else {
            "no CPU neighbour started by the bench"
        },
        hs = a.max_concurrent_handshakes,
    );
    let full_scale = n >= 10_000;

    // 2. The Links, staggered. Those without an identity enroll first, in
    //    a fleet of their own that is stopped once all are enrolled, and
    //    the hub is restarted: its allocator keeps what enrollment used, so
    //    the held figures below are of connections alone. Then the measured
    //    ramp: every Link from its identity, held idle.
    let link_config = LinkConfig {
        hub: hub_addr.clone(),
        ca_pem: ca_pem.clone(),
        cluster_name: String::new(),
        bootstrap_token: None,
        version: "link-bench".into(),
        capabilities: vec!["applier:bench".into()],
        backoff_min: Duration::from_millis(a.backoff_min_ms),
        backoff_max: Duration::from_secs(a.backoff_max_seconds),
    };
    let receipts = Arc::new(Receipts::default());
    // The generator's baseline is taken before any Link ran (an upper
    // bound per Link: what enrollment left in the allocator counts).
    let gen_rss_0 = rss_kib(std::process::id())?;
    let mut enrollment = None;
    if missing > 0 {
        println!(
            "link-bench: {missing} Links enroll, started at {}/s",
            a.ramp_per_second
        );
        let stop_enrolling = CancellationToken::new();
        let cpu = cpu_mark(hub.pid);
        let started = Instant::now();
        let enrolling = Fleet::start(
            &link_config,
            spokes,
            &receipts,
            a.ramp_per_second,
            &stop_enrolling,
        );
        let done = enrolling
            .wait(phase, "every Link enrolled", |f| f.enrolled() == n)
            .await;
        if let Err(e) = done {
            eprintln!("link-bench: {e:#}");
            return Ok(false);
        }
        let took = started.elapsed();
        let note = cpu_note(hub.pid, cpu);
        let totals = enrolling.totals();
        let mut saved = Vec::with_capacity(n);
        spokes = Vec::with_capacity(n);
        for s in &enrolling.spokes {
            let id = s.identity.current().context("an enrolled Link")?;
            saved.push(SavedIdentity {
                name: s.name.clone(),
                cluster_id: id.cluster_id.clone(),
                key_pem: id.key_pem.clone(),
                cert_pem: id.cert_pem.clone(),
            });
            spokes.push((s.name.clone(), Ok(id)));
        }
        std::fs::write(&ids_path, serde_json::to_vec(&saved)?)?;
        enrolling.stop(&stop_enrolling).await;
        println!("link-bench: {missing} enrolled in {took:.1?} ({note}); restarting the hub");
        enrollment = Some((took, note, totals));
        hub.kill9().await?;
        hub = HubProc::spawn(hub_cmd(), &log, false).await?;
    }
    let stop = CancellationToken::new();
    let _stop_guard = stop.clone().drop_guard();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let hub_rss_0 = rss_kib(hub.pid)?;
    let cpu0 = cpu_mark(hub.pid);
    println!("link-bench: starting {n} Links at {}/s", a.ramp_per_second);
    let started = Instant::now();
    let fleet = Fleet::start(&link_config, spokes, &receipts, a.ramp_per_second, &stop);
    let ramp = fleet
        .wait(phase, "every Link connected (ramp)", |f| f.connected() == n)
        .await;
    let ramp = match ramp {
        Ok(_) => started.elapsed(),
        Err(e) => {
            eprintln!("link-bench: {e:#}");
            return Ok(false);
        }
    };
    let ramp_cpu = cpu_note(hub.pid, cpu0);
    let ramp_totals = fleet.totals();
    println!(
        "link-bench: {n} Links connected in {ramp:.1?} ({ramp_cpu}); holding {} s",
        a.hold_seconds
    );
    let cpu_hold = cpu_mark(hub.pid);
    tokio::time::sleep(Duration::from_secs(a.hold_seconds)).await;
    let hold_cpu = cpu_note(hub.pid, cpu_hold);
    let held = fleet.connected();
    let hub_rss_n = rss_kib(hub.pid)?;
    let gen_rss_n = rss_kib(std::process::id())?;
    let scraped = hub.scrape().await?;
    let hub_gauge = metric(&scraped, "occ_link_connected_spokes").unwrap_or(f64::NAN);
    let per_spoke_hub = (hub_rss_n.saturating_sub(hub_rss_0)) as f64 / n as f64;
    let per_spoke_gen = (gen_rss_n.saturating_sub(gen_rss_0)) as f64 / n as f64;
    println!(
        "link-bench: held {held}/{n} (hub gauge {hub_gauge}); hub RSS {hub_rss_0} → {hub_rss_n} KiB = {per_spoke_hub:.1} KiB/spoke; generator {per_spoke_gen:.1} KiB/Link"
    );

    // 3. kill -9, restart, every Link reconnects on its own backoff.
    let killed = tokio::time::Instant::now();
    let before_storm = fleet.totals();
    hub.kill9().await?;
    let gen_cpu_killed = cpu_secs(std::process::id());
    let hub2 = HubProc::spawn(hub_cmd(), &log, false).await?;
    let hub_up = killed.elapsed();
    let cpu1 = (0.0, gen_cpu_killed, killed.into_std());
    let storm = match fleet
        .reconnected(phase, "every Link reconnected after kill -9", killed)
        .await
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("link-bench: {e:#}");
            return Ok(false);
        }
    };
    let reconnect = Duration::from_millis(storm.last().copied().unwrap_or(0));
    let storm_totals = fleet.totals();
    let reconnect_cpu = cpu_note(hub2.pid, cpu1);
    let hub_rss_restart = rss_kib(hub2.pid)?;
    let scraped2 = hub2.scrape().await?;
    let handshakes_ok = scraped2
        .lines()
        .find(|l| l.starts_with("occ_link_handshakes_total{result=\"ok\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or("?")
        .to_owned();
    println!(
        "link-bench: all {n} reconnected {reconnect:.1?} after kill -9 (per Link p50/p99/max {}; hub listening again after {hub_up:.1?}; {handshakes_ok} handshakes; {} failures, the {n} broken sessions included; {} go-aways; {reconnect_cpu})",
        spread_ms(&storm),
        storm_totals.failures - before_storm.failures,
        storm_totals.go_aways - before_storm.go_aways,
    );

    // 4. Latency: the in-process hub on the same database and CA.
    let m = a.latency_spokes.min(n);
    let targets = dir.join("targets.txt");
    let mut ids = String::new();
    for s in &fleet.spokes[..m] {
        let id = s.identity.current().context("an enrolled spoke")?;
        ids.push_str(&id.cluster_id);
        ids.push('\n');
    }
    std::fs::write(&targets, ids)?;
    let killed = tokio::time::Instant::now();
    hub2.kill9().await?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("inproc-hub")
        .arg("--config")
        .arg(&config)
        .arg("--targets")
        .arg(&targets)
        .arg("--rate")
        .arg(a.rate.to_string())
        .arg("--seconds")
        .arg(a.load_seconds.to_string())
        .arg("--tag")
        .arg(&tag)
        .env("CLAWFED_WORKER_ENABLED", "false");
    let mut hub3 = HubProc::spawn(cmd, &log, true).await?;
    let storm_inproc = fleet
        .reconnected(
            phase,
            "every Link reconnected to the in-process hub",
            killed,
        )
        .await?;
    let reconnect_inproc = Duration::from_millis(storm_inproc.last().copied().unwrap_or(0));
    println!(
        "link-bench: all {n} reconnected to the in-process hub in {reconnect_inproc:.1?}; echo at {:?}",
        hub3.echo
    );

    // The physical reference: a bare unary gRPC call to the hub process.
    let echo_addr = hub3.echo.context("echo address")?;
    let echo = tonic::transport::Endpoint::from_shared(format!("http://{echo_addr}"))?
        .connect()
        .await?;
    let mut echo = EnrollmentClient::new(echo);
    let mut idle_rtt = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let t = Instant::now();
        echo.enroll(pb::EnrollRequest::default()).await?;
        idle_rtt.push(t.elapsed().as_micros() as u64);
    }
    idle_rtt.sort_unstable();
    tokio::time::sleep(Duration::from_secs(1)).await;

    if let Ok(mut v) = receipts.us.lock() {
        v.clear();
    }
    let works_0 = receipts.works.load(Ordering::Relaxed);
    let loadavg_before = loadavg();
    let cpu2 = cpu_mark(hub3.pid);
    let stdin = hub3.stdin.as_mut().context("stdin")?;
    stdin.write_all(b"go\n").await?;
    stdin.flush().await?;
    // Unary round trips paced at 100/s while the load runs.
    let mut load_rtt = Vec::new();
    let load_end = Instant::now() + Duration::from_secs(a.load_seconds);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    while Instant::now() < load_end {
        tick.tick().await;
        let t = Instant::now();
        echo.enroll(pb::EnrollRequest::default()).await?;
        load_rtt.push(t.elapsed().as_micros() as u64);
    }
    load_rtt.sort_unstable();
    let mut statement_kinds: Vec<String> = Vec::new();
    let done = tokio::time::timeout(phase, async {
        loop {
            match hub3.stdout.next_line().await? {
                Some(l) if l.starts_with("done ") => return anyhow::Ok(l),
                Some(l) => {
                    if let Some(kind) = l.strip_prefix("stmt\t") {
                        statement_kinds.push(kind.to_owned());
                    }
                }
                None => bail!("in-process hub exited during the load"),
            }
        }
    })
    .await
    .context("latency phase timed out")??;
    let kv: HashMap<&str, &str> = done
        .split_whitespace()
        .skip(1)
        .filter_map(|w| w.split_once('='))
        .collect();
    let num = |k: &str| {
        kv.get(k)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let load_cpu = cpu_note(hub3.pid, cpu2);
    let loadavg_after = loadavg();
    let hub3_rss = rss_kib(hub3.pid)?;
    let scraped3 = hub3.scrape().await?;
    let hist = "occ_link_ack_latency_seconds";
    let h50 = histogram_quantile(&scraped3, hist, 0.50).unwrap_or(f64::NAN) * 1000.0;
    let h99 = histogram_quantile(&scraped3, hist, 0.99).unwrap_or(f64::NAN) * 1000.0;
    let hcount = metric(&scraped3, &format!("{hist}_count")).unwrap_or(f64::NAN);
    let mut receipt = receipts.us.lock().map(|v| v.clone()).unwrap_or_default();
    receipt.sort_unstable();
    let works = receipts.works.load(Ordering::Relaxed) - works_0;

    // Enqueue → ack as the hub recorded it (ms resolution), from the rows.
    let mut e2e = outbox_latencies(&db_url, &tag).await?;
    e2e.sort_unstable();
    let unacked = (num("sent") as usize).saturating_sub(e2e.len());

    // 5. The storm again, now with applied state: kill -9 of the in-process
    //    hub, the release hub back; the M spokes that applied work say so in
    //    Hello and re-send their current reports.
    let with_applied = fleet.spokes[..m]
        .iter()
        .filter(|s| !s.applier.record().is_empty())
        .count();
    let applied_targets: usize = fleet.spokes[..m]
        .iter()
        .map(|s| s.applier.record().len())
        .sum();
    let killed = tokio::time::Instant::now();
    let before_applied = fleet.totals();
    hub3.kill9().await?;
    let gen_cpu_killed = cpu_secs(std::process::id());
    let hub4 = HubProc::spawn(hub_cmd(), &log, false).await?;
    let cpu4 = (0.0, gen_cpu_killed, killed.into_std());
    let storm_applied = match fleet
        .reconnected(
            phase,
            "every Link reconnected after kill -9, with applied state",
            killed,
        )
        .await
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("link-bench: {e:#}");
            return Ok(false);
        }
    };
    let reconnect_applied = Duration::from_millis(storm_applied.last().copied().unwrap_or(0));
    let applied_totals = fleet.totals();
    let applied_cpu = cpu_note(hub4.pid, cpu4);
    println!(
        "link-bench: all {n} reconnected {reconnect_applied:.1?} after kill -9 with {applied_targets} applied targets in {with_applied} Hellos ({applied_cpu})"
    );
    let totals = fleet.totals();
    fleet.stop(&stop).await;
    drop(hub4);

    // The table.
    let e2e_p99 = quantile(&e2e, 0.99);
    let offered = a.rate as f64;
    let achieved = num("rate");
    let storm_note = |after: &LinkStatus, before: &LinkStatus| {
        format!(
            "{} failures, the {n} sessions the kill broke included; {} go-aways",
            after.failures - before.failures,
            after.go_aways - before.go_aways
        )
    };
    let within_30s = |d: Duration| d <= Duration::from_secs(30);
    let mut rows = vec![
        Row {
            what: "spokes enrolled (this run)".into(),
            value: match &enrollment {
                Some((took, note, totals)) => format!(
                    "{missing} in {took:.1?} ({:.0}/s; each Link's own Enroll on its own connection, started at {}/s; {} failed attempts; {note})",
                    missing as f64 / took.as_secs_f64(),
                    a.ramp_per_second,
                    totals.failures,
                ),
                None => format!("0 (reused {n} from --state-dir)"),
            },
            goal: "-".into(),
            limit: if a.postgres {
                "PostgreSQL: 4 write txns per spoke (token, enrollment, certificate, state)"
            } else {
                "single-writer SQLite: 4 write txns per spoke (token, enrollment, certificate, state)"
            }
            .into(),
        },
        Row {
            what: "max concurrent connected spokes held".into(),
            value: format!(
                "{held} of {n} (hub gauge {hub_gauge}; ramp {ramp:.1?} at {}/s, {} failed attempts, {} go-aways; ramp {ramp_cpu})",
                a.ramp_per_second, ramp_totals.failures, ramp_totals.go_aways
            ),
            goal: format!(
                "10000: {} [{conditions}]",
                verdict(held == n, full_scale)
            ),
            limit: "N asked for; fds (20000/process) cap one hub near 19.9k".into(),
        },
        Row {
            what: "hub RSS per idle connected spoke".into(),
            value: format!("{per_spoke_hub:.1} KiB ({hub_rss_0} → {hub_rss_n} KiB; idle {hold_cpu})"),
            goal: format!(
                "≤ 64 KiB: {} [{conditions}]",
                verdict(per_spoke_hub <= 64.0, full_scale)
            ),
            limit: "TLS + h2 + tonic buffers and two tasks per connection".into(),
        },
        Row {
            what: "generator RSS per Link (for reference)".into(),
            value: format!("{per_spoke_gen:.1} KiB ({gen_rss_0} → {gen_rss_n} KiB)"),
            goal: "-".into(),
            limit: "per Link: its rustls ClientConfig, renewal task, tonic Channel (buffer task + h2 connection), session channels".into(),
        },
        Row {
            what: format!("all {n} reconnected after kill -9 + restart"),
            value: format!(
                "{reconnect:.1?}; per Link p50/p99/max {} (hub listening again after {hub_up:.1?}; RSS then {hub_rss_restart} KiB; {}; {reconnect_cpu})",
                spread_ms(&storm),
                storm_note(&storm_totals, &before_storm),
            ),
            goal: format!(
                "≤ 30 s: {} [{conditions}]",
                verdict(within_30s(reconnect), full_scale)
            ),
            limit: "handshake CPU on 2 cores shared by hub and generator; accept backlog; the Links' backoff jitter".into(),
        },
        Row {
            what: "  same, onto the in-process hub".into(),
            value: format!("{reconnect_inproc:.1?}; per Link p50/p99/max {}", spread_ms(&storm_inproc)),
            goal: "-".into(),
            limit: "".into(),
        },
        Row {
            what: format!("  same, {with_applied} Hellos carrying {applied_targets} applied targets"),
            value: format!(
                "{reconnect_applied:.1?}; per Link p50/p99/max {} ({}; {applied_cpu})",
                spread_ms(&storm_applied),
                storm_note(&applied_totals, &before_applied),
            ),
            goal: format!(
                "≤ 30 s: {} [{conditions}]",
                verdict(within_30s(reconnect_applied), full_scale)
            ),
            limit: "as above, plus acking Hello.applied and storing the re-sent reports".into(),
        },
        Row {
            what: format!("dispatch→ack p50 / p99, enqueue→ack row ({} items)", e2e.len()),
            value: format!("{} / {} ms (ms resolution; {load_cpu})", quantile(&e2e, 0.5), e2e_p99),
            goal: format!(
                "p99 ≤ 50 ms: {} [{conditions}, {offered:.0}/s over {m} Links]",
                verdict(e2e_p99 <= 50 && unacked == 0, full_scale && a.rate >= 1000 && m >= 1000)
            ),
            limit: if a.postgres {
                "PostgreSQL: put, ack and the Link's work-result report per item, committed in groups (one set-based statement per group, 2 groups at a time)"
            } else {
                "SQLite single writer: put + ack + the Link's work-result report per item (grouped commits)"
            }
            .into(),
        },
        Row {
            what: format!("  offered {offered:.0}/s over {m} spokes for {} s", a.load_seconds),
            value: format!("achieved {achieved:.0}/s, {} sent, {unacked} unacked, put p50/p99 {:.2}/{:.2} ms", num("sent"), num("put_p50_us") / 1000.0, num("put_p99_us") / 1000.0),
            goal: "-".into(),
            limit: "in-process hub (LinkHandle::send); idle spokes stay connected".into(),
        },
        Row {
            what: "  machine load average (1 min) before / after the load".into(),
            value: format!("{loadavg_before} / {loadavg_after}"),
            goal: "-".into(),
            limit: "/proc/loadavg; every process on the machine".into(),
        },
        Row {
            what: "  database work per item (load and drain)".into(),
            value: database_per_item(&num, &statement_kinds),
            goal: "-".into(),
            limit: "statements: sqlx's statement events in the hub process (each a round trip); transactions: pg_stat_database of the whole database, less its background rate measured right after".into(),
        },
        Row {
            what: format!("  enqueue→work at the applier p50 / p99 ({works} items)"),
            value: format!("{} / {}", ms(quantile(&receipt, 0.5)), ms(quantile(&receipt, 0.99))),
            goal: "-".into(),
            limit: "spoke clock, CLOCK_REALTIME in both processes".into(),
        },
        Row {
            what: format!("  hub send→ack p50 / p99 (histogram, {hcount} obs)"),
            value: format!("{h50:.2} / {h99:.2} ms"),
            goal: "-".into(),
            limit: "occ_link_ack_latency_seconds, interpolated in ×2 buckets".into(),
        },
        Row {
            what: "bare gRPC unary RTT, idle p50 / p99".into(),
            value: format!("{} / {}", ms(quantile(&idle_rtt, 0.5)), ms(quantile(&idle_rtt, 0.99))),
            goal: "reference".into(),
            limit: "plaintext h2 to the hub process, sequential".into(),
        },
        Row {
            what: "bare gRPC unary RTT, under load p50 / p99".into(),
            value: format!("{} / {}", ms(quantile(&load_rtt, 0.5)), ms(quantile(&load_rtt, 0.99))),
            goal: "reference".into(),
            limit: format!("{} calls at 100/s during the load", load_rtt.len()),
        },
        Row {
            what: "hub RSS with load (in-process hub)".into(),
            value: format!("{hub3_rss} KiB"),
            goal: "-".into(),
            limit: "".into(),
        },
        Row {
            what: "setup (store, CA, tokens, hub start)".into(),
            value: format!("{setup:.1?}"),
            goal: "-".into(),
            limit: "".into(),
        },
    ];
    rows.push(Row {
        what: "Links: welcomes / failures / go-aways".into(),
        value: format!(
            "{} / {} / {}",
            totals.welcomes, totals.failures, totals.go_aways
        ),
        goal: "-".into(),
        limit: "LinkStatus of every Link, whole run".into(),
    });
    println!();
    println!(
        "link benchmark: N={n}, heartbeat {} s, maxConcurrentHandshakes {}, {} cores, database {}, hub {hub_profile}, generator {gen_profile}",
        a.heartbeat_seconds,
        a.max_concurrent_handshakes,
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        if a.postgres { "PostgreSQL" } else { "SQLite" }
    );
    println!(
        "spokes: the product's clawfed_spoke::link::Link, {n} in this process (its enrollment, Hello with applied, backoff reset on Welcome, GoAway, heartbeat), started at {}/s",
        a.ramp_per_second
    );
    println!("conditions of every verdict: {conditions}");
    for r in &rows {
        println!("{}: {}", r.what, r.value);
        if r.goal != "-" {
            println!("    goal {}", r.goal);
        }
        if !r.limit.is_empty() {
            println!("    limited by: {}", r.limit);
        }
    }
    Ok(held == n && unacked == 0)
}
