//! [`Executor::apply`]: the generation gate in front of the work (an older
//! generation is superseded, one already settled otherwise is answered
//! without running it again), the dispatch by work kind, and the result:
//! remembered, reported, and a 403 held as transient for a while.

use std::sync::PoisonError;
use std::time::Instant;

use clawfed_proto::link::v1::{Report, Work, WorkResult, report};
use clawfed_proto::work::{WorkKind, WorkSpec};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::outcome::{Done, Failure, refuse};
use super::{ExecError, Executor};
use crate::cleanup::{AGENT_DELETED, RETIRE, STOP};

/// What the generation gate lets through, from the generation recorded
/// for the target and the work's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// A newer generation was applied: answered applied, not run.
    Superseded { have: i64 },
    /// A Harness apply at the recorded generation: its durable record may
    /// say it ended otherwise (answered without running it again).
    SettledOtherwise,
    /// Run it (an older or equal generation of other work runs again:
    /// applying is level-based).
    Run,
}

/// The generation gate (pure): `recorded` is the generation last applied
/// to the target, `generation` and `kind` the work's.
fn generation_gate(recorded: Option<i64>, generation: i64, kind: &str) -> Gate {
    match recorded {
        Some(have) if have > generation => Gate::Superseded { have },
        Some(have) if have == generation && kind == WorkKind::HarnessApply.as_str() => {
            Gate::SettledOtherwise
        }
        _ => Gate::Run,
    }
}

impl Executor {
    /// Applies one piece of work (see the module docs for the contract).
    pub async fn apply(&self, work: &Work) -> Result<WorkResult, ExecError> {
        self.ensure_rebuilt().await?;
        let _guard = self.locks.lock(&work.target).await;
        let spec = match WorkSpec::decode(&work.kind, &work.spec) {
            Ok(s) => s,
            Err(e) => return self.finish(work, Err(refuse(e.to_string()))).await,
        };
        let recorded = self.recorded_lock().get(&work.target).map(|(_, g)| *g);
        match generation_gate(recorded, work.generation, &work.kind) {
            Gate::Superseded { have } => {
                tracing::info!(target_ = %work.target, have, got = work.generation, "spoke.work.superseded");
                return Ok(WorkResult {
                    applied: true,
                    reason: format!("superseded: generation {have} already applied"),
                    kind: work.kind.clone(),
                    namespace: String::new(),
                    retrying: false,
                });
            }
            Gate::SettledOtherwise => {
                if let Some(settled) = self.settled_otherwise(work).await {
                    return Ok(settled);
                }
            }
            Gate::Run => {}
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
    async fn settled_otherwise(&self, work: &Work) -> Option<WorkResult> {
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
                self.forbidden_runs
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .succeeded(&work.target);
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
    /// target's work has been refused for the spoke's forbidden retry
    /// window: a restarted apiserver refuses until its authorizer has
    /// synced, and a refusal taken as final then loses the work for good
    /// (the rule: [`super::forbidden::ForbiddenRuns`]).
    fn hold_forbidden(&self, work: &Work, f: Failure) -> Failure {
        self.forbidden_runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .failed(
                &work.target,
                work.generation,
                f,
                Instant::now(),
                self.config.forbidden_retry_window,
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generation_gate() {
        let apply = WorkKind::HarnessApply.as_str();
        let stop = WorkKind::HarnessStop.as_str();
        assert_eq!(generation_gate(None, 1, apply), Gate::Run);
        assert_eq!(generation_gate(Some(1), 2, apply), Gate::Run);
        assert_eq!(
            generation_gate(Some(3), 2, stop),
            Gate::Superseded { have: 3 }
        );
        assert_eq!(generation_gate(Some(2), 2, apply), Gate::SettledOtherwise);
        assert_eq!(generation_gate(Some(2), 2, stop), Gate::Run);
    }
}
