//! Harness work: `harness.apply` (predecessors stopped first where the
//! runtime is exclusive, readiness tracked, objects written, the record
//! last) and `harness.stop` / `harness.retire` (the record says stopped
//! before the objects go).

use clawfed_proto::link::v1::Work;
use clawfed_proto::work::{ExecutionMode, HarnessWork, RevisionWork, WorkKind, WorkSpec};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret, Service, ServiceAccount};
use kube::Api;

use super::Executor;
use super::ops::RevisionOps;
use super::outcome::{Done, Failure, refuse};
use crate::apply::{create_if_absent, harness, ssa};
use crate::cleanup::{PREPARATION_FAILED, RevisionStep, STOP, run_plan};
use crate::provider::HarnessContext;
use crate::readiness::observer::StartupCheck;

impl Executor {
    pub(super) async fn apply_harness(
        &self,
        h: &HarnessWork,
        work: &Work,
    ) -> Result<Done, Failure> {
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
                    revision: p.revision,
                    revision_id: p.revision_id.clone(),
                    execution: p.execution,
                    ..h.revision_work()
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
                self.forget_failover(&pt);
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
            let r = h.revision_work();
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
        self.track_failover(&work.target, h);
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

    pub(super) async fn stop_revision(
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
        self.forget_failover(&work.target);
        Ok(Done {
            reason: format!("harness {ns}/{} revision {} {what}", r.agent, r.revision),
            namespace: ns.into(),
        })
    }
}
