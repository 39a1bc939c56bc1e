//! The hub's side of `Heartbeat.applied_digest`: the spoke's digest of
//! what it applied compared with the acked work of its cluster, and the
//! differing targets resent.

use clawfed_proto::digest::AppliedDigest;
use tonic::Status;

use super::Session;

/// The hub's side of `Heartbeat.applied_digest` for one session.
#[derive(Debug, Default)]
pub(super) struct DigestCheck {
    /// The spoke advertised [`clawfed_proto::digest::CAPABILITY`].
    pub(super) enabled: bool,
    /// The spoke's last digest that matched the hub's records: while it
    /// stays the same and nothing was acked since, nothing is read from
    /// the store.
    pub(super) matched: Option<AppliedDigest>,
    /// A mismatch seen once (spoke's, hub's): acted on only when the next
    /// heartbeat shows the same pair (acks and records cross on the wire).
    pub(super) pending: Option<(AppliedDigest, AppliedDigest)>,
    /// `(target, generation)` resent on this session: each at most once,
    /// so work the spoke refused (acked, never recorded) is not resent in
    /// a loop.
    pub(super) resent: std::collections::HashSet<(String, i64)>,
}

impl Session {
    /// Compares the spoke's applied digest with the acked work of this
    /// cluster; a mismatch seen on two heartbeats in a row resends the
    /// targets of the differing buckets (the same generation again: the
    /// spoke re-applies it, level-based).
    pub(super) async fn compare_digest(&mut self, wire: &str) -> Result<(), Status> {
        use clawfed_proto::digest;
        if !self.digest.enabled {
            return Ok(());
        }
        // An empty or older-form digest: the spoke has not read its records yet.
        let Some(theirs) = AppliedDigest::parse(wire) else {
            return Ok(());
        };
        if self.digest.matched == Some(theirs) {
            return Ok(());
        }
        let acked = self
            .state
            .store
            .outbox_acked_latest(&self.cluster.id)
            .await
            .map_err(Self::store_err)?;
        let entries = || acked.iter().map(|(t, k, g)| (t.as_str(), k.as_str(), *g));
        let ours = AppliedDigest::compute(entries());
        let differing = ours.differing(&theirs);
        tracing::debug!(cluster = %self.cluster.name, differing = differing.len(), acked = acked.len(), "link.digest_compared");
        if differing.is_empty() {
            self.digest.matched = Some(theirs);
            self.digest.pending = None;
            return Ok(());
        }
        self.digest.matched = None;
        if self.digest.pending != Some((theirs, ours)) {
            self.digest.pending = Some((theirs, ours));
            return Ok(());
        }
        self.digest.pending = None;
        let targets: Vec<String> = digest::counted(entries())
            .into_iter()
            .filter(|(t, _)| differing.contains(&digest::bucket(t)))
            .filter(|(t, g)| self.digest.resent.insert((t.to_string(), *g)))
            .map(|(t, _)| t.to_string())
            .collect();
        let resent = self
            .state
            .store
            .outbox_resend(&self.cluster.id, &targets)
            .await
            .map_err(Self::store_err)?;
        tracing::info!(cluster = %self.cluster.name, buckets = differing.len(),
            targets = targets.len(), resent = resent.len(), "link.digest_mismatch");
        if resent.is_empty() {
            return Ok(());
        }
        self.dispatch().await
    }
}
