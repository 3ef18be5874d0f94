# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Backup verification: the pod that proves a stored snapshot can be restored, and how its
outcome is judged.

The pod, owned by the EtcdBackup (garbage collected with it), in the backup's namespace:

1. init ``fetch`` (operator image): downloads the object into an emptyDir and checks that its
   SHA-256 is the one recorded at backup time (qk_helper_pods.fetch_container);
2. init ``status`` (etcd image of the backup's version): ``etcdutl snapshot status -w json``
   (``etcdctl`` on 3.4) reads the bolt database and prints its revision and hash;
3. init ``restore`` (etcd image): ``snapshot restore`` into a scratch data dir; it checks the
   SHA-256 that etcd appends to every snapshot it streams (never skipped here);
4. container ``etcd``: a throwaway single-member etcd on the restored data, its client port on
   the pod IP, its peer URL on 127.0.0.1 only; ready when its client port accepts connections.

The module then asks the throwaway etcd which revision it serves and how many keys it holds
(now, and at the revision recorded at backup time) and deletes the pod. Memory stays bounded:
the snapshot only ever goes through files in the pod's emptyDirs.

Pure functions, unit tested in tests/unit/test_verify.py; the module is etcd_snapshot_verify.
"""

from __future__ import annotations

import hashlib
import json

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_GROUP,
    API_VERSION,
    DEFAULT_CLIENT_PORT,
    DEFAULT_PEER_PORT,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_helper_pods import (
    FETCH_SHA256_MISMATCH,
    FETCH_UNREADABLE,
    SNAPSHOT_FILE,
    etcd_tool,
    fetch_container,
    snapshot_mount,
    snapshot_volumes,
)

BACKUP_LABEL = f"{API_GROUP}/backup"
SCRATCH_DIR = "/scratch"
DATA_DIR = "/scratch/data"
MEMBER_NAME = "verify"
PEER_URL = f"http://127.0.0.1:{DEFAULT_PEER_PORT}"

# Integrity failures: the stored snapshot is bad and stays bad; never tried again.
FINAL_REASONS = {
    "SHA256Mismatch",
    "SnapshotCorrupt",
    "RestoreFailed",
    "EtcdDidNotStart",
    "RevisionMismatch",
    "KeyCountMismatch",
}
# Failures of the means, not of the snapshot: tried again after the retry period.
RETRYABLE_REASONS = {"ObjectUnreadable", "VerificationPodFailed", "VerificationTimedOut"}
# Container states that will not clear by themselves.
STUCK_WAITING = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
}
MESSAGE_LIMIT = 700
NEW_BACKUP = "this backup cannot be trusted for a restore: take a new EtcdBackup"


def pod_name(backup_name, uid):
    """A deterministic name per EtcdBackup (a rerun after an operator restart finds its pod),
    at most 63 characters (it is also the pod's hostname)."""
    name = f"{backup_name}-verify"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(f"{backup_name}/{uid}".encode()).hexdigest()[:8]
    return f"{backup_name[:46].rstrip('-.')}-verify-{digest}"


def owner_reference(backup):
    meta = backup["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": "EtcdBackup",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def render_pod(backup, operator_image, etcd_image, client_port=DEFAULT_CLIENT_PORT, resources=None):
    """The verification pod of a Completed EtcdBackup (see the module docstring)."""
    meta, status = backup["metadata"], backup.get("status") or {}
    destination = (backup.get("spec") or {}).get("destination") or {}
    secret = destination.get("credentialsSecret")
    tool, tool_env = etcd_tool(status["etcdVersion"])
    token = f"qk-verify-{meta['uid'][:8]}"
    read_snapshot = [snapshot_mount(read_only=True)]
    scratch = [{"name": "scratch", "mountPath": SCRATCH_DIR}]
    fetch = fetch_container(operator_image, status["objectURL"], status["sha256"], secret)
    snapshot_status = {
        "name": "status",
        "image": etcd_image,
        "command": [*tool, "snapshot", "status", SNAPSHOT_FILE, "--write-out=json"],
        "env": list(tool_env),
        "volumeMounts": read_snapshot,
    }
    restore = {
        "name": "restore",
        "image": etcd_image,
        "command": [
            *tool,
            "snapshot",
            "restore",
            SNAPSHOT_FILE,
            f"--data-dir={DATA_DIR}",
            f"--name={MEMBER_NAME}",
            f"--initial-cluster={MEMBER_NAME}={PEER_URL}",
            f"--initial-advertise-peer-urls={PEER_URL}",
            f"--initial-cluster-token={token}",
        ],
        "env": list(tool_env),
        "volumeMounts": read_snapshot + scratch,
    }
    etcd = {
        "name": "etcd",
        "image": etcd_image,
        "command": [
            "/usr/local/bin/etcd",
            f"--name={MEMBER_NAME}",
            f"--data-dir={DATA_DIR}",
            f"--listen-client-urls=http://0.0.0.0:{client_port}",
            f"--advertise-client-urls=http://$(POD_IP):{client_port}",
            # Nothing else may join: the peer URL is on the loopback only.
            f"--listen-peer-urls={PEER_URL}",
            f"--initial-advertise-peer-urls={PEER_URL}",
            f"--initial-cluster={MEMBER_NAME}={PEER_URL}",
            f"--initial-cluster-token={token}",
        ],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "client", "containerPort": client_port}],
        "readinessProbe": {
            "tcpSocket": {"port": client_port},
            "periodSeconds": 1,
            "failureThreshold": 3,
        },
        "volumeMounts": scratch,
    }
    containers = [fetch, snapshot_status, restore, etcd]
    for container in containers:
        if resources:
            container["resources"] = dict(resources)
        container.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    labels = {
        "app.kubernetes.io/name": "etcd-backup-verify",
        "app.kubernetes.io/managed-by": "quorumkeeper",
        BACKUP_LABEL: meta["name"],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(meta["name"], meta["uid"]),
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [owner_reference(backup)],
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "initContainers": [fetch, snapshot_status, restore],
            "containers": [etcd],
            "volumes": [
                *snapshot_volumes(secret, status["objectURL"]),
                {"name": "scratch", "emptyDir": {}},
            ],
        },
    }


def owned_by(pod, backup):
    """Whether ``pod`` belongs to this EtcdBackup (not to a deleted one of the same name)."""
    uid = backup["metadata"]["uid"]
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid for r in refs)


def check_backup(backup):
    """None when the EtcdBackup can be verified, else what is missing."""
    status = backup.get("status") or {}
    if status.get("phase") != "Completed":
        return f"it is {status.get('phase') or 'Pending'}, not Completed"
    missing = [k for k in ("objectURL", "sha256", "etcdVersion") if not status.get(k)]
    if missing:
        return f"its status lacks {', '.join(missing)}"
    return None


# --------------------------------------------------------------------------------------------
# Judging the pod
# --------------------------------------------------------------------------------------------


def failure(reason, message):
    message = message if len(message) <= MESSAGE_LIMIT else message[: MESSAGE_LIMIT - 3] + "..."
    return {"reason": reason, "message": message, "retryable": reason in RETRYABLE_REASONS}


def log_summary(text, lines=6, limit=400):
    """The last lines of a container log, short: etcd's JSON log lines become their msg and
    error fields."""
    out = []
    for raw in (text or "").strip().splitlines()[-lines:]:
        line = raw.strip()
        if line.startswith("{"):
            try:
                entry = json.loads(line)
            except ValueError:
                entry = None
            if isinstance(entry, dict) and entry.get("msg"):
                line = entry["msg"] + (f": {entry['error']}" if entry.get("error") else "")
        if line:
            out.append(line)
    summary = " | ".join(out)
    return summary if len(summary) <= limit else "..." + summary[-(limit - 3) :]


def container_failed(failed, log_text, context):
    """The verdict for a container that exited with an error. ``failed`` as
    qk_helper_pods.container_failure returns it; ``context`` holds ``object_url``,
    ``sha256``, ``version``, ``pod``."""
    name, code = failed["container"], failed.get("exit_code")
    said = failed.get("message") or log_summary(log_text) or "no output"
    url, version, pod = context["object_url"], context["version"], context["pod"]
    if name == "fetch":
        if code == FETCH_SHA256_MISMATCH:
            return failure(
                "SHA256Mismatch",
                f"the stored object is not the snapshot that was uploaded ({said}); "
                f"it was changed or damaged in the store: {NEW_BACKUP}",
            )
        detail = "" if code == FETCH_UNREADABLE else f" (exit code {code})"
        return failure(
            "ObjectUnreadable",
            f"cannot read the snapshot back from {url}{detail}: {said}; check that the object "
            "still exists, that the credentials Secret can read it and that the store is "
            "reachable from pods in this namespace",
        )
    if name == "status":
        return failure(
            "SnapshotCorrupt",
            f"etcd {version}'s snapshot status rejects the snapshot (exit code {code}): {said}; "
            f"{NEW_BACKUP}",
        )
    if name == "restore":
        if "no space left" in said.lower():
            return failure(
                "VerificationPodFailed",
                f"pod {pod} ran out of disk space restoring the snapshot: {said}; give the "
                "node more ephemeral storage",
            )
        return failure(
            "RestoreFailed",
            f"etcd {version} cannot restore the snapshot (exit code {code}): {said}; {NEW_BACKUP}",
        )
    return failure(
        "EtcdDidNotStart",
        f"etcd {version} exited (code {code}) on the data restored from the snapshot: "
        f"{said}; {NEW_BACKUP}",
    )


def stuck(waiting, pod):
    """The verdict for a container that cannot start (image, configuration)."""
    return failure(
        "VerificationPodFailed",
        f"pod {pod} cannot start container {waiting['container']} ({waiting['reason']}: "
        f"{waiting['message'] or 'no detail'}; image {waiting['image']}); check the "
        "operator's OPERATOR_IMAGE and ETCD_REPOSITORY, or the EtcdCluster's spec.repository",
    )


def timed_out(pod, seconds, step, unschedulable=""):
    why = f"; the pod is unschedulable: {unschedulable}" if unschedulable else ""
    return failure(
        "VerificationTimedOut",
        f"pod {pod} was not ready within {seconds:g}s (still at: {step}){why}; a large "
        "snapshot may need a longer etcdbackup_verify_timeout",
    )


def unschedulable(pod):
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return (condition.get("message") or "").strip() or "Unschedulable"
    return ""


def parse_snapshot_status(text):
    """The JSON that ``snapshot status --write-out=json`` printed (``hash``, ``revision``,
    ``totalKey``, ``totalSize``), found among the log's lines; None when there is none."""
    for line in reversed((text or "").strip().splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and "revision" in data and "hash" in data:
            return data
    return None


def judge(snapshot, served, recorded_revision, recorded_keys=None, keys_at_recorded=None):
    """Compare what the throwaway etcd serves with the snapshot and the backup's record.

    ``snapshot``: parse_snapshot_status; ``served``: ``{"revision", "keys"}`` of the restored
    etcd now; ``recorded_*``: status.revision/keys at backup time; ``keys_at_recorded``: the
    restored etcd's key count at the recorded revision (None when it could not be read, e.g.
    compacted). None when all agree, else a failure.

    A snapshot of a cluster no key was ever written to says revision 0 (etcd reads the revision
    from its last key), and etcd serves such a store at revision 1, where every store starts."""
    revision = max(snapshot["revision"], 1)
    if served["revision"] != revision:
        return failure(
            "RevisionMismatch",
            f"the restored etcd serves revision {served['revision']}, the snapshot says "
            f"{snapshot['revision']}; {NEW_BACKUP}",
        )
    if recorded_revision is not None and revision < recorded_revision:
        return failure(
            "RevisionMismatch",
            f"the snapshot holds revision {snapshot['revision']}, older than revision "
            f"{recorded_revision} recorded when it was taken; {NEW_BACKUP}",
        )
    if None not in (recorded_keys, keys_at_recorded) and keys_at_recorded != recorded_keys:
        return failure(
            "KeyCountMismatch",
            f"the restored etcd holds {keys_at_recorded} keys at revision "
            f"{recorded_revision}, the cluster held {recorded_keys} then; {NEW_BACKUP}",
        )
    return None


def success_message(snapshot, served, seconds, version):
    return (
        f"restored with etcd {version} in a scratch pod: revision {served['revision']}, "
        f"{served['keys']} keys, snapshot hash {snapshot['hash']}, SHA-256 and etcd's integrity "
        f"hash checked ({seconds:.1f}s)"
    )


# --------------------------------------------------------------------------------------------
# What the role needs to know
# --------------------------------------------------------------------------------------------


def verification_state(backup):
    """``{verify, verified, verification_reason, verification_due}`` of an EtcdBackup:
    whether spec.verify asks for it, the Verified condition's status (None when absent) and
    reason, and whether a verification should run now (Completed, asked for, and not yet
    verified or last failed for a reason worth retrying)."""
    spec, status = backup.get("spec") or {}, backup.get("status") or {}
    verify = spec.get("verify", True) is not False
    condition = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Verified"), None
    )
    verified = condition.get("status") if condition else None
    reason = condition.get("reason") if condition else None
    done = verified == "True" or (verified == "False" and reason in FINAL_REASONS)
    return {
        "verify": verify,
        "verified": verified,
        "verification_reason": reason,
        "verification_due": verify and status.get("phase") == "Completed" and not done,
    }
