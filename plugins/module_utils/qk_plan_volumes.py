# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The EtcdCluster planner's volume growth: a larger
spec.storage.volumeClaimTemplate.resources.requests.storage (the rules ``grow_volumes`` and,
late in the order, ``wait_for_volumes``).

The members' claims are grown in place, all at once: Kubernetes expands a bound volume while its
pod runs, so no member restarts for it. The default backend quota derives from the volume size
(qk_options.default_quota_bytes) and rises with it, but only once every volume has grown:
``volumes_growing`` holds the rolling restart onto the new quota (qk_plan_config.roll_config)
until then, so that no member is started with a quota its disk could not hold.

A claim whose StorageClass does not allow expansion is left as it is and reported
(``volume_growth_problems``): the API server would refuse the larger request anyway. The CRD
lets the size be set back down to what the volumes have (status.volumeSize), never below.
"""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import ordinal_of
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import quantity_bytes
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_step import (
    PlanContext,
    Step,
    make_step,
)


def wanted_volume_bytes(observed) -> int | None:
    """The size spec.storage asks for each member's volume, None without spec.storage."""
    size = observed.get("volume_size")
    return quantity_bytes(size) if size not in (None, "") else None


def _claims(ctx: PlanContext) -> list[tuple[str, dict]]:
    """The bound claims of the live members, by ordinal."""
    return [
        (name, ctx.pvcs[name])
        for name, _ in ctx.live_peers_by_ordinal()
        if (ctx.pvcs.get(name) or {}).get("phase") == "Bound" and not ctx.pvcs[name].get("deleting")
    ]


def volumes_growing(ctx: PlanContext) -> bool:
    """Whether a member's volume is still smaller than spec.storage asks: what depends on the
    new size (the default quota) waits."""
    wanted = wanted_volume_bytes(ctx.observed)
    if wanted is None:
        return False
    return any((claim.get("capacity_bytes") or 0) < wanted for _, claim in _claims(ctx))


def grow_volumes(ctx: PlanContext) -> Step | None:
    """Ask for the larger size on every member claim that can grow (``grow_volumes``); None
    when every claim asks for it already or none can grow."""
    wanted = wanted_volume_bytes(ctx.observed)
    if wanted is None:
        return None
    claims = _claims(ctx)
    to_grow = [
        name
        for name, claim in claims
        if (claim.get("request_bytes") or 0) < wanted and claim.get("expandable")
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


def wait_for_volumes(ctx: PlanContext) -> Step | None:
    """Wait, saying what the claims report, while a claim asked to grow has not; None when
    none is growing. After every other change: a resize that never ends holds nothing but
    what depends on the size (the quota, held by roll_config) and the defragmentation."""
    wanted = wanted_volume_bytes(ctx.observed)
    if wanted is None:
        return None
    size = ctx.observed["volume_size"]
    claims = _claims(ctx)
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
            # Judged by observe (mark_expandable): False, or None for a class it cannot read.
            and "expandable" in claim
            and not claim["expandable"]
        ),
        key=ordinal_of,
    )
    if not stuck:
        return []
    classes = sorted(
        (pvcs[n].get("storage_class") or "(none)")
        + ("" if pvcs[n]["expandable"] is False else " (not found)")
        for n in stuck
    )
    smallest = min(stuck, key=lambda n: pvcs[n].get("capacity_bytes") or 0)
    return [
        {
            "reason": "VolumeCannotGrow",
            "message": f"the volumes of {', '.join(stuck)} cannot grow to "
            f"{observed['volume_size']}: StorageClass {', '.join(sorted(set(classes)))} does not "
            "allow volume expansion (allowVolumeExpansion). Set spec.storage.volumeClaimTemplate."
            f"resources.requests.storage back to {pvcs[smallest].get('capacity') or 'its size'} "
            "(the size they have), or restore a backup into a new cluster with larger volumes; "
            "until then no setting change is rolled out",
        }
    ]
