//! gRPC `clawfed.admin.v1.AdminService` against a real in-process hub, on
//! SQLite and on PostgreSQL: the same semantics as REST (both are adapters
//! over one service layer), with gRPC status codes.
//!
//! Every test is an `async fn(Backend)`; `clawfed_tests::on_both_backends!`
//! runs it once per store, as `sqlite::<name>` and `postgres::<name>`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use clawfed_hub::auth::{self, Role};
use clawfed_hub::model::ConnectionState;
use clawfed_hub::store::ClusterRecord;
use clawfed_hub::worker::Handlers;
use clawfed_proto::admin::v1 as pb;
use clawfed_proto::admin::v1::admin_service_client::AdminServiceClient;
use clawfed_tests::hub::{Backend, TestHub, authed};
use serde_json::{Value, json};
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

clawfed_tests::on_both_backends!(
    grpc_and_rest_share_one_state,
    grpc_deploy_idempotency_and_rollback,
    grpc_unauthenticated,
    grpc_permission_denied,
    grpc_invalid_arguments_name_the_field,
    grpc_stale_version_is_aborted,
    grpc_not_found,
    grpc_tenant_isolation,
    grpc_diagnose_is_authorized_for_the_exact_agent,
    grpc_tenants_see_only_their_clusters,
    grpc_oversized_message_is_rejected,
    grpc_credentials_are_write_only,
);

// ---- helpers -------------------------------------------------------------------

type Client = AdminServiceClient<Channel>;

/// Unwraps a successful call.
#[track_caller]
fn ok<T>(result: Result<Response<T>, Status>) -> T {
    match result {
        Ok(r) => r.into_inner(),
        Err(status) => panic!("call failed: {status:?}"),
    }
}

/// Asserts a failed call with `code`, returning the status.
#[track_caller]
fn fails<T: std::fmt::Debug>(result: Result<Response<T>, Status>, code: Code) -> Status {
    match result {
        Ok(r) => panic!("expected {code:?}, got {:?}", r.into_inner()),
        Err(status) => {
            assert_eq!(status.code(), code, "status: {status:?}");
            assert!(!status.message().is_empty(), "no message: {status:?}");
            status
        }
    }
}

/// Asserts `InvalidArgument` whose message names `field`.
#[track_caller]
fn invalid<T: std::fmt::Debug>(result: Result<Response<T>, Status>, field: &str) {
    let status = fails(result, Code::InvalidArgument);
    assert!(
        status.message().contains(field),
        "message {:?} does not name {field:?}",
        status.message()
    );
}

fn spec(image: &str) -> pb::AgentSpec {
    pb::AgentSpec {
        harness_kind: "embedded-openclaw".into(),
        image: image.into(),
        ..Default::default()
    }
}

fn time(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("{s:?} is not RFC 3339: {e}"))
        .with_timezone(&Utc)
}

fn rest_time(v: &Value) -> DateTime<Utc> {
    time(v.as_str().expect("timestamp string"))
}

/// GET `{rest}/api/v1{path}` with `token`: (status, JSON body).
async fn rest_get(hub: &TestHub, token: &str, path: &str) -> (u16, Value) {
    let r = hub
        .http
        .get(hub.url(path))
        .bearer_auth(token)
        .send()
        .await
        .expect("REST request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn create_namespace(g: &mut Client, token: &str, name: &str) -> pb::Namespace {
    ok(g.create_namespace(authed(
        token,
        pb::CreateNamespaceRequest {
            name: name.into(),
            ..Default::default()
        },
    ))
    .await)
}

async fn create_agent(g: &mut Client, token: &str, ns: &str, name: &str) -> pb::Agent {
    ok(g.create_agent(authed(
        token,
        pb::CreateAgentRequest {
            namespace: ns.into(),
            name: name.into(),
            spec: Some(spec("img:1")),
        },
    ))
    .await)
}

async fn deploy(
    g: &mut Client,
    token: &str,
    ns: &str,
    agent: &str,
    key: &str,
    from: Option<i64>,
) -> Result<Response<pb::AgentRevision>, Status> {
    g.deploy(authed(
        token,
        pb::DeployRequest {
            namespace: ns.into(),
            agent: agent.into(),
            idempotency_key: key.into(),
            from_revision: from,
        },
    ))
    .await
}

async fn list_agents(g: &mut Client, token: &str, ns: &str) -> Vec<pb::Agent> {
    ok(g.list_agents(authed(
        token,
        pb::ListAgentsRequest {
            namespace: ns.into(),
        },
    ))
    .await)
    .items
}

async fn audit(g: &mut Client, token: &str, ns: &str) -> Vec<pb::AuditEvent> {
    ok(g.list_audit_events(authed(
        token,
        pb::ListAuditEventsRequest {
            namespace: ns.into(),
            limit: 1000,
        },
    ))
    .await)
    .items
}

// ---- tests -----------------------------------------------------------------------

async fn grpc_and_rest_share_one_state(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let root = hub.root_token.clone();
    let mut g = hub.grpc().await;

    // Namespace: created over gRPC, read over REST.
    let ns = ok(g
        .create_namespace(authed(
            &root,
            pb::CreateNamespaceRequest {
                name: "team".into(),
                display_name: "Team".into(),
                adopt_namespace: None,
            },
        ))
        .await);
    assert_eq!(ns.name, "team");
    assert_eq!(ns.display_name, "Team");
    assert!(!ns.adopted);
    assert_eq!(
        ns.data_plane_namespace,
        clawfed_proto::naming::data_plane_namespace(&ns.id)
    );
    let (status, body) = rest_get(&hub, &root, "/namespaces/team").await;
    assert_eq!(status, 200);
    assert_eq!(body["id"], ns.id);
    assert_eq!(body["displayName"], ns.display_name);
    assert_eq!(body["dataPlaneNamespace"], ns.data_plane_namespace);
    assert_eq!(body["version"], ns.version);
    assert_eq!(rest_time(&body["createdAt"]), time(&ns.created_at));

    let adopted = ok(g
        .create_namespace(authed(
            &root,
            pb::CreateNamespaceRequest {
                name: "legacy".into(),
                display_name: String::new(),
                adopt_namespace: Some("legacy-ns".into()),
            },
        ))
        .await);
    assert!(adopted.adopted);
    assert_eq!(adopted.data_plane_namespace, "legacy-ns");
    assert_eq!(adopted.display_name, "legacy");

    // Configuration.
    let cfg = ok(g
        .create_configuration(authed(
            &root,
            pb::CreateConfigurationRequest {
                namespace: "team".into(),
                name: "cfg".into(),
                data_json: r#"{"model":"gpt","n":2}"#.into(),
            },
        ))
        .await);
    assert_eq!(cfg.version, 1);
    let (_, body) = rest_get(&hub, &root, "/namespaces/team/configurations/cfg").await;
    assert_eq!(body["id"], cfg.id);
    assert_eq!(body["data"], json!({ "model": "gpt", "n": 2 }));
    let parsed: Value = serde_json::from_str(&cfg.data_json).unwrap();
    assert_eq!(parsed, body["data"]);

    // Agent with every spec field.
    let full = pb::AgentSpec {
        // Ordinary execution: the test's spoke advertises no provisioning
        // SandboxDriver (dedicated native OpenClaw would be refused there).
        harness_kind: "dedicated-codex".into(),
        execution_mode: "ordinary".into(),
        image: format!("ghcr.io/openclaw/openclaw@sha256:{}", "b".repeat(64)),
        gateway_image: "ghcr.io/openclaw/gateway:2".into(),
        configuration: "cfg".into(),
        resources: Some(pb::ResourceRequirements {
            cpu_request: "250m".into(),
            cpu_limit: "1".into(),
            memory_request: "256Mi".into(),
            memory_limit: "1Gi".into(),
        }),
        requirement_labels: HashMap::from([("example.com/gpu".into(), "a100".into())]),
        placement: Some(pb::Placement {
            cluster: String::new(),
            cluster_selector: HashMap::from([("region".into(), "eu".into())]),
            ..Default::default()
        }),
        plugins: vec!["web".into(), "shell".into()],
        channels: vec![],
        failover: Some(pb::Failover { after_seconds: 45 }),
    };
    let agent = ok(g
        .create_agent(authed(
            &root,
            pb::CreateAgentRequest {
                namespace: "team".into(),
                name: "bot".into(),
                spec: Some(full.clone()),
            },
        ))
        .await);
    assert_eq!(agent.spec.as_ref(), Some(&full), "spec round-trips");
    assert_eq!(agent.desired_state, "stopped");
    assert_eq!(agent.latest_revision, None);
    let (_, body) = rest_get(&hub, &root, "/namespaces/team/agents/bot").await;
    assert_eq!(body["id"], agent.id);
    assert_eq!(
        body["spec"],
        json!({
            "harnessKind": "dedicated-codex",
            "executionMode": "ordinary",
            "image": full.image,
            "gatewayImage": "ghcr.io/openclaw/gateway:2",
            "configuration": "cfg",
            "resources": { "cpuRequest": "250m", "cpuLimit": "1", "memoryRequest": "256Mi", "memoryLimit": "1Gi" },
            "requirementLabels": { "example.com/gpu": "a100" },
            "placement": { "clusterSelector": { "region": "eu" } },
            "plugins": ["web", "shell"],
            "failover": { "afterSeconds": 45 },
        })
    );

    // Created over REST, read over gRPC.
    let r = hub
        .http
        .post(hub.url("/namespaces/team/agents"))
        .bearer_auth(&root)
        .json(&json!({ "name": "rest-bot", "spec": { "harnessKind": "dedicated-codex", "image": "codex:1" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let rest_agent: Value = r.json().await.unwrap();
    let got = ok(g
        .get_agent(authed(
            &root,
            pb::GetAgentRequest {
                namespace: "team".into(),
                name: "rest-bot".into(),
            },
        ))
        .await);
    assert_eq!(got.id, rest_agent["id"]);
    let got_spec = got.spec.unwrap();
    assert_eq!(got_spec.harness_kind, "dedicated-codex");
    assert_eq!(got_spec.execution_mode, "ordinary");
    assert_eq!(got_spec.image, "codex:1");
    assert_eq!(
        list_agents(&mut g, &root, "team")
            .await
            .iter()
            .map(|a| a.name.as_str())
            .collect::<Vec<_>>(),
        ["bot", "rest-bot"]
    );

    // Listings.
    let names: BTreeSet<String> = ok(g
        .list_namespaces(authed(&root, pb::ListNamespacesRequest {}))
        .await)
    .items
    .into_iter()
    .map(|n| n.name)
    .collect();
    assert_eq!(names, BTreeSet::from(["team".into(), "legacy".into()]));
    let cfgs = ok(g
        .list_configurations(authed(
            &root,
            pb::ListConfigurationsRequest {
                namespace: "team".into(),
            },
        ))
        .await);
    assert_eq!(cfgs.items.len(), 1);
    let got = ok(g
        .get_configuration(authed(
            &root,
            pb::GetConfigurationRequest {
                namespace: "team".into(),
                name: "cfg".into(),
            },
        ))
        .await);
    assert_eq!(got, cfg);
    let updated = ok(g
        .update_configuration(authed(
            &root,
            pb::UpdateConfigurationRequest {
                namespace: "team".into(),
                name: "cfg".into(),
                data_json: r#"{"model":"claude"}"#.into(),
                expected_version: 1,
            },
        ))
        .await);
    assert_eq!(updated.version, 2);
    let (_, body) = rest_get(&hub, &root, "/namespaces/team/configurations/cfg").await;
    assert_eq!(body["data"], json!({ "model": "claude" }));

    // Clusters and fleet.
    hub.store()
        .upsert_cluster(&ClusterRecord {
            name: "exec-a".into(),
            labels: BTreeMap::from([("region".into(), "eu".into())]),
            capabilities: vec!["gpu".into()],
            certificate_serials: vec!["01".into()],
            connection_state: ConnectionState::Online,
            last_seen: Some(Utc::now()),
            version: "0.1.0".into(),
        })
        .await
        .unwrap();
    let clusters = ok(g
        .list_clusters(authed(&root, pb::ListClustersRequest {}))
        .await);
    assert_eq!(clusters.items.len(), 1);
    let cluster = ok(g
        .get_cluster(authed(
            &root,
            pb::GetClusterRequest {
                name: "exec-a".into(),
            },
        ))
        .await);
    assert_eq!(cluster.connection_state, "online");
    assert_eq!(cluster.labels.get("region").map(String::as_str), Some("eu"));
    let (_, body) = rest_get(&hub, &root, "/clusters/exec-a").await;
    assert_eq!(body["id"], cluster.id);

    // Issue 33: a cordon set over gRPC is what REST shows; a drain's
    // parallelism is checked, naming the field; uncordon lifts it.
    let name = || "exec-a".to_owned();
    let cordoned = ok(g
        .cordon_cluster(authed(&root, pb::CordonClusterRequest { name: name() }))
        .await);
    assert!(cordoned.cordoned_at.is_some());
    let (_, body) = rest_get(&hub, &root, "/clusters/exec-a").await;
    assert!(body["cordonedAt"].is_string(), "{body}");
    let refused = g
        .drain_cluster(authed(
            &root,
            pb::DrainClusterRequest {
                name: name(),
                parallelism: 65,
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("parallelism"), "{refused:?}");
    let open = ok(g
        .uncordon_cluster(authed(&root, pb::UncordonClusterRequest { name: name() }))
        .await);
    assert!(open.cordoned_at.is_none() && open.drain.is_none());

    let rev = ok(deploy(&mut g, &root, "team", "bot", "", None).await);
    assert_eq!(rev.number, 1);
    assert_eq!(rev.resolved_cluster, "exec-a");
    let frozen: Value = serde_json::from_str(&rev.configuration_json).unwrap();
    assert_eq!(frozen, json!({ "model": "claude" }));
    let fleet = ok(g
        .get_fleet_summary(authed(&root, pb::GetFleetSummaryRequest {}))
        .await);
    assert_eq!(fleet.namespaces, 2);
    assert_eq!(fleet.agents, 2);
    // Placed but still pending: wanted running, not running yet.
    assert_eq!(fleet.agents_desired_running, 1);
    assert_eq!(fleet.agents_running, 0);
    assert_eq!(fleet.agents_not_running, 1);
    assert_eq!(fleet.agents_stopped, 1);
    assert_eq!(fleet.revisions_by_phase.get("pending"), Some(&1));
    assert_eq!(fleet.clusters, 1);
    assert_eq!(fleet.clusters_online, 1);
    let (_, rest_fleet) = rest_get(&hub, &root, "/fleet").await;
    assert_eq!(rest_fleet["agents"], fleet.agents);
    assert_eq!(
        rest_fleet["agentsDesiredRunning"],
        fleet.agents_desired_running
    );
    assert_eq!(rest_fleet["agentsNotRunning"], fleet.agents_not_running);
    assert_eq!(rest_fleet["workPending"], fleet.work_pending);

    // Work and audit.
    let work = ok(g
        .list_work(authed(
            &root,
            pb::ListWorkRequest {
                namespace: "team".into(),
                ..Default::default()
            },
        ))
        .await);
    let item = work.items.first().expect("provisioning work");
    assert_eq!(item.kind, "namespace.provision");
    let got = ok(g
        .get_work(authed(
            &root,
            pb::GetWorkRequest {
                id: item.id.clone(),
            },
        ))
        .await);
    assert_eq!(got.id, item.id);
    let events = audit(&mut g, &root, "team").await;
    let actions: Vec<&str> = events
        .iter()
        .rev()
        .filter(|e| e.actor == "token:root")
        .map(|e| e.action.as_str())
        .collect();
    assert_eq!(
        actions,
        [
            "namespace.create",
            "configuration.create",
            "agent.create",
            "agent.create",
            "configuration.update",
            "agent.deploy"
        ]
    );
    assert!(events.iter().all(|e| e.namespace == "team"));

    // Stop and delete over gRPC; REST sees them.
    let stopped = ok(g
        .stop(authed(
            &root,
            pb::StopRequest {
                namespace: "team".into(),
                agent: "bot".into(),
            },
        ))
        .await);
    assert_eq!(stopped.desired_state, "stopped");
    let (_, body) = rest_get(&hub, &root, "/namespaces/team/agents/bot").await;
    assert_eq!(body["desiredState"], "stopped");
    fails(
        g.delete_namespace(authed(
            &root,
            pb::DeleteNamespaceRequest {
                name: "team".into(),
            },
        ))
        .await,
        Code::FailedPrecondition,
    );
    for name in ["bot", "rest-bot"] {
        ok(g.delete_agent(authed(
            &root,
            pb::DeleteAgentRequest {
                namespace: "team".into(),
                name: name.into(),
            },
        ))
        .await);
    }
    let (status, _) = rest_get(&hub, &root, "/namespaces/team/agents/bot").await;
    assert_eq!(status, 404);
    ok(g.delete_configuration(authed(
        &root,
        pb::DeleteConfigurationRequest {
            namespace: "team".into(),
            name: "cfg".into(),
        },
    ))
    .await);
    ok(g.delete_namespace(authed(
        &root,
        pb::DeleteNamespaceRequest {
            name: "team".into(),
        },
    ))
    .await);
    let (status, _) = rest_get(&hub, &root, "/namespaces/team").await;
    assert_eq!(status, 404);
    hub.stop().await;
}

async fn grpc_deploy_idempotency_and_rollback(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let root = hub.root_token.clone();
    let mut g = hub.grpc().await;
    create_namespace(&mut g, &root, "team").await;
    create_agent(&mut g, &root, "team", "bot").await;

    let first = ok(deploy(&mut g, &root, "team", "bot", "k1", None).await);
    assert_eq!(first.number, 1);
    let again = ok(deploy(&mut g, &root, "team", "bot", "k1", None).await);
    assert_eq!(again.id, first.id, "the retry returns the same revision");
    fails(
        deploy(&mut g, &root, "team", "bot", "k1", Some(1)).await,
        Code::FailedPrecondition,
    );
    let (_, body) = rest_get(&hub, &root, "/namespaces/team/agents/bot/revisions").await;
    assert_eq!(body["items"].as_array().unwrap().len(), 1);

    // Edit the draft; revision 1 keeps its snapshot.
    let updated = ok(g
        .update_agent(authed(
            &root,
            pb::UpdateAgentRequest {
                namespace: "team".into(),
                name: "bot".into(),
                spec: Some(spec("img:2")),
                expected_version: 1,
            },
        ))
        .await);
    assert_eq!(updated.version, 2);
    let second = ok(deploy(&mut g, &root, "team", "bot", "", None).await);
    assert_eq!(second.number, 2);
    assert_eq!(second.spec.as_ref().unwrap().image, "img:2");
    let rollback = ok(deploy(&mut g, &root, "team", "bot", "", Some(1)).await);
    assert_eq!(rollback.number, 3);
    assert_eq!(rollback.rolled_back_from, Some(1));
    assert_eq!(rollback.spec.as_ref().unwrap().image, "img:1");
    invalid(
        deploy(&mut g, &root, "team", "bot", "", Some(42)).await,
        "fromRevision",
    );

    let one = ok(g
        .get_revision(authed(
            &root,
            pb::GetRevisionRequest {
                namespace: "team".into(),
                agent: "bot".into(),
                number: 1,
            },
        ))
        .await);
    assert_eq!(one, first, "revision 1 is immutable");
    let (_, body) = rest_get(&hub, &root, "/namespaces/team/agents/bot/revisions/3").await;
    assert_eq!(body["id"], rollback.id);
    assert_eq!(body["rolledBackFrom"], 1);
    let numbers: Vec<i64> = ok(g
        .list_revisions(authed(
            &root,
            pb::ListRevisionsRequest {
                namespace: "team".into(),
                agent: "bot".into(),
            },
        ))
        .await)
    .items
    .iter()
    .map(|r| r.number)
    .collect();
    assert_eq!(numbers, [1, 2, 3]);

    // A running agent cannot be deleted.
    fails(
        g.delete_agent(authed(
            &root,
            pb::DeleteAgentRequest {
                namespace: "team".into(),
                name: "bot".into(),
            },
        ))
        .await,
        Code::FailedPrecondition,
    );
    hub.stop().await;
}

async fn grpc_unauthenticated(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let root = hub.root_token.clone();
    let mut g = hub.grpc().await;
    create_namespace(&mut g, &root, "team").await;

    fails(
        g.list_namespaces(Request::new(pb::ListNamespacesRequest {}))
            .await,
        Code::Unauthenticated,
    );
    fails(
        g.create_namespace(Request::new(pb::CreateNamespaceRequest {
            name: "anon".into(),
            ..Default::default()
        }))
        .await,
        Code::Unauthenticated,
    );
    for value in ["Basic dXNlcjpwYXNz", "Bearer", "Bearer   ", "cfd_abc"] {
        let mut req = Request::new(pb::ListNamespacesRequest {});
        req.metadata_mut()
            .insert("authorization", value.parse().unwrap());
        fails(g.list_namespaces(req).await, Code::Unauthenticated);
    }
    let unknown = format!("{}{}", auth::TOKEN_PREFIX, "f".repeat(64));
    fails(
        g.list_namespaces(authed(&unknown, pb::ListNamespacesRequest {}))
            .await,
        Code::Unauthenticated,
    );
    let revoked = hub.token("gone", Some("team"), Role::Admin).await;
    ok(
        g.list_namespaces(authed(&revoked, pb::ListNamespacesRequest {}))
            .await,
    );
    hub.store().revoke_token("gone", Utc::now()).await.unwrap();
    fails(
        g.list_namespaces(authed(&revoked, pb::ListNamespacesRequest {}))
            .await,
        Code::Unauthenticated,
    );

    let names: Vec<String> = ok(g
        .list_namespaces(authed(&root, pb::ListNamespacesRequest {}))
        .await)
    .items
    .into_iter()
    .map(|n| n.name)
    .collect();
    assert_eq!(names, ["team"], "the anonymous create made nothing");
    hub.stop().await;
}

async fn grpc_permission_denied(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let root = hub.root_token.clone();
    let mut g = hub.grpc().await;
    create_namespace(&mut g, &root, "team").await;
    create_agent(&mut g, &root, "team", "bot").await;
    let viewer = hub.token("viewer", Some("team"), Role::Viewer).await;
    let deployer = hub.token("deployer", Some("team"), Role::Deployer).await;

    // Viewers read, but may not deploy or stop.
    assert_eq!(list_agents(&mut g, &viewer, "team").await.len(), 1);
    fails(
        deploy(&mut g, &viewer, "team", "bot", "", None).await,
        Code::PermissionDenied,
    );
    fails(
        g.stop(authed(
            &viewer,
            pb::StopRequest {
                namespace: "team".into(),
                agent: "bot".into(),
            },
        ))
        .await,
        Code::PermissionDenied,
    );
    let events = audit(&mut g, &root, "team").await;
    let denied = events
        .iter()
        .find(|e| e.actor == "token:viewer" && e.action == "agent.deploy")
        .expect("the denial is audited");
    assert_eq!(denied.result, "denied");
    assert_eq!(denied.target, "agents/bot");

    // Deployers deploy, but read no audit and create no namespaces.
    ok(deploy(&mut g, &deployer, "team", "bot", "", None).await);
    fails(
        g.list_audit_events(authed(&deployer, pb::ListAuditEventsRequest::default()))
            .await,
        Code::PermissionDenied,
    );
    fails(
        g.create_namespace(authed(
            &deployer,
            pb::CreateNamespaceRequest {
                name: "mine".into(),
                ..Default::default()
            },
        ))
        .await,
        Code::PermissionDenied,
    );
    let (_, body) = rest_get(&hub, &root, "/namespaces/team/agents/bot/revisions").await;
    assert_eq!(
        body["items"].as_array().unwrap().len(),
        1,
        "only the deployer's deploy made a revision"
    );
    hub.stop().await;
}

async fn grpc_invalid_arguments_name_the_field(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let root = hub.root_token.clone();
    let mut g = hub.grpc().await;
    create_namespace(&mut g, &root, "team").await;
    create_agent(&mut g, &root, "team", "bot").await;

    for bad in ["Bad_Name", "", "-x", &"n".repeat(64)] {
        invalid(
            g.create_namespace(authed(
                &root,
                pb::CreateNamespaceRequest {
                    name: bad.into(),
                    ..Default::default()
                },
            ))
            .await,
            "name",
        );
    }
    invalid(
        g.create_namespace(authed(
            &root,
            pb::CreateNamespaceRequest {
                name: "ok".into(),
                display_name: String::new(),
                adopt_namespace: Some("Not_DNS".into()),
            },
        ))
        .await,
        "adoptNamespace",
    );

    let create = |name: &str, spec: Option<pb::AgentSpec>| {
        authed(
            &root,
            pb::CreateAgentRequest {
                namespace: "team".into(),
                name: name.into(),
                spec,
            },
        )
    };
    invalid(
        g.create_agent(create("Bad_Agent", Some(spec("img:1"))))
            .await,
        "name",
    );
    invalid(g.create_agent(create("x", None)).await, "spec");
    let cases: Vec<(pb::AgentSpec, &str)> = vec![
        (
            pb::AgentSpec {
                harness_kind: "bogus".into(),
                ..spec("img:1")
            },
            "spec.harness_kind",
        ),
        (
            pb::AgentSpec {
                execution_mode: "sideways".into(),
                ..spec("img:1")
            },
            "spec.execution_mode",
        ),
        (spec("img@sha256:short"), "spec.image"),
        (spec(""), "spec.image"),
        (
            pb::AgentSpec {
                resources: Some(pb::ResourceRequirements {
                    memory_limit: "lots".into(),
                    ..Default::default()
                }),
                ..spec("img:1")
            },
            "spec.resources.memoryLimit",
        ),
        (
            pb::AgentSpec {
                requirement_labels: HashMap::from([("clawfed.io/agent".into(), "x".into())]),
                ..spec("img:1")
            },
            "spec.requirementLabels",
        ),
        (
            pb::AgentSpec {
                plugins: vec!["a".into(), "a".into()],
                ..spec("img:1")
            },
            "spec.plugins[1]",
        ),
        (
            pb::AgentSpec {
                configuration: "missing".into(),
                ..spec("img:1")
            },
            "spec.configuration",
        ),
    ];
    for (bad, field) in cases {
        invalid(g.create_agent(create("x", Some(bad.clone()))).await, field);
        invalid(
            g.update_agent(authed(
                &root,
                pb::UpdateAgentRequest {
                    namespace: "team".into(),
                    name: "bot".into(),
                    spec: Some(bad),
                    expected_version: 1,
                },
            ))
            .await,
            field,
        );
    }

    // Configuration documents.
    for (data_json, field) in [("{", "data_json"), ("", "data_json"), ("[1, 2]", "data")] {
        invalid(
            g.create_configuration(authed(
                &root,
                pb::CreateConfigurationRequest {
                    namespace: "team".into(),
                    name: "cfg".into(),
                    data_json: data_json.into(),
                },
            ))
            .await,
            field,
        );
    }

    // Required and bounded request fields.
    invalid(
        g.get_agent(authed(
            &root,
            pb::GetAgentRequest {
                namespace: String::new(),
                name: "bot".into(),
            },
        ))
        .await,
        "namespace",
    );
    invalid(
        g.get_revision(authed(
            &root,
            pb::GetRevisionRequest {
                namespace: "team".into(),
                agent: "bot".into(),
                number: 0,
            },
        ))
        .await,
        "number",
    );
    invalid(
        g.list_audit_events(authed(
            &root,
            pb::ListAuditEventsRequest {
                namespace: String::new(),
                limit: -5,
            },
        ))
        .await,
        "limit",
    );
    invalid(
        g.list_work(authed(
            &root,
            pb::ListWorkRequest {
                state: "bogus".into(),
                ..Default::default()
            },
        ))
        .await,
        "state",
    );
    invalid(
        deploy(&mut g, &root, "team", "bot", &"k".repeat(300), None).await,
        "Idempotency-Key",
    );

    // Identifiers PostgreSQL cannot store (NUL) are client errors too.
    invalid(
        g.get_namespace(authed(
            &root,
            pb::GetNamespaceRequest {
                name: "te\u{0}am".into(),
            },
        ))
        .await,
        "name",
    );
    invalid(
        g.get_work(authed(&root, pb::GetWorkRequest { id: "\u{0}".into() }))
            .await,
        "id",
    );
    invalid(
        deploy(&mut g, &root, "team", "b\u{0}t", "", None).await,
        "agent",
    );
    invalid(
        g.list_audit_events(authed(
            &root,
            pb::ListAuditEventsRequest {
                namespace: "\u{0}".into(),
                limit: 10,
            },
        ))
        .await,
        "namespace",
    );
    invalid(
        g.list_work(authed(
            &root,
            pb::ListWorkRequest {
                namespace: "team\u{0}".into(),
                ..Default::default()
            },
        ))
        .await,
        "namespace",
    );

    // Nothing was stored by any of them.
    let names: Vec<String> = ok(g
        .list_namespaces(authed(&root, pb::ListNamespacesRequest {}))
        .await)
    .items
    .into_iter()
    .map(|n| n.name)
    .collect();
    assert_eq!(names, ["team"]);
    let agents = list_agents(&mut g, &root, "team").await;
    assert_eq!(agents.len(), 1);
    assert_eq!(agents[0].version, 1);
    assert_eq!(agents[0].spec.as_ref().unwrap().image, "img:1");
    assert_eq!(agents[0].latest_revision, None);
    let cfgs = ok(g
        .list_configurations(authed(
            &root,
            pb::ListConfigurationsRequest {
                namespace: "team".into(),
            },
        ))
        .await);
    assert!(cfgs.items.is_empty());
    hub.stop().await;
}

async fn grpc_stale_version_is_aborted(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let root = hub.root_token.clone();
    let mut g = hub.grpc().await;
    create_namespace(&mut g, &root, "team").await;
    create_agent(&mut g, &root, "team", "bot").await;
    let update = |image: &str, version: i64| {
        authed(
            &root,
            pb::UpdateAgentRequest {
                namespace: "team".into(),
                name: "bot".into(),
                spec: Some(spec(image)),
                expected_version: version,
            },
        )
    };
    ok(g.update_agent(update("img:winner", 1)).await);
    let status = fails(g.update_agent(update("img:loser", 1)).await, Code::Aborted);
    assert!(status.message().contains("bot"), "{status:?}");
    let agent = ok(g
        .get_agent(authed(
            &root,
            pb::GetAgentRequest {
                namespace: "team".into(),
                name: "bot".into(),
            },
        ))
        .await);
    assert_eq!(agent.version, 2);
    assert_eq!(agent.spec.unwrap().image, "img:winner");
    let (_, body) = rest_get(&hub, &root, "/namespaces/team/agents/bot").await;
    assert_eq!(body["spec"]["image"], "img:winner");

    ok(g.create_configuration(authed(
        &root,
        pb::CreateConfigurationRequest {
            namespace: "team".into(),
            name: "cfg".into(),
            data_json: "{}".into(),
        },
    ))
    .await);
    let update_cfg = |data: &str, version: i64| {
        authed(
            &root,
            pb::UpdateConfigurationRequest {
                namespace: "team".into(),
                name: "cfg".into(),
                data_json: data.into(),
                expected_version: version,
            },
        )
    };
    ok(g.update_configuration(update_cfg(r#"{"v":1}"#, 1)).await);
    fails(
        g.update_configuration(update_cfg(r#"{"v":2}"#, 1)).await,
        Code::Aborted,
    );
    fails(
        g.update_configuration(update_cfg(r#"{"v":3}"#, 0)).await,
        Code::Aborted,
    );
    let (_, body) = rest_get(&hub, &root, "/namespaces/team/configurations/cfg").await;
    assert_eq!(body["data"], json!({ "v": 1 }));
    assert_eq!(body["version"], 2);

    let events = audit(&mut g, &root, "team").await;
    assert_eq!(events[0].action, "configuration.update");
    assert_eq!(events[0].result, "error");
    hub.stop().await;
}

async fn grpc_not_found(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let root = hub.root_token.clone();
    let mut g = hub.grpc().await;
    create_namespace(&mut g, &root, "team").await;
    create_agent(&mut g, &root, "team", "bot").await;

    fails(
        g.get_agent(authed(
            &root,
            pb::GetAgentRequest {
                namespace: "team".into(),
                name: "ghost".into(),
            },
        ))
        .await,
        Code::NotFound,
    );
    fails(
        deploy(&mut g, &root, "team", "ghost", "", None).await,
        Code::NotFound,
    );
    fails(
        g.stop(authed(
            &root,
            pb::StopRequest {
                namespace: "team".into(),
                agent: "ghost".into(),
            },
        ))
        .await,
        Code::NotFound,
    );
    fails(
        g.update_agent(authed(
            &root,
            pb::UpdateAgentRequest {
                namespace: "team".into(),
                name: "ghost".into(),
                spec: Some(spec("img:1")),
                expected_version: 1,
            },
        ))
        .await,
        Code::NotFound,
    );
    fails(
        g.list_revisions(authed(
            &root,
            pb::ListRevisionsRequest {
                namespace: "team".into(),
                agent: "ghost".into(),
            },
        ))
        .await,
        Code::NotFound,
    );
    fails(
        g.get_revision(authed(
            &root,
            pb::GetRevisionRequest {
                namespace: "team".into(),
                agent: "bot".into(),
                number: 1,
            },
        ))
        .await,
        Code::NotFound,
    );
    fails(
        g.get_namespace(authed(
            &root,
            pb::GetNamespaceRequest {
                name: "ghost".into(),
            },
        ))
        .await,
        Code::NotFound,
    );
    fails(
        g.list_agents(authed(
            &root,
            pb::ListAgentsRequest {
                namespace: "ghost".into(),
            },
        ))
        .await,
        Code::NotFound,
    );
    fails(
        g.get_cluster(authed(
            &root,
            pb::GetClusterRequest {
                name: "ghost".into(),
            },
        ))
        .await,
        Code::NotFound,
    );
    fails(
        g.get_work(authed(
            &root,
            pb::GetWorkRequest {
                id: "00000000-0000-0000-0000-000000000000".into(),
            },
        ))
        .await,
        Code::NotFound,
    );
    fails(
        g.create_namespace(authed(
            &root,
            pb::CreateNamespaceRequest {
                name: "team".into(),
                ..Default::default()
            },
        ))
        .await,
        Code::AlreadyExists,
    );
    hub.stop().await;
}

/// Issue 12: `DiagnoseAgent` has the REST route's authorization: another
/// tenant is refused, an unknown Agent is not found, one without a revision
/// is a failed precondition; the tenant gets `unknown` checks when nothing
/// can be read.
async fn grpc_diagnose_is_authorized_for_the_exact_agent(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let root = hub.root_token.clone();
    let mut g = hub.grpc().await;
    create_namespace(&mut g, &root, "ns-a").await;
    create_namespace(&mut g, &root, "ns-b").await;
    create_agent(&mut g, &root, "ns-b", "b1").await;
    create_agent(&mut g, &root, "ns-b", "b2").await;
    ok(deploy(&mut g, &root, "ns-b", "b1", "", None).await);
    let a = hub.token("a-admin", Some("ns-a"), Role::Admin).await;
    let b = hub.token("b-view", Some("ns-b"), Role::Viewer).await;
    let req = |name: &str| pb::DiagnoseAgentRequest {
        namespace: "ns-b".into(),
        name: name.into(),
        revision: 0,
    };
    fails(
        g.diagnose_agent(authed(&a, req("b1"))).await,
        Code::PermissionDenied,
    );
    fails(
        g.diagnose_agent(authed(&root, req("nope"))).await,
        Code::NotFound,
    );
    fails(
        g.diagnose_agent(authed(&root, req("b2"))).await,
        Code::FailedPrecondition,
    );
    invalid(g.diagnose_agent(authed(&root, req(""))).await, "name");
    let d = ok(g.diagnose_agent(authed(&b, req("b1"))).await);
    assert_eq!((d.agent.as_str(), d.revision), ("b1", 1));
    // A chosen revision: that one, or an error naming `revision`.
    let chosen = |revision| pb::DiagnoseAgentRequest {
        revision,
        ..req("b1")
    };
    assert_eq!(
        ok(g.diagnose_agent(authed(&b, chosen(1))).await).revision,
        1
    );
    invalid(g.diagnose_agent(authed(&b, chosen(2))).await, "revision");
    invalid(g.diagnose_agent(authed(&b, chosen(-1))).await, "revision");
    fails(
        g.diagnose_agent(authed(&a, chosen(1))).await,
        Code::PermissionDenied,
    );
    for c in [d.harness, d.gateway] {
        let checks = c.expect("component").checks;
        assert!(!checks.is_empty());
        assert!(checks.iter().all(|k| k.status == "unknown"), "{checks:?}");
    }
    hub.stop().await;
}

async fn grpc_tenant_isolation(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let root = hub.root_token.clone();
    let mut g = hub.grpc().await;
    create_namespace(&mut g, &root, "ns-a").await;
    create_namespace(&mut g, &root, "ns-b").await;
    create_agent(&mut g, &root, "ns-a", "a1").await;
    create_agent(&mut g, &root, "ns-b", "b1").await;
    create_agent(&mut g, &root, "ns-b", "b2").await;
    ok(deploy(&mut g, &root, "ns-b", "b1", "", None).await);
    let a = hub.token("a-admin", Some("ns-a"), Role::Admin).await;

    let names: Vec<String> = ok(g
        .list_namespaces(authed(&a, pb::ListNamespacesRequest {}))
        .await)
    .items
    .into_iter()
    .map(|n| n.name)
    .collect();
    assert_eq!(names, ["ns-a"]);

    fails(
        g.get_namespace(authed(
            &a,
            pb::GetNamespaceRequest {
                name: "ns-b".into(),
            },
        ))
        .await,
        Code::PermissionDenied,
    );
    fails(
        g.list_agents(authed(
            &a,
            pb::ListAgentsRequest {
                namespace: "ns-b".into(),
            },
        ))
        .await,
        Code::PermissionDenied,
    );
    fails(
        g.get_agent(authed(
            &a,
            pb::GetAgentRequest {
                namespace: "ns-b".into(),
                name: "b1".into(),
            },
        ))
        .await,
        Code::PermissionDenied,
    );
    fails(
        deploy(&mut g, &a, "ns-b", "b2", "", None).await,
        Code::PermissionDenied,
    );
    fails(
        g.update_agent(authed(
            &a,
            pb::UpdateAgentRequest {
                namespace: "ns-b".into(),
                name: "b2".into(),
                spec: Some(spec("img:evil")),
                expected_version: 1,
            },
        ))
        .await,
        Code::PermissionDenied,
    );
    fails(
        g.delete_agent(authed(
            &a,
            pb::DeleteAgentRequest {
                namespace: "ns-b".into(),
                name: "b2".into(),
            },
        ))
        .await,
        Code::PermissionDenied,
    );
    fails(
        g.list_audit_events(authed(
            &a,
            pb::ListAuditEventsRequest {
                namespace: "ns-b".into(),
                limit: 10,
            },
        ))
        .await,
        Code::PermissionDenied,
    );
    fails(
        g.list_work(authed(
            &a,
            pb::ListWorkRequest {
                namespace: "ns-b".into(),
                ..Default::default()
            },
        ))
        .await,
        Code::PermissionDenied,
    );

    // B's work item is "not found" for A.
    let b_work = ok(g
        .list_work(authed(
            &root,
            pb::ListWorkRequest {
                namespace: "ns-b".into(),
                ..Default::default()
            },
        ))
        .await);
    let b_id = b_work.items.first().expect("B has work").id.clone();
    fails(
        g.get_work(authed(&a, pb::GetWorkRequest { id: b_id.clone() }))
            .await,
        Code::NotFound,
    );
    ok(g.get_work(authed(&root, pb::GetWorkRequest { id: b_id }))
        .await);

    // A's own views are scoped.
    let events = audit(&mut g, &a, "").await;
    assert!(!events.is_empty());
    assert!(events.iter().all(|e| e.namespace == "ns-a"), "{events:?}");
    let fleet = ok(g
        .get_fleet_summary(authed(&a, pb::GetFleetSummaryRequest {}))
        .await);
    assert_eq!(fleet.namespaces, 1);
    assert_eq!(fleet.agents, 1);
    assert_eq!(fleet.agents_running, 0);
    assert_eq!(fleet.agents_desired_running, 0);
    assert!(fleet.revisions_by_phase.is_empty());

    // B is untouched and visible to the installation admin.
    let b = list_agents(&mut g, &root, "ns-b").await;
    assert_eq!(b.len(), 2);
    assert!(b.iter().all(|x| x.version == 1));
    assert_eq!(b[1].spec.as_ref().unwrap().image, "img:1");
    assert_eq!(b[1].latest_revision, None);
    let fleet = ok(g
        .get_fleet_summary(authed(&root, pb::GetFleetSummaryRequest {}))
        .await);
    assert_eq!(fleet.namespaces, 2);
    assert_eq!(fleet.agents, 3);
    // b1 is deployed with no cluster enrolled: wanted, not running.
    assert_eq!(fleet.agents_desired_running, 1);
    assert_eq!(fleet.agents_running, 0);
    assert_eq!(fleet.agents_not_running, 1);
    hub.stop().await;
}

/// Issue 9, defect 9, over gRPC: a tenant's clusters are those its
/// revisions are placed on, without serials or outbox depth, and its fleet
/// counts cover only those.
async fn grpc_tenants_see_only_their_clusters(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let mut g = hub.grpc().await;
    let root = hub.root_token.clone();
    for name in ["exec-a", "exec-b"] {
        hub.store()
            .upsert_cluster(&ClusterRecord {
                name: name.into(),
                labels: BTreeMap::new(),
                capabilities: Vec::new(),
                certificate_serials: vec![format!("serial-{name}")],
                connection_state: ConnectionState::Online,
                last_seen: Some(Utc::now()),
                version: "0.1.0".into(),
            })
            .await
            .unwrap();
    }
    for (ns, cluster) in [("ns-a", "exec-a"), ("ns-b", "exec-b")] {
        create_namespace(&mut g, &root, ns).await;
        ok(g.create_agent(authed(
            &root,
            pb::CreateAgentRequest {
                namespace: ns.into(),
                name: "bot".into(),
                spec: Some(pb::AgentSpec {
                    placement: Some(pb::Placement {
                        cluster: cluster.into(),
                        ..Default::default()
                    }),
                    ..spec("img:1")
                }),
            },
        ))
        .await);
        let rev = ok(deploy(&mut g, &root, ns, "bot", "", None).await);
        assert_eq!(rev.resolved_cluster, cluster);
    }

    let all = ok(g
        .list_clusters(authed(&root, pb::ListClustersRequest {}))
        .await);
    assert_eq!(all.items.len(), 2);
    assert!(
        all.items
            .iter()
            .all(|c| !c.certificate_serials.is_empty() && c.outbox_depth.is_some()),
        "{all:?}"
    );

    let a = hub.token("a-viewer", Some("ns-a"), Role::Viewer).await;
    let seen = ok(g
        .list_clusters(authed(&a, pb::ListClustersRequest {}))
        .await);
    let names: Vec<&str> = seen.items.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["exec-a"]);
    let one = ok(g
        .get_cluster(authed(
            &a,
            pb::GetClusterRequest {
                name: "exec-a".into(),
            },
        ))
        .await);
    for c in [&seen.items[0], &one] {
        assert!(c.certificate_serials.is_empty(), "{c:?}");
        assert_eq!(c.outbox_depth, None, "{c:?}");
    }
    fails(
        g.get_cluster(authed(
            &a,
            pb::GetClusterRequest {
                name: "exec-b".into(),
            },
        ))
        .await,
        Code::NotFound,
    );
    let fleet = ok(g
        .get_fleet_summary(authed(&a, pb::GetFleetSummaryRequest {}))
        .await);
    assert_eq!(fleet.clusters, 1);
    assert_eq!(fleet.clusters_online, 1);
    assert_eq!(fleet.namespaces, 1);
    let fleet = ok(g
        .get_fleet_summary(authed(&root, pb::GetFleetSummaryRequest {}))
        .await);
    assert_eq!(fleet.clusters, 2);
    hub.stop().await;
}

async fn grpc_oversized_message_is_rejected(backend: Backend) {
    let mut hub = TestHub::start_with(
        backend,
        |config| config.api.max_body_bytes = 2048,
        Handlers::builtin(),
    )
    .await;
    let root = hub.root_token.clone();
    let mut g = hub.grpc().await;
    create_namespace(&mut g, &root, "team").await;

    let request = |name: &str, size: usize| {
        authed(
            &root,
            pb::CreateConfigurationRequest {
                namespace: "team".into(),
                name: name.into(),
                data_json: json!({ "blob": "x".repeat(size) }).to_string(),
            },
        )
    };
    let status = g
        .create_configuration(request("big", 8 * 1024))
        .await
        .expect_err("an oversized message is refused");
    assert!(
        matches!(status.code(), Code::ResourceExhausted | Code::OutOfRange),
        "{status:?}"
    );
    assert_ne!(status.code(), Code::Internal);

    // The connection still works, and a message under the limit is accepted.
    ok(g.create_configuration(request("small", 1024)).await);
    let names: Vec<String> = ok(g
        .list_configurations(authed(
            &root,
            pb::ListConfigurationsRequest {
                namespace: "team".into(),
            },
        ))
        .await)
    .items
    .into_iter()
    .map(|c| c.name)
    .collect();
    assert_eq!(names, ["small"], "the oversized one was not stored");
    hub.stop().await;
}

/// Issue 12 item 1 over gRPC: set answers metadata only, no read (Agent,
/// revision, credential listings, audit) carries the value, a bad kind and
/// a service-account credential for a non-Codex Agent are InvalidArgument
/// naming `kind`, another tenant is denied, and the deploy freezes it.
async fn grpc_credentials_are_write_only(backend: Backend) {
    let mut hub = TestHub::start(backend).await;
    let root = hub.root_token.clone();
    let mut g = hub.grpc().await;
    create_namespace(&mut g, &root, "team-a").await;
    create_namespace(&mut g, &root, "team-b").await;
    create_agent(&mut g, &root, "team-a", "bot").await;
    let secret = format!("sk-grpc-{}", uuid::Uuid::new_v4().simple());
    let set = |token: &str, kind: &str, value: &str| {
        authed(
            token,
            pb::SetAgentCredentialRequest {
                namespace: "team-a".into(),
                agent: "bot".into(),
                kind: kind.into(),
                value: value.into(),
            },
        )
    };

    let meta = ok(g
        .set_agent_credential(set(&root, "model-api-key", &secret))
        .await);
    assert_eq!((meta.kind.as_str(), meta.version), ("model-api-key", 1));
    time(&meta.set_at);
    assert!(!format!("{meta:?}").contains(&secret));
    let meta = ok(g
        .set_agent_credential(set(&root, "model-api-key", &secret))
        .await);
    assert_eq!(meta.version, 2);

    invalid(
        g.set_agent_credential(set(&root, "password", &secret))
            .await,
        "kind",
    );
    let status = fails(
        g.set_agent_credential(set(&root, "service-account", &secret))
            .await,
        Code::InvalidArgument,
    );
    assert!(status.message().contains("kind"), "{status:?}");
    assert!(status.message().contains("dedicated-codex"), "{status:?}");
    assert!(!status.message().contains(&secret));
    invalid(
        g.set_agent_credential(set(&root, "", &secret)).await,
        "kind",
    );
    invalid(
        g.set_agent_credential(set(&root, "model-api-key", ""))
            .await,
        "value",
    );

    let other = hub.token("b-admin", Some("team-b"), Role::Admin).await;
    fails(
        g.set_agent_credential(set(&other, "model-api-key", "x"))
            .await,
        Code::PermissionDenied,
    );
    fails(
        g.list_agent_credentials(authed(
            &other,
            pb::ListAgentCredentialsRequest {
                namespace: "team-a".into(),
                agent: "bot".into(),
            },
        ))
        .await,
        Code::PermissionDenied,
    );

    let rev = ok(deploy(&mut g, &root, "team-a", "bot", "", None).await);
    let listed = ok(g
        .list_agent_credentials(authed(
            &root,
            pb::ListAgentCredentialsRequest {
                namespace: "team-a".into(),
                agent: "bot".into(),
            },
        ))
        .await);
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].version, 2);
    let frozen = ok(g
        .list_revision_credentials(authed(
            &root,
            pb::ListRevisionCredentialsRequest {
                namespace: "team-a".into(),
                agent: "bot".into(),
                number: rev.number,
            },
        ))
        .await);
    assert_eq!(frozen.items.len(), 1);
    assert_eq!(frozen.items[0].version, 2);
    let agent = ok(g
        .get_agent(authed(
            &root,
            pb::GetAgentRequest {
                namespace: "team-a".into(),
                name: "bot".into(),
            },
        ))
        .await);
    let revision = ok(g
        .get_revision(authed(
            &root,
            pb::GetRevisionRequest {
                namespace: "team-a".into(),
                agent: "bot".into(),
                number: rev.number,
            },
        ))
        .await);
    let events = audit(&mut g, &root, "team-a").await;
    let shown = format!("{rev:?} {listed:?} {frozen:?} {agent:?} {revision:?} {events:?}");
    assert!(!shown.contains(&secret), "{shown}");
    assert!(
        events
            .iter()
            .any(|e| e.action == "agent.credential.set" && e.result == "ok"),
        "{events:?}"
    );

    ok(g.delete_agent_credential(authed(
        &root,
        pb::DeleteAgentCredentialRequest {
            namespace: "team-a".into(),
            agent: "bot".into(),
            kind: "model-api-key".into(),
        },
    ))
    .await);
    fails(
        g.delete_agent_credential(authed(
            &root,
            pb::DeleteAgentCredentialRequest {
                namespace: "team-a".into(),
                agent: "bot".into(),
                kind: "model-api-key".into(),
            },
        ))
        .await,
        Code::NotFound,
    );
    hub.stop().await;
}
