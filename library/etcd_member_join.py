#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_member_join
short_description: Add members to a running etcd cluster one at a time, each started and promoted
description:
  - For each of I(members), in order, what C(etcd_member) and C(etcd_peer) do in three module
    runs, in one process. Add the member to etcd as a non-voting learner (C(etcd_member)
    C(state=present)), create its EtcdPeer, PersistentVolumeClaim and ReplicaSet (C(etcd_peer)
    C(state=present)), and promote the learner as soon as it has caught up with the leader
    (C(etcd_member) C(state=promoted)); only then is the next member added, since etcd allows
    one learner at a time.
  - etcd's quorum is checked again before every add and every promotion. The first member that
    cannot be added, created or promoted ends the module with an error that names it; the
    members before it have joined (C(joined)); a learner left behind is what C(etcd_member)
    C(state=promoted) or C(etcd_peer) resume from.
  - A member etcd already has is not added again, an EtcdPeer that exists is not created again,
    and a voting member is not promoted, so running the module again after an interruption
    resumes.
  - In check mode nothing changes; the members are reported as they would be added.
options:
  members:
    description:
      - The members to add, in order, each as etcd's initial cluster names it,
        C(<name>=<peer URL>).
    type: list
    elements: str
    required: true
  namespace:
    description: Namespace of the EtcdPeers.
    type: str
    required: true
  spec:
    description:
      - The EtcdPeer spec of the last of I(members), whose static initial cluster lists every
        member of the cluster once all of I(members) have joined. Each member starts with that
        list up to itself (etcd checks that a joining member knows exactly the members etcd
        has).
    type: dict
    required: true
  settings:
    description:
      - Ports, data directory, grace period, default repository and default storage of the
        members' pods, as C(etcd_peer) takes them.
    type: dict
    default: {}
  wait_timeout:
    description:
      - Seconds to keep retrying a member's promotion while etcd reports that the learner is
        not yet in sync with the leader (its pod starting and catching up).
      - Changes refused because etcd reports a transient condition are retried for
        max(I(wait_timeout), 10) seconds.
    type: float
    default: 15
extends_documentation_fragment:
  - quorumkeeper.etcd.etcd_connection
  - quorumkeeper.etcd.etcd_connection.endpoints
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.kube_client.api_version
requirements: [etcd3aio, PyYAML]
"""

EXAMPLES = r"""
- name: Scale my-cluster from 3 to 5 members
  etcd_member_join:
    endpoints: "{{ client_urls }}"
    namespace: default
    members:
      - my-cluster-3=http://my-cluster-3.my-cluster.default.svc.cluster.local:2380
      - my-cluster-4=http://my-cluster-4.my-cluster.default.svc.cluster.local:2380
    spec: "{{ spec_of_my_cluster_4 }}"
    wait_timeout: 15
  register: joined
"""

RETURN = r"""
joined:
  description: The members that joined (or had joined before), in order, each with its result.
  type: list
  elements: dict
  returned: always
  contains:
    name:
      description: The member's name.
      type: str
    added:
      description: Whether it was added to etcd by this run.
      type: bool
    created:
      description: Kinds created for it (C(EtcdPeer), C(PersistentVolumeClaim), C(ReplicaSet)).
      type: list
      elements: str
    promoted:
      description: Whether this run promoted it to a voting member.
      type: bool
    member:
      description: Its entry in etcd's member list (id, name, peer_urls, is_learner).
      type: dict
    seconds:
      description:
        - How long each part took, C(add) (etcd refuses membership changes until its leader
          has been connected to every voting member for 5 seconds, so an add right after a
          member started waits), C(create) and C(promote) (its pod starting and catching up).
      type: dict
actions:
  description: What was done (or, in check mode, would be done), in order.
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
    join_members,
)

ARGUMENT_SPEC = {
    **connection_argument_spec(),
    "members": {"type": "list", "elements": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "spec": {"type": "dict", "required": True},
    "settings": {"type": "dict", "default": {}},
    "wait_timeout": {"type": "float", "default": 15},
    "api_version": {"type": "str", "default": API_VERSION},
    **KUBE_CLIENT_ARGUMENT_SPEC,
}


def main():
    join_members(
        AnsibleModule(
            argument_spec=ARGUMENT_SPEC,
            supports_check_mode=True,
            required_together=CONNECTION_REQUIRED_TOGETHER,
        )
    )


if __name__ == "__main__":
    main()
