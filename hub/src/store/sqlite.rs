//! SQLite backend, the embedded default: one file, WAL, one writer
//! connection and a few readers.

use std::str::FromStr;
use std::time::Duration;

use sqlx::Executor;
use sqlx::any::AnyPoolOptions;
use sqlx::sqlite::SqliteConnectOptions;

use super::schema::{self, MigrationInfo, Migrations};
use super::sql::{LaneFilter, SqlStore, WORK_COLS};
use super::{Backend, Result, StoreError};

pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// Read connections beside the one writer.
const READERS: u32 = 4;

/// The writer's settings. `busy_timeout` first, and 30 s: how long a
/// write waits for another process's writer (`clawfed-hub` CLI commands
/// beside a running hub, or the reverse) before it fails.
const WRITER_PRAGMAS: &str = "PRAGMA busy_timeout = 30000; PRAGMA journal_mode = WAL; \
     PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;";

pub(super) async fn connect(
    url: &str,
    migrations: Migrations,
) -> Result<(SqlStore, Vec<MigrationInfo>)> {
    sqlx::any::install_default_drivers();
    // Validate with the SQLite driver's own parser; create the file on
    // first start unless the URL chose a mode.
    SqliteConnectOptions::from_str(url).map_err(classify)?;
    let url = if url.contains("mode=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    };
    // SQLite has one writer. A single pooled connection serialises the
    // hub's writes in process instead of failing them with SQLITE_BUSY when
    // a read transaction upgrades; that is correct for one hub process.
    let pool = AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(30))
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                conn.execute(WRITER_PRAGMAS).await?;
                Ok(())
            })
        })
        .connect(&url)
        .await
        .map_err(classify)?;
    let mut conn = pool.acquire().await.map_err(classify)?;
    let applied =
        schema::prepare(&mut conn, Backend::Sqlite, &MIGRATOR, migrations, classify).await?;
    drop(conn);
    let store = SqlStore::new(pool, Backend::Sqlite);
    // An in-memory database is private to its one connection.
    if url.contains(":memory:") || url.contains("mode=memory") {
        return Ok((store, applied));
    }
    // Readers of their own: in WAL mode they read the last commit without
    // waiting for the writer, so a burst of writes (outbox puts and acks)
    // does not queue the reads that dispatch work behind it.
    let reader = AnyPoolOptions::new()
        .max_connections(READERS)
        .acquire_timeout(Duration::from_secs(30))
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                conn.execute("PRAGMA query_only = ON; PRAGMA busy_timeout = 5000;")
                    .await?;
                Ok(())
            })
        })
        .connect(&url)
        .await
        .map_err(classify)?;
    Ok((store.with_reader(reader), applied))
}

/// The claim: one UPDATE statement, atomic because SQLite serialises writers.
pub(super) fn claim_sql(lane: LaneFilter) -> &'static str {
    static SQL: [std::sync::OnceLock<String>; 3] = [const { std::sync::OnceLock::new() }; 3];
    SQL[lane.index()].get_or_init(|| {
        let lane = lane.clause(KIND_IN, "$5");
        format!(
            "UPDATE work_items SET state = 'claimed', lease_owner = $1, lease_expires_at = $2, \
               attempts = attempts + 1, updated_at = $3 \
             WHERE id IN (SELECT id FROM work_items WHERE state = 'pending' AND run_at <= $3{lane} \
               ORDER BY run_at, id LIMIT $4) \
             RETURNING {WORK_COLS}"
        )
    })
}

/// `kind` is one of the JSON array bound at `{}`.
pub(super) const KIND_IN: &str = "kind IN (SELECT value FROM json_each({}))";

/// Classifies by SQLite result code: busy/locked are `Unavailable`.
pub(super) fn classify(err: sqlx::Error) -> StoreError {
    let unavailable = match &err {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with extended codes.
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|c| c.parse::<i64>().ok())
            .is_some_and(|c| matches!(c & 0xff, 5 | 6)),
        _ => false,
    };
    if unavailable {
        StoreError::Unavailable(err)
    } else {
        StoreError::Database(err)
    }
}
