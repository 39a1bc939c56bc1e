//! Shared helpers for clawfed's integration tests.
//!
//! # Layout
//! - [`api`]: the tests' calls on the hub's REST API over `clawfed_hub::client::HubClient` (tenants, Agents, waits).
//! - [`certs`]: certificate authorities minted for one test.
//! - [`cleanup`]: what a test made in the clusters, removed when it ends.
//! - [`control_env`]: the hub's RBAC, Gateway storage and edge Gateway in the control cluster.
//! - [`faults`]: the seeded fault-injection run (hub, spokes, PostgreSQL, partitions) and its invariants.
//! - [`db`]: throwaway SQLite files and PostgreSQL schemas for store tests.
//! - [`hub`]: an in-process hub on `127.0.0.1:0` with its REST and gRPC clients.
//! - [`link`]: in-process spokes that enroll with and connect to a test hub.
//! - [`netns`]: a network namespace with a veth pair, for partitions.
//! - [`openclaw`]: the real OpenClaw runtime in the test clusters: its image, the model stand-in, a chat turn.
//! - [`openapi`]: the served OpenAPI document as an oracle: operations and a schema validator.
//! - [`properties`]: property-based tests of the pure cores (suite and bench).
//! - [`procs`]: `clawfed-hub` / `clawfed-spoke` child processes.
//! - [`proxy`]: a TCP proxy in front of the hub's link, to partition a spoke.
//! - [`live_pods`]: each Agent's live Harness Pods across clusters, watched.
//! - [`spoke_env`]: the spoke's own RBAC and ServiceAccount client in a test cluster.
//! - [`tunnel`]: a Gateway's CONNECT to the hub's tunnel ingress.
//! - [`kube_env`]: attach to the real Kubernetes test clusters (`e2e/cluster.sh`).
//! - [`kube_spoke`]: an in-process Kubernetes spoke, optionally behind a partitionable proxy.
//! - [`webdriver`]: headless Chromium over WebDriver (Debian's chromedriver), for the web view.
//! - [`poll`]: the one polling helper ([`until`]: fallible, every 20 ms;
//!   [`wait_for`]: infallible, failing the test at the deadline).

pub mod api;
pub mod certs;
pub mod cleanup;
pub mod control_env;
pub mod db;
pub mod faults;
pub mod hub;
pub mod kube_env;
pub mod kube_spoke;
pub mod link;
pub mod live_pods;
pub mod netns;
pub mod openapi;
pub mod openclaw;
pub mod procs;
pub mod properties;
pub mod proxy;
pub mod seed;
pub mod spoke_env;
pub mod tunnel;
pub mod webdriver;

/// The one polling helper: calls `f` every `every` until it yields
/// `Some`, failing after `within` with the last error `f` returned.
pub async fn poll<T, F, Fut>(
    within: std::time::Duration,
    every: std::time::Duration,
    what: &str,
    mut f: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = std::time::Instant::now() + within;
    let mut last = None;
    loop {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = Some(e),
        }
        if std::time::Instant::now() >= deadline {
            return Err(match last {
                Some(e) => e.context(format!("timed out after {within:?} waiting for {what}")),
                None => anyhow::anyhow!("timed out after {within:?} waiting for {what}"),
            });
        }
        tokio::time::sleep(every).await;
    }
}

/// [`poll`] every 20 ms.
pub async fn until<T, F, Fut>(within: std::time::Duration, what: &str, f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    poll(within, std::time::Duration::from_millis(20), what, f).await
}

/// [`poll`] of an infallible check every `every`, panicking (failing the
/// test) after `within`.
pub async fn wait_for_every<T, F, Fut>(
    within: std::time::Duration,
    every: std::time::Duration,
    what: &str,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let result = poll(within, every, what, || {
        let next = check();
        async move { Ok(next.await) }
    })
    .await;
    result.unwrap_or_else(|e| panic!("{e:#}"))
}

/// [`wait_for_every`] 20 ms.
pub async fn wait_for<T, F, Fut>(within: std::time::Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    wait_for_every(within, std::time::Duration::from_millis(20), what, check).await
}

/// Runs each named scenario `async fn name(backend: Backend)` (a `Backend`
/// in scope at the call site) as a test on SQLite and on PostgreSQL, in
/// modules `sqlite` and `postgres`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Postgres).await
                }
            )*
        }
    };
}

/// Runs each case `$cases::name(arg)` as a test on a fresh SQLite and a
/// fresh PostgreSQL database, in modules `$sqlite` and `$postgres`; `arg`
/// is `$arg(&db)` of the [`db::TestDb`] (e.g. `TestDb::dyn_store` for store
/// cases, `std::convert::identity` for cases that take the database).
#[macro_export]
macro_rules! on_both_databases {
    ($cases:ident, $sqlite:ident, $postgres:ident, $arg:path; $($case:ident),* $(,)?) => {
        mod $sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let db = $crate::db::sqlite().await;
                    super::$cases::$case($arg(&db)).await;
                }
            )*
        }
        mod $postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let db = $crate::db::postgres().await;
                    super::$cases::$case($arg(&db)).await;
                }
            )*
        }
    };
}
