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

Pure functions, unit tested in tests/unit/test_restore.py.
"""

from __future__ import annotations

import copy
import re

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_GROUP,
    API_VERSION,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_helper_pods import (
    FETCH_SHA256_MISMATCH,
    SNAPSHOT_FILE,
    container_failure,
    container_waiting,
    etcd_tool,
    fetch_container,
    running_step,
    snapshot_mount,
    snapshot_volumes,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import (
    CLUSTER_LABEL,
    CONFIG_PROBLEMS,
    IMAGE_PROBLEMS,
    owner_reference,
    render_pvc,
    render_replicaset,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_verify import RETRYABLE_REASONS

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
# The etcdcluster role's restore pods: waiting reasons that will not clear by themselves.
STUCK_REASONS = IMAGE_PROBLEMS | CONFIG_PROBLEMS
LOG_TAIL_CHARS = 1500


# --------------------------------------------------------------------------------------------
# Observation
# --------------------------------------------------------------------------------------------


def _condition(obj, kind):
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def resolve_source(restore, backup=None, parse_url=None):
    """Where the snapshot is: ``{object_url, sha256, credentials_secret, backup_name, error,
    waiting}``. ``error`` is None or ``{reason, message}``; ``waiting`` is a message while the
    named EtcdBackup has not completed yet.

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
    }
    if backup is not None and not source["credentials_secret"]:
        destination = (backup.get("spec") or {}).get("destination") or {}
        source["credentials_secret"] = destination.get("credentialsSecret")
    if status.get("phase") == "Restoring" and status.get("objectURL"):
        source.update(object_url=status["objectURL"], sha256=status.get("sha256"))
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
        source.update(object_url=backup_status["objectURL"], sha256=backup_status.get("sha256"))
    else:
        source["object_url"] = spec.get("objectURL")
    if parse_url is not None:
        try:
            parse_url(source["object_url"] or "")
        except Exception as exc:  # noqa: BLE001 - the parser's own words
            source["error"] = {"reason": "InvalidSource", "message": f"{exc}"}
    return source


def summarize_cluster(cluster):
    """The target EtcdCluster: ``{exists, restore_uid, deleting, available, message}``."""
    if cluster is None:
        return {
            "exists": False,
            "restore_uid": "",
            "recovery": "",
            "deleting": False,
            "available": False,
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
    ``requeue`` is ``none`` (only a change of the EtcdRestore wakes it), ``poll`` (pods or the
    cluster are under way), ``slow`` (the named backup is still running) or ``retry``.
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
                "poll",
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
            "poll",
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
            "poll",
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


# --------------------------------------------------------------------------------------------
# What a restore creates
# --------------------------------------------------------------------------------------------


def restore_flags(peer_name, namespace, spec, settings=None):
    """What the member's etcd will run with, from the ReplicaSet the etcdcluster role renders
    for it: ``{image, flags, mounts, scheduling}``. Restoring with exactly these (name, peer
    URLs, initial cluster and token, data dir) is what makes etcd accept the restored data."""
    replicaset = render_replicaset(peer_name, namespace, spec, settings)
    pod_spec = replicaset["spec"]["template"]["spec"]
    etcd = pod_spec["containers"][0]
    flags = {}
    for arg in etcd["args"]:
        key, _, value = arg.partition("=")
        flags[key.lstrip("-")] = value
    return {
        "image": etcd["image"],
        "flags": flags,
        "mounts": copy.deepcopy(etcd["volumeMounts"]),
        "volumes": copy.deepcopy(pod_spec["volumes"]),
        "scheduling": {
            k: copy.deepcopy(pod_spec[k])
            for k in ("affinity", "tolerations", "nodeSelector")
            if k in pod_spec
        },
    }


def restore_pod_name(peer_name, uid):
    return f"{peer_name}-restore-{uid[:8]}"


def render_restore_pod(
    restore, peer_name, spec, settings, operator_image, object_url, sha256, credentials_secret
):
    """The pod that restores the snapshot into member ``peer_name``'s PVC: ``fetch`` (operator
    image) downloads and checks it, ``restore`` (the member's own etcd image) runs ``snapshot
    restore`` with the member's own flags. Owned by the EtcdRestore; never restarted."""
    meta = restore["metadata"]
    namespace, uid = meta["namespace"], meta["uid"]
    member = restore_flags(peer_name, namespace, spec, settings)
    flags = member["flags"]
    argv, env = etcd_tool(spec["version"])
    container = {
        "name": "restore",
        "image": member["image"],
        "command": [
            *argv,
            "snapshot",
            "restore",
            SNAPSHOT_FILE,
            f"--name={flags['name']}",
            f"--initial-cluster={flags['initial-cluster']}",
            f"--initial-cluster-token={flags['initial-cluster-token']}",
            f"--initial-advertise-peer-urls={flags['initial-advertise-peer-urls']}",
            f"--data-dir={flags['data-dir']}",
        ],
        "volumeMounts": [*member["mounts"], snapshot_mount(read_only=True)],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if env:
        container["env"] = env
    labels = {
        "app.kubernetes.io/name": "etcd-restore",
        "app.kubernetes.io/instance": spec["clusterName"],
        "app.kubernetes.io/managed-by": "quorumkeeper",
        RESTORE_KEY: uid,
        RESTORE_PEER_LABEL: peer_name,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": restore_pod_name(peer_name, uid),
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(restore)],
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "enableServiceLinks": False,
            "initContainers": [
                fetch_container(operator_image, object_url, sha256, credentials_secret)
            ],
            "containers": [container],
            "volumes": [*member["volumes"], *snapshot_volumes(credentials_secret, object_url)],
            **member["scheduling"],
        },
    }


def render_restored_pvc(restore, peer_name, spec, settings=None):
    """The member's PVC as the etcdcluster role would create it, marked as this restore's."""
    meta = restore["metadata"]
    pvc = render_pvc(peer_name, meta["namespace"], spec, settings)
    pvc["metadata"]["annotations"][RESTORE_KEY] = meta["uid"]
    return pvc


def render_restored_cluster(restore, cluster_name, template):
    """The EtcdCluster to create: the template as its spec, marked as this restore's. No owner:
    deleting the EtcdRestore must not delete the cluster it made."""
    meta = restore["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": "EtcdCluster",
        "metadata": {
            "name": cluster_name,
            "namespace": meta["namespace"],
            "annotations": {RESTORE_KEY: meta["uid"]},
        },
        "spec": copy.deepcopy(template),
    }
