"""etcd_peer_upgrade and etcd_cluster_pdb against a real API server (the local cluster; see
test_member_modules.py: the pods' images are ones the image map does not know, these tests are
about the Kubernetes objects; etcd itself is upgraded end to end in tests/e2e/test_upgrade.py)."""

# The fixtures come from test_member_modules; tests and helpers take them as parameters.
# ruff: noqa: F811

from __future__ import annotations

import json

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    CONFIG_HASH_ANNOTATION,
    config_hash,
)
from kubehelpers import CLUSTERS, wait_until
from test_member_modules import (  # noqa: F401 - fixtures
    API,
    crds,
    get,
    kube,
    no_operator,
    peer_spec,
    run_peer,
)

# The operator is stopped while these run (no_operator): alone.
pytestmark = [pytest.mark.cluster, pytest.mark.exclusive]


def run_upgrade(run_module, kube, check=False, **args):
    base = {"name": "m-0", "namespace": kube.namespace, "kubeconfig": str(kube.kubeconfig)}
    return run_module("etcd_peer_upgrade", {**base, **args}, check=check)


def live_pods(kube):
    return [p for p in kube.pods() if not p["metadata"].get("deletionTimestamp")]


def test_the_pod_is_replaced_on_the_new_version_keeping_claim_and_peer(kube, run_module):
    assert not run_peer(run_module, kube, spec=peer_spec("m-0", version="3.6.97"))["failed"]
    (old,) = wait_until("the member's pod", lambda: live_pods(kube), 60)
    claim_uid = get(kube, "pvc", "m-0")["metadata"]["uid"]
    peer_uid = get(kube, "etcdpeer", "m-0")["metadata"]["uid"]

    res = run_upgrade(run_module, kube, check=True, version="3.6.98")
    assert not res["failed"] and res["changed"] and res["patched"], res
    assert res["replaced_pods"] == [old["metadata"]["name"]]
    assert get(kube, "etcdpeer", "m-0")["spec"]["version"] == "3.6.97", "check mode"

    res = run_upgrade(run_module, kube, version="3.6.98")
    assert not res["failed"], res.get("msg")
    assert (res["patched"], res["restarted"]) == (True, True)
    assert res["replaced_pods"] == [old["metadata"]["name"]]
    assert res["image"] == "quay.io/coreos/etcd:v3.6.98"
    new = live_pods(kube)
    assert [p["metadata"]["name"] for p in new] == [res["pod"]] != [old["metadata"]["name"]]
    assert new[0]["spec"]["containers"][0]["image"] == "quay.io/coreos/etcd:v3.6.98"
    assert get(kube, "pvc", "m-0")["metadata"]["uid"] == claim_uid, "the same data"
    peer = get(kube, "etcdpeer", "m-0")
    assert (peer["metadata"]["uid"], peer["spec"]["version"]) == (peer_uid, "3.6.98")
    (owner,) = get(kube, "replicaset", "m-0")["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("EtcdPeer", peer_uid)

    res = run_upgrade(run_module, kube, version="3.6.98")
    assert not res["failed"] and res["changed"] is False, res
    assert res["pod"] == new[0]["metadata"]["name"]


def test_a_replicaset_left_deleted_by_an_interrupted_run_is_created_again(kube, run_module):
    assert not run_peer(run_module, kube, spec=peer_spec("m-0", version="3.6.97"))["failed"]
    wait_until("the member's pod", lambda: live_pods(kube), 60)
    patch = json.dumps({"spec": {"version": "3.6.98"}})
    kube("patch", "etcdpeer", "m-0", "-n", kube.namespace, "--type=merge", "-p", patch)
    kube(
        "delete", "replicaset", "m-0", "-n", kube.namespace, "--cascade=foreground", "--wait=false"
    )
    res = run_upgrade(run_module, kube, version="3.6.98")
    assert not res["failed"] and res["changed"] and not res["patched"], res
    (pod,) = live_pods(kube)
    assert pod["spec"]["containers"][0]["image"] == "quay.io/coreos/etcd:v3.6.98"


def test_a_new_configuration_replaces_the_pod_and_drops_the_options_left_out(kube, run_module):
    spec = peer_spec("m-0", version="3.6.97")
    spec["options"] = {"snapshotCount": 10000, "maxRequestBytes": 2097152}
    assert not run_peer(run_module, kube, spec=spec)["failed"]
    (old,) = wait_until("the member's pod", lambda: live_pods(kube), 60)
    config = {"options": {"snapshotCount": 5000}, "podTemplate": {"nodeSelector": {"a": "b"}}}

    res = run_upgrade(run_module, kube, config=config)
    assert not res["failed"], res.get("msg")
    assert (res["patched"], res["restarted"]) == (True, True)
    assert res["replaced_pods"] == [old["metadata"]["name"]]
    peer = get(kube, "etcdpeer", "m-0")
    # Replaced, not merged: the option left out is gone, and the version is the peer's own.
    assert peer["spec"]["options"] == {"snapshotCount": 5000}
    assert peer["spec"]["podTemplate"] == {"nodeSelector": {"a": "b"}}
    assert peer["spec"]["version"] == "3.6.97"
    (new,) = live_pods(kube)
    args = new["spec"]["containers"][0]["args"]
    assert "--snapshot-count=5000" in args
    assert not [a for a in args if a.startswith("--max-request-bytes")]
    assert new["spec"]["nodeSelector"] == {"a": "b"}
    assert new["metadata"]["annotations"][CONFIG_HASH_ANNOTATION] == config_hash(config)

    res = run_upgrade(run_module, kube, config=config)
    assert not res["failed"] and res["changed"] is False, res
    # Without a configuration (an upgrade), the pod's is not looked at.
    res = run_upgrade(run_module, kube, version="3.6.97")
    assert not res["failed"] and res["changed"] is False, res


def test_a_peer_that_is_gone_is_left_alone(kube, run_module):
    res = run_upgrade(run_module, kube, name="never-existed", version="3.6.98")
    assert not res["failed"] and res["changed"] is False and res["gone"] is True


def run_pdb(run_module, kube, owner_uid, unavailable, check=False):
    args = {
        "name": "m",
        "namespace": kube.namespace,
        "owner_uid": owner_uid,
        "max_unavailable": unavailable,
        "kubeconfig": str(kube.kubeconfig),
    }
    return run_module("etcd_cluster_pdb", args, check=check)


def test_the_budget_is_created_patched_and_owned_by_the_cluster(kube, run_module):
    cluster = {
        "apiVersion": API,
        "kind": "EtcdCluster",
        "metadata": {"name": "m", "namespace": kube.namespace},
        "spec": {"version": "3.6.16", "replicas": 3},
    }
    kube.run("apply", "-f", "-", stdin=json.dumps(cluster))
    # Qualified: another operator's EtcdCluster kind may be installed (the e2e tests' decoy).
    uid = get(kube, CLUSTERS, "m")["metadata"]["uid"]

    res = run_pdb(run_module, kube, uid, 1, check=True)
    assert not res["failed"] and res["created"] and get(kube, "pdb", "m") is None
    res = run_pdb(run_module, kube, uid, 1)
    assert not res["failed"] and res["created"], res.get("msg")
    pdb = get(kube, "pdb", "m")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["metadata"]["ownerReferences"][0]["uid"] == uid
    assert run_pdb(run_module, kube, uid, 1)["changed"] is False

    res = run_pdb(run_module, kube, uid, 2)
    assert res["patched"] and get(kube, "pdb", "m")["spec"]["maxUnavailable"] == 2

    kube("delete", CLUSTERS, "m", "-n", kube.namespace, "--wait=true")
    wait_until("the budget garbage collected", lambda: get(kube, "pdb", "m") is None, 60)
