# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""k8s_status in the controller process; documented in library/k8s_status.py."""

from __future__ import annotations

import os

import ansible.module_utils

_OURS = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "module_utils")
if _OURS not in ansible.module_utils.__path__:  # the controller does not search module_utils paths
    ansible.module_utils.__path__.append(_OURS)

from ansible.module_utils.qk_action import action_module  # noqa: E402
from ansible.module_utils.qk_k8s import STATUS_ARGUMENT_SPEC, write_status  # noqa: E402

ActionModule = action_module(STATUS_ARGUMENT_SPEC, write_status)
