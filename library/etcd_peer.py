#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_peer
short_description: Ensure an etcd member's EtcdPeer, PersistentVolumeClaim and ReplicaSet
description:
  - C(present) makes sure the member runs. It creates the EtcdPeer from I(spec) when it does not
    exist (through ansible-operator's proxy, so that it is owned by the reconciled EtcdCluster),
    then the member's PersistentVolumeClaim and its ReplicaSet of one pod, and records the
    claim's UID in the EtcdPeer's C(status.pvcUID).
  - The claim is created with no owner reference, so deleting the EtcdCluster never deletes the
    data, and with the C(operator-sdk/primary-resource) annotations, so that its deletion makes
    ansible-operator reconcile the EtcdCluster.
  - >-
    A claim is never re-created for a member whose recorded claim is gone or replaced: the data
    is lost, the module reports C(data_lost) and creates nothing (the EtcdCluster replaces the
    member instead).
  - The ReplicaSet is owned by the EtcdPeer. An existing ReplicaSet whose pod template differs
    from what the EtcdPeer asks for is patched (the running pod is not restarted).
  - C(absent) deletes the EtcdPeer and its ReplicaSet, waits until the member's pods are gone,
    and with I(delete_data) deletes the claim too.
  - Check mode reports what would be created, patched or deleted.
options:
  name:
    description: Name of the EtcdPeer (the member's name). Required unless I(members) is given.
    type: str
  members:
    description:
      - Several members at once (each with its I(name) and optional I(spec)), all with the
        other options given; saves a module run per member when a cluster starts.
      - With C(state=present) the members are made side by side (a connection each), so the
        last member's pod is created about as soon as the first one's; with C(absent) one
        after the other.
    type: list
    elements: dict
    suboptions:
      name:
        description: Name of the EtcdPeer.
        type: str
        required: true
      spec:
        description: As I(spec).
        type: dict
  namespace:
    description: Namespace of the EtcdPeer.
    type: str
    required: true
  state:
    description: Whether the member should exist.
    type: str
    choices: [present, absent]
    default: present
  spec:
    description:
      - The EtcdPeer's spec; used to create it when it does not exist. When omitted its own
        spec is used, and an EtcdPeer that does not exist (any more) is left alone.
    type: dict
  update_image:
    description:
      - Move an existing EtcdPeer to the version and repository of I(spec), and replace its
        pods whose etcd container never ran (they could not pull the old image). Only for
        members that never started; a running member changes version by an upgrade.
    type: bool
    default: false
  labels:
    description:
      - Labels of a newly created EtcdPeer, besides the ones it always gets
        (C(etcd.quorumkeeper.dev/cluster), C(etcd.quorumkeeper.dev/peer), C(app.kubernetes.io/*)).
    type: dict
    default: {}
  delete_data:
    description: With C(state=absent), also delete the member's PersistentVolumeClaim.
    type: bool
    default: false
  wait_timeout:
    description: With C(state=absent), seconds to wait for the member's pods to be gone.
    type: float
    default: 120
  pod_grace_seconds:
    description:
      - With C(state=absent), delete the member's pods with this grace period in seconds, also
        those already terminating with a longer one (the kubelet then stops them sooner). For
        members whose data is gone. Omitted, the pods keep their own grace period.
    type: int
  settings:
    description:
      - Ports, data directory, grace period, default repository and default storage of the
        member's pod (see C(qk_members.DEFAULTS)); the roles pass their defaults.
    type: dict
    default: {}
  kubeconfig:
    description:
      - >-
        A kubeconfig for every call. Default: ansible-operator's proxy (C(K8S_AUTH_KUBECONFIG))
        for reads and owned creations, the API server itself for the claim and ReplicaSet.
    type: path
extends_documentation_fragment:
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.kube_client.api_version
requirements: [PyYAML]
"""

EXAMPLES = r"""
- name: Create member my-cluster-3 with its volume and pod
  etcd_peer:
    name: my-cluster-3
    namespace: default
    spec: "{{ peer_spec }}"

- name: Remove member my-cluster-3 and its data
  etcd_peer:
    name: my-cluster-3
    namespace: default
    state: absent
    delete_data: true
"""

RETURN = r"""
members:
  description: With I(members), the result of each member (the fields below), in order.
  type: list
  elements: dict
  returned: with members
created:
  description: Kinds created (C(EtcdPeer), C(PersistentVolumeClaim), C(ReplicaSet)).
  type: list
  elements: str
  returned: always
patched:
  description: Kinds patched.
  type: list
  elements: str
  returned: always
deleted:
  description: Kinds deleted (state=absent; C(Pod) for a pod replaced by I(update_image)).
  type: list
  elements: str
  returned: always
data_lost:
  description: The member's recorded claim is gone or was replaced; nothing was created.
  type: bool
  returned: always
pvc:
  description: The claim (exists, uid, phase, deleting).
  type: dict
  returned: state=present
uid:
  description: UID of the EtcdPeer.
  type: str
  returned: state=present and the EtcdPeer exists
gone:
  description: The EtcdPeer does not exist and no spec was given; nothing was done.
  type: bool
  returned: when true
deleting:
  description: The EtcdPeer is being deleted; nothing was done.
  type: bool
  returned: when true
"""

from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import API_VERSION
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KUBE_CLIENT_ARGUMENT_SPEC,
    KubeConfigError,
    KubeError,
    operator_clients,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_peer import Member

ARGUMENT_SPEC = {
    "name": {"type": "str"},
    "namespace": {"type": "str", "required": True},
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "spec": {"type": "dict"},
    "members": {
        "type": "list",
        "elements": "dict",
        "options": {
            "name": {"type": "str", "required": True},
            "spec": {"type": "dict"},
        },
    },
    "labels": {"type": "dict", "default": {}},
    "delete_data": {"type": "bool", "default": False},
    "update_image": {"type": "bool", "default": False},
    "wait_timeout": {"type": "float", "default": 120},
    "pod_grace_seconds": {"type": "int"},
    "settings": {"type": "dict", "default": {}},
    "api_version": {"type": "str", "default": API_VERSION},
    **KUBE_CLIENT_ARGUMENT_SPEC,
}


FAILURES = (KubeConfigError, KubeError, ValueError)


class MemberFailed(Exception):
    """One member's failure, with the member's name, from the members made side by side."""

    def __init__(self, name, error):
        super().__init__(str(error))
        self.name = name


def ensure_present_side_by_side(module, p, members):
    """Each member's objects made in a thread of its own, with its own connections (a client
    keeps one connection, not to be shared): about 7 API calls per member, which one after the
    other delayed the last member's pod by a second when a cluster starts. Returns the results
    in the members' order, or raises the first member's failure (with its name)."""

    def present(wanted):
        cached, direct = operator_clients(p)
        params = dict(p, name=wanted["name"], spec=wanted.get("spec"))
        return Member(module, cached, direct, params).present()

    with ThreadPoolExecutor(max_workers=len(members)) as pool:
        futures = [pool.submit(present, wanted) for wanted in members]
    results = []
    for wanted, future in zip(members, futures, strict=True):
        try:
            results.append(future.result())
        except FAILURES as exc:
            raise MemberFailed(wanted["name"], exc) from exc
    return results


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        required_one_of=[("name", "members")],
        mutually_exclusive=[("name", "members"), ("spec", "members")],
    )
    p = module.params
    members = p["members"] or [{"name": p["name"], "spec": p["spec"]}]
    results, wanted = [], members[0]
    try:
        if p["state"] == "present" and len(members) > 1:
            results = ensure_present_side_by_side(module, p, members)
        else:
            cached, direct = operator_clients(p)
            for wanted in members:
                params = dict(p, name=wanted["name"], spec=wanted.get("spec"))
                member = Member(module, cached, direct, params)
                results.append(member.present() if p["state"] == "present" else member.absent())
    except MemberFailed as exc:
        module.fail_json(msg=f"member {p['namespace']}/{exc.name}: {exc}")
    except FAILURES as exc:
        module.fail_json(msg=f"member {p['namespace']}/{wanted['name']}: {exc}")
    if p["members"]:
        module.exit_json(changed=any(r["changed"] for r in results), members=results)
    module.exit_json(**results[0])


if __name__ == "__main__":
    main()
