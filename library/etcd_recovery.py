#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_recovery
short_description: The Kubernetes side of an EtcdCluster's automatic disaster recovery
description:
  - C(force_new_cluster) sets (I(enabled)) or clears the EtcdPeer's C(spec.forceNewCluster),
    patches the member's ReplicaSet template to match, and deletes the member's pods that run
    otherwise, so that the ReplicaSet restarts the member with (or without) etcd's
    C(--force-new-cluster). With the flag, etcd keeps the member's data and drops every other
    member from the cluster; it must run without it again before any member joins.
  - >-
    C(restore_from_backup) creates the in-place EtcdRestore (I(restore)) of EtcdBackup I(backup)
    into the existing EtcdCluster I(cluster), through ansible-operator's proxy (so that the
    cluster owns it), and names it in the cluster's annotation
    C(etcd.quorumkeeper.dev/recovery): the restore waits for that annotation before it touches
    anything.
  - Both are idempotent (C(changed) only when something was written) and support check mode.
options:
  action:
    description: What to do.
    type: str
    required: true
    choices: [force_new_cluster, restore_from_backup]
  namespace:
    description: Namespace of the EtcdCluster.
    type: str
    required: true
  peer:
    description: The member (EtcdPeer name); required by C(force_new_cluster).
    type: str
  enabled:
    description: With C(force_new_cluster), whether the member runs with the flag.
    type: bool
    default: true
  settings:
    description: The member settings the etcdcluster role gives etcd_peer (ports, defaults).
    type: dict
    default: {}
  cluster:
    description: The EtcdCluster's name; required by C(restore_from_backup).
    type: str
  backup:
    description: The EtcdBackup to restore; required by C(restore_from_backup).
    type: str
  restore:
    description: Name of the EtcdRestore to create; required by C(restore_from_backup).
    type: str
  cluster_spec:
    description: The EtcdCluster's spec, the restore's clusterTemplate.
    type: dict
  kubeconfig:
    description:
      - >-
        A kubeconfig for every call. Default: ansible-operator's proxy (C(K8S_AUTH_KUBECONFIG))
        for the create, the API server itself for everything else.
    type: path
author:
  - quorumkeeper contributors
extends_documentation_fragment:
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.kube_client.api_version
"""

EXAMPLES = r"""
- name: Restart the survivor as a one-member cluster
  etcd_recovery:
    action: force_new_cluster
    namespace: prod
    peer: main-1
    settings: "{{ etcdcluster_member_settings }}"

- name: Restore the cluster in place from its newest verified backup
  etcd_recovery:
    action: restore_from_backup
    namespace: prod
    cluster: main
    backup: main-hourly-20261122-1000
    restore: main-recovery-20261122-101500
    cluster_spec: "{{ etcdcluster_spec }}"
"""

RETURN = r"""
patched:
  description: Kinds patched (EtcdPeer, ReplicaSet, EtcdCluster).
  type: list
  elements: str
  returned: always
created:
  description: Kinds created (EtcdRestore).
  type: list
  elements: str
  returned: always
deleted:
  description: Pods deleted so that they restart with the wanted flag.
  type: list
  elements: str
  returned: always
"""

import copy

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
    is_subset,
    render_replicaset,
    started_with_force_new_cluster,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_restore import RECOVERY_KEY


class Recovery:
    def __init__(self, module, cached, direct):
        self.module, self.p = module, module.params
        self.cached, self.direct = cached, direct
        self.result = {"changed": False, "patched": [], "created": [], "deleted": []}

    def _did(self, what, name):
        self.result[what].append(name)
        self.result["changed"] = True
        return not self.module.check_mode

    def force_new_cluster(self):
        p, api = self.p, self.p["api_version"]
        peer = self.direct.get(api, "EtcdPeer", p["peer"], p["namespace"])
        if peer is None or peer["metadata"].get("deletionTimestamp"):
            self.module.fail_json(
                msg=f"EtcdPeer {p['namespace']}/{p['peer']} does not exist (any more): the "
                "member to recover from is gone; the next reconcile decides again",
                **self.result,
            )
        spec = copy.deepcopy(peer["spec"])
        if bool(spec.get("forceNewCluster")) != p["enabled"]:
            spec["forceNewCluster"] = p["enabled"]
            if self._did("patched", f"EtcdPeer/{p['peer']}"):
                self.direct.patch(
                    api,
                    "EtcdPeer",
                    p["peer"],
                    {"spec": {"forceNewCluster": p["enabled"]}},
                    p["namespace"],
                )
        wanted = render_replicaset(p["peer"], p["namespace"], spec, p["settings"])
        replicaset = self.direct.get("apps/v1", "ReplicaSet", p["peer"], p["namespace"])
        if replicaset is None:
            self.module.fail_json(
                msg=f"member {p['peer']} has no ReplicaSet; the next reconcile recreates it",
                **self.result,
            )
        template = wanted["spec"]["template"]
        if not is_subset(template, replicaset["spec"]["template"]) and self._did(
            "patched", f"ReplicaSet/{p['peer']}"
        ):
            self.direct.patch(
                "apps/v1",
                "ReplicaSet",
                p["peer"],
                {"spec": {"template": template}},
                p["namespace"],
            )
        # The ReplicaSet replaces a deleted pod from the patched template, on the same claim.
        selector = f"{PEER_LABEL}={p['peer']}"
        for pod in self.direct.list("v1", "Pod", p["namespace"], label_selector=selector):
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            if started_with_force_new_cluster(pod) != p["enabled"] and self._did(
                "deleted", meta["name"]
            ):
                self.direct.delete("v1", "Pod", meta["name"], p["namespace"])

    def restore_from_backup(self):
        p, api = self.p, self.p["api_version"]
        cluster = self.direct.get(api, "EtcdCluster", p["cluster"], p["namespace"])
        if cluster is None or cluster["metadata"].get("deletionTimestamp"):
            self.module.fail_json(
                msg=f"EtcdCluster {p['namespace']}/{p['cluster']} is gone", **self.result
            )
        restore = self.direct.get(api, "EtcdRestore", p["restore"], p["namespace"])
        if restore is None and self._did("created", f"EtcdRestore/{p['restore']}"):
            wanted = {
                "apiVersion": api,
                "kind": "EtcdRestore",
                "metadata": {
                    "name": p["restore"],
                    "namespace": p["namespace"],
                    "labels": {"etcd.quorumkeeper.dev/cluster": p["cluster"]},
                },
                "spec": {
                    "source": {"backupName": p["backup"]},
                    "clusterName": p["cluster"],
                    "clusterTemplate": copy.deepcopy(p["cluster_spec"] or cluster["spec"]),
                    "inPlace": True,
                },
            }
            try:
                # Through the proxy: owned by the EtcdCluster, gone with it.
                self.cached.create(wanted)
            except KubeError as exc:
                if not exc.already_exists:
                    raise
        annotations = cluster["metadata"].get("annotations") or {}
        if annotations.get(RECOVERY_KEY) != p["restore"] and self._did(
            "patched", f"EtcdCluster/{p['cluster']}"
        ):
            self.direct.patch(
                api,
                "EtcdCluster",
                p["cluster"],
                {"metadata": {"annotations": {RECOVERY_KEY: p["restore"]}}},
                p["namespace"],
            )


ARGUMENT_SPEC = {
    "action": {
        "type": "str",
        "required": True,
        "choices": ["force_new_cluster", "restore_from_backup"],
    },
    "namespace": {"type": "str", "required": True},
    "peer": {"type": "str"},
    "enabled": {"type": "bool", "default": True},
    "settings": {"type": "dict", "default": {}},
    "cluster": {"type": "str"},
    "backup": {"type": "str"},
    "restore": {"type": "str"},
    "cluster_spec": {"type": "dict"},
    "api_version": {"type": "str", "default": API_VERSION},
    **KUBE_CLIENT_ARGUMENT_SPEC,
}


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[
            ("action", "force_new_cluster", ("peer",)),
            ("action", "restore_from_backup", ("cluster", "backup", "restore")),
        ],
        supports_check_mode=True,
    )
    p = module.params
    try:
        cached, direct = operator_clients(p)
        recovery = Recovery(module, cached, direct)
        getattr(recovery, p["action"])()
    except (KubeConfigError, KubeError) as exc:
        module.fail_json(msg=f"disaster recovery step {p['action']} failed: {exc}")
    module.exit_json(**recovery.result)


if __name__ == "__main__":
    main()
