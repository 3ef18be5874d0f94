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
  - Talks to the API server given by I(kubeconfig), else to the API server itself (the pod's
    service account, or the kubeconfig in C(QK_KUBECONFIG)), never through ansible-operator's
    proxy, whose reads come from a cache and could be a moment old.
  - Runs in the controller process as an action plugin when C(plugins/action) is configured
    (as in the operator image); this file documents it and runs it as a module otherwise.
options: {}
extends_documentation_fragment:
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.k8s_object
  - quorumkeeper.etcd.k8s_object.conditions
requirements: [PyYAML]
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
  returned: when the object exists
result:
  description: The whole object as returned by the API server after the write.
  type: dict
  returned: changed and not check mode
gone:
  description: The object does not exist; nothing was written (only with I(ignore_missing)).
  type: bool
  returned: when true
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_action import run_module
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_k8s import (
    STATUS_ARGUMENT_SPEC,
    write_status,
)

# Shared with the action plugin of the same name, which runs in the controller.
ARGUMENT_SPEC = STATUS_ARGUMENT_SPEC


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, write_status)


if __name__ == "__main__":
    main()
