# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""An EtcdCluster's PodDisruptionBudget: how many member pods a voluntary disruption (kubectl
drain, the eviction API) may take at once without costing the quorum (pure functions, unit
tested; library/etcd_cluster_pdb.py writes it, plugins/filter/etcd_disruption.py decides when).

``maxUnavailable``, not ``minAvailable``: the budget counts every member pod, learners too,
but only voting members make the quorum. With ``minAvailable`` = quorum, a cluster of 3 voters
and 1 learner would let a drain evict 2 voters (4 pods - 2) and keep the learner; with
``maxUnavailable`` = the voters' fault tolerance, it never takes more voters than the quorum
can spare, whatever the learners. A pod already down counts against the budget, so a drain
waits while a member is down or restarting (an upgrade, a replacement).
"""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    CLUSTER_LABEL,
    cluster_owner_reference,
    member_labels,
    tolerable_failures,
)

PDB_API_VERSION = "policy/v1"


def max_unavailable(voters, replicas):
    """Member pods a voluntary disruption may take at once.

    ``voters``: the voting members etcd reports now (None when etcd does not answer: the
    spec's replicas stand in). The fault tolerance of the smaller of the voters and
    spec.replicas, so that it is already right before a scale-down removes a member, and
    never more than the voters that exist can spare during a scale-up (a learner does not
    count until it is promoted). A one-member cluster gets 1: it has no redundancy to protect,
    and a budget of 0 would block every node drain forever (its pod is evicted, the cluster
    is down until the pod runs again on its volume). Two members get 0: either one is half the
    quorum.
    """
    replicas = max(int(replicas), 1)
    voters = replicas if voters is None else int(voters)
    if voters <= 1:
        return 1
    members = min(voters, replicas)
    return tolerable_failures(members, members)


def pdb_name(cluster):
    return cluster


def render_pdb(cluster, namespace, unavailable, owner_uid, api_version):
    """The budget over the cluster's member pods (their app and cluster labels: restore and
    verification pods carry other app names), owned by the EtcdCluster so that it goes with
    it. ``AlwaysAllow`` lets a drain evict a member pod that is not ready anyway (crash
    looping, an image it cannot pull): it serves nothing, and with the default policy it
    would block the drain of its node while the budget is short."""
    return {
        "apiVersion": PDB_API_VERSION,
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": pdb_name(cluster),
            "namespace": namespace,
            "labels": member_labels(cluster),
            "ownerReferences": [cluster_owner_reference(cluster, owner_uid, api_version)],
        },
        "spec": {
            "maxUnavailable": int(unavailable),
            "selector": {"matchLabels": {"app.kubernetes.io/name": "etcd", CLUSTER_LABEL: cluster}},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def summarize_pdb(pdb):
    """What the etcdcluster role compares with the budget it wants."""
    if pdb is None:
        return {"exists": False, "max_unavailable": None, "disruptions_allowed": None}
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    return {
        "exists": True,
        "max_unavailable": spec.get("maxUnavailable"),
        "disruptions_allowed": status.get("disruptionsAllowed"),
    }


def pdb_differs(existing, wanted):
    """Whether an existing budget says something else than ``wanted`` (its spec)."""
    spec = (existing or {}).get("spec") or {}
    return any(spec.get(k) != v for k, v in wanted["spec"].items())
