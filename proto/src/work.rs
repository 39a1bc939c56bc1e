//! Typed work specs carried in `clawfed.link.v1.Work.spec` (JSON, camelCase,
//! unknown fields rejected), one struct per [`WorkKind`]. Pure: no I/O.
//!
//! Work is level-based: each spec is the full desired state of its target, so
//! applying the same generation twice is harmless.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// `Work.kind` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkKind {
    /// Ensure the tenant's data-plane namespace ([`NamespaceWork`]).
    NamespaceEnsure,
    /// Tear the tenant's data-plane namespace down ([`NamespaceDeleteWork`]).
    NamespaceDelete,
    /// Apply one Harness revision ([`HarnessWork`]).
    HarnessApply,
    /// Stop one Harness revision, keeping PVC and credential Secret
    /// ([`RevisionWork`]).
    HarnessStop,
    /// Retire one Harness revision: the destructive cleanup of its own
    /// objects; the Agent-owned workspace claim goes only when the Agent was
    /// deleted ([`RevisionWork`]).
    HarnessRetire,
}

impl WorkKind {
    /// Every kind.
    pub const ALL: [WorkKind; 5] = [
        WorkKind::NamespaceEnsure,
        WorkKind::NamespaceDelete,
        WorkKind::HarnessApply,
        WorkKind::HarnessStop,
        WorkKind::HarnessRetire,
    ];

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkKind::NamespaceEnsure => "namespace.ensure",
            WorkKind::NamespaceDelete => "namespace.delete",
            WorkKind::HarnessApply => "harness.apply",
            WorkKind::HarnessStop => "harness.stop",
            WorkKind::HarnessRetire => "harness.retire",
        }
    }

    /// Parses the wire string.
    pub fn parse(s: &str) -> Option<WorkKind> {
        WorkKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for WorkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A decoded work spec.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkSpec {
    /// `namespace.ensure`.
    NamespaceEnsure(NamespaceWork),
    /// `namespace.delete`.
    NamespaceDelete(NamespaceDeleteWork),
    /// `harness.apply`.
    HarnessApply(Box<HarnessWork>),
    /// `harness.stop`.
    HarnessStop(RevisionWork),
    /// `harness.retire`.
    HarnessRetire(RevisionWork),
}

/// Why a work spec cannot be decoded.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// `Work.kind` is not one of [`WorkKind`].
    #[error("unknown work kind {0:?}")]
    UnknownKind(String),
    /// The JSON does not match the kind's spec.
    #[error("invalid {kind} spec: {source}")]
    Json {
        /// The kind.
        kind: WorkKind,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
}

impl WorkSpec {
    /// Decodes `spec` as the spec of `kind`.
    pub fn decode(kind: &str, spec: &[u8]) -> Result<WorkSpec, SpecError> {
        let k = WorkKind::parse(kind).ok_or_else(|| SpecError::UnknownKind(kind.to_string()))?;
        let err = |source| SpecError::Json { kind: k, source };
        Ok(match k {
            WorkKind::NamespaceEnsure => {
                WorkSpec::NamespaceEnsure(serde_json::from_slice(spec).map_err(err)?)
            }
            WorkKind::NamespaceDelete => {
                WorkSpec::NamespaceDelete(serde_json::from_slice(spec).map_err(err)?)
            }
            WorkKind::HarnessApply => {
                WorkSpec::HarnessApply(Box::new(serde_json::from_slice(spec).map_err(err)?))
            }
            WorkKind::HarnessStop => {
                WorkSpec::HarnessStop(serde_json::from_slice(spec).map_err(err)?)
            }
            WorkKind::HarnessRetire => {
                WorkSpec::HarnessRetire(serde_json::from_slice(spec).map_err(err)?)
            }
        })
    }

    /// The kind.
    pub fn kind(&self) -> WorkKind {
        match self {
            WorkSpec::NamespaceEnsure(_) => WorkKind::NamespaceEnsure,
            WorkSpec::NamespaceDelete(_) => WorkKind::NamespaceDelete,
            WorkSpec::HarnessApply(_) => WorkKind::HarnessApply,
            WorkSpec::HarnessStop(_) => WorkKind::HarnessStop,
            WorkSpec::HarnessRetire(_) => WorkKind::HarnessRetire,
        }
    }

    /// Encodes the spec as the JSON carried in `Work.spec`.
    pub fn encode(&self) -> Vec<u8> {
        let r = match self {
            WorkSpec::NamespaceEnsure(s) => serde_json::to_vec(s),
            WorkSpec::NamespaceDelete(s) => serde_json::to_vec(s),
            WorkSpec::HarnessApply(s) => serde_json::to_vec(s),
            WorkSpec::HarnessStop(s) | WorkSpec::HarnessRetire(s) => serde_json::to_vec(s),
        };
        // These types serialize infallibly (string keys, no custom impls that fail).
        r.unwrap_or_default()
    }
}

/// Work targets (the hub chooses them; the spoke only records them).
pub mod target {
    use std::fmt;

    /// Target of namespace work: `namespace/<namespace id>`.
    pub fn namespace(namespace_id: &str) -> String {
        Target::Namespace {
            namespace_id: namespace_id.to_owned(),
        }
        .to_string()
    }

    /// Target of Harness work: `harness/<namespace id>/<agent>/<revision>`.
    pub fn harness(namespace_id: &str, agent: &str, revision: i64) -> String {
        Target::Harness {
            namespace_id: namespace_id.to_owned(),
            agent: agent.to_owned(),
            revision,
        }
        .to_string()
    }

    /// A parsed work target.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub enum Target {
        /// The tenant's data-plane namespace in one cluster.
        Namespace { namespace_id: String },
        /// One Harness revision of an Agent.
        Harness {
            namespace_id: String,
            agent: String,
            revision: i64,
        },
    }

    /// A string that is not a work target.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[error("invalid work target {0:?}: want namespace/<id> or harness/<id>/<agent>/<revision>")]
    pub struct InvalidTarget(pub String);

    impl Target {
        /// The tenant (namespace id) the target belongs to.
        pub fn namespace_id(&self) -> &str {
            match self {
                Target::Namespace { namespace_id } | Target::Harness { namespace_id, .. } => {
                    namespace_id
                }
            }
        }
    }

    impl std::str::FromStr for Target {
        type Err = InvalidTarget;

        fn from_str(s: &str) -> Result<Self, Self::Err> {
            let bad = || InvalidTarget(s.to_owned());
            let parts: Vec<&str> = s.split('/').collect();
            match parts.as_slice() {
                ["namespace", id] if !id.is_empty() => Ok(Target::Namespace {
                    namespace_id: (*id).to_owned(),
                }),
                ["harness", id, agent, revision] if !id.is_empty() && !agent.is_empty() => {
                    Ok(Target::Harness {
                        namespace_id: (*id).to_owned(),
                        agent: (*agent).to_owned(),
                        revision: revision.parse().map_err(|_| bad())?,
                    })
                }
                _ => Err(bad()),
            }
        }
    }

    impl fmt::Display for Target {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                Target::Namespace { namespace_id } => write!(f, "namespace/{namespace_id}"),
                Target::Harness {
                    namespace_id,
                    agent,
                    revision,
                } => write!(f, "harness/{namespace_id}/{agent}/{revision}"),
            }
        }
    }
}

/// Generations of a Harness revision's target. A revision's Harness only
/// moves forward (applied, then stopped, then retired), so its lifecycle
/// step is its generation: a later step supersedes an earlier one still
/// queued, and a result for a later step answers an earlier one too.
pub mod generation {
    /// `harness.apply`.
    pub const HARNESS_APPLY: i64 = 1;
    /// `harness.stop`.
    pub const HARNESS_STOP: i64 = 2;
    /// `harness.retire`.
    pub const HARNESS_RETIRE: i64 = 3;
    /// `harness.retire` sent because the Agent was deleted
    /// ([`super::RevisionWork::agent_deleted`]): newer than a plain
    /// retirement, so a revision retired before still gets its Agent's
    /// storage removed.
    pub const AGENT_DELETE: i64 = 4;
    /// `namespace.ensure` (the namespace's desired state does not change
    /// after provisioning; a teardown is sent with a newer generation).
    pub const NAMESPACE_ENSURE: i64 = 1;
}

/// Names of a Harness revision's objects in the execution cluster, and how
/// the Gateway reaches it: the hub and the spoke both use these.
pub mod harness {
    /// The port the Harness serves on unless the work says otherwise.
    pub const DEFAULT_PORT: i32 = 8080;
    /// Environment variable telling a native OpenClaw Harness how many
    /// sessions it may hold (`nativeOpenClawSessionCapacity`).
    pub const SESSION_CAPACITY_ENV: &str = "OPENCLAW_SESSION_CAPACITY";
    /// Sessions a native OpenClaw Harness holds unless configured.
    pub const DEFAULT_SESSION_CAPACITY: u32 = 8;
    /// Lifetime of a service principal token unless configured.
    pub const SERVICE_PRINCIPAL_TOKEN_SECONDS: i64 = 900;
    /// Where the service principal token is mounted (read-only), in
    /// Harness and Gateway Pods alike.
    pub const SERVICE_PRINCIPAL_DIR: &str = "/var/run/secrets/openclaw/service-principal";
    /// The token's file name inside [`SERVICE_PRINCIPAL_DIR`].
    pub const SERVICE_PRINCIPAL_FILE: &str = "token";
    /// Environment variable naming the token file.
    pub const SERVICE_PRINCIPAL_ENV: &str = "OPENCLAW_SERVICE_PRINCIPAL_TOKEN_FILE";

    /// Deployment, Service and ServiceAccount: `<agent>-r<N>-harness`.
    pub fn object_name(agent: &str, revision: i64) -> String {
        format!("{agent}-r{revision}-harness")
    }

    /// The credential Secret: `<agent>-r<N>-credentials`.
    pub fn credentials_name(agent: &str, revision: i64) -> String {
        format!("{agent}-r{revision}-credentials")
    }

    /// The Agent-owned workspace PVC: `<agent>-workspace`. One claim per
    /// Agent and execution cluster, reused by every revision there (the
    /// runtime's state and workspace survive a redeploy); retirement keeps
    /// it, only the Agent's deletion removes it ([`RevisionWork::agent_deleted`]).
    pub fn workspace_name(agent: &str) -> String {
        format!("{agent}-workspace")
    }

    /// The in-cluster URL of the Harness Service (valid inside the
    /// execution cluster only).
    pub fn service_url(agent: &str, revision: i64, namespace: &str, port: i32) -> String {
        format!(
            "http://{}.{namespace}.svc:{port}",
            object_name(agent, revision)
        )
    }
}

/// How an OpenClaw Harness gets its configuration and state: paths and
/// environment the hub renders the config for and the spoke mounts and sets.
pub mod runtime {
    /// Where the rendered config is mounted (read-only).
    pub const CONFIG_DIR: &str = "/etc/openclaw";
    /// The config file's name: its key in the Harness credential Secret too.
    pub const CONFIG_FILE: &str = "openclaw.json";
    /// `CONFIG_DIR/CONFIG_FILE`.
    pub const CONFIG_PATH: &str = "/etc/openclaw/openclaw.json";
    /// The runtime's writable home: its state directory and `HOME` below it.
    pub const DATA_DIR: &str = "/var/lib/openclaw";
    /// `OPENCLAW_STATE_DIR`: SQLite, sessions, the default workspace.
    pub const STATE_DIR: &str = "/var/lib/openclaw/state";
    /// `HOME` (the root filesystem is read-only).
    pub const HOME_DIR: &str = "/var/lib/openclaw/home";
    /// Key of the gateway's token in the Harness credential Secret (and the
    /// runtime's environment variable for it).
    pub const GATEWAY_TOKEN_ENV: &str = "OPENCLAW_GATEWAY_TOKEN";
    /// The environment every OpenClaw Harness gets besides its credentials:
    /// the config file (read-only), the state dir, `HOME`, and no update or
    /// discovery attempts (air-gapped clusters).
    pub const ENV: [(&str, &str); 6] = [
        ("OPENCLAW_CONFIG_PATH", CONFIG_PATH),
        ("OPENCLAW_CONFIG_READONLY", "1"),
        ("OPENCLAW_STATE_DIR", STATE_DIR),
        ("HOME", HOME_DIR),
        ("OPENCLAW_NO_AUTO_UPDATE", "1"),
        ("OPENCLAW_DISABLE_BONJOUR", "1"),
    ];
    /// The runtime container's resources when the installation sets none,
    /// from what it was measured to use here (`openclaw gateway run`,
    /// 2026.9.6): about 0.94 GB RSS idle, 1.15 GB 20 s after start, 1.47 GB
    /// after a chat (main process and two workers). The request covers the
    /// working set, so a node is not overcommitted by design; the limit
    /// leaves headroom, as OpenClaw's own manifest (2Gi) does.
    pub fn default_resources() -> super::Resources {
        super::Resources {
            requests: [("cpu", "250m"), ("memory", "1536Mi")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into(),
            limits: [("memory", "2Gi")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into(),
        }
    }
    /// `NODE_OPTIONS` for a runtime whose memory limit is `limit_bytes`: V8's
    /// old space at three quarters of it, so the heap is collected before
    /// the kernel kills the container (`--max-old-space-size=1536` at 2Gi,
    /// as OpenClaw's manifest sets it).
    pub fn node_options(limit_bytes: u64) -> String {
        format!("--max-old-space-size={}", limit_bytes / (1 << 20) * 3 / 4)
    }
    /// Health paths of the runtime, each answered with a JSON body.
    pub const STARTUP_PATH: &str = "/startupz";
    pub const READY_PATH: &str = "/readyz";
    pub const LIVE_PATH: &str = "/healthz";
}

/// The Codex app-server a dedicated Codex Agent's Harness runs (`codex
/// app-server`): its Gateway's Codex plugin talks to it over WebSocket,
/// authenticated by a capability token the hub derives per revision.
pub mod codex {
    /// `CODEX_HOME` (its login, threads and SQLite): on the Agent-owned
    /// workspace claim, so a conversation survives a redeploy.
    pub const HOME_DIR: &str = "/workspace/.codex";
    /// The workspace the Gateway maps its own into (the Codex plugin's
    /// `remoteWorkspaceRoot`): the claim, where the Harness mounts it.
    pub const WORKSPACE_ROOT: &str = "/workspace";
    /// Where the capability token is mounted (read-only).
    pub const TOKEN_DIR: &str = "/etc/codex";
    /// The token's key in the Harness credential Secret and its file name
    /// under [`TOKEN_DIR`] (a file, never in the environment).
    pub const TOKEN_FILE: &str = "app-server-token";
    /// `TOKEN_DIR/TOKEN_FILE`.
    pub const TOKEN_PATH: &str = "/etc/codex/app-server-token";
    /// The app-server's resources when the installation sets none: it was
    /// measured at about 120 MB RSS after a few turns (a native binary);
    /// the limit leaves room for the tools it runs.
    pub fn default_resources() -> super::Resources {
        super::Resources {
            requests: [("cpu", "100m"), ("memory", "256Mi")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into(),
            limits: [("memory", "1Gi")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into(),
        }
    }
    /// Health paths of the app-server (`GET`, no auth).
    pub const READY_PATH: &str = "/readyz";
    pub const LIVE_PATH: &str = "/healthz";

    /// The container's arguments: the app-server on every address of the
    /// Pod at `port`, capability-token auth (required off loopback), no
    /// analytics, and the model API at `model_base_url` when given (Codex's
    /// `openai_base_url`: its OpenAI provider's endpoint).
    pub fn args(port: i32, model_base_url: Option<&str>) -> Vec<String> {
        let mut args: Vec<String> = [
            "app-server",
            "--listen",
            &format!("ws://0.0.0.0:{port}"),
            "--ws-auth",
            "capability-token",
            "--ws-token-file",
            TOKEN_PATH,
            "-c",
            "analytics.enabled=false",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        if let Some(url) = model_base_url {
            args.push("-c".into());
            // A TOML string: JSON's escaping is valid TOML basic-string escaping.
            args.push(format!("openai_base_url={}", serde_json::Value::from(url)));
        }
        args
    }
}

/// The managed credentials of an Agent and the keys they are projected
/// under in the Harness credential Secret (`<agent>-r<N>-credentials`,
/// which the Harness Pod reads with `envFrom`). The hub holds the values
/// write-only and encrypted; the spoke writes them only into that Secret.
pub mod credential {
    use std::fmt;

    /// Key of the model API key in the Harness Secret (and so the Harness
    /// container's environment variable).
    pub const MODEL_API_KEY: &str = "MODEL_API_KEY";
    /// Key of the service-account credential (dedicated Codex only).
    pub const SERVICE_ACCOUNT_CREDENTIAL: &str = "SERVICE_ACCOUNT_CREDENTIAL";

    /// The kinds of managed credential an Agent can hold.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum CredentialKind {
        /// `model-api-key`: the model provider's API key.
        ModelApiKey,
        /// `service-account`: a service-account credential, accepted for
        /// dedicated Codex Agents only.
        ServiceAccount,
    }

    impl CredentialKind {
        /// Every kind.
        pub const ALL: [CredentialKind; 2] =
            [CredentialKind::ModelApiKey, CredentialKind::ServiceAccount];

        /// The wire spelling (API paths, JSON, CLI `--kind`).
        pub fn as_str(self) -> &'static str {
            match self {
                CredentialKind::ModelApiKey => "model-api-key",
                CredentialKind::ServiceAccount => "service-account",
            }
        }

        /// Parses the wire spelling.
        pub fn parse(s: &str) -> Option<CredentialKind> {
            CredentialKind::ALL.into_iter().find(|k| k.as_str() == s)
        }

        /// The key the value is projected under in the Harness Secret.
        pub fn secret_key(self) -> &'static str {
            match self {
                CredentialKind::ModelApiKey => MODEL_API_KEY,
                CredentialKind::ServiceAccount => SERVICE_ACCOUNT_CREDENTIAL,
            }
        }

        /// Whether a Harness of `harness_kind` (e.g. `dedicated-codex`)
        /// may hold this kind.
        pub fn allowed_for(self, harness_kind: &str) -> bool {
            match self {
                CredentialKind::ModelApiKey => true,
                CredentialKind::ServiceAccount => harness_kind == "dedicated-codex",
            }
        }

        /// The kinds as a human list, for error messages.
        pub fn expected() -> String {
            CredentialKind::ALL.map(CredentialKind::as_str).join(", ")
        }
    }

    impl fmt::Display for CredentialKind {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.as_str())
        }
    }
}

/// `namespace.ensure`: the tenant's data-plane namespace and its guard rails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceWork {
    /// The clawfed namespace (tenant) name: value of the tenant label.
    pub tenant: String,
    /// The clawfed namespace id: input of the naming rule and value of the
    /// namespace-id annotation.
    pub namespace_id: String,
    /// Adopt this operator-named namespace instead of `oce-<hash15>`; the spoke
    /// refuses unless an operator labelled it [`crate::labels::ADOPTABLE`]`=true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopt: Option<String>,
    /// ResourceQuota `spec.hard` (e.g. `pods: "20"`, `requests.cpu: "8"`).
    #[serde(default)]
    pub quota: BTreeMap<String, String>,
    /// LimitRange container defaults.
    #[serde(default)]
    pub container_defaults: ContainerDefaults,
    /// The flows Harness Pods need beyond DNS.
    #[serde(default)]
    pub network: HarnessNetwork,
}

/// LimitRange `Container` defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerDefaults {
    /// `defaultRequest` (e.g. `cpu: 100m`, `memory: 128Mi`).
    #[serde(default)]
    pub default_request: BTreeMap<String, String>,
    /// `default` limits.
    #[serde(default)]
    pub default_limit: BTreeMap<String, String>,
}

/// Network flows allowed to and from Harness Pods (everything else is denied).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HarnessNetwork {
    /// The spoke's own Pods may reach the Harness port: the tunnel's last
    /// hop (the Gateway reaches its Harness through the hub and the spoke).
    #[serde(default = "yes")]
    pub ingress_from_spoke: bool,
    /// Further sources (CIDRs) allowed to reach the Harness port: direct
    /// mode only, where the Gateway's addresses reach it over a flat network.
    #[serde(default)]
    pub ingress_from_cidrs: Vec<String>,
    /// The Harness port opened to `ingressFromCidrs`.
    #[serde(default = "default_harness_port")]
    pub harness_port: i32,
    /// Egress destinations (e.g. the model provider's addresses).
    #[serde(default)]
    pub egress: Vec<EgressRule>,
    /// The DNS Pods every data-plane Pod may reach (the installation's
    /// `network.dns`); `None` keeps the spoke's own setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsTarget>,
}

/// Where a cluster's DNS Pods run: the DNS egress NetworkPolicies admit
/// them (UDP and TCP 53) and nothing else by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DnsTarget {
    /// Namespace of the DNS Pods.
    pub namespace: String,
    /// Labels of the DNS Pods.
    pub pod_labels: BTreeMap<String, String>,
}

/// One allowed egress flow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EgressRule {
    /// Destination CIDR.
    pub cidr: String,
    /// Destination TCP ports.
    pub ports: Vec<i32>,
}

fn yes() -> bool {
    true
}

impl Default for HarnessNetwork {
    fn default() -> Self {
        Self {
            ingress_from_spoke: true,
            ingress_from_cidrs: Vec::new(),
            harness_port: default_harness_port(),
            egress: Vec::new(),
            dns: None,
        }
    }
}

fn default_harness_port() -> i32 {
    harness::DEFAULT_PORT
}

/// `namespace.delete`: tear the tenant's data-plane namespace down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceDeleteWork {
    /// The clawfed namespace (tenant) name.
    pub tenant: String,
    /// The clawfed namespace id.
    pub namespace_id: String,
    /// The physical namespace (as resolved by `namespace.ensure`).
    pub data_plane_namespace: String,
}

/// How a Harness runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub enum ExecutionMode {
    /// The spoke applies an ordinary Deployment.
    #[default]
    Ordinary,
    /// The spoke's SandboxDriver provider owns the Harness.
    Provider,
}

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
    /// Harness kind (e.g. `openclaw-native`), recorded as a label.
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
    /// spoke mounts it read-only at [`runtime::CONFIG_PATH`]. `None`: the
    /// Harness is not an OpenClaw runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_config: Option<String>,
    /// The Harness is a Codex app-server ([`codex`]); its capability token
    /// is the credential key [`codex::TOKEN_FILE`]. `None`: it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_server: Option<AppServer>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_round_trip_and_reject_garbage() {
        use target::Target;
        for t in [target::namespace("ns-1"), target::harness("ns-1", "a1", 3)] {
            assert_eq!(t.parse::<Target>().unwrap().to_string(), t);
        }
        assert_eq!(
            "harness/ns-1/a1/3".parse::<Target>().unwrap(),
            Target::Harness {
                namespace_id: "ns-1".into(),
                agent: "a1".into(),
                revision: 3
            }
        );
        for bad in [
            "",
            "namespace/",
            "harness/ns/a1",
            "harness/ns/a1/x",
            "pod/x",
            "harness/ns/a1/1/2",
        ] {
            assert!(bad.parse::<Target>().is_err(), "{bad}");
        }
        assert_eq!(
            harness::service_url("a1", 3, "oce-x", 8080),
            "http://a1-r3-harness.oce-x.svc:8080"
        );
    }

    #[test]
    fn kinds_round_trip() {
        for k in WorkKind::ALL {
            assert_eq!(WorkKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(WorkKind::parse("harness.delete"), None);
    }

    #[test]
    fn harness_spec_decodes_camel_case_with_defaults() {
        let json = br#"{
            "tenant": "team-a", "namespaceId": "ns-1", "dataPlaneNamespace": "oce-x",
            "agent": "a1", "revision": 2, "revisionId": "rev-2",
            "image": "reg.example/agent@sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "requireDigest": true,
            "requirementLabels": {"sandbox.io/class": "gvisor"},
            "credential": {"MODEL_API_KEY": "s3cret"},
            "execution": "provider",
            "predecessors": [{"revision": 1, "revisionId": "rev-1"}]
        }"#;
        let WorkSpec::HarnessApply(h) = WorkSpec::decode("harness.apply", json).expect("decodes")
        else {
            panic!("kind")
        };
        assert_eq!(h.port, 8080);
        assert_eq!(h.execution, ExecutionMode::Provider);
        assert_eq!(h.predecessors[0].execution, ExecutionMode::Ordinary);
        assert!(
            !format!("{h:?}").contains("s3cret"),
            "secret redacted in Debug"
        );
        let again = WorkSpec::decode("harness.apply", &WorkSpec::HarnessApply(h.clone()).encode())
            .expect("round trip");
        assert_eq!(again, WorkSpec::HarnessApply(h));
    }

    #[test]
    fn unknown_fields_and_kinds_are_rejected() {
        let err = WorkSpec::decode(
            "namespace.ensure",
            br#"{"tenant":"t","namespaceId":"i","surprise":1}"#,
        )
        .expect_err("unknown field");
        assert!(err.to_string().contains("surprise"), "{err}");
        assert!(matches!(
            WorkSpec::decode("nope", b"{}"),
            Err(SpecError::UnknownKind(_))
        ));
    }

    #[test]
    fn credential_kinds_round_trip_and_map_to_secret_keys() {
        use credential::{CredentialKind, MODEL_API_KEY, SERVICE_ACCOUNT_CREDENTIAL};
        for k in CredentialKind::ALL {
            assert_eq!(CredentialKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(CredentialKind::parse("password"), None);
        assert_eq!(CredentialKind::ModelApiKey.secret_key(), MODEL_API_KEY);
        assert_eq!(
            CredentialKind::ServiceAccount.secret_key(),
            SERVICE_ACCOUNT_CREDENTIAL
        );
        assert!(CredentialKind::ServiceAccount.allowed_for("dedicated-codex"));
        assert!(!CredentialKind::ServiceAccount.allowed_for("dedicated-openclaw"));
        assert!(CredentialKind::ModelApiKey.allowed_for("embedded-openclaw"));
    }

    #[test]
    fn digests() {
        let hex = "a".repeat(64);
        assert!(check_image_digest(&format!("reg/agent@sha256:{hex}")).is_ok());
        assert!(check_image_digest("reg/agent:1.0").is_err());
        assert!(check_image_digest(&format!("@sha256:{hex}")).is_err());
        assert!(check_image_digest(&format!("reg/agent@sha256:{}", "A".repeat(64))).is_err());
        assert!(check_image_digest("reg/agent@sha256:abc").is_err());
    }
}
