# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""What an EtcdRestore observes, summarized for its planner (qk_restore.plan_restore).

``resolve_source`` finds where the snapshot is (the named EtcdBackup, once it completed and was
not found bad, or spec.source.objectURL; the URL and SHA-256 recorded once restoring started);
``summarize_cluster`` the target EtcdCluster and whether this restore made it;
``target_claims`` the PVCs its members use or would take; ``summarize_restore_pod`` a restore
pod's phase, step and failure (with its log tail). Pure functions, unit tested in
tests/unit/test_restore_plan.py; and ``wait_for_next_step``, which waits in one reconcile for
what would wake no EtcdRestore (its pods finishing, its cluster becoming Available), with the
reads given to it (tests/unit/test_restore_wait.py).
"""

from __future__ import annotations

import re
import time

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    CLUSTER_LABEL,
    cluster_security,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_helper_pods import (
    container_failure,
    container_waiting,
    running_step,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import (
    CONFIG_PROBLEMS,
    IMAGE_PROBLEMS,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_restore import (
    RECOVERY_KEY,
    RESTORE_KEY,
    RESTORE_PEER_LABEL,
    plan_restore,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_verify import RETRYABLE_REASONS

# The etcdcluster role's restore pods: waiting reasons that will not clear by themselves.
STUCK_REASONS = IMAGE_PROBLEMS | CONFIG_PROBLEMS
LOG_TAIL_CHARS = 1500


def _condition(obj, kind):
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def checked_by_etcd(backup, sha256):
    """Whether etcd has already checked the integrity of the bytes with SHA-256 ``sha256``: the
    EtcdBackup's verification (Verified True) restored them with ``snapshot restore``, which
    checks the SHA-256 etcd appends to every snapshot it streams, after its fetch matched them
    to the SHA-256 recorded at backup time. A restore pod whose fetch matches the same SHA-256
    then has nothing left for that check to find (qk_restore_render: ``--skip-hash-check``)."""
    if backup is None or not sha256:
        return False
    recorded = ((backup.get("status") or {}).get("sha256") or "").lower()
    verified = _condition(backup, "Verified").get("status") == "True"
    return verified and recorded == sha256.lower()


def resolve_source(restore, backup=None, parse_url=None):
    """Where the snapshot is: ``{object_url, sha256, credentials_secret, backup_name, error,
    waiting, checked_by_etcd}``. ``error`` is None or ``{reason, message}``; ``waiting`` is a
    message while the named EtcdBackup has not completed yet; ``checked_by_etcd`` whether the
    backup's verification already proved these bytes with etcd's own check.

    Once a restore has started (phase Restoring) the URL and SHA-256 it recorded are used, so
    that a backup deleted or replaced meanwhile changes nothing. ``parse_url`` checks a URL
    (raising ValueError-like errors with a message); qk_objectstore.parse_object_url in the
    module."""
    spec = (restore.get("spec") or {}).get("source") or {}
    status = restore.get("status") or {}
    namespace = (restore.get("metadata") or {}).get("namespace")
    name = spec.get("backupName")
    source = {
        "object_url": None,
        "sha256": None,
        "credentials_secret": spec.get("credentialsSecret"),
        "backup_name": name,
        "error": None,
        "waiting": None,
        "checked_by_etcd": False,
    }
    if backup is not None and not source["credentials_secret"]:
        destination = (backup.get("spec") or {}).get("destination") or {}
        source["credentials_secret"] = destination.get("credentialsSecret")
    if status.get("phase") == "Restoring" and status.get("objectURL"):
        sha256 = status.get("sha256")
        source.update(
            object_url=status["objectURL"],
            sha256=sha256,
            checked_by_etcd=checked_by_etcd(backup, sha256),
        )
        return source
    if name:
        what = f"EtcdBackup {namespace}/{name} (spec.source.backupName)"
        if backup is None or (backup.get("metadata") or {}).get("deletionTimestamp"):
            source["error"] = {"reason": "BackupNotFound", "message": f"{what} does not exist"}
            return source
        backup_status = backup.get("status") or {}
        phase = backup_status.get("phase") or "Pending"
        if phase == "Failed":
            failed = _condition(backup, "Failed").get("message") or "no reason given"
            source["error"] = {"reason": "BackupFailed", "message": f"{what} failed: {failed}"}
            return source
        if phase != "Completed" or not backup_status.get("objectURL"):
            source["waiting"] = f"waiting for {what} to complete (it is {phase})"
            return source
        # Its read-back verification found it cannot be restored. One still under way (or
        # disabled), or one that could not run (store or pod trouble, retried by the backup),
        # says nothing about the snapshot and is no reason to wait: the restore checks the
        # bytes itself.
        verified = _condition(backup, "Verified")
        if verified.get("status") == "False" and verified.get("reason") not in RETRYABLE_REASONS:
            source["error"] = {
                "reason": "BackupNotVerified",
                "message": f"{what} failed its verification: "
                f"{verified.get('message') or 'no reason given'}",
            }
            return source
        sha256 = backup_status.get("sha256")
        source.update(
            object_url=backup_status["objectURL"],
            sha256=sha256,
            checked_by_etcd=checked_by_etcd(backup, sha256),
        )
    else:
        source["object_url"] = spec.get("objectURL")
    if parse_url is not None:
        try:
            parse_url(source["object_url"] or "")
        except Exception as exc:  # noqa: BLE001 - the parser's own words
            source["error"] = {"reason": "InvalidSource", "message": f"{exc}"}
    return source


def summarize_cluster(cluster):
    """The target EtcdCluster: ``{exists, restore_uid, deleting, available, message,
    cluster_tls, cluster_auth}`` (the last two: qk_domain.cluster_security)."""
    if cluster is None:
        return {
            "exists": False,
            "restore_uid": "",
            "recovery": "",
            "deleting": False,
            "available": False,
            **cluster_security(None),
        }
    meta = cluster.get("metadata") or {}
    available = _condition(cluster, "Available")
    status = cluster.get("status") or {}
    return {
        "exists": True,
        "restore_uid": (meta.get("annotations") or {}).get(RESTORE_KEY, ""),
        "recovery": (meta.get("annotations") or {}).get(RECOVERY_KEY, ""),
        "deleting": bool(meta.get("deletionTimestamp")),
        # The status must describe the spec as created, not an earlier object of that name.
        "available": available.get("status") == "True"
        and status.get("observedGeneration") == meta.get("generation"),
        "message": available.get("message") or "no status yet",
        **cluster_security(cluster),
    }


def member_claim_pattern(cluster):
    """Names the members of ``cluster`` give their PVCs (``<cluster>-<ordinal>``)."""
    return re.compile(rf"^{re.escape(cluster)}-\d+$")


def target_claims(pvcs, cluster):
    """The PVCs that belong to ``cluster``'s members, or would be taken for theirs: labelled
    with the cluster, or named like a member. ``[{name, restore_uid, deleting}]`` by name."""
    pattern = member_claim_pattern(cluster)
    found = []
    for pvc in pvcs:
        meta = pvc.get("metadata") or {}
        labelled = (meta.get("labels") or {}).get(CLUSTER_LABEL) == cluster
        if labelled or pattern.match(meta.get("name") or ""):
            found.append(
                {
                    "name": meta.get("name"),
                    "restore_uid": (meta.get("annotations") or {}).get(RESTORE_KEY, ""),
                    "deleting": bool(meta.get("deletionTimestamp")),
                }
            )
    return sorted(found, key=lambda c: c["name"])


def summarize_restore_pod(pod, log_tail=None):
    """A restore pod: ``{name, peer, phase, step, failure, deleting}``; ``failure`` is None or
    ``{container, exit_code, reason, message, log}``: it exited non-zero, or it waits for
    something that will not come (an image that cannot be pulled)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    failure = container_failure(pod) if phase != "Succeeded" else None
    if failure is None and phase == "Failed":
        failure = {
            "container": "",
            "exit_code": None,
            "reason": status.get("reason") or "Failed",
            "message": (status.get("message") or "").strip(),
        }
    if failure is None and phase == "Pending":
        stuck = container_waiting(pod, STUCK_REASONS)
        if stuck:
            failure = {
                "container": stuck["container"],
                "exit_code": None,
                "reason": stuck["reason"],
                "message": f"image {stuck['image']}: {stuck['message'] or 'no detail'}",
            }
    if failure is not None:
        failure = {**failure, "log": (log_tail or "").strip()[-LOG_TAIL_CHARS:]}
    return {
        "name": meta.get("name", ""),
        "peer": (meta.get("labels") or {}).get(RESTORE_PEER_LABEL, ""),
        "phase": phase,
        "step": running_step(pod),
        "failure": failure,
        "deleting": bool(meta.get("deletionTimestamp")),
    }


# What a step waits on that no event reports to the EtcdRestore, by the step's reason.
AWAITED = {"RestoringVolumes": "pods", "WaitingForCluster": "cluster"}


def wait_for_next_step(observed, read, observe_again, seconds, interval, clock=time.monotonic):
    """``(observed, seconds waited)``: the observation to act on after waiting up to
    ``seconds`` for its step to change.

    Only a step that waits on something that wakes nobody is waited on: the restore pods
    finishing (``read("pods")``: their summaries) or the restored cluster becoming Available
    (``read("cluster")``: ``summarize_cluster``). That one thing is read every ``interval``
    seconds and the restore planned again with it; once the step would change, the whole
    restore is observed again (``observe_again()``), so that the step taken comes from one
    current observation, not from a mix of old and new. A wait that ran its whole time without
    a change returns the step with requeue ``next``: the reads go on at once, where a requeue
    period would leave seconds in which nobody looks."""
    step = observed["step"]
    awaited = AWAITED.get(step["reason"]) if step["action"] == "wait" else None
    if seconds <= 0 or awaited is None or step["requeue"] != "poll":
        return observed, 0.0
    started = clock()
    current = dict(observed)
    while clock() - started < seconds:
        time.sleep(max(min(interval, seconds - (clock() - started)), 0))
        current[awaited] = read(awaited)
        following = plan_restore(current)
        if (following["action"], following["reason"]) != (step["action"], step["reason"]):
            return observe_again(), round(clock() - started, 2)
    return {**observed, "step": {**step, "requeue": "next"}}, round(clock() - started, 2)
