//! The `agent_revisions` table: deploys that freeze a numbered revision
//! (with its idempotency key and sealed credentials), phases, placement
//! and the Agent's active revision.

use chrono::Utc;
use sqlx::any::AnyRow;
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates the
// column lists and placeholders defined in this file, never input.
use sqlx::{AssertSqlSafe, Row};

use super::codec::{
    from_json, from_ms, get, is_unique_violation, ms, not_found, parse_enum, to_json,
};
use super::{SqlStore, Tx};
use crate::model::{AgentRevision, DesiredState, RevisionPhase};
use crate::store::{Deployed, Effects, NewRevision, Result, StoreError};

pub(super) const REVISION_COLS: &str = "r.id, n.name AS namespace, a.name AS agent, r.number, r.spec, \
     r.configuration, r.images, r.resolved_cluster, r.phase, r.reason, r.rolled_back_from, \
     r.moved_from, r.progress, r.version, r.requested_by, r.created_at, r.updated_at";
pub(super) const REVISION_FROM: &str = "agent_revisions r JOIN agents a ON a.id = r.agent_id \
     JOIN namespaces n ON n.id = a.namespace_id";

async fn revision_by_id(store: &SqlStore, tx: &mut Tx, id: &str) -> Result<AgentRevision> {
    let sql = format!("SELECT {REVISION_COLS} FROM {REVISION_FROM} WHERE r.id = $1");
    let query = sqlx::query(AssertSqlSafe(sql)).bind(id.to_owned());
    let row = store.one_in(tx, query, "revision", id).await?;
    revision_from_row(&row)
}

/// One attempt of [`Store::deploy`](crate::store::Store::deploy);
/// `Ok(None)` means a concurrent deploy took the next number first and
/// the caller should try again.
async fn try_deploy(store: &SqlStore, rev: &NewRevision, fx: &Effects) -> Result<Option<Deployed>> {
    let now = Utc::now();
    let mut tx = store.begin().await?;
    let ns_id = store.namespace_id(&mut tx, &rev.namespace).await?;
    if let Some(idem) = &rev.idempotency {
        let query = sqlx::query(
            "SELECT fingerprint, revision_id FROM idempotency_keys \
             WHERE namespace_id = $1 AND key = $2",
        )
        .bind(ns_id.clone())
        .bind(idem.key.clone());
        let earlier = store.row_in(&mut tx, query).await?;
        if let Some(row) = earlier {
            let fingerprint: String = row.get(0);
            if fingerprint != idem.fingerprint {
                return Err(StoreError::FailedPrecondition(format!(
                    "Idempotency-Key {:?} was already used for a different request",
                    idem.key
                )));
            }
            let revision = revision_by_id(store, &mut tx, &row.get::<String, _>(1)).await?;
            store.commit(tx).await?;
            return Ok(Some(Deployed {
                revision,
                created: false,
            }));
        }
    }
    let query = sqlx::query(
        "SELECT id, version, latest_revision, desired_state FROM agents \
         WHERE namespace_id = $1 AND name = $2 AND deleted_at IS NULL",
    )
    .bind(ns_id.clone())
    .bind(rev.agent.clone());
    let agent = store.one_in(&mut tx, query, "agent", &rev.agent).await?;
    let agent_id: String = agent.get(0);
    if agent.get::<i64, _>(1) != rev.agent_version {
        return Err(StoreError::Conflict {
            kind: "agent",
            name: rev.agent.clone(),
            expected: rev.agent_version,
        });
    }
    let previous: Option<i64> = agent.get(2);
    if let Some(moved) = &rev.moved {
        // A drain's view may be stale: the Agent was redeployed or
        // stopped since; moving the older revision would undo that.
        let desired: String = agent.get(3);
        if previous != Some(moved.revision) || desired != DesiredState::Running.as_str() {
            return Err(StoreError::FailedPrecondition(format!(
                "agent {:?} changed since the drain read it (latest revision {:?}, {desired}): \
                 revision {} is not moved",
                rev.agent, previous, moved.revision
            )));
        }
    }
    let number = previous.unwrap_or(0) + 1;
    // Compare-and-swap on the revision counter: a concurrent deploy that
    // won the race leaves this update matching no row.
    let query = sqlx::query(
        "UPDATE agents SET latest_revision = $1, desired_state = 'running', updated_at = $2 \
         WHERE id = $3 AND version = $4 AND COALESCE(latest_revision, 0) = $5",
    )
    .bind(number)
    .bind(ms(now))
    .bind(agent_id.clone())
    .bind(rev.agent_version)
    .bind(previous.unwrap_or(0));
    let claimed = store.run_in(&mut tx, query).await?;
    if claimed == 0 {
        return Ok(None);
    }
    let rev_id = rev.id.clone();
    let inserted_revision = sqlx::query(
        "INSERT INTO agent_revisions (id, agent_id, number, spec, configuration, images, \
         resolved_cluster, phase, reason, rolled_back_from, created_at, updated_at, \
         requested_by, moved_from, failover_after_seconds) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, $9, $10, $10, $11, $12, $13)",
    )
    .bind(rev_id.clone())
    .bind(agent_id.clone())
    .bind(number)
    .bind(to_json(&rev.spec)?)
    .bind(rev.configuration.to_string())
    .bind(to_json(&rev.images)?)
    .bind(rev.resolved_cluster.clone())
    .bind(RevisionPhase::Pending.as_str())
    .bind(rev.rolled_back_from)
    .bind(ms(now))
    .bind(rev.requested_by.clone())
    .bind(rev.moved.as_ref().map(|m| m.cluster.clone()))
    .bind(rev.spec.failover.map(|f| i64::from(f.after_seconds)))
    .execute(&mut *tx)
    .await;
    match inserted_revision {
        Ok(_) => {}
        // A concurrent retry of the same request committed this id
        // first; the retry finds it through the idempotency key.
        Err(e) if is_unique_violation(&e) => return Ok(None),
        Err(e) => return Err(store.classify(e)),
    }
    // The Agent's credentials as they are now, still sealed: a later
    // set does not change this revision; the next deploy carries it.
    let query = sqlx::query(
        "INSERT INTO revision_credentials (revision_id, kind, key_id, nonce, ciphertext, \
         version, set_at) SELECT $1, kind, key_id, nonce, ciphertext, version, set_at \
         FROM agent_credentials WHERE agent_id = $2",
    )
    .bind(rev_id.clone())
    .bind(agent_id.clone());
    store.run_in(&mut tx, query).await?;
    if let Some(idem) = &rev.idempotency {
        let inserted = sqlx::query(
            "INSERT INTO idempotency_keys (namespace_id, key, fingerprint, revision_id, \
             created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(ns_id)
        .bind(idem.key.clone())
        .bind(idem.fingerprint.clone())
        .bind(rev_id.clone())
        .bind(ms(now))
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            // A concurrent retry with the same key committed first: drop
            // this attempt; the retry finds that revision.
            Err(e) if is_unique_violation(&e) => return Ok(None),
            Err(e) => return Err(store.classify(e)),
        }
    }
    let mut fx = fx.clone();
    fx.audit
        .detail
        .get_or_insert_with(|| format!("revision {number}"));
    store.write_effects(&mut tx, &fx, now).await?;
    let revision = revision_by_id(store, &mut tx, &rev_id).await?;
    store.commit_effects(tx, &fx).await?;
    Ok(Some(Deployed {
        revision,
        created: true,
    }))
}

pub(super) async fn deploy(store: &SqlStore, rev: &NewRevision, fx: &Effects) -> Result<Deployed> {
    const ATTEMPTS: u32 = 8;
    for attempt in 0..ATTEMPTS {
        if let Some(deployed) = try_deploy(store, rev, fx).await? {
            return Ok(deployed);
        }
        // Another deploy of the same Agent took the next number; a
        // short jittered pause lets the contenders spread out.
        let ceiling_ms = 2u64 << attempt.min(6);
        tokio::time::sleep(std::time::Duration::from_millis(
            rand::random::<u64>() % ceiling_ms,
        ))
        .await;
    }
    Err(StoreError::FailedPrecondition(format!(
        "agent {:?} is being deployed concurrently; retry with the same Idempotency-Key",
        rev.agent
    )))
}

pub(super) async fn list_revisions(
    store: &SqlStore,
    namespace: &str,
    agent: &str,
) -> Result<Vec<AgentRevision>> {
    // Distinguish "no such agent" from "no revisions yet". A deleted
    // Agent's history is still listed.
    sqlx::query(
        "SELECT 1 FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
         WHERE n.name = $1 AND a.name = $2",
    )
    .bind(namespace.to_owned())
    .bind(agent.to_owned())
    .fetch_optional(store.reader())
    .await
    .map_err(|e| store.classify(e))?
    .ok_or_else(|| not_found("agent", agent))?;
    let sql = format!(
        "SELECT {REVISION_COLS} FROM {REVISION_FROM} WHERE n.name = $1 AND a.name = $2 \
         ORDER BY r.number"
    );
    let query = sqlx::query(AssertSqlSafe(sql))
        .bind(namespace.to_owned())
        .bind(agent.to_owned());
    store.read_all(query, revision_from_row).await
}

pub(super) async fn get_revision_by_id(store: &SqlStore, id: &str) -> Result<AgentRevision> {
    let sql = format!("SELECT {REVISION_COLS} FROM {REVISION_FROM} WHERE r.id = $1");
    store
        .read_by_key(sql, id, revision_from_row, "revision")
        .await
}

pub(super) async fn update_revision(
    store: &SqlStore,
    id: &str,
    expected_version: i64,
    phase: RevisionPhase,
    reason: Option<&str>,
    progress: &crate::model::RevisionProgress,
) -> Result<AgentRevision> {
    // One transaction: the phase change and its watch event commit
    // together. The row is read first (at the expected version, so the
    // compare-and-swap below sees the same state) to know whether the
    // phase or reason changed.
    let mut tx = store.begin().await?;
    let query = sqlx::query(
        "SELECT r.phase, r.reason, r.version, a.namespace_id FROM agent_revisions r \
         JOIN agents a ON a.id = r.agent_id WHERE r.id = $1",
    )
    .bind(id.to_owned());
    let before = store.one_in(&mut tx, query, "revision", id).await?;
    let (old_phase, old_reason, version, namespace_id): (String, Option<String>, i64, String) = (
        get(&before, "revision", "phase")?,
        get(&before, "revision", "reason")?,
        get(&before, "revision", "version")?,
        get(&before, "revision", "namespace_id")?,
    );
    let updated = if version == expected_version {
        let query = sqlx::query(
            "UPDATE agent_revisions SET phase = $1, reason = $2, progress = $3, \
             updated_at = $4, version = version + 1 WHERE id = $5 AND version = $6",
        )
        .bind(phase.as_str())
        .bind(reason.map(str::to_owned))
        .bind(to_json(progress)?)
        .bind(ms(Utc::now()))
        .bind(id.to_owned())
        .bind(expected_version);
        store.run_in(&mut tx, query).await?
    } else {
        0
    };
    if updated == 0 {
        // Someone else saved first: the caller's facts are stale.
        return Err(StoreError::Conflict {
            kind: "revision",
            name: id.to_owned(),
            expected: expected_version,
        });
    }
    let saved = revision_by_id(store, &mut tx, id).await?;
    let changed = old_phase != phase.as_str() || old_reason.as_deref() != reason;
    if changed {
        let event = crate::store::NewEvent {
            namespace_id: Some(namespace_id),
            cluster: saved.resolved_cluster.clone(),
            body: crate::model::event::EventBody::RevisionPhase(
                crate::model::event::RevisionPhaseEvent {
                    agent: saved.agent.clone(),
                    number: saved.number,
                    revision_id: saved.id.clone(),
                    phase,
                    previous_phase: RevisionPhase::parse(&old_phase),
                    reason: reason.map(str::to_owned),
                    phases: progress.phases.clone(),
                    durations_ms: progress.durations_ms.clone(),
                },
            ),
        };
        store.insert_event(&mut tx, &event, Utc::now()).await?;
    }
    store.commit(tx).await?;
    if changed {
        store.events_committed();
    }
    Ok(saved)
}

pub(super) async fn place_revision(store: &SqlStore, id: &str, cluster: &str) -> Result<()> {
    let query = sqlx::query(
        "UPDATE agent_revisions SET resolved_cluster = $1 WHERE id = $2 \
         AND resolved_cluster IS NULL",
    )
    .bind(cluster.to_owned())
    .bind(id.to_owned());
    store.run(query).await?;
    Ok(())
}

pub(super) async fn activate_revision(
    store: &SqlStore,
    namespace: &str,
    agent: &str,
    number: i64,
) -> Result<bool> {
    // Only while the Agent still wants this revision: a stop or a newer
    // deploy that landed first wins over a pass that read older facts.
    let query = sqlx::query(
        "UPDATE agents SET active_revision = $1, updated_at = $2 WHERE name = $3 AND \
         namespace_id = (SELECT id FROM namespaces WHERE name = $4) AND \
         desired_state = 'running' AND latest_revision = $1",
    )
    .bind(number)
    .bind(ms(Utc::now()))
    .bind(agent.to_owned())
    .bind(namespace.to_owned());
    let updated = store.run(query).await?;
    Ok(updated == 1)
}

pub(super) async fn clear_active_revision(
    store: &SqlStore,
    namespace: &str,
    agent: &str,
) -> Result<()> {
    let query = sqlx::query(
        "UPDATE agents SET active_revision = NULL, updated_at = $1 WHERE name = $2 AND \
         namespace_id = (SELECT id FROM namespaces WHERE name = $3)",
    )
    .bind(ms(Utc::now()))
    .bind(agent.to_owned())
    .bind(namespace.to_owned());
    store.run(query).await?;
    Ok(())
}

pub(super) async fn get_revision(
    store: &SqlStore,
    namespace: &str,
    agent: &str,
    number: i64,
) -> Result<AgentRevision> {
    let sql = format!(
        "SELECT {REVISION_COLS} FROM {REVISION_FROM} \
         WHERE n.name = $1 AND a.name = $2 AND r.number = $3"
    );
    let query = sqlx::query(AssertSqlSafe(sql))
        .bind(namespace.to_owned())
        .bind(agent.to_owned())
        .bind(number);
    store
        .read_one(
            query,
            revision_from_row,
            "revision",
            &format!("{agent}/{number}"),
        )
        .await
}

pub(super) fn revision_from_row(r: &AnyRow) -> Result<AgentRevision> {
    const W: &str = "revision";
    let phase: String = get(r, W, "phase")?;
    Ok(AgentRevision {
        id: get(r, W, "id")?,
        namespace: get(r, W, "namespace")?,
        agent: get(r, W, "agent")?,
        number: get(r, W, "number")?,
        spec: from_json(W, &get::<String>(r, W, "spec")?)?,
        configuration: from_json(W, &get::<String>(r, W, "configuration")?)?,
        images: from_json(W, &get::<String>(r, W, "images")?)?,
        resolved_cluster: get(r, W, "resolved_cluster")?,
        phase: parse_enum(W, &phase, RevisionPhase::parse)?,
        reason: get(r, W, "reason")?,
        rolled_back_from: get(r, W, "rolled_back_from")?,
        moved_from: get(r, W, "moved_from")?,
        progress: from_json(W, &get::<String>(r, W, "progress")?)?,
        version: get(r, W, "version")?,
        requested_by: get(r, W, "requested_by")?,
        readiness: None,
        drift: None,
        created_at: from_ms(get(r, W, "created_at")?),
        updated_at: from_ms(get(r, W, "updated_at")?),
    })
}
