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
- recovery under way (disaster recovery, see below): finish it before anything else.
- upgrade_member (a change of spec.version, see _upgrade_step): a member restarted on the new
  version is waited for (or the upgrade stops at it: UpgradeFailed) before anything else; the
  next member is upgraded only when every member is healthy, caught up, without alarm, and no
  other step below is due (a scale or replacement goes first, on the version the members run).
- wait: nothing can be done safely now (no quorum, unhealthy members, a learner still starting).
  Without a quorum the message says whether waiting helps (members down, data intact) or not (a
  majority lost its data: which member still holds data, and the backup to restore from).
- force_new_cluster / restore_from_backup: automatic disaster recovery (spec.disasterRecovery,
  opt-in), only when a majority of the voting members lost its data (their PVCs are gone) so
  that the others can never form a quorum, and only after that lasted delaySeconds. With a
  survivor: the one with the highest raft index restarts with --force-new-cluster
  (``finish_force_new_cluster`` restarts it without the flag once it runs alone), then the
  ordinary steps replace the others. Without: an in-place EtcdRestore of the newest verified
  backup, to which ``hand_over_members`` gives the cluster (its data-less peers are deleted);
  the bootstrap step then starts the members on the restored volumes.
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
from datetime import UTC, datetime

ORDINAL = re.compile(r"-(\d+)$")
TIMESTAMP = "%Y-%m-%dT%H:%M:%SZ"
DEFAULT_RECOVERY_DELAY_SECONDS = 60
VERSION = re.compile(r"^\d+\.\d+\.\d+$")
# etcd reports this cluster version until the members have agreed on the real one.
PLACEHOLDER_CLUSTER_VERSION = "3.0.0"
PROBLEM_REASONS = {
    "QuorumLost",
    "RecoveryFailed",
    "ClusterUnreachable",
    "MembersUnhealthy",
    "ReplacementUnsafe",
    "StepFailed",
    "UpgradeFailed",
    "UpgradeRefused",
    "AlarmActive",
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

    under_way = _recovery_under_way(observed, cluster, live_peers, info)
    if under_way:
        return under_way

    upgrade = _upgrade_step(observed, cluster, live_peers, info)
    if upgrade:
        return upgrade

    if not info.get("reachable"):
        # Members that lost their data count as lost even when none answers: without a quorum
        # of survivors, waiting cannot help (and a formed cluster is never bootstrapped again).
        formed = {n: p for n, p in live_peers.items() if p.get("member_id")}
        if any(data_lost(p, pvcs.get(n)) for n, p in formed.items()):
            silent = [
                {"name": n, "healthy": False, "is_learner": False, "raft_index": None}
                for n in sorted(formed, key=ordinal_of)
            ]
            return _quorum_lost(observed, cluster, silent, live_peers, pvcs, {})
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
                version=new_member_version(observed, cluster, live_peers, info),
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
            version=new_member_version(observed, cluster, live_peers, info),
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
    recovery, automatic = _automatic_recovery(observed, cluster, head, lost, survivors)
    if recovery:
        return recovery
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
        f"(PVC gone); {still}. {automatic}: "
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
            "unrecoverable": True,
        },
    )


def _seconds_since(then: str | None, now: str | None) -> float | None:
    if not then or not now:
        return None
    return (_parse_time(now) - _parse_time(then)).total_seconds()


def _parse_time(value: str) -> datetime:
    return datetime.strptime(value, TIMESTAMP).replace(tzinfo=UTC)


def recovery_restore_name(cluster: str, since: str) -> str:
    """The in-place EtcdRestore of one disaster: named after the cluster and the time the loss
    was first seen, so that a step taken again (operator restarted) finds the same one."""
    return f"{cluster}-recovery-{_parse_time(since).strftime('%Y%m%d-%H%M%S')}"


def _automatic_recovery(observed, cluster, head, lost, survivors) -> tuple[dict | None, str]:
    """A majority lost its data. With spec.disasterRecovery.enabled, once that has lasted
    delaySeconds (counted from status.recovery.quorumLossSince, which the report records the
    first time it is seen): the recovery step, or a wait saying when it starts. Otherwise
    (None, why the operator does not recover by itself), for the message a person reads."""
    settings = observed.get("disaster_recovery") or {}
    if not settings.get("enabled"):
        return None, "Automatic disaster recovery is off"
    delay = int(settings.get("delaySeconds", DEFAULT_RECOVERY_DELAY_SECONDS))
    since = ((observed.get("current") or {}).get("recovery") or {}).get("quorumLossSince")
    elapsed = _seconds_since(since, observed.get("now"))
    quorum_lost = {"data_lost": lost, "down": [], "survivors": survivors, "unrecoverable": True}
    if survivors:
        silent = [s["name"] for s in survivors if s["raft_index"] is None]
        if silent:
            return None, (
                f"Automatic disaster recovery waits for {_members(silent)} to answer (data "
                "intact), so that the member with the newest data is the one kept"
            )
        # The highest raft index holds every entry the others committed; ties: lowest ordinal.
        newest = max(survivors, key=lambda s: (s["raft_index"], -ordinal_of(s["name"])))
        others = [s["name"] for s in survivors if s is not newest]
        action = "force_new_cluster"
        what = (
            f"restart {newest['name']} (raft index {newest['raft_index']}, the newest data) "
            "as a one-member cluster with --force-new-cluster, then re-add "
            f"{_members(lost + others)} as new members"
        )
        extra = {
            "peer": newest["name"],
            "recovery": {
                "source": "Survivor",
                "member": newest["name"],
                "backup": None,
                "restore": None,
            },
        }
    else:
        backup = _best_backup(observed.get("backups"))
        if not backup or backup.get("verified") != "True":
            return None, (
                "Automatic disaster recovery cannot act: no member's data survives and this "
                "cluster has no verified EtcdBackup (it restores only from a verified one)"
            )
        action = "restore_from_backup"
        what = (
            f"restore the cluster in place from EtcdBackup {backup['name']} (revision "
            f"{backup.get('revision')}, completed {backup.get('completion_time')}, verified); "
            "writes made after that backup are lost"
        )
        restore = recovery_restore_name(cluster, since) if since else ""
        extra = {
            "backup": backup["name"],
            "restore": restore,
            "recovery": {
                "source": "Backup",
                "member": None,
                "backup": backup["name"],
                "restore": restore,
            },
        }
    if elapsed is None or elapsed < delay:
        remaining = delay - max(0, int(elapsed or 0))
        return _step(
            "wait",
            "QuorumLost",
            f"{head}, and waiting cannot bring it back: {_members(lost)} lost {_their(lost)} data "
            f"(PVC gone). Automatic disaster recovery will {what} in {remaining}s "
            f"(spec.disasterRecovery.delaySeconds={delay})",
            # Due when the countdown ends (at once with delaySeconds 0, once the first
            # sighting is recorded), not at the next fallback poll.
            f"{remaining}s" if remaining > 0 else "next",
            quorum_lost=quorum_lost,
        ), ""
    extra["recovery"]["time"] = observed.get("now")
    return _step(
        action,
        "RecoveringFromSurvivor" if survivors else "RecoveringFromBackup",
        f"{head}, and {_members(lost)} lost {_their(lost)} data: disaster recovery: {what}",
        "next",
        quorum_lost=quorum_lost,
        observe_after=False,
        **extra,
    ), ""


def _recovery_under_way(observed, cluster, peers, info) -> dict | None:
    """Carry on a disaster recovery started earlier, from what the cluster shows (so that an
    operator restarted half-way finds it): an in-place restore the cluster's annotation names
    that has not handed the volumes back yet, or a member started, or still to be restarted,
    with --force-new-cluster."""
    restore = observed.get("recovery_restore") or {}
    if restore.get("pending"):
        backup = restore.get("backup") or "?"
        if peers:
            names = sorted(peers, key=ordinal_of)
            return _step(
                "hand_over_members",
                "RecoveringFromBackup",
                f"restoring from EtcdBackup {backup} in place: deleting {_members(names)} (no "
                f"data left) so that EtcdRestore {restore['name']} can restore their volumes",
                "event",
                peers=names,
                observe_after=False,
            )
        if restore.get("phase") == "Failed":
            return _step(
                "wait",
                "RecoveryFailed",
                f"automatic recovery from EtcdBackup {backup} failed (EtcdRestore "
                f"{restore['name']}: {restore.get('message') or 'no reason given'}); it is not "
                f"tried again by itself: fix the cause, then delete EtcdRestore {restore['name']} "
                "and recovery starts again from the newest verified backup",
                "degraded",
            )
        return _step(
            "wait",
            "RecoveringFromBackup",
            f"restoring from EtcdBackup {backup} in place: EtcdRestore {restore['name']} is "
            f"{restore.get('phase') or 'Pending'}: {restore.get('message') or 'starting'}",
            "event",
        )

    pods = observed.get("pods") or {}
    for name, peer in sorted(peers.items(), key=lambda item: ordinal_of(item[0])):
        pod = pods.get(name) or {}
        flagged_pod = bool(pod.get("force_new_cluster")) and not pod.get("deleting")
        if peer.get("force_new_cluster"):
            if not flagged_pod:
                if pod and not pod.get("deleting"):
                    return _step(
                        "force_new_cluster",
                        "RecoveringFromSurvivor",
                        f"restarting {name} with --force-new-cluster",
                        "event",
                        peer=name,
                        observe_after=False,
                    )
                return _step(
                    "wait",
                    "RecoveringFromSurvivor",
                    f"waiting for {name}'s pod to restart with --force-new-cluster",
                    "event",
                )
            members = info.get("members") or [] if info.get("reachable") else []
            if not (
                info.get("healthy")
                and len(members) == 1
                and member_peer_name(members[0], cluster) == name
            ):
                return _step(
                    "wait",
                    "RecoveringFromSurvivor",
                    f"waiting for {name} to start as a one-member cluster on its data "
                    "(--force-new-cluster)",
                    # etcd answers seconds after its pod starts; no Kubernetes event says so.
                    "poll",
                )
        elif not flagged_pod:
            continue
        # It runs alone with its data (or the flag was cleared but its pod still has it): a
        # restart of that container would force a new cluster again and drop every member
        # added since, so it restarts without the flag before anyone joins.
        return _step(
            "finish_force_new_cluster",
            "RecoveringFromSurvivor",
            f"{name} runs as a one-member cluster with its data; restarting it without "
            "--force-new-cluster before the other members are re-added",
            "event",
            peer=name,
            observe_after=False,
        )
    return None


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


def _recovery_status(observed: dict, current: dict, step: dict) -> dict:
    """status.recovery: since when a majority has been without its data (the disaster recovery
    delay counts from there; null deletes it once that is over) and the last recovery."""
    recorded = current.get("recovery") or {}
    unrecoverable = (step.get("quorum_lost") or {}).get("unrecoverable")
    since = (recorded.get("quorumLossSince") or observed.get("now")) if unrecoverable else None
    recovery = {"quorumLossSince": since}
    if step.get("recovery") and step["action"] != "wait":
        recovery["last"] = step["recovery"]
    return recovery


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
    status["recovery"] = _recovery_status(observed, current, step)

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
    upgrading = _upgrading_members(observed, member_statuses)
    events += _restart_events(
        current.get("members"), [m for m in member_statuses if m["name"] not in upgrading]
    )
    events += _upgrade_events(observed, member_statuses)
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


# --------------------------------------------------------------------------------------------
# Rolling upgrade: a change of spec.version
# --------------------------------------------------------------------------------------------

DEFAULT_UPGRADE_MEMBER_TIMEOUT_SECONDS = 300
# A member has caught up with the leader when its raft index is at most this far behind; the
# indexes come from status calls made at the same moment, so a live cluster differs by a few.
UPGRADE_MAX_RAFT_LAG = 100
# etcd's own upgrade guides: the lowest version every member must run before the minor version
# on the left. 3.6: "make sure that all of your 3.5 members are updated to 3.5.32 or later"
# (etcd.io/docs/v3.6/upgrades/upgrade_3_6, after the 3.5 membership and v2store fixes).
MINIMUM_VERSION_BEFORE = {(3, 6): (3, 5, 32)}
SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def _semver(version) -> tuple[int, int, int] | None:
    match = SEMVER.match(str(version or ""))
    return tuple(int(x) for x in match.groups()) if match else None


def _minor(version) -> str:
    parsed = _semver(version)
    return f"{parsed[0]}.{parsed[1]}" if parsed else str(version)


def _running_version(member: dict | None) -> str:
    """The version a member's etcd reports now ("" when it does not answer)."""
    return (member or {}).get("version") or "" if (member or {}).get("healthy") else ""


def _last_version(peer: dict, member: dict | None) -> str:
    """The version a member runs, or ran when it last answered (its EtcdPeer's
    status.serverVersion); "" for a member that never ran."""
    return _running_version(member) or (peer.get("status") or {}).get("serverVersion") or ""


def _upgrade_timeout(observed: dict) -> int:
    settings = observed.get("upgrade") or {}
    return int(settings.get("memberTimeoutSeconds") or DEFAULT_UPGRADE_MEMBER_TIMEOUT_SECONDS)


def _timestamp(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _now(observed: dict) -> datetime:
    return _timestamp(observed["now"]) if observed.get("now") else datetime.now(UTC)


def _upgrade_step(observed: dict, cluster: str, peers: dict, info: dict) -> dict | None:
    """The step of a rolling upgrade to spec.version, or None when it has nothing to do now.

    One member at a time, the highest ordinal first and the leader last (leadership moves to a
    member already upgraded first); a member keeps its name, member ID and PVC, only its pod
    is replaced. The next member starts only when the previous one reports the new version,
    is healthy and has caught up with the leader. Whatever the upgrade needs is read from the
    cluster itself, so an operator restarted half-way resumes: an EtcdPeer whose spec says the
    new version while its member last reported another one was restarted for the upgrade and
    has not come back yet (it is waited for, up to spec.upgrade.memberTimeoutSeconds).

    A member restarted for the upgrade and not back is waited for before anything else. Not
    started otherwise while another change (scale, replacement, learner, recovery) is under
    way: that change is finished first, with the version the members run. A member that is
    down on a version the spec no longer asks for (a rollback of a failed member) is moved at
    once when every other member is healthy: it serves nothing as it is.
    """
    target = str(observed.get("version") or "")
    wanted = _semver(target)
    pvcs = observed.get("pvcs") or {}
    if not wanted or not peers or any(data_lost(p, pvcs.get(n)) for n, p in peers.items()):
        # A member whose data is gone is replaced (or the cluster recovered) first.
        return None
    reachable = bool(info.get("reachable"))
    members = (
        {member_peer_name(m, cluster): m for m in info.get("members", [])} if reachable else {}
    )
    landed, returning, moving, down = [], [], [], []
    for name, peer in sorted(peers.items(), key=lambda item: -ordinal_of(item[0])):
        member = members.get(name)
        gone = reachable and peer.get("member_id") and member is None
        last = _last_version(peer, member)
        if not last or gone:
            # Never ran, or was removed: bootstrap, scale-up and replacement deal with it.
            continue
        running = _running_version(member)
        if running == target and peer.get("version") == target:
            landed.append(name)
        elif running:
            # Runs another version than the spec asks for (or the one it asks for while its
            # peer still says another: an interrupted step).
            moving.append(name)
        elif peer.get("version") != target:
            if peer.get("version") != last:
                # Down on a version it never reported (an image it cannot pull, say) that the
                # spec no longer asks for: a rollback.
                down.append(name)
            # Else down on the version it ran: an outage, which holds the upgrade back.
        elif last != target:
            returning.append(name)
    count = f"{len(landed)} of {len(peers)} members on {target}"
    if returning and (info.get("healthy") or len(peers) == 1):
        name = returning[0]
        return _upgrade_wait_for(observed, name, peers[name], members.get(name), target, count)
    if not moving and not down:
        return _cluster_version_catching_up(observed, cluster, peers, info, target, count)
    if _other_change_pending(observed, cluster, peers, info):
        return None
    refused = _upgrade_refused(observed, peers, members, info, target)
    if refused:
        return refused
    if down:
        return _upgrade_down_member(observed, cluster, peers, info, down[0], target, count)
    if not info.get("healthy"):
        return None
    return _upgrade_next_member(observed, cluster, info, members, moving, target, count)


def _upgrade_wait_for(observed, name, peer, member, target, count) -> dict:
    """A member restarted for the upgrade that has not reported the new version yet."""
    previous = (peer.get("status") or {}).get("serverVersion") or "the previous version"
    pod = (observed.get("pods") or {}).get(name) or {}
    since = pod.get("created")
    elapsed = (_now(observed) - _timestamp(since)).total_seconds() if since else 0.0
    timeout = _upgrade_timeout(observed)
    rollback = (
        f"the other members keep serving and are not touched. To roll {name} back, set "
        f"spec.version to {previous}: it is restarted on {previous} at once"
    )
    problem = pod.get("problem")
    if problem:
        why = problem["message"]
    elif elapsed > timeout:
        errors = "; ".join((member or {}).get("errors") or []) or "it does not answer"
        logs = f"kubectl logs {pod.get('name') or name}"
        why = (
            f"it is not healthy {int(elapsed)}s after its restart (spec.upgrade."
            f"memberTimeoutSeconds is {timeout}): {errors}; see {logs}"
        )
    else:
        return _step(
            "wait",
            "Upgrading",
            f"upgrading to {target}, {count}: waiting for {name} to come back on {target} "
            f"(restarted {int(elapsed)}s ago)",
            "poll",
            upgrade={"member": name, "target": target},
        )
    return _step(
        "wait",
        "UpgradeFailed",
        f"upgrade to {target} stopped at member {name} ({count}): {why}; {rollback}",
        "degraded",
        upgrade={"member": name, "target": target},
    )


def _other_change_pending(observed, cluster, peers, info) -> bool:
    """Whether membership is not as the spec says or is changing (a learner, a member without
    a peer or a peer without a member, members to add or remove): finished before an upgrade."""
    members = info.get("members", []) if info.get("reachable") else []
    names = {member_peer_name(m, cluster) for m in members}
    voters = [m for m in members if not m.get("is_learner")]
    if not info.get("reachable"):
        return len(peers) != int(observed["replicas"])
    return (
        any(m.get("is_learner") for m in members)
        or names != set(peers)
        or len(voters) != int(observed["replicas"])
    )


def _upgrade_refused(observed, peers, members, info, target) -> dict | None:
    """etcd's upgrade rules, checked against what the members run (the CRD can only compare
    the spec with its previous value): no minor version skipped, the minimum patch before a
    minor upgrade, and no minor downgrade once etcd's cluster version has moved."""
    wanted = _semver(target)
    running = {}
    for name, peer in peers.items():
        version = _last_version(peer, members.get(name))
        if _semver(version):
            running[name] = version

    def holding(predicate):
        names = sorted((n for n, v in running.items() if predicate(_semver(v))), key=ordinal_of)
        return ", ".join(f"{n} ({running[n]})" for n in names)

    too_old = holding(lambda v: v[0] == wanted[0] and v[1] < wanted[1] - 1)
    if too_old:
        step = f"{wanted[0]}.{wanted[1] - 1}"
        return _refuse(
            f"spec.version {target} skips a minor version: {_members_of(too_old)} "
            f"{too_old}; etcd upgrades one minor version at a time: set spec.version to the "
            f"latest {step}.x, let every member reach it, then {target}"
        )
    minimum = MINIMUM_VERSION_BEFORE.get(wanted[:2])
    below = minimum and holding(lambda v: v[:2] == minimum[:2] and v < minimum)
    if below:
        floor = ".".join(str(x) for x in minimum)
        return _refuse(
            f"etcd's {minimum[0]}.{minimum[1]} to {wanted[0]}.{wanted[1]} upgrade guide "
            f"requires every member on {floor} or later first, and {_members_of(below)} "
            f"{below}: set spec.version to a {minimum[0]}.{minimum[1]} release of at least "
            f"{floor}, let every member reach it, then {target}"
        )
    other_major = holding(lambda v: v[0] != wanted[0])
    if other_major:
        return _refuse(f"spec.version {target} changes the major version of {other_major}")
    cluster_version = info.get("cluster_version") if info.get("reachable") else None
    if not _semver(cluster_version) or cluster_version == PLACEHOLDER_CLUSTER_VERSION:
        cluster_version = (observed.get("current") or {}).get("clusterVersion")
    decided = _semver(cluster_version)
    if decided and decided[:2] > wanted[:2]:
        return _refuse(
            f"spec.version {target} is a minor downgrade, and etcd's cluster version is already "
            f"{cluster_version} (every member ran {_minor(cluster_version)}, and the data may use "
            f"its features): the operator downgrades the minor version only before an upgrade "
            f"has finished; set spec.version to a {_minor(cluster_version)}.x release"
        )
    return None


def _members_of(listing: str) -> str:
    return "members run" if "," in listing else "member runs"


def _refuse(message: str) -> dict:
    return _step("wait", "UpgradeRefused", f"upgrade refused: {message}", "degraded")


def _upgrade_down_member(observed, cluster, peers, info, name, target, count) -> dict | None:
    """A member down on a version it never reported and the spec no longer asks for (its new
    image could not be pulled, and the spec went back): restarting it costs nothing when all
    the others are healthy; else the wait for members is reported as usual."""
    members = info.get("members", []) if info.get("reachable") else []
    others = [
        m for m in members if not m.get("is_learner") and member_peer_name(m, cluster) != name
    ]
    if not all(m.get("healthy") for m in others) or (len(peers) > 1 and not info.get("healthy")):
        return None
    peer = peers[name]
    last = _last_version(peer, None)
    return _step(
        "upgrade_member",
        "Upgrading",
        f"moving member {name}, which is down on {peer.get('version')}, to {target} "
        f"({count}; it ran {last or 'nothing yet'} before)",
        "next",
        peer=name,
        member=next((m for m in members if member_peer_name(m, cluster) == name), None),
        version=target,
        repository=observed.get("repository") or peer.get("repository"),
        from_version=last,
        move_leader_to="",
    )


def _upgrade_next_member(observed, cluster, info, members, moving, target, count) -> dict:
    """The gate (every member healthy, its pod ready, caught up with the leader, no alarm),
    then the next member: the highest ordinal that does not lead, the leader last."""
    pods = observed.get("pods") or {}
    unhealthy = sorted((n for n, m in members.items() if not m.get("healthy")), key=ordinal_of)
    if unhealthy:
        return _step(
            "wait",
            "MembersUnhealthy",
            f"upgrading to {target} ({count}) waits for unhealthy members to recover: "
            f"{', '.join(unhealthy)}",
            "degraded",
        )
    alarms = (info.get("alarms") or []) if isinstance(info.get("alarms"), list) else []
    if alarms:
        by_id = {m.get("id"): n for n, m in members.items()}
        active = ", ".join(
            f"{a.get('alarm')} on {by_id.get(a.get('member_id'), a.get('member_id'))}"
            for a in alarms
        )
        return _step(
            "wait",
            "AlarmActive",
            f"upgrading to {target} ({count}) waits: etcd alarm {active} is active (for "
            "NOSPACE: compact and defragment to free space, then etcdctl alarm disarm)",
            "degraded",
        )
    unready = sorted((n for n in members if not (pods.get(n) or {}).get("ready")), key=ordinal_of)
    leader = next((m for m in members.values() if m.get("is_leader")), None)
    behind = [
        f"{n} (raft index {m.get('raft_index')} of {leader.get('raft_index')})"
        for n, m in sorted(members.items(), key=lambda item: ordinal_of(item[0]))
        if leader
        and (m.get("raft_index") or 0) + UPGRADE_MAX_RAFT_LAG < (leader.get("raft_index") or 0)
    ]
    if unready or behind or leader is None:
        waiting = (
            f"the pods of {', '.join(unready)} to be ready"
            if unready
            else f"{', '.join(behind)} to catch up with the leader"
            if behind
            else "a leader"
        )
        return _step(
            "wait", "Upgrading", f"upgrading to {target}, {count}: waiting for {waiting}", "poll"
        )
    leader_name = member_peer_name(leader, cluster)
    followers = [n for n in moving if n != leader_name]
    name = followers[0] if followers else leader_name
    member = members[name]
    move_to = ""
    if name == leader_name and len(members) > 1:
        upgraded = [
            m
            for n, m in members.items()
            if n != name and _running_version(m) == target and not m.get("is_learner")
        ]
        best = max(upgraded or [], key=lambda m: m.get("raft_index") or 0, default=None)
        if best is None:
            # No member runs the new version yet while the leader is the last one left: never
            # the case when the followers went first; wait rather than restart the leader.
            return _step(
                "wait",
                "Upgrading",
                f"upgrading to {target}, {count}: waiting for a member on {target} to hand "
                f"leadership of {name} to",
                "poll",
            )
        move_to = member_peer_name(best, cluster)
    old = _running_version(member)
    then = f"; leadership moves to {move_to} first" if move_to else ""
    what = (
        f"pointing the EtcdPeer of {name}, which runs {target}, at {target}"
        if old == target
        else f"upgrading member {name} from {old} to {target}"
    )
    return _step(
        "upgrade_member",
        "Upgrading",
        f"{what} ({count}){then}",
        "next",
        peer=name,
        member=member,
        version=target,
        repository=observed.get("repository") or "",
        from_version=old,
        move_leader_to=move_to,
    )


def _cluster_version_catching_up(observed, cluster, peers, info, target, count) -> dict | None:
    """Every member runs the new version: etcd raises the cluster version by itself a few
    seconds later (its leader checks every few seconds); the upgrade is done then."""
    if not info.get("healthy") or _other_change_pending(observed, cluster, peers, info):
        return None
    version = info.get("cluster_version") or ""
    decided = _semver(version)
    if not decided or version == PLACEHOLDER_CLUSTER_VERSION or decided[:2] >= _semver(target)[:2]:
        return None
    return _step(
        "wait",
        "Upgrading",
        f"{count}: waiting for etcd to raise the cluster version from {version} to "
        f"{_minor(target)}",
        "poll",
    )


def new_member_version(observed: dict, cluster: str, peers: dict, info: dict) -> str:
    """The version a member added now starts with: the lowest version a member runs while an
    upgrade is not finished (etcd's cluster version is the lowest of its members', so it can
    always join; the upgrade moves it after), else spec.version."""
    target = str(observed.get("version") or "")
    members = {member_peer_name(m, cluster): m for m in info.get("members", [])}
    running = [
        v
        for name, peer in peers.items()
        for v in [_last_version(peer, members.get(name))]
        if _semver(v)
    ]
    lowest = min(running, key=_semver, default="")
    return lowest if lowest and _semver(lowest) < (_semver(target) or ()) else target


def _upgrade_events(observed: dict, members: list[dict]) -> list[dict]:
    """An Event for each member found on another version than it last reported."""
    current = {m.get("name"): m for m in (observed.get("current") or {}).get("members") or []}
    peers = {p["name"]: p for p in observed.get("peers", [])}
    target = str(observed.get("version") or "")
    on_target = sum(1 for m in members if m["version"] == target and m["healthy"])
    events = []
    for member in members:
        before = ((peers.get(member["name"]) or {}).get("status") or {}).get("serverVersion")
        now = member["version"]
        if (
            not (before and now and before != now)
            or current.get(member["name"], {}).get("version") == now
        ):
            continue
        higher = (_semver(now) or ()) > (_semver(before) or ())
        events.append(
            {
                "reason": "MemberUpgraded" if higher else "MemberDowngraded",
                "type": "Normal",
                "message": f"member {member['name']} runs etcd {now} (was {before}), with its "
                f"data and member ID {member['id']}; {on_target} of {len(members)} members on "
                f"{target}",
            }
        )
    return events


def _upgrading_members(observed: dict, members: list[dict]) -> set[str]:
    """Members whose peer was moved to another version than they last reported, or that now
    report another one: their pod was replaced on purpose (the upgrade's own Events say so,
    not MemberPodReplaced)."""
    now = {m["name"]: m["version"] for m in members}
    return {
        p["name"]
        for p in observed.get("peers", [])
        for last in [(p.get("status") or {}).get("serverVersion")]
        if last and (last != p.get("version") or now.get(p["name"]) not in ("", None, last))
    }


class FilterModule:
    def filters(self):
        return {
            "etcd_cluster_plan": etcd_cluster_plan,
            "etcd_cluster_report": etcd_cluster_report,
        }
