//! A file-backed applier for running a spoke without Kubernetes (local
//! runs, link tests): it durably records each target's desired spec and
//! generation in one JSON file (written atomically, fsynced) before the
//! link acks. In a cluster the Kubernetes executor takes its place and the
//! record is an annotation on the applied objects.

use std::collections::HashMap;
use std::path::PathBuf;

use async_trait::async_trait;
use clawfed_proto::link::v1 as pb;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use super::{ApplyError, WorkApplier};

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Entry {
    generation: i64,
    kind: String,
    spec: serde_json::Value,
    /// How many times this target's spec was written (a re-delivered
    /// generation does not count), so tests can prove "applied once".
    writes: u64,
}

/// The ledger.
#[derive(Debug)]
pub struct FileLedger {
    path: PathBuf,
    entries: Mutex<HashMap<String, Entry>>,
}

impl FileLedger {
    /// Opens (or creates) `dir/ledger.json`.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, ApplyError> {
        let path = dir.into().join("ledger.json");
        let entries = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| ApplyError(format!("ledger {} is corrupt: {e}", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashMap::new(),
            Err(e) => return Err(ApplyError(format!("ledger {}: {e}", path.display()))),
        };
        Ok(Self {
            path,
            entries: Mutex::new(entries),
        })
    }

    fn persist(&self, entries: &HashMap<String, Entry>) -> Result<(), ApplyError> {
        use std::io::Write;
        let err = |e: std::io::Error| ApplyError(format!("ledger {}: {e}", self.path.display()));
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let bytes = serde_json::to_vec(entries).map_err(|e| ApplyError(e.to_string()))?;
        let tmp = self.path.with_extension("json.tmp");
        let mut file = std::fs::File::create(&tmp).map_err(err)?;
        file.write_all(&bytes).map_err(err)?;
        file.sync_all().map_err(err)?;
        std::fs::rename(&tmp, &self.path).map_err(err)
    }

    /// How many times `target`'s spec was written.
    pub async fn writes(&self, target: &str) -> u64 {
        self.entries
            .lock()
            .await
            .get(target)
            .map_or(0, |e| e.writes)
    }
}

#[async_trait]
impl WorkApplier for FileLedger {
    async fn apply(&self, work: &pb::Work) -> Result<pb::WorkResult, ApplyError> {
        let spec: serde_json::Value = serde_json::from_slice(&work.spec)
            .map_err(|e| ApplyError(format!("work spec is not JSON: {e}")))?;
        let mut entries = self.entries.lock().await;
        let current = entries.get(&work.target).map_or(0, |e| e.generation);
        if work.generation <= current {
            // Level-based: an older or repeated generation changes nothing.
            return Ok(pb::WorkResult {
                applied: true,
                reason: format!("generation {} already applied", current),
                kind: work.kind.clone(),
                namespace: String::new(),
                retrying: false,
            });
        }
        let writes = entries.get(&work.target).map_or(0, |e| e.writes) + 1;
        let mut next = entries.clone();
        next.insert(
            work.target.clone(),
            Entry {
                generation: work.generation,
                kind: work.kind.clone(),
                spec,
                writes,
            },
        );
        self.persist(&next)?;
        *entries = next;
        Ok(pb::WorkResult {
            applied: true,
            reason: String::new(),
            kind: work.kind.clone(),
            namespace: String::new(),
            retrying: false,
        })
    }

    async fn applied(&self) -> Result<HashMap<String, i64>, ApplyError> {
        Ok(self
            .entries
            .lock()
            .await
            .iter()
            .map(|(t, e)| (t.clone(), e.generation))
            .collect())
    }

    async fn current_reports(&self) -> Vec<pb::Report> {
        // Everything in the ledger was applied at its recorded generation.
        self.entries
            .lock()
            .await
            .iter()
            .map(|(t, e)| pb::Report {
                target: t.clone(),
                generation: e.generation,
                body: Some(pb::report::Body::WorkResult(pb::WorkResult {
                    applied: true,
                    reason: String::new(),
                    kind: e.kind.clone(),
                    namespace: String::new(),
                    retrying: false,
                })),
            })
            .collect()
    }
}
