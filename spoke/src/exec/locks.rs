//! Per-target locks: work on one target is serialized, and an entry lives
//! only while someone holds or waits for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Per-target locks that do not outlive their use: an entry is removed when
/// its last holder lets go, so the map holds only targets being worked on.
#[derive(Default)]
pub(super) struct TargetLocks {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Holds one target's lock; removes the map entry when no one else waits.
pub struct TargetGuard<'a> {
    owner: &'a TargetLocks,
    target: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl TargetLocks {
    pub(super) async fn lock(&self, target: &str) -> TargetGuard<'_> {
        let m = {
            let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
            locks.entry(target.to_string()).or_default().clone()
        };
        TargetGuard {
            owner: self,
            target: target.to_string(),
            guard: Some(m.lock_owned().await),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for TargetGuard<'_> {
    fn drop(&mut self) {
        // Release first, then drop the entry if only the map still holds it
        // (a waiter holds its own clone of the Arc, so it keeps the entry).
        self.guard.take();
        let mut locks = self
            .owner
            .locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if locks
            .get(&self.target)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            locks.remove(&self.target);
        }
    }
}
