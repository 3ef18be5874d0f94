# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Replacing a member's pod for a rolling upgrade or a rolling restart onto a new configuration:
what is to be done, decided from the member's ReplicaSet and pods (pure functions, unit tested;
library/etcd_peer_upgrade.py acts).

A member's pod is replaced by deleting its ReplicaSet in the foreground and creating it again:
the ReplicaSet controller does not replace the pod of a ReplicaSet being deleted, and the
ReplicaSet is only gone once its pod is, so the new etcd never starts beside the old one on the
same volume (two processes on one data directory would wait on each other's file locks, and
both would be in the member's DNS name for a moment). An operator stopped half-way leaves at
worst a member without a ReplicaSet, which the etcdcluster role recreates first of all.
"""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    CONFIG_HASH_ANNOTATION,
)

ETCD_CONTAINER = "etcd"


def pod_image(pod):
    """The image of a pod's etcd container ("" when it has none)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == ETCD_CONTAINER:
            return container.get("image") or ""
    return ""


def restart_plan(replicaset, pods, image, config_hash=None):
    """What replacing the member's pod with one running ``image`` (and, unless ``config_hash``
    is None, started with that configuration) still needs.

    ``replicaset`` is the member's ReplicaSet or None, ``pods`` its pods. Returns
    ``{"delete": bool, "create": bool, "stale": [pod names]}``: delete the ReplicaSet (a pod
    runs another image; a ReplicaSet already being deleted is waited for instead) and create
    it again once it and its pods are gone. Neither when every pod already runs ``image``: an
    existing ReplicaSet then only needs its template patched, never a restart.
    """
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    stale = [
        p["metadata"]["name"]
        for p in live
        if pod_image(p) != image
        or (
            config_hash is not None
            and ((p.get("metadata") or {}).get("annotations") or {}).get(CONFIG_HASH_ANNOTATION)
            != config_hash
        )
    ]
    deleting = bool(replicaset and (replicaset.get("metadata") or {}).get("deletionTimestamp"))
    if stale or deleting:
        return {"delete": bool(replicaset) and not deleting, "create": True, "stale": stale}
    return {"delete": False, "create": replicaset is None, "stale": []}
