"""python-novaclient and Tempest's schemas against a real `quota serve` (SPEC:
"Nova-compatible quota API").

Run by .ci/novaclient.sh (named so as not to shadow the novaclient package) with the server's base URL and an admin token:
    python nova_quotas.py BASE_URL TOKEN
It drives novaclient.client.Client("2.1", session=...) with a keystoneauth1 token endpoint
(so requests carry X-Auth-Token) through quotas.get/update/delete/defaults and
quota_classes.get/update, and quotas.get/update/delete with user_id= (a user's quota set inside
the project, SPEC rule 8), and checks every answer; then it sends the same requests raw and
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


# A user inside the project (Keystone user ids are 32 hex digits).
USER = "fedcba9876543210fedcba9876543210"


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
    user = base + "?user_id=" + USER
    validate(quota_schemas.get_quota_set, sess.get(user, **endpoint), "GET a user's quota set")
    detail = base + "/detail?user_id=" + USER
    validate(quota_schemas.get_quota_set_details, sess.get(detail, **endpoint), "GET a user's detail")
    validate(quota_schemas.update_quota_set, sess.put(user, json=put, **endpoint), "PUT a user's quota set")
    validate(quota_schemas.delete_quota, sess.delete(user, **endpoint), "DELETE a user's quota set")
    klass = compute + "/os-quota-class-sets/default"
    validate(class_schemas.get_quota_class_set, sess.get(klass, **endpoint), "GET quota class")
    body = {"quota_class_set": {"instances": 10}}
    validate(class_schemas.update_quota_class_set, sess.put(klass, json=body, **endpoint), "PUT quota class")


def user_quotas(nova, sess, base, project):
    """quotas.get/update/delete with user_id=: the user's own limits over the project's."""
    quotas = nova.quotas.get(project, user_id=USER)
    check(
        quotas.id == project and quotas.instances == 10,
        f"quotas.get(user_id=) shows the project's limits for a user without its own: {quotas.instances}",
    )
    nova.quotas.update(project, instances=6)
    updated = nova.quotas.update(project, user_id=USER, instances=3)
    check(
        updated.instances == 3 and updated.cores == 20,
        "quotas.update(user_id=) answers the user's limits",
    )
    check(nova.quotas.get(project, user_id=USER).instances == 3, "quotas.get(user_id=) shows the user's own limit")
    check(nova.quotas.get(project).instances == 6, "the project's own limit is unchanged")

    # Two instances committed for the user (through /v1, which takes X-Auth-Token too).
    reservations = base + "/v1/projects/" + project + "/reservations"
    held = sess.post(reservations, json={"deltas": {"instances": 2}, "user": USER}, raise_exc=False)
    check(held.status_code == 201 and held.json().get("user") == USER, f"a reserve for the user: {held.status_code}")
    commit = reservations + "/" + held.json()["reservation_id"] + "/commit"
    check(sess.post(commit, raise_exc=False).status_code == 200, "its commit")
    detail = nova.quotas.get(project, user_id=USER, detail=True)
    check(
        detail.instances == {"in_use": 2, "limit": 3, "reserved": 0},
        f"quotas.get(user_id=, detail=True) is the user's usage: {detail.instances}",
    )
    project_detail = nova.quotas.get(project, detail=True)
    check(
        project_detail.instances == {"in_use": 2, "limit": 6, "reserved": 0},
        f"the project's detail counts the user's usage: {project_detail.instances}",
    )

    try:
        nova.quotas.update(project, user_id=USER, instances=1)
        check(False, "a user's limit below its usage without force is refused")
    except exceptions.BadRequest:
        check(True, "a user's limit below its usage without force is a BadRequest")
    check(nova.quotas.get(project, user_id=USER).instances == 3, "the refused update changed nothing")
    nova.quotas.update(project, user_id=USER, instances=1, force=True)
    check(nova.quotas.get(project, user_id=USER).instances == 1, "quotas.update(user_id=) with force")

    nova.quotas.delete(project, user_id=USER)
    check(
        nova.quotas.get(project, user_id=USER).instances == 6,
        "quotas.delete(user_id=): the user is back on the project's limits",
    )
    check(nova.quotas.get(project).instances == 6, "and the project keeps its own")
    nova.quotas.delete(project)


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

    user_quotas(nova, sess, base, project)
    tempest_schemas(sess, base + "/compute/v2.1", project)
    print("nova_quotas.py: all checks passed")


if __name__ == "__main__":
    main()
