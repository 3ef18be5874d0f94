"""EtcdBackup through the deployed operator: a snapshot of a live cluster streamed to a real S3
server (moto, reached from the operator's pod over the cluster network), read back and checked
with etcd's own tool; bad input ends Failed with a condition and a Warning Event."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import subprocess

import boto3
import pytest
from kubehelpers import BACKUPS, CACHE, wait_until
from moto.server import ThreadedMotoServer

# The host as pods see it: the gateway of the local cluster's pod bridge.
HOST_FROM_PODS = "10.213.0.1"
BUCKET = "etcd-backups"
KEYS = {"AWS_ACCESS_KEY_ID": "e2e-key", "AWS_SECRET_ACCESS_KEY": "e2e-secret"}


@pytest.fixture(scope="module")
def s3_port():
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="0.0.0.0", port=port, verbose=False)  # noqa: S104
    server.start()
    yield port
    server.stop()


@pytest.fixture
def s3(s3_port):
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{s3_port}",
        region_name="us-east-1",
        aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket=BUCKET)
    yield client
    for obj in client.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        client.delete_object(Bucket=BUCKET, Key=obj["Key"])
    client.delete_bucket(Bucket=BUCKET)


def backup(name, source, template, secret="s3-credentials"):
    destination = {"objectURLTemplate": template}
    if secret:
        destination["credentialsSecret"] = secret
    return {
        "apiVersion": "etcd.quorumkeeper.dev/v1alpha1",
        "kind": "EtcdBackup",
        "metadata": {"name": name},
        "spec": {"source": source, "destination": destination},
    }


def credentials_secret():
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s3-credentials"},
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in KEYS.items()},
    }


def wait_phase(kube, namespace, name, phase, timeout=120):
    def reached():
        obj = kube.get(BACKUPS, name, namespace=namespace)
        status = obj.get("status") or {}
        return status if status.get("phase") == phase else None

    return wait_until(f"EtcdBackup {name} {phase}", reached, timeout)


def test_backup_of_a_cluster_is_streamed_checksummed_and_restorable(
    etcd_cluster, s3, s3_port, tmp_path
):
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    etcd_cluster.create(3)
    etcd_cluster.wait_available(3)
    for i in range(20):
        etcd_cluster.put(f"/backup/{i}", f"v{i}")
    kube.apply(credentials_secret(), namespace=ns)
    template = (
        f"s3://{BUCKET}/{{{{ .Namespace }}}}/{{{{ .ClusterName }}}}/{{{{ .UID }}}}.db"
        f"?endpoint=http://{HOST_FROM_PODS}:{s3_port}&region=us-east-1"
    )
    kube.apply(backup("nightly", {"clusterName": "e2e"}, template), namespace=ns)

    status = wait_phase(kube, ns, "nightly", "Completed")
    uid = kube.get(BACKUPS, "nightly", namespace=ns)["metadata"]["uid"]
    assert status["objectURL"].startswith(f"s3://{BUCKET}/{ns}/e2e/{uid}.db?endpoint=")
    leader = etcd_cluster.get()["status"]["leader"]
    assert status["member"] != leader, "the snapshot was taken from the leader"
    assert status["etcdVersion"] == "3.6.16"
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Completed"]["status"] == "True"
    assert conditions["Failed"]["status"] == "False"

    obj = s3.get_object(Bucket=BUCKET, Key=f"{ns}/e2e/{uid}.db")
    body = obj["Body"].read()
    assert len(body) == status["size"]
    assert hashlib.sha256(body).hexdigest() == status["sha256"] == obj["Metadata"]["sha256"]
    path = tmp_path / "snapshot.db"
    path.write_bytes(body)
    checked = subprocess.run(
        [str(CACHE / "bin/etcd-v3.6.16/etcdutl"), "snapshot", "status", str(path), "-w", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    snapshot = json.loads(checked.stdout)
    assert snapshot["revision"] >= status["revision"] >= 21
    assert snapshot["totalKey"] >= 20
    wait_until(
        "BackupStarted and BackupCompleted Events",
        lambda: (
            {"BackupStarted", "BackupCompleted"}
            <= {e["reason"] for e in kube.events(ns, "nightly")}
        ),
        30,
    )
    assert all(v not in json.dumps(status) for v in KEYS.values()), "credentials in the status"


def test_backup_of_a_missing_cluster_fails_with_a_reason(etcd_cluster, s3, s3_port):
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    kube.apply(credentials_secret(), namespace=ns)
    template = f"s3://{BUCKET}/x.db?endpoint=http://{HOST_FROM_PODS}:{s3_port}"
    kube.apply(backup("orphan", {"clusterName": "no-such-cluster"}, template), namespace=ns)
    status = wait_phase(kube, ns, "orphan", "Failed")
    failed = {c["type"]: c for c in status["conditions"]}["Failed"]
    assert failed["status"] == "True" and failed["reason"] == "SnapshotFailed"
    assert "EtcdCluster" in failed["message"] and "does not exist" in failed["message"]
    # The Event follows the status write: wait for it rather than race it.
    warnings = wait_until(
        "a BackupFailed Event",
        lambda: [e for e in kube.events(ns, "orphan") if e["reason"] == "BackupFailed"],
        30,
    )
    assert warnings[0]["type"] == "Warning"
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)


def test_backup_with_a_missing_secret_names_it(etcd_cluster, s3_port):
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    template = f"s3://{BUCKET}/y.db?endpoint=http://{HOST_FROM_PODS}:{s3_port}"
    kube.apply(
        backup("nosecret", {"clusterURL": "http://127.0.0.1:2379"}, template, secret="absent"),
        namespace=ns,
    )
    status = wait_phase(kube, ns, "nosecret", "Failed")
    failed = {c["type"]: c for c in status["conditions"]}["Failed"]
    assert f"Secret {ns}/absent" in failed["message"]
