//! The `namespaces` table: tenants, their provisioning state, and the
//! deletion of an empty one with its deleted Agents' history.

use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates the
// column lists and placeholders defined in this file, never input.
use sqlx::{AssertSqlSafe, Row};

use super::SqlStore;
use super::codec::{from_ms, get, is_unique_violation, ms, not_found, parse_enum};
use crate::model::{Namespace, NamespaceState};
use crate::store::{Effects, NewNamespace, Result, StoreError};

const NAMESPACE_COLS: &str = "id, name, display_name, data_plane_namespace, adopted, state, \
     provisioned_at, state_reason, version, created_at, updated_at";

pub(super) async fn create_namespace(
    store: &SqlStore,
    ns: &NewNamespace,
    fx: &Effects,
) -> Result<Namespace> {
    let now = Utc::now();
    let mut tx = store.begin().await?;
    sqlx::query(
        "INSERT INTO namespaces (id, name, display_name, data_plane_namespace, adopted, \
         state, provisioned_at, version, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, NULL, 1, $7, $7)",
    )
    .bind(ns.id.clone())
    .bind(ns.name.clone())
    .bind(ns.display_name.clone())
    .bind(ns.data_plane_namespace.clone())
    .bind(i64::from(ns.adopted))
    .bind(NamespaceState::Pending.as_str())
    .bind(ms(now))
    .execute(&mut *tx)
    .await
    .map_err(|e| {
        if is_unique_violation(&e) {
            StoreError::AlreadyExists {
                kind: "namespace",
                name: ns.name.clone(),
            }
        } else {
            store.classify(e)
        }
    })?;
    store.commit_with_effects(tx, fx, now).await?;
    get_namespace(store, &ns.name).await
}

pub(super) async fn get_namespace(store: &SqlStore, name: &str) -> Result<Namespace> {
    let sql = format!("SELECT {NAMESPACE_COLS} FROM namespaces WHERE name = $1");
    store
        .read_by_key(sql, name, namespace_from_row, "namespace")
        .await
}

pub(super) async fn get_namespace_by_id(store: &SqlStore, id: &str) -> Result<Namespace> {
    let sql = format!("SELECT {NAMESPACE_COLS} FROM namespaces WHERE id = $1");
    store
        .read_by_key(sql, id, namespace_from_row, "namespace")
        .await
}

pub(super) async fn list_namespaces(
    store: &SqlStore,
    only: Option<&str>,
) -> Result<Vec<Namespace>> {
    let rows = match only {
        Some(name) => {
            let sql = format!("SELECT {NAMESPACE_COLS} FROM namespaces WHERE name = $1");
            sqlx::query(AssertSqlSafe(sql))
                .bind(name.to_owned())
                .fetch_all(store.reader())
                .await
        }
        None => {
            let sql = format!("SELECT {NAMESPACE_COLS} FROM namespaces ORDER BY name");
            sqlx::query(AssertSqlSafe(sql))
                .fetch_all(store.reader())
                .await
        }
    }
    .map_err(|e| store.classify(e))?;
    rows.iter().map(namespace_from_row).collect()
}

pub(super) async fn delete_namespace(store: &SqlStore, name: &str, fx: &Effects) -> Result<()> {
    let now = Utc::now();
    let mut tx = store.begin().await?;
    let id = store.namespace_id(&mut tx, name).await?;
    let agents: i64 =
        sqlx::query("SELECT COUNT(*) FROM agents WHERE namespace_id = $1 AND deleted_at IS NULL")
            .bind(id.clone())
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| store.classify(e))?
            .get(0);
    if agents > 0 {
        return Err(StoreError::FailedPrecondition(format!(
            "namespace {name:?} still has {agents} agent(s); delete them first"
        )));
    }
    // Deleted Agents' history lives as long as its tenant.
    for sql in [
        "DELETE FROM gateway_transport WHERE revision_id IN (SELECT r.id FROM agent_revisions r \
         JOIN agents a ON a.id = r.agent_id WHERE a.namespace_id = $1)",
        "DELETE FROM revision_credentials WHERE revision_id IN (SELECT r.id FROM agent_revisions r \
         JOIN agents a ON a.id = r.agent_id WHERE a.namespace_id = $1)",
        "DELETE FROM idempotency_keys WHERE namespace_id = $1",
        "DELETE FROM agent_revisions WHERE agent_id IN \
         (SELECT id FROM agents WHERE namespace_id = $1)",
        "DELETE FROM agent_credentials WHERE agent_id IN \
         (SELECT id FROM agents WHERE namespace_id = $1)",
        "DELETE FROM agents WHERE namespace_id = $1",
    ] {
        let query = sqlx::query(sql).bind(id.clone());
        store.run_in(&mut tx, query).await?;
    }
    for table in ["configurations", "idempotency_keys", "api_tokens"] {
        let query = sqlx::query(AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE namespace_id = $1"
        )))
        .bind(id.clone());
        store.run_in(&mut tx, query).await?;
    }
    let query = sqlx::query("DELETE FROM namespaces WHERE id = $1").bind(id);
    store.run_in(&mut tx, query).await?;
    store.commit_with_effects(tx, fx, now).await
}

pub(super) async fn set_namespace_state(
    store: &SqlStore,
    id: &str,
    state: NamespaceState,
    reason: Option<&str>,
    fx: &Effects,
) -> Result<Namespace> {
    let now = Utc::now();
    let mut tx = store.begin().await?;
    let query = sqlx::query(
        "UPDATE namespaces SET state = $1, state_reason = $2, updated_at = $3 WHERE id = $4",
    )
    .bind(state.as_str())
    .bind(reason.map(str::to_owned))
    .bind(ms(now))
    .bind(id.to_owned());
    let updated = store.run_in(&mut tx, query).await?;
    if updated == 0 {
        return Err(not_found("namespace", id));
    }
    store.commit_with_effects(tx, fx, now).await?;
    get_namespace_by_id(store, id).await
}

pub(super) async fn mark_namespace_provisioned(
    store: &SqlStore,
    id: &str,
    at: DateTime<Utc>,
) -> Result<Namespace> {
    let query = sqlx::query(
        "UPDATE namespaces SET state = $1, provisioned_at = COALESCE(provisioned_at, $2), \
         updated_at = $2 WHERE id = $3 AND state IN ('pending', 'active')",
    )
    .bind(NamespaceState::Active.as_str())
    .bind(ms(at))
    .bind(id.to_owned());
    store.run(query).await?;
    get_namespace_by_id(store, id).await
}

fn namespace_from_row(r: &AnyRow) -> Result<Namespace> {
    const W: &str = "namespace";
    let state: String = get(r, W, "state")?;
    Ok(Namespace {
        id: get(r, W, "id")?,
        name: get(r, W, "name")?,
        display_name: get(r, W, "display_name")?,
        data_plane_namespace: get(r, W, "data_plane_namespace")?,
        adopted: get::<i64>(r, W, "adopted")? != 0,
        state: parse_enum(W, &state, |s| match s {
            "pending" => Some(NamespaceState::Pending),
            "active" => Some(NamespaceState::Active),
            "deleting" => Some(NamespaceState::Deleting),
            "teardown-failed" => Some(NamespaceState::TeardownFailed),
            _ => None,
        })?,
        provisioned_at: get::<Option<i64>>(r, W, "provisioned_at")?.map(from_ms),
        clusters: Vec::new(),
        state_reason: get(r, W, "state_reason")?,
        version: get(r, W, "version")?,
        created_at: from_ms(get(r, W, "created_at")?),
        updated_at: from_ms(get(r, W, "updated_at")?),
    })
}
