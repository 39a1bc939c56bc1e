//! Unit tests of the hub configuration: loading, overrides, the Compute
//! Driver section, validation and derived settings.

use std::collections::HashMap;
use std::path::Path;

use super::*;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn defaults_work_without_a_file() {
    let c = Config::load(None, &env(&[])).unwrap();
    assert_eq!(c.database.url, "sqlite://./clawfed.db");
    assert_eq!(c.api.rest_addr.to_string(), "127.0.0.1:8080");
    assert_eq!(c.api.grpc_addr.to_string(), "127.0.0.1:8081");
    assert_eq!(c.api.metrics_addr.to_string(), "127.0.0.1:9464");
}

#[test]
fn file_then_environment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.yaml");
    std::fs::write(
        &path,
        "version: 1\ndatabase:\n  url: postgres://x/y\nworker:\n  enabled: false\n  batchSize: 8\n  leaseSeconds: 5\n  pollIntervalMs: 10\n  maxAttempts: 3\n  backoffBaseMs: 10\n  backoffCapMs: 100\n  healthIntervalSeconds: 1\n",
    )
    .unwrap();
    let c = Config::load(
        Some(&path),
        &env(&[("CLAWFED_REST_ADDR", "127.0.0.1:9000")]),
    )
    .unwrap();
    assert_eq!(c.database.url, "postgres://x/y");
    assert!(!c.worker.enabled);
    assert_eq!(c.worker_config().batch_size, 8);
    assert_eq!(c.api.rest_addr.port(), 9000);
}

/// Issue 14: on PostgreSQL the safety polls the file leaves unset
/// default to 30 s (NOTIFY wakes the replicas); SQLite keeps 2 s.
#[test]
fn safety_polls_default_per_backend() {
    let load = |yaml: &str, env: &[(&str, &str)]| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.yaml");
        std::fs::write(&path, yaml).unwrap();
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load(Some(&path), &env).unwrap()
    };
    let polls = |c: &Config| {
        (
            c.worker_config().poll_interval,
            c.link_config().poll_interval,
            Duration::from_millis(c.watch.safety_poll_ms),
        )
    };
    let two = Duration::from_secs(2);
    // SQLite (the default database): 2 s.
    assert_eq!(polls(&load("version: 1\n", &[])), (two, two, two));
    // PostgreSQL, from the file or the environment: 30 s...
    let pg = "postgres://u@127.0.0.1/db";
    let thirty = POSTGRES_SAFETY_POLL;
    assert_eq!(
        polls(&load(&format!("database:\n  url: {pg}\n"), &[])),
        (thirty, thirty, thirty)
    );
    assert_eq!(
        polls(&load("version: 1\n", &[("CLAWFED_DATABASE_URL", pg)])),
        (thirty, thirty, thirty)
    );
    // ...except where the file says otherwise.
    let set = format!(
        "database:\n  url: {pg}\nworker:\n  pollIntervalMs: 100\nwatch:\n  safetyPollMs: 300\n"
    );
    assert_eq!(
        polls(&load(&set, &[])),
        (
            Duration::from_millis(100),
            thirty,
            Duration::from_millis(300)
        )
    );
    let set = format!("database:\n  url: {pg}\nlink:\n  safetyPollMs: 2000\n");
    assert_eq!(polls(&load(&set, &[])), (thirty, two, thirty));
}

/// Issue 17: the polls are safety polls now; the old worker key still
/// works, the new ones are read, and a zero link poll is refused.
#[test]
fn safety_poll_keys_old_and_new() {
    let c = Config::load(None, &env(&[])).unwrap();
    assert_eq!(c.worker_config().poll_interval, Duration::from_secs(2));
    assert_eq!(c.link_config().poll_interval, Duration::from_secs(2));
    let c = load_text("worker:\n  pollIntervalMs: 70\n").unwrap();
    assert_eq!(c.worker_config().poll_interval, Duration::from_millis(70));
    let c = load_text("worker:\n  safetyPollMs: 60000\nlink:\n  safetyPollMs: 30000\n").unwrap();
    assert_eq!(c.worker_config().poll_interval, Duration::from_secs(60));
    assert_eq!(c.link_config().poll_interval, Duration::from_secs(30));
    let err = load_text("link:\n  safetyPollMs: 0\n").unwrap_err();
    assert!(err.to_string().contains("link.safetyPollMs"), "{err}");
}

/// Issue 17: the Gateway recheck is a slow safety net (the watch wakes
/// passes); too short a value is refused naming the key.
#[test]
fn gateway_recheck_key() {
    let c = Config::load(None, &env(&[])).unwrap();
    assert_eq!(c.pipeline.gateway_recheck_ms, 10_000);
    let c = load_text("pipeline:\n  gatewayRecheckMs: 30000\n").unwrap();
    assert_eq!(c.pipeline.gateway_recheck_ms, 30_000);
    let err = load_text("pipeline:\n  gatewayRecheckMs: 5\n").unwrap_err();
    assert!(
        err.to_string().contains("pipeline.gatewayRecheckMs"),
        "{err}"
    );
}

/// Issue 17: with the pipeline on, Gateway ensures get a worker lane
/// of their own (`worker.gatewayBatchSize`), every other kind the main
/// one; with it off, one worker takes every kind.
#[test]
fn gateway_ensures_run_in_a_lane_of_their_own() {
    use crate::store::WorkLane;
    let c =
        load_text("pipeline:\n  enabled: true\nworker:\n  batchSize: 4\n  gatewayBatchSize: 64\n")
            .unwrap();
    let lanes = c.worker_lanes();
    let ensure = vec![crate::worker::kinds::GATEWAY_ENSURE.to_owned()];
    let by_lane: Vec<_> = lanes
        .iter()
        .map(|w| (w.lane.clone(), w.batch_size))
        .collect();
    assert_eq!(
        by_lane,
        [
            (WorkLane::Only(ensure.clone()), 64),
            (WorkLane::Except(ensure), 4)
        ]
    );
    assert_ne!(
        lanes[0].id, lanes[1].id,
        "each worker leases under its own name"
    );
    assert_eq!(lanes[1].poll_interval, Duration::from_millis(2000));
    assert_eq!(
        lanes[0].poll_interval,
        Duration::from_secs(60),
        "the Gateway lane's safety net is slow"
    );
    assert!(
        lanes[1].periodic_recovery && !lanes[0].periodic_recovery,
        "one periodic recovery of expired claims per process"
    );
    let c = load_text("pipeline:\n  enabled: false\n").unwrap();
    let lanes = c.worker_lanes();
    assert_eq!(lanes.len(), 1);
    assert_eq!(lanes[0].lane, WorkLane::All);
    let err = load_text("worker:\n  gatewayBatchSize: 0\n").unwrap_err();
    assert!(err.to_string().contains("worker.gatewayBatchSize"), "{err}");
}

/// Issue 14, part 4: a replica's advertised link address and its
/// balancing settings, from the file or the environment; a bad
/// address is refused naming the key.
#[test]
fn advertise_url_and_balancing() {
    let c = Config::load(None, &env(&[])).unwrap();
    let link = c.link_config();
    assert_eq!(link.advertise_url, None, "off unless advertised");
    assert_eq!(link.balance.interval, Duration::from_secs(30));
    let link = load_text("link:\n  advertiseUrl: https://hub-1.hub.clawfed.svc:8443/\n  balanceIntervalSeconds: 5\n  balanceSlack: 0\n  balanceMaxMoves: 3\n").unwrap().link_config();
    assert_eq!(
        link.advertise_url.as_deref(),
        Some("https://hub-1.hub.clawfed.svc:8443")
    );
    assert_eq!(link.balance.interval, Duration::from_secs(5));
    assert_eq!((link.balance.slack, link.balance.max_moves), (0, 3));
    let link = Config::load(
        None,
        &env(&[
            ("CLAWFED_LINK_ADVERTISE_URL", "https://127.0.0.1:9443"),
            ("CLAWFED_LINK_BALANCE_INTERVAL_SECONDS", "2"),
        ]),
    )
    .unwrap()
    .link_config();
    assert_eq!(
        link.advertise_url.as_deref(),
        Some("https://127.0.0.1:9443")
    );
    assert_eq!(link.balance.interval, Duration::from_secs(2));
    // Port 0 stands for the port the link bound (a replica on port 0).
    let c = Config::load(
        None,
        &env(&[
            ("CLAWFED_LINK_ADDR", "127.0.0.1:0"),
            ("CLAWFED_LINK_ADVERTISE_URL", "https://127.0.0.1:0/"),
        ]),
    )
    .unwrap();
    assert_eq!(
        c.link_advertise_url(41234).as_deref(),
        Some("https://127.0.0.1:41234")
    );
    assert_eq!(
        c.link_advertise_url(0),
        None,
        "no port bound, nothing to advertise"
    );
    for (yaml, key) in [
        (
            "link:\n  advertiseUrl: http://hub:8443\n",
            "link.advertiseUrl",
        ),
        ("link:\n  advertiseUrl: https://hub\n", "link.advertiseUrl"),
        (
            "link:\n  balanceIntervalSeconds: 0\n",
            "link.balanceIntervalSeconds",
        ),
        ("link:\n  balanceMaxMoves: 0\n", "link.balanceMaxMoves"),
    ] {
        let err = load_text(yaml).unwrap_err();
        assert!(err.to_string().contains(key), "{yaml}: {err}");
    }
}

#[test]
fn unknown_fields_and_bad_values_are_errors() {
    let err = load_text("databse:\n  url: x\n").unwrap_err();
    assert!(err.to_string().contains("unknown field `databse`"), "{err}");
    let err = Config::load(None, &env(&[("CLAWFED_REST_ADDR", "nope")])).unwrap_err();
    assert!(err.to_string().contains("CLAWFED_REST_ADDR"), "{err}");
    let err = load_text("version: 2\n").unwrap_err();
    assert!(err.to_string().contains("version"), "{err}");
}

/// Issue 17, part 4: the pool outgrows a full worker batch, so a batch
/// of pipeline passes cannot take every connection from the link
/// sessions, lease heartbeats and API.
#[test]
fn the_pool_holds_a_full_batch_and_room_beside_it() {
    let c = Config::load(None, &env(&[])).unwrap();
    let pool = c.pool_settings();
    assert_eq!(pool.max_connections, c.worker.batch_size + 16);
    assert_eq!(pool, crate::store::PoolSettings::default());
    let pool = load_text(
        "database:\n  url: postgres://x/y\n  maxConnections: 20\n  acquireTimeoutSeconds: 3\n",
    )
    .unwrap()
    .pool_settings();
    assert_eq!(pool.max_connections, 20);
    assert_eq!(pool.acquire_timeout, Duration::from_secs(3));
    let err = load_text("database:\n  maxConnections: 1\n").unwrap_err();
    assert!(err.to_string().contains("database.maxConnections"), "{err}");
}

fn pinned(name: &str) -> String {
    format!("{name}@sha256:{}", "0".repeat(64))
}

/// Issue 9, defect 7: one digest policy, consistent defaults.
#[test]
fn one_digest_policy_with_consistent_defaults() {
    // Defaults: the policy is off and the Gateways follow it, so the
    // tagged default Gateway image deploys.
    let c = Config::load(None, &env(&[])).unwrap();
    assert!(!c.policy.require_immutable_digest);
    let g = c.gateway_options();
    assert!(!g.require_immutable_digest);
    assert_eq!(
        g.default_image.as_deref(),
        Some(c.policy.default_gateway_image.as_str())
    );
    assert!(crate::gateway::objects::validate_config(&g).is_ok());
    let spec = crate::gateway::GatewaySpec {
        tenant: "team".into(),
        namespace_id: "team-id".into(),
        agent: "bot".into(),
        revision: 1,
        revision_id: "r1".into(),
        image: None,
        harness_endpoint: "http://bot-r1-harness.oce-0.svc:8080".into(),
        tunnel_proxy: None,
        tunnel_ca_pem: None,
        transport: crate::gateway::Transport {
            gateway_token: "t".into(),
            tls: None,
        },
        runtime: None,
    };
    assert_eq!(
        crate::gateway::objects::validate(&spec, &g).as_deref(),
        Ok(c.policy.default_gateway_image.as_str()),
        "the default Gateway image is accepted by the default Gateways"
    );

    // The policy on with the tagged default Gateway image: no start.
    let err =
        Config::load(None, &env(&[("CLAWFED_REQUIRE_IMMUTABLE_DIGEST", "true")])).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("policy.defaultGatewayImage"), "{text}");
    assert!(text.contains("sha256"), "{text}");

    // The policy on with a pinned default: the Gateways require digests.
    let image = pinned("reg.example/gateway");
    let c = load_text(&format!(
        "policy:\n  requireImmutableDigest: true\n  defaultGatewayImage: {image}\n"
    ))
    .unwrap();
    let g = c.gateway_options();
    assert!(g.require_immutable_digest);
    assert_eq!(g.default_image.as_deref(), Some(image.as_str()));
    assert!(crate::gateway::objects::validate_config(&g).is_ok());

    // A tagged Gateway default of its own is refused too.
    let err = load_text(&format!(
        "policy:\n  requireImmutableDigest: true\n  defaultGatewayImage: {image}\n\
             gateway:\n  options:\n    defaultImage: reg.example/gateway:2\n"
    ))
    .unwrap_err();
    assert!(
        err.to_string().contains("gateway.options.defaultImage"),
        "{err}"
    );

    // The Gateway has no separate digest switch to contradict the policy.
    let err = load_text("gateway:\n  options:\n    requireImmutableDigest: true\n").unwrap_err();
    assert!(err.to_string().contains("requireImmutableDigest"), "{err}");
}

#[test]
fn the_secrets_key_source_is_a_file_or_a_secret_never_both() {
    use crate::secrets::{KeySecretRef, KeySource};
    let c = Config::load(
        None,
        &env(&[("CLAWFED_LINK_CA_DIR", "/var/lib/clawfed/ca")]),
    )
    .unwrap();
    assert_eq!(
        c.secrets_key_source(),
        KeySource::File("/var/lib/clawfed/ca.secrets.key".into()),
        "beside the link CA directory"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.yaml");
    std::fs::write(
        &path,
        "secrets:\n  keySecret: { namespace: clawfed-system, name: hub-secrets, key: key }\n",
    )
    .unwrap();
    let c = Config::load(Some(&path), &env(&[])).unwrap();
    assert_eq!(
        c.secrets_key_source(),
        KeySource::KubeSecret(KeySecretRef {
            namespace: "clawfed-system".into(),
            name: "hub-secrets".into(),
            key: "key".into(),
        })
    );
    let err = Config::load(
        Some(&path),
        &env(&[("CLAWFED_SECRETS_KEY_FILE", "/etc/clawfed/secrets.key")]),
    )
    .unwrap_err();
    assert!(err.to_string().contains("secrets"), "{err}");
    let err = load_text("secrets:\n  keyFile: /k\n  keyScret: x\n").unwrap_err();
    assert!(err.to_string().contains("keyScret"), "{err}");
    let err =
        load_text("secrets:\n  keySecret: { namespace: ns, name: '', key: k }\n").unwrap_err();
    assert!(err.to_string().contains("secrets.keySecret.name"), "{err}");
}

#[test]
fn the_per_source_handshake_limit_is_read_and_checked() {
    let c = load_text("link:\n  maxHandshakesPerSource: 500\n").unwrap();
    assert_eq!(c.link_config().max_handshakes_per_source, 500);
    let d = Config::load(None, &env(&[])).unwrap();
    assert_eq!(
        d.link_config().max_handshakes_per_source,
        crate::link::LinkConfig::default().max_handshakes_per_source
    );
    let err = load_text("link:\n  maxHandshakesPerSource: 0\n").unwrap_err();
    assert!(
        err.to_string().contains("link.maxHandshakesPerSource"),
        "{err}"
    );
}

fn example_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/compute-driver.yaml")
}

fn example_text() -> String {
    std::fs::read_to_string(example_path()).expect("the checked-in example")
}

/// Loads `text` as a config file; the error's text when refused.
fn load_text(text: &str) -> Result<Config, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.yaml");
    std::fs::write(&path, text).unwrap();
    Config::load(Some(&path), &env(&[])).map_err(|e| e.to_string())
}

fn map(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The Compute Driver's installation section, as an operator brings it,
/// loads and reaches every setting it governs.
#[test]
fn the_compute_driver_example_loads_and_maps_every_field() {
    use clawfed_proto::work::{DnsTarget, EgressRule, ServicePrincipal, Workspace};
    let c = Config::load(Some(&example_path()), &env(&[])).expect("example loads");
    let pinned = |name: &str, digit: char| {
        format!(
            "ghcr.io/openclaw/{name}@sha256:{}",
            digit.to_string().repeat(64)
        )
    };
    // authentication -> the control-cluster credentials.
    assert_eq!(
        c.gateway.kubeconfig.as_deref(),
        Some(Path::new("/etc/openclaw/control.kubeconfig"))
    );
    // images -> the policy (and through it the Gateways).
    assert!(c.policy.require_immutable_digest);
    assert_eq!(
        c.policy.default_gateway_image,
        pinned("openclaw-gateway", '1')
    );
    assert_eq!(c.policy.default_agent_image, Some(pinned("openclaw", '2')));
    let p = c.policy();
    assert_eq!(p.default_agent_image, Some(pinned("openclaw", '2')));
    assert!(p.require_immutable_digest);
    // Gateway settings -> the Gateway objects' options.
    let g = c.gateway_options();
    assert!(g.require_immutable_digest);
    assert_eq!(g.default_image, Some(pinned("openclaw-gateway", '1')));
    assert_eq!(
        g.resources.requests,
        map(&[("cpu", "250m"), ("memory", "512Mi")])
    );
    assert_eq!(g.resources.limits, map(&[("cpu", "1"), ("memory", "1Gi")]));
    assert_eq!(g.port, 18789);
    assert_eq!(g.dns.namespace, "kube-system");
    assert_eq!(g.dns.pod_labels, map(&[("k8s-app", "kube-dns")]));
    assert_eq!(g.trusted_proxy_cidrs, vec!["10.0.0.0/24".to_string()]);
    assert_eq!(g.node_selector, map(&[("node-pool", "gateways")]));
    assert_eq!(g.storage_class.as_deref(), Some("fast-rwo"));
    assert_eq!(
        g.transport_secret_prefix.as_deref(),
        Some("openclaw-transport")
    );
    let sp = ServicePrincipal {
        audience: "openclaw.example.com".into(),
        expiration_seconds: 900,
    };
    assert_eq!(g.service_principal, Some(sp.clone()));
    assert_eq!(
        g.clients,
        vec![crate::gateway::ClientPeer {
            namespace: "openclaw-system".into(),
            pod_labels: std::collections::BTreeMap::from([(
                "app".into(),
                "approved-gateway-client".into()
            )]),
        }]
    );
    assert_eq!(g.namespace_quota, c.workload_settings().namespace_quota);
    assert!(crate::gateway::objects::validate_config(&g).is_ok());
    // Harness and namespace settings -> every work item.
    let w = c.workload_settings();
    assert_eq!(
        w.agent_resources.requests,
        map(&[("cpu", "500m"), ("memory", "1Gi")])
    );
    assert_eq!(
        w.agent_resources.limits,
        map(&[("cpu", "2"), ("memory", "4Gi")])
    );
    assert_eq!(
        w.namespace_quota,
        map(&[
            ("pods", "20"),
            ("requests.cpu", "8"),
            ("requests.memory", "16Gi"),
            ("limits.cpu", "16"),
            ("limits.memory", "32Gi"),
            ("persistentvolumeclaims", "10"),
        ])
    );
    assert_eq!(
        w.container_defaults.default_request,
        map(&[("cpu", "100m"), ("memory", "128Mi")])
    );
    assert_eq!(
        w.container_defaults.default_limit,
        map(&[("cpu", "500m"), ("memory", "512Mi")])
    );
    assert_eq!(w.harness_port, 8080);
    assert_eq!(
        w.dns,
        Some(DnsTarget {
            namespace: "kube-system".into(),
            pod_labels: map(&[("k8s-app", "kube-dns")]),
        })
    );
    assert_eq!(
        w.egress,
        vec![EgressRule {
            cidr: "203.0.113.0/24".into(),
            ports: vec![443],
        }]
    );
    assert_eq!(w.service_principal, Some(sp));
    assert_eq!(w.node_selector, map(&[("node-pool", "agents")]));
    assert_eq!(
        w.workspace,
        Workspace {
            size: "5Gi".into(),
            storage_class: Some("standard-rwo".into()),
        }
    );
    assert_eq!(w.session_capacity, 16);
    assert_eq!(
        w.codex_seccomp_profile.as_deref(),
        Some("profiles/openclaw-codex.json")
    );
}

/// A typo anywhere in the section names its full key path.
#[test]
fn an_unknown_driver_key_is_refused_naming_its_path() {
    let cases = [
        (
            "      runtime:\n",
            "      runtime:\n        bogusKey: 1\n",
            "drivers.compute.configuration.runtime.bogusKey",
        ),
        (
            "        gateway:\n          requests:",
            "        gateway:\n          request: {}\n          requests:",
            "drivers.compute.configuration.resources.gateway.request",
        ),
        (
            "      network:\n",
            "      network:\n        dnss: {}\n",
            "drivers.compute.configuration.network.dnss",
        ),
        (
            "    configuration:\n",
            "    configuration:\n      extra: true\n",
            "drivers.compute.configuration.extra",
        ),
    ];
    for (anchor, replacement, key) in cases {
        let text = example_text();
        assert!(text.contains(anchor), "{anchor}");
        let err = load_text(&text.replacen(anchor, replacement, 1)).unwrap_err();
        assert!(err.contains(key), "{key}: {err}");
    }
    // A wrong type names its key too.
    let text = example_text().replace(
        "nativeOpenClawSessionCapacity: 16",
        "nativeOpenClawSessionCapacity: lots",
    );
    let err = load_text(&text).unwrap_err();
    assert!(
        err.contains("drivers.compute.configuration.runtime.nativeOpenClawSessionCapacity"),
        "{err}"
    );
}

/// Each range or format error names its key.
#[test]
fn driver_range_and_format_errors_name_the_key() {
    let section = "drivers.compute.configuration";
    let cases = [
        (
            "nativeOpenClawSessionCapacity: 16",
            "nativeOpenClawSessionCapacity: 0",
            "runtime.nativeOpenClawSessionCapacity",
        ),
        (
            "nativeOpenClawSessionCapacity: 16",
            "nativeOpenClawSessionCapacity: 1025",
            "runtime.nativeOpenClawSessionCapacity",
        ),
        (
            "workspaceSize: 5Gi",
            "workspaceSize: 5GB",
            "runtime.workspaceSize",
        ),
        (
            "requests.memory: 16Gi",
            "requests.memory: lots",
            "resources.namespace.quota.requests.memory",
        ),
        (
            "requests: { cpu: 500m, memory: 1Gi }",
            "requests: { cpu: half, memory: 1Gi }",
            "resources.agent.requests.cpu",
        ),
        (
            "limits: { cpu: 500m, memory: 512Mi }",
            "limits: { cpu: -1, memory: 512Mi }",
            "resources.namespace.containerDefaults.limits.cpu",
        ),
        (
            "gatewayTrustedProxyCidrs: [10.0.0.0/24]",
            "gatewayTrustedProxyCidrs: [10.0.0.0/33]",
            "network.gatewayTrustedProxyCidrs[0]",
        ),
        (
            "- cidr: 203.0.113.0/24",
            "- cidr: 203.0.113.0",
            "network.egress[0].cidr",
        ),
        (
            "gatewayPort: 18789",
            "gatewayPort: 70000",
            "network.gatewayPort",
        ),
        ("harnessPort: 8080", "harnessPort: 0", "network.harnessPort"),
        (
            "nodeSelector: { node-pool: agents }",
            "nodeSelector: { node-pool: -agents }",
            "runtime.nodeSelector.node-pool",
        ),
        (
            "gatewayNodeSelector: { node-pool: gateways }",
            "gatewayNodeSelector: { \"bad key!\": x }",
            "runtime.gatewayNodeSelector.bad key!",
        ),
        (
            "podLabels: { k8s-app: kube-dns }",
            "podLabels: {}",
            "network.dns.podLabels",
        ),
        (
            "codexSeccompProfile: profiles/openclaw-codex.json",
            "codexSeccompProfile: /etc/seccomp/codex.json",
            "runtime.codexSeccompProfile",
        ),
        (
            "codexSeccompProfile: profiles/openclaw-codex.json",
            "codexSeccompProfile: ../codex.json",
            "runtime.codexSeccompProfile",
        ),
        (
            "expirationSeconds: 900",
            "expirationSeconds: 60",
            "servicePrincipalCredentials.expirationSeconds",
        ),
        (
            "audience: openclaw.example.com",
            "audience: \"\"",
            "servicePrincipalCredentials.audience",
        ),
        (
            "transportSecretPrefix: openclaw-transport",
            "transportSecretPrefix: Open_Claw",
            "runtime.transportSecretPrefix",
        ),
        (
            "gatewayStorageClassName: fast-rwo",
            "gatewayStorageClassName: Fast_RWO",
            "runtime.gatewayStorageClassName",
        ),
        (
            "kubeconfig: /etc/openclaw/control.kubeconfig",
            "",
            "authentication.kubeconfig",
        ),
        (
            "agent: ghcr.io/openclaw/openclaw@sha256:2222222222222222222222222222222222222222222222222222222222222222",
            "agent: ghcr.io/openclaw/openclaw:1.0",
            "images.agent",
        ),
    ];
    for (from, to, key) in cases {
        let text = example_text();
        assert!(text.contains(from), "{from}");
        let err = load_text(&text.replacen(from, to, 1)).unwrap_err();
        assert!(err.contains(&format!("{section}.{key}")), "{key}: {err}");
    }
    // The unchanged example is fine (so each refusal above is its key's).
    assert!(load_text(&example_text()).is_ok());
}

/// A setting given in the driver section and in clawfed's own section
/// is refused naming both keys; neither wins silently.
#[test]
fn a_setting_given_twice_names_both_keys() {
    let cases = [
        (
            "    namespacePrefix: oce-gateways\n",
            "    namespacePrefix: oce-gateways\n    storageClass: other\n",
            "gateway.options.storageClass",
            "runtime.gatewayStorageClassName",
        ),
        (
            "    namespacePrefix: oce-gateways\n",
            "    namespacePrefix: oce-gateways\n    port: 8443\n",
            "gateway.options.port",
            "network.gatewayPort",
        ),
        (
            "    namespacePrefix: oce-gateways\n",
            "    namespacePrefix: oce-gateways\n    nodeSelector: { a: b }\n",
            "gateway.options.nodeSelector",
            "runtime.gatewayNodeSelector",
        ),
        (
            "    namespacePrefix: oce-gateways\n",
            "    namespacePrefix: oce-gateways\n    trustedProxyCidrs: []\n",
            "gateway.options.trustedProxyCidrs",
            "network.gatewayTrustedProxyCidrs",
        ),
        (
            "  enabled: true\n",
            "  enabled: true\n  kubeconfig: /x\n",
            "gateway.kubeconfig",
            "authentication",
        ),
        (
            "version: 1\n",
            "version: 1\npolicy: { requireImmutableDigest: false }\n",
            "policy.requireImmutableDigest",
            "images.requireImmutableDigest",
        ),
        (
            "version: 1\n",
            "version: 1\npolicy: { defaultGatewayImage: x }\n",
            "policy.defaultGatewayImage",
            "images.gateway",
        ),
    ];
    for (anchor, replacement, own, driver) in cases {
        let text = example_text();
        assert!(text.contains(anchor), "{anchor}");
        let err = load_text(&text.replacen(anchor, replacement, 1)).unwrap_err();
        assert!(err.contains(own), "{own}: {err}");
        assert!(
            err.contains(&format!("drivers.compute.configuration.{driver}")),
            "{driver}: {err}"
        );
    }
    // Without the driver's key, clawfed's own one is used as before.
    let text = example_text()
        .replacen("        gatewayStorageClassName: fast-rwo\n", "", 1)
        .replacen(
            "    namespacePrefix: oce-gateways\n",
            "    namespacePrefix: oce-gateways\n    storageClass: other\n",
            1,
        );
    let c = load_text(&text).expect("no conflict");
    assert_eq!(c.gateway_options().storage_class.as_deref(), Some("other"));
}

#[test]
fn tolerations_reach_harness_and_gateway_settings_and_bad_ones_name_their_key() {
    let text = "drivers:\n  compute:\n    configuration:\n      runtime:\n        tolerations: [{ key: pool, operator: Equal, value: agents, effect: NoSchedule }]\n        gatewayTolerations: [{ key: trusted, operator: Exists }]\n";
    let c = Config::from_yaml(text, "t").unwrap();
    let w = c.workload_settings();
    assert_eq!(w.tolerations.len(), 1);
    assert_eq!(w.tolerations[0].value.as_deref(), Some("agents"));
    let g = c.gateway_options();
    assert_eq!(g.tolerations[0].key.as_deref(), Some("trusted"));
    for (bad, key) in [
        (
            "{ key: pool, operator: Maybe }",
            "runtime.tolerations[0].operator",
        ),
        (
            "{ key: pool, effect: Never }",
            "runtime.tolerations[0].effect",
        ),
        (
            "{ operator: Equal, value: x }",
            "runtime.tolerations[0].key",
        ),
        (
            "{ key: pool, operator: Exists, value: x }",
            "runtime.tolerations[0].value",
        ),
        (
            "{ key: pool, tolerationSeconds: 5 }",
            "runtime.tolerations[0].tolerationSeconds",
        ),
    ] {
        let text = format!(
            "drivers:\n  compute:\n    configuration:\n      runtime:\n        tolerations: [{bad}]\n"
        );
        let err = Config::from_yaml(&text, "t").unwrap_err().to_string();
        assert!(
            err.contains(&format!("drivers.compute.configuration.{key}")),
            "{bad}: {err}"
        );
    }
    let both = "gateway:\n  options:\n    tolerations: []\ndrivers:\n  compute:\n    configuration:\n      runtime:\n        gatewayTolerations: []\n";
    let err = Config::from_yaml(both, "t").unwrap_err().to_string();
    assert!(err.contains("gateway.options.tolerations"), "{err}");
}

#[test]
fn no_driver_section_keeps_every_default() {
    let c = Config::load(None, &env(&[])).unwrap();
    let w = c.workload_settings();
    assert_eq!(w, crate::compute_driver::WorkloadSettings::default());
    assert_eq!(w.harness_port, 8080);
    assert_eq!(w.session_capacity, 8);
    assert_eq!(w.workspace.size, "1Gi");
    assert_eq!(c.gateway_options().transport_secret_prefix, None);
    assert_eq!(c.policy().default_agent_image, None);
}

/// Issue 16: TLS is a pair; plain HTTP beyond loopback needs
/// `api.insecure` and is then warned about; loopback stays plain.
#[test]
fn api_tls_and_plain_http_beyond_loopback() {
    let load = |pairs: &[(&str, &str)]| Config::load(None, &env(pairs));
    // The default (loopback, plain) starts quietly.
    let c = load(&[]).unwrap();
    assert!(c.api_tls_files().is_none());
    assert_eq!(c.plain_http_warning(), None);

    let err = load(&[("CLAWFED_REST_ADDR", "0.0.0.0:8080")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("api.tls"), "{err}");
    assert!(err.contains("0.0.0.0:8080"), "{err}");
    assert!(err.contains("api.insecure: true"), "{err}");
    let err = load(&[("CLAWFED_GRPC_ADDR", "[::]:8081")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("[::]:8081"), "{err}");

    let c = load(&[
        ("CLAWFED_REST_ADDR", "0.0.0.0:8080"),
        ("CLAWFED_API_INSECURE", "true"),
    ])
    .unwrap();
    let warning = c.plain_http_warning().expect("a warning");
    assert!(warning.contains("INSECURE"), "{warning}");
    assert!(warning.contains("0.0.0.0:8080"), "{warning}");

    let c = load(&[
        ("CLAWFED_REST_ADDR", "0.0.0.0:8080"),
        ("CLAWFED_API_TLS_CERT_FILE", "/tls/tls.crt"),
        ("CLAWFED_API_TLS_KEY_FILE", "/tls/tls.key"),
        ("CLAWFED_API_TLS_CLIENT_CA_FILE", "/tls/ca.crt"),
    ])
    .unwrap();
    let files = c.api_tls_files().expect("tls files");
    assert_eq!(files.cert_file, std::path::Path::new("/tls/tls.crt"));
    assert_eq!(files.key_file, std::path::Path::new("/tls/tls.key"));
    assert_eq!(
        files.client_ca_file.as_deref(),
        Some(std::path::Path::new("/tls/ca.crt"))
    );
    assert_eq!(c.plain_http_warning(), None);

    for (pairs, field) in [
        (
            &[("CLAWFED_API_TLS_CERT_FILE", "/c")][..],
            "api.tls.keyFile",
        ),
        (
            &[("CLAWFED_API_TLS_KEY_FILE", "/k")][..],
            "api.tls.certFile",
        ),
        (
            &[("CLAWFED_API_TLS_CLIENT_CA_FILE", "/ca")][..],
            "api.tls.clientCaFile",
        ),
        (
            &[
                ("CLAWFED_API_TLS_CERT_FILE", "/c"),
                ("CLAWFED_API_TLS_KEY_FILE", "/k"),
                ("CLAWFED_API_INSECURE", "true"),
            ][..],
            "api.insecure",
        ),
    ] {
        let err = load(pairs).unwrap_err().to_string();
        assert!(err.contains(field), "{field}: {err}");
    }
    let err = load(&[("CLAWFED_API_INSECURE", "yes")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("CLAWFED_API_INSECURE"), "{err}");

    let c = load_text("api:\n  restAddr: 0.0.0.0:8080\n  tls:\n    certFile: /c\n    keyFile: /k\n    reloadIntervalMs: 500\n").unwrap();
    assert_eq!(c.api.tls.reload_interval_ms, 500);
    let err = load_text("api:\n  tls:\n    certfile: /c\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("api.tls.certfile"), "{err}");
}
