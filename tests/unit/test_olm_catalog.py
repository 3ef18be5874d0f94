"""The OLM pieces that need no cluster: the file-based catalog `make catalog` builds from bundle/
with the real opm (no bundle image: the manifests are in it), its upgrade channel, and the
OLM manifests `make olm-install` applies (upstream's quickstart, trimmed, our images)."""

from __future__ import annotations

import base64
import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack" / "olm"))

import olm_catalog  # noqa: E402
import olm_install  # noqa: E402

pytestmark = pytest.mark.toolchain("olm", "opm")

TOOLS: dict = {}


@pytest.fixture(autouse=True)
def olm_toolchain():
    """The toolchain with OLM and opm (waited for while `make test` builds them)."""
    TOOLS.update(olm_install.olm_tools())


def objects(bundle: dict) -> list[dict]:
    return [
        json.loads(base64.b64decode(p["value"]["data"]))
        for p in bundle["properties"]
        if p["type"] == "olm.bundle.object"
    ]


def test_catalog_carries_the_bundle_and_an_upgrade_channel(tmp_path):
    out = olm_catalog.build(tmp_path / "catalog", upgrade_to="9.9.9")
    documents = list(yaml.safe_load_all((out / "quorumkeeper" / "catalog.yaml").read_text()))
    by_schema = {}
    for document in documents:
        by_schema.setdefault(document["schema"], []).append(document)
    assert by_schema["olm.package"][0]["defaultChannel"] == "alpha"
    version = olm_catalog.csv_of(olm_catalog.BUNDLE)["spec"]["version"]
    first, second = f"quorumkeeper.v{version}", "quorumkeeper.v9.9.9"
    assert by_schema["olm.channel"][0]["entries"] == [
        {"name": first},
        {"name": second, "replaces": first, "skipRange": f">={version} <9.9.9"},
    ]
    bundles = {b["name"]: b for b in by_schema["olm.bundle"]}
    manifests = sorted(p.name for p in (olm_catalog.BUNDLE / "manifests").glob("*.yaml"))
    for name in (first, second):
        # No image to pull or unpack: every manifest of bundle/ is inside the catalog.
        assert bundles[name]["image"] == ""
        assert len(objects(bundles[name])) == len(manifests)
    csv = next(o for o in objects(bundles[second]) if o["kind"] == "ClusterServiceVersion")
    assert (csv["spec"]["version"], csv["spec"]["replaces"]) == ("9.9.9", first)


def test_catalog_build_refuses_an_invalid_catalog(tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(olm_catalog.BUNDLE, bundle)
    annotations = bundle / "metadata" / "annotations.yaml"
    text = annotations.read_text().replace("package.v1: quorumkeeper", "package.v1: other")
    annotations.write_text(text)
    # The bundle now belongs to another package than the catalog's: opm validate says so.
    with pytest.raises(SystemExit, match="opm"):
        olm_catalog.build(tmp_path / "catalog", bundle=bundle)
    assert not (tmp_path / "catalog").exists()


def test_olm_manifests_are_the_quickstart_without_packageserver_and_public_catalog():
    documents = olm_install.manifests(TOOLS)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in documents}
    assert ("Deployment", "olm-operator") in kinds and ("Deployment", "catalog-operator") in kinds
    assert not {k for k, _ in kinds} & {"ClusterServiceVersion", "CatalogSource"}
    image = f"quay.io/operator-framework/olm:{TOOLS['olm']['version']}"
    for deployment in (d for d in documents if d["kind"] == "Deployment"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert container["image"] == image
            args = container.get("args", [])
            assert "@sha256" not in " ".join(args)
            # pflag: a single-dash long flag makes the catalog operator exit at start.
            assert all(a.startswith("--") for a in args if a.startswith("-")), args
    assert len(olm_install.crds(TOOLS)) == 8


def test_image_map_has_the_olm_and_opm_images_at_the_built_versions(tmp_path):
    images = {i["image"]: i for i in olm_install.localcluster.image_map(TOOLS, tmp_path)["images"]}
    olm = images[f"quay.io/operator-framework/olm:{TOOLS['olm']['version']}"]
    assert olm["binds"] == {
        "/bin/olm": TOOLS["olm"]["olm"],
        "/bin/catalog": TOOLS["olm"]["catalog"],
    }
    opm = images[f"quay.io/operator-framework/opm:{TOOLS['opm']['version']}"]
    assert opm["binds"] == {"/bin/opm": TOOLS["opm"]["opm"]}
