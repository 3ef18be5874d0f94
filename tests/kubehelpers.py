"""kubectl-driven helpers for the tests that run against the local cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack" / "toolchain"))
import manifest as toolchain_manifest  # noqa: E402 - hack/toolchain/manifest.py

if str(ROOT / "collections") not in sys.path:
    sys.path.append(str(ROOT / "collections"))
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (  # noqa: E402
    API_VERSION,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (  # noqa: E402
    KubeClient,
    KubeError,
    api_prefix,
)

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


# The operator's own resources, most dependent first (an EtcdRestore creates its EtcdCluster,
# an EtcdBackupSchedule its EtcdBackups).
QUORUMKEEPER_RESOURCES = (
    "etcdrestores",
    "etcdbackupschedules",
    "etcdbackups",
    "etcdclusters",
    "etcdpeers",
)


class ApiReader:
    """What `kubectl get NAME -o json` returns, read from the API server over a kept connection
    (one a thread): the tests poll objects thousands of times a run, and a kubectl process
    costs about 50 ms of CPU each time (an eighth of a test run's CPU went to them; CI's machine
    has 2 cores). Resolves kubectl's resource names (plural, singular, short name, kind, each
    optionally .group or .version.group) from API discovery, as kubectl does; None for a name it
    cannot resolve to exactly one resource, which the caller then leaves to kubectl."""

    def __init__(self, kubeconfig: Path):
        self.kubeconfig = kubeconfig
        self.local = threading.local()
        self.lock = threading.Lock()
        self.table: list[dict] | None = None
        self.discovered = 0.0

    def client(self, fresh: bool = False) -> KubeClient:
        client = getattr(self.local, "client", None)
        if client is None or fresh:
            if client is not None:
                client.close()
            client = self.local.client = KubeClient.from_kubeconfig(str(self.kubeconfig))
        return client

    def request(self, path: str, query: dict | None = None, method: str = "GET", body=None):
        try:
            return self.client().request(method, path, body=body, query=query)
        except KubeError as error:
            if error.status not in (0, 401):
                raise
        # The cluster restarted (a new connection, or a new client certificate): once more.
        return self.client(fresh=True).request(method, path, body=body, query=query)

    def discover(self) -> list[dict]:
        resources = []

        def add(group: str, version: str, listing: dict, preferred: bool):
            for r in listing.get("resources") or []:
                if "/" in r["name"] or "get" not in (r.get("verbs") or []):
                    continue
                names = {r["name"], r.get("singularName") or "", r["kind"].lower()}
                names |= set(r.get("shortNames") or [])
                resources.append(
                    {
                        "group": group,
                        "version": version,
                        "preferred": preferred,
                        "plural": r["name"],
                        "kind": r["kind"],
                        "names": names - {""},
                        "namespaced": bool(r.get("namespaced")),
                    }
                )

        add("", "v1", self.request("/api/v1"), True)
        for group in self.request("/apis").get("groups") or []:
            preferred = group["preferredVersion"]["version"]
            for entry in group.get("versions") or []:
                version = entry["version"]
                try:
                    listing = self.request(f"/apis/{group['name']}/{version}")
                except KubeError:
                    continue  # an aggregated API that is down (OLM's packageserver starting)
                add(group["name"], version, listing, version == preferred)
        return resources

    def resolve(self, kind: str) -> dict | None:
        for attempt in (1, 2):
            with self.lock:
                # Again for a name not found (a CRD created since), at most every 2 s.
                stale = attempt == 2 and time.monotonic() - self.discovered > 2
                if self.table is None or stale:
                    self.table, self.discovered = self.discover(), time.monotonic()
                table = self.table
            name, _, qualifier = kind.lower().partition(".")
            found = [r for r in table if name in r["names"]]
            if qualifier:  # NAME.GROUP, or NAME.VERSION.GROUP
                version, _, group = qualifier.partition(".")
                exact = [r for r in found if (r["version"], r["group"]) == (version, group)]
                found = exact or [r for r in found if r["group"] == qualifier and r["preferred"]]
            else:
                found = [r for r in found if r["preferred"]]
                # kubectl prefers the core group (events: v1's, not events.k8s.io's).
                found = [r for r in found if r["group"] == ""] or found
            if len(found) == 1:
                return found[0]
            if len(found) > 1:
                return None
        return None

    def get(self, kind: str, name: str | None, namespace: str | None, selector: str | None):
        """The object or the List kubectl prints; None when kubectl should answer instead.
        Raises KubeError as the API server answers (404 for a missing object)."""
        if "," in kind or "/" in kind:
            return None
        resource = self.resolve(kind)
        if resource is None:
            return None
        group, version = resource["group"], resource["version"]
        path = api_prefix(f"{group}/{version}" if group else version)
        if resource["namespaced"]:
            path += "/namespaces/" + urllib.parse.quote(namespace or "default", safe="")
        path += "/" + resource["plural"]
        if name:
            return self.request(path + "/" + urllib.parse.quote(name, safe=""))
        listing = self.request(path, {"labelSelector": selector} if selector else None)
        api_version = listing.get("apiVersion") or version
        item_kind = resource["kind"]
        items = [{"apiVersion": api_version, "kind": item_kind, **i} for i in listing["items"]]
        return {
            "apiVersion": "v1",
            "items": items,
            "kind": "List",
            "metadata": {"resourceVersion": ""},
        }


class Kube:
    """kubectl against one kubeconfig, with JSON in and out (reads straight from the API
    server: ApiReader)."""

    def __init__(self, kubeconfig: Path):
        self.kubeconfig = kubeconfig
        manifest = json.loads((CACHE / "toolchain.json").read_text())
        self.binary = str(Path(manifest["kubernetes"]) / "kubectl")
        self.reader = ApiReader(kubeconfig)

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
        try:
            found = self.reader.get(kind, name, namespace, selectors.get("selector"))
        except KubeError as error:
            # As kubectl says it, for the tests that read its message.
            raise AssertionError(
                f"kubectl {' '.join(args)} failed: Error from server ({error.reason}): "
                f"{error.message}"
            ) from error
        if found is not None:
            return found
        return json.loads(self(*args, "-o", "json"))

    def exists(self, kind: str, name: str, namespace: str | None = None) -> bool:
        try:
            found = self.reader.get(kind, name, namespace, None)
        except KubeError:
            return False
        if found is not None:
            return True
        args = ["get", kind, name] + (["-n", namespace] if namespace else [])
        return self.run(*args, check=False).returncode == 0

    def delete_namespace(self, name: str) -> None:
        """Delete a test's namespace without waiting for it, the operator's custom resources in
        it first. The namespace controller deletes the pods first and everything else only once
        they are gone (20-30 s for a cluster's members): an EtcdCluster still there meanwhile
        watches its members die, 3-5 reconciles of a full observation each that nobody reads
        (a quarter of the operator's reconciles in tests/e2e/test_etcdcluster.py). Deleted
        first, it is gone before its members (background propagation), and so are the
        EtcdPeers' own reconciles."""
        background = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": "Background",
        }
        quoted = urllib.parse.quote(name, safe="")
        try:
            for plural in QUORUMKEEPER_RESOURCES:
                path = f"/apis/{API_VERSION}/namespaces/{quoted}/{plural}"
                try:
                    self.reader.request(path, method="DELETE", body=background)
                except KubeError as error:
                    if error.status != 404:  # 404: the CRDs are not installed
                        raise
            self.reader.request(f"/api/v1/namespaces/{quoted}", method="DELETE", body=background)
        except KubeError as error:
            if error.not_found:
                return
            # As it was done before: kubectl's own reading of the cluster, and no error raised.
            self.run("delete", "namespace", name, "--wait=false", check=False)

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
