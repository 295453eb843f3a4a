//! What the embedded store does to files: it creates them private, and the checking tools open
//! only a file that already holds a quota store.
//!
//! SQLite creates a database file with mode 0644 (less the umask) and gives its `-wal` and
//! `-shm` files the mode of the database file. Quotas, actors and request ids are not for every
//! local user to read, so a file this process creates is made first, empty and 0600 (SQLite
//! takes an empty file as a new database), and its WAL files follow it. A file that exists
//! keeps the mode its owner gave it.

use std::fs::OpenOptions;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::StoreError;

/// The mode of files the store creates: read and write for the owner only.
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// The first bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// Creates `path` empty with mode 0600 unless it exists. In-memory databases have no file.
pub fn create_private_file(path: &Path) -> Result<(), StoreError> {
    if is_in_memory(path) {
        return Ok(());
    }
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE_FILE_MODE)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(StoreError::Unavailable(format!(
            "cannot create {}: {e}",
            path.display()
        ))),
    }
}

/// Fails unless `path` is an existing SQLite database file. It is read, never written: a
/// checking tool pointed at a typo must not leave a new store behind.
pub(crate) fn check_sqlite_file(path: &Path) -> Result<(), StoreError> {
    let mut header = [0u8; 16];
    let read = std::fs::File::open(path).and_then(|mut file| file.read_exact(&mut header));
    match read {
        Ok(()) if &header == SQLITE_HEADER => Ok(()),
        Ok(()) => Err(not_a_store(path, "not an SQLite database")),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(StoreError::NotFound(format!(
            "no quota store at {}: the file does not exist",
            path.display()
        ))),
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
            Err(not_a_store(path, "empty or not an SQLite database"))
        }
        Err(e) => Err(StoreError::Unavailable(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

pub(crate) fn not_a_store(path: &Path, why: &str) -> StoreError {
    StoreError::NotFound(format!("{} is not a quota store ({why})", path.display()))
}

fn is_in_memory(path: &Path) -> bool {
    path.as_os_str().is_empty() || path.as_os_str() == ":memory:"
}
