"""pvc:// destinations through the deployed operator: a live cluster's snapshot written by a
helper pod to a file in a PersistentVolumeClaim of the backup's namespace (read on the volume's
host directory and checked with etcd's own tool), verified from the claim, and restored into a
new cluster that serves the same keys and revision; a claim that does not exist fails the backup
with a condition and a Warning Event."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from backuphelpers import backup_manifest, schedule_manifest, snapshot_status, wait_backup
from kubehelpers import BACKUPS, wait_until
from test_restore import keyspace, restore, revision, wait_restore

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

CLAIM = "etcd-backups"
HELPERS = "app.kubernetes.io/name=etcd-backup-claim"


def claim(name=CLAIM):
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "256Mi"}}},
    }


def claim_directory(kube, namespace, name=CLAIM) -> Path:
    """The host directory of the claim's volume (the local cluster's volumes are hostPath)."""
    volume = wait_until(
        f"claim {name} Bound",
        lambda: (kube.get("pvc", name, namespace).get("spec") or {}).get("volumeName"),
        60,
    )
    return Path(kube.get("pv", volume)["spec"]["hostPath"]["path"])


def conditions(status):
    return {c["type"]: c for c in status.get("conditions", [])}


def test_backup_to_a_claim_is_verified_and_restored(etcd_cluster, tmp_path):
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    kube.apply(claim(), namespace=ns)
    etcd_cluster.create(1)
    etcd_cluster.wait_available(1)
    for i in range(20):
        etcd_cluster.put(f"/pvc/{i}", f"v{i}")
    source_keys, source_revision = keyspace(etcd_cluster), revision(etcd_cluster)

    url = f"pvc://{CLAIM}/dir/snap.db"
    kube.apply(backup_manifest("to-claim", {"clusterName": "e2e"}, url, secret=None), namespace=ns)
    status = wait_backup(kube, ns, "to-claim", "Completed", 180)
    assert status["objectURL"] == url
    assert status["revision"] == source_revision and status["keys"] == 20

    # The file is where the URL says, whole, with its SHA-256 next to it, and nothing else.
    directory = claim_directory(kube, ns) / "dir"
    data = (directory / "snap.db").read_bytes()
    assert status["size"] == len(data)
    assert status["sha256"] == hashlib.sha256(data).hexdigest()
    assert (directory / "snap.db.sha256").read_text().strip() == status["sha256"]
    assert sorted(p.name for p in directory.iterdir()) == ["snap.db", "snap.db.sha256"]
    assert snapshot_status(data, tmp_path)["revision"] == source_revision
    wait_until(
        "the writer pod deleted",
        lambda: not kube.get("pods", namespace=ns, selector=HELPERS)["items"],
        30,
    )

    def verified():
        current = kube.get(BACKUPS, "to-claim", namespace=ns).get("status") or {}
        return current if conditions(current).get("Verified", {}).get("status") == "True" else None

    try:
        status = wait_until("EtcdBackup to-claim Verified", verified, 180)
    except Exception as exc:
        current = kube.get(BACKUPS, "to-claim", namespace=ns).get("status") or {}
        raise AssertionError(f"not verified: {conditions(current).get('Verified')}") from exc
    assert status["verification"]["revision"] == source_revision
    assert status["verification"]["keys"] == 20

    template = etcd_cluster.manifest(3)["spec"]
    kube.apply(
        restore("from-claim", "restored", template, {"backupName": "to-claim"}), namespace=ns
    )
    restored_status = wait_restore(kube, ns, "from-claim", "Completed", timeout=300)
    assert restored_status["objectURL"] == url
    assert restored_status["sha256"] == status["sha256"]
    restored = type(etcd_cluster)(kube, ns, "restored", "3.6.16")
    restored.wait_available(3, timeout=120)
    assert keyspace(restored) == source_keys
    assert revision(restored) == source_revision
    # The claim still holds the backup: restores only read it.
    assert (directory / "snap.db").read_bytes() == data


def test_backup_to_a_missing_claim_fails_with_a_reason(etcd_cluster):
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    etcd_cluster.create(1)
    etcd_cluster.wait_available(1)
    url = "pvc://no-such-claim/snap.db"
    kube.apply(backup_manifest("no-claim", {"clusterName": "e2e"}, url, secret=None), namespace=ns)
    status = wait_backup(kube, ns, "no-claim", "Failed", 120)
    failed = conditions(status)["Failed"]
    assert failed["status"] == "True" and failed["reason"] == "SnapshotFailed"
    assert f"PersistentVolumeClaim {ns}/no-such-claim" in failed["message"]
    assert "does not exist" in failed["message"]
    warnings = wait_until(
        "a BackupFailed Event",
        lambda: [e for e in kube.events(ns, "no-claim") if e["reason"] == "BackupFailed"],
        30,
    )
    assert warnings[0]["type"] == "Warning"
    assert not kube.get("pods", namespace=ns, selector=HELPERS)["items"], "no pod was started"


def test_schedule_retention_deletes_files_from_the_claim(etcd_cluster):
    """Backups every 10 s into the claim, pruned to the last one: the pruned backups' files (and
    their .sha256) are deleted from the claim by a pod, the kept one stays."""
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    kube.apply(claim(), namespace=ns)
    etcd_cluster.create(1)
    etcd_cluster.wait_available(1)
    destination = {"objectURLTemplate": f"pvc://{CLAIM}/often/{{{{ .UID }}}}.db"}
    kube.apply(schedule_manifest(destination, max_backups=1, verify=False), namespace=ns)
    directory = claim_directory(kube, ns) / "often"
    seen = {}

    def pruned():
        current = {}
        for backup in kube.get(BACKUPS, namespace=ns)["items"]:
            current[backup["metadata"]["uid"]] = (backup.get("status") or {}).get("phase")
        seen.update(current)
        gone = set(seen) - set(current)
        # Listed after the backups: the file goes first, then its EtcdBackup, so a backup gone
        # then has no file now.
        files = {p.name for p in directory.iterdir()} if directory.exists() else set()
        left = {f for f in files for uid in gone if f.startswith(uid)}
        assert not left, f"files of pruned backups are still in the claim: {left}"
        return (gone, files) if len(gone) >= 2 else None

    gone, files = wait_until("two backups pruned from the claim", pruned, 240, interval=1)
    assert any(f.endswith(".db") for f in files), "the kept backup's file is there"
    reasons = {e["reason"] for e in kube.events(ns, "often")}
    assert "BackupPruned" in reasons
