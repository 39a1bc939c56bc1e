//! `clawfed-spoke`: runs in an execution cluster and dials out to the hub.
//!
//! The link (enrollment, mTLS stream), apply, readiness and cleanup rooms
//! arrive with their issues; today the binary only parses its flags and
//! states what it would connect to, so the workspace builds end to end.

use clap::Parser;

/// Command-line flags of the spoke.
#[derive(Debug, Parser)]
#[command(name = "clawfed-spoke", version, about)]
struct Args {
    /// The hub's link endpoint (mTLS gRPC), e.g. https://hub.example:8443.
    #[arg(long, env = "CLAWFED_HUB_URL")]
    hub_url: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt().json().init();
    tracing::error!(hub_url = %args.hub_url, "spoke.link.unavailable: the spoke link is not built yet");
    anyhow::bail!("the spoke link is not implemented in this build; see the spoke link issue")
}
