# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""``EtcdClient``: the blocking etcd calls of the quorumkeeper Ansible modules.

Built only by ``qk_connection.etcd_client(profile)``. Its session (qk_etcd_session) holds the
event loop, one gRPC channel per endpoint and the credentials; here are the calls, each with the
profile's per-call timeout: the member list (asked of every endpoint at once, the first answer
wins, and an endpoint not connected within CONNECT_SECONDS is given up), each member's status,
``cluster_info`` (members with health, leader and quorum), member
changes, MoveLeader, alarms, keys, and snapshots streamed as they arrive. Multi-endpoint calls
try each endpoint in turn. What their failures mean is in qk_etcd_errors, the decisions taken on
what they return in qk_etcd_members.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.request

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    ERR_COMPACTED,
    HAS_ETCD3AIO,
    EtcdCredentialsRefused,
    EtcdOperationError,
    EtcdUnreachable,
    NoLeader,
    NotConnected,
    credentials_refused,
    describe_error,
    etcd_error_detail,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_members import (
    leader_from_statuses,
    member_id_hex,
    parse_member_id,
    quorum_summary,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_session import EtcdSession

if HAS_ETCD3AIO:
    import grpc
    from etcd3aio.auth import AuthService

    # The types of the snapshot stream read with gRPC's blocking stack, as etcd3aio imported
    # them: its generated modules go by their own top-level names, and importing them by another
    # path would register the same descriptors a second time.
    from etcd3aio.maintenance import SnapshotRequest, SnapshotResponse

# A snapshot streams faster than it is uploaded, so its reader waits for the upload; meanwhile
# gRPC keeps accepting data up to the HTTP/2 flow-control window, which its bandwidth-delay
# probing grows by tens of MiB on a fast link (measured). A fixed 4 MiB window bounds that and
# still lets etcd send at full speed whenever the reader reads. gRPC's single-threaded
# unary-stream path (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, a Python-side
# option) reads each message on the reading thread instead of handing it over from gRPC's own
# polling thread: a wake-up less for each of a 1 GiB snapshot's 33,000 messages.
SNAPSHOT_CHANNEL_OPTIONS = (
    ("grpc.http2.bdp_probe", 0),
    ("grpc.http2.lookahead_bytes", 4 * 1024 * 1024),
    ("SingleThreadedUnaryStream", 1),
)
# etcd sends a snapshot in 32 KiB messages; the reader hands them on joined into pieces of about
# 1 MiB, so that what consumes them (hashing, regrouping into upload parts) runs once a piece.
SNAPSHOT_PIECE_BYTES = 1024 * 1024
SNAPSHOT_METHOD = "/etcdserverpb.Maintenance/Snapshot"
# How long member_list waits for the other endpoints once one has answered: enough for members
# that answer at once to be ranked by endpoint order, far less than a hung call's timeout.
FIRST_ANSWER_GRACE_SECONDS = 0.05
# A call member_list stopped waiting for.
_NO_ANSWER_YET = object()
# How long a linearizable MemberList may go unanswered before its member is asked whether it has
# a leader (none: the list is given up for a serializable one): longer than an election takes
# (etcd's default election timeout is 1 s).
LEADERLESS_GRACE_SECONDS = 2.0
# How long the member list waits for a connection to an endpoint before it counts as not
# answering, rather than the call's whole timeout (5 s, twice: linearizable, then serializable;
# when no member connects, an observation took 12 s). A member cut off the network never
# connects; a live one connects in milliseconds, however busy etcd is, since the TCP and TLS
# handshakes do not wait for etcd's own work. The member list: any endpoint's answer will do
# there. A member's status is its health, and a member that has just joined completes gRPC's
# handshake only once it serves clients (up to 7 s after it started), so statuses keep the whole
# timeout, unless the members that answer have no leader (no member joins then) or the caller
# says which members have just joined (statuses).
CONNECT_SECONDS = 1.5
# How long a call waits for an endpoint that an earlier call of the same run already gave up
# on: its channel has been trying since then, so a member cut off the network costs one
# CONNECT_SECONDS per module run rather than one per call (the member list, then the statuses,
# of every observation during a quorum loss).
RECONNECT_SECONDS = 0.25

# etcdserverpb.AlarmType
ALARM_NAMES = {0: "NONE", 1: "NOSPACE", 2: "CORRUPT"}


class EtcdClient(EtcdSession):
    """Blocking facade over etcd3aio for one module run. Use as a context manager."""

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

    async def _unless_unconnected(self, endpoint, coro, seconds=CONNECT_SECONDS, give_up=None):
        """``coro``'s outcome; but if it is still running after ``seconds`` and the channel to
        ``endpoint`` has not connected (and ``give_up()``, when given, says so then),
        ``NotConnected`` at once instead of its timeout."""
        if endpoint in self._unconnected:
            seconds = min(seconds, RECONNECT_SECONDS)
        call = asyncio.ensure_future(coro)
        try:
            done, _ = await asyncio.wait({call}, timeout=seconds)
            if not done and (give_up is None or give_up()):
                state = self._channel(endpoint).get_state()
                if state != grpc.ChannelConnectivity.READY:
                    self._unconnected.add(endpoint)
                    raise NotConnected(f"not connected within {seconds:g}s ({state.name.lower()})")
            return await call
        finally:
            if not call.done():
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)

    # -- blocking API -------------------------------------------------------------------------
    def status(self, endpoint):
        """The status of the member behind ``endpoint``: ``EtcdUnreachable`` when it does not
        answer, ``EtcdOperationError`` when etcd answers with an error."""
        answer, _ = self._call_any([endpoint], self._status, "Maintenance.Status")
        return answer

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
                self._unless_unconnected(
                    ep,
                    self._member_list_unless_leaderless(ep)
                    if linearizable
                    else self._member_list(ep, linearizable=False),
                )
                for ep in endpoints
            ]
            results = self._run(self._first_answers(calls))
            for ep, res in zip(endpoints, results, strict=False):
                if isinstance(res, BaseException):
                    refused = credentials_refused(res)
                    if refused:
                        raise EtcdCredentialsRefused(f"MemberList via {ep}: {refused}", res)
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

    def statuses(self, members, joining=()):
        """Status of each member, asked through its own client URLs, concurrently.

        A member whose advertised URLs do not answer from here is then looked for among this
        client's own endpoints that are nobody's advertised URL, by the member ID in each answer's
        header: a caller outside the cluster network (a host without cluster DNS, where members
        advertise in-cluster names) reaches members only through the addresses it was given, and
        a member that answers there is as alive as one answering on its advertised name. A
        member that has not started (no client URLs yet) is not looked for: its status would not
        be used, and asking the endpoints for it could take the whole timeout.

        A status call whose channel has not connected after CONNECT_SECONDS is given up when
        the members that did answer all say they have no leader: without a quorum no member is
        joining, and a member cut off the network would otherwise cost every observation the
        whole timeout (5 s of the 7 before a disaster recovery was decided). The same for the
        members named in ``joining`` (names or IDs: members the caller has just added): a
        member that joined through a snapshot (any cluster whose raft log was compacted, and
        every one after a disaster recovery) completes gRPC's handshake only once its
        publication through raft has timed out and been retried, 7 s after it started, and is
        not healthy for clients until then; asking it for the whole timeout only delays the
        answer.
        Returns ``[(status or None, errors)]`` in ``members`` order; a status's ``endpoint`` is
        the URL that answered.
        """
        answered = []

        def leaderless():
            return bool(answered) and not any(a["leader_int"] for a in answered)

        joining = set(joining)

        async def ask(url, member=None):
            new = member is not None and (member["id"] in joining or member["name"] in joining)
            status = await self._unless_unconnected(
                url, self._status(url), CONNECT_SECONDS, give_up=lambda: new or leaderless()
            )
            answered.append(status)
            return status

        async def one(member):
            urls = member.get("client_urls") or []
            if not urls:
                return None, ["member has not started (no client URLs)"]
            errs = []
            for url in urls:
                try:
                    return await ask(url, member), errs
                except Exception as exc:  # noqa: BLE001 - reported to the user
                    errs.append(f"{url}: {describe_error(exc)}")
            return None, errs

        results = self._run(self._gather([one(m) for m in members]))
        advertised = {u.rstrip("/") for m in members for u in m.get("client_urls") or []}
        others = [ep for ep in self.endpoints if ep not in advertised]
        unanswered = any(
            st is None and m.get("client_urls") for m, (st, _) in zip(members, results, strict=True)
        )
        if not others or not unanswered:
            return results
        answers = self._run(self._gather([ask(ep) for ep in others]))
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

    def cluster_info(self, joining=()):
        """Members with health, leader, quorum (``joining``: as ``statuses`` takes it). Raises
        ``EtcdUnreachable``."""
        members, answered_by, endpoint_errors = self.member_list()
        results = self.statuses(members, joining)
        statuses = []
        for m, (st, errs) in zip(members, results, strict=False):
            statuses.append(st)
            m["healthy"] = st is not None
            m["errors"] = list(errs) + (list(st["errors"]) if st else [])
            m["version"] = st["version"] if st else None
            m["db_size"] = st["db_size"] if st else None
            m["db_size_in_use"] = st["db_size_in_use"] if st else None
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

    def member_update(self, member_id, peer_urls, endpoints=None):
        async def call(ep):
            resp = await self._cluster(ep).member_update(
                parse_member_id(member_id), list(peer_urls), timeout=self.timeout
            )
            return [self._member(m) for m in resp.members]

        members, _ = self._call_any(endpoints or self.endpoints, call, "MemberUpdate")
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

    def alarm_disarm(self, member_id, alarm, endpoints=None):
        """Deactivate ``alarm`` (``NOSPACE``, ``CORRUPT``) of member ``member_id`` (hex)."""
        alarm_type = next(code for code, name in ALARM_NAMES.items() if name == alarm)

        async def call(ep):
            await self._maint(ep).alarm_deactivate(
                alarm_type, member_id=parse_member_id(member_id), timeout=self.timeout
            )

        self._call_any(endpoints or self.endpoints, call, "Alarm disarm")

    def compact(self, revision, endpoints=None):
        """Compact the key history up to ``revision``, waiting until the backend has freed it
        (physical), so that a defragmentation right after returns the space. Returns False when
        etcd had already compacted that far."""

        async def call(ep):
            await self._kv(ep).compact(revision, physical=True, timeout=self.timeout)

        try:
            self._call_any(endpoints or self.endpoints, call, "Compact")
        except EtcdOperationError as exc:
            if ERR_COMPACTED in str(exc):
                return False
            raise
        return True

    def defragment(self, endpoint, timeout):
        """Defragment the backend of the member serving ``endpoint`` (only that member): it
        rewrites its database and answers nothing else meanwhile, so ``timeout`` is the
        defragmentation's own, not the client's."""

        async def call():
            await self._maint(endpoint).defragment(timeout=timeout)

        try:
            self._run(call())
        except Exception as exc:  # noqa: BLE001 - said with the member's address
            detail = etcd_error_detail(exc)
            raise EtcdOperationError(
                f"Defragment via {endpoint} failed: {detail or describe_error(exc)}", exc
            ) from exc

    def auth_call(self, method, *args, **kwargs):
        """One call of etcd's Auth API: ``AuthService.<method>`` (``user_add``, ``role_get``,
        ``auth_enable``, ...) on the first endpoint that answers."""

        async def call(ep):
            service = self._service(AuthService, self._channel(ep))
            return await getattr(service, method)(*args, timeout=self.timeout, **kwargs)

        result, _ = self._call_any(self.endpoints, call, f"Auth.{method}")
        return result

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

    def compacted_revision(self, endpoint, known=0):
        """The revision one member's key history is compacted to: the oldest revision a read
        may still ask for (0: never compacted). A read at a compacted revision is refused before
        anything is read, so each probe costs the same whatever the database holds: ``known``,
        the answer of last time, is checked with three reads (the current revision, then each
        side of it); anything else is a binary search over the revisions (about 20 reads for a
        million)."""

        async def readable(kv, revision):
            try:
                await kv.get(
                    b"\0", serializable=True, revision=revision, count_only=True,
                    timeout=self.timeout,
                )  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - only the compaction refusal is an answer
                if ERR_COMPACTED in (etcd_error_detail(exc) or str(exc)):
                    return False
                raise
            return True

        async def search():
            kv = self._kv(endpoint)
            current = (
                await kv.get(b"\0", serializable=True, count_only=True, timeout=self.timeout)
            ).header.revision
            low, high = 1, current  # the answer is the lowest readable revision in [low, high]
            if 1 < known <= current:
                if not await readable(kv, known):
                    low = known + 1
                elif await readable(kv, known - 1):
                    high = known - 1  # compacted less far than before: a restored store
                else:
                    return known
            while low < high:
                middle = (low + high) // 2
                if await readable(kv, middle):
                    high = middle
                else:
                    low = middle + 1
            return low if low > 1 else 0

        try:
            return self._run(search())
        except Exception as exc:  # noqa: BLE001 - said with the member's address
            detail = etcd_error_detail(exc) or describe_error(exc)
            raise EtcdOperationError(f"compacted revision via {endpoint}: {detail}", exc) from exc

    def snapshot(self, endpoint, timeout=None):
        """The snapshot of one member's backend, in pieces of about SNAPSHOT_PIECE_BYTES.

        A generator: the caller consumes the stream while it arrives, so the snapshot is never
        held whole (at most a piece of it here, and the channel's window in gRPC).
        ``timeout`` bounds the whole stream (None: no bound). Read with gRPC's blocking stack:
        handing each of etcd's 32 KiB messages over to the event loop is a thread switch each,
        which a busy machine makes dear (a 1.2 GiB snapshot streamed to MinIO on 2 cores: 5.9
        CPU-seconds through the loop, 5.1 read here while another benchmark ran; 5.2 against
        5.1 on an idle machine).
        """
        # One channel for this stream, closed with it (which ends the call if it still runs).
        channel = self._open_channel(grpc, endpoint, SNAPSHOT_CHANNEL_OPTIONS)
        read = channel.unary_stream(
            SNAPSHOT_METHOD,
            request_serializer=SnapshotRequest.SerializeToString,
            response_deserializer=SnapshotResponse.FromString,
        )
        try:
            piece, size = [], 0
            for response in read(
                SnapshotRequest(), timeout=timeout, metadata=self._call_metadata()
            ):
                piece.append(response.blob)
                size += len(response.blob)
                if size >= SNAPSHOT_PIECE_BYTES:
                    yield b"".join(piece)
                    piece, size = [], 0
            if piece:
                yield b"".join(piece)
        except grpc.RpcError as exc:
            raise EtcdOperationError(
                f"Maintenance.Snapshot via {endpoint} failed: {exc.code().name}"
                + (f" ({exc.details()})" if exc.details() else ""),
                exc,
            ) from exc
        finally:
            channel.close()
