"""The pieces of the snapshot helper pods: volumes, the fetch init container, the etcd tool per
version, and reading failures out of a pod's status."""

from __future__ import annotations

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_helper_pods import (
    CREDENTIALS_DIR,
    SNAPSHOT_DIR,
    SNAPSHOT_FILE,
    container_failure,
    container_waiting,
    etcd_tool,
    fetch_container,
    parse_version,
    pod_ready,
    running_step,
    snapshot_volumes,
)

URL = "s3://b/k.db?endpoint=http://10.213.0.1:9000&region=us-east-1"
IMAGE = "quay.io/quorumkeeper/etcd-operator:0.1.0"


def test_volumes_without_and_with_credentials():
    assert snapshot_volumes() == [{"name": "snapshot", "emptyDir": {}}]
    assert snapshot_volumes("s3-creds") == [
        {"name": "snapshot", "emptyDir": {}},
        {"name": "store-credentials", "secret": {"secretName": "s3-creds"}},
    ]


def test_fetch_container_runs_the_cli_into_the_snapshot_file():
    c = fetch_container(IMAGE, URL)
    assert c["name"] == "fetch" and c["image"] == IMAGE
    assert c["command"] == [
        "python3",
        "-m",
        "ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore",
        "fetch",
        "--url",
        URL,
        "--dest",
        SNAPSHOT_FILE,
    ]
    assert c["volumeMounts"] == [{"name": "snapshot", "mountPath": SNAPSHOT_DIR}]
    assert SNAPSHOT_FILE.startswith(SNAPSHOT_DIR + "/")


def test_fetch_container_with_checksum_and_credentials():
    c = fetch_container(IMAGE, URL, sha256="ab" * 32, credentials_secret="s3-creds")
    cmd = c["command"]
    assert cmd[cmd.index("--sha256") + 1] == "ab" * 32
    assert cmd[cmd.index("--credentials-dir") + 1] == CREDENTIALS_DIR
    assert {"name": "store-credentials", "mountPath": CREDENTIALS_DIR, "readOnly": True} in c[
        "volumeMounts"
    ]
    # No shell: the URL is one argument however many & and ? it holds.
    assert URL in cmd and "sh" not in cmd[0]


@pytest.mark.parametrize(
    ("version", "argv", "env"),
    [
        ("3.4.23", ["/usr/local/bin/etcdctl"], [{"name": "ETCDCTL_API", "value": "3"}]),
        ("v3.4.0", ["/usr/local/bin/etcdctl"], [{"name": "ETCDCTL_API", "value": "3"}]),
        ("3.5.35", ["/usr/local/bin/etcdutl"], []),
        ("3.6.16", ["/usr/local/bin/etcdutl"], []),
        ("3.10.1", ["/usr/local/bin/etcdutl"], []),
    ],
)
def test_etcd_tool_per_version(version, argv, env):
    assert etcd_tool(version) == (argv, env)


def test_versions_that_are_not_versions_are_refused():
    assert parse_version("3.6") == (3, 6, 0)
    for bad in ("", None, "latest", "x3.5"):
        with pytest.raises(ValueError, match="not an etcd version"):
            etcd_tool(bad)


def pod(init=(), main=(), conditions=(), deleting=False):
    meta = {"name": "p"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {
            "initContainers": [{"name": n, "image": f"img-{n}"} for n, _ in init],
            "containers": [{"name": n, "image": f"img-{n}"} for n, _ in main],
        },
        "status": {
            "phase": "Pending",
            "initContainerStatuses": [{"name": n, **s} for n, s in init],
            "containerStatuses": [{"name": n, **s} for n, s in main],
            "conditions": [{"type": t, "status": v} for t, v in conditions],
        },
    }


DONE = {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
RUNNING = {"state": {"running": {}}}
WAITING = {"state": {"waiting": {"reason": "PodInitializing"}}}


def test_no_failure_while_everything_runs_or_completed():
    assert container_failure(pod(init=[("fetch", DONE), ("status", RUNNING)])) is None
    assert container_failure({}) is None
    assert container_failure(None) is None


def test_the_first_failed_init_container_is_named_with_exit_code_and_message():
    failed = {
        "state": {
            "terminated": {
                "exitCode": 3,
                "reason": "Error",
                "message": "sha256 mismatch: ...\n",
            }
        }
    }
    p = pod(init=[("fetch", failed), ("status", WAITING)], main=[("etcd", WAITING)])
    assert container_failure(p) == {
        "container": "fetch",
        "exit_code": 3,
        "reason": "Error",
        "message": "sha256 mismatch: ...",
    }


def test_a_main_container_that_exited_and_restarts_counts_as_failed():
    crashed = {
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1}},
    }
    p = pod(init=[("fetch", DONE)], main=[("etcd", crashed)])
    assert container_failure(p) == {
        "container": "etcd",
        "exit_code": 1,
        "reason": "Error",
        "message": "",
    }


def test_waiting_on_an_image_names_container_and_image():
    pull = {"state": {"waiting": {"reason": "ErrImagePull", "message": "no such image"}}}
    p = pod(init=[("fetch", DONE), ("status", pull)])
    assert container_waiting(p, {"ErrImagePull", "ImagePullBackOff"}) == {
        "container": "status",
        "image": "img-status",
        "reason": "ErrImagePull",
        "message": "no such image",
    }
    assert container_waiting(p, {"CrashLoopBackOff"}) is None


def test_ready_and_running_step():
    p = pod(init=[("fetch", DONE), ("restore", RUNNING)], main=[("etcd", WAITING)])
    assert not pod_ready(p)
    assert running_step(p) == "restore"
    ready = pod(init=[("fetch", DONE)], main=[("etcd", RUNNING)], conditions=[("Ready", "True")])
    assert pod_ready(ready)
    assert running_step(ready) == "etcd"
    assert not pod_ready(
        pod(main=[("etcd", RUNNING)], conditions=[("Ready", "True")], deleting=True)
    )
    assert running_step({"status": {}}) == "Pending"
