//! One address in front of the replicas: the TCP forwarder the spokes dial.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How long the front waits for `first` to accept a connection.
const FIRST_DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// A TCP forwarder: each connection goes to `first` while it accepts, else
/// to the others, starting with the next one in turn (a Service in front of
/// the replicas, one address for every spoke).
pub(super) struct Front {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Front {
    pub(super) async fn start(first: SocketAddr, others: Vec<SocketAddr>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let turn = Arc::new(AtomicUsize::new(0));
        let others = Arc::new(others);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let (turn, others) = (turn.clone(), others.clone());
                tokio::spawn(async move {
                    let k = turn.fetch_add(1, Ordering::Relaxed);
                    let order = std::iter::once(first)
                        .chain((0..others.len()).map(|i| others[(k + i) % others.len()]));
                    for backend in order {
                        // A dead replica refuses at once; a live one whose
                        // accept queue is full drops the SYN, which the
                        // kernel resends after 1 s: `first` gets that long
                        // and more, so a busy ramp does not spill spokes
                        // onto the others.
                        let wait = if backend == first {
                            FIRST_DIAL_TIMEOUT
                        } else {
                            Duration::from_secs(1)
                        };
                        let dialed = tokio::time::timeout(wait, TcpStream::connect(backend)).await;
                        if let Ok(Ok(mut upstream)) = dialed {
                            let _ = client.set_nodelay(true);
                            let _ = upstream.set_nodelay(true);
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                            return;
                        }
                    }
                });
            }
        });
        Ok(Self { addr, task })
    }

    pub(super) fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.addr.port())
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}
