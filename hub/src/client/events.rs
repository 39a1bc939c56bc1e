//! The watch API's Server-Sent Events reader (`GET /api/v1/watch`):
//! frames off an open stream, bounded, keep-alives skipped.

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
    /// Over a 200 `text/event-stream` response.
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            response,
            buf: Vec::new(),
        }
    }

    /// The next frame; `None` when the hub ended the stream.
    pub async fn next(&mut self) -> Result<Option<Frame>, ReadError> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buf.drain(..end + 2).collect();
                if let Some(frame) = parse_block(&block)? {
                    return Ok(Some(frame));
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

/// One SSE block: `None` for a keep-alive comment.
fn parse_block(block: &[u8]) -> Result<Option<Frame>, ReadError> {
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
    let malformed = |e: serde_json::Error| ReadError::Malformed(e.to_string());
    if event == "error" {
        let v: serde_json::Value = serde_json::from_str(&data).map_err(malformed)?;
        return Err(ReadError::Unauthenticated(
            v["error"]["message"]
                .as_str()
                .unwrap_or("the token is no longer valid")
                .to_owned(),
        ));
    }
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
