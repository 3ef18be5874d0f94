"""etcd_snapshot on real etcd clusters, uploading to a real S3 server (moto) and a real GCS
server (fake-gcs-server); each snapshot is read back and checked by etcd's own tools. The S3
tests run against moto (S3 as AWS answers it) and a real MinIO process (an S3-compatible store);
moto servers that refuse some requests stand for stores without tagging and for failures."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json

import minioharness
import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    ConnectionProfile,
    etcd_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore import (
    ObjectStoreError,
    delete,
    parse_object_url,
    stat,
    upload,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore_gcs import (
    upload_gcs,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore_s3 import (
    s3_client,
    upload_s3,
)
from damaging_s3 import NoTaggingMotoServer, NothingRecordedMotoServer, PartRefusingMotoServer
from minioharness import MinioServer, gcs_client, moto_server
from tcpproxy import TcpProxy

import etcdharness

pytestmark = pytest.mark.toolchain("minio")

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
    with etcd_client(ConnectionProfile(cluster.running_endpoints(), timeout=5)) as client:
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
    assert keys == ["c1/snap.db"], "a staging or sidecar object was left behind"
    obj = s3.get_object(Bucket=BUCKET, Key="c1/snap.db")
    body = obj["Body"].read()
    assert len(body) == res["size"]
    assert hashlib.sha256(body).hexdigest() == res["sha256"]
    # The SHA-256, known only at the end, is the object's tag: no copy of the object to set it.
    tags = s3.get_object_tagging(Bucket=BUCKET, Key="c1/snap.db")["TagSet"]
    assert tags == [{"Key": "sha256", "Value": res["sha256"]}]
    assert obj["Metadata"] == {"cluster": "c1", "revision": str(res["revision"])}
    assert obj["ETag"].strip('"').endswith("-1"), "not the multipart upload's own object"

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


@pytest.mark.parametrize("selection", ["follower", "endpoint"])
def test_a_source_that_refuses_connections_at_first_is_asked_again(
    etcd_factory, run_module, s3, s3_endpoint, selection
):
    """Right after a cluster becomes Available its client Service refuses connections until
    kube-proxy routes it: the backup waits for it (reach_timeout) instead of failing."""
    cluster = etcd_factory(1)
    member_url = cluster.running_endpoints()[0]
    args = {
        "object_url": s3_url(s3_endpoint, f"late-{selection}.db"),
        "credentials": CREDENTIALS,
        "member_selection": selection,
    }
    with TcpProxy(cluster.nodes["n0"].client_port, listening=False) as never:
        res = run_module("etcd_snapshot", {**args, "endpoints": [never.url], "reach_timeout": 1})
    assert res["failed"]
    assert res["msg"].startswith("cannot reach etcd to take a snapshot: no etcd endpoint answered")
    assert never.url in res["msg"], res["msg"]

    with TcpProxy(cluster.nodes["n0"].client_port, listening=False) as late:
        late.listen_after(2.0)
        res = run_module("etcd_snapshot", {**args, "endpoints": [late.url]})
    assert not res["failed"], res.get("msg")
    # A member of a cluster is then reached by its own URL; a given endpoint is used as given.
    assert res["endpoint"] == (member_url if selection == "follower" else late.url)
    body = s3.get_object(Bucket=BUCKET, Key=f"late-{selection}.db")["Body"].read()
    assert hashlib.sha256(body).hexdigest() == res["sha256"]


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


PART = 5 * 1024 * 1024
REFUSALS = "refusals"


@contextlib.contextmanager
def store_of(server_class):
    """A moto server of ``server_class`` (one that refuses some requests) with the bucket
    REFUSALS; its endpoint and a client of it (moto's own answers, the same store)."""
    with moto_server(server_class) as endpoint, moto_server() as plain:
        client = minioharness.s3_client(plain, CREDENTIALS)
        client.create_bucket(Bucket=REFUSALS)
        try:
            yield endpoint, client
        finally:
            for obj in client.list_objects_v2(Bucket=REFUSALS).get("Contents", []):
                client.delete_object(Bucket=REFUSALS, Key=obj["Key"])
            client.delete_bucket(Bucket=REFUSALS)


def refusals_url(endpoint, key):
    return f"s3://{REFUSALS}/{key}?endpoint={endpoint}&region=us-east-1"


def counted(parts, read):
    """``parts`` parts of PART bytes, counting in ``read`` how many were taken."""
    for i in range(parts):
        read.append(i)
        yield bytes([65 + i % 26]) * PART


def test_a_part_refused_mid_upload_stops_the_stream_and_leaves_nothing():
    """Parts go 3 at a time: when part 3 is refused, the upload is aborted once the parts in
    flight have ended, the rest of the snapshot is not read, and nothing is left."""
    with store_of(PartRefusingMotoServer) as (endpoint, client):
        location = parse_object_url(refusals_url(endpoint, "refused.db"))
        read = []
        with pytest.raises(ObjectStoreError, match="refused.db.* failed: AccessDenied"):
            upload_s3(s3_client(location, CREDENTIALS), location, counted(40, read), part_size=PART)
        assert len(read) < 40, "the snapshot was read to its end after the upload had failed"
        assert "Contents" not in client.list_objects_v2(Bucket=REFUSALS)
        assert not client.list_multipart_uploads(Bucket=REFUSALS).get("Uploads")


def test_parts_sent_at_once_make_the_object_in_order(s3, s3_endpoint):
    location = parse_object_url(s3_url(s3_endpoint, "ordered.db"))
    read = []
    res = upload_s3(
        s3_client(location, CREDENTIALS),
        location,
        counted(7, read),
        part_size=PART,
        workers=4,
    )
    body = s3.get_object(Bucket=BUCKET, Key="ordered.db")["Body"].read()
    assert body == b"".join(bytes([65 + i]) * PART for i in range(7))
    assert res == {"size": 7 * PART, "sha256": hashlib.sha256(body).hexdigest()}


def test_the_sha256_goes_to_a_sidecar_on_a_store_without_tagging():
    """Where tagging is not implemented (or not allowed), the SHA-256 is a <key>.sha256 object,
    read back by stat and deleted with the object."""
    with store_of(NoTaggingMotoServer) as (endpoint, client):
        location = parse_object_url(refusals_url(endpoint, "plain/snap.db"))
        res = upload(location, iter([b"snapshot " * 1000]), CREDENTIALS)
        sidecar = client.get_object(Bucket=REFUSALS, Key="plain/snap.db.sha256")["Body"].read()
        assert sidecar.decode().strip() == res["sha256"]
        assert not client.get_object_tagging(Bucket=REFUSALS, Key="plain/snap.db")["TagSet"]
        assert stat(location, CREDENTIALS) == {"exists": True, **res}
        delete(location, CREDENTIALS)
        assert "Contents" not in client.list_objects_v2(Bucket=REFUSALS)


def test_an_object_whose_sha256_cannot_be_recorded_is_deleted():
    with store_of(NothingRecordedMotoServer) as (endpoint, client):
        location = parse_object_url(refusals_url(endpoint, "unrecorded.db"))
        with pytest.raises(ObjectStoreError, match="cannot record the SHA-256 .* deleted"):
            upload(location, iter([b"snapshot " * 1000]), CREDENTIALS)
        assert "Contents" not in client.list_objects_v2(Bucket=REFUSALS)
        assert not client.list_multipart_uploads(Bucket=REFUSALS).get("Uploads")


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


def test_interrupted_gcs_upload_leaves_no_object_even_once_collected(gcs_endpoint):
    """A resumable upload whose stream breaks is cancelled: its writer, once garbage-collected,
    must not finalize what it had as a truncated object (IOBase closes what it collects)."""
    client = gcs_client(gcs_endpoint)
    bucket = client.create_bucket("gcs-interrupted")
    location = parse_object_url(f"gs://gcs-interrupted/broken.db?endpoint={gcs_endpoint}")

    def stream():
        yield b"x" * (1024 * 1024)
        yield b"y" * (1024 * 1024)
        raise ConnectionResetError("etcd went away mid-snapshot")

    with pytest.raises(ConnectionResetError) as raised:
        upload_gcs(client, location, stream(), part_size=256 * 1024)
    del raised  # its traceback holds the writer
    gc.collect()
    assert not list(client.list_blobs(bucket))
    with pytest.raises(ObjectStoreError, match="empty"):
        upload_gcs(client, location, iter(()))
    gc.collect()
    assert not list(client.list_blobs(bucket))
