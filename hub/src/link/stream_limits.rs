//! What one cluster credential can make the link hold in memory.
//!
//! The link's gRPC service decodes messages up to `link.maxMessageBytes`
//! (work specs can be large), and a message is buffered whole before the
//! handler sees it. A `Tunnel` stream only ever carries a `TunnelAccept`
//! and data frames of at most [`MAX_FRAME`] bytes, so its messages are
//! held to [`TUNNEL_MESSAGE_MAX`] by their gRPC length prefix, checked as
//! the bytes arrive: a stream announcing more is refused before any of it
//! is buffered. With the streams per connection bounded (the server's
//! `max_concurrent_streams`) and unpaired `Tunnel` streams bounded per
//! cluster (see `tunnel::broker`), a cluster's unpaired bytes are bounded.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use clawfed_proto::tunnel::MAX_FRAME;
use hyper::body::{Body, Frame, SizeHint};
use tonic::Status;

/// The largest `Tunnel` message accepted: a data frame and its framing.
pub const TUNNEL_MESSAGE_MAX: usize = MAX_FRAME + 1024;

/// The `SpokeLink.Tunnel` method's path.
const TUNNEL_PATH: &str = "/clawfed.link.v1.SpokeLink/Tunnel";

/// Streams one connection may have open at once: every tunnel a cluster
/// may open (they share the spoke's tunnel connection) and room for its
/// `Connect`, `Renew` and enrolment calls.
pub fn max_concurrent_streams(max_tunnels_per_cluster: usize) -> u32 {
    u32::try_from(max_tunnels_per_cluster.saturating_add(32)).unwrap_or(u32::MAX)
}

/// Holds a `Tunnel` request's messages to [`TUNNEL_MESSAGE_MAX`]; other
/// requests pass unchanged.
pub fn limit_tunnel_messages(
    request: http::Request<tonic::body::Body>,
) -> http::Request<tonic::body::Body> {
    if request.uri().path() != TUNNEL_PATH {
        return request;
    }
    request.map(|body| tonic::body::Body::new(MessageLimit::new(body, TUNNEL_MESSAGE_MAX)))
}

/// A gRPC request body whose messages may not exceed `limit` bytes.
struct MessageLimit<B> {
    inner: B,
    limit: usize,
    /// The 5-byte message prefix being read (flag, then length).
    prefix: [u8; 5],
    prefix_read: usize,
    /// Bytes of the current message still to come.
    remaining: usize,
}

impl<B> MessageLimit<B> {
    fn new(inner: B, limit: usize) -> Self {
        Self {
            inner,
            limit,
            prefix: [0; 5],
            prefix_read: 0,
            remaining: 0,
        }
    }

    /// Follows the message framing through `data`; refuses a message whose
    /// prefix announces more than the limit.
    fn scan(&mut self, mut data: &[u8]) -> Result<(), Status> {
        while !data.is_empty() {
            if self.remaining > 0 {
                let n = self.remaining.min(data.len());
                self.remaining -= n;
                data = &data[n..];
                continue;
            }
            let n = (5 - self.prefix_read).min(data.len());
            self.prefix[self.prefix_read..self.prefix_read + n].copy_from_slice(&data[..n]);
            self.prefix_read += n;
            data = &data[n..];
            if self.prefix_read == 5 {
                self.prefix_read = 0;
                let len = u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]) as usize;
                if len > self.limit {
                    return Err(Status::resource_exhausted(format!(
                        "a Tunnel message of {len} bytes exceeds the limit of {} bytes",
                        self.limit
                    )));
                }
                self.remaining = len;
            }
        }
        Ok(())
    }
}

impl<B> Body for MessageLimit<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<tonic::codegen::StdError>,
{
    type Data = Bytes;
    type Error = tonic::codegen::StdError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        Poll::Ready(match frame {
            Some(Ok(frame)) => match frame.data_ref().map(|d| self.scan(d)) {
                Some(Err(status)) => Some(Err(status.into())),
                _ => Some(Ok(frame)),
            },
            Some(Err(e)) => Some(Err(e.into())),
            None => None,
        })
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: usize) -> Vec<u8> {
        let mut m = vec![0u8];
        m.extend_from_slice(&(len as u32).to_be_bytes());
        m.extend(std::iter::repeat_n(7u8, len));
        m
    }

    #[test]
    fn messages_within_the_limit_pass_whatever_the_chunking() {
        let mut stream = message(100);
        stream.extend(message(0));
        stream.extend(message(64));
        for chunk in [1, 2, 3, 5, 7, 64, 1000] {
            let mut limit = MessageLimit::new((), 100);
            for piece in stream.chunks(chunk) {
                limit.scan(piece).unwrap();
            }
            assert_eq!(
                (limit.prefix_read, limit.remaining),
                (0, 0),
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn a_prefix_announcing_too_much_is_refused_before_its_bytes() {
        let mut stream = message(10);
        stream.extend_from_slice(&[0, 0, 0, 0x10, 0x01]); // 4097 bytes
        for chunk in [1, 4, 15] {
            let mut limit = MessageLimit::new((), 4096);
            let refused = stream
                .chunks(chunk)
                .map(|piece| limit.scan(piece))
                .find_map(Result::err)
                .expect("refused");
            assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
            assert!(refused.message().contains("4097"), "{refused:?}");
        }
    }

    #[test]
    fn only_the_tunnel_method_is_limited() {
        use clawfed_proto::link::v1::spoke_link_server::SpokeLinkServer;
        use tonic::server::NamedService;
        assert_eq!(
            TUNNEL_PATH,
            format!(
                "/{}/Tunnel",
                <SpokeLinkServer<crate::link::session::SpokeLinkApi> as NamedService>::NAME
            )
        );
    }
}
