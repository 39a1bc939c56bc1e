//! Issue 30: rules the seeds state, each kept by the binaries as a user
//! meets them.
//! - The Kubernetes API's certificate is verified in either mode: a spoke
//!   given a kubeconfig with `insecure-skip-tls-verify` refuses to start,
//!   naming the field, before it talks to any apiserver or hub (the hub's
//!   `gateway.kubeconfig` goes through the same loader,
//!   `clawfed_kube::kubeconfig`, unit-tested there).
//! - `OCC_CONFIG_PATH` names the hub's config file, beside
//!   `CLAWFED_CONFIG`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clawfed_tests::procs::bin;

#[test]
fn a_spoke_refuses_a_kubeconfig_that_skips_certificate_checks() {
    let dir = std::env::temp_dir().join(format!("clawfed-kctls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("insecure.yaml");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
    )
    .unwrap();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, "not read before the kubeconfig is refused").unwrap();
    let mut child = Command::new(bin("clawfed-spoke").unwrap())
        .args([
            "--hub-url",
            "https://127.0.0.1:1",
            "--cluster-name",
            "exec-kc",
        ])
        .arg("--ca-file")
        .arg(&ca)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env_remove("KUBECONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Refused at once; a spoke that accepted it would go on dialling.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let status = status.unwrap_or_else(|| panic!("the spoke kept running: {stderr}"));
    assert!(!status.success(), "the spoke started: {stderr}");
    assert!(
        stderr.contains("--kubeconfig") && stderr.contains("insecure-skip-tls-verify"),
        "the refusal names the field: {stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_hub_reads_its_config_from_occ_config_path() {
    let dir = std::env::temp_dir().join(format!("clawfed-occ-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A key the hub refuses: proof that this file, not the embedded
    // defaults, was read.
    let config = dir.join("hub.yaml");
    std::fs::write(&config, "database:\n  urll: sqlite://x.db\n").unwrap();
    let run = |envs: &[(&str, &std::path::Path)]| {
        let mut c = Command::new(bin("clawfed-hub").unwrap());
        c.arg("migrate")
            .current_dir(&dir)
            .env_remove("CLAWFED_CONFIG")
            .env_remove("OCC_CONFIG_PATH");
        for (k, v) in envs {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&[("OCC_CONFIG_PATH", &config)]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("urll"), "the file was read: {stderr}");
    let other = dir.join("other.yaml");
    let (code, stderr) = run(&[("OCC_CONFIG_PATH", &config), ("CLAWFED_CONFIG", &other)]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("OCC_CONFIG_PATH") && stderr.contains("CLAWFED_CONFIG"),
        "two different files are refused, naming both: {stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
