#!/usr/bin/env python3
"""Fault injection for the local cluster (Python 3.11 stdlib only).

Works on the node agents' state directories, `$QK_STATE/nodes/<node>/` (QK_STATE defaults to
/var/lib/quorumkeeper; `--state` overrides it):

- `pods/<namespace>_<name>_<uid>/pod.json`, written by the node agent (`hack/nodeagent`):
  {namespace, name, uid, netns, hostVeth, podIP, hostNetwork, containers: {name: pid}, ...}
- `agent.pid` and `agent.cmdline` (a JSON argv list), written by `localcluster.py`; start_node
  also updates localcluster.py's own record `$QK_STATE/nodes/nodeagent-<node>/pid` when it exists.

Commands (all idempotent; unknown pods or nodes raise FaultError / exit 2):

    faults.py crash-pod NAMESPACE NAME [--container C]   SIGKILL the container process group(s)
    faults.py partition-pod NAMESPACE NAME               cut the pod off the network (both ways)
    faults.py heal-pod NAMESPACE NAME                    undo partition-pod
    faults.py stop-node NODE                             SIGTERM the node agent and wait for it
    faults.py start-node NODE                            re-spawn the agent from agent.cmdline
    faults.py list                                       pods and agents known to the state dirs

Partitioning sets the pod's host-side veth (its port on the `qk0` bridge) down: every packet to
and from the pod is dropped, including traffic from the host (probes, kubectl exec still works as
it does not use the network). The pod's own interface stays up, so the processes see a silent
network, like a pulled cable. A restart of the agent, or re-creating the pod, brings a fresh veth
up: a partition does not survive the pod sandbox. The pod keeps the partition across container
restarts (the veth belongs to the pod, not to the container).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = [
    "FaultError",
    "crash_pod",
    "partition_pod",
    "heal_pod",
    "is_partitioned",
    "stop_node",
    "start_node",
    "node_running",
    "find_pod",
    "list_pods",
]


class FaultError(RuntimeError):
    """A fault could not be injected (unknown pod or node, missing state...)."""


def state_root(state: str | os.PathLike | None = None) -> Path:
    if state is not None:
        return Path(state)
    return Path(os.environ.get("QK_STATE", "/var/lib/quorumkeeper"))


def nodes_dir(state=None) -> Path:
    return state_root(state) / "nodes"


def list_pods(state=None) -> list[dict]:
    """Every pod.json of every node, with a `node` and `dir` key added."""
    out = []
    root = nodes_dir(state)
    if not root.is_dir():
        return out
    for node_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        pods = node_dir / "pods"
        if not pods.is_dir():
            continue
        for pod_dir in sorted(pods.iterdir()):
            f = pod_dir / "pod.json"
            try:
                data = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            data["node"] = node_dir.name
            data["dir"] = str(pod_dir)
            out.append(data)
    return out


def find_pod(namespace: str, name: str, state=None, wait_seconds: float = 10) -> dict:
    """The newest pod.json for namespace/name (a re-created pod has a new uid). A pod the API
    server already shows may take a moment to be found here (CI once missed the operator's pod,
    Running and ready, in one listing): looked for again for up to ``wait_seconds``."""
    deadline = time.monotonic() + wait_seconds
    while True:
        pods = list_pods(state)
        matches = [p for p in pods if p.get("namespace") == namespace and p.get("name") == name]
        if matches or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if not matches:
        known = sorted(p.get("name", "?") for p in pods if p.get("namespace") == namespace)
        raise FaultError(
            f"pod {namespace}/{name} is not known to any node agent under {nodes_dir(state)} "
            f"after {wait_seconds:.0f} s (pods of {namespace} there: {', '.join(known) or 'none'})"
            f"{_agent_log_lines(f'{namespace}/{name}', state)}"
        )
    matches.sort(key=lambda p: p.get("updatedAt", ""))
    return matches[-1]


def _agent_log_lines(needle: str, state=None, last: int = 8) -> str:
    """The node agents' last log lines that mention ``needle``: what they did with a pod that
    has no pod.json (the agent started by start_node logs to agent.log in its node directory,
    the one localcluster.py started to logs/nodeagent-<node>.log)."""
    logs = sorted(nodes_dir(state).glob("*/agent.log")) + sorted(
        (state_root(state) / "logs").glob("nodeagent-*.log")
    )
    found = []
    for log in logs:
        try:
            with open(log, errors="replace") as f:
                lines = [line.rstrip() for line in f if needle in line]
        except OSError:
            continue
        found += [f"{log.name if log.name != 'agent.log' else log.parent.name}: {line}"
                  for line in lines[-last:]]  # fmt: skip
    return "; the node agents' log about it:\n" + "\n".join(found) if found else ""


def _process_groups_of_pod(namespace: str, name: str, state=None) -> list[int]:
    """The process groups a node agent of this state started for a pod's containers (each
    container leads one), found by their standard output: the agent opens it on the container's
    log, ``<node>/pods/<namespace>_<name>_<uid>/logs/...``, before the process enters its own
    mount namespace, so the link reads the same from here even once the pod's directory is gone.
    Names cannot hold ``_``, so the prefix names one pod of one namespace; a pod of the same name
    under another state directory, or in another namespace, is not matched (CI killed a pod of
    the live cluster by a HOSTNAME that other pods could carry too)."""
    nodes = os.path.realpath(nodes_dir(state)) + os.sep
    wanted = f"{namespace}_{name}_"
    leaders = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if os.getpgid(pid) != pid:
                continue
            stdout = os.readlink(entry / "fd" / "1")
        except OSError:
            continue
        if not stdout.startswith(nodes):
            continue
        path = stdout[len(nodes) :].split(os.sep)  # <node>/pods/<pod dir>/logs/...
        a_pod_log = len(path) > 3 and path[1] == "pods" and path[3] == "logs"
        if a_pod_log and path[2].startswith(wanted) and _alive(pid):
            leaders.append(pid)
    return sorted(leaders)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    return bool(fields) and fields[0] not in ("Z", "X")


def crash_pod(namespace: str, name: str, container: str | None = None, state=None) -> list[int]:
    """SIGKILL the process group of the pod's containers (or of one container).

    Returns the pids that were signalled (empty when nothing was running: idempotent).
    """
    try:
        pod = find_pod(namespace, name, state)
    except FaultError as missing:
        # CI has twice seen a running pod without its pod.json for minutes after its node agent
        # was restarted (cause not yet found; the error says what the agents logged): its
        # processes are still there, found by the log each container writes to.
        leaders = [] if container is not None else _process_groups_of_pod(namespace, name, state)
        if not leaders:
            raise
        print(f"faults.crash_pod: {missing}\nkilling the pod's process groups {leaders} found "
              "by their container logs instead", file=sys.stderr)  # fmt: skip
        pod = {"containers": {f"pgid-{pgid}": pgid for pgid in leaders}}
    containers: dict = pod.get("containers") or {}
    if container is not None and container not in containers:
        raise FaultError(
            f"pod {namespace}/{name} has no container {container!r} (has: {', '.join(containers)})"
        )
    killed = []
    for cname, pid in containers.items():
        if container is not None and cname != container:
            continue
        if not pid or not _alive(int(pid)):
            continue
        pid = int(pid)
        for target in (-pid, pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGKILL)
        killed.append(pid)
    return killed


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(["ip", *args], text=True, capture_output=True)
    if check and res.returncode != 0:
        raise FaultError(f"ip {' '.join(args)}: {res.stderr.strip()}")
    return res


def _veth(namespace: str, name: str, state=None) -> str:
    pod = find_pod(namespace, name, state)
    if pod.get("hostNetwork"):
        raise FaultError(f"pod {namespace}/{name} uses the host network: it cannot be partitioned")
    veth = pod.get("hostVeth")
    if not veth or not Path(f"/sys/class/net/{veth}").exists():
        raise FaultError(f"pod {namespace}/{name} has no host veth ({veth!r}); is it running?")
    return veth


def partition_pod(namespace: str, name: str, state=None) -> str:
    """Cut the pod off the network both ways (host-side veth down). Returns the veth name."""
    veth = _veth(namespace, name, state)
    _ip("link", "set", veth, "down")
    return veth


def heal_pod(namespace: str, name: str, state=None) -> str:
    """Undo partition_pod (host-side veth up). Returns the veth name."""
    veth = _veth(namespace, name, state)
    _ip("link", "set", veth, "up")
    return veth


def is_partitioned(namespace: str, name: str, state=None) -> bool:
    veth = _veth(namespace, name, state)
    flags = Path(f"/sys/class/net/{veth}/flags").read_text().strip()
    return not (int(flags, 16) & 0x1)


def _node_dir(node: str, state=None) -> Path:
    d = nodes_dir(state) / node
    if not (d / "agent.cmdline").exists() and not (d / "agent.pid").exists():
        raise FaultError(f"node {node!r} is unknown: no agent.pid/agent.cmdline in {d}")
    return d


def _argv0(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return None


def _agent_pid(node_dir: Path) -> int | None:
    """The running agent: agent.pid, or else localcluster.py's record of it (a recycled pid
    that runs another program does not count)."""
    try:
        expected = json.loads((node_dir / "agent.cmdline").read_text())[0]
    except (OSError, ValueError, IndexError, KeyError, TypeError):
        expected = None
    for f in (node_dir / "agent.pid", node_dir.parent / f"nodeagent-{node_dir.name}" / "pid"):
        try:
            pid = int(f.read_text().strip())
        except (OSError, ValueError):
            continue
        if _alive(pid) and (expected is None or _argv0(pid) == str(expected)):
            return pid
    return None


def node_running(node: str, state=None) -> bool:
    return _agent_pid(_node_dir(node, state)) is not None


def stop_node(node: str, state=None, timeout: float = 30.0) -> bool:
    """SIGTERM the node's agent and wait for it to exit (SIGKILL after timeout).

    The agent leaves its pods running, like a stopped kubelet.
    Returns False when it was not running.
    """
    d = _node_dir(node, state)
    pid = _agent_pid(d)
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
        time.sleep(0.1)
    with contextlib.suppress(ChildProcessError):  # reap it if we happen to be its parent
        os.waitpid(pid, os.WNOHANG)
    return True


def start_node(node: str, state=None) -> int:
    """Re-spawn the node's agent from agent.cmdline (detached), rewrite agent.pid; returns the pid.

    When the agent is already running its pid is returned unchanged.
    """
    d = _node_dir(node, state)
    pid = _agent_pid(d)
    if pid is not None:
        return pid
    try:
        argv = json.loads((d / "agent.cmdline").read_text())
    except (OSError, ValueError) as e:
        raise FaultError(f"node {node!r}: cannot read {d / 'agent.cmdline'}: {e}") from e
    if not isinstance(argv, list) or not argv:
        raise FaultError(f"node {node!r}: agent.cmdline is not a JSON argv list")
    with open(d / "agent.log", "ab") as log, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(
            [str(a) for a in argv],
            stdin=devnull,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            cwd=str(d.parent),
        )
    (d / "agent.pid").write_text(str(proc.pid))
    # Keep localcluster.py's own supervision record in step, so that a later
    # `localcluster.py up` sees this agent as running instead of starting a second one.
    component_pid = d.parent / f"nodeagent-{node}" / "pid"
    if component_pid.exists():
        component_pid.write_text(str(proc.pid))
    # Popen returns once exec closed its close-on-exec pipe, a moment before the kernel sets the
    # new program's argv: until then /proc/PID/cmdline reads empty and the agent looks like
    # another program (node_running False, a second start_node starting a second agent).
    deadline = time.monotonic() + 5
    while _argv0(proc.pid) != str(argv[0]) and proc.poll() is None:
        if time.monotonic() > deadline:
            raise FaultError(f"node {node!r}: the agent started but never showed its argv")
        time.sleep(0.01)
    return proc.pid


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="fault injection for the quorumkeeper local cluster")
    ap.add_argument(
        "--state",
        default=None,
        help="QK_STATE directory (default $QK_STATE or /var/lib/quorumkeeper)",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("crash-pod")
    p.add_argument("namespace")
    p.add_argument("name")
    p.add_argument("--container")
    for c in ("partition-pod", "heal-pod"):
        p = sub.add_parser(c)
        p.add_argument("namespace")
        p.add_argument("name")
    for c in ("stop-node", "start-node"):
        p = sub.add_parser(c)
        p.add_argument("node")
    sub.add_parser("list")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "crash-pod":
            pids = crash_pod(a.namespace, a.name, a.container, state=a.state)
            print(f"killed {pids}" if pids else "nothing running")
        elif a.cmd == "partition-pod":
            veth = partition_pod(a.namespace, a.name, state=a.state)
            print(f"partitioned {a.namespace}/{a.name} ({veth} down)")
        elif a.cmd == "heal-pod":
            veth = heal_pod(a.namespace, a.name, state=a.state)
            print(f"healed {a.namespace}/{a.name} ({veth} up)")
        elif a.cmd == "stop-node":
            print("stopped" if stop_node(a.node, state=a.state) else "was not running")
        elif a.cmd == "start-node":
            print(f"running, pid {start_node(a.node, state=a.state)}")
        elif a.cmd == "list":
            for pod in list_pods(a.state):
                key = f"{pod['namespace']}/{pod['name']}"
                print(f"{pod['node']}\t{key}\t{pod.get('podIP', '')}\t{pod.get('containers')}")
            root = nodes_dir(a.state)
            for d in sorted(root.iterdir()) if root.is_dir() else []:
                if (d / "agent.cmdline").exists():
                    pid = _agent_pid(d)
                    print(f"agent {d.name}: {f'running pid {pid}' if pid else 'stopped'}")
    except FaultError as e:
        print(f"faults.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main())
