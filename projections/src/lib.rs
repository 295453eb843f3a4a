//! The read side: usage and audit views built from the ledger's global feed, their rebuilds and
//! their verification against the domain's replay.
//!
//! It depends on `domain` and `ledger`, and reads the events only through the ledger's
//! `EventStore` (never its tables), never writing an event; it may not depend on the HTTP edge
//! (`api`) or any client. Quota decisions never wait on it.
//!
//! - [`fold`](crate::fold): the usage state folded in memory from events, and audit rows.
//! - `tables`: the view tables (migrations `postgres/0002_views.sql`, and on SQLite
//!   `sqlite-views/0001_views.sql` in the views' own file), one transaction type for both
//!   backends; every row carries a *generation*, so a rebuild fills a fresh copy beside the
//!   live one.
//! - `checkpoint`: applying a batch to the live views and their checkpoints in one
//!   transaction; `follower`: doing that whenever the feed moves.
//! - `usage`, `audit`, `reservations`, `projects`: the queries (a project's reservations and
//!   the projects are listed from the audit view); `history`: one resource's usage over time,
//!   from the audit view's entries; `point_in_time`: usage at a past instant, replayed from the
//!   streams with the domain's fold.
//! - [`limits`]: the read side's bounds (batches, pages, timings), in one place.
//! - [`thread_names`]: the names of the views' threads, for profiles and the bench's CPU split.
//! - `feed`: the views' only reader of the events (`EventStore::read_feed`, the codec).
//! - `rebuild`: blue/green rebuilds; `verify`: the domain's replay, read stream by stream,
//!   compared with the views; `health`: which views are degraded and why.
//!
//! Several nodes may run [`Projections::start`] on one PostgreSQL database: view writers
//! serialise on an advisory lock and move checkpoints only from the position they read, so no
//! batch is applied twice.

mod audit;
mod audit_keys;
mod background;
mod checkpoint;
mod db;
mod feed;
mod fold;
mod follower;
mod health;
mod history;
pub mod limits;
mod paging;
mod point_in_time;
mod projects;
mod rebuild;
mod reservations;
mod tables;
pub mod thread_names;
mod tree;
mod usage;
mod verify;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

pub use audit::{decode_cursor, encode_cursor, AuditEntry, AuditPage, AuditQuery, UsageAfter};
pub use db::sqlite_views_path;
pub use domain::SubtreeUsage;
use domain::{
    Deltas, Limit, ProjectId, ReservationId, ReservationStatus, ResourceName, Timestamp, UserId,
    DEFAULTS_STREAM,
};
pub use health::ViewHealth;
pub use history::{step_instants, History, HistoryPoint, HistoryQuery};
use ledger::{EventStore, Position, StoreError};
pub use limits::{
    DEFAULT_AUDIT_PAGE, DEFAULT_PROJECT_PAGE, DEFAULT_RESERVATION_PAGE, MAX_AUDIT_PAGE,
    MAX_HISTORY_POINTS, MAX_PROJECT_PAGE, MAX_RESERVATION_PAGE,
};

/// The views this crate maintains, by name (as in `/v1/admin/projections/{name}/rebuild`).
pub const PROJECTION_NAMES: [&str; 2] = ["usage", "audit"];

#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no projection named {0:?}")]
    UnknownProjection(String),
    #[error("invalid cursor")]
    InvalidCursor,
    /// A usage history's step cuts its range into more points than it may answer.
    #[error("the step cuts the range into more than {0} points")]
    TooManyPoints(usize),
    #[error("projection {name} reached position {reached}, not {wanted}, within the timeout")]
    Timeout {
        name: String,
        wanted: Position,
        reached: Position,
    },
    #[error("stored event at position {position} is unreadable: {message}")]
    Undecodable { position: Position, message: String },
    /// The views' database failed; the message is for logs only (it may hold SQL).
    #[error("the views' database is unavailable")]
    Database(String),
    /// The view tables hold something this code cannot read.
    #[error("the view tables are corrupt: {0}")]
    CorruptView(String),
    /// The view was built by an older version of this code and lacks what the query reads;
    /// the rebuild started at launch replaces it.
    #[error("the {0} view is being rebuilt for this version")]
    Outdated(String),
}

impl From<sqlx::Error> for ProjectionError {
    fn from(error: sqlx::Error) -> Self {
        ProjectionError::Database(error.to_string())
    }
}

/// One resource of a project in the usage view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceUsage {
    /// The effective limit (-1 unlimited).
    pub limit: Limit,
    pub in_use: i64,
    pub reserved: i64,
    /// `limit - in_use - reserved`; `None` when unlimited.
    pub headroom: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageReport {
    pub project: ProjectId,
    pub resources: BTreeMap<ResourceName, ResourceUsage>,
    /// The global position the report reflects.
    pub position: Position,
    /// A project with descendants (SPEC rule 11), at a past instant: its subtree's usage then.
    /// `None` from the usage view, which keeps each project's own usage only.
    pub subtree: Option<SubtreeUsage>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProjectQuery {
    /// Only ids that start with this.
    pub prefix: Option<String>,
    /// Page size, 1 to MAX_PROJECT_PAGE (DEFAULT_PROJECT_PAGE when None).
    pub limit: Option<usize>,
    /// Opaque cursor from a previous page's `next`.
    pub cursor: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectPage {
    /// Project ids in order.
    pub projects: Vec<String>,
    /// The parent of each listed project that has one.
    pub parents: BTreeMap<String, String>,
    pub next: Option<String>,
}

/// The statuses a reservation list can be filtered on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusFilter {
    Held,
    Committed,
    Released,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReservationQuery {
    pub status: Option<StatusFilter>,
    /// Only the reservations made for this user.
    pub user: Option<UserId>,
    /// Only the reservations made before this time.
    pub older_than: Option<Timestamp>,
    /// Page size, 1 to MAX_RESERVATION_PAGE (DEFAULT_RESERVATION_PAGE when None).
    pub limit: Option<usize>,
    /// Opaque cursor from a previous page's `next`.
    pub cursor: Option<String>,
}

/// A reservation as the audit view records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedReservation {
    pub reservation_id: ReservationId,
    pub deltas: Deltas,
    /// A counted reserve: the count granted.
    pub count: Option<u32>,
    pub user: Option<UserId>,
    pub status: ReservationStatus,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    /// The global position of the event that gave the reservation its status.
    pub position: Position,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationPage {
    /// In the order they were made.
    pub reservations: Vec<ListedReservation>,
    /// The cursor to go on from; `None` when the list is complete. A filtered page that looked
    /// at its most reservations may hold fewer than asked for, even none, and still have one.
    pub next: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectionStatus {
    pub name: String,
    pub position: Position,
    pub head: Position,
    pub lag: u64,
}

/// One row of a stored view that differs from a replay of the events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    pub view: String,
    pub project: String,
    pub resource: String,
    pub field: String,
    pub stored: Option<i64>,
    pub expected: Option<i64>,
}

/// What the background tasks share with the handle.
pub(crate) struct Inner {
    store: Arc<dyn EventStore>,
    /// The views' only reader of the events.
    feed: feed::Feed,
    db: db::Db,
    /// The position this process last saw every view reach (a lower bound of the truth).
    applied: watch::Sender<Position>,
    /// The highest position a reader of this process has waited for ([`Projections::wait_for`]):
    /// the follower stops gathering events once it is beyond what the views have applied.
    wanted: watch::Sender<Position>,
    /// Whether the follower's batches succeed.
    health: health::Health,
    /// Test hook: the next batch fails after writing its rows, before its checkpoint.
    fail_before_checkpoint: AtomicBool,
    /// One rebuild at a time in this process.
    rebuild_lock: tokio::sync::Mutex<()>,
}

pub struct Projections {
    inner: Arc<Inner>,
    shutdown: watch::Sender<bool>,
}

impl Drop for Projections {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

fn view_names(name: Option<&str>) -> Result<Vec<&'static str>, ProjectionError> {
    match name {
        None => Ok(PROJECTION_NAMES.to_vec()),
        Some(name) => PROJECTION_NAMES
            .iter()
            .find(|n| **n == name)
            .map(|n| vec![*n])
            .ok_or_else(|| ProjectionError::UnknownProjection(name.chars().take(64).collect())),
    }
}

impl Inner {
    /// Tells the follower a reader waits for `position`, so it applies what it has instead of
    /// gathering more. Capped at the head this process knows: a position nothing has reached
    /// yet (a client's typo, or another node's write not yet announced) must not stop the
    /// follower from gathering for good; the waiter asks again as the head moves.
    fn hurry_to(&self, position: Position) {
        let reachable = position.min(*self.store.watch_head().borrow());
        ledger::store::advance_position(&self.wanted, reachable);
    }
}

impl Projections {
    /// Creates the view tables if needed, rebuilds any view whose code version changed, and
    /// starts following the feed in the background.
    pub async fn start(store: Arc<dyn EventStore>) -> Result<Arc<Projections>, ProjectionError> {
        let projections = Self::open(store).await?;
        follower::spawn(projections.inner.clone(), projections.shutdown.subscribe());
        let inner = projections.inner.clone();
        // Views built by another version of this code are rebuilt beside the live ones; until
        // the switch, readers get the old copies, kept current by the follower.
        background::spawn(async move {
            if let Err(error) = inner.rebuild(&PROJECTION_NAMES, true, &|_, _| {}).await {
                tracing::error!(error = ?error, "rebuilding outdated views failed");
            }
        });
        Ok(projections)
    }

    /// Opens the views without following the feed (for the CLI's rebuild and verify).
    pub async fn open(store: Arc<dyn EventStore>) -> Result<Arc<Projections>, ProjectionError> {
        let db = db::Db::of(&*store).await?;
        let mut tx = db.begin_write().await?;
        for name in PROJECTION_NAMES {
            tx.ensure_view(name).await?;
        }
        let heads = tx.heads().await?;
        tx.commit().await?;
        let inner = Arc::new(Inner {
            feed: feed::Feed::new(store.clone()),
            store,
            db,
            applied: watch::Sender::new(checkpoint::applied_position(&heads)),
            wanted: watch::Sender::new(0),
            health: health::Health::default(),
            fail_before_checkpoint: AtomicBool::new(false),
            rebuild_lock: tokio::sync::Mutex::new(()),
        });
        Ok(Arc::new(Projections {
            inner,
            shutdown: watch::Sender::new(false),
        }))
    }

    /// Waits until every view has applied `position` (read-your-writes), at most `timeout`.
    pub async fn wait_for(
        &self,
        position: Position,
        timeout: Duration,
    ) -> Result<(), ProjectionError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut applied = self.inner.applied.subscribe();
        loop {
            if *applied.borrow_and_update() >= position {
                return Ok(());
            }
            self.inner.hurry_to(position);
            // Another node (or a rebuild) may have moved the views: ask the database.
            let statuses = self.status().await?;
            let lagging = statuses.iter().min_by_key(|s| s.position);
            let reached = lagging.map_or(0, |s| s.position);
            if reached >= position {
                return Ok(());
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(ProjectionError::Timeout {
                    name: lagging.map_or_else(String::new, |s| s.name.clone()),
                    wanted: position,
                    reached,
                });
            }
            let pause = (deadline - now).min(Duration::from_millis(50));
            tokio::select! {
                _ = applied.changed() => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// The project's usage from the usage view; holds past their expiry at `now` do not count.
    pub async fn usage(
        &self,
        project: &ProjectId,
        now: Timestamp,
    ) -> Result<UsageReport, ProjectionError> {
        self.inner.usage(project, now).await
    }

    /// The project's usage as it stood at `at`, from its stream.
    pub async fn usage_at(
        &self,
        project: &ProjectId,
        at: Timestamp,
    ) -> Result<UsageReport, ProjectionError> {
        point_in_time::usage_at(&*self.inner.store, project, None, at).await
    }

    /// A user's usage as it stood at `at`, from the project's stream.
    pub async fn user_usage_at(
        &self,
        project: &ProjectId,
        user: &UserId,
        at: Timestamp,
    ) -> Result<UsageReport, ProjectionError> {
        point_in_time::usage_at(&*self.inner.store, project, Some(user), at).await
    }

    pub async fn audit(
        &self,
        project: &ProjectId,
        query: &AuditQuery,
    ) -> Result<AuditPage, ProjectionError> {
        self.inner.audit(project.as_str(), query).await
    }

    /// One resource's usage over time, from the audit view (see `history`).
    pub async fn history(
        &self,
        project: &ProjectId,
        query: &HistoryQuery,
    ) -> Result<History, ProjectionError> {
        self.inner.history(project, query).await
    }

    /// A project's reservations, in the order they were made, a page at a time.
    pub async fn reservations(
        &self,
        project: &ProjectId,
        query: &ReservationQuery,
    ) -> Result<ReservationPage, ProjectionError> {
        self.inner.reservations(project.as_str(), query).await
    }

    /// The projects with at least one event, in id order, a page at a time.
    pub async fn projects(&self, query: &ProjectQuery) -> Result<ProjectPage, ProjectionError> {
        self.inner.projects(query).await
    }

    /// The children of `parent` (from their `ParentSet` events), in id order, a page at a time.
    pub async fn children(
        &self,
        parent: &ProjectId,
        query: &ProjectQuery,
    ) -> Result<ProjectPage, ProjectionError> {
        self.inner.children(parent, query).await
    }

    /// The audit of the default limits (the `$defaults` stream's events).
    pub async fn defaults_audit(&self, query: &AuditQuery) -> Result<AuditPage, ProjectionError> {
        self.inner.audit(DEFAULTS_STREAM, query).await
    }

    pub async fn status(&self) -> Result<Vec<ProjectionStatus>, ProjectionError> {
        let mut tx = self.inner.db.begin_read().await?;
        let heads = tx.heads().await?;
        tx.rollback().await?;
        let head = self.inner.store.head().await?;
        Ok(PROJECTION_NAMES
            .iter()
            .map(|name| {
                let position = checkpoint::head_of(&heads, name).map_or(0, |h| h.position);
                ProjectionStatus {
                    name: (*name).to_owned(),
                    position,
                    head: head.max(position),
                    lag: head.saturating_sub(position),
                }
            })
            .collect())
    }

    /// Each view's health on this node: failed batches so far, and why it is not following
    /// the events while it is not (its follower retries).
    pub fn health(&self) -> Vec<ViewHealth> {
        self.inner.health.report()
    }

    /// Starts rebuilding a view beside the live one; returns at once (HTTP 202).
    pub async fn request_rebuild(self: &Arc<Self>, name: &str) -> Result<(), ProjectionError> {
        let views = view_names(Some(name))?;
        let inner = self.inner.clone();
        tokio::spawn(async move {
            if let Err(error) = inner.rebuild(&views, false, &|_, _| {}).await {
                tracing::error!(error = ?error, "rebuild failed");
            }
        });
        Ok(())
    }

    /// Rebuilds a view (or all, with `None`) and waits; `progress(done, total)` is called as
    /// events are applied.
    pub async fn rebuild(
        &self,
        name: Option<&str>,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<(), ProjectionError> {
        let views = view_names(name)?;
        self.inner.rebuild(&views, false, progress).await
    }

    /// Replays the events in memory and lists every stored row that differs.
    pub async fn verify(&self) -> Result<Vec<Difference>, ProjectionError> {
        self.inner.verify().await
    }

    /// Applies pending events to the views now, in batches, until caught up (for tools that
    /// opened the views without a follower).
    pub async fn catch_up(&self) -> Result<Position, ProjectionError> {
        loop {
            if let checkpoint::Applied::UpToDate = self.inner.apply_next_batch().await? {
                return Ok(*self.inner.applied.borrow());
            }
        }
    }

    /// Fault injection for tests: the views' reader of the feed leaves out the event at
    /// `position` from now on, as a buggy reader would. `verify`, which reads the events by a
    /// path of its own, must report the difference.
    #[doc(hidden)]
    pub fn drop_event_from_feed(&self, position: Position) {
        self.inner.feed.drop_position(position);
    }

    /// Fault injection for tests: the next batch writes its rows, then fails before moving its
    /// checkpoint, as a crash there would.
    #[doc(hidden)]
    pub fn fail_next_batch_before_checkpoint(&self) {
        self.inner
            .fail_before_checkpoint
            .store(true, Ordering::SeqCst);
    }
}
