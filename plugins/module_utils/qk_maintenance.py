# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Giving a cluster's disk space back: compaction, defragmentation member by member, and the
NOSPACE alarm disarmed (``reclaim_space``, the core of the etcd_defragment module).

A defragmentation rewrites a member's whole database, and the member answers nothing else
meanwhile (etcd-backup-restore#1061: a 40 s stall of the leader cost every controller its
lease). So: only with every voting member healthy, one member at a time, learners and followers
first and the leader last, leadership moved away from it first (etcd-backup-restore#1052);
each member must answer again before the next one starts, and the first failure stops the run:
MaintenanceFailed carries what was done, the member it stopped at with the error, and the
members it did not get to.
"""

from __future__ import annotations

import time

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import ordinal_of
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_members import (
    pick_new_leader,
)


class MaintenanceRefused(Exception):
    """The cluster is not in a state where defragmenting is safe; nothing was done."""


class MaintenanceFailed(Exception):
    """A stage failed part-way; ``result`` holds what was done before it, as reclaim_space
    returns it, and ``stopped_at`` ({name, id, stage, error}: the member it stopped at, None
    for the compaction or the disarming) and ``not_started`` (the names of the members it did
    not get to, in order)."""

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
    """Who leads while ``leader`` is defragmented: the first voter already defragmented (it will
    not stall next), else the healthy voter furthest along the raft log; never a learner. None
    when ``leader`` is the only voter; raises when no other voter is healthy."""
    for member in done:
        if member["id"] != leader["id"] and not member.get("is_learner"):
            return member
    target = pick_new_leader(members, leader["id"])
    if target is None and any(m["id"] != leader["id"] and not m.get("is_learner") for m in members):
        raise RuntimeError("no other voting member is healthy to take over the leadership")
    return target


def reclaim_space(
    client, *, compact=True, disarm=False, defrag_timeout=120, names=None, check=False
):
    """Compact to the current revision, defragment the members (``names``, default all) and
    disarm the NOSPACE alarms. Returns ``{compacted_revision, members: [{name, id, db_size_before,
    db_size_after, db_size_in_use, seconds}], leader_moved_to, disarmed: [names]}``; in check
    mode what would be done (``members`` in order, without sizes after). Raises
    MaintenanceRefused before anything is done, MaintenanceFailed after (its result also has
    ``stopped_at`` and ``not_started``)."""
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
    stage, current, done = "compacting", None, []
    try:
        if compact:
            revision = client.revision(by_id[leader["id"]]["client_urls"][0])
            if client.compact(revision):
                result["compacted_revision"] = revision
        for member in order:
            current, name = member, member.get("name") or member["id"]
            stage = f"defragmenting {name}"
            before = _status(client, member)
            # Who leads now, as the member says it: leadership may have changed since the start.
            if member["id"] == (before.get("leader") or leader.get("id")):
                target = _new_leader(member, done, info["members"])
                if target is not None:
                    stage = f"moving leadership from {name} to {target.get('name')}"
                    client.move_leader(member["client_urls"], target["id"])
                    result["leader_moved_to"] = target.get("name") or target["id"]
                    stage = f"defragmenting {name}"
            started = time.monotonic()
            client.defragment(before["endpoint"], defrag_timeout)
            seconds = round(time.monotonic() - started, 3)
            stage = f"waiting for {name} to answer after its defragmentation"
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
        current = None
        if disarm:
            stage = "disarming the NOSPACE alarm"
            for alarm in client.alarms():
                if alarm["alarm"] == "NOSPACE":
                    client.alarm_disarm(alarm["member_id"], "NOSPACE")
                    owner = by_id.get(alarm["member_id"]) or {}
                    result["disarmed"].append(owner.get("name") or alarm["member_id"])
    except Exception as exc:  # noqa: BLE001 - reported with what was done
        result["stopped_at"] = {
            "name": current.get("name") if current else None,
            "id": current["id"] if current else None,
            "stage": stage,
            "error": str(exc),
        }
        result["not_started"] = [
            m.get("name") or m["id"] for m in order[len(done) + (current is not None) :]
        ]
        raise MaintenanceFailed(f"{stage} failed: {exc}", result) from exc
    return result


NOTHING_DONE = "nothing to do"


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
    return "; ".join(parts) or NOTHING_DONE


def describe_failure(message: str, result: dict) -> str:
    """The line saying where a run stopped (``message``, MaintenanceFailed's), what it had
    done and which members it did not get to: the module's msg, which the converge's rescue
    reports (the StepFailed Event and condition)."""
    done = describe(result)
    line = f"{message}; done before: {'nothing' if done == NOTHING_DONE else done}"
    if result.get("not_started"):
        line += f"; not started: {', '.join(result['not_started'])}"
    return line


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
