"""EtcdCluster end to end: the deployed operator creates, scales, heals and deletes real etcd."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime

import pytest
from kubehelpers import CLUSTERS, ROOT, running_operator_pod, wait_until

sys.path.insert(0, str(ROOT / "hack" / "cluster"))
import faults  # noqa: E402

# Whole-cluster scenarios take minutes; each still waits on conditions with its own timeouts.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
OPERATOR_NAMESPACE = "quorumkeeper-system"


def test_create_three_members_and_use_the_client_service(etcd_cluster):
    etcd_cluster.create(3)
    status = etcd_cluster.wait_available(3)
    assert {m["name"] for m in status["members"]} == {"e2e-0", "e2e-1", "e2e-2"}
    pods = {p["metadata"]["labels"]["etcd.quorumkeeper.dev/peer"]: p for p in etcd_cluster.pods()}
    for member in status["members"]:
        assert member["pod"] == pods[member["name"]]["metadata"]["name"]
        assert member["podReady"] is True and member["restarts"] == 0
    # The peers tell the truth too, as soon as the cluster says it is Available.
    assert {p["metadata"]["name"]: p["status"]["ready"] for p in etcd_cluster.peers()} == {
        "e2e-0": True,
        "e2e-1": True,
        "e2e-2": True,
    }
    assert "Bootstrapping" in etcd_cluster.event_reasons(), "creating a cluster is an Event too"
    assert status["leader"] in {"e2e-0", "e2e-1", "e2e-2"}
    assert status["readyReplicas"] == 3 and status["replicas"] == 3
    # etcd decides the cluster version a moment after its members are up.
    version = wait_until(
        "the cluster version in the status",
        lambda: etcd_cluster.get()["status"].get("clusterVersion"),
        timeout=20,
    )
    assert version.startswith("3.6")
    etcd_cluster.put("greeting", "hello")
    assert etcd_cluster.value("greeting") == "hello"
    assert etcd_cluster.pvc_names() == {"e2e-0", "e2e-1", "e2e-2"}
    for pvc in etcd_cluster.kube.get("pvc", namespace=etcd_cluster.namespace)["items"]:
        assert not pvc["metadata"].get("ownerReferences"), "PVCs must not be garbage collected"
    peer = etcd_cluster.kube.get("etcdpeer", "e2e-0", etcd_cluster.namespace)
    assert peer["status"]["serverVersion"] == "3.6.16"
    pod = etcd_cluster.pod_of("e2e-0")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
    assert env.get("GOMAXPROCS") == "1", "GOMAXPROCS follows the 1500m CPU limit, rounded down"
    assert "livenessProbe" not in pod["spec"]["containers"][0]


def test_scale_up_and_down_one_member_at_a_time_keeping_data(etcd_cluster):
    etcd_cluster.create(3)
    etcd_cluster.wait_available(3)
    etcd_cluster.put("scaled", "kept")
    for replicas in (5, 3, 1, 3):
        etcd_cluster.scale(replicas)
        status = etcd_cluster.wait_available(replicas, timeout=240)
        assert {m["name"] for m in status["members"]} == {f"e2e-{i}" for i in range(replicas)}
        assert etcd_cluster.value("scaled") == "kept"
        wait_until(
            f"PVCs of removed members deleted at {replicas} replicas",
            lambda r=replicas: etcd_cluster.pvc_names() == {f"e2e-{i}" for i in range(r)},
            timeout=60,
        )
    reasons = etcd_cluster.event_reasons()
    assert {"ScalingUp", "MemberPromoted", "ScalingDown", "MemberDataDeleted"} <= reasons


def test_killed_member_process_recovers(etcd_cluster):
    etcd_cluster.create(3)
    etcd_cluster.wait_available(3)
    etcd_cluster.put("durable", "1")
    ids_before = etcd_cluster.member_ids()
    pod = etcd_cluster.pod_of("e2e-1")
    faults.crash_pod(etcd_cluster.namespace, pod["metadata"]["name"])
    wait_until(
        "the killed member's container to restart",
        lambda: etcd_cluster.pod_of("e2e-1")["status"]["containerStatuses"][0]["restartCount"] >= 1,
        timeout=60,
    )
    etcd_cluster.wait_available(3)
    assert etcd_cluster.member_ids() == ids_before, "a restarted member keeps its identity"
    assert etcd_cluster.value("durable") == "1"


def test_member_whose_pod_and_pvc_are_deleted_is_replaced(etcd_cluster):
    etcd_cluster.create(3)
    etcd_cluster.wait_available(3)
    etcd_cluster.put("survives", "replacement")
    old_id = etcd_cluster.member_ids()["e2e-2"]
    kube, namespace = etcd_cluster.kube, etcd_cluster.namespace
    kube("delete", "pvc", "e2e-2", "-n", namespace, "--wait=false")
    kube("delete", "pod", etcd_cluster.pod_of("e2e-2")["metadata"]["name"], "-n", namespace)
    wait_until(
        "e2e-2 replaced by a new member",
        lambda: etcd_cluster.member_ids().get("e2e-2") not in (None, old_id),
        timeout=240,
    )
    etcd_cluster.wait_available(3, timeout=240)
    assert etcd_cluster.value("survives") == "replacement"
    assert "ReplacingMember" in etcd_cluster.event_reasons()


def test_delete_keeps_pvcs_and_recreating_brings_the_data_back(etcd_cluster):
    etcd_cluster.create(3)
    etcd_cluster.wait_available(3)
    etcd_cluster.put("phoenix", "risen")
    kube, namespace = etcd_cluster.kube, etcd_cluster.namespace
    kube("delete", CLUSTERS, etcd_cluster.name, "-n", namespace, "--wait=true")
    wait_until("peers and pods garbage collected", lambda: not etcd_cluster.pods(), timeout=120)
    wait_until(
        "services garbage collected",
        lambda: not kube.exists("service", f"{etcd_cluster.name}-client", namespace),
        timeout=60,
    )
    assert etcd_cluster.pvc_names() == {"e2e-0", "e2e-1", "e2e-2"}, "PVCs must outlive the cluster"
    etcd_cluster.create(3)
    etcd_cluster.wait_available(3, timeout=240)
    assert etcd_cluster.value("phoenix") == "risen"


# Kills the operator every other test relies on.
@pytest.mark.exclusive
def test_operator_killed_during_scale_up_converges(etcd_cluster):
    etcd_cluster.create(3)
    etcd_cluster.wait_available(3)
    etcd_cluster.put("steady", "state")
    etcd_cluster.scale(5)
    kube = etcd_cluster.kube
    # Wait for the scale-up to be under way (a learner added), then kill the operator's process.
    wait_until(
        "a fourth member to appear",
        lambda: len(etcd_cluster.get().get("status", {}).get("members", [])) >= 4,
        timeout=120,
        interval=0.2,
    )
    operator_pod = running_operator_pod(kube, OPERATOR_NAMESPACE)
    faults.crash_pod(OPERATOR_NAMESPACE, operator_pod)
    etcd_cluster.wait_available(5, timeout=300)
    assert etcd_cluster.value("steady") == "state"


# Deletes the operator's pod every other test relies on.
@pytest.mark.exclusive
def test_deleted_operator_pod_hands_leadership_over_before_its_lease_expires(etcd_cluster):
    """ansible-operator keeps its leader Lease when it stops; the pod's health watch releases it
    once the manager has stopped, so the replacement pod leads without waiting it out."""
    kube = etcd_cluster.kube
    old = running_operator_pod(kube, OPERATOR_NAMESPACE)

    def led_by_old():
        lease = kube.get("lease", "quorumkeeper", OPERATOR_NAMESPACE)
        return (lease["spec"].get("holderIdentity") or "").startswith(old + "_") and lease

    # A pod an earlier test started may still be waiting for its predecessor's Lease.
    lease = wait_until(f"{old} to lead", led_by_old, timeout=60, interval=0.2)
    deleted_at = time.time()
    kube("delete", "pod", old, "-n", OPERATOR_NAMESPACE, "--wait=false")

    def new_leader():
        spec = kube.get("lease", "quorumkeeper", OPERATOR_NAMESPACE)["spec"]
        holder = spec.get("holderIdentity") or ""
        return holder and not holder.startswith(old + "_") and spec

    spec = wait_until("another pod to hold the leader Lease", new_leader, timeout=120, interval=0.2)
    # A Lease kept is taken only once its candidate has seen it unrenewed for its whole duration,
    # a time the candidate, started after the deletion, begins counting after it.
    acquired = datetime.fromisoformat(spec["acquireTime"].replace("Z", "+00:00")).timestamp()
    duration = lease["spec"]["leaseDurationSeconds"]
    assert acquired - deleted_at < duration, (
        f"the new pod led {acquired - deleted_at:.1f} s after the deletion: the Lease was not "
        f"released ({duration} s)"
    )
    # And it reconciles.
    etcd_cluster.create(1)
    etcd_cluster.wait_available(1)


def test_paused_cluster_is_left_alone_until_resumed(etcd_cluster):
    etcd_cluster.create(1)
    etcd_cluster.wait_available(1)
    etcd_cluster.patch_spec(paused=True, replicas=3)

    def paused_at_new_generation():
        cluster = etcd_cluster.get()
        status = cluster.get("status", {})
        return (
            status.get("phase") == "Paused"
            and status.get("observedGeneration") == cluster["metadata"]["generation"]
        )

    wait_until("the operator to report the pause for the new spec", paused_at_new_generation, 60)
    peers = etcd_cluster.peers()
    assert [p["metadata"]["name"] for p in peers] == ["e2e-0"], "a paused cluster must not scale"
    assert etcd_cluster.condition("Progressing")["reason"] == "Paused"
    etcd_cluster.patch_spec(paused=False)
    etcd_cluster.wait_available(3, timeout=240)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"replicas": -1}, "replicas must be at least 1"),
        ({"replicas": 100000}, "replicas must be at most 7"),
        ({"version": "4.0.0"}, "only etcd major version 3"),
        ({"version": "banana"}, "semantic version"),
        (
            {"storage": {"volumeClaimTemplate": {"resources": {"requests": {"storage": "-1Gi"}}}}},
            "the volume size must be at least 128Mi",
        ),
    ],
)
def test_bad_input_is_rejected_by_the_api_server(etcd_cluster, patch, message):
    manifest = etcd_cluster.manifest(3)
    manifest["spec"].update(patch)
    result = etcd_cluster.kube.run("apply", "-f", "-", stdin=json.dumps(manifest), check=False)
    assert result.returncode != 0
    assert message in result.stderr
