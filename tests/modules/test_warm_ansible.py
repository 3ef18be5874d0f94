"""The module tests' warm ansible (warm_ansible.py) against a cold ``ansible``: the same result,
a cold run for an environment it was not warmed up with, and a timeout that stops the module."""

from __future__ import annotations

import json
import subprocess

import pytest
import warm_ansible
from kubehelpers import wait_until

import etcdharness


@pytest.fixture
def warm():
    home = etcdharness.warm_ansible_home(True)
    env = etcdharness.ansible_env(home, True)
    return warm_ansible.WarmAnsible.for_home(home, env), env


def adhoc(module: str, args) -> list[str]:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return [etcdharness.ansible_bin(), "localhost", "-m", module, "-a", arguments]


def comparable(stdout: str) -> dict:
    """The json callback's output without what differs between any two runs."""
    output = json.loads(stdout)
    for play in output["plays"]:
        play["play"].pop("duration"), play["play"].pop("id")
        for task in play["tasks"]:
            task["task"].pop("duration"), task["task"].pop("id")
    return output


def test_a_warm_run_gives_what_a_cold_one_gives(warm):
    server, env = warm
    command = adhoc("etcd_cluster_info", {"endpoints": ["http://127.0.0.1:1"], "timeout": 1})
    cwd = str(etcdharness.REPO)
    warm_run = server.run(command, env, cwd=cwd, timeout=120)
    cold_run = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    assert (warm_run.returncode, warm_run.stderr) == (cold_run.returncode, cold_run.stderr)
    assert comparable(warm_run.stdout) == comparable(cold_run.stdout)
    result = comparable(warm_run.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result["failed"] and "cannot reach etcd" in result["msg"]


def test_other_ansible_settings_are_run_cold(warm):
    server, env = warm
    command = adhoc("ansible.builtin.ping", {"data": "pong"})
    assert server.run(command, dict(env, ANSIBLE_FORKS="7"), cwd="/", timeout=120) is None
    assert server.run(command, dict(env, UNRELATED="x"), cwd="/", timeout=120).returncode == 0


def test_a_timeout_stops_the_module_too(warm, tmp_path):
    server, env = warm
    script = f"sleep 60; touch {tmp_path / 'not-stopped'}"  # unique to this test's processes
    with pytest.raises(subprocess.TimeoutExpired):
        server.run(adhoc("ansible.builtin.shell", script), env, cwd="/", timeout=3)

    def gone():
        return subprocess.run(["pgrep", "-f", script], capture_output=True).returncode != 0

    wait_until("the module's processes gone", gone, timeout=10)
