# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The one way to connect to etcd: a connection profile, and the factory that turns it into a
client.

A ``ConnectionProfile`` says everything about reaching a cluster: its endpoints, the CA bundle
that verifies them, the client certificate and key that identify us, and the credentials of an
etcd user. Modules read it from their options (``connection_argument_spec``, documented once by
the doc fragment ``quorumkeeper.etcd.etcd_connection``); helper pods receive it as JSON in the
environment variable ``QK_ETCD_CONNECTION``. ``etcd_client`` is the only place a client is
built, so TLS and authentication are added by filling the profile, not by editing callers.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace

DEFAULT_TIMEOUT = 5.0
# The environment variable through which helper pods receive the profile.
PROFILE_ENV = "QK_ETCD_CONNECTION"
# Options of the profile besides the endpoints, as modules take them.
_FILE_OPTIONS = ("ca_cert", "client_cert", "client_key")
_CREDENTIAL_OPTIONS = ("username", "password", "password_file")


def _normal_endpoint(endpoint: str) -> str:
    """``endpoint`` without surrounding blanks and trailing slashes, unless they are all its
    ``scheme://`` has: ``http://`` must stay an endpoint without a host (refused as such by the
    client), not become the host ``http:``."""
    text = endpoint.strip()
    trimmed = text.rstrip("/")
    return trimmed if "://" in trimmed or "://" not in text else text


@dataclass(frozen=True)
class ConnectionProfile:
    """How to reach and authenticate to one etcd cluster (file options are paths)."""

    endpoints: tuple[str, ...] = field(default_factory=tuple)
    timeout: float = DEFAULT_TIMEOUT
    ca_cert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    # The password kept in a file (the operator's own, written by etcd_cluster_auth), so that
    # it never passes through a task's arguments or results.
    password_file: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "endpoints", tuple(_normal_endpoint(e) for e in self.endpoints))
        object.__setattr__(self, "timeout", float(self.timeout))
        if bool(self.client_cert) != bool(self.client_key):
            raise ValueError("client_cert and client_key must be given together")
        if self.password and self.password_file:
            raise ValueError("give password or password_file, not both")
        if bool(self.username) != bool(self.password or self.password_file):
            raise ValueError("username and password (or password_file) must be given together")

    @property
    def secure(self) -> bool:
        """Whether the endpoints are dialled with TLS."""
        return bool(self.ca_cert) or any(e.startswith("https://") for e in self.endpoints)

    @property
    def client_scheme(self) -> str:
        """The scheme of the member URLs a module makes itself: a profile with a CA or a
        client certificate is for a cluster that serves clients over TLS."""
        return "https" if self.ca_cert or self.client_cert else "http"

    def with_endpoints(self, endpoints) -> ConnectionProfile:
        """The same cluster reached through other endpoints (one member, say)."""
        return replace(self, endpoints=tuple(endpoints))

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v not in (None, ())})

    @classmethod
    def from_json(cls, text: str) -> ConnectionProfile:
        data = json.loads(text)
        data["endpoints"] = tuple(data.get("endpoints") or ())
        return cls(**data)


def connection_argument_spec(endpoints_required: bool = True) -> dict:
    """The options every etcd module takes (doc fragment ``quorumkeeper.etcd.etcd_connection``).

    Modules that find the endpoints themselves (from the cluster's members) take no
    ``endpoints``: ``connection_argument_spec(endpoints_required=False)`` leaves it out."""
    spec = {
        "timeout": {"type": "float", "default": DEFAULT_TIMEOUT},
        "ca_cert": {"type": "path"},
        "client_cert": {"type": "path"},
        "client_key": {"type": "path", "no_log": False},
        "username": {"type": "str"},
        "password": {"type": "str", "no_log": True},
        "password_file": {"type": "path", "no_log": False},
    }
    if endpoints_required:
        spec = {"endpoints": {"type": "list", "elements": "str", "required": True}, **spec}
    return spec


CONNECTION_REQUIRED_TOGETHER = [("client_cert", "client_key")]


def profile_from_params(
    params: dict, endpoints=None, timeout_option: str = "timeout"
) -> ConnectionProfile:
    """The profile a module's options describe; ``endpoints`` when the module finds them.
    ``timeout_option`` names the option holding the per-call timeout, for a module whose
    ``timeout`` meant something else before it took the connection options
    (etcd_snapshot_verify: ``etcd_timeout``)."""
    return ConnectionProfile(
        endpoints=tuple(endpoints if endpoints is not None else params.get("endpoints") or ()),
        timeout=params.get(timeout_option) or DEFAULT_TIMEOUT,
        **{k: params.get(k) or None for k in _FILE_OPTIONS + _CREDENTIAL_OPTIONS},
    )


def profile_from_env(endpoints=None, environ=None) -> ConnectionProfile:
    """The profile a helper pod was given (PROFILE_ENV; none: plain, no credentials)."""
    text = (environ if environ is not None else os.environ).get(PROFILE_ENV)
    profile = ConnectionProfile.from_json(text) if text else ConnectionProfile()
    return profile.with_endpoints(endpoints) if endpoints is not None else profile


def profile_env(profile: ConnectionProfile) -> list[dict]:
    """The container env that gives a helper pod ``profile`` (without its endpoints, which
    the pod is told separately). A pod spec is readable by anyone who may read pods: an etcd
    password must reach a pod through a Secret it mounts (``password_file``, a path in the
    pod), never in its spec."""
    if profile.password:
        raise ValueError(
            "etcd credentials reach a helper pod through a Secret, never in its pod spec"
        )
    return [{"name": PROFILE_ENV, "value": profile.with_endpoints(()).to_json()}]


def etcd_client(profile: ConnectionProfile):
    """A client for ``profile``: the only place one is built. Use it as a context manager."""
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd import (  # noqa: PLC0415
        EtcdClient,
    )

    if not profile.endpoints:
        raise ValueError("an etcd connection needs at least one endpoint")
    return EtcdClient(profile)
