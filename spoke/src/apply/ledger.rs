//! The applied-generation ledger of a data-plane namespace: one ConfigMap
//! (`clawfed-ledger`) whose entries map a Harness work target to the
//! generation the spoke applied. Stop and retire delete the objects that
//! carry the generation annotations, so the ledger is what survives them; a
//! restarted spoke reads it back (see `Executor::applied`).
//!
//! Entries are written with a JSON merge patch (field manager
//! `clawfed-spoke`, operation Update) so concurrent entries never clobber
//! each other and a later server-side apply of the (empty) ConfigMap never
//! drops them.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::Patch;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Error, Result, is_not_found, merge_params, owner_labels, ssa};

/// Name of the ledger ConfigMap.
pub const LEDGER: &str = "clawfed-ledger";

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    target: String,
    generation: i64,
}

/// The ConfigMap key of a target (ConfigMap keys cannot hold `/`).
pub fn key(target: &str) -> String {
    let digest = Sha256::digest(target.as_bytes());
    format!("t-{}", &hex::encode(digest)[..32])
}

/// The empty ledger object.
pub fn ledger_object(namespace: &str, tenant: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(LEDGER.into()),
            namespace: Some(namespace.into()),
            labels: Some(owner_labels(tenant)),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Reads a ledger's entries (target -> generation); malformed entries are skipped.
pub fn entries(cm: &ConfigMap) -> HashMap<String, i64> {
    cm.data
        .iter()
        .flatten()
        .filter_map(|(_, v)| serde_json::from_str::<Entry>(v).ok())
        .map(|e| (e.target, e.generation))
        .collect()
}

/// Loads the ledger of `namespace`; an absent ledger is empty.
pub async fn load(api: &Api<ConfigMap>) -> Result<HashMap<String, i64>> {
    match api.get_opt(LEDGER).await {
        Ok(Some(cm)) => Ok(entries(&cm)),
        Ok(None) => Ok(HashMap::new()),
        Err(source) => Err(Error::Kube {
            action: "get",
            kind: "ConfigMap",
            namespace: api.namespace().unwrap_or_default().into(),
            name: LEDGER.into(),
            source: Box::new(source),
        }),
    }
}

/// Durably records `target` at `generation` (creating the ledger if needed).
pub async fn record(
    api: &Api<ConfigMap>,
    tenant: &str,
    target: &str,
    generation: i64,
) -> Result<()> {
    let value = serde_json::to_string(&Entry {
        target: target.into(),
        generation,
    })
    .map_err(|e| Error::Invalid(format!("ledger entry: {e}")))?;
    let patch = ConfigMap {
        data: Some(BTreeMap::from([(key(target), value)])),
        ..Default::default()
    };
    let namespace = api.namespace().unwrap_or_default().to_string();
    let kube_err = |source| Error::Kube {
        action: "patch",
        kind: "ConfigMap",
        namespace: namespace.clone(),
        name: LEDGER.into(),
        source: Box::new(source),
    };
    match api
        .patch(LEDGER, &merge_params(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => {
            ssa(api, &ledger_object(&namespace, tenant)).await?;
            api.patch(LEDGER, &merge_params(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(kube_err)
        }
        Err(e) => Err(kube_err(e)),
    }
}

/// Removes `target`'s entry (merge patch with a null value); absent is fine.
pub async fn forget(api: &Api<ConfigMap>, target: &str) -> Result<()> {
    let patch = serde_json::json!({ "data": { key(target): null } });
    match api
        .patch(LEDGER, &merge_params(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(source) => Err(Error::Kube {
            action: "patch",
            kind: "ConfigMap",
            namespace: api.namespace().unwrap_or_default().into(),
            name: LEDGER.into(),
            source: Box::new(source),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_configmap_safe_and_entries_round_trip() {
        let k = key("harness/ns-1/a1/3");
        assert!(k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
        let mut cm = ledger_object("oce-x", "t");
        cm.data = Some(BTreeMap::from([
            (
                k,
                r#"{"target":"harness/ns-1/a1/3","generation":4}"#.to_string(),
            ),
            ("junk".into(), "not json".into()),
        ]));
        assert_eq!(
            entries(&cm),
            HashMap::from([("harness/ns-1/a1/3".to_string(), 4)])
        );
    }
}
