# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Synchronous etcd helpers for the quorumkeeper Ansible modules.

etcd3aio is asyncio based; Ansible modules are not. ``EtcdClient`` owns one event loop for the
lifetime of a module run and one gRPC channel per endpoint (so that a call can be aimed at one
particular member, e.g. MoveLeader at the leader), and exposes plain blocking methods with a
per-call timeout. Multi-endpoint calls try each endpoint in turn.

The pure functions at the top (quorum arithmetic, removal safety, ``initial_cluster``) carry the
decisions and are unit tested without etcd.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    DEFAULT_CLIENT_PORT,
    quorum_size,
    tolerable_failures,
)

try:
    import grpc
    import grpc.aio
    from etcd3aio.auth import AuthService
    from etcd3aio.cluster import ClusterService
    from etcd3aio.errors import EtcdError
    from etcd3aio.kv import KVService
    from etcd3aio.maintenance import MaintenanceService

    HAS_ETCD3AIO = True
    ETCD3AIO_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    HAS_ETCD3AIO = False
    ETCD3AIO_IMPORT_ERROR = exc

# A snapshot streams faster than it is uploaded, so its reader waits for the upload; meanwhile
# gRPC keeps accepting data up to the HTTP/2 flow-control window, which its bandwidth-delay
# probing grows by tens of MiB on a fast link (measured). A fixed 4 MiB window bounds that and
# still lets etcd send at full speed whenever the reader reads.
SNAPSHOT_CHANNEL_OPTIONS = (
    ("grpc.http2.bdp_probe", 0),
    ("grpc.http2.lookahead_bytes", 4 * 1024 * 1024),
)
# etcd sends a snapshot in 32 KiB messages: read about 1 MiB of them per turn of the event loop
# rather than one, which costs as much CPU as the rest of receiving.
SNAPSHOT_BATCH_BYTES = 1024 * 1024
# How long member_list waits for the other endpoints once one has answered: enough for members
# that answer at once to be ranked by endpoint order, far less than a hung call's timeout.
FIRST_ANSWER_GRACE_SECONDS = 0.05
# A call member_list stopped waiting for.
_NO_ANSWER_YET = object()
# How long a linearizable MemberList may go unanswered before its member is asked whether it has
# a leader (none: the list is given up for a serializable one): longer than an election takes
# (etcd's default election timeout is 1 s).
LEADERLESS_GRACE_SECONDS = 2.0

# Substrings of etcd server errors (stable across 3.4 - 3.6).
ERR_LEARNER_NOT_READY = "in sync with leader"
ERR_TOO_MANY_LEARNERS = "too many learner members"
ERR_PEER_URL_EXISTS = "Peer URLs already exists"
ERR_MEMBER_NOT_FOUND = "member not found"
ERR_NOT_LEARNER = "can only promote a learner member"
ERR_NOT_ENOUGH_STARTED = "not enough started members"
# Cluster-level conditions that clear by themselves (etcd's strict reconfiguration check wants
# the leader connected to every voter for 5 seconds; elections).
TRANSIENT_CLUSTER_ERRORS = ("unhealthy cluster", "leader changed", "no leader")
# etcdserverpb.AlarmType
ALARM_NAMES = {0: "NONE", 1: "NOSPACE", 2: "CORRUPT"}


# --------------------------------------------------------------------------------------------
# Pure helpers
# --------------------------------------------------------------------------------------------


def member_id_hex(member_id):
    """Format a member ID the way etcdctl prints it (lower-case hex, no padding)."""
    return format(int(member_id), "x")


def parse_member_id(value):
    """Parse a member ID given as hex string (as etcdctl prints it), ``0x`` hex, or int."""
    if isinstance(value, int):
        return value
    text = str(value).strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    if not text:
        raise ValueError("empty member id")
    return int(text, 16)


def quorum_summary(voting, healthy_voting):
    return {
        "voting": voting,
        "healthy_voting": healthy_voting,
        "required": quorum_size(voting) if voting else 0,
        "tolerable_failures": tolerable_failures(healthy_voting, voting),
    }


def removal_check(members, target_id):
    """Decide whether removing ``target_id`` keeps quorum.

    ``members`` are dicts with ``id`` (hex), ``name``, ``is_learner`` and ``healthy``.
    Returns ``(ok, message)``. Removing a learner is always quorum-safe. Removing a voter is
    allowed only if it is not the last voter and the remaining healthy voters still form a
    quorum of the remaining voters.
    """
    target = _find_by_id(members, target_id)
    if target is None:
        return True, "member not present"
    label = describe_member(target)
    if target.get("is_learner"):
        return True, f"{label} is a learner; removing it does not affect quorum"
    voters = [m for m in members if not m.get("is_learner")]
    if len(voters) <= 1:
        return False, (
            f"refusing to remove {label}: it is the last voting member of the cluster "
            "(removing it would destroy the cluster)"
        )
    remaining = len(voters) - 1
    healthy_left = sum(1 for m in voters if m["id"] != target["id"] and m.get("healthy"))
    required = quorum_size(remaining)
    if healthy_left < required:
        return False, (
            f"refusing to remove {label}: would leave {healthy_left} healthy voting members "
            f"of {remaining}, quorum needs {required}"
        )
    return True, (
        f"removing {label} leaves {healthy_left} healthy voting members of {remaining}, "
        f"quorum needs {required}"
    )


def initial_cluster(members, target_id, target_name):
    """The ``--initial-cluster`` value a new member must start with.

    Every member of the cluster (etcd checks the member count when joining an existing
    cluster), named as started; the target member gets ``target_name``. Same as what
    ``etcdctl member add`` prints.
    """
    parts = []
    for m in members:
        name = target_name if m["id"] == target_id else m.get("name", "")
        for url in m.get("peer_urls", []):
            parts.append(f"{name}={url}")
    return ",".join(parts)


def describe_member(member):
    name = member.get("name") or "(unstarted)"
    return f"member {name} (id {member['id']})"


def _find_by_id(members, member_id):
    for m in members:
        if m["id"] == member_id:
            return m
    return None


def find_member(members, name=None, peer_urls=None, member_id=None):
    """Find a member by id, else by non-empty name, else by any overlapping peer URL."""
    if member_id is not None:
        hexid = member_id_hex(parse_member_id(member_id))
        return _find_by_id(members, hexid)
    if name:
        for m in members:
            if m.get("name") == name:
                return m
    wanted = {_norm_url(u) for u in (peer_urls or [])}
    if wanted:
        for m in members:
            if wanted & {_norm_url(u) for u in m.get("peer_urls", [])}:
                return m
    return None


def _norm_url(url):
    return url.strip().rstrip("/").lower()


def endpoint_target(url):
    """Split a client URL into the gRPC target ``host:port`` and whether TLS is used."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    parsed = urllib.parse.urlsplit(text)
    if parsed.scheme not in ("http", "https"):
        raise ValueError(f"unsupported scheme in endpoint {url!r} (use http:// or https://)")
    if not parsed.hostname:
        raise ValueError(f"endpoint {url!r} has no host")
    port = parsed.port or DEFAULT_CLIENT_PORT
    host = parsed.hostname
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{host}:{port}", parsed.scheme == "https"


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


def leader_from_statuses(statuses):
    """Most commonly reported non-zero leader ID (int) among status responses, or 0."""
    counts = Counter(s["leader_int"] for s in statuses if s and s.get("leader_int"))
    if not counts:
        return 0
    return counts.most_common(1)[0][0]


# --------------------------------------------------------------------------------------------
# Client
# --------------------------------------------------------------------------------------------


class EtcdUnreachable(Exception):
    def __init__(self, endpoints, errors):
        self.endpoints = list(endpoints)
        self.errors = dict(errors)
        detail = "; ".join(f"{ep}: {self.errors.get(ep, 'not tried')}" for ep in self.endpoints)
        super().__init__(f"no etcd endpoint answered ({detail})")


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


def _is_connection_error(exc):
    """True when the endpoint did not really answer (try the next one)."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, OSError)):
        return True
    if HAS_ETCD3AIO:
        from etcd3aio.errors import EtcdConnectionError, EtcdTransientError

        if isinstance(exc, (EtcdConnectionError, EtcdTransientError)):
            return True
        if isinstance(exc, grpc.aio.AioRpcError) and exc.code() in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
        ):
            return True
    return False


def _read_file(path):
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


class EtcdClient:
    """Blocking facade over etcd3aio for one module run. Use as a context manager."""

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
        # The etcd user's token, asked for on the first call (None: no credentials).
        self._token = None

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
            target, secure = endpoint_target(endpoint)
            options = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.enable_retries", 0)]
            options.extend(extra_options)
            if secure or self._ca is not None:
                creds = grpc.ssl_channel_credentials(
                    root_certificates=self._ca,
                    private_key=self._key,
                    certificate_chain=self._cert,
                )
                ch = grpc.aio.secure_channel(target, creds, options=options)
            else:
                ch = grpc.aio.insecure_channel(target, options=options)
            self._channels[(endpoint, extra_options)] = ch
        return ch

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
                if detail:  # etcd answered: wrong credentials, auth not enabled, ...
                    raise EtcdOperationError(
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
        return await auth.authenticate(
            self.profile.username, self.profile.password, timeout=self.timeout
        )

    # -- single endpoint async primitives ----------------------------------------------------
    async def _status(self, endpoint):
        resp = await self._maint(endpoint).status(timeout=self.timeout)
        return {
            "endpoint": endpoint,
            "id": member_id_hex(resp.header.member_id),
            "leader_int": resp.leader,
            "leader": member_id_hex(resp.leader) if resp.leader else None,
            "version": resp.version,
            "db_size": resp.dbSize,
            "db_size_in_use": resp.dbSizeInUse,
            "raft_index": resp.raftIndex,
            "raft_term": resp.raftTerm,
            "raft_applied_index": resp.raftAppliedIndex,
            "is_learner": resp.isLearner,
            "errors": list(resp.errors),
        }

    async def _member_list(self, endpoint, linearizable=True):
        resp = await self._cluster(endpoint).member_list(
            linearizable=linearizable, timeout=self.timeout
        )
        return [self._member(m) for m in resp.members]

    @staticmethod
    def _member(m):
        return {
            "id": member_id_hex(m.ID),
            "name": m.name,
            "peer_urls": list(m.peerURLs),
            "client_urls": list(m.clientURLs),
            "is_learner": bool(m.isLearner),
        }

    async def _gather(self, coros):
        return await asyncio.gather(*coros, return_exceptions=True)

    # -- blocking API -------------------------------------------------------------------------
    def status(self, endpoint):
        return self._run(self._status(endpoint))

    def member_list(self, endpoints=None):
        """Members via the first endpoint that answers a linearizable MemberList.

        All endpoints are asked concurrently, and the first answer ends the wait: every
        linearizable answer is as good as another, and an endpoint that hangs (a partitioned
        member) would otherwise cost every call its whole timeout. Among the answers in by then
        (plus a moment for the others), endpoint order decides. If none answers linearizably
        (e.g. quorum lost) a serializable list is used instead. Returns
        ``(members, endpoint, errors)``; raises ``EtcdUnreachable``.
        """
        endpoints = list(endpoints or self.endpoints)
        errors = {}
        for linearizable in (True, False):
            calls = [
                self._member_list_unless_leaderless(ep)
                if linearizable
                else self._member_list(ep, linearizable=False)
                for ep in endpoints
            ]
            results = self._run(self._first_answers(calls))
            for ep, res in zip(endpoints, results, strict=False):
                if isinstance(res, BaseException):
                    if ep not in errors:
                        errors[ep] = describe_error(res)
                    continue
                if res is not _NO_ANSWER_YET:
                    return res, ep, errors
        raise EtcdUnreachable(endpoints, errors)

    async def _member_list_unless_leaderless(self, endpoint, grace=LEADERLESS_GRACE_SECONDS):
        """A linearizable MemberList of ``endpoint``, given up (``NoLeader``) when it has not
        answered within ``grace`` seconds and the member then reports no leader: without a
        quorum no leader is elected and the call could only wait out its timeout (5 s of every
        observe after a quorum loss), while an ordinary election ends well within the grace.
        A healthy cluster answers at once and costs no second call."""
        listing = asyncio.ensure_future(self._member_list(endpoint, linearizable=True))
        try:
            await asyncio.wait({listing}, timeout=grace)
            if not listing.done():
                try:
                    status = await self._status(endpoint)
                except Exception:  # noqa: BLE001 - no status: the listing's own outcome decides
                    status = None
                if status is not None and not status["leader_int"] and not listing.done():
                    raise NoLeader(f"no leader for {grace:g}s")
            return await listing
        finally:
            if not listing.done():
                listing.cancel()
                await asyncio.gather(listing, return_exceptions=True)

    async def _first_answers(self, coros, grace=FIRST_ANSWER_GRACE_SECONDS, decisive=(NoLeader,)):
        """The coroutines' results (or exceptions) in order, once one of them has succeeded
        and the others had ``grace`` seconds more, or once one has failed with a ``decisive``
        exception (a live member that has had no leader for longer than an election: the
        cluster has no quorum, and the calls still waiting are to members that do not answer);
        those still running are cancelled and stand as ``_NO_ANSWER_YET``. Otherwise all of
        them, as ``_gather`` returns them."""
        tasks = [asyncio.ensure_future(c) for c in coros]
        pending = set(tasks)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                finished = [t for t in done if not t.cancelled()]
                if any(t.exception() is None for t in finished):
                    if pending:
                        _, pending = await asyncio.wait(pending, timeout=grace)
                    break
                if any(isinstance(t.exception(), decisive) for t in finished):
                    break
        finally:
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        return [
            _NO_ANSWER_YET if t in pending or t.cancelled() else (t.exception() or t.result())
            for t in tasks
        ]

    def statuses(self, members):
        """Status of each member, asked through its own client URLs, concurrently.

        A member whose advertised URLs do not answer from here is then looked for among this
        client's own endpoints that are nobody's advertised URL, by the member ID in each answer's
        header: a caller outside the cluster network (a host without cluster DNS, where members
        advertise in-cluster names) reaches members only through the addresses it was given, and
        a member that answers there is as alive as one answering on its advertised name.
        Returns ``[(status or None, errors)]`` in ``members`` order; a status's ``endpoint`` is
        the URL that answered.
        """

        async def one(member):
            urls = member.get("client_urls") or []
            if not urls:
                return None, ["member has not started (no client URLs)"]
            errs = []
            for url in urls:
                try:
                    return await self._status(url), errs
                except Exception as exc:  # noqa: BLE001 - reported to the user
                    errs.append(f"{url}: {describe_error(exc)}")
            return None, errs

        results = self._run(self._gather([one(m) for m in members]))
        advertised = {u.rstrip("/") for m in members for u in m.get("client_urls") or []}
        others = [ep for ep in self.endpoints if ep not in advertised]
        if not others or all(st is not None for st, _ in results):
            return results
        answers = self._run(self._gather([self._status(ep) for ep in others]))
        by_id = {}
        for answer in answers:
            if not isinstance(answer, BaseException):
                by_id.setdefault(answer["id"], answer)
        return [
            (by_id.get(m["id"]), errs) if st is None and m.get("client_urls") else (st, errs)
            for m, (st, errs) in zip(members, results, strict=True)
        ]

    def cluster_version(self, client_urls):
        """The cluster-wide version from the first member answering ``/version``."""
        for url in client_urls:
            try:
                data = self.http_get_json(url + "/version")
            except Exception:  # noqa: BLE001 - any failure: try the next member
                continue
            if data.get("etcdcluster"):
                return data["etcdcluster"]
        return None

    def _ssl_context(self):
        ctx = ssl.create_default_context(cafile=self.profile.ca_cert)
        if self.profile.client_cert:
            ctx.load_cert_chain(self.profile.client_cert, self.profile.client_key)
        return ctx

    def http_get_json(self, url):
        kwargs = {"timeout": self.timeout}
        if url.startswith("https://"):
            kwargs["context"] = self._ssl_context()
        with urllib.request.urlopen(url, **kwargs) as resp:  # noqa: S310 - etcd client URL
            return json.loads(resp.read().decode("utf-8"))

    def cluster_info(self):
        """Members with health, leader, quorum. Raises ``EtcdUnreachable``."""
        members, answered_by, endpoint_errors = self.member_list()
        results = self.statuses(members)
        statuses = []
        for m, (st, errs) in zip(members, results, strict=False):
            statuses.append(st)
            m["healthy"] = st is not None
            m["errors"] = list(errs) + (list(st["errors"]) if st else [])
            m["version"] = st["version"] if st else None
            m["db_size"] = st["db_size"] if st else None
            m["raft_index"] = st["raft_index"] if st else None
            m["raft_term"] = st["raft_term"] if st else None
        leader_int = leader_from_statuses([s for s in statuses if s])
        leader_hex = member_id_hex(leader_int) if leader_int else None
        leader = None
        for m in members:
            m["is_leader"] = leader_hex is not None and m["id"] == leader_hex
            if m["is_leader"]:
                leader = {"id": m["id"], "name": m["name"]}
        voting = [m for m in members if not m["is_learner"]]
        healthy_voting = [m for m in voting if m["healthy"]]
        quorum = quorum_summary(len(voting), len(healthy_voting))
        # The URLs that answered: a member's advertised ones may not resolve from here.
        healthy_urls = [st["endpoint"] for st in statuses if st]
        return {
            "reachable": True,
            "endpoint": answered_by,
            "endpoint_errors": endpoint_errors,
            "members": members,
            "leader": leader,
            "cluster_version": self.cluster_version(healthy_urls),
            "quorum": quorum,
            "healthy": bool(leader) and len(healthy_voting) >= quorum["required"],
        }

    # -- calls that try endpoints in turn --------------------------------------------------------
    def _call_any(self, endpoints, make_coro, operation):
        """Run ``make_coro(endpoint)`` on the first endpoint that answers.

        Connection-level failures move on to the next endpoint; an etcd error answer is raised
        as ``EtcdOperationError`` immediately.
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
                    raise EtcdOperationError(f"{operation} via {ep} failed: {detail}", exc) from exc
                if _is_connection_error(exc):
                    errors[ep] = describe_error(exc)
                    continue
                if isinstance(exc, (EtcdError, grpc.aio.AioRpcError)):
                    raise EtcdOperationError(
                        f"{operation} via {ep} failed: {describe_error(exc)}", exc
                    ) from exc
                raise
        raise EtcdUnreachable(tried, errors)

    def member_add(self, peer_urls, is_learner, endpoints=None):
        async def call(ep):
            resp = await self._cluster(ep).member_add(
                list(peer_urls), is_learner=is_learner, timeout=self.timeout
            )
            return self._member(resp.member), [self._member(m) for m in resp.members]

        (member, members), _ = self._call_any(endpoints or self.endpoints, call, "MemberAdd")
        return member, members

    def member_promote(self, member_id, endpoints=None):
        async def call(ep):
            resp = await self._cluster(ep).member_promote(
                parse_member_id(member_id), timeout=self.timeout
            )
            return [self._member(m) for m in resp.members]

        members, _ = self._call_any(endpoints or self.endpoints, call, "MemberPromote")
        return members

    def member_remove(self, member_id, endpoints=None):
        async def call(ep):
            resp = await self._cluster(ep).member_remove(
                parse_member_id(member_id), timeout=self.timeout
            )
            return [self._member(m) for m in resp.members]

        members, _ = self._call_any(endpoints or self.endpoints, call, "MemberRemove")
        return members

    def move_leader(self, leader_endpoints, target_id):
        async def call(ep):
            await self._maint(ep).move_leader(parse_member_id(target_id), timeout=self.timeout)

        self._call_any(leader_endpoints, call, "MoveLeader")

    def alarms(self, endpoints=None):
        """The cluster's active alarms: ``[{member_id, alarm}]`` (``NOSPACE``, ``CORRUPT``)."""

        async def call(ep):
            resp = await self._maint(ep).alarms(timeout=self.timeout)
            return [
                {
                    "member_id": member_id_hex(a.memberID),
                    "alarm": ALARM_NAMES.get(int(a.alarm), str(a.alarm)),
                }
                for a in resp.alarms
            ]

        alarms, _ = self._call_any(endpoints or self.endpoints, call, "Alarm")
        return alarms

    def put(self, key, value, endpoints=None):
        async def call(ep):
            await self._kv(ep).put(key, value, timeout=self.timeout)

        self._call_any(endpoints or self.endpoints, call, "Put")

    def get(self, key, endpoints=None):
        async def call(ep):
            resp = await self._kv(ep).get(key, timeout=self.timeout)
            return resp.kvs[0].value if resp.kvs else None

        value, _ = self._call_any(endpoints or self.endpoints, call, "Get")
        return value

    def revision(self, endpoint):
        """The store revision of one member, from the header of a read served by it."""

        async def call():
            resp = await self._kv(endpoint).get(b"\0", serializable=True, timeout=self.timeout)
            return resp.header.revision

        return self._run(call())

    def key_count(self, endpoint, revision=0):
        """``(keys, revision)``: how many keys one member holds at ``revision`` (0: its current
        one) and the revision it answered at; a count-only range over the whole key space
        (keys >= "\\0"), served by that member."""

        async def call():
            resp = await self._kv(endpoint).get(
                b"\0",
                range_end=b"\0",
                serializable=True,
                revision=revision,
                count_only=True,
                timeout=self.timeout,
            )
            return resp.count, resp.header.revision

        return self._run(call())

    def snapshot(self, endpoint, timeout=None):
        """The snapshot of one member's backend, as the chunks etcd streams.

        A generator: the caller consumes the stream while it arrives, so the snapshot is never
        held whole (at most SNAPSHOT_BATCH_BYTES of it here, and the channel's window in gRPC).
        ``timeout`` bounds the whole stream (None: no bound).
        """

        async def channel():  # grpc.aio binds a channel to the loop it is created in
            return self._channel(endpoint, SNAPSHOT_CHANNEL_OPTIONS)

        maintenance = self._service(MaintenanceService, self._run(channel()))
        stream = maintenance.snapshot(timeout=timeout, max_attempts=1)

        async def batch():
            chunks, size = [], 0
            while size < SNAPSHOT_BATCH_BYTES:
                try:
                    chunk = await stream.__anext__()
                except StopAsyncIteration:
                    return chunks, True
                chunks.append(chunk)
                size += len(chunk)
            return chunks, False

        try:
            done = False
            while not done:
                chunks, done = self._run(batch())
                yield from chunks
        finally:
            self._run(stream.aclose())


# --------------------------------------------------------------------------------------------
# Operations used by the etcd_member module
# --------------------------------------------------------------------------------------------


def public_member(m):
    return {
        "id": m["id"],
        "name": m.get("name", ""),
        "peer_urls": list(m.get("peer_urls", [])),
        "is_learner": bool(m.get("is_learner")),
    }


def preferred_endpoints(client, members, exclude_id=None):
    """Client URLs of healthy voters, the leader first, then the configured endpoints.

    The leader first: etcd refuses a member change (``unhealthy cluster``) when the member that
    handles it has not been connected to a quorum for five seconds, and a member that just
    joined has not; the leader has. URLs of ``exclude_id`` are left out entirely (never send a
    remove through the member being removed).
    """
    excluded = set()
    ordered = []
    for m in members:
        if m["id"] == exclude_id:
            excluded.update(m.get("client_urls", []))
    voters = [
        m for m in members if m["id"] != exclude_id and m.get("healthy") and not m.get("is_learner")
    ]
    for m in sorted(voters, key=lambda m: not m.get("is_leader")):
        ordered.extend(m.get("client_urls", []))
    ordered.extend(client.endpoints)
    out = []
    for ep in ordered:
        if ep not in excluded and ep not in out:
            out.append(ep)
    return out


def wait_for_leader_change(client, old_leader_id, deadline):
    """Poll until a leader other than ``old_leader_id`` is reported. Returns the new info."""
    while True:
        info = client.cluster_info()
        if info["leader"] and info["leader"]["id"] != old_leader_id:
            return info
        if time.monotonic() >= deadline:
            return info
        time.sleep(0.2)


def pick_new_leader(members, leader_id):
    candidates = [
        m for m in members if m["id"] != leader_id and m.get("healthy") and not m.get("is_learner")
    ]
    candidates.sort(key=lambda m: m.get("raft_index") or 0, reverse=True)
    return candidates[0] if candidates else None
