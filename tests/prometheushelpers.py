"""Prometheus and promtool of the toolchain (hack/toolchain/prometheus: built from the Go module
proxy, Kubernetes service discovery only), for the tests of the alert rules, the dashboard and
the observability e2e."""

from __future__ import annotations

from pathlib import Path

from kubehelpers import toolchain_component


def tool(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``; fails saying how to get it."""
    path = Path(toolchain_component("prometheus")) / name
    assert path.is_file(), f"{name} is missing: `make toolchain` builds it ({path})"
    return str(path)
