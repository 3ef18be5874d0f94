# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The one gate and the one order of every rolling restart of members: the rolling upgrade
(qk_plan_upgrade) and the rolling restart onto a new configuration (qk_plan_config).

A member is restarted only when every member is healthy, its pod ready and caught up with the
leader, and no alarm is raised; followers go first, the highest ordinal first, and the leader
last, after handing its leadership to a member already restarted (no election is needed when it
stops).
"""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    member_peer_name,
    ordinal_of,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_step import (
    PlanContext,
    Step,
    make_step,
)

# A member has caught up with the leader when its raft index is at most this far behind; the
# indexes come from status calls made at the same moment, so a live cluster differs by a few.
MAX_RAFT_LAG = 100


def _alarms(ctx: PlanContext) -> list[dict]:
    alarms = ctx.etcd.get("alarms")
    return alarms if isinstance(alarms, list) else []


def membership_changing(ctx: PlanContext) -> bool:
    """Whether membership is not as the spec says or is changing (a learner, a member without
    a peer or a peer without a member, members to add or remove): finished before a rollout."""
    if not ctx.reachable:
        return len(ctx.live_peers) != ctx.replicas
    return (
        bool(ctx.learners)
        or set(ctx.by_peer) != set(ctx.live_peers)
        or len(ctx.voters) != ctx.replicas
    )


def space_recovery_first(ctx: PlanContext) -> bool:
    """Whether only NOSPACE is raised: the space is given back first (recover_space), and the
    rollout goes on afterwards."""
    alarms = _alarms(ctx)
    return bool(alarms) and all(a.get("alarm") == "NOSPACE" for a in alarms)


def restart_gate(
    ctx: PlanContext, doing: str, reason: str, allowed_alarms: tuple[str, ...] = ()
) -> Step | None:
    """None when a member may be restarted now, else the wait step that says why not.

    ``doing`` starts the message ("upgrading to 3.6.16 (1 of 3 members on 3.6.16)"), ``reason``
    is the step's reason while the rollout waits for something that comes by itself.
    ``allowed_alarms``: alarms the restart is the cure for (NOSPACE, for the larger quota a
    grown volume brings: qk_plan_space.recover_space).
    """
    members = ctx.by_peer
    unhealthy = sorted((n for n, m in members.items() if not m.get("healthy")), key=ordinal_of)
    if unhealthy:
        return make_step(
            "wait",
            "MembersUnhealthy",
            f"{doing} waits for unhealthy members to recover: {', '.join(unhealthy)}",
            "degraded",
        )
    alarms = [a for a in _alarms(ctx) if a.get("alarm") not in allowed_alarms]
    if alarms:
        by_id = {m.get("id"): n for n, m in members.items()}
        active = ", ".join(
            f"{a.get('alarm')} on {by_id.get(a.get('member_id'), a.get('member_id'))}"
            for a in alarms
        )
        return make_step(
            "wait", "AlarmActive", f"{doing} waits: etcd alarm {active} is active", "degraded"
        )
    unready = sorted(
        (n for n in members if not (ctx.pods.get(n) or {}).get("ready")), key=ordinal_of
    )
    leader = next((m for m in members.values() if m.get("is_leader")), None)
    behind = [
        f"{n} (raft index {m.get('raft_index')} of {leader.get('raft_index')})"
        for n, m in sorted(members.items(), key=lambda item: ordinal_of(item[0]))
        if leader and (m.get("raft_index") or 0) + MAX_RAFT_LAG < (leader.get("raft_index") or 0)
    ]
    if not (unready or behind) and leader is not None:
        return None
    waiting = (
        f"the pods of {', '.join(unready)} to be ready"
        if unready
        else f"{', '.join(behind)} to catch up with the leader"
        if behind
        else "a leader"
    )
    return make_step("wait", reason, f"{doing}: waiting for {waiting}", "poll")


def next_to_restart(ctx: PlanContext, moving: list[str], done) -> tuple[str, str | None]:
    """The member to restart next among ``moving`` (ordered, highest ordinal first) and the
    member its leadership moves to first ("" for none).

    The first follower; the leader only when no follower is left, handing leadership to the
    member restarted with the most raft entries (``done(name, member)`` says which are). None
    instead of a member to hand it to when there is none: the caller waits rather than
    restart the leader.
    """
    members = ctx.by_peer
    leader = next((m for m in members.values() if m.get("is_leader")), None)
    leader_name = member_peer_name(leader, ctx.cluster) if leader else ""
    followers = [n for n in moving if n != leader_name]
    if followers or not leader_name:
        return (followers or moving)[0], ""
    if len(members) == 1:
        return leader_name, ""
    restarted = [
        m for n, m in members.items() if n != leader_name and not m.get("is_learner") and done(n, m)
    ]
    best = max(restarted, key=lambda m: m.get("raft_index") or 0, default=None)
    return leader_name, member_peer_name(best, ctx.cluster) if best else None
