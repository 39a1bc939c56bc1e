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
/// credential only as `${MODEL_API_KEY}`.
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
pub(crate) mod tests {
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
            credential: SecretData(BTreeMap::from([("MODEL_API_KEY".into(), "k".into())])),
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
        let mount = pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.mount_path == runtime::DATA_DIR)
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
        let env: BTreeMap<String, EnvVar> = c
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.clone()))
            .collect();
        assert_eq!(env["CODEX_HOME"].value.as_deref(), Some(codex::HOME_DIR));
        assert!(
            env.contains_key("MODEL_API_KEY"),
            "the model key is its env"
        );
        assert!(
            !env.contains_key(codex::TOKEN_FILE),
            "the token is a file, not env"
        );
        let mount = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.mount_path == codex::TOKEN_DIR)
            .expect("the token is mounted");
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
        assert_eq!(data.get("MODEL_API_KEY").map(String::as_str), Some("k"));
        let pod = pod_spec(&h);
        let c = &pod.containers[0];
        assert!(c.env_from.is_none(), "the config key stays out of the env");
        let env: BTreeMap<String, EnvVar> = c
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.clone()))
            .collect();
        assert_eq!(
            env["NODE_OPTIONS"].value.as_deref(),
            Some("--max-old-space-size=1536"),
            "the heap within the 2Gi limit; the work's own value is not taken"
        );
        assert_eq!(
            env["MODEL_API_KEY"]
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
                .map(|r| (r.name.as_str(), r.key.as_str())),
            Some(("a1-r3-credentials", "MODEL_API_KEY"))
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
        let mounts: BTreeMap<String, VolumeMount> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.mount_path.clone(), m.clone()))
            .collect();
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
                .and_then(|d| d.get("MODEL_API_KEY").cloned())
                .as_deref(),
            Some("k")
        );
    }
}
