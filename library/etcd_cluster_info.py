#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_cluster_info
short_description: Report etcd cluster membership, per-member health, leader and quorum
description:
  - Lists the members of an etcd cluster through the first endpoint that answers, then asks
    every member for its status through its own advertised client URL.
  - A member whose advertised URLs do not answer from where the module runs is asked through
    I(endpoints) instead, recognised by the member ID etcd puts in each answer. So a host
    outside the cluster's DNS can pass the pods' IPs, although the members advertise names
    that only resolve inside the cluster.
  - Never changes anything.
options:
  fail_on_unreachable:
    description:
      - When no endpoint answers, fail (default) or return C(reachable=false).
    type: bool
    default: true
extends_documentation_fragment:
  - quorumkeeper.etcd.etcd_connection
  - quorumkeeper.etcd.etcd_connection.endpoints
requirements: [etcd3aio]
"""

EXAMPLES = r"""
- name: Look at the cluster
  etcd_cluster_info:
    endpoints: ["http://etcd-0.etcd.ns.svc.cluster.local:2379"]
    fail_on_unreachable: false
  register: etcd
"""

RETURN = r"""
reachable:
  description: Whether any endpoint answered.
  type: bool
  returned: always
members:
  description: >-
    Members: name, id (hex as etcdctl prints), peer_urls, client_urls, is_learner, healthy
    (it answered a status call, on an advertised client URL or else on one of I(endpoints)),
    is_leader, version, db_size, db_size_in_use (bytes; the rest is free pages that only a
    defragmentation returns), raft_index, raft_term, errors (of the URLs that did not answer).
  type: list
  elements: dict
  returned: always
leader:
  description: C({id, name}) of the leader, null when no leader is known.
  type: dict
  returned: always
cluster_version:
  description: Cluster-wide version (C(etcdcluster) of the /version endpoint), e.g. C(3.5.0).
  type: str
  returned: always
quorum:
  description: >-
    voting, healthy_voting, required (voting//2+1), tolerable_failures (how many more voting
    members may fail before quorum is lost).
  type: dict
  returned: always
healthy:
  description: Quorum of healthy voting members present and a leader known.
  type: bool
  returned: always
endpoint:
  description: The endpoint whose member list was used.
  type: str
  returned: when reachable
endpoint_errors:
  description: Errors of endpoints that did not answer, by endpoint.
  type: dict
  returned: always
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
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_members import (
    quorum_summary,
)

ARGUMENT_SPEC = {
    **connection_argument_spec(),
    "fail_on_unreachable": {"type": "bool", "default": True},
}


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        required_together=CONNECTION_REQUIRED_TOGETHER,
    )
    if not HAS_ETCD3AIO:
        module.fail_json(msg=missing_required_lib("etcd3aio"), exception=str(ETCD3AIO_IMPORT_ERROR))
    try:
        with etcd_client(profile_from_params(module.params)) as client:
            info = client.cluster_info()
    except EtcdUnreachable as exc:
        if module.params["fail_on_unreachable"]:
            module.fail_json(
                msg=f"cannot reach etcd: {exc}",
                reachable=False,
                endpoint_errors=exc.errors,
            )
        module.exit_json(
            changed=False,
            reachable=False,
            members=[],
            leader=None,
            cluster_version=None,
            quorum=quorum_summary(0, 0),
            healthy=False,
            endpoint_errors=exc.errors,
        )
    except EtcdOperationError as exc:  # etcd refused the credentials
        module.fail_json(msg=str(exc))
    except (ValueError, OSError) as exc:
        module.fail_json(msg=f"invalid etcd connection options: {exc}")
    module.exit_json(changed=False, **info)


if __name__ == "__main__":
    main()
