"""A client that counts acknowledged writes while a cluster is upgraded, and reads them back;
shared by tests/e2e/test_upgrade.py and bench/run.py (upgrade)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from datetime import UTC, datetime

from kubehelpers import wait_until


class AckedWriter:
    """One client writing unique keys (``<prefix><n>`` = ``v<n>``) one after the other through
    ``endpoint`` (the client Service), from a background thread.

    Each write is retried on a fresh connection for up to ``retry_for`` seconds (a member being
    replaced drops its connections; a gRPC channel would otherwise wait out its reconnect
    backoff); a write acknowledged in that time counts as acknowledged, one that is not as
    failed (it may or may not have been applied: only acknowledged writes are owed). ``check``
    reads every key back afterwards.
    """

    def __init__(self, endpoint: str, prefix: str, retry_for: float = 1.0, pause: float = 0.02):
        self.target = endpoint.split("://", 1)[-1]
        self.prefix, self.retry_for, self.pause = prefix, retry_for, pause
        self.acknowledged: dict[str, str] = {}
        # (key, when its write gave up in UTC, to read the logs by, the last error)
        self.failed: list[tuple[str, str, str]] = []
        self.retried = 0
        self.longest = 0.0
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="acked-writer")
        # With use_tls: TLS first, plain HTTP when TLS fails (a cluster turning client TLS on or
        # off serves one, the other or both); writes over each are counted.
        self.tls: dict | None = None
        self.by_scheme = {"http": 0, "https": 0}

    def use_tls(self, ca: str, cert: str, key: str, server_name: str) -> None:
        """Write with this client certificate from now on, plain HTTP where TLS is refused;
        ``server_name`` is the name the server certificate is checked against."""
        self.tls = {"ca": ca, "cert": cert, "key": key, "server_name": server_name}

    def _channel(self, secure: bool):
        import grpc
        import grpc.aio

        if not secure:
            return grpc.aio.insecure_channel(self.target)
        tls = self.tls
        credentials = grpc.ssl_channel_credentials(
            root_certificates=tls["ca"].encode(),
            private_key=tls["key"].encode(),
            certificate_chain=tls["cert"].encode(),
        )
        options = [("grpc.ssl_target_name_override", tls["server_name"])]
        return grpc.aio.secure_channel(self.target, credentials, options=options)

    @property
    def attempted(self) -> int:
        return len(self.acknowledged) + len(self.failed)

    def _run(self):
        try:
            asyncio.run(self._loop())
        except BaseException as exc:  # noqa: BLE001 - re-raised by stop()
            self.error = exc

    async def _loop(self):
        from etcd3aio.kv import KVService

        channel, n, secure, plain_first = None, 0, False, False
        try:
            while not self.stop_event.is_set():
                n += 1
                key, value = f"{self.prefix}{n:08d}", f"v{n}"
                started = time.monotonic()
                error = ""
                while True:
                    left = started + self.retry_for - time.monotonic()
                    try:
                        if channel is None:
                            secure = self.tls is not None and not plain_first
                            channel = self._channel(secure)
                        kv = KVService(channel, max_attempts=1)
                        await kv.put(key, value, timeout=max(0.05, min(0.5, left)))
                        self.acknowledged[key] = value
                        self.by_scheme["https" if secure else "http"] += 1
                        break
                    except Exception as exc:  # noqa: BLE001 - retried, then counted
                        error = f"{type(exc).__name__}: {exc}"[:300]
                        with contextlib.suppress(Exception):
                            await channel.close()
                        channel = None
                        # With a certificate, the next attempt goes over the other scheme.
                        plain_first = self.tls is not None and secure
                        if time.monotonic() - started >= self.retry_for:
                            when = datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]
                            self.failed.append((key, when, error))
                            break
                        self.retried += 1
                        await asyncio.sleep(0.05)
                self.longest = max(self.longest, time.monotonic() - started)
                await asyncio.sleep(self.pause)
        finally:
            if channel is not None:
                await channel.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=30)
        if self.error:
            raise self.error

    def summary(self) -> dict:
        attempted = self.attempted
        return {
            "attempted": attempted,
            "acknowledged": len(self.acknowledged),
            "failed": len(self.failed),
            "acknowledged_percent": round(100.0 * len(self.acknowledged) / attempted, 3)
            if attempted
            else None,
            "retried_attempts": self.retried,
            "longest_write_seconds": round(self.longest, 3),
            "acknowledged_by_scheme": dict(self.by_scheme),
            "first_failures": self.failed[:5],
        }

    def window(self, first: int, last: int) -> dict:
        """Outcomes of the writes numbered ``first`` to ``last`` (e.g. those attempted while an
        upgrade ran)."""

        def number(key):
            return int(key[len(self.prefix) :])

        acknowledged = sum(1 for k in self.acknowledged if first <= number(k) <= last)
        failed = [f for f in self.failed if first <= number(f[0]) <= last]
        attempted = acknowledged + len(failed)
        return {
            "attempted": attempted,
            "acknowledged": acknowledged,
            "failed": len(failed),
            "acknowledged_percent": round(100.0 * acknowledged / attempted, 3)
            if attempted
            else None,
            "failures": failed[:5],
        }

    def lost(self, endpoint: str | None = None) -> list[str]:
        """Acknowledged keys that are missing or hold another value now (read linearizably;
        after use_tls over TLS, or plain HTTP when the cluster serves only that)."""
        target = (endpoint or self.target).split("://", 1)[-1]

        async def read(secure):
            import grpc.aio
            from etcd3aio.kv import KVService

            channel = self._channel(True) if secure else grpc.aio.insecure_channel(target)
            async with channel:
                kv = KVService(channel, max_attempts=3)
                end = self.prefix[:-1] + chr(ord(self.prefix[-1]) + 1)
                response = await kv.get(self.prefix, end, timeout=10 if secure else 30)
                return {kv_.key.decode(): kv_.value.decode() for kv_ in response.kvs}

        stored = None
        if self.tls is not None and target == self.target:
            with contextlib.suppress(Exception):
                stored = asyncio.run(read(True))
        if stored is None:
            stored = asyncio.run(read(False))
        return sorted(k for k, v in self.acknowledged.items() if stored.get(k) != v)


def peer_versions(cluster) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"]["version"] for p in cluster.peers()}


def wait_upgraded(cluster, version: str, members: int, timeout: float = 300) -> dict:
    """Wait until every member reports ``version``, healthy, etcd raised the cluster version and
    the cluster is Available with nothing in progress; returns what Progressing said meanwhile."""
    progress: list[str] = []

    def done():
        obj = cluster.get()
        status = obj.get("status", {})
        conditions = {c["type"]: c for c in status.get("conditions", [])}
        message = conditions.get("Progressing", {}).get("message", "")
        if message and (not progress or progress[-1] != message):
            progress.append(message)
        return (
            status.get("observedGeneration") == obj["metadata"]["generation"]
            and len(status.get("members", [])) == members
            and all(m["healthy"] and m["version"] == version for m in status["members"])
            and status.get("clusterVersion", "").startswith(".".join(version.split(".")[:2]))
            and conditions.get("Available", {}).get("status") == "True"
            and conditions.get("Progressing", {}).get("status") == "False"
            and set(peer_versions(cluster).values()) == {version}
        )

    wait_until(f"{cluster.name} upgraded to {version}", done, timeout, interval=0.5)
    return {"progress": progress, "status": cluster.get()["status"]}
