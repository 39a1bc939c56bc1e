//! The PostgreSQL and SQLite migrations must describe the same schema: the
//! store conformance suite only notices a column missing on one backend
//! when some test happens to touch it, and a migration added to one
//! directory alone only shows up on the other backend in production.
//!
//! The check reads both directories, requires the same numbered files, and
//! replays each file's DDL (CREATE TABLE, ALTER TABLE ADD/DROP/RENAME, DROP
//! TABLE) with a small tokenizer into a table -> columns map. After every
//! file the two maps must be equal. Column types are not compared
//! (`BIGSERIAL` vs `INTEGER PRIMARY KEY AUTOINCREMENT` is the expected
//! difference); indexes and data statements are ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Table name -> column names, all lowercase.
type Schema = BTreeMap<String, BTreeSet<String>>;

fn migrations_dir(backend: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(backend)
}

/// The `.sql` file names of a directory, sorted (sqlx applies them in
/// version order, which for zero-padded names is the name order).
fn sql_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| {
            entry
                .expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".sql"))
        .collect();
    names.sort();
    names
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Punct(char),
    /// A quoted literal; its content never names a table or column.
    Literal,
}

/// Splits SQL into words (lowercased, `"quoted"` identifiers unquoted),
/// single-character punctuation and string literals; drops `--` and `/* */`
/// comments.
fn tokenize(sql: &str) -> Vec<Token> {
    let chars: Vec<char> = sql.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i += 2;
        } else if c == '\'' {
            // '' inside a literal is an escaped quote.
            i += 1;
            while i < chars.len() {
                if chars[i] == '\'' {
                    if chars.get(i + 1) == Some(&'\'') {
                        i += 2;
                        continue;
                    }
                    break;
                }
                i += 1;
            }
            i += 1;
            tokens.push(Token::Literal);
        } else if c == '"' || c == '`' {
            let start = i + 1;
            i = start;
            while i < chars.len() && chars[i] != c {
                i += 1;
            }
            tokens.push(Token::Word(
                chars[start..i.min(chars.len())]
                    .iter()
                    .collect::<String>()
                    .to_lowercase(),
            ));
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token::Word(
                chars[start..i].iter().collect::<String>().to_lowercase(),
            ));
        } else {
            tokens.push(Token::Punct(c));
            i += 1;
        }
    }
    tokens
}

/// A cursor over one statement's tokens.
struct Statement<'a> {
    tokens: &'a [Token],
    pos: usize,
}

impl<'a> Statement<'a> {
    fn peek_word(&self) -> Option<&'a str> {
        match self.tokens.get(self.pos) {
            Some(Token::Word(w)) => Some(w.as_str()),
            _ => None,
        }
    }

    /// Consumes the next token if it is the keyword `kw`.
    fn eat(&mut self, kw: &str) -> bool {
        if self.peek_word() == Some(kw) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Consumes `IF [NOT] EXISTS` if present.
    fn eat_if_exists(&mut self) {
        if self.eat("if") {
            self.eat("not");
            assert!(self.eat("exists"), "IF without EXISTS in {:?}", self.tokens);
        }
    }

    /// An identifier, taking the last part of `schema.name`.
    fn name(&mut self) -> String {
        let mut name = self.word();
        while self.tokens.get(self.pos) == Some(&Token::Punct('.')) {
            self.pos += 1;
            name = self.word();
        }
        name
    }

    fn word(&mut self) -> String {
        match self.tokens.get(self.pos) {
            Some(Token::Word(w)) => {
                self.pos += 1;
                w.clone()
            }
            other => panic!("expected a name, found {other:?} in {:?}", self.tokens),
        }
    }
}

/// Words that start a table constraint rather than a column definition.
const CONSTRAINT_WORDS: &[&str] = &[
    "constraint",
    "primary",
    "unique",
    "foreign",
    "check",
    "exclude",
];

/// Applies one migration file's DDL to `schema`. Panics on DDL touching a
/// table or column the schema does not know, which is drift as well.
fn apply(schema: &mut Schema, sql: &str, file: &str) {
    let tokens = tokenize(sql);
    for statement in tokens.split(|t| *t == Token::Punct(';')) {
        let mut st = Statement {
            tokens: statement,
            pos: 0,
        };
        if st.eat("create") {
            st.eat("temporary");
            st.eat("temp");
            st.eat("unlogged");
            if !st.eat("table") {
                continue; // indexes, views, triggers: not compared
            }
            st.eat_if_exists();
            let table = st.name();
            schema.insert(
                table.clone(),
                create_table_columns(&st.tokens[st.pos..], file),
            );
        } else if st.eat("alter") {
            if !st.eat("table") {
                continue;
            }
            st.eat_if_exists();
            st.eat("only");
            let table = st.name();
            alter_table(schema, &table, &mut st, file);
        } else if st.eat("drop") {
            if !st.eat("table") {
                continue;
            }
            st.eat_if_exists();
            let table = st.name();
            schema.remove(&table);
        }
    }
}

/// Column names of `( col type ..., col type ..., CONSTRAINT ... )`.
fn create_table_columns(rest: &[Token], file: &str) -> BTreeSet<String> {
    assert_eq!(
        rest.first(),
        Some(&Token::Punct('(')),
        "{file}: CREATE TABLE without a column list (AS SELECT is not supported here)"
    );
    let mut columns = BTreeSet::new();
    let mut depth = 0usize;
    // True at the first token of each top-level definition.
    let mut at_definition = false;
    for token in rest {
        match token {
            Token::Punct('(') => {
                depth += 1;
                if depth == 1 {
                    at_definition = true;
                }
                continue;
            }
            Token::Punct(')') => {
                depth -= 1;
                continue;
            }
            Token::Punct(',') if depth == 1 => {
                at_definition = true;
                continue;
            }
            _ => {}
        }
        if at_definition && depth == 1 {
            at_definition = false;
            if let Token::Word(word) = token
                && !CONSTRAINT_WORDS.contains(&word.as_str())
            {
                columns.insert(word.clone());
            }
        }
    }
    columns
}

fn alter_table(schema: &mut Schema, table: &str, st: &mut Statement<'_>, file: &str) {
    let columns = schema.get_mut(table).unwrap_or_else(|| {
        panic!("{file}: ALTER TABLE {table}, which no earlier migration creates")
    });
    if st.eat("add") {
        if st.eat("constraint") || CONSTRAINT_WORDS.iter().any(|w| st.peek_word() == Some(*w)) {
            return;
        }
        st.eat("column");
        st.eat_if_exists();
        columns.insert(st.word());
    } else if st.eat("drop") {
        if st.eat("constraint") {
            return;
        }
        st.eat("column");
        st.eat_if_exists();
        let column = st.word();
        assert!(
            columns.remove(&column),
            "{file}: DROP COLUMN {table}.{column}, which does not exist"
        );
    } else if st.eat("rename") {
        if st.eat("to") {
            let new = st.name();
            let columns = schema.remove(table).expect("table checked above");
            schema.insert(new, columns);
        } else {
            st.eat("column");
            let old = st.word();
            assert!(st.eat("to"), "{file}: RENAME COLUMN without TO");
            let new = st.word();
            assert!(
                columns.remove(&old),
                "{file}: RENAME COLUMN {table}.{old}, which does not exist"
            );
            columns.insert(new);
        }
    }
    // ALTER COLUMN (type, default, NOT NULL) does not change the names.
}

/// Where two schemas differ, one line per table or column.
fn differences(postgres: &Schema, sqlite: &Schema) -> Vec<String> {
    let mut out = Vec::new();
    let tables: BTreeSet<&String> = postgres.keys().chain(sqlite.keys()).collect();
    for table in tables {
        match (postgres.get(table), sqlite.get(table)) {
            (Some(_), None) => out.push(format!("table {table} only in postgres")),
            (None, Some(_)) => out.push(format!("table {table} only in sqlite")),
            (Some(pg), Some(lite)) => {
                for column in pg.difference(lite) {
                    out.push(format!("column {table}.{column} only in postgres"));
                }
                for column in lite.difference(pg) {
                    out.push(format!("column {table}.{column} only in sqlite"));
                }
            }
            (None, None) => unreachable!(),
        }
    }
    out
}

/// Compares two migration directories; returns every drift found.
fn drift(postgres_dir: &Path, sqlite_dir: &Path) -> Vec<String> {
    let pg_files = sql_files(postgres_dir);
    let lite_files = sql_files(sqlite_dir);
    let mut out = Vec::new();
    for name in &pg_files {
        if !lite_files.contains(name) {
            out.push(format!("migration {name} only in postgres"));
        }
    }
    for name in &lite_files {
        if !pg_files.contains(name) {
            out.push(format!("migration {name} only in sqlite"));
        }
    }
    if !out.is_empty() {
        return out;
    }
    // Compare after every file, so a drift is reported against the file
    // that introduced it.
    let (mut pg, mut lite) = (Schema::new(), Schema::new());
    for name in &pg_files {
        let read = |dir: &Path| {
            fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("read {name}: {e}"))
        };
        apply(&mut pg, &read(postgres_dir), &format!("postgres/{name}"));
        apply(&mut lite, &read(sqlite_dir), &format!("sqlite/{name}"));
        out.extend(
            differences(&pg, &lite)
                .into_iter()
                .map(|d| format!("after {name}: {d}")),
        );
        if !out.is_empty() {
            break;
        }
    }
    out
}

#[test]
fn postgres_and_sqlite_migrations_describe_the_same_schema() {
    let postgres = migrations_dir("postgres");
    let sqlite = migrations_dir("sqlite");
    assert!(
        !sql_files(&postgres).is_empty(),
        "no migrations found in {}",
        postgres.display()
    );
    let found = drift(&postgres, &sqlite);
    assert!(
        found.is_empty(),
        "migration drift:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_replayed_schema_has_the_tables_and_columns_the_store_uses() {
    // Guards the parser itself: if it silently read nothing, the drift check
    // above would compare two empty maps and pass.
    for backend in ["postgres", "sqlite"] {
        let dir = migrations_dir(backend);
        let mut schema = Schema::new();
        for name in sql_files(&dir) {
            apply(
                &mut schema,
                &fs::read_to_string(dir.join(&name)).unwrap(),
                &name,
            );
        }
        let work_items = schema.get("work_items").expect("work_items table");
        for column in ["id", "state", "run_at", "lease_expires_at", "completed_at"] {
            assert!(
                work_items.contains(column),
                "{backend}: work_items.{column}"
            );
        }
        assert!(
            !work_items.contains("primary"),
            "{backend}: constraint read as column"
        );
        // Added by ALTER TABLE in 0002 and 0004.
        assert!(schema["clusters"].contains("next_sequence"), "{backend}");
        assert!(
            schema["bootstrap_tokens"].contains("approved_at"),
            "{backend}"
        );
        // Table-level PRIMARY KEY / UNIQUE lines are not columns.
        assert_eq!(
            schema["outbox"],
            [
                "acked_at",
                "cluster_id",
                "created_at",
                "generation",
                "kind",
                "sequence",
                "spec",
                "target"
            ]
            .map(String::from)
            .into(),
            "{backend}"
        );
    }
}

/// Writes `files` (name, SQL) into a fresh directory.
fn write_dir(root: &Path, backend: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = root.join(backend);
    fs::create_dir_all(&dir).unwrap();
    for (name, sql) in files {
        fs::write(dir.join(name), sql).unwrap();
    }
    dir
}

const INIT_PG: &str = "CREATE TABLE t (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, \
                       UNIQUE (name));";
const INIT_SQLITE: &str = "-- the SQLite spelling\nCREATE TABLE t (id INTEGER PRIMARY KEY \
                           AUTOINCREMENT, name TEXT NOT NULL, UNIQUE (name));";

#[test]
fn a_type_difference_is_not_drift() {
    let root = tempfile::tempdir().unwrap();
    let pg = write_dir(root.path(), "postgres", &[("0001_init.sql", INIT_PG)]);
    let lite = write_dir(root.path(), "sqlite", &[("0001_init.sql", INIT_SQLITE)]);
    assert_eq!(drift(&pg, &lite), Vec::<String>::new());
}

#[test]
fn a_migration_in_one_directory_only_is_drift() {
    let root = tempfile::tempdir().unwrap();
    let pg = write_dir(
        root.path(),
        "postgres",
        &[
            ("0001_init.sql", INIT_PG),
            ("0002_more.sql", "ALTER TABLE t ADD COLUMN x BIGINT;"),
        ],
    );
    let lite = write_dir(root.path(), "sqlite", &[("0001_init.sql", INIT_SQLITE)]);
    assert_eq!(
        drift(&pg, &lite),
        ["migration 0002_more.sql only in postgres"]
    );
}

#[test]
fn a_column_missing_on_one_side_is_drift() {
    let root = tempfile::tempdir().unwrap();
    let pg = write_dir(
        root.path(),
        "postgres",
        &[
            ("0001_init.sql", INIT_PG),
            (
                "0002_more.sql",
                "ALTER TABLE t ADD COLUMN x BIGINT; ALTER TABLE t ADD COLUMN y TEXT DEFAULT 'a;b';",
            ),
        ],
    );
    let lite = write_dir(
        root.path(),
        "sqlite",
        &[
            ("0001_init.sql", INIT_SQLITE),
            ("0002_more.sql", "ALTER TABLE t ADD x BIGINT;"),
        ],
    );
    assert_eq!(
        drift(&pg, &lite),
        ["after 0002_more.sql: column t.y only in postgres"]
    );
}

#[test]
fn a_table_rebuilt_under_its_old_name_matches_an_added_column() {
    // SQLite changes a column the long way: new table, copy, drop, rename.
    let root = tempfile::tempdir().unwrap();
    let pg = write_dir(
        root.path(),
        "postgres",
        &[
            ("0001_init.sql", INIT_PG),
            ("0002_more.sql", "ALTER TABLE t ADD COLUMN x BIGINT;"),
        ],
    );
    let lite = write_dir(
        root.path(),
        "sqlite",
        &[
            ("0001_init.sql", INIT_SQLITE),
            (
                "0002_more.sql",
                "CREATE TABLE t_new (id INTEGER PRIMARY KEY, name TEXT, x BIGINT);\n\
                 INSERT INTO t_new (id, name) SELECT id, name FROM t;\n\
                 DROP TABLE t;\n\
                 ALTER TABLE t_new RENAME TO t;",
            ),
        ],
    );
    assert_eq!(drift(&pg, &lite), Vec::<String>::new());
    // And the same rebuild that forgets the column is caught.
    fs::write(
        lite.join("0002_more.sql"),
        "CREATE TABLE t_new (id INTEGER PRIMARY KEY, name TEXT);\n\
         DROP TABLE t; ALTER TABLE t_new RENAME TO t;",
    )
    .unwrap();
    assert_eq!(
        drift(&pg, &lite),
        ["after 0002_more.sql: column t.x only in postgres"]
    );
}
