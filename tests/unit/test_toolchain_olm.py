"""The OLM tools `make toolchain` builds are the pinned ones, stamped with their versions, and the
OLM CRDs it keeps beside them are the eight of the operator-framework/api the pin resolves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack" / "toolchain"))

import install  # noqa: E402

pytestmark = pytest.mark.toolchain("olm", "opm", "operator_sdk")

OLM_CRDS = {
    "catalogsources",
    "clusterserviceversions",
    "installplans",
    "olmconfigs",
    "operatorconditions",
    "operatorgroups",
    "operators",
    "subscriptions",
}


def manifest() -> dict:
    """The toolchain with the OLM tools (waited for while `make test` builds them)."""
    for key in ("olm", "opm", "operator_sdk"):
        install.manifest.component(key)
    return install.manifest.read()


def output(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout


def test_olm_binaries_and_crds():
    olm = manifest()["olm"]
    wrapper = install.TOOLCHAIN / "olm"
    version = install.module_version(
        wrapper, "github.com/operator-framework/operator-lifecycle-manager"
    )
    assert olm["version"] == version
    for name in ("olm", "catalog"):
        assert f"OLM version: {version}" in output(olm[name], "--version"), name
    crds = {}
    for path in Path(olm["crds"]).glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        crds[crd["spec"]["names"]["plural"]] = crd
    assert set(crds) == OLM_CRDS
    assert all(c["spec"]["group"] == "operators.coreos.com" for c in crds.values())
    quickstart = list(yaml.safe_load_all(Path(olm["quickstart"]).read_text()))
    images = {
        c["image"]
        for d in quickstart
        if d and d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    # Upstream pins its release image by digest: whoever applies this file maps that image.
    assert {i.split("@sha256:")[0] for i in images} == {"quay.io/operator-framework/olm"}


def test_opm_and_operator_sdk_versions():
    tools = manifest()
    opm_version = install.module_version(
        install.TOOLCHAIN / "opm", "github.com/operator-framework/operator-registry"
    )
    assert tools["opm"]["version"] == opm_version
    assert f'OpmVersion:"{opm_version}"' in output(tools["opm"]["opm"], "version")
    sdk_version = install.module_version(
        install.TOOLCHAIN / "operator-sdk", "github.com/operator-framework/operator-sdk"
    )
    assert tools["operator_sdk"]["version"] == sdk_version
    sdk = output(tools["operator_sdk"]["operator_sdk"], "version")
    assert f'operator-sdk version: "{sdk_version}"' in sdk
