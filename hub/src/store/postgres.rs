//! PostgreSQL backend: connection, the `SKIP LOCKED` claim and SQLSTATE
//! classification.

use std::sync::OnceLock;

use sqlx::any::AnyPoolOptions;

use super::schema::{self, MigrationInfo, Migrations};
use super::sql::{LaneFilter, SqlStore, WORK_COLS};
use super::{Backend, Result, StoreError};

pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

pub(super) async fn connect(
    url: &str,
    settings: super::PoolSettings,
    migrations: Migrations,
) -> Result<(SqlStore, Vec<MigrationInfo>)> {
    sqlx::any::install_default_drivers();
    let pool = AnyPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.acquire_timeout)
        .connect(url)
        .await
        .map_err(classify)?;
    let mut conn = pool.acquire().await.map_err(classify)?;
    let applied = schema::prepare(
        &mut conn,
        Backend::Postgres,
        &MIGRATOR,
        migrations,
        classify,
    )
    .await?;
    drop(conn);
    let store = SqlStore::new(pool, Backend::Postgres);
    // Leases are judged by the database's clock from the first one.
    super::Store::sync_clock(&store).await?;
    Ok((store, applied))
}

/// The claim: due pending items in order, skipping rows another worker has
/// locked, so concurrent claimers never wait on or double-claim an item.
pub(super) fn claim_sql(lane: LaneFilter) -> &'static str {
    static SQL: [OnceLock<String>; 3] = [const { OnceLock::new() }; 3];
    SQL[lane.index()].get_or_init(|| {
        format!(
            "WITH due AS (SELECT id FROM work_items WHERE state = 'pending' AND run_at <= $3{} \
               ORDER BY run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED) \
             UPDATE work_items w SET state = 'claimed', lease_owner = $1, lease_expires_at = $2, \
               attempts = w.attempts + 1, updated_at = $3 \
             FROM due WHERE w.id = due.id \
             RETURNING {}",
            lane.clause(KIND_IN, "$5"),
            WORK_COLS
                .split(", ")
                .map(|c| format!("w.{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// `kind` is one of the JSON array bound at `{}`.
pub(super) const KIND_IN: &str = "kind IN (SELECT json_array_elements_text(CAST({} AS json)))";

/// Classifies by SQLSTATE: connection and shutdown classes are
/// `Unavailable` (retrying may help), the rest are database errors.
pub(super) fn classify(err: sqlx::Error) -> StoreError {
    let unavailable = match &err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // 08: connection exception; 53: insufficient resources;
            // 57P01..03: admin/crash shutdown, cannot connect now;
            // 40001/40P01: serialization failure, deadlock (retryable).
            code.starts_with("08")
                || code.starts_with("53")
                || matches!(&*code, "57P01" | "57P02" | "57P03" | "40001" | "40P01")
        }),
        _ => false,
    };
    if unavailable {
        StoreError::Unavailable(err)
    } else {
        StoreError::Database(err)
    }
}
