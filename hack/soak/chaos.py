"""Rounds of faults against one EtcdCluster while the workload records a history; the report.

One fault per round, always a minority of the members (one member, or the operator):

- ``kill-etcd``: SIGKILL a member's etcd container (faults.crash_pod); it restarts in its pod.
- ``delete-pod``: delete a member's pod; its ReplicaSet makes a new one on the same PVC.
- ``delete-pod-pvc``: delete a member's PVC and pod; the operator replaces the member (new
  member ID, empty volume).
- ``partition``: cut a member's pod off the network (faults.partition_pod) for a while, heal.
- ``stop-node``: stop the node agent (kubelet) of a node holding a minority of the members for a
  while, start it again; the pods keep running, Kubernetes sees the node NotReady.
- ``kill-operator``: kill the operator's pod (SIGKILL of its container, or a pod deletion) at a
  random moment during a change: a member's PVC lost (mid-replace), a scale-up by two
  (mid-scale, scaled back afterwards), a member's etcd killed (mid-restart), or nothing (idle).
- ``defragment``: ask for a defragmentation of every member (annotation
  etcd.quorumkeeper.dev/defragment); the operator does one member at a time, the leader last.
- ``nospace``: another client overwrites a few keys of its own with large values until etcd
  refuses a write with NOSPACE (the workload's writes are refused too); the operator compacts,
  defragments and disarms the alarm by itself.

After each fault the round waits (up to ``recovery_timeout``) until the cluster has recovered:
the EtcdCluster is Available for its current spec with every member healthy, voting and its pod
ready (status, observedGeneration current); every member's pod is Ready; etcd itself lists the
spec's number of started voting members and each answers Status through its pod IP with the
same leader; and the fault's own effect was seen through (the pod restarted or was replaced, the
member replaced, the node Ready, the operator leading again, the defragmentation request
answered, the NOSPACE alarm gone and writes accepted again). The recovery time runs from the
fault's injection to that moment. A round that does not recover ends the soak: its state,
Events and the operator's log are saved for debugging.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("QK_CACHE", Path.home() / ".cache" / "quorumkeeper"))
for _path in (ROOT / "hack" / "cluster", ROOT / "collections"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import faults  # noqa: E402  (hack/cluster/faults.py)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils import qk_etcd_errors  # noqa: E402
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (  # noqa: E402
    ConnectionProfile,
    etcd_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_maintenance import (  # noqa: E402
    last_defragmentation,
)
from kubernetes import client as k8s  # noqa: E402
from kubernetes import config as k8s_config  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from .history import History, check  # noqa: E402
from .workload import Workload  # noqa: E402

GROUP, VERSION, PLURAL = "etcd.quorumkeeper.dev", "v1alpha1", "etcdclusters"
CLUSTER_LABEL = "etcd.quorumkeeper.dev/cluster"
PEER_LABEL = "etcd.quorumkeeper.dev/peer"
OPERATOR_NAMESPACE = "quorumkeeper-system"
OPERATOR_SELECTOR = "control-plane=controller-manager"
OPERATOR_LEASE = "quorumkeeper"
KINDS = (
    "kill-etcd",
    "delete-pod",
    "delete-pod-pvc",
    "partition",
    "stop-node",
    "kill-operator",
    "defragment",
    "nospace",
)
DEFRAGMENT_ANNOTATION = "etcd.quorumkeeper.dev/defragment"
OPERATOR_SCENARIOS = ("mid-replace", "mid-scale", "mid-restart", "idle")
# nospace: the filling client overwrites this many keys with values this large, so that the
# live data stays small (a few MiB) and what fills the quota is history the operator can compact.
FILL_KEYS, FILL_VALUE_BYTES = 8, 384 * 1024


@dataclass
class Config:
    rounds: int = 12
    kinds: tuple = KINDS
    replicas: int = 3
    clients: int = 4
    keys: int = 3
    rate: float = 10.0  # operations per second per client
    op_timeout: float = 2.0
    seed: int = field(default_factory=lambda: random.SystemRandom().randrange(1 << 30))
    traffic_before_fault: float = 2.0  # seconds of workload on the round's keys before a fault
    fault_duration: tuple = (3.0, 12.0)  # a partition lasts this long
    # A stopped node agent: long enough for the node to go NotReady (the local cluster's
    # node-monitor-grace-period is 20 s; about 12 s in practice) and its pods with it.
    node_stop_duration: tuple = (15.0, 30.0)
    operator_delay: tuple = (0.0, 6.0)  # kill-operator: that long after the change starts
    operator_scenarios: tuple = OPERATOR_SCENARIOS
    recovery_timeout: float = 180.0
    create_timeout: float = 300.0
    budget: float | None = None  # start no new round after this many seconds of soak
    checker_timeout: float = 300.0


class RoundFailed(Exception):
    pass


class RoundSkipped(Exception):
    """The fault cannot be injected as a minority fault now (e.g. no node holds a minority)."""


def spread_members(manifest: dict) -> dict:
    """The manifest, its members preferring distinct nodes unless it already says where they go.

    The stop-node fault needs a node that holds only a minority of the members; the scheduler's
    default spreading alone has been seen to put all three on one node."""
    manifest = copy.deepcopy(manifest)
    template = manifest["spec"].setdefault("podTemplate", {})
    if "affinity" not in template:
        name = manifest["metadata"]["name"]
        template["affinity"] = {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": {CLUSTER_LABEL: name}},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            }
        }
    return manifest


class Cluster:
    """The EtcdCluster under test, read through the Kubernetes API (kubernetes client: polled
    twice a second, kubectl processes would cost more than what they measure)."""

    def __init__(self, kubeconfig: Path, namespace: str, name: str):
        api = k8s_config.new_client_from_config(config_file=str(kubeconfig))
        self.core, self.custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
        self.coordination = k8s.CoordinationV1Api(api)
        self.namespace, self.name = namespace, name
        self.selector = f"{CLUSTER_LABEL}={name}"

    def get(self) -> dict:
        return self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, self.name
        )

    def apply(self, manifest: dict) -> None:
        try:
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, manifest
            )
        except ApiException as error:
            if error.status != 409:
                raise

    def scale(self, replicas: int) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, self.name, {"spec": {"replicas": replicas}}
        )

    def pods(self) -> list[dict]:
        items = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        return [self.core.api_client.sanitize_for_serialization(p) for p in items]

    def live_pods(self) -> dict[str, dict]:
        """peer -> its pod that is not being deleted (a peer with two is reported by pods_ok)."""
        out = {}
        for pod in self.pods():
            if not pod["metadata"].get("deletionTimestamp"):
                out.setdefault(pod["metadata"]["labels"].get(PEER_LABEL, ""), pod)
        return out

    def pvcs(self) -> dict[str, dict]:
        items = self.core.list_namespaced_persistent_volume_claim(
            self.namespace, label_selector=self.selector
        ).items
        return {
            p.metadata.name: {
                "uid": p.metadata.uid,
                "deleting": bool(p.metadata.deletion_timestamp),
            }
            for p in items
        }

    def client_endpoint(self) -> str:
        service = self.core.read_namespaced_service(f"{self.name}-client", self.namespace)
        return f"http://{service.spec.cluster_ip}:2379"

    def delete_pod(self, name: str) -> None:
        self.core.delete_namespaced_pod(name, self.namespace)

    def annotate(self, annotations: dict[str, str]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            self.name,
            {"metadata": {"annotations": annotations}},
        )

    def delete_pvc(self, name: str) -> None:
        self.core.delete_namespaced_persistent_volume_claim(name, self.namespace)

    def node_ready(self, node: str) -> bool:
        conditions = self.core.read_node(node).status.conditions or []
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    # -- the operator -----------------------------------------------------------------------------
    def operator_pods(self) -> list[dict]:
        items = self.core.list_namespaced_pod(
            OPERATOR_NAMESPACE, label_selector=OPERATOR_SELECTOR
        ).items
        pods = [self.core.api_client.sanitize_for_serialization(p) for p in items]
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def operator_holder(self) -> str:
        lease = self.coordination.read_namespaced_lease(OPERATOR_LEASE, OPERATOR_NAMESPACE)
        return lease.spec.holder_identity or ""

    # -- events, for debugging --------------------------------------------------------------------
    def events(self, namespace: str) -> list[dict]:
        out = []
        for e in self.core.list_namespaced_event(namespace).items:
            when = e.last_timestamp or e.event_time or e.first_timestamp
            out.append(
                {
                    "time": when.replace(microsecond=0).isoformat() if when else "",
                    "type": e.type,
                    "reason": e.reason,
                    "object": f"{e.involved_object.kind}/{e.involved_object.name}",
                    "message": e.message,
                    "count": e.count,
                }
            )
        return sorted(out, key=lambda e: e["time"])


def member_endpoints(ips: dict[str, str | None]) -> list[str]:
    """etcd's client URLs at the members' pod IPs (the members advertise cluster DNS names,
    which this host does not resolve), in peer order."""
    return [f"http://{ip}:2379" for _, ip in sorted(ips.items()) if ip]


def wall_clock() -> str:
    """Now, as the Events' timestamps are written (UTC, whole seconds), to compare with them."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def ready(pod: dict) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def restarts(pod: dict, container: str) -> int:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return next((int(s.get("restartCount", 0)) for s in statuses if s["name"] == container), 0)


class Soak:
    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        name: str,
        manifest: dict,
        config: Config,
        artifacts: Path,
        log=print,
    ):
        self.cluster = Cluster(kubeconfig, namespace, name)
        self.kubeconfig, self.manifest, self.config = kubeconfig, spread_members(manifest), config
        self.artifacts, self.log = artifacts, log
        self.rng = random.Random(config.seed)
        self.history = History()
        self.replicas = config.replicas
        self.rounds: list[dict] = []
        self.timeline: list[dict] = []
        self.failures: list[str] = []
        self.scenarios = list(config.operator_scenarios)
        self.workload: Workload | None = None
        self.rng.shuffle(self.scenarios)

    # -- bookkeeping ------------------------------------------------------------------------------
    def now(self) -> float:
        """Seconds since the history's epoch (the history's call/return nanoseconds / 1e9)."""
        return self.history.now() / 1e9

    def note(self, text: str, **fields) -> None:
        entry = {"t": round(self.now(), 3), "event": text, **fields}
        self.timeline.append(entry)
        self.log(f"[soak {entry['t']:8.1f}s] {text}" + (f" {fields}" if fields else ""))

    def schedule(self) -> list[str]:
        """Every kind equally often: shuffled cycles through the configured kinds."""
        order = []
        while len(order) < self.config.rounds:
            cycle = list(self.config.kinds)
            self.rng.shuffle(cycle)
            order.extend(cycle)
        return order[: self.config.rounds]

    # -- recovery ---------------------------------------------------------------------------------
    def status_problems(self, replicas: int) -> list[str]:
        cluster = self.cluster.get()
        status = cluster.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        problems = []
        available = conditions.get("Available", {})
        if available.get("status") != "True":
            problems.append(f"Available={available.get('status')} ({available.get('reason')})")
        if status.get("observedGeneration") != cluster["metadata"]["generation"]:
            problems.append("status.observedGeneration is not the spec's generation")
        members = status.get("members") or []
        if len(members) != replicas:
            problems.append(f"status shows {len(members)} members, want {replicas}")
        pods = self.cluster.live_pods()
        for m in members:
            if not m.get("healthy") or m.get("isLearner") or m.get("podReady") is False:
                problems.append(
                    f"status member {m.get('name')}: healthy={m.get('healthy')} "
                    f"learner={m.get('isLearner')} podReady={m.get('podReady')}"
                )
            pod = pods.get(m.get("name"))
            # The status must show the member's current pod and restart count: the operator
            # has seen the fault, not only missed it.
            if pod is not None and m.get("pod") not in (None, pod["metadata"]["name"]):
                problems.append(f"status member {m['name']}: pod {m.get('pod')}, not the current")
            if pod is not None and m.get("restarts") not in (None, restarts(pod, "etcd")):
                problems.append(
                    f"status member {m['name']}: restarts {m.get('restarts')} not current"
                )
        if status.get("readyReplicas", replicas) != replicas:
            problems.append(f"readyReplicas={status.get('readyReplicas')}, want {replicas}")
        return problems

    def pod_problems(self, replicas: int) -> list[str]:
        pods = [p for p in self.cluster.pods() if not p["metadata"].get("deletionTimestamp")]
        peers = [p["metadata"]["labels"].get(PEER_LABEL, "") for p in pods]
        problems = []
        if sorted(peers) != sorted(set(peers)) or len(peers) != replicas:
            problems.append(f"member pods {sorted(peers)}, want one each for {replicas} members")
        problems += [f"pod {p['metadata']['name']} not Ready" for p in pods if not ready(p)]
        live_pvcs = [n for n, p in self.cluster.pvcs().items() if not p["deleting"]]
        if len(live_pvcs) != replicas:
            problems.append(f"PVCs {sorted(live_pvcs)}, want {replicas}")
        return problems

    def etcd_problems(self, replicas: int) -> list[str]:
        """What etcd itself says, through the members' pod IPs (the members advertise cluster DNS
        names, which this host does not resolve; and the client Service may pick a learner,
        which refuses the member list)."""
        ips = self.member_ips()
        endpoints = member_endpoints(ips)
        if not endpoints:
            return ["no member pod has an IP"]
        with etcd_client(ConnectionProfile(endpoints, timeout=2)) as etcd:
            try:
                members, _, _ = etcd.member_list()
            except qk_etcd_errors.EtcdUnreachable as error:
                return [f"etcd member list: {error}"]
            problems = []
            voters = [m for m in members if not m["is_learner"] and m["name"]]
            if len(voters) != replicas or len(members) != replicas:
                names = [
                    f"{m['name'] or '(unstarted)'}{'*' if m['is_learner'] else ''}" for m in members
                ]
                problems.append(f"etcd members {names} (* learner), want {replicas} voting")
            leaders = set()
            for m in members:
                ip = ips.get(m["name"])
                if not ip:
                    problems.append(f"member {m['name']}: no pod IP")
                    continue
                try:
                    status = etcd.status(f"http://{ip}:2379")
                except Exception as error:  # noqa: BLE001 - reported as the reason to wait
                    problems.append(f"member {m['name']}: {qk_etcd_errors.describe_error(error)}")
                    continue
                leaders.add(status["leader"])
                if status["errors"]:
                    problems.append(f"member {m['name']}: errors {status['errors']}")
            if len(leaders) > 1 or None in leaders:
                problems.append(f"members disagree on the leader: {sorted(map(str, leaders))}")
            return problems

    def wait_recovered(
        self,
        replicas: int,
        evidence,
        started: float,
        waits: list | None = None,
        timeout: float | None = None,
    ) -> float:
        """Seconds from ``started`` until everything agrees the cluster is whole; RoundFailed
        naming what was still wrong at the deadline. ``waits`` gets what was waited for each time
        that changes, with the seconds since ``started``: the first problem of each view (the
        fault's evidence, the status, the pods, etcd), so that one can tell e.g. a status that
        lags from a member that is not back."""
        timeout = timeout or self.config.recovery_timeout
        deadline = time.monotonic() + timeout
        views = (
            evidence,
            lambda: self.status_problems(replicas),
            lambda: self.pod_problems(replicas),
            lambda: self.etcd_problems(replicas),
        )
        while True:
            problems: list[str] = []
            first: list[str] = []
            for view in views:
                try:
                    found = view() or []
                except ApiException as error:
                    found = [f"Kubernetes API: {error.status} {error.reason}"]
                problems += found
                first += found[:1]
            waiting_for = "; ".join(first)
            if waits is not None and problems and (not waits or waits[-1][1] != waiting_for):
                waits.append((round(self.now() - started, 1), waiting_for))
            if not problems:
                return self.now() - started
            if time.monotonic() > deadline:
                raise RoundFailed(f"not recovered after {timeout:.0f}s: " + "; ".join(problems))
            time.sleep(0.5)

    def events_since(self, since: str, limit: int = 40) -> list[str]:
        """The cluster namespace's Events since ``since``, one line each, to read a round by."""
        lines = [
            f"{e['time'][11:19]} {e['reason']} {e['object']}: {(e['message'] or '')[:160]}"
            for e in self.cluster.events(self.cluster.namespace)
            if e["time"] >= since
        ]
        return lines[:limit]

    # -- the faults -------------------------------------------------------------------------------
    def pick_member(self) -> tuple[str, dict]:
        """The leader half of the time (its loss is the one that costs an election), else one of
        the followers."""
        pods = self.cluster.live_pods()
        leader = self.leader()
        followers = sorted(p for p in pods if p != leader)
        if leader in pods and (not followers or self.rng.random() < 0.5):
            return leader, pods[leader]
        peer = self.rng.choice(followers)
        return peer, pods[peer]

    def leader(self) -> str:
        leader = (self.cluster.get().get("status") or {}).get("leader") or ""
        return leader.get("name", "") if isinstance(leader, dict) else str(leader)

    def inject_kill_etcd(self, record: dict):
        peer, pod = self.pick_member()
        uid, before = pod["metadata"]["uid"], restarts(pod, "etcd")
        record.update(target=peer, leader=self.leader() == peer)
        killed = faults.crash_pod(self.cluster.namespace, pod["metadata"]["name"], "etcd")
        record["injected"] = self.now()
        self.note("killed etcd", member=peer, pids=killed)

        def evidence():
            now = self.cluster.live_pods().get(peer)
            if now is None:
                return [f"{peer} has no pod"]
            if now["metadata"]["uid"] == uid and restarts(now, "etcd") <= before:
                return [f"{peer}'s etcd not restarted yet"]
            return []

        return evidence

    def inject_delete_pod(self, record: dict):
        peer, pod = self.pick_member()
        uid = pod["metadata"]["uid"]
        record.update(target=peer, leader=self.leader() == peer)
        self.cluster.delete_pod(pod["metadata"]["name"])
        record["injected"] = self.now()
        self.note("deleted pod", member=peer, pod=pod["metadata"]["name"])
        return self._new_pod_evidence(peer, uid)

    def _new_pod_evidence(self, peer: str, uid: str):
        def evidence():
            now = self.cluster.live_pods().get(peer)
            return (
                [] if now is not None and now["metadata"]["uid"] != uid else [f"{peer}: no new pod"]
            )

        return evidence

    def _member_ids(self) -> dict[str, str]:
        members = (self.cluster.get().get("status") or {}).get("members") or []
        return {m["name"]: m.get("id", "") for m in members}

    def _lose_member_data(self, record: dict) -> tuple[str, callable]:
        peer, pod = self.pick_member()
        member_id = self._member_ids().get(peer)
        pvc_uid = self.cluster.pvcs().get(peer, {}).get("uid")
        record.update(target=peer, leader=self.leader() == peer, member_id=member_id)
        self.cluster.delete_pvc(peer)
        self.cluster.delete_pod(pod["metadata"]["name"])
        record["injected"] = self.now()
        self.note("deleted PVC and pod", member=peer, member_id=member_id)

        def evidence():
            problems = []
            pvc = self.cluster.pvcs().get(peer)
            if pvc is None or pvc["uid"] == pvc_uid:
                problems.append(f"{peer}: no new PVC")
            now = self._member_ids().get(peer)
            if not now or now == member_id:
                problems.append(f"{peer}: member not replaced (id {now})")
            return problems

        return peer, evidence

    def inject_delete_pod_pvc(self, record: dict):
        return self._lose_member_data(record)[1]

    def hold(self, span: tuple) -> float:
        return round(self.rng.uniform(*span), 1)

    def inject_partition(self, record: dict):
        peer, pod = self.pick_member()
        name, duration = pod["metadata"]["name"], self.hold(self.config.fault_duration)
        record.update(target=peer, leader=self.leader() == peer, duration=duration)
        veth = faults.partition_pod(self.cluster.namespace, name)
        record["injected"] = self.now()
        self.note("partitioned", member=peer, veth=veth, seconds=duration)
        try:
            time.sleep(duration)  # the length of the fault, chosen above
        finally:
            try:
                faults.heal_pod(self.cluster.namespace, name)
                self.note("healed", member=peer)
            except faults.FaultError as error:  # the pod (and its veth) was replaced meanwhile
                self.note("nothing to heal", member=peer, why=str(error))
        record["healed"] = self.now()
        return lambda: []

    def inject_stop_node(self, record: dict):
        pods = self.cluster.live_pods()
        on_node: dict[str, list[str]] = {}
        for peer, pod in pods.items():
            on_node.setdefault(pod["spec"].get("nodeName", ""), []).append(peer)
        minority = (self.replicas - 1) // 2
        candidates = sorted(n for n, peers in on_node.items() if n and len(peers) <= minority)
        if not candidates:
            raise RoundSkipped(f"no node holds a minority of the members: {on_node}")
        node = self.rng.choice(candidates)
        duration = self.hold(self.config.node_stop_duration)
        record.update(target=node, members=on_node[node], duration=duration)
        faults.stop_node(node)
        record["injected"] = self.now()
        self.note("stopped node agent", node=node, members=on_node[node], seconds=duration)
        try:
            time.sleep(duration)  # the length of the fault, chosen above
        finally:
            faults.start_node(node)
            self.note("started node agent", node=node)
        record["healed"] = self.now()
        return lambda: [] if self.cluster.node_ready(node) else [f"node {node} not Ready"]

    def inject_kill_operator(self, record: dict):
        # Both ways of killing it, alternating, and swapped on each pass through the scenarios.
        n = sum(r["kind"] == "kill-operator" for r in self.rounds[:-1])
        how = ("crash", "delete")[(n + n // len(self.scenarios)) % 2]
        scenario = self.scenarios[n % len(self.scenarios)]
        low, high = self.config.operator_delay
        delay = round(self.rng.uniform(low, high), 1)
        record.update(scenario=scenario, how=how, delay=delay)
        holder = self.cluster.operator_holder()
        evidence_of_change = None
        if scenario == "mid-replace":
            _, evidence_of_change = self._lose_member_data(record)
        elif scenario == "mid-restart":
            evidence_of_change = self.inject_kill_etcd(record)
        elif scenario == "mid-scale":
            self.replicas = self.config.replicas + 2
            self.cluster.scale(self.replicas)
            record["injected"] = self.now()
            self.note("scaled up", replicas=self.replicas)
        else:
            record["injected"] = self.now()
        time.sleep(delay)  # the random moment of the kill, chosen above
        pod = self.one_ready_operator_pod()
        if how == "crash":
            faults.crash_pod(OPERATOR_NAMESPACE, pod["metadata"]["name"])
        else:
            self.cluster.core.delete_namespaced_pod(pod["metadata"]["name"], OPERATOR_NAMESPACE)
        # Recovery counts from the kill; the change it interrupted started earlier.
        record["change_started"], record["injected"] = record.get("injected"), self.now()
        self.note(f"operator {how}", pod=pod["metadata"]["name"], scenario=scenario)

        def evidence():
            problems = evidence_of_change() if evidence_of_change else []
            live = [p for p in self.cluster.operator_pods() if ready(p)]
            now = self.cluster.operator_holder()
            if now == holder or not any(now.startswith(p["metadata"]["name"] + "_") for p in live):
                problems.append(f"operator not leading again (lease holder {now!r})")
            return problems

        return evidence

    def one_ready_operator_pod(self, timeout: float = 60) -> dict:
        """The operator's one pod, once it is ready: only a running operator can be killed, and
        a pod the API server has just made may not have reached its node agent yet (CI once
        found the operator's new pod there 10 s after the API server had it)."""
        deadline = time.monotonic() + timeout
        while True:
            pods = self.cluster.operator_pods()
            if len(pods) == 1 and ready(pods[0]):
                return pods[0]
            if time.monotonic() > deadline:
                seen = [
                    f"{p['metadata']['name']} ({p.get('status', {}).get('phase')}, "
                    f"{'ready' if ready(p) else 'not ready'})"
                    for p in pods
                ]
                raise RoundFailed(f"want 1 ready operator pod after {timeout:.0f} s, saw {seen}")
            time.sleep(0.5)

    def inject_defragment(self, record: dict):
        """Every member defragmented on request while the workload runs (one at a time, the
        leader last after moving leadership): recovered once the status answers the request."""
        token = f"soak-{record['round']}-{self.rng.randrange(1 << 24):06x}"
        record.update(target="every member", request=token)
        self.cluster.annotate({DEFRAGMENT_ANNOTATION: token})
        record["injected"] = self.now()
        self.note("defragmentation requested", request=token)

        def evidence():
            last = self._last_defragmentation()
            return [] if last.get("request") == token else [f"request {token} not answered"]

        return evidence

    def inject_nospace(self, record: dict):
        """The database filled to its quota under the workload: a client of its own overwrites
        FILL_KEYS keys with large values until etcd refuses a put with NOSPACE. Recovered once
        the status records a NOSPACE recovery newer than the round, etcd lists no alarm and a
        put is accepted again (the workload's puts were refused meanwhile: indeterminate, as
        etcd may have applied the put that crossed the quota)."""
        before = self._last_defragmentation().get("at")
        # The operator answers NOSPACE with a compaction: the writes so far are read back at
        # their revisions now, and the fill's own window right after the refusal.
        self.workload.read_back(timeout=30)
        endpoint = self.cluster.client_endpoint()
        prefix = f"/soak-fill/{self.config.seed}/"
        value = os.urandom(FILL_VALUE_BYTES)
        written, errors = 0, []
        deadline = time.monotonic() + self.config.recovery_timeout
        with etcd_client(ConnectionProfile([endpoint], timeout=10)) as etcd:
            while True:
                if time.monotonic() > deadline:
                    raise RoundFailed(f"no NOSPACE after {written} writes of {len(value)} bytes")
                rotated = value[written % 1024 :] + value[: written % 1024]  # no two alike
                try:
                    etcd.put(f"{prefix}{written % FILL_KEYS}", rotated)
                    written += 1
                except (qk_etcd_errors.EtcdOperationError, qk_etcd_errors.EtcdUnreachable) as e:
                    if "space exceeded" in str(e):
                        break
                    errors.append(str(e)[:200])
                    if len(errors) > 20:
                        raise RoundFailed(f"the fill failed before NOSPACE: {errors[-3:]}") from e
        record.update(target="every member", fill_writes=written, fill_errors=len(errors))
        record["injected"] = self.now()
        self.note("writes refused with NOSPACE", fill_writes=written)
        self.workload.read_back(timeout=5)

        def evidence():
            last = self._last_defragmentation()
            if last.get("reason") != "NOSPACE" or last.get("at") == before:
                return ["no NOSPACE recovery in status.maintenance.lastDefragmentation"]
            endpoints = member_endpoints(self.member_ips())
            with etcd_client(ConnectionProfile(endpoints, timeout=2)) as etcd:
                try:
                    if alarms := etcd.alarms():
                        return [f"etcd alarms {alarms}"]
                    etcd.put(f"{prefix}0", b"accepted again")
                except (qk_etcd_errors.EtcdOperationError, qk_etcd_errors.EtcdUnreachable) as e:
                    return [f"a write after the recovery: {e}"]
            return []

        return evidence

    def _last_defragmentation(self) -> dict:
        return last_defragmentation(self.cluster.get().get("status"))

    def member_ips(self) -> dict[str, str | None]:
        """peer -> the pod IP of its live pod."""
        return {
            peer: pod.get("status", {}).get("podIP")
            for peer, pod in self.cluster.live_pods().items()
        }

    # -- a round ----------------------------------------------------------------------------------
    def run_round(self, index: int, kind: str) -> dict:
        record = {
            "round": index,
            "kind": kind,
            "started": self.now(),
            "started_at": wall_clock(),
            "members": self._member_ids(),
        }
        self.rounds.append(record)
        counts_before = self.history.counts()
        self.workload.set_round(f"r{index}")
        time.sleep(self.config.traffic_before_fault)  # traffic on the round's fresh keys
        inject = getattr(self, "inject_" + kind.replace("-", "_"))
        evidence = inject(record)
        record["waited_for"] = []
        record["recovery_s"] = round(
            self.wait_recovered(self.replicas, evidence, record["injected"], record["waited_for"]),
            3,
        )
        if "healed" in record:
            record["after_heal_s"] = round(self.now() - record["healed"], 3)
        self.note("recovered", round=index, kind=kind, seconds=record["recovery_s"])
        if self.replicas != self.config.replicas:  # mid-scale: back to the configured size
            self.cluster.scale(self.config.replicas)
            started, self.replicas = self.now(), self.config.replicas
            record["scale_back_s"] = round(
                self.wait_recovered(self.replicas, lambda: [], started), 3
            )
            self.note("scaled back", replicas=self.replicas, seconds=record["scale_back_s"])
        record["recovered"] = True
        record["events"] = self.events_since(record["started_at"])
        # Before the history is compacted (auto-compaction, the next NOSPACE), not at the end.
        self.workload.read_back(timeout=60)
        counts = self.history.counts()
        record["operations"] = {
            o: counts[o] - counts_before[o] for o in ("ok", "failed", "indeterminate")
        }
        before = counts_before["served_by"]
        record["operations"]["served_by"] = {
            m: n - before.get(m, 0) for m, n in counts["served_by"].items() if n > before.get(m, 0)
        }
        return record

    # -- the soak ---------------------------------------------------------------------------------
    def run(self) -> dict:
        started_wall = datetime.datetime.now(datetime.UTC)
        self.note("creating the cluster", replicas=self.replicas, seed=self.config.seed)
        try:
            self.cluster.apply(self.manifest)
            seconds = self.wait_recovered(
                self.replicas, lambda: [], self.now(), timeout=self.config.create_timeout
            )
            endpoint = self.cluster.client_endpoint()
        except (RoundFailed, ApiException) as error:
            self.failures.append(f"the cluster never became Available: {error}")
            self.note("the cluster never became Available", error=str(error))
            return self.finish(started_wall, "the cluster never became Available")
        self.note("cluster available", seconds=round(seconds, 1))
        self.workload = Workload(
            endpoint,
            self.history,
            clients=self.config.clients,
            keys=self.config.keys,
            rate=self.config.rate,
            timeout=self.config.op_timeout,
            seed=self.config.seed,
            prefix=f"/soak/{self.config.seed}",
        )
        soak_started = time.monotonic()
        stopped_early = None
        with self.workload:
            for index, kind in enumerate(self.schedule()):
                if self.config.budget and time.monotonic() - soak_started > self.config.budget:
                    stopped_early = f"time budget of {self.config.budget:.0f}s used up"
                    self.note(stopped_early)
                    break
                try:
                    self.run_round(index, kind)
                except RoundSkipped as error:
                    self.rounds[-1].update(skipped=str(error), recovered=None)
                    self.note("round skipped", round=index, kind=kind, why=str(error))
                except (RoundFailed, faults.FaultError, ApiException) as error:
                    self.rounds[-1]["recovered"] = False
                    self.rounds[-1]["error"] = str(error)
                    self.failures.append(f"round {index} ({kind}): {error}")
                    self.note("round failed", round=index, kind=kind, error=str(error))
                    break
        self.note("workload stopped")
        return self.finish(started_wall, stopped_early)

    def finish(self, started_wall, stopped_early) -> dict:
        if self.workload is None:  # never started: nothing to read
            final = {"keys": 0, "unread": []}
            readback = {
                "acknowledged": 0,
                "verified": 0,
                "lost": [],
                "compacted": [],
                "unverified": [],
            }
        else:
            final = self.workload.final_reads()
            readback = self.workload.read_back()
        if final["unread"]:
            self.failures.append(f"final read of {len(final['unread'])} keys never answered")
        self.note(
            "read back",
            acknowledged=readback["acknowledged"],
            lost=len(readback["lost"]),
            compacted=len(readback["compacted"]),
        )
        if readback["lost"]:
            self.failures.append(f"{len(readback['lost'])} acknowledged writes lost")
        if readback["unverified"]:
            self.failures.append(f"{len(readback['unverified'])} acknowledged writes not read back")
        self.artifacts.mkdir(parents=True, exist_ok=True)
        history_path = self.history.dump(self.artifacts / "history.json")
        verdict = check(history_path, self.artifacts / "history.html", self.config.checker_timeout)
        self.note("checked", result=verdict["result"], seconds=verdict["seconds"])
        if verdict["result"] != "linearizable":
            self.failures.append(f"history {verdict['result']}: {verdict.get('illegal_keys')}")
        report = self.report(started_wall, stopped_early, verdict, readback, final)
        if report["passed"]:
            history_path.unlink()  # only kept to debug a failure
            with contextlib.suppress(OSError):
                self.artifacts.rmdir()
        else:
            report["artifacts"] = self.save_diagnostics()
            report["artifacts"]["history"] = str(history_path)
            if verdict.get("visualization"):
                report["artifacts"]["visualization"] = verdict["visualization"]
        return report

    def save_diagnostics(self) -> dict:
        """What a person needs to find out what went wrong: the Events of the cluster's
        namespace and the operator's, the objects as they are now, the operator's log."""
        out = {}
        try:
            diagnostics = {
                "events": self.cluster.events(self.cluster.namespace),
                "operator_events": self.cluster.events(OPERATOR_NAMESPACE),
                "etcdcluster": self.cluster.get(),
                "pods": self.cluster.pods(),
                "pvcs": self.cluster.pvcs(),
                "timeline": self.timeline,
            }
        except ApiException as error:
            diagnostics = {"error": f"Kubernetes API: {error}", "timeline": self.timeline}
        path = self.artifacts / "events.json"
        path.write_text(json.dumps(diagnostics, indent=1, default=str) + "\n")
        out["events"] = str(path)
        kubectl = Path(json.loads((CACHE / "toolchain.json").read_text())["kubernetes"]) / "kubectl"
        logs = subprocess.run(
            [
                str(kubectl),
                f"--kubeconfig={self.kubeconfig}",
                "logs",
                "-n",
                OPERATOR_NAMESPACE,
                "deployment/quorumkeeper-controller-manager",
                "--tail=5000",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        path = self.artifacts / "operator.log"
        path.write_text(logs.stdout + logs.stderr)
        out["operator_log"] = str(path)
        return out

    def report(self, started_wall, stopped_early, verdict, readback, final) -> dict:
        by_kind: dict[str, list[float]] = {}
        for r in self.rounds:
            if r.get("recovered"):
                by_kind.setdefault(r["kind"], []).append(r["recovery_s"])
        counts = self.history.counts()
        recovered = sum(1 for r in self.rounds if r.get("recovered"))
        skipped = [r for r in self.rounds if r.get("skipped")]
        run = len(self.rounds) - len(skipped)
        passed = not self.failures and recovered == run and run > 0
        return {
            "name": "soak",
            "passed": passed,
            "failures": self.failures,
            "when": started_wall.isoformat(timespec="seconds"),
            "seconds": round(self.now(), 1),
            "machine": f"{os.uname().machine} cpus={os.cpu_count()}",
            "cluster": {
                "namespace": self.cluster.namespace,
                "name": self.cluster.name,
                "replicas": self.config.replicas,
                "version": self.manifest["spec"]["version"],
            },
            "config": {k: v for k, v in asdict(self.config).items()},
            "rounds": run,
            "rounds_requested": self.config.rounds,
            "rounds_recovered": recovered,
            "rounds_skipped": [
                f"round {r['round']} ({r['kind']}): {r['skipped']}" for r in skipped
            ],
            "stopped_early": stopped_early,
            "faults": {
                k: sum(1 for r in self.rounds if r["kind"] == k and not r.get("skipped"))
                for k in self.config.kinds
            },
            "recovery_s": {
                kind: {
                    "median": round(statistics.median(samples), 2),
                    "max": round(max(samples), 2),
                    "min": round(min(samples), 2),
                    "samples": samples,
                }
                for kind, samples in sorted(by_kind.items())
            },
            "operations": {k: counts[k] for k in ("total", "ok", "failed", "indeterminate")}
            | {"by_op": counts["by_op"], "served_by": counts["served_by"]},
            "acknowledged_writes": readback["acknowledged"],
            "acknowledged_writes_read_back": readback["verified"],
            "lost_writes": readback["lost"],
            "unverified_writes": readback["unverified"],
            # Compacted before they could be read back (writes during a NOSPACE fill): the
            # history's check covers them, the read-back at their revision could not.
            "compacted_writes": len(readback["compacted"]),
            "final_reads": final,
            "linearizable": verdict.get("linearizable"),
            "checker": verdict,
            "rounds_detail": self.rounds,
            "timeline": self.timeline,
        }


def summarize(report: dict) -> str:
    """The report in a few lines, for a terminal."""
    lines = [
        f"soak {'PASSED' if report['passed'] else 'FAILED'}: {report['rounds']} rounds "
        f"({report['rounds_recovered']} recovered) in {report['seconds']:.0f}s, "
        f"linearizable: {report['linearizable']}, acknowledged writes "
        f"{report['acknowledged_writes']}, lost {len(report['lost_writes'])}, compacted before "
        f"read back {report['compacted_writes']}",
        f"operations: {report['operations']['ok']} ok, {report['operations']['failed']} failed, "
        f"{report['operations']['indeterminate']} indeterminate",
    ]
    for kind, r in report["recovery_s"].items():
        count = len(r["samples"])
        lines.append(
            f"  {kind:15} {count:3} rounds  median {r['median']:5.1f}s  max {r['max']:5.1f}s"
        )
    lines += [f"  skipped: {s}" for s in report.get("rounds_skipped", [])]
    lines += [f"  FAILURE: {f}" for f in report["failures"]]
    for name, path in (report.get("artifacts") or {}).items():
        lines.append(f"  {name}: {path}")
    return "\n".join(lines)
