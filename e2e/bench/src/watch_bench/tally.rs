//! What the watchers share: the tally of deliveries, gaps and latencies,
//! and each watcher's own view of its stream.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::histogram::Histogram;
use super::{MARK, unix_micros};

#[derive(Default)]
pub(super) struct Tally {
    /// Set while a phase is measured: watchers count and time only then.
    pub(super) measuring: AtomicBool,
    pub(super) delivered: AtomicU64,
    pub(super) connected: AtomicU64,
    /// Events whose cursor was not the previous one + 1.
    pub(super) gaps: AtomicU64,
    /// Streams cut off with `relist`.
    pub(super) relists: AtomicU64,
    /// Streams that ended or failed before the end.
    pub(super) ended: AtomicU64,
    pub(super) send_latency: Mutex<Option<Histogram>>,
    pub(super) commit_latency: Mutex<Option<Histogram>>,
    pub(super) first_error: Mutex<Option<String>>,
}

impl Tally {
    pub(super) fn error(&self, e: String) {
        self.ended.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut f) = self.first_error.lock()
            && f.is_none()
        {
            *f = Some(e);
        }
    }

    fn flush(&self, send: &mut Vec<u64>, commit: &mut Vec<u64>) {
        for (samples, into) in [(send, &self.send_latency), (commit, &self.commit_latency)] {
            if samples.is_empty() {
                continue;
            }
            if let Ok(mut h) = into.lock() {
                h.get_or_insert_with(Histogram::new).add_all(samples);
            }
            samples.clear();
        }
    }
}

/// One watcher's view: order check and latency samples, flushed in batches.
pub(super) struct Seen {
    tally: Arc<Tally>,
    /// Also time commit -> received (a sample of the watchers).
    commit_sample: bool,
    last: Option<i64>,
    send: Vec<u64>,
    commit: Vec<u64>,
}

impl Seen {
    pub(super) fn new(tally: Arc<Tally>, commit_sample: bool) -> Self {
        Self {
            tally,
            commit_sample,
            last: None,
            send: Vec::with_capacity(256),
            commit: Vec::new(),
        }
    }

    /// An event with cursor `cursor`, its JSON text (SSE data or gRPC body)
    /// and its commit time (RFC 3339).
    pub(super) fn event(&mut self, cursor: i64, text: &str, at: Option<&str>) {
        let now = unix_micros();
        if let Some(last) = self.last
            && cursor != last + 1
        {
            self.tally.gaps.fetch_add(1, Ordering::Relaxed);
        }
        self.last = Some(cursor);
        if !self.tally.measuring.load(Ordering::Relaxed) {
            return;
        }
        self.tally.delivered.fetch_add(1, Ordering::Relaxed);
        if let Some(sent) = sent_at(text) {
            self.send.push(now.saturating_sub(sent));
        }
        if self.commit_sample
            && let Some(at) = at.and_then(|a| chrono::DateTime::parse_from_rfc3339(a).ok())
        {
            let at = at.timestamp_micros().max(0) as u64;
            self.commit.push(now.saturating_sub(at));
        }
        if self.send.len() >= 256 {
            self.tally.flush(&mut self.send, &mut self.commit);
        }
    }
}

impl Drop for Seen {
    fn drop(&mut self) {
        self.tally.flush(&mut self.send, &mut self.commit);
    }
}

/// The send time in an observation's reason.
fn sent_at(text: &str) -> Option<u64> {
    let rest = &text[text.find(MARK)? + MARK.len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// A JSON string field's raw value (no escapes in the fields read here).
pub(super) fn json_str<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":\"");
    let rest = &text[text.find(&pat)? + pat.len()..];
    Some(&rest[..rest.find('"')?])
}
