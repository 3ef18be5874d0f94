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
      C(backup_name), C(error) (null or C({reason, message})) and C(waiting) (a message while
      the named backup has not completed).
  type: dict
  returned: when it exists
cluster:
  description: >-
    The target EtcdCluster (exists, restore_uid, recovery (its recovery annotation), deleting,
    available, message).
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
    pods = client.list("v1", "Pod", namespace, label_selector=f"{RESTORE_KEY}={meta['uid']}")
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
        "pods": sorted(
            (summarize_restore_pod(p, failed_log(client, p, log_lines)) for p in pods),
            key=lambda p: p["name"],
        ),
    }
    observed["step"] = plan_restore(observed)
    return observed


ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "log_lines": {"type": "int", "default": 10},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        result = observe(direct_client(), p["name"], p["namespace"], p["log_lines"])
    except (KubeError, KubeConfigError) as exc:
        module.fail_json(msg=f"cannot observe EtcdRestore {p['namespace']}/{p['name']}: {exc}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
