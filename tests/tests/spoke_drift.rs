//! Drift repair against a real execution cluster (`e2e/cluster.sh up
//! exec-a`), with the spoke as its own ServiceAccount (the RBAC of
//! deploy/spoke): what someone else deletes or changes among the objects the
//! spoke applied is put back and reported; fields the spoke does not own
//! stay; a controller fighting the spoke is rate-limited and reported.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clawfed_proto::labels;
use clawfed_proto::link::v1::{Report, Work, report};
use clawfed_proto::work::{
    ExecutionMode, HarnessWork, NamespaceWork, SecretData, WorkSpec, Workspace, target,
};
use clawfed_spoke::apply::namespace as nsapply;
use clawfed_spoke::config::SpokeConfig;
use clawfed_spoke::drift::limit::Budget;
use clawfed_spoke::drift::{DriftMetrics, ObjectKey, Repairer};
use clawfed_spoke::exec::Executor;
use clawfed_tests::kube_env::{TestCluster, eventually};
use clawfed_tests::spoke_env::{
    SpokeEnv, fake_model_credential, harness_work, kwok_node_selector, tenant_names,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);
const IMAGE: &str = "registry.invalid/openclaw@sha256:abababababababababababababababababababababababababababababababab";

struct Tenant {
    tenant: String,
    id: String,
    ns: String,
}

impl Tenant {
    fn new(prefix: &str) -> Self {
        let (tenant, id, ns) = tenant_names(prefix);
        Tenant { tenant, id, ns }
    }

    fn work(target: String, generation: i64, spec: WorkSpec) -> Work {
        Work {
            sequence: 1,
            target,
            generation,
            kind: spec.kind().as_str().into(),
            spec: spec.encode(),
        }
    }

    fn ensure(&self) -> Work {
        Self::work(
            target::namespace(&self.id),
            1,
            WorkSpec::NamespaceEnsure(NamespaceWork {
                tenant: self.tenant.clone(),
                namespace_id: self.id.clone(),
                quota: BTreeMap::from([("pods".into(), "20".into())]),
                ..Default::default()
            }),
        )
    }

    fn harness(&self, agent: &str) -> HarnessWork {
        HarnessWork {
            image: IMAGE.into(),
            credential: fake_model_credential(),
            node_selector: kwok_node_selector(),
            ..harness_work(&self.tenant, &self.id, &self.ns, agent)
        }
    }

    fn apply(&self, h: &HarnessWork) -> Work {
        Self::work(
            target::harness(&self.id, &h.agent, h.revision),
            2,
            WorkSpec::HarnessApply(Box::new(h.clone())),
        )
    }
}

struct Spoke {
    cluster: TestCluster,
    exec: Arc<Executor>,
    repairer: Repairer,
    cancel: CancellationToken,
    reports: std::sync::Mutex<mpsc::Receiver<Report>>,
}

impl Drop for Spoke {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.exec.shutdown();
    }
}

/// A spoke (executor and repairer, as its ServiceAccount) that has applied
/// `t`'s namespace and the Harness `h`, its repairer running on `t`'s
/// namespace only.
async fn spoke(t: &Tenant, h: &HarnessWork, budget: Budget) -> Result<Spoke> {
    clawfed_tests::link::init_test_logging();
    let SpokeEnv {
        cluster,
        spoke: client,
    } = SpokeEnv::exec_a().await?;
    let (tx, rx) = mpsc::channel(4096);
    let exec = Arc::new(Executor::new(client, SpokeConfig::default(), tx));
    for w in [t.ensure(), t.apply(h)] {
        let r = exec.apply(&w).await?;
        anyhow::ensure!(r.applied, "{}: {}", w.kind, r.reason);
    }
    let cancel = CancellationToken::new();
    let repairer = Repairer::scoped(
        exec.clone(),
        DriftMetrics::default(),
        budget,
        cancel.clone(),
        Some(HashSet::from([t.ns.clone()])),
    );
    let r = repairer.clone();
    tokio::spawn(async move { r.run().await });
    Ok(Spoke {
        cluster,
        exec,
        repairer,
        cancel,
        reports: std::sync::Mutex::new(rx),
    })
}

fn by(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.into()),
        ..Default::default()
    }
}

fn replicas(d: &Deployment) -> Option<i32> {
    d.spec.replicas
}

fn image(d: &Deployment) -> Option<String> {
    d.spec.template.spec.as_ref()?.containers[0].image.clone()
}

/// Waits until the repairer has counted `n` repairs of `target` and
/// returns the last reason.
async fn repairs(s: &Spoke, target: &str, n: u64) -> Result<String> {
    eventually(WAIT, &format!("{n} repairs of {target}"), || async {
        Ok(s.repairer
            .status(target)
            .filter(|st| st.repairs >= n)
            .map(|st| st.last_reason))
    })
    .await
}

async fn deployment_where(
    api: &Api<Deployment>,
    name: &str,
    what: &str,
    f: impl Fn(&Deployment) -> bool,
) -> Result<Deployment> {
    eventually(WAIT, what, || async {
        Ok(api.get_opt(name).await?.filter(|d| f(d)))
    })
    .await
}

#[tokio::test]
async fn deleted_and_changed_objects_are_repaired_and_reported_foreign_fields_stay() -> Result<()> {
    let t = Tenant::new("drift");
    let h = t.harness("drifty");
    // Room for every repair below (the fight test covers the budget).
    let budget = Budget {
        burst: 20,
        ..Budget::default()
    };
    let s = spoke(&t, &h, budget).await?;
    let admin = s.cluster.admin();
    let harness_target = target::harness(&t.id, &h.agent, 1);
    let ns_target = target::namespace(&t.id);
    let name = clawfed_proto::work::harness::object_name(&h.agent, 1);
    let deployments = Api::<Deployment>::namespaced(admin.clone(), &t.ns);
    let mut n = 0;

    // 1. The Harness Deployment is deleted: recreated.
    let uid = deployments.get(&name).await?.uid();
    deployments
        .delete(&name, &DeleteParams::background())
        .await?;
    deployment_where(&deployments, &name, "Deployment recreated", |d| {
        d.uid() != uid
    })
    .await?;
    n += 1;
    let reason = repairs(&s, &harness_target, n).await?;
    assert!(
        reason.contains("Deployment") && reason.contains("deleted"),
        "{reason}"
    );

    // A field clawfed does not own: an extra annotation stays through
    // every repair below.
    deployments
        .patch(
            &name,
            &by("drift-test-annotate"),
            &Patch::Merge(
                serde_json::json!({"metadata": {"annotations": {"example.com/note": "keep"}}}),
            ),
        )
        .await?;

    // 2. Scaled to 0: back to 1, and the scaler is named.
    deployments
        .patch(
            &name,
            &by("drift-test-scale"),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 0}})),
        )
        .await?;
    deployment_where(&deployments, &name, "replicas back to 1", |d| {
        replicas(d) == Some(1)
    })
    .await?;
    n += 1;
    let reason = repairs(&s, &harness_target, n).await?;
    assert!(
        reason.contains("spec.replicas") && reason.contains("drift-test-scale"),
        "{reason}"
    );

    // 3. Its image changed: the applied image is back.
    deployments
        .patch(
            &name,
            &by("drift-test-image"),
            &Patch::Json::<()>(serde_json::from_value(serde_json::json!([{
                "op": "replace", "path": "/spec/template/spec/containers/0/image",
                "value": "registry.invalid/other:latest"}]))?),
        )
        .await?;
    deployment_where(&deployments, &name, "image restored", |d| {
        image(d).as_deref() == Some(IMAGE)
    })
    .await?;
    n += 1;
    let reason = repairs(&s, &harness_target, n).await?;
    assert!(
        reason.contains("image") && reason.contains("drift-test-image"),
        "{reason}"
    );

    // 4. Another field manager takes the replica count (server-side
    // apply, forced): the spoke takes it back and owns it again.
    let grab = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name}, "spec": {"replicas": 2}});
    deployments
        .patch(
            &name,
            &PatchParams::apply("other-controller").force(),
            &Patch::Apply(&grab),
        )
        .await?;
    let d = deployment_where(&deployments, &name, "replica count taken back", |d| {
        replicas(d) == Some(1)
            && d.managed_fields().iter().any(|m| {
                m.manager.as_deref() == Some("clawfed-spoke")
                    && m.operation.as_deref() == Some("Apply")
                    && m.fields_v1
                        .as_ref()
                        .is_some_and(|f| f.0.pointer("/f:spec/f:replicas").is_some())
            })
    })
    .await?;
    n += 1;
    let reason = repairs(&s, &harness_target, n).await?;
    assert!(reason.contains("other-controller"), "{reason}");
    assert_eq!(
        d.annotations().get("example.com/note").map(String::as_str),
        Some("keep"),
        "a field clawfed does not own was changed"
    );
    assert_eq!(s.repairer.metrics().repairs_of("Deployment"), n);

    // 5. Its credential Secret is deleted. The spoke keeps no copy of a
    // credential (its record holds a digest), so it asks the hub to resend
    // the work; the resend (here the same work delivered again, as the
    // hub's resend does) writes the credential back.
    let secrets = Api::<Secret>::namespaced(admin.clone(), &t.ns);
    let record = secrets
        .get(&clawfed_spoke::drift::desired::name(&harness_target))
        .await?;
    let stored = record.data.unwrap_or_default();
    let stored = String::from_utf8_lossy(&stored[clawfed_spoke::drift::desired::KEY].0);
    assert!(
        !stored.contains("sk-test-not-real"),
        "the record holds the credential"
    );
    let cred = clawfed_proto::work::harness::credentials_name(&h.agent, 1);
    secrets.delete(&cred, &DeleteParams::background()).await?;
    let asked = eventually(WAIT, "a resend asked of the hub", || async {
        let mut reports = s.reports.lock().unwrap_or_else(|p| p.into_inner());
        while let Ok(r) = reports.try_recv() {
            if let Some(report::Body::Drift(d)) = r.body
                && r.target == harness_target
                && d.resend
            {
                return Ok(Some(d));
            }
        }
        Ok(None)
    })
    .await?;
    assert!(
        asked.last_reason.starts_with("Secret")
            && asked.last_reason.contains("deleted")
            && !asked.last_reason.contains("sk-test"),
        "{}",
        asked.last_reason
    );
    assert_eq!(asked.resends, 1);
    assert_eq!(s.repairer.metrics().repairs_of("Secret"), 0);
    let again = s.exec.apply(&t.apply(&h)).await?;
    assert!(again.applied, "{}", again.reason);
    let back = secrets.get(&cred).await?;
    let key = back
        .data
        .unwrap_or_default()
        .get("CLAWFED_MODEL_API_KEY")
        .map(|b| b.0.clone());
    assert_eq!(key.as_deref(), Some(&b"sk-test-not-real"[..]));
    // Someone else changes the value: noticed by digest, resend asked.
    secrets
        .patch(
            &cred,
            &by("drift-test-rekey"),
            &Patch::Merge(serde_json::json!({"stringData": {"CLAWFED_MODEL_API_KEY": "sk-other"}})),
        )
        .await?;
    eventually(WAIT, "a second resend asked", || async {
        Ok(s.repairer
            .status(&harness_target)
            .filter(|st| st.resends >= 2))
    })
    .await?;

    // 6. Its NetworkPolicy is deleted: recreated (a namespace object, so
    // counted on the namespace target).
    let policies = Api::<NetworkPolicy>::namespaced(admin.clone(), &t.ns);
    let uid = policies.get(nsapply::DENY_ALL).await?.uid();
    policies
        .delete(nsapply::DENY_ALL, &DeleteParams::background())
        .await?;
    eventually(WAIT, "default-deny NetworkPolicy recreated", || async {
        Ok(policies
            .get_opt(nsapply::DENY_ALL)
            .await?
            .filter(|p| p.uid() != uid))
    })
    .await?;
    let reason = repairs(&s, &ns_target, 1).await?;
    assert!(reason.contains("NetworkPolicy"), "{reason}");

    // 7. The tenant label is removed from the namespace: put back.
    let namespaces = Api::<Namespace>::all(admin.clone());
    namespaces
        .patch(
            &t.ns,
            &by("drift-test-relabel"),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {labels::TENANT: null}}})),
        )
        .await?;
    eventually(WAIT, "tenant label restored", || async {
        let ns = namespaces.get(&t.ns).await?;
        Ok((ns.labels().get(labels::TENANT) == Some(&t.tenant)).then_some(()))
    })
    .await?;
    let reason = repairs(&s, &ns_target, 2).await?;
    // (A patch that only removes a field leaves its manager no entry in
    // managedFields, so the log can name no one here.)
    assert!(
        reason.contains("Namespace") && reason.contains(labels::TENANT),
        "{reason}"
    );
    assert_eq!(s.repairer.metrics().repairs_of("Namespace"), 1);

    // Every Deployment repair so far is one write: none for the annotation.
    assert_eq!(s.repairer.metrics().repairs_of("Deployment"), 4);
    let _ = namespaces.delete(&t.ns, &DeleteParams::background()).await;
    Ok(())
}

/// What the apiserver gives back for a Harness with the Agent-owned claim
/// and the OpenClaw runtime's volumes is what the spoke asked for: the
/// Deployment's status changes (its Pod scheduled on the bound claim and
/// Ready) and a foreign annotation are read, and nothing is repaired. A
/// default the apiserver drops (`persistentVolumeClaim.readOnly: false`)
/// was seen as drift and repaired over and over.
#[tokio::test]
async fn a_harness_with_the_agents_claim_is_not_repaired_when_nothing_changed() -> Result<()> {
    let t = Tenant::new("calm");
    let mut h = t.harness("calm");
    h.workspace = Some(Workspace {
        size: "1Gi".into(),
        storage_class: None,
    });
    h.runtime_config = Some("{}".into());
    let s = spoke(&t, &h, Budget::default()).await?;
    let admin = s.cluster.admin();
    let name = clawfed_proto::work::harness::object_name(&h.agent, 1);
    let deployments = Api::<Deployment>::namespaced(admin.clone(), &t.ns);
    deployment_where(&deployments, &name, "the Harness Ready on its claim", |d| {
        d.status.as_ref().and_then(|s| s.ready_replicas) == Some(1)
    })
    .await?;
    deployments
        .patch(
            &name,
            &by("someone-else"),
            &Patch::Merge(serde_json::json!({
                "metadata": { "annotations": { "example.com/note": "hello" } }
            })),
        )
        .await?;
    // The repairer reads each of those events within milliseconds; a
    // repair it would make is counted before this ends.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let metrics = s.repairer.metrics();
    assert_eq!(
        (
            metrics.repairs_of("Deployment"),
            metrics.repairs_of("Secret"),
            metrics.repairs_of("PersistentVolumeClaim")
        ),
        (0, 0, 0),
        "nothing changed, nothing repaired"
    );
    Ok(())
}

#[tokio::test]
async fn a_fighting_controller_is_rate_limited_and_reported() -> Result<()> {
    let t = Tenant::new("fight");
    let h = t.harness("fought");
    let budget = Budget {
        burst: 3,
        refill: Duration::from_secs(3600),
        backoff: Duration::from_millis(200),
        max_backoff: Duration::from_secs(2),
    };
    let s = spoke(&t, &h, budget).await?;
    let admin = s.cluster.admin();
    let name = clawfed_proto::work::harness::object_name(&h.agent, 1);
    let deployments = Api::<Deployment>::namespaced(admin.clone(), &t.ns);
    // The fighter scales to 0 each time the spoke has put 1 back; it gives
    // up once the spoke stops answering (bounded: at most 10 rounds).
    let mut restores = 0;
    for _ in 0..10 {
        deployments
            .patch(
                &name,
                &by("fighter"),
                &Patch::Merge(serde_json::json!({"spec": {"replicas": 0}})),
            )
            .await?;
        let restored = eventually(Duration::from_secs(5), "spoke restores", || async {
            Ok(deployments
                .get_opt(&name)
                .await?
                .filter(|d| replicas(d) == Some(1)))
        })
        .await;
        if restored.is_err() {
            break;
        }
        restores += 1;
    }
    assert_eq!(restores, 3, "the spoke kept fighting past its budget");
    let target = target::harness(&t.id, &h.agent, 1);
    let status = s.repairer.status(&target).context("drift status")?;
    assert_eq!(status.repairs, 3);
    assert!(status.contested >= 1, "{status:?}");
    assert!(status.last_reason.contains("fighter"), "{status:?}");
    let key = ObjectKey {
        kind: "Deployment",
        namespace: t.ns.clone(),
        name: name.clone(),
    };
    assert!(s.repairer.contested(&key));
    assert_eq!(s.repairer.metrics().repairs_of("Deployment"), 3);
    // Backed off, not looping: still 0 replicas, still 3 writes, a while
    // after (the rechecks at 0.2, 0.4, 0.8, 1.6 s have run by then).
    let d = deployments.get(&name).await?;
    assert_eq!(replicas(&d), Some(0));
    let _ = Api::<Namespace>::all(admin.clone())
        .delete(&t.ns, &DeleteParams::background())
        .await;
    let _: &Client = &admin;
    Ok(())
}

/// Drift the spoke cannot repair by itself (its record of the Harness was
/// deleted along with the Deployment): the heartbeat digest no longer
/// matches what the hub saw acked, and the hub resends that target.
#[tokio::test]
async fn a_hub_side_digest_mismatch_resends_the_affected_target() -> Result<()> {
    use clawfed_hub::store::Store;
    use clawfed_spoke::link::identity::FileIdentityStore;
    use clawfed_spoke::link::tls::HubAddress;
    use clawfed_spoke::link::{Link, LinkConfig, SpokeMetrics};
    use clawfed_tests::hub::{Backend, TestHub};
    use clawfed_tests::link::{bootstrap_token, hub_ca, hub_url};

    clawfed_tests::link::init_test_logging();
    let t = Tenant::new("digest");
    let mut h = t.harness("digested");
    // No credential: the outbox would hold it sealed, which this test's
    // hand-written outbox item does not.
    h.credential = SecretData(BTreeMap::new());
    let SpokeEnv {
        cluster,
        spoke: client,
    } = SpokeEnv::exec_a().await?;
    let admin = cluster.admin();

    let mut hub = TestHub::start(Backend::Sqlite).await;
    let name = format!("exec-digest-{}", &t.id[t.id.len() - 8..]);
    let token = bootstrap_token(&hub, &name, false).await;
    let dir = tempfile::tempdir()?;
    let (reports_tx, reports_rx) = mpsc::channel(4096);
    let exec = Arc::new(Executor::new(client, SpokeConfig::default(), reports_tx));
    let cancel = CancellationToken::new();
    let repairer = Repairer::scoped(
        exec.clone(),
        DriftMetrics::default(),
        Budget::default(),
        cancel.clone(),
        Some(HashSet::from([t.ns.clone()])),
    );
    let r = repairer.clone();
    tokio::spawn(async move { r.run().await });
    let digest_source = repairer.clone();
    let link = Link::new(
        LinkConfig {
            hub: HubAddress::parse(&hub_url(&hub)).map_err(anyhow::Error::msg)?,
            ca_pem: hub_ca(&hub),
            cluster_name: name.clone(),
            bootstrap_token: Some(token),
            version: "test".into(),
            capabilities: vec![
                "applier:kube".into(),
                clawfed_proto::digest::CAPABILITY.into(),
            ],
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
        },
        Arc::new(FileIdentityStore::new(dir.path())),
        exec.clone(),
        SpokeMetrics::default(),
    )
    .with_applied_digest(Arc::new(move || digest_source.applied_digest()));
    let link_task = tokio::spawn(link.run(reports_rx, cancel.clone()));

    let store: Arc<dyn Store> = hub.store();
    let cluster_id = eventually(WAIT, "spoke enrolled", || async {
        Ok(clawfed_tests::link::cluster(&hub, &name)
            .await
            .map(|c| c.id))
    })
    .await?;
    let ensure = t.ensure();
    let apply = t.apply(&h);
    // One at a time: the spoke applies different targets concurrently.
    for w in [&ensure, &apply] {
        store
            .outbox_put(
                &cluster_id,
                &w.target,
                &w.kind,
                w.generation,
                std::str::from_utf8(&w.spec)?,
            )
            .await?;
        eventually(WAIT, &format!("{} acked", w.kind), || async {
            Ok(store
                .outbox_pending(&cluster_id, 0, 10)
                .await?
                .is_empty()
                .then_some(()))
        })
        .await?;
    }
    let deployments = Api::<Deployment>::namespaced(admin.clone(), &t.ns);
    let object = clawfed_proto::work::harness::object_name(&h.agent, 1);
    let uid = eventually(WAIT, "Harness Deployment applied", || async {
        Ok(deployments.get_opt(&object).await?.map(|d| d.uid()))
    })
    .await?;

    // The record and the Deployment go: the repairer has nothing to
    // repair from, the digest no longer matches.
    let secrets = Api::<Secret>::namespaced(admin.clone(), &t.ns);
    let record = clawfed_spoke::drift::desired::name(&apply.target);
    secrets.delete(&record, &DeleteParams::background()).await?;
    eventually(WAIT, "the record gone from the repairer's view", || async {
        Ok(secrets.get_opt(&record).await?.is_none().then_some(()))
    })
    .await?;
    deployments
        .delete(&object, &DeleteParams::background())
        .await?;

    // The hub resends the target (same generation): the spoke re-applies it.
    eventually(WAIT, "Deployment back through a resend", || async {
        Ok(deployments
            .get_opt(&object)
            .await?
            .filter(|d| d.uid() != uid))
    })
    .await?;
    eventually(WAIT, "the record written again", || async {
        Ok(secrets.get_opt(&record).await?)
    })
    .await?;
    assert_eq!(
        repairer
            .status(&apply.target)
            .map(|s| s.repairs)
            .unwrap_or(0),
        0,
        "the repairer had no record to repair from: the resend did it"
    );
    // Drift the spoke repairs itself is reported to the hub, stored with
    // the revision's target.
    deployments
        .patch(
            &object,
            &by("drift-test-scale"),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 0}})),
        )
        .await?;
    let stored = eventually(WAIT, "drift report stored on the hub", || async {
        Ok(store
            .get_report(&cluster_id, &apply.target, "drift")
            .await?
            .filter(|r| r.body["repairs"] == 1))
    })
    .await?;
    let reason = stored.body["lastReason"].as_str().unwrap_or_default();
    assert!(reason.contains("drift-test-scale"), "{reason}");
    assert!(stored.body["lastDriftAt"].is_string(), "{:?}", stored.body);
    let acked = store.outbox_acked_latest(&cluster_id).await?;
    assert!(
        acked.contains(&(apply.target.clone(), "harness.apply".into(), 2)),
        "{acked:?}"
    );

    // The credential Secret goes: the spoke cannot write it from its record
    // and asks; the hub resends the work, which writes it again.
    let cred = clawfed_proto::work::harness::credentials_name(&h.agent, 1);
    let cred_uid = secrets.get(&cred).await?.uid();
    secrets.delete(&cred, &DeleteParams::background()).await?;
    eventually(WAIT, "credential Secret back through a resend", || async {
        Ok(secrets
            .get_opt(&cred)
            .await?
            .filter(|s| s.uid() != cred_uid))
    })
    .await?;
    let stored = eventually(WAIT, "the resend request stored on the hub", || async {
        Ok(store
            .get_report(&cluster_id, &apply.target, "drift")
            .await?
            .filter(|r| r.body["resends"] == 1))
    })
    .await?;
    let reason = stored.body["lastReason"].as_str().unwrap_or_default();
    assert!(reason.contains("resend requested"), "{reason}");
    cancel.cancel();
    exec.shutdown();
    let _ = link_task.await;
    hub.stop().await;
    let _ = Api::<Namespace>::all(admin)
        .delete(&t.ns, &DeleteParams::background())
        .await;
    Ok(())
}

/// A hub resend (same generation) of a revision a successor's dedicated
/// replacement stopped does not start it again: its record says that
/// generation ended stopped.
#[tokio::test]
async fn a_resent_apply_of_a_replaced_revision_stays_stopped() -> Result<()> {
    use clawfed_proto::work::Predecessor;
    let t = Tenant::new("replaced");
    let h1 = t.harness("succeeded");
    let s = spoke(&t, &h1, Budget::default()).await?;
    let admin = s.cluster.admin();
    let mut h2 = h1.clone();
    h2.revision = 2;
    h2.revision_id = "rev-2".into();
    h2.predecessors = vec![Predecessor {
        revision: 1,
        revision_id: "rev-1".into(),
        execution: ExecutionMode::Ordinary,
    }];
    let r = s.exec.apply(&t.apply(&h2)).await?;
    anyhow::ensure!(r.applied, "revision 2: {}", r.reason);
    let deployments = Api::<Deployment>::namespaced(admin.clone(), &t.ns);
    let first = clawfed_proto::work::harness::object_name(&h1.agent, 1);
    eventually(WAIT, "revision 1 stopped", || async {
        Ok(deployments.get_opt(&first).await?.is_none().then_some(()))
    })
    .await?;
    let again = s.exec.apply(&t.apply(&h1)).await?;
    assert!(again.applied, "{}", again.reason);
    assert!(
        again.reason.contains("settled as harness.stop"),
        "{}",
        again.reason
    );
    assert!(
        deployments.get_opt(&first).await?.is_none(),
        "revision 1 started again"
    );
    let second = clawfed_proto::work::harness::object_name(&h2.agent, 2);
    assert!(deployments.get_opt(&second).await?.is_some());
    let _ = Api::<Namespace>::all(admin)
        .delete(&t.ns, &DeleteParams::background())
        .await;
    Ok(())
}
