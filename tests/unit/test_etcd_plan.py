"""The EtcdCluster planner: one quorum-safe step per reconcile."""

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "etcd_plan", Path(__file__).resolve().parents[2] / "plugins" / "filter" / "etcd_plan.py"
)
etcd_plan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(etcd_plan)
plan = etcd_plan.etcd_cluster_plan

CLUSTER = "c"


def peer(ordinal, state="New", member_id="", data_lost=False, deleting=False, initial=3):
    conditions = [{"type": "DataLost", "status": "True"}] if data_lost else []
    metadata = {"name": f"{CLUSTER}-{ordinal}"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": metadata,
        "spec": {
            "bootstrap": {
                "initialClusterState": state,
                "static": {
                    "initialCluster": [
                        {"name": f"{CLUSTER}-{i}", "host": f"{CLUSTER}-{i}.{CLUSTER}"}
                        for i in range(initial)
                    ]
                }
                if state == "New"
                else {},
            }
        },
        "status": {"memberID": member_id, "conditions": conditions},
    }


def member(ordinal, learner=False, healthy=True, started=True, leader=False):
    name = f"{CLUSTER}-{ordinal}"
    return {
        "name": name if started else "",
        "id": f"{ordinal:016x}",
        "peer_urls": [f"http://{name}.{CLUSTER}.ns.svc.cluster.local:2380"],
        "is_learner": learner,
        "healthy": healthy and started,
        "is_leader": leader,
    }


def info(members, reachable=True):
    voters = [m for m in members if not m["is_learner"]]
    healthy = [m for m in voters if m["healthy"]]
    required = len(voters) // 2 + 1
    return {
        "reachable": reachable,
        "healthy": reachable and len(healthy) >= required,
        "members": members,
        "quorum": {
            "voting": len(voters),
            "healthy_voting": len(healthy),
            "required": required,
            "tolerable_failures": len(healthy) - required,
        },
    }


def observed(replicas, peers, members=None, reachable=True):
    return {
        "cluster": CLUSTER,
        "replicas": replicas,
        "peers": peers,
        "info": info(members or [], reachable) if members is not None else {"reachable": False},
    }


def test_new_cluster_bootstraps_every_initial_member():
    step = plan(observed(3, []))
    assert step["action"] == "bootstrap"
    assert step["peers_to_create"] == ["c-0", "c-1", "c-2"]


def test_interrupted_bootstrap_creates_only_the_missing_peers_of_the_same_initial_cluster():
    step = plan(observed(5, [peer(0), peer(2)]))
    assert step["action"] == "bootstrap"
    assert step["initial_cluster"] == ["c-0", "c-1", "c-2"]
    assert step["peers_to_create"] == ["c-1"]


def test_bootstrap_waits_for_quorum_once_all_peers_exist():
    step = plan(observed(3, [peer(i) for i in range(3)]))
    assert step["action"] == "wait"
    assert step["reason"] == "Bootstrapping"


def test_unreachable_existing_cluster_is_never_rebootstrapped():
    peers = [peer(0, member_id="a"), peer(1, "Existing", member_id="b")]
    step = plan(observed(3, peers))
    assert step == {**step, "action": "wait", "reason": "ClusterUnreachable"}


def test_healthy_cluster_at_size_needs_nothing():
    peers = [peer(i, member_id=str(i)) for i in range(3)]
    step = plan(observed(3, peers, [member(i) for i in range(3)]))
    assert step["action"] == "none"


def test_scale_up_adds_the_lowest_free_ordinal_as_learner():
    peers = [peer(i, member_id=str(i)) for i in range(3)]
    step = plan(observed(5, peers, [member(i) for i in range(3)]))
    assert (step["action"], step["peer"]) == ("add_member", "c-3")


def test_learner_without_peer_gets_its_peer_created_first():
    peers = [peer(i, member_id=str(i)) for i in range(3)]
    members = [member(i) for i in range(3)] + [member(3, learner=True, started=False)]
    step = plan(observed(5, peers, members))
    assert (step["action"], step["peer"]) == ("create_peer", "c-3")


def test_unstarted_learner_is_waited_for():
    peers = [peer(i, member_id=str(i)) for i in range(3)] + [peer(3, "Existing")]
    members = [member(i) for i in range(3)] + [member(3, learner=True, started=False)]
    assert plan(observed(5, peers, members))["reason"] == "LearnerStarting"


def test_started_learner_is_promoted_before_the_next_member_is_added():
    peers = [peer(i, member_id=str(i)) for i in range(4)]
    members = [member(i) for i in range(3)] + [member(3, learner=True)]
    step = plan(observed(5, peers, members))
    assert (step["action"], step["peer"]) == ("promote", "c-3")


def test_scale_down_removes_the_highest_ordinal():
    peers = [peer(i, member_id=str(i)) for i in range(5)]
    step = plan(observed(3, peers, [member(i) for i in range(5)]))
    assert (step["action"], step["peer"]) == ("remove_member", "c-4")


def test_unhealthy_member_blocks_scaling():
    peers = [peer(i, member_id=str(i)) for i in range(3)]
    members = [member(0), member(1), member(2, healthy=False)]
    step = plan(observed(5, peers, members))
    assert (step["action"], step["reason"]) == ("wait", "MembersUnhealthy")
    assert "c-2" in step["message"]


def test_no_quorum_blocks_everything():
    peers = [peer(i, member_id=str(i)) for i in range(3)]
    members = [member(0), member(1, healthy=False), member(2, healthy=False)]
    assert plan(observed(3, peers, members))["reason"] == "QuorumLost"


def test_lost_data_is_replaced_when_quorum_allows():
    peers = [peer(0, member_id="0"), peer(1, member_id="1", data_lost=True), peer(2, member_id="2")]
    members = [member(0), member(1, healthy=False), member(2)]
    step = plan(observed(3, peers, members))
    assert (step["action"], step["peer"]) == ("replace_member", "c-1")


def test_lost_data_waits_when_removal_would_lose_quorum():
    peers = [peer(0, member_id="0"), peer(1, member_id="1", data_lost=True), peer(2, member_id="2")]
    members = [member(0), member(1, healthy=False), member(2, healthy=False)]
    assert plan(observed(3, peers, members))["reason"] == "QuorumLost"


def test_member_removed_behind_our_back_is_replaced():
    peers = [peer(i, member_id=str(i)) for i in range(3)]
    step = plan(observed(3, peers, [member(0), member(1)]))
    assert (step["action"], step["peer"]) == ("replace_member", "c-2")


def test_interrupted_scale_down_finishes_by_deleting_the_removed_peer():
    peers = [peer(i, member_id=str(i)) for i in range(4)]
    step = plan(observed(3, peers, [member(i) for i in range(3)]))
    assert (step["action"], step["peer"]) == ("replace_member", "c-3")


@pytest.mark.parametrize(
    ("name", "ordinal"), [("c-0", 0), ("my-cluster-12", 12), ("nohyphen", -1), ("", -1)]
)
def test_ordinal_of(name, ordinal):
    assert etcd_plan.ordinal_of(name) == ordinal


def status_for(replicas, peers, members):
    observation = observed(replicas, peers, members)
    return etcd_plan.etcd_cluster_status(observation, plan(observation))


def conditions_of(result):
    return {c["type"]: (c["status"], c["reason"]) for c in result["conditions"]}


def test_status_of_a_healthy_cluster_is_available_and_lists_members_in_order():
    peers = [peer(i, member_id=str(i)) for i in range(3)]
    members = [member(2), member(0, leader=True), member(1)]
    result = status_for(3, peers, members)
    assert conditions_of(result) == {
        "Available": ("True", "AllMembersHealthy"),
        "Progressing": ("False", "ClusterReady"),
        "Degraded": ("False", "NoProblems"),
    }
    status = result["status"]
    assert [m["name"] for m in status["members"]] == ["c-0", "c-1", "c-2"]
    assert status["leader"] == "c-0" and status["readyReplicas"] == 3 and status["replicas"] == 3
    assert status["selector"] == "etcd.quorumkeeper.dev/cluster=c"
    assert status["phase"] == "Available"


def test_status_of_a_cluster_with_an_unhealthy_member_is_degraded_and_not_available():
    peers = [peer(i, member_id=str(i)) for i in range(3)]
    members = [member(0, leader=True), member(1), member(2, healthy=False)]
    result = status_for(5, peers, members)
    assert conditions_of(result)["Available"] == ("False", "MembersUnhealthy")
    assert conditions_of(result)["Degraded"] == ("True", "MembersUnhealthy")
    assert result["status"]["phase"] == "Degraded" and result["status"]["readyReplicas"] == 2


def test_status_while_a_learner_catches_up_is_progressing():
    peers = [peer(i, member_id=str(i)) for i in range(4)]
    members = [member(0, leader=True), member(1), member(2), member(3, learner=True)]
    result = status_for(5, peers, members)
    assert conditions_of(result)["Available"][0] == "False"
    assert conditions_of(result)["Progressing"] == ("True", "PromotingLearner")
    assert result["status"]["phase"] == "Progressing"
