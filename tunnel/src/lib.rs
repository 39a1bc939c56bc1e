//! One tunneled connection's bytes, moved between a socket and a
//! `link.v1.Tunnel` stream, both ways at once.
//!
//! Flow control is the transports': a frame is read from one side only when
//! the previous one was written to the other, so a slow reader stops the
//! writer through the socket's or the HTTP/2 stream's own window, and one
//! connection's backlog never reaches another's. A half-close (EOF on the
//! socket, `fin` on the stream) is passed on as such; the connection ends
//! when both directions finished, on an error, after `idle_timeout` without
//! a byte either way, or when `cancel` fires.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clawfed_proto::link::v1::{TunnelFrame, tunnel_frame};
use clawfed_proto::tunnel::MAX_FRAME;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A tunnel refused, on either side: a reason from
/// `clawfed_proto::tunnel::reason` and what to tell the Gateway.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

impl Refusal {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// How a pumped connection ended badly.
#[derive(Debug, thiserror::Error)]
pub enum PumpError {
    #[error("socket: {0}")]
    Socket(#[from] std::io::Error),
    #[error("tunnel stream: {0}")]
    Stream(String),
    #[error("tunnel stream ended without fin (the peer went away)")]
    PeerGone,
    #[error("the peer sent an unexpected frame")]
    Protocol,
    #[error("idle for {0:?}")]
    Idle(Duration),
    #[error("cancelled")]
    Cancelled,
}

impl PumpError {
    /// A short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Socket(_) => "socket",
            Self::Stream(_) => "stream",
            Self::PeerGone => "peer-gone",
            Self::Protocol => "protocol",
            Self::Idle(_) => "idle",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Bytes moved by a finished connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moved {
    /// From the socket into the stream.
    pub to_stream: u64,
    /// From the stream into the socket.
    pub to_socket: u64,
}

/// Where frames for the peer go: the hub answers with
/// `Result<TunnelFrame, Status>` items, the spoke sends bare frames.
pub trait FrameSink: Send + Sync {
    /// Sends one frame; false when the peer's stream is gone.
    fn send_frame(&self, frame: TunnelFrame) -> impl Future<Output = bool> + Send;
}

impl FrameSink for mpsc::Sender<TunnelFrame> {
    async fn send_frame(&self, frame: TunnelFrame) -> bool {
        self.send(frame).await.is_ok()
    }
}

impl FrameSink for mpsc::Sender<Result<TunnelFrame, tonic::Status>> {
    async fn send_frame(&self, frame: TunnelFrame) -> bool {
        self.send(Ok(frame)).await.is_ok()
    }
}

/// A data frame.
pub fn data(bytes: Vec<u8>) -> TunnelFrame {
    TunnelFrame {
        body: Some(tunnel_frame::Body::Data(bytes)),
    }
}

/// The half-close frame.
pub fn fin() -> TunnelFrame {
    TunnelFrame {
        body: Some(tunnel_frame::Body::Fin(true)),
    }
}

/// Moves bytes between `socket` and the stream pair until both directions
/// are done. Counters in `moved` are updated as bytes go, so metrics see
/// long-lived connections too.
pub async fn pump<IO, In, Out>(
    socket: IO,
    mut inbound: In,
    outbound: Out,
    idle_timeout: Duration,
    cancel: CancellationToken,
    moved: Arc<Counters>,
) -> Result<(), PumpError>
where
    IO: AsyncRead + AsyncWrite + Send + Unpin,
    In: Stream<Item = Result<TunnelFrame, tonic::Status>> + Send + Unpin,
    Out: FrameSink,
{
    let (mut rd, mut wr) = tokio::io::split(socket);
    let activity = Arc::new(AtomicU64::new(0));

    let up = async {
        let mut buf = vec![0u8; MAX_FRAME];
        loop {
            let n = rd.read(&mut buf).await?;
            activity.fetch_add(1, Ordering::Relaxed);
            if n == 0 {
                // EOF from the socket: tell the peer, keep reading its side.
                if !outbound.send_frame(fin()).await {
                    return Err(PumpError::PeerGone);
                }
                return Ok(());
            }
            if !outbound.send_frame(data(buf[..n].to_vec())).await {
                return Err(PumpError::PeerGone);
            }
            moved.to_stream.fetch_add(n as u64, Ordering::Relaxed);
        }
    };
    let down = async {
        loop {
            let frame = match inbound.next().await {
                Some(Ok(f)) => f,
                Some(Err(status)) => return Err(PumpError::Stream(status.message().to_owned())),
                None => return Err(PumpError::PeerGone),
            };
            activity.fetch_add(1, Ordering::Relaxed);
            match frame.body {
                Some(tunnel_frame::Body::Data(bytes)) => {
                    wr.write_all(&bytes).await?;
                    moved
                        .to_socket
                        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                }
                Some(tunnel_frame::Body::Fin(_)) => {
                    wr.shutdown().await?;
                    return Ok(());
                }
                _ => return Err(PumpError::Protocol),
            }
        }
    };
    let idle = async {
        let mut seen = activity.load(Ordering::Relaxed);
        loop {
            tokio::time::sleep(idle_timeout).await;
            let now = activity.load(Ordering::Relaxed);
            if now == seen {
                return PumpError::Idle(idle_timeout);
            }
            seen = now;
        }
    };
    // The first error ends both directions.
    let both = async { tokio::try_join!(up, down).map(|_| ()) };
    tokio::select! {
        r = both => r?,
        e = idle => return Err(e),
        _ = cancel.cancelled() => return Err(PumpError::Cancelled),
    }
    // Both sides sent their fin. Close our half of the stream cleanly and
    // wait for the peer to close its half: dropping a stream the peer still
    // writes resets it, and a reset may discard bytes already on their way.
    drop(outbound);
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        while let Some(Ok(_)) = inbound.next().await {}
    })
    .await;
    Ok(())
}

/// How long a finished connection waits for the peer to close its half of
/// the stream.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Bytes moved so far by one connection.
#[derive(Debug, Default)]
pub struct Counters {
    pub to_stream: AtomicU64,
    pub to_socket: AtomicU64,
}

impl Counters {
    /// A snapshot.
    pub fn moved(&self) -> Moved {
        Moved {
            to_stream: self.to_stream.load(Ordering::Relaxed),
            to_socket: self.to_socket.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::duplex;
    use tokio_stream::wrappers::ReceiverStream;

    type Inbound = ReceiverStream<Result<TunnelFrame, tonic::Status>>;

    fn stream_pair() -> (mpsc::Sender<Result<TunnelFrame, tonic::Status>>, Inbound) {
        let (tx, rx) = mpsc::channel(4);
        (tx, ReceiverStream::new(rx))
    }

    #[tokio::test]
    async fn bytes_and_half_close_pass_both_ways() {
        let (app, socket) = duplex(1024);
        let (to_pump, inbound) = stream_pair();
        let (outbound, mut from_pump) = mpsc::channel::<TunnelFrame>(4);
        let counters = Arc::new(Counters::default());
        let task = tokio::spawn(pump(
            socket,
            inbound,
            outbound,
            Duration::from_secs(5),
            CancellationToken::new(),
            counters.clone(),
        ));
        let (mut app_rd, mut app_wr) = tokio::io::split(app);
        app_wr.write_all(b"hello").await.unwrap();
        app_wr.shutdown().await.unwrap();
        let mut got = Vec::new();
        while let Some(f) = from_pump.recv().await {
            match f.body {
                Some(tunnel_frame::Body::Data(b)) => got.extend(b),
                Some(tunnel_frame::Body::Fin(_)) => break,
                _ => panic!("unexpected frame"),
            }
        }
        assert_eq!(got, b"hello");
        // The other direction still flows after our half-close.
        to_pump.send(Ok(data(b"world".to_vec()))).await.unwrap();
        to_pump.send(Ok(fin())).await.unwrap();
        let mut back = Vec::new();
        app_rd.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"world");
        task.await.unwrap().unwrap();
        assert_eq!(
            counters.moved(),
            Moved {
                to_stream: 5,
                to_socket: 5
            }
        );
    }

    #[tokio::test]
    async fn a_stream_ending_without_fin_is_the_peer_gone() {
        let (_app, socket) = duplex(1024);
        let (to_pump, inbound) = stream_pair();
        let (outbound, _from_pump) = mpsc::channel::<TunnelFrame>(4);
        drop(to_pump);
        let r = pump(
            socket,
            inbound,
            outbound,
            Duration::from_secs(5),
            CancellationToken::new(),
            Arc::default(),
        )
        .await;
        assert!(matches!(r, Err(PumpError::PeerGone)), "{r:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_ends() {
        let (_app, socket) = duplex(1024);
        let (_to_pump, inbound) = stream_pair();
        let (outbound, _from_pump) = mpsc::channel::<TunnelFrame>(4);
        let r = pump(
            socket,
            inbound,
            outbound,
            Duration::from_secs(30),
            CancellationToken::new(),
            Arc::default(),
        )
        .await;
        assert!(matches!(r, Err(PumpError::Idle(_))), "{r:?}");
    }
}
