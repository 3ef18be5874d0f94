#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_snapshot_verify
short_description: Prove that a completed EtcdBackup can be restored
description:
  - >-
    Reads the EtcdBackup (it must be Completed) and runs a verification pod in its namespace,
    owned by it: the snapshot is downloaded from the store and its SHA-256 checked against
    status.sha256, C(etcdutl snapshot status) (C(etcdctl) on etcd 3.4) of the backup's etcd
    version reads it, C(snapshot restore) (which checks etcd's own integrity hash) restores it
    into a scratch data dir, and a throwaway etcd starts on that data.
  - Then asks the throwaway etcd for the revision it serves (must equal the snapshot's, and be at
    least status.revision) and its key count (at status.revision it must equal status.keys when
    the backup recorded it), and deletes the pod.
  - The pod has a deterministic name and is reused when it exists, so a run interrupted by an
    operator restart picks it up again. The snapshot never passes through the operator.
  - A failed verification is a result (I(verified=false) with I(reason)), not a module failure;
    the module fails only when it cannot do its work (API errors, a backup that is not Completed).
  - Always changes something (the pod); check mode only renders the pod.
options:
  name:
    description: Name of the EtcdBackup.
    type: str
    required: true
  namespace:
    description: Namespace of the EtcdBackup (and of the pod).
    type: str
    required: true
  operator_image:
    description:
      - Image of the C(fetch) step (the operator's own; it holds qk_objectstore.py).
      - Default the C(OPERATOR_IMAGE) environment variable, else
        quay.io/quorumkeeper/etcd-operator:0.1.0.
    type: str
  etcd_repository:
    description:
      - etcd image repository when the backup's EtcdCluster sets no spec.repository (or the
        backup was taken from a client URL); the tag is C(v<status.etcdVersion>).
      - Default the C(ETCD_REPOSITORY) environment variable, else quay.io/coreos/etcd.
    type: str
  timeout:
    description:
      - Seconds the pod may take to get ready (download, checks, restore, start).
      - Not the timeout of the etcd calls, unlike in the other etcd modules; that is
        I(etcd_timeout).
    type: float
    default: 180
  etcd_timeout:
    description: Per-call timeout in seconds of the reads from the throwaway etcd.
    type: float
    default: 5
  client_port:
    description: Client port of the throwaway etcd.
    type: int
    default: 2379
  resources:
    description: Resources (requests/limits) of each container of the pod.
    type: dict
  keep_pod:
    description: Leave the pod in place afterwards (for debugging); it is deleted by default.
    type: bool
    default: false
extends_documentation_fragment:
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.etcd_connection
requirements: [etcd3aio, PyYAML]
notes:
  - The throwaway etcd serves plain HTTP on the pod's IP, so the TLS options (I(ca_cert),
    I(client_cert), I(client_key)) are refused. I(username) and I(password) are those of the
    backed-up cluster, whose users and authentication the snapshot restores.
"""

EXAMPLES = r"""
- name: Verify a completed backup
  etcd_snapshot_verify:
    name: nightly
    namespace: default
    timeout: 300
  register: verification
"""

RETURN = r"""
pod:
  description: Name of the verification pod.
  type: str
  returned: always
verified:
  description: Whether the backup passed every check (null when the EtcdBackup is gone).
  type: bool
  returned: always
reason:
  description:
    - C(Verified), or why not, C(SHA256Mismatch), C(ObjectUnreadable), C(SnapshotCorrupt),
      C(RestoreFailed), C(EtcdDidNotStart), C(RevisionMismatch), C(KeyCountMismatch) (final),
      C(VerificationPodFailed), C(VerificationTimedOut) (worth trying again).
  type: str
  returned: unless check mode
message:
  description: What was checked, or what failed and what to do.
  type: str
  returned: unless check mode
retryable:
  description: Whether the failure is one of the means (store, pod), not of the snapshot.
  type: bool
  returned: unless check mode
revision:
  description: The revision the restored etcd serves.
  type: int
  returned: when verified
keys:
  description: How many keys the restored etcd holds at that revision.
  type: int
  returned: when verified
snapshot_hash:
  description: The hash C(snapshot status) reports for the snapshot's database.
  type: int
  returned: when verified
seconds:
  description: How long the verification took.
  type: float
  returned: unless check mode
reused:
  description: Whether the pod of an earlier, interrupted run was found and used.
  type: bool
  returned: unless check mode
"""

import contextlib
import os
import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    CONNECTION_REQUIRED_TOGETHER,
    connection_argument_spec,
    etcd_client,
    profile_from_params,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    DEFAULT_CLIENT_PORT,
    image_reference,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    ETCD3AIO_IMPORT_ERROR,
    HAS_ETCD3AIO,
    describe_error,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_helper_pods import (
    container_failure,
    container_waiting,
    pod_ready,
    running_step,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KUBE_CLIENT_ARGUMENT_SPEC,
    KubeConfigError,
    KubeError,
    api_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_verify import (
    API_VERSION,
    STUCK_WAITING,
    check_backup,
    container_failed,
    failure,
    judge,
    owned_by,
    parse_snapshot_status,
    render_pod,
    stuck,
    success_message,
    timed_out,
    unschedulable,
)

POLL = 0.5


def etcd_repository(kube, backup, default):
    """The EtcdCluster's spec.repository when the backup came from one that still exists."""
    cluster = ((backup.get("spec") or {}).get("source") or {}).get("clusterName")
    if cluster:
        obj = kube.get(API_VERSION, "EtcdCluster", cluster, backup["metadata"]["namespace"])
        if obj and (obj.get("spec") or {}).get("repository"):
            return obj["spec"]["repository"]
    return default


def wait_pod_gone(kube, name, namespace, deadline):
    while kube.get("v1", "Pod", name, namespace) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL)
    return True


def log_of(kube, name, namespace, container):
    try:
        return kube.pod_log(name, namespace, container, tail_lines=20)
    except KubeError as exc:
        return f"(no log: {exc})"


def wait_for_pod(kube, name, namespace, deadline, timeout, context):
    """(pod, None) once ready, or (pod, failure)."""
    while True:
        pod = kube.get("v1", "Pod", name, namespace)
        if pod is None:
            return None, failure(
                "VerificationPodFailed", f"pod {name} was deleted while it ran; it is created again"
            )
        if pod_ready(pod):
            return pod, None
        failed = container_failure(pod)
        if failed:
            text = "" if failed["message"] else log_of(kube, name, namespace, failed["container"])
            return pod, container_failed(failed, text, context)
        waiting = container_waiting(pod, STUCK_WAITING)
        if waiting:
            return pod, stuck(waiting, name)
        if (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
            return pod, failure(
                "VerificationPodFailed",
                f"pod {name} ended ({pod['status']['phase']}) before etcd was ready: "
                f"{pod['status'].get('message') or pod['status'].get('reason') or 'no detail'}",
            )
        if time.monotonic() > deadline:
            return pod, timed_out(name, timeout, running_step(pod), unschedulable(pod))
        time.sleep(POLL)


def read_served(pod, params, recorded_revision, deadline):
    """What the throwaway etcd serves: ``({"revision", "keys"}, keys_at_recorded)``; retries
    until ``deadline`` (etcd's port may accept connections a moment before it serves)."""
    endpoint = f"http://{pod['status']['podIP']}:{params['client_port']}"
    profile = profile_from_params(params, endpoints=[endpoint], timeout_option="etcd_timeout")
    while True:
        try:
            with etcd_client(profile) as client:
                keys, revision = client.key_count(endpoint)
                at_recorded = None
                if recorded_revision and recorded_revision <= revision:
                    try:
                        at_recorded, _ = client.key_count(endpoint, recorded_revision)
                    except Exception as exc:  # noqa: BLE001 - compacted: nothing to compare
                        if "compacted" not in describe_error(exc):
                            raise
                return {"revision": revision, "keys": keys}, at_recorded
        except Exception as exc:  # noqa: BLE001 - gRPC errors, said in words
            if time.monotonic() > deadline:
                raise RuntimeError(describe_error(exc)) from exc
            time.sleep(POLL)


def unreachable(kube, pod, error, context):
    """The verdict when the throwaway etcd does not answer: it exited (its own failure), or it
    runs and the operator cannot reach it (the network, not the snapshot)."""
    meta = pod["metadata"]
    now = kube.get("v1", "Pod", meta["name"], meta["namespace"]) or pod
    failed = container_failure(now)
    if failed:
        text = "" if failed["message"] else log_of(kube, meta["name"], meta["namespace"], "etcd")
        return container_failed(failed, text, context)
    return failure(
        "VerificationPodFailed",
        f"the etcd restored in pod {meta['name']} runs but does not answer the operator at "
        f"{pod['status'].get('podIP')}: {error}; check that NetworkPolicies let the operator "
        "reach pods in this namespace on the etcd client port",
    )


def verify(module, kube, backup):
    p = module.params
    started = time.monotonic()
    status = backup["status"]
    version = status["etcdVersion"]
    image = image_reference(version, etcd_repository(kube, backup, p["etcd_repository"]))
    wanted = render_pod(backup, p["operator_image"], image, p["client_port"], p["resources"])
    name, namespace = wanted["metadata"]["name"], wanted["metadata"]["namespace"]
    result = {"changed": True, "pod": name}
    if module.check_mode:
        module.exit_json(**result, verified=None, rendered=wanted)
    deadline = started + p["timeout"]

    pod = kube.get("v1", "Pod", name, namespace)
    if pod is not None and (not owned_by(pod, backup) or pod["metadata"].get("deletionTimestamp")):
        # A pod of an earlier EtcdBackup of the same name, not yet garbage collected, or one
        # of an earlier verification still going away: start afresh once it is gone.
        kube.delete("v1", "Pod", name, namespace)
        wait_pod_gone(kube, name, namespace, deadline)
        pod = None
    result["reused"] = pod is not None
    if pod is None:
        try:
            kube.create(wanted, namespace)
        except KubeError as exc:
            if not exc.already_exists:
                raise
    context = {"object_url": status["objectURL"], "version": version, "pod": name}
    pod, failed = wait_for_pod(kube, name, namespace, deadline, p["timeout"], context)
    snapshot = served = None
    if failed is None:
        snapshot = parse_snapshot_status(log_of(kube, name, namespace, "status"))
        if snapshot is None:
            failed = failure(
                "VerificationPodFailed",
                f"cannot read what snapshot status printed (kubectl logs {name} -c status)",
            )
    if failed is None:
        try:
            # At least a few seconds to ask, even when the pod took most of the time.
            served, at_recorded = read_served(
                pod, p, status.get("revision"), max(deadline, time.monotonic() + 30)
            )
        except RuntimeError as exc:
            failed = unreachable(kube, pod, str(exc), context)
    if failed is None:
        failed = judge(snapshot, served, status.get("revision"), status.get("keys"), at_recorded)
    if not p["keep_pod"]:
        # A pod left behind is reused by the next verification, and goes with the EtcdBackup.
        with contextlib.suppress(KubeError):
            kube.delete("v1", "Pod", name, namespace)
    result["seconds"] = round(time.monotonic() - started, 2)
    if failed:
        module.exit_json(**result, verified=False, **failed)
    module.exit_json(
        **result,
        verified=True,
        retryable=False,
        reason="Verified",
        message=success_message(snapshot, served, result["seconds"], version),
        revision=served["revision"],
        keys=served["keys"],
        snapshot_hash=snapshot.get("hash"),
        snapshot_revision=snapshot["revision"],
    )


# The throwaway etcd is found from the pod: no endpoints option. ``timeout`` was the pod's
# before the connection options came, and stays so; the etcd calls' timeout is
# ``etcd_timeout`` (profile_from_params(..., timeout_option="etcd_timeout")).
ARGUMENT_SPEC = {
    **connection_argument_spec(endpoints_required=False),
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "operator_image": {"type": "str"},
    "etcd_repository": {"type": "str"},
    "timeout": {"type": "float", "default": 180.0},
    "etcd_timeout": {"type": "float", "default": 5.0},
    "client_port": {"type": "int", "default": DEFAULT_CLIENT_PORT},
    "resources": {"type": "dict"},
    "keep_pod": {"type": "bool", "default": False},
    **KUBE_CLIENT_ARGUMENT_SPEC,
}


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        required_together=CONNECTION_REQUIRED_TOGETHER,
    )
    if not HAS_ETCD3AIO:
        module.fail_json(msg=missing_required_lib("etcd3aio"), exception=str(ETCD3AIO_IMPORT_ERROR))
    p = module.params
    if p["ca_cert"] or p["client_cert"]:
        # render_pod starts the throwaway etcd without TLS (TLS is configuration, not data:
        # the snapshot does not bring it), so a TLS client could only fail to reach it.
        module.fail_json(
            msg="the verification pod's etcd serves plain HTTP: TLS options do not apply"
        )
    p["operator_image"] = (
        p["operator_image"]
        or os.environ.get("OPERATOR_IMAGE")
        or "quay.io/quorumkeeper/etcd-operator:0.1.0"
    )
    p["etcd_repository"] = (
        p["etcd_repository"] or os.environ.get("ETCD_REPOSITORY") or "quay.io/coreos/etcd"
    )
    what = f"EtcdBackup {p['namespace']}/{p['name']}"
    try:
        kube = api_client(p, fresh=True)
        backup = kube.get(API_VERSION, "EtcdBackup", p["name"], p["namespace"])
        if backup is None or backup["metadata"].get("deletionTimestamp"):
            module.exit_json(changed=False, verified=None, pod=None, reason="Gone")
        problem = check_backup(backup)
        if problem:
            module.fail_json(msg=f"cannot verify {what}: {problem}")
        verify(module, kube, backup)
    except (KubeError, KubeConfigError) as exc:
        module.fail_json(msg=f"cannot verify {what}: {exc}")
    except ValueError as exc:  # an etcdVersion that is not a version
        module.fail_json(msg=f"cannot verify {what}: {exc}")


if __name__ == "__main__":
    main()
