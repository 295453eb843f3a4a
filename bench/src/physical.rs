//! What bounds a run's figure: the CPU the process spent, and the disk's sync time measured
//! beside the store, independently of the ledger, before the load.
//!
//! With `clients` closed-loop clients at most `clients` decisions are in flight, and each waits
//! at least one sync, so no design that syncs once per commit cycle can do more than
//! `clients / (2 × fsync)` boots a second (a boot is two decisions): the report's bound.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Syncs timed: the median of this many is the run's `fsync_ms`.
pub const FSYNC_PROBES: usize = 200;

/// Bytes written before each sync: about what a group commit of a few decisions writes.
pub const PROBE_BYTES: usize = 8 * 1024;

/// The process's CPU time so far, user and system, in µs (`None` where it cannot be read).
pub(crate) fn cpu_time_us() -> Option<u64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole `rusage` into the pointer it is given and reads nothing.
    let status = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if status != 0 {
        return None;
    }
    // SAFETY: getrusage returned 0, so it filled the struct.
    let usage = unsafe { usage.assume_init() };
    let micros = |t: libc::timeval| -> Option<u64> {
        Some(u64::try_from(t.tv_sec).ok()? * 1_000_000 + u64::try_from(t.tv_usec).ok()?)
    };
    Some(micros(usage.ru_utime)? + micros(usage.ru_stime)?)
}

/// The folder of a `sqlite://PATH` store; `None` for any other store (PostgreSQL syncs on its
/// server, which the bench cannot time from here).
pub(crate) fn sqlite_folder(store_url: &str) -> Option<PathBuf> {
    let path = store_url.strip_prefix("sqlite://")?;
    let path = path.split('?').next()?;
    let folder = Path::new(path).parent()?;
    Some(if folder.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        folder.to_owned()
    })
}

/// The median time, in ms, of [`FSYNC_PROBES`] × (write [`PROBE_BYTES`], fdatasync) in a
/// scratch file in `folder` (removed after). The file is written and synced whole first, and
/// each probe overwrites a block of it, as a log that reuses its file does (SQLite's WAL,
/// PostgreSQL's recycled segments, `pg_test_fsync`): a sync that must also record a new file
/// size costs a journal commit more, which no commit of the ledger pays.
pub(crate) fn fsync_ms(folder: &Path) -> Result<f64, String> {
    let scratch = tempfile::NamedTempFile::new_in(folder)
        .map_err(|e| format!("fsync probe in {}: {e}", folder.display()))?;
    let mut file = scratch.as_file();
    let block = vec![0x5a_u8; PROBE_BYTES];
    let probe_error = |e: std::io::Error| format!("fsync probe: {e}");
    for _ in 0..FSYNC_PROBES {
        file.write_all(&block).map_err(probe_error)?;
    }
    file.sync_all().map_err(probe_error)?;
    let mut times_ms = Vec::with_capacity(FSYNC_PROBES);
    for probe in 0..FSYNC_PROBES {
        let offset = (probe * PROBE_BYTES) as u64;
        let started = Instant::now();
        file.seek(SeekFrom::Start(offset))
            .and_then(|_| file.write_all(&block))
            .and_then(|()| file.sync_data())
            .map_err(probe_error)?;
        times_ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times_ms.sort_by(f64::total_cmp);
    Ok(times_ms[FSYNC_PROBES / 2])
}

/// The most boots a second any design syncing once per commit cycle could answer.
pub(crate) fn bound_boots_per_s(clients: usize, fsync_ms: f64) -> f64 {
    clients as f64 / (2.0 * fsync_ms / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_clients_over_two_syncs() {
        // 16 clients, 0.2 ms a sync: 16 / 0.0004 s.
        assert_eq!(bound_boots_per_s(16, 0.2).round(), 40_000.0);
    }

    #[test]
    fn only_a_sqlite_store_has_a_folder_to_probe() {
        assert_eq!(
            sqlite_folder("sqlite:///tmp/x/q.db"),
            Some(PathBuf::from("/tmp/x"))
        );
        assert_eq!(sqlite_folder("sqlite://q.db"), Some(PathBuf::from(".")));
        assert_eq!(sqlite_folder("postgres://h/db"), None);
    }

    #[test]
    fn the_probe_times_syncs_and_the_process_has_cpu_time() {
        let dir = tempfile::tempdir().unwrap();
        let ms = fsync_ms(dir.path()).unwrap();
        assert!(ms > 0.0 && ms < 1000.0, "{ms}");
        assert!(cpu_time_us().is_some_and(|us| us > 0));
    }
}
