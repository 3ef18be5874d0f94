"""Concurrent etcd clients that record a history (hack/soak/history.py) through one endpoint,
normally the EtcdCluster's client Service.

Each client runs gets, puts (with the previous value) and compare-and-swap transactions (compare
the value it last saw, put a new one; on a failed compare, read the current value) on a few keys
that change every round, so each key's history stays short for the checker. Every value written
is unique. Requests carry etcd's `hasleader` metadata, so a member without a leader rejects them
before raft (a definite failure) instead of holding them until a timeout.

A client opens a new gRPC channel after any operation without an answer, and every so often:
through a Service that is a new TCP connection, which kube-proxy may send to another member, as a
real client would reconnect. A write is only sent on a channel that is connected; a request that
never left the client is a definite failure.

After the run, ``final_reads`` reads every key once more (part of the history, so the final value
of each key must be explained by the acknowledged and indeterminate writes) and ``read_back``
reads every acknowledged write at the revision etcd gave it: the value must be there.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time

import grpc
import grpc.aio
from etcd3aio._protobuf import Compare, KVStub, PutRequest, RangeRequest, RequestOp, TxnRequest

from .history import History, classify

REQUIRE_LEADER = (("hasleader", "true"),)
CHANNEL_OPTIONS = [
    # Without it every channel to the same address shares one connection (grpc's global
    # subchannel pool): all clients would talk to the one member kube-proxy picked first.
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.enable_retries", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
# A client also reconnects after this many operations, so that over a round the clients'
# connections spread over the members (kube-proxy picks one per connection) and a fault on any
# member meets some of them.
RECONNECT_AFTER = (40, 120)
# grpc's pick_first policy says this when no connection could be made: nothing was sent.
NOT_SENT = "failed to connect to all addresses"
# etcd's answer to a read at a revision older than its compacted history.
COMPACTED = "required revision has been compacted"


def error_text(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    if isinstance(error, asyncio.TimeoutError | TimeoutError):
        return "timed out"
    return f"{type(error).__name__}: {error}"


def outcome_of(error: BaseException) -> tuple[str, str]:
    text = error_text(error)
    if isinstance(error, grpc.aio.AioRpcError):
        details = error.details() or ""
        return classify(details, sent=NOT_SENT not in details), text
    return classify(text, sent=True), text


def member(response) -> str:
    """The member that answered (etcdctl's hex ID), to see how the clients were spread."""
    return format(response.header.member_id, "x")


def kv_result(kvs) -> dict:
    if not kvs:
        return {"found": False, "value": ""}
    return {"found": True, "value": kvs[0].value.decode()}


class Workload:
    """``clients`` concurrent clients at ``rate`` operations per second each, in a background
    thread with its own event loop, until ``stop()``."""

    def __init__(
        self,
        endpoint: str,
        history: History,
        clients: int = 4,
        keys: int = 3,
        rate: float = 10.0,
        timeout: float = 2.0,
        seed: int = 0,
        prefix: str = "/soak",
        weights: tuple[float, float, float] = (0.4, 0.3, 0.3),
    ):
        self.target = endpoint.split("://", 1)[-1]
        self.history, self.clients, self.rate, self.timeout = history, clients, rate, timeout
        self.seed, self.prefix, self.nkeys, self.weights = seed, prefix.rstrip("/"), keys, weights
        self.keys = self._keyspace("start")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.crashed: BaseException | None = None
        # read_back: ids of the writes already read back (found, or found lost), what it found
        self._read: set[int] = set()
        self._lost: list[dict] = []
        self._compacted: list[dict] = []

    def _keyspace(self, label: str) -> list[str]:
        return [f"{self.prefix}/{label}/k{i}" for i in range(self.nkeys)]

    def set_round(self, label: str) -> None:
        """From now on, operate on fresh keys named after ``label``."""
        self.keys = self._keyspace(label)

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> Workload:
        self._thread = threading.Thread(target=self._run, name="soak-workload", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"the workload did not stop within {timeout}s")
        if self.crashed is not None:
            raise RuntimeError(f"a workload client crashed: {self.crashed!r}") from self.crashed

    def __enter__(self) -> Workload:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        # gRPC logs (debug) while it holds its own locks; a logger not disabled takes logging's
        # module lock on a cache miss, and the soak's main thread clears those caches all the
        # time (every kubernetes client model sets its loggers' levels) while holding that lock,
        # and its garbage collector may then finalize this thread's gRPC objects, waiting for a
        # gRPC lock: both threads stopped for good at round 85 of a 100-round soak. A disabled
        # logger answers without the lock.
        for name in list(logging.root.manager.loggerDict):
            if name == "grpc" or name.startswith("grpc."):
                logging.getLogger(name).disabled = True

        async def main():
            await asyncio.gather(*(self._client(i) for i in range(self.clients)))

        try:
            asyncio.run(main())
        except BaseException as error:  # noqa: BLE001 - re-raised by stop()
            self.crashed = error

    # -- one client -------------------------------------------------------------------------------
    def _channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(self.target, options=CHANNEL_OPTIONS)

    async def _connected(self, channel: grpc.aio.Channel) -> bool:
        try:
            await asyncio.wait_for(channel.channel_ready(), self.timeout)
            return True
        except (TimeoutError, grpc.aio.AioRpcError):
            return False

    async def _client(self, cid: int) -> None:
        rng = random.Random(f"{self.seed}-{cid}")
        seen: dict[str, str | None] = {}  # key -> the value this client last knew it to hold
        channel, seq, interval = None, 0, 1.0 / self.rate
        uses = lifetime = 0
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                if channel is not None and uses >= lifetime:
                    await channel.close()
                    channel = None
                if channel is None:
                    channel, uses, lifetime = self._channel(), 0, rng.randint(*RECONNECT_AFTER)
                uses += 1
                key = rng.choice(self.keys)
                op = rng.choices(("get", "put", "cas"), weights=self.weights)[0]
                if op == "cas" and seen.get(key) is None:
                    op = "get"  # nothing to compare with yet
                seq += 1
                value = f"c{cid}-{seq}"
                expect = seen.get(key) if op == "cas" else None
                if not await self._connected(channel):
                    record = self.history.begin(
                        cid, op, key, value if op != "get" else None, expect
                    )
                    self.history.finish(record, "failed", error="not connected")
                    ok = False
                else:
                    ok = await self._operate(channel, cid, op, key, value, expect, seen)
                if not ok:
                    await channel.close()
                    channel = None
                    await asyncio.sleep(rng.uniform(0.05, 0.2))
                await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
        finally:
            if channel is not None:
                await channel.close()

    async def _operate(self, channel, cid, op, key, value, expect, seen) -> bool:
        stub = KVStub(channel)
        k = key.encode()
        record = self.history.begin(cid, op, key, value if op != "get" else None, expect)
        try:
            if op == "get":
                call = stub.Range(
                    RangeRequest(key=k), timeout=self.timeout, metadata=REQUIRE_LEADER
                )
                response = await asyncio.wait_for(call, self.timeout + 1)
                result = kv_result(response.kvs)
                self.history.finish(record, "ok", result=result, member=member(response))
                seen[key] = result["value"] if result["found"] else None
            elif op == "put":
                request = PutRequest(key=k, value=value.encode(), prev_kv=True)
                call = stub.Put(request, timeout=self.timeout, metadata=REQUIRE_LEADER)
                response = await asyncio.wait_for(call, self.timeout + 1)
                previous = [response.prev_kv] if response.HasField("prev_kv") else []
                self.history.finish(
                    record,
                    "ok",
                    result=kv_result(previous),
                    revision=response.header.revision,
                    member=member(response),
                )
                seen[key] = value
            else:
                request = TxnRequest(
                    compare=[
                        Compare(
                            result=Compare.EQUAL,
                            target=Compare.VALUE,
                            key=k,
                            value=expect.encode(),
                        )
                    ],
                    success=[RequestOp(request_put=PutRequest(key=k, value=value.encode()))],
                    failure=[RequestOp(request_range=RangeRequest(key=k))],
                )
                call = stub.Txn(request, timeout=self.timeout, metadata=REQUIRE_LEADER)
                response = await asyncio.wait_for(call, self.timeout + 1)
                if response.succeeded:
                    self.history.finish(
                        record,
                        "ok",
                        succeeded=True,
                        revision=response.header.revision,
                        member=member(response),
                    )
                    seen[key] = value
                else:
                    current = kv_result(response.responses[0].response_range.kvs)
                    self.history.finish(
                        record, "ok", succeeded=False, result=current, member=member(response)
                    )
                    seen[key] = current["value"] if current["found"] else None
            return True
        except (grpc.aio.AioRpcError, TimeoutError) as error:
            outcome, text = outcome_of(error)
            self.history.finish(record, outcome, error=text)
            seen.pop(key, None)
            return False

    # -- after the run ----------------------------------------------------------------------------
    def final_reads(self, timeout: float = 120) -> dict:
        """Read every key of the history once more, as a client of its own, until each read is
        answered (or ``timeout``); the reads go into the history."""
        return asyncio.run(self._final_reads(timeout))

    async def _final_reads(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        keys, unread = self.history.keys(), []
        async with self._channel() as channel:
            stub = KVStub(channel)
            for key in keys:
                while True:
                    record = self.history.begin(self.clients, "get", key)
                    try:
                        call = stub.Range(
                            RangeRequest(key=key.encode()),
                            timeout=self.timeout,
                            metadata=REQUIRE_LEADER,
                        )
                        response = await call
                        self.history.finish(
                            record, "ok", result=kv_result(response.kvs), member=member(response)
                        )
                        break
                    except grpc.aio.AioRpcError as error:
                        self.history.finish(record, outcome_of(error)[0], error=error_text(error))
                        if time.monotonic() > deadline:
                            unread.append(key)
                            break
                        await asyncio.sleep(0.2)
        return {"keys": len(keys), "unread": unread}

    def read_back(self, timeout: float = 300, concurrency: int = 16) -> dict:
        """Every acknowledged write read at its own revision: etcd must still hold that value
        there (same value, same modification revision). Lost writes are listed.

        Each call reads only the writes no earlier call could read, and reports all of them:
        call it before etcd compacts the history (the soak does at the end of every round, and
        just before and after a NOSPACE, which the operator answers with a compaction). A write
        whose revision was compacted first cannot be read there any more: it is listed as
        ``compacted``, neither verified nor lost (the history's check still covers it)."""
        return asyncio.run(self._read_back(timeout, concurrency))

    async def _read_back(self, timeout: float, concurrency: int) -> dict:
        acknowledged = self.history.acknowledged_writes()
        writes = [w for w in acknowledged if w["id"] not in self._read]
        deadline = time.monotonic() + timeout
        lost, compacted, unverified = self._lost, self._compacted, []
        gate = asyncio.Semaphore(concurrency)
        async with self._channel() as channel:
            stub = KVStub(channel)

            async def verify(write: dict) -> None:
                revision = write.get("revision") or 0
                if revision <= 0:
                    unverified.append({**write, "why": "no revision in the answer"})
                    return
                request = RangeRequest(key=write["key"].encode(), revision=revision)
                async with gate:
                    while True:
                        try:
                            response = await stub.Range(request, timeout=self.timeout)
                            break
                        except grpc.aio.AioRpcError as error:
                            if COMPACTED in (error.details() or ""):
                                self._read.add(write["id"])
                                compacted.append(write)
                                return
                            if time.monotonic() > deadline:
                                unverified.append({**write, "why": error_text(error)})
                                return
                            await asyncio.sleep(0.2)
                self._read.add(write["id"])
                found = response.kvs[0] if response.kvs else None
                if (
                    found is None
                    or found.value.decode() != write["value"]
                    or found.mod_revision != revision
                ):
                    lost.append(
                        {
                            **write,
                            "found_at_revision": (
                                {"value": found.value.decode(), "mod_revision": found.mod_revision}
                                if found is not None
                                else None
                            ),
                        }
                    )

            await asyncio.gather(*(verify(w) for w in writes))
        return {
            "acknowledged": len(acknowledged),
            "verified": len(acknowledged) - len(lost) - len(compacted) - len(unverified),
            "lost": list(lost),
            "compacted": list(compacted),
            "unverified": unverified,
        }
