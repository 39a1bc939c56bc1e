//! The spoke role: the product's `Link` with `Tunnels`, enrolled with the
//! hub's bootstrap token, dialing through [`MapDialer`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clawfed_spoke::link::identity::FileIdentityStore;
use clawfed_spoke::link::ledger::FileLedger;
use clawfed_spoke::link::tls::HubAddress;
use clawfed_spoke::link::{Link, LinkConfig, SpokeMetrics};
use clawfed_spoke::tunnel::{TunnelSettings, Tunnels};
use clawfed_tests::tunnel::MapDialer;
use tokio_util::sync::CancellationToken;

use super::{Args, CLUSTER, HubInfo, role_dir, serve_stdin};

pub(super) async fn spoke_role(args: &Args) -> anyhow::Result<()> {
    let dir = role_dir(args)?;
    let info: HubInfo = serde_json::from_slice(&std::fs::read(dir.join("hub.json"))?)?;
    let map: HashMap<String, SocketAddr> =
        serde_json::from_slice(&std::fs::read(dir.join("map.json"))?)?;
    let state = dir.join("spoke");
    std::fs::create_dir_all(&state)?;
    let tunnels = Arc::new(Tunnels::new(
        Arc::new(MapDialer(map)),
        TunnelSettings::default(),
    ));
    let link = Link::new(
        LinkConfig {
            hub: HubAddress::parse(&info.link_url).map_err(|e| anyhow!("hub link URL: {e}"))?,
            ca_pem: info.ca_pem,
            cluster_name: CLUSTER.into(),
            bootstrap_token: Some(info.bootstrap_token),
            version: "tunnel-bench".into(),
            capabilities: vec!["applier:ledger".into()],
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
        },
        Arc::new(FileIdentityStore::new(&state)),
        Arc::new(FileLedger::open(&state)?),
        SpokeMetrics::default(),
    )
    .with_tunnels(tunnels.clone());
    let mut status = link.status();
    let shutdown = CancellationToken::new();
    let (_reports, reports_rx) = tokio::sync::mpsc::channel(16);
    let task = tokio::spawn(link.run(reports_rx, shutdown.clone()));
    tokio::time::timeout(Duration::from_secs(60), status.wait_for(|s| s.connected))
        .await
        .context("the spoke did not connect within 60 s")??;
    println!("connected");
    serve_stdin(|| tunnels.open().to_string()).await?;
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    Ok(())
}
