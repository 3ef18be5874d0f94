"""etcd_defragment against real etcd 3.4/3.5/3.6: a cluster driven to its NOSPACE alarm by a
writer overwriting keys accepts writes again after one run (compacted, defragmented member by
member with the leader last and leadership moved first, alarm disarmed), with the latest value
of every key intact; check mode and an unhealthy cluster change nothing; a defragmentation that
times out stops the run there and reports the members done before it."""

from __future__ import annotations

import threading

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    ConnectionProfile,
    etcd_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    EtcdOperationError,
)
from tcpproxy import TcpProxy

import etcdharness

QUOTA = 16 << 20
VALUE = b"x" * (128 << 10)
NOSPACE = "database space exceeded"


def client_of(cluster, names=None):
    return etcd_client(ConnectionProfile(cluster.endpoints(names), timeout=5))


def fill_to_nospace(cluster, keys=4, limit=2000):
    """Overwrite ``keys`` keys until etcd refuses a write: ``{key: values it may hold}``, the
    last acknowledged value of each, and for the key of the refused write that value too (a
    write that fails may still have been applied: its error can come from a retry)."""
    latest = {}
    with client_of(cluster) as client:
        for i in range(limit):
            key = f"/fill/{i % keys}"
            value = VALUE[:-8] + f"{i:08d}".encode()
            try:
                client.put(key, value)
            except EtcdOperationError as exc:
                assert NOSPACE in str(exc), exc
                return {k: {v} | ({value} if k == key else set()) for k, v in latest.items()}
            latest[key] = value
    raise AssertionError(f"no NOSPACE after {limit} writes of {len(VALUE)} bytes")


def leader_name(run_module, cluster):
    res = run_module("etcd_cluster_info", {"endpoints": cluster.endpoints()})
    assert not res["failed"], res
    return res["leader"]["name"]


@pytest.fixture
def small_quota_cluster(etcd_factory):
    return etcd_factory(3, flags=[f"--quota-backend-bytes={QUOTA}"])


def test_a_cluster_out_of_space_accepts_writes_again(small_quota_cluster, run_module):
    cluster = small_quota_cluster
    possible = fill_to_nospace(cluster)
    with client_of(cluster) as client:
        assert {a["alarm"] for a in client.alarms()} == {"NOSPACE"}
    leader = leader_name(run_module, cluster)

    res = run_module(
        "etcd_defragment", {"endpoints": cluster.endpoints(), "disarm": True, "timeout": 5}
    )
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    assert res["compacted_revision"] > len(possible)
    order = [m["name"] for m in res["members"]]
    assert sorted(order) == ["n0", "n1", "n2"] and order[-1] == leader, "the leader last"
    assert res["leader_moved_to"] == order[0], "to a member already defragmented"
    for member in res["members"]:
        assert member["db_size_after"] < member["db_size_before"] / 2, member
        assert member["db_size_in_use"] <= member["db_size_after"]
    assert res["disarmed"], res

    with client_of(cluster) as client:
        assert client.alarms() == []
        client.put("/after", "accepted")
        for key, values in possible.items():
            assert client.get(key) in values, key
    assert leader_name(run_module, cluster) != leader


def test_check_mode_names_the_order_and_changes_nothing(small_quota_cluster, run_module):
    cluster = small_quota_cluster
    with client_of(cluster) as client:
        client.put("/k", "1")
        client.put("/k", "2")
        _, before = client.key_count(cluster.endpoints(["n0"])[0])
    leader = leader_name(run_module, cluster)
    res = run_module("etcd_defragment", {"endpoints": cluster.endpoints()}, check=True)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    assert [m["name"] for m in res["members"]][-1] == leader
    assert res["compacted_revision"] is None and res["leader_moved_to"] is None
    with client_of(cluster) as client:
        count, _ = client.key_count(cluster.endpoints(["n0"])[0], revision=before - 1)
        assert count == 1, "the older revision is still there: nothing was compacted"


def test_refused_while_a_member_is_down(small_quota_cluster, run_module):
    cluster = small_quota_cluster
    cluster.stop_and_wait_for_leader("n2")
    with client_of(cluster, ["n0", "n1"]) as client:
        client.put("/k", "1")
        _, revision = client.key_count(cluster.endpoints(["n0"])[0])
        client.put("/k", "2")
    res = run_module(
        "etcd_defragment", {"endpoints": cluster.endpoints(["n0", "n1"]), "disarm": True}
    )
    assert res["failed"] and res["changed"] is False, res
    assert res["msg"].startswith("not defragmenting: members not healthy: n2"), res["msg"]
    with client_of(cluster, ["n0", "n1"]) as client:
        count, _ = client.key_count(cluster.endpoints(["n0"])[0], revision=revision)
        assert count == 1, "nothing was compacted"


class HoldingProxy(TcpProxy):
    """A TCP proxy to one member's client port that forwards both ways until, once ``armed``,
    the client sends a Defragment call: from then on what the client sends is held back, so
    that the member never gets the call and the caller waits for its answer (a member stalled
    by its defragmentation, as seen from the module)."""

    MARKER = b"/etcdserverpb.Maintenance/Defragment"

    def __init__(self, upstream_port):
        self.armed = False
        self.holding = threading.Event()
        super().__init__(upstream_port)

    def forward(self, data, tail, from_client):
        # grpcio sends a call's path as a plain literal the first time on a connection.
        if from_client and self.armed and self.MARKER in tail + data:
            self.holding.set()
        return not (from_client and self.holding.is_set())


@pytest.fixture
def proxied_cluster(etcd_bin, etcd_version, tmp_path):
    """3 members named by ordinal as pods are (the order goes by it), each advertising a
    HoldingProxy to its client port: what the module asks a member by name (its status, its
    defragmentation) goes through that member's proxy."""
    proxies = {}

    def advertise(node):
        proxies[node.name] = HoldingProxy(node.client_port)
        return proxies[node.name].url

    cluster = etcdharness.EtcdCluster(etcd_bin, etcd_version, tmp_path / "c")
    try:
        cluster.start(3, prefix="etcd-", advertise_client_url=advertise)
        yield cluster, proxies
    finally:
        cluster.teardown()
        for proxy in proxies.values():
            proxy.close()


def defragmentations(cluster, name):
    """How many defragmentations member ``name`` started, as its log says."""
    log = cluster.nodes[name].log_path.read_text(errors="replace")
    return log.count("starting defragment")


def test_a_defragmentation_that_times_out_stops_and_reports_the_members_done(
    proxied_cluster, run_module
):
    cluster, proxies = proxied_cluster
    with client_of(cluster) as client:
        for i in range(24):  # history for the compaction to free, the defragmentation to return
            client.put("/history", VALUE[:-8] + f"{i:08d}".encode())
    leader = leader_name(run_module, cluster)
    first, stalled = sorted(n for n in cluster.nodes if n != leader)
    proxies[stalled].armed = True

    res = run_module(
        "etcd_defragment", {"endpoints": cluster.endpoints(), "defrag_timeout": 3, "timeout": 5}
    )
    assert res["failed"] and res["changed"] is True, res
    assert proxies[stalled].holding.is_set(), "the run reached the stalled member's turn"
    # The member done before it, with its sizes, in the result and in the status shape.
    assert [m["name"] for m in res["members"]] == [first], (leader, res["msg"])
    done = res["members"][0]
    assert done["db_size_after"] < done["db_size_before"], done
    assert [m["name"] for m in res["status"]["members"]] == [first]
    assert res["status"]["compactedRevision"] == res["compacted_revision"] > 24
    # Where it stopped, with the error; the leader not started, not even handed over.
    assert res["stopped_at"]["name"] == stalled, res["stopped_at"]
    assert res["stopped_at"]["stage"] == f"defragmenting {stalled}"
    assert res["stopped_at"]["error"].startswith(f"Defragment via {proxies[stalled].url} failed")
    assert res["not_started"] == [leader]
    assert res["leader_moved_to"] is None
    msg = res["msg"]
    assert msg.startswith(f"defragmenting {stalled} failed: Defragment via "), msg
    assert f"; done before: compacted to revision {res['compacted_revision']}; " in msg, msg
    assert f"defragmented {first} " in msg and msg.endswith(f"; not started: {leader}"), msg
    assert res["summary"] == msg.split("; done before: ")[1].split("; not started")[0]

    assert defragmentations(cluster, first) == 1
    assert defragmentations(cluster, stalled) == 0, "its call was held back"
    assert defragmentations(cluster, leader) == 0, "the run stopped before the leader"
    proxies[stalled].close()
    assert leader_name(run_module, cluster) == leader
