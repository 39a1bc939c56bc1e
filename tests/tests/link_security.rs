//! Security cases of the spoke link over real TLS 1.3 on loopback. Every
//! attempt must (a) fail to get in, (b) fail with a clear error (the gRPC
//! code and message, or the TLS alert the hub sent), and (c) change
//! nothing: cluster states and certificate serials, outbox depth and head,
//! reports, audit events, and tokens that should stay usable stay usable.
//!
//! The protocol is spoken by hand here (the real spoke never misbehaves):
//! mTLS channels from `clawfed_spoke::link::tls` and the generated
//! `SpokeLinkClient`, raw TLS streams for handshake cases, and raw HTTP/2
//! requests on the gRPC path for malformed frames.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::Utc;
use clawfed_hub::model::{Cluster, ConnectionState};
use clawfed_hub::store::{Effects, NewAudit, NewBootstrapToken, Store};
use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::enrollment_client::EnrollmentClient;
use clawfed_proto::link::v1::spoke_link_client::SpokeLinkClient;
use clawfed_proto::link::v1::{hub_message, spoke_message};
use clawfed_spoke::link::identity::{Identity, new_key_and_csr};
use clawfed_spoke::link::tls::{self as spoke_tls, HubAddress, SwappableCert};
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::link::{
    bootstrap_token, cluster, eventually, hub_ca, hub_url, outbox_depth, start_spoke,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status};

const WAIT: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A hub on SQLite, with every log line of this test binary captured.
async fn start_hub(adjust: impl FnOnce(&mut clawfed_hub::config::Config)) -> TestHub {
    start_hub_on(Backend::Sqlite, adjust).await
}

/// A hub on `backend` (the cases whose refusal is store logic run on both).
async fn start_hub_on(
    backend: Backend,
    adjust: impl FnOnce(&mut clawfed_hub::config::Config),
) -> TestHub {
    logs();
    TestHub::start_with(backend, adjust, clawfed_hub::worker::Handlers::builtin()).await
}

fn address(hub: &TestHub) -> HubAddress {
    HubAddress::parse(&hub_url(hub)).expect("hub url")
}

fn link(hub: &TestHub) -> clawfed_hub::link::server::LinkHandle {
    hub.hub.as_ref().and_then(|h| h.link.clone()).expect("link")
}

/// One enrollment attempt with a fresh key, as the spoke makes it.
async fn try_enroll(hub: &TestHub, name: &str, token: &str) -> Result<Identity, Status> {
    let (key_pem, csr_pem) = new_key_and_csr().unwrap();
    let config = spoke_tls::enroll_config(&hub_ca(hub)).unwrap();
    let channel = spoke_tls::channel(&address(hub), config)
        .await
        .expect("server-authenticated TLS to the link port");
    let response = EnrollmentClient::new(channel)
        .enroll(pb::EnrollRequest {
            bootstrap_token: token.to_owned(),
            cluster_name: name.to_owned(),
            csr_pem,
            spoke_version: "test".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(Identity::new(response.cluster_id, key_pem, response.certificate_pem).unwrap())
}

/// Enrolls `name` by hand with a REST-created token.
async fn enroll(hub: &TestHub, name: &str) -> Identity {
    let token = bootstrap_token(hub, name, false).await;
    try_enroll(hub, name, &token).await.expect("enroll")
}

fn mtls(hub: &TestHub, identity: &Identity) -> Arc<rustls::ClientConfig> {
    let cert = Arc::new(SwappableCert::default());
    cert.install(identity).expect("install client certificate");
    spoke_tls::mtls_config(&hub_ca(hub), cert).unwrap()
}

async fn mtls_channel(hub: &TestHub, identity: &Identity) -> Channel {
    spoke_tls::channel(&address(hub), mtls(hub, identity))
        .await
        .expect("mTLS channel")
}

fn message(body: spoke_message::Body) -> pb::SpokeMessage {
    pb::SpokeMessage { body: Some(body) }
}

fn hello(claimed_cluster_id: &str, applied: HashMap<String, i64>) -> spoke_message::Body {
    spoke_message::Body::Hello(pb::Hello {
        spoke_version: "test".into(),
        capabilities: vec![],
        applied,
        claimed_cluster_id: claimed_cluster_id.to_owned(),
        labels: HashMap::new(),
    })
}

/// A `SpokeLink.Connect` stream driven by hand.
struct Stream {
    out: mpsc::Sender<pb::SpokeMessage>,
    inbound: tonic::Streaming<pb::HubMessage>,
}

impl Stream {
    /// Opens a stream whose first message is `first`.
    async fn open(
        hub: &TestHub,
        identity: &Identity,
        first: spoke_message::Body,
    ) -> Result<Self, Status> {
        let mut client = SpokeLinkClient::new(mtls_channel(hub, identity).await);
        let (out, rx) = mpsc::channel(16);
        out.send(message(first)).await.unwrap();
        let inbound = client.connect(ReceiverStream::new(rx)).await?.into_inner();
        Ok(Self { out, inbound })
    }

    async fn send(&self, body: spoke_message::Body) {
        // The hub may already have closed the stream; the error shows on
        // the inbound side.
        let _ = self.out.send(message(body)).await;
    }

    async fn next(&mut self) -> Result<Option<pb::HubMessage>, Status> {
        tokio::time::timeout(WAIT, self.inbound.message())
            .await
            .expect("the hub answered in time")
    }

    async fn welcome(&mut self) -> pb::Welcome {
        match self.next().await {
            Ok(Some(pb::HubMessage {
                body: Some(hub_message::Body::Welcome(w)),
            })) => w,
            other => panic!("expected Welcome, got {other:?}"),
        }
    }

    /// The next Work, skipping heartbeats.
    async fn work(&mut self) -> pb::Work {
        loop {
            match self.next().await {
                Ok(Some(pb::HubMessage {
                    body: Some(hub_message::Body::Work(w)),
                })) => return w,
                Ok(Some(pb::HubMessage {
                    body: Some(hub_message::Body::Heartbeat(_)),
                })) => continue,
                other => panic!("expected Work, got {other:?}"),
            }
        }
    }

    /// The status the hub closes the stream with (heartbeats and work on
    /// the way are skipped).
    async fn closed_with(&mut self) -> Status {
        loop {
            match self.next().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the hub ended the stream without an error status"),
                Err(status) => return status,
            }
        }
    }
}

fn assert_status(status: &Status, code: Code, text: &str) {
    assert_eq!(status.code(), code, "{status:?}");
    assert!(
        status.message().contains(text),
        "expected {text:?} in the message: {status:?}"
    );
}

/// A gRPC call over a connection the hub refused in the handshake fails in
/// the transport, never with an answer from a handler. Whether the client
/// read the alert before the connection closed is a race (a write can meet
/// the reset first); when it did, it is the expected one.
fn assert_transport_refusal(status: &Status, alert: &str) {
    let detail = format!("{status:?}");
    assert!(detail.contains("transport"), "{detail}");
    assert!(
        detail.contains(alert) || !detail.contains("alert"),
        "expected the {alert} alert: {detail}"
    );
}

/// What an attempt must not change.
#[derive(Debug, PartialEq)]
struct Snapshot {
    /// name, state, sorted serials, version.
    clusters: Vec<(String, ConnectionState, Vec<String>, String)>,
    /// cluster name, depth, head sequence.
    outbox: Vec<(String, i64, i64)>,
    /// cluster name, target, kind, generation, body.
    reports: Vec<(String, String, String, i64, serde_json::Value)>,
    audit: usize,
}

async fn snapshot(store: &dyn Store) -> Snapshot {
    let mut clusters = Vec::new();
    let mut reports = Vec::new();
    for c in store.list_clusters().await.unwrap() {
        for r in store.list_reports(&c.id).await.unwrap() {
            reports.push((c.name.clone(), r.target, r.kind, r.generation, r.body));
        }
        let mut serials = c.certificate_serials.clone();
        serials.sort();
        clusters.push((c.name, c.connection_state, serials, c.version));
    }
    clusters.sort_by(|a, b| a.0.cmp(&b.0));
    reports.sort_by(|a, b| (&a.0, &a.1, &a.2).cmp(&(&b.0, &b.1, &b.2)));
    let mut outbox: Vec<_> = store
        .outbox_summary()
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.cluster_name, s.depth, s.max_sequence))
        .collect();
    outbox.sort();
    let audit = store.list_audit(None, 100_000).await.unwrap().len();
    Snapshot {
        clusters,
        outbox,
        reports,
        audit,
    }
}

/// Waits until the store looks like `before` again (a closed session
/// writes its offline state just after the error reaches the client).
async fn unchanged(store: &dyn Store, before: &Snapshot) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let now = snapshot(store).await;
        if &now == before {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            assert_eq!(&now, before, "the attempt changed the hub's state");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Dials with `config`, sends the HTTP/2 preface and reads until the hub
/// refuses; returns the TLS error. A connection the hub keeps open fails
/// the test.
async fn refused_handshake(hub: &TestHub, config: Arc<rustls::ClientConfig>) -> std::io::Error {
    let attempt = async {
        let mut tls = spoke_tls::dial(&address(hub), config).await?;
        tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
        tls.flush().await?;
        let mut buf = [0u8; 256];
        loop {
            if tls.read(&mut buf).await? == 0 {
                return Ok::<_, std::io::Error>("closed without an alert");
            }
        }
    };
    match tokio::time::timeout(Duration::from_secs(5), attempt).await {
        Err(_) => panic!("the hub kept the connection open: the handshake was accepted"),
        Ok(Ok(how)) => panic!("the hub {how}; expected a TLS alert"),
        Ok(Err(e)) => e,
    }
}

/// A client certificate for `cluster_id` issued by `issuer`, valid over
/// the given years.
fn client_identity(
    issuer: &rcgen::Issuer<'_, rcgen::KeyPair>,
    cluster_id: &str,
    years: Option<(i32, i32)>,
) -> Identity {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "exec-a");
    params.subject_alt_names = vec![rcgen::SanType::URI(
        clawfed_proto::identity::cluster_uri(cluster_id)
            .try_into()
            .unwrap(),
    )];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    match years {
        Some((from, to)) => {
            params.not_before = rcgen::date_time_ymd(from, 1, 1);
            params.not_after = rcgen::date_time_ymd(to, 1, 1);
        }
        None => {
            let now = Utc::now();
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(chrono::Datelike::year(&now) + 1, 1, 1);
        }
    }
    let cert = params.signed_by(&key, issuer).unwrap();
    Identity::new(cluster_id.to_owned(), key.serialize_pem(), cert.pem()).unwrap()
}

/// The hub CA's own signing material, read from its CA directory (an
/// operator's CA the hub imported at start).
fn hub_ca_issuer(hub: &TestHub) -> rcgen::Issuer<'static, rcgen::KeyPair> {
    let dir = link(hub).state.config.ca_dir.clone();
    // The files load as the hub's CA (same directory, same certificate).
    let ca = clawfed_hub::link::ca::CertificateAuthority::load_or_create(&dir).unwrap();
    assert_eq!(ca.ca_pem(), hub_ca(hub));
    let key = std::fs::read_to_string(dir.join("ca.key")).unwrap();
    let cert = std::fs::read_to_string(dir.join("ca.crt")).unwrap();
    rcgen::Issuer::from_ca_cert_pem(&cert, rcgen::KeyPair::from_pem(&key).unwrap()).unwrap()
}

async fn get_cluster(hub: &TestHub, name: &str) -> Cluster {
    cluster(hub, name).await.expect("cluster exists")
}

// ---------------------------------------------------------------------------
// Certificates
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_from_another_ca_is_refused_in_the_handshake() {
    let hub = start_hub(|_| {}).await;
    let store = hub.store();
    let a = enroll(&hub, "exec-a").await;
    let before = snapshot(store.as_ref()).await;

    // A CA of the attacker's own, signing a certificate that names exec-a
    // exactly as the hub's would.
    let rogue_key = rcgen::KeyPair::generate().unwrap();
    let mut rogue = rcgen::CertificateParams::default();
    rogue
        .distinguished_name
        .push(rcgen::DnType::CommonName, "clawfed link CA");
    rogue.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    rogue.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let rogue_issuer = rcgen::Issuer::new(rogue, rogue_key);
    let forged = client_identity(&rogue_issuer, &a.cluster_id, None);

    let error = refused_handshake(&hub, mtls(&hub, &forged)).await;
    assert!(error.to_string().contains("UnknownCA"), "{error}");
    let alert = spoke_tls::ReceivedAlert::default();
    alert.note(&error);
    assert_eq!(alert.get(), Some(rustls::AlertDescription::UnknownCA));
    assert!(!alert.revoked());
    // Through gRPC the call fails too, never reaching a handler.
    let status = Stream::open(&hub, &forged, hello(&a.cluster_id, HashMap::new()))
        .await
        .err()
        .expect("refused");
    assert_transport_refusal(&status, "UnknownCA");
    unchanged(store.as_ref(), &before).await;
    // The real identity still works.
    let mut ok = Stream::open(&hub, &a, hello(&a.cluster_id, HashMap::new()))
        .await
        .unwrap();
    ok.welcome().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_certificate_from_the_hub_ca_is_refused_in_the_handshake() {
    // An operator's CA in the CA directory: the hub imports it into the
    // store (the hub writes no key there itself), so the test can sign
    // with it.
    let hub = start_hub(|c| {
        clawfed_hub::link::ca::CertificateAuthority::load_or_create(&c.link.ca_dir).unwrap();
    })
    .await;
    let store = hub.store();
    let a = enroll(&hub, "exec-a").await;
    let before = snapshot(store.as_ref()).await;
    let issuer = hub_ca_issuer(&hub);

    let expired = client_identity(&issuer, &a.cluster_id, Some((2020, 2021)));
    let error = refused_handshake(&hub, mtls(&hub, &expired)).await;
    assert!(error.to_string().contains("CertificateExpired"), "{error}");
    unchanged(store.as_ref(), &before).await;

    // Control: the same CA material with valid dates passes TLS but the
    // hub never issued that serial, so the call is refused by name.
    let unissued = client_identity(&issuer, &a.cluster_id, None);
    let status = Stream::open(&hub, &unissued, hello(&a.cluster_id, HashMap::new()))
        .await
        .err()
        .expect("refused");
    assert_status(
        &status,
        Code::Unauthenticated,
        "client certificate was not issued by this hub",
    );
    unchanged(store.as_ref(), &before).await;
}

async fn revoked_certificate_is_refused_in_the_handshake(backend: Backend) {
    let hub = start_hub_on(backend, |_| {}).await;
    let store = hub.store();
    let a = enroll(&hub, "exec-a").await;
    // The identity is good before the revocation.
    let mut ok = Stream::open(&hub, &a, hello(&a.cluster_id, HashMap::new()))
        .await
        .unwrap();
    ok.welcome().await;
    drop(ok);

    let revoked = hub.post_root("/clusters/exec-a/revoke").await;
    assert_eq!(revoked.status(), 200);
    let serials = get_cluster(&hub, "exec-a").await.certificate_serials;
    assert_eq!(serials.len(), 1);
    let deny = link(&hub).state.deny.clone();
    eventually(WAIT, "serial on the handshake deny-list", || async {
        deny.contains(&serials[0]).then_some(())
    })
    .await;
    eventually(WAIT, "cluster revoked", || async {
        (get_cluster(&hub, "exec-a").await.connection_state == ConnectionState::Revoked)
            .then_some(())
    })
    .await;
    let before = snapshot(store.as_ref()).await;

    let error = refused_handshake(&hub, mtls(&hub, &a)).await;
    assert!(error.to_string().contains("CertificateRevoked"), "{error}");
    // The spoke knows it by type (and so stops instead of retrying).
    let alert = spoke_tls::ReceivedAlert::default();
    alert.note(&error);
    assert!(alert.revoked(), "{error:?}");
    let status = Stream::open(&hub, &a, hello(&a.cluster_id, HashMap::new()))
        .await
        .err()
        .expect("refused");
    assert_transport_refusal(&status, "CertificateRevoked");
    // Renewal is refused the same way: a revoked key cannot mint a new one.
    let (_, csr_pem) = new_key_and_csr().unwrap();
    let renew = SpokeLinkClient::new(mtls_channel(&hub, &a).await)
        .renew(pb::RenewRequest { csr_pem })
        .await
        .expect_err("renew refused");
    assert_transport_refusal(&renew, "CertificateRevoked");
    unchanged(store.as_ref(), &before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_revoked_certificate_is_refused_in_the_handshake() {
    revoked_certificate_is_refused_in_the_handshake(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_revoked_certificate_is_refused_in_the_handshake() {
    revoked_certificate_is_refused_in_the_handshake(Backend::Postgres).await;
}

// ---------------------------------------------------------------------------
// Work of another cluster, identity claims, message order
// ---------------------------------------------------------------------------

async fn a_cluster_cannot_ack_or_report_on_another_clusters_work(backend: Backend) {
    let hub = start_hub_on(backend, |_| {}).await;
    let store = hub.store();
    let a = enroll(&hub, "exec-a").await;
    let b = enroll(&hub, "exec-b").await;
    let seq = link(&hub)
        .send(
            &b.cluster_id,
            "ns/b-only",
            "namespace.ensure",
            1,
            &json!({"n": "b"}),
        )
        .await
        .unwrap()
        .expect("queued for B");
    let before = snapshot(store.as_ref()).await;

    // A acks B's item by its exact sequence, target and generation.
    let mut s = Stream::open(&hub, &a, hello(&a.cluster_id, HashMap::new()))
        .await
        .unwrap();
    s.welcome().await;
    s.send(spoke_message::Body::Ack(pb::Ack {
        sequence: seq as u64,
        target: "ns/b-only".into(),
        generation: 1,
    }))
    .await;
    let status = s.closed_with().await;
    assert_status(
        &status,
        Code::PermissionDenied,
        "ack for work \"ns/b-only\" that was never sent to this cluster",
    );
    unchanged(store.as_ref(), &before).await;

    // A reports on B's target.
    let mut s = Stream::open(&hub, &a, hello(&a.cluster_id, HashMap::new()))
        .await
        .unwrap();
    s.welcome().await;
    s.send(spoke_message::Body::Report(pb::Report {
        target: "ns/b-only".into(),
        generation: 1,
        body: Some(pb::report::Body::WorkResult(pb::WorkResult {
            applied: true,
            reason: String::new(),
            kind: "namespace.ensure".into(),
            namespace: String::new(),
            retrying: false,
        })),
    }))
    .await;
    let status = s.closed_with().await;
    assert_status(
        &status,
        Code::PermissionDenied,
        "report on work \"ns/b-only\" that was never sent to this cluster",
    );
    unchanged(store.as_ref(), &before).await;

    // A Hello listing B's target as applied acks nothing of B's.
    let applied = HashMap::from([("ns/b-only".to_owned(), 1)]);
    let mut s = Stream::open(&hub, &a, hello(&a.cluster_id, applied))
        .await
        .unwrap();
    s.welcome().await;
    drop(s);
    unchanged(store.as_ref(), &before).await;

    // B's item is still unacked and still delivered to B.
    assert_eq!(outbox_depth(store.as_ref(), &b.cluster_id).await, 1);
    let mut sb = Stream::open(&hub, &b, hello(&b.cluster_id, HashMap::new()))
        .await
        .unwrap();
    sb.welcome().await;
    let work = sb.work().await;
    assert_eq!(
        (work.sequence, work.target.as_str()),
        (seq as u64, "ns/b-only")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_cluster_cannot_ack_or_report_on_another_clusters_work() {
    a_cluster_cannot_ack_or_report_on_another_clusters_work(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_cluster_cannot_ack_or_report_on_another_clusters_work() {
    a_cluster_cannot_ack_or_report_on_another_clusters_work(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_claiming_another_clusters_id_is_refused() {
    let hub = start_hub(|_| {}).await;
    let store = hub.store();
    let a = enroll(&hub, "exec-a").await;
    let b = enroll(&hub, "exec-b").await;
    link(&hub)
        .send(&b.cluster_id, "ns/b", "namespace.ensure", 1, &json!({}))
        .await
        .unwrap();
    let before = snapshot(store.as_ref()).await;
    let mut s = Stream::open(&hub, &a, hello(&b.cluster_id, HashMap::new()))
        .await
        .unwrap();
    let status = s.closed_with().await;
    assert_status(
        &status,
        Code::PermissionDenied,
        "Hello claims a cluster other than the one the client certificate names",
    );
    unchanged(store.as_ref(), &before).await;
}

/// Issue 33: the labels a Hello reports are what placement selectors
/// match; one that is not a Kubernetes label is refused, naming it, and
/// nothing is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_with_labels_that_are_not_kubernetes_labels_is_refused() {
    let hub = start_hub(|_| {}).await;
    let store = hub.store();
    let a = enroll(&hub, "exec-a").await;
    let before = snapshot(store.as_ref()).await;
    let mut bad = hello(&a.cluster_id, HashMap::new());
    if let spoke_message::Body::Hello(h) = &mut bad {
        h.labels = HashMap::from([("zone".to_owned(), "not a value".to_owned())]);
    }
    let mut s = Stream::open(&hub, &a, bad).await.unwrap();
    let status = s.closed_with().await;
    assert_status(
        &status,
        Code::InvalidArgument,
        "Hello.labels: cluster label zone=",
    );
    unchanged(store.as_ref(), &before).await;
    let c = store.get_cluster("exec-a").await.unwrap();
    assert!(c.labels.is_empty(), "{:?}", c.labels);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_message_must_be_hello_and_only_the_first() {
    let hub = start_hub(|_| {}).await;
    let store = hub.store();
    let a = enroll(&hub, "exec-a").await;
    let before = snapshot(store.as_ref()).await;

    let heartbeat = spoke_message::Body::Heartbeat(pb::Heartbeat {
        unix_millis: 1,
        ..Default::default()
    });
    let mut s = Stream::open(&hub, &a, heartbeat).await.unwrap();
    let status = s.closed_with().await;
    assert_status(
        &status,
        Code::InvalidArgument,
        "the first message must be Hello",
    );
    unchanged(store.as_ref(), &before).await;

    let mut s = Stream::open(&hub, &a, hello(&a.cluster_id, HashMap::new()))
        .await
        .unwrap();
    s.welcome().await;
    s.send(hello(&a.cluster_id, HashMap::new())).await;
    let status = s.closed_with().await;
    assert_status(
        &status,
        Code::InvalidArgument,
        "Hello may only be the first message of a stream",
    );
    unchanged(store.as_ref(), &before).await;
}

// ---------------------------------------------------------------------------
// Bootstrap tokens
// ---------------------------------------------------------------------------

async fn a_bootstrap_token_enrolls_once(backend: Backend) {
    let hub = start_hub_on(backend, |_| {}).await;
    let store = hub.store();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    try_enroll(&hub, "exec-a", &token).await.unwrap();
    let before = snapshot(store.as_ref()).await;
    let status = try_enroll(&hub, "exec-a", &token).await.err().unwrap();
    assert_status(
        &status,
        Code::Unauthenticated,
        "bootstrap token was already used",
    );
    // Not for another name either.
    let status = try_enroll(&hub, "exec-z", &token).await.err().unwrap();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    unchanged(store.as_ref(), &before).await;
    assert!(cluster(&hub, "exec-z").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_bootstrap_token_enrolls_once() {
    a_bootstrap_token_enrolls_once(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_bootstrap_token_enrolls_once() {
    a_bootstrap_token_enrolls_once(Backend::Postgres).await;
}

async fn an_expired_bootstrap_token_is_refused(backend: Backend) {
    let hub = start_hub_on(backend, |_| {}).await;
    let store = hub.store();
    let (secret, hash) = clawfed_hub::link::enroll::mint_bootstrap_token();
    store
        .create_bootstrap_token(
            &NewBootstrapToken {
                cluster_name: "exec-a".into(),
                hash,
                reenroll: false,
                require_approval: false,
                created_by: "test".into(),
                expires_at: Utc::now() - chrono::Duration::seconds(1),
            },
            &Effects::audit(NewAudit {
                actor: "test".into(),
                action: "cluster.bootstrap-token.create".into(),
                namespace: None,
                target: "cluster/exec-a".into(),
                result: "ok".into(),
                detail: None,
            }),
        )
        .await
        .unwrap();
    let before = snapshot(store.as_ref()).await;
    let status = try_enroll(&hub, "exec-a", &secret).await.err().unwrap();
    assert_status(&status, Code::Unauthenticated, "bootstrap token expired");
    unchanged(store.as_ref(), &before).await;
    assert!(cluster(&hub, "exec-a").await.is_none());

    // And one that expires by its ttl, through REST.
    let response = hub
        .post_root_json(
            "/clusters/exec-b/bootstrap-tokens",
            &json!({ "ttlSeconds": 1 }),
        )
        .await;
    assert_eq!(response.status(), 201);
    let created = response
        .json::<clawfed_hub::model::BootstrapTokenCreated>()
        .await
        .unwrap();
    assert!(
        created.expires_at <= Utc::now() + chrono::Duration::seconds(1),
        "ttlSeconds 1: expires at {}",
        created.expires_at
    );
    // The hub judges expiry by the wall clock: wait until the instant it
    // reported has passed, not for a guessed while.
    eventually(WAIT, "the token's expiry", || async {
        (Utc::now() > created.expires_at).then_some(())
    })
    .await;
    let token = created.token;
    let before = snapshot(store.as_ref()).await;
    let status = try_enroll(&hub, "exec-b", &token).await.err().unwrap();
    assert_status(&status, Code::Unauthenticated, "bootstrap token expired");
    unchanged(store.as_ref(), &before).await;
    assert!(cluster(&hub, "exec-b").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_an_expired_bootstrap_token_is_refused() {
    an_expired_bootstrap_token_is_refused(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_expired_bootstrap_token_is_refused() {
    an_expired_bootstrap_token_is_refused(Backend::Postgres).await;
}

async fn a_token_for_another_cluster_name_is_refused_and_stays_usable(backend: Backend) {
    let hub = start_hub_on(backend, |_| {}).await;
    let store = hub.store();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let before = snapshot(store.as_ref()).await;
    let status = try_enroll(&hub, "exec-b", &token).await.err().unwrap();
    assert_status(
        &status,
        Code::Unauthenticated,
        "bootstrap token was issued for another cluster name",
    );
    unchanged(store.as_ref(), &before).await;
    assert!(cluster(&hub, "exec-b").await.is_none());
    assert!(cluster(&hub, "exec-a").await.is_none());
    // A malformed CSR does not burn the token either.
    let config = spoke_tls::enroll_config(&hub_ca(&hub)).unwrap();
    let status = EnrollmentClient::new(spoke_tls::channel(&address(&hub), config).await.unwrap())
        .enroll(pb::EnrollRequest {
            bootstrap_token: token.clone(),
            cluster_name: "exec-a".into(),
            csr_pem: "not a CSR".into(),
            spoke_version: "test".into(),
            ..Default::default()
        })
        .await
        .err()
        .unwrap();
    assert_status(&status, Code::InvalidArgument, "csr_pem");
    unchanged(store.as_ref(), &before).await;
    // The token still enrolls the name it was issued for.
    let a = try_enroll(&hub, "exec-a", &token).await.unwrap();
    assert_eq!(get_cluster(&hub, "exec-a").await.id, a.cluster_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_token_for_another_cluster_name_is_refused_and_stays_usable() {
    a_token_for_another_cluster_name_is_refused_and_stays_usable(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_token_for_another_cluster_name_is_refused_and_stays_usable() {
    a_token_for_another_cluster_name_is_refused_and_stays_usable(Backend::Postgres).await;
}

// ---------------------------------------------------------------------------
// Transport
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_connections_are_refused() {
    let hub = start_hub(|_| {}).await;
    let store = hub.store();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let before = snapshot(store.as_ref()).await;
    let authority = address(&hub).authority;

    // Raw cleartext HTTP/2: the hub answers with a TLS alert record
    // (content type 21) and never speaks HTTP/2.
    let mut tcp = tokio::net::TcpStream::connect(&authority).await.unwrap();
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut reply))
        .await
        .expect("the hub closed the connection in time")
        .ok();
    assert!(
        reply.is_empty() || reply[0] == 21,
        "the hub answered cleartext with {reply:?}"
    );

    // A cleartext gRPC client (h2c) gets a transport error, no response.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{authority}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect_lazy();
    let status = EnrollmentClient::new(channel)
        .enroll(pb::EnrollRequest {
            bootstrap_token: token.clone(),
            cluster_name: "exec-a".into(),
            csr_pem: new_key_and_csr().unwrap().1,
            spoke_version: "test".into(),
            ..Default::default()
        })
        .await
        .expect_err("h2c refused");
    // Refused in the transport (the connection is closed on it), never an
    // answer from a handler.
    assert!(
        matches!(
            status.code(),
            Code::Unavailable | Code::Unknown | Code::Internal | Code::Cancelled
        ),
        "{status:?}"
    );
    assert!(format!("{status:?}").contains("transport"), "{status:?}");
    unchanged(store.as_ref(), &before).await;
    // The token the cleartext request carried was not consumed.
    try_enroll(&hub, "exec-a", &token).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_1_2_clients_are_refused() {
    let hub = start_hub(|_| {}).await;
    let store = hub.store();
    let a = enroll(&hub, "exec-a").await;
    let before = snapshot(store.as_ref()).await;
    let mut roots = rustls::RootCertStore::empty();
    for cert in
        <rustls::pki_types::CertificateDer<'_> as rustls::pki_types::pem::PemObject>::pem_slice_iter(
            hub_ca(&hub).as_bytes(),
        )
    {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(spoke_tls::crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots);
    // Without and with the valid client certificate.
    let cert = Arc::new(SwappableCert::default());
    cert.install(&a).unwrap();
    for mut config in [
        builder.clone().with_no_client_auth(),
        builder.with_client_cert_resolver(cert),
    ] {
        config.alpn_protocols = vec![b"h2".to_vec()];
        let error = spoke_tls::dial(&address(&hub), Arc::new(config))
            .await
            .expect_err("TLS 1.2 refused");
        assert!(error.to_string().contains("ProtocolVersion"), "{error}");
    }
    unchanged(store.as_ref(), &before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_messages_close_the_stream_and_store_nothing() {
    const LIMIT: usize = 64 * 1024;
    let hub = start_hub(|c| c.link.max_message_bytes = LIMIT).await;
    let store = hub.store();
    let a = enroll(&hub, "exec-a").await;
    link(&hub)
        .send(&a.cluster_id, "ns/a", "namespace.ensure", 1, &json!({}))
        .await
        .unwrap()
        .unwrap();
    let before = snapshot(store.as_ref()).await;

    // Work the link could never carry is refused when queued (it would
    // otherwise end A's stream on every delivery and hold back the rest).
    let refused = link(&hub)
        .send(
            &a.cluster_id,
            "ns/big",
            "namespace.ensure",
            1,
            &json!({ "x": "y".repeat(2 * LIMIT) }),
        )
        .await
        .expect_err("oversized work refused");
    assert!(
        refused.to_string().contains("over link.max_message_bytes"),
        "{refused}"
    );
    unchanged(store.as_ref(), &before).await;

    // A report on A's own work, twice the limit.
    let mut s = Stream::open(&hub, &a, hello(&a.cluster_id, HashMap::new()))
        .await
        .unwrap();
    s.welcome().await;
    assert_eq!(s.work().await.target, "ns/a");
    s.send(spoke_message::Body::Report(pb::Report {
        target: "ns/a".into(),
        generation: 1,
        body: Some(pb::report::Body::WorkResult(pb::WorkResult {
            applied: true,
            reason: "x".repeat(2 * LIMIT),
            kind: "namespace.ensure".into(),
            namespace: String::new(),
            retrying: false,
        })),
    }))
    .await;
    let status = s.closed_with().await;
    assert_status(&status, Code::OutOfRange, "message length too large");
    unchanged(store.as_ref(), &before).await;

    // An oversized Hello whose applied map would ack A's item.
    let mut applied: HashMap<String, i64> = (0..4000)
        .map(|i| (format!("ns/padding-{i:05}-{}", "p".repeat(16)), 1))
        .collect();
    applied.insert("ns/a".into(), 1);
    let mut s = Stream::open(&hub, &a, hello(&a.cluster_id, applied))
        .await
        .unwrap();
    let status = s.closed_with().await;
    assert_status(&status, Code::OutOfRange, "message length too large");
    unchanged(store.as_ref(), &before).await;
    assert_eq!(outbox_depth(store.as_ref(), &a.cluster_id).await, 1);

    // The hub still serves the cluster normally.
    let mut s = Stream::open(&hub, &a, hello(&a.cluster_id, HashMap::new()))
        .await
        .unwrap();
    s.welcome().await;
    assert_eq!(s.work().await.target, "ns/a");
}

/// Sends `body` as the raw request body of `SpokeLink.Connect` over mTLS
/// and returns the status the hub ended the call with.
async fn raw_connect(hub: &TestHub, identity: &Identity, body: &str) -> Status {
    use tonic::codegen::Service as _;
    use tonic::codegen::http;
    let mut channel = mtls_channel(hub, identity).await;
    let request = http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{}/clawfed.link.v1.SpokeLink/Connect",
            address(hub).authority
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(tonic::body::Body::new(body.to_owned()))
        .unwrap();
    std::future::poll_fn(|cx| channel.poll_ready(cx))
        .await
        .unwrap();
    let response = tokio::time::timeout(WAIT, channel.call(request))
        .await
        .expect("response in time")
        .expect("HTTP/2 response");
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    let mut body = response.into_body();
    let mut trailers = None;
    let frames = async {
        while let Some(frame) =
            std::future::poll_fn(|cx| tonic::codegen::Body::poll_frame(Pin::new(&mut body), cx))
                .await
        {
            if let Ok(t) = frame.expect("response frame").into_trailers() {
                trailers = Some(t);
            }
        }
    };
    tokio::time::timeout(WAIT, frames)
        .await
        .expect("the hub ended the call in time");
    let status = trailers
        .as_ref()
        .and_then(Status::from_header_map)
        .or_else(|| Status::from_header_map(&headers))
        .expect("a grpc-status");
    assert_ne!(status.code(), Code::Ok, "{status:?}");
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_are_refused_and_the_hub_keeps_serving() {
    let hub = start_hub(|_| {}).await;
    let store = hub.store();
    let a = enroll(&hub, "exec-a").await;
    let b = enroll(&hub, "exec-b").await;
    link(&hub)
        .send(&a.cluster_id, "ns/a", "namespace.ensure", 1, &json!({}))
        .await
        .unwrap();
    let before = snapshot(store.as_ref()).await;

    // A gRPC frame whose payload is not protobuf (wire type 7).
    let status = raw_connect(&hub, &a, "\x00\x00\x00\x00\x03\x0f\x0f\x0f").await;
    assert_status(&status, Code::Internal, "failed to decode Protobuf message");
    // A frame with an invalid compression flag.
    let status = raw_connect(&hub, &a, "\x07\x00\x00\x00\x01x").await;
    assert_status(&status, Code::Internal, "invalid compression flag");
    // A frame cut short by the end of the stream.
    let status = raw_connect(&hub, &a, "\x00\x00\x00\x00\x64abc").await;
    assert_status(&status, Code::Internal, "Unexpected EOF");
    // Not gRPC framing at all.
    let status = raw_connect(&hub, &a, "GET / HTTP/1.1\r\n\r\n").await;
    assert_ne!(status.code(), Code::Ok);
    unchanged(store.as_ref(), &before).await;

    // The hub keeps serving: B connects, and A too, and A gets its work.
    let mut sb = Stream::open(&hub, &b, hello(&b.cluster_id, HashMap::new()))
        .await
        .unwrap();
    sb.welcome().await;
    let mut sa = Stream::open(&hub, &a, hello(&a.cluster_id, HashMap::new()))
        .await
        .unwrap();
    sa.welcome().await;
    assert_eq!(sa.work().await.target, "ns/a");
}

// ---------------------------------------------------------------------------
// Logs
// ---------------------------------------------------------------------------

/// Everything logged, for scanning.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// The base64 body lines of a PEM block, long enough to be distinctive.
fn pem_body_lines(pem: &str) -> Vec<String> {
    pem.lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 32)
        .map(str::to_owned)
        .collect()
}

/// The one subscriber of this test binary: every test's hub and spokes
/// log into it (at trace for clawfed, debug for dependencies), so the scan
/// below covers all the refused attempts above as well.
fn logs() -> &'static Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .with_ansi(false)
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "debug,clawfed_hub=trace,clawfed_spoke=trace",
            ))
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other subscriber (unset CLAWFED_TEST_LOG)");
        captured
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_never_carry_bootstrap_tokens_or_private_keys() {
    let captured = logs();
    // The shortest certificates the hub accepts (10 s): the spoke renews
    // at two thirds, after about 7 s.
    let hub = start_hub(|c| c.link.cert_ttl_seconds = 10).await;
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, "exec-a", false).await;
    let spoke = start_spoke(&hub, "exec-a", Some(token.clone()), dir.path());
    let identity_file = dir.path().join("identity.json");
    let first: Identity = eventually(WAIT, "identity stored", || async {
        let bytes = tokio::fs::read(&identity_file).await.ok()?;
        serde_json::from_slice(&bytes).ok()
    })
    .await;
    eventually(WAIT, "certificate renewed", || async {
        (cluster(&hub, "exec-a").await?.certificate_serials.len() >= 2).then_some(())
    })
    .await;
    let renewed: Identity = eventually(WAIT, "renewed identity stored", || async {
        let bytes = tokio::fs::read(&identity_file).await.ok()?;
        let id: Identity = serde_json::from_slice(&bytes).ok()?;
        (id.key_pem != first.key_pem).then_some(id)
    })
    .await;
    // A refused enrollment logs too; the reused token must not appear.
    let refused = try_enroll(&hub, "exec-a", &token).await.err().unwrap();
    assert_eq!(refused.code(), Code::Unauthenticated);
    spoke.stop().await.unwrap();

    let logs = captured.text();
    for event in ["link.enrolled", "link.renewed", "link.enroll_refused"] {
        assert!(logs.contains(event), "{event} was not captured");
    }
    assert!(!logs.contains(&token), "the bootstrap token reached a log");
    assert!(
        !logs.contains(clawfed_hub::link::enroll::BOOTSTRAP_PREFIX),
        "a bootstrap token reached a log"
    );
    assert!(!logs.contains("PRIVATE KEY"), "a private key reached a log");
    for line in pem_body_lines(&first.key_pem)
        .into_iter()
        .chain(pem_body_lines(&renewed.key_pem))
    {
        assert!(!logs.contains(&line), "private key material reached a log");
    }
    // The hub's admin token never appears either.
    assert!(!logs.contains(&hub.root_token));
}

/// Issue 31 item 7: a cluster credential alone cannot make the hub hold
/// `Tunnel` streams. Each of 400 streams on one connection sends a 1 MiB
/// first frame and never ends; no tunnel open of the cluster waits for a
/// stream, so each is refused at once with RESOURCE_EXHAUSTED (it used to
/// be buffered whole, then held up to the 10 s open timeout, per stream,
/// with no bound on streams per connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnel_streams_no_open_asked_for_are_refused_before_they_are_buffered() {
    use clawfed_proto::link::v1::tunnel_frame;
    use tonic::codegen::tokio_stream::{self, StreamExt};
    const STREAMS: usize = 400;
    let hub = start_hub(|_| {}).await;
    let identity = enroll(&hub, "exec-a").await;
    let channel = mtls_channel(&hub, &identity).await;
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..STREAMS {
        let mut client =
            SpokeLinkClient::new(channel.clone()).max_encoding_message_size(8 * 1024 * 1024);
        calls.spawn(async move {
            let first = pb::TunnelFrame {
                body: Some(tunnel_frame::Body::Data(vec![i as u8; 1024 * 1024])),
            };
            let frames = tokio_stream::iter([first]).chain(tokio_stream::pending());
            client.tunnel(frames).await.map(|_| ())
        });
    }
    let mut codes = HashMap::<Code, usize>::new();
    while let Some(done) = calls.join_next().await {
        let status = done.unwrap().expect_err("refused");
        if status.code() != Code::ResourceExhausted {
            panic!("{status:?}");
        }
        *codes.entry(status.code()).or_default() += 1;
    }
    assert_eq!(codes, HashMap::from([(Code::ResourceExhausted, STREAMS)]));
    let metrics = hub.scrape_metrics().await;
    assert!(
        metrics.contains(&format!(
            "occ_tunnel_unpaired_streams_refused_total {STREAMS}"
        )),
        "{metrics}"
    );
}
