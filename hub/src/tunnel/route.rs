//! Which Harness a Gateway's transport credential may reach: exactly its own
//! revision's, on the cluster that revision runs on, while the revision is
//! meant to serve. Resolved from the store (the credential's SHA-256 maps
//! to a revision), cached briefly so a busy Gateway does not cost a few
//! queries per connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clawfed_proto::tunnel::{harness_authority, reason};
use clawfed_proto::work::{harness, target};

use super::Refusal;
use crate::gateway::transport::token_hash;
use crate::link::report::{self, WorkResultReport};
use crate::model::{AgentRevision, RevisionPhase};
use crate::store::{Store, StoreError};

/// Where a credential's tunnels go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub revision_id: String,
    pub tenant: String,
    pub agent: String,
    pub revision: i64,
    pub cluster_id: String,
    pub cluster_name: String,
    /// The Harness work target on that cluster.
    pub target: String,
    /// The only authority the credential may CONNECT to.
    pub authority: String,
    pub port: i32,
}

/// A span named `$name` with the route's agent, revision and cluster; a
/// macro because a span's name must be a constant at its call site.
macro_rules! route_span {
    ($name:literal, $route:expr) => {
        tracing::info_span!(
            $name,
            agent = %$route.agent,
            revision = $route.revision,
            cluster = %$route.cluster_name
        )
    };
}
pub(crate) use route_span;

/// Entries kept at most; the cache is cleared when it would grow past this
/// (only valid credentials are cached, so this bounds a busy fleet, not an
/// attacker).
const MAX_CACHED: usize = 16_384;

/// Resolves credentials to routes.
pub struct Routes {
    store: Arc<dyn Store>,
    ttl: std::time::Duration,
    /// The port Harnesses serve on (the installation's `harnessPort`).
    harness_port: i32,
    cache: Mutex<HashMap<String, (Instant, Route)>>,
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routes")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// Phases in which a revision's Harness is meant to run and may be reached
/// (the pipeline probes the path before activation).
fn serving(phase: RevisionPhase) -> bool {
    matches!(
        phase,
        RevisionPhase::Preparing | RevisionPhase::WaitingReady | RevisionPhase::Active
    )
}

/// Something the route needs is gone (its tenant or cluster): the revision
/// no longer serves. Any other store failure is the hub's problem, not the
/// Gateway's: 503, retry.
fn store_refusal(e: StoreError) -> Refusal {
    match e {
        StoreError::NotFound { .. } => Refusal::new(reason::REVISION_NOT_SERVING, e.to_string()),
        e => Refusal::new(reason::HUB_UNAVAILABLE, format!("store: {e}")),
    }
}

impl Routes {
    /// The store routes are read from.
    pub fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    pub fn new(store: Arc<dyn Store>, ttl: std::time::Duration) -> Self {
        Self {
            store,
            ttl,
            harness_port: harness::DEFAULT_PORT,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Routes to Harnesses serving on `port` (the port every Harness work
    /// item and Gateway of this installation names).
    pub fn with_harness_port(mut self, port: i32) -> Self {
        self.harness_port = port;
        self
    }

    fn cached(&self, hash: &str) -> Option<Route> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .get(hash)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, r)| r.clone())
    }

    /// The route of `token` if it may CONNECT to `authority`.
    pub async fn resolve(&self, token: &str, authority: &str) -> Result<Route, Refusal> {
        let route = self.resolve_own(token).await?;
        if route.authority != authority {
            return Err(Refusal::new(
                reason::FORBIDDEN_TARGET,
                format!(
                    "the credential of {}/{} revision {} may reach only {}, not {authority}",
                    route.tenant, route.agent, route.revision, route.authority
                ),
            ));
        }
        Ok(route)
    }

    /// The route of `token`: its own revision's Harness.
    pub async fn resolve_own(&self, token: &str) -> Result<Route, Refusal> {
        let hash = token_hash(token);
        let route = match self.cached(&hash) {
            Some(r) => r,
            None => {
                let r = self.lookup(&hash).await?;
                let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                if cache.len() >= MAX_CACHED {
                    cache.clear();
                }
                cache.insert(hash, (Instant::now(), r.clone()));
                r
            }
        };
        Ok(route)
    }

    /// The route of Agent `tenant/agent`'s newest serving revision (its
    /// Harness), with the Agent's id (what its app-server token derives
    /// from). With exclusive replacement only one of its Harnesses runs on
    /// a cluster at a time, and a new Gateway wants the new one.
    /// `authorized` judges the caller by the Agent's id before anything
    /// else about the Agent is told: an unknown Agent and a wrong token get
    /// the same refusal.
    pub async fn resolve_agent(
        &self,
        tenant: &str,
        agent: &str,
        authorized: impl FnOnce(&str) -> bool,
    ) -> Result<Route, Refusal> {
        let unknown = || Refusal::new(reason::UNAUTHENTICATED, "unknown Agent or token");
        let a = match self.store.get_agent(tenant, agent).await {
            Ok(a) => a,
            Err(StoreError::NotFound { .. }) => return Err(unknown()),
            Err(e) => return Err(store_refusal(e)),
        };
        if !authorized(&a.id) {
            return Err(unknown());
        }
        let newest = self
            .store
            .list_revisions(tenant, agent)
            .await
            .map_err(store_refusal)?
            .into_iter()
            .filter(|r| serving(r.phase))
            .max_by_key(|r| r.number)
            .ok_or_else(|| {
                Refusal::new(
                    reason::REVISION_NOT_SERVING,
                    format!("{tenant}/{agent} has no serving revision"),
                )
            })?;
        route_of(self.store.as_ref(), &newest, self.harness_port).await
    }

    async fn lookup(&self, hash: &str) -> Result<Route, Refusal> {
        let unknown = || Refusal::new(reason::UNAUTHENTICATED, "unknown transport credential");
        let revision_id = self
            .store
            .revision_by_transport_hash(hash)
            .await
            .map_err(store_refusal)?
            .ok_or_else(unknown)?;
        let rev = match self.store.get_revision_by_id(&revision_id).await {
            Ok(r) => r,
            Err(StoreError::NotFound { .. }) => return Err(unknown()),
            Err(e) => return Err(store_refusal(e)),
        };
        route_of(self.store.as_ref(), &rev, self.harness_port).await
    }
}

/// Where `rev`'s tunnels go, while it serves: its cluster, its Harness
/// target and the only authority it may reach.
/// `port` is the installation's Harness port.
pub async fn route_of(store: &dyn Store, rev: &AgentRevision, port: i32) -> Result<Route, Refusal> {
    let not_serving = |why: String| Refusal::new(reason::REVISION_NOT_SERVING, why);
    if !serving(rev.phase) {
        return Err(not_serving(format!(
            "{}/{} revision {} is {}",
            rev.namespace,
            rev.agent,
            rev.number,
            rev.phase.as_str()
        )));
    }
    let Some(cluster_name) = rev.resolved_cluster.clone() else {
        return Err(not_serving(format!(
            "{}/{} revision {} is not placed on a cluster yet",
            rev.namespace, rev.agent, rev.number
        )));
    };
    let ns = store
        .get_namespace(&rev.namespace)
        .await
        .map_err(store_refusal)?;
    let cluster = store
        .get_cluster(&cluster_name)
        .await
        .map_err(store_refusal)?;
    // The physical namespace: what the spoke reported ensuring (a legacy
    // or adopted name), else the `oce-` name, as the Gateway was told.
    let ensured = store
        .get_report(&cluster.id, &target::namespace(&ns.id), report::WORK_RESULT)
        .await
        .map_err(store_refusal)?
        .and_then(|r| serde_json::from_value::<WorkResultReport>(r.body).ok());
    let physical = ensured
        .as_ref()
        .and_then(WorkResultReport::ensured_namespace)
        .unwrap_or(&ns.data_plane_namespace);
    Ok(Route {
        revision_id: rev.id.clone(),
        tenant: ns.name.clone(),
        agent: rev.agent.clone(),
        revision: rev.number,
        cluster_id: cluster.id,
        cluster_name,
        target: target::harness(&ns.id, &rev.agent, rev.number),
        authority: harness_authority(&rev.agent, rev.number, physical, port),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_span_names_the_agent_revision_and_cluster() {
        let route = Route {
            revision_id: "rev-1".into(),
            tenant: "t".into(),
            agent: "a".into(),
            revision: 3,
            cluster_id: "c1".into(),
            cluster_name: "east".into(),
            target: "harness/n/a/3".into(),
            authority: "a.n:8080".into(),
            port: 8080,
        };
        let span = route_span!("tunnel.pump", route);
        let meta = span.metadata().expect("a span keeps its metadata");
        assert_eq!(meta.name(), "tunnel.pump");
        let fields: Vec<&str> = meta.fields().iter().map(|f| f.name()).collect();
        assert_eq!(fields, ["agent", "revision", "cluster"]);
    }
}
