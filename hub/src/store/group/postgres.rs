//! A group on PostgreSQL: all its puts, acks and reports in one call of
//! the `clawfed_link_group` function, one round trip.

use sqlx::Row;

use super::{LinkWrite, Written, standing_reports};
use crate::store::sql::{SqlStore, ms, not_found};
use crate::store::{Result, StoreError};

/// A whole group on PostgreSQL in ONE round trip: the function of
/// migration 0015, called alone, so it is its own transaction (it used to
/// be BEGIN, a lock statement, the group statement and COMMIT: four round
/// trips, each a wake-up of the server and of the hub on a busy machine).
/// `$1` puts, `$2` acks, `$3` reports, each a JSON array of records (`i` is
/// the write's index in the group). The function first locks the put
/// clusters' rows in id order (two groups never deadlock on them; NO KEY
/// UPDATE, so reports inserted meanwhile do not wait), then runs one
/// set-based statement in a fresh snapshot, which therefore sees every put
/// to these clusters committed before, as `clawfed_outbox_put` does. The
/// result is as if the group's acks ran first, then its puts in index
/// order, then its reports:
/// - a put is fresh when its generation is above the newest stored for
///   its target and above every earlier put of the target in the group;
///   fresh puts get the cluster's next sequences in index order (the
///   counter bumped once per cluster), the newest fresh put of a target is
///   inserted and every unacked item of the target is deleted, except one
///   this group acks (already acked when the put runs);
/// - an ack sets `acked_at` on its item if unacked;
/// - reports are upserted unless the stored one is newer (the caller sends
///   one per target and kind: data-modifying statements may not touch a
///   row twice).
///
/// Rows: `(0, i, sequence)` per fresh put, `(1, i, 0)` per ack that acked,
/// `(2, i, 0)` per put to a cluster that does not exist (nothing written).
pub(super) const GROUP_FN_SQL: &str =
    "SELECT w, i, v FROM clawfed_link_group($1::json, $2::json, $3::json)";

impl SqlStore {
    /// A group on PostgreSQL: one call of `clawfed_link_group`
    /// ([`GROUP_FN_SQL`]). Puts to unknown clusters fail alone.
    pub(super) async fn apply_group_pg(
        &self,
        writes: &[&LinkWrite],
    ) -> Result<Vec<Result<Written>>> {
        use serde_json::json;
        let mut results: Vec<Option<Result<Written>>> = writes.iter().map(|_| None).collect();
        let mut puts = Vec::new();
        let mut acks = Vec::new();
        for (i, write) in writes.iter().enumerate() {
            match write {
                LinkWrite::Put {
                    cluster_id,
                    target,
                    kind,
                    generation,
                    spec,
                    now,
                } => puts.push(json!({"i": i, "c": cluster_id, "t": target, "k": kind,
                                      "g": generation, "s": spec, "ts": ms(*now)})),
                LinkWrite::Ack {
                    cluster_id,
                    sequence,
                    target,
                    generation,
                    now,
                } => acks.push(json!({"i": i, "c": cluster_id, "q": sequence, "t": target,
                                      "g": generation, "ts": ms(*now)})),
                LinkWrite::Report(_) => results[i] = Some(Ok(Written::Report)),
            }
        }
        let reports = standing_reports(writes);
        let array =
            |v: &[serde_json::Value]| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
        let rows = sqlx::query(GROUP_FN_SQL)
            .bind(array(&puts))
            .bind(array(&acks))
            .bind(array(&reports))
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.classify(e))?;
        for row in &rows {
            let (what, i, value): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
            let index = usize::try_from(i).ok().filter(|i| *i < writes.len());
            match (what, index) {
                (0, Some(i)) => results[i] = Some(Ok(Written::Put(Some(value)))),
                (1, Some(i)) => results[i] = Some(Ok(Written::Ack(true))),
                (2, Some(i)) => {
                    let LinkWrite::Put { cluster_id, .. } = writes[i] else {
                        return Err(group_result_corrupt(what, i as i64, value));
                    };
                    results[i] = Some(Err(not_found("cluster", cluster_id)));
                }
                _ => return Err(group_result_corrupt(what, i, value)),
            }
        }
        // What the statement did not name: stale puts and acks that found
        // nothing unacked.
        Ok(writes
            .iter()
            .zip(results)
            .map(|(write, result)| {
                result.unwrap_or(match write {
                    LinkWrite::Put { .. } => Ok(Written::Put(None)),
                    LinkWrite::Ack { .. } => Ok(Written::Ack(false)),
                    LinkWrite::Report(_) => Ok(Written::Report),
                })
            })
            .collect())
    }
}

fn group_result_corrupt(what: i64, i: i64, value: i64) -> StoreError {
    StoreError::Corrupt {
        what: "group commit result",
        detail: format!("row ({what}, {i}, {value}) names no write of the group"),
    }
}
