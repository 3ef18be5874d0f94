"""The operator installed by OLM (hack/olm): OperatorGroup + Subscription, waits on the CSV, and
an uninstall that leaves the etcd data; shared by tests/e2e/test_olm.py and bench/run.py.

Two operators watching the same CRDs must never run at once, so `regular_operator_paused`
scales the `make deploy` operator (quorumkeeper-system, the e2e session's `operator` fixture) to
zero while OLM's runs, and restores it afterwards, whatever happened in between."""

from __future__ import annotations

import contextlib
import json
import sys

from kubehelpers import ROOT, STATE, wait_until

sys.path.insert(0, str(ROOT / "hack" / "olm"))
import olm_catalog  # noqa: E402  (hack/olm/olm_catalog.py)
import olm_install  # noqa: E402  (hack/olm/olm_install.py)

REGULAR_NAMESPACE = "quorumkeeper-system"
DEPLOYMENT = "quorumkeeper-controller-manager"
OPERATOR_SELECTOR = "control-plane=controller-manager"
CSVS = "clusterserviceversions.operators.coreos.com"
SUBSCRIPTIONS = "subscriptions.operators.coreos.com"
OPERATOR_GROUPS = "operatorgroups.operators.coreos.com"
INSTALL_PLANS = "installplans.operators.coreos.com"
OPERATORS = "operators.operators.coreos.com"
PACKAGE = olm_catalog.PACKAGE


def kubectl() -> olm_install.Kubectl:
    return olm_install.Kubectl(STATE / "kubeconfig")


def live_operator_pods(kube, namespace: str) -> list[str]:
    pods = kube.get("pods", namespace=namespace, selector=OPERATOR_SELECTOR)["items"]
    return [p["metadata"]["name"] for p in pods]


@contextlib.contextmanager
def regular_operator_paused(kube, timeout: float = 120):
    """No `make deploy` operator pod while the block runs; its replicas restored afterwards."""
    found = kube.run(
        "get", "deployment", DEPLOYMENT, "-n", REGULAR_NAMESPACE, "-o", "json", check=False
    )
    replicas = None
    if found.returncode == 0:
        replicas = kube.get("deployment", DEPLOYMENT, REGULAR_NAMESPACE)["spec"]["replicas"]
        kube("scale", "deployment", DEPLOYMENT, "-n", REGULAR_NAMESPACE, "--replicas=0")
        wait_until(
            "the make-deploy operator pod gone",
            lambda: not live_operator_pods(kube, REGULAR_NAMESPACE),
            timeout,
        )
    try:
        yield
    finally:
        if replicas:
            kube(
                "scale", "deployment", DEPLOYMENT, "-n", REGULAR_NAMESPACE, f"--replicas={replicas}"
            )
            kube(
                "rollout",
                "status",
                f"deployment/{DEPLOYMENT}",
                "-n",
                REGULAR_NAMESPACE,
                f"--timeout={int(timeout)}s",
                timeout=timeout + 10,
            )


def operator_group(namespace: str) -> dict:
    """An OperatorGroup without targetNamespaces: AllNamespaces mode, like `make deploy`
    (WATCH_NAMESPACE empty); the CSV supports it."""
    return {
        "apiVersion": "operators.coreos.com/v1",
        "kind": "OperatorGroup",
        "metadata": {"name": PACKAGE, "namespace": namespace},
        "spec": {},
    }


def subscription(namespace: str, source: str, starting_csv: str | None = None) -> dict:
    spec = {
        "channel": olm_catalog.CHANNEL,
        "name": PACKAGE,
        "source": source,
        "sourceNamespace": olm_catalog.CATALOG_NAMESPACE,
        "installPlanApproval": "Automatic",
    }
    if starting_csv:
        spec["startingCSV"] = starting_csv
    return {
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "Subscription",
        "metadata": {"name": PACKAGE, "namespace": namespace},
        "spec": spec,
    }


def create_namespace(kube, namespace: str) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_until(
        f"the default ServiceAccount of {namespace}",
        lambda: kube.exists("serviceaccount", "default", namespace),
        30,
    )


def csv_phase(kube, namespace: str, name: str) -> str:
    found = kube.run("get", CSVS, name, "-n", namespace, "-o", "json", check=False)
    if found.returncode != 0:
        return "(not created)"
    status = json.loads(found.stdout).get("status", {})
    return f"{status.get('phase', '')}: {status.get('reason', '')} {status.get('message', '')}"


def wait_csv_succeeded(kube, namespace: str, name: str, timeout: float = 240) -> dict:
    """The Subscription has installed `name` and its CSV is Succeeded; the CSV."""

    def succeeded():
        sub = kube.get(SUBSCRIPTIONS, PACKAGE, namespace)
        if sub.get("status", {}).get("installedCSV") != name:
            return False
        csv = kube.get(CSVS, name, namespace)
        return csv if csv.get("status", {}).get("phase") == "Succeeded" else False

    try:
        return wait_until(f"CSV {name} Succeeded", succeeded, timeout)
    except AssertionError as error:
        sub = kube.run("get", SUBSCRIPTIONS, PACKAGE, "-n", namespace, "-o", "yaml", check=False)
        raise AssertionError(
            f"{error}\nCSV: {csv_phase(kube, namespace, name)}\nSubscription:\n{sub.stdout}"
        ) from None


def uninstall(kube, namespace: str, timeout: float = 120) -> None:
    """What a user does to remove the operator and keep the data: delete the Subscription and
    the CSV (OLM then deletes the Deployment, ServiceAccount and RBAC it made). CRDs, custom
    resources, etcd pods and PVCs stay."""
    kube("delete", SUBSCRIPTIONS, PACKAGE, "-n", namespace, "--ignore-not-found")
    kube("delete", CSVS, "--all", "-n", namespace, "--ignore-not-found")
    wait_until(
        f"the operator's Deployment in {namespace} gone",
        lambda: not kube.exists("deployment", DEPLOYMENT, namespace),
        timeout,
    )
    wait_until(
        f"the operator's pods in {namespace} gone",
        lambda: not live_operator_pods(kube, namespace),
        timeout,
    )


def remove(kube, namespace: str, source: str | None = None, timeout: float = 180) -> None:
    """Everything an OLM install in `namespace` left: operator, namespace, catalog, and the
    Operator object OLM keeps for the package (cleanup after a test, also after a failure)."""
    if kube.exists("namespace", namespace):
        uninstall(kube, namespace, timeout)
        kube.run("delete", "namespace", namespace, "--wait=true", check=False, timeout=timeout)
    if source:
        olm_catalog.down(source, kubectl())
    # OLM labels what it installed for the Operator object, which it re-creates while a labelled
    # component is left: the CRDs stay (they hold the data), so their label goes.
    label = f"operators.coreos.com/{PACKAGE}.{namespace}"
    kube.run("label", "crd", "-l", label, f"{label}-", check=False)
    kube.run("delete", OPERATORS, f"{PACKAGE}.{namespace}", "--ignore-not-found", check=False)
