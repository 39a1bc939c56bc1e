//! The durable record of the desired state the spoke applied: one Secret
//! per work target in the target's data-plane namespace, written by the
//! executor when the work succeeded (before the ledger entry and the ack),
//! holding the work's kind, generation and full spec. A Secret because a
//! Harness spec carries the model credential. Drift repair rebuilds the
//! desired objects from it, never from memory, and a restarted spoke reads
//! it back through its watch.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use serde::{Deserialize, Serialize};

use crate::apply::{self, Error, Result, ledger, owner_labels, ssa};

/// Label marking a desired-state record (value `true`).
pub const LABEL: &str = "clawfed.io/desired-state";
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
    /// The work spec (the JSON of `Work.spec`).
    pub spec: serde_json::Value,
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
pub fn from_work(
    work: &clawfed_proto::link::v1::Work,
    namespace: &str,
    adopted: bool,
) -> Result<Record> {
    Ok(Record {
        target: work.target.clone(),
        generation: work.generation,
        kind: work.kind.clone(),
        namespace: namespace.into(),
        adopted,
        spec: serde_json::from_slice(&work.spec)
            .map_err(|e| Error::Invalid(format!("work spec is not JSON: {e}")))?,
    })
}

/// Durably writes `record` (server-side apply, so it replaces the last one).
pub async fn record(api: &Api<Secret>, tenant: &str, record: &Record) -> Result<()> {
    ssa(api, &object(tenant, record)?).await.map(|_| ())
}

/// Reads `target`'s record from the apiserver; `None` when there is none.
pub async fn load(api: &Api<Secret>, target: &str) -> Result<Option<Record>> {
    let n = name(target);
    match api.get_opt(&n).await {
        Ok(s) => Ok(s.as_ref().and_then(parse)),
        Err(source) => Err(apply::Error::Kube {
            action: "get",
            kind: "Secret",
            namespace: api.namespace().unwrap_or_default().into(),
            name: n,
            source: Box::new(source),
        }),
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
        };
        let s = object("t", &r).expect("object");
        assert_eq!(s.metadata.labels.as_ref().expect("labels")[LABEL], "true");
        assert!(s.metadata.name.as_deref().expect("name").len() <= 63);
        assert_eq!(parse(&s), Some(r));
    }
}
