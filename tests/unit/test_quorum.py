from __future__ import annotations

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import quorum_size
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_members import (
    endpoint_target,
    find_member,
    initial_cluster,
    leader_from_statuses,
    member_id_hex,
    parse_member_id,
    pick_new_leader,
    quorum_summary,
    removal_check,
)


def m(i, healthy=True, learner=False, name=None, raft_index=0):
    return {
        "id": format(i, "x"),
        "name": f"n{i}" if name is None else name,
        "peer_urls": [f"http://10.0.0.{i}:2380"],
        "client_urls": [f"http://10.0.0.{i}:2379"] if name != "" else [],
        "is_learner": learner,
        "healthy": healthy,
        "raft_index": raft_index,
    }


@pytest.mark.parametrize("voters,q", [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)])
def test_quorum_size(voters, q):
    assert quorum_size(voters) == q


def test_quorum_summary():
    assert quorum_summary(3, 3) == {
        "voting": 3,
        "healthy_voting": 3,
        "required": 2,
        "tolerable_failures": 1,
    }
    assert quorum_summary(5, 3)["tolerable_failures"] == 0
    assert quorum_summary(3, 1)["tolerable_failures"] == 0
    assert quorum_summary(0, 0)["required"] == 0


def test_remove_healthy_from_three_all_up_is_ok():
    ok, msg = removal_check([m(1), m(2), m(3)], "2")
    assert ok, msg


def test_remove_healthy_with_one_down_is_refused():
    ok, msg = removal_check([m(1), m(2), m(3, healthy=False)], "1")
    assert not ok
    assert msg == (
        "refusing to remove member n1 (id 1): would leave 1 healthy voting members of 2, "
        "quorum needs 2"
    )


def test_remove_the_down_member_is_ok():
    ok, _ = removal_check([m(1), m(2), m(3, healthy=False)], "3")
    assert ok


def test_five_members_two_down():
    members = [m(1), m(2), m(3), m(4, healthy=False), m(5, healthy=False)]
    # 4 voters left, 2 healthy, quorum 3
    ok, msg = removal_check(members, "1")
    assert not ok and "would leave 2 healthy voting members of 4, quorum needs 3" in msg
    ok, _ = removal_check(members, "5")  # 4 left, 3 healthy, quorum 3
    assert ok


def test_learner_removal_always_safe_and_not_counted():
    members = [m(1), m(2, healthy=False), m(3, healthy=False), m(9, learner=True)]
    assert removal_check(members, "9")[0]
    # learners do not count as healthy voters
    members = [m(1), m(2), m(3, healthy=False), m(9, learner=True)]
    assert not removal_check(members, "1")[0]


def test_last_voter_refused():
    ok, msg = removal_check([m(1), m(9, learner=True)], "1")
    assert not ok and "last voting member" in msg


def test_two_voters():
    assert removal_check([m(1), m(2)], "1")[0]  # 1 left, 1 healthy, quorum 1
    assert not removal_check([m(1), m(2, healthy=False)], "1")[0]


def test_absent_target_is_ok():
    assert removal_check([m(1)], "ff")[0]


def test_initial_cluster_matches_etcdctl():
    members = [m(1), m(2), m(3, name="")]
    out = initial_cluster(members, "3", "n3")
    assert out == "n1=http://10.0.0.1:2380,n2=http://10.0.0.2:2380,n3=http://10.0.0.3:2380"


def test_find_member_by_name_peer_url_and_id():
    members = [m(1), m(2), m(3, name="")]
    assert find_member(members, name="n2")["id"] == "2"
    assert find_member(members, name="n3", peer_urls=["http://10.0.0.3:2380/"])["id"] == "3"
    assert find_member(members, member_id="0x1")["name"] == "n1"
    assert find_member(members, name="n9") is None
    # an empty name never matches an unstarted member by name
    assert find_member(members, name="") is None


def test_member_ids():
    assert member_id_hex(0x8E9E05C52164694D) == "8e9e05c52164694d"
    assert parse_member_id("8e9e05c52164694d") == 0x8E9E05C52164694D
    assert parse_member_id("0X10") == 16
    with pytest.raises(ValueError):
        parse_member_id("zz")


def test_endpoint_target():
    assert endpoint_target("http://127.0.0.1:2379") == ("127.0.0.1:2379", False)
    assert endpoint_target("https://etcd-0.etcd.ns.svc:2379/") == ("etcd-0.etcd.ns.svc:2379", True)
    assert endpoint_target("10.0.0.1") == ("10.0.0.1:2379", False)
    assert endpoint_target("http://[::1]:2379") == ("[::1]:2379", False)
    for bad in ("ftp://x:1", "http://"):
        with pytest.raises(ValueError):
            endpoint_target(bad)


def test_leader_majority_and_new_leader_choice():
    assert leader_from_statuses([{"leader_int": 5}, {"leader_int": 5}, {"leader_int": 7}]) == 5
    assert leader_from_statuses([{"leader_int": 0}]) == 0
    members = [
        m(1, raft_index=10),
        m(2, raft_index=12),
        m(3, raft_index=30, healthy=False),
        m(4, learner=True, raft_index=99),
    ]
    assert pick_new_leader(members, "1")["id"] == "2"
    assert pick_new_leader([m(1), m(2, healthy=False)], "1") is None
