"""The operator installed, upgraded and removed by OLM v0 only (issue 9): OLM from the toolchain
(`make olm-install`), a file-based catalog rendered from bundle/ served by `opm serve`
(`make catalog`), an OperatorGroup and a Subscription with automatic approval. No bundle image
and no unpack Job: the catalog carries the manifests. The `make deploy` operator is paused
meanwhile (two operators must never watch the same CRDs at once) and restored afterwards."""

from __future__ import annotations

import pytest
from kubehelpers import CLUSTERS, STATE, wait_until
from olmhelpers import (
    CSVS,
    DEPLOYMENT,
    INSTALL_PLANS,
    SUBSCRIPTIONS,
    create_namespace,
    kubectl,
    live_operator_pods,
    olm_catalog,
    olm_install,
    operator_group,
    regular_operator_paused,
    remove,
    subscription,
    uninstall,
    wait_csv_succeeded,
)

# Stops the regular operator while OLM's runs: alone.
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.exclusive,
    pytest.mark.timeout(900),
    pytest.mark.toolchain("olm", "opm"),
]
OPERATOR_NAMESPACE = "qk-olm-e2e"
SOURCE = "quorumkeeper-e2e"  # its own CatalogSource: `make catalog`'s is left alone
CATALOG_DIR = STATE / "catalogs" / SOURCE


def bundle_versions() -> tuple[str, str]:
    """The bundle's version and the next patch, the second bundle of the upgrade."""
    version = olm_catalog.csv_of(olm_catalog.BUNDLE)["spec"]["version"]
    major, minor, patch = version.split(".")
    return version, f"{major}.{minor}.{int(patch) + 1}"


def csv_name(version: str) -> str:
    return f"{olm_catalog.PACKAGE}.v{version}"


@pytest.fixture(scope="module")
def olm(local_cluster):
    olm_install.install(kubectl())
    return local_cluster


@pytest.fixture(scope="module")
def olm_namespace(olm):
    """The operator's namespace, catalog and pause of the regular operator; everything OLM
    installed is gone again before the regular operator comes back, also after a failure."""
    with regular_operator_paused(olm):
        remove(olm, OPERATOR_NAMESPACE, SOURCE)  # left by an interrupted run
        try:
            create_namespace(olm, OPERATOR_NAMESPACE)
            yield OPERATOR_NAMESPACE
        finally:
            remove(olm, OPERATOR_NAMESPACE, SOURCE)
            assert not live_operator_pods(olm, OPERATOR_NAMESPACE)


def serve_catalog(upgrade_to: str | None = None) -> None:
    olm_catalog.build(CATALOG_DIR, upgrade_to=upgrade_to)
    olm_catalog.serve(SOURCE, CATALOG_DIR, kubectl())


def etcd_state(cluster) -> dict:
    pods = {
        p["metadata"]["name"]: (
            p["metadata"]["uid"],
            sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])),
        )
        for p in cluster.pods()
        if not p["metadata"].get("deletionTimestamp")
    }
    claims = {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in cluster.kube.get("pvc", namespace=cluster.namespace)["items"]
    }
    return {"members": cluster.member_ids(), "pods": pods, "claims": claims}


def install_plan(kube, namespace: str, csv: str, phase: str) -> dict:
    """The InstallPlan for `csv` in `phase`; otherwise ValueError naming the phases seen (the
    last error wait_until reports)."""
    plans = kube.get(INSTALL_PLANS, namespace=namespace)["items"]
    found = [p for p in plans if csv in p["spec"]["clusterServiceVersionNames"]]
    for plan in found:
        if plan.get("status", {}).get("phase") == phase:
            return plan
    raise ValueError(f"InstallPlans of {csv}: {[p.get('status', {}) for p in found]}")


def operator_pods(kube) -> list[dict]:
    return kube.get(
        "pods", namespace=OPERATOR_NAMESPACE, selector="control-plane=controller-manager"
    )["items"]


def test_install_upgrade_uninstall_through_olm(olm, olm_namespace, etcd_cluster_without_operator):
    kube, cluster = olm, etcd_cluster_without_operator
    first, second = bundle_versions()
    localcluster = olm_install.localcluster.LocalCluster()
    localcluster.build_operator_image()  # the image the CSV names, as `make catalog` does
    serve_catalog()
    kube.apply(operator_group(olm_namespace), subscription(olm_namespace, SOURCE, csv_name(first)))

    csv = wait_csv_succeeded(kube, olm_namespace, csv_name(first))
    assert csv["spec"]["version"] == first
    # Installed from the catalog's embedded manifests: the InstallPlan needed no bundle lookup
    # (no bundle image to unpack), so OLM never created an unpack Job.
    plan = wait_until(
        "the InstallPlan of the first CSV Complete",
        lambda: install_plan(kube, olm_namespace, csv_name(first), "Complete"),
        60,
    )
    assert not plan["status"].get("bundleLookups"), plan["status"]["bundleLookups"]
    assert not kube.get("jobs", namespace=olm_catalog.CATALOG_NAMESPACE)["items"]
    deployment = kube.get("deployment", DEPLOYMENT, olm_namespace)
    owners = deployment["metadata"].get("labels", {})
    assert owners.get("olm.owner") == csv_name(first), owners

    cluster.create(3)
    cluster.wait_available(3, timeout=240)
    cluster.put("/olm/before-upgrade", "kept")
    before = etcd_state(cluster)
    first_operator = {p["metadata"]["uid"] for p in operator_pods(kube)}

    # Upgrade: the catalog gains the next version, which replaces the first in the channel.
    serve_catalog(upgrade_to=second)
    wait_csv_succeeded(kube, olm_namespace, csv_name(second))
    wait_until(
        f"the replaced CSV {csv_name(first)} deleted",
        lambda: not kube.exists(CSVS, csv_name(first), olm_namespace),
        120,
    )
    sub = kube.get(SUBSCRIPTIONS, olm_catalog.PACKAGE, olm_namespace)
    assert sub["status"]["currentCSV"] == csv_name(second)
    wait_until(
        "the upgraded operator's pod, alone and ready",
        lambda: (
            (pods := operator_pods(kube))
            and len(pods) == 1
            and pods[0]["metadata"]["uid"] not in first_operator
            and kube.pod_ready(pods[0]["metadata"]["name"], olm_namespace)
        ),
        180,
    )
    # The upgraded operator reconciles the cluster (a spec change that touches no member:
    # observedGeneration follows) and leaves members, pods and volumes as they were.
    cluster.patch_spec(disasterRecovery={"enabled": False, "delaySeconds": 61})
    cluster.wait_available(3, timeout=180)
    assert etcd_state(cluster) == before
    assert cluster.value("/olm/before-upgrade") == "kept"

    # Uninstall keeping the data: Subscription and CSV go, the operator with them.
    uninstall(kube, olm_namespace)
    assert kube.exists(CLUSTERS, cluster.name, cluster.namespace)
    assert kube.exists("crd", CLUSTERS)
    after = etcd_state(cluster)
    assert after["claims"] == before["claims"]
    assert after["pods"] == before["pods"]
    assert cluster.value("/olm/before-upgrade") == "kept"
