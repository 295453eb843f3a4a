//! The JSON line the bench prints, and the sums it is made of.

use std::collections::BTreeMap;

use crate::load::ClientTally;

/// The JSON line the bench prints.
#[derive(Debug, serde::Serialize)]
pub struct BenchReport {
    pub workload: &'static str,
    pub store: String,
    pub via: &'static str,
    pub clients: usize,
    pub boots_per_s: f64,
    pub decisions_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub conflicts: u64,
    pub denied: u64,
    pub oversubscribed: u64,
    pub verified: bool,
    pub seconds: f64,
    pub boots: u64,
    pub decisions: u64,
    pub errors: u64,
    /// In-process: how long a fresh process takes to load the busiest project's state (from
    /// its snapshot and the events after it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cold_load_ms: Option<f64>,
    /// In-process with views running: how many events the views had yet to apply when the load
    /// stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub views_behind_events: Option<u64>,
    /// In-process: the process's CPU (user + system) during the load, per boot, in µs; the
    /// views' work during the load included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_us_per_boot: Option<f64>,
    /// In-process on Linux: `cpu_us_per_boot` split by the part of the system each thread
    /// serves (`ledger_feed`, `ledger_wal_flush`, `views`, `runtime`: the async workers, where
    /// decisions are made, the embedded store's appends run and the bench's clients run), with
    /// `other` the rest of the process's CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_us_per_boot_by_part: Option<BTreeMap<&'static str, f64>>,
    /// In-process: the ledger's group commits during the run, their mean size in decisions
    /// and their time in the store.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decisions_per_commit: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_ms_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_ms_p99: Option<f64>,
    /// A SQLite store: the median of 200 × (write 8 KiB, fdatasync) beside it, timed before
    /// the load; the bound below follows from it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fsync_ms: Option<f64>,
    /// clients / (2 × fsync): the most boots a second any design with one sync per commit
    /// cycle could answer with this many closed-loop clients.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_boots_per_s: Option<f64>,
    /// boots_per_s / bound_boots_per_s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_fraction: Option<f64>,
}

/// Every client's tally added up.
pub(crate) struct Totals {
    /// Every answer's latency, sorted.
    pub(crate) latencies_us: Vec<u32>,
    pub(crate) boots: u64,
    pub(crate) decisions: u64,
    pub(crate) denied: u64,
    pub(crate) errors: u64,
    pub(crate) granted_reserves: u64,
    pub(crate) max_position: u64,
    /// The first failure any client saw.
    pub(crate) first_error: Option<String>,
}

impl Totals {
    pub(crate) fn of(tallies: &[ClientTally]) -> Totals {
        let mut latencies_us: Vec<u32> = tallies
            .iter()
            .flat_map(|t| t.latencies_us.iter().copied())
            .collect();
        latencies_us.sort_unstable();
        Totals {
            latencies_us,
            boots: tallies.iter().map(|t| t.boots).sum(),
            decisions: tallies.iter().map(|t| t.decisions).sum(),
            denied: tallies.iter().map(|t| t.denied).sum(),
            errors: tallies.iter().map(|t| t.errors).sum(),
            granted_reserves: tallies.iter().map(|t| t.granted_reserves).sum(),
            max_position: tallies.iter().map(|t| t.max_position).max().unwrap_or(0),
            first_error: tallies.iter().find_map(|t| t.first_error.clone()),
        }
    }
}

/// The nearest-rank percentile `p` (0 to 1) of sorted microseconds, in ms.
pub(crate) fn percentile_ms(sorted_us: &[u32], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted_us.len() as f64).ceil() as usize).clamp(1, sorted_us.len());
    f64::from(sorted_us[rank - 1]) / 1000.0
}

pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let sorted: Vec<u32> = (1..=100).map(|ms| ms * 1000).collect();
        assert_eq!(percentile_ms(&sorted, 0.5), 50.0);
        assert_eq!(percentile_ms(&sorted, 0.99), 99.0);
        assert_eq!(percentile_ms(&[], 0.99), 0.0);
    }
}
