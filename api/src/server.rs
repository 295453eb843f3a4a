//! `quota serve`: the router, its state, startup of the ledger, views and sweeper, and graceful
//! shutdown.

use std::any::Any;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::Router;
use ledger::limits as ledger_limits;
use ledger::sweeper::Sweeper;
use ledger::{Ledger, LedgerConfig, SystemClock};
use metrics_exporter_prometheus::PrometheusHandle;
use projections::Projections;
use tower_http::catch_panic::CatchPanicLayer;

use crate::auth;
use crate::error::ApiError;
use crate::limits::{
    DEFAULTS_REFRESH, DEFAULT_CLIENT_TIMEOUT_S, DEFAULT_MAX_CONNECTIONS, DRAIN_TIMEOUT,
    MAX_BODY_BYTES, MAX_MAX_CONNECTIONS, SWEEP_INTERVAL,
};
pub use crate::routes::registry::routes;
use crate::routes::{nova, service};
use crate::tokens::TokenStore;
use crate::transport::ConnectionLimits;

pub const DEFAULT_STORE: &str = "sqlite://quota.db";
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

#[derive(Clone)]
pub struct AppState {
    pub ledger: Arc<Ledger>,
    /// `None` when the views could not be started: writes still work, view reads answer 503.
    pub projections: Option<Arc<Projections>>,
    /// `None`: the server runs open (loopback only unless `--insecure-open`).
    pub tokens: Option<Arc<TokenStore>>,
    pub metrics: PrometheusHandle,
}

/// The whole HTTP API.
pub fn router(state: AppState) -> Router {
    let (routes, table) = routes().into_parts();
    routes
        .route_layer(middleware::from_fn_with_state(
            auth::Guard {
                tokens: state.tokens.clone(),
                table: Arc::new(table),
            },
            auth::guard_routes,
        ))
        .fallback(service::route_not_found)
        .method_not_allowed_fallback(service::method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(CatchPanicLayer::custom(panic_response))
        // Outside every error source above, so each problem to a `/compute/` request is
        // rewritten in Nova's words.
        .layer(middleware::from_fn(nova::faults::nova_fault_bodies))
        .layer(middleware::from_fn(crate::observe::observe_requests))
        .with_state(state)
}

fn panic_response(_panic: Box<dyn Any + Send + 'static>) -> Response {
    // The panic message stays in the log (the panic hook prints it); the client sees a 500.
    ApiError::Internal("handler panicked".into()).into_response()
}

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed on stdout).
    #[arg(long, default_value = DEFAULT_LISTEN, env = "QUOTA_LISTEN")]
    pub listen: String,
    /// Event store: sqlite://PATH (created if missing) or postgres://...
    #[arg(long, default_value = DEFAULT_STORE, env = "QUOTA_STORE")]
    pub store: String,
    /// File of `TOKEN ROLE` lines; without it the server runs open.
    #[arg(long, env = "QUOTA_TOKENS")]
    pub tokens: Option<PathBuf>,
    /// Allow running without tokens on a non-loopback address.
    #[arg(long)]
    pub insecure_open: bool,
    /// Close a connection after this many seconds without a byte from or to the client
    /// (stalled or slow clients, idle keep-alive connections).
    #[arg(long, default_value_t = DEFAULT_CLIENT_TIMEOUT_S, env = "QUOTA_CLIENT_TIMEOUT", value_parser = clap::value_parser!(u64).range(1..))]
    pub client_timeout: u64,
    /// Most connections open at once; further ones wait until one closes.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS, env = "QUOTA_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..=MAX_MAX_CONNECTIONS))]
    pub max_connections: u64,
    /// Log lines as text for people or JSON for log collectors (level from RUST_LOG).
    #[arg(long, value_enum, default_value = "text", env = "QUOTA_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Projects whose state the ledger keeps in memory; colder ones are reloaded on use.
    #[arg(long, default_value_t = ledger_limits::DEFAULT_CACHE_PROJECTS as u64, env = "QUOTA_CACHE_PROJECTS", value_parser = clap::value_parser!(u64).range(1..))]
    pub cache_projects: u64,
    /// Reservations the cached project states may hold together (this bounds the memory of
    /// the cache); past it idle projects are evicted.
    #[arg(long, default_value_t = ledger_limits::DEFAULT_CACHE_MAX_RESERVATIONS as u64, env = "QUOTA_CACHE_RESERVATIONS", value_parser = clap::value_parser!(u64).range(100..))]
    pub cache_reservations: u64,
    /// Most decisions written in one group commit (one transaction, one fsync).
    #[arg(long, default_value_t = ledger_limits::DEFAULT_MAX_BATCH_APPENDS as u64, env = "QUOTA_BATCH_APPENDS", value_parser = clap::value_parser!(u64).range(1..=ledger_limits::DEFAULT_QUEUE_CAPACITY as u64))]
    pub batch_appends: u64,
    /// A project's state is snapshotted after this many events (and at least as many as it
    /// has reservations), so a reload reads a bounded tail.
    #[arg(long, default_value_t = ledger_limits::DEFAULT_SNAPSHOT_MIN_EVENTS, env = "QUOTA_SNAPSHOT_EVENTS", value_parser = clap::value_parser!(u64).range(1..))]
    pub snapshot_events: u64,
}

impl ServeArgs {
    /// The ledger's sizing from the flags; the rest at its defaults.
    pub fn ledger_config(&self) -> LedgerConfig {
        let size = |value: u64| usize::try_from(value).unwrap_or(usize::MAX);
        LedgerConfig {
            cache_capacity: size(self.cache_projects),
            cache_max_reservations: size(self.cache_reservations),
            max_batch_appends: size(self.batch_appends),
            snapshot_min_events: self.snapshot_events,
            ..LedgerConfig::default()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Resolves `listen` and checks that an open server stays on loopback.
async fn bind(args: &ServeArgs, open: bool) -> Result<tokio::net::TcpListener, String> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(&args.listen)
        .await
        .map_err(|e| format!("cannot resolve --listen {}: {e}", args.listen))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("--listen {} resolves to no address", args.listen));
    }
    if open && !args.insecure_open && addrs.iter().any(|a| !a.ip().is_loopback()) {
        return Err(format!(
            "refusing to listen on {} without --tokens: an open server listens on loopback only \
             (give --tokens FILE, or --insecure-open if you really mean it)",
            args.listen
        ));
    }
    tokio::net::TcpListener::bind(addrs.as_slice())
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))
}

/// Starts the views; a failure leaves the server up without them (reads of views answer 503),
/// because quota decisions must not depend on the read side.
async fn start_projections(store: Arc<dyn ledger::EventStore>) -> Option<Arc<Projections>> {
    match tokio::spawn(Projections::start(store)).await {
        Ok(Ok(projections)) => Some(projections),
        Ok(Err(error)) => {
            tracing::error!(%error, "projections failed to start; usage and audit answer 503");
            None
        }
        Err(_) => {
            tracing::error!("projections panicked at start; usage and audit answer 503");
            None
        }
    }
}

pub async fn serve(args: ServeArgs) -> Result<(), String> {
    let tokens = args
        .tokens
        .as_deref()
        .map(TokenStore::load)
        .transpose()
        .map_err(|e| e.to_string())?
        .map(Arc::new);
    tokio::spawn(crate::tokens::reload_on_hangup(tokens.clone()));
    let listener = bind(&args, tokens.is_none()).await?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;

    let store = ledger::store::open(&args.store)
        .await
        .map_err(|e| format!("cannot open store: {e}"))?;
    let ledger = Ledger::start(store.clone(), Arc::new(SystemClock), args.ledger_config())
        .await
        .map_err(|e| format!("cannot start the ledger: {e}"))?;
    let projections = start_projections(store.clone()).await;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let sweeper =
        tokio::spawn(Sweeper::new(ledger.clone()).run(SWEEP_INTERVAL, stopped(stop_rx.clone())));
    let refresher = tokio::spawn(refresh_defaults(ledger.clone(), stopped(stop_rx.clone())));

    let state = AppState {
        ledger: ledger.clone(),
        projections,
        tokens: tokens.clone(),
        metrics: crate::metrics::install(),
    };
    let app = router(state);
    tracing::info!(
        %address,
        store = store.backend(),
        auth = if tokens.is_some() { "tokens" } else { "open" },
        "serving"
    );
    // Test harnesses and scripts read the actual address (port 0 picks one) from this line.
    println!("quota listening on http://{address}");

    let limits = ConnectionLimits {
        client_timeout: Duration::from_secs(args.client_timeout),
        max_connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
    };
    crate::transport::serve(listener, app, limits, shutdown_signal()).await;
    tracing::info!("stopped accepting; in-flight requests are done");
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        let _ = sweeper.await;
        let _ = refresher.await;
    })
    .await;
    // Every answered request was durable before it was answered; dropping the ledger lets
    // the appender finish whatever the sweeper queued last.
    drop(ledger);
    tracing::info!("shut down");
    Ok(())
}

async fn refresh_defaults(ledger: Arc<Ledger>, stop: impl std::future::Future<Output = ()>) {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(DEFAULTS_REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {
                if let Err(error) = ledger.refresh_defaults().await {
                    tracing::warn!(%error, "refreshing the defaults failed; will retry");
                }
            }
        }
    }
}

/// Resolves on SIGINT or SIGTERM, and from then on bounds the drain.
async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
    tracing::info!("shutdown signal received; draining");
    tokio::spawn(async {
        tokio::time::sleep(DRAIN_TIMEOUT).await;
        tracing::warn!("in-flight requests did not finish in time; exiting");
        std::process::exit(1);
    });
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    #[test]
    fn the_ledger_flags_size_the_ledger_and_default_to_its_defaults() {
        let defaults = Serve::parse_from(["serve"]).args.ledger_config();
        let expected = LedgerConfig::default();
        assert_eq!(defaults.cache_capacity, expected.cache_capacity);
        assert_eq!(
            defaults.cache_max_reservations,
            expected.cache_max_reservations
        );
        assert_eq!(defaults.max_batch_appends, expected.max_batch_appends);
        assert_eq!(defaults.snapshot_min_events, expected.snapshot_min_events);
        let flags = [
            "serve",
            "--cache-projects=7",
            "--cache-reservations=700",
            "--batch-appends=3",
            "--snapshot-events=9",
        ];
        let sized = Serve::parse_from(flags).args.ledger_config();
        assert_eq!(sized.cache_capacity, 7);
        assert_eq!(sized.cache_max_reservations, 700);
        assert_eq!(sized.max_batch_appends, 3);
        assert_eq!(sized.snapshot_min_events, 9);
        assert!(Serve::try_parse_from(["serve", "--batch-appends=0"]).is_err());
    }
}
