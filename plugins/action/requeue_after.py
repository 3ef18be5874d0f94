# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""requeue_after in the controller process; documented in library/requeue_after.py."""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_action import action_module
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_duration import (
    REQUEUE_ARGUMENT_SPEC,
    requeue_period,
)

ActionModule = action_module(REQUEUE_ARGUMENT_SPEC, requeue_period, needs_client=False)
