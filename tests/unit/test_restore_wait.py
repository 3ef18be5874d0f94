"""Waiting in one reconcile for what wakes no EtcdRestore (qk_restore_observe.wait_for_next_step):
its restore pods finishing, its restored cluster becoming Available. The reads stand for the
API server; the planner is the real one."""

from __future__ import annotations

import itertools

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_restore import plan_restore
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_restore_observe import (
    wait_for_next_step,
)
from fakeclock import Clock
from test_restore_plan import observed, our_cluster, ours, pods

MEMBERS = ("c-0", "c-1", "c-2")


def restoring(*phases):
    """An observation whose restore pods are in ``phases`` (one per member)."""
    state = observed(
        phase="Restoring",
        pvcs=ours(*MEMBERS),
        pods=pods(*zip(MEMBERS, phases, strict=True)),
    )
    state["step"] = plan_restore(state)
    return state


def waiting_for_cluster(available=False):
    state = observed(phase="Restoring", pvcs=ours(*MEMBERS), cluster=our_cluster(available))
    state["step"] = plan_restore(state)
    return state


class Reads:
    """What the API server answers, one answer per read; the last one repeats."""

    def __init__(self, answers):
        self.answers, self.asked = list(answers), []

    def __call__(self, what):
        self.asked.append(what)
        return self.answers[min(len(self.asked), len(self.answers)) - 1]


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(
        "ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_restore_observe.time.sleep",
        clock.sleep,
    )
    return clock


def test_the_pods_finishing_ends_the_wait_with_a_whole_new_observation(clock):
    start = restoring("Running", "Running", "Running")
    assert (start["step"]["action"], start["step"]["reason"]) == ("wait", "RestoringVolumes")
    reads = Reads(
        [
            pods(("c-0", "Succeeded"), ("c-1", "Running"), ("c-2", "Running")),
            pods(("c-0", "Succeeded"), ("c-1", "Succeeded"), ("c-2", "Running")),
            pods(*((m, "Succeeded") for m in MEMBERS)),
        ]
    )
    again = restoring("Succeeded", "Succeeded", "Succeeded")
    result, waited = wait_for_next_step(start, reads, lambda: again, 10, 0.25, clock)
    # One member finishing changes the message, not the step: the wait goes on until all have.
    assert reads.asked == ["pods"] * 3
    assert result is again and result["step"]["action"] == "create_cluster"
    assert waited == 0.75


def test_a_failed_pod_ends_the_wait(clock):
    start = restoring("Running", "Running", "Running")
    failed = restoring("Running", "Running", "Running")["pods"]
    failed[1] = {**failed[1], "phase": "Failed", "failure": {"container": "restore"}}
    reads = Reads([failed])
    result, _ = wait_for_next_step(
        start, reads, lambda: {"step": "observed again"}, 10, 0.25, clock
    )
    assert result == {"step": "observed again"}


def test_the_cluster_becoming_available_ends_the_wait(clock):
    start = waiting_for_cluster()
    assert start["step"]["reason"] == "WaitingForCluster"
    reads = Reads([our_cluster(False), our_cluster(False), our_cluster(True)])
    done = waiting_for_cluster(available=True)
    result, waited = wait_for_next_step(start, reads, lambda: done, 10, 0.5, clock)
    assert reads.asked == ["cluster"] * 3 and result["step"]["action"] == "complete"
    assert waited == 1.5


def test_no_change_returns_the_observation_as_it_was_after_the_time_given(clock):
    start = restoring("Running", "Pending", "Running")
    reads = Reads([start["pods"]])
    result, waited = wait_for_next_step(start, reads, pytest.fail, 3, 0.25, clock)
    assert waited == 3 and len(reads.asked) == 12
    # The same observation and step, to be looked at again at once rather than after a period.
    assert {**result, "step": start["step"]} == start
    assert start["step"]["requeue"] == "poll" and result["step"]["requeue"] == "next"


@pytest.mark.parametrize(
    "state",
    [
        # Steps that act, and waits that an event ends (a backup still running, say).
        restoring("Succeeded", "Succeeded", "Succeeded"),
        waiting_for_cluster(available=True),
        observed(),
        {
            **observed(),
            "step": {"action": "wait", "reason": "WaitingForBackup", "requeue": "slow"},
        },
    ],
    ids=["create-cluster", "complete", "restore-volumes", "waiting-for-backup"],
)
def test_other_steps_are_not_waited_on(clock, state):
    state = {**state, "step": state.get("step") or plan_restore(state)}
    result, waited = wait_for_next_step(state, pytest.fail, pytest.fail, 10, 0.25, clock)
    assert result is state and waited == 0.0


def test_no_time_given_returns_at_once(clock):
    start = restoring("Running", "Running", "Running")
    assert wait_for_next_step(start, pytest.fail, pytest.fail, 0, 0.25, clock) == (start, 0.0)


def test_the_interval_never_overshoots_the_time_given(clock):
    start = waiting_for_cluster()
    sleeps = itertools.count()
    reads = Reads([our_cluster(False)])

    def read(what):
        next(sleeps)
        return reads(what)

    _, waited = wait_for_next_step(start, read, pytest.fail, 1.2, 0.5, clock)
    assert waited == 1.2 and next(sleeps) == 3
