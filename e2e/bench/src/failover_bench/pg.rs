//! PostgreSQL: one fresh database per part, so pg_stat_database counts each
//! part's replicas alone.

use anyhow::Context;
use sqlx::{Connection, Row as _};

pub(super) struct Pg {
    base: String,
    created: std::sync::Mutex<Vec<String>>,
}

impl Pg {
    pub(super) fn from_env() -> anyhow::Result<Self> {
        let base = std::env::var("CLAWFED_TEST_DATABASE_URL").context(
            "CLAWFED_TEST_DATABASE_URL is not set (eval \"$(scripts/postgres.sh env)\")",
        )?;
        Ok(Self {
            base,
            created: Default::default(),
        })
    }

    pub(super) async fn admin(&self) -> anyhow::Result<sqlx::PgConnection> {
        Ok(sqlx::PgConnection::connect(&self.base).await?)
    }

    /// A fresh database: its URL and name.
    pub(super) async fn create(&self, part: &str) -> anyhow::Result<(String, String)> {
        let (url, name) =
            clawfed_bench::pg::create_database_on(&self.base, &format!("fbench_{part}")).await?;
        if let Ok(mut v) = self.created.lock() {
            v.push(name.clone());
        }
        Ok((url, name))
    }

    pub(super) async fn version(&self) -> String {
        match self.admin().await {
            Ok(mut c) => sqlx::query("SHOW server_version")
                .fetch_one(&mut c)
                .await
                .and_then(|r| r.try_get::<String, _>(0))
                .unwrap_or_else(|e| format!("unknown ({e})")),
            Err(e) => format!("unknown ({e})"),
        }
    }

    /// Transactions committed and rolled back in database `name` so far.
    pub(super) async fn xacts(&self, name: &str) -> anyhow::Result<i64> {
        // The statistics snapshot is per transaction: a fresh connection
        // sees the counters as the server last flushed them.
        let row = sqlx::query(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1",
        )
        .bind(name)
        .fetch_one(&mut self.admin().await?)
        .await?;
        Ok(row.try_get::<i64, _>(0)?)
    }

    pub(super) async fn drop_all(&self) {
        let names = self.created.lock().map(|v| v.clone()).unwrap_or_default();
        clawfed_bench::pg::drop_databases_on(&self.base, &names).await;
    }
}
