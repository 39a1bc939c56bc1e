//! The execution clusters: their admin clients from the e2e clusters dir,
//! and a client acting as the spoke's ServiceAccount.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clawfed_tests::kube_env;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

fn clusters_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CLAWFED_CLUSTERS_DIR") {
        return PathBuf::from(d);
    }
    std::env::var_os("CLAWFED_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
                .join(".cache/clawfed")
        })
        .join("clusters")
}

pub(super) struct ExecCluster {
    pub(super) name: String,
    pub(super) admin: Client,
}

pub(super) async fn exec_cluster(name: &str) -> Result<ExecCluster> {
    let path = clusters_dir().join(name).join("admin.kubeconfig");
    let kc = Kubeconfig::read_from(&path).with_context(|| {
        format!(
            "{} (start the cluster: e2e/cluster.sh up {name})",
            path.display()
        )
    })?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    cfg.connect_timeout = Some(Duration::from_secs(5));
    cfg.read_timeout = Some(Duration::from_secs(60));
    let admin = Client::try_from(cfg)?;
    tokio::time::timeout(Duration::from_secs(10), admin.apiserver_version())
        .await
        .with_context(|| format!("cluster {name}: /version timed out"))?
        .with_context(|| format!("cluster {name} does not answer"))?;
    Ok(ExecCluster {
        name: name.to_owned(),
        admin,
    })
}

/// A client acting as the spoke's ServiceAccount, after deploy/spoke is
/// installed (the tests' own helper: one parser of those manifests).
pub(super) async fn spoke_client(c: &ExecCluster) -> Result<Client> {
    let cluster = kube_env::cluster(&c.name).await?;
    clawfed_tests::spoke_env::spoke_client(&cluster).await
}
