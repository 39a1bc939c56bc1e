//! Running one statement: the sqlx call, the backend's error
//! classification and the row mapping that every table's functions share,
//! written once so that each of them states only its SQL and binds.

use chrono::{DateTime, Utc};
use sqlx::any::{AnyArguments, AnyQueryResult, AnyRow};
use sqlx::{Any, AnyConnection, AssertSqlSafe};

use super::codec::not_found;
use super::{SqlStore, Tx};
use crate::store::{Effects, Result};

/// A statement with its binds, ready to run on either backend.
pub(in crate::store) type Query<'q> = sqlx::query::Query<'q, Any, AnyArguments>;

impl SqlStore {
    /// The one row a read outside a transaction finds, mapped;
    /// `NotFound` of `kind` `name` when there is none.
    pub(in crate::store) async fn read_one<T>(
        &self,
        query: Query<'_>,
        from_row: impl Fn(&AnyRow) -> Result<T> + Send,
        kind: &'static str,
        name: &str,
    ) -> Result<T> {
        self.read_optional(query, from_row)
            .await?
            .ok_or_else(|| not_found(kind, name))
    }

    /// The one row of `sql`, a SELECT with one key (`$1`), for `key`,
    /// mapped; `NotFound` of `kind` `key` when there is none. `sql` only
    /// interpolates a table's column list, never input.
    pub(in crate::store) async fn read_by_key<T>(
        &self,
        sql: String,
        key: &str,
        from_row: impl Fn(&AnyRow) -> Result<T> + Send,
        kind: &'static str,
    ) -> Result<T> {
        let query = sqlx::query(AssertSqlSafe(sql)).bind(key.to_owned());
        self.read_one(query, from_row, kind, key).await
    }

    /// The row a read outside a transaction finds, if any, mapped.
    pub(in crate::store) async fn read_optional<T>(
        &self,
        query: Query<'_>,
        from_row: impl Fn(&AnyRow) -> Result<T> + Send,
    ) -> Result<Option<T>> {
        query
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?
            .as_ref()
            .map(from_row)
            .transpose()
    }

    /// Every row a read outside a transaction finds, mapped.
    pub(in crate::store) async fn read_all<T>(
        &self,
        query: Query<'_>,
        from_row: impl Fn(&AnyRow) -> Result<T> + Send,
    ) -> Result<Vec<T>> {
        let rows = query
            .fetch_all(self.reader())
            .await
            .map_err(|e| self.classify(e))?;
        rows.iter().map(from_row).collect()
    }

    /// Runs a write outside a transaction; the number of rows it changed.
    pub(in crate::store) async fn run(&self, query: Query<'_>) -> Result<u64> {
        self.affected(query.execute(&self.pool).await)
    }

    /// Runs a statement on `conn` (a transaction's); the number of rows
    /// it changed.
    pub(in crate::store) async fn run_in(
        &self,
        conn: &mut AnyConnection,
        query: Query<'_>,
    ) -> Result<u64> {
        self.affected(query.execute(conn).await)
    }

    /// The rows a statement changed, or its error classified.
    fn affected(&self, done: Result<AnyQueryResult, sqlx::Error>) -> Result<u64> {
        done.map(|d| d.rows_affected())
            .map_err(|e| self.classify(e))
    }

    /// The row a read on `conn` (a transaction's) finds, if any; unmapped,
    /// as callers in a transaction mostly want a column or two.
    pub(in crate::store) async fn row_in(
        &self,
        conn: &mut AnyConnection,
        query: Query<'_>,
    ) -> Result<Option<AnyRow>> {
        query
            .fetch_optional(conn)
            .await
            .map_err(|e| self.classify(e))
    }

    /// The row a read on `conn` (a transaction's) must find; `NotFound`
    /// of `kind` `name` when there is none.
    pub(in crate::store) async fn one_in(
        &self,
        conn: &mut AnyConnection,
        query: Query<'_>,
        kind: &'static str,
        name: &str,
    ) -> Result<AnyRow> {
        self.row_in(conn, query)
            .await?
            .ok_or_else(|| not_found(kind, name))
    }

    /// Writes a mutation's effects in `tx` and commits it: how every
    /// mutation of desired state ends.
    pub(in crate::store) async fn commit_with_effects(
        &self,
        mut tx: Tx,
        fx: &Effects,
        now: DateTime<Utc>,
    ) -> Result<()> {
        self.write_effects(&mut tx, fx, now).await?;
        self.commit_effects(tx, fx).await
    }
}
