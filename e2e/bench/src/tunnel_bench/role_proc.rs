//! Child processes: the hub and spoke roles, started from this binary and
//! asked on stdin how many tunnels they have open.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

pub(super) struct RoleProc {
    child: Child,
    pub(super) pid: u32,
    stdin: Option<ChildStdin>,
    stdout: tokio::io::Lines<BufReader<ChildStdout>>,
}

impl RoleProc {
    pub(super) async fn spawn(
        role: &str,
        dir: &Path,
        extra: &[String],
        ready: &str,
    ) -> anyhow::Result<Self> {
        let log = std::fs::File::create(dir.join(format!("{role}.log")))?;
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("--role")
            .arg(role)
            .arg("--dir")
            .arg(dir)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        let mut child = cmd.spawn().with_context(|| format!("spawn {role}"))?;
        let pid = child.id().context("pid")?;
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().context("stdout")?).lines();
        tokio::time::timeout(Duration::from_secs(120), async {
            loop {
                match stdout.next_line().await? {
                    Some(l) if l == ready => return anyhow::Ok(()),
                    Some(_) => continue,
                    None => bail!("{role} exited before it was {ready} (see {role}.log)"),
                }
            }
        })
        .await
        .with_context(|| format!("{role} not {ready} within 120 s"))??;
        Ok(Self {
            child,
            pid,
            stdin,
            stdout,
        })
    }

    /// Tunneled connections the role has open now.
    pub(super) async fn open(&mut self) -> anyhow::Result<u64> {
        let stdin = self.stdin.as_mut().context("stdin closed")?;
        stdin.write_all(b"open\n").await?;
        stdin.flush().await?;
        let line = tokio::time::timeout(Duration::from_secs(10), self.stdout.next_line())
            .await
            .context("no answer")??
            .context("exited")?;
        Ok(line
            .strip_prefix("open ")
            .context("bad answer")?
            .trim()
            .parse()?)
    }

    /// Closes stdin (the role stops) and waits for it, bounded.
    pub(super) async fn stop(mut self) {
        drop(self.stdin.take());
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }
}
