"""EtcdBackup through the deployed operator: a snapshot of a live cluster streamed to a real S3
server (moto, reached from the operator's pod over the cluster network), read back and checked
with etcd's own tool; bad input ends Failed with a condition and a Warning Event. Every completed
backup is verified by the operator (condition Verified): restored in a scratch pod with the
etcd of its version (3.6 and 3.4 here), or refused when the store returns other bytes."""

from __future__ import annotations

import hashlib
import json
import re
import sys

import pytest
from backuphelpers import (
    HOST_FROM_PODS,
    KEYS,
    UID_KEY,
    credentials_secret,
    moto_server,
    object_url,
    snapshot_status,
    wait_backup,
)
from backuphelpers import backup_manifest as backup
from damaging_s3 import DamagingMotoServer
from kubehelpers import BACKUPS, CLUSTERS, ROOT, STATE, wait_until

sys.path.insert(0, str(ROOT / "tests" / "modules"))
import etcdharness  # noqa: E402

BUCKET = "etcd-backups"


@pytest.fixture(scope="module")
def damaging_s3_port(s3_port):
    with moto_server(DamagingMotoServer) as port:
        yield port


def template(port, key=UID_KEY):
    return object_url(BUCKET, port, key)


def wait_verified(kube, namespace, name, status="True", timeout=180):
    """The status once its Verified condition has ``status``."""

    def reached():
        current = (kube.get(BACKUPS, name, namespace=namespace).get("status")) or {}
        verified = {c["type"]: c for c in current.get("conditions", [])}.get("Verified", {})
        return current if verified.get("status") == status else None

    return wait_until(f"EtcdBackup {name} Verified={status}", reached, timeout)


def verified_condition(status):
    return {c["type"]: c for c in status["conditions"]}["Verified"]


def verify_pods(kube, namespace):
    selector = "app.kubernetes.io/name=etcd-backup-verify"
    return kube.get("pods", namespace=namespace, selector=selector)["items"]


def test_backup_of_a_cluster_is_streamed_checksummed_and_restorable(
    etcd_cluster, s3, s3_port, tmp_path
):
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    etcd_cluster.create(3)
    etcd_cluster.wait_available(3)
    for i in range(20):
        etcd_cluster.put(f"/backup/{i}", f"v{i}")
    kube.apply(credentials_secret(), namespace=ns)
    kube.apply(backup("nightly", {"clusterName": "e2e"}, template(s3_port)), namespace=ns)

    status = wait_backup(kube, ns, "nightly", "Completed", 120)
    uid = kube.get(BACKUPS, "nightly", namespace=ns)["metadata"]["uid"]
    assert status["objectURL"].startswith(f"s3://{BUCKET}/{ns}/e2e/{uid}.db?endpoint=")
    leader = etcd_cluster.get()["status"]["leader"]
    assert status["member"] != leader, "the snapshot was taken from the leader"
    assert status["etcdVersion"] == "3.6.16"
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Completed"]["status"] == "True"
    assert conditions["Failed"]["status"] == "False"
    # Its cluster shows it (kubectl get etcdc: column LAST BACKUP).
    assert etcd_cluster.get()["status"]["lastBackup"] == {
        "name": "nightly",
        "completionTime": status["completionTime"],
        "objectURL": status["objectURL"],
    }
    columns = kube("get", CLUSTERS, "e2e", "-n", ns).splitlines()
    assert columns[0].split()[-3:] == ["LAST", "BACKUP", "AGE"]
    assert re.fullmatch(r"\d+(s|m\d*s?)", columns[1].split()[-2]), columns

    obj = s3.get_object(Bucket=BUCKET, Key=f"{ns}/e2e/{uid}.db")
    body = obj["Body"].read()
    assert len(body) == status["size"]
    tags = s3.get_object_tagging(Bucket=BUCKET, Key=f"{ns}/e2e/{uid}.db")["TagSet"]
    assert hashlib.sha256(body).hexdigest() == status["sha256"]
    assert tags == [{"Key": "sha256", "Value": status["sha256"]}], "the SHA-256 is not its tag"
    snapshot = snapshot_status(body, tmp_path)
    assert snapshot["revision"] >= status["revision"] >= 21
    assert snapshot["totalKey"] >= 20
    assert status["keys"] == 20, "keys at the recorded revision"

    # The operator restored it in a scratch pod and asked the restored etcd.
    status = wait_verified(kube, ns, "nightly")
    verified = verified_condition(status)
    assert verified["reason"] == "Verified"
    verification = status["verification"]
    assert verification["revision"] == snapshot["revision"]
    assert verification["keys"] == 20
    assert verification["snapshotHash"] == snapshot["hash"]
    print(f"verification of a {status['size']}-byte snapshot: {verification['seconds']}s")
    assert f"revision {snapshot['revision']}, 20 keys" in verified["message"]
    wait_until("the verification pod deleted", lambda: not verify_pods(kube, ns), 30)
    wait_until(
        "BackupStarted, BackupCompleted and BackupVerified Events",
        lambda: (
            {"BackupStarted", "BackupCompleted", "BackupVerified"}
            <= {e["reason"] for e in kube.events(ns, "nightly")}
        ),
        30,
    )
    assert all(v not in json.dumps(status) for v in KEYS.values()), "credentials in the status"


def test_backup_of_a_missing_cluster_fails_with_a_reason(etcd_cluster, s3, s3_port):
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    kube.apply(credentials_secret(), namespace=ns)
    template = f"s3://{BUCKET}/x.db?endpoint=http://{HOST_FROM_PODS}:{s3_port}"
    kube.apply(backup("orphan", {"clusterName": "no-such-cluster"}, template), namespace=ns)
    status = wait_backup(kube, ns, "orphan", "Failed", 120)
    failed = {c["type"]: c for c in status["conditions"]}["Failed"]
    assert failed["status"] == "True" and failed["reason"] == "SnapshotFailed"
    assert "EtcdCluster" in failed["message"] and "does not exist" in failed["message"]
    # The Event follows the status write: wait for it rather than race it.
    warnings = wait_until(
        "a BackupFailed Event",
        lambda: [e for e in kube.events(ns, "orphan") if e["reason"] == "BackupFailed"],
        30,
    )
    assert warnings[0]["type"] == "Warning"
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)


def test_backup_with_a_missing_secret_names_it(etcd_cluster, s3_port):
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    template = f"s3://{BUCKET}/y.db?endpoint=http://{HOST_FROM_PODS}:{s3_port}"
    kube.apply(
        backup("nosecret", {"clusterURL": "http://127.0.0.1:2379"}, template, secret="absent"),
        namespace=ns,
    )
    status = wait_backup(kube, ns, "nosecret", "Failed", 120)
    failed = {c["type"]: c for c in status["conditions"]}["Failed"]
    assert f"Secret {ns}/absent" in failed["message"]


def test_verification_on_etcd_34_refuses_a_damaged_object_and_can_be_turned_off(
    etcd_cluster, s3, s3_port, damaging_s3_port
):
    """etcd 3.4 has no etcdutl: its verification runs etcdctl. A store that returns other bytes
    than were uploaded ends Verified=False (SHA256Mismatch, final) with a Warning Event, the
    backup stays Completed; spec.verify=false reads nothing back."""
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    etcd_cluster.version = "3.4.23"
    etcd_cluster.create(1)
    etcd_cluster.wait_available(1)
    for i in range(7):
        etcd_cluster.put(f"/old/{i}", "v")
    kube.apply(credentials_secret(), namespace=ns)
    kube.apply(
        backup("good", {"clusterName": "e2e"}, template(s3_port)),
        backup("damaged", {"clusterName": "e2e"}, template(damaging_s3_port, "damaged.db")),
        backup("unchecked", {"clusterName": "e2e"}, template(s3_port, "x.db"), verify=False),
        namespace=ns,
    )

    good = wait_verified(kube, ns, "good")
    assert good["etcdVersion"] == "3.4.23"
    assert good["verification"]["keys"] == good["keys"] == 7
    assert good["verification"]["revision"] >= good["revision"]

    damaged = wait_verified(kube, ns, "damaged", status="False")
    assert damaged["phase"] == "Completed", "a verification failure is not a backup failure"
    condition = verified_condition(damaged)
    assert condition["reason"] == "SHA256Mismatch"
    assert "sha256 mismatch" in condition["message"]
    assert "take a new EtcdBackup" in condition["message"]
    assert "verification" not in damaged
    warnings = wait_until(
        "a BackupVerificationFailed Event",
        lambda: [
            e for e in kube.events(ns, "damaged") if e["reason"] == "BackupVerificationFailed"
        ],
        30,
    )
    assert warnings[0]["type"] == "Warning"
    wait_until("the verification pods deleted", lambda: not verify_pods(kube, ns), 30)

    unchecked = wait_backup(kube, ns, "unchecked", "Completed", 120)
    condition = verified_condition(unchecked)
    assert (condition["status"], condition["reason"]) == ("Unknown", "VerificationDisabled")
    # Final: the damaged backup is not tried again, the unchecked one never verified.
    reasons = [e["reason"] for e in kube.events(ns, "damaged")]
    assert reasons.count("BackupVerificationFailed") == 1
    assert "BackupVerified" not in {e["reason"] for e in kube.events(ns, "unchecked")}


def test_verify_module_names_each_failure_and_what_to_do(etcd_cluster, s3, s3_port, tmp_path):
    """etcd_snapshot_verify run by hand (as the role runs it) on a real backup whose status is
    then rewritten: each way a backup can fail its verification, final or worth retrying. The
    backup has verify=false, so the operator itself leaves it alone."""
    kube, ns = etcd_cluster.kube, etcd_cluster.namespace
    etcd_cluster.create(1)
    etcd_cluster.wait_available(1)
    for i in range(5):
        etcd_cluster.put(f"/m/{i}", "v")
    kube.apply(credentials_secret(), namespace=ns)
    kube.apply(
        backup("manual", {"clusterName": "e2e"}, template(s3_port, "manual.db"), verify=False),
        namespace=ns,
    )
    recorded = wait_backup(kube, ns, "manual", "Completed", 120)
    run = etcdharness.ModuleRunner(tmp_path / "ansible")

    def verify(**status):
        if status:
            patch = json.dumps({"status": status})
            kube("patch", BACKUPS, "manual", "-n", ns, "--subresource=status", "--type=merge",
                 "-p", patch)  # fmt: skip
        args = {"name": "manual", "namespace": ns, "kubeconfig": str(STATE / "kubeconfig")}
        result = run("etcd_snapshot_verify", {**args, "timeout": 60})
        assert not result["failed"], result.get("msg")
        wait_until("the verification pod deleted", lambda: not verify_pods(kube, ns), 30)
        return result

    # A run interrupted after its pod was created (keep_pod leaves it as such a run would):
    # the next run picks that pod up instead of starting another.
    args = {"name": "manual", "namespace": ns, "kubeconfig": str(STATE / "kubeconfig")}
    first = run("etcd_snapshot_verify", {**args, "keep_pod": True})
    assert first["verified"] is True and not first["reused"], first
    assert kube.get("pod", first["pod"], ns)["metadata"]["ownerReferences"][0]["name"] == "manual"
    passed = verify()
    assert passed["verified"] is True and passed["reused"], passed
    assert (passed["keys"], passed["revision"]) == (5, recorded["revision"])

    keys = verify(keys=recorded["keys"] + 1)
    assert (keys["verified"], keys["reason"], keys["retryable"]) == (
        False,
        "KeyCountMismatch",
        False,
    )

    missing_url = recorded["objectURL"].replace("manual.db", "missing.db")
    missing = verify(keys=recorded["keys"], objectURL=missing_url)
    assert (missing["reason"], missing["retryable"]) == ("ObjectUnreadable", True)
    assert "NoSuchKey" in missing["message"]

    no_image = verify(objectURL=recorded["objectURL"], etcdVersion="3.5.99")
    assert (no_image["reason"], no_image["retryable"]) == ("VerificationPodFailed", True)
    assert "quay.io/coreos/etcd:v3.5.99" in no_image["message"]

    # Damaged bytes whose SHA-256 was recorded as such: only etcd's own integrity hash is left.
    # The bit flipped is in the SHA-256 etcd appends to every snapshot (its last 32 bytes), so
    # the database itself stays readable (`snapshot status` passes) and only the restore's hash
    # check can refuse it; a flip inside the database could break `status` first, depending on
    # which page it lands in.
    body = bytearray(s3.get_object(Bucket=BUCKET, Key="manual.db")["Body"].read())
    body[-1] ^= 0x01
    s3.put_object(Bucket=BUCKET, Key="tampered.db", Body=bytes(body))
    tampered = verify(
        etcdVersion=recorded["etcdVersion"],
        objectURL=recorded["objectURL"].replace("manual.db", "tampered.db"),
        sha256=hashlib.sha256(bytes(body)).hexdigest(),
    )
    assert (tampered["reason"], tampered["retryable"]) == ("RestoreFailed", False), tampered
    assert "sha256" in tampered["message"] and "take a new EtcdBackup" in tampered["message"]
