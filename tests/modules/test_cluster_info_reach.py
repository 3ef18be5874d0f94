"""etcd_cluster_info from outside the cluster's DNS: the members advertise names that do not
resolve here (as pods advertise `<pod>.<cluster>.<ns>.svc.cluster.local` to a host without
cluster DNS), and the caller passes the addresses it can reach (the pod IPs)."""

from __future__ import annotations

import pytest

import etcdharness


@pytest.fixture
def unresolvable_cluster(etcd_bin, etcd_version, tmp_path):
    cluster = etcdharness.EtcdCluster(etcd_bin, etcd_version, tmp_path / "c")
    # .invalid never resolves (RFC 6761).
    cluster.start(3, advertise_client_url=lambda n: f"http://{n.name}.etcd.invalid:{n.client_port}")
    yield cluster
    cluster.teardown()


def test_members_reached_through_the_given_endpoints(unresolvable_cluster, run_module):
    cluster = unresolvable_cluster
    res = run_module("etcd_cluster_info", {"endpoints": cluster.endpoints(), "timeout": 3})
    assert not res["failed"], res
    assert res["healthy"] is True, res
    assert res["quorum"] == {
        "voting": 3,
        "healthy_voting": 3,
        "required": 2,
        "tolerable_failures": 1,
    }
    assert res["leader"] and res["leader"]["name"] in cluster.nodes
    assert res["cluster_version"], "the version comes from a URL that answered"
    for member in res["members"]:
        assert member["healthy"] is True and member["version"], member
        # Each member under its own ID: the advertised name failed, the given address answered.
        assert member["client_urls"] == [cluster.nodes[member["name"]].advertise_client_url]
        assert any(".etcd.invalid" in e for e in member["errors"]), member


def test_a_stopped_member_is_not_credited_with_another_ones_answer(
    unresolvable_cluster, run_module
):
    cluster = unresolvable_cluster
    cluster.stop_and_wait_for_leader("n2")
    res = run_module("etcd_cluster_info", {"endpoints": cluster.endpoints(), "timeout": 3})
    assert not res["failed"], res
    health = {m["name"]: m["healthy"] for m in res["members"]}
    assert health == {"n0": True, "n1": True, "n2": False}
    assert res["quorum"]["healthy_voting"] == 2 and res["healthy"] is True


def test_only_some_addresses_given(unresolvable_cluster, run_module):
    """Members whose address the caller did not give stay unhealthy from here: the module does
    not guess; one given address is not a quorum."""
    cluster = unresolvable_cluster
    res = run_module("etcd_cluster_info", {"endpoints": cluster.endpoints(["n0"]), "timeout": 3})
    assert not res["failed"], res
    health = {m["name"]: m["healthy"] for m in res["members"]}
    assert health == {"n0": True, "n1": False, "n2": False}
    assert res["healthy"] is False
