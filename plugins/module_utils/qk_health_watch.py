# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""etcd's own health between reconciles: the operator's health watch.

Why: etcd can stop doing work without anything Kubernetes sees. A NOSPACE or CORRUPT alarm, a
member that lost its leader, a member that hangs with its port still open: the pods stay Ready
and nothing wakes the EtcdCluster's reconcile, which looks at a steady cluster only every
10 minutes. Status would say Available while etcd refuses writes.

What: a small process beside ansible-operator (a second container of the operator's pod) asks
every member of every cluster whose status says Available for etcd's ``/health`` every few
seconds. ``/health`` needs no credentials: it is served on the metrics port when client TLS is
on (``--listen-metrics-urls``, plain HTTP) and on the client port otherwise, and etcd answers
it with ``{"health": "false", "reason": "ALARM NOSPACE"}`` (or ``RAFT NO LEADER``, ...) when the
member would refuse a request. When a member says so while the status says Available, the
watch writes the annotation HEALTH_ANNOTATION on the EtcdCluster: ansible-operator watches
annotation changes, so the cluster is reconciled at once, observes etcd itself, reports the
truth (conditions, Events) and acts (the NOSPACE loop, a member replacement). The watch never
changes the status or etcd: it only says "look now", so there is one writer of the status and
one place that decides.

When its pod stops (SIGTERM) and ``QK_LEADER_LEASE`` names the manager's leader election Lease,
it releases that Lease once the manager has stopped (qk_leader_lease), so that the next pod
does not wait for it to expire.

The decisions (which members, what a ``/health`` answer means, when to nudge) are pure and unit
tested; ``HealthWatch`` runs them against the API server and the members. Run as
``python3 -m ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_health_watch``.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import selectors
import signal
import socket
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_GROUP,
    API_VERSION,
    CLUSTER_KIND,
    CLUSTER_LABEL,
    PEER_LABEL,
    now_timestamp,
    ordinal_of,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    SERVICE_ACCOUNT_DIR,
    KubeError,
    direct_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_leader_lease import (
    release_when_stopped,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_metrics import (
    DEFAULT_EXPORTER_PORT,
    MetricsServer,
)

# Written by the watch when one of the user's own TLS Secrets of a cluster changed since the
# operator last checked it: the reconcile it wakes checks the certificates again (a ca.crt
# changed in place needs the members restarted) and records the value in status.tls.
SECRETS_ANNOTATION = f"{API_GROUP}/tls-secrets-changed"
# Written by the watch, read by nobody: its change is what wakes the reconcile up, and its value
# says what the watch saw, for a human reading the object.
HEALTH_ANNOTATION = f"{API_GROUP}/health-watch"
DEFAULT_INTERVAL_SECONDS = 5.0
PROBE_TIMEOUT_SECONDS = 2.0
# A disagreement the reconcile it woke did not settle (the status still says Available) is
# reported again after this long, not at every probe: the `degraded` requeue period.
RENUDGE_SECONDS = 30.0
# After a watch failed (the API server restarting): list again after this long.
WATCH_RETRY_SECONDS = 1.0
# The manager's probe port (its --health-probe-bind-address), which closes when it has stopped.
DEFAULT_MANAGER_PROBE_PORT = 6789
# How long a stopping pod's watch waits for the manager to stop before it gives up on releasing
# the leader Lease; the pod's grace period (10 s) ends it sooner.
LEASE_RELEASE_WAIT_SECONDS = 60.0


@dataclass(frozen=True)
class MemberProbe:
    """One member's ``/health`` URL."""

    namespace: str
    cluster: str
    member: str
    url: str


def _container_port(pod: dict, name: str) -> int | None:
    for container in pod.get("spec", {}).get("containers", []):
        for port in container.get("ports") or []:
            if port.get("name") == name:
                return port.get("containerPort")
    return None


def _ready(pod: dict) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _etcd_version(pod: dict) -> str:
    """The etcd version a member's pod runs: its etcd container's image tag, without ``v``."""
    for container in pod.get("spec", {}).get("containers", []):
        if container.get("name") == "etcd":
            return container.get("image", "").rpartition(":")[2].removeprefix("v")
    return ""


def member_probes(pods: list[dict]) -> list[MemberProbe]:
    """The ``/health`` URL of every member pod that Kubernetes says is ready. A pod that is not
    ready, or going away, is already something the reconcile hears of (its readiness reaches
    the EtcdCluster through the members' Endpoints); the watch looks for what it does not hear.
    The metrics port serves ``/health`` without a client certificate (members created before
    it existed serve it on the client port).

    Not members running etcd 3.4: their ``/health`` is a v2 quorum read (``QGET``) that goes
    through raft into the write-ahead log, and etcd 3.6 refuses to start on a log holding v2
    requests (``detected disallowed v2 WAL``), which would break the upgrade to 3.6 of a
    cluster watched on 3.4. Their alarms are seen at the operator's next look, as before the
    watch existed."""
    probes = []
    for pod in pods:
        meta = pod.get("metadata", {})
        labels = meta.get("labels") or {}
        cluster, member = labels.get(CLUSTER_LABEL), labels.get(PEER_LABEL)
        ip = pod.get("status", {}).get("podIP")
        port = _container_port(pod, "metrics") or _container_port(pod, "client")
        if not (cluster and member and ip and port) or meta.get("deletionTimestamp"):
            continue
        if not _ready(pod) or _etcd_version(pod).startswith("3.4."):
            continue
        host = f"[{ip}]" if ":" in ip else ip
        probes.append(
            MemberProbe(meta.get("namespace", ""), cluster, member, f"http://{host}:{port}/health")
        )
    return probes


def health_verdict(status: int | None, body: bytes | str | None, error: str = "") -> str:
    """What one ``/health`` answer says: "" for a member that serves, else why it does not
    (etcd's own reason: ``ALARM NOSPACE``, ``RAFT NO LEADER``; or that it did not answer)."""
    if error:
        return f"no answer to /health: {error}"
    try:
        answer = json.loads(body or b"{}")
    except ValueError:
        answer = {}
    if not isinstance(answer, dict):
        answer = {}
    if status == 200 and str(answer.get("health")).lower() == "true":
        return ""
    # etcd 3.4 gives no reason: the reconcile finds out which (it reads the alarms itself).
    return str(answer.get("reason") or "").strip() or f"not healthy (/health: {status})"


def problems_summary(verdicts: dict[str, str]) -> str:
    """The members that do not serve and why, by ordinal: "" when all of them serve."""
    failing = sorted(((m, v) for m, v in verdicts.items() if v), key=lambda mv: ordinal_of(mv[0]))
    return "; ".join(f"{member}: {verdict}" for member, verdict in failing)


def _condition(cluster: dict, kind: str) -> str:
    for condition in (cluster.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return ""


def watched(cluster: dict) -> bool:
    """Whether the watch looks at a cluster: one the operator believes healthy and settled
    (Available, not Progressing), which it would otherwise not look at for minutes. A cluster
    that is not Available, or is changing (scale, upgrade, defragmentation: a learner or a
    restarting member is expected to fail /health), is already looked at every few seconds
    (polls) or every 30 s (Degraded); a paused one is left alone."""
    meta, spec = cluster.get("metadata", {}), cluster.get("spec") or {}
    return (
        not meta.get("deletionTimestamp")
        and not spec.get("paused")
        and _condition(cluster, "Available") == "True"
        and _condition(cluster, "Progressing") != "True"
    )


@dataclass
class NudgeMemory:
    """What the watch last reported, per cluster: (problems, monotonic time)."""

    last: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)

    def due(self, key: tuple[str, str], problems: str, now: float) -> bool:
        """Whether ``problems`` seen now on cluster ``key`` should wake its reconcile: a new
        problem at once, the same one again only after RENUDGE_SECONDS. A cluster seen
        healthy is forgotten, so that its next problem is reported at once."""
        if not problems:
            self.last.pop(key, None)
            return False
        previous = self.last.get(key)
        if previous and previous[0] == problems and now - previous[1] < RENUDGE_SECONDS:
            return False
        self.last[key] = (problems, now)
        return True


def plan_nudges(
    clusters: list[dict], verdicts: dict[tuple[str, str], dict[str, str]], memory, now: float
) -> list[tuple[str, str, str]]:
    """[(namespace, cluster, problems)] for the watched clusters whose members say they do not
    serve while the status says Available, and are due (``NudgeMemory``)."""
    nudges = []
    for cluster in clusters:
        meta = cluster.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if not watched(cluster):
            memory.last.pop(key, None)
            continue
        problems = problems_summary(verdicts.get(key) or {})
        if memory.due(key, problems, now):
            nudges.append((key[0], key[1], problems))
    return nudges


def own_secret_versions(cluster: dict) -> dict[str, str]:
    """The TLS Secrets of a watched cluster that the operator does not write (the user's own,
    or cert-manager's for an issuerRef), each with the resourceVersion the operator's last check
    saw: those status.tls.certificates records one for."""
    if not watched(cluster):
        return {}
    return {
        c["secretName"]: str(c["resourceVersion"])
        for c in ((cluster.get("status") or {}).get("tls") or {}).get("certificates") or []
        if c.get("secretName") and c.get("resourceVersion")
    }


def changed_secrets(recorded: dict[str, str], current: dict[str, str | None]) -> list[str]:
    """The Secrets whose resourceVersion is not the one recorded (a deleted one included)."""
    return sorted(name for name, version in recorded.items() if current.get(name) != version)


def annotation_value(problems: str, at: str) -> str:
    """The annotation's value: when, and what the watch saw (always new, so always a change)."""
    return f"{at} {problems}"


def parse_response(data: bytes, closed: bool) -> tuple[int, bytes, bool] | None:
    """The HTTP/1.x response at the start of ``data``: (status, body, whether the connection
    can carry another request), or None while it is incomplete. ``closed``: the server closed
    the connection after ``data``. ValueError for what is not a whole HTTP response."""
    head, separator, rest = data.partition(b"\r\n\r\n")
    if not separator:
        if closed:
            raise ValueError("the connection closed before a whole response")
        return None
    lines = head.decode("latin-1").split("\r\n")
    version, _, status_text = lines[0].partition(" ")
    if not version.startswith("HTTP/1.") or not status_text[:3].isdigit():
        raise ValueError(f"not an HTTP response: {lines[0][:40]!r}")
    status = int(status_text[:3])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip().lower()
    keep = version == "HTTP/1.1" and headers.get("connection") != "close" and not closed
    if headers.get("transfer-encoding") == "chunked":
        body = _chunked_body(rest)
        if body is None and closed:
            raise ValueError("the connection closed inside a chunked body")
        return None if body is None else (status, body, keep)
    if "content-length" in headers:
        length = int(headers["content-length"])
        if len(rest) >= length:
            return status, rest[:length], keep
        if closed:
            raise ValueError("the connection closed before the whole body")
        return None
    # Neither: the body ends where the server closes the connection.
    return (status, rest, False) if closed else None


def _chunked_body(data: bytes) -> bytes | None:
    """A chunked body decoded, or None while its last chunk has not arrived."""
    body, position = b"", 0
    while True:
        size_end = data.find(b"\r\n", position)
        if size_end < 0:
            return None
        size = int(data[position:size_end].split(b";")[0], 16)
        start = size_end + 2
        if size == 0:
            # The end of the (empty) trailer.
            return body if data.find(b"\r\n", start) >= 0 else None
        if len(data) < start + size + 2:
            return None
        body += data[start : start + size]
        position = start + size + 2


@dataclass
class _Exchange:
    """One member's request and answer within a round of ``HealthProber.probe_all``."""

    address: tuple[str, int]
    connection: socket.socket | None = None
    reused: bool = False
    received: bytes = b""
    verdict: str | None = None


class HealthProber:
    """Asks many members' ``/health`` at once, from one thread, over connections kept open
    from one round to the next.

    Why not http.client on a pool of threads, a new connection for each request: thread
    hand-offs and TCP handshakes were most of what the watch cost (0.017 core for 150 members
    every 5 s); non-blocking sockets kept open ask 30 members for 0.9 ms of CPU, not 7. The
    requests of a round share one deadline, so hung members delay a round by the timeout at
    most, however many hang. A kept connection the member has closed since (it restarted) is
    reopened once within the round; a member that did not answer in time loses its
    connection, on which a late answer would otherwise be read as the next round's."""

    def __init__(self, timeout: float = PROBE_TIMEOUT_SECONDS):
        self.timeout = timeout
        self.connections: dict[tuple[str, int], socket.socket] = {}

    def close(self) -> None:
        for connection in self.connections.values():
            connection.close()
        self.connections.clear()

    def probe_all(self, urls: list[str]) -> list[str]:
        """The verdict (``health_verdict``) of each ``/health`` URL, in order."""
        exchanges = {url: _Exchange(address_of(url)) for url in urls}
        wanted = {e.address for e in exchanges.values()}
        for address in [a for a in self.connections if a not in wanted]:
            self.connections.pop(address).close()  # a member gone, or no longer watched
        deadline = time.monotonic() + self.timeout
        with selectors.DefaultSelector() as selector:
            for exchange in exchanges.values():
                self._start(selector, exchange)
            while any(e.verdict is None for e in exchanges.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for key, events in selector.select(left):
                    self._advance(selector, key.data, events)
        for exchange in exchanges.values():
            if exchange.verdict is None:
                self._failed(exchange, TimeoutError("timed out"))
        return [exchanges[url].verdict for url in urls]

    def _start(self, selector, exchange: _Exchange) -> None:
        kept = self.connections.pop(exchange.address, None)
        exchange.received, exchange.reused = b"", kept is not None
        if kept is not None:
            exchange.connection = kept
            self._send(selector, exchange)
            return
        host = exchange.address[0]
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        exchange.connection = socket.socket(family, socket.SOCK_STREAM)
        exchange.connection.setblocking(False)
        error = exchange.connection.connect_ex(exchange.address)
        if error not in (0, errno.EINPROGRESS):
            self._failed(exchange, OSError(error, os.strerror(error)))
            return
        selector.register(exchange.connection, selectors.EVENT_WRITE, exchange)

    def _send(self, selector, exchange: _Exchange) -> None:
        host, port = exchange.address
        host = f"[{host}]" if ":" in host else host
        request = f"GET /health HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode("ascii")
        try:
            # A few dozen bytes: an idle connection's send buffer takes them whole.
            exchange.connection.send(request)
        except OSError as exc:
            if not self._retry(selector, exchange):
                self._failed(exchange, exc)
            return
        selector.register(exchange.connection, selectors.EVENT_READ, exchange)

    def _advance(self, selector, exchange: _Exchange, events: int) -> None:
        selector.unregister(exchange.connection)
        if events & selectors.EVENT_WRITE:  # connected, or not
            error = exchange.connection.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                self._failed(exchange, OSError(error, os.strerror(error)))
            else:
                self._send(selector, exchange)
            return
        try:
            data = exchange.connection.recv(65536)
        except BlockingIOError:
            data = None
        except OSError as exc:
            if exchange.received or not self._retry(selector, exchange):
                self._failed(exchange, exc)
            return
        if data is None:
            selector.register(exchange.connection, selectors.EVENT_READ, exchange)
            return
        if not data and not exchange.received:
            if not self._retry(selector, exchange):
                self._failed(exchange, ConnectionResetError("closed without an answer"))
            return
        exchange.received += data
        try:
            response = parse_response(exchange.received, closed=not data)
        except ValueError as exc:
            self._failed(exchange, exc)
            return
        if response is None:
            selector.register(exchange.connection, selectors.EVENT_READ, exchange)
            return
        status, body, keep = response
        self._finish(exchange, health_verdict(status, body), keep)

    def _retry(self, selector, exchange: _Exchange) -> bool:
        """A kept connection the member closed before answering: once, on a new one."""
        if not exchange.reused:
            return False
        exchange.connection.close()
        self._start(selector, exchange)
        return True

    def _failed(self, exchange: _Exchange, exc: Exception) -> None:
        # OSError(errno, ...) is built as its subclass: ConnectionRefusedError, ...
        error = f"{type(exc).__name__}: {exc}".rstrip(": ")
        self._finish(exchange, health_verdict(None, None, error), keep=False)

    def _finish(self, exchange: _Exchange, verdict: str, keep: bool) -> None:
        exchange.verdict = verdict
        if keep:
            self.connections[exchange.address] = exchange.connection
        elif exchange.connection is not None:
            exchange.connection.close()


def address_of(url: str) -> tuple[str, int]:
    parsed = urllib.parse.urlsplit(url)
    return parsed.hostname or "", parsed.port or 80


def probe(url: str, timeout: float = PROBE_TIMEOUT_SECONDS) -> str:
    """Ask one member's ``/health`` once: its verdict (``health_verdict``)."""
    prober = HealthProber(timeout)
    try:
        return prober.probe_all([url])[0]
    finally:
        prober.close()


def cached_list(kube, path, label_selector=None) -> dict:
    """The list at ``path`` from the API server's watch cache (resourceVersion=0): a list a
    moment old is fine for choosing whom to ask."""
    query = {"resourceVersion": "0", "labelSelector": label_selector}
    return kube.request("GET", path, query=query) or {}


def list_objects(kube, namespaces, api_version, kind, label_selector=None) -> list[dict]:
    """The objects of a kind in ``namespaces`` (all when empty), from the watch cache."""
    items = []
    for namespace in namespaces or (None,):
        path = kube.path(api_version, kind, namespace)
        items += cached_list(kube, path, label_selector).get("items") or []
    return items


def apply_event(objects: dict[tuple[str, str], dict], event: dict) -> str | None:
    """Apply one watch event to ``objects`` (by namespace and name): the resourceVersion to
    watch from next, or None when the watch must start over from a new list (an ERROR event:
    410 Gone, the version is older than the API server keeps)."""
    kind, obj = event.get("type"), event.get("object") or {}
    if kind == "ERROR":
        return None
    meta = obj.get("metadata") or {}
    key = (meta.get("namespace", ""), meta.get("name", ""))
    if kind == "DELETED":
        objects.pop(key, None)
    elif kind in ("ADDED", "MODIFIED"):
        objects[key] = obj
    return meta.get("resourceVersion")  # a BOOKMARK's too


class WatchedObjects:
    """The objects of one kind in the watched namespaces, kept current by watches (a thread
    for each namespace, or one for all), as an informer keeps them.

    Why: listing every member pod every round was the largest part of the watch's cost after
    the probes (a list of 150 pods is parsed whole every 5 s, though settled pods do not
    change); a watch parses a pod when it changes. ``items`` is None until the first list of
    each namespace arrived, and from a failed watch until the list after it: the caller lists
    them itself meanwhile."""

    def __init__(self, client_factory, api_version, kind, namespaces=(), selector=None, log=print):
        self.client_factory, self.api_version, self.kind = client_factory, api_version, kind
        self.namespaces, self.selector, self.log = namespaces or (None,), selector, log
        self.lock = threading.Lock()
        self.objects: dict[str | None, dict[tuple[str, str], dict]] = {}

    def start(self) -> WatchedObjects:
        for namespace in self.namespaces:
            threading.Thread(target=self.follow, args=(namespace,), daemon=True).start()
        return self

    def items(self) -> list[dict] | None:
        with self.lock:
            if len(self.objects) < len(self.namespaces):
                return None
            return [obj for objects in self.objects.values() for obj in objects.values()]

    def follow(self, namespace: str | None) -> None:
        """List, then watch from the list's version; again after the server ends each watch,
        from a new list after an error."""
        kube = self.client_factory()
        path = kube.path(self.api_version, self.kind, namespace)
        version = None
        while True:
            try:
                if version is None:
                    listing = cached_list(kube, path, self.selector)
                    objects = {}
                    for obj in listing.get("items") or []:
                        apply_event(objects, {"type": "ADDED", "object": obj})
                    with self.lock:
                        self.objects[namespace] = objects
                    version = (listing.get("metadata") or {}).get("resourceVersion")
                query = {"resourceVersion": version, "labelSelector": self.selector}
                for event in kube.watch(path, query):
                    with self.lock:
                        version = apply_event(self.objects[namespace], event)
                    if version is None:
                        break
            except Exception as exc:  # noqa: BLE001 - a thread that ended would go unseen
                # Until a new list arrives the caller lists for itself: what the watch last
                # saw may be out of date by now.
                with self.lock:
                    self.objects.pop(namespace, None)
                self.log(f"health-watch: watching {self.kind} objects: {exc}")
                version = None
                time.sleep(WATCH_RETRY_SECONDS)


class HealthWatch:
    """The loop: the watched clusters and their ready member pods (WatchedObjects, or a list
    each round), probe them, nudge."""

    def __init__(
        self, kube, namespaces=(), interval=DEFAULT_INTERVAL_SECONDS, log=print, watches=()
    ):
        self.kube, self.namespaces, self.interval, self.log = kube, namespaces, interval, log
        # WatchedObjects by kind (the member pods, the EtcdClusters); a kind without one, or
        # whose first list has not arrived, is listed every round.
        self.watches = {w.kind: w for w in watches}
        self.memory = NudgeMemory()
        self.prober = HealthProber()
        # The last round's answers, for the metrics (qk_metrics): replaced whole each round.
        self.verdicts: dict[tuple[str, str], dict[str, str]] = {}

    def list_objects(self, api_version, kind, label_selector=None):
        return list_objects(self.kube, self.namespaces, api_version, kind, label_selector)

    def current(self, api_version, kind, label_selector=None) -> list[dict]:
        watch = self.watches.get(kind)
        items = watch.items() if watch else None
        return self.list_objects(api_version, kind, label_selector) if items is None else items

    def run_once(self) -> list[tuple[str, str, str]]:
        # All of them to plan_nudges: one no longer watched (its reconcile reported the
        # problem) is forgotten there, so that the same problem after a recovery is news.
        clusters = self.current(API_VERSION, CLUSTER_KIND)
        names = {
            (c["metadata"]["namespace"], c["metadata"]["name"]) for c in clusters if watched(c)
        }
        pods = self.current("v1", "Pod", PEER_LABEL)
        probes = [p for p in member_probes(pods) if (p.namespace, p.cluster) in names]
        verdicts: dict[tuple[str, str], dict[str, str]] = {}
        answers = self.prober.probe_all([p.url for p in probes])
        for each, verdict in zip(probes, answers, strict=True):
            verdicts.setdefault((each.namespace, each.cluster), {})[each.member] = verdict
        self.verdicts = verdicts
        nudges = plan_nudges(clusters, verdicts, self.memory, time.monotonic())
        for namespace, name, problems in nudges:
            value = annotation_value(problems, now_timestamp())
            patch = {"metadata": {"annotations": {HEALTH_ANNOTATION: value}}}
            try:
                self.kube.patch(API_VERSION, CLUSTER_KIND, name, patch, namespace=namespace)
                self.log(f"health-watch: {namespace}/{name}: {problems}: reconcile asked for")
            except KubeError as exc:
                self.log(f"health-watch: {namespace}/{name}: could not annotate: {exc}")
        self.check_secrets(clusters)
        return nudges

    def secret_version(self, namespace: str, name: str) -> str | None:
        path = self.kube.path("v1", "Secret", namespace, name)
        try:
            secret = self.kube.request("GET", path, query={"resourceVersion": "0"})
        except KubeError as exc:
            if exc.not_found:
                return None
            raise
        return str(((secret or {}).get("metadata") or {}).get("resourceVersion") or "")

    def check_secrets(self, clusters) -> list[tuple[str, str, list[str]]]:
        """Annotate each watched cluster one of whose own TLS Secrets changed since the
        operator checked it: [(namespace, cluster, Secrets)]. Each change is said once."""
        changes = []
        for cluster in clusters:
            recorded = own_secret_versions(cluster)
            if not recorded:
                continue
            meta = cluster["metadata"]
            namespace = meta.get("namespace", "")
            current = {name: self.secret_version(namespace, name) for name in recorded}
            changed = changed_secrets(recorded, current)
            value = ", ".join(f"{name}@{current[name] or 'deleted'}" for name in changed)
            annotations = meta.get("annotations") or {}
            if not changed or annotations.get(SECRETS_ANNOTATION) == value:
                continue
            patch = {"metadata": {"annotations": {SECRETS_ANNOTATION: value}}}
            try:
                self.kube.patch(API_VERSION, CLUSTER_KIND, meta["name"], patch, namespace=namespace)
                self.log(f"health-watch: {namespace}/{meta['name']}: TLS Secrets changed: {value}")
                changes.append((namespace, meta["name"], changed))
            except KubeError as exc:
                self.log(f"health-watch: {namespace}/{meta['name']}: could not annotate: {exc}")
        return changes

    def run_forever(self):
        self.log(
            f"health-watch: every {self.interval:g} s, namespaces "
            f"{', '.join(self.namespaces) or 'all'}"
        )
        while True:
            started = time.monotonic()
            try:
                self.run_once()
            except KubeError as exc:
                # The API server restarting or unreachable: try again next round.
                self.log(f"health-watch: {exc}")
            time.sleep(max(0.0, self.interval - (time.monotonic() - started)))


class Stopping(Exception):
    """SIGTERM: the pod is stopping."""


def _stopping(signum, frame):
    raise Stopping


def own_namespace() -> str:
    """Where the manager's leader election Lease is: its pod's namespace."""
    namespace = os.environ.get("POD_NAMESPACE", "")
    file = os.path.join(SERVICE_ACCOUNT_DIR, "namespace")
    if not namespace and os.path.exists(file):
        with open(file) as stream:
            namespace = stream.read().strip()
    return namespace


def watch_namespaces(value: str | None) -> tuple[str, ...]:
    """ansible-operator's WATCH_NAMESPACE: empty for all, else a comma-separated list."""
    return tuple(n.strip() for n in (value or "").split(",") if n.strip())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--interval",
        type=float,
        default=float(os.environ.get("QK_HEALTH_WATCH_INTERVAL") or DEFAULT_INTERVAL_SECONDS),
        help="seconds between two looks at every member (QK_HEALTH_WATCH_INTERVAL)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=int(os.environ.get("QK_METRICS_PORT") or DEFAULT_EXPORTER_PORT),
        help="serve the operator's metrics (qk_metrics) on this port, 0 for none (QK_METRICS_PORT)",
    )
    parser.add_argument("--once", action="store_true", help="look once, print the nudges")
    args = parser.parse_args(argv)
    namespaces = watch_namespaces(os.environ.get("WATCH_NAMESPACE"))

    def log(message):
        print(message, flush=True)

    watches = ()
    if not args.once:
        watches = (
            WatchedObjects(direct_client, "v1", "Pod", namespaces, PEER_LABEL, log).start(),
            WatchedObjects(direct_client, API_VERSION, CLUSTER_KIND, namespaces, None, log).start(),
        )
    watch = HealthWatch(direct_client(), namespaces, args.interval, log, watches)
    if args.once:
        print(json.dumps(watch.run_once()))
        return 0
    if args.metrics_port:
        # A client of its own: the server answers scrapes from another thread, and a
        # KubeClient's one connection carries one request at a time.
        metrics_kube = direct_client()
        MetricsServer(
            lambda api_version, kind: list_objects(metrics_kube, namespaces, api_version, kind),
            lambda: watch.verdicts,
            args.metrics_port,
        ).start()
        print(f"health-watch: the operator's metrics on :{args.metrics_port}/metrics", flush=True)
    # The manager's leader election Lease (its --leader-election-id), released once the manager
    # has stopped (qk_leader_lease): its successor need not wait for the Lease to expire.
    lease = os.environ.get("QK_LEADER_LEASE", "")
    if lease:
        signal.signal(signal.SIGTERM, _stopping)
    try:
        watch.run_forever()
    except Stopping:
        outcome = release_when_stopped(
            direct_client(),
            own_namespace(),
            lease,
            socket.gethostname(),
            int(os.environ.get("QK_MANAGER_PROBE_PORT") or DEFAULT_MANAGER_PROBE_PORT),
            LEASE_RELEASE_WAIT_SECONDS,
        )
        log(f"health-watch: stopping: {outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
