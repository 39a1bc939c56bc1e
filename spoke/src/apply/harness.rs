//! Objects of one Harness revision, built from a [`HarnessWork`]: its
//! ServiceAccount, credential Secret, workspace PVC, Deployment and Service.
//! Pure builders; the executor applies them.

use std::collections::BTreeMap;

use clawfed_kube::quantity::quantities;
use clawfed_kube::security;
use clawfed_proto::labels;
use clawfed_proto::naming::validate_agent_name;
use clawfed_proto::readiness::{HARNESS_ROLE, ReadinessQuery, required_labels};
use clawfed_proto::startup;
use clawfed_proto::work::{HarnessWork, check_image_digest};
use clawfed_proto::work::{codex, runtime};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction, KeyToPath,
    ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    Secret, SecretKeySelector, SecretVolumeSource, Service, ServiceAccount, ServicePort,
    ServiceSpec, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{Error, Result, owner_labels, work_annotations};

/// The Harness container's name in its Pod.
pub const CONTAINER: &str = "harness";

// The Harness Service's annotations (the contract's keys, in proto): the
// requirement labels, the execution mode and, when readiness requires a
// plugin startup status, a [`StartupAnnotation`].
pub use clawfed_proto::labels::{
    EXECUTION_ANNOTATION, REQUIREMENTS_ANNOTATION, STARTUP_ANNOTATION,
};

/// What a restarted spoke needs to check a revision's startup status.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartupAnnotation {
    /// The admitted plugin selections.
    pub selections: Vec<String>,
    /// The Harness port the status is served on.
    pub port: i32,
}

/// The startup-status requirement of a Harness work, when it has one.
pub fn startup_requirement(h: &HarnessWork) -> Option<StartupAnnotation> {
    h.require_startup_status.then(|| StartupAnnotation {
        selections: h.plugin_selections.clone(),
        port: h.port,
    })
}
/// The non-root uid/gid the Harness runs as.
pub const HARNESS_UID: i64 = 65532;

/// The Pod volume of the Agent-owned claim.
pub const WORKSPACE_VOLUME: &str = "workspace";
/// Where a Harness that is not an OpenClaw runtime mounts the claim (an
/// OpenClaw runtime mounts it at its data dir, [`runtime::DATA_DIR`]).
pub const WORKSPACE_DIR: &str = "/workspace";

/// Object names of one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// Deployment, Service, ServiceAccount (and the provider's object).
    pub harness: String,
    /// The credential Secret.
    pub credentials: String,
    /// The Agent-owned workspace PVC (the same for every revision).
    pub workspace: String,
}

/// Names for Agent `agent`, revision `revision`.
pub fn names(agent: &str, revision: i64) -> Names {
    use clawfed_proto::work::harness as contract;
    Names {
        harness: contract::object_name(agent, revision),
        credentials: contract::credentials_name(agent, revision),
        workspace: contract::workspace_name(agent),
    }
}

/// The Service selector: Agent, revision and workload role.
pub fn selector_labels(agent: &str, revision: i64) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::AGENT.to_string(), agent.to_string()),
        (labels::REVISION.to_string(), revision.to_string()),
        (labels::WORKLOAD_ROLE.to_string(), HARNESS_ROLE.to_string()),
    ])
}

/// Ownership labels of every object of the revision.
pub fn object_labels(tenant: &str, agent: &str, revision: i64) -> BTreeMap<String, String> {
    let mut l = owner_labels(tenant);
    l.extend(selector_labels(agent, revision));
    l
}

/// Labels of the Harness Pod: ownership, selector and every requirement label.
pub fn pod_labels(h: &HarnessWork) -> BTreeMap<String, String> {
    let mut l = object_labels(&h.tenant, &h.agent, h.revision);
    for (k, v) in &h.requirement_labels {
        l.insert(k.clone(), v.clone());
    }
    if !h.harness_kind.is_empty() {
        l.insert(labels::HARNESS_KIND.into(), h.harness_kind.clone());
    }
    l
}

/// The readiness query for the revision.
pub fn readiness_query(h: &HarnessWork) -> ReadinessQuery {
    ReadinessQuery {
        namespace: h.data_plane_namespace.clone(),
        agent: h.agent.clone(),
        revision: h.revision.to_string(),
        role: HARNESS_ROLE.into(),
        requirement_labels: h
            .requirement_labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

/// Checks a Harness spec before anything is applied (fails closed).
pub fn validate(h: &HarnessWork) -> Result<()> {
    validate_agent_name(&h.agent)
        .map_err(|e| Error::Invalid(format!("agent {:?}: {e}", h.agent)))?;
    if h.revision < 0 {
        return Err(Error::Invalid(format!("negative revision {}", h.revision)));
    }
    if h.image.is_empty() {
        return Err(Error::Invalid("empty image".into()));
    }
    if h.require_digest {
        check_image_digest(&h.image).map_err(|e| Error::Invalid(e.to_string()))?;
    }
    required_labels(&readiness_query(h)).map_err(|e| Error::Invalid(e.to_string()))?;
    for k in h.requirement_labels.keys() {
        if labels::is_reserved(k) {
            return Err(Error::Invalid(format!(
                "requirement label {k} uses a key reserved for clawfed"
            )));
        }
    }
    if let Some(path) = &h.seccomp_localhost_profile {
        security::check_localhost_profile(path)
            .map_err(|e| Error::Invalid(format!("seccompLocalhostProfile: {e}")))?;
    }
    if let Some(sp) = &h.service_principal {
        if sp.audience.is_empty() {
            return Err(Error::Invalid(
                "servicePrincipal.audience: must not be empty".into(),
            ));
        }
        clawfed_kube::token::check_expiration(sp.expiration_seconds)
            .map_err(|e| Error::Invalid(format!("servicePrincipal.expirationSeconds: {e}")))?;
    }
    let mut selections = std::collections::BTreeSet::new();
    for s in &h.plugin_selections {
        if s.is_empty() || !selections.insert(s) {
            return Err(Error::Invalid(format!(
                "plugin selection {s:?} is empty or given twice"
            )));
        }
    }
    if let Some(p) = h.predecessors.iter().find(|p| p.revision >= h.revision) {
        return Err(Error::Invalid(format!(
            "predecessor revision {} is not older than {}",
            p.revision, h.revision
        )));
    }
    Ok(())
}

fn meta(name: &str, h: &HarnessWork, target: &str, generation: i64) -> ObjectMeta {
    let mut annotations = work_annotations(target, generation);
    annotations.insert(labels::REVISION_ID_ANNOTATION.into(), h.revision_id.clone());
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(h.data_plane_namespace.clone()),
        labels: Some(object_labels(&h.tenant, &h.agent, h.revision)),
        annotations: Some(annotations),
        ..Default::default()
    }
}

/// The Harness ServiceAccount: no token is mounted into the Pod.
pub fn service_account(h: &HarnessWork, target: &str, generation: i64) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(&names(&h.agent, h.revision).harness, h, target, generation),
        automount_service_account_token: Some(false),
        ..Default::default()
    }
}

/// The credential Secret: the only place the model credential goes. An
/// OpenClaw Harness' rendered config file rides along under
/// [`runtime::CONFIG_FILE`] (mounted, not in the environment): it names the
/// credential only as `${CLAWFED_MODEL_API_KEY}`.
pub fn credential_secret(h: &HarnessWork, target: &str, generation: i64) -> Secret {
    let mut data = h.credential.0.clone();
    if let Some(config) = &h.runtime_config {
        data.insert(runtime::CONFIG_FILE.to_owned(), config.clone());
    }
    Secret {
        metadata: meta(
            &names(&h.agent, h.revision).credentials,
            h,
            target,
            generation,
        ),
        type_: Some("Opaque".into()),
        string_data: Some(data),
        ..Default::default()
    }
}

/// The credentials as environment variables, one `secretKeyRef` each (the
/// config file in the same Secret stays out of the environment).
fn credential_env(h: &HarnessWork, secret: &str) -> Vec<EnvVar> {
    h.credential
        .0
        .keys()
        // The app-server's token is a mounted file, never in the environment.
        .filter(|key| h.app_server.is_none() || key.as_str() != codex::TOKEN_FILE)
        .map(|key| EnvVar {
            name: key.clone(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.to_owned(),
                    key: key.clone(),
                    optional: Some(false),
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect()
}

/// An HTTP GET probe of the Harness port.
fn http_probe(path: &str, period: i32, failure_threshold: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String("harness".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failure_threshold),
        timeout_seconds: Some(2),
        ..Default::default()
    }
}

/// What an OpenClaw runtime adds to its Pod: the config file (read-only),
/// a writable data dir (the Agent-owned claim when the work has one, else
/// an emptyDir: the root filesystem is read-only), its environment, and the runtime's own health endpoints as startup,
/// readiness and liveness probes.
struct RuntimeParts {
    volumes: Vec<Volume>,
    mounts: Vec<VolumeMount>,
    env: Vec<EnvVar>,
    probes: [Probe; 3],
}

/// Key `key` of the credential Secret as a read-only file of the same name
/// in `dir` (volume `volume`).
fn secret_file(volume: &str, secret: &str, key: &str, dir: &str) -> (Volume, VolumeMount) {
    let v = Volume {
        name: volume.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_owned()),
            items: Some(vec![KeyToPath {
                key: key.into(),
                path: key.into(),
                ..Default::default()
            }]),
            default_mode: Some(0o440),
            ..Default::default()
        }),
        ..Default::default()
    };
    let m = VolumeMount {
        name: volume.into(),
        mount_path: dir.into(),
        read_only: Some(true),
        ..Default::default()
    };
    (v, m)
}

fn runtime_parts(h: &HarnessWork, secret: &str) -> Option<RuntimeParts> {
    h.runtime_config.as_ref()?;
    let (volume, mount) = secret_file(
        "openclaw-config",
        secret,
        runtime::CONFIG_FILE,
        runtime::CONFIG_DIR,
    );
    let mut volumes = vec![volume];
    let mut mounts = vec![mount];
    if h.workspace.is_none() {
        volumes.push(Volume {
            name: "openclaw-data".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: "openclaw-data".into(),
            mount_path: runtime::DATA_DIR.into(),
            ..Default::default()
        });
    }
    let mut env: Vec<EnvVar> = runtime::ENV
        .iter()
        .map(|(k, v)| EnvVar {
            name: (*k).to_owned(),
            value: Some((*v).to_owned()),
            ..Default::default()
        })
        .collect();
    // The heap within the container's memory limit, when it has one.
    if let Some(limit) = h
        .resources
        .limits
        .get("memory")
        .and_then(|m| clawfed_kube::quantity::bytes(m))
    {
        env.push(EnvVar {
            name: "NODE_OPTIONS".into(),
            value: Some(runtime::node_options(limit)),
            ..Default::default()
        });
    }
    Some(RuntimeParts {
        volumes,
        mounts,
        env,
        // Startup may take a minute on a busy node (10-20 s idle); once
        // started, readiness follows /readyz and a hung runtime restarts.
        probes: [
            http_probe(runtime::STARTUP_PATH, 2, 90),
            http_probe(runtime::READY_PATH, 5, 3),
            http_probe(runtime::LIVE_PATH, 10, 6),
        ],
    })
}

/// What a Codex app-server adds to its Pod: its capability token
/// (read-only, from the credential Secret), `CODEX_HOME` on the workspace
/// (an emptyDir when the work has no claim), its arguments and its health
/// endpoints as probes.
fn app_server_parts(h: &HarnessWork, secret: &str) -> Option<(RuntimeParts, Vec<String>)> {
    let a = h.app_server.as_ref()?;
    let (volume, mount) = secret_file("codex-token", secret, codex::TOKEN_FILE, codex::TOKEN_DIR);
    let mut volumes = vec![volume];
    let mut mounts = vec![mount];
    if h.workspace.is_none() {
        volumes.push(Volume {
            name: WORKSPACE_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: WORKSPACE_VOLUME.into(),
            mount_path: WORKSPACE_DIR.into(),
            ..Default::default()
        });
    }
    let env = vec![EnvVar {
        name: "CODEX_HOME".into(),
        value: Some(codex::HOME_DIR.into()),
        ..Default::default()
    }];
    let parts = RuntimeParts {
        volumes,
        mounts,
        env,
        probes: [
            http_probe(codex::READY_PATH, 2, 90),
            http_probe(codex::READY_PATH, 5, 3),
            http_probe(codex::LIVE_PATH, 10, 6),
        ],
    };
    Some((parts, codex::args(h.port, a.model_base_url.as_deref())))
}

/// The Agent-owned workspace PVC (ReadWriteOnce), when the work asks for
/// one. It carries the Agent's labels but no revision's: every revision of
/// the Agent on this cluster mounts it, one at a time (the replacement is
/// exclusive), and only the Agent's deletion removes it. The spoke creates
/// it when absent and never rewrites it (a claim's class and mode are
/// immutable; a later revision asking otherwise keeps the existing claim).
pub fn workspace_claim(h: &HarnessWork) -> Option<PersistentVolumeClaim> {
    let w = h.workspace.as_ref()?;
    let mut labels = owner_labels(&h.tenant);
    labels.insert(labels::AGENT.to_string(), h.agent.clone());
    Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(names(&h.agent, h.revision).workspace),
            namespace: Some(h.data_plane_namespace.clone()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: w.storage_class.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(w.size.clone()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The hardened Pod spec of the Harness: non-root, RuntimeDefault seccomp
/// (or the work's Localhost profile), all capabilities dropped, no privilege
/// escalation, read-only root filesystem, no automounted ServiceAccount
/// token (only the work's projected service principal token, read-only),
/// the node selector of the work.
pub fn pod_spec(h: &HarnessWork) -> PodSpec {
    let n = names(&h.agent, h.revision);
    let mut volumes = vec![Volume {
        name: "tmp".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }];
    let mut mounts = vec![VolumeMount {
        name: "tmp".into(),
        mount_path: "/tmp".into(),
        ..Default::default()
    }];
    let runtime = runtime_parts(h, &n.credentials);
    let app_server = app_server_parts(h, &n.credentials);
    if h.workspace.is_some() {
        volumes.push(Volume {
            name: WORKSPACE_VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: n.workspace.clone(),
                // `readOnly: false` is the default the apiserver drops: a drift
                // check would see it changed on every read.
                read_only: None,
            }),
            ..Default::default()
        });
        // An OpenClaw runtime keeps its state (SQLite, sessions, the
        // workspace) and HOME under its data dir: all of it on the claim.
        let mount_path = if runtime.is_some() {
            runtime::DATA_DIR
        } else {
            WORKSPACE_DIR
        };
        mounts.push(VolumeMount {
            name: WORKSPACE_VOLUME.into(),
            mount_path: mount_path.into(),
            ..Default::default()
        });
    }
    let runtime_env: Vec<&str> = runtime::ENV.iter().map(|(k, _)| *k).collect();
    let mut env: Vec<EnvVar> = h
        .env
        .iter()
        .filter(|(k, _)| !startup_env_names().contains(&k.as_str()))
        // The runtime's paths (and heap) are the spoke's to set.
        .filter(|(k, _)| {
            runtime.is_none()
                || !(runtime_env.contains(&k.as_str()) || k.as_str() == "NODE_OPTIONS")
        })
        .map(|(k, v)| EnvVar {
            name: k.clone(),
            value: Some(v.clone()),
            ..Default::default()
        })
        .collect();
    if let Some(sp) = &h.service_principal {
        use clawfed_proto::work::harness::{
            SERVICE_PRINCIPAL_DIR, SERVICE_PRINCIPAL_ENV, SERVICE_PRINCIPAL_FILE,
        };
        volumes.push(clawfed_kube::token::volume(
            &sp.audience,
            sp.expiration_seconds,
            SERVICE_PRINCIPAL_FILE,
        ));
        mounts.push(clawfed_kube::token::mount(SERVICE_PRINCIPAL_DIR));
        env.push(EnvVar {
            name: SERVICE_PRINCIPAL_ENV.into(),
            value: Some(format!("{SERVICE_PRINCIPAL_DIR}/{SERVICE_PRINCIPAL_FILE}")),
            ..Default::default()
        });
    }
    let mut pod_security = security::hardened_pod(HARNESS_UID);
    let mut container_security = security::hardened_container();
    if let Some(path) = &h.seccomp_localhost_profile {
        // Both levels: the container's RuntimeDefault would override the Pod's.
        pod_security.seccomp_profile = Some(security::localhost_seccomp(path));
        container_security.seccomp_profile = Some(security::localhost_seccomp(path));
    }
    env.extend(startup_env(h));
    env.extend(credential_env(h, &n.credentials));
    let mut probes = [None, None, None];
    let mut args = None;
    if let Some((parts, a)) = app_server {
        args = Some(a);
        env.retain(|e| e.name != "CODEX_HOME");
        volumes.extend(parts.volumes);
        mounts.extend(parts.mounts);
        env.extend(parts.env);
        probes = parts.probes.map(Some);
    }
    if let Some(r) = runtime {
        volumes.extend(r.volumes);
        mounts.extend(r.mounts);
        env.extend(r.env);
        probes = r.probes.map(Some);
    }
    let [startup_probe, readiness_probe, liveness_probe] = probes;
    PodSpec {
        service_account_name: Some(n.harness.clone()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        node_selector: (!h.node_selector.is_empty()).then(|| h.node_selector.clone()),
        tolerations: clawfed_kube::scheduling::tolerations(&h.tolerations),
        security_context: Some(pod_security),
        containers: vec![Container {
            name: CONTAINER.into(),
            image: Some(h.image.clone()),
            args,
            ports: Some(vec![ContainerPort {
                name: Some("harness".into()),
                container_port: h.port,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            env: Some(env),
            startup_probe,
            readiness_probe,
            liveness_probe,
            resources: Some(ResourceRequirements {
                requests: quantities(&h.resources.requests),
                limits: quantities(&h.resources.limits),
                ..Default::default()
            }),
            security_context: Some(container_security),
            volume_mounts: Some(mounts),
            ..Default::default()
        }],
        volumes: Some(volumes),
        // A fenced Harness must be gone within the margin the hub waits
        // past the lease (clawfed_proto::failover::FENCE_GRACE).
        termination_grace_period_seconds: h
            .failover_after_seconds
            .map(|_| clawfed_proto::failover::FENCE_GRACE.as_secs() as i64),
        ..Default::default()
    }
}

fn startup_env_names() -> [&'static str; 3] {
    [
        startup::SELECTIONS_ENV,
        startup::REVISION_ID_ENV,
        startup::RUNTIME_INSTANCE_ENV,
    ]
}

/// What the runtime needs to publish its plugin startup status: its
/// admitted selections, its revision id and its runtime instance (the Pod
/// uid, through the downward API). These names are the spoke's; the same
/// keys in the work's `env` are ignored.
pub fn startup_env(h: &HarnessWork) -> Vec<EnvVar> {
    vec![
        EnvVar {
            name: startup::SELECTIONS_ENV.into(),
            value: Some(
                serde_json::to_string(&h.plugin_selections).unwrap_or_else(|_| "[]".into()),
            ),
            ..Default::default()
        },
        EnvVar {
            name: startup::REVISION_ID_ENV.into(),
            value: Some(h.revision_id.clone()),
            ..Default::default()
        },
        EnvVar {
            name: startup::RUNTIME_INSTANCE_ENV.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: startup::RUNTIME_INSTANCE_FIELD.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    ]
}

/// The Harness Pod as execution cluster `cluster` runs it: its image from
/// the cluster's mirror, its pull credentials, proxy and CA bundle
/// ([`super::environment`]).
pub fn pod_spec_in(h: &HarnessWork, cluster: &super::environment::ClusterEnvironment) -> PodSpec {
    let mut pod = pod_spec(h);
    cluster.decorate(&mut pod);
    pod
}

/// [`deployment`] as execution cluster `cluster` runs it ([`pod_spec_in`]).
pub fn deployment_in(
    h: &HarnessWork,
    cluster: &super::environment::ClusterEnvironment,
    target: &str,
    generation: i64,
) -> Deployment {
    let mut d = deployment(h, target, generation);
    if let Some(pod) = d.spec.template.spec.as_mut() {
        cluster.decorate(pod);
    }
    d
}

/// The ordinary Harness Deployment: one replica, `Recreate` (the workspace is
/// ReadWriteOnce, so two Pods never overlap).
pub fn deployment(h: &HarnessWork, target: &str, generation: i64) -> Deployment {
    let n = names(&h.agent, h.revision);
    let mut template_annotations = BTreeMap::new();
    template_annotations.insert(
        labels::REVISION_ID_ANNOTATION.to_string(),
        h.revision_id.clone(),
    );
    Deployment {
        metadata: meta(&n.harness, h, target, generation),
        spec: DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(selector_labels(&h.agent, h.revision)),
                ..Default::default()
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".into()),
                rolling_update: None,
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels(h)),
                    annotations: Some(template_annotations),
                    ..Default::default()
                }),
                spec: Some(pod_spec(h)),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The Harness Service; its selector is the Agent/revision/role labels. Its
/// annotations keep what a restarted spoke needs to rebuild readiness.
pub fn service(h: &HarnessWork, target: &str, generation: i64) -> Service {
    let n = names(&h.agent, h.revision);
    let mut m = meta(&n.harness, h, target, generation);
    let ann = m.annotations.get_or_insert_with(BTreeMap::new);
    ann.insert(
        REQUIREMENTS_ANNOTATION.into(),
        serde_json::to_string(&h.requirement_labels).unwrap_or_else(|_| "{}".into()),
    );
    ann.insert(
        EXECUTION_ANNOTATION.into(),
        match h.execution {
            clawfed_proto::work::ExecutionMode::Ordinary => "ordinary".into(),
            clawfed_proto::work::ExecutionMode::Provider => "provider".into(),
        },
    );
    if let Some(startup) = startup_requirement(h) {
        ann.insert(
            STARTUP_ANNOTATION.into(),
            serde_json::to_string(&startup).unwrap_or_default(),
        );
    }
    Service {
        metadata: m,
        spec: Some(ServiceSpec {
            cluster_ip: h.headless_service.then(|| "None".to_string()),
            selector: Some(selector_labels(&h.agent, h.revision)),
            ports: Some(vec![ServicePort {
                name: Some("harness".into()),
                port: h.port,
                target_port: Some(IntOrString::String("harness".into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
pub(crate) mod tests;
