# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""k8s_report in the controller process; documented in library/k8s_report.py."""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_action import action_module
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_k8s import (
    REPORT_ARGUMENT_SPEC,
    write_report,
)

ActionModule = action_module(REPORT_ARGUMENT_SPEC, write_report)
