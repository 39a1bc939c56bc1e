//! What a pass sends: work to an execution cluster over the link (the
//! Harness's own, or a predecessor's on the cluster it runs on), its own
//! next pass, Gateway retirements, and the credentials Harness work carries.

use chrono::Utc;
use clawfed_proto::work as wire;

use super::spec::{harness_target, revision_work};
use super::{Rollout, facts, store_err};
use crate::model::{Agent, AgentRevision, Namespace};
use crate::store::Store;
use crate::worker::WorkError;
use crate::worker::kinds::rollout_work;

impl Rollout {
    pub(super) async fn cluster_id(
        &self,
        store: &dyn Store,
        name: &str,
    ) -> Result<String, WorkError> {
        store
            .get_cluster(name)
            .await
            .map(|c| c.id)
            .map_err(store_err)
    }

    pub(super) async fn send(
        &self,
        cluster_id: &str,
        target: &str,
        generation: i64,
        work: &wire::WorkSpec,
    ) -> Result<(), WorkError> {
        let kind = work.kind();
        let body: serde_json::Value = serde_json::from_slice(&work.encode())
            .map_err(|e| WorkError::permanent_because(format!("encoding {kind}"), e))?;
        self.link
            .send(cluster_id, target, kind.as_str(), generation, &body)
            .await
            .map_err(store_err)?;
        Ok(())
    }

    pub(super) async fn requeue(
        &self,
        store: &dyn Store,
        rev: &AgentRevision,
        ns: &Namespace,
        at: chrono::DateTime<Utc>,
    ) -> Result<(), WorkError> {
        store
            .enqueue_work(&[rollout_work(
                &rev.id,
                &ns.id,
                None,
                at,
                self.config.max_attempts,
            )])
            .await
            .map_err(store_err)?;
        Ok(())
    }

    /// A drain's move settled (its predecessors retired, or it failed):
    /// the drain's next pass runs now, not at its recheck.
    pub(super) async fn wake_drain(
        &self,
        store: &dyn Store,
        rev: &AgentRevision,
    ) -> Result<(), WorkError> {
        if let Some(cluster) = &rev.moved_from {
            store
                .enqueue_work(&[crate::worker::drain::drain_work(
                    cluster,
                    None,
                    Utc::now(),
                    self.config.max_attempts,
                )])
                .await
                .map_err(store_err)?;
        }
        Ok(())
    }

    /// Opens the credentials `rev` froze at deploy (sealed for `agent`).
    /// The inner error is why the revision cannot get them (a changed key,
    /// a value altered or moved), without any value.
    pub(super) async fn open_credentials(
        &self,
        store: &dyn Store,
        agent: &Agent,
        rev: &AgentRevision,
    ) -> Result<
        Result<
            Vec<(
                clawfed_proto::work::credential::CredentialKind,
                crate::secrets::SecretValue,
            )>,
            String,
        >,
        WorkError,
    > {
        let stored = store
            .revision_credentials(&rev.id)
            .await
            .map_err(store_err)?;
        if stored.is_empty() {
            return Ok(Ok(Vec::new()));
        }
        let Some(secrets) = &self.secrets else {
            return Ok(Err(
                "credentials: this hub has no secrets key to open them".into()
            ));
        };
        let mut opened = Vec::with_capacity(stored.len());
        for c in stored {
            match secrets.open_credential(&agent.id, c.kind, &c.sealed) {
                Ok(v) => opened.push((c.kind, v)),
                Err(e) => return Ok(Err(format!("credentials: {e}"))),
            }
        }
        Ok(Ok(opened))
    }

    /// Sends a stop or retirement of predecessor `p` to the cluster it runs
    /// on (not the successor's).
    pub(super) async fn send_to_predecessor(
        &self,
        ns: &Namespace,
        p: &facts::Located,
        generation: i64,
        work: fn(wire::RevisionWork) -> wire::WorkSpec,
    ) -> Result<(), WorkError> {
        let Some(cluster_id) = &p.cluster_id else {
            return Ok(()); // never placed: nothing runs
        };
        let body = work(revision_work(ns, &p.data_plane_namespace, &p.revision));
        self.send(
            cluster_id,
            &harness_target(ns, &p.revision),
            generation,
            &body,
        )
        .await
    }

    /// Removes what only revision `number` used of the Agent's Gateway.
    pub(super) async fn retire_gateway(
        &self,
        ns: &Namespace,
        agent: &str,
        number: i64,
    ) -> Result<(), WorkError> {
        self.gateways
            .retire(&ns.id, &ns.name, agent, number)
            .await
            .map_err(|e| WorkError::retryable_because(format!("retiring revision {number}"), e))
    }
}
