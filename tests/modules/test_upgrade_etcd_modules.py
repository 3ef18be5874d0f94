"""What a rolling upgrade asks of etcd, against real etcd processes of every version: leadership
handed to a chosen member (etcd_member state=leader) and the alarms the upgrade gate reads."""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    ConnectionProfile,
    etcd_client,
)
from test_etcd_modules import info


def leader_args(cluster, name):
    return {"endpoints": cluster.endpoints(), "name": name, "state": "leader"}


def test_leadership_moves_to_the_member_named(etcd_factory, run_module, etcd_version):
    cluster = etcd_factory(3)
    before = info(run_module, cluster)["leader"]
    target = next(n for n in cluster.nodes if n != before["name"])

    res = run_module("etcd_member", leader_args(cluster, target), check=True)
    assert not res["failed"] and res["changed"] is True, res
    (action,) = res["actions"]
    assert action.startswith(f"move leadership from member {before['name']} ")
    assert f"to member {target} " in action
    assert info(run_module, cluster)["leader"] == before, "check mode moves nothing"

    res = run_module("etcd_member", leader_args(cluster, target))
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    assert res["leader_moved_to"]["name"] == target
    assert info(run_module, cluster)["leader"]["name"] == target

    res = run_module("etcd_member", leader_args(cluster, target))
    assert not res["failed"] and res["changed"] is False, "already the leader: nothing to do"


def test_leadership_is_not_handed_to_a_member_that_is_down(etcd_factory, run_module):
    cluster = etcd_factory(3)
    leader = info(run_module, cluster)["leader"]["name"]
    down = next(n for n in cluster.nodes if n != leader)
    cluster.stop(down)
    res = run_module("etcd_member", leader_args(cluster, down))
    assert res["failed"] and "not healthy" in res["msg"], res
    assert info(run_module, cluster)["leader"]["name"] == leader


def test_no_alarm_on_a_healthy_cluster(etcd_factory, etcd_version):
    cluster = etcd_factory(1)
    with etcd_client(ConnectionProfile(cluster.endpoints(), timeout=5)) as client:
        assert client.alarms() == []
