//! Unit tests of the Gateway object builders.

use super::network::tcp_port;
use super::*;
use crate::gateway::{PrivateRouting, TlsBundle, Transport};
use clawfed_proto::naming::validate_dns1123_label;
use clawfed_proto::work::EgressRule;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

const DIGEST_IMAGE: &str =
    "reg.example/gateway@sha256:0000000000000000000000000000000000000000000000000000000000000000";

fn spec() -> GatewaySpec {
    GatewaySpec {
        tenant: "team-a".into(),
        namespace_id: "ns-id-a".into(),
        agent: "a1".into(),
        revision: 3,
        revision_id: "rev-3".into(),
        image: Some(DIGEST_IMAGE.into()),
        harness_endpoint: "http://a1-r3-harness.oce-abc.svc:8080".into(),
        tunnel_proxy: None,
        tunnel_ca_pem: None,
        transport: Transport {
            gateway_token: "s3cr3t-value".into(),
            tls: Some(TlsBundle {
                cert_pem: "CERT-PEM-VALUE".into(),
                key_pem: "KEY-PEM-VALUE".into(),
                ca_pem: Some("CA".into()),
            }),
        },
        runtime: None,
    }
}

fn config() -> GatewayConfig {
    GatewayConfig {
        storage_class: Some("block-ssd".into()),
        workspace_size: "2Gi".into(),
        node_selector: BTreeMap::from([("trusted".into(), "true".into())]),
        trusted_proxy_cidrs: vec!["10.0.0.0/24".into()],
        approved_client_namespace_labels: BTreeMap::from([("team".into(), "edge".into())]),
        approved_client_pod_labels: BTreeMap::from([("app".into(), "client".into())]),
        harness_egress: vec![EgressRule {
            cidr: "192.0.2.0/24".into(),
            ports: vec![8080],
        }],
        private_routing: Some(PrivateRouting {
            gateway_name: "edge".into(),
            gateway_namespace: "edge-system".into(),
            hostname_suffix: "agents.example".into(),
            api_version: crate::gateway::DEFAULT_ROUTE_API_VERSION.into(),
        }),
        ..Default::default()
    }
}

#[test]
fn deployment_is_one_hardened_recreate_replica_of_the_revision() {
    let (s, c) = (spec(), config());
    let image = validate(&s, &c).expect("valid");
    let d = deployment(&s, &c, &image);
    assert_eq!(d.metadata.name.as_deref(), Some("a1-gateway"));
    assert_eq!(
        d.metadata.namespace,
        Some(clawfed_proto::naming::gateway_namespace(
            "oce-gateways",
            "ns-id-a"
        )),
        "the tenant's own Gateway namespace"
    );
    let ds = d.spec;
    assert_eq!(ds.replicas, Some(1));
    assert_eq!(
        ds.strategy.and_then(|s| s.type_).as_deref(),
        Some("Recreate")
    );
    assert_eq!(ds.selector.match_labels, Some(agent_selector("a1")));
    let tl = ds.template.metadata.and_then(|m| m.labels).expect("labels");
    for (k, v) in [
        (labels::AGENT, "a1"),
        (labels::REVISION, "3"),
        (labels::WORKLOAD_ROLE, "gateway"),
        (labels::TENANT, "team-a"),
        (labels::MANAGED_BY, labels::MANAGER),
    ] {
        assert_eq!(tl.get(k).map(String::as_str), Some(v), "{k}");
    }
    let pod = ds.template.spec.expect("pod");
    assert_eq!(pod.service_account_name.as_deref(), Some("a1-gateway"));
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.node_selector, Some(c.node_selector.clone()));
    let psc = pod.security_context.expect("psc");
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(
        psc.seccomp_profile.map(|s| s.type_).as_deref(),
        Some("RuntimeDefault")
    );
    let ctr = &pod.containers[0];
    assert_eq!(ctr.image.as_deref(), Some(DIGEST_IMAGE));
    let sc = ctr.security_context.clone().expect("sc");
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.privileged, Some(false));
    assert_eq!(
        sc.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_string()])
    );
    let env = ctr.env.clone().expect("env");
    assert!(env.iter().any(|e| e.name == HARNESS_ENDPOINT_ENV
        && e.value.as_deref() == Some("http://a1-r3-harness.oce-abc.svc:8080")));
    let mounts = ctr.volume_mounts.clone().expect("mounts");
    let transport = mounts.iter().find(|m| m.name == "transport").expect("m");
    assert_eq!(transport.read_only, Some(true));
    let volumes = pod.volumes.expect("volumes");
    let claim = volumes
        .iter()
        .find_map(|v| v.persistent_volume_claim.clone())
        .expect("pvc volume");
    assert_eq!(claim.claim_name, "a1-gateway-data");
    // The transport material reaches the Pod only by reference.
    let json = serde_json::to_string(&pod.containers).expect("json");
    assert!(!json.contains("s3cr3t") && !json.contains("PEM-VALUE"));
}

#[test]
fn transport_prefix_and_service_principal_reach_the_objects() {
    let s = spec();
    // Defaults: the old name, no token of any kind.
    let c = config();
    assert_eq!(
        transport_secret(&s, &c).metadata.name.as_deref(),
        Some("a1-gateway-transport")
    );
    let pod = pod_spec(&s, &c, DIGEST_IMAGE);
    assert!(pod.volumes.iter().flatten().all(|v| v.projected.is_none()));

    let mut c = config();
    c.transport_secret_prefix = Some("openclaw-transport".into());
    c.service_principal = Some(clawfed_proto::work::ServicePrincipal {
        audience: "openclaw.example".into(),
        expiration_seconds: 900,
    });
    assert!(validate_config(&c).is_ok());
    assert_eq!(
        transport_secret(&s, &c).metadata.name.as_deref(),
        Some("openclaw-transport-a1")
    );
    let pod = pod_spec(&s, &c, DIGEST_IMAGE);
    assert_eq!(pod.automount_service_account_token, Some(false));
    let volumes = pod.volumes.clone().expect("volumes");
    assert!(
        volumes
            .iter()
            .any(|v| v.secret.as_ref().and_then(|s| s.secret_name.as_deref())
                == Some("openclaw-transport-a1"))
    );
    let token = volumes
        .iter()
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

    c.transport_secret_prefix = Some("x".repeat(MAX_TRANSPORT_PREFIX + 1));
    assert!(validate_config(&c).is_err(), "prefix too long");
    c.transport_secret_prefix = Some("Bad_Prefix".into());
    assert!(validate_config(&c).is_err());
    c.transport_secret_prefix = None;
    c.service_principal = Some(clawfed_proto::work::ServicePrincipal {
        audience: String::new(),
        expiration_seconds: 900,
    });
    assert!(validate_config(&c).is_err());
}

#[test]
fn digest_is_enforced_when_required() {
    let mut s = spec();
    s.image = Some("reg.example/gateway:1.0".into());
    let mut c = config();
    // Set by the hub from policy.requireImmutableDigest.
    c.require_immutable_digest = true;
    assert!(matches!(validate(&s, &c), Err(Error::Digest(_))));
    c.require_immutable_digest = false;
    assert_eq!(validate(&s, &c).as_deref(), Ok("reg.example/gateway:1.0"));
    s.image = None;
    assert_eq!(validate(&s, &c), Err(Error::NoImage));
    c.default_image = Some("reg.example/default:2".into());
    assert_eq!(validate(&s, &c).as_deref(), Ok("reg.example/default:2"));
    c.require_immutable_digest = true;
    assert!(validate_config(&c).is_err(), "tagged default image");
}

#[test]
fn transport_secret_never_holds_the_model_credential() {
    let sec = transport_secret(&spec(), &config());
    let data = sec.string_data.expect("data");
    assert!(data.keys().all(|k| TRANSPORT_KEYS.contains(&k.as_str())));
    assert_eq!(
        data.get("gateway-token").map(String::as_str),
        Some("s3cr3t-value")
    );
    for k in data.keys() {
        let k = k.to_ascii_lowercase();
        assert!(
            !k.contains("model") && !k.contains("api") && !k.contains("credential"),
            "{k}"
        );
    }
    // The spec has no field for anything else: an extra key is refused
    // when the spec is decoded.
    let mut v = serde_json::to_value(spec()).expect("json");
    v["transport"]["CLAWFED_MODEL_API_KEY"] = "sk-x".into();
    assert!(serde_json::from_value::<GatewaySpec>(v).is_err());
    // And secret values never reach Debug output.
    let dbg = format!("{:?}", spec());
    assert!(!dbg.contains("s3cr3t") && !dbg.contains("PEM-VALUE"));
}

#[test]
fn claim_account_and_service() {
    let (s, c) = (spec(), config());
    let pvc = data_claim(&s, &c).spec.expect("spec");
    assert_eq!(pvc.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
    assert_eq!(pvc.storage_class_name.as_deref(), Some("block-ssd"));
    assert_eq!(
        pvc.resources
            .and_then(|r| r.requests)
            .and_then(|r| r.get("storage").cloned()),
        Some(Quantity("2Gi".into()))
    );
    let sa = service_account(&s, &c);
    assert_eq!(sa.automount_service_account_token, Some(false));
    assert_eq!(sa.metadata.name.as_deref(), Some("a1-gateway"));
    let svc = service(&s, &c);
    assert_eq!(svc.metadata.name.as_deref(), Some("a1-r3-gateway"));
    assert_eq!(
        svc.spec.and_then(|s| s.selector),
        Some(revision_selector("a1", 3))
    );
    for l in [sa.metadata.labels, svc.metadata.labels] {
        let l = l.expect("labels");
        assert_eq!(
            l.get(labels::MANAGED_BY).map(String::as_str),
            Some(labels::MANAGER)
        );
        assert_eq!(l.get(labels::TENANT).map(String::as_str), Some("team-a"));
    }
}

#[test]
fn tunnel_mode_gives_the_proxy_and_egress_only_to_the_hub() {
    let mut s = spec();
    s.tunnel_proxy = Some("https://198.18.0.1:8444".into());
    s.tunnel_ca_pem = Some("-----BEGIN CERTIFICATE-----\nx\n".into());
    let secret = transport_secret(&s, &config()).string_data.expect("data");
    assert_eq!(
        secret.get("tunnel-ca.crt").map(String::as_str),
        s.tunnel_ca_pem.as_deref()
    );
    let np = network_policy(&s, &config()).spec.expect("spec");
    let egress = np.egress.expect("egress");
    assert_eq!(
        egress.len(),
        2,
        "dns + the hub's tunnel ingress, no Harness CIDR"
    );
    let hub = &egress[1];
    assert_eq!(
        hub.ports.as_ref().map(|p| p[0].port.clone()),
        Some(Some(IntOrString::Int(8444)))
    );
    let peer = &hub.to.as_ref().expect("to")[0];
    assert!(peer.ip_block.is_none());
    assert_eq!(
        peer.pod_selector
            .as_ref()
            .and_then(|p| p.match_labels.clone()),
        Some(GatewayConfig::default().hub.pod_labels)
    );
    let pod = pod_spec(&s, &config(), "img@sha256:x");
    let env = pod.containers[0].env.clone().expect("env");
    assert!(env.iter().any(
        |e| e.name == TUNNEL_PROXY_ENV && e.value.as_deref() == Some("https://198.18.0.1:8444")
    ));
    assert!(env.iter().any(|e| e.name == TUNNEL_CA_FILE_ENV
        && e.value.as_deref() == Some("/var/run/clawfed/transport/tunnel-ca.crt")));
    // Direct mode: no proxy in the Pod.
    let env = pod_spec(&spec(), &config(), "img@sha256:x").containers[0]
        .env
        .clone()
        .expect("env");
    assert!(env.iter().all(|e| e.name != TUNNEL_PROXY_ENV));
    s.tunnel_proxy = Some("ftp://x".into());
    assert!(validate(&s, &config()).is_err());
}

#[test]
fn network_policy_denies_by_default_and_lets_in_only_approved_peers() {
    let np = network_policy(&spec(), &config()).spec.expect("spec");
    assert_eq!(
        np.pod_selector.and_then(|s| s.match_labels),
        Some(agent_selector("a1"))
    );
    assert_eq!(
        np.policy_types,
        Some(vec!["Ingress".to_string(), "Egress".to_string()])
    );
    let ingress = np.ingress.expect("ingress");
    assert_eq!(ingress.len(), 2, "approved clients, and the hub");
    let hub = ingress[1].from.clone().expect("from");
    assert_eq!(
        hub[0].pod_selector.clone().and_then(|s| s.match_labels),
        Some(config().hub.pod_labels),
        "the hub's Pods send the activation turn"
    );
    let from = ingress[0].from.clone().expect("from");
    assert_eq!(from.len(), 2);
    assert!(from[0].namespace_selector.is_some() && from[0].pod_selector.is_some());
    assert_eq!(
        from[1].ip_block.as_ref().map(|b| b.cidr.as_str()),
        Some("10.0.0.0/24")
    );
    let egress = np.egress.expect("egress");
    assert_eq!(egress.len(), 2, "dns + harness");
    assert_eq!(
        egress[1]
            .to
            .as_ref()
            .and_then(|t| t[0].ip_block.clone())
            .map(|b| b.cidr),
        Some("192.0.2.0/24".into())
    );

    // Nothing approved: only the hub, never "from everywhere".
    let bare = network_policy(&spec(), &GatewayConfig::default())
        .spec
        .expect("spec");
    let only_hub = bare.ingress.expect("ingress");
    assert_eq!(only_hub.len(), 1);
    assert!(
        only_hub[0]
            .from
            .iter()
            .flatten()
            .all(|p| p.pod_selector.is_some()
                && p.namespace_selector.is_some()
                && p.ip_block.is_none())
    );
    let mut c = config();
    c.approved_client_namespace_labels.clear();
    c.trusted_proxy_cidrs.clear();
    let np = network_policy(&spec(), &c).spec.expect("spec");
    let peer = &np.ingress.expect("ingress")[0].from.clone().expect("from")[0];
    assert!(peer.namespace_selector.is_none() && peer.pod_selector.is_some());

    // The Compute Driver's gatewayClients: one exact peer each, the
    // namespace by name.
    let mut c = GatewayConfig {
        clients: vec![super::super::ClientPeer {
            namespace: "openclaw-system".into(),
            pod_labels: BTreeMap::from([("app".into(), "approved".into())]),
        }],
        ..Default::default()
    };
    let np = network_policy(&spec(), &c).spec.expect("spec");
    let rule = &np.ingress.expect("ingress")[0];
    let peer = &rule.from.clone().expect("from")[0];
    assert_eq!(
        peer.namespace_selector.clone().and_then(|s| s.match_labels),
        Some(BTreeMap::from([(
            "kubernetes.io/metadata.name".to_string(),
            "openclaw-system".to_string()
        )]))
    );
    assert_eq!(
        peer.pod_selector.clone().and_then(|s| s.match_labels),
        Some(BTreeMap::from([(
            "app".to_string(),
            "approved".to_string()
        )]))
    );
    assert_eq!(rule.ports, Some(vec![tcp_port(c.port)]));
    c.clients[0].pod_labels.clear();
    assert!(validate_config(&c).is_err(), "never a whole namespace");
}

#[test]
fn air_gapped_gateway_pods_pull_from_the_mirror_with_credentials() {
    let c = GatewayConfig {
        registry_mirrors: vec!["registry.example=mirror.internal:5000".parse().unwrap()],
        image_pull_secrets: vec!["mirror-pull".into()],
        ..config()
    };
    let digest = format!("@sha256:{}", "c".repeat(64));
    let pod = pod_spec(
        &spec(),
        &c,
        &format!("registry.example/openclaw-gateway{digest}"),
    );
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some(format!("mirror.internal:5000/openclaw-gateway{digest}").as_str())
    );
    assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "mirror-pull");
    let bad = GatewayConfig {
        image_pull_secrets: vec!["Not_A_Name".into()],
        ..config()
    };
    assert!(validate_config(&bad).is_err());
}

#[test]
fn gateway_pods_get_the_installations_tolerations() {
    let c = GatewayConfig {
        tolerations: vec![clawfed_proto::work::Toleration {
            key: Some("trusted".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        }],
        ..config()
    };
    let pod = pod_spec(&spec(), &c, "img@sha256:x");
    let t = pod.tolerations.expect("tolerations");
    assert_eq!(t[0].key.as_deref(), Some("trusted"));
    assert_eq!(pod_spec(&spec(), &config(), "img").tolerations, None);
}

#[test]
fn a_long_prefix_and_a_long_agent_name_still_name_a_dns_label() {
    let mut c = GatewayConfig {
        transport_secret_prefix: Some("p".repeat(MAX_TRANSPORT_PREFIX)),
        ..Default::default()
    };
    validate_config(&c).expect("the longest prefix");
    let a = transport_secret_name(&"a".repeat(40), &c);
    let b = transport_secret_name(&"b".repeat(40), &c);
    assert_ne!(a, b, "unique per Agent");
    for name in [&a, &b] {
        validate_dns1123_label(name).expect("a DNS label");
    }
    c.transport_secret_prefix = Some("oc".into());
    assert_eq!(transport_secret_name("a1", &c), "oc-a1");
    c.transport_secret_prefix = Some("p".repeat(MAX_TRANSPORT_PREFIX + 1));
    assert!(validate_config(&c).is_err());
}

#[test]
fn route_attaches_to_the_gateway_and_points_at_the_revision() {
    let c = config();
    let routing = c.private_routing.clone().expect("routing");
    let r = route("gw-ns", "team-a", "a1", 2, &c, &routing).expect("route");
    assert_eq!(r.metadata.namespace.as_deref(), Some("gw-ns"));
    assert_eq!(r.metadata.name.as_deref(), Some("a1"));
    let types = r.types.clone().expect("types");
    assert_eq!(types.api_version, "gateway.networking.k8s.io/v1");
    assert_eq!(types.kind, "HTTPRoute");
    let s = route_spec(&r).expect("spec");
    assert_eq!(s.parent_refs[0].name, "edge");
    assert_eq!(s.parent_refs[0].namespace.as_deref(), Some("edge-system"));
    assert_eq!(s.hostnames, vec!["a1.agents.example".to_string()]);
    assert_eq!(s.rules[0].backend_refs[0].name, "a1-r2-gateway");
    assert_eq!(routed_revision("a1", &s), Some(2));
    assert_eq!(routed_revision("a2", &s), None);
    assert!(route_api_resource("v1").is_err());
    assert!(route_api_resource("g/v/x").is_err());
}

#[test]
fn names_are_dns_labels_within_63() {
    let agent = "a".repeat(40);
    assert!(validate_names(&agent, 1).is_ok());
    assert!(validate_names(&agent, 99_999_999_999).is_ok());
    assert!(validate_names(&agent, i64::MAX).is_err(), "64+ chars");
    assert!(validate_names(&"a".repeat(41), 1).is_err());
    assert!(validate_names("A1", 1).is_err());
    assert!(validate_names("a1", -1).is_err());
}

#[test]
fn config_and_endpoint_checks() {
    assert!(validate_config(&config()).is_ok());
    let mut c = config();
    c.trusted_proxy_cidrs = vec!["10.0.0.0".into()];
    assert!(validate_config(&c).is_err());
    let mut c = config();
    c.harness_egress[0].cidr = "10.0.0.0/33".into();
    assert!(validate_config(&c).is_err());
    let mut s = spec();
    s.harness_endpoint = "http://user:pw@host:1".into();
    assert!(validate(&s, &config()).is_err());
    s.harness_endpoint = "ftp://host".into();
    assert!(validate(&s, &config()).is_err());
    let yaml = "namespacePrefix: gw\nprivateRouting:\n  gatewayName: edge\n  gatewayNamespace: edge\n  hostnameSuffix: x.example\n";
    let c: GatewayConfig = serde_yaml_ng::from_str(yaml).expect("yaml");
    assert_eq!(c.namespace_prefix, "gw");
    assert!(validate_config(&c).is_ok());
    assert_eq!(
        c.private_routing.map(|r| r.api_version).as_deref(),
        Some(crate::gateway::DEFAULT_ROUTE_API_VERSION)
    );
    assert!(serde_yaml_ng::from_str::<GatewayConfig>("bogus: 1").is_err());
}

#[test]
fn the_shared_namespace_key_is_refused_naming_its_replacement() {
    let c: GatewayConfig = serde_yaml_ng::from_str("namespace: clawfed-gateways\n").expect("yaml");
    let err = validate_config(&c).expect_err("removed").to_string();
    assert!(err.contains("gateways.namespace"), "{err}");
    assert!(err.contains("namespacePrefix"), "{err}");
    let mut c = config();
    c.namespace_prefix = "p".repeat(clawfed_proto::naming::MAX_GATEWAY_NAMESPACE_PREFIX_LEN + 1);
    let err = validate_config(&c).expect_err("too long").to_string();
    assert!(err.contains("namespacePrefix"), "{err}");
}

#[test]
fn a_gateway_namespace_is_marked_bound_and_bounded() {
    let mut c = config();
    c.namespace_quota = BTreeMap::from([("pods".into(), "10".into())]);
    c.container_defaults.default_limit = BTreeMap::from([("cpu".into(), "500m".into())]);
    let ns = gateway_namespace("oce-gateways-x", "id-1", "team-a");
    let l = ns.metadata.labels.expect("labels");
    assert_eq!(l.get(labels::TENANT).map(String::as_str), Some("team-a"));
    assert_eq!(
        l.get(labels::GATEWAY_NAMESPACE).map(String::as_str),
        Some("id-1")
    );
    assert_eq!(
        l.get(labels::MANAGED_BY).map(String::as_str),
        Some(labels::MANAGER)
    );
    assert_eq!(
        l.get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("restricted")
    );
    let b = runtime_binding("oce-gateways-x", &c);
    assert_eq!(b.metadata.namespace.as_deref(), Some("oce-gateways-x"));
    assert_eq!(b.role_ref.kind, "ClusterRole");
    assert_eq!(
        b.role_ref.name,
        crate::gateway::DEFAULT_RUNTIME_CLUSTER_ROLE
    );
    let subjects = b.subjects.expect("subjects");
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0].kind, "ServiceAccount");
    assert_eq!(subjects[0].name, "clawfed-hub");
    assert_eq!(subjects[0].namespace.as_deref(), Some("clawfed-system"));
    let q = namespace_quota("oce-gateways-x", &c);
    assert_eq!(
        q.spec.and_then(|s| s.hard),
        Some(BTreeMap::from([("pods".into(), Quantity("10".into()))]))
    );
    let lr = namespace_limits("oce-gateways-x", &c);
    assert_eq!(
        lr.spec.expect("spec").limits[0].default,
        Some(BTreeMap::from([("cpu".into(), Quantity("500m".into()))]))
    );
}
