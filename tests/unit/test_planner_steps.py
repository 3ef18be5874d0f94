"""The EtcdCluster planner's contract with its role: the actions it declares are the role's step
task files, its rules run in the documented order, and every step has the declared shape."""

from __future__ import annotations

import copy
import re
import types
import typing
from pathlib import Path

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils import qk_plan
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan import (
    RULES,
    etcd_cluster_plan,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_step import (
    NON_STEP_ACTIONS,
    REQUEUE_PERIODS,
    STEP_ACTIONS,
    Step,
    make_step,
)

TASKS = Path(__file__).resolve().parents[2] / "roles" / "etcdcluster" / "tasks"
# The role's own task files; every other one is a step, included as <action>.yml.
NOT_STEPS = {
    "main",
    "reconcile",
    "act",
    "cluster_objects",
    "converge",
    "next_round",
    "follow_up",
    "take_step",
    "report_held",
    "paused",
    "disruption_budget",
    "certificates",
    "authentication",
    "report",
    "root_password",
    "monitoring",
    "record_space_recovery",
}
OLD, NEW = "3.5.35", "3.6.16"
NOW = "2026-01-01T00:10:00Z"


# -- the actions are the role's steps -----------------------------------------------------------


def test_every_declared_step_action_is_a_task_file_of_the_role_and_back():
    task_files = {path.stem for path in TASKS.glob("*.yml")} - NOT_STEPS
    assert set(STEP_ACTIONS) - NON_STEP_ACTIONS == task_files


def test_wait_and_none_are_declared_as_actions_without_a_step():
    assert {"wait", "none"} == NON_STEP_ACTIONS
    assert set(STEP_ACTIONS) >= NON_STEP_ACTIONS


# -- the rules run in the documented order -----------------------------------------------------


def rule_names():
    return [rule.__name__ for rule in RULES]


def test_the_rules_are_in_the_order_the_planner_documents():
    documented = re.findall(r"^- (\w+) \[", qk_plan.__doc__, re.MULTILINE)
    assert rule_names() == documented


def test_repairs_and_recovery_come_first_and_ready_is_last():
    names = rule_names()
    assert names[:3] == ["repair_members", "recovery_under_way", "rolling_upgrade"]
    assert names[-1] == "cluster_ready"


def test_quorum_is_checked_before_any_membership_change():
    names = rule_names()
    assert names.index("cluster_unreachable") < names.index("quorum_lost")
    changes = ["replace_member", "promote", "add_member", "remove_member", "replace_stale_peer"]
    assert all(names.index("quorum_lost") < names.index(change) for change in changes)
    assert names.index("unhealthy_members") < names.index("promote")
    assert names.index("add_member") < names.index("remove_member")


# -- every step has the declared shape ---------------------------------------------------------


def peer(i, version=NEW, seen=NEW, pvc_uid=None, **extra):
    return {
        "name": f"c-{i}",
        "uid": f"peer-{i}",
        "deleting": False,
        "age": 600.0,
        "state": "New",
        "initial_cluster": ["c-0", "c-1", "c-2"],
        "member_id": f"{i:016x}" if seen else "",
        "pvc_uid": f"uid-{i}" if pvc_uid is None else pvc_uid,
        "version": version,
        "repository": "quay.io/coreos/etcd",
        "status": {"serverVersion": seen} if seen else {},
        **extra,
    }


def member(i, version=NEW, healthy=True, leader=False, learner=False, started=True):
    return {
        "name": f"c-{i}" if started else "",
        "id": f"{i:016x}",
        "peer_urls": [f"http://c-{i}.c.ns.svc.cluster.local:2380"],
        "client_urls": [f"http://c-{i}.c.ns.svc.cluster.local:2379"],
        "is_learner": learner,
        "is_leader": leader,
        "healthy": healthy and started,
        "version": version if healthy and started else None,
        "raft_index": 1000,
    }


def observation(replicas, peers, members=None, healthy=True, **extra):
    names = [p["name"] for p in peers]
    etcd = {"reachable": False}
    if members is not None:
        etcd = {
            "reachable": True,
            "healthy": healthy,
            "members": members,
            "cluster_version": f"{NEW.rsplit('.', 1)[0]}.0",
        }
    return {
        "cluster": "c",
        "replicas": replicas,
        "version": NEW,
        "repository": "quay.io/coreos/etcd",
        "now": NOW,
        "peers": peers,
        "pods": {n: {"name": f"{n}-a", "ready": True, "restarts": 0} for n in names},
        "pvcs": {p["name"]: {"exists": True, "uid": p["pvc_uid"]} for p in peers},
        "replicasets": {n: {"exists": True, "failure": ""} for n in names},
        "etcd": etcd,
        **extra,
    }


def three(version=NEW):
    return [member(i, version, leader=i == 0) for i in range(3)]


def observations():
    """An observation for every action the planner declares."""
    out = {
        "bootstrap": observation(3, []),
        "none": observation(3, [peer(i) for i in range(3)], three()),
        "add_member": observation(4, [peer(i) for i in range(3)], three()),
        "remove_member": observation(2, [peer(i) for i in range(3)], three()),
        "promote": observation(4, [peer(i) for i in range(4)], three() + [member(3, learner=True)]),
        "create_peer": observation(
            4, [peer(i) for i in range(3)], three() + [member(3, learner=True, started=False)]
        ),
        "wait": observation(3, [peer(i) for i in range(3)], three(), healthy=False),
        "upgrade_member": {
            **observation(3, [peer(i, OLD, OLD) for i in range(3)], three(OLD)),
            "version": NEW,
        },
        "hand_over_members": observation(
            3,
            [peer(i) for i in range(3)],
            recovery_restore={"pending": True, "name": "c-recovery-1", "backup": "b"},
        ),
    }
    reconfigure = observation(3, [peer(i, config_hash="old") for i in range(3)], three())
    reconfigure["config"] = {"options": {"snapshotCount": 5000}, "podTemplate": {}}
    out["restart_member"] = reconfigure
    nospace = observation(3, [peer(i) for i in range(3)], three())
    nospace["etcd"]["alarms"] = [
        {"member_id": nospace["etcd"]["members"][0]["id"], "alarm": "NOSPACE"}
    ]
    out["defragment"] = nospace
    grow = observation(3, [peer(i) for i in range(3)], three(), volume_size="2Gi")
    for claim in grow["pvcs"].values():
        claim.update(phase="Bound", request_bytes=1 << 30, capacity_bytes=1 << 30, expandable=True)
    out["grow_volumes"] = grow
    replace = observation(3, [peer(i) for i in range(3)], three())
    replace["pvcs"]["c-2"] = {"exists": False}
    out["replace_member"] = replace
    repair = observation(3, [peer(i) for i in range(3)], three())
    repair["replicasets"]["c-1"] = {"exists": False}
    out["repair_members"] = repair
    mistaken = observation(3, [peer(i, "3.6.99", seen="") for i in range(3)])
    for pod in mistaken["pods"].values():
        pod["problem"] = {"reason": "ImagePullFailed", "message": "cannot pull"}
    out["update_peers"] = mistaken
    survivor = [peer(0, force_new_cluster=True)] + [peer(i) for i in (1, 2)]
    out["force_new_cluster"] = observation(3, survivor)
    alone = observation(3, survivor, [member(0, leader=True)])
    alone["pods"]["c-0"]["force_new_cluster"] = True
    out["finish_force_new_cluster"] = alone
    out["restore_from_backup"] = observation(
        3,
        [peer(i) for i in range(3)],
        pvcs={},
        disaster_recovery={"enabled": True, "delaySeconds": 0},
        current={"recovery": {"quorumLossSince": NOW}},
        backups=[
            {
                "name": "b",
                "phase": "Completed",
                "verified": "True",
                "revision": 7,
                "completion_time": "2026-01-01T00:00:00Z",
            }
        ],
    )
    return out


def conforms(value, hint) -> bool:
    """isinstance for the hints Step uses (str, bool, int, dict, list[...], X | None)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is not None:
        return isinstance(value, origin) and all(
            conforms(item, typing.get_args(hint)[0]) for item in value
        )
    return isinstance(value, hint)


def assert_declared_shape(step):
    hints = typing.get_type_hints(Step)
    assert Step.__required_keys__ <= set(step), step
    assert set(step) <= set(hints), f"undeclared fields {set(step) - set(hints)}"
    assert step["action"] in STEP_ACTIONS
    assert step["requeue"] in REQUEUE_PERIODS or re.fullmatch(r"\d+s", step["requeue"])
    for field, value in step.items():
        assert conforms(value, hints[field]), f"{field}={value!r} is not a {hints[field]}"


def test_every_declared_action_is_reachable():
    assert set(observations()) == set(STEP_ACTIONS)


@pytest.mark.parametrize("action", sorted(STEP_ACTIONS))
def test_the_step_of_every_action_has_the_declared_shape(action):
    step = etcd_cluster_plan(observations()[action])
    assert step["action"] == action
    assert_declared_shape(step)


def test_a_step_the_planner_does_not_declare_is_refused():
    # Every step is made by make_step: a step of an existing test with an undeclared action or
    # field fails there, at the rule that made it.
    with pytest.raises(ValueError, match="STEP_ACTIONS"):
        make_step("scale_to_zero", "Why", "what")
    with pytest.raises(ValueError, match="undeclared"):
        make_step("wait", "Why", "what", "event", color="blue")
    with pytest.raises(ValueError, match="requeue"):
        make_step("wait", "Why", "what", "soon")


# -- each round's data flows one way -----------------------------------------------------------


@pytest.mark.parametrize("action", sorted(STEP_ACTIONS))
def test_planning_leaves_the_observation_as_it_was_and_shares_nothing_with_it(action):
    observed = observations()[action]
    before = copy.deepcopy(observed)
    step = etcd_cluster_plan(observed)
    assert observed == before
    # A step the role changes cannot change the next round's observation.
    for value in step.values():
        if isinstance(value, dict | list):
            assert all(value is not part for part in _parts(observed))


def _parts(value):
    yield value
    children = (
        value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    )
    for child in children:
        yield from _parts(child)
