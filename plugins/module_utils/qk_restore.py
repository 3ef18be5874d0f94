# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""An EtcdRestore: a new EtcdCluster whose members start on volumes restored from a snapshot.

Level-triggered: every reconcile observes (the EtcdRestore, its source, the target EtcdCluster,
the PVCs that cluster's members would use, the restore pods) and ``plan_restore`` picks the
next step:

1. done, being deleted, or failed for good: nothing;
2. refusals, before anything is created: an EtcdCluster of that name not created by this
   restore, or any PVC of that cluster not created by it (labelled with the cluster, or named
   like one of its members), or a source that cannot be used;
3. ``restore_volumes``: check the snapshot's bytes (first time only), then create each member's
   PVC (rendered exactly as the etcdcluster role would) and one restore pod per member (``fetch``
   the snapshot into an emptyDir, then ``etcdutl snapshot restore`` into the member's data dir);
4. ``create_cluster`` once every restore pod Succeeded: the EtcdCluster (spec = clusterTemplate),
   which the etcdcluster role bootstraps on the restored volumes, then the pods are deleted;
5. ``complete`` once that cluster is Available (the restored revision is read from etcd).

A restore pod that fails makes the restore fail: the PVCs it created are deleted (they hold
nothing but a failed restore), the failed pods are kept for their logs. Everything this restore
creates carries its UID (annotation ``etcd.quorumkeeper.dev/restore`` on the EtcdCluster and the
PVCs, label of the same name on its pods), which is how a later reconcile, or one after an
operator restart, tells its own objects from anyone else's.

This module holds the planner and the restore's vocabulary (the keys that mark its objects,
the final failure reasons); what it observes is summarized in qk_restore_observe, and the
objects it creates are rendered in qk_restore_render. Pure functions, unit tested in
tests/unit/test_restore_plan.py.
"""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import API_GROUP
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_helper_pods import (
    FETCH_SHA256_MISMATCH,
)

# On the EtcdCluster and the PVCs a restore creates (annotation), and on its pods (label).
RESTORE_KEY = f"{API_GROUP}/restore"
RESTORE_PEER_LABEL = f"{API_GROUP}/restore-peer"
# On an EtcdCluster under automatic disaster recovery: the name of its in-place EtcdRestore.
RECOVERY_KEY = f"{API_GROUP}/recovery"

# Failure reasons after which the restore is not tried again (the spec is immutable: the user
# fixes the cause and creates a new EtcdRestore). Any other reason is tried again after the
# retry period: a backup that is not there yet, a store or Secret that can be fixed.
FINAL_REASONS = {
    "ClusterExists",
    "VolumesExist",
    "InvalidSource",
    "SnapshotHashMismatch",
    "RestoreFailed",
    # The backup's verification proved the snapshot bad; a backup never changes after that.
    "BackupNotVerified",
}


# --------------------------------------------------------------------------------------------
# Failed restore pods
# --------------------------------------------------------------------------------------------


def failure_reason(failure):
    """The restore's Failed reason for a failed restore pod. Both are final: the pods are kept
    for their logs, and the store was readable and the bytes right a moment before (the
    operator checked them), so a pod that cannot read them is not fixed by waiting."""
    if failure.get("container") == "fetch" and failure.get("exit_code") == FETCH_SHA256_MISMATCH:
        return "SnapshotHashMismatch"
    return "RestoreFailed"


def describe_failure(pod, namespace):
    """Why a restore pod failed, with its log tail and the command that shows the whole log."""
    failure = pod["failure"]
    container = failure.get("container") or ""
    if failure.get("exit_code") is not None:
        what = f"container {container} exited with code {failure['exit_code']}"
    else:
        what = f"container {container}" if container else "the pod"
        what += f" failed ({failure.get('reason')})"
    detail = failure.get("log") or failure.get("message") or "no output"
    command = f"kubectl logs -n {namespace} {pod['name']}"
    if container:
        command += f" -c {container}"
    return f"restore pod {pod['name']} (member {pod['peer']}): {what}: {detail}; see {command}"


# --------------------------------------------------------------------------------------------
# Plan
# --------------------------------------------------------------------------------------------


def _step(action, phase, reason, message, requeue, **extra):
    return {
        "action": action,
        "phase": phase,
        "reason": reason,
        "message": message,
        "requeue": requeue,
        **extra,
    }


def _list(names):
    return ", ".join(names)


def plan_restore(observed):
    """The next step of a restore. ``observed``: ``{exists, deleting, uid, namespace, phase,
    failed_reason, cluster_name, replicas, source, cluster, pvcs, pods}`` (etcd_restore_info).

    A step is ``{action, phase, reason, message, requeue, ...}``; ``action`` is one of
    ``none``, ``wait`` (write the status only), ``refuse`` (Failed, nothing was created),
    ``restore_volumes`` (with ``verify``: check the snapshot's bytes first), ``fail`` (delete
    what this restore created, keep failed pods), ``create_cluster`` and ``complete``.
    ``requeue`` is ``none`` (only a change of the EtcdRestore wakes it), ``next`` (observe again
    at once: what the step started, restore pods or the cluster, is what the next step waits
    for, and no event reports it), ``poll`` (pods or the cluster are under way), ``slow`` (the
    named backup is still running) or ``retry``.
    """
    if not observed.get("exists") or observed.get("deleting"):
        return _step("none", "", "", "", "none")
    phase = observed.get("phase") or "Pending"
    if phase == "Completed":
        return _step("none", phase, "RestoreCompleted", "", "none")
    if phase == "Failed" and observed.get("failed_reason") in FINAL_REASONS:
        return _step("none", phase, observed["failed_reason"], "", "none")

    uid, namespace = observed["uid"], observed["namespace"]
    name, replicas = observed["cluster_name"], int(observed["replicas"])
    source, cluster = observed["source"], observed["cluster"]
    ours = [c for c in observed.get("pvcs") or [] if c["restore_uid"] == uid]
    theirs = [c for c in observed.get("pvcs") or [] if c["restore_uid"] != uid]
    pods = [p for p in observed.get("pods") or [] if not p.get("deleting")]
    started = bool(ours or pods)

    if cluster["exists"] and cluster["restore_uid"] == uid:
        if pods:
            return _step(
                "create_cluster",
                "Restoring",
                "ClusterCreated",
                f"EtcdCluster {name} was created from the restored volumes; deleting the "
                "restore pods",
                "next",
                pods=[p["name"] for p in pods],
            )
        if cluster["available"]:
            return _step(
                "complete",
                "Completed",
                "RestoreCompleted",
                f"EtcdCluster {name} is Available on the volumes restored from "
                f"{source['object_url']}",
                "none",
            )
        return _step(
            "wait",
            "Restoring",
            "WaitingForCluster",
            f"waiting for EtcdCluster {name} to be Available on the restored volumes: "
            f"{cluster['message']}",
            "poll",
        )

    if observed.get("in_place"):
        waiting = _in_place_wait(observed, theirs)
        if waiting:
            return waiting
    elif cluster["exists"]:
        kept = f"; PVCs {_list(c['name'] for c in ours)} of this restore are kept" if ours else ""
        return _step(
            "refuse",
            "Failed",
            "ClusterExists",
            f"EtcdCluster {namespace}/{name} already exists and was not created by this restore; "
            "a restore only creates a new cluster: delete that cluster and its PVCs, or restore "
            f"under another spec.clusterName{kept}",
            "none",
        )

    if theirs and not observed.get("in_place"):
        message = (
            f"PVCs {_list(c['name'] for c in theirs)} of cluster {name} exist and were not "
            "created by this restore (they may hold another cluster's data); delete them "
            f"(kubectl delete pvc -n {namespace} {' '.join(c['name'] for c in theirs)}) or "
            "restore under another spec.clusterName"
        )
        held = sorted({c["restore_uid"] for c in theirs if c["deleting"] and c["restore_uid"]})
        if held:
            # A failed restore keeps its failed pods for their logs, and they keep its PVCs.
            message += (
                "; those of a failed EtcdRestore (UID "
                f"{_list(held)}) are released once that EtcdRestore is deleted"
            )
        if started:
            return _step("fail", "Failed", "VolumesExist", message, "none")
        return _step("refuse", "Failed", "VolumesExist", message, "none")

    if source.get("waiting") and not started:
        return _step("wait", "Pending", "WaitingForBackup", source["waiting"], "slow")
    if source.get("error"):
        reason, message = source["error"]["reason"], source["error"]["message"]
        requeue = "none" if reason in FINAL_REASONS else "retry"
        return _step("fail" if started else "refuse", "Failed", reason, message, requeue)

    failed = [p for p in pods if p["failure"]]
    if failed:
        reason = failure_reason(failed[0]["failure"])
        return _step(
            "fail",
            "Failed",
            reason,
            describe_failure(failed[0], namespace)
            + (
                f"; the restore pods of {_list(p['peer'] for p in failed[1:])} failed too"
                if failed[1:]
                else ""
            ),
            "none",
            keep_pods=[p["name"] for p in failed],
        )

    # A member whose PVC went away under its restore pod would start empty: never hand that
    # to the etcdcluster role.
    claims = {c["name"] for c in ours if not c["deleting"]}
    lost = sorted(
        {c["name"] for c in ours if c["deleting"]}
        | {p["peer"] for p in pods if p["peer"] not in claims}
    )
    if lost:
        return _step(
            "fail",
            "Failed",
            "RestoreFailed",
            f"PVCs {_list(lost)} created by this restore were deleted during the restore; it "
            "cannot complete",
            "none",
        )

    by_peer = {p["peer"]: p for p in pods}
    if len(ours) < replicas or len(by_peer) < replicas:
        return _step(
            "restore_volumes",
            "Restoring",
            "RestoringVolumes",
            f"restoring {replicas} members of EtcdCluster {name} from {source['object_url']}",
            "next",
            verify=not started,
        )

    done = sorted(p["peer"] for p in pods if p["phase"] == "Succeeded")
    if len(done) >= replicas:
        return _step(
            "create_cluster",
            "Restoring",
            "ClusterCreated",
            f"members {_list(done)} restored from {source['object_url']}; "
            + (
                f"handing their volumes back to EtcdCluster {name}"
                if observed.get("in_place")
                else f"creating EtcdCluster {name} on their volumes"
            ),
            "next",
            pods=[p["name"] for p in pods],
        )
    under_way = sorted(
        (p for p in pods if p["phase"] != "Succeeded"), key=lambda p: p["peer"] or p["name"]
    )
    return _step(
        "wait",
        "Restoring",
        "RestoringVolumes",
        f"{len(done)} of {replicas} members restored; "
        + ", ".join(f"{p['peer']}: {p['phase']} ({p['step']})" for p in under_way),
        "poll",
    )


def _in_place_wait(observed, theirs):
    """An in-place restore (an EtcdCluster's automatic disaster recovery) touches nothing until
    the cluster names it in its recovery annotation and has handed its members over: no
    EtcdPeer or member pod of the cluster left (a pending member pod would start on a restored
    claim), and the members' old claims gone. None when it may restore."""
    name, namespace = observed["cluster_name"], observed["namespace"]
    cluster = observed["cluster"]
    if not cluster["exists"] or cluster["deleting"]:
        return _step(
            "refuse",
            "Failed",
            "ClusterNotFound",
            f"EtcdCluster {namespace}/{name} does not exist: an in-place restore (spec.inPlace) "
            "restores an existing cluster",
            "none",
        )
    if cluster.get("recovery") != observed.get("name"):
        return _step(
            "wait",
            "Pending",
            "WaitingForHandOver",
            f"waiting for EtcdCluster {name} to hand its members over (its annotation "
            f"{RECOVERY_KEY} must name this restore; only its disaster recovery sets it)",
            "slow",
        )
    members = observed.get("members_left") or []
    if members:
        return _step(
            "wait",
            "Pending",
            "WaitingForHandOver",
            f"waiting for the members of EtcdCluster {name} to be gone: {_list(members)}",
            "poll",
        )
    if theirs:
        return _step(
            "wait",
            "Pending",
            "WaitingForHandOver",
            f"waiting for the old PVCs of EtcdCluster {name} to be gone: "
            f"{_list(c['name'] for c in theirs)}"
            + (
                ""
                if all(c["deleting"] for c in theirs)
                else " (those not being deleted are not the members' data: delete them, "
                f"kubectl delete pvc -n {namespace} "
                f"{' '.join(c['name'] for c in theirs if not c['deleting'])})"
            ),
            "poll",
        )
    return None
