//! A connection thread of the embedded store (the feed's reader): a queue of requests served
//! one at a time on a connection that is opened when needed and dropped after a failure, so a
//! connection left in doubt (a transaction not rolled back, a lock held) is never reused.

use std::sync::mpsc;

use tokio::sync::oneshot;

use super::StoreError;

/// One piece of work for a connection thread, and where its answer goes.
pub(super) struct Request<W, T> {
    work: W,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

/// Sends `work` to the thread behind `queue` and waits for its answer; `stopped` says which
/// thread is gone if it is. The work is done even if the caller stops waiting.
pub(super) async fn ask<W, T>(
    queue: &mpsc::Sender<Request<W, T>>,
    work: W,
    stopped: &str,
) -> Result<T, StoreError> {
    let (reply, answer) = oneshot::channel();
    queue
        .send(Request { work, reply })
        .map_err(|_| StoreError::Unavailable(stopped.into()))?;
    answer
        .await
        .map_err(|_| StoreError::Unavailable(stopped.into()))?
}

/// The thread's loop: each request in the order sent, on `current` or a connection `open`ed
/// for it. A connection whose work failed is dropped; the next request opens a fresh one.
pub(super) fn serve<C, W, T>(
    mut current: Option<C>,
    open: impl Fn() -> Result<C, StoreError>,
    queue: mpsc::Receiver<Request<W, T>>,
    mut run: impl FnMut(&mut C, W) -> Result<T, StoreError>,
) {
    for Request { work, reply } in queue {
        let mut conn = match current.take() {
            Some(conn) => conn,
            None => match open() {
                Ok(conn) => conn,
                Err(error) => {
                    let _ = reply.send(Err(error));
                    continue;
                }
            },
        };
        let done = run(&mut conn, work);
        if done.is_ok() {
            current = Some(conn);
        }
        let _ = reply.send(done);
    }
}
