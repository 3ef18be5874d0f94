"""etcd's upgrade rules as CEL transition rules of the EtcdCluster CRD, on a real kube-apiserver:
patch versions either way, the minor version up one step at a time (to 3.6 only from 3.5.32 or
later), and down only while etcd's cluster version has not moved (the rollback of an upgrade
that has not finished). The operator checks the same rules against what the members run
(tests/unit/test_upgrade_plan.py): the CRD only sees the spec's previous value."""

from __future__ import annotations

import pytest
from test_crd_validation import accepted, cluster, create, patch, rejected

CLUSTERS = "etcdclusters.etcd.quorumkeeper.dev"
SKIP_MSG = "skips a minor version"
GUIDE_MSG = "requires every member on 3.5.32 or later first"
DOWNGRADE_MSG = "lowers the minor version"


def change_version(api, namespace, version):
    return patch(api, namespace, CLUSTERS, "c", {"spec": {"version": version}})


def set_cluster_version(api, namespace, cluster_version):
    accepted(
        patch(
            api,
            namespace,
            CLUSTERS,
            "c",
            {"status": {"clusterVersion": cluster_version}},
            subresource="status",
        )
    )


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("3.4.23", "3.5.35"),
        ("3.5.35", "3.6.16"),
        ("3.5.32", "3.6.0"),
        ("3.6.15", "3.6.16"),  # patch up
        ("3.6.16", "3.6.15"),  # patch down
        ("3.6.16", "3.6.16-rc.1"),
        ("3.5.35", "3.5.35+build.1"),
    ],
)
def test_allowed_version_changes(kube_api, namespace, before, after):
    accepted(create(kube_api, namespace, cluster(version=before)))
    set_cluster_version(kube_api, namespace, ".".join(before.split(".")[:2]) + ".0")
    accepted(change_version(kube_api, namespace, after))


def test_skipping_a_minor_version_is_rejected_saying_which_to_take(kube_api, namespace):
    accepted(create(kube_api, namespace, cluster(version="3.4.23")))
    set_cluster_version(kube_api, namespace, "3.4.0")
    stderr = rejected(change_version(kube_api, namespace, "3.6.16"), SKIP_MSG, "spec.version")
    assert "set the next minor version (3.5 after 3.4" in stderr


@pytest.mark.parametrize("before", ["3.5.0", "3.5.20", "3.5.31", "3.5.31-rc.0"])
def test_3_6_only_from_3_5_32_or_later(kube_api, namespace, before):
    accepted(create(kube_api, namespace, cluster(version=before)))
    set_cluster_version(kube_api, namespace, "3.5.0")
    rejected(change_version(kube_api, namespace, "3.6.16"), GUIDE_MSG)


def test_a_new_cluster_may_start_on_any_version(kube_api, namespace):
    # The rules compare with the previous spec: a creation has none.
    accepted(create(kube_api, namespace, cluster(version="3.4.1")))


def test_a_cluster_that_never_formed_may_take_any_version(kube_api, namespace):
    # No cluster version reported: no member ever ran, a typo can be corrected any way.
    accepted(create(kube_api, namespace, cluster(version="3.4.99")))
    accepted(change_version(kube_api, namespace, "3.6.16"))
    accepted(change_version(kube_api, namespace, "3.5.20"))


def test_a_minor_downgrade_is_rejected_once_the_cluster_version_moved(kube_api, namespace):
    accepted(create(kube_api, namespace, cluster(version="3.6.16")))
    set_cluster_version(kube_api, namespace, "3.6.0")
    stderr = rejected(change_version(kube_api, namespace, "3.5.35"), DOWNGRADE_MSG)
    assert "cluster version is already 3.6.0" in stderr
    accepted(change_version(kube_api, namespace, "3.6.15"))


def test_an_upgrade_that_has_not_finished_can_be_rolled_back(kube_api, namespace):
    accepted(create(kube_api, namespace, cluster(version="3.5.35")))
    set_cluster_version(kube_api, namespace, "3.5.0")
    accepted(change_version(kube_api, namespace, "3.6.16"))
    # Members still make the cluster version 3.5: going back is a rollback.
    accepted(change_version(kube_api, namespace, "3.5.35"))


def test_a_cluster_that_never_reported_a_version_may_go_back(kube_api, namespace):
    accepted(create(kube_api, namespace, cluster(version="3.6.16")))
    accepted(change_version(kube_api, namespace, "3.5.35"))


def test_status_updates_and_scaling_are_not_held_by_the_version_rules(kube_api, namespace):
    accepted(create(kube_api, namespace, cluster(version="3.6.16")))
    set_cluster_version(kube_api, namespace, "3.6.0")
    accepted(patch(kube_api, namespace, CLUSTERS, "c", {"spec": {"replicas": 5}}))
    set_cluster_version(kube_api, namespace, "3.6.0")


def test_upgrade_timeout_bounds_and_default(kube_api, namespace):
    created = accepted(create(kube_api, namespace, cluster(version="3.6.16", upgrade={})))
    assert created["spec"]["upgrade"]["memberTimeoutSeconds"] == 300
    for bad in (0, 29, 86401):
        rejected(
            patch(
                kube_api,
                namespace,
                CLUSTERS,
                "c",
                {"spec": {"upgrade": {"memberTimeoutSeconds": bad}}},
            ),
            "memberTimeoutSeconds",
        )
    accepted(
        patch(
            kube_api, namespace, CLUSTERS, "c", {"spec": {"upgrade": {"memberTimeoutSeconds": 30}}}
        )
    )
