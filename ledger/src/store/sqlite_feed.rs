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
use tokio::sync::oneshot;

use super::rows::{timestamp_from_ms, to_i64, to_u64};
use super::{FeedEvent, Metadata, Position, StoreError, MAX_READ_COUNT};

/// The columns of a [`FeedEvent`], in the order [`feed_event`] reads them; the body as text,
/// as the shared reads cast it (a body stored as anything else then fails to decode, with its
/// position, rather than failing the page).
const READ_FEED: &str = "SELECT position, stream, version, event_type, schema_version, \
     CAST(data AS TEXT), \
     recorded_at_ms, actor, request_id, correlation_id, principal \
     FROM events WHERE position > ?1 ORDER BY position LIMIT ?2";

struct Request {
    after: Position,
    max_count: usize,
    reply: oneshot::Sender<Result<Vec<FeedEvent>, StoreError>>,
}

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
        let (reply, answer) = oneshot::channel();
        let request = Request {
            after,
            max_count: max_count.min(MAX_READ_COUNT),
            reply,
        };
        self.queue()?
            .send(request)
            .map_err(|_| StoreError::Unavailable("the feed's reader stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the feed's reader stopped".into()))?
    }

    /// The reader thread's queue, starting the thread on the first call.
    fn queue(&self) -> Result<mpsc::Sender<Request>, StoreError> {
        let mut requests = self
            .requests
            .lock()
            .map_err(|_| StoreError::Unavailable("the feed's reader stopped".into()))?;
        if let Some(queue) = requests.as_ref() {
            return Ok(queue.clone());
        }
        let (queue, incoming) = mpsc::channel::<Request>();
        let opener = Opener {
            path: self.path.clone(),
            busy_timeout: self.busy_timeout,
        };
        std::thread::Builder::new()
            .name("quota-sqlite-feed".into())
            .spawn(move || serve(&opener, incoming))
            .map_err(|e| StoreError::Unavailable(format!("cannot start the feed's reader: {e}")))?;
        *requests = Some(queue.clone());
        Ok(queue)
    }
}

/// The reader thread's loop: one page at a time, on a connection opened when first needed.
fn serve(opener: &Opener, incoming: mpsc::Receiver<Request>) {
    let mut current: Option<Connection> = None;
    for request in incoming {
        let conn = match current.take() {
            Some(conn) => conn,
            None => match opener.open() {
                Ok(conn) => conn,
                Err(error) => {
                    let _ = request.reply.send(Err(error));
                    continue;
                }
            },
        };
        let page = read_page(&conn, request.after, request.max_count);
        if page.is_ok() {
            current = Some(conn);
        }
        let _ = request.reply.send(page);
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

fn read_page(
    conn: &Connection,
    after: Position,
    max_count: usize,
) -> Result<Vec<FeedEvent>, StoreError> {
    let mut read = conn.prepare_cached(READ_FEED).map_err(read_failed)?;
    let mut rows = read
        .query((to_i64(after), to_i64(max_count as u64)))
        .map_err(read_failed)?;
    let mut page = Vec::with_capacity(max_count.min(1024));
    while let Some(row) = rows.next().map_err(read_failed)? {
        page.push(feed_event(row)?);
    }
    Ok(page)
}

/// A row of [`READ_FEED`]. An empty metadata field reads as absent.
fn feed_event(row: &Row<'_>) -> Result<FeedEvent, StoreError> {
    let text = |index: usize| -> Result<Option<String>, StoreError> {
        Ok(row
            .get::<_, Option<String>>(index)
            .map_err(read_failed)?
            .filter(|s| !s.is_empty()))
    };
    let integer = |index: usize| row.get::<_, i64>(index).map_err(read_failed);
    let schema_version = integer(4)?;
    Ok(FeedEvent {
        position: to_u64(integer(0)?, "position")?,
        stream: row.get(1).map_err(read_failed)?,
        version: to_u64(integer(2)?, "version")?,
        event_type: row.get(3).map_err(read_failed)?,
        schema_version: u16::try_from(schema_version)
            .map_err(|_| StoreError::Corrupt(format!("schema version {schema_version}")))?,
        data: row.get(5).map_err(read_failed)?,
        recorded_at: timestamp_from_ms(integer(6)?)?,
        metadata: Metadata {
            actor: text(7)?,
            request_id: text(8)?,
            correlation_id: text(9)?,
            principal: text(10)?,
        },
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
