//! `clawfed-podrunner`: a kubelet for the project's stand-in images on one
//! kwok Node. See the crate docs and e2e/README.md.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use clawfed_pods::{net, runner};

#[derive(Debug, Parser)]
#[command(about = "Runs real stand-in processes behind the Pods of a kwok Node")]
struct Args {
    /// Kubeconfig with rights to watch Pods, read Secrets/ConfigMaps and patch pods/status.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The Node whose Pods to run.
    #[arg(long)]
    node: String,
    /// Pod IPs to hand out (inside 198.18.128.0/17).
    #[arg(long)]
    pod_cidr: String,
    /// The network namespace the stand-ins run in.
    #[arg(long, default_value = "clawfed-pods")]
    netns: String,
    /// Per-Pod state: container root, log, pidfile.
    #[arg(long)]
    state_dir: PathBuf,
    /// Where the stand-in binaries are (default: this executable's directory).
    #[arg(long)]
    standin_dir: Option<PathBuf>,
    /// The real OpenClaw runtime's install (as printed by e2e/openclaw.sh),
    /// for Pods of image clawfed.test/openclaw:<its version>.
    #[arg(long)]
    openclaw_dir: Option<PathBuf>,
    /// Provision a hostPath volume under this dir for every class-less claim
    /// no volume is pre-bound to (and reclaim it with its claim).
    #[arg(long)]
    volume_dir: Option<PathBuf>,
    /// An air-gapped cluster: Pods pull only from this registry mirror
    /// (host); an image under `<mirror>/` runs as the image after it, any
    /// other is refused (ErrImagePull).
    #[arg(long)]
    registry_mirror_only: Option<String>,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    let args = Args::parse();
    let pod_cidr = net::pod_cidr(&args.pod_cidr)?;
    let standin_dir = match args.standin_dir {
        Some(d) => d,
        None => std::env::current_exe()
            .context("locating this executable")?
            .parent()
            .context("this executable has no directory")?
            .to_path_buf(),
    };
    let standin_dir = std::fs::canonicalize(&standin_dir)
        .with_context(|| format!("standin dir {}", standin_dir.display()))?;
    let shutdown = clawfed_pods::standin::shutdown_on_signal();
    runner::run(
        runner::RunnerConfig {
            kubeconfig: args.kubeconfig,
            node: args.node,
            pod_cidr,
            netns: args.netns,
            state_dir: args.state_dir,
            standin_dir,
            openclaw_dir: args.openclaw_dir,
            volume_dir: args.volume_dir,
            registry: args
                .registry_mirror_only
                .as_deref()
                .map(clawfed_pods::podspec::Registry::mirror_only)
                .unwrap_or_default(),
        },
        shutdown,
    )
    .await?;
    Ok(())
}
