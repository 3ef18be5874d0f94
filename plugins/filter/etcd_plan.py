"""Decide the single next step that brings an EtcdCluster closer to its spec.

The etcdcluster role observes (EtcdPeers, PVCs, etcd's member list and health), asks
`etcd_cluster_plan` for one step, performs it, and requeues. One step per reconcile keeps every
membership change quorum-safe and makes the operator restart-safe: whatever it was doing when it
was killed, the next reconcile re-observes and picks the step again.

Steps, in priority order:
- bootstrap: no member answers and the peers (if any) all belong to the initial bootstrap: create
  the missing initial peers with the same static initial cluster.
- wait: nothing can be done safely now (no quorum, unhealthy members, a learner still starting).
- create_peer: etcd has a member (usually a learner we added) with no EtcdPeer: the operator was
  interrupted between adding the member and creating its peer.
- replace_member: a peer whose data is gone (its PVC was lost) or whose member was removed from
  etcd behind our back: remove the member (if still listed) and the peer, then it is re-added.
- promote: a started learner: promote it once it has caught up.
- add_member: fewer voting members than spec.replicas: add the lowest free ordinal as a learner.
- remove_member: more members than spec.replicas: remove the highest ordinal (leader moved first).
- none: the cluster matches its spec.
"""

from __future__ import annotations

import re

ORDINAL = re.compile(r"-(\d+)$")


def peer_name(cluster: str, ordinal: int) -> str:
    return f"{cluster}-{ordinal}"


def ordinal_of(name: str) -> int:
    match = ORDINAL.search(name or "")
    return int(match.group(1)) if match else -1


def _member_peer_name(member: dict, cluster: str) -> str:
    """A member's peer name: its etcd name, or for an unstarted learner the host of its peer URL."""
    if member.get("name"):
        return member["name"]
    for url in member.get("peer_urls", []):
        host = url.split("://", 1)[-1].split(":", 1)[0]
        first_label = host.split(".", 1)[0]
        if first_label.startswith(f"{cluster}-"):
            return first_label
    return ""


def _step(action: str, reason: str, message: str, **extra) -> dict:
    return {"action": action, "reason": reason, "message": message, **extra}


def etcd_cluster_plan(observed: dict) -> dict:
    """observed: {cluster, replicas, peers: [EtcdPeer], info: etcd_cluster_info's result}."""
    cluster = observed["cluster"]
    replicas = int(observed["replicas"])
    peers = {p["metadata"]["name"]: p for p in observed.get("peers", [])}
    live_peers = {n: p for n, p in peers.items() if not p["metadata"].get("deletionTimestamp")}
    info = observed.get("info") or {}

    if not info.get("reachable"):
        bootstrapping = all(
            p.get("spec", {}).get("bootstrap", {}).get("initialClusterState", "New") == "New"
            for p in live_peers.values()
        )
        if bootstrapping:
            initial = _initial_cluster(live_peers, cluster, replicas)
            missing = [n for n in initial if n not in peers]
            if missing:
                return _step(
                    "bootstrap",
                    "Bootstrapping",
                    f"creating initial members {', '.join(missing)}",
                    initial_cluster=initial,
                    peers_to_create=missing,
                )
            return _step(
                "wait", "Bootstrapping", "waiting for the initial members to form a quorum"
            )
        return _step(
            "wait",
            "ClusterUnreachable",
            "no etcd member answers; waiting for the members to come back (no changes are made "
            "without a quorum)",
        )

    members = info.get("members", [])
    by_peer = {_member_peer_name(m, cluster): m for m in members}
    voters = [m for m in members if not m.get("is_learner")]
    learners = [m for m in members if m.get("is_learner")]
    quorum = info.get("quorum", {})

    # A member etcd knows but we have no peer for: finish what an interrupted scale-up started.
    for name, member in sorted(by_peer.items(), key=lambda item: ordinal_of(item[0])):
        if name and name not in peers:
            return _step(
                "create_peer",
                "MemberWithoutPeer",
                f"member {name} is in etcd but has no EtcdPeer; creating it to join the cluster",
                peer=name,
                member=member,
            )

    if not info.get("healthy"):
        return _step(
            "wait",
            "QuorumLost",
            f"etcd has no healthy quorum ({quorum.get('healthy_voting', 0)} of "
            f"{quorum.get('voting', len(voters))} voting members healthy); waiting",
        )

    for name, peer in sorted(live_peers.items(), key=lambda item: ordinal_of(item[0])):
        lost = _data_lost(peer)
        removed = name not in by_peer and _was_member(peer)
        if lost or removed:
            member = by_peer.get(name)
            if member and not _removal_keeps_quorum(member, voters):
                return _step(
                    "wait",
                    "ReplacementUnsafe",
                    f"member {name} lost its data but removing it now would lose quorum; waiting",
                )
            why = "its data volume is gone" if lost else "it was removed from etcd"
            return _step(
                "replace_member",
                "ReplacingMember",
                f"replacing member {name}: {why}; it will be re-added as a new learner",
                peer=name,
                member=member,
            )

    unhealthy_voters = [m for m in voters if not m.get("healthy")]
    if unhealthy_voters:
        names = ", ".join(sorted(_member_peer_name(m, cluster) for m in unhealthy_voters))
        return _step(
            "wait",
            "MembersUnhealthy",
            f"waiting for unhealthy members to recover before changing membership: {names}",
        )

    for learner in learners:
        name = _member_peer_name(learner, cluster)
        if not learner.get("name") or not learner.get("healthy"):
            return _step("wait", "LearnerStarting", f"waiting for learner {name} to start")
        return _step(
            "promote",
            "PromotingLearner",
            f"promoting learner {name} to a voting member",
            peer=name,
            member=learner,
        )

    if len(voters) < replicas:
        taken = {ordinal_of(n) for n in list(peers) + list(by_peer)}
        ordinal = next(i for i in range(len(taken) + 1) if i not in taken)
        name = peer_name(cluster, ordinal)
        return _step(
            "add_member",
            "ScalingUp",
            f"scaling up from {len(voters)} to {replicas}: adding {name} as a learner",
            peer=name,
        )

    if len(members) > replicas:
        name = max(by_peer, key=ordinal_of)
        return _step(
            "remove_member",
            "ScalingDown",
            f"scaling down from {len(members)} to {replicas}: removing {name}",
            peer=name,
            member=by_peer[name],
        )

    # Peers that never became members (their learner was removed before it started).
    stale = sorted(n for n in live_peers if n not in by_peer)
    if stale:
        return _step(
            "replace_member",
            "ReplacingMember",
            f"peer {stale[0]} has no etcd member; recreating it",
            peer=stale[0],
            member=None,
        )

    return _step("none", "ClusterReady", f"{len(voters)} healthy voting members")


def _removal_keeps_quorum(member: dict, voters: list[dict]) -> bool:
    """Would the voters left after removing `member` still have a healthy majority?"""
    if member.get("is_learner"):
        return True
    remaining = [v for v in voters if v.get("id") != member.get("id")]
    healthy = sum(1 for v in remaining if v.get("healthy"))
    return bool(remaining) and healthy >= len(remaining) // 2 + 1


def _initial_cluster(peers: dict, cluster: str, replicas: int) -> list[str]:
    for peer in peers.values():
        initial = peer.get("spec", {}).get("bootstrap", {}).get("static", {}).get("initialCluster")
        if initial:
            return [entry["name"] for entry in initial]
    return [peer_name(cluster, i) for i in range(replicas)]


def _data_lost(peer: dict) -> bool:
    return any(
        c.get("type") == "DataLost" and c.get("status") == "True"
        for c in peer.get("status", {}).get("conditions", [])
    )


def _was_member(peer: dict) -> bool:
    """Only a peer that has been a member can have been removed; a new one may still be joining."""
    return bool(peer.get("status", {}).get("memberID"))


WAITING_PROBLEMS = {"QuorumLost", "ClusterUnreachable", "MembersUnhealthy", "ReplacementUnsafe"}


def etcd_cluster_status(observed: dict, step: dict) -> dict:
    """The EtcdCluster status (members, counts, conditions) for what was observed and decided."""
    cluster = observed["cluster"]
    info = observed.get("info") or {}
    peers = [p for p in observed.get("peers", []) if not p["metadata"].get("deletionTimestamp")]
    members = info.get("members", []) if info.get("reachable") else []
    peer_names = {p["metadata"]["name"] for p in peers}
    member_names = {_member_peer_name(m, cluster) for m in members}
    leader = next((m for m in members if m.get("is_leader")), None)
    healthy_voters = [m for m in members if m.get("healthy") and not m.get("is_learner")]
    available = bool(
        info.get("healthy")
        and members
        and all(m.get("healthy") and not m.get("is_learner") for m in members)
        and peer_names <= member_names
    )
    progressing = step["action"] != "none"
    degraded = step["reason"] in WAITING_PROBLEMS
    if available:
        available_reason, available_message = (
            "AllMembersHealthy",
            (
                f"{len(healthy_voters)} of {len(members)} members healthy, leader "
                f"{leader.get('name') if leader else 'unknown'}"
            ),
        )
    else:
        available_reason, available_message = step["reason"], step["message"]
    conditions = [
        {
            "type": "Available",
            "status": str(available),
            "reason": available_reason,
            "message": available_message,
        },
        {
            "type": "Progressing",
            "status": str(progressing),
            "reason": step["reason"],
            "message": step["message"],
        },
        {
            "type": "Degraded",
            "status": str(degraded),
            "reason": step["reason"] if degraded else "NoProblems",
            "message": step["message"] if degraded else "no problem observed",
        },
    ]
    phase = "Degraded" if degraded else "Available" if available else "Progressing"
    status = {
        "replicas": len(peers),
        "readyReplicas": len(healthy_voters),
        "selector": f"etcd.quorumkeeper.dev/cluster={cluster}",
        "phase": phase,
        "members": [
            {
                "name": _member_peer_name(m, cluster),
                "id": m.get("id"),
                "isLearner": bool(m.get("is_learner")),
                "isLeader": bool(m.get("is_leader")),
                "version": m.get("version") or "",
                "healthy": bool(m.get("healthy")),
            }
            for m in sorted(members, key=lambda m: ordinal_of(_member_peer_name(m, cluster)))
        ],
        "leader": leader.get("name", "") if leader else "",
    }
    if info.get("cluster_version"):
        status["clusterVersion"] = info["cluster_version"]
    return {"status": status, "conditions": conditions}


def etcd_static_members(names: list[str], cluster: str, namespace: str, domain: str) -> list:
    """[{name, host}] entries of a static initial cluster, for EtcdPeer.spec.bootstrap."""
    return [{"name": n, "host": f"{n}.{cluster}.{namespace}.svc.{domain}"} for n in names]


class FilterModule:
    def filters(self):
        return {
            "etcd_cluster_plan": etcd_cluster_plan,
            "etcd_cluster_status": etcd_cluster_status,
            "etcd_static_members": etcd_static_members,
        }
