//! The Gateway workload of one Agent: its ServiceAccount, transport Secret
//! and PVC, the hardened Pod spec (environment, probes, resources, mounts),
//! the single-replica Deployment, and each revision's Service.

use std::collections::BTreeMap;

use clawfed_kube::quantity::quantities;
use clawfed_kube::security;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PodSpec,
    PodTemplateSpec, Probe, ResourceRequirements, Secret, SecretKeySelector, SecretVolumeSource,
    Service, ServiceAccount, ServicePort, ServiceSpec, TCPSocketAction, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::network::match_labels;
use super::{
    APP_SERVER_TOKEN_ENV, APP_SERVER_TOKEN_KEY, DATA_DIR, GATEWAY_UID, HARNESS_ENDPOINT_ENV,
    RUNTIME_CONFIG_KEY, RUNTIME_TOKEN_KEY, TRANSPORT_DIR, TRANSPORT_KEYS, TUNNEL_CA_FILE_ENV,
    TUNNEL_PROXY_ENV, agent_selector, labels, meta, names, owner_labels, revision_meta,
    revision_selector, service_name, transport_secret_name,
};
use crate::gateway::{GatewayConfig, GatewaySpec};

/// The Gateway ServiceAccount (separate from the Harness'); no token is
/// mounted.
pub fn service_account(spec: &GatewaySpec, c: &GatewayConfig) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(&names(&spec.agent).gateway, spec, c),
        automount_service_account_token: Some(false),
        ..Default::default()
    }
}

/// The transport Secret. Its keys are exactly those of [`Transport`]
/// (see [`TRANSPORT_KEYS`]); the model credential has no way in.
///
/// [`Transport`]: crate::gateway::Transport
pub fn transport_secret(spec: &GatewaySpec, c: &GatewayConfig) -> Secret {
    let t = &spec.transport;
    let mut data = BTreeMap::from([(TRANSPORT_KEYS[0].to_string(), t.gateway_token.clone())]);
    if let Some(ca) = &spec.tunnel_ca_pem {
        data.insert(TRANSPORT_KEYS[4].into(), ca.clone());
    }
    if let Some(r) = &spec.runtime {
        data.insert(RUNTIME_CONFIG_KEY.into(), r.config.clone());
        data.insert(RUNTIME_TOKEN_KEY.into(), r.token.clone());
        if let Some(token) = &r.app_server_token {
            data.insert(APP_SERVER_TOKEN_KEY.into(), token.clone());
        }
    }
    if let Some(tls) = &t.tls {
        data.insert(TRANSPORT_KEYS[1].into(), tls.cert_pem.clone());
        data.insert(TRANSPORT_KEYS[2].into(), tls.key_pem.clone());
        if let Some(ca) = &tls.ca_pem {
            data.insert(TRANSPORT_KEYS[3].into(), ca.clone());
        }
    }
    Secret {
        metadata: meta(&transport_secret_name(&spec.agent, c), spec, c),
        type_: Some("Opaque".into()),
        string_data: Some(data),
        ..Default::default()
    }
}

/// The Gateway PVC: ReadWriteOnce, the configured StorageClass and size.
pub fn data_claim(spec: &GatewaySpec, c: &GatewayConfig) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: meta(&names(&spec.agent).data, spec, c),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: c.storage_class.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(c.workspace_size.clone()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// `name` from the transport Secret's `key`.
fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An HTTP GET probe of the Gateway port.
fn http_probe(path: &str, period: i32, failure_threshold: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String("gateway".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failure_threshold),
        timeout_seconds: Some(2),
        ..Default::default()
    }
}

/// The OpenClaw runtime's environment in a Gateway Pod: its config file
/// (read-only, from the transport Secret), its state on the Gateway's
/// claim, its tokens by `secretKeyRef`, no update or discovery attempts,
/// and the tunnel ingress' CA for Node's TLS (the Codex plugin's WebSocket
/// to the ingress).
fn runtime_env(spec: &GatewaySpec, c: &GatewayConfig) -> Vec<EnvVar> {
    use clawfed_proto::work::runtime::GATEWAY_TOKEN_ENV;
    let Some(r) = &spec.runtime else {
        return Vec::new();
    };
    let secret = transport_secret_name(&spec.agent, c);
    let mut out = vec![
        env(
            "OPENCLAW_CONFIG_PATH",
            format!("{TRANSPORT_DIR}/{RUNTIME_CONFIG_KEY}"),
        ),
        env("OPENCLAW_CONFIG_READONLY", "1"),
        env("OPENCLAW_NO_AUTO_UPDATE", "1"),
        env("OPENCLAW_DISABLE_BONJOUR", "1"),
        secret_env(GATEWAY_TOKEN_ENV, &secret, RUNTIME_TOKEN_KEY),
    ];
    if r.app_server_token.is_some() {
        out.push(secret_env(
            APP_SERVER_TOKEN_ENV,
            &secret,
            APP_SERVER_TOKEN_KEY,
        ));
    }
    if spec.tunnel_ca_pem.is_some() {
        out.push(env(
            "NODE_EXTRA_CA_CERTS",
            format!("{TRANSPORT_DIR}/{}", TRANSPORT_KEYS[4]),
        ));
    }
    if let Some(limit) = gateway_resources(c)
        .limits
        .get("memory")
        .and_then(|m| clawfed_kube::quantity::bytes(m))
    {
        out.push(env(
            "NODE_OPTIONS",
            clawfed_proto::work::runtime::node_options(limit),
        ));
    }
    out
}

/// The Gateway container's resources: the installation's, or, when it sets
/// none, what the OpenClaw runtime was measured to need.
pub fn gateway_resources(c: &GatewayConfig) -> clawfed_proto::work::Resources {
    if c.resources == Default::default() {
        clawfed_proto::work::runtime::default_resources()
    } else {
        c.resources.clone()
    }
}

/// The hardened Pod spec: non-root, RuntimeDefault seccomp, all capabilities
/// dropped, no privilege escalation, read-only root filesystem, no
/// automounted ServiceAccount token (only the configured projected service
/// principal token, read-only), trusted nodes only; the PVC at
/// [`DATA_DIR`], the transport Secret read-only at [`TRANSPORT_DIR`].
pub fn pod_spec(spec: &GatewaySpec, c: &GatewayConfig, image: &str) -> PodSpec {
    use clawfed_proto::work::harness::{
        SERVICE_PRINCIPAL_DIR, SERVICE_PRINCIPAL_ENV, SERVICE_PRINCIPAL_FILE,
    };
    let n = names(&spec.agent);
    let token_file = c
        .service_principal
        .as_ref()
        .map(|_| format!("{SERVICE_PRINCIPAL_DIR}/{SERVICE_PRINCIPAL_FILE}"));
    PodSpec {
        service_account_name: Some(n.gateway.clone()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        node_selector: (!c.node_selector.is_empty()).then(|| c.node_selector.clone()),
        tolerations: clawfed_kube::scheduling::tolerations(&c.tolerations),
        image_pull_secrets: (!c.image_pull_secrets.is_empty()).then(|| {
            c.image_pull_secrets
                .iter()
                .map(|name| k8s_openapi::api::core::v1::LocalObjectReference { name: name.clone() })
                .collect()
        }),
        security_context: Some(security::hardened_pod(GATEWAY_UID)),
        containers: vec![Container {
            name: "gateway".into(),
            image: Some(clawfed_proto::registry::mirrored(
                &c.registry_mirrors,
                image,
            )),
            ports: Some(vec![ContainerPort {
                name: Some("gateway".into()),
                container_port: c.port,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            env: Some(
                vec![
                    env("CLAWFED_AGENT", spec.agent.clone()),
                    env("CLAWFED_REVISION", spec.revision.to_string()),
                    env(HARNESS_ENDPOINT_ENV, spec.harness_endpoint.clone()),
                    env("CLAWFED_TRANSPORT_DIR", TRANSPORT_DIR),
                    env("OPENCLAW_STATE_DIR", DATA_DIR),
                    env("HOME", "/tmp"),
                ]
                .into_iter()
                .chain(
                    spec.tunnel_proxy
                        .as_ref()
                        .map(|url| env(TUNNEL_PROXY_ENV, url.clone())),
                )
                .chain(spec.tunnel_ca_pem.as_ref().map(|_| {
                    env(
                        TUNNEL_CA_FILE_ENV,
                        format!("{TRANSPORT_DIR}/{}", TRANSPORT_KEYS[4]),
                    )
                }))
                .chain(token_file.map(|f| env(SERVICE_PRINCIPAL_ENV, f)))
                .chain(runtime_env(spec, c))
                .collect(),
            ),
            // The runtime's own health endpoints (JSON bodies; an unknown
            // path would answer 200 with HTML); a port that accepts is all
            // another Gateway image promises.
            startup_probe: spec
                .runtime
                .as_ref()
                .map(|_| http_probe(clawfed_proto::work::runtime::STARTUP_PATH, 2, 90)),
            readiness_probe: Some(match &spec.runtime {
                Some(_) => http_probe(clawfed_proto::work::runtime::READY_PATH, 5, 3),
                None => Probe {
                    tcp_socket: Some(TCPSocketAction {
                        port: IntOrString::String("gateway".into()),
                        host: None,
                    }),
                    period_seconds: Some(5),
                    ..Default::default()
                },
            }),
            liveness_probe: spec
                .runtime
                .as_ref()
                .map(|_| http_probe(clawfed_proto::work::runtime::LIVE_PATH, 10, 6)),
            resources: {
                let r = gateway_resources(c);
                Some(ResourceRequirements {
                    requests: quantities(&r.requests),
                    limits: quantities(&r.limits),
                    ..Default::default()
                })
            },
            security_context: Some(security::hardened_container()),
            volume_mounts: Some(
                vec![
                    VolumeMount {
                        name: "tmp".into(),
                        mount_path: "/tmp".into(),
                        ..Default::default()
                    },
                    VolumeMount {
                        name: "data".into(),
                        mount_path: DATA_DIR.into(),
                        ..Default::default()
                    },
                    VolumeMount {
                        name: "transport".into(),
                        mount_path: TRANSPORT_DIR.into(),
                        read_only: Some(true),
                        ..Default::default()
                    },
                ]
                .into_iter()
                .chain(
                    c.service_principal
                        .as_ref()
                        .map(|_| clawfed_kube::token::mount(SERVICE_PRINCIPAL_DIR)),
                )
                .collect(),
            ),
            ..Default::default()
        }],
        volumes: Some(
            vec![
                Volume {
                    name: "tmp".into(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Default::default()
                },
                Volume {
                    name: "data".into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: n.data.clone(),
                        read_only: Some(false),
                    }),
                    ..Default::default()
                },
                Volume {
                    name: "transport".into(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(transport_secret_name(&spec.agent, c)),
                        default_mode: Some(0o440),
                        optional: Some(false),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]
            .into_iter()
            .chain(c.service_principal.as_ref().map(|sp| {
                clawfed_kube::token::volume(
                    &sp.audience,
                    sp.expiration_seconds,
                    SERVICE_PRINCIPAL_FILE,
                )
            }))
            .collect(),
        ),
        ..Default::default()
    }
}

/// The Gateway Deployment: exactly one replica and `Recreate` (the PVC is
/// ReadWriteOnce and holds SQLite, so two Pods must never overlap). Its
/// selector spans revisions; the template carries the revision.
pub fn deployment(spec: &GatewaySpec, c: &GatewayConfig, image: &str) -> Deployment {
    let n = names(&spec.agent);
    let mut pod_labels = owner_labels(&spec.tenant, &spec.agent);
    pod_labels.insert(labels::REVISION.to_string(), spec.revision.to_string());
    Deployment {
        metadata: revision_meta(&n.gateway, spec, c),
        spec: DeploymentSpec {
            replicas: Some(1),
            selector: match_labels(&agent_selector(&spec.agent)),
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".into()),
                rolling_update: None,
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(BTreeMap::from([(
                        labels::REVISION_ID_ANNOTATION.to_string(),
                        spec.revision_id.clone(),
                    )])),
                    ..Default::default()
                }),
                spec: Some(pod_spec(spec, c, image)),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The revision's Service `<agent>-r<N>-gateway`, selecting that revision's
/// Gateway Pod.
pub fn service(spec: &GatewaySpec, c: &GatewayConfig) -> Service {
    Service {
        metadata: revision_meta(&service_name(&spec.agent, spec.revision), spec, c),
        spec: Some(ServiceSpec {
            selector: Some(revision_selector(&spec.agent, spec.revision)),
            ports: Some(vec![ServicePort {
                name: Some("gateway".into()),
                port: c.port,
                target_port: Some(IntOrString::String("gateway".into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}
