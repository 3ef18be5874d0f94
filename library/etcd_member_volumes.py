#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_member_volumes
short_description: Grow the PersistentVolumeClaims of etcd members in place
description:
  - Raises the storage request of each named member's claim (the claim is named after the
    member's EtcdPeer) to I(size); Kubernetes then expands the volume while the member runs,
    where the claim's StorageClass allows volume expansion.
  - The member's EtcdPeer is given the size first (its C(spec.storage), which its backend quota
    is validated against), so that an interrupted run leaves no claim larger than its peer says.
  - A claim or peer that already asks for I(size) or more is left as it is: neither shrinks.
  - Does not wait for the volumes to grow; the claims' C(status.capacity) says when they have.
options:
  namespace:
    description: Namespace of the members.
    type: str
    required: true
  members:
    description: The members whose claims grow, each C({name}) (as the planner's step lists them).
    type: list
    elements: dict
    required: true
  size:
    description: The size every claim asks for afterwards, a Kubernetes quantity (C(2Gi)).
    type: raw
    required: true
extends_documentation_fragment:
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.kube_client.api_version
requirements: [PyYAML]
"""

EXAMPLES = r"""
- name: Grow the volumes of two members to 2Gi
  etcd_member_volumes:
    namespace: default
    members: [{name: my-cluster-0}, {name: my-cluster-1}]
    size: 2Gi
"""

RETURN = r"""
grown:
  description: The claims whose request was raised (or would be, in check mode).
  type: list
  elements: str
  returned: always
peers:
  description: The EtcdPeers whose C(spec.storage) size was raised.
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import API_VERSION
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KUBE_CLIENT_ARGUMENT_SPEC,
    KubeConfigError,
    KubeError,
    operator_clients,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import quantity_bytes


def _smaller(size, wanted) -> bool:
    return size is None or quantity_bytes(size) < wanted


def grow(module, direct):
    p = module.params
    wanted = quantity_bytes(p["size"])
    requests = {"resources": {"requests": {"storage": str(p["size"])}}}
    result = {"grown": [], "peers": []}
    for member in p["members"]:
        name = member["name"]
        peer = direct.get(p["api_version"], "EtcdPeer", name, p["namespace"])
        template = ((peer or {}).get("spec", {}).get("storage") or {}).get("volumeClaimTemplate")
        if template and _smaller(
            template.get("resources", {}).get("requests", {}).get("storage"), wanted
        ):
            result["peers"].append(name)
            if not module.check_mode:
                direct.patch(
                    p["api_version"],
                    "EtcdPeer",
                    name,
                    {"spec": {"storage": {"volumeClaimTemplate": requests}}},
                    p["namespace"],
                )
        claim = direct.get("v1", "PersistentVolumeClaim", name, p["namespace"])
        if claim is None or not _smaller(
            claim["spec"].get("resources", {}).get("requests", {}).get("storage"), wanted
        ):
            continue
        result["grown"].append(name)
        if module.check_mode:
            continue
        try:
            direct.patch("v1", "PersistentVolumeClaim", name, {"spec": requests}, p["namespace"])
        except KubeError as exc:
            module.fail_json(
                msg=f"the API server refused to grow PersistentVolumeClaim {p['namespace']}/"
                f"{name} to {p['size']} (does its StorageClass allow volume expansion?): {exc}",
                grown=result["grown"][:-1],
                peers=result["peers"],
            )
    return {"changed": bool(result["grown"] or result["peers"]), **result}


ARGUMENT_SPEC = {
    "namespace": {"type": "str", "required": True},
    "members": {"type": "list", "elements": "dict", "required": True},
    "size": {"type": "raw", "required": True},
    "api_version": {"type": "str", "default": API_VERSION},
    **KUBE_CLIENT_ARGUMENT_SPEC,
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        _, direct = operator_clients(module.params)
        result = grow(module, direct)
    except ValueError as exc:
        module.fail_json(msg=f"size {module.params['size']!r} is not a quantity of bytes: {exc}")
    except (KubeConfigError, KubeError) as exc:
        module.fail_json(msg=f"cannot grow the members' volumes: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
