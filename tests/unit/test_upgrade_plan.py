"""Rolling upgrades in the EtcdCluster planner (a change of spec.version), their status and
Events, and the PodDisruptionBudget the role keeps."""

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.filter import etcd_disruption
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_disruption import (
    max_unavailable,
    pdb_differs,
    render_pdb,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan import (
    etcd_cluster_plan as plan,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_report import (
    etcd_cluster_report as report,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_upgrade import restart_plan

OLD, NEW = "3.5.35", "3.6.16"
NOW = "2026-01-01T00:10:00Z"
CREATED = "2026-01-01T00:09:30Z"  # 30 s before NOW


def peer(i, version=OLD, seen=OLD):
    """An EtcdPeer that ran (``seen``: its status.serverVersion) and whose spec says ``version``."""
    return {
        "name": f"c-{i}",
        "uid": f"peer-{i}",
        "deleting": False,
        "age": 600.0,
        "state": "New",
        "initial_cluster": ["c-0", "c-1", "c-2"],
        "member_id": f"{i:016x}",
        "pvc_uid": f"uid-{i}",
        "version": version,
        "repository": "quay.io/coreos/etcd",
        "status": {"serverVersion": seen} if seen else {},
    }


def member(i, version=OLD, healthy=True, leader=False, learner=False, raft=1000):
    return {
        "name": f"c-{i}",
        "id": f"{i:016x}",
        "peer_urls": [f"http://c-{i}.c.ns.svc.cluster.local:2380"],
        "client_urls": [f"http://c-{i}.c.ns.svc.cluster.local:2379"],
        "is_learner": learner,
        "is_leader": leader,
        "healthy": healthy,
        "version": version if healthy else None,
        "raft_index": raft if healthy else None,
        "errors": [] if healthy else ["connection refused"],
    }


def pod(i, ready=True, problem=None, created=CREATED):
    return {
        "name": f"c-{i}-abcde",
        "ready": ready,
        "deleting": False,
        "restarts": 0,
        "problem": problem,
        "created": created,
    }


def observation(target, peers, members, replicas=None, cluster_version="3.5.0", **extra):
    reachable = members is not None
    members = members or []
    voters = [m for m in members if not m["is_learner"]]
    healthy = [m for m in voters if m["healthy"]]
    quorum = len(voters) // 2 + 1
    observed = {
        "cluster": "c",
        "namespace": "ns",
        "replicas": replicas if replicas is not None else len(peers),
        "version": target,
        "repository": "quay.io/coreos/etcd",
        "peers": peers,
        "pods": {p["name"]: pod(int(p["name"][2:])) for p in peers},
        "pvcs": {
            p["name"]: {"exists": True, "uid": p["pvc_uid"], "deleting": False, "problem": None}
            for p in peers
        },
        "replicasets": {p["name"]: {"exists": True, "failure": ""} for p in peers},
        "etcd": {
            "reachable": reachable,
            "healthy": reachable
            and len(healthy) >= quorum
            and any(m["is_leader"] for m in members),
            "members": members,
            "cluster_version": cluster_version if reachable else None,
            "quorum": {"voting": len(voters), "healthy_voting": len(healthy), "required": quorum},
            "alarms": [],
        },
        "current": {},
        "now": NOW,
    }
    observed.update(extra)
    return observed


def three(leader=2, versions=(OLD, OLD, OLD), seen=None, raft=(1000, 1000, 1000)):
    """Peers and members of a healthy 3-member cluster running ``versions``."""
    seen = seen or versions
    peers = [peer(i, versions[i], seen[i]) for i in range(3)]
    members = [member(i, versions[i], leader=i == leader, raft=raft[i]) for i in range(3)]
    return peers, members


# -- the order of members ---------------------------------------------------------------------


def test_a_version_change_upgrades_the_highest_ordinal_follower_first():
    peers, members = three(leader=2)
    step = plan(observation(NEW, peers, members))
    assert (step["action"], step["reason"], step["peer"]) == ("upgrade_member", "Upgrading", "c-1")
    assert (step["version"], step["from_version"], step["move_leader_to"]) == (NEW, OLD, "")
    assert "0 of 3 members on 3.6.16" in step["message"]


def test_the_leader_goes_last_after_handing_leadership_to_an_upgraded_member():
    peers, members = three(leader=0, versions=(OLD, NEW, NEW), raft=(1000, 998, 1000))
    step = plan(observation(NEW, peers, members))
    assert (step["action"], step["peer"], step["move_leader_to"]) == (
        "upgrade_member",
        "c-0",
        "c-2",
    )
    assert "2 of 3 members on 3.6.16" in step["message"]
    assert "leadership moves to c-2 first" in step["message"]


def test_followers_go_before_a_leader_of_lower_ordinal():
    peers, members = three(leader=0, versions=(OLD, OLD, NEW))
    assert plan(observation(NEW, peers, members))["peer"] == "c-1"


def test_a_one_member_cluster_restarts_its_only_member_without_a_leader_move():
    step = plan(observation(NEW, [peer(0)], [member(0, leader=True)]))
    assert (step["action"], step["peer"], step["move_leader_to"]) == ("upgrade_member", "c-0", "")


def test_a_patch_downgrade_is_an_upgrade_like_any_other():
    peers, members = three(versions=(NEW, NEW, NEW))
    observed = observation("3.6.15", peers, members, cluster_version="3.6.0")
    step = plan(observed)
    assert (step["action"], step["peer"], step["version"]) == ("upgrade_member", "c-1", "3.6.15")


# -- one member at a time: the member restarted for the upgrade -------------------------------


def returning(target=NEW, **pod_fields):
    """c-1 was restarted on ``target`` (its peer says so, it last reported OLD) and is down."""
    peers, members = three(leader=2)
    peers[1]["version"] = target
    members[1] = member(1, healthy=False)
    observed = observation(target, peers, members)
    observed["pods"]["c-1"] = pod(1, ready=False, **pod_fields)
    return observed


def test_the_next_member_waits_for_the_restarted_one_to_come_back():
    step = plan(returning())
    assert (step["action"], step["reason"], step["requeue"]) == ("wait", "Upgrading", "poll")
    assert "waiting for c-1 to come back on 3.6.16" in step["message"]
    assert "0 of 3 members on 3.6.16" in step["message"]


def test_a_member_not_back_by_the_deadline_stops_the_upgrade_and_says_how_to_roll_back():
    observed = returning(created="2026-01-01T00:04:00Z")  # 6 minutes ago, default deadline 5
    step = plan(observed)
    assert (step["action"], step["reason"], step["requeue"]) == (
        "wait",
        "UpgradeFailed",
        "degraded",
    )
    assert "stopped at member c-1" in step["message"]
    assert "360s after its restart" in step["message"]
    assert "set spec.version to 3.5.35" in step["message"]
    observed["upgrade"] = {"memberTimeoutSeconds": 600}
    assert plan(observed)["reason"] == "Upgrading", "the deadline comes from the spec"


def test_an_image_that_cannot_be_pulled_stops_the_upgrade_at_once():
    problem = {
        "reason": "ImagePullFailed",
        "message": "pod c-1-abcde cannot pull image quay.io/coreos/etcd:v3.6.99 (ErrImagePull)",
    }
    observed = returning(target="3.6.99", problem=problem)
    step = plan(observed)
    assert step["reason"] == "UpgradeFailed"
    assert "cannot pull image quay.io/coreos/etcd:v3.6.99" in step["message"]
    assert "the other members keep serving" in step["message"]
    status = report(observed, step)
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "UpgradeFailed")
    assert "c-1" in degraded["message"]


def test_a_member_back_on_the_new_version_but_behind_the_leader_is_waited_for():
    peers, members = three(leader=2, versions=(OLD, NEW, OLD), raft=(5000, 3000, 5000))
    step = plan(observation(NEW, peers, members))
    assert (step["action"], step["reason"], step["requeue"]) == ("wait", "Upgrading", "poll")
    assert "c-1 (raft index 3000 of 5000) to catch up" in step["message"]


def test_a_member_back_whose_pod_is_not_ready_yet_is_waited_for():
    peers, members = three(leader=2, versions=(OLD, NEW, OLD))
    observed = observation(NEW, peers, members)
    observed["pods"]["c-1"]["ready"] = False
    step = plan(observed)
    assert (step["action"], step["reason"]) == ("wait", "Upgrading")
    assert "pods of c-1 to be ready" in step["message"]


def test_an_operator_stopped_after_moving_the_peer_restarts_the_member_again():
    peers, members = three(leader=2)
    peers[1]["version"] = NEW  # the peer moved, its pod never replaced: it still runs OLD
    step = plan(observation(NEW, peers, members))
    assert (step["action"], step["peer"]) == ("upgrade_member", "c-1")


def test_a_member_that_crashes_after_its_upgrade_is_not_an_upgrade_matter():
    peers, members = three(leader=2, versions=(NEW, NEW, NEW))
    members[1] = member(1, healthy=False)
    step = plan(observation(NEW, peers, members, cluster_version="3.6.0"))
    assert step["reason"] == "MembersUnhealthy"
    assert "upgrad" not in step["message"]


def test_the_wait_for_a_returning_member_never_hides_a_lost_quorum():
    observed = returning()
    observed["etcd"]["members"][0] = member(0, healthy=False)
    observed["etcd"]["healthy"] = False
    assert plan(observed)["reason"] == "QuorumLost"


# -- the gate -----------------------------------------------------------------------------


def test_an_unhealthy_member_holds_the_upgrade_back():
    peers, members = three(leader=2, versions=(NEW, OLD, OLD))
    members[0] = member(0, healthy=False)  # upgraded, then went down
    step = plan(observation(NEW, peers, members))
    assert (step["action"], step["reason"], step["requeue"]) == (
        "wait",
        "MembersUnhealthy",
        "degraded",
    )
    assert "upgrading to 3.6.16" in step["message"] and "c-0" in step["message"]


def test_a_member_down_on_the_version_it_ran_is_an_outage_not_a_rollback():
    peers, members = three(leader=2)
    members[0] = member(0, healthy=False)
    step = plan(observation(NEW, peers, members))
    assert (step["action"], step["reason"]) == ("wait", "MembersUnhealthy")


def test_an_active_alarm_holds_the_upgrade_back():
    peers, members = three(leader=2)
    observed = observation(NEW, peers, members)
    observed["etcd"]["alarms"] = [{"member_id": members[0]["id"], "alarm": "CORRUPT"}]
    step = plan(observed)
    assert (step["action"], step["reason"], step["requeue"]) == ("wait", "AlarmActive", "degraded")
    assert "CORRUPT on c-0" in step["message"]


def test_nospace_is_recovered_before_the_upgrade_goes_on():
    peers, members = three(leader=2)
    observed = observation(NEW, peers, members)
    observed["etcd"]["alarms"] = [{"member_id": members[0]["id"], "alarm": "NOSPACE"}]
    step = plan(observed)
    assert (step["action"], step["reason"]) == ("defragment", "DatabaseQuotaExceeded")


def test_a_scale_up_requested_with_the_version_finishes_first_on_the_running_version():
    peers, members = three(leader=2)
    step = plan(observation(NEW, peers, members, replicas=5))
    assert (step["action"], step["peer"], step["version"]) == ("add_member", "c-3", OLD)


def test_a_learner_is_promoted_before_the_upgrade_starts():
    peers, members = three(leader=2)
    peers.append(peer(3, seen=""))
    members.append(member(3, learner=True))
    step = plan(observation(NEW, peers, members, replicas=4))
    assert (step["action"], step["peer"]) == ("promote", "c-3")


def test_a_scale_down_requested_with_the_version_finishes_first():
    peers = [peer(i) for i in range(5)]
    members = [member(i, leader=i == 0) for i in range(5)]
    step = plan(observation(NEW, peers, members, replicas=3))
    assert (step["action"], step["peer"]) == ("remove_member", "c-4")


def test_a_member_whose_data_is_gone_is_replaced_before_the_upgrade_goes_on():
    peers, members = three(leader=2)
    observed = observation(NEW, peers, members)
    observed["pvcs"]["c-0"] = {"exists": False, "uid": "", "deleting": False, "problem": None}
    assert plan(observed)["action"] == "replace_member"


def test_members_added_during_an_unfinished_upgrade_start_on_the_lowest_version():
    peers, members = three(leader=2, versions=(OLD, NEW, NEW))
    step = plan(observation(NEW, peers, members, replicas=5))
    assert (step["action"], step["version"]) == ("add_member", OLD)
    peers, members = three(leader=2, versions=(NEW, NEW, NEW))
    step = plan(observation(NEW, peers, members, replicas=5, cluster_version="3.6.0"))
    assert (step["action"], step["version"]) == ("add_member", NEW)


# -- etcd's rules -------------------------------------------------------------------------


def test_skipping_a_minor_version_is_refused_by_what_the_members_run():
    # The CRD compares the spec with its previous value; members still on 3.4 (the spec went
    # 3.4 -> 3.5 -> 3.6 before they moved) are caught here.
    peers, members = three(leader=2, versions=("3.4.23",) * 3)
    step = plan(observation(NEW, peers, members, cluster_version="3.4.0"))
    assert (step["action"], step["reason"], step["requeue"]) == (
        "wait",
        "UpgradeRefused",
        "degraded",
    )
    assert "skips a minor version" in step["message"]
    assert "c-0 (3.4.23)" in step["message"] and "3.5.x" in step["message"]


def test_3_6_needs_every_member_on_3_5_32_or_later():
    peers, members = three(leader=2, versions=("3.5.20", "3.5.35", "3.5.35"))
    step = plan(observation(NEW, peers, members))
    assert step["reason"] == "UpgradeRefused"
    assert "3.5.32 or later" in step["message"] and "c-0 (3.5.20)" in step["message"]
    peers, members = three(leader=2, versions=("3.5.32",) * 3)
    assert plan(observation(NEW, peers, members))["action"] == "upgrade_member"


def test_a_minor_downgrade_is_refused_once_the_cluster_version_moved():
    peers, members = three(leader=2, versions=(NEW, NEW, NEW))
    step = plan(observation(OLD, peers, members, cluster_version="3.6.0"))
    assert step["reason"] == "UpgradeRefused"
    assert "cluster version is already 3.6.0" in step["message"]


def test_an_unfinished_minor_upgrade_can_be_rolled_back():
    peers, members = three(leader=2, versions=(OLD, OLD, NEW))
    step = plan(observation(OLD, peers, members, cluster_version="3.5.0"))
    assert (step["action"], step["peer"], step["version"]) == ("upgrade_member", "c-2", OLD)


def test_a_member_down_on_a_version_given_up_is_rolled_back_at_once():
    # c-1 could not pull 3.6.99; the spec went back to 3.6.16, which the others run.
    peers, members = three(leader=2, versions=(NEW, NEW, NEW))
    peers[1]["version"] = "3.6.99"
    members[1] = member(1, healthy=False)
    observed = observation(NEW, peers, members, cluster_version="3.6.0")
    step = plan(observed)
    assert (step["action"], step["peer"], step["version"]) == ("upgrade_member", "c-1", NEW)
    assert step["move_leader_to"] == ""


def test_a_one_member_cluster_down_on_a_bad_version_is_rolled_back():
    observed = observation(NEW, [peer(0, version="3.6.99", seen=NEW)], None)
    step = plan(observed)
    assert (step["action"], step["peer"], step["version"]) == ("upgrade_member", "c-0", NEW)


def test_a_one_member_cluster_restarting_on_the_new_version_is_waited_for():
    observed = observation(NEW, [peer(0, version=NEW, seen=OLD)], None)
    observed["pods"]["c-0"]["ready"] = False
    step = plan(observed)
    assert (step["action"], step["reason"]) == ("wait", "Upgrading")


# -- the end of an upgrade ------------------------------------------------------------------


def test_the_upgrade_ends_when_etcd_raised_the_cluster_version():
    peers, members = three(leader=2, versions=(NEW, NEW, NEW))
    step = plan(observation(NEW, peers, members, cluster_version="3.5.0"))
    assert (step["action"], step["reason"], step["requeue"]) == ("wait", "Upgrading", "poll")
    assert "3 of 3 members on 3.6.16" in step["message"]
    assert plan(observation(NEW, peers, members, cluster_version="3.6.0"))["action"] == "none"


def test_a_cluster_that_never_ran_is_left_to_bootstrap():
    peers = [peer(i, version=OLD, seen="") for i in range(3)]
    step = plan(observation(NEW, peers, None))
    assert step["action"] != "upgrade_member"


# -- status and Events ----------------------------------------------------------------------


def test_a_member_back_on_the_new_version_is_an_event_and_its_new_pod_is_not_a_warning():
    peers, members = three(leader=2, versions=(OLD, NEW, OLD), seen=(OLD, OLD, OLD))
    observed = observation(NEW, peers, members)
    observed["current"] = {
        "members": [
            {"name": f"c-{i}", "pod": f"c-{i}-abcde" if i != 1 else "c-1-old", "restarts": 0}
            | {"version": OLD if i != 1 else ""}
            for i in range(3)
        ]
    }
    result = report(observed, plan(observed))
    reasons = [e["reason"] for e in result["events"]]
    assert "MemberPodReplaced" not in reasons
    upgraded = [e for e in result["events"] if e["reason"] == "MemberUpgraded"]
    assert len(upgraded) == 1
    assert "member c-1 runs etcd 3.6.16 (was 3.5.35)" in upgraded[0]["message"]
    assert "1 of 3 members on 3.6.16" in upgraded[0]["message"]
    assert [
        p["status"]["serverVersion"] for p in result["peer_statuses"] if p["name"] == "c-1"
    ] == [NEW]
    # Reported once: the next round compares with the status just written.
    observed["current"]["members"][1]["version"] = NEW
    assert not [e for e in report(observed, plan(observed))["events"] if "Upgraded" in e["reason"]]


def test_the_progress_is_the_progressing_condition():
    peers, members = three(leader=2, versions=(OLD, NEW, NEW))
    observed = observation(NEW, peers, members)
    progressing = next(
        c for c in report(observed, plan(observed))["conditions"] if c["type"] == "Progressing"
    )
    assert (progressing["status"], progressing["reason"]) == ("True", "Upgrading")
    assert "2 of 3 members on 3.6.16" in progressing["message"]


# -- the PodDisruptionBudget ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("voters", "replicas", "expected"),
    [
        (1, 1, 1),  # nothing to protect: a drain must never be blocked forever
        (2, 2, 0),  # either member is half the quorum
        (3, 3, 1),
        (4, 4, 1),
        (5, 5, 2),
        (7, 7, 3),
        (3, 5, 1),  # scaling up: only what the voters that exist can spare
        (4, 5, 1),
        (5, 3, 1),  # scaling down: already what the smaller cluster can spare
        (3, 1, 0),
        (2, 1, 0),
        (1, 3, 1),  # still a one-member cluster
        (None, 3, 1),  # etcd does not answer: the spec's
    ],
)
def test_the_budget_is_what_the_voting_members_can_spare(voters, replicas, expected):
    assert max_unavailable(voters, replicas) == expected


def test_the_budget_is_written_only_when_it_changes():
    update = etcd_disruption.etcd_cluster_pdb_update
    peers, members = three()
    observed = observation(OLD, peers, members, pdb={"exists": True, "max_unavailable": 1})
    assert update(observed) == etcd_disruption.UNCHANGED
    observed["replicas"] = 1  # a scale-down to one member: protect the quorum of 3 until then
    assert update(observed) == 0
    observed["pdb"] = {"exists": False}
    observed["etcd"] = {"reachable": False}
    assert update(observed) == 1, "without an answer, the spec's: a 1-member cluster gets 1"
    observed["pdb"] = {"exists": True, "max_unavailable": 0}
    assert update(observed) == etcd_disruption.UNCHANGED, "never changed on a guess"


def test_the_budget_selects_the_member_pods_only_and_lets_unready_ones_go():
    pdb = render_pdb("c", "ns", 1, "uid-1", "etcd.quorumkeeper.dev/v1alpha1")
    assert pdb["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "etcd",
        "etcd.quorumkeeper.dev/cluster": "c",
    }
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert not pdb_differs(pdb, pdb)
    assert pdb_differs(pdb, render_pdb("c", "ns", 2, "uid-1", "etcd.quorumkeeper.dev/v1alpha1"))


# -- replacing a member's pod ----------------------------------------------------------------


def k8s_pod(name, image, deleting=False):
    meta = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"containers": [{"name": "etcd", "image": image}]}}


IMAGE = "quay.io/coreos/etcd:v3.6.16"


def test_a_pod_on_another_image_is_replaced_through_its_replicaset():
    rs = {"metadata": {"name": "c-1"}}
    plan_ = restart_plan(rs, [k8s_pod("c-1-a", "quay.io/coreos/etcd:v3.5.35")], IMAGE)
    assert plan_ == {"delete": True, "create": True, "stale": ["c-1-a"]}


def test_a_pod_already_on_the_image_is_not_restarted():
    rs = {"metadata": {"name": "c-1"}}
    assert restart_plan(rs, [k8s_pod("c-1-a", IMAGE)], IMAGE) == {
        "delete": False,
        "create": False,
        "stale": [],
    }


def test_an_interrupted_replacement_waits_for_the_deletion_then_creates():
    deleting = {"metadata": {"name": "c-1", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    old = k8s_pod("c-1-a", "quay.io/coreos/etcd:v3.5.35", deleting=True)
    assert restart_plan(deleting, [old], IMAGE) == {"delete": False, "create": True, "stale": []}
    assert restart_plan(None, [], IMAGE) == {"delete": False, "create": True, "stale": []}
