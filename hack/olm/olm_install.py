#!/usr/bin/env python3
"""OLM v0 on the local cluster: `make olm-install`.

    hack/olm/olm_install.py [--timeout SECONDS]    install (idempotent; seconds when already there)
    hack/olm/olm_install.py --uninstall            remove what the install created (CRDs stay)

What upstream's quickstart installs (deploy/upstream/quickstart/olm.yaml of the pinned OLM, with
the 8 operators.coreos.com CRDs of its operator-framework/api), taken from the toolchain
(hack/toolchain/install.py: olm) so the manifests match the binaries. Left out: the packageserver
CSV (the PackageManifest API server: `kubectl get packagemanifests` is not needed to subscribe)
and the public operatorhubio CatalogSource (no pulls from the internet; `make catalog` serves
ours). The image references are the toolchain's version instead of upstream's digest: the node
agents map `quay.io/operator-framework/olm:<version>` to the binaries we built (localcluster.py,
olm_images). olm and catalog both listen on :8080, which is fine: every pod has its own network
namespace here (none of these pods uses the host network).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hack" / "cluster"))

import localcluster  # noqa: E402

NAMESPACE = "olm"
DEPLOYMENTS = ("olm-operator", "catalog-operator")
DIGEST_ANNOTATION = "quorumkeeper.dev/olm-manifest-digest"
# Left out of the quickstart, see the module docstring.
SKIPPED_KINDS = {"ClusterServiceVersion", "CatalogSource"}


def log(message: str) -> None:
    print(f"[olm] {message}", file=sys.stderr, flush=True)


class Kubectl:
    """kubectl of the toolchain against one kubeconfig."""

    def __init__(self, kubeconfig: Path | None = None):
        tools = localcluster.toolchain()
        self.binary = str(Path(tools["kubernetes"]) / "kubectl")
        self.kubeconfig = Path(
            kubeconfig or os.environ.get("KUBECONFIG") or localcluster.Layout().kubeconfig
        )

    def run(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120):
        result = subprocess.run(
            [self.binary, f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            text=True,
            capture_output=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise SystemExit(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def json(self, *args: str) -> dict:
        return json.loads(self.run(*args, "-o", "json").stdout)

    def apply(self, objects: list[dict]) -> None:
        document = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        self.run(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=quorumkeeper-olm",
            "-f",
            "-",
            stdin=document,
        )


def wait_for(description: str, predicate, timeout: float, interval: float = 0.5):
    """Poll predicate until truthy; fail naming what did not happen and the last state seen."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = predicate()
            if last:
                return last
        except (SystemExit, subprocess.SubprocessError, KeyError, ValueError) as error:
            last = error
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {description}: {last!r}")
        time.sleep(interval)


def olm_tools() -> dict:
    """The toolchain, with OLM and opm in it (waited for while `make test` builds them)."""
    for key in ("olm", "opm"):
        localcluster.toolchain_component(key)
    return localcluster.toolchain()


def crds(tools: dict) -> list[dict]:
    files = sorted(Path(tools["olm"]["crds"]).glob("*.yaml"))
    documents = [yaml.safe_load(f.read_text()) for f in files]
    return [d for d in documents if d and d.get("kind") == "CustomResourceDefinition"]


def image(tools: dict) -> str:
    return f"{localcluster.OLM_REPOSITORY}:{tools['olm']['version']}"


def manifests(tools: dict) -> list[dict]:
    """The quickstart's olm.yaml without the packageserver CSV and the public catalog, every
    image (also the catalog operator's -util-image) replaced by the toolchain's."""
    documents = yaml.safe_load_all(Path(tools["olm"]["quickstart"]).read_text())
    kept = [d for d in documents if d and d["kind"] not in SKIPPED_KINDS]
    olm_image = image(tools)
    for document in kept:
        if document["kind"] != "Deployment":
            continue
        for container in document["spec"]["template"]["spec"]["containers"]:
            container["image"] = olm_image
            # The quickstart's catalog operator args are Go-flag style (-namespace); the
            # binary parses them with pflag (cobra), which takes -namespace for -n -a -m ... and
            # exits. The release manifests (deploy/chart) use --namespace: so do we.
            args = [
                "-" + arg if arg.startswith("-") and not arg.startswith("--") else arg
                for arg in (a.strip() for a in container.get("args", []))
            ]
            for index, arg in enumerate(args):
                if arg == "--util-image" and index + 1 < len(args):
                    args[index + 1] = olm_image
            container["args"] = args
    return kept


def digest(objects: list[dict]) -> str:
    return hashlib.sha256(json.dumps(objects, sort_keys=True).encode()).hexdigest()[:16]


def deployment_available(deployment: dict) -> bool:
    status = deployment.get("status", {})
    return (
        status.get("observedGeneration") == deployment["metadata"]["generation"]
        and status.get("updatedReplicas", 0) == deployment["spec"]["replicas"]
        and status.get("availableReplicas", 0) == deployment["spec"]["replicas"]
        and status.get("replicas", 0) == deployment["spec"]["replicas"]
    )


def installed(kubectl: Kubectl, crd_names: list[str], want: str) -> bool:
    """One GET: the recorded manifest digest, both deployments available, every CRD there."""
    names = [f"namespace/{NAMESPACE}"] + [f"deployment/{d}" for d in DEPLOYMENTS]
    names += [f"crd/{name}" for name in crd_names]
    result = kubectl.run("get", "-n", NAMESPACE, *names, "-o", "json", check=False)
    if result.returncode != 0:
        return False
    items = json.loads(result.stdout)["items"]
    namespace = next(i for i in items if i["kind"] == "Namespace")
    recorded = namespace["metadata"].get("annotations", {}).get(DIGEST_ANNOTATION)
    deployments = [i for i in items if i["kind"] == "Deployment"]
    return recorded == want and all(deployment_available(d) for d in deployments)


def olm_ready(kubectl: Kubectl) -> bool:
    """Both operators available, and the olm operator at work: it has resolved the quickstart's
    global OperatorGroup (status.namespaces is written by the olm operator only)."""
    for name in DEPLOYMENTS:
        if not deployment_available(kubectl.json("get", "deployment", name, "-n", NAMESPACE)):
            return False
    group = kubectl.json(
        "get", "operatorgroups.operators.coreos.com", "global-operators", "-n", "operators"
    )
    return "namespaces" in group.get("status", {})


def install(kubectl: Kubectl | None = None, timeout: float = 180) -> float:
    """Install OLM (or confirm it is there); the seconds it took."""
    started = time.monotonic()
    kubectl = kubectl or Kubectl()
    tools = olm_tools()
    definitions = crds(tools)
    objects = manifests(tools)
    want = digest(definitions + objects)
    crd_names = [d["metadata"]["name"] for d in definitions]
    if installed(kubectl, crd_names, want):
        log(f"OLM {tools['olm']['version']} already installed ({time.monotonic() - started:.1f}s)")
        return time.monotonic() - started
    # The node agents must know the OLM image before its pods are scheduled; the map is
    # rewritten only when its content changes.
    localcluster.LocalCluster().write_image_map(tools)
    kubectl.apply(definitions)
    kubectl.run(
        "wait",
        "--for=condition=Established",
        f"--timeout={int(timeout)}s",
        *[f"crd/{name}" for name in crd_names],
        timeout=timeout + 10,
    )
    kubectl.apply(objects)
    wait_for("the olm and catalog operators", lambda: olm_ready(kubectl), timeout)
    kubectl.run("annotate", "--overwrite", f"namespace/{NAMESPACE}", f"{DIGEST_ANNOTATION}={want}")
    elapsed = time.monotonic() - started
    log(f"OLM {tools['olm']['version']} installed and ready in {elapsed:.1f}s")
    return elapsed


def uninstall(kubectl: Kubectl | None = None) -> None:
    """Remove the namespaces, deployments and RBAC of the install. The CRDs stay: deleting them
    would delete every Subscription, CSV and CatalogSource with them."""
    kubectl = kubectl or Kubectl()
    for document in reversed(manifests(olm_tools())):
        kind, name = document["kind"], document["metadata"]["name"]
        namespace = document["metadata"].get("namespace")
        extra = ["-n", namespace] if namespace else []
        kubectl.run("delete", kind, name, *extra, "--ignore-not-found", "--wait=true", timeout=300)
    log("OLM removed (its CRDs stay)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=180)
    parser.add_argument("--uninstall", action="store_true")
    args = parser.parse_args()
    if args.uninstall:
        uninstall()
    else:
        install(timeout=args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
