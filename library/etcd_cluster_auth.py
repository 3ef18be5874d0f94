#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_cluster_auth
short_description: Make an EtcdCluster's etcd users, roles and authentication what spec.auth says
description:
  - >-
    Makes each user's credential Secret C(<name>-user-<user>) (keys C(username) and
    C(password)), root's included, with a random password unless the Secret exists: a Secret
    the user made first is used as it is. Then writes root's password to
    I(credentials_dir)/<namespace>/<name>/root.password (mode 0600) and returns the path in
    C(connection), for the other etcd modules.
  - >-
    With I(apply), connects to etcd as root (through the client certificate of the connection
    options when I(certificate_auth), else with root's password) and makes it what I(auth)
    says: root with the root role, one role per declared user holding exactly its permissions,
    the user with that role and its Secret's password, users removed from I(auth) deleted with
    their role (only those this module applied before, listed in I(applied)), and
    authentication turned on or off. Before authentication is on, etcd is used without a user.
    A removed user's Secret is kept (the operator deletes no Secret; it goes with the
    EtcdCluster), its password no longer works.
  - >-
    A password changes when its Secret changed since it was applied (its resourceVersion in
    I(applied)), so editing a user's Secret rotates its password. Root's is set only while
    authentication is off: it is how the operator logs in.
  - Check mode reports what would change and changes nothing.
options:
  auth:
    description:
      - The EtcdCluster's C(spec.auth); null or absent means authentication off.
      - When I(read_cluster), taken from the EtcdCluster instead.
    type: dict
  applied:
    description:
      - The EtcdCluster's C(status.auth), what this module returned last time (C(users) with
        each C(secretVersion), C(rootSecretVersion)).
      - When I(read_cluster), taken from the EtcdCluster instead.
    type: dict
  read_cluster:
    description: Read I(auth) and I(applied) from the EtcdCluster (backups and restores).
    type: bool
    default: false
  apply:
    description:
      - Make etcd's users, roles and authentication what I(auth) says. False only makes
        root's credentials available (before the cluster is observed, or for a backup).
    type: bool
    default: true
  create_secrets:
    description: Create missing credential Secrets (false for backups, which only read).
    type: bool
    default: true
  certificate_auth:
    description:
      - The client certificate of the connection options authenticates as root (its CN is
        root and the members run with C(--client-cert-auth)); no password is used.
    type: bool
    default: false
  endpoints:
    description: etcd client URLs, needed with I(apply).
    type: list
    elements: str
    default: []
  credentials_dir:
    description: Directory under which root's password file is written.
    type: path
extends_documentation_fragment:
  - quorumkeeper.etcd.etcd_cluster
  - quorumkeeper.etcd.etcd_cluster.owned
  - quorumkeeper.etcd.etcd_connection
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.kube_client.api_version
requirements: [etcd3aio]
"""

EXAMPLES = r"""
- name: Turn authentication on with one user limited to its prefix
  etcd_cluster_auth:
    name: my-cluster
    namespace: default
    owner_uid: "{{ cluster.metadata.uid }}"
    endpoints: ["http://my-cluster-client.default.svc:2379"]
    auth:
      users:
        - name: app
          permissions:
            - keyPrefix: /app/
              access: readwrite
    applied: "{{ cluster.status.auth | default({}) }}"
  register: cluster_auth

- name: Read the members as root
  etcd_cluster_info:
    endpoints: ["http://my-cluster-client.default.svc:2379"]
    username: "{{ cluster_auth.connection.username }}"
    password_file: "{{ cluster_auth.connection.password_file }}"
"""

RETURN = r"""
connection:
  description: C(username) and C(password_file) for the etcd modules; empty when
    authentication is off or I(certificate_auth).
  type: dict
  returned: always
password_secret:
  description: The Secret holding the password of I(connection)'s user, for helper pods that
    mount it; empty when I(connection) is.
  type: str
  returned: always
actions:
  description: What was changed in etcd, one line each, in order.
  type: list
  elements: str
  returned: always
secrets_created:
  description: Credential Secrets created or given a password.
  type: list
  elements: str
  returned: always
status:
  description: The EtcdCluster's C(status.auth) - C(enabled), C(users) (C(name), C(secretName),
    C(secretVersion)), C(rootSecretName), C(rootSecretVersion). Only with I(apply).
  type: dict
  returned: always
"""

from dataclasses import replace

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_auth import (
    CredentialSecrets,
    auth_settings,
    password_file_path,
    root_credentials,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    CONNECTION_REQUIRED_TOGETHER,
    connection_argument_spec,
    etcd_client,
    profile_from_params,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_VERSION,
    CLUSTER_KIND,
    cluster_owner_reference,
    user_secret_name,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_auth import (
    ROOT,
    apply,
    plan,
    read_state,
    wanted_permissions,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    EtcdOperationError,
    EtcdUnreachable,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KUBE_CLIENT_ARGUMENT_SPEC,
    KubeConfigError,
    KubeError,
    api_client,
)

ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "owner_uid": {"type": "str"},
    "auth": {"type": "dict"},
    "applied": {"type": "dict"},
    "read_cluster": {"type": "bool", "default": False},
    "apply": {"type": "bool", "default": True},
    "create_secrets": {"type": "bool", "default": True},
    "certificate_auth": {"type": "bool", "default": False},
    "endpoints": {"type": "list", "elements": "str", "default": []},
    "credentials_dir": {"type": "path"},
    "api_version": {"type": "str", "default": API_VERSION},
    **connection_argument_spec(endpoints_required=False),
    **KUBE_CLIENT_ARGUMENT_SPEC,
}


def run(module, kube):
    p = module.params
    auth_spec, applied = p["auth"], p["applied"] or {}
    if p["read_cluster"]:
        cluster = kube.get(p["api_version"], CLUSTER_KIND, p["name"], p["namespace"]) or {}
        auth_spec = (cluster.get("spec") or {}).get("auth")
        applied = (cluster.get("status") or {}).get("auth") or {}
    settings = auth_settings(auth_spec)
    result = {
        "changed": False,
        "connection": {},
        "password_secret": "",
        "actions": [],
        "secrets_created": [],
    }
    result["status"] = applied
    if not settings["declared"] and not applied.get("enabled"):
        return result  # no authentication, and none to turn off
    owner = None
    if p["owner_uid"]:
        owner = cluster_owner_reference(p["name"], p["owner_uid"], p["api_version"])
    store = CredentialSecrets(kube, p["namespace"], p["name"], owner, check=module.check_mode)
    path = password_file_path(p["credentials_dir"], p["namespace"], p["name"])
    create = p["create_secrets"] and settings["declared"]
    root = root_credentials(store, path, create=create)
    if root and not p["certificate_auth"]:
        result["connection"] = {"username": ROOT, "password_file": root["password_file"]}
        result["password_secret"] = user_secret_name(p["name"], ROOT)
    if not p["apply"]:
        result["secrets_created"] = store.created
        result["changed"] = bool(store.created)
        return result
    if not root:
        raise ValueError(
            f"Secret {user_secret_name(p['name'], ROOT)} with root's password does not exist: "
            "recreate it with the key password holding root's etcd password"
        )
    passwords = {ROOT: root["password"]}
    versions = {ROOT: root["secretVersion"]}
    for user in settings["users"]:
        passwords[user], versions[user] = store.ensure(user, create=p["create_secrets"])
    applied_versions = {u["name"]: u.get("secretVersion") for u in applied.get("users") or []}
    applied_versions[ROOT] = applied.get("rootSecretVersion")
    managed = sorted(applied_versions.keys() - {ROOT})
    changed_passwords = {u for u, v in versions.items() if applied_versions.get(u) != v}
    profile = profile_from_params(p, endpoints=p["endpoints"])
    if not p["certificate_auth"]:
        profile = replace(profile, username=ROOT, password=root["password"], password_file=None)
    with etcd_client(profile) as client:
        state = read_state(client, set(settings["users"]) | set(managed))
        ops = plan(
            state,
            enabled=settings["enabled"],
            users={u: wanted_permissions(perms) for u, perms in settings["users"].items()},
            managed=managed,
            passwords=changed_passwords,
        )
        if not module.check_mode:
            result["actions"] = apply(client, ops, passwords)
        else:
            result["actions"] = [op["op"] for op in ops]
    result["secrets_created"] = store.created
    result["changed"] = bool(ops or store.created)
    result["status"] = {
        "enabled": settings["enabled"],
        "rootSecretName": user_secret_name(p["name"], ROOT),
        "rootSecretVersion": versions[ROOT],
        "users": [
            {
                "name": user,
                "secretName": user_secret_name(p["name"], user),
                "secretVersion": versions[user],
            }
            for user in sorted(settings["users"])
        ],
    }
    return result


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_together=CONNECTION_REQUIRED_TOGETHER,
        supports_check_mode=True,
    )
    p = module.params
    where = f"EtcdCluster {p['namespace']}/{p['name']}"
    try:
        result = run(module, api_client(p, fresh=True))
    except (KubeConfigError, KubeError) as exc:
        module.fail_json(msg=f"credential Secrets of {where}: {exc}")
    except EtcdUnreachable as exc:
        module.fail_json(msg=f"cannot reach etcd of {where} to apply spec.auth: {exc}")
    except EtcdOperationError as exc:
        hint = ""
        if "authentication failed" in str(exc):
            hint = (
                f" (the password in Secret {user_secret_name(p['name'], ROOT)} is not root's:"
                " root's password is the operator's login and is not changed while"
                " authentication is on, so put back the one etcd has; a cluster restored from"
                " another cluster's snapshot keeps that cluster's users and root password)"
            )
        module.fail_json(msg=f"applying spec.auth to {where}: {exc}{hint}")
    except ValueError as exc:
        module.fail_json(msg=f"spec.auth of {where}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
