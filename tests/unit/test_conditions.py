from __future__ import annotations

from datetime import UTC, datetime

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_k8s import (
    compute_status,
    deep_merge,
    event_matches,
    merge_conditions,
    normalize_condition_status,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    kubeconfig_path,
    now_rfc3339,
)

T0 = "2020-01-01T00:00:00Z"
NOW = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


def cond(t="Available", s="True", r="Ok", msg="", **kw):
    return {"type": t, "status": s, "reason": r, "message": msg, **kw}


def test_new_condition_gets_time_and_generation():
    (c,) = merge_conditions([], [cond()], generation=3, now=NOW)
    assert c == {
        "type": "Available",
        "status": "True",
        "reason": "Ok",
        "message": "",
        "lastTransitionTime": "2024-05-06T07:08:09Z",
        "observedGeneration": 3,
    }


def test_unchanged_status_keeps_transition_time_but_updates_rest():
    old = [cond(lastTransitionTime=T0, observedGeneration=1)]
    (c,) = merge_conditions(old, [cond(r="Other", msg="m")], generation=2, now=NOW)
    assert c["lastTransitionTime"] == T0
    assert c["reason"] == "Other" and c["message"] == "m" and c["observedGeneration"] == 2


def test_changed_status_sets_now():
    old = [cond(lastTransitionTime=T0)]
    (c,) = merge_conditions(old, [cond(s="False")], generation=None, now=NOW)
    assert c["lastTransitionTime"] == "2024-05-06T07:08:09Z"
    assert "observedGeneration" not in c


def test_merge_by_type_keeps_others_and_order():
    old = [cond("A", lastTransitionTime=T0), cond("B", lastTransitionTime=T0)]
    out = merge_conditions(old, [cond("C"), cond("A", s="False")], generation=1, now=NOW)
    assert [c["type"] for c in out] == ["A", "B", "C"]
    assert out[1] == cond("B", lastTransitionTime=T0)
    assert out[0]["status"] == "False"


def test_merge_is_idempotent():
    once = merge_conditions([], [cond()], generation=1, now=NOW)
    later = datetime(2030, 1, 1, tzinfo=UTC)
    assert merge_conditions(once, [cond()], generation=1, now=later) == once


@pytest.mark.parametrize(
    "given,expected",
    [
        (True, "True"),
        (False, "False"),
        ("true", "True"),
        ("unknown", "Unknown"),
        ("False", "False"),
    ],
)
def test_status_normalization(given, expected):
    assert normalize_condition_status(given) == expected


def test_bad_status_and_missing_type():
    with pytest.raises(ValueError):
        normalize_condition_status("maybe")
    with pytest.raises(ValueError):
        merge_conditions([], [{"status": "True"}])


def test_deep_merge():
    base = {"a": 1, "nested": {"x": 1, "y": 2}, "gone": 5}
    out = deep_merge(base, {"nested": {"y": 3, "z": 4}, "gone": None, "b": [1]})
    assert out == {"a": 1, "nested": {"x": 1, "y": 3, "z": 4}, "b": [1]}
    assert base["nested"] == {"x": 1, "y": 2}  # not mutated


def test_compute_status_unchanged_means_equal():
    current = {"phase": "Running", "conditions": merge_conditions([], [cond()], 1, NOW)}
    assert compute_status(current, {"phase": "Running"}, [cond()], 1) == current
    assert compute_status(current, {"phase": "Degraded"}, [], 1)["phase"] == "Degraded"


def test_now_format():
    assert now_rfc3339(NOW) == "2024-05-06T07:08:09Z"


def test_kubeconfig_order():
    env = {"K8S_AUTH_KUBECONFIG": "/proxy", "KUBECONFIG": "/a:/b"}
    assert kubeconfig_path("/opt", env) == "/opt"
    assert kubeconfig_path(None, env) == "/proxy"
    assert kubeconfig_path(None, {"KUBECONFIG": "/a:/b"}) == "/a"
    assert kubeconfig_path(None, {}) is None


def test_event_matching():
    ev = {
        "involvedObject": {"uid": "u1"},
        "reason": "R",
        "message": "m",
        "type": "Normal",
        "source": {"component": "quorumkeeper"},
    }
    assert event_matches(ev, "u1", "R", "m", "Normal", "quorumkeeper")
    assert not event_matches(ev, "u1", "R", "other", "Normal", "quorumkeeper")
    assert not event_matches(ev, "u2", "R", "m", "Normal", "quorumkeeper")
    assert not event_matches(ev, "u1", "R", "m", "Warning", "quorumkeeper")
