//! One store conformance suite, instantiated for SQLite and for a real
//! PostgreSQL server. Each case gets a fresh database (or schema).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use clawfed_hub::auth::{self, Role};
use clawfed_hub::gateway::TransportCredentials;
use clawfed_hub::gateway::transport;
use clawfed_hub::model::{
    AgentSpec, ConnectionState, DesiredState, ExecutionMode, HarnessKind, NamespaceState,
    Placement, Resources, RevisionPhase, WorkState,
};
use clawfed_hub::store::{
    ClusterRecord, Effects, IdempotencyKey, Move, NewAgent, NewAudit, NewNamespace, NewRevision,
    NewToken, NewWork, Store, StoreError, WorkFilter, WorkLane,
};
use serde_json::json;

fn audit(action: &str, ns: Option<&str>, target: &str) -> NewAudit {
    NewAudit {
        actor: "token:test".into(),
        action: action.into(),
        namespace: ns.map(str::to_owned),
        target: target.into(),
        result: "ok".into(),
        detail: None,
    }
}

fn fx(action: &str) -> Effects {
    Effects::audit(audit(action, Some("team-a"), "t"))
}

fn spec(image: &str) -> AgentSpec {
    AgentSpec {
        harness_kind: HarnessKind::DedicatedOpenclaw,
        execution_mode: ExecutionMode::Ordinary,
        image: image.into(),
        gateway_image: None,
        configuration: None,
        resources: Resources::default(),
        requirement_labels: BTreeMap::from([("gpu".into(), "a100".into())]),
        placement: Placement::default(),
        plugins: vec!["web".into()],
        channels: vec![],
        failover: None,
    }
}

fn work(kind: &str, ns_id: Option<&str>, target: &str) -> NewWork {
    NewWork {
        kind: kind.into(),
        namespace_id: ns_id.map(str::to_owned),
        target: target.into(),
        payload: json!({ "n": target }),
        requested_by: None,
        max_attempts: 3,
        run_at: Utc::now(),
        coalesce: false,
    }
}

async fn namespace(s: &dyn Store, name: &str) -> String {
    let id = uuid::Uuid::now_v7().to_string();
    s.create_namespace(
        &NewNamespace {
            id: id.clone(),
            name: name.into(),
            display_name: name.into(),
            data_plane_namespace: clawfed_proto::naming::data_plane_namespace(&id),
            adopted: false,
        },
        &Effects::audit(audit("namespace.create", Some(name), name)),
    )
    .await
    .expect("create namespace");
    id
}

async fn agent(s: &dyn Store, ns: &str, name: &str) {
    s.create_agent(
        &NewAgent {
            namespace: ns.into(),
            name: name.into(),
            spec: spec("img:1"),
        },
        &fx("agent.create"),
    )
    .await
    .expect("create agent");
}

fn revision(ns: &str, agent: &str, version: i64, image: &str) -> NewRevision {
    NewRevision {
        id: uuid::Uuid::now_v7().to_string(),
        namespace: ns.into(),
        agent: agent.into(),
        agent_version: version,
        spec: spec(image),
        configuration: json!({ "model": "x" }),
        images: vec![],
        resolved_cluster: None,
        rolled_back_from: None,
        moved: None,
        idempotency: None,
        requested_by: Some("token-1".into()),
    }
}

mod cases {
    use super::*;

    pub async fn namespaces_round_trip_with_atomic_effects(s: Arc<dyn Store>) {
        let id = uuid::Uuid::now_v7().to_string();
        let fx = Effects {
            quotas: Vec::new(),
            audit: audit("namespace.create", Some("team-a"), "namespaces/team-a"),
            work: vec![work("namespace.provision", Some(&id), &id)],
        };
        let ns = s
            .create_namespace(
                &NewNamespace {
                    id: id.clone(),
                    name: "team-a".into(),
                    display_name: "Team A".into(),
                    data_plane_namespace: "oce-adopted".into(),
                    adopted: true,
                },
                &fx,
            )
            .await
            .unwrap();
        assert_eq!(ns.state, NamespaceState::Pending);
        assert!(ns.adopted);
        assert_eq!(ns.data_plane_namespace, "oce-adopted");
        assert_eq!(s.get_namespace("team-a").await.unwrap(), ns);
        assert_eq!(s.get_namespace_by_id(&id).await.unwrap(), ns);
        // The audit event and the work item were written with it.
        let events = s.list_audit(Some("team-a"), 10).await.unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].action, "namespace.create");
        let items = s
            .list_work(&WorkFilter {
                namespace: Some("team-a".into()),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].kind, "namespace.provision");
        assert_eq!(items[0].namespace.as_deref(), Some("team-a"));

        // Duplicates of name or data-plane name are refused, and the refused
        // attempt leaves no audit or work behind.
        let dup = s
            .create_namespace(
                &NewNamespace {
                    id: uuid::Uuid::now_v7().to_string(),
                    name: "team-a".into(),
                    display_name: "x".into(),
                    data_plane_namespace: "oce-other".into(),
                    adopted: false,
                },
                &Effects {
                    quotas: Vec::new(),
                    audit: audit("namespace.create", Some("team-a"), "dup"),
                    work: vec![work("namespace.provision", None, "dup")],
                },
            )
            .await;
        assert!(matches!(
            dup,
            Err(StoreError::AlreadyExists {
                kind: "namespace",
                ..
            })
        ));
        let dup_plane = s
            .create_namespace(
                &NewNamespace {
                    id: uuid::Uuid::now_v7().to_string(),
                    name: "team-b".into(),
                    display_name: "x".into(),
                    data_plane_namespace: "oce-adopted".into(),
                    adopted: true,
                },
                &fx,
            )
            .await;
        assert!(matches!(dup_plane, Err(StoreError::AlreadyExists { .. })));
        assert_eq!(s.list_audit(None, 10).await.unwrap().len(), 1);
        assert_eq!(s.work_stats(Utc::now()).await.unwrap().pending, 1);

        let provisioned = s.mark_namespace_provisioned(&id, Utc::now()).await.unwrap();
        assert_eq!(provisioned.state, NamespaceState::Active);
        let first = provisioned.provisioned_at.unwrap();
        let again = s
            .mark_namespace_provisioned(&id, Utc::now() + chrono::Duration::seconds(5))
            .await
            .unwrap();
        assert_eq!(again.provisioned_at, Some(first), "idempotent");

        namespace(s.as_ref(), "team-b").await;
        let names: Vec<_> = s
            .list_namespaces(None)
            .await
            .unwrap()
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(names, ["team-a", "team-b"]);
        assert_eq!(s.list_namespaces(Some("team-b")).await.unwrap().len(), 1);
        assert!(matches!(
            s.get_namespace("nope").await,
            Err(StoreError::NotFound { .. })
        ));
    }

    pub async fn namespace_delete_refuses_while_agents_exist(s: Arc<dyn Store>) {
        namespace(s.as_ref(), "team-a").await;
        agent(s.as_ref(), "team-a", "bot").await;
        let err = s
            .delete_namespace("team-a", &fx("namespace.delete"))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::FailedPrecondition(_)), "{err}");
        assert!(s.get_namespace("team-a").await.is_ok());
        s.delete_agent("team-a", "bot", &fx("agent.delete"))
            .await
            .unwrap();
        s.create_token(&NewToken {
            name: "tenant".into(),
            namespace: Some("team-a".into()),
            role: Role::Viewer,
            hash: auth::mint_token().hash,
            expires_at: None,
        })
        .await
        .unwrap();
        s.delete_namespace("team-a", &fx("namespace.delete"))
            .await
            .unwrap();
        assert!(matches!(
            s.get_namespace("team-a").await,
            Err(StoreError::NotFound { .. })
        ));
        assert!(matches!(
            s.delete_namespace("team-a", &fx("namespace.delete")).await,
            Err(StoreError::NotFound { .. })
        ));
    }

    pub async fn configurations_use_optimistic_concurrency(s: Arc<dyn Store>) {
        namespace(s.as_ref(), "team-a").await;
        let c = s
            .create_configuration("team-a", "base", &json!({"a": 1}), &fx("c"))
            .await
            .unwrap();
        assert_eq!(c.version, 1);
        assert!(matches!(
            s.create_configuration("team-a", "base", &json!({}), &fx("c"))
                .await,
            Err(StoreError::AlreadyExists { .. })
        ));
        let c2 = s
            .update_configuration("team-a", "base", &json!({"a": 2}), 1, &fx("u"))
            .await
            .unwrap();
        assert_eq!(c2.version, 2);
        // A writer still holding version 1 loses, and its write is not applied.
        let stale = s
            .update_configuration("team-a", "base", &json!({"a": 3}), 1, &fx("u"))
            .await;
        assert!(matches!(
            stale,
            Err(StoreError::Conflict { expected: 1, .. })
        ));
        assert_eq!(
            s.get_configuration("team-a", "base").await.unwrap().data,
            json!({"a": 2})
        );
        assert!(matches!(
            s.update_configuration("team-a", "missing", &json!({}), 1, &fx("u"))
                .await,
            Err(StoreError::NotFound { .. })
        ));
        assert_eq!(s.list_configurations("team-a").await.unwrap().len(), 1);
        s.delete_configuration("team-a", "base", &fx("d"))
            .await
            .unwrap();
        assert!(s.list_configurations("team-a").await.unwrap().is_empty());
    }

    pub async fn agents_use_optimistic_concurrency(s: Arc<dyn Store>) {
        namespace(s.as_ref(), "team-a").await;
        agent(s.as_ref(), "team-a", "bot").await;
        let a = s.get_agent("team-a", "bot").await.unwrap();
        assert_eq!(a.version, 1);
        assert_eq!(a.desired_state, DesiredState::Stopped);
        assert_eq!(a.spec, spec("img:1"));
        assert!(matches!(
            s.create_agent(
                &NewAgent {
                    namespace: "team-a".into(),
                    name: "bot".into(),
                    spec: spec("img:1")
                },
                &fx("agent.create")
            )
            .await,
            Err(StoreError::AlreadyExists { kind: "agent", .. })
        ));
        // Two writers read version 1; exactly one update wins.
        let (spec_x, spec_y, fx_u) = (spec("img:x"), spec("img:y"), fx("u"));
        let (x, y) = tokio::join!(
            s.update_agent("team-a", "bot", &spec_x, 1, &fx_u),
            s.update_agent("team-a", "bot", &spec_y, 1, &fx_u),
        );
        let winner = match (x, y) {
            (Ok(w), Err(StoreError::Conflict { .. }))
            | (Err(StoreError::Conflict { .. }), Ok(w)) => w,
            other => panic!("expected one winner and one conflict, got {other:?}"),
        };
        assert_eq!(winner.version, 2);
        assert_eq!(
            s.get_agent("team-a", "bot").await.unwrap().spec,
            winner.spec
        );
        // Agents are namespaced.
        namespace(s.as_ref(), "team-b").await;
        assert!(matches!(
            s.get_agent("team-b", "bot").await,
            Err(StoreError::NotFound { .. })
        ));
        assert_eq!(s.list_agents("team-b").await.unwrap().len(), 0);
        assert_eq!(s.list_agents("team-a").await.unwrap().len(), 1);
    }

    pub async fn deploy_freezes_numbered_immutable_revisions(s: Arc<dyn Store>) {
        namespace(s.as_ref(), "team-a").await;
        agent(s.as_ref(), "team-a", "bot").await;
        let r1 = s
            .deploy(&revision("team-a", "bot", 1, "img:1"), &fx("agent.deploy"))
            .await
            .unwrap();
        assert!(r1.created);
        assert_eq!(r1.revision.number, 1);
        assert_eq!(r1.revision.phase, RevisionPhase::Pending);
        assert_eq!(r1.revision.configuration, json!({"model": "x"}));
        let a = s.get_agent("team-a", "bot").await.unwrap();
        assert_eq!(a.latest_revision, Some(1));
        assert_eq!(a.desired_state, DesiredState::Running);
        assert_eq!(a.version, 1, "deploy does not bump the draft version");
        // Deploying from a stale draft version is a conflict, not a mixed snapshot.
        s.update_agent("team-a", "bot", &spec("img:2"), 1, &fx("u"))
            .await
            .unwrap();
        assert!(matches!(
            s.deploy(&revision("team-a", "bot", 1, "img:1"), &fx("agent.deploy"))
                .await,
            Err(StoreError::Conflict { .. })
        ));
        let r2 = s
            .deploy(&revision("team-a", "bot", 2, "img:2"), &fx("agent.deploy"))
            .await
            .unwrap();
        assert_eq!(r2.revision.number, 2);
        // Revision 1 is unchanged by the later edit and deploy.
        let got = s.get_revision("team-a", "bot", 1).await.unwrap();
        assert_eq!(got, r1.revision);
        assert_eq!(got.spec.image, "img:1");
        let mut rollback = revision("team-a", "bot", 2, "img:1");
        rollback.rolled_back_from = Some(1);
        let r3 = s.deploy(&rollback, &fx("agent.rollback")).await.unwrap();
        assert_eq!(r3.revision.number, 3);
        assert_eq!(r3.revision.rolled_back_from, Some(1));
        let numbers: Vec<_> = s
            .list_revisions("team-a", "bot")
            .await
            .unwrap()
            .iter()
            .map(|r| r.number)
            .collect();
        assert_eq!(numbers, [1, 2, 3]);
        assert!(matches!(
            s.list_revisions("team-a", "ghost").await,
            Err(StoreError::NotFound { .. })
        ));
        let events = s.list_audit(Some("team-a"), 50).await.unwrap();
        assert!(
            events
                .iter()
                .any(|e| e.action == "agent.deploy" && e.detail.as_deref() == Some("revision 2"))
        );
        // Stop, then delete. Issue 12: the revision history stays (and the
        // audit); the Agent is gone from every live view, and its name stays
        // with its history.
        assert!(matches!(
            s.delete_agent("team-a", "bot", &fx("d")).await,
            Err(StoreError::FailedPrecondition(_))
        ));
        s.set_desired_state("team-a", "bot", DesiredState::Stopped, &fx("stop"))
            .await
            .unwrap();
        s.delete_agent("team-a", "bot", &fx("agent.delete"))
            .await
            .unwrap();
        let kept: Vec<_> = s
            .list_revisions("team-a", "bot")
            .await
            .unwrap()
            .iter()
            .map(|r| r.number)
            .collect();
        assert_eq!(kept, [1, 2, 3], "history kept");
        assert_eq!(s.get_revision("team-a", "bot", 2).await.unwrap().number, 2);
        assert!(matches!(
            s.get_agent("team-a", "bot").await,
            Err(StoreError::NotFound { .. })
        ));
        assert!(s.list_agents("team-a").await.unwrap().is_empty());
        assert_eq!(s.fleet_summary(Some("team-a")).await.unwrap().agents, 0);
        assert!(matches!(
            s.delete_agent("team-a", "bot", &fx("d")).await,
            Err(StoreError::NotFound { .. })
        ));
        assert!(matches!(
            s.set_desired_state("team-a", "bot", DesiredState::Running, &fx("x"))
                .await,
            Err(StoreError::NotFound { .. })
        ));
        assert!(matches!(
            s.deploy(&revision("team-a", "bot", 4, "img:1"), &fx("agent.deploy"))
                .await,
            Err(StoreError::NotFound { .. })
        ));
        let again = s
            .create_agent(
                &NewAgent {
                    namespace: "team-a".into(),
                    name: "bot".into(),
                    spec: spec("img:1"),
                },
                &fx("agent.create"),
            )
            .await;
        match again {
            Err(StoreError::FailedPrecondition(why)) => assert!(why.contains("history"), "{why}"),
            other => panic!("{other:?}"),
        }
        let events = s.list_audit(Some("team-a"), 100).await.unwrap();
        assert!(events.iter().any(|e| e.action == "agent.delete"));
        assert!(events.iter().any(|e| e.action == "agent.deploy"));
        // The tenant goes, and the history with it.
        s.delete_namespace("team-a", &fx("namespace.delete"))
            .await
            .unwrap();
        assert!(matches!(
            s.list_revisions("team-a", "bot").await,
            Err(StoreError::NotFound { .. })
        ));
    }

    pub async fn deploy_is_idempotent_per_key(s: Arc<dyn Store>) {
        namespace(s.as_ref(), "team-a").await;
        agent(s.as_ref(), "team-a", "bot").await;
        let mut req = revision("team-a", "bot", 1, "img:1");
        req.idempotency = Some(IdempotencyKey {
            key: "k1".into(),
            fingerprint: "f1".into(),
        });
        let first = s.deploy(&req, &fx("agent.deploy")).await.unwrap();
        let again = s.deploy(&req, &fx("agent.deploy")).await.unwrap();
        assert!(first.created);
        assert!(!again.created);
        assert_eq!(first.revision.id, again.revision.id);
        assert_eq!(s.list_revisions("team-a", "bot").await.unwrap().len(), 1);
        let mut other = req.clone();
        other.idempotency = Some(IdempotencyKey {
            key: "k1".into(),
            fingerprint: "different".into(),
        });
        assert!(matches!(
            s.deploy(&other, &fx("agent.deploy")).await,
            Err(StoreError::FailedPrecondition(_))
        ));
        // Concurrent retries of one key still make exactly one revision.
        let mut req2 = revision("team-a", "bot", 1, "img:1");
        req2.idempotency = Some(IdempotencyKey {
            key: "k2".into(),
            fingerprint: "f2".into(),
        });
        let results = futures_join(s.clone(), req2, 8).await;
        let ids: HashSet<_> = results.iter().map(|d| d.revision.id.clone()).collect();
        assert_eq!(ids.len(), 1, "{results:?}");
        assert_eq!(results.iter().filter(|d| d.created).count(), 1);
        assert_eq!(s.list_revisions("team-a", "bot").await.unwrap().len(), 2);
    }

    async fn futures_join(
        s: Arc<dyn Store>,
        req: NewRevision,
        n: usize,
    ) -> Vec<clawfed_hub::store::Deployed> {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..n {
            let s = s.clone();
            let req = req.clone();
            set.spawn(async move { s.deploy(&req, &fx("agent.deploy")).await.unwrap() });
        }
        set.join_all().await
    }

    pub async fn concurrent_deploys_get_distinct_numbers(s: Arc<dyn Store>) {
        namespace(s.as_ref(), "team-a").await;
        agent(s.as_ref(), "team-a", "bot").await;
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let s = s.clone();
            set.spawn(async move {
                s.deploy(&revision("team-a", "bot", 1, "img:1"), &fx("agent.deploy"))
                    .await
            });
        }
        let mut numbers: Vec<i64> = Vec::new();
        for r in set.join_all().await {
            match r {
                Ok(d) => numbers.push(d.revision.number),
                // Under heavy contention the store may give up (the caller
                // retries); it must never hand out a duplicate number.
                Err(StoreError::FailedPrecondition(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
        numbers.sort_unstable();
        let expected: Vec<i64> = (1..=numbers.len() as i64).collect();
        assert_eq!(numbers, expected);
        assert!(numbers.len() >= 8, "too many give-ups: {numbers:?}");
    }

    pub async fn clusters_upsert_by_name(s: Arc<dyn Store>) {
        let mut rec = ClusterRecord {
            name: "exec-a".into(),
            labels: BTreeMap::from([("region".into(), "eu".into())]),
            capabilities: vec!["provider".into()],
            certificate_serials: vec!["01".into()],
            connection_state: ConnectionState::Pending,
            last_seen: None,
            version: "0.1.0".into(),
        };
        let first = s.upsert_cluster(&rec).await.unwrap();
        rec.connection_state = ConnectionState::Online;
        rec.last_seen = Some(Utc::now());
        let second = s.upsert_cluster(&rec).await.unwrap();
        assert_eq!(first.id, second.id, "same row updated");
        assert_eq!(second.connection_state, ConnectionState::Online);
        assert!(second.last_seen.is_some());
        assert_eq!(s.list_clusters().await.unwrap(), vec![second.clone()]);
        assert_eq!(s.get_cluster("exec-a").await.unwrap(), second);
        assert!(matches!(
            s.get_cluster("exec-b").await,
            Err(StoreError::NotFound { .. })
        ));
        assert_eq!(s.fleet_summary(None).await.unwrap().clusters_online, 1);
    }

    /// Issue 33: a Hello's labels replace the stored ones (a Hello that
    /// changes only them is a watch event); the latest capacity report is
    /// kept with when it came, and a heartbeat's state write keeps both.
    pub async fn clusters_keep_what_their_spoke_reports(s: Arc<dyn Store>) {
        use clawfed_hub::model::ResourceAmounts;
        use clawfed_hub::store::SpokeHello;
        use clawfed_proto::capacity::{Capacity, Resources};
        let c = s
            .upsert_cluster(&ClusterRecord {
                name: "exec-a".into(),
                labels: BTreeMap::from([("set-by".into(), "admin".into())]),
                capabilities: vec![],
                certificate_serials: vec![],
                connection_state: ConnectionState::Offline,
                last_seen: None,
                version: String::new(),
            })
            .await
            .unwrap();
        assert_eq!(c.capacity, None, "nothing reported yet");
        let caps = vec!["applier:kube".to_owned()];
        let hello = |labels: &'static [(&'static str, &'static str)]| {
            let (s, id, caps) = (s.clone(), c.id.clone(), caps.clone());
            async move {
                let labels: BTreeMap<String, String> = labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                let h = SpokeHello {
                    version: "1.0",
                    capabilities: &caps,
                    labels: &labels,
                };
                s.set_connection_state(&id, ConnectionState::Online, Utc::now(), Some(h))
                    .await
                    .unwrap();
            }
        };
        hello(&[("region", "eu"), ("tier", "gpu")]).await;
        let got = s.get_cluster("exec-a").await.unwrap();
        assert_eq!(
            got.labels,
            BTreeMap::from([
                ("region".into(), "eu".into()),
                ("tier".into(), "gpu".into())
            ]),
            "replaced, not merged"
        );
        let head = s.events_after(0, 1000).await.unwrap().len();
        hello(&[("region", "us")]).await;
        let events = s.events_after(0, 1000).await.unwrap().len();
        assert_eq!(events, head + 1, "a label change is a cluster event");
        hello(&[("region", "us")]).await;
        assert_eq!(s.events_after(0, 1000).await.unwrap().len(), events);

        let report = Capacity {
            nodes: 3,
            allocatable: Resources {
                cpu_millis: 12_000,
                memory_bytes: 48 << 30,
            },
            free: Resources {
                cpu_millis: 7_250,
                memory_bytes: (20 << 30) + 1,
            },
        };
        let at = Utc::now() - chrono::Duration::seconds(5);
        s.set_cluster_capacity(&c.id, report, at).await.unwrap();
        let mut later = report;
        later.free.cpu_millis = 250;
        s.set_cluster_capacity(&c.id, later, at + chrono::Duration::seconds(1))
            .await
            .unwrap();
        // A heartbeat's write touches neither labels nor capacity.
        s.set_connection_state(&c.id, ConnectionState::Online, Utc::now(), None)
            .await
            .unwrap();
        let got = s.get_cluster("exec-a").await.unwrap();
        let k = got.capacity.clone().expect("stored");
        assert_eq!(k.nodes, 3);
        assert_eq!(
            k.allocatable,
            ResourceAmounts {
                cpu_millis: 12_000,
                memory_bytes: 48 << 30
            }
        );
        assert_eq!(
            k.free,
            ResourceAmounts {
                cpu_millis: 250,
                memory_bytes: (20 << 30) + 1
            },
            "the latest report"
        );
        assert_eq!(
            k.reported_at.timestamp_millis(),
            (at + chrono::Duration::seconds(1)).timestamp_millis()
        );
        assert_eq!(k.as_capacity(), later);
        assert_eq!(got.labels.get("region").map(String::as_str), Some("us"));
        assert_eq!(s.list_clusters().await.unwrap(), vec![got]);
    }

    /// Issue 33: cordon and drain are kept per cluster. A drain keeps its
    /// start while it runs (asking again changes its parallelism), ends
    /// only by the drain that started it or an uncordon; a move deploys
    /// only while the moved revision is the Agent's latest and the Agent
    /// runs; a drain concerns what is placed there and the moves since.
    pub async fn clusters_cordon_and_drain_record_moves(s: Arc<dyn Store>) {
        let s = s.as_ref();
        let ms = |m: i64| {
            chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis() + m)
                .expect("time")
        };
        let (t0, t1, t2, t3, t4, t5) = (ms(0), ms(1), ms(2), ms(3), ms(4), ms(5));
        online_cluster(s, "exec-d").await;
        let c = s
            .set_cordon("exec-d", Some(t0), t0, &fx("cluster.cordon"))
            .await
            .unwrap();
        assert_eq!((c.cordoned_at, c.drain.clone()), (Some(t0), None));
        let twice = s
            .set_cordon("exec-d", Some(t1), t1, &fx("cluster.cordon"))
            .await
            .unwrap();
        assert_eq!(
            twice.cordoned_at,
            Some(t0),
            "cordoning again keeps the first time"
        );
        let d = s
            .start_drain("exec-d", 2, "tok", t1, &fx("cluster.drain"))
            .await
            .unwrap();
        assert_eq!(d.cordoned_at, Some(t0), "the earlier cordon is kept");
        let drain = d.drain.clone().expect("drain");
        assert_eq!(
            (drain.started_at, drain.parallelism, drain.finished_at),
            (t1, 2, None)
        );
        assert_eq!(drain.requested_by.as_deref(), Some("tok"));
        let again = s
            .start_drain("exec-d", 5, "tok", t2, &fx("cluster.drain"))
            .await
            .unwrap()
            .drain
            .expect("drain");
        assert_eq!((again.started_at, again.parallelism), (t1, 5));
        assert!(
            !s.finish_drain("exec-d", t2, t3).await.unwrap(),
            "not its start"
        );
        assert!(s.finish_drain("exec-d", t1, t3).await.unwrap());
        assert!(
            !s.finish_drain("exec-d", t1, t4).await.unwrap(),
            "already over"
        );
        let over = s.get_cluster("exec-d").await.unwrap();
        assert_eq!(over.drain.expect("drain").finished_at, Some(t3));
        let next = s
            .start_drain("exec-d", 1, "tok", t4, &fx("cluster.drain"))
            .await
            .unwrap();
        assert!(next.draining());
        assert_eq!(next.drain.expect("drain").started_at, t4);
        let open = s
            .set_cordon("exec-d", None, t5, &fx("cluster.uncordon"))
            .await
            .unwrap();
        assert!(!open.cordoned() && !open.draining());
        assert_eq!(open.drain.expect("drain").finished_at, Some(t5));
        // Each change is on the watch stream, as views see it.
        use clawfed_hub::model::event::EventBody;
        let scheduling: Vec<(bool, bool)> = s
            .events_after(0, 1000)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.cluster.as_deref() == Some("exec-d"))
            .filter_map(|e| match e.body {
                EventBody::ClusterScheduling(b) => Some((b.cordoned_at.is_some(), b.draining)),
                _ => None,
            })
            .collect();
        assert_eq!(
            scheduling,
            [
                (true, false),  // cordoned
                (true, false),  // cordoned again (same time)
                (true, true),   // drain started
                (true, true),   // re-paced
                (true, false),  // drain over
                (true, true),   // a new drain
                (false, false)  // uncordoned: the drain ends
            ]
        );
        assert!(matches!(
            s.set_cordon("nope", None, t5, &fx("cluster.uncordon"))
                .await,
            Err(StoreError::NotFound { .. })
        ));
        assert!(matches!(
            s.start_drain("nope", 1, "tok", t5, &fx("cluster.drain"))
                .await,
            Err(StoreError::NotFound { .. })
        ));

        namespace(s, "team-d").await;
        agent(s, "team-d", "bot").await;
        let r1 = s
            .deploy(&revision("team-d", "bot", 1, "img:1"), &fx("agent.deploy"))
            .await
            .unwrap()
            .revision;
        s.place_revision(&r1.id, "exec-d").await.unwrap();
        let since = ms(0);
        let move_of = |n: i64| NewRevision {
            moved: Some(Move {
                cluster: "exec-d".into(),
                revision: n,
            }),
            ..revision("team-d", "bot", 1, "img:1")
        };
        assert!(matches!(
            s.deploy(&move_of(2), &fx("agent.move")).await,
            Err(StoreError::FailedPrecondition(_))
        ));
        let r2 = s
            .deploy(&move_of(1), &fx("agent.move"))
            .await
            .unwrap()
            .revision;
        assert_eq!((r2.number, r2.moved_from.as_deref()), (2, Some("exec-d")));
        let concerned = |revs: Vec<clawfed_hub::model::AgentRevision>| {
            revs.iter().map(|r| r.number).collect::<Vec<_>>()
        };
        assert_eq!(
            concerned(s.drain_revisions("exec-d", since).await.unwrap()),
            [1, 2]
        );
        assert!(
            s.drain_revisions("exec-e", since).await.unwrap().is_empty(),
            "nothing runs on another cluster"
        );
        s.set_desired_state("team-d", "bot", DesiredState::Stopped, &fx("agent.stop"))
            .await
            .unwrap();
        assert!(
            matches!(
                s.deploy(&move_of(2), &fx("agent.move")).await,
                Err(StoreError::FailedPrecondition(_))
            ),
            "a stopped Agent is not moved"
        );
    }

    pub async fn failover_scan_sees_lapsed_leases_and_reported_fences(s: Arc<dyn Store>) {
        use clawfed_hub::model::{RevisionPhase, RevisionProgress};
        let s = s.as_ref();
        let base = Utc::now().timestamp_millis();
        let at =
            |secs: i64| chrono::DateTime::from_timestamp_millis(base + secs * 1000).expect("time");
        let id = online_cluster(s, "exec-f").await;
        assert_eq!(s.execution_lease("exec-f").await.unwrap(), None);
        s.renew_execution_lease(&id, at(0)).await.unwrap();
        assert_eq!(s.execution_lease("exec-f").await.unwrap(), Some(at(0)));
        assert_eq!(
            s.get_cluster("exec-f").await.unwrap().last_seen,
            Some(at(0)),
            "a renewal is also a sign of life"
        );
        assert_eq!(s.execution_lease("nope").await.unwrap(), None);

        namespace(s, "team-f").await;
        agent(s, "team-f", "bot").await;
        let with_failover = NewRevision {
            spec: AgentSpec {
                failover: Some(clawfed_hub::model::Failover { after_seconds: 30 }),
                ..spec("img:1")
            },
            ..revision("team-f", "bot", 1, "img:1")
        };
        let r1 = s
            .deploy(&with_failover, &fx("agent.deploy"))
            .await
            .unwrap()
            .revision;
        s.place_revision(&r1.id, "exec-f").await.unwrap();
        // Not active yet: nothing to move.
        assert!(
            s.failover_candidates(at(1), at(-100))
                .await
                .unwrap()
                .is_empty()
        );
        let r1 = s
            .update_revision(
                &r1.id,
                r1.version,
                RevisionPhase::Active,
                None,
                &RevisionProgress::default(),
            )
            .await
            .unwrap();
        // Renewed at 0: seen by a scan whose cut-off is later, not earlier.
        let seen = s.failover_candidates(at(1), at(-100)).await.unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(
            (seen[0].revision.id.as_str(), seen[0].lease_renewed_at),
            (r1.id.as_str(), Some(at(0)))
        );
        assert_eq!(
            seen[0].revision.spec.failover.map(|f| f.after_seconds),
            Some(30)
        );
        assert!(
            s.failover_candidates(at(-1), at(-100))
                .await
                .unwrap()
                .is_empty()
        );
        // A reported fence makes it a candidate whatever the lease says.
        let fenced = vec!["harness/x/bot/1".to_owned()];
        s.set_fenced_targets(&id, &fenced).await.unwrap();
        let seen = s.failover_candidates(at(-1), at(-100)).await.unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].fenced_targets, fenced);
        s.set_fenced_targets(&id, &[]).await.unwrap();
        assert!(
            s.failover_candidates(at(-1), at(-100))
                .await
                .unwrap()
                .is_empty()
        );
        // A move of it under way: not a candidate. The move failed (no
        // cluster took it): a candidate again once the retry cut-off
        // passes its failure, the failed move as the one to copy.
        let failed_move = s
            .deploy(
                &NewRevision {
                    spec: with_failover.spec.clone(),
                    moved: Some(Move {
                        cluster: "exec-f".into(),
                        revision: 1,
                    }),
                    ..revision("team-f", "bot", 1, "img:1")
                },
                &fx("agent.failover"),
            )
            .await
            .unwrap()
            .revision;
        assert!(
            s.failover_candidates(at(1), at(100))
                .await
                .unwrap()
                .is_empty()
        );
        s.update_revision(
            &failed_move.id,
            failed_move.version,
            RevisionPhase::Failed,
            Some("no cluster takes it"),
            &RevisionProgress::default(),
        )
        .await
        .unwrap();
        assert!(
            s.failover_candidates(at(1), at(-100))
                .await
                .unwrap()
                .is_empty(),
            "failed after the retry cut-off: not yet"
        );
        let seen = s.failover_candidates(at(1), at(100)).await.unwrap();
        assert_eq!(
            seen.iter()
                .map(|c| (c.revision.number, c.latest_revision))
                .collect::<Vec<_>>(),
            [(1, 2)]
        );
        // A stopped Agent, or one without failover, is never a candidate.
        s.set_desired_state("team-f", "bot", DesiredState::Stopped, &fx("agent.stop"))
            .await
            .unwrap();
        assert!(
            s.failover_candidates(at(1), at(-100))
                .await
                .unwrap()
                .is_empty()
        );
        agent(s, "team-f", "plain").await;
        let plain = s
            .deploy(
                &revision("team-f", "plain", 1, "img:1"),
                &fx("agent.deploy"),
            )
            .await
            .unwrap()
            .revision;
        s.place_revision(&plain.id, "exec-f").await.unwrap();
        s.update_revision(
            &plain.id,
            plain.version,
            RevisionPhase::Active,
            None,
            &RevisionProgress::default(),
        )
        .await
        .unwrap();
        assert!(
            s.failover_candidates(at(1), at(-100))
                .await
                .unwrap()
                .is_empty()
        );
    }

    pub async fn work_claims_are_exclusive_and_leased(s: Arc<dyn Store>) {
        let items: Vec<_> = (0..50).map(|i| work("k", None, &i.to_string())).collect();
        s.enqueue_work(&items).await.unwrap();
        let now = Utc::now();
        let lease = Duration::from_secs(30);
        let (a, b, c) = tokio::join!(
            s.claim_work("w1", 20, lease, now, &WorkLane::All),
            s.claim_work("w2", 20, lease, now, &WorkLane::All),
            s.claim_work("w3", 20, lease, now, &WorkLane::All),
        );
        let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
        let mut ids = HashSet::new();
        for item in a.iter().chain(&b).chain(&c) {
            assert!(ids.insert(item.id.clone()), "claimed twice: {}", item.id);
            assert_eq!(item.state, WorkState::Claimed);
            assert_eq!(item.attempts, 1);
        }
        assert_eq!(ids.len(), 50);
        assert!(
            s.claim_work("w4", 10, lease, now, &WorkLane::All)
                .await
                .unwrap()
                .is_empty()
        );
        // Only the holder completes or extends; fencing by lease owner.
        let a_ids: Vec<_> = a.iter().map(|i| i.id.clone()).collect();
        assert_eq!(s.complete_work("w2", &a_ids, now).await.unwrap(), 0);
        assert_eq!(
            s.heartbeat_work("w1", &a_ids, now + chrono::Duration::seconds(60))
                .await
                .unwrap(),
            a_ids.len() as u64
        );
        assert_eq!(
            s.complete_work("w1", &a_ids, now).await.unwrap(),
            a_ids.len() as u64
        );
        assert_eq!(s.get_work(&a_ids[0]).await.unwrap().state, WorkState::Done);
        let stats = s.work_stats(now).await.unwrap();
        assert_eq!(stats.pending, 50 - a_ids.len() as i64);
        assert!(stats.oldest_pending_age.is_some(), "due items wait");
        // A wake-up scheduled for later is pending but not late.
        s.enqueue_work(&[NewWork {
            run_at: now + chrono::Duration::hours(1),
            ..work("k", None, "later")
        }])
        .await
        .unwrap();
        let later = s.work_stats(now).await.unwrap();
        assert_eq!(later.pending, stats.pending + 1);
        assert_eq!(later.oldest_pending_age, stats.oldest_pending_age);
    }

    pub async fn expired_claims_are_recovered(s: Arc<dyn Store>) {
        let mut fragile = work("k", None, "last-try");
        fragile.max_attempts = 1;
        s.enqueue_work(&[work("k", None, "a"), fragile])
            .await
            .unwrap();
        let t0 = Utc::now();
        let claimed = s
            .claim_work("crashed", 10, Duration::from_secs(1), t0, &WorkLane::All)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 2);
        // Not expired yet: nothing to recover.
        assert_eq!(s.recover_expired_work(t0).await.unwrap().requeued, 0);
        let later = t0 + chrono::Duration::seconds(5);
        let recovered = s.recover_expired_work(later).await.unwrap();
        assert_eq!((recovered.requeued, recovered.failed), (1, 1));
        let again = s
            .claim_work(
                "survivor",
                10,
                Duration::from_secs(30),
                later,
                &WorkLane::All,
            )
            .await
            .unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].target, "a");
        assert_eq!(again[0].attempts, 2);
        // The crashed worker's late completion is fenced off.
        assert_eq!(
            s.complete_work("crashed", &[again[0].id.clone()], later)
                .await
                .unwrap(),
            0
        );
        let failed = s
            .list_work(&WorkFilter {
                state: Some(WorkState::Failed),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(failed.len(), 1);
        assert!(
            failed[0]
                .last_error
                .as_deref()
                .unwrap()
                .contains("lease expired"),
            "{:?}",
            failed[0].last_error
        );
    }

    /// A lane claims only its kinds, and an idle worker of a lane sleeps
    /// until its own next item: work of other kinds neither reaches it nor
    /// wakes it early (a due item it cannot claim would make it spin).
    pub async fn work_lanes_claim_and_wait_only_for_their_kinds(s: Arc<dyn Store>) {
        // Every due time is passed in from this one reading: `work()` reads
        // the clock after `now`, so its items could fall due after the claim.
        let now = Utc::now();
        let at = |kind: &str, target: &str, secs: i64| NewWork {
            run_at: now + chrono::Duration::seconds(secs),
            ..work(kind, None, target)
        };
        s.enqueue_work(&[
            at("revision.rollout", "r1", 0),
            at("revision.rollout", "r2", 0),
            at("gateway.ensure", "g1", 30),
            at("gateway.ensure", "g2", 0),
        ])
        .await
        .unwrap();
        let gateways = WorkLane::Only(vec!["gateway.ensure".into()]);
        let others = WorkLane::Except(vec!["gateway.ensure".into()]);
        let lease = Duration::from_secs(30);
        let got = s.claim_work("gw", 10, lease, now, &gateways).await.unwrap();
        let targets: Vec<_> = got.iter().map(|i| i.target.as_str()).collect();
        assert_eq!(targets, ["g2"], "only its kind, only what is due");
        // Due rollouts are pending, yet the gateway lane's next item is g1.
        let due = s.next_work_due(&gateways).await.unwrap();
        let next = due.next_run_at.expect("g1 is pending");
        assert!(
            next > now + chrono::Duration::seconds(29),
            "the gateway lane must sleep until g1, not wake for rollouts: {next}"
        );
        let all = s.next_work_due(&WorkLane::All).await.unwrap();
        assert!(all.next_run_at.unwrap() <= now, "rollouts are due");
        let got = s.claim_work("main", 10, lease, now, &others).await.unwrap();
        let mut targets: Vec<_> = got.iter().map(|i| i.target.clone()).collect();
        targets.sort();
        assert_eq!(targets, ["r1", "r2"], "every kind but the lane's");
        assert!(
            s.claim_work(
                "main",
                10,
                lease,
                now + chrono::Duration::seconds(60),
                &others
            )
            .await
            .unwrap()
            .is_empty(),
            "g1 falls due but belongs to the other lane"
        );
        assert!(
            s.next_work_due(&others)
                .await
                .unwrap()
                .next_run_at
                .is_none(),
            "nothing pending of the main lane's kinds"
        );
        let got = s
            .claim_work(
                "any",
                10,
                lease,
                now + chrono::Duration::seconds(60),
                &WorkLane::All,
            )
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].target, "g1");
    }

    /// A coalescing item joins the pending one of its kind and target that
    /// has not run (one row, the earlier due time kept, its id returned);
    /// it never joins a claimed item, one that already ran (a retry keeps
    /// its own attempts), one with a requester, or another target or kind.
    pub async fn coalescing_work_joins_the_pending_item_that_has_not_run(s: Arc<dyn Store>) {
        let now = Utc::now();
        let at = |secs: i64| now + chrono::Duration::seconds(secs);
        let coalescing = |target: &str, secs: i64| NewWork {
            run_at: at(secs),
            coalesce: true,
            ..work("revision.rollout", None, target)
        };
        let first = s.enqueue_work(&[coalescing("r1", 30)]).await.unwrap();
        let joined = s
            .enqueue_work(&[coalescing("r1", 10), coalescing("r1", 60)])
            .await
            .unwrap();
        assert_eq!(joined, [first[0].clone(), first[0].clone()], "joined");
        let pending = |target: &'static str| {
            let s = s.clone();
            async move {
                s.list_work(&WorkFilter {
                    namespace: None,
                    state: Some(WorkState::Pending),
                    limit: 100,
                })
                .await
                .unwrap()
                .into_iter()
                .filter(|i| i.target == target)
                .collect::<Vec<_>>()
            }
        };
        let items = pending("r1").await;
        assert_eq!(items.len(), 1, "one pending item: {items:?}");
        assert_eq!(
            items[0].run_at.timestamp_millis(),
            at(10).timestamp_millis(),
            "the earlier due time"
        );

        // Other kinds and targets, a requester, or no coalescing: their own.
        let other_kind = NewWork {
            coalesce: true,
            ..work("gateway.ensure", None, "r1")
        };
        let requested = NewWork {
            requested_by: Some("tok".into()),
            ..coalescing("r1", 0)
        };
        let plain = NewWork {
            run_at: at(0),
            ..work("revision.rollout", None, "r1")
        };
        let ids = s
            .enqueue_work(&[coalescing("r2", 0), other_kind, requested, plain])
            .await
            .unwrap();
        assert!(!ids.contains(&first[0]), "none joined r1's: {ids:?}");
        assert_eq!(pending("r1").await.len(), 4);

        // Claimed (running): a new pass waits beside it, and the next one
        // joins that.
        let claimed = s
            .claim_work("w", 10, Duration::from_secs(30), at(20), &WorkLane::All)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 5, "all were due by then");
        let beside = s.enqueue_work(&[coalescing("r1", 0)]).await.unwrap();
        assert!(
            claimed.iter().all(|c| c.id != beside[0]),
            "not a claimed one"
        );
        assert_eq!(
            s.enqueue_work(&[coalescing("r1", 5)]).await.unwrap(),
            beside
        );

        // An item that ran and waits for its retry is not joined.
        let retried = claimed.iter().find(|c| c.target == "r2").unwrap();
        assert!(
            s.retry_work("w", &retried.id, at(60), "boom", at(20))
                .await
                .unwrap()
        );
        let after_retry = s.enqueue_work(&[coalescing("r2", 0)]).await.unwrap();
        assert_ne!(after_retry[0], retried.id, "a retry keeps its own attempts");
        assert_eq!(pending("r2").await.len(), 2);
    }

    pub async fn retries_wait_for_run_at_and_keep_the_error(s: Arc<dyn Store>) {
        s.enqueue_work(&[work("k", None, "a")]).await.unwrap();
        let now = Utc::now();
        let item = s
            .claim_work("w", 1, Duration::from_secs(30), now, &WorkLane::All)
            .await
            .unwrap()
            .remove(0);
        let run_at = now + chrono::Duration::seconds(60);
        assert!(
            s.retry_work("w", &item.id, run_at, "boom", now)
                .await
                .unwrap()
        );
        assert!(
            !s.retry_work("w", &item.id, run_at, "boom", now)
                .await
                .unwrap(),
            "not claimed any more"
        );
        let got = s.get_work(&item.id).await.unwrap();
        assert_eq!(got.state, WorkState::Pending);
        assert_eq!(got.last_error.as_deref(), Some("boom"));
        assert!(got.lease_owner.is_none());
        assert!(
            s.claim_work("w", 1, Duration::from_secs(30), now, &WorkLane::All)
                .await
                .unwrap()
                .is_empty()
        );
        let due = s
            .claim_work(
                "w",
                1,
                Duration::from_secs(30),
                run_at + chrono::Duration::seconds(1),
                &WorkLane::All,
            )
            .await
            .unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].attempts, 2);
        // Released at shutdown: pending again and the attempt not counted.
        assert!(s.release_work("w", &item.id, now).await.unwrap());
        let released = s.get_work(&item.id).await.unwrap();
        assert_eq!((released.state, released.attempts), (WorkState::Pending, 1));
        assert!(
            !s.release_work("w", &item.id, now).await.unwrap(),
            "no longer held"
        );
        let due = s
            .claim_work("w", 1, Duration::from_secs(30), now, &WorkLane::All)
            .await
            .unwrap();
        assert_eq!(due[0].attempts, 2);
        assert!(s.fail_work("w", &item.id, "fatal", now).await.unwrap());
        let failed = s.get_work(&item.id).await.unwrap();
        assert_eq!(failed.state, WorkState::Failed);
        assert_eq!(failed.last_error.as_deref(), Some("fatal"));
        assert_eq!(s.work_stats(now).await.unwrap().pending, 0);
    }

    pub async fn work_listing_filters(s: Arc<dyn Store>) {
        let a = namespace(s.as_ref(), "team-a").await;
        let b = namespace(s.as_ref(), "team-b").await;
        s.enqueue_work(&[work("k", Some(&a), "1"), work("k", Some(&b), "2")])
            .await
            .unwrap();
        let only_a = s
            .list_work(&WorkFilter {
                namespace: Some("team-a".into()),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(only_a.len(), 1);
        assert_eq!(only_a[0].target, "1");
        let pending = s
            .list_work(&WorkFilter {
                state: Some(WorkState::Pending),
                limit: 1,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(pending.len(), 1, "limit applies");
        assert!(matches!(
            s.get_work("missing").await,
            Err(StoreError::NotFound { .. })
        ));
    }

    pub async fn audit_lists_newest_first_per_namespace(s: Arc<dyn Store>) {
        for i in 0..5 {
            s.append_audit(&audit("x", Some("team-a"), &i.to_string()))
                .await
                .unwrap();
        }
        s.append_audit(&audit("x", Some("team-b"), "b"))
            .await
            .unwrap();
        let a = s.list_audit(Some("team-a"), 3).await.unwrap();
        let targets: Vec<_> = a.iter().map(|e| e.target.as_str()).collect();
        assert_eq!(targets, ["4", "3", "2"]);
        assert_eq!(s.list_audit(None, 100).await.unwrap().len(), 6);
        assert_eq!(s.list_audit(Some("team-b"), 100).await.unwrap().len(), 1);
    }

    /// Issue 36 part 4: the audit stream's cursors. Eight writers append
    /// while a reader stamps and reads after its cursor, as the stream
    /// does, beside a second stamper (another replica's sequencer); every
    /// event is read exactly once, in strictly increasing
    /// cursor order, and a tenant's read holds only its own.
    pub async fn audit_cursors_pass_every_commit_once_in_order(s: Arc<dyn Store>) {
        const WRITERS: usize = 8;
        const EACH: usize = 40;
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = tokio::spawn({
            let (s, done) = (s.clone(), done.clone());
            async move {
                let (mut cursor, mut seen) = (0i64, Vec::new());
                loop {
                    // Read after the writers are done: one last pass.
                    let last = done.load(std::sync::atomic::Ordering::SeqCst);
                    s.sequence_audit(64).await.unwrap();
                    loop {
                        let page = s.audit_after(cursor, None, 16).await.unwrap();
                        for e in &page {
                            let c = e.cursor.expect("a read event has its cursor");
                            assert!(c > cursor, "cursor {c} after {cursor}");
                            cursor = c;
                            seen.push(e.target.clone());
                        }
                        if page.len() < 16 {
                            break;
                        }
                    }
                    if last && s.sequence_audit(64).await.unwrap().stamped == 0 {
                        let rest = s.audit_after(cursor, None, 1000).await.unwrap();
                        assert!(rest.is_empty(), "unread after the end: {rest:?}");
                        return seen;
                    }
                    tokio::task::yield_now().await;
                }
            }
        });
        // A second stamper, as another hub replica's sequencer is.
        let stamper = tokio::spawn({
            let (s, done) = (s.clone(), done.clone());
            async move {
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    s.sequence_audit(7).await.unwrap();
                    tokio::task::yield_now().await;
                }
            }
        });
        let writers = (0..WRITERS).map(|w| {
            let s = s.clone();
            tokio::spawn(async move {
                for i in 0..EACH {
                    let ns = if w % 2 == 0 { "team-a" } else { "team-b" };
                    s.append_audit(&audit("x", Some(ns), &format!("{w}-{i}")))
                        .await
                        .unwrap();
                }
            })
        });
        for w in futures::future::join_all(writers).await {
            w.unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        stamper.await.unwrap();
        let seen = reader.await.unwrap();
        let unique: std::collections::BTreeSet<_> = seen.iter().cloned().collect();
        assert_eq!(unique.len(), seen.len(), "an event was read twice");
        assert_eq!(seen.len(), WRITERS * EACH, "an event was missed");
        // Cursors are dense from 1, and the head is the newest.
        let all = s.audit_after(0, None, 1000).await.unwrap();
        let cursors: Vec<i64> = all.iter().map(|e| e.cursor.unwrap()).collect();
        assert_eq!(cursors, (1..=(WRITERS * EACH) as i64).collect::<Vec<_>>());
        assert_eq!(s.audit_head().await.unwrap(), (WRITERS * EACH) as i64);
        // A tenant's read: its own, in order, from a cursor on.
        let a = s.audit_after(100, Some("team-a"), 1000).await.unwrap();
        assert!(!a.is_empty());
        assert!(a.iter().all(|e| e.namespace.as_deref() == Some("team-a")));
        assert!(a.windows(2).all(|w| w[0].cursor < w[1].cursor));
        assert!(a[0].cursor.unwrap() > 100);
        // The listing shows the cursors too.
        let newest = s.list_audit(None, 1).await.unwrap();
        assert_eq!(newest[0].cursor, Some((WRITERS * EACH) as i64));
    }

    pub async fn tokens_are_stored_hashed_and_revocable(s: Arc<dyn Store>) {
        namespace(s.as_ref(), "team-a").await;
        let minted = auth::mint_token();
        let created = s
            .create_token(&NewToken {
                name: "ci".into(),
                namespace: Some("team-a".into()),
                role: Role::Deployer,
                hash: minted.hash.clone(),
                expires_at: None,
            })
            .await
            .unwrap();
        assert_eq!(created.namespace.as_deref(), Some("team-a"));
        let found = s
            .find_token(&auth::hash_token(&minted.secret))
            .await
            .unwrap();
        assert_eq!(found, Some(created.clone()));
        assert_eq!(
            s.find_token(&auth::hash_token("cfd_wrong")).await.unwrap(),
            None
        );
        // By name: how a client certificate's CN finds its token.
        assert_eq!(
            s.find_token_by_name("ci").await.unwrap(),
            Some(created.clone())
        );
        assert_eq!(s.find_token_by_name("nobody").await.unwrap(), None);
        assert!(matches!(
            s.create_token(&NewToken {
                name: "ci".into(),
                namespace: None,
                role: Role::InstallationAdmin,
                hash: auth::mint_token().hash,
                expires_at: None,
            })
            .await,
            Err(StoreError::AlreadyExists { .. })
        ));
        assert!(matches!(
            s.create_token(&NewToken {
                name: "other".into(),
                namespace: Some("ghost".into()),
                role: Role::Viewer,
                hash: auth::mint_token().hash,
                expires_at: None,
            })
            .await,
            Err(StoreError::NotFound { .. })
        ));
        s.revoke_token("ci", Utc::now()).await.unwrap();
        assert!(s.get_token(&created.id).await.unwrap().revoked_at.is_some());
        let by_name = s.find_token_by_name("ci").await.unwrap().expect("kept");
        assert!(by_name.revoked_at.is_some());
        assert!(matches!(
            s.revoke_token("ghost", Utc::now()).await,
            Err(StoreError::NotFound { .. })
        ));
    }

    pub async fn fleet_summary_is_scoped(s: Arc<dyn Store>) {
        namespace(s.as_ref(), "team-a").await;
        namespace(s.as_ref(), "team-b").await;
        agent(s.as_ref(), "team-a", "one").await;
        agent(s.as_ref(), "team-a", "two").await;
        agent(s.as_ref(), "team-b", "three").await;
        s.deploy(&revision("team-a", "one", 1, "img:1"), &fx("agent.deploy"))
            .await
            .unwrap();
        let all = s.fleet_summary(None).await.unwrap();
        assert_eq!(
            (all.namespaces, all.agents, all.agents_desired_running),
            (2, 3, 1)
        );
        assert_eq!(all.revisions_by_phase.get("pending"), Some(&1));
        let a = s.fleet_summary(Some("team-a")).await.unwrap();
        assert_eq!(
            (
                a.namespaces,
                a.agents,
                a.agents_desired_running,
                a.agents_stopped
            ),
            (1, 2, 1, 1)
        );
        let b = s.fleet_summary(Some("team-b")).await.unwrap();
        assert_eq!((b.agents, b.agents_desired_running), (1, 0));
        assert!(b.revisions_by_phase.is_empty());
    }

    /// RUNNING is actual state: an Agent deployed with no cluster enrolled
    /// is wanted running (desired) but runs nowhere until a revision of it
    /// is `active`; a stopped Agent runs until its revision leaves `active`.
    pub async fn fleet_summary_separates_desired_from_actual(s: Arc<dyn Store>) {
        use clawfed_hub::model::{RevisionPhase, RevisionProgress};
        namespace(s.as_ref(), "team-a").await;
        namespace(s.as_ref(), "team-b").await;
        agent(s.as_ref(), "team-a", "one").await;
        agent(s.as_ref(), "team-b", "two").await;
        // No cluster is enrolled: the revision is placed nowhere.
        let rev = s
            .deploy(&revision("team-a", "one", 1, "img:1"), &fx("agent.deploy"))
            .await
            .unwrap()
            .revision;
        assert_eq!(rev.resolved_cluster, None);
        let counts = |f: clawfed_hub::model::FleetSummary| {
            (
                f.agents_desired_running,
                f.agents_running,
                f.agents_not_running,
                f.agents_stopped,
            )
        };
        assert_eq!(counts(s.fleet_summary(None).await.unwrap()), (1, 0, 1, 1));
        assert_eq!(
            counts(s.fleet_summary(Some("team-a")).await.unwrap()),
            (1, 0, 1, 0)
        );

        // Placed, applied and Ready: now it runs.
        s.place_revision(&rev.id, "exec-a").await.unwrap();
        let rev = s
            .update_revision(
                &rev.id,
                rev.version,
                RevisionPhase::Active,
                None,
                &RevisionProgress::default(),
            )
            .await
            .unwrap();
        assert!(s.activate_revision("team-a", "one", 1).await.unwrap());
        assert_eq!(counts(s.fleet_summary(None).await.unwrap()), (1, 1, 0, 1));
        assert_eq!(
            counts(s.fleet_summary(Some("team-a")).await.unwrap()),
            (1, 1, 0, 0)
        );
        // Another tenant's running Agent is not counted for team-b.
        assert_eq!(
            counts(s.fleet_summary(Some("team-b")).await.unwrap()),
            (0, 0, 0, 1)
        );

        // Asked to stop, its Harness still runs until the revision leaves
        // `active`, even once the Agent's active pointer is cleared.
        s.set_desired_state("team-a", "one", DesiredState::Stopped, &fx("agent.stop"))
            .await
            .unwrap();
        s.clear_active_revision("team-a", "one").await.unwrap();
        assert_eq!(counts(s.fleet_summary(None).await.unwrap()), (0, 1, 0, 2));
        s.update_revision(
            &rev.id,
            rev.version,
            RevisionPhase::Stopped,
            Some("agent stopped"),
            &RevisionProgress::default(),
        )
        .await
        .unwrap();
        assert_eq!(counts(s.fleet_summary(None).await.unwrap()), (0, 0, 0, 2));
    }

    /// Per in-progress phase, the count of revisions and how long the least
    /// recently updated one has not moved (the `occ_revision_*` staleness
    /// gauge behind the revision-stuck alert); settled phases are left out.
    pub async fn revision_staleness_names_in_progress_phases(s: Arc<dyn Store>) {
        use clawfed_hub::model::{RevisionPhase, RevisionProgress};
        assert!(s.revision_staleness(Utc::now()).await.unwrap().is_empty());
        namespace(s.as_ref(), "team-a").await;
        agent(s.as_ref(), "team-a", "one").await;
        agent(s.as_ref(), "team-a", "two").await;
        agent(s.as_ref(), "team-a", "three").await;
        let deploy = |name: &'static str| {
            let s = s.clone();
            async move {
                s.deploy(&revision("team-a", name, 1, "img:1"), &fx("agent.deploy"))
                    .await
                    .unwrap()
                    .revision
            }
        };
        deploy("one").await;
        let two = deploy("two").await;
        let three = deploy("three").await;
        s.update_revision(
            &two.id,
            two.version,
            RevisionPhase::Preparing,
            None,
            &RevisionProgress::default(),
        )
        .await
        .unwrap();
        s.update_revision(
            &three.id,
            three.version,
            RevisionPhase::Active,
            None,
            &RevisionProgress::default(),
        )
        .await
        .unwrap();
        let later = Utc::now() + chrono::Duration::seconds(600);
        let stale = s.revision_staleness(later).await.unwrap();
        let phases: Vec<(&str, i64)> = stale
            .iter()
            .map(|p| (p.phase.as_str(), p.revisions))
            .collect();
        assert_eq!(phases, [("pending", 1), ("preparing", 1)], "{stale:?}");
        for p in &stale {
            // Updated in the few seconds before `later` was taken, 600 s
            // ahead of now.
            assert!(
                p.oldest_update_age >= Duration::from_secs(600)
                    && p.oldest_update_age <= Duration::from_secs(630),
                "{p:?}"
            );
        }
        // The pending one is the older: it was written before `two` moved.
        assert!(stale[0].oldest_update_age >= stale[1].oldest_update_age);
    }

    pub async fn revision_updates_are_compare_and_swap(s: Arc<dyn Store>) {
        use clawfed_hub::model::{RevisionPhase, RevisionProgress};
        namespace(s.as_ref(), "team-a").await;
        agent(s.as_ref(), "team-a", "one").await;
        let rev = s
            .deploy(&revision("team-a", "one", 1, "img:1"), &fx("agent.deploy"))
            .await
            .unwrap()
            .revision;
        assert_eq!(rev.requested_by.as_deref(), Some("token-1"));
        let v0 = rev.version;
        let progress = RevisionProgress {
            gateway_applied_at: Some(chrono::Utc::now()),
            ..Default::default()
        };
        let saved = s
            .update_revision(&rev.id, v0, RevisionPhase::Preparing, None, &progress)
            .await
            .unwrap();
        assert_eq!(saved.version, v0 + 1);
        assert_eq!(saved.phase, RevisionPhase::Preparing);
        // A pass that read the revision before that save loses, and its
        // stale phase does not land.
        let stale = s
            .update_revision(
                &rev.id,
                v0,
                RevisionPhase::Stopped,
                Some("stale"),
                &progress,
            )
            .await;
        assert!(
            matches!(stale, Err(StoreError::Conflict { .. })),
            "{stale:?}"
        );
        let now = s.get_revision_by_id(&rev.id).await.unwrap();
        assert_eq!((now.phase, now.version), (RevisionPhase::Preparing, v0 + 1));
        let missing = s
            .update_revision(
                "no-such-revision",
                1,
                RevisionPhase::Failed,
                None,
                &progress,
            )
            .await;
        assert!(
            matches!(missing, Err(StoreError::NotFound { .. })),
            "{missing:?}"
        );
        // Placement is recorded once.
        s.place_revision(&rev.id, "exec-a").await.unwrap();
        s.place_revision(&rev.id, "exec-b").await.unwrap();
        assert_eq!(
            s.get_revision_by_id(&rev.id)
                .await
                .unwrap()
                .resolved_cluster
                .as_deref(),
            Some("exec-a")
        );
    }

    /// Issue 31 item 14: a restarted hub takes back its dead incarnation's
    /// claims and Agent-pass leases at once (their holders start with its
    /// instance's prefix), the cut attempt not counted; another instance's
    /// live claims keep their leases.
    pub async fn a_dead_incarnations_claims_are_taken_back_at_once(s: Arc<dyn Store>) {
        namespace(s.as_ref(), "team-a").await;
        agent(s.as_ref(), "team-a", "one").await;
        let agent_id = s.get_agent("team-a", "one").await.unwrap().id;
        s.enqueue_work(&[work("k", None, "mine"), work("k", None, "theirs")])
            .await
            .unwrap();
        let t0 = Utc::now();
        let lease = Duration::from_secs(60);
        let mine = s
            .claim_work("hub-0~old~worker-1", 1, lease, t0, &WorkLane::All)
            .await
            .unwrap();
        let theirs = s
            .claim_work("hub-1~live~worker-1", 1, lease, t0, &WorkLane::All)
            .await
            .unwrap();
        assert_eq!((mine.len(), theirs.len()), (1, 1));
        let until = t0 + chrono::Duration::seconds(60);
        assert!(
            s.begin_agent_pass(&agent_id, "hub-0~old~hub-1", t0, until)
                .await
                .unwrap()
        );
        let reclaimed = s.reclaim_incarnation("hub-0~", t0).await.unwrap();
        assert_eq!((reclaimed.work, reclaimed.passes), (1, 1));
        // Due now, for the new incarnation, the cut attempt not counted.
        let again = s
            .claim_work("hub-0~new~worker-1", 10, lease, t0, &WorkLane::All)
            .await
            .unwrap();
        assert_eq!(again.len(), 1, "only the dead incarnation's item");
        assert_eq!(
            (again[0].id.as_str(), again[0].attempts),
            (mine[0].id.as_str(), 1)
        );
        assert!(
            s.begin_agent_pass(&agent_id, "hub-0~new~hub-1", t0, until)
                .await
                .unwrap()
        );
        // Another instance's claim keeps its lease.
        assert_eq!(s.reclaim_incarnation("hub-9~", t0).await.unwrap().work, 0);
        assert_eq!(
            s.get_work(&theirs[0].id).await.unwrap().state,
            WorkState::Claimed
        );
    }

    pub async fn agent_pass_lease_is_exclusive_until_it_expires(s: Arc<dyn Store>) {
        namespace(s.as_ref(), "team-a").await;
        agent(s.as_ref(), "team-a", "one").await;
        let id = s.get_agent("team-a", "one").await.unwrap().id;
        let t0 = chrono::Utc::now();
        let lease = chrono::Duration::seconds(10);
        assert!(
            s.begin_agent_pass(&id, "hub-a", t0, t0 + lease)
                .await
                .unwrap()
        );
        assert!(
            !s.begin_agent_pass(&id, "hub-b", t0, t0 + lease)
                .await
                .unwrap(),
            "a second holder waits while the lease is live"
        );
        assert!(
            s.begin_agent_pass(&id, "hub-a", t0, t0 + lease)
                .await
                .unwrap(),
            "re-entrant"
        );
        s.end_agent_pass(&id, "hub-b").await.unwrap();
        assert!(
            !s.begin_agent_pass(&id, "hub-b", t0, t0 + lease)
                .await
                .unwrap(),
            "only the holder gives it back"
        );
        s.end_agent_pass(&id, "hub-a").await.unwrap();
        assert!(
            s.begin_agent_pass(&id, "hub-b", t0, t0 + lease)
                .await
                .unwrap()
        );
        // A holder that died: its lease runs out and another takes over.
        let later = t0 + lease + chrono::Duration::seconds(1);
        assert!(
            s.begin_agent_pass(&id, "hub-c", later, later + lease)
                .await
                .unwrap()
        );
        // The lease does not touch the draft's version (user-visible OCC).
        assert_eq!(s.get_agent("team-a", "one").await.unwrap().version, 1);
    }

    pub async fn activation_lands_only_while_the_agent_wants_the_revision(s: Arc<dyn Store>) {
        namespace(s.as_ref(), "team-a").await;
        agent(s.as_ref(), "team-a", "one").await;
        let r1 = s
            .deploy(&revision("team-a", "one", 1, "img:1"), &fx("agent.deploy"))
            .await
            .unwrap()
            .revision;
        assert!(
            s.activate_revision("team-a", "one", r1.number)
                .await
                .unwrap()
        );
        assert_eq!(
            s.get_agent("team-a", "one").await.unwrap().active_revision,
            Some(r1.number)
        );
        s.set_desired_state("team-a", "one", DesiredState::Stopped, &fx("agent.stop"))
            .await
            .unwrap();
        s.clear_active_revision("team-a", "one").await.unwrap();
        // A pass that read "running" before the stop cannot re-activate.
        assert!(
            !s.activate_revision("team-a", "one", r1.number)
                .await
                .unwrap()
        );
        assert_eq!(
            s.get_agent("team-a", "one").await.unwrap().active_revision,
            None
        );
        let r2 = s
            .deploy(&revision("team-a", "one", 1, "img:2"), &fx("agent.deploy"))
            .await
            .unwrap()
            .revision;
        assert!(
            !s.activate_revision("team-a", "one", r1.number)
                .await
                .unwrap(),
            "superseded"
        );
        assert!(
            s.activate_revision("team-a", "one", r2.number)
                .await
                .unwrap()
        );
    }

    /// Issue 13: the hub's side of the applied digest is the latest acked
    /// generation per target, and a resend queues that item again (not
    /// when something newer is queued already).
    pub async fn outbox_acked_latest_and_resend(s: Arc<dyn Store>) {
        use clawfed_hub::store::ClusterRecord;
        let c = s
            .upsert_cluster(&ClusterRecord {
                name: "exec-digest".into(),
                labels: Default::default(),
                capabilities: vec![],
                certificate_serials: vec![],
                connection_state: clawfed_hub::model::ConnectionState::Online,
                last_seen: None,
                version: "test".into(),
            })
            .await
            .unwrap();
        let (a, b) = ("harness/ns-1/a/1", "harness/ns-1/b/1");
        let now = chrono::Utc::now();
        let sa = s
            .outbox_put(&c.id, a, "harness.apply", 1, "{\"v\":1}")
            .await
            .unwrap()
            .unwrap();
        assert!(s.outbox_ack(&c.id, sa, a, 1, now).await.unwrap());
        let sb = s
            .outbox_put(&c.id, b, "harness.apply", 1, "{}")
            .await
            .unwrap()
            .unwrap();
        assert!(
            s.outbox_acked_latest(&c.id).await.unwrap().len() == 1,
            "b is not acked yet"
        );
        assert!(s.outbox_ack(&c.id, sb, b, 1, now).await.unwrap());
        let sa2 = s
            .outbox_put(&c.id, a, "harness.stop", 2, "{\"v\":2}")
            .await
            .unwrap()
            .unwrap();
        // a's newer generation is in flight: the acked one still counts.
        assert_eq!(
            s.outbox_acked_latest(&c.id).await.unwrap(),
            vec![
                (a.to_string(), "harness.apply".to_string(), 1),
                (b.to_string(), "harness.apply".to_string(), 1)
            ]
        );
        // a has a newer item queued: nothing to resend for it.
        let resent = s
            .outbox_resend(&c.id, &[a.to_string(), b.to_string()])
            .await
            .unwrap();
        assert_eq!(resent.len(), 1);
        let pending = s.outbox_pending(&c.id, 0, 10).await.unwrap();
        let got: Vec<_> = pending
            .iter()
            .map(|p| (p.target.as_str(), p.generation, p.sequence))
            .collect();
        assert_eq!(got, vec![(a, 2, sa2), (b, 1, resent[0])]);
        assert!(resent[0] > sa2, "a resend gets a new sequence");
        assert!(s.outbox_ack(&c.id, resent[0], b, 1, now).await.unwrap());
        assert!(s.outbox_ack(&c.id, sa2, a, 2, now).await.unwrap());
        assert_eq!(
            s.outbox_acked_latest(&c.id).await.unwrap(),
            vec![
                (a.to_string(), "harness.stop".to_string(), 2),
                (b.to_string(), "harness.apply".to_string(), 1)
            ]
        );
        // Resending a target never sent does nothing.
        assert!(
            s.outbox_resend(&c.id, &["harness/x/y/1".to_string()])
                .await
                .unwrap()
                .is_empty()
        );
    }

    pub async fn outbox_supersedes_and_reports_keep_the_newest(s: Arc<dyn Store>) {
        use clawfed_hub::store::ClusterRecord;
        let c = s
            .upsert_cluster(&ClusterRecord {
                name: "exec-a".into(),
                labels: Default::default(),
                capabilities: vec![],
                certificate_serials: vec![],
                connection_state: clawfed_hub::model::ConnectionState::Online,
                last_seen: None,
                version: "test".into(),
            })
            .await
            .unwrap();
        let t = "harness/ns-1/one/1";
        let first = s
            .outbox_put(&c.id, t, "harness.apply", 1, "{}")
            .await
            .unwrap();
        assert!(first.is_some());
        assert_eq!(
            s.outbox_put(&c.id, t, "harness.apply", 1, "{}")
                .await
                .unwrap(),
            None,
            "the same generation is queued once"
        );
        let stop = s
            .outbox_put(&c.id, t, "harness.stop", 2, "{}")
            .await
            .unwrap();
        assert!(stop.is_some());
        let pending = s.outbox_pending(&c.id, 0, 10).await.unwrap();
        assert_eq!(pending.len(), 1, "the stop superseded the unacked apply");
        assert_eq!(
            (pending[0].generation, pending[0].kind.as_str()),
            (2, "harness.stop")
        );
        assert_eq!(s.outbox_latest_generation(&c.id, t).await.unwrap(), Some(2));
        let now = chrono::Utc::now();
        s.put_report(&c.id, t, "work-result", 2, &json!({"applied": true}), now)
            .await
            .unwrap();
        s.put_report(&c.id, t, "work-result", 1, &json!({"applied": false}), now)
            .await
            .unwrap();
        let r = s
            .get_report(&c.id, t, "work-result")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.generation, r.body["applied"].clone()),
            (2, json!(true)),
            "older reports never overwrite"
        );
        assert!(s.get_report(&c.id, t, "readiness").await.unwrap().is_none());
    }

    /// Issue 36 part 2: a write carrying a quota check is kept only while
    /// the tenant stays within the limit, counted in the write's own
    /// transaction: eight concurrent creates against a limit of three
    /// leave exactly three, and the refusals name the quota, its limit
    /// and what is in use. Running Agents and revisions an hour likewise;
    /// another tenant is not counted, and a hub's move is not the tenant's.
    pub async fn quotas_hold_under_concurrent_writes(s: Arc<dyn Store>) {
        use clawfed_hub::quota::{QuotaExceeded, QuotaKind};
        use clawfed_hub::store::QuotaCheck;
        namespace(s.as_ref(), "team-a").await;
        namespace(s.as_ref(), "team-b").await;
        agent(s.as_ref(), "team-b", "other").await;
        let within = |kind: QuotaKind, limit: i64| {
            let mut fx = fx("counted");
            fx.quotas.push(QuotaCheck {
                namespace: "team-a".into(),
                kind,
                limit,
            });
            fx
        };
        let creates = (0..8).map(|i| {
            let (s, fx) = (s.clone(), within(QuotaKind::Agents, 3));
            async move {
                let new = NewAgent {
                    namespace: "team-a".into(),
                    name: format!("bot-{i}"),
                    spec: spec("img:1"),
                };
                s.create_agent(&new, &fx).await
            }
        });
        let results = futures::future::join_all(creates).await;
        let kept = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(kept, 3, "{results:?}");
        let want = QuotaExceeded {
            kind: QuotaKind::Agents,
            namespace: "team-a".into(),
            limit: 3,
            used: 3,
        };
        for refused in results.iter().filter_map(|r| r.as_ref().err()) {
            assert!(
                matches!(refused, StoreError::QuotaExceeded(q) if *q == want),
                "{refused}"
            );
        }
        let agents = s.list_agents("team-a").await.unwrap();
        assert_eq!(agents.len(), 3, "the refused creates left nothing");
        let usage = s.quota_usage("team-a", Utc::now()).await.unwrap();
        assert_eq!(usage.agents, 3, "team-b's Agent is not counted");

        // Running Agents: a second deploy of a running Agent adds none.
        let (first, second) = (&agents[0].name, &agents[1].name);
        let running = within(QuotaKind::RunningAgents, 1);
        s.deploy(&revision("team-a", first, 1, "img:1"), &running)
            .await
            .unwrap();
        s.deploy(&revision("team-a", first, 1, "img:2"), &running)
            .await
            .expect("a running Agent's redeploy stays at one running");
        let refused = s
            .deploy(&revision("team-a", second, 1, "img:1"), &running)
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, StoreError::QuotaExceeded(q)
                if q.kind == QuotaKind::RunningAgents && q.limit == 1 && q.used == 1),
            "{refused}"
        );
        let a = s.get_agent("team-a", second).await.unwrap();
        assert_eq!(a.latest_revision, None, "the refused deploy left nothing");
        assert_eq!(a.desired_state, DesiredState::Stopped);

        // Revisions an hour: the two deploys above count, the window is
        // the hour before the write.
        let per_hour = within(QuotaKind::RevisionsPerHour, 3);
        s.deploy(&revision("team-a", first, 1, "img:3"), &per_hour)
            .await
            .unwrap();
        let refused = s
            .deploy(&revision("team-a", first, 1, "img:4"), &per_hour)
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, StoreError::QuotaExceeded(q)
                if q.kind == QuotaKind::RevisionsPerHour && q.used == 3),
            "{refused}"
        );
        let usage = s.quota_usage("team-a", Utc::now()).await.unwrap();
        assert_eq!(usage.revisions_last_hour, 3);
        assert_eq!(usage.running_agents, 1);
        let later = s
            .quota_usage("team-a", Utc::now() + chrono::Duration::minutes(61))
            .await
            .unwrap();
        assert_eq!(later.revisions_last_hour, 0, "an hour later none count");
        assert!(matches!(
            s.quota_usage("ghost", Utc::now()).await,
            Err(StoreError::NotFound { .. })
        ));
    }

    /// Concurrent puts to one cluster (on PostgreSQL through the
    /// `clawfed_outbox_put` function, issue 17): sequences stay dense and
    /// distinct, each (target, generation) is queued once, a newer
    /// generation supersedes the unacked older one, and an unknown cluster
    /// is NotFound.
    pub async fn outbox_concurrent_puts_are_dense_and_once(s: Arc<dyn Store>) {
        use clawfed_hub::store::ClusterRecord;
        let c = s
            .upsert_cluster(&ClusterRecord {
                name: "exec-a".into(),
                labels: Default::default(),
                capabilities: vec![],
                certificate_serials: vec![],
                connection_state: clawfed_hub::model::ConnectionState::Online,
                last_seen: None,
                version: "test".into(),
            })
            .await
            .unwrap();
        // 4 targets x generations 1..=3, each put twice, all at once.
        let mut set = tokio::task::JoinSet::new();
        for round in 0..2 {
            for t in 0..4 {
                for g in 1..=3i64 {
                    let (s, id) = (s.clone(), c.id.clone());
                    set.spawn(async move {
                        let target = format!("harness/ns-1/a{t}/1");
                        let r = s
                            .outbox_put(&id, &target, "harness.apply", g, &format!("{{\"g\":{g}}}"))
                            .await;
                        (round, target, g, r)
                    });
                }
            }
        }
        let mut sequences = Vec::new();
        for (_, _, _, r) in set.join_all().await {
            if let Some(seq) = r.unwrap() {
                sequences.push(seq);
            }
        }
        sequences.sort_unstable();
        let n = sequences.len() as i64;
        assert!(
            n >= 4,
            "every target was queued at least once: {sequences:?}"
        );
        assert_eq!(
            sequences,
            (1..=n).collect::<Vec<_>>(),
            "sequences are dense and distinct"
        );
        // One unacked item per target, each at the newest generation.
        let pending = s.outbox_pending(&c.id, 0, 100).await.unwrap();
        assert_eq!(pending.len(), 4, "{pending:?}");
        for item in &pending {
            assert_eq!(item.generation, 3, "{item:?}");
            assert_eq!(
                s.outbox_latest_generation(&c.id, &item.target)
                    .await
                    .unwrap(),
                Some(3)
            );
        }
        // An older generation after the newest is refused, and so is a
        // repeat of it.
        for g in [2, 3] {
            assert_eq!(
                s.outbox_put(&c.id, "harness/ns-1/a0/1", "harness.apply", g, "{}")
                    .await
                    .unwrap(),
                None
            );
        }
        let next = s
            .outbox_put(&c.id, "harness/ns-1/a0/1", "harness.apply", 4, "{}")
            .await
            .unwrap();
        assert_eq!(next, Some(n + 1), "a refused put leaves no gap");
        assert!(matches!(
            s.outbox_put(
                "no-such-cluster",
                "harness/ns-1/a0/1",
                "harness.apply",
                1,
                "{}"
            )
            .await,
            Err(StoreError::NotFound { .. })
        ));
    }

    /// Issue 9, defect 8: one transport key per installation (first writer
    /// wins, so replicas agree), and per revision only the token's hash.
    pub async fn transport_key_is_shared_and_only_hashes_are_kept(s: Arc<dyn Store>) {
        // Concurrent first uses (several hub replicas) agree on one value.
        let tasks: Vec<_> = (0..6)
            .map(|i| {
                let s = s.clone();
                tokio::spawn(async move { s.hub_secret("k", &format!("candidate-{i}")).await })
            })
            .collect();
        let mut values = HashSet::new();
        for t in tasks {
            values.insert(t.await.unwrap().unwrap());
        }
        assert_eq!(values.len(), 1, "{values:?}");
        let first = values.into_iter().next().unwrap();
        assert_eq!(s.hub_secret("k", "later").await.unwrap(), first);

        namespace(s.as_ref(), "team-a").await;
        agent(s.as_ref(), "team-a", "bot").await;
        let r1 = s
            .deploy(&revision("team-a", "bot", 1, "img:1"), &fx("agent.deploy"))
            .await
            .unwrap()
            .revision;
        // A key an earlier hub stored in plaintext: loading it seals it in
        // place, and the key (so every deployed Gateway's token) stays.
        let secrets = clawfed_hub::secrets::SecretBox::generate().unwrap();
        let legacy: [u8; 32] = rand::random();
        s.hub_secret(transport::KEY_NAME, &hex::encode(legacy))
            .await
            .unwrap();
        let one = TransportCredentials::load(s.clone(), &secrets)
            .await
            .unwrap();
        let other = TransportCredentials::load(s.clone(), &secrets)
            .await
            .unwrap();
        let token = one.for_revision(&r1.id).await.unwrap().gateway_token;
        assert_eq!(
            token,
            transport::TransportKey::from_bytes(&legacy).token(&r1.id),
            "sealing kept the key"
        );
        let stored = s.hub_secret(transport::KEY_NAME, "unused").await.unwrap();
        assert!(
            clawfed_hub::secrets::Sealed::from_token(&stored).is_some()
                && !stored.contains(&hex::encode(legacy)),
            "the store holds the key sealed, never in plaintext: {stored}"
        );
        // Whoever reads the database without the secrets key cannot mint.
        let stranger = clawfed_hub::secrets::SecretBox::generate().unwrap();
        assert!(matches!(
            TransportCredentials::load(s.clone(), &stranger).await,
            Err(transport::TransportKeyError::Secrets(_))
        ));
        assert_eq!(
            other.for_revision(&r1.id).await.unwrap().gateway_token,
            token,
            "another replica derives the same token"
        );
        let hash = transport::token_hash(&token);
        assert_ne!(hash, token);
        assert_eq!(
            s.transport_token_hash(&r1.id).await.unwrap(),
            Some(hash.clone())
        );
        assert_eq!(
            s.revision_by_transport_hash(&hash).await.unwrap(),
            Some(r1.id.clone())
        );
        assert_eq!(s.revision_by_transport_hash(&token).await.unwrap(), None);
        assert!(matches!(
            s.set_transport_token_hash("no-such-revision", "h").await,
            Err(StoreError::NotFound { .. })
        ));
        // The hash goes with its revision.
        s.set_desired_state("team-a", "bot", DesiredState::Stopped, &fx("agent.stop"))
            .await
            .unwrap();
        s.delete_agent("team-a", "bot", &fx("agent.delete"))
            .await
            .unwrap();
        assert_eq!(s.revision_by_transport_hash(&hash).await.unwrap(), None);
    }

    /// Issue 31 item 2: a reader pages revocations by their sequence. A
    /// revocation stamped by a clock an hour behind (or committed long
    /// after its stamp) comes after everything read before it.
    pub async fn revocations_are_paged_by_commit_sequence_not_by_clock(s: Arc<dyn Store>) {
        let fx = || Effects::audit(audit("cluster.revoke", None, "clusters/x"));
        let before = s.revoked_after(0).await.unwrap();
        let seen = before.iter().map(|r| r.sequence).max().unwrap_or(0);
        let a = online_cluster(s.as_ref(), "exec-rev-a").await;
        let b = online_cluster(s.as_ref(), "exec-rev-b").await;
        let now = Utc::now();
        let later = now + chrono::Duration::days(30);
        s.add_certificate(&a, "serial-a", later, now).await.unwrap();
        s.add_certificate(&b, "serial-b", later, now).await.unwrap();
        s.revoke_cluster("exec-rev-a", now, &fx()).await.unwrap();
        let first = s.revoked_after(seen).await.unwrap();
        assert_eq!(
            first.iter().map(|r| r.serial.as_str()).collect::<Vec<_>>(),
            ["serial-a"]
        );
        let cursor = first[0].sequence;
        // The revoker's clock is an hour behind this reader's.
        s.revoke_cluster("exec-rev-b", now - chrono::Duration::hours(1), &fx())
            .await
            .unwrap();
        let next = s.revoked_after(cursor).await.unwrap();
        assert_eq!(
            next.iter().map(|r| r.serial.as_str()).collect::<Vec<_>>(),
            ["serial-b"],
            "a revocation stamped an hour earlier still comes after the cursor"
        );
        assert!(next[0].sequence > cursor);
        assert!(s.revoked_after(next[0].sequence).await.unwrap().is_empty());
        // Revoking again keeps the first sequence (nothing new to page).
        s.revoke_cluster("exec-rev-b", now, &fx()).await.unwrap();
        assert!(s.revoked_after(next[0].sequence).await.unwrap().is_empty());
    }

    /// Online cluster `name` for the session cases.
    async fn online_cluster(s: &dyn Store, name: &str) -> String {
        s.upsert_cluster(&ClusterRecord {
            name: name.into(),
            labels: Default::default(),
            capabilities: vec![],
            certificate_serials: vec![],
            connection_state: ConnectionState::Online,
            last_seen: Some(Utc::now()),
            version: "test".into(),
        })
        .await
        .unwrap()
        .id
    }

    /// `cluster.offline` events of `name` after `cursor`.
    async fn offline_events(s: &dyn Store, name: &str, cursor: i64) -> usize {
        s.events_after(cursor, 1000)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.cluster.as_deref() == Some(name) && e.body.kind() == "cluster.offline")
            .count()
    }

    /// Hub replicas: every new session bumps the cluster's epoch, the
    /// owner's renewal shows what it lost, and only the newest epoch may
    /// mark the cluster offline.
    pub async fn session_epochs_fence_offline_marking(s: Arc<dyn Store>) {
        let c = online_cluster(s.as_ref(), "exec-fenced").await;
        let lease = Utc::now() + chrono::Duration::seconds(30);
        let e1 = s.session_claim(&c, "replica-a", lease).await.unwrap();
        assert_eq!(
            s.session_renew("replica-a", lease).await.unwrap(),
            [(c.clone(), e1)]
        );
        // The spoke moved to B: A's renewal no longer holds it.
        let e2 = s.session_claim(&c, "replica-b", lease).await.unwrap();
        assert!(e2 > e1, "epochs grow: {e1} then {e2}");
        assert!(
            s.session_renew("replica-a", lease)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            s.session_renew("replica-b", lease).await.unwrap(),
            [(c.clone(), e2)]
        );
        let session = s.get_session(&c).await.unwrap().expect("recorded");
        assert_eq!(
            (session.replica_id.as_str(), session.epoch),
            ("replica-b", e2)
        );

        // A's old session ends: nothing changes.
        let cursor = s.event_bounds().await.unwrap().head;
        assert!(!s.session_end_offline(&c, e1, Utc::now()).await.unwrap());
        let cluster = s.get_cluster("exec-fenced").await.unwrap();
        assert_eq!(cluster.connection_state, ConnectionState::Online);
        assert_eq!(offline_events(s.as_ref(), "exec-fenced", cursor).await, 0);

        // B's (the newest) ends: offline, once.
        let seen = Utc::now() - chrono::Duration::seconds(1);
        assert!(s.session_end_offline(&c, e2, seen).await.unwrap());
        let cluster = s.get_cluster("exec-fenced").await.unwrap();
        assert_eq!(cluster.connection_state, ConnectionState::Offline);
        assert_eq!(
            cluster.last_seen.map(|t| t.timestamp_millis()),
            Some(seen.timestamp_millis())
        );
        assert_eq!(offline_events(s.as_ref(), "exec-fenced", cursor).await, 1);
        // Ended: no longer renewed, and never ended twice.
        assert!(
            s.session_renew("replica-b", lease)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(s.get_session(&c).await.unwrap().unwrap().lease_expires_at < Utc::now());

        // The epoch survives the end of a session.
        let e3 = s.session_claim(&c, "replica-a", lease).await.unwrap();
        assert!(e3 > e2, "epochs grow after an end: {e2} then {e3}");
        // A renewal by a replica with no sessions touches nothing.
        assert!(
            s.session_renew("replica-c", lease)
                .await
                .unwrap()
                .is_empty()
        );
    }

    /// Hub replicas: clusters whose lease lapsed (their replica died) or
    /// that have no session go offline; those another replica holds stay;
    /// replicas sweeping at once mark each cluster (and write its event)
    /// once.
    pub async fn lapsed_session_leases_go_offline_once(s: Arc<dyn Store>) {
        let held = online_cluster(s.as_ref(), "exec-held").await;
        let lapsed = online_cluster(s.as_ref(), "exec-lapsed").await;
        let orphan = online_cluster(s.as_ref(), "exec-orphan").await;
        let now = Utc::now();
        s.session_claim(&held, "alive", now + chrono::Duration::seconds(30))
            .await
            .unwrap();
        s.session_claim(&lapsed, "dead", now - chrono::Duration::seconds(1))
            .await
            .unwrap();
        let cursor = s.event_bounds().await.unwrap().head;
        // The periodic sweep: lapsed leases only.
        assert_eq!(
            s.offline_where_lease_expired(now, false).await.unwrap(),
            std::slice::from_ref(&lapsed)
        );
        s.set_connection_state(&lapsed, ConnectionState::Online, now, None)
            .await
            .unwrap();
        // A replica's start-up: also clusters with no session recorded.
        let mut marked = s.offline_where_lease_expired(now, true).await.unwrap();
        marked.sort();
        let mut expected = vec![lapsed.clone(), orphan.clone()];
        expected.sort();
        assert_eq!(marked, expected);
        let state = |name: &'static str| {
            let s = s.clone();
            async move { s.get_cluster(name).await.unwrap().connection_state }
        };
        assert_eq!(state("exec-held").await, ConnectionState::Online);
        assert_eq!(state("exec-lapsed").await, ConnectionState::Offline);
        assert_eq!(state("exec-orphan").await, ConnectionState::Offline);
        assert!(
            s.offline_where_lease_expired(now, true)
                .await
                .unwrap()
                .is_empty()
        );

        // Online again with a lapsed lease; several replicas sweep at once.
        s.set_connection_state(&lapsed, ConnectionState::Online, now, None)
            .await
            .unwrap();
        let cursor2 = s.event_bounds().await.unwrap().head;
        let sweeps = (0..4).map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                s.offline_where_lease_expired(Utc::now(), false)
                    .await
                    .unwrap()
            })
        });
        let mut total = 0;
        for sweep in sweeps.collect::<Vec<_>>() {
            total += sweep.await.unwrap().len();
        }
        assert_eq!(total, 1, "one sweep marks it");
        assert_eq!(offline_events(s.as_ref(), "exec-lapsed", cursor2).await, 1);
        assert_eq!(offline_events(s.as_ref(), "exec-held", cursor).await, 0);
    }

    /// Issue 14, part 4: replicas publish their address and load (an
    /// upsert); the live ones are listed, dead ones forgotten, one that
    /// shuts down removes itself.
    pub async fn replicas_publish_their_address_and_load(s: Arc<dyn Store>) {
        use clawfed_hub::store::ReplicaRecord;
        let now = Utc::now();
        let record = |id: &str, sessions, at| ReplicaRecord {
            replica_id: id.into(),
            advertise_url: format!("https://{id}:8443"),
            sessions,
            heartbeat_at: at,
            tunnel_url: (id == "a").then(|| format!("https://{id}:8444")),
        };
        let old = now - chrono::Duration::seconds(60);
        s.replica_heartbeat(&record("a", 5, now)).await.unwrap();
        s.replica_heartbeat(&record("b", 1, now)).await.unwrap();
        s.replica_heartbeat(&record("dead", 9, old)).await.unwrap();
        // A newer heartbeat replaces the older one.
        s.replica_heartbeat(&record("b", 2, now)).await.unwrap();
        let since = now - chrono::Duration::seconds(15);
        let live = s.replicas_live(since).await.unwrap();
        let ms = |t: chrono::DateTime<Utc>| t.timestamp_millis();
        assert_eq!(
            live.iter()
                .map(|r| (
                    r.replica_id.as_str(),
                    r.advertise_url.as_str(),
                    r.sessions,
                    ms(r.heartbeat_at)
                ))
                .collect::<Vec<_>>(),
            [
                ("a", "https://a:8443", 5, ms(now)),
                ("b", "https://b:8443", 2, ms(now)),
            ]
        );
        assert_eq!(
            live.iter()
                .map(|r| r.tunnel_url.as_deref())
                .collect::<Vec<_>>(),
            [Some("https://a:8444"), None]
        );
        // The dead one's row is gone, even for a wider look back.
        let all = s
            .replicas_live(old - chrono::Duration::seconds(1))
            .await
            .unwrap();
        assert_eq!(all.len(), 2, "{all:?}");
        s.replica_remove("a").await.unwrap();
        let live = s.replicas_live(since).await.unwrap();
        assert_eq!(
            live.iter()
                .map(|r| r.replica_id.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
    }

    /// Issue 31 item 1: the replica to forward a cluster's CONNECT to is
    /// the one whose session lease is live, when it publishes an ingress
    /// and is not the asking replica.
    pub async fn the_session_holders_tunnel_is_found_while_its_lease_lives(s: Arc<dyn Store>) {
        use clawfed_hub::store::ReplicaRecord;
        let now = Utc::now();
        let c = online_cluster(s.as_ref(), "exec-held").await;
        let publish = |id: &str, tunnel: Option<&str>| ReplicaRecord {
            replica_id: id.into(),
            advertise_url: String::new(),
            sessions: 1,
            heartbeat_at: now,
            tunnel_url: tunnel.map(str::to_owned),
        };
        s.replica_heartbeat(&publish("a", Some("https://198.18.0.7:8444")))
            .await
            .unwrap();
        s.replica_heartbeat(&publish("b", None)).await.unwrap();
        let lease = now + chrono::Duration::seconds(30);
        s.session_claim(&c, "a", lease).await.unwrap();
        assert_eq!(
            s.session_holder_tunnel(&c, "b", now).await.unwrap(),
            Some(("a".to_owned(), "https://198.18.0.7:8444".to_owned()))
        );
        // The holder itself, a lapsed lease, an unknown cluster: nobody.
        assert_eq!(s.session_holder_tunnel(&c, "a", now).await.unwrap(), None);
        let later = lease + chrono::Duration::seconds(1);
        assert_eq!(s.session_holder_tunnel(&c, "b", later).await.unwrap(), None);
        assert_eq!(
            s.session_holder_tunnel("nope", "b", now).await.unwrap(),
            None
        );
        // A holder that runs no ingress cannot be forwarded to.
        s.session_claim(&c, "b", lease).await.unwrap();
        assert_eq!(s.session_holder_tunnel(&c, "a", now).await.unwrap(), None);
    }

    /// Issue 14: after its renewals stalled past the lease, a replica
    /// restores exactly the sessions it still holds: their clusters, swept
    /// offline meanwhile, are online again with one event each and a fresh
    /// lease; a superseded session and another replica's are left alone.
    pub async fn a_stalled_replica_restores_only_the_sessions_it_holds(s: Arc<dyn Store>) {
        let now = Utc::now();
        let past = now - chrono::Duration::seconds(1);
        let fresh = now + chrono::Duration::seconds(30);
        let mine = online_cluster(s.as_ref(), "exec-stalled").await;
        let moved = online_cluster(s.as_ref(), "exec-stalled-moved").await;
        let other = online_cluster(s.as_ref(), "exec-stalled-other").await;
        let e_mine = s.session_claim(&mine, "replica-a", past).await.unwrap();
        let e_moved_old = s.session_claim(&moved, "replica-a", past).await.unwrap();
        let e_moved = s.session_claim(&moved, "replica-b", past).await.unwrap();
        assert!(e_moved > e_moved_old);
        let e_other = s.session_claim(&other, "replica-c", past).await.unwrap();
        let mut swept = s.offline_where_lease_expired(now, false).await.unwrap();
        swept.sort();
        let mut want = vec![mine.clone(), moved.clone(), other.clone()];
        want.sort();
        assert_eq!(swept, want);
        let cursor = s.event_bounds().await.unwrap().head;
        // Replica A names what its registry holds: its live session and
        // the old epoch of the moved one; C's session is not A's.
        let restored = s
            .session_restore_online(
                "replica-a",
                &[
                    (mine.clone(), e_mine),
                    (moved.clone(), e_moved_old),
                    (other.clone(), e_other),
                ],
                fresh,
            )
            .await
            .unwrap();
        assert_eq!(restored, std::slice::from_ref(&mine));
        let state = |name: &'static str| {
            let s = s.clone();
            async move { s.get_cluster(name).await.unwrap().connection_state }
        };
        assert_eq!(state("exec-stalled").await, ConnectionState::Online);
        assert_eq!(state("exec-stalled-moved").await, ConnectionState::Offline);
        assert_eq!(state("exec-stalled-other").await, ConnectionState::Offline);
        let session = s.get_session(&mine).await.unwrap().unwrap();
        assert_eq!(
            session.lease_expires_at.timestamp_millis(),
            fresh.timestamp_millis()
        );
        // Not swept again: the lease is fresh.
        assert!(
            !s.offline_where_lease_expired(Utc::now(), false)
                .await
                .unwrap()
                .contains(&mine)
        );
        let connected = s
            .events_after(cursor, 1000)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.cluster.as_deref() == Some("exec-stalled"))
            .map(|e| e.body.kind().to_owned())
            .collect::<Vec<_>>();
        assert_eq!(connected, ["cluster.connected"]);
        // Restoring again changes nothing and writes no event.
        assert!(
            s.session_restore_online("replica-a", &[(mine.clone(), e_mine)], fresh)
                .await
                .unwrap()
                .is_empty()
        );
        // An ended session is not restored.
        assert!(s.session_end_offline(&mine, e_mine, now).await.unwrap());
        assert!(
            s.session_restore_online("replica-a", &[(mine.clone(), e_mine)], fresh)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(state("exec-stalled").await, ConnectionState::Offline);
    }

    /// Issue 14, part 4: a session moved to another replica is handed
    /// off: its lease covers the move and no replica renews it; the
    /// spoke's new session takes over; one that never arrives is swept
    /// offline when the lease lapses. Only the newest live session.
    pub async fn a_handed_off_session_covers_the_move_then_lapses(s: Arc<dyn Store>) {
        let c = online_cluster(s.as_ref(), "exec-moved").await;
        let now = Utc::now();
        let lease = now + chrono::Duration::seconds(30);
        let e1 = s.session_claim(&c, "replica-a", lease).await.unwrap();
        let cover = now + chrono::Duration::seconds(5);
        assert!(s.session_hand_off(&c, e1, cover).await.unwrap());
        // No replica renews it any more.
        assert!(
            s.session_renew("replica-a", lease)
                .await
                .unwrap()
                .is_empty()
        );
        let session = s.get_session(&c).await.unwrap().unwrap();
        assert_eq!(session.epoch, e1);
        assert_eq!(
            session.lease_expires_at.timestamp_millis(),
            cover.timestamp_millis()
        );
        // Within the cover: not swept.
        assert!(
            s.offline_where_lease_expired(now, false)
                .await
                .unwrap()
                .is_empty()
        );
        // The spoke arrives at B: a new epoch B renews.
        let e2 = s.session_claim(&c, "replica-b", lease).await.unwrap();
        assert!(e2 > e1);
        assert_eq!(
            s.session_renew("replica-b", lease).await.unwrap(),
            [(c.clone(), e2)]
        );
        // A stale hand-off (the old epoch) changes nothing.
        assert!(!s.session_hand_off(&c, e1, cover).await.unwrap());
        assert_eq!(
            s.get_session(&c).await.unwrap().unwrap().replica_id,
            "replica-b"
        );

        // Moved again, and this time the spoke never arrives.
        assert!(s.session_hand_off(&c, e2, cover).await.unwrap());
        let after = cover + chrono::Duration::milliseconds(1);
        assert_eq!(
            s.offline_where_lease_expired(after, false).await.unwrap(),
            std::slice::from_ref(&c)
        );
        assert_eq!(
            s.get_cluster("exec-moved").await.unwrap().connection_state,
            ConnectionState::Offline
        );
        // An ended session is never handed off.
        assert!(s.session_end_offline(&c, e2, now).await.unwrap());
        assert!(!s.session_hand_off(&c, e2, cover).await.unwrap());
    }
}

/// Cases that need the raw database as well as the store.
mod raw_cases {
    use super::*;
    use clawfed_hub::secrets::{SecretBox, SecretValue, SecretsError};
    use clawfed_proto::work::credential::CredentialKind;
    use clawfed_tests::db::TestDb;

    /// Issue 12 item 1: credentials are stored sealed only (no table holds
    /// a plaintext), set/replace/delete bump and drop them, a deploy
    /// freezes the current one into the revision (a later set does not
    /// change it; the next deploy, a rollback too, carries the new one),
    /// and a ciphertext opens for its own Agent, kind and key only.
    pub async fn credentials_are_sealed_snapshotted_and_bound_to_their_agent(db: &TestDb) {
        let s = db.dyn_store();
        let sb = SecretBox::generate().unwrap();
        let kind = CredentialKind::ModelApiKey;
        namespace(s.as_ref(), "team-a").await;
        agent(s.as_ref(), "team-a", "bot").await;
        agent(s.as_ref(), "team-a", "other").await;
        let bot = s.get_agent("team-a", "bot").await.unwrap();
        let other = s.get_agent("team-a", "other").await.unwrap();
        let v1 = SecretValue::new(format!("sk-one-{}", uuid::Uuid::new_v4().simple()));
        let v2 = SecretValue::new(format!("sk-two-{}", uuid::Uuid::new_v4().simple()));

        let sealed1 = sb.seal_credential(&bot.id, kind, &v1).unwrap();
        let m1 = s
            .set_agent_credential(&bot.id, kind, &sealed1, &fx("agent.credential.set"))
            .await
            .unwrap();
        assert_eq!((m1.kind.as_str(), m1.version), ("model-api-key", 1));
        let r1 = s
            .deploy(&revision("team-a", "bot", 1, "img:1"), &fx("agent.deploy"))
            .await
            .unwrap()
            .revision;

        // Replace: the version goes up; revision 1 keeps what it froze.
        let sealed2 = sb.seal_credential(&bot.id, kind, &v2).unwrap();
        let m2 = s
            .set_agent_credential(&bot.id, kind, &sealed2, &fx("agent.credential.set"))
            .await
            .unwrap();
        assert_eq!(m2.version, 2);
        let frozen = s.revision_credentials(&r1.id).await.unwrap();
        assert_eq!(frozen.len(), 1);
        assert_eq!(frozen[0].version, 1);
        assert_eq!(
            sb.open_credential(&bot.id, kind, &frozen[0].sealed)
                .unwrap(),
            v1
        );
        let current = s.list_agent_credentials(&bot.id).await.unwrap();
        assert_eq!(current.len(), 1);
        assert_eq!(current[0].meta(), m2);
        assert_eq!(
            sb.open_credential(&bot.id, kind, &current[0].sealed)
                .unwrap(),
            v2
        );

        // The next deploy (here a rollback to revision 1) carries the
        // current value, not revision 1's.
        let mut rollback = revision("team-a", "bot", 1, "img:1");
        rollback.rolled_back_from = Some(1);
        let r2 = s
            .deploy(&rollback, &fx("agent.rollback"))
            .await
            .unwrap()
            .revision;
        let frozen2 = s.revision_credentials(&r2.id).await.unwrap();
        assert_eq!(frozen2.len(), 1);
        assert_eq!(frozen2[0].version, 2);
        assert_eq!(
            sb.open_credential(&bot.id, kind, &frozen2[0].sealed)
                .unwrap(),
            v2
        );
        assert!(
            s.list_agent_credentials(&other.id)
                .await
                .unwrap()
                .is_empty(),
            "another Agent has none"
        );

        // Nothing in the database holds a plaintext (nor its hex).
        let raw = clawfed_tests::db::all_text(db).await;
        assert!(
            raw.contains(&sealed2.ciphertext),
            "the dump covers the credential tables"
        );
        for v in [&v1, &v2] {
            assert!(!raw.contains(v.expose()), "plaintext in the database");
            assert!(
                !raw.contains(&hex_of(v.expose())),
                "hex plaintext in the database"
            );
        }

        // A ciphertext moved to another Agent or kind does not open; a
        // wrong key is a clear error, not garbage.
        s.set_agent_credential(&other.id, kind, &sealed2, &fx("agent.credential.set"))
            .await
            .unwrap();
        let moved = s.list_agent_credentials(&other.id).await.unwrap();
        let err = sb
            .open_credential(&other.id, kind, &moved[0].sealed)
            .unwrap_err();
        assert!(matches!(err, SecretsError::Rejected { .. }), "{err:?}");
        let err = sb
            .open_credential(&bot.id, CredentialKind::ServiceAccount, &sealed2)
            .unwrap_err();
        assert!(matches!(err, SecretsError::Rejected { .. }), "{err:?}");
        let err = SecretBox::generate()
            .unwrap()
            .open_credential(&bot.id, kind, &current[0].sealed)
            .unwrap_err();
        assert!(matches!(err, SecretsError::WrongKey { .. }), "{err:?}");
        assert!(err.to_string().contains(sb.key_id()), "{err}");

        // Delete: gone from the Agent, kept by the revisions.
        s.delete_agent_credential(&bot.id, kind, &fx("agent.credential.delete"))
            .await
            .unwrap();
        assert!(s.list_agent_credentials(&bot.id).await.unwrap().is_empty());
        assert!(matches!(
            s.delete_agent_credential(&bot.id, kind, &fx("agent.credential.delete"))
                .await,
            Err(StoreError::NotFound { .. })
        ));
        assert_eq!(s.revision_credentials(&r2.id).await.unwrap().len(), 1);
        assert!(matches!(
            s.set_agent_credential("no-such-agent", kind, &sealed1, &fx("x"))
                .await,
            Err(StoreError::NotFound { .. })
        ));

        // They go with their Agent.
        s.set_desired_state("team-a", "bot", DesiredState::Stopped, &fx("agent.stop"))
            .await
            .unwrap();
        s.delete_agent("team-a", "bot", &fx("agent.delete"))
            .await
            .unwrap();
        assert!(s.revision_credentials(&r1.id).await.unwrap().is_empty());
        assert!(s.list_agent_credentials(&bot.id).await.unwrap().is_empty());
    }
    /// Issue 17 (link writes on PostgreSQL): puts, acks and reports that
    /// arrive together commit in groups (on PostgreSQL one set-based
    /// statement per group) with the outcome of some one-by-one order:
    /// every item gets a distinct dense sequence, an ack acks its item once
    /// (a duplicate says it was acked already), a newer put racing an ack
    /// of the older item either finds it acked and keeps it, or supersedes
    /// it and the ack reports nothing done, and the report that stands is
    /// the newest generation's.
    pub async fn link_writes_commit_in_groups_like_one_by_one(db: &TestDb) {
        use clawfed_hub::store::ClusterRecord;
        let s = db.dyn_store();
        let mut ids = Vec::new();
        for name in ["exec-a", "exec-b"] {
            let c = s
                .upsert_cluster(&ClusterRecord {
                    name: name.into(),
                    labels: Default::default(),
                    capabilities: vec![],
                    certificate_serials: vec![],
                    connection_state: clawfed_hub::model::ConnectionState::Online,
                    last_seen: None,
                    version: "test".into(),
                })
                .await
                .unwrap();
            ids.push(c.id);
        }
        let before = db.store.link_group_stats();
        // 2 clusters x 40 targets at generation 1, all at once.
        let mut puts = tokio::task::JoinSet::new();
        for id in &ids {
            for t in 0..40 {
                let (s, id) = (s.clone(), id.clone());
                puts.spawn(async move {
                    let target = format!("harness/ns-1/a{t}/1");
                    let seq = s
                        .outbox_put(&id, &target, "harness.apply", 1, "{\"g\":1}")
                        .await
                        .unwrap()
                        .expect("a first put queues");
                    (id, target, seq)
                });
            }
        }
        let items = puts.join_all().await;
        for id in &ids {
            let mut seqs: Vec<i64> = items
                .iter()
                .filter(|(c, _, _)| c == id)
                .map(|(_, _, q)| *q)
                .collect();
            seqs.sort_unstable();
            assert_eq!(seqs, (1..=40).collect::<Vec<_>>(), "dense per cluster");
        }
        // Then at once: every item acked twice, generation 2 put for the
        // even targets, reports of generations 1, 3 and 2 per target.
        let now = chrono::Utc::now();
        let mut acks = tokio::task::JoinSet::new();
        let mut puts2 = tokio::task::JoinSet::new();
        let mut reports = tokio::task::JoinSet::new();
        for (id, target, seq) in &items {
            // Targets a0, a2, ... of each cluster get generation 2.
            let t: u32 = target
                .trim_start_matches("harness/ns-1/a")
                .trim_end_matches("/1")
                .parse()
                .unwrap();
            for _ in 0..2 {
                let (s, id, target, seq) = (s.clone(), id.clone(), target.clone(), *seq);
                acks.spawn(async move {
                    let acked = s.outbox_ack(&id, seq, &target, 1, now).await.unwrap();
                    ((id, target), acked)
                });
            }
            if t.is_multiple_of(2) {
                let (s, id, target) = (s.clone(), id.clone(), target.clone());
                puts2.spawn(async move {
                    let seq = s
                        .outbox_put(&id, &target, "harness.stop", 2, "{\"g\":2}")
                        .await
                        .unwrap();
                    ((id, target), seq)
                });
            }
            for g in [1, 3, 2] {
                let (s, id, target) = (s.clone(), id.clone(), target.clone());
                reports.spawn(async move {
                    s.put_report(&id, &target, "work-result", g, &json!({"g": g}), now)
                        .await
                        .unwrap();
                });
            }
        }
        let mut acked: std::collections::HashMap<(String, String), u32> =
            std::collections::HashMap::new();
        for (key, ok) in acks.join_all().await {
            *acked.entry(key).or_default() += u32::from(ok);
        }
        let superseding: std::collections::HashMap<(String, String), Option<i64>> =
            puts2.join_all().await.into_iter().collect();
        reports.join_all().await;
        for id in &ids {
            let mut seqs: Vec<i64> = superseding
                .iter()
                .filter(|((c, _), _)| c == id)
                .map(|(_, q)| q.expect("generation 2 is newer"))
                .collect();
            seqs.sort_unstable();
            assert_eq!(
                seqs,
                (41..=60).collect::<Vec<_>>(),
                "dense after the first 40"
            );
        }
        let pending = s.outbox_pending(&ids[0], 0, 1000).await.unwrap();
        let mut pending_b = s.outbox_pending(&ids[1], 0, 1000).await.unwrap();
        let mut pending_all = pending;
        pending_all.append(&mut pending_b);
        for (id, target, _) in &items {
            let key = (id.clone(), target.clone());
            let n = acked.get(&key).copied().unwrap_or(0);
            let queued: Vec<_> = pending_all
                .iter()
                .filter(|p| p.cluster_id == *id && p.target == *target)
                .collect();
            let acked_latest = s.outbox_acked_latest(id).await.unwrap();
            let acked_gen1 = acked_latest.iter().any(|(t, _, g)| t == target && *g == 1);
            if superseding.contains_key(&key) {
                // Generation 2 is queued, once; the first item was either
                // acked before it (acked once, kept) or superseded (never
                // acked).
                assert_eq!(queued.len(), 1, "{target}: {queued:?}");
                assert_eq!(queued[0].generation, 2);
                assert!(n <= 1, "{target} acked {n} times");
                assert_eq!(
                    n == 1,
                    acked_gen1,
                    "{target}: an ack said done iff it stands"
                );
            } else {
                assert_eq!(n, 1, "{target}: exactly one of the two acks acked");
                assert!(queued.is_empty(), "{target}: {queued:?}");
                assert!(acked_gen1, "{target}");
            }
            let r = s
                .get_report(id, target, "work-result")
                .await
                .unwrap()
                .unwrap();
            assert_eq!((r.generation, r.body["g"].clone()), (3, json!(3)));
        }
        // They were grouped: fewer commits than writes.
        let after = db.store.link_group_stats();
        let (groups, writes) = (after.groups - before.groups, after.writes - before.writes);
        assert_eq!(writes, 80 + 160 + 40 + 240, "every write in a whole group");
        assert!(
            groups < writes / 2,
            "{groups} groups for {writes} concurrent writes"
        );
    }

    /// Issue 17 (a group in one round trip on PostgreSQL, set-based on
    /// SQLite): puts to a cluster that does not exist fail alone with
    /// NotFound inside a group, without splitting it; the others get dense
    /// sequences. On PostgreSQL the outbox NOTIFY (now one per cluster per
    /// statement) still names every cluster whose outbox grew, and no
    /// other.
    pub async fn link_group_fails_unknown_cluster_puts_alone_and_notifies(db: &TestDb) {
        use clawfed_hub::store::ClusterRecord;
        use sqlx::Row;
        let s = db.dyn_store();
        let postgres = db.url.starts_with("postgres");
        let mut listener = if postgres {
            let mut l = sqlx::postgres::PgListener::connect(&db.url).await.unwrap();
            l.listen("clawfed_outbox").await.unwrap();
            Some(l)
        } else {
            None
        };
        let mut ids = Vec::new();
        for name in ["exec-a", "exec-b"] {
            let c = s
                .upsert_cluster(&ClusterRecord {
                    name: name.into(),
                    labels: Default::default(),
                    capabilities: vec![],
                    certificate_serials: vec![],
                    connection_state: clawfed_hub::model::ConnectionState::Online,
                    last_seen: None,
                    version: "test".into(),
                })
                .await
                .unwrap();
            ids.push(c.id);
        }
        let before = db.store.link_group_stats();
        let mut puts = tokio::task::JoinSet::new();
        for t in 0..40 {
            for cluster in ids
                .iter()
                .cloned()
                .chain((t % 8 == 0).then(|| "no-such-cluster".to_owned()))
            {
                let s = s.clone();
                puts.spawn(async move {
                    let put = s
                        .outbox_put(
                            &cluster,
                            &format!("harness/ns/a{t}/1"),
                            "harness.apply",
                            1,
                            "{}",
                        )
                        .await;
                    (cluster, put)
                });
            }
        }
        let mut dense: std::collections::HashMap<String, Vec<i64>> = Default::default();
        for (cluster, put) in puts.join_all().await {
            if cluster == "no-such-cluster" {
                assert!(
                    matches!(put, Err(StoreError::NotFound { .. })),
                    "a put to an unknown cluster: {put:?}"
                );
            } else {
                dense
                    .entry(cluster)
                    .or_default()
                    .push(put.unwrap().expect("a first put queues"));
            }
        }
        for id in &ids {
            let seqs = dense.get_mut(id).unwrap();
            seqs.sort_unstable();
            assert_eq!(*seqs, (1..=40).collect::<Vec<_>>(), "dense per cluster");
        }
        let after = db.store.link_group_stats();
        let (groups, writes) = (after.groups - before.groups, after.writes - before.writes);
        assert_eq!(
            writes, 85,
            "no group split (the unknown cluster failed alone)"
        );
        assert!(
            groups < writes / 2,
            "{groups} groups for {writes} concurrent writes"
        );
        let Some(listener) = listener.as_mut() else {
            return;
        };
        let schema: String = sqlx::query("SELECT CAST(current_schema() AS TEXT)")
            .fetch_one(db.store.pool())
            .await
            .unwrap()
            .get(0);
        // Each notification names the newest sequence of its statement
        // (migration 0016), so the newest one per cluster says 40.
        let mut heads = std::collections::BTreeMap::<String, i64>::new();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while heads.len() < ids.len() || heads.values().any(|h| *h < 40) {
            let n = tokio::time::timeout_at(deadline, listener.recv())
                .await
                .unwrap_or_else(|_| panic!("every cluster notified up to 40: {heads:?}"))
                .unwrap();
            // Other tests share the database; their schemas are not ours.
            match clawfed_hub::wake::pg::decode(&schema, n.channel(), n.payload()) {
                Some(clawfed_hub::wake::pg::Wake::Outbox { id, head }) => {
                    assert!(ids.contains(&id), "notified {id}");
                    let head = head.unwrap_or_else(|| panic!("no sequence in {:?}", n.payload()));
                    assert!((1..=40).contains(&head), "{id}: head {head}");
                    let newest = heads.entry(id).or_default();
                    *newest = (*newest).max(head);
                }
                None => {}
                Some(other) => panic!("{other:?} on the outbox channel"),
            }
        }
    }

    /// Issue 14 part 3: the link CA is shared through the store. Replicas
    /// starting together agree on one CA (first writer wins); the key is
    /// stored sealed (no table holds it in clear) and opens only with the
    /// same secrets key; an existing CA directory is imported once, and a
    /// later replica's different directory does not replace it.
    pub async fn link_ca_is_shared_sealed_and_imported_once(db: &TestDb) {
        use clawfed_hub::link::ca::{
            CaError, CaOrigin, CertificateAuthority, load_or_create_shared,
        };
        let s = db.dyn_store();
        let secrets = Arc::new(SecretBox::generate().unwrap());
        // The CA directory an existing single-hub install has.
        let old = tempfile::tempdir().unwrap();
        let imported = CertificateAuthority::load_or_create(old.path()).unwrap();
        let key_pem = std::fs::read_to_string(old.path().join("ca.key")).unwrap();

        // Several replicas at once: one imports the directory, the others
        // (no directory of their own) load what it stored.
        let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
        let tasks: Vec<_> = (0..5)
            .map(|i| {
                let (s, secrets) = (s.clone(), secrets.clone());
                let dir = if i == 0 {
                    old.path().to_owned()
                } else {
                    dirs[i - 1].path().to_owned()
                };
                tokio::spawn(async move {
                    load_or_create_shared(s.as_ref(), &secrets, Some(&dir))
                        .await
                        .map(|(ca, origin)| (ca.ca_pem().to_owned(), origin))
                })
            })
            .collect();
        let mut pems = HashSet::new();
        let mut origins = Vec::new();
        for t in tasks {
            let (pem, origin) = t.await.unwrap().unwrap();
            pems.insert(pem);
            origins.push(origin);
        }
        assert_eq!(pems.len(), 1, "replicas disagree on the CA");
        let shared = pems.into_iter().next().unwrap();
        assert_eq!(
            origins.iter().filter(|o| **o != CaOrigin::Loaded).count(),
            1,
            "exactly one replica stores the CA: {origins:?}"
        );
        // Whoever won, a later start sees the same CA, and each directory
        // without a key now holds its certificate (never a key).
        for d in &dirs {
            assert_eq!(
                std::fs::read_to_string(d.path().join("ca.crt")).unwrap(),
                shared
            );
            assert!(!d.path().join("ca.key").exists());
        }
        let other = tempfile::tempdir().unwrap();
        CertificateAuthority::load_or_create(other.path()).unwrap();
        let (again, origin) = load_or_create_shared(s.as_ref(), &secrets, Some(other.path()))
            .await
            .unwrap();
        assert_eq!(
            again.ca_pem(),
            shared,
            "a different CA dir must not replace it"
        );
        assert_eq!(origin, CaOrigin::Loaded);
        // The CA a replica loaded signs certificates the shared CA verifies:
        // it holds the same key, not only the same certificate.
        let (signer, _) = load_or_create_shared(s.as_ref(), &secrets, None)
            .await
            .unwrap();
        let client_key = rcgen::KeyPair::generate().unwrap();
        let csr = rcgen::CertificateParams::new(Vec::<String>::new())
            .unwrap()
            .serialize_request(&client_key)
            .unwrap()
            .pem()
            .unwrap();
        let issued = signer
            .sign_cluster_csr(&csr, "cid-1", "exec-a", Duration::from_secs(600))
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(signer.ca_der().clone()).unwrap();
        let leaf: rustls_pki_types::CertificateDer<'static> =
            rustls_pki_types::pem::PemObject::from_pem_slice(issued.pem.as_bytes()).unwrap();
        rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap()
        .verify_client_cert(&leaf, &[], rustls_pki_types::UnixTime::now())
        .expect("a certificate signed by any replica verifies against the shared CA");

        // Sealed at rest: the key is in no table in clear (PEM or base64
        // body), and the import into the store took it from the directory.
        let raw = clawfed_tests::db::all_text(db).await;
        let body: String = key_pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        if shared == imported.ca_pem() {
            assert!(!raw.contains(&body[..40]), "the CA key is stored in clear");
        }
        assert!(
            !raw.contains("PRIVATE KEY"),
            "a private key is stored in clear"
        );
        assert!(
            raw.contains("BEGIN CERTIFICATE"),
            "the certificate is stored"
        );

        // Another secrets key cannot open it: a clear error, no new CA.
        let wrong = SecretBox::generate().unwrap();
        let err = load_or_create_shared(s.as_ref(), &wrong, None)
            .await
            .unwrap_err();
        assert!(
            matches!(err, CaError::Secrets(SecretsError::WrongKey { .. })),
            "{err:?}"
        );
    }

    fn hex_of(s: &str) -> String {
        s.bytes().map(|b| format!("{b:02x}")).collect()
    }
}

clawfed_tests::on_both_databases!(
    raw_cases,
    sqlite_raw,
    postgres_raw,
    std::convert::identity;
    credentials_are_sealed_snapshotted_and_bound_to_their_agent,
    link_ca_is_shared_sealed_and_imported_once,
    link_writes_commit_in_groups_like_one_by_one,
    link_group_fails_unknown_cluster_puts_alone_and_notifies,
);

clawfed_tests::on_both_databases!(
    cases,
    sqlite,
    postgres,
    clawfed_tests::db::TestDb::dyn_store;
    namespaces_round_trip_with_atomic_effects,
    namespace_delete_refuses_while_agents_exist,
    configurations_use_optimistic_concurrency,
    agents_use_optimistic_concurrency,
    deploy_freezes_numbered_immutable_revisions,
    deploy_is_idempotent_per_key,
    concurrent_deploys_get_distinct_numbers,
    clusters_upsert_by_name,
    clusters_keep_what_their_spoke_reports,
    clusters_cordon_and_drain_record_moves,
    failover_scan_sees_lapsed_leases_and_reported_fences,
    work_claims_are_exclusive_and_leased,
    expired_claims_are_recovered,
    retries_wait_for_run_at_and_keep_the_error,
    work_lanes_claim_and_wait_only_for_their_kinds,
    coalescing_work_joins_the_pending_item_that_has_not_run,
    work_listing_filters,
    audit_lists_newest_first_per_namespace,
    audit_cursors_pass_every_commit_once_in_order,
    tokens_are_stored_hashed_and_revocable,
    fleet_summary_is_scoped,
    fleet_summary_separates_desired_from_actual,
    revision_updates_are_compare_and_swap,
    revision_staleness_names_in_progress_phases,
    agent_pass_lease_is_exclusive_until_it_expires,
    a_dead_incarnations_claims_are_taken_back_at_once,
    activation_lands_only_while_the_agent_wants_the_revision,
    outbox_supersedes_and_reports_keep_the_newest,
    outbox_acked_latest_and_resend,
    outbox_concurrent_puts_are_dense_and_once,
    quotas_hold_under_concurrent_writes,
    transport_key_is_shared_and_only_hashes_are_kept,
    revocations_are_paged_by_commit_sequence_not_by_clock,
    session_epochs_fence_offline_marking,
    lapsed_session_leases_go_offline_once,
    replicas_publish_their_address_and_load,
    the_session_holders_tunnel_is_found_while_its_lease_lives,
    a_handed_off_session_covers_the_move_then_lapses,
    a_stalled_replica_restores_only_the_sessions_it_holds,
);

/// Issue 31 item 17: `clawfed-hub cluster token create` beside a running
/// embedded hub. The CLI's store (a second process's connection) reads
/// before it writes; a writer of the hub commits meanwhile. The CLI must
/// wait for that writer and succeed, not fail with "database unavailable"
/// (a deferred transaction's snapshot goes stale and SQLite refuses its
/// upgrade at once, busy timeout or not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_cli_write_waits_for_the_running_hubs_writer() {
    use clawfed_hub::store::{LinkStore, NewBootstrapToken};
    use sqlx::Connection;
    let db = clawfed_tests::db::sqlite().await;
    let cli = clawfed_hub::store::connect(&db.url).await.unwrap();
    for round in 0..3 {
        // The running hub's writer: holds the write lock, then commits.
        let mut hub_writer = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "BEGIN IMMEDIATE; CREATE TABLE busy_probe_{round} (x INTEGER)"
        )))
        .execute(&mut hub_writer)
        .await
        .unwrap();
        let created = tokio::spawn({
            let cli = cli.clone();
            async move {
                cli.create_bootstrap_token(
                    &NewBootstrapToken {
                        cluster_name: format!("exec-{round}"),
                        hash: format!("hash-{round}"),
                        reenroll: false,
                        require_approval: false,
                        created_by: "system:cli".into(),
                        expires_at: Utc::now() + chrono::Duration::hours(1),
                    },
                    &Effects::audit(audit("cluster.token.create", None, "clusters/x")),
                )
                .await
            }
        });
        tokio::time::sleep(Duration::from_millis(400)).await;
        sqlx::raw_sql("COMMIT")
            .execute(&mut hub_writer)
            .await
            .unwrap();
        let created = created.await.unwrap();
        assert!(created.is_ok(), "round {round}: {created:?}");
    }
}

/// Issue 36 part 4: on PostgreSQL an audit row's id is taken at insert, so
/// a transaction can commit a lower id after a higher one was read. The
/// stream's cursor is stamped in commit order instead: the row committed
/// late comes after the one already read, not behind its cursor (a cursor
/// of ids would have skipped it for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_audit_row_committed_late_is_streamed_after_those_read() {
    use sqlx::Connection;
    let db = clawfed_tests::db::postgres().await;
    let s = db.dyn_store();
    let mut late = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql(
        "BEGIN; INSERT INTO audit_events (at, actor, action, namespace, target, result) \
         VALUES (0, 'system:test', 'x', 'team-a', 'late', 'ok')",
    )
    .execute(&mut late)
    .await
    .unwrap();
    s.append_audit(&audit("x", Some("team-a"), "early"))
        .await
        .unwrap();
    s.sequence_audit(64).await.unwrap();
    let read = s.audit_after(0, None, 100).await.unwrap();
    let targets: Vec<_> = read.iter().map(|e| e.target.as_str()).collect();
    assert_eq!(targets, ["early"]);
    let cursor = read[0].cursor.unwrap();
    sqlx::raw_sql("COMMIT").execute(&mut late).await.unwrap();
    s.sequence_audit(64).await.unwrap();
    let next = s.audit_after(cursor, None, 100).await.unwrap();
    let targets: Vec<_> = next.iter().map(|e| e.target.as_str()).collect();
    assert_eq!(targets, ["late"], "the late commit follows the cursor read");
    assert!(next[0].id < read[0].id, "its id is the lower one");
}
