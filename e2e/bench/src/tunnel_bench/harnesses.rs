//! The driver's Harness servers: echo, byte source, sink and slow sink, each
//! on its own loopback port, and the repeating block they send.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::BULK;

/// The local Harness servers, each on its own port.
pub(super) struct Harnesses {
    pub(super) echo: SocketAddr,
    pub(super) source: SocketAddr,
    pub(super) sink: SocketAddr,
    pub(super) slow: SocketAddr,
    /// Cancelling it closes the slow Harness' open connections.
    slow_stop: Arc<Mutex<CancellationToken>>,
}

/// A repeating block; byte `i` of a stream is `pattern_at(i)`.
pub(super) fn block() -> Arc<Vec<u8>> {
    Arc::new((0..BULK).map(|i| (i * 31 % 251) as u8).collect())
}

async fn listen(serve: impl Fn(TcpStream) + Send + 'static) -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let _ = s.set_nodelay(true);
            serve(s);
        }
    });
    Ok(addr)
}

impl Harnesses {
    pub(super) async fn start(slow_rate: usize) -> anyhow::Result<Self> {
        // Echo: bytes back until EOF, then EOF.
        let echo = listen(|mut s| {
            tokio::spawn(async move {
                let mut buf = vec![0u8; BULK];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = s.shutdown().await;
            });
        })
        .await?;
        // Byte source: a u64 length, then that many bytes and EOF.
        let data = block();
        let source = listen(move |mut s| {
            let data = data.clone();
            tokio::spawn(async move {
                let Ok(mut left) = s.read_u64().await else {
                    return;
                };
                while left > 0 {
                    let n = left.min(BULK as u64) as usize;
                    if s.write_all(&data[..n]).await.is_err() {
                        return;
                    }
                    left -= n as u64;
                }
                let _ = s.shutdown().await;
                let mut rest = [0u8; 64];
                while let Ok(n) = s.read(&mut rest).await {
                    if n == 0 {
                        break;
                    }
                }
            });
        })
        .await?;
        // Sink: reads to EOF, answers the byte count (u64) and EOF.
        let sink = listen(|mut s| {
            tokio::spawn(async move {
                let mut buf = vec![0u8; BULK];
                let mut total = 0u64;
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) => break,
                        Ok(n) => total += n as u64,
                        Err(_) => return,
                    }
                }
                let _ = s.write_u64(total).await;
                let _ = s.shutdown().await;
            });
        })
        .await?;
        // Slow sink: reads `slow_rate` bytes per second, in quarters.
        let slow_stop = Arc::new(Mutex::new(CancellationToken::new()));
        let stops = slow_stop.clone();
        let slow = listen(move |mut s| {
            let stop = stops.lock().unwrap_or_else(|p| p.into_inner()).clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; slow_rate.div_ceil(4).max(1)];
                let mut tick = tokio::time::interval(Duration::from_millis(250));
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tick.tick() => match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        },
                    }
                }
            });
        })
        .await?;
        Ok(Self {
            echo,
            source,
            sink,
            slow,
            slow_stop,
        })
    }

    /// Closes the slow Harness' connections; later ones get a new token.
    pub(super) fn close_slow(&self) {
        let mut stop = self.slow_stop.lock().unwrap_or_else(|p| p.into_inner());
        stop.cancel();
        *stop = CancellationToken::new();
    }
}
