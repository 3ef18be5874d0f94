# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The EtcdCluster planner's membership rules: bootstrap, repair, image correction, and the
quorum-safe changes of a formed cluster (create a missing peer, replace, promote, add, remove).

Each rule is ``(PlanContext) -> Step | None``; qk_plan.RULES orders them. A change of a formed
cluster's membership needs a healthy quorum: those rules return None without one (the quorum
rules of qk_plan_recovery, earlier in the order, say why nothing changes then).
"""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    image_reference,
    keeps_quorum,
    member_peer_name,
    ordinal_of,
    peer_name,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_config import (
    new_member_peer_scheme,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_space import (
    scheduled_defragmentation,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_step import (
    PlanContext,
    Step,
    make_step,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_upgrade import (
    new_member_version,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_volumes import (
    members_to_move,
    moving_to_new_volumes,
)

# --------------------------------------------------------------------------------------------
# Whatever the state
# --------------------------------------------------------------------------------------------


def repair_members(ctx: PlanContext) -> Step | None:
    """Peers whose ReplicaSet is gone (deleted by hand, or an interrupted reconcile): recreate it;
    the member's data is untouched."""
    # Whatever else is going on: a member whose ReplicaSet is gone gets it back (its data is
    # untouched), first of all because without its pod it may be what keeps quorum away.
    unrun = [
        name
        for name, _ in ctx.live_peers_by_ordinal()
        if not (ctx.replicasets.get(name) or {"exists": True}).get("exists")
        and not ctx.lost_data(name)
    ]
    if not unrun:
        return None
    return make_step(
        "repair_members",
        "RepairingMembers",
        f"recreating the ReplicaSets of members {', '.join(unrun)}",
        "event",
        members=[{"name": name} for name in unrun],
        observe_after=False,
    )


# --------------------------------------------------------------------------------------------
# A cluster that never formed (no member answers, every peer from the initial bootstrap)
# --------------------------------------------------------------------------------------------


def update_peers(ctx: PlanContext) -> Step | None:
    """A cluster that never formed because its pods cannot pull their image, whose version or
    repository was corrected since: point its peers at the corrected image."""
    if ctx.reachable or not _never_formed(ctx):
        return None
    mistaken = _never_started_with_another_image(ctx)
    if not mistaken:
        return None
    image = image_reference(ctx.observed.get("version"), ctx.observed.get("repository"))
    return make_step(
        "update_peers",
        "UpdatingMembers",
        f"members {', '.join(mistaken)} could not pull their image and never "
        f"started: moving them to {image}",
        "event",
        peers_to_update=mistaken,
        initial_cluster=_initial_cluster(ctx),
        observe_after=False,
    )


def bootstrap(ctx: PlanContext) -> Step | None:
    """No member answers and the peers (if any) all belong to the initial bootstrap: create the
    missing initial peers with the same static initial cluster, or wait for them to form a
    quorum."""
    if ctx.reachable or not _never_formed(ctx):
        return None
    initial = _initial_cluster(ctx)
    missing = [n for n in initial if n not in ctx.peers]
    if missing:
        return make_step(
            "bootstrap",
            "Bootstrapping",
            f"creating initial members {', '.join(missing)}",
            "event",
            initial_cluster=initial,
            peers_to_create=missing,
            # Started together, they are ready within a few seconds: reported Available in this
            # reconcile rather than in the ones their readiness would wake.
            wait_ready=missing,
        )
    return make_step(
        "wait", "Bootstrapping", "waiting for the initial members to form a quorum", "event"
    )


def _never_formed(ctx: PlanContext) -> bool:
    return all(p.get("state", "New") == "New" for p in ctx.live_peers.values())


def _never_started_with_another_image(ctx: PlanContext) -> list[str]:
    """Peers of a cluster that never formed whose pods cannot pull an image the EtcdCluster no
    longer asks for (its version or repository was corrected): nothing ever ran, so they can
    simply be pointed at the new image. Anything else about running members is an upgrade."""
    wanted = (ctx.observed.get("version"), ctx.observed.get("repository"))
    if not all(wanted):
        return []
    mistaken = []
    for name, peer in ctx.live_peers_by_ordinal():
        if (peer.get("version"), peer.get("repository")) == wanted:
            continue
        problem = (ctx.pods.get(name) or {}).get("problem") or {}
        if peer.get("member_id") or problem.get("reason") != "ImagePullFailed":
            return []
        mistaken.append(name)
    return mistaken


def _initial_cluster(ctx: PlanContext) -> list[str]:
    for peer in ctx.live_peers.values():
        if peer.get("initial_cluster"):
            return list(peer["initial_cluster"])
    return [peer_name(ctx.cluster, i) for i in range(ctx.replicas)]


# --------------------------------------------------------------------------------------------
# A formed cluster
# --------------------------------------------------------------------------------------------


def create_peer(ctx: PlanContext) -> Step | None:
    """etcd has a member (a learner we added) with no EtcdPeer: the operator was interrupted
    between adding the member and creating its peer."""
    # A member etcd knows but we have no peer for: finish what an interrupted scale-up started.
    for name, member in sorted(ctx.by_peer.items(), key=lambda item: ordinal_of(item[0])):
        if name and name not in ctx.peers:
            return make_step(
                "create_peer",
                "MemberWithoutPeer",
                f"member {name} is in etcd but has no EtcdPeer; creating it to join the cluster",
                peer=name,
                member=member,
                version=new_member_version(ctx),
            )
    return None


def replace_member(ctx: PlanContext) -> Step | None:
    """Peers whose data is gone (their claim was lost) or whose member was removed from etcd
    behind our back: remove each member (if still listed) and its peer; they are re-added.
    Every such peer in one step, in ordinal order, as long as each removal keeps the quorum
    (etcd_member_leave checks again before each): after a disaster recovery the lost members
    are no longer listed, and removing their peers one reconcile round each only delays the
    re-adding. Waits (ReplacementUnsafe) when removing the first would lose the quorum."""
    if not ctx.has_quorum:
        return None
    voters = list(ctx.voters)
    replacing = []
    for name, peer in ctx.live_peers_by_ordinal():
        lost = ctx.lost_data(name)
        removed = name not in ctx.by_peer and bool(peer.get("member_id"))
        if not (lost or removed):
            continue
        member = ctx.by_peer.get(name)
        if member and not _removal_keeps_quorum(member, voters):
            if replacing:
                break
            return make_step(
                "wait",
                "ReplacementUnsafe",
                f"member {name} lost its data but removing it now would lose quorum; waiting",
                "degraded",
            )
        if member:
            voters = [v for v in voters if v.get("id") != member.get("id")]
        replacing.append(
            (name, member, "its data volume is gone" if lost else "it was removed from etcd")
        )
    if not replacing:
        return None
    name, member, why = replacing[0]
    if len(replacing) == 1:
        message = f"replacing member {name}: {why}; it will be re-added as a new learner"
    else:
        listed = ", ".join(f"{n} ({w})" for n, _, w in replacing)
        message = f"replacing members {listed}; they will be re-added as new learners"
    return make_step(
        "replace_member",
        "ReplacingMember",
        message,
        peer=name,
        member=member,
        members=[{"name": n, "id": m["id"] if m else None} for n, m, _ in replacing],
    )


def unhealthy_members(ctx: PlanContext) -> Step | None:
    """Voting members that do not answer: membership does not change until they recover."""
    if not ctx.has_quorum:
        return None
    unhealthy_voters = [m for m in ctx.voters if not m.get("healthy")]
    if not unhealthy_voters:
        return None
    names = ", ".join(sorted(member_peer_name(m, ctx.cluster) for m in unhealthy_voters))
    return make_step(
        "wait",
        "MembersUnhealthy",
        f"waiting for unhealthy members to recover before changing membership: {names}",
        "degraded",
    )


def promote(ctx: PlanContext) -> Step | None:
    """A started learner: promote it once it has caught up (etcd refuses before); a learner
    that has not started yet is waited for."""
    if not ctx.has_quorum or not ctx.learners:
        return None
    learner = ctx.learners[0]
    name = member_peer_name(learner, ctx.cluster)
    if not learner.get("name") or not learner.get("healthy"):
        if not _learner_needed(ctx):
            # spec.replicas or spec.storage was put back: remove_member removes it.
            return None
        return make_step("wait", "LearnerStarting", f"waiting for learner {name} to start", "event")
    return make_step(
        "promote",
        "PromotingLearner",
        f"promoting learner {name} to a voting member",
        peer=name,
        member=learner,
    )


def add_member(ctx: PlanContext) -> Step | None:
    """Fewer voting members than spec.replicas: add the lowest free ordinals, one at a time, each
    as a learner, started and promoted when it has caught up before the next is added.

    One step adds every member the scale needs: etcd allows one learner at a time, so each add
    waits for the previous promotion, and etcd_member checks etcd's quorum again before each
    add and promotion; what the step leaves half done (a learner not started or not promoted)
    is what create_peer and promote resume from."""
    if not ctx.has_quorum or len(ctx.voters) >= ctx.replicas:
        return None
    names = ctx.free_peer_names(ctx.replicas - len(ctx.voters))
    scheme = new_member_peer_scheme(ctx)
    adding = (
        f"adding {names[0]} as a learner"
        if len(names) == 1
        else f"adding {', '.join(names)} one at a time, each as a learner promoted once it has "
        "caught up"
    )
    return make_step(
        "add_member",
        "ScalingUp",
        f"scaling up from {len(ctx.voters)} to {ctx.replicas}: {adding}",
        peer=names[0],
        peers=names,
        voters_after=ctx.replicas,
        version=new_member_version(ctx),
        # The scale's members: their pods' readiness is reported in this reconcile.
        wait_ready=names,
        **({"peer_scheme": scheme} if scheme else {}),
    )


def remove_member(ctx: PlanContext) -> Step | None:
    """More members than spec.replicas: remove a learner no longer needed (one that never
    started, for a scale or move since taken back), else a member moving to a new volume (its
    replacement has joined), else the highest ordinals, every one the scale-down removes, one at
    a time; leadership moved first."""
    if not ctx.has_quorum or len(ctx.members) <= ctx.replicas:
        return None
    if ctx.learners:
        # A learner no scale or move needs any more (promote waits for the others): it holds
        # no vote, so it goes first.
        learner = ctx.learners[0]
        name = member_peer_name(learner, ctx.cluster)
        return make_step(
            "remove_member",
            "RemovingLearner",
            f"removing learner {name}: spec.replicas is {ctx.replicas} with {len(ctx.voters)} "
            "voting members, and no member is to move to a new volume",
            peer=name,
            member=learner,
        )
    moving = members_to_move(ctx)
    if moving:
        name = moving[0]
        return make_step(
            "remove_member",
            "MovingToNewVolumes",
            f"{moving_to_new_volumes(ctx, moving)}: removing {name}, whose replacement on a "
            "new volume is a voting member, and its claim",
            peer=name,
            member=ctx.by_peer[name],
        )
    # Every member the scale-down removes, highest ordinal first, in one step: etcd_member
    # checks again before each removal that it keeps the quorum (and moves leadership away).
    names = sorted(ctx.by_peer, key=ordinal_of, reverse=True)[: len(ctx.members) - ctx.replicas]
    removing = (
        f"removing {names[0]}" if len(names) == 1 else f"removing {', '.join(names)} one at a time"
    )
    return make_step(
        "remove_member",
        "ScalingDown",
        f"scaling down from {len(ctx.members)} to {ctx.replicas}: {removing}",
        peer=names[0],
        member=ctx.by_peer[names[0]],
        members=[{"name": name, "id": ctx.by_peer[name]["id"]} for name in names],
    )


def replace_stale_peer(ctx: PlanContext) -> Step | None:
    """Peers that never became members (their learner was removed before it started): the
    peer is deleted and created again."""
    if not ctx.has_quorum:
        return None
    stale = sorted(n for n in ctx.live_peers if n not in ctx.by_peer)
    if not stale:
        return None
    return make_step(
        "replace_member",
        "ReplacingMember",
        f"peer {stale[0]} has no etcd member; recreating it",
        peer=stale[0],
        member=None,
    )


# The role's steady requeue period (etcdcluster_requeue_periods.steady): a scheduled
# defragmentation due sooner is counted down to instead.
STEADY_SECONDS = 600


def cluster_ready(ctx: PlanContext) -> Step:
    """The cluster matches its spec: nothing to do (always decides: the last rule)."""
    policy = (ctx.observed.get("maintenance") or {}).get("defragmentation") or {}
    scheduled = scheduled_defragmentation(ctx, policy)
    requeue = "steady"
    if scheduled and scheduled["next"] < STEADY_SECONDS:
        requeue = f"{scheduled['next']}s"
    return make_step("none", "ClusterReady", f"{len(ctx.voters)} healthy voting members", requeue)


def _learner_needed(ctx: PlanContext) -> bool:
    """Whether a learner is still wanted: a scale-up to spec.replicas, or a member's move to a
    new volume."""
    return len(ctx.voters) < ctx.replicas or bool(members_to_move(ctx))


def _removal_keeps_quorum(member: dict, voters: list[dict]) -> bool:
    """Would the voters left after removing `member` still have a healthy majority?"""
    if member.get("is_learner"):
        return True
    remaining = [v for v in voters if v.get("id") != member.get("id")]
    healthy = sum(1 for v in remaining if v.get("healthy"))
    return keeps_quorum(healthy, len(remaining))
