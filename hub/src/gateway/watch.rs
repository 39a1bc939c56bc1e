//! Event-driven Gateway readiness (issue 17): one watch of the Gateway
//! Deployments and one of the Gateway Pods across every tenant's managed
//! Gateway namespace (label-selected: managed by clawfed, workload role
//! `gateway`), each kept in a reflector store. An Agent is known by its
//! Gateway namespace and name: two tenants may both have `support`.
//!
//! - [`super::Gateways::is_ready`] answers from the stores once both are in
//!   sync, with the same verdict ([`super::ready::evaluate`]); before that,
//!   and after a watch error until the watch delivers again, it reads the
//!   API as before.
//! - Each Agent whose Gateway turns Ready (for the revision its Deployment
//!   runs) is told to a [`ReadyListener`] at once: the pipeline's wake-up,
//!   so a revision waiting only for its Gateway does not wait for a poll,
//!   and the control apiserver is not read once per waiting revision per
//!   second.
//!
//! # Layout
//! - [`Index`]: the stores' view of one Agent's Gateway (no I/O).
//! - [`Transitions`]: which Agents turned Ready since the last look (pure,
//!   tested by feeding typed objects through the stores).
//! - [`GatewayWatch::start`]: the watch task and the task that tells the
//!   listener.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use clawfed_proto::labels;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::GATEWAY_ROLE;
use super::objects;
use super::ready::{self, Readiness};

/// An Agent's Gateway turned Ready for `revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayReady {
    /// The tenant (namespace name) on the Gateway's labels.
    pub tenant: String,
    /// The Gateway namespace it runs in.
    pub namespace: String,
    pub agent: String,
    pub revision: i64,
}

/// Hears of Gateways turning Ready (the pipeline's trigger).
#[async_trait]
pub trait ReadyListener: Send + Sync + 'static {
    async fn gateway_ready(&self, ready: GatewayReady);
}

/// The label selector of the Gateway Deployments and Pods the hub manages.
pub fn selector() -> String {
    format!(
        "{}={},{}={GATEWAY_ROLE}",
        labels::MANAGED_BY,
        labels::MANAGER,
        labels::WORKLOAD_ROLE
    )
}

fn label<'a, K: Resource>(obj: &'a K, key: &str) -> Option<&'a str> {
    obj.meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// One Agent's Gateway: its Gateway namespace and the Agent's name.
pub type GatewayKey = (String, String);

fn key_of<K: Resource>(obj: &K) -> Option<GatewayKey> {
    Some((
        obj.meta().namespace.clone()?,
        label(obj, labels::AGENT)?.to_owned(),
    ))
}

/// The stores' view of the Gateway namespaces.
#[derive(Clone)]
pub struct Index {
    deployments: Store<Deployment>,
    pods: Store<Pod>,
}

impl Index {
    /// A view over these stores.
    pub fn new(deployments: Store<Deployment>, pods: Store<Pod>) -> Self {
        Self { deployments, pods }
    }

    fn deployment(&self, (namespace, agent): &GatewayKey) -> Option<Arc<Deployment>> {
        self.deployments
            .get(&ObjectRef::new(&objects::names(agent).gateway).within(namespace))
    }

    fn pods(&self, key: &GatewayKey) -> Vec<Pod> {
        self.pods
            .state()
            .into_iter()
            .filter(|p| key_of(p.as_ref()).as_ref() == Some(key))
            .map(|p| p.as_ref().clone())
            .collect()
    }

    /// The verdict for the Gateway `key` serving `revision`.
    pub fn readiness(&self, key: &GatewayKey, revision: i64) -> Readiness {
        ready::evaluate(revision, self.deployment(key).as_deref(), &self.pods(key))
    }

    /// The revision `key`'s Deployment runs, when it is Ready for it.
    fn ready_now(&self, key: &GatewayKey) -> Option<GatewayReady> {
        let d = self.deployment(key)?;
        let revision = d
            .spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref())
            .and_then(|l| l.get(labels::REVISION))
            .and_then(|r| r.parse::<i64>().ok())?;
        let tenant = label(d.as_ref(), labels::TENANT)?.to_owned();
        ready::evaluate(revision, Some(d.as_ref()), &self.pods(key))
            .is_ready()
            .then(|| GatewayReady {
                tenant,
                namespace: key.0.clone(),
                agent: key.1.clone(),
                revision,
            })
    }

    /// Every Gateway with a Deployment or Pod in the stores.
    fn agents(&self) -> BTreeSet<GatewayKey> {
        let deployments = self.deployments.state();
        let pods = self.pods.state();
        deployments
            .iter()
            .filter_map(|d| key_of(d.as_ref()))
            .chain(pods.iter().filter_map(|p| key_of(p.as_ref())))
            .collect()
    }
}

/// Which Agents turned Ready: the revision each was last seen Ready for.
/// A Gateway that stays Ready across many events is told once; one that
/// went unready and is Ready again, or is Ready for a new revision, is told
/// again.
#[derive(Debug, Default)]
pub struct Transitions {
    ready: HashMap<GatewayKey, i64>,
}

impl Transitions {
    /// Looks at `agents` again; returns those that turned Ready.
    pub fn look(
        &mut self,
        index: &Index,
        agents: impl IntoIterator<Item = GatewayKey>,
    ) -> Vec<GatewayReady> {
        let mut turned = Vec::new();
        for key in agents {
            match index.ready_now(&key) {
                Some(now) => {
                    if self.ready.insert(key, now.revision) != Some(now.revision) {
                        turned.push(now);
                    }
                }
                None => {
                    self.ready.remove(&key);
                }
            }
        }
        turned
    }

    /// Looks at every Agent in the stores and every one seen Ready before
    /// (after a (re)list: some may be gone).
    pub fn look_all(&mut self, index: &Index) -> Vec<GatewayReady> {
        let mut agents = index.agents();
        agents.extend(self.ready.keys().cloned());
        self.look(index, agents)
    }
}

/// What one watch event means here.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// An object of this Gateway changed or went (`None`: not a Gateway's).
    Changed(Option<GatewayKey>),
    /// A (re)list completed: the store holds the whole namespace.
    Synced,
    /// The watch failed (it retries with backoff): the store may be stale.
    Failed(String),
    /// A (re)list is under way: the store is swapped in at its end.
    Listing,
}

fn seen<K: Resource>(event: Result<watcher::Event<K>, watcher::Error>) -> Seen {
    match event {
        Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => Seen::Changed(key_of(&o)),
        Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => Seen::Listing,
        Ok(watcher::Event::InitDone) => Seen::Synced,
        Err(e) => Seen::Failed(e.to_string()),
    }
}

/// The two stores and whether each can be trusted now.
#[derive(Clone)]
pub struct GatewayWatch {
    index: Index,
    /// Deployments, Pods: in sync (listed, and no error since the last
    /// event).
    synced: Arc<[AtomicBool; 2]>,
}

const DEPLOYMENTS: usize = 0;
const PODS: usize = 1;

impl GatewayWatch {
    /// A watch over `index` whose stores are not in sync yet.
    fn over(index: Index) -> Self {
        Self {
            index,
            synced: Arc::new([AtomicBool::new(false), AtomicBool::new(false)]),
        }
    }

    /// Both stores are in sync.
    pub fn synced(&self) -> bool {
        self.synced.iter().all(|s| s.load(Ordering::Acquire))
    }

    /// The verdict from the stores; `None` while they are not in sync (the
    /// caller reads the API instead).
    pub fn readiness(&self, namespace: &str, agent: &str, revision: i64) -> Option<Readiness> {
        self.synced().then(|| {
            self.index
                .readiness(&(namespace.to_owned(), agent.to_owned()), revision)
        })
    }

    /// Applies what one event means to the sync state; returns the Agents
    /// to look at again (none while the stores are not both in sync).
    fn on(&self, which: usize, seen: Seen, transitions: &mut Transitions) -> Vec<GatewayReady> {
        let mark = |v: bool| self.synced[which].store(v, Ordering::Release);
        match seen {
            Seen::Listing | Seen::Changed(None) => Vec::new(),
            Seen::Failed(error) => {
                mark(false);
                tracing::warn!(
                    kind = if which == DEPLOYMENTS { "Deployment" } else { "Pod" },
                    error = %error,
                    "gateway.watch_error"
                );
                Vec::new()
            }
            Seen::Changed(Some(agent)) => {
                // The watch delivers again (resumed where it stopped).
                mark(true);
                if !self.synced() {
                    return Vec::new();
                }
                transitions.look(&self.index, [agent])
            }
            Seen::Synced => {
                let was = self.synced();
                mark(true);
                if !self.synced() {
                    return Vec::new();
                }
                if !was {
                    tracing::info!("gateway.watch_synced");
                }
                transitions.look_all(&self.index)
            }
        }
    }

    /// Starts watching every namespace as `client` (label-selected: the
    /// Gateway objects only): the watch, and the task that tells
    /// `listener` of each Gateway turning Ready. Both end on `shutdown`.
    /// Returns the watch (for readiness) and the future to run.
    pub fn start(
        client: Client,
        listener: Arc<dyn ReadyListener>,
        shutdown: CancellationToken,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (deployment_store, deployment_writer) = reflector::store::<Deployment>();
        let (pod_store, pod_writer) = reflector::store::<Pod>();
        let watch = Self::over(Index::new(deployment_store, pod_store));
        let config = watcher::Config::default().labels(&selector());
        // Managed fields are never read: not kept in memory.
        let deployments = watcher(Api::<Deployment>::all(client.clone()), config.clone())
            .default_backoff()
            .modify(|d| d.managed_fields_mut().clear())
            .reflect(deployment_writer)
            .map(|e| (DEPLOYMENTS, seen(e)));
        let pods = watcher(Api::<Pod>::all(client), config)
            .default_backoff()
            .modify(|p| p.managed_fields_mut().clear())
            .reflect(pod_writer)
            .map(|e| (PODS, seen(e)));
        let (tx, mut rx) = mpsc::unbounded_channel::<GatewayReady>();
        let me = watch.clone();
        let events = async move {
            let mut events = std::pin::pin!(futures::stream::select(deployments, pods));
            let mut transitions = Transitions::default();
            loop {
                let next = tokio::select! {
                    () = shutdown.cancelled() => break,
                    next = events.next() => next,
                };
                let Some((which, seen)) = next else { break };
                for ready in me.on(which, seen, &mut transitions) {
                    // At most one per Agent turning Ready; the receiver
                    // ends only after this loop.
                    let _ = tx.send(ready);
                }
            }
            tracing::info!("gateway.watch_stopped");
        };
        // Told apart from the watch so store reads of the listener never
        // hold the reflectors back.
        let wakes = async move {
            while let Some(ready) = rx.recv().await {
                tracing::debug!(tenant = %ready.tenant, agent = %ready.agent, revision = ready.revision, "gateway.turned_ready");
                listener.gateway_ready(ready).await;
            }
        };
        (watch, async move {
            tokio::join!(events, wakes);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::runtime::reflector::store::Writer;
    use std::collections::BTreeMap;

    const NS: &str = "oce-gateways-000000000000000000000001";
    const OTHER_NS: &str = "oce-gateways-000000000000000000000002";

    fn gateway_labels(agent: &str, revision: Option<i64>) -> BTreeMap<String, String> {
        let mut l = objects::owner_labels("team-a", agent);
        if let Some(r) = revision {
            l.insert(labels::REVISION.into(), r.to_string());
        }
        l
    }

    /// The Gateway Deployment of `agent` at `revision`, rolled out and
    /// Available or not.
    fn deployment(agent: &str, revision: i64, available: bool) -> Deployment {
        let labels = Some(gateway_labels(agent, Some(revision)));
        let mut d = ready::tests::rolled_out(labels.clone(), revision, revision, available);
        d.metadata.name = Some(objects::names(agent).gateway);
        d.metadata.namespace = Some(NS.into());
        d.metadata.labels = labels;
        d
    }

    fn pod(agent: &str, revision: i64, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("{agent}-gateway-r{revision}")),
                namespace: Some(NS.into()),
                labels: Some(gateway_labels(agent, Some(revision))),
                ..Default::default()
            },
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The watch, fed the way the reflector feeds it: the event reaches the
    /// store first, then the watch loop.
    struct Fed {
        watch: GatewayWatch,
        deployments: Writer<Deployment>,
        pods: Writer<Pod>,
        transitions: Transitions,
    }

    impl Fed {
        fn new() -> Self {
            let (ds, deployments) = reflector::store::<Deployment>();
            let (ps, pods) = reflector::store::<Pod>();
            Self {
                watch: GatewayWatch::over(Index::new(ds, ps)),
                deployments,
                pods,
                transitions: Transitions::default(),
            }
        }

        fn deployment(&mut self, e: watcher::Event<Deployment>) -> Vec<GatewayReady> {
            self.deployments.apply_watcher_event(&e);
            self.watch
                .on(DEPLOYMENTS, seen(Ok(e)), &mut self.transitions)
        }

        fn pod(&mut self, e: watcher::Event<Pod>) -> Vec<GatewayReady> {
            self.pods.apply_watcher_event(&e);
            self.watch.on(PODS, seen(Ok(e)), &mut self.transitions)
        }

        /// Both watches listed an empty namespace.
        fn synced(mut self) -> Self {
            for e in [watcher::Event::Init, watcher::Event::InitDone] {
                assert!(self.deployment(e).is_empty());
            }
            for e in [watcher::Event::Init, watcher::Event::InitDone] {
                assert!(self.pod(e).is_empty());
            }
            self
        }
    }

    fn turned(agent: &str, revision: i64) -> Vec<GatewayReady> {
        vec![GatewayReady {
            tenant: "team-a".into(),
            namespace: NS.into(),
            agent: agent.into(),
            revision,
        }]
    }

    #[test]
    fn the_event_that_makes_a_gateway_ready_wakes_its_agent_once() {
        use watcher::Event::Apply;
        let mut f = Fed::new().synced();
        assert!(f.deployment(Apply(deployment("a1", 1, false))).is_empty());
        assert!(
            f.pod(Apply(pod("a1", 1, false))).is_empty(),
            "Pod not Ready"
        );
        assert_eq!(
            f.watch.readiness(NS, "a1", 1),
            Some(Readiness::NotReady(ready::NotReady::Unavailable))
        );
        // The Pod turns Ready first, then the Deployment Available: the
        // second event is the one that makes the verdict Ready.
        assert!(f.pod(Apply(pod("a1", 1, true))).is_empty());
        assert_eq!(
            f.deployment(Apply(deployment("a1", 1, true))),
            turned("a1", 1)
        );
        assert_eq!(f.watch.readiness(NS, "a1", 1), Some(Readiness::Ready));
        // Further events of a Gateway that stays Ready wake nothing, nor do
        // events of other Agents.
        assert!(f.pod(Apply(pod("a1", 1, true))).is_empty());
        assert!(f.deployment(Apply(deployment("a2", 1, false))).is_empty());
        // Unready, then Ready again: told again.
        assert!(f.pod(Apply(pod("a1", 1, false))).is_empty());
        assert_eq!(f.pod(Apply(pod("a1", 1, true))), turned("a1", 1));
        // A new revision (Recreate: the old Pod goes, the new one comes).
        assert!(f.deployment(Apply(deployment("a1", 2, true))).is_empty());
        assert!(f.pod(watcher::Event::Delete(pod("a1", 1, true))).is_empty());
        assert_eq!(f.pod(Apply(pod("a1", 2, true))), turned("a1", 2));
        assert_eq!(
            f.watch.readiness(NS, "a1", 1),
            Some(Readiness::NotReady(ready::NotReady::OtherRevisionDeployed))
        );
    }

    #[test]
    fn nothing_is_told_or_answered_before_both_stores_are_in_sync() {
        use watcher::Event::{Init, InitApply, InitDone};
        let mut f = Fed::new();
        assert_eq!(
            f.watch.readiness(NS, "a1", 1),
            None,
            "the API is read instead"
        );
        for e in [Init, InitApply(deployment("a1", 1, true)), InitDone] {
            assert!(f.deployment(e).is_empty());
        }
        assert_eq!(f.watch.readiness(NS, "a1", 1), None, "Pods not listed yet");
        assert!(f.pod(Init).is_empty());
        assert!(f.pod(InitApply(pod("a1", 1, true))).is_empty());
        // The list completes: a Gateway Ready already is told (its revision
        // may be waiting).
        assert_eq!(f.pod(InitDone), turned("a1", 1));
        assert_eq!(f.watch.readiness(NS, "a1", 1), Some(Readiness::Ready));
    }

    #[test]
    fn after_a_watch_error_the_api_is_read_until_the_watch_delivers_again() {
        use watcher::Event::Apply;
        let mut f = Fed::new().synced();
        assert!(f.deployment(Apply(deployment("a1", 1, true))).is_empty());
        let failed = Seen::Failed("connection reset".into());
        assert!(f.watch.on(PODS, failed, &mut f.transitions).is_empty());
        assert_eq!(f.watch.readiness(NS, "a1", 1), None);
        // The Pod watch resumes with the event it missed.
        assert_eq!(f.pod(Apply(pod("a1", 1, true))), turned("a1", 1));
        assert_eq!(f.watch.readiness(NS, "a1", 1), Some(Readiness::Ready));
    }

    #[test]
    fn two_tenants_gateways_of_one_agent_name_are_told_apart() {
        use watcher::Event::Apply;
        let mut f = Fed::new().synced();
        let mut other = deployment("a1", 1, true);
        other.metadata.namespace = Some(OTHER_NS.into());
        let mut other_pod = pod("a1", 1, true);
        other_pod.metadata.namespace = Some(OTHER_NS.into());
        assert!(f.deployment(Apply(other)).is_empty());
        let told = f.pod(Apply(other_pod));
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].namespace, OTHER_NS);
        assert_eq!(f.watch.readiness(OTHER_NS, "a1", 1), Some(Readiness::Ready));
        // The other tenant's Ready Gateway says nothing of this one's.
        assert_eq!(
            f.watch.readiness(NS, "a1", 1),
            Some(Readiness::NotReady(ready::NotReady::NoDeployment))
        );
        assert!(f.deployment(Apply(deployment("a1", 1, false))).is_empty());
        assert!(f.pod(Apply(pod("a1", 1, true))).is_empty());
        assert_eq!(
            f.deployment(Apply(deployment("a1", 1, true))),
            turned("a1", 1)
        );
    }

    #[test]
    fn the_selector_names_every_gateway_object_and_nothing_else() {
        let s = selector();
        let owner = objects::owner_labels("team-a", "a1");
        for part in s.split(',') {
            let (k, v) = part.split_once('=').expect("k=v");
            assert_eq!(owner.get(k).map(String::as_str), Some(v), "{s}");
        }
        assert!(s.contains(&format!("{}={GATEWAY_ROLE}", labels::WORKLOAD_ROLE)));
    }
}
