"""etcd_cluster_info from outside the cluster's DNS: the members advertise names that do not
resolve here (as pods advertise `<pod>.<cluster>.<ns>.svc.cluster.local` to a host without
cluster DNS), and the caller passes the addresses it can reach (the pod IPs). And members that
never connect (cut off the network): the member list gives them up after the connect time, a
status call after its timeout."""

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


def test_a_member_that_never_connects_keeps_its_status_calls_whole_timeout(
    etcd_bin, etcd_version, tmp_path, unconnectable_url, run_module
):
    """A member's status is its health: a member that has just joined completes gRPC's
    handshake only once it has published itself (up to 7 s later), so while the cluster has a
    quorum its status is not given up after the member list's connect time (1.5 s) but after
    the timeout."""
    cluster = etcdharness.EtcdCluster(etcd_bin, etcd_version, tmp_path / "c")
    cluster.start(
        3,
        advertise_client_url=lambda n: unconnectable_url if n.name == "n2" else n.client_url,
    )
    try:
        res = run_module(
            "etcd_cluster_info",
            {"endpoints": [unconnectable_url, *cluster.endpoints(["n0", "n1"])], "timeout": 3},
        )
    finally:
        cluster.teardown()
    assert not res["failed"], res
    members = {m["name"]: m for m in res["members"]}
    assert {n: m["healthy"] for n, m in members.items()} == {"n0": True, "n1": True, "n2": False}
    assert not any("not connected" in e for e in members["n2"]["errors"]), members
    assert res["healthy"] is True


def info_without_quorum(etcd_bin, etcd_version, tmp_path, unconnectable_url, run_module, more):
    """etcd_cluster_info of 3 members of which n1 is stopped and n2 is stopped and advertises
    a client URL that never connects, asked through n0 and ``more(unconnectable_url)``."""
    cluster = etcdharness.EtcdCluster(etcd_bin, etcd_version, tmp_path / "c")
    cluster.start(
        3,
        advertise_client_url=lambda n: unconnectable_url if n.name == "n2" else n.client_url,
    )
    try:
        cluster.stop("n1")
        cluster.stop("n2")
        cluster.wait_leaderless("n0")
        endpoints = cluster.endpoints(["n0"]) + more(unconnectable_url)
        return run_module(
            "etcd_cluster_info",
            {"endpoints": endpoints, "timeout": 30, "fail_on_unreachable": False},
        )
    finally:
        cluster.teardown()


def test_without_a_quorum_a_member_that_never_connects_is_given_up_after_the_connect_time(
    etcd_bin, etcd_version, tmp_path, unconnectable_url, run_module
):
    """Without a quorum no member can be joining, and a member cut off the network cost every
    observation the whole timeout (5 s of the 7 before a disaster recovery was decided):
    its status is given up, like the member list, once its channel has not connected for
    1.5 s."""
    res = info_without_quorum(
        etcd_bin, etcd_version, tmp_path, unconnectable_url, run_module, lambda c: []
    )
    assert not res["failed"], res
    members = {m["name"]: m for m in res["members"]}
    assert {n: m["healthy"] for n, m in members.items()} == {"n0": True, "n1": False, "n2": False}
    assert res["healthy"] is False and res["leader"] is None
    assert any("not connected within 1.5s" in e for e in members["n2"]["errors"]), members


def test_an_endpoint_the_member_list_gave_up_on_is_given_a_moment_only_by_the_statuses(
    etcd_bin, etcd_version, tmp_path, unconnectable_url, run_module
):
    """A member cut off the network is asked twice per observation, for the member list and
    for its status: the second call does not wait the connect time again."""
    res = info_without_quorum(
        etcd_bin, etcd_version, tmp_path, unconnectable_url, run_module, lambda c: [c]
    )
    assert not res["failed"], res
    n2 = next(m for m in res["members"] if m["name"] == "n2")
    assert not n2["healthy"]
    if etcd_version.startswith("3.4."):
        # etcd 3.4's MemberList is never linearizable: n0 answers it at once, and the list
        # never waits for the other endpoint.
        assert any("not connected within 1.5s" in e for e in n2["errors"]), n2
        return
    assert "not connected within 1.5s" in str(res["endpoint_errors"][unconnectable_url]), res
    assert any("not connected within 0.25s" in e for e in n2["errors"]), n2


def test_no_endpoint_connects(unconnectable_url, run_module):
    """The member list gives an endpoint that does not connect up after 1.5 s (an observation
    of a cluster whose members are all cut off took 12 s of timeouts), not after 30."""
    res = run_module(
        "etcd_cluster_info",
        {"endpoints": [unconnectable_url], "timeout": 30, "fail_on_unreachable": False},
    )
    assert not res["failed"], res
    assert res["reachable"] is False
    errors = " ".join(str(e) for e in (res.get("endpoint_errors") or {}).values())
    assert "not connected within 1.5s" in errors, res
