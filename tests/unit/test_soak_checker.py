"""The soak's linearizability checker (hack/soak/checker, built by the toolchain) on hand-made
histories, the history's error classification, and the checker's own Go tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gotest import go_test

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack"))

from soak.history import History, check, checker_binary, classify  # noqa: E402

pytestmark = pytest.mark.toolchain("soak_checker")


def op(i, client, kind, key, call, ret, outcome="ok", **fields):
    record = {"id": i, "client": client, "op": kind, "key": key, "call": call, "outcome": outcome}
    record["return"] = ret
    return record | fields


def found(value):
    return {"found": True, "value": value}


NOTHING = {"found": False, "value": ""}


def verdict_of(tmp_path, operations) -> dict:
    path = tmp_path / "history.json"
    path.write_text(json.dumps({"operations": operations}))
    return check(path, html=tmp_path / "history.html", timeout_s=30)


LINEARIZABLE = {
    "concurrent put and reads": [
        op(1, 0, "put", "a", 0, 100, value="1", result=NOTHING),
        op(2, 1, "get", "a", 10, 20, result=NOTHING),
        op(3, 2, "get", "a", 30, 40, result=found("1")),
        op(4, 1, "get", "a", 110, 120, result=found("1")),
    ],
    "compare-and-swap chain": [
        op(1, 0, "put", "a", 0, 10, value="1", result=NOTHING),
        op(2, 1, "cas", "a", 20, 30, value="2", expect="1", succeeded=True),
        op(3, 2, "cas", "a", 40, 50, value="3", expect="1", succeeded=False, result=found("2")),
    ],
    "indeterminate write applied later": [
        op(1, 0, "put", "a", 0, 10, value="1", result=NOTHING),
        op(2, 1, "put", "a", 20, None, "indeterminate", value="2"),
        op(3, 2, "get", "a", 30, 40, result=found("1")),
        op(4, 2, "get", "a", 500, 510, result=found("2")),
    ],
    "indeterminate write never applied": [
        op(1, 0, "put", "a", 0, 10, value="1", result=NOTHING),
        op(2, 1, "cas", "a", 20, None, "indeterminate", value="2", expect="1"),
        op(3, 2, "get", "a", 500, 510, result=found("1")),
    ],
}

NOT_LINEARIZABLE = {
    "acknowledged write lost": [
        op(1, 0, "put", "a", 0, 10, value="1", result=NOTHING),
        op(2, 1, "get", "a", 20, 30, result=NOTHING),
    ],
    "stale read": [
        op(1, 0, "put", "a", 0, 10, value="1", result=NOTHING),
        op(2, 0, "put", "a", 20, 30, value="2", result=found("1")),
        op(3, 1, "get", "a", 40, 50, result=found("1")),
    ],
    "both compare-and-swaps from one value succeed": [
        op(1, 0, "put", "a", 0, 10, value="1", result=NOTHING),
        op(2, 1, "cas", "a", 20, 30, value="2", expect="1", succeeded=True),
        op(3, 2, "cas", "a", 40, 50, value="3", expect="1", succeeded=True),
    ],
    "a definitely failed write is visible": [
        op(1, 0, "put", "a", 0, 10, value="1", result=NOTHING),
        op(2, 1, "put", "a", 20, 25, "failed", value="2", error="etcdserver: no leader"),
        op(3, 2, "get", "a", 40, 50, result=found("2")),
    ],
}


@pytest.mark.parametrize("name", LINEARIZABLE)
def test_linearizable(tmp_path, name):
    verdict = verdict_of(tmp_path, LINEARIZABLE[name])
    assert verdict["result"] == "linearizable" and verdict["linearizable"] is True, verdict
    assert not (tmp_path / "history.html").exists()  # only written for a failure


@pytest.mark.parametrize("name", NOT_LINEARIZABLE)
def test_not_linearizable(tmp_path, name):
    operations = [op(0, 3, "put", "other", 0, 1, value="x", result=NOTHING)]
    verdict = verdict_of(tmp_path, operations + NOT_LINEARIZABLE[name])
    assert verdict["result"] == "not-linearizable" and verdict["linearizable"] is False, verdict
    assert [k["key"] for k in verdict["illegal_keys"]] == ["a"]
    assert "put(a" in (tmp_path / "history.html").read_text()


def test_invalid_history_is_an_error(tmp_path):
    path = tmp_path / "history.json"
    path.write_text(json.dumps([op(1, 0, "put", "a", 0, 10)]))  # a put without a value
    result = subprocess.run(
        [str(checker_binary()), "-history", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 3 and "put without a value" in result.stderr


def test_recorded_history_round_trip(tmp_path):
    history = History()
    put = history.begin(0, "put", "k", value="v1")
    history.finish(put, "ok", result=NOTHING, revision=5)
    lost = history.begin(1, "put", "k", value="v2")
    history.finish(lost, "indeterminate", error="timed out")
    failed = history.begin(1, "cas", "k", value="v3", expect="nope")
    history.finish(failed, "failed", error="not connected")
    read = history.begin(2, "get", "k")
    history.finish(read, "ok", result=found("v2"))
    assert lost["return"] is None and lost["gave_up"] >= lost["call"]
    assert put["call"] <= put["return"] <= read["call"]
    counts = history.counts()
    assert (counts["ok"], counts["failed"], counts["indeterminate"]) == (2, 1, 1)
    assert [w["value"] for w in history.acknowledged_writes()] == ["v1"]
    verdict = check(history.dump(tmp_path / "h.json"))
    assert verdict["result"] == "linearizable"
    assert (verdict["checked"], verdict["indeterminate"], verdict["ignored"]) == (3, 1, 1)


@pytest.mark.parametrize(
    ("error", "sent", "outcome"),
    [
        ("etcdserver: no leader", True, "failed"),
        ("etcdserver: too many requests", True, "failed"),
        ("etcdserver: rpc not supported for learner", True, "failed"),
        ("anything at all", False, "failed"),
        ("timed out", True, "indeterminate"),
        ("etcdserver: request timed out", True, "indeterminate"),
        ("etcdserver: leader changed", True, "indeterminate"),
        ("Socket closed", True, "indeterminate"),
    ],
)
def test_classify(error, sent, outcome):
    assert classify(error, sent) == outcome


def test_go_unit_tests():
    """The checker's model on more hand-made histories (hack/soak/checker/checker_test.go)."""
    result = go_test(REPO / "hack" / "soak" / "checker", "./...", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
