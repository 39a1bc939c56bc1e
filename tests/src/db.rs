//! Throwaway stores for tests: a SQLite file in a temp dir, or a fresh
//! schema on the real PostgreSQL server named by `CLAWFED_TEST_DATABASE_URL`
//! (set by `scripts/postgres.sh env`), so tests run in parallel.

use std::sync::Arc;

use clawfed_hub::store::{self, SqlStore};
use sqlx::Connection;

use crate::hub::Backend;

/// A store that lives as long as this value.
pub struct TestDb {
    pub store: Arc<SqlStore>,
    /// The URL the store was opened with (hub tests reuse it).
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

/// The secrets key file of the hubs on the database at `url` (hubs on one
/// database share it, as replicas and restarts must); removed with the
/// [`TestDb`].
pub fn secrets_key_file(url: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "clawfed-key-{}",
        &hex::encode(<sha2::Sha256 as sha2::Digest>::digest(url.as_bytes()))[..16]
    ))
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(secrets_key_file(&self.url));
    }
}

impl TestDb {
    /// The store as the trait object the hub uses.
    pub fn dyn_store(&self) -> Arc<dyn store::Store> {
        self.store.clone()
    }
}

/// The PostgreSQL test server's URL; panics with instructions when unset,
/// so a CI run without PostgreSQL fails loudly instead of skipping.
pub fn postgres_url() -> String {
    std::env::var("CLAWFED_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "CLAWFED_TEST_DATABASE_URL is not set. Start the test server with \
             `eval \"$(scripts/postgres.sh env)\"` (the README's test command does this)."
        )
    })
}

/// A fresh database on `backend`.
pub async fn open(backend: Backend) -> TestDb {
    match backend {
        Backend::Sqlite => sqlite().await,
        Backend::Postgres => postgres().await,
    }
}

/// A fresh SQLite database in a temp dir.
pub async fn sqlite() -> TestDb {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("hub.db").display());
    let store = store::connect(&url).await.expect("open sqlite store");
    TestDb {
        store: Arc::new(store),
        url,
        _dir: Some(dir),
    }
}

/// A fresh schema on the PostgreSQL test server.
pub async fn postgres() -> TestDb {
    let base = postgres_url();
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&base)
        .await
        .expect("connect to the PostgreSQL test server");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&mut admin)
        .await
        .expect("create test schema");
    let url = schema_url(&base, &schema);
    let store = store::connect(&url).await.expect("open postgres store");
    TestDb {
        store: Arc::new(store),
        url,
        _dir: None,
    }
}

/// `base` with its connections' search path set to `schema`.
pub fn schema_url(base: &str, schema: &str) -> String {
    with_query(base, &format!("options[search_path]={schema}"))
}

/// `base` with `param` (`key=value`) added to its query.
pub fn with_query(base: &str, param: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}{param}")
}

/// The PostgreSQL test server's CA (`scripts/postgres.sh` issues the
/// server's certificate with it, for 127.0.0.1 and localhost); panics with
/// instructions when unset, like [`postgres_url`].
pub fn postgres_ca() -> String {
    std::env::var("CLAWFED_TEST_DATABASE_CA").unwrap_or_else(|_| {
        panic!(
            "CLAWFED_TEST_DATABASE_CA is not set. Start the test server with \
             `eval \"$(scripts/postgres.sh env)\"` (it serves TLS with a test CA's certificate)."
        )
    })
}

/// `base` (`postgres://user:password@host:port/database?query`) as
/// `user`/`password` on `database`, its query kept.
pub fn login_url(base: &str, user: &str, password: &str, database: &str) -> String {
    let (scheme, rest) = base.split_once("://").expect("a postgres:// URL");
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let (host, query) = match rest.split_once('/') {
        Some((host, path)) => (host, path.split_once('?').map(|(_, q)| q)),
        None => (rest, None),
    };
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    format!("{scheme}://{user}:{password}@{host}/{database}{query}")
}

/// Every value of every column of every table of `db`, as text (binary
/// columns as hex), one per line: what someone with a copy of the database
/// would see (tests assert a secret, or its hex, never appears in it).
pub async fn all_text(db: &TestDb) -> String {
    use sqlx::Row;
    let pool = db.store.pool();
    let postgres = db.url.starts_with("postgres");
    let tables_sql = if postgres {
        "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
    } else {
        "SELECT name FROM sqlite_master WHERE type = 'table'"
    };
    let tables: Vec<String> = sqlx::query(tables_sql)
        .fetch_all(pool)
        .await
        .expect("list tables")
        .iter()
        .map(|r| r.get::<String, _>(0))
        .collect();
    assert!(!tables.is_empty(), "no tables found");
    let mut out = String::new();
    for table in tables {
        // Table names come from the catalog, never from input.
        let columns: Vec<String> = if postgres {
            // A whole row cast to text holds every column.
            vec!["CAST(t AS TEXT)".to_owned()]
        } else {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT name FROM pragma_table_info('{table}')"
            )))
            .fetch_all(pool)
            .await
            .expect("list columns")
            .iter()
            .map(|r| {
                // Blobs as hex (tests look for a secret's hex too).
                let c = r.get::<String, _>(0);
                format!(
                    "CASE WHEN typeof(\"{c}\") = 'blob' THEN hex(\"{c}\") \
                     ELSE COALESCE(CAST(\"{c}\" AS TEXT), '') END"
                )
            })
            .collect()
        };
        for column in columns {
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {column} FROM \"{table}\" t"
            )))
            .fetch_all(pool)
            .await
            .unwrap_or_else(|e| panic!("read {table}: {e}"));
            for r in rows {
                out.push_str(&table);
                out.push('\t');
                out.push_str(&r.get::<String, _>(0));
                out.push('\n');
            }
        }
    }
    out
}
