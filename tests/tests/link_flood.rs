//! A flood of TCP connections that never finish their TLS handshake must
//! not lock spokes out of the link port (issue 9, defect 11).
//!
//! 400 connections, from 127.0.0.1 (the spoke's own address) or from 100
//! other loopback addresses, hold the port: three quarters send nothing, a quarter send the first bytes of a
//! ClientHello and stop. Each one the hub closes is opened again, so the
//! flood lasts for the whole test. Meanwhile a real spoke
//! (`clawfed_spoke::link::Link`) enrolls and connects; the hub's default
//! handshake limits apply.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clawfed_hub::model::ConnectionState;
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::link::{bootstrap_token, cluster, eventually, start_spoke};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

const FLOOD: usize = 400;
/// Enrolled and online this soon despite the flood. Before the fix a new
/// spoke waited behind the whole flood (128 slots held 10 s each): > 20 s.
/// Alone it takes about 1 s; 10 s leaves room for a loaded CI machine
/// (6 s was seen beside a full test run) and still tells the two apart.
const BOUND: Duration = Duration::from_secs(10);

/// A TLS handshake record header announcing a 512-byte ClientHello, and
/// the start of it: a handshake that stalls mid-ClientHello.
const PARTIAL_CLIENT_HELLO: &[u8] = &[
    22, 3, 1, 2, 0, // record: handshake, 512 bytes
    1, 0, 1, 252, // ClientHello, 508 bytes
    3, 3, // legacy version
    0, 1, 2, 3, 4, 5, 6, 7, // the first bytes of the random
];

#[derive(Default)]
struct Counts {
    /// Connections currently open (TCP established).
    open: AtomicUsize,
    /// Connections the hub closed.
    closed_by_hub: AtomicUsize,
}

/// Keeps one stalled connection from `source` open, reopening it whenever
/// the hub closes it, until `stop`.
async fn stalled(
    addr: SocketAddr,
    source: IpAddr,
    partial: bool,
    counts: Arc<Counts>,
    stop: CancellationToken,
) {
    let connect = || async {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(source, 0))?;
        socket.connect(addr).await
    };
    while !stop.is_cancelled() {
        let connected = tokio::select! {
            _ = stop.cancelled() => return,
            c = connect() => c,
        };
        let Ok(mut tcp) = connected else {
            // The backlog was full: try again shortly.
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
            }
        };
        counts.open.fetch_add(1, Ordering::Relaxed);
        if partial {
            let _ = tcp.write_all(PARTIAL_CLIENT_HELLO).await;
        }
        let mut sink = [0u8; 512];
        let closed = tokio::select! {
            _ = stop.cancelled() => false,
            // An alert, EOF or a reset: the hub gave the connection up.
            _ = async { while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {} } => true,
        };
        counts.open.fetch_sub(1, Ordering::Relaxed);
        if !closed {
            return;
        }
        counts.closed_by_hub.fetch_add(1, Ordering::Relaxed);
        // Pace the reconnects a little so the flood does not just burn
        // the test machine's two cores.
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

/// Where the flood comes from: the spoke's own address, or 100 other
/// loopback addresses (4 connections each, under the per-source limit, so
/// only the total limit and the stall timeout protect the port).
#[derive(Clone, Copy)]
enum Sources {
    SpokesOwn,
    Many,
}

fn source(sources: Sources, i: usize) -> IpAddr {
    match sources {
        Sources::SpokesOwn => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Sources::Many => IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1 + (i % 100) as u8)),
    }
}

async fn a_flood_of_stalled_handshakes_does_not_lock_a_new_spoke_out(sources: Sources) {
    let hub = TestHub::start(Backend::Sqlite).await;
    let link = hub.hub.as_ref().unwrap().link.clone().unwrap();
    let token = bootstrap_token(&hub, "exec-a", false).await;

    let counts = Arc::new(Counts::default());
    let stop = CancellationToken::new();
    let mut flood = JoinSet::new();
    for i in 0..FLOOD {
        flood.spawn(stalled(
            link.addr,
            source(sources, i),
            i % 4 == 0,
            counts.clone(),
            stop.clone(),
        ));
    }
    // Every flood connection has been established at least once.
    eventually(Duration::from_secs(30), "the flood connected", || async {
        let seen =
            counts.open.load(Ordering::Relaxed) + counts.closed_by_hub.load(Ordering::Relaxed);
        (seen >= FLOOD).then_some(())
    })
    .await;

    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let spoke = start_spoke(&hub, "exec-a", Some(token), dir.path());
    eventually(BOUND * 4, "exec-a enrolled and online", || async {
        cluster(&hub, "exec-a")
            .await
            .filter(|c| c.connection_state == ConnectionState::Online)
            .map(|_| ())
    })
    .await;
    let took = started.elapsed();
    let open = counts.open.load(Ordering::Relaxed);
    let shed = counts.closed_by_hub.load(Ordering::Relaxed);
    eprintln!(
        "online {took:?} after the spoke started; flood: {open} open, {shed} closed by the hub"
    );
    stop.cancel();
    while flood.join_next().await.is_some() {}
    assert!(
        took < BOUND,
        "the spoke enrolled and connected after {took:?} under the flood (bound {BOUND:?})"
    );
    // The flood was real: still holding connections when the spoke got in,
    // and the hub had to give stalled ones up to let it in.
    assert!(
        open > 0 && shed > 0,
        "open {open}, closed by the hub {shed}"
    );
    spoke.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_the_spokes_own_address_does_not_lock_it_out() {
    a_flood_of_stalled_handshakes_does_not_lock_a_new_spoke_out(Sources::SpokesOwn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_many_addresses_does_not_lock_a_new_spoke_out() {
    a_flood_of_stalled_handshakes_does_not_lock_a_new_spoke_out(Sources::Many).await;
}
