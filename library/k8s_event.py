#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_event
short_description: Record a core/v1 Event about an object, aggregating repeats
description:
  - Emits an Event about the object (as C(kubectl describe) shows them). When an Event for the
    same object, reason, message, type and component exists, its C(count) is incremented and
    C(lastTimestamp) updated instead of creating another one (like client-go's correlator).
  - Connection as in C(k8s_status). Runs in the controller process as an action plugin when
    C(plugins/action) is configured.
options:
  namespace:
    description: Namespace of the involved object, and of the Event (C(default) if omitted).
    type: str
  uid:
    description: UID of the involved object; looked up when omitted.
    type: str
  reason:
    description: Short CamelCase reason, e.g. C(MemberAdded).
    type: str
    required: true
  message:
    description: Human-readable message.
    type: str
    required: true
  type:
    description: Event type.
    type: str
    choices: [Normal, Warning]
    default: Normal
  component:
    description: Reporting component (C(source.component)).
    type: str
    default: quorumkeeper
extends_documentation_fragment:
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.k8s_object
requirements: [PyYAML]
"""

EXAMPLES = r"""
- name: Tell the user
  k8s_event:
    api_version: etcd.quorumkeeper.dev/v1alpha1
    kind: EtcdCluster
    name: "{{ ansible_operator_meta.name }}"
    namespace: "{{ ansible_operator_meta.namespace }}"
    reason: MemberRemoved
    message: removed etcd-2 (id 8e9e05c52164694d)
    type: Warning
"""

RETURN = r"""
event:
  description: The Event as written (or as it would be written in check mode).
  type: dict
  returned: when the object exists
gone:
  description: >-
    The object does not exist or its namespace is being deleted; nothing was recorded (only
    with I(ignore_missing)).
  type: bool
  returned: when true
"""


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_action import run_module
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_k8s import (
    EVENT_ARGUMENT_SPEC,
    record_event,
)

# Shared with the action plugin of the same name, which runs in the controller.
ARGUMENT_SPEC = EVENT_ARGUMENT_SPEC


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, record_event)


if __name__ == "__main__":
    main()
