"""The Grafana dashboard's queries, for the tests that check them (tests/unit/test_dashboard.py
without Prometheus, tests/e2e/test_observability.py against a real one)."""

from __future__ import annotations

import json
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parents[1] / "config" / "grafana" / "quorumkeeper-etcd.json"
# What Grafana puts in for its variables when it runs a query (the unit tests' stand-ins).
GRAFANA_VARIABLES = {"$namespace": "ns", "$cluster": "c", "$__rate_interval": "1m"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries(board: dict, variables: dict = GRAFANA_VARIABLES) -> list[tuple[str, str]]:
    """(panel title, PromQL with the variables put in) of every target of every panel."""
    found = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in sorted(variables.items(), key=lambda kv: -len(kv[0])):
                expr = expr.replace(name, value)
            found.append((panel["title"], expr))
    return found
