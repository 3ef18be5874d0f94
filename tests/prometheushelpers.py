"""Prometheus and promtool of the toolchain (hack/toolchain/prometheus: built from the Go module
proxy, Kubernetes service discovery only), for the tests of the alert rules, the dashboard and
the observability e2e."""

from __future__ import annotations

import json
import os
from pathlib import Path

CACHE = Path(os.environ.get("QK_CACHE", Path.home() / ".cache" / "quorumkeeper"))


def tool(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``; fails saying how to get it."""
    manifest = CACHE / "toolchain.json"
    directory = json.loads(manifest.read_text()).get("prometheus") if manifest.exists() else None
    path = Path(directory or "/nonexistent") / name
    assert path.is_file(), f"{name} is missing: `make toolchain` builds it ({path})"
    return str(path)
