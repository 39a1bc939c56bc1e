//! A link connection's socket during its TLS handshake, telling when the
//! server's flight went out (`Awaiting`) and when the client's first bytes
//! after it came in (`Answered`): what tells a real client, which answers
//! within a round trip and its own work, from a handshake that stalls after
//! its ClientHello (see `admission.rs`). After the answer it is the plain
//! socket.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::admission::Phase;

/// Told each phase and when it was reached.
pub type PhaseSink = Box<dyn Fn(Phase, Instant) + Send + Sync>;

/// A socket whose handshake progress is reported to a [`PhaseSink`].
pub struct Watched {
    tcp: TcpStream,
    /// `None` once the client has answered: nothing more to tell.
    sink: Option<PhaseSink>,
    flight_out: bool,
}

impl Watched {
    pub fn new(tcp: TcpStream, sink: PhaseSink) -> Self {
        Self {
            tcp,
            sink: Some(sink),
            flight_out: false,
        }
    }
}

impl Watched {
    /// The first bytes written are the server's flight.
    fn wrote(&mut self, written: &Poll<std::io::Result<usize>>) {
        if !self.flight_out
            && matches!(written, Poll::Ready(Ok(n)) if *n > 0)
            && let Some(sink) = &self.sink
        {
            self.flight_out = true;
            sink(Phase::Awaiting, Instant::now());
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if this.flight_out
            && matches!(read, Poll::Ready(Ok(())))
            && buf.filled().len() > before
            && let Some(sink) = this.sink.take()
        {
            sink(Phase::Answered, Instant::now());
        }
        read
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.wrote(&written);
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.wrote(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

/// The session reads the spoke's certificate from the TCP connection's
/// info, as without the wrapper.
impl Connected for Watched {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.tcp.connect_info()
    }
}
