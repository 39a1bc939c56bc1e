//! The specs of Harness work: `harness.apply` (one revision's full
//! desired state and its parts) and `harness.stop`/`harness.retire`, and
//! the image digest check of `requireDigest`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{default_harness_port, harness};
pub use crate::kinds::ExecutionMode;

/// Container resources (Kubernetes quantities).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resources {
    /// Requests, e.g. `cpu: 250m`.
    #[serde(default)]
    pub requests: BTreeMap<String, String>,
    /// Limits, e.g. `memory: 1Gi`.
    #[serde(default)]
    pub limits: BTreeMap<String, String>,
}

impl Resources {
    /// Requests and limits from `(resource, quantity)` pairs, as the
    /// runtimes' built-in defaults spell them.
    pub fn from_pairs(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Self {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        Self {
            requests: map(requests),
            limits: map(limits),
        }
    }
}

/// The workspace PVC (ReadWriteOnce).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Workspace {
    /// Requested size, e.g. `1Gi`.
    pub size: String,
    /// StorageClass; `None` uses the cluster default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
}

/// Secret data: values never appear in `Debug` output or logs.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct SecretData(pub BTreeMap<String, String>);

impl fmt::Debug for SecretData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, "<redacted>")))
            .finish()
    }
}

/// A predecessor revision of the same Agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Predecessor {
    /// Revision number.
    pub revision: i64,
    /// Revision id.
    pub revision_id: String,
    /// How it runs.
    #[serde(default)]
    pub execution: ExecutionMode,
}

/// `harness.apply`: one Harness revision, the full desired state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HarnessWork {
    /// The clawfed namespace (tenant) name.
    pub tenant: String,
    /// The clawfed namespace id.
    pub namespace_id: String,
    /// The physical namespace (as resolved by `namespace.ensure`).
    pub data_plane_namespace: String,
    /// Agent name (DNS-1123, at most 40 characters).
    pub agent: String,
    /// AgentRevision number.
    pub revision: i64,
    /// AgentRevision id.
    pub revision_id: String,
    /// Harness kind ([`crate::kinds::HarnessKind`]'s spelling), recorded
    /// as a label; a string so a kind newer than this spoke is labelled.
    #[serde(default)]
    pub harness_kind: String,
    /// Container image; `name@sha256:<64 hex>` when `requireDigest`.
    pub image: String,
    /// Reject an image not pinned by SHA-256 digest.
    #[serde(default)]
    pub require_digest: bool,
    /// Harness requirement labels: every Harness Pod carries them, and the
    /// readiness contract requires them.
    #[serde(default)]
    pub requirement_labels: BTreeMap<String, String>,
    /// Container resources.
    #[serde(default)]
    pub resources: Resources,
    /// Container port the Harness serves on.
    #[serde(default = "default_harness_port")]
    pub port: i32,
    /// Environment (non-secret) of the Harness container.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The workspace PVC; none when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<Workspace>,
    /// The model credential: goes only into the Harness credential Secret.
    #[serde(default)]
    pub credential: SecretData,
    /// Dedicated Harness: stop `predecessors` before starting this one.
    #[serde(default)]
    pub dedicated: bool,
    /// Earlier revisions of the same Agent to stop first (when `dedicated`).
    #[serde(default)]
    pub predecessors: Vec<Predecessor>,
    /// Ordinary Deployment or provider-owned.
    #[serde(default)]
    pub execution: ExecutionMode,
    /// Node selector of the Harness Pod.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the Harness Pod tolerates (the installation's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Make the Harness Service headless (`clusterIP: None`): no virtual IP
    /// is allocated (large fleets, small Service CIDRs).
    #[serde(default)]
    pub headless_service: bool,
    /// The revision's admitted plugin selection ids: the Harness gets them
    /// in `CLAWFED_PLUGIN_SELECTIONS` ([`crate::startup`]).
    #[serde(default)]
    pub plugin_selections: Vec<String>,
    /// Readiness also needs a valid plugin startup status read from the
    /// Ready Pod ([`crate::startup`]).
    #[serde(default)]
    pub require_startup_status: bool,
    /// Run the Harness under this Localhost seccomp profile (a path
    /// relative to the kubelet's seccomp root) instead of RuntimeDefault:
    /// the installation's `codexSeccompProfile`, for Codex Harnesses only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp_localhost_profile: Option<String>,
    /// The service principal credential: a projected ServiceAccount token
    /// with this audience, mounted read-only. `None`: the Pod gets no token
    /// at all (automount stays off either way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_principal: Option<ServicePrincipal>,
    /// The OpenClaw runtime's config file (JSON), rendered by the hub from
    /// the revision's frozen Configuration and the keys clawfed owns; the
    /// spoke mounts it read-only at
    /// [`runtime::CONFIG_PATH`](super::runtime::CONFIG_PATH). `None`: the
    /// Harness is not an OpenClaw runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_config: Option<String>,
    /// The Harness is a Codex app-server ([`codex`](super::codex)); its
    /// capability token is the credential key
    /// [`codex::TOKEN_FILE`](super::codex::TOKEN_FILE). `None`: it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_server: Option<AppServer>,
    /// The Agent's `failover.afterSeconds`: the Harness runs under the
    /// spoke's execution lease and is fenced when it lapses
    /// ([`crate::failover`]). `None`: it keeps running offline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover_after_seconds: Option<u32>,
}

impl HarnessWork {
    /// The revision this Harness is, as stop and retire work name it.
    pub fn revision_work(&self) -> RevisionWork {
        RevisionWork {
            tenant: self.tenant.clone(),
            namespace_id: self.namespace_id.clone(),
            data_plane_namespace: self.data_plane_namespace.clone(),
            agent: self.agent.clone(),
            revision: self.revision,
            revision_id: self.revision_id.clone(),
            execution: self.execution,
            agent_deleted: false,
        }
    }
}

/// How a Codex app-server Harness runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppServer {
    /// The model API's base URL (`http(s)://.../v1`); `None`: Codex's own
    /// default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_base_url: Option<String>,
}

/// A taint a workload Pod tolerates (Kubernetes `Toleration`), from the
/// installation: e.g. a node pool tainted for agents only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Toleration {
    /// The taint key; `None` (with `Exists`) tolerates every taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `Equal` (default) or `Exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// The taint value (`Equal` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`; `None`: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
    /// How long a `NoExecute` taint is tolerated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

impl Toleration {
    /// The rules the apiserver applies, checked before any object is
    /// built; the error names the bad field (relative to the toleration).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let operator = self.operator.as_deref().unwrap_or("Equal");
        match operator {
            "Equal" | "Exists" => {}
            other => return Err(("operator", format!("{other:?} is not Equal or Exists"))),
        }
        if let Some(effect) = self.effect.as_deref()
            && !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute")
        {
            return Err((
                "effect",
                format!("{effect:?} is not NoSchedule, PreferNoSchedule or NoExecute"),
            ));
        }
        if operator == "Exists" && self.value.as_deref().is_some_and(|v| !v.is_empty()) {
            return Err(("value", "must be empty with operator Exists".into()));
        }
        if self.key.as_deref().is_none_or(str::is_empty) && operator != "Exists" {
            return Err(("key", "required unless operator is Exists".into()));
        }
        if self.toleration_seconds.is_some() && self.effect.as_deref() != Some("NoExecute") {
            return Err(("tolerationSeconds", "only with effect NoExecute".into()));
        }
        Ok(())
    }
}

/// A projected, audience-bound ServiceAccount token given to a workload as
/// its service principal credential (never the default API token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServicePrincipal {
    /// The token's audience.
    pub audience: String,
    /// Lifetime the kubelet requests (it rotates the file before expiry).
    #[serde(default = "default_token_seconds")]
    pub expiration_seconds: i64,
}

fn default_token_seconds() -> i64 {
    harness::SERVICE_PRINCIPAL_TOKEN_SECONDS
}

/// `harness.stop` and `harness.retire`: one revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RevisionWork {
    /// The clawfed namespace (tenant) name.
    pub tenant: String,
    /// The clawfed namespace id.
    pub namespace_id: String,
    /// The physical namespace.
    pub data_plane_namespace: String,
    /// Agent name.
    pub agent: String,
    /// Revision number.
    pub revision: i64,
    /// Revision id.
    pub revision_id: String,
    /// How it runs.
    #[serde(default)]
    pub execution: ExecutionMode,
    /// Set on the retirement sent when the Agent is deleted: the Agent-owned
    /// workspace claim goes too (a plain retirement keeps it for the next
    /// revision).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub agent_deleted: bool,
}

/// Why an image reference is not pinned by digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("image {0:?} is not pinned by a sha256 digest (name@sha256:<64 lowercase hex>)")]
pub struct DigestError(pub String);

/// Accepts `name@sha256:<64 lowercase hex>`.
pub fn check_image_digest(image: &str) -> Result<(), DigestError> {
    let ok = image.split_once("@sha256:").is_some_and(|(name, hex)| {
        !name.is_empty()
            && hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if ok {
        Ok(())
    } else {
        Err(DigestError(image.to_string()))
    }
}
