//! The hub role: an in-process hub on a SQLite file, the Agents' revisions
//! seeded in phase `waiting-ready`, and `hub.json` for the others.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clawfed_hub::client::HubClient;
use clawfed_hub::gateway::TransportCredentials;
use clawfed_hub::model::RevisionPhase;
use clawfed_hub::store::{self, Store};
use clawfed_proto::tunnel::harness_authority;
use clawfed_proto::work::{harness, target};

use super::{Args, CLUSTER, HubInfo, RevInfo, SINK, SLOW, SOURCE, TENANT, role_dir, serve_stdin};

pub(super) async fn hub_role(args: &Args) -> anyhow::Result<()> {
    let dir = role_dir(args)?;
    let lo: SocketAddr = "127.0.0.1:0".parse()?;
    let mut config = clawfed_hub::config::Config::default();
    config.database.url = format!("sqlite://{}", dir.join("hub.db").display());
    config.api.rest_addr = lo;
    config.api.grpc_addr = lo;
    config.api.metrics_addr = lo;
    config.link.addr = lo;
    config.link.ca_dir = dir.join("ca");
    config.tunnel.addr = lo;
    // Nothing is rolled out: the bench plays the pipeline's part in the
    // store, so no worker polls it during the measurements.
    config.worker.enabled = false;
    config.pipeline.enabled = false;
    config.pipeline.path_probe = false;
    let store: Arc<dyn Store> = Arc::new(store::connect(&config.database.url).await?);
    let (hub, link) = clawfed_bench::fleet::start_hub_in_process(&config, store.clone()).await?;
    let ingress = hub.tunnel.clone().context("tunnel ingress disabled")?;

    let admin_secret =
        clawfed_bench::fleet::mint_admin_token(store.as_ref(), "tunnel-bench").await?;
    let rest = HubClient::new(&format!("http://{}", hub.rest_addr), Some(admin_secret))?;
    let _: serde_json::Value = rest
        .post("/namespaces", &serde_json::json!({ "name": TENANT }))
        .await?;
    let bootstrap_token = rest.bootstrap_token(CLUSTER).await?;
    let ns = store.get_namespace(TENANT).await?;
    // Sealed with the hub's secrets key (the same key file the hub loaded).
    let secrets = clawfed_hub::server::load_secrets_key(&config).await?;
    let credentials = TransportCredentials::load(store.clone(), &secrets).await?;
    let mut agents: Vec<String> = (0..args.revisions).map(|i| format!("e{i:04}")).collect();
    agents.extend([SOURCE, SINK, SLOW].map(str::to_owned));
    let mut revisions = Vec::with_capacity(agents.len());
    for agent in agents {
        let _: serde_json::Value = rest
            .post(
                &format!("/namespaces/{TENANT}/agents"),
                &serde_json::json!({
                    "name": agent,
                    "spec": { "harnessKind": "embedded-openclaw", "image": "bench:1" }
                }),
            )
            .await?;
        let id = rest.deploy_current(TENANT, &agent).await?.id;
        store.place_revision(&id, CLUSTER).await?;
        let rev = store.get_revision_by_id(&id).await?;
        let rev = store
            .update_revision(
                &id,
                rev.version,
                RevisionPhase::WaitingReady,
                None,
                &rev.progress,
            )
            .await?;
        revisions.push(RevInfo {
            token: credentials.for_revision(&id).await?.gateway_token,
            authority: harness_authority(
                &agent,
                rev.number,
                &ns.data_plane_namespace,
                harness::DEFAULT_PORT,
            ),
            target: target::harness(&ns.id, &agent, rev.number),
            agent,
        });
    }
    let info = HubInfo {
        link_url: format!("https://127.0.0.1:{}", link.addr.port()),
        ca_pem: link.ca_pem().to_owned(),
        ingress: ingress.addr,
        ingress_ca: ingress.ca_pem.clone(),
        metrics: hub.metrics_addr,
        bootstrap_token,
        revisions,
    };
    let tmp = dir.join("hub.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(&info)?)?;
    std::fs::rename(&tmp, dir.join("hub.json"))?;
    println!("ready");
    serve_stdin(String::new).await?;
    let _ = tokio::time::timeout(Duration::from_secs(10), hub.stop()).await;
    Ok(())
}
