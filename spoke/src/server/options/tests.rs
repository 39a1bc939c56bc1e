//! The flags' refusals name the flag; good values become typed settings.

use super::*;

fn options(extra: &[&str]) -> Options {
    Options::try_parse_from(args(extra)).expect("the flags parse")
}

/// The flags every spoke needs, then `extra`.
fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "clawfed-spoke",
        "--hub-url",
        "https://127.0.0.1:8443",
        "--ca-file",
        "/nonexistent/ca.pem",
        "--cluster-name",
        "exec-a",
        "--hub-proxy",
        "direct",
    ];
    args.extend_from_slice(extra);
    args
}

fn refusal(err: ServerError) -> String {
    clawfed_proto::errors::chain(&err)
}

#[test]
fn sandbox_flags_need_the_provisioning_driver() {
    let err = options(&["--sandbox-runtime-class", "gvisor"])
        .check_sandbox()
        .unwrap_err();
    assert!(refusal(err).starts_with("--sandbox-runtime-class: only a provisioning driver"));
    let err = options(&["--sandbox-containment", "networking"])
        .check_sandbox()
        .unwrap_err();
    assert!(refusal(err).starts_with("--sandbox-containment: "));
    options(&[
        "--sandbox-driver",
        "crd",
        "--sandbox-containment",
        "process",
    ])
    .check_sandbox()
    .expect("the crd driver declares containment");
}

#[test]
fn workload_settings_are_checked_and_named() {
    let err = options(&["--workload-no-proxy", "10.0.0.0/8"])
        .cluster_environment()
        .unwrap_err();
    assert_eq!(
        refusal(err),
        "--workload-no-proxy: only with --workload-proxy"
    );

    let dir = tempfile::tempdir().unwrap();
    let pull = dir.path().join("pull.json");
    std::fs::write(&pull, "{\"not\": \"auths\"}").unwrap();
    let err = options(&["--image-pull-secret-file", pull.to_str().unwrap()])
        .cluster_environment()
        .unwrap_err();
    assert!(refusal(err).starts_with("--image-pull-secret-file: not a .dockerconfigjson"));

    let missing = dir.path().join("missing.pem");
    let err = options(&["--ca-bundle-file", missing.to_str().unwrap()])
        .cluster_environment()
        .unwrap_err();
    let text = refusal(err);
    assert!(
        text.starts_with(&format!("--ca-bundle-file {}: ", missing.display())),
        "names the flag, the file and the cause once: {text}"
    );

    std::fs::write(&pull, "{\"auths\": {}}").unwrap();
    let env = options(&[
        "--image-pull-secret-file",
        pull.to_str().unwrap(),
        "--workload-proxy",
        "http://127.0.0.1:3128",
    ])
    .cluster_environment()
    .expect("valid settings");
    assert!(env.pull_credentials.is_some() && env.proxy.is_some());
}

#[test]
fn hub_addresses_and_token() {
    let hubs = options(&[]).hub_addresses().unwrap();
    assert_eq!(hubs.len(), 1);
    let err = Options::try_parse_from([
        "clawfed-spoke",
        "--hub-url",
        "http://hub:8443",
        "--ca-file",
        "ca.pem",
        "--cluster-name",
        "exec-a",
    ])
    .unwrap()
    .hub_addresses()
    .unwrap_err();
    assert!(refusal(err).starts_with("--hub-url: "));

    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "  secret-token\n").unwrap();
    let opts = options(&["--bootstrap-token-file", token.to_str().unwrap()]);
    assert_eq!(
        opts.bootstrap_token().unwrap().as_deref(),
        Some("secret-token")
    );
}

#[test]
fn cluster_labels_are_kubernetes_labels_given_once() {
    let o = options(&[
        "--cluster-label",
        "topology.kubernetes.io/region=eu-1,tier=gpu",
        "--cluster-label",
        "spare=",
    ]);
    assert_eq!(
        o.cluster_labels().expect("labels"),
        BTreeMap::from([
            (
                "topology.kubernetes.io/region".to_owned(),
                "eu-1".to_owned()
            ),
            ("tier".to_owned(), "gpu".to_owned()),
            ("spare".to_owned(), String::new()),
        ])
    );
    let twice = options(&["--cluster-label", "tier=gpu", "--cluster-label", "tier=cpu"]);
    let err = refusal(twice.cluster_labels().unwrap_err());
    assert!(
        err.starts_with("--cluster-label: tier is given more than once"),
        "{err}"
    );
    let bad = Options::try_parse_from(args(&["--cluster-label", "tier=not ok"]))
        .unwrap_err()
        .to_string();
    assert!(bad.contains("--cluster-label"), "{bad}");
    assert!(bad.contains("tier="), "{bad}");
}
