//! The measured phases, one figure each: 3 connection setup, 2 request/
//! response latency, 4 held connections, 1 one connection's throughput,
//! 5 slow-receiver isolation.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clawfed_bench::procfs::rss_kib;
use clawfed_proto::tunnel::MAX_FRAME;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use super::driver::Env;
use super::measure::{mb_s, median, ms, quantile, verdict};
use super::observe::{Cpu, CpuUse, cores_note};
use super::traffic::{Via, download, echo_bulk, ping, upload};
use super::{KIB, MIB, SINK, SLOW, SOURCE};

/// Phase 3: CONNECT → 200 → 1-byte echo, one connection at a time.
pub(super) async fn setup(env: &mut Env) -> anyhow::Result<(bool, String)> {
    let n = env.args.setup_samples.max(1);
    let rev = env.first_echo()?;
    let tunnel = Via::Tunnel {
        ingress: env.info.ingress(),
        rev,
    };
    let direct = Via::Direct(env.harnesses.echo);
    let (mut t_us, mut d_us) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let cpu = Cpu::mark(env.hub.pid, env.spoke.pid);
    for i in 0..n + 20 {
        for (path, out) in [(&tunnel, &mut t_us), (&direct, &mut d_us)] {
            let t = Instant::now();
            let mut s = path.connect().await?;
            let mut b = [0u8; 1];
            s.write_all(b"x").await?;
            s.read_exact(&mut b).await?;
            // The first 20 warm up.
            if i >= 20 {
                out.push(t.elapsed().as_micros() as u64);
            }
        }
    }
    let cores = cpu.used();
    t_us.sort_unstable();
    d_us.sort_unstable();
    let p99 = quantile(&t_us, 0.99);
    let ok = p99 <= 5_000;
    println!(
        "\n3. connection setup (CONNECT -> 200 -> 1-byte echo), {n} sequential, tunnel and direct alternating:\n   tunnel p50 {} p99 {} max {}; direct (TCP connect + 1-byte echo) p50 {} p99 {}\n   goal p99 <= 5 ms (idle, one at a time): {} ({})\n   limit: a CONNECT costs the spoke a TunnelOpen on the link, a dial and a new HTTP/2 stream back (about one link round trip + a TCP connect), the credential's route from the store once a second (route cache TTL 1 s)",
        ms(quantile(&t_us, 0.5)),
        ms(p99),
        ms(*t_us.last().unwrap_or(&0)),
        ms(quantile(&d_us, 0.5)),
        ms(quantile(&d_us, 0.99)),
        verdict(ok),
        cores_note(cores),
    );
    Ok((
        ok,
        format!(
            "setup p50 {} p99 {} (goal p99 <= 5 ms)",
            ms(quantile(&t_us, 0.5)),
            ms(p99)
        ),
    ))
}

/// Phase 2: 1 KiB request/response on an open connection.
pub(super) async fn latency(env: &mut Env) -> anyhow::Result<(bool, String)> {
    let n = env.args.latency_samples.max(1);
    let rev = env.first_echo()?;
    let mut tunnel = Via::Tunnel {
        ingress: env.info.ingress(),
        rev,
    }
    .connect()
    .await?;
    let mut direct = Via::Direct(env.harnesses.echo).connect().await?;
    let req: Vec<u8> = env.block[..KIB].to_vec();
    let mut back = vec![0u8; KIB];
    let (mut t_us, mut d_us) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..100 {
        ping(&mut tunnel, &req, &mut back).await?;
        ping(&mut direct, &req, &mut back).await?;
    }
    // Batches of 50 alternate, so both see the same machine.
    let cpu = Cpu::mark(env.hub.pid, env.spoke.pid);
    let mut left = n;
    while left > 0 {
        let k = left.min(50);
        for _ in 0..k {
            t_us.push(ping(&mut tunnel, &req, &mut back).await?);
        }
        for _ in 0..k {
            d_us.push(ping(&mut direct, &req, &mut back).await?);
        }
        left -= k;
    }
    let used = cpu.used();
    t_us.sort_unstable();
    d_us.sort_unstable();
    let (tp50, tp99, dp50, dp99) = (
        quantile(&t_us, 0.5),
        quantile(&t_us, 0.99),
        quantile(&d_us, 0.5),
        quantile(&d_us, 0.99),
    );
    let ok = tp99 <= dp99 + 1_000;
    println!(
        "\n2. 1 KiB request/response over an open connection, {n} each, idle otherwise:\n   tunnel p50 {} p99 {} max {}; direct p50 {} p99 {} max {}\n   added p50 {} p99 {}; goal tunnel p99 <= direct p99 + 1 ms (idle): {} ({})\n   limit: 4 more loopback hops (client->hub, TLS over TCP hub<->spoke both ways, spoke->Harness) and a task wake-up per hop in hub and spoke; one TLS record + HTTP/2 DATA frame + gRPC message per direction",
        ms(tp50),
        ms(tp99),
        ms(*t_us.last().unwrap_or(&0)),
        ms(dp50),
        ms(dp99),
        ms(*d_us.last().unwrap_or(&0)),
        ms(tp50.saturating_sub(dp50)),
        ms(tp99.saturating_sub(dp99)),
        verdict(ok),
        cores_note(used),
    );
    Ok((
        ok,
        format!(
            "1 KiB req/resp added latency p50 {} p99 {} (tunnel p99 {} vs direct p99 {}; goal <= +1 ms)",
            ms(tp50.saturating_sub(dp50)),
            ms(tp99.saturating_sub(dp99)),
            ms(tp99),
            ms(dp99)
        ),
    ))
}

/// Phase 4: many tunneled connections held at once.
pub(super) async fn held(env: &mut Env) -> anyhow::Result<(bool, String)> {
    let n = env.args.connections;
    let revs = env.echo_revs();
    if revs.is_empty() {
        bail!("no revisions");
    }
    env.wait_open(0, Duration::from_secs(30)).await?;
    let (hub0, spoke0) = (rss_kib(env.hub.pid)?, rss_kib(env.spoke.pid)?);
    let sem = Arc::new(Semaphore::new(env.args.open_concurrency.max(1)));
    let req: Arc<Vec<u8>> = Arc::new(env.block[..KIB].to_vec());
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let path = Via::Tunnel {
            ingress: env.info.ingress(),
            rev: revs[i % revs.len()].clone(),
        };
        let (sem, req) = (sem.clone(), req.clone());
        set.spawn(async move {
            let _permit = sem.acquire_owned().await?;
            let mut s = path.connect().await?;
            let mut back = vec![0u8; KIB];
            ping(&mut s, &req, &mut back).await?;
            anyhow::Ok(s)
        });
    }
    let mut conns = Vec::with_capacity(n);
    let mut failed = Vec::new();
    while let Some(r) = set.join_next().await {
        match r? {
            Ok(s) => conns.push(s),
            Err(e) => failed.push(e),
        }
    }
    let opened_in = t.elapsed();
    if let Some(e) = failed.first() {
        bail!(
            "{} of {n} connections failed to open; first: {e:#}",
            failed.len()
        );
    }
    env.wait_open(n as u64, Duration::from_secs(30)).await?;
    let (hub1, spoke1) = (rss_kib(env.hub.pid)?, rss_kib(env.spoke.pid)?);
    tokio::time::sleep(Duration::from_secs(env.args.hold_seconds)).await;
    // All of them again, `open_concurrency` at a time.
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for mut s in conns {
        let (sem, req) = (sem.clone(), req.clone());
        set.spawn(async move {
            let _permit = sem.acquire_owned().await?;
            let mut back = vec![0u8; KIB];
            ping(&mut s, &req, &mut back).await?;
            anyhow::Ok(s)
        });
    }
    let mut conns = Vec::with_capacity(n);
    let mut echo_failed = 0usize;
    while let Some(r) = set.join_next().await {
        match r? {
            Ok(s) => conns.push(s),
            Err(_) => echo_failed += 1,
        }
    }
    let echoed_in = t.elapsed();
    let (hub2, spoke2) = (rss_kib(env.hub.pid)?, rss_kib(env.spoke.pid)?);
    let per = |base: u64, now: u64| (now.saturating_sub(base)) as f64 / n.max(1) as f64;
    let hub_per = per(hub0, hub1).max(per(hub0, hub2));
    let spoke_per = per(spoke0, spoke1).max(per(spoke0, spoke2));
    let ok = echo_failed == 0 && hub_per <= 64.0 && spoke_per <= 64.0;
    println!(
        "\n4. {n} tunneled connections over {} revisions ({} each), opened {} at a time in {:.2} s, held {} s:\n   hub RSS {hub0} -> {hub1} KiB opened -> {hub2} KiB after all echoed again: {:.1} / {:.1} KiB per connection\n   spoke RSS {spoke0} -> {spoke1} KiB opened -> {spoke2} KiB after all echoed again: {:.1} / {:.1} KiB per connection\n   still echoing after the hold: {} of {n} (in {:.2} s)\n   goal <= 64 KiB per connection each, all echo: {}\n   limit: per connection each side holds a frame buffer per pump (64 KiB, allocated; touched only as far as reads fill it) plus the read buffers of its sockets and HTTP/2 stream state; hub also the upgraded HTTP/1 connection",
        env.args.revisions.min(revs.len()),
        n.div_ceil(revs.len()),
        env.args.open_concurrency,
        opened_in.as_secs_f64(),
        env.args.hold_seconds,
        per(hub0, hub1),
        per(hub0, hub2),
        per(spoke0, spoke1),
        per(spoke0, spoke2),
        n - echo_failed,
        echoed_in.as_secs_f64(),
        verdict(ok),
    );
    drop(conns);
    if echo_failed > 0 {
        bail!("{echo_failed} of {n} held connections no longer echo");
    }
    env.wait_open(0, Duration::from_secs(60)).await?;
    Ok((
        ok,
        format!(
            "{n} held connections: hub {hub_per:.1} KiB, spoke {spoke_per:.1} KiB per connection (goal <= 64 each); {} of {n} still echo",
            n - echo_failed
        ),
    ))
}

/// Phase 1: one connection's throughput, tunnel and direct alternating.
pub(super) async fn throughput(env: &mut Env) -> anyhow::Result<(bool, String)> {
    let reps = env.args.reps.max(1);
    let (one_way, echo) = (env.args.one_way_mib * MIB, env.args.echo_mib * MIB);
    let block = env.block.clone();
    let mut lines = Vec::new();
    let mut worst_ratio = f64::INFINITY;
    println!(
        "\n1. one connection's throughput, {reps} samples each (median), tunnel and direct alternating:"
    );
    for kind in ["Harness -> client", "client -> Harness", "echo"] {
        let (rev, direct, bytes) = match kind {
            "Harness -> client" => (env.rev(SOURCE)?, env.harnesses.source, one_way),
            "client -> Harness" => (env.rev(SINK)?, env.harnesses.sink, one_way),
            _ => (env.first_echo()?, env.harnesses.echo, echo),
        };
        let tunnel = Via::Tunnel {
            ingress: env.info.ingress(),
            rev,
        };
        let direct = Via::Direct(direct);
        let (mut t_mb, mut d_mb) = (Vec::new(), Vec::new());
        // CPU seconds summed over the samples: tunnel, direct.
        let (mut t_cpu, mut d_cpu) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            for (path, out, cpu_out) in [
                (&tunnel, &mut t_mb, &mut t_cpu),
                (&direct, &mut d_mb, &mut d_cpu),
            ] {
                let s = path.connect().await?;
                let cpu = Cpu::mark(env.hub.pid, env.spoke.pid);
                let d = match kind {
                    "Harness -> client" => download(s, bytes, &block).await?,
                    "client -> Harness" => upload(s, bytes, &block).await?,
                    _ => echo_bulk(s, bytes, &block).await?,
                };
                out.push(mb_s(bytes, d));
                cpu_out.push(cpu.used());
            }
        }
        let (t, d) = (median(&t_mb), median(&d_mb));
        let ratio = t / d;
        worst_ratio = worst_ratio.min(ratio);
        // CPU per byte moved: the tunnel's three processes, and the driver
        // alone for the direct path (client and Harness live in it).
        let per_byte = |uses: &[CpuUse], i: usize| {
            uses.iter().map(|u| u.secs[i]).sum::<f64>() * 1e9 / (bytes as f64 * reps as f64)
        };
        let (hub_ns, spoke_ns, drv_ns) = (
            per_byte(&t_cpu, 0),
            per_byte(&t_cpu, 1),
            per_byte(&t_cpu, 2),
        );
        let direct_ns = per_byte(&d_cpu, 2);
        let busiest = t_cpu
            .iter()
            .copied()
            .max_by(|a, b| a.others().total_cmp(&b.others()))
            .unwrap_or_default();
        println!(
            "   {kind:<18} {} MiB: tunnel {t:7.1} MB/s, direct {d:7.1} MB/s, ratio {ratio:.3} (goal >= 0.5: {}); tunnel samples {:?}, direct {:?}\n      CPU per byte: tunnel hub {hub_ns:.2} + spoke {spoke_ns:.2} + driver {drv_ns:.2} = {:.2} ns/B, direct {direct_ns:.2} ns/B ({}); tunnel median sample {}; other work up to {:.2} cores",
            bytes / MIB,
            verdict(ratio >= 0.5),
            t_mb.iter().map(|v| v.round() as u64).collect::<Vec<_>>(),
            d_mb.iter().map(|v| v.round() as u64).collect::<Vec<_>>(),
            hub_ns + spoke_ns + drv_ns,
            if direct_ns > 0.0 {
                format!("{:.1}x", (hub_ns + spoke_ns + drv_ns) / direct_ns)
            } else {
                "too short to count at 100 Hz".to_owned()
            },
            cores_note(t_cpu[t_cpu.len() / 2]),
            busiest.others(),
        );
        lines.push(format!("{kind} {t:.0} vs {d:.0} MB/s ({ratio:.3})"));
    }
    println!(
        "   limit: CPU per byte. Each byte crosses 3 sockets instead of 1 (client->hub in TLS, hub->spoke in TLS, spoke->Harness), is encrypted (AES-GCM) and decrypted twice, copied into a frame Vec, a gRPC message and an HTTP/2 DATA frame, in frames of <= {} KiB (each a gRPC message and a wake-up of the pump, channel and connection tasks), on 2 cores shared by hub, spoke, driver and other work.",
        MAX_FRAME / KIB
    );
    let ok = worst_ratio >= 0.5;
    Ok((
        ok,
        format!("one connection: {} (goal ratio >= 0.5)", lines.join("; ")),
    ))
}

/// Phase 5: other connections' throughput with and without slow receivers.
pub(super) async fn isolation(env: &mut Env) -> anyhow::Result<(bool, String)> {
    let k = env.args.isolation_streams.max(1);
    let bytes = env.args.isolation_mib * MIB;
    let m = env.args.slow_receivers;
    let sink = env.tunnel(SINK)?;
    let slow = env.tunnel(SLOW)?;
    let block = env.block.clone();
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let mut stalled_bytes = Vec::new();
    // What a "with" round could not do: the others were blocked.
    let mut blocked = None;
    let cpu = Cpu::mark(env.hub.pid, env.spoke.pid);
    'rounds: for _ in 0..env.args.isolation_rounds {
        for slow_on in [false, true] {
            env.wait_open(0, Duration::from_secs(30)).await?;
            let written = Arc::new(AtomicU64::new(0));
            let mut writers = Vec::new();
            let round = async {
                if slow_on {
                    // Fill the slow connections until every buffer on their
                    // path is full and their writes block.
                    for _ in 0..m {
                        let mut s = slow.connect().await?;
                        let (written, block) = (written.clone(), block.clone());
                        writers.push(tokio::spawn(async move {
                            while s.write_all(&block[..MAX_FRAME]).await.is_ok() {
                                written.fetch_add(MAX_FRAME as u64, Ordering::Relaxed);
                            }
                        }));
                    }
                    let deadline = Instant::now() + Duration::from_secs(30);
                    let (mut last, mut stable) = (u64::MAX, 0);
                    while stable < 6 {
                        if Instant::now() > deadline {
                            bail!("the slow connections did not fill within 30 s");
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let now = written.load(Ordering::Relaxed);
                        // At `slow_rate` a 50 ms tick moves less than a frame.
                        stable = if now == last { stable + 1 } else { 0 };
                        last = now;
                    }
                    stalled_bytes.push(last);
                }
                let t = Instant::now();
                let mut set = tokio::task::JoinSet::new();
                for _ in 0..k {
                    let (sink, block) = (sink.clone(), block.clone());
                    set.spawn(async move { upload(sink.connect().await?, bytes, &block).await });
                }
                let all = async {
                    while let Some(r) = set.join_next().await {
                        r??;
                    }
                    anyhow::Ok(())
                };
                tokio::time::timeout(Duration::from_secs(60), all)
                    .await
                    .context("the uploads did not finish within 60 s")??;
                anyhow::Ok(mb_s(bytes * k as u64, t.elapsed()))
            }
            .await;
            if slow_on {
                // Closing the slow Harness' sockets ends those tunnels.
                env.harnesses.close_slow();
                for w in &writers {
                    w.abort();
                }
            }
            match (round, slow_on) {
                (Ok(rate), true) => with.push(rate),
                (Ok(rate), false) => without.push(rate),
                (Err(e), true) => {
                    blocked = Some(e);
                    break 'rounds;
                }
                (Err(e), false) => return Err(e),
            }
        }
    }
    let used = cpu.used();
    env.wait_open(0, Duration::from_secs(60)).await?;
    let in_flight = median(&stalled_bytes.iter().map(|&v| v as f64).collect::<Vec<_>>())
        / m.max(1) as f64
        / MIB as f64;
    println!(
        "\n5. slow-receiver isolation: {k} uploads of {} MiB each through the tunnel at once, with and without {m} connection(s) whose Harness reads {} B/s, {} rounds alternating:",
        bytes / MIB,
        env.args.slow_rate,
        env.args.isolation_rounds,
    );
    let limit = "   limit: a stalled tunnel holds its HTTP/2 stream window (256 KiB) until its reader drains it; tunnels ride their own connection to the hub whose window holds every tunnel the limits allow stalled (1024 x 256 KiB), so the others and the Connect stream (TunnelOpen) keep moving; what remains is CPU shared with the stalled ones";
    if let Some(e) = blocked {
        println!("   BLOCKED with {m} slow receivers: {e:#}\n   goal drop < 10%: MISS\n{limit}");
        return Ok((
            false,
            format!("slow receivers ({m}): the other connections were blocked ({e:#})"),
        ));
    }
    let (a, b) = (median(&without), median(&with));
    let drop_pct = (1.0 - b / a) * 100.0;
    let ok = drop_pct < 10.0;
    let spread = |v: &[f64]| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
        (hi - lo) / median(v) * 100.0
    };
    println!(
        "   slow connections filled until their writes block: {in_flight:.2} MiB in flight each (socket buffers + windows)\n   aggregate without {a:.1} MB/s, with {b:.1} MB/s (medians; without {:?}, with {:?}): drop {drop_pct:.1}%; run-to-run spread of the samples without: {:.0}% of their median\n   goal drop < 10%: {} ({} over the phase)\n{limit}",
        without.iter().map(|v| v.round() as u64).collect::<Vec<_>>(),
        with.iter().map(|v| v.round() as u64).collect::<Vec<_>>(),
        spread(&without),
        verdict(ok),
        cores_note(used),
    );
    Ok((
        ok,
        format!(
            "slow receivers ({m}): others {a:.0} -> {b:.0} MB/s, drop {drop_pct:.1}% (goal < 10%)"
        ),
    ))
}
