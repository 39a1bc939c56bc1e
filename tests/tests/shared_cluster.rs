//! Issue 30: shared execution clusters are unsupported (the seeds), so a
//! second spoke enrolling into a Kubernetes cluster another cluster name
//! of the hub already has is refused, naming that name, without burning
//! its bootstrap token; `--allow-shared-cluster` forces it. Real `clawfed-spoke`
//! processes on the exec-a apiserver (the kube applier reads the cluster's
//! identity, its kube-system namespace UID, before enrolling) and a real hub.
//!
//! Needs `e2e/cluster.sh up exec-a`; skips when it was never started. The
//! spokes use exec-a's admin kubeconfig: the rule is the hub's, and reading
//! a namespace is within the spoke's own ClusterRole too.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::kube_env;
use clawfed_tests::link::{bootstrap_token, hub_ca, hub_url};
use clawfed_tests::procs::{Proc, bin};

fn spoke(hub: &TestHub, dir: &std::path::Path, name: &str, extra: &[&str]) -> Result<Proc> {
    let state = dir.join(format!("state-{name}"));
    std::fs::create_dir_all(&state)?;
    Proc::spawn(
        name,
        Command::new(bin("clawfed-spoke")?)
            .args(["--hub-url", &hub_url(hub)])
            .arg("--ca-file")
            .arg(dir.join("ca.pem"))
            .args(["--cluster-name", name])
            .arg("--bootstrap-token-file")
            .arg(dir.join(format!("{name}.token")))
            .arg("--state-dir")
            .arg(&state)
            .arg("--kubeconfig")
            .arg(kube_env::admin_kubeconfig_path("exec-a"))
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(extra)
            .env_remove("KUBECONFIG"),
        dir,
    )
}

async fn enrolled(hub: &TestHub, name: &str) -> Result<()> {
    kube_env::eventually(
        Duration::from_secs(60),
        &format!("{name} enrolled"),
        || async { Ok(hub.store().get_cluster(name).await.ok().map(|_| ())) },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_spoke_in_one_kubernetes_cluster_is_refused_unless_forced() -> Result<()> {
    if kube_env::cluster_or_skip("exec-a").await?.is_none() {
        return Ok(());
    }
    let mut hub = TestHub::start(Backend::Sqlite).await;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("ca.pem"), hub_ca(&hub))?;
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..6];
    let (first, second) = (format!("shared-a-{suffix}"), format!("shared-b-{suffix}"));
    for name in [&first, &second] {
        let token = bootstrap_token(&hub, name, false).await;
        std::fs::write(dir.path().join(format!("{name}.token")), token)?;
    }
    let result = async {
        let mut one = spoke(&hub, dir.path(), &first, &[])?;
        enrolled(&hub, &first).await?;
        // The second name in the same cluster: refused, the spoke exits.
        let mut two = spoke(&hub, dir.path(), &second, &[])?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while two.alive() {
            ensure!(
                tokio::time::Instant::now() < deadline,
                "the second spoke kept running: {}",
                Proc::text(&two.stderr)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let stderr = Proc::text(&two.stderr);
        ensure!(
            stderr.contains("shared execution clusters are not supported")
                && stderr.contains(&first)
                && stderr.contains("--allow-shared-cluster"),
            "{stderr}"
        );
        ensure!(
            hub.store().get_cluster(&second).await.is_err(),
            "nothing enrolled"
        );
        // Forced, with the same (unburnt) token: enrolled.
        let mut forced = spoke(&hub, dir.path(), &second, &["--allow-shared-cluster"])?;
        enrolled(&hub, &second)
            .await
            .with_context(|| Proc::text(&forced.stderr))?;
        forced.terminate().await;
        one.terminate().await;
        Ok(())
    }
    .await;
    hub.stop().await;
    result
}
