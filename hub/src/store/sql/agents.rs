//! The `agents` table: Agents, their desired state, and the pipeline pass
//! lease that lets one pass at a time work on an Agent.

use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates the
// column lists and placeholders defined in this file, never input.
use sqlx::{AssertSqlSafe, Row};
use uuid::Uuid;

use super::codec::{from_json, from_ms, get, ms, not_found, parse_enum, to_json};
use super::{Document, SqlStore};
use crate::model::{Agent, AgentSpec, DesiredState};
use crate::store::{Effects, NewAgent, Result, StoreError};

/// An Agent's spec, updated at the caller's version.
const AGENT_SPEC: Document = Document {
    table: "agents",
    kind: "agent",
    column: "spec",
};

const AGENT_COLS: &str = "a.id, n.name AS namespace, a.name, a.spec, a.desired_state, \
     a.active_revision, a.latest_revision, a.version, a.created_at, a.updated_at";

pub(super) async fn get_agent(store: &SqlStore, namespace: &str, name: &str) -> Result<Agent> {
    let sql = format!(
        "SELECT {AGENT_COLS} FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
         WHERE n.name = $1 AND a.name = $2 AND a.deleted_at IS NULL"
    );
    let query = sqlx::query(AssertSqlSafe(sql))
        .bind(namespace.to_owned())
        .bind(name.to_owned());
    store.read_one(query, agent_from_row, "agent", name).await
}

pub(super) async fn create_agent(
    store: &SqlStore,
    agent: &NewAgent,
    fx: &Effects,
) -> Result<Agent> {
    let now = Utc::now();
    let mut tx = store.begin().await?;
    let ns_id = store.namespace_id(&mut tx, &agent.namespace).await?;
    let query = sqlx::query(
        "SELECT 1 FROM agents WHERE namespace_id = $1 AND name = $2 AND deleted_at IS NOT NULL",
    )
    .bind(ns_id.clone())
    .bind(agent.name.clone());
    let kept = store.row_in(&mut tx, query).await?;
    if kept.is_some() {
        return Err(StoreError::FailedPrecondition(format!(
            "agent name {:?} belongs to a deleted Agent whose revision history is kept: \
             choose another name",
            agent.name
        )));
    }
    sqlx::query(
        "INSERT INTO agents (id, namespace_id, name, spec, desired_state, active_revision, \
         latest_revision, version, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, NULL, NULL, 1, $6, $6)",
    )
    .bind(Uuid::now_v7().to_string())
    .bind(ns_id)
    .bind(agent.name.clone())
    .bind(to_json(&agent.spec)?)
    .bind(DesiredState::Stopped.as_str())
    .bind(ms(now))
    .execute(&mut *tx)
    .await
    .map_err(|e| store.exists_or(e, "agent", &agent.name))?;
    store.commit_with_effects(tx, fx, now).await?;
    get_agent(store, &agent.namespace, &agent.name).await
}

pub(super) async fn list_agents(store: &SqlStore, namespace: &str) -> Result<Vec<Agent>> {
    let sql = format!(
        "SELECT {AGENT_COLS} FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
         WHERE n.name = $1 AND a.deleted_at IS NULL ORDER BY a.name"
    );
    let query = sqlx::query(AssertSqlSafe(sql)).bind(namespace.to_owned());
    store.read_all(query, agent_from_row).await
}

pub(super) async fn update_agent(
    store: &SqlStore,
    namespace: &str,
    name: &str,
    spec: &AgentSpec,
    expected_version: i64,
    fx: &Effects,
) -> Result<Agent> {
    store
        .update_document(
            AGENT_SPEC,
            namespace,
            name,
            to_json(spec)?,
            expected_version,
            fx,
        )
        .await?;
    get_agent(store, namespace, name).await
}

pub(super) async fn delete_agent(
    store: &SqlStore,
    namespace: &str,
    name: &str,
    fx: &Effects,
) -> Result<()> {
    let now = Utc::now();
    let mut tx = store.begin().await?;
    let ns_id = store.namespace_id(&mut tx, namespace).await?;
    let query = sqlx::query(
        "SELECT id, desired_state FROM agents \
         WHERE namespace_id = $1 AND name = $2 AND deleted_at IS NULL",
    )
    .bind(ns_id)
    .bind(name.to_owned());
    let row = store.one_in(&mut tx, query, "agent", name).await?;
    if row.get::<String, _>(1) == DesiredState::Running.as_str() {
        return Err(StoreError::FailedPrecondition(format!(
            "agent {name:?} is running; stop it before deleting it"
        )));
    }
    let id: String = row.get(0);
    // The Agent's revision history stays (marked deleted; its name stays
    // taken); its secrets do not: managed credentials, the revisions'
    // sealed snapshots and the Gateways' transport credentials go now.
    for sql in [
        "DELETE FROM agent_credentials WHERE agent_id = $1",
        "DELETE FROM revision_credentials WHERE revision_id IN \
         (SELECT id FROM agent_revisions WHERE agent_id = $1)",
        "DELETE FROM gateway_transport WHERE revision_id IN \
         (SELECT id FROM agent_revisions WHERE agent_id = $1)",
    ] {
        let query = sqlx::query(sql).bind(id.clone());
        store.run_in(&mut tx, query).await?;
    }
    let query = sqlx::query(
        "UPDATE agents SET deleted_at = $1, active_revision = NULL, updated_at = $1 \
         WHERE id = $2",
    )
    .bind(ms(now))
    .bind(id);
    store.run_in(&mut tx, query).await?;
    store.commit_with_effects(tx, fx, now).await
}

pub(super) async fn set_desired_state(
    store: &SqlStore,
    namespace: &str,
    name: &str,
    state: DesiredState,
    fx: &Effects,
) -> Result<Agent> {
    let now = Utc::now();
    let mut tx = store.begin().await?;
    let ns_id = store.namespace_id(&mut tx, namespace).await?;
    let query = sqlx::query(
        "UPDATE agents SET desired_state = $1, updated_at = $2 \
         WHERE namespace_id = $3 AND name = $4 AND deleted_at IS NULL",
    )
    .bind(state.as_str())
    .bind(ms(now))
    .bind(ns_id)
    .bind(name.to_owned());
    let updated = store.run_in(&mut tx, query).await?;
    if updated == 0 {
        return Err(not_found("agent", name));
    }
    store.commit_with_effects(tx, fx, now).await?;
    get_agent(store, namespace, name).await
}

pub(super) async fn begin_agent_pass(
    store: &SqlStore,
    agent_id: &str,
    holder: &str,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Result<bool> {
    let query = sqlx::query(
        "UPDATE agents SET pass_holder = $1, pass_expires_at = $2 WHERE id = $3 AND \
         (pass_holder IS NULL OR pass_holder = $1 OR pass_expires_at <= $4)",
    )
    .bind(holder.to_owned())
    .bind(ms(until))
    .bind(agent_id.to_owned())
    .bind(ms(now));
    let taken = store.run(query).await?;
    Ok(taken == 1)
}

pub(super) async fn end_agent_pass(store: &SqlStore, agent_id: &str, holder: &str) -> Result<()> {
    let query = sqlx::query(
        "UPDATE agents SET pass_holder = NULL, pass_expires_at = NULL \
         WHERE id = $1 AND pass_holder = $2",
    )
    .bind(agent_id.to_owned())
    .bind(holder.to_owned());
    store.run(query).await?;
    Ok(())
}

fn agent_from_row(r: &AnyRow) -> Result<Agent> {
    const W: &str = "agent";
    let desired: String = get(r, W, "desired_state")?;
    Ok(Agent {
        id: get(r, W, "id")?,
        namespace: get(r, W, "namespace")?,
        name: get(r, W, "name")?,
        spec: from_json(W, &get::<String>(r, W, "spec")?)?,
        desired_state: parse_enum(W, &desired, |s| match s {
            "running" => Some(DesiredState::Running),
            "stopped" => Some(DesiredState::Stopped),
            _ => None,
        })?,
        active_revision: get(r, W, "active_revision")?,
        latest_revision: get(r, W, "latest_revision")?,
        version: get(r, W, "version")?,
        created_at: from_ms(get(r, W, "created_at")?),
        updated_at: from_ms(get(r, W, "updated_at")?),
    })
}
