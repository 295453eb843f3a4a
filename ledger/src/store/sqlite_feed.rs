//! The embedded store's reader of the global feed ([`super::EventStore::read_feed`]): a thread
//! of its own owning one read-only connection, which reads each page of rows straight into
//! [`FeedEvent`]s and sends the page back whole.
//!
//! Why a thread rather than a pooled async connection: sqlx's SQLite worker copies each value
//! of each row and sends every row to the async side on its own, waking the reader each time;
//! a follower of the whole log (the views) reads every event the ledger writes, so that cost
//! was paid once per event. Here one page crosses once.
//!
//! The thread starts with the first read, from the thread that asks: a thread inherits its
//! creator's CPU priority, so a follower that runs at a lower priority (the views) keeps its
//! reads there too. A read that fails drops the connection; the next read opens a fresh one.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, Row};

use super::rows::{read_limit, to_i64, FeedColumns, READ_FEED};
use super::sqlite_thread;
use super::{FeedEvent, Position, StoreError, MAX_READ_COUNT};

/// A page to read: the events after a position, at most a count.
type Request = sqlite_thread::Request<(Position, usize), Vec<FeedEvent>>;

const STOPPED: &str = "the feed's reader stopped";

/// The handle of the feed's reader; its thread ends once this is dropped.
pub(super) struct FeedThread {
    path: PathBuf,
    busy_timeout: Duration,
    /// The queue of the reader thread, once the first read started it.
    requests: Mutex<Option<mpsc::Sender<Request>>>,
}

impl FeedThread {
    /// A reader of the store file at `path`; nothing is opened until the first read.
    pub(super) fn new(path: &Path, busy_timeout: Duration) -> Self {
        FeedThread {
            path: path.to_owned(),
            busy_timeout,
            requests: Mutex::new(None),
        }
    }

    /// Events after `after` in position order, at most `max_count` (capped at
    /// [`MAX_READ_COUNT`]).
    pub(super) async fn read(
        &self,
        after: Position,
        max_count: usize,
    ) -> Result<Vec<FeedEvent>, StoreError> {
        let page = (after, max_count.min(MAX_READ_COUNT));
        sqlite_thread::ask(&self.queue()?, page, STOPPED).await
    }

    /// The reader thread's queue, starting the thread on the first call.
    fn queue(&self) -> Result<mpsc::Sender<Request>, StoreError> {
        let mut requests = self
            .requests
            .lock()
            .map_err(|_| StoreError::Unavailable(STOPPED.into()))?;
        if let Some(queue) = requests.as_ref() {
            return Ok(queue.clone());
        }
        let (queue, incoming) = mpsc::channel::<Request>();
        let opener = Opener {
            path: self.path.clone(),
            busy_timeout: self.busy_timeout,
        };
        std::thread::Builder::new()
            .name(super::thread_names::FEED.into())
            .spawn(move || {
                sqlite_thread::serve(
                    None,
                    || opener.open(),
                    incoming,
                    |conn, (after, max)| read_page(conn, after, max),
                )
            })
            .map_err(|e| StoreError::Unavailable(format!("cannot start the feed's reader: {e}")))?;
        *requests = Some(queue.clone());
        Ok(queue)
    }
}

struct Opener {
    path: PathBuf,
    busy_timeout: Duration,
}

impl Opener {
    fn open(&self) -> Result<Connection, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&self.path, flags).map_err(read_failed)?;
        conn.busy_timeout(self.busy_timeout).map_err(read_failed)?;
        Ok(conn)
    }
}

/// A page of the shared feed read ([`READ_FEED`]: the same SQL and columns as PostgreSQL's).
fn read_page(
    conn: &Connection,
    after: Position,
    max_count: usize,
) -> Result<Vec<FeedEvent>, StoreError> {
    let mut read = conn.prepare_cached(READ_FEED).map_err(read_failed)?;
    let mut rows = read
        .query((to_i64(after), read_limit(max_count)))
        .map_err(read_failed)?;
    let mut page = Vec::with_capacity(max_count);
    while let Some(row) = rows.next().map_err(read_failed)? {
        page.push(feed_columns(row).map_err(read_failed)?.into_event()?);
    }
    Ok(page)
}

fn feed_columns(row: &Row<'_>) -> rusqlite::Result<FeedColumns> {
    Ok(FeedColumns {
        position: row.get(0)?,
        stream: row.get(1)?,
        version: row.get(2)?,
        event_type: row.get(3)?,
        schema_version: row.get(4)?,
        data: row.get(5)?,
        recorded_at_ms: row.get(6)?,
        actor: row.get(7)?,
        request_id: row.get(8)?,
        correlation_id: row.get(9)?,
        principal: row.get(10)?,
    })
}

/// A value of the wrong type is a corrupt row; anything else SQLite refused (a lock held past
/// the busy timeout, an I/O error) may succeed later.
fn read_failed(error: rusqlite::Error) -> StoreError {
    match error {
        rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::Utf8Error(..) => StoreError::Corrupt(error.to_string()),
        other => StoreError::Unavailable(other.to_string()),
    }
}
