# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Which member a snapshot is taken from, and the credentials of its destination."""

from __future__ import annotations

import datetime
import time

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_VERSION,
    DEFAULT_CLIENT_PORT,
    DEFAULT_DOMAIN,
    ClusterNetwork,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    EtcdUnreachable,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KubeConfigError,
    KubeError,
    direct_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    secret_data as kube_secret_data,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore import (
    ObjectStoreError,
    parse_object_url,
    render_object_url,
)

# How often a source that no endpoint of answers is asked again while choose_source waits.
SOURCE_RETRY_SECONDS = 0.25


class SnapshotSourceError(Exception):
    """No member can give a snapshot now, or the credentials cannot be read; says why."""


def pick_member(members):
    """The member to snapshot: a healthy voting follower with the highest raft index, else the
    healthy leader. A snapshot costs its member disk reads and bandwidth, which the leader needs
    most. ``members`` as ``EtcdClient.cluster_info`` returns them."""
    voters = [
        m for m in members if m.get("healthy") and not m.get("is_learner") and m.get("client_urls")
    ]
    followers = [m for m in voters if not m.get("is_leader")]
    candidates = followers or voters
    if not candidates:
        unhealthy = ", ".join(m.get("name") or m.get("id", "?") for m in members) or "none"
        raise SnapshotSourceError(
            f"no healthy voting member to take a snapshot from (members: {unhealthy})"
        )
    return max(candidates, key=lambda m: (m.get("raft_index") or 0, m.get("name") or ""))


def choose_source(client, endpoints, selection="follower", reach_timeout=0.0):
    """``{endpoint, member, etcd_version, raft_index}`` of the member to snapshot.

    While no endpoint answers at all (``EtcdUnreachable``), they are asked again for up to
    ``reach_timeout`` seconds: right after a cluster becomes Available its client Service
    refuses connections until kube-proxy routes it to the ready members, and a backup made
    then should not fail for a minute. An answer, even an error, ends the wait.
    """
    deadline = time.monotonic() + reach_timeout
    while True:
        try:
            return _ask_source(client, endpoints, selection)
        except EtcdUnreachable:
            if time.monotonic() + SOURCE_RETRY_SECONDS > deadline:
                raise
            time.sleep(SOURCE_RETRY_SECONDS)


def _ask_source(client, endpoints, selection):
    if selection == "endpoint":
        endpoint = endpoints[0]
        status = client.status(endpoint)
        return {
            "endpoint": endpoint,
            "member": {"name": None, "id": status["id"]},
            "etcd_version": status["version"],
            "raft_index": status["raft_index"],
        }
    info = client.cluster_info()
    member = pick_member(info["members"])
    return {
        "endpoint": member["client_urls"][0],
        "member": {"name": member["name"], "id": member["id"]},
        "etcd_version": member.get("version"),
        "raft_index": member.get("raft_index"),
    }


def _read_existing(api_version, kind, name, namespace, role, client=None):
    """The object from the API server itself; ``SnapshotSourceError`` naming ``role`` (what the
    object is for) when it cannot be read or does not exist."""
    try:
        obj = (client or direct_client()).get(api_version, kind, name, namespace)
    except (KubeError, KubeConfigError) as exc:
        raise SnapshotSourceError(f"cannot read {kind} {namespace}/{name}: {exc}") from exc
    if obj is None:
        raise SnapshotSourceError(f"{kind} {namespace}/{name} ({role}) does not exist")
    return obj


def check_cluster(name, namespace, client=None):
    """Fail with words when the EtcdCluster to back up does not exist or is being deleted."""
    cluster = _read_existing(
        API_VERSION,
        "EtcdCluster",
        name,
        namespace,
        "spec.source.clusterName",
        client,
    )
    if cluster["metadata"].get("deletionTimestamp"):
        raise SnapshotSourceError(f"EtcdCluster {namespace}/{name} is being deleted")


def secret_data(secret):
    """The decoded ``data`` of a Secret object (qk_kube.secret_data, in this module's error)."""
    try:
        return kube_secret_data(secret)
    except ValueError as exc:
        raise SnapshotSourceError(str(exc)) from exc


def read_credentials(credentials, secret_name, namespace, client=None):
    """Credentials given directly, or the data of Secret ``secret_name`` (None: the store's
    defaults, e.g. an anonymous local server or the environment's cloud identity)."""
    if credentials is not None:
        return {str(k): str(v) for k, v in credentials.items()}
    if not secret_name:
        return None
    secret = _read_existing(
        "v1", "Secret", secret_name, namespace, "the destination's credentials", client
    )
    return secret_data(secret)


def plan_backup(
    backup, cluster_domain=DEFAULT_DOMAIN, client_port=DEFAULT_CLIENT_PORT, timestamp=None
):
    """What an EtcdBackup asks for, from the object as stored: ``{phase, uid, source,
    endpoints, cluster_name, member_selection, object_url, credentials_secret, error}``.

    The object URL is the one recorded by a run that was interrupted (phase Running), so that a
    ``{{ .Timestamp }}`` does not make a second object; else the template filled in. ``error``
    says what is wrong with the spec (an unknown template field, a bad URL) instead of raising.
    """
    meta, spec = backup["metadata"], backup.get("spec") or {}
    status = backup.get("status") or {}
    source, destination = spec.get("source") or {}, spec.get("destination") or {}
    namespace, cluster = meta.get("namespace"), source.get("clusterName")
    plan = {
        "phase": status.get("phase") or "Pending",
        "uid": meta.get("uid"),
        "deleting": bool(meta.get("deletionTimestamp")),
        "cluster_name": cluster,
        "credentials_secret": destination.get("credentialsSecret"),
        "error": None,
    }
    if cluster:
        plan.update(
            source=f"EtcdCluster {cluster}",
            endpoints=[
                ClusterNetwork(cluster, namespace, cluster_domain, client_port).client_service_url()
            ],
            member_selection="follower",
        )
    else:
        url = source.get("clusterURL") or ""
        plan.update(source=url, endpoints=[url], member_selection="endpoint")
    if plan["phase"] == "Running" and status.get("objectURL"):
        plan["object_url"] = status["objectURL"]
        return plan
    timestamp = timestamp or datetime.datetime.now(datetime.UTC)
    fields = {
        "UID": meta.get("uid"),
        "Name": meta.get("name"),
        "Namespace": namespace,
        "ClusterName": cluster or "",
        "Timestamp": timestamp.strftime("%Y%m%dT%H%M%SZ"),
    }
    try:
        plan["object_url"] = render_object_url(destination.get("objectURLTemplate") or "", fields)
        parse_object_url(plan["object_url"])
    except ObjectStoreError as exc:
        plan["error"] = f"spec.destination.objectURLTemplate: {exc}"
    return plan
