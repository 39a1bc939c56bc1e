//! Where `agents diagnose` gets its checks: the Harness Pod through the
//! revision's spoke (a `DiagnoseRequest` on the link, asked by the replica
//! holding its session), the Gateway Pod through the hub's own
//! control-cluster client. Both are bounded reads
//! whose failures are `unknown` checks, never errors.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use clawfed_proto::diagnostics;

use crate::link::LinkState;
use crate::link::diagnose::DiagnoseError;
use crate::model::{ComponentDiagnosis, DiagnosticCheck};
use crate::tunnel::replica_diagnose::{self, DiagnoseAsk};
use crate::worker::rollout::GatewayRuntime;

/// The sources of diagnostics.
#[async_trait]
pub trait DiagnosticsSource: Send + Sync + 'static {
    /// The Harness of `target` at `revision_id`, asked of cluster `cluster_id`.
    async fn harness(
        &self,
        cluster_id: &str,
        target: &str,
        revision_id: &str,
    ) -> ComponentDiagnosis;
    /// The Gateway of `agent` at `revision`.
    /// The Gateway of `agent`'s `revision` in the Gateway namespace of the
    /// tenant `namespace_id`.
    async fn gateway(&self, namespace_id: &str, agent: &str, revision: i64) -> ComponentDiagnosis;
}

/// One `unknown` check.
pub fn unknown(name: &str, detail: &str) -> ComponentDiagnosis {
    ComponentDiagnosis {
        pod: None,
        checks: vec![check(diagnostics::unknown(name, detail))],
    }
}

fn check(c: diagnostics::Check) -> DiagnosticCheck {
    DiagnosticCheck {
        name: c.name,
        status: c.status.as_str().to_owned(),
        detail: c.detail,
    }
}

/// The link's spokes and the hub's Gateway runtime.
pub struct LinkDiagnostics {
    pub link: Arc<LinkState>,
    pub gateways: Arc<dyn GatewayRuntime>,
}

impl LinkDiagnostics {
    /// Asks the cluster's spoke: through this replica's session, or through
    /// the replica holding it.
    async fn ask(
        &self,
        cluster_id: &str,
        target: &str,
        revision_id: &str,
        timeout: Duration,
    ) -> Result<clawfed_proto::link::v1::DiagnoseResult, DiagnoseError> {
        let link = &self.link;
        if let Some((forwarding, _, url)) = link.tunnels.other_holder(cluster_id).await {
            let ask = DiagnoseAsk {
                cluster_id: cluster_id.to_owned(),
                target: target.to_owned(),
                revision_id: revision_id.to_owned(),
                timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            };
            return replica_diagnose::ask_holder(link, forwarding, &url, &ask).await;
        }
        link.diagnose
            .ask(&link.registry, cluster_id, target, revision_id, timeout)
            .await
    }
}

#[async_trait]
impl DiagnosticsSource for LinkDiagnostics {
    async fn harness(
        &self,
        cluster_id: &str,
        target: &str,
        revision_id: &str,
    ) -> ComponentDiagnosis {
        let timeout = Duration::from_millis(diagnostics::SPOKE_TIMEOUT_MS);
        match self.ask(cluster_id, target, revision_id, timeout).await {
            Ok(result) => ComponentDiagnosis {
                pod: (!result.pod.is_empty()).then_some(result.pod),
                // The spoke bounds its checks; the hub bounds them again
                // rather than trust it.
                checks: result
                    .checks
                    .into_iter()
                    .take(diagnostics::MAX_CHECKS)
                    .map(|c| {
                        let bounded = diagnostics::bound(
                            &serde_json::to_vec(&diagnostics::DiagnosticsBody {
                                checks: vec![diagnostics::PublishedCheck {
                                    name: c.name,
                                    status: c.status,
                                    detail: c.detail,
                                }],
                            })
                            .unwrap_or_default(),
                        );
                        bounded.into_iter().next().map(check).unwrap_or_else(|| {
                            check(diagnostics::unknown("harness", "invalid check name"))
                        })
                    })
                    .collect(),
            },
            Err(e) => unknown("harness", &format!("no answer from the spoke: {e}")),
        }
    }

    async fn gateway(&self, namespace_id: &str, agent: &str, revision: i64) -> ComponentDiagnosis {
        let (pod, checks) = self.gateways.diagnose(namespace_id, agent, revision).await;
        ComponentDiagnosis {
            pod,
            checks: checks.into_iter().map(check).collect(),
        }
    }
}
