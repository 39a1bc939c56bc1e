//! The driver's traffic: how it reaches a Harness ([`Via`]), the byte pattern
//! it sends and checks, and the downloads, uploads, echoes and pings it
//! times.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use clawfed_tests::tunnel::{Conn, Ingress};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{BULK, RevInfo};

/// How the driver reaches a Harness: through the tunnel as a Gateway, or
/// straight to its server.
#[derive(Clone)]
pub(super) enum Via {
    Tunnel { ingress: Ingress, rev: RevInfo },
    Direct(SocketAddr),
}

impl Via {
    pub(super) async fn connect(&self) -> anyhow::Result<Conn> {
        match self {
            Self::Tunnel { ingress, rev } => {
                clawfed_tests::tunnel::connect(ingress, &rev.authority, Some(&rev.token))
                    .await
                    .map_err(|r| anyhow!("tunnel refused: {r:?}"))
            }
            Self::Direct(addr) => {
                let s = TcpStream::connect(addr).await?;
                s.set_nodelay(true)?;
                Ok(Conn::Plain(s))
            }
        }
    }
}

/// Checks `data`, received at stream offset `at`, against the pattern.
fn matches_pattern(block: &[u8], at: u64, data: &[u8]) -> bool {
    let mut off = (at % BULK as u64) as usize;
    let mut rest = data;
    while !rest.is_empty() {
        let n = rest.len().min(BULK - off);
        if rest[..n] != block[off..off + n] {
            return false;
        }
        rest = &rest[n..];
        off = 0;
    }
    true
}

/// Writes `n` pattern bytes (from stream offset 0).
async fn write_pattern(
    w: &mut (impl AsyncWriteExt + Unpin),
    block: &[u8],
    n: u64,
) -> std::io::Result<()> {
    let mut left = n;
    while left > 0 {
        let k = left.min(BULK as u64) as usize;
        w.write_all(&block[..k]).await?;
        left -= k as u64;
    }
    Ok(())
}

/// Reads `r` to its end, checking the bytes against the pattern of `block`
/// (`what` names the transfer in the error); the byte count.
async fn read_pattern(
    r: &mut (impl tokio::io::AsyncRead + Unpin),
    block: &[u8],
    what: &str,
) -> anyhow::Result<u64> {
    let mut buf = vec![0u8; BULK];
    let mut got = 0u64;
    loop {
        let k = r.read(&mut buf).await?;
        if k == 0 {
            break;
        }
        // Checked every 64th read only: the check must not be the limit.
        if got % (64 * BULK as u64) < k as u64 && !matches_pattern(block, got, &buf[..k]) {
            bail!("{what}: wrong bytes at offset {got}");
        }
        got += k as u64;
    }
    Ok(got)
}

/// Harness → client: asks the source for `n` bytes and reads them.
pub(super) async fn download(mut s: Conn, n: u64, block: &[u8]) -> anyhow::Result<Duration> {
    let t = Instant::now();
    s.write_u64(n).await?;
    let got = read_pattern(&mut s, block, "download").await?;
    let d = t.elapsed();
    if got != n {
        bail!("download: {got} bytes of {n}");
    }
    s.shutdown().await?;
    Ok(d)
}

/// Client → Harness: `n` bytes to the sink, until it confirms the count.
pub(super) async fn upload(mut s: Conn, n: u64, block: &[u8]) -> anyhow::Result<Duration> {
    let t = Instant::now();
    write_pattern(&mut s, block, n).await?;
    s.shutdown().await?;
    let got = s.read_u64().await?;
    let d = t.elapsed();
    if got != n {
        bail!("upload: the sink got {got} bytes of {n}");
    }
    Ok(d)
}

/// `n` bytes to the echo server and back, both directions at once.
pub(super) async fn echo_bulk(mut s: Conn, n: u64, block: &[u8]) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let (mut r, mut w) = tokio::io::split(&mut s);
    let write = async {
        write_pattern(&mut w, block, n).await?;
        w.shutdown().await?;
        anyhow::Ok(())
    };
    let read = read_pattern(&mut r, block, "echo");
    let ((), got) = tokio::try_join!(write, read)?;
    if got != n {
        bail!("echo: {got} bytes of {n}");
    }
    Ok(t.elapsed())
}

/// One 1 KiB request/response on an open echo connection; µs.
pub(super) async fn ping(s: &mut Conn, req: &[u8], back: &mut [u8]) -> anyhow::Result<u64> {
    let t = Instant::now();
    s.write_all(req).await?;
    s.read_exact(back).await?;
    let us = t.elapsed().as_micros() as u64;
    if back != req {
        bail!("echo answered other bytes");
    }
    Ok(us)
}
