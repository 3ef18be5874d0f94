# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Pure decisions about an etcd cluster's members, unit tested without etcd.

Member IDs as etcdctl prints them, quorum arithmetic (``quorum_summary``), whether a removal
keeps quorum (``removal_check``), a new member's ``--initial-cluster``, finding a member by id,
name or peer URL, a client URL's gRPC target (``endpoint_target``), the leader the members
report, and the choices of the etcd_member module: which endpoints to send a member change
through (leader first), which member to hand the leadership to, and waiting for it to move
(``preferred_endpoints`` and ``wait_for_leader_change`` take an ``EtcdClient``, qk_etcd).
Members are the dicts ``EtcdClient.cluster_info`` returns.
"""

from __future__ import annotations

import time
import urllib.parse
from collections import Counter

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    DEFAULT_CLIENT_PORT,
    quorum_size,
    tolerable_failures,
)


def member_id_hex(member_id):
    """Format a member ID the way etcdctl prints it (lower-case hex, no padding)."""
    return format(int(member_id), "x")


def parse_member_id(value):
    """Parse a member ID given as hex string (as etcdctl prints it), ``0x`` hex, or int."""
    if isinstance(value, int):
        return value
    text = str(value).strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    if not text:
        raise ValueError("empty member id")
    return int(text, 16)


def quorum_summary(voting, healthy_voting):
    return {
        "voting": voting,
        "healthy_voting": healthy_voting,
        "required": quorum_size(voting) if voting else 0,
        "tolerable_failures": tolerable_failures(healthy_voting, voting),
    }


def removal_check(members, target_id):
    """Decide whether removing ``target_id`` keeps quorum.

    ``members`` are dicts with ``id`` (hex), ``name``, ``is_learner`` and ``healthy``.
    Returns ``(ok, message)``. Removing a learner is always quorum-safe. Removing a voter is
    allowed only if it is not the last voter and the remaining healthy voters still form a
    quorum of the remaining voters.
    """
    target = _find_by_id(members, target_id)
    if target is None:
        return True, "member not present"
    label = describe_member(target)
    if target.get("is_learner"):
        return True, f"{label} is a learner; removing it does not affect quorum"
    voters = [m for m in members if not m.get("is_learner")]
    if len(voters) <= 1:
        return False, (
            f"refusing to remove {label}: it is the last voting member of the cluster "
            "(removing it would destroy the cluster)"
        )
    remaining = len(voters) - 1
    healthy_left = sum(1 for m in voters if m["id"] != target["id"] and m.get("healthy"))
    required = quorum_size(remaining)
    if healthy_left < required:
        return False, (
            f"refusing to remove {label}: would leave {healthy_left} healthy voting members "
            f"of {remaining}, quorum needs {required}"
        )
    return True, (
        f"removing {label} leaves {healthy_left} healthy voting members of {remaining}, "
        f"quorum needs {required}"
    )


def initial_cluster(members, target_id, target_name):
    """The ``--initial-cluster`` value a new member must start with.

    Every member of the cluster (etcd checks the member count when joining an existing
    cluster), named as started; the target member gets ``target_name``. Same as what
    ``etcdctl member add`` prints.
    """
    parts = []
    for m in members:
        name = target_name if m["id"] == target_id else m.get("name", "")
        for url in m.get("peer_urls", []):
            parts.append(f"{name}={url}")
    return ",".join(parts)


def describe_member(member):
    name = member.get("name") or "(unstarted)"
    return f"member {name} (id {member['id']})"


def _find_by_id(members, member_id):
    for m in members:
        if m["id"] == member_id:
            return m
    return None


def find_member(members, name=None, peer_urls=None, member_id=None):
    """Find a member by id, else by non-empty name, else by any overlapping peer URL."""
    if member_id is not None:
        hexid = member_id_hex(parse_member_id(member_id))
        return _find_by_id(members, hexid)
    if name:
        for m in members:
            if m.get("name") == name:
                return m
    wanted = {_norm_url(u) for u in (peer_urls or [])}
    if wanted:
        for m in members:
            if wanted & {_norm_url(u) for u in m.get("peer_urls", [])}:
                return m
    return None


def _norm_url(url):
    return url.strip().rstrip("/").lower()


def endpoint_target(url):
    """Split a client URL into the gRPC target ``host:port`` and whether TLS is used."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    parsed = urllib.parse.urlsplit(text)
    if parsed.scheme not in ("http", "https"):
        raise ValueError(f"unsupported scheme in endpoint {url!r} (use http:// or https://)")
    if not parsed.hostname:
        raise ValueError(f"endpoint {url!r} has no host")
    port = parsed.port or DEFAULT_CLIENT_PORT
    host = parsed.hostname
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{host}:{port}", parsed.scheme == "https"


def leader_from_statuses(statuses):
    """Most commonly reported non-zero leader ID (int) among status responses, or 0."""
    counts = Counter(s["leader_int"] for s in statuses if s and s.get("leader_int"))
    if not counts:
        return 0
    return counts.most_common(1)[0][0]


# --------------------------------------------------------------------------------------------
# Operations used by the etcd_member module
# --------------------------------------------------------------------------------------------


def public_member(m):
    return {
        "id": m["id"],
        "name": m.get("name", ""),
        "peer_urls": list(m.get("peer_urls", [])),
        "is_learner": bool(m.get("is_learner")),
    }


def preferred_endpoints(client, members, exclude_id=None):
    """Client URLs of healthy voters, the leader first, then the configured endpoints.

    The leader first: etcd refuses a member change (``unhealthy cluster``) when the member that
    handles it has not been connected to a quorum for five seconds, and a member that just
    joined has not; the leader has. URLs of ``exclude_id`` are left out entirely (never send a
    remove through the member being removed).
    """
    excluded = set()
    ordered = []
    for m in members:
        if m["id"] == exclude_id:
            excluded.update(m.get("client_urls", []))
    voters = [
        m for m in members if m["id"] != exclude_id and m.get("healthy") and not m.get("is_learner")
    ]
    for m in sorted(voters, key=lambda m: not m.get("is_leader")):
        ordered.extend(m.get("client_urls", []))
    ordered.extend(client.endpoints)
    out = []
    for ep in ordered:
        if ep not in excluded and ep not in out:
            out.append(ep)
    return out


def wait_for_leader_change(client, old_leader_id, deadline):
    """Poll until a leader other than ``old_leader_id`` is reported. Returns the new info."""
    while True:
        info = client.cluster_info()
        if info["leader"] and info["leader"]["id"] != old_leader_id:
            return info
        if time.monotonic() >= deadline:
            return info
        time.sleep(0.2)


def pick_new_leader(members, leader_id):
    candidates = [
        m for m in members if m["id"] != leader_id and m.get("healthy") and not m.get("is_learner")
    ]
    candidates.sort(key=lambda m: m.get("raft_index") or 0, reverse=True)
    return candidates[0] if candidates else None
