//! Fresh PostgreSQL databases and schemas on the test server at
//! `CLAWFED_TEST_DATABASE_URL`, for the benches that run the hub on it.

use std::path::Path;

use anyhow::Context;
use sqlx::Connection;

/// The error a `--postgres` run gives when the server is not named.
const NEEDS_URL: &str =
    "--postgres needs CLAWFED_TEST_DATABASE_URL (eval \"$(scripts/postgres.sh env)\")";

/// The test server's URL, or the error telling how to start it.
pub fn server_url() -> anyhow::Result<String> {
    std::env::var("CLAWFED_TEST_DATABASE_URL").context(NEEDS_URL)
}

/// A fresh database named `<prefix>_<uuid>` on the server at `base`:
/// (its URL, its name).
pub async fn create_database_on(base: &str, prefix: &str) -> anyhow::Result<(String, String)> {
    let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(base).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await?;
    let mut url = url::Url::parse(base)?;
    url.set_path(&format!("/{name}"));
    Ok((url.to_string(), name))
}

/// Drops the databases `names` on the server at `base`; best effort (the
/// run's figures are printed by then).
pub async fn drop_databases_on(base: &str, names: &[String]) {
    let Ok(mut admin) = sqlx::PgConnection::connect(base).await else {
        return;
    };
    for name in names {
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut admin)
        .await;
    }
}

/// `base` with its connections' search path set to `schema` (the test
/// crate's rule, which its stores use too).
pub use clawfed_tests::db::schema_url;

/// The hub's database for a run: a fresh PostgreSQL database named
/// `<prefix>_<uuid>` when `postgres`, else SQLite in `dir`. Returns the URL
/// and the PostgreSQL database to drop at the end.
pub async fn hub_database(
    postgres: bool,
    dir: &Path,
    prefix: &str,
) -> anyhow::Result<(String, Option<String>)> {
    if !postgres {
        return Ok((format!("sqlite://{}", dir.join("hub.db").display()), None));
    }
    let (url, name) = create_database_on(&server_url()?, prefix).await?;
    Ok((url, Some(name)))
}

/// Drops database `name` (from [`hub_database`]); best effort.
pub async fn drop_database(name: &str) {
    if let Ok(base) = std::env::var("CLAWFED_TEST_DATABASE_URL") {
        drop_databases_on(&base, &[name.to_owned()]).await;
    }
}
