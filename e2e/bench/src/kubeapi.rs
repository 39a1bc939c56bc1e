//! The e2e test clusters' kube clients, and a count of the requests a
//! client sends (by verb: the benchmarks' LIST and write figures).

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
            let cache = match std::env::var_os("CLAWFED_CACHE") {
                Some(c) => PathBuf::from(c),
                None => PathBuf::from(
                    std::env::var_os("HOME")
                        .context("HOME is not set: set CLAWFED_CACHE or CLAWFED_CLUSTERS_DIR")?,
                )
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
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

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
