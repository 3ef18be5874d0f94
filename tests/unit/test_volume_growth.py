"""Volume growth in the EtcdCluster planner (qk_plan_volumes): a larger spec.storage size grows
the member claims in place, the quota that derives from it waits until every volume has grown,
a StorageClass that cannot expand is reported, and status says the size the volumes have."""

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import summarize_pvc
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan import (
    etcd_cluster_plan as plan,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_report import (
    etcd_cluster_report as report,
)
from test_config_plan import NEW, NEW_CONFIG, OLD, cluster

GIB = 1 << 30


def claim(request=GIB, capacity=GIB, expandable=None, resizing=(), storage_class="local-path"):
    summary = {
        "exists": True,
        "uid": "",
        "phase": "Bound",
        "deleting": False,
        "problem": None,
        "storage_class": storage_class,
        "request_bytes": request,
        "capacity": f"{capacity // GIB}Gi",
        "capacity_bytes": capacity,
        "resizing": list(resizing),
    }
    if expandable is not None:
        summary["expandable"] = expandable
    return summary


def grown_cluster(claims, size="2Gi", configs=(NEW, NEW, NEW)):
    observed = cluster(configs=configs)
    observed["volume_size"] = size
    for i, summary in enumerate(claims):
        observed["pvcs"][f"c-{i}"] = {**summary, "uid": f"uid-{i}"}
    return observed


def test_a_larger_size_grows_every_expandable_claim_at_once():
    step = plan(grown_cluster([claim(expandable=True)] * 3))
    assert step["action"] == "grow_volumes" and step["reason"] == "VolumesGrowing"
    assert step["members"] == [{"name": "c-0"}, {"name": "c-1"}, {"name": "c-2"}]
    assert "no member restarts" in step["message"]


def test_only_the_claims_still_asking_for_less_are_grown():
    claims = [claim(2 * GIB, 2 * GIB), claim(expandable=True), claim(2 * GIB, GIB)]
    step = plan(grown_cluster(claims))
    assert step["action"] == "grow_volumes" and step["members"] == [{"name": "c-1"}]


def test_volumes_asked_to_grow_are_waited_for_with_what_they_report():
    claims = [claim(2 * GIB, 2 * GIB), claim(2 * GIB, GIB, resizing=["Resizing: expanding"])]
    step = plan(grown_cluster(claims + [claim(2 * GIB, 2 * GIB)]))
    assert step["action"] == "wait" and step["reason"] == "VolumesGrowing"
    assert "c-1 has 1Gi (Resizing: expanding)" in step["message"]
    assert step["requeue"] == "poll"


def test_the_quota_of_the_new_size_is_rolled_out_only_once_every_volume_has_grown():
    growing = grown_cluster(
        [claim(2 * GIB, 2 * GIB), claim(2 * GIB, GIB), claim(2 * GIB, 2 * GIB)],
        configs=(OLD, OLD, OLD),
    )
    assert plan(growing)["action"] == "wait"
    grown = grown_cluster([claim(2 * GIB, 2 * GIB)] * 3, configs=(OLD, OLD, OLD))
    step = plan(grown)
    assert step["action"] == "restart_member" and step["config"] == NEW_CONFIG


def test_a_class_that_cannot_expand_is_reported_and_holds_the_rollout():
    observed = grown_cluster([claim(expandable=False)] * 3, configs=(OLD, OLD, OLD))
    step = plan(observed)
    # Nothing to grow, and no member restarted onto a quota its disk cannot hold.
    assert step["action"] == "none"
    result = report({**observed, "config": NEW_CONFIG}, step)
    degraded = next(c for c in result["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "VolumeCannotGrow"
    assert "StorageClass local-path does not allow volume expansion" in degraded["message"]
    assert "back to 1Gi" in degraded["message"]
    assert result["events"][0]["reason"] == "VolumeCannotGrow"
    assert result["requeue"] == "degraded"


def test_without_spec_storage_nothing_grows():
    observed = cluster(configs=(NEW, NEW, NEW))
    assert plan(observed)["action"] == "none"


def test_status_says_the_size_of_the_smallest_volume():
    observed = grown_cluster(
        [claim(2 * GIB, 2 * GIB), claim(2 * GIB, GIB), claim(2 * GIB, 2 * GIB)]
    )
    result = report(observed, plan(observed))
    assert result["status"]["volumeSize"] == "1Gi"


def test_a_claim_says_what_it_asks_for_what_it_has_and_how_its_resize_goes():
    pvc = {
        "metadata": {"name": "c-0", "uid": "u"},
        "spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "2Gi"}}},
        "status": {
            "phase": "Bound",
            "capacity": {"storage": "1Gi"},
            "conditions": [
                {"type": "FileSystemResizePending", "status": "True", "message": "waiting"},
                {"type": "Resizing", "status": "False"},
                {"type": "Other", "status": "True"},
            ],
        },
    }
    summary = summarize_pvc(pvc)
    assert summary["storage_class"] == "fast"
    assert summary["request_bytes"] == 2 * GIB
    assert (summary["capacity"], summary["capacity_bytes"]) == ("1Gi", GIB)
    assert summary["resizing"] == ["FileSystemResizePending: waiting"]
