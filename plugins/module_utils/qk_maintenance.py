# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Giving a cluster's disk space back: compaction, defragmentation member by member, and the
NOSPACE alarm disarmed (``reclaim_space``, the core of the etcd_defragment module).

A defragmentation rewrites a member's whole database, and the member answers nothing else
meanwhile (etcd-backup-restore#1061: a 40 s stall of the leader cost every controller its
lease). So: only with every voting member healthy, one member at a time, learners and followers
first and the leader last, leadership moved away from it first (etcd-backup-restore#1052);
each member must answer again before the next one starts, and the first failure stops the run.
"""

from __future__ import annotations

import time

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import ordinal_of


class MaintenanceRefused(Exception):
    """The cluster is not in a state where defragmenting is safe; nothing was done."""


class MaintenanceFailed(Exception):
    """A stage failed part-way; ``result`` holds what was done before it."""

    def __init__(self, message, result):
        super().__init__(message)
        self.result = result


def defragment_order(members: list[dict]) -> list[dict]:
    """Learners, then followers, by ordinal; the leader last."""

    def key(member):
        return (
            bool(member.get("is_leader")),
            not member.get("is_learner"),
            ordinal_of(member.get("name")),
        )

    return sorted(members, key=key)


def check_safe(info: dict) -> None:
    """Raises MaintenanceRefused unless every member answers and a quorum has a leader."""
    if not info.get("healthy"):
        raise MaintenanceRefused("etcd has no healthy quorum: nothing is defragmented without one")
    down = [m.get("name") or m["id"] for m in info["members"] if not m.get("healthy")]
    if down:
        raise MaintenanceRefused(
            f"members not healthy: {', '.join(down)}; defragmenting another member now could "
            "leave the cluster without a quorum while it is busy"
        )


def _status(client, member):
    ((status, errors),) = client.statuses([member])
    if status is None:
        raise RuntimeError("; ".join(errors) or "no answer")
    return status


def _new_leader(leader, done, members):
    """Who leads while ``leader`` is defragmented: a voter already defragmented (it will not
    stall next), else any other voter; None for a one-member cluster."""
    voters = [m for m in (*done, *members) if m["id"] != leader["id"] and not m.get("is_learner")]
    return voters[0] if voters else None


def reclaim_space(
    client, *, compact=True, disarm=False, defrag_timeout=120, names=None, check=False
):
    """Compact to the current revision, defragment the members (``names``, default all) and
    disarm the NOSPACE alarms. Returns ``{compacted_revision, members: [{name, id, db_size_before,
    db_size_after, db_size_in_use, seconds}], leader_moved_to, disarmed: [names]}``; in check
    mode what would be done (``members`` in order, without sizes after). Raises
    MaintenanceRefused before anything is done, MaintenanceFailed after."""
    info = client.cluster_info()
    check_safe(info)
    members = [m for m in info["members"] if names is None or m.get("name") in names]
    unknown = sorted(set(names or ()) - {m.get("name") for m in members})
    if unknown:
        raise MaintenanceRefused(f"no such members: {', '.join(unknown)}")
    by_id = {m["id"]: m for m in info["members"]}
    leader = info.get("leader") or {}
    result = {"compacted_revision": None, "members": [], "leader_moved_to": None, "disarmed": []}
    order = defragment_order(members)
    if check:
        result["members"] = [{"name": m.get("name"), "id": m["id"]} for m in order]
        return result
    stage = "compacting"
    try:
        if compact:
            revision = client.revision(by_id[leader["id"]]["client_urls"][0])
            if client.compact(revision):
                result["compacted_revision"] = revision
        done = []
        for member in order:
            stage = f"defragmenting {member.get('name') or member['id']}"
            if member["id"] == leader.get("id"):
                target = _new_leader(member, done, info["members"])
                if target is not None:
                    stage = f"moving leadership from {member.get('name')} to {target.get('name')}"
                    client.move_leader(member["client_urls"], target["id"])
                    result["leader_moved_to"] = target.get("name") or target["id"]
                    stage = f"defragmenting {member.get('name') or member['id']}"
            before = _status(client, member)
            started = time.monotonic()
            client.defragment(before["endpoint"], defrag_timeout)
            seconds = round(time.monotonic() - started, 3)
            after = _status(client, member)
            result["members"].append(
                {
                    "name": member.get("name"),
                    "id": member["id"],
                    "db_size_before": before["db_size"],
                    "db_size_after": after["db_size"],
                    "db_size_in_use": after["db_size_in_use"],
                    "seconds": seconds,
                }
            )
            done.append(member)
        if disarm:
            stage = "disarming the NOSPACE alarm"
            for alarm in client.alarms():
                if alarm["alarm"] == "NOSPACE":
                    client.alarm_disarm(alarm["member_id"], "NOSPACE")
                    owner = by_id.get(alarm["member_id"]) or {}
                    result["disarmed"].append(owner.get("name") or alarm["member_id"])
    except Exception as exc:  # noqa: BLE001 - reported with what was done
        raise MaintenanceFailed(f"{stage} failed: {exc}", result) from exc
    return result


def _mib(size):
    return f"{size / (1 << 20):.1f} MiB"


def describe(result: dict) -> str:
    """One line for an Event: what was compacted, each member's size before and after."""
    parts = []
    if result.get("compacted_revision"):
        parts.append(f"compacted to revision {result['compacted_revision']}")
    members = ", ".join(
        f"{m['name'] or m['id']} {_mib(m['db_size_before'])} -> {_mib(m['db_size_after'])} "
        f"in {m['seconds']:.1f}s"
        for m in result.get("members") or []
        if "db_size_after" in m
    )
    if members:
        parts.append(f"defragmented {members}")
    if result.get("leader_moved_to"):
        parts.append(f"leadership moved to {result['leader_moved_to']} first")
    if result.get("disarmed"):
        parts.append(f"NOSPACE disarmed on {', '.join(result['disarmed'])}")
    return "; ".join(parts) or "nothing to do"


def last_defragmentation(status: dict | None) -> dict:
    """An EtcdCluster status's ``maintenance.lastDefragmentation`` ({} when there was none)."""
    return ((status or {}).get("maintenance") or {}).get("lastDefragmentation") or {}


def status_of(result: dict) -> dict:
    """The run as the EtcdCluster's status.maintenance.lastDefragmentation says it (without
    ``at`` and ``reason``, which the caller knows)."""
    return {
        "compactedRevision": int(result.get("compacted_revision") or 0),
        "members": [
            {
                "name": m["name"] or m["id"],
                "dbSizeBefore": int(m["db_size_before"]),
                "dbSizeAfter": int(m["db_size_after"]),
                "seconds": float(m["seconds"]),
            }
            for m in result.get("members") or []
            if "db_size_after" in m
        ],
    }
