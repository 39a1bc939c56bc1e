//! The spoke's view rebuilt from the cluster, never from memory: the
//! applied generations (namespace annotations, records, older ledgers),
//! a readiness watcher per managed namespace, and the tracked revisions.

use std::collections::{BTreeMap, HashMap};

use clawfed_kube::RequestError;
use clawfed_proto::labels;
use clawfed_proto::readiness::{HARNESS_ROLE, ReadinessQuery};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::{ExecError, Executor, Recorded};
use crate::apply::{self, harness, ledger};
use crate::drift::desired::Record;
use crate::readiness::observer::StartupCheck;

impl Executor {
    /// What is applied (target -> generation), read from the cluster: the
    /// generation annotations of managed namespaces, their records and
    /// their ledgers.
    /// The first call also resumes the readiness watchers and tracked
    /// revisions (see [`Executor::resume`]).
    pub async fn applied(&self) -> Result<HashMap<String, i64>, ExecError> {
        self.resume().await?;
        let (fresh, _) = self.read_applied().await?;
        let mut rec = self.recorded_lock();
        *rec = fresh;
        Ok(rec.iter().map(|(t, (_, g))| (t.clone(), *g)).collect())
    }

    async fn managed_namespaces(&self) -> Result<Vec<Namespace>, apply::Error> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let selector = format!("{}={}", labels::MANAGED_BY, labels::MANAGER);
        Ok(api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| RequestError::new("list", "Namespace", "", "", e))?
            .items
            .into_iter()
            .filter(|ns| ns.metadata.deletion_timestamp.is_none())
            .collect())
    }

    /// What is applied, and every desired-state record read on the way.
    async fn read_applied(&self) -> Result<(Recorded, Vec<Record>), apply::Error> {
        let mut out = HashMap::new();
        let mut all = Vec::new();
        for ns in self.managed_namespaces().await? {
            let name = ns.name_any();
            let ann = ns.annotations();
            if let (Some(t), Some(g)) = (
                ann.get(labels::WORK_TARGET_ANNOTATION),
                ann.get(labels::GENERATION_ANNOTATION)
                    .and_then(|g| g.parse::<i64>().ok()),
            ) {
                out.insert(t.clone(), (name.clone(), g));
            }
            let cms = Api::<ConfigMap>::namespaced(self.client.clone(), &name);
            let secrets = Api::<Secret>::namespaced(self.client.clone(), &name);
            // The records, and the ledger entries written before them.
            let read = async {
                let ledger = ledger::load(&cms).await?;
                let records = crate::drift::desired::all(&secrets).await?;
                Ok::<_, apply::Error>((ledger, records))
            };
            match read.await {
                Ok((ledger, records)) => {
                    let entries = ledger.into_iter().chain(
                        records
                            .iter()
                            .filter_map(|r| r.applied_generation.map(|g| (r.target.clone(), g))),
                    );
                    for (t, g) in entries {
                        let newest = out.get(&t).map_or(g, |(_, have)| g.max(*have));
                        out.insert(t, (name.clone(), newest));
                    }
                    all.extend(records);
                }
                // Labelled as managed but never provisioned by this spoke (no
                // tenant binding): not ours to report.
                Err(apply::Error::Kube(e)) if e.is_forbidden() => {
                    tracing::warn!(namespace = %name, "spoke.exec.namespace_not_granted");
                }
                Err(e) => return Err(e),
            }
        }
        Ok((out, all))
    }

    /// Rebuilds the spoke's view from the cluster once (idempotent): recorded
    /// generations, a watcher per managed namespace, tracked revisions.
    /// `apply` and `applied` call it; a link may call it at start-up.
    pub async fn resume(&self) -> Result<(), ExecError> {
        self.ensure_rebuilt().await
    }

    pub(super) async fn ensure_rebuilt(&self) -> Result<(), ExecError> {
        self.rebuilt
            .get_or_try_init(|| async { self.rebuild().await.map_err(ExecError::from) })
            .await
            .map(|_| ())
    }

    /// Rebuilds the spoke's view from the cluster: recorded generations,
    /// watchers of every managed namespace, and the tracked revisions (from
    /// the annotations of their Harness Services).
    async fn rebuild(&self) -> Result<(), apply::Error> {
        let (fresh, records) = self.read_applied().await?;
        *self.recorded_lock() = fresh;
        // Failover-enabled Harnesses fence without a hub after a restart.
        self.restore_failover(&records);
        for ns in self.managed_namespaces().await? {
            let name = ns.name_any();
            self.observer.watch_namespace(&name);
            let services = Api::<Service>::namespaced(self.client.clone(), &name);
            let selector = format!(
                "{}={HARNESS_ROLE},{}={}",
                labels::WORKLOAD_ROLE,
                labels::MANAGED_BY,
                labels::MANAGER
            );
            let list = match services
                .list(&ListParams::default().labels(&selector))
                .await
            {
                Ok(l) => l,
                Err(e) if apply::is_forbidden(&e) => {
                    self.observer.unwatch_namespace(&name);
                    continue;
                }
                Err(e) => return Err(RequestError::new("list", "Service", &name, "", e).into()),
            };
            for svc in list.items {
                let (l, a) = (svc.labels(), svc.annotations());
                let (Some(agent), Some(revision), Some(target), Some(generation)) = (
                    l.get(labels::AGENT),
                    l.get(labels::REVISION),
                    a.get(labels::WORK_TARGET_ANNOTATION),
                    a.get(labels::GENERATION_ANNOTATION)
                        .and_then(|g| g.parse::<i64>().ok()),
                ) else {
                    continue;
                };
                let requirements: BTreeMap<String, String> = a
                    .get(harness::REQUIREMENTS_ANNOTATION)
                    .and_then(|j| serde_json::from_str(j).ok())
                    .unwrap_or_default();
                let query = ReadinessQuery {
                    namespace: name.clone(),
                    agent: agent.clone(),
                    revision: revision.clone(),
                    role: HARNESS_ROLE.into(),
                    requirement_labels: requirements.into_iter().collect(),
                };
                let revision_id = a
                    .get(labels::REVISION_ID_ANNOTATION)
                    .cloned()
                    .unwrap_or_default();
                // A requirement that cannot be read back still requires a
                // status: with no admitted selection, only an owned one.
                let startup = a.get(harness::STARTUP_ANNOTATION).map(|j| {
                    let s = serde_json::from_str::<harness::StartupAnnotation>(j).unwrap_or_else(
                        |_| harness::StartupAnnotation {
                            selections: Vec::new(),
                            port: clawfed_proto::work::harness::DEFAULT_PORT,
                        },
                    );
                    StartupCheck {
                        selections: s.selections,
                        port: s.port,
                    }
                });
                self.observer
                    .track_with_startup(query, target, generation, &revision_id, startup)
                    .await;
            }
        }
        tracing::info!(
            namespaces = self.observer.namespaces().len(),
            "spoke.exec.rebuilt"
        );
        Ok(())
    }
}
