#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_report
short_description: Record Events about an object, write its status and related objects' statuses
description:
  - What one pass of a controller found, written by one task instead of one task per Event and
    per object (each task costs a worker process and its events under ansible-operator).
  - In this order, so that a reader of the object's status has already been told the rest
    first - the I(events) about the object (each as C(k8s_event) records it, repeats
    aggregated), the status of each of the I(related_statuses) (objects of the same
    apiVersion and namespace, e.g. a cluster's members), the object's own I(status) and
    I(conditions) (each as C(k8s_status) writes it, only when it changes).
  - Connection as in C(k8s_status). Runs in the controller process as an action plugin when
    C(plugins/action) is configured (as in the operator image); this file documents it and
    runs it as a module otherwise.
options:
  namespace:
    description: Namespace of the object and of the related objects (omit for cluster-scoped kinds).
    type: str
  events:
    description: Events about the object, recorded first, in order.
    type: list
    elements: dict
    default: []
    suboptions:
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
  related_statuses:
    description: Statuses of other objects of the same apiVersion and namespace, written next.
    type: list
    elements: dict
    default: []
    suboptions:
      kind:
        description: Kind of the related object.
        type: str
        required: true
      name:
        description: Name of the related object.
        type: str
        required: true
      status:
        description: Fields merged into its existing status.
        type: dict
        default: {}
      conditions:
        description: Conditions merged by type into its C(status.conditions).
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
  component:
    description: Reporting component of the Events (C(source.component)).
    type: str
    default: quorumkeeper
  ignore_missing:
    description:
      - When the object or a related object does not exist (any more), or the namespace is
        being deleted, skip it instead of failing.
  known:
    description:
      - The object as the caller read it in this pass, when nothing wrote its status since. With
        no I(events) and no I(related_statuses), a I(status) and I(conditions) that would not
        change it are not written, and the object is not read either (a controller's pass that
        finds nothing to do makes no API call here).
    type: dict
    suboptions:
      status:
        description: Its C(status).
        type: dict
        default: {}
      generation:
        description: Its C(metadata.generation), for the conditions' C(observedGeneration).
        type: int
        required: true
extends_documentation_fragment:
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.k8s_object
  - quorumkeeper.etcd.k8s_object.conditions
requirements: [PyYAML]
"""

EXAMPLES = r"""
- name: Write what the round found
  k8s_report:
    api_version: etcd.quorumkeeper.dev/v1alpha1
    kind: EtcdCluster
    name: "{{ ansible_operator_meta.name }}"
    namespace: "{{ ansible_operator_meta.namespace }}"
    events:
      - reason: MemberAdded
        message: member example-3 added
    related_statuses:
      - kind: EtcdPeer
        name: example-3
        status:
          ready: true
    status:
      readyMembers: 4
    conditions:
      - type: Available
        status: "True"
        reason: QuorumHealthy
        message: 4 of 4 members healthy
"""

RETURN = r"""
status:
  description: The object's status after the change (what would be written in check mode).
  type: dict
  returned: when the object exists
events:
  description: How many of I(events) were recorded (or counted once more).
  type: int
  returned: always
related_changed:
  description: Names of the related objects whose status was written.
  type: list
  elements: str
  returned: always
gone:
  description: The object does not exist; its status was not written (only with I(ignore_missing)).
  type: bool
  returned: when true
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_action import run_module
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_k8s import (
    REPORT_ARGUMENT_SPEC,
    write_report,
)

# Shared with the action plugin of the same name, which runs in the controller.
ARGUMENT_SPEC = REPORT_ARGUMENT_SPEC


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_module(module, write_report)


if __name__ == "__main__":
    main()
