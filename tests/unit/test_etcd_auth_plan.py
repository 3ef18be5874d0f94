"""etcd authentication as spec.auth declares it, without etcd: prefix ranges, the permissions a
user's declaration asks for, the ordered operations that make etcd's users, roles and
authentication what the spec says (qk_etcd_auth.plan), and the lines Events say of them."""

from __future__ import annotations

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_auth import (
    ACCESS,
    AuthState,
    describe,
    plan,
    prefix_end,
    wanted_permissions,
)

READ, WRITE, READWRITE = ACCESS["read"], ACCESS["write"], ACCESS["readwrite"]
APP_PREFIX = (b"/app/", b"/app0")
APP_PERMISSIONS = {APP_PREFIX: READWRITE}


def ops_of(ops):
    """``[(op, name)]``: the order of the operations, without their details."""
    return [(op["op"], op["name"]) for op in ops]


def applied_state(enabled=True, **users):
    """What etcd has once ``users`` (name -> permissions) were applied: root with the root
    role, each user with its own role."""
    return AuthState(
        enabled=enabled,
        users={"root": {"root"}, **{name: {name} for name in users}},
        roles={name: dict(perms) for name, perms in users.items()},
    )


# -- prefix_end ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix,end",
    [
        (b"a", b"b"),
        (b"/app/", b"/app0"),
        (b"a\xff", b"b"),
        (b"a\xffb", b"a\xffc"),
        (b"ab\xff\xff", b"ac"),
        (b"\xff", b"\0"),
        (b"\xff\xff\xff", b"\0"),
        (b"", b"\0"),
    ],
)
def test_prefix_end_is_etcds_prefix_range_end(prefix, end):
    assert prefix_end(prefix) == end


def test_prefix_end_covers_exactly_the_keys_with_the_prefix():
    end = prefix_end(b"/app/")
    for key in (b"/app/", b"/app/x", b"/app/\xff\xff"):
        assert b"/app/" <= key < end
    for key in (b"/app", b"/app0", b"/apq", b"/b"):
        assert not b"/app/" <= key < end


# -- wanted_permissions ----------------------------------------------------------------------


def test_a_key_is_a_single_key_and_a_key_prefix_a_prefix_range():
    assert wanted_permissions(
        [
            {"key": "/config", "access": "read"},
            {"keyPrefix": "/app/", "access": "write"},
        ]
    ) == {(b"/config", b""): READ, APP_PREFIX: WRITE}


def test_no_permissions_is_no_range():
    assert wanted_permissions(None) == {}
    assert wanted_permissions([]) == {}


def test_access_defaults_to_readwrite_and_keys_are_utf8():
    assert wanted_permissions([{"keyPrefix": "/é/"}]) == {
        ("/é/".encode(), prefix_end("/é/".encode())): READWRITE
    }


def test_a_range_declared_twice_keeps_its_widest_access():
    assert wanted_permissions(
        [{"keyPrefix": "/app/", "access": "read"}, {"keyPrefix": "/app/", "access": "write"}]
    ) == {APP_PREFIX: READWRITE}
    assert wanted_permissions(
        [{"key": "/k", "access": "read"}, {"key": "/k", "access": "read"}]
    ) == {(b"/k", b""): READ}
    assert wanted_permissions(
        [{"key": "/k", "access": "readwrite"}, {"key": "/k", "access": "read"}]
    ) == {(b"/k", b""): READWRITE}


def test_a_key_and_the_prefix_of_the_same_text_are_two_ranges():
    assert wanted_permissions(
        [{"key": "/app/", "access": "read"}, {"keyPrefix": "/app/", "access": "write"}]
    ) == {(b"/app/", b""): READ, APP_PREFIX: WRITE}


# -- plan --------------------------------------------------------------------------------------


def test_a_fresh_cluster_gets_root_then_the_users_then_authentication():
    ops = plan(AuthState(), enabled=True, users={"app": APP_PERMISSIONS})
    assert ops_of(ops) == [
        ("user_add", "root"),
        ("user_grant_role", "root"),
        ("role_add", "app"),
        ("role_grant_permission", "app"),
        ("user_add", "app"),
        ("user_grant_role", "app"),
        ("auth_enable", "root"),
    ]
    assert ops[1]["role"] == "root" and ops[5]["role"] == "app"
    assert ops[3] == {
        "op": "role_grant_permission",
        "name": "app",
        "key": b"/app/",
        "range_end": b"/app0",
        "access": READWRITE,
    }


def test_the_state_the_plan_makes_needs_no_operation():
    state = applied_state(app=APP_PERMISSIONS)
    assert plan(state, enabled=True, users={"app": APP_PERMISSIONS}, managed=["app"]) == []
    assert plan(applied_state(), enabled=True, users={}) == []


def test_users_are_planned_in_name_order_each_with_its_permissions_in_key_order():
    perms = wanted_permissions(
        [{"keyPrefix": "/z/", "access": "read"}, {"key": "/a", "access": "write"}]
    )
    ops = plan(applied_state(), enabled=True, users={"b": perms, "a": {}})
    assert ops_of(ops) == [
        ("role_add", "a"),
        ("user_add", "a"),
        ("user_grant_role", "a"),
        ("role_add", "b"),
        ("role_grant_permission", "b"),
        ("role_grant_permission", "b"),
        ("user_add", "b"),
        ("user_grant_role", "b"),
    ]
    assert [op["key"] for op in ops if op["op"] == "role_grant_permission"] == [b"/a", b"/z/"]


def test_a_changed_permission_is_granted_and_the_one_no_longer_declared_revoked():
    state = applied_state(app={APP_PREFIX: READWRITE, (b"/old", b""): READ})
    wanted = {APP_PREFIX: READ, (b"/new", b""): WRITE}
    ops = plan(state, enabled=True, users={"app": wanted}, managed=["app"])
    assert ops == [
        {
            "op": "role_grant_permission",
            "name": "app",
            "key": b"/app/",
            "range_end": b"/app0",
            "access": READ,
        },
        {
            "op": "role_grant_permission",
            "name": "app",
            "key": b"/new",
            "range_end": b"",
            "access": WRITE,
        },
        {"op": "role_revoke_permission", "name": "app", "key": b"/old", "range_end": b""},
    ]


def test_a_managed_user_no_longer_declared_is_deleted_with_its_role():
    state = applied_state(app=APP_PERMISSIONS, other={})
    ops = plan(state, enabled=True, users={"other": {}}, managed=["app", "other"])
    assert ops_of(ops) == [("user_delete", "app"), ("role_delete", "app")]


def test_what_is_left_of_a_removed_user_is_removed_and_nothing_else():
    only_role = AuthState(enabled=True, users={"root": {"root"}}, roles={"app": {}})
    assert ops_of(plan(only_role, enabled=True, users={}, managed=["app"])) == [
        ("role_delete", "app")
    ]
    assert plan(applied_state(), enabled=True, users={}, managed=["app"]) == []


def test_removals_come_after_the_declared_users_and_before_turning_authentication_off():
    state = applied_state(old={})
    ops = plan(state, enabled=False, users={"new": {}}, managed=["old"])
    assert ops_of(ops) == [
        ("role_add", "new"),
        ("user_add", "new"),
        ("user_grant_role", "new"),
        ("user_delete", "old"),
        ("role_delete", "old"),
        ("auth_disable", "root"),
    ]


def test_users_made_by_hand_are_never_deleted():
    state = applied_state(app=APP_PERMISSIONS, ops={(b"", b"\0"): READWRITE})
    assert plan(state, enabled=True, users={"app": APP_PERMISSIONS}, managed=["app"]) == []
    assert ops_of(plan(state, enabled=True, users={}, managed=["app"])) == [
        ("user_delete", "app"),
        ("role_delete", "app"),
    ]


def test_root_is_never_deleted_even_when_listed_as_managed():
    assert plan(applied_state(), enabled=True, users={}, managed=["root"]) == []


def test_a_declared_user_made_by_hand_is_taken_over_with_its_secrets_password():
    state = AuthState(enabled=True, users={"root": {"root"}, "app": set()}, roles={})
    ops = plan(state, enabled=True, users={"app": {}})
    assert ops_of(ops) == [
        ("role_add", "app"),
        ("user_change_password", "app"),
        ("user_grant_role", "app"),
    ]
    # Already holding its role: only the password.
    state = applied_state(app={})
    assert ops_of(plan(state, enabled=True, users={"app": {}})) == [("user_change_password", "app")]


def test_a_changed_secret_sets_the_password_again():
    state = applied_state(app=APP_PERMISSIONS)
    ops = plan(
        state,
        enabled=True,
        users={"app": APP_PERMISSIONS},
        managed=["app"],
        passwords={"app", "root"},
    )
    # Root's only while authentication is off: it is the operator's login.
    assert ops_of(ops) == [("user_change_password", "app")]
    state.enabled = False
    ops = plan(
        state, enabled=True, users={"app": APP_PERMISSIONS}, managed=["app"], passwords={"root"}
    )
    assert ops_of(ops) == [("user_change_password", "root"), ("auth_enable", "root")]


def test_a_password_for_a_user_that_does_not_exist_yet_is_given_when_it_is_added():
    ops = plan(AuthState(), enabled=True, users={"app": {}}, passwords={"root", "app"})
    assert ("user_change_password", "root") not in ops_of(ops)
    assert ("user_change_password", "app") not in ops_of(ops)
    assert ("user_add", "root") in ops_of(ops) and ("user_add", "app") in ops_of(ops)


def test_root_without_its_role_gets_it():
    state = AuthState(enabled=False, users={"root": set()})
    assert ops_of(plan(state, enabled=True, users={})) == [
        ("user_grant_role", "root"),
        ("auth_enable", "root"),
    ]


def test_turning_authentication_off_comes_after_every_other_change():
    state = applied_state(app=APP_PERMISSIONS)
    assert plan(state, enabled=False, users={"app": APP_PERMISSIONS}, managed=["app"]) == [
        {"op": "auth_disable", "name": "root"}
    ]
    ops = plan(state, enabled=False, users={"app": {}}, managed=["app"], passwords={"app"})
    assert ops_of(ops) == [
        ("role_revoke_permission", "app"),
        ("user_change_password", "app"),
        ("auth_disable", "root"),
    ]


def test_users_declared_with_authentication_off_need_no_root():
    ops = plan(AuthState(), enabled=False, users={"app": {}})
    assert ops_of(ops) == [("role_add", "app"), ("user_add", "app"), ("user_grant_role", "app")]


def test_authentication_already_off_is_not_turned_off_again():
    assert plan(AuthState(), enabled=False, users={}) == []
    assert plan(applied_state(enabled=False), enabled=False, users={}) == []


# -- describe ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op,line",
    [
        ({"op": "user_add", "name": "app"}, "user app created"),
        (
            {"op": "user_change_password", "name": "root"},
            "user root: password set from its Secret",
        ),
        ({"op": "user_grant_role", "name": "app", "role": "app"}, "user app: role app granted"),
        ({"op": "user_delete", "name": "app"}, "user app removed"),
        ({"op": "role_add", "name": "app"}, "role app created"),
        ({"op": "role_delete", "name": "app"}, "role app removed"),
        ({"op": "auth_enable", "name": "root"}, "authentication enabled"),
        ({"op": "auth_disable", "name": "root"}, "authentication disabled"),
        (
            {
                "op": "role_grant_permission",
                "name": "app",
                "key": b"/app/",
                "range_end": b"/app0",
                "access": READWRITE,
            },
            "role app: readwrite on keys with prefix /app/",
        ),
        (
            {
                "op": "role_grant_permission",
                "name": "app",
                "key": b"/config",
                "range_end": b"",
                "access": READ,
            },
            "role app: read on key /config",
        ),
        (
            {
                "op": "role_grant_permission",
                "name": "app",
                "key": b"a",
                "range_end": b"c",
                "access": WRITE,
            },
            "role app: write on keys [a, c)",
        ),
        (
            {"op": "role_revoke_permission", "name": "app", "key": b"/app/", "range_end": b"/app0"},
            "role app: access to keys with prefix /app/ revoked",
        ),
        (
            {"op": "role_revoke_permission", "name": "app", "key": b"/old", "range_end": b""},
            "role app: access to key /old revoked",
        ),
    ],
)
def test_describe_says_each_operation_in_one_line(op, line):
    assert describe(op) == line


def test_every_planned_operation_can_be_described():
    state = AuthState(enabled=True, users={"root": {"root"}, "old": {"old"}}, roles={"old": {}})
    ops = plan(AuthState(), enabled=True, users={"app": APP_PERMISSIONS})
    ops += plan(state, enabled=False, users={}, managed=["old"])
    lines = [describe(op) for op in ops]
    assert lines == [
        "user root created",
        "user root: role root granted",
        "role app created",
        "role app: readwrite on keys with prefix /app/",
        "user app created",
        "user app: role app granted",
        "authentication enabled",
        "user old removed",
        "role old removed",
        "authentication disabled",
    ]
