"""The node agent's own Go unit tests (hack/nodeagent/internal/agent): image map, IPAM,
back-off, and a pod deleted again with a shorter grace period being killed at the earlier
deadline, as the kubelet does."""

from __future__ import annotations

from pathlib import Path

from gotest import go_test

ROOT = Path(__file__).resolve().parents[2]


def test_go_unit_tests():
    result = go_test(ROOT / "hack" / "nodeagent", "./internal/agent/")
    assert result.returncode == 0, result.stdout + result.stderr
