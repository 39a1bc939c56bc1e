//! The schema's migrations: what the database has applied compared with
//! what this binary embeds, applying the pending ones (`clawfed-hub
//! migrate`, the migration role) or refusing to run on a schema that does
//! not match (`serve` with the application role, which has no DDL rights).
//!
//! The bookkeeping table is sqlx's (`_sqlx_migrations`), so databases
//! migrated by earlier releases (which ran sqlx's migrator on every start)
//! are read as they are.

use sqlx::AnyConnection;
use sqlx::migrate::{Migrate, Migrator};
use sqlx::{Connection, Row};

use super::{Backend, Result, StoreError};

/// sqlx's bookkeeping table: one row per applied migration.
const TABLE: &str = "_sqlx_migrations";

/// What opening a store does about migrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Migrations {
    /// Apply the pending ones (needs DDL rights: the migration role).
    Apply,
    /// Apply none: refuse to open unless the database has applied exactly
    /// this binary's migrations ([`SchemaError`]).
    Require,
    /// Apply and check none: open to report ([`status`]).
    Inspect,
}

/// The database's schema beside this binary's migrations.
#[derive(Debug)]
pub struct SchemaStatus {
    /// This binary's newest migration.
    pub binary: i64,
    /// The database's newest applied migration (0: none).
    pub database: i64,
    /// This binary's migrations the database lacks, or why the database
    /// does not belong to this binary's history.
    pub pending: std::result::Result<Vec<MigrationInfo>, SchemaError>,
}

impl SchemaStatus {
    /// The database has applied exactly this binary's migrations.
    pub fn current(&self) -> bool {
        matches!(&self.pending, Ok(p) if p.is_empty())
    }
}

impl std::fmt::Display for SchemaStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "schema at {:04}, this clawfed-hub's at {:04}: ",
            self.database, self.binary
        )?;
        match &self.pending {
            Ok(p) if p.is_empty() => f.write_str("current"),
            Ok(p) => write!(
                f,
                "{} migration(s) pending ({}); run `clawfed-hub migrate`",
                p.len(),
                list(p)
            ),
            Err(e) => write!(f, "{e}"),
        }
    }
}

/// The schema of the database `conn` is on, beside `migrator`'s.
pub(super) async fn status(
    conn: &mut AnyConnection,
    backend: Backend,
    migrator: &Migrator,
) -> std::result::Result<SchemaStatus, sqlx::Error> {
    let known = known(migrator);
    let applied = read_applied(conn, backend).await?;
    Ok(SchemaStatus {
        binary: known.iter().map(|k| k.version).max().unwrap_or(0),
        database: applied.iter().map(|a| a.version).max().unwrap_or(0),
        pending: pending(&known, &applied).map(|p| p.iter().map(info).collect()),
    })
}

/// One migration, as `clawfed-hub migrate` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationInfo {
    pub version: i64,
    pub description: String,
}

impl std::fmt::Display for MigrationInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04} {}", self.version, self.description)
    }
}

/// The database's schema does not match this binary's migrations.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// Migrations of this binary the database has not applied.
    #[error(
        "the database schema is behind this clawfed-hub: {} migration(s) pending ({}); run `clawfed-hub migrate` with the migration role (or set database.migrateOnStart) before starting it",
        pending.len(),
        list(pending)
    )]
    Pending { pending: Vec<MigrationInfo> },
    /// The database was migrated by a newer release (a downgrade).
    #[error(
        "the database schema is at migration {database}, newer than this clawfed-hub knows (up to {binary}): a newer release migrated it; run that release or a newer one (downgrades are not supported)"
    )]
    Newer { database: i64, binary: i64 },
    /// An applied migration this binary does not have, below its newest.
    #[error(
        "the database has applied migration {version}, which this clawfed-hub does not have: it was migrated by another build"
    )]
    Unknown { version: i64 },
    /// An applied migration whose text differs from this binary's.
    #[error(
        "migration {version} was applied with a different text than this clawfed-hub's: it was migrated by another build"
    )]
    Modified { version: i64 },
    /// A migration failed part-way.
    #[error(
        "migration {version} failed part-way (its row in {TABLE} is not marked successful): repair the schema by hand, delete that row and run `clawfed-hub migrate` again"
    )]
    Dirty { version: i64 },
}

fn list(migrations: &[MigrationInfo]) -> String {
    const SHOWN: usize = 5;
    let mut names: Vec<String> = migrations
        .iter()
        .take(SHOWN)
        .map(|m| m.to_string())
        .collect();
    if migrations.len() > SHOWN {
        names.push(format!("and {} more", migrations.len() - SHOWN));
    }
    names.join(", ")
}

/// A migration this binary embeds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Known<'a> {
    pub version: i64,
    pub description: &'a str,
    pub checksum: &'a [u8],
}

/// A row of the bookkeeping table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Applied {
    pub version: i64,
    pub checksum: Vec<u8>,
    pub success: bool,
}

/// The migrations of `known` that `applied` lacks, in order; an error when
/// the database does not belong to this binary's history. Pure.
pub(super) fn pending<'a>(
    known: &[Known<'a>],
    applied: &[Applied],
) -> std::result::Result<Vec<Known<'a>>, SchemaError> {
    let binary = known.iter().map(|k| k.version).max().unwrap_or(0);
    if let Some(database) = applied.iter().map(|a| a.version).max()
        && database > binary
    {
        return Err(SchemaError::Newer { database, binary });
    }
    for a in applied {
        if !a.success {
            return Err(SchemaError::Dirty { version: a.version });
        }
        match known.iter().find(|k| k.version == a.version) {
            None => return Err(SchemaError::Unknown { version: a.version }),
            Some(k) if k.checksum != a.checksum.as_slice() => {
                return Err(SchemaError::Modified { version: a.version });
            }
            Some(_) => {}
        }
    }
    Ok(known
        .iter()
        .filter(|k| !applied.iter().any(|a| a.version == k.version))
        .copied()
        .collect())
}

fn known(migrator: &Migrator) -> Vec<Known<'_>> {
    migrator
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
        .map(|m| Known {
            version: m.version,
            description: &m.description,
            checksum: &m.checksum,
        })
        .collect()
}

fn info(k: &Known<'_>) -> MigrationInfo {
    MigrationInfo {
        version: k.version,
        description: k.description.to_owned(),
    }
}

/// The bookkeeping table's rows; none when it does not exist yet.
async fn read_applied(
    conn: &mut AnyConnection,
    backend: Backend,
) -> std::result::Result<Vec<Applied>, sqlx::Error> {
    // Existence first: the application role may not create it.
    let exists_sql = match backend {
        Backend::Postgres => "SELECT CAST(to_regclass('_sqlx_migrations') AS TEXT)",
        Backend::Sqlite => {
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'"
        }
    };
    let exists: Option<Option<String>> = sqlx::query_scalar(exists_sql)
        .fetch_optional(&mut *conn)
        .await?;
    if exists.flatten().is_none() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(
        "SELECT version, checksum, CAST(success AS INTEGER) AS success \
         FROM _sqlx_migrations ORDER BY version",
    )
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(Applied {
                version: r.try_get("version")?,
                checksum: r.try_get("checksum")?,
                success: r.try_get::<i64, _>("success")? != 0,
            })
        })
        .collect()
}

/// Applies or checks `migrator`'s migrations on `conn`; returns the ones
/// it applied. Applying holds sqlx's migration lock (an advisory lock on
/// PostgreSQL), so replicas or jobs migrating together apply each once.
pub(super) async fn prepare(
    conn: &mut AnyConnection,
    backend: Backend,
    migrator: &Migrator,
    mode: Migrations,
    classify: fn(sqlx::Error) -> StoreError,
) -> Result<Vec<MigrationInfo>> {
    if mode == Migrations::Inspect {
        return Ok(Vec::new());
    }
    let known = known(migrator);
    if mode == Migrations::Require {
        let applied = read_applied(conn, backend).await.map_err(classify)?;
        let pending = pending(&known, &applied)?;
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        return Err(SchemaError::Pending {
            pending: pending.iter().map(info).collect(),
        }
        .into());
    }
    conn.lock().await?;
    let applied = apply_locked(conn, backend, migrator, &known, classify).await;
    // Unlocked on error too; a failed unlock is reported after the cause.
    let unlocked = conn.unlock().await;
    let applied = applied?;
    unlocked?;
    Ok(applied)
}

async fn apply_locked(
    conn: &mut AnyConnection,
    backend: Backend,
    migrator: &Migrator,
    known: &[Known<'_>],
    classify: fn(sqlx::Error) -> StoreError,
) -> Result<Vec<MigrationInfo>> {
    conn.ensure_migrations_table(TABLE).await?;
    let applied = read_applied(conn, backend).await.map_err(classify)?;
    let pending = pending(known, &applied)?;
    let mut done = Vec::new();
    for k in &pending {
        let migration = migrator
            .iter()
            .find(|m| m.version == k.version && m.migration_type.is_up_migration())
            .expect("a pending migration is one of the migrator's");
        conn.apply(TABLE, migration).await?;
        done.push(info(k));
    }
    Ok(done)
}

/// The newest applied migration (0 on an empty database).
pub(super) async fn newest_applied(
    conn: &mut AnyConnection,
    backend: Backend,
) -> std::result::Result<i64, sqlx::Error> {
    let applied = read_applied(conn, backend).await?;
    Ok(applied.iter().map(|a| a.version).max().unwrap_or(0))
}

/// Grants `role` what the hub needs at run time and nothing more: the
/// schema's use, reading and writing rows of every table, sequences and the
/// schema's functions; the bookkeeping table only read (the hub checks it
/// at start). PostgreSQL; run by the migration role after migrating, so
/// tables a migration adds are granted too. Idempotent.
pub(super) async fn grant_application_role(
    conn: &mut AnyConnection,
    role: &str,
) -> std::result::Result<String, sqlx::Error> {
    let schema: String = sqlx::query_scalar("SELECT CAST(current_schema() AS TEXT)")
        .fetch_one(&mut *conn)
        .await?;
    let (s, r) = (quote_ident(&schema), quote_ident(role));
    let sql = format!(
        "GRANT USAGE ON SCHEMA {s} TO {r}; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {r}; \
         GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {s} TO {r}; \
         GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {s} TO {r}; \
         REVOKE INSERT, UPDATE, DELETE ON {s}.{TABLE} FROM {r};"
    );
    let mut tx = conn.begin().await?;
    // Names are quoted identifiers, never spliced raw.
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(schema)
}

/// A PostgreSQL identifier quoted: `"` around it, inner `"` doubled.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<Known<'static>> {
        vec![
            Known {
                version: 1,
                description: "init",
                checksum: b"a",
            },
            Known {
                version: 2,
                description: "link",
                checksum: b"b",
            },
            Known {
                version: 3,
                description: "pipeline",
                checksum: b"c",
            },
        ]
    }

    fn applied(version: i64, checksum: &[u8]) -> Applied {
        Applied {
            version,
            checksum: checksum.to_vec(),
            success: true,
        }
    }

    fn versions(p: &[Known<'_>]) -> Vec<i64> {
        p.iter().map(|k| k.version).collect()
    }

    #[test]
    fn an_empty_database_has_every_migration_pending() {
        assert_eq!(versions(&pending(&known(), &[]).unwrap()), [1, 2, 3]);
    }

    #[test]
    fn applied_migrations_are_not_pending() {
        let applied = [applied(1, b"a"), applied(2, b"b")];
        assert_eq!(versions(&pending(&known(), &applied).unwrap()), [3]);
        assert!(pending(&known(), &applied_all()).unwrap().is_empty());
    }

    fn applied_all() -> Vec<Applied> {
        vec![applied(1, b"a"), applied(2, b"b"), applied(3, b"c")]
    }

    #[test]
    fn a_newer_database_names_both_versions() {
        let mut a = applied_all();
        a.push(applied(7, b"z"));
        match pending(&known(), &a) {
            Err(
                e @ SchemaError::Newer {
                    database: 7,
                    binary: 3,
                },
            ) => {
                let text = e.to_string();
                assert!(text.contains('7') && text.contains('3'), "{text}");
            }
            other => panic!("expected Newer, got {other:?}"),
        }
    }

    #[test]
    fn foreign_modified_and_dirty_migrations_are_refused() {
        let gap = [applied(1, b"a"), applied(2, b"b")];
        let known_gap: Vec<_> = known().into_iter().filter(|k| k.version != 2).collect();
        assert!(matches!(
            pending(&known_gap, &gap),
            Err(SchemaError::Unknown { version: 2 })
        ));
        assert!(matches!(
            pending(&known(), &[applied(1, b"x")]),
            Err(SchemaError::Modified { version: 1 })
        ));
        let mut dirty = applied(2, b"b");
        dirty.success = false;
        assert!(matches!(
            pending(&known(), &[applied(1, b"a"), dirty]),
            Err(SchemaError::Dirty { version: 2 })
        ));
    }

    #[test]
    fn the_pending_error_names_the_command() {
        let err = SchemaError::Pending {
            pending: (1..=7)
                .map(|v| MigrationInfo {
                    version: v,
                    description: format!("step {v}"),
                })
                .collect(),
        };
        let text = err.to_string();
        assert!(text.contains("`clawfed-hub migrate`"), "{text}");
        assert!(text.contains("7 migration(s) pending"), "{text}");
        assert!(
            text.contains("0001 step 1") && text.contains("and 2 more"),
            "{text}"
        );
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("app"), "\"app\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
