"""bundle/ is what `make bundle` (operator-sdk over kubectl's kustomize) makes of config/, and it
passes `operator-sdk bundle validate`, OperatorHub's optional suite included.

No cluster: the tools run on a copy of the files they read, in a temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from kubehelpers import toolchain_component

pytestmark = pytest.mark.toolchain("operator_sdk")

ROOT = Path(__file__).resolve().parent.parent.parent
CACHE = Path(os.environ.get("QK_CACHE", Path.home() / ".cache" / "quorumkeeper"))
CSV = "bundle/manifests/quorumkeeper.clusterserviceversion.yaml"
# What `make bundle` reads, and what it writes.
INPUTS = ["Makefile", "PROJECT", "config", "bundle", "bundle.Dockerfile"]
OUTPUTS = ["bundle", "bundle.Dockerfile", "config/manifests"]
# operator-sdk stamps the CSV with the time it wrote it; nothing else may differ.
CREATED_AT = re.compile(r"^(\s*createdAt:).*$", re.M)
# Warnings of the operatorframework suite that stay, and why (see config/manifests/bases).
ACCEPTED_WARNINGS = {
    # RBAC rules name no API version, so the validator takes our policy/poddisruptionbudgets
    # rule for policy/v1beta1 (removed in 1.25); the operator writes policy/v1 only.
    "Migrate the API(s) for poddisruptionbudgets",
}


def tool(key: str) -> str:
    return toolchain_component(key)


def operator_sdk() -> str:
    return tool("operator_sdk")["operator_sdk"]


def make_bundle(workdir: Path, edit=None) -> subprocess.CompletedProcess:
    """Run `make bundle` on a copy of its inputs (the toolchain is taken as installed);
    `edit(workdir)` may change the copy first."""
    operator_sdk()  # waited for: make reads its path from toolchain.json when it starts
    for name in INPUTS:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, workdir / name)
        else:
            shutil.copy2(src, workdir / name)
    if edit:
        edit(workdir)
    return subprocess.run(
        ["make", "--no-print-directory", "-o", "toolchain", "bundle"],
        cwd=workdir,
        env=dict(os.environ, QK_CACHE=str(CACHE)),
        capture_output=True,
        text=True,
        timeout=300,
    )


def outputs(root: Path) -> dict[str, str]:
    files = {}
    for name in OUTPUTS:
        path = root / name
        for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if f.is_file():
                files[str(f.relative_to(root))] = CREATED_AT.sub(r"\1 <time>", f.read_text())
    return files


def differences(have: dict[str, str], want: dict[str, str]) -> list[str]:
    return sorted(n for n in set(have) | set(want) if have.get(n) != want.get(n))


def validate(bundle: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [operator_sdk(), "bundle", "validate", str(bundle), "--output", "json-alpha1", *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"operator-sdk bundle validate gave no JSON:\n{proc.stdout}\n{proc.stderr}")


def messages(result: dict, kind: str) -> list[str]:
    return [o["message"] for o in result.get("outputs") or [] if o["type"] == kind]


def test_make_bundle_reproduces_the_committed_bundle(tmp_path):
    proc = make_bundle(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stale = differences(outputs(tmp_path), outputs(ROOT))
    assert not stale, f"bundle/ is stale ({stale}): run make bundle and commit what it changed"


def test_make_bundle_drift_is_seen(tmp_path):
    """The comparison above fails when config/ changed, and make bundle drops stale manifests."""
    base = "config/manifests/bases/quorumkeeper.clusterserviceversion.yaml"

    def edit(workdir: Path) -> None:
        path = workdir / base
        path.write_text(
            path.read_text().replace("minKubeVersion: 1.30.0", "minKubeVersion: 1.31.0")
        )
        (workdir / "bundle/manifests/stray.yaml").write_text("apiVersion: v1\nkind: ConfigMap\n")

    proc = make_bundle(tmp_path, edit)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (tmp_path / "bundle/manifests/stray.yaml").exists()
    assert differences(outputs(tmp_path), outputs(ROOT)) == [CSV, base]


def test_bundle_validate_operatorhub_suite():
    result = validate(ROOT / "bundle", "--select-optional", "suite=operatorframework")
    assert not messages(result, "error"), messages(result, "error")
    assert result["passed"] is True
    unexpected = [
        w for w in messages(result, "warning") if not any(a in w for a in ACCEPTED_WARNINGS)
    ]
    assert not unexpected, (
        f"new warnings: say why they stay (ACCEPTED_WARNINGS) or fix them: {unexpected}"
    )


def test_bundle_validate_fails_on_a_broken_bundle(tmp_path):
    shutil.copytree(ROOT / "bundle", tmp_path / "bundle")
    path = tmp_path / CSV
    csv = yaml.safe_load(path.read_text())
    csv["metadata"]["annotations"]["capabilities"] = "Everything"
    path.write_text(yaml.safe_dump(csv))
    result = validate(tmp_path / "bundle", "--select-optional", "suite=operatorframework")
    assert result["passed"] is False
    assert any("capabilities" in e for e in messages(result, "error")), result

    # An owned CRD missing from the bundle fails the default (OLM) checks too.
    shutil.copy2(ROOT / CSV, path)
    (tmp_path / "bundle/manifests/etcd.quorumkeeper.dev_etcdrestores.yaml").unlink()
    result = validate(tmp_path / "bundle")
    assert result["passed"] is False
    assert any("Kind=EtcdRestore" in e for e in messages(result, "error")), result


def schema_has_path(schema: dict, dotted: str) -> bool:
    node = schema
    for part in dotted.split("."):
        props = node.get("properties") or {}
        if part in props:
            node = props[part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return False
        if node.get("type") == "array" and "items" in node:
            node = node["items"]
    return True


def test_descriptors_name_fields_of_the_crds():
    """operator-sdk copies spec/status descriptors from the CSV base without checking them."""
    csv = yaml.safe_load((ROOT / CSV).read_text())
    crds = {}
    for path in (ROOT / "config/crd/bases").glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        crds[crd["metadata"]["name"]] = crd
    owned = csv["spec"]["customresourcedefinitions"]["owned"]
    assert sorted(o["name"] for o in owned) == sorted(crds)
    for entry in owned:
        (version,) = [v for v in crds[entry["name"]]["spec"]["versions"] if v.get("storage")]
        assert entry["version"] == version["name"]
        schema = version["schema"]["openAPIV3Schema"]["properties"]
        for section in ("spec", "status"):
            descriptors = entry.get(f"{section}Descriptors") or []
            assert descriptors, f"{entry['kind']}: no {section}Descriptors"
            for d in descriptors:
                assert d.get("description") and d.get("displayName"), d
                assert schema_has_path(schema[section], d["path"]), (entry["kind"], d["path"])
