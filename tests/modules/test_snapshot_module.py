"""etcd_snapshot on real etcd clusters, uploading to a real S3 server (moto) and a real GCS
server (fake-gcs-server); each snapshot is read back and checked by etcd's own tools. The S3
tests run against moto (S3 as AWS answers it) and a real MinIO process (an S3-compatible store)."""

from __future__ import annotations

import hashlib
import json

import pytest
from ansible.module_utils.qk_etcd import EtcdClient
from ansible.module_utils.qk_objectstore import (
    ObjectStoreError,
    parse_object_url,
    s3_client,
    upload_s3,
)
from minioharness import MinioServer, gcs_client, moto_server

import etcdharness

# MinIO wants a secret key of at least 8 characters; moto takes any.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret"}
BUCKET = "backups"


@pytest.fixture(scope="module", params=["moto", "minio"])
def s3_endpoint(request, tmp_path_factory):
    if request.param == "minio":
        keys = CREDENTIALS["AWS_ACCESS_KEY_ID"], CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
        with MinioServer(tmp_path_factory.mktemp("minio") / "data", *keys) as server:
            yield server.endpoint
        return
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3_keys():
    return CREDENTIALS


def s3_url(s3_endpoint, key):
    return f"s3://{BUCKET}/{key}?endpoint={s3_endpoint}&region=us-east-1"


def fill(cluster, keys=50):
    with EtcdClient(cluster.running_endpoints(), timeout=5) as client:
        for i in range(keys):
            client.put(f"/data/{i:04d}", f"value-{i}")
        return client.cluster_info()


def test_snapshot_to_s3_is_whole_checksummed_and_from_a_follower(
    etcd_factory, run_module, etcd_version, s3, s3_endpoint, tmp_path
):
    cluster = etcd_factory(3)
    info = fill(cluster)
    res = run_module(
        "etcd_snapshot",
        {
            "endpoints": cluster.running_endpoints(),
            "object_url": s3_url(s3_endpoint, "c1/snap.db"),
            "credentials": CREDENTIALS,
            "metadata": {"cluster": "c1"},
        },
    )
    assert not res["failed"], res.get("msg")
    assert res["changed"]
    assert res["member"]["name"] != info["leader"]["name"], "the leader was chosen over a follower"
    assert res["etcd_version"] == etcd_version

    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert keys == ["c1/snap.db"], "the staging object was left behind"
    obj = s3.get_object(Bucket=BUCKET, Key="c1/snap.db")
    body = obj["Body"].read()
    assert len(body) == res["size"]
    assert hashlib.sha256(body).hexdigest() == res["sha256"] == obj["Metadata"]["sha256"]
    assert obj["Metadata"]["cluster"] == "c1"
    assert obj["Metadata"]["revision"] == str(res["revision"])

    path = tmp_path / "snap.db"
    path.write_bytes(body)
    status = etcdharness.snapshot_status(etcd_version, path)
    assert status["revision"] >= res["revision"] >= 51
    assert status["totalKey"] >= 50


def test_check_mode_chooses_the_member_and_uploads_nothing(
    etcd_factory, run_module, s3, s3_endpoint
):
    cluster = etcd_factory(3)
    res = run_module(
        "etcd_snapshot",
        {
            "endpoints": cluster.running_endpoints(),
            "object_url": s3_url(s3_endpoint, "check.db"),
            "credentials": CREDENTIALS,
        },
        check=True,
    )
    assert not res["failed"], res.get("msg")
    assert res["member"]["name"] in {"n0", "n1", "n2"}
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)


def test_missing_bucket_fails_with_the_stores_words_and_leaves_nothing(
    etcd_factory, run_module, s3, s3_endpoint
):
    cluster = etcd_factory(1)
    res = run_module(
        "etcd_snapshot",
        {
            "endpoints": cluster.running_endpoints(),
            "object_url": f"s3://no-such-bucket/x.db?endpoint={s3_endpoint}",
            "credentials": CREDENTIALS,
        },
    )
    assert res["failed"]
    assert "NoSuchBucket" in res["msg"]
    assert "testing" not in json.dumps(res), "credentials leaked into the result"


def test_bad_url_fails_before_touching_etcd(run_module):
    res = run_module(
        "etcd_snapshot",
        {"endpoints": ["http://127.0.0.1:1"], "object_url": "s3://bucket"},
    )
    assert res["failed"]
    assert "no object key" in res["msg"]


def test_interrupted_upload_leaves_no_object_and_no_open_upload(s3, s3_endpoint):
    location = parse_object_url(s3_url(s3_endpoint, "broken.db"))
    part = 5 * 1024 * 1024

    def stream():
        yield b"x" * part
        yield b"y" * part
        raise ConnectionResetError("etcd went away mid-snapshot")

    with pytest.raises(ConnectionResetError):
        upload_s3(s3_client(location, CREDENTIALS), location, stream(), part_size=part)
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)
    assert not s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads")


def test_empty_stream_is_refused(s3, s3_endpoint):
    location = parse_object_url(s3_url(s3_endpoint, "empty.db"))
    with pytest.raises(ObjectStoreError, match="empty"):
        upload_s3(s3_client(location, CREDENTIALS), location, iter(()))
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)


def test_snapshot_to_gcs(etcd_factory, run_module, etcd_version, gcs_endpoint):
    client = gcs_client(gcs_endpoint)
    bucket = "gcs-" + etcd_version.replace(".", "-")
    client.create_bucket(bucket)
    cluster = etcd_factory(1)
    fill(cluster, keys=10)
    res = run_module(
        "etcd_snapshot",
        {
            "endpoints": cluster.running_endpoints(),
            "object_url": f"gs://{bucket}/one/snap.db?endpoint={gcs_endpoint}",
        },
    )
    assert not res["failed"], res.get("msg")
    blob = client.bucket(bucket).get_blob("one/snap.db")
    body = blob.download_as_bytes()
    assert hashlib.sha256(body).hexdigest() == res["sha256"] == blob.metadata["sha256"]
    assert len(body) == res["size"]
