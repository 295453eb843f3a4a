"""python-novaclient and Tempest's schemas against a real `quota serve` (SPEC:
"Nova-compatible quota API").

Run by .ci/novaclient.sh (named so as not to shadow the novaclient package) with the server's base URL and an admin token:
    python nova_quotas.py BASE_URL TOKEN
It drives novaclient.client.Client("2.1", session=...) with a keystoneauth1 token endpoint
(so requests carry X-Auth-Token) through quotas.get/update/delete/defaults and
quota_classes.get/update, and checks every answer; then it sends the same requests raw and
validates each answer against OpenStack Tempest's compute response schemas
(tempest.lib.api_schema.response.compute.v2_1.quotas and quota_classes). Exits non-zero on the
first failure.
"""

import sys

import jsonschema
from keystoneauth1 import session, token_endpoint
from novaclient import client
from novaclient import exceptions
from tempest.lib.api_schema.response.compute.v2_1 import quota_classes as class_schemas
from tempest.lib.api_schema.response.compute.v2_1 import quotas as quota_schemas

# Nova's own quota resources, as the defaults (SPEC: with exactly these, the answers match
# Tempest's compute response schemas).
NOVA_DEFAULTS = {
    "instances": 10,
    "cores": 20,
    "ram": 51200,
    "floating_ips": 10,
    "fixed_ips": -1,
    "metadata_items": 128,
    "key_pairs": 100,
    "security_groups": 10,
    "security_group_rules": 20,
    "server_groups": 10,
    "server_group_members": 10,
    "injected_files": 5,
    "injected_file_content_bytes": 10240,
    "injected_file_path_bytes": 255,
}


def check(condition, what):
    if not condition:
        raise SystemExit(f"nova_quotas.py: FAILED: {what}")
    print(f"nova_quotas.py: ok: {what}")


def validate(schema, response, what):
    """A raw answer against one of Tempest's response schemas."""
    check(response.status_code in schema["status_code"], f"{what}: status {response.status_code}")
    if "response_body" in schema:
        try:
            jsonschema.validate(response.json(), schema["response_body"])
        except jsonschema.ValidationError as error:
            check(False, f"{what}: Tempest's schema: {error.message}")
        check(True, f"{what} validates against Tempest's schema")


def tempest_schemas(sess, compute, project):
    """Every quota answer, raw, against Tempest's compute v2.1 schemas."""
    base = compute + "/os-quota-sets/" + project
    endpoint = {"raise_exc": False}
    put = {"quota_set": {"instances": 5}}
    validate(quota_schemas.get_quota_set, sess.get(base, **endpoint), "GET quota set")
    validate(quota_schemas.get_quota_set, sess.get(base + "/defaults", **endpoint), "GET defaults")
    validate(quota_schemas.get_quota_set_details, sess.get(base + "/detail", **endpoint), "GET detail")
    validate(quota_schemas.update_quota_set, sess.put(base, json=put, **endpoint), "PUT quota set")
    validate(quota_schemas.delete_quota, sess.delete(base, **endpoint), "DELETE quota set")
    klass = compute + "/os-quota-class-sets/default"
    validate(class_schemas.get_quota_class_set, sess.get(klass, **endpoint), "GET quota class")
    body = {"quota_class_set": {"instances": 10}}
    validate(class_schemas.update_quota_class_set, sess.put(klass, json=body, **endpoint), "PUT quota class")


def main():
    base, token = sys.argv[1], sys.argv[2]
    auth = token_endpoint.Token(base + "/compute/v2.1", token)
    sess = session.Session(auth=auth)
    nova = client.Client("2.1", session=sess)

    updated = nova.quota_classes.update("default", **NOVA_DEFAULTS)
    check(updated.instances == 10 and updated.cores == 20, "quota_classes.update sets the defaults")
    default = nova.quota_classes.get("default")
    check(default.id == "default" and default.ram == 51200, "quota_classes.get answers them")

    project = "0123456789abcdef0123456789abcdef"
    quotas = nova.quotas.get(project)
    check(quotas.id == project and quotas.instances == 10, "quotas.get shows the defaults")
    check(nova.quotas.defaults(project).cores == 20, "quotas.defaults")

    nova.quotas.update(project, instances=4, cores=8)
    quotas = nova.quotas.get(project)
    check(quotas.instances == 4 and quotas.cores == 8, "quotas.update sets a project's limits")

    detail = nova.quotas.get(project, detail=True)
    check(
        detail.instances == {"in_use": 0, "limit": 4, "reserved": 0},
        f"quotas.get(detail=True) has in_use, limit and reserved: {detail.instances}",
    )

    try:
        nova.quotas.update(project, instances=-5)
        check(False, "a limit below -1 is refused")
    except exceptions.BadRequest:
        check(True, "a limit below -1 is a BadRequest")

    nova.quotas.update(project, instances=2, force=True)
    check(nova.quotas.get(project).instances == 2, "quotas.update with force")

    nova.quotas.delete(project)
    check(nova.quotas.get(project).instances == 10, "quotas.delete: back to the defaults")

    tempest_schemas(sess, base + "/compute/v2.1", project)
    print("nova_quotas.py: all checks passed")


if __name__ == "__main__":
    main()
