//! `clawfed`'s command line: its flags and subcommands, and the inputs they
//! name (spec flags, spec and configuration files, secret values).

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args as ClapArgs, Parser, Subcommand};
use serde::de::DeserializeOwned;

use super::output::Format;
use crate::client::{ClientError, ClientResult, DEPLOY_RETRIES};
use crate::model::{AgentSpec, ExecutionMode, HarnessKind};

/// clawfed: the command line of a clawfed hub. Manage tenants, Agents,
/// their revisions and credentials, and see the fleet, over the hub's REST
/// API (`--server`, `--token`).
// A bare `about` would show the hub crate's description instead of this.
#[derive(Debug, Parser)]
#[command(name = "clawfed", version)]
pub(super) struct Cli {
    /// Hub REST endpoint.
    #[arg(
        long,
        env = "CLAWFED_SERVER",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub(super) server: String,
    /// Bearer token (`clawfed-hub token create`).
    #[arg(long, env = "CLAWFED_TOKEN", global = true, hide_env_values = true)]
    pub(super) token: Option<String>,
    /// CA certificate(s) (PEM) the hub's certificate must chain to, for an
    /// https:// --server; only these are trusted then.
    #[arg(long, env = "CLAWFED_CA_FILE", global = true)]
    pub(super) ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for a hub with api.tls.clientCaFile: it
    /// authenticates as the API token its subject CN names (no --token
    /// needed). Needs --client-key.
    #[arg(long, env = "CLAWFED_CLIENT_CERT", global = true)]
    pub(super) client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "CLAWFED_CLIENT_KEY", global = true)]
    pub(super) client_key: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table", global = true)]
    pub(super) output: Format,
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Debug, Subcommand)]
pub(super) enum Command {
    /// Tenants.
    #[command(alias = "ns")]
    Namespaces {
        #[command(subcommand)]
        command: NamespaceCommand,
    },
    /// Configuration documents.
    #[command(alias = "config")]
    Configurations {
        #[command(subcommand)]
        command: ConfigurationCommand,
    },
    /// Agent drafts.
    Agents {
        #[command(subcommand)]
        command: AgentCommand,
    },
    /// Immutable revisions of an Agent.
    Revisions {
        #[command(subcommand)]
        command: RevisionCommand,
    },
    /// Enrolled execution clusters.
    Clusters {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Deploy an Agent: freeze its draft into a new revision.
    Deploy {
        agent: String,
        #[arg(long, short = 'n')]
        namespace: String,
        /// Roll back: make the new revision from this earlier one.
        #[arg(long)]
        from_revision: Option<i64>,
        /// Makes a retried deploy safe; a random key is used when omitted.
        /// Retries within this run reuse it, and it is printed when the
        /// deploy gives up so the exact request can be repeated.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Times to retry when the hub gives no answer (unreachable, timed
        /// out, or 502/503/504), with exponential backoff and jitter.
        #[arg(long, default_value_t = DEPLOY_RETRIES)]
        retries: usize,
    },
    /// Stop an Agent.
    Stop {
        agent: String,
        #[arg(long, short = 'n')]
        namespace: String,
    },
    /// Fleet-wide status. DESIRED RUNNING counts Agents asked to run,
    /// RUNNING those with an active revision on a cluster, NOT RUNNING the
    /// gap (asked to run, not yet placed, applied or Ready, or failed) and
    /// STOPPED those asked to stop.
    Fleet {
        /// Keep the table on screen and redraw it on every watch event.
        #[arg(long)]
        watch: bool,
    },
    /// Watch events (cluster connected/offline, revision phases, readiness
    /// verdicts, work failures) that the token may see, oldest first.
    Events {
        /// Keep following new events (Ctrl-C ends).
        #[arg(long, short = 'f')]
        follow: bool,
        /// Start after this cursor (an event's CURSOR). Default: every
        /// kept event, or with --follow only new ones.
        #[arg(long)]
        cursor: Option<i64>,
    },
    /// Audit events, newest first; with --follow or --cursor, the audit
    /// stream, oldest first (one line each; `-o json` for a SIEM).
    Audit {
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        #[arg(long, conflicts_with_all = ["follow", "cursor"])]
        limit: Option<i64>,
        /// Stream, and keep following new events (Ctrl-C ends); a broken
        /// connection is resumed from the last event's cursor.
        #[arg(long, short = 'f')]
        follow: bool,
        /// Stream the events after this cursor (an event's CURSOR; 0: the
        /// whole log). Without it --follow starts with new events.
        #[arg(long)]
        cursor: Option<i64>,
    },
    /// Durable work items.
    Work {
        #[command(subcommand)]
        command: WorkCommand,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum NamespaceCommand {
    List,
    Get {
        name: String,
    },
    Create {
        name: String,
        #[arg(long)]
        display_name: Option<String>,
        /// Adopt this existing Kubernetes namespace instead of oce-<hash>
        /// (label it clawfed.io/adoptable=true in each execution cluster first).
        #[arg(long)]
        adopt: Option<String>,
    },
    Delete {
        name: String,
    },
    /// The namespace's quotas: each limit and what is in use.
    Quota {
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum ConfigurationCommand {
    List {
        #[arg(long, short = 'n')]
        namespace: String,
    },
    Get {
        name: String,
        #[arg(long, short = 'n')]
        namespace: String,
    },
    /// Create from a JSON or YAML file holding the document (an object).
    Create {
        name: String,
        #[arg(long, short = 'n')]
        namespace: String,
        #[arg(long, short = 'f')]
        file: PathBuf,
    },
    /// Replace the document from a file.
    Update {
        name: String,
        #[arg(long, short = 'n')]
        namespace: String,
        #[arg(long, short = 'f')]
        file: PathBuf,
    },
    Delete {
        name: String,
        #[arg(long, short = 'n')]
        namespace: String,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum AgentCommand {
    List {
        #[arg(long, short = 'n')]
        namespace: String,
    },
    Get {
        name: String,
        #[arg(long, short = 'n')]
        namespace: String,
        /// Follow the latest revision's phases until it is active, failed
        /// or stopped (phases go to stderr, the Agent to stdout).
        #[arg(long)]
        wait: bool,
        /// Give up waiting after this many seconds.
        #[arg(long, default_value_t = 300)]
        timeout: u64,
    },
    /// Create a draft from flags, or from a spec file with -f.
    Create {
        name: String,
        #[arg(long, short = 'n')]
        namespace: String,
        #[command(flatten)]
        spec: Box<SpecArgs>,
    },
    /// Change a draft: flags override the current spec; -f replaces it.
    Update {
        name: String,
        #[arg(long, short = 'n')]
        namespace: String,
        #[command(flatten)]
        spec: Box<SpecArgs>,
    },
    Delete {
        name: String,
        #[arg(long, short = 'n')]
        namespace: String,
    },
    /// Bounded checks of a revision's Harness and Gateway Pods (the active,
    /// else the latest, unless --revision names one); `unknown` where a Pod
    /// is missing or does not answer.
    Diagnose {
        name: String,
        #[arg(long, short = 'n')]
        namespace: String,
        /// The revision number to diagnose.
        #[arg(long)]
        revision: Option<i64>,
    },
    /// Sends one chat message to the Agent's active revision (an embedded
    /// OpenClaw runtime) through the hub and its spoke, and prints the
    /// model's answer: the end-to-end proof that the Agent works.
    Chat {
        name: String,
        #[arg(long, short = 'n')]
        namespace: String,
        /// The message.
        #[arg(long, short = 'm')]
        message: String,
        /// The runtime's conversation (history is kept per conversation);
        /// default: one per API token.
        #[arg(long)]
        conversation: Option<String>,
    },
    /// Managed credentials of an Agent (write-only).
    Credentials {
        #[command(subcommand)]
        command: CredentialCommand,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum CredentialCommand {
    /// Set or replace a credential. The value is read from stdin (or
    /// --from-file), never from the command line, and one trailing newline
    /// is dropped. The next deploy carries it.
    Set {
        /// The Agent.
        name: String,
        #[arg(long, short = 'n')]
        namespace: String,
        /// model-api-key, or service-account (dedicated-codex Agents only).
        #[arg(long)]
        kind: String,
        /// Read the value from this file instead of stdin.
        #[arg(long)]
        from_file: Option<PathBuf>,
    },
    /// The Agent's credentials: kind, version, when set (never a value).
    List {
        name: String,
        #[arg(long, short = 'n')]
        namespace: String,
    },
    /// Delete a credential (deployed revisions keep theirs).
    Delete {
        name: String,
        #[arg(long, short = 'n')]
        namespace: String,
        #[arg(long)]
        kind: String,
    },
}

/// Agent spec fields as flags.
#[derive(Debug, ClapArgs)]
pub(super) struct SpecArgs {
    /// A JSON or YAML AgentSpec file.
    #[arg(long, short = 'f')]
    pub(super) file: Option<PathBuf>,
    /// embedded-openclaw, dedicated-openclaw or dedicated-codex.
    #[arg(long)]
    pub(super) harness_kind: Option<String>,
    /// ordinary or provider.
    #[arg(long)]
    pub(super) execution_mode: Option<String>,
    #[arg(long)]
    pub(super) image: Option<String>,
    #[arg(long)]
    pub(super) gateway_image: Option<String>,
    #[arg(long)]
    pub(super) configuration: Option<String>,
    /// Place on this cluster.
    #[arg(long)]
    pub(super) cluster: Option<String>,
    /// Move the Agent to another cluster when its cluster cannot renew
    /// its execution lease for this many seconds (fenced there first);
    /// 0 turns failover off.
    #[arg(long, value_name = "SECONDS")]
    pub(super) failover_after: Option<u32>,
    /// Harness requirement label KEY=VALUE (repeatable).
    #[arg(long = "requirement-label", value_name = "KEY=VALUE")]
    pub(super) requirement_labels: Vec<String>,
    /// Plugin name (repeatable).
    #[arg(long = "plugin")]
    pub(super) plugins: Vec<String>,
    /// Enabled external channel name (repeatable; needs a dedicated harness kind).
    #[arg(long = "channel")]
    pub(super) channels: Vec<String>,
    #[arg(long)]
    pub(super) cpu_request: Option<String>,
    #[arg(long)]
    pub(super) cpu_limit: Option<String>,
    #[arg(long)]
    pub(super) memory_request: Option<String>,
    #[arg(long)]
    pub(super) memory_limit: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(super) enum RevisionCommand {
    List {
        #[arg(long, short = 'a')]
        agent: String,
        #[arg(long, short = 'n')]
        namespace: String,
    },
    Get {
        number: i64,
        #[arg(long, short = 'a')]
        agent: String,
        #[arg(long, short = 'n')]
        namespace: String,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum ClusterCommand {
    List,
    /// A cluster in detail (every cluster without NAME): state, version,
    /// provider, capabilities, certificate expiry, last seen, outbox,
    /// labels and the capacity its spoke reported.
    Get {
        name: Option<String>,
    },
    /// Stop new placements on a cluster (what runs there keeps running).
    Cordon {
        name: String,
    },
    /// Let a cluster take new revisions again; a running drain ends (its
    /// moves in flight finish).
    Uncordon {
        name: String,
    },
    /// Cordon a cluster and move each Agent running there to another
    /// cluster, each stopped there (and the stop confirmed) before it
    /// starts elsewhere, with a fresh workspace: claims do not move. Prints
    /// the progress, Agent by Agent.
    Drain {
        name: String,
        /// How many Agents move at once (1 to 64).
        #[arg(long, default_value_t = 1)]
        parallelism: u32,
        /// Wait until the drain ends, printing its counts as they change.
        #[arg(long)]
        wait: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum WorkCommand {
    List {
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        /// pending, claimed, done or failed.
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        limit: Option<i64>,
    },
    Get {
        id: String,
    },
}

impl SpecArgs {
    /// The spec these flags describe, over `base` (for updates).
    pub(super) fn into_spec(self, base: Option<AgentSpec>) -> ClientResult<AgentSpec> {
        let mut spec = match (&self.file, base) {
            (Some(file), _) => read_document::<AgentSpec>(file)?,
            (None, Some(base)) => base,
            (None, None) => AgentSpec {
                harness_kind: HarnessKind::EmbeddedOpenclaw,
                execution_mode: ExecutionMode::Ordinary,
                image: self.image.clone().ok_or_else(|| {
                    ClientError::Usage("--image: required (or give a spec file with -f)".into())
                })?,
                gateway_image: None,
                configuration: None,
                resources: Default::default(),
                requirement_labels: BTreeMap::new(),
                placement: Default::default(),
                plugins: Vec::new(),
                channels: Vec::new(),
                failover: None,
            },
        };
        if let Some(kind) = &self.harness_kind {
            spec.harness_kind = HarnessKind::parse(kind).ok_or_else(|| {
                ClientError::Usage(format!(
                    "--harness-kind: {kind:?} is not one of embedded-openclaw, dedicated-openclaw, dedicated-codex"
                ))
            })?;
        }
        if let Some(mode) = &self.execution_mode {
            spec.execution_mode = ExecutionMode::parse(mode).ok_or_else(|| {
                ClientError::Usage(format!(
                    "--execution-mode: {mode:?} is not one of ordinary, provider"
                ))
            })?;
        }
        if let Some(v) = self.image {
            spec.image = v;
        }
        if let Some(v) = self.gateway_image {
            spec.gateway_image = Some(v);
        }
        if let Some(v) = self.configuration {
            spec.configuration = Some(v);
        }
        if let Some(v) = self.cluster {
            spec.placement.cluster = Some(v);
        }
        match self.failover_after {
            Some(0) => spec.failover = None,
            Some(after_seconds) => spec.failover = Some(crate::model::Failover { after_seconds }),
            None => {}
        }
        for label in self.requirement_labels {
            let (k, v) = label.split_once('=').ok_or_else(|| {
                ClientError::Usage(format!("--requirement-label: {label:?} must be KEY=VALUE"))
            })?;
            spec.requirement_labels.insert(k.to_owned(), v.to_owned());
        }
        if !self.plugins.is_empty() {
            spec.plugins = self.plugins;
        }
        if !self.channels.is_empty() {
            spec.channels = self
                .channels
                .into_iter()
                .map(|name| crate::model::Channel {
                    name,
                    enabled: true,
                })
                .collect();
        }
        let r = &mut spec.resources;
        for (slot, value) in [
            (&mut r.cpu_request, self.cpu_request),
            (&mut r.cpu_limit, self.cpu_limit),
            (&mut r.memory_request, self.memory_request),
            (&mut r.memory_limit, self.memory_limit),
        ] {
            if value.is_some() {
                *slot = value;
            }
        }
        Ok(spec)
    }
}

/// A secret value from `file`, or else stdin, without one trailing newline
/// (`echo` and editors add one). Errors name the flag, never the value.
pub(super) fn read_secret(file: Option<&PathBuf>) -> ClientResult<String> {
    use std::io::Read;
    let mut value = match file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| ClientError::Usage(format!("--from-file {}: {e}", path.display())))?,
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| ClientError::Usage(format!("reading the value from stdin: {e}")))?;
            text
        }
    };
    if value.ends_with('\n') {
        value.pop();
        if value.ends_with('\r') {
            value.pop();
        }
    }
    if value.is_empty() {
        let from = file.map_or_else(
            || "stdin".to_owned(),
            |p| format!("--from-file {}", p.display()),
        );
        return Err(ClientError::Usage(format!(
            "no credential value on {from} (pipe it in or use --from-file; it is never taken from the command line)"
        )));
    }
    Ok(value)
}

/// Reads a JSON or YAML file.
pub(super) fn read_document<T: DeserializeOwned>(path: &PathBuf) -> ClientResult<T> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ClientError::Usage(format!("--file {}: {e}", path.display())))?;
    serde_yaml_ng::from_str(&text)
        .map_err(|e| ClientError::Usage(format!("--file {}: {e}", path.display())))
}
