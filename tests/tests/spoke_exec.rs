//! Spoke execution against a real execution cluster (`e2e/cluster.sh up
//! exec-a`): the spoke runs as its own ServiceAccount with the RBAC of
//! deploy/spoke (parsed from the YAML into typed objects and applied), kwok
//! makes the Harness Pods Running and Ready.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_trait::async_trait;
use clawfed_proto::labels;
use clawfed_proto::link::v1::{ReadinessObservation, Report, Work, WorkResult, report};
use clawfed_proto::work::{
    ExecutionMode, HarnessWork, NamespaceDeleteWork, NamespaceWork, RevisionWork, WorkSpec,
    Workspace, target,
};
use clawfed_spoke::config::SpokeConfig;
use clawfed_spoke::exec::Executor;
use clawfed_spoke::provider::crd::CrdSandboxDriver;
use clawfed_spoke::provider::ordinary::DeploymentDriver;
use clawfed_spoke::provider::{NamespaceContext, ProviderError, RevisionContext, SandboxDriver};
use clawfed_tests::kube_env::{eventually, is_forbidden};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, LimitRange, Namespace, PersistentVolumeClaim, Pod, ResourceQuota, Secret, Service,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, Client, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);
use clawfed_tests::spoke_env::{
    SPOKE_NAMESPACE as SPOKE_NS, SPOKE_SERVICE_ACCOUNT as SPOKE_SA, SpokeEnv,
    fake_model_credential, harness_work, kwok_node_selector, tenant_names, test_container_defaults,
};

fn typed<T: DeserializeOwned>(v: &serde_json::Value) -> Result<T> {
    Ok(serde_json::from_value(v.clone())?)
}

fn config() -> SpokeConfig {
    SpokeConfig {
        delete_timeout: Duration::from_secs(60),
        ..Default::default()
    }
}

/// A test tenant: unique id, the namespace work and helpers for its work.
struct Tenant {
    tenant: String,
    id: String,
    ns: String,
    seq: std::sync::atomic::AtomicU64,
}

impl Tenant {
    fn new(prefix: &str) -> Self {
        let (tenant, id, ns) = tenant_names(prefix);
        Tenant {
            tenant,
            id,
            ns,
            seq: Default::default(),
        }
    }

    fn work(&self, target: String, generation: i64, spec: WorkSpec) -> Work {
        Work {
            sequence: self.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1,
            target,
            generation,
            kind: spec.kind().as_str().into(),
            spec: spec.encode(),
        }
    }

    fn namespace_work(&self) -> NamespaceWork {
        NamespaceWork {
            tenant: self.tenant.clone(),
            namespace_id: self.id.clone(),
            quota: BTreeMap::from([("pods".into(), "20".into())]),
            container_defaults: test_container_defaults(),
            network: clawfed_proto::work::HarnessNetwork {
                ingress_from_spoke: true,
                ingress_from_cidrs: vec!["10.96.0.0/12".into()],
                harness_port: 8080,
                egress: vec![clawfed_proto::work::EgressRule {
                    cidr: "203.0.113.0/24".into(),
                    ports: vec![443],
                }],
                dns: None,
            },
            ..Default::default()
        }
    }

    fn ensure(&self, generation: i64) -> Work {
        self.work(
            target::namespace(&self.id),
            generation,
            WorkSpec::NamespaceEnsure(self.namespace_work()),
        )
    }

    fn harness(&self, agent: &str, revision: i64) -> HarnessWork {
        HarnessWork {
            revision,
            revision_id: format!("rev-{revision}"),
            requirement_labels: BTreeMap::from([(
                "sandbox.clawfed.io/class".into(),
                "standard".into(),
            )]),
            env: BTreeMap::from([("OPENCLAW_MODE".into(), "harness".into())]),
            credential: fake_model_credential(),
            node_selector: kwok_node_selector(),
            // The installation's tolerations reach the Pod (issue 30).
            tolerations: vec![clawfed_proto::work::Toleration {
                key: Some("clawfed.test/agents".into()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }],
            ..harness_work(&self.tenant, &self.id, &self.ns, agent)
        }
    }

    fn apply(&self, h: &HarnessWork, generation: i64) -> Work {
        self.work(
            target::harness(&self.id, &h.agent, h.revision),
            generation,
            WorkSpec::HarnessApply(Box::new(h.clone())),
        )
    }

    fn revision(&self, agent: &str, revision: i64, execution: ExecutionMode) -> RevisionWork {
        RevisionWork {
            tenant: self.tenant.clone(),
            namespace_id: self.id.clone(),
            data_plane_namespace: self.ns.clone(),
            agent: agent.into(),
            revision,
            revision_id: format!("rev-{revision}"),
            execution,
            agent_deleted: false,
        }
    }

    fn stop(&self, r: &RevisionWork, generation: i64) -> Work {
        self.work(
            target::harness(&self.id, &r.agent, r.revision),
            generation,
            WorkSpec::HarnessStop(r.clone()),
        )
    }

    fn retire(&self, r: &RevisionWork, generation: i64) -> Work {
        self.work(
            target::harness(&self.id, &r.agent, r.revision),
            generation,
            WorkSpec::HarnessRetire(r.clone()),
        )
    }

    fn delete(&self, generation: i64) -> Work {
        self.work(
            target::namespace(&self.id),
            generation,
            WorkSpec::NamespaceDelete(NamespaceDeleteWork {
                tenant: self.tenant.clone(),
                namespace_id: self.id.clone(),
                data_plane_namespace: self.ns.clone(),
            }),
        )
    }

    async fn cleanup(&self, admin: &Client) {
        let _ = Api::<Namespace>::all(admin.clone())
            .delete(&self.ns, &DeleteParams::background())
            .await;
    }
}

/// Collects reports and waits for readiness observations.
struct Reports {
    rx: mpsc::Receiver<Report>,
    seen: Vec<Report>,
}

impl Reports {
    fn new() -> (mpsc::Sender<Report>, Reports) {
        let (tx, rx) = mpsc::channel(4096);
        (
            tx,
            Reports {
                rx,
                seen: Vec::new(),
            },
        )
    }

    async fn readiness(
        &mut self,
        target: &str,
        what: &str,
        f: impl Fn(&ReadinessObservation) -> bool,
    ) -> Result<ReadinessObservation> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let r = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .with_context(|| {
                    format!(
                        "timed out waiting for readiness report: {what}; seen {:?}",
                        self.seen.last()
                    )
                })?
                .context("report channel closed")?;
            self.seen.push(r.clone());
            if r.target == target
                && let Some(report::Body::Readiness(o)) = &r.body
                && f(o)
            {
                return Ok(o.clone());
            }
        }
    }

    fn drain(&mut self) -> Vec<Report> {
        while let Ok(r) = self.rx.try_recv() {
            self.seen.push(r);
        }
        self.seen.clone()
    }
}

fn assert_applied(r: &WorkResult, what: &str) {
    assert!(r.applied, "{what}: not applied: {}", r.reason);
}

async fn count<K>(client: &Client, ns: &str, selector: &str) -> Result<usize>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    Ok(Api::<K>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .into_iter()
        .filter(|o| o.meta().deletion_timestamp.is_none())
        .count())
}

#[tokio::test]
async fn namespace_guard_rails_and_ready_verdict_then_not_unique_at_two_pods() -> Result<()> {
    let e = SpokeEnv::exec_a().await?;
    let admin = e.cluster.admin();
    let t = Tenant::new("ready");
    let (tx, mut reports) = Reports::new();
    let exec = Executor::new(e.spoke.clone(), config(), tx);

    let r = exec.apply(&t.ensure(1)).await?;
    assert_applied(&r, "namespace.ensure");
    assert_eq!(r.namespace, t.ns, "oce- + 15 hex of sha256(id)");
    let ns = Api::<Namespace>::all(admin.clone()).get(&t.ns).await?;
    assert_eq!(ns.labels().get(labels::TENANT), Some(&t.tenant));
    assert_eq!(
        ns.labels().get(labels::MANAGED_BY).map(String::as_str),
        Some(labels::MANAGER)
    );
    assert_eq!(
        ns.annotations().get(labels::NAMESPACE_ID_ANNOTATION),
        Some(&t.id)
    );
    assert_eq!(
        ns.annotations()
            .get(labels::GENERATION_ANNOTATION)
            .map(String::as_str),
        Some("1")
    );
    assert!(
        Api::<ResourceQuota>::namespaced(admin.clone(), &t.ns)
            .get("clawfed-quota")
            .await
            .is_ok()
    );
    let lr = Api::<LimitRange>::namespaced(admin.clone(), &t.ns)
        .get("clawfed-defaults")
        .await?;
    assert!(
        lr.spec
            .and_then(|s| s.limits.first().and_then(|l| l.default_request.clone()))
            .is_some()
    );
    let pols: Vec<String> = Api::<NetworkPolicy>::namespaced(admin.clone(), &t.ns)
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(pols.len(), 3, "deny-all, dns, harness flows: {pols:?}");

    let h = t.harness("scout", 1);
    let work = t.apply(&h, 1);
    assert_applied(&exec.apply(&work).await?, "harness.apply");
    let ready = reports
        .readiness(&work.target, "ready", |o| o.ready)
        .await?;
    assert_eq!((ready.live_candidates, ready.ready_candidates), (1, 1));
    assert_eq!(ready.revision_id, "rev-1");

    // Objects: hardened Deployment with every label, Service selector, no
    // credential outside the Secret.
    let d = Api::<Deployment>::namespaced(admin.clone(), &t.ns)
        .get("scout-r1-harness")
        .await?;
    let tpl = d.spec.template.clone();
    let tolerations = tpl
        .spec
        .as_ref()
        .and_then(|p| p.tolerations.clone())
        .unwrap_or_default();
    assert_eq!(
        tolerations
            .iter()
            .map(|t| (t.key.as_deref(), t.operator.as_deref(), t.effect.as_deref()))
            .collect::<Vec<_>>(),
        [(
            Some("clawfed.test/agents"),
            Some("Exists"),
            Some("NoSchedule")
        )],
        "the installation's tolerations, as the apiserver stored them"
    );
    let pod_labels = tpl.metadata.and_then(|m| m.labels).unwrap_or_default();
    assert_eq!(
        pod_labels
            .get("sandbox.clawfed.io/class")
            .map(String::as_str),
        Some("standard")
    );
    let d_json = serde_json::to_string(&d)?;
    assert!(
        !d_json.contains("sk-test-not-real"),
        "credential only in the Secret"
    );
    let secret = Api::<Secret>::namespaced(admin.clone(), &t.ns)
        .get("scout-r1-credentials")
        .await?;
    assert!(
        secret
            .data
            .is_some_and(|d| d.contains_key("CLAWFED_MODEL_API_KEY"))
    );
    let svc = Api::<Service>::namespaced(admin.clone(), &t.ns)
        .get("scout-r1-harness")
        .await?;
    let sel = svc.spec.and_then(|s| s.selector).unwrap_or_default();
    assert_eq!(sel.len(), 3, "agent/revision/role: {sel:?}");

    // Same generation again is harmless; an older one is ignored.
    assert_applied(&exec.apply(&work).await?, "replay");
    let stale = exec.apply(&t.apply(&h, 0)).await?;
    assert!(stale.reason.contains("superseded"), "{}", stale.reason);

    // Scale to two Pods: not ready, label uniqueness reported.
    Api::<Deployment>::namespaced(admin.clone(), &t.ns)
        .patch(
            "scout-r1-harness",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 2}})),
        )
        .await?;
    let two = reports
        .readiness(&work.target, "two live candidates", |o| {
            !o.ready && o.live_candidates == 2
        })
        .await?;
    assert_eq!(two.reason, "several live candidates");

    exec.shutdown();
    t.cleanup(&admin).await;
    Ok(())
}

/// Wraps a driver: records calls and whether the Deployment was gone at the
/// moment of revision cleanup; can be told to fail.
struct Recording {
    inner: Arc<dyn SandboxDriver>,
    admin: Client,
    calls: Mutex<Vec<String>>,
    fail_namespace_cleanup: bool,
    fail_revoke: bool,
}

impl Recording {
    fn new(inner: Arc<dyn SandboxDriver>, admin: Client) -> Self {
        Recording {
            inner,
            admin,
            calls: Mutex::new(Vec::new()),
            fail_namespace_cleanup: false,
            fail_revoke: false,
        }
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    fn push(&self, s: String) {
        if let Ok(mut c) = self.calls.lock() {
            c.push(s);
        }
    }
}

#[async_trait]
impl SandboxDriver for Recording {
    fn name(&self) -> &str {
        "recording"
    }
    async fn ensure_namespace(
        &self,
        ns: &NamespaceContext,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        self.push("ensure_namespace".into());
        self.inner.ensure_namespace(ns, cancel).await
    }
    fn provisions_harness(&self) -> bool {
        self.inner.provisions_harness()
    }
    async fn provision_harness(
        &self,
        h: &clawfed_spoke::provider::HarnessContext<'_>,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        self.push("provision_harness".into());
        self.inner.provision_harness(h, cancel).await
    }
    async fn cleanup_revision(
        &self,
        r: &RevisionContext,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        let present = Api::<Deployment>::namespaced(self.admin.clone(), &r.namespace)
            .get_opt(&r.name)
            .await
            .map_err(|e| ProviderError::Failed(e.to_string()))?
            .is_some();
        self.push(format!("cleanup_revision deployment_present={present}"));
        self.inner.cleanup_revision(r, cancel).await
    }
    async fn cleanup_namespace(
        &self,
        ns: &NamespaceContext,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        self.push("cleanup_namespace".into());
        if self.fail_namespace_cleanup {
            return Err(ProviderError::Failed(
                "injected namespace cleanup failure".into(),
            ));
        }
        self.inner.cleanup_namespace(ns, cancel).await
    }
    async fn revoke_credentials(
        &self,
        ns: &NamespaceContext,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        self.push("revoke_credentials".into());
        if self.fail_revoke {
            return Err(ProviderError::Failed("injected revocation failure".into()));
        }
        self.inner.revoke_credentials(ns, cancel).await
    }
}

#[tokio::test]
async fn stop_deletes_deployment_then_always_calls_provider_keeps_data_retire_keeps_the_agents_claim()
-> Result<()> {
    let e = SpokeEnv::exec_a().await?;
    let admin = e.cluster.admin();
    let t = Tenant::new("stop");
    let (tx, _reports) = Reports::new();
    let rec = Arc::new(Recording::new(Arc::new(DeploymentDriver), admin.clone()));
    let exec = Executor::with_driver(e.spoke.clone(), config(), tx, rec.clone());
    assert_applied(&exec.apply(&t.ensure(1)).await?, "ensure");
    let mut h = t.harness("keeper", 1);
    h.workspace = Some(Workspace {
        size: "1Gi".into(),
        storage_class: None,
    });
    assert_applied(&exec.apply(&t.apply(&h, 1)).await?, "apply");
    let sel = "clawfed.io/agent=keeper";
    eventually(WAIT, "harness pod", || async {
        Ok((count::<Pod>(&admin, &t.ns, sel).await? == 1).then_some(()))
    })
    .await?;

    let r = t.revision("keeper", 1, ExecutionMode::Ordinary);
    assert_applied(&exec.apply(&t.stop(&r, 2)).await?, "stop");
    let calls = rec.calls();
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("cleanup_revision"))
            .collect::<Vec<_>>(),
        vec!["cleanup_revision deployment_present=false"],
        "provider cleanup after the Deployment is gone: {calls:?}"
    );
    assert_eq!(count::<Deployment>(&admin, &t.ns, sel).await?, 0);
    assert_eq!(count::<Pod>(&admin, &t.ns, sel).await?, 0);
    assert_eq!(count::<Service>(&admin, &t.ns, sel).await?, 0);
    assert_eq!(
        count::<PersistentVolumeClaim>(&admin, &t.ns, sel).await?,
        1,
        "stop keeps the PVC"
    );
    assert_eq!(
        count::<Secret>(&admin, &t.ns, sel).await?,
        1,
        "stop keeps the credential Secret"
    );

    // Repeated stop converges, and the absent Deployment does not skip the provider.
    assert_applied(&exec.apply(&t.stop(&r, 3)).await?, "stop again");
    let n = rec
        .calls()
        .iter()
        .filter(|c| c.starts_with("cleanup_revision"))
        .count();
    assert_eq!(n, 2, "provider cleanup runs on every stop");

    assert_applied(&exec.apply(&t.retire(&r, 4)).await?, "retire");
    assert_eq!(
        rec.calls()
            .iter()
            .filter(|c| c.starts_with("cleanup_revision"))
            .count(),
        3
    );
    eventually(WAIT, "the credential Secret removed on retire", || async {
        Ok((count::<Secret>(&admin, &t.ns, sel).await? == 0).then_some(()))
    })
    .await?;
    assert_eq!(
        count::<PersistentVolumeClaim>(&admin, &t.ns, sel).await?,
        1,
        "retirement keeps the Agent-owned claim for the next revision"
    );
    // The Agent's deletion: its retirement removes the claim too.
    let mut deleted = r.clone();
    deleted.agent_deleted = true;
    assert_applied(
        &exec.apply(&t.retire(&deleted, 5)).await?,
        "retire (agent deleted)",
    );
    eventually(WAIT, "the Agent's claim removed with the Agent", || async {
        let left = count::<PersistentVolumeClaim>(&admin, &t.ns, sel).await?;
        Ok((left == 0).then_some(()))
    })
    .await?;
    exec.shutdown();
    t.cleanup(&admin).await;
    Ok(())
}

#[tokio::test]
async fn dedicated_replacement_stops_predecessor_first() -> Result<()> {
    let e = SpokeEnv::exec_a().await?;
    let admin = e.cluster.admin();
    let t = Tenant::new("dedicated");
    let (tx, mut reports) = Reports::new();
    let exec = Executor::new(e.spoke.clone(), config(), tx);
    assert_applied(&exec.apply(&t.ensure(1)).await?, "ensure");
    let h1 = t.harness("solo", 1);
    let w1 = t.apply(&h1, 1);
    assert_applied(&exec.apply(&w1).await?, "r1");
    reports
        .readiness(&w1.target, "r1 ready", |o| o.ready)
        .await?;
    let mut h2 = t.harness("solo", 2);
    h2.predecessors = vec![clawfed_proto::work::Predecessor {
        revision: 1,
        revision_id: "rev-1".into(),
        execution: ExecutionMode::Ordinary,
    }];
    let w2 = t.apply(&h2, 1);
    assert_applied(&exec.apply(&w2).await?, "r2");
    // By the time apply returned, r1's Deployment and Pod were gone.
    let r1_sel = "clawfed.io/agent=solo,clawfed.io/revision=1";
    assert_eq!(count::<Deployment>(&admin, &t.ns, r1_sel).await?, 0);
    assert_eq!(count::<Pod>(&admin, &t.ns, r1_sel).await?, 0);
    assert_eq!(
        count::<PersistentVolumeClaim>(&admin, &t.ns, r1_sel).await?
            + count::<Secret>(&admin, &t.ns, r1_sel).await?,
        1,
        "r1 stopped (Secret kept), not retired"
    );
    reports
        .readiness(&w2.target, "r2 ready", |o| o.ready)
        .await?;
    exec.shutdown();
    t.cleanup(&admin).await;
    Ok(())
}

/// Failover with fencing, the spoke's side: a fenced Harness is stopped
/// with its record saying so, a resend of the same apply does not start it
/// again, drift repair has nothing to restore, and a restarted spoke finds
/// it fenced (and its running failover Harnesses leased) from the records.
#[tokio::test]
async fn a_fenced_harness_stays_stopped_through_a_resend_and_a_restart() -> Result<()> {
    let e = SpokeEnv::exec_a().await?;
    let admin = e.cluster.admin();
    let t = Tenant::new("fence");
    let (tx, mut reports) = Reports::new();
    let exec = Executor::new(e.spoke.clone(), config(), tx);
    // The executor sees every managed namespace of the shared cluster.
    let ours = |target: &str| target.contains(&t.id);
    let fenced_of = |s: &clawfed_spoke::failover::FailoverState| -> Vec<String> {
        s.fenced.iter().filter(|f| ours(f)).cloned().collect()
    };
    assert_applied(&exec.apply(&t.ensure(1)).await?, "ensure");
    let mut fenced = t.harness("fenced", 1);
    fenced.failover_after_seconds = Some(30);
    let mut kept = t.harness("kept", 1);
    kept.failover_after_seconds = Some(60);
    let (wf, wk) = (t.apply(&fenced, 1), t.apply(&kept, 1));
    assert_applied(&exec.apply(&wf).await?, "fenced r1");
    assert_applied(&exec.apply(&wk).await?, "kept r1");
    reports
        .readiness(&wf.target, "fenced r1 ready", |o| o.ready)
        .await?;
    let state = exec.failover_state().await?;
    assert_eq!(
        state
            .running
            .iter()
            .filter(|l| ours(&l.target))
            .map(|l| (l.target.as_str(), l.after_seconds, l.since.is_some()))
            .collect::<Vec<_>>(),
        [
            (wf.target.as_str(), 30, true),
            (wk.target.as_str(), 60, true)
        ],
        "applied by this process: leased from the apply"
    );
    let deployment = Api::<Deployment>::namespaced(admin.clone(), &t.ns);
    let sel = "clawfed.io/agent=fenced,clawfed.io/revision=1";
    let pod = Api::<Pod>::namespaced(admin.clone(), &t.ns)
        .list(&ListParams::default().labels(sel))
        .await?;
    let grace = pod.items[0]
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds);
    assert_eq!(
        grace,
        Some(clawfed_proto::failover::FENCE_GRACE.as_secs() as i64),
        "a fenced Pod goes within the margin the hub waits"
    );

    assert!(exec.fence(&wf.target).await?);
    assert!(!exec.fence(&wf.target).await?, "fenced once");
    assert_eq!(count::<Deployment>(&admin, &t.ns, sel).await?, 0);
    assert_eq!(count::<Pod>(&admin, &t.ns, sel).await?, 0);
    let state = exec.failover_state().await?;
    assert_eq!(fenced_of(&state), std::slice::from_ref(&wf.target));
    assert_eq!(state.running.iter().filter(|l| ours(&l.target)).count(), 1);
    // The hub resends the same apply (a digest mismatch): answered, not run.
    let again = exec.apply(&wf).await?;
    assert!(
        again.applied && again.reason.contains("settled as harness.stop"),
        "{again:?}"
    );
    assert_eq!(count::<Deployment>(&admin, &t.ns, sel).await?, 0);
    let records =
        clawfed_spoke::drift::desired::all(&Api::<Secret>::namespaced(admin.clone(), &t.ns))
            .await?;
    let record = records
        .iter()
        .find(|r| r.target == wf.target)
        .expect("record");
    assert!(record.fenced && record.kind == "harness.stop", "{record:?}");
    exec.shutdown();

    // A restarted spoke: fenced stays fenced; the other is leased from
    // its start (it cannot know how long it was down).
    let (tx, _reports) = Reports::new();
    let restarted = Executor::new(e.spoke.clone(), config(), tx);
    let state = restarted.failover_state().await?;
    assert_eq!(fenced_of(&state), std::slice::from_ref(&wf.target));
    assert_eq!(
        state
            .running
            .iter()
            .filter(|l| ours(&l.target))
            .map(|l| (l.target.as_str(), l.since))
            .collect::<Vec<_>>(),
        [(wk.target.as_str(), None)]
    );
    // The hub's own stop replaces the fence.
    let stop = t.work(
        wf.target.clone(),
        2,
        WorkSpec::HarnessStop(fenced.revision_work()),
    );
    assert_applied(&restarted.apply(&stop).await?, "hub stop");
    assert!(fenced_of(&restarted.failover_state().await?).is_empty());
    assert_eq!(
        deployment
            .list(&ListParams::default().labels(sel))
            .await?
            .items
            .len(),
        0
    );
    restarted.shutdown();
    t.cleanup(&admin).await;
    Ok(())
}

#[tokio::test]
async fn namespace_teardown_provider_failure_or_failed_revocation_keeps_infrastructure()
-> Result<()> {
    let e = SpokeEnv::exec_a().await?;
    let admin = e.cluster.admin();
    let t = Tenant::new("teardown");
    for (fail_cleanup, fail_revoke) in [(true, false), (false, true)] {
        let (tx, mut reports) = Reports::new();
        let mut rec = Recording::new(Arc::new(DeploymentDriver), admin.clone());
        rec.fail_namespace_cleanup = fail_cleanup;
        rec.fail_revoke = fail_revoke;
        let rec = Arc::new(rec);
        let exec = Executor::with_driver(e.spoke.clone(), config(), tx, rec.clone());
        assert_applied(&exec.apply(&t.ensure(1)).await?, "ensure");
        assert_applied(
            &exec.apply(&t.apply(&t.harness("held", 1), 1)).await?,
            "apply",
        );
        let del = t.delete(2);
        let r = exec.apply(&del).await?;
        assert!(!r.applied, "teardown must fail");
        let injected = if fail_cleanup {
            "namespace cleanup"
        } else {
            "revocation"
        };
        assert!(r.reason.contains(injected), "{}", r.reason);
        let reported = reports.drain().into_iter().any(|rep| {
            matches!(&rep.body, Some(report::Body::WorkResult(w)) if rep.target == del.target && !w.applied)
        });
        assert!(reported, "error reported to the hub");
        let ns = Api::<Namespace>::all(admin.clone()).get(&t.ns).await?;
        assert!(ns.metadata.deletion_timestamp.is_none(), "namespace kept");
        assert_eq!(
            count::<Deployment>(&admin, &t.ns, "clawfed.io/agent=held").await?,
            1,
            "workload kept"
        );
        assert!(
            Api::<NetworkPolicy>::namespaced(admin.clone(), &t.ns)
                .get("clawfed-default-deny")
                .await
                .is_ok()
        );
        let calls = rec.calls();
        if fail_cleanup {
            assert!(
                !calls.contains(&"revoke_credentials".to_string()),
                "cleanup first: {calls:?}"
            );
        }
        exec.shutdown();
    }
    // With a working provider the teardown goes through, cleanup first.
    let (tx, _r) = Reports::new();
    let rec = Arc::new(Recording::new(Arc::new(DeploymentDriver), admin.clone()));
    let exec = Executor::with_driver(e.spoke.clone(), config(), tx, rec.clone());
    assert_applied(&exec.apply(&t.delete(3)).await?, "teardown");
    assert_eq!(rec.calls(), vec!["cleanup_namespace", "revoke_credentials"]);
    let ns = Api::<Namespace>::all(admin.clone()).get_opt(&t.ns).await?;
    assert!(
        ns.is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
        "namespace deleting"
    );
    exec.shutdown();
    Ok(())
}

#[tokio::test]
async fn crd_provider_owns_the_harness_through_its_custom_resource() -> Result<()> {
    let e = SpokeEnv::exec_a().await?;
    let admin = e.cluster.admin();
    let t = Tenant::new("crd");
    let (tx, mut reports) = Reports::new();
    let driver = Arc::new(CrdSandboxDriver::new(e.spoke.clone()));
    let rec = Arc::new(Recording::new(driver, admin.clone()));
    let exec = Executor::with_driver(e.spoke.clone(), config(), tx, rec.clone());
    assert_applied(
        &exec.apply(&t.ensure(1)).await?,
        "ensure (installs the CRD)",
    );
    Api::<CustomResourceDefinition>::all(admin.clone())
        .get(clawfed_spoke::provider::crd::CRD_NAME)
        .await
        .context("CRD installed by the spoke")?;
    let mut h = t.harness("boxed", 1);
    h.execution = ExecutionMode::Provider;
    let w = t.apply(&h, 1);
    assert_applied(&exec.apply(&w).await?, "provider harness");
    reports
        .readiness(&w.target, "provider harness ready", |o| o.ready)
        .await?;
    let sel = "clawfed.io/agent=boxed";
    assert_eq!(
        count::<Deployment>(&admin, &t.ns, sel).await?,
        0,
        "no ordinary Deployment"
    );
    let ar: ApiResource = clawfed_spoke::provider::crd::api_resource();
    let crs = Api::<DynamicObject>::namespaced_with(admin.clone(), &t.ns, &ar);
    assert!(
        crs.get_opt("boxed-r1-harness").await?.is_some(),
        "SandboxHarness exists"
    );
    let pod = Api::<Pod>::namespaced(admin.clone(), &t.ns)
        .get("boxed-r1-harness")
        .await?;
    assert_eq!(pod.owner_references()[0].kind, "SandboxHarness");

    assert_applied(
        &exec
            .apply(&t.stop(&t.revision("boxed", 1, ExecutionMode::Provider), 2))
            .await?,
        "stop",
    );
    assert!(
        crs.get_opt("boxed-r1-harness").await?.is_none(),
        "provider removed its resource"
    );
    assert_eq!(count::<Pod>(&admin, &t.ns, sel).await?, 0);
    let gone = reports
        .readiness(&w.target, "not ready after stop", |o| !o.ready)
        .await?;
    assert_eq!(gone.live_candidates, 0);
    assert!(
        rec.calls()
            .contains(&"cleanup_revision deployment_present=false".to_string())
    );
    exec.shutdown();
    t.cleanup(&admin).await;
    Ok(())
}

#[tokio::test]
async fn restart_rebuilds_from_the_cluster_and_converges_without_duplicates() -> Result<()> {
    let e = SpokeEnv::exec_a().await?;
    let admin = e.cluster.admin();
    let t = Tenant::new("restart");
    let h = t.harness("phoenix", 1);
    let w = t.apply(&h, 5);
    {
        let (tx, mut reports) = Reports::new();
        let first = Executor::new(e.spoke.clone(), config(), tx);
        assert_applied(&first.apply(&t.ensure(3)).await?, "ensure");
        assert_applied(&first.apply(&w).await?, "apply");
        reports
            .readiness(&w.target, "ready before restart", |o| o.ready)
            .await?;
        first.shutdown();
    }
    // A new spoke process: nothing in memory.
    let (tx, mut reports) = Reports::new();
    let second = Executor::new(e.spoke.clone(), config(), tx);
    let applied = second.applied().await?;
    assert_eq!(applied.get(&target::namespace(&t.id)), Some(&3));
    assert_eq!(applied.get(&w.target), Some(&5));
    // It resumes readiness reporting for the revision it found.
    reports
        .readiness(&w.target, "ready after restart", |o| o.ready)
        .await?;
    // Redelivery of the same and of an older generation: no duplicates.
    let sel = "clawfed.io/agent=phoenix";
    let deployments = Api::<Deployment>::namespaced(admin.clone(), &t.ns);
    let of_agent = ListParams::default().labels(sel);
    let before = deployments.list(&of_agent).await?.items;
    assert_eq!(before.len(), 1);
    assert_applied(&second.apply(&w).await?, "replay after restart");
    let stale = second.apply(&t.apply(&h, 4)).await?;
    assert!(stale.reason.contains("superseded"), "{}", stale.reason);
    assert_eq!(count::<Deployment>(&admin, &t.ns, sel).await?, 1);
    // The replays left the Deployment's spec as it was (a changed template
    // would roll out a second Pod), and once its controller has acted on
    // that generation, exactly one Pod runs.
    let after = eventually(WAIT, "Deployment settled after the replays", || async {
        let d = (deployments.list(&of_agent).await?.items.into_iter().next())
            .context("the Deployment is gone")?;
        let status = d.status.clone().unwrap_or_default();
        let settled = status.observed_generation == d.metadata.generation
            && status.replicas == Some(1)
            && status.updated_replicas == Some(1);
        Ok(settled.then_some(d))
    })
    .await?;
    assert_eq!(
        after.metadata.generation, before[0].metadata.generation,
        "a replay changed the Deployment"
    );
    assert_eq!(count::<Pod>(&admin, &t.ns, sel).await?, 1);
    let namespaces = Api::<Namespace>::all(admin.clone())
        .list(&ListParams::default().labels(&format!("{}={}", labels::TENANT, t.tenant)))
        .await?;
    assert_eq!(namespaces.items.len(), 1, "one namespace for the tenant");
    second.shutdown();
    t.cleanup(&admin).await;
    Ok(())
}

#[tokio::test]
async fn namespace_resolution_fails_closed_and_accepts_marked_legacy() -> Result<()> {
    let e = SpokeEnv::exec_a().await?;
    let admin = e.cluster.admin();
    let (tx, _r) = Reports::new();
    let exec = Executor::new(e.spoke.clone(), config(), tx);
    let namespaces = Api::<Namespace>::all(admin.clone());
    let t = Tenant::new("legacy");
    let legacy = format!(
        "oce-{}-{}",
        t.tenant,
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let mk = |name: &str, managed: bool| -> Result<Namespace> {
        let mut v = serde_json::json!({"metadata": {"name": name,
            "labels": {labels::TENANT: t.tenant},
            "annotations": {labels::NAMESPACE_ID_ANNOTATION: t.id}}});
        if managed {
            v["metadata"]["labels"][labels::MANAGED_BY] = labels::MANAGER.into();
        }
        typed(&v)
    };
    // Missing manager label: not accepted.
    namespaces
        .create(&PostParams::default(), &mk(&legacy, false)?)
        .await?;
    let r = exec.apply(&t.ensure(1)).await?;
    assert!(
        !r.applied && r.reason.contains("inconsistent"),
        "{}",
        r.reason
    );
    // All three markers: accepted, keeps its name.
    namespaces
        .patch(
            &legacy,
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"metadata": {"labels": {labels::MANAGED_BY: labels::MANAGER}}}),
            ),
        )
        .await?;
    let r = exec.apply(&t.ensure(2)).await?;
    assert_applied(&r, "legacy");
    assert_eq!(r.namespace, legacy);
    // A second namespace claiming the tenant: fail closed.
    namespaces
        .create(&PostParams::default(), &mk(&t.ns, true)?)
        .await?;
    let r = exec.apply(&t.ensure(3)).await?;
    assert!(!r.applied && r.reason.contains("all claim"), "{}", r.reason);

    // Digest required, tag given: refused before anything is applied.
    let mut h = t.harness("tagged", 1);
    h.data_plane_namespace = legacy.clone();
    h.image = "registry.invalid/openclaw:latest".into();
    let r = exec.apply(&t.apply(&h, 1)).await?;
    assert!(!r.applied && r.reason.contains("digest"), "{}", r.reason);
    assert_eq!(
        count::<Deployment>(&admin, &legacy, "clawfed.io/agent=tagged").await?,
        0
    );
    // Adopting an operator-named namespace keeps its name, but only once an
    // operator has marked it adoptable.
    let t2 = Tenant::new("adopt");
    let chosen = format!("ops-{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    namespaces
        .create(
            &PostParams::default(),
            &typed(&serde_json::json!({"metadata": {"name": chosen}}))?,
        )
        .await?;
    let mut nw = t2.namespace_work();
    nw.adopt = Some(chosen.clone());
    let r = exec
        .apply(&t2.work(
            target::namespace(&t2.id),
            1,
            WorkSpec::NamespaceEnsure(nw.clone()),
        ))
        .await?;
    assert!(
        !r.applied && r.reason.contains("not marked for adoption"),
        "{}",
        r.reason
    );
    assert!(
        !namespaces
            .get(&chosen)
            .await?
            .labels()
            .contains_key(labels::MANAGED_BY)
    );
    namespaces
        .patch(
            &chosen,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {labels::ADOPTABLE: "true"}}})),
        )
        .await?;
    let r = exec
        .apply(&t2.work(target::namespace(&t2.id), 2, WorkSpec::NamespaceEnsure(nw)))
        .await?;
    assert_applied(&r, "adopt");
    assert_eq!(r.namespace, chosen);
    let got = namespaces.get(&chosen).await?;
    assert_eq!(
        got.labels().get(labels::ADOPTED).map(String::as_str),
        Some("true")
    );
    // Issue 12: a namespace an existing OpenClaw installation made carries
    // the OpenClaw Compute Driver's own markers; the spoke takes it over
    // under its legacy name once an operator consents, not before.
    let t3 = Tenant::new("openclaw");
    let made_by_openclaw = format!(
        "oce-{}-{}",
        t3.tenant,
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    namespaces
        .create(
            &PostParams::default(),
            &typed(&serde_json::json!({"metadata": {"name": made_by_openclaw,
                "labels": {labels::openclaw::TENANT: t3.tenant,
                           labels::MANAGED_BY: labels::openclaw::MANAGER},
                "annotations": {labels::openclaw::NAMESPACE_ID_ANNOTATION: t3.id}}}))?,
        )
        .await?;
    let r = exec.apply(&t3.ensure(1)).await?;
    assert!(
        !r.applied && r.reason.contains("not marked for adoption"),
        "{}",
        r.reason
    );
    namespaces
        .patch(
            &made_by_openclaw,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {labels::ADOPTABLE: "true"}}})),
        )
        .await?;
    let r = exec.apply(&t3.ensure(2)).await?;
    assert_applied(&r, "openclaw takeover");
    assert_eq!(r.namespace, made_by_openclaw, "keeps the driver's name");
    let got = namespaces.get(&made_by_openclaw).await?;
    assert_eq!(
        got.labels().get(labels::TENANT).map(String::as_str),
        Some(t3.tenant.as_str()),
        "clawfed's markers added"
    );
    exec.shutdown();
    for n in [legacy, t.ns.clone(), chosen, made_by_openclaw] {
        let _ = namespaces.delete(&n, &DeleteParams::background()).await;
    }
    Ok(())
}

#[tokio::test]
async fn spoke_service_account_is_denied_outside_its_grant() -> Result<()> {
    let e = SpokeEnv::exec_a().await?;
    let admin = e.cluster.admin();
    let sa = e.spoke.clone();
    let other = e.cluster.create_namespace("not-clawfed").await?;
    // Tenant objects outside data-plane namespaces: forbidden.
    let err = Api::<Secret>::all(sa.clone())
        .list(&ListParams::default())
        .await
        .expect_err("secrets cluster-wide");
    assert!(is_forbidden(&err), "{err}");
    // Pods anywhere are listed and watched for capacity reports (issue 33),
    // read only: never read one by one, written or deleted outside a
    // data-plane namespace.
    Api::<Pod>::all(sa.clone())
        .list(&ListParams::default().limit(1))
        .await?;
    let kube_system = Api::<Pod>::namespaced(sa.clone(), "kube-system");
    let err = kube_system
        .get("any")
        .await
        .expect_err("a pod in kube-system");
    assert!(is_forbidden(&err), "{err}");
    let err = kube_system
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect_err("deleting pods in kube-system");
    assert!(is_forbidden(&err), "{err}");
    let err = Api::<Deployment>::namespaced(sa.clone(), &other.name)
        .list(&ListParams::default())
        .await
        .expect_err("deployments elsewhere");
    assert!(is_forbidden(&err), "{err}");
    let err = Api::<ConfigMap>::namespaced(sa.clone(), &other.name)
        .create(
            &PostParams::default(),
            &typed(&serde_json::json!({"metadata": {"name": "x"}}))?,
        )
        .await
        .expect_err("configmap elsewhere");
    assert!(is_forbidden(&err), "{err}");
    // No RBAC escalation: no ClusterRoles, no bindings to other roles.
    let err = Api::<ClusterRole>::all(sa.clone())
        .create(
            &PostParams::default(),
            &typed(&serde_json::json!({"metadata": {"name": "clawfed-evil"}, "rules": []}))?,
        )
        .await
        .expect_err("create clusterrole");
    assert!(is_forbidden(&err), "{err}");
    let admin_binding: RoleBinding = typed(&serde_json::json!({
        "metadata": {"name": "evil", "namespace": other.name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": SPOKE_SA, "namespace": SPOKE_NS}]
    }))?;
    let err = Api::<RoleBinding>::namespaced(sa.clone(), &other.name)
        .create(&PostParams::default(), &admin_binding)
        .await
        .expect_err("bind cluster-admin");
    assert!(is_forbidden(&err), "{err}");
    // Its own tenant role only where clawfed manages the namespace
    // (admission policy; it takes a moment to load after install).
    let mut own = admin_binding.clone();
    own.role_ref.name = "clawfed-spoke-tenant".into();
    own.metadata.name = Some("clawfed-spoke".into());
    let rbs = Api::<RoleBinding>::namespaced(sa.clone(), &other.name);
    eventually(
        WAIT,
        "tenant binding refused in an unmanaged namespace",
        || async {
            match rbs.create(&PostParams::default(), &own).await {
                Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => Ok(Some(())),
                Err(e) => Err(e.into()),
                Ok(_) => {
                    // Policy not loaded yet: remove and try again.
                    Api::<RoleBinding>::namespaced(admin.clone(), &other.name)
                        .delete("clawfed-spoke", &DeleteParams::default())
                        .await?;
                    Ok(None)
                }
            }
        },
    )
    .await?;
    let err = Api::<Namespace>::all(sa.clone())
        .delete(&other.name, &DeleteParams::default())
        .await
        .expect_err("delete unmanaged namespace");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403 || s.code == 422),
        "{err}"
    );
    // Other CRDs: forbidden.
    let err = Api::<CustomResourceDefinition>::all(sa.clone())
        .get("httproutes.gateway.networking.k8s.io")
        .await
        .expect_err("other CRD");
    assert!(is_forbidden(&err), "{err}");
    let err = Api::<CustomResourceDefinition>::all(sa.clone())
        .list(&ListParams::default())
        .await
        .expect_err("list CRDs");
    assert!(is_forbidden(&err), "{err}");
    other.delete().await
}

/// Issue 12: an adopted (operator-named) namespace longer than a
/// provider's workspace limit is refused for provider work, naming the
/// limit, and nothing of the provider is created; ordinary work there is
/// unaffected.
#[tokio::test]
async fn provider_work_in_a_namespace_longer_than_its_workspace_limit_is_refused() -> Result<()> {
    use clawfed_spoke::provider::crd::WORKSPACE_NAMESPACE_LIMIT;
    let e = SpokeEnv::exec_a().await?;
    let admin = e.cluster.admin();
    let (tx, _reports) = Reports::new();
    let driver = Arc::new(CrdSandboxDriver::new(e.spoke.clone()));
    let exec = Executor::with_driver(e.spoke.clone(), config(), tx, driver);
    let t = Tenant::new("long");
    // Unique per run (a namespace of an earlier run may still terminate).
    let id = uuid::Uuid::new_v4().simple().to_string();
    let chosen = format!(
        "ops-{id}-{}",
        "a".repeat(WORKSPACE_NAMESPACE_LIMIT.saturating_sub("ops--".len() + id.len()) + 1)
    );
    assert!(chosen.len() > WORKSPACE_NAMESPACE_LIMIT);
    let namespaces = Api::<Namespace>::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &typed(&serde_json::json!({"metadata": {"name": chosen,
                "labels": {labels::ADOPTABLE: "true"}}}))?,
        )
        .await?;
    let mut nw = t.namespace_work();
    nw.adopt = Some(chosen.clone());
    let r = exec
        .apply(&t.work(target::namespace(&t.id), 1, WorkSpec::NamespaceEnsure(nw)))
        .await?;
    assert_applied(&r, "adopt the long namespace");
    let mut h = t.harness("boxed", 1);
    h.data_plane_namespace = chosen.clone();
    h.execution = ExecutionMode::Provider;
    let r = exec.apply(&t.apply(&h, 1)).await?;
    assert!(
        !r.applied && r.reason.contains("workspace limit"),
        "{}",
        r.reason
    );
    let ar: ApiResource = clawfed_spoke::provider::crd::api_resource();
    let crs = Api::<DynamicObject>::namespaced_with(admin.clone(), &chosen, &ar);
    assert!(
        crs.get_opt("boxed-r1-harness").await?.is_none(),
        "no SandboxHarness"
    );
    let mut plain = t.harness("plain", 1);
    plain.data_plane_namespace = chosen.clone();
    assert_applied(&exec.apply(&t.apply(&plain, 1)).await?, "ordinary harness");
    exec.shutdown();
    let _ = namespaces
        .delete(&chosen, &DeleteParams::background())
        .await;
    Ok(())
}

/// Fault run finding 2 (seed 1, `--apiserver`): right after an apiserver
/// restart the spoke's ServiceAccount is refused (403) until the
/// authorizer has synced; a refusal taken as final at once lost a
/// retire for good. A 403 is retried for `forbidden_retry_window` and
/// final only when it persists. The spoke's tenant binding is removed to
/// get a real 403 from the real apiserver.
#[tokio::test]
async fn forbidden_is_retried_for_its_window_then_final() -> Result<()> {
    let e = SpokeEnv::exec_a().await?;
    let admin = e.cluster.admin();
    let t = Tenant::new("forbid");
    let (tx, _reports) = Reports::new();
    let window = Duration::from_secs(3);
    let exec = Executor::new(
        e.spoke.clone(),
        SpokeConfig {
            forbidden_retry_window: window,
            rbac_settle_timeout: Duration::ZERO,
            ..config()
        },
        tx,
    );
    // With no settle time, the ensure's own writes after it binds the
    // spoke in the new namespace may be refused until the authorizer has
    // seen the binding: transient, retried as the link would (it failed
    // .ci/run once when taken as final).
    let ensured = eventually(WAIT, "the first ensure", || async {
        Ok(exec.apply(&t.ensure(1)).await.ok())
    })
    .await?;
    assert_applied(&ensured, "ensure");
    let h = t.harness("held", 1);
    assert_applied(&exec.apply(&t.apply(&h, 1)).await?, "apply");

    // The authorizer now refuses the spoke in the tenant's namespace.
    let bindings = Api::<RoleBinding>::namespaced(admin.clone(), &t.ns);
    for b in bindings.list(&ListParams::default()).await?.items {
        bindings
            .delete(&b.name_any(), &DeleteParams::default())
            .await?;
    }
    let r = t.revision("held", 1, ExecutionMode::Ordinary);
    let first = Instant::now();
    let retire = t.retire(&r, 2);
    let err = exec
        .apply(&retire)
        .await
        .expect_err("a fresh 403 is retried, not a final refusal");
    assert!(
        err.to_string().contains("retrying for up to 3s"),
        "transient with its window named: {err}"
    );
    // Still refused within the window: still retrying (same generation).
    if first.elapsed() < window - Duration::from_millis(500) {
        exec.apply(&retire)
            .await
            .expect_err("refused again inside the window: still retrying");
    }
    // Past the window the refusal is final, and names the 403.
    // (The spoke's window starts at its first answer, a little after `first`.)
    tokio::time::sleep_until((first + window + Duration::from_millis(500)).into()).await;
    let last = exec.apply(&retire).await?;
    assert!(!last.applied && !last.retrying, "final refusal: {last:?}");
    assert!(last.reason.contains("forbidden"), "{}", last.reason);

    // A new generation starts a new window; once the authorizer allows
    // the spoke again (re-ensuring the namespace re-binds it), the retire
    // goes through.
    let again = t.retire(&r, 3);
    exec.apply(&again)
        .await
        .expect_err("a new generation's first 403 is retried again");
    // The ensure re-binds the spoke; with no settle time here, its own
    // next write may still be refused until the authorizer has seen the
    // binding: transient, retried as the link would.
    let ensured = eventually(WAIT, "ensure rebinds", || async {
        Ok(exec.apply(&t.ensure(4)).await.ok())
    })
    .await?;
    assert_applied(&ensured, "ensure rebinds");
    // The authorizer sees the new binding a moment later: meanwhile the
    // retire stays transient (as the link would retry it), then applies.
    let done = eventually(WAIT, "retire after the authorizer allows it", || async {
        Ok(exec.apply(&again).await.ok())
    })
    .await?;
    assert_applied(&done, "retire after the authorizer allows it");
    exec.shutdown();
    t.cleanup(&admin).await;
    Ok(())
}

/// Issue 30, air-gapped clusters: the spoke's own cluster settings reach
/// every data-plane namespace and Harness Pod it applies, as the apiserver
/// stores them: the image from the cluster's mirror (digest kept), the
/// pull Secret and `imagePullSecrets`, the model API proxy in the
/// environment with the cluster's addresses exempt and a NetworkPolicy
/// egress rule to it, and the CA bundle mounted read-only.
#[tokio::test]
async fn an_air_gapped_clusters_settings_reach_namespace_and_harness() -> Result<()> {
    use clawfed_spoke::apply::environment::{self as envt, ClusterEnvironment, WorkloadProxy};
    let e = SpokeEnv::exec_a().await?;
    let admin = e.cluster.admin();
    let t = Tenant::new("airgap");
    let (tx, _reports) = Reports::new();
    let mut cfg = config();
    cfg.cluster = ClusterEnvironment {
        registry_mirrors: vec![
            "registry.invalid=mirror.clawfed.test:5000/mirror"
                .parse()
                .map_err(anyhow::Error::msg)?,
        ],
        pull_credentials: Some(r#"{"auths":{"mirror.clawfed.test:5000":{"auth":"dTpw"}}}"#.into()),
        proxy: Some(WorkloadProxy {
            url: "http://198.18.9.9:3128".into(),
            no_proxy: vec!["models.internal".into()],
        }),
        ca_bundle: Some("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into()),
    };
    let exec = Executor::new(e.spoke.clone(), cfg, tx);
    let result = async {
        assert_applied(&exec.apply(&t.ensure(1)).await?, "namespace.ensure");
        let pull = Api::<Secret>::namespaced(admin.clone(), &t.ns)
            .get(envt::PULL_SECRET)
            .await?;
        assert_eq!(
            pull.type_.as_deref(),
            Some("kubernetes.io/dockerconfigjson")
        );
        Api::<ConfigMap>::namespaced(admin.clone(), &t.ns)
            .get(envt::CA_BUNDLE)
            .await?;
        let flows = Api::<NetworkPolicy>::namespaced(admin.clone(), &t.ns)
            .get("clawfed-harness-flows")
            .await?;
        let to_proxy = flows
            .spec
            .and_then(|s| s.egress)
            .unwrap_or_default()
            .iter()
            .any(|r| {
                r.to.iter()
                    .flatten()
                    .any(|p| p.ip_block.as_ref().map(|b| b.cidr.as_str()) == Some("198.18.9.9/32"))
                    && r.ports.iter().flatten().any(|p| {
                        p.port
                            == Some(
                                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(
                                    3128,
                                ),
                            )
                    })
            });
        anyhow::ensure!(to_proxy, "Harness egress to the proxy");

        let h = t.harness("airgap", 1);
        assert_applied(&exec.apply(&t.apply(&h, 1)).await?, "harness.apply");
        let d = Api::<Deployment>::namespaced(admin.clone(), &t.ns)
            .get("airgap-r1-harness")
            .await?;
        let pod = d.spec.template.spec.context("pod")?;
        let digest = h.image.split_once('@').map(|(_, d)| d).context("digest")?;
        assert_eq!(
            pod.containers[0].image.clone().unwrap_or_default(),
            format!("mirror.clawfed.test:5000/mirror/openclaw@{digest}"),
            "from the mirror, digest kept"
        );
        assert_eq!(
            pod.image_pull_secrets.unwrap_or_default()[0].name,
            envt::PULL_SECRET.to_string()
        );
        let env: BTreeMap<String, String> = pod.containers[0]
            .env
            .iter()
            .flatten()
            .filter_map(|v| Some((v.name.clone(), v.value.clone()?)))
            .collect();
        assert_eq!(
            env.get("HTTPS_PROXY").map(String::as_str),
            Some("http://198.18.9.9:3128")
        );
        assert!(
            env.get("NO_PROXY")
                .is_some_and(|n| n.contains(".svc") && n.contains("models.internal")),
            "{env:?}"
        );
        assert_eq!(
            env.get("NODE_EXTRA_CA_CERTS").map(String::as_str),
            Some("/etc/clawfed/ca-bundle/ca.crt")
        );
        anyhow::ensure!(
            pod.containers[0]
                .volume_mounts
                .iter()
                .flatten()
                .any(|m| m.mount_path == envt::CA_BUNDLE_DIR && m.read_only == Some(true)),
            "the CA bundle mounted read-only"
        );
        Ok(())
    }
    .await;
    exec.shutdown();
    t.cleanup(&admin).await;
    result
}
