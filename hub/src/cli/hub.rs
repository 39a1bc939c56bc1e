//! `clawfed-hub`: `serve` (the default), `token create|revoke`, `migrate`,
//! `bundle`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use chrono::Utc;
use clap::{Parser, Subcommand};

use crate::auth::{self, Role};
use crate::config::{Config, LogFormat};
use crate::server;
use crate::store::{self, NewToken, Store};

/// The clawfed hub.
#[derive(Debug, Parser)]
#[command(name = "clawfed-hub", version, about)]
struct Args {
    /// YAML config file; without one the embedded defaults apply. Also
    /// read from `OCC_CONFIG_PATH`, the Compute Driver's name for it.
    #[arg(long, short = 'c', env = "CLAWFED_CONFIG", global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the hub (REST, gRPC, metrics, worker) until SIGTERM/SIGINT.
    Serve,
    /// Apply pending database migrations (as the migration role), print
    /// each one applied, grant `database.applicationRole` its rights, and
    /// exit. `serve` on PostgreSQL applies none and refuses to start while
    /// one is pending.
    Migrate,
    /// Print this binary's version and link contract, the database schema
    /// beside this binary's migrations, and the versions of the enrolled
    /// spokes (oldest and newest). Applies no migration.
    Version,
    /// Manage API tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Enroll, list and revoke execution clusters.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Write an offline install bundle: Helm charts, plain manifests, the
    /// image list with digests, and SHA256SUMS of every file.
    Bundle(BundleArgs),
}

#[derive(Debug, clap::Args)]
struct BundleArgs {
    /// Where to write: a new or empty directory, or FILE.tar.
    #[arg(long)]
    out: PathBuf,
    /// The directory holding the Helm charts, one sub-directory each.
    #[arg(long, default_value = "deploy/charts")]
    charts: PathBuf,
    /// A directory of plain manifests (its *.yaml files); repeatable.
    #[arg(long = "manifests", default_values = ["deploy/hub", "deploy/spoke"])]
    manifests: Vec<PathBuf>,
    /// The image list, one reference a line (deploy/images/build.sh writes
    /// one as images.txt).
    #[arg(long)]
    images: PathBuf,
    /// Also carry the images: the <image>.oci.tar archives in this
    /// directory (build.sh writes them beside images.txt).
    #[arg(long)]
    image_archives: Option<PathBuf>,
    /// production: every image by @sha256: digest; dev: tags allowed.
    #[arg(long, value_enum, default_value = "production")]
    profile: crate::bundle::Profile,
}

#[derive(Debug, Subcommand)]
enum ClusterCommand {
    /// Bootstrap tokens for enrolling a spoke.
    Token {
        #[command(subcommand)]
        command: ClusterTokenCommand,
    },
    /// Revoke a cluster: its stream closes and it cannot reconnect.
    Revoke { name: String },
    /// Approve a pending enrollment (tokens created with --require-approval).
    Approve { name: String },
    /// Print the link CA certificate (PEM) that spokes pin.
    Ca {
        #[command(subcommand)]
        command: Option<CaCommand>,
    },
}

#[derive(Debug, Subcommand)]
enum CaCommand {
    /// Recovery after the secrets key is lost: replace the stored link CA,
    /// which no longer opens, with a new one and print it. Refused while
    /// the stored CA still opens. Afterwards restart every replica, give
    /// every spoke the new CA and re-enroll it (`cluster token create
    /// NAME --reenroll`).
    Reset {
        /// Confirms that every enrolled spoke is cut off until it pins the
        /// new CA and re-enrolls.
        #[arg(long)]
        every_spoke_reenrolls: bool,
    },
}

#[derive(Debug, Subcommand)]
enum ClusterTokenCommand {
    /// Create a single-use, expiring bootstrap token and print it.
    Create {
        /// The cluster name the token enrolls.
        name: String,
        /// Lifetime, e.g. 1h, 30m (default 1h).
        #[arg(long)]
        ttl: Option<String>,
        /// Allow re-enrolling an already enrolled name (an admin decision).
        #[arg(long)]
        reenroll: bool,
        /// Issue the certificate only after `cluster approve NAME`.
        #[arg(long)]
        require_approval: bool,
    },
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Create a token and print its secret (shown once).
    Create {
        /// Token name (unique; appears in audit events as token:<name>).
        #[arg(long)]
        name: String,
        /// Namespace the token is scoped to; omit for installation-admin.
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        /// installation-admin, admin, deployer or viewer.
        #[arg(long)]
        role: String,
        /// Lifetime, e.g. 30d, 12h, 90m; no expiry when omitted.
        #[arg(long)]
        ttl: Option<String>,
    },
    /// Revoke a token by name.
    Revoke {
        #[arg(long)]
        name: String,
    },
}

/// The seed's environment variable for the config file, accepted beside
/// `CLAWFED_CONFIG` (and `--config`).
pub const OCC_CONFIG_PATH: &str = "OCC_CONFIG_PATH";

/// The config file: `--config`/`CLAWFED_CONFIG`, else `OCC_CONFIG_PATH`.
/// Both naming different files is an error naming both: one of them would
/// be silently ignored.
fn config_path(
    given: Option<PathBuf>,
    env: &HashMap<String, String>,
) -> Result<Option<PathBuf>, String> {
    let occ = env
        .get(OCC_CONFIG_PATH)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    match (given, occ) {
        (Some(a), Some(b)) if a != b => Err(format!(
            "--config/CLAWFED_CONFIG ({}) and {OCC_CONFIG_PATH} ({}) name different files; set one",
            a.display(),
            b.display()
        )),
        (Some(a), _) => Ok(Some(a)),
        (None, occ) => Ok(occ),
    }
}

/// Entry point of `clawfed-hub`.
pub fn main() -> ExitCode {
    let args = Args::parse();
    let env: HashMap<String, String> = std::env::vars().collect();
    let path = match config_path(args.config.clone(), &env) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let config = match Config::load(path.as_deref(), &env) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&config);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match args.command.unwrap_or(Command::Serve) {
            Command::Serve => serve(&config).await,
            Command::Migrate => migrate(&config).await,
            Command::Version => version(&config).await,
            Command::Token { command } => token(&config, command).await,
            Command::Cluster { command } => cluster(&config, command).await,
            Command::Bundle(args) => bundle(args),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Each cause once (some errors print their source too).
            eprintln!("error: {}", clawfed_proto::errors::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log.filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match config.log.format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

/// How long a SIGTERM'd hub waits for its tasks to drain before it exits.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

async fn serve(config: &Config) -> anyhow::Result<()> {
    let hub = server::start(config).await?;
    // Printed on stdout so scripts can read where the hub listens.
    let link = hub
        .link
        .as_ref()
        .map_or_else(|| "off".to_owned(), |l| format!("https://{}", l.addr));
    let tunnel = hub
        .tunnel
        .as_ref()
        .map_or_else(|| "off".to_owned(), |t| t.url.clone());
    let api = if hub.api_tls { "https" } else { "http" };
    println!(
        "clawfed-hub listening: rest={api}://{} grpc={api}://{} metrics=http://{}/metrics link={} tunnel={} database={}",
        hub.rest_addr,
        hub.grpc_addr,
        hub.metrics_addr,
        link,
        tunnel,
        redact_url(&config.database.url)
    );
    let token = hub.shutdown_token();
    server::shutdown_signal().await;
    tracing::info!("hub.draining");
    token.cancel();
    // Sessions get their GoAway (reconnect, jittered) at once; a stream or
    // connection that does not finish never holds the replica up longer
    // than the drain bound.
    if tokio::time::timeout(DRAIN_TIMEOUT, hub.wait())
        .await
        .is_err()
    {
        tracing::warn!(after = ?DRAIN_TIMEOUT, "hub.drain_timeout");
    }
    tracing::info!("hub.stopped");
    Ok(())
}

/// Hides a password in a database URL.
fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Applies pending migrations (this is the migration role's command),
/// prints each one applied, then grants the configured application role
/// its rights. Idempotent.
async fn migrate(config: &Config) -> anyhow::Result<()> {
    let report = store::migrate(
        &config.database.url,
        config.pool_settings(),
        config.database.application_role.as_deref(),
    )
    .await
    .with_context(|| format!("migrating {}", redact_url(&config.database.url)))?;
    for m in &report.applied {
        println!("applied {m}");
    }
    if report.applied.is_empty() {
        println!("no pending migrations; schema at {:04}", report.version);
    } else {
        println!(
            "{} migration(s) applied; schema at {:04}",
            report.applied.len(),
            report.version
        );
    }
    if let (Some(role), Some(schema)) = (&config.database.application_role, &report.granted_schema)
    {
        println!(
            "granted role {role} SELECT, INSERT, UPDATE, DELETE on the tables of schema {schema} (no DDL)"
        );
    }
    Ok(())
}

async fn version(config: &Config) -> anyhow::Result<()> {
    let (store, status) = store::inspect(&config.database.url, config.pool_settings())
        .await
        .with_context(|| format!("reading {}", redact_url(&config.database.url)))?;
    let clusters = if status.current() {
        Some(store.list_clusters().await?)
    } else {
        None
    };
    print!("{}", super::version::report(&status, clusters.as_deref()));
    Ok(())
}

async fn token(config: &Config, command: TokenCommand) -> anyhow::Result<()> {
    let store = server::open_store(config).await?;
    match command {
        TokenCommand::Create {
            name,
            namespace,
            role,
            ttl,
        } => {
            let role = Role::parse(&role).ok_or_else(|| {
                anyhow::anyhow!(
                    "--role: {role:?} is not one of installation-admin, admin, deployer, viewer"
                )
            })?;
            match (role, &namespace) {
                (Role::InstallationAdmin, Some(_)) => {
                    anyhow::bail!(
                        "--namespace: installation-admin tokens are not scoped to a namespace"
                    )
                }
                (Role::InstallationAdmin, None) => {}
                (_, None) => anyhow::bail!("--namespace: required for role {}", role.as_str()),
                (_, Some(_)) => {}
            }
            crate::service::validate::dns_label("--name", &name)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let expires_at = ttl
                .as_deref()
                .map(parse_ttl)
                .transpose()?
                .map(|d| Utc::now() + d);
            let minted = auth::mint_token();
            store
                .create_token(&NewToken {
                    name,
                    namespace,
                    role,
                    hash: minted.hash,
                    expires_at,
                })
                .await?;
            println!("{}", minted.secret);
        }
        TokenCommand::Revoke { name } => {
            store.revoke_token(&name, Utc::now()).await?;
            println!("token {name} revoked");
        }
    }
    Ok(())
}

async fn cluster(config: &Config, command: ClusterCommand) -> anyhow::Result<()> {
    let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(server::open_store(config).await?);
    if let ClusterCommand::Ca { command } = command {
        return link_ca(config, store.as_ref(), command).await;
    }
    let service = crate::service::Service::new(store, config.policy());
    let operator = auth::Principal::system("cli");
    match command {
        ClusterCommand::Token {
            command:
                ClusterTokenCommand::Create {
                    name,
                    ttl,
                    reenroll,
                    require_approval,
                },
        } => {
            let ttl_seconds = ttl
                .as_deref()
                .map(parse_ttl)
                .transpose()?
                .map(|d| d.num_seconds());
            let created = service
                .create_bootstrap_token(
                    &operator,
                    &name,
                    crate::model::CreateBootstrapToken {
                        ttl_seconds,
                        reenroll,
                        require_approval,
                    },
                )
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            println!("{}", created.token);
            eprintln!(
                "bootstrap token for cluster {name} (single use, expires {})",
                created.expires_at.to_rfc3339()
            );
        }
        ClusterCommand::Revoke { name } => {
            let cluster = service
                .revoke_cluster(&operator, &name)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            println!("cluster {} revoked", cluster.name);
        }
        ClusterCommand::Approve { name } => {
            service
                .approve_cluster(&operator, &name)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            println!("enrollment of cluster {name} approved");
        }
        ClusterCommand::Ca { .. } => {}
    }
    Ok(())
}

/// `cluster ca`: prints the CA every replica shares, from the store
/// (created, or imported from link.caDir, when no hub has started yet);
/// `cluster ca reset` replaces a stored CA that no longer opens.
async fn link_ca(
    config: &Config,
    store: &dyn Store,
    command: Option<CaCommand>,
) -> anyhow::Result<()> {
    use crate::link::ca;
    if let Some(CaCommand::Reset {
        every_spoke_reenrolls,
    }) = command
    {
        anyhow::ensure!(
            every_spoke_reenrolls,
            "--every-spoke-reenrolls: required; a new link CA cuts off every enrolled spoke until it pins the new CA and re-enrolls"
        );
    }
    let secrets = server::load_secrets_key(config).await?;
    let ca_dir = Some(config.link.ca_dir.as_path());
    let Some(CaCommand::Reset { .. }) = command else {
        let (ca, _) = ca::load_or_create_shared(store, &secrets, ca_dir).await?;
        print!("{}", ca.ca_pem());
        return Ok(());
    };
    let (ca, outcome) = ca::reset_unreadable_shared(store, &secrets, ca_dir).await?;
    print!("{}", ca.ca_pem());
    eprintln!(
        "{}; restart every hub replica, then give each spoke this CA and a bootstrap token from `cluster token create NAME --reenroll`",
        match outcome {
            ca::CaReset::Replaced => "link CA replaced",
            ca::CaReset::Created => "no link CA was stored; this one is the first",
        }
    );
    Ok(())
}

/// Writes the bundle; nothing is written when a source or the profile
/// rule fails.
fn bundle(args: BundleArgs) -> anyhow::Result<()> {
    use crate::bundle;
    let sources = bundle::Sources {
        charts: args.charts,
        manifests: args.manifests,
        images: args.images,
        image_archives: args.image_archives,
        profile: args.profile,
    };
    let files = bundle::assemble(&sources)?;
    bundle::write(&args.out, &files)?;
    println!(
        "bundle written to {}: {} files, profile {}",
        args.out.display(),
        files.len(),
        args.profile.as_str()
    );
    Ok(())
}

/// Parses `30d`, `12h`, `90m`, `45s`.
pub fn parse_ttl(s: &str) -> anyhow::Result<chrono::Duration> {
    let (number, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = number
        .parse()
        .map_err(|_| anyhow::anyhow!("--ttl: {s:?} must look like 30d, 12h, 90m or 45s"))?;
    let d = match unit {
        "d" => chrono::Duration::days(n),
        "h" => chrono::Duration::hours(n),
        "m" => chrono::Duration::minutes(n),
        "s" => chrono::Duration::seconds(n),
        _ => anyhow::bail!("--ttl: {s:?} must look like 30d, 12h, 90m or 45s"),
    };
    if n <= 0 {
        anyhow::bail!("--ttl: must be positive");
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_file_comes_from_the_flag_or_occ_config_path() {
        let env = |v: &[(&str, &str)]| -> HashMap<String, String> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let occ = env(&[(OCC_CONFIG_PATH, "/etc/occ.yaml")]);
        assert_eq!(
            config_path(None, &occ).unwrap(),
            Some(PathBuf::from("/etc/occ.yaml"))
        );
        assert_eq!(
            config_path(Some("/etc/occ.yaml".into()), &occ).unwrap(),
            Some(PathBuf::from("/etc/occ.yaml")),
            "the same file twice is fine"
        );
        assert!(config_path(Some("/etc/hub.yaml".into()), &occ).is_err());
        assert_eq!(
            config_path(None, &env(&[(OCC_CONFIG_PATH, "")])).unwrap(),
            None
        );
    }

    #[test]
    fn ttls() {
        assert_eq!(parse_ttl("30d").unwrap(), chrono::Duration::days(30));
        assert_eq!(parse_ttl("90m").unwrap(), chrono::Duration::minutes(90));
        assert!(parse_ttl("0h").is_err());
        assert!(parse_ttl("10w").is_err());
        assert!(parse_ttl("h").is_err());
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact_url("postgres://u:secret@host/db"),
            "postgres://u:***@host/db"
        );
        assert_eq!(redact_url("sqlite://./clawfed.db"), "sqlite://./clawfed.db");
    }
}
