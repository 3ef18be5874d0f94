# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""A member's Kubernetes objects, and what its pod and volume say about it.

Pure functions, unit tested: ``render_pvc`` / ``render_replicaset`` turn an EtcdPeer into the
objects that run it, ``is_subset`` decides whether an existing object already says what we
want, ``summarize_pod`` / ``summarize_pvc`` reduce a pod and a claim to what the planner and the
status need (readiness, restarts, and problems a person has to act on).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from decimal import Decimal, InvalidOperation

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_tls import (
    CLIENT_TLS_DIR,
    DEFAULT_METRICS_PORT,
    LISTEN_PLAIN_HTTP,
    PEER_TLS_DIR,
    SERVE_PLAIN_HTTP,
    schemes,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    CLUSTER_GROUP_KIND,
    CLUSTER_LABEL,
    DEFAULT_CLIENT_PORT,
    DEFAULT_PEER_PORT,
    DEFAULT_REPOSITORY,
    PEER_LABEL,
    ClusterNetwork,
    claim_facts,
    client_service_name,
    data_lost,
    image_reference,
    member_labels,
    metrics_service_name,
    seconds_between,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    CONFIG_HASH_ANNOTATION,
    config_hash,
    option_flags,
    peer_config,
    quantity_bytes,
)

# ansible-operator maps changes of objects carrying these annotations to the named owner
# (operator-lib's EnqueueRequestForAnnotation) without an ownerReference, so a PVC can wake its
# EtcdCluster up when it is deleted and still never be garbage collected with it.
PRIMARY_RESOURCE = "operator-sdk/primary-resource"
PRIMARY_RESOURCE_TYPE = "operator-sdk/primary-resource-type"

DEFAULTS = {
    "client_port": DEFAULT_CLIENT_PORT,
    "peer_port": DEFAULT_PEER_PORT,
    "metrics_port": DEFAULT_METRICS_PORT,
    "data_dir": "/var/lib/etcd",
    "termination_grace_seconds": 30,
    "readiness_period_seconds": 1,
    "default_repository": DEFAULT_REPOSITORY,
    "default_storage": {
        "volumeClaimTemplate": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        }
    },
}

# Container waiting reasons that will not clear by themselves: the user must change something.
IMAGE_PROBLEMS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
CONFIG_PROBLEMS = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
CRASH_PROBLEMS = {"CrashLoopBackOff"}


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def cluster_annotations(cluster, namespace):
    """The annotations that make ansible-operator reconcile the EtcdCluster on changes."""
    return {PRIMARY_RESOURCE: f"{namespace}/{cluster}", PRIMARY_RESOURCE_TYPE: CLUSTER_GROUP_KIND}


_QUANTITY = re.compile(r"^([+]?[0-9.]+)([a-zA-Z]*)$")
_CPU_SUFFIX = {"": Decimal(1), "m": Decimal("0.001"), "k": Decimal(1000), "M": Decimal(10**6)}


def cpu_quantity(value):
    """A Kubernetes CPU quantity (``1500m``, ``2``, ``0.5``) as a Decimal number of cores."""
    if isinstance(value, bool):
        raise ValueError(f"invalid CPU quantity {value!r}")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _CPU_SUFFIX:
        raise ValueError(f"invalid CPU quantity {value!r} (expected e.g. 500m, 2, 1.5)")
    try:
        return Decimal(match.group(1)) * _CPU_SUFFIX[match.group(2)]
    except InvalidOperation as exc:
        raise ValueError(f"invalid CPU quantity {value!r}") from exc


def gomaxprocs(cpu_limit):
    """GOMAXPROCS for a CPU limit: the whole cores, at least 1; None without a limit."""
    if cpu_limit is None or (isinstance(cpu_limit, str) and not cpu_limit.strip()):
        return None
    return max(1, math.floor(cpu_quantity(cpu_limit)))


def self_host(peer_name, spec):
    """The member's DNS name, as the static initial cluster of its bootstrap spells it."""
    for entry in spec.get("bootstrap", {}).get("static", {}).get("initialCluster") or []:
        if entry.get("name") == peer_name:
            return entry["host"]
    raise ValueError(f"EtcdPeer {peer_name}: its bootstrap initialCluster does not name it")


INTEGER_SETTINGS = (
    "client_port",
    "metrics_port",
    "peer_port",
    "termination_grace_seconds",
    "readiness_period_seconds",
)


def member_settings(settings=None):
    """DEFAULTS overridden by ``settings`` (numbers may arrive as strings from templates)."""
    merged = {**DEFAULTS, **{k: v for k, v in (settings or {}).items() if v not in (None, "")}}
    for key in INTEGER_SETTINGS:
        merged[key] = int(merged[key])
    ports = {key: merged[key] for key in ("client_port", "peer_port", "metrics_port")}
    if len(set(ports.values())) < len(ports):
        # etcd would fail to bind its second listener and crash-loop every member; the ports
        # are the operator's settings (roles/quorumkeeper/defaults/main.yml), not a cluster's.
        raise ValueError(
            "a member's client, peer and metrics ports must differ, the operator's settings "
            f"give {ports}: change quorumkeeper_client_port or quorumkeeper_peer_port"
        )
    return merged


def render_pvc(peer_name, namespace, spec, settings=None):
    """The member's data volume: no owner (the data outlives the cluster), annotated so that
    its deletion wakes the EtcdCluster up."""
    settings = member_settings(settings)
    storage = spec.get("storage") or settings["default_storage"]
    cluster = spec["clusterName"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": peer_name,
            "namespace": namespace,
            "labels": member_labels(cluster, peer_name),
            "annotations": cluster_annotations(cluster, namespace),
        },
        "spec": copy.deepcopy(storage["volumeClaimTemplate"]),
    }


def tls_volumes(tls):
    """(volume, mount directory, Secret) of each certificate Secret a member mounts."""
    volumes = []
    if tls.get("client"):
        volumes.append(("client-tls", CLIENT_TLS_DIR, tls["client"]["secretName"]))
    if tls.get("peer"):
        volumes.append(("peer-tls", PEER_TLS_DIR, tls["peer"]["secretName"]))
    return volumes


def tls_flags(tls):
    """etcd's TLS flags for an EtcdPeer's ``tls``."""
    flags = []
    client = tls.get("client")
    if client:
        flags += [
            f"--cert-file={CLIENT_TLS_DIR}/tls.crt",
            f"--key-file={CLIENT_TLS_DIR}/tls.key",
            f"--trusted-ca-file={CLIENT_TLS_DIR}/ca.crt",
            f"--client-cert-auth={'true' if client.get('clientCertAuth', True) else 'false'}",
        ]
    peer = tls.get("peer")
    if peer:
        flags += [
            f"--peer-cert-file={PEER_TLS_DIR}/tls.crt",
            f"--peer-key-file={PEER_TLS_DIR}/tls.key",
            f"--peer-trusted-ca-file={PEER_TLS_DIR}/ca.crt",
        ]
        if not peer.get(LISTEN_PLAIN_HTTP):
            # etcd ignores it on a plain HTTP listener (and says so in a warning).
            flags.append("--peer-client-cert-auth=true")
    return flags


# The failure domains members are kept apart in, by weight: a node first, then a zone (a node
# without the zone label is simply in none).
HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
SPREAD_TOPOLOGY_KEYS = ((HOSTNAME_LABEL, 100), (ZONE_LABEL, 50))


def default_spreading(cluster):
    """The members' pod anti-affinity when spec.podTemplate sets no scheduling of its own:
    preferred, not required, so that a cluster with fewer nodes than members still starts (the
    status warns, qk_report's MembersSpread condition)."""
    return spreading_apart({CLUSTER_LABEL: cluster})


def spreading_apart(match_labels):
    """A preferred anti-affinity keeping the pods ``match_labels`` selects on separate nodes,
    then zones (SPREAD_TOPOLOGY_KEYS)."""
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": weight,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": dict(match_labels)},
                        "topologyKey": key,
                    },
                }
                for key, weight in SPREAD_TOPOLOGY_KEYS
            ]
        }
    }


def scrape_annotations(annotations, metrics_port):
    """The annotations a Prometheus without the Prometheus operator scrapes pods by
    (``prometheus.io/*``), pointing at the metrics port; none when the pod template sets
    ``prometheus.io/scrape`` itself."""
    if "prometheus.io/scrape" in annotations:
        return {}
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(metrics_port),
        "prometheus.io/path": "/metrics",
    }


def render_replicaset(peer_name, namespace, spec, settings=None):
    """A ReplicaSet of one pod running the member.

    A ReplicaSet per member (not one StatefulSet) restarts the pod wherever it can run while the
    member keeps its name, DNS entry and volume, and lets the operator add, replace and upgrade
    members one at a time. Readiness probe only: etcd exits by itself on unrecoverable errors,
    and a liveness probe would restart members during elections and latency spikes.
    """
    settings = member_settings(settings)
    cluster = spec["clusterName"]
    host = self_host(peer_name, spec)
    tls = spec.get("tls") or {}
    network = ClusterNetwork.from_settings(
        {**settings, "cluster": cluster, "namespace": namespace, **schemes(tls)}
    )
    client_port, peer_port = network.client_port, network.peer_port
    listen_clients = network.listen_client_url()
    advertise_clients = network.client_url(peer_name, host)
    if (tls.get("client") or {}).get(SERVE_PLAIN_HTTP):
        # While client TLS is turned on or off: etcd serves both on the one port (TLS told from
        # plain by the first bytes), so clients move over without a port or Service changing.
        plain = dataclasses.replace(network, client_scheme="http")
        listen_clients += f",{plain.listen_client_url()}"
        advertise_clients += f",{plain.client_url(peer_name, host)}"
    state = spec["bootstrap"].get("initialClusterState", "New").lower()
    initial = network.initial_cluster(spec["bootstrap"]["static"]["initialCluster"])
    template = spec.get("podTemplate") or {}
    container = {
        "name": "etcd",
        "image": image_reference(
            spec["version"], spec.get("repository") or settings["default_repository"]
        ),
        "command": ["/usr/local/bin/etcd"],
        "args": [
            f"--name={peer_name}",
            f"--data-dir={settings['data_dir']}/data",
            f"--listen-peer-urls={network.listen_peer_url()}",
            f"--listen-client-urls={listen_clients}",
            f"--advertise-client-urls={advertise_clients}",
            f"--initial-advertise-peer-urls={network.peer_url(peer_name, host)}",
            f"--initial-cluster={initial}",
            f"--initial-cluster-state={state}",
            f"--initial-cluster-token={cluster}",
            # Metrics and /health on a port of their own, plain HTTP whatever the client
            # traffic's TLS: scrapers and the health watch need no client certificate.
            f"--listen-metrics-urls=http://0.0.0.0:{settings['metrics_port']}",
            # Disaster recovery only: one start as a one-member cluster on the survivor's data.
            *(["--force-new-cluster"] if spec.get("forceNewCluster") else []),
            *tls_flags(tls),
            *option_flags(spec.get("options")),
        ],
        "ports": [
            {"name": "client", "containerPort": client_port},
            {"name": "peer", "containerPort": peer_port},
            {"name": "metrics", "containerPort": settings["metrics_port"]},
        ],
        "readinessProbe": {
            "tcpSocket": {"port": client_port},
            "periodSeconds": settings["readiness_period_seconds"],
            "failureThreshold": 3,
        },
        "volumeMounts": [
            {"name": "data", "mountPath": settings["data_dir"]},
            *[
                {"name": volume, "mountPath": directory, "readOnly": True}
                for volume, directory, _ in tls_volumes(tls)
            ],
        ],
    }
    resources = template.get("resources") or {}
    if resources:
        container["resources"] = copy.deepcopy(resources)
    procs = gomaxprocs((resources.get("limits") or {}).get("cpu"))
    if procs is not None:
        # The Go runtime would otherwise size itself to the node's cores, not the CPU limit.
        container["env"] = [{"name": "GOMAXPROCS", "value": str(procs)}]
    pod_spec = {
        "hostname": peer_name,
        "subdomain": cluster,
        "terminationGracePeriodSeconds": settings["termination_grace_seconds"],
        "containers": [container],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": peer_name}},
            *[
                {"name": volume, "secret": {"secretName": secret, "defaultMode": 0o400}}
                for volume, _, secret in tls_volumes(tls)
            ],
        ],
    }
    for key in ("affinity", "tolerations", "nodeSelector", "topologySpreadConstraints"):
        if template.get(key):
            pod_spec[key] = copy.deepcopy(template[key])
    if not template.get("affinity") and not template.get("topologySpreadConstraints"):
        pod_spec["affinity"] = default_spreading(cluster)
    labels = member_labels(cluster, peer_name)
    pod_metadata = {"labels": labels}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    pod_metadata["annotations"] = {
        **scrape_annotations(annotations, settings["metrics_port"]),
        **annotations,
        CONFIG_HASH_ANNOTATION: config_hash(peer_config(spec)),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": peer_name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {PEER_LABEL: peer_name}},
            "template": {"metadata": pod_metadata, "spec": pod_spec},
        },
    }


def owner_reference(obj, controller=True):
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def is_subset(wanted, actual):
    """Whether ``actual`` already says everything ``wanted`` says (API server defaults and
    fields set by others are ignored; lists must match element by element)."""
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(
            k in actual and is_subset(v, actual[k]) for k, v in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(actual, list)
            and len(wanted) == len(actual)
            and all(is_subset(w, a) for w, a in zip(wanted, actual, strict=True))
        )
    if isinstance(wanted, (int, float)) and isinstance(actual, str):
        return str(wanted) == actual
    return wanted == actual


# --------------------------------------------------------------------------------------------
# Observation
# --------------------------------------------------------------------------------------------


def age_seconds(timestamp, now=None):
    """Seconds since a Kubernetes timestamp (0 without one, never negative)."""
    return max(0.0, seconds_between(timestamp, now) or 0.0)


def summarize_pod(pod):
    """What the operator needs of a member's pod, and the problem it shows, if any.

    ``problem`` is None or ``{reason, message}``: a condition that will not clear by itself
    (image cannot be pulled, container crash-looping or misconfigured, pod unschedulable).
    """
    meta, status = pod.get("metadata", {}), pod.get("status", {})
    containers = status.get("containerStatuses") or []
    etcd = next(
        (c for c in containers if c.get("name") == "etcd"), containers[0] if containers else {}
    )
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = (conditions.get("Ready") or {}).get("status") == "True"
    state = etcd.get("state") or {}
    waiting = state.get("waiting") or {}
    last = (etcd.get("lastState") or {}).get("terminated") or {}
    summary = {
        "name": meta.get("name", ""),
        "phase": status.get("phase", "Pending"),
        "ready": ready and not meta.get("deletionTimestamp"),
        "deleting": bool(meta.get("deletionTimestamp")),
        "restarts": int(etcd.get("restartCount") or 0),
        "node": pod.get("spec", {}).get("nodeName", ""),
        "ip": status.get("podIP", ""),
        "created": meta.get("creationTimestamp", ""),
        "force_new_cluster": started_with_force_new_cluster(pod),
        # None for a pod started before the operator annotated it: what it runs is unknown.
        "config_hash": (meta.get("annotations") or {}).get(CONFIG_HASH_ANNOTATION),
        "last_exit": (
            {"reason": last.get("reason", ""), "exit_code": last.get("exitCode")} if last else None
        ),
        "problem": None,
    }
    name = summary["name"]
    reason, message = waiting.get("reason", ""), (waiting.get("message") or "").strip()
    scheduled = conditions.get("PodScheduled") or {}
    if reason in IMAGE_PROBLEMS:
        image = (pod.get("spec", {}).get("containers") or [{}])[0].get("image", "")
        summary["problem"] = {
            "reason": "ImagePullFailed",
            "message": f"pod {name} cannot pull image {image} "
            f"({reason}: {message or 'no detail'}); "
            "check spec.version and spec.repository of the EtcdCluster",
        }
    elif reason in CRASH_PROBLEMS:
        exit_detail = f", last exit code {last.get('exitCode')}" if last else ""
        summary["problem"] = {
            "reason": "MemberCrashLooping",
            "message": f"pod {name}: etcd keeps exiting ({summary['restarts']} restarts"
            f"{exit_detail}); see kubectl logs {name} --previous",
        }
    elif reason in CONFIG_PROBLEMS:
        summary["problem"] = {
            "reason": "MemberPodFailing",
            "message": f"pod {name} cannot start etcd ({reason}: {message or 'no detail'})",
        }
    elif scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        summary["problem"] = {
            "reason": "PodUnschedulable",
            "message": f"pod {name} cannot be scheduled: {scheduled.get('message', '').strip()}; "
            "check spec.podTemplate (resources, affinity, nodeSelector, tolerations)",
        }
    return summary


def started_with_force_new_cluster(pod):
    """Whether the pod's etcd runs with --force-new-cluster (disaster recovery from a survivor):
    such a pod must be replaced before any other member joins, or a restart of its container
    would drop them from the cluster again."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == "etcd":
            return "--force-new-cluster" in (container.get("args") or [])
    return False


def never_ran(pod):
    """Whether no container of the pod has ever run (e.g. its image could not be pulled)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return all(
        not (c.get("state") or {}).get("running")
        and not (c.get("state") or {}).get("terminated")
        and not (c.get("lastState") or {}).get("terminated")
        and not c.get("restartCount")
        for c in statuses
    )


PVC_PENDING_GRACE_SECONDS = 60


def claim_lost(pvc, recorded_uid):
    """The claim a member ran on (``recorded_uid``) is gone, replaced, or being deleted."""
    return data_lost(recorded_uid, claim_facts(pvc))


def read_member_claim(cached, direct, name, namespace, recorded_uid):
    """A member's claim from the operator's cache; one that looks lost there is read again from
    the API server (the cache may be a moment behind), so data loss is never decided on a stale
    read."""
    pvc = cached.get("v1", "PersistentVolumeClaim", name, namespace)
    if recorded_uid and claim_lost(pvc, recorded_uid):
        pvc = direct.get("v1", "PersistentVolumeClaim", name, namespace)
    return pvc


def summarize_replicaset(replicaset):
    """Whether a member's ReplicaSet exists, and why it cannot create the pod, if it says so."""
    if replicaset is None:
        return {"exists": False, "failure": ""}
    failure = next(
        (
            c.get("message", "")
            for c in (replicaset.get("status") or {}).get("conditions") or []
            if c.get("type") == "ReplicaFailure" and c.get("status") == "True"
        ),
        "",
    )
    return {"exists": True, "failure": failure}


def summarize_pvc(pvc, now=None):
    """What the operator needs of a member's claim; a claim Pending for over a minute is a
    problem (no StorageClass, no capacity)."""
    if pvc is None:
        return {"exists": False, "uid": "", "phase": "", "deleting": False, "problem": None}
    meta, status = pvc.get("metadata", {}), pvc.get("status", {})
    phase = status.get("phase", "Pending")
    requested = ((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}
    capacity = (status.get("capacity") or {}).get("storage")
    summary = {
        "exists": True,
        "uid": meta.get("uid", ""),
        "phase": phase,
        "deleting": bool(meta.get("deletionTimestamp")),
        "annotated": (meta.get("annotations") or {}).get(PRIMARY_RESOURCE_TYPE)
        == CLUSTER_GROUP_KIND,
        "problem": None,
        "storage_class": (pvc.get("spec") or {}).get("storageClassName") or "",
        "request_bytes": _bytes_or_none(requested.get("storage")),
        # What the volume has now: less than the request while it grows.
        "capacity": capacity or "",
        "capacity_bytes": _bytes_or_none(capacity),
        "resizing": sorted(
            f"{c['type']}: {c.get('message') or c.get('reason') or 'in progress'}"
            for c in status.get("conditions") or []
            if c.get("status") == "True"
            and ("Resize" in c.get("type", "") or c.get("type") == "Resizing")
        ),
    }
    age = age_seconds(meta.get("creationTimestamp"), now)
    if phase == "Pending" and age >= PVC_PENDING_GRACE_SECONDS:
        storage_class = pvc.get("spec", {}).get("storageClassName") or "the default StorageClass"
        summary["problem"] = {
            "reason": "VolumeNotBound",
            "message": f"PVC {meta.get('name')} has been Pending for {int(age)}s (storage class "
            f"{storage_class}); see kubectl describe pvc {meta.get('name')}",
        }
    return summary


def _bytes_or_none(quantity) -> int | None:
    try:
        return quantity_bytes(quantity) if quantity is not None else None
    except ValueError:
        return None


def render_services(
    cluster, namespace, client_port=DEFAULT_CLIENT_PORT, peer_port=DEFAULT_PEER_PORT
):
    """The headless Service (stable member DNS names), the client Service and the metrics
    Service of a cluster.

    The headless Service publishes not-ready addresses because members must find each other
    before any of them is ready; the client Service balances clients over ready members; the
    metrics Service (headless too) lists every member's metrics port, ready or not, so that a
    member that stops being ready is still scraped and seen down.
    """
    labels = member_labels(cluster)
    selector = {CLUSTER_LABEL: cluster}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": cluster, "namespace": namespace, "labels": labels},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": selector,
                "ports": [
                    {"name": "client", "port": client_port},
                    {"name": "peer", "port": peer_port},
                ],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": client_service_name(cluster),
                "namespace": namespace,
                "labels": labels,
            },
            "spec": {
                "selector": selector,
                "ports": [{"name": "client", "port": client_port, "targetPort": client_port}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": metrics_service_name(cluster),
                "namespace": namespace,
                "labels": {**labels, "app.kubernetes.io/component": "etcd-metrics"},
            },
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                # Restore and verification pods carry the cluster label with other app names.
                "selector": {**selector, "app.kubernetes.io/name": "etcd"},
                "ports": [
                    {"name": "metrics", "port": DEFAULT_METRICS_PORT, "targetPort": "metrics"}
                ],
            },
        },
    ]
