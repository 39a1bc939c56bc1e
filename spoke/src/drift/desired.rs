//! The durable record of the desired state the spoke applied: one Secret
//! per work target in the target's data-plane namespace, written by the
//! executor when the work succeeded (before the ack), holding the work's
//! kind, generation and spec, and the generation whose effects are on the
//! cluster (what a restarted spoke reports applied). Drift repair rebuilds
//! the desired objects from it, never from memory, and a restarted spoke
//! reads it back through its watch.
//!
//! One Secret per target, not one shared ledger object: every concurrent
//! apply wrote the namespace's ledger ConfigMap, which grew with each entry,
//! so the applies queued on one object and each write copied all entries.
//!
//! The spec is kept without the Harness credential: the credential Secret
//! stays the only place a credential is written in the execution cluster.
//! The record holds a SHA-256 digest per credential key instead, so drift of
//! the credential Secret is still noticed; restoring it takes the hub's
//! resend (the spoke asks for one, see `DriftReport.resend`).

use std::collections::BTreeMap;

use clawfed_kube::RequestError;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use serde::{Deserialize, Serialize};

use crate::apply::{Error, Result, ledger, owner_labels, ssa};

/// Label marking a desired-state record (value `true`).
pub const LABEL: &str = clawfed_proto::labels::DESIRED_STATE;
/// The Secret key holding the [`Record`] (JSON).
pub const KEY: &str = "record";

/// What the spoke applied for one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The work target.
    pub target: String,
    /// The applied generation.
    pub generation: i64,
    /// The work kind (`harness.apply`, `harness.stop`, `namespace.ensure`, ...).
    pub kind: String,
    /// The physical namespace the work was applied in.
    pub namespace: String,
    /// For namespace work: the namespace was adopted (operator-named).
    #[serde(default)]
    pub adopted: bool,
    /// The work spec (the JSON of `Work.spec`), without a Harness
    /// credential's values.
    pub spec: serde_json::Value,
    /// Per key of the Harness credential: [`credential_digest`] of its value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub credential_digests: BTreeMap<String, String>,
    /// The generation whose effects are on the cluster: `generation` once
    /// the work has run; the earlier applied generation (or none) while a
    /// stop that says "stopped" first is still running. Records written
    /// before this field kept it in the namespace's ledger ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_generation: Option<i64>,
    /// A `harness.stop` the spoke wrote itself: it fenced the Harness when
    /// its execution lease lapsed (`crate::failover`). It stays stopped
    /// until the hub's own stop or retirement replaces the record.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fenced: bool,
}

/// The spec field holding the Harness credential (`HarnessWork.credential`).
const CREDENTIAL_FIELD: &str = "credential";

/// How a credential value is recorded: `sha256:<hex>`, never the value.
pub fn credential_digest(value: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("sha256:{}", hex::encode(Sha256::digest(value)))
}

/// The Secret name of `target`'s record.
pub fn name(target: &str) -> String {
    format!("clawfed-desired-{}", ledger::key(target))
}

/// The record Secret.
pub fn object(tenant: &str, record: &Record) -> Result<Secret> {
    let json = serde_json::to_vec(record)
        .map_err(|e| Error::Invalid(format!("desired-state record: {e}")))?;
    let mut labels = owner_labels(tenant);
    labels.insert(LABEL.into(), "true".into());
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(name(&record.target)),
            namespace: Some(record.namespace.clone()),
            labels: Some(labels),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(KEY.to_string(), ByteString(json))])),
        ..Default::default()
    })
}

/// Reads a record Secret; `None` when it is not one (or is malformed).
pub fn parse(secret: &Secret) -> Option<Record> {
    let bytes = secret.data.as_ref()?.get(KEY)?;
    serde_json::from_slice(&bytes.0).ok()
}

/// Builds a record from a piece of work.
/// The credential is taken out of the spec and only its digests are kept.
/// `applied_generation`: see [`Record::applied_generation`].
pub fn from_work(
    work: &clawfed_proto::link::v1::Work,
    namespace: &str,
    adopted: bool,
    applied_generation: Option<i64>,
) -> Result<Record> {
    let mut spec: serde_json::Value = serde_json::from_slice(&work.spec)
        .map_err(|e| Error::Invalid(format!("work spec is not JSON: {e}")))?;
    let credential = spec
        .as_object_mut()
        .and_then(|o| o.remove(CREDENTIAL_FIELD));
    let credential_digests = match credential {
        Some(serde_json::Value::Object(values)) => values
            .into_iter()
            .map(|(k, v)| {
                let digest = match &v {
                    serde_json::Value::String(s) => credential_digest(s.as_bytes()),
                    other => credential_digest(other.to_string().as_bytes()),
                };
                (k, digest)
            })
            .collect(),
        _ => BTreeMap::new(),
    };
    Ok(Record {
        target: work.target.clone(),
        generation: work.generation,
        kind: work.kind.clone(),
        namespace: namespace.into(),
        adopted,
        spec,
        credential_digests,
        applied_generation,
        fenced: false,
    })
}

/// Durably writes `record` (server-side apply, so it replaces the last one).
pub async fn record(api: &Api<Secret>, tenant: &str, record: &Record) -> Result<()> {
    ssa(api, &object(tenant, record)?).await.map(|_| ())
}

/// Every record in `api`'s namespace (unreadable ones left out).
pub async fn all(api: &Api<Secret>) -> Result<Vec<Record>> {
    let lp = kube::api::ListParams::default().labels(&format!("{LABEL}=true"));
    let namespace = api.namespace().unwrap_or_default();
    let list = api
        .list(&lp)
        .await
        .map_err(|source| RequestError::new("list", "Secret", namespace, "", source))?;
    Ok(list.items.iter().filter_map(parse).collect())
}

/// Reads `target`'s record from the apiserver; `None` when there is none.
pub async fn load(api: &Api<Secret>, target: &str) -> Result<Option<Record>> {
    let n = name(target);
    match api.get_opt(&n).await {
        Ok(s) => Ok(s.as_ref().and_then(parse)),
        Err(source) => {
            let namespace = api.namespace().unwrap_or_default();
            Err(RequestError::new("get", "Secret", namespace, &n, source).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_through_its_secret() {
        let r = Record {
            target: "harness/id/a1/3".into(),
            generation: 4,
            kind: "harness.apply".into(),
            namespace: "oce-x".into(),
            adopted: false,
            spec: serde_json::json!({"agent": "a1"}),
            credential_digests: BTreeMap::from([("K".into(), credential_digest(b"v"))]),
            applied_generation: Some(4),
            fenced: false,
        };
        let s = object("t", &r).expect("object");
        assert_eq!(s.metadata.labels.as_ref().expect("labels")[LABEL], "true");
        assert!(s.metadata.name.as_deref().expect("name").len() <= 63);
        assert_eq!(parse(&s), Some(r));
    }

    /// A Harness credential never reaches the record: only its digest.
    #[test]
    fn a_harness_record_keeps_digests_of_the_credential_not_its_value() {
        let spec = serde_json::json!({
            "agent": "a1",
            "credential": {"CLAWFED_MODEL_API_KEY": "sk-live-secret-value"},
        });
        let work = clawfed_proto::link::v1::Work {
            sequence: 1,
            target: "harness/id/a1/1".into(),
            generation: 1,
            kind: "harness.apply".into(),
            spec: serde_json::to_vec(&spec).expect("json"),
        };
        let r = from_work(&work, "oce-x", false, Some(1)).expect("record");
        let secret = object("t", &r).expect("object");
        let stored = String::from_utf8(secret.data.expect("data")[KEY].0.clone()).expect("utf8");
        assert!(!stored.contains("sk-live-secret-value"), "{stored}");
        assert!(r.spec.get("credential").is_none());
        assert_eq!(
            r.credential_digests["CLAWFED_MODEL_API_KEY"],
            credential_digest(b"sk-live-secret-value")
        );
        assert!(r.credential_digests["CLAWFED_MODEL_API_KEY"].starts_with("sha256:"));
    }
}
