"""Real etcd clusters on 127.0.0.1 for the module tests, and a runner for Ansible modules."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

import warm_ansible  # noqa: E402
from freeports import free_port  # noqa: E402,F401 - the harness's callers use etcdharness.free_port

QK_CACHE = Path(os.environ.get("QK_CACHE", Path.home() / ".cache" / "quorumkeeper"))

# version -> candidate binaries, first existing wins
ETCD_VERSIONS = {
    "3.4.23": [QK_CACHE / "bin/etcd-v3.4.23/etcd", Path("/usr/bin/etcd")],
    "3.5.35": [QK_CACHE / "bin/etcd-v3.5.35/etcd"],
    "3.6.16": [QK_CACHE / "bin/etcd-v3.6.16/etcd"],
}
ALWAYS_REQUIRED = {"3.4.23"}


def etcd_binary(version):
    for cand in ETCD_VERSIONS[version]:
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    return None


def versions_to_test():
    """Versions whose tests are generated. Missing 3.5/3.6 are dropped unless required."""
    require_all = os.environ.get("QK_REQUIRE_ALL_ETCD") == "1"
    out = []
    for v in ETCD_VERSIONS:
        if etcd_binary(v) is not None or require_all or v in ALWAYS_REQUIRED:
            out.append(v)
    return out


@functools.cache
def binary_version(path):
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30)
    m = re.search(r"etcd Version:\s*(\S+)", out.stdout)
    return m.group(1) if m else None


def snapshot_status(etcd_version, path):
    """What etcd's own tool (etcdutl; etcdctl on 3.4, which has no etcdutl) reads from a snapshot
    file: it checks the file's integrity hash."""
    bin_dir = etcd_binary(etcd_version).parent
    tool = bin_dir / "etcdutl" if (bin_dir / "etcdutl").exists() else bin_dir / "etcdctl"
    out = subprocess.run(
        [str(tool), "snapshot", "status", str(path), "--write-out=json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    return json.loads(out.stdout)


def http_json(url, timeout=2.0, context=None):
    with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:  # noqa: S310 - loopback test URL
        return json.loads(resp.read().decode())


@dataclasses.dataclass(frozen=True)
class ClientTLS:
    """PEM files for members that serve their clients with TLS and require a client
    certificate (``--client-cert-auth``), with a client certificate the CA signed: the
    harness's own health checks present it."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def member_flags(self):
        return [
            "--cert-file",
            str(self.server_cert),
            "--key-file",
            str(self.server_key),
            "--trusted-ca-file",
            str(self.ca),
            "--client-cert-auth",
        ]

    def ssl_context(self):
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


def _threads_not_stopped(pid) -> list[str]:
    """The threads of ``pid`` whose state (/proc/<pid>/task/<tid>/stat) is not T (stopped)."""
    running = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            # The state follows the command name, which is in parentheses and may hold spaces.
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # a thread that exited
        if state not in ("T", "t"):
            running.append(f"{stat.parent.name}:{state}")
    return running


class EtcdNode:
    def __init__(self, name, base, scheme="http"):
        self.name = name
        self.scheme = scheme
        self.client_port = free_port()
        self.peer_port = free_port()
        # What the member advertises to clients; None: where it listens.
        self.advertise_client_url = None
        self.data_dir = base / f"{name}.etcd"
        self.log_path = base / f"{name}.log"
        self.proc = None

    @property
    def client_url(self):
        return f"{self.scheme}://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self):
        return f"http://127.0.0.1:{self.peer_port}"

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n=30):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


class EtcdCluster:
    def __init__(self, binary, version, base, tls=None, flags=()):
        """``tls``: a ClientTLS for members that serve clients on https:// only (the peers
        stay on plain http); ``flags``: more etcd flags for every member."""
        self.flags = list(flags)
        self.binary = Path(binary)
        self.version = version
        self.tls = tls
        self._client_ssl = tls.ssl_context() if tls else None
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.token = f"qk-{os.getpid()}-{id(self)}"
        self.nodes: dict[str, EtcdNode] = {}

    # -- process control ------------------------------------------------------------------------
    def _spawn(self, node, initial_cluster, state):
        args = [
            str(self.binary),
            "--name",
            node.name,
            "--data-dir",
            str(node.data_dir),
            "--listen-client-urls",
            node.client_url,
            "--advertise-client-urls",
            node.advertise_client_url or node.client_url,
            "--listen-peer-urls",
            node.peer_url,
            "--initial-advertise-peer-urls",
            node.peer_url,
            "--initial-cluster",
            initial_cluster,
            "--initial-cluster-state",
            state,
            "--initial-cluster-token",
            self.token,
            "--logger",
            "zap",
            "--log-level",
            "info",
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
        ]
        if self.tls:
            args += self.tls.member_flags()
        args += self.flags
        log = open(node.log_path, "ab")  # noqa: SIM115 - closed with the process
        node.proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def start(self, n=3, prefix="n", advertise_client_url=None):
        """``advertise_client_url(node)``, when given, is what each member advertises."""
        names = [f"{prefix}{i}" for i in range(n)]
        for name in names:
            self.nodes[name] = self._node(name)
            if advertise_client_url:
                self.nodes[name].advertise_client_url = advertise_client_url(self.nodes[name])
        initial = ",".join(f"{nm}={self.nodes[nm].peer_url}" for nm in names)
        for name in names:
            self._spawn(self.nodes[name], initial, "new")
        for name in names:
            self.wait_healthy(name)
        return self

    def join(self, name, initial_cluster, node=None):
        """Start a member that was added with MemberAdd (``--initial-cluster-state existing``)."""
        node = node or self.nodes[name]
        self._spawn(node, initial_cluster, "existing")
        self.wait_serving(name)
        return node

    def new_node(self, name):
        node = self._node(name)
        self.nodes[name] = node
        return node

    def _node(self, name):
        return EtcdNode(name, self.base, "https" if self.tls else "http")

    def stop(self, name):
        node = self.nodes[name]
        if node.running():
            os.killpg(node.proc.pid, signal.SIGKILL)
            node.proc.wait(timeout=30)

    def freeze(self, name, timeout=10.0):
        """SIGSTOP member ``name`` and wait until every thread of it has stopped: the signal
        takes effect only when the kernel next schedules one of its threads, and on a busy
        machine a request arriving first was answered by the member that was meant to hang
        (CI: a "hung" member answered /health healthy)."""
        pid = self.nodes[name].proc.pid
        os.killpg(pid, signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while (running := _threads_not_stopped(pid)) and time.monotonic() < deadline:
            time.sleep(0.01)
        if running:
            raise TimeoutError(f"member {name} (pid {pid}) not stopped after {timeout}s: {running}")

    def thaw(self, name):
        os.killpg(self.nodes[name].proc.pid, signal.SIGCONT)

    def teardown(self):
        for node in self.nodes.values():
            if node.running():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGKILL)
                node.proc.wait(timeout=30)

    def remove_data(self):
        shutil.rmtree(self.base, ignore_errors=True)

    # -- waiting -------------------------------------------------------------------------------
    def _wait(self, name, check, what, timeout=30.0):
        node = self.nodes[name]
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if not node.running():
                raise RuntimeError(
                    f"etcd {self.version} member {name} exited ({node.proc.returncode}) "
                    f"while waiting for {what}:\n{node.log_tail()}"
                )
            try:
                if check(node):
                    return
            except Exception as exc:  # noqa: BLE001 - keep polling until the deadline
                last = exc
            time.sleep(0.1)
        raise TimeoutError(
            f"etcd {self.version} member {name} not {what} after {timeout}s (last error: "
            f"{last}):\n{node.log_tail()}"
        )

    def _reports_healthy(self, node) -> bool:
        """What the member's /health says (a 503 from 3.5 on when it is not healthy)."""
        try:
            health = http_json(node.client_url + "/health", context=self._client_ssl)
        except urllib.error.HTTPError as exc:
            if exc.code != 503:
                raise
            return False
        return health.get("health") == "true"

    def wait_healthy(self, name, timeout=30.0):
        self._wait(name, self._reports_healthy, "healthy", timeout)

    def wait_leaderless(self, name, timeout=30.0):
        """Until member ``name`` says it is not healthy: after the others were stopped, a
        leader keeps leading until its election timeout has passed without a quorum's answers
        (etcd's check-quorum), and a status asked for before then still names it."""
        self._wait(name, lambda node: not self._reports_healthy(node), "without a leader", timeout)

    def stop_and_wait_for_leader(self, name, timeout=30.0):
        """Stop a member, then wait until every other running member is healthy again: the
        stopped one may have been the leader, and until an election ends etcd reports no leader
        (a caller asserting on a healthy cluster right after the stop would race it)."""
        self.stop(name)
        for other, node in self.nodes.items():
            if other != name and node.running():
                self.wait_healthy(other, timeout)

    def wait_serving(self, name, timeout=30.0):
        self._wait(
            name,
            lambda n: (
                "etcdserver" in http_json(n.client_url + "/version", context=self._client_ssl)
            ),
            "up",
            timeout,
        )

    # -- views ---------------------------------------------------------------------------------
    def endpoints(self, names=None):
        names = names or list(self.nodes)
        return [self.nodes[n].client_url for n in names]

    def running_endpoints(self):
        return [n.client_url for n in self.nodes.values() if n.running()]


# ---------------------------------------------------------------------------------------------
# Running modules the way Ansible does
# ---------------------------------------------------------------------------------------------


def ansible_env(tmp_home, action_plugins=True):
    """Ansible configured like the operator image (the project's ansible.cfg); without
    action_plugins, k8s_status, k8s_event and requeue_after run as the modules in library/
    instead of in-process."""
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
        ANSIBLE_HOME=str(tmp_home),
        ANSIBLE_LOCAL_TEMP=str(Path(tmp_home) / "tmp"),
        ANSIBLE_REMOTE_TEMP=str(Path(tmp_home) / "remote_tmp"),
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
    )
    if not action_plugins:
        # An action plugin path without our plugins (the environment overrides ansible.cfg).
        env["ANSIBLE_ACTION_PLUGINS"] = str(Path(tmp_home) / "no-action-plugins")
    return env


@functools.cache
def warm_ansible_home(action_plugins: bool) -> Path:
    """The ansible home of this process's warm runs with or without the action plugins."""
    home = tempfile.mkdtemp(prefix=f"qk-ansible-home-{int(action_plugins)}-")
    atexit.register(shutil.rmtree, home, True)
    return Path(home)


def ansible_bin(name="ansible"):
    cand = Path(sys.executable).parent / name
    return str(cand) if cand.exists() else shutil.which(name)


class ModuleRunner:
    """``ansible localhost -m <module> -a '<json>'`` with the json callback; returns the result.

    Run by a fork of a warm ansible (warm_ansible.py: the controller's start-up paid once per
    pytest process, the module still a process of its own), whose state is in one ansible home
    per configuration; ``tmp_home`` is the home of a cold run (QK_WARM_ANSIBLE=0, or an
    environment the warm one was not started with)."""

    def __init__(self, tmp_home, action_plugins=True):
        self.tmp_home = Path(tmp_home)
        self.action_plugins = action_plugins
        self.tmp_home.mkdir(parents=True, exist_ok=True)
        self.calls = []

    def __call__(self, module, args, check=False, timeout=180):
        cmd = [ansible_bin(), "localhost", "-m", module, "-a", json.dumps(args)]
        if check:
            cmd.append("--check")
        t0 = time.monotonic()
        proc = None
        if warm_ansible.enabled():
            home = warm_ansible_home(self.action_plugins)
            env = ansible_env(home, self.action_plugins)
            server = warm_ansible.WarmAnsible.for_home(home, env)
            proc = server.run(cmd, env, cwd=str(REPO), timeout=timeout)
        if proc is None:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=ansible_env(self.tmp_home, self.action_plugins),
                cwd=str(REPO),
            )
        self.calls.append((module, time.monotonic() - t0))
        try:
            data = json.loads(proc.stdout)
            result = data["plays"][0]["tasks"][0]["hosts"]["localhost"]
        except (ValueError, KeyError, IndexError) as exc:
            raise AssertionError(
                f"could not parse ansible output ({exc}); rc={proc.returncode}\n"
                f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
            ) from exc
        result.setdefault("failed", False)
        return result
