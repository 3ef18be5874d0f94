#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_cluster_observe
short_description: Observe an EtcdCluster in one call - its peers, pods, volumes, Services and etcd
description:
  - >-
    Everything the etcdcluster role decides from, in one process: the cluster's EtcdPeers, the
    pod and PersistentVolumeClaim of each, whether its Services exist, and etcd's own member
    list with per-member health, leader and quorum.
  - >-
    Reads go through ansible-operator's proxy (its informer cache) where a watch is wanted: a
    single-object read of a claim or of the client Service's Endpoints carrying the
    C(operator-sdk/primary-resource) annotations makes ansible-operator watch that kind, so a
    deleted claim or a member's pod becoming (un)ready triggers the next reconcile. Pods and
    ReplicaSets are listed from the API server itself: fresh, and no cluster-wide pod cache.
  - >-
    A claim that looks gone in the cache is read again from the API server before it is
    reported gone: data loss is never decided on a stale read.
  - Only when etcd answers but has no healthy quorum, the namespace's EtcdBackups are listed
    (one call to the API server) and those of this cluster summarized, so that the status can
    name the backup to restore from; a healthy cluster's reconcile never pays for it.
  - Never changes anything.
options:
  cluster_domain:
    description: DNS domain of the cluster (members are C(<peer>.<name>.<namespace>.svc.<domain>)).
    type: str
    default: cluster.local
  client_port:
    description: etcd client port.
    type: int
    default: 2379
  volume_size:
    description:
      - The size every member's volume should have (the EtcdCluster's
        C(spec.storage.volumeClaimTemplate.resources.requests.storage)).
      - The StorageClass of a claim that asks for less is read, so that C(pvcs) says whether it
        can grow in place (C(expandable)); omitted, no StorageClass is read.
    type: raw
  volume_size_limit:
    description:
      - The size the operator may grow the volumes to when their live data fills the quota
        (C(spec.maintenance.spaceRecovery.maxVolumeSize)). The StorageClass of a claim that asks
        for less than it is read too, so that C(pvcs) says whether it can grow in place. Only
        with I(volume_size).
    type: raw
  compacted_revision:
    description:
      - The revision the key history was compacted to as last seen
        (C(status.maintenance.lastCompaction.revision); 0 when none was). Given, a healthy
        member is asked where the history is compacted to now (three reads when it has not
        moved - its current revision and each side of the known one - and a binary search over the
        revisions when it has), returned as C(etcd.compacted_revision);
        omitted, it is not asked.
    type: int
  wait_ready:
    description:
      - Members (EtcdPeer names) whose pod Kubernetes should say is ready before the
        observation, waited for up to I(wait_ready_timeout) seconds (the pods are listed every
        0.2 s); the observation is made then whatever the pods say.
      - After a step that started a member, its pod is usually ready within a second (a 1 s
        readiness probe); observing before that would report it not ready, and the readiness
        would take one more reconcile to be reported.
      - The status of these members is given up after 1.5 s when their connection has not
        been made, rather than after I(timeout), since a member that joined through a
        snapshot serves clients only 7 s after it started.
    type: list
    elements: str
    default: []
  wait_ready_timeout:
    description: Seconds to wait for the pods of I(wait_ready).
    type: float
    default: 3
  monitoring:
    description:
      - The EtcdCluster's C(spec.monitoring) (C({}) when it has none but objects may remain
        from before); omitted, monitoring objects are not looked at.
      - Given, the PodMonitor and PrometheusRule named after the cluster are listed (one
        request each; a kind the API server does not serve is reported so) and compared with
        those wanted, and C(monitoring) says what to write or delete.
    type: dict
  alert_rules:
    description:
      - The PrometheusRule whose cluster groups the cluster's PrometheusRule carries
        (config/prometheus/rules.yaml, as text), needed with C(monitoring.prometheusRule).
    type: str
extends_documentation_fragment:
  - quorumkeeper.etcd.etcd_cluster
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.kube_client.api_version
  - quorumkeeper.etcd.etcd_connection
requirements: [etcd3aio, PyYAML]
"""

EXAMPLES = r"""
- name: Observe the cluster
  etcd_cluster_observe:
    name: my-cluster
    namespace: default
  register: observed
"""

RETURN = r"""
cluster:
  description: Whether the EtcdCluster still exists (C(exists)) and is being deleted (C(deleting)).
  type: dict
  returned: always
zones:
  description: >-
    The zone (label topology.kubernetes.io/zone, "" without one) of each node a member's pod
    runs on; empty when the operator may not read nodes.
  type: dict
  returned: always
peers:
  description: >-
    EtcdPeers by ordinal: name, uid, deleting, age (seconds), state (New or Existing),
    initial_cluster (names), member_id and pvc_uid (from their status), version, repository,
    tls (the EtcdPeer's), client_url (how the operator reaches the member: https where it
    serves it and the connection has a client certificate, else http) and status (the fields
    the etcdcluster role writes).
  type: list
  elements: dict
  returned: always
pods:
  description: >-
    By peer name, the member's current pod (name, phase, ready, deleting, restarts, node, ip,
    created, last_exit, problem) or null.
  type: dict
  returned: always
pvcs:
  description: >-
    By peer name, the member's claim (exists, uid, phase, deleting, annotated, problem,
    storage_class, request_bytes, capacity, capacity_bytes, resizing: the resize conditions set,
    and expandable: whether its StorageClass allows expansion, for a claim smaller than
    C(volume_size) only).
  type: dict
  returned: always
monitoring:
  description: >-
    With I(monitoring): the kinds to write (C(write)) and delete (C(delete)), and the
    C(Monitoring) condition once done (C(condition)).
  type: dict
  returned: when I(monitoring) is given
replicasets:
  description: By peer name, whether the member's ReplicaSet exists and its ReplicaFailure message.
  type: dict
  returned: always
services:
  description: >-
    Whether the headless (C(headless)), client (C(client)) and metrics (C(metrics)) Services
    exist.
  type: dict
  returned: always
pdb:
  description: The cluster's PodDisruptionBudget (exists, max_unavailable, disruptions_allowed).
  type: dict
  returned: always
endpoints:
  description: Whether the client Service's Endpoints exist (C(exists)) and carry the annotations
    that route their changes to this EtcdCluster (C(annotated)).
  type: dict
  returned: always
recovery_restore:
  description: >-
    The in-place EtcdRestore of an automatic disaster recovery, named by the EtcdCluster's
    annotation C(etcd.quorumkeeper.dev/recovery): name, exists, uid, phase, message, backup, and
    pending (true until it has handed the restored volumes to the cluster). Null without that
    annotation.
  type: dict
  returned: always
now:
  description: Time of the observation (UTC, RFC 3339); the disaster recovery delay counts on it.
  type: str
  returned: always
backups:
  description: >-
    Only without a healthy quorum, when etcd answers or a member's data is gone: this
    cluster's EtcdBackups
    (C(spec.source.clusterName)), each with name, phase, revision, completion_time, verified
    (the C(Verified) condition's status) and verification_failed (the verification found the
    snapshot bad); null when they could not be listed (C(backups_error) says why).
  type: list
  elements: dict
  returned: without a healthy quorum, when etcd answers or a member's data is gone
etcd:
  description: What etcd says, as etcd_cluster_info returns it (reachable, members, leader, quorum,
    healthy, cluster_version, endpoint_errors), alarms (C([{member_id, alarm}]), null
    when no healthy member answered) and, with I(compacted_revision), compacted_revision
    (absent when no healthy member answered). When etcd refuses the connection's credentials,
    C(credentials_refused) holds its answer, C(reachable) is true and nothing else is known.
  type: dict
  returned: always
"""


import time

import yaml
from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_tls import (
    member_client_url,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    CONNECTION_REQUIRED_TOGETHER,
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


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        required_together=CONNECTION_REQUIRED_TOGETHER,
    )
    if not HAS_ETCD3AIO:
        module.fail_json(msg=missing_required_lib("etcd3aio"), exception=str(ETCD3AIO_IMPORT_ERROR))
    p = module.params
    try:
        cached, direct = operator_clients(p)
        wait_for_ready_pods(p, direct)
        observed = observe_kubernetes(p, cached, direct)
        add_client_urls(p, observed["peers"])
        if p["monitoring"] is not None and observed["cluster"]["uid"]:
            observed["monitoring"] = observe_monitoring(p, direct, observed["cluster"]["uid"])
    except (KubeConfigError, KubeError, ValueError) as exc:
        module.fail_json(msg=f"cannot observe EtcdCluster {p['namespace']}/{p['name']}: {exc}")
    try:
        observed["etcd"] = observe_etcd(p, observed["peers"])
    except EtcdOperationError as exc:
        # etcd answered with an error: reporting it unreachable would be a lie the role might
        # act on (a disaster recovery).
        module.fail_json(msg=f"cannot observe etcd of {p['namespace']}/{p['name']}: {exc}")
    except (ValueError, OSError) as exc:
        module.fail_json(msg=f"invalid etcd connection options: {exc}")
    observed["now"] = now_timestamp()
    lost = any(data_lost(x["pvc_uid"], observed["pvcs"].get(x["name"])) for x in observed["peers"])
    etcd = observed["etcd"]
    if not etcd["healthy"] and not etcd.get("credentials_refused") and (etcd["reachable"] or lost):
        # Without a quorum only: the backup to restore from (by a person, or by the automatic
        # disaster recovery).
        observed.update(observe_backups(p, direct))
    module.exit_json(changed=False, **observed)


if __name__ == "__main__":
    main()
