#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: requeue_after
short_description: Ask ansible-operator to reconcile the resource again after a period
description:
  - ansible-operator (v1.42) looks for a task whose action is literally C(requeue_after) (or
    C(operator_sdk.util.requeue_after)) that did not fail, reads C(period) from its result with
    Go's C(time.ParseDuration), sets the reconcile result's RequeueAfter and stops reading the
    run's events. This module validates and normalises I(period) so that parse always works.
  - Use it as the last task of a role, without C(when:) - a skipped task's result has no
    C(period), and the operator would stop at the first such task anyway. ansible-operator
    returns from the reconcile as soon as it sees this result, so nothing may come after it.
  - A period of C(0s) means no requeue: the next reconcile comes from a watch event.
  - Runs in the controller process as an action plugin when C(plugins/action) is configured.
options:
  period:
    description: A Go duration (C(10s), C(1m30s), C(500ms)) or a number of seconds.
    type: raw
    required: true
    aliases: [time]
"""

EXAMPLES = r"""
- name: Check again in 30 seconds
  requeue_after:
    period: 30s
"""

RETURN = r"""
period:
  description: The period as a Go duration string, e.g. C(30s) or C(1m30s).
  type: str
  returned: always
seconds:
  description: The period in seconds.
  type: float
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_action import run_module
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_duration import (
    REQUEUE_ARGUMENT_SPEC,
    requeue_period,
)

# Shared with the action plugin of the same name, which runs in the controller.
ARGUMENT_SPEC = REQUEUE_ARGUMENT_SPEC


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, requeue_period, needs_client=False)


if __name__ == "__main__":
    main()
