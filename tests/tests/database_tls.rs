//! Issue 34, part 3: the hub's PostgreSQL connection verifies the server
//! (`sslmode=verify-full`, the CA in `sslrootcert`), on the real test
//! server, which `scripts/postgres.sh` makes serve TLS with a certificate
//! its test CA issued for 127.0.0.1 and localhost
//! (`CLAWFED_TEST_DATABASE_CA`). With that CA the store opens over TLS, in
//! process and through `clawfed-hub migrate`'s configuration; with another
//! CA (even one of the same name) the connection is refused, clearly.
//!
//! The binaries come from this target directory: run
//! `cargo build -p clawfed-hub --bins` first.

use std::process::Command;

use clawfed_hub::store::{self, StoreError};
use clawfed_tests::db::{postgres_ca, postgres_url, schema_url, with_query};
use clawfed_tests::procs::bin;
use sqlx::Connection;

/// A fresh schema on the test server (made over the plain URL); its name.
async fn fresh_schema() -> String {
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&postgres_url()).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&mut admin)
        .await
        .unwrap();
    schema
}

/// `base` verifying the server with the CA in `ca_file`.
fn verify_full(base: &str, ca_file: &str) -> String {
    with_query(
        &with_query(base, "sslmode=verify-full"),
        &format!("sslrootcert={ca_file}"),
    )
}

/// A CA the test server's certificate does not chain to, named `name`,
/// written into `dir`.
fn other_ca(dir: &std::path::Path, name: &str) -> String {
    let (pem, _) = clawfed_tests::certs::ca(name);
    let path = dir.join(format!("{}.crt", name.replace(' ', "-")));
    std::fs::write(&path, pem).unwrap();
    path.display().to_string()
}

/// Whether the store's connections are TLS (PostgreSQL's own view).
async fn over_tls(store: &store::SqlStore) -> bool {
    sqlx::query_scalar::<_, bool>("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

fn migrate(db_url: &str, dir: &std::path::Path) -> std::process::Output {
    Command::new(bin("clawfed-hub").unwrap())
        .arg("migrate")
        .env_remove("CLAWFED_CONFIG")
        .env_remove("OCC_CONFIG_PATH")
        .env("CLAWFED_DATABASE_URL", db_url)
        .env("CLAWFED_LINK_CA_DIR", dir.join("ca"))
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_with_the_servers_ca_connects_over_tls() {
    let ca = postgres_ca();
    let tmp = tempfile::tempdir().unwrap();
    let schema = fresh_schema().await;
    let url = verify_full(&schema_url(&postgres_url(), &schema), &ca);

    // The hub's own command, configured by the URL alone.
    let out = migrate(&url, tmp.path());
    assert!(
        out.status.success(),
        "migrate over verify-full: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The store the hub opens, by both names on the certificate.
    for host in ["127.0.0.1", "localhost"] {
        let url = url.replacen("@127.0.0.1:", &format!("@{host}:"), 1);
        assert!(url.contains(&format!("@{host}:")), "{url}");
        let store = store::open(
            &url,
            store::PoolSettings::default(),
            store::Migrations::Require,
        )
        .await
        .unwrap_or_else(|e| panic!("open over verify-full at {host}: {e}"));
        assert!(over_tls(&store).await, "{host}: the connection is not TLS");
    }
}

/// Another CA is refused whether its name differs (rustls finds no issuer:
/// `UnknownIssuer`) or is the test CA's own (only the key tells them
/// apart: `BadSignature`); the hub's error says the certificate is why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_with_another_ca_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let schema = fresh_schema().await;
    for (name, reason) in [
        ("another CA", "UnknownIssuer"),
        ("clawfed test PostgreSQL CA", "BadSignature"),
    ] {
        let ca = other_ca(tmp.path(), name);
        let url = verify_full(&schema_url(&postgres_url(), &schema), &ca);
        match store::connect(&url).await {
            // Unavailable: the hub retries a refused connection (an operator
            // may fix the CA file) rather than treating it as a bug.
            Err(e @ StoreError::Unavailable(_)) => {
                let text = e.to_string();
                assert!(
                    text.contains(&format!("invalid peer certificate: {reason}")),
                    "{name}: {text}"
                );
            }
            Err(e) => panic!("{name}: expected the database to be unavailable, got {e}"),
            Ok(_) => panic!("{name}: a server whose certificate another CA issued was trusted"),
        }
        let out = migrate(&url, tmp.path());
        assert!(
            !out.status.success(),
            "{name}: migrate trusted the wrong CA"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("database unavailable")
                && err.contains(&format!("invalid peer certificate: {reason}")),
            "{name}: the refusal says why: {err}"
        );
    }
}
