"""The Prometheus operator objects of one EtcdCluster (spec.monitoring): a PodMonitor over its
members' metrics ports and a PrometheusRule with quorumkeeper's alerts, every expression
limited to this cluster. Both are named after the cluster, owned by it, and written straight to
the API server only when what exists differs from what is wanted (the hash annotation), so a
steady reconcile pays two list requests and nothing else.

The alerts come from config/prometheus/rules.yaml (the role reads it, the one place they are
written); :func:`scope_expr` adds ``namespace`` and ``etcdcluster`` matchers to every
selector, so that two clusters' rules never fire for each other.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_GROUP,
    API_VERSION,
    CLUSTER_LABEL,
    PEER_LABEL,
    cluster_owner_reference,
    member_labels,
)

MONITORING_API_VERSION = "monitoring.coreos.com/v1"
# kind -> its field in spec.monitoring, in the order conditions and Events name them.
MONITORING_KINDS = {"PodMonitor": "podMonitor", "PrometheusRule": "prometheusRule"}
HASH_ANNOTATION = f"{API_GROUP}/monitoring-hash"
# The groups of rules.yaml about one cluster; the operator's own group (reconcile errors, its
# metrics down) is not per cluster and stays in config/prometheus only.
CLUSTER_RULE_GROUPS = ("quorumkeeper-etcd-cluster", "quorumkeeper-etcd-backups")
DEFAULT_SCRAPE_INTERVAL = "30s"
NOT_REQUESTED = "MonitoringNotRequested"
MONITORING_FAILED = "MonitoringObjectsFailed"


def monitoring_object_name(cluster: str) -> str:
    return cluster


def wanted_kinds(monitoring: dict | None) -> list[str]:
    """The kinds spec.monitoring asks for."""
    monitoring = monitoring or {}
    return [kind for kind, field in MONITORING_KINDS.items() if monitoring.get(field)]


# -- limiting rule expressions to one cluster ----------------------------------------------
_TOKEN = re.compile(
    r"""
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    |(?P<number>(?:0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(?:ms|s|m|h|d|w|y)*)
    |(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
    |(?P<other>.)
    """,
    re.X | re.S,
)
# Followed by a parenthesised list of label names, not by an expression.
_LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = _LABEL_LIST_KEYWORDS | {"bool", "and", "or", "unless", "offset", "inf", "nan"}
# Aggregations may put their grouping before the parenthesis: `sum by (x) (...)`.
_AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}  # fmt: skip


def _closing(text: str, start: int, opening: str, closing: str) -> int:
    """The index just after the bracket that closes the one at ``start``, strings skipped."""
    depth, i = 0, start
    while i < len(text):
        char = text[i]
        if char in "\"'`":
            i = _TOKEN.match(text, i).end()
            continue
        if char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"unbalanced {opening!r} in PromQL expression {text!r}")


def _next_significant(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def scope_expr(expr: str, matchers: dict[str, str]) -> str:
    """``expr`` with ``matchers`` (label -> value, equality) added to every series selector:
    ``up{job="x"} == 0`` becomes ``up{job="x",namespace="ns",etcdcluster="c"} == 0``.

    A small PromQL tokenizer rather than a parser: function and aggregation names, keywords,
    label lists (``by (...)``, ``on (...)``), range and subquery brackets, strings and numbers
    are left alone; every other name is a metric."""
    added = ",".join(f"{label}={json.dumps(value)}" for label, value in matchers.items())
    out, i = [], 0
    while i < len(expr):
        char = expr[i]
        if char == "{":
            # A selector without a metric name: {__name__=~"..."}.
            end = _closing(expr, i, "{", "}")
            out.append(_with_matchers(expr[i:end], added))
            i = end
            continue
        if char == "[":
            end = _closing(expr, i, "[", "]")
            out.append(expr[i:end])
            i = end
            continue
        match = _TOKEN.match(expr, i)
        token = match.group(0)
        i = match.end()
        if match.lastgroup != "ident":
            out.append(token)
            continue
        following = _next_significant(expr, i)
        nxt = expr[following : following + 1]
        if token.lower() in _KEYWORDS:
            out.append(token)
            if token.lower() in _LABEL_LIST_KEYWORDS and nxt == "(":
                end = _closing(expr, following, "(", ")")
                out.append(expr[i:end])
                i = end
            continue
        if nxt == "(":
            out.append(token)  # a function or an aggregation
            continue
        if token.lower() in _AGGREGATIONS:
            word = _TOKEN.match(expr, following) if following < len(expr) else None
            if word and word.group(0).lower() in ("by", "without"):
                out.append(token)
                continue
        out.append(token)
        if nxt == "{":
            end = _closing(expr, following, "{", "}")
            out.append(expr[i:following] + _with_matchers(expr[following:end], added))
            i = end
        else:
            out.append("{" + added + "}")
    return "".join(out)


def _with_matchers(braces: str, added: str) -> str:
    inner = braces[1:-1].strip().rstrip(",").strip()
    return "{" + (inner + "," if inner else "") + added + "}"


def scoped_rule_groups(rules: dict, namespace: str, cluster: str) -> list[dict]:
    """The groups of a PrometheusRule (config/prometheus/rules.yaml, parsed) that are about one
    cluster, renamed after it, with every expression limited to it."""
    matchers = {"namespace": namespace, "etcdcluster": cluster}
    groups = []
    for group in (rules.get("spec") or {}).get("groups") or []:
        if group.get("name") not in CLUSTER_RULE_GROUPS:
            continue
        group = copy.deepcopy(group)
        group["name"] = f"{group['name']}-{namespace}-{cluster}"
        for rule in group.get("rules") or []:
            rule["expr"] = scope_expr(str(rule["expr"]), matchers)
        groups.append(group)
    return groups


# -- the objects ---------------------------------------------------------------------------
def _metadata(kind, cluster, namespace, owner_uid, api_version, monitoring):
    labels = {**(monitoring.get("labels") or {}), **member_labels(cluster)}
    labels["app.kubernetes.io/component"] = (
        "etcd-metrics" if kind == "PodMonitor" else "alert-rules"
    )
    return {
        "name": monitoring_object_name(cluster),
        "namespace": namespace,
        "labels": labels,
        "ownerReferences": [cluster_owner_reference(cluster, owner_uid, api_version)],
    }


def render_pod_monitor(cluster, namespace, owner_uid, monitoring, api_version=API_VERSION):
    """The PodMonitor over this cluster's members' ``metrics`` port (plain HTTP even with
    client TLS), with the ``etcdcluster`` and ``member`` labels the alerts and the dashboard
    use."""
    return {
        "apiVersion": MONITORING_API_VERSION,
        "kind": "PodMonitor",
        "metadata": _metadata("PodMonitor", cluster, namespace, owner_uid, api_version, monitoring),
        "spec": {
            "selector": {
                "matchLabels": {"app.kubernetes.io/name": "etcd", CLUSTER_LABEL: cluster},
                "matchExpressions": [{"key": PEER_LABEL, "operator": "Exists"}],
            },
            "podMetricsEndpoints": [
                {
                    "port": "metrics",
                    "path": "/metrics",
                    "interval": monitoring.get("scrapeInterval") or DEFAULT_SCRAPE_INTERVAL,
                    "relabelings": [
                        {
                            "sourceLabels": [f"__meta_kubernetes_pod_label_{_label_name(label)}"],
                            "targetLabel": target,
                        }
                        for label, target in (
                            (CLUSTER_LABEL, "etcdcluster"),
                            (PEER_LABEL, "member"),
                        )
                    ],
                }
            ],
        },
    }


def _label_name(label: str) -> str:
    """A pod label as Prometheus' Kubernetes discovery names it."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def render_prometheus_rule(
    cluster, namespace, owner_uid, monitoring, rules, api_version=API_VERSION
):
    meta = _metadata("PrometheusRule", cluster, namespace, owner_uid, api_version, monitoring)
    return {
        "apiVersion": MONITORING_API_VERSION,
        "kind": "PrometheusRule",
        "metadata": meta,
        "spec": {"groups": scoped_rule_groups(rules, namespace, cluster)},
    }


def render_monitoring_objects(cluster, namespace, owner_uid, monitoring, rules, api_version):
    """kind -> the object spec.monitoring asks for, its hash annotation set."""
    wanted = {}
    for kind in wanted_kinds(monitoring):
        if kind == "PodMonitor":
            obj = render_pod_monitor(cluster, namespace, owner_uid, monitoring, api_version)
        else:
            obj = render_prometheus_rule(
                cluster, namespace, owner_uid, monitoring, rules or {}, api_version
            )
        obj["metadata"]["annotations"] = {HASH_ANNOTATION: object_hash(obj)}
        wanted[kind] = obj
    return wanted


def object_hash(obj: dict) -> str:
    """What the operator wrote: its labels and spec (the owner is checked apart)."""
    written = {"labels": obj["metadata"].get("labels") or {}, "spec": obj.get("spec") or {}}
    return hashlib.sha256(json.dumps(written, sort_keys=True).encode()).hexdigest()[:16]


def summarize_monitoring_object(obj: dict | None, owner_uid: str) -> dict | None:
    """What the role compares: None when absent; whether this cluster owns it, its hash."""
    if obj is None:
        return None
    meta = obj.get("metadata") or {}
    return {
        "owned": any(ref.get("uid") == owner_uid for ref in meta.get("ownerReferences") or []),
        "hash": (meta.get("annotations") or {}).get(HASH_ANNOTATION),
    }


# -- what the cluster's status says ---------------------------------------------------------
def monitoring_plan(wanted: dict, served: dict, existing: dict) -> dict:
    """What to write or delete, and the Monitoring condition once done.

    ``wanted``: kind -> rendered object; ``served``: kind -> whether the API server serves it;
    ``existing``: kind -> :func:`summarize_monitoring_object` of the object named after the
    cluster (None when absent or not served)."""
    write, delete, missing, conflicts = [], [], [], []
    for kind in MONITORING_KINDS:
        found = existing.get(kind)
        if kind in wanted:
            if not served.get(kind):
                missing.append(kind)
            elif found is not None and not found["owned"]:
                conflicts.append(kind)
            elif found is None or found["hash"] != _hash_of(wanted[kind]):
                write.append(kind)
        elif found is not None and found["owned"]:
            delete.append(kind)
    return {
        "write": write,
        "delete": delete,
        "condition": monitoring_condition(wanted, missing, conflicts),
    }


def monitoring_failed(message: str) -> dict:
    """A plan that writes nothing, its condition saying why (the API server refused a read or
    a write of the objects: RBAC, a webhook)."""
    return {
        "write": [],
        "delete": [],
        "condition": {
            "type": "Monitoring",
            "status": "False",
            "reason": MONITORING_FAILED,
            "message": message,
        },
    }


def _hash_of(obj: dict) -> str:
    return obj["metadata"]["annotations"][HASH_ANNOTATION]


def monitoring_condition(wanted: dict, missing: list, conflicts: list) -> dict:
    if not wanted:
        return {
            "type": "Monitoring",
            "status": "False",
            "reason": NOT_REQUESTED,
            "message": "spec.monitoring asks for neither a PodMonitor nor a PrometheusRule",
        }
    problems = []
    if missing:
        problems.append(
            f"{' and '.join(missing)} not created: the API server does not serve "
            f"{MONITORING_API_VERSION} {', '.join(missing)} (install the Prometheus operator's "
            f"CRDs and the operator creates them at its next look, within "
            f"minutes or at once on a change of the EtcdCluster; a Prometheus without the "
            f"operator can scrape the members' prometheus.io annotations instead)"
        )
    if conflicts:
        name = next(iter(wanted.values()))["metadata"]["name"]
        problems.append(
            f"{' and '.join(conflicts)} {name} already exists and does not belong to this "
            f"EtcdCluster: delete or rename it, the operator does not take over objects it "
            f"did not make"
        )
    if problems:
        return {
            "type": "Monitoring",
            "status": "False",
            "reason": "MonitoringCRDsMissing" if missing else "MonitoringObjectConflict",
            "message": "; ".join(problems),
        }
    rule = wanted.get("PrometheusRule")
    alerts = sum(
        1
        for group in (rule or {}).get("spec", {}).get("groups", [])
        for r in group["rules"]
        if "alert" in r
    )
    described = [
        f"PodMonitor {wanted['PodMonitor']['metadata']['name']} "
        f"(every {wanted['PodMonitor']['spec']['podMetricsEndpoints'][0]['interval']})"
        if kind == "PodMonitor"
        else f"PrometheusRule {rule['metadata']['name']} ({alerts} alerts)"
        for kind in wanted
    ]
    return {
        "type": "Monitoring",
        "status": "True",
        "reason": "MonitoringObjectsInPlace",
        "message": " and ".join(described) + " in place",
    }
