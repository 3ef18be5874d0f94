#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_defragment
short_description: Give etcd's disk space back - compact, defragment each member, disarm NOSPACE
description:
  - Compacts the key history to the current revision (waiting until the backend has freed it),
    then defragments the members one at a time (learners and followers first, the leader last,
    after moving leadership to a member already defragmented, else to the healthy voting member
    furthest along the raft log, never to a learner), then disarms the NOSPACE alarms.
  - A defragmentation rewrites the member's database and the member answers nothing else
    meanwhile. So it starts only when every member is healthy and a quorum has a leader, each
    member must answer again before the next one starts, and the first failure stops the run;
    the failed result says what was done before (C(members), C(status)), the member it stopped
    at with the error (C(stopped_at)) and the members it did not get to (C(not_started)).
  - After a NOSPACE alarm this is what makes etcd accept writes again. If the live data alone
    is at the quota, etcd raises the alarm again at the next write; C(members[].db_size_in_use)
    tells.
options:
  compact:
    description:
      - Compact the history to the current revision first (discards every older revision of
        every key; watchers of older revisions get a compaction error).
    type: bool
    default: true
  disarm:
    description:
      - Disarm the NOSPACE alarms afterwards.
    type: bool
    default: false
  members:
    description:
      - Names of the members to defragment; all of them when omitted.
    type: list
    elements: str
  defrag_timeout:
    description:
      - Seconds one member's defragmentation may take before the run stops.
    type: int
    default: 120
extends_documentation_fragment:
  - quorumkeeper.etcd.etcd_connection
  - quorumkeeper.etcd.etcd_connection.endpoints
requirements: [etcd3aio]
"""

EXAMPLES = r"""
- name: Make etcd accept writes again after a NOSPACE alarm
  etcd_defragment:
    endpoints: ["http://etcd-0.etcd.ns.svc.cluster.local:2379"]
    disarm: true
  register: reclaimed
"""

RETURN = r"""
compacted_revision:
  description: The revision compacted to; null when not compacted (or already compacted that far).
  type: int
  returned: always
members:
  description: >-
    Per member, in the order defragmented - name, id, db_size_before, db_size_after,
    db_size_in_use (bytes) and seconds; in check mode only name and id, in the order it would
    go.
  type: list
  elements: dict
  returned: always
leader_moved_to:
  description: The member leadership was moved to before the leader was defragmented.
  type: str
  returned: always
disarmed:
  description: Members whose NOSPACE alarm was disarmed.
  type: list
  elements: str
  returned: always
summary:
  description: One line saying what was done, for an Event.
  type: str
  returned: always
status:
  description: >-
    The run in the shape of an EtcdCluster's status.maintenance.lastDefragmentation -
    compactedRevision and members [{name, dbSizeBefore, dbSizeAfter, seconds}] (after a
    failure, the members defragmented before it).
  type: dict
  returned: always
stopped_at:
  description: >-
    Where a run that failed part-way stopped - name and id of the member (null when the
    compaction or the disarming failed), stage and error.
  type: dict
  returned: failure after the run started
not_started:
  description: Names of the members a run that failed part-way did not get to, in order.
  type: list
  elements: str
  returned: failure after the run started
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
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_maintenance import (
    MaintenanceFailed,
    MaintenanceRefused,
    describe,
    describe_failure,
    reclaim_space,
    status_of,
)

ARGUMENT_SPEC = {
    **connection_argument_spec(),
    "compact": {"type": "bool", "default": True},
    "disarm": {"type": "bool", "default": False},
    "members": {"type": "list", "elements": "str"},
    "defrag_timeout": {"type": "int", "default": 120},
}


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        required_together=CONNECTION_REQUIRED_TOGETHER,
    )
    if not HAS_ETCD3AIO:
        module.fail_json(msg=missing_required_lib("etcd3aio"), exception=str(ETCD3AIO_IMPORT_ERROR))
    p = module.params
    try:
        with etcd_client(profile_from_params(p)) as client:
            result = reclaim_space(
                client,
                compact=p["compact"],
                disarm=p["disarm"],
                defrag_timeout=p["defrag_timeout"],
                names=p["members"],
                check=module.check_mode,
            )
    except MaintenanceRefused as exc:
        module.fail_json(msg=f"not defragmenting: {exc}", changed=False)
    except MaintenanceFailed as exc:
        # msg says it all: the converge's rescue reports it (StepFailed Event and condition).
        module.fail_json(
            msg=describe_failure(str(exc), exc.result),
            changed=any(
                exc.result[k]
                for k in ("members", "compacted_revision", "leader_moved_to", "disarmed")
            ),
            summary=describe(exc.result),
            status=status_of(exc.result),
            **exc.result,
        )
    except EtcdUnreachable as exc:
        module.fail_json(msg=f"cannot reach etcd: {exc}", endpoint_errors=exc.errors)
    except EtcdOperationError as exc:
        module.fail_json(msg=str(exc))
    except (ValueError, OSError) as exc:
        module.fail_json(msg=f"invalid etcd connection options: {exc}")
    # In check mode: whether there is anything to do (a defragmentation always rewrites).
    changed = bool(result["members"] or result["compacted_revision"] or result["disarmed"])
    module.exit_json(changed=changed, summary=describe(result), status=status_of(result), **result)


if __name__ == "__main__":
    main()
