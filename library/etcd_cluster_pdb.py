#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_cluster_pdb
short_description: Ensure an EtcdCluster's PodDisruptionBudget
description:
  - Creates or patches the PodDisruptionBudget C(<name>) over the cluster's member pods
    (labels C(app.kubernetes.io/name=etcd) and C(etcd.quorumkeeper.dev/cluster=<name>)) with
    C(maxUnavailable) I(max_unavailable) and C(unhealthyPodEvictionPolicy=AlwaysAllow), owned
    by the EtcdCluster (garbage collected with it).
  - >-
    Written straight to the API server, not through ansible-operator's proxy, so that the
    operator does not watch budgets: their status changes with every member pod's readiness
    and would only cost reconciles. The etcdcluster role runs this module only when the budget
    it observed differs from the one it wants (see C(qk_disruption.max_unavailable)).
  - Idempotent; check mode reports what would be created or patched.
options:
  name:
    description: Name of the EtcdCluster (and of its budget).
  owner_uid:
    required: true
  max_unavailable:
    description: Member pods a voluntary disruption may take at once.
    type: int
    required: true
extends_documentation_fragment:
  - quorumkeeper.etcd.etcd_cluster
  - quorumkeeper.etcd.etcd_cluster.owned
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.kube_client.api_version
requirements: [PyYAML]
"""

EXAMPLES = r"""
- name: At most one member of my-cluster (3 members) may be evicted at a time
  etcd_cluster_pdb:
    name: my-cluster
    namespace: default
    owner_uid: "{{ cluster.metadata.uid }}"
    max_unavailable: 1
"""

RETURN = r"""
created:
  description: Whether the budget was created.
  type: bool
  returned: always
patched:
  description: Whether an existing budget was patched.
  type: bool
  returned: always
pdb:
  description: The budget's C(exists), C(max_unavailable) and C(disruptions_allowed) afterwards.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_disruption import (
    PDB_API_VERSION,
    pdb_differs,
    render_pdb,
    summarize_pdb,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import API_VERSION
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KUBE_CLIENT_ARGUMENT_SPEC,
    KubeConfigError,
    KubeError,
    api_client,
)


def ensure(module, client):
    p = module.params
    wanted = render_pdb(
        p["name"], p["namespace"], p["max_unavailable"], p["owner_uid"], p["api_version"]
    )
    result = {"changed": False, "created": False, "patched": False}
    existing = client.get(PDB_API_VERSION, "PodDisruptionBudget", p["name"], p["namespace"])
    if existing is None:
        result.update(changed=True, created=True)
        if module.check_mode:
            result["pdb"] = summarize_pdb(wanted)
            return result
        try:
            existing = client.create(wanted)
        except KubeError as exc:
            if not exc.already_exists:
                raise
            # Created meanwhile by an earlier, interrupted reconcile: patch it if need be.
            result.update(changed=False, created=False)
            existing = client.get(PDB_API_VERSION, "PodDisruptionBudget", p["name"], p["namespace"])
    if existing is not None and pdb_differs(existing, wanted):
        result.update(changed=True, patched=True)
        if not module.check_mode:
            existing = client.patch(
                PDB_API_VERSION,
                "PodDisruptionBudget",
                p["name"],
                {"spec": wanted["spec"]},
                p["namespace"],
            )
        else:
            existing = dict(existing, spec={**existing.get("spec", {}), **wanted["spec"]})
    result["pdb"] = summarize_pdb(existing)
    return result


ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "owner_uid": {"type": "str", "required": True},
    "max_unavailable": {"type": "int", "required": True},
    "api_version": {"type": "str", "default": API_VERSION},
    **KUBE_CLIENT_ARGUMENT_SPEC,
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    if p["max_unavailable"] < 0:
        module.fail_json(msg=f"max_unavailable must be 0 or more, not {p['max_unavailable']}")
    try:
        result = ensure(module, api_client(p, fresh=True))
    except (KubeConfigError, KubeError) as exc:
        module.fail_json(
            msg=f"PodDisruptionBudget of EtcdCluster {p['namespace']}/{p['name']}: {exc}"
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
