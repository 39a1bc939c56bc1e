//! Throwaway stores for tests: a SQLite file in a temp dir, or a fresh
//! schema on the real PostgreSQL server named by `CLAWFED_TEST_DATABASE_URL`
//! (set by `scripts/postgres.sh env`), so tests run in parallel.

use std::sync::Arc;

use clawfed_hub::store::{self, SqlStore};
use sqlx::Connection;

/// A store that lives as long as this value.
pub struct TestDb {
    pub store: Arc<SqlStore>,
    /// The URL the store was opened with (hub tests reuse it).
    pub url: String,
    _dir: Option<tempfile::TempDir>,
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
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options[search_path]={schema}");
    let store = store::connect(&url).await.expect("open postgres store");
    TestDb {
        store: Arc::new(store),
        url,
        _dir: None,
    }
}
