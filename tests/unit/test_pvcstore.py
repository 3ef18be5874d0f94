"""pvc:// destinations: URL parsing, the helper pods that write and delete files in a claim,
the claim checks, co-location on a ReadWriteOnce claim's node, and the verification pod's
fetch from a claim."""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    PROFILE_ENV,
    ConnectionProfile,
    profile_from_env,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_helper_pods import (
    OBJECTSTORE_ENV,
    PVC_MOUNT,
    backup_claim,
    snapshot_volumes,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore import (
    ObjectStoreError,
    parse_object_url,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore_pvc import (
    PVC_MOUNT as OBJECTSTORE_PVC_MOUNT,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore_pvc import (
    claim_file,
    delete_file,
    download_file,
    upload_file,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_pvcstore import (
    ClaimError,
    check_claim,
    co_locate,
    deleter_pod,
    helper_pod_name,
    judge_pod,
    last_json,
    writer_pod,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_verify import render_pod

IMAGE = "quay.io/quorumkeeper/etcd-operator:0.1.0"
URL = "pvc://etcd-backups/main/20261122T083000Z.db"


def test_a_pvc_url_names_the_claim_and_the_file_under_the_mount():
    loc = parse_object_url(URL)
    assert (loc.scheme, loc.bucket, loc.key) == ("pvc", "etcd-backups", "main/20261122T083000Z.db")
    assert claim_file(loc) == f"{PVC_MOUNT}/main/20261122T083000Z.db"
    assert OBJECTSTORE_PVC_MOUNT == PVC_MOUNT, "the pods mount where the script looks"
    assert backup_claim(URL) == "etcd-backups"
    assert backup_claim("s3://b/k") is None


def test_writer_pod_mounts_the_claim_read_write_and_streams_from_the_member():
    pod = writer_pod(URL, "prod", IMAGE, "http://main-0.main.prod.svc:2379", 600)
    assert pod["metadata"]["name"] == helper_pod_name("write", URL)
    assert pod["metadata"]["namespace"] == "prod"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["volumes"] == [
        {"name": "backup-claim", "persistentVolumeClaim": {"claimName": "etcd-backups"}}
    ]
    (container,) = spec["containers"]
    assert container["image"] == IMAGE
    assert container["command"] == [
        "python3",
        "-m",
        "ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore",
        "write",
        "--url",
        URL,
        "--endpoint",
        "http://main-0.main.prod.svc:2379",
        "--timeout",
        "600",
    ]
    assert container["volumeMounts"] == [{"name": "backup-claim", "mountPath": PVC_MOUNT}]
    # No profile: a plain connection, said as such (the pod's etcd timeout is the default).
    assert container["env"][: len(OBJECTSTORE_ENV)] == OBJECTSTORE_ENV
    env = {e["name"]: e["value"] for e in container["env"]}
    assert profile_from_env(environ=env) == ConnectionProfile()


def test_the_writer_pod_is_given_the_modules_connection_profile_without_its_endpoints():
    profile = ConnectionProfile(["http://main-client.prod.svc:2379"], timeout=7)
    pod = writer_pod(URL, "prod", IMAGE, "http://main-0.main.prod.svc:2379", profile=profile)
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert set(env) == {e["name"] for e in OBJECTSTORE_ENV} | {PROFILE_ENV}
    # The pod dials the member it is told (--endpoint), with everything else of the profile.
    pods_profile = profile_from_env(["http://main-0.main.prod.svc:2379"], environ=env)
    assert pods_profile == profile.with_endpoints(["http://main-0.main.prod.svc:2379"])


def test_the_writer_pod_of_a_tls_cluster_with_auth_reads_its_credentials_from_secrets():
    profile = ConnectionProfile(
        ["https://main-client.prod.svc:2379"],
        ca_cert="/var/lib/qk/prod/main/ca.crt",
        client_cert="/var/lib/qk/prod/main/tls.crt",
        client_key="/var/lib/qk/prod/main/tls.key",
        username="root",
        password_file="/var/lib/qk/prod/main/root.password",
    )
    pod = writer_pod(
        URL,
        "prod",
        IMAGE,
        "https://main-0.main.prod.svc:2379",
        profile=profile,
        tls_secret="main-operator-tls",
        password_secret="main-user-root",
    )
    spec = pod["spec"]
    secrets = {v["name"]: v["secret"] for v in spec["volumes"] if "secret" in v}
    assert secrets == {
        "etcd-tls": {"secretName": "main-operator-tls", "defaultMode": 0o400},
        "etcd-password": {"secretName": "main-user-root", "defaultMode": 0o400},
    }
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["etcd-tls"]["readOnly"] and mounts["etcd-password"]["readOnly"]
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    pods_profile = profile_from_env(["https://main-0.main.prod.svc:2379"], environ=env)
    tls_dir, password_dir = mounts["etcd-tls"]["mountPath"], mounts["etcd-password"]["mountPath"]
    assert (pods_profile.ca_cert, pods_profile.client_cert, pods_profile.client_key) == (
        f"{tls_dir}/ca.crt",
        f"{tls_dir}/tls.crt",
        f"{tls_dir}/tls.key",
    )
    assert (pods_profile.username, pods_profile.password_file) == (
        "root",
        f"{password_dir}/password",
    )
    assert "/var/lib/qk" not in json.dumps(pod), "the operator's own files mean nothing there"


def test_a_writer_pod_without_the_secrets_its_profile_needs_is_refused():
    tls = ConnectionProfile(["https://e:2379"], ca_cert="/ca.crt")
    with pytest.raises(ClaimError, match="TLS Secret"):
        writer_pod(URL, "prod", IMAGE, "https://e:2379", profile=tls)
    user = ConnectionProfile(["http://e:2379"], username="root", password_file="/p")
    with pytest.raises(ClaimError, match="password Secret"):
        writer_pod(URL, "prod", IMAGE, "http://e:2379", profile=user)


def test_deleter_pod_and_names():
    pod = deleter_pod(URL, "prod", IMAGE)
    assert pod["spec"]["containers"][0]["command"][3:] == ["delete", "--url", URL]
    name = helper_pod_name("delete", URL)
    assert name != helper_pod_name("write", URL)
    assert name != helper_pod_name("delete", URL + "x")
    assert len(name) <= 63
    with pytest.raises(ClaimError, match="not a pvc:// URL"):
        deleter_pod("s3://b/k", "prod", IMAGE)


def test_claim_checks_say_what_to_do():
    with pytest.raises(ClaimError, match="prod/etcd-backups .* does not exist; create it"):
        check_claim(None, "etcd-backups", "prod")
    with pytest.raises(ClaimError, match="being deleted"):
        check_claim({"metadata": {"deletionTimestamp": "x"}}, "etcd-backups", "prod")
    with pytest.raises(ClaimError, match="ReadOnlyMany"):
        check_claim({"metadata": {}, "spec": {"accessModes": ["ReadOnlyMany"]}}, "c", "prod")
    assert check_claim({"metadata": {}, "spec": {"accessModes": ["ReadWriteOnce"]}}, "c", "p") == [
        "ReadWriteOnce"
    ]


def mounting(name, node, claim="etcd-backups", phase="Running", deleting=False):
    meta = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "x"
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}],
        },
        "status": {"phase": phase},
    }


def test_a_read_write_once_claim_in_use_pins_the_helper_to_its_node():
    others = [
        mounting("other-claim", "node-1", claim="data"),
        mounting("done", "node-2", phase="Succeeded"),
        mounting("going", "node-2", deleting=True),
        mounting("user", "node-3"),
    ]
    pod = co_locate(
        writer_pod(URL, "p", IMAGE, "http://e:2379"), others, "etcd-backups", ["ReadWriteOnce"]
    )
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "node-3"}
    free = co_locate(
        writer_pod(URL, "p", IMAGE, "http://e:2379"), others[:3], "etcd-backups", ["ReadWriteOnce"]
    )
    assert "nodeSelector" not in free["spec"]
    shared = co_locate(
        writer_pod(URL, "p", IMAGE, "http://e:2379"), others, "etcd-backups", ["ReadWriteMany"]
    )
    assert "nodeSelector" not in shared["spec"]


def status(phase="Running", terminated=None, waiting=None, conditions=None):
    state = {"terminated": terminated} if terminated else {"waiting": waiting} if waiting else {}
    return {
        "spec": {"containers": [{"name": "write", "image": IMAGE}]},
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "write", "state": state}],
            "conditions": conditions or [],
        },
    }


def test_judging_the_helper_pod():
    assert judge_pod(status("Succeeded", terminated={"exitCode": 0})) == ("done", None)
    state, why = judge_pod(status("Failed", terminated={"exitCode": 2, "message": "no space"}))
    assert state == "failed" and why["exit_code"] == 2 and why["message"] == "no space"
    state, why = judge_pod(status("Pending", waiting={"reason": "ErrImagePull", "message": "m"}))
    assert state == "failed" and why["reason"] == "ErrImagePull"
    waiting = {"reason": "ContainerCreating", "message": "claim etcd-backups is not Bound"}
    assert judge_pod(status("Pending", waiting=waiting)) == (
        "running",
        "ContainerCreating: claim etcd-backups is not Bound",
    )
    unschedulable = [
        {
            "type": "PodScheduled",
            "reason": "Unschedulable",
            "message": "volume node affinity conflict",
        }
    ]
    assert judge_pod(status("Pending", conditions=unschedulable)) == (
        "running",
        "unschedulable: volume node affinity conflict",
    )


def test_the_result_is_the_last_json_line_of_the_log():
    assert last_json('warning\n{"size": 3, "sha256": "ab"}\n') == {"size": 3, "sha256": "ab"}
    assert last_json("Traceback\n{not json\n") is None


def test_file_write_read_and_delete_in_a_mounted_claim(tmp_path):
    loc = parse_object_url("pvc://etcd-backups/a/b/snap.db")
    data = b"snapshot" * 1000
    written = upload_file(loc, iter([data[:100], data[100:]]), root=str(tmp_path))
    assert written == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == ["snap.db", "snap.db.sha256"]
    out = io.BytesIO()
    read = download_file(loc, out, root=str(tmp_path))
    assert out.getvalue() == data and read["metadata_sha256"] == written["sha256"]
    delete_file(loc, root=str(tmp_path))
    assert list((tmp_path / "a" / "b").iterdir()) == []


def test_an_empty_or_broken_stream_leaves_no_file(tmp_path):
    loc = parse_object_url("pvc://etcd-backups/snap.db")
    with pytest.raises(ObjectStoreError, match="empty"):
        upload_file(loc, iter([]), root=str(tmp_path))

    def broken():
        yield b"part of it"
        raise ConnectionError("member went away")

    with pytest.raises(ConnectionError):
        upload_file(loc, broken(), root=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_the_verification_pod_reads_a_claim_read_only_without_credentials():
    backup = {
        "metadata": {"name": "nightly", "namespace": "prod", "uid": "0b7c1234-aaaa-bbbb"},
        "spec": {
            "source": {"clusterName": "c"},
            "destination": {"objectURLTemplate": URL, "credentialsSecret": "ignored"},
        },
        "status": {
            "phase": "Completed",
            "objectURL": URL,
            "sha256": "ab" * 32,
            "etcdVersion": "3.6.16",
        },
    }
    pod = render_pod(backup, IMAGE, "quay.io/coreos/etcd:v3.6.16")
    volumes = pod["spec"]["volumes"]
    assert {
        "name": "backup-claim",
        "persistentVolumeClaim": {"claimName": "etcd-backups", "readOnly": True},
    } in volumes
    assert not [v for v in volumes if "secret" in v]
    assert snapshot_volumes("ignored", URL) == [v for v in volumes if v["name"] != "scratch"]
    fetch = pod["spec"]["initContainers"][0]
    assert fetch["name"] == "fetch"
    assert {"name": "backup-claim", "mountPath": PVC_MOUNT, "readOnly": True} in fetch[
        "volumeMounts"
    ]
    assert "--credentials-dir" not in fetch["command"]
    others = pod["spec"]["initContainers"][1:] + pod["spec"]["containers"]
    assert all(m["name"] != "backup-claim" for c in others for m in c["volumeMounts"])
