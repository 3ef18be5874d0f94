# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""An etcd member's Kubernetes objects (EtcdPeer, PersistentVolumeClaim, ReplicaSet), created,
repaired or deleted as etcd_peer and etcd_member_join do it."""

from __future__ import annotations

import copy
import time

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import KubeError
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import (
    PEER_LABEL,
    claim_lost,
    cluster_annotations,
    is_subset,
    member_labels,
    never_ran,
    owner_reference,
    read_member_claim,
    render_pvc,
    render_replicaset,
    summarize_pvc,
)


class Member:
    """An etcd member's EtcdPeer, PersistentVolumeClaim and ReplicaSet, as etcd_peer and
    etcd_member_join ensure them (``params``: etcd_peer's options)."""

    def __init__(self, module, cached, direct, params=None):
        self.module = module
        self.p = params or module.params
        self.cached, self.direct = cached, direct
        self.result = {
            "changed": False,
            "created": [],
            "patched": [],
            "deleted": [],
            "data_lost": False,
        }

    def _did(self, what, kind):
        self.result[what].append(kind)
        self.result["changed"] = True
        return not self.module.check_mode

    def _create(self, client, obj):
        """Create; an object someone else created in the meantime is read back instead."""
        try:
            return client.create(obj)
        except KubeError as exc:
            if not exc.already_exists:
                raise
        meta = obj["metadata"]
        return self.direct.get(obj["apiVersion"], obj["kind"], meta["name"], meta["namespace"])

    # -- present ----------------------------------------------------------------------------
    def present(self):
        p = self.p
        peer = self.cached.get(p["api_version"], "EtcdPeer", p["name"], p["namespace"])
        if peer is None and not p["spec"]:
            # Deleted since the reconcile started (a scale-down): nothing left to ensure.
            self.result["gone"] = True
            return self.result
        if peer is None:
            peer = {
                "apiVersion": p["api_version"],
                "kind": "EtcdPeer",
                "metadata": {
                    "name": p["name"],
                    "namespace": p["namespace"],
                    "labels": {**member_labels(p["spec"]["clusterName"], p["name"]), **p["labels"]},
                },
                "spec": p["spec"],
            }
            if self._did("created", "EtcdPeer"):
                # Through the proxy: it adds the reconciled EtcdCluster as owner and watches peers.
                peer = self._create(self.cached, peer)
        if peer["metadata"].get("deletionTimestamp"):
            self.result["deleting"] = True
            return self.result
        if p["update_image"] and p["spec"]:
            peer = self._update_image(peer)
        spec = peer["spec"]
        self.result["uid"] = peer["metadata"].get("uid", "")
        recorded = (peer.get("status") or {}).get("pvcUID") or ""

        pvc = read_member_claim(self.cached, self.direct, p["name"], p["namespace"], recorded)
        if recorded and claim_lost(pvc, recorded):
            self.result["data_lost"] = True
            self.result["pvc"] = summarize_pvc(pvc)
            return self.result
        if pvc is None:
            if self._did("created", "PersistentVolumeClaim"):
                # Directly, not through the proxy: the claim must not be owned by anything.
                pvc = self._create(
                    self.direct, render_pvc(p["name"], p["namespace"], spec, p["settings"])
                )
        elif not summarize_pvc(pvc)["annotated"]:
            # A claim made before the annotations existed: add them so its deletion is seen.
            annotations = cluster_annotations(spec["clusterName"], p["namespace"])
            if self._did("patched", "PersistentVolumeClaim"):
                pvc = self.direct.patch(
                    "v1",
                    "PersistentVolumeClaim",
                    p["name"],
                    {"metadata": {"annotations": annotations}},
                    p["namespace"],
                )
        self.result["pvc"] = summarize_pvc(pvc)
        if (
            pvc
            and not recorded
            and "uid" in peer["metadata"]
            and self._did("patched", "EtcdPeer/status")
        ):
            self.direct.patch(
                p["api_version"],
                "EtcdPeer",
                p["name"],
                {"status": {"pvcUID": pvc["metadata"]["uid"]}},
                p["namespace"],
                subresource="status",
            )

        wanted = render_replicaset(p["name"], p["namespace"], spec, p["settings"])
        # Read from the API server, not through the proxy: a read through the proxy would make
        # ansible-operator watch ReplicaSets for EtcdPeers, and every status update of a new
        # ReplicaSet (its first ones change managedFields) would reconcile the peer again.
        replicaset = self.direct.get("apps/v1", "ReplicaSet", p["name"], p["namespace"])
        if replicaset is None:
            if "uid" in peer["metadata"]:
                wanted["metadata"]["ownerReferences"] = [owner_reference(peer)]
            if self._did("created", "ReplicaSet"):
                self._create(self.direct, wanted)
        elif not is_subset(
            wanted["spec"]["template"], replicaset["spec"]["template"]
        ) and self._did("patched", "ReplicaSet"):
            self.direct.patch(
                "apps/v1",
                "ReplicaSet",
                p["name"],
                {"spec": {"template": wanted["spec"]["template"]}},
                p["namespace"],
            )
            if p["update_image"]:
                self._replace_unstarted_pods()
        return self.result

    def _update_image(self, peer):
        p = self.p
        image = {k: p["spec"][k] for k in ("version", "repository") if k in p["spec"]}
        if all(peer["spec"].get(k) == v for k, v in image.items()):
            return peer
        if not self._did("patched", "EtcdPeer"):
            return dict(peer, spec={**peer["spec"], **image})
        return self.direct.patch(
            p["api_version"], "EtcdPeer", p["name"], {"spec": image}, p["namespace"]
        )

    def _replace_unstarted_pods(self):
        """Delete the member's pods whose etcd never ran: the ReplicaSet makes new ones from
        the patched template. A pod that ever ran etcd is left alone."""
        p = self.p
        selector = f"{PEER_LABEL}={p['name']}"
        for pod in self.direct.list("v1", "Pod", p["namespace"], label_selector=selector):
            if never_ran(pod) and self._did("deleted", "Pod"):
                self.direct.delete("v1", "Pod", pod["metadata"]["name"], p["namespace"])

    # -- absent -----------------------------------------------------------------------------
    def absent(self):
        p = self.p
        peer = self.direct.get(p["api_version"], "EtcdPeer", p["name"], p["namespace"])
        deleting = peer is None or peer["metadata"].get("deletionTimestamp")
        if not deleting and self._did("deleted", "EtcdPeer"):
            self.direct.delete(
                p["api_version"], "EtcdPeer", p["name"], p["namespace"], "Foreground"
            )
        # The ReplicaSet goes with its owner; deleting it here as well also covers a
        # ReplicaSet left behind by an interrupted earlier attempt.
        replicaset = self.direct.get("apps/v1", "ReplicaSet", p["name"], p["namespace"])
        if replicaset is not None and self._did("deleted", "ReplicaSet"):
            self.direct.delete("apps/v1", "ReplicaSet", p["name"], p["namespace"], "Foreground")
        if not self.module.check_mode:
            if p.get("pod_grace_seconds") is not None:
                self._shorten_pods_grace(p["pod_grace_seconds"])
            self._wait_for_pods_gone()
        if p["delete_data"]:
            pvc = self.direct.get("v1", "PersistentVolumeClaim", p["name"], p["namespace"])
            present = pvc is not None and not pvc["metadata"].get("deletionTimestamp")
            if present and self._did("deleted", "PersistentVolumeClaim"):
                self.direct.delete(
                    "v1",
                    "PersistentVolumeClaim",
                    p["name"],
                    p["namespace"],
                    uid=pvc["metadata"]["uid"],
                )
        return self.result

    def _shorten_pods_grace(self, grace):
        """Delete the member's pods with ``grace`` seconds, also those already terminating with
        a longer grace period: a member whose data is gone or that left etcd has nothing to
        shut down cleanly, and one cut off the network took 15 s of its 30 to stop, which its
        replacement waited for (its claim of the same name is freed only once the pod is
        gone)."""
        p = self.p
        selector = f"{PEER_LABEL}={p['name']}"
        for pod in self.direct.list("v1", "Pod", p["namespace"], label_selector=selector):
            meta = pod["metadata"]
            current = meta.get("deletionGracePeriodSeconds")
            if current is None or current > grace:
                self.direct.delete(
                    "v1", "Pod", meta["name"], p["namespace"], uid=meta["uid"], grace=grace
                )

    def _wait_for_pods_gone(self):
        p = self.p
        deadline = time.monotonic() + p["wait_timeout"]
        while True:
            pods = self.direct.list(
                "v1", "Pod", p["namespace"], label_selector=f"{PEER_LABEL}={p['name']}"
            )
            if not pods:
                return
            if time.monotonic() >= deadline:
                names = ", ".join(pod["metadata"]["name"] for pod in pods)
                self.module.fail_json(
                    msg=f"member {p['name']}: pods {names} still exist after "
                    f"{p['wait_timeout']:.0f}s; its data is kept until they are gone "
                    "(check the node they run on)",
                    **self.result,
                )
            time.sleep(0.2)


def parse_members(entries):
    """``[(name, peer URL)]`` of ``name=URL`` entries; ValueError for one that is not."""
    parsed = []
    for entry in entries:
        name, _, url = entry.partition("=")
        if not name or "://" not in url:
            raise ValueError(f"member {entry!r} is not <name>=<peer URL>")
        parsed.append((name, url))
    return parsed


def spec_up_to(spec, names, index):
    """The spec of the ``index``-th member: the last member's, its static initial cluster
    without the members that join after it."""
    later = set(names[index + 1 :])
    static = spec["bootstrap"]["static"]
    own = copy.deepcopy(spec)
    own["bootstrap"]["static"]["initialCluster"] = [
        entry for entry in static["initialCluster"] if entry["name"] not in later
    ]
    return own
