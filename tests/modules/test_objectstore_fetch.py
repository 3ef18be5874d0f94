"""Reading snapshots back: ``download``/``stat`` and the ``qk_objectstore.py fetch`` command line
that the verification and restore helper pods run, against a real S3 server (moto) and a real
GCS server (fake-gcs-server), with real etcd snapshots checked by etcd's own tools."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys

import minioharness
import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    ConnectionProfile,
    etcd_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore import (
    ObjectStoreError,
    download,
    parse_object_url,
    stat,
    upload,
)
from damaging_s3 import DamagingMotoServer

import etcdharness

pytestmark = pytest.mark.toolchain("minio")

# As helper pods run it: a module of the collection, with the collections on PYTHONPATH.
CLI = ["-m", "ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore"]
COLLECTIONS = str(etcdharness.REPO / "collections")
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "fetch-key", "AWS_SECRET_ACCESS_KEY": "fetch-secret"}
BUCKET = "readback"


@pytest.fixture
def credentials_dir(tmp_path):
    """A directory laid out like a mounted Secret: keys are links into a ..data directory."""
    root = tmp_path / "store"
    data = root / "..2026_01_01_00_00_00.000000000"
    data.mkdir(parents=True)
    for key, value in CREDENTIALS.items():
        (data / key).write_text(value)
    (root / "..data").symlink_to(data.name)
    for key in CREDENTIALS:
        (root / key).symlink_to(f"..data/{key}")
    return root


def s3_url(endpoint, key, bucket=BUCKET):
    return f"s3://{bucket}/{key}?endpoint={endpoint}&region=us-east-1"


def store_snapshot(cluster, url, keys=30, credentials=None):
    """Fill a real etcd with ``keys`` keys and upload its snapshot to ``url`` the way backups
    do (sha256 metadata); the upload result."""
    with etcd_client(ConnectionProfile(cluster.running_endpoints(), timeout=5)) as client:
        for i in range(keys):
            client.put(f"/fetch/{i:03d}", f"value-{i}")
        chunks = client.snapshot(cluster.running_endpoints()[0], timeout=60)
        return upload(parse_object_url(url), chunks, credentials)


def fetch(url, dest, *extra):
    return subprocess.run(
        [sys.executable, *CLI, "fetch", "--url", url, "--dest", str(dest), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        # The helper pod has no AWS environment: only what --credentials-dir gives.
        env={"PATH": os.environ["PATH"], "PYTHONPATH": COLLECTIONS, "HOME": str(dest.parent)},
    )


def test_fetch_from_s3_writes_the_snapshot_and_etcd_accepts_it(
    etcd_factory, etcd_version, s3, s3_endpoint, credentials_dir, tmp_path
):
    url = s3_url(s3_endpoint, f"{etcd_version}/snap.db")
    stored = store_snapshot(etcd_factory(1), url, credentials=CREDENTIALS)
    dest = tmp_path / "out" / "snapshot.db"
    dest.parent.mkdir()

    res = fetch(url, dest, "--credentials-dir", str(credentials_dir))
    assert res.returncode == 0, res.stderr
    printed = json.loads(res.stdout.strip().splitlines()[-1])
    assert printed == {"size": stored["size"], "sha256": stored["sha256"]}
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == stored["sha256"]
    assert sorted(p.name for p in dest.parent.iterdir()) == ["snapshot.db"], "partial left"
    status = etcdharness.snapshot_status(etcd_version, dest)
    assert status["totalKey"] >= 30


def test_corrupted_object_exits_3_and_leaves_no_file(
    etcd_factory, s3, s3_endpoint, credentials_dir, tmp_path
):
    url = s3_url(s3_endpoint, "corrupt.db")
    stored = store_snapshot(etcd_factory(1), url, credentials=CREDENTIALS)
    body = bytearray(s3.get_object(Bucket=BUCKET, Key="corrupt.db")["Body"].read())
    body[len(body) // 2] ^= 0xFF
    # The bytes change, the recorded checksum stays: what a bit flip in the store looks like.
    s3.put_object(
        Bucket=BUCKET, Key="corrupt.db", Body=bytes(body), Metadata={"sha256": stored["sha256"]}
    )
    dest = tmp_path / "snapshot.db"

    res = fetch(url, dest, "--credentials-dir", str(credentials_dir))
    assert res.returncode == 3, res.stderr
    assert res.stderr.startswith("sha256 mismatch: ")
    assert stored["sha256"] in res.stderr
    assert not dest.exists() and not (tmp_path / "snapshot.db.partial").exists()

    # The expected checksum given on the command line wins over the metadata.
    good = hashlib.sha256(bytes(body)).hexdigest()
    creds = ("--credentials-dir", str(credentials_dir))
    assert fetch(url, dest, "--sha256", good, *creds).returncode == 0
    wrong = fetch(url, tmp_path / "again.db", "--sha256", stored["sha256"].upper(), *creds)
    assert wrong.returncode == 3 and "expected" in wrong.stderr


@pytest.fixture(scope="module")
def damaging_endpoint(s3_endpoint):
    """The same store as s3_endpoint, returning objects named *damaged* with a bit flipped."""
    with minioharness.moto_server(DamagingMotoServer) as endpoint:
        yield endpoint


def test_bytes_damaged_on_the_way_back_exit_3(
    s3, s3_endpoint, damaging_endpoint, credentials_dir, tmp_path
):
    """Whether the store kept a checksum of the whole object (S3's CRC32, checked by boto3
    first) or only the recorded SHA-256 (objects uploaded in parts, as backups are): exit 3
    either way."""
    body = b"snapshot bytes " * 1000
    sha = hashlib.sha256(body).hexdigest()
    s3.put_object(
        Bucket=BUCKET,
        Key="damaged-crc.db",
        Body=body,
        ChecksumAlgorithm="CRC32",
        Metadata={"sha256": sha},
    )
    upload(parse_object_url(s3_url(s3_endpoint, "damaged-copy.db")), iter([body]), CREDENTIALS)
    creds = ("--credentials-dir", str(credentials_dir))

    crc = fetch(s3_url(damaging_endpoint, "damaged-crc.db"), tmp_path / "a.db", *creds)
    assert crc.returncode == 3, crc.stderr
    assert crc.stderr.startswith("sha256 mismatch: ") and "own checksum" in crc.stderr
    copied = fetch(s3_url(damaging_endpoint, "damaged-copy.db"), tmp_path / "b.db", *creds)
    assert copied.returncode == 3, copied.stderr
    assert f"{sha}" in copied.stderr
    assert not list(tmp_path.glob("*.db*")), "a damaged download left a file"
    # The same objects read through the undamaged server are fine.
    assert fetch(s3_url(s3_endpoint, "damaged-crc.db"), tmp_path / "c.db", *creds).returncode == 0


def test_missing_object_bucket_and_store_exit_2_with_the_stores_words(
    s3, s3_endpoint, credentials_dir, tmp_path
):
    out = tmp_path / "out"
    out.mkdir()
    dest = out / "snapshot.db"
    creds = ("--credentials-dir", str(credentials_dir))
    missing = fetch(s3_url(s3_endpoint, "nothing-here.db"), dest, *creds)
    assert missing.returncode == 2
    assert "NoSuchKey" in missing.stderr
    no_bucket = fetch(s3_url(s3_endpoint, "x.db", bucket="no-such-bucket"), dest, *creds)
    assert no_bucket.returncode == 2 and "NoSuchBucket" in no_bucket.stderr
    closed = f"http://127.0.0.1:{etcdharness.free_port()}"
    unreachable = fetch(s3_url(closed, "x.db"), dest, *creds)
    assert unreachable.returncode == 2 and closed in unreachable.stderr
    no_credentials = fetch(s3_url(s3_endpoint, "x.db"), dest)
    assert no_credentials.returncode == 2 and "credentials" in no_credentials.stderr
    bad_url = fetch("s3://bucket-only", dest)
    assert bad_url.returncode == 2 and "no object key" in bad_url.stderr
    assert not list(out.iterdir()), "a failed fetch left a file"
    assert all(v not in missing.stderr for v in CREDENTIALS.values())


def test_the_sha256_is_read_from_the_tag_and_from_the_metadata_of_older_backups(
    s3, s3_endpoint, credentials_dir, tmp_path
):
    """Backups carry their SHA-256 as a tag; those stored before tags, in their metadata (the
    copy that committed them set it): both are checked."""
    body = b"snapshot bytes " * 1000
    sha = hashlib.sha256(body).hexdigest()
    creds = ("--credentials-dir", str(credentials_dir))
    s3.put_object(Bucket=BUCKET, Key="old.db", Body=body, Metadata={"sha256": sha})
    old = parse_object_url(s3_url(s3_endpoint, "old.db"))
    assert stat(old, CREDENTIALS) == {"exists": True, "size": len(body), "sha256": sha}
    assert fetch(s3_url(s3_endpoint, "old.db"), tmp_path / "old.db", *creds).returncode == 0

    stored = upload(parse_object_url(s3_url(s3_endpoint, "tagged.db")), iter([body]), CREDENTIALS)
    assert stored == {"size": len(body), "sha256": sha}
    assert "sha256" not in s3.head_object(Bucket=BUCKET, Key="tagged.db")["Metadata"]
    # A tag that says other bytes (rewritten by hand here) is a mismatch like any other.
    s3.put_object_tagging(
        Bucket=BUCKET, Key="tagged.db", Tagging={"TagSet": [{"Key": "sha256", "Value": "0" * 64}]}
    )
    res = fetch(s3_url(s3_endpoint, "tagged.db"), tmp_path / "tagged.db", *creds)
    assert res.returncode == 3, res.stderr
    assert "recorded with the object: " + "0" * 64 in res.stderr
    assert not list(tmp_path.glob("tagged.db*"))


def test_download_and_stat_in_process(etcd_factory, s3, s3_endpoint):
    url = s3_url(s3_endpoint, "inproc.db")
    stored = store_snapshot(etcd_factory(1), url, keys=5, credentials=CREDENTIALS)
    location = parse_object_url(url)
    buffer = io.BytesIO()
    got = download(location, buffer, CREDENTIALS)
    assert got == {**stored, "metadata_sha256": stored["sha256"]}
    assert hashlib.sha256(buffer.getvalue()).hexdigest() == stored["sha256"]
    assert stat(location, CREDENTIALS) == {"exists": True, **stored}
    gone = parse_object_url(s3_url(s3_endpoint, "gone.db"))
    assert stat(gone, CREDENTIALS) == {"exists": False, "size": None, "sha256": None}
    with pytest.raises(ObjectStoreError, match="NoSuchKey"):
        download(gone, io.BytesIO(), CREDENTIALS)


def test_fetch_from_gcs(etcd_factory, etcd_version, gcs, gcs_endpoint, tmp_path):
    url = f"gs://{BUCKET}/{etcd_version}/snap.db?endpoint={gcs_endpoint}"
    stored = store_snapshot(etcd_factory(1), url)
    dest = tmp_path / "snapshot.db"
    res = fetch(url, dest)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == stored
    etcdharness.snapshot_status(etcd_version, dest)

    location = parse_object_url(url)
    assert stat(location) == {"exists": True, **stored}
    buffer = io.BytesIO()
    assert download(location, buffer)["metadata_sha256"] == stored["sha256"]

    blob = gcs.bucket(BUCKET).blob(f"{etcd_version}/snap.db")
    blob.upload_from_string(b"not a snapshot")
    blob.metadata = {"sha256": stored["sha256"]}
    blob.patch()
    corrupt = fetch(url, tmp_path / "corrupt.db")
    assert corrupt.returncode == 3 and corrupt.stderr.startswith("sha256 mismatch: ")

    missing = fetch(f"gs://{BUCKET}/nothing.db?endpoint={gcs_endpoint}", tmp_path / "m.db")
    assert missing.returncode == 2 and "not found: no object nothing.db" in missing.stderr
    no_bucket = fetch(f"gs://no-such-bucket/x.db?endpoint={gcs_endpoint}", tmp_path / "b.db")
    assert no_bucket.returncode == 2 and "no-such-bucket does not exist" in no_bucket.stderr
    gone = parse_object_url(f"gs://{BUCKET}/nothing.db?endpoint={gcs_endpoint}")
    assert stat(gone)["exists"] is False
