//! Tenant quotas (`quotas`) on a real in-process hub, over REST and gRPC,
//! on SQLite and PostgreSQL: a write past a tenant's limit is refused 403
//! `quota_exceeded` naming the quota, its limit and what is in use (gRPC
//! RESOURCE_EXHAUSTED), leaves nothing behind, and is audited; a tenant's
//! own limits overlay the defaults; `GET /namespaces/{ns}/quota` and gRPC
//! `GetQuota` show each limit beside its use, and so does the web view,
//! in a real browser, as a deploy changes it.

use clawfed_hub::auth::Role;
use clawfed_hub::quota::{QuotaSettings, TenantQuota};
use clawfed_hub::worker::Handlers;
use clawfed_proto::admin::v1 as pb;
use clawfed_tests::hub::{Backend, TestHub, authed};
use serde_json::{Value, json};

clawfed_tests::on_both_backends!(
    writes_past_a_quota_are_refused_naming_it,
    usage_is_shown_beside_the_limits,
);

fn spec() -> Value {
    json!({ "harnessKind": "embedded-openclaw", "image": "img:1" })
}

/// A hub with quotas: every tenant 2 Agents and 1 running, tenant `big`
/// 5 Agents. `pipeline`: deploys queue the pipeline's work (whose phase
/// events the web view follows).
async fn start(backend: Backend, pipeline: bool) -> TestHub {
    let quotas = QuotaSettings {
        default: TenantQuota {
            agents: Some(2),
            running_agents: Some(1),
            ..TenantQuota::default()
        },
        namespaces: [(
            "big".to_owned(),
            TenantQuota {
                agents: Some(5),
                ..TenantQuota::default()
            },
        )]
        .into(),
    };
    let adjust = |c: &mut clawfed_hub::config::Config| {
        c.quotas = quotas;
        c.pipeline.enabled = pipeline;
    };
    let hub = TestHub::start_with(backend, adjust, Handlers::builtin()).await;
    for ns in ["team", "big"] {
        hub.post_ok("/namespaces", json!({ "name": ns })).await;
    }
    hub
}

/// POSTs `body` to `path` as `token`: the status and the JSON answer.
async fn post(hub: &TestHub, token: &str, path: &str, body: Value) -> (u16, Value) {
    let response = hub
        .http
        .post(hub.url(path))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .expect("send");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn get(hub: &TestHub, token: &str, path: &str) -> Value {
    let response = hub
        .http
        .get(hub.url(path))
        .bearer_auth(token)
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 200);
    response.json().await.expect("json")
}

async fn writes_past_a_quota_are_refused_naming_it(backend: Backend) {
    let hub = start(backend, false).await;
    let team = hub
        .token("team-deployer", Some("team"), Role::Deployer)
        .await;
    for name in ["a", "b"] {
        let (status, body) = post(
            &hub,
            &team,
            "/namespaces/team/agents",
            json!({ "name": name, "spec": spec() }),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = post(
        &hub,
        &team,
        "/namespaces/team/agents",
        json!({ "name": "c", "spec": spec() }),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "quota_exceeded");
    assert_eq!(
        body["error"]["quota"],
        json!({ "name": "agents", "limit": 2, "used": 2 })
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("quota agents of namespace \"team\" exceeded: limit 2, 2 in use"),
        "{message}"
    );
    let listed = get(&hub, &team, "/namespaces/team/agents").await;
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );

    // The refusal is in the audit log, as an error of that mutation.
    let audit = hub.get_root_json("/audit?namespace=team").await;
    assert!(
        audit["items"].as_array().unwrap().iter().any(|e| {
            e["action"] == "agent.create"
                && e["result"] == "error"
                && e["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("quota agents"))
        }),
        "{audit}"
    );

    // A tenant's own limit overlays the default.
    for name in ["a", "b", "c"] {
        hub.post_ok(
            "/namespaces/big/agents",
            json!({ "name": name, "spec": spec() }),
        )
        .await;
    }

    // Running Agents: one may run; deploying a second is refused and
    // makes no revision.
    let (status, body) = post(&hub, &team, "/namespaces/team/agents/a/deploy", json!({})).await;
    assert!(status == 201 || status == 200, "{status} {body}");
    let (status, body) = post(&hub, &team, "/namespaces/team/agents/b/deploy", json!({})).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["quota"]["name"], "runningAgents");
    let revisions = get(&hub, &team, "/namespaces/team/agents/b/revisions").await;
    assert_eq!(revisions["items"].as_array().map(Vec::len), Some(0));

    // gRPC answers the same refusal as RESOURCE_EXHAUSTED.
    let mut grpc = hub.grpc().await;
    let refused = grpc
        .create_agent(authed(
            &team,
            pb::CreateAgentRequest {
                namespace: "team".into(),
                name: "d".into(),
                spec: Some(pb::AgentSpec {
                    harness_kind: "embedded-openclaw".into(),
                    image: "img:1".into(),
                    ..Default::default()
                }),
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(refused.message().contains("quota agents"), "{refused:?}");
}

async fn usage_is_shown_beside_the_limits(backend: Backend) {
    let hub = start(backend, false).await;
    let viewer = hub.token("team-viewer", Some("team"), Role::Viewer).await;
    hub.post_ok(
        "/namespaces/team/agents",
        json!({ "name": "a", "spec": spec() }),
    )
    .await;
    let quota = get(&hub, &viewer, "/namespaces/team/quota").await;
    assert_eq!(
        quota,
        json!({
            "namespace": "team",
            "items": [
                { "name": "agents", "limit": 2, "used": 1 },
                { "name": "runningAgents", "limit": 1, "used": 0 },
                { "name": "revisionsPerHour", "used": 0 },
                { "name": "credentials", "used": 0 },
            ]
        })
    );
    let big = hub.get_root_json("/namespaces/big/quota").await;
    assert_eq!(
        big["items"][0],
        json!({ "name": "agents", "limit": 5, "used": 0 })
    );

    // Another tenant's quota is not the viewer's to read.
    let other = hub
        .http
        .get(hub.url("/namespaces/big/quota"))
        .bearer_auth(&viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 403);

    let mut grpc = hub.grpc().await;
    let got = grpc
        .get_quota(authed(
            &viewer,
            pb::GetQuotaRequest {
                namespace: "team".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.namespace, "team");
    let items: Vec<_> = got
        .items
        .iter()
        .map(|i| (i.name.as_str(), i.limit, i.used))
        .collect();
    assert_eq!(
        items,
        [
            ("agents", Some(2), 1),
            ("runningAgents", Some(1), 0),
            ("revisionsPerHour", None, 0),
            ("credentials", None, 0),
        ]
    );
}

/// The web view's Tenants table shows each tenant's quotas, used/limit,
/// and follows a deploy (its revision event) in a headless Chromium.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_shows_each_tenants_quotas() {
    use clawfed_tests::webdriver::{Browser, ENTER};
    use std::time::Duration;
    let hub = start(Backend::Sqlite, true).await;
    hub.post_ok(
        "/namespaces/team/agents",
        json!({ "name": "a", "spec": spec() }),
    )
    .await;
    let logs = tempfile::tempdir().unwrap();
    let browser = Browser::start(logs.path(), 1280, 900).await.unwrap();
    browser.goto(&format!("{}/ui/", hub.rest)).await.unwrap();
    let input = browser.find("#token").await.unwrap();
    browser
        .send_keys(&input, &format!("{}{ENTER}", hub.root_token))
        .await
        .unwrap();
    let cell = "const c = document.querySelector(`[data-tenant=\"${CSS.escape(arguments[0])}\"] td.quota`); \
                return c && c.textContent === arguments[1] ? c.className : null";
    let class: String = browser
        .wait_for(
            Duration::from_secs(30),
            "team's quotas on the page",
            cell,
            vec![
                json!("team"),
                json!("agents 1/2, running 0/1, revisions/h 0, credentials 0"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(class, "quota");

    let (status, body) = post(
        &hub,
        &hub.root_token,
        "/namespaces/team/agents/a/deploy",
        json!({}),
    )
    .await;
    assert!(status == 201 || status == 200, "{status} {body}");
    let class: String = browser
        .wait_for(
            Duration::from_secs(30),
            "team's quotas after the deploy",
            cell,
            vec![
                json!("team"),
                json!("agents 1/2, running 1/1, revisions/h 1, credentials 0"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(class, "quota full", "a used-up quota is marked");
    browser.close().await;
}
