//! The work specs and Gateway targets the pipeline sends, built from a
//! revision without I/O.

use std::collections::BTreeMap;

use clawfed_proto::work::credential::CredentialKind;
use clawfed_proto::work::{self as spec, target};

use crate::compute_driver::WorkloadSettings;
use crate::gateway::{GatewayTarget, TunnelEndpoint};
use crate::model::{Agent, AgentRevision, AgentSpec, HarnessKind, Namespace};
use crate::secrets::SecretValue;

/// The Harness work target of a revision.
pub fn harness_target(ns: &Namespace, rev: &AgentRevision) -> String {
    target::harness(&ns.id, &rev.agent, rev.number)
}

/// The namespace work target of a tenant.
pub fn namespace_target(ns: &Namespace) -> String {
    target::namespace(&ns.id)
}

/// `namespace.ensure` for the tenant, with the installation's quota,
/// container defaults, DNS target, Harness port and egress.
pub fn namespace_work(ns: &Namespace, settings: &WorkloadSettings) -> spec::WorkSpec {
    spec::WorkSpec::NamespaceEnsure(spec::NamespaceWork {
        tenant: ns.name.clone(),
        namespace_id: ns.id.clone(),
        adopt: ns.adopted.then(|| ns.data_plane_namespace.clone()),
        quota: settings.namespace_quota.clone(),
        container_defaults: settings.container_defaults.clone(),
        network: spec::HarnessNetwork {
            harness_port: settings.harness_port,
            egress: settings.egress.clone(),
            dns: settings.dns.clone(),
            ..Default::default()
        },
    })
}

/// The installation's agent resources with the revision's own on top, key
/// by key (an Agent that sets only a memory limit keeps the default CPU).
fn harness_resources(agent: &AgentSpec, settings: &WorkloadSettings) -> spec::Resources {
    // The installation's, or, when it sets none, what the runtime of this
    // kind was measured to need.
    let mut out = if settings.agent_resources == spec::Resources::default() {
        match agent.harness_kind {
            HarnessKind::DedicatedCodex => spec::codex::default_resources(),
            _ => spec::runtime::default_resources(),
        }
    } else {
        settings.agent_resources.clone()
    };
    let r = &agent.resources;
    for (limit, key, value) in [
        (false, "cpu", &r.cpu_request),
        (false, "memory", &r.memory_request),
        (true, "cpu", &r.cpu_limit),
        (true, "memory", &r.memory_limit),
    ] {
        let map = if limit {
            &mut out.limits
        } else {
            &mut out.requests
        };
        if let Some(v) = value {
            map.insert(key.to_owned(), v.clone());
        }
    }
    out
}

/// The CPU and memory a Harness of `agent` requests of its node, as the
/// scheduler will count them: the requests its work carries, else the
/// tenant LimitRange's default request (the installation's container
/// defaults). Placement puts a revision only where this fits. A quantity
/// that does not parse counts as zero (deploy validation refuses those).
pub fn harness_demand(
    agent: &AgentSpec,
    settings: &WorkloadSettings,
) -> clawfed_proto::capacity::Resources {
    let requests = harness_resources(agent, settings).requests;
    let defaults = &settings.container_defaults.default_request;
    let get = |k: &str| requests.get(k).or_else(|| defaults.get(k));
    clawfed_proto::capacity::Resources {
        cpu_millis: get("cpu")
            .and_then(|q| clawfed_proto::capacity::cpu_millis(q).ok())
            .unwrap_or(0),
        memory_bytes: get("memory")
            .and_then(|q| clawfed_proto::capacity::bytes(q).ok())
            .unwrap_or(0),
    }
}

/// `harness.apply` for `rev` in `data_plane_namespace` (the physical name
/// the cluster resolved), with the predecessors that run on the same
/// cluster (a dedicated Harness stops them first). `require_digest` is the
/// installation's digest policy, which the spoke enforces on its own too;
/// `settings` the installation's Harness settings.
/// installation's digest policy, which the spoke enforces on its own too.
/// `startup_status` (`pipeline.startupStatus`) makes the spoke require a
/// valid plugin startup status of the revision's admitted selections
/// before it reports the Harness ready.
pub fn harness_work(
    ns: &Namespace,
    data_plane_namespace: &str,
    rev: &AgentRevision,
    same_cluster_predecessors: &[AgentRevision],
    require_digest: bool,
    settings: &WorkloadSettings,
    startup_status: bool,
) -> spec::WorkSpec {
    let kind = rev.spec.harness_kind;
    let mut env = BTreeMap::new();
    if matches!(
        kind,
        HarnessKind::EmbeddedOpenclaw | HarnessKind::DedicatedOpenclaw
    ) {
        env.insert(
            spec::harness::SESSION_CAPACITY_ENV.to_owned(),
            settings.session_capacity.to_string(),
        );
    }
    // The image admitted at deploy (the installation's default agent image
    // when the spec named none).
    let image = rev
        .images
        .iter()
        .find(|i| i.role == "harness")
        .map_or_else(|| rev.spec.image.clone(), |i| i.reference.clone());
    spec::WorkSpec::HarnessApply(Box::new(spec::HarnessWork {
        tenant: ns.name.clone(),
        namespace_id: ns.id.clone(),
        data_plane_namespace: data_plane_namespace.to_owned(),
        agent: rev.agent.clone(),
        revision: rev.number,
        revision_id: rev.id.clone(),
        harness_kind: rev.spec.harness_kind.as_str().to_owned(),
        image,
        require_digest,
        requirement_labels: rev.spec.requirement_labels.clone(),
        resources: harness_resources(&rev.spec, settings),
        port: settings.harness_port,
        env,
        // The Agent-owned claim: the runtime's state and workspace for
        // every revision of the Agent on this cluster.
        workspace: Some(settings.workspace.clone()),
        credential: spec::SecretData::default(),
        dedicated: rev.spec.harness_kind.is_dedicated(),
        predecessors: same_cluster_predecessors
            .iter()
            .map(|p| spec::Predecessor {
                revision: p.number,
                revision_id: p.id.clone(),
                execution: p.spec.execution_mode,
            })
            .collect(),
        execution: rev.spec.execution_mode,
        node_selector: settings.node_selector.clone(),
        tolerations: settings.tolerations.clone(),
        headless_service: false,
        seccomp_localhost_profile: (kind == HarnessKind::DedicatedCodex)
            .then(|| settings.codex_seccomp_profile.clone())
            .flatten(),
        service_principal: settings.service_principal.clone(),
        plugin_selections: rev.spec.plugins.clone(),
        require_startup_status: startup_status,
        // The Agent's Configuration reaches the OpenClaw runtime as its
        // config file; a Codex app-server takes the model endpoint from it.
        runtime_config: kind.is_openclaw().then(|| {
            crate::runtime_config::render(&rev.configuration, settings.harness_port).to_string()
        }),
        app_server: (kind == HarnessKind::DedicatedCodex).then(|| spec::AppServer {
            model_base_url: crate::runtime_config::codex_model_base_url(&rev.configuration),
        }),
        failover_after_seconds: rev.spec.failover.map(|f| f.after_seconds),
    }))
}

/// The `credential` of `rev`'s `harness.apply`: its opened credentials
/// under their Harness Secret keys ([`spec::credential`]). A kind the
/// revision's Harness may not hold (a service-account credential of an
/// Agent that is no longer dedicated Codex) is left out.
pub fn harness_credential(
    rev: &AgentRevision,
    opened: Vec<(CredentialKind, SecretValue)>,
) -> spec::SecretData {
    spec::SecretData(
        opened
            .into_iter()
            .filter(|(kind, _)| kind.allowed_for(rev.spec.harness_kind))
            .map(|(kind, value)| (kind.secret_key().to_owned(), value.expose().to_owned()))
            .collect(),
    )
}

/// The body of `harness.stop` and `harness.retire` for `rev`.
pub fn revision_work(
    ns: &Namespace,
    data_plane_namespace: &str,
    rev: &AgentRevision,
) -> spec::RevisionWork {
    spec::RevisionWork {
        tenant: ns.name.clone(),
        namespace_id: ns.id.clone(),
        data_plane_namespace: data_plane_namespace.to_owned(),
        agent: rev.agent.clone(),
        revision: rev.number,
        revision_id: rev.id.clone(),
        execution: rev.spec.execution_mode,
        agent_deleted: false,
    }
}

/// The Gateway of `rev`, pointed at its Harness on `harness_port` (through
/// the hub's tunnel ingress `tunnel`, or directly when `None`).
pub fn gateway_target(
    ns: &Namespace,
    data_plane_namespace: &str,
    agent: &Agent,
    rev: &AgentRevision,
    tunnel: Option<&TunnelEndpoint>,
    harness_port: i32,
) -> GatewayTarget {
    GatewayTarget {
        tenant: ns.name.clone(),
        namespace_id: ns.id.clone(),
        agent: agent.name.clone(),
        agent_id: agent.id.clone(),
        revision: rev.number,
        revision_id: rev.id.clone(),
        image: rev
            .images
            .iter()
            .find(|i| i.role == "gateway")
            .map_or_else(String::new, |i| i.reference.clone()),
        harness_cluster: rev.resolved_cluster.clone().unwrap_or_default(),
        harness_namespace: data_plane_namespace.to_owned(),
        harness_port,
        tunnel: tunnel.cloned(),
        configuration: rev.configuration.clone(),
        app_server: rev.spec.harness_kind == HarnessKind::DedicatedCodex,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn namespace() -> Namespace {
        serde_json::from_value(serde_json::json!({
            "id": "0190a0b0-0000-7000-8000-000000000001",
            "name": "team",
            "displayName": "team",
            "dataPlaneNamespace": "oce-0123456789abcde",
            "adopted": false,
            "state": "active",
            "provisionedAt": null,
            "version": 1,
            "createdAt": "2025-01-01T00:00:00Z",
            "updatedAt": "2025-01-01T00:00:00Z",
        }))
        .expect("namespace")
    }

    fn revision(image: &str) -> AgentRevision {
        serde_json::from_value(serde_json::json!({
            "id": "0190a0b0-0000-7000-8000-000000000002",
            "namespace": "team",
            "agent": "bot",
            "number": 1,
            "spec": { "harnessKind": "embedded-openclaw", "image": image },
            "configuration": null,
            "images": [{ "role": "harness", "reference": image,
                         "digest": image.split_once('@').map(|(_, d)| d) }],
            "resolvedCluster": "exec-a",
            "phase": "pending",
            "reason": null,
            "rolledBackFrom": null,
            "createdAt": "2025-01-01T00:00:00Z",
            "updatedAt": "2025-01-01T00:00:00Z",
        }))
        .expect("revision")
    }

    /// The credential goes under the shared Secret keys; a service-account
    /// credential only to a dedicated Codex Harness.
    #[test]
    fn harness_credential_maps_kinds_to_secret_keys() {
        let opened = || {
            vec![
                (CredentialKind::ModelApiKey, SecretValue::new("mk")),
                (CredentialKind::ServiceAccount, SecretValue::new("sa")),
            ]
        };
        let mut rev = revision("reg.example/harness:1.0");
        let c = harness_credential(&rev, opened());
        assert_eq!(
            c.0,
            BTreeMap::from([(spec::credential::MODEL_API_KEY.to_owned(), "mk".to_owned())])
        );
        rev.spec.harness_kind = crate::model::HarnessKind::DedicatedCodex;
        let c = harness_credential(&rev, opened());
        assert_eq!(
            c.0.get(spec::credential::SERVICE_ACCOUNT_CREDENTIAL)
                .map(String::as_str),
            Some("sa")
        );
        assert!(!format!("{c:?}").contains("mk"));
    }

    /// Issue 12: the admitted selections and the startup-status setting
    /// reach the spoke; the setting is the installation's, not the spec's.
    #[test]
    fn harness_work_carries_plugin_selections_and_the_startup_setting() {
        let mut rev = revision("reg.example/harness:1.0");
        rev.spec.plugins = vec!["search".into(), "mail".into()];
        for required in [true, false] {
            let spec::WorkSpec::HarnessApply(work) = harness_work(
                &namespace(),
                "oce-x",
                &rev,
                &[],
                false,
                &WorkloadSettings::default(),
                required,
            ) else {
                panic!("not harness.apply");
            };
            assert_eq!(work.plugin_selections, ["search", "mail"]);
            assert_eq!(work.require_startup_status, required);
        }
    }

    /// Issue 9, defect 7: the spoke's digest gate is the installation
    /// policy, not a consequence of whether the images happen to be pinned.
    #[test]
    fn harness_work_carries_the_digest_policy() {
        let pinned = format!("reg.example/harness@sha256:{}", "a".repeat(64));
        for image in ["reg.example/harness:1.0", pinned.as_str()] {
            for policy in [true, false] {
                let spec::WorkSpec::HarnessApply(work) = harness_work(
                    &namespace(),
                    "oce-x",
                    &revision(image),
                    &[],
                    policy,
                    &WorkloadSettings::default(),
                    true,
                ) else {
                    panic!("not harness.apply");
                };
                assert_eq!(work.require_digest, policy, "{image}");
                assert_eq!(work.image, image);
                assert_eq!(
                    work.data_plane_namespace, "oce-x",
                    "the name the cluster resolved"
                );
            }
        }
    }
}

#[cfg(test)]
mod settings_tests {
    use super::tests::namespace;
    use super::*;
    use crate::compute_driver::ComputeDriverConfig;

    fn revision(kind: &str, resources: serde_json::Value) -> AgentRevision {
        serde_json::from_value(serde_json::json!({
            "id": "0190a0b0-0000-7000-8000-000000000002",
            "namespace": "team",
            "agent": "bot",
            "number": 1,
            "spec": { "harnessKind": kind, "image": "", "resources": resources },
            "configuration": null,
            "images": [{ "role": "harness", "reference": "reg.example/default-agent:1",
                         "digest": null }],
            "resolvedCluster": "exec-a",
            "phase": "pending",
            "reason": null,
            "rolledBackFrom": null,
            "createdAt": "2025-01-01T00:00:00Z",
            "updatedAt": "2025-01-01T00:00:00Z",
        }))
        .expect("revision")
    }

    fn harness(rev: &AgentRevision, settings: &WorkloadSettings) -> spec::HarnessWork {
        match harness_work(&namespace(), "oce-x", rev, &[], false, settings, false) {
            spec::WorkSpec::HarnessApply(w) => *w,
            other => panic!("not harness.apply: {other:?}"),
        }
    }

    fn settings() -> WorkloadSettings {
        let driver: ComputeDriverConfig = serde_yaml_ng::from_str(
            r#"
resources:
  agent:
    requests: { cpu: 500m, memory: 1Gi }
    limits: { cpu: "2", memory: 4Gi }
  namespaceQuota: { pods: "20", requests.cpu: "8" }
  containerDefaults:
    defaultRequest: { cpu: 100m }
    defaultLimit: { memory: 512Mi }
network:
  harnessPort: 9090
  dns: { namespace: dns-system, podLabels: { app: coredns } }
  egress: [{ cidr: 203.0.113.0/24, ports: [443] }]
servicePrincipalCredentials: { enabled: true, audience: openclaw.example }
runtime:
  nodeSelector: { pool: agents }
  tolerations: [{ key: pool, operator: Exists }]
  workspaceSize: 5Gi
  workspaceStorageClass: standard-rwo
  nativeOpenClawSessionCapacity: 16
  codexSeccompProfile: profiles/codex.json
"#,
        )
        .expect("driver yaml");
        driver.validate().expect("valid");
        driver.workload()
    }

    /// Without a Compute Driver section: the old constants, now defaults.
    #[test]
    fn defaults_without_a_driver_section() {
        let d = WorkloadSettings::default();
        let h = harness(&revision("embedded-openclaw", serde_json::json!({})), &d);
        assert_eq!(h.port, 8080);
        assert_eq!(
            h.workspace.map(|w| w.size).as_deref(),
            Some("1Gi"),
            "embedded OpenClaw keeps its state on the Agent's claim"
        );
        assert_eq!(
            h.env.get("OPENCLAW_SESSION_CAPACITY").map(String::as_str),
            Some("8")
        );
        assert!(h.node_selector.is_empty());
        assert_eq!(
            h.resources,
            spec::runtime::default_resources(),
            "the OpenClaw runtime's measured needs"
        );
        assert_eq!(h.resources.limits["memory"], "2Gi");
        assert_eq!(h.seccomp_localhost_profile, None);
        assert_eq!(h.service_principal, None);
        let h = harness(&revision("dedicated-codex", serde_json::json!({})), &d);
        assert_eq!(h.workspace.map(|w| w.size).as_deref(), Some("1Gi"));
        assert_eq!(h.resources, spec::codex::default_resources());
        assert_eq!(h.seccomp_localhost_profile, None);
        let spec::WorkSpec::NamespaceEnsure(n) = namespace_work(&namespace(), &d) else {
            panic!("kind")
        };
        assert!(n.quota.is_empty() && n.network.dns.is_none());
        assert_eq!(n.network.harness_port, 8080);
    }

    #[test]
    fn the_demand_placed_on_is_the_requests_the_work_carries() {
        let s = settings();
        let rev = revision(
            "dedicated-openclaw",
            serde_json::json!({ "cpuRequest": "1" }),
        );
        assert_eq!(
            harness_demand(&rev.spec, &s),
            clawfed_proto::capacity::Resources {
                cpu_millis: 1000,
                memory_bytes: 1 << 30
            }
        );
        // Without agent resources the runtime's measured needs, and where
        // those name no request the LimitRange's default request.
        let mut bare = s.clone();
        bare.agent_resources = spec::Resources::default();
        let measured = spec::runtime::default_resources();
        let rev = revision("embedded-openclaw", serde_json::json!({}));
        let d = harness_demand(&rev.spec, &bare);
        let cpu = measured.requests.get("cpu").map_or("100m", String::as_str);
        assert_eq!(
            d.cpu_millis,
            clawfed_proto::capacity::cpu_millis(cpu).unwrap()
        );
    }

    #[test]
    fn installation_settings_reach_the_work() {
        let s = settings();
        // The Agent's own resources override the installation's per key.
        let rev = revision(
            "dedicated-openclaw",
            serde_json::json!({ "memoryLimit": "8Gi", "cpuRequest": "1" }),
        );
        let h = harness(&rev, &s);
        assert_eq!(h.image, "reg.example/default-agent:1", "the admitted image");
        assert_eq!(h.port, 9090);
        let want = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            h.resources.requests,
            want(&[("cpu", "1"), ("memory", "1Gi")])
        );
        assert_eq!(h.resources.limits, want(&[("cpu", "2"), ("memory", "8Gi")]));
        assert_eq!(h.node_selector, want(&[("pool", "agents")]));
        assert_eq!(
            h.tolerations, s.tolerations,
            "the installation's tolerations"
        );
        assert_eq!(h.tolerations[0].key.as_deref(), Some("pool"));
        assert_eq!(
            h.workspace,
            Some(spec::Workspace {
                size: "5Gi".into(),
                storage_class: Some("standard-rwo".into())
            })
        );
        assert_eq!(h.env, want(&[("OPENCLAW_SESSION_CAPACITY", "16")]));
        assert_eq!(h.seccomp_localhost_profile, None, "not a Codex Harness");
        assert_eq!(
            h.service_principal,
            Some(spec::ServicePrincipal {
                audience: "openclaw.example".into(),
                expiration_seconds: 900
            })
        );

        // Codex: the Localhost profile, no OpenClaw session capacity.
        let h = harness(&revision("dedicated-codex", serde_json::json!({})), &s);
        assert_eq!(
            h.seccomp_localhost_profile.as_deref(),
            Some("profiles/codex.json")
        );
        assert!(h.env.is_empty());
        assert_eq!(h.resources.limits, want(&[("cpu", "2"), ("memory", "4Gi")]));

        let spec::WorkSpec::NamespaceEnsure(n) = namespace_work(&namespace(), &s) else {
            panic!("kind")
        };
        assert_eq!(n.quota, want(&[("pods", "20"), ("requests.cpu", "8")]));
        assert_eq!(
            n.container_defaults.default_request,
            want(&[("cpu", "100m")])
        );
        assert_eq!(
            n.container_defaults.default_limit,
            want(&[("memory", "512Mi")])
        );
        assert_eq!(n.network.harness_port, 9090);
        assert_eq!(
            n.network.dns.as_ref().map(|d| d.namespace.as_str()),
            Some("dns-system")
        );
        assert_eq!(n.network.egress[0].cidr, "203.0.113.0/24");
        assert!(
            n.network.ingress_from_spoke,
            "the tunnel's last hop stays open"
        );

        let agent: Agent = serde_json::from_value(serde_json::json!({
            "id": "a-1", "namespace": "team", "name": "bot",
            "spec": { "harnessKind": "dedicated-codex", "image": "x:1" },
            "desiredState": "running", "activeRevision": null, "latestRevision": 1,
            "version": 1, "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z",
        }))
        .expect("agent");
        let g = gateway_target(&namespace(), "oce-x", &agent, &rev, None, s.harness_port);
        assert_eq!(g.harness_port, 9090);
    }
}
