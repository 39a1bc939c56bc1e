//! What a pass records: progress saved by compare-and-swap on the
//! revision's version, phase entries (their times, the readiness deadline,
//! the durations of becoming Active), and failure.

use chrono::Utc;
use clawfed_proto::work::{self as wire, generation};

use super::facts::Gathered;
use super::spec::{harness_target, revision_work};
use super::{Flow, PassError, PassResult, Rollout, save_err};
use crate::model::{AgentRevision, Namespace, RevisionPhase};
use crate::store::Store;

impl Rollout {
    /// Saves progress, phase and reason (compare-and-swap).
    pub(super) async fn save(
        &self,
        store: &dyn Store,
        rev: &mut AgentRevision,
    ) -> Result<(), PassError> {
        let saved = store
            .update_revision(
                &rev.id,
                rev.version,
                rev.phase,
                rev.reason.as_deref(),
                &rev.progress,
            )
            .await
            .map_err(save_err)?;
        rev.version = saved.version;
        Ok(())
    }

    pub(super) async fn enter(
        &self,
        store: &dyn Store,
        rev: &mut AgentRevision,
        phase: RevisionPhase,
        reason: Option<String>,
    ) -> Result<(), PassError> {
        // Phase times and deadlines are judged by any replica: the
        // database's clock.
        let now = store.now();
        rev.progress.phases.insert(phase.as_str().to_owned(), now);
        if phase == RevisionPhase::WaitingReady {
            rev.progress.ready_deadline = Some(
                now + chrono::Duration::from_std(self.config.ready_deadline).unwrap_or_default(),
            );
        }
        if phase == RevisionPhase::Active {
            record_durations(rev, now);
        }
        rev.phase = phase;
        rev.reason = reason;
        self.save(store, rev).await
    }

    /// Fails the revision; preparation errors run the workload cleanup
    /// hooks (the Harness is stopped, its storage kept) when its Harness
    /// work was ever sent.
    pub(super) async fn fail(
        &self,
        store: &dyn Store,
        ns: &Namespace,
        g: &Gathered,
        mut rev: AgentRevision,
        reason: String,
    ) -> PassResult {
        tracing::error!(revision = %rev.id, agent = %rev.agent, number = rev.number, reason = %reason, "pipeline.failed");
        if let Some(cid) = &g.cluster_id
            && g.facts.harness_sent
        {
            let work =
                wire::WorkSpec::HarnessStop(revision_work(ns, &g.data_plane_namespace, &rev));
            self.send(
                cid,
                &harness_target(ns, &rev),
                generation::HARNESS_STOP,
                &work,
            )
            .await?;
        }
        let created = rev.created_at;
        self.enter(store, &mut rev, RevisionPhase::Failed, Some(reason))
            .await?;
        self.wake_drain(store, &rev).await?;
        self.observe("deploy", "failed", created);
        Ok(Flow::Settled)
    }

    pub(super) fn log_completed(&self, rev: &AgentRevision) {
        let d = &rev.progress.durations_ms;
        let get = |k: &str| d.get(k).copied().unwrap_or(0);
        tracing::info!(
            revision = %rev.id,
            agent = %rev.agent,
            number = rev.number,
            prepareMs = get("prepareMs"),
            readinessWaitMs = get("readinessWaitMs"),
            activationMs = get("activationMs"),
            elapsedMs = get("elapsedMs"),
            "pipeline.active"
        );
    }
}

/// Phase durations of a revision becoming Active.
fn record_durations(rev: &mut AgentRevision, now: chrono::DateTime<Utc>) {
    let at = |p: RevisionPhase| rev.progress.phases.get(p.as_str()).copied();
    let span = |a: Option<chrono::DateTime<Utc>>, b: Option<chrono::DateTime<Utc>>| {
        a.zip(b).map(|(a, b)| (b - a).num_milliseconds())
    };
    let spans = [
        (
            "prepareMs",
            span(
                at(RevisionPhase::Preparing),
                at(RevisionPhase::WaitingReady),
            ),
        ),
        (
            "readinessWaitMs",
            span(at(RevisionPhase::WaitingReady), rev.progress.activated_at),
        ),
        ("activationMs", span(rev.progress.activated_at, Some(now))),
        ("elapsedMs", span(Some(rev.created_at), Some(now))),
    ];
    for (key, v) in spans {
        if let Some(v) = v {
            rev.progress.durations_ms.insert(key.to_owned(), v);
        }
    }
}
