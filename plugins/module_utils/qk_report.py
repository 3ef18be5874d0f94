# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The status that tells the truth about an EtcdCluster after a round: ``etcd_cluster_report``
(the cluster's status and conditions, the EtcdPeers' statuses that changed, the Events to
record and when to look again), from the observation and the step qk_plan chose.

Steps announce themselves before they are taken (roles/etcdcluster/tasks/converge.yml); the
Events here are the changes found: a new problem, a member restarted or moved to a new pod, a
member on another version.
"""

from __future__ import annotations

import re

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    CLUSTER_LABEL,
    alarmed_peers,
    data_lost,
    member_peer_name,
    ordinal_of,
    seconds_between,
    version_or_none,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_maintenance import (
    last_defragmentation,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_monitoring import (
    MONITORING_FAILED,
    NOT_REQUESTED,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    config_hash,
    fragmented_percent,
    human_bytes,
    quota_used_percent,
    volume_used_percent,
    wal_room,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_upgrade import (
    PLACEHOLDER_CLUSTER_VERSION,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_volumes import (
    volume_growth_problems,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_schedule_time import (
    ScheduleError,
    parse_schedule,
)

# The reasons of steps that wait for something a person may have to do: the cluster is
# Degraded while one of them is the step.
PROBLEM_REASONS = {
    "QuorumLost",
    "RecoveryFailed",
    "ClusterUnreachable",
    "MembersUnhealthy",
    "ReplacementUnsafe",
    "StepFailed",
    "UpgradeFailed",
    "ConfigRolloutFailed",
    "UpgradeRefused",
    "AlarmActive",
    "CertificatesInvalid",
    "CredentialsRefused",
    "DatabaseQuotaExceeded",
}
# etcd alarms: what each means for the cluster's users (the Degraded and Available reason).
ALARM_PROBLEMS = {
    "NOSPACE": (
        "DatabaseQuotaExceeded",
        "etcd refuses writes (it serves reads and deletes): the database reached its backend "
        "quota, NOSPACE alarm raised on {members}",
    ),
    "CORRUPT": (
        "DataCorrupted",
        "etcd found members whose data differs from the others', CORRUPT alarm raised on "
        "{members}: it refuses writes; see etcd's logs and the disaster recovery docs",
    ),
}
MISSING_POD_GRACE_SECONDS = 30
# A cluster this close to its quota, or out of space this recently, is looked at every
# `degraded` period (30 s) instead of every `steady` one (10 min): see _space_pressure.
SPACE_WATCH_PERCENT = 50
SPACE_WATCH_SECONDS = 600
VOLUME_WATCH_PERCENT = 80
# A cluster version etcd has decided (it says ``not_decided`` before).
DECIDED_CLUSTER_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


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
    alarms = info.get("alarms") if isinstance(info.get("alarms"), list) else []
    wanted_config = config_hash(observed["config"]) if observed.get("config") else None
    quotas = {p["name"]: p.get("quota_bytes") for p in peers}
    capacities = {name: pvc.get("capacity_bytes") for name, pvc in pvcs.items()}
    member_statuses = sorted(
        (
            _member_status(m, cluster, pods, alarms, wanted_config, quotas, capacities)
            for m in members
        ),
        key=lambda m: ordinal_of(m["name"]),
    )
    leader = next((m for m in members if m.get("is_leader")), None)
    healthy_voters = [
        m for m in member_statuses if m["healthy"] and m["podReady"] and not m["isLearner"]
    ]
    peer_names = {p["name"] for p in peers}
    alarm_problems = _alarm_problems(alarms, members, cluster)
    problems = alarm_problems + _problems(observed)
    available = bool(
        info.get("healthy")
        and members
        and all(m["healthy"] and m["podReady"] and not m["isLearner"] for m in member_statuses)
        and peer_names <= set(by_peer)
        and not alarm_problems
    )
    progressing = step["action"] != "none" or not available
    degraded = step["reason"] in PROBLEM_REASONS or bool(problems)
    if problems and step["reason"] not in PROBLEM_REASONS:
        degraded_reason = problems[0]["reason"]
        degraded_message = "; ".join(p["message"] for p in problems)
    else:
        degraded_reason, degraded_message = step["reason"], step["message"]
    refused = info.get("credentials_refused")
    if refused:
        available_reason = "CredentialsRefused"
        available_message = (
            f"etcd answers but refuses the operator's credentials, so whether its members are "
            f"healthy is unknown: {refused}"
        )
    elif alarm_problems and info.get("healthy"):
        available_reason = alarm_problems[0]["reason"]
        available_message = "; ".join(p["message"] for p in alarm_problems)
    elif available:
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
            "status": "Unknown" if refused else str(available),
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
    spread = _spread_condition(members, cluster, pods, observed.get("zones") or {})
    if spread and not refused:
        conditions.append(spread)
    monitoring = (observed.get("monitoring") or {}).get("condition")
    if monitoring:
        conditions.append(monitoring)
    phase = "Degraded" if degraded else "Available" if available else "Progressing"
    status = {
        "replicas": len(peers),
        "readyReplicas": len(healthy_voters),
        "selector": f"{CLUSTER_LABEL}={cluster}",
        "phase": phase,
        "members": member_statuses,
        "leader": leader.get("name", "") if leader else "",
    }
    if current.get("maintenance"):
        # Written by the step that made it; kept in what the next round plans from.
        status["maintenance"] = current["maintenance"]
    compaction = _compaction_record(info, observed, current)
    if compaction is not None:
        status["maintenance"] = {
            **(status.get("maintenance") or {}),
            "lastCompaction": compaction or None,
        }
    schedule = _schedule_record(observed, current)
    if schedule is not None:
        status["maintenance"] = {**(status.get("maintenance") or {}), "schedule": schedule or None}
    queued = _queued_defragmentation(observed, current, step)
    if queued or (current.get("maintenance") or {}).get("queuedRequest"):
        # null removes a request answered since (the status is merged, not replaced).
        status["maintenance"] = {**(status.get("maintenance") or {}), "queuedRequest": queued}
    if refused:
        # Nothing was learnt about the members: what was last seen stays, marked by the
        # conditions as unknown now, rather than every member turned unhealthy.
        for field in ("readyReplicas", "members", "leader"):
            if field in current:
                status[field] = current[field]
    sized = [m for m in member_statuses if "dbSize" in m]
    if sized and not refused:
        # The largest member: the one that reaches the quota first.
        largest = max(sized, key=lambda m: (m["quotaUsedPercent"], m["dbSize"]))
        status["databaseSize"] = human_bytes(largest["dbSize"])
        status["quotaUsedPercent"] = largest["quotaUsedPercent"]
    volume_size = _volume_size(peers, pvcs)
    if volume_size:
        status["volumeSize"] = volume_size
    version = _cluster_version(info, current.get("clusterVersion") or "")
    if version:
        status["clusterVersion"] = version
    status["recovery"] = _recovery_status(observed, current, step)

    peer_statuses = []
    for peer in [] if refused else peers:
        wanted = _peer_status(
            peer,
            by_peer.get(peer["name"]),
            pods.get(peer["name"]),
            data_lost(peer.get("pvc_uid"), pvcs.get(peer["name"])),
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
    events += _near_quota_events(current.get("members"), member_statuses)
    events += _nearly_full_volume_events(current.get("members"), member_statuses, capacities)
    if (
        queued
        and ((current.get("maintenance") or {}).get("queuedRequest") or {}).get("request")
        != queued["request"]
    ):
        events.append(
            {
                "reason": "DefragmentationQueued",
                "type": "Normal",
                "message": f"defragmentation requested ({queued['request']}) waits: "
                f"{queued['waitingFor']}",
            }
        )
    current_spread = next(
        (c for c in current.get("conditions") or [] if c.get("type") == "MembersSpread"), {}
    )
    if (
        spread
        and spread["reason"] in UNSPREAD_REASONS
        and current_spread.get("message") != spread["message"]
    ):
        events.append({"reason": spread["reason"], "type": "Warning", "message": spread["message"]})
    events += _monitoring_events(current, monitoring)
    if not refused:
        restarted_on_purpose = _upgrading_members(observed, member_statuses) | {
            p["name"] for p in peers if _reconfiguring(p)
        }
        events += _restart_events(
            current.get("members"),
            [m for m in member_statuses if m["name"] not in restarted_on_purpose],
        )
        events += _upgrade_events(observed, member_statuses)
        events += _reconfigured_events(peers, peer_statuses, member_statuses)
    requeue = step["requeue"]
    if _lengthens_requeue(step, problems):
        requeue = "degraded"
    elif step["action"] == "none" and (not available or not version):
        # Not there yet: a member's pod becoming ready wakes the cluster up; the cluster
        # version is decided by etcd a moment after the members are up, without an event.
        requeue = "event"
    elif requeue == "steady" and _space_pressure(status, current, observed.get("now")):
        requeue = "degraded"
    elif requeue == "steady" and monitoring and monitoring["reason"] == MONITORING_FAILED:
        # Nothing Kubernetes sees would bring the next try (the objects are not watched).
        requeue = "degraded"
    return {
        "status": status,
        "conditions": conditions,
        "peer_statuses": peer_statuses,
        "events": events,
        "requeue": requeue,
    }


def _lengthens_requeue(step: dict, problems: list[dict]) -> bool:
    """Whether a problem makes the next look wait the ``degraded`` period: a step that can be
    followed at once is not held back, and a ``poll`` for one member (a disaster recovery's
    survivor starting) is held back only by that member's problems; other waits would loop
    every few seconds on something only a person can fix."""
    if not problems or step["requeue"] == "next":
        return False
    if step["requeue"] == "poll" and step.get("peer"):
        return any(p.get("peer") == step["peer"] for p in problems)
    return True


def _volume_size(peers: list[dict], pvcs: dict) -> str:
    """The capacity of the smallest member volume, as its claim says it ("" before any is
    bound): the size spec.storage may be set back to, never below."""
    sized = [
        pvcs[p["name"]]
        for p in peers
        if (pvcs.get(p["name"]) or {}).get("capacity_bytes") is not None
    ]
    return min(sized, key=lambda c: c["capacity_bytes"])["capacity"] if sized else ""


def _space_pressure(status: dict, current: dict, now: str | None) -> bool:
    """Whether etcd may run out of space before the steady period (10 min) brings the next
    look: etcd raises NOSPACE (or stops on a full disk) without anything Kubernetes sees. True
    for a database past SPACE_WATCH_PERCENT of its quota, a member past VOLUME_WATCH_PERCENT
    of its volume, or a cluster that ran out of space in the last SPACE_WATCH_SECONDS (its
    writer is likely still writing)."""
    if (status.get("quotaUsedPercent") or 0) >= SPACE_WATCH_PERCENT:
        return True
    if any(
        (m.get("volumeUsedPercent") or 0) >= VOLUME_WATCH_PERCENT
        for m in status.get("members") or []
    ):
        return True
    last = last_defragmentation(current)
    if last.get("reason") != "NOSPACE":
        return False
    since = seconds_between(last.get("at"), now)
    return since is not None and since < SPACE_WATCH_SECONDS


def _alarm_problems(alarms: list, members: list[dict], cluster: str) -> list[dict]:
    """etcd's active alarms as problems: [{reason, message}], one per kind of alarm."""
    found = []
    for kind, (reason, message) in ALARM_PROBLEMS.items():
        raised = alarmed_peers(alarms, members, cluster, kind)
        if raised:
            found.append({"reason": reason, "message": message.format(members=", ".join(raised))})
    return found


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
    found += volume_growth_problems(observed)
    policy = (observed.get("maintenance") or {}).get("defragmentation") or {}
    if policy.get("schedule"):
        try:
            parse_schedule(policy["schedule"])
        except ScheduleError as exc:
            found.append(
                {
                    "reason": "InvalidDefragmentationSchedule",
                    "message": f"spec.maintenance.defragmentation.schedule: {exc}; no "
                    "scheduled defragmentation is made until it is corrected",
                }
            )
    return found


def _compaction_record(info: dict, observed: dict, current: dict) -> dict | None:
    """status.maintenance.lastCompaction: the revision the history is compacted to and when the
    operator first saw it there (etcd compacts by itself, spec.options.autoCompaction, and
    says when to no client: the time is the observation's, a reconcile after it). What was
    recorded when etcd was not asked; {} to remove a record that no longer holds (a store
    never compacted since it was restored); None: nothing to write."""
    record = (current.get("maintenance") or {}).get("lastCompaction") or {}
    revision = info.get("compacted_revision")
    if revision is None:
        return record or None
    if not revision:
        return {} if record else None
    if record.get("revision") == revision:
        return record
    return {"revision": revision, "observedAt": observed.get("now")}


def _schedule_record(observed: dict, current: dict) -> dict | None:
    """status.maintenance.schedule: the defragmentation schedule and since when the operator
    counts it ({} to remove the record of a schedule removed; None: nothing to write)."""
    expression = ((observed.get("maintenance") or {}).get("defragmentation") or {}).get("schedule")
    record = (current.get("maintenance") or {}).get("schedule") or {}
    if not expression:
        return {} if record else None
    if record.get("expression") == expression:
        return record
    return {"expression": expression, "since": observed.get("now")}


def _queued_defragmentation(observed: dict, current: dict, step: dict) -> dict | None:
    """The defragmentation requested through the annotation that waits for another step
    ({request, waitingFor}), or None."""
    request = observed.get("defragment_request") or ""
    last = last_defragmentation(current).get("request")
    if not request or request == last or step.get("maintenance", {}).get("request") == request:
        return None
    return {"request": request, "waitingFor": step["message"]}


# A member's database this full of its quota gets a warning (NOSPACE comes at 100%).
NEAR_QUOTA_PERCENT = 80


def _members_crossing(current_members: list | None, members: list[dict], field: str, percent):
    """The members whose ``field`` reached ``percent`` in this report and had not in the last
    one (current_members): each is warned once per crossing."""
    before = {m.get("name"): m.get(field) for m in current_members or []}
    return [
        member
        for member in members
        if member.get(field) is not None
        and member[field] >= percent
        and (before.get(member["name"]) or 0) < percent
    ]


def _near_quota_events(current_members: list | None, members: list[dict]) -> list[dict]:
    """A Warning for each member whose database crossed NEAR_QUOTA_PERCENT of its quota."""
    events = []
    for member in _members_crossing(
        current_members, members, "quotaUsedPercent", NEAR_QUOTA_PERCENT
    ):
        in_use = member.get("dbSizeInUse", member["dbSize"])
        events.append(
            {
                "reason": "DatabaseNearQuota",
                "type": "Warning",
                "message": f"member {member['name']}'s database uses "
                f"{member['quotaUsedPercent']}% of its quota ({human_bytes(member['dbSize'])}, "
                f"{human_bytes(in_use)} in use): etcd refuses writes at 100% (NOSPACE). Delete "
                "keys you no longer need, or raise spec.options.quotaBackendBytes within the "
                "volume",
            }
        )
    return events


# A member whose database and write-ahead log room take this much of its volume gets a
# warning: etcd stops with ENOSPC when the disk is full, whatever its quota.
NEARLY_FULL_VOLUME_PERCENT = 90


def _nearly_full_volume_events(
    current_members: list | None, members: list[dict], capacities: dict
) -> list[dict]:
    """A Warning for each member whose volumeUsedPercent crossed NEARLY_FULL_VOLUME_PERCENT
    (set only for a member whose claim's capacity is known)."""
    events = []
    for member in _members_crossing(
        current_members, members, "volumeUsedPercent", NEARLY_FULL_VOLUME_PERCENT
    ):
        capacity = int(capacities[member["name"]])
        events.append(
            {
                "reason": "VolumeNearlyFull",
                "type": "Warning",
                "message": f"member {member['name']}'s database ({human_bytes(member['dbSize'])}) "
                "and the room etcd's write-ahead log takes "
                f"({human_bytes(wal_room(capacity))}) fill {member['volumeUsedPercent']}% of "
                f"its {human_bytes(capacity)} volume: etcd stops with ENOSPC when the disk is "
                "full, before its quota trips. Grow the volume "
                "(spec.storage.volumeClaimTemplate), or lower spec.options.quotaBackendBytes; a "
                "defragmentation gives back free pages",
            }
        )
    return events


def _monitoring_events(current: dict, monitoring: dict | None) -> list[dict]:
    """A Warning when the monitoring objects asked for cannot be made, once per message."""
    if not monitoring or monitoring["status"] == "True" or monitoring["reason"] == NOT_REQUESTED:
        return []
    before = next((c for c in current.get("conditions") or [] if c.get("type") == "Monitoring"), {})
    if before.get("message") == monitoring["message"]:
        return []
    return [{"reason": monitoring["reason"], "type": "Warning", "message": monitoring["message"]}]


UNSPREAD_REASONS = ("QuorumOnOneNode", "QuorumInOneZone")


def _spread_condition(members: list, cluster: str, pods: dict, zones: dict) -> dict | None:
    """MembersSpread: whether losing one node (or one zone, where nodes are labelled with
    one) keeps a quorum of the voting members. None while no voting member's pod has a node."""
    placed = {}
    for member in members:
        name = member_peer_name(member, cluster)
        node = (pods.get(name) or {}).get("node")
        if node and not member.get("is_learner"):
            placed[name] = node
    voters = sum(1 for m in members if not m.get("is_learner"))
    if not placed:
        return None
    can_lose = voters - (voters // 2 + 1)
    if can_lose == 0:
        # One or two voting members lose quorum with any one of them, wherever they run: no
        # placement is at fault (a member being replaced is such a moment), so no warning.
        return {
            "type": "MembersSpread",
            "status": "False",
            "reason": "TooFewMembersToSpread",
            "message": f"{voters} voting member{'s' if voters > 1 else ''}: losing any one "
            "loses quorum wherever it runs; 3 or more members spread over nodes keep a "
            "quorum through the loss of one",
        }
    domains = [("node", "QuorumOnOneNode", placed)]
    if any(zones.get(node) for node in placed.values()):
        in_zone = {name: zones.get(node) or f"no zone ({node})" for name, node in placed.items()}
        domains.append(("zone", "QuorumInOneZone", in_zone))
    for kind, reason, where in domains:
        held = {}
        for name, domain in where.items():
            held.setdefault(domain, []).append(name)
        domain, names = max(held.items(), key=lambda item: (len(item[1]), item[0]))
        if len(names) > can_lose:
            names = sorted(names, key=ordinal_of)
            return {
                "type": "MembersSpread",
                "status": "False",
                "reason": reason,
                "message": f"{_members_named(names)} of {voters} voting members run on {kind} "
                f"{domain}: losing it loses quorum ({voters // 2 + 1} needed). Members are "
                f"spread by a preferred anti-affinity when the nodes allow it; add nodes, or "
                f"require it through spec.podTemplate.affinity",
            }
    nodes = sorted(set(placed.values()))
    where = f"{len(nodes)} nodes ({', '.join(nodes)})"
    if len(domains) > 1:
        where += f" in {len(set(domains[1][2].values()))} zones"
    return {
        "type": "MembersSpread",
        "status": "True",
        "reason": "SpreadAcrossFailureDomains",
        "message": f"{len(placed)} voting members on {where}: losing one keeps a quorum",
    }


def _members_named(names: list[str]) -> str:
    return f"member {names[0]}" if len(names) == 1 else f"members {', '.join(names)}"


def _cluster_version(info: dict, previous: str) -> str:
    """etcd's cluster version, or the last known one while etcd has not decided it (it says
    ``not_decided``, or ``3.0.0`` for a moment after a cluster forms)."""
    version = info.get("cluster_version") or ""
    if not DECIDED_CLUSTER_VERSION.match(version):
        return previous
    if version == PLACEHOLDER_CLUSTER_VERSION:
        started = [m.get("version") for m in info.get("members", []) if m.get("version")]
        if any(not v.startswith("3.0.") for v in started):
            return previous
    return version


def _member_status(
    member: dict,
    cluster: str,
    pods: dict,
    alarms: list | None = None,
    wanted_config=None,
    quotas: dict | None = None,
    capacities: dict | None = None,
) -> dict:
    name = member_peer_name(member, cluster)
    pod = pods.get(name) or {}
    status = {
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
    # Sizes only from a member that answered: a missing size is unknown, not zero.
    if member.get("db_size") is not None:
        status["dbSize"] = int(member["db_size"])
    if member.get("db_size_in_use") is not None:
        status["dbSizeInUse"] = int(member["db_size_in_use"])
    if "dbSize" in status:
        status["quotaUsedPercent"] = quota_used_percent(status["dbSize"], (quotas or {}).get(name))
        on_volume = volume_used_percent(status["dbSize"], (capacities or {}).get(name))
        if on_volume is not None:
            status["volumeUsedPercent"] = on_volume
        if "dbSizeInUse" in status and status["dbSize"]:
            status["fragmentedPercent"] = fragmented_percent(
                status["dbSize"], status["dbSizeInUse"]
            )
    raised = sorted(a.get("alarm") for a in alarms or [] if a.get("member_id") == member.get("id"))
    if raised:
        status["alarms"] = raised
    if wanted_config and pod.get("config_hash"):
        status["configUpToDate"] = pod["config_hash"] == wanted_config
    return status


def _peer_status(peer: dict, member: dict | None, pod: dict | None, lost: bool) -> dict:
    pod = pod or {}
    ready = bool(pod.get("ready")) and not lost
    status = {"ready": ready, "podName": pod.get("name", "")}
    if member and member.get("id"):
        status["memberID"] = member["id"]
    if member and member.get("version"):
        status["serverVersion"] = member["version"]
    if member and member.get("healthy") and pod.get("config_hash"):
        # What the member was seen serving with, as serverVersion is for its version.
        status["configHash"] = pod["config_hash"]
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
        higher = (version_or_none(now) or ()) > (version_or_none(before) or ())
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


def _reconfiguring(peer: dict) -> bool:
    """Whether the member's EtcdPeer asks for another configuration than it was last seen
    serving with: its pod is replaced on purpose (qk_plan_config's rolling restart)."""
    seen = (peer.get("status") or {}).get("configHash")
    return bool(seen) and seen != peer.get("config_hash")


def _reconfigured_events(
    peers: list[dict], peer_statuses: list[dict], members: list[dict]
) -> list[dict]:
    """An Event for each member seen serving with its EtcdPeer's new configuration."""
    written = {p["name"]: p["status"].get("configHash") for p in peer_statuses}
    up_to_date = sum(1 for m in members if m.get("configUpToDate"))
    events = []
    for peer in peers:
        if not _reconfiguring(peer) or written.get(peer["name"]) != peer.get("config_hash"):
            continue
        events.append(
            {
                "reason": "MemberReconfigured",
                "type": "Normal",
                "message": f"member {peer['name']} serves with its new configuration "
                f"(spec.options and spec.podTemplate), with its data and member ID; "
                f"{up_to_date} of {len(members)} members up to date",
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
