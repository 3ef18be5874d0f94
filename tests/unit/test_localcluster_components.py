"""hack/cluster/localcluster.py's process supervision (Component) with plain `sleep` processes:
a component started from a binary that has since been rebuilt at another path is still found,
stopped and replaced, not left running beside its successor (two node agents for one node)."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack" / "cluster"))

import localcluster  # noqa: E402


@pytest.fixture
def binaries(tmp_path, monkeypatch):
    monkeypatch.setattr(localcluster, "STATE", tmp_path)  # the components' logs go there
    sleep = shutil.which("sleep")
    built = []
    for name in ("agent-old", "agent-new"):
        shutil.copy(sleep, tmp_path / name)
        built.append(str(tmp_path / name))
    started = []
    yield tmp_path, built, started
    for component in started:
        component.stop(timeout=2)


def running(component) -> int | None:
    """The component's pid once its process runs the binary (a moment after Popen returns,
    the child may not have exec'd it yet)."""
    deadline = time.monotonic() + 5
    while (pid := component.pid()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return pid


def gone(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or localcluster._is_zombie(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_component_rebuilt_at_another_path_replaces_the_running_one(binaries):
    root, (old, new), started = binaries
    before = localcluster.Component("agent", [old, "300"], directory=root / "nodes")
    started.append(before)
    assert before.start() is True
    old_pid = running(before)
    assert old_pid

    after = localcluster.Component("agent", [new, "300"], directory=root / "nodes")
    started.append(after)
    assert after.pid() == old_pid, "the running process of the old binary is not ours any more"
    assert after.start() is True
    assert gone(old_pid), "the old binary's process was left running beside the new one"
    assert running(after) not in (None, old_pid)
    assert after.start() is False  # the same argv again: left as it is


def test_a_recycled_pid_running_something_else_is_not_the_component(binaries):
    root, (old, new), started = binaries
    other = localcluster.Component("other", [new, "300"], directory=root / "nodes")
    started.append(other)
    other.start()
    assert running(other)
    component = localcluster.Component("agent", [old, "300"], directory=root / "nodes")
    component.pid_file.parent.mkdir(parents=True)
    component.pid_file.write_text(str(other.pid()))
    component.cmdline_file.write_text(f'["{old}", "300"]')
    assert component.pid() is None
