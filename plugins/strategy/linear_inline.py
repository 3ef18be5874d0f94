# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""ansible.builtin.linear, except that skipped tasks and includes are decided without a worker."""

from __future__ import annotations

DOCUMENTATION = r"""
name: linear_inline
short_description: ansible.builtin.linear, with skipped tasks and includes decided without a worker
description:
  - Runs every task exactly as C(ansible.builtin.linear) does, one task at a time on every host,
    except for two kinds of task, whose result the playbook process works out itself instead of
    forking a worker process to do it. A task whose C(when) condition is false is reported
    skipped. An C(include_tasks) or C(include_role) whose condition holds is reported with the
    file or role it includes, which the strategy then loads as it always does.
  - For either, the worker would do nothing but evaluate the condition (and template the
    included file's name), yet a worker process costs about 20 ms of CPU, more than twice what
    it does. The operator's roles skip or include a dozen or more tasks in every reconcile.
  - The events, the results (registered variables included) and the callbacks are those the
    worker would have produced, the result built the way C(TaskExecutor) builds it.
  - Only a task without a loop and without C(delegate_to) is decided here, and only when
    everything evaluates cleanly. Anything else (a true condition of any other task, an error)
    goes to a worker as in C(ansible.builtin.linear), which evaluates it again and reports what
    it finds. Evaluating changes nothing, since the task's variables and connection settings
    are evaluated on copies, as the worker does on its own.
  - A task of any other kind whose condition holds has it evaluated twice, here and in its
    worker, which costs what evaluating it costs (a few ms for the operator's conditions); the
    operator's roles skip far more tasks than they run with a condition.
author: quorumkeeper contributors
version_added: 0.1.0
"""

from ansible import constants as C  # noqa: E402, N812 - ansible's own name for it
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule  # noqa: E402
from ansible.template import Templar  # noqa: E402


class StrategyModule(LinearStrategyModule):
    def _queue_task(self, host, task, task_vars, play_context):
        result = self._result_without_a_worker(host, task, task_vars, play_context)
        if result is None:
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
        self._final_q.send_task_result(host.name, task._uuid, result, task_fields=task.dump_attrs())
        self._pending_results += 1
        return None

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
