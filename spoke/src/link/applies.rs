//! The applies in flight on a session ([`Applies`]: one per target, up to
//! the [`ApplyLimit`] at once, the newest generation waiting per target),
//! their acks, and the bounded drain when a session closes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::spoke_message;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::{ApplyError, Link, WorkApplier};
use crate::pressure::ApplyLimit;

/// How long a closing session waits for applies in flight to finish (and
/// be acked) before it goes.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

type AppliedItem = (pb::Work, Result<pb::WorkResult, ApplyError>, Duration);

/// Applies in flight on a session: one per target at a time, so a target's
/// generations apply in order, and up to the [`ApplyLimit`] targets at
/// once, so one slow Harness does not hold up the others (or the readiness
/// reports behind them), and a throttling apiserver gets fewer.
pub(super) struct Applies {
    limit: Arc<ApplyLimit>,
    pub(super) running: tokio::task::JoinSet<AppliedItem>,
    busy: std::collections::HashSet<String>,
    /// The newest item waiting per target.
    queued: BTreeMap<String, pb::Work>,
}

/// Of two items of one target, the one to apply and the one it supersedes
/// (never applied, to be acked: work is level-based, so the newer
/// generation carries the other's intent). The same item delivered twice
/// supersedes nothing.
pub(super) fn supersede(kept: pb::Work, incoming: pb::Work) -> (pb::Work, Option<pb::Work>) {
    if kept.generation > incoming.generation {
        (kept, Some(incoming))
    } else if kept.sequence == incoming.sequence {
        (incoming, None)
    } else {
        (incoming, Some(kept))
    }
}

/// Keeps the newest generation waiting per target; returns the one left
/// behind ([`supersede`]).
pub(super) fn enqueue(queued: &mut BTreeMap<String, pb::Work>, work: pb::Work) -> Option<pb::Work> {
    let (kept, dropped) = match queued.remove(&work.target) {
        Some(waiting) => supersede(waiting, work),
        None => (work, None),
    };
    queued.insert(kept.target.clone(), kept);
    dropped
}

/// The ack of `work`: applied, or superseded before it was applied.
pub(super) fn ack(work: &pb::Work) -> pb::SpokeMessage {
    pb::SpokeMessage {
        body: Some(spoke_message::Body::Ack(pb::Ack {
            sequence: work.sequence,
            target: work.target.clone(),
            generation: work.generation,
        })),
    }
}

/// The ack of an item a newer generation of its target superseded.
pub(super) fn superseded_ack(work: &pb::Work) -> pb::SpokeMessage {
    tracing::debug!(target = %work.target, generation = work.generation, sequence = work.sequence, "link.superseded_acked");
    ack(work)
}

impl Applies {
    pub(super) fn new(limit: Arc<ApplyLimit>) -> Self {
        Self {
            limit,
            running: tokio::task::JoinSet::new(),
            busy: Default::default(),
            queued: BTreeMap::new(),
        }
    }

    /// Starts `work`, or queues it behind its target. Returns the item it
    /// supersedes without applying it (an older generation of the target
    /// that was waiting, or `work` itself when a newer one waits): the
    /// caller acks it, or the hub would keep a send slot for it until the
    /// session ends.
    pub(super) fn submit(
        &mut self,
        applier: &Arc<dyn WorkApplier>,
        work: pb::Work,
    ) -> Option<pb::Work> {
        if self.busy.contains(&work.target) || self.busy.len() >= self.limit.current() {
            return enqueue(&mut self.queued, work);
        }
        self.start(applier, work);
        None
    }

    fn start(&mut self, applier: &Arc<dyn WorkApplier>, work: pb::Work) {
        self.busy.insert(work.target.clone());
        let applier = applier.clone();
        let span = tracing::info_span!(
            "link.apply",
            target = %work.target,
            generation = work.generation,
            sequence = work.sequence
        );
        self.running.spawn(
            async move {
                let started = Instant::now();
                let result = applier.apply(&work).await;
                (work, result, started.elapsed())
            }
            .instrument(span),
        );
    }

    /// `target` finished: start what waits, targets not already running.
    pub(super) fn finished(&mut self, applier: &Arc<dyn WorkApplier>, target: &str) {
        self.busy.remove(target);
        let room = self.limit.current().saturating_sub(self.busy.len());
        let next: Vec<String> = self
            .queued
            .keys()
            .filter(|t| !self.busy.contains(*t))
            .take(room)
            .cloned()
            .collect();
        for t in next {
            if let Some(work) = self.queued.remove(&t) {
                self.start(applier, work);
            }
        }
    }
}

impl Link {
    /// Waits (bounded) for applies in flight and acks those that finish.
    pub(super) async fn drain(
        &self,
        applies: &mut Applies,
        out: &mpsc::Sender<pb::SpokeMessage>,
        applied: &mut HashMap<String, i64>,
    ) {
        let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
        while let Ok(Some(joined)) =
            tokio::time::timeout_at(deadline, applies.running.join_next()).await
        {
            if let Ok((work, result, elapsed)) = joined {
                self.finish_apply(work, result, elapsed, out, applied).await;
            }
        }
    }

    /// Acks and reports an applied item. Returns the item back when the
    /// apply failed (it is retried, never acked).
    pub(super) async fn finish_apply(
        &self,
        work: pb::Work,
        result: Result<pb::WorkResult, ApplyError>,
        elapsed: Duration,
        out: &mpsc::Sender<pb::SpokeMessage>,
        applied: &mut HashMap<String, i64>,
    ) -> Option<pb::Work> {
        let send = |body| pb::SpokeMessage { body: Some(body) };
        match result {
            Ok(result) => {
                self.metrics.work_applied.inc();
                let entry = applied.entry(work.target.clone()).or_insert(0);
                *entry = (*entry).max(work.generation);
                tracing::info!(target = %work.target, generation = work.generation, sequence = work.sequence, durationMs = elapsed.as_millis() as u64, "link.applied");
                let _ = out.send(ack(&work)).await;
                if !self.applier.reports_results() {
                    let report = pb::Report {
                        target: work.target,
                        generation: work.generation,
                        body: Some(pb::report::Body::WorkResult(result)),
                    };
                    let _ = out.send(send(spoke_message::Body::Report(report))).await;
                }
                None
            }
            Err(e) => {
                // A transient failure: not acked, retried here and
                // re-delivered after a reconnect. Only a refusal (Ok with
                // applied = false) is a result the hub acts on.
                self.metrics.work_failed.inc();
                tracing::warn!(target = %work.target, generation = work.generation, error = %e, "link.apply_failed");
                Some(work)
            }
        }
    }
}
