//! The `api_tokens` table: API tokens, looked up by the hash of their
//! secret or by name, and revoked.

use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates the
// column lists and placeholders defined in this file, never input.
use sqlx::AssertSqlSafe;
use uuid::Uuid;

use super::SqlStore;
use super::codec::{from_ms, get, ms, not_found, parse_enum};
use crate::auth::Role;
use crate::store::{ApiToken, NewAudit, NewToken, Result};

const TOKEN_COLS: &str = "t.id, t.name, n.name AS namespace, t.namespace_id, t.role, \
     t.created_at, t.expires_at, t.revoked_at";
const TOKEN_FROM: &str = "api_tokens t LEFT JOIN namespaces n ON n.id = t.namespace_id";

pub(super) async fn create_token(store: &SqlStore, token: &NewToken) -> Result<ApiToken> {
    let now = Utc::now();
    let mut tx = store.begin().await?;
    let ns_id = match &token.namespace {
        Some(ns) => Some(store.namespace_id(&mut tx, ns).await?),
        None => None,
    };
    let id = Uuid::now_v7().to_string();
    sqlx::query(
        "INSERT INTO api_tokens (id, name, namespace_id, role, token_hash, created_at, \
         expires_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, NULL)",
    )
    .bind(id.clone())
    .bind(token.name.clone())
    .bind(ns_id)
    .bind(token.role.as_str())
    .bind(token.hash.clone())
    .bind(ms(now))
    .bind(token.expires_at.map(ms))
    .execute(&mut *tx)
    .await
    .map_err(|e| store.exists_or(e, "token", &token.name))?;
    let audit = NewAudit {
        actor: "system:cli".into(),
        action: "token.create".into(),
        namespace: token.namespace.clone(),
        target: format!("tokens/{}", token.name),
        result: "ok".into(),
        detail: Some(format!("role {}", token.role.as_str())),
    };
    super::audit::insert_audit(store, &mut tx, &audit, now).await?;
    store.commit(tx).await?;
    get_token(store, &id).await
}

pub(super) async fn find_token(store: &SqlStore, hash: &str) -> Result<Option<ApiToken>> {
    find_token_by(store, "token_hash", hash).await
}

pub(super) async fn get_token(store: &SqlStore, id: &str) -> Result<ApiToken> {
    let sql = format!("SELECT {TOKEN_COLS} FROM {TOKEN_FROM} WHERE t.id = $1");
    store.read_by_key(sql, id, token_from_row, "token").await
}

pub(super) async fn find_token_by_name(store: &SqlStore, name: &str) -> Result<Option<ApiToken>> {
    find_token_by(store, "name", name).await
}

/// The token whose `column`, a unique column of `api_tokens`, is `value`.
async fn find_token_by(
    store: &SqlStore,
    column: &'static str,
    value: &str,
) -> Result<Option<ApiToken>> {
    let sql = format!("SELECT {TOKEN_COLS} FROM {TOKEN_FROM} WHERE t.{column} = $1");
    let query = sqlx::query(AssertSqlSafe(sql)).bind(value.to_owned());
    store.read_optional(query, token_from_row).await
}

pub(super) async fn revoke_token(store: &SqlStore, name: &str, at: DateTime<Utc>) -> Result<()> {
    let query =
        sqlx::query("UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE name = $2")
            .bind(ms(at))
            .bind(name.to_owned());
    let done = store.run(query).await?;
    if done == 0 {
        return Err(not_found("token", name));
    }
    Ok(())
}

fn token_from_row(r: &AnyRow) -> Result<ApiToken> {
    const W: &str = "token";
    let role: String = get(r, W, "role")?;
    Ok(ApiToken {
        id: get(r, W, "id")?,
        name: get(r, W, "name")?,
        namespace: get(r, W, "namespace")?,
        namespace_id: get(r, W, "namespace_id")?,
        role: parse_enum(W, &role, Role::parse)?,
        created_at: from_ms(get(r, W, "created_at")?),
        expires_at: get::<Option<i64>>(r, W, "expires_at")?.map(from_ms),
        revoked_at: get::<Option<i64>>(r, W, "revoked_at")?.map(from_ms),
    })
}
