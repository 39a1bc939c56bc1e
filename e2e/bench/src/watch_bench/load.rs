//! The spokes and the load: an applier that acks everything, and the
//! generator of readiness observations fed into the spokes' links.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clawfed_proto::link::v1 as pb;
use clawfed_spoke::link::{ApplyError, WorkApplier};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{MARK, unix_micros};

/// Acks whatever the hub sends (the targets' outbox items).
pub(super) struct AckAll;

#[async_trait]
impl WorkApplier for AckAll {
    async fn apply(&self, work: &pb::Work) -> Result<pb::WorkResult, ApplyError> {
        Ok(pb::WorkResult {
            applied: true,
            reason: String::new(),
            kind: work.kind.clone(),
            namespace: String::new(),
            retrying: false,
        })
    }

    async fn applied(&self) -> Result<std::collections::HashMap<String, i64>, ApplyError> {
        Ok(Default::default())
    }
}

/// Sends `rate` readiness observations a second, round robin over the
/// targets (target i goes through spoke i % spokes), until `stop`.
pub(super) async fn generate(
    rate: u64,
    targets: Vec<String>,
    reports: Vec<mpsc::Sender<pb::Report>>,
    sent: Arc<AtomicU64>,
    stop: CancellationToken,
) {
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut n: u64 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => return,
        }
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        while n < due {
            let t = (n % targets.len() as u64) as usize;
            let ready = (n / targets.len() as u64).is_multiple_of(2);
            let report = pb::Report {
                target: targets[t].clone(),
                generation: 1,
                body: Some(pb::report::Body::Readiness(pb::ReadinessObservation {
                    revision_id: format!("rev-{t}"),
                    ready,
                    live_candidates: 1,
                    ready_candidates: u32::from(ready),
                    reason: format!("{MARK}{}", unix_micros()),
                    ..Default::default()
                })),
            };
            if reports[t % reports.len()].send(report).await.is_err() {
                return;
            }
            n += 1;
            sent.store(n, Ordering::Relaxed);
        }
    }
}
