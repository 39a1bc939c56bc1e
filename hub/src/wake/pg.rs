//! Wake-ups across hub replicas on PostgreSQL (LISTEN/NOTIFY).
//!
//! Triggers (migration 0013) NOTIFY when work becomes pending, when an
//! outbox grows, when a cluster is revoked and when watch events are
//! appended, whichever process wrote it; PostgreSQL delivers on commit.
//! Each replica holds one LISTEN connection ([`run`]) and turns what
//! arrives into its [`StoreSignals`], so the worker, the session holding
//! the cluster and the revocation watcher act at once instead of on their
//! safety polls. The polls stay, slow, for anything missed.
//!
//! Channels are per database while installations (and tests) may put
//! several hubs in separate schemas of one database: each payload starts
//! with the writer's schema, and a replica takes only its own.

use std::time::Duration;

use sqlx::postgres::{PgListener, PgNotification};
use tokio_util::sync::CancellationToken;

use super::{OutboxWake, StoreSignals};

/// Work became pending (queued, retried, deferred, released, recovered).
/// Payload: `<schema>`.
pub const WORK_CHANNEL: &str = "clawfed_work";
/// An outbox grew. Payload: `<schema> <cluster id> <newest sequence>`
/// (migration 0016; before it, without the sequence).
pub const OUTBOX_CHANNEL: &str = "clawfed_outbox";
/// A cluster (or certificate) was revoked. Payload: `<schema> <cluster id>`.
pub const REVOKED_CHANNEL: &str = "clawfed_revoked";
/// Watch events were appended. Payload: `<schema>`.
pub const EVENTS_CHANNEL: &str = "clawfed_events";

/// The first and the longest wait before reconnecting the listener.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What one notification means for this replica, or `None` when it is
/// another schema's (or unknown). Pure, so the payload rules are tested
/// without a database.
pub fn decode(schema: &str, channel: &str, payload: &str) -> Option<Wake> {
    let (from, rest) = match payload.split_once(' ') {
        Some((from, rest)) => (from, Some(rest)),
        None => (payload, None),
    };
    if from != schema {
        return None;
    }
    match (channel, rest) {
        (WORK_CHANNEL, _) => Some(Wake::Work),
        (EVENTS_CHANNEL, _) => Some(Wake::Events),
        (OUTBOX_CHANNEL, Some(rest)) => {
            let (id, head) = match rest.split_once(' ') {
                Some((id, head)) => (id, head.parse().ok()),
                None => (rest, None),
            };
            Some(Wake::Outbox {
                id: id.to_owned(),
                head,
            })
        }
        (REVOKED_CHANNEL, _) => Some(Wake::Revoked),
        _ => None,
    }
}

/// A decoded notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    Work,
    Events,
    Outbox { id: String, head: Option<i64> },
    Revoked,
}

impl Wake {
    fn raise(self, signals: &StoreSignals) {
        match self {
            Wake::Work => signals.work.notify(),
            Wake::Events => signals.events.notify(),
            Wake::Outbox { id, head } => signals.outbox.notify(OutboxWake::Cluster { id, head }),
            Wake::Revoked => signals.revocations.notify(),
        }
    }
}

/// Holds the replica's LISTEN connection on `url` until `shutdown`,
/// raising `signals` for every notification of this schema. A lost
/// connection is re-established with backoff; every (re)connect raises all
/// signals once, since notifications may have been missed meanwhile.
pub async fn run(url: String, signals: StoreSignals, shutdown: CancellationToken) {
    let mut backoff = BACKOFF_MIN;
    while !shutdown.is_cancelled() {
        let connected = tokio::select! {
            _ = shutdown.cancelled() => return,
            c = connect(&url) => c,
        };
        match connected {
            Ok((mut listener, schema)) => {
                tracing::info!(%schema, "store.listening");
                backoff = BACKOFF_MIN;
                signals.wake_all();
                loop {
                    let next = tokio::select! {
                        _ = shutdown.cancelled() => return,
                        n = listener.try_recv() => n,
                    };
                    match next {
                        Ok(Some(n)) => deliver(&schema, &n, &signals),
                        // Lost and re-established (eager reconnect):
                        // whatever came meanwhile is gone.
                        Ok(None) => {
                            tracing::warn!("store.listen_reconnected");
                            signals.wake_all();
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "store.listen_lost");
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "store.listen_failed"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

fn deliver(schema: &str, n: &PgNotification, signals: &StoreSignals) {
    if let Some(wake) = decode(schema, n.channel(), n.payload()) {
        wake.raise(signals);
    }
}

/// A listener on every channel, and the schema this URL writes to (what
/// the triggers put first in each payload).
async fn connect(url: &str) -> Result<(PgListener, String), sqlx::Error> {
    let mut listener = PgListener::connect(url).await?;
    let schema: Option<String> = sqlx::query_scalar("SELECT current_schema()::text")
        .fetch_one(&mut listener)
        .await?;
    listener
        .listen_all([
            WORK_CHANNEL,
            OUTBOX_CHANNEL,
            REVOKED_CHANNEL,
            EVENTS_CHANNEL,
        ])
        .await?;
    Ok((listener, schema.unwrap_or_else(|| "public".into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_schemas_notifications_count() {
        let cases = [
            (WORK_CHANNEL, "s1", Some(Wake::Work)),
            (WORK_CHANNEL, "s2", None),
            (EVENTS_CHANNEL, "s1", Some(Wake::Events)),
            (
                OUTBOX_CHANNEL,
                "s1 c-1 42",
                Some(Wake::Outbox {
                    id: "c-1".into(),
                    head: Some(42),
                }),
            ),
            // A replica before migration 0016 names no sequence.
            (
                OUTBOX_CHANNEL,
                "s1 c-1",
                Some(Wake::Outbox {
                    id: "c-1".into(),
                    head: None,
                }),
            ),
            (OUTBOX_CHANNEL, "s2 c-1", None),
            // An outbox notification must name its cluster.
            (OUTBOX_CHANNEL, "s1", None),
            (REVOKED_CHANNEL, "s1 c-1", Some(Wake::Revoked)),
            ("other", "s1", None),
        ];
        for (channel, payload, want) in cases {
            assert_eq!(decode("s1", channel, payload), want, "{channel} {payload}");
        }
    }
}
