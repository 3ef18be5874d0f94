"""Every molecule scenario (molecule/*/molecule.yml), as `make molecule` runs them, on the local
cluster: each prepares (operator from this checkout), converges, checks idempotence, verifies
and cleans up its own namespace. A scenario that fails fails its test with molecule's output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_warm_start import runs_said
from kubehelpers import ROOT

pytestmark = [pytest.mark.cluster, pytest.mark.toolchain("minio")]

WARM_MODULES = ROOT / "hack" / "warm_modules.py"
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))


def scenario_namespace(name: str) -> str:
    config = yaml.safe_load((ROOT / "molecule" / name / "molecule.yml").read_text())
    return config["provisioner"]["inventory"]["host_vars"]["localhost"]["molecule_namespace"]


def leftover(kube, namespace: str) -> str | None:
    """What a scenario left behind: None when its namespace is gone, or terminating with no pod
    and no PVC left (molecule's cleanup waits for those, the namespace goes in the background)."""
    found = kube.run("get", "namespace", namespace, "-o", "json", check=False)
    if found.returncode != 0:
        return None
    terminating = "deletionTimestamp" in json.loads(found.stdout)["metadata"]
    remaining = [
        f"{item['kind']}/{item['metadata']['name']}"
        for item in kube.get("pods,pvc", namespace=namespace)["items"]
    ]
    if terminating and not remaining:
        return None
    return f"namespace {namespace} ({'terminating' if terminating else 'active'}): {remaining}"


def test_every_scenario_is_found():
    # The backup scenario needs the object stores; default is the Operator SDK's own; upgrade
    # rolls 3.5 -> 3.6; maintenance changes settings on running members and defragments them;
    # tls makes a cluster with TLS and rotates its CAs.
    assert {"default", "backup_restore", "upgrade", "maintenance", "tls"} <= set(SCENARIOS)
    namespaces = [scenario_namespace(s) for s in SCENARIOS]
    assert len(set(namespaces)) == len(namespaces), "scenarios must not share a namespace"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(local_cluster, scenario):
    namespace = scenario_namespace(scenario)
    # molecule runs ansible-playbook and ansible-config by name: the venv's.
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    env["ANSIBLE_NOCOLOR"] = env["NO_COLOR"] = "1"
    # The scenario's modules run warm (hack/warm_modules.py), as `make molecule` runs them.
    molecule = [sys.executable, "-m", "molecule", "test", "-s", scenario]
    start = time.monotonic()
    try:
        result = subprocess.run(
            [sys.executable, str(WARM_MODULES), *molecule],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=840,
        )
    finally:
        # molecule's cleanup runs after a failure too; this only catches a killed run.
        left = leftover(local_cluster, namespace)
        if left:
            local_cluster.run("delete", "namespace", namespace, "--wait=false", check=False)
    seconds = time.monotonic() - start
    output = result.stdout + result.stderr
    assert result.returncode == 0, (
        f"molecule test -s {scenario} failed (rc {result.returncode}, {seconds:.0f}s):\n"
        f"{output[-12000:]}"
    )
    # Its server counts the modules it ran (it says so once molecule is gone): none would mean
    # every module started cold, its kubernetes client imported each time.
    warm_runs = runs_said(output)
    assert warm_runs and warm_runs[-1] > 0, f"no module of {scenario} ran warm:\n{output[-4000:]}"
    assert not left, f"molecule's cleanup left {left}"
    print(f"molecule scenario {scenario}: {seconds:.1f}s")
