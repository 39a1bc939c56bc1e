//! What one cluster credential can make the hub hold (issue 31 item 7):
//! the real `clawfed-hub serve` (SQLite, link and tunnel on) and a client
//! holding an enrolled cluster's certificate that opens `--streams`
//! `SpokeLink.Tunnel` streams on one connection, each sending a
//! `--frame-kib` first frame and never ending, with no tunnel open waiting
//! for them. Prints the hub's RSS before and at its peak during the flood
//! (sampled every 100 ms for `--hold-seconds`), and how the streams ended.
//!
//! Goal: the flood adds at most `--goal-mib` to the hub's RSS. Compare
//! builds with `--hub-bin` (the hub before the bound, built from an older
//! commit into another target directory):
//!
//! `cargo build -p clawfed-hub -p clawfed-bench &&
//!  "$CARGO_TARGET_DIR"/debug/stream-flood-bench [--hub-bin OLD]`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use clap::Parser;
use clawfed_bench::fleet::{HubProc, mint_tokens};
use clawfed_bench::procfs::rss_kib;
use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::enrollment_client::EnrollmentClient;
use clawfed_proto::link::v1::spoke_link_client::SpokeLinkClient;
use clawfed_proto::link::v1::tunnel_frame;
use clawfed_spoke::link::identity::{Identity, new_key_and_csr};
use clawfed_spoke::link::tls::{self as spoke_tls, HubAddress, SwappableCert};
use tokio_stream::StreamExt;

#[derive(Debug, Parser)]
#[command(name = "stream-flood-bench")]
struct Args {
    /// Tunnel streams opened on one connection.
    #[arg(long, default_value_t = 2000)]
    streams: usize,
    /// Size of each stream's first frame, KiB.
    #[arg(long, default_value_t = 1024)]
    frame_kib: usize,
    /// Seconds the streams are held open while the hub's RSS is sampled.
    #[arg(long, default_value_t = 8)]
    hold_seconds: u64,
    /// The hub binary (default: `clawfed-hub` next to this binary).
    #[arg(long)]
    hub_bin: Option<PathBuf>,
    /// The goal: MiB the flood may add to the hub's RSS.
    #[arg(long, default_value_t = 64)]
    goal_mib: u64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    clawfed_bench::cli::verdict_exit("stream-flood-bench", run(Args::parse()).await, 2)
}

async fn cli(hub_bin: &Path, dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = clawfed_bench::sqlite_hub(hub_bin, dir, args)
        .output()
        .await?;
    if !out.status.success() {
        bail!(
            "clawfed-hub {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Enrolls `exec-a` the way a spoke does; returns its mTLS channel.
async fn enrolled_channel(
    dir: &Path,
    hub_bin: &Path,
    link: std::net::SocketAddr,
) -> anyhow::Result<tonic::transport::Channel> {
    let store =
        clawfed_hub::store::connect(&format!("sqlite://{}", dir.join("hub.db").display())).await?;
    let token = mint_tokens(&store, &["exec-a".to_owned()]).await?.remove(0);
    let ca = cli(hub_bin, dir, &["cluster", "ca"]).await?;
    let address = HubAddress::parse(&format!("https://127.0.0.1:{}", link.port()))
        .map_err(|e| anyhow::anyhow!("link address: {e}"))?;
    let (key_pem, csr_pem) = new_key_and_csr()?;
    let channel = spoke_tls::channel(&address, spoke_tls::enroll_config(&ca)?).await?;
    let enrolled = EnrollmentClient::new(channel)
        .enroll(pb::EnrollRequest {
            bootstrap_token: token,
            cluster_name: "exec-a".into(),
            csr_pem,
            spoke_version: "stream-flood-bench".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let identity = Identity::new(enrolled.cluster_id, key_pem, enrolled.certificate_pem)?;
    let cert = Arc::new(SwappableCert::default());
    cert.install(&identity)?;
    Ok(spoke_tls::channel(&address, spoke_tls::mtls_config(&ca, cert)?).await?)
}

async fn run(a: Args) -> anyhow::Result<bool> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let hub_bin = clawfed_bench::hub_bin(a.hub_bin.clone())?;
    let dir = tempfile::tempdir()?;
    let serve = clawfed_bench::sqlite_hub(&hub_bin, dir.path(), &["serve"]);
    let hub = HubProc::spawn(serve, &dir.path().join("hub.log"), false).await?;
    let channel = enrolled_channel(dir.path(), &hub_bin, hub.link).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = rss_kib(hub.pid)?;

    let frame = vec![7u8; a.frame_kib * 1024];
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..a.streams {
        let mut client =
            SpokeLinkClient::new(channel.clone()).max_encoding_message_size(frame.len() + 1024);
        let first = pb::TunnelFrame {
            body: Some(tunnel_frame::Body::Data(frame.clone())),
        };
        calls.spawn(async move {
            let frames = tokio_stream::iter([first]).chain(tokio_stream::pending());
            match client.tunnel(frames).await {
                Ok(_) => "accepted".to_owned(),
                Err(status) => format!("{:?}", status.code()),
            }
        });
    }
    let mut peak = before;
    let hold = tokio::time::Instant::now() + Duration::from_secs(a.hold_seconds);
    while tokio::time::Instant::now() < hold {
        peak = peak.max(rss_kib(hub.pid)?);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut ended = BTreeMap::<String, usize>::new();
    while let Ok(Some(done)) =
        tokio::time::timeout(Duration::from_millis(1), calls.join_next()).await
    {
        *ended.entry(done?).or_default() += 1;
    }
    let open = calls.len();
    calls.abort_all();
    let added_mib = peak.saturating_sub(before) / 1024;
    let ok = added_mib <= a.goal_mib;
    println!(
        "hub {}: {} streams x {} KiB first frame on one connection, held {} s",
        hub_bin.display(),
        a.streams,
        a.frame_kib,
        a.hold_seconds
    );
    println!(
        "hub RSS: {} MiB before, {} MiB at the peak (+{added_mib} MiB); streams ended by then: {ended:?}, still open: {open}",
        before / 1024,
        peak / 1024
    );
    println!(
        "goal: the flood adds at most {} MiB to the hub's RSS: {}",
        a.goal_mib,
        if ok { "MET" } else { "MISSED" }
    );
    Ok(ok)
}
