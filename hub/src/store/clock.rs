//! The store's clock: the database server's time, as this process reads it.
//!
//! Leases (work items, Agent passes, link sessions, replica heartbeats) are
//! written by one replica and judged by another. Each replica taking its
//! own wall clock let one whose clock runs ahead read every other replica's
//! live lease as expired. Every replica instead stamps and judges leases
//! with the database's clock: its own clock plus the offset measured
//! against the server (the midpoint of a round trip, so the error is at
//! most half of it). SQLite is in process: its clock is this one.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Duration, Utc};

/// Offsets smaller than this are taken as none ([`StoreClock::record`]).
pub const DEAD_BAND: Duration = Duration::milliseconds(250);

/// The offset of the database's clock from this process's.
#[derive(Debug, Default)]
pub struct StoreClock {
    offset_ms: AtomicI64,
}

impl StoreClock {
    /// Now, by the database's clock.
    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.offset()
    }

    /// How far the database's clock is ahead of this process's (negative:
    /// behind).
    pub fn offset(&self) -> Duration {
        Duration::milliseconds(self.offset_ms.load(Ordering::Relaxed))
    }

    /// Records a reading of the database's clock, `database_ms` (unix
    /// milliseconds), taken between this process's `sent` and `received`.
    /// An offset within [`DEAD_BAND`] is taken as none: that is within
    /// what one reading can tell on a loaded machine, far below any lease,
    /// and clocks on one host (or synced ones) then agree exactly.
    pub fn record(&self, sent: DateTime<Utc>, database_ms: i64, received: DateTime<Utc>) {
        let midpoint = sent.timestamp_millis() + (received - sent).num_milliseconds() / 2;
        let offset = database_ms - midpoint;
        let offset = if offset.abs() < DEAD_BAND.num_milliseconds() {
            0
        } else {
            offset
        };
        self.offset_ms.store(offset, Ordering::Relaxed);
    }
}

/// How often a replica measures the database's clock again: clocks drift
/// by parts per million, and a stepped clock is caught within a minute;
/// one query a minute keeps an idle replica's database load low
/// (`hub_replicas::idle_database_load_per_replica`).
pub const SYNC_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// An offset beyond which the replica's clock is worth an operator's look.
const NOTABLE_OFFSET: Duration = Duration::seconds(2);

/// Measures the database's clock every [`SYNC_INTERVAL`] until `shutdown`
/// (this replica's clock may be stepped or drift meanwhile), and warns
/// while the offset is large.
pub async fn keep_in_sync(
    store: std::sync::Arc<dyn super::Store>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(SYNC_INTERVAL);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        match store.sync_clock().await {
            Ok(offset) if offset.abs() > NOTABLE_OFFSET => tracing::warn!(
                offsetMs = offset.num_milliseconds(),
                "store.clock_offset: this replica's clock differs from the database's; leases use the database's"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "store.clock_sync_failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_taken_at_the_round_trips_midpoint() {
        let clock = StoreClock::default();
        let sent = DateTime::from_timestamp_millis(1_000_000).unwrap();
        let received = sent + Duration::milliseconds(40);
        // The server read its clock 10 s ahead of ours, mid-way.
        clock.record(sent, 1_000_000 + 20 + 10_000, received);
        assert_eq!(clock.offset(), Duration::seconds(10));
        clock.record(sent, 1_000_000 + 20 - 3_000, received);
        assert_eq!(clock.offset(), Duration::seconds(-3));
        // Within the dead band: none.
        clock.record(sent, 1_000_000 + 20 + 60, received);
        assert_eq!(clock.offset(), Duration::zero());
    }
}
