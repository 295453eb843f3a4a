//! Prometheus metrics. Request and decision counters are recorded as they happen; the ledger's
//! counters and the projections' lag are read when `/metrics` is scraped.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use axum::http::Method;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::server::AppState;

const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Installs the process-wide recorder. Only the first call installs; later calls (tests that
/// build several routers in one process) get a handle that renders nothing.
pub fn install() -> PrometheusHandle {
    let builder = PrometheusBuilder::new()
        .set_buckets(&LATENCY_BUCKETS)
        .unwrap_or_else(|_| PrometheusBuilder::new());
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    if metrics::set_global_recorder(recorder).is_err() {
        tracing::debug!("a metrics recorder is already installed");
    }
    describe();
    handle
}

/// The `# HELP` lines.
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        "quota_http_requests_total",
        "HTTP requests by method, route template and status"
    );
    describe_histogram!(
        "quota_http_request_duration_seconds",
        Unit::Seconds,
        "HTTP request latency by method and route template"
    );
    describe_counter!(
        "quota_decisions_total",
        "Write decisions by command and outcome (granted, or the problem code)"
    );
    describe_counter!(
        "quota_ledger_decisions_total",
        "Decisions taken by the ledger pipeline"
    );
    describe_counter!(
        "quota_ledger_conflicts_total",
        "Expected-version conflicts (another node wrote the stream first)"
    );
    describe_counter!("quota_ledger_append_batches_total", "Group commits written");
    describe_counter!(
        "quota_ledger_append_batch_appends_total",
        "Stream appends written in group commits"
    );
    describe_counter!(
        "quota_ledger_append_batch_events_total",
        "Events written in group commits"
    );
    describe_gauge!(
        "quota_ledger_append_seconds_total",
        Unit::Seconds,
        "Time spent writing group commits"
    );
    describe_gauge!(
        "quota_ledger_append_batch_size_mean",
        "Mean appends per group commit"
    );
    describe_gauge!(
        "quota_ledger_append_latency_mean_seconds",
        Unit::Seconds,
        "Mean time to write one group commit"
    );
    describe_gauge!(
        "quota_ledger_cached_projects",
        "Projects whose state is cached in memory"
    );
    describe_gauge!(
        "quota_projection_lag",
        "Events the view is behind the store's head"
    );
    describe_gauge!(
        "quota_projection_position",
        "Last position the view applied"
    );
    describe_counter!(
        "quota_projection_failures_total",
        "View batches that failed and were tried again, by view"
    );
    describe_gauge!(
        "quota_projection_head",
        "The store's head as the view last saw it"
    );
}

/// The route label of requests that match no route.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// The method as a label: the standard methods by name, any other as `other`, so no client
/// can add series by inventing methods.
pub fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

/// Counts a request by method, route template and status, and records its duration. Every
/// label comes from a fixed set: methods from [`method_label`], routes are the router's
/// templates (never the raw path: project names would explode the label set) or
/// [`UNMATCHED_ROUTE`], statuses are three digits. Called for every request by
/// [`crate::observe::observe_requests`].
pub fn record_request(method: &'static str, route: &str, status: u16, elapsed: Duration) {
    let series = RequestSeries::of(method, route, status);
    series.requests.increment(1);
    series.duration.record(elapsed.as_secs_f64());
}

/// The handles of one (method, route, status)'s request series. Looked up in the recorder once
/// and kept: looking a series up builds its key (its labels as strings) and hashes it, and a
/// request then paid for that twice. The set is bounded as the labels are (see
/// [`record_request`]), so the map is too.
#[derive(Clone)]
struct RequestSeries {
    requests: metrics::Counter,
    duration: metrics::Histogram,
}

type SeriesByRoute = HashMap<String, HashMap<(&'static str, u16), RequestSeries>>;

static REQUEST_SERIES: LazyLock<Mutex<SeriesByRoute>> = LazyLock::new(Mutex::default);

impl RequestSeries {
    fn of(method: &'static str, route: &str, status: u16) -> RequestSeries {
        // A panic elsewhere while holding the lock leaves the map whole: every insert is one call.
        let mut known = REQUEST_SERIES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(series) = known.get(route).and_then(|r| r.get(&(method, status))) {
            return series.clone();
        }
        let series = RequestSeries {
            requests: metrics::counter!("quota_http_requests_total",
                "method" => method, "route" => route.to_owned(), "status" => status.to_string()),
            duration: metrics::histogram!("quota_http_request_duration_seconds",
                "method" => method, "route" => route.to_owned()),
        };
        known
            .entry(route.to_owned())
            .or_default()
            .insert((method, status), series.clone());
        series
    }
}

/// The exposition text, with the ledger's and projections' numbers brought up to date.
pub async fn render(state: &AppState) -> String {
    let stats = state.ledger.stats();
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    metrics::counter!("quota_ledger_decisions_total").absolute(load(&stats.decisions));
    metrics::counter!("quota_ledger_conflicts_total").absolute(load(&stats.conflicts));
    metrics::counter!("quota_ledger_append_batches_total").absolute(load(&stats.batches));
    metrics::counter!("quota_ledger_append_batch_appends_total")
        .absolute(load(&stats.batch_appends));
    metrics::counter!("quota_ledger_append_batch_events_total").absolute(load(&stats.batch_events));
    metrics::gauge!("quota_ledger_append_seconds_total")
        .set(load(&stats.batch_micros) as f64 / 1e6);
    let batches = load(&stats.batches).max(1) as f64;
    metrics::gauge!("quota_ledger_append_batch_size_mean")
        .set(load(&stats.batch_appends) as f64 / batches);
    metrics::gauge!("quota_ledger_append_latency_mean_seconds")
        .set(load(&stats.batch_micros) as f64 / 1e6 / batches);
    metrics::gauge!("quota_ledger_cached_projects").set(state.ledger.cached_projects() as f64);

    if let Some(projections) = state.projections.clone() {
        // Labelled by view name: a fixed set (projections::PROJECTION_NAMES).
        for view in projections.health() {
            metrics::counter!("quota_projection_failures_total", "view" => view.name)
                .absolute(view.failures);
        }
        // A failing status read must not fail the scrape; the lag just goes stale.
        match tokio::spawn(async move { projections.status().await }).await {
            Ok(Ok(views)) => {
                for view in views {
                    metrics::gauge!("quota_projection_lag", "projection" => view.name.clone())
                        .set(view.lag as f64);
                    metrics::gauge!("quota_projection_position", "projection" => view.name.clone())
                        .set(view.position as f64);
                    metrics::gauge!("quota_projection_head", "projection" => view.name)
                        .set(view.head as f64);
                }
            }
            Ok(Err(error)) => tracing::warn!(%error, "projection status unavailable for metrics"),
            Err(_) => tracing::warn!("projection status failed for metrics"),
        }
    }
    state.metrics.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_outside_the_standard_ones_are_other() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(method_label(&Method::DELETE), "DELETE");
        for odd in ["FROBNICATE", "get", &"M".repeat(100_000)] {
            let method = Method::from_bytes(odd.as_bytes()).expect("a method token");
            assert_eq!(method_label(&method), "other", "{odd}");
        }
    }
}
