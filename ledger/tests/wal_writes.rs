//! The writer's VFS (`ledger::store::wal_batching_vfs`): a commit's WAL frames reach the file
//! in one write instead of two per frame, and nothing else changes. A connection of the
//! default VFS sees exactly what was committed after every commit, transactions larger than
//! the cache (whose pages spill into the WAL before the commit, and are read back) and rolled
//! back ones leave the file intact and exact, and so does a WAL restarted after a checkpoint.
//! Its own test binary, so no other test's writes move the process-wide counts.

use rusqlite::{params, Connection, OpenFlags};

const SMALL_TRANSACTIONS: u32 = 60;
const ROWS_PER_SMALL_TRANSACTION: u32 = 40;
const ROWS_PER_LARGE_TRANSACTION: u32 = 3_000;

fn open_writer(path: &std::path::Path) -> Connection {
    let conn = Connection::open_with_flags_and_vfs(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        ledger::store::wal_batching_vfs().unwrap(),
    )
    .unwrap();
    conn.execute_batch(
        "PRAGMA page_size = 1024; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
         CREATE TABLE IF NOT EXISTS rows (stream TEXT NOT NULL, version INTEGER NOT NULL,
                                          body TEXT NOT NULL, UNIQUE (stream, version));",
    )
    .unwrap();
    conn
}

fn insert(conn: &Connection, transaction: u32, rows: u32) {
    for row in 0..rows {
        // Spread over many keys, so that each commit touches many index pages.
        let stream = (transaction * 7_919 + row * 104_729) % 997;
        conn.execute(
            "INSERT INTO rows (stream, version, body) VALUES (?1, ?2, ?3)",
            params![
                format!("project-{stream:05}"),
                transaction * 10_000 + row,
                "x".repeat(300)
            ],
        )
        .unwrap();
    }
}

fn count(conn: &Connection) -> u64 {
    conn.query_row("SELECT count(*) FROM rows", [], |row| row.get(0))
        .unwrap()
}

fn integrity(conn: &Connection) -> String {
    conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap()
}

#[test]
fn a_commit_is_one_write_and_every_reader_sees_exactly_what_was_committed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal.db");
    let writer = open_writer(&path);
    let reader = Connection::open(&path).unwrap();
    let mut committed = 0u64;

    for transaction in 0..SMALL_TRANSACTIONS {
        let before = ledger::store::wal_write_counts();
        writer.execute_batch("BEGIN IMMEDIATE").unwrap();
        insert(&writer, transaction, ROWS_PER_SMALL_TRANSACTION);
        writer.execute_batch("COMMIT").unwrap();
        committed += u64::from(ROWS_PER_SMALL_TRANSACTION);
        let after = ledger::store::wal_write_counts();
        let asked = after.asked - before.asked;
        let issued = after.issued - before.issued;
        assert!(
            asked >= 20,
            "a commit of many pages asked for {asked} writes"
        );
        // The first commit of a WAL writes (and syncs) its header on its own.
        assert!(
            issued <= 2,
            "{asked} writes asked reached the file as {issued} (transaction {transaction})"
        );
        assert_eq!(count(&reader), committed, "after transaction {transaction}");
    }

    // Larger than the cache: pages spill into the WAL mid-transaction and are read back.
    writer.execute_batch("PRAGMA cache_size = -64").unwrap();
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    insert(&writer, SMALL_TRANSACTIONS, ROWS_PER_LARGE_TRANSACTION);
    writer.execute_batch("ROLLBACK").unwrap();
    assert_eq!(count(&reader), committed);
    assert_eq!(count(&writer), committed);
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    insert(&writer, SMALL_TRANSACTIONS + 1, ROWS_PER_LARGE_TRANSACTION);
    writer.execute_batch("COMMIT").unwrap();
    committed += u64::from(ROWS_PER_LARGE_TRANSACTION);
    assert_eq!(count(&reader), committed);

    // Larger than one write may be (SQLite's unix VFS takes at most 128 KiB at a time), within
    // the cache: held writes are written out in steps.
    writer.execute_batch("PRAGMA cache_size = -8192").unwrap();
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    insert(&writer, SMALL_TRANSACTIONS + 2, ROWS_PER_LARGE_TRANSACTION);
    writer.execute_batch("COMMIT").unwrap();
    committed += u64::from(ROWS_PER_LARGE_TRANSACTION);
    assert_eq!(count(&reader), committed);

    // A checkpoint that empties the WAL: the next commits write it again from its start.
    writer
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    for transaction in 0..4 {
        writer.execute_batch("BEGIN IMMEDIATE").unwrap();
        insert(
            &writer,
            SMALL_TRANSACTIONS + 3 + transaction,
            ROWS_PER_SMALL_TRANSACTION,
        );
        writer.execute_batch("COMMIT").unwrap();
        committed += u64::from(ROWS_PER_SMALL_TRANSACTION);
        assert_eq!(count(&reader), committed);
    }

    assert_eq!(integrity(&reader), "ok");
    assert_eq!(integrity(&writer), "ok");
    drop(reader);
    drop(writer);
    let reopened = Connection::open(&path).unwrap();
    assert_eq!(integrity(&reopened), "ok");
    assert_eq!(count(&reopened), committed);
}
