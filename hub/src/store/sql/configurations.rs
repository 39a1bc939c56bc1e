//! The `configurations` table: a tenant's named, versioned configuration
//! documents.

use chrono::Utc;
use sqlx::any::AnyRow;
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates the
// column lists and placeholders defined in this file, never input.
use sqlx::AssertSqlSafe;
use uuid::Uuid;

use super::codec::{from_json, from_ms, get, ms, not_found};
use super::{Document, SqlStore};
use crate::model::Configuration;
use crate::store::{Effects, Result};

/// A Configuration's data, updated at the caller's version.
const CONFIG_DATA: Document = Document {
    table: "configurations",
    kind: "configuration",
    column: "data",
};

const CONFIG_COLS: &str =
    "c.id, n.name AS namespace, c.name, c.data, c.version, c.created_at, c.updated_at";

pub(super) async fn create_configuration(
    store: &SqlStore,
    namespace: &str,
    name: &str,
    data: &serde_json::Value,
    fx: &Effects,
) -> Result<Configuration> {
    let now = Utc::now();
    let mut tx = store.begin().await?;
    let ns_id = store.namespace_id(&mut tx, namespace).await?;
    sqlx::query(
        "INSERT INTO configurations (id, namespace_id, name, data, version, created_at, \
         updated_at) VALUES ($1, $2, $3, $4, 1, $5, $5)",
    )
    .bind(Uuid::now_v7().to_string())
    .bind(ns_id)
    .bind(name.to_owned())
    .bind(data.to_string())
    .bind(ms(now))
    .execute(&mut *tx)
    .await
    .map_err(|e| store.exists_or(e, "configuration", name))?;
    store.commit_with_effects(tx, fx, now).await?;
    get_configuration(store, namespace, name).await
}

pub(super) async fn get_configuration(
    store: &SqlStore,
    namespace: &str,
    name: &str,
) -> Result<Configuration> {
    let sql = format!(
        "SELECT {CONFIG_COLS} FROM configurations c JOIN namespaces n ON n.id = c.namespace_id \
         WHERE n.name = $1 AND c.name = $2"
    );
    let query = sqlx::query(AssertSqlSafe(sql))
        .bind(namespace.to_owned())
        .bind(name.to_owned());
    store
        .read_one(query, configuration_from_row, "configuration", name)
        .await
}

pub(super) async fn list_configurations(
    store: &SqlStore,
    namespace: &str,
) -> Result<Vec<Configuration>> {
    let sql = format!(
        "SELECT {CONFIG_COLS} FROM configurations c JOIN namespaces n ON n.id = c.namespace_id \
         WHERE n.name = $1 ORDER BY c.name"
    );
    let query = sqlx::query(AssertSqlSafe(sql)).bind(namespace.to_owned());
    store.read_all(query, configuration_from_row).await
}

pub(super) async fn update_configuration(
    store: &SqlStore,
    namespace: &str,
    name: &str,
    data: &serde_json::Value,
    expected_version: i64,
    fx: &Effects,
) -> Result<Configuration> {
    store
        .update_document(
            CONFIG_DATA,
            namespace,
            name,
            data.to_string(),
            expected_version,
            fx,
        )
        .await?;
    get_configuration(store, namespace, name).await
}

pub(super) async fn delete_configuration(
    store: &SqlStore,
    namespace: &str,
    name: &str,
    fx: &Effects,
) -> Result<()> {
    let now = Utc::now();
    let mut tx = store.begin().await?;
    let ns_id = store.namespace_id(&mut tx, namespace).await?;
    let query = sqlx::query("DELETE FROM configurations WHERE namespace_id = $1 AND name = $2")
        .bind(ns_id)
        .bind(name.to_owned());
    let deleted = store.run_in(&mut tx, query).await?;
    if deleted == 0 {
        return Err(not_found("configuration", name));
    }
    store.commit_with_effects(tx, fx, now).await
}

fn configuration_from_row(r: &AnyRow) -> Result<Configuration> {
    const W: &str = "configuration";
    Ok(Configuration {
        id: get(r, W, "id")?,
        namespace: get(r, W, "namespace")?,
        name: get(r, W, "name")?,
        data: from_json(W, &get::<String>(r, W, "data")?)?,
        version: get(r, W, "version")?,
        created_at: from_ms(get(r, W, "created_at")?),
        updated_at: from_ms(get(r, W, "updated_at")?),
    })
}
