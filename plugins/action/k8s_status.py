# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""k8s_status in the controller process; documented in library/k8s_status.py."""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_action import action_module
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_k8s import (
    STATUS_ARGUMENT_SPEC,
    write_status,
)

ActionModule = action_module(STATUS_ARGUMENT_SPEC, write_status)
