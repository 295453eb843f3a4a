//! SQLite's page cache behind `ledger::store::install_page_cache`: B-tree splits that move
//! pages through the spare key, and rolled-back transactions that grew the file (whose pages
//! the cache must really drop), leave a file SQLite finds intact, holding exactly what was
//! committed; and a connection whose cache is stale after another's commit reads the new
//! pages (SQLite drops the whole cache then, by a truncation the layer must forward). Its own
//! test binary, so the layer is installed before any connection opens.

use rusqlite::{params, Connection};

const STREAMS: u32 = 400;
const TRANSACTIONS: u32 = 600;
const ROWS_PER_TRANSACTION: u32 = 16;

#[test]
fn splits_and_rollbacks_keep_the_file_intact_and_exact() {
    assert!(
        ledger::store::install_page_cache(),
        "the layer is installed before this process's first connection"
    );
    let dir = tempfile::tempdir().unwrap();
    let conn = Connection::open(dir.path().join("cache.db")).unwrap();
    conn.execute_batch(
        "PRAGMA page_size = 1024; PRAGMA journal_mode = WAL; PRAGMA cache_size = -256;
         CREATE TABLE rows (stream TEXT NOT NULL, version INTEGER NOT NULL, body TEXT NOT NULL,
                            UNIQUE (stream, version));",
    )
    .unwrap();
    let mut committed = 0u64;
    let mut next_version = vec![0u32; STREAMS as usize];
    for transaction in 0..TRANSACTIONS {
        // Every third transaction grows the file and is rolled back.
        let keep = transaction % 3 != 2;
        conn.execute_batch("BEGIN").unwrap();
        for row in 0..ROWS_PER_TRANSACTION {
            // Spread over the streams, so that inserts land in the middle of the index.
            let stream = (transaction * 7919 + row * 104_729) % STREAMS;
            let version = next_version[stream as usize] + u32::from(!keep) * 1_000_000;
            next_version[stream as usize] += u32::from(keep);
            conn.execute(
                "INSERT INTO rows (stream, version, body) VALUES (?1, ?2, ?3)",
                params![format!("project-{stream:05}"), version, "x".repeat(200)],
            )
            .unwrap();
        }
        conn.execute_batch(if keep { "COMMIT" } else { "ROLLBACK" })
            .unwrap();
        committed += u64::from(if keep { ROWS_PER_TRANSACTION } else { 0 });
    }
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let stored: u64 = conn
        .query_row("SELECT count(*) FROM rows", [], |row| row.get(0))
        .unwrap();
    assert_eq!(stored, committed);
    let rolled_back: u64 = conn
        .query_row(
            "SELECT count(*) FROM rows WHERE version >= 1000000",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(rolled_back, 0);
    for (stream, versions) in next_version.iter().enumerate() {
        let (count, top): (u32, Option<u32>) = conn
            .query_row(
                "SELECT count(*), max(version) FROM rows WHERE stream = ?1",
                [format!("project-{stream:05}")],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        assert_eq!(count, *versions);
        assert_eq!(top, versions.checked_sub(1));
    }
}

#[test]
fn a_connection_sees_what_another_committed_after_it_cached_the_pages() {
    assert!(ledger::store::install_page_cache());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.db");
    let reader = Connection::open(&path).unwrap();
    reader
        .execute_batch(
            "PRAGMA page_size = 1024; PRAGMA journal_mode = WAL;
             CREATE TABLE rows (n INTEGER PRIMARY KEY, body TEXT NOT NULL);",
        )
        .unwrap();
    let writer = Connection::open(&path).unwrap();
    let sum = |conn: &Connection| -> (u64, u64) {
        conn.query_row(
            "SELECT count(*), coalesce(sum(length(body)), 0) FROM rows",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap()
    };
    let mut expected = (0u64, 0u64);
    for round in 0..50u64 {
        writer.execute_batch("BEGIN").unwrap();
        for n in 0..20u64 {
            let body = "y".repeat(usize::try_from(50 + (round * 20 + n) % 300).unwrap());
            writer
                .execute(
                    "INSERT OR REPLACE INTO rows (n, body) VALUES (?1, ?2)",
                    params![(round * 37 + n * 11) % 400, body],
                )
                .unwrap();
        }
        writer.execute_batch("COMMIT").unwrap();
        expected = sum(&writer);
        // The reader cached the previous round's pages; it must read this round's.
        assert_eq!(sum(&reader), expected, "round {round}");
    }
    assert!(expected.0 > 0);
}
