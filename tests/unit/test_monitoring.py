"""spec.monitoring's objects: the PrometheusRule's expressions limited to one cluster (run by
promtool against the same series as the shared rules' unit tests: each cluster's rules fire for
it exactly as the shared rules do, and never for another cluster), the PodMonitor, and what the
operator writes, deletes and says (the Monitoring condition)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_monitoring import (
    CLUSTER_RULE_GROUPS,
    HASH_ANNOTATION,
    monitoring_plan,
    render_monitoring_objects,
    scope_expr,
    scoped_rule_groups,
    summarize_monitoring_object,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_report import (
    _monitoring_events,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheushelpers import tool  # noqa: E402

pytestmark = pytest.mark.toolchain("prometheus")

REPO = Path(__file__).resolve().parents[2]
RULES = yaml.safe_load((REPO / "config" / "prometheus" / "rules.yaml").read_text())
ALERT_TESTS = yaml.safe_load((REPO / "tests" / "prometheus" / "alerts_test.yaml").read_text())
SCOPE = {"namespace": "ns", "etcdcluster": "c"}
SCOPED = 'namespace="ns",etcdcluster="c"'


@pytest.mark.parametrize(
    ("expr", "scoped"),
    [
        ("up == 0", f"up{{{SCOPED}}} == 0"),
        ('up{job="x", } == 0', f'up{{job="x",{SCOPED}}} == 0'),
        (
            "sum by (member) (rate(a_total[5m] offset 1h))",
            f"sum by (member) (rate(a_total{{{SCOPED}}}[5m] offset 1h))",
        ),
        ("sum without(le)(b)", f"sum without(le)(b{{{SCOPED}}})"),
        (
            "a / on (namespace) group_left (member) b",
            f"a{{{SCOPED}}} / on (namespace) group_left (member) b{{{SCOPED}}}",
        ),
        ('count_values("v", c)', f'count_values("v", c{{{SCOPED}}})'),
        ('{__name__=~"x|y"} > 1e3', f'{{__name__=~"x|y",{SCOPED}}} > 1e3'),
        (
            'label_replace(d, "t", "}", "s", "(.*)")',
            f'label_replace(d{{{SCOPED}}}, "t", "}}", "s", "(.*)")',
        ),
        (
            "time() - e > 2 * f unless g == 1",
            f"time() - e{{{SCOPED}}} > 2 * f{{{SCOPED}}} unless g{{{SCOPED}}} == 1",
        ),
        (
            "max_over_time(h[1h:5m]) AND bool i",
            f"max_over_time(h{{{SCOPED}}}[1h:5m]) AND bool i{{{SCOPED}}}",
        ),
    ],
)
def test_every_selector_is_limited_to_the_cluster_and_nothing_else_changes(expr, scoped):
    assert scope_expr(expr, SCOPE) == scoped


def test_the_values_are_quoted_as_promql_strings():
    assert scope_expr("up", {"etcdcluster": 'a"b'}) == 'up{etcdcluster="a\\"b"}'


def test_only_the_groups_about_one_cluster_are_carried():
    groups = scoped_rule_groups(RULES, "ns", "c")
    assert [g["name"] for g in groups] == [f"{name}-ns-c" for name in CLUSTER_RULE_GROUPS]
    shared = {r["alert"] for g in RULES["spec"]["groups"] for r in g["rules"]}
    carried = {r["alert"] for g in groups for r in g["rules"]}
    assert carried < shared and "QuorumkeeperReconcileErrors" not in carried


def test_promtool_accepts_the_scoped_rules(tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": scoped_rule_groups(RULES, "ns", "c")}))
    result = subprocess.run([tool("promtool"), "check", "rules", str(rules)], capture_output=True)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def _clusters_in_the_alert_tests() -> list[tuple[str, str]]:
    found = set()
    for test in ALERT_TESTS["tests"]:
        for case in test.get("alert_rule_test", []):
            for alert in case.get("exp_alerts") or []:
                labels = alert["exp_labels"]
                if "etcdcluster" in labels:
                    found.add((labels["namespace"], labels["etcdcluster"]))
    return sorted(found)


def _tests_for(namespace: str, cluster: str, carried: set[str]) -> dict:
    """The shared rules' unit tests as one cluster's rules must pass them: the alerts the shared
    rules raise for this cluster, none for the others."""
    tests = copy.deepcopy(ALERT_TESTS)
    for test in tests["tests"]:
        test["alert_rule_test"] = [
            case for case in test.get("alert_rule_test", []) if case["alertname"] in carried
        ]
        for case in test["alert_rule_test"]:
            case["exp_alerts"] = [
                alert
                for alert in case.get("exp_alerts") or []
                if alert["exp_labels"].get("namespace") == namespace
                and alert["exp_labels"].get("etcdcluster") == cluster
            ]
    tests["tests"] = [t for t in tests["tests"] if t["alert_rule_test"]]
    return tests


def test_each_clusters_rules_fire_for_it_as_the_shared_rules_do_and_never_for_another(tmp_path):
    clusters = _clusters_in_the_alert_tests()
    assert len(clusters) >= 5
    failures = []
    for namespace, cluster in clusters:
        groups = scoped_rule_groups(RULES, namespace, cluster)
        for group in groups:
            for rule in group["rules"]:
                rule.pop("annotations", None)
        carried = {r["alert"] for g in groups for r in g["rules"]}
        (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups}))
        (tmp_path / "alerts_test.yaml").write_text(
            yaml.safe_dump(_tests_for(namespace, cluster, carried))
        )
        result = subprocess.run(
            [tool("promtool"), "test", "rules", "alerts_test.yaml"],
            cwd=tmp_path,
            capture_output=True,
        )
        if result.returncode != 0:
            failures.append(f"{namespace}/{cluster}:\n{result.stdout.decode()[-1500:]}")
    assert not failures, "\n".join(failures)


# -- the objects and the plan ---------------------------------------------------------------
BOTH = {
    "podMonitor": True,
    "prometheusRule": True,
    "scrapeInterval": "15s",
    "labels": {"release": "p"},
}


def wanted(monitoring=BOTH):
    return render_monitoring_objects(
        "c", "ns", "uid-1", monitoring, RULES, "etcd.quorumkeeper.dev/v1alpha1"
    )


def test_the_pod_monitor_scrapes_this_clusters_members_metrics_port():
    monitor = wanted()["PodMonitor"]
    assert monitor["metadata"]["name"] == "c" and monitor["metadata"]["namespace"] == "ns"
    assert monitor["metadata"]["labels"]["release"] == "p"
    assert monitor["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    selector = monitor["spec"]["selector"]
    assert selector["matchLabels"]["etcd.quorumkeeper.dev/cluster"] == "c"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["interval"]) == ("metrics", "15s")
    assert {r["targetLabel"] for r in endpoint["relabelings"]} == {"etcdcluster", "member"}
    assert endpoint["relabelings"][0]["sourceLabels"] == [
        "__meta_kubernetes_pod_label_etcd_quorumkeeper_dev_cluster"
    ]


def test_the_hash_follows_what_is_written():
    first = wanted()["PodMonitor"]["metadata"]["annotations"][HASH_ANNOTATION]
    assert wanted()["PodMonitor"]["metadata"]["annotations"][HASH_ANNOTATION] == first
    other = wanted({**BOTH, "labels": {}})["PodMonitor"]["metadata"]["annotations"][HASH_ANNOTATION]
    assert other != first


def existing_as(objects, uid="uid-1"):
    return {kind: summarize_monitoring_object(obj, uid) for kind, obj in objects.items()}


SERVED = {"PodMonitor": True, "PrometheusRule": True}


def test_missing_objects_are_written_and_the_condition_names_them():
    plan = monitoring_plan(wanted(), SERVED, {"PodMonitor": None, "PrometheusRule": None})
    assert plan["write"] == ["PodMonitor", "PrometheusRule"] and plan["delete"] == []
    condition = plan["condition"]
    assert (condition["status"], condition["reason"]) == ("True", "MonitoringObjectsInPlace")
    assert condition["message"] == (
        "PodMonitor c (every 15s) and PrometheusRule c (16 alerts) in place"
    )


def test_objects_in_place_are_left_alone_and_changed_ones_rewritten():
    objects = wanted()
    assert monitoring_plan(objects, SERVED, existing_as(objects))["write"] == []
    changed = wanted({**BOTH, "scrapeInterval": "1m"})
    assert monitoring_plan(changed, SERVED, existing_as(objects))["write"] == ["PodMonitor"]


def test_objects_no_longer_asked_for_are_deleted_only_when_the_cluster_owns_them():
    objects = wanted()
    only_rule = wanted({"prometheusRule": True})
    assert monitoring_plan(only_rule, SERVED, existing_as(objects))["delete"] == ["PodMonitor"]
    plan = monitoring_plan({}, SERVED, existing_as(objects, uid="someone-else"))
    assert plan["delete"] == []
    assert (plan["condition"]["status"], plan["condition"]["reason"]) == (
        "False",
        "MonitoringNotRequested",
    )


def test_an_object_of_the_same_name_made_by_someone_else_is_not_taken_over():
    plan = monitoring_plan(wanted(), SERVED, existing_as(wanted(), uid="someone-else"))
    assert plan["write"] == []
    assert plan["condition"]["reason"] == "MonitoringObjectConflict"
    assert "PodMonitor and PrometheusRule c already exists" in plan["condition"]["message"]


def test_missing_crds_are_not_an_error_the_condition_says_what_to_install():
    served = {"PodMonitor": True, "PrometheusRule": False}
    plan = monitoring_plan(wanted(), served, {"PodMonitor": None, "PrometheusRule": None})
    assert plan["write"] == ["PodMonitor"]
    condition = plan["condition"]
    assert (condition["status"], condition["reason"]) == ("False", "MonitoringCRDsMissing")
    assert condition["message"].startswith(
        "PrometheusRule not created: the API server does not serve monitoring.coreos.com/v1"
    )
    events = _monitoring_events({"conditions": []}, condition)
    assert [(e["type"], e["reason"]) for e in events] == [("Warning", "MonitoringCRDsMissing")]
    # Said once: the same condition again is no new Event.
    assert _monitoring_events({"conditions": [condition]}, condition) == []
