"""The alert rules (config/prometheus/rules.yaml) as Prometheus reads them: promtool accepts
them, every alert fires on the series of tests/prometheus/alerts_test.yaml that should make it
fire and not on the others, and every alert says what to do (a runbook section that exists)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheushelpers import tool  # noqa: E402

pytestmark = pytest.mark.toolchain("prometheus")

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "config" / "prometheus" / "rules.yaml"
TESTS = REPO / "tests" / "prometheus" / "alerts_test.yaml"
RUNBOOKS = REPO / "docs" / "observability.md"
RUNBOOK_BASE = "https://github.com/quorumkeeper/quorumkeeper/blob/main/docs/observability.md#"


def promtool() -> str:
    return tool("promtool")


def groups(annotations: bool = True) -> list[dict]:
    rule = yaml.safe_load(RULES.read_text())
    assert rule["kind"] == "PrometheusRule"
    found = rule["spec"]["groups"]
    if not annotations:
        for group in found:
            for each in group["rules"]:
                each.pop("annotations", None)
    return found


def alerts() -> list[dict]:
    return [r for g in groups() for r in g["rules"] if "alert" in r]


def test_promtool_accepts_the_rules_and_their_templates(tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": groups()}))
    result = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_every_alert_fires_when_it_should_and_only_then(tmp_path):
    # The unit tests compare labels; the annotations' templates are checked above.
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups(annotations=False)}))
    shutil.copy(TESTS, tmp_path / "alerts_test.yaml")
    result = subprocess.run(
        [promtool(), "test", "rules", "alerts_test.yaml"], cwd=tmp_path, capture_output=True
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_every_alert_is_unit_tested():
    tested = {
        case["alertname"]
        for test in yaml.safe_load(TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert {a["alert"] for a in alerts()} == tested


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: a["alert"])
def test_every_alert_says_how_bad_it_is_and_what_to_do(alert):
    assert alert["labels"]["severity"] in ("warning", "critical")
    notes = alert["annotations"]
    assert notes["summary"] and notes["description"]
    assert notes["runbook_url"].startswith(RUNBOOK_BASE)
    anchor = notes["runbook_url"].removeprefix(RUNBOOK_BASE)
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in RUNBOOKS.read_text().splitlines()
        if line.startswith("#")
    }
    assert anchor in headings, f"docs/observability.md has no section #{anchor}"
