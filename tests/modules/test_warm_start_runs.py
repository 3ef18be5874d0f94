"""Warm start for real: bin/ansible-runner invoked the way ansible-operator invokes it (same
arguments, an input directory laid out as ansible-operator writes it, events posted to an HTTP
receiver on a Unix socket), cold and warm, with modules run by bin/module-python.

A warm run must be indistinguishable from a cold one to ansible-operator (exit status, every
event in order, the requeue_after result, artifacts), and must really be warm: its playbook and
modules forked from the server (QK_WARM_START_SERVER in their environment, ansible's CLI already
imported in the module's process). Each test gets its own server (QK_WARM_START_SOCKET)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_warm_start import (
    RUN_GC_THRESHOLDS,
)

REPO = Path(__file__).resolve().parents[2]
SERVER_SCRIPT = "qk_warm_start.py"

PROBE_MODULE = '''#!/usr/bin/python
"""Says whether it runs in a fork of the warm-start server."""
import gc
import os
import sys

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    boto3_before = "boto3" in sys.modules
    if os.environ.get("PROBE_IMPORT_BOTO3") == "1":
        import boto3  # noqa: F401 - as an object store's module imports it when it uses it
    module.exit_json(
        changed=False,
        warm="ansible.cli.playbook" in sys.modules,
        server=os.environ.get("QK_WARM_START_SERVER", ""),
        boto3_before=boto3_before,
        name=open("/proc/self/comm").read().strip(),
        gc_threshold=list(gc.get_threshold()),
    )


if __name__ == "__main__":
    main()
'''

PLAYBOOK = """---
- name: Probe
  hosts: localhost
  gather_facts: false
  vars:
    ansible_python_interpreter: >-
      {{ lookup('ansible.builtin.env', 'QK_MODULE_PYTHON')
         | default(ansible_playbook_python, true) }}
  tasks:
    - name: Use a filter of the operator
      ansible.builtin.set_fact:
        probe_minor: "{{ '3.6.16' | etcd_minor }}"
    - name: Run a module of the operator's library
      warm_probe:
      register: probe_module
    - name: Run a module of ansible's
      ansible.builtin.command: echo from-a-builtin-module
      changed_when: false
      register: probe_command
    - name: Say what ran where
      ansible.builtin.debug:
        msg: >-
          minor={{ probe_minor }} playbook-server={{ lookup('ansible.builtin.env',
          'QK_WARM_START_SERVER') }} module-warm={{ probe_module.warm }}
          module-server={{ probe_module.server }} command={{ probe_command.stdout }}
    - name: Fail when asked to
      ansible.builtin.fail:
        msg: asked to fail
      when: lookup('ansible.builtin.env', 'PROBE_FAIL') == '1'
    - name: Requeue
      requeue_after:
        period: 7s
"""


class Receiver:
    """ansible-operator's event receiver: an HTTP server on a Unix socket keeping every POST."""

    def __init__(self, path: Path):
        self.path = path
        self.bodies: list[dict] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as Go's net/http

            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers["Content-Length"])
                receiver.bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

            def get_request(self):
                request, _ = self.socket.accept()
                return request, ("local", 0)

        self.server = Server(str(path), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[tuple[str, str]]:
        return [
            (b.get("event"), (b.get("event_data") or {}).get("task", ""))
            for b in self.bodies
            if "event" in b
        ]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def warm_setup(tmp_path, request):
    """An operator-like tree (ansible.cfg, library, playbook), an input directory, a receiver,
    and the environment ansible-operator would run bin/ansible-runner with. Parametrized
    indirectly with True: ansible pipelines the modules' scripts, as the operator's ansible.cfg
    says (the script on the interpreter's standard input, no file)."""
    pipelining = getattr(request, "param", False)
    tree = tmp_path / "opt-ansible"
    (tree / "library").mkdir(parents=True)
    (tree / "library" / "warm_probe.py").write_text(PROBE_MODULE)
    (tree / "playbooks").mkdir()
    (tree / "playbooks" / "probe.yml").write_text(PLAYBOOK)
    (tree / "ansible.cfg").write_text(
        "[defaults]\n"
        "library = ./library\n"
        f"filter_plugins = {REPO}/plugins/filter\n"
        f"action_plugins = {REPO}/plugins/action\n"
        f"collections_path = {REPO}/collections\n"
        + ("[connection]\npipelining = True\n" if pipelining else "")
    )
    receiver = Receiver(tmp_path / "events.sock")
    private = tmp_path / "runner"
    (private / "env").mkdir(parents=True)
    (private / "inventory").mkdir()
    (private / "inventory" / "hosts").write_text(
        "localhost ansible_connection=local ansible_python_interpreter={{ansible_playbook_python}}"
    )
    (private / "env" / "extravars").write_text("{}")
    (private / "env" / "settings").write_text(
        json.dumps({"runner_http_url": str(receiver.path), "runner_http_path": "/events"})
    )
    name = f"quorumkeeper-warm-start-test-{uuid.uuid4().hex[:8]}"
    env = dict(
        os.environ,
        PATH=f"{REPO / 'bin'}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        ANSIBLE_CONFIG=str(tree / "ansible.cfg"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_REMOTE_TEMP=str(tmp_path / "module-tmp"),
        ANSIBLE_GATHERING="explicit",
        QK_WARM_START_SOCKET=name,
        QK_MODULE_PYTHON=str(REPO / "bin" / "module-python"),
    )
    setup = {
        "tree": tree,
        "private": private,
        "receiver": receiver,
        "env": env,
        "name": name,
        "pipelining": pipelining,
        "module_tmp": tmp_path / "module-tmp",
    }
    yield setup
    receiver.close()
    for pid in server_pids(name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 15)


def server_pids(name: str) -> list[int]:
    """The servers of this test: processes of the server script whose environment names socket
    ``name``, not counting the children they forked (same command line)."""
    parents = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if SERVER_SCRIPT.encode() in cmdline and f"QK_WARM_START_SOCKET={name}".encode() in environ:
            parents[int(proc.name)] = parent
    return [pid for pid, parent in parents.items() if parent not in parents]


def wait_for_server(name: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect("\0" + name)
                return
            except OSError:
                time.sleep(0.1)
    raise AssertionError(f"no warm-start server on {name} after {timeout} s")


def run(setup: dict, ident: str, **env) -> dict:
    """One reconcile's ansible-runner, as ansible-operator starts it."""
    receiver = setup["receiver"]
    receiver.bodies.clear()
    result = subprocess.run(
        [
            "ansible-runner",
            "run",
            str(setup["private"]),
            "--rotate-artifacts",
            "20",
            "-p",
            str(setup["tree"] / "playbooks" / "probe.yml"),
            "-i",
            ident,
            "-vv",
        ],
        env={**setup["env"], **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    artifacts = setup["private"] / "artifacts" / ident
    # The last event is posted before ansible-runner exits; the receiver may still be storing it.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(
        b.get("status") in ("successful", "failed") for b in receiver.bodies
    ):
        time.sleep(0.05)
    messages = [
        b["event_data"]["res"]["msg"]
        for b in receiver.bodies
        if b.get("event") == "runner_on_ok" and b["event_data"].get("task") == "Say what ran where"
    ]
    requeue = [
        b["event_data"]["res"]
        for b in receiver.bodies
        if b.get("event") == "runner_on_ok"
        and b["event_data"].get("task_action") == "requeue_after"
    ]
    probe = [
        b["event_data"]["res"]
        for b in receiver.bodies
        if b.get("event") == "runner_on_ok"
        and b["event_data"].get("task") == "Run a module of the operator's library"
    ]
    return {
        "rc": result.returncode,
        "output": result.stdout + result.stderr,
        "probe": probe[0] if probe else {},
        "events": receiver.events(),
        "statuses": [b["status"] for b in receiver.bodies if "status" in b],
        "said": messages[0] if messages else "",
        "requeue": requeue,
        "artifact_status": (artifacts / "status").read_text(),
        "stdout": (artifacts / "stdout").read_text(),
    }


@pytest.mark.parametrize("warm_setup", [False, True], indirect=True, ids=["files", "pipelined"])
def test_warm_runs_report_what_a_cold_run_reports_and_really_are_warm(warm_setup):
    cold = run(warm_setup, "1", QK_WARM_START="0")
    assert cold["rc"] == 0, cold["output"]
    assert "playbook-server= module-warm=False module-server= " in cold["said"]
    assert not server_pids(warm_setup["name"])

    first = run(warm_setup, "2")  # starts the server, runs cold itself
    assert first["rc"] == 0, first["output"]
    # (its module may already run in the server, which warms up meanwhile)
    assert "playbook-server= module-warm=" in first["said"]
    wait_for_server(warm_setup["name"])
    (server,) = server_pids(warm_setup["name"])

    for ident in ("3", "4"):
        warm = run(warm_setup, ident)
        assert warm["rc"] == 0, warm["output"]
        assert warm["said"] == (
            f"minor=3.6 playbook-server={server} module-warm=True module-server={server} "
            "command=from-a-builtin-module"
        )
        assert warm["events"] == cold["events"]
        assert warm["statuses"] == cold["statuses"] == ["starting", "running", "successful"]
        assert warm["requeue"] == cold["requeue"]
        assert warm["requeue"][0]["period"] == "7s"
        assert warm["artifact_status"] == "successful"
        assert "PLAY RECAP" in warm["stdout"]
        assert warm["probe"]["name"] == "warm_probe"
        # A run's young objects are collected less often than a cold process's.
        assert warm["probe"]["gc_threshold"] == list(RUN_GC_THRESHOLDS)
        assert cold["probe"]["gc_threshold"] != list(RUN_GC_THRESHOLDS)
    # Pipelined, no module script was ever written to a file (ansible makes the directory for it).
    assert warm_setup["module_tmp"].exists() != warm_setup["pipelining"]


def test_a_failing_run_fails_the_same_way_warm(warm_setup):
    cold = run(warm_setup, "1", QK_WARM_START="0", PROBE_FAIL="1")
    run(warm_setup, "2")
    wait_for_server(warm_setup["name"])
    warm = run(warm_setup, "3", PROBE_FAIL="1")
    assert cold["rc"] == warm["rc"] == 2
    assert warm["events"] == cold["events"]
    assert ("runner_on_failed", "Fail when asked to") in warm["events"]
    assert warm["statuses"][-1] == cold["statuses"][-1] == "failed"
    assert warm["artifact_status"] == "failed"


def test_other_ansible_settings_run_a_real_ansible_playbook(warm_setup):
    run(warm_setup, "1")
    wait_for_server(warm_setup["name"])
    other = run(warm_setup, "2", ANSIBLE_FORKS="3")
    assert other["rc"] == 0, other["output"]
    assert "settings differ from the warm ones (DEFAULT_FORKS)" in other["stdout"]
    (server,) = server_pids(warm_setup["name"])
    # ansible-runner itself and the modules were still forked from the server.
    assert f"playbook-server={server} module-warm=True" in other["said"]


def test_what_a_module_imported_for_its_store_is_imported_by_the_server_for_the_next(warm_setup):
    """boto3 stays out of the server until a module uses it (an operator without S3 never pays
    its memory); after one has, the modules after it find it imported."""
    run(warm_setup, "1")
    wait_for_server(warm_setup["name"])
    plain = run(warm_setup, "2")
    assert plain["rc"] == 0, plain["output"]
    assert plain["probe"]["warm"] is True
    assert plain["probe"]["boto3_before"] is False

    first = run(warm_setup, "3", PROBE_IMPORT_BOTO3="1")
    assert first["rc"] == 0, first["output"]
    assert first["probe"]["warm"] is True
    assert first["probe"]["boto3_before"] is False
    # The server imports it between runs, once it has read the report: a later run finds it.
    deadline, ident, later = time.monotonic() + 30, 4, {}
    while time.monotonic() < deadline:
        later = run(warm_setup, str(ident))
        assert later["rc"] == 0, later["output"]
        if later["probe"]["boto3_before"]:
            break
        ident += 1
        time.sleep(0.2)
    assert later["probe"] == {**later["probe"], "warm": True, "boto3_before": True}
    assert later["events"] == plain["events"]


def test_a_changed_operator_file_retires_the_server(warm_setup):
    run(warm_setup, "1")
    wait_for_server(warm_setup["name"])
    (old,) = server_pids(warm_setup["name"])
    module = warm_setup["tree"] / "library" / "warm_probe.py"
    later = time.time() + 10
    os.utime(module, (later, later))

    changed = run(warm_setup, "2")  # the server says "cold" and stops taking runs
    assert changed["rc"] == 0, changed["output"]
    assert "playbook-server= " in changed["said"]
    deadline = time.monotonic() + 15
    while old in server_pids(warm_setup["name"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert old not in server_pids(warm_setup["name"])

    run(warm_setup, "3")  # no server: starts a new one
    wait_for_server(warm_setup["name"])
    (new,) = server_pids(warm_setup["name"])
    warm = run(warm_setup, "4")
    assert new != old
    assert f"playbook-server={new} module-warm=True" in warm["said"]


def test_the_server_leaves_with_the_process_that_started_it(warm_setup):
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; subprocess.run(sys.argv[1:]); time.sleep(3)",
            "ansible-runner",
            "run",
            str(warm_setup["private"]),
            "-p",
            str(warm_setup["tree"] / "playbooks" / "probe.yml"),
            "-i",
            "1",
        ],
        env=warm_setup["env"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_server(warm_setup["name"])
    assert server_pids(warm_setup["name"])
    owner.wait(timeout=120)
    deadline = time.monotonic() + 15
    while server_pids(warm_setup["name"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not server_pids(warm_setup["name"])


WARM_UP_PROBE = """
import json, os, sys
sys.path.insert(0, os.environ["SERVER_DIR"])
import qk_warm_start
from ansible import constants
server = qk_warm_start.WarmServer(owner=os.getpid(), log=sys.stderr)
server.warm_up()
print(json.dumps({
    "modules": sorted(m for m in sys.modules if m.startswith("ansible")),
    "defined": {kind: sorted(constants.config._plugins.get(kind, {}))
                for kind in ("connection", "shell", "become", "callback", "vars", "cache")},
    "cold": server.cold_reason or server.modules_cold,
}))
"""


def test_the_server_loads_the_plugins_every_run_loads_except_ansible_runners_callback(tmp_path):
    """What ansible's executor loads before a run's first task is in the server already (their
    sources executed, their settings defined), so that a forked run finds it; ansible-runner's
    callback, which reads the run's directory when imported, is not."""
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_HOME=str(tmp_path / "home"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        SERVER_DIR=str(REPO / "plugins" / "module_utils"),
    )
    probe = subprocess.run(
        [sys.executable, "-c", WARM_UP_PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    loaded = json.loads(probe.stdout.splitlines()[-1])
    assert not loaded["cold"]
    modules = set(loaded["modules"])
    for plugin in (
        "ansible.plugins.connection.local",
        "ansible.plugins.connection.ssh",
        "ansible.plugins.shell.sh",
        "ansible.plugins.become.sudo",
        "ansible.plugins.callback.default",
        "ansible.plugins.vars.host_group_vars",
        "ansible.plugins.cache.memory",
        "ansible_collections.ansible.builtin.plugins.lookup.env",
        "ansible.plugins.strategy.linear",
        "ansible_collections.quorumkeeper.etcd.plugins.strategy.linear_inline",
    ):
        assert plugin in modules, plugin
    assert not [m for m in modules if "awx_display" in m]
    assert "ssh" in loaded["defined"]["connection"] and "default" in loaded["defined"]["callback"]
