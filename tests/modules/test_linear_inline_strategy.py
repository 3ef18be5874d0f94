"""The playbooks' strategy (plugins/strategy/linear_inline.py) against ansible.builtin.linear:
one playbook run by the ansible-runner command with each, as ansible-operator runs ours (in a
process of its own: ansible-runner installs signal handlers where it runs). Every event
ansible-operator and the callbacks see (which task, ok/skipped/failed, the result, registered
variables printed back, what an include loaded) must be the same, and a task its condition skips
and an include must have been decided by the playbook process itself, not a forked worker (a
test plugin records which process evaluated their conditions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansibleenv import REPO

RECORDING_TEST = '''
import os


def recorded_false(label, where):
    """False, after writing which process evaluated it (the condition of the task ``label``)."""
    with open(os.path.join(where, label), "w") as out:
        out.write(str(os.getpid()))
    return False


def recorded_true(label, where):
    """True, after writing which process templated the task ``label``."""
    recorded_false(label, where)
    return True


class TestModule:
    def tests(self):
        return {"recorded_false": recorded_false, "recorded_true": recorded_true}
'''

TASKS = """
- name: Skipped by its condition, registered
  ansible.builtin.command: echo never
  register: skipped_command
  when: "'skipped' is recorded_false(record_dir)"

- name: Print what was registered for the skipped task
  ansible.builtin.debug:
    var: skipped_command

- name: Skipped by the second of two conditions
  ansible.builtin.set_fact:
    never_set: true
  when:
    - true
    - "'second' is recorded_false(record_dir)"

- name: Runs, its condition true
  ansible.builtin.set_fact:
    ran: "{{ 41 + 1 }}"
  when: inventory_hostname == 'localhost'

- name: A block its condition skips
  when: ran | int != 42
  block:
    - name: Inside the skipped block
      ansible.builtin.debug:
        msg: never

- name: An include its condition skips
  ansible.builtin.include_tasks: never.yml
  when: ran | int != 42

- name: An include whose file is templated, its condition true
  ansible.builtin.include_tasks: "{{ 'included' }}.yml"
  vars:
    included_value: "{{ ran }}"
  when: "not ('include' is recorded_false(record_dir))"

- name: An include of a role
  ansible.builtin.include_role:
    name: probe_role
  when: ran | int == 42

- name: A loop whose items are skipped (left to a worker)
  ansible.builtin.debug:
    msg: "{{ item }}"
  loop: [1, 2]
  when: item > 5

- name: A secret task skipped
  ansible.builtin.debug:
    msg: secret
  no_log: true
  when: ran | int != 42

- name: A condition that fails to evaluate (left to a worker)
  ansible.builtin.debug:
    msg: never
  when: not_defined_anywhere.attribute
  ignore_errors: true

- name: A condition on a registered skipped result
  ansible.builtin.debug:
    msg: "the command was skipped: {{ skipped_command.skip_reason }}"
  when: skipped_command is skipped

- name: A module that runs, its result registered
  ansible.builtin.command: "echo {{ 'module' is recorded_true(record_dir) }}"
  register: echoed
  changed_when: false

- name: Print what the module returned
  ansible.builtin.debug:
    msg: "{{ echoed.stdout }} {{ echoed.rc }}"

- name: A module that fails, ignored
  ansible.builtin.command: "false"
  ignore_errors: "{{ 'failing' is recorded_true(record_dir) }}"

- name: Retried until its result says so
  ansible.builtin.set_fact:
    tries: "{{ (tries | default(0) | int) + 1 }}"
  register: retried
  until: retried.attempts | default(1) >= 2
  retries: 3
  delay: 0

- name: A loop whose items run
  ansible.builtin.debug:
    msg: "item {{ item }} {{ 'loop' is recorded_true(record_dir) }}"
  loop: [1, 2]

- name: A secret task that runs
  ansible.builtin.set_fact:
    secret_value: "{{ 'hidden' if 'secret' is recorded_true(record_dir) }}"
  no_log: true

- name: A task with a timeout (left to a worker, which the alarm of its timeout may end)
  ansible.builtin.debug:
    msg: "{{ 'timeout' is recorded_true(record_dir) }}"
  timeout: 30

- name: An assertion whose message comes from module_defaults
  ansible.builtin.assert:
    that: ran | int == 42

- name: A task that fails, its failure read back
  ansible.builtin.assert:
    that: ran | int == 43
    fail_msg: "ran is {{ ran }}"
  register: failed_assert
  ignore_errors: true

- name: Print the failure
  ansible.builtin.debug:
    msg: "{{ failed_assert.msg }}"
"""


def playbook(strategy: str, records: Path) -> str:
    return f"""---
- name: Strategy probe
  hosts: localhost
  gather_facts: false
  strategy: {strategy}
  vars:
    record_dir: {records}
  # Defaults of a module the tasks use, and of one they do not: the strategy templates only
  # those of each task's own action.
  module_defaults:
    ansible.builtin.assert:
      success_msg: "{{{{ 'success from the defaults of ' ~ inventory_hostname }}}}"
    ansible.builtin.uri:
      url: "{{{{ 'http://example.invalid/' ~ record_dir }}}}"
  tasks:
    - name: Probe the tasks
      ansible.builtin.include_tasks: tasks.yml
"""


def run(tmp_path: Path, strategy: str):
    """One run, with its own ident in one private data directory: the project (and so every
    path an error message names) is the same for both strategies."""
    project = tmp_path / "project"
    if not project.exists():
        (project / "test_plugins").mkdir(parents=True)
        (project / "test_plugins" / "recording.py").write_text(RECORDING_TEST)
        (project / "tasks.yml").write_text(TASKS)
        (project / "never.yml").write_text("- name: Never\n  ansible.builtin.debug:\n    msg: x\n")
        (project / "included.yml").write_text(
            "- name: Included\n  ansible.builtin.debug:\n    msg: 'included {{ included_value }}'\n"
        )
        (project / "roles" / "probe_role" / "tasks").mkdir(parents=True)
        (project / "roles" / "probe_role" / "tasks" / "main.yml").write_text(
            "- name: In the role\n  ansible.builtin.debug:\n    msg: in the role\n"
        )
        (tmp_path / "inventory").mkdir()
        (tmp_path / "inventory" / "hosts").write_text(
            "localhost ansible_connection=local "
            "ansible_python_interpreter={{ansible_playbook_python}}"
        )
    ident = strategy.replace(".", "_")
    records = tmp_path / "records" / ident
    records.mkdir(parents=True)
    (project / f"{ident}.yml").write_text(playbook(strategy, records))
    venv = Path(sys.executable).parent
    env = dict(
        os.environ,
        # ansible-runner runs ansible-playbook by name: this interpreter's.
        PATH=f"{venv}{os.pathsep}{os.environ['PATH']}",
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_TEST_PLUGINS=str(project / "test_plugins"),
        ANSIBLE_HOME=str(tmp_path / "home"),
    )
    done = subprocess.run(
        [str(venv / "ansible-runner"), "run", str(tmp_path), "-p", f"{ident}.yml", "-i", ident],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    job_events = tmp_path / "artifacts" / ident / "job_events"
    events = sorted(
        (json.loads(f.read_text()) for f in job_events.glob("*.json")),
        key=lambda event: event["counter"],
    )
    playbook_pid = next(e["pid"] for e in events if e["event"] == "playbook_on_start")
    decided_by = {p.name: int(p.read_text()) for p in records.iterdir()}
    return done.returncode, events, playbook_pid, decided_by


def task_events(events) -> list[tuple]:
    """Each task's events: what, which task, and the result without what differs between runs."""
    varying = {"start", "end", "delta", "invocation"}
    seen = []
    for event in events:
        data = event.get("event_data", {})
        if not event["event"].startswith(
            ("runner_on_", "runner_item_", "runner_retry", "playbook_on_task")
        ):
            continue
        result = {k: v for k, v in (data.get("res") or {}).items() if k not in varying}
        seen.append(
            (
                event["event"],
                data.get("task"),
                data.get("task_action"),
                json.dumps(result, sort_keys=True),
            )
        )
    return seen


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("strategies")
    return {
        "linear": run(tmp, "ansible.builtin.linear"),
        "inline": run(tmp, "quorumkeeper.etcd.linear_inline"),
    }


def test_every_event_is_the_one_linear_sends(both):
    linear_rc, linear_events, _, _ = both["linear"]
    inline_rc, inline_events, _, _ = both["inline"]
    assert linear_rc == inline_rc == 0
    linear, inline = task_events(linear_events), task_events(inline_events)
    assert inline == linear
    # The probe covered what it means to: skips decided by either, a registered skip read back,
    # a secret task, an ignored failure, a loop's skipped items.
    kinds = {(event, task) for event, task, *_ in inline}
    assert ("runner_on_skipped", "Skipped by its condition, registered") in kinds
    assert ("runner_on_ok", "A condition on a registered skipped result") in kinds
    assert ("runner_on_failed", "A condition that fails to evaluate (left to a worker)") in kinds
    assert ("runner_item_on_skipped", "A loop whose items are skipped (left to a worker)") in kinds
    assert ("runner_on_skipped", "A secret task skipped") in kinds
    assert ("runner_on_ok", "Included") in kinds
    assert ("runner_on_ok", "In the role") in kinds
    assert ("runner_on_failed", "A module that fails, ignored") in kinds
    assert ("runner_retry", "Retried until its result says so") in kinds
    assert ("runner_item_on_ok", "A loop whose items run") in kinds
    assert ("runner_on_ok", "Print the failure") in kinds
    defaulted = next(
        result
        for event, task, _, result in inline
        if task == "An assertion whose message comes from module_defaults"
        and event == "runner_on_ok"
    )
    assert "success from the defaults of localhost" in defaulted
    printed = next(
        result
        for event, task, _, result in inline
        if task == "Print what was registered for the skipped task" and event == "runner_on_ok"
    )
    assert '"skipped": true' in printed and "Conditional result was False" in printed


def test_tasks_are_decided_and_run_without_a_worker_unless_they_need_one(both):
    _, _, linear_pid, linear_decided = both["linear"]
    _, _, inline_pid, inline_decided = both["inline"]
    here = {"skipped", "second", "include", "module", "failing", "loop", "secret"}
    assert set(linear_decided) == set(inline_decided) == {*here, "timeout"}
    # ansible.builtin.linear forks a worker for every task; ours decides skips and includes and
    # runs the tasks in the playbook process, except one whose timeout needs a process of its
    # own.
    assert all(pid != linear_pid for pid in linear_decided.values())
    assert {label: inline_decided[label] for label in here} == dict.fromkeys(here, inline_pid)
    assert inline_decided["timeout"] != inline_pid


RECONCILED = {
    "apiVersion": "probe.example/v1",
    "kind": "Probe",
    "metadata": {"name": "p", "namespace": "ns", "annotations": {"note": "{{ 6 * 7 }}"}},
    "spec": {"name": "{{ 6 * 7 }}", "items": ["{% if true %}x{% endif %}", 3]},
}

OBJECT_PLAYBOOK = """---
- name: The reconciled object is data
  hosts: localhost
  gather_facts: false
  strategy: {strategy}
  vars:
    probe_spec: "{{{{ _probe_example_probe.spec | combine({{'added': 1}}) }}}}"
  tasks:
    - name: Read the object
      ansible.builtin.set_fact:
        read_whole: "{{{{ _probe_example_probe }}}}"
        read_spec: "{{{{ probe_spec }}}}"
        read_note: "{{{{ _probe_example_probe.metadata.annotations.note }}}}"
        read_name: "{{{{ _probe_example_probe.metadata.name ~ '-' ~ other }}}}"
        read_other: "{{{{ other }}}}"
"""


def facts_set(tmp_path: Path, strategy: str) -> dict:
    """The facts the object playbook set with ``strategy``, the object and a plain extra
    variable given as ansible-operator gives them (-e @file)."""
    ident = strategy.replace(".", "_")
    (tmp_path / f"{ident}.yml").write_text(OBJECT_PLAYBOOK.format(strategy=strategy))
    (tmp_path / "extravars.json").write_text(
        json.dumps({"_probe_example_probe": RECONCILED, "other": "{{ 1 + 1 }}"})
    )
    venv = Path(sys.executable).parent
    done = subprocess.run(
        [
            str(venv / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"@{tmp_path / 'extravars.json'}",
            str(tmp_path / f"{ident}.yml"),
        ],
        env=dict(
            os.environ,
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_HOME=str(tmp_path / "home"),
            ANSIBLE_STDOUT_CALLBACK="json",
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    task = json.loads(done.stdout)["plays"][0]["tasks"][0]
    return task["hosts"]["localhost"]["ansible_facts"]


def test_the_reconciled_object_is_never_templated(tmp_path):
    """ansible-operator's copy of the object holds what users wrote: a ``{{`` in it is text
    (ansible.builtin.linear evaluates it, ours does not), everything else reads the same."""
    inline = facts_set(tmp_path, "quorumkeeper.etcd.linear_inline")
    assert inline["read_whole"] == RECONCILED
    assert inline["read_spec"] == {**RECONCILED["spec"], "added": 1}
    assert inline["read_note"] == "{{ 6 * 7 }}"
    # Names, and every other extra variable, as before.
    assert inline["read_name"] == "p-2" and inline["read_other"] == "2"
    linear = facts_set(tmp_path, "ansible.builtin.linear")
    assert linear["read_note"] == "42" and linear["read_spec"]["name"] == "42"
    assert linear["read_name"] == inline["read_name"]
