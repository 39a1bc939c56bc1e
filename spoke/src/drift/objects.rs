//! The desired objects of a [`Record`]: the same pure builders the executor
//! applies with, so a repair writes exactly what the work wrote. Their JSON
//! (in the form the apiserver returns it) feeds [`super::check`].

use std::collections::BTreeMap;

use clawfed_kube::RequestError;
use clawfed_proto::work::{ExecutionMode, HarnessWork, NamespaceWork, SecretData, WorkKind};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, LimitRange, Namespace, ResourceQuota, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Patch;
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use super::desired::{self, Record};
use crate::apply::namespace as nsapply;
use crate::apply::{self, harness, ledger, merge_params, ssa, work_annotations};
use crate::config::SpokeConfig;

/// One desired object.
#[derive(Debug, Clone)]
pub enum Desired {
    Namespace(Box<Namespace>),
    Deployment(Box<Deployment>),
    Service(Box<Service>),
    Secret(Box<Secret>),
    /// The Harness credential Secret as the record knows it: its metadata
    /// and, in `stringData`, the digest of each value (never a value).
    /// Compared by digest; restored only by the hub's resend.
    Credential(Box<Secret>),
    ServiceAccount(Box<ServiceAccount>),
    ConfigMap(Box<ConfigMap>),
    NetworkPolicy(Box<NetworkPolicy>),
    ResourceQuota(Box<ResourceQuota>),
    LimitRange(Box<LimitRange>),
    RoleBinding(Box<RoleBinding>),
}

/// The kinds drift watches (the `kind` label of the repair metric).
pub const KINDS: [&str; 10] = [
    "Namespace",
    "Deployment",
    "Service",
    "Secret",
    "ServiceAccount",
    "ConfigMap",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "RoleBinding",
];

macro_rules! each {
    ($self:expr, $o:ident => $e:expr) => {
        match $self {
            Desired::Namespace($o) => $e,
            Desired::Deployment($o) => $e,
            Desired::Service($o) => $e,
            Desired::Secret($o) => $e,
            Desired::Credential($o) => $e,
            Desired::ServiceAccount($o) => $e,
            Desired::ConfigMap($o) => $e,
            Desired::NetworkPolicy($o) => $e,
            Desired::ResourceQuota($o) => $e,
            Desired::LimitRange($o) => $e,
            Desired::RoleBinding($o) => $e,
        }
    };
}

macro_rules! namespaced {
    ($self:expr, $client:expr, $ns:expr, |$api:ident, $o:ident| $e:expr) => {
        match $self {
            Desired::Namespace(_) => unreachable!("cluster-scoped"),
            Desired::Deployment($o) => {
                let $api = Api::<Deployment>::namespaced($client, $ns);
                $e
            }
            Desired::Service($o) => {
                let $api = Api::<Service>::namespaced($client, $ns);
                $e
            }
            Desired::Secret($o) | Desired::Credential($o) => {
                let $api = Api::<Secret>::namespaced($client, $ns);
                $e
            }
            Desired::ServiceAccount($o) => {
                let $api = Api::<ServiceAccount>::namespaced($client, $ns);
                $e
            }
            Desired::ConfigMap($o) => {
                let $api = Api::<ConfigMap>::namespaced($client, $ns);
                $e
            }
            Desired::NetworkPolicy($o) => {
                let $api = Api::<NetworkPolicy>::namespaced($client, $ns);
                $e
            }
            Desired::ResourceQuota($o) => {
                let $api = Api::<ResourceQuota>::namespaced($client, $ns);
                $e
            }
            Desired::LimitRange($o) => {
                let $api = Api::<LimitRange>::namespaced($client, $ns);
                $e
            }
            Desired::RoleBinding($o) => {
                let $api = Api::<RoleBinding>::namespaced($client, $ns);
                $e
            }
        }
    };
}

fn json<T: serde::Serialize>(o: &T) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

impl Desired {
    /// The object's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Desired::Namespace(_) => "Namespace",
            Desired::Deployment(_) => "Deployment",
            Desired::Service(_) => "Service",
            Desired::Secret(_) | Desired::Credential(_) => "Secret",
            Desired::ServiceAccount(_) => "ServiceAccount",
            Desired::ConfigMap(_) => "ConfigMap",
            Desired::NetworkPolicy(_) => "NetworkPolicy",
            Desired::ResourceQuota(_) => "ResourceQuota",
            Desired::LimitRange(_) => "LimitRange",
            Desired::RoleBinding(_) => "RoleBinding",
        }
    }

    /// The object's name.
    pub fn name(&self) -> String {
        each!(self, o => o.name_any())
    }

    /// The JSON to compare a live object with. A Secret's `stringData` is
    /// compared as the `data` the apiserver stores; a Namespace also holds
    /// the work annotations the executor records on it.
    pub fn value(&self) -> Value {
        match self {
            Desired::Secret(s) => {
                let mut s = (**s).clone();
                if let Some(sd) = s.string_data.take() {
                    let data = s.data.get_or_insert_with(BTreeMap::new);
                    for (k, v) in sd {
                        data.insert(k, ByteString(v.into_bytes()));
                    }
                }
                json(&s)
            }
            // The digests stand for the values: `observe` maps the live
            // values to digests the same way.
            Desired::Credential(s) => {
                let mut s = (**s).clone();
                let digests = s.string_data.take().unwrap_or_default();
                s.data = Some(
                    digests
                        .into_iter()
                        .map(|(k, d)| (k, ByteString(d.into_bytes())))
                        .collect(),
                );
                json(&s)
            }
            other => each!(other, o => json(o)),
        }
    }

    /// The live object as [`Desired::value`] is compared with it: a
    /// credential Secret's values become their digests (a value is never
    /// kept or compared in the clear); other objects as they are.
    pub fn observe(&self, live: Value) -> Value {
        match self {
            Desired::Credential(_) => observe_credential(live),
            _ => live,
        }
    }

    /// Whether a repair can write this object from the record alone. The
    /// credential Secret cannot: the record holds digests, not values.
    pub fn restorable(&self) -> bool {
        !matches!(self, Desired::Credential(_))
    }

    /// Reads the live object (JSON), `None` when it is gone.
    pub async fn live(&self, client: &Client, namespace: &str) -> apply::Result<Option<Value>> {
        let name = self.name();
        let err = |source| RequestError::new("get", self.kind(), namespace, &name, source);
        if let Desired::Namespace(_) = self {
            let api = Api::<Namespace>::all(client.clone());
            return Ok(api.get_opt(&name).await.map_err(err)?.map(|o| json(&o)));
        }
        namespaced!(self, client.clone(), namespace, |api, _o| Ok(api
            .get_opt(&name)
            .await
            .map_err(err)?
            .map(|o| json(&o))))
    }

    /// Re-applies the object: server-side apply, forced, as the spoke's
    /// field manager (fields it does not own stay as they are). Returns the
    /// object as the apiserver answered (JSON).
    pub async fn apply(&self, client: &Client, namespace: &str) -> apply::Result<Value> {
        if let Desired::Namespace(ns) = self {
            let name = ns.name_any();
            let api = Api::<Namespace>::all(client.clone());
            let mut applied = (**ns).clone();
            // The work annotations are the executor's merge-patched record;
            // keep them out of the applied set, as the executor does.
            let record = applied.metadata.annotations.as_mut().map(|a| {
                let keep: BTreeMap<String, String> = a
                    .iter()
                    .filter(|(k, _)| {
                        *k == clawfed_proto::labels::GENERATION_ANNOTATION
                            || *k == clawfed_proto::labels::WORK_TARGET_ANNOTATION
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                a.retain(|k, _| !keep.contains_key(k));
                keep
            });
            let kube = |action, source| RequestError::new(action, "Namespace", "", &name, source);
            let mut answered = api
                .patch(&name, &apply::apply_params(), &Patch::Apply(&applied))
                .await
                .map_err(|e| kube("apply", e))?;
            if let Some(record) = record.filter(|r| !r.is_empty()) {
                let patch = Namespace {
                    metadata: ObjectMeta {
                        annotations: Some(record),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                answered = api
                    .patch(&name, &merge_params(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| kube("patch", e))?;
            }
            return Ok(json(&answered));
        }
        if !self.restorable() {
            return Err(apply::Error::Invalid(format!(
                "Secret {namespace}/{}: restored by the hub's resend, not from the record",
                self.name()
            )));
        }
        namespaced!(self, client.clone(), namespace, |api, o| ssa(&api, &**o)
            .await
            .map(|answered| json(&answered)))
    }
}

/// A live credential Secret with each value replaced by its digest.
pub fn observe_credential(live: Value) -> Value {
    let Ok(mut secret) = serde_json::from_value::<Secret>(live.clone()) else {
        return live;
    };
    if let Some(data) = secret.data.as_mut() {
        for v in data.values_mut() {
            *v = ByteString(desired::credential_digest(&v.0).into_bytes());
        }
    }
    json(&secret)
}

/// The desired objects of `record` (none for work that leaves nothing
/// behind: stop, retire, namespace delete, or an unreadable spec).
pub fn desired(record: &Record, config: &SpokeConfig) -> Vec<Desired> {
    match WorkKind::parse(&record.kind) {
        Some(WorkKind::HarnessApply) => serde_json::from_value::<HarnessWork>(record.spec.clone())
            .map(|h| harness_objects(&h, record, config))
            .unwrap_or_default(),
        Some(WorkKind::NamespaceEnsure) => {
            serde_json::from_value::<NamespaceWork>(record.spec.clone())
                .map(|w| namespace_objects(&w, record, config))
                .unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

fn harness_objects(h: &HarnessWork, r: &Record, config: &SpokeConfig) -> Vec<Desired> {
    let (t, g) = (r.target.as_str(), r.generation);
    // The record's spec has no credential, but the Pod refers to each of its
    // keys (one `secretKeyRef` each): the keys come back from the record's
    // digests, the values never (only the Secret would hold them, and it
    // is not restored from the record).
    let mut keyed = h.clone();
    keyed.credential = SecretData(
        r.credential_digests
            .keys()
            .map(|k| (k.clone(), String::new()))
            .collect(),
    );
    let h = &keyed;
    let mut out = vec![
        Desired::ServiceAccount(Box::new(harness::service_account(h, t, g))),
        Desired::Credential(Box::new(credential_secret(h, r))),
    ];
    if h.execution == ExecutionMode::Ordinary {
        out.push(Desired::Deployment(Box::new(harness::deployment_in(
            h,
            &config.cluster,
            t,
            g,
        ))));
    }
    out.push(Desired::Service(Box::new(harness::service(h, t, g))));
    out
}

/// The credential Secret with the record's digests in place of the values
/// (the record's spec has no credential).
fn credential_secret(h: &HarnessWork, r: &Record) -> Secret {
    let mut s = harness::credential_secret(h, &r.target, r.generation);
    s.string_data = Some(r.credential_digests.clone());
    s
}

fn namespace_objects(w: &NamespaceWork, r: &Record, config: &SpokeConfig) -> Vec<Desired> {
    let name = r.namespace.as_str();
    let mut ns = nsapply::namespace_object(w, name, r.adopted, config);
    ns.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .extend(work_annotations(&r.target, r.generation));
    let mut out = vec![
        Desired::Namespace(Box::new(ns)),
        Desired::RoleBinding(Box::new(nsapply::spoke_binding(name, &w.tenant, config))),
        Desired::ResourceQuota(Box::new(nsapply::quota(w, name))),
        Desired::LimitRange(Box::new(nsapply::limit_range(w, name))),
        Desired::ConfigMap(Box::new(ledger::ledger_object(name, &w.tenant))),
    ];
    out.extend(
        nsapply::network_policies(w, name, config)
            .into_iter()
            .map(|p| Desired::NetworkPolicy(Box::new(p))),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clawfed_proto::link::v1::Work;
    use clawfed_proto::work::WorkSpec;

    /// A Deployment rebuilt from the record is the one applied: its
    /// credential env refers to the same keys (a mismatch would be repaired
    /// as drift right after every apply, without the credentials).
    #[test]
    fn the_deployment_from_the_record_is_the_applied_one() {
        let mut h = crate::apply::harness::tests::harness();
        h.credential = SecretData(
            [
                ("CLAWFED_MODEL_API_KEY".to_string(), "sk-1".to_string()),
                ("OPENCLAW_GATEWAY_TOKEN".to_string(), "tok".to_string()),
            ]
            .into(),
        );
        h.runtime_config = Some("{}".into());
        let work = Work {
            target: "harness/ns-1/a1/3".into(),
            generation: 1,
            kind: "harness.apply".into(),
            spec: WorkSpec::HarnessApply(Box::new(h.clone())).encode(),
            ..Default::default()
        };
        let record = desired::from_work(&work, "oce-x", false, None).expect("record");
        assert!(
            !record.spec.to_string().contains("sk-1"),
            "no credential value in the record"
        );
        let applied = harness::deployment(&h, &work.target, work.generation);
        let rebuilt = desired(&record, &SpokeConfig::default())
            .into_iter()
            .find_map(|d| match d {
                Desired::Deployment(d) => Some(*d),
                _ => None,
            })
            .expect("a Deployment");
        assert_eq!(rebuilt, applied);
    }
}
