"""kubectl-driven helpers for the tests that run against the local cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack" / "toolchain"))
import manifest as toolchain_manifest  # noqa: E402 - hack/toolchain/manifest.py

# Always the qualified resources: other etcd operators name their kind EtcdCluster too, and with
# one of their CRDs installed a bare "etcdcluster" may resolve to theirs.
CLUSTERS = "etcdclusters.etcd.quorumkeeper.dev"
PEERS = "etcdpeers.etcd.quorumkeeper.dev"
BACKUPS = "etcdbackups.etcd.quorumkeeper.dev"
CACHE = Path(os.environ.get("QK_CACHE", Path.home() / ".cache" / "quorumkeeper"))
STATE = Path(os.environ.get("QK_STATE", "/var/lib/quorumkeeper"))


class WaitTimeout(AssertionError):
    pass


def toolchain_component(key: str):
    """The toolchain.json entry of ``key``, waited for while `make test` builds the tests' part
    of the toolchain in the background (MinIO, Prometheus, cert-manager, OLM, ...)."""
    return toolchain_manifest.component(key)


def wait_until(description: str, predicate, timeout: float = 60.0, interval: float = 0.5):
    """Poll until predicate returns a truthy value; fail naming what did not happen."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = value
        except (subprocess.CalledProcessError, KeyError, IndexError, ValueError) as error:
            last = error
        if time.monotonic() > deadline:
            raise WaitTimeout(
                f"timed out after {timeout:.0f}s waiting for {description}; last: {last!r}"
            )
        time.sleep(interval)


class Kube:
    """kubectl against one kubeconfig, with JSON in and out."""

    def __init__(self, kubeconfig: Path):
        self.kubeconfig = kubeconfig
        manifest = json.loads((CACHE / "toolchain.json").read_text())
        self.binary = str(Path(manifest["kubernetes"]) / "kubectl")

    def run(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120):
        return subprocess.run(
            [self.binary, f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            text=True,
            capture_output=True,
            check=check,
            timeout=timeout,
        )

    def __call__(self, *args: str, **kwargs) -> str:
        try:
            return self.run(*args, **kwargs).stdout
        except subprocess.CalledProcessError as error:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {error.stderr}") from error

    def apply(self, *objects: dict, namespace: str | None = None) -> None:
        document = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
        extra = ["-n", namespace] if namespace else []
        self("apply", *extra, "-f", "-", stdin=document)

    def get(self, kind: str, name: str | None = None, namespace: str | None = None, **selectors):
        args = ["get", kind] + ([name] if name else [])
        if namespace:
            args += ["-n", namespace]
        if selectors.get("selector"):
            args += ["-l", selectors["selector"]]
        return json.loads(self(*args, "-o", "json"))

    def exists(self, kind: str, name: str, namespace: str | None = None) -> bool:
        args = ["get", kind, name] + (["-n", namespace] if namespace else [])
        return self.run(*args, check=False).returncode == 0

    def pod_ready(self, name: str, namespace: str) -> dict | None:
        pod = self.get("pod", name, namespace)
        conditions = pod.get("status", {}).get("conditions", [])
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return pod if ready else None

    def wait_pod_ready(self, name: str, namespace: str, timeout: float = 60) -> dict:
        return wait_until(
            f"pod {namespace}/{name} Ready", lambda: self.pod_ready(name, namespace), timeout
        )

    def wait_gone(self, kind: str, name: str, namespace: str | None = None, timeout: float = 60):
        wait_until(
            f"{kind} {name} deleted", lambda: not self.exists(kind, name, namespace), timeout
        )

    def exec(self, namespace: str, pod: str, *command: str, check: bool = True) -> str:
        return self("exec", "-n", namespace, pod, "--", *command, check=check)

    def events(self, namespace: str, involved: str) -> list[dict]:
        items = self.get("events", namespace=namespace)["items"]
        return [e for e in items if e["involvedObject"]["name"] == involved]


def running_operator_pod(kube, namespace: str = "quorumkeeper-system", timeout: float = 120) -> str:
    """The operator's one running pod: after a test that redeployed the operator, the old pod
    may still be terminating and the new one not yet started, and a fault aimed at either would
    miss the operator."""

    def single_running():
        pods = kube.get("pods", namespace=namespace, selector="control-plane=controller-manager")
        live = [
            p
            for p in pods["items"]
            if not p["metadata"].get("deletionTimestamp")
            and p.get("status", {}).get("phase") == "Running"
            and all(c.get("ready") for c in p["status"].get("containerStatuses") or [{}])
        ]
        return len(pods["items"]) == 1 and len(live) == 1 and live[0]["metadata"]["name"]

    return wait_until("the operator's one pod running and ready", single_running, timeout)
