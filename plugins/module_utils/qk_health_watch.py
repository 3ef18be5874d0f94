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

The decisions (which members, what a ``/health`` answer means, when to nudge) are pure and unit
tested; ``HealthWatch`` runs them against the API server and the members. Run as
``python3 -m ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_health_watch``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
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
    KubeError,
    direct_client,
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
PROBE_WORKERS = 16


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


def probe(url: str, timeout: float = PROBE_TIMEOUT_SECONDS) -> str:
    """Ask one member's ``/health``: its verdict (``health_verdict``)."""
    host_port = url.split("://", 1)[1].split("/", 1)[0]
    connection = http.client.HTTPConnection(host_port, timeout=timeout)
    try:
        connection.request("GET", "/health")
        response = connection.getresponse()
        return health_verdict(response.status, response.read())
    except (OSError, http.client.HTTPException) as exc:
        return health_verdict(None, None, f"{type(exc).__name__}: {exc}".rstrip(": "))
    finally:
        connection.close()


class HealthWatch:
    """The loop: list the watched clusters and their ready member pods, probe them, nudge."""

    def __init__(self, kube, namespaces=(), interval=DEFAULT_INTERVAL_SECONDS, log=print):
        self.kube, self.namespaces, self.interval, self.log = kube, namespaces, interval, log
        self.memory = NudgeMemory()
        self.pool = ThreadPoolExecutor(max_workers=PROBE_WORKERS)
        # The last round's answers, for the metrics (qk_metrics): replaced whole each round.
        self.verdicts: dict[tuple[str, str], dict[str, str]] = {}

    def list_objects(self, api_version, kind, label_selector=None):
        """From the API server's watch cache (resourceVersion=0): it is polled every few
        seconds, and a list that is a moment old is fine for choosing whom to ask."""
        items = []
        for namespace in self.namespaces or (None,):
            path = self.kube.path(api_version, kind, namespace)
            query = {"resourceVersion": "0", "labelSelector": label_selector}
            items += (self.kube.request("GET", path, query=query) or {}).get("items") or []
        return items

    def run_once(self) -> list[tuple[str, str, str]]:
        # All of them to plan_nudges: one no longer watched (its reconcile reported the
        # problem) is forgotten there, so that the same problem after a recovery is news.
        clusters = self.list_objects(API_VERSION, CLUSTER_KIND)
        names = {
            (c["metadata"]["namespace"], c["metadata"]["name"]) for c in clusters if watched(c)
        }
        probes = [
            p
            for p in member_probes(self.list_objects("v1", "Pod", label_selector=PEER_LABEL))
            if (p.namespace, p.cluster) in names
        ]
        verdicts: dict[tuple[str, str], dict[str, str]] = {}
        answers = self.pool.map(probe, [p.url for p in probes])
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
    watch = HealthWatch(
        direct_client(), namespaces, args.interval, log=lambda m: print(m, flush=True)
    )
    if args.once:
        print(json.dumps(watch.run_once()))
        return 0
    if args.metrics_port:
        MetricsServer(watch.list_objects, lambda: watch.verdicts, args.metrics_port).start()
        print(f"health-watch: the operator's metrics on :{args.metrics_port}/metrics", flush=True)
    watch.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
