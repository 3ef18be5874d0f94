"""Validation of our CRDs by a real kube-apiserver (see conftest.py: kube_api)."""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
SAMPLES = ROOT / "config" / "samples"
API = "etcd.quorumkeeper.dev/v1alpha1"

REPLICAS_MSG = (
    "replicas must be at least 1; to remove a cluster delete the EtcdCluster (its PVCs are kept)"
)
LEADING_V_MSG = 'version must not start with "v"'
SEMVER_MSG = "version must be a semantic version X.Y.Z"
MAJOR_MSG = "only etcd major version 3 is supported"
RESERVED_MSG = 'reserved prefix "etcd.quorumkeeper.dev/"'
STORAGE_CHANGED_MSG = "the storage class and access modes of the members' volumes are immutable"
SHRINK_MSG = "cannot shrink from 2Gi to"
STORAGE_ADDED_REMOVED_MSG = (
    "storage is immutable after creation: it can be neither added to nor removed"
)


def sample(name: str) -> dict:
    return yaml.safe_load((SAMPLES / f"etcd_v1alpha1_{name}.yaml").read_text())


def cluster(name="c", **spec) -> dict:
    obj = {
        "apiVersion": API,
        "kind": "EtcdCluster",
        "metadata": {"name": name},
        "spec": {"version": "3.6.16"},
    }
    obj["spec"].update(spec)
    return obj


STORAGE = {
    "volumeClaimTemplate": {
        "storageClassName": "local-path",
        "resources": {"requests": {"storage": "1Gi"}},
    }
}


def create(api, ns: str, obj: dict, check: bool = False):
    return api.kubectl(
        "create", "-n", ns, "-f", "-", "-o", "json", input=json.dumps(obj), check=check
    )


def rejected(proc, *messages: str) -> str:
    assert proc.returncode != 0, f"expected a rejection, got: {proc.stdout[:500]}"
    for msg in messages:
        assert msg in proc.stderr, f"{msg!r} not in:\n{proc.stderr}"
    return proc.stderr


def accepted(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}


# -- the CRDs themselves -------------------------------------------------------------------


def test_crds_established_and_structural(kube_api):
    crds = kube_api.get_json("crd")["items"]
    ours = {c["metadata"]["name"]: c for c in crds if c["spec"]["group"] == "etcd.quorumkeeper.dev"}
    assert len(ours) == 5
    for name, crd in ours.items():
        conds = {c["type"]: c for c in crd["status"]["conditions"]}
        assert conds["Established"]["status"] == "True", name
        assert conds["NamesAccepted"]["status"] == "True", name
        assert conds.get("NonStructuralSchema", {}).get("status") != "True", name


def test_short_names_and_categories(kube_api, namespace):
    accepted(create(kube_api, namespace, sample("etcdcluster")))
    accepted(create(kube_api, namespace, sample("etcdpeer")))
    for resource in ("etcdc", "etcdp", "etcd", "quorumkeeper", "all"):
        out = kube_api.kubectl("get", resource, "-n", namespace, "-o", "name").stdout
        if resource in ("etcdc", "etcd", "quorumkeeper", "all"):
            assert "etcdcluster.etcd.quorumkeeper.dev/my-cluster" in out, resource
        if resource in ("etcdp", "etcd", "quorumkeeper"):
            assert "etcdpeer.etcd.quorumkeeper.dev/my-cluster-0" in out, resource
    all_out = kube_api.kubectl("get", "all", "-n", namespace, "-o", "name").stdout
    assert "etcdpeer" not in all_out, "peers are internal: not in the 'all' category"


# -- EtcdCluster -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["etcdcluster", "etcdpeer", "etcdbackup", "etcdbackupschedule", "etcdrestore"]
)
def test_samples_are_accepted(kube_api, namespace, name):
    obj = sample(name)
    stored = accepted(create(kube_api, namespace, obj))
    assert contains(stored["spec"], obj["spec"]), "the API server pruned or changed sample fields"


def contains(got, want) -> bool:
    """True if `got` holds everything in `want` (defaults may add more)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(
            k in got and contains(got[k], v) for k, v in want.items()
        )
    return got == want


def test_sample_cluster_round_trips_unchanged_plus_defaults(kube_api, namespace):
    obj = sample("etcdcluster")
    stored = accepted(create(kube_api, namespace, obj))
    assert stored["spec"] == {**obj["spec"], "paused": False}
    # preserve-unknown-fields keeps the whole affinity
    assert stored["spec"]["podTemplate"]["affinity"] == obj["spec"]["podTemplate"]["affinity"]


def test_defaults(kube_api, namespace):
    stored = accepted(create(kube_api, namespace, cluster()))
    assert stored["spec"]["replicas"] == 3
    assert stored["spec"]["paused"] is False
    assert "repository" not in stored["spec"], "repository defaults in the operator, not the CRD"
    with_storage = accepted(create(kube_api, namespace, cluster("s", storage=STORAGE)))
    assert with_storage["spec"]["storage"]["volumeClaimTemplate"]["accessModes"] == [
        "ReadWriteOnce"
    ]


def test_unknown_fields_are_rejected_or_pruned(kube_api, namespace):
    obj = cluster(replica=3)  # typo
    proc = kube_api.kubectl(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        "--validate=strict",
        input=json.dumps(obj),
        check=False,
    )
    rejected(proc, 'unknown field "spec.replica"')


@pytest.mark.parametrize("replicas", [0, -1, -3])
def test_replicas_below_one_rejected(kube_api, namespace, replicas):
    rejected(create(kube_api, namespace, cluster(replicas=replicas)), REPLICAS_MSG)


@pytest.mark.parametrize("replicas", [8, 9, 100000])
def test_replicas_above_seven_rejected(kube_api, namespace, replicas):
    rejected(
        create(kube_api, namespace, cluster(replicas=replicas)),
        "replicas must be at most 7",
        "etcd advises clusters of at most seven",
    )


@pytest.mark.parametrize("replicas", [1, 5, 7])
def test_replicas_up_to_seven_accepted(kube_api, namespace, replicas):
    accepted(create(kube_api, namespace, cluster(name=f"r{replicas}", replicas=replicas)))


@pytest.mark.parametrize("size", ["-1Gi", "0", 0, "100Mi", "64Mi", 1024, "1k"])
def test_volumes_too_small_for_etcd_rejected(kube_api, namespace, size):
    storage = copy.deepcopy(STORAGE)
    storage["volumeClaimTemplate"]["resources"]["requests"]["storage"] = size
    rejected(
        create(kube_api, namespace, cluster(storage=storage)),
        "the volume size must be at least 128Mi",
    )


@pytest.mark.parametrize("size", ["128Mi", "1Gi", "8Gi", 134217728, "0.5Gi"])
def test_volumes_large_enough_accepted(kube_api, namespace, size):
    storage = copy.deepcopy(STORAGE)
    storage["volumeClaimTemplate"]["resources"]["requests"]["storage"] = size
    name = "s" + str(abs(hash(str(size))) % 10**8)
    accepted(create(kube_api, namespace, cluster(name=name, storage=storage)))


@pytest.mark.parametrize(
    "version,message,not_message",
    [
        ("v3.5.0", LEADING_V_MSG, SEMVER_MSG),
        ("4.0.0", MAJOR_MSG, SEMVER_MSG),
        ("2.3.8", MAJOR_MSG, SEMVER_MSG),
        ("banana", SEMVER_MSG, MAJOR_MSG),
        ("3.5", SEMVER_MSG, MAJOR_MSG),
        ("3.5.0.1", SEMVER_MSG, MAJOR_MSG),
        ("3.05.0", SEMVER_MSG, MAJOR_MSG),
        ("3.5.0-", SEMVER_MSG, MAJOR_MSG),
        ("", "spec.version in body should be at least 1 chars long", MAJOR_MSG),
    ],
)
def test_bad_versions_rejected(kube_api, namespace, version, message, not_message):
    err = rejected(create(kube_api, namespace, cluster(version=version)), message)
    assert not_message not in err, "each mistake should produce only the message that explains it"


@pytest.mark.parametrize(
    "version",
    [
        "3.6.16",
        "3.5.0",
        "3.4.23",
        "3.6.0-rc.1",
        "3.6.0+build.7",
        "3.6.0-alpha.0+git.abc123",
        "3.10.0",
    ],
)
def test_good_versions_accepted(kube_api, namespace, version):
    accepted(
        create(
            kube_api,
            namespace,
            cluster(name="v" + str(abs(hash(version)) % 10**8), version=version),
        )
    )


def test_version_is_required(kube_api, namespace):
    obj = cluster()
    del obj["spec"]["version"]
    rejected(create(kube_api, namespace, obj), "spec.version: Required value")


@pytest.mark.parametrize("name", ["1cluster", "My-Cluster", "a" * 51, "bad.name"])
def test_cluster_names_that_cannot_name_services_rejected(kube_api, namespace, name):
    rejected(
        create(kube_api, namespace, cluster(name=name)),
        "the EtcdCluster name must be a DNS-1035 label",
    )


def test_reserved_annotation_prefix_rejected(kube_api, namespace):
    obj = cluster(
        podTemplate={
            "metadata": {
                "annotations": {"prometheus.io/scrape": "true", "etcd.quorumkeeper.dev/member": "x"}
            }
        }
    )
    rejected(
        create(kube_api, namespace, obj), RESERVED_MSG, "spec.podTemplate.metadata.annotations"
    )
    ok = cluster(
        name="ok",
        podTemplate={
            "metadata": {
                "annotations": {
                    "prometheus.io/scrape": "true",
                    "example.com/etcd.quorumkeeper.dev/x": "y",
                }
            }
        },
    )
    accepted(create(kube_api, namespace, ok))


def test_monitoring_defaults_and_bad_labels_or_interval_rejected(kube_api, namespace):
    made = accepted(create(kube_api, namespace, cluster(name="mon", monitoring={})))
    assert made["spec"]["monitoring"] == {
        "podMonitor": False,
        "prometheusRule": False,
        "scrapeInterval": "30s",
    }
    bad = cluster(
        monitoring={
            "scrapeInterval": "30 seconds",
            "labels": {"bad key!": "x", "app.kubernetes.io/part-of": "y"},
        }
    )
    rejected(
        create(kube_api, namespace, bad),
        "spec.monitoring.scrapeInterval",
        "monitoring.labels keys must be Kubernetes label names",
        "monitoring.labels cannot set etcd.quorumkeeper.dev/ or app.kubernetes.io/ labels",
    )
    rejected(
        create(kube_api, namespace, cluster(monitoring={"labels": {"release": "not a value"}})),
        "spec.monitoring.labels.release",
    )
    good = cluster(
        name="mon-ok",
        monitoring={
            "podMonitor": True,
            "scrapeInterval": "1m30s",
            "labels": {"release": "kube-prometheus-stack", "example.com/team": "etcd"},
        },
    )
    accepted(create(kube_api, namespace, good))


def test_bad_quantities_rejected(kube_api, namespace):
    bad = copy.deepcopy(STORAGE)
    bad["volumeClaimTemplate"]["resources"]["requests"]["storage"] = "lots"
    rejected(
        create(kube_api, namespace, cluster(storage=bad)),
        "spec.storage.volumeClaimTemplate.resources.requests.storage",
    )
    rejected(
        create(
            kube_api,
            namespace,
            cluster(name="r", podTemplate={"resources": {"limits": {"cpu": "one"}}}),
        ),
        "spec.podTemplate.resources.limits.cpu",
    )
    accepted(
        create(
            kube_api,
            namespace,
            cluster(name="n", podTemplate={"resources": {"limits": {"cpu": 2, "memory": "1Gi"}}}),
        )
    )


def test_bad_access_mode_rejected(kube_api, namespace):
    st = copy.deepcopy(STORAGE)
    st["volumeClaimTemplate"]["accessModes"] = ["ReadWriteSometimes"]
    rejected(create(kube_api, namespace, cluster(storage=st)), "supported values")


def patch(api, ns, resource, name, body, kind="merge", subresource=None):
    args = ["patch", "-n", ns, resource, name, "--type", kind, "-p", json.dumps(body)]
    if subresource:
        args += ["--subresource", subresource]
    return api.kubectl(*args, check=False)


def size(quantity):
    return {
        "spec": {
            "storage": {"volumeClaimTemplate": {"resources": {"requests": {"storage": quantity}}}}
        }
    }


def test_storage_grows_and_never_shrinks_below_the_volumes(kube_api, namespace):
    accepted(create(kube_api, namespace, cluster(storage=STORAGE)))
    resource = "etcdclusters.etcd.quorumkeeper.dev"
    accepted(patch(kube_api, namespace, resource, "c", size("2Gi")))
    # Below the size asked before, and no volume size known: refused, naming both sizes.
    rejected(patch(kube_api, namespace, resource, "c", size("1Gi")), SHRINK_MSG)
    rejected(patch(kube_api, namespace, resource, "c", size(1073741824)), SHRINK_MSG)
    # The volumes could not grow (status.volumeSize 1Gi): the growth can be taken back to that
    # size, not below it.
    accepted(
        patch(
            kube_api,
            namespace,
            resource,
            "c",
            {"status": {"volumeSize": "1Gi"}},
            subresource="status",
        )
    )
    rejected(patch(kube_api, namespace, resource, "c", size("512Mi")), "status.volumeSize, 1Gi")
    accepted(patch(kube_api, namespace, resource, "c", size("1Gi")))
    accepted(patch(kube_api, namespace, resource, "c", size("1536Mi")))


def test_access_modes_are_immutable_and_the_class_changes_only_to_a_named_one(kube_api, namespace):
    resource = "etcdclusters.etcd.quorumkeeper.dev"
    accepted(create(kube_api, namespace, cluster(storage=STORAGE)))
    modes = {"volumeClaimTemplate": {"accessModes": ["ReadWriteOncePod"]}}
    rejected(
        patch(kube_api, namespace, resource, "c", {"spec": {"storage": modes}}),
        "the access modes of the members' volumes are immutable",
        "spec.storage",
    )
    # Another named class: the members move to new volumes of it.
    fast = {"volumeClaimTemplate": {"storageClassName": "fast"}}
    accepted(patch(kube_api, namespace, resource, "c", {"spec": {"storage": fast}}))
    removed = [{"op": "remove", "path": "/spec/storage/volumeClaimTemplate/storageClassName"}]
    rejected(
        patch(kube_api, namespace, resource, "c", removed, kind="json"),
        "storageClassName is immutable but for a change to another named class",
        "spec.storage",
    )


def test_client_and_peer_tls_turn_on_and_off_and_own_secrets_change_but_not_who_manages_them(
    kube_api, namespace
):
    resource = "etcdclusters.etcd.quorumkeeper.dev"
    accepted(create(kube_api, namespace, cluster(tls={"peer": {}})))
    # Client TLS on, then off, on a running cluster: members roll through both schemes.
    accepted(patch(kube_api, namespace, resource, "c", {"spec": {"tls": {"client": {}}}}))
    own_client = {"serverSecretName": "mine", "operatorSecretName": "op"}
    rejected(
        patch(kube_api, namespace, resource, "c", {"spec": {"tls": {"client": own_client}}}),
        "spec.tls.client: who manages its certificates, and clientCertAuth, are immutable",
        "spec",
    )
    rejected(
        patch(
            kube_api,
            namespace,
            resource,
            "c",
            {"spec": {"tls": {"client": {"clientCertAuth": False}}}},
        ),
        "spec.tls.client: who manages its certificates, and clientCertAuth, are immutable",
        "spec",
    )
    accepted(patch(kube_api, namespace, resource, "c", {"spec": {"tls": {"client": None}}}))
    rejected(
        patch(kube_api, namespace, resource, "c", {"spec": {"tls": {"peer": {"secretName": "m"}}}}),
        "spec.tls.peer: who manages its certificates is immutable while peer TLS is on",
        "spec",
    )
    # Peer TLS off (all of spec.tls with it), then on with the user's own Secret.
    accepted(patch(kube_api, namespace, resource, "c", {"spec": {"tls": None}}))
    accepted(
        patch(kube_api, namespace, resource, "c", {"spec": {"tls": {"peer": {"secretName": "m"}}}})
    )
    # Another Secret of the user's own: the members are restarted onto it.
    accepted(
        patch(kube_api, namespace, resource, "c", {"spec": {"tls": {"peer": {"secretName": "n"}}}})
    )
    rejected(
        patch(
            kube_api,
            namespace,
            resource,
            "c",
            [{"op": "remove", "path": "/spec/tls/peer/secretName"}],
            kind="json",
        ),
        "spec.tls.peer: who manages its certificates is immutable while peer TLS is on",
        "spec",
    )
    accepted(patch(kube_api, namespace, resource, "c", {"spec": {"tls": {"client": own_client}}}))
    renamed = {"serverSecretName": "mine-2", "operatorSecretName": "op-2"}
    accepted(patch(kube_api, namespace, resource, "c", {"spec": {"tls": {"client": renamed}}}))
    plain = cluster(name="plain")
    accepted(create(kube_api, namespace, plain))
    # A cert-manager issuer instead of the operator's CA, or the user's own Secrets, not both.
    issuer = {"issuerRef": {"name": "ca"}}
    rejected(
        patch(
            kube_api,
            namespace,
            resource,
            "plain",
            {"spec": {"tls": {"peer": {**issuer, "secretName": "m"}}}},
        ),
        "issuerRef and secretName exclude each other",
        "spec.tls.peer",
    )
    accepted(patch(kube_api, namespace, resource, "plain", {"spec": {"tls": {"peer": issuer}}}))
    rejected(
        patch(
            kube_api,
            namespace,
            resource,
            "plain",
            {"spec": {"tls": {"peer": {"issuerRef": {"name": "other"}}}}},
        ),
        "spec.tls.peer: who manages its certificates is immutable",
        "spec",
    )
    rejected(
        patch(
            kube_api,
            namespace,
            resource,
            "plain",
            {"spec": {"tls": {"client": {**issuer, **own_client}}}},
        ),
        "issuerRef and serverSecretName/operatorSecretName exclude each other",
        "spec.tls.client",
    )
    accepted(patch(kube_api, namespace, resource, "plain", {"spec": {"tls": None}}))
    accepted(patch(kube_api, namespace, resource, "plain", {"spec": {"tls": {"client": {}}}}))
    accepted(patch(kube_api, namespace, resource, "plain", {"spec": {"tls": None}}))
    accepted(patch(kube_api, namespace, resource, "plain", {"spec": {"tls": {"peer": {}}}}))


def test_removing_storage_rejected(kube_api, namespace):
    accepted(create(kube_api, namespace, cluster(storage=STORAGE)))
    rejected(
        patch(
            kube_api,
            namespace,
            "etcdclusters.etcd.quorumkeeper.dev",
            "c",
            [{"op": "remove", "path": "/spec/storage"}],
            kind="json",
        ),
        STORAGE_ADDED_REMOVED_MSG,
    )
    rejected(
        patch(
            kube_api,
            namespace,
            "etcdclusters.etcd.quorumkeeper.dev",
            "c",
            {"spec": {"storage": None}},
        ),
        STORAGE_ADDED_REMOVED_MSG,
    )


def test_adding_storage_later_rejected(kube_api, namespace):
    accepted(create(kube_api, namespace, cluster()))
    rejected(
        patch(
            kube_api,
            namespace,
            "etcdclusters.etcd.quorumkeeper.dev",
            "c",
            {"spec": {"storage": STORAGE}},
        ),
        STORAGE_ADDED_REMOVED_MSG,
    )


def test_other_changes_allowed_on_cluster_with_storage(kube_api, namespace):
    accepted(create(kube_api, namespace, sample("etcdcluster")))
    proc = patch(
        kube_api,
        namespace,
        "etcdclusters.etcd.quorumkeeper.dev",
        "my-cluster",
        {
            "spec": {
                "replicas": 5,
                "version": "3.6.17",
                "paused": True,
                "podTemplate": {"resources": {"limits": {"cpu": "2"}}},
            }
        },
    )
    accepted(proc)
    # re-applying the identical storage (same values) is not a change
    accepted(
        patch(
            kube_api,
            namespace,
            "etcdclusters.etcd.quorumkeeper.dev",
            "my-cluster",
            {"spec": {"storage": sample("etcdcluster")["spec"]["storage"]}},
        )
    )


def test_kubectl_scale(kube_api, namespace):
    accepted(create(kube_api, namespace, sample("etcdcluster")))
    out = kube_api.kubectl(
        "scale",
        "-n",
        namespace,
        "etcdclusters.etcd.quorumkeeper.dev",
        "my-cluster",
        "--replicas",
        "5",
    )
    assert "scaled" in out.stdout
    stored = kube_api.get_json("-n", namespace, "etcdclusters.etcd.quorumkeeper.dev", "my-cluster")
    assert stored["spec"]["replicas"] == 5
    scale = kube_api.get_json(
        "-n",
        namespace,
        "etcdclusters.etcd.quorumkeeper.dev",
        "my-cluster",
        "--subresource",
        "scale",
    )
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 5
    # status (written by the operator) flows into the Scale's status
    accepted(
        patch(
            kube_api,
            namespace,
            "etcdclusters.etcd.quorumkeeper.dev",
            "my-cluster",
            {"status": {"replicas": 4, "selector": "etcd.quorumkeeper.dev/cluster=my-cluster"}},
            subresource="status",
        )
    )
    scale = kube_api.get_json(
        "-n",
        namespace,
        "etcdclusters.etcd.quorumkeeper.dev",
        "my-cluster",
        "--subresource",
        "scale",
    )
    assert scale["status"] == {
        "replicas": 4,
        "selector": "etcd.quorumkeeper.dev/cluster=my-cluster",
    }
    rejected(
        kube_api.kubectl(
            "scale",
            "-n",
            namespace,
            "etcdclusters.etcd.quorumkeeper.dev",
            "my-cluster",
            "--replicas",
            "0",
            check=False,
        ),
        REPLICAS_MSG,
    )
    assert (
        kube_api.get_json("-n", namespace, "etcdclusters.etcd.quorumkeeper.dev", "my-cluster")[
            "spec"
        ]["replicas"]
        == 5
    )


def now() -> str:
    return "2026-01-01T00:00:00Z"


def test_printer_columns(kube_api, namespace):
    accepted(create(kube_api, namespace, sample("etcdcluster")))
    accepted(
        patch(
            kube_api,
            namespace,
            "etcdclusters.etcd.quorumkeeper.dev",
            "my-cluster",
            {
                "status": {
                    "replicas": 3,
                    "readyReplicas": 2,
                    "leader": "my-cluster-1",
                    "databaseSize": "412Mi",
                    "quotaUsedPercent": 41,
                    "lastBackup": {
                        "name": "my-cluster-backup",
                        "completionTime": (
                            datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=3)
                        ).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "objectURL": "s3://backups/my-cluster/1.db",
                    },
                    "conditions": [
                        {
                            "type": "Available",
                            "status": "True",
                            "reason": "Quorate",
                            "message": "",
                            "lastTransitionTime": now(),
                        },
                        {
                            "type": "Degraded",
                            "status": "True",
                            "reason": "MemberUnhealthy",
                            "message": "my-cluster-2 is not healthy",
                            "lastTransitionTime": now(),
                        },
                    ],
                }
            },
            subresource="status",
        )
    )
    lines = kube_api.kubectl(
        "get", "-n", namespace, "etcdclusters.etcd.quorumkeeper.dev"
    ).stdout.splitlines()
    assert lines[0].split() == [
        "NAME",
        "READY",
        "REPLICAS",
        "VERSION",
        "AVAILABLE",
        "LEADER",
        "DB",
        "QUOTA",
        "LAST",
        "BACKUP",
        "AGE",
    ]
    assert lines[1].split()[:9] == [
        "my-cluster",
        "2",
        "3",
        "3.6.16",
        "True",
        "my-cluster-1",
        "412Mi",
        "41",
        "3d",
    ]

    accepted(create(kube_api, namespace, sample("etcdpeer")))
    accepted(
        patch(
            kube_api,
            namespace,
            "etcdpeers.etcd.quorumkeeper.dev",
            "my-cluster-0",
            {
                "status": {
                    "ready": True,
                    "serverVersion": "3.6.16",
                    "memberID": "8eca1236bfa86a0a",
                    "podName": "my-cluster-0-abcde",
                }
            },
            subresource="status",
        )
    )
    lines = kube_api.kubectl(
        "get", "-n", namespace, "etcdpeers.etcd.quorumkeeper.dev"
    ).stdout.splitlines()
    assert lines[0].split() == ["NAME", "CLUSTER", "READY", "VERSION", "MEMBER", "AGE"]
    assert lines[1].split()[:5] == [
        "my-cluster-0",
        "my-cluster",
        "true",
        "3.6.16",
        "8eca1236bfa86a0a",
    ]


def test_status_fields_written_by_the_roles_are_kept(kube_api, namespace):
    """Fields missing from the schema are pruned silently: keep what the roles write."""
    accepted(create(kube_api, namespace, sample("etcdpeer")))
    status = {
        "ready": False,
        "podName": "p",
        "pvcUID": "0b5c",
        "memberID": "8eca1236bfa86a0a",
        "serverVersion": "3.6.16",
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "PodNotReady",
                "message": "",
                "lastTransitionTime": now(),
            },
            {
                "type": "DataLost",
                "status": "False",
                "reason": "PersistentVolumeClaimBound",
                "message": "the member runs on its PVC",
                "lastTransitionTime": now(),
            },
        ],
    }
    accepted(
        patch(
            kube_api,
            namespace,
            "etcdpeers.etcd.quorumkeeper.dev",
            "my-cluster-0",
            {"status": status},
            subresource="status",
        )
    )
    assert (
        kube_api.get_json("-n", namespace, "etcdpeers.etcd.quorumkeeper.dev", "my-cluster-0")[
            "status"
        ]
        == status
    )
    # null values are dropped, not rejected
    accepted(
        patch(
            kube_api,
            namespace,
            "etcdpeers.etcd.quorumkeeper.dev",
            "my-cluster-0",
            {"status": {"memberID": None}},
            subresource="status",
        )
    )


def test_status_is_a_subresource(kube_api, namespace):
    accepted(create(kube_api, namespace, sample("etcdcluster")))
    # status in a main-resource update is ignored
    accepted(
        patch(
            kube_api,
            namespace,
            "etcdclusters.etcd.quorumkeeper.dev",
            "my-cluster",
            {"status": {"phase": "X"}},
        )
    )
    assert "status" not in kube_api.get_json(
        "-n", namespace, "etcdclusters.etcd.quorumkeeper.dev", "my-cluster"
    )


def test_status_shape_validated(kube_api, namespace):
    accepted(create(kube_api, namespace, sample("etcdcluster")))
    members = [
        {
            "name": "my-cluster-0",
            "id": "8eca1236bfa86a0a",
            "isLearner": False,
            "isLeader": True,
            "version": "3.6.16",
            "healthy": True,
            "pod": "my-cluster-0-x7k2p",
            "podReady": True,
            "restarts": 2,
        },
        {
            "name": "",
            "id": "51938e7f648adbc2",
            "isLearner": True,
            "isLeader": False,
            "healthy": False,
        },
        {
            "name": "",
            "id": "c1586ccb976e37c7",
            "isLearner": True,
            "isLeader": False,
            "healthy": False,
        },
    ]
    accepted(
        patch(
            kube_api,
            namespace,
            "etcdclusters.etcd.quorumkeeper.dev",
            "my-cluster",
            {
                "status": {
                    "members": members,
                    "clusterVersion": "3.6.0",
                    "leader": "my-cluster-0",
                    "observedGeneration": 1,
                    "phase": "Running",
                    "selector": "a=b",
                }
            },
            subresource="status",
        )
    )
    stored = kube_api.get_json("-n", namespace, "etcdclusters.etcd.quorumkeeper.dev", "my-cluster")
    assert stored["status"]["members"] == members, "unstarted members (empty names) must fit"
    bad = {
        "type": "Available",
        "status": "Maybe",
        "reason": "X",
        "message": "",
        "lastTransitionTime": now(),
    }
    rejected(
        patch(
            kube_api,
            namespace,
            "etcdclusters.etcd.quorumkeeper.dev",
            "my-cluster",
            {"status": {"conditions": [bad]}},
            subresource="status",
        ),
        "status.conditions[0].status",
        "supported values",
    )
    no_reason = {"type": "Available", "status": "True", "message": "", "lastTransitionTime": now()}
    rejected(
        patch(
            kube_api,
            namespace,
            "etcdclusters.etcd.quorumkeeper.dev",
            "my-cluster",
            {"status": {"conditions": [no_reason]}},
            subresource="status",
        ),
        "status.conditions[0].reason: Required value",
    )


# -- EtcdPeer ------------------------------------------------------------------------------------


def peer(name="p-0", **spec) -> dict:
    obj = {
        "apiVersion": API,
        "kind": "EtcdPeer",
        "metadata": {"name": name},
        "spec": {"clusterName": "p", "version": "3.6.16"},
    }
    obj["spec"].update(spec)
    return obj


def test_peer_rules(kube_api, namespace):
    rejected(create(kube_api, namespace, peer(version="v3.6.16")), LEADING_V_MSG)
    rejected(create(kube_api, namespace, peer(version="4.0.0")), MAJOR_MSG)
    rejected(
        create(kube_api, namespace, peer(bootstrap={"initialClusterState": "Joining"})),
        "spec.bootstrap.initialClusterState",
        "supported values",
    )
    rejected(
        create(
            kube_api,
            namespace,
            peer(
                bootstrap={
                    "static": {
                        "initialCluster": [
                            {"name": "p-0", "host": "a"},
                            {"name": "p-0", "host": "b"},
                        ]
                    }
                }
            ),
        ),
        "Duplicate value",
    )
    no_cluster = peer()
    del no_cluster["spec"]["clusterName"]
    rejected(create(kube_api, namespace, no_cluster), "spec.clusterName: Required value")
    rejected(
        create(
            kube_api,
            namespace,
            peer(podTemplate={"metadata": {"annotations": {"etcd.quorumkeeper.dev/x": "y"}}}),
        ),
        RESERVED_MSG,
    )

    accepted(create(kube_api, namespace, peer(storage=STORAGE)))
    rejected(
        patch(
            kube_api,
            namespace,
            "etcdpeers.etcd.quorumkeeper.dev",
            "p-0",
            {"spec": {"clusterName": "q"}},
        ),
        "clusterName is immutable",
    )
    rejected(
        patch(
            kube_api,
            namespace,
            "etcdpeers.etcd.quorumkeeper.dev",
            "p-0",
            {"spec": {"storage": {"volumeClaimTemplate": {"storageClassName": "other"}}}},
        ),
        STORAGE_CHANGED_MSG,
    )
    rejected(
        patch(
            kube_api,
            namespace,
            "etcdpeers.etcd.quorumkeeper.dev",
            "p-0",
            [{"op": "remove", "path": "/spec/storage"}],
            kind="json",
        ),
        STORAGE_ADDED_REMOVED_MSG,
    )
    # the operator changes a peer's version in place during upgrades
    accepted(
        patch(
            kube_api,
            namespace,
            "etcdpeers.etcd.quorumkeeper.dev",
            "p-0",
            {"spec": {"version": "3.6.17"}},
        )
    )


# -- backup / schedule / restore ----------------------------------------------------------------


URL_MSG = "objectURLTemplate must be s3://bucket/key, gs://bucket/key or pvc://claim/path"


def backup(**spec) -> dict:
    base = {"source": {"clusterName": "c"}, "destination": {"objectURLTemplate": "s3://b/k.db"}}
    base.update(spec)
    return {"apiVersion": API, "kind": "EtcdBackup", "metadata": {"name": "b"}, "spec": base}


def test_backup_rules(kube_api, namespace):
    rejected(
        create(kube_api, namespace, backup(source={})),
        "exactly one of source.clusterURL or source.clusterName must be set",
    )
    rejected(
        create(
            kube_api, namespace, backup(source={"clusterName": "c", "clusterURL": "http://c:2379"})
        ),
        "exactly one of",
    )
    rejected(
        create(kube_api, namespace, backup(source={"clusterURL": "c:2379"})),
        "clusterURL must be an http:// or https:// URL",
    )
    for url in (
        "http://minio/b/k",
        "file:///tmp/x",
        "S3://b/k",
        "/b/k",
        # pvc://: a DNS-1123 claim name and a file path (not a directory, no query)
        "pvc://claim",
        "pvc://claim/",
        "pvc://claim/dir/",
        "pvc://Claim/k.db",
        "pvc://-claim/k.db",
        "pvc:///k.db",
        "pvc://claim/k.db?x=1",
    ):
        rejected(
            create(kube_api, namespace, backup(destination={"objectURLTemplate": url})),
            URL_MSG,
        )
    for i, url in enumerate(
        (
            "gs://bucket/{{ .UID }}.db",
            "pvc://etcd-backups/dir/snap.db",
            "pvc://b.k/{{ .ClusterName }}/{{ .Timestamp }}.db",
        )
    ):
        obj = backup(destination={"objectURLTemplate": url})
        obj["metadata"]["name"] = "b" if i == 0 else f"b{i}"
        accepted(create(kube_api, namespace, obj))
    rejected(
        patch(
            kube_api, namespace, "etcdbackup", "b", {"spec": {"source": {"clusterName": "other"}}}
        ),
        "the spec of an EtcdBackup is immutable",
    )


def test_backup_verification_is_on_by_default_and_part_of_the_immutable_spec(kube_api, namespace):
    created = accepted(create(kube_api, namespace, backup()))
    assert created["spec"]["verify"] is True
    rejected(create(kube_api, namespace, backup(verify="yes")), "spec.verify")
    off = backup(verify=False)
    off["metadata"]["name"] = "off"
    assert accepted(create(kube_api, namespace, off))["spec"]["verify"] is False
    rejected(
        patch(kube_api, namespace, "etcdbackup", "off", {"spec": {"verify": True}}),
        "the spec of an EtcdBackup is immutable",
    )
    # The status the operator writes: the Verified condition and what the verification saw.
    verified = {
        "status": {
            "verification": {
                "time": "2026-11-22T08:30:00Z",
                "revision": 21,
                "keys": 20,
                "snapshotHash": 2640164988,
                "seconds": 2.6,
            }
        }
    }
    accepted(patch(kube_api, namespace, "etcdbackup", "b", verified, subresource="status"))
    stored = kube_api.get_json("etcdbackup", "b", "-n", namespace)
    assert stored["status"]["verification"]["snapshotHash"] == 2640164988


def schedule(**spec) -> dict:
    base = {"schedule": "*/5 * * * *", "backupTemplate": backup()["spec"]}
    base.update(spec)
    return {
        "apiVersion": API,
        "kind": "EtcdBackupSchedule",
        "metadata": {"name": "s"},
        "spec": base,
    }


@pytest.mark.parametrize("cron", ["every hour", "* * * *", "@fortnightly", "", "* * * * * * *"])
def test_schedule_bad_cron_rejected(kube_api, namespace, cron):
    rejected(create(kube_api, namespace, schedule(schedule=cron)), "spec.schedule")


def test_schedule_rules(kube_api, namespace):
    for cron in ("0 */6 * * *", "@daily", "30 2 * * 1-5"):
        obj = schedule(schedule=cron)
        obj["metadata"]["name"] = "s" + str(abs(hash(cron)) % 10**6)
        accepted(create(kube_api, namespace, obj))
    rejected(
        create(kube_api, namespace, schedule(retention={"maxBackups": 0})),
        "retention.maxBackups must be at least 1",
    )
    rejected(
        create(
            kube_api,
            namespace,
            schedule(
                backupTemplate={
                    "source": {"clusterName": "c"},
                    "destination": {"objectURLTemplate": "ftp://x"},
                }
            ),
        ),
        URL_MSG,
    )


def test_schedule_every_suspend_deadline_and_max_age(kube_api, namespace):
    for i, cron in enumerate(("@every 10s", "@every 1h30m", "@every\t90m", "0 0 L * *")):
        obj = schedule(schedule=cron)
        obj["metadata"]["name"] = f"ok{i}"
        accepted(create(kube_api, namespace, obj))
    stored = kube_api.get_json("etcdbackupschedules.etcd.quorumkeeper.dev", "ok0", "-n", namespace)
    assert stored["spec"]["suspend"] is False
    assert stored["spec"]["startingDeadlineSeconds"] == 600
    for cron in ("@every 5s", "@every 9999ms"):
        rejected(create(kube_api, namespace, schedule(schedule=cron)), "at least 10s")
    for cron in ("@every", "@every 1d", "@every soon", "@every 10s *", "@hourly * * * *"):
        rejected(create(kube_api, namespace, schedule(schedule=cron)), "spec.schedule")
    rejected(
        create(kube_api, namespace, schedule(startingDeadlineSeconds=5)),
        "spec.startingDeadlineSeconds",
    )
    obj = schedule(retention={"maxBackups": 3, "maxAge": "168h"})
    obj["metadata"]["name"] = "aged"
    accepted(create(kube_api, namespace, obj))
    for age in ("7d", "0s", "-1h", "1 h"):
        rejected(
            create(kube_api, namespace, schedule(retention={"maxAge": age})),
            "retention.maxAge must be a positive duration",
        )
    long_name = schedule()
    long_name["metadata"]["name"] = "s" * 64
    rejected(create(kube_api, namespace, long_name), "at most 63 characters")


def restore(**spec) -> dict:
    base = {
        "source": {"objectURL": "s3://b/k.db"},
        "clusterName": "c",
        "clusterTemplate": {"version": "3.6.16"},
    }
    base.update(spec)
    return {"apiVersion": API, "kind": "EtcdRestore", "metadata": {"name": "r"}, "spec": base}


def test_restore_rules(kube_api, namespace):
    for url in ("https://x/k.db", "pvc://claim/", "pvc://UPPER/k.db"):
        rejected(
            create(kube_api, namespace, restore(source={"objectURL": url})),
            "objectURL must be s3://bucket/key, gs://bucket/key or pvc://claim/path",
        )
    from_claim = restore(source={"objectURL": "pvc://etcd-backups/dir/snap.db"})
    from_claim["metadata"]["name"] = "from-claim"
    accepted(create(kube_api, namespace, from_claim))
    rejected(
        create(kube_api, namespace, restore(clusterTemplate={"version": "v3.6.16"})), LEADING_V_MSG
    )
    rejected(
        create(kube_api, namespace, restore(clusterTemplate={"version": "3.6.16", "replicas": 0})),
        REPLICAS_MSG,
    )
    rejected(create(kube_api, namespace, restore(clusterName="9lives")), "DNS-1035")
    for source in ({}, {"objectURL": "s3://b/k.db", "backupName": "nightly"}):
        rejected(
            create(kube_api, namespace, restore(source=source)),
            "exactly one of source.objectURL or source.backupName must be set",
        )
    from_backup = restore(source={"backupName": "nightly", "credentialsSecret": "s3"})
    from_backup["metadata"]["name"] = "from-backup"
    accepted(create(kube_api, namespace, from_backup))
    stored = accepted(create(kube_api, namespace, restore()))
    assert stored["spec"]["clusterTemplate"]["replicas"] == 3, "same defaults as EtcdCluster"
    rejected(
        patch(kube_api, namespace, "etcdrestore", "r", {"spec": {"clusterName": "d"}}),
        "the spec of an EtcdRestore is immutable",
    )


# -- disaster recovery ------------------------------------------------------------------------


def test_disaster_recovery_is_off_unless_asked_and_its_delay_is_bounded(kube_api, namespace):
    stored = accepted(create(kube_api, namespace, cluster("dr", disasterRecovery={})))
    assert stored["spec"]["disasterRecovery"] == {"enabled": False, "delaySeconds": 60}
    for delay in (-1, 86401):
        proc = create(
            kube_api, namespace, cluster(f"dr{delay + 2}", disasterRecovery={"delaySeconds": delay})
        )
        rejected(proc, "spec.disasterRecovery.delaySeconds")
    on = cluster("dr-on", disasterRecovery={"enabled": True, "delaySeconds": 0})
    assert accepted(create(kube_api, namespace, on))["spec"]["disasterRecovery"]["enabled"]


# -- authentication ---------------------------------------------------------------------------

ROOT_USER_MSG = "root is the operator's user; declare an application user instead"
ONE_KEY_MSG = "a permission names either key (one key) or keyPrefix (every key starting with it)"


def auth_user(name="app", **permission) -> dict:
    return {"users": [{"name": name, "permissions": [{"access": "read", **permission}]}]}


def test_auth_is_on_by_default_and_kept_as_declared(kube_api, namespace):
    auth = {
        "users": [
            {
                "name": "app",
                "permissions": [
                    {"keyPrefix": "/app/", "access": "readwrite"},
                    {"key": "/config", "access": "read"},
                ],
            },
            {"name": "reader-2", "permissions": [{"keyPrefix": "/", "access": "read"}]},
            {"name": "login-only"},
        ]
    }
    stored = accepted(create(kube_api, namespace, cluster("a", auth=auth)))
    assert stored["spec"]["auth"] == {**auth, "enabled": True}
    off = accepted(create(kube_api, namespace, cluster("off", auth={"enabled": False})))
    assert off["spec"]["auth"] == {"enabled": False}


def test_auth_root_cannot_be_declared(kube_api, namespace):
    err = rejected(
        create(kube_api, namespace, cluster(auth=auth_user("root", keyPrefix="/"))),
        ROOT_USER_MSG,
        "spec.auth.users[0].name",
    )
    assert "should match" not in err, "root is a valid name: only the rule explains"


@pytest.mark.parametrize("name", ["App", "app_1", "-app", "app-", "a" * 64, ""])
def test_auth_user_names_that_cannot_name_a_secret_rejected(kube_api, namespace, name):
    rejected(
        create(kube_api, namespace, cluster(auth=auth_user(name, keyPrefix="/"))),
        "spec.auth.users[0].name",
    )


@pytest.mark.parametrize(
    "permission",
    [{}, {"key": "/k", "keyPrefix": "/k/"}],
    ids=["neither", "both"],
)
def test_auth_permission_names_exactly_one_of_key_or_key_prefix(kube_api, namespace, permission):
    rejected(
        create(kube_api, namespace, cluster(auth=auth_user(**permission))),
        ONE_KEY_MSG,
        "spec.auth.users[0].permissions[0]",
    )


def test_auth_permission_access_and_keys_validated(kube_api, namespace):
    rejected(
        create(kube_api, namespace, cluster(auth=auth_user(keyPrefix="/", access="all"))),
        "spec.auth.users[0].permissions[0].access",
        "supported values",
    )
    no_access = {"users": [{"name": "app", "permissions": [{"keyPrefix": "/"}]}]}
    rejected(
        create(kube_api, namespace, cluster(auth=no_access)),
        "spec.auth.users[0].permissions[0].access: Required value",
    )
    rejected(
        create(kube_api, namespace, cluster(auth=auth_user(key=""))),
        "spec.auth.users[0].permissions[0].key",
    )
    twice = {"users": [{"name": "app"}, {"name": "app"}]}
    rejected(create(kube_api, namespace, cluster(auth=twice)), "Duplicate value")


# -- etcd options ------------------------------------------------------------------------------

ELECTION_MSG = "electionTimeoutMs must be at least 5 times heartbeatIntervalMs"
QUOTA_VOLUME_MSG = "spec.options.quotaBackendBytes must be smaller than each member's volume"
LARGE_QUOTA_MSG = "set allowLargeQuota to true to use it anyway"


def test_options_are_kept_as_declared_with_the_compaction_mode_defaulted(kube_api, namespace):
    options = {
        "quotaBackendBytes": "768Mi",
        "autoCompaction": {"retention": "1h30m"},
        "snapshotCount": 50000,
        "heartbeatIntervalMs": 200,
        "electionTimeoutMs": 2000,
        "maxRequestBytes": "4Mi",
        "maxTxnOps": 1024,
        "logLevel": "warn",
        "metrics": "extensive",
    }
    stored = accepted(create(kube_api, namespace, cluster("o", storage=STORAGE, options=options)))
    assert stored["spec"]["options"] == {
        **options,
        "autoCompaction": {"mode": "periodic", "retention": "1h30m"},
    }
    revisions = {"autoCompaction": {"mode": "revision", "retention": "10000"}}
    accepted(create(kube_api, namespace, cluster("r", options=revisions)))


@pytest.mark.parametrize(
    "timing",
    [
        {"heartbeatIntervalMs": 200, "electionTimeoutMs": 999},
        {"electionTimeoutMs": 400},  # etcd's default heartbeat is 100
        {"heartbeatIntervalMs": 250},  # etcd's default election timeout is 1000
    ],
    ids=["both", "election-only", "heartbeat-only"],
)
def test_election_timeout_below_five_heartbeats_rejected(kube_api, namespace, timing):
    rejected(create(kube_api, namespace, cluster(options=timing)), ELECTION_MSG)


def test_quota_must_fit_the_volume(kube_api, namespace):
    for quota in ("1Gi", "2Gi", 1073741824):
        rejected(
            create(
                kube_api, namespace, cluster(storage=STORAGE, options={"quotaBackendBytes": quota})
            ),
            QUOTA_VOLUME_MSG,
        )
    accepted(
        create(
            kube_api,
            namespace,
            cluster("q", storage=STORAGE, options={"quotaBackendBytes": 600 << 20}),
        )
    )


def test_growing_the_volumes_or_quota_for_space_needs_storage_and_quantities(kube_api, namespace):
    needs_storage = (
        "spec.maintenance.spaceRecovery grows the members' volumes or the quota within them: it "
        "needs spec.storage"
    )
    for limit in ("maxVolumeSize", "maxQuotaBackendBytes"):
        policy = {"spaceRecovery": {limit: "8Gi"}}
        rejected(create(kube_api, namespace, cluster(maintenance=policy)), needs_storage)
        bad = {"spaceRecovery": {limit: "eight gigs"}}
        rejected(
            create(kube_api, namespace, cluster(storage=STORAGE, maintenance=bad)), "should match"
        )
    policy = {"spaceRecovery": {"maxVolumeSize": "8Gi", "maxQuotaBackendBytes": "2Gi"}}
    stored = accepted(
        create(kube_api, namespace, cluster("g", storage=STORAGE, maintenance=policy))
    )
    assert stored["spec"]["maintenance"]["spaceRecovery"] == policy["spaceRecovery"]


def test_quota_above_eight_gibibytes_needs_saying_so(kube_api, namespace):
    large = {"quotaBackendBytes": "10Gi"}
    rejected(create(kube_api, namespace, cluster(options=large)), LARGE_QUOTA_MSG)
    accepted(create(kube_api, namespace, cluster("l", options={**large, "allowLargeQuota": True})))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"quotaBackendBytes": "1Mi"}, "at least 16Mi"),
        ({"quotaBackendBytes": "lots"}, "spec.options.quotaBackendBytes"),
        ({"maxRequestBytes": "128Mi"}, "between 1Ki and 64Mi"),
        ({"autoCompaction": {"mode": "revision", "retention": "5m"}}, "number of revisions"),
        ({"autoCompaction": {"retention": "five minutes"}}, "a duration (e.g. 5m, 1h30m)"),
        (
            {"autoCompaction": {"mode": "hourly", "retention": "1"}},
            "spec.options.autoCompaction.mode",
        ),
        ({"autoCompaction": {"mode": "periodic"}}, "spec.options.autoCompaction.retention"),
        ({"snapshotCount": 10}, "spec.options.snapshotCount"),
        ({"maxTxnOps": 0}, "spec.options.maxTxnOps"),
        ({"logLevel": "verbose"}, "spec.options.logLevel"),
        ({"compactEverything": True}, "compactEverything"),
    ],
    ids=[
        "tiny-quota",
        "not-a-quantity",
        "huge-request",
        "revision-as-duration",
        "bad-duration",
        "unknown-mode",
        "no-retention",
        "tiny-snapshot-count",
        "no-transactions",
        "unknown-log-level",
        "unknown-field",
    ],
)
def test_bad_options_rejected(kube_api, namespace, options, message):
    rejected(create(kube_api, namespace, cluster(options=options)), message)


@pytest.mark.parametrize(
    "thresholds, message",
    [
        ({"minReclaim": "-64Mi"}, "spec.maintenance.defragmentation.thresholds.minReclaim"),
        ({"minReclaim": -1}, "spec.maintenance.defragmentation.thresholds.minReclaim"),
        ({"minReclaim": "a lot"}, "spec.maintenance.defragmentation.thresholds.minReclaim"),
        ({"volumeUsedPercent": 0}, "thresholds.volumeUsedPercent"),
        ({"volumeUsedPercent": 101}, "thresholds.volumeUsedPercent"),
        ({"quotaUsedPercent": 0}, "thresholds.quotaUsedPercent"),
        ({"fragmentedPercent": 101}, "thresholds.fragmentedPercent"),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else "",
)
def test_bad_defragmentation_thresholds_rejected(kube_api, namespace, thresholds, message):
    maintenance = {"defragmentation": {"thresholds": thresholds}}
    rejected(create(kube_api, namespace, cluster(maintenance=maintenance)), message)


def test_defragmentation_thresholds_take_their_defaults(kube_api, namespace):
    maintenance = {"defragmentation": {"thresholds": {"minReclaim": "128Mi"}}}
    created = accepted(create(kube_api, namespace, cluster("d", maintenance=maintenance)))
    assert created["spec"]["maintenance"]["defragmentation"]["thresholds"] == {
        "enabled": True,
        "fragmentedPercent": 50,
        "quotaUsedPercent": 80,
        "volumeUsedPercent": 80,
        "minReclaim": "128Mi",
    }
