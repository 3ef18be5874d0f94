#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_status
short_description: Merge fields and conditions into the status subresource of a resource
description:
  - Reads the object, merges I(status) into its C(status) (recursively; a null value deletes a
    key) and I(conditions) into C(status.conditions) by type, and writes the C(status)
    subresource with the object's resourceVersion (retrying on conflicts).
  - C(lastTransitionTime) is kept when a condition's status does not change and set to now when
    it does; C(observedGeneration) of every given condition is set to the object's generation.
  - Nothing is written (C(changed=false)) when the result equals the current status.
  - Configuration is taken from I(kubeconfig), then C(K8S_AUTH_KUBECONFIG), C(KUBECONFIG), then
    the in-cluster service account. Under ansible-operator C(K8S_AUTH_KUBECONFIG) points at the
    operator's proxy, which serves the status subresource.
options:
  api_version:
    description: apiVersion of the object, e.g. C(etcd.quorumkeeper.dev/v1alpha1).
    type: str
    required: true
  kind:
    description: Kind of the object.
    type: str
    required: true
  name:
    description: Name of the object.
    type: str
    required: true
  namespace:
    description: Namespace of the object (omit for cluster-scoped kinds).
    type: str
  status:
    description: Fields merged into the existing status.
    type: dict
    default: {}
  conditions:
    description: Conditions merged by type into C(status.conditions).
    type: list
    elements: dict
    default: []
    suboptions:
      type:
        type: str
        required: true
      status:
        description: C(True), C(False) or C(Unknown) (booleans are accepted).
        type: raw
        required: true
      reason:
        type: str
        required: true
      message:
        type: str
        default: ""
  kubeconfig:
    description: Path to a kubeconfig file.
    type: path
  context:
    description: kubeconfig context to use.
    type: str
requirements: [kubernetes]
"""

EXAMPLES = r"""
- name: Report progress
  k8s_status:
    api_version: etcd.quorumkeeper.dev/v1alpha1
    kind: EtcdCluster
    name: "{{ ansible_operator_meta.name }}"
    namespace: "{{ ansible_operator_meta.namespace }}"
    status:
      readyMembers: 3
    conditions:
      - type: Available
        status: "True"
        reason: QuorumHealthy
        message: 3 of 3 members healthy
"""

RETURN = r"""
status:
  description: The object's status after the change (what would be written in check mode).
  type: dict
  returned: success
result:
  description: The whole object as returned by the API server after the write.
  type: dict
  returned: changed and not check mode
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.qk_k8s import (
    HAS_K8S,
    K8S_IMPORT_ERROR,
    ApiException,
    ConflictError,
    NotFoundError,
    ResourceNotFoundError,
    api_error_text,
    compute_status,
    dynamic_client,
    k8s_argument_spec,
)

MAX_CONFLICT_RETRIES = 5


def main():
    spec = k8s_argument_spec()
    spec.update(
        api_version={"type": "str", "required": True},
        kind={"type": "str", "required": True},
        name={"type": "str", "required": True},
        namespace={"type": "str"},
        status={"type": "dict", "default": {}},
        conditions={
            "type": "list",
            "elements": "dict",
            "default": [],
            "options": {
                "type": {"type": "str", "required": True},
                "status": {"type": "raw", "required": True},
                "reason": {"type": "str", "required": True},
                "message": {"type": "str", "default": ""},
            },
        },
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    if not HAS_K8S:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=str(K8S_IMPORT_ERROR))
    p = module.params
    what = f"{p['kind']} {p['namespace'] + '/' if p['namespace'] else ''}{p['name']}"
    try:
        client = dynamic_client(p["kubeconfig"], p["context"])
        resource = client.resources.get(api_version=p["api_version"], kind=p["kind"])
    except ResourceNotFoundError:
        module.fail_json(
            msg=f"the API server does not serve kind {p['kind']} in {p['api_version']}"
        )
    except Exception as exc:  # noqa: BLE001 - config/connection errors of any kind
        module.fail_json(msg=f"cannot connect to Kubernetes: {exc}")
    if "status" not in resource.subresources:
        module.fail_json(
            msg=f"{p['kind']} ({p['api_version']}) has no status subresource; "
            "enable subresources.status in its CustomResourceDefinition"
        )

    for _attempt in range(MAX_CONFLICT_RETRIES):
        try:
            obj = client.get(resource, name=p["name"], namespace=p["namespace"]).to_dict()
        except NotFoundError:
            module.fail_json(msg=f"{what} not found")
        except ApiException as exc:
            module.fail_json(msg=f"cannot read {what}: {api_error_text(exc)}")
        current = obj.get("status") or {}
        generation = obj.get("metadata", {}).get("generation")
        try:
            new = compute_status(current, p["status"], p["conditions"], generation)
        except ValueError as exc:
            module.fail_json(msg=str(exc))
        if new == current:
            module.exit_json(changed=False, status=current)
        if module.check_mode:
            module.exit_json(changed=True, status=new)
        obj["status"] = new
        try:
            written = client.replace(
                resource.status, body=obj, name=p["name"], namespace=p["namespace"]
            ).to_dict()
        except ConflictError:
            continue
        except NotFoundError:
            module.fail_json(msg=f"{what} disappeared while its status was being written")
        except ApiException as exc:
            module.fail_json(msg=f"cannot write the status of {what}: {api_error_text(exc)}")
        module.exit_json(changed=True, status=written.get("status") or {}, result=written)
    module.fail_json(
        msg=f"cannot write the status of {what}: it kept changing "
        f"({MAX_CONFLICT_RETRIES} conflicting updates in a row)"
    )


if __name__ == "__main__":
    main()
