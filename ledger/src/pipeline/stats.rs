//! The ledger's counters, read by the metrics endpoint and the benchmark.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters for metrics and the benchmark.
#[derive(Debug, Default)]
pub struct LedgerStats {
    /// Passes through the pipeline that reached the appender: every attempt of a decision, and
    /// every attempt of a read's version check too, because `quota_ledger_decisions_total` has
    /// always counted those and dashboards compare it across releases.
    pub decisions: AtomicU64,
    pub conflicts: AtomicU64,
    pub batches: AtomicU64,
    pub batch_appends: AtomicU64,
    pub batch_events: AtomicU64,
    pub batch_micros: AtomicU64,
    /// Each group commit's time in the store (its append, written and synced).
    pub commit_times: CommitTimes,
}

/// Width of a bucket of [`CommitTimes`].
pub const COMMIT_BUCKET_MICROS: u64 = 10;

/// Buckets of [`CommitTimes`]: 10 µs each up to 50 ms; a longer commit counts in the last.
pub const COMMIT_BUCKETS: usize = 5_000;

/// A histogram of commit times in fixed memory (40 KB), so a server that runs for months keeps
/// it without growing: percentiles to the nearest 10 µs, which is finer than an fsync.
#[derive(Debug)]
pub struct CommitTimes {
    buckets: Box<[AtomicU64]>,
}

impl Default for CommitTimes {
    fn default() -> Self {
        CommitTimes {
            buckets: (0..COMMIT_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl CommitTimes {
    pub fn record(&self, micros: u64) {
        let bucket = usize::try_from(micros / COMMIT_BUCKET_MICROS)
            .unwrap_or(usize::MAX)
            .min(COMMIT_BUCKETS - 1);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
    }

    /// The commit time at percentile `p` (0 to 1), in ms, at its bucket's upper edge; `None`
    /// before the first commit.
    pub fn percentile_ms(&self, p: f64) -> Option<f64> {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((p.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        let bucket = counts
            .iter()
            .position(|count| {
                seen += count;
                seen >= rank
            })
            .unwrap_or(COMMIT_BUCKETS - 1);
        Some((bucket as u64 + 1) as f64 * COMMIT_BUCKET_MICROS as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_land_on_the_bucket_of_their_rank() {
        let times = CommitTimes::default();
        assert_eq!(times.percentile_ms(0.5), None);
        for micros in [5, 15, 15, 95, 1_000_000] {
            times.record(micros);
        }
        // Ranks 1..5: buckets 0-10, 10-20, 10-20, 90-100 µs, and the last (50 ms or more).
        assert_eq!(times.percentile_ms(0.2), Some(0.01));
        assert_eq!(times.percentile_ms(0.5), Some(0.02));
        assert_eq!(times.percentile_ms(0.8), Some(0.1));
        assert_eq!(times.percentile_ms(1.0), Some(50.0));
    }
}
