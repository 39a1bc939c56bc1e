//! The hub's API as the bench uses it: the revision phase events of the
//! watch stream, the Gateway ensure histogram, Agent creation.

use std::time::Duration;

use anyhow::Result;
use clawfed_hub::client::HubClient;
use clawfed_hub::client::events::Frame;
use clawfed_hub::model::Agent;
use clawfed_hub::model::event::{EventBody, RevisionPhaseEvent};
use serde_json::json;

use super::{GATEWAY_IMAGE, IMAGE};

/// The revision phase changes of `tenant`, from the hub's watch stream
/// (Server-Sent Events), as a user's dashboard follows a rollout; the
/// channel closes when the stream ends (or is cut off with `relist`).
pub(super) async fn phase_events(
    rest: &HubClient,
    tenant: &str,
) -> Result<tokio::sync::mpsc::UnboundedReceiver<RevisionPhaseEvent>> {
    let mut events = rest.watch(None, true).await?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let tenant = tenant.to_owned();
    tokio::spawn(async move {
        while let Ok(Some(frame)) = events.next().await {
            let Frame::Event(event) = frame else {
                return; // relist: the stream was cut off
            };
            let ours = event.namespace.as_deref() == Some(tenant.as_str());
            if let EventBody::RevisionPhase(p) = event.body
                && ours
                && tx.send(p).is_err()
            {
                return;
            }
        }
    });
    Ok(rx)
}

/// The hub's Gateway ensures so far, from its own histogram
/// `occ_agent_operation_duration_seconds{operation="gateway_ensure"}` on
/// its metrics listener `metrics` (`host:port`).
pub(super) async fn ensure_totals(metrics: &str) -> Result<EnsureTotals> {
    let text = reqwest::Client::new()
        .get(format!("http://{metrics}/metrics"))
        .timeout(Duration::from_secs(10))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    const NAME: &str = "occ_agent_operation_duration_seconds";
    let value = |suffix: &str, result: &str| {
        clawfed_bench::fleet::labelled_metric(
            &text,
            &format!("{NAME}{suffix}"),
            &[("operation", "gateway_ensure"), ("result", result)],
        )
        .unwrap_or(0.0)
    };
    let t = EnsureTotals {
        ok: value("_count", "ok"),
        failed: value("_count", "failed"),
        ok_seconds: value("_sum", "ok"),
    };
    Ok(t)
}

/// Makes Agent `agent` of `tenant` placed on `cluster` in the hub.
pub(super) async fn create_agent(
    rest: &HubClient,
    tenant: &str,
    agent: &str,
    cluster: &str,
    gateways: bool,
) -> Result<()> {
    // Embedded OpenClaw has no control-cluster Gateway: with Gateways
    // on, the Agents are dedicated (Gateway in control, a workspace
    // PVC in the execution cluster).
    let mut spec = json!({
        "harnessKind": if gateways { "dedicated-codex" } else { "embedded-openclaw" },
        "image": IMAGE,
        "placement": { "cluster": cluster },
    });
    if gateways {
        spec["gatewayImage"] = GATEWAY_IMAGE.into();
    }
    let _: Agent = rest
        .call(
            reqwest::Method::POST,
            &format!("/namespaces/{tenant}/agents"),
            Some(json!({ "name": agent, "spec": spec })),
        )
        .await?;
    Ok(())
}

/// Totals of the hub's Gateway ensure histogram.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct EnsureTotals {
    pub(super) ok: f64,
    pub(super) failed: f64,
    /// Seconds spent in the successful ones.
    pub(super) ok_seconds: f64,
}

impl EnsureTotals {
    pub(super) fn since(self, before: Self) -> Self {
        Self {
            ok: self.ok - before.ok,
            failed: self.failed - before.failed,
            ok_seconds: self.ok_seconds - before.ok_seconds,
        }
    }
}
