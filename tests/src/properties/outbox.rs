//! Outbox supersession: the newest generation per target always wins and
//! nothing older is delivered after it.
//!
//! Supersession lives in SQL (`Store::outbox_put` deletes the target's
//! older unacked items and refuses a generation at or below one already
//! put), so the property runs against the real store, SQLite and
//! PostgreSQL, with a bounded case count (one cluster per case; a tokio
//! runtime inside the property). The session is modelled as the link's
//! (`hub/src/link/session.rs`): `dispatch` sends pending items after the
//! last sequence sent, the spoke acks some of them, and a reconnect acks
//! what the spoke reports applied in its Hello and resends from the start.
//! The spoke applies a delivered item unless it already applied a newer
//! generation (as `Executor::apply`).
//!
//! Checked after every operation: a put succeeds exactly when its
//! generation is above every generation put for the target; the pending
//! items hold at most one item per target, the newest put; every delivered
//! item is the newest generation put for its target at that moment and is
//! never older than one delivered before. At the end, after a reconnect
//! and a full drain, the spoke holds the newest generation of every target.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use clawfed_hub::model::ConnectionState;
use clawfed_hub::store::{ClusterRecord, Store};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

use super::{Property, report};
use crate::hub::Backend;

/// On SQLite (a temp file).
pub const SQLITE: Property = Property {
    name: "outbox_supersession_sqlite",
    suite_cases: 24,
    run: |runner| run_sql(runner, Backend::Sqlite),
};

/// On the PostgreSQL test server (`CLAWFED_TEST_DATABASE_URL`).
pub const POSTGRES: Property = Property {
    name: "outbox_supersession_postgres",
    suite_cases: 16,
    run: |runner| run_sql(runner, Backend::Postgres),
};

/// One pending outbox item, as the session sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub sequence: i64,
    pub target: String,
    pub generation: i64,
}

/// The outbox operations the link uses, for one cluster.
pub trait Outbox {
    fn put(&self, target: &str, generation: i64) -> Option<i64>;
    fn pending(&self, after_sequence: i64, limit: i64) -> Vec<Item>;
    fn ack(&self, item: &Item) -> bool;
    fn ack_applied(&self, applied: &[(String, i64)]);
}

/// One operation of the run.
#[derive(Debug, Clone)]
pub enum Op {
    /// The hub puts `generation` for target number `target`.
    Put { target: usize, generation: i64 },
    /// The session sends up to `window` items after the last one sent.
    Dispatch { window: i64 },
    /// The spoke acks the in-flight item at this index (modulo).
    Ack { nth: usize },
    /// The link drops and the spoke reconnects (Hello with what it applied).
    Reconnect,
}

const TARGETS: [&str; 3] = ["namespace/ns-1", "harness/ns-1/bot/1", "harness/ns-1/bot/2"];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..TARGETS.len(), 1i64..7)
            .prop_map(|(target, generation)| Op::Put { target, generation }),
        3 => (1i64..4).prop_map(|window| Op::Dispatch { window }),
        2 => any::<usize>().prop_map(|nth| Op::Ack { nth }),
        1 => Just(Op::Reconnect),
    ]
}

/// Any run of up to 30 operations.
pub fn ops() -> impl Strategy<Value = Vec<Op>> {
    vec(op(), 1..30)
}

/// The session and spoke around one outbox.
#[derive(Default)]
struct Session {
    last_sent: i64,
    in_flight: Vec<Item>,
    /// Newest generation put per target.
    newest_put: BTreeMap<String, i64>,
    /// Newest generation delivered per target.
    newest_delivered: BTreeMap<String, i64>,
    /// What the spoke applied per target.
    applied: BTreeMap<String, i64>,
}

impl Session {
    fn dispatch(&mut self, outbox: &dyn Outbox, window: i64) -> Result<(), TestCaseError> {
        for item in outbox.pending(self.last_sent, window) {
            let newest = self.newest_put.get(&item.target).copied();
            prop_assert_eq!(
                Some(item.generation),
                newest,
                "delivered {:?} while generation {:?} is the newest put",
                item,
                newest
            );
            if let Some(before) = self.newest_delivered.get(&item.target) {
                prop_assert!(
                    item.generation >= *before,
                    "delivered {item:?} after generation {before}"
                );
            }
            self.newest_delivered
                .insert(item.target.clone(), item.generation);
            let have = self.applied.entry(item.target.clone()).or_insert(0);
            *have = (*have).max(item.generation);
            self.last_sent = item.sequence;
            self.in_flight.push(item);
        }
        Ok(())
    }

    fn reconnect(&mut self, outbox: &dyn Outbox) {
        let applied: Vec<(String, i64)> =
            self.applied.iter().map(|(t, g)| (t.clone(), *g)).collect();
        outbox.ack_applied(&applied);
        self.last_sent = 0;
        self.in_flight.clear();
    }
}

/// The property for one run against `outbox` (a fresh cluster's).
pub fn check_ops(outbox: &dyn Outbox, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut s = Session::default();
    for op in ops {
        match op {
            Op::Put { target, generation } => {
                let t = TARGETS[*target];
                let newest = s.newest_put.get(t).copied();
                let put = outbox.put(t, *generation);
                let newer = newest.is_none_or(|n| *generation > n);
                prop_assert_eq!(
                    put.is_some(),
                    newer,
                    "put of {} generation {} with {:?} put before",
                    t,
                    generation,
                    newest
                );
                if newer {
                    s.newest_put.insert(t.to_owned(), *generation);
                }
            }
            Op::Dispatch { window } => s.dispatch(outbox, *window)?,
            Op::Ack { nth } => {
                if !s.in_flight.is_empty() {
                    let item = s.in_flight.remove(nth % s.in_flight.len());
                    outbox.ack(&item);
                }
            }
            Op::Reconnect => s.reconnect(outbox),
        }
        let pending = outbox.pending(0, 1000);
        let mut per_target: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        for item in &pending {
            per_target
                .entry(item.target.as_str())
                .or_default()
                .push(item.generation);
        }
        for (t, gens) in per_target {
            prop_assert_eq!(
                gens.clone(),
                vec![s.newest_put[t]],
                "pending items of {} are {:?}, not just the newest",
                t,
                gens
            );
        }
    }
    // A reconnect and a full drain bring the newest of everything.
    s.reconnect(outbox);
    s.dispatch(outbox, 1000)?;
    for (t, g) in &s.newest_put {
        prop_assert_eq!(
            s.applied.get(t),
            Some(g),
            "the spoke does not hold the newest generation of {}",
            t
        );
    }
    Ok(())
}

/// The real store's outbox of one cluster, driven from sync code.
struct SqlOutbox<'a> {
    rt: &'a tokio::runtime::Runtime,
    store: Arc<dyn Store>,
    cluster_id: String,
}

impl Outbox for SqlOutbox<'_> {
    fn put(&self, target: &str, generation: i64) -> Option<i64> {
        self.rt
            .block_on(self.store.outbox_put(
                &self.cluster_id,
                target,
                "harness.apply",
                generation,
                "{}",
            ))
            .expect("outbox_put")
    }

    fn pending(&self, after_sequence: i64, limit: i64) -> Vec<Item> {
        self.rt
            .block_on(
                self.store
                    .outbox_pending(&self.cluster_id, after_sequence, limit),
            )
            .expect("outbox_pending")
            .into_iter()
            .map(|i| Item {
                sequence: i.sequence,
                target: i.target,
                generation: i.generation,
            })
            .collect()
    }

    fn ack(&self, item: &Item) -> bool {
        self.rt
            .block_on(self.store.outbox_ack(
                &self.cluster_id,
                item.sequence,
                &item.target,
                item.generation,
                chrono::Utc::now(),
            ))
            .expect("outbox_ack")
    }

    fn ack_applied(&self, applied: &[(String, i64)]) {
        self.rt
            .block_on(
                self.store
                    .outbox_ack_applied(&self.cluster_id, applied, chrono::Utc::now()),
            )
            .expect("outbox_ack_applied");
    }
}

fn run_sql(runner: &mut TestRunner, backend: Backend) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    // Drops (the pool) happen inside the runtime.
    let _enter = rt.enter();
    let db = rt.block_on(crate::db::open(backend));
    let store = db.dyn_store();
    let clusters = AtomicU64::new(0);
    report(runner.run(&ops(), |ops| {
        let name = format!("prop-{}", clusters.fetch_add(1, Ordering::Relaxed));
        let cluster = rt
            .block_on(store.upsert_cluster(&ClusterRecord {
                name,
                labels: Default::default(),
                capabilities: vec![],
                certificate_serials: vec![],
                connection_state: ConnectionState::Online,
                last_seen: None,
                version: "proptest".into(),
            }))
            .expect("upsert cluster");
        let outbox = SqlOutbox {
            rt: &rt,
            store: store.clone(),
            cluster_id: cluster.id,
        };
        check_ops(&outbox, &ops)
    }))
}

/// An in-memory outbox with the store's rules; `supersede: false` is a
/// deliberately broken copy that keeps older unacked items when a newer
/// generation is put. The property must reject it.
#[derive(Debug, Default)]
pub struct MemoryOutbox {
    pub supersede: bool,
    /// Items with their acked flag.
    items: Mutex<Vec<(Item, bool)>>,
    /// The cluster's sequence counter (never reused, as the store's).
    next_sequence: AtomicU64,
}

impl MemoryOutbox {
    pub fn new(supersede: bool) -> Self {
        MemoryOutbox {
            supersede,
            items: Mutex::default(),
            next_sequence: AtomicU64::new(1),
        }
    }
}

impl Outbox for MemoryOutbox {
    fn put(&self, target: &str, generation: i64) -> Option<i64> {
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        if items
            .iter()
            .any(|(i, _)| i.target == target && i.generation >= generation)
        {
            return None;
        }
        if self.supersede {
            items.retain(|(i, acked)| *acked || i.target != target);
        }
        let sequence = self.next_sequence.fetch_add(1, Ordering::Relaxed) as i64;
        items.push((
            Item {
                sequence,
                target: target.to_owned(),
                generation,
            },
            false,
        ));
        Some(sequence)
    }

    fn pending(&self, after_sequence: i64, limit: i64) -> Vec<Item> {
        let items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<Item> = items
            .iter()
            .filter(|(i, acked)| !acked && i.sequence > after_sequence)
            .map(|(i, _)| i.clone())
            .collect();
        out.sort_by_key(|i| i.sequence);
        out.truncate(limit.max(0) as usize);
        out
    }

    fn ack(&self, item: &Item) -> bool {
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        match items.iter_mut().find(|(i, acked)| !acked && i == item) {
            Some((_, acked)) => {
                *acked = true;
                true
            }
            None => false,
        }
    }

    fn ack_applied(&self, applied: &[(String, i64)]) {
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        for (i, acked) in items.iter_mut() {
            if applied
                .iter()
                .any(|(t, g)| *t == i.target && i.generation <= *g)
            {
                *acked = true;
            }
        }
    }
}

/// Runs the property against in-memory outboxes (`supersede` as given).
pub fn run_memory(runner: &mut TestRunner, supersede: bool) -> Result<(), String> {
    report(runner.run(&ops(), |ops| check_ops(&MemoryOutbox::new(supersede), &ops)))
}
