//! The route table: each route is registered together with what it needs from the caller (its
//! [`Rule`]) and whether it reads a query string, so a new endpoint cannot forget either. The
//! authorization middleware ([`crate::auth::guard_routes`]) and the query check
//! ([`crate::extract::refuse_unread_query`]) look routes up here instead of matching route
//! strings a second time.

use std::collections::HashMap;

use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{on, MethodFilter};
use axum::Router;

use crate::server::AppState;

/// What a route needs from the caller, declared where the route is registered. Ordered from the
/// least to the most demanding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    /// No token: health, metrics, the API document and the audit console's assets (they carry no
    /// project data).
    Public,
    /// Any valid token.
    AnyToken,
    /// Reads of the project named by the route's `{p}`.
    ProjectRead,
    /// Reservations of the project named by the route's `{p}`.
    ProjectWrite,
    /// The admin role.
    Admin,
}

/// Whether a route reads a query string (with an [`ApiQuery`](crate::extract::ApiQuery) whose
/// type rejects unknown parameters); every other route refuses any query string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Query {
    None,
    Read,
}

/// The HTTP methods the API serves. `GET` also answers `HEAD`, under the same rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    Put,
    Post,
    Delete,
}

impl Verb {
    fn filter(self) -> MethodFilter {
        match self {
            Verb::Get => MethodFilter::GET,
            Verb::Put => MethodFilter::PUT,
            Verb::Post => MethodFilter::POST,
            Verb::Delete => MethodFilter::DELETE,
        }
    }

    fn method(self) -> Method {
        match self {
            Verb::Get => Method::GET,
            Verb::Put => Method::PUT,
            Verb::Post => Method::POST,
            Verb::Delete => Method::DELETE,
        }
    }
}

/// The rules and query use of every registered route, keyed by the route's pattern.
#[derive(Debug, Default)]
pub struct RouteTable {
    rules: HashMap<&'static str, Vec<(Method, Rule)>>,
    /// The routes and methods that read a query string (`GET /v1/projects/{p}/reservations`
    /// does, `POST` on the same path does not).
    reading_query: HashMap<&'static str, Vec<Method>>,
}

impl RouteTable {
    /// The rule of a request matched to `route`. `HEAD` follows `GET`. A method the route does
    /// not serve (answered 405) needs the most demanding of the route's rules, so that a 405
    /// tells a caller no more than a 403 would. `None` for a route that is not registered.
    pub fn rule(&self, method: &Method, route: &str) -> Option<Rule> {
        let rules = self.rules.get(route)?;
        let method = if method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        let declared = rules.iter().find(|(m, _)| m == method).map(|(_, r)| *r);
        declared.or_else(|| rules.iter().map(|(_, r)| *r).max())
    }

    /// Every registered route and method.
    pub fn routes(&self) -> impl Iterator<Item = (&'static str, &Method)> + '_ {
        self.rules
            .iter()
            .flat_map(|(path, rules)| rules.iter().map(move |(method, _)| (*path, method)))
    }

    /// Whether `method` on `route` reads a query string. `HEAD` follows `GET`.
    pub fn reads_query(&self, method: &Method, route: &str) -> bool {
        let method = if method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        self.reading_query
            .get(route)
            .is_some_and(|methods| methods.contains(method))
    }
}

/// A router under construction, with the table of what each route needs.
pub struct Routes {
    router: Router<AppState>,
    table: RouteTable,
}

impl Default for Routes {
    fn default() -> Self {
        Routes {
            router: Router::new(),
            table: RouteTable::default(),
        }
    }
}

impl Routes {
    /// Registers `handler` for `verb` on `path`, with the rule it needs and its use of a query.
    pub fn add<H, T>(
        mut self,
        verb: Verb,
        path: &'static str,
        rule: Rule,
        query: Query,
        handler: H,
    ) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        let rules = self.table.rules.entry(path).or_default();
        assert!(
            rules.iter().all(|(m, _)| *m != verb.method()),
            "{verb:?} {path} is registered twice"
        );
        rules.push((verb.method(), rule));
        if query == Query::Read {
            self.table
                .reading_query
                .entry(path)
                .or_default()
                .push(verb.method());
        }
        self.router = self.router.route(path, on(verb.filter(), handler));
        self
    }

    pub fn into_parts(self) -> (Router<AppState>, RouteTable) {
        (self.router, self.table)
    }
}
