"""The warm start's pieces that decide (qk_warm_start): which templates are kept compiled and
under what key, a template's result made without ansible's round trip through text, which
configuration differences send a run to a real ansible-playbook, how a request travels with its
streams, and how an exit status is reported. The runs themselves are tested in
tests/modules/test_warm_start_runs.py."""

import array
import codecs
import json
import os
import re
import signal
import socket
import sys
import tempfile

import jinja2
import pytest
from ansible.parsing.yaml.objects import AnsibleMapping, AnsibleSequence, AnsibleUnicode
from ansible.template import Templar, native_helpers
from ansible.template.native_helpers import ansible_eval_concat
from ansible.utils.unsafe_proxy import AnsibleUnsafeText, wrap_var
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_warm_start import (
    RUN_SPECIFIC_SETTINGS,
    ForkedPlaybook,
    PluginLookups,
    TemplateCache,
    TemplateResults,
    cacheable_template,
    configuration_differences,
    encode_request,
    exit_code,
    module_name,
    name_process,
    owner_alive,
    receive_request,
    run_piped_script,
    start_cold,
    template_cache_key,
)


@pytest.mark.parametrize(
    "source",
    [
        "{{ 10 | random }}",
        "{{ [1, 2] |shuffle }}",
        "{{ '%Y' | strftime }}",
        "{{ 'secret' | password_hash('sha512') }}",
        "{{ '/etc/hosts' is file }}",
        "{{ '/etc' is not directory }}",
        "{% if '/x' is exists %}y{% endif %}",
        # On a variable nothing is folded, but telling constants from variables would take a
        # parse: any file test is left uncached.
        "{{ path is file }}",
    ],
)
def test_templates_jinja_could_fold_into_a_changing_value_are_not_kept(source):
    assert not cacheable_template(source)


@pytest.mark.parametrize(
    "source",
    [
        "{{ now(utc=true) }}",  # a call: never folded
        "{{ lookup('ansible.builtin.env', 'HOME') }}",
        "{{ known_hosts | default(unknown_file) }}",  # the words alone
        "{{ members | map(attribute='name') | list }}",
        "{{ etcdcluster_spec.replicas | default(3) | int }}",
    ],
)
def test_other_templates_are_kept(source):
    assert cacheable_template(source)


def test_the_key_tells_environments_with_other_delimiters_apart():
    plain = jinja2.Environment()
    other = jinja2.Environment(variable_start_string="[[", variable_end_string="]]")
    trimmed = jinja2.Environment(trim_blocks=True)
    keys = {
        template_cache_key(env, "{{ x }}", None, None, False, False)
        for env in (plain, other, trimmed)
    }
    assert len(keys) == 3
    assert template_cache_key(plain, "{{ x }}", None, None, False, False) == template_cache_key(
        jinja2.Environment(), "{{ x }}", None, None, False, False
    )
    assert template_cache_key(plain, "{{ x }}", None, None, False, False) != template_cache_key(
        plain, "{{ y }}", None, None, False, False
    )


def test_a_template_is_compiled_once_and_a_childs_report_teaches_the_server():
    learned = []
    original = jinja2.Environment.compile

    class Recorder:
        def send(self, message, flags=0):
            learned.append(message)

    cache = TemplateCache(Recorder())
    cache.install()
    try:
        env = jinja2.Environment()
        first = env.from_string("{{ a + 1 }}")
        code = cache.code[template_cache_key(env, "{{ a + 1 }}", None, None, False, False)]
        assert env.compile("{{ a + 1 }}") is code
        assert first.render(a=1) == "2"
        assert learned == []  # the server compiled it itself: nobody to tell

        # A child (another pid) reports what it had to compile; the server compiles it too.
        cache.server_pid = -1
        env.from_string("{{ b * 2 }}")
        assert len(learned) == 1
        server = TemplateCache()
        server.install()
        try:
            assert server.learn(env, learned[0]) is True
            assert server.learn(env, learned[0]) is False  # known already
        finally:
            server.uninstall()
    finally:
        cache.uninstall()
    assert jinja2.Environment.compile is original


def test_a_template_that_does_not_compile_is_an_error_as_before_and_stays_uncached():
    cache = TemplateCache()
    cache.install()
    try:
        env = jinja2.Environment()
        with pytest.raises(jinja2.TemplateSyntaxError):
            env.from_string("{{ a + }}")
        assert not cache.code
        assert cache.learn(env, b'["{{ a + }}", null, null, false, false]') is False
    finally:
        cache.uninstall()


def test_only_the_per_run_fact_cache_may_differ_from_the_warm_configuration():
    warm = {"CACHE_PLUGIN_CONNECTION": "/a/fact_cache", "DEFAULT_ROLES_PATH": ["/r"], "X": 1}
    assert configuration_differences(warm, dict(warm, CACHE_PLUGIN_CONNECTION="/b")) == []
    assert configuration_differences(warm, dict(warm, DEFAULT_ROLES_PATH=["/other"])) == [
        "DEFAULT_ROLES_PATH"
    ]
    assert configuration_differences(warm, {**warm, "NEW": True}) == ["NEW"]
    assert {"CACHE_PLUGIN_CONNECTION"} == RUN_SPECIFIC_SETTINGS


def test_a_request_travels_with_the_clients_standard_streams():
    client, server = socket.socketpair()
    streams = [os.open(os.devnull, os.O_RDONLY) for _ in range(3)]
    try:
        message = encode_request("runner", ["ansible-runner", "run", "/x"], "/tmp", {"A": "b"})
        sent = client.sendmsg(
            [message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", streams))]
        )
        client.sendall(message[sent:])
        request, fds = receive_request(server)
        assert request == {
            "kind": "runner",
            "argv": ["ansible-runner", "run", "/x"],
            "cwd": "/tmp",
            "env": {"A": "b"},
        }
        assert len(fds) == 3
        assert all(os.path.samestat(os.fstat(fd), os.fstat(streams[0])) for fd in fds)
        for fd in fds:
            os.close(fd)
    finally:
        for fd in streams:
            os.close(fd)
        client.close()
        server.close()


def test_a_request_without_streams_or_of_an_unknown_kind_is_refused():
    for kind, with_streams in (("runner", False), ("shell", True)):
        client, server = socket.socketpair()
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            message = encode_request(kind, ["x"], "/", {})
            ancillary = (
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [null] * 3))]
                if with_streams
                else []
            )
            client.sendmsg([message], ancillary)
            with pytest.raises(ValueError):
                receive_request(server)
        finally:
            os.close(null)
            client.close()
            server.close()


def test_exit_status_as_a_shell_reports_it():
    pid = os.fork()
    if pid == 0:
        os._exit(3)
    assert exit_code(os.waitpid(pid, 0)[1]) == 3
    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGTERM)
        os._exit(0)
    assert exit_code(os.waitpid(pid, 0)[1]) == 128 + signal.SIGTERM


def _playbook_reading(fd, status):
    """A ForkedPlaybook whose output pipe is ``fd`` and whose process was reaped with
    ``status`` (None: still running), without forking a playbook."""
    playbook = object.__new__(ForkedPlaybook)
    playbook.fd, playbook.status, playbook.eof = fd, status, False
    playbook.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    playbook.logfile_read = None
    return playbook


def test_the_last_wait_for_output_ends_when_the_playbook_is_reaped_though_the_pipe_is_held():
    import pexpect

    # A worker or module the playbook started still holds the pipe after the playbook exited.
    read_end, held = os.pipe()
    try:
        os.write(held, b"last line\n")
        playbook = _playbook_reading(read_end, status=0)
        assert playbook.expect(pexpect.EOF, timeout=0.2) == 0
        assert playbook.eof
        playbook.close()  # does not wait for the holder
    finally:
        os.close(held)
    # While the playbook runs, no EOF: the wait times out as pexpect's does.
    read_end, held = os.pipe()
    try:
        running = _playbook_reading(read_end, status=None)
        with pytest.raises(pexpect.TIMEOUT):
            running.expect(pexpect.EOF, timeout=0.2)
        assert running.expect([pexpect.EOF, pexpect.TIMEOUT], timeout=0.1) == 1
    finally:
        os.close(held)
        os.close(read_end)


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["/usr/bin/python3", "/root/.ansible/tmp/t/AnsiballZ_etcd_snapshot.py"], "etcd_snapshot"),
        (["python3", "AnsiballZ_etcd_cluster_observe.py", "x"], "etcd_cluster_observe"),
        (["python3", "/tmp/script.py"], "module"),
        (["python3"], "module"),
    ],
)
def test_a_module_is_named_after_its_ansiballz_script(argv, name):
    assert module_name(argv) == name


def test_a_pipelined_module_is_named_after_the_module_its_script_names():
    script = (
        b"ZIPDATA = 'UEsDBBQ...'\n"
        b"        temp_path = tempfile.mkdtemp(prefix='ansible_' + 'etcd_cluster_observe'"
        b" + '_payload_')\n"
    )
    assert module_name(["/usr/bin/python3"], script) == "etcd_cluster_observe"
    assert module_name(["/usr/bin/python3"], b"print('hello')") == "module"
    # A script named on the command line is what runs, whatever came on standard input.
    assert module_name(["python3", "/tmp/script.py"], script) == "module"


PIPED_PROBE = b"""
import json, sys
import __main__
with open(OUTPUT, "w") as out:
    json.dump({"name": __name__, "argv": sys.argv, "file": hasattr(__main__, "__file__")}, out)
"""


def test_a_piped_script_runs_as_python_runs_one_read_from_standard_input(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["pytest"])
    output = tmp_path / "seen.json"
    run_piped_script(b"OUTPUT = %r\n" % str(output).encode() + PIPED_PROBE)
    # As `python3 < script`: __main__, sys.argv [''], no __file__ (AnsiballZ relies on it).
    assert json.loads(output.read_text()) == {"name": "__main__", "argv": [""], "file": False}
    assert sys.modules["__main__"].__name__ == "__main__"


def test_a_piped_script_started_cold_runs_from_a_copy_it_removes(tmp_path):
    output = tmp_path / "seen.json"
    copies = tmp_path / "copies"
    copies.mkdir()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, which becomes a new interpreter
        try:
            tempfile.tempdir = str(copies)
            start_cold(["python3"], b"OUTPUT = %r\n" % str(output).encode() + PIPED_PROBE)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert json.loads(output.read_text()) == {"name": "__main__", "argv": [""], "file": False}
    assert list(copies.iterdir()) == []


def test_a_forked_child_is_named_after_what_it_runs():
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        name_process("etcd_cluster_observe")
        os.write(write_end, b"named")
        signal.pause()  # until the parent has looked, and kills it
        os._exit(0)
    try:
        os.close(write_end)
        assert os.read(read_end, 5) == b"named"
        with open(f"/proc/{pid}/comm", encoding="ascii") as comm:
            # The kernel keeps 15 bytes; the parent keeps its own name.
            assert comm.read().strip() == "etcd_cluster_ob"
        with open("/proc/self/comm", encoding="ascii") as comm:
            assert comm.read().strip() != "etcd_cluster_ob"
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_end)


# -- a template's result without the round trip through text ------------------------------------


def observation():
    """A 3-member cluster's observation as the module returns it, marked unsafe as ansible
    marks every module result."""
    members = [
        {"name": f"c-{i}", "id": str(1000 + i), "is_leader": i == 0, "db_size": 20480 + i}
        for i in range(3)
    ]
    return {
        "cluster": {"exists": True, "deleting": False, "uid": "u-1"},
        "peers": [
            {"name": f"c-{i}", "member_id": str(1000 + i), "deleting": False} for i in range(3)
        ],
        "pods": {f"c-{i}": {"ready": True, "restarts": 0, "node": None} for i in range(3)},
        "etcd": {"reachable": True, "members": members, "alarms": [], "ratio": 0.25},
        "now": 1764280000.5,
    }


def same(a, b) -> bool:
    """Equal, of the same types all the way down (an unsafe string is not a plain one)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(
            same(ka, kb) and same(a[ka], b[kb]) for ka, kb in zip(a, b, strict=True)
        )
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


class Recursive(dict):
    pass


recursive = {"a": 1}
recursive["self"] = recursive
deep: list = []
for _ in range(150):
    deep = [deep]


@pytest.mark.parametrize(
    "nodes",
    [
        [observation()],
        [wrap_var(observation())],
        [{"plain": "a", "unsafe": AnsibleUnsafeText("{{ b }}")}],
        [AnsibleMapping({"k": AnsibleUnicode("v"), "l": AnsibleSequence([1, 2.5, None])})],
        [[True, False, None, 0, -1, 2**70, 1.5e300, -0.0, "", "x'\"y", "\u00e9\n"]],
        [{"t": (1, ("a", AnsibleUnsafeText("u"))), (1, "k"): 2, 3: "int key", None: True}],
        [{}],
        [[]],
        [{"nan": float("nan")}],
        [[float("inf")]],
        [{"set": {1, 2}}],
        [{"empty set": set()}],
        [{"bytes": b"x"}],
        [{"object": object()}],
        [Recursive(a=1)],
        [recursive],
        [deep],
        [(1, 2)],
        [5],
        [True],
        ["{'a': 1}"],
        ["[1, 2]"],
        [AnsibleUnsafeText("[1]")],
        ["plain"],
        [],
        ["{", "'a': 1}"],
        [[1], [2]],
        ["a", {"b": 1}],
    ],
    # Without addresses: every xdist worker must name the same tests.
    ids=lambda nodes: re.sub(r" at 0x[0-9a-f]+", "", repr(nodes))[:40],
)
@pytest.mark.parametrize("as_generator", [True, False], ids=["generator", "list"])
def test_a_result_is_what_ansibles_round_trip_gives(nodes, as_generator):
    results = TemplateResults()
    results.original = ansible_eval_concat

    def given():
        return (node for node in nodes) if as_generator else list(nodes)

    expected = ansible_eval_concat(given())
    assert same(results.concat(given()), expected)


def test_plain_data_is_copied_without_parsing_text(monkeypatch):
    results = TemplateResults()
    results.original = ansible_eval_concat
    value = wrap_var(observation())
    expected = ansible_eval_concat(iter([value]))

    class Refuse:
        def __getattr__(self, name):
            raise AssertionError(f"parsed as text (ast.{name})")

    monkeypatch.setattr(native_helpers, "ast", Refuse())
    copied = results.concat(iter([value]))
    assert same(copied, expected)
    # A copy: changing it leaves the variable as it was.
    copied["etcd"]["members"].append("x")
    assert len(value["etcd"]["members"]) == 3


def test_installed_templates_give_what_they_gave():
    variables = {
        "observed": wrap_var(observation()),
        "context": {"replicas": "{{ 1 + 2 }}", "version": "3.6.16"},
        "latest": "{{ observed }}",
        "plan_input": "{{ latest | combine(context) }}",
    }
    sources = [
        "{{ plan_input }}",
        "{{ plan_input.etcd.members | map(attribute='name') | list }}",
        "{{ context }}",
        "{{ (1, 2) }}",
        "{{ 5 }}",
        "{{ '{' ~ '}' }}",
        "{{ {'a': observed.now} }}",
        "x {{ context }}",
    ]

    def render():
        templar = Templar(loader=None, variables=variables)
        return [templar.template(source) for source in sources]

    before = render()
    results = TemplateResults()
    results.install()
    try:
        after = render()
    finally:
        results.uninstall()
    assert results.original is None
    assert all(same(a, b) for a, b in zip(after, before, strict=True)), (after, before)
    assert after[0]["replicas"] == "3"
    assert json.dumps(after[0], sort_keys=True) == json.dumps(before[0], sort_keys=True)


# -- filter and test names remembered ------------------------------------------------------------


def new_filter_loader():
    """A filter loader like ansible's own, not shared with other tests."""
    from ansible import constants
    from ansible.plugins.loader import AnsibleJinja2Filter, Jinja2Loader

    return Jinja2Loader(
        "FilterModule",
        "ansible.plugins.filter",
        constants.DEFAULT_FILTER_PLUGIN_PATH,
        "filter_plugins",
        AnsibleJinja2Filter,
    )


def answer(plugin_loader, name):
    """The plugin's function, or how the loader said it has none (None or an error's type:
    without ansible's collection loader, as here, a name it has no plugin of is a KeyError)."""
    try:
        plugin = plugin_loader.get(name)
    except Exception as error:  # noqa: BLE001 - the answer compared
        return type(error)
    return plugin.j2_function if plugin else None


def found(answer) -> bool:
    return answer is not None and not isinstance(answer, type)


def counting(plugin_loader, asked: list):
    """The loader, with every name it looks up in its plugins appended to ``asked``."""
    original = plugin_loader.get_with_context

    def get_with_context(name, *args, **kwargs):
        asked.append(name)
        return original(name, *args, **kwargs)

    plugin_loader.get_with_context = get_with_context
    return plugin_loader


NAMES = ["combine", "ansible.builtin.combine", "default", "list", "no_such_filter", "a..b"]


def test_a_remembered_loader_answers_as_the_loader_does_and_asks_once():
    asked = []
    plain, remembered = new_filter_loader(), counting(new_filter_loader(), asked)
    PluginLookups.remember(remembered)
    expected = [answer(plain, name) for name in NAMES]
    assert [answer(remembered, name) for name in NAMES] == expected
    assert [answer(remembered, name) for name in NAMES] == expected
    assert asked == NAMES
    assert found(expected[0]) and not found(expected[3])


def test_a_directory_added_to_the_loader_is_looked_in(tmp_path):
    remembered = new_filter_loader()
    PluginLookups.remember(remembered)
    assert not found(answer(remembered, "qk_shout"))
    (tmp_path / "shout.py").write_text(
        "class FilterModule:\n"
        "    def filters(self):\n"
        "        return {'qk_shout': lambda text: text.upper()}\n"
    )
    remembered.add_directory(str(tmp_path))
    assert answer(remembered, "qk_shout")("a") == "A"


def test_jinjas_own_names_are_asked_in_the_server():
    from jinja2.defaults import DEFAULT_FILTERS

    lookups = PluginLookups()
    asked = []
    remembered = counting(new_filter_loader(), asked)
    lookups.loaders = ((remembered, DEFAULT_FILTERS),)
    lookups.install()
    assert set(asked) == set(DEFAULT_FILTERS)
    asked.clear()
    assert answer(remembered, "selectattr") == answer(new_filter_loader(), "selectattr")
    assert asked == []


def test_an_owner_that_exited_is_gone_before_it_is_reaped():
    """hack/warm_modules.py's command owns its server, and a caller that captures the output
    reaps it only once the server has let go of that output."""
    import subprocess
    import time

    child = subprocess.Popen(["sleep", "30"])
    try:
        assert owner_alive(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while owner_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not owner_alive(child.pid)  # a zombie: not reaped yet
        assert child.poll() is not None
    finally:
        child.kill()
        child.wait()
    assert not owner_alive(child.pid)
