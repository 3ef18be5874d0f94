"""The operator's metrics (qk_metrics): what each resource's status becomes, and the text format
Prometheus reads."""

import re

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_metrics import (
    families,
    fault_tolerance,
    render,
)

SAMPLE = re.compile(r"^(?P<name>[a-z_]+)(\{(?P<labels>.*)\})? (?P<value>[-0-9.e+]+|NaN)$")


def parse(text):
    """{(name, frozenset(labels)): value} of a text exposition; checks every line's form."""
    samples, declared = {}, set()
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            declared.add(line.split()[2])
            continue
        match = SAMPLE.match(line)
        assert match, line
        labels = dict(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', match.group("labels") or ""))
        assert match.group("name") in declared, line
        samples[(match.group("name"), frozenset(labels.items()))] = float(match.group("value"))
    return samples


def metric(samples, name, **labels):
    return samples[("quorumkeeper_" + name, frozenset(labels.items()))]


def member(name, healthy=True, learner=False, leader=False, **extra):
    return {"name": name, "healthy": healthy, "isLearner": learner, "isLeader": leader, **extra}


def cluster(name="c", members=(), conditions=(), **status):
    return {
        "metadata": {"namespace": "ns", "name": name},
        "spec": {"replicas": 3, "version": "3.6.16"},
        "status": {
            "members": list(members),
            "conditions": [
                {"type": t, "status": s, "reason": "R", "message": "m"} for t, s in conditions
            ],
            **status,
        },
    }


def test_fault_tolerance_counts_healthy_voting_members_over_the_quorum():
    three = [member("a"), member("b"), member("c")]
    assert fault_tolerance(three) == 1
    assert fault_tolerance([member("a"), member("b", healthy=False), member("c")]) == 0
    assert fault_tolerance([member("a"), member("b", False), member("c", False)]) == -1
    # A learner does not vote: it neither counts toward the quorum nor keeps it.
    assert fault_tolerance([*three, member("d", learner=True)]) == 1
    assert fault_tolerance([member("a"), member("b"), member("c"), member("d"), member("e")]) == 2
    assert fault_tolerance([]) == -1


def test_a_cluster_becomes_its_gauges():
    text = render(
        families(
            clusters=[
                cluster(
                    members=[
                        member("c-0", leader=True, dbSize=4096, dbSizeInUse=2048, restarts=1),
                        member("c-1", healthy=False, alarms=["NOSPACE"]),
                        member("c-2"),
                    ],
                    conditions=[("Available", "True"), ("Degraded", "True")],
                    readyReplicas=2,
                    leader="c-0",
                    phase="Running",
                    clusterVersion="3.6.0",
                    quotaUsedPercent=81,
                    tls={
                        "certificates": [
                            {
                                "secretName": "c-server-tls",
                                "purpose": "server",
                                "notAfter": "2027-01-01T00:00:00Z",
                            }
                        ]
                    },
                )
            ]
        )
    )
    samples = parse(text)
    labels = {"namespace": "ns", "etcdcluster": "c"}
    assert metric(samples, "etcdcluster_info", **labels, version="3.6.0", phase="Running") == 1
    assert metric(samples, "etcdcluster_replicas", **labels) == 3
    assert metric(samples, "etcdcluster_ready_replicas", **labels) == 2
    assert metric(samples, "etcdcluster_available", **labels) == 1
    assert metric(samples, "etcdcluster_degraded", **labels) == 1
    assert metric(samples, "etcdcluster_progressing", **labels) == 0
    assert metric(samples, "etcdcluster_has_leader", **labels) == 1
    assert metric(samples, "etcdcluster_fault_tolerance", **labels) == 0
    assert metric(samples, "etcdcluster_quota_used_ratio", **labels) == 0.81
    assert metric(samples, "etcdcluster_member_healthy", **labels, member="c-1") == 0
    assert metric(samples, "etcdcluster_member_leader", **labels, member="c-0") == 1
    assert metric(samples, "etcdcluster_member_restarts", **labels, member="c-0") == 1
    assert metric(samples, "etcdcluster_member_database_size_bytes", **labels, member="c-0") == 4096
    assert metric(samples, "etcdcluster_member_alarm", **labels, member="c-1", alarm="NOSPACE") == 1
    assert (
        metric(
            samples,
            "etcdcluster_certificate_expiry_timestamp_seconds",
            **labels,
            secret="c-server-tls",
            purpose="server",
        )
        == 1798761600
    )
    assert metric(samples, "exporter_up") == 1


def test_a_disaster_recovery_under_way_shows_until_it_ends():
    def in_progress(reason, status="True"):
        rebuilt = cluster()
        rebuilt["status"]["conditions"] = [
            {"type": "Progressing", "status": status, "reason": reason}
        ]
        samples = parse(render(families(clusters=[rebuilt])))
        return metric(
            samples, "etcdcluster_disaster_recovery_in_progress", namespace="ns", etcdcluster="c"
        )

    assert in_progress("RecoveringFromSurvivor") == 1
    assert in_progress("RecoveringFromBackup") == 1
    assert in_progress("RecoveringFromBackup", status="False") == 0
    assert in_progress("ScalingUp") == 0
    assert in_progress("RecoveryFailed") == 0


def test_a_cluster_not_observed_yet_has_no_member_gauges_nor_a_tolerance():
    samples = parse(render(families(clusters=[cluster()])))
    assert not [k for k in samples if k[0].startswith("quorumkeeper_etcdcluster_member_")]
    assert not [k for k in samples if k[0] == "quorumkeeper_etcdcluster_fault_tolerance"]
    assert metric(samples, "etcdcluster_available", namespace="ns", etcdcluster="c") == 0


def backup(name, cluster_name="c", phase="Completed", completed=None, verified=None, reason=""):
    conditions = []
    if verified is not None:
        conditions.append(
            {"type": "Verified", "status": "True" if verified else "False", "reason": reason}
        )
    return {
        "metadata": {"namespace": "ns", "name": name},
        "spec": {"source": {"clusterName": cluster_name}},
        "status": {"phase": phase, "completionTime": completed, "conditions": conditions},
    }


def test_backups_tell_the_newest_good_and_verified_backup_and_a_failed_verification():
    samples = parse(
        render(
            families(
                backups=[
                    backup("b1", completed="2026-01-01T00:00:00Z", verified=True),
                    backup("b2", completed="2026-01-02T00:00:00Z", verified=False, reason="Bad"),
                    backup("b3", completed="2026-01-03T00:00:00Z"),  # not verified yet
                    backup("b4", phase="Failed"),
                    backup("b5", phase="Running"),
                    backup("x1", cluster_name="other", completed="2026-01-01T00:00:00Z"),
                ]
            )
        )
    )
    labels = {"namespace": "ns", "etcdcluster": "c"}
    day = 86400
    start = 1767225600  # 2026-01-01
    assert metric(samples, "etcdbackup_last_success_timestamp_seconds", **labels) == start + 2 * day
    assert metric(samples, "etcdbackup_last_verified_timestamp_seconds", **labels) == start
    assert metric(samples, "etcdbackup_last_verification_failed", **labels) == 1
    assert metric(samples, "etcdbackups", **labels, phase="Completed") == 3
    assert metric(samples, "etcdbackups", **labels, phase="Failed") == 1
    assert metric(samples, "etcdbackups", **labels, phase="Running") == 1
    other = {"namespace": "ns", "etcdcluster": "other"}
    assert metric(samples, "etcdbackup_last_success_timestamp_seconds", **other) == start
    assert ("quorumkeeper_etcdbackup_last_verification_failed", frozenset(other.items())) not in (
        samples
    )


def test_a_verification_that_could_not_run_is_no_verdict_on_the_snapshot():
    samples = parse(
        render(
            families(
                backups=[
                    backup("b1", completed="2026-01-01T00:00:00Z", verified=True),
                    backup(
                        "b2",
                        completed="2026-01-02T00:00:00Z",
                        verified=False,
                        reason="ObjectUnreadable",
                    ),
                ]
            )
        )
    )
    labels = {"namespace": "ns", "etcdcluster": "c"}
    assert metric(samples, "etcdbackup_last_verification_failed", **labels) == 0
    assert metric(samples, "etcdbackup_last_success_timestamp_seconds", **labels) == 1767312000


def test_a_schedule_tells_its_last_success_and_interval():
    schedule = {
        "metadata": {
            "namespace": "ns",
            "name": "hourly",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"schedule": "@hourly", "backupTemplate": {"source": {"clusterName": "c"}}},
        "status": {
            "lastScheduleTime": "2026-01-01T05:00:00Z",
            "nextScheduleTime": "2026-01-01T06:00:00Z",
            "lastSuccessfulTime": "2026-01-01T04:00:30Z",
        },
    }
    never = {
        "metadata": {"namespace": "ns", "name": "new", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"suspend": True, "backupTemplate": {"source": {"clusterName": "c"}}},
        "status": {},
    }
    samples = parse(render(families(schedules=[schedule, never])))
    labels = {"namespace": "ns", "etcdbackupschedule": "hourly", "etcdcluster": "c"}
    start = 1767225600
    assert (
        metric(samples, "etcdbackupschedule_last_success_timestamp_seconds", **labels)
        == start + 4 * 3600 + 30
    )
    assert metric(samples, "etcdbackupschedule_interval_seconds", **labels) == 3600
    assert metric(samples, "etcdbackupschedule_suspended", **labels) == 0
    new = {"namespace": "ns", "etcdbackupschedule": "new", "etcdcluster": "c"}
    # Before its first backup, a schedule counts from its creation.
    assert metric(samples, "etcdbackupschedule_last_success_timestamp_seconds", **new) == start
    assert metric(samples, "etcdbackupschedule_suspended", **new) == 1


def test_restores_under_way_and_the_health_watchs_answers():
    restores = [
        {"metadata": {"namespace": "ns", "name": "r1"}, "spec": {"clusterName": "c"}},
        {
            "metadata": {"namespace": "ns", "name": "r2"},
            "spec": {"clusterName": "d"},
            "status": {"phase": "Completed"},
        },
    ]
    verdicts = {("ns", "c"): {"c-0": "", "c-1": "ALARM NOSPACE"}}
    samples = parse(render(families(restores=restores, verdicts=verdicts)))
    assert (
        metric(
            samples, "etcdrestore_in_progress", namespace="ns", etcdrestore="r1", etcdcluster="c"
        )
        == 1
    )
    assert (
        metric(
            samples, "etcdrestore_in_progress", namespace="ns", etcdrestore="r2", etcdcluster="d"
        )
        == 0
    )
    assert (
        metric(samples, "etcd_member_serving", namespace="ns", etcdcluster="c", member="c-0") == 1
    )
    assert (
        metric(samples, "etcd_member_serving", namespace="ns", etcdcluster="c", member="c-1") == 0
    )


def test_label_values_are_escaped_and_a_failed_list_says_so():
    text = render(families(clusters=[cluster(name='we"ird\\name')], scrape_error="forbidden"))
    assert 'etcdcluster="we\\"ird\\\\name"' in text
    samples = parse(text)
    assert metric(samples, "exporter_up") == 0
