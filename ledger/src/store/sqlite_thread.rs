//! How the embedded store's own connections are kept: opened when needed and dropped after a
//! failure, so a connection left in doubt (a transaction not rolled back, a lock held) is never
//! reused (`run_reopening`, which the writer uses too); and the feed reader's thread, a queue
//! of requests served one at a time that way.

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
/// for it (see [`run_reopening`]).
pub(super) fn serve<C, W, T>(
    mut current: Option<C>,
    open: impl Fn() -> Result<C, StoreError>,
    queue: mpsc::Receiver<Request<W, T>>,
    mut run: impl FnMut(&mut C, W) -> Result<T, StoreError>,
) {
    for Request { work, reply } in queue {
        let done = run_reopening(&mut current, &open, |conn| run(conn, work));
        let _ = reply.send(done);
    }
}

/// Runs `work` on `current`, or on a connection `open`ed for it when there is none. A
/// connection whose work failed is dropped (closing it rolls back what it left open), so the
/// next work opens a fresh one; one whose work succeeded is kept in `current`.
pub(super) fn run_reopening<C, T>(
    current: &mut Option<C>,
    open: impl FnOnce() -> Result<C, StoreError>,
    work: impl FnOnce(&mut C) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let mut conn = match current.take() {
        Some(conn) => conn,
        None => open()?,
    };
    let done = work(&mut conn);
    if done.is_ok() {
        *current = Some(conn);
    }
    done
}
