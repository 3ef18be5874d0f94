#!/usr/bin/env python3
"""Object stores in the cluster for backups: MinIO, moto (S3 as AWS answers it), fake-gcs-server.

    object_stores.py up       apply hack/cluster/object-stores.yaml, wait until every store is
                              ready, create the bucket `etcd-backups` in each, print the URLs

Idempotent. The stores run as Deployments behind Services in the namespace `object-stores`; the
operator reaches them by Service name, as it would reach a store in production, and this host
reaches them at a ready pod's IP (host_endpoint says why not the ClusterIP). The e2e tests use
the same code (tests/e2e/objectstores.py). Stores keep data in emptyDirs or memory: a restarted
pod is empty.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "object-stores.yaml"
NAMESPACE = "object-stores"
BUCKET = "etcd-backups"
REGION = "us-east-1"
CACHE = Path(os.environ.get("QK_CACHE", Path.home() / ".cache" / "quorumkeeper"))
STATE = Path(os.environ.get("QK_STATE", "/var/lib/quorumkeeper"))


def _minio_root() -> dict[str, str]:
    """The MinIO root credentials, from the manifest (their single source)."""
    for document in yaml.safe_load_all(MANIFEST.read_text()):
        if (
            document
            and document["kind"] == "Secret"
            and document["metadata"]["name"] == "minio-root"
        ):
            return document["stringData"]
    raise SystemExit(f"{MANIFEST} has no Secret minio-root")


@dataclass(frozen=True)
class Store:
    """One store: where the operator reaches it, and the Secret data a backup needs for it."""

    name: str  # the Deployment and Service
    scheme: str  # "s3" or "gs"
    port: int
    credentials: dict[str, str] | None  # the data of a backup's credentialsSecret; None: none

    @property
    def url(self) -> str:
        """The endpoint as pods see it: the Service's DNS name."""
        return f"http://{self.name}.{NAMESPACE}.svc.cluster.local:{self.port}"

    def object_url(self, key: str, bucket: str = BUCKET) -> str:
        """An objectURL(Template) for the operator: `key` may hold `{{ .UID }}` and the like."""
        query = f"endpoint={self.url}" + (f"&region={REGION}" if self.scheme == "s3" else "")
        return f"{self.scheme}://{bucket}/{key}?{query}"


def stores() -> dict[str, Store]:
    root = _minio_root()
    return {
        "minio": Store(
            "minio",
            "s3",
            9000,
            {
                "AWS_ACCESS_KEY_ID": root["MINIO_ROOT_USER"],
                "AWS_SECRET_ACCESS_KEY": root["MINIO_ROOT_PASSWORD"],
            },
        ),
        # moto accepts any keys; a backup to S3 still needs a Secret, as it would on AWS.
        "moto": Store(
            "moto",
            "s3",
            5000,
            {"AWS_ACCESS_KEY_ID": "moto", "AWS_SECRET_ACCESS_KEY": "moto-secret"},
        ),
        # fake-gcs-server takes anonymous requests, which the operator makes when a gs:// URL
        # has an endpoint and the backup names no Secret.
        "fake-gcs": Store("fake-gcs", "gs", 4443, None),
    }


class Kubectl:
    """kubectl of the toolchain against $KUBECONFIG, else the local cluster's kubeconfig."""

    def __init__(self, kubeconfig: str | None = None):
        self.kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or str(STATE / "kubeconfig")
        manifest = json.loads((CACHE / "toolchain.json").read_text())
        self.binary = str(Path(manifest["kubernetes"]) / "kubectl")

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            [self.binary, f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            text=True,
            capture_output=True,
            timeout=300,
        )
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout


def pods_not_ready(kubectl) -> str:
    """Why the stores' pods are not ready yet, as the node agents report it."""
    pods = json.loads(kubectl("get", "pods", "-n", NAMESPACE, "-o", "json"))["items"]
    reasons = []
    for pod in pods:
        for container in pod.get("status", {}).get("containerStatuses", []):
            waiting = container.get("state", {}).get("waiting")
            if waiting:
                reasons.append(
                    f"{pod['metadata']['name']}: {waiting.get('reason')}: {waiting.get('message')}"
                )
            elif not container.get("ready"):
                reasons.append(f"{pod['metadata']['name']}: not ready")
    if not pods:
        return "no pods yet"
    return "; ".join(reasons) or "all ready"


def deploy(kubectl, timeout: float = 180) -> None:
    """Apply the manifest and wait until every store's Deployment is Available."""
    ensure_minio_image()
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(MANIFEST))
    deadline = time.monotonic() + timeout
    while True:
        deployments = json.loads(kubectl("get", "deployments", "-n", NAMESPACE, "-o", "json"))
        available = {
            d["metadata"]["name"]
            for d in deployments["items"]
            if d.get("status", {}).get("observedGeneration") == d["metadata"]["generation"]
            and any(
                c["type"] == "Available" and c["status"] == "True"
                for c in d.get("status", {}).get("conditions", [])
            )
            and d["status"].get("readyReplicas", 0) >= 1
        }
        if set(stores()) <= available:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"object stores not ready after {timeout:.0f}s: {pods_not_ready(kubectl)} "
                "(ErrImagePull: the image map lacks the store; run hack/toolchain/install.py "
                "and `make cluster-up`)"
            )
        time.sleep(1)


def ensure_minio_image() -> None:
    """On the local cluster, MinIO built (`make test` builds it beside the first tests) and in
    the node agents' image map before its pod is scheduled; the map is rewritten only when its
    content changes."""
    sys.path.insert(0, str(HERE))
    import localcluster

    layout = localcluster.Layout()
    if not (layout.state / "images.yaml").exists():
        return  # not the local cluster: the image is pulled
    localcluster.toolchain_component("minio")
    localcluster.LocalCluster().write_image_map(localcluster.toolchain())


def host_endpoint(kubectl, store: Store) -> str:
    """The store as this host reaches it: a ready pod's IP, over the pod network's bridge.

    Not the Service's ClusterIP: from this host that depends on kube-proxy's rules for it,
    and CI twice saw them missing for minutes (every call to moto's ClusterIP answered 404 by
    the machine's egress proxy, a restart of the store did not help). This host only creates
    buckets and reads objects back; the operator's path, through the Service's name, is what
    the tests exercise."""
    pods = json.loads(
        kubectl(
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-l",
            f"app.kubernetes.io/name={store.name}",
            "-o",
            "json",
        )
    )["items"]
    for pod in pods:
        status = pod.get("status", {})
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])
        )
        if ready and status.get("podIP") and not pod["metadata"].get("deletionTimestamp"):
            return f"http://{status['podIP']}:{store.port}"
    raise RuntimeError(f"no ready {store.name} pod: {pods_not_ready(kubectl)}")


def host_client(kubectl, store: Store):
    """A boto3 S3 client or a google-cloud-storage client for the store, from this host (a
    restarted store has a new pod IP: make a new client after a restart)."""
    endpoint = host_endpoint(kubectl, store)
    if store.scheme == "s3":
        import boto3
        import botocore.config

        return boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id=store.credentials["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=store.credentials["AWS_SECRET_ACCESS_KEY"],
            config=botocore.config.Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 5, "mode": "standard"},
                # A call must fail within ensure_bucket's deadline, not after botocore's 60 s.
                connect_timeout=5,
                read_timeout=30,
            ),
        )
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project="quorumkeeper",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": endpoint},
    )


def ensure_bucket(
    client, store: Store, bucket: str = BUCKET, timeout: float = 120, on_stuck=None
) -> None:
    """Create the bucket unless it exists; retried while the Service's endpoints catch up.

    ``on_stuck`` (e.g. a restart_store) is called once when half the time has passed without
    the bucket: a store that answers every call with an error is not going to get better by
    itself. What it returns, unless None, is the client to go on with (a restarted store's pod
    has a new IP).
    Raises RuntimeError naming the store, every distinct answer seen and who gave it when the
    bucket is still missing at the deadline."""
    started = time.monotonic()
    deadline = started + timeout
    attempts = 0
    answers: dict[str, int] = {}
    stuck_called = False
    while True:
        attempts += 1
        try:
            if _bucket_exists(client, store, bucket):
                return
            _create_bucket(client, store, bucket)
            if _bucket_exists(client, store, bucket):
                return
            last_error: Exception = RuntimeError("created, but not found afterwards")
        except Exception as error:  # noqa: BLE001 - any failure is retried until the deadline
            last_error = error
        answer = describe_answer(last_error)
        answers[answer] = answers.get(answer, 0) + 1
        now = time.monotonic()
        if on_stuck is not None and not stuck_called and now - started > timeout / 2:
            stuck_called = True
            client = on_stuck(store) or client
        if now > deadline:
            seen = "; ".join(f"{count}x {answer}" for answer, count in answers.items())
            raise RuntimeError(
                f"bucket {bucket} in {store.name} ({store.url}) still missing after "
                f"{attempts} attempts in {timeout:.0f}s"
                + (" and a restart of the store" if stuck_called else "")
                + f"; answers: {seen}"
            ) from last_error
        time.sleep(1)


def describe_answer(error: Exception) -> str:
    """An error with who answered: the HTTP status and Server header of an S3 error response
    (a store's own errors and a stranger's 404 look alike in botocore's message)."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return repr(error)
    metadata = response.get("ResponseMetadata", {})
    headers = metadata.get("HTTPHeaders", {})
    return (
        f"{error!r} (HTTP {metadata.get('HTTPStatusCode')}, server "
        f"{headers.get('server', 'unnamed')}, content-type {headers.get('content-type')})"
    )


def restart_store(kubectl, store: Store, timeout: float = 120) -> None:
    """Delete the store's pods and wait until its Deployment has a ready one again (empty)."""
    kubectl(
        "delete",
        "pods",
        "-n",
        NAMESPACE,
        "-l",
        f"app.kubernetes.io/name={store.name}",
        "--wait=true",
        "--timeout=60s",
    )
    deploy(kubectl, timeout)


def _bucket_exists(client, store: Store, bucket: str) -> bool:
    if store.scheme != "s3":
        return client.lookup_bucket(bucket) is not None
    import botocore.exceptions

    try:
        client.head_bucket(Bucket=bucket)
    except botocore.exceptions.ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchBucket"):
            return False
        raise
    return True


def _create_bucket(client, store: Store, bucket: str) -> None:
    if store.scheme != "s3":
        client.create_bucket(bucket)
        return
    import botocore.exceptions

    try:
        client.create_bucket(Bucket=bucket)
    except botocore.exceptions.ClientError as error:
        # Another session (or a retried request) created it first: that is what we want.
        if error.response.get("Error", {}).get("Code") not in (
            "BucketAlreadyOwnedByYou",
            "BucketAlreadyExists",
        ):
            raise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="deploy the stores, wait until ready, create their buckets")
    parser.parse_args()
    kubectl = Kubectl()
    started = time.monotonic()
    deploy(kubectl)
    for store in stores().values():
        ensure_bucket(host_client(kubectl, store), store)
    print(f"object stores ready in {time.monotonic() - started:.1f}s, bucket {BUCKET} in each:")
    for store in stores().values():
        print(f"  {store.name:9} {store.url}   e.g. {store.object_url('{{ .UID }}.db')}")
        if store.credentials:
            literals = " ".join(f"--from-literal={k}={v}" for k, v in store.credentials.items())
            print(f"            kubectl create secret generic {store.name}-credentials {literals}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
