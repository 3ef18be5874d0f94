"""The Grafana dashboard (config/grafana/quorumkeeper-etcd.json) without Grafana: valid JSON that
Grafana imports (unique panel ids, a Prometheus datasource variable, panels on the grid), and
every query PromQL that Prometheus parses once Grafana's variables are put in. That each query
returns series is tested against a real Prometheus in tests/e2e/test_observability.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dashboardhelpers import dashboard, queries  # noqa: E402
from prometheushelpers import tool  # noqa: E402

pytestmark = pytest.mark.toolchain("prometheus")


def test_the_dashboard_is_one_grafana_can_import():
    board = dashboard()
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    names = {v["name"] for v in board["templating"]["list"]}
    assert {"datasource", "namespace", "cluster"} <= names
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used = set(re.findall(r"\$\w+", target["expr"]))
            assert used <= {"$namespace", "$cluster", "$__rate_interval"}, (panel["title"], used)


def test_every_query_is_promql_prometheus_parses(tmp_path):
    promtool = tool("promtool")
    rules = [
        {"record": f"dashboard:query_{i}", "expr": expr}
        for i, (_, expr) in enumerate(queries(dashboard()))
    ]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_the_dashboard_covers_health_leader_requests_space_and_backups():
    text = " ".join(expr for _, expr in queries(dashboard()))
    for metric in (
        "quorumkeeper_etcdcluster_available",
        "quorumkeeper_etcdcluster_member_leader",
        "grpc_server_handled_total",
        "etcd_disk_wal_fsync_duration_seconds_bucket",
        "etcd_mvcc_db_total_size_in_bytes",
        "etcd_server_quota_backend_bytes",
        "quorumkeeper_etcdbackup_last_success_timestamp_seconds",
    ):
        assert metric in text, metric
