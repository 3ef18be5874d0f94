"""Rolling restarts onto a new configuration in the EtcdCluster planner (a change of
spec.options or spec.podTemplate, qk_plan_config), their status and Events, and the pod
replacement they share with the upgrade (qk_upgrade.restart_plan); members kept apart across
failure domains (the default anti-affinity, the MembersSpread condition)."""

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import (
    render_replicaset,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    CONFIG_HASH_ANNOTATION,
    cluster_config,
    config_hash,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan import (
    etcd_cluster_plan as plan,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_report import (
    etcd_cluster_report as report,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_upgrade import restart_plan

VERSION = "3.6.16"
NOW = "2026-01-01T00:10:00Z"
CREATED = "2026-01-01T00:09:30Z"  # 30 s before NOW
OLD_CONFIG = {"options": {"snapshotCount": 10000}, "podTemplate": {}}
NEW_CONFIG = {"options": {"snapshotCount": 5000}, "podTemplate": {}}
OLD, NEW = config_hash(OLD_CONFIG), config_hash(NEW_CONFIG)


def peer(i, config=OLD, seen=OLD, version=VERSION):
    """An EtcdPeer whose spec asks for configuration ``config`` (its hash), last seen serving
    with ``seen`` (status.configHash)."""
    status = {"serverVersion": version}
    if seen:
        status["configHash"] = seen
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
        "config_hash": config,
        "status": status,
    }


def member(i, healthy=True, leader=False, learner=False, raft=1000):
    return {
        "name": f"c-{i}",
        "id": f"{i:016x}",
        "peer_urls": [f"http://c-{i}.c.ns.svc.cluster.local:2380"],
        "client_urls": [f"http://c-{i}.c.ns.svc.cluster.local:2379"],
        "is_learner": learner,
        "is_leader": leader,
        "healthy": healthy,
        "version": VERSION if healthy else None,
        "raft_index": raft if healthy else None,
        "errors": [] if healthy else ["connection refused"],
    }


def pod(i, config=OLD, ready=True, problem=None, created=CREATED):
    return {
        "name": f"c-{i}-abcde",
        "ready": ready,
        "deleting": False,
        "restarts": 0,
        "created": created,
        "problem": problem,
        "config_hash": config,
    }


def observation(peers, members, pods, healthy=True, config=NEW_CONFIG, **extra):
    return {
        "cluster": "c",
        "replicas": len(peers),
        "version": VERSION,
        "repository": "quay.io/coreos/etcd",
        "config": config,
        "now": NOW,
        "peers": peers,
        "pods": pods,
        "pvcs": {p["name"]: {"exists": True, "uid": p["pvc_uid"]} for p in peers},
        "replicasets": {p["name"]: {"exists": True, "failure": ""} for p in peers},
        "etcd": {
            "reachable": True,
            "healthy": healthy,
            "members": members,
            "cluster_version": "3.6.0",
            "alarms": [],
        },
        **extra,
    }


def cluster(leader=0, configs=(OLD, OLD, OLD), pods=None):
    """Three healthy members; member i's EtcdPeer and pod say configs[i]."""
    return observation(
        [peer(i, configs[i], configs[i]) for i in range(3)],
        [member(i, leader=i == leader) for i in range(3)],
        pods or {f"c-{i}": pod(i, configs[i]) for i in range(3)},
    )


def test_a_cluster_on_its_configuration_has_nothing_to_roll():
    step = plan(cluster(configs=(NEW, NEW, NEW)))
    assert step["action"] == "none"


def test_a_new_configuration_restarts_the_highest_follower_first_with_it():
    step = plan(cluster(leader=2))
    assert step["action"] == "restart_member" and step["reason"] == "RollingRestart"
    assert step["peer"] == "c-1" and step["move_leader_to"] == ""
    assert step["config"] == NEW_CONFIG
    assert "0 of 3 members up to date" in step["message"]


def test_the_leader_goes_last_and_hands_leadership_to_a_restarted_member():
    observed = cluster(leader=0, configs=(OLD, NEW, NEW))
    observed["etcd"]["members"][1]["raft_index"] = 1001
    step = plan(observed)
    assert step["action"] == "restart_member" and step["peer"] == "c-0"
    assert step["move_leader_to"] == "c-1"
    assert "leadership moves to c-1 first" in step["message"]


def test_a_pod_started_with_another_configuration_than_its_peer_asks_for_is_restarted():
    # The operator stopped between patching the EtcdPeer and replacing the pod.
    observed = cluster(configs=(NEW, NEW, NEW))
    observed["pods"]["c-2"]["config_hash"] = OLD
    step = plan(observed)
    assert step["action"] == "restart_member" and step["peer"] == "c-2"


def test_a_pod_of_unknown_configuration_is_not_restarted_for_it_alone():
    # Started before the operator annotated pods: its EtcdPeer says what it runs.
    observed = cluster(configs=(NEW, NEW, NEW))
    observed["pods"]["c-2"]["config_hash"] = None
    assert plan(observed)["action"] == "none"


def test_a_restarted_member_is_waited_for_before_the_next_one():
    observed = cluster(leader=0)
    observed["peers"][2] = peer(2, NEW, seen=OLD)
    observed["pods"]["c-2"] = pod(2, NEW, ready=False)
    observed["etcd"]["members"][2] = member(2, healthy=False)
    step = plan(observed)
    assert step["action"] == "wait" and step["reason"] == "RollingRestart"
    assert "waiting for c-2 to come back (restarted 30s ago)" in step["message"]
    assert step["requeue"] == "poll"


def test_a_restarted_member_that_does_not_come_back_stops_the_rollout():
    observed = cluster(leader=0)
    observed["peers"][2] = peer(2, NEW, seen=OLD)
    crash = {"reason": "MemberCrashLooping", "message": "pod c-2-abcde: etcd keeps exiting"}
    observed["pods"]["c-2"] = pod(2, NEW, ready=False, problem=crash)
    observed["etcd"]["members"][2] = member(2, healthy=False)
    step = plan(observed)
    assert step["action"] == "wait" and step["reason"] == "ConfigRolloutFailed"
    assert "stopped at member c-2" in step["message"] and "etcd keeps exiting" in step["message"]
    assert step["requeue"] == "degraded"
    assert report(observed, step)["conditions"][2]["status"] == "True"


def test_a_restarted_member_past_the_timeout_stops_the_rollout():
    observed = cluster(leader=0)
    observed["upgrade"] = {"memberTimeoutSeconds": 20}
    observed["peers"][2] = peer(2, NEW, seen=OLD)
    observed["pods"]["c-2"] = pod(2, NEW, ready=False)
    observed["etcd"]["members"][2] = member(2, healthy=False)
    step = plan(observed)
    assert step["reason"] == "ConfigRolloutFailed"
    assert "not healthy 30s after its restart" in step["message"]
    degraded = report(observed, step)["conditions"][2]
    assert degraded["reason"] == "ConfigRolloutFailed" and degraded["status"] == "True"


def test_putting_the_configuration_back_restarts_the_member_that_is_down_at_once():
    # c-2 crashed on NEW; the spec went back to OLD: c-2 is out of date and down.
    observed = cluster(leader=0)
    observed["config"] = OLD_CONFIG
    observed["peers"][2] = peer(2, NEW, seen=OLD)
    observed["pods"]["c-2"] = pod(2, NEW, ready=False)
    observed["etcd"]["members"][2] = member(2, healthy=False)
    step = plan(observed)
    assert step["action"] == "restart_member" and step["peer"] == "c-2"
    assert step["config"] == OLD_CONFIG and "which is down" in step["message"]


def test_nothing_is_restarted_while_another_member_is_unhealthy():
    # c-1 runs the new configuration already and is down for another reason.
    observed = cluster(leader=0, configs=(OLD, NEW, OLD))
    observed["etcd"]["members"][1] = member(1, healthy=False)
    observed["pods"]["c-1"]["ready"] = False
    step = plan(observed)
    assert step["action"] == "wait" and step["reason"] == "MembersUnhealthy"
    assert "waits for unhealthy members to recover: c-1" in step["message"]


def test_a_member_down_on_its_old_configuration_is_restarted_with_the_new_one():
    # It serves nothing as it is; the others are healthy, so its restart costs nothing.
    observed = cluster(leader=0)
    observed["etcd"]["members"][1] = member(1, healthy=False)
    observed["pods"]["c-1"]["ready"] = False
    step = plan(observed)
    assert step["action"] == "restart_member" and step["peer"] == "c-1"


def test_nothing_is_restarted_while_a_member_lags_behind_the_leader():
    observed = cluster(leader=0)
    observed["etcd"]["members"][0]["raft_index"] = 5000
    step = plan(observed)
    assert step["action"] == "wait" and step["reason"] == "RollingRestart"
    assert "to catch up with the leader" in step["message"]


def test_the_space_is_given_back_before_a_restart():
    observed = cluster(leader=0)
    observed["etcd"]["alarms"] = [{"member_id": f"{0:016x}", "alarm": "NOSPACE"}]
    assert plan(observed)["action"] == "defragment"


def test_a_scale_goes_before_the_restarts():
    observed = cluster(leader=0)
    observed["replicas"] = 4
    assert plan(observed)["action"] == "add_member"


def test_an_upgrade_goes_before_the_restarts():
    observed = cluster(leader=0)
    observed["version"] = "3.6.17"
    step = plan(observed)
    assert step["action"] == "upgrade_member"


def test_a_single_member_is_restarted_without_moving_leadership():
    observed = observation([peer(0)], [member(0, leader=True)], {"c-0": pod(0)})
    step = plan(observed)
    assert step["action"] == "restart_member" and step["move_leader_to"] == ""


def test_without_a_configuration_in_the_context_nothing_is_rolled():
    observed = cluster()
    observed["config"] = None
    assert plan(observed)["action"] == "none"


def test_the_cluster_configuration_resolves_the_defaults_as_the_peers_get_them():
    spec = {
        "storage": {"volumeClaimTemplate": {"resources": {"requests": {"storage": "1Gi"}}}},
        "options": {"quotaBackendBytes": "256Mi", "allowLargeQuota": False},
    }
    config = cluster_config(spec, "c")
    assert config == {
        "options": {
            "quotaBackendBytes": 256 << 20,
            "autoCompaction": {"mode": "periodic", "retention": "5m"},
        },
        "podTemplate": {},
    }
    assert config_hash(config) == config_hash(cluster_config(spec, "c"))
    assert config_hash(config) != config_hash(cluster_config({**spec, "options": {}}, "c"))


# -- status and Events ----------------------------------------------------------------------


def test_status_says_which_members_run_the_new_configuration():
    observed = cluster(configs=(OLD, NEW, NEW))
    result = report(observed, plan(observed))
    assert [m["configUpToDate"] for m in result["status"]["members"]] == [False, True, True]


def test_a_member_seen_serving_with_its_new_configuration_gets_an_event_not_a_warning():
    observed = cluster(configs=(OLD, OLD, OLD))
    observed["peers"][2] = peer(2, NEW, seen=OLD)
    observed["pods"]["c-2"] = dict(pod(2, NEW), name="c-2-fghij")
    observed["current"] = {
        "members": [{"name": f"c-{i}", "pod": f"c-{i}-abcde", "restarts": 0} for i in range(3)]
    }
    result = report(observed, plan(observed))
    (written,) = [p for p in result["peer_statuses"] if p["name"] == "c-2"]
    assert written["status"]["configHash"] == NEW
    reasons = [e["reason"] for e in result["events"]]
    assert "MemberReconfigured" in reasons and "MemberPodReplaced" not in reasons


def test_a_member_not_yet_serving_gets_no_config_hash_written():
    observed = cluster()
    observed["etcd"]["members"][1] = member(1, healthy=False)
    result = report(observed, plan(observed))
    written = {p["name"]: p["status"] for p in result["peer_statuses"]}
    assert "configHash" not in written.get("c-1", {})


# -- the pod replacement ----------------------------------------------------------------------


def running(name, image, config):
    annotations = {CONFIG_HASH_ANNOTATION: config} if config else {}
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"containers": [{"name": "etcd", "image": image}]},
    }


def test_a_pod_started_with_another_configuration_is_replaced_when_one_is_asked_for():
    replicaset = {"metadata": {"name": "c-0"}}
    pods = [running("c-0-a", "etcd:v3.6.16", OLD)]
    assert restart_plan(replicaset, pods, "etcd:v3.6.16", NEW) == {
        "delete": True,
        "create": True,
        "stale": ["c-0-a"],
    }
    assert restart_plan(replicaset, pods, "etcd:v3.6.16", OLD)["stale"] == []
    # An upgrade asks for an image only: the configuration is not looked at.
    assert restart_plan(replicaset, pods, "etcd:v3.6.16")["stale"] == []
    unannotated = [running("c-0-b", "etcd:v3.6.16", None)]
    assert restart_plan(replicaset, unannotated, "etcd:v3.6.16", NEW)["stale"] == ["c-0-b"]


# -- members kept apart: the default anti-affinity and the MembersSpread condition -----------


def placed(nodes, zones=None):
    """Three healthy members, member i's pod on nodes[i]."""
    observed = cluster(configs=(NEW, NEW, NEW))
    for i, node in enumerate(nodes):
        observed["pods"][f"c-{i}"]["node"] = node
    observed["zones"] = zones or {}
    return observed


def spread_of(observed, current=None):
    observed["current"] = current or {}
    result = report(observed, plan(observed))
    (condition,) = [c for c in result["conditions"] if c["type"] == "MembersSpread"]
    return condition, [e for e in result["events"] if e["reason"].startswith("Quorum")]


def test_members_on_three_nodes_are_spread():
    condition, events = spread_of(placed(["n1", "n2", "n3"]))
    assert (condition["status"], condition["reason"]) == ("True", "SpreadAcrossFailureDomains")
    assert "3 voting members on 3 nodes (n1, n2, n3)" in condition["message"]
    assert events == []


def test_two_of_three_members_on_one_node_is_warned_with_the_node_and_members():
    condition, events = spread_of(placed(["n1", "n2", "n1"]))
    assert (condition["status"], condition["reason"]) == ("False", "QuorumOnOneNode")
    assert condition["message"].startswith("members c-0, c-2 of 3 voting members run on node n1")
    assert "losing it loses quorum" in condition["message"]
    assert [e["type"] for e in events] == ["Warning"]
    # Said once: the next report with the same placement records no new Event.
    _, again = spread_of(placed(["n1", "n2", "n1"]), {"conditions": [condition]})
    assert again == []


def test_members_on_three_nodes_of_one_zone_are_warned_about_the_zone():
    zones = {"n1": "eu-1a", "n2": "eu-1a", "n3": "eu-1b"}
    condition, _ = spread_of(placed(["n1", "n2", "n3"], zones))
    assert (condition["status"], condition["reason"]) == ("False", "QuorumInOneZone")
    assert "run on zone eu-1a" in condition["message"]
    zones["n2"] = "eu-1c"
    condition, _ = spread_of(placed(["n1", "n2", "n3"], zones))
    assert condition["status"] == "True" and "in 3 zones" in condition["message"]


def test_five_members_may_lose_a_node_holding_two():
    observed = placed(["n1", "n2", "n3"])
    observed["replicas"] = 5
    for i in (3, 4):
        observed["peers"].append(peer(i, NEW, NEW))
        observed["etcd"]["members"].append(member(i))
        observed["pods"][f"c-{i}"] = dict(pod(i, NEW), node=f"n{i - 2}")
    condition, _ = spread_of(observed)
    assert condition["status"] == "True", condition


def test_one_or_two_voting_members_blame_no_placement():
    # The moment a member is replaced (3 -> 2 -> 3 voting members), or a cluster of 1 or 2:
    # any member lost loses quorum, on one node or on two.
    for nodes in (["n1", "n2"], ["n1", "n1"], ["n1"]):
        observed = placed(nodes)
        for name in [f"c-{i}" for i in range(len(nodes), 3)]:
            observed["etcd"]["members"] = [
                m for m in observed["etcd"]["members"] if m["name"] != name
            ]
            observed["pods"].pop(name)
        condition, events = spread_of(observed)
        assert (condition["status"], condition["reason"]) == ("False", "TooFewMembersToSpread")
        voters = len(nodes)
        assert condition["message"].startswith(f"{voters} voting member")
        assert events == []


def test_members_without_a_node_yet_say_nothing_about_spreading():
    observed = cluster(configs=(NEW, NEW, NEW))
    result = report(observed, plan(observed))
    assert "MembersSpread" not in [c["type"] for c in result["conditions"]]


def test_members_are_kept_apart_by_default_and_by_the_template_when_it_says_so():
    spec = {
        "clusterName": "c",
        "version": VERSION,
        "bootstrap": {"static": {"initialCluster": [{"name": "c-0", "host": "c-0.c.ns.svc"}]}},
    }
    pod_spec = render_replicaset("c-0", "ns", spec)["spec"]["template"]["spec"]
    terms = pod_spec["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert [(t["podAffinityTerm"]["topologyKey"], t["weight"]) for t in terms] == [
        ("kubernetes.io/hostname", 100),
        ("topology.kubernetes.io/zone", 50),
    ]
    assert terms[0]["podAffinityTerm"]["labelSelector"] == {
        "matchLabels": {"etcd.quorumkeeper.dev/cluster": "c"}
    }
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
        }
    ]
    spec["podTemplate"] = {"topologySpreadConstraints": spread}
    pod_spec = render_replicaset("c-0", "ns", spec)["spec"]["template"]["spec"]
    assert pod_spec["topologySpreadConstraints"] == spread and "affinity" not in pod_spec
    spec["podTemplate"] = {"affinity": {"nodeAffinity": {}}}
    pod_spec = render_replicaset("c-0", "ns", spec)["spec"]["template"]["spec"]
    assert pod_spec["affinity"] == {"nodeAffinity": {}}


# -- database space in the status ----------------------------------------------------------


def sized(sizes, quota=None, current=None):
    """Three members whose databases are sizes[i] = (dbSize, dbSizeInUse) bytes."""
    observed = cluster(configs=(NEW, NEW, NEW))
    for i, (size, in_use) in enumerate(sizes):
        observed["etcd"]["members"][i].update(db_size=size, db_size_in_use=in_use)
        observed["peers"][i]["quota_bytes"] = quota
    observed["current"] = current or {}
    return report(observed, plan(observed))


def test_each_member_says_how_full_of_its_quota_and_how_fragmented_it_is():
    mib = 1 << 20
    result = sized([(100 * mib, 25 * mib), (50 * mib, 50 * mib), (10 * mib, 5 * mib)], 512 * mib)
    members = result["status"]["members"]
    assert [m["quotaUsedPercent"] for m in members] == [19, 9, 1]
    assert [m["fragmentedPercent"] for m in members] == [75, 0, 50]
    assert result["status"]["databaseSize"] == "100Mi"
    assert result["status"]["quotaUsedPercent"] == 19
    assert not [e for e in result["events"] if e["reason"] == "DatabaseNearQuota"]


def test_without_a_quota_of_its_own_a_member_counts_against_etcds_2gi():
    result = sized([(1 << 30, 1 << 30)] * 3)
    assert result["status"]["quotaUsedPercent"] == 50
    assert result["status"]["databaseSize"] == "1Gi"


def test_a_member_crossing_80_percent_of_its_quota_is_warned_once():
    mib = 1 << 20
    result = sized([(420 * mib, 400 * mib), (10 * mib, 10 * mib), (10 * mib, 10 * mib)], 512 * mib)
    (event,) = [e for e in result["events"] if e["reason"] == "DatabaseNearQuota"]
    assert event["type"] == "Warning"
    assert "member c-0's database uses 82% of its quota (420Mi, 400Mi in use)" in event["message"]
    again = sized(
        [(430 * mib, 400 * mib), (10 * mib, 10 * mib), (10 * mib, 10 * mib)],
        512 * mib,
        current={"members": result["status"]["members"]},
    )
    assert not [e for e in again["events"] if e["reason"] == "DatabaseNearQuota"]
