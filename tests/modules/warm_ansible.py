"""``ansible localhost -m MODULE`` for the module tests, forked from a process that has imported
ansible and loaded its plugins once.

Why: the module tests run about 660 such commands per suite, and a cold ``ansible`` spends
about 1 CPU-second of its own (imports, ansible's builtin routing YAML parsed, every callback,
connection and inventory plugin loaded) before the module's process starts: a quarter of the
suite's local lane. A fork of a warm process skips all of it; the module still runs as its own
process, built and started by ansible exactly as before.

The server (this file run as a script, one per pytest process and ansible configuration) does
what ``plugins/module_utils/qk_warm_start.py`` does for the operator's playbooks, in small: warm
up, then fork a child per request that takes the request's working directory, environment and
standard streams and runs ansible's own ad-hoc CLI. A request whose ansible settings differ from
the ones the server warmed up with (a test that sets an ANSIBLE_ variable) is answered ``cold``
and run by a real ``ansible`` instead. ``QK_WARM_ANSIBLE=0`` runs every command cold.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEADER = struct.Struct("!I")
START_TIMEOUT = 120.0
OWNER_CHECK_SECONDS = 2.0


def enabled() -> bool:
    return os.environ.get("QK_WARM_ANSIBLE", "1") != "0"


class WarmAnsible:
    """The client: one server per ansible environment (ModuleRunner's, which differs only by
    action_plugins), started on first use and stopped with the pytest process."""

    servers: dict[str, WarmAnsible] = {}

    def __init__(self, env: dict):
        self.directory = Path(tempfile.mkdtemp(prefix="qk-warm-ansible-"))
        self.socket_path = str(self.directory / "socket")
        log = self.directory / "server.log"
        with open(log, "wb") as errors:
            self.process = subprocess.Popen(
                [sys.executable, __file__, self.socket_path, str(os.getpid())],
                env=env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errors,
            )
        ready, _, _ = select.select([self.process.stdout], [], [], START_TIMEOUT)
        line = self.process.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            self.process.kill()
            self.process.wait(timeout=30)
            raise RuntimeError(
                f"the warm ansible server did not start ({line!r}):\n{log.read_text()[-4000:]}"
            )
        atexit.register(self.stop)

    @classmethod
    def for_home(cls, home: Path, env: dict) -> WarmAnsible:
        server = cls.servers.get(str(home))
        if server is None or server.process.poll() is not None:
            server = cls.servers[str(home)] = cls(env)
        return server

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
        shutil.rmtree(self.directory, ignore_errors=True)

    def run(self, argv: list[str], env: dict, cwd: str, timeout: float):
        """Like ``subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
        timeout=timeout)``; None when the server says this environment must run cold."""
        deadline = time.monotonic() + timeout
        request = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
        with (
            tempfile.TemporaryFile() as out,
            tempfile.TemporaryFile() as err,
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn,
        ):
            conn.settimeout(timeout)
            conn.connect(self.socket_path)
            socket.send_fds(conn, [HEADER.pack(len(request))], [out.fileno(), err.fileno()])
            conn.sendall(request)
            replies, pid, code = conn.makefile("rb"), None, None
            try:
                for line in replies:
                    word, _, value = line.decode().strip().partition(" ")
                    if word == "cold":
                        return None
                    if word == "pid":
                        pid = int(value)
                    elif word == "exit":
                        code = int(value)
                        break
                    conn.settimeout(max(deadline - time.monotonic(), 0.01))
            except TimeoutError:
                if pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(argv, timeout, read(out), read(err)) from None
            # No exit line: the child died without reporting (killed, say).
            return subprocess.CompletedProcess(
                argv, -1 if code is None else code, read(out), read(err)
            )


def read(stream) -> str:
    stream.seek(0)
    return stream.read().decode(errors="replace")


# ----------------------------------------------------------------------------- the server


def warm_up() -> dict:
    """Import ansible's ad-hoc CLI and load what each run loads before its module starts; the
    settings it was loaded with."""
    from ansible import constants
    from ansible.cli.adhoc import AdHocCLI  # noqa: F401 - what each child runs
    from ansible.executor import task_executor, task_queue_manager  # noqa: F401
    from ansible.plugins import loader

    # Each child's CLI configures the collection loader again, with the same paths (compared).
    warnings.filterwarnings("ignore", "AnsibleCollectionFinder has already been configured")
    loader.init_plugin_loader(constants.COLLECTIONS_PATHS)
    for plugin_loader in (
        loader.connection_loader,
        loader.shell_loader,
        loader.become_loader,
        loader.vars_loader,
        loader.callback_loader,
        loader.action_loader,
    ):
        list(plugin_loader.all(class_only=True))
    for name in constants.INVENTORY_ENABLED:
        loader.inventory_loader.get(name, class_only=True)
    loader.strategy_loader.get(constants.DEFAULT_STRATEGY, class_only=True)
    # Importable only now, through the collection loader (as the operator's warm start is).
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils import qk_warm_start

    return qk_warm_start.configuration_values(constants)


def receive_request(conn: socket.socket) -> tuple[dict, list[int]]:
    header, fds, _, _ = socket.recv_fds(conn, HEADER.size, 2)
    (size,) = HEADER.unpack(header)
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("request cut short")
        body += chunk
    return json.loads(body), fds


def run_child(conn: socket.socket, warm: dict) -> None:
    """In the forked child: the request's streams, directory and environment, then ansible's
    CLI. Never returns."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # ansible waits for its workers
        os.setpgid(0, 0)  # a timeout kills the module's processes with it
        atexit._clear()
        request, (out, err) = receive_request(conn)
        from ansible.cli.adhoc import AdHocCLI
        from ansible_collections.quorumkeeper.etcd.plugins.module_utils import qk_warm_start

        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # The run's own settings and a temporary directory of its own (removed at its exit, as
        # a new ansible has), the operator's warm start's rule; other settings run cold.
        if qk_warm_start.adopt_run_configuration(warm):
            conn.sendall(b"cold\n")
            os._exit(0)
        conn.sendall(f"pid {os.getpid()}\n".encode())
        os.dup2(out, 1)
        os.dup2(err, 2)
        AdHocCLI.cli_executor(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported on stderr like an interpreter would
        import traceback

        traceback.print_exc()
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(OSError):
        conn.sendall(f"exit {code}\n".encode())
    os._exit(code)


def serve(socket_path: str, owner: int) -> None:
    warm = warm_up()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        ready, _, _ = select.select([listener], [], [], OWNER_CHECK_SECONDS)
        if os.getppid() != owner:
            return
        if not ready:
            continue
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            run_child(conn, warm)
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
