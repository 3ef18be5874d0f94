# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The observation of an EtcdCluster that the etcdcluster role plans from, in one call.

Run by the action plugin etcd_cluster_observe in the playbook process (a module process of its
own cost a reconcile more CPU than the observation itself), and by the module of that name,
which documents it, where the action plugins are not configured.
"""

from __future__ import annotations

import time

import yaml
from ansible.module_utils.basic import missing_required_lib
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_tls import (
    member_client_url,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    connection_argument_spec,
    etcd_client,
    profile_from_params,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_disruption import (
    PDB_API_VERSION,
    pdb_name,
    summarize_pdb,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_VERSION,
    DEFAULT_CLIENT_PORT,
    DEFAULT_DOMAIN,
    ClusterNetwork,
    data_lost,
    now_timestamp,
    ordinal_of,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    ETCD3AIO_IMPORT_ERROR,
    HAS_ETCD3AIO,
    EtcdCredentialsRefused,
    EtcdOperationError,
    EtcdUnreachable,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_members import (
    quorum_summary,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_k8s import OperationError
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KUBE_CLIENT_ARGUMENT_SPEC,
    KubeConfigError,
    KubeError,
    operator_clients,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import (
    CLUSTER_GROUP_KIND,
    CLUSTER_LABEL,
    PEER_LABEL,
    PRIMARY_RESOURCE_TYPE,
    ZONE_LABEL,
    age_seconds,
    client_service_name,
    metrics_service_name,
    read_member_claim,
    summarize_pod,
    summarize_pvc,
    summarize_replicaset,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_monitoring import (
    MONITORING_API_VERSION,
    MONITORING_KINDS,
    monitoring_failed,
    monitoring_object_name,
    monitoring_plan,
    render_monitoring_objects,
    summarize_monitoring_object,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    config_hash,
    peer_config,
    quantity_bytes,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_restore import (
    RECOVERY_KEY,
    RESTORE_KEY,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_verify import RETRYABLE_REASONS

UNREACHABLE = {
    "reachable": False,
    "members": [],
    "leader": None,
    "cluster_version": None,
    "quorum": quorum_summary(0, 0),
    "healthy": False,
    "endpoint_errors": {},
}


def peer_summary(peer):
    spec, status = peer.get("spec") or {}, peer.get("status") or {}
    created = peer["metadata"].get("creationTimestamp")
    bootstrap = spec.get("bootstrap") or {}
    return {
        "name": peer["metadata"]["name"],
        "uid": peer["metadata"].get("uid", ""),
        "deleting": bool(peer["metadata"].get("deletionTimestamp")),
        "age": round(age_seconds(created), 1) if created else 0.0,
        "state": bootstrap.get("initialClusterState", "New"),
        "initial_cluster": [
            e["name"] for e in (bootstrap.get("static") or {}).get("initialCluster") or []
        ],
        "member_id": status.get("memberID") or "",
        "pvc_uid": status.get("pvcUID") or "",
        "version": spec.get("version", ""),
        "repository": spec.get("repository", ""),
        "force_new_cluster": bool(spec.get("forceNewCluster")),
        "config_hash": config_hash(peer_config(spec)),
        "tls": spec.get("tls") or {},
        "quota_bytes": (spec.get("options") or {}).get("quotaBackendBytes"),
        "status": {
            k: status[k]
            for k in ("ready", "podName", "memberID", "serverVersion", "configHash", "conditions")
            if k in status
        },
    }


def _pod_rank(summary):
    return (not summary["deleting"], summary["created"])


def mark_expandable(direct, pvcs, wanted):
    """Set ``expandable`` on each claim asking for less than ``wanted`` bytes: whether its
    StorageClass allows volume expansion (None when the class cannot be read). Only such claims
    pay for the read, once per class."""
    classes = {}
    for summary in pvcs.values():
        if not summary["exists"] or (summary["request_bytes"] or 0) >= wanted:
            continue
        name = summary["storage_class"]
        if name not in classes:
            try:
                found = direct.get("storage.k8s.io/v1", "StorageClass", name) if name else None
            except KubeError as exc:
                if exc.status not in (401, 403):
                    raise
                found = None
            classes[name] = bool(found.get("allowVolumeExpansion")) if found else None
        summary["expandable"] = classes[name]


def node_zones(direct, nodes):
    """{node: its topology.kubernetes.io/zone label, "" without one} for the members' nodes;
    {} when nodes cannot be read (an operator installed without that permission): the spread
    of the members is then judged by node alone."""
    zones = {}
    try:
        for node in sorted(nodes):
            found = direct.get("v1", "Node", node)
            labels = (found or {}).get("metadata", {}).get("labels") or {}
            zones[node] = labels.get(ZONE_LABEL, "")
    except KubeError as exc:
        if exc.status not in (401, 403):
            raise
        return {}
    return zones


def wait_for_ready_pods(p, direct):
    """Until every pod of ``wait_ready`` is ready, or ``wait_ready_timeout`` has passed."""
    wanted = set(p["wait_ready"])
    deadline = time.monotonic() + p["wait_ready_timeout"]
    selector = f"{CLUSTER_LABEL}={p['name']}"
    while wanted:
        ready = {
            (pod["metadata"].get("labels") or {}).get(PEER_LABEL)
            for pod in direct.list("v1", "Pod", p["namespace"], label_selector=selector)
            if summarize_pod(pod)["ready"]
        }
        if wanted <= ready or time.monotonic() >= deadline:
            return
        time.sleep(0.2)


def observe_kubernetes(p, cached, direct):
    name, namespace = p["name"], p["namespace"]
    selector = f"{CLUSTER_LABEL}={name}"
    # Fresh, not from the cache: a cluster deleted since the reconcile started gets no more work.
    cluster = direct.get(p["api_version"], "EtcdCluster", name, namespace)
    peers = sorted(
        (
            peer_summary(x)
            for x in cached.list(p["api_version"], "EtcdPeer", namespace, label_selector=selector)
        ),
        key=lambda x: ordinal_of(x["name"]),
    )
    if peers:
        # A single-object read through the proxy (re)establishes the watch on peers after an
        # operator restart; a list does not.
        cached.get(p["api_version"], "EtcdPeer", peers[0]["name"], namespace)
    services = {
        "headless": cached.get("v1", "Service", name, namespace) is not None,
        "client": cached.get("v1", "Service", client_service_name(name), namespace) is not None,
        "metrics": cached.get("v1", "Service", metrics_service_name(name), namespace) is not None,
    }
    endpoints = cached.get("v1", "Endpoints", client_service_name(name), namespace)
    pvcs = {}
    for peer in peers:
        pvc = read_member_claim(cached, direct, peer["name"], namespace, peer["pvc_uid"])
        pvcs[peer["name"]] = summarize_pvc(pvc)
    if p["volume_size"] is not None:
        wanted = quantity_bytes(p["volume_size"])
        if p["volume_size_limit"] not in (None, ""):
            wanted = max(wanted, quantity_bytes(p["volume_size_limit"]))
        mark_expandable(direct, pvcs, wanted)
    replicasets = {peer["name"]: summarize_replicaset(None) for peer in peers}
    for replicaset in direct.list("apps/v1", "ReplicaSet", namespace, label_selector=selector):
        peer_name = (replicaset["metadata"].get("labels") or {}).get(PEER_LABEL)
        if peer_name in replicasets:
            replicasets[peer_name] = summarize_replicaset(replicaset)
    pods = {peer["name"]: None for peer in peers}
    for pod in direct.list("v1", "Pod", namespace, label_selector=selector):
        peer_name = (pod["metadata"].get("labels") or {}).get(PEER_LABEL)
        if peer_name not in pods:
            continue
        summary = summarize_pod(pod)
        current = pods[peer_name]
        # A live pod wins over one that is terminating, the newest over older ones.
        if current is None or _pod_rank(summary) > _pod_rank(current):
            pods[peer_name] = summary
    return {
        "zones": node_zones(direct, {x["node"] for x in pods.values() if x and x["node"]}),
        "cluster": {
            "exists": cluster is not None,
            "deleting": bool(cluster and cluster["metadata"].get("deletionTimestamp")),
            "uid": cluster["metadata"]["uid"] if cluster else "",
        },
        "recovery_restore": recovery_restore(p, direct, cluster),
        "peers": peers,
        "pods": pods,
        "pvcs": pvcs,
        "replicasets": replicasets,
        "services": services,
        "pdb": summarize_pdb(
            direct.get(PDB_API_VERSION, "PodDisruptionBudget", pdb_name(name), namespace)
        ),
        "endpoints": {
            "exists": endpoints is not None,
            "annotated": endpoints is not None
            and (endpoints["metadata"].get("annotations") or {}).get(PRIMARY_RESOURCE_TYPE)
            == CLUSTER_GROUP_KIND,
        },
    }


def observe_monitoring(p, direct, owner_uid):
    """What spec.monitoring asks for against what exists: a list request per kind, by name (a
    kind not served answers 404 to a list, which a missing object never does)."""
    rules = yaml.safe_load(p["alert_rules"]) if p["alert_rules"] else {}
    wanted = render_monitoring_objects(
        p["name"], p["namespace"], owner_uid, p["monitoring"], rules, p["api_version"]
    )
    served, existing = {}, {}
    for kind in MONITORING_KINDS:
        try:
            found = direct.list(
                MONITORING_API_VERSION,
                kind,
                p["namespace"],
                field_selector=f"metadata.name={monitoring_object_name(p['name'])}",
            )
        except KubeError as exc:
            if not exc.not_found:
                # Monitoring is no reason to stop managing the cluster: the condition says it.
                return monitoring_failed(f"cannot list {kind}s: {exc}")
            served[kind], existing[kind] = False, None
            continue
        served[kind] = True
        existing[kind] = summarize_monitoring_object(found[0] if found else None, owner_uid)
    return monitoring_plan(wanted, served, existing)


def add_client_urls(p, peers):
    """Give each peer the client URL the operator reaches it by (``client_url``): by what its
    EtcdPeer serves, members of one cluster serving https and http alike while client TLS is
    turned on or off."""
    have_certificate = bool(profile_from_params(p).client_cert)
    network = ClusterNetwork(p["name"], p["namespace"], p["cluster_domain"], p["client_port"])
    for peer in peers:
        peer["client_url"] = member_client_url(network, peer["name"], peer["tls"], have_certificate)


def observe_etcd(p, peers):
    if not peers:
        return dict(UNREACHABLE)
    live = [x for x in peers if not x["deleting"]] or peers
    profile = profile_from_params(p)
    endpoints = [x["client_url"] for x in live]
    try:
        with etcd_client(profile.with_endpoints(endpoints)) as client:
            # The members the step just started may have joined through a snapshot: see
            # statuses.
            info = client.cluster_info(joining=p["wait_ready"])
            info["alarms"] = observe_alarms(client, info)
            if p["compacted_revision"] is not None:
                compacted = observe_compaction(client, info, p["compacted_revision"])
                if compacted is not None:
                    info["compacted_revision"] = compacted
            return info
    except EtcdUnreachable as exc:
        return dict(UNREACHABLE, endpoint_errors=exc.errors)
    except EtcdCredentialsRefused as exc:
        # etcd answers but will not tell this user anything (3.5 and later not even member
        # health): what it holds is unknown, not gone, and nothing may be decided on it.
        return dict(UNREACHABLE, reachable=True, credentials_refused=str(exc))


def healthy_client_urls(info):
    """The client URLs of the members etcd_cluster_info found healthy."""
    return [u for m in info["members"] if m.get("healthy") for u in m.get("client_urls", [])]


def observe_alarms(client, info):
    """Active alarms (an upgrade waits while one is): asked of a healthy member; None when
    there is none, it does not answer, or the cluster has no quorum: etcd reads alarms through
    raft, so without a quorum the call could only wait out its timeout (5 s of every observe
    while a disaster recovery is decided)."""
    healthy = healthy_client_urls(info)
    if not healthy or not info.get("healthy"):
        return None
    try:
        return client.alarms(healthy)
    except (EtcdUnreachable, EtcdOperationError):
        return None


def observe_compaction(client, info, known):
    """The revision the history is compacted to, as a healthy member says it; None when none
    answers (status.maintenance.lastCompaction then keeps what it said)."""
    for url in healthy_client_urls(info)[:2]:
        try:
            return client.compacted_revision(url, known)
        except EtcdOperationError:
            continue
    return None


def recovery_restore(p, direct, cluster):
    """The in-place EtcdRestore of a disaster recovery that the EtcdCluster's annotation names,
    or None. ``pending`` until the restore has handed the restored volumes to the cluster (it
    then sets the cluster's restore annotation to its UID)."""
    annotations = ((cluster or {}).get("metadata") or {}).get("annotations") or {}
    name = annotations.get(RECOVERY_KEY)
    if not name:
        return None
    restore = direct.get(p["api_version"], "EtcdRestore", name, p["namespace"])
    if restore is None:
        # Deleted: that recovery is over (or was given up); a new one may start.
        return {"name": name, "exists": False, "pending": False}
    status = restore.get("status") or {}
    conditions = status.get("conditions") or []
    latest = max(conditions, key=lambda c: c.get("lastTransitionTime") or "", default={})
    return {
        "name": name,
        "exists": True,
        "uid": restore["metadata"]["uid"],
        "pending": annotations.get(RESTORE_KEY) != restore["metadata"]["uid"],
        "phase": status.get("phase") or "Pending",
        "message": latest.get("message") or "",
        "backup": ((restore.get("spec") or {}).get("source") or {}).get("backupName") or "",
    }


def backup_summary(backup):
    status = backup.get("status") or {}
    verified = next((c for c in status.get("conditions") or [] if c.get("type") == "Verified"), {})
    return {
        "name": backup["metadata"]["name"],
        "phase": status.get("phase") or "Pending",
        "revision": status.get("revision"),
        "completion_time": status.get("completionTime") or "",
        "verified": verified.get("status") or "",
        # Found bad (not merely unable to run): a restore refuses it.
        "verification_failed": verified.get("status") == "False"
        and verified.get("reason") not in RETRYABLE_REASONS,
    }


def observe_backups(p, direct):
    """This cluster's EtcdBackups, summarized: what a person could restore from."""
    try:
        items = direct.list(p["api_version"], "EtcdBackup", p["namespace"])
    except KubeError as exc:
        return {"backups": None, "backups_error": str(exc)}
    return {
        "backups": [
            backup_summary(b)
            for b in items
            if ((b.get("spec") or {}).get("source") or {}).get("clusterName") == p["name"]
        ]
    }


# The members' client URLs are found from the EtcdPeers: no endpoints option.
ARGUMENT_SPEC = {
    **connection_argument_spec(endpoints_required=False),
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "cluster_domain": {"type": "str", "default": DEFAULT_DOMAIN},
    "client_port": {"type": "int", "default": DEFAULT_CLIENT_PORT},
    "volume_size": {"type": "raw"},
    "volume_size_limit": {"type": "raw"},
    "compacted_revision": {"type": "int"},
    "wait_ready": {"type": "list", "elements": "str", "default": []},
    "wait_ready_timeout": {"type": "float", "default": 3},
    "monitoring": {"type": "dict"},
    "alert_rules": {"type": "str"},
    "api_version": {"type": "str", "default": API_VERSION},
    **KUBE_CLIENT_ARGUMENT_SPEC,
}


def observe_cluster(p):
    """The whole observation for the module's parameters ``p`` (ARGUMENT_SPEC, validated);
    OperationError with a message for the user when it cannot be made."""
    if not HAS_ETCD3AIO:
        raise OperationError(f"{missing_required_lib('etcd3aio')}: {ETCD3AIO_IMPORT_ERROR}")
    try:
        cached, direct = operator_clients(p)
        wait_for_ready_pods(p, direct)
        observed = observe_kubernetes(p, cached, direct)
        add_client_urls(p, observed["peers"])
        if p["monitoring"] is not None and observed["cluster"]["uid"]:
            observed["monitoring"] = observe_monitoring(p, direct, observed["cluster"]["uid"])
    except (KubeConfigError, KubeError, ValueError) as exc:
        raise OperationError(
            f"cannot observe EtcdCluster {p['namespace']}/{p['name']}: {exc}"
        ) from exc
    try:
        observed["etcd"] = observe_etcd(p, observed["peers"])
    except EtcdOperationError as exc:
        # etcd answered with an error: reporting it unreachable would be a lie the role might
        # act on (a disaster recovery).
        raise OperationError(f"cannot observe etcd of {p['namespace']}/{p['name']}: {exc}") from exc
    except (ValueError, OSError) as exc:
        raise OperationError(f"invalid etcd connection options: {exc}") from exc
    observed["now"] = now_timestamp()
    lost = any(data_lost(x["pvc_uid"], observed["pvcs"].get(x["name"])) for x in observed["peers"])
    etcd = observed["etcd"]
    if not etcd["healthy"] and not etcd.get("credentials_refused") and (etcd["reachable"] or lost):
        # Without a quorum only: the backup to restore from (by a person, or by the automatic
        # disaster recovery).
        observed.update(observe_backups(p, direct))
    return {"changed": False, **observed}
