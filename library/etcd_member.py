#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_member
short_description: Quorum-safe etcd membership changes (add learner, promote, remove, move leader)
description:
  - C(present) adds a member (as a raft learner by default) unless a member with that name or
    any of those peer URLs exists, and returns the C(initial_cluster) string the new member must
    start with (C(--initial-cluster-state existing)). With I(update_peer_urls), an existing
    member's peer URLs are changed to I(peer_urls) (etcd's MemberUpdate).
  - C(promoted) promotes a learner to a voting member, retrying while the learner catches up.
  - C(absent) removes a member, after checking that the remaining healthy voting members still
    form a quorum; when the member is the leader, leadership is moved to a healthy voter first.
  - C(leader) makes a healthy voting member the leader (etcd's MoveLeader, sent to the current
    leader) and waits until it leads, e.g. before the current leader is restarted.
  - In check mode the cluster is inspected and the planned actions are returned; nothing changes.
options:
  name:
    description:
      - Member name (C(--name) of the etcd process). An added member has no name in etcd until
        it starts; it is then matched by I(peer_urls).
    type: str
  peer_urls:
    description: Peer URLs of the member. Required for C(state=present).
    type: list
    elements: str
    default: []
  id:
    description: Member ID in hex (as etcdctl prints it); alternative to I(name).
    type: str
  state:
    description: Desired membership state.
    type: str
    choices: [present, promoted, absent, leader]
    default: present
  learner:
    description: With C(state=present), add the member as a non-voting learner.
    type: bool
    default: true
  wait_timeout:
    description:
      - With C(state=promoted), seconds to keep retrying the promotion while etcd reports that
        the learner is not yet in sync with the leader.
      - >-
        Changes refused because etcd reports a transient condition (C(unhealthy cluster): the
        leader has not been connected to every voter for 5 seconds yet; leader election) are
        retried for max(I(wait_timeout), 10) seconds in every state.
    type: float
    default: 0
  move_leader:
    description: With C(state=absent), move leadership away from the member before removing it.
    type: bool
    default: true
  update_peer_urls:
    description:
      - >-
        With C(state=present), when the member exists with other peer URLs than I(peer_urls),
        change them (etcd's MemberUpdate, which needs a healthy quorum), e.g. to move it between
        http and https while peer TLS is turned on or off. Without it the URLs are left as they
        are and a warning says so.
    type: bool
    default: false
extends_documentation_fragment:
  - quorumkeeper.etcd.etcd_connection
  - quorumkeeper.etcd.etcd_connection.endpoints
requirements: [etcd3aio]
notes:
  - etcd 3.4 and 3.5 (and 3.6 by default) allow a single learner at a time.
"""

EXAMPLES = r"""
- name: Add etcd-3 as a learner
  etcd_member:
    endpoints: "{{ client_urls }}"
    name: etcd-3
    peer_urls: ["http://etcd-3.etcd.ns.svc.cluster.local:2380"]
  register: added
  # start etcd-3 with --initial-cluster "{{ added.initial_cluster }}"
  # and --initial-cluster-state existing

- name: Promote it once it has caught up
  etcd_member:
    endpoints: "{{ client_urls }}"
    name: etcd-3
    state: promoted
    wait_timeout: 60

- name: Hand leadership to etcd-2 before restarting the leader
  etcd_member:
    endpoints: "{{ client_urls }}"
    name: etcd-2
    state: leader

- name: Move etcd-2's peer traffic to https before it restarts with peer TLS
  etcd_member:
    endpoints: "{{ client_urls }}"
    name: etcd-2
    peer_urls: ["https://etcd-2.etcd.ns.svc.cluster.local:2380"]
    update_peer_urls: true

- name: Remove etcd-0 (quorum-checked, leadership moved first)
  etcd_member:
    endpoints: "{{ client_urls }}"
    name: etcd-0
    state: absent
"""

RETURN = r"""
member:
  description: C({id, name, peer_urls, is_learner}) of the member (after the change; for
    C(absent) the removed member). C(id) is null for a member only planned in check mode.
  type: dict
  returned: when the member exists or was added
initial_cluster:
  description: C(name=peerURL,...) for all members, the member itself under I(name).
  type: str
  returned: state=present
actions:
  description: Human-readable list of what was (or in check mode would be) done.
  type: list
  elements: str
  returned: always
leader_moved_to:
  description: C({id, name}) of the member that took over leadership, when it was moved.
  type: dict
  returned: state=absent or leader, when leadership was moved
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    CONNECTION_REQUIRED_TOGETHER,
    connection_argument_spec,
    etcd_client,
    profile_from_params,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    ETCD3AIO_IMPORT_ERROR,
    HAS_ETCD3AIO,
    EtcdOperationError,
    EtcdUnreachable,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_member_change import Runner

ARGUMENT_SPEC = {
    **connection_argument_spec(),
    "name": {"type": "str"},
    "peer_urls": {"type": "list", "elements": "str", "default": []},
    "id": {"type": "str"},
    "state": {
        "type": "str",
        "choices": ["present", "promoted", "absent", "leader"],
        "default": "present",
    },
    "learner": {"type": "bool", "default": True},
    "wait_timeout": {"type": "float", "default": 0},
    "move_leader": {"type": "bool", "default": True},
    "update_peer_urls": {"type": "bool", "default": False},
}


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        required_one_of=[("name", "id", "peer_urls")],
        required_together=CONNECTION_REQUIRED_TOGETHER,
    )
    if not HAS_ETCD3AIO:
        module.fail_json(msg=missing_required_lib("etcd3aio"), exception=str(ETCD3AIO_IMPORT_ERROR))
    if module.params["id"]:
        try:
            int(module.params["id"].lower().removeprefix("0x"), 16)
        except ValueError:
            module.fail_json(msg=f"id {module.params['id']!r} is not a hex member ID")
    try:
        client = etcd_client(profile_from_params(module.params))
    except (ValueError, OSError) as exc:
        module.fail_json(msg=f"invalid etcd connection options: {exc}")
    runner = None
    try:
        # Entering authenticates when the profile has credentials: etcd may refuse them, or no
        # endpoint answer. The runner reports what its own calls meet.
        with client:
            runner = Runner(module, client)
            getattr(runner, module.params["state"])()
    except (EtcdUnreachable, EtcdOperationError) as exc:
        result = runner.result if runner else {"changed": False, "actions": []}
        reached = not isinstance(exc, EtcdUnreachable)
        module.fail_json(msg=str(exc) if reached else f"cannot reach etcd: {exc}", **result)
    module.exit_json(**runner.result)


if __name__ == "__main__":
    main()
