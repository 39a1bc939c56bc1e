//! Unit tests of the Harness work objects (`super`).

use super::*;
use clawfed_proto::work::{ExecutionMode, Predecessor, SecretData, Workspace};

pub(crate) fn harness() -> HarnessWork {
    HarnessWork {
        tenant: "team-a".into(),
        namespace_id: "id-1".into(),
        data_plane_namespace: "oce-abc".into(),
        agent: "a1".into(),
        revision: 3,
        revision_id: "rev-3".into(),
        harness_kind: "openclaw-native".into(),
        image: format!("reg.example/agent@sha256:{}", "0".repeat(64)),
        require_digest: true,
        requirement_labels: BTreeMap::from([("sandbox.io/class".into(), "gvisor".into())]),
        resources: Default::default(),
        port: 8080,
        env: BTreeMap::new(),
        workspace: Some(Workspace {
            size: "1Gi".into(),
            storage_class: None,
        }),
        credential: SecretData(BTreeMap::from([(
            "CLAWFED_MODEL_API_KEY".into(),
            "k".into(),
        )])),
        dedicated: true,
        predecessors: vec![Predecessor {
            revision: 2,
            revision_id: "rev-2".into(),
            execution: ExecutionMode::Ordinary,
        }],
        execution: ExecutionMode::Ordinary,
        node_selector: BTreeMap::from([("type".into(), "kwok".into())]),
        tolerations: vec![clawfed_proto::work::Toleration {
            key: Some("clawfed.test/agents".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }],
        headless_service: false,
        seccomp_localhost_profile: None,
        service_principal: None,
        plugin_selections: Vec::new(),
        require_startup_status: false,
        runtime_config: None,
        app_server: None,
        failover_after_seconds: None,
    }
}

/// The claim is the Agent's: one name for every revision, no revision
/// label, and an OpenClaw runtime's whole data dir (state, sessions,
/// workspace, HOME) is on it, so a redeploy finds its memory.
#[test]
fn the_agent_owned_claim_holds_the_runtime_data_dir_for_every_revision() {
    let mut h = harness();
    h.runtime_config = Some("{}".into());
    let r3 = workspace_claim(&h).expect("a claim");
    h.revision = 4;
    let r4 = workspace_claim(&h).expect("a claim");
    assert_eq!(r3.metadata.name.as_deref(), Some("a1-workspace"));
    assert_eq!(r3, r4, "every revision asks for the same claim");
    let labels = r3.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get(labels::AGENT).map(String::as_str), Some("a1"));
    assert!(!labels.contains_key(labels::REVISION));
    let pod = pod_spec(&h);
    let mounts = mounts_by_path(&pod.containers[0]);
    let mount = mounts
        .get(runtime::DATA_DIR)
        .expect("the data dir is mounted");
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .expect("its volume");
    assert_eq!(
        volume
            .persistent_volume_claim
            .as_ref()
            .map(|c| c.claim_name.as_str()),
        Some("a1-workspace")
    );
    // Without a claim (a work that asks for none) it is an emptyDir.
    h.workspace = None;
    let pod = pod_spec(&h);
    assert!(
        pod.volumes
            .iter()
            .flatten()
            .any(|v| v.name == "openclaw-data" && v.empty_dir.is_some())
    );
    // A Harness that is not OpenClaw mounts the claim at /workspace.
    let mut codex = harness();
    codex.runtime_config = None;
    let pod = pod_spec(&codex);
    assert!(
        pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == WORKSPACE_VOLUME && m.mount_path == WORKSPACE_DIR)
    );
}

#[test]
fn a_codex_app_server_gets_its_token_file_home_args_and_probes() {
    let mut h = harness();
    h.runtime_config = None;
    h.app_server = Some(clawfed_proto::work::AppServer {
        model_base_url: Some("http://198.18.0.9:8000/v1".into()),
    });
    h.credential
        .0
        .insert(codex::TOKEN_FILE.into(), "cap-token".into());
    let pod = pod_spec(&h);
    let c = &pod.containers[0];
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(args[..3], ["app-server", "--listen", "ws://0.0.0.0:8080"]);
    assert!(
        args.windows(2)
            .any(|w| w == ["--ws-token-file", codex::TOKEN_PATH])
    );
    assert!(
        args.contains(&r#"openai_base_url="http://198.18.0.9:8000/v1""#.to_string()),
        "{args:?}"
    );
    let env = env_by_name(c);
    assert_eq!(env["CODEX_HOME"].value.as_deref(), Some(codex::HOME_DIR));
    assert!(
        env.contains_key("CLAWFED_MODEL_API_KEY"),
        "the model key is its env"
    );
    assert!(
        !env.contains_key(codex::TOKEN_FILE),
        "the token is a file, not env"
    );
    let mounts = mounts_by_path(c);
    let mount = mounts.get(codex::TOKEN_DIR).expect("the token is mounted");
    assert_eq!(mount.read_only, Some(true));
    assert!(
        c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == WORKSPACE_VOLUME && m.mount_path == WORKSPACE_DIR),
        "CODEX_HOME is on the Agent's claim"
    );
    let ready = c.readiness_probe.as_ref().and_then(|p| p.http_get.as_ref());
    assert_eq!(
        ready.and_then(|g| g.path.as_deref()),
        Some(codex::READY_PATH)
    );
    // A Harness that is no app-server gets no arguments.
    h.app_server = None;
    assert!(pod_spec(&h).containers[0].args.is_none());
}

#[test]
fn an_openclaw_runtime_gets_its_config_file_state_dir_env_and_probes() {
    let mut h = harness();
    let plain = pod_spec(&h);
    assert!(plain.containers[0].readiness_probe.is_none());
    h.runtime_config = Some(r#"{"gateway":{"port":8080}}"#.into());
    h.resources.limits.insert("memory".into(), "2Gi".into());
    h.env
        .insert("NODE_OPTIONS".into(), "--max-old-space-size=99999".into());
    let secret = credential_secret(&h, "t", 1);
    let data = secret.string_data.clone().unwrap_or_default();
    assert_eq!(
        data.get(runtime::CONFIG_FILE).map(String::as_str),
        Some(r#"{"gateway":{"port":8080}}"#)
    );
    assert_eq!(
        data.get("CLAWFED_MODEL_API_KEY").map(String::as_str),
        Some("k")
    );
    let pod = pod_spec(&h);
    let c = &pod.containers[0];
    assert!(c.env_from.is_none(), "the config key stays out of the env");
    let env = env_by_name(c);
    assert_eq!(
        env["NODE_OPTIONS"].value.as_deref(),
        Some("--max-old-space-size=1536"),
        "the heap within the 2Gi limit; the work's own value is not taken"
    );
    assert_eq!(
        env["CLAWFED_MODEL_API_KEY"]
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.as_ref())
            .map(|r| (r.name.as_str(), r.key.as_str())),
        Some(("a1-r3-credentials", "CLAWFED_MODEL_API_KEY"))
    );
    assert!(!env.contains_key(runtime::CONFIG_FILE));
    assert_eq!(
        env["OPENCLAW_CONFIG_PATH"].value.as_deref(),
        Some(runtime::CONFIG_PATH)
    );
    assert_eq!(
        env["OPENCLAW_STATE_DIR"].value.as_deref(),
        Some(runtime::STATE_DIR)
    );
    let mounts = mounts_by_path(c);
    assert_eq!(mounts[runtime::CONFIG_DIR].read_only, Some(true));
    assert!(mounts.contains_key(runtime::DATA_DIR));
    let config_volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mounts[runtime::CONFIG_DIR].name)
        .and_then(|v| v.secret.clone())
        .expect("the config comes from the credential Secret");
    assert_eq!(
        config_volume.items.unwrap_or_default()[0].key,
        runtime::CONFIG_FILE
    );
    let path = |p: &Option<Probe>| {
        p.as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|g| g.path.clone())
    };
    assert_eq!(
        path(&c.startup_probe).as_deref(),
        Some(runtime::STARTUP_PATH)
    );
    assert_eq!(
        path(&c.readiness_probe).as_deref(),
        Some(runtime::READY_PATH)
    );
    assert_eq!(path(&c.liveness_probe).as_deref(), Some(runtime::LIVE_PATH));
    // The work's env cannot move the runtime's paths.
    h.env
        .insert("OPENCLAW_STATE_DIR".into(), "/elsewhere".into());
    let pod = pod_spec(&h);
    let dirs: Vec<_> = pod.containers[0]
        .env
        .iter()
        .flatten()
        .filter(|e| e.name == "OPENCLAW_STATE_DIR")
        .filter_map(|e| e.value.clone())
        .collect();
    assert_eq!(dirs, [runtime::STATE_DIR]);
}

#[test]
fn codex_profile_and_service_principal_reach_the_pod() {
    use clawfed_proto::work::ServicePrincipal;
    // Default: RuntimeDefault, no token of any kind.
    let pod = pod_spec(&harness());
    assert!(pod.volumes.iter().flatten().all(|v| v.projected.is_none()));
    let mut h = harness();
    h.seccomp_localhost_profile = Some("profiles/codex.json".into());
    h.service_principal = Some(ServicePrincipal {
        audience: "openclaw.example".into(),
        expiration_seconds: 900,
    });
    assert!(validate(&h).is_ok());
    let pod = pod_spec(&h);
    assert_eq!(pod.automount_service_account_token, Some(false));
    for profile in [
        pod.security_context.clone().and_then(|s| s.seccomp_profile),
        pod.containers[0]
            .security_context
            .clone()
            .and_then(|s| s.seccomp_profile),
    ] {
        let profile = profile.expect("profile");
        assert_eq!(profile.type_, "Localhost");
        assert_eq!(
            profile.localhost_profile.as_deref(),
            Some("profiles/codex.json")
        );
    }
    let token = pod
        .volumes
        .iter()
        .flatten()
        .find_map(|v| v.projected.clone())
        .and_then(|p| p.sources)
        .and_then(|s| s[0].service_account_token.clone())
        .expect("projected token");
    assert_eq!(token.audience.as_deref(), Some("openclaw.example"));
    assert_eq!(token.expiration_seconds, Some(900));
    let mount = pod.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == clawfed_kube::token::VOLUME)
        .expect("mount");
    assert_eq!(mount.read_only, Some(true));
    // Refused before anything is applied.
    h.seccomp_localhost_profile = Some("/etc/x.json".into());
    assert!(validate(&h).is_err());
    h.seccomp_localhost_profile = None;
    h.service_principal = Some(ServicePrincipal {
        audience: "a".into(),
        expiration_seconds: 60,
    });
    assert!(validate(&h).is_err());
}

#[test]
fn deployment_is_hardened_single_replica_with_every_label() {
    let d = deployment(&harness(), "t", 7);
    let spec = d.spec;
    assert_eq!(spec.replicas, Some(1));
    let tl = spec
        .template
        .metadata
        .and_then(|m| m.labels)
        .expect("labels");
    for (k, v) in selector_labels("a1", 3) {
        assert_eq!(tl.get(&k), Some(&v));
    }
    assert_eq!(
        tl.get("sandbox.io/class").map(String::as_str),
        Some("gvisor")
    );
    let pod = spec.template.spec.expect("pod");
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(
        pod.node_selector
            .as_ref()
            .and_then(|n| n.get("type"))
            .map(String::as_str),
        Some("kwok")
    );
    let tolerations = pod
        .tolerations
        .clone()
        .expect("the installation's tolerations");
    assert_eq!(tolerations[0].key.as_deref(), Some("clawfed.test/agents"));
    assert_eq!(tolerations[0].operator.as_deref(), Some("Exists"));
    assert_eq!(tolerations[0].effect.as_deref(), Some("NoSchedule"));
    let psc = pod.security_context.expect("psc");
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(
        psc.seccomp_profile.map(|s| s.type_).as_deref(),
        Some("RuntimeDefault")
    );
    let sc = pod.containers[0].security_context.clone().expect("sc");
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        sc.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_string()])
    );
    let ann = d.metadata.annotations.expect("annotations");
    assert_eq!(
        ann.get(labels::GENERATION_ANNOTATION).map(String::as_str),
        Some("7")
    );
    // The credential reaches the Pod only by reference to the Secret.
    assert!(
        !serde_json::to_string(&pod.containers[0])
            .expect("json")
            .contains("\"k\"")
    );
}

#[test]
fn service_selects_agent_revision_role() {
    let s = service(&harness(), "t", 1);
    assert_eq!(
        s.spec.and_then(|s| s.selector),
        Some(selector_labels("a1", 3))
    );
}

#[test]
fn validation_fails_closed() {
    assert!(validate(&harness()).is_ok());
    let mut h = harness();
    h.image = "reg.example/agent:latest".into();
    assert!(validate(&h).is_err(), "digest required");
    h.require_digest = false;
    assert!(validate(&h).is_ok());
    let mut h = harness();
    h.requirement_labels
        .insert(labels::AGENT.into(), "other".into());
    assert!(validate(&h).is_err(), "contradicts the selector");
    let mut h = harness();
    h.predecessors[0].revision = 3;
    assert!(validate(&h).is_err());
    let mut h = harness();
    h.agent = "A".repeat(41);
    assert!(validate(&h).is_err());
}

/// Issue 12: the runtime learns its selections, revision and instance
/// (the Pod uid, by the downward API); the Service keeps the startup
/// requirement for a restarted spoke, and only when it is required.
#[test]
fn startup_env_and_annotation() {
    let mut h = harness();
    h.plugin_selections = vec!["search".into(), "mail".into()];
    h.require_startup_status = true;
    h.env
        .insert(startup::REVISION_ID_ENV.into(), "spoofed".into());
    let pod = pod_spec(&h);
    let env = pod.containers[0].env.clone().expect("env");
    let get = |n: &str| env.iter().filter(|e| e.name == n).collect::<Vec<_>>();
    assert_eq!(
        get(startup::SELECTIONS_ENV)[0].value.as_deref(),
        Some(r#"["search","mail"]"#)
    );
    let rev = get(startup::REVISION_ID_ENV);
    assert_eq!(rev.len(), 1, "the work's env cannot override it");
    assert_eq!(rev[0].value.as_deref(), Some("rev-3"));
    let instance = get(startup::RUNTIME_INSTANCE_ENV)[0]
        .value_from
        .as_ref()
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.clone());
    assert_eq!(instance.as_deref(), Some("metadata.uid"));
    let ann = service(&h, "t", 1).metadata.annotations.expect("ann");
    let back: StartupAnnotation = serde_json::from_str(&ann[STARTUP_ANNOTATION]).expect("json");
    assert_eq!(back.selections, h.plugin_selections);
    assert_eq!(back.port, 8080);
    h.require_startup_status = false;
    let ann = service(&h, "t", 1).metadata.annotations.expect("ann");
    assert!(!ann.contains_key(STARTUP_ANNOTATION));
    h.plugin_selections = vec!["a".into(), "a".into()];
    assert!(validate(&h).is_err(), "a selection given twice");
}

#[test]
fn secret_holds_the_credential() {
    let s = credential_secret(&harness(), "t", 1);
    assert_eq!(
        s.string_data
            .and_then(|d| d.get("CLAWFED_MODEL_API_KEY").cloned())
            .as_deref(),
        Some("k")
    );
}

/// A container's list (env vars, mounts) as a map by `key`.
fn by_key<T: Clone>(items: &Option<Vec<T>>, key: impl Fn(&T) -> &String) -> BTreeMap<String, T> {
    items
        .iter()
        .flatten()
        .map(|item| (key(item).clone(), item.clone()))
        .collect()
}

/// A container's env vars by name.
fn env_by_name(c: &Container) -> BTreeMap<String, EnvVar> {
    by_key(&c.env, |e| &e.name)
}

/// A container's volume mounts by mount path.
fn mounts_by_path(c: &Container) -> BTreeMap<String, VolumeMount> {
    by_key(&c.volume_mounts, |m| &m.mount_path)
}
