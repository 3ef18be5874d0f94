# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Pieces of the short-lived helper pods that read a snapshot back from its store.

Backup verification and restores both start with the same step: an init container named
``fetch``, running the operator image, downloads the snapshot into an emptyDir and checks its
SHA-256 (``qk_objectstore.py fetch``, exit 3 on a mismatch, 2 when the object cannot be read).
Later containers run the etcd image of the snapshot's version and use ``etcd_tool`` for
``snapshot status`` / ``snapshot restore``. Memory stays bounded: the snapshot goes through
files, never through the operator. A ``pvc://claim/path`` snapshot is copied (and checked) from
the claim, mounted read-only in ``fetch`` only, instead of downloaded.

Pure functions (no Kubernetes calls), unit tested in tests/unit/test_helper_pods.py.
"""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import parse_version

SNAPSHOT_DIR = "/snapshot"
SNAPSHOT_FILE = "/snapshot/snapshot.db"
CREDENTIALS_DIR = "/var/run/secrets/quorumkeeper/store"
SNAPSHOT_VOLUME = "snapshot"
CREDENTIALS_VOLUME = "store-credentials"
CLAIM_VOLUME = "backup-claim"
# Where pods mount the claim of a pvc:// URL: qk_objectstore_pvc.PVC_MOUNT, which QK_CLAIM_MOUNT
# moves for the command line's tests outside a pod; the pods rendered here always mount at this
# path (tests/unit/test_pvcstore.py checks that the two agree).
PVC_MOUNT = "/var/run/quorumkeeper/claim"
# How helper pods run qk_objectstore from the operator image: as a module of the collection the
# Dockerfile copies to COLLECTIONS_DIR, so that it imports the etcd connection as the operator's
# modules do (``objectstore_command(...)`` and ``OBJECTSTORE_ENV`` go together).
COLLECTIONS_DIR = "/opt/ansible/collections"
OBJECTSTORE_MODULE = "ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore"
OBJECTSTORE_ENV = [{"name": "PYTHONPATH", "value": COLLECTIONS_DIR}]
# Exit codes of ``qk_objectstore.py fetch``.
FETCH_UNREADABLE = 2
FETCH_SHA256_MISMATCH = 3


def objectstore_command(*args):
    """The command of a helper container running ``qk_objectstore <args>`` (with
    OBJECTSTORE_ENV)."""
    return ["python3", "-m", OBJECTSTORE_MODULE, *args]


def backup_claim(object_url):
    """The PersistentVolumeClaim of a ``pvc://claim/path`` URL, else None."""
    if not str(object_url or "").startswith("pvc://"):
        return None
    return object_url[len("pvc://") :].split("/", 1)[0] or None


def claim_volume(claim, read_only=True):
    """The volume ``backup-claim`` of a pvc:// destination's claim."""
    source = {"claimName": claim}
    if read_only:
        source["readOnly"] = True
    return {"name": CLAIM_VOLUME, "persistentVolumeClaim": source}


def claim_mount(read_only=True):
    mount = {"name": CLAIM_VOLUME, "mountPath": PVC_MOUNT}
    if read_only:
        mount["readOnly"] = True
    return mount


def snapshot_volumes(credentials_secret=None, object_url=None):
    """The emptyDir ``snapshot`` (the downloaded file), when a Secret is named the secret
    volume ``store-credentials`` that ``fetch`` reads its credentials from, and for a pvc:// URL
    its claim, read-only (credentials are not used there)."""
    volumes = [{"name": SNAPSHOT_VOLUME, "emptyDir": {}}]
    claim = backup_claim(object_url)
    if claim:
        volumes.append(claim_volume(claim))
    elif credentials_secret:
        volumes.append({"name": CREDENTIALS_VOLUME, "secret": {"secretName": credentials_secret}})
    return volumes


def snapshot_mount(read_only=False):
    """The volumeMount of the ``snapshot`` emptyDir at SNAPSHOT_DIR."""
    mount = {"name": SNAPSHOT_VOLUME, "mountPath": SNAPSHOT_DIR}
    if read_only:
        mount["readOnly"] = True
    return mount


def fetch_container(operator_image, object_url, sha256=None, credentials_secret=None):
    """The init container ``fetch``: downloads ``object_url`` (copies a pvc:// file from its
    claim, mounted read-only) to SNAPSHOT_FILE and fails (exit 3) unless its bytes have
    ``sha256`` (else the SHA-256 recorded with the object). It must be given the volumes of
    ``snapshot_volumes`` with the same ``credentials_secret`` and ``object_url``."""
    command = objectstore_command("fetch", "--url", object_url, "--dest", SNAPSHOT_FILE)
    if sha256:
        command += ["--sha256", sha256]
    mounts = [snapshot_mount()]
    if backup_claim(object_url):
        mounts.append(claim_mount())
    elif credentials_secret:
        command += ["--credentials-dir", CREDENTIALS_DIR]
        mounts.append({"name": CREDENTIALS_VOLUME, "mountPath": CREDENTIALS_DIR, "readOnly": True})
    return {
        "name": "fetch",
        "image": operator_image,
        "command": command,
        "env": list(OBJECTSTORE_ENV),
        "volumeMounts": mounts,
        # What it printed on stderr becomes the termination message, where kubelets support it.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def etcd_tool(version):
    """``(argv_prefix, env)`` of the tool for ``snapshot status`` / ``snapshot restore`` of an
    etcd version: ``["etcdutl"]`` from 3.5 on; etcd 3.4 has no etcdutl, so ``["etcdctl"]``
    with ``ETCDCTL_API=3``. ``env`` is a list of container EnvVars. The tools are named by
    absolute path: etcd images are distroless (no shell, PATH not to be relied on)."""
    if parse_version(version)[:2] >= (3, 5):
        return ["/usr/local/bin/etcdutl"], []
    return ["/usr/local/bin/etcdctl"], [{"name": "ETCDCTL_API", "value": "3"}]


def _terminated_failure(name, terminated):
    return {
        "container": name,
        "exit_code": terminated.get("exitCode"),
        "reason": terminated.get("reason") or "Error",
        "message": (terminated.get("message") or "").strip(),
    }


def container_failure(pod):
    """The first failed container of ``pod`` (init containers first, in order), or None:
    ``{"container", "exit_code", "reason", "message"}``. A container failed when it terminated
    with a non-zero exit code (now or last time, for restarting containers)."""
    status = (pod or {}).get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            state = container.get("state") or {}
            terminated = state.get("terminated") or {}
            if terminated and terminated.get("exitCode", 0) != 0:
                return _terminated_failure(container.get("name"), terminated)
            last = (container.get("lastState") or {}).get("terminated") or {}
            if last and last.get("exitCode", 0) != 0:
                return _terminated_failure(container.get("name"), last)
    return None


def container_waiting(pod, reasons):
    """The first container of ``pod`` waiting with one of ``reasons`` (e.g. ErrImagePull):
    ``{"container", "image", "reason", "message"}``, or None."""
    spec = (pod or {}).get("spec") or {}
    images = {
        c.get("name"): c.get("image")
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
    }
    status = (pod or {}).get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in reasons:
                return {
                    "container": container.get("name"),
                    "image": images.get(container.get("name")),
                    "reason": waiting["reason"],
                    "message": (waiting.get("message") or "").strip(),
                }
    return None


def pod_ready(pod):
    """Whether the pod's Ready condition is True (and it is not being deleted)."""
    if not pod or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def running_step(pod):
    """Which container the pod is at, for messages: the first init container that has not
    completed, else ``etcd``-like main container names, else the phase."""
    status = (pod or {}).get("status") or {}
    for container in status.get("initContainerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        if terminated.get("exitCode") != 0:
            return container.get("name")
    names = [c.get("name") for c in status.get("containerStatuses") or []]
    return ", ".join(n for n in names if n) or status.get("phase") or "Pending"
