"""Day-2 care end to end: members run with spec.options (a backend quota that fits the volume,
auto-compaction), and a cluster a writer drove to NOSPACE is given its space back by the
operator (compacted, defragmented member by member, alarm disarmed) before anything else, so
that it accepts writes again with the latest value of every key intact."""

from __future__ import annotations

import json

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    ConnectionProfile,
    etcd_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    EtcdOperationError,
)
from kubehelpers import wait_until

pytestmark = pytest.mark.cluster

PEERS = "etcdpeers.etcd.quorumkeeper.dev"
QUOTA = 16 << 20
VALUE = b"x" * (128 << 10)


def fill_to_nospace(endpoint, keys=4, limit=2000):
    """Overwrite ``keys`` keys until etcd refuses a write: ``{key: values it may hold}``, the
    last acknowledged value of each, and for the key of the refused write that value too (a
    write that fails may still have been applied: its error can come from a retry)."""
    latest = {}
    with etcd_client(ConnectionProfile([endpoint], timeout=5)) as client:
        for i in range(limit):
            key, value = f"/fill/{i % keys}", VALUE[:-8] + f"{i:08d}".encode()
            try:
                client.put(key, value)
            except EtcdOperationError as exc:
                assert "database space exceeded" in str(exc), exc
                return {k: {v} | ({value} if k == key else set()) for k, v in latest.items()}
            latest[key] = value
    raise AssertionError(f"no NOSPACE after {limit} writes")


def test_a_cluster_out_of_space_accepts_writes_again(etcd_cluster):
    kube, ns, name = etcd_cluster.kube, etcd_cluster.namespace, etcd_cluster.name
    manifest = etcd_cluster.manifest(3)
    manifest["spec"]["options"] = {"quotaBackendBytes": "16Mi"}
    kube.apply(manifest)
    etcd_cluster.wait_available(3)

    # Every member runs with the quota asked for, and auto-compaction on by default.
    peer = kube.get(PEERS, f"{name}-0", ns)
    assert peer["spec"]["options"] == {
        "quotaBackendBytes": QUOTA,
        "autoCompaction": {"mode": "periodic", "retention": "5m"},
    }
    args = etcd_cluster.pod_of(f"{name}-0")["spec"]["containers"][0]["args"]
    assert f"--quota-backend-bytes={QUOTA}" in args and "--auto-compaction-mode=periodic" in args

    endpoint = etcd_cluster.client_endpoint()
    possible = fill_to_nospace(endpoint)
    assert len(possible) == 4
    # Nothing in Kubernetes changes when etcd raises an alarm: the operator sees it the next
    # time it looks (steady clusters every 5 minutes); a spec change makes it look now. The
    # scale-up it asks for waits until the space is back.
    etcd_cluster.scale(4)
    wait_until(
        "the NOSPACE alarm handled",
        lambda: "SpaceReclaimed" in etcd_cluster.event_reasons(),
        120,
    )
    status = etcd_cluster.wait_available(4, timeout=240)
    last = status["maintenance"]["lastDefragmentation"]
    assert last["reason"] == "NOSPACE" and last["compactedRevision"] > 0
    defragmented = [m["name"] for m in last["members"]]
    assert sorted(defragmented) == [f"{name}-{i}" for i in range(3)], last
    assert all(m["dbSizeAfter"] < m["dbSizeBefore"] for m in last["members"]), last
    assert {"DatabaseQuotaExceeded", "SpaceReclaimed"} <= etcd_cluster.event_reasons()
    assert not [m for m in status["members"] if m.get("alarms")], status["members"]
    assert all(m["dbSize"] > 0 and m["dbSizeInUse"] > 0 for m in status["members"])

    with etcd_client(ConnectionProfile([endpoint], timeout=5)) as client:
        assert client.alarms() == []
        client.put("/after", "accepted again")
        for key, values in possible.items():
            assert client.get(key) in values, key
    events = [e["message"] for e in kube.events(ns, name) if e["reason"] == "SpaceReclaimed"]
    assert "NOSPACE disarmed on" in events[-1], json.dumps(events)
