"""Helpers of the backup, schedule and restore e2e tests: a moto S3 server on this host that the
operator's pods reach over the pod network, its credentials Secret, EtcdBackup manifests and
waits, and etcd's own reading of a snapshot. The fixtures built on them are in conftest.py."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import subprocess
from collections.abc import Iterator

import boto3
from kubehelpers import BACKUPS, CACHE, WaitTimeout, wait_until
from moto.server import ThreadedMotoServer

# The host as pods see it: the gateway of the local cluster's pod bridge.
HOST_FROM_PODS = "10.213.0.1"
KEYS = {"AWS_ACCESS_KEY_ID": "e2e-key", "AWS_SECRET_ACCESS_KEY": "e2e-secret"}
SECRET = "s3-credentials"
UID_KEY = "{{ .Namespace }}/{{ .ClusterName }}/{{ .UID }}.db"


@contextlib.contextmanager
def moto_server(server_class: type[ThreadedMotoServer] = ThreadedMotoServer) -> Iterator[int]:
    """A moto S3 server (or a subclass such as DamagingMotoServer) on all addresses of this host,
    so that pods reach it through HOST_FROM_PODS; its port."""
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    server = server_class(ip_address="0.0.0.0", port=port, verbose=False)  # noqa: S104
    server.start()
    try:
        yield port
    finally:
        server.stop()


def s3_client(port: int):
    """A boto3 client of the moto server on ``port``, from this host, with KEYS."""
    return boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"],
    )


def object_url(bucket: str, port: int, key: str = UID_KEY) -> str:
    """The URL (or objectURLTemplate) of ``key`` in the moto server on ``port`` as pods reach it."""
    return f"s3://{bucket}/{key}?endpoint=http://{HOST_FROM_PODS}:{port}&region=us-east-1"


def credentials_secret(name: str = SECRET) -> dict:
    """The Secret with KEYS that a backup or restore names as its credentialsSecret."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in KEYS.items()},
    }


def backup_manifest(
    name: str, source: dict, template: str, secret: str | None = SECRET, **spec
) -> dict:
    """An EtcdBackup of ``source`` to ``template``; without credentialsSecret when ``secret`` is
    empty."""
    destination = {"objectURLTemplate": template}
    if secret:
        destination["credentialsSecret"] = secret
    return {
        "apiVersion": "etcd.quorumkeeper.dev/v1alpha1",
        "kind": "EtcdBackup",
        "metadata": {"name": name},
        "spec": {"source": source, "destination": destination, **spec},
    }


def schedule_manifest(
    destination: dict,
    name: str = "often",
    schedule: str = "@every 10s",
    max_backups: int | None = 2,
    **template,
) -> dict:
    """An EtcdBackupSchedule of cluster ``e2e`` to ``destination`` (objectURLTemplate and maybe
    credentialsSecret); ``template`` adds to its backupTemplate (``verify=False``)."""
    spec = {
        "schedule": schedule,
        "backupTemplate": {
            "source": {"clusterName": "e2e"},
            "destination": destination,
            **template,
        },
    }
    if max_backups is not None:
        spec["retention"] = {"maxBackups": max_backups}
    return {
        "apiVersion": "etcd.quorumkeeper.dev/v1alpha1",
        "kind": "EtcdBackupSchedule",
        "metadata": {"name": name},
        "spec": spec,
    }


def wait_backup(kube, namespace: str, name: str, phase: str, timeout: float) -> dict:
    """The status of EtcdBackup ``name`` once it is in ``phase``; the last status seen if not."""
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
