# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Warm start: every reconcile's ansible-runner and ansible-playbook forked from a warm process.

Why: ansible-operator runs ``ansible-runner`` for every reconcile, which runs ``ansible-playbook``
through a pseudo-terminal. Each is a new Python interpreter that imports ansible (0.3-0.5
CPU-seconds apiece on the 2-core machine the benchmarks run on), loads the filter and action
plugins, and compiles every Jinja2 template of the role from scratch; ansible then forks a worker
per task, and whatever a worker imports or compiles is thrown away with it, so the same plugins
are imported and the same templates compiled again for nearly every task. A reconcile that finds
nothing to do cost 4-5 CPU-seconds, most of it that start-up work done over and over.

What: one long-lived process per operator pod (this module, the *server*) imports ansible,
ansible-runner and the operator's plugins once, and keeps every template it has seen compiled.
``bin/ansible-runner`` (the *client*, first on the operator's PATH) hands its command line,
environment and standard streams to the server over a Unix socket; the server forks a child that
runs ansible-runner's own ``main()`` with them, in which the playbook is forked again (instead
of a new ``ansible-playbook`` process) and run by ansible's own CLI. The client exits with the
child's exit status. Nothing changes for ansible-operator: the same command, the same events
(sent over one kept-alive connection instead of a new HTTP session per event), the same
artifacts and exit status.

Safe by construction:
- Every fork starts from the server's pristine state; a child never returns to it.
- A run whose ansible configuration differs from the one the server warmed up with (another
  ANSIBLE_CONFIG, other plugin paths: anything but ansible-runner's per-run fact cache) is run
  by a real ``ansible-playbook`` instead, as is every run when the server cannot be reached.
- A template is compiled by Jinja2 exactly as before; the server only keeps the code of the
  ones its children compiled (they report them on a datagram socket), and never of a template
  whose constant parts Jinja2 could fold into a changing value (``random``, ``is file``, ...).
- Two of ansible's own steps give the same results more cheaply: a template's list or dict
  result is copied instead of printed and parsed back (TemplateResults), and the filter and
  test loaders remember their answer for each name (PluginLookups).
- When a file the server imported changes (a new operator version copied in place), the server
  stops taking runs and exits once its children are done; the next client starts a fresh one.
- The server exits when the process that started it (ansible-operator) is gone, and stays in
  its process group, so the container's stop takes it down too.

Run as ``python3 plugins/module_utils/qk_warm_start.py --owner PID`` (the client does): as a file,
not as a module of the collection, whose packages only ansible's collection loader may import.
``QK_WARM_START=0`` in the operator's environment turns it off.
"""

from __future__ import annotations

import argparse
import array
import atexit
import codecs
import contextlib
import errno
import gc
import http.client
import itertools
import json
import math
import os
import re
import select
import signal
import socket
import struct
import sys
import tempfile
import time
import types
import warnings

# One server per user and network namespace (the operator pod): an abstract socket leaves no
# file behind and cannot be bound twice, which settles clients racing to start one.
# QK_WARM_START_SOCKET names another one (tests that run beside each other).
SOCKET_PREFIX = "\0quorumkeeper-warm-start"
# Set in the environment of every run and module the server forks: which server ran it.
SERVER_VARIABLE = "QK_WARM_START_SERVER"
# Modules a server imports besides the operator's (import_preloaded).
PRELOAD_VARIABLE = "QK_WARM_START_PRELOAD"
# What a server says last, with the number of runs and modules it forked (runs_said).
STOPPED_AFTER = "stopped after"
# Client -> server: a 4-byte length, then the request as JSON, with the client's stdin, stdout
# and stderr attached (SCM_RIGHTS). Server -> client: COLD (run it yourself), or STARTED with
# the child's pid (for signals), then EXITED with its exit status.
COLD, STARTED, EXITED = b"C", b"P", b"X"
# What a client asks for: ansible-runner (bin/ansible-runner) or a module's AnsiballZ script run
# by the modules' interpreter (bin/module-python).
KINDS = ("runner", "module")
REQUEST_LIMIT = 4 << 20
# ansible-runner points each run's fact cache at its artifacts: the one setting that may differ.
RUN_SPECIFIC_SETTINGS = frozenset({"CACHE_PLUGIN_CONNECTION"})
# Jinja2 evaluates filters and tests on constants at compile time (calls of functions such as
# now() or lookup() it never does): a compiled template that folded one of these would keep the
# value of its first compile.
UNCACHEABLE_TEMPLATE = re.compile(
    r"\|\s*(random|shuffle|strftime|password_hash)\b"
    r"|\bis\s+(not\s+)?(exists|file|directory|link|mount|same_file)\b"
)
TEMPLATE_CACHE_LIMIT = 20000
# What modules import only when they use it (the object stores' clients: DeferredModule in
# qk_objectstore_transfer). A module run that imported one tells the server, which imports it
# too (learn_import), between runs: the runs after it find it imported. boto3 costs a module
# run about 0.3 CPU-s (its import and its first client), google-cloud-storage 0.2, and the
# server about 45 MiB each, paid only by an operator whose resources use that store.
LEARNED_IMPORTS = ("boto3", "google.cloud.storage")
OWNER_CHECK_SECONDS = 2.0
# A run's garbage collector: its youngest objects collected after 20,000 net allocations rather
# than Python's 700. A reconcile allocates and drops a few hundred thousand small containers (its
# tasks, variables and templates), and every collection walks the young ones still alive; a run
# lives a second or two, its objects mostly die young, and the heap it shares with the server is
# frozen (gc.freeze), so the older generations are rarely worth walking either. Measured: a
# reconcile with nothing to do about 0.015 CPU-s less, reconciles that take steps more
# (docs/reconcile-cost.md); the young generation holds a few MiB more at its fullest.
RUN_GC_THRESHOLDS = (20000, 20, 20)


def socket_name() -> str:
    named = os.environ.get("QK_WARM_START_SOCKET")
    return f"\0{named}" if named else f"{SOCKET_PREFIX}-{os.getuid()}"


# ----------------------------------------------------------------------------- wire format


def encode_request(kind: str, argv: list[str], cwd: str, env: dict) -> bytes:
    payload = json.dumps({"kind": kind, "argv": argv, "cwd": cwd, "env": env}).encode()
    return struct.pack("!I", len(payload)) + payload


def receive_request(conn: socket.socket, timeout: float = 5.0) -> tuple[dict, list[int]]:
    """The request and the descriptors sent with it (closed here if the request is bad)."""
    conn.settimeout(timeout)
    fds: list[int] = []
    data = b""
    try:
        while len(data) < 4 or len(data) < 4 + struct.unpack("!I", data[:4])[0]:
            chunk, ancillary, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(3 * 4))
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    received = array.array("i")
                    received.frombytes(payload[: len(payload) - len(payload) % 4])
                    fds.extend(received)
            if not chunk:
                raise ValueError("the client closed the connection mid-request")
            data += chunk
            if len(data) > REQUEST_LIMIT:
                raise ValueError("request too large")
        request = json.loads(data[4:])
        if len(fds) != 3 or request.get("kind") not in KINDS or not request.get("argv"):
            raise ValueError("not a request this server takes")
        return request, fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    finally:
        conn.settimeout(None)


def runs_said(log: str) -> list[int]:
    """The number of runs each server that logged to ``log`` said it forked when it stopped."""
    said = re.findall(rf"quorumkeeper warm start \[\d+\]: {STOPPED_AFTER} (\d+) runs", log)
    return [int(count) for count in said]


def exit_code(status: int) -> int:
    """A wait status as a shell reports it: the exit code, or 128 + the signal."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


# ----------------------------------------------------------------------------- template cache


def template_cache_key(environment, source, name, filename, raw, defer_init):
    """Everything Jinja2's lexer and code generator read from the environment, and the call."""
    finalize = environment.finalize
    return (
        type(environment).__name__,
        environment.block_start_string,
        environment.block_end_string,
        environment.variable_start_string,
        environment.variable_end_string,
        environment.comment_start_string,
        environment.comment_end_string,
        environment.line_statement_prefix,
        environment.line_comment_prefix,
        environment.trim_blocks,
        environment.lstrip_blocks,
        environment.newline_sequence,
        environment.keep_trailing_newline,
        environment.optimized,
        environment.is_async,
        None if finalize is None else getattr(finalize, "__qualname__", repr(finalize)),
        repr(environment.autoescape),
        tuple(sorted(environment.extensions)),
        source,
        name,
        filename,
        raw,
        defer_init,
    )


def cacheable_template(source) -> bool:
    return isinstance(source, str) and not UNCACHEABLE_TEMPLATE.search(source)


class TemplateCache:
    """Jinja2's ``Environment.compile``, remembered per template and environment settings.

    Installed in the server before any fork: a child finds every template the server holds
    already compiled, and reports the ones it had to compile (``learn``) so that the server
    compiles them too, between runs, for the children after it.
    """

    def __init__(self, learn_socket: socket.socket | None = None):
        self.code: dict = {}
        self.learn_socket = learn_socket
        self.server_pid = os.getpid()
        self.original = None

    def install(self) -> None:
        import jinja2

        self.original = jinja2.Environment.compile
        cache = self

        def compile(environment, source, name=None, filename=None, raw=False, defer_init=False):
            if not cacheable_template(source):
                return cache.original(environment, source, name, filename, raw, defer_init)
            key = template_cache_key(environment, source, name, filename, raw, defer_init)
            code = cache.code.get(key)
            if code is None:
                code = cache.original(environment, source, name, filename, raw, defer_init)
                if len(cache.code) < TEMPLATE_CACHE_LIMIT:
                    cache.code[key] = code
                if os.getpid() != cache.server_pid:
                    cache.report(source, name, filename, raw, defer_init)
            return code

        jinja2.Environment.compile = compile

    def uninstall(self) -> None:
        import jinja2

        if self.original is not None:
            jinja2.Environment.compile = self.original
            self.original = None

    def report(self, source, name, filename, raw, defer_init) -> None:
        if self.learn_socket is None:
            return
        message = json.dumps([source, name, filename, raw, defer_init]).encode()
        # A full socket or an oversized template only means this one is compiled again later.
        with contextlib.suppress(OSError):
            self.learn_socket.send(message, socket.MSG_DONTWAIT)

    def learn(self, environment, message: bytes) -> bool:
        """Compile a template a child reported, in ``environment`` (the server's own): True if
        it was new."""
        source, name, filename, raw, defer_init = json.loads(message)
        key = template_cache_key(environment, source, name, filename, raw, defer_init)
        if key in self.code or not cacheable_template(source):
            return False
        with contextlib.suppress(Exception):  # a template that does not compile stays uncached
            environment.compile(source, name, filename, raw, defer_init)
        return key in self.code


# ----------------------------------------------------------------------------- template results


class NotPlainData(Exception):
    """A value whose round trip through text (ansible_eval_concat) is not a plain copy."""


# Deeper than this, Python's parser may refuse the text (the round trip then gives the text).
PLAIN_DEPTH_LIMIT = 100


class TemplateResults:
    """ansible's ``ansible_eval_concat`` without its round trip through text for plain data.

    Without jinja2_native, ansible-core 2.18 turns a template's single result into text and,
    when the text looks like a list or a dict, parses it back (``repr``, ``ast.parse`` and
    three walks over the syntax tree in Python). A role variable that names a dict pays that
    at every use: about 8 ms for a 3-member cluster's observation, which the plan task reads
    three times. For a list or dict of strings, numbers, booleans, None and tuples the round
    trip is a copy, with every string marked unsafe when one was (``wrap_var``): that copy is
    made directly (about a hundredth of the time). Any other value (a set, a float that is not
    finite, an object, a recursive or very deep structure) takes ansible's own path, as does
    every result that is not one list or dict.
    """

    def __init__(self):
        from ansible.parsing.yaml.objects import AnsibleMapping, AnsibleSequence, AnsibleUnicode
        from ansible.utils.native_jinja import NativeJinjaText
        from ansible.utils.unsafe_proxy import AnsibleUnsafeText, NativeJinjaUnsafeText

        # Types whose text is that of a plain str, dict or list (their repr is the plain one,
        # or AnsibleUnsafeText's, which is the same text).
        self.string_types = {
            str,
            AnsibleUnicode,
            AnsibleUnsafeText,
            NativeJinjaText,
            NativeJinjaUnsafeText,
        }
        self.dict_types = {dict, AnsibleMapping}
        self.list_types = {list, AnsibleSequence}
        # A tuple's text starts with "(": ansible returns that text, not a tuple.
        self.containers = self.dict_types | self.list_types
        self.unsafe_text = AnsibleUnsafeText
        self.original = None

    def copy(self, value, depth: int = 0) -> tuple[object, bool]:
        """``(copy, unsafe)``: the round trip's result before ``wrap_var``, and whether a
        string in it was unsafe; NotPlainData when the round trip would give anything else."""
        kind = type(value)
        if kind in self.string_types:
            return str.__str__(value), getattr(value, "__UNSAFE__", False)
        if value is None or kind is bool or kind is int:
            return value, False
        if kind is float:
            if math.isfinite(value):
                return value, False
            raise NotPlainData(value)
        if depth > PLAIN_DEPTH_LIMIT:
            raise NotPlainData("too deep")
        unsafe = False
        if kind in self.dict_types:
            result = {}
            for key, item in value.items():
                key, key_unsafe = self.copy(key, depth + 1)
                item, item_unsafe = self.copy(item, depth + 1)
                result[key] = item
                unsafe = unsafe or key_unsafe or item_unsafe
            return result, unsafe
        if kind in self.list_types or kind is tuple:
            items = []
            for item in value:
                item, item_unsafe = self.copy(item, depth + 1)
                items.append(item)
                unsafe = unsafe or item_unsafe
            return (items if kind is not tuple else tuple(items)), unsafe
        raise NotPlainData(kind)

    def unsafe(self, value):
        """``wrap_var(value)`` for what ``copy`` returns (dicts, lists, tuples, plain strings,
        numbers, booleans, None): the same types, without ansible's checks of every value
        against its abstract base classes. The reconciled object's strings are unsafe
        (linear_inline), so every template result made from it is wrapped."""
        kind = type(value)
        if kind is str:
            return self.unsafe_text(value)
        if kind is dict:
            return {self.unsafe(key): self.unsafe(item) for key, item in value.items()}
        if kind is list:
            return [self.unsafe(item) for item in value]
        if kind is tuple:
            return tuple(self.unsafe(item) for item in value)
        return value

    def concat(self, nodes):
        """``ansible_eval_concat(nodes)``, the same result."""
        head = list(itertools.islice(nodes, 2))
        if len(head) == 1 and type(head[0]) in self.containers:
            try:
                result, unsafe = self.copy(head[0])
            except NotPlainData:
                pass
            else:
                return self.unsafe(result) if unsafe else result
        if isinstance(nodes, types.GeneratorType):
            nodes = (node for node in itertools.chain(head, nodes))
        return self.original(nodes)

    def install(self) -> None:
        from ansible import template
        from ansible.template import native_helpers

        self.original = native_helpers.ansible_eval_concat
        template.AnsibleEnvironment.concat = staticmethod(self.concat)

    def uninstall(self) -> None:
        from ansible import template

        if self.original is not None:
            template.AnsibleEnvironment.concat = staticmethod(self.original)
            self.original = None


class PluginLookups:
    """The filter and test loaders' answers, remembered by name for the server's life.

    A template environment asks its loader for every filter or test name a template uses,
    once per environment, and ansible makes an environment for every task. For a name ansible
    has no plugin of (Jinja2's own ``default``, ``list``, ``map``, ``defined``, ...) the loader
    imports and lists every module of ansible's builtin filters or tests before it says so,
    for every task. The answer depends only on the plugin paths: a warm run has the server's
    (a run with another configuration is run cold), and a directory added to a loader clears
    these answers with its own caches. Jinja2's names are asked once, in the server.
    """

    def __init__(self):
        from ansible.plugins import loader
        from jinja2.defaults import DEFAULT_FILTERS, DEFAULT_TESTS

        # Each loader, with the names of Jinja2's own filters or tests.
        self.loaders = (
            (loader.filter_loader, DEFAULT_FILTERS),
            (loader.test_loader, DEFAULT_TESTS),
        )

    @staticmethod
    def remember(plugin_loader) -> None:
        from ansible.errors import AnsibleError

        original_get = plugin_loader.get
        original_clear = plugin_loader._clear_caches
        answers: dict[str, tuple[bool, object]] = {}

        def get(name, *args, **kwargs):
            if args or kwargs or not isinstance(name, str):
                return original_get(name, *args, **kwargs)
            answer = answers.get(name)
            if answer is None:
                # What the template environment expects for a name without a plugin.
                try:
                    answer = (True, original_get(name))
                except (AnsibleError, KeyError) as error:
                    answer = (False, error)
                answers[name] = answer
            found, value = answer
            if not found:
                raise value
            return value

        def clear_caches():
            answers.clear()
            original_clear()

        plugin_loader.get = get
        plugin_loader._clear_caches = clear_caches

    def install(self) -> None:
        for plugin_loader, jinja_names in self.loaders:
            self.remember(plugin_loader)
            for name in jinja_names:
                with contextlib.suppress(Exception):
                    plugin_loader.get(name)


# ----------------------------------------------------------------------------- ansible config


def configuration_values(constants) -> dict:
    """Every ansible setting as the current environment and ansible.cfg make it (not the
    per-process temporary directory, which reading would create)."""
    variables = vars(constants)
    return {
        name: constants.config.get_config_value(name, variables=variables)
        for name in constants.config.get_configuration_definitions()
        if name != "DEFAULT_LOCAL_TMP"
    }


def configuration_differences(warm: dict, current: dict) -> list[str]:
    """The settings that differ and that a warm run cannot take over (see RUN_SPECIFIC_SETTINGS)."""
    return sorted(
        name
        for name in set(warm) | set(current)
        if warm.get(name) != current.get(name) and name not in RUN_SPECIFIC_SETTINGS
    )


def adopt_run_configuration(warm: dict) -> list[str]:
    """In a playbook child, after the run's environment is in place: take over the run-specific
    settings and a temporary directory of its own; what differs otherwise (nothing taken over)."""
    from ansible import constants

    current = configuration_values(constants)
    differences = configuration_differences(warm, current)
    if not differences:
        for name in RUN_SPECIFIC_SETTINGS & current.keys():
            setattr(constants, name, current[name])
        constants.DEFAULT_LOCAL_TMP = constants.config.get_config_value(
            "DEFAULT_LOCAL_TMP", variables=vars(constants)
        )
    return differences


# ----------------------------------------------------------------------------- runner events


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = 60.0):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


class RunnerEvents:
    """ansible-runner's ``http`` plugin (ansible-runner-http), posting every event of a run
    over one kept-alive connection: the stock plugin opens a new HTTP session per event, and a
    reconcile has 50-200 of them. Same settings (``runner_http_url`` / ``_path`` /
    ``_headers``, ``RUNNER_HTTP_URL`` / ``_PATH``), same JSON body; a URL that is not a
    Unix socket goes to the stock plugin."""

    def __init__(self, stock):
        self.stock = stock
        self.connection: UnixHTTPConnection | None = None
        self.connected_to: str | None = None

    def status_handler(self, runner_config, data) -> None:
        settings = runner_config.settings
        url = os.getenv("RUNNER_HTTP_URL", settings.get("runner_http_url"))
        if url is None or not os.path.exists(url):
            self.stock.status_handler(runner_config, data)
            return
        path = os.getenv("RUNNER_HTTP_PATH", settings.get("runner_http_path")) or "/"
        headers = {"Content-Type": "application/json"}
        headers.update(settings.get("runner_http_headers") or {})
        self.post(url, path, json.dumps(data, allow_nan=False).encode(), headers)

    event_handler = status_handler

    def post(self, url: str, path: str, body: bytes, headers: dict) -> None:
        if self.connected_to != url:
            self.close()
        reused = self.connection is not None
        if self.connection is None:
            self.connection, self.connected_to = UnixHTTPConnection(url), url
        try:
            self.connection.request("POST", path, body, headers)
            self.connection.getresponse().read()
        except (OSError, http.client.HTTPException):
            self.close()
            if not reused:
                raise
            # The receiver closed an idle kept-alive connection: send once more on a new one.
            self.post(url, path, body, headers)

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
        self.connection = self.connected_to = None


# ----------------------------------------------------------------------------- the playbook


class ForkedPlaybook:
    """What ansible-runner uses of ``pexpect.spawn``, for a playbook forked from this process.

    The child runs ansible's CLI in-process (``run_playbook``); its output (stdout and stderr,
    as on pexpect's terminal) comes through a pipe and goes to ``logfile_read``, where
    ansible-runner parses the events out of it.
    """

    def __init__(
        self,
        command,
        args=(),
        cwd=None,
        env=None,
        encoding="utf-8",
        codec_errors="replace",
        warm_configuration=None,
        ansiballz_cache="",
        **_ignored,
    ):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(write_end, 1)
            os.dup2(write_end, 2)
            os.close(null)
            os.close(write_end)
            name_process("playbook")  # "ansible-playbook" is 16 bytes: the kernel keeps 15
            run_playbook([command, *args], cwd, env, warm_configuration or {}, ansiballz_cache)
        os.close(write_end)
        self.pid = pid
        self.fd = read_end
        self.decoder = codecs.getincrementaldecoder(encoding)(errors=codec_errors)
        self.logfile_read = None
        self.exitstatus = None
        self.signalstatus = None
        self.status = None
        self.eof = False

    def _reap(self, block: bool) -> bool:
        if self.status is None:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
            if pid == 0:
                return False
            self.status = status
            if os.WIFSIGNALED(status):
                self.signalstatus = os.WTERMSIG(status)
            else:
                self.exitstatus = os.WEXITSTATUS(status)
        return True

    def isalive(self) -> bool:
        # Output ends when the playbook exits: wait for it then, rather than spin.
        return not self._reap(block=self.eof)

    def _pump(self, timeout) -> None:
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        while not self.eof:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                return
            chunk = os.read(self.fd, 65536)
            text = self.decoder.decode(chunk, final=not chunk)
            if text and self.logfile_read is not None:
                self.logfile_read.write(text)
            if not chunk:
                self.eof = True
                os.close(self.fd)

    def expect(self, pattern, timeout=-1, searchwindowsize=None):
        """Output until the end (EOF) or ``timeout``: the index of EOF or TIMEOUT in
        ``pattern``, the only patterns ansible-runner gives without passwords."""
        import pexpect

        patterns = pattern if isinstance(pattern, list) else [pattern]
        self._pump(30.0 if timeout == -1 else timeout)
        if not self.eof and self.status is not None and pexpect.EOF in patterns:
            # ansible-runner's last wait for the end of output, after the playbook was reaped:
            # a process it started (a worker, a module) that still holds the pipe must not
            # turn a finished run into an exception. What it writes later is not read.
            self.eof = True
            os.close(self.fd)
        wanted = pexpect.EOF if self.eof else pexpect.TIMEOUT
        if wanted in patterns:
            return patterns.index(wanted)
        raise wanted("no password prompts in a warm run")

    def sendline(self, _line="") -> int:
        return 0

    def close(self, force=True) -> None:
        if not self.eof:
            self._pump(None)
        self._reap(block=True)


def run_playbook(
    argv: list[str], cwd: str, env: dict, warm_configuration: dict, ansiballz_cache: str = ""
) -> None:
    """In the playbook child: the run's directory and environment, then ansible's own CLI;
    a real ``ansible-playbook`` if the run's configuration is not the warm one. Never returns."""
    code = 1
    try:
        atexit._clear()
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        differences = adopt_run_configuration(warm_configuration)
        if differences:
            sys.stderr.write(
                "quorumkeeper warm start: settings differ from the warm ones "
                f"({', '.join(differences[:5])}): running ansible-playbook itself\n"
            )
            sys.stderr.flush()
            os.execvpe(argv[0], argv, env)
        from ansible.cli.playbook import main as playbook_main

        # The CLI configures the collection loader the server configured already, with the
        # same paths (compared above).
        warnings.filterwarnings("ignore", "AnsibleCollectionFinder has already been configured")
        own_cache = ansiballz_cache and share_ansiballz_payloads(ansiballz_cache)
        sys.argv = list(argv)
        try:
            playbook_main()
            code = 0
        finally:
            if own_cache:
                keep_ansiballz_payloads(own_cache, ansiballz_cache)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported like an interpreter would, then exit
        import traceback

        traceback.print_exc()
    finish(code)


def share_ansiballz_payloads(shared: str) -> str:
    """Start the run's AnsiballZ cache (ansible's, in its per-process temporary directory) with
    the payloads earlier runs built, as hard links; the run's cache directory."""
    from ansible import constants

    own = os.path.join(constants.DEFAULT_LOCAL_TMP, "ansiballz_cache")
    os.makedirs(own, exist_ok=True)
    for name in os.listdir(shared):
        if not name.endswith("-part"):
            with contextlib.suppress(OSError):
                os.link(os.path.join(shared, name), os.path.join(own, name))
    return own


def keep_ansiballz_payloads(own: str, shared: str) -> None:
    """Hand the payloads this run built to the runs after it: linked under a name of this
    process's, then renamed into place, so that concurrent runs never see half a file."""
    for name in os.listdir(own):
        target = os.path.join(shared, name)
        if name.endswith("-part") or os.path.exists(target):
            continue
        staging = os.path.join(shared, f".{name}.{os.getpid()}")
        with contextlib.suppress(OSError):
            os.link(os.path.join(own, name), staging)
            os.rename(staging, target)


# ----------------------------------------------------------------------------- modules


def import_module_side() -> int:
    """What the operator's modules import, imported once here: ansible's module basics and
    every module utility of the collection (their own heavy imports, boto3 and the cloud
    storage client, stay deferred); how many utilities."""
    import importlib

    import ansible.module_utils.basic  # noqa: F401 - every module's first import

    package = "ansible_collections.quorumkeeper.etcd.plugins.module_utils"
    utilities = importlib.import_module(package)
    names = sorted(
        name[:-3]
        for directory in utilities.__path__
        for name in os.listdir(directory)
        if name.startswith("qk_") and name.endswith(".py")
    )
    # Processes of their own and what only they use, not module code.
    skipped = {"qk_warm_start", "qk_health_watch", "qk_leader_lease"}
    for name in names:
        if name not in skipped:
            importlib.import_module(f"{package}.{name}")
    return len(names) - len(skipped & set(names))


def import_preloaded(names: str) -> tuple[int, list[str]]:
    """What a server started for other playbooks' modules imports besides the operator's
    (QK_WARM_START_PRELOAD: comma-separated modules; ``package.*`` for a package and every
    module under it): the molecule scenarios' kubernetes.core modules spend about 0.5 CPU-s of
    their 0.6 importing the ``kubernetes`` client. Returns how many were imported, and what
    could not be, with why."""
    import importlib
    import pkgutil

    imported, refused = 0, []
    for name in filter(None, (part.strip() for part in names.split(","))):
        whole = name.endswith(".*")
        try:
            module = importlib.import_module(name[:-2] if whole else name)
        except Exception as exc:  # noqa: BLE001 - said; that module is imported per run then
            refused.append(f"{name}: {exc!r}")
            continue
        imported += 1
        below = getattr(module, "__path__", []) if whole else []
        for found in pkgutil.walk_packages(below, prefix=f"{module.__name__}."):
            try:
                importlib.import_module(found.name)
                imported += 1
            except Exception as exc:  # noqa: BLE001
                refused.append(f"{found.name}: {exc!r}")
    return imported, refused


# What AnsiballZ's script names its payload after: the module's name (ansible's module_common).
ANSIBALLZ_MODULE = re.compile(rb"mkdtemp\(prefix='ansible_' \+ '([\w.]+)' \+ '_payload_'\)")


def module_name(argv: list[str], script: bytes = b"") -> str:
    """The module an AnsiballZ command line runs: ``etcd_snapshot`` for
    ``[python, .../AnsiballZ_etcd_snapshot.py]``, or for ``[python]`` and the script on standard
    input (ansible's pipelining) the module its text names; ``module`` when it is not one."""
    path = os.path.basename(argv[1]) if len(argv) > 1 else ""
    if path.startswith("AnsiballZ_") and path.endswith(".py"):
        return path[len("AnsiballZ_") : -len(".py")]
    named = ANSIBALLZ_MODULE.search(script) if not path else None
    return named.group(1).decode() if named else "module"


def name_process(name: str) -> None:
    """Name the forked child after what it runs (its command line stays the server's): ``ps
    -o comm``, ``top`` and the benchmarks' memory samplers tell a module's process from the
    server's by it. The kernel keeps the first 15 bytes."""
    with (
        contextlib.suppress(OSError),
        open("/proc/self/comm", "w", encoding="ascii", errors="replace") as comm,
    ):
        comm.write(name[:15])


def collection_payload_installed(payload: str, package: str) -> bool:
    """Whether every file an AnsiballZ payload carries of a collection (``package``: one of its
    packages, ``ansible_collections.<namespace>.<name>....``) is the installed file the
    server's collection loader imports instead; the payload's empty ``__init__.py`` files,
    which AnsiballZ adds, aside."""
    import importlib
    import zipfile

    collection = ".".join(package.split(".")[:3])
    prefix = collection.replace(".", "/") + "/"
    root = importlib.import_module(collection).__path__[0]
    with zipfile.ZipFile(payload) as archive:
        for member in archive.namelist():
            if not member.startswith(prefix) or member.endswith("/"):
                continue
            carried = archive.read(member)
            if member.endswith("/__init__.py") and not carried.strip():
                continue
            try:
                with open(os.path.join(root, member[len(prefix) :]), "rb") as installed:
                    if installed.read() != carried:
                        return False
            except OSError:
                return False
    return True


# A cold interpreter for a script that came on standard input, which the warm child has read:
# it gets the script from a file it removes first, and runs it as ``python3 < script`` would.
RUN_PIPED_SCRIPT_COLD = (
    "import os, sys; path = sys.argv[1]; source = open(path, 'rb').read(); os.unlink(path); "
    "sys.argv = ['']; del os, path; exec(compile(source, '<stdin>', 'exec'))"
)


def start_cold(argv: list[str], script: bytes | None) -> None:
    """The module's script again, in a new interpreter (this process becomes it)."""
    if script is None:
        os.execv(sys.executable, [sys.executable, *argv[1:]])
    descriptor, path = tempfile.mkstemp(prefix="AnsiballZ_piped_", suffix=".py")
    with os.fdopen(descriptor, "wb") as copy:
        copy.write(script)
    os.execv(sys.executable, [sys.executable, "-c", RUN_PIPED_SCRIPT_COLD, path])


def run_piped_script(script: bytes) -> None:
    """A script read from standard input, run as ``python3 < script`` runs it: as ``__main__``,
    without ``__file__`` (AnsiballZ expects that when pipelined), ``sys.argv`` being ``['']``."""
    main = types.ModuleType("__main__")
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = main
    sys.argv = [""]
    try:
        exec(compile(script, "<stdin>", "exec"), main.__dict__)  # noqa: S102 - as python3 would
    finally:
        sys.modules["__main__"] = saved


def run_module_script(argv: list[str], script: bytes | None = None) -> int:
    """A module's AnsiballZ script run here, finding what it imports already imported: the file
    ``argv`` names (the interpreter, the script, its arguments), or ``script``, the text ansible
    sent on standard input (pipelining: ``argv`` is the interpreter alone).

    AnsiballZ puts its payload first on sys.path and runs ``ansible.modules.<name>`` (or a
    collection's module) from it. The ``ansible`` package here is the installed one, already
    imported, so the payload's package directory is added to that package's path for the
    module to be found; everything else the module imports is the same file it would import
    from the payload. A collection's packages are the collection loader's, which searches one
    path, the installed collection's: its module runs from there when the payload carries the
    same files, else the script starts again in a new interpreter (a cold run).
    """
    import importlib
    import runpy
    import shutil

    original_run_module = runpy.run_module

    def run_module(mod_name, init_globals=None, run_name=None, alter_sys=False):
        payload = (init_globals or {}).get("_modlib_path")
        package = mod_name.rpartition(".")[0]
        if payload and package.startswith("ansible_collections."):
            if not collection_payload_installed(payload, package):
                shutil.rmtree(os.path.dirname(payload), ignore_errors=True)  # AnsiballZ's
                start_cold(argv, script)
        elif payload and package:
            search = importlib.import_module(package).__path__
            inside = os.path.join(payload, *package.split("."))
            if inside not in search:
                search.append(inside)
        return original_run_module(mod_name, init_globals, run_name, alter_sys)

    runpy.run_module = run_module
    if script is not None:
        run_piped_script(script)
        return 0
    sys.argv = list(argv[1:])
    runpy.run_path(argv[1], run_name="__main__")
    return 0


def imported_since(before: set[str]) -> list[str]:
    """Which of LEARNED_IMPORTS a run imported: imported now, not in ``before``."""
    return [name for name in LEARNED_IMPORTS if name in sys.modules and name not in before]


def learn_import(name: str) -> bool:
    """Import one of LEARNED_IMPORTS that a child reported, and warm it up: True if new. A
    client built here (no credentials looked up, no connection made) loads what every first
    client of a process would: boto3's endpoint data and service model code."""
    if name not in LEARNED_IMPORTS or name in sys.modules:
        return False
    import importlib

    module = importlib.import_module(name)
    if name == "boto3":
        module.session.Session().client(
            "s3", region_name="us-east-1", aws_access_key_id="-", aws_secret_access_key="-"
        )
    return True


def finish(code: int) -> None:
    """Leave a child the way an interpreter exits, without running the server's exit handlers
    (they were cleared at the fork; this runs only the child's own)."""
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


# ----------------------------------------------------------------------------- the server


def runner_environment() -> dict:
    """The variables ansible-runner sets for a playbook run, so that the server imports ansible
    with the settings its runs will have (the per-run ones are taken over in each child)."""
    from ansible_runner.config.runner import RunnerConfig

    with tempfile.TemporaryDirectory(prefix="quorumkeeper-warm-") as private:
        os.makedirs(os.path.join(private, "project"))
        with open(os.path.join(private, "project", "warm.yml"), "w") as playbook:
            playbook.write("[]\n")
        config = RunnerConfig(private_data_dir=private, playbook="warm.yml", quiet=True)
        config.prepare()
        return {k: v for k, v in config.env.items() if os.environ.get(k) != v}


def operator_files(root: str) -> dict[str, int]:
    """The operator's Python files and their modification times: the modules and plugins under
    ``root`` (what the server imported, and what AnsiballZ packs for every module run)."""
    paths = {
        module.__file__
        for module in list(sys.modules.values())
        if getattr(module, "__file__", None)
        and os.path.realpath(module.__file__).startswith(root + os.sep)
    }
    for top in ("library", "plugins"):
        for directory, _, names in os.walk(os.path.join(root, top)):
            paths.update(os.path.join(directory, n) for n in names if n.endswith(".py"))
    files = {}
    for path in paths:
        with contextlib.suppress(OSError):
            files[path] = os.stat(path).st_mtime_ns
    return files


def changed_files(files: dict[str, int]) -> list[str]:
    changed = []
    for path, mtime in files.items():
        try:
            if os.stat(path).st_mtime_ns != mtime:
                changed.append(path)
        except OSError:
            changed.append(path)
    return changed


class WarmServer:
    def __init__(self, owner: int, log):
        self.owner = owner
        self.log = log
        self.pid = os.getpid()
        self.listener: socket.socket | None = None
        self.children: dict[int, socket.socket] = {}
        self.learn_read, self.learn_write = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.templates = TemplateCache(self.learn_write)
        self.warm_configuration: dict = {}
        self.environment = None
        self.files: dict[str, int] = {}
        self.wakeup_read, self.wakeup_write = os.pipe()
        self.stats = {"runs": 0, "learned": 0}
        # Set when the server could not warm up: it keeps its socket (so that clients do not
        # start another one at every run) and tells every client to start cold.
        self.cold_reason = ""
        # Set when modules cannot run in a fork of the server (they start cold then).
        self.modules_cold = ""
        # AnsiballZ payloads built by earlier runs (ansible keeps them per process only).
        self.ansiballz_cache = ""

    def say(self, message: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.log.write(f"quorumkeeper warm start [{os.getpid()}]: {message}\n")
            self.log.flush()

    def bind(self) -> bool:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(socket_name())
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False  # another client started one first
            raise
        listener.listen(64)
        self.listener = listener
        return True

    def warm_up(self) -> None:
        started = time.process_time()
        os.environ.update(runner_environment())
        import ansible_runner
        import ansible_runner.__main__  # noqa: F401 - what each run calls
        import ansible_runner.runner  # noqa: F401
        from ansible import constants
        from ansible.cli.playbook import PlaybookCLI  # noqa: F401 - the CLI each run starts
        from ansible.executor import playbook_executor, task_executor  # noqa: F401
        from ansible.parsing.dataloader import DataLoader
        from ansible.plugins import loader
        from ansible.template import Templar

        loader.init_plugin_loader(constants.COLLECTIONS_PATHS)
        # Loaded here once, not in every task's worker.
        for plugin_loader in (loader.filter_loader, loader.test_loader):
            list(plugin_loader.all())
        for name in ("linear", "free", "quorumkeeper.etcd.linear_inline"):
            loader.strategy_loader.get(name, class_only=True)
        for plugin in loader.action_loader.all(class_only=True):
            del plugin
        # What every run loads before its first task: ansible's playbook executor loads every
        # connection, shell and become plugin and the task queue every callback (each plugin's
        # source executed and its documentation parsed for its settings), the inventory
        # manager its inventory and vars plugins, the variable manager the fact cache. Loaded
        # here, a run finds them in sys.modules and their settings defined: about 0.1 CPU-s
        # of every run, measured.
        for plugin_loader in (
            loader.connection_loader,
            loader.shell_loader,
            loader.become_loader,
            loader.vars_loader,
        ):
            list(plugin_loader.all(class_only=True))
        # Not ansible-runner's own callback: importing it reads the run's directory from the
        # environment.
        for path in loader.callback_loader.all(path_only=True):
            if "ansible_runner" not in path:
                loader.callback_loader.get(
                    os.path.splitext(os.path.basename(path))[0], class_only=True
                )
        for name in constants.INVENTORY_ENABLED:
            loader.inventory_loader.get(name, class_only=True)
        loader.cache_loader.get(constants.CACHE_PLUGIN, class_only=True)
        loader.lookup_loader.get("ansible.builtin.env", class_only=True)
        if "http" in ansible_runner.plugins:
            ansible_runner.plugins["http"] = RunnerEvents(ansible_runner.plugins["http"])
        self.templates.install()
        TemplateResults().install()
        PluginLookups().install()
        self.environment = Templar(loader=DataLoader()).environment
        self.warm_configuration = configuration_values(constants)
        root = os.path.dirname(os.path.realpath(os.environ.get("ANSIBLE_CONFIG", os.getcwd())))
        imported = import_module_side()
        preloaded, refused = import_preloaded(os.environ.get(PRELOAD_VARIABLE, ""))
        for reason in refused:
            self.say(f"not preloaded: {reason}")
        # A thread (none of the above starts one) would not survive a fork in a usable state.
        threads = len(os.listdir("/proc/self/task"))
        if threads > 1:
            self.modules_cold = f"{threads} threads after warming up"
        self.ansiballz_cache = os.path.join(constants.DEFAULT_LOCAL_TMP, "ansiballz_shared")
        os.makedirs(self.ansiballz_cache, exist_ok=True)
        self.files = operator_files(root)
        self.say(
            f"warm in {time.process_time() - started:.2f} CPU-s ({imported} module utilities, "
            + (f"{preloaded} preloaded modules, " if preloaded else "")
            + f"{len(self.files)} operator files watched)"
            + (f"; modules start cold: {self.modules_cold}" if self.modules_cold else "")
        )

    def serve(self) -> None:
        signal.signal(signal.SIGCHLD, lambda *_: os.write(self.wakeup_write, b"."))
        os.set_blocking(self.wakeup_write, False)
        next_owner_check = 0.0
        while self.listener is not None or self.children:
            now = time.monotonic()
            if now >= next_owner_check:
                next_owner_check = now + OWNER_CHECK_SECONDS
                if not owner_alive(self.owner):
                    self.say("ansible-operator is gone: stopping")
                    self.stop_listening()
            readers = [self.wakeup_read, self.learn_read]
            if self.listener is not None:
                readers.append(self.listener)
            try:
                ready, _, _ = select.select(readers, [], [], OWNER_CHECK_SECONDS)
            except InterruptedError:
                continue
            if self.wakeup_read in ready:
                os.read(self.wakeup_read, 4096)
            try:
                self.reap()
                if self.listener is not None and self.listener in ready:
                    self.accept()
                if self.learn_read in ready:
                    self.learn()
            except Exception as exc:  # noqa: BLE001 - one bad request must not end the server
                self.say(f"{exc!r}")
        self.say(f"{STOPPED_AFTER} {self.stats['runs']} runs")

    def stop_listening(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None

    def accept(self) -> None:
        conn, _ = self.listener.accept()
        try:
            request, fds = receive_request(conn)
        except (OSError, ValueError) as exc:
            self.say(f"refused a request: {exc}")
            conn.close()
            return
        try:
            if self.cold_reason or (request["kind"] == "module" and self.modules_cold):
                conn.sendall(COLD)
                conn.close()
                return
            changed = changed_files(self.files)
            if changed:
                self.say(f"{changed[0]} changed: new runs start cold until a new server is up")
                self.stop_listening()
                conn.sendall(COLD)
                conn.close()
                return
            self.stats["runs"] += 1
            # What the server holds is moved out of the collector's reach first: a child's
            # collections then never walk (and so copy, page by page) the heap it shares with
            # the server. A steady reconcile costs about a tenth less CPU that way (measured:
            # docs/reconcile-cost.md). Freezing again per run only adds what the server learned.
            gc.freeze()
            pid = os.fork()
            if pid == 0:
                self.run_child(request, fds)
            self.children[pid] = conn
            with contextlib.suppress(OSError):  # a client gone: its child runs out anyway
                conn.sendall(STARTED + struct.pack("!I", pid))
        finally:
            for fd in fds:
                os.close(fd)

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(EXITED + struct.pack("!I", exit_code(status)))
                conn.close()

    def learn(self) -> None:
        """What children reported: templates they compiled, modules they imported."""
        for _ in range(64):  # a few at a time: runs waiting to be accepted come first
            try:
                message = self.learn_read.recv(1 << 22, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            if message.startswith(b"{"):
                self.learn_import(message)
                continue
            with contextlib.suppress(ValueError):
                if self.templates.learn(self.environment, message):
                    self.stats["learned"] += 1

    def learn_import(self, message: bytes) -> None:
        try:
            name = str(json.loads(message).get("import"))
        except (ValueError, AttributeError):
            return
        started = time.process_time()
        if not learn_import(name):
            return
        # As after warming up: a thread would not survive a fork in a usable state.
        threads = len(os.listdir("/proc/self/task"))
        if threads > 1 and not self.modules_cold:
            self.modules_cold = f"{threads} threads after importing {name}"
        self.say(
            f"imported {name} for the modules after the one that used it "
            f"({time.process_time() - started:.2f} CPU-s)"
            + (f"; modules start cold: {self.modules_cold}" if self.modules_cold else "")
        )

    def report_imports(self, before: set[str]) -> None:
        """In a child, after its module ran: tell the server what it imported of
        LEARNED_IMPORTS (a full socket only means a later run tells it)."""
        for name in imported_since(before):
            with contextlib.suppress(OSError):
                self.learn_write.send(json.dumps({"import": name}).encode(), socket.MSG_DONTWAIT)

    def run_child(self, request: dict, fds: list[int]) -> None:
        """The forked child: becomes ansible-runner with the client's streams. Never returns."""
        code = 1
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            gc.set_threshold(*RUN_GC_THRESHOLDS)
            for sock in (self.listener, self.learn_read, *self.children.values()):
                if sock is not None:
                    sock.close()
            for fd in (self.wakeup_read, self.wakeup_write):
                os.close(fd)
            atexit._clear()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own streams
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            os.environ[SERVER_VARIABLE] = str(self.pid)
            if request["kind"] == "module":
                # No script named: ansible pipelines, the script comes on standard input.
                script = None if len(request["argv"]) > 1 else sys.stdin.buffer.read()
                name_process(module_name(request["argv"], script or b""))
                before = set(sys.modules)
                try:
                    code = run_module_script(request["argv"], script)
                finally:
                    self.report_imports(before)
            else:
                name_process("ansible-runner")
                code = run_runner(request["argv"], self.warm_configuration, self.ansiballz_cache)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
        finish(code)


def run_runner(argv: list[str], warm_configuration: dict, ansiballz_cache: str = "") -> int:
    """ansible-runner's ``main()``, its playbook forked from here rather than spawned."""
    import pexpect
    from ansible_runner.__main__ import main as runner_main

    def spawn(command, args=(), **kwargs):
        if os.path.basename(command) != "ansible-playbook":
            return original_spawn(command, args, **kwargs)
        return ForkedPlaybook(
            command,
            args,
            warm_configuration=warm_configuration,
            ansiballz_cache=ansiballz_cache,
            **kwargs,
        )

    original_spawn = pexpect.spawn
    pexpect.spawn = spawn
    sys.argv = list(argv)
    result = runner_main(argv[1:])
    return result if isinstance(result, int) else 0


def owner_alive(pid: int) -> bool:
    """Whether the owner still runs: a process that has exited is gone, also while it waits to
    be reaped (a zombie). Its parent may wait for the end of the output the server still holds
    before it reaps it (hack/warm_modules.py's command, run with its output captured)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[:1]
    except FileNotFoundError:
        return False
    return state not in ([b"Z"], [b"X"])


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--owner", type=int, required=True, help="exit when this pid is gone")
    options = parser.parse_args(args)
    server = WarmServer(options.owner, sys.stderr)
    if not server.bind():
        return 0
    try:
        server.warm_up()
    except Exception as exc:  # noqa: BLE001 - said, then every run starts cold
        server.cold_reason = repr(exc)
        server.say(f"cannot warm up ({exc!r}): every run starts cold")
    server.serve()
    return 0


if __name__ == "__main__":
    # Run as a file: its directory is no place to import from.
    if sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
        del sys.path[0]
    sys.exit(main())
