//! The embedded store's writer: what happens to a batch once its append is polled.

use std::time::Duration;

use chrono::Utc;
use ledger::testing;
use ledger::{AppendResult, EventData, ExpectedVersion, Metadata, StreamAppend};
use uuid::Uuid;

fn event(n: u64) -> EventData {
    EventData {
        event_id: Uuid::now_v7(),
        event_type: "Test".into(),
        schema_version: 1,
        data: serde_json::value::to_raw_value(&serde_json::json!({ "n": n })).unwrap(),
        metadata: Metadata::default(),
        recorded_at: chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis())
            .unwrap(),
    }
}

/// A caller that stops waiting (a dropped request, a timeout) does not stop its batch once its
/// append has been polled: the transaction runs start to end inside that first poll, so it is
/// written whole, and the writer goes on with the next batch on top of it. Nothing
/// half-written is left behind and no later append is refused.
#[tokio::test]
async fn a_batch_whose_caller_stops_waiting_is_written_whole_and_the_writer_goes_on() {
    let (_dir, store) = testing::sqlite_store().await;
    let abandoned = vec![StreamAppend::new(
        "s",
        ExpectedVersion::NoStream,
        vec![event(0), event(1), event(2)],
    )];
    // The timeout polls the append once (which writes it) before it finds its zero deadline
    // passed and drops the future.
    let _ = tokio::time::timeout(Duration::ZERO, store.append(abandoned)).await;

    let next = vec![StreamAppend::new(
        "s",
        ExpectedVersion::Exact(2),
        vec![event(3)],
    )];
    let results = store.append(next).await.expect("append");
    assert!(
        matches!(&results[0], AppendResult::Appended { versions, .. } if versions == &vec![3]),
        "{results:?}"
    );
    let stored = store.read_stream("s", 0, 100).await.unwrap();
    let versions: Vec<u64> = stored.iter().map(|e| e.version).collect();
    assert_eq!(versions, vec![0, 1, 2, 3]);
    let positions: Vec<u64> = stored.iter().map(|e| e.position).collect();
    assert_eq!(positions, vec![1, 2, 3, 4]);
}

/// An append that writes nothing still reads the file's head, and the store's head watch
/// hears of it: here another store on the same file (another process) wrote meanwhile, and the
/// append, decided on an older version, conflicts.
#[tokio::test]
async fn an_append_that_writes_nothing_still_moves_the_head_watch_to_the_file_head() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shared.db").display());
    let a = ledger::store::SqliteStore::open(&url).await.unwrap();
    let b = ledger::store::SqliteStore::open(&url).await.unwrap();
    use ledger::EventStore as _;
    let first = vec![StreamAppend::new(
        "s",
        ExpectedVersion::NoStream,
        vec![event(0)],
    )];
    a.append(first).await.unwrap();
    let other = vec![StreamAppend::new(
        "t",
        ExpectedVersion::NoStream,
        vec![event(1), event(2)],
    )];
    b.append(other).await.unwrap();
    assert_eq!(*a.watch_head().borrow(), 1);

    let stale = vec![StreamAppend::new(
        "t",
        ExpectedVersion::NoStream,
        vec![event(3)],
    )];
    let results = a.append(stale).await.unwrap();
    assert!(results[0].is_conflict(), "{results:?}");
    assert_eq!(
        *a.watch_head().borrow(),
        3,
        "the head read in the append's transaction"
    );
}

/// Appends `batches` one-event batches to stream `stream` of `store`, from version `from`.
async fn append_one_by_one(store: &dyn ledger::EventStore, stream: &str, from: u64, batches: u64) {
    for n in from..from + batches {
        let expected = match n {
            0 => ExpectedVersion::NoStream,
            n => ExpectedVersion::Exact(n - 1),
        };
        let append = vec![StreamAppend::new(stream, expected, vec![event(n)])];
        let results = store.append(append).await.expect("append");
        assert!(!results[0].is_conflict(), "{results:?}");
    }
}

fn wal_of(db: &std::path::Path) -> std::path::PathBuf {
    let mut path = db.as_os_str().to_owned();
    path.push("-wal");
    path.into()
}

/// The writer keeps zeros past what SQLite wrote in the WAL (so commits overwrite blocks rather
/// than extend the file), and a crash image of that file, its WAL ending in zeros, recovers
/// every acknowledged event: recovery reads the WAL's frames up to the first that fails its
/// checksum, which the zeros do. The image is the two files as they are while the store is
/// still open (nothing flushed into the database file, no clean close), without the index
/// (`-shm`), which SQLite rebuilds from the WAL.
#[tokio::test]
async fn a_crash_image_whose_wal_ends_in_zeros_recovers_every_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let store = ledger::store::SqliteStore::open(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    append_one_by_one(&store, "s", 0, 30).await;

    let wal = std::fs::read(wal_of(&db)).unwrap();
    assert!(
        wal.len() as u64 > ledger::store::WAL_ROOM_BYTES,
        "the WAL has room ahead: {} bytes",
        wal.len()
    );
    assert!(wal[wal.len() - 4096..].iter().all(|b| *b == 0));

    let image = tempfile::tempdir().unwrap();
    let copy = image.path().join("ledger.db");
    std::fs::copy(&db, &copy).unwrap();
    std::fs::write(wal_of(&copy), &wal).unwrap();
    let recovered = ledger::store::SqliteStore::open(&format!("sqlite://{}", copy.display()))
        .await
        .unwrap();
    use ledger::EventStore as _;
    let events = recovered.read_stream("s", 0, 100).await.unwrap();
    let versions: Vec<u64> = events.iter().map(|e| e.version).collect();
    assert_eq!(versions, (0..30).collect::<Vec<_>>());

    // The recovered store goes on writing over the zeros.
    append_one_by_one(&recovered, "s", 30, 5).await;
    assert_eq!(recovered.read_stream("s", 0, 100).await.unwrap().len(), 35);
}

/// Two stores on one file (two processes) each keep room in the same WAL, each only while it
/// holds the write lock: their appends interleave and none is lost or overwritten.
#[tokio::test]
async fn two_writers_keeping_room_in_one_wal_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shared.db").display());
    let a = ledger::store::SqliteStore::open(&url).await.unwrap();
    let b = ledger::store::SqliteStore::open(&url).await.unwrap();
    for round in 0..10 {
        append_one_by_one(&a, "a", round * 3, 3).await;
        append_one_by_one(&b, "b", round * 3, 3).await;
    }
    drop((a, b));
    let reopened = ledger::store::SqliteStore::open(&url).await.unwrap();
    use ledger::EventStore as _;
    for stream in ["a", "b"] {
        let events = reopened.read_stream(stream, 0, 100).await.unwrap();
        assert_eq!(events.len(), 30, "{stream}");
    }
    let all = reopened.read_all(0, 100).await.unwrap();
    let positions: Vec<u64> = all.iter().map(|e| e.position).collect();
    assert_eq!(positions, (1..=60).collect::<Vec<_>>());
}
