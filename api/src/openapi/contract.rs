//! What holds for every operation, written once instead of on each handler: the statuses any
//! route can answer (a problem for an unknown query parameter, an unexpected failure), what any
//! body can be refused for (size, media type), optional bodies, and the `links` that let a
//! client (or a stateful tester) go from a reserve to its reservation.

use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::path::Operation;
use utoipa::openapi::request_body::RequestBody;
use utoipa::openapi::schema::{Schema, SchemaType, Type};
use utoipa::openapi::{OpenApi, RefOr, Required};
use utoipa::Modify;

use super::schemas::problem_response;

pub struct Contract;

impl Modify for Contract {
    fn modify(&self, openapi: &mut OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
            ];
            for operation in operations.into_iter().flatten() {
                add_common_responses(operation);
                if let Some(body) = operation.request_body.as_mut() {
                    optional_body_is_left_out(body);
                }
            }
        }
        add_links(openapi);
        let components = openapi.components.get_or_insert_with(Default::default);
        for (name, schema) in super::schemas::all() {
            components.schemas.entry(name).or_insert(schema);
        }
    }
}

fn add_response(operation: &mut Operation, status: &str, description: &str) {
    operation
        .responses
        .responses
        .entry(status.to_owned())
        .or_insert_with(|| RefOr::T(problem_response(description)));
}

fn add_common_responses(operation: &mut Operation) {
    const UNKNOWN_QUERY: &str = "an unknown query parameter";
    match operation.responses.responses.get_mut("400") {
        Some(RefOr::T(bad)) if !bad.description.contains(UNKNOWN_QUERY) => {
            bad.description = format!("{}; invalid-request for {UNKNOWN_QUERY}", bad.description);
        }
        Some(_) => {}
        None => add_response(
            operation,
            "400",
            &format!("invalid-request: {UNKNOWN_QUERY}"),
        ),
    }
    if operation.request_body.is_some() {
        add_response(
            operation,
            "413",
            "payload-too-large: the body is over 64 KiB",
        );
        add_response(
            operation,
            "415",
            "unsupported-media-type: a body must be sent as `Content-Type: application/json`",
        );
    }
    add_response(
        operation,
        "500",
        "internal: an unexpected failure; the cause is in the server log under the request's x-request-id",
    );
}

fn is_null(schema: &RefOr<Schema>) -> bool {
    matches!(schema, RefOr::T(Schema::Object(object))
        if object.schema_type == SchemaType::Type(Type::Null))
}

/// An optional body (commit, release, the limits `DELETE`) may be left out, but when present it
/// is an object: `null` is refused like any other non-object. utoipa writes `Option<T>` bodies
/// as `oneOf: [null, T]`; this keeps `T` and marks the body optional.
fn optional_body_is_left_out(body: &mut RequestBody) {
    if body.required == Some(Required::True) {
        return;
    }
    body.required = Some(Required::False);
    for content in body.content.values_mut() {
        if let Some(RefOr::T(Schema::OneOf(one_of))) = &content.schema {
            let not_null: Vec<_> = one_of.items.iter().filter(|s| !is_null(s)).collect();
            if let [only] = not_null.as_slice() {
                content.schema = Some((*only).clone());
            }
        }
    }
}

/// A link from the answer of one operation to another. Parameter values are runtime expressions
/// (OpenAPI 3.1, "Link Object").
struct LinkSpec {
    from: &'static str,
    status: &'static str,
    name: &'static str,
    to: &'static str,
    parameters: &'static [(&'static str, &'static str)],
}

const fn link(
    from: &'static str,
    status: &'static str,
    name: &'static str,
    to: &'static str,
    parameters: &'static [(&'static str, &'static str)],
) -> LinkSpec {
    LinkSpec {
        from,
        status,
        name,
        to,
        parameters,
    }
}

const LINKS: &[LinkSpec] = &[
    link(
        "reserve",
        "201",
        "GetReservation",
        "get_reservation",
        RESERVATION,
    ),
    link("reserve", "201", "CommitReservation", "commit", RESERVATION),
    link(
        "reserve",
        "201",
        "ReleaseReservation",
        "release",
        RESERVATION,
    ),
    link(
        "reserve",
        "201",
        "UsageAfterReserve",
        "get_usage",
        READ_YOUR_WRITE,
    ),
    link(
        "reserve",
        "201",
        "AuditAfterReserve",
        "get_audit",
        READ_YOUR_WRITE,
    ),
    link(
        "commit",
        "200",
        "GetReservation",
        "get_reservation",
        RESERVATION,
    ),
    link(
        "commit",
        "200",
        "ReleaseReservation",
        "release",
        RESERVATION,
    ),
    link(
        "commit",
        "200",
        "UsageAfterCommit",
        "get_usage",
        READ_YOUR_WRITE,
    ),
    link(
        "release",
        "200",
        "GetReservation",
        "get_reservation",
        RESERVATION,
    ),
    link(
        "release",
        "200",
        "UsageAfterRelease",
        "get_usage",
        READ_YOUR_WRITE,
    ),
    link(
        "get_reservation",
        "200",
        "CommitReservation",
        "commit",
        RESERVATION,
    ),
    link(
        "get_reservation",
        "200",
        "ReleaseReservation",
        "release",
        RESERVATION,
    ),
    link("put_limits", "200", "GetLimits", "get_limits", PROJECT),
    link("put_limits", "200", "ResetLimits", "delete_limits", PROJECT),
];

const RESERVATION: &[(&str, &str)] = &[
    ("p", "$request.path.p"),
    ("id", "$response.body#/reservation_id"),
];
const PROJECT: &[(&str, &str)] = &[("p", "$request.path.p")];
const READ_YOUR_WRITE: &[(&str, &str)] = &[
    ("p", "$request.path.p"),
    ("min_position", "$response.body#/position"),
];

fn operation_mut<'a>(openapi: &'a mut OpenApi, id: &str) -> Option<&'a mut Operation> {
    openapi.paths.paths.values_mut().find_map(|item| {
        [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
        ]
        .into_iter()
        .flatten()
        .find(|op| op.operation_id.as_deref() == Some(id))
    })
}

fn add_links(openapi: &mut OpenApi) {
    for spec in LINKS {
        let mut link = spec
            .parameters
            .iter()
            .fold(LinkBuilder::new(), |link, (key, value)| {
                link.parameter(*key, *value)
            })
            .build();
        // utoipa 5.5 writes `Link::operation_id` as `operation_id`; OpenAPI's field is
        // `operationId`, which the flattened extensions can carry verbatim.
        link.extensions = Some(Extensions::from_iter([("operationId", spec.to)]));
        let Some(RefOr::T(response)) = operation_mut(openapi, spec.from)
            .and_then(|operation| operation.responses.responses.get_mut(spec.status))
        else {
            panic!(
                "the document has no {} answer of {} to link from",
                spec.status, spec.from
            );
        };
        response.links.insert(spec.name.to_owned(), RefOr::T(link));
    }
}
