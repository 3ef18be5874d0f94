#!/usr/bin/env python3
"""A file-based catalog (FBC) of this operator, served to OLM: `make catalog`.

    olm_catalog.py up [--name quorumkeeper] [--upgrade-to VERSION]   build, validate, serve
    olm_catalog.py build --out DIR [--upgrade-to VERSION]             build and validate only
    olm_catalog.py down [--name quorumkeeper]                         stop serving it

The catalog is what the Operator SDK scaffold's `catalog-build` makes: `opm init` (the package,
default channel alpha), one olm.channel, and `opm render` of bundle/, checked by `opm validate`.
A rendered bundle DIRECTORY has `image: ""` and one olm.bundle.object property per manifest;
OLM's resolver then embeds the manifests in the InstallPlan (resolver/source_registry.go: a
bundle without BundlePath carries its objects), so there is no bundle image and no unpack Job.
`--upgrade-to 0.1.1` adds a second bundle, the same manifests with that version, which replaces
the first in the channel (an entry with replaces and skipRange): the upgrade path of a release.

Served by `opm serve` in a pod (namespace olm, image quay.io/operator-framework/opm:<version>
mapped to the toolchain's opm, the catalog directory mounted from the host) behind a Service;
the CatalogSource (sourceType grpc, spec.address = that Service) makes OLM use it without
creating a registry pod of its own. The pod restarts when the catalog's content changes (opm
reads it at start), and the catalog operator re-lists a source whenever its connection becomes
ready again.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import olm_install as olm  # noqa: E402
from olm_install import ROOT, Kubectl, localcluster, log, wait_for  # noqa: E402

PACKAGE = "quorumkeeper"
CHANNEL = "alpha"
BUNDLE = ROOT / "bundle"
CATALOG_NAMESPACE = olm.NAMESPACE  # OLM's global catalog namespace: every namespace can use it
PORT = 50051


def opm_binary() -> str:
    return localcluster.toolchain_component("opm")["opm"]


def opm(*args: str) -> str:
    result = subprocess.run([opm_binary(), *args], text=True, capture_output=True, timeout=300)
    if result.returncode != 0:
        raise SystemExit(f"opm {' '.join(args)} failed:\n{result.stderr.strip()}")
    return result.stdout


def csv_file(bundle: Path) -> Path:
    return next((bundle / "manifests").glob("*.clusterserviceversion.yaml"))


def csv_of(bundle: Path) -> dict:
    return yaml.safe_load(csv_file(bundle).read_text())


def bumped_bundle(bundle: Path, version: str, workdir: Path) -> Path:
    """A copy of the bundle whose CSV is `version` and replaces the bundle's own version."""
    copy = workdir / f"bundle-{version}"
    shutil.copytree(bundle, copy, ignore=shutil.ignore_patterns("*.py", "*.tmp", "__pycache__"))
    path = csv_file(copy)
    csv = yaml.safe_load(path.read_text())
    previous, previous_version = csv["metadata"]["name"], csv["spec"]["version"]
    csv["metadata"]["name"] = f"{PACKAGE}.v{version}"
    csv["metadata"].setdefault("annotations", {})["olm.skipRange"] = (
        f">={previous_version} <{version}"
    )
    csv["spec"]["version"] = version
    csv["spec"]["replaces"] = previous
    path.write_text(yaml.safe_dump(csv, sort_keys=False))
    return copy


def build(out: Path, bundle: Path = BUNDLE, upgrade_to: str | None = None) -> Path:
    """Write the FBC into out/<package>/catalog.yaml and validate it; returns out."""
    with tempfile.TemporaryDirectory(prefix="qk-catalog-") as scratch:
        bundles = [bundle]
        if upgrade_to:
            bundles.append(bumped_bundle(bundle, upgrade_to, Path(scratch)))
        package = yaml.safe_load(opm("init", PACKAGE, f"--default-channel={CHANNEL}", "-o", "yaml"))
        rendered = [yaml.safe_load(opm("render", str(b), "-o", "yaml")) for b in bundles]
        annotations = [csv_of(b)["metadata"].get("annotations", {}) for b in bundles]
    entries = []
    for document, csv_annotations in zip(rendered, annotations, strict=True):
        entry = {"name": document["name"]}
        if entries:
            # The upgrade graph of an FBC is its channel: the entry says what it replaces (and
            # the skipRange of the CSV's olm.skipRange, which opm render does not carry over).
            entry["replaces"] = entries[-1]["name"]
            if "olm.skipRange" in csv_annotations:
                entry["skipRange"] = csv_annotations["olm.skipRange"]
        entries.append(entry)
    channel = {"schema": "olm.channel", "package": PACKAGE, "name": CHANNEL, "entries": entries}
    staging = out.with_name(out.name + ".new")
    if staging.exists():
        shutil.rmtree(staging)
    (staging / PACKAGE).mkdir(parents=True)
    (staging / PACKAGE / "catalog.yaml").write_text(
        yaml.safe_dump_all([package, channel, *rendered], sort_keys=False)
    )
    opm("validate", str(staging))
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    return out


def catalog_dir(name: str) -> Path:
    return localcluster.Layout().state / "catalogs" / name


def serving_objects(name: str, directory: Path) -> list[dict]:
    tools = localcluster.toolchain()
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "catalog"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": CATALOG_NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            # One opm at a time behind the Service: OLM must not list the old content again
            # from a pod that is still stopping.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        "quorumkeeper.dev/catalog-digest": localcluster.tree_digest(directory)
                    },
                },
                "spec": {
                    "containers": [
                        {
                            "name": "registry",
                            "image": f"{localcluster.OPM_REPOSITORY}:{tools['opm']['version']}",
                            "args": [
                                "serve",
                                "/configs",
                                f"--port={PORT}",
                                # No --cache-dir: with one, opm insists on a cache built
                                # beforehand (catalog images run `opm serve --cache-only` at
                                # build time); without, it builds one in /tmp at start.
                                # opm's default /dev/termination-log: /dev is the host's here.
                                "--termination-log=/tmp/termination-log",
                            ],
                            "ports": [{"name": "grpc", "containerPort": PORT}],
                            # No grpc probes on the node agents; the port answers once the
                            # cache is built, which is when opm starts listening.
                            "readinessProbe": {
                                "tcpSocket": {"port": PORT},
                                "periodSeconds": 1,
                            },
                            "volumeMounts": [
                                {"name": "configs", "mountPath": "/configs", "readOnly": True}
                            ],
                        }
                    ],
                    "volumes": [
                        {
                            "name": "configs",
                            "hostPath": {"path": str(directory), "type": "Directory"},
                        }
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": CATALOG_NAMESPACE, "labels": labels},
        "spec": {"selector": labels, "ports": [{"name": "grpc", "port": PORT, "targetPort": PORT}]},
    }
    source = {
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "CatalogSource",
        "metadata": {"name": name, "namespace": CATALOG_NAMESPACE},
        "spec": {
            "sourceType": "grpc",
            "address": f"{name}.{CATALOG_NAMESPACE}.svc:{PORT}",
            "displayName": "quorumkeeper (local)",
            "publisher": "quorumkeeper",
        },
    }
    return [deployment, service, source]


def source_ready(kubectl: Kubectl, name: str) -> bool:
    source = kubectl.json(
        "get", "catalogsources.operators.coreos.com", name, "-n", CATALOG_NAMESPACE
    )
    state = source.get("status", {}).get("connectionState", {})
    return state.get("lastObservedState") == "READY"


def serve(name: str, directory: Path, kubectl: Kubectl | None = None, timeout: float = 120) -> None:
    """Serve the catalog in `directory` as CatalogSource olm/<name>; wait until OLM reads it."""
    kubectl = kubectl or Kubectl()
    kubectl.apply(serving_objects(name, directory))
    kubectl.run(
        "rollout",
        "status",
        f"deployment/{name}",
        "-n",
        CATALOG_NAMESPACE,
        f"--timeout={int(timeout)}s",
        timeout=timeout + 10,
    )
    wait_for(f"CatalogSource {name} READY", lambda: source_ready(kubectl, name), timeout)


def down(name: str, kubectl: Kubectl | None = None) -> None:
    kubectl = kubectl or Kubectl()
    for kind in ("catalogsources.operators.coreos.com", "service", "deployment"):
        kubectl.run(
            "delete",
            kind,
            name,
            "-n",
            CATALOG_NAMESPACE,
            "--ignore-not-found",
            "--wait=true",
            timeout=120,
        )


def up(name: str = PACKAGE, upgrade_to: str | None = None) -> Path:
    """Build the catalog under the cluster's state dir, "build" the operator image its bundle
    names (as `make deploy` does on the local cluster), serve it."""
    directory = build(catalog_dir(name), upgrade_to=upgrade_to)
    localcluster.LocalCluster().build_operator_image()
    serve(name, directory)
    log(f"CatalogSource {CATALOG_NAMESPACE}/{name} serves {directory}")
    return directory


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("up", "build", "down"):
        p = sub.add_parser(command)
        p.add_argument("--name", default=PACKAGE, help="CatalogSource (and catalog dir) name")
        if command != "down":
            p.add_argument("--upgrade-to", help="add a second bundle of this version")
        if command == "build":
            p.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "build":
        print(build(args.out, upgrade_to=args.upgrade_to))
    elif args.command == "up":
        print(up(args.name, args.upgrade_to))
    else:
        down(args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
