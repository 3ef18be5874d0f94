"""The EtcdBackupSchedule planner: when backups are due (cron, macros, @every), missed runs after
downtime, concurrency Forbid, suspend, retention with failed and verified backups, names."""

from __future__ import annotations

import datetime

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_schedule import (
    SCHEDULE_LABEL,
    backup_name,
    finish,
    plan,
    template_error,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_schedule_retention import (
    SCHEDULED_TIME_ANNOTATION,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_schedule_time import (
    ScheduleError,
    format_time,
    parse_schedule,
)

UTC = datetime.UTC
CREATED = datetime.datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)
NEW_YEAR = datetime.datetime(2026, 1, 1, tzinfo=UTC)
TEMPLATE = {
    "source": {"clusterName": "main"},
    "destination": {
        "objectURLTemplate": "s3://backups/{{ .ClusterName }}/{{ .UID }}.db",
        "credentialsSecret": "s3",
    },
}


def at(minutes=0, seconds=0, base=CREATED):
    return base + datetime.timedelta(minutes=minutes, seconds=seconds)


def schedule(cron="*/10 * * * *", status=None, generation=1, **spec):
    return {
        "apiVersion": "etcd.quorumkeeper.dev/v1alpha1",
        "kind": "EtcdBackupSchedule",
        "metadata": {
            "name": "nightly",
            "namespace": "prod",
            "uid": "s-uid",
            "generation": generation,
            "creationTimestamp": format_time(CREATED),
        },
        "spec": {"schedule": cron, "backupTemplate": TEMPLATE, **spec},
        "status": status or {},
    }


def backup(
    when,
    phase="Completed",
    verified=None,
    name=None,
    schedule_name="nightly",
    source=None,
    message="boom",
):
    meta = {
        "name": name or backup_name(schedule_name, when),
        "namespace": "prod",
        "uid": f"uid-{when:%H%M%S}",
        "creationTimestamp": format_time(when),
        "labels": {SCHEDULE_LABEL: schedule_name} if schedule_name else {},
        "annotations": {SCHEDULED_TIME_ANNOTATION: format_time(when)} if schedule_name else {},
    }
    status = {}
    if phase:
        status["phase"] = phase
        status["objectURL"] = f"s3://backups/main/{meta['uid']}.db"
        conditions = []
        if phase == "Completed":
            status["completionTime"] = format_time(when + datetime.timedelta(seconds=3))
        if phase == "Failed":
            conditions.append({"type": "Failed", "status": "True", "message": message})
        if verified is not None:
            reason = "Verified" if verified is True else verified or "SnapshotCorrupt"
            conditions.append(
                {
                    "type": "Verified",
                    "status": "True" if verified is True else "False",
                    "reason": reason,
                    "message": "bad",
                }
            )
        status["conditions"] = conditions
    spec = {"source": source or TEMPLATE["source"], "destination": TEMPLATE["destination"]}
    return {"metadata": meta, "spec": spec, "status": status}


def planned(sched, backups=(), now=None, **kwargs):
    return plan(sched, list(backups), now or at(minutes=10, seconds=2), **kwargs)


def scheduled_condition(p):
    return p["scheduled_condition"]


# -- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "now", "latest", "following"),
    [
        ("*/10 * * * *", at(25), at(20), at(30)),
        ("@hourly", at(25), at(0), at(60)),
        ("@daily", at(25), CREATED.replace(hour=0), CREATED.replace(day=2, hour=0)),
        ("@midnight", at(25), CREATED.replace(hour=0), CREATED.replace(day=2, hour=0)),
        # 2026-03-01 is a Sunday: @weekly is Sunday 00:00
        ("@weekly", at(25), CREATED.replace(hour=0), CREATED.replace(day=8, hour=0)),
        ("@monthly", at(25), CREATED.replace(hour=0), CREATED.replace(month=4, hour=0)),
        ("@yearly", at(25), NEW_YEAR, NEW_YEAR.replace(year=2027)),
        ("@annually", at(25), NEW_YEAR, NEW_YEAR.replace(year=2027)),
        ("30 2 * * 1-5", at(25), CREATED.replace(day=27, month=2, hour=2, minute=30), None),
        # On a scheduled second itself: that time is the latest, the next one follows it.
        ("*/10 * * * *", at(20), at(20), at(30)),
    ],
)
def test_cron_times_are_utc_and_macros_expand(expression, now, latest, following):
    when = parse_schedule(expression)
    epoch = datetime.datetime(2000, 1, 1, tzinfo=UTC)
    assert when.latest(now, epoch) == latest
    if following:
        assert when.following(now, epoch) == following


def test_cron_latest_is_none_when_nothing_after_the_anchor():
    when = parse_schedule("0 * * * *")
    assert when.latest(at(30), at(0)) is None
    assert when.latest(at(61), at(0)) == at(60)


@pytest.mark.parametrize(
    ("text", "seconds"), [("@every 30s", 30), ("@every 1h30m", 5400), ("@every   2m", 120)]
)
def test_every_counts_from_the_anchor(text, seconds):
    when = parse_schedule(text)
    step = datetime.timedelta(seconds=seconds)
    assert when.latest(CREATED + step - datetime.timedelta(seconds=1), CREATED) is None
    assert when.latest(CREATED + step, CREATED) == CREATED + step
    assert when.latest(CREATED + 3 * step + step / 2, CREATED) == CREATED + 3 * step
    assert when.following(CREATED + 3 * step + step / 2, CREATED) == CREATED + 4 * step
    assert when.following(CREATED, CREATED) == CREATED + step


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("* * * *", "has 4 field(s)"),
        ("0 0 * * * *", "has 6 field(s)"),
        ("61 * * * *", "not a valid cron expression"),
        ("0 0 31 2 *", "not a valid cron expression"),
        ("@fortnightly", "not a known macro"),
        ("@every", "@every needs a duration"),
        ("@every 5s", "at least 10s"),
        ("@every 10.5s", "whole seconds"),
        ("@every 1d", "invalid duration"),
        ("", "empty"),
    ],
)
def test_bad_schedules_say_what_is_wrong(text, words):
    with pytest.raises(ScheduleError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_schedule(text)


# -- names ----------------------------------------------------------------------------------


def test_backup_names_are_deterministic_and_fit_a_label_value():
    assert backup_name("nightly", at(10)) == "nightly-20260301101000"
    long = "a" * 60
    name = backup_name(long, at(10))
    assert len(name) == 63 and name.endswith("-20260301101000")
    assert name == backup_name(long, at(10))
    assert name != backup_name("a" * 59 + "b", at(10)), "cut names must stay distinct"


# -- when to create -------------------------------------------------------------------------


def test_first_run_is_the_first_scheduled_time_after_creation():
    p = planned(schedule(), now=at(5))
    assert p["create"] is None
    assert p["next"] == at(10)
    assert p["requeue_seconds"] == 300
    p = planned(schedule(), now=at(10, 2))
    manifest = p["create"]
    assert manifest["metadata"]["name"] == "nightly-20260301101000"
    assert manifest["metadata"]["labels"] == {SCHEDULE_LABEL: "nightly"}
    assert manifest["metadata"]["annotations"] == {SCHEDULED_TIME_ANNOTATION: format_time(at(10))}
    assert "ownerReferences" not in manifest["metadata"], "backups must outlive the schedule"
    assert manifest["spec"] == TEMPLATE and manifest["spec"] is not TEMPLATE
    # A backup now runs: look again soon to see it finish, not at the next time.
    assert p["requeue_seconds"] == 5


def test_status_after_a_create():
    p = planned(schedule(), now=at(10, 2))
    out = finish(p)
    assert out["status"]["lastScheduleTime"] == format_time(at(10))
    assert out["status"]["nextScheduleTime"] == format_time(at(20))
    assert out["status"]["active"] == ["nightly-20260301101000"]
    assert out["status"]["observedGeneration"] == 1
    assert [e["reason"] for e in out["events"]] == ["BackupCreated"]
    scheduled, degraded = out["conditions"]
    assert scheduled == {
        "type": "Scheduled",
        "status": "True",
        "reason": "Scheduled",
        "message": "next backup at 2026-03-01T10:20:00Z",
    }
    assert degraded["status"] == "False"
    assert out["requeue"] == "5s"


def test_an_interrupted_run_does_not_create_twice():
    """The operator died after creating the 10:10 backup, before writing the status."""
    made = backup(at(10), phase=None)
    p = planned(schedule(), [made], now=at(10, 30))
    assert p["create"] is None
    out = finish(p)
    assert out["status"]["lastScheduleTime"] == format_time(at(10))
    assert out["status"]["active"] == [made["metadata"]["name"]]


def test_only_the_most_recent_missed_time_is_considered_after_downtime():
    """Down from 10:05 to 12:03: twelve runs missed, one backup made (12:00), no backlog."""
    status = {"lastScheduleTime": format_time(at(0))}
    p = planned(schedule(status=status), now=at(123))
    assert p["create"]["metadata"]["name"] == "nightly-20260301120000"
    assert p["next"] == at(130)


def test_a_run_found_after_its_deadline_is_missed_and_waits_for_the_next():
    status = {"lastScheduleTime": format_time(at(0))}
    sched = schedule(status=status, startingDeadlineSeconds=60)
    p = planned(sched, now=at(12))  # 10:10 is 2 minutes late
    assert p["create"] is None
    cond = scheduled_condition(p)
    assert (cond["status"], cond["reason"]) == ("True", "MissedSchedule")
    assert "2026-03-01T10:10:00Z" in cond["message"] and "(60)" in cond["message"]
    assert p["requeue_seconds"] == 8 * 60
    out = finish(p)
    assert [(e["reason"], e["type"]) for e in out["events"]] == [("MissedSchedule", "Warning")]
    # Said once: the next reconcile finds the same message in the status.
    sched["status"]["conditions"] = [{**cond, "lastTransitionTime": format_time(at(12))}]
    assert finish(planned(sched, now=at(13)))["events"] == []
    # Within the deadline it runs late.
    assert planned(sched, now=at(10, 59))["create"] is not None


def test_default_deadline_is_ten_minutes():
    status = {"lastScheduleTime": format_time(at(0))}
    assert planned(schedule(status=status), now=at(19, 59))["create"] is not None
    assert planned(schedule(status=status), now=at(20, 1))["create"] is not None  # 10:20 due
    p = planned(schedule("0 * * * *", status=status), now=at(60 + 10, 1))
    assert p["create"] is None and scheduled_condition(p)["reason"] == "MissedSchedule"


def test_every_counts_from_the_last_scheduled_time():
    sched = schedule("@every 30s")
    assert planned(sched, now=at(0, 29))["create"] is None
    p = planned(sched, now=at(0, 31))
    assert p["scheduled"] == at(0, 30)
    assert p["next"] == at(1, 0)
    sched["status"] = {"lastScheduleTime": format_time(at(0, 30))}
    assert planned(sched, now=at(0, 45))["create"] is None
    # After a long outage: one backup, for the last point of the grid.
    assert planned(sched, now=at(30, 10))["scheduled"] == at(30)


def test_suspend_makes_nothing_but_still_prunes():
    old = [backup(at(-30)), backup(at(-20)), backup(at(-10))]
    sched = schedule(suspend=True, retention={"maxBackups": 2})
    p = planned(sched, old, now=at(10, 2))
    assert p["create"] is None
    assert [e["name"] for e in p["prune"]] == [old[0]["metadata"]["name"]]
    cond = scheduled_condition(p)
    assert (cond["status"], cond["reason"]) == ("False", "Suspended")
    out = finish(p, pruned=p["prune"])
    assert out["status"]["nextScheduleTime"] is None, "None removes the field"
    assert out["requeue"] == "0s", "nothing to wait for: only a spec change wakes it"
    assert [e["reason"] for e in out["events"]] == ["BackupPruned"]


def test_resuming_runs_only_the_latest_time_within_the_deadline():
    sched = schedule(status={"lastScheduleTime": format_time(at(0))})
    assert planned(sched, now=at(45))["scheduled"] == at(40)


# -- concurrency Forbid ---------------------------------------------------------------------


def test_a_running_backup_of_the_same_cluster_delays_the_run():
    running = backup(at(0, 1), phase="Running", name="manual", schedule_name=None)
    p = planned(schedule(), [running], now=at(10, 2))
    assert p["create"] is None and p["waiting"]
    cond = scheduled_condition(p)
    assert cond["reason"] == "WaitingForBackup" and "manual" in cond["message"]
    assert p["requeue_seconds"] == 5
    out = finish(p)
    assert [(e["reason"], e["type"]) for e in out["events"]] == [("WaitingForBackup", "Normal")]
    # Finished within the deadline: the run is made, late.
    done = backup(at(0, 1), name="manual", schedule_name=None)
    assert planned(schedule(), [done], now=at(12))["scheduled"] == at(10)


def test_a_run_still_blocked_at_its_deadline_is_skipped():
    running = backup(at(0, 1), phase="Running", name="manual", schedule_name=None)
    p = planned(schedule(startingDeadlineSeconds=60), [running], now=at(11, 30))
    assert p["create"] is None
    cond = scheduled_condition(p)
    assert cond["reason"] == "BackupSkipped" and "manual" in cond["message"]
    assert [e["type"] for e in finish(p)["events"]] == ["Warning"]
    assert p["requeue_seconds"] == 8 * 60 + 30


def test_own_running_backup_blocks_and_pending_counts_as_running():
    pending = backup(at(0), phase=None)
    sched = schedule(status={"lastScheduleTime": format_time(at(0))})
    p = planned(sched, [pending], now=at(10, 2))
    assert p["create"] is None and p["waiting"]


def test_other_clusters_and_finished_backups_do_not_block():
    other = backup(
        at(0), phase="Running", name="o", schedule_name=None, source={"clusterName": "other"}
    )
    failed = backup(at(0), phase="Failed", name="f", schedule_name=None)
    assert planned(schedule(), [other, failed])["create"] is not None


def test_clusters_named_by_url_block_only_the_same_url():
    url = {"clusterURL": "http://m-0:2379"}
    sched = schedule(backupTemplate={**TEMPLATE, "source": url})
    running = backup(at(0), phase="Running", name="x", schedule_name=None, source=url)
    assert planned(sched, [running])["create"] is None
    running["spec"]["source"] = {"clusterURL": "http://m-1:2379"}
    assert planned(sched, [running])["create"] is not None


def test_polling_slows_down_for_long_backups():
    running = backup(at(0), phase="Running")
    sched = schedule(status={"lastScheduleTime": format_time(at(0))})
    assert planned(sched, [running], now=at(0, 10))["requeue_seconds"] == 5
    assert planned(sched, [running], now=at(1))["requeue_seconds"] == 15
    assert planned(sched, [running], now=at(9))["requeue_seconds"] == 30


# -- retention ------------------------------------------------------------------------------


def series(*phases, start=-100, step=10):
    return [
        backup(at(start + i * step), **(p if isinstance(p, dict) else {"phase": p}))
        for i, p in enumerate(phases)
    ]


def names(entries):
    return [e["name"] for e in entries]


def test_keeps_the_newest_completed_and_prunes_the_rest_oldest_first():
    old = series("Completed", "Completed", "Completed", "Completed")
    p = planned(schedule(retention={"maxBackups": 2}), old)
    assert names(p["prune"]) == [b["metadata"]["name"] for b in old[:2]]
    assert all(e["object_url"].startswith("s3://backups/") for e in p["prune"])
    assert p["prune"][0]["credentials_secret"] == "s3"
    assert "retention.maxBackups is 2" in p["prune"][0]["reason"]
    out = finish(p, pruned=p["prune"])
    assert out["status"]["lastSuccessfulBackup"] == old[3]["metadata"]["name"]
    assert out["status"]["lastSuccessfulTime"] == old[3]["status"]["completionTime"]


def test_without_retention_nothing_is_pruned():
    assert planned(schedule(), series(*["Completed"] * 5))["prune"] == []


def test_failed_backups_never_push_a_good_one_out():
    old = series("Completed", "Completed", "Failed", "Failed")
    p = planned(schedule(retention={"maxBackups": 2}), old)
    # Both completed are kept; the older failure goes (a newer backup finished), the newest
    # failure stays to say what is wrong.
    assert names(p["prune"]) == [old[2]["metadata"]["name"]]
    assert p["prune"][0]["object_url"] is None, "a failed backup stored nothing"
    out = finish(p, pruned=p["prune"])
    degraded = out["conditions"][1]
    assert (degraded["status"], degraded["reason"]) == ("True", "BackupFailed")
    assert old[3]["metadata"]["name"] in degraded["message"] and "boom" in degraded["message"]
    assert out["status"]["lastSuccessfulBackup"] == old[1]["metadata"]["name"]


def test_a_failed_backup_goes_once_a_newer_one_completes():
    old = series("Completed", "Failed", "Completed")
    p = planned(schedule(retention={"maxBackups": 2}), old)
    assert names(p["prune"]) == [old[1]["metadata"]["name"]]
    assert finish(p, pruned=p["prune"])["conditions"][1]["status"] == "False"


def test_a_failed_backup_stays_while_a_newer_one_runs():
    old = series("Completed", "Failed", "Running")
    assert planned(schedule(retention={"maxBackups": 1}), old)["prune"] == []


def test_the_newest_verified_backup_is_never_pruned():
    old = series({"verified": True}, "Completed", "Completed", "Completed")
    p = planned(schedule(retention={"maxBackups": 2}), old)
    assert names(p["prune"]) == [old[1]["metadata"]["name"]]
    # Only the newest verified one is protected.
    old = series({"verified": True}, {"verified": True}, "Completed", "Completed")
    p = planned(schedule(retention={"maxBackups": 1}), old)
    assert names(p["prune"]) == [old[0]["metadata"]["name"], old[2]["metadata"]["name"]]


def test_without_a_verified_backup_the_newest_completed_is_kept_even_past_max_age():
    old = series("Completed", "Completed", start=-60 * 24 * 10)
    p = planned(schedule(retention={"maxAge": "168h"}), old)
    assert names(p["prune"]) == [old[0]["metadata"]["name"]]
    assert "retention.maxAge (168h)" in p["prune"][0]["reason"]


def test_backups_that_failed_verification_do_not_count_and_go_when_newer_ones_finish():
    old = series("Completed", {"verified": False}, "Completed")
    p = planned(schedule(retention={"maxBackups": 2}), old)
    assert names(p["prune"]) == [old[1]["metadata"]["name"]]
    assert p["prune"][0]["object_url"], "its object is deleted with it"
    # The newest one failing verification is kept and reported; it protects nobody.
    old = series("Completed", "Completed", {"verified": False})
    p = planned(schedule(retention={"maxBackups": 2}), old)
    assert p["prune"] == []
    degraded = finish(p)["conditions"][1]
    assert degraded["reason"] == "BackupFailed" and "failed verification" in degraded["message"]


def test_a_verification_that_could_not_run_does_not_make_a_backup_bad():
    """VerificationPodFailed and the like are retried by the etcdbackup role: such a backup
    counts toward maxBackups like an unverified one and is not pruned as a failure."""
    old = series("Completed", {"verified": "VerificationPodFailed"}, "Completed")
    p = planned(schedule(retention={"maxBackups": 2}), old)
    assert names(p["prune"]) == [old[0]["metadata"]["name"]]
    assert finish(p, pruned=p["prune"])["conditions"][1]["status"] == "False"


def test_max_age_prunes_and_wakes_up_for_the_next_expiry():
    old = series("Completed", "Completed", "Completed", start=-60 * 24 * 7 - 5, step=10)
    p = planned(schedule(suspend=True, retention={"maxAge": "168h"}), old, now=at(0))
    assert names(p["prune"]) == [old[0]["metadata"]["name"]]
    assert p["requeue_seconds"] == 5 * 60, "the next backup passes maxAge in 5 minutes"


def test_other_schedules_and_deleted_backups_are_not_ours():
    mine = series("Completed", "Completed")
    theirs = [backup(at(-200 + i), schedule_name="other") for i in range(3)]
    gone = backup(at(-300))
    gone["metadata"]["deletionTimestamp"] = format_time(at(0))
    p = planned(schedule(retention={"maxBackups": 1}), mine + theirs + [gone])
    assert names(p["prune"]) == [mine[0]["metadata"]["name"]]


def test_prunes_are_capped_per_run_and_the_rest_come_soon():
    old = series(*["Completed"] * 6)
    p = planned(schedule(suspend=True, retention={"maxBackups": 1}), old, max_prunes=2)
    assert names(p["prune"]) == [b["metadata"]["name"] for b in old[:2]]
    assert p["requeue_seconds"] == 5


def test_a_prune_the_store_refused_keeps_the_backup_and_says_so_once():
    old = series("Completed", "Completed")
    sched = schedule(retention={"maxBackups": 1})
    p = planned(sched, old, now=at(5))
    entry = p["prune"][0]
    out = finish(p, prune_errors=[(entry, "AccessDenied: no")])
    degraded = out["conditions"][1]
    assert (degraded["status"], degraded["reason"]) == ("True", "PruneFailed")
    assert "AccessDenied" in degraded["message"] and entry["name"] in degraded["message"]
    assert [(e["reason"], e["type"]) for e in out["events"]] == [("PruneFailed", "Warning")]
    sched["status"]["conditions"] = [degraded]
    again = finish(planned(sched, old, now=at(6)), prune_errors=[(entry, "AccessDenied: no")])
    assert again["events"] == []


def test_a_create_that_failed_is_reported_and_retried_soon():
    p = planned(schedule())
    out = finish(p, create_error="EtcdBackup nightly-20260301101000 already exists and ...")
    assert out["conditions"][1]["reason"] == "CreateFailed"
    assert "lastScheduleTime" not in out["status"]
    assert out["status"]["active"] == []
    assert out["requeue"] == "5s"


# -- bad input ------------------------------------------------------------------------------


def test_a_schedule_that_does_not_parse_is_a_condition_and_an_event():
    p = planned(schedule("61 * * * *"))
    assert p["create"] is None
    cond = scheduled_condition(p)
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSchedule")
    assert "spec.schedule" in cond["message"]
    out = finish(p)
    assert [(e["reason"], e["type"]) for e in out["events"]] == [("InvalidSchedule", "Warning")]
    assert out["status"]["nextScheduleTime"] is None
    assert out["requeue"] == "0s"


def test_a_template_that_cannot_be_used_stops_the_schedule():
    bad = {**TEMPLATE, "destination": {"objectURLTemplate": "s3://b/{{ .Uid }}.db"}}
    p = planned(schedule(backupTemplate=bad), template_error=template_error)
    assert p["create"] is None
    cond = scheduled_condition(p)
    assert cond["reason"] == "InvalidBackupTemplate" and "unknown field(s) Uid" in cond["message"]
    assert template_error(TEMPLATE) is None
    assert "no object key" in template_error({"destination": {"objectURLTemplate": "s3://b/"}})


def test_the_template_is_checked_only_when_the_spec_changed():
    calls = []

    def check(template):
        calls.append(template)

    sched = schedule(status={"observedGeneration": 1})
    planned(sched, template_error=check)
    assert calls == []
    sched["metadata"]["generation"] = 2
    planned(sched, template_error=check)
    assert len(calls) == 1


def test_a_bad_max_age_stops_new_backups():
    p = planned(schedule(retention={"maxAge": "7d"}))
    assert p["create"] is None
    assert scheduled_condition(p)["reason"] == "InvalidRetention"
