"""End-to-end fixtures: the operator deployed into the local cluster exactly as in production."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from backuphelpers import moto_server, s3_client
from kubehelpers import CACHE, CLUSTERS, PEERS, ROOT, WaitTimeout, wait_until
from objectstores import object_stores  # noqa: F401 - the session fixture, for every e2e test

OPERATOR_NAMESPACE = "quorumkeeper-system"
API = "etcd.quorumkeeper.dev/v1alpha1"
# What another etcd operator's CRD looks like to kubectl: same kind and plural, another group
# that sorts before ours. Installed for the whole e2e session.
DECOY_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "etcdclusters.etcd-operator.cozystack.io"},
    "spec": {
        "group": "etcd-operator.cozystack.io",
        "names": {
            "kind": "EtcdCluster",
            "listKind": "EtcdClusterList",
            "plural": "etcdclusters",
            "singular": "etcdcluster",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
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


@pytest.fixture(scope="session")
def decoy_crd(local_cluster):
    local_cluster.apply(DECOY_CRD)
    yield DECOY_CRD["metadata"]["name"]
    # pytest-xdist workers share it: hack/test_lanes.py removes it once they have all ended.
    if "PYTEST_XDIST_WORKER" not in os.environ:
        local_cluster.run("delete", "crd", DECOY_CRD["metadata"]["name"], check=False)


@pytest.fixture(scope="session")
def operator(local_cluster, decoy_crd):
    result = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "cluster" / "localcluster.py"), "deploy-operator"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        pytest.fail(f"operator deployment failed:\n{result.stdout}\n{result.stderr}")
    return local_cluster


class EtcdClusterDriver:
    """Create, scale and inspect one EtcdCluster and talk to its etcd through the client Service."""

    def __init__(self, kube, namespace: str, name: str = "e2e", version: str = "3.6.16"):
        self.kube, self.namespace, self.name, self.version = kube, namespace, name, version
        manifest = json.loads((CACHE / "toolchain.json").read_text())
        self.etcdctl_binary = str(Path(manifest["etcd"]["3.6.16"]) / "etcdctl")

    def manifest(self, replicas: int) -> dict:
        return {
            "apiVersion": API,
            "kind": "EtcdCluster",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "replicas": replicas,
                "version": self.version,
                "storage": {
                    "volumeClaimTemplate": {
                        "storageClassName": "local-path",
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "128Mi"}},
                    }
                },
                # A small request so that many members fit on the 3 local nodes; the limit
                # sets GOMAXPROCS (rounded down to 1).
                "podTemplate": {
                    "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1500m"}}
                },
            },
        }

    def create(self, replicas: int = 3) -> None:
        self.kube.apply(self.manifest(replicas))

    def scale(self, replicas: int) -> None:
        self.kube("scale", CLUSTERS, self.name, "-n", self.namespace, f"--replicas={replicas}")

    def patch_spec(self, **fields) -> None:
        patch = json.dumps({"spec": fields})
        self.kube("patch", CLUSTERS, self.name, "-n", self.namespace, "--type=merge", "-p", patch)

    def get(self) -> dict:
        return self.kube.get(CLUSTERS, self.name, self.namespace)

    def condition(self, kind: str) -> dict:
        conditions = self.get().get("status", {}).get("conditions", [])
        return next((c for c in conditions if c["type"] == kind), {})

    def wait_available(self, members: int, timeout: float = 180) -> dict:
        def available():
            cluster = self.get()
            status = cluster.get("status", {})
            conditions = {c["type"]: c for c in status.get("conditions", [])}
            ok = (
                conditions.get("Available", {}).get("status") == "True"
                and len(status.get("members", [])) == members
                and all(m["healthy"] and not m["isLearner"] for m in status["members"])
                and status.get("observedGeneration") == cluster["metadata"]["generation"]
            )
            return ok and status

        try:
            return wait_until(f"{self.name} Available with {members} members", available, timeout)
        except WaitTimeout as timeout_error:
            raise WaitTimeout(f"{timeout_error}\n{self.describe()}") from None

    def describe(self) -> str:
        """What a failed wait needs to be understood: conditions, members, the last Events."""
        try:
            cluster = self.get()
            events = self.kube.run(
                "get",
                "events",
                "-n",
                self.namespace,
                "--sort-by=.lastTimestamp",
                "-o",
                "custom-columns=AT:.lastTimestamp,TYPE:.type,REASON:.reason,"
                "OBJECT:.involvedObject.name,MESSAGE:.message",
                check=False,
            ).stdout
        except (subprocess.SubprocessError, AssertionError) as error:
            return f"(could not describe the cluster: {error})"
        status = cluster.get("status", {})
        lines = [
            f"generation {cluster['metadata']['generation']}, "
            f"observedGeneration {status.get('observedGeneration')}, phase {status.get('phase')}"
        ]
        lines += [
            f"condition {c['type']}={c['status']} {c.get('reason')}: {c.get('message', '')[:300]}"
            for c in status.get("conditions", [])
        ]
        lines += [f"member {json.dumps(m, sort_keys=True)}" for m in status.get("members", [])]
        lines += ["events:", *events.splitlines()[-25:]]
        operator_log = self.kube.run(
            "logs",
            "-n",
            OPERATOR_NAMESPACE,
            "deployment/quorumkeeper-controller-manager",
            "--tail=3000",
            check=False,
            timeout=60,
        ).stdout
        mentions = [
            line[:400]
            for line in operator_log.splitlines()
            if self.namespace in line and "[playbook task start]" not in line
        ]
        lines += ["operator log about this namespace:", *mentions[-15:]]
        lines += self.member_log_tails()
        return "\n".join(lines)

    def member_log_tails(self, lines_per_member: int = 12) -> list[str]:
        """The end of each member's etcd log: when etcd refuses a step (a member add while it
        thinks a peer unreachable, say), only the members say which peer and why, and their logs
        are gone with the test's namespace."""
        try:
            pods = self.pods()
        except (subprocess.SubprocessError, AssertionError) as error:
            return [f"(no member logs: {error})"]
        tails = []
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
            name = pod["metadata"]["name"]
            command = [
                "logs",
                "-n",
                self.namespace,
                name,
                "-c",
                "etcd",
                f"--tail={lines_per_member}",
            ]
            log = self.kube.run(*command, check=False, timeout=30)
            text = log.stdout if log.returncode == 0 else f"(no log: {log.stderr.strip()[:200]})"
            tails += [f"log of {name}:", *(line[:400] for line in text.splitlines())]
        return tails

    def client_endpoint(self) -> str:
        """The client Service's address, once it takes connections: Available means the
        members' pods are ready, and kube-proxy routes to them a moment later (until then it
        refuses connections to the Service)."""
        address = self.client_address()
        wait_until("the client Service to take connections", lambda: takes_connections(address), 30)
        return f"http://{address[0]}:{address[1]}"

    def client_address(self) -> tuple[str, int]:
        service = self.kube.get("service", f"{self.name}-client", self.namespace)
        return service["spec"]["clusterIP"], 2379

    def etcdctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                self.etcdctl_binary,
                # No wait for the Service: callers retry, some while no member serves.
                "--endpoints=http://{}:{}".format(*self.client_address()),
                "--dial-timeout=3s",
                "--command-timeout=5s",
                *args,
            ],
            capture_output=True,
            text=True,
            check=check,
            timeout=30,
        )

    def put(self, key: str, value: str) -> None:
        wait_until(
            f"put {key}", lambda: self.etcdctl("put", key, value, check=False).returncode == 0, 30
        )

    def value(self, key: str) -> str:
        return wait_until(
            f"get {key}",
            lambda: (
                (r := self.etcdctl("get", key, "--print-value-only", check=False)).returncode == 0
                and r.stdout.strip()
            ),
            30,
        )

    def pvc_names(self) -> set[str]:
        items = self.kube.get(
            "pvc", namespace=self.namespace, selector=f"etcd.quorumkeeper.dev/cluster={self.name}"
        )["items"]
        return {p["metadata"]["name"] for p in items if not p["metadata"].get("deletionTimestamp")}

    def pods(self) -> list[dict]:
        return self.kube.get(
            "pods", namespace=self.namespace, selector=f"etcd.quorumkeeper.dev/cluster={self.name}"
        )["items"]

    def pod_of(self, peer: str) -> dict:
        pods = [
            p
            for p in self.pods()
            if p["metadata"]["labels"].get("etcd.quorumkeeper.dev/peer") == peer
            and not p["metadata"].get("deletionTimestamp")
        ]
        assert pods, f"no pod for peer {peer}"
        return pods[0]

    def member_ids(self) -> dict[str, str]:
        return {m["name"]: m["id"] for m in self.get()["status"]["members"]}

    def member(self, name: str) -> dict:
        return next(m for m in self.get()["status"]["members"] if m["name"] == name)

    def peers(self) -> list[dict]:
        return self.kube.get(PEERS, namespace=self.namespace)["items"]

    def event_reasons(self) -> set[str]:
        return {e["reason"] for e in self.kube.events(self.namespace, self.name)}


@pytest.fixture
def etcd_cluster(operator, namespace):
    return EtcdClusterDriver(operator, namespace)


@pytest.fixture(scope="module")
def s3_port():
    """A moto S3 server on this host for the test module, reached by pods through
    backuphelpers.HOST_FROM_PODS; its port."""
    with moto_server() as port:
        yield port


@pytest.fixture
def s3(request, s3_port):
    """A boto3 client of ``s3_port`` with the test module's ``BUCKET`` created; the bucket is
    emptied and deleted afterwards."""
    bucket = request.module.BUCKET
    client = s3_client(s3_port)
    client.create_bucket(Bucket=bucket)
    yield client
    wait_until(
        f"bucket {bucket} emptied and deleted",
        lambda: empty_and_delete_bucket(client, bucket),
        timeout=60,
        interval=1,
    )


def empty_and_delete_bucket(client, bucket: str) -> bool:
    """True once ``bucket`` is gone. A test may end with the operator still writing into it
    (a resumed schedule's next backup lands between the listing and the delete), so a bucket
    that is not empty yet is emptied again on the next try rather than failing the teardown."""
    for obj in client.list_objects_v2(Bucket=bucket).get("Contents", []):
        client.delete_object(Bucket=bucket, Key=obj["Key"])
    try:
        client.delete_bucket(Bucket=bucket)
    except client.exceptions.ClientError as error:
        if error.response.get("Error", {}).get("Code") != "BucketNotEmpty":
            raise
        return False
    return True


@pytest.fixture
def etcd_cluster_without_operator(local_cluster, namespace):
    """A driver for tests that bring their own operator (test_olm.py: installed by OLM)."""
    return EtcdClusterDriver(local_cluster, namespace)


def takes_connections(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=2).close()
    except OSError:
        return False
    return True
