"""Rolling upgrades and the PodDisruptionBudget end to end: the deployed operator upgrades real
etcd binaries (3.4.23 -> 3.5.35 -> 3.6.16, and 3.6.15 <-> 3.6.16) while a client writes through
the client Service, and every write it had acknowledged is read back."""

from __future__ import annotations

import json
import sys
import time

import pytest
from kubehelpers import CACHE, CLUSTERS, ROOT, running_operator_pod, wait_until
from upgradehelpers import AckedWriter, peer_versions, wait_upgraded

sys.path.insert(0, str(ROOT / "hack" / "cluster"))
import faults  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1200)]
OPERATOR_NAMESPACE = "quorumkeeper-system"
MISSING_VERSION = "3.6.99"  # not in the node agents' image map: its image cannot be pulled
VERSIONS = ("3.4.23", "3.5.35", "3.6.15", "3.6.16")


@pytest.fixture(scope="module", autouse=True)
def etcd_images():
    """The node agents map an image to each etcd of the toolchain (3.6.15 is there for the patch
    upgrades: hack/toolchain/etcd-v3.6-previous)."""
    built = json.loads((CACHE / "toolchain.json").read_text())["etcd"]
    missing = [v for v in VERSIONS if v not in built]
    if missing:
        pytest.fail(
            f"etcd {', '.join(missing)} missing from the toolchain: run "
            "python3 hack/toolchain/install.py --only etcd (the operator's deployment maps "
            "every etcd of the toolchain to an image)"
        )


def pvc_uids(cluster) -> dict[str, str]:
    items = cluster.kube.get("pvc", namespace=cluster.namespace)["items"]
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in items}


def pod_names(cluster) -> dict[str, str]:
    return {p: cluster.pod_of(p)["metadata"]["name"] for p in peer_versions(cluster)}


def events(cluster, reason: str) -> list[dict]:
    found = [
        e for e in cluster.kube.events(cluster.namespace, cluster.name) if e["reason"] == reason
    ]
    return sorted(found, key=lambda e: e.get("firstTimestamp") or e.get("eventTime") or "")


def create(cluster, version: str, replicas: int = 3) -> None:
    cluster.version = version
    cluster.create(replicas)
    cluster.wait_available(replicas, timeout=240)
    wait_until(
        "the cluster version",
        lambda: cluster.get()["status"].get("clusterVersion", "").startswith(version[:3]),
        60,
    )


def test_rolling_upgrade_3_4_to_3_5_to_3_6_loses_no_acknowledged_write(etcd_cluster):
    create(etcd_cluster, "3.4.23")
    ids, claims, pods = etcd_cluster.member_ids(), pvc_uids(etcd_cluster), pod_names(etcd_cluster)
    endpoint = etcd_cluster.client_endpoint()
    with AckedWriter(endpoint, "/upgrade/") as writer:
        wait_until("the first writes", lambda: len(writer.acknowledged) >= 20, 30)
        for version in ("3.5.35", "3.6.16"):
            etcd_cluster.patch_spec(version=version)
            seen = wait_upgraded(etcd_cluster, version, 3)
            assert any(f"of 3 members on {version}" in m for m in seen["progress"]), seen
            assert seen["status"]["clusterVersion"] == version[:3] + ".0"
            upgrading = [
                e for e in events(etcd_cluster, "Upgrading") if f"to {version}" in e["message"]
            ]
            assert len(upgrading) >= 3, "an Event as each member starts"
            # The leader goes last, after handing leadership to an upgraded member.
            assert "leadership moves to" in upgrading[-1]["message"], upgrading[-1]
    summary = writer.summary()
    assert writer.lost(endpoint) == [], f"acknowledged writes lost: {summary}"
    assert summary["acknowledged_percent"] >= 99.0, summary
    assert etcd_cluster.member_ids() == ids, "members keep their IDs"
    assert pvc_uids(etcd_cluster) == claims, "and their volumes"
    assert all(pods[p] != new for p, new in pod_names(etcd_cluster).items()), "new pods"
    upgraded = events(etcd_cluster, "MemberUpgraded")
    assert len(upgraded) == 6, [e["message"] for e in upgraded]
    assert not events(etcd_cluster, "MemberPodReplaced"), "an upgrade is not a surprise"
    assert {p["status"]["serverVersion"] for p in etcd_cluster.peers()} == {"3.6.16"}


def test_patch_upgrade_and_downgrade(etcd_cluster):
    create(etcd_cluster, "3.6.15")
    etcd_cluster.put("patched", "kept")
    endpoint = etcd_cluster.client_endpoint()
    with AckedWriter(endpoint, "/patch/") as writer:
        for version in ("3.6.16", "3.6.15"):
            etcd_cluster.patch_spec(version=version)
            wait_upgraded(etcd_cluster, version, 3)
    assert writer.lost(endpoint) == [], writer.summary()
    assert etcd_cluster.value("patched") == "kept"
    downgraded = events(etcd_cluster, "MemberDowngraded")
    assert len(downgraded) == 3 and "(was 3.6.16)" in downgraded[0]["message"]


def test_a_version_that_cannot_be_pulled_stops_after_the_first_member(etcd_cluster):
    create(etcd_cluster, "3.6.16")
    ids = etcd_cluster.member_ids()
    endpoint = etcd_cluster.client_endpoint()
    with AckedWriter(endpoint, "/bad/") as writer:
        etcd_cluster.patch_spec(version=MISSING_VERSION)
        degraded = wait_until(
            "the upgrade to stop with UpgradeFailed",
            lambda: (
                (c := etcd_cluster.condition("Degraded")).get("reason") == "UpgradeFailed" and c
            ),
            180,
        )
        (stuck,) = [p for p, v in peer_versions(etcd_cluster).items() if v == MISSING_VERSION]
        assert f"stopped at member {stuck}" in degraded["message"]
        assert "cannot pull image quay.io/coreos/etcd:v3.6.99" in degraded["message"]
        assert "set spec.version to 3.6.16" in degraded["message"], "how to roll back"
        # The other members are left alone and keep serving, through the next reconciles.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            versions = peer_versions(etcd_cluster)
            assert sorted(versions.values()).count(MISSING_VERSION) == 1, versions
            time.sleep(1)
        healthy = [m for m in etcd_cluster.get()["status"]["members"] if m["healthy"]]
        assert {m["name"] for m in healthy} == set(ids) - {stuck}
        assert all(m["version"] == "3.6.16" for m in healthy)
        etcd_cluster.put("still", "serving")

        # Rolling back: the member is moved back at once.
        etcd_cluster.patch_spec(version="3.6.16")
        wait_upgraded(etcd_cluster, "3.6.16", 3)
    assert writer.lost(endpoint) == [], writer.summary()
    assert etcd_cluster.member_ids() == ids
    assert etcd_cluster.condition("Degraded")["status"] == "False"


def test_a_version_change_while_paused_waits(etcd_cluster):
    create(etcd_cluster, "3.6.15", replicas=1)
    etcd_cluster.put("paused", "kept")
    pod = etcd_cluster.pod_of("e2e-0")["metadata"]["name"]
    etcd_cluster.patch_spec(paused=True, version="3.6.16")

    def paused_at_new_generation():
        obj = etcd_cluster.get()
        status = obj.get("status", {})
        return (
            status.get("phase") == "Paused"
            and status.get("observedGeneration") == obj["metadata"]["generation"]
        )

    wait_until("the operator to report the pause for the new spec", paused_at_new_generation, 60)
    assert peer_versions(etcd_cluster) == {"e2e-0": "3.6.15"}
    assert etcd_cluster.pod_of("e2e-0")["metadata"]["name"] == pod, "a paused cluster waits"
    etcd_cluster.patch_spec(paused=False)
    wait_upgraded(etcd_cluster, "3.6.16", 1)
    assert etcd_cluster.value("paused") == "kept"


def test_a_version_change_during_a_scale_finishes_the_scale_first(etcd_cluster):
    create(etcd_cluster, "3.6.15")
    patch = json.dumps({"spec": {"replicas": 5, "version": "3.6.16"}})
    kube, namespace = etcd_cluster.kube, etcd_cluster.namespace
    kube("patch", CLUSTERS, etcd_cluster.name, "-n", namespace, "--type=merge", "-p", patch)

    def once_one_moved():
        versions = peer_versions(etcd_cluster)
        return versions if "3.6.16" in versions.values() else None

    first_upgraded = wait_until(
        "the first member moved to 3.6.16",
        once_one_moved,
        300,
        interval=0.2,
    )
    assert len(first_upgraded) == 5, f"the scale finishes first: {first_upgraded}"
    # The new members joined on the version the others ran.
    assert sorted(first_upgraded.values()) == ["3.6.15"] * 4 + ["3.6.16"], first_upgraded
    wait_upgraded(etcd_cluster, "3.6.16", 5)
    scaled = events(etcd_cluster, "MemberPromoted")
    upgrading = events(etcd_cluster, "Upgrading")
    assert scaled and upgrading
    last_promoted = max(e.get("lastTimestamp") or e.get("eventTime") for e in scaled)
    first_upgrade = min(e.get("firstTimestamp") or e.get("eventTime") for e in upgrading)
    assert last_promoted <= first_upgrade


# Kills the operator every other test relies on.
@pytest.mark.exclusive
def test_an_operator_killed_mid_upgrade_carries_on(etcd_cluster):
    create(etcd_cluster, "3.6.15")
    etcd_cluster.patch_spec(version="3.6.16")
    wait_until(
        "a member moved to 3.6.16",
        lambda: "3.6.16" in peer_versions(etcd_cluster).values(),
        120,
        interval=0.2,
    )
    # Its one running pod: the OLM test's redeploy may have left the old one terminating.
    operator_pod = running_operator_pod(etcd_cluster.kube, OPERATOR_NAMESPACE)
    faults.crash_pod(OPERATOR_NAMESPACE, operator_pod)
    wait_upgraded(etcd_cluster, "3.6.16", 3, timeout=400)


def pdb(cluster) -> dict | None:
    result = cluster.kube.run(
        "get", "pdb", cluster.name, "-n", cluster.namespace, "-o", "json", check=False
    )
    return json.loads(result.stdout) if result.returncode == 0 else None


def evict(cluster, pod: str):
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": cluster.namespace},
    }
    path = f"/api/v1/namespaces/{cluster.namespace}/pods/{pod}/eviction"
    return cluster.kube.run("create", "--raw", path, "-f", "-", stdin=json.dumps(body), check=False)


def wait_budget(cluster, max_unavailable: int, allowed: int | None = None) -> dict:
    def right():
        budget = pdb(cluster)
        return (
            budget
            and budget["spec"]["maxUnavailable"] == max_unavailable
            and (allowed is None or budget.get("status", {}).get("disruptionsAllowed") == allowed)
            and budget
        )

    return wait_until(f"a budget of maxUnavailable {max_unavailable}", right, 120)


def test_the_disruption_budget_follows_scaling_and_stops_a_second_eviction(etcd_cluster):
    create(etcd_cluster, "3.6.16", replicas=1)
    budget = wait_budget(etcd_cluster, 1)
    assert budget["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "etcd",
        "etcd.quorumkeeper.dev/cluster": "e2e",
    }
    assert budget["metadata"]["ownerReferences"][0]["kind"] == "EtcdCluster"
    for replicas, expected in ((3, 1), (5, 2), (3, 1)):
        etcd_cluster.scale(replicas)
        etcd_cluster.wait_available(replicas, timeout=300)
        wait_budget(etcd_cluster, expected, allowed=expected)

    first, second = etcd_cluster.pod_of("e2e-0"), etcd_cluster.pod_of("e2e-1")
    result = evict(etcd_cluster, first["metadata"]["name"])
    assert result.returncode == 0, result.stderr
    result = evict(etcd_cluster, second["metadata"]["name"])
    assert result.returncode != 0 and "disruption budget" in result.stderr, result.stderr
    etcd_cluster.wait_available(3, timeout=240)
    wait_budget(etcd_cluster, 1, allowed=1)
    assert etcd_cluster.pod_of("e2e-1")["metadata"]["name"] == second["metadata"]["name"]
