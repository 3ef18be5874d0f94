# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Run a quorumkeeper operation in the controller process (action plugin) or as a module.

Under ansible-operator every module is a new Python process (a fork of the warm-start server,
the AnsiballZ payload built, sent and unpacked, the result parsed back: more CPU than a short
call itself). Calls that keep nothing beyond their task (status writes, Events, the requeue
period, the cluster's observation) run as action plugins instead: same arguments, same checks,
same result, no process.
The matching file in library/ documents the action and runs the same operation as a module
where the action plugins are not configured.
"""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_k8s import OperationError
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KubeConfigError,
    KubeError,
    api_client,
)

FAILURES = (OperationError, KubeConfigError, KubeError, ValueError)


def _call(operation, params, check_mode, needs_client):
    if needs_client:
        return operation(api_client(params, fresh=True), params, check_mode)
    return operation(params)


def run_action(action, result, argument_spec, operation, needs_client=True, required_together=None):
    """For ActionModule.run: validate the task's arguments, run ``operation``, merge its result.

    ``operation(client, params, check_mode)``, or ``operation(params)`` without a client.
    """
    from ansible.errors import AnsibleActionFail

    try:
        _, params = action.validate_argument_spec(
            argument_spec=argument_spec, required_together=required_together
        )
    except AnsibleActionFail as exc:
        result.update(failed=True, msg=str(exc))
        return result
    try:
        result.update(_call(operation, dict(params), bool(action._task.check_mode), needs_client))
    except FAILURES as exc:
        result.update(failed=True, msg=str(exc))
    return result


def run_module(module, operation, needs_client=True):
    """For a module's main(): the same operation, reported with exit_json / fail_json."""
    try:
        outcome = _call(operation, module.params, module.check_mode, needs_client)
    except FAILURES as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**outcome)


def action_module(argument_spec, operation, needs_client=True, required_together=None):
    """An ActionModule class that runs ``operation`` in the controller process."""
    from ansible.plugins.action import ActionBase

    class ActionModule(ActionBase):
        TRANSFERS_FILES = False
        _requires_connection = False

        def run(self, tmp=None, task_vars=None):
            result = super().run(tmp, task_vars)
            return run_action(
                self, result, argument_spec, operation, needs_client, required_together
            )

    return ActionModule
