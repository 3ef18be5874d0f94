"""The node agent's own Go unit tests (hack/nodeagent/internal/agent): image map, IPAM,
back-off, and a pod deleted again with a shorter grace period being killed at the earlier
deadline, as the kubelet does."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_go_unit_tests():
    if shutil.which("go") is None:
        pytest.fail("Go is required (the toolchain builds the node agent with it)")
    result = subprocess.run(
        ["go", "test", "-count=1", "./internal/agent/"],
        cwd=ROOT / "hack" / "nodeagent",
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
