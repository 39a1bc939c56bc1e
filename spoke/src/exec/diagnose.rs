//! `DiagnoseRequest` from the hub: the bounded generic checks of the one
//! Harness Pod this spoke runs for a target and revision, read from the
//! Pod's private diagnostics path through the apiserver's Pod proxy. What
//! cannot be read (no such Harness here, no live Pod, an endpoint that does
//! not answer) is an `unknown` check, never an error that changes anything.

use std::time::Duration;

use clawfed_proto::diagnostics::{self, Check};
use clawfed_proto::labels;
use clawfed_proto::link::v1 as pb;
use clawfed_proto::readiness::HARNESS_ROLE;
use clawfed_proto::work::target::Target;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::Executor;
use crate::apply::harness;
use crate::podproxy;

impl Executor {
    /// Answers a `DiagnoseRequest` (always with a result; see the module
    /// docs).
    pub async fn diagnose(&self, req: &pb::DiagnoseRequest) -> pb::DiagnoseResult {
        let (pod, checks) = self.harness_checks(req).await;
        pb::DiagnoseResult {
            request_id: req.request_id.clone(),
            checks: checks
                .into_iter()
                .map(|c| pb::DiagnosticCheck {
                    name: c.name,
                    status: c.status.as_str().to_owned(),
                    detail: c.detail,
                })
                .collect(),
            pod,
        }
    }

    async fn harness_checks(&self, req: &pb::DiagnoseRequest) -> (String, Vec<Check>) {
        let unknown = |detail: &str| (String::new(), vec![diagnostics::unknown("harness", detail)]);
        let Ok(Target::Harness {
            agent, revision, ..
        }) = req.target.parse::<Target>()
        else {
            return unknown("not a Harness target");
        };
        let Some((namespace, _)) = self.recorded(&req.target) else {
            return unknown("this cluster runs no Harness for the target");
        };
        let name = harness::names(&agent, revision).harness;
        let service = match Api::<Service>::namespaced(self.client.clone(), &namespace)
            .get_opt(&name)
            .await
        {
            Ok(Some(s)) => s,
            Ok(None) => return unknown("no Harness Service (stopped or retired)"),
            Err(e) => {
                tracing::debug!(error = %e, "spoke.diagnose.service_unreadable");
                return unknown("the Harness Service cannot be read");
            }
        };
        // The hub names the revision; a Harness of another revision under
        // the same target answers nothing.
        if service.annotations().get(labels::REVISION_ID_ANNOTATION) != Some(&req.revision_id) {
            return unknown("the Harness here is of another revision");
        }
        let port = service
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_ref())
            .and_then(|p| p.first())
            .map_or(clawfed_proto::work::harness::DEFAULT_PORT, |p| p.port);
        let selector = format!(
            "{}={agent},{}={revision},{}={HARNESS_ROLE}",
            labels::AGENT,
            labels::REVISION,
            labels::WORKLOAD_ROLE
        );
        let pods = match Api::<Pod>::namespaced(self.client.clone(), &namespace)
            .list(&ListParams::default().labels(&selector))
            .await
        {
            Ok(l) => l.items,
            Err(e) => {
                tracing::debug!(error = %e, "spoke.diagnose.pods_unreadable");
                return unknown("the Harness Pods cannot be listed");
            }
        };
        let live: Vec<&Pod> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let pod = match live.as_slice() {
            [one] => one.name_any(),
            [] => return unknown("no live Harness Pod"),
            many => return unknown(&format!("{} live Harness Pods", many.len())),
        };
        let wait = Duration::from_millis(match u64::from(req.timeout_ms) {
            0 => diagnostics::READ_TIMEOUT_MS,
            ms => ms.min(diagnostics::READ_TIMEOUT_MS),
        });
        match podproxy::get(
            &self.client,
            &namespace,
            &pod,
            port,
            diagnostics::PATH,
            diagnostics::MAX_BODY_BYTES,
            wait,
        )
        .await
        {
            Ok(body) => (pod, diagnostics::bound(&body)),
            Err(e) => {
                let detail = format!("diagnostics endpoint unreachable: {e}");
                (pod, vec![diagnostics::unknown("diagnostics", &detail)])
            }
        }
    }
}
