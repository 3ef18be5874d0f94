#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_peer
short_description: Ensure an etcd member's EtcdPeer, PersistentVolumeClaim and ReplicaSet
description:
  - C(present) makes sure the member runs. It creates the EtcdPeer from I(spec) when it does not
    exist (through ansible-operator's proxy, so that it is owned by the reconciled EtcdCluster),
    then the member's PersistentVolumeClaim and its ReplicaSet of one pod, and records the
    claim's UID in the EtcdPeer's C(status.pvcUID).
  - The claim is created with no owner reference, so deleting the EtcdCluster never deletes the
    data, and with the C(operator-sdk/primary-resource) annotations, so that its deletion makes
    ansible-operator reconcile the EtcdCluster.
  - >-
    A claim is never re-created for a member whose recorded claim is gone or replaced: the data
    is lost, the module reports C(data_lost) and creates nothing (the EtcdCluster replaces the
    member instead).
  - The ReplicaSet is owned by the EtcdPeer. An existing ReplicaSet whose pod template differs
    from what the EtcdPeer asks for is patched (the running pod is not restarted).
  - C(absent) deletes the EtcdPeer and its ReplicaSet, waits until the member's pods are gone,
    and with I(delete_data) deletes the claim too.
  - Check mode reports what would be created, patched or deleted.
options:
  name:
    description: Name of the EtcdPeer (the member's name). Required unless I(members) is given.
    type: str
  members:
    description:
      - Several members at once (each with its I(name) and optional I(spec)), all with the
        other options given; saves a module run per member when a cluster starts.
    type: list
    elements: dict
    suboptions:
      name:
        description: Name of the EtcdPeer.
        type: str
        required: true
      spec:
        description: As I(spec).
        type: dict
  namespace:
    description: Namespace of the EtcdPeer.
    type: str
    required: true
  state:
    description: Whether the member should exist.
    type: str
    choices: [present, absent]
    default: present
  spec:
    description:
      - The EtcdPeer's spec; used to create it when it does not exist. When omitted its own
        spec is used, and an EtcdPeer that does not exist (any more) is left alone.
    type: dict
  update_image:
    description:
      - Move an existing EtcdPeer to the version and repository of I(spec), and replace its
        pods whose etcd container never ran (they could not pull the old image). Only for
        members that never started; a running member changes version by an upgrade.
    type: bool
    default: false
  labels:
    description:
      - Labels of a newly created EtcdPeer, besides the ones it always gets
        (C(etcd.quorumkeeper.dev/cluster), C(etcd.quorumkeeper.dev/peer), C(app.kubernetes.io/*)).
    type: dict
    default: {}
  delete_data:
    description: With C(state=absent), also delete the member's PersistentVolumeClaim.
    type: bool
    default: false
  wait_timeout:
    description: With C(state=absent), seconds to wait for the member's pods to be gone.
    type: float
    default: 120
  settings:
    description:
      - Ports, data directory, grace period, default repository and default storage of the
        member's pod (see C(qk_members.DEFAULTS)); the roles pass their defaults.
    type: dict
    default: {}
  kubeconfig:
    description:
      - >-
        A kubeconfig for every call. Default: ansible-operator's proxy (C(K8S_AUTH_KUBECONFIG))
        for reads and owned creations, the API server itself for the claim and ReplicaSet.
    type: path
extends_documentation_fragment:
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.kube_client.api_version
requirements: [PyYAML]
"""

EXAMPLES = r"""
- name: Create member my-cluster-3 with its volume and pod
  etcd_peer:
    name: my-cluster-3
    namespace: default
    spec: "{{ peer_spec }}"

- name: Remove member my-cluster-3 and its data
  etcd_peer:
    name: my-cluster-3
    namespace: default
    state: absent
    delete_data: true
"""

RETURN = r"""
members:
  description: With I(members), the result of each member (the fields below), in order.
  type: list
  elements: dict
  returned: with members
created:
  description: Kinds created (C(EtcdPeer), C(PersistentVolumeClaim), C(ReplicaSet)).
  type: list
  elements: str
  returned: always
patched:
  description: Kinds patched.
  type: list
  elements: str
  returned: always
deleted:
  description: Kinds deleted (state=absent; C(Pod) for a pod replaced by I(update_image)).
  type: list
  elements: str
  returned: always
data_lost:
  description: The member's recorded claim is gone or was replaced; nothing was created.
  type: bool
  returned: always
pvc:
  description: The claim (exists, uid, phase, deleting).
  type: dict
  returned: state=present
uid:
  description: UID of the EtcdPeer.
  type: str
  returned: state=present and the EtcdPeer exists
gone:
  description: The EtcdPeer does not exist and no spec was given; nothing was done.
  type: bool
  returned: when true
deleting:
  description: The EtcdPeer is being deleted; nothing was done.
  type: bool
  returned: when true
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import API_VERSION
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KUBE_CLIENT_ARGUMENT_SPEC,
    KubeConfigError,
    KubeError,
    operator_clients,
)
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


ARGUMENT_SPEC = {
    "name": {"type": "str"},
    "namespace": {"type": "str", "required": True},
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "spec": {"type": "dict"},
    "members": {
        "type": "list",
        "elements": "dict",
        "options": {
            "name": {"type": "str", "required": True},
            "spec": {"type": "dict"},
        },
    },
    "labels": {"type": "dict", "default": {}},
    "delete_data": {"type": "bool", "default": False},
    "update_image": {"type": "bool", "default": False},
    "wait_timeout": {"type": "float", "default": 120},
    "settings": {"type": "dict", "default": {}},
    "api_version": {"type": "str", "default": API_VERSION},
    **KUBE_CLIENT_ARGUMENT_SPEC,
}


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        required_one_of=[("name", "members")],
        mutually_exclusive=[("name", "members"), ("spec", "members")],
    )
    p = module.params
    members = p["members"] or [{"name": p["name"], "spec": p["spec"]}]
    results, wanted = [], members[0]
    try:
        cached, direct = operator_clients(p)
        for wanted in members:
            params = dict(p, name=wanted["name"], spec=wanted.get("spec"))
            member = Member(module, cached, direct, params)
            results.append(member.present() if p["state"] == "present" else member.absent())
    except (KubeConfigError, KubeError, ValueError) as exc:
        module.fail_json(msg=f"member {p['namespace']}/{wanted['name']}: {exc}")
    if p["members"]:
        module.exit_json(changed=any(r["changed"] for r in results), members=results)
    module.exit_json(**results[0])


if __name__ == "__main__":
    main()
