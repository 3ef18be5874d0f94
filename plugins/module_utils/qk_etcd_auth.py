# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""etcd authentication as an EtcdCluster's ``spec.auth`` declares it: what etcd has
(``AuthState``, read by ``read_state``), the changes that make it what the spec says (``plan``,
pure: an ordered list of operations), and ``apply``, which runs them through an ``EtcdClient``.

Each declared user gets a role of the same name holding exactly its permissions. The operator
only ever changes, and removes, the users it manages (``managed``: the names it applied before,
kept in the EtcdCluster's status) and ``root``; users made by hand are left alone. The order is
the one etcd needs: root exists with the root role before authentication is turned on, and
permissions exist before the user that holds them can log in.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    EtcdOperationError,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_session import (
    AUTH_NOT_ENABLED,
)

ROOT = "root"
# etcd's Permission.Type, by the names spec.auth uses.
ACCESS = {"read": 0, "write": 1, "readwrite": 2}
ACCESS_NAMES = {v: k for k, v in ACCESS.items()}
# etcd's answers for a user or role that does not exist.
USER_NOT_FOUND = "user name not found"
ROLE_NOT_FOUND = "role name not found"


def prefix_end(prefix: bytes) -> bytes:
    """The range end that makes ``prefix`` a prefix range (etcd's ``GetPrefixRangeEnd``): the
    prefix with its last byte below 0xff incremented and what follows dropped; ``\\0`` (every
    key from the prefix on) when every byte is 0xff."""
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"


def wanted_permissions(permissions) -> dict:
    """``{(key, range_end): access}`` (bytes, etcd's Permission.Type) for a user's declared
    ``permissions`` (each ``key`` or ``keyPrefix``, and ``access``). A range declared twice
    keeps its widest access."""
    wanted: dict = {}
    for permission in permissions or ():
        if permission.get("keyPrefix"):
            key = permission["keyPrefix"].encode()
            span = (key, prefix_end(key))
        else:
            span = (permission["key"].encode(), b"")
        access = ACCESS[permission.get("access", "readwrite")]
        previous = wanted.get(span)
        wanted[span] = access if previous is None or previous == access else ACCESS["readwrite"]
    return wanted


@dataclass
class AuthState:
    """What etcd has: whether authentication is on, each user's roles and each role's
    permissions (``{(key, range_end): access}``) for the users and roles looked at."""

    enabled: bool = False
    users: dict = field(default_factory=dict)  # name -> set of role names
    roles: dict = field(default_factory=dict)  # name -> {(key, range_end): access}


def plan(
    state: AuthState,
    *,
    enabled: bool,
    users: dict,
    managed=(),
    passwords=frozenset(),
) -> list[dict]:
    """The operations that make etcd what ``spec.auth`` says, in the order etcd accepts them.

    ``users``: ``{name: {(key, range_end): access}}`` declared; ``managed``: the users this
    operator applied before (the only ones it may remove); ``passwords``: users (root included)
    whose password must be set from their Secret although they exist (a changed Secret, a user
    taken over); root's only while authentication is off. Each operation is ``{op, name, ...}``;
    passwords are added by ``apply``."""
    ops: list[dict] = []
    if enabled or ROOT in state.users:
        if ROOT not in state.users:
            ops.append({"op": "user_add", "name": ROOT})
        elif ROOT in passwords and not state.enabled:
            # Only while authentication is off: changing root's password ends the session of
            # whoever changes it as root, and root's password is how the operator logs in.
            ops.append({"op": "user_change_password", "name": ROOT})
        if ROOT not in state.users.get(ROOT, ()):
            ops.append({"op": "user_grant_role", "name": ROOT, "role": ROOT})
    for name in sorted(users):
        wanted = users[name]
        have = state.roles.get(name)
        if have is None:
            ops.append({"op": "role_add", "name": name})
            have = {}
        for (key, end), access in sorted(wanted.items()):
            if have.get((key, end)) != access:
                ops.append(
                    {
                        "op": "role_grant_permission",
                        "name": name,
                        "key": key,
                        "range_end": end,
                        "access": access,
                    }
                )
        for key, end in sorted(set(have) - set(wanted)):
            ops.append({"op": "role_revoke_permission", "name": name, "key": key, "range_end": end})
        if name not in state.users:
            ops.append({"op": "user_add", "name": name})
        elif name in passwords or name not in managed:
            # A user made by hand and now declared: from now on its password is its Secret's.
            ops.append({"op": "user_change_password", "name": name})
        if name not in state.users.get(name, ()):
            ops.append({"op": "user_grant_role", "name": name, "role": name})
    for name in sorted(set(managed) - set(users) - {ROOT}):
        if name in state.users:
            ops.append({"op": "user_delete", "name": name})
        if name in state.roles:
            ops.append({"op": "role_delete", "name": name})
    if enabled != state.enabled:
        ops.append({"op": "auth_enable" if enabled else "auth_disable", "name": ROOT})
    return ops


def describe(op: dict) -> str:
    """One line for an Event."""
    name, kind = op["name"], op["op"]
    if kind == "role_grant_permission":
        span = _span(op["key"], op["range_end"])
        return f"role {name}: {ACCESS_NAMES[op['access']]} on {span}"
    if kind == "role_revoke_permission":
        return f"role {name}: access to {_span(op['key'], op['range_end'])} revoked"
    return {
        "user_add": f"user {name} created",
        "user_change_password": f"user {name}: password set from its Secret",
        "user_grant_role": f"user {name}: role {op.get('role')} granted",
        "user_delete": f"user {name} removed",
        "role_add": f"role {name} created",
        "role_delete": f"role {name} removed",
        "auth_enable": "authentication enabled",
        "auth_disable": "authentication disabled",
    }[kind]


def _span(key: bytes, end: bytes) -> str:
    text = key.decode(errors="replace")
    if not end:
        return f"key {text}"
    if end == prefix_end(key):
        return f"keys with prefix {text}"
    return f"keys [{text}, {end.decode(errors='replace')})"


def auth_enabled(client) -> bool:
    """Whether etcd's authentication is on. etcd 3.4 has no AuthStatus call: there, a login
    with a password nobody has tells (refused as wrong only when authentication is on)."""
    try:
        return bool(client.auth_call("auth_status").enabled)
    except EtcdOperationError as exc:
        if "unknown method" not in str(exc).lower():
            raise
    try:
        client.auth_call("authenticate", ROOT, secrets.token_urlsafe(16))
    except EtcdOperationError as exc:
        if AUTH_NOT_ENABLED in str(exc):
            return False
        if "authentication failed" in str(exc):
            return True
        raise
    return True


def read_state(client, names) -> AuthState:
    """What etcd has for root and ``names`` (declared and managed users, and their roles)."""
    state = AuthState(enabled=auth_enabled(client))
    existing_users = set(client.auth_call("user_list").users)
    existing_roles = set(client.auth_call("role_list").roles)
    for name in {ROOT, *names}:
        if name in existing_users:
            state.users[name] = set(client.auth_call("user_get", name).roles)
        if name in existing_roles and name != ROOT:
            state.roles[name] = {
                (bytes(p.key), bytes(p.range_end)): int(p.permType)
                for p in client.auth_call("role_get", name).perm
            }
    return state


def apply(client, ops, passwords: dict) -> list[str]:
    """Run ``ops`` in order; ``passwords``: each user's password. Returns what was done, one
    line per operation. A failure raises the client's error after the operations before it
    took effect: the next run plans from what etcd then has."""
    done = []
    for op in ops:
        kind, name = op["op"], op["name"]
        if kind == "user_add":
            client.auth_call("user_add", name, passwords[name])
        elif kind == "user_change_password":
            client.auth_call("user_change_password", name, passwords[name])
        elif kind == "user_grant_role":
            client.auth_call("user_grant_role", name, op["role"])
        elif kind == "role_grant_permission":
            client.auth_call(
                "role_grant_permission", name, op["key"], op["range_end"], perm_type=op["access"]
            )
        elif kind == "role_revoke_permission":
            client.auth_call("role_revoke_permission", name, op["key"], op["range_end"])
        elif kind in ("user_delete", "role_add", "role_delete"):
            client.auth_call(kind, name)
        elif kind in ("auth_enable", "auth_disable"):
            client.auth_call(kind)
        done.append(describe(op))
    return done
