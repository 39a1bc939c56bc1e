//! What the database does per item: statements as this process sends them,
//! transactions as the PostgreSQL server counts them.

use std::collections::HashMap;

use clawfed_bench::procfs::cpu_secs;

/// Transactions committed and rolled back in this database so far, as the
/// server counts them (every client's; PostgreSQL only).
pub(super) async fn server_xacts(url: &str) -> anyhow::Result<i64> {
    use sqlx::Connection as _;
    use sqlx::Row as _;
    let mut c = sqlx::PgConnection::connect(url).await?;
    let row = sqlx::query(
        "SELECT (xact_commit + xact_rollback)::BIGINT FROM pg_stat_database \
         WHERE datname = current_database()",
    )
    .fetch_one(&mut c)
    .await?;
    let n = row.try_get::<i64, _>(0)?;
    c.close().await?;
    Ok(n)
}

/// CPU seconds used so far by each server process of this database (its
/// backends, the hub's pool and LISTEN connections among them), by pid;
/// PostgreSQL on this machine only (it reads /proc).
pub(super) async fn server_cpu(url: &str) -> anyhow::Result<HashMap<i32, f64>> {
    use sqlx::Connection as _;
    use sqlx::Row as _;
    let mut c = sqlx::PgConnection::connect(url).await?;
    let rows = sqlx::query(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
         AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut c)
    .await?;
    c.close().await?;
    Ok(rows
        .iter()
        .filter_map(|r| r.try_get::<i32, _>(0).ok())
        .map(|pid| (pid, cpu_secs(pid as u32)))
        .filter(|(_, s)| s.is_finite())
        .collect())
}
