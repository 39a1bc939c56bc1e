//! Spoke reports: stored through the group commit, newest generation
//! wins; read per cluster, per target and one at a time.

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::{SqlStore, mismatch};
use crate::store::group::{LinkWrite, ReportWrite, Written};
use crate::store::link::SpokeReport;
use crate::store::sql::from_ms;
use crate::store::{Result, StoreError};

pub(super) async fn put_report(
    store: &SqlStore,
    cluster_id: &str,
    target: &str,
    kind: &str,
    generation: i64,
    body: &serde_json::Value,
    now: DateTime<Utc>,
) -> Result<()> {
    let written = store
        .link_write(LinkWrite::Report(ReportWrite {
            cluster_id: cluster_id.to_owned(),
            target: target.to_owned(),
            kind: kind.to_owned(),
            generation,
            body: body.to_string(),
            now,
        }))
        .await?;
    match written {
        Written::Report => Ok(()),
        other => Err(mismatch(other)),
    }
}

pub(super) async fn list_reports(store: &SqlStore, cluster_id: &str) -> Result<Vec<SpokeReport>> {
    let query = sqlx::query(
        "SELECT cluster_id, target, kind, generation, body, received_at FROM spoke_reports \
         WHERE cluster_id = $1 ORDER BY target, kind",
    )
    .bind(cluster_id.to_owned());
    store.read_all(query, report_from_row).await
}

pub(super) async fn target_reports(
    store: &SqlStore,
    target: &str,
    kind: &str,
) -> Result<Vec<(String, Option<SpokeReport>)>> {
    let rows = sqlx::query(
        "SELECT c.name, r.cluster_id, r.target, r.kind, r.generation, r.body, r.received_at \
         FROM clusters c \
         JOIN (SELECT DISTINCT cluster_id FROM outbox WHERE target = $1) o \
           ON o.cluster_id = c.id \
         LEFT JOIN spoke_reports r \
           ON r.cluster_id = c.id AND r.target = $1 AND r.kind = $2 \
         ORDER BY c.name",
    )
    .bind(target.to_owned())
    .bind(kind.to_owned())
    .fetch_all(store.reader())
    .await
    .map_err(|e| store.classify(e))?;
    rows.iter()
        .map(|r| {
            let name: String = r.get(0);
            let cluster_id: Option<String> = r.get(1);
            let report = match cluster_id {
                None => None,
                Some(cluster_id) => Some(SpokeReport {
                    cluster_id,
                    target: r.get(2),
                    kind: r.get(3),
                    generation: r.get(4),
                    body: serde_json::from_str(&r.get::<String, _>(5)).map_err(|e| {
                        StoreError::Corrupt {
                            what: "spoke report",
                            detail: e.to_string(),
                        }
                    })?,
                    received_at: from_ms(r.get(6)),
                }),
            };
            Ok((name, report))
        })
        .collect()
}

pub(super) async fn get_report(
    store: &SqlStore,
    cluster_id: &str,
    target: &str,
    kind: &str,
) -> Result<Option<SpokeReport>> {
    let row = sqlx::query(
        "SELECT cluster_id, target, kind, generation, body, received_at FROM spoke_reports \
         WHERE cluster_id = $1 AND target = $2 AND kind = $3",
    )
    .bind(cluster_id.to_owned())
    .bind(target.to_owned())
    .bind(kind.to_owned())
    .fetch_optional(store.reader())
    .await
    .map_err(|e| store.classify(e))?;
    row.as_ref().map(report_from_row).transpose()
}

fn report_from_row(r: &sqlx::any::AnyRow) -> Result<SpokeReport> {
    Ok(SpokeReport {
        cluster_id: r.get(0),
        target: r.get(1),
        kind: r.get(2),
        generation: r.get(3),
        body: serde_json::from_str(&r.get::<String, _>(4)).map_err(|e| StoreError::Corrupt {
            what: "spoke report",
            detail: e.to_string(),
        })?,
        received_at: from_ms(r.get(5)),
    })
}
