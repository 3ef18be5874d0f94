"""Volume growth in the EtcdCluster planner (qk_plan_volumes): a larger spec.storage size grows
the member claims in place, the quota that derives from it waits until every volume has grown,
a member whose StorageClass cannot expand moves to a new volume (a member added on it first,
the old one removed after), a class that cannot be read is reported, and status says the size
the volumes have."""

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import summarize_pvc
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan import (
    etcd_cluster_plan as plan,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_report import (
    etcd_cluster_report as report,
)
from test_config_plan import NEW, NEW_CONFIG, OLD, cluster, member, observation, peer, pod

GIB = 1 << 30


def claim(request=GIB, capacity=GIB, expandable=None, resizing=(), storage_class="local-path"):
    summary = {
        "exists": True,
        "uid": "",
        "phase": "Bound",
        "deleting": False,
        "problem": None,
        "storage_class": storage_class,
        "request_bytes": request,
        "capacity": f"{capacity // GIB}Gi",
        "capacity_bytes": capacity,
        "resizing": list(resizing),
    }
    if expandable is not None:
        summary["expandable"] = expandable
    return summary


def grown_cluster(claims, size="2Gi", configs=(NEW, NEW, NEW)):
    observed = cluster(configs=configs)
    observed["volume_size"] = size
    for i, summary in enumerate(claims):
        observed["pvcs"][f"c-{i}"] = {**summary, "uid": f"uid-{i}"}
    return observed


def test_a_larger_size_grows_every_expandable_claim_at_once():
    step = plan(grown_cluster([claim(expandable=True)] * 3))
    assert step["action"] == "grow_volumes" and step["reason"] == "VolumesGrowing"
    assert step["members"] == [{"name": "c-0"}, {"name": "c-1"}, {"name": "c-2"}]
    assert "no member restarts" in step["message"]


def test_only_the_claims_still_asking_for_less_are_grown():
    claims = [claim(2 * GIB, 2 * GIB), claim(expandable=True), claim(2 * GIB, GIB)]
    step = plan(grown_cluster(claims))
    assert step["action"] == "grow_volumes" and step["members"] == [{"name": "c-1"}]


def test_volumes_asked_to_grow_are_waited_for_with_what_they_report():
    claims = [claim(2 * GIB, 2 * GIB), claim(2 * GIB, GIB, resizing=["Resizing: expanding"])]
    step = plan(grown_cluster(claims + [claim(2 * GIB, 2 * GIB)]))
    assert step["action"] == "wait" and step["reason"] == "VolumesGrowing"
    assert "c-1 has 1Gi (Resizing: expanding)" in step["message"]
    assert step["requeue"] == "poll"


def test_the_quota_of_the_new_size_is_rolled_out_only_once_every_volume_has_grown():
    growing = grown_cluster(
        [claim(2 * GIB, 2 * GIB), claim(2 * GIB, GIB), claim(2 * GIB, 2 * GIB)],
        configs=(OLD, OLD, OLD),
    )
    assert plan(growing)["action"] == "wait"
    grown = grown_cluster([claim(2 * GIB, 2 * GIB)] * 3, configs=(OLD, OLD, OLD))
    step = plan(grown)
    assert step["action"] == "restart_member" and step["config"] == NEW_CONFIG


def moving_cluster(small, leader=0, voters=3, replicas=3, configs=None):
    """``voters`` healthy members; those in ``small`` on a 1Gi claim whose class cannot
    expand, the others on 2Gi; spec.storage asks for 2Gi."""
    configs = configs or [OLD] * voters
    observed = observation(
        [peer(i, configs[i], configs[i]) for i in range(voters)],
        [member(i, leader=i == leader) for i in range(voters)],
        {f"c-{i}": pod(i, configs[i]) for i in range(voters)},
    )
    observed["replicas"] = replicas
    observed["volume_size"] = "2Gi"
    for i in range(voters):
        size = GIB if i in small else 2 * GIB
        observed["pvcs"][f"c-{i}"] = {**claim(size, size, expandable=False), "uid": f"uid-{i}"}
    return observed


def test_a_member_whose_class_cannot_expand_moves_to_a_new_volume_added_first():
    step = plan(moving_cluster(small={0, 1, 2}))
    # Added before any is removed: never fewer voting members than spec.replicas.
    assert step["action"] == "add_member" and step["reason"] == "MovingToNewVolumes"
    assert step["peer"] == "c-3" and step["wait_ready"] == ["c-3"]
    # A follower first; the leader (c-0) last.
    assert "c-1 is removed once c-3 is a voting member" in step["message"]
    assert "0 of 3 moved; StorageClass local-path cannot expand" in step["message"]


def test_once_the_new_member_votes_the_old_one_is_removed_not_the_new_one():
    step = plan(moving_cluster(small={0, 1, 2}, voters=4))
    assert step["action"] == "remove_member" and step["reason"] == "MovingToNewVolumes"
    assert step["peer"] == "c-1" and step["member"]["id"] == f"{1:016x}"


def test_the_freed_ordinal_is_reused_on_a_new_claim_and_the_leader_moves_last():
    # c-1 moved to c-3: its ordinal is free again, for c-2's replacement.
    observed = moving_cluster(small={0, 2}, voters=4)
    del observed["pvcs"]["c-1"], observed["peers"][1], observed["pods"]["c-1"]
    observed["etcd"]["members"].pop(1)
    step = plan(observed)
    assert step["action"] == "add_member" and step["peer"] == "c-1"
    assert "1 of 3 moved" in step["message"] and "c-2 is removed once" in step["message"]
    # Only the leader is left: it is removed (leadership moved first) once its replacement votes.
    step = plan(moving_cluster(small={0}, voters=4))
    assert step["action"] == "remove_member" and step["peer"] == "c-0"


def test_no_move_while_a_member_is_unhealthy_or_a_scale_is_under_way():
    observed = moving_cluster(small={0, 1, 2})
    observed["etcd"]["members"][2] = member(2, healthy=False)
    assert plan(observed)["action"] == "wait"
    # A scale-down goes first, and removes a member that was to move anyway.
    step = plan(moving_cluster(small={0, 1, 2}, replicas=2))
    assert step["action"] == "remove_member" and step["peer"] == "c-1"


def test_the_new_quota_is_rolled_out_only_after_every_member_has_moved():
    moving = moving_cluster(small={2}, configs=[NEW, NEW, OLD])
    assert plan(moving)["action"] == "add_member"
    moved = moving_cluster(small=set(), configs=[NEW, NEW, OLD])
    step = plan(moved)
    assert step["action"] == "restart_member" and step["peer"] == "c-2"


def test_a_moving_cluster_reports_progress_not_a_problem():
    observed = moving_cluster(small={0, 1, 2})
    result = report(observed, plan(observed))
    degraded = next(c for c in result["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "False"
    progressing = next(c for c in result["conditions"] if c["type"] == "Progressing")
    assert progressing["reason"] == "MovingToNewVolumes"


def test_a_class_that_cannot_be_read_is_reported_and_holds_the_rollout():
    observed = grown_cluster([claim(expandable=False)] * 3, configs=(OLD, OLD, OLD))
    for name in ("c-0", "c-1", "c-2"):
        observed["pvcs"][name]["expandable"] = None
    step = plan(observed)
    # Nothing to grow or move, and no member restarted onto a quota its disk cannot hold.
    assert step["action"] == "none"
    result = report({**observed, "config": NEW_CONFIG}, step)
    degraded = next(c for c in result["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "VolumeCannotGrow"
    assert "StorageClass local-path cannot be read" in degraded["message"]
    assert "Name an existing class" in degraded["message"]
    assert "back to 1Gi" in degraded["message"]
    assert result["events"][0]["reason"] == "VolumeCannotGrow"
    assert result["requeue"] == "degraded"


def test_without_spec_storage_nothing_grows():
    observed = cluster(configs=(NEW, NEW, NEW))
    assert plan(observed)["action"] == "none"


def test_status_says_the_size_of_the_smallest_volume():
    observed = grown_cluster(
        [claim(2 * GIB, 2 * GIB), claim(2 * GIB, GIB), claim(2 * GIB, 2 * GIB)]
    )
    result = report(observed, plan(observed))
    assert result["status"]["volumeSize"] == "1Gi"


def test_a_claim_says_what_it_asks_for_what_it_has_and_how_its_resize_goes():
    pvc = {
        "metadata": {"name": "c-0", "uid": "u"},
        "spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "2Gi"}}},
        "status": {
            "phase": "Bound",
            "capacity": {"storage": "1Gi"},
            "conditions": [
                {"type": "FileSystemResizePending", "status": "True", "message": "waiting"},
                {"type": "Resizing", "status": "False"},
                {"type": "Other", "status": "True"},
            ],
        },
    }
    summary = summarize_pvc(pvc)
    assert summary["storage_class"] == "fast"
    assert summary["request_bytes"] == 2 * GIB
    assert (summary["capacity"], summary["capacity_bytes"]) == ("1Gi", GIB)
    assert summary["resizing"] == ["FileSystemResizePending: waiting"]


def test_another_storage_class_moves_every_member_to_a_volume_of_it():
    observed = moving_cluster(small=set(), configs=[OLD] * 3)
    observed["storage_class"] = "fast"
    step = plan(observed)
    assert step["action"] == "add_member" and step["reason"] == "MovingToNewVolumes"
    assert step["message"].startswith("moving the members to volumes of StorageClass fast (0 of 3")
    # Not grown in place on the class it leaves, even one that could expand.
    for claim_ in observed["pvcs"].values():
        claim_.update(request_bytes=GIB, expandable=True)
    assert plan(observed)["action"] == "add_member"
    # Moved: only then is a configuration change rolled out (to the members a move started
    # before it).
    for claim_ in observed["pvcs"].values():
        claim_["storage_class"] = "fast"
    assert plan(observed)["action"] == "restart_member"


def test_a_learner_no_longer_needed_is_removed_rather_than_waited_for():
    # Moving c-0 to a class whose claim never binds, then the class put back: the learner
    # that never started goes, not a voting member.
    observed = moving_cluster(small=set(), voters=1, replicas=1)
    unstarted = {**member(1), "name": "", "is_learner": True, "healthy": False}
    observed["etcd"]["members"].append(unstarted)
    observed["peers"].append(peer(1, OLD, None))
    pending = {"phase": "Pending", "storage_class": "fast", "uid": "uid-1"}
    observed["pvcs"]["c-1"] = {**claim(2 * GIB, 0), **pending}
    observed["storage_class"] = "fast"
    observed["pvcs"]["c-0"]["storage_class"] = "local-path"
    step = plan(observed)
    assert step["action"] == "wait" and step["reason"] == "LearnerStarting"
    observed["storage_class"] = "local-path"
    step = plan(observed)
    assert step["action"] == "remove_member" and step["reason"] == "RemovingLearner"
    assert step["peer"] == "c-1" and step["member"]["is_learner"]


def test_a_scale_up_taken_back_removes_its_unstarted_learner_not_a_voter():
    observed = moving_cluster(small=set())
    observed["etcd"]["members"].append(
        {**member(3), "name": "", "is_learner": True, "healthy": False}
    )
    observed["peers"].append(peer(3, OLD, None))
    observed["pvcs"]["c-3"] = {**claim(2 * GIB, 0), "phase": "Pending", "uid": "uid-3"}
    step = plan(observed)
    assert (step["action"], step["peer"]) == ("remove_member", "c-3")
    observed["replicas"] = 4
    assert plan(observed)["reason"] == "LearnerStarting"
