#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_restore_info
short_description: Observe an EtcdRestore and everything it would touch, and choose its next step
description:
  - Reads, straight from the API server, the EtcdRestore, the EtcdBackup it names (if any), the
    EtcdCluster it is to create, the PVCs that cluster's members would use (labelled with the
    cluster or named like a member) and the restore's own pods (with the log tail of a failed
    one), and returns them summarized with the next step chosen by
    C(qk_restore.plan_restore).
  - The role reads the EtcdRestore through this module rather than from the variables
    ansible-operator passes, because Ansible would evaluate any C({{) in the object (a pod
    annotation of the cluster template, say) as Jinja; module results are never evaluated.
  - Never changes anything, and never contacts etcd or the object store.
options:
  name:
    description: Name of the EtcdRestore.
    type: str
    required: true
  namespace:
    description: Namespace of the EtcdRestore.
    type: str
    required: true
  log_lines:
    description: Lines of a failed restore container's log to put in the step's message.
    type: int
    default: 10
  wait_seconds:
    description:
      - When the step is to wait for the restore pods (C(RestoringVolumes)) or for the restored
        cluster to be Available (C(WaitingForCluster)), read those again every
        I(wait_interval) seconds for up to this long, and return as soon as the step changes
        (then from a whole new observation), instead of waiting for a requeue.
      - Neither pods finishing nor a cluster becoming Available wakes an EtcdRestore; the step
        after them starts within I(wait_interval) rather than a requeue period later.
      - A wait that runs out without a change returns the step with C(requeue=next), so that
        the caller looks again at once.
      - C(0) returns at once.
    type: float
    default: 0
  wait_interval:
    description: Seconds between two reads while waiting (one API request each).
    type: float
    default: 0.25
requirements: [PyYAML]
"""

EXAMPLES = r"""
- name: Observe the restore
  etcd_restore_info:
    name: my-cluster-restore
    namespace: default
  register: restore
"""

RETURN = r"""
exists:
  description: Whether the EtcdRestore exists.
  type: bool
  returned: always
deleting:
  description: Whether it is being deleted.
  type: bool
  returned: when it exists
name:
  description: Its name.
  type: str
  returned: when it exists
in_place:
  description: spec.inPlace (an EtcdCluster's disaster recovery restoring into that cluster).
  type: bool
  returned: when it exists
members_left:
  description: With in_place, the EtcdPeers and member pods of the cluster still there.
  type: list
  elements: str
  returned: when it exists
uid:
  description: Its UID (what marks everything it creates).
  type: str
  returned: when it exists
phase:
  description: Its status.phase (Pending when none yet).
  type: str
  returned: when it exists
status:
  description: Its status as stored.
  type: dict
  returned: when it exists
cluster_name:
  description: spec.clusterName, the EtcdCluster to create.
  type: str
  returned: when it exists
replicas:
  description: spec.clusterTemplate.replicas.
  type: int
  returned: when it exists
cluster_template:
  description: spec.clusterTemplate.
  type: dict
  returned: when it exists
source:
  description:
    - C(object_url), C(sha256) (expected; null when unknown), C(credentials_secret),
      C(backup_name), C(error) (null or C({reason, message})), C(waiting) (a message while
      the named backup has not completed) and C(checked_by_etcd) (the backup's verification
      already restored these very bytes with etcd's integrity check).
  type: dict
  returned: when it exists
cluster:
  description: >-
    The target EtcdCluster (exists, restore_uid, recovery (its recovery annotation), deleting,
    available, message, cluster_tls and cluster_auth (whether reading its revision needs the
    operator's client certificate, root's password)).
  type: dict
  returned: when it exists
pvcs:
  description: The target cluster's PVCs (name, restore_uid, deleting).
  type: list
  elements: dict
  returned: when it exists
pods:
  description: The restore pods (name, peer, phase, step, failure, deleting).
  type: list
  elements: dict
  returned: when it exists
step:
  description:
    - The next step, C({action, phase, reason, message, requeue, ...}); see qk_restore.
  type: dict
  returned: always
waited:
  description: Seconds spent waiting for the step to change (see I(wait_seconds)).
  type: float
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import API_VERSION
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KubeConfigError,
    KubeError,
    direct_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import CLUSTER_LABEL
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_restore import (
    RESTORE_KEY,
    plan_restore,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_restore_observe import (
    resolve_source,
    summarize_cluster,
    summarize_restore_pod,
    target_claims,
    wait_for_next_step,
)


def failed_log(client, pod, lines):
    """The tail of the failed container's log, or "" when the kubelet cannot give it."""
    failure = summarize_restore_pod(pod)["failure"]
    if not failure or not failure.get("container") or failure.get("exit_code") is None:
        return ""
    try:
        return client.pod_log(
            pod["metadata"]["name"],
            pod["metadata"]["namespace"],
            failure["container"],
            tail_lines=lines,
        )
    except KubeError:
        return ""


def members_left(client, namespace, cluster_name):
    """EtcdPeers and member pods of the cluster an in-place restore waits to be gone."""
    selector = f"{CLUSTER_LABEL}={cluster_name}"
    peers = client.list(API_VERSION, "EtcdPeer", namespace, label_selector=selector)
    pods = client.list("v1", "Pod", namespace, label_selector=selector)
    return [f"EtcdPeer/{x['metadata']['name']}" for x in peers] + [
        f"Pod/{x['metadata']['name']}" for x in pods
    ]


def observe(client, name, namespace, log_lines):
    restore = client.get(API_VERSION, "EtcdRestore", name, namespace)
    if restore is None:
        return {"exists": False, "step": plan_restore({"exists": False})}
    meta, spec = restore["metadata"], restore.get("spec") or {}
    status = restore.get("status") or {}
    template = spec.get("clusterTemplate") or {}
    cluster_name = spec.get("clusterName")
    backup_name = (spec.get("source") or {}).get("backupName")
    backup = client.get(API_VERSION, "EtcdBackup", backup_name, namespace) if backup_name else None
    cluster = client.get(API_VERSION, "EtcdCluster", cluster_name, namespace)
    claims = client.list("v1", "PersistentVolumeClaim", namespace)
    failed = next(
        (
            c
            for c in status.get("conditions") or []
            if c.get("type") == "Failed" and c.get("status") == "True"
        ),
        {},
    )
    in_place = bool(spec.get("inPlace"))
    observed = {
        "exists": True,
        "deleting": bool(meta.get("deletionTimestamp")),
        "name": name,
        "in_place": in_place,
        "members_left": members_left(client, namespace, cluster_name) if in_place else [],
        "uid": meta["uid"],
        "namespace": namespace,
        "phase": status.get("phase") or "Pending",
        "failed_reason": failed.get("reason"),
        "status": status,
        "cluster_name": cluster_name,
        "replicas": int(template.get("replicas") or 3),
        "cluster_template": template,
        "source": resolve_source(restore, backup),
        "cluster": summarize_cluster(cluster),
        "pvcs": target_claims(claims, cluster_name),
        "pods": restore_pods(client, namespace, meta["uid"], log_lines),
    }
    observed["step"] = plan_restore(observed)
    return observed


def restore_pods(client, namespace, uid, log_lines):
    pods = client.list("v1", "Pod", namespace, label_selector=f"{RESTORE_KEY}={uid}")
    return sorted(
        (summarize_restore_pod(p, failed_log(client, p, log_lines)) for p in pods),
        key=lambda p: p["name"],
    )


def wait(client, observed, log_lines, seconds, interval):
    """``wait_for_next_step`` with the API server: the restore pods, or the target cluster, read
    again; the whole restore observed again once the step changes."""
    namespace = observed.get("namespace")

    def read(what):
        if what == "pods":
            return restore_pods(client, namespace, observed["uid"], log_lines)
        return summarize_cluster(
            client.get(API_VERSION, "EtcdCluster", observed["cluster_name"], namespace)
        )

    return wait_for_next_step(
        observed,
        read,
        lambda: observe(client, observed["name"], namespace, log_lines),
        seconds,
        interval,
    )


ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "log_lines": {"type": "int", "default": 10},
    "wait_seconds": {"type": "float", "default": 0},
    "wait_interval": {"type": "float", "default": 0.25},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        client = direct_client()
        result = observe(client, p["name"], p["namespace"], p["log_lines"])
        result, waited = wait(client, result, p["log_lines"], p["wait_seconds"], p["wait_interval"])
    except (KubeError, KubeConfigError) as exc:
        module.fail_json(msg=f"cannot observe EtcdRestore {p['namespace']}/{p['name']}: {exc}")
    module.exit_json(changed=False, waited=waited, **result)


if __name__ == "__main__":
    main()
