"""Observability end to end, with a real Prometheus (the toolchain's, built from the Go module
proxy) scraping the local cluster with the scrape jobs of config/prometheus/scrape-configs.yaml
and the alert rules of config/prometheus/rules.yaml:

- every query of the Grafana dashboard returns series for a running cluster with a backup;
- a member killed for good (its pod and its claim deleted, its data gone) while the cluster is
  paused makes EtcdMemberDown fire for it: its pod, recreated by its ReplicaSet, stays Pending
  without its claim, so Prometheus has no target for it while it scrapes the other members (and
  the paused cluster's status still says healthy). Once the cluster is resumed the operator
  replaces the member (same name, new member ID), the cluster is Available with 3 members and
  the data written before, and the alert clears with the member, under that same name, scraped
  up and reported healthy again;
- a backup schedule whose backups stop succeeding makes EtcdBackupTooOld fire.

The rules are the shipped ones except their `for` durations, all shortened to 5 s so that the
test does not wait minutes (tests/prometheus/alerts_test.yaml checks the real ones)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from backuphelpers import SECRET, credentials_secret, object_url, schedule_manifest
from dashboardhelpers import dashboard, queries
from freeports import free_port
from kubehelpers import ROOT, STATE, WaitTimeout, wait_until
from prometheushelpers import tool

pytestmark = [pytest.mark.cluster, pytest.mark.toolchain("prometheus")]

BUCKET = "observability"
SCHEDULES = "etcdbackupschedules.etcd.quorumkeeper.dev"
INTERVAL = "2s"


class Prometheus:
    """A Prometheus process on this host, scraping the local cluster through its API server."""

    def __init__(self, workdir: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        rules = yaml.safe_load((ROOT / "config" / "prometheus" / "rules.yaml").read_text())
        for group in rules["spec"]["groups"]:
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = "5s"
        (workdir / "rules.yml").write_text(yaml.safe_dump({"groups": rules["spec"]["groups"]}))
        jobs = yaml.safe_load((ROOT / "config" / "prometheus" / "scrape-configs.yaml").read_text())
        for job in jobs:
            for discovery in job["kubernetes_sd_configs"]:
                discovery["kubeconfig_file"] = str(STATE / "kubeconfig")
        config = {
            "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
            "rule_files": [str(workdir / "rules.yml")],
            "scrape_configs": jobs,
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        binary = tool("prometheus")
        self.log = open(workdir / "prometheus.log", "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until("Prometheus ready", self.ready, timeout=60)

    def ready(self) -> bool:
        assert self.process.poll() is None, "Prometheus exited; see prometheus.log"
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def api(self, path: str, **params) -> dict:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def active(self, alertname: str, **labels) -> list[dict]:
        """The alert's pending and firing instances with these labels (resolved ones are not
        listed)."""
        return [
            a
            for a in self.api("alerts")["alerts"]
            if a["labels"].get("alertname") == alertname
            and all(a["labels"].get(k) == v for k, v in labels.items())
        ]

    def firing(self, alertname: str, **labels) -> list[dict]:
        return [a for a in self.active(alertname, **labels) if a["state"] == "firing"]

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


@pytest.fixture
def prometheus(operator, tmp_path):
    server = Prometheus(tmp_path)
    yield server
    server.stop()


def schedule(url: str) -> dict:
    return schedule_manifest({"objectURLTemplate": url, "credentialsSecret": SECRET})


def test_prometheus_sees_the_clusters_alerts_fire_and_clear_and_the_dashboard_has_data(
    etcd_cluster, prometheus, s3, s3_port
):
    kube, ns, name = etcd_cluster.kube, etcd_cluster.namespace, etcd_cluster.name
    etcd_cluster.create(3)
    etcd_cluster.wait_available(3)
    for i in range(20):
        etcd_cluster.put(f"/observed/{i}", "x")
    kube.apply(credentials_secret(), namespace=ns)
    kube.apply(schedule(object_url(BUCKET, s3_port)), namespace=ns)

    cluster = f'namespace="{ns}", etcdcluster="{name}"'
    wait_until(
        "Prometheus scraping the 3 members and the operator's gauges of the cluster",
        lambda: (
            len(prometheus.query(f'up{{job="etcd", {cluster}}} == 1')) == 3
            and prometheus.query(f"quorumkeeper_etcdcluster_available{{{cluster}}} == 1")
            and prometheus.query(
                f"quorumkeeper_etcdbackup_last_verified_timestamp_seconds{{{cluster}}}"
            )
        ),
        timeout=180,
        interval=2,
    )

    # Every panel of the dashboard has something to show (rate windows need a few scrapes).
    variables = {"$namespace": ns, "$cluster": name, "$__rate_interval": "1m"}

    empty: list[tuple[str, str]] = []

    def every_query_has_series():
        empty[:] = [
            (title, expr)
            for title, expr in queries(dashboard(), variables)
            if not prometheus.query(expr)
        ]
        return not empty

    try:
        wait_until("every dashboard query returning series", every_query_has_series, timeout=60)
    except WaitTimeout as timeout:
        raise AssertionError(f"dashboard queries without series: {empty}") from timeout
    assert not prometheus.firing("EtcdMemberDown", namespace=ns, etcdcluster=name)

    # A member killed for good while the cluster is paused (the operator must not repair it
    # before the alert's `for` elapses): down for Prometheus until the cluster is resumed.
    member = f"{name}-1"
    old_id = etcd_cluster.member_ids()[member]
    etcd_cluster.patch_spec(paused=True)
    try:
        wait_until(
            "the operator to report the pause",
            lambda: (
                (paused := etcd_cluster.get())["status"].get("phase") == "Paused"
                and paused["status"].get("observedGeneration") == paused["metadata"]["generation"]
            ),
            timeout=60,
        )
        pod = etcd_cluster.pod_of(member)["metadata"]["name"]
        # A claim in use stays Terminating until its pod is gone (pvc-protection).
        kube("delete", "pvc", member, "-n", ns, "--wait=false")
        kube("delete", "pod", pod, "-n", ns, "--wait=false")
        wait_until("the claim gone", lambda: not kube.exists("pvc", member, ns), timeout=60)
        wait_until(
            f"EtcdMemberDown firing for {member}",
            lambda: prometheus.firing("EtcdMemberDown", namespace=ns, member=member),
            timeout=90,
            interval=1,
        )
        # Down for Prometheus because nobody repaired it: the member still has no claim.
        assert not kube.exists("pvc", member, ns)
        assert etcd_cluster.get()["status"]["phase"] == "Paused"
    finally:
        etcd_cluster.patch_spec(paused=False)
    resumed = time.monotonic()

    # Resumed, the operator replaces the member; the alert clears for that very member: it is
    # scraped and reported healthy again under its name (not merely gone from the series).
    etcd_cluster.wait_available(3, timeout=240)
    available_after = time.monotonic() - resumed
    new_id = etcd_cluster.member_ids().get(member)
    assert new_id not in (None, old_id), f"{member} not replaced: {etcd_cluster.member_ids()}"
    assert "ReplacingMember" in etcd_cluster.event_reasons()
    member_labels = f'namespace="{ns}", etcdcluster="{name}", member="{member}"'
    wait_until(
        f"EtcdMemberDown cleared for {member}, scraped up and healthy",
        lambda: (
            not prometheus.active("EtcdMemberDown", namespace=ns, member=member)
            and prometheus.query(f'up{{job="etcd", {member_labels}}} == 1')
            and prometheus.query(f"quorumkeeper_etcdcluster_member_healthy{{{member_labels}}} == 1")
        ),
        timeout=90,
        interval=1,
    )
    cleared_after = time.monotonic() - resumed
    assert not prometheus.active("EtcdMemberDown", namespace=ns, etcdcluster=name)
    assert all(etcd_cluster.value(f"/observed/{i}") == "x" for i in range(20))
    print(
        f"\n{member} replaced (member ID {old_id} -> {new_id}): Available "
        f"{available_after:.0f} s after the resume, EtcdMemberDown cleared after "
        f"{cleared_after:.0f} s"
    )

    # Backups that stop succeeding: the schedule's last success ages past two intervals.
    assert not prometheus.firing("EtcdBackupTooOld", namespace=ns, etcdbackupschedule="often")
    broken = schedule(object_url("no-such-bucket", s3_port))
    kube.apply(broken, namespace=ns)
    alert = wait_until(
        "EtcdBackupTooOld firing",
        lambda: prometheus.firing("EtcdBackupTooOld", namespace=ns, etcdbackupschedule="often"),
        timeout=120,
        interval=1,
    )
    assert alert[0]["labels"]["etcdcluster"] == name
    assert alert[0]["annotations"]["runbook_url"].endswith("#etcdbackuptooold")
    kube.run("delete", SCHEDULES, "often", "-n", ns)
