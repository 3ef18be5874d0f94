# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""An EtcdBackupSchedule's own EtcdBackups as found, and which of them retention prunes.

What the planner (qk_schedule) asks of a backup: its phase and conditions, whether it is still
running, good (Completed and not found bad by verification) or verified, the time it was
scheduled for (annotation ``etcd.quorumkeeper.dev/scheduled-time``, else its creation), the
order of the schedule's backups (by that time, then name), and why the last one failed.
``retention()`` picks the backups to prune under spec.retention (maxBackups, maxAge), and
``prune_entry()`` says what the module deletes for each. All pure, unit tested through the
planner in tests/unit/test_schedule.py.
"""

from __future__ import annotations

import datetime

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import API_GROUP
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_duration import parse_duration
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_schedule_time import (
    UTC,
    parse_time,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_verify import RETRYABLE_REASONS

# On each backup a schedule makes: the scheduled time it was made for.
SCHEDULED_TIME_ANNOTATION = f"{API_GROUP}/scheduled-time"
FINISHED = ("Completed", "Failed")


def phase(backup):
    return (backup.get("status") or {}).get("phase") or "Pending"


def condition(obj, ctype):
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return {}


def is_active(backup):
    """Not finished: Pending (no status yet), Running, or a phase this code does not know."""
    return phase(backup) not in FINISHED


def failed_verification(backup):
    """Verification found the snapshot bad. Verified False for a retryable reason (the object
    could not be read, the pod could not run) says nothing about the snapshot: the etcdbackup
    role tries again, and meanwhile the backup counts like an unverified one."""
    verified = condition(backup, "Verified")
    return verified.get("status") == "False" and verified.get("reason") not in RETRYABLE_REASONS


def is_good(backup):
    """Completed, and not found bad by verification (unverified counts as good)."""
    return phase(backup) == "Completed" and not failed_verification(backup)


def is_verified(backup):
    return phase(backup) == "Completed" and condition(backup, "Verified").get("status") == "True"


def scheduled_time(backup):
    meta = backup.get("metadata") or {}
    return parse_time((meta.get("annotations") or {}).get(SCHEDULED_TIME_ANNOTATION)) or parse_time(
        meta.get("creationTimestamp")
    )


def order_key(backup):
    stamp = scheduled_time(backup) or datetime.datetime.min.replace(tzinfo=UTC)
    return (stamp, backup["metadata"]["name"])


def failure_message(backup):
    if phase(backup) == "Failed":
        message = condition(backup, "Failed").get("message") or "no reason recorded"
        return f"the last backup {backup['metadata']['name']} failed: {message}"
    message = condition(backup, "Verified").get("message") or "no reason recorded"
    return f"the last backup {backup['metadata']['name']} failed verification: {message}"


def retention(own, spec_retention, now, max_prunes):
    """Which of the schedule's backups to prune: ``(prune, more, kept_good, expiry)``.

    - good backups (Completed, not failed verification): the ``maxBackups`` newest are kept,
      minus those older than ``maxAge``; the newest verified one (the newest good one when none
      is verified) is always kept, even beyond those limits;
    - bad backups (Failed, or failed verification) never count toward ``maxBackups``: one is
      kept while no newer backup of the schedule has finished, then pruned;
    - a backup that has not finished is never pruned.
    At most ``max_prunes`` are returned (``more`` says whether others wait). ``expiry`` is
    when the next kept backup will pass ``maxAge`` (None without one). Raises ``ValueError``
    for a ``maxAge`` that is not a duration.
    """
    spec_retention = spec_retention or {}
    max_backups = spec_retention.get("maxBackups")
    max_age = spec_retention.get("maxAge")
    max_age_delta = None
    if max_age:
        max_age_delta = datetime.timedelta(microseconds=parse_duration(max_age) // 1000)
    ordered = sorted(own, key=order_key, reverse=True)  # newest first
    good = [b for b in ordered if is_good(b)]
    verified = [b for b in good if is_verified(b)]
    protected = (verified or good or [None])[0]

    prune = []
    kept_good = []
    expiry = None
    for index, backup in enumerate(good):
        age_limit = scheduled_time(backup) + max_age_delta if max_age_delta else None
        reason = None
        if max_backups is not None and index >= int(max_backups):
            reason = f"retention.maxBackups is {max_backups} and {index} newer backups completed"
        elif age_limit is not None and age_limit <= now:
            reason = f"older than retention.maxAge ({max_age})"
        if reason and backup is not protected:
            prune.append((backup, reason))
            continue
        kept_good.append(backup)
        if age_limit is not None and backup is not protected and age_limit > now:
            expiry = age_limit if expiry is None else min(expiry, age_limit)

    newest_finished = None
    for backup in ordered:
        if not is_active(backup):
            if newest_finished is not None and not is_good(backup):
                what = "failed" if phase(backup) == "Failed" else "failed verification"
                prune.append(
                    (backup, f"it {what} and a newer backup ({newest_finished}) has finished")
                )
            newest_finished = newest_finished or backup["metadata"]["name"]
    # Oldest first: when capped, what goes first is what matters least.
    prune.sort(key=lambda item: order_key(item[0]))
    return prune[:max_prunes], len(prune) > max_prunes, kept_good, expiry


def prune_entry(backup, reason):
    spec, status = backup.get("spec") or {}, backup.get("status") or {}
    # A failed backup stored nothing: an upload that fails leaves no object (qk_objectstore).
    object_url = status.get("objectURL") if phase(backup) == "Completed" else None
    return {
        "name": backup["metadata"]["name"],
        "uid": backup["metadata"].get("uid"),
        "object_url": object_url,
        "credentials_secret": (spec.get("destination") or {}).get("credentialsSecret"),
        "reason": reason,
    }
