//! What the benchmark programs share.

use std::path::Path;

pub mod fleet;

/// "release", "debug" or "custom" for a binary in a cargo target dir.
pub fn profile_of(bin: &Path) -> &'static str {
    match bin
        .parent()
        .and_then(|d| d.file_name())
        .and_then(|n| n.to_str())
    {
        Some("release") => "release",
        Some("debug") => "debug",
        _ => "custom",
    }
}

/// The `p`th percentile (0-100) of `sorted` (nearest rank); NaN when empty.
/// `clawfed-hub <args>` on SQLite in `dir` (its database, its CA), every
/// listener on an ephemeral loopback port, logging warnings.
pub fn sqlite_hub(hub_bin: &Path, dir: &Path, args: &[&str]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(hub_bin);
    c.args(args)
        .env_remove("CLAWFED_CONFIG")
        .env(
            "CLAWFED_DATABASE_URL",
            format!("sqlite://{}", dir.join("hub.db").display()),
        )
        .env("CLAWFED_LINK_CA_DIR", dir.join("ca"))
        .env("CLAWFED_LOG", "warn");
    for var in [
        "CLAWFED_REST_ADDR",
        "CLAWFED_GRPC_ADDR",
        "CLAWFED_METRICS_ADDR",
        "CLAWFED_LINK_ADDR",
        "CLAWFED_TUNNEL_ADDR",
    ] {
        c.env(var, "127.0.0.1:0");
    }
    c
}

/// The hub binary a bench runs: `given`, else `clawfed-hub` next to the
/// bench's own binary (same profile); an error naming the build command
/// when it is missing.
pub fn hub_bin(given: Option<std::path::PathBuf>) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    let bin = match given {
        Some(b) => b,
        None => std::env::current_exe()?
            .parent()
            .context("bench dir")?
            .join("clawfed-hub"),
    };
    anyhow::ensure!(
        bin.exists(),
        "{} not found: cargo build [--release] -p clawfed-hub",
        bin.display()
    );
    Ok(bin)
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Per-process figures read from `/proc`.
pub mod procfs {
    use anyhow::Context;

    /// Resident set size of `pid`, KiB.
    pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .context("no VmRSS")
    }

    /// CPU seconds (user + system) `pid` has used so far; NaN when unreadable.
    pub fn cpu_secs(pid: u32) -> f64 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return f64::NAN;
        };
        // Fields after the parenthesised command name; utime and stime are
        // the 14th and 15th fields overall, in clock ticks (100 Hz on Linux).
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let tick = |i: usize| {
            f.get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        (tick(11) + tick(12)) / 100.0
    }

    /// Busy and total clock ticks of the whole machine (first line of
    /// /proc/stat), to tell how much of the cores other work took.
    pub fn machine_ticks() -> (f64, f64) {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let v: Vec<f64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal ...
        let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
        let total: f64 = v.iter().take(8).sum();
        (total - idle, total)
    }

    /// CPU over a span: the machine's busy cores and this process's.
    pub struct CpuSpan {
        machine: (f64, f64),
        own: f64,
        at: std::time::Instant,
    }

    impl CpuSpan {
        pub fn start() -> Self {
            Self {
                machine: machine_ticks(),
                own: cpu_secs(std::process::id()),
                at: std::time::Instant::now(),
            }
        }

        /// "machine B of N cores busy over W s, this process C cores".
        pub fn note(&self) -> String {
            let wall = self.at.elapsed().as_secs_f64().max(1e-9);
            let (busy, total) = machine_ticks();
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
            let share = (busy - self.machine.0) / (total - self.machine.1).max(1.0);
            let own = (cpu_secs(std::process::id()) - self.own) / wall;
            format!(
                "machine {:.2} of {cores:.0} cores busy over {wall:.1} s, of which this process {own:.2}",
                share * cores
            )
        }
    }
}

/// The e2e test clusters' kube clients, and a count of the requests a
/// client sends (by verb: the benchmarks' LIST and write figures).
pub mod kubeapi {
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use anyhow::{Context, Result};
    use kube::client::ClientBuilder;
    use kube::config::{KubeConfigOptions, Kubeconfig};
    use kube::{Client, Config};

    /// `admin.kubeconfig` of the e2e cluster `cluster` (`e2e/cluster.sh`).
    pub fn kubeconfig_path(cluster: &str) -> Result<PathBuf> {
        let dir = match std::env::var_os("CLAWFED_CLUSTERS_DIR") {
            Some(d) => PathBuf::from(d),
            None => {
                let cache =
                    match std::env::var_os("CLAWFED_CACHE") {
                        Some(c) => PathBuf::from(c),
                        None => PathBuf::from(std::env::var_os("HOME").context(
                            "HOME is not set: set CLAWFED_CACHE or CLAWFED_CLUSTERS_DIR",
                        )?)
                        .join(".cache/clawfed"),
                    };
                cache.join("clusters")
            }
        };
        Ok(dir.join(cluster).join("admin.kubeconfig"))
    }

    /// The admin config of the e2e cluster `cluster`.
    pub async fn config(cluster: &str) -> Result<Config> {
        let path = kubeconfig_path(cluster)?;
        let kc = Kubeconfig::read_from(&path).with_context(|| {
            format!(
                "{} (is `e2e/cluster.sh up {cluster}` running?)",
                path.display()
            )
        })?;
        Ok(Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)
    }

    /// Request counters of one client.
    #[derive(Default, Debug)]
    pub struct Counts {
        writes: AtomicU64,
        lists: AtomicU64,
        watches: AtomicU64,
        gets: AtomicU64,
        by_verb: std::sync::Mutex<BTreeMap<String, u64>>,
        /// Answer times (ms) by [`timing_key`].
        took: std::sync::Mutex<BTreeMap<String, Vec<f64>>>,
    }

    /// A snapshot of [`Counts`].
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct Snapshot {
        pub writes: u64,
        pub lists: u64,
        pub watches: u64,
        pub gets: u64,
    }

    impl Counts {
        /// Counts one request.
        pub fn observe(&self, req: &http::Request<kube::client::Body>) {
            let verb = verb_of(req);
            match verb {
                "watch" => self.watches.fetch_add(1, Ordering::Relaxed),
                "list" => self.lists.fetch_add(1, Ordering::Relaxed),
                "get" => self.gets.fetch_add(1, Ordering::Relaxed),
                _ => self.writes.fetch_add(1, Ordering::Relaxed),
            };
            if let Ok(mut m) = self.by_verb.lock() {
                *m.entry(verb.to_string()).or_default() += 1;
            }
        }

        /// The counters now.
        pub fn snapshot(&self) -> Snapshot {
            Snapshot {
                writes: self.writes.load(Ordering::Relaxed),
                lists: self.lists.load(Ordering::Relaxed),
                watches: self.watches.load(Ordering::Relaxed),
                gets: self.gets.load(Ordering::Relaxed),
            }
        }

        /// Requests so far by verb.
        pub fn by_verb(&self) -> BTreeMap<String, u64> {
            self.by_verb.lock().map(|m| m.clone()).unwrap_or_default()
        }

        /// A client of `config` whose every request is counted and timed
        /// here (from the request to its response's headers).
        pub fn client(self: &Arc<Self>, config: Config) -> Result<Client> {
            let counts = self.clone();
            let layer = tower::layer::layer_fn(move |inner| Timed {
                inner,
                counts: counts.clone(),
            });
            Ok(ClientBuilder::try_from(config)?.with_layer(&layer).build())
        }

        fn record(&self, key: String, took: std::time::Duration) {
            if let Ok(mut m) = self.took.lock() {
                m.entry(key).or_default().push(took.as_secs_f64() * 1e3);
            }
        }

        /// Answered requests by "verb resource" (a record or ledger object
        /// named apart): count, p50 and p99 in ms, and the sum in seconds.
        pub fn timings(&self) -> Vec<Timing> {
            let m = self.took.lock().map(|m| m.clone()).unwrap_or_default();
            m.into_iter()
                .map(|(key, mut ms)| {
                    ms.sort_by(|a, b| a.total_cmp(b));
                    Timing {
                        count: ms.len(),
                        p50_ms: crate::percentile(&ms, 50.0),
                        p99_ms: crate::percentile(&ms, 99.0),
                        total_s: ms.iter().sum::<f64>() / 1e3,
                        key,
                    }
                })
                .collect()
        }

        /// Forgets the timings so far.
        pub fn reset_timings(&self) {
            if let Ok(mut m) = self.took.lock() {
                m.clear();
            }
        }
    }

    /// The answer times of one kind of request (see [`Counts::timings`]).
    #[derive(Debug, Clone)]
    pub struct Timing {
        pub key: String,
        pub count: usize,
        pub p50_ms: f64,
        pub p99_ms: f64,
        pub total_s: f64,
    }

    /// "verb resource" of a request: `patch deployments`; the spoke's
    /// desired-state records and ledger apart from other Secrets and
    /// ConfigMaps. Watches are left out (they last as long as they watch).
    fn timing_key(req: &http::Request<kube::client::Body>) -> Option<String> {
        let path = req.uri().path();
        if verb_of(req) == "watch" {
            return None;
        }
        let collection = is_collection(path);
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (resource, name) = if collection {
            (segs.last().copied().unwrap_or_default(), "")
        } else {
            let n = segs.len();
            (
                segs.get(n.wrapping_sub(2)).copied().unwrap_or_default(),
                segs.last().copied().unwrap_or_default(),
            )
        };
        let verb = verb_of(req);
        let what = if name.starts_with("clawfed-desired-") {
            "secrets (desired-state record)".to_string()
        } else if name == "clawfed-ledger" {
            "configmaps (ledger)".to_string()
        } else {
            resource.to_string()
        };
        Some(format!("{verb} {what}"))
    }

    /// The counting and timing layer's service.
    #[derive(Clone)]
    struct Timed<S> {
        inner: S,
        counts: Arc<Counts>,
    }

    impl<S, B> tower::Service<http::Request<kube::client::Body>> for Timed<S>
    where
        S: tower::Service<http::Request<kube::client::Body>, Response = http::Response<B>>,
        S::Future: Send + 'static,
        S::Error: 'static,
        B: 'static,
    {
        type Response = S::Response;
        type Error = S::Error;
        type Future = std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>,
        >;

        fn poll_ready(
            &mut self,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            self.inner.poll_ready(cx)
        }

        fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
            self.counts.observe(&req);
            let key = timing_key(&req);
            let counts = self.counts.clone();
            let start = std::time::Instant::now();
            let answer = self.inner.call(req);
            Box::pin(async move {
                let r = answer.await;
                if let Some(key) = key {
                    counts.record(key, start.elapsed());
                }
                r
            })
        }
    }

    /// The Kubernetes verb of a request.
    fn verb_of(req: &http::Request<kube::client::Body>) -> &'static str {
        let query = req.uri().query().unwrap_or_default();
        match req.method().as_str() {
            "GET" if query.contains("watch=true") || query.contains("watch=1") => "watch",
            "GET" if is_collection(req.uri().path()) => "list",
            "GET" => "get",
            "POST" => "create",
            "PATCH" => "patch",
            "PUT" => "update",
            "DELETE" => "delete",
            _ => "other",
        }
    }

    /// True when `path` names a collection (a LIST), not one object.
    pub fn is_collection(path: &str) -> bool {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let rest: &[&str] = match segs.first() {
            Some(&"api") if segs.len() >= 2 => &segs[2..],
            Some(&"apis") if segs.len() >= 3 => &segs[3..],
            _ => return false,
        };
        if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
            rest.len() == 3
        } else {
            rest.len() == 1
        }
    }
}

/// The spoke benchmarks' load: one tenant namespace and N ordinary Harness
/// revisions applied through the real `Executor`.
pub mod load {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use anyhow::{Result, bail};
    use clawfed_proto::link::v1::Work;
    use clawfed_proto::work::{
        ContainerDefaults, ExecutionMode, HarnessWork, NamespaceWork, SecretData, WorkSpec, target,
    };
    use clawfed_spoke::exec::Executor;
    use futures::{StreamExt, TryStreamExt};

    /// The Harness image (a digest the pod runner never starts: kwok Pods).
    pub const IMAGE: &str = "registry.invalid/openclaw@sha256:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd";

    /// A tenant name unique to the run (a deleting namespace of an earlier
    /// run still claims its own tenant, and the spoke fails closed on two
    /// claims).
    pub fn tenant_of(prefix: &str, id: &str) -> String {
        format!("{prefix}-{}", &id[id.len().saturating_sub(8)..])
    }

    /// Revision 1 of Agent `a<i>` in namespace `ns` of tenant `tenant`.
    pub fn harness(tenant: &str, id: &str, ns: &str, i: usize) -> HarnessWork {
        HarnessWork {
            tenant: tenant.into(),
            namespace_id: id.into(),
            data_plane_namespace: ns.into(),
            agent: format!("a{i:04}"),
            revision: 1,
            revision_id: format!("rev-{i}"),
            harness_kind: "openclaw-native".into(),
            image: IMAGE.into(),
            require_digest: true,
            requirement_labels: BTreeMap::new(),
            resources: Default::default(),
            port: 8080,
            env: BTreeMap::new(),
            workspace: None,
            credential: SecretData(BTreeMap::from([("MODEL_API_KEY".into(), "bench".into())])),
            dedicated: false,
            predecessors: vec![],
            execution: ExecutionMode::Ordinary,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            // 1,000 ClusterIPs do not fit the test cluster's Service CIDR.
            headless_service: true,
            seccomp_localhost_profile: None,
            service_principal: None,
            plugin_selections: Vec::new(),
            require_startup_status: false,
            runtime_config: None,
            app_server: None,
        }
    }

    /// The tenant's namespace work: room for `pods` Pods, small defaults.
    pub fn namespace(tenant: &str, id: &str, pods: usize) -> NamespaceWork {
        NamespaceWork {
            tenant: tenant.into(),
            namespace_id: id.into(),
            quota: BTreeMap::from([("pods".into(), pods.to_string())]),
            container_defaults: ContainerDefaults {
                default_request: BTreeMap::from([
                    ("cpu".into(), "10m".into()),
                    ("memory".into(), "16Mi".into()),
                ]),
                default_limit: BTreeMap::new(),
            },
            ..Default::default()
        }
    }

    /// A piece of work at generation 1.
    pub fn work(sequence: u64, target: String, spec: WorkSpec) -> Work {
        Work {
            sequence,
            target,
            generation: 1,
            kind: spec.kind().as_str().into(),
            spec: spec.encode(),
        }
    }

    /// The Harness apply of `h`.
    pub fn apply(sequence: u64, h: HarnessWork) -> Work {
        work(
            sequence,
            target::harness(&h.namespace_id, &h.agent, h.revision),
            WorkSpec::HarnessApply(Box::new(h)),
        )
    }

    /// Applies `works` through `exec`, `concurrency` at a time; an error
    /// or a refusal ends it. Returns each apply's time, ms.
    pub async fn apply_all(
        exec: &Arc<Executor>,
        works: Vec<Work>,
        concurrency: usize,
    ) -> Result<Vec<f64>> {
        futures::stream::iter(works)
            .map(|w| {
                let exec = exec.clone();
                async move {
                    let start = std::time::Instant::now();
                    let r = exec.apply(&w).await?;
                    if !r.applied {
                        bail!("{}: {}", w.target, r.reason);
                    }
                    Ok(start.elapsed().as_secs_f64() * 1e3)
                }
            })
            .buffer_unordered(concurrency)
            .try_collect::<Vec<f64>>()
            .await
    }

    /// Kubernetes alone on one cluster, the reference clawfed is compared
    /// with: a tenant namespace set up like the spoke's (by an `Executor`
    /// that is then shut down), `n` Harnesses' objects applied directly by
    /// a plain client ([`apply_direct`]) at a given concurrency, timed until
    /// every Pod is Ready (watched). [`DirectRun::prepare`] does the set-up,
    /// [`DirectRun::run`] the timed part, [`DirectRun::cleanup`] deletes the
    /// namespace and waits until it is gone, so a later run sees the same
    /// cluster state.
    pub struct DirectRun {
        plain: kube::Client,
        ns: String,
        harnesses: Vec<HarnessWork>,
        ready_rx: tokio::sync::mpsc::UnboundedReceiver<std::time::Instant>,
        watch: tokio::task::JoinHandle<()>,
    }

    /// What [`DirectRun::run`] measured.
    pub struct DirectTimes {
        /// Until the last object was written.
        pub applied_in: std::time::Duration,
        /// Until the last Pod was Ready.
        pub ready_in: std::time::Duration,
        /// Each Harness's writes, ms, sorted.
        pub apply_ms: Vec<f64>,
        /// Each Pod's Ready, ms after the start, sorted.
        pub ready_ms: Vec<f64>,
    }

    impl DirectRun {
        /// `prefix` names the tenant and namespace id (`<prefix>-<uuid>`).
        /// `plain` sets up, watches and cleans up; the timed writes go
        /// through the client given to [`DirectRun::run`].
        pub async fn prepare(
            plain: kube::Client,
            prefix: &str,
            n: usize,
            requirement_labels: BTreeMap<String, String>,
        ) -> Result<Self> {
            use clawfed_proto::link::v1::Report;
            use clawfed_spoke::config::SpokeConfig;
            use k8s_openapi::api::core::v1::Pod;
            let id = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
            let ns = clawfed_proto::naming::data_plane_namespace(&id);
            let tenant = tenant_of(prefix, &id);
            let (tx, _rx) = tokio::sync::mpsc::channel::<Report>(16);
            let setup = Executor::new(plain.clone(), SpokeConfig::default(), tx);
            let r = setup
                .apply(&work(
                    1,
                    target::namespace(&id),
                    WorkSpec::NamespaceEnsure(namespace(&tenant, &id, n * 2 + 10)),
                ))
                .await?;
            setup.shutdown();
            if !r.applied {
                bail!("direct namespace: {}", r.reason);
            }
            let harnesses = (0..n)
                .map(|i| {
                    let mut h = harness(&tenant, &id, &ns, i);
                    h.requirement_labels = requirement_labels.clone();
                    h
                })
                .collect();
            // Each Pod's first Ready, as the watch delivers it.
            let (ready_tx, ready_rx) = tokio::sync::mpsc::unbounded_channel();
            let pods: kube::Api<Pod> = kube::Api::namespaced(plain.clone(), &ns);
            let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
            let watch = tokio::spawn(async move {
                use kube::runtime::watcher;
                let mut synced = Some(synced_tx);
                let mut ready = std::collections::HashSet::new();
                let mut stream = std::pin::pin!(watcher(pods, watcher::Config::default()));
                while let Some(ev) = stream.next().await {
                    match ev {
                        Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                            if pod_ready(&p) && ready.insert(p.metadata.name.unwrap_or_default()) {
                                let _ = ready_tx.send(std::time::Instant::now());
                            }
                        }
                        Ok(watcher::Event::InitDone) => {
                            if let Some(tx) = synced.take() {
                                let _ = tx.send(());
                            }
                        }
                        Ok(_) => {}
                        Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
                    }
                }
            });
            tokio::time::timeout(std::time::Duration::from_secs(30), synced_rx)
                .await
                .map_err(|_| anyhow::anyhow!("direct: the Pod watch did not sync in 30 s"))?
                .map_err(|_| anyhow::anyhow!("direct: the Pod watch ended"))?;
            Ok(Self {
                plain,
                ns,
                harnesses,
                ready_rx,
                watch,
            })
        }

        /// The data-plane namespace the run writes into.
        pub fn namespace(&self) -> &str {
            &self.ns
        }

        /// Applies every Harness through `writer`, `concurrency` at a time,
        /// and waits (up to `limit`) until every Pod is Ready.
        pub async fn run(
            &mut self,
            writer: &kube::Client,
            concurrency: usize,
            with_record: bool,
            limit: std::time::Duration,
        ) -> Result<DirectTimes> {
            let n = self.harnesses.len();
            let start = std::time::Instant::now();
            let mut apply_ms = apply_direct(
                writer,
                std::mem::take(&mut self.harnesses),
                concurrency,
                with_record,
            )
            .await?;
            let applied_in = start.elapsed();
            let mut ready_ms = Vec::with_capacity(n);
            let deadline = tokio::time::Instant::from_std(start + limit);
            while ready_ms.len() < n {
                match tokio::time::timeout_at(deadline, self.ready_rx.recv()).await {
                    Ok(Some(at)) => {
                        ready_ms.push(at.saturating_duration_since(start).as_secs_f64() * 1e3)
                    }
                    Ok(None) => bail!("direct: the Pod watch ended"),
                    Err(_) => bail!(
                        "direct: {} of {n} Pods Ready in {} after {limit:?}",
                        ready_ms.len(),
                        self.ns
                    ),
                }
            }
            let ready_in = start.elapsed();
            apply_ms.sort_by(|a, b| a.total_cmp(b));
            ready_ms.sort_by(|a, b| a.total_cmp(b));
            Ok(DirectTimes {
                applied_in,
                ready_in,
                apply_ms,
                ready_ms,
            })
        }

        /// Deletes the namespace and waits (up to 300 s) until it is gone.
        pub async fn cleanup(self) {
            use k8s_openapi::api::core::v1::Namespace;
            self.watch.abort();
            let namespaces: kube::Api<Namespace> = kube::Api::all(self.plain);
            let _ = namespaces
                .delete(&self.ns, &kube::api::DeleteParams::background())
                .await;
            let gone = tokio::time::timeout(std::time::Duration::from_secs(300), async {
                while namespaces.get_opt(&self.ns).await.ok().flatten().is_some() {
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
            })
            .await;
            if gone.is_err() {
                eprintln!(
                    "namespace {} still terminating after 300 s; going on",
                    self.ns
                );
            }
        }
    }

    /// Kubernetes alone for the control cluster's share of a run with
    /// Gateways on: each Agent's Gateway objects (ServiceAccount, transport
    /// Secret, PVC, NetworkPolicy, Service, Deployment: what the hub's
    /// `Gateways::ensure` writes, built by the hub's own builders in
    /// `clawfed_hub::gateway::objects`) applied directly by a plain client,
    /// timed until every Gateway Pod is Ready (watched). The route is left
    /// out: the hub writes it at activation, after both Pods are Ready.
    /// [`DirectGateways::prepare`] makes the pre-bound PVs and starts the
    /// watch, [`DirectGateways::run`] is the timed part,
    /// [`DirectGateways::cleanup`] deletes the Gateways and PVs.
    pub struct DirectGateways {
        admin: kube::Client,
        config: clawfed_hub::gateway::GatewayConfig,
        /// The run's tenant id: names its Gateway namespace.
        namespace_id: String,
        specs: Vec<clawfed_hub::gateway::GatewaySpec>,
        pvs: Vec<String>,
        ready_rx: tokio::sync::mpsc::UnboundedReceiver<std::time::Instant>,
        watch: tokio::task::JoinHandle<()>,
    }

    /// What [`DirectGateways::run`] measured.
    pub struct GatewayTimes {
        /// Until the last object was written.
        pub applied_in: std::time::Duration,
        /// Each Gateway's six applies, ms (queueing behind the concurrency
        /// limit excluded), sorted.
        pub apply_ms: Vec<f64>,
        /// Until the last Gateway Pod was Ready.
        pub ready_in: std::time::Duration,
        /// Each Gateway Pod's Ready, ms after the start, sorted.
        pub ready_ms: Vec<f64>,
    }

    impl DirectGateways {
        /// `n` Gateways of tenant `tenant`, Agents `<prefix><i>-<8 hex>`,
        /// in `config`'s namespace of the control cluster `admin` reaches;
        /// `harness_endpoint(i)` is Agent i's Harness URL.
        pub async fn prepare(
            admin: kube::Client,
            config: clawfed_hub::gateway::GatewayConfig,
            tenant: &str,
            prefix: &str,
            n: usize,
            image: &str,
            harness_endpoint: impl Fn(&str) -> String,
        ) -> Result<Self> {
            use clawfed_hub::gateway::{GATEWAY_ROLE, GatewaySpec, Transport};
            use k8s_openapi::api::core::v1::Pod;
            let run = uuid::Uuid::new_v4().simple().to_string();
            // A Gateway namespace of this run's own (a tenant the hub would
            // make it for), created here as clawfed's hub would.
            let namespace_id = format!("bench-direct-{run}");
            let gateway_ns =
                clawfed_proto::naming::gateway_namespace(&config.namespace_prefix, &namespace_id);
            let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
                kube::Api::all(admin.clone());
            namespaces
                .create(
                    &kube::api::PostParams::default(),
                    &clawfed_hub::gateway::objects::gateway_namespace(
                        &gateway_ns,
                        &namespace_id,
                        tenant,
                    ),
                )
                .await?;
            let specs: Vec<GatewaySpec> = (0..n)
                .map(|i| {
                    let agent = format!("{prefix}{i}-{}", &run[..8]);
                    GatewaySpec {
                        tenant: tenant.to_owned(),
                        namespace_id: namespace_id.clone(),
                        harness_endpoint: harness_endpoint(&agent),
                        revision: 1,
                        revision_id: format!("rev-{agent}"),
                        image: Some(image.to_owned()),
                        tunnel_proxy: None,
                        tunnel_ca_pem: None,
                        transport: Transport {
                            gateway_token: format!("bench-{run}-{i}"),
                            tls: None,
                        },
                        runtime: None,
                        agent,
                    }
                })
                .collect();
            // The test clusters have no provisioner: a PV bound in advance
            // to each PVC, as the pipeline bench does for clawfed's run.
            let mut pvs = Vec::with_capacity(n);
            for spec in &specs {
                pvs.push(
                    clawfed_tests::control_env::volume_for(&admin, &gateway_ns, &spec.agent)
                        .await?,
                );
            }
            let agents: std::collections::HashSet<String> =
                specs.iter().map(|s| s.agent.clone()).collect();
            let (ready_tx, ready_rx) = tokio::sync::mpsc::unbounded_channel();
            let pods: kube::Api<Pod> = kube::Api::namespaced(admin.clone(), &gateway_ns);
            let selector = format!("{}={GATEWAY_ROLE}", clawfed_proto::labels::WORKLOAD_ROLE);
            let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
            let watch = tokio::spawn(async move {
                use kube::runtime::watcher;
                let mut synced = Some(synced_tx);
                let mut ready = std::collections::HashSet::new();
                let mut stream =
                    std::pin::pin!(watcher(pods, watcher::Config::default().labels(&selector)));
                while let Some(ev) = stream.next().await {
                    match ev {
                        Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                            let agent = p
                                .metadata
                                .labels
                                .as_ref()
                                .and_then(|l| l.get(clawfed_proto::labels::AGENT))
                                .cloned()
                                .unwrap_or_default();
                            if agents.contains(&agent) && pod_ready(&p) && ready.insert(agent) {
                                let _ = ready_tx.send(std::time::Instant::now());
                            }
                        }
                        Ok(watcher::Event::InitDone) => {
                            if let Some(tx) = synced.take() {
                                let _ = tx.send(());
                            }
                        }
                        Ok(_) => {}
                        Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
                    }
                }
            });
            tokio::time::timeout(std::time::Duration::from_secs(30), synced_rx)
                .await
                .map_err(|_| anyhow::anyhow!("direct: the Gateway Pod watch did not sync in 30 s"))?
                .map_err(|_| anyhow::anyhow!("direct: the Gateway Pod watch ended"))?;
            Ok(Self {
                admin,
                config,
                namespace_id,
                specs,
                pvs,
                ready_rx,
                watch,
            })
        }

        /// How many Gateways the run applies.
        pub fn len(&self) -> usize {
            self.specs.len()
        }

        /// Whether the run applies none.
        pub fn is_empty(&self) -> bool {
            self.specs.is_empty()
        }

        /// Applies every Gateway's objects through `writer`, `concurrency`
        /// Gateways at a time (each one's objects one after another, in
        /// `ensure`'s order), and waits (up to `limit`) until every Gateway
        /// Pod is Ready.
        pub async fn run(
            &mut self,
            writer: &kube::Client,
            concurrency: usize,
            limit: std::time::Duration,
        ) -> Result<GatewayTimes> {
            let n = self.specs.len();
            let start = std::time::Instant::now();
            let mut apply_ms =
                apply_gateways(writer, &self.config, &self.specs, concurrency).await?;
            apply_ms.sort_by(|a, b| a.total_cmp(b));
            let applied_in = start.elapsed();
            let mut ready_ms = Vec::with_capacity(n);
            let deadline = tokio::time::Instant::from_std(start + limit);
            while ready_ms.len() < n {
                match tokio::time::timeout_at(deadline, self.ready_rx.recv()).await {
                    Ok(Some(at)) => {
                        ready_ms.push(at.saturating_duration_since(start).as_secs_f64() * 1e3)
                    }
                    Ok(None) => bail!("direct: the Gateway Pod watch ended"),
                    Err(_) => bail!(
                        "direct: {} of {n} Gateway Pods Ready after {limit:?}",
                        ready_ms.len()
                    ),
                }
            }
            let ready_in = start.elapsed();
            ready_ms.sort_by(|a, b| a.total_cmp(b));
            Ok(GatewayTimes {
                applied_in,
                apply_ms,
                ready_in,
                ready_ms,
            })
        }

        /// Deletes every Gateway (waiting for its PVC to go) and its PV.
        pub async fn cleanup(self) {
            self.watch.abort();
            let gateways = match clawfed_hub::gateway::Gateways::new(
                self.admin.clone(),
                self.config.clone(),
            ) {
                Ok(g) => g,
                Err(e) => {
                    eprintln!("direct Gateways cleanup: {e}");
                    return;
                }
            };
            let tenant = gateways.tenant(&self.namespace_id);
            let tenant = &tenant;
            let failed: Vec<String> = futures::stream::iter(&self.specs)
                .map(|s| async move {
                    tenant
                        .delete(&s.tenant, &s.agent)
                        .await
                        .err()
                        .map(|e| format!("{}: {e}", s.agent))
                })
                .buffer_unordered(8)
                .filter_map(|e| async move { e })
                .collect()
                .await;
            for e in failed {
                eprintln!("deleting a direct Gateway: {e}");
            }
            if let Err(e) = gateways.delete_namespace(&self.namespace_id).await {
                eprintln!("deleting the direct Gateway namespace: {e}");
            }
            for pv in &self.pvs {
                clawfed_tests::control_env::delete_volume(&self.admin, pv).await;
            }
        }
    }

    /// Server-side applies `obj` in `ns` as [`DIRECT_MANAGER`] (force):
    /// one write of the Kubernetes-alone reference.
    async fn put<K>(client: &kube::Client, ns: &str, obj: &K) -> Result<()>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + serde::Serialize
            + serde::de::DeserializeOwned
            + Clone
            + std::fmt::Debug,
        <K as kube::Resource>::DynamicType: Default,
    {
        use kube::api::{Patch, PatchParams};
        let api: kube::Api<K> = kube::Api::namespaced(client.clone(), ns);
        let name = obj.meta().name.clone().unwrap_or_default();
        api.patch(
            &name,
            &PatchParams::apply(DIRECT_MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await?;
        Ok(())
    }

    /// The objects `Gateways::ensure` writes for each of `specs` (the hub's
    /// builders), server-side applied by a plain client as
    /// [`DIRECT_MANAGER`], one Gateway's objects after another,
    /// `concurrency` Gateways at a time. Returns each Gateway's time, ms.
    pub async fn apply_gateways(
        client: &kube::Client,
        config: &clawfed_hub::gateway::GatewayConfig,
        specs: &[clawfed_hub::gateway::GatewaySpec],
        concurrency: usize,
    ) -> Result<Vec<f64>> {
        use clawfed_hub::gateway::objects;
        use k8s_openapi::api::apps::v1::Deployment;
        use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret, Service, ServiceAccount};
        use k8s_openapi::api::networking::v1::NetworkPolicy;
        futures::stream::iter(specs)
            .map(|spec| async move {
                let namespace = objects::namespace_of(spec, config);
                let ns = namespace.as_str();
                let start = std::time::Instant::now();
                let image = objects::validate(spec, config)?;
                put::<ServiceAccount>(client, ns, &objects::service_account(spec, config)).await?;
                put::<Secret>(client, ns, &objects::transport_secret(spec, config)).await?;
                put::<PersistentVolumeClaim>(client, ns, &objects::data_claim(spec, config))
                    .await?;
                put::<NetworkPolicy>(client, ns, &objects::network_policy(spec, config)).await?;
                put::<Service>(client, ns, &objects::service(spec, config)).await?;
                put::<Deployment>(client, ns, &objects::deployment(spec, config, &image)).await?;
                Ok(start.elapsed().as_secs_f64() * 1e3)
            })
            .buffer_unordered(concurrency)
            .try_collect::<Vec<f64>>()
            .await
    }

    /// Whether `p` is Ready and not being deleted.
    pub fn pod_ready(p: &k8s_openapi::api::core::v1::Pod) -> bool {
        p.metadata.deletion_timestamp.is_none()
            && p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    }

    /// Field manager of [`apply_direct`]'s writes.
    pub const DIRECT_MANAGER: &str = "bench-direct";

    /// Kubernetes alone, the reference: the objects of each Harness the
    /// spoke writes for an ordinary revision (ServiceAccount, credential
    /// Secret, Service, Deployment and, `with_record`, the desired-state
    /// record Secret; built by the spoke's own builders), server-side
    /// applied by a plain client one after another per Harness, as
    /// `kubectl apply --server-side` would, `concurrency` Harnesses at a
    /// time. Returns each Harness's time, ms.
    pub async fn apply_direct(
        client: &kube::Client,
        harnesses: Vec<HarnessWork>,
        concurrency: usize,
        with_record: bool,
    ) -> Result<Vec<f64>> {
        use clawfed_spoke::apply::harness as build;
        use clawfed_spoke::drift::desired;
        use k8s_openapi::api::apps::v1::Deployment;
        use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
        futures::stream::iter(harnesses)
            .map(|h| async move {
                let start = std::time::Instant::now();
                let t = target::harness(&h.namespace_id, &h.agent, h.revision);
                let ns = h.data_plane_namespace.clone();
                let ns = ns.as_str();
                put::<ServiceAccount>(client, ns, &build::service_account(&h, &t, 1)).await?;
                put::<Secret>(client, ns, &build::credential_secret(&h, &t, 1)).await?;
                put::<Service>(client, ns, &build::service(&h, &t, 1)).await?;
                put::<Deployment>(client, ns, &build::deployment(&h, &t, 1)).await?;
                if with_record {
                    let tenant = h.tenant.clone();
                    let work = apply(1, h);
                    let record = desired::from_work(&work, ns, false, Some(1))?;
                    put::<Secret>(client, ns, &desired::object(&tenant, &record)?).await?;
                }
                Ok(start.elapsed().as_secs_f64() * 1e3)
            })
            .buffer_unordered(concurrency)
            .try_collect::<Vec<f64>>()
            .await
    }
}

/// What the database does: the statements sqlx runs in this process.
pub mod statements {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    /// Counts the statements sqlx runs in this process by their opening words:
    /// one `sqlx::query` event per statement executed (each a round trip;
    /// BEGIN and COMMIT included), with its client-side time.
    #[derive(Debug, Clone, Default)]
    pub struct StatementCounter(Arc<Mutex<HashMap<String, (u64, f64)>>>);

    impl StatementCounter {
        /// Installs the counter as this process's tracing subscriber, which
        /// enables sqlx's statement events and nothing else.
        pub fn install() -> Self {
            use tracing_subscriber::Layer as _;
            use tracing_subscriber::layer::SubscriberExt as _;
            let counter = Self::default();
            let only_statements = tracing_subscriber::filter::Targets::new()
                .with_target("sqlx::query", tracing::Level::DEBUG);
            // Not `try_init`: that would also route the `log` records of every
            // crate (rustls' per-handshake ones) through this subscriber.
            let _ = tracing::subscriber::set_global_default(
                tracing_subscriber::registry().with(counter.clone().with_filter(only_statements)),
            );
            counter
        }

        pub fn snapshot(&self) -> HashMap<String, (u64, f64)> {
            self.0.lock().map(|m| m.clone()).unwrap_or_default()
        }
    }

    #[derive(Default)]
    struct StatementFields {
        summary: String,
        statement: String,
        secs: f64,
    }

    impl tracing::field::Visit for StatementFields {
        fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
            match field.name() {
                "summary" => self.summary = value.to_owned(),
                "db.statement" => self.statement = value.to_owned(),
                _ => {}
            }
        }
        fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
            if field.name() == "elapsed_secs" {
                self.secs = value;
            }
        }
        fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
    }

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for StatementCounter {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            let mut fields = StatementFields::default();
            event.record(&mut fields);
            // sqlx's summary is the first four words; the full text (when
            // longer) tells the group statement from other CTEs.
            let text = if fields.statement.is_empty() {
                fields.summary
            } else {
                fields.statement
            };
            let mut label: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
            if let Some((cut, _)) = label.char_indices().nth(72) {
                label.truncate(cut);
            }
            if let Ok(mut m) = self.0.lock() {
                let e = m.entry(label).or_default();
                e.0 += 1;
                e.1 += fields.secs;
            }
        }
    }

    /// Statement counts (and client seconds) by label since `before`,
    /// most frequent first.
    pub fn since(
        now: &HashMap<String, (u64, f64)>,
        before: &HashMap<String, (u64, f64)>,
    ) -> Vec<(String, u64, f64)> {
        let mut v: Vec<(String, u64, f64)> = now
            .iter()
            .map(|(k, (n, s))| {
                let (n0, s0) = before.get(k).copied().unwrap_or_default();
                (k.clone(), n - n0, s - s0)
            })
            .filter(|(_, n, _)| *n > 0)
            .collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.1));
        v
    }
}
