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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_trait::async_trait;
use clawfed_proto::labels;
use clawfed_proto::link::v1::{Report, Work, WorkResult, report};
use clawfed_proto::naming::validate_dns1123_label;
use clawfed_proto::readiness::{HARNESS_ROLE, ReadinessQuery};
use clawfed_proto::work::{
    ExecutionMode, HarnessWork, NamespaceDeleteWork, NamespaceWork, RevisionWork, WorkKind,
    WorkSpec,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, LimitRange, Namespace, PersistentVolumeClaim, ResourceQuota, Secret, Service,
    ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Patch};
use kube::{Api, Client, ResourceExt};
use tokio::sync::{OnceCell, mpsc};
use tokio_util::sync::CancellationToken;

use crate::apply::namespace::{self as nsapply, NamespaceError, NamespaceObservation, Resolution};
use crate::apply::{self, create_if_absent, harness, ledger, merge_params, retry_forbidden, ssa};
use crate::cleanup::{
    AGENT_DELETED, CleanupOps, NAMESPACE_TEARDOWN, NamespaceStep, PREPARATION_FAILED, RETIRE,
    RevisionStep, STOP, StepFailed, run_plan,
};
use crate::config::SpokeConfig;
use crate::provider::ordinary::DeploymentDriver;
use crate::provider::{HarnessContext, NamespaceContext, RevisionContext, SandboxDriver};
use crate::readiness::observer::{Observer, StartupCheck};

mod diagnose;

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

/// A failed piece of work.
#[derive(Debug)]
struct Failure {
    reason: String,
    transient: bool,
    /// The apiserver answered 403: final only once it persists (see
    /// [`SpokeConfig::forbidden_retry_window`]).
    forbidden: bool,
}

impl From<apply::Error> for Failure {
    fn from(e: apply::Error) -> Self {
        Failure {
            transient: e.is_transient(),
            forbidden: e.is_forbidden(),
            reason: e.to_string(),
        }
    }
}

impl From<NamespaceError> for Failure {
    fn from(e: NamespaceError) -> Self {
        Failure {
            transient: false,
            forbidden: false,
            reason: e.to_string(),
        }
    }
}

impl From<crate::provider::ProviderError> for Failure {
    fn from(e: crate::provider::ProviderError) -> Self {
        Failure {
            transient: e.is_transient(),
            forbidden: e.is_forbidden(),
            reason: e.to_string(),
        }
    }
}

impl From<StepFailed> for Failure {
    fn from(e: StepFailed) -> Self {
        Failure {
            transient: e.transient,
            forbidden: e.forbidden,
            reason: e.to_string(),
        }
    }
}

fn refuse(reason: impl Into<String>) -> Failure {
    Failure {
        reason: reason.into(),
        transient: false,
        forbidden: false,
    }
}

/// A successful piece of work.
#[derive(Debug, Default)]
struct Done {
    reason: String,
    namespace: String,
}

/// Recorded generations: target -> (physical namespace, generation).
type Recorded = HashMap<String, (String, i64)>;

/// Per-target locks that do not outlive their use: an entry is removed when
/// its last holder lets go, so the map holds only targets being worked on.
#[derive(Default)]
struct TargetLocks {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Holds one target's lock; removes the map entry when no one else waits.
pub struct TargetGuard<'a> {
    owner: &'a TargetLocks,
    target: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl TargetLocks {
    async fn lock(&self, target: &str) -> TargetGuard<'_> {
        let m = {
            let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
            locks.entry(target.to_string()).or_default().clone()
        };
        TargetGuard {
            owner: self,
            target: target.to_string(),
            guard: Some(m.lock_owned().await),
        }
    }

    fn len(&self) -> usize {
        self.locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for TargetGuard<'_> {
    fn drop(&mut self) {
        // Release first, then drop the entry if only the map still holds it
        // (a waiter holds its own clone of the Arc, so it keeps the entry).
        self.guard.take();
        let mut locks = self
            .owner
            .locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if locks
            .get(&self.target)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            locks.remove(&self.target);
        }
    }
}

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
    /// Per target: the generation and when its work was first answered
    /// `Forbidden` in the current run of refusals.
    forbidden_since: Mutex<HashMap<String, (i64, Instant)>>,
    /// Data-plane namespaces found to be the tenant's, by name: tenant,
    /// namespace id and when (see [`NAMESPACE_RECHECK`]).
    owned: Mutex<HashMap<String, (String, String, Instant)>>,
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

fn kube_err(
    action: &'static str,
    kind: &'static str,
    ns: &str,
    name: &str,
    source: kube::Error,
) -> apply::Error {
    apply::Error::Kube {
        action,
        kind,
        namespace: ns.into(),
        name: name.into(),
        source: Box::new(source),
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
            forbidden_since: Mutex::new(HashMap::new()),
            owned: Mutex::new(HashMap::new()),
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

    /// Applies one piece of work (see the module docs for the contract).
    pub async fn apply(&self, work: &Work) -> Result<WorkResult, ExecError> {
        self.ensure_rebuilt().await?;
        let _guard = self.locks.lock(&work.target).await;
        let spec = match WorkSpec::decode(&work.kind, &work.spec) {
            Ok(s) => s,
            Err(e) => return self.finish(work, Err(refuse(e.to_string()))).await,
        };
        let recorded = self.recorded_lock().get(&work.target).map(|(_, g)| *g);
        if let Some(have) = recorded.filter(|have| *have > work.generation) {
            tracing::info!(target_ = %work.target, have, got = work.generation, "spoke.work.superseded");
            let result = WorkResult {
                applied: true,
                reason: format!("superseded: generation {have} already applied"),
                kind: work.kind.clone(),
                namespace: String::new(),
                retrying: false,
            };
            return Ok(result);
        }
        if let Some(settled) = self.settled_otherwise(work, recorded).await {
            return Ok(settled);
        }
        let outcome = match &spec {
            WorkSpec::NamespaceEnsure(w) => self.ensure_namespace(w, work).await,
            WorkSpec::NamespaceDelete(w) => self.delete_namespace(w, work).await,
            WorkSpec::HarnessApply(h) => self.apply_harness(h, work).await,
            WorkSpec::HarnessStop(r) => self.stop_revision(r, work, STOP).await,
            WorkSpec::HarnessRetire(r) if r.agent_deleted => {
                self.stop_revision(r, work, AGENT_DELETED).await
            }
            WorkSpec::HarnessRetire(r) => self.stop_revision(r, work, RETIRE).await,
        };
        self.finish(work, outcome).await
    }

    /// A Harness apply delivered again at the generation already recorded,
    /// whose durable record says that generation ended otherwise (a
    /// successor's dedicated replacement stopped it): answered applied
    /// without starting it again. A hub resend after a digest mismatch is
    /// the usual case.
    async fn settled_otherwise(&self, work: &Work, recorded: Option<i64>) -> Option<WorkResult> {
        if recorded != Some(work.generation) || work.kind != WorkKind::HarnessApply.as_str() {
            return None;
        }
        let (ns, _) = self.recorded(&work.target)?;
        let secrets = Api::<Secret>::namespaced(self.client.clone(), &ns);
        let record = crate::drift::desired::load(&secrets, &work.target)
            .await
            .ok()
            .flatten()?;
        (record.generation == work.generation && record.kind != work.kind).then(|| {
            tracing::info!(target_ = %work.target, generation = work.generation, settled = %record.kind, "spoke.work.settled_otherwise");
            WorkResult {
                applied: true,
                reason: format!(
                    "generation {} already settled as {}",
                    work.generation, record.kind
                ),
                kind: work.kind.clone(),
                namespace: ns,
                retrying: false,
            }
        })
    }

    async fn finish(
        &self,
        work: &Work,
        outcome: Result<Done, Failure>,
    ) -> Result<WorkResult, ExecError> {
        let outcome = match outcome {
            Ok(done) => {
                self.forbidden_since
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&work.target);
                Ok(done)
            }
            Err(f) => Err(self.hold_forbidden(work, f)),
        };
        let (result, err) = match outcome {
            Ok(done) => (
                WorkResult {
                    applied: true,
                    reason: done.reason,
                    kind: work.kind.clone(),
                    namespace: done.namespace,
                    retrying: false,
                },
                None,
            ),
            Err(f) => {
                tracing::warn!(target_ = %work.target, kind = %work.kind, generation = work.generation,
                    transient = f.transient, reason = %f.reason, "spoke.work.failed");
                let err = f.transient.then(|| ExecError::Transient {
                    target: work.target.clone(),
                    kind: work.kind.clone(),
                    reason: f.reason.clone(),
                });
                (
                    WorkResult {
                        applied: false,
                        reason: f.reason,
                        kind: work.kind.clone(),
                        namespace: String::new(),
                        retrying: f.transient,
                    },
                    err,
                )
            }
        };
        {
            let mut results = self.results.lock().unwrap_or_else(PoisonError::into_inner);
            let newer = results
                .get(&work.target)
                .is_some_and(|(g, _)| *g > work.generation);
            if !newer {
                results.insert(work.target.clone(), (work.generation, result.clone()));
            }
        }
        let report = Report {
            target: work.target.clone(),
            generation: work.generation,
            body: Some(report::Body::WorkResult(result.clone())),
        };
        if self.reports.send(report).await.is_err() {
            tracing::warn!("spoke.work.report_dropped: report channel closed");
        }
        match err {
            Some(e) => Err(e),
            None => Ok(result),
        }
    }

    /// A 403 is retried (reported transient, `retrying`) until the same
    /// target's work has been refused for [`SpokeConfig::forbidden_retry_window`]:
    /// a restarted apiserver refuses until its authorizer has synced, and a
    /// refusal taken as final then loses the work for good. Any other
    /// outcome ends the run of refusals.
    fn hold_forbidden(&self, work: &Work, mut f: Failure) -> Failure {
        let mut since = self
            .forbidden_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !f.forbidden || f.transient {
            since.remove(&work.target);
            return f;
        }
        let now = Instant::now();
        let first = match since.get(&work.target) {
            Some((generation, at)) if *generation == work.generation => *at,
            _ => {
                since.insert(work.target.clone(), (work.generation, now));
                now
            }
        };
        let window = self.config.forbidden_retry_window;
        if now.duration_since(first) < window {
            f.transient = true;
            f.reason = format!(
                "{} (retrying for up to {}s: an apiserver that just restarted refuses until its authorizer has synced)",
                f.reason,
                window.as_secs()
            );
        } else {
            since.remove(&work.target);
        }
        f
    }

    // ------------------------------------------------------------ namespaces

    async fn discover(&self, w: &NamespaceWork) -> Result<Vec<NamespaceObservation>, Failure> {
        validate_dns1123_label(&w.tenant)
            .map_err(|e| refuse(format!("tenant {:?}: {e}", w.tenant)))?;
        let api: Api<Namespace> = Api::all(self.client.clone());
        let mut seen: BTreeMap<String, NamespaceObservation> = BTreeMap::new();
        for selector in [
            format!("{}={}", labels::TENANT, w.tenant),
            format!("{}={}", labels::MANAGED_BY, labels::MANAGER),
            // Namespaces an existing OpenClaw installation made.
            format!("{}={}", labels::openclaw::TENANT, w.tenant),
        ] {
            let list = api
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| kube_err("list", "Namespace", "", "", e))?;
            for ns in &list.items {
                seen.insert(ns.name_any(), ns.into());
            }
        }
        let expected = clawfed_proto::naming::data_plane_namespace(&w.namespace_id);
        for name in std::iter::once(expected.as_str()).chain(w.adopt.as_deref()) {
            if validate_dns1123_label(name).is_err() || seen.contains_key(name) {
                continue;
            }
            if let Some(ns) = api
                .get_opt(name)
                .await
                .map_err(|e| kube_err("get", "Namespace", "", name, e))?
            {
                seen.insert(name.to_string(), (&ns).into());
            }
        }
        Ok(seen.into_values().collect())
    }

    async fn ensure_namespace(&self, w: &NamespaceWork, work: &Work) -> Result<Done, Failure> {
        let observed = self.discover(w).await?;
        let resolution = nsapply::resolve(w, &observed)?;
        let name = resolution.name().to_string();
        let adopted = resolution.adopted(&observed);
        if matches!(resolution, Resolution::Create(_)) {
            tracing::info!(namespace = %name, tenant = %w.tenant, "spoke.namespace.create");
        }
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        namespaces
            .patch(
                &name,
                &apply::apply_params(),
                &Patch::Apply(nsapply::namespace_object(w, &name, adopted, &self.config)),
            )
            .await
            .map_err(|e| kube_err("apply", "Namespace", "", &name, e))?;
        let c = &self.client;
        ssa(
            &Api::<RoleBinding>::namespaced(c.clone(), &name),
            &nsapply::spoke_binding(&name, &w.tenant, &self.config),
        )
        .await?;
        // The first write under the fresh binding may be refused until the
        // authorizer has seen it.
        let quotas = Api::<ResourceQuota>::namespaced(c.clone(), &name);
        let quota = nsapply::quota(w, &name);
        retry_forbidden(self.config.rbac_settle_timeout, || ssa(&quotas, &quota)).await?;
        ssa(
            &Api::<LimitRange>::namespaced(c.clone(), &name),
            &nsapply::limit_range(w, &name),
        )
        .await?;
        let policies = Api::<NetworkPolicy>::namespaced(c.clone(), &name);
        for p in nsapply::network_policies(w, &name, &self.config) {
            ssa(&policies, &p).await?;
        }
        // This cluster's pull credentials and CA bundle, for its Harness Pods.
        let (pull, bundle) = self
            .config
            .cluster
            .namespace_objects(&name, apply::owner_labels(&w.tenant));
        if let Some(secret) = pull {
            ssa(&Api::<Secret>::namespaced(c.clone(), &name), &secret).await?;
        }
        if let Some(bundle) = bundle {
            ssa(&Api::<ConfigMap>::namespaced(c.clone(), &name), &bundle).await?;
        }
        ssa(
            &Api::<ConfigMap>::namespaced(c.clone(), &name),
            &ledger::ledger_object(&name, &w.tenant),
        )
        .await?;
        let ctx = NamespaceContext {
            namespace: name.clone(),
            tenant: w.tenant.clone(),
            namespace_id: w.namespace_id.clone(),
        };
        self.driver
            .ensure_namespace(&ctx, &self.cancel.child_token())
            .await?;
        self.observer.watch_namespace(&name);
        self.record_desired(work, &name, &w.tenant, adopted, Some(work.generation))
            .await?;
        // Record last: the generation is on the cluster before the ack.
        let patch = Namespace {
            metadata: ObjectMeta {
                annotations: Some(apply::work_annotations(&work.target, work.generation)),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces
            .patch(&name, &merge_params(), &Patch::Merge(&patch))
            .await
            .map_err(|e| kube_err("patch", "Namespace", "", &name, e))?;
        self.recorded_lock()
            .insert(work.target.clone(), (name.clone(), work.generation));
        Ok(Done {
            reason: format!("namespace {name} ensured"),
            namespace: name,
        })
    }

    /// Whether `name` exists and is the tenant's, read again at most once
    /// per [`NAMESPACE_RECHECK`] (see there); Harness work only.
    async fn usable_namespace(&self, name: &str, tenant: &str, id: &str) -> Result<bool, Failure> {
        let fresh = |(t, i, at): &(String, String, Instant)| {
            t == tenant && i == id && at.elapsed() < NAMESPACE_RECHECK
        };
        if self
            .owned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .is_some_and(fresh)
        {
            return Ok(true);
        }
        let found = self.owned_namespace(name, tenant, id).await?.is_some();
        let mut owned = self.owned.lock().unwrap_or_else(PoisonError::into_inner);
        if found {
            owned.insert(name.into(), (tenant.into(), id.into(), Instant::now()));
        } else {
            owned.remove(name);
        }
        Ok(found)
    }

    /// Fetches `name` and checks it is the tenant's (all three markers).
    /// `Ok(None)` when it does not exist.
    async fn owned_namespace(
        &self,
        name: &str,
        tenant: &str,
        id: &str,
    ) -> Result<Option<Namespace>, Failure> {
        validate_dns1123_label(name).map_err(|e| refuse(format!("namespace {name:?}: {e}")))?;
        let api: Api<Namespace> = Api::all(self.client.clone());
        let Some(ns) = api
            .get_opt(name)
            .await
            .map_err(|e| kube_err("get", "Namespace", "", name, e))?
        else {
            return Ok(None);
        };
        if !NamespaceObservation::from(&ns).has_all_markers(tenant, id) {
            return Err(NamespaceError::NotOwned {
                name: name.into(),
                tenant: tenant.into(),
            }
            .into());
        }
        Ok(Some(ns))
    }

    async fn delete_namespace(
        &self,
        w: &NamespaceDeleteWork,
        work: &Work,
    ) -> Result<Done, Failure> {
        let name = w.data_plane_namespace.as_str();
        let Some(ns) = self
            .owned_namespace(name, &w.tenant, &w.namespace_id)
            .await?
        else {
            self.forget_namespace(name);
            return Ok(Done {
                reason: format!("namespace {name} already gone"),
                namespace: name.into(),
            });
        };
        let adopted = ns
            .labels()
            .get(labels::ADOPTED)
            .is_some_and(|v| v == "true");
        self.owned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
        let _closing = Closing::new(&self.closing, name);
        let ops = NamespaceOps {
            exec: self,
            ctx: NamespaceContext {
                namespace: name.into(),
                tenant: w.tenant.clone(),
                namespace_id: w.namespace_id.clone(),
            },
            adopted,
            cancel: self.cancel.child_token(),
        };
        run_plan(&ops, NAMESPACE_TEARDOWN).await?;
        self.forget_namespace(name);
        let _ = work;
        Ok(Done {
            reason: if adopted {
                format!("clawfed objects removed from adopted namespace {name}")
            } else {
                format!("namespace {name} deleted")
            },
            namespace: name.into(),
        })
    }

    fn forget_namespace(&self, name: &str) {
        self.owned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
        self.observer.unwatch_namespace(name);
        self.recorded_lock().retain(|_, (ns, _)| ns != name);
    }

    // --------------------------------------------------------------- harness

    async fn apply_harness(&self, h: &HarnessWork, work: &Work) -> Result<Done, Failure> {
        harness::validate(h)?;
        let ns = h.data_plane_namespace.as_str();
        if !self
            .usable_namespace(ns, &h.tenant, &h.namespace_id)
            .await?
        {
            return Err(refuse(format!(
                "namespace {ns} does not exist (namespace.ensure first)"
            )));
        }
        if h.execution == ExecutionMode::Provider && !self.driver.provisions_harness() {
            return Err(refuse(format!(
                "provider {} cannot own a harness",
                self.driver.name()
            )));
        }
        if h.execution == ExecutionMode::Provider
            && let Some(limit) = self.driver.max_namespace_len()
            && ns.len() > limit
        {
            // An adopted (operator-named) namespace may be longer than the
            // provider's workspace names allow: refused, never truncated.
            return Err(refuse(format!(
                "namespace {ns} ({} characters) is longer than the workspace limit of provider {} ({limit})",
                ns.len(),
                self.driver.name()
            )));
        }
        if h.dedicated || h.workspace.is_some() {
            // The Agent-owned RWO claim (and a dedicated Harness): one
            // runtime at a time, so predecessors are stopped before the new
            // Harness starts.
            for p in &h.predecessors {
                let r = RevisionWork {
                    tenant: h.tenant.clone(),
                    namespace_id: h.namespace_id.clone(),
                    data_plane_namespace: h.data_plane_namespace.clone(),
                    agent: h.agent.clone(),
                    revision: p.revision,
                    revision_id: p.revision_id.clone(),
                    execution: p.execution,
                    agent_deleted: false,
                };
                // The predecessor's record says stopped before its objects
                // go, under its lock, so drift repair does not put them back.
                let pt =
                    clawfed_proto::work::target::harness(&h.namespace_id, &h.agent, p.revision);
                let _pred = self.locks.lock(&pt).await;
                if let Some((_, generation)) = self.recorded(&pt) {
                    let stop = Work {
                        sequence: 0,
                        target: pt.clone(),
                        generation,
                        kind: WorkKind::HarnessStop.as_str().into(),
                        spec: WorkSpec::HarnessStop(r.clone()).encode(),
                    };
                    // It stays applied at that generation (no ack follows).
                    self.record_desired(&stop, ns, &h.tenant, false, Some(generation))
                        .await?;
                }
                let ops = RevisionOps::new(self, &r);
                run_plan(&ops, STOP).await?;
                self.observer.untrack(ns, &h.agent, p.revision);
            }
        }
        self.observer
            .track_with_startup(
                harness::readiness_query(h),
                &work.target,
                work.generation,
                &h.revision_id,
                harness::startup_requirement(h).map(|s| StartupCheck {
                    selections: s.selections,
                    port: s.port,
                }),
            )
            .await;
        if let Err(f) = self.prepare_harness(h, work).await {
            // Preparation error: run the workload cleanup hooks.
            let r = RevisionWork {
                tenant: h.tenant.clone(),
                namespace_id: h.namespace_id.clone(),
                data_plane_namespace: h.data_plane_namespace.clone(),
                agent: h.agent.clone(),
                revision: h.revision,
                revision_id: h.revision_id.clone(),
                execution: h.execution,
                agent_deleted: false,
            };
            if let Err(hook) = run_plan(&RevisionOps::new(self, &r), PREPARATION_FAILED).await {
                tracing::warn!(error = %hook, "spoke.harness.cleanup_hook_failed");
                return Err(Failure {
                    reason: format!("{}; cleanup hooks: {hook}", f.reason),
                    transient: f.transient,
                    forbidden: f.forbidden,
                });
            }
            return Err(f);
        }
        // One write, the target's own: its desired state and its applied
        // generation.
        self.record_desired(work, ns, &h.tenant, false, Some(work.generation))
            .await?;
        self.recorded_lock()
            .insert(work.target.clone(), (ns.to_string(), work.generation));
        Ok(Done {
            reason: format!("harness {}/{} revision {} applied", ns, h.agent, h.revision),
            namespace: ns.into(),
        })
    }

    async fn prepare_harness(&self, h: &HarnessWork, work: &Work) -> Result<(), Failure> {
        let c = &self.client;
        let ns = h.data_plane_namespace.as_str();
        let (t, g) = (work.target.as_str(), work.generation);
        // The objects the workload refers to are independent of each other:
        // written at once, so an apply costs one round trip for them, not
        // one each. The workload comes after them, so its Pods never start
        // without their ServiceAccount, credential or claim.
        let (sa, secret, service) = (
            harness::service_account(h, t, g),
            harness::credential_secret(h, t, g),
            harness::service(h, t, g),
        );
        let claim = harness::workspace_claim(h);
        let (sas, secrets, services, claims) = (
            Api::<ServiceAccount>::namespaced(c.clone(), ns),
            Api::<Secret>::namespaced(c.clone(), ns),
            Api::<Service>::namespaced(c.clone(), ns),
            Api::<PersistentVolumeClaim>::namespaced(c.clone(), ns),
        );
        tokio::try_join!(
            ssa(&sas, &sa),
            ssa(&secrets, &secret),
            ssa(&services, &service),
            async {
                match &claim {
                    Some(pvc) => create_if_absent(&claims, pvc).await,
                    None => Ok(()),
                }
            },
        )?;
        match h.execution {
            ExecutionMode::Ordinary => {
                ssa(
                    &Api::<Deployment>::namespaced(c.clone(), ns),
                    &harness::deployment_in(h, &self.config.cluster, t, g),
                )
                .await?;
            }
            ExecutionMode::Provider => {
                let ctx = HarnessContext {
                    work: h,
                    name: harness::names(&h.agent, h.revision).harness,
                    object_labels: harness::object_labels(&h.tenant, &h.agent, h.revision),
                    pod_labels: harness::pod_labels(h),
                    pod_spec: harness::pod_spec_in(h, &self.config.cluster),
                    target: t.into(),
                    generation: g,
                };
                self.driver
                    .provision_harness(&ctx, &self.cancel.child_token())
                    .await?;
            }
        }
        Ok(())
    }

    async fn stop_revision(
        &self,
        r: &RevisionWork,
        work: &Work,
        plan: &[RevisionStep],
    ) -> Result<Done, Failure> {
        let ns = r.data_plane_namespace.as_str();
        let what = if plan == STOP { "stopped" } else { "retired" };
        if !self
            .usable_namespace(ns, &r.tenant, &r.namespace_id)
            .await?
        {
            return Ok(Done {
                reason: format!("namespace {ns} gone; revision {} {what}", r.revision),
                namespace: ns.into(),
            });
        }
        // The record says stopped before anything goes, so no drift repair
        // (of this spoke or one sharing the cluster) puts the objects back.
        let before = self.recorded(&work.target).map(|(_, g)| g);
        self.record_desired(work, ns, &r.tenant, false, before)
            .await?;
        run_plan(&RevisionOps::new(self, r), plan).await?;
        self.observer.untrack(ns, &r.agent, r.revision);
        self.record_desired(work, ns, &r.tenant, false, Some(work.generation))
            .await?;
        self.recorded_lock()
            .insert(work.target.clone(), (ns.to_string(), work.generation));
        Ok(Done {
            reason: format!("harness {ns}/{} revision {} {what}", r.agent, r.revision),
            namespace: ns.into(),
        })
    }

    // --------------------------------------------------------------- rebuild

    /// What is applied (target -> generation), read from the cluster: the
    /// generation annotations of managed namespaces, their records and
    /// their ledgers.
    /// The first call also resumes the readiness watchers and tracked
    /// revisions (see [`Executor::resume`]).
    pub async fn applied(&self) -> Result<HashMap<String, i64>, ExecError> {
        self.resume().await?;
        let fresh = self.read_applied().await?;
        let mut rec = self.recorded_lock();
        *rec = fresh;
        Ok(rec.iter().map(|(t, (_, g))| (t.clone(), *g)).collect())
    }

    async fn managed_namespaces(&self) -> Result<Vec<Namespace>, apply::Error> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let selector = format!("{}={}", labels::MANAGED_BY, labels::MANAGER);
        Ok(api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| kube_err("list", "Namespace", "", "", e))?
            .items
            .into_iter()
            .filter(|ns| ns.metadata.deletion_timestamp.is_none())
            .collect())
    }

    async fn read_applied(&self) -> Result<Recorded, apply::Error> {
        let mut out = HashMap::new();
        for ns in self.managed_namespaces().await? {
            let name = ns.name_any();
            let ann = ns.annotations();
            if let (Some(t), Some(g)) = (
                ann.get(labels::WORK_TARGET_ANNOTATION),
                ann.get(labels::GENERATION_ANNOTATION)
                    .and_then(|g| g.parse::<i64>().ok()),
            ) {
                out.insert(t.clone(), (name.clone(), g));
            }
            let cms = Api::<ConfigMap>::namespaced(self.client.clone(), &name);
            let secrets = Api::<Secret>::namespaced(self.client.clone(), &name);
            // The records, and the ledger entries written before them.
            let read = async {
                let mut entries: Vec<(String, i64)> =
                    ledger::load(&cms).await?.into_iter().collect();
                entries.extend(crate::drift::desired::applied(&secrets).await?);
                Ok::<_, apply::Error>(entries)
            };
            match read.await {
                Ok(entries) => {
                    for (t, g) in entries {
                        let newest = out.get(&t).map_or(g, |(_, have)| g.max(*have));
                        out.insert(t, (name.clone(), newest));
                    }
                }
                // Labelled as managed but never provisioned by this spoke (no
                // tenant binding): not ours to report.
                Err(apply::Error::Kube { source, .. }) if apply::is_forbidden(&source) => {
                    tracing::warn!(namespace = %name, "spoke.exec.namespace_not_granted");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Rebuilds the spoke's view from the cluster once (idempotent): recorded
    /// generations, a watcher per managed namespace, tracked revisions.
    /// `apply` and `applied` call it; a link may call it at start-up.
    pub async fn resume(&self) -> Result<(), ExecError> {
        self.ensure_rebuilt().await
    }

    async fn ensure_rebuilt(&self) -> Result<(), ExecError> {
        self.rebuilt
            .get_or_try_init(|| async { self.rebuild().await.map_err(ExecError::from) })
            .await
            .map(|_| ())
    }

    /// Rebuilds the spoke's view from the cluster: recorded generations,
    /// watchers of every managed namespace, and the tracked revisions (from
    /// the annotations of their Harness Services).
    async fn rebuild(&self) -> Result<(), apply::Error> {
        let fresh = self.read_applied().await?;
        *self.recorded_lock() = fresh;
        for ns in self.managed_namespaces().await? {
            let name = ns.name_any();
            self.observer.watch_namespace(&name);
            let services = Api::<Service>::namespaced(self.client.clone(), &name);
            let selector = format!(
                "{}={HARNESS_ROLE},{}={}",
                labels::WORKLOAD_ROLE,
                labels::MANAGED_BY,
                labels::MANAGER
            );
            let list = match services
                .list(&ListParams::default().labels(&selector))
                .await
            {
                Ok(l) => l,
                Err(e) if apply::is_forbidden(&e) => {
                    self.observer.unwatch_namespace(&name);
                    continue;
                }
                Err(e) => return Err(kube_err("list", "Service", &name, "", e)),
            };
            for svc in list.items {
                let (l, a) = (svc.labels(), svc.annotations());
                let (Some(agent), Some(revision), Some(target), Some(generation)) = (
                    l.get(labels::AGENT),
                    l.get(labels::REVISION),
                    a.get(labels::WORK_TARGET_ANNOTATION),
                    a.get(labels::GENERATION_ANNOTATION)
                        .and_then(|g| g.parse::<i64>().ok()),
                ) else {
                    continue;
                };
                let requirements: BTreeMap<String, String> = a
                    .get(harness::REQUIREMENTS_ANNOTATION)
                    .and_then(|j| serde_json::from_str(j).ok())
                    .unwrap_or_default();
                let query = ReadinessQuery {
                    namespace: name.clone(),
                    agent: agent.clone(),
                    revision: revision.clone(),
                    role: HARNESS_ROLE.into(),
                    requirement_labels: requirements.into_iter().collect(),
                };
                let revision_id = a
                    .get(labels::REVISION_ID_ANNOTATION)
                    .cloned()
                    .unwrap_or_default();
                // A requirement that cannot be read back still requires a
                // status: with no admitted selection, only an owned one.
                let startup = a.get(harness::STARTUP_ANNOTATION).map(|j| {
                    let s = serde_json::from_str::<harness::StartupAnnotation>(j).unwrap_or_else(
                        |_| harness::StartupAnnotation {
                            selections: Vec::new(),
                            port: clawfed_proto::work::harness::DEFAULT_PORT,
                        },
                    );
                    StartupCheck {
                        selections: s.selections,
                        port: s.port,
                    }
                });
                self.observer
                    .track_with_startup(query, target, generation, &revision_id, startup)
                    .await;
            }
        }
        tracing::info!(
            namespaces = self.observer.namespaces().len(),
            "spoke.exec.rebuilt"
        );
        Ok(())
    }
}

/// Marks a namespace as being torn down while it lives.
struct Closing<'a> {
    set: &'a Mutex<HashSet<String>>,
    name: String,
}

impl<'a> Closing<'a> {
    fn new(set: &'a Mutex<HashSet<String>>, name: &str) -> Self {
        set.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_string());
        Closing {
            set,
            name: name.to_string(),
        }
    }
}

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.name);
    }
}

/// Runs revision cleanup steps against the cluster and the provider.
struct RevisionOps<'a> {
    exec: &'a Executor,
    r: &'a RevisionWork,
    names: harness::Names,
    cancel: CancellationToken,
}

impl<'a> RevisionOps<'a> {
    fn new(exec: &'a Executor, r: &'a RevisionWork) -> Self {
        RevisionOps {
            exec,
            r,
            names: harness::names(&r.agent, r.revision),
            cancel: exec.cancel.child_token(),
        }
    }
}

fn step_failed(step: impl std::fmt::Debug, e: impl Into<Failure>) -> StepFailed {
    let f = e.into();
    StepFailed {
        step: format!("{step:?}"),
        reason: f.reason,
        transient: f.transient,
        forbidden: f.forbidden,
    }
}

#[async_trait]
impl CleanupOps<RevisionStep> for RevisionOps<'_> {
    async fn run(&self, step: RevisionStep) -> Result<(), StepFailed> {
        let c = &self.exec.client;
        let ns = self.r.data_plane_namespace.as_str();
        let bg = DeleteParams::background();
        let res: Result<(), Failure> = async {
            match step {
                RevisionStep::DeleteDeployment => {
                    let api = Api::<Deployment>::namespaced(c.clone(), ns);
                    if apply::delete_if_present(
                        &api,
                        &self.names.harness,
                        &DeleteParams::foreground(),
                    )
                    .await?
                    {
                        apply::wait_gone(
                            &api,
                            &self.names.harness,
                            self.exec.config.delete_timeout,
                            &self.cancel,
                        )
                        .await?;
                    }
                }
                RevisionStep::ProviderCleanupRevision => {
                    let ctx = RevisionContext {
                        namespace: ns.into(),
                        agent: self.r.agent.clone(),
                        revision: self.r.revision,
                        revision_id: self.r.revision_id.clone(),
                        name: self.names.harness.clone(),
                    };
                    self.exec
                        .driver
                        .cleanup_revision(&ctx, &self.cancel)
                        .await?;
                }
                RevisionStep::DeleteService => {
                    apply::delete_if_present(
                        &Api::<Service>::namespaced(c.clone(), ns),
                        &self.names.harness,
                        &bg,
                    )
                    .await?;
                }
                RevisionStep::DeleteServiceAccount => {
                    apply::delete_if_present(
                        &Api::<ServiceAccount>::namespaced(c.clone(), ns),
                        &self.names.harness,
                        &bg,
                    )
                    .await?;
                }
                RevisionStep::DeleteCredentialSecret => {
                    apply::delete_if_present(
                        &Api::<Secret>::namespaced(c.clone(), ns),
                        &self.names.credentials,
                        &bg,
                    )
                    .await?;
                }
                RevisionStep::DeleteWorkspace => {
                    apply::delete_if_present(
                        &Api::<PersistentVolumeClaim>::namespaced(c.clone(), ns),
                        &self.names.workspace,
                        &bg,
                    )
                    .await?;
                }
            }
            Ok(())
        }
        .await;
        tracing::debug!(namespace = ns, agent = %self.r.agent, revision = self.r.revision, ?step, ok = res.is_ok(), "spoke.cleanup.step");
        res.map_err(|e| step_failed(step, e))
    }
}

/// Runs namespace teardown steps.
struct NamespaceOps<'a> {
    exec: &'a Executor,
    ctx: NamespaceContext,
    adopted: bool,
    cancel: CancellationToken,
}

impl NamespaceOps<'_> {
    /// For an adopted namespace: delete only what clawfed owns in it, then
    /// drop clawfed's markers from the namespace.
    async fn delete_owned_objects(&self) -> Result<(), Failure> {
        let c = &self.exec.client;
        let ns = self.ctx.namespace.as_str();
        let lp =
            ListParams::default().labels(&format!("{}={}", labels::MANAGED_BY, labels::MANAGER));
        let dp = DeleteParams::background();
        macro_rules! purge {
            ($t:ty, $kind:literal) => {
                Api::<$t>::namespaced(c.clone(), ns)
                    .delete_collection(&dp, &lp)
                    .await
                    .map_err(|e| kube_err("deletecollection", $kind, ns, "", e))?;
            };
        }
        // The desired-state records first: nothing is repaired once its
        // record is gone.
        Api::<Secret>::namespaced(c.clone(), ns)
            .delete_collection(
                &dp,
                &ListParams::default().labels(&format!(
                    "{}={},{}=true",
                    labels::MANAGED_BY,
                    labels::MANAGER,
                    crate::drift::desired::LABEL
                )),
            )
            .await
            .map_err(|e| kube_err("deletecollection", "Secret", ns, "", e))?;
        purge!(Deployment, "Deployment");
        purge!(Service, "Service");
        purge!(ServiceAccount, "ServiceAccount");
        purge!(Secret, "Secret");
        purge!(PersistentVolumeClaim, "PersistentVolumeClaim");
        purge!(NetworkPolicy, "NetworkPolicy");
        purge!(ResourceQuota, "ResourceQuota");
        purge!(LimitRange, "LimitRange");
        purge!(ConfigMap, "ConfigMap");
        // Drop the markers (the fields this manager applied) before the
        // binding that grants the rights above goes.
        let bare = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let namespaces: Api<Namespace> = Api::all(c.clone());
        namespaces
            .patch(ns, &apply::apply_params(), &Patch::Apply(&bare))
            .await
            .map_err(|e| kube_err("apply", "Namespace", "", ns, e))?;
        let marker_patch = serde_json::json!({ "metadata": { "annotations": {
            labels::GENERATION_ANNOTATION: null, labels::WORK_TARGET_ANNOTATION: null } } });
        namespaces
            .patch(ns, &merge_params(), &Patch::Merge(&marker_patch))
            .await
            .map_err(|e| kube_err("patch", "Namespace", "", ns, e))?;
        apply::delete_if_present(
            &Api::<RoleBinding>::namespaced(c.clone(), ns),
            nsapply::SPOKE_BINDING,
            &dp,
        )
        .await?;
        Ok(())
    }
}

#[async_trait]
impl CleanupOps<NamespaceStep> for NamespaceOps<'_> {
    async fn run(&self, step: NamespaceStep) -> Result<(), StepFailed> {
        let res: Result<(), Failure> = async {
            match step {
                NamespaceStep::ProviderCleanupNamespace => {
                    self.exec
                        .driver
                        .cleanup_namespace(&self.ctx, &self.cancel)
                        .await?;
                }
                NamespaceStep::RevokeCredentials => {
                    self.exec
                        .driver
                        .revoke_credentials(&self.ctx, &self.cancel)
                        .await?;
                }
                NamespaceStep::DeleteInfrastructure => {
                    self.exec.observer.unwatch_namespace(&self.ctx.namespace);
                    if self.adopted {
                        self.delete_owned_objects().await?;
                    } else {
                        let api: Api<Namespace> = Api::all(self.exec.client.clone());
                        match api
                            .delete(&self.ctx.namespace, &DeleteParams::background())
                            .await
                        {
                            Ok(_) => {}
                            Err(e) if apply::is_not_found(&e) => {}
                            Err(e) => {
                                return Err(kube_err(
                                    "delete",
                                    "Namespace",
                                    "",
                                    &self.ctx.namespace,
                                    e,
                                )
                                .into());
                            }
                        }
                    }
                }
            }
            Ok(())
        }
        .await;
        tracing::info!(namespace = %self.ctx.namespace, ?step, ok = res.is_ok(), "spoke.namespace.teardown_step");
        res.map_err(|e| step_failed(step, e))
    }
}

/// The set of kinds the executor understands (for the link's capabilities).
pub fn capabilities() -> HashSet<&'static str> {
    WorkKind::ALL.iter().map(|k| k.as_str()).collect()
}
