# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Hand the operator's leadership over as soon as its pod's manager has stopped.

Why: ansible-operator keeps the leader election Lease it holds when it stops (controller-runtime's
``LeaderElectionReleaseOnCancel`` is not one of its flags), so the pod that replaces it (an
upgrade, a drain, a deleted pod) reconciles nothing until the Lease expires: 15-19 s after the
old pod stopped, measured with 20 clusters (docs/testing-and-benchmarks.md, ``fleet``).

What: the health watch, the second container of the operator's pod, receives SIGTERM with the
manager. It waits until the manager's probe port stops answering (controller-runtime closes its
HTTP servers last, once the reconciles have returned), then writes what client-go writes on a
release, holder empty and a 1 s duration, on the Lease this pod still holds, with the version it
read: a Lease another pod took meanwhile is not touched. The next candidate takes it at its next
retry (2 s). A manager that does not stop before the pod's grace period ends keeps the Lease, as
before. Decisions are pure and unit tested; ``release_when_stopped`` runs them.
"""

from __future__ import annotations

import copy
import datetime
import socket
import time

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import KubeError

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
# How often the manager's probe port is tried while it shuts down.
PROBE_INTERVAL_SECONDS = 0.2


def holder_of(lease: dict | None) -> str:
    return ((lease or {}).get("spec") or {}).get("holderIdentity") or ""


def held_by_host(lease: dict | None, hostname: str) -> bool:
    """controller-runtime's identity is the hostname (the pod's name), "_" and a random UUID
    per process: any process of this pod, and no other pod."""
    return bool(hostname) and holder_of(lease).startswith(hostname + "_")


def micro_time(when: datetime.datetime) -> str:
    """A Lease's MicroTime, as client-go writes it."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def released(lease: dict, now: datetime.datetime) -> dict:
    """The Lease as client-go's leader elector leaves it on release: no holder, a 1 s duration
    from now, the transition count kept, the resourceVersion kept so that the write fails if
    anything changed it since it was read."""
    result = copy.deepcopy(lease)
    spec = result.setdefault("spec", {})
    stamp = micro_time(now)
    spec.update(holderIdentity="", leaseDurationSeconds=1, acquireTime=stamp, renewTime=stamp)
    return result


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def release_when_stopped(
    client,
    namespace: str,
    name: str,
    hostname: str,
    probe_port: int,
    wait_seconds: float,
    is_open=port_open,
    clock=time.monotonic,
    sleep=time.sleep,
    now=lambda: datetime.datetime.now(datetime.UTC),
) -> str:
    """Wait up to ``wait_seconds`` for the manager's probe port to close, then release the Lease
    if this pod holds it. Returns what was done, for the log."""
    deadline = clock() + wait_seconds
    while is_open("127.0.0.1", probe_port):
        if clock() >= deadline:
            return f"the manager still answers on :{probe_port}: Lease {name} kept"
        sleep(PROBE_INTERVAL_SECONDS)
    path = LEASE_PATH.format(namespace=namespace, name=name)
    try:
        lease = client.request("GET", path)
    except KubeError as exc:
        if exc.not_found:
            return f"no Lease {namespace}/{name}"
        return f"Lease {namespace}/{name} not read: {exc}"
    if not held_by_host(lease, hostname):
        return f"Lease {namespace}/{name} held by {holder_of(lease) or 'nobody'}: kept"
    try:
        client.request("PUT", path, body=released(lease, now()))
    except KubeError as exc:
        if exc.status == 409:
            return f"Lease {namespace}/{name} changed meanwhile: kept"
        return f"Lease {namespace}/{name} not released: {exc}"
    return f"Lease {namespace}/{name} released"
