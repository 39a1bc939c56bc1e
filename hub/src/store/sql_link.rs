//! [`LinkStore`] over the shared SQL (both backends).
//!
//! Each method calls the function of the same name in the module of its
//! part of the link, taking the store as its first argument:
//! - `sql_link/enrollment.rs`: bootstrap tokens and enrollment;
//! - `sql_link/certificates.rs`: certificates and revocation;
//! - `sql_link/connection.rs`: connection state and its watch events;
//! - `sql_link/outbox.rs`: the durable per-cluster outbox;
//! - `sql_link/reports.rs`: spoke reports.

mod certificates;
mod connection;
mod enrollment;
mod outbox;
mod reports;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::group::Written;
use super::link::{
    BootstrapToken, CertificateStatus, ClusterClaim, EnrollRejected, LinkStore, NewBootstrapToken,
    OutboxItem, OutboxSummary, RevokedCertificate, SpokeHello, SpokeReport,
};
use super::sql::SqlStore;
use super::{Effects, Result, StoreError};
use crate::model::{Cluster, ConnectionState};

pub(super) use outbox::OUTBOX_COLS;

/// Each method calls the function of the same name in its part's module,
/// named by that module (`outbox::outbox_put(self, …)`).
#[async_trait]
impl LinkStore for SqlStore {
    async fn create_bootstrap_token(
        &self,
        token: &NewBootstrapToken,
        fx: &Effects,
    ) -> Result<BootstrapToken> {
        enrollment::create_bootstrap_token(self, token, fx).await
    }

    async fn begin_enrollment(
        &self,
        token_hash: &str,
        cluster_name: &str,
        claim: &ClusterClaim,
        now: DateTime<Utc>,
    ) -> Result<Result<Cluster, EnrollRejected>> {
        enrollment::begin_enrollment(self, token_hash, cluster_name, claim, now).await
    }

    async fn approve_enrollment(
        &self,
        cluster_name: &str,
        now: DateTime<Utc>,
        fx: &Effects,
    ) -> Result<bool> {
        enrollment::approve_enrollment(self, cluster_name, now, fx).await
    }

    async fn add_certificate(
        &self,
        cluster_id: &str,
        serial: &str,
        not_after: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        certificates::add_certificate(self, cluster_id, serial, not_after, now).await
    }

    async fn certificate_expiry(&self) -> Result<std::collections::HashMap<String, DateTime<Utc>>> {
        certificates::certificate_expiry(self).await
    }

    async fn get_cluster_by_id(&self, id: &str) -> Result<Cluster> {
        connection::get_cluster_by_id(self, id).await
    }

    async fn certificate_status(&self, serial: &str) -> Result<Option<CertificateStatus>> {
        certificates::certificate_status(self, serial).await
    }

    async fn revoke_cluster(&self, name: &str, at: DateTime<Utc>, fx: &Effects) -> Result<Cluster> {
        certificates::revoke_cluster(self, name, at, fx).await
    }

    async fn revoked_after(&self, after: i64) -> Result<Vec<RevokedCertificate>> {
        certificates::revoked_after(self, after).await
    }

    async fn set_connection_state(
        &self,
        cluster_id: &str,
        state: ConnectionState,
        last_seen: DateTime<Utc>,
        hello: Option<SpokeHello<'_>>,
    ) -> Result<()> {
        connection::set_connection_state(self, cluster_id, state, last_seen, hello).await
    }

    async fn set_cluster_capacity(
        &self,
        cluster_id: &str,
        capacity: clawfed_proto::capacity::Capacity,
        at: DateTime<Utc>,
    ) -> Result<()> {
        connection::set_cluster_capacity(self, cluster_id, capacity, at).await
    }

    async fn renew_execution_lease(&self, cluster_id: &str, at: DateTime<Utc>) -> Result<()> {
        super::sql::renew_execution_lease(self, cluster_id, at).await
    }

    async fn set_fenced_targets(&self, cluster_id: &str, targets: &[String]) -> Result<()> {
        super::sql::set_fenced_targets(self, cluster_id, targets).await
    }

    async fn mark_stale_offline(&self, before: DateTime<Utc>) -> Result<u64> {
        connection::mark_stale_offline(self, before).await
    }

    async fn outbox_put(
        &self,
        cluster_id: &str,
        target: &str,
        kind: &str,
        generation: i64,
        spec: &str,
    ) -> Result<Option<i64>> {
        outbox::outbox_put(self, cluster_id, target, kind, generation, spec).await
    }

    async fn outbox_pending(
        &self,
        cluster_id: &str,
        after_sequence: i64,
        limit: i64,
    ) -> Result<Vec<OutboxItem>> {
        outbox::outbox_pending(self, cluster_id, after_sequence, limit).await
    }

    async fn outbox_ack(
        &self,
        cluster_id: &str,
        sequence: i64,
        target: &str,
        generation: i64,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        outbox::outbox_ack(self, cluster_id, sequence, target, generation, now).await
    }

    async fn outbox_ack_applied(
        &self,
        cluster_id: &str,
        applied: &[(String, i64)],
        now: DateTime<Utc>,
    ) -> Result<u64> {
        outbox::outbox_ack_applied(self, cluster_id, applied, now).await
    }

    async fn outbox_knows_target(&self, cluster_id: &str, target: &str) -> Result<bool> {
        outbox::outbox_knows_target(self, cluster_id, target).await
    }

    async fn outbox_target_exists(&self, target: &str) -> Result<bool> {
        outbox::outbox_target_exists(self, target).await
    }

    async fn outbox_latest_generation(
        &self,
        cluster_id: &str,
        target: &str,
    ) -> Result<Option<i64>> {
        outbox::outbox_latest_generation(self, cluster_id, target).await
    }

    async fn outbox_acked_latest(&self, cluster_id: &str) -> Result<Vec<(String, String, i64)>> {
        outbox::outbox_acked_latest(self, cluster_id).await
    }

    async fn outbox_resend(&self, cluster_id: &str, targets: &[String]) -> Result<Vec<i64>> {
        outbox::outbox_resend(self, cluster_id, targets).await
    }

    async fn outbox_summary(&self) -> Result<Vec<OutboxSummary>> {
        outbox::outbox_summary(self).await
    }

    async fn put_report(
        &self,
        cluster_id: &str,
        target: &str,
        kind: &str,
        generation: i64,
        body: &serde_json::Value,
        now: DateTime<Utc>,
    ) -> Result<()> {
        reports::put_report(self, cluster_id, target, kind, generation, body, now).await
    }

    async fn list_reports(&self, cluster_id: &str) -> Result<Vec<SpokeReport>> {
        reports::list_reports(self, cluster_id).await
    }

    async fn target_reports(
        &self,
        target: &str,
        kind: &str,
    ) -> Result<Vec<(String, Option<SpokeReport>)>> {
        reports::target_reports(self, target, kind).await
    }

    async fn get_report(
        &self,
        cluster_id: &str,
        target: &str,
        kind: &str,
    ) -> Result<Option<SpokeReport>> {
        reports::get_report(self, cluster_id, target, kind).await
    }
}

/// A group commit answered a write with another kind's result (a bug).
fn mismatch(written: Written) -> StoreError {
    StoreError::Corrupt {
        what: "group commit result",
        detail: format!("unexpected {written:?}"),
    }
}
