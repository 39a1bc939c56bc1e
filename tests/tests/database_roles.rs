//! Issue 34, part 3: least-privilege database roles, on the real
//! PostgreSQL test server with real `clawfed-hub` processes.
//!
//! A migration role owns the database and runs `clawfed-hub migrate`,
//! which grants the application role the rows of every table; `serve` and
//! the operator commands run as the application role, which cannot change
//! the schema. `serve` refuses a database with a pending migration (naming
//! `clawfed-hub migrate`) and one a newer release migrated (naming both
//! versions). SQLite, a file the hub owns, keeps migrating on start unless
//! told not to.
//!
//! The binaries come from this target directory: run
//! `cargo build -p clawfed-hub --bins` first.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use clawfed_hub::client::HubClient;
use clawfed_tests::api::HubTestExt;
use clawfed_tests::db::{login_url, postgres_url};
use clawfed_tests::link::start_spoke_to;
use clawfed_tests::procs::{Proc, bin};
use sqlx::Connection;

/// The migrations this build embeds: (count, newest version).
fn embedded() -> (usize, i64) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hub/migrations/postgres");
    let versions: Vec<i64> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.ends_with(".sql")
                .then(|| name.split('_').next()?.parse().ok())?
        })
        .collect();
    (versions.len(), versions.into_iter().max().unwrap())
}

/// A database owned by a migration role of its own, and an application
/// role, on the test server (whose role may create both).
struct Roles {
    owner: String,
    app: String,
    database: String,
}

impl Roles {
    async fn create() -> Self {
        let id = &uuid::Uuid::new_v4().simple().to_string()[..12];
        let me = Self {
            owner: format!("cf_migrate_{id}"),
            app: format!("cf_app_{id}"),
            database: format!("cf_roles_{id}"),
        };
        let mut admin = sqlx::PgConnection::connect(&postgres_url()).await.unwrap();
        // The database as an operator would make it: owned by the migration
        // role (PostgreSQL 15 makes its owner the owner of schema public,
        // where no other role may create anything).
        for sql in [
            format!("CREATE ROLE {} LOGIN PASSWORD 'owner-pw'", me.owner),
            format!("CREATE ROLE {} LOGIN PASSWORD 'app-pw'", me.app),
            format!("GRANT {} TO CURRENT_USER", me.owner),
            format!("CREATE DATABASE {} OWNER {}", me.database, me.owner),
        ] {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
                .execute(&mut admin)
                .await
                .unwrap_or_else(|e| {
                    panic!("{sql}: {e} (scripts/postgres.sh gives the test role CREATEROLE)")
                });
        }
        me
    }

    fn owner_url(&self) -> String {
        login_url(&postgres_url(), &self.owner, "owner-pw", &self.database)
    }

    fn app_url(&self) -> String {
        login_url(&postgres_url(), &self.app, "app-pw", &self.database)
    }

    async fn drop_now(self) {
        let mut admin = sqlx::PgConnection::connect(&postgres_url()).await.unwrap();
        for sql in [
            format!("DROP DATABASE {} WITH (FORCE)", self.database),
            format!("DROP ROLE {}", self.app),
            format!("DROP ROLE {}", self.owner),
        ] {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
                .execute(&mut admin)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
}

/// `clawfed-hub ARGS` on `db_url`, every listener on a free loopback port,
/// its files in `dir`.
fn hub(dir: &Path, db_url: &str, args: &[&str]) -> Command {
    // The link certificate names the address the test's spoke dials.
    let config = dir.join("hub.yaml");
    std::fs::write(
        &config,
        "version: 1\nlink:\n  serverNames: [\"127.0.0.1\"]\n  heartbeatSeconds: 1\n",
    )
    .unwrap();
    let mut c = Command::new(bin("clawfed-hub").unwrap());
    c.args(args)
        .env("CLAWFED_CONFIG", &config)
        .env_remove("OCC_CONFIG_PATH")
        .env("CLAWFED_DATABASE_URL", db_url)
        .env("CLAWFED_REST_ADDR", "127.0.0.1:0")
        .env("CLAWFED_GRPC_ADDR", "127.0.0.1:0")
        .env("CLAWFED_METRICS_ADDR", "127.0.0.1:0")
        .env("CLAWFED_LINK_ADDR", "127.0.0.1:0")
        .env("CLAWFED_TUNNEL_ADDR", "127.0.0.1:0")
        .env("CLAWFED_LINK_CA_DIR", dir.join("ca"))
        .env("CLAWFED_SECRETS_KEY_FILE", dir.join("secrets.key"))
        .env("CLAWFED_LOG", "warn");
    c
}

/// Runs a command to completion, bounded.
async fn run(mut c: Command) -> Output {
    tokio::time::timeout(
        Duration::from_secs(60),
        tokio::task::spawn_blocking(move || c.output()),
    )
    .await
    .expect("command hung")
    .unwrap()
    .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs it and requires success: its stdout.
async fn ok(c: Command) -> String {
    let what = format!("{c:?}");
    let out = run(c).await;
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Runs it and requires failure: its stderr.
async fn refused(c: Command) -> String {
    let what = format!("{c:?}");
    let out = run(c).await;
    assert!(
        !out.status.success(),
        "{what} succeeded: {}",
        text(&out.stdout)
    );
    text(&out.stderr)
}

/// The SQLSTATE of a statement `url`'s role runs, or None when it worked.
async fn sqlstate(url: &str, sql: &str) -> Option<String> {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    match sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
    {
        Ok(_) => None,
        Err(sqlx::Error::Database(e)) => Some(e.code().unwrap_or_default().into_owned()),
        Err(e) => panic!("{sql}: {e}"),
    }
}

/// Permission denied (insufficient_privilege), what PostgreSQL answers a
/// role without the right (including "must be owner").
const DENIED: &str = "42501";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_application_role_serves_without_ddl_rights_after_migrate_by_the_owner() {
    let (count, newest) = embedded();
    let roles = Roles::create().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (owner, app) = (roles.owner_url(), roles.app_url());

    // Nothing migrated yet: serve refuses, naming the command.
    let err = refused(hub(dir, &app, &["serve"])).await;
    assert!(err.contains("`clawfed-hub migrate`"), "{err}");
    assert!(
        err.contains(&format!("{count} migration(s) pending")),
        "{err}"
    );
    // The application role cannot migrate either: it may not create tables.
    let err = refused(hub(dir, &app, &["migrate"])).await;
    assert!(err.contains("permission denied"), "{err}");
    // `version` reads the schema without migrating, as either role.
    let out = ok(hub(dir, &app, &["version"])).await;
    assert!(out.contains("link contract: clawfed.link.v1"), "{out}");
    assert!(
        out.contains(&format!(
            "schema at 0000, this clawfed-hub's at {newest:04}: {count} migration(s) pending"
        )),
        "{out}"
    );
    assert!(out.contains("spokes: not read"), "{out}");

    // The owner migrates, printing each migration, and grants the
    // application role; a second run applies nothing.
    let mut migrate = hub(dir, &owner, &["migrate"]);
    migrate.env("CLAWFED_DATABASE_APPLICATION_ROLE", &roles.app);
    let out = ok(migrate).await;
    let applied: Vec<&str> = out.lines().filter(|l| l.starts_with("applied ")).collect();
    assert_eq!(applied.len(), count, "{out}");
    assert_eq!(applied[0], "applied 0001 init", "{out}");
    assert!(
        out.contains(&format!(
            "{count} migration(s) applied; schema at {newest:04}"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("granted role {}", roles.app)),
        "{out}"
    );
    let mut again = hub(dir, &owner, &["migrate"]);
    again.env("CLAWFED_DATABASE_APPLICATION_ROLE", &roles.app);
    let out = ok(again).await;
    assert!(
        out.contains(&format!("no pending migrations; schema at {newest:04}")),
        "{out}"
    );

    // The application role has rows, not the schema.
    for ddl in [
        "CREATE TABLE intruder (id INT)",
        "ALTER TABLE agents ADD COLUMN intruder INT",
        "DROP TABLE agents",
        "CREATE INDEX intruder ON agents (name)",
        "DELETE FROM _sqlx_migrations",
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (999999, 'x', true, '\\x00', 0)",
    ] {
        assert_eq!(
            sqlstate(&app, ddl).await.as_deref(),
            Some(DENIED),
            "the application role ran {ddl}"
        );
    }
    assert_eq!(
        sqlstate(&app, "SELECT count(*) FROM agents, _sqlx_migrations").await,
        None
    );

    // The hub works as the application role: it starts (its link CA and
    // keys written), the operator commands run, a spoke enrolls over the
    // link and comes online, the API creates, deploys and reads.
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut serve = Proc::spawn("hub-app", &mut hub(dir, &app, &["serve"]), &logs).unwrap();
    let listening = serve.hub_listening(Duration::from_secs(60)).await.unwrap();
    let admin_token = [
        "token",
        "create",
        "--name",
        "ops",
        "--role",
        "installation-admin",
    ];
    let token = ok(hub(dir, &app, &admin_token)).await;
    let bootstrap = ok(hub(
        dir,
        &app,
        &["cluster", "token", "create", "exec-roles"],
    ))
    .await;
    let ca = ok(hub(dir, &app, &["cluster", "ca"])).await;
    let spoke_dir = tempfile::tempdir().unwrap();
    let spoke = start_spoke_to(
        &listening.field("link").unwrap(),
        &ca,
        "exec-roles",
        Some(bootstrap.trim().to_owned()),
        spoke_dir.path(),
    );
    let rest = listening.field("rest").unwrap();
    let client = HubClient::new(&rest, Some(token.trim().to_owned())).unwrap();
    client
        .wait_online("exec-roles", Duration::from_secs(30))
        .await
        .unwrap();
    let (ns, agent) = client
        .tenant_with_agent("exec-roles", "dedicated-codex")
        .await
        .unwrap();
    let revision = client.deploy_current(&ns.name, &agent.name).await.unwrap();
    assert_eq!(revision.number, 1);
    assert_eq!(
        client.revisions(&ns.name, &agent.name).await.unwrap().len(),
        1
    );
    // The enrolled spoke and its version, beside the current schema.
    let out = ok(hub(dir, &app, &["version"])).await;
    // What the in-process test spoke reports as its version.
    let spoke_version = "test";
    assert!(
        out.contains(&format!(
            "schema at {newest:04}, this clawfed-hub's at {newest:04}: current"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "spokes: 1 enrolled; oldest {spoke_version}, newest {spoke_version}"
        )) && out.contains(&format!("  exec-roles {spoke_version} online")),
        "{out}"
    );
    spoke.stop().await.unwrap();
    serve.terminate().await;

    // A newer release's migration in the database: serve refuses, naming
    // the database's version and its own (a downgrade).
    let future = newest + 1000;
    let mut conn = sqlx::PgConnection::connect(&owner).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES ($1, 'from a newer release', true, '\\x00', 0)",
    )
    .bind(future)
    .execute(&mut conn)
    .await
    .unwrap();
    let err = refused(hub(dir, &app, &["serve"])).await;
    assert!(
        err.contains(&format!("at migration {future}"))
            && err.contains(&format!("knows (up to {newest})")),
        "{err}"
    );
    let out = ok(hub(dir, &app, &["version"])).await;
    assert!(
        out.contains(&format!("schema at {future:04}, this clawfed-hub's at {newest:04}: the database schema is at migration {future}, newer")),
        "{out}"
    );
    // An upgrade not migrated yet: the newest migration unrecorded.
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version >= $1")
        .bind(newest)
        .execute(&mut conn)
        .await
        .unwrap();
    drop(conn);
    let err = refused(hub(dir, &app, &["serve"])).await;
    assert!(err.contains("`clawfed-hub migrate`"), "{err}");
    assert!(
        err.contains(&format!("1 migration(s) pending ({newest:04} ")),
        "{err}"
    );
    roles.drop_now().await;
}

/// SQLite is a file the hub owns: `serve` migrates it on start (the
/// embedded one-command start), unless `database.migrateOnStart` is off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_migrates_on_start_unless_told_not_to() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let url = format!("sqlite://{}", dir.join("hub.db").display());
    let mut off = hub(dir, &url, &["serve"]);
    off.env("CLAWFED_DATABASE_MIGRATE_ON_START", "false");
    let err = refused(off).await;
    assert!(err.contains("`clawfed-hub migrate`"), "{err}");
    let mut serve = Proc::spawn("hub-sqlite", &mut hub(dir, &url, &["serve"]), &logs).unwrap();
    serve.hub_listening(Duration::from_secs(60)).await.unwrap();
    serve.terminate().await;
    let out = ok(hub(dir, &url, &["migrate"])).await;
    assert!(out.starts_with("no pending migrations"), "{out}");
    let out = ok(hub(dir, &url, &["version"])).await;
    assert!(out.contains(": current\n"), "{out}");
    assert!(
        out.contains("spokes: 0 enrolled; none has reported a version"),
        "{out}"
    );
}
