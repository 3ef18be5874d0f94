"""Object URLs, their templates, chunk regrouping and the choice of the member to snapshot."""

from __future__ import annotations

import base64

import pytest
from ansible.module_utils.qk_objectstore import (
    ObjectStoreError,
    _parts,
    parse_object_url,
    render_object_url,
)
from ansible.module_utils.qk_snapshot import SnapshotSourceError, pick_member, secret_data

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
        ("http://b/k", "scheme must be s3:// or gs://"),
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


def test_chunks_are_regrouped_into_parts_of_the_given_size():
    parts = list(_parts([b"ab", b"cdefg", b"", b"h"], 3))
    assert parts == [b"abc", b"def", b"gh"]
    assert list(_parts([], 3)) == []


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

    from ansible.module_utils.qk_snapshot import plan_backup

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


def test_an_interrupted_backup_keeps_its_recorded_url():
    from ansible.module_utils.qk_snapshot import plan_backup

    status = {"phase": "Running", "objectURL": "s3://b/main/20261122T080000Z.db"}
    plan = plan_backup(stored_backup("s3://b/main/{{ .Timestamp }}.db", status=status))
    assert plan["object_url"] == "s3://b/main/20261122T080000Z.db"


def test_backup_plan_reports_a_bad_template_instead_of_raising():
    from ansible.module_utils.qk_snapshot import plan_backup

    plan = plan_backup(
        stored_backup("s3://b/{{ .Cluster }}.db", source={"clusterURL": "http://10.0.0.1:2379"})
    )
    assert "unknown field(s) Cluster" in plan["error"]
    assert plan["endpoints"] == ["http://10.0.0.1:2379"]
    assert plan["member_selection"] == "endpoint"
