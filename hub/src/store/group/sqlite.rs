//! A group on SQLite: set-based statements over JSON arrays of the
//! group's writes, on the one writer connection, in one transaction.

use sqlx::Row;

use super::{LinkWrite, Written, standing_reports};
use crate::store::sql::{SqlStore, ms, not_found};
use crate::store::{Result, StoreError};

/// A group on SQLite, set-based: on the one writer connection, in one
/// transaction, at most seven statements whatever the group's size (one by
/// one, a put took four and each ack and report one, each a round trip to
/// the connection's thread, which a busy machine makes slow). The outcome
/// is the one of [`GROUP_FN_SQL`] on PostgreSQL: the acks first, then the
/// puts in index order, then the reports; the newest-generation check and
/// the sequence numbering of the puts are done here, on what the
/// transaction read (no other writer exists). Puts to unknown clusters
/// fail alone.
///
/// [`GROUP_FN_SQL`]: super::postgres::GROUP_FN_SQL
const SQLITE_ACKS: &str = "UPDATE outbox SET acked_at = a.ts FROM (SELECT value->>'c' AS c, \
     value->>'q' AS q, value->>'t' AS t, value->>'g' AS g, value->>'ts' AS ts \
     FROM json_each($1)) AS a WHERE outbox.cluster_id = a.c AND outbox.sequence = a.q \
     AND outbox.target = a.t AND outbox.generation = a.g AND outbox.acked_at IS NULL \
     RETURNING outbox.cluster_id, outbox.sequence, outbox.target, outbox.generation";
const SQLITE_NEWEST: &str = "SELECT o.cluster_id, o.target, MAX(o.generation) FROM outbox o \
     JOIN (SELECT DISTINCT value->>'c' AS c, value->>'t' AS t FROM json_each($1)) AS x \
     ON o.cluster_id = x.c AND o.target = x.t GROUP BY o.cluster_id, o.target";
const SQLITE_COUNTERS: &str = "SELECT id, next_sequence FROM clusters \
     WHERE id IN (SELECT value FROM json_each($1))";
const SQLITE_SUPERSEDE: &str = "DELETE FROM outbox WHERE acked_at IS NULL AND \
     (cluster_id, target) IN (SELECT value->>'c', value->>'t' FROM json_each($1))";
const SQLITE_INSERT: &str = "INSERT INTO outbox (cluster_id, sequence, target, kind, generation, \
     spec, created_at, acked_at) SELECT value->>'c', value->>'q', value->>'t', value->>'k', \
     value->>'g', value->>'s', value->>'ts', NULL FROM json_each($1)";
const SQLITE_BUMP: &str = "UPDATE clusters SET next_sequence = x.n FROM (SELECT value->>'c' AS c, \
     value->>'n' AS n FROM json_each($1)) AS x WHERE clusters.id = x.c";
const SQLITE_REPORTS: &str = "INSERT INTO spoke_reports (cluster_id, target, kind, generation, \
     body, received_at) SELECT value->>'c', value->>'t', value->>'k', value->>'g', value->>'b', \
     value->>'ts' FROM json_each($1) WHERE true \
     ON CONFLICT (cluster_id, target, kind) DO UPDATE SET generation = excluded.generation, \
     body = excluded.body, received_at = excluded.received_at \
     WHERE spoke_reports.generation <= excluded.generation";

impl SqlStore {
    /// A group on SQLite (see [`SQLITE_ACKS`] and the statements after it).
    pub(super) async fn apply_group_sqlite(
        &self,
        writes: &[&LinkWrite],
    ) -> Result<Vec<Result<Written>>> {
        use std::collections::{BTreeMap, HashMap, HashSet};

        use serde_json::json;
        let array =
            |v: &[serde_json::Value]| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
        let mut results: Vec<Option<Result<Written>>> = writes.iter().map(|_| None).collect();
        // The group reads (newest generations) before it writes: `begin`
        // takes the write lock first on SQLite, so another process's
        // commit is waited for, not a stale snapshot refused.
        let mut tx = self.begin().await?;

        // Acks. A second ack of one item in the group finds it acked, as
        // one by one: only the first of each is sent.
        let mut first_ack: HashMap<(&str, i64, &str, i64), usize> = HashMap::new();
        let mut acks = Vec::new();
        for (i, write) in writes.iter().enumerate() {
            if let LinkWrite::Ack {
                cluster_id,
                sequence,
                target,
                generation,
                now,
            } = write
            {
                results[i] = Some(Ok(Written::Ack(false)));
                let key = (cluster_id.as_str(), *sequence, target.as_str(), *generation);
                if let std::collections::hash_map::Entry::Vacant(e) = first_ack.entry(key) {
                    e.insert(i);
                    acks.push(json!({"c": cluster_id, "q": sequence, "t": target,
                                     "g": generation, "ts": ms(*now)}));
                }
            }
        }
        if !acks.is_empty() {
            let acked: HashSet<(String, i64, String, i64)> = sqlx::query(SQLITE_ACKS)
                .bind(array(&acks))
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| self.classify(e))?
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect();
            for ((cluster_id, sequence, target, generation), i) in &first_ack {
                let key = (
                    (*cluster_id).to_owned(),
                    *sequence,
                    (*target).to_owned(),
                    *generation,
                );
                if acked.contains(&key) {
                    results[*i] = Some(Ok(Written::Ack(true)));
                }
            }
        }

        // Puts, in index order.
        let mut put_keys = Vec::new();
        let mut put_clusters: BTreeMap<&str, Option<i64>> = BTreeMap::new();
        for write in writes {
            if let LinkWrite::Put {
                cluster_id, target, ..
            } = write
            {
                put_keys.push(json!({"c": cluster_id, "t": target}));
                put_clusters.insert(cluster_id.as_str(), None);
            }
        }
        if !put_keys.is_empty() {
            let mut newest: HashMap<(String, String), i64> = sqlx::query(SQLITE_NEWEST)
                .bind(array(&put_keys))
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| self.classify(e))?
                .iter()
                .map(|r| ((r.get(0), r.get(1)), r.get(2)))
                .collect();
            let ids: Vec<&str> = put_clusters.keys().copied().collect();
            for r in sqlx::query(SQLITE_COUNTERS)
                .bind(serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()))
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| self.classify(e))?
            {
                let id: String = r.get(0);
                if let Some(next) = put_clusters.get_mut(id.as_str()) {
                    *next = Some(r.get(1));
                }
            }
            let mut bumped: BTreeMap<&str, i64> = BTreeMap::new();
            // The newest fresh put per target: the one inserted.
            let mut inserts: HashMap<(&str, &str), serde_json::Value> = HashMap::new();
            for (i, write) in writes.iter().enumerate() {
                let LinkWrite::Put {
                    cluster_id,
                    target,
                    kind,
                    generation,
                    spec,
                    now,
                } = write
                else {
                    continue;
                };
                let Some(Some(next)) = put_clusters.get_mut(cluster_id.as_str()) else {
                    results[i] = Some(Err(not_found("cluster", cluster_id)));
                    continue;
                };
                let key = (cluster_id.clone(), target.clone());
                if newest.get(&key).is_some_and(|g| g >= generation) {
                    results[i] = Some(Ok(Written::Put(None)));
                    continue;
                }
                *next += 1;
                bumped.insert(cluster_id.as_str(), *next);
                newest.insert(key, *generation);
                results[i] = Some(Ok(Written::Put(Some(*next))));
                inserts.insert(
                    (cluster_id.as_str(), target.as_str()),
                    json!({"c": cluster_id, "q": *next, "t": target, "k": kind,
                           "g": generation, "s": spec, "ts": ms(*now)}),
                );
            }
            if !inserts.is_empty() {
                let superseded: Vec<serde_json::Value> = inserts
                    .keys()
                    .map(|(c, t)| json!({"c": c, "t": t}))
                    .collect();
                let rows: Vec<serde_json::Value> = inserts.into_values().collect();
                let counters: Vec<serde_json::Value> = bumped
                    .iter()
                    .map(|(c, n)| json!({"c": c, "n": n}))
                    .collect();
                for (sql, arg) in [
                    (SQLITE_SUPERSEDE, array(&superseded)),
                    (SQLITE_INSERT, array(&rows)),
                    (SQLITE_BUMP, array(&counters)),
                ] {
                    let query = sqlx::query(sql).bind(arg);
                    self.run_in(&mut tx, query).await?;
                }
            }
        }

        // Reports: the one that stands last per key when they run in order
        // (the last of the highest generation).
        for (i, write) in writes.iter().enumerate() {
            if let LinkWrite::Report(_) = write {
                results[i] = Some(Ok(Written::Report));
            }
        }
        let reports = standing_reports(writes);
        if !reports.is_empty() {
            let query = sqlx::query(SQLITE_REPORTS).bind(array(&reports));
            self.run_in(&mut tx, query).await?;
        }
        self.commit(tx).await?;
        Ok(results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(StoreError::Corrupt {
                        what: "group commit result",
                        detail: "a write of the group got no result".into(),
                    })
                })
            })
            .collect())
    }
}
