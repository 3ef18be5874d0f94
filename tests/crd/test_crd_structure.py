"""Static checks of the hand-written CRDs (no API server needed)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
CRD_DIR = ROOT / "config" / "crd" / "bases"
GROUP = "etcd.quorumkeeper.dev"

EXPECTED = {
    "EtcdCluster": dict(
        plural="etcdclusters", short=["etcdc"], categories=["etcd", "quorumkeeper", "all"]
    ),
    "EtcdPeer": dict(plural="etcdpeers", short=["etcdp"], categories=["etcd", "quorumkeeper"]),
    "EtcdBackup": dict(plural="etcdbackups", short=["etcdbk"], categories=["etcd", "quorumkeeper"]),
    "EtcdBackupSchedule": dict(
        plural="etcdbackupschedules", short=["etcdbks"], categories=["etcd", "quorumkeeper"]
    ),
    "EtcdRestore": dict(
        plural="etcdrestores", short=["etcdrs"], categories=["etcd", "quorumkeeper"]
    ),
}


def load_crds() -> dict[str, dict]:
    crds = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        crds[crd["spec"]["names"]["kind"]] = crd
    return crds


CRDS = load_crds()


def schema_of(kind: str) -> dict:
    (version,) = CRDS[kind]["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def walk(schema: dict, path: str = ""):
    """Yield (path, node, key) for every schema node below `schema` (key = property name,
    '[]' for items, '{}' for additionalProperties)."""
    for name, sub in (schema.get("properties") or {}).items():
        yield f"{path}.{name}", sub, name
        yield from walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield f"{path}[]", schema["items"], "[]"
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield f"{path}{{}}", schema["additionalProperties"], "{}"
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def test_all_five_kinds_present_with_expected_names():
    assert set(CRDS) == set(EXPECTED)
    for kind, want in EXPECTED.items():
        crd = CRDS[kind]
        names = crd["spec"]["names"]
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert crd["spec"]["group"] == GROUP
        assert crd["spec"]["scope"] == "Namespaced"
        assert names["plural"] == want["plural"]
        assert names["singular"] == kind.lower()
        assert names["listKind"] == kind + "List"
        assert names.get("shortNames") == want["short"]
        assert names.get("categories") == want["categories"]
        assert crd["metadata"]["name"] == f"{want['plural']}.{GROUP}"
        path = CRD_DIR / f"{GROUP}_{want['plural']}.yaml"
        assert path.exists(), f"{kind} must live in {path.name}"
        assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]
        version = crd["spec"]["versions"][0]
        assert version["served"] and version["storage"]
        assert "status" in version.get("subresources", {}), f"{kind} needs a status subresource"


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_schema_is_structural(kind):
    """The structural-schema rules the API server enforces (plus a few stricter ones)."""
    root = schema_of(kind)
    assert root.get("type") == "object"
    assert set(root["properties"]) >= {"apiVersion", "kind", "metadata", "spec", "status"}
    assert root["properties"]["metadata"] == {"type": "object"}, "root metadata must stay plain"
    forbidden_in_junctors = {
        "description",
        "type",
        "default",
        "additionalProperties",
        "nullable",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-validations",
    }
    for path, node, _key in walk(root):
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, f"{path}: int-or-string must not set type"
            assert node.get("anyOf") == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert node.get("type"), f"{path}: every node needs a type (structural schema)"
        for junctor in ("anyOf", "allOf", "oneOf", "not"):
            for sub in node.get(junctor, []) if junctor != "not" else [node.get("not", {})]:
                assert not forbidden_in_junctors & set(sub), f"{path}: {junctor} may not set those"
        if node["type"] == "object" and path != ".metadata":
            assert "properties" not in node or "additionalProperties" not in node, path
            has_shape = (
                "properties" in node
                or "additionalProperties" in node
                or node.get("x-kubernetes-preserve-unknown-fields")
            )
            assert has_shape, f"{path}: object without properties would prune everything"
        if node["type"] == "array":
            assert isinstance(node.get("items"), dict), f"{path}: arrays need items"
        if node.get("x-kubernetes-list-type") == "map":
            keys = node["x-kubernetes-list-map-keys"]
            assert set(keys) <= set(node["items"].get("required", [])), (
                f"{path}: list-map keys must be required"
            )
        for field in node.get("required", []):
            assert field in node.get("properties", {}), f"{path}: required {field} undefined"


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_every_property_has_a_description(kind):
    root = schema_of(kind)
    assert root.get("description", "").strip(), f"{kind}: root needs a description"
    missing = [
        path
        for path, node, key in walk(root)
        if key not in ("[]", "{}")
        and path != ".metadata"
        and not node.get("description", "").strip()
    ]
    assert not missing, f"{kind}: properties without description: {missing}"


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_every_cel_rule_has_a_message(kind):
    for path, node, _key in walk(schema_of(kind)):
        for rule in node.get("x-kubernetes-validations", []):
            assert rule.get("message") or rule.get("messageExpression"), f"{path}: {rule['rule']}"
            if "oldSelf" in rule["rule"] and "messageExpression" not in rule:
                assert "immutable" in rule["message"], f"{path}: explain immutability"
            elif "oldSelf" in rule["rule"]:
                # A rule on how a value may change (the version) names the old one and the new.
                assert "oldSelf" in rule["messageExpression"], f"{path}: name the old value"


def resolve(schema: dict, json_path: str) -> dict | None:
    """Resolve a CRD JSONPath (.a.b[?(@.k=="v")].c, .a[*].b) against a schema."""
    if json_path.startswith(".metadata."):
        return (
            {"type": "string", "format": "date-time"}
            if json_path == ".metadata.creationTimestamp"
            else {"type": "string"}
        )
    node = schema
    tokens = re.findall(
        r"\.([A-Za-z0-9_]+)|\[(\?\(@\.([A-Za-z0-9_]+)==\"[^\"]*\"\)|\*|\d+)\]", json_path
    )
    if "".join(f".{a}" if a else f"[{b}]" for a, b, _ in tokens) != json_path:
        raise ValueError(f"unsupported JSONPath {json_path}")
    for name, _index, filter_key in tokens:
        if name:
            props = node.get("properties") or {}
            if name not in props:
                return None
            node = props[name]
        else:
            if node.get("type") != "array":
                return None
            node = node["items"]
            if filter_key and filter_key not in (node.get("properties") or {}):
                return None
    return node


COLUMN_TYPES = {
    "integer": {"integer"},
    "number": {"integer", "number"},
    "boolean": {"boolean"},
    "string": {"string"},
    "date": {"string"},
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_printer_columns_point_at_real_fields(kind):
    (version,) = CRDS[kind]["spec"]["versions"]
    root = schema_of(kind)
    columns = version.get("additionalPrinterColumns", [])
    assert columns, f"{kind}: no printer columns"
    assert columns[-1]["name"] == "Age" and columns[-1]["jsonPath"] == ".metadata.creationTimestamp"
    for col in columns:
        node = resolve(root, col["jsonPath"])
        assert node is not None, f"{kind} column {col['name']}: {col['jsonPath']} not in schema"
        assert node.get("type") in COLUMN_TYPES[col["type"]], (
            f"{kind} column {col['name']}: {col['type']} column on a {node.get('type')} field"
        )


def test_resolve_rejects_wrong_paths():
    """The printer-column check above must be able to fail."""
    root = schema_of("EtcdCluster")
    assert resolve(root, ".status.readyReplica") is None
    assert resolve(root, '.status.conditions[?(@.typ=="Available")].status') is None
    assert resolve(root, ".spec.replicas.foo") is None
    assert resolve(root, '.status.conditions[?(@.type=="Available")].status')["type"] == "string"


def test_etcdcluster_printer_columns():
    (version,) = CRDS["EtcdCluster"]["spec"]["versions"]
    cols = [(c["name"].upper(), c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert cols == [
        ("READY", ".status.readyReplicas"),
        ("REPLICAS", ".spec.replicas"),
        ("VERSION", ".spec.version"),
        ("AVAILABLE", '.status.conditions[?(@.type=="Available")].status'),
        ("LEADER", ".status.leader"),
        ("DB", ".status.databaseSize"),
        ("QUOTA", ".status.quotaUsedPercent"),
        ("LAST BACKUP", ".status.lastBackup.completionTime"),
        ("AGE", ".metadata.creationTimestamp"),
    ]


def test_etcdpeer_printer_columns():
    (version,) = CRDS["EtcdPeer"]["spec"]["versions"]
    cols = [(c["name"].upper(), c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert cols == [
        ("CLUSTER", ".spec.clusterName"),
        ("READY", ".status.ready"),
        ("VERSION", ".status.serverVersion"),
        ("MEMBER", ".status.memberID"),
        ("AGE", ".metadata.creationTimestamp"),
    ]


def test_scale_subresource_paths_exist():
    (version,) = CRDS["EtcdCluster"]["spec"]["versions"]
    scale = version["subresources"]["scale"]
    root = schema_of("EtcdCluster")
    assert scale == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert resolve(root, scale["specReplicasPath"])["type"] == "integer"
    assert resolve(root, scale["statusReplicasPath"])["type"] == "integer"
    assert resolve(root, scale["labelSelectorPath"])["type"] == "string"
    for kind in EXPECTED:
        if kind != "EtcdCluster":
            assert "scale" not in CRDS[kind]["spec"]["versions"][0]["subresources"]


def test_etcdcluster_spec_fields():
    spec = schema_of("EtcdCluster")["properties"]["spec"]
    props = spec["properties"]
    assert spec["required"] == ["version"]
    assert props["replicas"]["type"] == "integer" and props["replicas"]["format"] == "int32"
    assert props["replicas"]["default"] == 3 and props["replicas"]["minimum"] == 1
    assert props["paused"] == {**props["paused"], "type": "boolean", "default": False}
    assert props["repository"]["type"] == "string"
    assert "default" not in props["repository"], "the default comes from the operator's env"
    vct = props["storage"]["properties"]["volumeClaimTemplate"]["properties"]
    assert set(vct) == {"storageClassName", "accessModes", "resources"}
    storage = vct["resources"]["properties"]["requests"]["properties"]["storage"]
    assert storage["x-kubernetes-int-or-string"] is True
    pod = props["podTemplate"]["properties"]
    assert set(pod) == {
        "metadata",
        "resources",
        "affinity",
        "topologySpreadConstraints",
        "tolerations",
        "nodeSelector",
    }
    assert pod["affinity"]["x-kubernetes-preserve-unknown-fields"] is True
    assert pod["topologySpreadConstraints"]["items"]["x-kubernetes-preserve-unknown-fields"] is True
    assert pod["tolerations"]["items"]["x-kubernetes-preserve-unknown-fields"] is True
    for part in ("limits", "requests"):
        assert pod["resources"]["properties"][part]["additionalProperties"][
            "x-kubernetes-int-or-string"
        ]


def test_etcdcluster_status_fields():
    status = schema_of("EtcdCluster")["properties"]["status"]["properties"]
    assert set(status) == {
        "replicas",
        "readyReplicas",
        "selector",
        "members",
        "clusterVersion",
        "leader",
        "observedGeneration",
        "phase",
        "conditions",
        "recovery",
        "tls",
        "auth",
        "maintenance",
        "databaseSize",
        "volumeSize",
        "quotaUsedPercent",
        "lastBackup",
    }
    assert set(status["recovery"]["properties"]) == {"quorumLossSince", "last"}
    member = status["members"]["items"]["properties"]
    assert set(member) == {
        "name",
        "id",
        "isLearner",
        "isLeader",
        "version",
        "healthy",
        "pod",
        "podReady",
        "restarts",
        "dbSize",
        "dbSizeInUse",
        "alarms",
        "quotaUsedPercent",
        "fragmentedPercent",
        "volumeUsedPercent",
        "configUpToDate",
    }
    assert status["conditions"]["x-kubernetes-list-type"] == "map"
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def test_etcdpeer_fields():
    spec = schema_of("EtcdPeer")["properties"]["spec"]
    assert set(spec["required"]) == {"clusterName", "version"}
    boot = spec["properties"]["bootstrap"]["properties"]
    assert boot["initialClusterState"]["enum"] == ["New", "Existing"]
    host = boot["static"]["properties"]["initialCluster"]["items"]["properties"]
    assert set(host) == {"name", "host", "scheme"}
    assert host["scheme"]["enum"] == ["http", "https"]
    status = schema_of("EtcdPeer")["properties"]["status"]["properties"]
    assert {"serverVersion", "memberID", "ready", "podName", "conditions"} <= set(status)


def without_descriptions(node):
    node = copy.deepcopy(node)
    node.pop("description", None)
    return node


def test_shared_shapes_are_identical():
    """Peers, restores and schedules reuse EtcdCluster/EtcdBackup shapes verbatim, so that one
    set of rules (and one set of role code) applies everywhere."""
    cluster_spec = schema_of("EtcdCluster")["properties"]["spec"]
    peer_spec = schema_of("EtcdPeer")["properties"]["spec"]
    for field in ("version", "repository", "podTemplate", "options"):
        assert peer_spec["properties"][field] == cluster_spec["properties"][field], field
    # A peer's storage class is its claim's; a cluster's can change (its members move).
    peer_storage, cluster_storage = (
        {k: v for k, v in spec["properties"]["storage"].items() if k != "description"}
        for spec in (peer_spec, cluster_spec)
    )
    peer_rules = peer_storage.pop("x-kubernetes-validations")
    cluster_rules = cluster_storage.pop("x-kubernetes-validations")
    assert peer_storage == cluster_storage
    assert "storageClassName" in peer_rules[0]["rule"] and "accessModes" in peer_rules[0]["rule"]
    assert [r for r in cluster_rules if "accessModes" in r["rule"]], cluster_rules
    # A peer's tls is the operator's to change (client TLS turned on or off); a cluster's is
    # guarded by rules of its own.
    cluster_tls_rules = [r for r in cluster_spec["x-kubernetes-validations"] if "tls" in r["rule"]]
    assert len(cluster_tls_rules) == 2, cluster_tls_rules
    assert not [r for r in peer_spec["x-kubernetes-validations"] if "tls" in r["rule"]]
    # A peer has no spec.maintenance.
    assert peer_spec["x-kubernetes-validations"] == [
        r
        for r in cluster_spec["x-kubernetes-validations"]
        if r not in cluster_tls_rules and "self.maintenance" not in r["rule"]
    ]

    template = schema_of("EtcdRestore")["properties"]["spec"]["properties"]["clusterTemplate"]
    assert without_descriptions(template) == without_descriptions(cluster_spec)

    backup_spec = schema_of("EtcdBackup")["properties"]["spec"]
    backup_template = schema_of("EtcdBackupSchedule")["properties"]["spec"]["properties"][
        "backupTemplate"
    ]
    assert backup_template["properties"] == backup_spec["properties"]
    assert backup_template["required"] == backup_spec["required"]

    conditions = schema_of("EtcdCluster")["properties"]["status"]["properties"]["conditions"]
    for kind in EXPECTED:
        other = schema_of(kind)["properties"]["status"]["properties"]["conditions"]
        assert _strip_item_descriptions(other) == _strip_item_descriptions(conditions), kind


def _strip_item_descriptions(conditions):
    items = copy.deepcopy(conditions["items"])
    for prop in items["properties"].values():
        prop.pop("description", None)
    items.pop("description", None)
    return items


def test_condition_shape_is_metav1_condition():
    for kind in EXPECTED:
        cond = schema_of(kind)["properties"]["status"]["properties"]["conditions"]
        assert cond["x-kubernetes-list-type"] == "map" and cond["x-kubernetes-list-map-keys"] == [
            "type"
        ]
        items = cond["items"]
        assert set(items["required"]) == {
            "type",
            "status",
            "reason",
            "message",
            "lastTransitionTime",
        }
        assert set(items["properties"]) == {
            "type",
            "status",
            "reason",
            "message",
            "lastTransitionTime",
            "observedGeneration",
        }
        assert items["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
        assert items["properties"]["lastTransitionTime"]["format"] == "date-time"
