"""qk_leader_lease: the health watch releases the manager's leader Lease once the manager has
stopped, against a real kube-apiserver."""

from __future__ import annotations

import datetime

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import KubeClient
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_leader_lease import (
    LEASE_PATH,
    held_by_host,
    release_when_stopped,
)
from fakeclock import Clock

NOW = datetime.datetime(2026, 12, 5, 19, 0, 0, 123456, tzinfo=datetime.UTC)


@pytest.fixture
def client(kube_api):
    return KubeClient.from_kubeconfig(str(kube_api.kubeconfig))


def create_lease(client, namespace, holder, transitions=3):
    return client.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "quorumkeeper", "namespace": namespace},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": 15,
                "acquireTime": "2026-12-05T18:00:00.000000Z",
                "renewTime": "2026-12-05T18:59:58.000000Z",
                "leaseTransitions": transitions,
            },
        }
    )


def read_lease(client, namespace):
    return client.request("GET", LEASE_PATH.format(namespace=namespace, name="quorumkeeper"))


def release(client, namespace, hostname="operator-abc", answers=(False,), wait=5.0):
    """Run the release with the manager's probe port answering as ``answers`` says, one answer
    per try (the last one repeats)."""
    clock = Clock()
    tries = []

    def is_open(host, port):
        tries.append((host, port))
        return answers[min(len(tries), len(answers)) - 1]

    outcome = release_when_stopped(
        client,
        namespace,
        "quorumkeeper",
        hostname,
        6789,
        wait,
        is_open=is_open,
        clock=clock,
        sleep=clock.sleep,
        now=lambda: NOW,
    )
    return outcome, tries


def test_identity_is_the_pod_name_and_a_process_uuid():
    lease = {"spec": {"holderIdentity": "operator-abc_5f0e6a8c-1d2e-4f3a-9b8c-7d6e5f4a3b2c"}}
    assert held_by_host(lease, "operator-abc")
    assert not held_by_host(lease, "operator-ab")  # another pod whose name is a prefix
    assert not held_by_host(lease, "")
    assert not held_by_host({"spec": {}}, "operator-abc")
    assert not held_by_host(None, "operator-abc")


def test_released_once_the_manager_stops_as_client_go_releases(client, namespace):
    create_lease(client, namespace, "operator-abc_1234", transitions=3)
    outcome, tries = release(client, namespace, answers=(True, True, False))
    assert outcome == f"Lease {namespace}/quorumkeeper released"
    assert tries == [("127.0.0.1", 6789)] * 3
    spec = read_lease(client, namespace)["spec"]
    # client-go's leader elector reads an empty holder as free to take at its next retry.
    assert spec.get("holderIdentity", "") == ""
    assert spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 3
    assert spec["renewTime"] == spec["acquireTime"] == "2026-12-05T19:00:00.123456Z"


def test_kept_while_the_manager_still_answers(client, namespace):
    create_lease(client, namespace, "operator-abc_1234")
    outcome, tries = release(client, namespace, answers=(True,), wait=5.0)
    assert outcome == "the manager still answers on :6789: Lease quorumkeeper kept"
    assert len(tries) > 1
    assert read_lease(client, namespace)["spec"]["holderIdentity"] == "operator-abc_1234"


def test_a_lease_another_pod_holds_is_not_touched(client, namespace):
    created = create_lease(client, namespace, "operator-new_5678")
    outcome, _ = release(client, namespace)
    assert outcome == f"Lease {namespace}/quorumkeeper held by operator-new_5678: kept"
    assert read_lease(client, namespace) == created


def test_a_lease_taken_between_the_read_and_the_write_is_not_touched(client, kube_api, namespace):
    create_lease(client, namespace, "operator-abc_1234")
    other = KubeClient.from_kubeconfig(str(kube_api.kubeconfig))

    class TakenAfterTheRead:
        """The real API server; another pod takes the Lease right after it is read."""

        def request(self, method, path, body=None):
            answer = client.request(method, path, body=body)
            if method == "GET":
                taken = dict(answer, spec=dict(answer["spec"], holderIdentity="operator-new_5678"))
                other.request("PUT", path, body=taken)
            return answer

    outcome, _ = release(TakenAfterTheRead(), namespace)
    assert outcome == f"Lease {namespace}/quorumkeeper changed meanwhile: kept"
    assert read_lease(client, namespace)["spec"]["holderIdentity"] == "operator-new_5678"


def test_no_lease_no_release(client, namespace):
    outcome, _ = release(client, namespace)
    assert outcome == f"no Lease {namespace}/quorumkeeper"
