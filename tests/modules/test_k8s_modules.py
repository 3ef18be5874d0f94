"""k8s_status / k8s_event / k8s_report against a real API server (the local cluster), both as
the action plugins the operator runs in-process and as the modules in library/.

They use the local cluster (started if not running, by the ``local_cluster`` fixture of
tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest

import etcdharness

pytestmark = pytest.mark.cluster

GROUP = "qktest.quorumkeeper.dev"
API_VERSION = f"{GROUP}/v1"
KIND = "StatusProbe"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"statusprobes.{GROUP}"},
    "spec": {
        "group": GROUP,
        "names": {"kind": KIND, "plural": "statusprobes", "singular": "statusprobe"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


@pytest.fixture(params=[True, False], ids=["action", "module"])
def run_module(request, tmp_path):
    return etcdharness.ModuleRunner(tmp_path / "ansible-home", action_plugins=request.param)


@pytest.fixture(scope="module")
def kube(local_cluster):
    path = str(local_cluster.kubeconfig)
    from kubernetes import client, config
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ConflictError

    try:
        cfg = client.Configuration()
        config.load_kube_config(config_file=path, client_configuration=cfg)
        dyn = DynamicClient(client.ApiClient(cfg))
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"cannot talk to the cluster of {path}: {exc}")
    crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    with contextlib.suppress(ConflictError):
        dyn.create(crds, body=CRD)
    deadline = time.monotonic() + 60
    while True:
        try:
            dyn.resources.invalidate_cache()
            dyn.resources.get(api_version=API_VERSION, kind=KIND)
            break
        except Exception:  # noqa: BLE001
            if time.monotonic() > deadline:
                pytest.fail(f"CRD {CRD['metadata']['name']} was not served within 60s")
            time.sleep(0.5)
    namespaces = dyn.resources.get(api_version="v1", kind="Namespace")
    ns = f"qk-modtest-{uuid.uuid4().hex[:8]}"
    dyn.create(namespaces, body={"metadata": {"name": ns}})
    yield {"dyn": dyn, "namespace": ns, "kubeconfig": path}
    dyn.delete(namespaces, name=ns)


@pytest.fixture
def probe(kube):
    res = kube["dyn"].resources.get(api_version=API_VERSION, kind=KIND)
    name = f"p-{uuid.uuid4().hex[:8]}"
    obj = kube["dyn"].create(
        res,
        namespace=kube["namespace"],
        body={"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": {}},
    )
    return {"name": name, "res": res, "uid": obj.metadata.uid, **kube}


def _get(probe):
    return (
        probe["dyn"].get(probe["res"], name=probe["name"], namespace=probe["namespace"]).to_dict()
    )


def _args(probe, **kw):
    base = {
        "api_version": API_VERSION,
        "kind": KIND,
        "name": probe["name"],
        "namespace": probe["namespace"],
        "kubeconfig": probe["kubeconfig"],
    }
    base.update(kw)
    return base


def test_status_merge_conditions_and_idempotence(probe, run_module):
    cond = {"type": "Available", "status": "True", "reason": "QuorumHealthy", "message": "3/3"}
    args = _args(probe, status={"readyMembers": 3, "phase": "Running"}, conditions=[cond])

    res = run_module("k8s_status", args, check=True)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    assert "status" not in _get(probe) or not _get(probe)["status"]

    res = run_module("k8s_status", args)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    status = _get(probe)["status"]
    assert status["readyMembers"] == 3 and status["phase"] == "Running"
    (c,) = status["conditions"]
    assert c["type"] == "Available" and c["status"] == "True" and c["reason"] == "QuorumHealthy"
    assert c["observedGeneration"] == _get(probe)["metadata"]["generation"]
    assert c["lastTransitionTime"].endswith("Z")
    assert res["status"] == status

    res = run_module("k8s_status", args)
    assert not res["failed"] and res["changed"] is False, res

    # pretend the condition has been True for a long time
    obj = _get(probe)
    obj["status"]["conditions"][0]["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    probe["dyn"].replace(probe["res"].status, body=obj, namespace=probe["namespace"])

    # message changes, status does not: transition time kept; other fields merged, not replaced
    cond2 = dict(cond, message="3/3 members, leader n1")
    res = run_module("k8s_status", _args(probe, status={"phase": "Running"}, conditions=[cond2]))
    assert not res["failed"] and res["changed"] is True
    status = _get(probe)["status"]
    assert status["readyMembers"] == 3
    assert status["conditions"][0]["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert status["conditions"][0]["message"] == "3/3 members, leader n1"

    # status flips: transition time is now; a second type is appended
    cond3 = dict(cond, status="False", reason="QuorumLost", message="1/3")
    deg = {"type": "Degraded", "status": True, "reason": "MembersDown", "message": "2 down"}
    res = run_module("k8s_status", _args(probe, conditions=[cond3, deg]))
    assert not res["failed"] and res["changed"] is True
    status = _get(probe)["status"]
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["Available"]["status"] == "False"
    assert by_type["Available"]["lastTransitionTime"] > "2020-01-01T00:00:00Z"
    assert by_type["Degraded"]["status"] == "True"


def test_status_missing_object(kube, run_module):
    res = run_module(
        "k8s_status",
        {
            "api_version": API_VERSION,
            "kind": KIND,
            "name": "does-not-exist",
            "namespace": kube["namespace"],
            "kubeconfig": kube["kubeconfig"],
            "status": {"a": 1},
        },
    )
    assert res["failed"] and "not found" in res["msg"] and "does-not-exist" in res["msg"]


def _events(probe):
    events = probe["dyn"].resources.get(api_version="v1", kind="Event")
    items = (
        probe["dyn"]
        .get(
            events,
            namespace=probe["namespace"],
            field_selector=f"involvedObject.uid={probe['uid']}",
        )
        .to_dict()["items"]
    )
    return items


def test_event_create_and_aggregate(probe, run_module):
    args = _args(probe, reason="MemberAdded", message="added n3", type="Normal")
    res = run_module("k8s_event", args, check=True)
    assert not res["failed"] and res["changed"] is True
    assert _events(probe) == []

    res = run_module("k8s_event", args)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    (ev,) = _events(probe)
    assert ev["count"] == 1 and ev["source"]["component"] == "quorumkeeper"
    assert ev["involvedObject"]["uid"] == probe["uid"] and ev["reason"] == "MemberAdded"

    res = run_module("k8s_event", args)
    assert not res["failed"] and res["changed"] is True
    (ev2,) = _events(probe)
    assert ev2["metadata"]["name"] == ev["metadata"]["name"] and ev2["count"] == 2

    res = run_module("k8s_event", dict(args, message="added n4", type="Warning"))
    assert not res["failed"] and res["changed"] is True
    assert sorted(e["message"] for e in _events(probe)) == ["added n3", "added n4"]


def test_event_missing_object(kube, run_module):
    res = run_module(
        "k8s_event",
        {
            "api_version": API_VERSION,
            "kind": KIND,
            "name": "ghost",
            "namespace": kube["namespace"],
            "kubeconfig": kube["kubeconfig"],
            "reason": "X",
            "message": "y",
        },
    )
    assert res["failed"] and "does not exist" in res["msg"]


def test_report_writes_events_then_related_statuses_then_its_own(kube, run_module):
    """One k8s_report task: the Events about the object, a related object's status, the object's
    own status; a related object that is gone is skipped with ignore_missing, and a report that
    changes nothing writes nothing."""
    res_type = kube["dyn"].resources.get(api_version=API_VERSION, kind=KIND)
    names = [f"p-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in names:
        kube["dyn"].create(
            res_type,
            namespace=kube["namespace"],
            body={"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": {}},
        )
    owner, member = ({"name": n, "res": res_type, **kube} for n in names)
    owner["uid"] = _get(owner)["metadata"]["uid"]
    ready = {"type": "Ready", "status": True, "reason": "PodReady", "message": "ready"}
    available = {"type": "Available", "status": "True", "reason": "QuorumHealthy", "message": ""}
    args = _args(
        owner,
        events=[{"reason": "MemberAdded", "message": f"member {names[1]} added"}],
        related_statuses=[
            {"kind": KIND, "name": names[1], "status": {"ready": True}, "conditions": [ready]},
            {"kind": KIND, "name": "gone-member", "status": {"ready": False}},
        ],
        status={"readyMembers": 2},
        conditions=[available],
        ignore_missing=True,
    )

    res = run_module("k8s_report", args, check=True)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    assert _events(owner) == [] and not _get(member).get("status")

    res = run_module("k8s_report", args)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    assert res["events"] == 1 and res["related_changed"] == [names[1]]
    (event,) = _events(owner)
    assert event["reason"] == "MemberAdded" and event["type"] == "Normal"
    member_status = _get(member)["status"]
    assert member_status["ready"] is True and member_status["conditions"][0]["status"] == "True"
    own = _get(owner)["status"]
    assert own["readyMembers"] == 2 and own["conditions"][0]["reason"] == "QuorumHealthy"
    assert res["status"] == own

    res = run_module("k8s_report", dict(args, events=[]))
    assert not res["failed"] and res["changed"] is False, res
    assert res["related_changed"] == [] and res["events"] == 0

    res = run_module("k8s_report", dict(args, ignore_missing=False, events=[]))
    assert res["failed"] and "gone-member" in res["msg"] and "not found" in res["msg"]


def test_report_trusts_the_object_the_caller_read_when_it_would_not_change_it(probe, run_module):
    """With ``known`` and nothing but the status to write, a report that would not change the
    status the caller read makes no API call; one that would is written as without it."""
    available = {"type": "Available", "status": "True", "reason": "QuorumHealthy", "message": ""}
    res = run_module("k8s_report", _args(probe, status={"readyMembers": 3}, conditions=[available]))
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    stored = _get(probe)
    read = {"status": stored["status"], "generation": stored["metadata"]["generation"]}

    # What the caller read says readyMembers 2 although 3 is stored: trusted, not read again.
    stale = {**read, "status": {**read["status"], "readyMembers": 2}}
    same = _args(probe, status={"readyMembers": 2}, conditions=[available], known=stale)
    res = run_module("k8s_report", same)
    assert not res["failed"] and res["changed"] is False, res.get("msg", res)
    assert res["status"]["readyMembers"] == 2 and _get(probe)["status"]["readyMembers"] == 3

    # A change against what the caller read is written, merged into what is stored.
    changed = _args(probe, status={"readyMembers": 1}, conditions=[available], known=read)
    res = run_module("k8s_report", changed)
    assert not res["failed"] and res["changed"] is True, res.get("msg", res)
    assert _get(probe)["status"]["readyMembers"] == 1

    # Events are never skipped.
    with_event = dict(same, known=read, status={"readyMembers": 1})
    with_event["events"] = [{"reason": "MemberAdded", "message": "m added"}]
    res = run_module("k8s_report", with_event)
    assert not res["failed"] and res["events"] == 1, res.get("msg", res)
