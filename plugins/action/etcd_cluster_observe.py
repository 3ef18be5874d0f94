# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""etcd_cluster_observe in the controller process; documented in library/etcd_cluster_observe.py."""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_action import action_module
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_observe import (
    ARGUMENT_SPEC,
    observe_cluster,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    CONNECTION_REQUIRED_TOGETHER,
)

ActionModule = action_module(
    ARGUMENT_SPEC,
    observe_cluster,
    needs_client=False,
    required_together=CONNECTION_REQUIRED_TOGETHER,
)
