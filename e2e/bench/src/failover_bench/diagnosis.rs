//! What the failover figure reads besides the spokes' Welcomes: live sessions
//! and offline clusters from the store's rows, the kernel's accept-queue
//! drops, each replica's refusals from its `/metrics`, and where the time
//! went from each Link's status.

use std::collections::BTreeMap;

use clawfed_bench::fleet::{Fleet, quantile, spread_ms};
use sqlx::Row as _;

use super::replicas::Replica;

/// Live sessions per replica id, from the store's rows.
pub(super) async fn sessions_by_replica(
    pool: &sqlx::PgPool,
) -> anyhow::Result<BTreeMap<String, i64>> {
    let now = chrono::Utc::now().timestamp_millis();
    let rows = sqlx::query(
        "SELECT replica_id, count(*) FROM cluster_sessions WHERE lease_expires_at > $1 GROUP BY replica_id",
    )
    .bind(now)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| Ok((r.try_get::<String, _>(0)?, r.try_get::<i64, _>(1)?)))
        .collect()
}

pub(super) async fn offline_clusters(pool: &sqlx::PgPool) -> anyhow::Result<i64> {
    Ok(
        sqlx::query("SELECT count(*) FROM clusters WHERE connection_state = 'offline'")
            .fetch_one(pool)
            .await?
            .try_get::<i64, _>(0)?,
    )
}

/// The machine's TCP `ListenOverflows` and `ListenDrops` counters
/// (`/proc/net/netstat`): connections a full accept queue dropped (their
/// SYN or final ACK), which the client only retries after its SYN
/// retransmission timeout (1 s, then 3 s, ...). Machine-wide.
pub(super) fn listen_drops() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return (0, 0);
    };
    let field = |name: &str| {
        names
            .split_whitespace()
            .position(|n| n == name)
            .and_then(|i| values.split_whitespace().nth(i))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("ListenOverflows"), field("ListenDrops"))
}

/// A replica's link handshakes by result and sessions shed, from its
/// `/metrics` (what refused or gave up connections on the hub side).
pub(super) async fn hub_refusals(replica: &Replica) -> BTreeMap<String, f64> {
    let text = replica.proc.scrape().await.unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        if let Some(rest) = key.strip_prefix("occ_link_handshakes_total{result=\"") {
            out.insert(format!("handshake {}", rest.trim_end_matches("\"}")), value);
        } else if key == "occ_link_sessions_shed_total" {
            out.insert("sessions shed".into(), value);
        }
    }
    out
}

/// `after - before` per key, the keys that moved.
pub(super) fn moved(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> String {
    let parts: Vec<String> = after
        .iter()
        .map(|(k, v)| (k, v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .map(|(k, d)| format!("{k} {d:.0}"))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// Where the failover time of the spokes went, from each Link's status:
/// attempts after the kill, the wait from losing the session to the first
/// attempt, from that attempt to the Welcome, and why attempts failed.
pub(super) fn failover_diagnosis(
    fleet: &Fleet,
    attempts_before: &[u64],
    killed: tokio::time::Instant,
) -> String {
    let mut attempts = Vec::new();
    let mut first_wait = Vec::new();
    let mut to_welcome = Vec::new();
    let mut lost_after = Vec::new();
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for (s, before) in fleet.spokes.iter().zip(attempts_before) {
        let st = s.status.borrow();
        let n = st.attempts - before;
        attempts.push(n);
        if let Some(lost) = st.session_lost.filter(|l| *l > killed) {
            lost_after.push((lost - killed).as_millis() as u64);
        }
        if let (Some(lost), Some(first)) = (st.session_lost, st.first_attempt_after_loss) {
            first_wait.push((first - lost).as_millis() as u64);
            if let Some(w) = st.last_welcome.filter(|w| *w > killed) {
                to_welcome.push(w.saturating_duration_since(first).as_millis() as u64);
            }
        }
        if n > 1
            && let Some(r) = &st.last_failure
        {
            // The reason's kind, without addresses and details.
            let kind: String = r
                .split([':', '('])
                .next()
                .unwrap_or(r)
                .chars()
                .take(48)
                .collect();
            *reasons.entry(kind).or_default() += 1;
        }
    }
    attempts.sort_unstable();
    first_wait.sort_unstable();
    to_welcome.sort_unstable();
    lost_after.sort_unstable();
    let retried = attempts.iter().filter(|n| **n > 1).count();
    let reasons: Vec<String> = reasons.iter().map(|(k, v)| format!("{v}× {k}")).collect();
    format!(
        "attempts per spoke p50 / p99 / max {} / {} / {} ({retried} spokes needed more than one); kill → session lost p50 / p99 / max {}; session lost → first attempt p50 / p99 / max {}; first attempt → Welcome p50 / p99 / max {}; last failure of the retried: {}",
        quantile(&attempts, 0.5),
        quantile(&attempts, 0.99),
        attempts.last().copied().unwrap_or(0),
        spread_ms(&lost_after),
        spread_ms(&first_wait),
        spread_ms(&to_welcome),
        if reasons.is_empty() {
            "none".into()
        } else {
            reasons.join(", ")
        }
    )
}
