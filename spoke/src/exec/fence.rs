//! Fencing (`crate::failover`): the Harnesses of failover-enabled Agents
//! this spoke runs, and their stop when the execution lease lapses.
//!
//! A fence is a `harness.stop` the spoke writes itself: its durable record
//! says stopped (marked fenced) at the generation the hub applied, then the
//! stop plan runs. Drift repair keeps it stopped, a resend of the same
//! apply is answered without starting it again (the record settled that
//! generation otherwise), and only the hub's own stop or retirement
//! replaces the record. The spoke never un-fences: the hub deploys the
//! Agent again as a new revision.

use std::collections::HashMap;
use std::sync::PoisonError;

use clawfed_proto::link::v1::Work;
use clawfed_proto::work::{HarnessWork, RevisionWork, WorkKind, WorkSpec};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::{ExecError, Executor};
use crate::cleanup::{STOP, run_plan};
use crate::drift::desired::{self, Record};
use crate::failover::{FailoverState, Leased};

/// A failover-enabled Harness this spoke applied.
#[derive(Debug, Clone)]
pub(super) struct Fenceable {
    /// `failover.afterSeconds`.
    after_seconds: u32,
    /// When this process applied it.
    since: Option<tokio::time::Instant>,
    revision: RevisionWork,
    /// Fenced: stopped by this spoke, waiting for the hub's stop.
    fenced: bool,
}

/// Failover-enabled Harnesses: work target -> entry.
pub(super) type Fenceables = HashMap<String, Fenceable>;

impl Executor {
    fn fenceables(&self) -> std::sync::MutexGuard<'_, Fenceables> {
        self.fenceables
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `h` was applied as `target`: it runs under the lease if its Agent
    /// has failover.
    pub(super) fn track_failover(&self, target: &str, h: &HarnessWork) {
        let mut all = self.fenceables();
        match h.failover_after_seconds {
            Some(after_seconds) => {
                all.insert(
                    target.to_owned(),
                    Fenceable {
                        after_seconds,
                        since: Some(tokio::time::Instant::now()),
                        revision: h.revision_work(),
                        fenced: false,
                    },
                );
            }
            None => {
                all.remove(target);
            }
        }
    }

    /// The hub stopped or retired `target`: nothing of it runs any more.
    pub(super) fn forget_failover(&self, target: &str) {
        self.fenceables().remove(target);
    }

    /// Rebuilds the entries from the durable records of one namespace.
    pub(super) fn restore_failover(&self, records: &[Record]) {
        let mut all = self.fenceables();
        for r in records {
            let entry = if r.kind == WorkKind::HarnessApply.as_str() {
                serde_json::from_value::<HarnessWork>(r.spec.clone())
                    .ok()
                    .and_then(|h| {
                        Some(Fenceable {
                            after_seconds: h.failover_after_seconds?,
                            since: None,
                            revision: h.revision_work(),
                            fenced: false,
                        })
                    })
            } else if r.fenced {
                serde_json::from_value::<RevisionWork>(r.spec.clone())
                    .ok()
                    .map(|revision| Fenceable {
                        after_seconds: 0,
                        since: None,
                        revision,
                        fenced: true,
                    })
            } else {
                None
            };
            if let Some(e) = entry {
                all.insert(r.target.clone(), e);
            }
        }
    }

    /// The failover-enabled Harnesses, from the cluster's records the
    /// first time (so a restarted spoke fences without a hub).
    pub async fn failover_state(&self) -> Result<FailoverState, ExecError> {
        self.ensure_rebuilt().await?;
        let all = self.fenceables();
        let mut state = FailoverState::default();
        for (target, e) in all.iter() {
            if e.fenced {
                state.fenced.push(target.clone());
            } else {
                state.running.push(Leased {
                    target: target.clone(),
                    after_seconds: e.after_seconds,
                    since: e.since,
                });
            }
        }
        state.running.sort_by(|a, b| a.target.cmp(&b.target));
        state.fenced.sort();
        Ok(state)
    }

    /// Fences `target`: records it stopped (fenced) at its applied
    /// generation, then stops it. Returns false when there was nothing to
    /// fence (not failover-enabled, already fenced, or stopped by the hub
    /// meanwhile).
    pub async fn fence(&self, target: &str) -> Result<bool, ExecError> {
        let _guard = self.locks.lock(target).await;
        let Some(entry) = self.fenceables().get(target).filter(|e| !e.fenced).cloned() else {
            return Ok(false);
        };
        let Some((ns, generation)) = self.recorded(target) else {
            return Ok(false);
        };
        let transient = |reason: String| ExecError::Transient {
            target: target.to_owned(),
            kind: "harness.fence".into(),
            reason,
        };
        let r = entry.revision;
        let stop = Work {
            sequence: 0,
            target: target.to_owned(),
            generation,
            kind: WorkKind::HarnessStop.as_str().into(),
            spec: WorkSpec::HarnessStop(r.clone()).encode(),
        };
        let mut record = desired::from_work(&stop, &ns, false, Some(generation))
            .map_err(|e| transient(e.to_string()))?;
        record.fenced = true;
        let secrets = Api::<Secret>::namespaced(self.client.clone(), &ns);
        desired::record(&secrets, &r.tenant, &record)
            .await
            .map_err(|e| transient(e.to_string()))?;
        run_plan(&super::ops::RevisionOps::new(self, &r), STOP)
            .await
            .map_err(|e| transient(e.to_string()))?;
        self.observer.untrack(&ns, &r.agent, r.revision);
        if let Some(e) = self.fenceables().get_mut(target) {
            e.fenced = true;
        }
        tracing::warn!(target_ = %target, namespace = %ns, agent = %r.agent, revision = r.revision,
            "spoke.failover.fenced");
        Ok(true)
    }
}
