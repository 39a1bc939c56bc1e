//! What the database does: the statements sqlx runs in this process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Counts the statements sqlx runs in this process by their opening words:
/// one `sqlx::query` event per statement executed (each a round trip;
/// BEGIN and COMMIT included), with its client-side time.
#[derive(Debug, Clone, Default)]
pub struct StatementCounter(Arc<Mutex<HashMap<String, (u64, f64)>>>);

impl StatementCounter {
    /// Installs the counter as this process's tracing subscriber, which
    /// enables sqlx's statement events and nothing else.
    pub fn install() -> Self {
        use tracing_subscriber::Layer as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        let counter = Self::default();
        let only_statements = tracing_subscriber::filter::Targets::new()
            .with_target("sqlx::query", tracing::Level::DEBUG);
        // Not `try_init`: that would also route the `log` records of every
        // crate (rustls' per-handshake ones) through this subscriber.
        let _ = tracing::subscriber::set_global_default(
            tracing_subscriber::registry().with(counter.clone().with_filter(only_statements)),
        );
        counter
    }

    pub fn snapshot(&self) -> HashMap<String, (u64, f64)> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

#[derive(Default)]
struct StatementFields {
    summary: String,
    statement: String,
    secs: f64,
}

impl tracing::field::Visit for StatementFields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "summary" => self.summary = value.to_owned(),
            "db.statement" => self.statement = value.to_owned(),
            _ => {}
        }
    }
    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        if field.name() == "elapsed_secs" {
            self.secs = value;
        }
    }
    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for StatementCounter {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = StatementFields::default();
        event.record(&mut fields);
        // sqlx's summary is the first four words; the full text (when
        // longer) tells the group statement from other CTEs.
        let text = if fields.statement.is_empty() {
            fields.summary
        } else {
            fields.statement
        };
        let mut label: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if let Some((cut, _)) = label.char_indices().nth(72) {
            label.truncate(cut);
        }
        if let Ok(mut m) = self.0.lock() {
            let e = m.entry(label).or_default();
            e.0 += 1;
            e.1 += fields.secs;
        }
    }
}

/// Statement counts (and client seconds) by label since `before`,
/// most frequent first.
pub fn since(
    now: &HashMap<String, (u64, f64)>,
    before: &HashMap<String, (u64, f64)>,
) -> Vec<(String, u64, f64)> {
    let mut v: Vec<(String, u64, f64)> = now
        .iter()
        .map(|(k, (n, s))| {
            let (n0, s0) = before.get(k).copied().unwrap_or_default();
            (k.clone(), n - n0, s - s0)
        })
        .filter(|(_, n, _)| *n > 0)
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1));
    v
}
