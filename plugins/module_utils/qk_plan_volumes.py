# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The EtcdCluster planner's volume growth: a larger
spec.storage.volumeClaimTemplate.resources.requests.storage (the rules ``grow_volumes`` and,
late in the order, ``wait_for_volumes``).

The members' claims are grown in place, all at once: Kubernetes expands a bound volume while its
pod runs, so no member restarts for it. The default backend quota derives from the volume size
(qk_options.default_quota_bytes) and rises with it, but only once every volume has grown:
``volumes_changing`` holds the rolling restart onto the new quota (qk_plan_config.roll_config)
until then, so that no member is started with a quota its disk could not hold.

A claim whose StorageClass does not allow expansion cannot be asked for more (the API server
would refuse it): its member moves to a new volume instead (``move_to_new_volumes``), one
member at a time, the way a member is replaced without ever having fewer voting members than
spec.replicas: a new member is added on a claim of the new size as a learner, promoted once it
has caught up, and only then is the old member removed (``members_to_move``: the one
``remove_member`` picks; its leadership moved first), and its claim deleted: the data it held is
on every other member. A claim whose class cannot be read is reported
(``volume_growth_problems``) and left alone. The CRD lets the size be set back down to what the
volumes have (status.volumeSize), never below.
"""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    member_peer_name,
    ordinal_of,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import quantity_bytes
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_rollout import (
    restart_gate,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_step import (
    PlanContext,
    Step,
    make_step,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_upgrade import (
    new_member_version,
)


def wanted_volume_bytes(observed) -> int | None:
    """The size spec.storage asks for each member's volume, None without spec.storage."""
    size = observed.get("volume_size")
    return quantity_bytes(size) if size not in (None, "") else None


def member_claims(ctx: PlanContext) -> list[tuple[str, dict]]:
    """The bound claims of the live members, by ordinal."""
    return [
        (name, ctx.pvcs[name])
        for name, _ in ctx.live_peers_by_ordinal()
        if (ctx.pvcs.get(name) or {}).get("phase") == "Bound" and not ctx.pvcs[name].get("deleting")
    ]


def volumes_changing(ctx: PlanContext) -> bool:
    """Whether a member's volume is still smaller than spec.storage asks, or of another class
    (it moves to a new volume): what depends on the new size (the default quota) waits, and
    a member about to move is not restarted for a new configuration it will start with."""
    wanted = wanted_volume_bytes(ctx.observed)
    if wanted is None:
        return False
    return any(
        (claim.get("capacity_bytes") or 0) < wanted or _changes_class(ctx.observed, claim)
        for _, claim in member_claims(ctx)
    )


def wanted_storage_class(observed) -> str:
    """The StorageClass spec.storage names for the members' volumes; "" for the default."""
    return observed.get("storage_class") or ""


def _changes_class(observed, claim: dict) -> bool:
    wanted = wanted_storage_class(observed)
    return bool(wanted) and (claim.get("storage_class") or "") != wanted


def grow_volumes(ctx: PlanContext) -> Step | None:
    """Ask for the larger size on every member claim that can grow (``grow_volumes``); None
    when every claim asks for it already or none can grow."""
    wanted = wanted_volume_bytes(ctx.observed)
    if wanted is None:
        return None
    claims = member_claims(ctx)
    to_grow = [
        name
        for name, claim in claims
        if (claim.get("request_bytes") or 0) < wanted
        and claim.get("expandable")
        # A claim of another class than spec.storage names moves to a new volume instead.
        and not _changes_class(ctx.observed, claim)
    ]
    size = ctx.observed["volume_size"]
    if to_grow:
        return make_step(
            "grow_volumes",
            "VolumesGrowing",
            f"growing the volumes of {', '.join(to_grow)} to {size} in place (no member "
            "restarts; the quota follows once every volume has grown)",
            "poll",
            members=[{"name": n} for n in to_grow],
        )
    return None


def members_to_move(ctx: PlanContext) -> list[str]:
    """The voting members to move to a new volume: on a claim of another StorageClass than
    spec.storage names, or smaller than it asks and of a class that cannot expand. Followers
    by ordinal first, the leader last (its leadership moves once, at the end)."""
    wanted = wanted_volume_bytes(ctx.observed)
    if wanted is None:
        return []
    moving = [
        name
        for name, claim in member_claims(ctx)
        if (
            _changes_class(ctx.observed, claim)
            or ((claim.get("request_bytes") or 0) < wanted and claim.get("expandable") is False)
        )
        and name in ctx.by_peer
        and not ctx.by_peer[name].get("is_learner")
    ]
    leader = next((m for m in ctx.voters if m.get("is_leader")), None)
    leader_name = member_peer_name(leader, ctx.cluster) if leader else ""
    return sorted(moving, key=lambda n: (n == leader_name, ordinal_of(n)))


def moving_to_new_volumes(ctx: PlanContext, moving: list[str]) -> str:
    """What the move is about, for its messages."""
    claims = dict(member_claims(ctx))
    wanted_class = wanted_storage_class(ctx.observed)
    moved = f"{len(ctx.voters) - len(moving)} of {len(ctx.voters)} moved"
    if _changes_class(ctx.observed, claims[moving[0]]):
        return f"moving the members to volumes of StorageClass {wanted_class} ({moved})"
    return (
        f"moving the members to volumes of {ctx.observed['volume_size']} ({moved}; "
        f"StorageClass {claims[moving[0]].get('storage_class')} cannot expand)"
    )


def move_to_new_volumes(ctx: PlanContext) -> Step | None:
    """A member to move to a new volume: add a member on a claim spec.storage describes as a
    learner (promoted in the same step once it has caught up); ``remove_member`` then removes
    the old one. Only with every voting member healthy and none missing, so that the cluster
    never has fewer voting members than it had."""
    if not ctx.has_quorum or ctx.learners or len(ctx.voters) != ctx.replicas:
        return None
    if len(ctx.members) != ctx.replicas:
        return None
    moving = members_to_move(ctx)
    if not moving:
        return None
    doing = moving_to_new_volumes(ctx, moving)
    waiting = restart_gate(ctx, doing, "MovingToNewVolumes")
    if waiting:
        return waiting
    name = ctx.free_peer_name()
    return make_step(
        "add_member",
        "MovingToNewVolumes",
        f"{doing}: adding {name} on a new volume as a learner; {moving[0]} is removed once "
        f"{name} is a voting member",
        peer=name,
        voters_after=len(ctx.voters) + 1,
        version=new_member_version(ctx),
        wait_ready=[name],
    )


def wait_for_volumes(ctx: PlanContext) -> Step | None:
    """Wait, saying what the claims report, while a claim asked to grow has not; None when
    none is growing. After every other change: a resize that never ends holds nothing but
    what depends on the size (the quota, held by roll_config) and the defragmentation."""
    wanted = wanted_volume_bytes(ctx.observed)
    if wanted is None:
        return None
    size = ctx.observed["volume_size"]
    claims = member_claims(ctx)
    growing = [
        (name, claim)
        for name, claim in claims
        if (claim.get("request_bytes") or 0) >= wanted
        and (claim.get("capacity_bytes") or 0) < wanted
    ]
    if not growing:
        return None
    details = "; ".join(
        f"{name} has {claim.get('capacity') or 'no capacity yet'}"
        + (f" ({', '.join(claim['resizing'])})" if claim.get("resizing") else "")
        for name, claim in growing
    )
    return make_step(
        "wait",
        "VolumesGrowing",
        f"waiting for the volumes to grow to {size}: {details}",
        "poll",
    )


def volume_growth_problems(observed) -> list[dict]:
    """The member claims spec.storage asks to grow that cannot, as one problem:
    [{reason, message}] (none when every claim can grow or has the size)."""
    wanted = wanted_volume_bytes(observed)
    if wanted is None:
        return []
    pvcs = observed.get("pvcs") or {}
    stuck = sorted(
        (
            name
            for name, claim in pvcs.items()
            if claim.get("exists")
            and (claim.get("request_bytes") or 0) < wanted
            # Judged by observe (mark_expandable): None for a class it cannot read (a claim
            # whose class cannot expand, False, moves to a new volume).
            and "expandable" in claim
            and claim["expandable"] is None
            and not _changes_class(observed, claim)
        ),
        key=ordinal_of,
    )
    if not stuck:
        return []
    classes = sorted({pvcs[n].get("storage_class") or "(none)" for n in stuck})
    smallest = min(stuck, key=lambda n: pvcs[n].get("capacity_bytes") or 0)
    return [
        {
            "reason": "VolumeCannotGrow",
            "message": f"the volumes of {', '.join(stuck)} cannot grow to "
            f"{observed['volume_size']}: StorageClass {', '.join(classes)} cannot be read (it "
            "does not exist, or the operator may not get StorageClasses), so neither growing "
            "them in place nor moving the members to new volumes of it can work. Name an "
            "existing class in spec.storage.volumeClaimTemplate.storageClassName (the members "
            "move to new volumes of it), or set spec.storage.volumeClaimTemplate.resources."
            f"requests.storage back to {pvcs[smallest].get('capacity') or 'its size'} (the size "
            "they have); until then no setting change is rolled out",
        }
    ]
