"""Object URLs, their templates, parts sent while the stream is received, and the choice of the
member to snapshot."""

from __future__ import annotations

import base64
import hashlib
import random
import threading
import time

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore import (
    ObjectStoreError,
    parse_object_url,
    render_object_url,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore_transfer import (
    send_parts,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_snapshot import (
    SnapshotSourceError,
    pick_member,
    secret_data,
)

FIELDS = {
    "UID": "0b7c",
    "Namespace": "prod",
    "ClusterName": "main",
    "Timestamp": "20261122T083000Z",
    "Name": "nightly",
}


def test_template_fields_are_filled_with_or_without_spaces():
    url = render_object_url("s3://b/{{ .ClusterName }}/{{.Namespace}}-{{ .UID }}.db", FIELDS)
    assert url == "s3://b/main/prod-0b7c.db"


def test_unknown_template_field_is_an_error_that_lists_the_known_ones():
    with pytest.raises(ObjectStoreError, match=r"unknown field\(s\) Uid.*{{ .UID }}"):
        render_object_url("s3://b/{{ .Uid }}", FIELDS)


def test_s3_url_with_endpoint_and_region():
    loc = parse_object_url("s3://backups/a/b.db?endpoint=http://minio:9000&region=eu-west-2")
    assert (loc.scheme, loc.bucket, loc.key) == ("s3", "backups", "a/b.db")
    assert (loc.endpoint, loc.region) == ("http://minio:9000", "eu-west-2")


def test_plain_aws_and_gcs_urls():
    assert parse_object_url("s3://b/k").endpoint is None
    loc = parse_object_url("gs://bucket/dir/snap.db")
    assert (loc.scheme, loc.bucket, loc.key, loc.region) == ("gs", "bucket", "dir/snap.db", None)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://b/k", "scheme must be s3://, gs:// or pvc://"),
        ("pvc://Claim/k.db", "not a PersistentVolumeClaim name"),
        ("pvc://claim", "no file path after the claim"),
        ("pvc://claim/dir/", "no file path after the claim"),
        ("pvc://claim/a/../../etc/passwd", "may not contain"),
        ("pvc://claim/a//b.db", "may not contain"),
        ("pvc://claim/k.db?x=1", "no query"),
        ("s3:///k", "no bucket"),
        ("s3://b", "no object key"),
        ("s3://b/dir/", "no object key"),
        ("s3://b/k?endpont=http://x", "unknown query parameter"),
        ("gs://b/k?region=x", "unknown query parameter"),
        ("s3://b/k?endpoint=minio:9000", "endpoint must be an http"),
    ],
)
def test_bad_urls_say_what_is_wrong(url, says):
    with pytest.raises(ObjectStoreError, match=says):
        parse_object_url(url)


class Recorder:
    """A ``send`` that keeps what it was given, and counts sends started, ended and at once."""

    def __init__(self, fail_at=None, gate=None, seconds=0.0):
        self.parts, self.buffers, self.fail_at, self.gate = {}, set(), fail_at, gate
        self.seconds = seconds
        self.started = self.ended = self.running = self.most = 0
        self.lock = threading.Lock()

    def __call__(self, number, buffer, length):
        with self.lock:
            self.started += 1
            self.running += 1
            self.most = max(self.most, self.running)
            self.buffers.add(id(buffer))
        try:
            if self.gate:
                self.gate.wait(10)
            if self.seconds:
                time.sleep(self.seconds)  # a slow store: sending is slower than receiving
            if number == self.fail_at:
                raise ConnectionResetError(f"part {number} refused")
            self.parts[number] = bytes(buffer[:length])
        finally:
            with self.lock:
                self.running -= 1
                self.ended += 1


def test_chunks_are_regrouped_into_parts_sent_in_order_with_one_worker():
    send = Recorder()
    sent = send_parts([b"ab", b"cdefg", b"", b"h"], send, part_size=3, workers=1)
    assert send.parts == {1: b"abc", 2: b"def", 3: b"gh"}
    assert sent == {"size": 8, "sha256": hashlib.sha256(b"abcdefgh").hexdigest(), "parts": 3}
    empty = Recorder()
    assert send_parts([], empty, part_size=3, workers=1)["parts"] == 0
    assert empty.started == 0


def test_parts_sent_at_once_reassemble_the_stream_from_a_few_reused_buffers():
    rng = random.Random(7)
    data = rng.randbytes(200_000)
    cuts = sorted({0, len(data), *(rng.randrange(len(data)) for _ in range(90))})
    chunks = [data[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]  # of any size
    send = Recorder(seconds=0.001)
    sent = send_parts(iter(chunks), send, part_size=4096, workers=3)
    assert b"".join(send.parts[n] for n in sorted(send.parts)) == data
    assert sorted(send.parts) == list(range(1, sent["parts"] + 1)) and sent["parts"] == 49
    assert sent["sha256"] == hashlib.sha256(data).hexdigest()
    assert len(send.buffers) <= 4, "memory grows with the stream: buffers are not reused"
    assert send.most <= 3


def test_receiving_waits_while_every_buffer_is_being_sent():
    """Against a store slower than the stream, no more than workers + 1 parts, and the chunk in
    hand, are ever read ahead of the sends that ended: memory does not grow with the stream."""
    ahead = []
    send = Recorder(seconds=0.02)

    def stream():
        for i in range(40):
            ahead.append((i + 1) * 512 - send.ended * 1024)  # bytes read, not yet sent
            yield b"x" * 512

    send_parts(stream(), send, part_size=1024, workers=2)
    assert send.ended == 20
    assert max(ahead) <= 3 * 1024 + 512, f"bytes read ahead of the sends: {ahead}"
    assert len(send.buffers) <= 3


def test_a_failed_send_stops_the_stream_and_is_raised_after_the_sends_in_flight():
    read = []

    def stream():
        for i in range(1000):
            read.append(i)
            yield b"y" * 100

    send = Recorder(fail_at=3)
    with pytest.raises(ConnectionResetError, match="part 3 refused"):
        send_parts(stream(), send, part_size=100, workers=3)
    assert len(read) < 1000, "the stream was read to its end after a send had failed"
    assert send.started == send.ended, "raised while a send was still running"


def test_a_broken_stream_is_raised_after_the_sends_in_flight():
    gate = threading.Event()

    def stream():
        yield b"z" * 300
        gate.set()
        raise ConnectionResetError("etcd went away")

    send = Recorder(gate=gate)
    with pytest.raises(ConnectionResetError, match="etcd went away"):
        send_parts(stream(), send, part_size=100, workers=3)
    assert send.started == send.ended


def member(name, leader=False, healthy=True, learner=False, raft_index=10):
    return {
        "name": name,
        "id": name,
        "client_urls": [f"http://{name}:2379"],
        "healthy": healthy,
        "is_leader": leader,
        "is_learner": learner,
        "raft_index": raft_index,
    }


def test_a_follower_is_chosen_before_the_leader_the_most_caught_up_first():
    members = [
        member("a", leader=True, raft_index=30),
        member("b", raft_index=20),
        member("c", raft_index=29),
        member("d", learner=True, raft_index=31),
    ]
    assert pick_member(members)["name"] == "c"


def test_the_leader_when_no_follower_is_healthy():
    members = [member("a", leader=True), member("b", healthy=False)]
    assert pick_member(members)["name"] == "a"


def test_no_healthy_voter_is_an_error():
    with pytest.raises(SnapshotSourceError, match="no healthy voting member"):
        pick_member([member("a", healthy=False), member("b", learner=True)])


def test_secret_data_is_decoded():
    secret = {"data": {"AWS_ACCESS_KEY_ID": base64.b64encode(b"key").decode()}}
    assert secret_data(secret) == {"AWS_ACCESS_KEY_ID": "key"}


def stored_backup(template, source=None, status=None):
    return {
        "metadata": {"name": "nightly", "namespace": "prod", "uid": "u-1"},
        "spec": {
            "source": source or {"clusterName": "main"},
            "destination": {"objectURLTemplate": template, "credentialsSecret": "s3"},
        },
        "status": status or {},
    }


def test_backup_plan_for_a_cluster_fills_the_template():
    from datetime import UTC, datetime

    from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_snapshot import plan_backup

    plan = plan_backup(
        stored_backup("s3://b/{{ .ClusterName }}/{{ .Timestamp }}-{{ .UID }}.db"),
        "example.org",
        2379,
        datetime(2026, 11, 22, 8, 30, tzinfo=UTC),
    )
    assert plan["object_url"] == "s3://b/main/20261122T083000Z-u-1.db"
    assert plan["endpoints"] == ["http://main-client.prod.svc.example.org:2379"]
    assert (plan["phase"], plan["member_selection"], plan["error"]) == ("Pending", "follower", None)
    assert plan["credentials_secret"] == "s3"


def test_a_backup_reads_certificates_and_passwords_only_for_clusters_that_have_them():
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
        cluster_security,
    )

    plain = {"spec": {"replicas": 3}, "status": {"phase": "Available"}}
    assert cluster_security(plain) == {"cluster_tls": False, "cluster_auth": False}
    assert cluster_security(None) == {"cluster_tls": False, "cluster_auth": False}
    tls = {"spec": {"tls": {"client": {"operatorManaged": {}}}}}
    assert cluster_security(tls) == {"cluster_tls": True, "cluster_auth": False}
    assert cluster_security({"spec": {"auth": {"enabled": True}}})["cluster_auth"] is True
    # Authentication turned off in the spec is still on in etcd until the operator applies it.
    turning_off = {"spec": {}, "status": {"auth": {"enabled": True, "specHash": "a1"}}}
    assert cluster_security(turning_off)["cluster_auth"] is True
    turned_off = {"spec": {}, "status": {"auth": {"enabled": False, "specHash": "b2"}}}
    assert cluster_security(turned_off)["cluster_auth"] is False


def test_an_interrupted_backup_keeps_its_recorded_url():
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_snapshot import plan_backup

    status = {"phase": "Running", "objectURL": "s3://b/main/20261122T080000Z.db"}
    plan = plan_backup(stored_backup("s3://b/main/{{ .Timestamp }}.db", status=status))
    assert plan["object_url"] == "s3://b/main/20261122T080000Z.db"


def test_backup_plan_reports_a_bad_template_instead_of_raising():
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_snapshot import plan_backup

    plan = plan_backup(
        stored_backup("s3://b/{{ .Cluster }}.db", source={"clusterURL": "http://10.0.0.1:2379"})
    )
    assert "unknown field(s) Cluster" in plan["error"]
    assert plan["endpoints"] == ["http://10.0.0.1:2379"]
    assert plan["member_selection"] == "endpoint"
