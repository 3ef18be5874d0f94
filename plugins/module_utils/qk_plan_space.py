# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The EtcdCluster planner's answer to etcd's NOSPACE alarm (the rule ``recover_space``).

With NOSPACE raised, etcd serves reads and deletes but refuses every write until a person
compacts, defragments and disarms. The operator does it (roles/etcdcluster/tasks/
recover_space.yml, module etcd_defragment) as one step, with the quorum-safe order of
qk_maintenance. When the alarm is back soon after a recovery, what etcd holds *now* is at the
quota: repeating would only rewrite every database again, so the step waits and says what a
person can do.
"""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    alarmed_peers,
    seconds_between,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_step import (
    PlanContext,
    Step,
    make_step,
)

# A NOSPACE alarm back within this long after the operator reclaimed space means the live data
# is at the quota; the operator tries again after it.
SPACE_RECOVERY_RETRY_SECONDS = 300
MIB = 1 << 20


def recover_space(ctx: PlanContext) -> Step | None:
    """NOSPACE raised, a healthy quorum, every voter healthy (``unhealthy_members`` comes
    first): compact, defragment member by member and disarm (``recover_space``); or wait when
    the alarm came back within SPACE_RECOVERY_RETRY_SECONDS of the last recovery."""
    if not ctx.has_quorum:
        return None
    raised = alarmed_peers(ctx.etcd.get("alarms"), ctx.members, ctx.cluster, "NOSPACE")
    if not raised:
        return None
    last = ((ctx.observed.get("current") or {}).get("maintenance") or {}).get(
        "lastDefragmentation"
    ) or {}
    since = seconds_between(last.get("at"), ctx.observed.get("now"))
    in_use = max((m.get("db_size_in_use") or 0) for m in ctx.members)
    if (
        last.get("reason") == "NOSPACE"
        and since is not None
        and since < SPACE_RECOVERY_RETRY_SECONDS
    ):
        return make_step(
            "wait",
            "DatabaseQuotaExceeded",
            f"etcd raised NOSPACE again on {', '.join(raised)} {int(since)}s after the operator "
            f"compacted and defragmented it: the live data ({in_use // MIB} MiB in use) fills "
            "the backend quota. etcd serves reads and deletes only: delete keys, or create the "
            "cluster anew with a larger spec.options.quotaBackendBytes (within the volume) and "
            f"restore a backup into it. The operator tries again "
            f"{SPACE_RECOVERY_RETRY_SECONDS}s after its last attempt",
            "degraded",
        )
    return make_step(
        "recover_space",
        "DatabaseQuotaExceeded",
        f"etcd raised NOSPACE on {', '.join(raised)} and refuses writes: compacting to the "
        "current revision, defragmenting the members one at a time (the leader last, after "
        "moving leadership), then disarming the alarm",
        members=[{"name": name} for name in raised],
    )
