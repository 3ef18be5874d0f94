#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_backup_schedule
short_description: Take an EtcdBackupSchedule's next step and say what its status is
description:
  - Reads the EtcdBackupSchedule and every EtcdBackup of its namespace from the API server,
    plans with qk_schedule (the scheduled time that is due, concurrency Forbid, the starting
    deadline, retention) and acts on the plan.
  - Creates the due EtcdBackup straight through the API server, not through ansible-operator's
    proxy, so that it gets no owner reference (deleting the schedule keeps its backups). Its
    name derives from the scheduled time, so a run repeated after an interruption finds the
    backup it made instead of making a second one.
  - Prunes what retention gives up, each object in the store first (with the credentials of
    the backup's own Secret, read by the module; a C(pvc://) file through a pod that mounts its
    claim, see qk_pvcstore), then its EtcdBackup. When the store refuses,
    the EtcdBackup is kept and the result says why.
  - The role cannot read the object passed by ansible-operator for this, because Ansible would
    evaluate the C({{ .UID }}) placeholders of spec.backupTemplate as Jinja; module results are
    never evaluated.
  - Returns the status, the conditions and the Events for the role to write, and when to look
    again. In check mode plans only.
options:
  name:
    description: Name of the EtcdBackupSchedule.
    type: str
    required: true
  namespace:
    description: Namespace of the EtcdBackupSchedule.
    type: str
    required: true
  poll_period:
    description:
      - How often to look while a backup of the schedule runs (its completion changes only its
        status, which wakes no reconcile); a Go duration or seconds.
    type: raw
    default: 5s
  max_poll_period:
    description: The longest such period, reached by backups that run long.
    type: raw
    default: 30s
  max_prunes:
    description: At most this many backups are pruned per run; the rest in the next ones.
    type: int
    default: 20
requirements: [cronsim, boto3 (s3://), google-cloud-storage (gs://)]
"""

EXAMPLES = r"""
- name: Take the schedule's next step
  etcd_backup_schedule:
    name: nightly
    namespace: default
  register: schedule
"""

RETURN = r"""
exists:
  description: Whether the EtcdBackupSchedule exists (and is not being deleted).
  type: bool
  returned: always
uid:
  description: Its UID, for Events.
  type: str
  returned: when it exists
created:
  description: Name of the EtcdBackup created by this run, or null.
  type: str
  returned: when it exists
pruned:
  description: Names of the EtcdBackups deleted by retention in this run.
  type: list
  elements: str
  returned: when it exists
status:
  description: The status to write (lastScheduleTime, nextScheduleTime, active, ...).
  type: dict
  returned: when it exists
conditions:
  description: C(Scheduled) and C(Degraded), as metav1.Conditions without times.
  type: list
  elements: dict
  returned: when it exists
events:
  description: Events to record about the schedule, each C(reason), C(type), C(message).
  type: list
  elements: dict
  returned: when it exists
requeue:
  description: When to look again, a Go duration (C(0s) means only when the spec changes).
  type: str
  returned: always
"""

import datetime
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_duration import parse_duration
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KubeConfigError,
    KubeError,
    direct_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_schedule import (
    API_VERSION,
    SCHEDULE_LABEL,
    finish,
    plan,
    template_error,
)

# Seconds a pod that deletes a pvc:// file may take (start, mount the claim, delete).
PRUNE_POD_TIMEOUT = 120


def create_backup(client, manifest):
    """None when the backup exists now (made here, or by an interrupted run), else why not."""
    meta = manifest["metadata"]
    try:
        client.create(manifest)
        return None
    except KubeError as exc:
        if not exc.already_exists:
            return f"cannot create EtcdBackup {meta['name']}: {exc}"
    try:
        existing = client.get(API_VERSION, "EtcdBackup", meta["name"], meta["namespace"])
    except KubeError as exc:
        return f"cannot read EtcdBackup {meta['name']}: {exc}"
    labels = ((existing or {}).get("metadata") or {}).get("labels") or {}
    if existing is not None and labels.get(SCHEDULE_LABEL) != meta["labels"][SCHEDULE_LABEL]:
        return (
            f"EtcdBackup {meta['name']} already exists and does not belong to this schedule "
            f"(label {SCHEDULE_LABEL}); rename or delete it"
        )
    return None


def prune_claim_file(client, object_url, namespace):
    """Delete a pvc:// file (and its SHA-256) through a pod that mounts its claim; the error
    message, or None. A claim that is gone holds no file any more."""
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore import (
        ObjectStoreError,
        parse_object_url,
    )
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_pvcstore import (
        ClaimError,
        deleter_pod,
        run_helper,
    )

    try:
        location = parse_object_url(object_url)
        claim = client.get("v1", "PersistentVolumeClaim", location.bucket, namespace)
        if claim is None:
            return None
        image = os.environ.get("OPERATOR_IMAGE") or "quay.io/quorumkeeper/etcd-operator:0.1.0"
        run_helper(client, deleter_pod(object_url, namespace, image), PRUNE_POD_TIMEOUT, claim)
    except (ObjectStoreError, ClaimError, KubeError) as exc:
        return f"cannot delete {object_url}: {exc}"
    return None


def prune_backup(client, entry, namespace):
    """Delete the stored object, then the EtcdBackup; the error message, or None."""
    if entry["object_url"] and entry["object_url"].startswith("pvc://"):
        error = prune_claim_file(client, entry["object_url"], namespace)
        if error:
            return error
    elif entry["object_url"]:
        # Only when there is something to delete: boto3 and google-cloud-storage cost a quarter
        # of a CPU-second to import.
        from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore import (
            ObjectStoreError,
            delete,
            parse_object_url,
        )
        from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_snapshot import (
            SnapshotSourceError,
            read_credentials,
        )

        try:
            credentials = read_credentials(
                None, entry["credentials_secret"], namespace, client=client
            )
            delete(parse_object_url(entry["object_url"]), credentials)
        except (ObjectStoreError, SnapshotSourceError) as exc:
            return str(exc)
    try:
        client.delete(API_VERSION, "EtcdBackup", entry["name"], namespace, uid=entry["uid"])
    except KubeError as exc:
        if exc.conflict:  # the uid precondition: another object of that name, not ours to delete
            return None
        return f"the object is deleted, but not EtcdBackup {entry['name']}: {exc}"
    return None


ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "poll_period": {"type": "raw", "default": "5s"},
    "max_poll_period": {"type": "raw", "default": "30s"},
    "max_prunes": {"type": "int", "default": 20},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        poll = parse_duration(p["poll_period"]) / 1e9
        max_poll = parse_duration(p["max_poll_period"]) / 1e9
    except ValueError as exc:
        module.fail_json(msg=f"poll_period / max_poll_period: {exc}")
    what = f"EtcdBackupSchedule {p['namespace']}/{p['name']}"
    try:
        client = direct_client()
        schedule = client.get(API_VERSION, "EtcdBackupSchedule", p["name"], p["namespace"])
        if schedule is None or schedule["metadata"].get("deletionTimestamp"):
            module.exit_json(changed=False, exists=False, requeue="0s")
        backups = client.list(API_VERSION, "EtcdBackup", p["namespace"])
    except (KubeError, KubeConfigError) as exc:
        module.fail_json(msg=f"cannot read {what} and its EtcdBackups: {exc}")

    planned = plan(
        schedule,
        backups,
        datetime.datetime.now(datetime.UTC),
        template_error=template_error,
        poll_seconds=poll,
        max_poll_seconds=max_poll,
        max_prunes=p["max_prunes"],
    )
    create_error, pruned, prune_errors = None, [], []
    if not module.check_mode:
        if planned["create"] is not None:
            create_error = create_backup(client, planned["create"])
        for entry in planned["prune"]:
            error = prune_backup(client, entry, p["namespace"])
            if error:
                prune_errors.append((entry, error))
            else:
                pruned.append(entry)
    else:
        pruned = list(planned["prune"])
    outcome = finish(planned, create_error, pruned, prune_errors)
    created = planned["create"]["metadata"]["name"] if planned["create"] else None
    if create_error:
        created = None
    module.exit_json(
        changed=bool(created or pruned),
        exists=True,
        uid=schedule["metadata"]["uid"],
        created=created,
        pruned=[entry["name"] for entry in pruned],
        **outcome,
    )


if __name__ == "__main__":
    main()
