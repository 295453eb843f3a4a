//! Where an in-process run's CPU went: each thread's CPU time read from `/proc/self/task`
//! before and after the load, summed by the part of the system the thread serves (its name
//! says which: the threads that do the work are named where they are started).
//!
//! Linux only: elsewhere, or where `/proc` cannot be read, the report leaves the split out.

use std::collections::{BTreeMap, HashMap};

use ledger::store::thread_names as store_threads;
use projections::thread_names as view_threads;

use crate::report::round2;

/// A thread's name and the part of the system it serves. A thread named none of these (the
/// main thread, the stores' other connections, threads gone before the load ended) is counted
/// in `other`, the process's CPU that no listed thread accounts for.
const PARTS: &[(&str, &str)] = &[
    (store_threads::FEED, "ledger_feed"),
    (store_threads::WAL_FLUSH, "ledger_wal_flush"),
    (view_threads::VIEWS, "views"),
    (view_threads::WRITER, "views"),
    (view_threads::READER, "views"),
    (view_threads::WAL_FLUSH, "views"),
    // tokio's own name for its workers (and its blocking threads); the embedded store's appends
    // run on them too (`ledger/src/store/sqlite_writer.rs`).
    ("tokio-rt-worker", "runtime"),
];

/// The part a thread the kernel shows as `name` serves, if it is listed.
fn part_of(name: &str) -> Option<&'static str> {
    PARTS
        .iter()
        .find(|(thread, _)| store_threads::as_visible(thread) == name)
        .map(|(_, part)| *part)
}

/// Each live thread's name and CPU time (user + system) so far in µs, by thread id.
pub(crate) type ThreadTimes = HashMap<u64, (String, u64)>;

/// The CPU time of each of the process's threads so far; `None` where `/proc` cannot be read.
pub(crate) fn thread_times() -> Option<ThreadTimes> {
    // SAFETY: sysconf only reads a system constant.
    let ticks_per_s = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    if ticks_per_s == 0 {
        return None;
    }
    let mut times = HashMap::new();
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        let Ok(entry) = entry else { continue };
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        // A thread may end between the listing and the read: it is then left out.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((name, ticks)) = parse_stat(&stat) {
            times.insert(tid, (name, ticks * 1_000_000 / ticks_per_s));
        }
    }
    Some(times)
}

/// The name and the user + system clock ticks from a `/proc/.../stat` line. The name is
/// between the first `(` and the last `)` (it may hold either); utime and stime are the 14th
/// and 15th fields, the 12th and 13th after the name.
fn parse_stat(stat: &str) -> Option<(String, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_owned();
    let mut after = stat.get(close + 1..)?.split_whitespace().skip(11);
    let user: u64 = after.next()?.parse().ok()?;
    let system: u64 = after.next()?.parse().ok()?;
    Some((name, user + system))
}

/// The CPU each part used between `before` and `after`, per boot in µs, with `other` the rest
/// of `process_us` (the process's CPU over the same span). A thread started meanwhile counts
/// from zero.
pub(crate) fn per_boot_by_part(
    before: &ThreadTimes,
    after: &ThreadTimes,
    process_us: u64,
    boots: u64,
) -> BTreeMap<&'static str, f64> {
    let mut used_us: BTreeMap<&'static str, u64> = BTreeMap::new();
    for (tid, (name, now_us)) in after {
        let Some(part) = part_of(name) else { continue };
        let then_us = before.get(tid).map_or(0, |(_, us)| *us);
        *used_us.entry(part).or_default() += now_us.saturating_sub(then_us);
    }
    let listed_us: u64 = used_us.values().sum();
    used_us.insert("other", process_us.saturating_sub(listed_us));
    let boots = boots.max(1) as f64;
    used_us
        .into_iter()
        .map(|(part, us)| (part, round2(us as f64 / boots)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_name_and_cpu_ticks() {
        let line = "4242 (quota-sqlite-wr) S 1 2 3 4 5 6 7 8 9 10 250 75 0 0 20 0 1 0";
        assert_eq!(parse_stat(line), Some(("quota-sqlite-wr".into(), 325)));
        // A name may hold spaces and parentheses: it ends at the last `)`.
        let odd = "7 (a) b (c)) R 1 2 3 4 5 6 7 8 9 10 3 4 0";
        assert_eq!(parse_stat(odd), Some(("a) b (c)".into(), 7)));
        assert_eq!(parse_stat("7 (cut short) R 1 2"), None);
        assert_eq!(parse_stat("no name at all"), None);
    }

    #[test]
    fn cpu_is_summed_by_part_and_the_rest_is_other() {
        let times = |rows: &[(u64, &str, u64)]| -> ThreadTimes {
            rows.iter()
                .map(|(tid, name, us)| (*tid, (name.to_string(), *us)))
                .collect()
        };
        let before = times(&[(1, "quota-sqlite-fe", 1_000), (2, "tokio-rt-worker", 500)]);
        let after = times(&[
            (1, "quota-sqlite-fe", 5_000),
            (2, "tokio-rt-worker", 2_500),
            (3, "tokio-rt-worker", 1_000), // started during the load
            (4, "views-sqlite-wr", 2_000),
            (5, "quota-views", 1_000),
            (6, "quota", 9_000), // the main thread: not listed
        ]);
        let split = per_boot_by_part(&before, &after, 12_000, 100);
        assert_eq!(split["ledger_feed"], 40.0);
        assert_eq!(split["runtime"], 30.0);
        assert_eq!(split["views"], 30.0);
        assert_eq!(split["other"], 20.0);
        assert!(!split.contains_key("ledger_wal_flush"));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn this_process_has_threads_with_cpu_time() {
        let times = thread_times().expect("/proc/self/task on Linux");
        assert!(!times.is_empty());
    }
}
