//! Resolves a `TunnelOpen` to a Ready Harness endpoint, from what the spoke
//! itself applied and what the cluster says: the target must be a Harness
//! this spoke applied (and has not stopped), its Service must be the one it
//! created for that revision, and the address comes from that Service's
//! controller-managed EndpointSlices, Ready endpoints of Pods only.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clawfed_proto::labels;
use clawfed_proto::link::v1 as pb;
use clawfed_proto::tunnel::reason;
use clawfed_proto::work::target::Target;
use clawfed_proto::work::{generation, harness};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ListParams};
use tokio::net::TcpStream;

use super::{HarnessDialer, Refusal};
use crate::exec::Executor;

/// How long a resolved endpoint is reused (a failed connect drops it).
const ENDPOINT_TTL: Duration = Duration::from_secs(2);
/// EndpointSlices made by the control plane carry this label value.
const SLICE_MANAGER: &str = "endpointslice-controller.k8s.io";

/// The production dialer.
pub struct KubeHarnessDialer {
    client: Client,
    executor: Arc<Executor>,
    cache: Mutex<HashMap<(String, String), (Instant, SocketAddr)>>,
}

impl std::fmt::Debug for KubeHarnessDialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeHarnessDialer").finish_non_exhaustive()
    }
}

fn not_managed(message: String) -> Refusal {
    Refusal::new(reason::NOT_MANAGED, message)
}

fn kube_refusal(what: &str, e: kube::Error) -> Refusal {
    Refusal::new(reason::SPOKE_ERROR, format!("{what}: {e}"))
}

/// Addresses no Pod endpoint has; never dialed.
fn dialable(ip: IpAddr) -> bool {
    let special_v4 = matches!(ip, IpAddr::V4(v4) if v4.is_link_local() || v4.is_broadcast());
    !(ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || special_v4)
}

impl KubeHarnessDialer {
    pub fn new(client: Client, executor: Arc<Executor>) -> Self {
        Self {
            client,
            executor,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), (Instant, SocketAddr)>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The endpoint of `open`'s Harness in `namespace`.
    pub async fn resolve(
        &self,
        namespace: &str,
        agent: &str,
        revision: i64,
        open: &pb::TunnelOpen,
    ) -> Result<SocketAddr, Refusal> {
        let name = harness::object_name(agent, revision);
        let svc = Api::<Service>::namespaced(self.client.clone(), namespace)
            .get_opt(&name)
            .await
            .map_err(|e| kube_refusal("get the Harness Service", e))?
            .ok_or_else(|| not_managed(format!("no Harness Service {namespace}/{name}")))?;
        let meta = &svc.metadata;
        let managed = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::MANAGED_BY))
            .is_some_and(|v| v == labels::MANAGER);
        let revision_id = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::REVISION_ID_ANNOTATION));
        if !managed || revision_id != Some(&open.revision_id) {
            return Err(not_managed(format!(
                "Service {namespace}/{name} is not the Harness of revision {}",
                open.revision_id
            )));
        }
        let port = svc
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_ref())
            .and_then(|ports| ports.iter().find(|p| p.port == open.port))
            .ok_or_else(|| {
                not_managed(format!(
                    "Harness Service {namespace}/{name} has no port {}",
                    open.port
                ))
            })?;
        let port_name = port.name.clone();
        let selector = format!(
            "kubernetes.io/service-name={name},endpointslice.kubernetes.io/managed-by={SLICE_MANAGER}"
        );
        let slices = Api::<EndpointSlice>::namespaced(self.client.clone(), namespace)
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| kube_refusal("list the Harness EndpointSlices", e))?;
        let mut candidates = Vec::new();
        for slice in &slices.items {
            let Some(number) = slice
                .ports
                .iter()
                .flatten()
                .find(|p| p.name == port_name)
                .and_then(|p| p.port)
            else {
                continue;
            };
            for ep in slice.endpoints.iter().flatten() {
                let c = ep.conditions.as_ref();
                // The API says an unset `ready` means ready; terminating
                // endpoints take no new connections.
                let ready = c.and_then(|c| c.ready).unwrap_or(true)
                    && !c.and_then(|c| c.terminating).unwrap_or(false);
                let pod = ep.target_ref.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("Pod")
                        && r.namespace.as_deref().is_none_or(|n| n == namespace)
                });
                if !(ready && pod) {
                    continue;
                }
                let Some(ip) = ep.addresses.first().and_then(|a| a.parse::<IpAddr>().ok()) else {
                    continue;
                };
                if dialable(ip) {
                    candidates.push(SocketAddr::new(ip, number as u16));
                }
            }
        }
        if candidates.is_empty() {
            return Err(Refusal::new(
                reason::NO_READY_ENDPOINT,
                format!("Harness Service {namespace}/{name} has no Ready endpoint"),
            ));
        }
        // Spread connections when a provider runs several endpoints.
        Ok(candidates[rand::random_range(0..candidates.len())])
    }
}

#[async_trait]
impl HarnessDialer for KubeHarnessDialer {
    async fn dial(&self, open: &pb::TunnelOpen) -> Result<TcpStream, Refusal> {
        let Ok(Target::Harness {
            agent, revision, ..
        }) = open.target.parse::<Target>()
        else {
            return Err(not_managed(format!(
                "{} is not a Harness target",
                open.target
            )));
        };
        let (namespace, applied) = self
            .executor
            .recorded(&open.target)
            .ok_or_else(|| not_managed(format!("this spoke has not applied {}", open.target)))?;
        if applied != generation::HARNESS_APPLY {
            return Err(not_managed(format!(
                "the Harness of {} is stopped or retired",
                open.target
            )));
        }
        let key = (open.target.clone(), open.revision_id.clone());
        let cached = self
            .cache()
            .get(&key)
            .filter(|(at, _)| at.elapsed() < ENDPOINT_TTL)
            .map(|(_, a)| *a);
        if let Some(addr) = cached {
            if let Ok(s) = TcpStream::connect(addr).await {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            self.cache().remove(&key);
        }
        let addr = self.resolve(&namespace, &agent, revision, open).await?;
        let stream = TcpStream::connect(addr).await.map_err(|e| {
            Refusal::new(
                reason::DIAL_FAILED,
                format!("connect to the Harness at {addr}: {e}"),
            )
        })?;
        let _ = stream.set_nodelay(true);
        self.cache().insert(key, (Instant::now(), addr));
        Ok(stream)
    }
}
