# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""pvc:// destinations: snapshots written to, and deleted from, a PersistentVolumeClaim of the
backup's namespace by short-lived helper pods.

The operator cannot mount a user's claim, so the bytes never pass through it: a pod running the
operator image mounts the claim at PVC_MOUNT and runs ``qk_objectstore.py write`` (stream a
snapshot from one member's client URL to ``<path>.part``, fsync, record the SHA-256 in
``<path>.sha256``, rename to ``<path>``) or ``qk_objectstore.py delete``, prints one JSON line
and exits. The operator reads that line from the pod's log (the local cluster's node agent has
no termination messages from files) and deletes the pod. Verification and restore pods read the
file through their ``fetch`` init container, which mounts the claim read-only
(qk_helper_pods).

A claim with access mode ReadWriteOnce can be mounted by pods of one node only: when a running
pod already mounts it, the helper pod is pinned to that pod's node (``co_locate``); otherwise the
scheduler places it (a local volume's node affinity brings it to its node).

The rendering and judging functions are pure and unit tested (tests/unit/test_pvcstore.py);
``run_helper`` talks to the API server.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import replace

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    ConnectionProfile,
    profile_env,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import API_GROUP
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_helper_pods import (
    OBJECTSTORE_ENV,
    backup_claim,
    claim_mount,
    claim_volume,
    container_failure,
    container_waiting,
    objectstore_command,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import KubeError
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_verify import STUCK_WAITING

HELPER_LABEL = f"{API_GROUP}/pvc-helper"
HOSTNAME_LABEL = "kubernetes.io/hostname"
POLL = 0.5


class ClaimError(Exception):
    """The claim cannot be used, or the helper pod failed; the message says why."""


def helper_pod_name(action, object_url):
    """One name per action and file: a run interrupted by an operator restart finds (and
    replaces) the pod of the earlier one instead of writing the same file twice at once."""
    digest = hashlib.sha256(object_url.encode()).hexdigest()[:12]
    return f"qk-backup-{action}-{digest}"


def render_helper_pod(action, object_url, namespace, operator_image, args=(), owner=None, env=()):
    """The pod that runs ``qk_objectstore.py <action> --url <object_url> <args>`` with the
    claim of ``object_url`` mounted read-write at PVC_MOUNT. ``owner``: an ownerReference
    (garbage collection when the owner goes), or None; ``env``: container env besides
    OBJECTSTORE_ENV."""
    claim = backup_claim(object_url)
    if not claim:
        raise ClaimError(f"{object_url!r} is not a pvc:// URL")
    metadata = {
        "name": helper_pod_name(action, object_url),
        "namespace": namespace,
        "labels": {
            "app.kubernetes.io/name": "etcd-backup-claim",
            "app.kubernetes.io/managed-by": "quorumkeeper",
            HELPER_LABEL: action,
        },
    }
    if owner:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [
                {
                    "name": action,
                    "image": operator_image,
                    "command": objectstore_command(action, "--url", object_url, *args),
                    "env": [*OBJECTSTORE_ENV, *env],
                    "volumeMounts": [claim_mount(read_only=False)],
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                }
            ],
            "volumes": [claim_volume(claim, read_only=False)],
        },
    }


# Where the writer pod mounts the Secrets it connects to etcd with.
POD_TLS_DIR = "/var/run/quorumkeeper/etcd-tls"
POD_PASSWORD_DIR = "/var/run/quorumkeeper/etcd-password"


def check_writer_credentials(profile, tls_secret, password_secret):
    """Raises ClaimError unless the writer pod can get what ``profile`` connects with from
    the Secrets it mounts: a literal password would be written into its spec."""
    if profile.password:
        raise ClaimError(
            "a pvc:// destination takes the password from pod_password_secret, not password "
            "(it would be written into the pod's spec)"
        )
    if (profile.ca_cert or profile.client_cert) and not tls_secret:
        raise ClaimError(
            "a pvc:// destination with etcd TLS options needs pod_tls_secret (the TLS Secret "
            "with the client certificate, for the pod that writes the claim)"
        )
    if profile.username and not password_secret:
        raise ClaimError(
            "a pvc:// destination with an etcd user needs pod_password_secret (the password "
            "Secret of that user, for the pod that writes the claim)"
        )


def writer_pod(
    object_url,
    namespace,
    operator_image,
    endpoint,
    timeout=None,
    owner=None,
    profile=None,
    tls_secret=None,
    password_secret=None,
):
    """The pod that streams a snapshot of the member at ``endpoint`` to the pvc:// file,
    connecting with ``profile`` (the module's connection options; its endpoints are not
    used) given in its env (qk_connection.profile_env), so that whatever the profile comes to
    hold reaches the pod; None: a plain connection.

    The profile's files are the operator's; the pod reads the same credentials from Secrets
    it mounts: ``tls_secret`` (``ca.crt``, ``tls.crt``, ``tls.key``: a client certificate)
    for a profile with TLS files, ``password_secret`` (key ``password``) for a profile with
    a user, whose password never appears in the pod's spec."""
    profile = profile or ConnectionProfile()
    check_writer_credentials(profile, tls_secret, password_secret)
    mounts = []
    if tls_secret:
        profile = replace(
            profile,
            ca_cert=f"{POD_TLS_DIR}/ca.crt",
            client_cert=f"{POD_TLS_DIR}/tls.crt" if profile.client_cert else None,
            client_key=f"{POD_TLS_DIR}/tls.key" if profile.client_key else None,
        )
        mounts.append(("etcd-tls", POD_TLS_DIR, tls_secret))
    if password_secret:
        profile = replace(profile, password=None, password_file=f"{POD_PASSWORD_DIR}/password")
        mounts.append(("etcd-password", POD_PASSWORD_DIR, password_secret))
    args = ["--endpoint", endpoint]
    if timeout:
        args += ["--timeout", f"{float(timeout):g}"]
    env = profile_env(profile)
    pod = render_helper_pod("write", object_url, namespace, operator_image, args, owner, env)
    spec = pod["spec"]
    for volume, directory, secret in mounts:
        spec["volumes"].append(
            {"name": volume, "secret": {"secretName": secret, "defaultMode": 0o400}}
        )
        spec["containers"][0]["volumeMounts"].append(
            {"name": volume, "mountPath": directory, "readOnly": True}
        )
    return pod


def deleter_pod(object_url, namespace, operator_image, owner=None):
    """The pod that deletes the pvc:// file and its SHA-256."""
    return render_helper_pod("delete", object_url, namespace, operator_image, owner=owner)


def check_claim(claim_obj, claim, namespace):
    """The claim's access modes, or ``ClaimError`` saying why it cannot hold backups."""
    where = f"PersistentVolumeClaim {namespace}/{claim}"
    if claim_obj is None:
        raise ClaimError(
            f"{where} (the pvc:// destination) does not exist; create it in the backup's "
            "namespace (ReadWriteOnce or ReadWriteMany, large enough for the snapshots to keep)"
        )
    if (claim_obj.get("metadata") or {}).get("deletionTimestamp"):
        raise ClaimError(f"{where} (the pvc:// destination) is being deleted")
    modes = (claim_obj.get("spec") or {}).get("accessModes") or []
    if modes == ["ReadOnlyMany"]:
        raise ClaimError(f"{where} is ReadOnlyMany: backups cannot be written to it")
    return modes


def mounts_claim(pod, claim):
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim for v in volumes)


def co_locate(pod, others, claim, access_modes):
    """Pin ``pod`` to the node of a live pod in ``others`` that mounts a ReadWriteOnce
    ``claim`` (a second node could not attach it); unchanged otherwise. Returns ``pod``."""
    if "ReadWriteMany" in access_modes or "ReadOnlyMany" in access_modes:
        return pod
    for other in others:
        meta, spec = other.get("metadata") or {}, other.get("spec") or {}
        phase = (other.get("status") or {}).get("phase")
        if meta.get("name") == pod["metadata"]["name"] or meta.get("deletionTimestamp"):
            continue
        if phase in ("Pending", "Running") and spec.get("nodeName") and mounts_claim(other, claim):
            pod["spec"]["nodeSelector"] = {HOSTNAME_LABEL: spec["nodeName"]}
            break
    return pod


def last_json(text):
    """The last line of ``text`` that is a JSON object, or None."""
    for line in reversed((text or "").strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
    return None


def judge_pod(pod):
    """``("done", None)`` when the helper's container exited 0, ``("failed", why)`` when it
    failed or cannot start, ``("running", step)`` otherwise."""
    failed = container_failure(pod)
    if failed:
        return "failed", failed
    waiting = container_waiting(pod, STUCK_WAITING)
    if waiting:
        return "failed", {
            "container": waiting["container"],
            "exit_code": None,
            "reason": waiting["reason"],
            "message": f"{waiting['message'] or 'cannot start'} (image {waiting['image']})",
        }
    status = pod.get("status") or {}
    if status.get("phase") == "Succeeded":
        return "done", None
    if status.get("phase") == "Failed":
        return "failed", {
            "container": None,
            "exit_code": None,
            "reason": status.get("reason") or "Failed",
            "message": status.get("message") or "the pod failed",
        }
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return "running", f"unschedulable: {condition.get('message') or ''}".strip()
    waiting = [
        (c.get("state") or {}).get("waiting") or {} for c in status.get("containerStatuses") or []
    ]
    details = [f"{w.get('reason')}: {w.get('message')}" for w in waiting if w.get("message")]
    return "running", "; ".join(details) or status.get("phase") or "Pending"


def _log(kube, name, namespace, container):
    try:
        return kube.pod_log(name, namespace, container, tail_lines=20)
    except KubeError as exc:
        return f"(no log: {exc})"


def run_helper(kube, pod, timeout, claim_obj=None):
    """Create ``pod`` (after deleting one of an earlier run of the same name), wait until it
    ends, delete it and return the JSON its container printed last. Raises ``ClaimError`` with
    what the container said when it failed, or where it was stuck when it timed out."""
    meta = pod["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    container = pod["spec"]["containers"][0]["name"]
    deadline = time.monotonic() + timeout
    claim = pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
    if claim_obj is not None:
        others = kube.list("v1", "Pod", namespace)
        co_locate(pod, others, claim, (claim_obj.get("spec") or {}).get("accessModes") or [])
    while True:
        old = kube.get("v1", "Pod", name, namespace)
        if old is None:
            break
        if not old["metadata"].get("deletionTimestamp"):
            kube.delete("v1", "Pod", name, namespace)
        if time.monotonic() > deadline:
            raise ClaimError(f"pod {namespace}/{name} of an earlier run does not go away")
        time.sleep(POLL)
    kube.create(pod, namespace)
    try:
        while True:
            current = kube.get("v1", "Pod", name, namespace)
            if current is None:
                raise ClaimError(f"pod {namespace}/{name} was deleted while it ran")
            state, detail = judge_pod(current)
            if state == "done":
                text = _log(kube, name, namespace, container)
                result = last_json(text)
                if result is None:
                    raise ClaimError(f"pod {namespace}/{name} printed no result: {text[-300:]}")
                return result
            if state == "failed":
                said = (detail.get("message") or "").strip() or _log(
                    kube, name, namespace, container
                ).strip()
                code = detail.get("exit_code")
                raise ClaimError(
                    f"pod {namespace}/{name} ({container}) failed"
                    + (f" with exit code {code}" if code is not None else "")
                    + f": {said[-600:] or detail.get('reason')}"
                )
            if time.monotonic() > deadline:
                raise ClaimError(
                    f"pod {namespace}/{name} ({container}) did not finish within {timeout:g}s "
                    f"(at: {detail}); check that claim {claim} is Bound and can be mounted"
                )
            time.sleep(POLL)
    finally:
        # One left behind is replaced by the next run of the same action.
        with contextlib.suppress(KubeError):
            kube.delete("v1", "Pod", name, namespace)


def read_claim(kube, claim, namespace):
    """The claim object (``check_claim`` passed), or ``ClaimError``."""
    try:
        obj = kube.get("v1", "PersistentVolumeClaim", claim, namespace)
    except KubeError as exc:
        raise ClaimError(f"cannot read PersistentVolumeClaim {namespace}/{claim}: {exc}") from exc
    check_claim(obj, claim, namespace)
    return obj
