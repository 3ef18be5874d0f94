"""Backup verification: the pod it runs, how a failed container becomes a reason and a message,
how what the restored etcd serves is judged, and when a verification is due."""

from __future__ import annotations

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_verify import (
    FINAL_REASONS,
    RETRYABLE_REASONS,
    check_backup,
    container_failed,
    judge,
    log_summary,
    owned_by,
    parse_snapshot_status,
    pod_name,
    render_pod,
    stuck,
    timed_out,
    verification_state,
)

OPERATOR = "quay.io/quorumkeeper/etcd-operator:0.1.0"
SHA = "ab" * 32
URL = "s3://b/ns/c/u.db?endpoint=http://10.213.0.1:9000&region=us-east-1"


def backup(version="3.6.16", secret="s3-credentials", phase="Completed", **spec):
    destination = {"objectURLTemplate": "s3://b/{{ .UID }}.db"}
    if secret:
        destination["credentialsSecret"] = secret
    return {
        "apiVersion": "etcd.quorumkeeper.dev/v1alpha1",
        "kind": "EtcdBackup",
        "metadata": {"name": "nightly", "namespace": "prod", "uid": "0b7c1234-aaaa-bbbb"},
        "spec": {"source": {"clusterName": "c"}, "destination": destination, **spec},
        "status": {
            "phase": phase,
            "objectURL": URL,
            "sha256": SHA,
            "etcdVersion": version,
            "revision": 21,
            "keys": 20,
        },
    }


def containers(pod):
    spec = pod["spec"]
    return {c["name"]: c for c in spec["initContainers"] + spec["containers"]}


def test_pod_steps_in_order_owned_by_the_backup():
    pod = render_pod(backup(), OPERATOR, "quay.io/coreos/etcd:v3.6.16")
    assert pod["metadata"]["name"] == "nightly-verify"
    assert pod["metadata"]["namespace"] == "prod"
    (owner,) = pod["metadata"]["ownerReferences"]
    assert owner["kind"] == "EtcdBackup" and owner["uid"] == "0b7c1234-aaaa-bbbb"
    assert owner["controller"] is True
    spec = pod["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["fetch", "status", "restore"]
    assert [c["name"] for c in spec["containers"]] == ["etcd"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert {v["name"] for v in spec["volumes"]} == {"snapshot", "store-credentials", "scratch"}
    assert owned_by(pod, backup())
    assert not owned_by(pod, {"metadata": {"uid": "other"}})


def test_fetch_checks_the_recorded_sha256_with_the_backups_credentials():
    fetch = containers(render_pod(backup(), OPERATOR, "e:v3.6.16"))["fetch"]
    assert fetch["image"] == OPERATOR
    cmd = fetch["command"]
    assert cmd[cmd.index("--url") + 1] == URL
    assert cmd[cmd.index("--sha256") + 1] == SHA
    assert "--credentials-dir" in cmd
    anonymous = containers(render_pod(backup(secret=None), OPERATOR, "e:v3.6.16"))["fetch"]
    assert "--credentials-dir" not in anonymous["command"]


def test_etcd_36_uses_etcdutl_and_keeps_the_hash_check():
    c = containers(render_pod(backup(), OPERATOR, "quay.io/coreos/etcd:v3.6.16"))
    assert c["status"]["command"][:3] == ["/usr/local/bin/etcdutl", "snapshot", "status"]
    assert "--write-out=json" in c["status"]["command"]
    restore = c["restore"]["command"]
    assert restore[:3] == ["/usr/local/bin/etcdutl", "snapshot", "restore"]
    assert not any("skip-hash-check" in arg for arg in restore)
    assert "--data-dir=/scratch/data" in restore
    for name in ("status", "restore", "etcd"):
        assert c[name]["image"] == "quay.io/coreos/etcd:v3.6.16"
        assert c[name]["command"][0].startswith("/usr/local/bin/"), "no shell in etcd images"


def test_etcd_34_uses_etcdctl_with_api_3():
    c = containers(render_pod(backup("3.4.23"), OPERATOR, "quay.io/coreos/etcd:v3.4.23"))
    for name in ("status", "restore"):
        assert c[name]["command"][0] == "/usr/local/bin/etcdctl"
        assert {"name": "ETCDCTL_API", "value": "3"} in c[name]["env"]


def test_throwaway_etcd_serves_clients_on_the_pod_ip_and_peers_on_loopback_only():
    etcd = containers(render_pod(backup(), OPERATOR, "e:v3.6.16", client_port=2379))["etcd"]
    args = etcd["command"]
    assert "--listen-client-urls=http://0.0.0.0:2379" in args
    assert "--listen-peer-urls=http://127.0.0.1:2380" in args
    assert "--name=verify" in args and "--data-dir=/scratch/data" in args
    assert etcd["readinessProbe"]["tcpSocket"]["port"] == 2379
    restore = containers(render_pod(backup(), OPERATOR, "e:v3.6.16"))["restore"]["command"]
    # The restored member's name and peer URL are the ones the throwaway etcd starts with.
    assert "--name=verify" in restore
    assert "--initial-cluster=verify=http://127.0.0.1:2380" in restore


def test_resources_go_to_every_container():
    limits = {"limits": {"memory": "512Mi"}}
    pod = render_pod(backup(), OPERATOR, "e:v3.6.16", resources=limits)
    assert all(c["resources"] == limits for c in containers(pod).values())


def test_pod_name_is_deterministic_and_a_valid_hostname():
    assert pod_name("nightly", "u1") == pod_name("nightly", "u1") == "nightly-verify"
    long = "b" * 60
    name = pod_name(long, "u1")
    assert len(name) <= 63 and name.startswith("b" * 46 + "-verify-")
    assert pod_name(long, "u1") != pod_name(long + "x", "u1")


def test_only_completed_backups_with_a_record_can_be_verified():
    assert check_backup(backup()) is None
    assert "Running" in check_backup(backup(phase="Running"))
    incomplete = backup()
    del incomplete["status"]["sha256"]
    assert "sha256" in check_backup(incomplete)


CONTEXT = {"object_url": URL, "version": "3.6.16", "pod": "nightly-verify"}


def test_fetch_exit_3_is_a_final_sha256_mismatch():
    verdict = container_failed(
        {"container": "fetch", "exit_code": 3, "reason": "Error", "message": ""},
        "sha256 mismatch: s3://b/x holds 10 bytes with sha256 aa, expected: bb\n",
        CONTEXT,
    )
    assert verdict["reason"] == "SHA256Mismatch" and not verdict["retryable"]
    assert "sha256 mismatch" in verdict["message"]
    assert "take a new EtcdBackup" in verdict["message"]


def test_fetch_exit_2_is_an_unreadable_object_worth_retrying():
    verdict = container_failed(
        {"container": "fetch", "exit_code": 2, "reason": "Error", "message": ""},
        "cannot read s3://b/x: NoSuchKey: The specified key does not exist.",
        CONTEXT,
    )
    assert verdict["reason"] == "ObjectUnreadable" and verdict["retryable"]
    assert "NoSuchKey" in verdict["message"] and "credentials" in verdict["message"]


@pytest.mark.parametrize(
    ("container", "reason"),
    [("status", "SnapshotCorrupt"), ("restore", "RestoreFailed"), ("etcd", "EtcdDidNotStart")],
)
def test_etcd_steps_failing_are_final(container, reason):
    failed = {"container": container, "exit_code": 1, "reason": "Error", "message": ""}
    log = '{"level":"fatal","msg":"failed to open","error":"invalid database"}\n'
    verdict = container_failed(failed, log, CONTEXT)
    assert verdict["reason"] == reason and not verdict["retryable"]
    assert "failed to open: invalid database" in verdict["message"]
    assert "3.6.16" in verdict["message"]


def test_a_full_disk_during_restore_is_worth_retrying():
    failed = {"container": "restore", "exit_code": 1, "reason": "Error", "message": ""}
    verdict = container_failed(failed, "Error: write /scratch: no space left on device", CONTEXT)
    assert verdict["reason"] == "VerificationPodFailed" and verdict["retryable"]


def test_stuck_and_timed_out_pods_are_worth_retrying():
    waiting = {"container": "status", "image": "e:v9", "reason": "ErrImagePull", "message": "x"}
    verdict = stuck(waiting, "p")
    assert verdict["retryable"] and "e:v9" in verdict["message"]
    late = timed_out("p", 180, "restore", "0/3 nodes are available")
    assert late["reason"] == "VerificationTimedOut" and late["retryable"]
    assert "restore" in late["message"] and "0/3 nodes" in late["message"]
    assert FINAL_REASONS.isdisjoint(RETRYABLE_REASONS)


def test_messages_stay_short():
    failed = {"container": "etcd", "exit_code": 2, "reason": "Error", "message": "x" * 5000}
    assert len(container_failed(failed, "", CONTEXT)["message"]) <= 700
    assert len(log_summary("y" * 3000)) <= 400


def test_snapshot_status_is_found_among_log_lines():
    text = (
        "some warning\n"
        '{"hash":2640164988,"revision":4,"totalKey":3,"totalSize":20480,"version":"3.6.0"}\n'
    )
    assert parse_snapshot_status(text)["revision"] == 4
    assert parse_snapshot_status('{"level":"info","msg":"x"}\n') is None
    assert parse_snapshot_status("") is None


SNAP = {"hash": 1, "revision": 30, "totalKey": 40, "totalSize": 1}


def test_judge_accepts_what_the_backup_recorded():
    assert judge(SNAP, {"revision": 30, "keys": 25}, 21, 20, 20) is None
    # Older backups recorded no key count; compaction may hide the recorded revision.
    assert judge(SNAP, {"revision": 30, "keys": 25}, 21, None, 20) is None
    assert judge(SNAP, {"revision": 30, "keys": 25}, 21, 20, None) is None


def test_judge_accepts_the_snapshot_of_a_cluster_never_written_to():
    # etcd 3.6's snapshot status of such a store says revision 0; a restored etcd serves 1.
    empty = {**SNAP, "revision": 0, "totalKey": 0}
    assert judge(empty, {"revision": 1, "keys": 0}, 1, 0, 0) is None
    assert judge(empty, {"revision": 2, "keys": 0}, 1, 0, 0)["reason"] == "RevisionMismatch"


def test_judge_refuses_other_revisions_and_key_counts():
    served = judge(SNAP, {"revision": 29, "keys": 25}, 21, 20, 20)
    assert served["reason"] == "RevisionMismatch" and "29" in served["message"]
    older = judge(SNAP, {"revision": 30, "keys": 25}, 31, 20, 20)
    assert older["reason"] == "RevisionMismatch" and "31" in older["message"]
    keys = judge(SNAP, {"revision": 30, "keys": 25}, 21, 20, 19)
    assert keys["reason"] == "KeyCountMismatch" and not keys["retryable"]


def condition(status, reason):
    return {"type": "Verified", "status": status, "reason": reason}


@pytest.mark.parametrize(
    ("verify", "phase", "cond", "due"),
    [
        (None, "Completed", None, True),  # older objects: no spec.verify means true
        (True, "Completed", condition("Unknown", "Verifying"), True),
        (True, "Completed", condition("True", "Verified"), False),
        (True, "Completed", condition("False", "SHA256Mismatch"), False),
        (True, "Completed", condition("False", "VerificationTimedOut"), True),
        (True, "Completed", condition("False", "ObjectUnreadable"), True),
        (True, "Running", None, False),
        (False, "Completed", None, False),
    ],
)
def test_when_a_verification_is_due(verify, phase, cond, due):
    obj = backup(phase=phase) if verify is None else backup(phase=phase, verify=verify)
    if cond:
        obj["status"]["conditions"] = [cond]
    state = verification_state(obj)
    assert state["verification_due"] is due
    assert state["verify"] is (verify is not False)
    assert state["verified"] == (cond["status"] if cond else None)
