"""etcd_peer, etcd_member_join, etcd_cluster_services and etcd_cluster_observe against a real
API server (etcd_member_join also against real etcd processes, which the test starts as the
node agent would start the members' pods).

The local cluster runs what they create (its node agents start the etcd pods); the modules get
the admin kubeconfig, so every call goes to the API server itself. The pods' image is one the
image map does not know, so they stay in ErrImagePull: these tests are about the Kubernetes
objects, the etcd side of a member is covered by the etcd module tests and end to end.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    ConnectionProfile,
    etcd_client,
)
from kubehelpers import ROOT, wait_until

import etcdharness

# The operator is stopped while these run (no_operator): alone.
pytestmark = [pytest.mark.cluster, pytest.mark.exclusive]

API = "etcd.quorumkeeper.dev/v1alpha1"
MISSING_IMAGE_VERSION = "3.6.99"


@pytest.fixture(scope="module")
def no_operator(local_cluster):
    """These tests are about the modules alone: a deployed operator (the e2e tests leave one)
    would repair their objects before the module under test could."""
    deployment = ["-n", "quorumkeeper-system", "deployment/quorumkeeper-controller-manager"]
    running = local_cluster.run("get", *deployment, check=False).returncode == 0
    if running:
        local_cluster("scale", *deployment, "--replicas=0")
        wait_until(
            "the operator stopped",
            lambda: (
                not local_cluster.get(
                    "pods",
                    namespace="quorumkeeper-system",
                    selector="control-plane=controller-manager",
                )["items"]
            ),
            120,
        )
    yield
    if running:
        local_cluster("scale", *deployment, "--replicas=1")


@pytest.fixture(scope="module")
def crds(local_cluster, no_operator):
    local_cluster("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "config" / "crd"))
    wait_until(
        "the EtcdPeer CRD served",
        lambda: (
            local_cluster.run("get", "etcdpeers.etcd.quorumkeeper.dev", check=False).returncode == 0
        ),
        60,
    )
    return local_cluster


class NamespacedKube:
    """kubectl bound to the test's namespace."""

    def __init__(self, kube, namespace):
        self.kube, self.namespace, self.kubeconfig = kube, namespace, kube.kubeconfig

    def __call__(self, *args):
        return self.kube(*args)

    def run(self, *args, **kwargs):
        return self.kube.run(*args, **kwargs)

    def pods(self):
        return self.kube.get("pods", namespace=self.namespace)["items"]


@pytest.fixture
def kube(crds, namespace):
    return NamespacedKube(crds, namespace)


def peer_spec(name, members=("m-0",), version=MISSING_IMAGE_VERSION):
    return {
        "clusterName": "m",
        "version": version,
        "repository": "quay.io/coreos/etcd",
        "bootstrap": {
            "initialClusterState": "New",
            "static": {"initialCluster": [{"name": n, "host": f"{n}.m.ns.svc"} for n in members]},
        },
        "storage": {
            "volumeClaimTemplate": {
                "storageClassName": "local-path",
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "128Mi"}},
            }
        },
    }


def run_peer(run_module, kube, check=False, **args):
    base = {"name": "m-0", "namespace": kube.namespace, "kubeconfig": str(kube.kubeconfig)}
    return run_module("etcd_peer", {**base, **args}, check=check)


def get(kube, kind, name):
    result = kube.run("get", kind, name, "-n", kube.namespace, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def test_peer_is_created_with_an_unowned_annotated_claim_and_an_owned_replicaset(kube, run_module):
    res = run_peer(run_module, kube, check=True, spec=peer_spec("m-0"))
    assert not res["failed"] and res["changed"] and get(kube, "etcdpeer", "m-0") is None

    res = run_peer(run_module, kube, spec=peer_spec("m-0"))
    assert not res["failed"], res.get("msg")
    assert res["created"] == ["EtcdPeer", "PersistentVolumeClaim", "ReplicaSet"]
    peer = get(kube, "etcdpeer", "m-0")
    assert peer["metadata"]["labels"]["etcd.quorumkeeper.dev/cluster"] == "m"
    claim = get(kube, "pvc", "m-0")
    assert not claim["metadata"].get("ownerReferences"), "the data must outlive the peer"
    annotations = claim["metadata"]["annotations"]
    assert annotations["operator-sdk/primary-resource"] == f"{kube.namespace}/m"
    assert annotations["operator-sdk/primary-resource-type"] == "EtcdCluster.etcd.quorumkeeper.dev"
    assert peer["status"]["pvcUID"] == claim["metadata"]["uid"]
    (owner,) = get(kube, "replicaset", "m-0")["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("EtcdPeer", "m-0", True)

    res = run_peer(run_module, kube, spec=peer_spec("m-0"))
    assert not res["failed"] and res["changed"] is False, res


def test_several_members_are_made_side_by_side_each_complete_once(kube, run_module):
    names = ("m-0", "m-1", "m-2")
    members = [{"name": n, "spec": peer_spec(n, members=names)} for n in names]
    base = {"namespace": kube.namespace, "kubeconfig": str(kube.kubeconfig), "members": members}
    res = run_module("etcd_peer", base)
    assert not res["failed"], res.get("msg")
    assert [r["created"] for r in res["members"]] == [
        ["EtcdPeer", "PersistentVolumeClaim", "ReplicaSet"]
    ] * 3
    for name in names:
        claim = get(kube, "pvc", name)
        assert get(kube, "etcdpeer", name)["status"]["pvcUID"] == claim["metadata"]["uid"]
        assert get(kube, "replicaset", name)["metadata"]["ownerReferences"][0]["name"] == name

    again = run_module("etcd_peer", base)
    assert not again["failed"] and again["changed"] is False, again

    # One member that cannot be made is named; the others are made all the same.
    broken = [dict(members[0], spec={**members[0]["spec"], "storage": {}}), *members[1:]]
    kube("delete", "etcdpeer", "m-0", "-n", kube.namespace, "--wait=true")
    failed = run_module("etcd_peer", {**base, "members": broken})
    assert failed["failed"] and f"member {kube.namespace}/m-0:" in failed["msg"], failed


def test_peer_repairs_its_replicaset_and_follows_its_spec(kube, run_module):
    assert not run_peer(run_module, kube, spec=peer_spec("m-0"))["failed"]
    kube("delete", "replicaset", "m-0", "-n", kube.namespace, "--wait=true")
    res = run_peer(run_module, kube)
    assert res["created"] == ["ReplicaSet"], res

    patch = {"spec": {"version": "3.6.98"}}
    kube("patch", "etcdpeer", "m-0", "-n", kube.namespace, "--type=merge", "-p", json.dumps(patch))
    res = run_peer(run_module, kube)
    assert res["patched"] == ["ReplicaSet"], res
    image = get(kube, "replicaset", "m-0")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "quay.io/coreos/etcd:v3.6.98"


def test_a_lost_claim_is_reported_and_never_recreated(kube, run_module):
    assert not run_peer(run_module, kube, spec=peer_spec("m-0"))["failed"]
    kube("delete", "replicaset", "m-0", "-n", kube.namespace, "--wait=true")
    wait_until("the member's pod gone", lambda: not kube.pods(), 60)
    kube("delete", "pvc", "m-0", "-n", kube.namespace, "--wait=true")
    res = run_peer(run_module, kube)
    assert not res["failed"] and res["data_lost"] is True and res["changed"] is False
    assert get(kube, "pvc", "m-0") is None and get(kube, "replicaset", "m-0") is None


def test_peer_absent_deletes_pods_before_the_data(kube, run_module):
    assert not run_peer(run_module, kube, spec=peer_spec("m-0"))["failed"]
    wait_until("the member's pod", lambda: kube.pods(), 60)
    res = run_peer(run_module, kube, state="absent", delete_data=True, check=True)
    assert res["changed"] and get(kube, "pvc", "m-0") is not None
    res = run_peer(run_module, kube, state="absent", delete_data=True)
    assert not res["failed"], res.get("msg")
    assert res["deleted"] == ["EtcdPeer", "ReplicaSet", "PersistentVolumeClaim"]
    assert not kube.pods(), "pods are gone first"
    wait_until("the claim deleted", lambda: get(kube, "pvc", "m-0") is None, 60)
    res = run_peer(run_module, kube, state="absent", delete_data=True)
    assert not res["failed"] and res["changed"] is False


def test_peer_absent_shortens_the_grace_of_a_pod_already_terminating(kube, run_module):
    """A member cut off the network took 15 s of its 30 s grace period to stop, and its
    replacement waited for it: the pods of a member whose data is gone are given a short grace
    period, also when something deleted them earlier with a long one. A pod that ignores
    SIGTERM stands for the slow member."""
    kube.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "m-0-stuck", "labels": {"etcd.quorumkeeper.dev/peer": "m-0"}},
            "spec": {
                "terminationGracePeriodSeconds": 300,
                "containers": [
                    {
                        "name": "sh",
                        "image": "busybox:1.36",
                        "command": ["/bin/sh", "-c", 'trap "" TERM; while true; do sleep 1; done'],
                    }
                ],
            },
        },
        namespace=kube.namespace,
    )
    kube.kube.wait_pod_ready("m-0-stuck", kube.namespace)
    kube("delete", "pod", "m-0-stuck", "-n", kube.namespace, "--wait=false")
    res = run_peer(run_module, kube, state="absent", wait_timeout=30, pod_grace_seconds=1)
    assert not res["failed"], res.get("msg")
    assert not kube.pods()


def test_a_deleted_peer_without_spec_is_left_alone(kube, run_module):
    res = run_peer(run_module, kube, name="never-existed")
    assert not res["failed"] and res["changed"] is False and res["gone"] is True


def etcd_members(cluster):
    with etcd_client(ConnectionProfile(cluster.running_endpoints(), timeout=5)) as client:
        members, _, _ = client.member_list()
    return members


def join_args(kube, cluster, nodes, wait_timeout):
    """etcd_member_join's options for adding ``nodes`` (m-1, m-2) to ``cluster`` (m-0)."""
    return {
        "endpoints": cluster.running_endpoints(),
        "namespace": kube.namespace,
        "kubeconfig": str(kube.kubeconfig),
        "members": [f"{node.name}={node.peer_url}" for node in nodes],
        "spec": peer_spec("m-2", members=("m-0", "m-1", "m-2")),
        "wait_timeout": wait_timeout,
    }


def initial_cluster_names(kube, name):
    peer = get(kube, "etcdpeer", name)
    return [e["name"] for e in peer["spec"]["bootstrap"]["static"]["initialCluster"]]


@pytest.mark.parametrize("etcd_version", ["3.6.16"])
def test_members_join_one_at_a_time_each_started_and_promoted(
    kube, run_module, etcd_factory, etcd_version
):
    cluster = etcd_factory(1, prefix="m-")
    nodes = [cluster.new_node(f"m-{i}") for i in (1, 2)]
    args = join_args(kube, cluster, nodes, wait_timeout=30)
    planned = run_module("etcd_member_join", args, check=True)
    assert not planned["failed"] and planned["changed"], planned.get("msg")
    assert len(etcd_members(cluster)) == 1 and get(kube, "etcdpeer", "m-1") is None

    with ThreadPoolExecutor(1) as pool:
        joining = pool.submit(run_module, "etcd_member_join", args)
        for index, node in enumerate(nodes):
            # The module adds the learner and creates its EtcdPeer; the test starts its etcd.
            wait_until(
                f"{node.name} added as a learner with its EtcdPeer",
                lambda node=node: (
                    get(kube, "etcdpeer", node.name) is not None
                    and [
                        m["is_learner"]
                        for m in etcd_members(cluster)
                        if node.peer_url in m["peer_urls"]
                    ]
                    == [True]
                ),
                60,
            )
            voters = sum(not m["is_learner"] for m in etcd_members(cluster))
            assert voters == index + 1, "the next member waits for the previous promotion"
            # Each member starts knowing exactly the members etcd has once it is added.
            assert initial_cluster_names(kube, node.name) == [f"m-{i}" for i in range(index + 2)]
            started = [cluster.nodes["m-0"], *nodes[: index + 1]]
            cluster.join(node.name, ",".join(f"{n.name}={n.peer_url}" for n in started), node)
        result = joining.result(timeout=120)
    assert not result["failed"], result.get("msg")
    assert [(j["name"], j["added"], j["promoted"]) for j in result["joined"]] == [
        ("m-1", True, True),
        ("m-2", True, True),
    ]
    assert result["joined"][0]["created"] == ["EtcdPeer", "PersistentVolumeClaim", "ReplicaSet"]
    assert not any(m["is_learner"] for m in etcd_members(cluster))
    assert len(etcd_members(cluster)) == 3

    again = run_module("etcd_member_join", args)
    assert not again["failed"] and again["changed"] is False, again


@pytest.mark.parametrize("etcd_version", ["3.6.16"])
def test_a_member_promoted_by_the_join_counts_for_the_next_while_it_does_not_serve_clients(
    kube, run_module, etcd_factory, etcd_version, unconnectable_url
):
    """A member that joined through a snapshot serves clients only 7 s after it started (its
    publication through raft times out once): the join does not stop at the next member for
    a quorum it has (1 healthy voter of 2 needed 2), and does not wait out the status call's
    timeout for it. Here m-1 never serves on the URL it advertises."""
    cluster = etcd_factory(1, prefix="m-")
    nodes = [cluster.new_node(f"m-{i}") for i in (1, 2)]
    nodes[0].advertise_client_url = unconnectable_url
    args = join_args(kube, cluster, nodes, wait_timeout=30)
    with ThreadPoolExecutor(1) as pool:
        joining = pool.submit(run_module, "etcd_member_join", args)
        for index, node in enumerate(nodes):
            wait_until(
                f"{node.name} added as a learner",
                lambda node=node: any(
                    node.peer_url in m["peer_urls"] for m in etcd_members(cluster)
                ),
                60,
            )
            started = [cluster.nodes["m-0"], *nodes[: index + 1]]
            cluster.join(node.name, ",".join(f"{n.name}={n.peer_url}" for n in started), node)
        result = joining.result(timeout=120)
    assert not result["failed"], result.get("msg")
    assert [(j["name"], j["promoted"]) for j in result["joined"]] == [
        ("m-1", True),
        ("m-2", True),
    ]
    # Asked as the join asked (m-0's URL only): m-1 answers on no URL it advertises.
    with etcd_client(ConnectionProfile([cluster.nodes["m-0"].client_url], timeout=5)) as client:
        info = client.cluster_info()
    health = {m["name"]: m["healthy"] for m in info["members"]}
    assert health == {"m-0": True, "m-1": False, "m-2": True}, info["members"]


@pytest.mark.parametrize("etcd_version", ["3.6.16"])
def test_a_member_that_never_catches_up_stops_the_join_there(
    kube, run_module, etcd_factory, etcd_version
):
    cluster = etcd_factory(1, prefix="m-")
    nodes = [cluster.new_node(f"m-{i}") for i in (1, 2)]
    result = run_module("etcd_member_join", join_args(kube, cluster, nodes, wait_timeout=1))
    assert result["failed"] and "cannot promote" in result["msg"] and "m-1" in result["msg"]
    assert "has not caught up" in result["msg"]
    assert result["joined"] == [] and "add m-1" in " ".join(result["actions"])
    # m-1 stays a learner with its objects for the next reconcile to resume; m-2 was not added.
    assert sorted(m["is_learner"] for m in etcd_members(cluster)) == [False, True]
    assert get(kube, "etcdpeer", "m-1") is not None and get(kube, "etcdpeer", "m-2") is None


@pytest.mark.parametrize("etcd_version", ["3.6.16"])
def test_members_leave_one_at_a_time_then_their_peers_pods_and_data(
    kube, run_module, etcd_factory, etcd_version
):
    cluster = etcd_factory(3, prefix="m-")
    for name in ("m-1", "m-2"):
        created = run_peer(run_module, kube, name=name, spec=peer_spec(name, members=(name,)))
        assert not created["failed"], created.get("msg")
    ids = {m["name"]: m["id"] for m in etcd_members(cluster)}
    args = {
        "endpoints": cluster.running_endpoints(),
        "namespace": kube.namespace,
        "kubeconfig": str(kube.kubeconfig),
        "members": [{"name": "m-2", "id": ids["m-2"]}, {"name": "m-1", "id": ids["m-1"]}],
        "wait_timeout": 60,
    }
    planned = run_module("etcd_member_leave", args, check=True)
    assert not planned["failed"] and planned["changed"], planned.get("msg")
    assert len(etcd_members(cluster)) == 3 and get(kube, "etcdpeer", "m-2") is not None

    result = run_module("etcd_member_leave", args)
    assert not result["failed"], result.get("msg")
    assert [(m["name"], m["removed"]) for m in result["left"]] == [("m-2", True), ("m-1", True)]
    assert result["left"][0]["deleted"] == ["EtcdPeer", "ReplicaSet", "PersistentVolumeClaim"]
    # m-2 and m-1 no longer answer for etcd: ask the member that stays.
    cluster.stop("m-2")
    cluster.stop("m-1")
    assert [m["name"] for m in etcd_members(cluster)] == ["m-0"]
    for name in ("m-1", "m-2"):
        assert get(kube, "etcdpeer", name) is None
        wait_until(f"{name}'s claim deleted", lambda n=name: get(kube, "pvc", n) is None, 60)

    args["endpoints"] = cluster.running_endpoints()
    again = run_module("etcd_member_leave", args)
    assert not again["failed"] and again["changed"] is False, again


def test_services_and_annotated_endpoints(kube, run_module):
    args = {"name": "m", "namespace": kube.namespace, "kubeconfig": str(kube.kubeconfig)}
    res = run_module("etcd_cluster_services", args)
    assert not res["failed"], res.get("msg")
    assert set(res["created"]) >= {"Service/m", "Service/m-client"}
    assert get(kube, "service", "m")["spec"]["clusterIP"] == "None"

    def annotated():
        endpoints = get(kube, "endpoints", "m-client") or {"metadata": {}}
        return (endpoints["metadata"].get("annotations") or {}).get(
            "operator-sdk/primary-resource-type"
        ) == "EtcdCluster.etcd.quorumkeeper.dev"

    assert annotated()
    res = run_module("etcd_cluster_services", args)
    assert not res["failed"] and res["changed"] is False, res

    kube(
        "annotate",
        "endpoints",
        "m-client",
        "-n",
        kube.namespace,
        "operator-sdk/primary-resource-type-",
    )
    res = run_module("etcd_cluster_services", args)
    assert res["patched"] == ["Endpoints/m-client"] and annotated()


def test_observe_reports_peers_pods_claims_and_an_unreachable_etcd(kube, run_module, tmp_path):
    assert not run_peer(run_module, kube, spec=peer_spec("m-0", ("m-0", "m-1")))["failed"]
    assert not run_peer(run_module, kube, name="m-1", spec=peer_spec("m-1", ("m-0", "m-1")))[
        "failed"
    ]
    args = {
        "name": "m",
        "namespace": kube.namespace,
        "kubeconfig": str(kube.kubeconfig),
        "timeout": 1,
    }

    def observed_with_problems():
        res = run_module("etcd_cluster_observe", args)
        assert not res["failed"], res.get("msg")
        pods = res["pods"]
        return res if all(p and p["problem"] for p in pods.values()) else None

    res = wait_until("both pods failing to pull their image", observed_with_problems, 90)
    assert [p["name"] for p in res["peers"]] == ["m-0", "m-1"]
    assert res["peers"][0]["state"] == "New" and res["peers"][0]["initial_cluster"] == [
        "m-0",
        "m-1",
    ]
    assert res["peers"][0]["pvc_uid"] == res["pvcs"]["m-0"]["uid"]
    assert res["pods"]["m-1"]["problem"]["reason"] == "ImagePullFailed"
    assert res["replicasets"]["m-0"]["exists"]
    assert res["services"] == {"headless": False, "client": False, "metrics": False}
    assert res["etcd"]["reachable"] is False and res["changed"] is False

    # run_module runs the action plugin (in ansible's own process, as the operator does); the
    # module, where action plugins are not configured, observes the same.
    as_module = etcdharness.ModuleRunner(tmp_path / "module", action_plugins=False)
    alone = as_module("etcd_cluster_observe", args)
    assert not alone["failed"], alone.get("msg")
    assert [(p["name"], p["pvc_uid"]) for p in alone["peers"]] == [
        (p["name"], p["pvc_uid"]) for p in res["peers"]
    ]
    assert {name: pod["problem"]["reason"] for name, pod in alone["pods"].items()} == {
        name: pod["problem"]["reason"] for name, pod in res["pods"].items()
    }
    assert alone["services"] == res["services"] and alone["etcd"] == res["etcd"]


def test_modules_fail_with_a_message_without_a_cluster(run_module, tmp_path):
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    res = run_module("etcd_peer", {"name": "x", "namespace": "y", "kubeconfig": str(bad)})
    assert res["failed"] and "has no context" in res["msg"]
