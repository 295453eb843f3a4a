//! The OpenAPI 3 document, generated from the handlers' `#[utoipa::path]` attributes and the
//! bodies' `ToSchema` derives, so it cannot drift from the code. Served at `/openapi.json`.

mod contract;
pub mod schemas;

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use self::contract::Contract;

use crate::problem::{ProblemCode, ProblemDocument};
use crate::routes::{
    admin, audit, corrections, defaults, history, limits, parent, projects, reservation_list,
    reservations, service, usage, users,
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "quota-ledger",
        description = "An event-sourced quota service: reserve, commit and release against limits, \
            with every decision in an append-only ledger. Errors are RFC 9457 problem+json; the \
            `type` ends in one of the codes of the `ProblemCode` schema."
    ),
    paths(
        defaults::put_defaults,
        defaults::get_defaults,
        limits::put_limits,
        limits::get_limits,
        limits::delete_limits,
        users::put_user_limits,
        users::get_user_limits,
        users::delete_user_limits,
        users::get_user_usage,
        parent::put_parent,
        parent::get_parent,
        parent::delete_parent,
        reservations::reserve,
        reservation_list::list_reservations,
        reservations::get_reservation,
        reservations::commit,
        reservations::release,
        projects::list_projects,
        usage::get_usage,
        history::get_history,
        corrections::correct_usage,
        audit::get_audit,
        audit::get_defaults_audit,
        admin::list_projections,
        admin::rebuild_projection,
        service::healthz,
        service::metrics,
        service::openapi,
    ),
    components(schemas(ProblemDocument, ProblemCode)),
    modifiers(&BearerAuth, &Contract),
    tags(
        (name = "limits", description = "Default and per-project limits"),
        (name = "tree", description = "The project hierarchy: a parent's limits cap its subtree"),
        (name = "reservations", description = "Reserve, commit, release"),
        (name = "usage", description = "Usage and audit views"),
        (name = "admin", description = "Projection maintenance"),
        (name = "service", description = "Health, metrics, this document"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A token from the server's tokens file; roles admin, auditor, project:{id}",
                    ))
                    .build(),
            ),
        );
    }
}

pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

#[cfg(test)]
mod tests;
