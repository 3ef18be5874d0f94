"""Shared fixtures: the local cluster (started when not running, stopped if we started it)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kubehelpers import ROOT, STATE, Kube, wait_until  # noqa: E402

LOCALCLUSTER = [sys.executable, str(ROOT / "hack" / "cluster" / "localcluster.py")]


def _cluster_running() -> bool:
    result = subprocess.run([*LOCALCLUSTER, "status"], capture_output=True, text=True)
    return result.returncode == 0


@pytest.fixture(scope="session")
def local_cluster():
    """The local cluster's Kube. Reuses a running cluster; one this session starts is stopped at
    the end unless QK_KEEP_CLUSTER=1."""
    started_here = not _cluster_running()
    result = subprocess.run([*LOCALCLUSTER, "up"], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        pytest.fail(f"local cluster did not come up:\n{result.stdout}\n{result.stderr}")
    yield Kube(STATE / "kubeconfig")
    if started_here and os.environ.get("QK_KEEP_CLUSTER") != "1":
        subprocess.run([*LOCALCLUSTER, "down"], capture_output=True, text=True, timeout=300)


@pytest.fixture
def namespace(local_cluster):
    """A fresh namespace per test, deleted afterwards (PVCs in it go too: tests own their data)."""
    name = "t-" + uuid.uuid4().hex[:8]
    local_cluster("create", "namespace", name)
    # Pods are refused until the namespace's default ServiceAccount exists.
    wait_until(
        "the default ServiceAccount",
        lambda: local_cluster.exists("serviceaccount", "default", name),
        timeout=30,
    )
    yield name
    local_cluster.run("delete", "namespace", name, "--wait=false", check=False)
