//! What a backend implements: only what differs between SQLite and PostgreSQL (the append with
//! its transaction, the pools, the store's identity). [`EventStore`] is implemented once for
//! every backend, its reads over the backend's pools with the shared SQL of [`super::rows`].

use async_trait::async_trait;
use domain::EncodedSnapshot;
use sqlx::{ColumnIndex, Decode, Encode, Executor, IntoArguments, Pool, Type};
use tokio::sync::watch;
use uuid::Uuid;

use super::rows::{Reader, StreamReads};
use super::{
    AppendResult, Database, EventStore, FeedEvent, Position, RecordedEvent, StoreError,
    StreamAppend,
};

#[async_trait]
pub trait Backend: Send + Sync + 'static {
    type Db: sqlx::Database;

    /// `"sqlite"` or `"postgres"`.
    const NAME: &'static str;

    /// How this backend's events are found by stream.
    const STREAM_READS: StreamReads;

    /// See [`EventStore::database`].
    fn database_of_events(&self) -> Database;

    /// The pool that serves reads of streams, snapshots and the head.
    fn read_pool(&self) -> &Pool<Self::Db>;

    /// See [`EventStore::read_feed`]: a backend reads the feed its own way, since a follower of
    /// the whole log reads every event written.
    async fn read_feed_page(
        &self,
        after: Position,
        max_count: usize,
    ) -> Result<Vec<FeedEvent>, StoreError>;

    /// See [`EventStore::append`], for a batch that passed `plan::check_batch`.
    async fn append_valid_batch(
        &self,
        batch: Vec<StreamAppend>,
    ) -> Result<Vec<AppendResult>, StoreError>;

    /// See [`EventStore::identity`].
    async fn store_identity(&self) -> Result<Option<String>, StoreError>;

    /// The head this process last saw (see [`EventStore::watch_head`]).
    fn head_sender(&self) -> &watch::Sender<Position>;
}

#[async_trait]
impl<B> EventStore for B
where
    B: Backend,
    for<'c> &'c mut <B::Db as sqlx::Database>::Connection: Executor<'c, Database = B::Db>,
    for<'q> <B::Db as sqlx::Database>::Arguments<'q>: IntoArguments<'q, B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    usize: ColumnIndex<<B::Db as sqlx::Database>::Row>,
    for<'r> i64: Decode<'r, B::Db>,
    for<'r> String: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> Uuid: Decode<'r, B::Db> + Type<B::Db>,
{
    fn backend(&self) -> &'static str {
        B::NAME
    }

    fn database(&self) -> Database {
        self.database_of_events()
    }

    async fn append(&self, batch: Vec<StreamAppend>) -> Result<Vec<AppendResult>, StoreError> {
        super::plan::check_batch(&batch)?;
        self.append_valid_batch(batch).await
    }

    async fn read_stream(
        &self,
        stream: &str,
        from_version: u64,
        max_count: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        Reader(self.read_pool())
            .stream(&B::STREAM_READS, stream, from_version, max_count)
            .await
    }

    async fn read_all(
        &self,
        after: Position,
        max_count: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        Reader(self.read_pool()).all(after, max_count).await
    }

    async fn read_feed(
        &self,
        after: Position,
        max_count: usize,
    ) -> Result<Vec<FeedEvent>, StoreError> {
        self.read_feed_page(after, max_count).await
    }

    async fn stream_names(&self, after: &str, max_count: usize) -> Result<Vec<String>, StoreError> {
        Reader(self.read_pool())
            .stream_names(&B::STREAM_READS, after, max_count)
            .await
    }

    async fn identity(&self) -> Result<Option<String>, StoreError> {
        self.store_identity().await
    }

    async fn read_snapshot(&self, stream: &str) -> Result<Option<EncodedSnapshot>, StoreError> {
        Reader(self.read_pool()).snapshot(stream).await
    }

    async fn head(&self) -> Result<Position, StoreError> {
        Reader(self.read_pool()).head().await
    }

    fn watch_head(&self) -> watch::Receiver<Position> {
        self.head_sender().subscribe()
    }
}
