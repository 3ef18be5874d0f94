"""EtcdBackup through the deployed operator to each object store running in the cluster (MinIO,
moto, fake-gcs-server), reached by the operator through the store's Service name as in
production; every object is read back from this host and checked against the status."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest
from kubehelpers import BACKUPS, CACHE, WaitTimeout, wait_until

CLUSTER = "e2e"
KEY = "{{ .Namespace }}/{{ .ClusterName }}/{{ .UID }}.db"


def backup_manifest(name: str, object_url: str, secret: str | None) -> dict:
    destination = {"objectURLTemplate": object_url}
    if secret:
        destination["credentialsSecret"] = secret
    return {
        "apiVersion": "etcd.quorumkeeper.dev/v1alpha1",
        "kind": "EtcdBackup",
        "metadata": {"name": name},
        "spec": {"source": {"clusterName": CLUSTER}, "destination": destination},
    }


def wait_backup(kube, namespace: str, name: str, phase: str, timeout: float = 150) -> dict:
    seen: list[dict] = []

    def reached():
        status = kube.get(BACKUPS, name, namespace=namespace).get("status") or {}
        seen.append(status)
        return status if status.get("phase") == phase else None

    try:
        return wait_until(f"EtcdBackup {name} {phase}", reached, timeout)
    except WaitTimeout as timeout_error:
        raise AssertionError(
            f"EtcdBackup {name} not {phase}; last status: {json.dumps(seen[-1:])}"
        ) from timeout_error


def snapshot_status(body: bytes, tmp_path) -> dict:
    """What etcd's own tool reads from the snapshot (it checks the file's integrity hash)."""
    path = tmp_path / "snapshot.db"
    path.write_bytes(body)
    checked = subprocess.run(
        [str(CACHE / "bin/etcd-v3.6.16/etcdutl"), "snapshot", "status", str(path), "-w", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(checked.stdout)


@pytest.mark.parametrize("store_name", ["minio", "moto", "fake-gcs"])
def test_backup_to_a_store_in_the_cluster(etcd_cluster, object_stores, store_name, tmp_path):
    store = object_stores[store_name]
    store.ensure_bucket()
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    etcd_cluster.create(1)
    etcd_cluster.wait_available(1)
    for i in range(10):
        etcd_cluster.put(f"/stores/{i}", f"v{i}")
    secret = store.secret("store-credentials")
    if secret:
        kube.apply(secret, namespace=ns)
    kube.apply(
        backup_manifest("to-store", store.object_url(KEY), secret and "store-credentials"),
        namespace=ns,
    )

    status = wait_backup(kube, ns, "to-store", "Completed")
    uid = kube.get(BACKUPS, "to-store", namespace=ns)["metadata"]["uid"]
    key = f"{ns}/{CLUSTER}/{uid}.db"
    assert status["objectURL"] == store.object_url(key)
    assert store.url in status["objectURL"], "not reached through the Service name"
    body, metadata = store.read(key)
    assert len(body) == status["size"]
    assert hashlib.sha256(body).hexdigest() == status["sha256"] == metadata["sha256"]
    assert store.keys(f"{ns}/") == [key], "a staging object was left behind"
    snapshot = snapshot_status(body, tmp_path)
    assert snapshot["revision"] >= status["revision"] >= 11
    assert snapshot["totalKey"] >= 10


def test_backup_to_minio_with_a_wrong_secret_key_fails_with_minios_words(
    etcd_cluster, object_stores
):
    store = object_stores["minio"]
    store.ensure_bucket()
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    etcd_cluster.create(1)
    etcd_cluster.wait_available(1)
    secret = store.secret("wrong-credentials")
    wrong = "d3JvbmctcGFzc3dvcmQ="  # base64 of "wrong-password"
    secret["data"]["AWS_SECRET_ACCESS_KEY"] = wrong
    kube.apply(secret, namespace=ns)
    kube.apply(
        backup_manifest("wrong-key", store.object_url(KEY), "wrong-credentials"), namespace=ns
    )

    status = wait_backup(kube, ns, "wrong-key", "Failed")
    failed = {c["type"]: c for c in status["conditions"]}["Failed"]
    assert failed["status"] == "True"
    assert "SignatureDoesNotMatch" in failed["message"], failed["message"]
    events = wait_until(
        "a BackupFailed Event",
        lambda: [e for e in kube.events(ns, "wrong-key") if e["reason"] == "BackupFailed"],
        30,
    )
    shown = json.dumps(status) + json.dumps(events)
    assert "wrong-password" not in shown and wrong not in shown, "the secret key was shown"
    assert store.keys(f"{ns}/") == [], "a failed backup left an object"
