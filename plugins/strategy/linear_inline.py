# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""ansible.builtin.linear, except that tasks are decided and run in the playbook process rather
than in a forked worker, where a worker is not needed."""

from __future__ import annotations

DOCUMENTATION = r"""
name: linear_inline
short_description: ansible.builtin.linear, its tasks run in the playbook process, not a worker
description:
  - Runs every task exactly as C(ansible.builtin.linear) does, one task at a time on every host,
    except that the playbook process runs a task itself instead of forking a worker process to
    run it. A worker process costs 20-40 ms of CPU whatever its task does (the fork of a large
    process, the pages both then copy, the result pickled through a queue, the process reaped),
    and the operator's roles run or skip a dozen or more tasks in every reconcile.
  - A task whose C(when) condition is false is reported skipped, and an C(include_tasks) or
    C(include_role) whose condition holds is reported with the file or role it includes (which
    the strategy then loads as it always does), from the condition evaluated on copies of the
    task's variables and connection settings. Only a task without a loop and without
    C(delegate_to) is decided that way, and only when everything evaluates cleanly.
  - Any other task is run by C(TaskExecutor), the worker's own executor, in this process, on a
    copy of the task and of its variables (the executor templates the task in place, which a
    worker does on its own copy), its failures reported as a worker reports them.
  - The copy keeps only the C(module_defaults) of its own action (and every action group's),
    since ansible templates every module's defaults for every task, twice for a module or an
    action. The one difference a playbook can see is that a module's defaults that cannot be
    templated (an undefined variable) fail that module's tasks only, where
    C(ansible.builtin.linear) fails every task with them.
  - Left to a worker, as in C(ansible.builtin.linear) - a task with C(timeout) (its alarm
    signal), C(async) (it forks), C(delegate_to), the C(pause) action (it reads the terminal),
    and every task of a play with more than one host (workers run a task on each host side
    by side).
  - The events, the results (registered variables included) and the callbacks are those a
    worker would have produced.
  - The object ansible-operator reconciles (the extra variable C(_<group>_<kind>), a mapping
    with C(apiVersion), C(kind) and C(metadata)) is data, never a template - its strings are
    marked unsafe, as a module's results are, so that a C({{) written in the object (a backup
    name's C({{ .UID }}), or a template injected by whoever may edit it) is never evaluated by
    the operator - and is handed to templates as it is instead of being walked and copied at
    every read.
author: quorumkeeper contributors
version_added: 0.1.0
"""

import traceback  # noqa: E402

from ansible import constants as C  # noqa: E402, N812 - ansible's own name for it
from ansible.errors import AnsibleConnectionFailure  # noqa: E402
from ansible.executor.task_executor import TaskExecutor  # noqa: E402
from ansible.module_utils.common.text.converters import to_text  # noqa: E402
from ansible.plugins import loader as plugin_loader  # noqa: E402
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule  # noqa: E402
from ansible.template import Templar  # noqa: E402
from ansible.utils.unsafe_proxy import wrap_var  # noqa: E402

PAUSE_ACTIONS = frozenset({"pause", "ansible.builtin.pause", "ansible.legacy.pause"})


def module_defaults_for(task) -> list[dict]:
    """The task's module_defaults without the entries of other modules: those of its action,
    by any of its names (the short one, ``ansible.legacy.`` or a collection's), and every
    action group."""
    action = task.resolved_action or task.action
    short = action.rsplit(".", 1)[-1]
    return [
        {
            name: defaults
            for name, defaults in entry.items()
            if name.startswith("group/") or name.rsplit(".", 1)[-1] == short
        }
        for entry in task.module_defaults or []
    ]


class ReconciledObject(dict):
    """ansible-operator's copy of the reconciled object, every string in it unsafe: ansible
    neither templates it nor walks it to find templates (a copy at every read, some 300 values
    for an EtcdCluster, read 70 times in a reconcile with nothing to do)."""

    __UNSAFE__ = True


def is_reconciled_object(name: str, value) -> bool:
    """Whether an extra variable is the object ansible-operator passes (``_<group>_<kind>``:
    ``_etcd_quorumkeeper_dev_etcdcluster``)."""
    return (
        name.startswith("_")
        and isinstance(value, dict)
        and {"apiVersion", "kind", "metadata"} <= value.keys()
    )


def mark_reconciled_objects_unsafe(extra_vars: dict) -> None:
    for name, value in list(extra_vars.items()):
        if is_reconciled_object(name, value) and not isinstance(value, ReconciledObject):
            extra_vars[name] = ReconciledObject(wrap_var(value))


class StrategyModule(LinearStrategyModule):
    def run(self, iterator, play_context):
        mark_reconciled_objects_unsafe(self._variable_manager._extra_vars)
        return super().run(iterator, play_context)

    def _queue_task(self, host, task, task_vars, play_context):
        result = self._result_without_a_worker(host, task, task_vars, play_context)
        if result is None and not self._runs_here(task):
            return super()._queue_task(host, task, task_vars, play_context)
        # What the base class records and calls before a worker starts, and what the worker
        # sends when its TaskExecutor returns; the results thread takes it from there.
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host,
            "task": task,
            "task_vars": task_vars,
            "play_context": play_context,
        }
        self._tqm.send_callback("v2_runner_on_start", host, task)
        if result is None:
            result, task_fields = self._run_here(host, task, task_vars, play_context)
        else:
            task_fields = task.dump_attrs()
        self._final_q.send_task_result(host.name, task._uuid, result, task_fields=task_fields)
        self._pending_results += 1
        return None

    def _runs_here(self, task):
        """Whether the playbook process runs ``task`` itself, as a worker would: every task but
        those that use what only a process of their own has (an alarm signal for ``timeout``,
        a fork for ``async``, the terminal for ``pause``) or another host's connection. A
        worker process costs 20-40 ms of CPU (the fork of a large process, the pages both then
        copy, the result pickled, the process reaped), and a play of one host waits for every
        task's result before its next task anyway."""
        return not (
            task.delegate_to
            or task.async_val
            or task.timeout
            or task.action in PAUSE_ACTIONS
            # With several hosts, workers run a task on each side by side.
            or len(self._hosts_cache) > 1
        )

    def _run_here(self, host, task, task_vars, play_context):
        """``(result, task_fields)`` of ``task`` run by TaskExecutor in this process, as
        WorkerProcess._run runs it: on copies of the task and its variables (the executor
        templates the task in place), its failures reported as the worker reports them."""
        task = task.copy()
        # Settle every inherited attribute on the copy, then keep only the module_defaults that
        # can apply to this task's action: ansible templates every module's defaults for every
        # task (twice for a module or action), and the operator's playbooks give defaults to
        # a dozen modules (a tenth of a CPU-second per reconcile).
        task.squash()
        task.module_defaults = module_defaults_for(task)
        try:
            result = TaskExecutor(
                host,
                task,
                task_vars.copy(),
                play_context,
                None,  # the worker's stdin: no task run here reads it
                self._loader,
                plugin_loader,
                self._final_q,
                self._variable_manager,
            ).run()
        except AnsibleConnectionFailure:
            result = {"unreachable": True}
        except Exception:  # noqa: BLE001 - reported as the task's failure, as a worker does
            result = {"failed": True, "exception": to_text(traceback.format_exc()), "stdout": ""}
        return result, task.dump_attrs()

    def _result_without_a_worker(self, host, task, task_vars, play_context):
        """What TaskExecutor returns for ``task`` when its condition skips it or it is an
        include; None for a task a worker must run."""
        include = task.action in C._ACTION_ALL_INCLUDES
        if task.loop is not None or task.loop_with or task.delegate_to:
            return None
        if not (include or task.when):
            return None
        # TaskExecutor._execute's steps, on copies (the play context's override returns a new
        # one).
        templar = Templar(loader=self._loader, variables=task_vars)
        variables = task_vars.copy()
        try:
            context = play_context.set_task_and_variable_override(
                task=task, variables=task_vars, templar=templar
            )
            context.post_validate(templar=templar)
            if not context.remote_addr:
                context.remote_addr = host.address
            context.update_vars(variables)
            passed, false_condition = task.evaluate_conditional_with_result(templar, variables)
            if not passed:
                return {
                    "changed": False,
                    "skipped": True,
                    "skip_reason": "Conditional result was False",
                    "false_condition": false_condition,
                    "_ansible_no_log": context.no_log,
                }
            if not include:
                return None
            templar.available_variables = variables
            include_args = task.args.copy()
            if task.action in C._ACTION_INCLUDE_ROLE:
                return {"include_args": include_args, "changed": False}
            include_file = include_args.pop("_raw_params", None)
            if not include_file:
                return None
            return {
                "include": templar.template(include_file),
                "include_args": include_args,
                "changed": False,
            }
        except Exception:  # noqa: BLE001 - the worker reports it, as it would have anyway
            return None
