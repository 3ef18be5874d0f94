"""Automatic disaster recovery (spec.disasterRecovery, opt-in): a majority of the members lost
its data, so waiting can never bring the quorum back.

- From a survivor: the member with the newest data restarts with --force-new-cluster, then runs
  without it again, and the others are re-added: every write it had is kept, and it keeps its
  member ID.
- From a backup: no member's data survives: the cluster is restored in place (same
  EtcdCluster) from its newest verified EtcdBackup by an in-place EtcdRestore; what was written
  before the backup is back, what was written after it is not, and an Event says which backup
  and revision.

Members are cut off the network first (a quorum loss with intact data: nothing happens but the
wait), then their claims and pods are deleted (a claim in use stays Terminating until its pod
is gone, and the ReplicaSet's new pod cannot start without it).
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
BUCKET = "etcd-disaster-recovery"
RESTORES = "etcdrestores.etcd.quorumkeeper.dev"
DELAY = 5


def condition(obj: dict, kind: str) -> dict:
    return next(
        (c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind), {}
    )


def create_with_recovery(driver, replicas: int) -> None:
    manifest = driver.manifest(replicas)
    manifest["spec"]["disasterRecovery"] = {"enabled": True, "delaySeconds": DELAY}
    driver.kube.apply(manifest)


def wait_degraded(driver, *words: str, timeout: float = 120) -> dict:
    def reached():
        degraded = driver.condition("Degraded")
        message = degraded.get("message", "")
        return degraded.get("status") == "True" and all(w in message for w in words) and degraded

    return wait_until(f"Degraded saying {words}", reached, timeout, interval=0.5)


def lose_data(driver, peers: list[str]) -> None:
    """Cut ``peers`` off, then delete their claims and pods: their data is gone for good."""
    kube, ns = driver.kube, driver.namespace
    pods = [driver.pod_of(peer)["metadata"]["name"] for peer in peers]
    try:
        for pod in pods:
            faults.partition_pod(ns, pod)
    except BaseException:
        for pod in pods:
            with contextlib.suppress(faults.FaultError):
                faults.heal_pod(ns, pod)
        raise
    kube("delete", "pvc", *peers, "-n", ns, "--wait=false")
    kube("delete", "pod", *pods, "-n", ns, "--wait=false")


def test_a_majority_without_data_is_rebuilt_from_the_survivor_with_every_write(etcd_cluster):
    name = etcd_cluster.name
    create_with_recovery(etcd_cluster, 3)
    etcd_cluster.wait_available(3)
    for i in range(20):
        etcd_cluster.put(f"/dr/{i}", f"v{i}")
    survivor_id = etcd_cluster.member_ids()[f"{name}-0"]

    lost = [f"{name}-1", f"{name}-2"]
    lose_data(etcd_cluster, lost)
    wait_degraded(
        etcd_cluster,
        "waiting cannot bring it back",
        f"Automatic disaster recovery will restart {name}-0",
        f"(spec.disasterRecovery.delaySeconds={DELAY})",
    )
    status = etcd_cluster.wait_available(3, timeout=240)

    assert status["recovery"]["last"]["source"] == "Survivor"
    assert status["recovery"]["last"]["member"] == f"{name}-0"
    assert "quorumLossSince" not in status["recovery"], "cleared with the quorum back"
    assert etcd_cluster.member_ids()[f"{name}-0"] == survivor_id, "the survivor kept its identity"
    assert all(etcd_cluster.value(f"/dr/{i}") == f"v{i}" for i in range(20))
    assert not any(
        "--force-new-cluster" in (c.get("args") or [])
        for pod in etcd_cluster.pods()
        for c in pod["spec"]["containers"]
    ), "no member may run with --force-new-cluster once others joined"
    reasons = etcd_cluster.event_reasons()
    assert {"RecoveringFromSurvivor", "QuorumLost"} <= reasons, reasons
    etcd_cluster.put("/dr/after", "written")
    assert etcd_cluster.value("/dr/after") == "written"


def test_a_cluster_without_any_data_is_restored_in_place_from_its_verified_backup(
    etcd_cluster, s3, s3_port
):
    kube, ns, name = etcd_cluster.kube, etcd_cluster.namespace, etcd_cluster.name
    kube.apply(credentials_secret(), namespace=ns)
    create_with_recovery(etcd_cluster, 3)
    etcd_cluster.wait_available(3)
    uid = etcd_cluster.get()["metadata"]["uid"]
    for i in range(10):
        etcd_cluster.put(f"/dr/{i}", f"v{i}")
    template = object_url(BUCKET, s3_port, "{{ .Namespace }}/before-disaster.db")
    kube.apply(backup_manifest("before-disaster", {"clusterName": name}, template), namespace=ns)
    backup = wait_backup(kube, ns, "before-disaster", "Completed", 180)
    wait_until(
        "EtcdBackup before-disaster Verified",
        lambda: (
            condition(kube.get(BACKUPS, "before-disaster", ns), "Verified").get("status") == "True"
        ),
        180,
        interval=1,
    )
    etcd_cluster.put("/dr/after-backup", "lost")

    lose_data(etcd_cluster, [f"{name}-{i}" for i in range(3)])
    wait_degraded(
        etcd_cluster,
        f"members {name}-0, {name}-1, {name}-2 lost their data",
        "Automatic disaster recovery will restore the cluster in place from EtcdBackup "
        f"before-disaster (revision {backup['revision']}",
    )
    status = etcd_cluster.wait_available(3, timeout=300)

    last = status["recovery"]["last"]
    assert (last["source"], last["backup"]) == ("Backup", "before-disaster")
    restore = kube.get(RESTORES, last["restore"], ns)
    assert restore["spec"]["inPlace"] is True
    wait_until(
        f"EtcdRestore {last['restore']} Completed",
        lambda: (
            kube.get(RESTORES, last["restore"], ns).get("status", {}).get("phase") == "Completed"
        ),
        60,
        interval=1,
    )
    assert all(etcd_cluster.value(f"/dr/{i}") == f"v{i}" for i in range(10))
    after = etcd_cluster.etcdctl("get", "/dr/after-backup", "--print-value-only")
    assert after.stdout.strip() == "", "written after the backup: not in it"
    event = wait_until(
        "the RecoveredFromBackup Event",
        lambda: next(
            (e for e in kube.events(ns, name) if e["reason"] == "RecoveredFromBackup"), None
        ),
        60,
        interval=1,
    )
    assert "EtcdBackup before-disaster" in event["message"]
    assert f"revision {backup['revision']}" in event["message"]
    assert etcd_cluster.get()["metadata"]["uid"] == uid, "the same EtcdCluster, restored in place"
