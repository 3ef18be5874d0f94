"""The credential Secrets of spec.auth (qk_cluster_auth): made once with a random password,
a user's own password kept, root's password carried to a cluster restored from a snapshot."""

from __future__ import annotations

import base64
import os
import stat

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_auth import (
    COPIED_FROM_ANNOTATION,
    CredentialSecrets,
    auth_settings,
    carry_root_password,
    password_file_path,
    root_credentials,
)

NS = "ns"


class SecretStore:
    """The API server's Secrets of one namespace, as the qk_kube client calls them."""

    def __init__(self):
        self.secrets: dict = {}
        self.version = 0

    def _stamp(self, secret):
        self.version += 1
        secret.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        return secret

    def get(self, api_version, kind, name, namespace=None):
        assert (api_version, kind, namespace) == ("v1", "Secret", NS)
        return self.secrets.get(name)

    def create(self, obj, namespace=None):
        assert obj["metadata"]["name"] not in self.secrets
        self.secrets[obj["metadata"]["name"]] = self._stamp(obj)
        return obj

    def patch(self, api_version, kind, name, patch, namespace=None):
        secret = self.secrets[name]
        secret.setdefault("data", {}).update(patch["data"])
        return self._stamp(secret)


def encoded(**data):
    return {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}


def decoded(secret):
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def test_a_users_secret_is_made_once_with_a_random_password_and_owned_by_the_cluster():
    kube = SecretStore()
    owner = {"uid": "cluster-uid", "kind": "EtcdCluster", "name": "c"}
    store = CredentialSecrets(kube, NS, "c", owner)
    password, version = store.ensure("app")
    secret = kube.secrets["c-user-app"]
    assert decoded(secret) == {"username": "app", "password": password}
    assert len(password) >= 24 and secret["metadata"]["ownerReferences"] == [owner]
    assert store.ensure("app") == (password, version), "the same password every time"
    assert store.created == ["c-user-app"]


def test_a_secret_the_user_made_keeps_its_password_and_one_without_gets_a_password():
    kube = SecretStore()
    kube.create({"metadata": {"name": "c-user-mine"}, "data": encoded(password="chosen")})
    kube.create({"metadata": {"name": "c-user-certonly"}, "data": encoded(**{"tls.crt": "x"})})
    store = CredentialSecrets(kube, NS, "c", None)
    assert store.ensure("mine")[0] == "chosen"
    password, _ = store.ensure("certonly")
    assert decoded(kube.secrets["c-user-certonly"]) == {
        "tls.crt": "x",
        "username": "certonly",
        "password": password,
    }
    assert store.created == ["c-user-certonly"]


def test_nothing_is_made_when_secrets_may_not_be_created_or_in_check_mode():
    kube = SecretStore()
    assert CredentialSecrets(kube, NS, "c", None).ensure("app", create=False) == (None, "")
    checked = CredentialSecrets(kube, NS, "c", None, check=True)
    assert checked.ensure("app")[0] and kube.secrets == {}


def test_roots_password_reaches_a_private_file(tmp_path):
    kube = SecretStore()
    path = password_file_path(str(tmp_path), NS, "c")
    root = root_credentials(CredentialSecrets(kube, NS, "c", None), path, create=True)
    with open(path) as f:
        assert f.read() == root["password"] == decoded(kube.secrets["c-user-root"])["password"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert root_credentials(CredentialSecrets(kube, NS, "d", None), path, create=False) == {}


def test_a_restored_cluster_gets_its_sources_root_password_unless_it_has_one():
    kube = SecretStore()
    kube.create(
        {
            "metadata": {"name": "src-user-root"},
            "data": encoded(username="root", password="p", extra="not copied"),
        }
    )
    assert carry_root_password(kube, NS, "src", "new") == "new-user-root"
    copied = kube.secrets["new-user-root"]
    assert decoded(copied) == {"username": "root", "password": "p"}
    assert copied["metadata"]["annotations"] == {COPIED_FROM_ANNOTATION: "ns/src-user-root"}
    assert carry_root_password(kube, NS, "src", "new") is None, "it has one now"
    assert carry_root_password(kube, NS, "src", "src") is None, "in place: the same Secret"
    assert carry_root_password(kube, NS, "plain", "other") is None, "no spec.auth at the source"


def test_auth_settings_default_to_enabled_and_absent_means_off():
    assert auth_settings(None) == {"enabled": False, "declared": False, "users": {}}
    settings = auth_settings({"users": [{"name": "app", "permissions": [{"key": "k"}]}]})
    assert settings == {"enabled": True, "declared": True, "users": {"app": [{"key": "k"}]}}
    assert auth_settings({"enabled": False})["enabled"] is False
