"""spec.options: the settings a member starts with (defaults derived from its volume) and the
etcd flags that say them (qk_options)."""

from __future__ import annotations

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import (
    render_replicaset,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    default_quota_bytes,
    effective_options,
    option_flags,
    quantity_bytes,
)

MIB, GIB = 1 << 20, 1 << 30


def storage(size):
    return {"volumeClaimTemplate": {"resources": {"requests": {"storage": size}}}}


@pytest.mark.parametrize(
    "value, expected",
    [
        ("1Gi", GIB),
        ("512Mi", 512 * MIB),
        ("1.5Gi", 3 * GIB // 2),
        ("2G", 2 * 10**9),
        ("100k", 100_000),
        ("1073741824", GIB),
        (1024, 1024),
    ],
)
def test_quantities(value, expected):
    assert quantity_bytes(value) == expected


@pytest.mark.parametrize("value", ["lots", "1Zi", "", "-1Gi", True, "1.2.3Gi"])
def test_bad_quantities(value):
    with pytest.raises(ValueError, match="invalid quantity"):
        quantity_bytes(value)


@pytest.mark.parametrize(
    "volume, quota",
    [
        (128 * MIB, 64 * MIB),  # the smallest volume the CRD allows: half of it
        (GIB, 512 * MIB),  # the sample's: 2 GiB (etcd's default) would overflow it
        (2 * GIB, 1152 * MIB),  # 3/4 less the WAL's room
        (8 * GIB, 5760 * MIB),
        (100 * GIB, 8 * GIB),  # at most what etcd suggests
    ],
)
def test_default_quota_leaves_the_volume_room_for_the_wal_and_a_defragmentation(volume, quota):
    assert default_quota_bytes(volume) == quota
    assert quota < volume


def test_ephemeral_members_keep_etcds_default_quota():
    assert default_quota_bytes(None) is None
    assert "quotaBackendBytes" not in effective_options({"version": "3.6.16"})


def test_effective_options_resolve_defaults_and_quantities():
    assert effective_options({"storage": storage("1Gi")}) == {
        "quotaBackendBytes": 512 * MIB,
        "autoCompaction": {"mode": "periodic", "retention": "5m"},
    }
    declared = {
        "storage": storage("10Gi"),
        "options": {
            "quotaBackendBytes": "6Gi",
            "autoCompaction": {"mode": "revision", "retention": "10000"},
            "heartbeatIntervalMs": 150,
            "electionTimeoutMs": 1500,
            "maxRequestBytes": "4Mi",
            "snapshotCount": 20000,
        },
    }
    assert effective_options(declared) == {
        "quotaBackendBytes": 6 * GIB,
        "autoCompaction": {"mode": "revision", "retention": "10000"},
        "heartbeatIntervalMs": 150,
        "electionTimeoutMs": 1500,
        "maxRequestBytes": 4 * MIB,
        "snapshotCount": 20000,
    }
    assert effective_options({"options": {"autoCompaction": {"retention": "0"}}}) == {
        "autoCompaction": {"mode": "periodic", "retention": "0"}
    }


def test_flags():
    options = effective_options(
        {
            "storage": storage("1Gi"),
            "options": {
                "snapshotCount": 20000,
                "maxRequestBytes": "2Mi",
                "metrics": "extensive",
                "maxTxnOps": 512,
                "logLevel": "warn",
            },
        }
    )
    assert option_flags(options) == [
        f"--quota-backend-bytes={512 * MIB}",
        "--snapshot-count=20000",
        f"--max-request-bytes={2 * MIB}",
        "--metrics=extensive",
        "--max-txn-ops=512",
        "--log-level=warn",
        "--auto-compaction-mode=periodic",
        "--auto-compaction-retention=5m",
    ]
    assert option_flags(None) == [] and option_flags({}) == []


def peer_spec(**extra):
    return {
        "clusterName": "c",
        "version": "3.6.16",
        "bootstrap": {
            "initialClusterState": "New",
            "static": {"initialCluster": [{"name": "c-0", "host": "c-0.c.ns.svc"}]},
        },
        **extra,
    }


def test_a_member_runs_with_its_peers_options_and_an_older_peer_with_etcds_defaults():
    options = {
        "quotaBackendBytes": 512 * MIB,
        "autoCompaction": {"mode": "periodic", "retention": "5m"},
    }
    args = render_replicaset("c-0", "ns", peer_spec(options=options))["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert f"--quota-backend-bytes={512 * MIB}" in args
    assert "--auto-compaction-retention=5m" in args
    older = render_replicaset("c-0", "ns", peer_spec())["spec"]["template"]["spec"]["containers"][0]
    assert not [a for a in older["args"] if a.startswith(("--quota", "--auto-compaction"))]
