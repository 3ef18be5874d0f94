# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The operator's own metrics, for Prometheus: what the custom resources' status says, as gauges.

Why: etcd's metrics (each member's ``/metrics``) tell how etcd runs, not what the operator knows:
whether a cluster still has a member to spare before it loses its quorum, how old its newest
backup is (the real recovery point), whether that backup was proven to restore, when its
certificates expire, whether a restore or a disaster recovery is under way. The operator writes
all of that into the status of its resources; this module turns the status into Prometheus
gauges, so alerts and dashboards read it without a reconcile doing any work for them.

What: ``families(...)`` (pure, unit tested) maps the EtcdClusters, EtcdBackups,
EtcdBackupSchedules and EtcdRestores, and the health watch's latest ``/health`` verdicts, to
metric families; ``render`` writes Prometheus' text format. ``MetricsServer`` serves them on
``/metrics`` from the health watch's process (the operator pod's second container), listing the
resources from the API server's watch cache at most every few seconds. Nothing here adds to a
reconcile.

Labels: ``namespace`` and ``etcdcluster`` on everything about a cluster (a backup's is its
source cluster), ``member`` on a member, ``etcdbackupschedule`` / ``etcdrestore`` on theirs.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_VERSION,
    parse_timestamp,
    quorum_size,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_schedule_retention import (
    failed_verification,
    is_good,
    is_verified,
)

PREFIX = "quorumkeeper_"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_EXPORTER_PORT = 8081
# The resources are listed again when a scrape comes this long after the last list.
CACHE_SECONDS = 5.0


@dataclass
class Family:
    name: str
    help: str
    samples: list[tuple[dict, float]] = field(default_factory=list)

    def add(self, labels: dict, value) -> None:
        self.samples.append((labels, float(value)))


class Families:
    """Metric families by name, in the order they are first declared."""

    def __init__(self):
        self.by_name: dict[str, Family] = {}

    def __call__(self, name: str, help_text: str) -> Family:
        if name not in self.by_name:
            self.by_name[name] = Family(PREFIX + name, help_text)
        return self.by_name[name]

    def __iter__(self):
        return iter(self.by_name.values())


def _seconds(stamp) -> float | None:
    if not stamp:
        return None
    try:
        return parse_timestamp(stamp).timestamp()
    except ValueError:
        return None


def _condition(obj: dict, kind: str) -> dict:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return {}


def _condition_true(obj: dict, kind: str) -> bool:
    return _condition(obj, kind).get("status") == "True"


# Progressing's reasons while the operator rebuilds a cluster that lost its quorum and data
# (qk_plan_recovery): from a surviving member's data, or from a backup restored in place.
DISASTER_RECOVERY_REASONS = ("RecoveringFromSurvivor", "RecoveringFromBackup")


def _meta(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def fault_tolerance(members: list[dict]) -> int:
    """How many more voting members the cluster can lose and keep its quorum: healthy voting
    members less the quorum of the voting members (negative: the quorum is lost)."""
    voting = [m for m in members if not m.get("isLearner")]
    healthy = [m for m in voting if m.get("healthy")]
    return len(healthy) - quorum_size(len(voting)) if voting else -1


def cluster_metrics(out: Families, clusters: Iterable[dict]) -> None:
    for cluster in clusters:
        namespace, name = _meta(cluster)
        spec, status = cluster.get("spec") or {}, cluster.get("status") or {}
        labels = {"namespace": namespace, "etcdcluster": name}
        members = status.get("members") or []
        out("etcdcluster_info", "An EtcdCluster: its etcd version and phase (always 1).").add(
            {
                **labels,
                "version": str(status.get("clusterVersion") or spec.get("version") or ""),
                "phase": str(status.get("phase") or ""),
            },
            1,
        )
        out("etcdcluster_replicas", "Members the EtcdCluster asks for (spec.replicas).").add(
            labels, spec.get("replicas", 3)
        )
        out(
            "etcdcluster_ready_replicas",
            "Members whose pod is ready and that report healthy (status.readyReplicas).",
        ).add(labels, status.get("readyReplicas") or 0)
        for kind in ("Available", "Progressing", "Degraded"):
            out(
                f"etcdcluster_{kind.lower()}",
                f"1 while the EtcdCluster's {kind} condition is True, else 0.",
            ).add(labels, _condition_true(cluster, kind))
        out(
            "etcdcluster_paused", "1 while spec.paused stops the operator acting on the cluster."
        ).add(labels, bool(spec.get("paused")))
        out("etcdcluster_has_leader", "1 when the status names a raft leader, else 0.").add(
            labels, bool(status.get("leader"))
        )
        if members:
            out(
                "etcdcluster_fault_tolerance",
                "Voting members the cluster can still lose and keep its quorum (healthy voting "
                "members less the quorum); negative when the quorum is lost.",
            ).add(labels, fault_tolerance(members))
        out(
            "etcdcluster_quota_used_ratio",
            "Database size over the backend quota of the member closest to it (NOSPACE at 1).",
        ).add(labels, (status.get("quotaUsedPercent") or 0) / 100)
        recovery = status.get("recovery") or {}
        out(
            "etcdcluster_quorum_lost_since_timestamp_seconds",
            "When an unrepairable quorum loss was first seen (0: none).",
        ).add(labels, _seconds(recovery.get("quorumLossSince")) or 0)
        progressing = _condition(cluster, "Progressing")
        out(
            "etcdcluster_disaster_recovery_in_progress",
            "1 while the operator rebuilds the cluster after a quorum loss with lost data "
            "(from a survivor or a backup), else 0.",
        ).add(
            labels,
            progressing.get("status") == "True"
            and progressing.get("reason") in DISASTER_RECOVERY_REASONS,
        )
        defragmentation = (status.get("maintenance") or {}).get("lastDefragmentation") or {}
        if defragmentation.get("at"):
            out(
                "etcdcluster_last_defragmentation_timestamp_seconds",
                "When the last defragmentation of the cluster ended.",
            ).add(labels, _seconds(defragmentation["at"]) or 0)
        for member in members:
            member_labels = {**labels, "member": str(member.get("name") or member.get("id"))}
            out("etcdcluster_member_healthy", "1 when the member answered its health check.").add(
                member_labels, bool(member.get("healthy"))
            )
            out("etcdcluster_member_leader", "1 for the member that is the raft leader.").add(
                member_labels, bool(member.get("isLeader"))
            )
            out("etcdcluster_member_learner", "1 for a non-voting learner.").add(
                member_labels, bool(member.get("isLearner"))
            )
            out(
                "etcdcluster_member_restarts",
                "Times etcd restarted in the member's current pod.",
            ).add(member_labels, member.get("restarts") or 0)
            if member.get("dbSize") is not None:
                out(
                    "etcdcluster_member_database_size_bytes",
                    "Size of the member's database file, free pages included.",
                ).add(member_labels, member["dbSize"])
            if member.get("dbSizeInUse") is not None:
                out(
                    "etcdcluster_member_database_in_use_bytes",
                    "Bytes of the member's database in use (the rest is free pages).",
                ).add(member_labels, member["dbSizeInUse"])
            if member.get("volumeUsedPercent") is not None:
                out(
                    "etcdcluster_member_volume_used_ratio",
                    "The member's database and the room etcd's write-ahead log takes, over its "
                    "volume's capacity: etcd stops with ENOSPC at 1, whatever its quota.",
                ).add(member_labels, member["volumeUsedPercent"] / 100)
            for alarm in member.get("alarms") or []:
                out(
                    "etcdcluster_member_alarm",
                    "1 for each etcd alarm raised on the member (NOSPACE, CORRUPT).",
                ).add({**member_labels, "alarm": str(alarm)}, 1)
        for certificate in (status.get("tls") or {}).get("certificates") or []:
            expiry = _seconds(certificate.get("notAfter"))
            if expiry is not None:
                out(
                    "etcdcluster_certificate_expiry_timestamp_seconds",
                    "When each of the cluster's certificates expires (status.tls.certificates).",
                ).add(
                    {
                        **labels,
                        "secret": str(certificate.get("secretName") or ""),
                        "purpose": str(certificate.get("purpose") or ""),
                    },
                    expiry,
                )


def backup_metrics(out: Families, backups: Iterable[dict], schedules: Iterable[dict]) -> None:
    by_cluster: dict[tuple[str, str], dict] = {}
    for backup in backups:
        namespace, _ = _meta(backup)
        cluster = ((backup.get("spec") or {}).get("source") or {}).get("clusterName", "")
        status = backup.get("status") or {}
        seen = by_cluster.setdefault((namespace, cluster), {"phases": {}})
        phase = status.get("phase") or "Pending"
        seen["phases"][phase] = seen["phases"].get(phase, 0) + 1
        completed = _seconds(status.get("completionTime"))
        if completed is None:
            continue
        if is_good(backup):
            seen["good"] = max(seen.get("good", 0), completed)
        if is_verified(backup):
            seen["verified"] = max(seen.get("verified", 0), completed)
        refused = failed_verification(backup)
        if (refused or is_verified(backup)) and completed >= seen.get("checked", (0, False))[0]:
            seen["checked"] = (completed, refused)
    for (namespace, cluster), seen in sorted(by_cluster.items()):
        labels = {"namespace": namespace, "etcdcluster": cluster}
        for phase, count in sorted(seen["phases"].items()):
            out("etcdbackups", "EtcdBackups of each cluster, by phase.").add(
                {**labels, "phase": phase}, count
            )
        if "good" in seen:
            out(
                "etcdbackup_last_success_timestamp_seconds",
                "Completion time of the cluster's newest completed backup not found bad.",
            ).add(labels, seen["good"])
        if "verified" in seen:
            out(
                "etcdbackup_last_verified_timestamp_seconds",
                "Completion time of the cluster's newest backup proven to restore.",
            ).add(labels, seen["verified"])
        if "checked" in seen:
            out(
                "etcdbackup_last_verification_failed",
                "1 when the cluster's newest backup that verification ruled on does not restore, "
                "else 0.",
            ).add(labels, seen["checked"][1])
    for schedule in schedules:
        namespace, name = _meta(schedule)
        spec, status = schedule.get("spec") or {}, schedule.get("status") or {}
        cluster = ((spec.get("backupTemplate") or {}).get("source") or {}).get("clusterName", "")
        labels = {"namespace": namespace, "etcdbackupschedule": name, "etcdcluster": cluster}
        created = _seconds((schedule.get("metadata") or {}).get("creationTimestamp"))
        success = _seconds(status.get("lastSuccessfulTime"))
        out(
            "etcdbackupschedule_last_success_timestamp_seconds",
            "When the schedule's last backup succeeded (its creation, before the first one).",
        ).add(labels, success if success is not None else created or 0)
        last, following = (
            _seconds(status.get("lastScheduleTime")),
            _seconds(status.get("nextScheduleTime")),
        )
        if following is not None:
            out("etcdbackupschedule_next_timestamp_seconds", "When the next backup is due.").add(
                labels, following
            )
        if last is not None and following is not None and following > last:
            out(
                "etcdbackupschedule_interval_seconds",
                "Time between the schedule's last and next backup.",
            ).add(labels, following - last)
        out("etcdbackupschedule_suspended", "1 while the schedule is suspended.").add(
            labels, bool(spec.get("suspend"))
        )


def restore_metrics(out: Families, restores: Iterable[dict]) -> None:
    for restore in restores:
        namespace, name = _meta(restore)
        status = restore.get("status") or {}
        target = (restore.get("spec") or {}).get("clusterName", "")
        out(
            "etcdrestore_in_progress", "1 while an EtcdRestore has neither completed nor failed."
        ).add(
            {"namespace": namespace, "etcdrestore": name, "etcdcluster": str(target)},
            status.get("phase") not in ("Completed", "Failed"),
        )


def health_metrics(out: Families, verdicts: dict) -> None:
    """The health watch's latest ``/health`` answers: ``{(namespace, cluster): {member: why}}``,
    ``why`` empty for a member that serves."""
    for (namespace, cluster), members in sorted(verdicts.items()):
        for member, verdict in sorted(members.items()):
            out(
                "etcd_member_serving",
                "1 when the member's /health said it serves, at the health watch's last look "
                "(every few seconds), else 0 (an alarm, no leader, no answer).",
            ).add({"namespace": namespace, "etcdcluster": cluster, "member": member}, not verdict)


def families(
    clusters=(), backups=(), schedules=(), restores=(), verdicts=None, scrape_error: str = ""
) -> Families:
    out = Families()
    cluster_metrics(out, clusters)
    backup_metrics(out, backups, schedules)
    restore_metrics(out, restores)
    health_metrics(out, verdicts or {})
    out("exporter_up", "1 when the last list of the resources from the API server worked.").add(
        {}, not scrape_error
    )
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(metric_families: Iterable[Family]) -> str:
    """Prometheus' text exposition format."""
    lines = []
    for family in metric_families:
        lines.append(f"# HELP {family.name} {family.help}")
        lines.append(f"# TYPE {family.name} gauge")
        for labels, value in family.samples:
            text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
            number = repr(value) if value != int(value) else str(int(value))
            lines.append(f"{family.name}{{{text}}} {number}" if text else f"{family.name} {number}")
    return "\n".join(lines) + "\n"


class MetricsServer:
    """``/metrics`` over HTTP in a thread of its own. ``lister(api_version, kind)`` lists a
    resource's objects; ``verdicts()`` gives the health watch's latest answers."""

    def __init__(
        self, lister: Callable, verdicts: Callable[[], dict], port: int = DEFAULT_EXPORTER_PORT
    ):
        self.lister, self.verdicts, self.port = lister, verdicts, port
        self.lock = threading.Lock()
        self.cached: tuple[float, str] | None = None

    def text(self) -> str:
        with self.lock:
            if self.cached and time.monotonic() - self.cached[0] < CACHE_SECONDS:
                return self.cached[1]
            objects, error = {}, ""
            for kind in ("EtcdCluster", "EtcdBackup", "EtcdBackupSchedule", "EtcdRestore"):
                try:
                    objects[kind] = self.lister(API_VERSION, kind)
                except Exception as exc:  # noqa: BLE001 - said in exporter_up, served anyway
                    objects[kind], error = [], str(exc)
            text = render(
                families(
                    objects["EtcdCluster"],
                    objects["EtcdBackup"],
                    objects["EtcdBackupSchedule"],
                    objects["EtcdRestore"],
                    self.verdicts(),
                    error,
                )
            )
            self.cached = (time.monotonic(), text)
            return text

    def start(self) -> http.server.ThreadingHTTPServer:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = server.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        httpd = http.server.ThreadingHTTPServer(("", self.port), Handler)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return httpd
