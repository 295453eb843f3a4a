//! The document against the rules it must state (SPEC.md, "Input and transport rules").

use super::*;
use crate::problem::ProblemCode;

#[test]
fn the_document_has_every_route_of_the_router_and_every_problem_code() {
    let doc = serde_json::to_value(document()).expect("serialisable");
    let paths = doc["paths"].as_object().expect("paths");
    // The router's routes and methods, as registered in server.rs.
    let (_, table) = crate::server::routes().into_parts();
    let routes: Vec<_> = table.routes().collect();
    assert!(routes.len() >= 13, "{routes:?}");
    // The Compute API's routes are Nova's contract (its api-ref and Tempest's schemas), with
    // Nova's error bodies; python-novaclient tests them (.ci/nova_quotas.py), not this document.
    // The audit console's page and assets are no API (.ci/console.sh tests them in a browser).
    for (route, method) in routes.into_iter().filter(|(route, _)| {
        !route.starts_with(crate::routes::nova::PREFIX)
            && !route.starts_with(crate::routes::console::PREFIX)
    }) {
        let method = method.as_str().to_lowercase();
        assert!(
            paths.get(route).is_some_and(|p| p.get(&method).is_some()),
            "OpenAPI lacks {method} {route}"
        );
    }
    let codes = &doc["components"]["schemas"]["ProblemCode"];
    let text = codes.to_string();
    for code in ProblemCode::ALL {
        assert!(
            text.contains(code.as_str()),
            "ProblemCode schema lacks {}",
            code.as_str()
        );
    }
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
}

fn doc() -> serde_json::Value {
    serde_json::to_value(document()).expect("serialisable")
}

/// The schema a `$ref` names, or the schema itself.
fn resolve<'a>(doc: &'a serde_json::Value, schema: &'a serde_json::Value) -> &'a serde_json::Value {
    match schema["$ref"].as_str() {
        Some(reference) => {
            let name = reference.trim_start_matches("#/components/schemas/");
            &doc["components"]["schemas"][name]
        }
        None => schema,
    }
}

/// Every operation as `(path, method, operation)`.
fn operations(doc: &serde_json::Value) -> Vec<(String, String, serde_json::Value)> {
    let mut all = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            all.push((path.clone(), method.clone(), operation.clone()));
        }
    }
    all
}

fn parameter<'a>(operation: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    operation["parameters"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no parameter {name} in {operation}"))
}

/// Every `$ref` anywhere in `value`, with the JSON path it sits at.
fn references(value: &serde_json::Value, at: &str, found: &mut Vec<(String, String)>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, inner) in map {
                match (key.as_str(), inner.as_str()) {
                    ("$ref", Some(reference)) => found.push((at.to_owned(), reference.to_owned())),
                    _ => references(inner, &format!("{at}/{key}"), found),
                }
            }
        }
        serde_json::Value::Array(items) => {
            for (index, inner) in items.iter().enumerate() {
                references(inner, &format!("{at}/{index}"), found);
            }
        }
        _ => {}
    }
}

#[test]
fn every_reference_names_a_component_the_document_has() {
    // A `$ref` to a schema the components lack is skipped by clients and by schemathesis: the
    // parameter it types goes unchecked (a usage history's `step` once did).
    let doc = doc();
    let mut found = Vec::new();
    references(&doc, "#", &mut found);
    assert!(found.len() > 50, "{found:?}");
    for (at, reference) in found {
        let mut target = &doc;
        for segment in reference.trim_start_matches("#/").split('/') {
            target = &target[segment];
        }
        assert!(
            target.is_object(),
            "{at} refers to {reference}, which the document lacks"
        );
    }
}

#[test]
fn the_document_reads_back_as_openapi_3_1() {
    let text = serde_json::to_string(&document()).expect("serialisable");
    let parsed: utoipa::openapi::OpenApi = serde_json::from_str(&text).expect("parses as OpenAPI");
    assert_eq!(
        serde_json::to_value(&parsed).expect("serialisable")["openapi"],
        "3.1.0"
    );
}

#[test]
fn ids_names_and_maps_state_their_grammar_and_sizes() {
    let doc = doc();
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["ProjectId"]["pattern"], "^[A-Za-z0-9._:-]{1,128}$");
    assert_eq!(
        schemas["ResourceName"]["pattern"],
        "^[A-Za-z0-9._:-]{1,64}$"
    );
    for map in ["Deltas", "Limits"] {
        let schema = &schemas[map];
        assert_eq!(
            schema["propertyNames"]["pattern"],
            "^[A-Za-z0-9._:-]{1,64}$"
        );
        assert_eq!(schema["minProperties"], 1, "{map}");
        assert_eq!(schema["maxProperties"], 64, "{map}");
    }
    assert_eq!(schemas["Limits"]["additionalProperties"]["minimum"], -1);
    let request = |name: &str, field: &str| schemas[name]["properties"][field]["$ref"].clone();
    assert_eq!(
        request("ReserveRequest", "deltas"),
        "#/components/schemas/Deltas"
    );
    assert_eq!(
        request("LimitsRequest", "limits"),
        "#/components/schemas/Limits"
    );
    assert_eq!(
        request("DefaultsRequest", "limits"),
        "#/components/schemas/Limits"
    );

    let mut project_routes = 0;
    for (path, method, operation) in operations(&doc) {
        if path.contains("{p}") {
            project_routes += 1;
            let p = parameter(&operation, "p");
            assert_eq!(
                p["schema"]["$ref"], "#/components/schemas/ProjectId",
                "{method} {path}"
            );
        }
        if path.contains("{id}") {
            let id = parameter(&operation, "id");
            assert_eq!(id["schema"]["format"], "uuid", "{method} {path}");
        }
    }
    assert!(project_routes >= 9, "{project_routes}");
}

#[test]
fn client_text_is_one_to_256_characters_without_control_characters() {
    let doc = doc();
    let text = &doc["components"]["schemas"]["ClientText"];
    assert_eq!(text["minLength"], 1);
    assert_eq!(text["maxLength"], 256);
    assert_eq!(text["pattern"], r"^[^\u0000-\u001f\u007f-\u009f]{1,256}$");
    // Every body that takes `actor` or `request_id` points at it (or leaves it out: null).
    let mut fields = 0;
    for (name, schema) in doc["components"]["schemas"].as_object().expect("schemas") {
        if !name.ends_with("Request") {
            continue;
        }
        for field in ["actor", "request_id"] {
            let Some(property) = schema["properties"].get(field) else {
                continue;
            };
            fields += 1;
            let variants = property["oneOf"].as_array().expect("null or ClientText");
            assert!(
                variants.iter().any(|v| v["type"] == "null"),
                "{name}.{field}"
            );
            assert!(
                variants
                    .iter()
                    .any(|v| v["$ref"] == "#/components/schemas/ClientText"),
                "{name}.{field}"
            );
        }
    }
    assert!(fields >= 10, "{fields}");
}

#[test]
fn queries_state_their_ranges_formats_and_enums() {
    let doc = doc();
    let schemas = &doc["components"]["schemas"];
    let audit = &doc["paths"]["/v1/projects/{p}/audit"]["get"];
    let usage = &doc["paths"]["/v1/projects/{p}/usage"]["get"];
    let limit = resolve(&doc, &parameter(audit, "limit")["schema"]);
    assert_eq!(
        (&limit["minimum"], &limit["maximum"]),
        (&1.into(), &1000.into())
    );
    for operation in [audit, usage] {
        let position = resolve(&doc, &parameter(operation, "min_position")["schema"]);
        assert_eq!(position["minimum"], 0);
        assert_eq!(position["maximum"], u64::MAX);
        assert!(position.get("format").is_none(), "not int64: {position}");
    }
    for (operation, name) in [(audit, "since"), (audit, "until"), (usage, "at")] {
        let time = resolve(&doc, &parameter(operation, name)["schema"]);
        assert_eq!(time["format"], "date-time", "{name}");
    }
    let event_type = resolve(&doc, &parameter(audit, "type")["schema"]);
    let expected: Vec<serde_json::Value> =
        domain::EVENT_TYPES.iter().map(|t| (*t).into()).collect();
    assert_eq!(event_type["enum"], serde_json::Value::from(expected));
    assert_eq!(parameter(audit, "reservation")["schema"]["format"], "uuid");
    let cursor = resolve(&doc, &parameter(audit, "cursor")["schema"]);
    assert_eq!(cursor["pattern"], schemas::AUDIT_CURSOR_PATTERN);
    // The pattern is `^61313[aA](3[0-9]){1,18}$`: the cursors the server hands out match it.
    for position in [0, 7, 12_345, 999_999_999_999_999_999] {
        let next = projections::encode_cursor(position);
        let digits = next.strip_prefix("61313a").expect("a1: prefix");
        assert!(
            digits.len().is_multiple_of(2) && (2..=36).contains(&digits.len()),
            "{next}"
        );
        assert!(
            digits
                .as_bytes()
                .chunks(2)
                .all(|pair| pair[0] == b'3' && pair[1].is_ascii_digit()),
            "{next}"
        );
        assert_eq!(projections::decode_cursor(&next).expect("valid"), position);
    }
    assert_eq!(
        schemas["ProjectionName"]["enum"],
        serde_json::json!(["usage", "audit"])
    );
}

#[test]
fn the_problem_document_has_every_member_a_problem_carries() {
    let doc = doc();
    let problem = &doc["components"]["schemas"]["ProblemDocument"]["properties"];
    for member in [
        "type",
        "title",
        "status",
        "detail",
        "overs",
        "limits",
        "usage",
        "headroom",
        "resources",
        "min_position",
        "position",
        "user_overs",
        "ancestor_overs",
    ] {
        assert!(
            problem.get(member).is_some(),
            "ProblemDocument lacks {member}"
        );
        assert!(
            !problem[member].to_string().contains("\"null\""),
            "{member} is never null"
        );
    }
    // `resources`: the names (unknown-resource, usage-underflow) or the standing of each
    // resource (limit-below-usage).
    let resources = resolve(&doc, &problem["resources"]);
    let kinds: Vec<&str> = resources["oneOf"]
        .as_array()
        .expect("oneOf")
        .iter()
        .map(|v| v["type"].as_str().expect("typed"))
        .collect();
    assert_eq!(kinds, ["array", "object"]);
}

#[test]
fn every_route_states_every_status_it_can_answer() {
    let doc = doc();
    for (path, method, operation) in operations(&doc) {
        let responses = operation["responses"].as_object().expect("responses");
        for status in ["400", "500"] {
            assert!(
                responses.contains_key(status),
                "{method} {path} lacks {status}"
            );
        }
        if path.starts_with("/v1/") {
            for status in ["401", "503"] {
                assert!(
                    responses.contains_key(status),
                    "{method} {path} lacks {status}"
                );
            }
        }
        let Some(body) = operation.get("requestBody") else {
            continue;
        };
        for status in ["413", "415"] {
            assert!(
                responses.contains_key(status),
                "{method} {path} lacks {status}"
            );
        }
        let schema = &body["content"]["application/json"]["schema"];
        assert!(
            !schema.to_string().contains("\"null\""),
            "{method} {path}: a body is never null"
        );
    }
    let optional = &doc["paths"]["/v1/projects/{p}/reservations/{id}/commit"]["post"];
    assert_eq!(optional["requestBody"]["required"], false);
}

#[test]
fn links_chain_a_reserve_to_its_reservation() {
    let doc = doc();
    let reserve = &doc["paths"]["/v1/projects/{p}/reservations"]["post"];
    let links = &reserve["responses"]["201"]["links"];
    for (name, target) in [
        ("GetReservation", "get_reservation"),
        ("CommitReservation", "commit"),
        ("ReleaseReservation", "release"),
    ] {
        let link = &links[name];
        assert_eq!(link["operationId"], target, "{name}");
        assert_eq!(link["parameters"]["p"], "$request.path.p");
        assert_eq!(link["parameters"]["id"], "$response.body#/reservation_id");
    }
    // Every link names an operation that exists.
    let ids: Vec<String> = operations(&doc)
        .iter()
        .filter_map(|(_, _, op)| op["operationId"].as_str().map(str::to_owned))
        .collect();
    for (path, method, operation) in operations(&doc) {
        for response in operation["responses"]
            .as_object()
            .expect("responses")
            .values()
        {
            for link in response["links"]
                .as_object()
                .into_iter()
                .flat_map(|l| l.values())
            {
                let target = link["operationId"].as_str().expect("operationId");
                assert!(
                    ids.iter().any(|id| id == target),
                    "{method} {path} links to {target}"
                );
            }
        }
    }
}

#[test]
fn the_hierarchy_is_in_the_document() {
    let doc = doc();
    let parent = &doc["paths"]["/v1/projects/{p}/parent"];
    for method in ["get", "put", "delete"] {
        assert!(parent[method].is_object(), "{method} …/parent");
    }
    let request = resolve(
        &doc,
        &parent["put"]["requestBody"]["content"]["application/json"]["schema"],
    );
    assert_eq!(request["required"], serde_json::json!(["parent"]));
    assert_eq!(
        request["properties"]["parent"]["$ref"],
        "#/components/schemas/ProjectId"
    );
    assert_eq!(request["additionalProperties"], false);
    assert!(parent["put"]["responses"]["409"].is_object());
    let schemas = &doc["components"]["schemas"];
    for field in ["subtree", "children"] {
        let usage = &schemas["UsageResponse"];
        assert!(
            usage["properties"].get(field).is_some(),
            "usage lacks {field}"
        );
        let required = usage["required"].as_array().expect("required");
        assert!(!required.iter().any(|r| r == field), "{field} is optional");
    }
    // (Its `standing` is flattened: the properties sit in an `allOf`.)
    assert!(schemas["DryRunResponse"]
        .to_string()
        .contains("\"ancestor_overs\""));
    let audit = &doc["paths"]["/v1/projects/{p}/audit"]["get"];
    assert_eq!(parameter(audit, "subtree")["schema"]["type"], "boolean");
    for field in ["project", "parent", "descendant"] {
        assert!(
            schemas["AuditEntryBody"]["properties"].get(field).is_some(),
            "{field}"
        );
    }
}
