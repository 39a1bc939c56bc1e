//! A TCP proxy a spoke reaches the hub's link through, so a test can
//! partition that spoke from the hub while both keep running.

use anyhow::Result;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A TCP proxy 127.0.0.1:port → the hub's link port. While partitioned it
/// drops every open connection and closes new ones at once.
pub struct Proxy {
    /// The port spokes dial instead of the hub's.
    pub port: u16,
    partitioned: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy to 127.0.0.1:`target`.
    pub async fn start(target: u16) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    continue;
                };
                if *rx.borrow() {
                    drop(inbound);
                    continue;
                }
                let mut cut = rx.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    let (mut a, mut b) = (inbound, outbound);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut a, &mut b) => {}
                        _ = cut.wait_for(|p| *p) => {}
                    }
                });
            }
        });
        Ok(Self {
            port,
            partitioned: tx,
            task,
        })
    }

    /// Cuts (`true`) or heals (`false`) the path.
    pub fn partition(&self, on: bool) {
        let _ = self.partitioned.send(on);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.partition(true);
        self.task.abort();
    }
}
