"""EtcdClient.compacted_revision against real etcd 3.4/3.5/3.6: the revision the history is
compacted to, found by probing reads (status.maintenance.lastCompaction), whether it is known
from last time, has moved on since, or is found from nothing."""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    ConnectionProfile,
    etcd_client,
)


def test_the_compacted_revision_is_found_known_or_not(etcd_factory):
    cluster = etcd_factory(1)
    (endpoint,) = cluster.endpoints()
    with etcd_client(ConnectionProfile([endpoint], timeout=5)) as client:
        assert client.compacted_revision(endpoint) == 0, "never compacted"
        for i in range(300):
            client.put(f"/k/{i % 7}", str(i))
        first = client.revision(endpoint) - 123
        client.compact(first)
        assert client.compacted_revision(endpoint) == first
        assert client.compacted_revision(endpoint, known=first) == first
        assert client.compacted_revision(endpoint, known=first - 50) == first

        for i in range(40):
            client.put("/k/more", str(i))
        second = client.revision(endpoint) - 3
        client.compact(second)
        assert client.compacted_revision(endpoint, known=first) == second
        # Known further than it is (the store was restored from before): found again.
        assert client.compacted_revision(endpoint, known=second + 2) == second
        assert client.compacted_revision(endpoint, known=10**9) == second
