# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The etcdcluster role's planner as Jinja2 filters: ``etcd_cluster_plan`` (the next quorum-safe
step, qk_plan: its rules and their order) and ``etcd_cluster_report`` (the status, conditions
and Events after a round, qk_report)."""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan import etcd_cluster_plan
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_report import (
    etcd_cluster_report,
)


class FilterModule:
    def filters(self):
        return {
            "etcd_cluster_plan": etcd_cluster_plan,
            "etcd_cluster_report": etcd_cluster_report,
        }
