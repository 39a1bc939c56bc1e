//! An air-gapped execution cluster runs an Agent end to end (issue 30).
//!
//! `exec-air` (e2e/cluster.sh) pulls only from its registry mirror
//! `mirror.airgap.test`: its pod runner refuses any other image
//! (ErrImagePull) and kwok makes none of its Pods Ready, so a Pod runs only
//! if the spoke rewrote its image to the mirror. The model API is a host
//! process on 127.0.0.2, which no Pod can reach (a Pod's 127.0.0.2 is its
//! own loopback); the one way to it is the corporate proxy, tinyproxy on
//! the Pod network's host end (198.18.0.1), which the spoke hands the
//! Harness as HTTPS_PROXY/HTTP_PROXY with NODE_USE_ENV_PROXY.
//!
//! An embedded OpenClaw Agent (the real runtime) is deployed through a hub
//! and a spoke configured with that mirror and proxy: it turns Active only
//! after the hub's model turn reached the model, through the proxy, and the
//! proxy's log and the model's record both show it.
//!
//! Needs `e2e/cluster.sh up exec-air`, the Pod network, tinyproxy.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use clawfed_hub::client::HubClient;
use clawfed_hub::model::{Agent, AgentRevision, Namespace, RevisionPhase};
use clawfed_spoke::apply::environment::{ClusterEnvironment, RegistryMirror, WorkloadProxy};
use clawfed_spoke::config::SpokeConfig;
use clawfed_spoke::exec::Executor;
use clawfed_spoke::tunnel::resolve::KubeHarnessDialer;
use clawfed_spoke::tunnel::{TunnelSettings, Tunnels};
use clawfed_tests::api::HubTestExt;
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::procs::Proc;
use clawfed_tests::{kube_env, openclaw, spoke_env};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The air-gapped cluster (e2e/cluster.sh).
const CLUSTER: &str = "exec-air";
/// Its registry mirror (e2e/cluster.sh's AIRGAP_MIRROR_HOST).
const MIRROR: &str = "mirror.airgap.test";
/// The Pod network's host end: the only host address Pods reach.
const POD_NET_HOST: &str = "198.18.0.1";
/// The model API's host address: loopback, so no Pod reaches it directly.
const MODEL_HOST: &str = "127.0.0.2";

const WAIT: Duration = Duration::from_secs(60);

/// tinyproxy's port. It cannot bind port 0, so a fixed one: below the
/// kernel's ephemeral range (never handed to a port-0 listener or an
/// outbound connection) on the Pod network's host end, where nothing else
/// binds a fixed port.
const PROXY_PORT: u16 = 3128;

/// tinyproxy on the Pod network's host end, admitting the Pod network,
/// logging every request it forwards.
struct Proxy {
    port: u16,
    dir: PathBuf,
    proc: Proc,
}

impl Proxy {
    async fn start(dir: &std::path::Path) -> Result<Self> {
        let binary = ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .context("this test needs tinyproxy (scripts/test.sh installs it)")?;
        let port = PROXY_PORT;
        // The model host only: the runtime also tries the npm registry
        // (its startup doctor), which a test may never reach. Refused with
        // 403, as a corporate proxy refuses what it does not allow.
        let filter = dir.join("tinyproxy.filter");
        std::fs::write(&filter, format!("^{}$\n", MODEL_HOST.replace('.', "\\.")))?;
        let config = dir.join("tinyproxy.conf");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListen {POD_NET_HOST}\nTimeout 600\nMaxClients 100\n\
                 LogLevel Info\nAllow 198.18.0.0/15\nDisableViaHeader Yes\n\
                 FilterDefaultDeny Yes\nFilterType ere\nFilter \"{}\"\n",
                filter.display()
            ),
        )?;
        let mut c = Command::new(binary);
        c.arg("-d").arg("-c").arg(&config);
        let proc = Proc::spawn("tinyproxy", &mut c, dir)?;
        let authority = format!("{POD_NET_HOST}:{port}");
        kube_env::eventually(WAIT, "tinyproxy accepting", || async {
            Ok(tokio::net::TcpStream::connect(&authority).await.ok())
        })
        .await?;
        Ok(Self {
            port,
            dir: dir.to_owned(),
            proc,
        })
    }

    fn url(&self) -> String {
        format!("http://{POD_NET_HOST}:{}", self.port)
    }

    fn log(&self) -> String {
        Proc::text(&self.dir.join("tinyproxy.out")) + &Proc::text(&self.dir.join("tinyproxy.err"))
    }
}

/// The model stand-in, in this process, on the host's 127.0.0.2.
async fn model_on_loopback(shutdown: CancellationToken) -> Result<String> {
    use clawfed_pods::standin::{self, model::Model};
    let listener = tokio::net::TcpListener::bind((MODEL_HOST, 0)).await?;
    let addr = listener.local_addr()?;
    let model = Arc::new(Model::from_env(
        [(
            "MODEL_STANDIN_MODELS".to_string(),
            openclaw::MODEL_ID.to_string(),
        )]
        .into(),
    ));
    tokio::spawn(standin::serve(
        listener,
        standin::model::router(model),
        shutdown,
    ));
    Ok(format!("http://{addr}/v1"))
}

/// The waiting reason of the Pod's first container, if any.
fn waiting_reason(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_air_gapped_cluster_runs_an_agent_through_its_mirror_and_proxy() -> Result<()> {
    let Some(air) = kube_env::cluster_or_skip(CLUSTER).await? else {
        return Ok(());
    };
    clawfed_tests::link::init_test_logging();
    let dir = tempfile::tempdir()?;
    let shutdown = CancellationToken::new();
    let model_url = model_on_loopback(shutdown.clone()).await?;
    let proxy = Proxy::start(dir.path()).await?;

    let mut hub = TestHub::start_with_gateways(
        Backend::Sqlite,
        |c| {
            c.pipeline.enabled = true;
            c.pipeline.path_probe = true;
            // The runtime needs 10-20 s to turn ready on an idle machine.
            c.pipeline.ready_deadline_seconds = 300;
            c.worker.max_attempts = 8;
        },
        clawfed_hub::worker::Handlers::builtin(),
        None,
    )
    .await;
    let rest = HubClient::new(&hub.rest, Some(hub.root_token.clone()))?;
    let id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let cluster = format!("{CLUSTER}-{}", &id[..6]);

    // The spoke of the air-gapped cluster: its Pods pull from the mirror,
    // reach the outside through the proxy.
    let spoke_config = SpokeConfig {
        cluster: ClusterEnvironment {
            registry_mirrors: vec![RegistryMirror {
                from: "clawfed.test".into(),
                to: format!("{MIRROR}/clawfed.test"),
            }],
            proxy: Some(
                WorkloadProxy::parse(&proxy.url(), Vec::new()).map_err(anyhow::Error::msg)?,
            ),
            ..Default::default()
        },
        ..SpokeConfig::default()
    };
    let (reports_tx, reports_rx) = tokio::sync::mpsc::channel(1024);
    let spoke_client = spoke_env::spoke_client(&air).await?;
    let executor = Arc::new(Executor::new(
        spoke_client.clone(),
        spoke_config,
        reports_tx,
    ));
    // The hub's data path and model turns reach the Harness through the
    // spoke's tunnels.
    let tunnels = Arc::new(Tunnels::new(
        Arc::new(KubeHarnessDialer::new(spoke_client, executor.clone())),
        TunnelSettings::default(),
    ));
    let token = clawfed_tests::link::bootstrap_token(&hub, &cluster, false).await;
    let link = clawfed_tests::link::kube_link(&hub, &cluster, token, dir.path(), executor)?
        .with_tunnels(tunnels);
    let spoke = tokio::spawn(link.run(reports_rx, shutdown.clone()));

    let tenant = format!("air{id}");
    let ns: Namespace = rest.create_namespace(&tenant).await?;
    let probe_ns = air.create_namespace("air-pull").await?;
    let result = check(
        &rest,
        &air.admin(),
        &ns,
        &cluster,
        &model_url,
        &proxy,
        &probe_ns.name,
    )
    .await;

    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), spoke).await;
    hub.stop().await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(air.admin());
    for name in [&ns.data_plane_namespace, &probe_ns.name] {
        match namespaces.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => eprintln!("cleanup: namespace {name}: {e}"),
        }
    }
    drop(proxy.proc);
    result
}

async fn check(
    rest: &HubClient,
    air: &Client,
    ns: &Namespace,
    cluster: &str,
    model_url: &str,
    proxy: &Proxy,
    probe_ns: &str,
) -> Result<()> {
    // The cluster refuses an image that is not from its mirror: never Ready.
    let pods: Api<Pod> = Api::namespaced(air.clone(), probe_ns);
    let outside: Pod = serde_json::from_value(json!({
        "metadata": { "name": "outside" },
        "spec": { "containers": [{
            "name": "c", "image": "clawfed.test/harness-standin:test",
            "ports": [{ "containerPort": 8080 }]
        }] }
    }))?;
    pods.create(&PostParams::default(), &outside).await?;
    let refused = kube_env::eventually(WAIT, "the unmirrored image refused", || async {
        let p = pods.get("outside").await?;
        Ok((waiting_reason(&p).as_deref() == Some("ErrImagePull")).then_some(p))
    })
    .await?;
    let ready = refused
        .status
        .and_then(|s| s.conditions)
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    ensure!(!ready, "a Pod of an unmirrored image is never Ready");

    rest.wait_online(cluster, WAIT).await?;

    // An embedded OpenClaw Agent whose model provider is the model API.
    let _: serde_json::Value = rest
        .call(
            reqwest::Method::POST,
            &format!("/namespaces/{}/configurations", ns.name),
            Some(json!({ "name": "oc", "data": {
                "models": { "providers": { "standin": {
                    "baseUrl": model_url, "api": "openai-completions",
                    "models": [{ "id": openclaw::MODEL_ID, "name": openclaw::MODEL_ID }] } } },
                "agents": { "defaults": { "model": {
                    "primary": format!("standin/{}", openclaw::MODEL_ID) } } }
            } })),
        )
        .await?;
    let agent: Agent = rest
        .call(
            reqwest::Method::POST,
            &format!("/namespaces/{}/agents", ns.name),
            Some(json!({
                "name": "air",
                "spec": {
                    "harnessKind": "embedded-openclaw",
                    "image": openclaw::image()?,
                    "configuration": "oc",
                    "placement": { "cluster": cluster },
                }
            })),
        )
        .await?;
    let _: serde_json::Value = rest
        .call(
            reqwest::Method::PUT,
            &format!(
                "/namespaces/{}/agents/{}/credentials/model-api-key",
                ns.name, agent.name
            ),
            Some(json!({ "value": "sk-air-gapped" })),
        )
        .await?;
    let _: AgentRevision = rest
        .call(
            reqwest::Method::POST,
            &format!("/namespaces/{}/agents/{}/deploy", ns.name, agent.name),
            None,
        )
        .await?;
    let active = kube_env::eventually(openclaw::START_WAIT, "revision 1 Active", || async {
        let r: AgentRevision = rest
            .call(
                reqwest::Method::GET,
                &format!("/namespaces/{}/agents/{}/revisions/1", ns.name, agent.name),
                None,
            )
            .await?;
        ensure!(r.phase != RevisionPhase::Failed, "failed: {:?}", r.reason);
        Ok((r.phase == RevisionPhase::Active).then_some(r))
    })
    .await
    .with_context(|| format!("tinyproxy log:\n{}", proxy.log()))?;
    ensure!(active.number == 1);

    // The Harness ran from the mirror, with the proxy in its environment.
    let harness: Api<Pod> = Api::namespaced(air.clone(), &ns.data_plane_namespace);
    let lp =
        ListParams::default().labels(&format!("{}={}", clawfed_proto::labels::AGENT, agent.name));
    let pod = harness
        .list(&lp)
        .await?
        .items
        .into_iter()
        .next()
        .context("the Harness Pod")?;
    let c = &pod.spec.as_ref().context("spec")?.containers[0];
    let image = c.image.clone().unwrap_or_default();
    ensure!(
        image == format!("{MIRROR}/{}", openclaw::image()?),
        "the Harness image is the mirror's: {image}"
    );
    let env = |name: &str| {
        c.env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    ensure!(env("HTTP_PROXY") == Some(proxy.url()), "{:?}", c.env);
    ensure!(env("NODE_USE_ENV_PROXY").as_deref() == Some("1"));

    // The activation's model turn reached the model, and through the proxy.
    let (count, users) = openclaw::model_requests(model_url).await?;
    ensure!(count >= 1, "the model was never asked");
    ensure!(
        users
            .iter()
            .any(|u| u.contains(clawfed_hub::tunnel::probe::MODEL_TURN_MESSAGE)),
        "the model was asked the activation turn: {users:?}"
    );
    let model_authority = model_url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    let log = proxy.log();
    ensure!(
        log.contains(&model_authority),
        "the proxy carried the model request to {model_authority}:\n{log}"
    );
    Ok(())
}
