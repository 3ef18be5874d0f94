"""The defragmentation policy in the EtcdCluster planner (spec.maintenance.defragmentation and
the etcd.quorumkeeper.dev/defragment annotation, qk_plan_space.defragment), its status and
Events: when a defragmentation is due, for which members, and never while anything else is."""

import pathlib

import yaml
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_duration import parse_duration
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan import (
    etcd_cluster_plan as plan,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_membership import (
    STEADY_SECONDS,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_report import (
    etcd_cluster_report as report,
)

VERSION = "3.6.16"
NOW = "2026-01-01T03:00:30Z"
MIB = 1 << 20


def peer(i, version=VERSION):
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
        "quota_bytes": 512 * MIB,
        "status": {"serverVersion": version},
    }


def member(i, size=100 * MIB, in_use=90 * MIB, leader=False, healthy=True):
    return {
        "name": f"c-{i}",
        "id": f"{i:016x}",
        "peer_urls": [f"http://c-{i}.c.ns.svc.cluster.local:2380"],
        "client_urls": [f"http://c-{i}.c.ns.svc.cluster.local:2379"],
        "is_learner": False,
        "is_leader": leader,
        "healthy": healthy,
        "version": VERSION if healthy else None,
        "raft_index": 1000 if healthy else None,
        "db_size": size,
        "db_size_in_use": in_use,
    }


def observation(members=None, maintenance=None, current=None, request="", replicas=3):
    members = members or [member(i, leader=i == 0) for i in range(3)]
    names = [m["name"] for m in members]
    return {
        "cluster": "c",
        "replicas": replicas,
        "version": VERSION,
        "repository": "quay.io/coreos/etcd",
        "now": NOW,
        "maintenance": maintenance or {},
        "defragment_request": request,
        "current": current or {},
        "peers": [peer(int(n[-1])) for n in names],
        "pods": {n: {"name": f"{n}-a", "ready": True, "restarts": 0} for n in names},
        "pvcs": {n: {"exists": True, "uid": f"uid-{n[-1]}"} for n in names},
        "replicasets": {n: {"exists": True, "failure": ""} for n in names},
        "etcd": {
            "reachable": True,
            "healthy": True,
            "members": members,
            "cluster_version": "3.6.0",
            "alarms": [],
        },
    }


def test_a_healthy_cluster_below_every_threshold_is_left_alone():
    step = plan(observation())
    assert step["action"] == "none" and step["requeue"] == "steady"


def test_a_member_mostly_free_pages_is_defragmented_alone():
    members = [member(0, leader=True), member(1, 300 * MIB, 100 * MIB), member(2)]
    step = plan(observation(members))
    assert (step["action"], step["reason"]) == ("defragment", "Defragmenting")
    assert step["members"] == [{"name": "c-1"}]
    assert step["maintenance"] == {"compact": False, "disarm": False, "reason": "Threshold"}
    assert "c-1: 66% of its database is free pages, 200 MiB free" in step["message"]


def test_a_member_close_to_its_quota_with_enough_to_give_back_is_defragmented():
    members = [member(0, 420 * MIB, 330 * MIB, leader=True), member(1), member(2)]
    step = plan(observation(members))
    assert step["members"] == [{"name": "c-0"}]
    assert "its database is at 82% of its quota, 90 MiB free" in step["message"]


def with_volumes(observed, capacity):
    for claim in observed["pvcs"].values():
        claim.update(phase="Bound", capacity=f"{capacity // MIB}Mi", capacity_bytes=capacity)
    return observed


def test_a_member_close_to_filling_its_volume_is_defragmented_and_warned():
    # A 2Gi quota set by hand on a 1Gi volume would let the disk fill before NOSPACE: 460 MiB
    # of database and the write-ahead log's 384 MiB take 82% of the volume (quota at 22%).
    members = [member(0, leader=True), member(1, 460 * MIB, 360 * MIB), member(2)]
    observed = with_volumes(observation(members), 1024 * MIB)
    for p in observed["peers"]:
        p["quota_bytes"] = 2048 * MIB
    step = plan(observed)
    assert (step["action"], step["members"]) == ("defragment", [{"name": "c-1"}])
    assert (
        "c-1: its database and write-ahead log take 82% of its volume, 100 MiB free"
        in (step["message"])
    )
    policy = {"defragmentation": {"thresholds": {"volumeUsedPercent": 90}}}
    policed = with_volumes(observation(members, policy), 1024 * MIB)
    for p in policed["peers"]:
        p["quota_bytes"] = 2048 * MIB
    assert plan(policed)["action"] == "none"
    # Without a known capacity (a member without a volume) there is nothing to compare with.
    observed = observation(members)
    for p in observed["peers"]:
        p["quota_bytes"] = 2048 * MIB
    assert plan(observed)["action"] == "none"

    full = [member(0, leader=True), member(1, 560 * MIB, 550 * MIB), member(2)]
    observed_full = with_volumes(observation(full), 1024 * MIB)
    for p in observed_full["peers"]:
        p["quota_bytes"] = 2048 * MIB
    result = report(observed_full, plan(observed_full))
    used = [m.get("volumeUsedPercent") for m in result["status"]["members"]]
    assert used == [47, 92, 47]
    assert result["status"]["quotaUsedPercent"] == 27
    (event,) = [e for e in result["events"] if e["reason"] == "VolumeNearlyFull"]
    assert event["type"] == "Warning"
    assert (
        "member c-1's database (560Mi) and the room etcd's write-ahead log takes (384Mi) fill "
        "92% of its 1Gi volume" in event["message"]
    )
    # The operator's defaults on a small volume do not read as a full disk: half of a 128Mi
    # volume is counted for the log, the default quota (64Mi) is the other half.
    small = with_volumes(observation([member(i, 20 * MIB, 20 * MIB) for i in range(3)]), 128 * MIB)
    assert [m["volumeUsedPercent"] for m in report(small, plan(small))["status"]["members"]] == [
        65,
        65,
        65,
    ]
    # A cluster this close to filling a volume is looked at every `degraded` period (30 s),
    # not every `steady` one: nothing Kubernetes sees tells of a disk filling.
    assert result["requeue"] == "degraded"
    # Warned once: the status it wrote already says 92%.
    observed_full["current"] = {"members": result["status"]["members"]}
    again = report(observed_full, plan(observed_full))
    assert not [e for e in again["events"] if e["reason"] == "VolumeNearlyFull"]
    unknown = observation(full)
    for p in unknown["peers"]:
        p["quota_bytes"] = 2048 * MIB
    assert report(unknown, plan(unknown))["requeue"] == "steady"


def test_too_little_to_give_back_is_not_worth_a_defragmentation():
    members = [member(0, 200 * MIB, 40 * MIB, leader=True), member(1), member(2)]
    assert plan(observation(members))["action"] == "defragment"
    policy = {"defragmentation": {"thresholds": {"minReclaim": "256Mi"}}}
    assert plan(observation(members, policy))["action"] == "none"
    policy = {"defragmentation": {"thresholds": {"enabled": False}}}
    assert plan(observation(members, policy))["action"] == "none"


def test_a_threshold_is_not_acted_on_again_right_after_a_defragmentation():
    members = [member(0, 300 * MIB, 100 * MIB, leader=True), member(1), member(2)]
    current = {"maintenance": {"lastDefragmentation": {"at": "2026-01-01T02:58:00Z"}}}
    assert plan(observation(members, current=current))["action"] == "none"
    current = {"maintenance": {"lastDefragmentation": {"at": "2026-01-01T02:50:00Z"}}}
    assert plan(observation(members, current=current))["action"] == "defragment"


def test_a_request_defragments_every_member_once():
    step = plan(observation(request="r1"))
    assert step["action"] == "defragment"
    assert step["members"] == [{"name": f"c-{i}"} for i in range(3)]
    assert step["maintenance"] == {
        "compact": False,
        "disarm": False,
        "reason": "Requested",
        "request": "r1",
    }
    answered = {"maintenance": {"lastDefragmentation": {"request": "r1", "at": NOW}}}
    assert plan(observation(request="r1", current=answered))["action"] == "none"


def scheduled(since, last=None, expression="0 3 * * *"):
    maintenance = {"schedule": {"expression": expression, "since": since}}
    if last:
        maintenance["lastDefragmentation"] = {"at": last}
    return observation(
        maintenance={"defragmentation": {"schedule": expression}},
        current={"maintenance": maintenance},
    )


def test_a_scheduled_time_defragments_every_member():
    step = plan(scheduled(since="2026-01-01T00:00:00Z"))
    assert step["action"] == "defragment" and step["maintenance"]["reason"] == "Scheduled"
    assert "scheduled at 2026-01-01T03:00:00Z by '0 3 * * *'" in step["message"]
    assert len(step["members"]) == 3


def test_a_scheduled_time_is_made_once():
    step = plan(scheduled(since="2026-01-01T00:00:00Z", last="2026-01-01T03:00:20Z"))
    assert step["action"] == "none"


def test_a_schedule_just_added_does_not_start_with_the_time_it_missed():
    step = plan(scheduled(since="2026-01-01T03:00:10Z"))
    assert step["action"] == "none"
    # Never seen before: counted from now, and the report records since when.
    observed = observation(maintenance={"defragmentation": {"schedule": "0 3 * * *"}})
    assert plan(observed)["action"] == "none"
    status = report(observed, plan(observed))["status"]
    assert status["maintenance"]["schedule"] == {"expression": "0 3 * * *", "since": NOW}


def test_a_time_missed_by_more_than_an_hour_is_skipped():
    observed = scheduled(since="2026-01-01T00:00:00Z")
    observed["now"] = "2026-01-01T04:30:00Z"
    assert plan(observed)["action"] == "none"


def test_the_ready_cluster_wakes_up_for_the_next_scheduled_time():
    observed = scheduled(since="2026-01-01T00:00:00Z", last="2026-01-01T03:00:20Z")
    observed["now"] = "2026-01-02T02:58:00Z"
    step = plan(observed)
    assert (step["action"], step["requeue"]) == ("none", "120s")


def test_an_invalid_schedule_is_a_problem_the_status_names():
    observed = observation(maintenance={"defragmentation": {"schedule": "61 * * * *"}})
    result = report(observed, plan(observed))
    degraded = result["conditions"][2]
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidDefragmentationSchedule")
    assert degraded["message"].startswith("spec.maintenance.defragmentation.schedule: ")


def test_never_while_scaling_or_with_a_member_down():
    scaling = observation(request="r1", replicas=4)
    assert plan(scaling)["action"] == "add_member"
    down = observation([member(0, leader=True), member(1, healthy=False), member(2)], request="r1")
    step = plan(down)
    assert step["action"] == "wait" and step["reason"] == "MembersUnhealthy"


def test_never_while_upgrading():
    observed = observation(request="r1")
    observed["version"] = "3.6.17"
    assert plan(observed)["action"] == "upgrade_member"


def test_never_with_an_alarm_but_nospace_is_recovered_first():
    observed = observation(request="r1")
    observed["etcd"]["alarms"] = [{"member_id": f"{0:016x}", "alarm": "NOSPACE"}]
    step = plan(observed)
    assert step["action"] == "defragment" and step["maintenance"]["reason"] == "NOSPACE"
    assert step["maintenance"]["compact"] and step["maintenance"]["disarm"]
    observed["etcd"]["alarms"] = [{"member_id": f"{0:016x}", "alarm": "CORRUPT"}]
    assert plan(observed)["action"] != "defragment"


def test_never_while_a_member_lags_behind():
    observed = observation(request="r1")
    observed["etcd"]["members"][0]["raft_index"] = 5000
    step = plan(observed)
    assert step["action"] == "wait" and "to catch up with the leader" in step["message"]


def test_a_request_that_waits_for_another_step_is_said_to_be_queued():
    observed = observation(request="r1", replicas=4)
    result = report(observed, plan(observed))
    queued = result["status"]["maintenance"]["queuedRequest"]
    assert queued["request"] == "r1" and queued["waitingFor"].startswith("scaling up from 3 to 4")
    (event,) = [e for e in result["events"] if e["reason"] == "DefragmentationQueued"]
    assert "defragmentation requested (r1) waits" in event["message"]
    # Answered since: the queued request is removed from the status.
    answered = {
        "maintenance": {
            "lastDefragmentation": {"request": "r1", "at": NOW},
            "queuedRequest": queued,
        }
    }
    observed = observation(request="r1", current=answered)
    assert report(observed, plan(observed))["status"]["maintenance"]["queuedRequest"] is None


def test_a_cluster_near_its_quota_is_looked_at_every_30_seconds():
    """etcd raises NOSPACE without anything Kubernetes sees: a database past half its quota is
    not left for the steady 5 minutes."""
    calm = observation()
    assert report(calm, plan(calm))["requeue"] == "steady"
    near = observation(members=[member(i, 300 * MIB, 290 * MIB, leader=i == 0) for i in range(3)])
    step = plan(near)
    assert step["action"] == "none"
    result = report(near, step)
    assert result["status"]["quotaUsedPercent"] == 58
    assert result["requeue"] == "degraded"
    assert result["conditions"][2]["status"] == "False", "no problem: only looked at sooner"


def test_a_cluster_out_of_space_lately_is_looked_at_every_30_seconds():
    def recovered(at):
        last = {"at": at, "reason": "NOSPACE", "compactedRevision": 10, "members": []}
        return observation(current={"maintenance": {"lastDefragmentation": last}})

    lately = recovered("2026-01-01T02:55:30Z")  # 5 minutes before NOW
    assert report(lately, plan(lately))["requeue"] == "degraded"
    long_ago = recovered("2026-01-01T02:45:00Z")
    assert report(long_ago, plan(long_ago))["requeue"] == "steady"
    scheduled = observation(
        current={
            "maintenance": {
                "lastDefragmentation": {"at": "2026-01-01T02:59:00Z", "reason": "schedule"}
            }
        }
    )
    assert report(scheduled, plan(scheduled))["requeue"] == "steady"


def test_the_last_compaction_is_recorded_when_etcd_is_seen_compacted_further():
    observed = observation()
    # etcd was not asked (a re-observation after a step), or never compacted: nothing said.
    assert "lastCompaction" not in report(observed, plan(observed))["status"].get("maintenance", {})
    observed["etcd"]["compacted_revision"] = 0
    assert "lastCompaction" not in report(observed, plan(observed))["status"].get("maintenance", {})

    observed["etcd"]["compacted_revision"] = 1200
    status = report(observed, plan(observed))["status"]
    assert status["maintenance"]["lastCompaction"] == {"revision": 1200, "observedAt": NOW}

    seen = {"revision": 1200, "observedAt": "2026-01-01T02:00:00Z"}
    observed = observation(current={"maintenance": {"lastCompaction": seen}})
    observed["etcd"]["compacted_revision"] = 1200
    assert report(observed, plan(observed))["status"]["maintenance"]["lastCompaction"] == seen
    del observed["etcd"]["compacted_revision"]
    assert report(observed, plan(observed))["status"]["maintenance"]["lastCompaction"] == seen
    observed["etcd"]["compacted_revision"] = 5000
    assert report(observed, plan(observed))["status"]["maintenance"]["lastCompaction"] == {
        "revision": 5000,
        "observedAt": NOW,
    }
    # Restored from a backup and not compacted since: the record goes (null, merged away).
    observed["etcd"]["compacted_revision"] = 0
    assert report(observed, plan(observed))["status"]["maintenance"]["lastCompaction"] is None


def test_the_planners_steady_period_is_the_roles():
    """A scheduled defragmentation is counted down to only when it comes sooner than the next
    steady look: the planner's idea of that period must be the role's."""
    defaults = pathlib.Path(__file__).parents[2] / "roles/etcdcluster/defaults/main.yml"
    steady = yaml.safe_load(defaults.read_text())["etcdcluster_requeue_periods"]["steady"]
    assert parse_duration(steady) == STEADY_SECONDS * 1_000_000_000
