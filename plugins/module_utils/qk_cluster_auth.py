# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""An EtcdCluster's ``spec.auth``: the users' credential Secrets, the operator's own root
password file, and the run of the module ``etcd_cluster_auth`` (Secrets first, then etcd).

Every user's password lives in the Secret ``<cluster>-user-<name>`` (keys ``username`` and
``password``; with operator-managed client TLS also ``tls.crt``/``tls.key``/``ca.crt``, a
certificate whose CN is the user, written by etcd_cluster_tls). A Secret that exists is used as
it is, so a user can choose a password by creating the Secret first; one the operator creates
gets a random password and is owned by the EtcdCluster. The password is stored before etcd is
told about it: there is never a user whose password nobody has.
"""

from __future__ import annotations

import base64
import os
import secrets

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_tls import (
    credentials_dir,
    write_private_file,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    member_labels,
    user_secret_name,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_auth import ROOT
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import secret_data

USERNAME_KEY, PASSWORD_KEY = "username", "password"
PASSWORD_FILE = "root.password"


def auth_settings(auth_spec: dict | None) -> dict:
    """``spec.auth`` with its defaults: ``{enabled, users: {name: permissions}}``; an absent
    ``spec.auth`` is authentication off with no users declared."""
    if auth_spec is None:
        return {"enabled": False, "declared": False, "users": {}}
    return {
        "enabled": auth_spec.get("enabled", True),
        "declared": True,
        "users": {u["name"]: u.get("permissions") or [] for u in auth_spec.get("users") or []},
    }


def password_file_path(base: str | None, namespace: str, cluster: str) -> str:
    """Where the operator keeps root's password, beside its client certificate."""
    return os.path.join(credentials_dir(base, namespace, cluster), PASSWORD_FILE)


class CredentialSecrets:
    """The users' credential Secrets of one cluster, read from and written to the API server
    itself (never the operator's cache)."""

    def __init__(self, kube, namespace: str, cluster: str, owner: dict | None, *, check=False):
        self.kube = kube
        self.namespace = namespace
        self.cluster = cluster
        self.owner = owner
        self.check = check
        self.created: list[str] = []

    def ensure(self, user: str, *, create=True) -> tuple[str | None, str]:
        """``(password, resourceVersion)`` of ``user``'s Secret, made (with a random password)
        or completed when it has none; ``(None, "")`` when it may not be made."""
        name = user_secret_name(self.cluster, user)
        secret = self.kube.get("v1", "Secret", name, self.namespace)
        try:
            data = secret_data(secret) if secret else {}
        except ValueError as exc:
            raise ValueError(f"Secret {self.namespace}/{name}: {exc}") from exc
        if data.get(PASSWORD_KEY):
            return data[PASSWORD_KEY], secret["metadata"].get("resourceVersion", "")
        if not create:
            return None, ""
        password = secrets.token_urlsafe(24)
        encoded = {
            USERNAME_KEY: base64.b64encode(user.encode()).decode(),
            PASSWORD_KEY: base64.b64encode(password.encode()).decode(),
        }
        self.created.append(name)
        if self.check:
            return password, ""
        if secret:
            written = self.kube.patch("v1", "Secret", name, {"data": encoded}, self.namespace)
        else:
            written = self.kube.create(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "type": "Opaque",
                    "metadata": {
                        "name": name,
                        "namespace": self.namespace,
                        "labels": member_labels(self.cluster),
                        **({"ownerReferences": [self.owner]} if self.owner else {}),
                    },
                    "data": encoded,
                }
            )
        return password, (written or {}).get("metadata", {}).get("resourceVersion", "")


def root_credentials(store: CredentialSecrets, path: str, *, create: bool) -> dict:
    """The root password's Secret made (when ``create``) and written to ``path`` for the etcd
    modules; ``{username, password_file, secretVersion}``, or ``{}`` when there is none."""
    password, version = store.ensure(ROOT, create=create)
    if password is None:
        return {}
    if not store.check:
        write_private_file(path, password)
    return {"username": ROOT, "password_file": path, "secretVersion": version, "password": password}


# On a root Secret the operator copied from another cluster's (a restore of its snapshot).
COPIED_FROM_ANNOTATION = "etcd.quorumkeeper.dev/copied-from"


def carry_root_password(kube, namespace: str, source: str, target: str, *, check=False):
    """Give cluster ``target`` root's Secret of cluster ``source`` before ``target`` is created
    from ``source``'s snapshot: the snapshot keeps ``source``'s users and root password, and the
    operator logs in to the restored cluster as that root. Returns the Secret's name when it
    was made; None when ``source`` has none (no spec.auth) or ``target`` already has one."""
    if not source or source == target:
        return None
    theirs = kube.get("v1", "Secret", user_secret_name(source, ROOT), namespace)
    if theirs is None or kube.get("v1", "Secret", user_secret_name(target, ROOT), namespace):
        return None
    name = user_secret_name(target, ROOT)
    if not check:
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": member_labels(target),
                    "annotations": {
                        COPIED_FROM_ANNOTATION: f"{namespace}/{user_secret_name(source, ROOT)}"
                    },
                },
                "data": {
                    k: v
                    for k, v in (theirs.get("data") or {}).items()
                    if k in (USERNAME_KEY, PASSWORD_KEY)
                },
            }
        )
    return name
