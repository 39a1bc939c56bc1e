//! `clawfed clusters get [NAME]` (issue 15): an enrolled cluster shows its
//! certificate expiry, version, provider and capabilities through REST,
//! gRPC and the CLI, on SQLite and PostgreSQL. A real spoke enrolls over
//! mTLS and says what it runs in its Hello; the expiry is that of the
//! certificate the hub issued it, and is gone once the cluster is revoked.

use std::time::Duration;

use chrono::{DateTime, Utc};
use clawfed_hub::model::ConnectionState;
use clawfed_proto::admin::v1 as pb;
use clawfed_proto::capability;
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::link::{bootstrap_token, cluster, eventually, start_spoke_advertising};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

/// `clawfed ARGS` as the root token; stdout.
fn cli(hub: &TestHub, args: &[&str]) -> String {
    clawfed_tests::procs::clawfed(&hub.rest, &hub.root_token, args).expect("clawfed")
}

/// `GetCluster` as the root token.
async fn grpc_cluster(hub: &TestHub, name: &str) -> pb::Cluster {
    let mut req = tonic::Request::new(pb::GetClusterRequest { name: name.into() });
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", hub.root_token).parse().unwrap(),
    );
    hub.grpc()
        .await
        .get_cluster(req)
        .await
        .expect("GetCluster")
        .into_inner()
}

async fn a_cluster_shows_its_certificate_expiry_version_provider_and_capabilities(
    backend: Backend,
) {
    let hub = TestHub::start(backend).await;
    let ttl = hub
        .hub
        .as_ref()
        .and_then(|h| h.link.as_ref())
        .expect("link")
        .state
        .config
        .cert_ttl
        .as_secs() as i64;
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let before = Utc::now();
    let advertised = vec![
        "applier:ledger".to_owned(),
        capability::sandbox_driver("kata-test"),
        capability::SANDBOX_PROVISIONS.to_owned(),
    ];
    let spoke =
        start_spoke_advertising(&hub, "exec-a", Some(token), dir.path(), advertised.clone());
    let c = eventually(WAIT, "exec-a online", || async {
        cluster(&hub, "exec-a")
            .await
            .filter(|c| c.connection_state == ConnectionState::Online)
    })
    .await;
    let after = Utc::now();

    // REST: what the spoke said, and the issued certificate's expiry.
    assert_eq!(c.version, "test");
    assert_eq!(c.capabilities, advertised);
    assert_eq!(c.provider.as_deref(), Some("kata-test"));
    let expires = c.certificate_expires_at.expect("certificate expiry");
    let slack = chrono::Duration::seconds(5);
    assert!(
        expires >= before + chrono::Duration::seconds(ttl) - slack
            && expires <= after + chrono::Duration::seconds(ttl) + slack,
        "expiry {expires} is not enrollment + {ttl} s ({before}..{after})"
    );
    let listed: Value = hub.get_root_json("/clusters").await;
    let item = &listed["items"][0];
    assert_eq!(item["provider"], "kata-test", "{listed}");
    let listed_expiry: DateTime<Utc> =
        serde_json::from_value(item["certificateExpiresAt"].clone()).expect("listed expiry");
    assert_eq!(listed_expiry, expires);

    // gRPC: the same fields.
    let g = grpc_cluster(&hub, "exec-a").await;
    assert_eq!(g.provider.as_deref(), Some("kata-test"));
    assert_eq!(g.version, "test");
    assert_eq!(g.capabilities, c.capabilities);
    let g_expiry: DateTime<Utc> = g
        .certificate_expires_at
        .as_deref()
        .expect("gRPC expiry")
        .parse()
        .expect("RFC 3339");
    assert_eq!(g_expiry.timestamp(), expires.timestamp());

    // The CLI: one cluster by name, and every cluster without one.
    let table = cli(&hub, &["clusters", "get", "exec-a"]);
    let mut lines = table.lines();
    let header = lines.next().expect("header");
    for column in [
        "VERSION",
        "PROVIDER",
        "CAPABILITIES",
        "CERTIFICATE EXPIRES",
        "LAST SEEN",
    ] {
        assert!(header.contains(column), "{table}");
    }
    let row = lines.next().expect("a row");
    assert!(row.starts_with("exec-a"), "{table}");
    assert!(row.contains("kata-test"), "{table}");
    assert!(
        row.contains(&capability::sandbox_driver("kata-test")),
        "{table}"
    );
    assert!(
        row.contains(&expires.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
        "{table}"
    );
    assert!(row.contains("(in "), "{table}");
    let json: Value =
        serde_json::from_str(&cli(&hub, &["-o", "json", "clusters", "get", "exec-a"])).unwrap();
    assert_eq!(json["provider"], "kata-test");
    assert_eq!(json["version"], "test");
    let all = cli(&hub, &["clusters", "get"]);
    assert!(
        all.lines().nth(1).is_some_and(|l| l.contains("kata-test")),
        "{all}"
    );

    // Revoked: no certificate left to expire.
    let revoked = hub.post_root("/clusters/exec-a/revoke").await;
    assert!(revoked.status().is_success(), "{}", revoked.status());
    let c = cluster(&hub, "exec-a").await.expect("exec-a");
    assert_eq!(c.connection_state, ConnectionState::Revoked);
    assert_eq!(c.certificate_expires_at, None);
    let row = cli(&hub, &["clusters", "get", "exec-a"]);
    assert!(
        row.lines().nth(1).is_some_and(|l| l.contains("revoked")),
        "{row}"
    );
    spoke.abort();
}

/// Issue 33: the labels a spoke reports in its Hello (it runs the real link
/// over mTLS) and the capacity the hub holds for the cluster show through
/// REST, gRPC and the CLI; capacity is absent until reported.
async fn a_cluster_shows_its_labels_and_capacity(backend: Backend) {
    use clawfed_proto::capacity::{Capacity, Resources};
    use clawfed_spoke::link::identity::FileIdentityStore;
    use clawfed_spoke::link::{Link, SpokeMetrics};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    let hub = TestHub::start(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let labels = BTreeMap::from([
        ("region".to_owned(), "eu".to_owned()),
        ("tier".to_owned(), "gpu".to_owned()),
    ]);
    let link = Link::new(
        clawfed_spoke::link::LinkConfig {
            capabilities: vec!["applier:ledger".to_owned()],
            ..clawfed_tests::link::kube_link_config(
                &clawfed_tests::link::hub_url(&hub),
                clawfed_tests::link::hub_ca(&hub),
                "exec-a",
                Some(token),
            )
            .unwrap()
        },
        Arc::new(FileIdentityStore::new(dir.path())),
        Arc::new(clawfed_spoke::link::ledger::FileLedger::open(dir.path()).unwrap()),
        SpokeMetrics::default(),
    )
    .with_labels(labels.clone());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (_reports, reports_rx) = tokio::sync::mpsc::channel(1);
    let spoke = tokio::spawn(link.run(reports_rx, shutdown.clone()));
    let c = eventually(WAIT, "exec-a online", || async {
        cluster(&hub, "exec-a")
            .await
            .filter(|c| c.connection_state == ConnectionState::Online)
    })
    .await;
    assert_eq!(c.labels, labels, "the spoke's labels");
    assert_eq!(c.capacity, None, "the ledger spoke reports no capacity");
    let row = cli(&hub, &["clusters", "get", "exec-a"]);
    assert!(row.contains("region=eu,tier=gpu"), "{row}");

    let report = Capacity {
        nodes: 2,
        allocatable: Resources {
            cpu_millis: 8000,
            memory_bytes: 16 << 30,
        },
        free: Resources {
            cpu_millis: 1500,
            memory_bytes: 3 << 29,
        },
    };
    hub.store()
        .set_cluster_capacity(&c.id, report, Utc::now())
        .await
        .unwrap();
    let got: Value = hub.get_root_json("/clusters/exec-a").await;
    assert_eq!(got["capacity"]["nodes"], 2, "{got}");
    assert_eq!(got["capacity"]["free"]["cpuMillis"], 1500, "{got}");
    assert_eq!(
        got["capacity"]["allocatable"]["memoryBytes"],
        16i64 << 30,
        "{got}"
    );
    let listed: Value = hub.get_root_json("/clusters").await;
    assert_eq!(listed["items"][0]["capacity"], got["capacity"], "{listed}");

    let g = grpc_cluster(&hub, "exec-a").await;
    assert_eq!(g.labels.get("tier").map(String::as_str), Some("gpu"));
    let k = g.capacity.expect("gRPC capacity");
    assert_eq!(
        (k.nodes, k.free_cpu_millis, k.free_memory_bytes),
        (2, 1500, 3 << 29)
    );
    assert!(k.reported_at.parse::<DateTime<Utc>>().is_ok(), "{k:?}");

    let table = cli(&hub, &["clusters", "get", "exec-a"]);
    let header = table.lines().next().unwrap_or_default();
    for column in ["LABELS", "NODES", "ALLOCATABLE", "FREE"] {
        assert!(header.contains(column), "{table}");
    }
    assert!(table.contains("cpu 8000m, memory 16Gi"), "{table}");
    assert!(table.contains("cpu 1500m, memory 1.5Gi"), "{table}");
    let list = cli(&hub, &["clusters", "list"]);
    assert!(
        list.lines().next().unwrap_or_default().contains("FREE"),
        "{list}"
    );
    assert!(list.contains("cpu 1500m, memory 1.5Gi"), "{list}");
    shutdown.cancel();
    let _ = spoke.await;
}

clawfed_tests::on_both_backends!(
    a_cluster_shows_its_certificate_expiry_version_provider_and_capabilities,
    a_cluster_shows_its_labels_and_capacity
);
