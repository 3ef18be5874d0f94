"""The object stores in the local cluster (MinIO, moto, fake-gcs-server), for backup tests.

`object_stores` deploys hack/cluster/object-stores.yaml once per session (idempotent, shared with
other sessions and with `make object-stores`; never removed: `make cluster-down` removes them),
waits for every store, creates the bucket and yields a `StoreUnderTest` per store: the in-cluster
URL the operator uses, a client on this host (at a ready pod's IP: stores_lib.host_endpoint), and
the credentials Secret a test namespace needs."""

from __future__ import annotations

import base64
import sys
from dataclasses import dataclass
from typing import Any

import pytest
from kubehelpers import ROOT

sys.path.insert(0, str(ROOT / "hack" / "cluster"))
import object_stores as stores_lib  # noqa: E402


@dataclass
class StoreUnderTest:
    store: stores_lib.Store
    kubectl: Any
    client: Any = None  # boto3 S3 client or google.cloud.storage.Client, from this host
    bucket: str = stores_lib.BUCKET

    def __post_init__(self):
        if self.client is None:
            self.reconnect()

    def reconnect(self) -> Any:
        """A client of the store's ready pod now (a restarted store's pod has a new IP)."""
        self.client = stores_lib.host_client(self.kubectl, self.store)
        return self.client

    def restart(self, store: stores_lib.Store) -> Any:
        """Restart the store (it comes back empty) and reconnect to its new pod."""
        stores_lib.restart_store(self.kubectl, store)
        return self.reconnect()

    @property
    def name(self) -> str:
        return self.store.name

    @property
    def url(self) -> str:
        return self.store.url

    def object_url(self, key: str) -> str:
        return self.store.object_url(key, self.bucket)

    def secret(self, name: str) -> dict | None:
        """The credentials Secret for a backup to this store; None when it needs none."""
        if self.store.credentials is None:
            return None
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name},
            "type": "Opaque",
            "data": {
                k: base64.b64encode(v.encode()).decode() for k, v in self.store.credentials.items()
            },
        }

    def read(self, key: str) -> tuple[bytes, dict]:
        """The object's bytes and user metadata, read from this host."""
        if self.store.scheme == "s3":
            obj = self.client.get_object(Bucket=self.bucket, Key=key)
            return obj["Body"].read(), obj["Metadata"]
        bucket = self.client.bucket(self.bucket)
        blob = bucket.get_blob(key)
        assert blob is not None, f"no object {key} in gs://{self.bucket}"
        # A fresh blob, not the one just read: its mediaLink names the Service's DNS name
        # (the server's -external-url), which only resolves inside the cluster.
        body = bucket.blob(key).download_as_bytes(if_generation_match=blob.generation)
        return body, blob.metadata or {}

    def recorded_sha256(self, key: str) -> str | None:
        """The SHA-256 the backup recorded with the object: an S3 object's ``sha256`` tag, a GCS
        object's ``sha256`` metadata."""
        if self.store.scheme == "s3":
            tags = self.client.get_object_tagging(Bucket=self.bucket, Key=key)["TagSet"]
            return {t["Key"]: t["Value"] for t in tags}.get("sha256")
        blob = self.client.bucket(self.bucket).get_blob(key)
        return (blob.metadata or {}).get("sha256") if blob else None

    def keys(self, prefix: str = "") -> list[str]:
        if self.store.scheme == "s3":
            listed = self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix)
            return [o["Key"] for o in listed.get("Contents", [])]
        return [b.name for b in self.client.list_blobs(self.bucket, prefix=prefix)]

    def ensure_bucket(self, restart_when_stuck: bool = False) -> None:
        """A store pod that restarted is empty (and has a new IP): call this before relying on
        the bucket."""
        self.reconnect()
        stores_lib.ensure_bucket(
            self.client,
            self.store,
            self.bucket,
            on_stuck=self.restart if restart_when_stuck else None,
        )


@pytest.fixture(scope="session")
def object_stores(local_cluster) -> dict[str, StoreUnderTest]:
    """Every store by name ("minio", "moto", "fake-gcs"), ready, with its bucket."""
    try:
        stores_lib.deploy(local_cluster)
    except RuntimeError as error:
        pytest.fail(str(error))
    deployed = {}
    for name, store in stores_lib.stores().items():
        try:
            deployed[name] = StoreUnderTest(store, local_cluster)
            # A store that answers every call with an error for a minute is restarted.
            deployed[name].ensure_bucket(restart_when_stuck=True)
        except RuntimeError as error:
            pytest.fail(f"{error}; the store's pods: {stores_lib.pods_not_ready(local_cluster)}")
    return deployed
