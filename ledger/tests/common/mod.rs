//! What the store's conformance suites share.

pub mod appends;

/// Instantiates each named `async fn(Arc<dyn EventStore>)` as a test on a fresh SQLite store
/// (module `sqlite`) and on a fresh PostgreSQL schema (module `postgres`; it passes without
/// running when no PostgreSQL is configured, as every PostgreSQL test here does).
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    let (_dir, store) = ledger::testing::sqlite_store().await;
                    super::$name(store).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    let Some((_schema, store)) = ledger::testing::postgres_store().await else { return };
                    super::$name(store).await;
                }
            )*
        }
    };
}
