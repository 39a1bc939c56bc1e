//! The `hub_secrets` and `gateway_transport` tables: secrets every hub
//! replica shares, and the hashes of Gateways' transport tokens.

use chrono::Utc;
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates column
// names defined in this file, never input.
use sqlx::AssertSqlSafe;

use super::SqlStore;
use super::codec::{get, ms, not_found};
use crate::store::Result;

pub(super) async fn hub_secret(store: &SqlStore, name: &str, candidate: &str) -> Result<String> {
    let query = sqlx::query(
        "INSERT INTO hub_secrets (name, value, created_at) VALUES ($1, $2, $3) \
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(name.to_owned())
    .bind(candidate.to_owned())
    .bind(ms(Utc::now()));
    store.run(query).await?;
    let row = sqlx::query("SELECT value FROM hub_secrets WHERE name = $1")
        .bind(name.to_owned())
        .fetch_one(&store.pool)
        .await
        .map_err(|e| store.classify(e))?;
    get(&row, "hub secret", "value")
}

pub(super) async fn replace_hub_secret(
    store: &SqlStore,
    name: &str,
    expected: &str,
    value: &str,
) -> Result<bool> {
    let query = sqlx::query(
        "UPDATE hub_secrets SET value = $3, created_at = $4 WHERE name = $1 AND value = $2",
    )
    .bind(name.to_owned())
    .bind(expected.to_owned())
    .bind(value.to_owned())
    .bind(ms(Utc::now()));
    let done = store.run(query).await?;
    Ok(done == 1)
}

pub(super) async fn set_transport_token_hash(
    store: &SqlStore,
    revision_id: &str,
    token_hash: &str,
) -> Result<()> {
    // Through the revision row, so a missing revision is "not found"
    // rather than a foreign-key error.
    let query = sqlx::query(
        "INSERT INTO gateway_transport (revision_id, token_hash, created_at) \
         SELECT id, $2, $3 FROM agent_revisions WHERE id = $1 \
         ON CONFLICT (revision_id) DO UPDATE SET token_hash = excluded.token_hash",
    )
    .bind(revision_id.to_owned())
    .bind(token_hash.to_owned())
    .bind(ms(Utc::now()));
    let done = store.run(query).await?;
    if done == 0 {
        return Err(not_found("revision", revision_id));
    }
    Ok(())
}

pub(super) async fn transport_token_hash(
    store: &SqlStore,
    revision_id: &str,
) -> Result<Option<String>> {
    transport_column(store, "token_hash", "revision_id", revision_id).await
}

pub(super) async fn revision_by_transport_hash(
    store: &SqlStore,
    token_hash: &str,
) -> Result<Option<String>> {
    transport_column(store, "revision_id", "token_hash", token_hash).await
}

/// The `column` of the `gateway_transport` row whose unique `key` column
/// is `value`, if there is one.
async fn transport_column(
    store: &SqlStore,
    column: &'static str,
    key: &'static str,
    value: &str,
) -> Result<Option<String>> {
    let sql = format!("SELECT {column} FROM gateway_transport WHERE {key} = $1");
    let query = sqlx::query(AssertSqlSafe(sql)).bind(value.to_owned());
    store
        .read_optional(query, |r| get(r, "gateway transport", column))
        .await
}
