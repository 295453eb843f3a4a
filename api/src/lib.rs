//! The HTTP edge of quota-ledger (`quota serve`): the router and its handlers, auth and
//! tokens, problem answers, the transport, metrics and the OpenAPI document. It turns requests
//! into ledger commands and view queries, and nothing else.
//!
//! It may not depend on the HTTP client (`client`), the command line (`cli`) or the load
//! generator (`bench`): a server build carries no client code (no reqwest, indicatif or
//! tempfile). `cli` starts it with [`server::serve`] and a [`server::ServeArgs`], which stays
//! here as the server's own clap arguments.
//!
//! - [`server`]: router, state, startup and graceful shutdown.
//! - [`routes`]: one module of handlers per resource of SPEC.md.
//! - [`error`] and [`problem`]: `ApiError`, and the problem+json answer of each error.
//! - [`extract`]: body, path and query extractors whose rejections are problems too.
//! - [`transport`]: accepting and serving connections (head deadline, connection cap).
//! - [`idle`]: connections that go quiet are closed (stalled clients).
//! - [`auth`]: roles, callers and the authorization middleware.
//! - [`tokens`]: the tokens file (hashes, names, `SIGHUP` reloads).
//! - [`standing`]: the numbers a reserve was judged on (over-quota problems, dry runs).
//! - [`limits`]: the edge's bounds (body size, deadlines, waits), in one place.
//! - [`metrics`]: Prometheus counters and `/metrics`.
//! - [`openapi`]: the OpenAPI document, generated from the handlers.

pub mod auth;
pub mod error;
pub mod extract;
pub mod idle;
pub mod limits;
pub mod metrics;
pub mod observe;
pub mod openapi;
pub mod problem;
pub mod routes;
pub mod server;
pub mod standing;
pub mod tokens;
pub mod transport;
