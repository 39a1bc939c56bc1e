//! What the spoke sends on its stream: acks, reports (work results,
//! readiness, drift), heartbeats and diagnose answers.

use std::time::Instant;

use chrono::Utc;
use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::{hub_message, report, spoke_message};
use tonic::Status;

use super::{IN_FLIGHT_MAX_AGE, LAST_SEEN_WRITE_INTERVAL, Session, aged_out};
use crate::model::ConnectionState;

impl Session {
    pub(super) async fn on_message(&mut self, message: pb::SpokeMessage) -> Result<(), Status> {
        let id = self.cluster.id.clone();
        match message.body {
            Some(spoke_message::Body::Ack(ack)) => {
                // The acked state changes: compare the next digest again.
                self.digest.matched = None;
                let sequence = i64::try_from(ack.sequence)
                    .map_err(|_| Status::invalid_argument("ack.sequence out of range"))?;
                if let Some((sent, _, _)) = self.in_flight.remove(&sequence) {
                    self.state
                        .metrics
                        .ack_latency
                        .observe(sent.elapsed().as_secs_f64());
                }
                let acked = self
                    .state
                    .store
                    .outbox_ack(&id, sequence, &ack.target, ack.generation, Utc::now())
                    .await
                    .map_err(Self::store_err)?;
                if !acked {
                    // A duplicate ack, or one for an item a newer generation
                    // superseded, is harmless; an ack for work this cluster
                    // was never sent is a protocol violation.
                    let known = self
                        .state
                        .store
                        .outbox_latest_generation(&id, &ack.target)
                        .await
                        .map_err(Self::store_err)?;
                    if known.is_none() {
                        tracing::warn!(cluster = %self.cluster.name, target = %ack.target, "link.ack_for_foreign_work");
                        return Err(Status::permission_denied(format!(
                            "ack for work {:?} that was never sent to this cluster",
                            ack.target
                        )));
                    }
                }
                if self.maybe_pending {
                    self.dispatch().await
                } else {
                    Ok(())
                }
            }
            Some(spoke_message::Body::Report(report)) => self.on_report(report).await,
            Some(spoke_message::Body::Heartbeat(beat)) => {
                self.on_lease(&beat).await?;
                if self.last_seen_written.elapsed() >= LAST_SEEN_WRITE_INTERVAL {
                    self.last_seen_written = Instant::now();
                    self.state
                        .store
                        .set_connection_state(&id, ConnectionState::Online, Utc::now(), None)
                        .await
                        .map_err(Self::store_err)?;
                }
                let aged = aged_out(&self.in_flight, Instant::now(), IN_FLIGHT_MAX_AGE);
                if !aged.is_empty() {
                    tracing::warn!(cluster = %self.cluster.name, items = aged.len(), "link.in_flight_aged_out");
                    for sequence in &aged {
                        self.in_flight.remove(sequence);
                    }
                    self.dispatch().await?;
                }
                self.compare_digest(&beat.applied_digest).await
            }
            Some(spoke_message::Body::DiagnoseResult(result)) => {
                // A late answer (its request timed out) or one for another
                // cluster's request is dropped, never handed over.
                if !self.state.diagnose.deliver(&id, result) {
                    tracing::debug!(cluster = %self.cluster.name, "link.diagnose_result_dropped");
                }
                Ok(())
            }
            Some(spoke_message::Body::Capacity(report)) => {
                let capacity = clawfed_proto::capacity::Capacity::from(&report);
                tracing::debug!(cluster = %self.cluster.name, nodes = capacity.nodes, free = %capacity.free, "link.capacity");
                self.state
                    .store
                    .set_cluster_capacity(&id, capacity, Utc::now())
                    .await
                    .map_err(Self::store_err)
            }
            Some(spoke_message::Body::Hello(_)) => Err(Status::invalid_argument(
                "Hello may only be the first message of a stream",
            )),
            None => Err(Status::invalid_argument("empty SpokeMessage")),
        }
    }

    /// The heartbeat's execution lease fields (`clawfed_proto::failover`):
    /// a renewal is recorded, on the database's clock, before it is
    /// answered; a change in the fenced targets is recorded.
    async fn on_lease(&mut self, beat: &pb::Heartbeat) -> Result<(), Status> {
        let id = self.cluster.id.clone();
        if beat.renew_sequence != 0 {
            let at = self.state.store.now();
            self.state
                .store
                .renew_execution_lease(&id, at)
                .await
                .map_err(Self::store_err)?;
            let answer = pb::Heartbeat {
                unix_millis: at.timestamp_millis() as u64,
                renewed_sequence: beat.renew_sequence,
                ..Default::default()
            };
            if !self.send(hub_message::Body::Heartbeat(answer)).await {
                return Err(Status::unavailable("session closed"));
            }
        }
        if self.fenced.as_ref() != Some(&beat.fenced) {
            if !beat.fenced.is_empty() {
                tracing::warn!(cluster = %self.cluster.name, fenced = beat.fenced.len(), "link.fenced_reported");
            }
            self.state
                .store
                .set_fenced_targets(&id, &beat.fenced)
                .await
                .map_err(Self::store_err)?;
            self.fenced = Some(beat.fenced.clone());
        }
        Ok(())
    }

    async fn on_report(&mut self, report: pb::Report) -> Result<(), Status> {
        let id = self.cluster.id.clone();
        let known = self.sent_targets.contains(&report.target)
            || self
                .state
                .store
                .outbox_knows_target(&id, &report.target)
                .await
                .map_err(Self::store_err)?;
        if !known {
            let foreign = self
                .state
                .store
                .outbox_target_exists(&report.target)
                .await
                .map_err(Self::store_err)?;
            if foreign {
                // Another cluster's work: an attempt to speak for it.
                tracing::warn!(cluster = %self.cluster.name, target = %report.target, "link.report_for_foreign_work");
                return Err(Status::permission_denied(format!(
                    "report on work {:?} that was never sent to this cluster",
                    report.target
                )));
            }
            // Work no hub cluster was ever sent (objects a spoke found in its
            // cluster from before this enrollment): dropped, never stored.
            tracing::debug!(cluster = %self.cluster.name, target = %report.target, "link.report_for_unknown_target_dropped");
            return Ok(());
        }
        tracing::debug!(cluster = %self.cluster.name, target = %report.target, generation = report.generation, "link.report");
        let to_json = |v: serde_json::Result<serde_json::Value>| {
            v.map_err(|e| Status::internal(format!("encoding report: {e}")))
        };
        let resend = matches!(&report.body, Some(report::Body::Drift(d)) if d.resend);
        let (kind, body) = match report.body {
            Some(report::Body::WorkResult(r)) => (
                crate::link::report::WORK_RESULT,
                to_json(serde_json::to_value(
                    crate::link::report::WorkResultReport::from(r),
                ))?,
            ),
            Some(report::Body::Readiness(r)) => (
                crate::link::report::READINESS,
                to_json(serde_json::to_value(
                    crate::link::report::ReadinessReport::from(r),
                ))?,
            ),
            Some(report::Body::Drift(r)) => (
                crate::link::report::DRIFT,
                to_json(serde_json::to_value(
                    crate::link::report::DriftReport::from(r),
                ))?,
            ),
            None => return Err(Status::invalid_argument("report.body: required")),
        };
        self.state
            .store
            .put_report(
                &id,
                &report.target,
                kind,
                report.generation,
                &body,
                Utc::now(),
            )
            .await
            .map_err(Self::store_err)?;
        if let Some(event) =
            crate::link::report::watch_event(&self.cluster.name, &report.target, kind, &body)
        {
            // Right after the report (it goes through the group commit,
            // which has no room for an event): a watcher may see the
            // verdict a moment after it is stored, never before.
            if let Err(e) = self.state.store.append_event(&event).await {
                tracing::warn!(cluster = %self.cluster.name, error = %e, "link.watch_event_failed");
            }
        }
        if let Some(listener) = &self.state.listener {
            listener.on_report(&id, &report.target, kind).await;
        }
        if resend {
            self.resend_on_request(&report.target).await?;
        }
        Ok(())
    }

    /// The spoke asked for `target`'s latest work again (drift it cannot
    /// restore alone): queued once more at its acked generation, unless a
    /// copy is still unacked. The spoke's per-object budget bounds how often
    /// it asks.
    async fn resend_on_request(&mut self, target: &str) -> Result<(), Status> {
        let resent = self
            .state
            .store
            .outbox_resend(&self.cluster.id, &[target.to_string()])
            .await
            .map_err(Self::store_err)?;
        tracing::info!(cluster = %self.cluster.name, target = %target, resent = resent.len(), "link.resend_requested");
        if resent.is_empty() {
            return Ok(());
        }
        self.dispatch().await
    }
}
