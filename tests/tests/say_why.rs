//! "Say why" (issue 15 item 7): a revision that cannot be placed says why
//! in its reason instead of an unexplained `pending`, and the `clawfed`
//! CLI's help describes the CLI.
//!
//! The pipeline runs without a Gateway runtime here: placement is its
//! first step and needs none.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use clawfed_hub::model::ConnectionState;
use clawfed_hub::store::ClusterRecord;
use clawfed_tests::hub::{Backend, TestHub};
use serde_json::{Value, json};

async fn post(hub: &TestHub, path: &str, body: Value) -> Value {
    let r = hub
        .http
        .post(hub.url(path))
        .bearer_auth(&hub.root_token)
        .json(&body)
        .send()
        .await
        .expect("send");
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.json().await.expect("json")
}

async fn revision(hub: &TestHub) -> Value {
    hub.http
        .get(hub.url("/namespaces/team/agents/bot/revisions/1"))
        .bearer_auth(&hub.root_token)
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json")
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
    post(&hub, "/namespaces", json!({ "name": "team" })).await;
    post(
        &hub,
        "/namespaces/team/agents",
        json!({ "name": "bot", "spec": { "harnessKind": "embedded-openclaw", "image": "img:1",
                "placement": { "clusterSelector": { "pool": "gpu" } } } }),
    )
    .await;
    post(&hub, "/namespaces/team/agents/bot/deploy", json!({})).await;

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
