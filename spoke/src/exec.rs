//! The executor: runs `link.v1.Work` against the execution cluster with the
//! spoke's own credentials.
//!
//! - [`Executor::apply`] decodes the work spec, ignores a generation older than
//!   the one recorded for the target, runs the work (level-based, so the same
//!   generation twice is harmless) and durably records the applied generation
//!   on the cluster BEFORE it returns `Ok` (the link acks only after that):
//!   namespace targets in the namespace's `clawfed.io/generation` /
//!   `clawfed.io/work-target` annotations, Harness targets in their own
//!   desired-state record Secret (`drift::desired`; and as annotations on
//!   every object applied).
//! - Every outcome is also sent as a `Report` with a `WorkResult` on the
//!   report channel; readiness observations follow on the same channel
//!   whenever a revision's verdict changes.
//! - [`Executor::applied`] rebuilds what is applied from the cluster's labels,
//!   annotations and records (and the ledgers of older spokes), never from
//!   memory, and (the first time) resumes
//!   the readiness watchers and tracked revisions, so a restarted spoke
//!   converges without duplicates.
//!
//! Errors: a refused spec (invalid, fails closed) is `Ok` with
//! `applied: false` and a reason, so it is acked and not redelivered; an
//! error that may pass (apiserver unavailable, conflicts, timeouts) is
//! [`ExecError::Transient`], so the link does not ack and the work comes back.
//!
//! The pieces: the generation gate and the result (`gate`), namespace work
//! (`namespace`), Harness work (`harness`), the cleanup plans' steps
//! (`ops`), the view rebuilt from the cluster (`rebuild`), per-target locks
//! (`locks`), a piece of work's outcome (`outcome`), diagnostics
//! (`diagnose`) and the fence of failover-enabled Harnesses (`fence`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use clawfed_proto::link::v1::{Report, Work, WorkResult, report};
use clawfed_proto::work::WorkKind;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use tokio::sync::{OnceCell, mpsc};
use tokio_util::sync::CancellationToken;

use crate::apply;
use crate::config::SpokeConfig;
use crate::provider::SandboxDriver;
use crate::provider::ordinary::DeploymentDriver;
use crate::readiness::observer::Observer;

mod diagnose;
mod fence;
mod forbidden;
mod gate;
mod harness;
mod locks;
mod namespace;
mod ops;
mod outcome;
mod rebuild;

pub use locks::TargetGuard;
use locks::TargetLocks;
use outcome::Failure;

/// Errors of the executor.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The work failed in a way that may pass; it must be delivered again.
    #[error("{kind} {target}: {reason}")]
    Transient {
        /// The work target.
        target: String,
        /// The work kind.
        kind: String,
        /// Why.
        reason: String,
    },
    /// Reading the applied state from the cluster failed.
    #[error("reading applied state: {0}")]
    Discover(#[from] apply::Error),
}

/// Recorded generations: target -> (physical namespace, generation).
type Recorded = HashMap<String, (String, i64)>;

/// The executor. Cheap to share behind an `Arc`; `apply` may run concurrently
/// for different targets (work on one target is serialized).
pub struct Executor {
    client: Client,
    config: SpokeConfig,
    reports: mpsc::Sender<Report>,
    driver: Arc<dyn SandboxDriver>,
    observer: Observer,
    cancel: CancellationToken,
    recorded: Mutex<Recorded>,
    /// The latest result per target, re-sent after a reconnect.
    results: Mutex<HashMap<String, (i64, WorkResult)>>,
    locks: TargetLocks,
    rebuilt: OnceCell<()>,
    /// Namespaces a `namespace.delete` is tearing down right now: drift
    /// repair leaves them alone.
    closing: Mutex<HashSet<String>>,
    /// Each target's current run of 403 refusals.
    forbidden_runs: Mutex<forbidden::ForbiddenRuns>,
    /// Data-plane namespaces found to be the tenant's, by name: tenant,
    /// namespace id and when (see [`NAMESPACE_RECHECK`]).
    owned: Mutex<HashMap<String, (String, String, Instant)>>,
    /// The Harnesses of failover-enabled Agents (`fence`).
    fenceables: Mutex<fence::Fenceables>,
}

/// How long a namespace found to be the tenant's is taken as such by the
/// Harness work that follows, without reading it again: a burst of applies
/// into one namespace reads it once per interval, not once per apply. A
/// namespace the spoke tears down is forgotten at once; one deleted or
/// relabelled by someone else within the interval fails the writes into it
/// (a terminating or missing namespace refuses them), and its next check
/// reads it again.
pub const NAMESPACE_RECHECK: std::time::Duration = std::time::Duration::from_secs(10);

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("driver", &self.driver.name())
            .finish_non_exhaustive()
    }
}

impl Executor {
    /// An executor with the ordinary Deployment driver.
    pub fn new(client: Client, config: SpokeConfig, reports: mpsc::Sender<Report>) -> Self {
        Self::with_driver(client, config, reports, Arc::new(DeploymentDriver))
    }

    /// An executor with a SandboxDriver provider.
    pub fn with_driver(
        client: Client,
        config: SpokeConfig,
        reports: mpsc::Sender<Report>,
        driver: Arc<dyn SandboxDriver>,
    ) -> Self {
        let cancel = CancellationToken::new();
        Executor {
            observer: Observer::new(client.clone(), reports.clone(), cancel.child_token()),
            client,
            config,
            reports,
            driver,
            cancel,
            recorded: Mutex::new(HashMap::new()),
            results: Mutex::new(HashMap::new()),
            locks: TargetLocks::default(),
            rebuilt: OnceCell::new(),
            closing: Mutex::new(HashSet::new()),
            forbidden_runs: Mutex::new(forbidden::ForbiddenRuns::default()),
            owned: Mutex::new(HashMap::new()),
            fenceables: Mutex::new(HashMap::new()),
        }
    }

    /// The readiness observer.
    pub fn observer(&self) -> &Observer {
        &self.observer
    }

    /// Cancels in-flight provider calls and ends every watcher.
    pub fn shutdown(&self) {
        self.cancel.cancel();
    }

    fn recorded_lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.recorded.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The physical namespace and generation this spoke recorded applying
    /// for `target`, if it did (the tunnel checks it manages a Harness).
    pub fn recorded(&self, target: &str) -> Option<(String, i64)> {
        self.recorded_lock().get(target).cloned()
    }

    /// The execution cluster's client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The channel reports go to the hub on (drift repair sends its own).
    pub fn reports(&self) -> &mpsc::Sender<Report> {
        &self.reports
    }

    /// The execution settings.
    pub fn config(&self) -> &SpokeConfig {
        &self.config
    }

    /// Serializes with work on `target` (drift repair holds it while it
    /// re-reads the record and re-applies).
    pub async fn lock_target(&self, target: &str) -> TargetGuard<'_> {
        self.locks.lock(target).await
    }

    /// True while a `namespace.delete` tears `namespace` down.
    pub fn namespace_closing(&self, namespace: &str) -> bool {
        self.closing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(namespace)
    }

    /// Durably records the desired state `work` applied (drift repair's
    /// source) and the generation whose effects are on the cluster
    /// (`applied`), before the ack.
    async fn record_desired(
        &self,
        work: &Work,
        namespace: &str,
        tenant: &str,
        adopted: bool,
        applied: Option<i64>,
    ) -> Result<(), Failure> {
        let record = crate::drift::desired::from_work(work, namespace, adopted, applied)?;
        let secrets = Api::<Secret>::namespaced(self.client.clone(), namespace);
        crate::drift::desired::record(&secrets, tenant, &record).await?;
        Ok(())
    }

    /// Targets with a lock entry right now (work in progress or waiting).
    pub fn locked_targets(&self) -> usize {
        self.locks.len()
    }

    /// The latest result of every target this spoke holds and the current
    /// readiness verdicts: sent again after each (re)connect. A target
    /// recorded on the cluster but not answered by this process (it
    /// restarted) is reported applied at its recorded generation.
    pub fn current_reports(&self) -> Vec<Report> {
        let mut latest: HashMap<String, (i64, WorkResult)> = self
            .results
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (target, (namespace, generation)) in self.recorded_lock().iter() {
            let newer_known = latest.get(target).is_some_and(|(g, _)| g >= generation);
            if !newer_known {
                latest.insert(
                    target.clone(),
                    (
                        *generation,
                        WorkResult {
                            applied: true,
                            reason: format!("generation {generation} applied"),
                            kind: String::new(),
                            namespace: namespace.clone(),
                            retrying: false,
                        },
                    ),
                );
            }
        }
        let mut reports: Vec<Report> = latest
            .into_iter()
            .map(|(target, (generation, result))| Report {
                target,
                generation,
                body: Some(report::Body::WorkResult(result)),
            })
            .collect();
        reports.extend(self.observer.current_reports());
        reports
    }
}

/// The set of kinds the executor understands (for the link's capabilities).
pub fn capabilities() -> HashSet<&'static str> {
    WorkKind::ALL.iter().map(|k| k.as_str()).collect()
}
