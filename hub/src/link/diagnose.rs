//! Diagnose requests to spokes: the hub cannot dial a spoke, so it asks on
//! the cluster's live `Connect` stream (`DiagnoseRequest`) and waits,
//! bounded, for the `DiagnoseResult` with the same random id. An answer is
//! accepted only from the cluster the id was sent to.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use clawfed_proto::link::v1::{self as pb, hub_message};
use tokio::sync::{mpsc, oneshot};

use super::registry::Registry;

/// Why a spoke gave no diagnostics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiagnoseError {
    /// The cluster has no live link session.
    #[error("cluster has no live link session")]
    Offline,
    /// The session's stream is full (a hung spoke).
    #[error("the link to the cluster is congested")]
    Congested,
    /// No answer within the timeout.
    #[error("the spoke did not answer within {0:?}")]
    Timeout(Duration),
    /// Another replica holds the session and could not be asked.
    #[error("the replica holding the cluster's session is unreachable: {0}")]
    HolderUnreachable(String),
}

struct Pending {
    cluster_id: String,
    tx: oneshot::Sender<pb::DiagnoseResult>,
}

/// Requests waiting for their spoke's answer.
#[derive(Default)]
pub struct DiagnoseBroker {
    pending: Mutex<HashMap<String, Pending>>,
}

impl std::fmt::Debug for DiagnoseBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiagnoseBroker")
            .field("pending", &self.map().len())
            .finish()
    }
}

/// Removes a pending id however `ask` ends.
struct PendingGuard<'a> {
    broker: &'a DiagnoseBroker,
    id: String,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.broker.map().remove(&self.id);
    }
}

impl DiagnoseBroker {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks cluster `cluster_id` for the diagnostics of the Harness of
    /// `target` at revision `revision_id`.
    pub async fn ask(
        &self,
        registry: &Registry,
        cluster_id: &str,
        target: &str,
        revision_id: &str,
        timeout: Duration,
    ) -> Result<pb::DiagnoseResult, DiagnoseError> {
        let outbound = registry
            .get(cluster_id)
            .and_then(|s| s.outbound.clone())
            .ok_or(DiagnoseError::Offline)?;
        let id = hex::encode(rand::random::<[u8; 16]>());
        let (tx, rx) = oneshot::channel();
        self.map().insert(
            id.clone(),
            Pending {
                cluster_id: cluster_id.to_owned(),
                tx,
            },
        );
        let _guard = PendingGuard {
            broker: self,
            id: id.clone(),
        };
        let request = pb::HubMessage {
            body: Some(hub_message::Body::Diagnose(pb::DiagnoseRequest {
                request_id: id,
                target: target.to_owned(),
                revision_id: revision_id.to_owned(),
                // The spoke's own read must end before the hub stops waiting.
                timeout_ms: u32::try_from(timeout.as_millis() / 2).unwrap_or(u32::MAX),
            })),
        };
        match outbound.try_send(Ok(request)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => return Err(DiagnoseError::Congested),
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(DiagnoseError::Offline),
        }
        drop(outbound);
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => Ok(result),
            // The session ended with the request in it.
            Ok(Err(_)) => Err(DiagnoseError::Offline),
            Err(_) => Err(DiagnoseError::Timeout(timeout)),
        }
    }

    /// Hands a spoke's answer to its waiting request. False when no request
    /// of that id was sent to `cluster_id` (late, unknown or foreign).
    pub fn deliver(&self, cluster_id: &str, result: pb::DiagnoseResult) -> bool {
        let pending = {
            let mut map = self.map();
            match map.get(&result.request_id) {
                Some(p) if p.cluster_id == cluster_id => map.remove(&result.request_id),
                _ => None,
            }
        };
        match pending {
            Some(p) => p.tx.send(result).is_ok(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_counts_only_from_the_cluster_asked() {
        let registry = Registry::default();
        let (tx, mut rx) = mpsc::channel(4);
        let _session = registry.register("c1", "one", 0, Some(tx));
        let broker = std::sync::Arc::new(DiagnoseBroker::default());
        let asking = {
            let broker = broker.clone();
            let registry = std::sync::Arc::new(registry);
            tokio::spawn(async move {
                broker
                    .ask(
                        &registry,
                        "c1",
                        "harness/n/a/1",
                        "rev-1",
                        Duration::from_secs(5),
                    )
                    .await
            })
        };
        let Some(Ok(pb::HubMessage {
            body: Some(hub_message::Body::Diagnose(req)),
        })) = rx.recv().await
        else {
            panic!("no DiagnoseRequest sent");
        };
        assert_eq!(req.target, "harness/n/a/1");
        let answer = |checks: usize| pb::DiagnoseResult {
            request_id: req.request_id.clone(),
            checks: vec![pb::DiagnosticCheck::default(); checks],
            pod: String::new(),
        };
        assert!(!broker.deliver("c2", answer(2)), "another cluster's answer");
        assert!(broker.deliver("c1", answer(1)));
        let got = asking.await.expect("join").expect("answered");
        assert_eq!(got.checks.len(), 1);
        assert!(!broker.deliver("c1", answer(1)), "single use");
        let offline = broker
            .ask(
                &Registry::default(),
                "c1",
                "t",
                "r",
                Duration::from_millis(10),
            )
            .await;
        assert_eq!(offline, Err(DiagnoseError::Offline));
    }
}
