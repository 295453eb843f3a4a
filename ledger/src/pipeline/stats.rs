//! The ledger's counters, read by the metrics endpoint and the benchmark.

use std::sync::atomic::AtomicU64;

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
}
