//! Issue 16, TLS on the admin API: a real in-process hub serving REST and
//! gRPC over rustls from certificate files minted here with rcgen, the real
//! `clawfed` CLI binary as its client, and tonic for gRPC.
//!
//! - REST and gRPC over TLS, with `--ca-file` / `CLAWFED_CA_FILE`;
//! - a hub whose certificate does not chain to the CLI's CA is refused,
//!   with a message that says so;
//! - client certificates from `api.tls.clientCaFile` authenticate as the
//!   API token their CN names; one from another CA is refused;
//! - certificate files replaced while the hub runs serve the next
//!   connection, a broken pair is refused and the old one kept;
//! - plain HTTP on an address beyond loopback refuses to start unless
//!   `api.insecure` is set.
//!
//! TLS is not a store concern, so these run on SQLite; the token lookup by
//! name is in the store conformance suite (both backends).
//!
//! The CLI binary must be built (`cargo build -p clawfed-hub --bins`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clawfed_hub::auth::Role;
use clawfed_hub::config::Config;
use clawfed_hub::worker::Handlers;
use clawfed_proto::admin::v1 as pb;
use clawfed_proto::admin::v1::admin_service_client::AdminServiceClient;
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::procs::bin;
use clawfed_tests::until;
use rustls_pki_types::CertificateDer;

/// Upper bound of every wait; generous for a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(30);

// ---- certificates ----------------------------------------------------------

/// A CA minted for one test.
struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

/// A certificate and its key, PEM, and the certificate's DER.
struct Pair {
    cert_pem: String,
    key_pem: String,
    der: CertificateDer<'static>,
    /// When it expires (Unix seconds).
    not_after: i64,
}

impl Ca {
    fn new(name: &str) -> Self {
        let (pem, issuer) = clawfed_tests::certs::ca(name);
        Self { pem, issuer }
    }

    /// A serving certificate for 127.0.0.1 and localhost, expiring at
    /// the start of `year` (so rotations are told apart by expiry too).
    fn server(&self, year: i32) -> Pair {
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.not_after = rcgen::date_time_ymd(year, 1, 1);
        self.sign(params, rcgen::KeyPair::generate().unwrap())
    }

    /// A client certificate whose subject CN is `cn`.
    fn client(&self, cn: &str) -> Pair {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params, rcgen::KeyPair::generate().unwrap())
    }

    fn sign(&self, params: rcgen::CertificateParams, key: rcgen::KeyPair) -> Pair {
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
            not_after: params.not_after.unix_timestamp(),
        }
    }
}

/// Writes `text` to `path` the way a Secret volume changes: a new file
/// renamed over the old one, so no reader sees half of it.
fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Files of one test: the hub's pair, and CAs/client pairs by name.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `text` as `name`; returns its path as a string for the CLI.
    fn put(&self, name: &str, text: &str) -> String {
        let path = self.path(name);
        write_atomic(&path, text);
        path.display().to_string()
    }

    /// Makes `pair` the hub's serving pair.
    fn serve(&self, pair: &Pair) {
        self.put("tls.key", &pair.key_pem);
        self.put("tls.crt", &pair.cert_pem);
    }
}

// ---- hub and clients -------------------------------------------------------

/// A hub serving TLS from `files` (`tls.crt`, `tls.key`), with client
/// certificates from `client_ca` when given; files polled every 100 ms.
async fn tls_hub(files: &Files, client_ca: Option<&str>) -> TestHub {
    let cert = files.path("tls.crt");
    let key = files.path("tls.key");
    let client_ca = client_ca.map(PathBuf::from);
    TestHub::start_with(
        Backend::Sqlite,
        move |c| {
            c.api.tls.cert_file = Some(cert);
            c.api.tls.key_file = Some(key);
            c.api.tls.client_ca_file = client_ca;
            c.api.tls.reload_interval_ms = 100;
        },
        Handlers::builtin(),
    )
    .await
}

fn rest_addr(hub: &TestHub) -> SocketAddr {
    hub.hub.as_ref().expect("running").rest_addr
}

fn grpc_addr(hub: &TestHub) -> SocketAddr {
    hub.hub.as_ref().expect("running").grpc_addr
}

fn https(hub: &TestHub) -> String {
    format!("https://{}", rest_addr(hub))
}

/// Runs the `clawfed` CLI with `args` and `env` only (a developer's
/// `CLAWFED_*` variables never leak in).
async fn cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = std::process::Command::new(bin("clawfed").expect("clawfed binary"));
    cmd.env_clear().args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    tokio::task::spawn_blocking(move || cmd.output().expect("run clawfed"))
        .await
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[track_caller]
fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "clawfed failed: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        stdout(out),
        stderr(out)
    );
}

/// A gRPC admin client over TLS trusting `ca_pem`, presenting `identity`.
async fn grpc(
    addr: SocketAddr,
    ca_pem: &str,
    identity: Option<&Pair>,
) -> Result<AdminServiceClient<tonic::transport::Channel>, tonic::transport::Error> {
    let mut tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    if let Some(pair) = identity {
        tls = tls.identity(tonic::transport::Identity::from_pem(
            &pair.cert_pem,
            &pair.key_pem,
        ));
    }
    let channel = tonic::transport::Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(AdminServiceClient::new(channel))
}

fn bearer<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    req
}

/// The leaf certificate a new connection to `addr` is served, trusting
/// any of `cas` (only what is served matters here).
async fn served_leaf(addr: SocketAddr, cas: &[&Ca]) -> anyhow::Result<CertificateDer<'static>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        let der = rustls_pki_types::pem::PemObject::from_pem_slice(ca.pem.as_bytes())?;
        roots.add(der)?;
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let conn = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect("localhost".try_into()?, tcp)
        .await?;
    let leaf = conn
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .context("no certificate served")?;
    Ok(leaf.clone().into_owned())
}

/// The value of the metric line starting with `prefix` on the hub's
/// metrics endpoint (0 when absent).
async fn metric(hub: &TestHub, prefix: &str) -> anyhow::Result<f64> {
    let text = hub
        .http
        .get(format!("{}/metrics", hub.metrics))
        .send()
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .map(str::parse)
        .transpose()?
        .unwrap_or(0.0))
}

// ---- tests -----------------------------------------------------------------

/// REST through the CLI (flags and environment) and gRPC through tonic,
/// both over TLS; plain HTTP on the TLS ports gets nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_and_grpc_over_tls_with_the_cli() {
    let files = Files::new();
    let ca = Ca::new("admin CA");
    let ca_file = files.put("ca.crt", &ca.pem);
    files.serve(&ca.server(2040));
    let hub = tls_hub(&files, None).await;
    let server = https(&hub);
    let token = hub.root_token.clone();

    let out = cli(
        &[
            "--server",
            &server,
            "--ca-file",
            &ca_file,
            "--token",
            &token,
            "namespaces",
            "create",
            "team-a",
        ],
        &[],
    )
    .await;
    assert_ok(&out);
    let out = cli(
        &["namespaces", "list", "-o", "json"],
        &[
            ("CLAWFED_SERVER", &server),
            ("CLAWFED_CA_FILE", &ca_file),
            ("CLAWFED_TOKEN", &token),
        ],
    )
    .await;
    assert_ok(&out);
    assert!(stdout(&out).contains("\"team-a\""), "{}", stdout(&out));

    // The REST port speaks only TLS.
    let plain = format!("http://{}", rest_addr(&hub));
    let out = cli(
        &["--server", &plain, "--token", &token, "namespaces", "list"],
        &[],
    )
    .await;
    assert!(!out.status.success(), "plain HTTP was served");

    // gRPC over TLS with a bearer token.
    let mut client = grpc(grpc_addr(&hub), &ca.pem, None).await.expect("connect");
    let listed = client
        .list_namespaces(bearer(pb::ListNamespacesRequest {}, &token))
        .await
        .expect("list over TLS")
        .into_inner();
    assert!(
        listed.items.iter().any(|n| n.name == "team-a"),
        "{listed:?}"
    );
    // And only TLS.
    let plain = tonic::transport::Endpoint::from_shared(format!("http://{}", grpc_addr(&hub)))
        .unwrap()
        .connect()
        .await;
    if let Ok(channel) = plain {
        let status = AdminServiceClient::new(channel)
            .list_namespaces(bearer(pb::ListNamespacesRequest {}, &token))
            .await;
        assert!(status.is_err(), "plain gRPC was served");
    }
}

/// A hub whose certificate does not chain to the CLI's CA is refused, and
/// the error says so (naming the CA file); TLS options never fall back to
/// plain HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_outside_the_ca_file_is_refused_by_the_cli() {
    let files = Files::new();
    let ca = Ca::new("admin CA");
    files.serve(&ca.server(2040));
    let other = Ca::new("some other CA");
    let other_file = files.put("other.crt", &other.pem);
    let hub = tls_hub(&files, None).await;
    let server = https(&hub);
    let token = hub.root_token.clone();

    let out = cli(
        &[
            "--server",
            &server,
            "--ca-file",
            &other_file,
            "--token",
            &token,
            "namespaces",
            "list",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "the hub's certificate does not chain to --ca-file {other_file}"
        )),
        "{err}"
    );
    assert!(err.contains("UnknownIssuer"), "{err}");

    // Without --ca-file only the system's roots are trusted.
    let out = cli(
        &["--server", &server, "--token", &token, "namespaces", "list"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("does not chain to the system's trusted roots"),
        "{}",
        stderr(&out)
    );

    // Asking for TLS against an http:// server is a usage error.
    let plain = format!("http://{}", rest_addr(&hub));
    let out = cli(
        &[
            "--server",
            &plain,
            "--ca-file",
            &other_file,
            "namespaces",
            "list",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--ca-file"), "{}", stderr(&out));
    let out = cli(
        &[
            "--server",
            &server,
            "--client-cert",
            &other_file,
            "namespaces",
            "list",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--client-key"), "{}", stderr(&out));
}

/// A client certificate signed by `api.tls.clientCaFile` acts as the API
/// token its CN names (role, scope, revocation); bearer tokens keep
/// working; a certificate from another CA is refused in the handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_authenticate_as_the_token_their_cn_names() {
    let files = Files::new();
    let ca = Ca::new("admin CA");
    let ca_file = files.put("ca.crt", &ca.pem);
    files.serve(&ca.server(2040));
    let clients = Ca::new("automation CA");
    let clients_file = files.put("clients.crt", &clients.pem);
    let hub = tls_hub(&files, Some(&clients_file)).await;
    let server = https(&hub);
    let root = hub.root_token.clone();

    // A bearer token works on a hub that asks for client certificates.
    assert_ok(
        &cli(
            &[
                "--server",
                &server,
                "--ca-file",
                &ca_file,
                "--token",
                &root,
                "namespaces",
                "create",
                "team-a",
            ],
            &[],
        )
        .await,
    );
    // The token the certificate names; its secret is never used here.
    hub.token("automation", Some("team-a"), Role::Deployer)
        .await;
    let automation = clients.client("automation");
    let cert = files.put("automation.crt", &automation.cert_pem);
    let key = files.put("automation.key", &automation.key_pem);
    let with_cert = |args: &[&str]| {
        let mut all = vec![
            "--server",
            server.as_str(),
            "--ca-file",
            ca_file.as_str(),
            "--client-cert",
            cert.as_str(),
            "--client-key",
            key.as_str(),
        ];
        all.extend_from_slice(args);
        all.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cli(&args, &[]).await
    };

    // As the deployer token of team-a: may read there ...
    assert_ok(&run(with_cert(&["agents", "list", "-n", "team-a"])).await);
    // ... and may not create namespaces.
    let out = run(with_cert(&["namespaces", "create", "team-b"])).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("HTTP 403"), "{}", stderr(&out));
    // A bearer token, when sent, decides over the certificate.
    let mut args = with_cert(&["namespaces", "create", "team-b"]);
    args.splice(0..0, ["--token".to_string(), root.clone()]);
    assert_ok(&run(args).await);

    // The same over gRPC, with no bearer token at all.
    let mut client = grpc(grpc_addr(&hub), &ca.pem, Some(&automation))
        .await
        .expect("connect with a client certificate");
    let listed = client
        .list_namespaces(pb::ListNamespacesRequest {})
        .await
        .expect("authenticated by the certificate")
        .into_inner();
    let names: Vec<_> = listed.items.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["team-a"], "a team-a token sees team-a only");

    // A CN naming no token is unauthenticated, and says why.
    let ghost = clients.client("ghost");
    let ghost_cert = files.put("ghost.crt", &ghost.cert_pem);
    let ghost_key = files.put("ghost.key", &ghost.key_pem);
    let out = cli(
        &[
            "--server",
            &server,
            "--ca-file",
            &ca_file,
            "--client-cert",
            &ghost_cert,
            "--client-key",
            &ghost_key,
            "namespaces",
            "list",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("HTTP 401"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("CN \"ghost\" names no API token"),
        "{}",
        stderr(&out)
    );
    let status = grpc(grpc_addr(&hub), &ca.pem, Some(&ghost))
        .await
        .expect("connect")
        .list_namespaces(pb::ListNamespacesRequest {})
        .await
        .expect_err("no token named ghost");
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    assert!(
        status.message().contains("names no API token"),
        "{status:?}"
    );

    // A certificate with the right CN from another CA fails the handshake.
    let stranger = Ca::new("stranger CA").client("automation");
    let stranger_cert = files.put("stranger.crt", &stranger.cert_pem);
    let stranger_key = files.put("stranger.key", &stranger.key_pem);
    let out = cli(
        &[
            "--server",
            &server,
            "--ca-file",
            &ca_file,
            "--client-cert",
            &stranger_cert,
            "--client-key",
            &stranger_key,
            "agents",
            "list",
            "-n",
            "team-a",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the hub refused the handshake"),
        "{}",
        stderr(&out)
    );
    let refused = match grpc(grpc_addr(&hub), &ca.pem, Some(&stranger)).await {
        Err(_) => true,
        Ok(mut c) => c
            .list_namespaces(pb::ListNamespacesRequest {})
            .await
            .is_err(),
    };
    assert!(refused, "a certificate from another CA was accepted");

    // Revoking the token revokes what its certificates may do.
    hub.store()
        .revoke_token("automation", chrono::Utc::now())
        .await
        .unwrap();
    let out = run(with_cert(&["agents", "list", "-n", "team-a"])).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("revoked"), "{}", stderr(&out));
}

/// Certificate files replaced while the hub runs (by a certificate of
/// another CA, so the CLI can tell) serve every new connection, REST and
/// gRPC; a pair whose key does not match is refused and the one before
/// keeps serving; the expiry metric follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_certificate_files_serve_new_connections() {
    let files = Files::new();
    let old_ca = Ca::new("old CA");
    let new_ca = Ca::new("new CA");
    let old = old_ca.server(2040);
    files.serve(&old);
    let new_ca_file = files.put("new-ca.crt", &new_ca.pem);
    let hub = tls_hub(&files, None).await;
    let server = https(&hub);
    let token = hub.root_token.clone();
    let cas = [&old_ca, &new_ca];
    assert_eq!(served_leaf(rest_addr(&hub), &cas).await.unwrap(), old.der);
    let list = [
        "--server",
        server.as_str(),
        "--ca-file",
        new_ca_file.as_str(),
        "--token",
        token.as_str(),
        "namespaces",
        "list",
    ];
    let out = cli(&list, &[]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));

    // Rotate, as cert-manager would.
    let new = new_ca.server(2041);
    files.serve(&new);
    for addr in [rest_addr(&hub), grpc_addr(&hub)] {
        until(WAIT, "the new certificate to be served", || async {
            Ok((served_leaf(addr, &cas).await? == new.der).then_some(()))
        })
        .await
        .unwrap();
    }
    assert_ok(&cli(&list, &[]).await);
    let mut client = grpc(grpc_addr(&hub), &new_ca.pem, None).await.unwrap();
    client
        .list_namespaces(bearer(pb::ListNamespacesRequest {}, &token))
        .await
        .expect("gRPC with the new certificate");
    let not_after = new.not_after;
    let expiry = "occ_api_tls_certificate_not_after_timestamp_seconds ";
    assert_eq!(metric(&hub, expiry).await.unwrap(), not_after as f64);

    // A certificate whose key is not in the key file: refused, logged, and
    // the pair before keeps serving.
    let errors = "occ_api_tls_reloads_total{result=\"error\"}";
    let before = metric(&hub, errors).await.unwrap();
    let mismatched = old_ca.server(2042);
    files.put("tls.crt", &mismatched.cert_pem);
    until(WAIT, "the broken pair to be refused", || async {
        Ok((metric(&hub, errors).await? > before).then_some(()))
    })
    .await
    .unwrap();
    assert_eq!(served_leaf(rest_addr(&hub), &cas).await.unwrap(), new.der);
    assert_eq!(served_leaf(grpc_addr(&hub), &cas).await.unwrap(), new.der);
    assert_ok(&cli(&list, &[]).await);
    assert_eq!(metric(&hub, expiry).await.unwrap(), not_after as f64);

    // Completing the rotation (its key arrives) serves it.
    files.put("tls.key", &mismatched.key_pem);
    until(WAIT, "the completed pair to be served", || async {
        Ok((served_leaf(rest_addr(&hub), &cas).await? == mismatched.der).then_some(()))
    })
    .await
    .unwrap();
}

/// Plain HTTP beyond loopback: the hub refuses to start, naming what to
/// set; a TLS pair that does not load refuses to start too. (With
/// `api.insecure: true` it starts and warns: `config::tests`; not run here
/// so no test listens on every interface.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_beyond_loopback_refuses_to_start() {
    // The binary, as an operator runs it.
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("hub.db").display());
    let mut child = std::process::Command::new(bin("clawfed-hub").unwrap())
        .env_clear()
        .env("CLAWFED_DATABASE_URL", &db)
        .env("CLAWFED_REST_ADDR", "0.0.0.0:0")
        .env("CLAWFED_GRPC_ADDR", "127.0.0.1:0")
        .env("CLAWFED_METRICS_ADDR", "127.0.0.1:0")
        .env("CLAWFED_LINK_ENABLED", "false")
        .env("CLAWFED_LINK_CA_DIR", dir.path().join("ca"))
        .arg("serve")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = until(WAIT, "clawfed-hub to exit", || {
        let exited = child.try_wait();
        async move { Ok(exited?) }
    })
    .await;
    if status.is_err() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let status = status.expect("clawfed-hub refused to start");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    assert!(err.contains("config field api.tls"), "{err}");
    assert!(err.contains("0.0.0.0:0"), "{err}");
    assert!(err.contains("api.insecure: true"), "{err}");

    // A config built in code is checked too, before anything listens.
    let db = clawfed_tests::db::sqlite().await;
    let mut config = clawfed_tests::hub::test_config(&db.url);
    config.api.grpc_addr = "0.0.0.0:0".parse().unwrap();
    let err = clawfed_hub::server::start_with_store(&config, db.dyn_store(), Handlers::builtin())
        .await
        .expect_err("plain gRPC beyond loopback");
    assert!(err.to_string().contains("api.tls"), "{err}");

    // TLS whose key does not match its certificate does not start.
    let files = Files::new();
    let ca = Ca::new("admin CA");
    let a = ca.server(2040);
    let b = ca.server(2040);
    files.put("tls.crt", &a.cert_pem);
    files.put("tls.key", &b.key_pem);
    let config = tls_config(&db.url, &files);
    let err = clawfed_hub::server::start_with_store(&config, db.dyn_store(), Handlers::builtin())
        .await
        .expect_err("a mismatched pair");
    let chain = clawfed_proto::errors::chain(&err);
    assert!(chain.contains("do not form a usable pair"), "{chain}");
}

fn tls_config(db_url: &str, files: &Files) -> Config {
    let mut config = clawfed_tests::hub::test_config(db_url);
    config.api.tls.cert_file = Some(files.path("tls.crt"));
    config.api.tls.key_file = Some(files.path("tls.key"));
    config
}
