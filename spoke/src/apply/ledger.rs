//! The applied-generation ledger of a data-plane namespace: one ConfigMap
//! (`clawfed-ledger`) whose entries map a Harness work target to the
//! generation the spoke applied. Spokes before the desired-state records
//! wrote it on every apply; the applied generation now lives in each
//! target's own record (`drift::desired`). The ledger is still created and
//! read back (see `Executor::applied`), so a cluster upgraded from an older
//! spoke keeps what it recorded.

use std::collections::HashMap;

use clawfed_kube::RequestError;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{Result, owner_labels};

/// Name of the ledger ConfigMap.
pub const LEDGER: &str = "clawfed-ledger";

#[derive(Debug, Deserialize)]
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
        Err(source) => {
            let namespace = api.namespace().unwrap_or_default();
            Err(RequestError::new("get", "ConfigMap", namespace, LEDGER, source).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

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
