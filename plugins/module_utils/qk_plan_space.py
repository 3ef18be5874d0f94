# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The EtcdCluster planner's care of the members' databases: its answer to etcd's NOSPACE
alarm (the rule ``recover_space``) and the defragmentation policy (the rule ``defragment``).

With NOSPACE raised, etcd serves reads and deletes but refuses every write until a person
compacts, defragments and disarms. The operator does it (roles/etcdcluster/tasks/
defragment.yml, module etcd_defragment) as one step, with the quorum-safe order of
qk_maintenance. When the alarm is back soon after a recovery, what etcd holds *now* is at the
quota: repeating would only rewrite every database again, so the step waits and says what a
person can do.
"""

from __future__ import annotations

import dataclasses
import datetime

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_GROUP,
    alarmed_peers,
    ordinal_of,
    seconds_between,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_maintenance import (
    last_defragmentation,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    bytes_quantity,
    default_quota_bytes,
    fragmented_percent,
    quantity_bytes,
    quota_used_percent,
    volume_used_percent,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_config import roll_config
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_rollout import (
    membership_changing,
    restart_gate,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_step import (
    PlanContext,
    Step,
    make_step,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_volumes import (
    member_claims,
    volumes_changing,
    wanted_volume_bytes,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_schedule_time import (
    ScheduleError,
    format_time,
    parse_schedule,
    parse_time,
)

# A NOSPACE alarm back within this long after the operator reclaimed space, when that left the
# live data at the quota, is not recovered from again before it has passed.
SPACE_RECOVERY_RETRY_SECONDS = 300
# A recovery that leaves a member's database this full of its quota cannot help a second time.
SPACE_RECOVERY_FULL_PERCENT = 80
MIB = 1 << 20


def recover_space(ctx: PlanContext) -> Step | None:
    """NOSPACE raised, a healthy quorum, every voter healthy (``unhealthy_members`` comes
    first): compact, defragment member by member and disarm (``defragment``); or wait when
    the alarm came back within SPACE_RECOVERY_RETRY_SECONDS of the last recovery."""
    if not ctx.has_quorum:
        return None
    raised = alarmed_peers(ctx.etcd.get("alarms"), ctx.members, ctx.cluster, "NOSPACE")
    if not raised:
        return None
    last = last_defragmentation(ctx.observed.get("current"))
    since = seconds_between(last.get("at"), ctx.observed.get("now"))
    in_use = max((m.get("db_size_in_use") or 0) for m in ctx.members)
    if (
        last.get("reason") == "NOSPACE"
        and since is not None
        and since < SPACE_RECOVERY_RETRY_SECONDS
        and _live_data_filled_the_quota(ctx, last)
    ):
        filled = (
            f"etcd raised NOSPACE again on {', '.join(raised)} {int(since)}s after the operator "
            f"compacted and defragmented it: the live data ({in_use // MIB} MiB in use) fills "
            "the backend quota"
        )
        room = make_room(ctx, filled)
        if isinstance(room, dict):
            return room
        return make_step(
            "wait",
            "DatabaseQuotaExceeded",
            f"{filled}. etcd serves reads and deletes only: delete keys, or raise "
            "spec.options.quotaBackendBytes within the volume, or grow the volume "
            "(spec.storage; the quota derived from it follows), or let the operator grow it "
            "(spec.maintenance.spaceRecovery.maxVolumeSize)"
            + (f" ({room})" if room else "")
            + ", rolled out once the space is given back again. The operator tries again "
            f"{SPACE_RECOVERY_RETRY_SECONDS}s after its last attempt",
            "degraded",
        )
    return make_step(
        "defragment",
        "DatabaseQuotaExceeded",
        f"etcd raised NOSPACE on {', '.join(raised)} and refuses writes: compacting to the "
        "current revision, defragmenting the members one at a time (the leader last, after "
        "moving leadership), then disarming the alarm",
        members=[{"name": name} for name in raised],
        maintenance={"compact": True, "disarm": True, "reason": "NOSPACE"},
    )


def make_room(ctx: PlanContext, filled: str) -> Step | str:
    """What spec.maintenance.spaceRecovery lets the operator do for a cluster whose live data
    fills the quota (``filled`` says so): the next step towards a larger quota, or why it
    cannot help ("" without the policy).

    A quota that spec.options.quotaBackendBytes sets is raised (maxQuotaBackendBytes: doubled,
    at most to the limit and to the quota the operator would derive from the volume, which
    leaves room for the write-ahead log and a defragmentation); a quota derived from the
    volume follows the volume, which grows in place (maxVolumeSize: doubled, at most to the
    limit). Either size is recorded in status.maintenance.spaceRecovery and read as the
    spec's from then on (qk_options.grown_spec). The operator waits for the volumes to grow,
    then rolls the members onto the larger quota one at a time with the alarm still raised
    (writes are refused anyway; the restart is the cure); with the larger quota recover_space
    gives the space back and disarms. Only claims whose StorageClass allows expansion are
    grown: moving members to new volumes adds a member, which waits for the space to be given
    back first."""
    policy = (ctx.observed.get("maintenance") or {}).get("spaceRecovery") or {}
    volume_limit = policy.get("maxVolumeSize") or None
    quota_limit = policy.get("maxQuotaBackendBytes") or None
    if volume_limit is None and quota_limit is None:
        return ""
    size = wanted_volume_bytes(ctx.observed)
    if size is None:
        return "spec.maintenance.spaceRecovery needs spec.storage"
    if volumes_changing(ctx):
        return make_step(
            "wait",
            "VolumesGrowing",
            f"{filled}: waiting for the volumes to grow to {bytes_quantity(size)}; the larger "
            "quota is rolled out after",
            "poll",
        )
    config = ctx.observed.get("config") or {}
    quota = (config.get("options") or {}).get("quotaBackendBytes")
    if quota and any(
        (peer.get("quota_bytes") or 0) < quota
        for name, peer in ctx.live_peers.items()
        if name in ctx.by_peer
    ):
        return _roll_out_quota(ctx, filled, "restarting onto the larger quota")
    if str(ctx.observed.get("quota_set")).lower() == "true":
        if quota_limit is None:
            return (
                "spec.options.quotaBackendBytes sets the quota: "
                "spec.maintenance.spaceRecovery.maxQuotaBackendBytes lets the operator raise it"
            )
        ceiling = min(quantity_bytes(quota_limit), default_quota_bytes(size) or 0)
        raise_to = min(2 * quota, ceiling) // MIB * MIB
        if raise_to > quota:
            return _raise_quota(ctx, filled, config, quota, raise_to, quota_limit)
        if quota >= quantity_bytes(quota_limit):
            return (
                "the quota is at spec.maintenance.spaceRecovery.maxQuotaBackendBytes "
                f"({quota_limit}) already"
            )
        if volume_limit is None:
            return (
                f"the quota ({quota // MIB} MiB) is the most the {bytes_quantity(size)} volumes "
                "leave room for: spec.maintenance.spaceRecovery.maxVolumeSize lets the operator "
                "grow them"
            )
    elif volume_limit is None:
        return (
            "the quota derived from the volumes grows with them: "
            "spec.maintenance.spaceRecovery.maxVolumeSize lets the operator grow them"
        )
    return _grow_volumes(ctx, filled, size, volume_limit)


def _roll_out_quota(ctx: PlanContext, filled: str, why: str) -> Step | str:
    """The rolling restart onto a larger quota, with the alarm raised."""
    rollout = roll_config(ctx, for_space=True)
    if rollout is None:
        return "the larger quota waits for another change to finish"
    if rollout["action"] == "restart_member":
        rollout["message"] += f": {filled}, {why}"
    return rollout


def _raise_quota(
    ctx: PlanContext, filled: str, config: dict, quota: int, raise_to: int, limit
) -> Step | str:
    """The first restart onto the raised quota; the step records it (its space_recovery), and
    the rounds after read it from the status."""
    raised = {**config, "options": {**config["options"], "quotaBackendBytes": raise_to}}
    step = _roll_out_quota(
        dataclasses.replace(ctx, observed={**ctx.observed, "config": raised}),
        filled,
        f"raising the quota from {quota // MIB} MiB to {raise_to // MIB} MiB "
        f"(spec.maintenance.spaceRecovery.maxQuotaBackendBytes {limit})",
    )
    if isinstance(step, dict) and step["action"] == "restart_member":
        step["reason"] = "RaisingQuotaForSpace"
        step["space_recovery"] = {"quotaBackendBytes": raise_to, "raisedFrom": quota}
    return step


def _grow_volumes(ctx: PlanContext, filled: str, size: int, limit) -> Step | str:
    """Growing the expandable volumes for space, doubled, at most to ``limit``."""
    grow_to = min(2 * size, quantity_bytes(limit))
    if grow_to <= size:
        return f"the volumes have spec.maintenance.spaceRecovery.maxVolumeSize ({limit}) already"
    claims = member_claims(ctx)
    fixed = [name for name, claim in claims if not claim.get("expandable")]
    if fixed or not claims:
        return (
            "the operator grows volumes only in place, and the StorageClass of "
            f"{', '.join(fixed) or 'the members'} does not allow expansion"
        )
    to, grown_from = bytes_quantity(grow_to), bytes_quantity(size)
    return make_step(
        "grow_volumes",
        "GrowingVolumesForSpace",
        f"{filled}: growing the volumes of {', '.join(name for name, _ in claims)} from "
        f"{grown_from} to {to} (spec.maintenance.spaceRecovery.maxVolumeSize {limit}), then "
        "restarting the members one at a time onto the larger quota that follows, then giving "
        "the space back and disarming the alarm",
        "poll",
        members=[{"name": name} for name, _ in claims],
        space_recovery={"volumeSize": to, "grownFrom": grown_from},
    )


def _live_data_filled_the_quota(ctx: PlanContext, last: dict) -> bool:
    """Whether the last recovery left a member's database (its live data, compacted and
    defragmented) at SPACE_RECOVERY_FULL_PERCENT of its quota or more: then recovering again
    gives nothing back. A recovery recorded without sizes counts as full. A writer that filled
    the quota with history again (overwrites) is recovered from again at once."""
    members = last.get("members") or []
    if not members:
        return True
    return any(
        quota_used_percent(
            m.get("dbSizeAfter") or 0, (ctx.live_peers.get(m.get("name")) or {}).get("quota_bytes")
        )
        >= SPACE_RECOVERY_FULL_PERCENT
        for m in members
    )


# spec.maintenance.defragmentation's defaults: a member is defragmented when at least
# minReclaim would come back and either that much of its database is free pages, or its
# database is that close to its quota, or it and the write-ahead log's room are that close to
# filling its volume (qk_options.volume_used_percent).
DEFAULT_THRESHOLDS = {
    "enabled": True,
    "fragmentedPercent": 50,
    "quotaUsedPercent": 80,
    "volumeUsedPercent": 80,
    "minReclaim": 64 * MIB,
}
# A scheduled time missed by more than this (the operator was down) is skipped, and a schedule
# added to a cluster does not start with the time it just missed.
SCHEDULE_STARTING_DEADLINE_SECONDS = 3600
# A threshold is not acted on again this soon after a defragmentation: what it freed may take
# a moment to show in the member's status.
THRESHOLD_PAUSE_SECONDS = 300
DEFRAGMENT_REQUEST_ANNOTATION = f"{API_GROUP}/defragment"


def defragment(ctx: PlanContext) -> Step | None:
    """spec.maintenance.defragmentation, when nothing else is to be done (the rule comes after
    every membership change, the upgrade and the rolling restart): a request (the
    DEFRAGMENT_REQUEST_ANNOTATION set to a new value) or a scheduled time defragments every
    member, a threshold the members over it. Only with a healthy quorum, every voting member
    healthy and caught up and no alarm; the order (followers first, the leader last after
    moving leadership) is etcd_defragment's."""
    if not ctx.has_quorum or membership_changing(ctx) or ctx.etcd.get("alarms"):
        return None
    why = _defragmentation_due(ctx)
    if why is None:
        return None
    trigger, names, message = why
    waiting = restart_gate(ctx, f"defragmenting ({message})", "Defragmenting")
    if waiting:
        return waiting
    return make_step(
        "defragment",
        "Defragmenting",
        f"defragmenting {', '.join(names)} one at a time ({message}; followers first, the "
        "leader last after moving leadership)",
        members=[{"name": name} for name in names],
        maintenance={"compact": False, "disarm": False, **trigger},
    )


def _defragmentation_due(ctx: PlanContext):
    """(trigger, member names, what for) of the defragmentation due now, or None."""
    policy = (ctx.observed.get("maintenance") or {}).get("defragmentation") or {}
    last = last_defragmentation(ctx.observed.get("current"))
    everyone = sorted(ctx.by_peer, key=ordinal_of)
    request = ctx.observed.get("defragment_request") or ""
    if request and request != last.get("request"):
        return (
            {"reason": "Requested", "request": request},
            everyone,
            f"requested by annotation {DEFRAGMENT_REQUEST_ANNOTATION}={request}",
        )
    scheduled = scheduled_defragmentation(ctx, policy)
    if scheduled and scheduled["due"]:
        return (
            {"reason": "Scheduled"},
            everyone,
            f"scheduled at {scheduled['due']} by {policy['schedule']!r}",
        )
    thresholds = {**DEFAULT_THRESHOLDS, **(policy.get("thresholds") or {})}
    since = seconds_between(last.get("at"), ctx.observed.get("now"))
    if not thresholds["enabled"] or (since is not None and since < THRESHOLD_PAUSE_SECONDS):
        return None
    over = _over_thresholds(ctx, thresholds)
    if not over:
        return None
    return (
        {"reason": "Threshold"},
        [name for name, _ in over],
        "; ".join(f"{name}: {why}" for name, why in over),
    )


def _over_thresholds(ctx: PlanContext, thresholds: dict) -> list[tuple[str, str]]:
    minimum = quantity_bytes(thresholds["minReclaim"])
    over = []
    for name in sorted(ctx.by_peer, key=ordinal_of):
        member = ctx.by_peer[name]
        size, in_use = member.get("db_size"), member.get("db_size_in_use")
        if not size or in_use is None or size - in_use < minimum:
            continue
        quota = (ctx.live_peers.get(name) or {}).get("quota_bytes")
        fragmented, used = fragmented_percent(size, in_use), quota_used_percent(size, quota)
        on_volume = volume_used_percent(size, (ctx.pvcs.get(name) or {}).get("capacity_bytes"))
        free = f"{(size - in_use) // MIB} MiB free"
        if fragmented >= thresholds["fragmentedPercent"]:
            over.append((name, f"{fragmented}% of its database is free pages, {free}"))
        elif used >= thresholds["quotaUsedPercent"]:
            over.append((name, f"its database is at {used}% of its quota, {free}"))
        elif (on_volume or 0) >= thresholds["volumeUsedPercent"]:
            over.append(
                (name, f"its database and write-ahead log take {on_volume}% of its volume, {free}")
            )
    return over


def scheduled_defragmentation(ctx: PlanContext, policy: dict) -> dict | None:
    """{due: the scheduled time due now or None, next: seconds until the next one} for
    spec.maintenance.defragmentation.schedule, or None without one (or with one that cannot
    be parsed: the CRD checks its shape, the operator reports nothing more)."""
    expression = policy.get("schedule")
    if not expression:
        return None
    try:
        schedule = parse_schedule(expression)
    except ScheduleError:
        return None
    now = (
        parse_time(ctx.observed["now"])
        if ctx.observed.get("now")
        else datetime.datetime.now(datetime.UTC)
    )
    after = now - datetime.timedelta(seconds=SCHEDULE_STARTING_DEADLINE_SECONDS)
    # Counted from when the operator first saw this schedule (the report records it), so that
    # a schedule added or changed does not start with a time it just missed.
    record = ((ctx.observed.get("current") or {}).get("maintenance") or {}).get("schedule") or {}
    since = record.get("since") if record.get("expression") == expression else None
    for bound in (since, last_defragmentation(ctx.observed.get("current")).get("at")):
        if bound:
            after = max(after, parse_time(bound))
    if since is None:
        after = now
    due = schedule.latest(now, after)
    following = schedule.following(now, max(after, due) if due else after)
    return {
        "due": format_time(due) if due else None,
        "next": max(1, int((following - now).total_seconds())),
    }
