//! The spoke of an air-gapped cluster reaches the hub only through an HTTP
//! CONNECT proxy (issue 16, part 4): a real proxy (Debian's tinyproxy,
//! started here on a generated config with BasicAuth, Allow and
//! ConnectPort) and the real `clawfed-spoke` binary in a network namespace
//! this test creates. The namespace has loopback and one veth pair in
//! 198.18.0.0/15; the proxy listens on the pair's host end, the hub's link
//! only on the host's 127.0.0.1, which the namespace cannot reach (its
//! 127.0.0.1 is its own). So the spoke gets to the hub through the proxy
//! or not at all, with mTLS end to end inside the tunnel.
//!
//! With the `exec-a` test cluster up, a spoke with the Kubernetes applier
//! behind the proxy applies a Harness there.
//!
//! Needs root and iproute2 (the namespace) and tinyproxy
//! (`apt-get install tinyproxy`; scripts/test.sh installs it), and the
//! spoke binary of this target dir (`cargo build -p clawfed-spoke --bins`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use clawfed_hub::model::ConnectionState;
use clawfed_proto::work::{NamespaceWork, WorkSpec, target};
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::kube_env;
use clawfed_tests::link::{bootstrap_token, cluster, eventually, hub_ca, hub_url};
use clawfed_tests::netns::Netns;
use clawfed_tests::procs::{self, Proc};
use clawfed_tests::spoke_env::{harness_work, tenant_names};
use clawfed_tests::{control_env, spoke_env};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);
const USER: &str = "spoke";

/// tinyproxy's ports. It cannot bind port 0, so it takes fixed ports, on
/// the host end of the test's own network namespace link (an address no
/// other test has) and below the kernel's ephemeral range (never handed
/// out to a port-0 listener or an outbound connection).
const PROXY_PORT: u16 = 3128;
/// The second proxy of a test, on the same address.
const SECOND_PROXY_PORT: u16 = 3129;

/// A tinyproxy process on a generated config; killed when dropped.
struct Tinyproxy {
    addr: String,
    port: u16,
    config: PathBuf,
    dir: PathBuf,
    proc: Option<Proc>,
    runs: u32,
}

impl Tinyproxy {
    /// Writes the config: listen on `addr:port`, admit clients from
    /// `allow` only, require Basic `USER:password`, tunnel only to
    /// `connect_port` (the hub's link port).
    fn configure(
        dir: &Path,
        (addr, port): (&str, u16),
        allow: &str,
        password: &str,
        connect_port: u16,
    ) -> Self {
        let config = dir.join(format!("tinyproxy-{port}.conf"));
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListen {addr}\nTimeout 600\nMaxClients 100\nLogLevel Connect\n\
                 Allow {allow}\nBasicAuth {USER} {password}\nConnectPort {connect_port}\n\
                 DisableViaHeader Yes\n"
            ),
        )
        .unwrap();
        Self {
            addr: addr.to_owned(),
            port,
            config,
            dir: dir.to_owned(),
            proc: None,
            runs: 0,
        }
    }

    /// `host:port` the spoke's errors name.
    fn authority(&self) -> String {
        format!("{}:{}", self.addr, self.port)
    }

    fn url(&self, userinfo: Option<&str>) -> String {
        match userinfo {
            Some(u) => format!("http://{u}@{}", self.authority()),
            None => format!("http://{}", self.authority()),
        }
    }

    /// Starts it in the foreground (`-d`) and waits until it accepts.
    async fn start(&mut self) {
        let binary = which("tinyproxy").unwrap_or_else(|| {
            panic!("this test needs tinyproxy: apt-get install -y tinyproxy (scripts/test.sh does)")
        });
        self.runs += 1;
        let mut c = Command::new(binary);
        c.arg("-d").arg("-c").arg(&self.config);
        let tag = format!("tinyproxy-{}-{}", self.port, self.runs);
        self.proc = Some(Proc::spawn(&tag, &mut c, &self.dir).expect("spawn tinyproxy"));
        let authority = self.authority();
        eventually(WAIT, "tinyproxy accepting", || async {
            tokio::net::TcpStream::connect(&authority).await.ok()
        })
        .await;
    }

    /// kill -9: the proxy is down, its tunnels are cut.
    fn kill(&mut self) {
        self.proc.take().expect("running").kill9().unwrap();
    }

    /// Everything it logged across its runs.
    fn log(&self) -> String {
        (1..=self.runs)
            .map(|run| {
                // In the foreground (-d) it logs to stdout.
                let tag = format!("tinyproxy-{}-{run}", self.port);
                Proc::text(&self.dir.join(format!("{tag}.out")))
                    + &Proc::text(&self.dir.join(format!("{tag}.err")))
            })
            .collect()
    }
}

fn which(program: &str) -> Option<PathBuf> {
    ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"]
        .into_iter()
        .map(|d| Path::new(d).join(program))
        .find(|p| p.exists())
}

/// One spoke process in the namespace, with the ledger applier.
struct Spoke {
    proc: Proc,
    state: PathBuf,
}

impl Spoke {
    fn log(&self) -> String {
        Proc::text(&self.proc.stderr)
    }

    /// Log lines of `event` whose text holds `needle`.
    fn lines(&self, event: &str, needle: &str) -> usize {
        let event = format!("\"message\":\"{event}\"");
        self.log()
            .lines()
            .filter(|l| l.contains(&event) && l.contains(needle))
            .count()
    }

    /// Waits for `n` lines of `event` holding `needle`.
    async fn wait_lines(&self, n: usize, event: &str, needle: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.lines(event, needle) < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {n} {event} lines with {needle:?} within {WAIT:?}; spoke log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What every spoke of a test shares.
struct Setup {
    netns: Netns,
    hub: TestHub,
    dir: tempfile::TempDir,
}

impl Setup {
    async fn new(tag: &str, host: [u8; 4], ns: [u8; 4]) -> Self {
        // Dropped after the spokes (declared later in the test): their
        // guards kill the processes inside first.
        let netns = Netns::create(tag, host, ns).unwrap_or_else(|e| {
            panic!("this test needs root and iproute2 to create a network namespace: {e}")
        });
        let hub = TestHub::start(Backend::Sqlite).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), hub_ca(&hub)).unwrap();
        let link = hub_url(&hub);
        assert!(
            link.starts_with("https://127.0.0.1:"),
            "the hub's link must listen on the host's loopback only: {link}"
        );
        Self { netns, hub, dir }
    }

    fn link_port(&self) -> u16 {
        hub_url(&self.hub)
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .expect("link port")
    }

    async fn token_file(&self, cluster_name: &str) -> PathBuf {
        let token = bootstrap_token(&self.hub, cluster_name, false).await;
        let file = self.dir.path().join(format!("{cluster_name}.token"));
        std::fs::write(&file, token).unwrap();
        file
    }

    /// Starts `clawfed-spoke` inside the namespace for `cluster_name`,
    /// with `env` (e.g. HTTPS_PROXY) and `args` added; nothing of the
    /// test's own proxy environment leaks in.
    fn spoke(
        &self,
        tag: &str,
        cluster_name: &str,
        token_file: &Path,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Spoke {
        let state = self.dir.path().join(tag);
        let mut c = self
            .netns
            .command(&procs::bin("clawfed-spoke").expect("spoke binary"));
        c.args(["--hub-url", &hub_url(&self.hub)])
            .arg("--ca-file")
            .arg(self.dir.path().join("ca.pem"))
            .args(["--cluster-name", cluster_name])
            .arg("--state-dir")
            .arg(&state)
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(["--backoff-max-seconds", "1"])
            .arg("--bootstrap-token-file")
            .arg(token_file)
            .args(args)
            .env("CLAWFED_LOG", "info");
        if !args.contains(&"--applier") {
            c.args(["--applier", "ledger"]);
        }
        for var in [
            "HTTPS_PROXY",
            "https_proxy",
            "NO_PROXY",
            "no_proxy",
            "CLAWFED_HUB_PROXY",
            "CLAWFED_HUB_PROXY_CREDENTIALS_FILE",
        ] {
            c.env_remove(var);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        let proc = Proc::spawn(tag, &mut c, self.dir.path()).expect("spawn spoke");
        Spoke { proc, state }
    }

    async fn wait_state(&self, name: &str, state: ConnectionState, spoke: &Spoke) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if cluster(&self.hub, name)
                .await
                .is_some_and(|c| c.connection_state == state)
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} not {state:?} within {WAIT:?}; spoke log:\n{}",
                spoke.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spoke_whose_only_route_is_the_proxy_enrolls_connects_and_applies_work_through_it() {
    let setup = Setup::new("x", [198, 18, 251, 1], [198, 18, 251, 2]).await;
    let password = format!("pw-{}", uuid::Uuid::new_v4().simple());
    let mut proxy = Tinyproxy::configure(
        setup.dir.path(),
        (&setup.netns.host_addr, PROXY_PORT),
        &setup.netns.ns_addr,
        &password,
        setup.link_port(),
    );
    proxy.start().await;

    // The route is blocked: the same spoke without the proxy, and with
    // the proxy but NO_PROXY exempting the hub, cannot reach the hub.
    let direct_token = setup.token_file("direct").await;
    let direct = setup.spoke("direct", "direct", &direct_token, &[], &[]);
    let exempt = setup.spoke(
        "exempt",
        "direct",
        &direct_token,
        &[
            (
                "HTTPS_PROXY",
                &proxy.url(Some(&format!("{USER}:{password}"))),
            ),
            ("NO_PROXY", "localhost,127.0.0.0/8"),
        ],
        &[],
    );
    for s in [&direct, &exempt] {
        s.wait_lines(2, "link.enroll_retry", "cannot reach the hub")
            .await;
        assert_eq!(s.lines("link.proxy", "\"proxy\":\"direct\""), 1);
    }

    // Through the proxy (credentials in HTTPS_PROXY, as most tools take
    // them): enrolled, connected, online.
    let token = setup.token_file("air-gapped").await;
    let spoke = setup.spoke(
        "proxied",
        "air-gapped",
        &token,
        &[(
            "HTTPS_PROXY",
            &proxy.url(Some(&format!("{USER}:{password}"))),
        )],
        &[],
    );
    setup
        .wait_state("air-gapped", ConnectionState::Online, &spoke)
        .await;
    spoke.wait_lines(1, "link.connected", "").await;
    assert_eq!(spoke.lines("link.enrolled", ""), 1);
    assert!(
        !spoke.log().contains(&password),
        "the proxy password must never be logged"
    );
    assert_eq!(
        spoke.lines(
            "link.proxy",
            &format!("\"proxy\":\"{}\"", proxy.authority())
        ),
        1,
        "{}",
        spoke.log()
    );
    // The proxy carried it: CONNECT to the hub's loopback link port.
    let connect = format!("CONNECT 127.0.0.1:{} HTTP/1.1", setup.link_port());
    assert!(proxy.log().contains(&connect), "{}", proxy.log());

    // Work goes down the tunnel, the result comes back up.
    let id = cluster(&setup.hub, "air-gapped").await.expect("cluster").id;
    let link = setup.hub.hub.as_ref().unwrap().link.clone().unwrap();
    link.send(&id, "ns/proxied", "namespace.ensure", 1, &json!({"n": 1}))
        .await
        .unwrap()
        .expect("queued");
    let store = setup.hub.store();
    let report = eventually(WAIT, "the work result through the proxy", || async {
        store
            .get_report(&id, "ns/proxied", "work-result")
            .await
            .unwrap()
    })
    .await;
    assert_eq!(report.generation, 1);
    let ledger = clawfed_spoke::link::ledger::FileLedger::open(&spoke.state).unwrap();
    assert_eq!(ledger.writes("ns/proxied").await, 1);

    // The proxy goes down: its tunnels are cut and the spoke says which
    // proxy it cannot reach, retrying with backoff as for a hub that is
    // down.
    proxy.kill();
    let unreachable = format!(
        "proxy {} unreachable: connection refused",
        proxy.authority()
    );
    spoke.wait_lines(2, "link.disconnected", &unreachable).await;
    setup
        .wait_state("air-gapped", ConnectionState::Offline, &spoke)
        .await;

    // Back up on the same address: the spoke reconnects by itself.
    proxy.start().await;
    spoke.wait_lines(2, "link.connected", "").await;
    setup
        .wait_state("air-gapped", ConnectionState::Online, &spoke)
        .await;

    // The direct spokes never got through.
    assert!(
        cluster(&setup.hub, "direct")
            .await
            .is_none_or(|c| c.connection_state != ConnectionState::Online)
    );
    assert_eq!(direct.lines("link.enrolled", ""), 0);
    assert_eq!(exempt.lines("link.enrolled", ""), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_that_refuses_is_named_with_its_status_and_the_spoke_keeps_retrying() {
    let setup = Setup::new("r", [198, 18, 251, 5], [198, 18, 251, 6]).await;
    let password = format!("pw-{}", uuid::Uuid::new_v4().simple());
    let mut proxy = Tinyproxy::configure(
        setup.dir.path(),
        (&setup.netns.host_addr, PROXY_PORT),
        &setup.netns.ns_addr,
        &password,
        setup.link_port(),
    );
    proxy.start().await;
    // A second proxy whose ACL admits only the host's loopback, so the
    // namespace is refused.
    let mut acl = Tinyproxy::configure(
        setup.dir.path(),
        (&setup.netns.host_addr, SECOND_PROXY_PORT),
        "127.0.0.1",
        &password,
        setup.link_port(),
    );
    acl.start().await;
    let token = setup.token_file("refused").await;

    // No credentials: 407, said so.
    let anonymous = setup.spoke(
        "anonymous",
        "refused",
        &token,
        &[("https_proxy", &proxy.url(None))],
        &[],
    );
    // Wrong credentials, from a credentials file (as a mounted Secret key)
    // overriding the right ones in the URL: tinyproxy 1.11 answers 401.
    let creds = setup.dir.path().join("proxy-credentials");
    std::fs::write(&creds, format!("{USER}:wrong-{password}\n")).unwrap();
    let wrong = setup.spoke(
        "wrong",
        "refused",
        &token,
        &[(
            "HTTPS_PROXY",
            &proxy.url(Some(&format!("{USER}:{password}"))),
        )],
        &["--hub-proxy-credentials-file", creds.to_str().unwrap()],
    );
    // The explicit flag overrides the environment: the ACL proxy, 403.
    let denied = setup.spoke(
        "denied",
        "refused",
        &token,
        &[(
            "HTTPS_PROXY",
            &proxy.url(Some(&format!("{USER}:{password}"))),
        )],
        &["--hub-proxy", &acl.url(Some(&format!("{USER}:{password}")))],
    );

    let refused = |p: &Tinyproxy| {
        format!(
            "proxy {} refused CONNECT 127.0.0.1:{}",
            p.authority(),
            setup.link_port()
        )
    };
    // Each keeps retrying (two attempts at least), naming the status.
    anonymous
        .wait_lines(
            2,
            "link.enroll_retry",
            &format!(
                "{}: 407 Proxy Authentication Required (no proxy credentials configured)",
                refused(&proxy)
            ),
        )
        .await;
    wrong
        .wait_lines(
            2,
            "link.enroll_retry",
            &format!(
                "{}: 401 Unauthorized (proxy credentials rejected)",
                refused(&proxy)
            ),
        )
        .await;
    denied
        .wait_lines(
            2,
            "link.enroll_retry",
            &format!("{}: 403 Access denied", refused(&acl)),
        )
        .await;
    for s in [&anonymous, &wrong, &denied] {
        assert_eq!(s.lines("link.enrolled", ""), 0, "{}", s.log());
        assert!(!s.log().contains(&password), "a password was logged");
    }
    assert!(
        cluster(&setup.hub, "refused")
            .await
            .is_none_or(|c| c.connection_state != ConnectionState::Online)
    );

    // A proxy that is not there at all, named with its address.
    acl.kill();
    let down = setup.spoke(
        "down",
        "refused",
        &token,
        &[],
        &["--hub-proxy", &acl.url(None)],
    );
    down.wait_lines(
        2,
        "link.enroll_retry",
        &format!("proxy {} unreachable: connection refused", acl.authority()),
    )
    .await;

    // A bad proxy URL stops the spoke at start with the field named.
    let bad = setup.spoke(
        "bad",
        "refused",
        &token,
        &[("HTTPS_PROXY", "socks5://user:secret-pw@198.18.251.5:1080")],
        &[],
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut bad = bad;
    while bad.proc.alive() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a bad HTTPS_PROXY must stop the spoke"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = bad.log();
    assert!(
        log.contains("HTTPS_PROXY: proxy scheme \"socks5\" is not supported"),
        "{log}"
    );
    assert!(!log.contains("secret-pw"), "{log}");
}

/// Forwards connections from `listen:port` to `to` (the host's loopback),
/// until dropped.
struct Forwarder {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Forwarder {
    async fn start(listen: &str, to: String) -> Self {
        let listener = tokio::net::TcpListener::bind((listen, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let to = to.clone();
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Self { port, task }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spoke_behind_the_proxy_applies_a_harness_in_a_real_cluster() {
    let Some(exec_a) = kube_env::cluster_or_skip("exec-a").await.unwrap() else {
        return;
    };
    let setup = Setup::new("k", [198, 18, 251, 9], [198, 18, 251, 10]).await;
    let password = format!("pw-{}", uuid::Uuid::new_v4().simple());
    let mut proxy = Tinyproxy::configure(
        setup.dir.path(),
        (&setup.netns.host_addr, PROXY_PORT),
        &setup.netns.ns_addr,
        &password,
        setup.link_port(),
    );
    proxy.start().await;

    // The spoke acts as its ServiceAccount. In an air-gapped cluster the
    // apiserver is local to it; this one is on the host's loopback, so a
    // forwarder on the pair's host end carries apiserver traffic only (the
    // hub's link stays out of reach), and the kubeconfig names `localhost`
    // for the apiserver's certificate.
    spoke_env::install_spoke_rbac(&exec_a).await.unwrap();
    let kubeconfig = setup.dir.path().join("spoke.kubeconfig");
    control_env::write_service_account_kubeconfig(
        &exec_a,
        spoke_env::SPOKE_NAMESPACE,
        spoke_env::SPOKE_SERVICE_ACCOUNT,
        3600,
        &kubeconfig,
    )
    .await
    .unwrap();
    let api = exec_a
        .server_url()
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_owned();
    assert!(api.starts_with("127.0.0.1:"), "{api}");
    let forwarder = Forwarder::start(&setup.netns.host_addr, api).await;
    let mut doc: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&kubeconfig).unwrap()).unwrap();
    let cluster_entry = &mut doc["clusters"][0]["cluster"];
    cluster_entry["server"] =
        format!("https://{}:{}", setup.netns.host_addr, forwarder.port).into();
    cluster_entry["tls-server-name"] = "localhost".into();
    std::fs::write(&kubeconfig, serde_yaml_ng::to_string(&doc).unwrap()).unwrap();

    let name = format!(
        "air-gapped-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..6]
    );
    let token = setup.token_file(&name).await;
    let spoke = setup.spoke(
        "kube",
        &name,
        &token,
        &[(
            "HTTPS_PROXY",
            &proxy.url(Some(&format!("{USER}:{password}"))),
        )],
        &[
            "--applier",
            "kube",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
    );
    setup
        .wait_state(&name, ConnectionState::Online, &spoke)
        .await;
    let id = cluster(&setup.hub, &name).await.expect("cluster").id;

    // A namespace and a Harness, sent down the proxied link.
    let (tenant, namespace_id, ns) = tenant_names("px");
    let harness = harness_work(&tenant, &namespace_id, &ns, "scout");
    let link = setup.hub.hub.as_ref().unwrap().link.clone().unwrap();
    for (t, spec) in [
        (
            target::namespace(&namespace_id),
            WorkSpec::NamespaceEnsure(NamespaceWork {
                tenant,
                namespace_id: namespace_id.clone(),
                quota: [("pods".to_owned(), "20".to_owned())].into(),
                network: clawfed_proto::work::HarnessNetwork {
                    ingress_from_spoke: true,
                    ingress_from_cidrs: vec![],
                    harness_port: 8080,
                    egress: vec![],
                    dns: None,
                },
                ..Default::default()
            }),
        ),
        (
            target::harness(&namespace_id, "scout", 1),
            WorkSpec::HarnessApply(Box::new(harness)),
        ),
    ] {
        // One after the other, as the pipeline sends them: the spoke applies
        // independent targets at once, so a Harness sent beside its
        // namespace may find no namespace yet.
        let body: serde_json::Value = serde_json::from_slice(&spec.encode()).unwrap();
        link.send(&id, &t, spec.kind().as_str(), 1, &body)
            .await
            .unwrap()
            .expect("queued");
        let store = setup.hub.store();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let report = loop {
            if let Some(r) = store.get_report(&id, &t, "work-result").await.unwrap() {
                break r;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no work result for {t} within 60 s; spoke log:\n{}",
                spoke.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(
            report.body["applied"],
            json!(true),
            "{t}: {:?}",
            report.body
        );
    }
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(exec_a.admin(), &ns);
    let listed = deployments.list(&Default::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1, "the Harness Deployment in {ns}");

    let _ = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(exec_a.admin())
        .delete(&ns, &Default::default())
        .await;
}
