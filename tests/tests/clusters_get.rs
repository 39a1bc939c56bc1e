//! `clawfed clusters get [NAME]` (issue 15): an enrolled cluster shows its
//! certificate expiry, version, provider and capabilities through REST,
//! gRPC and the CLI, on SQLite and PostgreSQL. A real spoke enrolls over
//! mTLS and says what it runs in its Hello; the expiry is that of the
//! certificate the hub issued it, and is gone once the cluster is revoked.

use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, Utc};
use clawfed_hub::model::ConnectionState;
use clawfed_proto::admin::v1 as pb;
use clawfed_proto::capability;
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::link::{bootstrap_token, cluster, eventually, start_spoke_advertising};
use clawfed_tests::procs::bin;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

/// `clawfed ARGS` as the root token; stdout.
fn cli(hub: &TestHub, args: &[&str]) -> String {
    let out = Command::new(bin("clawfed").expect("the clawfed binary"))
        .args(["--server", &hub.rest, "--token", &hub.root_token])
        .args(args)
        .output()
        .expect("run clawfed");
    assert!(
        out.status.success(),
        "clawfed {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
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
    let mut grpc = hub.grpc().await;
    let mut req = tonic::Request::new(pb::GetClusterRequest {
        name: "exec-a".into(),
    });
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", hub.root_token).parse().unwrap(),
    );
    let g = grpc
        .get_cluster(req)
        .await
        .expect("GetCluster")
        .into_inner();
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

clawfed_tests::on_both_backends!(
    a_cluster_shows_its_certificate_expiry_version_provider_and_capabilities
);
