# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Decide the next step for an EtcdCluster, and the status that tells the truth about it.

The etcdcluster role observes (etcd_cluster_observe: EtcdPeers, their pods and claims, the
Services, etcd's member list and health), asks ``etcd_cluster_plan`` for one step, performs it,
and writes what ``etcd_cluster_report`` says. One step per reconcile keeps every membership
change quorum-safe and makes the operator restart-safe: whatever it was doing when it was
killed, the next reconcile re-observes and picks the step again.

Steps, in priority order:
- repair_members: peers whose ReplicaSet is gone (deleted by hand, or an interrupted reconcile):
  recreate it; the member's data is untouched.
- update_peers: a cluster that never formed because its pods cannot pull their image, whose
  version or repository was corrected since: point its peers at the corrected image.
- bootstrap: no member answers and the peers (if any) all belong to the initial bootstrap: create
  the missing initial peers with the same static initial cluster.
- wait: nothing can be done safely now (no quorum, unhealthy members, a learner still starting).
  Without a quorum the message says whether waiting helps (members down, data intact) or not (a
  majority lost its data: which member still holds data, and the backup to restore from).
- create_peer: etcd has a member (a learner we added) with no EtcdPeer: the operator was
  interrupted between adding the member and creating its peer.
- replace_member: a peer whose data is gone (its claim was lost) or whose member was removed
  from etcd behind our back: remove the member (if still listed) and the peer; it is re-added.
- promote: a started learner: promote it once it has caught up.
- add_member: fewer voting members than spec.replicas: add the lowest free ordinal as a learner,
  start it and promote it when it has caught up.
- remove_member: more members than spec.replicas: remove the highest ordinal (leader moved first).
- none: the cluster matches its spec.

A step whose result shows only later (pods starting) says ``observe_after: False``: observing
right after it would only cost time. Every step says when the next reconcile should come
(``requeue``): ``next`` (a following step
can be taken at once), ``event`` (a watched change will come: a pod becoming ready; the period
is only a fallback), ``degraded`` (waiting for something outside the operator) or ``steady``.
"""

from __future__ import annotations

import re

ORDINAL = re.compile(r"-(\d+)$")
VERSION = re.compile(r"^\d+\.\d+\.\d+$")
# etcd reports this cluster version until the members have agreed on the real one.
PLACEHOLDER_CLUSTER_VERSION = "3.0.0"
PROBLEM_REASONS = {
    "QuorumLost",
    "ClusterUnreachable",
    "MembersUnhealthy",
    "ReplacementUnsafe",
    "StepFailed",
}


def peer_name(cluster: str, ordinal: int) -> str:
    return f"{cluster}-{ordinal}"


def ordinal_of(name: str) -> int:
    match = ORDINAL.search(name or "")
    return int(match.group(1)) if match else -1


def member_peer_name(member: dict, cluster: str) -> str:
    """A member's peer name: its etcd name, or for an unstarted learner the host of its peer URL."""
    if member.get("name"):
        return member["name"]
    for url in member.get("peer_urls", []):
        host = url.split("://", 1)[-1].split(":", 1)[0]
        first_label = host.split(".", 1)[0]
        if first_label.startswith(f"{cluster}-"):
            return first_label
    return ""


def _step(action: str, reason: str, message: str, requeue: str = "next", **extra) -> dict:
    return {"action": action, "reason": reason, "message": message, "requeue": requeue, **extra}


def data_lost(peer: dict, pvc: dict | None) -> bool:
    """The claim this peer ran on is gone, replaced or being deleted: its data is lost."""
    if not peer.get("pvc_uid"):
        return False
    pvc = pvc or {}
    return not pvc.get("exists") or pvc.get("uid") != peer["pvc_uid"] or bool(pvc.get("deleting"))


def etcd_cluster_plan(observed: dict) -> dict:
    """observed: {cluster, replicas, peers, pvcs, pods, etcd} (etcd_cluster_observe's result)."""
    cluster = observed["cluster"]
    replicas = int(observed["replicas"])
    peers = {p["name"]: p for p in observed.get("peers", [])}
    live_peers = {n: p for n, p in peers.items() if not p.get("deleting")}
    pvcs = observed.get("pvcs") or {}
    info = observed.get("etcd") or {}

    # Whatever else is going on: a member whose ReplicaSet is gone gets it back (its data is
    # untouched), first of all because without its pod it may be what keeps quorum away.
    replicasets = observed.get("replicasets") or {}
    unrun = [
        name
        for name, peer in sorted(live_peers.items(), key=lambda item: ordinal_of(item[0]))
        if not (replicasets.get(name) or {"exists": True}).get("exists")
        and not data_lost(peer, pvcs.get(name))
    ]
    if unrun:
        return _step(
            "repair_members",
            "RepairingMembers",
            f"recreating the ReplicaSets of members {', '.join(unrun)}",
            "event",
            members=[{"name": name} for name in unrun],
            observe_after=False,
        )

    if not info.get("reachable"):
        if all(p.get("state", "New") == "New" for p in live_peers.values()):
            mistaken = _never_started_with_another_image(observed, live_peers)
            if mistaken:
                image = f"{observed.get('repository')}:v{observed.get('version')}"
                return _step(
                    "update_peers",
                    "UpdatingMembers",
                    f"members {', '.join(mistaken)} could not pull their image and never "
                    f"started: moving them to {image}",
                    "event",
                    peers_to_update=mistaken,
                    initial_cluster=_initial_cluster(live_peers, cluster, replicas),
                    observe_after=False,
                )
            initial = _initial_cluster(live_peers, cluster, replicas)
            missing = [n for n in initial if n not in peers]
            if missing:
                return _step(
                    "bootstrap",
                    "Bootstrapping",
                    f"creating initial members {', '.join(missing)}",
                    "event",
                    initial_cluster=initial,
                    peers_to_create=missing,
                    observe_after=False,
                )
            return _step(
                "wait", "Bootstrapping", "waiting for the initial members to form a quorum", "event"
            )
        return _step(
            "wait",
            "ClusterUnreachable",
            "no etcd member answers; waiting for the members to come back (no changes are made "
            "without a quorum)",
            "degraded",
        )

    members = info.get("members", [])
    by_peer = {member_peer_name(m, cluster): m for m in members}
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
        return _quorum_lost(observed, cluster, voters, live_peers, pvcs, quorum)

    for name, peer in sorted(live_peers.items(), key=lambda item: ordinal_of(item[0])):
        lost = data_lost(peer, pvcs.get(name))
        removed = name not in by_peer and bool(peer.get("member_id"))
        if lost or removed:
            member = by_peer.get(name)
            if member and not _removal_keeps_quorum(member, voters):
                return _step(
                    "wait",
                    "ReplacementUnsafe",
                    f"member {name} lost its data but removing it now would lose quorum; waiting",
                    "degraded",
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
        names = ", ".join(sorted(member_peer_name(m, cluster) for m in unhealthy_voters))
        return _step(
            "wait",
            "MembersUnhealthy",
            f"waiting for unhealthy members to recover before changing membership: {names}",
            "degraded",
        )

    for learner in learners:
        name = member_peer_name(learner, cluster)
        if not learner.get("name") or not learner.get("healthy"):
            return _step("wait", "LearnerStarting", f"waiting for learner {name} to start", "event")
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
            voters_after=len(voters) + 1,
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

    return _step("none", "ClusterReady", f"{len(voters)} healthy voting members", "steady")


def _quorum_lost(observed, cluster, voters, peers, pvcs, quorum) -> dict:
    """The wait without a quorum, saying what it waits for. Members that are merely down keep
    their data, and quorum returns when enough of them come back. When too many voting members
    lost their data (data_lost) for the rest ever to form a quorum, waiting is pointless: say
    so, which member still holds data, and what a person should do (automatic disaster
    recovery is opt-in; ``backups`` is etcd_cluster_observe's summary of this cluster's
    EtcdBackups, looked up only without a quorum)."""
    voting = quorum.get("voting", len(voters))
    healthy_voting = quorum.get("healthy_voting", sum(1 for v in voters if v.get("healthy")))
    required = quorum.get("required", voting // 2 + 1)
    head = f"etcd has no healthy quorum ({healthy_voting} of {voting} voting members healthy)"
    lost, down, survivors = [], [], []
    for member in sorted(voters, key=lambda m: ordinal_of(member_peer_name(m, cluster))):
        name = member_peer_name(member, cluster)
        if name in peers and data_lost(peers[name], pvcs.get(name)):
            lost.append(name)
            continue
        survivors.append(
            {
                "name": name,
                "raft_index": member.get("raft_index") if member.get("healthy") else None,
                "client_urls": list(member.get("client_urls") or []),
            }
        )
        if not member.get("healthy"):
            down.append(name)
    if len(survivors) >= required:
        need = required - (len(survivors) - len(down))
        if need <= 0:
            message = f"{head}: the members answer but have no leader; waiting for an election"
        else:
            if need < len(down):
                which = "one of them does" if need == 1 else f"{need} of them do"
            else:
                which = "it does" if need == 1 else "they do"
            message = (
                f"{head}; waiting for {_members(down)} to come back ({_their(down)} data is "
                f"intact); quorum returns when {which}"
            )
        if lost:
            message += f"; {_members(lost)} lost {_their(lost)} data and will be replaced then"
        return _step(
            "wait", "QuorumLost", message, "degraded", quorum_lost={"data_lost": lost, "down": down}
        )

    backup = _best_backup(observed.get("backups"))
    answering = [s for s in survivors if s["raft_index"] is not None]
    newest = max(answering or survivors, key=lambda s: s["raft_index"] or 0, default=None)
    if survivors:
        held = ", ".join(
            f"{s['name']} (raft index {s['raft_index']})"
            if s["raft_index"] is not None
            else f"{s['name']} (not answering)"
            for s in survivors
        )
        still = f"only {held} still {'holds' if len(survivors) == 1 else 'hold'} data"
    else:
        still = "no member still holds data"
    message = (
        f"{head}, and waiting cannot bring it back: {_members(lost)} lost {_their(lost)} data "
        f"(PVC gone); {still}. Automatic disaster recovery is off: "
    )
    if backup:
        verified = "verified" if backup.get("verified") == "True" else "not verified"
        message += (
            f"restore the newest usable backup, EtcdBackup {backup['name']} (revision "
            f"{backup.get('revision')}, completed {backup.get('completion_time')}, {verified}), "
            "into a new cluster with an EtcdRestore (spec.source.backupName)"
        )
    elif observed.get("backups") is None:
        message += (
            "restore this cluster's newest completed EtcdBackup (kubectl get etcdbk) into a new "
            "cluster with an EtcdRestore (spec.source.backupName)"
        )
    else:
        message += "no completed EtcdBackup of this cluster exists"
    if newest:
        endpoint = next(iter(newest["client_urls"]), "")
        message += (
            f"; newer writes can only be rescued from {newest['name']}: "
            if backup
            else f"; to rescue the data of {newest['name']}, "
        ) + (
            f"run etcdctl{f' --endpoints={endpoint}' if endpoint else ''} snapshot save FILE, "
            "upload FILE and restore it into a new cluster with an EtcdRestore "
            "(spec.source.objectURL), or restart etcd on its data with --force-new-cluster"
        )
    return _step(
        "wait",
        "QuorumLost",
        message,
        "degraded",
        quorum_lost={
            "data_lost": lost,
            "down": down,
            "survivors": survivors,
            "backup": backup["name"] if backup else "",
        },
    )


def _members(names: list[str]) -> str:
    return ("member " if len(names) == 1 else "members ") + ", ".join(names)


def _their(names: list[str]) -> str:
    return "its" if len(names) == 1 else "their"


def _best_backup(backups: list[dict] | None) -> dict | None:
    """The backup to restore: Completed and not found bad by its verification; a verified one
    before any unverified one, then the newest."""
    usable = [
        b
        for b in backups or []
        if b.get("phase") == "Completed" and not b.get("verification_failed")
    ]
    return max(
        usable,
        key=lambda b: (b.get("verified") == "True", b.get("completion_time") or "", b["name"]),
        default=None,
    )


def _never_started_with_another_image(observed: dict, peers: dict) -> list[str]:
    """Peers of a cluster that never formed whose pods cannot pull an image the EtcdCluster no
    longer asks for (its version or repository was corrected): nothing ever ran, so they can
    simply be pointed at the new image. Anything else about running members is an upgrade."""
    wanted = (observed.get("version"), observed.get("repository"))
    if not all(wanted):
        return []
    pods = observed.get("pods") or {}
    mistaken = []
    for name, peer in sorted(peers.items(), key=lambda item: ordinal_of(item[0])):
        if (peer.get("version"), peer.get("repository")) == wanted:
            continue
        problem = (pods.get(name) or {}).get("problem") or {}
        if peer.get("member_id") or problem.get("reason") != "ImagePullFailed":
            return []
        mistaken.append(name)
    return mistaken


def _removal_keeps_quorum(member: dict, voters: list[dict]) -> bool:
    """Would the voters left after removing `member` still have a healthy majority?"""
    if member.get("is_learner"):
        return True
    remaining = [v for v in voters if v.get("id") != member.get("id")]
    healthy = sum(1 for v in remaining if v.get("healthy"))
    return bool(remaining) and healthy >= len(remaining) // 2 + 1


def _initial_cluster(peers: dict, cluster: str, replicas: int) -> list[str]:
    for peer in peers.values():
        if peer.get("initial_cluster"):
            return list(peer["initial_cluster"])
    return [peer_name(cluster, i) for i in range(replicas)]


# --------------------------------------------------------------------------------------------
# Status
# --------------------------------------------------------------------------------------------


MISSING_POD_GRACE_SECONDS = 30


def _problems(observed: dict) -> list[dict]:
    """Pod and volume problems that need a person: [{peer, reason, message}] by ordinal."""
    found = []
    pods, pvcs = observed.get("pods") or {}, observed.get("pvcs") or {}
    replicasets = observed.get("replicasets") or {}
    for peer in observed.get("peers", []):
        name = peer["name"]
        if peer.get("deleting"):
            continue
        for source in (pods.get(name), pvcs.get(name)):
            if source and source.get("problem"):
                found.append({"peer": name, **source["problem"]})
        if pods.get(name) is None and peer.get("age", 0) >= MISSING_POD_GRACE_SECONDS:
            replicaset = replicasets.get(name) or {}
            why = (
                f"its ReplicaSet cannot create it: {replicaset['failure']}"
                if replicaset.get("failure")
                else "its ReplicaSet is missing; see the EtcdPeer's reconcile in the operator log"
                if not replicaset.get("exists")
                else "see kubectl describe replicaset " + name
            )
            found.append(
                {
                    "peer": name,
                    "reason": "MemberPodMissing",
                    "message": f"member {name} has no pod: {why}",
                }
            )
    return found


def _cluster_version(info: dict, previous: str) -> str:
    """etcd's cluster version, or the last known one while etcd has not decided it (it says
    ``not_decided``, or ``3.0.0`` for a moment after a cluster forms)."""
    version = info.get("cluster_version") or ""
    if not VERSION.match(version):
        return previous
    if version == PLACEHOLDER_CLUSTER_VERSION:
        started = [m.get("version") for m in info.get("members", []) if m.get("version")]
        if any(not v.startswith("3.0.") for v in started):
            return previous
    return version


def _member_status(member: dict, cluster: str, pods: dict) -> dict:
    name = member_peer_name(member, cluster)
    pod = pods.get(name) or {}
    return {
        "name": name,
        "id": member.get("id"),
        "isLearner": bool(member.get("is_learner")),
        "isLeader": bool(member.get("is_leader")),
        "version": member.get("version") or "",
        "healthy": bool(member.get("healthy")),
        "pod": pod.get("name", ""),
        "podReady": bool(pod.get("ready")),
        "restarts": int(pod.get("restarts") or 0),
    }


def _peer_status(peer: dict, member: dict | None, pod: dict | None, lost: bool) -> dict:
    pod = pod or {}
    ready = bool(pod.get("ready")) and not lost
    status = {"ready": ready, "podName": pod.get("name", "")}
    if member and member.get("id"):
        status["memberID"] = member["id"]
    if member and member.get("version"):
        status["serverVersion"] = member["version"]
    if ready:
        ready_reason, ready_message = "PodReady", f"pod {pod['name']} is ready"
    elif pod.get("problem"):
        ready_reason, ready_message = pod["problem"]["reason"], pod["problem"]["message"]
    else:
        ready_reason = "PodNotReady"
        ready_message = f"pod {pod['name']} is not ready" if pod else "the member has no pod"
    conditions = [
        {"type": "Ready", "status": str(ready), "reason": ready_reason, "message": ready_message},
        {
            "type": "DataLost",
            "status": str(lost),
            "reason": "PersistentVolumeClaimGone" if lost else "PersistentVolumeClaimBound",
            "message": (
                f"PVC {peer['name']} that held this member's data is gone; the cluster will "
                "replace the member"
                if lost
                else "the member runs on its PVC"
            ),
        },
    ]
    return {"name": peer["name"], "status": status, "conditions": conditions}


def _peer_status_changed(peer: dict, wanted: dict) -> bool:
    current = peer.get("status") or {}
    if any(current.get(k) != v for k, v in wanted["status"].items()):
        return True
    by_type = {c.get("type"): c for c in current.get("conditions") or []}
    return any(
        {k: by_type.get(c["type"], {}).get(k) for k in ("status", "reason", "message")}
        != {k: c[k] for k in ("status", "reason", "message")}
        for c in wanted["conditions"]
    )


def _restart_events(current_members: list[dict], members: list[dict]) -> list[dict]:
    before = {m.get("name"): m for m in current_members or []}
    events = []
    for member in members:
        old = before.get(member["name"])
        if not old or not member["pod"]:
            continue
        if old.get("pod") and old["pod"] != member["pod"]:
            events.append(
                {
                    "reason": "MemberPodReplaced",
                    "type": "Warning",
                    "message": f"member {member['name']} runs in a new pod {member['pod']} "
                    f"(was {old['pod']}); it keeps its data and identity",
                }
            )
        elif member["restarts"] > int(old.get("restarts") or 0):
            events.append(
                {
                    "reason": "MemberRestarted",
                    "type": "Warning",
                    "message": f"etcd in member {member['name']} (pod {member['pod']}) restarted "
                    f"({member['restarts']} restarts); it rejoins with its data",
                }
            )
    return events


def etcd_cluster_report(observed: dict, step: dict) -> dict:
    """What to write and say after a reconcile: the EtcdCluster's status and conditions, the
    EtcdPeers' statuses that changed, and the Events to record.

    observed also carries ``current`` (the EtcdCluster's status as the reconcile started) so
    that Events are emitted for changes only.
    """
    cluster = observed["cluster"]
    info = observed.get("etcd") or {}
    current = observed.get("current") or {}
    pods = observed.get("pods") or {}
    pvcs = observed.get("pvcs") or {}
    peers = [p for p in observed.get("peers", []) if not p.get("deleting")]
    members = info.get("members", []) if info.get("reachable") else []
    by_peer = {member_peer_name(m, cluster): m for m in members}
    member_statuses = sorted(
        (_member_status(m, cluster, pods) for m in members), key=lambda m: ordinal_of(m["name"])
    )
    leader = next((m for m in members if m.get("is_leader")), None)
    healthy_voters = [
        m for m in member_statuses if m["healthy"] and m["podReady"] and not m["isLearner"]
    ]
    peer_names = {p["name"] for p in peers}
    problems = _problems(observed)
    available = bool(
        info.get("healthy")
        and members
        and all(m["healthy"] and m["podReady"] and not m["isLearner"] for m in member_statuses)
        and peer_names <= set(by_peer)
    )
    progressing = step["action"] != "none" or not available
    degraded = step["reason"] in PROBLEM_REASONS or bool(problems)
    if problems and step["reason"] not in PROBLEM_REASONS:
        degraded_reason = problems[0]["reason"]
        degraded_message = "; ".join(p["message"] for p in problems)
    else:
        degraded_reason, degraded_message = step["reason"], step["message"]
    if available:
        available_reason = "AllMembersHealthy"
        available_message = (
            f"{len(healthy_voters)} of {len(members)} members healthy, leader "
            f"{leader.get('name') if leader else 'unknown'}"
        )
    elif info.get("healthy"):
        down = [m["name"] for m in member_statuses if not (m["healthy"] and m["podReady"])]
        available_reason = "MembersUnhealthy" if down else step["reason"]
        available_message = (
            f"etcd has quorum but members are not healthy: {', '.join(down)}"
            if down
            else step["message"]
        )
    else:
        available_reason, available_message = step["reason"], step["message"]
    if step["action"] == "none" and not available:
        progressing_reason, progressing_message = available_reason, available_message
    else:
        progressing_reason, progressing_message = step["reason"], step["message"]
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
            "reason": progressing_reason,
            "message": progressing_message,
        },
        {
            "type": "Degraded",
            "status": str(degraded),
            "reason": degraded_reason if degraded else "NoProblems",
            "message": degraded_message if degraded else "no problem observed",
        },
    ]
    phase = "Degraded" if degraded else "Available" if available else "Progressing"
    status = {
        "replicas": len(peers),
        "readyReplicas": len(healthy_voters),
        "selector": f"etcd.quorumkeeper.dev/cluster={cluster}",
        "phase": phase,
        "members": member_statuses,
        "leader": leader.get("name", "") if leader else "",
    }
    version = _cluster_version(info, current.get("clusterVersion") or "")
    if version:
        status["clusterVersion"] = version

    peer_statuses = []
    for peer in peers:
        wanted = _peer_status(
            peer,
            by_peer.get(peer["name"]),
            pods.get(peer["name"]),
            data_lost(peer, pvcs.get(peer["name"])),
        )
        if _peer_status_changed(peer, wanted):
            peer_statuses.append(wanted)

    # Steps announce themselves before they are taken; these are the changes found.
    events = []
    current_degraded = next(
        (c for c in current.get("conditions") or [] if c.get("type") == "Degraded"), {}
    )
    if degraded and current_degraded.get("message") != degraded_message:
        events.append({"reason": degraded_reason, "type": "Warning", "message": degraded_message})
    events += _restart_events(current.get("members"), member_statuses)
    requeue = step["requeue"]
    if problems and requeue != "next":
        requeue = "degraded"
    elif step["action"] == "none" and (not available or not version):
        # Not there yet: a member's pod becoming ready wakes the cluster up; the cluster
        # version is decided by etcd a moment after the members are up, without an event.
        requeue = "event"
    return {
        "status": status,
        "conditions": conditions,
        "peer_statuses": peer_statuses,
        "events": events,
        "requeue": requeue,
    }


class FilterModule:
    def filters(self):
        return {
            "etcd_cluster_plan": etcd_cluster_plan,
            "etcd_cluster_report": etcd_cluster_report,
        }
