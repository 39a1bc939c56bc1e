//! What the driver observes of the role processes: CPU use of hub, spoke and
//! driver (and the machine) over a span, and the hub's metrics.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context;
use clawfed_bench::procfs::{cpu_secs, machine_ticks};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// CPU use of hub, spoke and driver (and the whole machine) over a span.
pub(super) struct Cpu {
    pids: [u32; 3],
    start: [f64; 3],
    machine: (f64, f64),
    at: Instant,
}

/// CPU seconds of hub, spoke and driver, the machine's busy cores, wall.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct CpuUse {
    pub(super) secs: [f64; 3],
    machine_busy_cores: f64,
    wall: f64,
}

impl CpuUse {
    fn cores(&self) -> [f64; 3] {
        self.secs.map(|s| s / self.wall.max(1e-9))
    }

    /// Cores the rest of the machine used meanwhile.
    pub(super) fn others(&self) -> f64 {
        (self.machine_busy_cores - self.cores().iter().sum::<f64>()).max(0.0)
    }
}

impl Cpu {
    pub(super) fn mark(hub: u32, spoke: u32) -> Self {
        let pids = [hub, spoke, std::process::id()];
        Self {
            start: pids.map(cpu_secs),
            pids,
            machine: machine_ticks(),
            at: Instant::now(),
        }
    }

    pub(super) fn used(&self) -> CpuUse {
        let wall = self.at.elapsed().as_secs_f64();
        let (busy, total) = machine_ticks();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let share = (busy - self.machine.0) / (total - self.machine.1).max(1.0);
        CpuUse {
            secs: std::array::from_fn(|i| cpu_secs(self.pids[i]) - self.start[i]),
            machine_busy_cores: share * cores,
            wall,
        }
    }
}

pub(super) fn cores_note(u: CpuUse) -> String {
    let c = u.cores();
    format!(
        "cores: hub {:.2} + spoke {:.2} + driver {:.2} = {:.2}, other work {:.2}",
        c[0],
        c[1],
        c[2],
        c[0] + c[1] + c[2],
        u.others()
    )
}

pub(super) async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let fetch = async {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut body = Vec::new();
        s.read_to_end(&mut body).await?;
        anyhow::Ok(String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(10), fetch)
        .await
        .context("metrics scrape timed out")?
}

pub(super) fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
