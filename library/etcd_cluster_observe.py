#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_cluster_observe
short_description: Observe an EtcdCluster in one call - its peers, pods, volumes, Services and etcd
description:
  - >-
    Everything the etcdcluster role decides from, in one call: the cluster's EtcdPeers, the
    pod and PersistentVolumeClaim of each, whether its Services exist, and etcd's own member
    list with per-member health, leader and quorum.
  - >-
    Reads go through ansible-operator's proxy (its informer cache) where a watch is wanted: a
    single-object read of a claim or of the client Service's Endpoints carrying the
    C(operator-sdk/primary-resource) annotations makes ansible-operator watch that kind, so a
    deleted claim or a member's pod becoming (un)ready triggers the next reconcile. Pods and
    ReplicaSets are listed from the API server itself: fresh, and no cluster-wide pod cache.
  - >-
    A claim that looks gone in the cache is read again from the API server before it is
    reported gone: data loss is never decided on a stale read.
  - Only when etcd answers but has no healthy quorum, the namespace's EtcdBackups are listed
    (one call to the API server) and those of this cluster summarized, so that the status can
    name the backup to restore from; a healthy cluster's reconcile never pays for it.
  - Never changes anything.
  - >-
    Runs in the controller process as an action plugin when C(plugins/action) is configured
    (the operator's C(ansible.cfg)): a process of its own cost a reconcile more than the
    observation. The same code runs as this module otherwise
    (C(plugins/module_utils/qk_cluster_observe.py)).
options:
  cluster_domain:
    description: DNS domain of the cluster (members are C(<peer>.<name>.<namespace>.svc.<domain>)).
    type: str
    default: cluster.local
  client_port:
    description: etcd client port.
    type: int
    default: 2379
  volume_size:
    description:
      - The size every member's volume should have (the EtcdCluster's
        C(spec.storage.volumeClaimTemplate.resources.requests.storage)).
      - The StorageClass of a claim that asks for less is read, so that C(pvcs) says whether it
        can grow in place (C(expandable)); omitted, no StorageClass is read.
    type: raw
  volume_size_limit:
    description:
      - The size the operator may grow the volumes to when their live data fills the quota
        (C(spec.maintenance.spaceRecovery.maxVolumeSize)). The StorageClass of a claim that asks
        for less than it is read too, so that C(pvcs) says whether it can grow in place. Only
        with I(volume_size).
    type: raw
  compacted_revision:
    description:
      - The revision the key history was compacted to as last seen
        (C(status.maintenance.lastCompaction.revision); 0 when none was). Given, a healthy
        member is asked where the history is compacted to now (three reads when it has not
        moved - its current revision and each side of the known one - and a binary search over the
        revisions when it has), returned as C(etcd.compacted_revision);
        omitted, it is not asked.
    type: int
  wait_ready:
    description:
      - Members (EtcdPeer names) whose pod Kubernetes should say is ready before the
        observation, waited for up to I(wait_ready_timeout) seconds (the pods are listed every
        0.2 s); the observation is made then whatever the pods say.
      - After a step that started a member, its pod is usually ready within a second (a 1 s
        readiness probe); observing before that would report it not ready, and the readiness
        would take one more reconcile to be reported.
      - The status of these members is given up after 1.5 s when their connection has not
        been made, rather than after I(timeout), since a member that joined through a
        snapshot serves clients only 7 s after it started.
    type: list
    elements: str
    default: []
  wait_ready_timeout:
    description: Seconds to wait for the pods of I(wait_ready).
    type: float
    default: 3
  monitoring:
    description:
      - The EtcdCluster's C(spec.monitoring) (C({}) when it has none but objects may remain
        from before); omitted, monitoring objects are not looked at.
      - Given, the PodMonitor and PrometheusRule named after the cluster are listed (one
        request each; a kind the API server does not serve is reported so) and compared with
        those wanted, and C(monitoring) says what to write or delete.
    type: dict
  alert_rules:
    description:
      - The PrometheusRule whose cluster groups the cluster's PrometheusRule carries
        (config/prometheus/rules.yaml, as text), needed with C(monitoring.prometheusRule).
    type: str
extends_documentation_fragment:
  - quorumkeeper.etcd.etcd_cluster
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.kube_client.api_version
  - quorumkeeper.etcd.etcd_connection
requirements: [etcd3aio, PyYAML]
"""

EXAMPLES = r"""
- name: Observe the cluster
  etcd_cluster_observe:
    name: my-cluster
    namespace: default
  register: observed
"""

RETURN = r"""
cluster:
  description: Whether the EtcdCluster still exists (C(exists)) and is being deleted (C(deleting)).
  type: dict
  returned: always
zones:
  description: >-
    The zone (label topology.kubernetes.io/zone, "" without one) of each node a member's pod
    runs on; empty when the operator may not read nodes.
  type: dict
  returned: always
peers:
  description: >-
    EtcdPeers by ordinal: name, uid, deleting, age (seconds), state (New or Existing),
    initial_cluster (names), member_id and pvc_uid (from their status), version, repository,
    tls (the EtcdPeer's), client_url (how the operator reaches the member: https where it
    serves it and the connection has a client certificate, else http) and status (the fields
    the etcdcluster role writes).
  type: list
  elements: dict
  returned: always
pods:
  description: >-
    By peer name, the member's current pod (name, phase, ready, deleting, restarts, node, ip,
    created, last_exit, problem) or null.
  type: dict
  returned: always
pvcs:
  description: >-
    By peer name, the member's claim (exists, uid, phase, deleting, annotated, problem,
    storage_class, request_bytes, capacity, capacity_bytes, resizing: the resize conditions set,
    and expandable: whether its StorageClass allows expansion, for a claim smaller than
    C(volume_size) only).
  type: dict
  returned: always
monitoring:
  description: >-
    With I(monitoring): the kinds to write (C(write)) and delete (C(delete)), and the
    C(Monitoring) condition once done (C(condition)).
  type: dict
  returned: when I(monitoring) is given
replicasets:
  description: By peer name, whether the member's ReplicaSet exists and its ReplicaFailure message.
  type: dict
  returned: always
services:
  description: >-
    Whether the headless (C(headless)), client (C(client)) and metrics (C(metrics)) Services
    exist.
  type: dict
  returned: always
pdb:
  description: The cluster's PodDisruptionBudget (exists, max_unavailable, disruptions_allowed).
  type: dict
  returned: always
endpoints:
  description: Whether the client Service's Endpoints exist (C(exists)) and carry the annotations
    that route their changes to this EtcdCluster (C(annotated)).
  type: dict
  returned: always
recovery_restore:
  description: >-
    The in-place EtcdRestore of an automatic disaster recovery, named by the EtcdCluster's
    annotation C(etcd.quorumkeeper.dev/recovery): name, exists, uid, phase, message, backup, and
    pending (true until it has handed the restored volumes to the cluster). Null without that
    annotation.
  type: dict
  returned: always
now:
  description: Time of the observation (UTC, RFC 3339); the disaster recovery delay counts on it.
  type: str
  returned: always
backups:
  description: >-
    Only without a healthy quorum, when etcd answers or a member's data is gone: this
    cluster's EtcdBackups
    (C(spec.source.clusterName)), each with name, phase, revision, completion_time, verified
    (the C(Verified) condition's status) and verification_failed (the verification found the
    snapshot bad); null when they could not be listed (C(backups_error) says why).
  type: list
  elements: dict
  returned: without a healthy quorum, when etcd answers or a member's data is gone
etcd:
  description: What etcd says, as etcd_cluster_info returns it (reachable, members, leader, quorum,
    healthy, cluster_version, endpoint_errors), alarms (C([{member_id, alarm}]), null
    when no healthy member answered) and, with I(compacted_revision), compacted_revision
    (absent when no healthy member answered). When etcd refuses the connection's credentials,
    C(credentials_refused) holds its answer, C(reachable) is true and nothing else is known.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_action import run_module
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_observe import (
    ARGUMENT_SPEC,
    observe_cluster,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    CONNECTION_REQUIRED_TOGETHER,
)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        required_together=CONNECTION_REQUIRED_TOGETHER,
    )
    run_module(module, observe_cluster, needs_client=False)


if __name__ == "__main__":
    main()
