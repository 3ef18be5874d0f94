# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""When the etcdcluster role writes the cluster's PodDisruptionBudget (qk_disruption says how)."""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_disruption import max_unavailable

# What etcd_cluster_pdb_update returns when the budget is right as it is.
UNCHANGED = -1


def etcd_cluster_pdb_update(observed: dict) -> int:
    """The maxUnavailable to write now (etcd_cluster_observe's result with ``replicas``), or
    UNCHANGED. When etcd does not answer, an existing budget is left as it is (the voters are
    unknown; the last budget written was right for them) and a missing one gets the spec's."""
    info = observed.get("etcd") or {}
    existing = observed.get("pdb") or {}
    if info.get("reachable"):
        voters = sum(1 for m in info.get("members") or [] if not m.get("is_learner"))
    elif existing.get("exists"):
        return UNCHANGED
    else:
        voters = None
    wanted = max_unavailable(voters, observed["replicas"])
    if existing.get("exists") and existing.get("max_unavailable") == wanted:
        return UNCHANGED
    return wanted


class FilterModule:
    def filters(self):
        return {"etcd_cluster_pdb_update": etcd_cluster_pdb_update}
