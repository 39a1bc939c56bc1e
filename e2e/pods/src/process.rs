//! Stand-in processes: started inside the Pod namespace with exactly the
//! environment given (nothing inherited), stopped with SIGTERM then SIGKILL.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};
use tokio::process::{Child, Command};

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("opening the container log {0}")]
    Log(PathBuf, #[source] std::io::Error),
    #[error("starting {0} in network namespace {1}")]
    Spawn(PathBuf, String, #[source] std::io::Error),
    #[error("writing pidfile {0}")]
    Pidfile(PathBuf, #[source] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What to start, and where its output and pid go.
#[derive(Debug)]
pub struct Launch<'a> {
    pub ip_cmd: &'a Path,
    pub netns: &'a str,
    pub binary: &'a Path,
    pub env: &'a [(String, String)],
    pub log: &'a Path,
    pub pidfile: &'a Path,
}

/// Starts the binary via `ip netns exec` (which execs it: the child's pid is
/// the stand-in's own, so signals reach it directly).
pub fn spawn(l: &Launch<'_>) -> Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(l.log)
        .map_err(|e| Error::Log(l.log.to_path_buf(), e))?;
    let log2 = log
        .try_clone()
        .map_err(|e| Error::Log(l.log.to_path_buf(), e))?;
    let child = Command::new(l.ip_cmd)
        .args(["netns", "exec", l.netns])
        .arg(l.binary)
        .env_clear()
        .envs(l.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        // Its own process group: a Ctrl-C meant for the runner does not
        // reach the stand-ins directly; the runner stops them itself.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::Spawn(l.binary.to_path_buf(), l.netns.to_string(), e))?;
    if let Some(pid) = child.id() {
        std::fs::write(l.pidfile, pid.to_string())
            .map_err(|e| Error::Pidfile(l.pidfile.to_path_buf(), e))?;
    }
    Ok(child)
}

fn signal(pid: u32, sig: Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        // ESRCH (already gone) is the outcome we want anyway.
        let _ = kill_process(pid, sig);
    }
}

/// SIGTERM, then SIGKILL once `grace` has passed; returns the exit status.
pub async fn terminate(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    if let Some(pid) = child.id() {
        signal(pid, Signal::TERM);
    }
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            let _ = child.start_kill();
            child.wait().await.ok()
        }
    }
}

/// After a runner crash its stand-ins may still run: kill the one a pidfile
/// names if its command line is a binary of `standin_dir` (a reused pid of
/// another program is never touched), and wait until it is gone.
pub async fn kill_stale(pidfile: &Path, standin_dir: &Path) {
    let Ok(text) = std::fs::read_to_string(pidfile) else {
        return;
    };
    let Ok(pid) = text.trim().parse::<u32>() else {
        return;
    };
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let ours = std::fs::read(proc_dir.join("cmdline"))
        .map(|c| String::from_utf8_lossy(&c).starts_with(&*standin_dir.to_string_lossy()))
        .unwrap_or(false);
    if !ours {
        return;
    }
    tracing::info!(pid, pidfile = %pidfile.display(), "killing a stand-in left by an earlier runner");
    signal(pid, Signal::KILL);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    // Not our child, so there is no wait(): poll /proc until it is reaped.
    while proc_dir.exists() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
