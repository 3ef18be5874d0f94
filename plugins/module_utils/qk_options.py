# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""etcd's settings for an EtcdCluster's members (``spec.options``): what each member runs with,
defaults included, and the etcd flags that say it.

Members are given the *effective* options in their EtcdPeer spec (``effective_options``), the
defaults resolved: a member keeps what it was started with whatever the operator's defaults
become, and its EtcdPeer says what it runs. The defaults keep a member's database within its
volume: history is compacted (etcd keeps it forever otherwise), and the backend quota leaves the
volume room for the write-ahead log and a defragmentation's copy (etcd's own default, 2 GiB,
overflows a 1 GiB volume with ENOSPC before the quota ever trips).
"""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal, InvalidOperation

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_tls import (
    peer_tls_spec,
    resolve,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import API_GROUP

MIB = 1 << 20
GIB = 1 << 30
# etcd's documented largest suggested quota; more needs spec.options.allowLargeQuota.
MAX_SUGGESTED_QUOTA = 8 * GIB
# etcd's own quota, for a member started without --quota-backend-bytes.
ETCD_DEFAULT_QUOTA = 2 * GIB
# What the write-ahead log may take besides the database: etcd preallocates 64 MB segments and
# keeps 5 (--max-wals), plus a snapshot file.
WAL_ROOM = 384 * MIB
DEFAULT_AUTO_COMPACTION = {"mode": "periodic", "retention": "5m"}
# On a member's pod: the hash of the configuration it was started with (member_config), so that
# what a pod runs can be told from what its EtcdPeer asks for without reading its command line.
CONFIG_HASH_ANNOTATION = f"{API_GROUP}/config-hash"

_BINARY_SUFFIX = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50}
_DECIMAL_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_QUANTITY = re.compile(r"^\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([a-zA-Z]*)$")


def quantity_bytes(value) -> int:
    """A Kubernetes quantity of bytes (``1Gi``, ``512M``, ``1073741824``) as an int."""
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}")
    if isinstance(value, int):
        return value
    match = _QUANTITY.match(str(value).strip())
    suffix = match.group(2) if match else None
    scale = _BINARY_SUFFIX.get(suffix) or _DECIMAL_SUFFIX.get(suffix)
    if scale is None:
        raise ValueError(f"invalid quantity {value!r} (expected e.g. 1Gi, 512Mi, 2G, 1073741824)")
    try:
        return int(Decimal(match.group(1)) * scale)
    except InvalidOperation as exc:
        raise ValueError(f"invalid quantity {value!r}") from exc


def volume_bytes(cluster_spec: dict) -> int | None:
    """The size of each member's volume, or None without spec.storage (ephemeral members)."""
    template = (cluster_spec.get("storage") or {}).get("volumeClaimTemplate") or {}
    size = ((template.get("resources") or {}).get("requests") or {}).get("storage")
    return quantity_bytes(size) if size is not None else None


def bytes_quantity(value: int) -> str:
    """``value`` bytes as the shortest exact Kubernetes quantity (``256Mi``, ``2Gi``)."""
    for suffix, scale in sorted(_BINARY_SUFFIX.items(), key=lambda item: -item[1]):
        if value and value % scale == 0:
            return f"{value // scale}{suffix}"
    return str(value)


def grown_spec(cluster_spec: dict, status: dict | None) -> dict:
    """The spec the members are kept to: ``cluster_spec`` with what the operator did for space
    under spec.maintenance.spaceRecovery (status.maintenance.spaceRecovery, written by
    qk_plan_space.make_room). The volume size it grew the volumes to, when larger than
    spec.storage asks: everything read from the spec's size follows it (the default quota, the
    claims of new members, the size the volumes are grown to); volumes never shrink, so it
    holds for good. The quota it raised spec.options.quotaBackendBytes to, when larger than
    spec.options asks and while maxQuotaBackendBytes allows it (lowering or removing the limit
    is how a person takes it back). ``cluster_spec`` itself when nothing was done (the common
    case: no copy)."""
    recovered = ((status or {}).get("maintenance") or {}).get("spaceRecovery") or {}
    if not recovered:
        return cluster_spec
    spec = cluster_spec
    grown = recovered.get("volumeSize")
    asked = volume_bytes(spec)
    if grown and asked is not None and quantity_bytes(grown) > asked:
        storage = spec["storage"]
        template = storage["volumeClaimTemplate"]
        resources = template.get("resources") or {}
        requests = {**(resources.get("requests") or {}), "storage": grown}
        template = {**template, "resources": {**resources, "requests": requests}}
        spec = {**spec, "storage": {**storage, "volumeClaimTemplate": template}}
    raised = recovered.get("quotaBackendBytes")
    options = spec.get("options") or {}
    limit = ((spec.get("maintenance") or {}).get("spaceRecovery") or {}).get("maxQuotaBackendBytes")
    if (
        raised
        and limit not in (None, "")
        and "quotaBackendBytes" in options
        and quantity_bytes(options["quotaBackendBytes"]) < int(raised) <= quantity_bytes(limit)
    ):
        spec = {**spec, "options": {**options, "quotaBackendBytes": int(raised)}}
    return spec


def default_quota_bytes(volume: int | None) -> int | None:
    """The backend quota for a volume of ``volume`` bytes: three quarters of it less the room
    of the write-ahead log, at least half of it, at most 8 GiB. None (etcd's default) without a
    volume: an ephemeral member's disk is the node's."""
    if volume is None:
        return None
    quota = max(volume // 2, volume * 3 // 4 - WAL_ROOM)
    return min(quota, MAX_SUGGESTED_QUOTA) // MIB * MIB


def effective_options(cluster_spec: dict) -> dict:
    """spec.options with the defaults resolved, as a member is started with them."""
    options = dict(cluster_spec.get("options") or {})
    options.pop("allowLargeQuota", None)
    if "quotaBackendBytes" in options:
        options["quotaBackendBytes"] = quantity_bytes(options["quotaBackendBytes"])
    else:
        quota = default_quota_bytes(volume_bytes(cluster_spec))
        if quota is not None:
            options["quotaBackendBytes"] = quota
    options["autoCompaction"] = {**DEFAULT_AUTO_COMPACTION, **(options.get("autoCompaction") or {})}
    if "maxRequestBytes" in options:
        options["maxRequestBytes"] = quantity_bytes(options["maxRequestBytes"])
    return options


# spec.options field -> etcd flag, for the fields that map one to one.
_FLAGS = (
    ("quotaBackendBytes", "--quota-backend-bytes"),
    ("snapshotCount", "--snapshot-count"),
    ("heartbeatIntervalMs", "--heartbeat-interval"),
    ("electionTimeoutMs", "--election-timeout"),
    ("maxRequestBytes", "--max-request-bytes"),
    ("metrics", "--metrics"),
    ("maxTxnOps", "--max-txn-ops"),
    ("logLevel", "--log-level"),
)


def option_flags(options: dict | None) -> list[str]:
    """etcd's flags for a member's effective options (its EtcdPeer's spec.options); none for a
    member created before options existed, which keeps running with etcd's defaults."""
    if not options:
        return []
    flags = [f"{flag}={options[field]}" for field, flag in _FLAGS if field in options]
    compaction = options.get("autoCompaction")
    if compaction:
        flags += [
            f"--auto-compaction-mode={compaction['mode']}",
            f"--auto-compaction-retention={compaction['retention']}",
        ]
    return flags


def peer_config(peer_spec: dict) -> dict:
    """What of a member's EtcdPeer spec a restart applies: the etcd options it was started
    with, its pod template and its TLS (the certificate Secrets it mounts, and whether it also
    serves plain HTTP while client TLS is turned on or off). ``{"options": {}}`` for a member
    created before spec.options existed: it runs etcd's defaults until it is restarted with its
    cluster's (qk_plan_config). ``tls`` only when it has some, so that a plain member's hash is
    what it was before TLS could change."""
    config = {
        "options": peer_spec.get("options") or {},
        "podTemplate": peer_spec.get("podTemplate") or {},
    }
    if peer_spec.get("tls"):
        config["tls"] = peer_spec["tls"]
    return config


def cluster_config(cluster_spec: dict, cluster: str, trust: dict | None = None) -> dict:
    """The peer_config every member of EtcdCluster ``cluster`` whose spec is ``cluster_spec``
    should end up running (qk_plan_config.staged_config says what it runs on the way);
    ``trust``: the CA bundles' fingerprints while a CA is rotated (status.tls.trust)."""
    return peer_config(
        {
            "options": effective_options(cluster_spec),
            "podTemplate": cluster_spec.get("podTemplate"),
            "tls": peer_tls_spec(resolve(cluster, cluster_spec.get("tls")), trust),
        }
    )


def config_hash(config: dict) -> str:
    """A short, stable fingerprint of a peer_config (the pod annotation CONFIG_HASH_ANNOTATION)."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def quota_used_percent(size: int, quota) -> int:
    """How full of its backend quota (bytes or a quantity; etcd's own without one) a database of
    ``size`` bytes is, in whole percent, at most 100."""
    return min(100, size * 100 // quantity_bytes(quota or ETCD_DEFAULT_QUOTA))


def volume_used_percent(size: int, capacity) -> int | None:
    """How full of its volume (``capacity`` bytes) a member's disk gets with a database of
    ``size`` bytes and the room etcd's write-ahead log takes beside it (``wal_room``), in whole
    percent, at most 100: etcd stops with ENOSPC at 100, whatever its quota. None without a
    known capacity (a member without a volume, a claim not bound yet)."""
    if not capacity:
        return None
    return min(100, (size + wal_room(int(capacity))) * 100 // int(capacity))


def wal_room(capacity: int) -> int:
    """The room counted for the write-ahead log beside the database on a volume of
    ``capacity`` bytes: WAL_ROOM, or half of a volume too small for it (where the default
    quota is the other half), so that the operator's own defaults never read as a full disk."""
    return min(WAL_ROOM, capacity // 2)


def fragmented_percent(size: int, in_use: int) -> int:
    """The part of a database of ``size`` bytes that is free pages (``in_use`` is not), in whole
    percent."""
    return max(0, size - in_use) * 100 // size if size else 0


def human_bytes(size: int) -> str:
    """``size`` bytes as kubectl users read them (``512Mi``, ``1.5Gi``, ``20Ki``)."""
    for suffix, scale in (("Gi", GIB), ("Mi", MIB), ("Ki", 1 << 10)):
        if size >= scale:
            value = size / scale
            return (
                f"{value:.0f}{suffix}" if value >= 10 else f"{value:.1f}{suffix}".replace(".0", "")
            )
    return str(size)
