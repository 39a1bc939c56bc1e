//! The hub's database for the run: SQLite in a temp dir, or a fresh
//! PostgreSQL schema dropped at the end.

use anyhow::Result;
use sqlx::Connection;

pub(super) struct Db {
    pub(super) url: String,
    /// (admin URL, schema) to drop at the end.
    pub(super) pg: Option<(String, String)>,
    _dir: tempfile::TempDir,
}

pub(super) async fn database(postgres: bool) -> Result<Db> {
    let dir = tempfile::tempdir()?;
    if !postgres {
        return Ok(Db {
            url: format!("sqlite://{}", dir.path().join("hub.db").display()),
            pg: None,
            _dir: dir,
        });
    }
    let base = clawfed_bench::pg::server_url()?;
    let schema = format!("pbench_{}", uuid::Uuid::new_v4().simple());
    let mut c = sqlx::PgConnection::connect(&base).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&mut c)
        .await?;
    Ok(Db {
        url: clawfed_bench::pg::schema_url(&base, &schema),
        pg: Some((base, schema)),
        _dir: dir,
    })
}
