"""requeue_after through ansible: the result must satisfy ansible-operator v1.42's contract:
task_action == "requeue_after", not failed, res["period"] a string Go's ParseDuration accepts."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "given,period", [("10s", "10s"), (30, "30s"), ("90s", "1m30s"), ("1.5", "1.5s"), ("2m", "2m0s")]
)
def test_requeue_after_period(given, period, run_module):
    res = run_module("requeue_after", {"period": given})
    assert res["failed"] is False and res["changed"] is False
    assert res["period"] == period and isinstance(res["period"], str)
    assert res["action"] == "requeue_after"


def test_requeue_after_alias_and_check_mode(run_module):
    res = run_module("requeue_after", {"time": "5s"}, check=True)
    assert res["failed"] is False and res["period"] == "5s"


def test_requeue_after_rejects_garbage(run_module):
    res = run_module("requeue_after", {"period": "soon"})
    assert res["failed"] is True and "invalid duration 'soon'" in res["msg"]
