"""EtcdBackup through the deployed operator to each object store running in the cluster (MinIO,
moto, fake-gcs-server), reached by the operator through the store's Service name as in
production; every object is read back from this host and checked against the status."""

from __future__ import annotations

import hashlib
import json

import pytest
from backuphelpers import UID_KEY, backup_manifest, snapshot_status, wait_backup
from kubehelpers import BACKUPS, wait_until

pytestmark = pytest.mark.toolchain("minio")

CLUSTER = "e2e"
KEY = UID_KEY


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
        backup_manifest(
            "to-store",
            {"clusterName": CLUSTER},
            store.object_url(KEY),
            secret and "store-credentials",
        ),
        namespace=ns,
    )

    status = wait_backup(kube, ns, "to-store", "Completed", 150)
    uid = kube.get(BACKUPS, "to-store", namespace=ns)["metadata"]["uid"]
    key = f"{ns}/{CLUSTER}/{uid}.db"
    assert status["objectURL"] == store.object_url(key)
    assert store.url in status["objectURL"], "not reached through the Service name"
    body, _ = store.read(key)
    assert len(body) == status["size"]
    assert hashlib.sha256(body).hexdigest() == status["sha256"] == store.recorded_sha256(key)
    assert store.keys(f"{ns}/") == [key], "a staging or sidecar object was left behind"
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
        backup_manifest(
            "wrong-key", {"clusterName": CLUSTER}, store.object_url(KEY), "wrong-credentials"
        ),
        namespace=ns,
    )

    status = wait_backup(kube, ns, "wrong-key", "Failed", 150)
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
