//! The link's accept loop: TLS handshakes on tasks of their own, bounded
//! in number (in all and per source) and in time, stalled ones shed for
//! newcomers, ClientHellos that found no slot waiting in the lobby.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_rustls::LazyConfigAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::link::LinkState;
use crate::link::admission::{Admission, Limits, Lobby, Phase, Slots, phase_of};
use crate::link::handshake_io::Watched;
use crate::link::metrics::ResultLabel;

type TlsConn = tokio_rustls::server::TlsStream<Watched>;

/// Handshakes in progress, each with the token that sheds it.
type HandshakeSlots = Arc<Mutex<Slots<CancellationToken>>>;

fn lock(slots: &HandshakeSlots) -> std::sync::MutexGuard<'_, Slots<CancellationToken>> {
    slots.lock().unwrap_or_else(|p| p.into_inner())
}

/// How often the lobby is looked at while connections wait in it (a
/// handshake overrunning its budget frees no slot by itself).
const LOBBY_RECHECK: Duration = Duration::from_millis(10);

/// Starts admitted handshakes on tasks of their own.
struct Handshakes {
    slots: HandshakeSlots,
    tls: Arc<rustls::ServerConfig>,
    state: Arc<LinkState>,
    conns: mpsc::Sender<Result<TlsConn, std::io::Error>>,
    /// Wakes the accept loop when a handshake ends and frees a slot.
    freed: Arc<Notify>,
}

impl Handshakes {
    /// Admits a connection from `peer` that got to `phase`: a slot now
    /// (shedding stalled handshakes), or the connection back.
    fn admit(
        &self,
        tcp: tokio::net::TcpStream,
        peer: SocketAddr,
        phase: Phase,
    ) -> Result<(), tokio::net::TcpStream> {
        let cancel = CancellationToken::new();
        let admitted = lock(&self.slots).admit(peer.ip(), Instant::now(), phase, cancel.clone());
        match admitted {
            Admission::Admitted { id, shed } => {
                for stalled in shed {
                    stalled.cancel();
                }
                self.start(id, cancel, tcp, peer);
                Ok(())
            }
            Admission::Refused(_) => Err(tcp),
        }
    }

    fn start(
        &self,
        id: u64,
        cancel: CancellationToken,
        tcp: tokio::net::TcpStream,
        peer: SocketAddr,
    ) {
        let config = &self.state.config;
        let task = Handshake {
            id,
            slots: self.slots.clone(),
            stall_timeout: config.handshake_stall_timeout,
            timeout: config.handshake_timeout,
        };
        let (tls, conns, state, freed) = (
            self.tls.clone(),
            self.conns.clone(),
            self.state.clone(),
            self.freed.clone(),
        );
        tokio::spawn(
            async move {
                let result = tokio::select! {
                    _ = cancel.cancelled() => Err("shed"),
                    r = task.run(tcp, peer, tls) => r,
                };
                lock(&task.slots).release(id);
                freed.notify_one();
                let outcome = match result {
                    Ok(tls) => {
                        let _ = conns.send(Ok(tls)).await;
                        "ok"
                    }
                    Err(outcome) => outcome,
                };
                count_handshake(&state, outcome);
            }
            .instrument(tracing::info_span!("link.handshake", conn = id, %peer)),
        );
    }
}

pub(super) async fn accept_loop(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    state: Arc<LinkState>,
    conns: mpsc::Sender<Result<TlsConn, std::io::Error>>,
) {
    let config = &state.config;
    let handshakes = Handshakes {
        slots: Arc::new(Mutex::new(Slots::new(Limits {
            total: config.max_concurrent_handshakes,
            per_source: config.max_handshakes_per_source,
            stall_after: config.handshake_stall_timeout,
            answer_floor: config.handshake_answer_floor,
        }))),
        tls,
        state: state.clone(),
        conns,
        freed: Arc::new(Notify::new()),
    };
    // Connections whose ClientHello is in and that found no slot.
    let mut lobby = Lobby::new(config.max_waiting_handshakes);
    // Room for the largest TLS record: a whole ClientHello can be seen.
    let mut peeked = vec![0u8; 5 + 16 * 1024];
    loop {
        let now = Instant::now();
        // The lobby first: its connections came before any in the backlog.
        if !lobby.is_empty() {
            lobby.drain(
                now.checked_sub(config.handshake_timeout).unwrap_or(now),
                |_, (tcp, peer)| {
                    handshakes
                        .admit(tcp, peer, Phase::Hello)
                        .err()
                        .map(|t| (t, peer))
                },
                |_| count_handshake(&state, "expired"),
            );
        }
        // At the limit with every handshake live and young, stop accepting:
        // new connections wait in the backlog (a mass reconnect is absorbed
        // at a steady rate) until a slot frees or the oldest stalls.
        let paused_until = lock(&handshakes.slots).full_until(now);
        let lobby_check = (!lobby.is_empty()).then(|| now + LOBBY_RECHECK);
        let wake = paused_until.into_iter().chain(lobby_check).min();
        let (tcp, peer) = tokio::select! {
            _ = state.shutdown.cancelled() => return,
            _ = handshakes.freed.notified() => continue,
            _ = tokio::time::sleep_until(wake.unwrap_or(now).into()), if wake.is_some() => continue,
            accepted = listener.accept(), if paused_until.is_none() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and similar: back off briefly.
                    tracing::warn!(error = %e, "link.accept_failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let (tcp, phase) = match waiting_phase(tcp, &mut peeked) {
            Ok(Some(p)) => p,
            // Closed before a byte: nothing to do.
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "link.accept_failed");
                continue;
            }
        };
        // A client whose ClientHello is in queues behind those of its
        // source already waiting.
        let tcp = if phase == Phase::Hello && lobby.has(peer.ip()) {
            tcp
        } else {
            match handshakes.admit(tcp, peer, phase) {
                Ok(()) => continue,
                Err(tcp) => tcp,
            }
        };
        if phase == Phase::Hello && lobby.push(peer.ip(), now, (tcp, peer)).is_ok() {
            continue;
        }
        // Its source is at its limit with only live handshakes (and, with
        // its ClientHello in, the lobby is full): closed at once, the
        // client retries with backoff.
        tracing::debug!(%peer, "link.handshake_refused");
        count_handshake(&state, "refused");
    }
}

/// What is already waiting on a just-accepted connection, without
/// consuming it or waiting: `None` when the peer already closed.
fn waiting_phase(
    tcp: tokio::net::TcpStream,
    buf: &mut [u8],
) -> std::io::Result<Option<(tokio::net::TcpStream, Phase)>> {
    // tokio only peeks when its reactor saw the socket readable; the
    // std socket (still non-blocking) asks the kernel right now.
    let std = tcp.into_std()?;
    let phase = match std.peek(buf) {
        Ok(0) => return Ok(None),
        Ok(n) => phase_of(&buf[..n]),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Phase::Silent,
        Err(e) => return Err(e),
    };
    Ok(Some((tokio::net::TcpStream::from_std(std)?, phase)))
}

fn count_handshake(state: &LinkState, outcome: &str) {
    state
        .metrics
        .handshakes
        .get_or_create(&ResultLabel {
            result: outcome.into(),
        })
        .inc();
}

/// One TLS handshake, bounded in time: the first bytes within the stall
/// timeout (a real client sends its ClientHello at once), the whole
/// handshake within the handshake timeout.
struct Handshake {
    id: u64,
    slots: HandshakeSlots,
    stall_timeout: Duration,
    timeout: Duration,
}

impl Handshake {
    /// The TLS stream, or the outcome label of a failure.
    async fn run(
        &self,
        tcp: tokio::net::TcpStream,
        peer: SocketAddr,
        tls: Arc<rustls::ServerConfig>,
    ) -> Result<TlsConn, &'static str> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut first = [0u8; 1];
        match tokio::time::timeout(self.stall_timeout, tcp.peek(&mut first)).await {
            Err(_) => return Err("timeout"),
            Ok(Ok(0)) | Ok(Err(_)) => return Err("failed"),
            Ok(Ok(_)) => lock(&self.slots).advance(self.id, Phase::Partial, Instant::now()),
        }
        let (slots, id) = (self.slots.clone(), self.id);
        let tcp = Watched::new(
            tcp,
            Box::new(move |phase, at| lock(&slots).advance(id, phase, at)),
        );
        let hello = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp);
        let start = match tokio::time::timeout_at(deadline, hello).await {
            Err(_) => return Err("timeout"),
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "link.handshake_failed");
                return Err("failed");
            }
            Ok(Ok(start)) => start,
        };
        lock(&self.slots).advance(self.id, Phase::Hello, Instant::now());
        match tokio::time::timeout_at(deadline, start.into_stream(tls)).await {
            Err(_) => Err("timeout"),
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "link.handshake_failed");
                Err("failed")
            }
            Ok(Ok(tls)) => Ok(tls),
        }
    }
}
