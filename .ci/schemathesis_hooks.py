"""schemathesis hooks for .ci/schemathesis.sh: generated writes made realistic, nothing hidden.

1. Resource names. A resource exists once it has a default limit (SPEC rule 7), and
   schemathesis invents resource names, so nearly every generated reserve would be refused
   `unknown-resource` and the stateful phase would never get a reservation to chain commit and
   release onto. The script sets defaults for KNOWN_RESOURCES before the run; the keys of a
   well-formed `deltas` (reserve), `limits` (a project's or a user's limits) or `in_use`
   (corrections) map are
   renamed onto them, one to
   one, so no value is dropped or merged (a map with more entries than there are known
   resources is left alone).
2. Grantable reserves. Negative deltas only shrink usage that exists, and a fresh project has
   none, so a reserve with any negative delta is refused `usage-underflow` (SPEC rule 3): a
   reserve's integer deltas are sent as their absolute values, so that reserves are granted
   and the stateful phase can commit and release them (the shrinking path is covered by the
   Rust tests).
3. Integers spelled as floats. For an `integer` field schemathesis also sends `2.0` (JSON Schema
   counts it as the integer 2). The server reads counts only from integer literals, so that no
   fractional or rounded number is ever taken for one, and no schema can state that; such a
   value is sent as the integer literal instead. Fractional values (`1.5`) are left as they are.

Anything malformed (a key outside the name grammar, an empty map, a non-object body, a value of
the wrong type) is left exactly as generated, so negative tests stay negative.
"""

import re

import schemathesis

# Kept in step with the defaults .ci/schemathesis.sh sets.
KNOWN_RESOURCES = ("instances", "cores", "ram", "disk", "gpus", "volumes", "ports", "class:VCPU")
RESOURCE_NAME = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


def _integer_literal(value):
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _with_integer_literals(body, maps=(), scalars=()):
    if not isinstance(body, dict):
        return body
    body = dict(body)
    for field in maps:
        if isinstance(body.get(field), dict):
            body[field] = {name: _integer_literal(v) for name, v in body[field].items()}
    for field in scalars:
        if field in body:
            body[field] = _integer_literal(body[field])
    return body


def _grantable(body):
    if not isinstance(body, dict) or not isinstance(body.get("deltas"), dict):
        return body
    deltas = {
        name: abs(value) if isinstance(value, int) and not isinstance(value, bool) else value
        for name, value in body["deltas"].items()
    }
    return {**body, "deltas": deltas}


def _known_resources(body, field):
    if not isinstance(body, dict):
        return body
    resources = body.get(field)
    if not isinstance(resources, dict) or not 0 < len(resources) <= len(KNOWN_RESOURCES):
        return body
    if not all(isinstance(name, str) and RESOURCE_NAME.match(name) for name in resources):
        return body
    return {**body, field: dict(zip(KNOWN_RESOURCES, resources.values()))}


@schemathesis.hook("map_body").apply_to(operation_id="reserve")
def realistic_reserve(ctx, body):
    body = _with_integer_literals(body, maps=("deltas",), scalars=("expires_in",))
    return _grantable(_known_resources(body, "deltas"))


@schemathesis.hook("map_body").apply_to(operation_id="put_limits")
def realistic_project_limits(ctx, body):
    return _known_resources(_with_integer_literals(body, maps=("limits",)), "limits")


@schemathesis.hook("map_body").apply_to(operation_id="put_user_limits")
def realistic_user_limits(ctx, body):
    return _known_resources(_with_integer_literals(body, maps=("limits",)), "limits")


@schemathesis.hook("map_body").apply_to(operation_id="put_defaults")
def realistic_defaults(ctx, body):
    return _with_integer_literals(body, maps=("limits",))


@schemathesis.hook("map_body").apply_to(operation_id="correct_usage")
def realistic_correction(ctx, body):
    return _known_resources(_with_integer_literals(body, maps=("in_use",)), "in_use")
