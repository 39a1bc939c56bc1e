//! Outbox delivery on a session: unacked items in sequence order, at most
//! `send_window` on the wire, Harness credentials opened only to be sent.

use std::time::Instant;

use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::hub_message;
use tonic::Status;

use super::{SENT_TARGETS_MAX, Session};

impl Session {
    /// Sends unacked items after the last one sent, up to the window.
    pub(super) async fn dispatch(&mut self) -> Result<(), Status> {
        let room = self
            .state
            .config
            .send_window
            .saturating_sub(self.in_flight.len());
        if room == 0 {
            // Whatever is queued waits for an ack to make room.
            self.maybe_pending = true;
            return Ok(());
        }
        self.state.metrics.outbox_reads.inc();
        let items = self
            .state
            .store
            .outbox_pending(&self.cluster.id, self.last_sent, room as i64)
            .await
            .map_err(Self::store_err)?;
        self.maybe_pending = items.len() >= room;
        for item in items {
            let Some(spec) = self.unsealed_spec(&item) else {
                // Cannot be sent as stored (see `unsealed_spec`): skipped,
                // unacked; the revision fails at its phase deadline.
                self.last_sent = item.sequence;
                continue;
            };
            let work = pb::Work {
                sequence: item.sequence as u64,
                target: item.target.clone(),
                generation: item.generation,
                spec,
                kind: item.kind,
            };
            if !self.send(hub_message::Body::Work(work)).await {
                return Err(Status::cancelled("spoke went away"));
            }
            self.last_sent = item.sequence;
            if self.sent_targets.len() >= SENT_TARGETS_MAX {
                self.sent_targets.clear();
            }
            self.sent_targets.insert(item.target.clone());
            self.in_flight.insert(
                item.sequence,
                (Instant::now(), item.target, item.generation),
            );
        }
        Ok(())
    }

    /// The spec of `item` as it goes over the link: the credential values
    /// of Harness work opened (they are sealed in the outbox). `None` when
    /// they do not open (the secrets key changed since it was queued);
    /// logged without any value.
    fn unsealed_spec(&self, item: &crate::store::OutboxItem) -> Option<Vec<u8>> {
        if item.kind != clawfed_proto::work::WorkKind::HarnessApply.as_str() {
            return Some(item.spec.clone().into_bytes());
        }
        let opened = serde_json::from_str::<serde_json::Value>(&item.spec)
            .map_err(|e| e.to_string())
            .and_then(|mut spec| {
                self.state
                    .secrets
                    .open_work_credentials(&self.cluster.id, &item.target, &mut spec)
                    .map_err(|e| e.to_string())?;
                Ok(spec.to_string().into_bytes())
            });
        match opened {
            Ok(bytes) => Some(bytes),
            Err(error) => {
                tracing::error!(cluster = %self.cluster.name, target = %item.target, sequence = item.sequence, %error, "link.work_unsendable");
                None
            }
        }
    }
}
