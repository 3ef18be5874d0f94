"""A member's objects (rendered from its EtcdPeer) and what its pod and claim say about it."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import (
    CLUSTER_GROUP_KIND,
    PRIMARY_RESOURCE,
    PRIMARY_RESOURCE_TYPE,
    gomaxprocs,
    is_subset,
    member_settings,
    never_ran,
    render_pvc,
    render_replicaset,
    render_services,
    summarize_pod,
    summarize_pvc,
    summarize_replicaset,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    CONFIG_HASH_ANNOTATION,
    config_hash,
    peer_config,
)

SPEC = {
    "clusterName": "c",
    "version": "3.6.16",
    "repository": "quay.io/coreos/etcd",
    "bootstrap": {
        "initialClusterState": "Existing",
        "static": {
            "initialCluster": [
                {"name": "c-0", "host": "c-0.c.ns.svc.cluster.local"},
                {"name": "c-1", "host": "c-1.c.ns.svc.cluster.local"},
            ]
        },
    },
}
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def stamp(seconds_ago):
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    "q,n",
    [("1500m", 1), ("2", 2), (2, 2), ("500m", 1), ("2.5", 2), ("3999m", 3), (0.1, 1), ("1k", 1000)],
)
def test_gomaxprocs(q, n):
    assert gomaxprocs(q) == n


def test_gomaxprocs_without_a_limit_is_unset():
    assert gomaxprocs(None) is None and gomaxprocs("") is None


@pytest.mark.parametrize("bad", ["lots", "1.5Gi", "m", True])
def test_gomaxprocs_rejects(bad):
    with pytest.raises(ValueError):
        gomaxprocs(bad)


def test_settings_accept_numbers_as_strings_from_templates():
    settings = member_settings({"client_port": "2379", "peer_port": 2380, "default_repository": ""})
    assert settings["client_port"] == 2379 and settings["peer_port"] == 2380
    assert settings["default_repository"] == "quay.io/coreos/etcd", "empty means the default"


def test_replicaset_runs_the_member_with_its_identity_and_no_liveness_probe():
    rs = render_replicaset("c-1", "ns", SPEC)
    assert rs["metadata"]["name"] == "c-1" and rs["spec"]["replicas"] == 1
    assert rs["spec"]["selector"] == {"matchLabels": {"etcd.quorumkeeper.dev/peer": "c-1"}}
    pod = rs["spec"]["template"]
    assert pod["metadata"]["labels"]["etcd.quorumkeeper.dev/cluster"] == "c"
    spec = pod["spec"]
    assert (spec["hostname"], spec["subdomain"]) == ("c-1", "c")
    (container,) = spec["containers"]
    assert container["image"] == "quay.io/coreos/etcd:v3.6.16"
    args = container["args"]
    assert "--name=c-1" in args
    assert "--initial-cluster-state=existing" in args
    assert (
        "--initial-cluster=c-0=http://c-0.c.ns.svc.cluster.local:2380,"
        "c-1=http://c-1.c.ns.svc.cluster.local:2380"
    ) in args
    assert "--advertise-client-urls=http://c-1.c.ns.svc.cluster.local:2379" in args
    assert "livenessProbe" not in container and container["readinessProbe"]["periodSeconds"] == 1
    assert "env" not in container and "resources" not in container
    assert spec["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "c-1"}}]


def test_the_pod_says_which_configuration_it_was_started_with():
    spec = copy.deepcopy(SPEC)
    plain = render_replicaset("c-0", "ns", spec)["spec"]["template"]["metadata"]["annotations"]
    spec["options"] = {"snapshotCount": 5000}
    tuned = render_replicaset("c-0", "ns", spec)["spec"]["template"]["metadata"]["annotations"]
    assert plain[CONFIG_HASH_ANNOTATION] == config_hash({"options": {}, "podTemplate": {}})
    assert tuned[CONFIG_HASH_ANNOTATION] == config_hash(peer_config(spec))
    assert tuned[CONFIG_HASH_ANNOTATION] != plain[CONFIG_HASH_ANNOTATION]
    pod = {"metadata": {"name": "c-0-x", "annotations": tuned}, "spec": {}, "status": {}}
    assert summarize_pod(pod)["config_hash"] == tuned[CONFIG_HASH_ANNOTATION]
    assert summarize_pod({"metadata": {"name": "c-0-y"}})["config_hash"] is None


def test_members_serve_metrics_on_a_port_of_their_own_with_scrape_annotations():
    pod = render_replicaset("c-0", "ns", copy.deepcopy(SPEC))["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert "--listen-metrics-urls=http://0.0.0.0:2381" in container["args"]
    assert {"name": "metrics", "containerPort": 2381} in container["ports"]
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "2381"
    assert annotations["prometheus.io/path"] == "/metrics"


@pytest.mark.parametrize(
    "settings",
    [{"client_port": 2381}, {"peer_port": "2381"}, {"client_port": 2380}],
    ids=["client-on-metrics", "peer-on-metrics", "client-on-peer"],
)
def test_ports_that_collide_are_refused_naming_the_setting(settings):
    with pytest.raises(ValueError, match="ports must differ.*quorumkeeper_client_port"):
        render_replicaset("c-0", "ns", copy.deepcopy(SPEC), settings)
    assert member_settings({"client_port": 2479})["client_port"] == 2479


def test_replicaset_takes_the_pod_template_settings():
    spec = copy.deepcopy(SPEC)
    spec["podTemplate"] = {
        "metadata": {"annotations": {"prometheus.io/scrape": "true"}},
        "resources": {"limits": {"cpu": "1500m"}},
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "etcd", "operator": "Exists"}],
    }
    pod = render_replicaset("c-0", "ns", spec)["spec"]["template"]
    assert pod["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        CONFIG_HASH_ANNOTATION: config_hash(peer_config(spec)),
    }
    (container,) = pod["spec"]["containers"]
    assert container["env"] == [{"name": "GOMAXPROCS", "value": "1"}]
    assert container["resources"] == {"limits": {"cpu": "1500m"}}
    assert pod["spec"]["nodeSelector"] == {"disk": "ssd"}
    assert pod["spec"]["tolerations"] == [{"key": "etcd", "operator": "Exists"}]


def test_replicaset_of_a_peer_missing_from_its_own_initial_cluster_is_refused():
    with pytest.raises(ValueError, match="does not name it"):
        render_replicaset("c-5", "ns", SPEC)


def test_pvc_has_no_owner_and_points_at_the_cluster():
    claim = render_pvc("c-1", "ns", SPEC)
    assert "ownerReferences" not in claim["metadata"]
    assert claim["metadata"]["annotations"] == {
        PRIMARY_RESOURCE: "ns/c",
        PRIMARY_RESOURCE_TYPE: CLUSTER_GROUP_KIND,
    }
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    with_storage = dict(SPEC, storage={"volumeClaimTemplate": {"storageClassName": "fast"}})
    assert render_pvc("c-1", "ns", with_storage)["spec"] == {"storageClassName": "fast"}


def test_services():
    headless, client, metrics = render_services("c", "ns")
    assert metrics["metadata"]["name"] == "c-metrics"
    assert metrics["spec"]["clusterIP"] == "None" and metrics["spec"]["publishNotReadyAddresses"]
    assert metrics["spec"]["ports"] == [{"name": "metrics", "port": 2381, "targetPort": "metrics"}]
    assert metrics["spec"]["selector"] == {
        "etcd.quorumkeeper.dev/cluster": "c",
        "app.kubernetes.io/name": "etcd",
    }
    assert metrics["metadata"]["labels"]["app.kubernetes.io/component"] == "etcd-metrics"
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert client["metadata"]["name"] == "c-client"
    assert client["spec"]["selector"] == {"etcd.quorumkeeper.dev/cluster": "c"}
    assert "etcd.quorumkeeper.dev/peer" not in client["metadata"]["labels"]


def test_is_subset_ignores_server_defaults_but_not_changes():
    wanted = render_replicaset("c-1", "ns", SPEC)["spec"]["template"]
    actual = copy.deepcopy(wanted)
    actual["spec"]["dnsPolicy"] = "ClusterFirst"
    actual["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    assert is_subset(wanted, actual)
    actual["spec"]["containers"][0]["image"] = "quay.io/coreos/etcd:v3.5.35"
    assert not is_subset(wanted, actual)
    assert not is_subset({"a": [1, 2]}, {"a": [1]})
    assert is_subset({"port": 2379}, {"port": "2379"})


def running_pod(**overrides):
    pod = {
        "metadata": {"name": "c-0-x", "creationTimestamp": stamp(60)},
        "spec": {"containers": [{"name": "etcd", "image": "quay.io/coreos/etcd:v3.6.99"}]},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.5",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "etcd", "restartCount": 2, "state": {"running": {}}}],
        },
    }
    for key, value in overrides.items():
        pod["status"][key] = value
    return pod


def test_summary_of_a_healthy_pod():
    summary = summarize_pod(running_pod())
    assert summary["ready"] and summary["restarts"] == 2 and summary["problem"] is None
    deleting = running_pod()
    deleting["metadata"]["deletionTimestamp"] = stamp(1)
    assert not summarize_pod(deleting)["ready"], "a terminating pod serves no one"


@pytest.mark.parametrize(
    ("waiting", "reason", "hint"),
    [
        ({"reason": "ErrImagePull", "message": "not found"}, "ImagePullFailed", "spec.version"),
        ({"reason": "ImagePullBackOff"}, "ImagePullFailed", "v3.6.99"),
        ({"reason": "CrashLoopBackOff"}, "MemberCrashLooping", "--previous"),
        ({"reason": "CreateContainerConfigError", "message": "x"}, "MemberPodFailing", "x"),
    ],
)
def test_container_problems_say_what_to_do(waiting, reason, hint):
    pod = running_pod(
        conditions=[{"type": "Ready", "status": "False"}],
        containerStatuses=[{"name": "etcd", "restartCount": 5, "state": {"waiting": waiting}}],
    )
    problem = summarize_pod(pod)["problem"]
    assert problem["reason"] == reason and hint in problem["message"]


def test_unschedulable_pod_is_a_problem():
    pod = running_pod(
        phase="Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu.",
            }
        ],
        containerStatuses=[],
    )
    problem = summarize_pod(pod)["problem"]
    assert problem["reason"] == "PodUnschedulable" and "Insufficient cpu" in problem["message"]


def test_starting_pod_is_no_problem():
    pod = running_pod(
        conditions=[{"type": "Ready", "status": "False"}],
        containerStatuses=[{"name": "etcd", "state": {"waiting": {"reason": "ContainerCreating"}}}],
    )
    assert summarize_pod(pod)["problem"] is None


def claim(phase, age, deleting=False):
    meta = {"name": "c-0", "uid": "u", "creationTimestamp": stamp(age), "annotations": {}}
    if deleting:
        meta["deletionTimestamp"] = stamp(0)
    return {"metadata": meta, "spec": {}, "status": {"phase": phase}}


def test_pvc_summary():
    assert summarize_pvc(None, NOW) == {
        "exists": False,
        "uid": "",
        "phase": "",
        "deleting": False,
        "problem": None,
    }
    bound = summarize_pvc(claim("Bound", 600), NOW)
    assert bound["exists"] and bound["uid"] == "u" and bound["problem"] is None
    assert not bound["annotated"]
    assert summarize_pvc(claim("Pending", 10), NOW)["problem"] is None
    pending = summarize_pvc(claim("Pending", 120), NOW)["problem"]
    assert pending["reason"] == "VolumeNotBound" and "default StorageClass" in pending["message"]
    assert summarize_pvc(claim("Bound", 5, deleting=True), NOW)["deleting"]


def test_replicaset_summary():
    assert summarize_replicaset(None) == {"exists": False, "failure": ""}
    failing = {
        "status": {"conditions": [{"type": "ReplicaFailure", "status": "True", "message": "quota"}]}
    }
    assert summarize_replicaset(failing) == {"exists": True, "failure": "quota"}


def test_never_ran():
    waiting = running_pod(
        containerStatuses=[{"name": "etcd", "state": {"waiting": {"reason": "ErrImagePull"}}}]
    )
    assert never_ran(waiting)
    assert not never_ran(running_pod())
    crashed = running_pod(
        containerStatuses=[
            {
                "name": "etcd",
                "restartCount": 1,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1}},
            }
        ]
    )
    assert not never_ran(crashed), "etcd ran, maybe wrote data: not ours to replace"


# -- members that join one at a time (etcd_member_join) -------------------------------------------


def test_each_joining_member_starts_with_the_initial_cluster_up_to_itself():
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_peer import (
        parse_members,
        spec_up_to,
    )

    hosts = [{"name": f"c-{i}", "host": f"c-{i}.c.ns.svc"} for i in range(5)]
    last = {"clusterName": "c", "bootstrap": {"static": {"initialCluster": hosts}}}
    names = ["c-3", "c-4"]
    first = spec_up_to(last, names, 0)
    assert [e["name"] for e in first["bootstrap"]["static"]["initialCluster"]] == [
        "c-0",
        "c-1",
        "c-2",
        "c-3",
    ]
    assert spec_up_to(last, names, 1) == last
    assert len(last["bootstrap"]["static"]["initialCluster"]) == 5  # not changed in place
    assert parse_members(["c-3=http://c-3.c.ns.svc:2380"]) == [("c-3", "http://c-3.c.ns.svc:2380")]
    with pytest.raises(ValueError, match="is not <name>=<peer URL>"):
        parse_members(["c-3"])
