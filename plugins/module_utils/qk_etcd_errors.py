# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""What etcd calls fail with, and what their failures mean.

Whether etcd3aio (and gRPC) is installed (``HAS_ETCD3AIO``, which the modules check before
connecting); the exceptions the client raises (``EtcdUnreachable``: no endpoint answered,
``EtcdOperationError``: etcd answered with an error, ``EtcdCredentialsRefused``: to a
login, ``NoLeader``); the substrings of etcd's
server errors the modules act on; and the classification and wording of an error for the user
(``describe_error``, with hints for gRPC's TLS failures; ``etcd_error_detail``,
``is_transient_cluster_error``, ``is_connection_error``).
"""

from __future__ import annotations

import asyncio

try:
    import grpc
    import grpc.aio

    # etcd3aio's package imports all of its services: this import fails when any of those
    # the client uses (qk_etcd) cannot be loaded.
    from etcd3aio.errors import EtcdConnectionError, EtcdTransientError

    HAS_ETCD3AIO = True
    ETCD3AIO_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    HAS_ETCD3AIO = False
    ETCD3AIO_IMPORT_ERROR = exc

# Substrings of etcd server errors (stable across 3.4 - 3.6).
ERR_LEARNER_NOT_READY = "in sync with leader"
ERR_TOO_MANY_LEARNERS = "too many learner members"
ERR_PEER_URL_EXISTS = "Peer URLs already exists"
ERR_MEMBER_NOT_FOUND = "member not found"
ERR_NOT_LEARNER = "can only promote a learner member"
ERR_NOT_ENOUGH_STARTED = "not enough started members"
ERR_COMPACTED = "required revision has been compacted"
# Cluster-level conditions that clear by themselves (etcd's strict reconfiguration check wants
# the leader connected to every voter for 5 seconds; elections).
TRANSIENT_CLUSTER_ERRORS = ("unhealthy cluster", "leader changed", "no leader")

# etcd's answers to a call without a user, or with a user it does not know (3.5 and later ask
# for one even for MemberList and Status once authentication is on).
CREDENTIALS_REFUSED_ERRORS = (
    "user name is empty",
    "invalid auth token",
    "authentication failed",
    "user name not found",
)

# What gRPC's TLS failures mean for the connection options: its own words ("Unwrap failed
# (TSI_DATA_CORRUPTED)") name neither the cause nor the option to check. Measured against etcd
# 3.4 - 3.6 with --client-cert-auth (tests/modules/test_connection_profile.py).
TLS_FAILURE_HINTS = (
    (
        ("TSI_DATA_CORRUPTED", "BAD_CERTIFICATE", "CERTIFICATE_REQUIRED"),
        "TLS: the member ended the connection after the handshake, as etcd does when it "
        "requires a client certificate (--client-cert-auth) and none was given, or one its "
        "CA did not sign: check client_cert and client_key",
    ),
    (
        ("CERTIFICATE_VERIFY_FAILED", "BAD_SIGNATURE"),
        "TLS: the member's certificate is not trusted: check that ca_cert is the CA that "
        "signed it (without ca_cert, the system's CAs are used)",
    ),
    (
        ("Handshake read failed",),
        "TLS: the member did not answer the handshake: check that it serves TLS on this port "
        "(an http:// member is dialled without ca_cert)",
    ),
)


def describe_error(exc):
    if HAS_ETCD3AIO and isinstance(exc, grpc.aio.AioRpcError):
        text = f"{exc.code().name}: {exc.details()}"
    elif isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timed out"
    else:
        text = str(exc) or exc.__class__.__name__
    hint = next((h for markers, h in TLS_FAILURE_HINTS if any(m in text for m in markers)), None)
    return f"{text} ({hint})" if hint else text


def etcd_error_detail(exc):
    """The etcd server's error text (``etcdserver: ...``) carried by ``exc``, or None."""
    seen = 0
    while exc is not None and seen < 5:
        if HAS_ETCD3AIO and isinstance(exc, grpc.aio.AioRpcError):
            detail = exc.details() or ""
            return detail if detail.startswith("etcdserver:") else None
        exc = exc.__cause__
        seen += 1
    return None


def is_transient_cluster_error(text):
    return any(t in (text or "") for t in TRANSIENT_CLUSTER_ERRORS)


class EtcdUnreachable(Exception):
    def __init__(self, endpoints, errors):
        self.endpoints = list(endpoints)
        self.errors = dict(errors)
        detail = "; ".join(f"{ep}: {self.errors.get(ep, 'not tried')}" for ep in self.endpoints)
        super().__init__(f"no etcd endpoint answered ({detail})")


class NotConnected(Exception):
    """A call was given up because no connection to its member opened in time (the member is
    cut off, or gone): see qk_etcd.CONNECT_SECONDS."""


class NoLeader(Exception):
    """A linearizable call went unanswered for longer than an election takes, and its member
    reports no raft leader."""


class EtcdOperationError(Exception):
    """An etcd call was answered with an error (as opposed to no answer at all)."""

    def __init__(self, message, cause=None):
        super().__init__(message)
        self.cause = cause

    @property
    def details(self):
        return str(self)


class EtcdCredentialsRefused(EtcdOperationError):
    """etcd answered a login with an error: the user or its password is not what etcd has.
    The cluster answers, so a caller must not take it for unreachable (a disaster recovery
    decided on that would be a lie acted upon)."""


def credentials_refused(exc):
    """etcd's words when ``exc`` is its refusal of the caller's credentials, else None."""
    detail = etcd_error_detail(exc)
    if detail and any(e in detail for e in CREDENTIALS_REFUSED_ERRORS):
        return detail
    return None


def is_connection_error(exc):
    """True when the endpoint did not really answer (try the next one)."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, OSError)):
        return True
    if HAS_ETCD3AIO:
        if isinstance(exc, (EtcdConnectionError, EtcdTransientError)):
            return True
        if isinstance(exc, grpc.aio.AioRpcError) and exc.code() in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
        ):
            return True
    return False
