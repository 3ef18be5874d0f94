"""spec.auth against real etcd: ``read_state``, ``plan`` and ``apply`` (qk_etcd_auth) through
``etcd_client`` turn authentication on with root and a user limited to its prefix, change it,
remove the user and turn authentication off again; the user, root (its password in a file) and
a client without credentials then get what etcd allows them. A profile with credentials also
reaches a member whose authentication is not on yet (the operator's profile from its first
run on)."""

from __future__ import annotations

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    ConnectionProfile,
    etcd_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_auth import (
    apply,
    plan,
    read_state,
    wanted_permissions,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    EtcdOperationError,
)

import etcdharness

ROOT_PASSWORD = "s3cret-root"
APP_PASSWORD = "s3cret-app"
APP = {"app": [{"keyPrefix": "/app/", "access": "readwrite"}]}
DENIED = "permission denied"
# Every version there is: etcd 3.4 has no AuthStatus, and read_state finds out another way.
STATE_VERSIONS = pytest.mark.parametrize(
    "etcd_version",
    [pytest.param(v, id=f"etcd-{v}") for v in etcdharness.versions_to_test()],
)


def profile(url, username=None, password=None, **options):
    return ConnectionProfile([url], timeout=3, username=username, password=password, **options)


def converge(url, users, *, enabled=True, managed=(), passwords=(), root_password=ROOT_PASSWORD):
    """What etcd_cluster_auth does once it has the passwords: as root (no user while
    authentication is off), read what etcd has, plan, apply. ``users``: name -> declared
    permissions. Returns the lines ``apply`` reports."""
    secrets = {"root": root_password, "app": APP_PASSWORD}
    with etcd_client(profile(url, "root", root_password)) as client:
        state = read_state(client, set(users) | set(managed))
        ops = plan(
            state,
            enabled=enabled,
            users={name: wanted_permissions(perms) for name, perms in users.items()},
            managed=managed,
            passwords=frozenset(passwords),
        )
        return apply(client, ops, secrets)


def planned(url, users, *, enabled=True, managed=()):
    """The operations a run would plan now."""
    with etcd_client(profile(url, "root", ROOT_PASSWORD)) as client:
        state = read_state(client, set(users) | set(managed))
        users = {name: wanted_permissions(perms) for name, perms in users.items()}
        return plan(state, enabled=enabled, users=users, managed=managed)


@pytest.fixture
def member(etcd_factory):
    """One plain member, authentication off."""
    (url,) = etcd_factory(1).endpoints()
    return url


@pytest.fixture
def secured(member):
    """The member with authentication on: root, and app limited to /app/."""
    converge(member, APP)
    return member


@STATE_VERSIONS
def test_a_fresh_member_gets_root_and_a_user_limited_to_its_prefix(member):
    assert converge(member, APP) == [
        "user root created",
        "user root: role root granted",
        "role app created",
        "role app: readwrite on keys with prefix /app/",
        "user app created",
        "user app: role app granted",
        "authentication enabled",
    ]
    with etcd_client(profile(member, "root", ROOT_PASSWORD)) as client:
        state = read_state(client, {"app"})
    assert state.enabled
    assert state.users == {"root": {"root"}, "app": {"app"}}
    assert state.roles == {"app": {(b"/app/", b"/app0"): 2}}
    assert planned(member, APP, managed=["app"]) == [], "applied: nothing more to do"
    assert converge(member, APP, managed=["app"]) == []


@STATE_VERSIONS
def test_the_user_uses_its_prefix_only_and_a_client_without_credentials_nothing(secured):
    with etcd_client(profile(secured, "app", APP_PASSWORD)) as app:
        app.put("/app/config", "mine")
        assert app.get("/app/config") == b"mine"
        with pytest.raises(EtcdOperationError, match=DENIED):
            app.put("/other/config", "not mine")
        with pytest.raises(EtcdOperationError, match=DENIED):
            app.get("/other/config")
        with pytest.raises(EtcdOperationError, match=DENIED):
            app.put("/app", "the prefix without its slash is outside it")
    with etcd_client(profile(secured)) as anonymous:
        with pytest.raises(EtcdOperationError, match="user name is empty"):
            anonymous.get("/app/config")
        with pytest.raises(EtcdOperationError, match="user name is empty"):
            anonymous.put("/other/config", "as nobody")


@STATE_VERSIONS
def test_root_connects_with_its_password_in_a_file(secured, tmp_path):
    password_file = tmp_path / "root.password"
    password_file.write_text(ROOT_PASSWORD + "\n")  # a trailing newline is not the password's
    password_file.chmod(0o600)
    with etcd_client(profile(secured, "root", password_file=str(password_file))) as root:
        root.put("/anywhere", "root may")
        assert root.get("/anywhere") == b"root may"
        members, _, _ = root.member_list()
        assert [m["client_urls"] for m in members] == [[secured]]
    password_file.write_text("not root's")
    with (
        pytest.raises(EtcdOperationError, match="authenticating as root .* failed"),
        etcd_client(profile(secured, "root", password_file=str(password_file))),
    ):
        pass


def test_credentials_reach_a_member_whose_authentication_is_not_on(member, tmp_path):
    """The operator's profile carries root's credentials as soon as spec.auth exists, before
    authentication is turned on (and after it is turned off): etcd is used without a user."""
    password_file = tmp_path / "root.password"
    password_file.write_text(ROOT_PASSWORD)
    for credentials in (
        {"username": "root", "password": ROOT_PASSWORD},
        {"username": "nobody-yet", "password": "anything"},
        {"username": "root", "password_file": str(password_file)},
    ):
        with etcd_client(profile(member, **credentials)) as client:
            client.put("/plain", credentials["username"])
            assert client.get("/plain") == credentials["username"].encode()
            members, _, _ = client.member_list()
            assert len(members) == 1


@STATE_VERSIONS
def test_a_changed_declaration_changes_the_role_and_the_password(secured):
    read_only = {
        "app": [{"keyPrefix": "/app/", "access": "read"}, {"key": "/flag", "access": "read"}]
    }
    actions = converge(
        secured, read_only, managed=["app"], passwords=["app"], root_password=ROOT_PASSWORD
    )
    assert actions == [
        "role app: read on keys with prefix /app/",
        "role app: read on key /flag",
        "user app: password set from its Secret",
    ]
    assert planned(secured, read_only, managed=["app"]) == []
    with etcd_client(profile(secured, "root", ROOT_PASSWORD)) as root:
        root.put("/app/config", "from root")
    with etcd_client(profile(secured, "app", APP_PASSWORD)) as app:
        assert app.get("/app/config") == b"from root"
        assert app.get("/flag") is None
        with pytest.raises(EtcdOperationError, match=DENIED):
            app.put("/app/config", "read only now")

    # Back to readwrite on the prefix only: /flag's permission is revoked.
    assert converge(secured, APP, managed=["app"]) == [
        "role app: readwrite on keys with prefix /app/",
        "role app: access to key /flag revoked",
    ]
    with etcd_client(profile(secured, "app", APP_PASSWORD)) as app:
        app.put("/app/config", "mine again")
        with pytest.raises(EtcdOperationError, match=DENIED):
            app.get("/flag")


@STATE_VERSIONS
def test_a_user_removed_from_the_declaration_goes_with_its_role_and_hand_made_ones_stay(secured):
    with etcd_client(profile(secured, "root", ROOT_PASSWORD)) as root:
        root.auth_call("user_add", "ops", "by-hand")
        root.auth_call("role_add", "ops")
        root.auth_call("user_grant_role", "ops", "ops")
    assert converge(secured, {}, managed=["app"]) == ["user app removed", "role app removed"]
    with etcd_client(profile(secured, "root", ROOT_PASSWORD)) as root:
        assert sorted(root.auth_call("user_list").users) == ["ops", "root"]
        assert sorted(root.auth_call("role_list").roles) == ["ops"]
        assert read_state(root, {"app"}).users == {"root": {"root"}}
    with (
        pytest.raises(EtcdOperationError, match="authentication failed"),
        etcd_client(profile(secured, "app", APP_PASSWORD)),
    ):
        pass
    with etcd_client(profile(secured, "ops", "by-hand")) as ops:
        assert ops.member_list()[0]
    assert converge(secured, {}, managed=["app"]) == []


@STATE_VERSIONS
def test_turning_authentication_off_keeps_the_users_and_roles(secured):
    assert converge(secured, APP, enabled=False, managed=["app"]) == ["authentication disabled"]
    with etcd_client(profile(secured)) as anonymous:
        anonymous.put("/other/config", "anyone may again")
        assert anonymous.get("/other/config") == b"anyone may again"
    with etcd_client(profile(secured, "root", ROOT_PASSWORD)) as client:
        state = read_state(client, {"app"})
    assert not state.enabled
    assert state.users == {"root": {"root"}, "app": {"app"}}
    assert planned(secured, APP, enabled=False, managed=["app"]) == []
    # And on again, with nothing else to do.
    assert converge(secured, APP, managed=["app"]) == ["authentication enabled"]
    with etcd_client(profile(secured)) as anonymous, pytest.raises(EtcdOperationError):
        anonymous.get("/other/config")


@STATE_VERSIONS
def test_roots_password_is_not_changed_while_authentication_is_on(secured):
    # Changing it would end the session applying the plan, and it is the operator's login.
    actions = converge(
        secured,
        {"app": [{"keyPrefix": "/app/", "access": "read"}]},
        managed=["app"],
        passwords=["root"],
        root_password=ROOT_PASSWORD,
    )
    assert actions == ["role app: read on keys with prefix /app/"]
