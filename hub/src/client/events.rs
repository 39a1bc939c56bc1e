//! The hub's Server-Sent Events reader (`GET /api/v1/watch`,
//! `GET /api/v1/audit/stream`): frames off an open stream, bounded,
//! keep-alives skipped.

use crate::model::AuditEvent;
use crate::model::event::{EventBody, RelistEvent, WatchEvent};

/// What the stream yields.
#[derive(Debug, Clone)]
pub enum Frame {
    Event(Box<WatchEvent>),
    /// The hub cut the stream off; the client must re-list.
    Relist(RelistEvent),
}

/// Why reading the stream failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The connection broke.
    #[error("the event stream broke: {0}")]
    Io(#[source] reqwest::Error),
    /// An event that is not what the hub's API documents.
    #[error("unexpected event from the hub: {0}")]
    Malformed(String),
    /// The hub ended the stream because the token stopped being valid.
    #[error("the hub ended the stream: {0}")]
    Unauthenticated(String),
    /// The hub ended the stream because its store failed: resume later.
    #[error("the hub ended the stream: {0}")]
    Unavailable(String),
}

impl ReadError {
    /// Whether reopening the stream (from the last cursor) may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Io(_) | Self::Unavailable(_))
    }
}

/// Reads events off an open `text/event-stream` response.
#[derive(Debug)]
pub struct EventReader {
    response: reqwest::Response,
    buf: Vec<u8>,
}

/// Largest event accepted (the hub's are far smaller).
const MAX_EVENT_BYTES: usize = 1 << 20;

impl EventReader {
    /// The cursor the hub says the stream starts after (the audit stream's
    /// `clawfed-audit-after` header), if it says.
    pub fn starts_after(&self) -> Option<i64> {
        self.response
            .headers()
            .get(crate::audit_stream::AFTER_HEADER)?
            .to_str()
            .ok()?
            .parse()
            .ok()
    }

    /// Over a 200 `text/event-stream` response.
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            response,
            buf: Vec::new(),
        }
    }

    /// The next frame; `None` when the hub ended the stream.
    pub async fn next(&mut self) -> Result<Option<Frame>, ReadError> {
        self.next_parsed(parse_block).await
    }

    /// The next audit event (`GET /api/v1/audit/stream`); `None` when the
    /// hub ended the stream.
    pub async fn next_audit(&mut self) -> Result<Option<AuditEvent>, ReadError> {
        self.next_parsed(parse_audit_block).await
    }

    /// The next block `parse` makes something of (it skips keep-alives).
    async fn next_parsed<T>(
        &mut self,
        parse: fn(&[u8]) -> Result<Option<T>, ReadError>,
    ) -> Result<Option<T>, ReadError> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buf.drain(..end + 2).collect();
                if let Some(item) = parse(&block)? {
                    return Ok(Some(item));
                }
                continue;
            }
            if self.buf.len() > MAX_EVENT_BYTES {
                return Err(ReadError::Malformed("an event larger than 1 MiB".into()));
            }
            match self.response.chunk().await.map_err(ReadError::Io)? {
                Some(chunk) => self.buf.extend_from_slice(&chunk),
                None => return Ok(None),
            }
        }
    }
}

/// One SSE block's event name and data; `None` for a keep-alive comment.
/// An `error` event, the hub's last, is the error it carries.
fn split_block(block: &[u8]) -> Result<Option<(String, String)>, ReadError> {
    let text = std::str::from_utf8(block).map_err(|e| ReadError::Malformed(e.to_string()))?;
    let mut event = "";
    let mut data = String::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            event = v.trim();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    if data.is_empty() {
        return Ok(None);
    }
    if event == "error" {
        let v: serde_json::Value =
            serde_json::from_str(&data).map_err(|e| ReadError::Malformed(e.to_string()))?;
        let message = v["error"]["message"].as_str().map(str::to_owned);
        return Err(match v["error"]["code"].as_str() {
            Some("unavailable") => ReadError::Unavailable(message.unwrap_or_default()),
            _ => ReadError::Unauthenticated(
                message.unwrap_or_else(|| "the token is no longer valid".into()),
            ),
        });
    }
    Ok(Some((event.to_owned(), data)))
}

/// One audit stream block: an `audit` event.
fn parse_audit_block(block: &[u8]) -> Result<Option<AuditEvent>, ReadError> {
    let Some((event, data)) = split_block(block)? else {
        return Ok(None);
    };
    if event != "audit" {
        return Err(ReadError::Malformed(format!(
            "a {event:?} event on the audit stream"
        )));
    }
    serde_json::from_str(&data)
        .map(Some)
        .map_err(|e| ReadError::Malformed(e.to_string()))
}

/// One watch stream block.
fn parse_block(block: &[u8]) -> Result<Option<Frame>, ReadError> {
    let Some((event, data)) = split_block(block)? else {
        return Ok(None);
    };
    let event = event.as_str();
    let malformed = |e: serde_json::Error| ReadError::Malformed(e.to_string());
    if event == "relist" {
        return match serde_json::from_str::<EventBody>(&data).map_err(malformed)? {
            EventBody::Relist(r) => Ok(Some(Frame::Relist(r))),
            other => Err(ReadError::Malformed(format!(
                "a relist event carrying {}",
                other.kind()
            ))),
        };
    }
    let event: WatchEvent = serde_json::from_str(&data).map_err(malformed)?;
    Ok(Some(Frame::Event(Box::new(event))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_parse_to_frames() {
        assert!(parse_block(b": keep-alive\n\n").unwrap().is_none());
        let block = b"id: 3\nevent: work.failed\ndata: {\"cursor\":3,\"at\":\"2024-01-01T00:00:00Z\",\"kind\":\"work.failed\",\"body\":{\"source\":\"queue\",\"workKind\":\"k\",\"target\":\"t\",\"error\":\"boom\"}}\n\n";
        let Some(Frame::Event(e)) = parse_block(block).unwrap() else {
            panic!("not an event");
        };
        assert_eq!(e.cursor, 3);
        let relist = b"event: relist\ndata: {\"kind\":\"relist\",\"body\":{\"reason\":\"slow-consumer\",\"message\":\"m\"}}\n\n";
        assert!(matches!(
            parse_block(relist).unwrap(),
            Some(Frame::Relist(RelistEvent { .. }))
        ));
        assert!(parse_block(b"event: x\ndata: {\n\n").is_err());
    }
}
