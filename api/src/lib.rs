//! The edges of quota-ledger: the HTTP API (`quota serve`), auth, the `quota` command line
//! clients, and the load generator.
//!
//! - [`server`]: router, state, startup and graceful shutdown.
//! - [`routes`]: one module of handlers per resource of SPEC.md.
//! - [`error`] and [`problem`]: `ApiError`, and the problem+json answer of each error.
//! - [`extract`]: body, path and query extractors whose rejections are problems too.
//! - [`transport`]: accepting and serving connections (head deadline, connection cap).
//! - [`idle`]: connections that go quiet are closed (stalled clients).
//! - [`auth`]: roles, callers and the authorization middleware.
//! - [`tokens`]: the tokens file (hashes, names, `SIGHUP` reloads).
//! - [`limits`]: the edge's bounds (body size, deadlines, waits), in one place.
//! - [`metrics`]: Prometheus counters and `/metrics`.
//! - [`openapi`]: the OpenAPI document, generated from the handlers.
//! - [`cli`]: the `quota` command line.
//! - [`bench`]: `quota bench` (issue 5).

pub mod auth;
pub mod bench;
pub mod cli;
pub mod error;
pub mod extract;
pub mod idle;
pub mod limits;
pub mod metrics;
pub mod openapi;
pub mod problem;
pub mod routes;
pub mod server;
pub mod tokens;
pub mod transport;
