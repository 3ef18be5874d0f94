# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The EtcdCluster planner's rolling upgrade: a change of spec.version (the rule
``rolling_upgrade``, see its doc), and the version a member added now starts with.

The restart of one member's pod is qk_upgrade's (roles/etcdcluster/tasks/upgrade_member.yml).
"""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    member_peer_name,
    minor_version,
    ordinal_of,
    seconds_between,
    version_or_none,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_rollout import (
    membership_changing,
    next_to_restart,
    restart_gate,
    space_recovery_first,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_step import (
    PlanContext,
    Step,
    make_step,
)

DEFAULT_UPGRADE_MEMBER_TIMEOUT_SECONDS = 300
# etcd's own upgrade guides: the lowest version every member must run before the minor version
# on the left. 3.6: "make sure that all of your 3.5 members are updated to 3.5.32 or later"
# (etcd.io/docs/v3.6/upgrades/upgrade_3_6, after the 3.5 membership and v2store fixes).
MINIMUM_VERSION_BEFORE = {(3, 6): (3, 5, 32)}
# etcd reports this cluster version until the members have agreed on the real one.
PLACEHOLDER_CLUSTER_VERSION = "3.0.0"


def rolling_upgrade(ctx: PlanContext) -> Step | None:
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
    peers, info = ctx.live_peers, ctx.etcd
    target = str(ctx.observed.get("version") or "")
    wanted = version_or_none(target)
    if not wanted or not peers or any(ctx.lost_data(n) for n in peers):
        # A member whose data is gone is replaced (or the cluster recovered) first.
        return None
    members = ctx.by_peer
    landed, returning, moving, down = [], [], [], []
    for name, peer in sorted(peers.items(), key=lambda item: -ordinal_of(item[0])):
        member = members.get(name)
        gone = ctx.reachable and peer.get("member_id") and member is None
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
        return _upgrade_wait_for(ctx, name, peers[name], members.get(name), target, count)
    if not moving and not down:
        return _cluster_version_catching_up(ctx, target, count)
    if membership_changing(ctx):
        return None
    refused = _upgrade_refused(ctx, target)
    if refused:
        return refused
    if down:
        return _upgrade_down_member(ctx, down[0], target, count)
    if not info.get("healthy"):
        return None
    return _upgrade_next_member(ctx, moving, target, count)


def new_member_version(ctx: PlanContext) -> str:
    """The version a member added now starts with: the lowest version a member runs while an
    upgrade is not finished (etcd's cluster version is the lowest of its members', so it can
    always join; the upgrade moves it after), else spec.version."""
    target = str(ctx.observed.get("version") or "")
    running = [
        v
        for name, peer in ctx.live_peers.items()
        for v in [_last_version(peer, ctx.by_peer.get(name))]
        if version_or_none(v)
    ]
    lowest = min(running, key=version_or_none, default="")
    behind = lowest and version_or_none(lowest) < (version_or_none(target) or ())
    return lowest if behind else target


def _running_version(member: dict | None) -> str:
    """The version a member's etcd reports now ("" when it does not answer)."""
    return (member or {}).get("version") or "" if (member or {}).get("healthy") else ""


def _last_version(peer: dict, member: dict | None) -> str:
    """The version a member runs, or ran when it last answered (its EtcdPeer's
    status.serverVersion); "" for a member that never ran."""
    return _running_version(member) or (peer.get("status") or {}).get("serverVersion") or ""


def _upgrade_timeout(ctx: PlanContext) -> int:
    settings = ctx.observed.get("upgrade") or {}
    return int(settings.get("memberTimeoutSeconds") or DEFAULT_UPGRADE_MEMBER_TIMEOUT_SECONDS)


def _upgrade_wait_for(ctx: PlanContext, name, peer, member, target, count) -> Step:
    """A member restarted for the upgrade that has not reported the new version yet."""
    previous = (peer.get("status") or {}).get("serverVersion") or "the previous version"
    pod = ctx.pods.get(name) or {}
    since = pod.get("created")
    # Without ``now`` in the observation, the time is the current one.
    elapsed = seconds_between(since, ctx.observed.get("now") or None) if since else 0.0
    timeout = _upgrade_timeout(ctx)
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
        return make_step(
            "wait",
            "Upgrading",
            f"upgrading to {target}, {count}: waiting for {name} to come back on {target} "
            f"(restarted {int(elapsed)}s ago)",
            "poll",
            upgrade={"member": name, "target": target},
        )
    return make_step(
        "wait",
        "UpgradeFailed",
        f"upgrade to {target} stopped at member {name} ({count}): {why}; {rollback}",
        "degraded",
        upgrade={"member": name, "target": target},
    )


def _upgrade_refused(ctx: PlanContext, target: str) -> Step | None:
    """etcd's upgrade rules, checked against what the members run (the CRD can only compare
    the spec with its previous value): no minor version skipped, the minimum patch before a
    minor upgrade, and no minor downgrade once etcd's cluster version has moved."""
    wanted = version_or_none(target)
    running = {}
    for name, peer in ctx.live_peers.items():
        version = _last_version(peer, ctx.by_peer.get(name))
        if version_or_none(version):
            running[name] = version

    def holding(predicate):
        names = sorted(
            (n for n, v in running.items() if predicate(version_or_none(v))), key=ordinal_of
        )
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
    cluster_version = ctx.etcd.get("cluster_version") if ctx.reachable else None
    if not version_or_none(cluster_version) or cluster_version == PLACEHOLDER_CLUSTER_VERSION:
        cluster_version = (ctx.observed.get("current") or {}).get("clusterVersion")
    decided = version_or_none(cluster_version)
    if decided and decided[:2] > wanted[:2]:
        minor = minor_version(cluster_version)
        return _refuse(
            f"spec.version {target} is a minor downgrade, and etcd's cluster version is already "
            f"{cluster_version} (every member ran {minor}, and the data may use "
            f"its features): the operator downgrades the minor version only before an upgrade "
            f"has finished; set spec.version to a {minor}.x release"
        )
    return None


def _members_of(listing: str) -> str:
    return "members run" if "," in listing else "member runs"


def _refuse(message: str) -> Step:
    return make_step("wait", "UpgradeRefused", f"upgrade refused: {message}", "degraded")


def _upgrade_down_member(ctx: PlanContext, name: str, target: str, count: str) -> Step | None:
    """A member down on a version it never reported and the spec no longer asks for (its new
    image could not be pulled, and the spec went back): restarting it costs nothing when all
    the others are healthy; else the wait for members is reported as usual."""
    others = [
        m
        for m in ctx.members
        if not m.get("is_learner") and member_peer_name(m, ctx.cluster) != name
    ]
    if not all(m.get("healthy") for m in others) or (
        len(ctx.live_peers) > 1 and not ctx.etcd.get("healthy")
    ):
        return None
    peer = ctx.live_peers[name]
    last = _last_version(peer, None)
    return make_step(
        "upgrade_member",
        "Upgrading",
        f"moving member {name}, which is down on {peer.get('version')}, to {target} "
        f"({count}; it ran {last or 'nothing yet'} before)",
        "next",
        peer=name,
        member=next((m for m in ctx.members if member_peer_name(m, ctx.cluster) == name), None),
        version=target,
        repository=ctx.observed.get("repository") or peer.get("repository"),
        from_version=last,
        move_leader_to="",
    )


def _upgrade_next_member(
    ctx: PlanContext, moving: list[str], target: str, count: str
) -> Step | None:
    """The rollout gate (qk_plan_rollout: every member healthy, its pod ready, caught up with
    the leader, no alarm), then the next member: the highest ordinal that does not lead, the
    leader last."""
    if space_recovery_first(ctx):
        return None
    waiting = restart_gate(ctx, f"upgrading to {target} ({count})", "Upgrading")
    if waiting:
        return waiting
    name, move_to = next_to_restart(
        ctx, moving, lambda _name, member: _running_version(member) == target
    )
    if move_to is None:
        # No member runs the new version yet while the leader is the last one left: never
        # the case when the followers went first; wait rather than restart the leader.
        return make_step(
            "wait",
            "Upgrading",
            f"upgrading to {target}, {count}: waiting for a member on {target} to hand "
            f"leadership of {name} to",
            "poll",
        )
    member = ctx.by_peer[name]
    old = _running_version(member)
    then = f"; leadership moves to {move_to} first" if move_to else ""
    what = (
        f"pointing the EtcdPeer of {name}, which runs {target}, at {target}"
        if old == target
        else f"upgrading member {name} from {old} to {target}"
    )
    return make_step(
        "upgrade_member",
        "Upgrading",
        f"{what} ({count}){then}",
        "next",
        peer=name,
        member=member,
        version=target,
        repository=ctx.observed.get("repository") or "",
        from_version=old,
        move_leader_to=move_to,
    )


def _cluster_version_catching_up(ctx: PlanContext, target: str, count: str) -> Step | None:
    """Every member runs the new version: etcd raises the cluster version by itself a few
    seconds later (its leader checks every few seconds); the upgrade is done then."""
    if not ctx.etcd.get("healthy") or membership_changing(ctx):
        return None
    version = ctx.etcd.get("cluster_version") or ""
    decided = version_or_none(version)
    if (
        not decided
        or version == PLACEHOLDER_CLUSTER_VERSION
        or decided[:2] >= version_or_none(target)[:2]
    ):
        return None
    return make_step(
        "wait",
        "Upgrading",
        f"{count}: waiting for etcd to raise the cluster version from {version} to "
        f"{minor_version(target)}",
        "poll",
    )
