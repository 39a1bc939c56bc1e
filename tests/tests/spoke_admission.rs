//! The spoke's ServiceAccount against the RBAC and admission policy of
//! deploy/spoke on a real apiserver (`e2e/cluster.sh up exec-a`):
//! - it cannot take over a namespace that is not clawfed's: label it managed
//!   (kube-system, or a fresh stand-in), bind its tenant role there, create a
//!   namespace without a data-plane name, or set the operator's adoption mark;
//!   while creating its own `oce-` namespace and adopting a namespace an
//!   operator marked still work;
//! - its link identity Secret store (`--identity-secret`) works with exactly
//!   the rights rbac.yaml grants in its own namespace.
//!
//! Every name is unique per run; what a test creates it deletes at the end,
//! whether it passed or not.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use clawfed_proto::labels;
use clawfed_proto::link::v1::Work;
use clawfed_proto::naming::data_plane_namespace;
use clawfed_proto::work::{NamespaceDeleteWork, NamespaceWork, WorkSpec, target};
use clawfed_spoke::apply::namespace::{SPOKE_BINDING, namespace_object, spoke_binding};
use clawfed_spoke::config::SpokeConfig;
use clawfed_spoke::exec::Executor;
use clawfed_spoke::link::identity::{
    Identity, IdentityError, IdentityStore, SecretIdentityStore, new_key_and_csr,
};
use clawfed_tests::kube_env::{eventually, is_forbidden};
use clawfed_tests::spoke_env::{
    SPOKE_IDENTITY_SECRET, SPOKE_NAMESPACE, SpokeEnv, test_container_defaults,
};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::{RoleBinding, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(60);
/// The name of the admission policy in deploy/spoke/admission.yaml; its
/// denials name it, which tells them from RBAC's.
const POLICY: &str = "clawfed-spoke-managed-namespaces";

fn rand(n: usize) -> String {
    uuid::Uuid::new_v4().simple().to_string()[..n].to_string()
}

fn namespace(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Namespace {
    let map = |kv: &[(&str, &str)]| {
        Some(
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        )
    };
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: map(labels),
            annotations: map(annotations),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn label_patch(key: &str, value: Option<&str>) -> Patch<serde_json::Value> {
    Patch::Merge(serde_json::json!({"metadata": {"labels": {key: value}}}))
}

/// The request was refused by the admission policy (403, naming it).
fn denied_by_policy<T: std::fmt::Debug>(res: Result<T, kube::Error>, what: &str) -> Result<()> {
    match res {
        Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(POLICY) => Ok(()),
        Err(e) => bail!("{what}: expected a 403 from {POLICY}, got {e}"),
        Ok(v) => bail!("{what}: allowed ({v:?})"),
    }
}

/// The request was refused with 403 (RBAC or policy).
fn forbidden<T: std::fmt::Debug>(res: Result<T, kube::Error>, what: &str) -> Result<()> {
    match res {
        Err(e) if is_forbidden(&e) => Ok(()),
        Err(e) => bail!("{what}: expected 403, got {e}"),
        Ok(v) => bail!("{what}: allowed ({v:?})"),
    }
}

fn dry_post() -> PostParams {
    PostParams {
        dry_run: true,
        ..Default::default()
    }
}

fn dry_patch() -> PatchParams {
    PatchParams {
        dry_run: true,
        ..Default::default()
    }
}

fn apply_params() -> PatchParams {
    PatchParams::apply("clawfed-spoke").force()
}

fn namespace_work(tenant: &str, id: &str, adopt: Option<&str>) -> NamespaceWork {
    NamespaceWork {
        tenant: tenant.into(),
        namespace_id: id.into(),
        adopt: adopt.map(String::from),
        quota: BTreeMap::from([("pods".into(), "20".into())]),
        container_defaults: test_container_defaults(),
        ..Default::default()
    }
}

fn work(id: &str, generation: i64, spec: WorkSpec) -> Work {
    Work {
        sequence: generation as u64,
        target: target::namespace(id),
        generation,
        kind: spec.kind().as_str().into(),
        spec: spec.encode(),
    }
}

/// Waits until the apiserver enforces THIS version of the policy (it loads a
/// moment after install): a namespace create, which only this version
/// confines, is refused. Dry run, so nothing is left behind either way.
async fn policy_loaded(spoke: &Client) -> Result<()> {
    let api = Api::<Namespace>::all(spoke.clone());
    eventually(WAIT, "the spoke admission policy to be enforced", || {
        let api = api.clone();
        async move {
            let probe = namespace(&format!("probe-{}", rand(10)), &[], &[]);
            match api.create(&dry_post(), &probe).await {
                Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(POLICY) => {
                    Ok(Some(()))
                }
                Ok(_) => Ok(None),
                Err(e) => Err(e.into()),
            }
        }
    })
    .await
}

async fn delete_namespaces(admin: &Client, names: &[String]) {
    let api = Api::<Namespace>::all(admin.clone());
    for n in names {
        let _ = api.delete(n, &DeleteParams::background()).await;
    }
}

#[tokio::test]
async fn spoke_cannot_take_over_a_namespace_that_is_not_clawfeds() -> Result<()> {
    let e = SpokeEnv::exec_a().await?;
    let admin = e.cluster.admin();
    let suffix = rand(10);
    let victim = format!("victim-{suffix}");
    let lent = format!("ops-{suffix}");
    let foreign = format!("evil-{suffix}");
    let fake = format!("oce-{}", rand(15));
    let fake_legacy = format!("oce-evil-{}", rand(12));
    let id = format!("adm-{}", uuid::Uuid::new_v4().simple());
    let own = data_plane_namespace(&id);
    let all = [&victim, &lent, &foreign, &fake, &fake_legacy, &own].map(|s| s.to_string());
    let res = escalation(
        &e,
        &admin,
        &victim,
        &lent,
        &foreign,
        &fake,
        &fake_legacy,
        &id,
    )
    .await;
    delete_namespaces(&admin, &all).await;
    res
}

#[allow(clippy::too_many_arguments)]
async fn escalation(
    e: &SpokeEnv,
    admin: &Client,
    victim: &str,
    lent: &str,
    foreign: &str,
    fake: &str,
    fake_legacy: &str,
    id: &str,
) -> Result<()> {
    let sa = e.spoke.clone();
    let config = SpokeConfig::default();
    let tenant = format!("adm-{}", &id[4..12]);
    let ns_admin = Api::<Namespace>::all(admin.clone());
    let ns_sa = Api::<Namespace>::all(sa.clone());
    let managed = [
        (labels::MANAGED_BY, labels::MANAGER),
        (labels::TENANT, tenant.as_str()),
    ];
    let id_annotation = [(labels::NAMESPACE_ID_ANNOTATION, id)];
    policy_loaded(&sa).await?;

    // kube-system itself, in dry run so a broken policy cannot leave a mark:
    // neither labelled managed (patch or the spoke's own apply) nor bound.
    let w = namespace_work(&tenant, id, Some("kube-system"));
    denied_by_policy(
        ns_sa
            .patch(
                "kube-system",
                &dry_patch(),
                &label_patch(labels::MANAGED_BY, Some(labels::MANAGER)),
            )
            .await,
        "label kube-system managed",
    )?;
    let mut dry_apply = apply_params();
    dry_apply.dry_run = true;
    denied_by_policy(
        ns_sa
            .patch(
                "kube-system",
                &dry_apply,
                &Patch::Apply(namespace_object(&w, "kube-system", true, &config)),
            )
            .await,
        "apply the spoke's namespace object to kube-system",
    )?;
    denied_by_policy(
        Api::<RoleBinding>::namespaced(sa.clone(), "kube-system")
            .create(&dry_post(), &spoke_binding("kube-system", &tenant, &config))
            .await,
        "bind the tenant role in kube-system",
    )?;
    forbidden(
        Api::<Secret>::namespaced(sa.clone(), "kube-system")
            .list(&ListParams::default())
            .await,
        "secrets in kube-system",
    )?;

    // A fresh unmanaged namespace stands in for kube-system, for real.
    ns_admin
        .create(&PostParams::default(), &namespace(victim, &[], &[]))
        .await?;
    denied_by_policy(
        ns_sa
            .patch(
                victim,
                &PatchParams::default(),
                &label_patch(labels::MANAGED_BY, Some(labels::MANAGER)),
            )
            .await,
        "label an unmanaged namespace managed",
    )?;
    let w = namespace_work(&tenant, id, Some(victim));
    denied_by_policy(
        ns_sa
            .patch(
                victim,
                &apply_params(),
                &Patch::Apply(namespace_object(&w, victim, true, &config)),
            )
            .await,
        "adopt an unmarked namespace with the spoke's apply",
    )?;
    denied_by_policy(
        ns_sa
            .patch(
                victim,
                &PatchParams::default(),
                &label_patch(labels::ADOPTABLE, Some("true")),
            )
            .await,
        "the spoke marks a namespace adoptable itself",
    )?;
    let bindings = Api::<RoleBinding>::namespaced(sa.clone(), victim);
    denied_by_policy(
        bindings
            .create(
                &PostParams::default(),
                &spoke_binding(victim, &tenant, &config),
            )
            .await,
        "bind the tenant role in an unmanaged namespace",
    )?;
    let got = ns_admin.get(victim).await?;
    ensure!(
        !got.labels().contains_key(labels::MANAGED_BY)
            && !got.labels().contains_key(labels::ADOPTABLE),
        "victim namespace was changed: {:?}",
        got.labels()
    );
    // Someone else put the manager label on it (no data-plane name, no
    // operator mark): still not the spoke's.
    ns_admin
        .patch(
            victim,
            &PatchParams::default(),
            &label_patch(labels::MANAGED_BY, Some(labels::MANAGER)),
        )
        .await?;
    denied_by_policy(
        bindings
            .create(
                &PostParams::default(),
                &spoke_binding(victim, &tenant, &config),
            )
            .await,
        "bind the tenant role in a labelled namespace without a clawfed name or mark",
    )?;
    denied_by_policy(
        ns_sa
            .patch(
                victim,
                &PatchParams::default(),
                &label_patch(labels::TENANT, Some(tenant.as_str())),
            )
            .await,
        "claim a labelled namespace without a clawfed name or mark",
    )?;
    denied_by_policy(
        ns_sa.delete(victim, &DeleteParams::default()).await,
        "delete a labelled namespace without a clawfed name",
    )?;
    forbidden(
        Api::<Secret>::namespaced(sa.clone(), victim)
            .list(&ListParams::default())
            .await,
        "secrets in the victim namespace",
    )?;

    // Namespaces it may not create: a foreign name, a data-plane name
    // without the markers or with the operator's mark, the legacy shape.
    let full: Vec<(&str, &str)> = managed.to_vec();
    let cases = [
        (
            "a non-clawfed name",
            namespace(foreign, &full, &id_annotation),
        ),
        (
            "oce- without the manager label",
            namespace(fake, &[(labels::TENANT, &tenant)], &id_annotation),
        ),
        ("oce- without the namespace id", namespace(fake, &full, &[])),
        (
            "oce- with the adoption mark",
            namespace(
                fake,
                &[managed[0], managed[1], (labels::ADOPTABLE, "true")],
                &id_annotation,
            ),
        ),
        (
            "the legacy shape",
            namespace(fake_legacy, &full, &id_annotation),
        ),
    ];
    for (what, ns) in cases {
        denied_by_policy(ns_sa.create(&PostParams::default(), &ns).await, what)?;
    }

    // The legitimate paths, through the spoke's executor as the same
    // ServiceAccount: create its own oce- namespace and bind there...
    let (tx, _reports) = mpsc::channel(1024);
    let exec = Executor::new(sa.clone(), config.clone(), tx);
    let own = data_plane_namespace(id);
    let r = exec
        .apply(&work(
            id,
            1,
            WorkSpec::NamespaceEnsure(namespace_work(&tenant, id, None)),
        ))
        .await?;
    ensure!(r.applied, "ensure own namespace: {}", r.reason);
    ensure!(r.namespace == own, "namespace {} != {own}", r.namespace);
    Api::<RoleBinding>::namespaced(admin.clone(), &own)
        .get(SPOKE_BINDING)
        .await
        .context("the spoke's binding in its own namespace")?;
    // ...but even there it cannot mark it adoptable or bind anyone else.
    denied_by_policy(
        ns_sa
            .patch(
                &own,
                &PatchParams::default(),
                &label_patch(labels::ADOPTABLE, Some("true")),
            )
            .await,
        "mark its own namespace adoptable",
    )?;
    let mut others = spoke_binding(&own, &tenant, &config);
    others.metadata.name = Some(format!("others-{}", rand(6)));
    others.subjects = Some(vec![Subject {
        kind: "Group".into(),
        name: "system:authenticated".into(),
        api_group: Some("rbac.authorization.k8s.io".into()),
        ..Default::default()
    }]);
    denied_by_policy(
        Api::<RoleBinding>::namespaced(sa.clone(), &own)
            .create(&PostParams::default(), &others)
            .await,
        "bind the tenant role to every authenticated user",
    )?;
    // Issue 30: no path from the spoke's RoleBinding rights to more rights,
    // for it or for a tenant's workloads (deploy/spoke/README.md, "Why the
    // spoke creates RoleBindings").
    let mut admin_role = spoke_binding(&own, &tenant, &config);
    admin_role.metadata.name = Some(format!("admin-{}", rand(6)));
    admin_role.role_ref.name = "cluster-admin".into();
    forbidden(
        Api::<RoleBinding>::namespaced(sa.clone(), &own)
            .create(&PostParams::default(), &admin_role)
            .await,
        "bind cluster-admin to itself in its own namespace (escalation)",
    )?;
    let mut workload = spoke_binding(&own, &tenant, &config);
    workload.metadata.name = Some(format!("workload-{}", rand(6)));
    workload.subjects = Some(vec![Subject {
        kind: "ServiceAccount".into(),
        name: "default".into(),
        namespace: Some(own.clone()),
        ..Default::default()
    }]);
    denied_by_policy(
        Api::<RoleBinding>::namespaced(sa.clone(), &own)
            .create(&PostParams::default(), &workload)
            .await,
        "bind the tenant role to a workload ServiceAccount of the namespace",
    )?;
    let mut widened = spoke_binding(&own, &tenant, &config);
    widened
        .subjects
        .get_or_insert_with(Vec::new)
        .push(workload.subjects.clone().unwrap_or_default()[0].clone());
    denied_by_policy(
        Api::<RoleBinding>::namespaced(sa.clone(), &own)
            .patch(SPOKE_BINDING, &apply_params(), &Patch::Apply(&widened))
            .await,
        "add a workload ServiceAccount to its own binding",
    )?;
    let role = k8s_openapi::api::rbac::v1::Role {
        metadata: ObjectMeta {
            name: Some(format!("mine-{}", rand(6))),
            namespace: Some(own.clone()),
            ..Default::default()
        },
        rules: None,
    };
    forbidden(
        Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(sa.clone(), &own)
            .create(&PostParams::default(), &role)
            .await,
        "create a Role of its own to bind",
    )?;

    // Adopt a namespace an operator marked; the mark stays the operator's.
    ns_admin
        .create(
            &PostParams::default(),
            &namespace(lent, &[(labels::ADOPTABLE, "true")], &[]),
        )
        .await?;
    let lent_id = format!("{id}-lent");
    let lent_tenant = format!("{tenant}-l");
    let r = exec
        .apply(&work(
            &lent_id,
            1,
            WorkSpec::NamespaceEnsure(namespace_work(&lent_tenant, &lent_id, Some(lent))),
        ))
        .await?;
    ensure!(r.applied, "adopt a marked namespace: {}", r.reason);
    let got = ns_admin.get(lent).await?;
    ensure!(
        got.labels().get(labels::MANAGED_BY).map(String::as_str) == Some(labels::MANAGER)
            && got.labels().get(labels::ADOPTABLE).map(String::as_str) == Some("true"),
        "adopted namespace labels: {:?}",
        got.labels()
    );
    denied_by_policy(
        ns_sa
            .patch(
                lent,
                &PatchParams::default(),
                &label_patch(labels::ADOPTABLE, None),
            )
            .await,
        "remove the operator's mark",
    )?;
    denied_by_policy(
        ns_sa.delete(lent, &DeleteParams::default()).await,
        "delete a namespace an operator lent",
    )?;
    // Releasing it removes clawfed's markers and keeps the namespace and
    // the operator's mark; deleting its own namespace is allowed.
    let release = WorkSpec::NamespaceDelete(NamespaceDeleteWork {
        tenant: lent_tenant.clone(),
        namespace_id: lent_id.clone(),
        data_plane_namespace: lent.into(),
    });
    let r = exec.apply(&work(&lent_id, 2, release)).await?;
    ensure!(r.applied, "release the adopted namespace: {}", r.reason);
    let got = ns_admin.get(lent).await?;
    ensure!(
        !got.labels().contains_key(labels::MANAGED_BY)
            && got.labels().get(labels::ADOPTABLE).map(String::as_str) == Some("true"),
        "released namespace labels: {:?}",
        got.labels()
    );
    let delete = WorkSpec::NamespaceDelete(NamespaceDeleteWork {
        tenant: tenant.clone(),
        namespace_id: id.into(),
        data_plane_namespace: own.clone(),
    });
    let r = exec.apply(&work(id, 2, delete)).await?;
    ensure!(r.applied, "delete own namespace: {}", r.reason);
    exec.shutdown();
    Ok(())
}

fn identity(cluster_id: &str) -> Result<Identity> {
    let (key_pem, _) = new_key_and_csr()?;
    let key = rcgen::KeyPair::from_pem(&key_pem)?;
    let cert = rcgen::CertificateParams::new(vec![cluster_id.to_string()])?.self_signed(&key)?;
    Ok(Identity::new(cluster_id.into(), key_pem, cert.pem())?)
}

fn same(a: &Identity, b: &Identity) -> bool {
    a.cluster_id == b.cluster_id && a.key_pem == b.key_pem && a.cert_pem == b.cert_pem
}

#[tokio::test]
async fn identity_secret_store_works_as_the_spoke_service_account() -> Result<()> {
    let e = SpokeEnv::exec_a().await?;
    let admin = Api::<Secret>::namespaced(e.cluster.admin(), SPOKE_NAMESPACE);
    let other = format!("not-the-identity-{}", rand(8));
    let res = identity_store(&e, &other).await;
    for name in [SPOKE_IDENTITY_SECRET, other.as_str()] {
        let _ = admin.delete(name, &DeleteParams::default()).await;
    }
    res
}

async fn identity_store(e: &SpokeEnv, other: &str) -> Result<()> {
    let admin = Api::<Secret>::namespaced(e.cluster.admin(), SPOKE_NAMESPACE);
    let sa = Api::<Secret>::namespaced(e.spoke.clone(), SPOKE_NAMESPACE);
    // Start from no Secret: the first save must create it.
    let _ = admin
        .delete(SPOKE_IDENTITY_SECRET, &DeleteParams::default())
        .await;
    eventually(WAIT, "identity Secret deleted", || async {
        Ok(admin
            .get_opt(SPOKE_IDENTITY_SECRET)
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    let store = SecretIdentityStore::new(e.spoke.clone(), SPOKE_NAMESPACE, SPOKE_IDENTITY_SECRET);
    // A just-applied Role reaches the authorizer a moment later.
    let loaded = eventually(WAIT, "identity Secret readable by the spoke", || async {
        match store.load().await {
            Ok(v) => Ok(Some(v)),
            Err(IdentityError::Kube(err)) if is_forbidden(&err) => Ok(None),
            Err(err) => Err(err.into()),
        }
    })
    .await?;
    ensure!(loaded.is_none(), "no identity stored yet");
    let first = identity("exec-first")?;
    store
        .save(&first)
        .await
        .context("first save (creates the Secret)")?;
    let got = store
        .load()
        .await?
        .context("identity after the first save")?;
    ensure!(same(&got, &first), "loaded {got:?}, saved {first:?}");
    let second = identity("exec-second")?;
    store.save(&second).await.context("overwrite")?;
    let got = store
        .load()
        .await?
        .context("identity after the overwrite")?;
    ensure!(same(&got, &second), "loaded {got:?}, saved {second:?}");

    // Nothing else in its namespace: no other Secret read, listed, created
    // (plain or applied), and not even its own deleted.
    admin
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some(other.into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?;
    forbidden(sa.get(other).await, "read another Secret")?;
    forbidden(sa.list(&ListParams::default()).await, "list Secrets")?;
    let fresh = format!("{other}-x");
    let secret = |name: &str| Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    forbidden(
        sa.create(&PostParams::default(), &secret(&fresh)).await,
        "create another Secret",
    )?;
    forbidden(
        sa.patch(&fresh, &apply_params(), &Patch::Apply(secret(&fresh)))
            .await,
        "apply-create another Secret",
    )?;
    forbidden(
        sa.create(&PostParams::default(), &secret(SPOKE_IDENTITY_SECRET))
            .await,
        "POST-create the identity Secret (create is authorized by name only for apply)",
    )?;
    forbidden(
        sa.delete(SPOKE_IDENTITY_SECRET, &DeleteParams::default())
            .await,
        "delete the identity Secret",
    )?;
    let _ = admin.delete(&fresh, &DeleteParams::default()).await;
    Ok(())
}

/// Issue 12: a SandboxDriver provider's extra rights live in its own RBAC
/// file, not in the default spoke role; they reach the spoke's tenant role
/// only by aggregation, so only where the spoke bound it.
#[test]
fn provider_rights_live_in_their_own_rbac_file() -> Result<()> {
    use clawfed_tests::spoke_env::cluster_roles;
    const AGGREGATE: &str = "clawfed.io/aggregate-to-spoke-tenant";
    let provider_rule = |r: &k8s_openapi::api::rbac::v1::PolicyRule| {
        r.api_groups
            .iter()
            .flatten()
            .any(|g| g == "sandbox.clawfed.io" || g == "apiextensions.k8s.io")
    };
    let default = cluster_roles("rbac.yaml")?;
    ensure!(!default.is_empty(), "rbac.yaml has ClusterRoles");
    for role in &default {
        ensure!(
            !role.rules.iter().flatten().any(provider_rule),
            "default spoke role {} grants provider rights",
            role.name_any()
        );
    }
    let tenant = default
        .iter()
        .find(|r| r.name_any() == "clawfed-spoke-tenant")
        .context("clawfed-spoke-tenant")?;
    let selects = tenant
        .aggregation_rule
        .as_ref()
        .and_then(|a| a.cluster_role_selectors.as_ref())
        .is_some_and(|s| {
            s.iter().any(|sel| {
                sel.match_labels
                    .as_ref()
                    .is_some_and(|m| m.get(AGGREGATE).is_some_and(|v| v == "true"))
            })
        });
    ensure!(selects, "clawfed-spoke-tenant aggregates {AGGREGATE}=true");
    let provider = cluster_roles("provider-crd.yaml")?;
    let tenant_part = provider
        .iter()
        .find(|r| {
            r.rules.iter().flatten().any(|r| {
                r.api_groups
                    .iter()
                    .flatten()
                    .any(|g| g == "sandbox.clawfed.io")
            })
        })
        .context("the provider's tenant rights")?;
    ensure!(
        tenant_part
            .labels()
            .get(AGGREGATE)
            .is_some_and(|v| v == "true"),
        "the provider's tenant rights join the tenant role by aggregation"
    );
    ensure!(
        provider.iter().any(|r| r.rules.iter().flatten().any(|r| r
            .api_groups
            .iter()
            .flatten()
            .any(|g| g == "apiextensions.k8s.io")
            && r.resource_names
                .iter()
                .flatten()
                .any(|n| n == "sandboxharnesses.sandbox.clawfed.io"))),
        "the provider's CRD right, by name"
    );
    Ok(())
}

/// Issue 30: a provider's privileged parts run only under the
/// operator-approved RuntimeClass (`clawfed-sandbox`), and the Harness
/// container itself never is privileged: deploy/spoke/provider-crd.yaml's
/// policy on a real apiserver, for any creator (here the cluster admin) in
/// a clawfed-managed namespace, server-side dry runs.
#[tokio::test]
async fn a_providers_privileged_parts_run_only_under_the_approved_runtime_class() -> Result<()> {
    use k8s_openapi::api::core::v1::{Capabilities, Container, Pod, PodSpec, SecurityContext};
    use k8s_openapi::api::node::v1::RuntimeClass;
    const PROVIDER_POLICY: &str = "clawfed-provider-privileged-parts";
    const APPROVED: &str = "clawfed-sandbox";
    let e = SpokeEnv::exec_a().await?;
    let admin = e.cluster.admin();
    let ns = format!("oce-{}", rand(15));
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &namespace(&ns, &[(labels::MANAGED_BY, labels::MANAGER)], &[]),
        )
        .await?;
    let classes = Api::<RuntimeClass>::all(admin.clone());
    if classes.get_opt(APPROVED).await?.is_none() {
        classes
            .create(
                &PostParams::default(),
                &RuntimeClass {
                    metadata: ObjectMeta {
                        name: Some(APPROVED.into()),
                        ..Default::default()
                    },
                    handler: "runc".into(),
                    ..Default::default()
                },
            )
            .await?;
    }
    let container = |name: &str, privileged: bool| Container {
        name: name.into(),
        image: Some("registry.invalid/x@sha256:00".into()),
        security_context: privileged.then(|| SecurityContext {
            capabilities: Some(Capabilities {
                add: Some(vec!["NET_ADMIN".into()]),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let pod = |init_privileged: bool, harness_privileged: bool, class: Option<&str>| Pod {
        metadata: ObjectMeta {
            name: Some(format!("p-{}", rand(6))),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            init_containers: Some(vec![container("setup", init_privileged)]),
            containers: vec![container("harness", harness_privileged)],
            runtime_class_name: class.map(str::to_owned),
            ..Default::default()
        }),
        status: None,
    };
    let pods = Api::<Pod>::namespaced(admin.clone(), &ns);
    let denied = |res: Result<Pod, kube::Error>, what: &str| -> Result<bool> {
        match res {
            Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(PROVIDER_POLICY) => {
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(e) => bail!("{what}: {e}"),
        }
    };
    let result = async {
        // The policy is enforced a moment after it is created.
        eventually(WAIT, "the provider policy to be enforced", || async {
            Ok(denied(
                pods.create(&dry_post(), &pod(true, false, None)).await,
                "probe",
            )?
            .then_some(()))
        })
        .await?;
        ensure!(
            !denied(
                pods.create(&dry_post(), &pod(true, false, Some(APPROVED)))
                    .await,
                "privileged init under the approved class"
            )?,
            "a privileged init container under the approved RuntimeClass is admitted"
        );
        ensure!(
            denied(
                pods.create(&dry_post(), &pod(false, true, Some(APPROVED)))
                    .await,
                "privileged harness"
            )?,
            "the Harness container itself is never privileged"
        );
        ensure!(
            !denied(
                pods.create(&dry_post(), &pod(false, false, None)).await,
                "plain pod"
            )?,
            "an unprivileged Pod needs no RuntimeClass"
        );
        Ok(())
    }
    .await;
    delete_namespaces(&admin, &[ns]).await;
    result
}
