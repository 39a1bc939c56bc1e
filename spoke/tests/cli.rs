//! The `clawfed-spoke` binary's start-up checks.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CLAWFED_SPOKE: &str = env!("CARGO_BIN_EXE_clawfed-spoke");

/// Issue 12, item 3: the spoke's execution-cluster credentials are the
/// named `--kubeconfig` or its in-cluster ServiceAccount, never an ambient
/// KUBECONFIG. Outside a cluster and without `--kubeconfig`, it refuses to
/// start naming the flag, although $KUBECONFIG holds a usable file (before,
/// `Client::try_default` picked that file up silently).
#[test]
fn the_spoke_never_falls_back_to_an_ambient_kubeconfig() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ambient = dir.path().join("ambient.kubeconfig");
    std::fs::write(
        &ambient,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
    )
    .expect("write kubeconfig");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "not used before the client is built").expect("write ca");
    let mut child = Command::new(CLAWFED_SPOKE)
        .env_clear()
        .env("KUBECONFIG", &ambient)
        .env("HOME", dir.path())
        .args([
            "--hub-url",
            "https://127.0.0.1:1",
            "--cluster-name",
            "exec-a",
        ])
        .arg("--ca-file")
        .arg(&ca)
        .arg("--state-dir")
        .arg(dir.path())
        .args(["--applier", "kube", "--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn clawfed-spoke");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the spoke started with the ambient KUBECONFIG");
    };
    let out = child.wait_with_output().expect("output");
    assert!(!status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("in-cluster") && stderr.contains("--kubeconfig"),
        "{stderr}"
    );
}
