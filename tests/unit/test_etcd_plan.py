"""The EtcdCluster planner (one quorum-safe step at a time) and the report it writes."""

from datetime import UTC, datetime, timedelta

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_observe import (
    observe_backups,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import ordinal_of
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import KubeError
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan import (
    etcd_cluster_plan as plan,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_report import (
    etcd_cluster_report as report,
)

CLUSTER = "c"


def peer(ordinal, state="New", member_id="", pvc_uid="", deleting=False, initial=3, age=100.0):
    """An EtcdPeer as etcd_cluster_observe summarizes it."""
    return {
        "name": f"{CLUSTER}-{ordinal}",
        "uid": f"peer-{ordinal}",
        "deleting": deleting,
        "age": age,
        "state": state,
        "initial_cluster": [f"{CLUSTER}-{i}" for i in range(initial)] if state == "New" else [],
        "member_id": member_id,
        "pvc_uid": pvc_uid,
        "version": "3.6.16",
        "status": {},
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
        "version": "3.6.16" if started and healthy else None,
    }


def etcd(members, reachable=True, cluster_version="3.6.0"):
    voters = [m for m in members if not m["is_learner"]]
    healthy = [m for m in voters if m["healthy"]]
    required = len(voters) // 2 + 1
    return {
        "reachable": reachable,
        "healthy": reachable and len(healthy) >= required and any(m["is_leader"] for m in members),
        "members": members,
        "cluster_version": cluster_version,
        "quorum": {"voting": len(voters), "healthy_voting": len(healthy), "required": required},
    }


def pod(ordinal, ready=True, restarts=0, problem=None, name=None):
    return {
        "name": name or f"{CLUSTER}-{ordinal}-abcde",
        "ready": ready,
        "deleting": False,
        "restarts": restarts,
        "problem": problem,
    }


def pvc(uid="", exists=True, deleting=False, problem=None):
    return {"exists": exists, "uid": uid, "deleting": deleting, "problem": problem}


def observed(replicas, peers, members=None, reachable=True, pods=None, pvcs=None, current=None):
    names = [p["name"] for p in peers]
    return {
        "cluster": CLUSTER,
        "replicas": replicas,
        "peers": peers,
        "pods": pods if pods is not None else {n: pod(int(n.rsplit("-", 1)[1])) for n in names},
        "pvcs": pvcs if pvcs is not None else {p["name"]: pvc(p["pvc_uid"]) for p in peers},
        "replicasets": {n: {"exists": True, "failure": ""} for n in names},
        "etcd": etcd(members, reachable) if members is not None else {"reachable": False},
        "current": current or {},
    }


def healthy(n, leader=0):
    return [member(i, leader=i == leader) for i in range(n)]


def started(n):
    return [peer(i, member_id=str(i), pvc_uid=f"uid-{i}") for i in range(n)]


# -- plan ---------------------------------------------------------------------------------------


def test_new_cluster_bootstraps_every_initial_member():
    step = plan(observed(3, []))
    assert (step["action"], step["requeue"]) == ("bootstrap", "event")
    assert step["peers_to_create"] == ["c-0", "c-1", "c-2"]


def test_interrupted_bootstrap_creates_only_the_missing_peers_of_the_same_initial_cluster():
    step = plan(observed(5, [peer(0), peer(2)]))
    assert step["action"] == "bootstrap"
    assert step["initial_cluster"] == ["c-0", "c-1", "c-2"]
    assert step["peers_to_create"] == ["c-1"]


def test_bootstrap_waits_for_quorum_once_all_peers_exist():
    step = plan(observed(3, [peer(i) for i in range(3)]))
    assert (step["action"], step["reason"], step["requeue"]) == ("wait", "Bootstrapping", "event")


def test_unreachable_existing_cluster_is_never_rebootstrapped():
    peers = [peer(0, member_id="a"), peer(1, "Existing", member_id="b")]
    step = plan(observed(3, peers))
    assert (step["action"], step["reason"]) == ("wait", "ClusterUnreachable")


def test_healthy_cluster_at_size_needs_nothing():
    step = plan(observed(3, started(3), healthy(3)))
    assert (step["action"], step["requeue"]) == ("none", "steady")


def test_scale_up_adds_the_lowest_free_ordinal_as_learner():
    step = plan(observed(5, started(3), healthy(3)))
    assert (step["action"], step["peer"], step["requeue"]) == ("add_member", "c-3", "next")


def test_scale_up_adds_every_missing_member_in_one_step_lowest_free_ordinals_first():
    # Members c-0, c-2 and c-3 (c-1 was removed): the free ordinals are 1 and 4.
    ordinals = (0, 2, 3)
    peers = [peer(i, member_id=str(i), pvc_uid=f"uid-{i}") for i in ordinals]
    members = [member(i, leader=i == 0) for i in ordinals]
    step = plan(observed(5, peers, members))
    assert (step["action"], step["peer"], step["peers"]) == ("add_member", "c-1", ["c-1", "c-4"])
    assert step["message"] == (
        "scaling up from 3 to 5: adding c-1, c-4 one at a time, each as a learner promoted once "
        "it has caught up"
    )
    # Without a quorum nothing is added.
    no_quorum = [member(i, leader=i == 0, healthy=i == 0) for i in ordinals]
    assert plan(observed(5, peers, no_quorum))["action"] != "add_member"


def test_learner_without_peer_gets_its_peer_created_first():
    members = healthy(3) + [member(3, learner=True, started=False)]
    step = plan(observed(5, started(3), members))
    assert (step["action"], step["peer"]) == ("create_peer", "c-3")


def test_unstarted_learner_is_waited_for_until_its_pod_is_ready():
    peers = started(3) + [peer(3, "Existing")]
    members = healthy(3) + [member(3, learner=True, started=False)]
    step = plan(observed(5, peers, members))
    assert (step["reason"], step["requeue"]) == ("LearnerStarting", "event")


def test_started_learner_is_promoted_before_the_next_member_is_added():
    members = healthy(3) + [member(3, learner=True)]
    step = plan(observed(5, started(4), members))
    assert (step["action"], step["peer"]) == ("promote", "c-3")


def test_scale_down_removes_the_highest_ordinal():
    step = plan(observed(3, started(5), healthy(5)))
    assert (step["action"], step["peer"]) == ("remove_member", "c-4")


def test_scale_down_removes_every_extra_member_in_one_step_highest_ordinal_first():
    members = healthy(5)
    step = plan(observed(3, started(5), members))
    assert step["members"] == [
        {"name": "c-4", "id": members[4]["id"]},
        {"name": "c-3", "id": members[3]["id"]},
    ]
    assert step["message"] == "scaling down from 5 to 3: removing c-4, c-3 one at a time"
    one = plan(observed(4, started(5), members))
    assert (one["message"], one["members"]) == (
        "scaling down from 5 to 4: removing c-4",
        [{"name": "c-4", "id": members[4]["id"]}],
    )


def test_unhealthy_member_blocks_scaling():
    members = [member(0, leader=True), member(1), member(2, healthy=False)]
    step = plan(observed(5, started(3), members))
    assert (step["action"], step["reason"], step["requeue"]) == (
        "wait",
        "MembersUnhealthy",
        "degraded",
    )
    assert "c-2" in step["message"]


def test_no_quorum_blocks_everything():
    members = [member(0, leader=True), member(1, healthy=False), member(2, healthy=False)]
    assert plan(observed(3, started(3), members))["reason"] == "QuorumLost"


@pytest.mark.parametrize(
    "claim",
    [pvc(exists=False), pvc(uid="another-claim"), pvc(uid="uid-1", deleting=True)],
    ids=["gone", "replaced", "being-deleted"],
)
def test_lost_data_is_replaced_when_quorum_allows(claim):
    observation = observed(3, started(3), healthy(3))
    observation["pvcs"]["c-1"] = claim
    step = plan(observation)
    assert (step["action"], step["peer"]) == ("replace_member", "c-1")
    assert "data volume is gone" in step["message"]


def test_lost_members_are_replaced_together_while_each_removal_keeps_the_quorum():
    # c-1..c-3 still run on volumes that are gone; c-4 is down with its data.
    members = [member(i, leader=i == 0, healthy=i != 4) for i in range(5)]
    observation = observed(5, started(5), members)
    for i in (1, 2, 3):
        observation["pvcs"][f"c-{i}"] = pvc(exists=False)
    step = plan(observation)
    assert step["action"] == "replace_member"
    assert [m["name"] for m in step["members"]] == ["c-1", "c-2"], "c-3 would leave 1 of 2"
    assert [m["id"] for m in step["members"]] == [members[1]["id"], members[2]["id"]]


def test_a_claim_never_recorded_is_not_data_loss():
    peers = started(3)
    peers[1]["pvc_uid"] = ""
    observation = observed(3, peers, healthy(3))
    observation["pvcs"]["c-1"] = pvc(exists=False)
    assert plan(observation)["action"] == "none"


def test_lost_data_waits_when_removal_would_lose_quorum():
    members = [member(0, leader=True), member(1, healthy=False), member(2, healthy=False)]
    observation = observed(3, started(3), members)
    observation["pvcs"]["c-1"] = pvc(exists=False)
    assert plan(observation)["reason"] == "QuorumLost"


def test_member_removed_behind_our_back_is_replaced():
    step = plan(observed(3, started(3), healthy(2)))
    assert (step["action"], step["peer"]) == ("replace_member", "c-2")


def test_interrupted_scale_down_finishes_by_deleting_the_removed_peer():
    step = plan(observed(3, started(4), healthy(3)))
    assert (step["action"], step["peer"]) == ("replace_member", "c-3")


@pytest.mark.parametrize(
    ("name", "ordinal"), [("c-0", 0), ("my-cluster-12", 12), ("nohyphen", -1), ("", -1)]
)
def test_ordinal_of(name, ordinal):
    assert ordinal_of(name) == ordinal


# -- report -------------------------------------------------------------------------------------


def report_for(observation):
    return report(observation, plan(observation))


def conditions_of(result):
    return {c["type"]: (c["status"], c["reason"]) for c in result["conditions"]}


def test_report_of_a_healthy_cluster_is_available_and_lists_members_with_their_pods():
    members = [member(2), member(0, leader=True), member(1)]
    result = report_for(observed(3, started(3), members))
    assert conditions_of(result) == {
        "Available": ("True", "AllMembersHealthy"),
        "Progressing": ("False", "ClusterReady"),
        "Degraded": ("False", "NoProblems"),
    }
    status = result["status"]
    assert [m["name"] for m in status["members"]] == ["c-0", "c-1", "c-2"]
    assert status["members"][1] == {
        "name": "c-1",
        "id": f"{1:016x}",
        "isLearner": False,
        "isLeader": False,
        "version": "3.6.16",
        "healthy": True,
        "pod": "c-1-abcde",
        "podReady": True,
        "restarts": 0,
    }
    assert status["leader"] == "c-0" and status["readyReplicas"] == 3 and status["replicas"] == 3
    assert status["selector"] == "etcd.quorumkeeper.dev/cluster=c"
    assert (status["phase"], status["clusterVersion"]) == ("Available", "3.6.0")
    assert result["requeue"] == "steady" and result["events"] == []


def test_invalid_certificates_hold_every_step_but_the_status_still_tells_what_etcd_does():
    # The role reports with this hold instead of a planned step (reconcile.yml).
    hold = {
        "action": "wait",
        "reason": "CertificatesInvalid",
        "requeue": "degraded",
        "message": "spec.tls.peer.secretName: Secret mine does not exist",
    }
    result = report(observed(3, started(3), healthy(3)), hold)
    assert conditions_of(result) == {
        "Available": ("True", "AllMembersHealthy"),
        "Progressing": ("True", "CertificatesInvalid"),
        "Degraded": ("True", "CertificatesInvalid"),
    }
    assert result["status"]["phase"] == "Degraded"
    assert [e["reason"] for e in result["events"]] == ["CertificatesInvalid"]
    down = report(observed(3, started(3), reachable=False, members=[]), hold)
    assert conditions_of(down)["Available"][0] == "False"


def test_refused_credentials_make_health_unknown_and_keep_what_was_last_seen():
    # etcd 3.5+ tells a caller it does not know nothing, not even member health: the status
    # says so instead of calling every member unhealthy (or the cluster Available).
    before = report_for(observed(3, started(3), healthy(3)))["status"]
    refused = observed(3, started(3), members=[], current={**before, "conditions": []})
    refused["etcd"] = {
        "reachable": True,
        "healthy": False,
        "members": [],
        "credentials_refused": "etcdserver: authentication failed, invalid user ID or password",
    }
    hold = {
        "action": "wait",
        "reason": "CredentialsRefused",
        "requeue": "degraded",
        "message": "etcd refuses the operator's login as root",
    }
    result = report(refused, hold)
    assert conditions_of(result) == {
        "Available": ("Unknown", "CredentialsRefused"),
        "Progressing": ("True", "CredentialsRefused"),
        "Degraded": ("True", "CredentialsRefused"),
    }
    available = next(c for c in result["conditions"] if c["type"] == "Available")
    assert "invalid user ID or password" in available["message"]
    status = result["status"]
    assert status["phase"] == "Degraded"
    assert (status["members"], status["readyReplicas"], status["leader"]) == (
        before["members"],
        3,
        "c-0",
    )
    assert result["peer_statuses"] == [], "the peers' last known health is not overwritten"
    assert [e["reason"] for e in result["events"]] == ["CredentialsRefused"]
    assert result["requeue"] == "degraded"


def test_report_of_a_cluster_with_an_unhealthy_member_is_degraded_and_not_available():
    members = [member(0, leader=True), member(1), member(2, healthy=False)]
    result = report_for(observed(5, started(3), members))
    assert conditions_of(result)["Available"] == ("False", "MembersUnhealthy")
    assert conditions_of(result)["Degraded"] == ("True", "MembersUnhealthy")
    assert result["status"]["phase"] == "Degraded" and result["status"]["readyReplicas"] == 2
    assert result["events"][0]["type"] == "Warning"


def test_a_member_whose_pod_is_not_ready_is_not_available_although_etcd_answers():
    observation = observed(3, started(3), healthy(3))
    observation["pods"]["c-2"] = pod(2, ready=False)
    result = report_for(observation)
    assert conditions_of(result)["Available"] == ("False", "MembersUnhealthy")
    assert "c-2" in result["conditions"][0]["message"]
    assert result["status"]["readyReplicas"] == 2
    assert result["requeue"] == "event", "the pod becoming ready wakes the cluster up"


def test_report_while_a_learner_catches_up_is_progressing():
    members = healthy(3) + [member(3, learner=True)]
    result = report_for(observed(5, started(4), members))
    assert conditions_of(result)["Available"][0] == "False"
    assert conditions_of(result)["Progressing"] == ("True", "PromotingLearner")
    assert result["status"]["phase"] == "Progressing"


def test_pods_that_cannot_start_make_the_cluster_degraded_with_what_to_do():
    problem = {"reason": "ImagePullFailed", "message": "pod c-0-x cannot pull image ...; check"}
    pods = {f"c-{i}": pod(i, ready=False, problem=problem if i == 0 else None) for i in range(3)}
    observation = observed(3, [peer(i) for i in range(3)], pods=pods)
    result = report_for(observation)
    assert conditions_of(result)["Degraded"] == ("True", "ImagePullFailed")
    assert conditions_of(result)["Progressing"] == ("True", "Bootstrapping")
    assert result["status"]["phase"] == "Degraded"
    (event,) = result["events"]
    assert (event["reason"], event["type"]) == ("ImagePullFailed", "Warning")
    assert result["requeue"] == "degraded"


def test_a_problem_already_reported_is_not_announced_again():
    problem = {"reason": "ImagePullFailed", "message": "cannot pull"}
    pods = {f"c-{i}": pod(i, ready=False, problem=problem) for i in range(1)}
    observation = observed(1, [peer(0, initial=1)], pods=pods)
    first = report_for(observation)
    observation["current"] = {"conditions": first["conditions"]}
    assert report_for(observation)["events"] == []


def test_a_peer_without_pod_for_long_is_a_problem_naming_its_replicaset():
    peers = [peer(i, age=45) for i in range(3)]
    observation = observed(3, peers, pods={"c-0": pod(0), "c-1": None, "c-2": pod(2)})
    observation["replicasets"]["c-1"] = {"exists": True, "failure": "pods are forbidden: quota"}
    result = report_for(observation)
    assert conditions_of(result)["Degraded"] == ("True", "MemberPodMissing")
    assert "quota" in result["conditions"][2]["message"]
    young = observed(3, [peer(i, age=5) for i in range(3)], pods={"c-0": None})
    assert conditions_of(report_for(young))["Degraded"][0] == "False"


def test_volume_problems_are_reported():
    observation = observed(3, started(3), healthy(3))
    observation["pvcs"]["c-0"] = pvc("uid-0", problem={"reason": "VolumeNotBound", "message": "x"})
    assert conditions_of(report_for(observation))["Degraded"] == ("True", "VolumeNotBound")


def test_restarts_and_replaced_pods_become_events():
    current = {
        "members": [
            {"name": "c-0", "pod": "c-0-abcde", "restarts": 0},
            {"name": "c-1", "pod": "c-1-old", "restarts": 4},
            {"name": "c-2", "pod": "c-2-abcde", "restarts": 2},
        ]
    }
    observation = observed(3, started(3), healthy(3), current=current)
    observation["pods"]["c-0"] = pod(0, restarts=1)
    result = report_for(observation)
    reasons = {(e["reason"], e["message"].split()[3]) for e in result["events"]}
    assert ("MemberRestarted", "c-0") in reasons
    assert any(
        e["reason"] == "MemberPodReplaced" and "c-1-old" in e["message"] for e in result["events"]
    )
    assert len(result["events"]) == 2, "c-2 did not restart"


@pytest.mark.parametrize("placeholder", ["3.0.0", "not_decided", None])
def test_undecided_cluster_version_keeps_the_known_one(placeholder):
    observation = observed(3, started(3), healthy(3), current={"clusterVersion": "3.6.0"})
    observation["etcd"]["cluster_version"] = placeholder
    assert report_for(observation)["status"]["clusterVersion"] == "3.6.0"
    assert report_for(observation)["requeue"] == "steady"
    observation["current"] = {}
    result = report_for(observation)
    assert "clusterVersion" not in result["status"]
    assert result["requeue"] == "event", "look again soon: etcd decides it without an event"


def test_peer_statuses_are_written_only_when_they_change():
    observation = observed(3, started(3), healthy(3))
    statuses = report_for(observation)["peer_statuses"]
    assert [s["name"] for s in statuses] == ["c-0", "c-1", "c-2"]
    assert statuses[0]["status"] == {
        "ready": True,
        "podName": "c-0-abcde",
        "memberID": f"{0:016x}",
        "serverVersion": "3.6.16",
    }
    for p, s in zip(observation["peers"], statuses, strict=True):
        p["status"] = {**s["status"], "conditions": s["conditions"]}
    assert report_for(observation)["peer_statuses"] == []


def test_a_peer_whose_claim_is_gone_reports_data_lost():
    observation = observed(3, started(3), healthy(3))
    observation["pvcs"]["c-1"] = pvc(exists=False)
    by_name = {s["name"]: s for s in report_for(observation)["peer_statuses"]}
    conditions = {c["type"]: c["status"] for c in by_name["c-1"]["conditions"]}
    assert conditions == {"Ready": "False", "DataLost": "True"}


def test_a_cluster_that_never_started_follows_a_corrected_version():
    problem = {"reason": "ImagePullFailed", "message": "cannot pull"}
    peers = [dict(peer(i), version="3.6.99", repository="quay.io/coreos/etcd") for i in range(3)]
    pods = {f"c-{i}": pod(i, ready=False, problem=problem) for i in range(3)}
    observation = observed(3, peers, pods=pods)
    observation.update(version="3.6.16", repository="quay.io/coreos/etcd")
    step = plan(observation)
    assert (step["action"], step["peers_to_update"]) == ("update_peers", ["c-0", "c-1", "c-2"])
    assert "quay.io/coreos/etcd:v3.6.16" in step["message"]


def test_members_that_ran_are_never_moved_to_another_image_by_bootstrap():
    problem = {"reason": "ImagePullFailed", "message": "cannot pull"}
    peers = [dict(peer(i), version="3.6.99", repository="r") for i in range(3)]
    peers[2]["member_id"] = "2"
    pods = {f"c-{i}": pod(i, ready=False, problem=problem) for i in range(3)}
    observation = observed(3, peers, pods=pods)
    observation.update(version="3.6.16", repository="r")
    assert plan(observation)["action"] == "wait"
    peers[2]["member_id"] = ""
    pods["c-2"] = pod(2, ready=False)
    assert plan(observation)["action"] == "wait", "a pod that may have run blocks the move"


def test_a_member_without_replicaset_gets_it_back_first_even_without_quorum():
    members = [member(0, leader=True), member(1, healthy=False), member(2, healthy=False)]
    observation = observed(3, started(3), members)
    observation["replicasets"]["c-1"] = {"exists": False, "failure": ""}
    observation["replicasets"]["c-2"] = {"exists": False, "failure": ""}
    step = plan(observation)
    assert (step["action"], step["members"]) == (
        "repair_members",
        [{"name": "c-1"}, {"name": "c-2"}],
    )
    assert step["observe_after"] is False and step["requeue"] == "event"


def test_a_member_whose_data_is_lost_is_replaced_not_repaired():
    observation = observed(3, started(3), healthy(3))
    observation["replicasets"]["c-1"] = {"exists": False, "failure": ""}
    observation["pvcs"]["c-1"] = pvc(exists=False)
    assert plan(observation)["action"] == "replace_member"


def test_steps_that_start_members_are_observed_once_their_pods_are_ready():
    # A bootstrap starts every member at once: the observation after it waits for their pods.
    bootstrap = plan(observed(3, []))
    assert bootstrap["action"] == "bootstrap" and "observe_after" not in bootstrap
    assert bootstrap["wait_ready"] == ["c-0", "c-1", "c-2"]
    # Scaling 3 -> 5: one step adds both members in turn and waits for both.
    both = plan(observed(5, started(3), healthy(3)))
    assert (both["action"], both["peers"], both["wait_ready"]) == (
        "add_member",
        ["c-3", "c-4"],
        ["c-3", "c-4"],
    )
    last = plan(observed(5, started(4), healthy(4)))
    assert (last["action"], last["peers"], last["wait_ready"]) == ("add_member", ["c-4"], ["c-4"])


# -- quorum lost: what a person should know and do ------------------------------------------------


def quorum_lost_observation(down=(1, 2), lost=(), backups=None, raft_index=1234):
    """3 members, those in ``down`` not answering, those in ``lost`` with their claim gone."""
    members = [member(i, leader=False, healthy=i not in down) for i in range(3)]
    for m in members:
        m["raft_index"] = raft_index if m["healthy"] else None
        m["client_urls"] = [f"http://{m['name']}.c.ns.svc.cluster.local:2379"]
    observation = observed(3, started(3), members)
    for i in lost:
        observation["pvcs"][f"c-{i}"] = pvc(exists=False)
    if backups is not None:
        observation["backups"] = backups
    return observation


def backup(name, completed, verified="True", phase="Completed", revision=17, failed=False):
    return {
        "name": name,
        "phase": phase,
        "revision": revision,
        "completion_time": completed,
        "verified": verified,
        "verification_failed": failed,
    }


def test_members_merely_down_are_waited_for_with_their_data_intact():
    step = plan(quorum_lost_observation(down=(1, 2), backups=[]))
    assert (step["action"], step["reason"], step["requeue"]) == ("wait", "QuorumLost", "degraded")
    assert "1 of 3 voting members healthy" in step["message"]
    assert "waiting for members c-1, c-2 to come back (their data is intact)" in step["message"]
    assert "quorum returns when one of them does" in step["message"]
    assert "EtcdRestore" not in step["message"] and "backup" not in step["message"]
    assert step["quorum_lost"] == {"data_lost": [], "down": ["c-1", "c-2"]}


def test_a_member_down_beside_one_with_lost_data_is_still_worth_waiting_for():
    step = plan(quorum_lost_observation(down=(1, 2), lost=(2,), backups=[]))
    assert "waiting for member c-1 to come back (its data is intact)" in step["message"]
    assert "quorum returns when it does" in step["message"]
    assert "member c-2 lost its data and will be replaced then" in step["message"]


def test_a_majority_without_data_says_waiting_is_pointless_and_names_the_backup():
    backups = [
        backup("nightly-1", "2026-11-20T01:00:00Z", revision=10),
        backup("nightly-2", "2026-11-21T01:00:00Z", revision=20),
        backup("unverified-newer", "2026-11-22T01:00:00Z", verified="Unknown", revision=30),
        backup("failed-newest", "", phase="Failed", verified=""),
        backup("running", "", phase="Running", verified=""),
        backup("bad", "2026-11-22T02:00:00Z", verified="False", failed=True, revision=40),
    ]
    step = plan(quorum_lost_observation(down=(1, 2), lost=(1, 2), backups=backups))
    message = step["message"]
    assert (step["action"], step["reason"], step["requeue"]) == ("wait", "QuorumLost", "degraded")
    assert "waiting cannot bring it back" in message
    assert "members c-1, c-2 lost their data" in message
    assert "only c-0 (raft index 1234) still holds data" in message
    assert "disaster recovery is off" in message
    assert (
        "EtcdBackup nightly-2 (revision 20, completed 2026-11-21T01:00:00Z, verified)" in message
    ), "the newest verified backup, before a newer unverified one"
    assert "EtcdRestore (spec.source.backupName)" in message
    assert "rescued from c-0" in message and "snapshot save" in message
    assert "waiting for" not in message
    assert step["quorum_lost"]["backup"] == "nightly-2"
    assert step["quorum_lost"]["data_lost"] == ["c-1", "c-2"]
    assert step["quorum_lost"]["survivors"][0]["name"] == "c-0"
    assert len(message) < 1024, "an Event's message is at most 1 KiB"


def test_an_unverified_backup_is_named_when_no_verified_one_exists():
    backups = [
        backup("old", "2026-11-20T01:00:00Z", verified="Unknown"),
        backup("new", "2026-11-21T01:00:00Z", verified="False", failed=False),
        backup("bad", "2026-11-22T01:00:00Z", verified="False", failed=True),
    ]
    message = plan(quorum_lost_observation(lost=(1, 2), backups=backups))["message"]
    assert "EtcdBackup new (revision 17, completed 2026-11-21T01:00:00Z, not verified)" in message


def test_without_a_backup_the_survivor_is_named_for_a_rescue():
    backups = [backup("failed", "", phase="Failed", verified=""), backup("bad", "t", failed=True)]
    step = plan(quorum_lost_observation(lost=(1, 2), backups=backups))
    message = step["message"]
    assert "members c-1, c-2 lost their data" in message
    assert "no completed EtcdBackup of this cluster exists" in message
    assert "to rescue the data of c-0" in message
    assert "--endpoints=http://c-0.c.ns.svc.cluster.local:2379 snapshot save" in message
    assert "--force-new-cluster" in message
    assert step["quorum_lost"]["backup"] == ""
    assert len(message) < 1024


def test_backups_that_could_not_be_listed_still_point_at_a_restore():
    message = plan(quorum_lost_observation(lost=(1, 2)))["message"]
    assert "kubectl get etcdbk" in message and "EtcdRestore" in message


def test_a_survivor_that_does_not_answer_is_named_without_a_raft_index():
    observation = quorum_lost_observation(down=(0, 1, 2), lost=(1, 2), backups=[])
    message = plan(observation)["message"]
    assert "0 of 3 voting members healthy" in message
    assert "only c-0 (not answering) still holds data" in message


def test_the_quorum_lost_message_is_the_degraded_condition_and_a_warning_event_once():
    backups = [backup("nightly-2", "2026-11-21T01:00:00Z")]
    observation = quorum_lost_observation(lost=(1, 2), backups=backups)
    result = report_for(observation)
    degraded = result["conditions"][2]
    assert (degraded["status"], degraded["reason"]) == ("True", "QuorumLost")
    assert "nightly-2" in degraded["message"] and "c-0" in degraded["message"]
    (event,) = result["events"]
    assert (event["reason"], event["type"], event["message"]) == (
        "QuorumLost",
        "Warning",
        degraded["message"],
    )
    observation["current"] = {"conditions": result["conditions"]}
    assert report_for(observation)["events"] == [], "the same message is not announced again"


def test_members_that_answer_without_a_leader_are_waited_for():
    observation = observed(3, started(3), healthy(3, leader=-1))
    observation["backups"] = []
    step = plan(observation)
    assert step["reason"] == "QuorumLost" and "waiting for an election" in step["message"]


# -- etcd_cluster_observe: the EtcdBackups, only without a quorum ---------------------------------


class _Direct:
    def __init__(self, items=None, error=None):
        self.items, self.error, self.calls = items or [], error, []

    def list(self, api_version, kind, namespace=None, **_):
        self.calls.append((kind, namespace))
        if self.error:
            raise self.error
        return self.items


def _etcd_backup(name, cluster, phase="Completed", verified=None):
    status = {"phase": phase, "revision": 5, "completionTime": "2026-11-21T01:00:00Z"}
    if verified:
        status["conditions"] = [{"type": "Verified", "status": verified[0], "reason": verified[1]}]
    return {
        "metadata": {"name": name},
        "spec": {"source": {"clusterName": cluster}},
        "status": status,
    }


def test_observe_summarizes_only_this_clusters_backups():
    direct = _Direct(
        [
            _etcd_backup("mine", "c", verified=("True", "Verified")),
            _etcd_backup("other", "d"),
            _etcd_backup("bad", "c", verified=("False", "SHA256Mismatch")),
            _etcd_backup("unread", "c", verified=("False", "ObjectUnreadable")),
            {"metadata": {"name": "by-url"}, "spec": {"source": {"clusterURL": "http://x"}}},
        ]
    )
    params = {"api_version": "etcd.quorumkeeper.dev/v1alpha1", "namespace": "ns", "name": "c"}
    result = observe_backups(params, direct)
    assert direct.calls == [("EtcdBackup", "ns")]
    by_name = {b["name"]: b for b in result["backups"]}
    assert set(by_name) == {"mine", "bad", "unread"}
    assert by_name["mine"] == {
        "name": "mine",
        "phase": "Completed",
        "revision": 5,
        "completion_time": "2026-11-21T01:00:00Z",
        "verified": "True",
        "verification_failed": False,
    }
    assert by_name["bad"]["verification_failed"] is True
    assert by_name["unread"]["verification_failed"] is False, "the check could not run: retried"


def test_observe_reports_backups_it_cannot_list_as_unknown():
    error = KubeError(403, "Forbidden", "etcdbackups is forbidden")
    params = {"api_version": "etcd.quorumkeeper.dev/v1alpha1", "namespace": "ns", "name": "c"}
    result = observe_backups(params, _Direct(error=error))
    assert result["backups"] is None and "forbidden" in result["backups_error"]


# -- automatic disaster recovery (spec.disasterRecovery) ------------------------------------------

SINCE = "2026-11-22T10:15:00Z"


def disaster(lost=(1, 2), down=(1, 2), enabled=True, delay=60, elapsed=None, backups=None):
    """quorum_lost_observation with disaster recovery set, the loss first seen ``elapsed``
    seconds before the observation (None: seen now for the first time)."""
    observation = quorum_lost_observation(down=down, lost=lost, backups=backups or [])
    observation["disaster_recovery"] = {"enabled": enabled, "delaySeconds": delay}
    observation["now"] = "2026-11-22T10:20:00Z"
    if elapsed is not None:
        now = datetime(2026, 11, 22, 10, 20, tzinfo=UTC)
        since = (now - timedelta(seconds=elapsed)).strftime("%Y-%m-%dT%H:%M:%SZ")
        observation["current"] = {"recovery": {"quorumLossSince": since}}
    return observation


def test_recovery_off_by_default_keeps_the_advice_for_a_person():
    step = plan(disaster(enabled=False, elapsed=3600))
    assert (step["action"], step["reason"]) == ("wait", "QuorumLost")
    assert "Automatic disaster recovery is off" in step["message"]


def test_recovery_waits_for_the_delay_and_says_what_it_will_do():
    step = plan(disaster(elapsed=None))
    assert (step["action"], step["reason"]) == ("wait", "QuorumLost")
    assert "will restart c-0 (raft index 1234, the newest data)" in step["message"]
    assert "in 60s" in step["message"]
    assert step["quorum_lost"]["unrecoverable"] is True
    assert plan(disaster(elapsed=45))["message"].count("in 15s") == 1
    assert step["requeue"] == "60s", "looked at again when the countdown ends"
    assert plan(disaster(elapsed=45))["requeue"] == "15s"


def test_with_no_delay_the_recovery_starts_right_after_the_first_sighting_is_recorded():
    step = plan(disaster(elapsed=None, delay=0))
    assert (step["action"], step["reason"], step["requeue"]) == ("wait", "QuorumLost", "next")
    assert report_for(disaster(elapsed=None, delay=0))["status"]["recovery"] == {
        "quorumLossSince": "2026-11-22T10:20:00Z"
    }
    assert plan(disaster(elapsed=0, delay=0))["action"] == "force_new_cluster"


def test_the_loss_is_timed_from_when_it_was_first_seen():
    observation = disaster(elapsed=None)
    status = report_for(observation)["status"]
    assert status["recovery"] == {"quorumLossSince": "2026-11-22T10:20:00Z"}
    observation["current"] = {"recovery": {"quorumLossSince": SINCE}}
    assert report_for(observation)["status"]["recovery"]["quorumLossSince"] == SINCE
    healthy_again = observed(3, started(3), healthy(3))
    healthy_again["current"] = {"recovery": {"quorumLossSince": SINCE}}
    assert report_for(healthy_again)["status"]["recovery"] == {"quorumLossSince": None}


def test_members_merely_down_never_start_a_recovery():
    step = plan(disaster(lost=(2,), down=(1, 2), elapsed=86400))
    assert (step["action"], step["reason"]) == ("wait", "QuorumLost")
    assert "waiting for member c-1 to come back" in step["message"]
    assert "unrecoverable" not in step["quorum_lost"]


def test_after_the_delay_the_survivor_with_the_newest_data_forces_a_new_cluster():
    observation = disaster(lost=(2,), down=(2,), elapsed=61)
    observation["pvcs"]["c-1"] = pvc(exists=False)
    step = plan(observation)
    assert (step["action"], step["peer"]) == ("force_new_cluster", "c-0")
    assert (step["requeue"], step["observe_after"]) == ("event", False), "never taken twice"
    # Five members, three lost: 0 and 1 survive with data; the higher raft index wins.
    peers = [peer(i, member_id=str(i), pvc_uid=f"uid-{i}") for i in range(5)]
    members = [member(i, healthy=i < 2) for i in range(5)]
    for i, m in enumerate(members):
        m["raft_index"] = [900, 1000, None, None, None][i]
    five = observed(5, peers, members)
    for i in (2, 3, 4):
        five["pvcs"][f"c-{i}"] = pvc(exists=False)
    five["disaster_recovery"] = {"enabled": True, "delaySeconds": 0}
    five["now"], five["current"], five["backups"] = (
        SINCE,
        {"recovery": {"quorumLossSince": SINCE}},
        [],
    )
    step = plan(five)
    assert (step["action"], step["peer"]) == ("force_new_cluster", "c-1")
    assert step["recovery"]["source"] == "Survivor" and step["recovery"]["member"] == "c-1"
    assert "members c-2, c-3, c-4, c-0 as new members" in step["message"]
    status = report_for(five)["status"]
    assert status["recovery"]["last"]["member"] == "c-1"


def test_a_survivor_that_does_not_answer_is_waited_for_before_choosing():
    step = plan(disaster(down=(0, 1, 2), elapsed=3600))
    assert step["action"] == "wait"
    assert "waits for member c-0 to answer" in step["message"]


def test_without_survivors_the_newest_verified_backup_is_restored_in_place():
    backups = [
        backup("old", "2026-11-20T01:00:00Z"),
        backup("newer-unverified", "2026-11-21T01:00:00Z", verified="Unknown"),
    ]
    observation = disaster(lost=(0, 1, 2), down=(0, 1, 2), elapsed=120, backups=backups)
    step = plan(observation)
    assert (step["action"], step["backup"]) == ("restore_from_backup", "old")
    assert (step["requeue"], step["observe_after"]) == ("event", False), "never taken twice"
    assert step["restore"] == "c-recovery-20261122-101800"
    assert "writes made after that backup are lost" in step["message"]


def test_without_survivors_nor_a_verified_backup_nothing_is_restored():
    backups = [backup("unverified", "2026-11-21T01:00:00Z", verified="Unknown")]
    step = plan(disaster(lost=(0, 1, 2), down=(0, 1, 2), elapsed=3600, backups=backups))
    assert (step["action"], step["reason"]) == ("wait", "QuorumLost")
    assert "cannot act" in step["message"] and "EtcdBackup unverified" in step["message"]


def test_a_cluster_where_no_member_answers_and_all_lost_their_data_is_not_unreachable():
    observation = observed(3, started(3), members=None)
    for i in range(3):
        observation["pvcs"][f"c-{i}"] = pvc(exists=False)
    observation["backups"] = [backup("nightly", "2026-11-21T01:00:00Z")]
    step = plan(observation)
    assert step["reason"] == "QuorumLost" and "no member still holds data" in step["message"]
    assert "EtcdBackup nightly" in step["message"]
    observation["pvcs"]["c-0"] = pvc("uid-0")
    step = plan(observation)
    assert "only c-0 (not answering) still holds data" in step["message"]


def flagged(observation, name, spec=True, pod_flag=False):
    next(p for p in observation["peers"] if p["name"] == name)["force_new_cluster"] = spec
    observation["pods"][name]["force_new_cluster"] = pod_flag
    return observation


def test_a_forced_member_is_restarted_with_the_flag_then_waited_for_then_restarted_without():
    observation = flagged(quorum_lost_observation(lost=(1, 2), backups=[]), "c-0")
    assert plan(observation)["action"] == "force_new_cluster", "its pod does not have the flag yet"
    observation = flagged(observation, "c-0", pod_flag=True)
    step = plan(observation)
    assert (step["action"], step["reason"]) == ("wait", "RecoveringFromSurvivor")
    alone = observed(3, started(3), [member(0, leader=True)])
    alone = flagged(alone, "c-0", pod_flag=True)
    step = plan(alone)
    assert (step["action"], step["peer"]) == ("finish_force_new_cluster", "c-0")
    alone = flagged(alone, "c-0", spec=False, pod_flag=True)
    assert plan(alone)["action"] == "finish_force_new_cluster", "an interrupted finish"
    alone = flagged(alone, "c-0", spec=False, pod_flag=False)
    step = plan(alone)
    assert (step["action"], step["peer"]) == ("replace_member", "c-1"), "then the others rejoin"
    assert step["members"] == [{"name": "c-1", "id": None}, {"name": "c-2", "id": None}]
    assert step["message"].startswith("replacing members c-1 (it was removed from etcd), c-2")


def test_the_wait_for_the_survivor_keeps_polling_while_only_the_lost_members_pods_cannot_start():
    unschedulable = {"reason": "PodUnschedulable", "message": "0/1 nodes are available"}
    observation = flagged(quorum_lost_observation(lost=(1, 2), backups=[]), "c-0", pod_flag=True)
    observation["etcd"] = {"reachable": False}
    for i in (1, 2):
        observation["pods"][f"c-{i}"] = pod(i, ready=False, problem=unschedulable)
    result = report_for(observation)
    assert conditions_of(result)["Degraded"][0] == "True"
    assert result["requeue"] == "poll", "etcd answering brings no event"
    observation["pods"]["c-0"] = dict(
        pod(0, ready=False, problem=unschedulable), force_new_cluster=True
    )
    assert report_for(observation)["requeue"] == "degraded", "the survivor itself cannot start"


def test_an_in_place_restore_under_way_hands_the_members_over_then_waits():
    observation = observed(3, started(3), members=None)
    restore = {
        "name": "c-recovery-x",
        "exists": True,
        "pending": True,
        "phase": "Pending",
        "message": "waiting for hand-over",
        "backup": "nightly",
    }
    observation["recovery_restore"] = restore
    step = plan(observation)
    assert (step["action"], step["peers"]) == ("hand_over_members", ["c-0", "c-1", "c-2"])
    gone = observed(3, [], members=None)
    gone["recovery_restore"] = restore
    step = plan(gone)
    assert (step["action"], step["reason"]) == ("wait", "RecoveringFromBackup")
    assert "EtcdRestore c-recovery-x is Pending" in step["message"], "never a fresh bootstrap"
    gone["recovery_restore"] = dict(restore, phase="Failed", message="restore pod failed")
    step = plan(gone)
    assert (step["action"], step["reason"]) == ("wait", "RecoveryFailed")
    gone["recovery_restore"] = dict(restore, pending=False, phase="Restoring")
    assert plan(gone)["action"] == "bootstrap", "the volumes are handed back"


# -- NOSPACE ------------------------------------------------------------------------------------

NOW_TS = "2026-01-01T01:00:00Z"


def out_of_space(replicas=3, members=None, raised=(0,), **extra):
    """A cluster whose members ``raised`` have the NOSPACE alarm."""
    members = members if members is not None else healthy(3)
    obs = observed(replicas, started(len([m for m in members if m["name"]])), members, **extra)
    obs["etcd"]["alarms"] = [{"member_id": f"{i:016x}", "alarm": "NOSPACE"} for i in raised]
    obs["now"] = NOW_TS
    return obs


def test_nospace_is_recovered_before_any_membership_change():
    for replicas in (3, 5, 1):  # steady, a scale-up, a scale-down waiting
        step = plan(out_of_space(replicas, raised=(0, 2)))
        assert (step["action"], step["reason"]) == ("defragment", "DatabaseQuotaExceeded")
        assert step["members"] == [{"name": "c-0"}, {"name": "c-2"}]
        assert "NOSPACE on c-0, c-2" in step["message"] and step["requeue"] == "next"


def test_nospace_waits_for_unhealthy_members_and_learners_first():
    down = [member(0, leader=True), member(1), member(2, healthy=False)]
    step = plan(out_of_space(members=down))
    assert (step["action"], step["reason"]) == ("wait", "MembersUnhealthy")
    learning = healthy(3) + [member(3, learner=True)]
    step = plan(out_of_space(4, members=learning))
    assert step["action"] == "promote"


def test_nospace_back_soon_after_a_recovery_waits_and_says_the_live_data_is_at_the_quota():
    recent = {"at": "2026-01-01T00:58:00Z", "reason": "NOSPACE"}
    obs = out_of_space(current={"maintenance": {"lastDefragmentation": recent}})
    for m in obs["etcd"]["members"]:
        m["db_size_in_use"] = 512 << 20
    step = plan(obs)
    assert (step["action"], step["reason"], step["requeue"]) == (
        "wait",
        "DatabaseQuotaExceeded",
        "degraded",
    )
    assert "120s after" in step["message"] and "512 MiB in use" in step["message"]
    assert "delete keys" in step["message"]
    older = {"at": "2026-01-01T00:50:00Z", "reason": "NOSPACE"}
    obs["current"] = {"maintenance": {"lastDefragmentation": older}}
    assert plan(obs)["action"] == "defragment", "tried again once the retry period passed"


def test_nospace_back_soon_after_a_recovery_that_freed_the_quota_is_recovered_again():
    """A writer that overwrites its keys fills the quota with history again: the last recovery
    left small databases, so compacting and defragmenting again gives the space back."""
    members = [
        {"name": f"c-{i}", "dbSizeBefore": 256 << 20, "dbSizeAfter": 3 << 20} for i in range(3)
    ]
    recent = {"at": "2026-01-01T00:59:00Z", "reason": "NOSPACE", "members": members}
    obs = out_of_space(current={"maintenance": {"lastDefragmentation": recent}})
    for peer in obs["peers"]:
        peer["quota_bytes"] = 256 << 20
    assert plan(obs)["action"] == "defragment"
    members[1]["dbSizeAfter"] = 240 << 20  # 93% of the quota: the live data fills it
    step = plan(obs)
    assert (step["action"], step["reason"]) == ("wait", "DatabaseQuotaExceeded")


def test_report_of_a_cluster_out_of_space_is_not_available_and_says_why():
    members = healthy(3)
    members[0].update(db_size=16 << 20, db_size_in_use=15 << 20)
    obs = out_of_space(members=members)
    result = report_for(obs)
    assert conditions_of(result)["Available"] == ("False", "DatabaseQuotaExceeded")
    assert conditions_of(result)["Degraded"] == ("True", "DatabaseQuotaExceeded")
    degraded = next(c for c in result["conditions"] if c["type"] == "Degraded")
    assert "refuses writes" in degraded["message"] and "c-0" in degraded["message"]
    first = result["status"]["members"][0]
    assert (first["alarms"], first["dbSize"], first["dbSizeInUse"]) == (
        ["NOSPACE"],
        16 << 20,
        15 << 20,
    )
    assert "alarms" not in result["status"]["members"][1]
    assert "DatabaseQuotaExceeded" in [e["reason"] for e in result["events"]]
