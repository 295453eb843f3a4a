//! The write side of the quota ledger: it turns commands into durable events. It stores the
//! events (the `EventStore` trait, on SQLite or PostgreSQL), keeps each project's state folded
//! and decides with the domain, one writer per project, many decisions per commit.
//!
//! It depends on `domain` only: never on the views (`projections`), the HTTP edge (`api`) or
//! any client, so the write path works whatever happens to the read side.
//!
//! - [`store`]: the `EventStore` trait and its SQLite and PostgreSQL backends.
//! - [`pipeline`]: the `Ledger`, which loads a project's state, decides with the domain and
//!   appends with the expected version; group commit and one writer per project live here.
//! - [`sweeper`]: records the release of holds past their expiry.
//! - [`limits`]: the write side's bounds and defaults, in one place.
//! - [`clock`]: wall time, and a clock tests can drive.

pub mod clock;
pub mod limits;
pub mod pipeline;
pub mod store;
pub mod sweeper;
#[cfg(feature = "testing")]
pub mod testing;

pub use clock::{Clock, ManualClock, SystemClock};
pub use pipeline::{
    load_project, DryRun, Ledger, LedgerConfig, LedgerError, LedgerStats, LimitSource, LimitsView,
    ReservationView, ReserveRequest, SubtreeView, UserUsage,
};
pub use store::{
    AppendResult, Database, EventData, EventStore, ExpectedVersion, FeedEvent, Metadata, Position,
    RecordedEvent, StoreError, StreamAppend,
};
