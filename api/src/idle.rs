//! Connections that go quiet are closed. Every accepted connection is wrapped so that a read
//! that has waited `idle` since the last byte in or out fails with `TimedOut`, and hyper closes
//! the connection. Idle keep-alive connections are closed the same way.
//!
//! The clock does not run while a handler of the connection is working ([`InFlight`]): hyper
//! keeps a read pending during a request to notice a client that hangs up, and a handler may
//! rightly take longer than the idle timeout (a `min_position` wait). A request body that stalls
//! is bounded separately (a per-read timeout on the body, see `transport`), and a request's head
//! by hyper's header deadline.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// How many requests of one connection have a handler running.
#[derive(Clone, Debug, Default)]
pub struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    /// Marks a handler as running until the guard is dropped (also when its future is).
    pub fn enter(&self) -> InFlightGuard {
        self.0.fetch_add(1, Ordering::AcqRel);
        InFlightGuard(self.0.clone())
    }

    pub fn is_busy(&self) -> bool {
        self.0.load(Ordering::Acquire) > 0
    }
}

pub struct InFlightGuard(Arc<AtomicUsize>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

pub struct IdleTimeoutStream {
    inner: TcpStream,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
    in_flight: InFlight,
}

impl IdleTimeoutStream {
    pub fn new(inner: TcpStream, idle: Duration, in_flight: InFlight) -> Self {
        IdleTimeoutStream {
            inner,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
            in_flight,
        }
    }

    fn touch(&mut self) {
        let next = Instant::now() + self.idle;
        self.deadline.as_mut().reset(next);
    }
}

impl AsyncRead for IdleTimeoutStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.touch();
                Poll::Ready(result)
            }
            // A handler is working: the client is waiting for us, not idle. The clock starts
            // again from the answer (a write touches it).
            Poll::Pending if this.in_flight.is_busy() => {
                this.touch();
                Poll::Pending
            }
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client sent nothing for too long",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for IdleTimeoutStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if written.is_ready() {
            this.touch();
        }
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if written.is_ready() {
            this.touch();
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
