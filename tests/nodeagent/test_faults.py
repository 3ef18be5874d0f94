"""hack/cluster/faults.py against a fake state directory (no cluster, no Go, no root needed
except for nothing: pods are plain `sleep` processes, the agent is a Python sleeper)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("faults", ROOT / "hack" / "cluster" / "faults.py")
faults = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(faults)


def _alive(pid: int) -> bool:
    return faults._alive(pid)


@pytest.fixture
def state(tmp_path):
    procs = []

    def spawn(argv, **kw):
        p = subprocess.Popen(argv, start_new_session=True, **kw)
        procs.append(p)
        return p

    yield tmp_path, spawn
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def write_pod(root: Path, node: str, ns: str, name: str, containers: dict, uid="u1") -> Path:
    d = root / "nodes" / node / "pods" / f"{ns}_{name}_{uid}"
    d.mkdir(parents=True)
    (d / "pod.json").write_text(
        json.dumps(
            {
                "namespace": ns,
                "name": name,
                "uid": uid,
                "netns": "qk-x",
                "hostVeth": "qkhdoesnotexist",
                "podIP": "10.213.1.2",
                "containers": containers,
                "updatedAt": "2026-01-01T00:00:00Z",
            }
        )
    )
    return d


def _reap(p, timeout=5):
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(timeout=timeout)


def test_crash_pod_kills_the_process_group(state):
    root, spawn = state
    main = spawn(["sh", "-c", "sleep 300 & sleep 300; wait"])
    other = spawn(["sleep", "300"])
    time.sleep(0.2)
    write_pod(root, "node-1", "ns", "p", {"etcd": main.pid, "side": other.pid})
    assert faults.crash_pod("ns", "p", container="etcd", state=root) == [main.pid]
    _reap(main)
    assert main.returncode == -signal.SIGKILL
    assert other.poll() is None  # other container untouched
    # the whole group went (the background sleep too)
    out = subprocess.run(["pgrep", "-g", str(main.pid)], capture_output=True, text=True)
    deadline = time.monotonic() + 5
    while any(_alive(int(p)) for p in out.stdout.split()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(int(p)) for p in out.stdout.split())  # zombies do not count
    # idempotent: nothing left to kill
    assert faults.crash_pod("ns", "p", container="etcd", state=root) == []
    assert faults.crash_pod("ns", "p", state=root) == [other.pid]


def _spawn_logging_to(spawn, log: Path, env=None):
    """A container as the node agent starts it: its own process group, stdout on its log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        return spawn(["sleep", "60"], stdout=out, stderr=out, env=env)


def test_a_running_pod_without_pod_json_is_crashed_by_its_container_logs(
    state, tmp_path_factory, monkeypatch
):
    root, spawn = state
    write_pod(root, "node-1", "ns", "other", {"c": 0})
    pods = root / "nodes" / "node-1" / "pods"
    other_state = tmp_path_factory.mktemp("other-state") / "nodes" / "node-1" / "pods"
    same_hostname = {**os.environ, "HOSTNAME": "orphan-7f9c-x2"}
    pod = _spawn_logging_to(spawn, pods / "ns_orphan-7f9c-x2_u2/logs/etcd/0.log")
    gone = _spawn_logging_to(spawn, pods / "ns_orphan-7f9c-x2_u3/logs/etcd/0.log")
    shutil.rmtree(pods / "ns_orphan-7f9c-x2_u3")  # its directory removed under it: still found
    bystanders = [
        _spawn_logging_to(spawn, pods / "ns_orphan-7f9c-x20_u4/logs/c/0.log"),
        _spawn_logging_to(spawn, pods / "ns2_orphan-7f9c-x2_u5/logs/c/0.log"),
        _spawn_logging_to(spawn, other_state / "ns_orphan-7f9c-x2_u6/logs/c/0.log", same_hostname),
        spawn(["sleep", "60"], env=same_hostname),
    ]
    find_pod = faults.find_pod
    monkeypatch.setattr(faults, "find_pod", lambda *a, **kw: find_pod(*a, **kw, wait_seconds=0))
    assert faults.crash_pod("ns", "orphan-7f9c-x2", state=root) == sorted([pod.pid, gone.pid])
    pod.wait(timeout=5)
    gone.wait(timeout=5)
    assert all(_alive(bystander.pid) for bystander in bystanders)
    # One container asked for by name: without pod.json nothing says which group it is.
    with pytest.raises(faults.FaultError, match="not known"):
        faults.crash_pod("ns", "orphan-7f9c-x2", container="etcd", state=root)


def test_cli_exit_codes_and_a_pod_of_another_state_directory(state, tmp_path_factory):
    """Exit 2 for an unknown pod, even when a pod of that name runs under another node agent's
    state (CI's live cluster had a pod "b", killed by the HOSTNAME fallback)."""
    root, spawn = state
    elsewhere = tmp_path_factory.mktemp("live-cluster")
    log = elsewhere / "nodes/n1/pods/a_b_u1/logs/c/0.log"
    other = _spawn_logging_to(spawn, log, env={**os.environ, "HOSTNAME": "b"})
    res = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "cluster" / "faults.py"), "--state", str(root),
         "crash-pod", "a", "b"],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert res.returncode == 2 and "not known" in res.stderr, res.stderr
    assert _alive(other.pid)


def test_unknown_pod_and_container(state):
    root, _ = state
    write_pod(root, "node-1", "ns", "p", {"c": 0})
    with pytest.raises(faults.FaultError, match="not known"):
        faults.crash_pod("ns", "nope", state=root)
    with pytest.raises(faults.FaultError, match="no container"):
        faults.crash_pod("ns", "p", container="x", state=root)
    with pytest.raises(faults.FaultError, match="no host veth"):
        faults.partition_pod("ns", "p", state=root)


def test_a_pod_without_pod_json_is_reported_with_what_the_agents_logged_of_it(state):
    root, _ = state
    write_pod(root, "node-1", "ns", "p", {"c": 0})
    (root / "nodes" / "node-2").mkdir(parents=True)
    (root / "nodes" / "node-2" / "agent.log").write_text(
        "10:00:01 pod ns/gone created (uid u9)\n10:00:02 pod ns/other created (uid u8)\n"
        "10:00:03 pod ns/gone: removed the state of a pod that is gone\n"
    )
    (root / "logs").mkdir()
    (root / "logs" / "nodeagent-node-3.log").write_text("10:00:00 pod ns/gone: deleting\n")
    with pytest.raises(faults.FaultError) as refused:
        faults.find_pod("ns", "gone", state=root, wait_seconds=0)
    message = str(refused.value)
    assert "pods of ns there: p" in message
    assert "node-2: 10:00:03 pod ns/gone: removed the state" in message
    assert "nodeagent-node-3.log: 10:00:00 pod ns/gone: deleting" in message
    assert "ns/other" not in message


def test_newest_pod_json_wins(state):
    root, _ = state
    write_pod(root, "node-1", "ns", "p", {"c": 0}, uid="old")
    d = write_pod(root, "node-2", "ns", "p", {"c": 0}, uid="new")
    data = json.loads((d / "pod.json").read_text())
    data["updatedAt"] = "2026-02-01T00:00:00Z"
    (d / "pod.json").write_text(json.dumps(data))
    assert faults.find_pod("ns", "p", state=root)["uid"] == "new"
    assert faults.find_pod("ns", "p", state=root)["node"] == "node-2"


def test_stop_and_start_node(state):
    root, spawn = state
    node = root / "nodes" / "node-1"
    node.mkdir(parents=True)
    argv = [
        sys.executable,
        "-c",
        "import time, sys; print('agent up', flush=True); time.sleep(300)",
    ]
    (node / "agent.cmdline").write_text(json.dumps(argv))
    # Popen returns once exec closed its close-on-exec pipe, a moment before the kernel sets
    # the new program's argv: /proc/PID/cmdline can still read empty, which node_running takes
    # for another program (a loaded CI machine showed it). Once it has printed, it is set.
    agent = spawn(argv, stdout=subprocess.PIPE, text=True)
    assert agent.stdout.readline().strip() == "agent up"
    (node / "agent.pid").write_text(str(agent.pid))
    assert faults.node_running("node-1", state=root)
    assert faults.stop_node("node-1", state=root) is True
    assert not _alive(agent.pid)  # stop_node reaped it (it is our child here)
    assert not faults.node_running("node-1", state=root)
    assert faults.stop_node("node-1", state=root) is False  # idempotent
    pid = faults.start_node("node-1", state=root)
    try:
        assert int((node / "agent.pid").read_text()) == pid
        deadline = time.monotonic() + 5
        while "agent up" not in (node / "agent.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "agent up" in (node / "agent.log").read_text()
        assert faults.start_node("node-1", state=root) == pid  # idempotent
        assert faults.stop_node("node-1", state=root) is True
        assert not _alive(pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_unknown_node(state):
    root, _ = state
    with pytest.raises(faults.FaultError, match="unknown"):
        faults.stop_node("node-9", state=root)
    with pytest.raises(faults.FaultError, match="unknown"):
        faults.start_node("node-9", state=root)


def test_start_node_keeps_localcluster_record_in_step(state):
    root, spawn = state
    node = root / "nodes" / "node-2"
    node.mkdir(parents=True)
    component = root / "nodes" / "nodeagent-node-2"
    component.mkdir()
    (component / "pid").write_text("999999")  # stale
    (node / "agent.cmdline").write_text(
        json.dumps([sys.executable, "-c", "import time; time.sleep(300)"])
    )
    pid = faults.start_node("node-2", state=root)
    try:
        assert int((component / "pid").read_text()) == pid
        # agent.pid lost (e.g. rewritten by someone else): the component record still finds it
        (node / "agent.pid").write_text("")
        assert faults.node_running("node-2", state=root)
        assert faults.start_node("node-2", state=root) == pid
        assert faults.stop_node("node-2", state=root) is True
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_recycled_pid_is_not_the_agent(state):
    root, spawn = state
    node = root / "nodes" / "node-1"
    node.mkdir(parents=True)
    (node / "agent.cmdline").write_text(json.dumps(["/nonexistent/nodeagent", "run"]))
    other = spawn(["sleep", "300"])
    (node / "agent.pid").write_text(str(other.pid))
    assert not faults.node_running("node-1", state=root)
    assert faults.stop_node("node-1", state=root) is False
    assert other.poll() is None


def test_a_pod_the_node_agent_records_a_moment_later_is_found(state):
    root, _ = state
    late = threading.Timer(0.5, write_pod, (root, "node-3", "ns", "late", {"c": 0}))
    late.start()
    try:
        assert faults.find_pod("ns", "late", state=root)["node"] == "node-3"
    finally:
        late.join()
    with pytest.raises(faults.FaultError, match=r"pods of ns there: late"):
        faults.find_pod("ns", "missing", state=root, wait_seconds=0.3)
