//! What the views' test files share: `on_every_backend!(check, …)` runs each `async fn
//! check(store)` once on a new SQLite file and once on a new PostgreSQL schema (skipped, as a
//! visible line, without `QUOTA_TEST_POSTGRES_URL`); and the short constructors both use.
#![allow(dead_code)]

use std::time::Duration;

use domain::{Deltas, ProjectId, ResourceName};

/// How long a test waits for the views to reach a position.
pub const WAIT: Duration = Duration::from_secs(10);

pub fn r(s: &str) -> ResourceName {
    ResourceName::parse(s).unwrap()
}

pub fn p(s: &str) -> ProjectId {
    ProjectId::parse(s).unwrap()
}

pub fn deltas(pairs: &[(&str, i64)]) -> Deltas {
    Deltas::new(pairs.iter().map(|(k, v)| (r(k), *v)).collect()).unwrap()
}

macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let (_dir, store) = ledger::testing::sqlite_store().await;
                    super::$name(store).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some((_schema, store)) = ledger::testing::postgres_store().await else { return };
                    super::$name(store).await;
                }
            )*
        }
    };
}
