//! Pod processes: started inside a network namespace with exactly the
//! environment given (nothing inherited), stopped with SIGTERM then SIGKILL.
//! Each runs in its own process group, which stands in for the container:
//! when the main process is gone, whatever it left running is killed too
//! (the real runtime spawns worker processes).

use std::ffi::OsString;
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
    /// The program and its arguments.
    pub argv: &'a [OsString],
    /// A shell script run first (`sh -c`), which ends with `exec "$@"`:
    /// the sandbox's bind mounts ([`crate::sandbox::prelude`]).
    pub prelude: Option<&'a str>,
    /// The container's `workingDir` (`/` when it sets none).
    pub working_dir: &'a Path,
    pub env: &'a [(String, String)],
    pub log: &'a Path,
    pub pidfile: &'a Path,
}

/// Starts the program via `ip netns exec` (which execs it, as does the
/// prelude: the child's pid is the program's own, so signals reach it
/// directly).
pub fn spawn(l: &Launch<'_>) -> Result<Child> {
    let program = PathBuf::from(l.argv.first().cloned().unwrap_or_default());
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(l.log)
        .map_err(|e| Error::Log(l.log.to_path_buf(), e))?;
    let log2 = log
        .try_clone()
        .map_err(|e| Error::Log(l.log.to_path_buf(), e))?;
    let mut command = Command::new(l.ip_cmd);
    // The container's working dir, not the runner's: a runner started
    // under /tmp would leave the runtime a cwd its /tmp emptyDir hides (its
    // child processes then fail to spawn with ENOENT).
    command.current_dir(l.working_dir);
    command.args(["netns", "exec", l.netns]);
    if let Some(script) = l.prelude {
        command.args(["/bin/sh", "-c", script, "sh"]);
    }
    let child = command
        .args(l.argv)
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
        .map_err(|e| Error::Spawn(program.clone(), l.netns.to_string(), e))?;
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

/// SIGKILL to the process group `pgid` leads: whatever the main process left.
pub fn kill_group(pgid: u32) {
    if let Some(pid) = i32::try_from(pgid).ok().and_then(Pid::from_raw) {
        let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    }
}

/// SIGTERM, then SIGKILL once `grace` has passed; then the rest of its
/// process group. Returns the exit status.
pub async fn terminate(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    let pid = child.id();
    if let Some(pid) = pid {
        signal(pid, Signal::TERM);
    }
    let status = match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            let _ = child.start_kill();
            child.wait().await.ok()
        }
    };
    if let Some(pid) = pid {
        kill_group(pid);
    }
    status
}

/// After a runner crash its Pods' processes may still run: kill the one a
/// pidfile names, and its process group, if its executable or command line
/// lies in one of `dirs` (the stand-in dir, the runtime install; a reused
/// pid of another program is never touched), and wait until it is gone.
/// The runtime renames its process title, so its executable decides.
pub async fn kill_stale(pidfile: &Path, dirs: &[&Path]) {
    let Ok(text) = std::fs::read_to_string(pidfile) else {
        return;
    };
    let Ok(pid) = text.trim().parse::<u32>() else {
        return;
    };
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let cmdline = std::fs::read(proc_dir.join("cmdline"))
        .map(|c| String::from_utf8_lossy(&c).into_owned())
        .unwrap_or_default();
    let exe = std::fs::read_link(proc_dir.join("exe")).unwrap_or_default();
    let ours = dirs
        .iter()
        .any(|d| cmdline.starts_with(&*d.to_string_lossy()) || exe.starts_with(d));
    if !ours {
        return;
    }
    tracing::info!(pid, pidfile = %pidfile.display(), "killing a pod process left by an earlier runner");
    signal(pid, Signal::KILL);
    kill_group(pid);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    // Not our child, so there is no wait(): poll /proc until it is reaped.
    while proc_dir.exists() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
