//! Real `clawfed-hub` and `clawfed-spoke` processes for tests and the fault
//! runner: the binaries of the target dir, children killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

/// A binary of this target dir (`target/debug/<name>`), found from a test
/// binary (`target/debug/deps/`) or a program beside it.
pub fn bin(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let here = exe.parent().context("target directory")?;
    let candidates = [Some(here), here.parent()];
    let path = candidates
        .into_iter()
        .flatten()
        .map(|d| d.join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| here.join(name));
    ensure!(
        path.exists(),
        "{} is missing: build it first with `cargo build -p clawfed-hub -p clawfed-spoke --bins`",
        path.display()
    );
    Ok(path)
}

/// `clawfed ARGS` (the CLI of this target dir) against the hub at
/// `server` as `token`: its stdout, or an error carrying its stderr.
pub fn clawfed(server: &str, token: &str, args: &[impl AsRef<std::ffi::OsStr>]) -> Result<String> {
    let out = Command::new(bin("clawfed")?)
        .args(["--server", server, "--token", token])
        .args(args)
        .output()
        .context("running clawfed")?;
    ensure!(
        out.status.success(),
        "clawfed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Where a `clawfed-spoke --applier kube` child finds what it needs.
#[derive(Debug, Clone, Copy)]
pub struct KubeSpoke<'a> {
    pub hub_url: &'a str,
    pub ca_file: &'a Path,
    pub cluster_name: &'a str,
    pub state_dir: &'a Path,
    /// Acting as the spoke's ServiceAccount.
    pub kubeconfig: &'a Path,
    /// Only for its first start (enrolment).
    pub token_file: Option<&'a Path>,
}

impl KubeSpoke<'_> {
    /// The command, with the environment's `CLAWFED_*` and `KUBECONFIG`
    /// removed (only the flags say what it does), metrics on port 0 and a
    /// 1 s reconnect cap; add flags before spawning.
    pub fn command(&self) -> Result<Command> {
        let mut c = Command::new(bin("clawfed-spoke")?);
        for (k, _) in std::env::vars() {
            if k.starts_with("CLAWFED_") || k == "KUBECONFIG" {
                c.env_remove(k);
            }
        }
        c.args(["--hub-url", self.hub_url])
            .arg("--ca-file")
            .arg(self.ca_file)
            .args(["--cluster-name", self.cluster_name])
            .arg("--state-dir")
            .arg(self.state_dir)
            .args(["--applier", "kube"])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(["--backoff-max-seconds", "1"])
            .arg("--kubeconfig")
            .arg(self.kubeconfig)
            .env("CLAWFED_LOG", "info");
        if let Some(token) = self.token_file {
            c.arg("--bootstrap-token-file").arg(token);
        }
        Ok(c)
    }
}

/// What a clawfed process prints on stdout once its listeners are bound:
/// `clawfed-hub listening: rest=… grpc=… metrics=…/metrics link=… tunnel=…
/// database=…`, `clawfed-spoke listening: metrics=…/metrics`.
#[derive(Debug, Clone)]
pub struct Listening {
    line: String,
}

impl Listening {
    /// The hub's line's prefix.
    pub const HUB: &str = "clawfed-hub listening:";
    /// The spoke's line's prefix.
    pub const SPOKE: &str = "clawfed-spoke listening:";

    /// The whole line.
    pub fn line(&self) -> &str {
        &self.line
    }

    /// The port of the address in `key=` (`http://127.0.0.1:8080/metrics`
    /// → 8080).
    pub fn port(&self, key: &str) -> Result<u16> {
        let value = self.field(key)?;
        let authority = value
            .split_once("://")
            .map_or(value.as_str(), |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default();
        authority
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse().ok())
            .with_context(|| format!("no port in {key}={value}"))
    }

    /// Pins a hub config file that bound port 0 to the ports this line
    /// names (`api.restAddr`, `link.addr`, and `tunnel.addr` when it binds
    /// port 0), so a restarted hub listens where its clients (and the
    /// Gateways) were told: returns (REST port, link port).
    pub fn pin_hub_ports(&self, config: &Path) -> Result<(u16, u16)> {
        let (rest, link) = (self.port("rest")?, self.port("link")?);
        let mut doc: serde_json::Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(config)?)?;
        doc["api"]["restAddr"] = serde_json::json!(format!("127.0.0.1:{rest}"));
        doc["link"]["addr"] = serde_json::json!(format!("127.0.0.1:{link}"));
        // `tunnel=off` has no port: nothing to pin.
        if let (Some(host), Ok(port)) = (
            doc["tunnel"]["addr"]
                .as_str()
                .and_then(|a| a.strip_suffix(":0")),
            self.port("tunnel"),
        ) {
            doc["tunnel"]["addr"] = serde_json::json!(format!("{host}:{port}"));
        }
        std::fs::write(config, serde_yaml_ng::to_string(&doc)?)?;
        Ok((rest, link))
    }

    /// The value of `key=` (e.g. `rest` → `http://127.0.0.1:8080`).
    pub fn field(&self, key: &str) -> Result<String> {
        let prefix = format!("{key}=");
        self.line
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&prefix))
            .map(str::to_owned)
            .with_context(|| format!("no {key}= in {}", self.line))
    }
}

/// A child process, killed (SIGKILL) and reaped when dropped.
pub struct Proc {
    pub tag: String,
    child: Option<Child>,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

impl Proc {
    pub fn spawn(tag: &str, command: &mut Command, logs: &Path) -> Result<Self> {
        let stdout = logs.join(format!("{tag}.out"));
        let stderr = logs.join(format!("{tag}.err"));
        let child = command
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout)?)
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()
            .with_context(|| format!("spawn {tag}"))?;
        Ok(Self {
            tag: tag.to_owned(),
            child: Some(child),
            stdout,
            stderr,
        })
    }

    pub fn text(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// Waits up to `within` for a hub's "listening" line.
    pub async fn hub_listening(&mut self, within: Duration) -> Result<Listening> {
        self.listening(Listening::HUB, within).await
    }

    /// Waits up to `within` for a spoke's "listening" line.
    pub async fn spoke_listening(&mut self, within: Duration) -> Result<Listening> {
        self.listening(Listening::SPOKE, within).await
    }

    /// Waits up to `within` for the [`Listening`] line starting with
    /// `prefix`; an error with its standard error when the process exits
    /// first or does not start in time.
    pub async fn listening(&mut self, prefix: &str, within: Duration) -> Result<Listening> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(line) = self.stdout_text().lines().find(|l| l.starts_with(prefix)) {
                return Ok(Listening {
                    line: line.to_owned(),
                });
            }
            ensure!(
                self.alive(),
                "{} exited during start-up:\n{}",
                self.tag,
                self.stderr_text()
            );
            ensure!(
                Instant::now() < deadline,
                "{} did not start within {within:?}:\n{}",
                self.tag,
                self.stderr_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Its standard output so far.
    pub fn stdout_text(&self) -> String {
        Self::text(&self.stdout)
    }

    /// Its standard error so far.
    pub fn stderr_text(&self) -> String {
        Self::text(&self.stderr)
    }

    /// Its exit status once it exited (reaped then).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }

    /// SIGTERM, then waits up to `within` for the exit: its status and
    /// standard error; an error (the process killed) when it outlives
    /// `within`.
    pub async fn terminate_within(&mut self, within: Duration) -> Result<(ExitStatus, String)> {
        self.signal("-TERM")?;
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.try_wait() {
                return Ok((status, self.stderr_text()));
            }
            if Instant::now() >= deadline {
                let stderr = self.stderr_text();
                let _ = self.kill9();
                bail!(
                    "{} did not exit within {within:?} of SIGTERM; stderr:\n{stderr}",
                    self.tag
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// `kill -9`, then reap.
    pub fn kill9(&mut self) -> Result<()> {
        let mut child = self.child.take().context("not running")?;
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// Sends `signal` (e.g. `-STOP`, `-CONT`) with kill(1).
    pub fn signal(&self, signal: &str) -> Result<()> {
        let pid = self.pid().context("not running")?;
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()?;
        ensure!(status.success(), "kill {signal} {pid}: {status}");
        Ok(())
    }

    /// SIGTERM, then a bounded wait (SIGKILL after it).
    pub async fn terminate(&mut self) {
        if self.child.is_none() {
            return;
        }
        if let Err(e) = self.terminate_within(Duration::from_secs(20)).await {
            eprintln!("{e:#}; killed");
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A stopped child must run again to die of SIGKILL promptly.
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
