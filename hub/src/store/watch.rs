//! The watch API's part of the store: a durable, bounded, ordered event log
//! (issue 15).
//!
//! Each event gets the next sequence of the log (the client's cursor) in
//! the transaction that writes it, under the log head's row lock, so events
//! become visible in sequence order and a rolled-back write leaves no gap:
//! a reader that has seen event N never later finds one below N. Where the
//! change the event describes has a transaction (a revision's phase, a
//! cluster's connection state, a revocation) the event is written in it;
//! otherwise right after the change ([`WatchStore::append_event`]).

use async_trait::async_trait;

use super::Result;
use crate::model::event::{EventBody, WatchEvent};

/// An event to append.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// The tenant the event belongs to (`None`: a cluster event).
    pub namespace_id: Option<String>,
    /// The cluster it concerns, by name.
    pub cluster: Option<String>,
    pub body: EventBody,
}

/// What the log holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventBounds {
    /// The oldest kept event's cursor (`None`: the log is empty).
    pub oldest: Option<i64>,
    /// The newest cursor ever given (0: none yet); trimming keeps it.
    pub head: i64,
}

/// The watch log's storage.
#[async_trait]
pub trait WatchStore: Send + Sync {
    /// Appends one event; returns its cursor.
    async fn append_event(&self, event: &NewEvent) -> Result<i64>;
    /// Events after `cursor`, oldest first, at most `limit`.
    async fn events_after(&self, cursor: i64, limit: i64) -> Result<Vec<WatchEvent>>;
    /// The oldest kept and the newest cursor.
    async fn event_bounds(&self) -> Result<EventBounds>;
    /// Deletes all but the newest `keep` events; returns how many went.
    async fn trim_events(&self, keep: i64) -> Result<u64>;
}
