//! Reading a tenant's Gateways: readiness (from the watch once in sync,
//! else the API), the data path probe and the model turn through a
//! Gateway Pod, and its diagnostics through the Pod proxy.

use std::time::Duration;

use clawfed_kube::RequestError;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;

use super::client::{PROBE_TIMEOUT, TenantGateways};
use super::error::{Error, Result};
use super::objects;
use super::ready::{self, Readiness};

impl TenantGateways {
    /// Whether `revision`'s Gateway is ready (see [`ready::evaluate`]): from
    /// the watch when it runs and is in sync, else read from the API.
    pub async fn is_ready(&self, agent: &str, revision: i64) -> Result<Readiness> {
        objects::validate_names(agent, revision)?;
        if let Some(verdict) = self
            .watch
            .get()
            .and_then(|w| w.readiness(self.ns(), agent, revision))
        {
            return Ok(verdict);
        }
        if !self.namespace_exists().await? {
            return Ok(Readiness::NotReady(ready::NotReady::NoDeployment));
        }
        let name = objects::names(agent).gateway;
        let d = self
            .api::<Deployment>()
            .get_opt(&name)
            .await
            .map_err(|e| RequestError::new("get", "Deployment", self.ns(), &name, e))?;
        let lp = ListParams::default().labels(&objects::agent_selector_string(agent));
        let pods = self
            .api::<Pod>()
            .list(&lp)
            .await
            .map_err(|e| RequestError::new("list", "Pod", self.ns(), "", e))?;
        Ok(ready::evaluate(revision, d.as_ref(), &pods.items))
    }

    /// Sends `GET <path>` through the Gateway Pod of `revision` (via the
    /// control cluster's Pod proxy): the Gateway forwards it through the
    /// hub's tunnel and the spoke to the Harness. Ok only for a 2xx answer.
    pub async fn probe_path(&self, agent: &str, revision: i64, path: &'static str) -> Result<()> {
        objects::validate_names(agent, revision)?;
        let failed = |pod: &str, detail: String| Error::PathProbe {
            agent: agent.to_owned(),
            revision,
            pod: pod.to_owned(),
            path,
            detail,
        };
        let lp = ListParams::default().labels(&objects::revision_selector_string(agent, revision));
        let pods = self
            .api::<Pod>()
            .list(&lp)
            .await
            .map_err(|e| RequestError::new("list", "Pod", self.ns(), "", e))?;
        let Some(pod) = pods
            .items
            .iter()
            .find(|p| p.metadata.deletion_timestamp.is_none())
        else {
            return Err(failed("", "no live Gateway Pod".into()));
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let url = format!(
            "/api/v1/namespaces/{}/pods/{}:{}/proxy{path}",
            self.ns(),
            name,
            self.config.port
        );
        let request = http::Request::get(&url)
            .body(Vec::new())
            .map_err(|e| failed(&name, e.to_string()))?;
        let response =
            tokio::time::timeout(PROBE_TIMEOUT, self.client.send(request.map(Into::into)))
                .await
                .map_err(|_| failed(&name, format!("no answer within {PROBE_TIMEOUT:?}")))?
                .map_err(|e| failed(&name, e.to_string()))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&body[..body.len().min(300)])
            .trim()
            .to_owned();
        Err(failed(&name, format!("HTTP {status}: {text}")))
    }

    /// One model turn through the live Gateway Pod of `revision`, sent to
    /// the Pod's address: the hub runs in the control cluster, and the
    /// apiserver's Pod proxy would take the `Authorization` header (the
    /// runtime's token) as a credential of its own.
    pub async fn model_turn(
        &self,
        agent: &str,
        revision: i64,
        token: &str,
        turn: &crate::tunnel::probe::Turn<'_>,
        timeout: Duration,
    ) -> std::result::Result<String, crate::tunnel::probe::ProbeError> {
        use crate::tunnel::probe::ProbeError;
        let no_answer = |why: String| ProbeError::NoAnswer(why);
        let lp = ListParams::default().labels(&objects::revision_selector_string(agent, revision));
        let pods = self
            .api::<Pod>()
            .list(&lp)
            .await
            .map_err(|e| no_answer(format!("listing the Gateway Pods: {e}")))?;
        let ip = pods
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .find_map(|p| p.status.as_ref()?.pod_ip.clone())
            .ok_or_else(|| no_answer("no live Gateway Pod with an address".into()))?;
        let authority = match ip.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]:{}", self.config.port),
            _ => format!("{ip}:{}", self.config.port),
        };
        tokio::time::timeout(timeout, async {
            let tcp = tokio::net::TcpStream::connect(&authority)
                .await
                .map_err(|e| {
                    no_answer(format!("connecting to the Gateway Pod {authority}: {e}"))
                })?;
            crate::tunnel::probe::turn_over(tcp, &authority, token, turn).await
        })
        .await
        .map_err(|_| ProbeError::Timeout(timeout))?
    }

    /// The diagnostics of the live Gateway Pod of `revision`, read from its
    /// private path (`clawfed_proto::diagnostics::PATH`, answered by the
    /// Gateway itself, not forwarded) through the control cluster's Pod
    /// proxy: the Pod read and its bounded checks. A missing Pod or an
    /// endpoint that does not answer is one `unknown` check.
    pub async fn diagnose(
        &self,
        agent: &str,
        revision: i64,
    ) -> (Option<String>, Vec<clawfed_proto::diagnostics::Check>) {
        use clawfed_proto::diagnostics;
        let unknown = |pod: Option<String>, detail: &str| {
            (pod, vec![diagnostics::unknown("gateway", detail)])
        };
        if objects::validate_names(agent, revision).is_err() {
            return unknown(None, "invalid Agent name or revision");
        }
        if !matches!(self.namespace_exists().await, Ok(true)) {
            return unknown(
                None,
                "the tenant has no Gateway namespace (no Gateway was ever made)",
            );
        }
        let lp = ListParams::default().labels(&objects::revision_selector_string(agent, revision));
        let pods = match self.api::<Pod>().list(&lp).await {
            Ok(p) => p.items,
            Err(e) => {
                tracing::debug!(error = %e, "gateway.diagnose.pods_unreadable");
                return unknown(None, "the Gateway Pods cannot be listed");
            }
        };
        let Some(name) = pods
            .iter()
            .find(|p| p.metadata.deletion_timestamp.is_none())
            .and_then(|p| p.metadata.name.clone())
        else {
            return unknown(None, "no live Gateway Pod");
        };
        let url = format!(
            "/api/v1/namespaces/{}/pods/{}:{}/proxy{}",
            self.ns(),
            name,
            self.config.port,
            diagnostics::PATH
        );
        let Ok(request) = http::Request::get(&url).body(Vec::new()) else {
            return unknown(Some(name), "invalid diagnostics request");
        };
        let wait = std::time::Duration::from_millis(diagnostics::READ_TIMEOUT_MS);
        let read = async {
            let response = self
                .client
                .send(request.map(Into::into))
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status();
            if !status.is_success() {
                return Err(format!("HTTP {status}"));
            }
            let limited =
                http_body_util::Limited::new(response.into_body(), diagnostics::MAX_BODY_BYTES);
            http_body_util::BodyExt::collect(limited)
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| e.to_string())
        };
        match tokio::time::timeout(wait, read).await {
            Ok(Ok(body)) => (Some(name), diagnostics::bound(&body)),
            Ok(Err(e)) => {
                let detail = format!("diagnostics endpoint unreachable: {e}");
                unknown(Some(name), &detail)
            }
            Err(_) => unknown(
                Some(name),
                &format!("diagnostics endpoint unreachable: no answer within {wait:?}"),
            ),
        }
    }
}
