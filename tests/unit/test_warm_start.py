"""The warm start's pieces that decide (qk_warm_start): which templates are kept compiled and
under what key, which configuration differences send a run to a real ansible-playbook, how a
request travels with its streams, and how an exit status is reported. The runs themselves are
tested in tests/modules/test_warm_start_runs.py."""

import array
import codecs
import os
import signal
import socket

import jinja2
import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_warm_start import (
    RUN_SPECIFIC_SETTINGS,
    ForkedPlaybook,
    TemplateCache,
    cacheable_template,
    configuration_differences,
    encode_request,
    exit_code,
    module_name,
    name_process,
    receive_request,
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
