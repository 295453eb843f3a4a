//! Named schemas for the document: the constraints the server enforces on ids, names, maps,
//! times and client text, written once from the same constants the validating types use.
//! The handlers' bodies and parameters point at these with `value_type`, so every field that
//! takes a project id, a resource map or an `actor` states the same rule.
//!
//! They are documentation types only: never constructed, never deserialised.

use std::borrow::Cow;

use domain::{ProjectId, ResourceName, UserId, EVENT_TYPES, MAX_RESOURCES_PER_REQUEST};
use projections::{MAX_AUDIT_PAGE, MAX_RESERVATION_PAGE, PROJECTION_NAMES};
use utoipa::openapi::schema::{
    AdditionalProperties, KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type,
};
use utoipa::openapi::{RefOr, Response};
use utoipa::{PartialSchema, ToSchema};

/// The alphabet SPEC.md allows in project ids and resource names, as a regex class.
const NAME_CLASS: &str = "[A-Za-z0-9._:-]";

/// `actor`, `request_id` and `reason`: 1–256 characters, none of them a control character
/// (U+0000–U+001F, U+007F–U+009F).
pub const CLIENT_TEXT_PATTERN: &str = r"^[^\u0000-\u001f\u007f-\u009f]{1,256}$";
pub const CLIENT_TEXT_MAX_CHARS: usize = domain::limits::MAX_TEXT_CHARS;

pub fn project_id_pattern() -> String {
    format!("^{NAME_CLASS}{{1,{}}}$", ProjectId::MAX_LEN)
}

pub fn resource_name_pattern() -> String {
    format!("^{NAME_CLASS}{{1,{}}}$", ResourceName::MAX_LEN)
}

/// An audit cursor is hex of `a1:` and a position that fits in 63 bits. The pattern admits at
/// most 18 digits, so that every cursor it admits is one the server accepts (19 digits can go
/// past i64); a `next` the server hands out has this form below position 10^18. Clients should
/// treat it as opaque.
pub const AUDIT_CURSOR_PATTERN: &str = "^61313[aA](3[0-9]){1,18}$";

/// A reservation list's cursor: hex of `r1:` and a position, by the same rule.
pub const RESERVATION_CURSOR_PATTERN: &str = "^72313[aA](3[0-9]){1,18}$";

/// The project list's cursor: hex of `p1:` and the last project id listed (hex of the id's
/// alphabet: `-` 2d, `.` 2e, 0-9 30-39, `:` 3a, A-Z 41-5a, `_` 5f, a-z 61-7a).
pub const PROJECT_CURSOR_PATTERN: &str =
    "^70313[aA](2[dDeE]|3[0-9aA]|4[1-9a-fA-F]|5[0-9aA]|5[fF]|6[1-9a-fA-F]|7[0-9aA]){1,128}$";

fn string(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
}

fn named_string_pattern(description: &str, pattern: String, max: usize) -> RefOr<Schema> {
    string(description)
        .min_length(Some(1))
        .max_length(Some(max))
        .pattern(Some(pattern))
        .into()
}

fn limit_value() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(-1))
        .description(Some("A limit: -1 is unlimited, 0 and above a hard cap"))
}

fn resource_map(description: &str, values: ObjectBuilder) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(description))
        .property_names(Some(ResourceNameSchema::schema()))
        .additional_properties(Some(AdditionalProperties::RefOr(values.into())))
        .min_properties(Some(1))
        .max_properties(Some(MAX_RESOURCES_PER_REQUEST))
        .into()
}

/// Declares a documentation-only type whose schema is `$body`, under the component `$name`.
macro_rules! doc_schema {
    ($(#[$doc:meta])* $rust:ident, $name:literal, $body:expr) => {
        $(#[$doc])*
        pub struct $rust;

        impl PartialSchema for $rust {
            fn schema() -> RefOr<Schema> {
                $body
            }
        }

        impl ToSchema for $rust {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed($name)
            }
        }
    };
}

doc_schema!(
    /// `{p}` everywhere, and `project` in answers.
    ProjectIdSchema,
    "ProjectId",
    named_string_pattern(
        "A project id: 1 to 128 characters of A-Z a-z 0-9 . _ : -",
        project_id_pattern(),
        ProjectId::MAX_LEN,
    )
);

doc_schema!(
    /// A resource name, as the keys of every resource map.
    ResourceNameSchema,
    "ResourceName",
    named_string_pattern(
        "A resource name: 1 to 64 characters of A-Z a-z 0-9 . _ : -",
        resource_name_pattern(),
        ResourceName::MAX_LEN,
    )
);

doc_schema!(
    /// The `limits` of a defaults or limits request.
    LimitsSchema,
    "Limits",
    resource_map(
        "`{resource: limit}`, 1 to 64 resources; -1 is unlimited",
        limit_value()
    )
);

doc_schema!(
    /// The `in_use` of a correction.
    CountsSchema,
    "Counts",
    resource_map(
        "`{resource: in_use}`, 1 to 64 resources, each 0 or more",
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .minimum(Some(0))
            .description(Some("The real count, measured elsewhere"))
    )
);

doc_schema!(
    /// The `deltas` of a reserve.
    DeltasSchema,
    "Deltas",
    resource_map(
        "`{resource: amount}`, 1 to 64 resources; negative amounts shrink usage at commit",
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
    )
);

doc_schema!(
    /// `actor` and `request_id` of a body.
    ClientTextSchema,
    "ClientText",
    string(
        "Text a client declares for the audit (actor, request id): 1 to 256 characters, \
         no control characters (U+0000-U+001F, U+007F-U+009F)",
    )
    .min_length(Some(1))
    .max_length(Some(CLIENT_TEXT_MAX_CHARS))
    .pattern(Some(CLIENT_TEXT_PATTERN))
    .into()
);

doc_schema!(
    /// A time in and out: `at`, `since`, `until`, `expires_at`, `created_at`.
    TimestampSchema,
    "Timestamp",
    string("An RFC 3339 time, e.g. 2026-01-31T12:00:00Z; answers are UTC with milliseconds")
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
        .into()
);

doc_schema!(
    /// A global position of the store: `min_position`, and `position` in answers.
    PositionSchema,
    "Position",
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .description(Some(
            "A global position of the event store (an unsigned 64-bit integer)"
        ))
        .minimum(Some(0))
        .maximum(Some(u64::MAX))
        .into()
);

doc_schema!(
    /// The `type` filter of the audit, and `type` of its entries.
    EventTypeSchema,
    "EventType",
    string("An event type")
        .enum_values(Some(EVENT_TYPES))
        .into()
);

doc_schema!(
    /// The audit's page size.
    AuditPageSizeSchema,
    "AuditPageSize",
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .description(Some("Entries per page (default 100)"))
        .minimum(Some(1))
        .maximum(Some(MAX_AUDIT_PAGE))
        .into()
);

doc_schema!(
    /// The audit's `cursor`.
    AuditCursorSchema,
    "AuditCursor",
    string("The `next` of the previous page, passed back unchanged")
        .pattern(Some(AUDIT_CURSOR_PATTERN))
        .into()
);

doc_schema!(
    /// The reservation list's page size.
    ReservationPageSizeSchema,
    "ReservationPageSize",
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .description(Some("Reservations per page (default 100)"))
        .minimum(Some(1))
        .maximum(Some(MAX_RESERVATION_PAGE))
        .into()
);

doc_schema!(
    /// The reservation list's `cursor`.
    ReservationCursorSchema,
    "ReservationCursor",
    string("The `next` of the previous page, passed back unchanged")
        .pattern(Some(RESERVATION_CURSOR_PATTERN))
        .into()
);

doc_schema!(
    /// A usage history's `step`.
    HistoryStepSchema,
    "HistoryStep",
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .description(Some("Seconds between points (at most 1,000 points)"))
        .minimum(Some(1))
        .maximum(Some(crate::routes::history::MAX_STEP_SECONDS))
        .into()
);

doc_schema!(
    /// The project list's page size.
    ProjectPageSizeSchema,
    "ProjectPageSize",
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .description(Some("Projects per page (default 100)"))
        .minimum(Some(1))
        .maximum(Some(projections::MAX_PROJECT_PAGE))
        .into()
);

doc_schema!(
    /// The project list's `cursor`.
    ProjectCursorSchema,
    "ProjectCursor",
    string("The `next` of the previous page, passed back unchanged")
        .pattern(Some(PROJECT_CURSOR_PATTERN))
        .into()
);

doc_schema!(
    /// The project list's `prefix`: the beginning of a project id.
    ProjectPrefixSchema,
    "ProjectPrefix",
    string("The beginning of a project id: 0 to 128 characters of A-Z a-z 0-9 . _ : -")
        .max_length(Some(ProjectId::MAX_LEN))
        .pattern(Some(format!("^{NAME_CLASS}{{0,{}}}$", ProjectId::MAX_LEN)))
        .into()
);

doc_schema!(
    /// A user id (SPEC: the project id grammar).
    UserIdSchema,
    "UserId",
    named_string_pattern(
        "A user id: 1 to 128 characters of A-Z a-z 0-9 . _ : -",
        project_id_pattern(),
        UserId::MAX_LEN,
    )
);

doc_schema!(
    /// `{name}` of a rebuild.
    ProjectionNameSchema,
    "ProjectionName",
    string("A view").enum_values(Some(PROJECTION_NAMES)).into()
);

doc_schema!(
    /// `status` of a rebuild's answer.
    RebuildStatusSchema,
    "RebuildStatus",
    string("The view is rebuilt beside the live one, then swapped in")
        .enum_values(Some(["rebuilding"]))
        .into()
);

doc_schema!(
    /// `status` of a reservation.
    ReservationStatusSchema,
    "ReservationStatus",
    string("Held, committed or released")
        .enum_values(Some(["held", "committed", "released"]))
        .into()
);

doc_schema!(
    /// `source` of a project's limit.
    LimitSourceSchema,
    "LimitSource",
    string("`user` (a user's own override), `project` (the project's own override) or `default`")
        .enum_values(Some(["user", "project", "default"]))
        .into()
);

doc_schema!(
    /// `reason` of a released reservation.
    ReleaseReasonSchema,
    "ReleaseReason",
    string("Why a reservation was released")
        .enum_values(Some(["rolled_back", "expired", "freed"]))
        .into()
);

/// Every named schema above, for the document's components.
pub fn all() -> Vec<(String, RefOr<Schema>)> {
    fn entry<T: ToSchema>() -> (String, RefOr<Schema>) {
        (T::name().into_owned(), T::schema())
    }
    vec![
        entry::<ProjectIdSchema>(),
        entry::<ResourceNameSchema>(),
        entry::<LimitsSchema>(),
        entry::<CountsSchema>(),
        entry::<DeltasSchema>(),
        entry::<ClientTextSchema>(),
        entry::<TimestampSchema>(),
        entry::<PositionSchema>(),
        entry::<EventTypeSchema>(),
        entry::<AuditPageSizeSchema>(),
        entry::<AuditCursorSchema>(),
        entry::<ReservationPageSizeSchema>(),
        entry::<ReservationCursorSchema>(),
        entry::<HistoryStepSchema>(),
        entry::<UserIdSchema>(),
        entry::<ProjectPageSizeSchema>(),
        entry::<ProjectCursorSchema>(),
        entry::<ProjectPrefixSchema>(),
        entry::<ProjectionNameSchema>(),
        entry::<RebuildStatusSchema>(),
        entry::<LimitSourceSchema>(),
        entry::<ReservationStatusSchema>(),
        entry::<ReleaseReasonSchema>(),
    ]
}

/// A problem answer, for responses added to many operations at once.
pub fn problem_response(description: &str) -> Response {
    use utoipa::openapi::content::ContentBuilder;
    use utoipa::openapi::ResponseBuilder;
    ResponseBuilder::new()
        .description(description)
        .content(
            crate::problem::PROBLEM_CONTENT_TYPE,
            ContentBuilder::new()
                .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                    "ProblemDocument",
                ))))
                .build(),
        )
        .build()
}
