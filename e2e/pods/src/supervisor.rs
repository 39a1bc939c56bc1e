//! One Pod's life, as a kubelet would run it: prepare env and files (and,
//! for the real runtime, its sandbox: network namespace and volumes),
//! start the process, probe it, report status, restart it with backoff
//! when it exits, stop it when the Pod goes.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use tokio::process::Child;
use tokio_util::sync::CancellationToken;

use crate::podspec::{self, FAST_PROBE, Program, RunPlan};
use crate::runtime::OpenClawInstall;
use crate::sandbox::{self, BindMount, VolumeSource};
use crate::status::{LastExit, Observed, State};
use crate::{env, probe, process};

/// What every supervisor shares.
pub struct Shared {
    pub client: Client,
    pub ip_cmd: PathBuf,
    pub netns: String,
    pub standin_dir: PathBuf,
    pub state_dir: PathBuf,
    /// The real runtime, when the runner was given an install.
    pub openclaw: Option<OpenClawInstall>,
    /// Where the cluster's Pods pull from.
    pub registry: podspec::Registry,
}

/// What the runner starts for a Pod, resolved once.
enum Started {
    /// A stand-in binary, in the shared Pod network namespace.
    Standin(PathBuf),
    /// The real runtime in its own sandbox.
    Runtime {
        argv: Vec<std::ffi::OsString>,
        netns: String,
    },
}

/// The field manager of the runner's status writes (kwok's is `kwok`).
pub const FIELD_MANAGER: &str = "clawfed-podrunner";

/// Restart backoff: doubling from 500 ms, at most 10 s; reset once a run
/// passed its probe.
const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// How a supervisor is told to end.
#[derive(Debug, Clone)]
pub struct Stops {
    /// The Pod is gone or being deleted: stop and remove its state.
    pub gone: CancellationToken,
    /// The runner stops: stop the process, keep the state (a restarted
    /// runner starts the Pod again with the same IP).
    pub shutdown: CancellationToken,
}

impl Stops {
    async fn any(&self) {
        tokio::select! {
            _ = self.gone.cancelled() => {}
            _ = self.shutdown.cancelled() => {}
        }
    }

    fn stopped(&self) -> bool {
        self.gone.is_cancelled() || self.shutdown.is_cancelled()
    }
}

/// Pod fields read once at start (a Pod's spec does not change under it).
struct Ident {
    name: String,
    namespace: String,
    uid: String,
}

struct Supervisor {
    shared: Arc<Shared>,
    pod: Pod,
    ident: Ident,
    dir: PathBuf,
    obs: Observed,
    /// A status change not yet accepted by the apiserver (retried).
    dirty: bool,
}

pub fn state_dir_of(state_dir: &Path, uid: &str) -> PathBuf {
    state_dir.join(uid)
}

/// Runs the Pod until a stop; always removes its state when the Pod is gone.
pub async fn supervise(shared: Arc<Shared>, pod: Pod, ip: Ipv4Addr, stops: Stops) {
    let ident = Ident {
        name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
    };
    let dir = state_dir_of(&shared.state_dir, &ident.uid);
    let status = pod.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    let first = podspec::first_container(&pod);
    let restart_count = status
        .container_statuses
        .as_ref()
        .and_then(|c| c.first())
        .map_or(0, |c| c.restart_count);
    let obs = Observed {
        pod_ip: ip,
        start_time: status.start_time.map_or(now, |t| t.0),
        container: first.map(|c| c.name.clone()).unwrap_or_default(),
        image: first.and_then(|c| c.image.clone()).unwrap_or_default(),
        state: State::Waiting {
            reason: "ContainerCreating".into(),
            message: String::new(),
        },
        ready: false,
        ready_changed: now,
        not_ready_message: None,
        restart_count,
        last_exit: None,
        pid: None,
    };
    let mut s = Supervisor {
        shared,
        pod,
        ident,
        dir,
        obs,
        dirty: false,
    };
    let span = tracing::info_span!("pod", ns = %s.ident.namespace, name = %s.ident.name, ip = %ip);
    tracing::Instrument::instrument(s.run(&stops), span).await;
    if stops.gone.is_cancelled() {
        sandbox::teardown_network(&s.shared.ip_cmd, &s.ident.uid).await;
        let _ = std::fs::remove_dir_all(&s.dir);
    }
}

impl Supervisor {
    async fn run(&mut self, stops: &Stops) {
        if let Err(e) = std::fs::create_dir_all(&self.dir) {
            tracing::error!(error = %e, dir = %self.dir.display(), "cannot create the pod's state dir");
        }
        let plan = match podspec::run_plan(&self.pod, &self.shared.registry) {
            Ok(plan) => plan,
            Err(e @ podspec::Error::NotFromMirror { .. }) => {
                return self.refuse("ErrImagePull", e.to_string(), stops).await;
            }
            Err(e) => return self.refuse("InvalidImageName", e.to_string(), stops).await,
        };
        let program = match self.resolve(&plan).await {
            Ok(p) => p,
            Err((reason, msg)) => return self.refuse(reason, msg, stops).await,
        };
        let mut backoff = BACKOFF_MIN;
        while !stops.stopped() {
            let started = self.start(&plan, &program).await;
            let delay = match started {
                Ok(child) => {
                    let Some(exit) = self.watch(child, &plan, stops, &mut backoff).await else {
                        return;
                    };
                    self.obs.restart_count += 1;
                    self.obs.last_exit = Some(exit);
                    self.set_state(
                        "CrashLoopBackOff",
                        format!(
                            "back-off {} ms restarting the exited container",
                            backoff.as_millis()
                        ),
                    );
                    backoff
                }
                Err((reason, message)) => {
                    tracing::warn!(reason, message, "container not started");
                    self.set_state(reason, message);
                    backoff
                }
            };
            self.publish().await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = stops.any() => return,
            }
        }
    }

    fn set_state(&mut self, reason: &str, message: String) {
        self.obs.state = State::Waiting {
            reason: reason.to_string(),
            message,
        };
        self.obs.pid = None;
        self.set_ready(false, None);
    }

    fn set_ready(&mut self, ready: bool, message: Option<String>) {
        if self.obs.ready != ready {
            self.obs.ready = ready;
            self.obs.ready_changed = Timestamp::now();
            self.dirty = true;
        }
        if self.obs.not_ready_message != message {
            self.obs.not_ready_message = message;
            self.dirty = true;
        }
    }

    /// A Pod the runner cannot run at all: say why, then wait for its end.
    async fn refuse(&mut self, reason: &str, message: String, stops: &Stops) {
        tracing::warn!(reason, message, "cannot run this pod");
        self.set_state(reason, message);
        self.publish().await;
        while self.dirty {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => self.publish().await,
                _ = stops.any() => return,
            }
        }
        stops.any().await;
    }

    /// The binary of a stand-in, or the runtime's install and sandbox
    /// network. The error is a kubelet-style (reason, message).
    async fn resolve(&mut self, plan: &RunPlan) -> Result<Started, (&'static str, String)> {
        match &plan.program {
            Program::Standin { binary } => {
                let binary = self.shared.standin_dir.join(binary);
                if !binary.is_file() {
                    let msg = format!("no stand-in binary {}", binary.display());
                    return Err(("ErrImageNeverPull", msg));
                }
                Ok(Started::Standin(binary))
            }
            Program::OpenClaw { version, args } => {
                let install = self
                    .shared
                    .openclaw
                    .as_ref()
                    .filter(|i| &i.version == version)
                    .ok_or_else(|| {
                        let have = self.shared.openclaw.as_ref().map_or_else(
                            || "none (the runner has no --openclaw-dir)".to_string(),
                            |i| i.version.clone(),
                        );
                        (
                            "ErrImageNeverPull",
                            format!(
                                "openclaw {version} is not installed for the pod runner (installed: {have}; e2e/openclaw.sh installs the version of e2e/openclaw/package.json)"
                            ),
                        )
                    })?;
                self.runtime_started(install.argv(args)).await
            }
            Program::Codex { version, args } => {
                let install = self
                    .shared
                    .openclaw
                    .as_ref()
                    .filter(|i| i.codex_version.as_ref() == Some(version))
                    .ok_or_else(|| {
                        let have = self
                            .shared
                            .openclaw
                            .as_ref()
                            .and_then(|i| i.codex_version.clone())
                            .unwrap_or_else(|| "none".into());
                        (
                            "ErrImageNeverPull",
                            format!(
                                "codex {version} is not installed for the pod runner (installed: {have}; e2e/openclaw.sh installs the @openai/codex of e2e/openclaw/package-lock.json)"
                            ),
                        )
                    })?;
                self.runtime_started(install.codex_argv(args)).await
            }
        }
    }

    /// A real runtime's sandbox network, for `argv`.
    async fn runtime_started(
        &mut self,
        argv: Vec<std::ffi::OsString>,
    ) -> Result<Started, (&'static str, String)> {
        let names = sandbox::setup_network(
            &self.shared.ip_cmd,
            &self.shared.netns,
            &self.ident.uid,
            self.obs.pod_ip,
        )
        .await
        .map_err(|e| ("CreatePodSandboxError", e.to_string()))?;
        // cluster.sh down removes what a killed runner left.
        let _ = std::fs::write(self.dir.join("netns"), &names.netns);
        Ok(Started::Runtime {
            argv,
            netns: names.netns,
        })
    }

    /// The runtime's bind mounts: Secret and ConfigMap files from the
    /// container root, emptyDirs from the Pod's state, claims from their
    /// volumes' host paths.
    async fn mounts(&self, root: &Path) -> Result<Vec<BindMount>, (&'static str, String)> {
        let sources = sandbox::mount_sources(&self.pod)
            .map_err(|e| ("CreateContainerConfigError", e.to_string()))?;
        let container = podspec::first_container(&self.pod);
        let mounts: Vec<_> = container
            .and_then(|c| c.volume_mounts.clone())
            .unwrap_or_default();
        let mut out = Vec::new();
        for (i, source) in sources {
            let m = &mounts[i];
            let rel = m.mount_path.trim_start_matches('/');
            let dir = match source {
                VolumeSource::Files => root.join(rel),
                VolumeSource::EmptyDir => self.dir.join("empty-dir").join(&m.name),
                VolumeSource::Claim(claim) => {
                    sandbox::claim_dir(&self.shared.client, &self.ident.namespace, &claim)
                        .await
                        .map_err(|e| {
                            (
                                "ContainerCreating",
                                format!("mounting volume {:?}: {e}", m.name),
                            )
                        })?
                }
            };
            std::fs::create_dir_all(&dir)
                .map_err(|e| ("RunContainerError", format!("{}: {e}", dir.display())))?;
            out.push(BindMount {
                source: dir,
                target: PathBuf::from(&m.mount_path),
                read_only: m.read_only.unwrap_or(false),
            });
        }
        Ok(out)
    }

    /// Env, files, process. The error is a kubelet-style (reason, message).
    async fn start(
        &mut self,
        plan: &RunPlan,
        program: &Started,
    ) -> Result<Child, (&'static str, String)> {
        let config_error = |e: env::Error| {
            let msg = match std::error::Error::source(&e) {
                Some(cause) => format!("{e}: {cause}"),
                None => e.to_string(),
            };
            ("CreateContainerConfigError", msg)
        };
        let sources = env::fetch(&self.shared.client, &self.pod)
            .await
            .map_err(config_error)?;
        let ip = self.obs.pod_ip.to_string();
        let mut vars = env::container_env(&self.pod, &ip, &sources).map_err(config_error)?;
        let files = env::volume_files(&self.pod, &sources).map_err(config_error)?;
        let root = self.dir.join("root");
        write_root(&root, &files).map_err(|e| ("RunContainerError", e))?;
        let (argv, netns, prelude) = match program {
            Started::Standin(binary) => (
                vec![binary.clone().into_os_string()],
                self.shared.netns.clone(),
                None,
            ),
            Started::Runtime { argv, netns } => {
                let mounts = self.mounts(&root).await?;
                let script = sandbox::prelude(&mounts)
                    .map_err(|e| ("CreateContainerConfigError", e.to_string()))?;
                if let Some(install) = &self.shared.openclaw {
                    install.image_env(&mut vars);
                }
                (argv.clone(), netns.clone(), Some(script))
            }
        };
        let labels = self.pod.metadata.labels.clone().unwrap_or_default();
        vars.extend([
            (
                "CLAWFED_STANDIN_LISTEN".to_string(),
                format!("{ip}:{}", plan.port),
            ),
            (
                "CLAWFED_STANDIN_ROOT".into(),
                root.to_string_lossy().into_owned(),
            ),
            ("CLAWFED_POD_NAME".into(), self.ident.name.clone()),
            ("CLAWFED_POD_NAMESPACE".into(), self.ident.namespace.clone()),
            ("CLAWFED_POD_UID".into(), self.ident.uid.clone()),
            (
                "CLAWFED_POD_LABELS".into(),
                serde_json::to_string(&labels).unwrap_or_else(|_| "{}".into()),
            ),
        ]);
        let working_dir = podspec::first_container(&self.pod)
            .and_then(|c| c.working_dir.clone())
            .filter(|d| d.starts_with('/'))
            .unwrap_or_else(|| "/".to_string());
        let launch = process::Launch {
            ip_cmd: &self.shared.ip_cmd,
            netns: &netns,
            argv: &argv,
            prelude: prelude.as_deref(),
            working_dir: Path::new(&working_dir),
            env: &vars,
            log: &self.dir.join("log"),
            pidfile: &self.dir.join("pid"),
        };
        let child = process::spawn(&launch).map_err(|e| {
            let msg = match std::error::Error::source(&e) {
                Some(cause) => format!("{e}: {cause}"),
                None => e.to_string(),
            };
            ("RunContainerError", msg)
        })?;
        tracing::info!(pid = child.id(), program = ?argv.first(), netns, "started");
        self.obs.state = State::Running {
            started_at: Timestamp::now(),
        };
        self.obs.pid = child.id();
        self.dirty = true;
        self.set_ready(false, Some("readiness probe has not passed yet".into()));
        self.publish().await;
        Ok(child)
    }

    /// Probes the running process until it exits (Some) or a stop (None).
    async fn watch(
        &mut self,
        mut child: Child,
        plan: &RunPlan,
        stops: &Stops,
        backoff: &mut Duration,
    ) -> Option<LastExit> {
        let started_at = match self.obs.state {
            State::Running { started_at } => started_at,
            State::Waiting { .. } => Timestamp::now(),
        };
        let mut passed_once = false;
        let mut failures = 0u32;
        loop {
            let delay = if passed_once {
                plan.probe.period
            } else {
                FAST_PROBE
            };
            let ip = self.obs.pod_ip;
            tokio::select! {
                status = child.wait() => {
                    let (exit_code, reason) = exit_of(status.ok());
                    tracing::warn!(exit_code, "container process exited");
                    // The container is gone: so is what it left running.
                    if let Some(pid) = self.obs.pid {
                        process::kill_group(pid);
                    }
                    return Some(LastExit {
                        exit_code,
                        reason: reason.into(),
                        started_at,
                        finished_at: Timestamp::now(),
                    });
                }
                _ = stops.any() => {
                    let status = process::terminate(&mut child, plan.grace).await;
                    tracing::info!(?status, gone = stops.gone.is_cancelled(), "stopped");
                    return None;
                }
                result = async {
                    tokio::time::sleep(delay).await;
                    probe::probe(ip, &plan.probe).await
                } => {
                    match result {
                        Ok(()) => {
                            failures = 0;
                            passed_once = true;
                            *backoff = BACKOFF_MIN;
                            if !self.obs.ready {
                                tracing::info!("readiness probe passed");
                            }
                            self.set_ready(true, None);
                        }
                        Err(e) => {
                            failures += 1;
                            let still_ready =
                                self.obs.ready && failures < plan.probe.failure_threshold;
                            if !still_ready {
                                self.set_ready(false, Some(e.describe()));
                            }
                        }
                    }
                }
            }
            if self.dirty {
                self.publish().await;
            }
        }
    }

    /// Sends the observed status; a failure leaves it dirty for the next
    /// tick. A Pod that is gone (404) or replaced (uid mismatch) needs none.
    async fn publish(&mut self) {
        let pods: Api<Pod> = Api::namespaced(self.shared.client.clone(), &self.ident.namespace);
        let mut patch = crate::status::patch(&self.obs);
        // The uid makes the patch a precondition: it never lands on a new
        // Pod of the same name.
        patch["metadata"] = serde_json::json!({ "uid": self.ident.uid });
        match pods
            .patch_status(
                &self.ident.name,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => self.dirty = false,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => self.dirty = false,
            Err(e) => {
                self.dirty = true;
                tracing::warn!(error = %e, "patching pod status failed; retrying");
            }
        }
    }
}

/// Exit code and reason as a kubelet reports them: a signal `n` is `128 + n`.
fn exit_of(status: Option<std::process::ExitStatus>) -> (i32, &'static str) {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) if s.success() => (0, "Completed"),
        Some(s) => (
            s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
            "Error",
        ),
        None => (128, "Error"),
    }
}

/// The container root, rebuilt for each start so a changed Secret shows.
fn write_root(root: &Path, files: &[(PathBuf, Vec<u8>)]) -> Result<(), String> {
    let fail = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    if root.exists() {
        std::fs::remove_dir_all(root).map_err(|e| fail("clearing", root, e))?;
    }
    std::fs::create_dir_all(root).map_err(|e| fail("creating", root, e))?;
    for (rel, data) in files {
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| fail("creating", parent, e))?;
        }
        std::fs::write(&path, data).map_err(|e| fail("writing", &path, e))?;
    }
    Ok(())
}
