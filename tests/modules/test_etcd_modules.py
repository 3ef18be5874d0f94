"""etcd_cluster_info / etcd_member against real etcd processes, run through ``ansible``."""

from __future__ import annotations

import time

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    ConnectionProfile,
    etcd_client,
)

import etcdharness


def members_by_name(cluster):
    with etcd_client(ConnectionProfile(cluster.running_endpoints(), timeout=5)) as client:
        members, _, _ = client.member_list()
    return {m["name"] or m["peer_urls"][0]: m for m in members}


def info(run_module, cluster):
    res = run_module("etcd_cluster_info", {"endpoints": cluster.running_endpoints()})
    assert not res["failed"], res
    return res


def wait_for(predicate, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_cluster_info_healthy(etcd_factory, run_module, etcd_version):
    cluster = etcd_factory(3)
    res = info(run_module, cluster)
    assert res["changed"] is False
    assert res["reachable"] is True and res["healthy"] is True
    assert sorted(m["name"] for m in res["members"]) == ["n0", "n1", "n2"]
    assert res["quorum"] == {
        "voting": 3,
        "healthy_voting": 3,
        "required": 2,
        "tolerable_failures": 1,
    }
    leaders = [m for m in res["members"] if m["is_leader"]]
    assert len(leaders) == 1 and res["leader"] == {
        "id": leaders[0]["id"],
        "name": leaders[0]["name"],
    }
    major_minor = ".".join(etcd_version.split(".")[:2])
    assert res["cluster_version"] == f"{major_minor}.0"
    for m in res["members"]:
        assert m["healthy"] and m["version"] == etcd_version and not m["is_learner"]
        assert int(m["id"], 16) > 0 and m["id"] == m["id"].lower()
        assert m["db_size"] > 0 and m["raft_index"] > 0 and m["raft_term"] > 0
        assert m["client_urls"] == [cluster.nodes[m["name"]].client_url]
        assert m["peer_urls"] == [cluster.nodes[m["name"]].peer_url]


def test_cluster_info_member_down(etcd_factory, run_module):
    cluster = etcd_factory(3)
    cluster.stop_and_wait_for_leader("n2")
    # only the dead member's endpoint first: the module must move on to the next one
    res = run_module("etcd_cluster_info", {"endpoints": cluster.endpoints(["n2", "n0"])})
    assert not res["failed"], res
    down = next(m for m in res["members"] if m["name"] == "n2")
    assert down["healthy"] is False and down["errors"]
    assert res["quorum"]["healthy_voting"] == 2 and res["quorum"]["tolerable_failures"] == 0
    assert res["healthy"] is True
    assert cluster.nodes["n2"].client_url in res["endpoint_errors"]


def test_add_learner_start_promote(etcd_factory, run_module):
    cluster = etcd_factory(3)
    before = members_by_name(cluster)
    new = cluster.new_node("n3")
    args = {"endpoints": cluster.running_endpoints(), "name": "n3", "peer_urls": [new.peer_url]}

    # check mode: reports the plan, changes nothing
    res = run_module("etcd_member", args, check=True)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    assert res["member"]["id"] is None and res["member"]["is_learner"] is True
    assert f"n3={new.peer_url}" in res["initial_cluster"]
    assert members_by_name(cluster).keys() == before.keys()

    res = run_module("etcd_member", args)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    assert res["member"]["is_learner"] is True and res["member"]["name"] == "n3"
    new_id = res["member"]["id"]
    parts = sorted(res["initial_cluster"].split(","))
    expected = sorted(
        [f"{n}={cluster.nodes[n].peer_url}" for n in ("n0", "n1", "n2")] + [f"n3={new.peer_url}"]
    )
    assert parts == expected

    # idempotent, matched by peer URL while the member has no name yet
    again = run_module("etcd_member", args)
    assert not again["failed"] and again["changed"] is False, again
    assert again["member"]["id"] == new_id
    assert again["initial_cluster"] == res["initial_cluster"]

    # a second learner is refused by etcd, with a clear message
    extra = cluster.new_node("n4")
    second = run_module(
        "etcd_member",
        {"endpoints": cluster.running_endpoints(), "name": "n4", "peer_urls": [extra.peer_url]},
    )
    assert second["failed"] and second["changed"] is False
    assert "already has a learner" in second["msg"] and "one learner at a time" in second["msg"]
    assert "n4" not in members_by_name(cluster)

    # promoting before the learner runs fails with the raft indexes, quickly
    early = run_module(
        "etcd_member",
        {
            "endpoints": cluster.running_endpoints(),
            "name": "n3",
            "peer_urls": [new.peer_url],
            "state": "promoted",
            "wait_timeout": 1,
        },
    )
    assert early["failed"] and early["changed"] is False, early
    assert "has not caught up" in early["msg"] and "leader's" in early["msg"]

    cluster.join("n3", res["initial_cluster"])
    assert members_by_name(cluster)["n3"]["is_learner"] is True

    promote = {
        "endpoints": cluster.running_endpoints(),
        "name": "n3",
        "state": "promoted",
        "wait_timeout": 30,
    }
    res = run_module("etcd_member", promote, check=True)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    assert members_by_name(cluster)["n3"]["is_learner"] is True

    res = run_module("etcd_member", promote)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    assert res["member"]["is_learner"] is False and res["member"]["id"] == new_id
    res = run_module("etcd_member", promote)
    assert not res["failed"] and res["changed"] is False, res

    after = info(run_module, cluster)
    assert after["quorum"]["voting"] == 4 and after["quorum"]["healthy_voting"] == 4
    assert after["quorum"]["required"] == 3
    assert after["healthy"] is True


def test_peer_urls_are_updated_only_when_asked(etcd_factory, run_module):
    cluster = etcd_factory(3)
    node = cluster.nodes["n1"]
    # Another name of the same listener: the member stays reachable by its peers throughout.
    urls = [node.peer_url, node.peer_url.replace("127.0.0.1", "localhost")]
    args = {"endpoints": cluster.running_endpoints(), "name": "n1", "peer_urls": urls}

    left = run_module("etcd_member", args)
    assert not left["failed"] and left["changed"] is False, left
    assert "set update_peer_urls to change them" in " ".join(left.get("warnings", []))
    assert members_by_name(cluster)["n1"]["peer_urls"] == [node.peer_url]

    planned = run_module("etcd_member", {**args, "update_peer_urls": True}, check=True)
    assert planned["changed"] is True and planned["member"]["peer_urls"] == urls, planned
    assert members_by_name(cluster)["n1"]["peer_urls"] == [node.peer_url]

    updated = run_module("etcd_member", {**args, "update_peer_urls": True})
    assert not updated["failed"] and updated["changed"] is True, updated.get("msg", updated)
    assert sorted(members_by_name(cluster)["n1"]["peer_urls"]) == sorted(urls)
    assert f"n1={urls[0]}" in updated["initial_cluster"]
    again = run_module("etcd_member", {**args, "update_peer_urls": True})
    assert again["changed"] is False, again
    cluster.wait_healthy("n1")


def test_remove_follower(etcd_factory, run_module):
    cluster = etcd_factory(3)
    state = info(run_module, cluster)
    follower = next(m for m in state["members"] if not m["is_leader"])
    args = {"endpoints": cluster.endpoints(), "name": follower["name"], "state": "absent"}

    res = run_module("etcd_member", args, check=True)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    assert res["actions"] == [f"remove member {follower['name']} (id {follower['id']})"]
    assert follower["name"] in members_by_name(cluster)

    res = run_module("etcd_member", args)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    assert "leader_moved_to" not in res
    assert follower["name"] not in members_by_name(cluster)

    res = run_module("etcd_member", args)
    assert not res["failed"] and res["changed"] is False, res

    cluster.stop(follower["name"])
    after = info(run_module, cluster)
    assert after["quorum"]["voting"] == 2 and after["healthy"] is True


def test_remove_leader_moves_leadership(etcd_factory, run_module):
    cluster = etcd_factory(3)
    state = info(run_module, cluster)
    leader = state["leader"]
    args = {"endpoints": cluster.endpoints(), "id": leader["id"], "state": "absent"}

    res = run_module("etcd_member", args, check=True)
    assert not res["failed"] and res["changed"] is True
    assert res["actions"][0].startswith(f"move leadership from member {leader['name']}")
    assert info(run_module, cluster)["leader"] == leader  # nothing moved in check mode

    res = run_module("etcd_member", args)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    moved_to = res["leader_moved_to"]
    assert moved_to["id"] != leader["id"]
    assert leader["name"] not in members_by_name(cluster)

    remaining = [n for n in cluster.nodes if n != leader["name"]]
    with etcd_client(ConnectionProfile(cluster.endpoints(remaining), timeout=5)) as client:
        client.put("qk/after-leader-removal", "ok")
        assert client.get("qk/after-leader-removal") == b"ok"
    cluster.stop(leader["name"])
    after = info(run_module, cluster)
    assert after["healthy"] is True and after["quorum"]["voting"] == 2
    assert after["leader"]["id"] == moved_to["id"]


def test_refuse_quorum_losing_removal(etcd_factory, run_module):
    cluster = etcd_factory(3)
    # an (unstarted) learner, added while all voters are up: etcd refuses any add otherwise
    extra = cluster.new_node("n3")
    add = {"endpoints": cluster.endpoints(), "name": "n3", "peer_urls": [extra.peer_url]}
    res = run_module("etcd_member", add)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)

    cluster.stop("n2")
    before = members_by_name(cluster)
    healthy = "n0"
    for check in (True, False):
        res = run_module(
            "etcd_member",
            {"endpoints": cluster.running_endpoints(), "name": healthy, "state": "absent"},
            check=check,
        )
        assert res["failed"] and res["changed"] is False, res
        assert res["msg"].startswith(f"refusing to remove member {healthy} (id ")
        assert "would leave 1 healthy voting members of 2, quorum needs 2" in res["msg"]
    assert members_by_name(cluster).keys() == before.keys()

    # a learner can always go, even now
    res = run_module(
        "etcd_member",
        {
            "endpoints": cluster.running_endpoints(),
            "peer_urls": [extra.peer_url],
            "state": "absent",
        },
    )
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)

    # and removing the dead member keeps quorum (2 healthy of 2)
    res = run_module(
        "etcd_member",
        {"endpoints": cluster.running_endpoints(), "name": "n2", "state": "absent"},
    )
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    assert sorted(members_by_name(cluster)) == ["n0", "n1"]


def test_refuse_removing_last_voter(etcd_factory, run_module):
    cluster = etcd_factory(1)
    res = run_module(
        "etcd_member", {"endpoints": cluster.endpoints(), "name": "n0", "state": "absent"}
    )
    assert res["failed"] and res["changed"] is False
    assert "last voting member" in res["msg"]
    assert list(members_by_name(cluster)) == ["n0"]


def test_promote_missing_member_fails(etcd_factory, run_module):
    cluster = etcd_factory(1)
    res = run_module(
        "etcd_member", {"endpoints": cluster.endpoints(), "name": "nope", "state": "promoted"}
    )
    assert res["failed"] and "no such member" in res["msg"]
    res = run_module(
        "etcd_member", {"endpoints": cluster.endpoints(), "name": "nope", "state": "absent"}
    )
    assert not res["failed"] and res["changed"] is False


def test_unreachable_endpoints(run_module):
    # no etcd needed: ports that nothing listens on
    ports = [etcdharness.free_port(), etcdharness.free_port()]
    endpoints = [f"http://127.0.0.1:{p}" for p in ports]
    run = run_module
    res = run("etcd_cluster_info", {"endpoints": endpoints, "timeout": 2})
    assert res["failed"] is True
    assert res["msg"].startswith("cannot reach etcd: no etcd endpoint answered")
    for ep in endpoints:
        assert ep in res["msg"]
    assert "Connection refused" in res["msg"] or "UNAVAILABLE" in res["msg"]

    res = run(
        "etcd_cluster_info", {"endpoints": endpoints, "timeout": 2, "fail_on_unreachable": False}
    )
    assert res["failed"] is False and res["reachable"] is False and res["healthy"] is False
    assert res["members"] == [] and set(res["endpoint_errors"]) == set(endpoints)

    res = run(
        "etcd_member",
        {"endpoints": endpoints, "name": "x", "peer_urls": ["http://127.0.0.1:1"], "timeout": 2},
    )
    assert res["failed"] and "cannot reach etcd" in res["msg"] and endpoints[0] in res["msg"]


@pytest.mark.parametrize("bad", ["ftp://127.0.0.1:2379", "http://"])
def test_bad_endpoint_is_reported(bad, tmp_path):
    run = etcdharness.ModuleRunner(tmp_path)
    res = run("etcd_cluster_info", {"endpoints": [bad]})
    assert res["failed"] and "invalid etcd connection options" in res["msg"]


def test_module_utils_direct(etcd_factory):
    """The sync wrapper itself: status per member, put/get, member list failover."""
    cluster = etcd_factory(3)
    with etcd_client(
        ConnectionProfile(["http://127.0.0.1:1"] + cluster.endpoints(), timeout=2)
    ) as client:
        members, used, errors = client.member_list()
        assert used == cluster.nodes["n0"].client_url
        assert "http://127.0.0.1:1" in errors
        assert len(members) == 3
        st = client.status(cluster.nodes["n1"].client_url)
        assert st["id"] == next(m["id"] for m in members if m["name"] == "n1")
        client.put("k", "v")
        assert client.get("k") == b"v"
        wait_for(lambda: client.cluster_info()["healthy"], what="healthy cluster")


def test_member_list_does_not_wait_for_a_member_that_hangs(etcd_factory):
    """A partitioned member (here: stopped, so its connections hang) must not cost every
    member_list its whole timeout: the first linearizable answer ends the wait."""
    cluster = etcd_factory(3)
    with etcd_client(ConnectionProfile(cluster.endpoints(), timeout=5)) as client:
        info = wait_for(lambda: (i := client.cluster_info())["healthy"] and i, what="healthy")
    # A follower: stopping the leader would make the others wait for an election instead.
    follower = next(m["name"] for m in info["members"] if not m["is_leader"])
    hung = cluster.nodes[follower]
    cluster.freeze(follower)
    try:
        with etcd_client(ConnectionProfile(cluster.endpoints(), timeout=10)) as client:
            started = time.monotonic()
            members, used, _ = client.member_list()
            elapsed = time.monotonic() - started
        assert len(members) == 3
        assert used != hung.client_url
        assert elapsed < 5, f"member_list waited {elapsed:.1f}s for the hung member"
    finally:
        cluster.thaw(follower)


def test_member_list_without_quorum_does_not_wait_out_the_timeout(etcd_factory):
    """After a quorum loss (two of three members stopped: their connections hang) no leader
    is elected, so a linearizable MemberList can never answer: the survivor's serializable list
    is used once it has reported no leader for longer than an election takes."""
    cluster = etcd_factory(3)
    survivor = cluster.nodes["n0"]
    for name in ("n1", "n2"):
        cluster.freeze(name)
    try:
        with etcd_client(ConnectionProfile(cluster.endpoints(), timeout=10)) as client:
            wait_for(
                lambda: not client.status(survivor.client_url)["leader_int"],
                what="the survivor to notice it has no leader",
            )
            started = time.monotonic()
            members, used, errors = client.member_list()
            elapsed = time.monotonic() - started
        assert len(members) == 3
        assert used == survivor.client_url
        if not cluster.version.startswith("3.4."):  # 3.4 lists members locally anyway
            assert "no leader" in errors[survivor.client_url]
        assert elapsed < 8, f"member_list waited {elapsed:.1f}s without a quorum"
    finally:
        for name in ("n1", "n2"):
            cluster.thaw(name)
