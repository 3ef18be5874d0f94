"""Without a quorum the status says whether waiting helps, and what a person should do.

Automatic disaster recovery is opt-in (issue 7) and off here: the operator changes nothing, and
`Degraded` `QuorumLost` (and its Warning Event) tells members that are merely cut off (their data
intact: quorum returns when they do) from a majority whose data is gone (it never will: restore
the named backup, or rescue the survivor's data).
"""

from __future__ import annotations

import contextlib
import sys

import pytest
from backuphelpers import backup_manifest, credentials_secret, object_url, wait_backup
from kubehelpers import BACKUPS, ROOT, wait_until

sys.path.insert(0, str(ROOT / "hack" / "cluster"))
import faults  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
BUCKET = "etcd-quorum-lost"


def condition(obj: dict, kind: str) -> dict:
    return next(
        (c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind), {}
    )


def wait_quorum_lost(driver, *words: str, timeout: float = 120) -> dict:
    """The cluster's status once Degraded is QuorumLost with all ``words`` in its message."""

    def reached():
        status = driver.get().get("status") or {}
        degraded = condition({"status": status}, "Degraded")
        return (
            degraded.get("status") == "True"
            and degraded.get("reason") == "QuorumLost"
            and all(w in degraded.get("message", "") for w in words)
            and status
        )

    return wait_until(f"Degraded QuorumLost saying {words}", reached, timeout, interval=1)


def test_quorum_lost_says_whether_waiting_helps_and_names_the_backup(etcd_cluster, s3, s3_port):
    kube, ns, name = etcd_cluster.kube, etcd_cluster.namespace, etcd_cluster.name
    kube.apply(credentials_secret(), namespace=ns)
    etcd_cluster.create(3)
    etcd_cluster.wait_available(3)
    for i in range(10):
        etcd_cluster.put(f"/quorum/{i}", f"v{i}")
    template = object_url(BUCKET, s3_port, "{{ .Namespace }}/before-loss.db")
    kube.apply(backup_manifest("before-loss", {"clusterName": name}, template), namespace=ns)
    backup = wait_backup(kube, ns, "before-loss", "Completed", 180)
    wait_until(
        "EtcdBackup before-loss Verified",
        lambda: condition(kube.get(BACKUPS, "before-loss", ns), "Verified").get("status") == "True",
        180,
        interval=1,
    )

    lost = [f"{name}-1", f"{name}-2"]
    pods = {peer: etcd_cluster.pod_of(peer)["metadata"]["name"] for peer in lost}
    try:
        # (a) Two members cut off the network, their data intact: the operator waits for them.
        for pod in pods.values():
            faults.partition_pod(ns, pod)
        status = wait_quorum_lost(
            etcd_cluster, f"waiting for members {', '.join(lost)} to come back", "data is intact"
        )
        assert condition({"status": status}, "Available")["status"] == "False"
        assert "EtcdRestore" not in condition({"status": status}, "Degraded")["message"]
        for pod in pods.values():
            faults.heal_pod(ns, pod)
        etcd_cluster.wait_available(3, timeout=180)
        assert etcd_cluster.value("/quorum/9") == "v9"

        # (b) Cut off again (so that no replacement can start), then their volumes and pods are
        # deleted: waiting cannot help any more.
        for pod in pods.values():
            faults.partition_pod(ns, pod)
        wait_quorum_lost(etcd_cluster, "data is intact")
    except BaseException:
        for pod in pods.values():
            with contextlib.suppress(faults.FaultError):
                faults.heal_pod(ns, pod)
        raise
    # A claim in use stays Terminating until its pod is gone (pvc-protection); the ReplicaSet's
    # new pod cannot start without it.
    kube("delete", "pvc", *lost, "-n", ns, "--wait=false")
    kube("delete", "pod", *pods.values(), "-n", ns, "--wait=false")
    status = wait_quorum_lost(
        etcd_cluster,
        "waiting cannot bring it back",
        f"members {', '.join(lost)} lost their data",
        f"only {name}-0 (raft index",
        f"EtcdBackup before-loss (revision {backup['revision']}, completed "
        f"{backup['completionTime']}, verified)",
        "EtcdRestore",
    )
    message = condition({"status": status}, "Degraded")["message"]
    assert status["phase"] == "Degraded"
    assert condition({"status": status}, "Available")["status"] == "False"
    wait_until(
        "the QuorumLost Warning Event with that message",
        lambda: any(
            e["reason"] == "QuorumLost" and e["type"] == "Warning" and e["message"] == message
            for e in kube.events(ns, name)
        ),
        30,
        interval=1,
    )
    # Nothing was changed: the members are still there, the survivor still has the data.
    assert {m["name"] for m in etcd_cluster.get()["status"]["members"]} == {
        f"{name}-{i}" for i in range(3)
    }
    survivor = etcd_cluster.etcdctl("get", "/quorum/9", "--consistency=s", "--print-value-only")
    assert survivor.stdout.strip() == "v9"
    print(f"\nQuorumLost message: {message}")
