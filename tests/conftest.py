"""Shared fixtures: the local cluster (started when not running, stopped if we started it)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kubehelpers import ROOT, STATE, Kube, toolchain_component, toolchain_manifest, wait_until  # noqa: E402

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
    # A pytest-xdist worker shares the cluster with the others: the last one to end cannot know
    # it is the last (hack/test_lanes.py stops a cluster it started).
    shared = "PYTEST_XDIST_WORKER" in os.environ
    if started_here and not shared and os.environ.get("QK_KEEP_CLUSTER") != "1":
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
    local_cluster.delete_namespace(name)


# `make test` runs the suite as concurrent pytest processes (hack/test_lanes.py). The tests that
# use the local cluster run side by side in pytest-xdist workers (each in its own namespace), then
# the ``exclusive`` ones alone: they stop the operator, a node or the cluster's etcd members for
# everyone. Beside them runs every test that does not use the cluster (real etcd, its own API
# servers and object stores, on free ports), which mostly waits on processes starting.
LANE_ENV = "QK_TEST_LANE"
LANES = {
    # lane: which tests it keeps, given (uses the local cluster, marked exclusive)
    "local": lambda cluster, exclusive: not cluster,
    "cluster": lambda cluster, exclusive: cluster,
    "cluster-shared": lambda cluster, exclusive: cluster and not exclusive,
    "cluster-exclusive": lambda cluster, exclusive: cluster and exclusive,
}


def uses_local_cluster(item) -> bool:
    return (
        "local_cluster" in getattr(item, "fixturenames", ())
        or bool(item.get_closest_marker("cluster"))
        or bool(item.get_closest_marker("exclusive"))
    )


def built_after(item) -> int:
    """0 for a test that needs nothing of the toolchain's tests part, else 1 + the build position
    (toolchain_manifest.TESTS_PART) of the last component it needs."""
    marker = item.get_closest_marker("toolchain")
    needs = marker.args if marker else ()
    order = toolchain_manifest.TESTS_PART
    return max((order.index(key) + 1 for key in needs if key in order), default=0)


def pytest_collection_modifyitems(config, items):
    lane = os.environ.get(LANE_ENV)
    if not lane:
        return
    if lane not in LANES:
        raise pytest.UsageError(f"{LANE_ENV} must be one of {', '.join(LANES)}, not {lane!r}")
    keep, drop = [], []
    for item in items:
        exclusive = bool(item.get_closest_marker("exclusive"))
        (keep if LANES[lane](uses_local_cluster(item), exclusive) else drop).append(item)
    # Tests of a component `make test` builds beside the tests (marked ``toolchain``) go last,
    # in the order it builds them: a lane runs everything else while the build goes on, then
    # seldom waits. The order depends on nothing at run time: pytest-xdist's workers must all
    # collect the same.
    keep.sort(key=built_after)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked ``toolchain("minio", ...)`` starts once those components are built (a cold
    `make test` builds them beside the tests): waited for here, outside the test's own timeout,
    which would count minutes of a build against it. A failed build is left to the test's own
    look-up (manifest.component), which fails it saying so."""
    marker = item.get_closest_marker("toolchain")
    for key in marker.args if marker else ():
        try:
            toolchain_component(key)
        except toolchain_manifest.MissingComponent:
            break
    yield
