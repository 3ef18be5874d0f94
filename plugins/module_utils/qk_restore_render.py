# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The objects an EtcdRestore creates: per member, its PVC (exactly as the etcdcluster role
renders it) and a restore pod (``fetch`` the snapshot, then ``etcdutl snapshot restore`` with
the member's own flags into its data dir); then the restored EtcdCluster. Each is marked with
the restore's UID (qk_restore.RESTORE_KEY). Pure functions, unit tested in
tests/unit/test_restore_plan.py.
"""

from __future__ import annotations

import copy

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import API_VERSION
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_helper_pods import (
    SNAPSHOT_FILE,
    etcd_tool,
    fetch_container,
    snapshot_mount,
    snapshot_volumes,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import (
    default_spreading,
    owner_reference,
    render_pvc,
    render_replicaset,
    spreading_apart,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_restore import (
    RESTORE_KEY,
    RESTORE_PEER_LABEL,
)


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
        # The data volume only: a restore writes no certificates, and the Secrets of a cluster
        # the restore creates do not exist before it does.
        "mounts": [copy.deepcopy(m) for m in etcd["volumeMounts"] if m["name"] == "data"],
        "volumes": [copy.deepcopy(v) for v in pod_spec["volumes"] if v["name"] == "data"],
        "scheduling": {
            k: copy.deepcopy(pod_spec[k])
            for k in ("affinity", "tolerations", "nodeSelector")
            if k in pod_spec
        },
    }


def restore_pod_name(peer_name, uid):
    return f"{peer_name}-restore-{uid[:8]}"


def render_restore_pod(
    restore,
    peer_name,
    spec,
    settings,
    operator_image,
    object_url,
    sha256,
    credentials_secret,
    checked_by_etcd=False,
):
    """The pod that restores the snapshot into member ``peer_name``'s PVC: ``fetch`` (operator
    image) downloads and checks it, ``restore`` (the member's own etcd image) runs ``snapshot
    restore`` with the member's own flags. Owned by the EtcdRestore; never restarted.

    ``checked_by_etcd`` (qk_restore_observe.checked_by_etcd; only with ``sha256``, which the
    fetch enforces) adds ``--skip-hash-check``: etcd already checked the integrity hash of
    these very bytes, and hashing 1 GiB again costs each member about 0.6 CPU-seconds."""
    meta = restore["metadata"]
    namespace, uid = meta["namespace"], meta["uid"]
    member = restore_flags(peer_name, namespace, spec, settings)
    flags = member["flags"]
    scheduling = member["scheduling"]
    if scheduling.get("affinity") == default_spreading(spec["clusterName"]):
        # The members' own anti-affinity repels member pods, of which a restore has none yet:
        # its restore pods repel each other instead. Where they run, their volumes are bound
        # (WaitForFirstConsumer) and the restored members stay: spread as created ones are.
        scheduling = {**scheduling, "affinity": spreading_apart({RESTORE_KEY: uid})}
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
            *(["--skip-hash-check"] if checked_by_etcd and sha256 else []),
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
            **scheduling,
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
