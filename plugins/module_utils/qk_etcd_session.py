# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The connection under ``EtcdClient`` (qk_etcd): one module run's session with etcd.

etcd3aio is asyncio based; Ansible modules are not. ``EtcdSession`` owns one event loop for the
lifetime of a module run and one gRPC channel per endpoint (so that a call can be aimed at one
particular member, e.g. MoveLeader at the leader), the etcd user's token, and ``_call_any``,
which runs a call on the first endpoint that answers. ``EtcdClient`` adds the etcd calls.
"""

from __future__ import annotations

import asyncio

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    ETCD3AIO_IMPORT_ERROR,
    HAS_ETCD3AIO,
    EtcdCredentialsRefused,
    EtcdOperationError,
    EtcdUnreachable,
    credentials_refused,
    describe_error,
    etcd_error_detail,
    is_connection_error,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_members import (
    endpoint_target,
)

if HAS_ETCD3AIO:
    import grpc
    import grpc.aio
    from etcd3aio.auth import AuthService
    from etcd3aio.cluster import ClusterService
    from etcd3aio.errors import EtcdError
    from etcd3aio.kv import KVService
    from etcd3aio.maintenance import MaintenanceService


# etcd's answer to Authenticate while its authentication is off.
AUTH_NOT_ENABLED = "authentication is not enabled"


def _read_file(path):
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


class EtcdSession:
    """Event loop, channels and credentials of one module run; the base of ``EtcdClient``.
    Use as a context manager."""

    def __init__(self, profile):
        """Built by ``qk_connection.etcd_client(profile)``, which owns TLS and credentials."""
        if not HAS_ETCD3AIO:
            raise RuntimeError(f"etcd3aio is required: {ETCD3AIO_IMPORT_ERROR}")
        if not profile.endpoints:
            raise ValueError("at least one endpoint is required")
        for ep in profile.endpoints:
            endpoint_target(ep)  # validate early
        self.profile = profile
        self.endpoints = list(profile.endpoints)
        self.timeout = profile.timeout
        self._ca = _read_file(profile.ca_cert)
        self._cert = _read_file(profile.client_cert)
        self._key = _read_file(profile.client_key)
        self._loop = asyncio.new_event_loop()
        self._channels = {}
        # Endpoints a call of this run stopped waiting for because they had not connected
        # (qk_etcd's _unless_unconnected): a later call gives them a moment only.
        self._unconnected = set()
        # The etcd user's token, asked for on the first call (None: no credentials).
        self._token = None
        self._password = profile.password
        if profile.password_file:
            self._password = _read_file(profile.password_file).decode().rstrip("\n")

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self):
        self._authenticate()
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._loop.is_closed():
            return

        async def _close():
            for ch in self._channels.values():
                await ch.close()

        try:
            self._loop.run_until_complete(_close())
        finally:
            self._channels.clear()
            self._loop.close()

    def _run(self, coro):
        return self._loop.run_until_complete(coro)

    def _channel(self, endpoint, extra_options=()):
        ch = self._channels.get((endpoint, extra_options))
        if ch is None:
            ch = self._open_channel(grpc.aio, endpoint, extra_options)
            self._channels[(endpoint, extra_options)] = ch
        return ch

    def _open_channel(self, stack, endpoint, extra_options):
        """A new channel to ``endpoint`` from ``stack``: ``grpc.aio`` for the calls on the event
        loop (``_channel`` keeps one per endpoint), ``grpc`` for a stream of many small messages
        read outside it (qk_etcd's snapshot), where handing each one over to the loop would
        cost a thread switch; the caller closes the latter."""
        target, secure = endpoint_target(endpoint)
        options = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.enable_retries", 0)]
        options.extend(extra_options)
        # An explicit scheme says it (a cluster turning client TLS on or off serves some
        # members over http, others over https, to the same profile); a bare host:port
        # is dialled with TLS when the profile has a CA.
        if secure or ("://" not in endpoint and self._ca is not None):
            creds = grpc.ssl_channel_credentials(
                root_certificates=self._ca,
                private_key=self._key,
                certificate_chain=self._cert,
            )
            return stack.secure_channel(target, creds, options=options)
        return stack.insecure_channel(target, options=options)

    def _call_metadata(self):
        """What every call outside a service sends: the etcd user's token, if any."""
        return (("token", self._token),) if self._token else None

    def _service(self, kind, channel):
        service = kind(channel, max_attempts=1)
        if self._token:
            service.set_token(self._token)
        return service

    def _cluster(self, endpoint):
        return self._service(ClusterService, self._channel(endpoint))

    def _maint(self, endpoint):
        return self._service(MaintenanceService, self._channel(endpoint))

    def _kv(self, endpoint):
        return self._service(KVService, self._channel(endpoint))

    def _authenticate(self):
        """Get the etcd user's token from the first endpoint that answers (etcd hands one
        token for the whole cluster); every service made afterwards sends it."""
        if not self.profile.username or self._token:
            return
        errors = {}
        for endpoint in self.endpoints:
            try:
                response = self._run(self._authenticate_via(endpoint))
            except Exception as exc:  # noqa: BLE001 - the next endpoint may answer
                detail = etcd_error_detail(exc)
                if detail and AUTH_NOT_ENABLED in detail:
                    # Authentication is turned on after a cluster starts (and may be turned
                    # off): until then the cluster is used without a user.
                    return
                if detail:  # etcd answered: wrong credentials, ...
                    raise EtcdCredentialsRefused(
                        f"authenticating as {self.profile.username} via {endpoint} failed: "
                        f"{detail}",
                        exc,
                    ) from exc
                errors[endpoint] = describe_error(exc)
                continue
            self._token = response.token
            return
        raise EtcdUnreachable(self.endpoints, errors)

    async def _authenticate_via(self, endpoint):
        # Inside the loop: a gRPC aio channel belongs to the event loop it is made in, and this
        # client's channels are used by its own loop only.
        auth = AuthService(self._channel(endpoint), max_attempts=1)
        return await auth.authenticate(self.profile.username, self._password, timeout=self.timeout)

    async def _gather(self, coros):
        return await asyncio.gather(*coros, return_exceptions=True)

    # -- calls that try endpoints in turn --------------------------------------------------------
    def _call_any(self, endpoints, make_coro, operation):
        """Run ``make_coro(endpoint)`` on the first endpoint that answers.

        Connection-level failures move on to the next endpoint; an etcd error answer is raised
        as ``EtcdOperationError`` immediately (``EtcdCredentialsRefused`` when it refuses the
        caller's credentials).
        """
        errors = {}
        tried = []
        for ep in endpoints:
            if ep in tried:
                continue
            tried.append(ep)
            try:
                return self._run(make_coro(ep)), ep
            except Exception as exc:  # noqa: BLE001 - classified below
                detail = etcd_error_detail(exc)
                if detail and "learner" not in detail:
                    # etcd answered (e.g. "unhealthy cluster"): a cluster-wide condition, the
                    # next endpoint would say the same. Learners refuse most RPCs: move on.
                    refused = credentials_refused(exc)
                    error = EtcdCredentialsRefused if refused else EtcdOperationError
                    raise error(f"{operation} via {ep} failed: {detail}", exc) from exc
                if is_connection_error(exc):
                    errors[ep] = describe_error(exc)
                    continue
                if isinstance(exc, (EtcdError, grpc.aio.AioRpcError)):
                    raise EtcdOperationError(
                        f"{operation} via {ep} failed: {describe_error(exc)}", exc
                    ) from exc
                raise
        raise EtcdUnreachable(tried, errors)
