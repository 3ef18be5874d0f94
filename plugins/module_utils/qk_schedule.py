# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""What an EtcdBackupSchedule should do now: the pure planner behind etcd_backup_schedule.

``plan()`` looks at the schedule, every EtcdBackup of its namespace and the time, and decides:
whether to create the backup of the most recent scheduled time (only that one is ever
considered, so an operator that was down never makes a backlog), which of the schedule's
backups to prune, and when to look again. ``finish()`` turns the plan and what the module
managed to do into the status, conditions and Events. Both are pure (no API calls, the time is
an argument) and unit tested; the module does the API and object store calls in between.

The schedule's times (cron, macros, @every) are parsed in qk_schedule_time, the schedule's
backups judged and pruned in qk_schedule_retention.

A backup made for scheduled time T is named ``<schedule>-<T as %Y%m%d%H%M%S>`` and annotated
with T, so an operator killed between its creation and the status write neither makes a second
one (same name) nor forgets that it made it (the annotation counts as the last schedule time).
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import math

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_GROUP,
    API_VERSION,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_duration import (
    format_duration,
    parse_duration,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_schedule_retention import (
    SCHEDULED_TIME_ANNOTATION,
    condition,
    failure_message,
    is_active,
    is_good,
    order_key,
    prune_entry,
    retention,
    scheduled_time,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_schedule_time import (
    UTC,
    ScheduleError,
    format_time,
    parse_schedule,
    parse_time,
)

SCHEDULE_LABEL = f"{API_GROUP}/schedule"
# Must equal the CRD's default: long enough for an operator restart, and for a running backup
# to finish (a snapshot may take etcdbackup_snapshot_timeout, 600 s) before the run it delays is
# given up; short enough that a run missed in a longer outage does not start at an hour nobody
# planned for.
DEFAULT_STARTING_DEADLINE = 600
MAX_NAME = 63  # the backups' names also end up in label values (≤ 63 characters)
STAMP = "%Y%m%d%H%M%S"


# --------------------------------------------------------------------------------------------
# The backups it makes
# --------------------------------------------------------------------------------------------


def backup_name(schedule_name, scheduled):
    """``<schedule>-<YYYYmmddHHMMSS>``, at most 63 characters: a long schedule name is cut and
    made unique again by a hash of the whole name, so the name stays deterministic."""
    suffix = "-" + scheduled.astimezone(UTC).strftime(STAMP)
    if len(schedule_name) + len(suffix) <= MAX_NAME:
        return schedule_name + suffix
    digest = hashlib.sha256(schedule_name.encode()).hexdigest()[:8]
    head = schedule_name[: MAX_NAME - len(suffix) - len(digest) - 1].rstrip("-.")
    return f"{head}-{digest}{suffix}"


def same_source(a, b):
    """Whether two backup specs snapshot the same cluster (by name, or by client URL)."""
    sa, sb = (a or {}).get("source") or {}, (b or {}).get("source") or {}
    if sa.get("clusterName"):
        return sa.get("clusterName") == sb.get("clusterName")
    return bool(sa.get("clusterURL")) and sa.get("clusterURL") == sb.get("clusterURL")


def describe_source(spec):
    source = (spec or {}).get("source") or {}
    if source.get("clusterName"):
        return f"EtcdCluster {source['clusterName']}"
    return source.get("clusterURL") or "the source"


def template_error(template):
    """What is wrong with a backupTemplate's objectURLTemplate (an unknown field, a URL that
    cannot be used), or None. The placeholders are kept as they are, so the message shows the
    template the user wrote."""
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore import (
        TEMPLATE_FIELDS,
        ObjectStoreError,
        parse_object_url,
        render_object_url,
    )

    url = ((template or {}).get("destination") or {}).get("objectURLTemplate") or ""
    try:
        parse_object_url(render_object_url(url, {f: "{{ ." + f + " }}" for f in TEMPLATE_FIELDS}))
    except ObjectStoreError as exc:
        return f"destination.objectURLTemplate: {exc}"
    return None


def _condition(ctype, status, reason, message):
    return {"type": ctype, "status": status, "reason": reason, "message": message}


def manifest(schedule, scheduled):
    """The EtcdBackup for scheduled time ``scheduled``: the template's spec, the schedule's
    label, the scheduled time; no owner reference (the backups outlive their schedule: they are
    the catalog of what is stored)."""
    meta = schedule["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": "EtcdBackup",
        "metadata": {
            "name": backup_name(meta["name"], scheduled),
            "namespace": meta["namespace"],
            "labels": {SCHEDULE_LABEL: meta["name"]},
            "annotations": {SCHEDULED_TIME_ANNOTATION: format_time(scheduled)},
        },
        "spec": copy.deepcopy(schedule["spec"].get("backupTemplate") or {}),
    }


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------


def plan(
    schedule,
    backups,
    now,
    template_error=None,
    poll_seconds=5,
    max_poll_seconds=30,
    max_prunes=20,
):
    """Decide what the schedule does now.

    ``backups``: every EtcdBackup of the schedule's namespace (its own are those labelled with
    its name; the others matter for concurrency). ``template_error(template)`` returns what is
    wrong with ``backupTemplate`` or None; it is called only when the spec changed since the
    status was written, or the template was wrong then (the verdict is kept in the status).

    Returns ``{create, prune, scheduled, ...}`` for the module and ``finish()``.
    """
    now = now.astimezone(UTC)
    meta, spec = schedule["metadata"], schedule.get("spec") or {}
    status = schedule.get("status") or {}
    name = meta["name"]
    created = parse_time(meta.get("creationTimestamp")) or now
    deadline = spec.get("startingDeadlineSeconds")
    deadline = DEFAULT_STARTING_DEADLINE if deadline is None else int(deadline)
    template = spec.get("backupTemplate") or {}

    live = [b for b in backups if not (b.get("metadata") or {}).get("deletionTimestamp")]
    own = [b for b in live if (b["metadata"].get("labels") or {}).get(SCHEDULE_LABEL) == name]
    own_active = sorted((b for b in own if is_active(b)), key=order_key)
    blocking = sorted(
        (b for b in live if is_active(b) and same_source(b.get("spec"), template)),
        key=order_key,
    )

    # The last scheduled time: the status, or a backup created by a run that was interrupted
    # before it could write the status.
    last = parse_time(status.get("lastScheduleTime"))
    for backup in own:
        stamp = scheduled_time(backup)
        if stamp and (last is None or stamp > last) and stamp >= created:
            last = stamp
    start = max(last, created) if last else created

    result = {
        "name": name,
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "generation": meta.get("generation"),
        "now": now,
        "last_schedule": last,
        "create": None,
        "scheduled": None,
        "due": None,
        "next": None,
        "own_active": [b["metadata"]["name"] for b in own_active],
        "waiting": False,
        "scheduled_condition": None,
        "current": status,
    }

    # -- when ------------------------------------------------------------------------------
    when = None
    retention_spec = spec.get("retention") or {}
    try:
        when = parse_schedule(spec.get("schedule"))
    except ScheduleError as exc:
        result["scheduled_condition"] = _condition(
            "Scheduled", "False", "InvalidSchedule", f"spec.schedule: {exc}; no backups are made"
        )
    try:
        if retention_spec.get("maxAge"):
            parse_duration(retention_spec["maxAge"])
    except ValueError as exc:
        # Without a retention that works, new backups would pile up.
        retention_spec = {}
        if when is not None:
            when = None
            result["scheduled_condition"] = _condition(
                "Scheduled",
                "False",
                "InvalidRetention",
                f"spec.retention.maxAge: {exc}; no backups are made",
            )
    bad_template = None
    current_scheduled = condition(schedule, "Scheduled")
    template_checked = status.get("observedGeneration") == meta.get("generation") and (
        current_scheduled.get("reason") != "InvalidBackupTemplate"
    )
    if when is not None and template_error is not None and not template_checked:
        bad_template = template_error(template)
    if when is not None and bad_template:
        result["scheduled_condition"] = _condition(
            "Scheduled",
            "False",
            "InvalidBackupTemplate",
            f"spec.backupTemplate: {bad_template}; no backups are made",
        )
        when = None

    if when is not None:
        due = when.latest(now, start)
        upcoming = when.following(now, start)
        result["due"], result["next"] = due, upcoming
        at_next = f"next backup at {format_time(upcoming)}"
        if spec.get("suspend"):
            result["next"] = None
            result["scheduled_condition"] = _condition(
                "Scheduled",
                "False",
                "Suspended",
                "spec.suspend is true: no new backups (retention still applies)",
            )
        elif due is None:
            result["scheduled_condition"] = _condition("Scheduled", "True", "Scheduled", at_next)
        elif (now - due).total_seconds() > deadline:
            if blocking:
                reason = "BackupSkipped"
                message = (
                    f"skipped the run of {format_time(due)}: EtcdBackup "
                    f"{blocking[0]['metadata']['name']} of {describe_source(template)} was still "
                    f"running startingDeadlineSeconds ({deadline}) after it; {at_next}"
                )
            else:
                reason = "MissedSchedule"
                message = (
                    f"missed the run of {format_time(due)}: it was found more than "
                    f"startingDeadlineSeconds ({deadline}) late (was the operator down?); {at_next}"
                )
            result["scheduled_condition"] = _condition("Scheduled", "True", reason, message)
        elif blocking:
            result["waiting"] = True
            give_up = format_time(due + datetime.timedelta(seconds=deadline))
            result["scheduled_condition"] = _condition(
                "Scheduled",
                "True",
                "WaitingForBackup",
                f"the run of {format_time(due)} waits for EtcdBackup "
                f"{blocking[0]['metadata']['name']} of {describe_source(template)} to finish "
                f"(concurrency Forbid), at most until {give_up}",
            )
        else:
            result["scheduled"] = due
            result["create"] = manifest(schedule, due)
            result["scheduled_condition"] = _condition("Scheduled", "True", "Scheduled", at_next)

    # -- what goes --------------------------------------------------------------------------
    prune, more, kept_good, expiry = retention(own, retention_spec, now, max_prunes)
    result["prune"] = [prune_entry(b, reason) for b, reason in prune]
    result["kept_good"] = sorted(kept_good, key=order_key, reverse=True)
    finished = sorted((b for b in own if not is_active(b)), key=order_key, reverse=True)
    pruned_names = {p["name"] for p in result["prune"]}
    finished = [b for b in finished if b["metadata"]["name"] not in pruned_names]
    result["failure"] = (
        failure_message(finished[0]) if finished and not is_good(finished[0]) else None
    )

    # -- when to look again -----------------------------------------------------------------
    wake = []
    if result["next"] is not None:
        wake.append((result["next"] - now).total_seconds())
    if expiry is not None:
        wake.append((expiry - now).total_seconds())
    watching = own_active or result["create"] is not None or result["waiting"] or more
    if watching:
        # A backup's completion changes only its status, which wakes nobody (see
        # docs/reconcile-cost.md): poll, less often the longer it has been running.
        oldest = scheduled_time(own_active[0]) if own_active else now
        running = max((now - oldest).total_seconds(), 0) if oldest else 0
        wake.append(min(max(running / 4, poll_seconds), max_poll_seconds))
    result["requeue_seconds"] = max(1, math.ceil(min(wake))) if wake else 0
    return result


# --------------------------------------------------------------------------------------------
# The outcome
# --------------------------------------------------------------------------------------------


def finish(planned, create_error=None, pruned=(), prune_errors=()):
    """Status, conditions and Events after the module acted on ``planned``.

    ``create_error``: why the backup could not be created (None when it was, or none was due);
    ``pruned``: the prune entries done; ``prune_errors``: ``(entry, message)`` of those not done
    (their EtcdBackup is kept: it is the record of an object that may still exist).
    Events go out only when a condition's message changes (or for what was just done), so a
    repeated reconcile does not repeat them.
    """
    p = planned
    current = p["current"]
    events = []
    active = list(p["own_active"])
    last = p["last_schedule"]
    if p["create"] is not None and create_error is None:
        created_name = p["create"]["metadata"]["name"]
        active.append(created_name)
        last = p["scheduled"]
        events.append(
            {
                "reason": "BackupCreated",
                "type": "Normal",
                "message": f"created EtcdBackup {created_name} for the run of "
                f"{format_time(p['scheduled'])}",
            }
        )
    for entry in pruned:
        stored = f" and its object {entry['object_url']}" if entry["object_url"] else ""
        events.append(
            {
                "reason": "BackupPruned",
                "type": "Normal",
                "message": f"deleted EtcdBackup {entry['name']}{stored}: {entry['reason']}",
            }
        )

    scheduled = p["scheduled_condition"]
    old_scheduled = condition({"status": current}, "Scheduled")
    if scheduled["reason"] not in ("Scheduled", "Suspended") and (
        old_scheduled.get("message") != scheduled["message"]
    ):
        events.append(
            {
                "reason": scheduled["reason"],
                "type": "Normal" if scheduled["reason"] == "WaitingForBackup" else "Warning",
                "message": scheduled["message"],
            }
        )

    problems = []
    if create_error:
        problems.append(("CreateFailed", create_error))
    if prune_errors:
        text = "; ".join(
            f"cannot delete the object of EtcdBackup {entry['name']} ({message}); the "
            "EtcdBackup is kept until it can be"
            for entry, message in prune_errors
        )
        problems.append(("PruneFailed", text))
    if p["failure"]:
        problems.append(("BackupFailed", p["failure"]))
    if problems:
        degraded = _condition(
            "Degraded", "True", problems[0][0], "; ".join(message for _, message in problems)
        )
        if condition({"status": current}, "Degraded").get("message") != degraded["message"]:
            events.append(
                {"reason": problems[0][0], "type": "Warning", "message": degraded["message"]}
            )
    else:
        degraded = _condition("Degraded", "False", "NoProblems", "no problem observed")

    status = {
        "active": sorted(active),
        "nextScheduleTime": format_time(p["next"]),
    }
    if p["generation"] is not None:
        status["observedGeneration"] = p["generation"]
    if last is not None:
        status["lastScheduleTime"] = format_time(last)
    if p["kept_good"]:
        newest = p["kept_good"][0]
        status["lastSuccessfulBackup"] = newest["metadata"]["name"]
        status["lastSuccessfulTime"] = (newest.get("status") or {}).get(
            "completionTime"
        ) or format_time(scheduled_time(newest))

    requeue = p["requeue_seconds"]
    return {
        "status": status,
        "conditions": [scheduled, degraded],
        "events": events,
        "requeue": format_duration(int(requeue) * 1_000_000_000),
    }
