# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The etcd domain of quorumkeeper, written once: names, labels, member and client URLs, versions
and images, quorum arithmetic, the data-lost rule and timestamps.

Every other part imports these (modules, filters, action plugins, helper pods, tests), so a rule
changes in one place. Pure functions and constants only: no Ansible, no I/O.

Addresses come from one ``ClusterNetwork`` (cluster, namespace, DNS domain, ports, schemes):
the URL etcd learns for a member, the URL its pod advertises and the URL the operator dials are
all made by it, so they cannot disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime

# --------------------------------------------------------------------------------------------
# API and labels
# --------------------------------------------------------------------------------------------

API_GROUP = "etcd.quorumkeeper.dev"
API_VERSION = f"{API_GROUP}/v1alpha1"
CLUSTER_KIND = "EtcdCluster"
CLUSTER_GROUP_KIND = f"{CLUSTER_KIND}.{API_GROUP}"
CLUSTER_LABEL = f"{API_GROUP}/cluster"
PEER_LABEL = f"{API_GROUP}/peer"

DEFAULT_CLIENT_PORT = 2379
DEFAULT_PEER_PORT = 2380
DEFAULT_DOMAIN = "cluster.local"
DEFAULT_REPOSITORY = "quay.io/coreos/etcd"
SCHEMES = ("http", "https")

# --------------------------------------------------------------------------------------------
# Member names
# --------------------------------------------------------------------------------------------

_ORDINAL = re.compile(r"-(\d+)$")


def peer_name(cluster: str, ordinal: int) -> str:
    """The name of a cluster's member (its EtcdPeer, pod, claim and etcd name)."""
    return f"{cluster}-{ordinal}"


def ordinal_of(name: str) -> int:
    """The trailing ordinal of a member name (``etcd-2`` -> 2); -1 when it has none."""
    match = _ORDINAL.search(str(name or ""))
    return int(match.group(1)) if match else -1


def alarmed_peers(alarms, members: list[dict], cluster: str, kind: str) -> list[str]:
    """The peer names of the members with alarm ``kind`` (``NOSPACE``, ``CORRUPT``) in etcd's
    alarm list ``[{member_id, alarm}]`` (None: unknown, none), by ordinal; a member etcd no
    longer lists by its ID."""
    names = {m.get("id"): member_peer_name(m, cluster) for m in members}
    raised = {
        names.get(a.get("member_id"), a.get("member_id"))
        for a in alarms or []
        if a.get("alarm") == kind
    }
    return sorted(raised, key=ordinal_of)


def member_labels(cluster: str, peer: str = "") -> dict:
    """The labels of a member's objects; without ``peer``, those of the cluster's objects."""
    labels = {
        "app.kubernetes.io/name": "etcd",
        "app.kubernetes.io/instance": cluster,
        "app.kubernetes.io/managed-by": "quorumkeeper",
        CLUSTER_LABEL: cluster,
    }
    if peer:
        labels[PEER_LABEL] = peer
    return labels


def client_service_name(cluster: str) -> str:
    """The Service that balances clients over a cluster's ready members."""
    return f"{cluster}-client"


def metrics_service_name(cluster: str) -> str:
    """The headless Service that names every member's metrics port (for ServiceMonitors and
    other Service-based discovery)."""
    return f"{cluster}-metrics"


def cluster_owner_reference(cluster: str, uid: str, api_version: str = API_VERSION) -> dict:
    """The controller owner reference to EtcdCluster ``cluster`` of the objects made for it
    (Secrets, PodDisruptionBudget): deleted with it, never before it."""
    return {
        "apiVersion": api_version,
        "kind": CLUSTER_KIND,
        "name": cluster,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def user_secret_name(cluster: str, user: str) -> str:
    """The Secret with an etcd user's credentials (password, and with TLS its certificate)."""
    return f"{cluster}-user-{user}"


def user_certificate_secret_name(cluster: str, user: str) -> str:
    """The Secret cert-manager writes an etcd user's client certificate to, for a cluster whose
    client certificates come from an issuer: its own, since a Secret cert-manager writes must be
    of type kubernetes.io/tls and the user's credentials Secret may be one the user made."""
    return f"{cluster}-usercert-{user}"


# --------------------------------------------------------------------------------------------
# Addresses
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterNetwork:
    """Where a cluster's members are: every member and client URL is made here.

    Members are ``<peer>.<cluster>.<namespace>.svc.<domain>`` (the cluster's headless Service).
    """

    cluster: str
    namespace: str
    domain: str = DEFAULT_DOMAIN
    client_port: int = DEFAULT_CLIENT_PORT
    peer_port: int = DEFAULT_PEER_PORT
    client_scheme: str = "http"
    peer_scheme: str = "http"

    def __post_init__(self):
        for label in ("cluster", "namespace"):
            if not getattr(self, label):
                raise ValueError(f"etcd addresses need a non-empty {label}")
        object.__setattr__(self, "domain", self.domain or DEFAULT_DOMAIN)
        for port in ("client_port", "peer_port"):
            value = int(getattr(self, port))
            if not 0 < value < 65536:
                raise ValueError(f"{port} {value} is not a TCP port")
            object.__setattr__(self, port, value)
        for scheme in ("client_scheme", "peer_scheme"):
            if getattr(self, scheme) not in SCHEMES:
                raise ValueError(f"{scheme} must be one of {SCHEMES}")

    @classmethod
    def from_settings(cls, settings: dict) -> ClusterNetwork:
        """From a settings dict (roles pass these; numbers may arrive as strings); keys it does
        not know are ignored, empty values take the defaults."""
        known = {
            f: settings[f] for f in cls.__dataclass_fields__ if settings.get(f) not in (None, "")
        }
        return cls(**known)

    def member_host(self, peer: str) -> str:
        if not peer:
            raise ValueError("etcd addresses need a non-empty member name")
        return f"{peer}.{self.cluster}.{self.namespace}.svc.{self.domain}"

    def peer_url(self, peer: str, host: str | None = None) -> str:
        return f"{self.peer_scheme}://{host or self.member_host(peer)}:{self.peer_port}"

    def client_url(self, peer: str, host: str | None = None) -> str:
        return f"{self.client_scheme}://{host or self.member_host(peer)}:{self.client_port}"

    def client_urls(self, peers) -> list[str]:
        return [self.client_url(p) for p in peers]

    def client_service_url(self) -> str:
        host = f"{client_service_name(self.cluster)}.{self.namespace}.svc.{self.domain}"
        return f"{self.client_scheme}://{host}:{self.client_port}"

    def initial_cluster(self, members) -> str:
        """``--initial-cluster``: ``name=peer URL`` of each member; ``members`` are names, or
        ``{name, host, scheme}`` entries as an EtcdPeer's static bootstrap spells them (a
        ``scheme`` of its own while peer TLS is turned on or off: etcd checks that a joining
        member lists every member's peer URLs as the cluster does)."""
        parts = []
        for member in members:
            if isinstance(member, dict):
                network = self
                if member.get("scheme"):
                    network = replace(self, peer_scheme=member["scheme"])
                url = network.peer_url(member["name"], member["host"])
                parts.append(f"{member['name']}={url}")
            else:
                parts.append(f"{member}={self.peer_url(member)}")
        return ",".join(parts)

    def listen_peer_url(self) -> str:
        return f"{self.peer_scheme}://0.0.0.0:{self.peer_port}"

    def listen_client_url(self) -> str:
        return f"{self.client_scheme}://0.0.0.0:{self.client_port}"


# --------------------------------------------------------------------------------------------
# Versions and images
# --------------------------------------------------------------------------------------------

_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-([0-9A-Za-z.-]+))?(?:\+.*)?$")


def parse_version(version) -> tuple[int, int, int]:
    """``"3.5.17"``, ``"v3.4"``, ``"3.6.0-rc.1"`` -> (major, minor, patch); ValueError when it
    is not a version."""
    match = _VERSION.match(str(version or "").strip())
    if not match:
        raise ValueError(f"{version!r} is not an etcd version")
    return tuple(int(part or 0) for part in match.group(1, 2, 3))


def version_or_none(version) -> tuple[int, int, int] | None:
    """parse_version, or None for anything that is not a version (etcd said nothing yet)."""
    try:
        return parse_version(version)
    except ValueError:
        return None


def version_key(version) -> tuple:
    """A sort key: releases after their pre-releases (``3.6.0-rc.1`` < ``3.6.0``)."""
    nums = parse_version(version)
    pre = _VERSION.match(str(version).strip()).group(4)
    if pre is None:
        return nums, (1, ())
    return nums, (0, tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")))


def compare_versions(a, b) -> int:
    """-1, 0 or 1."""
    ka, kb = version_key(a), version_key(b)
    return (ka > kb) - (ka < kb)


def minor_version(version) -> str:
    """``3.5.9`` -> ``3.5``; what is not a version is returned as it is."""
    parsed = version_or_none(version)
    return f"{parsed[0]}.{parsed[1]}" if parsed else str(version)


def image_reference(version, repository: str | None = None) -> str:
    """``<repository>:v<version>`` (a leading ``v`` on version is accepted)."""
    text = str(version or "").strip()
    if not text:
        raise ValueError("an etcd image needs a version")
    return f"{repository or DEFAULT_REPOSITORY}:v{text.removeprefix('v')}"


# --------------------------------------------------------------------------------------------
# Quorum
# --------------------------------------------------------------------------------------------


def quorum_size(voters: int) -> int:
    """How many voting members must agree in a cluster of ``voters`` voters."""
    return voters // 2 + 1


def keeps_quorum(healthy_voters: int, voters: int) -> bool:
    """Whether ``healthy_voters`` of ``voters`` voting members still form a quorum."""
    return voters > 0 and healthy_voters >= quorum_size(voters)


def tolerable_failures(healthy_voters: int, voters: int) -> int:
    """How many more voting members can fail before the quorum is lost."""
    return max(healthy_voters - quorum_size(voters), 0) if voters else 0


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def cluster_security(cluster: dict | None) -> dict:
    """``{cluster_tls, cluster_auth}``: whether talking to the members of ``cluster`` (an
    EtcdCluster object, None when it does not exist) needs the operator's client certificate
    (``spec.tls``) and root's password (``spec.auth``, or authentication still enabled in etcd,
    ``status.auth.enabled``, the etcdcluster role's own test). A backup, or a restore's last
    step, of a plain cluster skips reading both: a module run each."""
    cluster = cluster or {}
    spec, status = cluster.get("spec") or {}, cluster.get("status") or {}
    return {
        "cluster_tls": bool(spec.get("tls")),
        "cluster_auth": spec.get("auth") is not None
        or bool((status.get("auth") or {}).get("enabled")),
    }


def data_lost(recorded_claim_uid: str, claim: dict | None) -> bool:
    """Whether the data a member ran on is lost: the claim it ran on (``recorded_claim_uid``, in
    its EtcdPeer's status) is gone, replaced by another claim, or being deleted. ``claim`` is a
    claim as the operator summarizes it (``exists``, ``uid``, ``deleting``) or None. A member
    that never recorded a claim lost nothing."""
    if not recorded_claim_uid:
        return False
    claim = claim or {}
    return (
        not claim.get("exists")
        or claim.get("uid") != recorded_claim_uid
        or bool(claim.get("deleting"))
    )


def claim_facts(pvc: dict | None) -> dict:
    """``{exists, uid, deleting}`` of a PersistentVolumeClaim object (or None), for data_lost."""
    if pvc is None:
        return {"exists": False, "uid": "", "deleting": False}
    meta = pvc.get("metadata") or {}
    return {
        "exists": True,
        "uid": meta.get("uid", ""),
        "deleting": bool(meta.get("deletionTimestamp")),
    }


# --------------------------------------------------------------------------------------------
# Timestamps (RFC 3339 in UTC, seconds, as Kubernetes writes them)
# --------------------------------------------------------------------------------------------

TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def format_timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(TIMESTAMP_FORMAT)


def now_timestamp() -> str:
    return format_timestamp(datetime.now(UTC))


def parse_timestamp(text: str) -> datetime:
    """A Kubernetes timestamp (``2026-01-01T00:00:00Z``; fractions and offsets accepted)."""
    value = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def seconds_between(then: str | None, now: str | datetime | None = None) -> float | None:
    """Seconds from ``then`` to ``now`` (default: the current time); None without ``then``."""
    if not then:
        return None
    if now is None:
        now = datetime.now(UTC)
    elif isinstance(now, str):
        now = parse_timestamp(now)
    return (now - parse_timestamp(then)).total_seconds()


# --------------------------------------------------------------------------------------------
# Members as etcd lists them
# --------------------------------------------------------------------------------------------


def member_peer_name(member: dict, cluster: str) -> str:
    """The name of the EtcdPeer behind an entry of etcd's member list: its etcd name, or for a
    learner that has not started yet (etcd knows no name for it) the first label of the host of
    its peer URL; "" when neither says."""
    if member.get("name"):
        return member["name"]
    for url in member.get("peer_urls", []):
        host = url.split("://", 1)[-1].split(":", 1)[0]
        first_label = host.split(".", 1)[0]
        if first_label.startswith(f"{cluster}-"):
            return first_label
    return ""
