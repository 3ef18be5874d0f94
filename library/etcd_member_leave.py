#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_member_leave
short_description: Remove members from etcd one at a time, then their peers, pods and data
description:
  - For each of I(members), in order, what C(etcd_member) C(state=absent) and C(etcd_peer)
    C(state=absent) do in two module runs, in one process. The member leaves etcd first
    (leadership moved to a healthy voter first when it leads; refused when the remaining
    healthy voting members would not keep the quorum), then its EtcdPeer and ReplicaSet are
    deleted, its pods waited for, and with I(delete_data) its PersistentVolumeClaim deleted.
  - etcd's quorum is checked again before every removal. The first member that cannot be
    removed ends the module with an error that names it; the members before it are gone
    (C(left)).
  - A member without I(id) is not looked up in etcd (etcd no longer lists it); only its
    Kubernetes objects are deleted. A member or object already gone is skipped, so running the
    module again after an interruption resumes.
  - In check mode nothing changes; what would be done is reported.
options:
  members:
    description: The members to remove, in order.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The member's name (its EtcdPeer's).
        type: str
        required: true
      id:
        description: Its member ID in hex, when etcd lists it.
        type: str
  namespace:
    description: Namespace of the EtcdPeers.
    type: str
    required: true
  delete_data:
    description:
      - Also delete each member's PersistentVolumeClaim, once its pods are gone. The data of a
        member removed from etcd can never be used again.
    type: bool
    default: true
  move_leader:
    description: Move leadership away from a member before removing it.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait for each member's pods to be gone.
    type: float
    default: 120
  pod_grace_seconds:
    description:
      - Delete each member's pods with this grace period in seconds, once it has left etcd,
        also those already terminating with a longer one (the kubelet then stops them sooner).
        Omitted, the pods keep their own grace period.
    type: int
extends_documentation_fragment:
  - quorumkeeper.etcd.etcd_connection
  - quorumkeeper.etcd.etcd_connection.endpoints
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.kube_client.api_version
requirements: [etcd3aio, PyYAML]
"""

EXAMPLES = r"""
- name: Scale my-cluster from 5 to 3 members
  etcd_member_leave:
    endpoints: "{{ client_urls }}"
    namespace: default
    members:
      - {name: my-cluster-4, id: 8e9e05c52164694d}
      - {name: my-cluster-3, id: 91bc3c398fb3c146}
  register: left
"""

RETURN = r"""
left:
  description: The members removed (or found gone), in order, each with its result.
  type: list
  elements: dict
  returned: always
  contains:
    name:
      description: The member's name.
      type: str
    removed:
      description: Whether this run removed it from etcd.
      type: bool
    deleted:
      description: Kinds deleted (C(EtcdPeer), C(ReplicaSet), C(PersistentVolumeClaim)).
      type: list
      elements: str
    leader_moved_to:
      description: The member leadership was moved to before the removal, when it was.
      type: dict
actions:
  description: What was done in etcd (or, in check mode, would be done), in order.
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    CONNECTION_REQUIRED_TOGETHER,
    connection_argument_spec,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import API_VERSION
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KUBE_CLIENT_ARGUMENT_SPEC,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_member_sequence import (
    leave_members,
)

ARGUMENT_SPEC = {
    **connection_argument_spec(),
    "members": {
        "type": "list",
        "elements": "dict",
        "required": True,
        "options": {
            "name": {"type": "str", "required": True},
            "id": {"type": "str"},
        },
    },
    "namespace": {"type": "str", "required": True},
    "delete_data": {"type": "bool", "default": True},
    "move_leader": {"type": "bool", "default": True},
    "wait_timeout": {"type": "float", "default": 120},
    "pod_grace_seconds": {"type": "int"},
    "api_version": {"type": "str", "default": API_VERSION},
    **KUBE_CLIENT_ARGUMENT_SPEC,
}


def main():
    leave_members(
        AnsibleModule(
            argument_spec=ARGUMENT_SPEC,
            supports_check_mode=True,
            required_together=CONNECTION_REQUIRED_TOGETHER,
        )
    )


if __name__ == "__main__":
    main()
