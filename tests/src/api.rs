//! What the tests ask of the hub's REST API beyond [`HubClient`]'s own
//! calls: a tenant with an Agent, waits for a revision phase or a cluster
//! coming online. One place, so every test speaks to the hub one way.

use std::time::Duration;

use anyhow::{Result, ensure};
use clawfed_hub::client::HubClient;
use clawfed_hub::model::{
    Agent, AgentRevision, AgentSpec, Cluster, ConnectionState, Namespace, RevisionPhase,
};
use reqwest::Method;
use serde_json::json;

use crate::until;

/// How long a revision gets to reach a phase.
pub const PHASE_WAIT: Duration = Duration::from_secs(90);
/// The Harness image test Agents run (kwok or the pod runner stands it in).
pub const HARNESS_IMAGE: &str = "ghcr.io/openclaw/openclaw:1.0";

/// A Gateway image that passes the digest rule and is never pulled.
pub fn gateway_image() -> String {
    format!(
        "registry.invalid/openclaw-gateway@sha256:{}",
        "cd".repeat(32)
    )
}

/// A short random name part: tenants and Agents of concurrent tests never
/// collide.
pub fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

/// The tests' calls on the hub (see the module doc).
// The futures are only awaited on HubClient itself, where their auto
// traits are known; no caller needs a `Send` bound spelled out.
#[allow(async_fn_in_trait)]
pub trait HubTestExt {
    /// A new tenant named `t<short id>`.
    async fn new_tenant(&self) -> Result<Namespace> {
        self.create_namespace(&format!("t{}", short_id())).await
    }

    /// A new tenant named `name`.
    async fn create_namespace(&self, name: &str) -> Result<Namespace>;

    /// A new Agent `a<short id>` of `harness_kind` and these images in
    /// `tenant`, placed on `cluster`.
    async fn new_agent_with_images(
        &self,
        tenant: &str,
        cluster: &str,
        harness_kind: &str,
        harness_image: &str,
        gateway_image: &str,
    ) -> Result<Agent>;

    /// [`Self::new_agent_with_images`] with the test images.
    async fn new_agent(&self, tenant: &str, cluster: &str, harness_kind: &str) -> Result<Agent> {
        self.new_agent_with_images(
            tenant,
            cluster,
            harness_kind,
            HARNESS_IMAGE,
            &gateway_image(),
        )
        .await
    }

    /// A tenant with one Agent placed on `cluster`.
    async fn tenant_with_agent(
        &self,
        cluster: &str,
        harness_kind: &str,
    ) -> Result<(Namespace, Agent)> {
        self.tenant_with_images(cluster, harness_kind, HARNESS_IMAGE, &gateway_image())
            .await
    }

    /// A tenant with one Agent of these images placed on `cluster`.
    async fn tenant_with_images(
        &self,
        cluster: &str,
        harness_kind: &str,
        harness_image: &str,
        gateway_image: &str,
    ) -> Result<(Namespace, Agent)> {
        let ns = self.new_tenant().await?;
        let agent = self
            .new_agent_with_images(
                &ns.name,
                cluster,
                harness_kind,
                harness_image,
                gateway_image,
            )
            .await?;
        Ok((ns, agent))
    }

    /// Reads Agent `agent`, changes its spec with `edit` and writes it back
    /// (compare-and-swap on the version read).
    async fn edit_spec(
        &self,
        ns: &str,
        agent: &str,
        edit: impl FnOnce(&mut AgentSpec),
    ) -> Result<Agent>;

    /// Waits (bounded by [`PHASE_WAIT`]) for revision `n` to reach `phase`;
    /// fails at once if it fails.
    async fn wait_phase(
        &self,
        ns: &str,
        agent: &str,
        n: i64,
        phase: RevisionPhase,
    ) -> Result<AgentRevision>;

    /// Waits (bounded) for cluster `cluster` to be online.
    async fn wait_online(&self, cluster: &str, within: Duration) -> Result<Cluster>;
}

impl HubTestExt for HubClient {
    async fn create_namespace(&self, name: &str) -> Result<Namespace> {
        Ok(self
            .call(Method::POST, "/namespaces", Some(json!({ "name": name })))
            .await?)
    }

    async fn new_agent_with_images(
        &self,
        tenant: &str,
        cluster: &str,
        harness_kind: &str,
        harness_image: &str,
        gateway_image: &str,
    ) -> Result<Agent> {
        Ok(self
            .call(
                Method::POST,
                &format!("/namespaces/{tenant}/agents"),
                Some(json!({
                    "name": format!("a{}", short_id()),
                    "spec": {
                        "harnessKind": harness_kind,
                        "image": harness_image,
                        "gatewayImage": gateway_image,
                        "placement": { "cluster": cluster },
                        "requirementLabels": { "example.com/pool": "general" }
                    }
                })),
            )
            .await?)
    }

    async fn edit_spec(
        &self,
        ns: &str,
        agent: &str,
        edit: impl FnOnce(&mut AgentSpec),
    ) -> Result<Agent> {
        let current = self.agent(ns, agent).await?;
        let mut spec = current.spec.clone();
        edit(&mut spec);
        Ok(self
            .call(
                Method::PUT,
                &format!("/namespaces/{ns}/agents/{agent}"),
                Some(json!({ "spec": spec, "version": current.version })),
            )
            .await?)
    }

    async fn wait_phase(
        &self,
        ns: &str,
        agent: &str,
        n: i64,
        phase: RevisionPhase,
    ) -> Result<AgentRevision> {
        let r = until(
            PHASE_WAIT,
            &format!("{agent} revision {n} {phase:?}"),
            || async {
                let r = self.revision(ns, agent, n).await?;
                Ok((r.phase == phase || r.phase == RevisionPhase::Failed).then_some(r))
            },
        )
        .await?;
        ensure!(
            r.phase == phase,
            "{agent} revision {n} is {:?} ({:?}), wanted {phase:?}",
            r.phase,
            r.reason
        );
        Ok(r)
    }

    async fn wait_online(&self, cluster: &str, within: Duration) -> Result<Cluster> {
        until(within, &format!("{cluster} online"), || async {
            let c = self.cluster(cluster).await?;
            Ok((c.connection_state == ConnectionState::Online).then_some(c))
        })
        .await
    }
}
