"""EtcdBackupSchedule through the deployed operator: backups every 10 s of a live cluster into a
real S3 server (moto on the host, reached by the operator's pod over the cluster network),
pruned to the last two with their objects; suspend stops new ones; a restarted operator picks
the schedule up again (alone: the only part that needs the operator to itself)."""

from __future__ import annotations

import datetime
import json
import time

import pytest
from backuphelpers import KEYS, SECRET, credentials_secret, object_url, schedule_manifest
from kubehelpers import BACKUPS, wait_until

OPERATOR_NAMESPACE = "quorumkeeper-system"
SCHEDULES = "etcdbackupschedules.etcd.quorumkeeper.dev"
LABEL = "etcd.quorumkeeper.dev/schedule"
SCHEDULED = "etcd.quorumkeeper.dev/scheduled-time"
BUCKET = "etcd-scheduled"


def stored_keys(s3):
    return {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}


class Schedule:
    """Reads raise CalledProcessError when kubectl fails (the API server is shared and busy),
    which wait_until retries, rather than Kube's AssertionError, which ends the test."""

    def __init__(self, kube, namespace, name):
        self.kube, self.namespace, self.name = kube, namespace, name

    def _get(self, *args):
        return json.loads(self.kube.run("get", *args, "-n", self.namespace, "-o", "json").stdout)

    def get(self):
        return self._get(SCHEDULES, self.name)

    def status(self):
        return self.get().get("status") or {}

    def condition(self, ctype):
        return next((c for c in self.status().get("conditions", []) if c["type"] == ctype), {})

    def backups(self):
        return self._get(BACKUPS, "-l", f"{LABEL}={self.name}")["items"]

    def event_reasons(self):
        items = self._get("events", "--field-selector", f"involvedObject.name={self.name}")
        return {e["reason"]: e for e in items["items"]}

    def patch(self, **spec):
        patch = json.dumps({"spec": spec})
        self.kube("patch", SCHEDULES, self.name, "-n", self.namespace, "--type=merge", "-p", patch)


def phase(backup):
    return (backup.get("status") or {}).get("phase")


def object_key(ns, backup):
    return f"{ns}/e2e/{backup['metadata']['uid']}.db"


def stays(description, predicate, seconds, interval=1.0):
    """Fail as soon as ``predicate`` stops holding within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), f"{description} stopped holding"
        time.sleep(interval)


def start_schedule(etcd_cluster, s3_port):
    """A cluster of one holding /scheduled, and the schedule "often" backing it up every 10 s."""
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    etcd_cluster.create(1)
    etcd_cluster.wait_available(1)
    etcd_cluster.put("/scheduled", "yes")
    kube.apply(credentials_secret(), namespace=ns)
    destination = {"objectURLTemplate": object_url(BUCKET, s3_port), "credentialsSecret": SECRET}
    kube.apply(schedule_manifest(destination), namespace=ns)
    return Schedule(kube, ns, "often")


def test_schedule_makes_backups_prunes_them_and_suspends(etcd_cluster, s3, s3_port):
    ns = etcd_cluster.namespace
    schedule = start_schedule(etcd_cluster, s3_port)

    # Every backup ever seen, by name, so that pruned ones can be checked for their objects.
    seen = {}

    def look():
        for backup in schedule.backups():
            seen[backup["metadata"]["name"]] = backup
        return seen

    wait_until(
        "three backups made and one pruned",
        lambda: len(look()) >= 3 and "BackupPruned" in schedule.event_reasons(),
        timeout=180,
        interval=1,
    )

    def retention_holds():
        look()
        current = {b["metadata"]["name"]: b for b in schedule.backups()}
        completed = [b for b in current.values() if phase(b) == "Completed"]
        gone = [b for name, b in seen.items() if name not in current]
        keys = stored_keys(s3)
        return (
            len(completed) <= 2
            and gone
            and all(object_key(ns, b) in keys for b in completed)
            and not any(object_key(ns, b) in keys for b in gone)
        )

    wait_until("at most two completed kept, objects of the pruned ones gone", retention_holds, 60)
    for backup in seen.values():
        assert "ownerReferences" not in backup["metadata"], "backups must outlive the schedule"
        assert backup["metadata"]["annotations"][SCHEDULED]

    status = schedule.status()
    for field in (
        "lastScheduleTime",
        "lastSuccessfulTime",
        "lastSuccessfulBackup",
        "nextScheduleTime",
    ):
        assert status.get(field), f"status.{field} is not set: {status}"
    assert status["lastSuccessfulBackup"] in {b["metadata"]["name"] for b in schedule.backups()}
    assert schedule.condition("Scheduled")["status"] == "True"
    assert all(v not in json.dumps(status) for v in KEYS.values()), "credentials in the status"

    # Suspend: once the running backup (if any) is done, nothing new is made.
    schedule.patch(suspend=True)
    wait_until(
        "the schedule to say it is suspended and no backup of it to run",
        lambda: (
            schedule.condition("Scheduled").get("reason") == "Suspended"
            and not schedule.status().get("active")
            and "nextScheduleTime" not in schedule.status()
        ),
        timeout=60,
    )
    names = {b["metadata"]["name"] for b in schedule.backups()}
    suspended_at = schedule.status()["lastScheduleTime"]
    stays(
        "no new backup while suspended",
        lambda: {b["metadata"]["name"] for b in schedule.backups()} <= names,
        seconds=25,
    )

    # Resumed: the schedule goes on from where it was.
    schedule.patch(suspend=False)
    wait_until(
        "a backup after resuming",
        lambda: schedule.status().get("lastScheduleTime", "") > suspended_at,
        timeout=60,
    )
    assert etcd_cluster.value("/scheduled") == "yes"


# Restarts the operator every other test relies on: alone, and only what needs the restart.
@pytest.mark.exclusive
def test_schedule_survives_an_operator_restart(etcd_cluster, s3, s3_port):
    kube = etcd_cluster.kube
    schedule = start_schedule(etcd_cluster, s3_port)
    before = wait_until(
        "a first completed backup",
        lambda: (
            any(phase(b) == "Completed" for b in schedule.backups())
            and schedule.status().get("lastScheduleTime")
        ),
        timeout=120,
        interval=1,
    )
    pods = kube.get(
        "pods", namespace=OPERATOR_NAMESPACE, selector="control-plane=controller-manager"
    )["items"]
    for pod in pods:  # a redeploy by another test may have left two
        kube("delete", "pod", pod["metadata"]["name"], "-n", OPERATOR_NAMESPACE, "--wait=false")
    restarted = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def completed_after_restart():
        scheduled_later = [
            b
            for b in schedule.backups()
            if phase(b) == "Completed" and b["metadata"]["annotations"][SCHEDULED] > restarted
        ]
        return scheduled_later and schedule.status().get("lastScheduleTime", "") > before

    wait_until("a backup scheduled after the operator restarted", completed_after_restart, 240, 2)

    # The newest verified backup is kept beyond maxBackups while the newer ones are still being
    # verified: wait for that to pass rather than race it.
    def kept():
        items = schedule.backups()
        return len([b for b in items if phase(b) == "Completed"]) <= 2 and items

    backups = wait_until("at most two completed backups kept", kept, 60)
    stamps = [b["metadata"]["annotations"][SCHEDULED] for b in backups]
    assert len(stamps) == len(set(stamps)), "two backups for one scheduled time"
    assert etcd_cluster.value("/scheduled") == "yes"


def test_a_schedule_that_does_not_parse_says_so(etcd_cluster):
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    kube.apply(
        {
            "apiVersion": "etcd.quorumkeeper.dev/v1alpha1",
            "kind": "EtcdBackupSchedule",
            "metadata": {"name": "typo"},
            "spec": {
                # Five fields (the CRD's check) but minute 61 does not exist.
                "schedule": "61 * * * *",
                "backupTemplate": {
                    "source": {"clusterName": "e2e"},
                    "destination": {"objectURLTemplate": "s3://b/{{ .UID }}.db"},
                },
            },
        },
        namespace=ns,
    )
    schedule = Schedule(kube, ns, "typo")
    cond = wait_until(
        "the InvalidSchedule condition",
        lambda: (c := schedule.condition("Scheduled")).get("reason") == "InvalidSchedule" and c,
        timeout=60,
    )
    assert cond["status"] == "False" and "61 * * * *" in cond["message"]
    event = wait_until(
        "an InvalidSchedule Event", lambda: schedule.event_reasons().get("InvalidSchedule"), 30
    )
    assert event["type"] == "Warning"
    assert schedule.backups() == []
