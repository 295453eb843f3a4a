//! Accepting and serving connections (HTTP/1.1, with hyper directly: `axum::serve` gives hyper
//! no timer, so none of hyper's own deadlines could fire).
//!
//! - A request's whole head must arrive within [`HEAD_DEADLINE`](crate::limits::HEAD_DEADLINE) of the connection starting to
//!   wait for it (hyper's header read timeout): a client trickling a byte at a time is cut.
//! - A connection with nothing to do for `client_timeout` is closed ([`crate::idle`]), but never
//!   while one of its handlers runs; a request body that stops arriving for `client_timeout`
//!   fails the read of the body.
//! - At most `max_connections` are open; the next one waits (in the listen backlog) until
//!   another closes.
//! - On shutdown no new connection is accepted, open ones finish their request in flight, and
//!   [`serve`] returns once all of them are closed.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;
use tower_http::timeout::TimeoutBody;

use crate::idle::{IdleTimeoutStream, InFlight};
use crate::limits::HEAD_DEADLINE;

#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Idle connections, and request bodies that stall, are cut after this.
    pub client_timeout: Duration,
    pub max_connections: usize,
}

/// Serves `app` on `listener` until `shutdown` resolves and every open connection is done.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop_tx, stop_rx) = watch::channel(false);
    // Every connection holds a sender; `recv` answers `None` once all of them are dropped.
    let (open_tx, mut open_rx) = mpsc::channel::<()>(1);
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    accept_failed(error).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        tokio::spawn(serve_connection(
            stream,
            app.clone(),
            limits,
            slot,
            stop_rx.clone(),
            open_tx.clone(),
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(open_tx);
    let _ = open_rx.recv().await;
}

/// A failed accept: a connection that died in the backlog is nothing; anything else (out of
/// file descriptors) is logged and retried after a pause rather than spun on.
async fn accept_failed(error: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::warn!(%error, "accepting a connection failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

async fn serve_connection(
    stream: TcpStream,
    app: Router,
    limits: ConnectionLimits,
    _slot: OwnedSemaphorePermit,
    mut stop: watch::Receiver<bool>,
    _open: mpsc::Sender<()>,
) {
    let in_flight = InFlight::default();
    let io = TokioIo::new(IdleTimeoutStream::new(
        stream,
        limits.client_timeout,
        in_flight.clone(),
    ));
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let running = in_flight.enter();
        let body_timeout = limits.client_timeout;
        let answer = app
            .clone()
            .oneshot(request.map(|body| Body::new(TimeoutBody::new(body_timeout, body))));
        async move {
            let response = answer.await;
            drop(running);
            response
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_DEADLINE);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let mut stopping = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                break;
            }
            _ = stop.wait_for(|stop| *stop), if !stopping => {
                stopping = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}
