"""EtcdRestore through the deployed operator: a live cluster is backed up to a real S3 server
(moto on this host, reached by the operator and the restore pods over the pod network) and
restored into a new cluster whose keys, values and revision equal the snapshot's, and which
then scales like any other; refusals touch nothing; an operator killed mid-restore converges."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import time

import pytest
from backuphelpers import KEYS, SECRET, backup_manifest, credentials_secret, object_url, wait_backup
from kubehelpers import CACHE, CLUSTERS, ROOT, running_operator_pod, wait_until

sys.path.insert(0, str(ROOT / "hack" / "cluster"))
import faults  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1200)]

RESTORES = "etcdrestores.etcd.quorumkeeper.dev"
OPERATOR_NAMESPACE = "quorumkeeper-system"
BUCKET = "etcd-restores"
RESTORE_KEY = "etcd.quorumkeeper.dev/restore"


@pytest.fixture
def cluster_named(etcd_cluster):
    """Drivers of more clusters in the test's namespace (the e2e conftest's driver class)."""

    def make(name, version="3.6.16"):
        return type(etcd_cluster)(etcd_cluster.kube, etcd_cluster.namespace, name, version)

    return make


def backup_of(driver, name, port):
    """An EtcdBackup of ``driver``'s cluster, Completed; its status."""
    template = object_url(BUCKET, port, f"{{{{ .Namespace }}}}/{name}.db")
    driver.kube.apply(
        backup_manifest(name, {"clusterName": driver.name}, template), namespace=driver.namespace
    )
    return wait_backup(driver.kube, driver.namespace, name, "Completed", 180)


def restore(name, cluster, template, source):
    return {
        "apiVersion": "etcd.quorumkeeper.dev/v1alpha1",
        "kind": "EtcdRestore",
        "metadata": {"name": name},
        "spec": {"source": source, "clusterName": cluster, "clusterTemplate": template},
    }


def wait_restore(kube, namespace, name, phase, timeout=300):
    def reached():
        status = kube.get(RESTORES, name, namespace).get("status") or {}
        if status.get("phase") == phase:
            return status
        if phase != "Failed" and status.get("phase") == "Failed":
            failed = next(c for c in status["conditions"] if c["type"] == "Failed")
            raise AssertionError(f"EtcdRestore {name} failed: {failed['message']}")
        return None

    return wait_until(f"EtcdRestore {name} {phase}", reached, timeout, interval=1)


def failed_condition(status):
    return next(c for c in status["conditions"] if c["type"] == "Failed")


def keyspace(driver):
    """Every key with its value and revisions, as etcd reports them."""
    result = driver.etcdctl("get", "", "--prefix", "-w", "json")
    kvs = json.loads(result.stdout).get("kvs", [])
    return {
        base64.b64decode(kv["key"]).decode(): (
            base64.b64decode(kv.get("value", "")).decode(),
            kv["create_revision"],
            kv["mod_revision"],
            kv["version"],
        )
        for kv in kvs
    }


def revision(driver):
    return json.loads(driver.etcdctl("get", "none", "-w", "json").stdout)["header"]["revision"]


def snapshot_revision(s3, key, version, tmp_path):
    """The revision etcd's own tool reads from the stored snapshot."""
    path = tmp_path / "snapshot.db"
    path.write_bytes(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    tool = "etcdutl" if version >= "3.5" else "etcdctl"
    checked = subprocess.run(
        [str(CACHE / f"bin/etcd-v{version}" / tool), "snapshot", "status", str(path), "-w", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"},
    )
    return json.loads(checked.stdout)["revision"]


def restore_pods(kube, namespace):
    return kube.get("pods", namespace=namespace, selector=RESTORE_KEY)["items"]


def test_restore_from_a_backup_into_a_new_cluster_that_scales(
    etcd_cluster, cluster_named, s3, s3_port, tmp_path
):
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    kube.apply(credentials_secret(), namespace=ns)
    etcd_cluster.create(3)
    etcd_cluster.wait_available(3)
    for i in range(20):
        etcd_cluster.put(f"/restore/{i}", f"v{i}")
    etcd_cluster.put("/restore/0", "overwritten")
    etcd_cluster.etcdctl("del", "/restore/19")
    source_keys, source_revision = keyspace(etcd_cluster), revision(etcd_cluster)
    backup = backup_of(etcd_cluster, "before", s3_port)
    assert backup["revision"] == source_revision
    stored_revision = snapshot_revision(s3, f"{ns}/before.db", "3.6.16", tmp_path)
    assert stored_revision == source_revision

    template = etcd_cluster.manifest(3)["spec"]
    started = time.monotonic()
    kube.apply(restore("again", "restored", template, {"backupName": "before"}), namespace=ns)
    status = wait_restore(kube, ns, "again", "Completed", timeout=300)
    seconds = time.monotonic() - started
    print(f"\nrestore of 3 members: EtcdRestore created -> Completed in {seconds:.1f}s")

    assert status["revision"] == stored_revision
    assert status["sha256"] == backup["sha256"] and status["objectURL"] == backup["objectURL"]
    assert status["startTime"] <= status["completionTime"]
    restored = cluster_named("restored")
    restored_status = restored.wait_available(3, timeout=60)
    # Spread as a created cluster is: the restore pods placed the volumes, and so the members.
    nodes = {
        m["name"]: restored.pod_of(m["name"])["spec"]["nodeName"]
        for m in restored_status["members"]
    }
    assert len(set(nodes.values())) == 3, f"the local cluster has 3 nodes: {nodes}"
    assert keyspace(restored) == source_keys
    assert revision(restored) == stored_revision
    cluster = restored.get()
    uid = kube.get(RESTORES, "again", ns)["metadata"]["uid"]
    assert cluster["metadata"]["annotations"][RESTORE_KEY] == uid
    assert "ownerReferences" not in cluster["metadata"], "the cluster must outlive the restore"
    assert restored.pvc_names() == {"restored-0", "restored-1", "restored-2"}
    wait_until("the restore pods deleted", lambda: not restore_pods(kube, ns), 60)
    reasons = {e["reason"] for e in kube.events(ns, "again")}
    assert {"RestoreStarted", "VolumesCreated", "ClusterCreated", "RestoreCompleted"} <= reasons
    assert all(v not in json.dumps(status) for v in KEYS.values()), "credentials in the status"

    # From here on it is a cluster like any other.
    restored.put("/after", "restore")
    restored.scale(4)
    restored.wait_available(4, timeout=240)
    assert restored.value("/restore/0") == "overwritten"
    assert restored.value("/after") == "restore"
    assert kube.get(RESTORES, "again", ns)["status"]["phase"] == "Completed"


def test_refusals_touch_nothing(etcd_cluster, s3, s3_port):
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    kube.apply(credentials_secret(), namespace=ns)
    template = etcd_cluster.manifest(3)["spec"]
    # A stored object whose bytes are not those its sha256 metadata names (corrupted, truncated).
    s3.put_object(
        Bucket=BUCKET, Key="corrupt.db", Body=b"not a snapshot" * 100, Metadata={"sha256": "0" * 64}
    )
    # An existing cluster (paused: nothing runs) and a PVC named like another cluster's member.
    existing = etcd_cluster.manifest(3)
    existing["spec"]["paused"] = True
    kube.apply(existing, namespace=ns)
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "taken-1"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "128Mi"}},
            },
        },
        namespace=ns,
    )
    pvc_uid = kube.get("pvc", "taken-1", ns)["metadata"]["uid"]
    good = {"objectURL": object_url(BUCKET, s3_port, "corrupt.db"), "credentialsSecret": SECRET}
    cases = {
        # name: (cluster, source, reason, words in the message)
        "onto-existing": ("e2e", good, "ClusterExists", "already exists"),
        "onto-volumes": ("taken", good, "VolumesExist", "taken-1"),
        "corrupt": ("fresh", good, "SnapshotHashMismatch", "0" * 64),
        "no-object": (
            "fresh2",
            {"objectURL": object_url(BUCKET, s3_port, "absent.db"), "credentialsSecret": SECRET},
            "ObjectUnreadable",
            "NoSuchKey",
        ),
        "no-bucket": (
            "fresh3",
            {
                "objectURL": object_url("no-such-bucket", s3_port, "x.db"),
                "credentialsSecret": SECRET,
            },
            "ObjectUnreadable",
            "NoSuchBucket",
        ),
        "no-backup": ("fresh4", {"backupName": "never-made"}, "BackupNotFound", "never-made"),
        "bad-url": ("fresh5", {"objectURL": "s3://bucket-only"}, "InvalidSource", "no object key"),
    }
    kube.apply(*(restore(name, c[0], template, c[1]) for name, c in cases.items()), namespace=ns)
    for name, (cluster, _, reason, words) in cases.items():
        failed = failed_condition(wait_restore(kube, ns, name, "Failed", timeout=120))
        assert failed["reason"] == reason, (name, failed)
        assert words in failed["message"], (name, failed["message"])
        warnings = wait_until(
            f"a RestoreRefused Event for {name}",
            lambda name=name: [e for e in kube.events(ns, name) if e["reason"] == "RestoreRefused"],
            30,
        )
        assert warnings[0]["type"] == "Warning"
        if cluster != "e2e":
            assert not kube.exists(CLUSTERS, cluster, ns), f"{name} created EtcdCluster {cluster}"
    assert not restore_pods(kube, ns), "a refused restore created pods"
    claims = kube.get("pvc", namespace=ns)["items"]
    assert [(c["metadata"]["name"], c["metadata"]["uid"]) for c in claims] == [("taken-1", pvc_uid)]
    assert RESTORE_KEY not in (etcd_cluster.get()["metadata"].get("annotations") or {})
    assert kube.get(RESTORES, "corrupt", ns)["status"]["phase"] == "Failed"


def test_a_backup_changed_in_the_store_is_found_by_the_restore_pods(
    etcd_cluster, cluster_named, s3, s3_port
):
    """From a backupName the operator only looks the object up; the restore pods check its
    bytes against the backup's SHA-256 and fail the restore, and what it created goes."""
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    kube.apply(credentials_secret(), namespace=ns)
    source = cluster_named("src")
    source.create(1)
    source.wait_available(1)
    backup = backup_of(source, "src", s3_port)

    def verified():
        status = kube.get("etcdbackups.etcd.quorumkeeper.dev", "src", ns).get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        return conditions.get("Verified", {}).get("status") == "True" and status

    # Verified first: a verification that read the changed object would refuse the restore.
    wait_until("the backup verified", verified, 180)
    # Other bytes under the backup's key, without the SHA-256 recorded with the original.
    s3.put_object(Bucket=BUCKET, Key=f"{ns}/src.db", Body=b"changed in the store" * 512)
    template = source.manifest(1)["spec"]
    kube.apply(restore("changed", "changed", template, {"backupName": "src"}), namespace=ns)
    failed = failed_condition(wait_restore(kube, ns, "changed", "Failed", timeout=180))
    assert failed["reason"] == "SnapshotHashMismatch", failed
    assert backup["sha256"] in failed["message"] and "-c fetch" in failed["message"], failed
    assert not kube.exists(CLUSTERS, "changed", ns)
    wait_until(
        "the restore's PVC deleted",
        lambda: all(
            c["metadata"].get("deletionTimestamp")
            for c in kube.get("pvc", namespace=ns)["items"]
            if c["metadata"]["name"] == "changed-0"
        ),
        60,
    )


# Kills the operator every other test relies on.
@pytest.mark.exclusive
def test_operator_killed_mid_restore_converges(etcd_cluster, cluster_named, s3, s3_port):
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    kube.apply(credentials_secret(), namespace=ns)
    source = cluster_named("one")
    source.create(1)
    source.wait_available(1)
    source.put("survives", "the operator")
    backup_of(source, "one", s3_port)
    template = source.manifest(3)["spec"]
    kube.apply(restore("killed", "three", template, {"backupName": "one"}), namespace=ns)

    def restoring():
        status = kube.get(RESTORES, "killed", ns).get("status") or {}
        return status.get("phase") == "Restoring" and status

    wait_until("the restore under way", restoring, 120, interval=0.2)
    operator_pod = running_operator_pod(kube, OPERATOR_NAMESPACE)
    faults.crash_pod(OPERATOR_NAMESPACE, operator_pod)
    status = wait_restore(kube, ns, "killed", "Completed", timeout=420)
    restored = cluster_named("three")
    restored.wait_available(3, timeout=60)
    assert restored.value("survives") == "the operator"
    assert status["revision"] == revision(source)
    assert restored.pvc_names() == {"three-0", "three-1", "three-2"}


def test_restore_of_an_etcd_34_snapshot(etcd_cluster, cluster_named, s3, s3_port, tmp_path):
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    kube.apply(credentials_secret(), namespace=ns)
    old = cluster_named("old", "3.4.23")
    old.create(1)
    old.wait_available(1)
    for i in range(5):
        old.put(f"/v34/{i}", str(i))
    keys = keyspace(old)
    backup_of(old, "v34", s3_port)
    stored_revision = snapshot_revision(s3, f"{ns}/v34.db", "3.4.23", tmp_path)
    template = old.manifest(1)["spec"]
    kube.apply(
        restore(
            "v34",
            "old-again",
            template,
            {"objectURL": object_url(BUCKET, s3_port, f"{ns}/v34.db"), "credentialsSecret": SECRET},
        ),
        namespace=ns,
    )
    status = wait_restore(kube, ns, "v34", "Completed", timeout=300)
    restored = cluster_named("old-again", "3.4.23")
    restored.wait_available(1, timeout=60)
    assert status["revision"] == stored_revision == revision(restored)
    assert keyspace(restored) == keys
    assert restored.get()["status"]["members"][0]["version"] == "3.4.23"


def test_a_failed_restore_pod_fails_the_restore_and_deletes_its_volumes(etcd_cluster, s3, s3_port):
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    kube.apply(credentials_secret(), namespace=ns)
    # Bytes that match their recorded SHA-256 but are no snapshot: only etcd can tell.
    body = b"not a bbolt database" * 512
    s3.put_object(
        Bucket=BUCKET,
        Key="garbage.db",
        Body=body,
        Metadata={"sha256": hashlib.sha256(body).hexdigest()},
    )
    source = {"objectURL": object_url(BUCKET, s3_port, "garbage.db"), "credentialsSecret": SECRET}
    kube.apply(restore("garbage", "never", etcd_cluster.manifest(3)["spec"], source), namespace=ns)
    failed = failed_condition(wait_restore(kube, ns, "garbage", "Failed", timeout=180))
    assert failed["reason"] == "RestoreFailed", failed
    assert f"see kubectl logs -n {ns} never-" in failed["message"]
    assert "-c restore" in failed["message"]
    assert "deleted PersistentVolumeClaim/never-" in failed["message"]
    warnings = wait_until(
        "a RestoreFailed Event",
        lambda: [e for e in kube.events(ns, "garbage") if e["reason"] == "RestoreFailed"],
        30,
    )
    assert warnings[0]["type"] == "Warning"
    assert not kube.exists(CLUSTERS, "never", ns)

    def claims():
        selector = "etcd.quorumkeeper.dev/cluster=never"
        return kube.get("pvc", namespace=ns, selector=selector)["items"]

    wait_until(
        "the restore's PVCs deleted",
        lambda: all(c["metadata"].get("deletionTimestamp") for c in claims()),
        60,
    )
    # The failed pods stay for their logs (and hold their PVCs); the others are gone.
    pods = wait_until(
        "only failed restore pods left",
        lambda: (
            (pods := restore_pods(kube, ns))
            and all(p["status"]["phase"] == "Failed" for p in pods)
            and pods
        ),
        60,
    )
    assert kube("logs", "-n", ns, pods[0]["metadata"]["name"], "-c", "restore").strip()
    # A new restore under that name is refused while they are held, and says why.
    kube.apply(restore("again", "never", etcd_cluster.manifest(3)["spec"], source), namespace=ns)
    refused = failed_condition(wait_restore(kube, ns, "again", "Failed", timeout=60))
    assert refused["reason"] == "VolumesExist"
    assert "released once that EtcdRestore is deleted" in refused["message"]
    kube("delete", RESTORES, "garbage", "-n", ns)
    wait_until("the PVCs released with the failed restore", lambda: not claims(), 90)
