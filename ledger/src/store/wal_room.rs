//! Room in a SQLite WAL file ahead of what SQLite has written, so that commits overwrite
//! blocks the file already has instead of extending it.
//!
//! Why: an fdatasync that must also record a new file size writes the inode too, one more
//! device round trip after the data and before the cache flush. Measured here, 15 KiB and an
//! fdatasync took 0.25–0.34 ms extending a file and 0.14–0.18 ms overwriting one. SQLite's WAL
//! extends its file with every commit until its first restart (a flush past
//! [`WAL_BOUND_BYTES`](crate::limits::WAL_BOUND_BYTES)), and never preallocates; after that it
//! overwrites the file from its start. PostgreSQL zero-fills its WAL segments for this reason
//! (`wal_init_zero`); `fallocate` would not do, since writing into unwritten extents changes the
//! block map just the same.
//!
//! How: while a connection holds the database's write lock (so no writer anywhere appends
//! meanwhile), [`WalRoom::make_room`] writes [`WAL_ROOM_BYTES`] of zeros past the end of the
//! file whenever SQLite has written past the zeros it wrote last. The commit's own fdatasync
//! then carries them to the disk, so one commit a chunk extends the file rather than every one.
//! Zeros are frames whose checksum fails, which is how a WAL already ends when SQLite restarts
//! it over older frames: recovery stops at the first such frame, readers never read past the
//! last committed frame, and no byte SQLite wrote is ever touched.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::limits::WAL_ROOM_BYTES;

/// The zeros written at once: a bound on the buffer, not on the room.
const ZEROS_BYTES: usize = 64 * 1024;

const _: () = assert!(WAL_ROOM_BYTES.is_multiple_of(ZEROS_BYTES as u64));

/// The WAL file of one database, and how far its zeros reach.
pub(super) struct WalRoom {
    /// Opened at the first transaction (SQLite creates the file when a connection first reads).
    file: Option<File>,
    path: PathBuf,
    /// The file's length after the last zeros were written: a longer file means SQLite has
    /// written past them.
    zeroed_to: u64,
    /// Room cannot be made (the file cannot be opened or written): commits extend the file,
    /// as SQLite does by itself.
    given_up: bool,
}

impl WalRoom {
    /// The room of the WAL beside the database at `database`: none is made until SQLite first
    /// extends the file, so a store that is opened and not written gains no zeros.
    pub(super) fn beside(database: &Path) -> WalRoom {
        let mut path = database.as_os_str().to_owned();
        path.push("-wal");
        WalRoom {
            file: None,
            path: PathBuf::from(path),
            zeroed_to: 0,
            given_up: false,
        }
    }

    /// Writes zeros past the end of the WAL file if SQLite has written past the last ones.
    /// Call only while this process holds the database's write lock (`BEGIN IMMEDIATE`), and
    /// before the transaction writes: then nothing else writes the file meanwhile. Never fails:
    /// a file that cannot be grown is cut back to what SQLite wrote, and left to SQLite.
    pub(super) fn make_room(&mut self) {
        if self.given_up || (self.file.is_none() && !self.open()) {
            return;
        }
        let Some(file) = &self.file else { return };
        let written_to = match length_of(file) {
            Ok(length) => length,
            Err(error) => return self.give_up(&error),
        };
        if written_to < self.zeroed_to {
            // Cut short meanwhile (a `TRUNCATE` flush, `journal_size_limit`): SQLite extends
            // it from here, so zeros follow once it has.
            self.zeroed_to = written_to;
            return;
        }
        if written_to == self.zeroed_to {
            return;
        }
        match write_zeros(file, written_to) {
            Ok(()) => self.zeroed_to = written_to + WAL_ROOM_BYTES,
            Err(error) => {
                // A full disk must not fail the commit that would have fitted.
                let _ = file.set_len(written_to);
                self.give_up(&error);
            }
        }
    }

    /// Opens the WAL file, which SQLite created when the connection first read; `false` if it
    /// cannot be (it is not there: nothing to make room in).
    fn open(&mut self) -> bool {
        let opened = OpenOptions::new()
            .write(true)
            .open(&self.path)
            .and_then(|file| Ok((length_of(&file)?, file)));
        match opened {
            Ok((length, file)) => {
                // What is there already was written by SQLite: zeros go past it once it grows.
                self.zeroed_to = length;
                self.file = Some(file);
                true
            }
            Err(error) => {
                self.give_up(&error);
                false
            }
        }
    }

    fn give_up(&mut self, error: &std::io::Error) {
        tracing::warn!(
            wal = %self.path.display(),
            %error,
            "cannot keep room in the WAL file; commits extend it instead"
        );
        self.file = None;
        self.given_up = true;
    }
}

/// The file's length, read by seeking to its end: an `fstat` would ask for its times too, and
/// a file whose times were asked for gets a fine-grained mtime at its next write (multigrain
/// timestamps), which dirties its inode, so that commit's fdatasync would write the inode anyway.
fn length_of(mut file: &File) -> std::io::Result<u64> {
    file.seek(SeekFrom::End(0))
}

fn write_zeros(file: &File, from: u64) -> std::io::Result<()> {
    let zeros = [0u8; ZEROS_BYTES];
    let mut offset = from;
    while offset < from + WAL_ROOM_BYTES {
        file.write_all_at(&zeros, offset)?;
        offset += ZEROS_BYTES as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wal_of(dir: &Path) -> PathBuf {
        dir.join("q.db-wal")
    }

    #[test]
    fn zeros_go_past_the_file_once_it_grows_and_never_over_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(wal_of(dir.path()), b"frames").unwrap();
        let mut room = WalRoom::beside(&dir.path().join("q.db"));
        room.make_room();
        assert_eq!(std::fs::read(wal_of(dir.path())).unwrap(), b"frames");

        // SQLite appends: the next transaction finds the file longer and zeros follow it.
        let mut wal = OpenOptions::new()
            .append(true)
            .open(wal_of(dir.path()))
            .unwrap();
        std::io::Write::write_all(&mut wal, b"+more").unwrap();
        room.make_room();
        let bytes = std::fs::read(wal_of(dir.path())).unwrap();
        assert_eq!(&bytes[..11], b"frames+more");
        assert_eq!(bytes.len() as u64, 11 + WAL_ROOM_BYTES);
        assert!(bytes[11..].iter().all(|b| *b == 0));

        // Writes inside the zeros do not grow the file: no more zeros. (Not through `wal`: on
        // Linux a positioned write to a file opened to append goes to its end.)
        let inside = OpenOptions::new()
            .write(true)
            .open(wal_of(dir.path()))
            .unwrap();
        inside.write_all_at(b"inside", 20).unwrap();
        room.make_room();
        assert_eq!(
            std::fs::metadata(wal_of(dir.path())).unwrap().len(),
            11 + WAL_ROOM_BYTES
        );
    }

    #[test]
    fn a_file_cut_short_gets_zeros_once_it_grows_again() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(wal_of(dir.path()), b"frames").unwrap();
        let mut room = WalRoom::beside(&dir.path().join("q.db"));
        room.make_room();
        let wal = OpenOptions::new()
            .write(true)
            .open(wal_of(dir.path()))
            .unwrap();
        wal.write_all_at(b"+", 6).unwrap();
        room.make_room();
        wal.set_len(0).unwrap();
        room.make_room();
        assert_eq!(std::fs::metadata(wal_of(dir.path())).unwrap().len(), 0);
        wal.write_all_at(b"header", 0).unwrap();
        room.make_room();
        assert_eq!(
            std::fs::metadata(wal_of(dir.path())).unwrap().len(),
            6 + WAL_ROOM_BYTES
        );
    }

    #[test]
    fn without_a_wal_file_nothing_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let mut room = WalRoom::beside(&dir.path().join("q.db"));
        room.make_room();
        assert!(!wal_of(dir.path()).exists());
    }
}
