//! REST `/api/v1` against a real in-process hub, on SQLite and on
//! PostgreSQL: CRUD, deploy/rollback/stop, Idempotency-Key, optimistic
//! concurrency, authentication and tenant isolation, audit, bad input,
//! OpenAPI routing and the ops endpoints.
//!
//! Every semantic test is an `async fn(Backend)`;
//! `clawfed_tests::on_both_backends!` runs it once per store, as
//! `sqlite::<name>` and `postgres::<name>`.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{Duration, Utc};
use clawfed_hub::auth::{self, Role};
use clawfed_hub::client::HubClient;
use clawfed_hub::model::{ConnectionState, WorkState};
use clawfed_hub::store::{ClusterRecord, NewToken, WorkFilter};
use clawfed_hub::worker::Handlers;
use clawfed_tests::hub::{Backend, TestHub};
use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

clawfed_tests::on_both_backends!(
    namespaces_crud,
    configurations_crud,
    agents_crud,
    deploy_freezes_snapshots_rollback_and_stop,
    clusters_and_fleet_summary,
    tenants_see_only_their_clusters_and_counts,
    idempotency_key_replays_and_rejects_reuse,
    digest_policy_is_enforced_at_deploy,
    production_refuses_a_dedicated_gateway_without_its_node_selector,
    concurrent_deploys_get_distinct_consecutive_numbers,
    optimistic_concurrency,
    authentication_failures_are_401,
    roles_are_enforced,
    tenant_isolation,
    diagnose_is_authorized_for_the_exact_agent,
    chat_is_refused_clearly_until_a_runtime_can_answer,
    audit_records_every_mutation,
    bad_bodies_are_400_naming_the_field,
    invalid_names_and_specs_are_400_naming_the_field,
    oversized_body_is_413,
    bad_query_and_path_params,
    openapi_documents_only_routed_operations,
    health_and_metrics,
    credentials_are_write_only,
);

// ---- client helpers ----------------------------------------------------------

/// A REST response with its body parsed as JSON (`Null` when it is not JSON).
struct Resp {
    status: u16,
    headers: HeaderMap,
    body: Value,
    text: String,
}

impl Resp {
    /// Asserts the status and returns the body.
    #[track_caller]
    fn expect(&self, status: u16) -> &Value {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.text
        );
        &self.body
    }

    /// Asserts an error response: status, `error.code`, and that the body
    /// has the documented shape.
    #[track_caller]
    fn expect_error(&self, status: u16, code: &str) -> &Value {
        self.expect(status);
        let error = &self.body["error"];
        assert_eq!(error["code"], code, "error code; body: {}", self.text);
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "error without message: {}",
            self.text
        );
        error
    }

    /// Asserts a 400 `invalid_argument` naming `field`, with a message
    /// that names it too.
    #[track_caller]
    fn expect_invalid(&self, field: &str) -> &Value {
        let error = self.expect_error(400, "invalid_argument");
        assert_eq!(error["field"], field, "error field; body: {}", self.text);
        let message = error["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(field),
            "message {message:?} does not name the field {field:?}"
        );
        error
    }

    fn items(&self) -> &Vec<Value> {
        self.body["items"]
            .as_array()
            .unwrap_or_else(|| panic!("not a list: {}", self.text))
    }
}

/// A REST caller with one token (or none): [`HubClient::raw`], its answer
/// kept for assertions.
struct Caller {
    api: HubClient,
}

impl Caller {
    fn new(hub: &TestHub, token: &str) -> Self {
        Self {
            api: HubClient::new(&hub.rest, Some(token.to_owned())).expect("REST client"),
        }
    }

    fn anonymous(hub: &TestHub) -> Self {
        Self {
            api: HubClient::new(&hub.rest, None).expect("REST client"),
        }
    }

    async fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Resp {
        // `/api/...` and `/openapi.json` are absolute; anything else is
        // under `/api/v1`.
        let path = if path.starts_with("/api/") || path == "/openapi.json" {
            path.to_owned()
        } else {
            format!("/api/v1{path}")
        };
        let (status, headers, text) = self
            .api
            .raw(method, &path, body, headers)
            .await
            .expect("send request");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp {
            status: status.as_u16(),
            headers,
            body,
            text,
        }
    }

    async fn get(&self, path: &str) -> Resp {
        self.raw(Method::GET, path, None, &[]).await
    }

    async fn post(&self, path: &str, body: Value) -> Resp {
        self.raw(Method::POST, path, Some(body.to_string().into_bytes()), &[])
            .await
    }

    async fn put(&self, path: &str, body: Value) -> Resp {
        self.raw(Method::PUT, path, Some(body.to_string().into_bytes()), &[])
            .await
    }

    async fn delete(&self, path: &str) -> Resp {
        self.raw(Method::DELETE, path, None, &[]).await
    }

    async fn deploy(&self, ns: &str, agent: &str, key: Option<&str>, body: Option<Value>) -> Resp {
        let headers: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
        self.raw(
            Method::POST,
            &format!("/namespaces/{ns}/agents/{agent}/deploy"),
            body.map(|b| b.to_string().into_bytes()),
            &headers,
        )
        .await
    }

    async fn create_namespace(&self, name: &str) -> Value {
        self.post("/namespaces", json!({ "name": name }))
            .await
            .expect(201)
            .clone()
    }

    async fn create_agent(&self, ns: &str, name: &str, spec: Value) -> Value {
        self.post(
            &format!("/namespaces/{ns}/agents"),
            json!({ "name": name, "spec": spec }),
        )
        .await
        .expect(201)
        .clone()
    }

    async fn create_configuration(&self, ns: &str, name: &str, data: Value) -> Value {
        self.post(
            &format!("/namespaces/{ns}/configurations"),
            json!({ "name": name, "data": data }),
        )
        .await
        .expect(201)
        .clone()
    }

    async fn audit(&self, query: &str) -> Vec<Value> {
        self.get(&format!("/audit{query}")).await.expect(200)["items"]
            .as_array()
            .expect("audit items")
            .clone()
    }
}

fn spec(image: &str) -> Value {
    json!({ "harnessKind": "embedded-openclaw", "image": image })
}

fn root(hub: &TestHub) -> Caller {
    Caller::new(hub, &hub.root_token)
}

/// Everything a failed write must leave untouched, as stored JSON.
/// (Namespace state is left out: the worker provisions namespaces
/// asynchronously.)
async fn snapshot(c: &Caller) -> Value {
    let mut namespaces = Vec::new();
    for ns in c.get("/namespaces").await.expect(200)["items"]
        .as_array()
        .unwrap()
    {
        let name = ns["name"].as_str().unwrap().to_owned();
        let agents = c.get(&format!("/namespaces/{name}/agents")).await;
        let mut revisions = BTreeMap::new();
        for agent in agents.items() {
            let agent_name = agent["name"].as_str().unwrap();
            let revs = c
                .get(&format!("/namespaces/{name}/agents/{agent_name}/revisions"))
                .await;
            revisions.insert(agent_name.to_owned(), revs.expect(200).clone());
        }
        namespaces.push(json!({
            "id": ns["id"],
            "name": name,
            "displayName": ns["displayName"],
            "dataPlaneNamespace": ns["dataPlaneNamespace"],
            "configurations": c.get(&format!("/namespaces/{name}/configurations")).await.expect(200),
            "agents": agents.expect(200),
            "revisions": revisions,
        }));
    }
    Value::Array(namespaces)
}

/// Audit events matching `action` and `result`, newest first.
fn events<'v>(events: &'v [Value], action: &str, result: &str) -> Vec<&'v Value> {
    events
        .iter()
        .filter(|e| e["action"] == action && e["result"] == result)
        .collect()
}

// ---- 1. CRUD ---------------------------------------------------------------

async fn namespaces_crud(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);

    let team = c
        .post(
            "/namespaces",
            json!({ "name": "team-a", "displayName": "Team A" }),
        )
        .await
        .expect(201)
        .clone();
    assert_eq!(team["name"], "team-a");
    assert_eq!(team["displayName"], "Team A");
    assert_eq!(team["adopted"], false);
    assert_eq!(team["version"], 1);
    let id = team["id"].as_str().unwrap();
    let dp = team["dataPlaneNamespace"].as_str().unwrap();
    let hash = dp.strip_prefix("oce-").expect("oce- prefix");
    assert_eq!(hash.len(), 15, "{dp}");
    assert!(
        hash.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    assert_eq!(dp, clawfed_proto::naming::data_plane_namespace(id));

    let adopted = c
        .post(
            "/namespaces",
            json!({ "name": "legacy", "adoptNamespace": "legacy-agents-prod" }),
        )
        .await
        .expect(201)
        .clone();
    assert_eq!(adopted["dataPlaneNamespace"], "legacy-agents-prod");
    assert_eq!(adopted["adopted"], true);
    assert_eq!(adopted["displayName"], "legacy", "display name defaults");

    c.post("/namespaces", json!({ "name": "team-a" }))
        .await
        .expect_error(409, "already_exists");

    let list = c.get("/namespaces").await;
    let names: Vec<&str> = list
        .items()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names.iter().copied().collect::<BTreeSet<_>>(),
        BTreeSet::from(["team-a", "legacy"])
    );

    let got = c.get("/namespaces/team-a").await;
    assert_eq!(got.expect(200)["id"], team["id"]);
    assert_eq!(got.body["dataPlaneNamespace"], dp);
    c.get("/namespaces/nope")
        .await
        .expect_error(404, "not_found");

    // The worker provisions the namespace through the durable queue.
    let mut state = Value::Null;
    for _ in 0..200 {
        let got = c.get("/namespaces/team-a").await;
        state = got.body["state"].clone();
        if state == "active" {
            assert!(got.body["provisionedAt"].is_string());
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(state, "active", "namespace was never provisioned");

    // A namespace with agents cannot be deleted.
    c.create_agent("team-a", "bot", spec("ghcr.io/openclaw/openclaw:1.0"))
        .await;
    c.delete("/namespaces/team-a")
        .await
        .expect_error(409, "failed_precondition");
    c.get("/namespaces/team-a").await.expect(200);

    // An empty one can.
    c.delete("/namespaces/legacy").await.expect(204);
    c.get("/namespaces/legacy")
        .await
        .expect_error(404, "not_found");
    c.delete("/namespaces/legacy")
        .await
        .expect_error(404, "not_found");

    // After its agent is gone, so can team-a.
    c.delete("/namespaces/team-a/agents/bot").await.expect(204);
    c.create_configuration("team-a", "cfg", json!({})).await;
    c.delete("/namespaces/team-a").await.expect(204);
    assert!(c.get("/namespaces").await.items().is_empty());
    hub.stop().await;
}

async fn configurations_crud(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("team").await;

    let created = c
        .create_configuration(
            "team",
            "model",
            json!({ "model": "gpt", "temperature": 0.2 }),
        )
        .await;
    assert_eq!(created["name"], "model");
    assert_eq!(created["namespace"], "team");
    assert_eq!(created["version"], 1);
    assert_eq!(
        created["data"],
        json!({ "model": "gpt", "temperature": 0.2 })
    );
    c.create_configuration("team", "other", json!({ "x": [1, 2] }))
        .await;

    c.post(
        "/namespaces/team/configurations",
        json!({ "name": "model", "data": {} }),
    )
    .await
    .expect_error(409, "already_exists");
    c.post(
        "/namespaces/ghost/configurations",
        json!({ "name": "model", "data": {} }),
    )
    .await
    .expect_error(404, "not_found");
    c.get("/namespaces/ghost/configurations")
        .await
        .expect_error(404, "not_found");

    let list = c.get("/namespaces/team/configurations").await;
    let names: BTreeSet<&str> = list
        .expect(200)
        .get("items")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, BTreeSet::from(["model", "other"]));

    let got = c.get("/namespaces/team/configurations/model").await;
    assert_eq!(got.expect(200)["id"], created["id"]);
    assert_eq!(got.headers["etag"], "\"1\"");

    let updated = c
        .put(
            "/namespaces/team/configurations/model",
            json!({ "data": { "model": "claude" }, "version": 1 }),
        )
        .await;
    assert_eq!(updated.expect(200)["version"], 2);
    assert_eq!(updated.headers["etag"], "\"2\"");
    assert_eq!(updated.body["data"], json!({ "model": "claude" }));
    let got = c.get("/namespaces/team/configurations/model").await;
    assert_eq!(got.expect(200)["data"], json!({ "model": "claude" }));
    assert_eq!(got.body["version"], 2);

    c.put(
        "/namespaces/team/configurations/ghost",
        json!({ "data": {}, "version": 1 }),
    )
    .await
    .expect_error(404, "not_found");

    c.delete("/namespaces/team/configurations/model")
        .await
        .expect(204);
    c.get("/namespaces/team/configurations/model")
        .await
        .expect_error(404, "not_found");
    c.delete("/namespaces/team/configurations/model")
        .await
        .expect_error(404, "not_found");
    assert_eq!(
        c.get("/namespaces/team/configurations").await.items().len(),
        1
    );
    hub.stop().await;
}

async fn agents_crud(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("team").await;
    c.create_configuration("team", "cfg", json!({ "k": "v" }))
        .await;

    let full_spec = json!({
        "harnessKind": "dedicated-codex",
        "executionMode": "provider",
        "image": format!("ghcr.io/openclaw/codex@sha256:{}", "a".repeat(64)),
        "gatewayImage": "ghcr.io/openclaw/gateway:2",
        "configuration": "cfg",
        "resources": { "cpuRequest": "500m", "cpuLimit": "2", "memoryRequest": "512Mi", "memoryLimit": "1.5Gi" },
        "requirementLabels": { "example.com/gpu": "a100", "tier": "gold" },
        "placement": { "clusterSelector": { "region": "eu" } },
        "plugins": ["web", "shell"],
    });
    let created = c.create_agent("team", "coder", full_spec.clone()).await;
    assert_eq!(created["name"], "coder");
    assert_eq!(created["namespace"], "team");
    assert_eq!(created["version"], 1);
    assert_eq!(created["desiredState"], "stopped");
    assert_eq!(created["latestRevision"], Value::Null);
    assert_eq!(created["spec"], full_spec, "spec round-trips exactly");

    let minimal = c
        .create_agent("team", "helper", spec("ghcr.io/openclaw/openclaw:1"))
        .await;
    assert_eq!(minimal["spec"]["executionMode"], "ordinary", "default mode");
    assert_eq!(minimal["spec"]["plugins"], json!([]));

    c.post(
        "/namespaces/team/agents",
        json!({ "name": "coder", "spec": spec("x:1") }),
    )
    .await
    .expect_error(409, "already_exists");
    c.post(
        "/namespaces/ghost/agents",
        json!({ "name": "coder", "spec": spec("x:1") }),
    )
    .await
    .expect_error(404, "not_found");
    c.post(
        "/namespaces/team/agents",
        json!({ "name": "lost", "spec": { "harnessKind": "embedded-openclaw", "image": "x:1", "configuration": "missing" } }),
    )
    .await
    .expect_invalid("spec.configuration");

    let list = c.get("/namespaces/team/agents").await;
    let names: Vec<&str> = list
        .items()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["coder", "helper"]);

    let got = c.get("/namespaces/team/agents/coder").await;
    assert_eq!(got.expect(200)["id"], created["id"]);
    assert_eq!(got.headers["etag"], "\"1\"");
    c.get("/namespaces/team/agents/ghost")
        .await
        .expect_error(404, "not_found");

    let mut new_spec = full_spec.clone();
    new_spec["image"] = json!("ghcr.io/openclaw/codex:3");
    new_spec["plugins"] = json!(["web"]);
    let updated = c
        .put(
            "/namespaces/team/agents/coder",
            json!({ "spec": new_spec, "version": 1 }),
        )
        .await;
    assert_eq!(updated.expect(200)["version"], 2);
    assert_eq!(updated.headers["etag"], "\"2\"");
    assert_eq!(updated.body["spec"], new_spec);
    assert_eq!(
        c.get("/namespaces/team/agents/coder").await.body["spec"],
        new_spec
    );
    c.put(
        "/namespaces/team/agents/ghost",
        json!({ "spec": spec("x:1"), "version": 1 }),
    )
    .await
    .expect_error(404, "not_found");

    // A running agent cannot be deleted; a stopped one can.
    c.deploy("team", "helper", None, None).await.expect(201);
    c.delete("/namespaces/team/agents/helper")
        .await
        .expect_error(409, "failed_precondition");
    c.get("/namespaces/team/agents/helper").await.expect(200);
    let stopped = c
        .post("/namespaces/team/agents/helper/stop", json!({}))
        .await;
    assert_eq!(stopped.expect(200)["desiredState"], "stopped");
    c.delete("/namespaces/team/agents/helper").await.expect(204);
    c.get("/namespaces/team/agents/helper")
        .await
        .expect_error(404, "not_found");
    // Issue 12: its revision history stays readable, and its name stays
    // with it.
    let history = c.get("/namespaces/team/agents/helper/revisions").await;
    assert_eq!(history.items().len(), 1, "{}", history.text);
    c.post(
        "/namespaces/team/agents",
        json!({ "name": "helper", "spec": spec("x:1") }),
    )
    .await
    .expect_error(409, "failed_precondition");

    // Never deployed: deletable right away.
    c.delete("/namespaces/team/agents/coder").await.expect(204);
    assert!(c.get("/namespaces/team/agents").await.items().is_empty());
    c.delete("/namespaces/team/agents/coder")
        .await
        .expect_error(404, "not_found");
    hub.stop().await;
}

async fn deploy_freezes_snapshots_rollback_and_stop(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("team").await;
    c.create_configuration("team", "cfg", json!({ "model": "one" }))
        .await;
    let mut spec1 = spec("ghcr.io/openclaw/openclaw:1");
    spec1["configuration"] = json!("cfg");
    // The stored draft, with defaults filled in.
    let spec1 = c.create_agent("team", "bot", spec1).await["spec"].clone();

    // Deploy without a body: revision 1 freezes the draft and its config.
    let rev1 = c
        .deploy("team", "bot", None, None)
        .await
        .expect(201)
        .clone();
    assert_eq!(rev1["number"], 1);
    assert_eq!(rev1["agent"], "bot");
    assert_eq!(rev1["namespace"], "team");
    assert_eq!(rev1["phase"], "pending");
    assert_eq!(rev1["rolledBackFrom"], Value::Null);
    assert_eq!(rev1["configuration"], json!({ "model": "one" }));
    let images = rev1["images"].as_array().unwrap();
    assert_eq!(images.len(), 2);
    assert_eq!(images[0]["role"], "harness");
    assert_eq!(images[0]["reference"], "ghcr.io/openclaw/openclaw:1");
    assert_eq!(images[0]["digest"], Value::Null);
    assert_eq!(images[1]["role"], "gateway");
    let agent = c.get("/namespaces/team/agents/bot").await;
    assert_eq!(agent.body["desiredState"], "running");
    assert_eq!(agent.body["latestRevision"], 1);

    // Editing the draft and its configuration does not touch revision 1.
    let mut spec2 = spec1.clone();
    spec2["image"] = json!("ghcr.io/openclaw/openclaw:2");
    let edited = c
        .put(
            "/namespaces/team/agents/bot",
            json!({ "spec": spec2, "version": agent.body["version"] }),
        )
        .await;
    assert_eq!(edited.expect(200)["spec"], spec2);
    c.put(
        "/namespaces/team/configurations/cfg",
        json!({ "data": { "model": "two" }, "version": 1 }),
    )
    .await
    .expect(200);
    let again = c.get("/namespaces/team/agents/bot/revisions/1").await;
    assert_eq!(again.expect(200), &rev1, "revision 1 is immutable");
    assert_eq!(again.body["spec"], spec1);

    // An empty JSON body is the same as none.
    let rev2 = c
        .deploy("team", "bot", None, Some(json!({})))
        .await
        .expect(201)
        .clone();
    assert_eq!(rev2["number"], 2);
    assert_eq!(rev2["spec"], spec2);
    assert_eq!(rev2["configuration"], json!({ "model": "two" }));
    assert_ne!(rev2["id"], rev1["id"]);

    // Rollback is a new revision made from revision 1's snapshot.
    let rev3 = c
        .deploy("team", "bot", None, Some(json!({ "fromRevision": 1 })))
        .await
        .expect(201)
        .clone();
    assert_eq!(rev3["number"], 3);
    assert_eq!(rev3["rolledBackFrom"], 1);
    assert_eq!(rev3["spec"], spec1);
    assert_eq!(rev3["configuration"], json!({ "model": "one" }));
    assert_eq!(rev3["images"], rev1["images"]);

    c.deploy("team", "bot", None, Some(json!({ "fromRevision": 9 })))
        .await
        .expect_invalid("fromRevision");
    c.deploy("team", "ghost", None, None)
        .await
        .expect_error(404, "not_found");

    let list = c.get("/namespaces/team/agents/bot/revisions").await;
    let numbers: Vec<i64> = list
        .items()
        .iter()
        .map(|r| r["number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2, 3], "oldest first");
    assert_eq!(list.items()[0], rev1);
    assert_eq!(
        c.get("/namespaces/team/agents/bot/revisions/3").await.body,
        rev3
    );
    c.get("/namespaces/team/agents/bot/revisions/4")
        .await
        .expect_error(404, "not_found");

    let stopped = c.post("/namespaces/team/agents/bot/stop", json!({})).await;
    assert_eq!(stopped.expect(200)["desiredState"], "stopped");
    assert_eq!(stopped.body["latestRevision"], 3);
    assert_eq!(
        c.get("/namespaces/team/agents/bot").await.body["desiredState"],
        "stopped"
    );
    c.post("/namespaces/team/agents/ghost/stop", json!({}))
        .await
        .expect_error(404, "not_found");

    // A deploy whose configuration has disappeared is refused.
    c.delete("/namespaces/team/configurations/cfg")
        .await
        .expect(204);
    c.deploy("team", "bot", None, None)
        .await
        .expect_error(409, "failed_precondition");
    assert_eq!(
        c.get("/namespaces/team/agents/bot/revisions")
            .await
            .items()
            .len(),
        3
    );
    hub.stop().await;
}

async fn clusters_and_fleet_summary(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let store = hub.store();
    for (name, state, region) in [
        ("exec-a", ConnectionState::Online, "eu"),
        ("exec-b", ConnectionState::Offline, "us"),
    ] {
        store
            .upsert_cluster(&ClusterRecord {
                name: name.into(),
                labels: BTreeMap::from([("region".into(), region.into())]),
                capabilities: vec!["gpu".into()],
                certificate_serials: vec![format!("serial-{name}")],
                connection_state: state,
                last_seen: Some(Utc::now()),
                version: "0.1.0".into(),
            })
            .await
            .unwrap();
    }
    let c = root(&hub);
    let list = c.get("/clusters").await;
    let names: Vec<&str> = list
        .items()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["exec-a", "exec-b"]);
    let a = c.get("/clusters/exec-a").await;
    assert_eq!(a.expect(200)["connectionState"], "online");
    assert_eq!(a.body["labels"], json!({ "region": "eu" }));
    assert_eq!(a.body["capabilities"], json!(["gpu"]));
    assert_eq!(a.body["certificateSerials"], json!(["serial-exec-a"]));
    assert_eq!(a.body["version"], "0.1.0");
    c.get("/clusters/ghost")
        .await
        .expect_error(404, "not_found");

    c.create_namespace("team").await;
    c.create_namespace("other").await;
    c.create_agent("team", "a1", spec("img:1")).await;
    let mut placed = spec("img:1");
    placed["placement"] = json!({ "clusterSelector": { "region": "eu" } });
    c.create_agent("team", "a2", placed).await;
    c.create_agent("other", "b1", spec("img:1")).await;
    let rev = c.deploy("team", "a1", None, None).await.expect(201).clone();
    assert_eq!(
        rev["resolvedCluster"], "exec-a",
        "the online cluster is chosen"
    );
    let rev = c.deploy("team", "a2", None, None).await.expect(201).clone();
    assert_eq!(rev["resolvedCluster"], "exec-a");
    c.deploy("team", "a2", None, None).await.expect(201);

    // An explicit placement must name an enrolled cluster.
    let mut pinned = spec("img:1");
    pinned["placement"] = json!({ "cluster": "exec-z" });
    c.create_agent("other", "pinned", pinned).await;
    c.deploy("other", "pinned", None, None)
        .await
        .expect_error(409, "failed_precondition");

    let fleet = c.get("/fleet").await.expect(200).clone();
    assert_eq!(fleet["namespaces"], 2);
    assert_eq!(fleet["agents"], 4);
    // Placed but still pending: wanted running, none running yet.
    assert_eq!(fleet["agentsDesiredRunning"], 2);
    assert_eq!(fleet["agentsRunning"], 0);
    assert_eq!(fleet["agentsNotRunning"], 2);
    assert_eq!(fleet["agentsStopped"], 2);
    assert_eq!(fleet["revisionsByPhase"]["pending"], 3);
    assert_eq!(fleet["clusters"], 2);
    assert_eq!(fleet["clustersOnline"], 1);
    assert!(fleet["workPending"].is_i64());
    assert!(fleet["workFailed"].is_i64());

    // A tenant sees its own counts, and only the cluster its revisions
    // are placed on.
    let viewer = hub.token("team-viewer", Some("team"), Role::Viewer).await;
    let v = Caller::new(&hub, &viewer);
    let fleet = v.get("/fleet").await.expect(200).clone();
    assert_eq!(fleet["namespaces"], 1);
    assert_eq!(fleet["agents"], 2);
    assert_eq!(fleet["agentsDesiredRunning"], 2);
    assert_eq!(fleet["agentsRunning"], 0);
    assert_eq!(fleet["agentsNotRunning"], 2);
    assert_eq!(fleet["revisionsByPhase"]["pending"], 3);
    assert_eq!(fleet["clusters"], 1);
    assert_eq!(v.get("/clusters").await.items().len(), 1);
    v.get("/clusters/exec-a").await.expect(200);
    v.get("/clusters/exec-b")
        .await
        .expect_error(404, "not_found");
    hub.stop().await;
}

/// Issue 9, defect 9: a namespace-scoped token sees only the clusters its
/// revisions are placed on, without certificate serials or outbox depth,
/// and fleet counts over its own namespace only.
async fn tenants_see_only_their_clusters_and_counts(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let store = hub.store();
    for (name, state) in [
        ("exec-a", ConnectionState::Online),
        ("exec-b", ConnectionState::Online),
        ("exec-c", ConnectionState::Offline),
    ] {
        store
            .upsert_cluster(&ClusterRecord {
                name: name.into(),
                labels: BTreeMap::new(),
                capabilities: Vec::new(),
                certificate_serials: vec![format!("serial-{name}")],
                connection_state: state,
                last_seen: Some(Utc::now()),
                version: "0.1.0".into(),
            })
            .await
            .unwrap();
    }
    let c = root(&hub);
    c.create_namespace("team").await;
    let other = c.create_namespace("other").await;
    c.create_namespace("empty").await;
    for (ns, agent, cluster) in [("team", "a1", "exec-a"), ("other", "b1", "exec-b")] {
        let mut placed = spec("img:1");
        placed["placement"] = json!({ "cluster": cluster });
        c.create_agent(ns, agent, placed).await;
        let rev = c.deploy(ns, agent, None, None).await.expect(201).clone();
        assert_eq!(rev["resolvedCluster"], cluster);
    }
    // Work of another tenant, due later, so it stays pending.
    store
        .enqueue_work(&[clawfed_hub::store::NewWork {
            kind: "test.later".into(),
            namespace_id: Some(other["id"].as_str().unwrap().to_owned()),
            target: "x".into(),
            payload: json!({}),
            requested_by: None,
            max_attempts: 1,
            run_at: Utc::now() + Duration::hours(1),
            coalesce: false,
        }])
        .await
        .unwrap();

    // The installation admin sees everything, with the admin data.
    let fleet = c.get("/fleet").await.expect(200).clone();
    assert_eq!(fleet["clusters"], 3);
    assert_eq!(fleet["clustersOnline"], 2);
    assert!(fleet["workPending"].as_i64().unwrap() >= 1, "{fleet}");
    let all = c.get("/clusters").await;
    assert_eq!(all.expect(200)["items"].as_array().unwrap().len(), 3);
    let a = c.get("/clusters/exec-a").await.expect(200).clone();
    assert_eq!(a["certificateSerials"], json!(["serial-exec-a"]));
    assert!(a["outboxDepth"].is_i64(), "{a}");

    // A tenant: only exec-a, without serials or outbox depth.
    let viewer = hub.token("team-viewer", Some("team"), Role::Viewer).await;
    let v = Caller::new(&hub, &viewer);
    let list = v.get("/clusters").await;
    let names: Vec<&str> = list
        .items()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["exec-a"]);
    for seen in [
        list.items()[0].clone(),
        v.get("/clusters/exec-a").await.expect(200).clone(),
    ] {
        assert_eq!(seen["connectionState"], "online");
        assert!(seen.get("certificateSerials").is_none(), "{seen}");
        assert!(seen.get("outboxDepth").is_none(), "{seen}");
    }
    for hidden in ["exec-b", "exec-c", "ghost"] {
        v.get(&format!("/clusters/{hidden}"))
            .await
            .expect_error(404, "not_found");
    }
    // Its own namespace's provisioning is done once it is active; then
    // nothing of its own is pending (the other tenant's item is not its).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while v.get("/namespaces/team").await.expect(200)["state"] != "active" {
        assert!(std::time::Instant::now() < deadline, "team not provisioned");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The worker marks the namespace active before it completes the work
    // item, so the item may still count for a moment: wait for it (the
    // other tenant's pending item never leaves, so a count that is not
    // scoped to this tenant still fails here).
    let fleet = loop {
        let fleet = v.get("/fleet").await.expect(200).clone();
        if fleet["workPending"] == 0 {
            break fleet;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the tenant's own work never finished: {fleet}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(fleet["namespaces"], 1, "{fleet}");
    assert_eq!(fleet["agents"], 1, "{fleet}");
    assert_eq!(fleet["clusters"], 1, "{fleet}");
    assert_eq!(fleet["clustersOnline"], 1, "{fleet}");
    assert_eq!(fleet["workFailed"], 0, "{fleet}");

    // A tenant with no revisions sees no cluster at all.
    let empty = hub.token("empty-viewer", Some("empty"), Role::Viewer).await;
    let e = Caller::new(&hub, &empty);
    assert!(e.get("/clusters").await.items().is_empty());
    let fleet = e.get("/fleet").await.expect(200).clone();
    assert_eq!(fleet["clusters"], 0, "{fleet}");
    assert_eq!(fleet["clustersOnline"], 0, "{fleet}");
    e.get("/clusters/exec-a")
        .await
        .expect_error(404, "not_found");
    hub.stop().await;
}

/// Issue 9, defect 7: with `policy.requireImmutableDigest` the hub refuses
/// a deploy whose image is not pinned by SHA-256 digest (by the spoke's own
/// rule), naming the field; a pinned deploy with the default Gateway image
/// is admitted; a tagged default Gateway image stops the hub from starting.
async fn digest_policy_is_enforced_at_deploy(backend: Backend) {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let gateway = format!("reg.example/gateway@{digest}");
    let default_gateway = gateway.clone();
    let mut hub = TestHub::start_with(
        backend,
        |config| {
            config.policy.require_immutable_digest = true;
            config.policy.default_gateway_image = default_gateway;
        },
        Handlers::builtin(),
    )
    .await;
    let c = root(&hub);
    c.create_namespace("team").await;
    let pinned = format!("reg.example/harness@{digest}");
    // Drafts accept upper-case hex; a pin is lower-case (OCI), and the
    // spoke would refuse it.
    let upper = format!("reg.example/harness@sha256:{}", "AB".repeat(32));
    for (name, image, gateway_image, field) in [
        ("tagged", "reg.example/harness:1.0", None, "spec.image"),
        ("upper", upper.as_str(), None, "spec.image"),
        (
            "gateway",
            pinned.as_str(),
            Some("reg.example/gateway:latest"),
            "spec.gatewayImage",
        ),
    ] {
        let mut s = spec(image);
        if let Some(g) = gateway_image {
            s["gatewayImage"] = json!(g);
        }
        c.create_agent("team", name, s).await;
        c.deploy("team", name, None, None)
            .await
            .expect_invalid(field);
        assert!(
            c.get(&format!("/namespaces/team/agents/{name}/revisions"))
                .await
                .items()
                .is_empty(),
            "{name}: nothing admitted"
        );
    }

    // Pinned, with the (pinned) default Gateway image: admitted.
    c.create_agent("team", "ok", spec(&pinned)).await;
    let rev = c.deploy("team", "ok", None, None).await.expect(201).clone();
    assert_eq!(
        rev["images"],
        json!([
            { "role": "harness", "reference": pinned, "digest": digest },
            { "role": "gateway", "reference": gateway, "digest": digest },
        ])
    );
    hub.stop().await;

    // The policy with a tagged default Gateway image: the hub does not start.
    let db = clawfed_tests::db::open(backend).await;
    let mut config = clawfed_tests::hub::test_config(&db.url);
    config.policy.require_immutable_digest = true;
    config.policy.default_gateway_image = "reg.example/gateway:latest".into();
    let err =
        clawfed_hub::server::start_with_parts(&config, db.dyn_store(), Handlers::builtin(), None)
            .await
            .expect_err("a tagged default Gateway image under the digest policy");
    assert!(
        err.to_string().contains("policy.defaultGatewayImage"),
        "{err}"
    );
}

/// Issue 30: in production mode a deploy that needs a dedicated Gateway is
/// refused while the installation names no Gateway node selector (the
/// seeds: real Gateways run on the trusted nodes), naming the setting, and
/// nothing is admitted; embedded OpenClaw (no control-cluster Gateway) is
/// admitted; with the selector the dedicated deploy is admitted too.
async fn production_refuses_a_dedicated_gateway_without_its_node_selector(backend: Backend) {
    let digest = format!("sha256:{}", "cd".repeat(32));
    let pinned = format!("reg.example/harness@{digest}");
    for selector in [false, true] {
        let gateway = format!("reg.example/gateway@{digest}");
        let mut hub = TestHub::start_with(
            backend,
            move |config| {
                config.mode = clawfed_hub::config::InstallationMode::Production;
                config.policy.require_immutable_digest = true;
                config.policy.default_gateway_image = gateway;
                if selector {
                    config.gateway.options.node_selector =
                        [("pool".to_string(), "gateways".to_string())].into();
                }
            },
            Handlers::builtin(),
        )
        .await;
        let c = root(&hub);
        c.create_namespace("team").await;
        let mut dedicated = spec(&pinned);
        dedicated["harnessKind"] = json!("dedicated-codex");
        c.create_agent("team", "codex", dedicated).await;
        c.create_agent("team", "embedded", spec(&pinned)).await;
        let r = c.deploy("team", "codex", None, None).await;
        if selector {
            r.expect(201);
        } else {
            let error = r.expect_error(409, "failed_precondition");
            let message = error["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("runtime.gatewayNodeSelector") && message.contains("production"),
                "{message}"
            );
            assert!(
                c.get("/namespaces/team/agents/codex/revisions")
                    .await
                    .items()
                    .is_empty(),
                "nothing admitted"
            );
        }
        c.deploy("team", "embedded", None, None).await.expect(201);
        hub.stop().await;
    }
}

// ---- 2. Idempotency-Key ------------------------------------------------------------

async fn idempotency_key_replays_and_rejects_reuse(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("team").await;
    c.create_agent("team", "bot", spec("img:1")).await;

    let first = c.deploy("team", "bot", Some("key-1"), None).await;
    let first = first.expect(201).clone();
    let retry = c.deploy("team", "bot", Some("key-1"), None).await;
    assert_eq!(
        retry.expect(200)["id"],
        first["id"],
        "same revision returned"
    );
    assert_eq!(retry.body["number"], 1);
    let revisions = c.get("/namespaces/team/agents/bot/revisions").await;
    assert_eq!(revisions.items().len(), 1, "only one revision exists");

    // The same key with a different request is refused, and makes nothing.
    c.deploy(
        "team",
        "bot",
        Some("key-1"),
        Some(json!({ "fromRevision": 1 })),
    )
    .await
    .expect_error(409, "failed_precondition");
    assert_eq!(
        c.get("/namespaces/team/agents/bot/revisions")
            .await
            .items()
            .len(),
        1
    );

    // A different key makes a new revision; retrying it replays it.
    let second = c
        .deploy(
            "team",
            "bot",
            Some("key-2"),
            Some(json!({ "fromRevision": 1 })),
        )
        .await
        .expect(201)
        .clone();
    assert_eq!(second["number"], 2);
    assert_eq!(second["rolledBackFrom"], 1);
    let replay = c
        .deploy(
            "team",
            "bot",
            Some("key-2"),
            Some(json!({ "fromRevision": 1 })),
        )
        .await;
    assert_eq!(replay.expect(200)["id"], second["id"]);

    // A key is scoped to its namespace's agent request: the same key on
    // another agent is a different request.
    c.create_agent("team", "other", spec("img:1")).await;
    c.deploy("team", "other", Some("key-1"), None)
        .await
        .expect_error(409, "failed_precondition");

    // Keys must be visible ASCII of bounded length.
    c.deploy("team", "bot", Some(&"k".repeat(256)), None)
        .await
        .expect_invalid("Idempotency-Key");
    assert_eq!(
        c.get("/namespaces/team/agents/bot/revisions")
            .await
            .items()
            .len(),
        2
    );
    hub.stop().await;
}

async fn concurrent_deploys_get_distinct_consecutive_numbers(backend: Backend) {
    const DEPLOYS: usize = 8;
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("team").await;
    c.create_agent("team", "bot", spec("img:1")).await;

    let url = hub.url("/namespaces/team/agents/bot/deploy");
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..DEPLOYS {
        let http = hub.http.clone();
        let url = url.clone();
        let token = hub.root_token.clone();
        tasks.spawn(async move {
            let key = format!("concurrent-{i}");
            // A client retries with the same key until the hub answers with
            // a revision; a retryable conflict under contention is allowed,
            // anything else is not.
            for _ in 0..20 {
                let response = http
                    .post(&url)
                    .bearer_auth(&token)
                    .header("Idempotency-Key", &key)
                    .send()
                    .await
                    .expect("send deploy");
                let status = response.status().as_u16();
                let body: Value = response.json().await.expect("json body");
                match status {
                    200 | 201 => return (key, body),
                    409 if body["error"]["code"] == "conflict" => continue,
                    other => panic!("deploy {key}: unexpected {other}: {body}"),
                }
            }
            panic!("deploy {key} never succeeded");
        });
    }
    let mut by_key = BTreeMap::new();
    while let Some(joined) = tasks.join_next().await {
        let (key, revision) = joined.expect("deploy task");
        by_key.insert(key, revision);
    }
    let numbers: BTreeSet<i64> = by_key
        .values()
        .map(|r| r["number"].as_i64().unwrap())
        .collect();
    assert_eq!(
        numbers,
        (1..=DEPLOYS as i64).collect::<BTreeSet<_>>(),
        "distinct, consecutive numbers"
    );
    let ids: BTreeSet<&str> = by_key.values().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), DEPLOYS);

    let listed = c.get("/namespaces/team/agents/bot/revisions").await;
    let listed: Vec<i64> = listed
        .items()
        .iter()
        .map(|r| r["number"].as_i64().unwrap())
        .collect();
    assert_eq!(listed, (1..=DEPLOYS as i64).collect::<Vec<_>>());
    assert_eq!(
        c.get("/namespaces/team/agents/bot").await.body["latestRevision"],
        DEPLOYS as i64
    );

    // Each key still replays its own revision.
    for (key, revision) in &by_key {
        let replay = c.deploy("team", "bot", Some(key), None).await;
        assert_eq!(replay.expect(200)["id"], revision["id"], "{key}");
    }
    hub.stop().await;
}

// ---- 3. Optimistic concurrency ---------------------------------------------------

async fn optimistic_concurrency(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("team").await;
    c.create_agent("team", "bot", spec("img:1")).await;
    c.create_configuration("team", "cfg", json!({ "v": 0 }))
        .await;

    // Two writers read version 1; the first wins, the second conflicts.
    let read = c.get("/namespaces/team/agents/bot").await;
    assert_eq!(read.headers["etag"], "\"1\"");
    let version = read.body["version"].clone();
    c.put(
        "/namespaces/team/agents/bot",
        json!({ "spec": spec("img:winner"), "version": version }),
    )
    .await
    .expect(200);
    let loser = c
        .put(
            "/namespaces/team/agents/bot",
            json!({ "spec": spec("img:loser"), "version": version }),
        )
        .await;
    let error = loser.expect_error(409, "conflict");
    assert!(error["message"].as_str().unwrap().contains("bot"));
    let now = c.get("/namespaces/team/agents/bot").await;
    assert_eq!(now.body["spec"]["image"], "img:winner");
    assert_eq!(now.body["version"], 2);
    assert_eq!(now.headers["etag"], "\"2\"");

    // A version from the future is stale too.
    c.put(
        "/namespaces/team/agents/bot",
        json!({ "spec": spec("img:future"), "version": 7 }),
    )
    .await
    .expect_error(409, "conflict");
    assert_eq!(
        c.get("/namespaces/team/agents/bot").await.body["spec"]["image"],
        "img:winner"
    );

    // Configurations follow the same rule.
    c.put(
        "/namespaces/team/configurations/cfg",
        json!({ "data": { "v": 1 }, "version": 1 }),
    )
    .await
    .expect(200);
    c.put(
        "/namespaces/team/configurations/cfg",
        json!({ "data": { "v": 2 }, "version": 1 }),
    )
    .await
    .expect_error(409, "conflict");
    let cfg = c.get("/namespaces/team/configurations/cfg").await;
    assert_eq!(cfg.body["data"], json!({ "v": 1 }));
    assert_eq!(cfg.headers["etag"], "\"2\"");

    // Namespaces carry an ETag as well.
    let ns = c.get("/namespaces/team").await;
    assert_eq!(
        ns.headers["etag"].to_str().unwrap(),
        format!("\"{}\"", ns.body["version"])
    );
    hub.stop().await;
}

// ---- 4. Authentication and authorization --------------------------------------

async fn authentication_failures_are_401(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("team").await;

    let check = |r: Resp, why: &str| {
        assert_eq!(r.status, 401, "{why}: {}", r.text);
        assert_eq!(r.body["error"]["code"], "unauthenticated", "{why}");
        let challenge = r
            .headers
            .get("www-authenticate")
            .unwrap_or_else(|| panic!("{why}: no WWW-Authenticate"));
        assert!(challenge.to_str().unwrap().starts_with("Bearer"), "{why}");
    };

    check(Caller::anonymous(&hub).get("/namespaces").await, "no token");
    check(
        Caller::anonymous(&hub)
            .post("/namespaces", json!({ "name": "x" }))
            .await,
        "no token on a write",
    );
    for header in [
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer    ",
        "bearer cfd_abc",
        "Token cfd_abc",
    ] {
        let r = Caller::anonymous(&hub)
            .raw(
                Method::GET,
                "/namespaces",
                None,
                &[("authorization", header)],
            )
            .await;
        check(r, &format!("malformed Authorization {header:?}"));
    }
    let unknown = format!("{}{}", auth::TOKEN_PREFIX, "0".repeat(64));
    check(
        Caller::new(&hub, &unknown).get("/namespaces").await,
        "unknown token",
    );

    // Revoked.
    let revoked = hub.token("revoked", Some("team"), Role::Admin).await;
    Caller::new(&hub, &revoked)
        .get("/namespaces/team")
        .await
        .expect(200);
    hub.store()
        .revoke_token("revoked", Utc::now())
        .await
        .unwrap();
    check(
        Caller::new(&hub, &revoked).get("/namespaces/team").await,
        "revoked token",
    );

    // Expired.
    let minted = auth::mint_token();
    hub.store()
        .create_token(&NewToken {
            name: "expired".into(),
            namespace: Some("team".into()),
            role: Role::Admin,
            hash: minted.hash,
            expires_at: Some(Utc::now() - Duration::minutes(1)),
        })
        .await
        .unwrap();
    check(
        Caller::new(&hub, &minted.secret)
            .get("/namespaces/team")
            .await,
        "expired token",
    );

    // Not yet expired works.
    let minted = auth::mint_token();
    hub.store()
        .create_token(&NewToken {
            name: "fresh".into(),
            namespace: Some("team".into()),
            role: Role::Viewer,
            hash: minted.hash,
            expires_at: Some(Utc::now() + Duration::hours(1)),
        })
        .await
        .unwrap();
    Caller::new(&hub, &minted.secret)
        .get("/namespaces/team")
        .await
        .expect(200);

    // Nothing was created by the rejected writes.
    let names: Vec<Value> = c
        .get("/namespaces")
        .await
        .items()
        .iter()
        .map(|n| n["name"].clone())
        .collect();
    assert_eq!(names, [json!("team")]);
    hub.stop().await;
}

async fn roles_are_enforced(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("team").await;
    c.create_agent("team", "bot", spec("img:1")).await;
    let viewer = Caller::new(&hub, &hub.token("v", Some("team"), Role::Viewer).await);
    let deployer = Caller::new(&hub, &hub.token("d", Some("team"), Role::Deployer).await);
    let admin = Caller::new(&hub, &hub.token("a", Some("team"), Role::Admin).await);

    // Viewers read but never write.
    viewer.get("/namespaces/team/agents/bot").await.expect(200);
    viewer
        .get("/namespaces/team/agents/bot/revisions")
        .await
        .expect(200);
    let before = snapshot(&c).await;
    viewer
        .deploy("team", "bot", None, None)
        .await
        .expect_error(403, "permission_denied");
    viewer
        .post("/namespaces/team/agents/bot/stop", json!({}))
        .await
        .expect_error(403, "permission_denied");
    viewer
        .post(
            "/namespaces/team/agents",
            json!({ "name": "x", "spec": spec("img:1") }),
        )
        .await
        .expect_error(403, "permission_denied");
    viewer
        .put(
            "/namespaces/team/agents/bot",
            json!({ "spec": spec("img:2"), "version": 1 }),
        )
        .await
        .expect_error(403, "permission_denied");
    viewer
        .delete("/namespaces/team/agents/bot")
        .await
        .expect_error(403, "permission_denied");
    viewer
        .get("/audit")
        .await
        .expect_error(403, "permission_denied");
    assert_eq!(snapshot(&c).await, before, "denied writes change nothing");

    // Deployers edit and deploy, but read no audit and manage no namespaces.
    deployer
        .put(
            "/namespaces/team/agents/bot",
            json!({ "spec": spec("img:2"), "version": 1 }),
        )
        .await
        .expect(200);
    deployer.deploy("team", "bot", None, None).await.expect(201);
    deployer
        .post("/namespaces/team/agents/bot/stop", json!({}))
        .await
        .expect(200);
    deployer
        .get("/audit")
        .await
        .expect_error(403, "permission_denied");
    deployer
        .get("/audit?namespace=team")
        .await
        .expect_error(403, "permission_denied");
    deployer
        .delete("/namespaces/team")
        .await
        .expect_error(403, "permission_denied");
    deployer
        .post("/namespaces", json!({ "name": "mine" }))
        .await
        .expect_error(403, "permission_denied");

    // A tenant admin reads its own audit log, only its own.
    c.create_namespace("elsewhere").await;
    let own = admin.audit("").await;
    assert!(!own.is_empty());
    assert!(own.iter().all(|e| e["namespace"] == "team"), "{own:?}");
    assert!(
        own.iter()
            .any(|e| e["action"] == "agent.deploy" && e["actor"] == "token:d")
    );
    assert_eq!(admin.audit("?namespace=team").await, own);
    admin
        .post("/namespaces", json!({ "name": "mine" }))
        .await
        .expect_error(403, "permission_denied");
    c.get("/namespaces/mine")
        .await
        .expect_error(404, "not_found");

    // Installation admins see every namespace's events.
    let all = c.audit("").await;
    assert!(all.iter().any(|e| e["namespace"] == "elsewhere"));
    assert!(all.iter().any(|e| e["namespace"] == "team"));
    hub.stop().await;
}

async fn tenant_isolation(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("ns-a").await;
    c.create_namespace("ns-b").await;
    c.create_agent("ns-a", "a1", spec("img:1")).await;
    c.create_agent("ns-b", "b1", spec("img:1")).await;
    c.create_agent("ns-b", "b2", spec("img:1")).await;
    c.create_configuration("ns-b", "cfg", json!({})).await;
    c.deploy("ns-b", "b1", None, None).await.expect(201);
    let a = Caller::new(&hub, &hub.token("a-admin", Some("ns-a"), Role::Admin).await);

    let list = a.get("/namespaces").await;
    let names: Vec<&Value> = list.items().iter().map(|n| &n["name"]).collect();
    assert_eq!(names, [&json!("ns-a")]);
    a.get("/namespaces/ns-a").await.expect(200);

    let before = snapshot(&c).await;
    for path in [
        "/namespaces/ns-b",
        "/namespaces/ns-b/agents",
        "/namespaces/ns-b/agents/b1",
        "/namespaces/ns-b/agents/b1/revisions",
        "/namespaces/ns-b/agents/b1/revisions/1",
        "/namespaces/ns-b/configurations",
        "/namespaces/ns-b/configurations/cfg",
        "/audit?namespace=ns-b",
        "/work?namespace=ns-b",
    ] {
        a.get(path).await.expect_error(403, "permission_denied");
    }
    a.deploy("ns-b", "b1", None, None)
        .await
        .expect_error(403, "permission_denied");
    a.post("/namespaces/ns-b/agents/b1/stop", json!({}))
        .await
        .expect_error(403, "permission_denied");
    a.put(
        "/namespaces/ns-b/agents/b2",
        json!({ "spec": spec("img:evil"), "version": 1 }),
    )
    .await
    .expect_error(403, "permission_denied");
    a.post(
        "/namespaces/ns-b/agents",
        json!({ "name": "intruder", "spec": spec("img:1") }),
    )
    .await
    .expect_error(403, "permission_denied");
    a.delete("/namespaces/ns-b/agents/b2")
        .await
        .expect_error(403, "permission_denied");
    a.delete("/namespaces/ns-b")
        .await
        .expect_error(403, "permission_denied");
    assert_eq!(snapshot(&c).await, before, "B is untouched");

    // B's work items are invisible: "not found", not "forbidden".
    let work_b = c.get("/work?namespace=ns-b").await;
    let b_item = work_b.items().first().expect("B has work").clone();
    assert_eq!(b_item["namespace"], "ns-b");
    let b_id = b_item["id"].as_str().unwrap();
    c.get(&format!("/work/{b_id}")).await.expect(200);
    a.get(&format!("/work/{b_id}"))
        .await
        .expect_error(404, "not_found");
    let own_work = a.get("/work").await;
    assert!(!own_work.items().is_empty());
    assert!(own_work.items().iter().all(|w| w["namespace"] == "ns-a"));
    let a_id = own_work.items()[0]["id"].as_str().unwrap();
    a.get(&format!("/work/{a_id}")).await.expect(200);

    // Audit and fleet are scoped to A.
    let audit = a.audit("").await;
    assert!(!audit.is_empty());
    assert!(audit.iter().all(|e| e["namespace"] == "ns-a"));
    let fleet = a.get("/fleet").await.expect(200).clone();
    assert_eq!(fleet["namespaces"], 1);
    assert_eq!(fleet["agents"], 1);
    assert_eq!(fleet["agentsRunning"], 0);
    assert_eq!(fleet["agentsDesiredRunning"], 0);
    assert_eq!(fleet["revisionsByPhase"].get("pending"), None);

    // The installation admin sees everything.
    assert_eq!(c.get("/namespaces").await.items().len(), 2);
    let fleet = c.get("/fleet").await.expect(200).clone();
    assert_eq!(fleet["namespaces"], 2);
    assert_eq!(fleet["agents"], 3);
    // b1 is deployed with no cluster enrolled: wanted, not running.
    assert_eq!(fleet["agentsDesiredRunning"], 1);
    assert_eq!(fleet["agentsRunning"], 0);
    assert_eq!(fleet["agentsNotRunning"], 1);
    c.get("/namespaces/ns-b/agents/b1").await.expect(200);
    let all_work = c.get("/work").await;
    let spaces: BTreeSet<&str> = all_work
        .items()
        .iter()
        .filter_map(|w| w["namespace"].as_str())
        .collect();
    assert_eq!(spaces, BTreeSet::from(["ns-a", "ns-b"]));
    hub.stop().await;
}

/// Issue 12: `GET .../agents/{name}/diagnose` is a read of the exact
/// Agent: another tenant's token is refused, a viewer of the tenant may, an
/// unknown Agent is 404, an Agent without a revision is a 409 saying so.
/// Without a placed revision or a link session every check is `unknown`,
/// and diagnosing changes nothing.
async fn diagnose_is_authorized_for_the_exact_agent(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("ns-a").await;
    c.create_namespace("ns-b").await;
    c.create_agent("ns-b", "b1", spec("img:1")).await;
    c.create_agent("ns-b", "b2", spec("img:1")).await;
    c.deploy("ns-b", "b1", None, None).await.expect(201);
    let a = Caller::new(&hub, &hub.token("a-admin", Some("ns-a"), Role::Admin).await);
    let viewer = Caller::new(&hub, &hub.token("b-view", Some("ns-b"), Role::Viewer).await);

    let before = snapshot(&c).await;
    a.get("/namespaces/ns-b/agents/b1/diagnose")
        .await
        .expect_error(403, "permission_denied");
    Caller::anonymous(&hub)
        .get("/namespaces/ns-b/agents/b1/diagnose")
        .await
        .expect_error(401, "unauthenticated");
    c.get("/namespaces/ns-b/agents/nope/diagnose")
        .await
        .expect_error(404, "not_found");
    let none = c
        .get("/namespaces/ns-b/agents/b2/diagnose")
        .await
        .expect_error(409, "failed_precondition")
        .clone();
    assert!(
        none["message"]
            .as_str()
            .unwrap_or_default()
            .contains("no revision"),
        "{none}"
    );
    let d = viewer
        .get("/namespaces/ns-b/agents/b1/diagnose")
        .await
        .expect(200)
        .clone();
    assert_eq!(d["agent"], "b1");
    assert_eq!(d["revision"], 1);
    for component in ["harness", "gateway"] {
        let checks = d[component]["checks"].as_array().expect("checks");
        assert!(!checks.is_empty(), "{d}");
        assert!(
            checks.iter().all(|k| k["status"] == "unknown"),
            "nothing to read is unknown: {d}"
        );
    }
    // A chosen revision: the same authorization, a bad or unknown number
    // named as `revision`.
    a.get("/namespaces/ns-b/agents/b1/diagnose?revision=1")
        .await
        .expect_error(403, "permission_denied");
    for bad in ["0", "-1", "2"] {
        viewer
            .get(&format!(
                "/namespaces/ns-b/agents/b1/diagnose?revision={bad}"
            ))
            .await
            .expect_invalid("revision");
    }
    viewer
        .get("/namespaces/ns-b/agents/b1/diagnose?revision=one")
        .await
        .expect_error(400, "invalid_argument");
    let chosen = viewer
        .get("/namespaces/ns-b/agents/b1/diagnose?revision=1")
        .await
        .expect(200)
        .clone();
    assert_eq!(
        (chosen["revision"].clone(), chosen["revisionId"].clone()),
        (json!(1), d["revisionId"].clone())
    );
    assert_eq!(snapshot(&c).await, before, "diagnose changes nothing");
    c.deploy("ns-b", "b1", None, None).await.expect(201);
    let latest = viewer
        .get("/namespaces/ns-b/agents/b1/diagnose")
        .await
        .expect(200)
        .clone();
    assert_eq!(latest["revision"], 2, "no active revision: the latest");
    let first = viewer
        .get("/namespaces/ns-b/agents/b1/diagnose?revision=1")
        .await
        .expect(200)
        .clone();
    assert_eq!(first["revision"], 1);
    assert_eq!(first["revisionId"], d["revisionId"]);
    hub.stop().await;
}

/// Issue 29: `POST .../agents/{name}/chat` needs deploy rights on the
/// exact tenant, checks its body before anything else (each field named),
/// and answers 409 saying why while the Agent has no active revision; none
/// of that reaches a runtime or changes an object. (The answer of a real
/// runtime: `pipeline_e2e`'s embedded OpenClaw test.)
async fn chat_is_refused_clearly_until_a_runtime_can_answer(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("ns-a").await;
    c.create_namespace("ns-b").await;
    c.create_agent("ns-b", "b1", spec("img:1")).await;
    c.deploy("ns-b", "b1", None, None).await.expect(201);
    let a = Caller::new(&hub, &hub.token("a-admin", Some("ns-a"), Role::Admin).await);
    let viewer = Caller::new(&hub, &hub.token("b-view", Some("ns-b"), Role::Viewer).await);
    let path = "/namespaces/ns-b/agents/b1/chat";
    let hello = json!({ "message": "hello" });

    let before = snapshot(&c).await;
    a.post(path, hello.clone())
        .await
        .expect_error(403, "permission_denied");
    viewer
        .post(path, hello.clone())
        .await
        .expect_error(403, "permission_denied");
    c.post("/namespaces/ns-b/agents/nope/chat", hello.clone())
        .await
        .expect_error(404, "not_found");
    for (body, field) in [
        (json!({ "message": "  " }), "message"),
        (json!({ "message": "x".repeat(16 * 1024 + 1) }), "message"),
        (
            json!({ "message": "hi", "conversation": "no spaces" }),
            "conversation",
        ),
        (
            json!({ "message": "hi", "conversation": "c".repeat(129) }),
            "conversation",
        ),
    ] {
        let e = c
            .post(path, body.clone())
            .await
            .expect_error(400, "invalid_argument")
            .clone();
        assert_eq!(e["field"], field, "{body}: {e}");
    }
    let e = c
        .post(path, json!({ "message": "hi", "model": "x" }))
        .await
        .expect_error(400, "invalid_argument")
        .clone();
    assert!(
        e["message"].as_str().unwrap_or_default().contains("model"),
        "{e}"
    );
    let e = c
        .post(path, hello.clone())
        .await
        .expect_error(409, "failed_precondition")
        .clone();
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("no active revision"),
        "{e}"
    );
    assert_eq!(snapshot(&c).await, before, "a refused chat changes nothing");
    hub.stop().await;
}

// ---- 5. Audit ------------------------------------------------------------------

async fn audit_records_every_mutation(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("team").await;
    c.create_configuration("team", "cfg", json!({})).await;
    c.put(
        "/namespaces/team/configurations/cfg",
        json!({ "data": { "a": 1 }, "version": 1 }),
    )
    .await
    .expect(200);
    c.create_agent("team", "bot", spec("img:1")).await;
    c.put(
        "/namespaces/team/agents/bot",
        json!({ "spec": spec("img:2"), "version": 1 }),
    )
    .await
    .expect(200);
    c.deploy("team", "bot", None, None).await.expect(201);
    c.deploy("team", "bot", None, Some(json!({ "fromRevision": 1 })))
        .await
        .expect(201);
    c.post("/namespaces/team/agents/bot/stop", json!({}))
        .await
        .expect(200);
    c.delete("/namespaces/team/agents/bot").await.expect(204);
    c.delete("/namespaces/team/configurations/cfg")
        .await
        .expect(204);
    c.create_namespace("gone").await;
    c.delete("/namespaces/gone").await.expect(204);

    let all = c.audit("?limit=1000").await;
    let expected = [
        ("namespace.create", "namespaces/team"),
        ("configuration.create", "configurations/cfg"),
        ("configuration.update", "configurations/cfg"),
        ("agent.create", "agents/bot"),
        ("agent.update", "agents/bot"),
        ("agent.deploy", "agents/bot"),
        ("agent.rollback", "agents/bot"),
        ("agent.stop", "agents/bot"),
        ("agent.delete", "agents/bot"),
        ("configuration.delete", "configurations/cfg"),
        ("namespace.create", "namespaces/gone"),
        ("namespace.delete", "namespaces/gone"),
    ];
    let ours: Vec<(&str, &str)> = all
        .iter()
        .rev() // oldest first
        .filter(|e| e["actor"] == "token:root")
        .map(|e| {
            assert_eq!(e["result"], "ok", "{e}");
            assert!(e["at"].is_string());
            (e["action"].as_str().unwrap(), e["target"].as_str().unwrap())
        })
        .collect();
    assert_eq!(ours, expected);
    let deploy = events(&all, "agent.deploy", "ok")[0];
    assert_eq!(deploy["namespace"], "team");
    assert_eq!(deploy["detail"], "revision 1");
    let ids: Vec<i64> = all.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    assert_eq!(c.audit("?limit=2").await.len(), 2);
    assert_eq!(c.audit("?limit=2").await[..], all[..2]);

    // A denied mutation is audited as denied. (A deleted Agent's name
    // stays with its history: a new one.)
    c.create_agent("team", "bot2", spec("img:1")).await;
    let viewer = Caller::new(&hub, &hub.token("peek", Some("team"), Role::Viewer).await);
    viewer
        .deploy("team", "bot2", None, None)
        .await
        .expect_error(403, "permission_denied");
    let latest = c.audit("?limit=1").await;
    assert_eq!(latest[0]["action"], "agent.deploy");
    assert_eq!(latest[0]["actor"], "token:peek");
    assert_eq!(latest[0]["result"], "denied");
    assert_eq!(latest[0]["target"], "agents/bot2");
    assert_eq!(latest[0]["namespace"], "team");

    // A failed mutation (a stale version) is audited as an error.
    c.put(
        "/namespaces/team/agents/bot2",
        json!({ "spec": spec("img:3"), "version": 99 }),
    )
    .await
    .expect_error(409, "conflict");
    let latest = c.audit("?limit=1").await;
    assert_eq!(latest[0]["action"], "agent.update");
    assert_eq!(latest[0]["actor"], "token:root");
    assert_eq!(latest[0]["result"], "error");
    assert!(
        latest[0]["detail"].as_str().unwrap().contains("version"),
        "{}",
        latest[0]
    );

    // So is a validation failure.
    c.post(
        "/namespaces/team/agents",
        json!({ "name": "Bad_Name", "spec": spec("img:1") }),
    )
    .await
    .expect_invalid("name");
    let latest = c.audit("?limit=1").await;
    assert_eq!(latest[0]["action"], "agent.create");
    assert_eq!(latest[0]["result"], "error");
    assert_eq!(latest[0]["target"], "agents/Bad_Name");

    // Reads are not audited.
    let count = c.audit("?limit=1000").await.len();
    c.get("/namespaces/team/agents/bot2").await.expect(200);
    c.get("/namespaces").await.expect(200);
    assert_eq!(c.audit("?limit=1000").await.len(), count);
    hub.stop().await;
}

// ---- 6. Bad input ----------------------------------------------------------------

async fn bad_bodies_are_400_naming_the_field(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("team").await;
    c.create_agent("team", "bot", spec("img:1")).await;
    c.create_configuration("team", "cfg", json!({ "a": 1 }))
        .await;
    let before = snapshot(&c).await;

    let raw = |method: Method, path: &'static str, body: &'static str| {
        let c = &c;
        async move {
            c.raw(method, path, Some(body.as_bytes().to_vec()), &[])
                .await
        }
    };

    // Malformed JSON.
    for (method, path, body) in [
        (Method::POST, "/namespaces", r#"{"name": "x""#),
        (Method::POST, "/namespaces", "not json"),
        (Method::POST, "/namespaces/team/agents", r#"{"name": "x",}"#),
        (Method::PUT, "/namespaces/team/agents/bot", r#"{"spec": {"#),
        (
            Method::POST,
            "/namespaces/team/agents/bot/deploy",
            "{fromRevision: 1}",
        ),
    ] {
        let r = raw(method.clone(), path, body).await;
        let error = r.expect_error(400, "invalid_argument");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("malformed JSON"),
            "{method} {path} {body}: {}",
            r.text
        );
        assert!(error["field"].is_string(), "{}", r.text);
    }
    // An empty body where one is required.
    raw(Method::POST, "/namespaces", "")
        .await
        .expect_error(400, "invalid_argument");

    // Unknown fields.
    let r = c
        .post("/namespaces", json!({ "name": "x", "colour": "red" }))
        .await;
    let error = r.expect_error(400, "invalid_argument");
    assert!(
        error["message"].as_str().unwrap().contains("colour"),
        "{}",
        r.text
    );
    let r = c
        .post(
            "/namespaces/team/agents",
            json!({ "name": "x", "spec": { "harnessKind": "embedded-openclaw", "image": "i:1", "replicas": 3 } }),
        )
        .await;
    let error = r.expect_error(400, "invalid_argument");
    assert!(error["message"].as_str().unwrap().contains("replicas"));
    assert!(
        error["field"].as_str().unwrap().starts_with("spec"),
        "{}",
        r.text
    );
    let r = c
        .deploy("team", "bot", None, Some(json!({ "revision": 1 })))
        .await;
    assert!(
        r.expect_error(400, "invalid_argument")["message"]
            .as_str()
            .unwrap()
            .contains("revision")
    );
    let r = c
        .put(
            "/namespaces/team/configurations/cfg",
            json!({ "data": {}, "version": 1, "force": true }),
        )
        .await;
    assert!(
        r.expect_error(400, "invalid_argument")["message"]
            .as_str()
            .unwrap()
            .contains("force")
    );

    // Wrong types name the field.
    c.post("/namespaces", json!({ "name": 5 }))
        .await
        .expect_invalid("name");
    c.post(
        "/namespaces/team/agents",
        json!({ "name": "x", "spec": { "harnessKind": "embedded-openclaw", "image": ["i"] } }),
    )
    .await
    .expect_invalid("spec.image");
    c.post(
        "/namespaces/team/agents",
        json!({ "name": "x", "spec": { "harnessKind": "kubernetes", "image": "i:1" } }),
    )
    .await
    .expect_invalid("spec.harnessKind");
    c.post(
        "/namespaces/team/agents",
        json!({ "name": "x", "spec": { "harnessKind": "embedded-openclaw", "image": "i:1", "plugins": "web" } }),
    )
    .await
    .expect_invalid("spec.plugins");
    c.put(
        "/namespaces/team/agents/bot",
        json!({ "spec": spec("img:2"), "version": "1" }),
    )
    .await
    .expect_invalid("version");
    c.deploy("team", "bot", None, Some(json!({ "fromRevision": "one" })))
        .await
        .expect_invalid("fromRevision");
    c.deploy("team", "bot", None, Some(json!([1])))
        .await
        .expect_error(400, "invalid_argument");
    // Missing required fields.
    let r = c
        .post("/namespaces/team/agents", json!({ "name": "x" }))
        .await;
    assert!(
        r.expect_error(400, "invalid_argument")["message"]
            .as_str()
            .unwrap()
            .contains("spec")
    );
    // A configuration document must be an object.
    c.post(
        "/namespaces/team/configurations",
        json!({ "name": "arr", "data": [1, 2] }),
    )
    .await
    .expect_invalid("data");
    c.put(
        "/namespaces/team/configurations/cfg",
        json!({ "data": "text", "version": 1 }),
    )
    .await
    .expect_invalid("data");

    assert_eq!(snapshot(&c).await, before, "nothing stored changed");
    hub.stop().await;
}

async fn invalid_names_and_specs_are_400_naming_the_field(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("team").await;
    c.create_agent("team", "bot", spec("img:1")).await;
    let before = snapshot(&c).await;

    // DNS-1123 names.
    for bad in [
        "Team",
        "team_a",
        "-team",
        "team-",
        "",
        &"a".repeat(64),
        "tëam",
    ] {
        c.post("/namespaces", json!({ "name": bad }))
            .await
            .expect_invalid("name");
        c.post(
            "/namespaces/team/configurations",
            json!({ "name": bad, "data": {} }),
        )
        .await
        .expect_invalid("name");
        c.post(
            "/namespaces/team/agents",
            json!({ "name": bad, "spec": spec("img:1") }),
        )
        .await
        .expect_invalid("name");
    }
    c.post(
        "/namespaces",
        json!({ "name": "ok", "adoptNamespace": "Not_DNS" }),
    )
    .await
    .expect_invalid("adoptNamespace");
    c.post(
        "/namespaces",
        json!({ "name": "ok", "displayName": "a\u{0007}b" }),
    )
    .await
    .expect_invalid("displayName");
    c.post(
        "/namespaces",
        json!({ "name": "ok", "displayName": "x".repeat(257) }),
    )
    .await
    .expect_invalid("displayName");
    // Agent names are shorter than DNS labels (they prefix object names).
    let long_agent = "a".repeat(63);
    c.post(
        "/namespaces/team/agents",
        json!({ "name": long_agent, "spec": spec("img:1") }),
    )
    .await
    .expect_invalid("name");

    // Spec fields, on create and on update.
    let with = |patch: Value| {
        let mut s = spec("ghcr.io/openclaw/openclaw:1");
        for (k, v) in patch.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    let cases: Vec<(Value, &str)> = vec![
        (with(json!({ "image": "img@sha256:abc" })), "spec.image"),
        (with(json!({ "image": "img@md5:abc" })), "spec.image"),
        (with(json!({ "image": "" })), "spec.image"),
        (with(json!({ "image": "has space:1" })), "spec.image"),
        (
            with(json!({ "gatewayImage": format!("gw@sha256:{}", "z".repeat(64)) })),
            "spec.gatewayImage",
        ),
        (
            with(json!({ "resources": { "memoryLimit": "lots" } })),
            "spec.resources.memoryLimit",
        ),
        (
            with(json!({ "resources": { "cpuRequest": "1.5Gb" } })),
            "spec.resources.cpuRequest",
        ),
        (
            with(json!({ "requirementLabels": { "bad key!": "x" } })),
            "spec.requirementLabels[\"bad key!\"]",
        ),
        (
            with(json!({ "requirementLabels": { "gpu": "-bad" } })),
            "spec.requirementLabels[\"gpu\"]",
        ),
        (
            with(json!({ "requirementLabels": { "clawfed.io/agent": "x" } })),
            "spec.requirementLabels[\"clawfed.io/agent\"]",
        ),
        (
            with(json!({ "requirementLabels": { "app.kubernetes.io/managed-by": "me" } })),
            "spec.requirementLabels[\"app.kubernetes.io/managed-by\"]",
        ),
        (
            with(json!({ "plugins": ["web", "web"] })),
            "spec.plugins[1]",
        ),
        (with(json!({ "plugins": ["Web"] })), "spec.plugins[0]"),
        (
            with(json!({ "placement": { "cluster": "Exec_A" } })),
            "spec.placement.cluster",
        ),
        (
            with(json!({ "placement": { "clusterSelector": { "bad key!": "x" } } })),
            "spec.placement.clusterSelector[\"bad key!\"]",
        ),
        (
            with(json!({ "configuration": "Not_A_Name" })),
            "spec.configuration",
        ),
        (
            with(json!({ "executionMode": "sideways" })),
            "spec.executionMode",
        ),
        // Issue 12, topology: embedded OpenClaw is never delegated to a
        // provider.
        (
            with(json!({ "harnessKind": "embedded-openclaw", "executionMode": "provider" })),
            "spec.executionMode",
        ),
        // Dedicated native OpenClaw needs a provisioning SandboxDriver.
        (
            with(json!({ "harnessKind": "dedicated-openclaw", "executionMode": "ordinary" })),
            "spec.executionMode",
        ),
        // Enabled external channels need dedicated execution.
        (
            with(json!({ "harnessKind": "embedded-openclaw", "channels": [{ "name": "slack" }] })),
            "spec.channels[0]",
        ),
        (
            with(json!({ "harnessKind": "dedicated-codex",
                         "channels": [{ "name": "slack" }, { "name": "slack" }] })),
            "spec.channels[1].name",
        ),
        (
            with(json!({ "harnessKind": "dedicated-codex", "channels": [{ "name": "Slack" }] })),
            "spec.channels[0].name",
        ),
    ];
    for (bad, field) in &cases {
        let r = c
            .post(
                "/namespaces/team/agents",
                json!({ "name": "new-agent", "spec": bad }),
            )
            .await;
        assert_eq!(r.status, 400, "create with {bad}: {}", r.text);
        r.expect_invalid(field);
        c.put(
            "/namespaces/team/agents/bot",
            json!({ "spec": bad, "version": 1 }),
        )
        .await
        .expect_invalid(field);
    }

    // Valid labels and a pinned digest pass.
    let ok = with(json!({
        "image": format!("img@sha256:{}", "0123456789abcdef".repeat(4)),
        "requirementLabels": { "example.com/gpu": "a100" },
    }));
    c.put(
        "/namespaces/team/agents/bot",
        json!({ "spec": ok, "version": 1 }),
    )
    .await
    .expect(200);
    c.put(
        "/namespaces/team/agents/bot",
        json!({ "spec": spec("img:1"), "version": 2 }),
    )
    .await
    .expect(200);

    let after = snapshot(&c).await;
    let strip = |mut v: Value| {
        // The two valid updates bumped the agent's version and timestamps.
        for agent in v[0]["agents"]["items"].as_array_mut().unwrap() {
            agent["version"] = Value::Null;
            agent["updatedAt"] = Value::Null;
        }
        v
    };
    assert_eq!(strip(after), strip(before), "nothing else changed");
    assert_eq!(c.get("/namespaces").await.items().len(), 1);

    // The topology rules' allowed combinations pass: a disabled channel on
    // embedded OpenClaw, enabled channels on a dedicated harness, dedicated
    // native OpenClaw under a provider.
    for (i, ok) in [
        json!({ "harnessKind": "embedded-openclaw", "channels": [{ "name": "slack", "enabled": false }] }),
        json!({ "harnessKind": "dedicated-codex", "channels": [{ "name": "slack" }] }),
        json!({ "harnessKind": "dedicated-openclaw", "executionMode": "provider",
                "channels": [{ "name": "telegram" }] }),
    ]
    .into_iter()
    .enumerate()
    {
        let r = c
            .post(
                "/namespaces/team/agents",
                json!({ "name": format!("topo-{i}"), "spec": with(ok.clone()) }),
            )
            .await;
        assert_eq!(r.status, 201, "create with {ok}: {}", r.text);
    }
    hub.stop().await;
}

async fn oversized_body_is_413(backend: Backend) {
    let mut hub = TestHub::start_with(
        backend,
        |config| config.api.max_body_bytes = 2048,
        Handlers::builtin(),
    )
    .await;
    let c = root(&hub);
    c.create_namespace("team").await;
    c.create_agent("team", "bot", spec("img:1")).await;
    let before = snapshot(&c).await;

    let big = json!({ "name": "big", "data": { "blob": "x".repeat(4096) } });
    let r = c.post("/namespaces/team/configurations", big).await;
    let error = r.expect_error(413, "payload_too_large");
    assert!(error["message"].as_str().unwrap().contains("2048"));
    let big_agent = json!({ "spec": spec(&format!("img:{}", "1".repeat(3000))), "version": 1 });
    c.put("/namespaces/team/agents/bot", big_agent)
        .await
        .expect_error(413, "payload_too_large");
    c.deploy(
        "team",
        "bot",
        None,
        Some(json!({ "fromRevision": 1, "pad": " ".repeat(4096) })),
    )
    .await
    .expect_error(413, "payload_too_large");
    // Just under the limit is fine.
    let fits = json!({ "name": "fits", "data": { "blob": "x".repeat(1500) } });
    c.post("/namespaces/team/configurations", fits)
        .await
        .expect(201);
    c.delete("/namespaces/team/configurations/fits")
        .await
        .expect(204);
    assert_eq!(snapshot(&c).await, before);
    hub.stop().await;
}

async fn bad_query_and_path_params(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("team").await;
    c.create_agent("team", "bot", spec("img:1")).await;
    c.deploy("team", "bot", None, None).await.expect(201);

    for path in ["/audit?limit=0", "/audit?limit=-1", "/audit?limit=1001"] {
        c.get(path).await.expect_invalid("limit");
    }
    for path in ["/work?limit=0", "/work?limit=5000"] {
        c.get(path).await.expect_invalid("limit");
    }
    for path in [
        "/audit?limit=abc",
        "/work?limit=1.5",
        "/audit?colour=red",
        "/work?status=pending",
    ] {
        let r = c.get(path).await;
        assert_eq!(r.status, 400, "{path}: {}", r.text);
        r.expect_invalid("query");
    }
    c.get("/work?state=bogus").await.expect_invalid("state");
    c.get("/audit?limit=1000").await.expect(200);
    c.get("/work?state=pending&limit=1").await.expect(200);

    for number in ["abc", "0", "-1", "1.0", "99999999999999999999"] {
        c.get(&format!("/namespaces/team/agents/bot/revisions/{number}"))
            .await
            .expect_invalid("number");
    }
    c.get("/namespaces/team/agents/bot/revisions/1")
        .await
        .expect(200);

    // Parameters PostgreSQL cannot store (NUL) or that are not UTF-8 are
    // client errors with the JSON error body, never 500s.
    for (path, field) in [
        ("/namespaces/%00", "ns"),
        ("/namespaces/a%00b/agents", "ns"),
        ("/namespaces/team/agents/%00", "name"),
        ("/namespaces/team/configurations/x%00", "name"),
        ("/namespaces/team/agents/bot/revisions/%00", "number"),
        ("/clusters/%00", "name"),
        ("/work/%00", "id"),
        ("/audit?namespace=%00", "namespace"),
        ("/work?namespace=team%00", "namespace"),
    ] {
        let r = c.get(path).await;
        assert_eq!(r.status, 400, "{path}: {}", r.text);
        r.expect_invalid(field);
    }
    let before = snapshot(&c).await;
    c.deploy("%00", "bot", None, None)
        .await
        .expect_invalid("ns");
    c.delete("/namespaces/team/agents/%00")
        .await
        .expect_invalid("name");
    c.put(
        "/namespaces/team/agents/b%00t",
        json!({ "spec": spec("img:2"), "version": 1 }),
    )
    .await
    .expect_invalid("name");
    c.post("/clusters/%00/revoke", json!({}))
        .await
        .expect_invalid("name");
    c.post("/clusters/%00/bootstrap-tokens", json!({}))
        .await
        .expect_invalid("name");
    c.get("/namespaces/%FF")
        .await
        .expect_error(400, "invalid_argument");
    c.get("/namespaces/team/agents/%C3%28")
        .await
        .expect_error(400, "invalid_argument");
    assert_eq!(snapshot(&c).await, before);
    // Inside a JSON document a NUL is just an escaped character.
    let cfg = c
        .create_configuration("team", "nul", json!({ "a": "x\u{0}y", "k\u{0}": 1 }))
        .await;
    assert_eq!(cfg["data"], json!({ "a": "x\u{0}y", "k\u{0}": 1 }));
    let got = c.get("/namespaces/team/configurations/nul").await;
    assert_eq!(got.expect(200)["data"]["a"], "x\u{0}y");

    // Unknown routes are JSON 404s; a wrong method is not a 404.
    for path in ["/nope", "/namespaces/team/widgets", "/api/v2/namespaces"] {
        let r = c.get(path).await;
        assert_eq!(r.expect_error(404, "not_found")["message"], "no such route");
        assert!(
            r.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json")
        );
    }
    let r = c
        .raw(Method::PATCH, "/namespaces/team/agents/bot", None, &[])
        .await;
    assert_eq!(r.status, 405, "{}", r.text);
    hub.stop().await;
}

// ---- 7. OpenAPI -----------------------------------------------------------------

async fn openapi_documents_only_routed_operations(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    let doc = c.get("/openapi.json").await.expect(200).clone();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    let paths = doc["paths"].as_object().expect("paths");
    for expected in [
        "/api/v1/namespaces",
        "/api/v1/namespaces/{ns}",
        "/api/v1/namespaces/{ns}/configurations/{name}",
        "/api/v1/namespaces/{ns}/agents/{name}",
        "/api/v1/namespaces/{ns}/agents/{name}/deploy",
        "/api/v1/namespaces/{ns}/agents/{name}/stop",
        "/api/v1/namespaces/{ns}/agents/{name}/revisions/{number}",
        "/api/v1/clusters/{name}",
        "/api/v1/fleet",
        "/api/v1/audit",
        "/api/v1/work/{id}",
    ] {
        assert!(paths.contains_key(expected), "{expected} is not documented");
    }
    assert!(paths["/api/v1/namespaces/{ns}/agents/{name}/deploy"]["post"].is_object());
    assert!(paths["/api/v1/namespaces/{ns}/agents/{name}"]["put"].is_object());

    let mut operations = 0;
    for (template, item) in paths {
        let mut path = fill_placeholders(template);
        if template == "/api/v1/watch" || template == "/api/v1/audit/stream" {
            // An event stream ends only when told not to follow.
            path.push_str("?follow=false");
        }
        for method in ["get", "post", "put", "delete", "patch"] {
            if item.get(method).is_none() {
                continue;
            }
            operations += 1;
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let body = matches!(method, "post" | "put").then(|| b"{}".to_vec());
            let r = c.raw(m, &path, body, &[]).await;
            assert_ne!(r.status, 405, "{method} {template} is not routed");
            assert!(
                !(r.status == 404 && r.body["error"]["message"] == "no such route"),
                "{method} {template} is documented but not routed"
            );
            assert!(r.status < 500, "{method} {template}: {}", r.text);
        }
    }
    assert!(operations >= 20, "only {operations} operations documented");
    hub.stop().await;
}

/// `/a/{ns}/b/{number}` → `/a/placeholder/b/1`: every path parameter gets a
/// value of the right shape (numbers for `{number}`).
fn fill_placeholders(template: &str) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let end = rest[start..].find('}').expect("closing brace") + start;
        out.push_str(&rest[..start]);
        out.push_str(if &rest[start + 1..end] == "number" {
            "1"
        } else {
            "placeholder"
        });
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

// ---- 8. Health and metrics -----------------------------------------------------

async fn health_and_metrics(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    for path in ["/healthz", "/readyz"] {
        let r = hub
            .http
            .get(format!("{}{path}", hub.rest))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "REST {path}");
        let r = hub
            .http
            .get(format!("{}{path}", hub.metrics))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "metrics listener {path}");
    }

    let c = root(&hub);
    c.create_namespace("team").await;
    c.get("/namespaces").await.expect(200);
    c.get("/namespaces/team").await.expect(200);
    for i in 0..3 {
        c.create_agent("team", &format!("bot-{i}"), spec("img:1"))
            .await;
    }
    c.get("/nope").await.expect(404);

    let scrape = || hub.scrape_metrics();
    let text = scrape().await;
    for name in [
        "occ_http_requests_total",
        "occ_http_request_duration_seconds",
        "occ_agents",
        "occ_work_pending",
        "occ_work_oldest_pending_age_seconds",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
    let sample = |text: &str, prefix: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    };
    let list_requests = sample(&text, "occ_http_requests_total{")
        .into_iter()
        .filter(|l| {
            l.contains("route=\"/api/v1/namespaces\"")
                && l.contains("method=\"GET\"")
                && l.contains("status=\"200\"")
        })
        .collect::<Vec<_>>();
    assert_eq!(list_requests.len(), 1, "{text}");
    assert!(list_requests[0].ends_with(" 1"), "{}", list_requests[0]);
    assert!(
        text.contains("route=\"/api/v1/namespaces/{ns}\""),
        "routes are labelled by template:\n{text}"
    );
    assert!(
        sample(&text, "occ_http_request_duration_seconds_count{")
            .iter()
            .any(|l| l.contains("route=\"/api/v1/namespaces/{ns}/agents\"")),
        "{text}"
    );
    assert!(!text.contains("bot-0"), "no unbounded label values: {text}");

    let gauge = |text: &str, name: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no sample {name} in:\n{text}"));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    assert_eq!(gauge(&text, "occ_agents"), 3.0);

    // The work gauges, against work this test controls: once the worker
    // has finished the namespace's provisioning item nothing is
    // outstanding, so both read exactly 0 ...
    let store = hub.store();
    let outstanding = || async {
        let mut n = 0;
        for state in [WorkState::Pending, WorkState::Claimed] {
            let filter = WorkFilter {
                namespace: None,
                state: Some(state),
                limit: 100,
            };
            n += store.list_work(&filter).await.unwrap().len();
        }
        n
    };
    clawfed_tests::link::eventually(
        std::time::Duration::from_secs(10),
        "the provisioning work to finish",
        || async { (outstanding().await == 0).then_some(()) },
    )
    .await;
    let text = scrape().await;
    assert_eq!(gauge(&text, "occ_work_pending"), 0.0, "{text}");
    assert_eq!(gauge(&text, "occ_work_oldest_pending_age_seconds"), 0.0);
    // ... and two items parked an hour ahead (no worker claims them) count
    // as two, aged no more than the time since they were enqueued.
    let parked = |target: &str| clawfed_hub::store::NewWork {
        kind: "test.parked".into(),
        namespace_id: None,
        target: target.into(),
        payload: json!({}),
        requested_by: None,
        max_attempts: 1,
        run_at: Utc::now() + Duration::hours(1),
        coalesce: false,
    };
    store
        .enqueue_work(&[parked("a"), parked("b")])
        .await
        .unwrap();
    let text = scrape().await;
    assert_eq!(gauge(&text, "occ_work_pending"), 2.0, "{text}");
    // Scheduled for an hour from now: pending, but not late.
    assert_eq!(
        gauge(&text, "occ_work_oldest_pending_age_seconds"),
        0.0,
        "{text}"
    );

    c.delete("/namespaces/team/agents/bot-0").await.expect(204);
    c.create_namespace("other").await;
    c.create_agent("other", "x", spec("img:1")).await;
    c.create_agent("other", "y", spec("img:1")).await;
    assert_eq!(gauge(&scrape().await, "occ_agents"), 4.0);
    hub.stop().await;
}

// ---- 9. Managed credentials ------------------------------------------------------

/// Issue 12 item 1: a managed credential is set and deleted, never read
/// back: answers carry kind, version and time only; no GET of the Agent,
/// its revisions, the audit log or the work queue shows the value, nor
/// does the database. Bad kinds and a service-account credential for a
/// non-Codex Agent are 400s naming `kind`; other tenants get 403. A deploy
/// freezes the current value; a rollback carries the current one.
async fn credentials_are_write_only(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let c = root(&hub);
    c.create_namespace("team-a").await;
    c.create_namespace("team-b").await;
    c.create_agent("team-a", "bot", spec("img:1")).await;
    c.create_agent(
        "team-a",
        "coder",
        json!({ "harnessKind": "dedicated-codex", "image": "img:1" }),
    )
    .await;
    let secret1 = format!("sk-one-{}", uuid::Uuid::new_v4().simple());
    let secret2 = format!("sk-two-{}", uuid::Uuid::new_v4().simple());
    let secret3 = format!("sk-three-{}", uuid::Uuid::new_v4().simple());
    let secrets = [&secret1, &secret2, &secret3];
    let never_shows = |what: &str, text: &str| {
        for s in secrets {
            assert!(
                !text.contains(s.as_str()),
                "{what} shows a credential: {text}"
            );
        }
    };
    let path = "/namespaces/team-a/agents/bot/credentials";

    let set = c
        .put(
            &format!("{path}/model-api-key"),
            json!({ "value": secret1 }),
        )
        .await;
    let meta = set.expect(200);
    assert_eq!(meta["kind"], "model-api-key");
    assert_eq!(meta["version"], 1);
    assert!(meta["setAt"].is_string(), "{}", set.text);
    assert_eq!(
        meta.as_object().unwrap().keys().collect::<BTreeSet<_>>(),
        BTreeSet::from([
            &"kind".to_owned(),
            &"setAt".to_owned(),
            &"version".to_owned()
        ]),
        "metadata only"
    );
    never_shows("set", &set.text);
    let r1 = c.deploy("team-a", "bot", None, None).await;
    r1.expect(201);
    let replaced = c
        .put(
            &format!("{path}/model-api-key"),
            json!({ "value": secret2 }),
        )
        .await;
    assert_eq!(replaced.expect(200)["version"], 2);
    never_shows("replace", &replaced.text);

    // Bad input: a 400 naming the field; the value is never echoed.
    c.put(&format!("{path}/password"), json!({ "value": secret3 }))
        .await
        .expect_invalid("kind");
    let sa = c
        .put(
            &format!("{path}/service-account"),
            json!({ "value": secret3 }),
        )
        .await;
    sa.expect_invalid("kind");
    assert!(sa.text.contains("dedicated-codex"), "{}", sa.text);
    never_shows("refusal", &sa.text);
    c.put(
        "/namespaces/team-a/agents/coder/credentials/service-account",
        json!({ "value": secret3 }),
    )
    .await
    .expect(200);
    c.put(&format!("{path}/model-api-key"), json!({ "value": "" }))
        .await
        .expect_invalid("value");
    c.put(&format!("{path}/model-api-key"), json!({ "value": "a\0b" }))
        .await
        .expect_invalid("value");
    let bare = c
        .raw(
            Method::PUT,
            &format!("{path}/model-api-key"),
            Some(json!(secret3).to_string().into_bytes()),
            &[],
        )
        .await;
    bare.expect_invalid("body");
    never_shows("a malformed body's refusal", &bare.text);
    let extra = c
        .put(
            &format!("{path}/model-api-key"),
            json!({ "value": secret3, "note": secret3 }),
        )
        .await;
    extra.expect(400);
    never_shows("an unknown field's refusal", &extra.text);
    c.put(
        "/namespaces/team-a/agents/nobody/credentials/model-api-key",
        json!({ "value": secret3 }),
    )
    .await
    .expect_error(404, "not_found");

    // Listing: metadata only; revision 1 froze version 1.
    let listed = c.get(path).await;
    let items = listed.items();
    assert_eq!(items.len(), 1, "{}", listed.text);
    assert_eq!(items[0]["version"], 2);
    never_shows("list", &listed.text);
    let frozen = c
        .get("/namespaces/team-a/agents/bot/revisions/1/credentials")
        .await;
    assert_eq!(frozen.items()[0]["version"], 1, "{}", frozen.text);

    // Rollback to revision 1 carries the CURRENT credential (version 3).
    c.put(
        &format!("{path}/model-api-key"),
        json!({ "value": secret3 }),
    )
    .await
    .expect(200);
    c.deploy("team-a", "bot", None, Some(json!({ "fromRevision": 1 })))
        .await
        .expect(201);
    let rolled = c
        .get("/namespaces/team-a/agents/bot/revisions/2/credentials")
        .await;
    assert_eq!(rolled.items()[0]["version"], 3, "{}", rolled.text);

    // Nothing readable shows a value.
    for read in [
        "/namespaces/team-a/agents/bot",
        "/namespaces/team-a/agents",
        "/namespaces/team-a/agents/bot/revisions",
        "/namespaces/team-a/agents/bot/revisions/1",
        "/namespaces/team-a/agents/bot/revisions/2",
        "/namespaces/team-a/agents/coder/credentials",
        "/audit?limit=1000",
        "/work?limit=1000",
    ] {
        let r = c.get(read).await;
        r.expect(200);
        never_shows(read, &r.text);
    }
    let audit = c.audit("?namespace=team-a&limit=1000").await;
    assert_eq!(
        events(&audit, "agent.credential.set", "ok").len(),
        4,
        "every set is audited"
    );
    assert!(!events(&audit, "agent.credential.set", "error").is_empty());

    // Tenant authorization like the other Agent writes.
    let other = hub.token("b-admin", Some("team-b"), Role::Admin).await;
    let b = Caller::new(&hub, &other);
    b.put(&format!("{path}/model-api-key"), json!({ "value": "x" }))
        .await
        .expect_error(403, "permission_denied");
    b.get(path).await.expect_error(403, "permission_denied");
    b.delete(&format!("{path}/model-api-key"))
        .await
        .expect_error(403, "permission_denied");
    let viewer = hub.token("a-viewer", Some("team-a"), Role::Viewer).await;
    let v = Caller::new(&hub, &viewer);
    v.put(&format!("{path}/model-api-key"), json!({ "value": "x" }))
        .await
        .expect_error(403, "permission_denied");
    assert_eq!(v.get(path).await.expect(200)["items"][0]["version"], 3);
    let deployer = hub
        .token("a-deployer", Some("team-a"), Role::Deployer)
        .await;
    Caller::new(&hub, &deployer)
        .put(
            &format!("{path}/model-api-key"),
            json!({ "value": secret3 }),
        )
        .await
        .expect(200);

    // Delete: gone from the Agent, kept by the revisions.
    c.delete(&format!("{path}/model-api-key")).await.expect(204);
    assert!(c.get(path).await.items().is_empty());
    c.delete(&format!("{path}/model-api-key"))
        .await
        .expect_error(404, "not_found");
    c.delete(&format!("{path}/bogus"))
        .await
        .expect_invalid("kind");
    assert_eq!(
        c.get("/namespaces/team-a/agents/bot/revisions/2/credentials")
            .await
            .items()
            .len(),
        1
    );

    let raw = clawfed_tests::db::all_text(&hub.db).await;
    never_shows("the database", &raw);
    hub.stop().await;
}

/// The web fleet view's assets (`/ui`): served without a token, each with
/// its type, the strict Content-Security-Policy, `nosniff` and
/// `no-referrer`; the page names no other origin; the data behind it still
/// needs a token. (The page itself runs in a browser in
/// `pipeline_e2e::the_web_view_shows_the_fleet_live_in_a_browser`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_is_served_embedded_with_a_strict_policy() {
    let mut hub = TestHub::start(Backend::Sqlite).await;
    let http = reqwest::Client::new();
    for (path, content_type) in [
        ("/ui", "text/html"),
        ("/ui/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
        ("/ui/favicon.svg", "image/svg+xml"),
    ] {
        let resp = http
            .get(format!("{}{path}", hub.rest))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let h = resp.headers();
        let header = |name: &str| {
            h.get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        assert!(
            header("content-type").starts_with(content_type),
            "{path}: {}",
            header("content-type")
        );
        assert_eq!(
            header("content-security-policy"),
            clawfed_hub::api::ui::CONTENT_SECURITY_POLICY,
            "{path}"
        );
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(header("referrer-policy"), "no-referrer", "{path}");
        let body = resp.text().await.unwrap();
        // (The icon's XML namespace is a name, not a request.)
        assert!(
            path.ends_with(".svg") || !(body.contains("http://") || body.contains("https://")),
            "{path} names another origin"
        );
    }
    let missing = http
        .get(format!("{}/ui/other.js", hub.rest))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let data = http
        .get(format!("{}/api/v1/clusters", hub.rest))
        .send()
        .await
        .unwrap();
    assert_eq!(data.status(), 401, "the lists behind the page need a token");
    hub.stop().await;
}
