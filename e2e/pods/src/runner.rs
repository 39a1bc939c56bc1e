//! The runner: watches the Pods bound to its Node, keeps one supervisor per
//! live stand-in Pod, hands out Pod IPs and takes them back when the
//! supervisor has stopped its process.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Config};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::net::{self, Allocator, Cidr};
use crate::podspec;
use crate::supervisor::{self, Shared, Stops};

/// Errors that keep the runner from starting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the test Pod network is not in place")]
    Network(#[from] net::Error),
    #[error("no `ip` command (iproute2) on PATH")]
    NoIpCommand,
    #[error("state dir {0}")]
    StateDir(PathBuf, #[source] std::io::Error),
    #[error("reading kubeconfig {0}")]
    Kubeconfig(PathBuf, #[source] kube::config::KubeconfigError),
    #[error("building the Kubernetes client")]
    Client(#[source] kube::Error),
    #[error("the openclaw install")]
    Runtime(#[from] crate::runtime::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone)]
pub struct RunnerConfig {
    pub kubeconfig: PathBuf,
    pub node: String,
    pub pod_cidr: Cidr,
    pub netns: String,
    pub state_dir: PathBuf,
    pub standin_dir: PathBuf,
    /// The real runtime's install (`e2e/openclaw.sh`), for Pods of image
    /// `clawfed.test/openclaw:<its version>`.
    pub openclaw_dir: Option<PathBuf>,
    /// Where the provisioner keeps the volumes it makes for class-less
    /// claims ([`crate::provisioner`]); none: it does not run.
    pub volume_dir: Option<PathBuf>,
    /// Where the cluster's Pods pull from (an air-gapped cluster: only its
    /// mirror).
    pub registry: podspec::Registry,
}

/// Finds `ip` on PATH (resolved once: stand-ins get an empty environment).
pub fn find_ip() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join("ip"))
        .find(|p| p.is_file())
        .ok_or(Error::NoIpCommand)
}

/// What the runner tracks for one live stand-in Pod.
struct Tracked {
    gone: CancellationToken,
}

struct Runner {
    shared: Arc<Shared>,
    alloc: Allocator,
    cidr: Cidr,
    tracked: HashMap<String, Tracked>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    done: mpsc::UnboundedSender<String>,
    first_sync: bool,
}

/// Runs until `shutdown`; then stops every stand-in and returns.
pub async fn run(config: RunnerConfig, shutdown: CancellationToken) -> Result<()> {
    let ip_cmd = find_ip()?;
    // Nothing dials the test range before its blackhole and via-route exist.
    net::check_routes(&ip_cmd)?;
    std::fs::create_dir_all(&config.state_dir)
        .map_err(|e| Error::StateDir(config.state_dir.clone(), e))?;
    let state_dir = std::fs::canonicalize(&config.state_dir)
        .map_err(|e| Error::StateDir(config.state_dir.clone(), e))?;
    let kubeconfig = Kubeconfig::read_from(&config.kubeconfig)
        .map_err(|e| Error::Kubeconfig(config.kubeconfig.clone(), e))?;
    let kube_config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Kubeconfig(config.kubeconfig.clone(), e))?;
    let client = Client::try_from(kube_config).map_err(Error::Client)?;
    let openclaw = config
        .openclaw_dir
        .as_deref()
        .map(crate::runtime::OpenClawInstall::open)
        .transpose()?;

    // Pod processes of an earlier runner that died without stopping them.
    let mut dirs = vec![config.standin_dir.as_path()];
    if let Some(i) = &openclaw {
        dirs.push(&i.dir);
    }
    for entry in std::fs::read_dir(&state_dir)
        .into_iter()
        .flatten()
        .flatten()
    {
        crate::process::kill_stale(&entry.path().join("pid"), &dirs).await;
    }

    let shared = Arc::new(Shared {
        client: client.clone(),
        ip_cmd,
        netns: config.netns.clone(),
        standin_dir: config.standin_dir.clone(),
        state_dir,
        openclaw: openclaw.clone(),
        registry: config.registry.clone(),
    });
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let mut runner = Runner {
        shared,
        alloc: Allocator::new(config.pod_cidr),
        cidr: config.pod_cidr,
        tracked: HashMap::new(),
        tasks: TaskTracker::new(),
        shutdown: shutdown.clone(),
        done: done_tx,
        first_sync: true,
    };
    if let Some(dir) = config.volume_dir.clone() {
        runner.tasks.spawn(crate::provisioner::run(
            client.clone(),
            dir,
            shutdown.clone(),
        ));
    }
    let pods: Api<Pod> = Api::all(client);
    let selector = format!("spec.nodeName={}", config.node);
    let mut events = watcher::watcher(pods, watcher::Config::default().fields(&selector))
        .default_backoff()
        .boxed();
    let mut listing: Vec<Pod> = Vec::new();
    tracing::info!(node = %config.node, cidr = %config.pod_cidr, netns = %config.netns, openclaw = ?openclaw.as_ref().map(|i| &i.version), "runner starting");
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(uid) = done_rx.recv() => runner.finished(&uid),
            event = events.next() => match event {
                None => break,
                Some(Err(e)) => tracing::warn!(error = %e, "pod watch failed; retrying with backoff"),
                Some(Ok(Event::Init)) => listing.clear(),
                Some(Ok(Event::InitApply(pod))) => listing.push(pod),
                Some(Ok(Event::InitDone)) => runner.resync(std::mem::take(&mut listing)),
                Some(Ok(Event::Apply(pod))) => runner.apply(&pod),
                Some(Ok(Event::Delete(pod))) => runner.gone(&uid_of(&pod)),
            },
        }
    }
    tracing::info!(pods = runner.tracked.len(), "runner stopping its stand-ins");
    runner.tasks.close();
    // Supervisors end within their grace (capped at 5 s) after the shutdown.
    if tokio::time::timeout(Duration::from_secs(15), runner.tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!("some stand-ins did not stop in 15 s");
    }
    Ok(())
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// The Pod IP recorded in the Pod's status, if it is of `cidr`.
fn recorded_ip(pod: &Pod, cidr: &Cidr) -> Option<Ipv4Addr> {
    let ip: Ipv4Addr = pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
    cidr.contains(ip).then_some(ip)
}

fn wants_run(pod: &Pod, registry: &podspec::Registry) -> bool {
    let terminal = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    registry.runs(pod) && pod.metadata.deletion_timestamp.is_none() && !terminal
}

impl Runner {
    /// A full listing (first start or after a watch restart): keep the IPs
    /// Pods already have, start what is new, stop what vanished meanwhile.
    fn resync(&mut self, pods: Vec<Pod>) {
        for pod in pods.iter().filter(|p| wants_run(p, &self.shared.registry)) {
            let uid = uid_of(pod);
            if let Some(ip) = recorded_ip(pod, &self.cidr)
                && !self.alloc.reserve(&uid, ip)
            {
                tracing::warn!(%uid, %ip, "recorded pod IP is taken; the pod gets a new one");
            }
        }
        let live: HashSet<String> = pods
            .iter()
            .filter(|p| wants_run(p, &self.shared.registry))
            .map(uid_of)
            .collect();
        let vanished: Vec<String> = self
            .tracked
            .keys()
            .filter(|u| !live.contains(*u))
            .cloned()
            .collect();
        for uid in vanished {
            self.gone(&uid);
        }
        for pod in &pods {
            self.apply(pod);
        }
        if std::mem::take(&mut self.first_sync) {
            self.remove_orphan_dirs(&live);
            // cluster.sh waits for this line before it calls the cluster up.
            tracing::info!(tracked = self.tracked.len(), "runner.watching");
        }
    }

    /// State dirs of Pods that no longer exist (their processes were killed
    /// by `process_stale` before the watch began).
    fn remove_orphan_dirs(&self, live: &HashSet<String>) {
        let entries = std::fs::read_dir(&self.shared.state_dir);
        for entry in entries.into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !live.contains(&name) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }

    fn apply(&mut self, pod: &Pod) {
        let uid = uid_of(pod);
        if uid.is_empty() || !self.shared.registry.runs(pod) {
            return;
        }
        if !wants_run(pod, &self.shared.registry) {
            self.gone(&uid);
            return;
        }
        if self.tracked.contains_key(&uid) {
            return;
        }
        if let Some(ip) = recorded_ip(pod, &self.cidr) {
            self.alloc.reserve(&uid, ip);
        }
        let ip = match self.alloc.allocate(&uid) {
            Ok(ip) => ip,
            Err(e) => {
                tracing::error!(error = %e, %uid, "no pod IP left");
                return;
            }
        };
        let stops = Stops {
            gone: CancellationToken::new(),
            shutdown: self.shutdown.clone(),
        };
        self.tracked.insert(
            uid.clone(),
            Tracked {
                gone: stops.gone.clone(),
            },
        );
        let shared = self.shared.clone();
        let done = self.done.clone();
        let pod = pod.clone();
        self.tasks.spawn(async move {
            supervisor::supervise(shared, pod, ip, stops).await;
            let _ = done.send(uid);
        });
    }

    fn gone(&mut self, uid: &str) {
        if let Some(t) = self.tracked.get(uid) {
            t.gone.cancel();
        }
    }

    /// The supervisor stopped its process: only now may the IP be reused.
    fn finished(&mut self, uid: &str) {
        self.tracked.remove(uid);
        self.alloc.release(uid);
    }
}
