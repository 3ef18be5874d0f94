# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The EtcdCluster planner without a quorum: what the wait is for (quorum-loss diagnosis), the
automatic disaster recovery (spec.disasterRecovery, opt-in), and a recovery under way.

Members that are merely down keep their data, and quorum returns when enough of them come back:
the planner waits and says so. When a majority of the voting members lost its data (their PVCs
are gone) the others can never form a quorum: the message says which member still holds data
and the backup to restore from, and with spec.disasterRecovery.enabled, once that has lasted
delaySeconds, the cluster recovers by itself. With a survivor: the one with the highest raft
index restarts with --force-new-cluster (``finish_force_new_cluster`` restarts it without the
flag once it runs alone), then the ordinary steps replace the others. Without: an in-place
EtcdRestore of the newest verified backup, to which ``hand_over_members`` gives the cluster
(its data-less peers are deleted); the bootstrap step then starts the members on the restored
volumes.
"""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    member_peer_name,
    ordinal_of,
    parse_timestamp,
    quorum_size,
    seconds_between,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_step import (
    PlanContext,
    Step,
    make_step,
)

DEFAULT_RECOVERY_DELAY_SECONDS = 60

# --------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------


def recovery_under_way(ctx: PlanContext) -> Step | None:
    """Carry on a disaster recovery started earlier, from what the cluster shows (so that an
    operator restarted half-way finds it): an in-place restore the cluster's annotation names
    that has not handed the volumes back yet, or a member started, or still to be restarted,
    with --force-new-cluster."""
    restore = ctx.observed.get("recovery_restore") or {}
    if restore.get("pending"):
        return _restore_under_way(ctx, restore)
    info = ctx.etcd
    for name, peer in ctx.live_peers_by_ordinal():
        pod = ctx.pods.get(name) or {}
        flagged_pod = bool(pod.get("force_new_cluster")) and not pod.get("deleting")
        if peer.get("force_new_cluster"):
            if not flagged_pod:
                if pod and not pod.get("deleting"):
                    return make_step(
                        "force_new_cluster",
                        "RecoveringFromSurvivor",
                        f"restarting {name} with --force-new-cluster",
                        "event",
                        peer=name,
                        observe_after=False,
                    )
                return make_step(
                    "wait",
                    "RecoveringFromSurvivor",
                    f"waiting for {name}'s pod to restart with --force-new-cluster",
                    "event",
                )
            members = ctx.members
            if not (
                info.get("healthy")
                and len(members) == 1
                and member_peer_name(members[0], ctx.cluster) == name
            ):
                return make_step(
                    "wait",
                    "RecoveringFromSurvivor",
                    f"waiting for {name} to start as a one-member cluster on its data "
                    "(--force-new-cluster)",
                    # etcd answers seconds after its pod starts; no Kubernetes event says so.
                    "poll",
                    # The lost members' pods cannot start (their nodes or volumes are gone):
                    # the report keeps this poll, which only waits for this one.
                    peer=name,
                )
        elif not flagged_pod:
            continue
        # It runs alone with its data (or the flag was cleared but its pod still has it): a
        # restart of that container would force a new cluster again and drop every member
        # added since, so it restarts without the flag before anyone joins.
        return make_step(
            "finish_force_new_cluster",
            "RecoveringFromSurvivor",
            f"{name} runs as a one-member cluster with its data; restarting it without "
            "--force-new-cluster before the other members are re-added",
            "event",
            peer=name,
            observe_after=False,
        )
    return None


def data_lost_unanswered(ctx: PlanContext) -> Step | None:
    """No member answers and members of the formed cluster lost their data: they count as lost
    even when none answers, and the quorum diagnosis (or disaster recovery) decides."""
    # Without a quorum of survivors, waiting cannot help (and a formed cluster is never
    # bootstrapped again).
    if ctx.reachable:
        return None
    formed = [n for n, p in ctx.live_peers.items() if p.get("member_id")]
    if not any(ctx.lost_data(n) for n in formed):
        return None
    silent = [
        {"name": n, "healthy": False, "is_learner": False, "raft_index": None}
        for n in sorted(formed, key=ordinal_of)
    ]
    return diagnose_quorum_loss(ctx, silent, {})


def cluster_unreachable(ctx: PlanContext) -> Step | None:
    """No member of a formed cluster answers: wait, changing nothing without a quorum."""
    if ctx.reachable:
        return None
    return make_step(
        "wait",
        "ClusterUnreachable",
        "no etcd member answers; waiting for the members to come back (no changes are made "
        "without a quorum)",
        "degraded",
    )


def quorum_lost(ctx: PlanContext) -> Step | None:
    """etcd answers without a healthy quorum: the quorum diagnosis (or disaster recovery)."""
    if not ctx.reachable or ctx.etcd.get("healthy"):
        return None
    return diagnose_quorum_loss(ctx, ctx.voters, ctx.etcd.get("quorum") or {})


# --------------------------------------------------------------------------------------------
# Quorum-loss diagnosis and automatic disaster recovery
# --------------------------------------------------------------------------------------------


def diagnose_quorum_loss(ctx: PlanContext, voters: list[dict], quorum: dict) -> Step:
    """The wait without a quorum, saying what it waits for. Members that are merely down keep
    their data, and quorum returns when enough of them come back. When too many voting members
    lost their data (data_lost) for the rest ever to form a quorum, waiting is pointless: say
    so, which member still holds data, and what a person should do (automatic disaster
    recovery is opt-in; ``backups`` is etcd_cluster_observe's summary of this cluster's
    EtcdBackups, looked up only without a quorum)."""
    voting = quorum.get("voting", len(voters))
    healthy_voting = quorum.get("healthy_voting", sum(1 for v in voters if v.get("healthy")))
    required = quorum.get("required", quorum_size(voting))
    head = f"etcd has no healthy quorum ({healthy_voting} of {voting} voting members healthy)"
    lost, down, survivors = [], [], []
    for member in sorted(voters, key=lambda m: ordinal_of(member_peer_name(m, ctx.cluster))):
        name = member_peer_name(member, ctx.cluster)
        if name in ctx.live_peers and ctx.lost_data(name):
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
        return make_step(
            "wait", "QuorumLost", message, "degraded", quorum_lost={"data_lost": lost, "down": down}
        )

    backups = ctx.observed.get("backups")
    backup = best_backup(backups)
    recovery, automatic = _automatic_recovery(ctx, head, lost, survivors)
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
    elif backups is None:
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
    return make_step(
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


def recovery_restore_name(cluster: str, since: str) -> str:
    """The in-place EtcdRestore of one disaster: named after the cluster and the time the loss
    was first seen, so that a step taken again (operator restarted) finds the same one."""
    return f"{cluster}-recovery-{parse_timestamp(since).strftime('%Y%m%d-%H%M%S')}"


def best_backup(backups: list[dict] | None) -> dict | None:
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


def _automatic_recovery(ctx: PlanContext, head, lost, survivors) -> tuple[Step | None, str]:
    """A majority lost its data. With spec.disasterRecovery.enabled, once that has lasted
    delaySeconds (counted from status.recovery.quorumLossSince, which the report records the
    first time it is seen): the recovery step, or a wait saying when it starts. Otherwise
    (None, why the operator does not recover by itself), for the message a person reads."""
    settings = ctx.observed.get("disaster_recovery") or {}
    if not settings.get("enabled"):
        return None, "Automatic disaster recovery is off"
    delay = int(settings.get("delaySeconds", DEFAULT_RECOVERY_DELAY_SECONDS))
    since = ((ctx.observed.get("current") or {}).get("recovery") or {}).get("quorumLossSince")
    now = ctx.observed.get("now")
    # Counted on the observation's clock only: without it, the countdown has not started.
    elapsed = seconds_between(since, now) if now else None
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
        details = {
            "peer": newest["name"],
            "recovery": {
                "source": "Survivor",
                "member": newest["name"],
                "backup": None,
                "restore": None,
            },
        }
    else:
        backup = best_backup(ctx.observed.get("backups"))
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
        restore = recovery_restore_name(ctx.cluster, since) if since else ""
        details = {
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
        return make_step(
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
    details["recovery"]["time"] = now
    return make_step(
        action,
        "RecoveringFromSurvivor" if survivors else "RecoveringFromBackup",
        f"{head}, and {_members(lost)} lost {_their(lost)} data: disaster recovery: {what}",
        # Its result shows in events (the survivor's pod replaced, the restore's progress and
        # the peers handed over): a next round now would plan from the same observation and
        # take the step again.
        "event",
        quorum_lost=quorum_lost,
        observe_after=False,
        **details,
    ), ""


def _restore_under_way(ctx: PlanContext, restore: dict) -> Step:
    """An in-place restore from a backup that has not handed the volumes back yet."""
    backup = restore.get("backup") or "?"
    if ctx.live_peers:
        names = sorted(ctx.live_peers, key=ordinal_of)
        return make_step(
            "hand_over_members",
            "RecoveringFromBackup",
            f"restoring from EtcdBackup {backup} in place: deleting {_members(names)} (no "
            f"data left) so that EtcdRestore {restore['name']} can restore their volumes",
            "event",
            peers=names,
            observe_after=False,
        )
    if restore.get("phase") == "Failed":
        return make_step(
            "wait",
            "RecoveryFailed",
            f"automatic recovery from EtcdBackup {backup} failed (EtcdRestore "
            f"{restore['name']}: {restore.get('message') or 'no reason given'}); it is not "
            f"tried again by itself: fix the cause, then delete EtcdRestore {restore['name']} "
            "and recovery starts again from the newest verified backup",
            "degraded",
        )
    return make_step(
        "wait",
        "RecoveringFromBackup",
        f"restoring from EtcdBackup {backup} in place: EtcdRestore {restore['name']} is "
        f"{restore.get('phase') or 'Pending'}: {restore.get('message') or 'starting'}",
        "event",
    )


def _members(names: list[str]) -> str:
    return ("member " if len(names) == 1 else "members ") + ", ".join(names)


def _their(names: list[str]) -> str:
    return "its" if len(names) == 1 else "their"
