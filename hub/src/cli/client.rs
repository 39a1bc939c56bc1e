//! `clawfed`: the user CLI, a REST client of the hub.
//!
//! Exit codes: 0 success, 1 the hub refused the request (its error is
//! printed with the offending field), 2 bad command line, 3 the hub could
//! not be reached.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args as ClapArgs, Parser, Subcommand};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::output::{self, Format, Tabular};
use crate::api::error::ErrorBody;
use crate::model::{
    Agent, AgentRevision, AgentSpec, AuditEvent, ChatAnswer, ChatRequest, Cluster, Configuration,
    CreateAgent, CreateConfiguration, CreateNamespace, CredentialMeta, DeployRequest, Diagnosis,
    ExecutionMode, FleetSummary, HarnessKind, List, Namespace, RevisionPhase, UpdateAgent,
    UpdateConfiguration, WorkItem,
};
use std::time::Duration;

/// clawfed: the command line of a clawfed hub. Manage tenants, Agents,
/// their revisions and credentials, and see the fleet, over the hub's REST
/// API (`--server`, `--token`).
// A bare `about` would show the hub crate's description instead of this.
#[derive(Debug, Parser)]
#[command(name = "clawfed", version)]
struct Cli {
    /// Hub REST endpoint.
    #[arg(
        long,
        env = "CLAWFED_SERVER",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    server: String,
    /// Bearer token (`clawfed-hub token create`).
    #[arg(long, env = "CLAWFED_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,
    /// CA certificate(s) (PEM) the hub's certificate must chain to, for an
    /// https:// --server; only these are trusted then.
    #[arg(long, env = "CLAWFED_CA_FILE", global = true)]
    ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for a hub with api.tls.clientCaFile: it
    /// authenticates as the API token its subject CN names (no --token
    /// needed). Needs --client-key.
    #[arg(long, env = "CLAWFED_CLIENT_CERT", global = true)]
    client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "CLAWFED_CLIENT_KEY", global = true)]
    client_key: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table", global = true)]
    output: Format,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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
    /// Audit events, newest first.
    Audit {
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        #[arg(long)]
        limit: Option<i64>,
    },
    /// Durable work items.
    Work {
        #[command(subcommand)]
        command: WorkCommand,
    },
}

#[derive(Debug, Subcommand)]
enum NamespaceCommand {
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
}

#[derive(Debug, Subcommand)]
enum ConfigurationCommand {
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
enum AgentCommand {
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
enum CredentialCommand {
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
struct SpecArgs {
    /// A JSON or YAML AgentSpec file.
    #[arg(long, short = 'f')]
    file: Option<PathBuf>,
    /// embedded-openclaw, dedicated-openclaw or dedicated-codex.
    #[arg(long)]
    harness_kind: Option<String>,
    /// ordinary or provider.
    #[arg(long)]
    execution_mode: Option<String>,
    #[arg(long)]
    image: Option<String>,
    #[arg(long)]
    gateway_image: Option<String>,
    #[arg(long)]
    configuration: Option<String>,
    /// Place on this cluster.
    #[arg(long)]
    cluster: Option<String>,
    /// Harness requirement label KEY=VALUE (repeatable).
    #[arg(long = "requirement-label", value_name = "KEY=VALUE")]
    requirement_labels: Vec<String>,
    /// Plugin name (repeatable).
    #[arg(long = "plugin")]
    plugins: Vec<String>,
    /// Enabled external channel name (repeatable; needs a dedicated harness kind).
    #[arg(long = "channel")]
    channels: Vec<String>,
    #[arg(long)]
    cpu_request: Option<String>,
    #[arg(long)]
    cpu_limit: Option<String>,
    #[arg(long)]
    memory_request: Option<String>,
    #[arg(long)]
    memory_limit: Option<String>,
}

#[derive(Debug, Subcommand)]
enum RevisionCommand {
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
enum ClusterCommand {
    List,
    /// A cluster in detail (every cluster without NAME): state, version,
    /// provider, capabilities, certificate expiry, last seen, outbox.
    Get {
        name: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum WorkCommand {
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

/// Why a command failed, mapped to the exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The hub answered with an error.
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    /// The command line or an input file is wrong.
    #[error("{0}")]
    Usage(String),
    /// The TLS handshake with the hub failed: its certificate is not
    /// trusted, or it refused ours.
    #[error("TLS with the hub at {server} failed: {reason}")]
    Tls { server: String, reason: String },
    /// The hub could not be reached.
    #[error("cannot reach the hub at {server}: {source}")]
    Unreachable {
        server: String,
        #[source]
        source: reqwest::Error,
    },
    /// Anything else (output encoding, unexpected response).
    #[error("{0}")]
    Other(String),
    /// A deploy got no answer in any attempt; the hub may still have saved
    /// it, so the key to repeat it with is part of the message.
    #[error(
        "{last}; gave up after {attempts} attempts. The hub may have saved the deploy: \
         repeat it with --idempotency-key {key} to get that revision instead of a new one"
    )]
    GaveUp {
        key: String,
        attempts: usize,
        /// The last attempt's error (shown in the message, decides the exit code).
        last: Box<CliError>,
    },
}

impl CliError {
    fn exit_code(&self) -> u8 {
        match self {
            Self::Api { .. } | Self::Other(_) => 1,
            Self::Usage(_) => 2,
            Self::Unreachable { .. } | Self::Tls { .. } => 3,
            Self::GaveUp { last, .. } => last.exit_code(),
        }
    }

    /// Whether the hub may not have answered, so repeating the same request
    /// can help: no connection, a timeout or a cut-off answer, or a proxy's
    /// or the hub's "unavailable". A 4xx never is: the hub did answer.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Unreachable { source, .. } => !source.is_builder(),
            Self::Api { status, .. } => matches!(status, 502..=504),
            // Retrying does not make a certificate trusted.
            Self::Usage(_) | Self::Other(_) | Self::GaveUp { .. } | Self::Tls { .. } => false,
        }
    }
}

/// Default `clawfed deploy --retries`: with [`deploy_backoff`] the attempts
/// span at least 23 s, enough for a hub restart.
const DEPLOY_RETRIES: usize = 6;

/// Delays between deploy attempts: 0.5 s doubling up to 8 s, each
/// lengthened by a random jitter of up to itself, so many clients retrying
/// after one hub restart do not arrive together.
fn deploy_backoff(retries: usize) -> backon::ExponentialBuilder {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(8))
        .with_factor(2.0)
        .with_jitter()
        .with_max_times(retries)
}

type CliResult<T> = Result<T, CliError>;

/// How the CLI talks TLS to an https:// hub.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// Trust only these CA certificates (`--ca-file`); else the system's.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (`--client-cert`, `--client-key`).
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

impl TlsOptions {
    /// Applies these options to `builder` for `server`; errors name the flag.
    fn apply(
        &self,
        server: &str,
        mut builder: reqwest::ClientBuilder,
    ) -> CliResult<reqwest::ClientBuilder> {
        let any = self.ca_file.is_some() || self.client_cert.is_some() || self.client_key.is_some();
        if any && !server.starts_with("https://") {
            // Never fall back to plain HTTP when TLS was asked for.
            return Err(CliError::Usage(format!(
                "--ca-file/--client-cert are for an https:// hub, but --server is {server}"
            )));
        }
        let read = |flag: &str, path: &PathBuf| {
            std::fs::read(path)
                .map_err(|e| CliError::Usage(format!("{flag} {}: {e}", path.display())))
        };
        if let Some(path) = &self.ca_file {
            let certs = reqwest::Certificate::from_pem_bundle(&read("--ca-file", path)?)
                .map_err(|e| CliError::Usage(format!("--ca-file {}: {e}", path.display())))?;
            if certs.is_empty() {
                return Err(CliError::Usage(format!(
                    "--ca-file {}: no PEM certificate in it",
                    path.display()
                )));
            }
            builder = builder.tls_certs_only(certs);
        }
        match (&self.client_cert, &self.client_key) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(CliError::Usage(
                    "--client-key: required with --client-cert".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(CliError::Usage(
                    "--client-cert: required with --client-key".into(),
                ));
            }
            (Some(cert), Some(key)) => {
                let mut pem = read("--client-cert", cert)?;
                pem.push(b'\n');
                pem.extend(read("--client-key", key)?);
                let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                    CliError::Usage(format!(
                        "--client-cert {} / --client-key {}: {e}",
                        cert.display(),
                        key.display()
                    ))
                })?;
                builder = builder.identity(identity);
            }
        }
        Ok(builder)
    }

    /// A readable reason for a failed request, when TLS is why.
    fn failure(&self, e: &reqwest::Error) -> Option<String> {
        let tls = rustls_error(e)?;
        let trusted = match &self.ca_file {
            Some(path) => format!("--ca-file {}", path.display()),
            None => "the system's trusted roots (give the hub's CA with --ca-file)".to_owned(),
        };
        Some(match tls {
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            ) => format!("the hub's certificate is not valid for the host of --server ({tls})"),
            rustls::Error::InvalidCertificate(_) => {
                format!("the hub's certificate does not chain to {trusted} ({tls})")
            }
            rustls::Error::AlertReceived(_) => format!(
                "the hub refused the handshake ({tls}); a hub with api.tls.clientCaFile \
                 accepts only client certificates signed by that CA"
            ),
            other => other.to_string(),
        })
    }
}

/// The rustls error somewhere in `e`'s causes. An `io::Error`'s
/// `source()` skips the error it wraps (and connectors wrap one io::Error
/// in another), so into those the walk goes through `get_ref()`.
fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        next = match err.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

/// A REST client of the hub.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    /// For event streams: no overall timeout (they last), a connect one.
    watch_http: reqwest::Client,
    server: String,
    token: Option<String>,
    tls: TlsOptions,
}

impl Client {
    /// A client of the hub at `server` (e.g. `http://127.0.0.1:8080`).
    pub fn new(server: &str, token: Option<String>) -> CliResult<Self> {
        Self::with_tls(server, token, TlsOptions::default())
    }

    /// A client of the hub at `server` with TLS `tls` (for https://).
    pub fn with_tls(server: &str, token: Option<String>, tls: TlsOptions) -> CliResult<Self> {
        // One crypto provider for the process (ring); ignore "already set".
        let _ = rustls::crypto::ring::default_provider().install_default();
        let server = server.trim_end_matches('/').to_owned();
        let http = tls
            .apply(
                &server,
                reqwest::Client::builder().timeout(std::time::Duration::from_secs(30)),
            )?
            .build()
            .map_err(|e| CliError::Other(format!("cannot build HTTP client: {e}")))?;
        let watch_http = tls
            .apply(
                &server,
                reqwest::Client::builder().connect_timeout(std::time::Duration::from_secs(10)),
            )?
            .build()
            .map_err(|e| CliError::Other(format!("cannot build HTTP client: {e}")))?;
        Ok(Self {
            http,
            watch_http,
            server,
            token,
            tls,
        })
    }

    /// The error of a request that got no answer: TLS named as such.
    fn unreachable(&self, source: reqwest::Error) -> CliError {
        match self.tls.failure(&source) {
            Some(reason) => CliError::Tls {
                server: self.server.clone(),
                reason,
            },
            None => CliError::Unreachable {
                server: self.server.clone(),
                source,
            },
        }
    }

    async fn send<T: DeserializeOwned>(&self, req: reqwest::RequestBuilder) -> CliResult<T> {
        let req = match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let response = req.send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|source| CliError::Unreachable {
                server: self.server.clone(),
                source,
            })?;
        if !status.is_success() {
            return Err(api_error(status, &bytes));
        }
        let bytes = if bytes.is_empty() {
            &b"null"[..]
        } else {
            &bytes[..]
        };
        serde_json::from_slice(bytes)
            .map_err(|e| CliError::Other(format!("unexpected response from the hub: {e}")))
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.server)
    }

    /// GET a resource.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> CliResult<T> {
        self.send(self.http.get(self.url(path))).await
    }

    /// POST a JSON body.
    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> CliResult<T> {
        self.send(self.http.post(self.url(path)).json(body)).await
    }

    /// PUT a JSON body.
    pub async fn put<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> CliResult<T> {
        self.send(self.http.put(self.url(path)).json(body)).await
    }

    /// DELETE a resource.
    pub async fn delete(&self, path: &str) -> CliResult<()> {
        self.send::<serde_json::Value>(self.http.delete(self.url(path)))
            .await
            .map(|_| ())
    }

    /// Opens the watch stream after `cursor` (see `GET /api/v1/watch`).
    pub async fn watch(
        &self,
        cursor: Option<i64>,
        follow: bool,
    ) -> CliResult<super::watch::EventReader> {
        let mut query = vec![format!("follow={follow}")];
        if let Some(c) = cursor {
            query.push(format!("cursor={c}"));
        }
        let mut req = self
            .watch_http
            .get(self.url(&format!("/watch?{}", query.join("&"))))
            .header("accept", "text/event-stream");
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let response = req.send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status();
        if !status.is_success() {
            let bytes = response.bytes().await.unwrap_or_default();
            return Err(api_error(status, &bytes));
        }
        Ok(super::watch::EventReader::new(response))
    }

    /// Deploys with an idempotency key, once.
    pub async fn deploy(
        &self,
        ns: &str,
        agent: &str,
        req: &DeployRequest,
        key: &str,
    ) -> CliResult<AgentRevision> {
        let path = format!("/namespaces/{ns}/agents/{agent}/deploy");
        self.send(
            self.http
                .post(self.url(&path))
                .header("Idempotency-Key", key)
                .json(req),
        )
        .await
    }

    /// Deploys with `key`, retrying up to `retries` times while the hub
    /// gives no answer. Every attempt carries the same key, so the hub makes
    /// at most one revision however many of them reached it.
    pub async fn deploy_with_retries(
        &self,
        ns: &str,
        agent: &str,
        req: &DeployRequest,
        key: &str,
        retries: usize,
    ) -> CliResult<AgentRevision> {
        use backon::Retryable;
        let mut attempts = 0;
        let result = (|| {
            attempts += 1;
            self.deploy(ns, agent, req, key)
        })
        .retry(deploy_backoff(retries))
        .sleep(tokio::time::sleep)
        .when(CliError::is_retryable)
        .notify(|err, delay| {
            eprintln!(
                "deploy: {err}; retrying in {:.1}s with the same Idempotency-Key",
                delay.as_secs_f64()
            );
        })
        .await;
        match result {
            Err(last) if last.is_retryable() => Err(CliError::GaveUp {
                key: key.to_owned(),
                attempts,
                last: Box::new(last),
            }),
            other => other,
        }
    }
}

/// Entry point of `clawfed`.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn list<T: Tabular + Serialize>(format: Format, items: List<T>) -> CliResult<String> {
    output::print_list(format, &items.items).map_err(|e| CliError::Other(e.to_string()))
}

fn one<T: Tabular + Serialize>(format: Format, item: T) -> CliResult<String> {
    output::print_one(format, &item).map_err(|e| CliError::Other(e.to_string()))
}

async fn run(cli: Cli) -> CliResult<String> {
    let tls = TlsOptions {
        ca_file: cli.ca_file.clone(),
        client_cert: cli.client_cert.clone(),
        client_key: cli.client_key.clone(),
    };
    let c = Client::with_tls(&cli.server, cli.token.clone(), tls)?;
    let f = cli.output;
    match cli.command {
        Command::Namespaces { command } => match command {
            NamespaceCommand::List => list(f, c.get::<List<Namespace>>("/namespaces").await?),
            NamespaceCommand::Get { name } => {
                one(f, c.get::<Namespace>(&format!("/namespaces/{name}")).await?)
            }
            NamespaceCommand::Create {
                name,
                display_name,
                adopt,
            } => {
                let body = CreateNamespace {
                    name,
                    display_name,
                    adopt_namespace: adopt,
                };
                one(f, c.post::<_, Namespace>("/namespaces", &body).await?)
            }
            NamespaceCommand::Delete { name } => {
                c.delete(&format!("/namespaces/{name}")).await?;
                // With execution clusters the teardown runs there first.
                match c.get::<Namespace>(&format!("/namespaces/{name}")).await {
                    Ok(ns) => Ok(format!(
                        "namespace {name} is {} (torn down in its clusters first)\n",
                        ns.state.as_str()
                    )),
                    Err(_) => Ok(format!("namespace {name} deleted\n")),
                }
            }
        },
        Command::Configurations { command } => match command {
            ConfigurationCommand::List { namespace } => list(
                f,
                c.get::<List<Configuration>>(&format!("/namespaces/{namespace}/configurations"))
                    .await?,
            ),
            ConfigurationCommand::Get { name, namespace } => one(
                f,
                c.get::<Configuration>(&format!("/namespaces/{namespace}/configurations/{name}"))
                    .await?,
            ),
            ConfigurationCommand::Create {
                name,
                namespace,
                file,
            } => {
                let data = read_document(&file)?;
                let body = CreateConfiguration { name, data };
                one(
                    f,
                    c.post::<_, Configuration>(
                        &format!("/namespaces/{namespace}/configurations"),
                        &body,
                    )
                    .await?,
                )
            }
            ConfigurationCommand::Update {
                name,
                namespace,
                file,
            } => {
                let path = format!("/namespaces/{namespace}/configurations/{name}");
                let current: Configuration = c.get(&path).await?;
                let body = UpdateConfiguration {
                    data: read_document(&file)?,
                    version: current.version,
                };
                one(f, c.put::<_, Configuration>(&path, &body).await?)
            }
            ConfigurationCommand::Delete { name, namespace } => {
                c.delete(&format!("/namespaces/{namespace}/configurations/{name}"))
                    .await?;
                Ok(format!("configuration {name} deleted\n"))
            }
        },
        Command::Agents { command } => match command {
            AgentCommand::List { namespace } => list(
                f,
                c.get::<List<Agent>>(&format!("/namespaces/{namespace}/agents"))
                    .await?,
            ),
            AgentCommand::Get {
                name,
                namespace,
                wait,
                timeout,
            } => {
                if wait {
                    wait_for_revision(&c, &namespace, &name, Duration::from_secs(timeout)).await?;
                }
                let agent = c
                    .get::<Agent>(&format!("/namespaces/{namespace}/agents/{name}"))
                    .await?;
                let status = match (f, agent.latest_revision) {
                    (Format::Table, Some(n)) => {
                        let rev = c
                            .get::<AgentRevision>(&format!(
                                "/namespaces/{namespace}/agents/{name}/revisions/{n}"
                            ))
                            .await?;
                        format!(
                            "\nrevision {n}: {} on {}{}\nreadiness: {}\ndrift: {}\n",
                            rev.phase.as_str(),
                            rev.resolved_cluster.as_deref().unwrap_or("(not placed)"),
                            rev.reason.map(|r| format!(" — {r}")).unwrap_or_default(),
                            readiness_line(rev.readiness.as_ref()),
                            output::drift(rev.drift.as_ref()),
                        )
                    }
                    _ => String::new(),
                };
                Ok(format!("{}{status}", one(f, agent)?))
            }
            AgentCommand::Create {
                name,
                namespace,
                spec,
            } => {
                let spec = spec.into_spec(None)?;
                let body = CreateAgent { name, spec };
                one(
                    f,
                    c.post::<_, Agent>(&format!("/namespaces/{namespace}/agents"), &body)
                        .await?,
                )
            }
            AgentCommand::Update {
                name,
                namespace,
                spec,
            } => {
                let path = format!("/namespaces/{namespace}/agents/{name}");
                let current: Agent = c.get(&path).await?;
                let body = UpdateAgent {
                    spec: spec.into_spec(Some(current.spec))?,
                    version: current.version,
                };
                one(f, c.put::<_, Agent>(&path, &body).await?)
            }
            AgentCommand::Delete { name, namespace } => {
                c.delete(&format!("/namespaces/{namespace}/agents/{name}"))
                    .await?;
                Ok(format!("agent {name} deleted\n"))
            }
            AgentCommand::Credentials { command } => match command {
                CredentialCommand::Set {
                    name,
                    namespace,
                    kind,
                    from_file,
                } => {
                    let value = read_secret(from_file.as_ref())?;
                    let path = format!("/namespaces/{namespace}/agents/{name}/credentials/{kind}");
                    let body = serde_json::json!({ "value": value });
                    one(f, c.put::<_, CredentialMeta>(&path, &body).await?)
                }
                CredentialCommand::List { name, namespace } => list(
                    f,
                    c.get::<List<CredentialMeta>>(&format!(
                        "/namespaces/{namespace}/agents/{name}/credentials"
                    ))
                    .await?,
                ),
                CredentialCommand::Delete {
                    name,
                    namespace,
                    kind,
                } => {
                    c.delete(&format!(
                        "/namespaces/{namespace}/agents/{name}/credentials/{kind}"
                    ))
                    .await?;
                    Ok(format!("credential {kind} of agent {name} deleted\n"))
                }
            },
            AgentCommand::Chat {
                name,
                namespace,
                message,
                conversation,
            } => {
                let a = c
                    .post::<_, ChatAnswer>(
                        &format!("/namespaces/{namespace}/agents/{name}/chat"),
                        &ChatRequest {
                            message,
                            conversation,
                        },
                    )
                    .await?;
                if f != Format::Table {
                    return one(f, a);
                }
                Ok(format!(
                    "{}\n(agent {name} revision {}, conversation {}, {} ms)\n",
                    a.answer.trim_end(),
                    a.revision,
                    a.conversation,
                    a.elapsed_ms
                ))
            }
            AgentCommand::Diagnose {
                name,
                namespace,
                revision,
            } => {
                let query = revision
                    .map(|n| format!("?revision={n}"))
                    .unwrap_or_default();
                let d = c
                    .get::<Diagnosis>(&format!(
                        "/namespaces/{namespace}/agents/{name}/diagnose{query}"
                    ))
                    .await?;
                if f != Format::Table {
                    return one(f, d);
                }
                Ok(format!(
                    "agent {name} revision {} on {}\n{}",
                    d.revision,
                    d.cluster.as_deref().unwrap_or("(not placed)"),
                    output::table(
                        <Diagnosis as Tabular>::headers(),
                        &output::diagnosis_rows(&d)
                    )
                ))
            }
        },
        Command::Revisions { command } => match command {
            RevisionCommand::List { agent, namespace } => list(
                f,
                c.get::<List<AgentRevision>>(&format!(
                    "/namespaces/{namespace}/agents/{agent}/revisions"
                ))
                .await?,
            ),
            RevisionCommand::Get {
                number,
                agent,
                namespace,
            } => one(
                f,
                c.get::<AgentRevision>(&format!(
                    "/namespaces/{namespace}/agents/{agent}/revisions/{number}"
                ))
                .await?,
            ),
        },
        Command::Clusters { command } => match command {
            ClusterCommand::List => list(f, c.get::<List<Cluster>>("/clusters").await?),
            ClusterCommand::Get { name: Some(name) } => one(
                f,
                output::ClusterDetail(c.get::<Cluster>(&format!("/clusters/{name}")).await?),
            ),
            ClusterCommand::Get { name: None } => {
                let all = c.get::<List<Cluster>>("/clusters").await?;
                output::print_list(
                    f,
                    &all.items
                        .into_iter()
                        .map(output::ClusterDetail)
                        .collect::<Vec<_>>(),
                )
                .map_err(|e| CliError::Other(e.to_string()))
            }
        },
        Command::Deploy {
            agent,
            namespace,
            from_revision,
            idempotency_key,
            retries,
        } => {
            let key = idempotency_key.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            let req = DeployRequest { from_revision };
            let rev = c
                .deploy_with_retries(&namespace, &agent, &req, &key, retries)
                .await?;
            one(f, rev)
        }
        Command::Stop { agent, namespace } => one(
            f,
            c.post::<_, Agent>(
                &format!("/namespaces/{namespace}/agents/{agent}/stop"),
                &serde_json::json!({}),
            )
            .await?,
        ),
        Command::Fleet { watch: true } => watch_fleet(&c, f).await,
        Command::Events { follow, cursor } => events(&c, f, follow, cursor).await,
        Command::Fleet { watch: false } => {
            let summary = c.get::<FleetSummary>("/fleet").await?;
            if f != Format::Table {
                return one(f, summary);
            }
            let clusters = c.get::<List<Cluster>>("/clusters").await?;
            Ok(format!("{}\n{}", one(f, summary)?, list(f, clusters)?))
        }
        Command::Audit { namespace, limit } => {
            let mut query = Vec::new();
            if let Some(ns) = namespace {
                query.push(format!("namespace={ns}"));
            }
            if let Some(l) = limit {
                query.push(format!("limit={l}"));
            }
            list(
                f,
                c.get::<List<AuditEvent>>(&format!("/audit?{}", query.join("&")))
                    .await?,
            )
        }
        Command::Work { command } => match command {
            WorkCommand::List {
                namespace,
                state,
                limit,
            } => {
                let mut query = Vec::new();
                if let Some(ns) = namespace {
                    query.push(format!("namespace={ns}"));
                }
                if let Some(s) = state {
                    query.push(format!("state={s}"));
                }
                if let Some(l) = limit {
                    query.push(format!("limit={l}"));
                }
                list(
                    f,
                    c.get::<List<WorkItem>>(&format!("/work?{}", query.join("&")))
                        .await?,
                )
            }
            WorkCommand::Get { id } => one(f, c.get::<WorkItem>(&format!("/work/{id}")).await?),
        },
    }
}

/// Prints the latest revision's phases until it settles; an error when it
/// failed or the wait timed out.
/// The spoke's readiness verdict as one line: the verdict from the spoke,
/// not inferred from the phase.
fn readiness_line(r: Option<&crate::link::report::ReadinessReport>) -> String {
    let Some(r) = r else {
        return "no report from the spoke yet".into();
    };
    if let Some(error) = &r.error {
        return format!("unknown: observation error: {error}");
    }
    let verdict = if r.ready { "ready" } else { "not ready" };
    let pod = r
        .pod
        .as_deref()
        .map(|p| format!(", pod {p}"))
        .unwrap_or_default();
    let reason = if r.reason.is_empty() {
        String::new()
    } else {
        format!(" — {}", r.reason)
    };
    let startup = match (&r.startup_reason, output::startup_warnings(Some(r))) {
        (Some(why), _) => format!("; {why}"),
        (None, Some(w)) => format!("; startup warnings: {w}"),
        (None, None) => String::new(),
    };
    format!(
        "{verdict} ({} live, {} ready candidates{pod}){reason}{startup}",
        r.live_candidates, r.ready_candidates
    )
}

async fn wait_for_revision(
    c: &Client,
    namespace: &str,
    agent: &str,
    timeout: Duration,
) -> CliResult<()> {
    use super::watch::Frame;
    let started = std::time::Instant::now();
    let mut last: Option<(i64, RevisionPhase)> = None;
    // Watch first, then look: a change between the look and the wait is
    // an event on the stream, never missed.
    let mut events = c.watch(None, true).await?;
    loop {
        if revision_settled(c, namespace, agent, started, &mut last).await? {
            return Ok(());
        }
        // Until an event about this Agent's revisions (or a re-list).
        loop {
            let Some(remaining) = timeout.checked_sub(started.elapsed()) else {
                let (number, phase) = last.unwrap_or((0, RevisionPhase::Pending));
                return Err(CliError::Other(format!(
                    "revision {number} still {} after {}s",
                    phase.as_str(),
                    timeout.as_secs()
                )));
            };
            match tokio::time::timeout(remaining, events.next()).await {
                Err(_) => continue, // the deadline; reported above
                Ok(Ok(Some(Frame::Event(e)))) => {
                    let ours = e.namespace.as_deref() == Some(namespace)
                        && matches!(&e.body, crate::model::event::EventBody::RevisionPhase(p) if p.agent == agent);
                    if ours {
                        break;
                    }
                }
                // Cut off, ended or broken: watch again and look again.
                Ok(Ok(Some(Frame::Relist(_)) | None) | Err(_)) => {
                    events = c.watch(None, true).await?;
                    break;
                }
            }
        }
    }
}

/// Looks at the Agent's latest revision once, printing a phase it has not
/// printed yet; true when the revision settled (active, stopped, retired),
/// an error when it failed.
async fn revision_settled(
    c: &Client,
    namespace: &str,
    agent: &str,
    started: std::time::Instant,
    last: &mut Option<(i64, RevisionPhase)>,
) -> CliResult<bool> {
    let a: Agent = c
        .get(&format!("/namespaces/{namespace}/agents/{agent}"))
        .await?;
    let Some(number) = a.latest_revision else {
        return Err(CliError::Usage(format!(
            "agent {agent} has no revision to wait for; deploy it first"
        )));
    };
    let rev: AgentRevision = c
        .get(&format!(
            "/namespaces/{namespace}/agents/{agent}/revisions/{number}"
        ))
        .await?;
    if *last != Some((number, rev.phase)) {
        *last = Some((number, rev.phase));
        eprintln!(
            "revision {number}: {} (+{:.1}s){}",
            rev.phase.as_str(),
            started.elapsed().as_secs_f64(),
            rev.reason
                .as_deref()
                .map(|r| format!(" — {r}"))
                .unwrap_or_default()
        );
    }
    match rev.phase {
        RevisionPhase::Active | RevisionPhase::Stopped | RevisionPhase::Retired => Ok(true),
        RevisionPhase::Failed => Err(CliError::Other(format!(
            "revision {number} failed: {}",
            rev.reason.unwrap_or_default()
        ))),
        _ => Ok(false),
    }
}

/// How many times in a row a live view opens its stream again before it
/// gives up.
const REOPEN_ATTEMPTS: u32 = 5;

/// `clawfed events`: prints events as they come (table lines, or one JSON
/// object per line with `-o json`).
async fn events(c: &Client, f: Format, follow: bool, cursor: Option<i64>) -> CliResult<String> {
    use super::watch::{Frame, header, line};
    use std::io::Write;
    // Without --follow the whole kept log is the default; following, the
    // news.
    let cursor = cursor.or(if follow { None } else { Some(0) });
    let mut reader = c.watch(cursor, follow).await?;
    let mut out = std::io::stdout();
    if f == Format::Table {
        let _ = writeln!(out, "{}", header());
    }
    loop {
        match reader
            .next()
            .await
            .map_err(|e| CliError::Other(e.to_string()))?
        {
            Some(Frame::Event(e)) => {
                let text = match f {
                    Format::Table => line(&e),
                    _ => serde_json::to_string(&e).map_err(|e| CliError::Other(e.to_string()))?,
                };
                let _ = writeln!(out, "{text}");
                let _ = out.flush();
            }
            Some(Frame::Relist(r)) => {
                return Err(CliError::Other(format!(
                    "the hub ended the stream: {}",
                    r.message
                )));
            }
            None => return Ok(String::new()),
        }
    }
}

/// `clawfed fleet --watch`: the fleet table, redrawn after each burst of
/// events (events arriving together make one redraw).
async fn watch_fleet(c: &Client, f: Format) -> CliResult<String> {
    use super::watch::Frame;
    use std::io::Write;
    let mut failures = 0;
    loop {
        // Watch first, then read the table: nothing between is missed.
        let mut reader = match c.watch(None, true).await {
            Ok(r) => r,
            Err(e) if failures < REOPEN_ATTEMPTS && e.is_retryable() => {
                failures += 1;
                tokio::time::sleep(Duration::from_secs(1 << failures)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        failures = 0;
        loop {
            let summary = c.get::<FleetSummary>("/fleet").await?;
            let clusters = c.get::<List<Cluster>>("/clusters").await?;
            let table = if f == Format::Table {
                format!("{}\n{}", one(f, summary)?, list(f, clusters)?)
            } else {
                one(f, summary)?
            };
            let mut out = std::io::stdout();
            // Clear the screen and home the cursor, then the table.
            let _ = write!(
                out,
                "\x1b[2J\x1b[H{table}\nupdated {} (watching; Ctrl-C ends)\n",
                chrono::Utc::now().format("%H:%M:%S")
            );
            let _ = out.flush();
            match reader.next().await {
                Ok(Some(Frame::Event(_))) => {
                    // Coalesce a burst: what else arrives within 200 ms.
                    while let Ok(Ok(Some(Frame::Event(_)))) =
                        tokio::time::timeout(Duration::from_millis(200), reader.next()).await
                    {
                    }
                }
                // Cut off, ended or broken: watch again, read again.
                _ => break,
            }
        }
    }
}

/// Reads a JSON or YAML file.
/// A secret value from `file`, or else stdin, without one trailing newline
/// (`echo` and editors add one). Errors name the flag, never the value.
fn read_secret(file: Option<&PathBuf>) -> CliResult<String> {
    use std::io::Read;
    let mut value = match file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| CliError::Usage(format!("--from-file {}: {e}", path.display())))?,
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| CliError::Usage(format!("reading the value from stdin: {e}")))?;
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
        return Err(CliError::Usage(format!(
            "no credential value on {from} (pipe it in or use --from-file; it is never taken from the command line)"
        )));
    }
    Ok(value)
}

fn read_document<T: DeserializeOwned>(path: &PathBuf) -> CliResult<T> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("--file {}: {e}", path.display())))?;
    serde_yaml_ng::from_str(&text)
        .map_err(|e| CliError::Usage(format!("--file {}: {e}", path.display())))
}

impl SpecArgs {
    /// The spec these flags describe, over `base` (for updates).
    fn into_spec(self, base: Option<AgentSpec>) -> CliResult<AgentSpec> {
        let mut spec = match (&self.file, base) {
            (Some(file), _) => read_document::<AgentSpec>(file)?,
            (None, Some(base)) => base,
            (None, None) => AgentSpec {
                harness_kind: HarnessKind::EmbeddedOpenclaw,
                execution_mode: ExecutionMode::Ordinary,
                image: self.image.clone().ok_or_else(|| {
                    CliError::Usage("--image: required (or give a spec file with -f)".into())
                })?,
                gateway_image: None,
                configuration: None,
                resources: Default::default(),
                requirement_labels: BTreeMap::new(),
                placement: Default::default(),
                plugins: Vec::new(),
                channels: Vec::new(),
            },
        };
        if let Some(kind) = &self.harness_kind {
            spec.harness_kind = HarnessKind::parse(kind).ok_or_else(|| {
                CliError::Usage(format!(
                    "--harness-kind: {kind:?} is not one of embedded-openclaw, dedicated-openclaw, dedicated-codex"
                ))
            })?;
        }
        if let Some(mode) = &self.execution_mode {
            spec.execution_mode = ExecutionMode::parse(mode).ok_or_else(|| {
                CliError::Usage(format!(
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
        for label in self.requirement_labels {
            let (k, v) = label.split_once('=').ok_or_else(|| {
                CliError::Usage(format!("--requirement-label: {label:?} must be KEY=VALUE"))
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

/// The CLI error of a non-success answer: the API's error body, or the
/// body's text when it is not one.
fn api_error(status: reqwest::StatusCode, bytes: &[u8]) -> CliError {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => CliError::Api {
            status: status.as_u16(),
            code: body.error.code,
            message: body.error.message,
        },
        Err(_) => CliError::Api {
            status: status.as_u16(),
            code: "unknown".into(),
            message: String::from_utf8_lossy(bytes).trim().to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16) -> CliError {
        CliError::Api {
            status,
            code: "x".into(),
            message: "x".into(),
        }
    }

    #[test]
    fn only_a_missing_answer_is_retried() {
        for status in [502, 503, 504] {
            assert!(api(status).is_retryable(), "{status}");
        }
        // The hub answered: repeating cannot change the outcome (a 409 for a
        // reused key, a 400 for a bad field, a 500 bug).
        for status in [400, 401, 403, 404, 409, 413, 500, 501] {
            assert!(!api(status).is_retryable(), "{status}");
        }
        assert!(!CliError::Usage("x".into()).is_retryable());
        assert!(!CliError::Other("x".into()).is_retryable());
    }

    #[test]
    fn giving_up_names_the_key_and_keeps_the_exit_code() {
        let err = CliError::GaveUp {
            key: "k-123".into(),
            attempts: 3,
            last: Box::new(api(503)),
        };
        assert!(err.to_string().contains("--idempotency-key k-123"), "{err}");
        assert_eq!(err.exit_code(), 1);
        assert!(!err.is_retryable());
    }

    #[test]
    fn a_tls_error_is_found_inside_nested_io_errors() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, tls.clone());
        let outer = std::io::Error::other(inner);
        assert_eq!(rustls_error(&outer), Some(&tls));
        let plain = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(rustls_error(&plain), None);
    }

    #[test]
    fn the_backoff_is_bounded() {
        use backon::BackoffBuilder;
        let delays: Vec<Duration> = deploy_backoff(DEPLOY_RETRIES).build().collect();
        assert_eq!(delays.len(), DEPLOY_RETRIES);
        let total: Duration = delays.iter().sum();
        // Jitter only lengthens a delay, by at most the delay itself.
        assert!(total >= Duration::from_millis(23_500), "{total:?}");
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(16)),
            "{delays:?}"
        );
    }
}
