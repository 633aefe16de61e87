//! Slow and quiet connections are closed. A client that opens a connection and then sends
//! nothing, sends its request a byte at a time, or stops reading what it is sent, would
//! otherwise hold a socket and its buffers for as long as it likes: enough of them and the
//! server runs out of descriptors or memory, and every admission call fails (slowloris).
//!
//! [`IdleCutoff`] is the TCP-level acceptor under TLS: every connection's stream fails with
//! `TimedOut`, whatever the protocol,
//!
//! - once nothing has been read from or written to it for the idle timeout (the anchor's 3 m);
//! - once the client has been sending for the answer timeout without a byte coming back: a
//!   request must be answered within it from its first byte, however slowly it arrives.
//!
//! The second clock only runs while the client talks: a kept-alive connection waiting for its
//! next request has only the idle timeout. That matters: kube-apiserver keeps HTTP/1.1
//! connections to each webhook and closes them itself after 90 s idle; a server that closed
//! them sooner (hyper's header timeout runs between requests too) would now and then close one
//! just as a review is sent on it, and that review fails.

use std::future::{Future, Ready};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// The idle timeout by default: the anchor's.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(180);

/// Accepts TCP connections with `TCP_NODELAY` (an answer leaves in more than one TLS record,
/// and with Nagle the last waits for the client's delayed ACK, up to 40 ms on Linux) and the
/// two timeouts.
#[derive(Clone, Copy, Debug)]
pub struct IdleCutoff {
    pub limits: Limits,
}

/// A connection's two clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Nothing read or written this long.
    pub idle: Duration,
    /// The client sending, nothing written back, this long.
    pub answer: Duration,
}

impl<S> axum_server::accept::Accept<TcpStream, S> for IdleCutoff {
    type Stream = IdleStream<TcpStream>;
    type Service = S;
    type Future = Ready<io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        std::future::ready(
            stream
                .set_nodelay(true)
                .map(|()| (IdleStream::new(stream, self.limits), service)),
        )
    }
}

/// A stream that fails with `TimedOut` once neither side has moved a byte for the idle limit,
/// or the client has been sending for the answer limit with nothing written back.
#[derive(Debug)]
pub struct IdleStream<T> {
    inner: T,
    limits: Limits,
    /// When a byte last moved.
    last: Instant,
    /// Since when the client has been sending with no byte written back.
    talking_since: Option<Instant>,
    /// Wakes the connection when the timeout may have run out; moved on lazily (see
    /// [`IdleStream::expired`]), so traffic costs no timer update per read.
    timer: Pin<Box<Sleep>>,
}

impl<T> IdleStream<T> {
    pub fn new(inner: T, limits: Limits) -> Self {
        let now = Instant::now();
        Self {
            inner,
            limits,
            last: now,
            talking_since: None,
            timer: Box::pin(tokio::time::sleep_until(now + limits.idle)),
        }
    }

    /// When the connection runs out of time, as things stand.
    fn due(&self) -> Instant {
        let idle = self.last + self.limits.idle;
        self.talking_since
            .map_or(idle, |since| idle.min(since + self.limits.answer))
    }

    /// Whether the connection has run out of time. Otherwise the timer is set for when it
    /// could, and will wake the task then.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            let due = self.due();
            if self.timer.deadline() != due {
                self.timer.as_mut().reset(due);
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            if Instant::now() >= self.due() {
                return true;
            }
        }
    }

    /// A write's outcome: bytes out move the idle clock and answer the client; a write that
    /// cannot go out (a client that stops reading fills our send buffer) is quiet too.
    fn written(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match polled {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.last = Instant::now();
                    self.talking_since = None;
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending if self.expired(cx) => Poll::Ready(Err(Self::quiet_too_long())),
            other => other,
        }
    }

    fn quiet_too_long() -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            "connection idle, or a request unanswered, too long",
        )
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleStream<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    let now = Instant::now();
                    this.last = now;
                    this.talking_since.get_or_insert(now);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.expired(cx) => Poll::Ready(Err(Self::quiet_too_long())),
            other => other,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleStream<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.written(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.written(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending if this.expired(cx) => Poll::Ready(Err(Self::quiet_too_long())),
            other => other,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const IDLE: Duration = Duration::from_secs(180);
    const ANSWER: Duration = Duration::from_secs(11);

    /// A server side wrapped as the acceptor wraps it, and the client's end.
    fn pair() -> (IdleStream<tokio::io::DuplexStream>, tokio::io::DuplexStream) {
        let (server, client) = tokio::io::duplex(64);
        let limits = Limits {
            idle: IDLE,
            answer: ANSWER,
        };
        (IdleStream::new(server, limits), client)
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_client_is_cut_off_after_the_idle_timeout_not_before() {
        let (mut server, _client) = pair();
        let started = Instant::now();
        let mut buf = [0u8; 8];
        let error = server.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), IDLE);
    }

    #[tokio::test(start_paused = true)]
    async fn every_exchange_restarts_the_idle_clock() {
        let (mut server, mut client) = pair();
        let started = Instant::now();
        // A request every 100 s, each answered: never quiet for 180 s in a row.
        let talker = tokio::spawn(async move {
            let mut buf = [0u8; 2];
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_secs(100)).await;
                client.write_all(b"x").await.unwrap();
                client.read_exact(&mut buf).await.unwrap();
            }
            client
        });
        let mut buf = [0u8; 8];
        for _ in 0..5 {
            assert_eq!(server.read(&mut buf).await.unwrap(), 1);
            server.write_all(b"ok").await.unwrap();
        }
        let _client = talker.await.unwrap();
        // Then silence: cut off 180 s after the last answer, at 500 + 180 s.
        let error = server.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(500) + IDLE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_trickled_a_byte_at_a_time_is_cut_off_at_the_answer_timeout() {
        let (mut server, mut client) = pair();
        // A byte every second, never answered: the idle clock never runs out, the answer
        // clock does, 11 s after the first byte.
        tokio::time::sleep(Duration::from_secs(30)).await;
        let first = Instant::now();
        let talker = tokio::spawn(async move {
            for _ in 0..60 {
                if client.write_all(b"x").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            client
        });
        let mut buf = [0u8; 8];
        let error = loop {
            match server.read(&mut buf).await {
                Ok(n) => assert!(n > 0),
                Err(e) => break e,
            }
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(first.elapsed(), ANSWER);
        drop(server);
        let _client = talker.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_alive_connection_between_requests_has_only_the_idle_clock() {
        let (mut server, mut client) = pair();
        // A request, answered; then 170 s of nothing (kube-apiserver's pool keeps such
        // connections up to 90 s): still open, and the next request is read.
        client.write_all(b"req").await.unwrap();
        let mut buf = [0u8; 3];
        server.read_exact(&mut buf).await.unwrap();
        server.write_all(b"ans").await.unwrap();
        client.read_exact(&mut buf).await.unwrap();
        // The server waits for the next request the whole time, as hyper does.
        let (read, ()) = tokio::join!(server.read_exact(&mut buf), async {
            tokio::time::sleep(Duration::from_secs(170)).await;
            client.write_all(b"req").await.unwrap();
        });
        read.unwrap();
        assert_eq!(&buf, b"req");
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_is_cut_off_too() {
        let (mut server, _client) = pair();
        let started = Instant::now();
        // The pipe holds 64 bytes; the client reads none of them.
        let error = server.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), IDLE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_connection_stays_open() {
        let (mut server, mut client) = pair();
        // Half an hour of requests and answers 60 s apart.
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_secs(60)).await;
            client.write_all(b"ping").await.unwrap();
            let mut buf = [0u8; 4];
            server.read_exact(&mut buf).await.unwrap();
            server.write_all(b"pong").await.unwrap();
            client.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"pong");
        }
    }
}
