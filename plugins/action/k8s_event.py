# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""k8s_event in the controller process; documented in library/k8s_event.py."""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_action import action_module
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_k8s import (
    EVENT_ARGUMENT_SPEC,
    record_event,
)

ActionModule = action_module(EVENT_ARGUMENT_SPEC, record_event)
