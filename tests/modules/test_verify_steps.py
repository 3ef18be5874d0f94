"""The verification pod's steps (qk_verify.render_pod) and a restore pod's
(qk_restore_render.render_restore_pod), run exactly as rendered but as host processes with real
etcd 3.4/3.5/3.6 binaries and a real S3 server (moto): the command lines of every container are
checked against each etcd version without a Kubernetes cluster. The e2e tests run the same pods
on the local cluster."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import time

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.filter.etcd import etcd_peer_member
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    ConnectionProfile,
    etcd_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_helper_pods import (
    container_failure,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan import etcd_cluster_plan
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_restore_observe import (
    resolve_source,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_restore_render import (
    render_restore_pod,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_verify import (
    container_failed,
    judge,
    parse_snapshot_status,
    render_pod,
)

import etcdharness

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "verify-key", "AWS_SECRET_ACCESS_KEY": "verify-secret"}
BUCKET = "verify"


def take_backup(run_module, cluster, s3_endpoint, key):
    """An EtcdBackup as the role records it, from a real etcd_snapshot run."""
    url = f"s3://{BUCKET}/{key}?endpoint={s3_endpoint}&region=us-east-1"
    res = run_module(
        "etcd_snapshot",
        {"endpoints": cluster.running_endpoints(), "object_url": url, "credentials": CREDENTIALS},
    )
    assert not res["failed"], res.get("msg")
    return res, {
        "apiVersion": "etcd.quorumkeeper.dev/v1alpha1",
        "kind": "EtcdBackup",
        "metadata": {"name": "b", "namespace": "ns", "uid": "1234567890"},
        "spec": {
            "source": {"clusterURL": cluster.running_endpoints()[0]},
            "destination": {"objectURLTemplate": url, "credentialsSecret": "creds"},
        },
        "status": {
            "phase": "Completed",
            "objectURL": res["object_url"],
            "sha256": res["sha256"],
            "etcdVersion": res["etcd_version"],
            "revision": res["revision"],
            "keys": res["keys"],
        },
    }


class LocalPod:
    """Runs a rendered pod's containers as processes: volume paths, the image's /usr/local/bin,
    the operator image's plugins and the loopback peer port are mapped onto this host."""

    def __init__(self, pod, etcd_version, tmp_path, client_port):
        self.pod, self.base = pod, tmp_path
        self.bin_dir = etcdharness.etcd_binary(etcd_version).parent
        self.client_port = client_port
        creds = tmp_path / "store"
        creds.mkdir()
        for key, value in CREDENTIALS.items():
            (creds / key).write_text(value)
        for volume in ("snapshot", "scratch", "data"):
            (tmp_path / volume).mkdir()
        self.paths = {
            "/var/lib/etcd": str(tmp_path / "data"),
            "/var/run/secrets/quorumkeeper/store": str(creds),
            "/opt/ansible/collections": str(etcdharness.REPO / "collections"),
            "/usr/local/bin": str(self.bin_dir),
            "/snapshot": str(tmp_path / "snapshot"),
            "/scratch": str(tmp_path / "scratch"),
            "127.0.0.1:2380": f"127.0.0.1:{etcdharness.free_port()}",
            "$(POD_IP)": "127.0.0.1",
        }
        self.logs = {}
        self.etcd = None

    def map_path(self, value):
        for old, new in self.paths.items():
            if old.startswith("/") and (value == old or value.startswith(old + "/")):
                return new + value[len(old) :]
        return value

    def argv(self, container):
        out = []
        for arg in container["command"]:
            for old, new in self.paths.items():
                # Paths are mapped where they start an argument or a --flag= value only.
                arg = re.sub(rf"(^|=){re.escape(old)}(?=/|$)", lambda m, n=new: m[1] + n, arg)
                if not old.startswith("/"):
                    arg = arg.replace(old, new)
            out.append(sys.executable if arg == "python3" else arg)
        return out

    def env(self, container):
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.base)}
        env.update(
            {e["name"]: self.map_path(e["value"]) for e in container.get("env", []) if "value" in e}
        )
        return env

    def run_init(self, containers=None):
        """Run the init containers (or ``containers``) in order; the pod as its status would
        show them."""
        statuses = []
        for container in containers or self.pod["spec"]["initContainers"]:
            done = subprocess.run(
                self.argv(container),
                env=self.env(container),
                capture_output=True,
                text=True,
                timeout=120,
            )
            self.logs[container["name"]] = done.stdout + done.stderr
            statuses.append(
                {
                    "name": container["name"],
                    "state": {"terminated": {"exitCode": done.returncode}},
                }
            )
            if done.returncode:
                break
        return {"status": {"initContainerStatuses": statuses}}

    def start_etcd(self):
        (container,) = self.pod["spec"]["containers"]
        log = open(self.base / "etcd.log", "wb")  # noqa: SIM115 - closed with the process
        self.etcd = subprocess.Popen(
            self.argv(container), env=self.env(container), stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        return f"http://127.0.0.1:{self.client_port}"

    def stop(self):
        if self.etcd and self.etcd.poll() is None:
            self.etcd.kill()
            self.etcd.wait(10)


@pytest.fixture
def local_pod(tmp_path):
    pods = []

    def make(backup, etcd_version):
        port = etcdharness.free_port()
        pod = render_pod(backup, "operator-image", f"etcd:v{etcd_version}", client_port=port)
        pods.append(LocalPod(pod, etcd_version, tmp_path, port))
        return pods[-1]

    yield make
    for pod in pods:
        pod.stop()


def served(endpoint, recorded_revision, deadline=30):
    end = time.monotonic() + deadline
    while True:
        try:
            with etcd_client(ConnectionProfile([endpoint], timeout=2)) as client:
                keys, revision = client.key_count(endpoint)
                at_recorded, _ = client.key_count(endpoint, recorded_revision)
                return {"revision": revision, "keys": keys}, at_recorded
        except Exception:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def test_snapshot_records_the_key_count_at_its_revision(etcd_factory, run_module, s3, s3_endpoint):
    cluster = etcd_factory(1)
    with etcd_client(ConnectionProfile(cluster.running_endpoints(), timeout=5)) as client:
        for i in range(12):
            client.put(f"/k/{i}", "v")
    res, _ = take_backup(run_module, cluster, s3_endpoint, "count.db")
    assert res["keys"] == 12
    assert res["revision"] == 13


def test_verification_steps_restore_and_serve_the_backup(
    etcd_factory, etcd_version, run_module, s3, s3_endpoint, local_pod
):
    cluster = etcd_factory(3)
    with etcd_client(ConnectionProfile(cluster.running_endpoints(), timeout=5)) as client:
        for i in range(40):
            client.put(f"/data/{i:03d}", f"value-{i}")
    res, backup = take_backup(run_module, cluster, s3_endpoint, f"{etcd_version}.db")
    assert res["keys"] == 40
    with etcd_client(ConnectionProfile(cluster.running_endpoints(), timeout=5)) as client:
        client.put("/after/the/backup", "not in the snapshot")

    pod = local_pod(backup, etcd_version)
    state = pod.run_init()
    assert container_failure(state) is None, pod.logs
    snapshot = parse_snapshot_status(pod.logs["status"])
    assert snapshot is not None, pod.logs["status"]
    now, at_recorded = served(pod.start_etcd(), res["revision"])
    assert judge(snapshot, now, res["revision"], res["keys"], at_recorded) is None
    assert now["keys"] == 40 and at_recorded == 40
    assert now["revision"] == snapshot["revision"] >= res["revision"]
    with etcd_client(
        ConnectionProfile([f"http://127.0.0.1:{pod.client_port}"], timeout=5)
    ) as client:
        assert client.get("/data/007") == b"value-7"
        assert client.get("/after/the/backup") is None


def test_a_damaged_snapshot_with_a_matching_sha256_is_refused_by_etcds_own_hash(
    etcd_factory, etcd_version, run_module, s3, s3_endpoint, local_pod
):
    """The store's copy is damaged and its recorded SHA-256 was rewritten to match (what a
    tampered object looks like): fetch passes; etcd's integrity hash in the snapshot does not."""
    cluster = etcd_factory(1)
    with etcd_client(ConnectionProfile(cluster.running_endpoints(), timeout=5)) as client:
        for i in range(20):
            client.put(f"/data/{i}", "v" * 100)
    _, backup = take_backup(run_module, cluster, s3_endpoint, "damaged.db")
    body = bytearray(s3.get_object(Bucket=BUCKET, Key="damaged.db")["Body"].read())
    body[len(body) // 2] ^= 0x01
    s3.put_object(Bucket=BUCKET, Key="damaged.db", Body=bytes(body))
    backup["status"]["sha256"] = hashlib.sha256(bytes(body)).hexdigest()

    pod = local_pod(backup, etcd_version)
    failed = container_failure(pod.run_init())
    assert failed is not None and failed["container"] in ("status", "restore"), pod.logs
    verdict = container_failed(
        failed,
        pod.logs[failed["container"]],
        {"object_url": backup["status"]["objectURL"], "version": etcd_version, "pod": "p"},
    )
    assert verdict["reason"] in ("SnapshotCorrupt", "RestoreFailed")
    assert not verdict["retryable"]


def test_fetch_step_refuses_bytes_other_than_the_recorded_ones(
    etcd_factory, etcd_version, run_module, s3, s3_endpoint, local_pod
):
    cluster = etcd_factory(1)
    _, backup = take_backup(run_module, cluster, s3_endpoint, "other.db")
    backup["status"]["sha256"] = "0" * 64
    pod = local_pod(backup, etcd_version)
    failed = container_failure(pod.run_init())
    assert failed["container"] == "fetch" and failed["exit_code"] == 3, pod.logs
    verdict = container_failed(
        failed,
        pod.logs["fetch"],
        {"object_url": backup["status"]["objectURL"], "version": etcd_version, "pod": "p"},
    )
    assert verdict["reason"] == "SHA256Mismatch"
    assert "0" * 64 in verdict["message"]


def test_restore_pod_steps_skip_etcds_hash_for_a_verified_backup_and_restore_it(
    etcd_factory, etcd_version, run_module, s3, s3_endpoint, tmp_path
):
    """A restore from a Verified backup runs ``snapshot restore --skip-hash-check`` (its fetch
    holds the bytes to the verified SHA-256): the member's data dir is still the snapshot, its
    integrity hash cut off as without the flag, on every etcd version."""
    cluster = etcd_factory(1)
    with etcd_client(ConnectionProfile(cluster.running_endpoints(), timeout=5)) as client:
        for i in range(30):
            client.put(f"/data/{i:03d}", f"value-{i}")
    res, backup = take_backup(run_module, cluster, s3_endpoint, f"restore-{etcd_version}.db")
    backup["status"]["conditions"] = [{"type": "Verified", "status": "True", "reason": "Verified"}]
    template = {
        "replicas": 1,
        "version": etcd_version,
        "storage": {"volumeClaimTemplate": {"resources": {"requests": {"storage": "128Mi"}}}},
    }
    restore = {
        "apiVersion": "etcd.quorumkeeper.dev/v1alpha1",
        "kind": "EtcdRestore",
        "metadata": {"name": "r", "namespace": "ns", "uid": "0123456789abcdef"},
        "spec": {"source": {"backupName": "b"}, "clusterName": "c", "clusterTemplate": template},
    }
    source = resolve_source(restore, backup)
    assert source["checked_by_etcd"] and source["sha256"] == res["sha256"]
    initial = etcd_cluster_plan({"cluster": "c", "replicas": 1, "peers": [], "etcd": {}})[
        "initial_cluster"
    ]
    naming = {"cluster": "c", "namespace": "ns", "domain": "cluster.local", "repository": "etcd"}
    member = etcd_peer_member(initial[0], template, "New", initial, naming)
    pod = render_restore_pod(
        restore,
        member["name"],
        member["spec"],
        {"client_port": 2379, "peer_port": 2380},
        "operator-image",
        source["object_url"],
        source["sha256"],
        "creds",
        checked_by_etcd=source["checked_by_etcd"],
    )
    (restore_container,) = pod["spec"]["containers"]
    assert "--skip-hash-check" in restore_container["command"]
    (tmp_path / "pod").mkdir()
    local = LocalPod(pod, etcd_version, tmp_path / "pod", etcdharness.free_port())
    state = local.run_init(pod["spec"]["initContainers"] + pod["spec"]["containers"])
    assert container_failure(state) is None, local.logs

    data_dir = tmp_path / "pod" / "data" / "data"
    database = data_dir / "member" / "snap" / "db"
    assert database.stat().st_size % 512 == 0  # the 32-byte integrity hash was cut off
    endpoint = f"http://127.0.0.1:{local.client_port}"
    log = open(tmp_path / "restored.log", "wb")  # noqa: SIM115 - closed with the process
    restored = subprocess.Popen(
        [
            str(etcdharness.etcd_binary(etcd_version)),
            f"--name={member['name']}",
            f"--data-dir={data_dir}",
            f"--listen-client-urls={endpoint}",
            f"--advertise-client-urls={endpoint}",
            f"--listen-peer-urls=http://127.0.0.1:{etcdharness.free_port()}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    try:
        now, at_recorded = served(endpoint, res["revision"])
        assert now["keys"] == at_recorded == 30
        with etcd_client(ConnectionProfile([endpoint], timeout=5)) as client:
            assert client.get("/data/029") == b"value-29"
    finally:
        restored.kill()
        restored.wait(10)
