//! "Say why" (issue 15 item 7): a revision that cannot be placed says why
//! in its reason instead of an unexplained `pending`, `clawfed fleet`
//! separates desired from actual, and the `clawfed` CLI's help describes
//! the CLI.
//!
//! The pipeline runs without a Gateway runtime here: placement is its
//! first step and needs none.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use clawfed_hub::model::ConnectionState;
use clawfed_hub::store::ClusterRecord;
use clawfed_proto::admin::v1 as pb;
use clawfed_tests::hub::{Backend, TestHub};
use serde_json::{Value, json};

async fn revision(hub: &TestHub) -> Value {
    hub.get_root_json("/namespaces/team/agents/bot/revisions/1")
        .await
}

/// Polls the revision until its reason contains `needle`.
async fn wait_reason(hub: &TestHub, needle: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let rev = revision(hub).await;
        if rev["reason"].as_str().is_some_and(|r| r.contains(needle)) {
            return rev;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the revision never said {needle:?}: {rev}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn enroll(hub: &TestHub, name: &str, pool: &str, state: ConnectionState) {
    hub.store()
        .upsert_cluster(&ClusterRecord {
            name: name.into(),
            labels: BTreeMap::from([("pool".into(), pool.into())]),
            capabilities: vec![],
            certificate_serials: vec![],
            connection_state: state,
            last_seen: Some(Utc::now()),
            version: "test".into(),
        })
        .await
        .expect("cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unplaced_revision_says_why_it_waits() {
    let mut hub = TestHub::start_with(
        Backend::Sqlite,
        |c| c.pipeline.enabled = true,
        clawfed_hub::worker::Handlers::builtin(),
    )
    .await;
    hub.post_ok("/namespaces", json!({ "name": "team" })).await;
    hub.post_ok(
        "/namespaces/team/agents",
        json!({ "name": "bot", "spec": { "harnessKind": "embedded-openclaw", "image": "img:1",
                "placement": { "clusterSelector": { "pool": "gpu" } } } }),
    )
    .await;
    hub.post_ok("/namespaces/team/agents/bot/deploy", json!({}))
        .await;

    let rev = wait_reason(&hub, "no execution cluster is enrolled").await;
    assert_eq!(rev["phase"], "pending");
    assert!(rev["resolvedCluster"].is_null());

    enroll(&hub, "cpu-1", "cpu", ConnectionState::Online).await;
    wait_reason(
        &hub,
        "none of the 1 enrolled clusters carries the labels pool=gpu",
    )
    .await;

    enroll(&hub, "gpu-1", "gpu", ConnectionState::Offline).await;
    enroll(&hub, "gpu-2", "gpu", ConnectionState::Revoked).await;
    let rev = wait_reason(&hub, "gpu-1 is offline, gpu-2 is revoked").await;
    assert_eq!(rev["phase"], "pending");
    hub.stop().await;
}

/// `clawfed --help` describes the CLI, not the hub crate it is built in.
#[test]
fn the_cli_help_describes_the_cli() {
    let clawfed = clawfed_tests::procs::bin("clawfed").expect("the clawfed binary");
    let out = std::process::Command::new(clawfed)
        .arg("--help")
        .output()
        .expect("run clawfed --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("the command line of a clawfed hub"), "{help}");
    assert!(!help.contains("The clawfed hub: desired state"), "{help}");
}

/// The fleet summary as REST, gRPC and the `clawfed fleet` table show it:
/// (desired running, running, not running, stopped) from each.
async fn fleet_views(hub: &TestHub, token: &str) -> [(i64, i64, i64, i64); 3] {
    let rest: Value = hub
        .http
        .get(hub.url("/fleet"))
        .bearer_auth(token)
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    let n = |k: &str| rest[k].as_i64().unwrap_or_else(|| panic!("{k}: {rest}"));
    let rest = (
        n("agentsDesiredRunning"),
        n("agentsRunning"),
        n("agentsNotRunning"),
        n("agentsStopped"),
    );

    let mut req = tonic::Request::new(pb::GetFleetSummaryRequest {});
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("metadata"),
    );
    let g = hub
        .grpc()
        .await
        .get_fleet_summary(req)
        .await
        .expect("GetFleetSummary")
        .into_inner();
    let grpc = (
        g.agents_desired_running,
        g.agents_running,
        g.agents_not_running,
        g.agents_stopped,
    );

    let clawfed = clawfed_tests::procs::bin("clawfed").expect("the clawfed binary");
    let (server, token) = (hub.rest.clone(), token.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(clawfed)
            .args(["--server", &server, "--token", &token, "fleet"])
            .output()
            .expect("run clawfed fleet")
    })
    .await
    .expect("join");
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let cell = |h: &str| -> i64 {
        cell(&table, h)
            .parse()
            .unwrap_or_else(|e| panic!("{h}: {e}\n{table}"))
    };
    let cli = (
        cell("DESIRED RUNNING"),
        cell("RUNNING"),
        cell("NOT RUNNING"),
        cell("STOPPED"),
    );
    [rest, grpc, cli]
}

/// The cell under `header` in the first row of a CLI table, whose columns
/// are separated by two or more spaces (a header may hold one space).
fn cell(table: &str, header: &str) -> String {
    let mut lines = table.lines();
    let head = lines.next().expect("header line");
    let row = lines.next().expect("first row");
    let gaps = regex::Regex::new("  +").expect("regex");
    let mut starts = vec![0];
    starts.extend(gaps.find_iter(head).map(|m| m.end()));
    let names: Vec<&str> = gaps.split(head).collect();
    let i = names
        .iter()
        .position(|n| *n == header)
        .unwrap_or_else(|| panic!("no column {header:?} in {head:?}"));
    let end = starts
        .get(i + 1)
        .copied()
        .unwrap_or(row.len())
        .min(row.len());
    row[starts[i].min(row.len())..end].trim().to_owned()
}

async fn fleet_separates_desired_from_actual(backend: Backend) {
    use clawfed_hub::model::{RevisionPhase, RevisionProgress};
    let mut hub = TestHub::start(backend).await;
    hub.post_ok("/namespaces", json!({ "name": "team" })).await;
    hub.post_ok("/namespaces", json!({ "name": "other" })).await;
    let spec = json!({ "harnessKind": "embedded-openclaw", "image": "img:1" });
    hub.post_ok(
        "/namespaces/team/agents",
        json!({ "name": "bot", "spec": spec }),
    )
    .await;
    hub.post_ok(
        "/namespaces/other/agents",
        json!({ "name": "idle", "spec": spec }),
    )
    .await;
    // No cluster is enrolled: the revision is placed nowhere.
    let rev = hub
        .post_ok("/namespaces/team/agents/bot/deploy", json!({}))
        .await;
    assert!(rev["resolvedCluster"].is_null(), "{rev}");

    // Wanted running, running nowhere: the old count said RUNNING 1.
    let root = hub.root_token.clone();
    for view in fleet_views(&hub, &root).await {
        assert_eq!(view, (1, 0, 1, 1));
    }

    // Once the revision is placed, applied and Ready it runs.
    let store = hub.store();
    let id = rev["id"].as_str().expect("revision id");
    store.place_revision(id, "exec-a").await.expect("place");
    let current = store.get_revision_by_id(id).await.expect("revision");
    store
        .update_revision(
            id,
            current.version,
            RevisionPhase::Active,
            None,
            &RevisionProgress::default(),
        )
        .await
        .expect("activate");
    assert!(
        store
            .activate_revision("team", "bot", 1)
            .await
            .expect("activate")
    );
    for view in fleet_views(&hub, &root).await {
        assert_eq!(view, (1, 1, 0, 1));
    }

    // A tenant's summary counts only its own Agents.
    let viewer = hub
        .token(
            "other-viewer",
            Some("other"),
            clawfed_hub::auth::Role::Viewer,
        )
        .await;
    for view in fleet_views(&hub, &viewer).await {
        assert_eq!(view, (0, 0, 0, 1));
    }
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_separates_desired_from_actual_on_sqlite() {
    fleet_separates_desired_from_actual(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_separates_desired_from_actual_on_postgres() {
    fleet_separates_desired_from_actual(Backend::Postgres).await;
}
