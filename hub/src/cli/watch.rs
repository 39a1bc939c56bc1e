//! How the CLI shows a watch event on one line (the stream itself is read
//! by [`crate::client::events`]).

use crate::model::event::{EventBody, WatchEvent};

/// Column headers of [`line`].
pub const HEADERS: [&str; 6] = ["CURSOR", "AT", "KIND", "NAMESPACE", "CLUSTER", "DETAIL"];

/// An event as one table line.
pub fn line(e: &WatchEvent) -> String {
    let detail = match &e.body {
        EventBody::ClusterConnected(c)
        | EventBody::ClusterOffline(c)
        | EventBody::ClusterRevoked(c) => {
            format!(
                "{} version={} capabilities={} lastSeen={} certExpires={}",
                c.state.as_str(),
                if c.version.is_empty() {
                    "-"
                } else {
                    &c.version
                },
                if c.capabilities.is_empty() {
                    "-".to_owned()
                } else {
                    c.capabilities.join(",")
                },
                c.last_seen.map_or("-".into(), |t| t.to_rfc3339()),
                c.certificate_expires_at
                    .map_or("-".into(), |t| t.to_rfc3339()),
            )
        }
        EventBody::ClusterScheduling(s) => match (s.draining, s.cordoned_at) {
            (true, _) => "draining".to_owned(),
            (false, Some(at)) => format!("cordoned since {}", at.to_rfc3339()),
            (false, None) => "schedulable".to_owned(),
        },
        EventBody::RevisionPhase(p) => format!(
            "{}#{} {} <- {}{}",
            p.agent,
            p.number,
            p.phase.as_str(),
            p.previous_phase.map_or("(new)", |p| p.as_str()),
            p.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ),
        EventBody::Readiness(r) => format!(
            "{}#{} {}: {}{}",
            r.agent,
            r.number,
            if r.ready { "ready" } else { "not ready" },
            r.reason,
            r.error
                .as_deref()
                .map(|e| format!(" (error: {e})"))
                .unwrap_or_default()
        ),
        EventBody::WorkFailed(w) => format!("{} {}: {}", w.work_kind, w.target, w.error),
        EventBody::Relist(r) => r.message.clone(),
    };
    format!(
        "{:<8} {:<25} {:<17} {:<16} {:<12} {}",
        e.cursor,
        e.at.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
        e.body.kind(),
        e.namespace.as_deref().unwrap_or("-"),
        e.cluster.as_deref().unwrap_or("-"),
        detail
    )
}

/// The header line matching [`line`].
pub fn header() -> String {
    format!(
        "{:<8} {:<25} {:<17} {:<16} {:<12} {}",
        HEADERS[0], HEADERS[1], HEADERS[2], HEADERS[3], HEADERS[4], HEADERS[5]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_one_line() {
        let e: WatchEvent = serde_json::from_str(
            "{\"cursor\":3,\"at\":\"2024-01-01T00:00:00Z\",\"kind\":\"work.failed\",\"body\":{\"source\":\"queue\",\"workKind\":\"k\",\"target\":\"t\",\"error\":\"boom\"}}",
        )
        .unwrap();
        assert!(line(&e).contains("k t: boom"), "{}", line(&e));
    }
}
