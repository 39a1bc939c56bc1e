//! Issue 30: rules the seeds state, each kept by the binaries as a user
//! meets them.
//! - The Kubernetes API's certificate is verified in either mode: a spoke
//!   given a kubeconfig with `insecure-skip-tls-verify` refuses to start,
//!   naming the field, before it talks to any apiserver or hub (the hub's
//!   `gateway.kubeconfig` goes through the same loader,
//!   `clawfed_kube::kubeconfig`, unit-tested there).
//! - `OCC_CONFIG_PATH` names the hub's config file, beside
//!   `CLAWFED_CONFIG`.
//! - Production mode (`mode: production`): image digests required (on by
//!   default, refused off), no tagged default image; demo mode says what it
//!   relaxes (`api_rest` has the deploy-time Gateway node selector rule).
//! - The seed's Compute Driver section loads byte for byte (its one
//!   placeholder filled) and every key lands on the setting it governs
//!   (`settings_e2e` reads them back from the objects on real clusters).

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

#[test]
fn the_seeds_compute_driver_section_loads_byte_for_byte_onto_every_setting() {
    use clawfed_hub::config::Config;
    use std::collections::BTreeMap;
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let text = clawfed_tests::seed::compute_driver_section("198.18.40.0/24");
    let config = Config::from_yaml(&text, "seed").unwrap_or_else(|e| panic!("{e}"));
    let section = config.drivers.compute.as_ref().expect("section");
    assert_eq!(section.id.as_deref(), Some("compute-kubernetes"));
    // images
    let pinned = |name: &str, c: &str| format!("registry.example/{name}@sha256:{}", c.repeat(64));
    assert_eq!(
        config.policy.default_gateway_image,
        pinned("openclaw-gateway", "a")
    );
    assert_eq!(
        config.policy.default_agent_image,
        Some(pinned("openclaw-codex", "b"))
    );
    assert!(config.policy.require_immutable_digest);
    assert_eq!(config.gateway.kubeconfig, None, "inCluster");
    // Gateway settings
    let g = config.gateway_options();
    let small = clawfed_proto::work::Resources {
        requests: map(&[("cpu", "100m"), ("memory", "128Mi")]),
        limits: map(&[("cpu", "500m"), ("memory", "256Mi")]),
    };
    assert_eq!(g.resources, small);
    assert_eq!(g.port, 8080);
    assert_eq!(g.dns.namespace, "kube-system");
    assert_eq!(g.dns.pod_labels, map(&[("k8s-app", "kube-dns")]));
    assert_eq!(g.trusted_proxy_cidrs, vec!["198.18.40.0/24".to_string()]);
    assert_eq!(
        g.clients,
        vec![clawfed_hub::gateway::ClientPeer {
            namespace: "openclaw-system".into(),
            pod_labels: map(&[("app", "approved-gateway-client")]),
        }]
    );
    let sp = clawfed_proto::work::ServicePrincipal {
        audience: "openclaw-enterprise".into(),
        expiration_seconds: 900,
    };
    assert_eq!(g.service_principal, Some(sp.clone()));
    assert_eq!(g.storage_class.as_deref(), Some("sqlite-block"));
    assert_eq!(g.node_selector, map(&[("oce-role", "control-plane")]));
    assert_eq!(
        g.transport_secret_prefix.as_deref(),
        Some("openclaw-agent-transport")
    );
    // The seed's 24-character prefix names every Agent's Secret as a DNS
    // label, the longest Agent name too.
    let short = clawfed_hub::gateway::objects::transport_secret_name("support", &g);
    assert_eq!(short, "openclaw-agent-transport-support");
    let long = clawfed_hub::gateway::objects::transport_secret_name(&"a".repeat(40), &g);
    assert!(long.len() <= 63 && long.starts_with("openclaw-agent-transport-"));
    clawfed_proto::naming::validate_dns1123_label(&long).expect("a DNS label");
    // Harness and namespace settings
    let w = config.workload_settings();
    assert_eq!(w.agent_resources, small);
    assert_eq!(w.namespace_quota, map(&[("pods", "10")]));
    assert_eq!(
        w.container_defaults,
        clawfed_proto::work::ContainerDefaults {
            default_request: map(&[("cpu", "100m"), ("memory", "128Mi")]),
            default_limit: map(&[("cpu", "500m"), ("memory", "256Mi")]),
        }
    );
    assert_eq!(w.node_selector, map(&[("oce-role", "agents")]));
    assert_eq!(w.session_capacity, 8);
    assert_eq!(
        w.codex_seccomp_profile.as_deref(),
        Some("profiles/codex-0.158.0.json")
    );
    assert_eq!(w.service_principal, Some(sp));
}

#[test]
fn a_key_in_both_its_seed_spelling_and_its_alias_is_refused_naming_both() {
    use clawfed_hub::config::Config;
    let cases = [
        (
            "resources: { namespace: { quota: { pods: \"1\" } }, namespaceQuota: { pods: \"2\" } }",
            "resources.namespace.quota",
            "resources.namespaceQuota",
        ),
        (
            "network: { gatewayTrustedProxyCidrs: [198.18.0.0/24], trustedProxyCidrs: [198.18.1.0/24] }",
            "network.gatewayTrustedProxyCidrs",
            "network.trustedProxyCidrs",
        ),
        (
            "servicePrincipalCredentials: { mode: disabled, enabled: true, audience: a }",
            "servicePrincipalCredentials.mode",
            "servicePrincipalCredentials.enabled",
        ),
        (
            "runtime: { gatewayStorageClassName: a, gatewayStorageClass: b }",
            "runtime.gatewayStorageClassName",
            "runtime.gatewayStorageClass",
        ),
    ];
    for (yaml, seed, alias) in cases {
        let text = format!("drivers:\n  compute:\n    configuration: {{ {} }}\n", &yaml);
        let err = Config::from_yaml(&text, "c")
            .map(|_| ())
            .expect_err(yaml)
            .to_string();
        assert!(
            err.contains(&format!("drivers.compute.configuration.{seed}"))
                && err.contains(&format!("drivers.compute.configuration.{alias}")),
            "{yaml}: {err}"
        );
    }
    // The aliases alone still load.
    let text = "drivers:\n  compute:\n    configuration:\n      resources: { namespaceQuota: { pods: \"2\" }, containerDefaults: { defaultLimit: { cpu: 500m } } }\n      servicePrincipalCredentials: { enabled: true, audience: a }\n      runtime: { gatewayStorageClass: b }\n";
    let c = Config::from_yaml(text, "c").unwrap_or_else(|e| panic!("{e}"));
    let w = c.workload_settings();
    assert_eq!(w.namespace_quota.get("pods").map(String::as_str), Some("2"));
    assert_eq!(
        w.container_defaults
            .default_limit
            .get("cpu")
            .map(String::as_str),
        Some("500m")
    );
    assert!(w.service_principal.is_some());
    assert_eq!(c.gateway_options().storage_class.as_deref(), Some("b"));
    // Other refusals name their key.
    for (yaml, key) in [
        (
            "drivers:\n  compute:\n    id: compute-ssh\n",
            "drivers.compute.id",
        ),
        (
            "drivers:\n  compute:\n    configuration: { network: { gatewayTrustedProxyCidrs: [0.0.0.0/0] } }\n",
            "gatewayTrustedProxyCidrs[0]",
        ),
        (
            "drivers:\n  compute:\n    configuration: { network: { gatewayClients: [{ namespace: x, podLabels: {} }] } }\n",
            "gatewayClients[0].podLabels",
        ),
        (
            "drivers:\n  compute:\n    configuration: { servicePrincipalCredentials: { mode: projectedServiceAccountToken } }\n",
            "servicePrincipalCredentials.audience",
        ),
    ] {
        let err = Config::from_yaml(yaml, "c")
            .map(|_| ())
            .expect_err(yaml)
            .to_string();
        assert!(err.contains(key), "{yaml}: {err}");
    }
}

#[test]
fn production_mode_requires_digests_and_a_pinned_default_image() {
    use clawfed_hub::config::{Config, InstallationMode};
    let dir = tempfile::tempdir().unwrap();
    let load = |text: &str, env: &[(&str, &str)]| {
        let path = dir.path().join("hub.yaml");
        std::fs::write(&path, text).unwrap();
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load(Some(&path), &env).map_err(|e| e.to_string())
    };
    let pinned = format!("reg.example/gateway@sha256:{}", "ab".repeat(32));
    // The built-in default Gateway image is a tag: production refuses it.
    let err = load("mode: production\n", &[]).unwrap_err();
    assert!(err.contains("policy.defaultGatewayImage"), "{err}");
    // With a pinned image the digest rule is on without being asked for.
    let text = format!("mode: production\npolicy: {{ defaultGatewayImage: {pinned} }}\n");
    let c = load(&text, &[]).unwrap();
    assert_eq!(c.mode, InstallationMode::Production);
    assert!(c.policy.require_immutable_digest);
    assert!(c.demo_relaxations().is_empty());
    // Turning it off, in the file, the driver section or the environment,
    // is refused, naming the setting.
    for (text, env) in [
        (
            format!(
                "mode: production\npolicy: {{ defaultGatewayImage: {pinned}, requireImmutableDigest: false }}\n"
            ),
            vec![],
        ),
        (
            format!(
                "mode: production\ndrivers: {{ compute: {{ configuration: {{ images: {{ gateway: {pinned}, requireImmutableDigest: false }} }} }} }}\n"
            ),
            vec![],
        ),
        (
            text.clone(),
            vec![("CLAWFED_REQUIRE_IMMUTABLE_DIGEST", "false")],
        ),
    ] {
        let err = load(&text, &env).unwrap_err();
        assert!(
            err.contains("policy.requireImmutableDigest") && err.contains("production"),
            "{text}: {err}"
        );
    }
    // Demo (the default) relaxes it, and says what it relaxes.
    let c = load("version: 1\n", &[]).unwrap();
    assert_eq!(c.mode, InstallationMode::Demo);
    assert!(!c.policy.require_immutable_digest);
    let relaxed = c.demo_relaxations().join("; ");
    assert!(
        relaxed.contains("digest") && relaxed.contains("gatewayNodeSelector"),
        "{relaxed}"
    );
    // The environment can mark it production too.
    let err = load("version: 1\n", &[("CLAWFED_MODE", "production")]).unwrap_err();
    assert!(err.contains("policy.defaultGatewayImage"), "{err}");
    let err = load("version: 1\n", &[("CLAWFED_MODE", "prod")]).unwrap_err();
    assert!(err.contains("CLAWFED_MODE"), "{err}");
}
