"""etcd authentication end to end: spec.auth turns authentication on for a running cluster,
gives each application user exactly its keys with its credentials in a Secret, keeps the
operator working (scale-up, backups) and converges when users change or auth is turned off."""

from __future__ import annotations

import base64
import json

from backuphelpers import BACKUPS, backup_manifest, credentials_secret, object_url, wait_backup
from kubehelpers import wait_until
from securityhelpers import InPodClient, secret_files
from test_backup_pvc import CLAIM, claim

BUCKET = "auth-backups"
APP = {"name": "app", "permissions": [{"keyPrefix": "/app/", "access": "readwrite"}]}
RESTORES = "etcdrestores.etcd.quorumkeeper.dev"
READER = {"name": "reader", "permissions": [{"keyPrefix": "/app/", "access": "read"}]}


def password(kube, namespace, secret):
    data = kube.get("secret", secret, namespace)["data"]
    return base64.b64decode(data["password"]).decode()


def set_password(kube, namespace, secret, value):
    patch = {"data": {"password": base64.b64encode(value.encode()).decode()}}
    kube("patch", "secret", secret, "-n", namespace, "--type=merge", "-p", json.dumps(patch))


def wait_auth_applied(etcd_cluster, enabled, users):
    def applied():
        cluster = etcd_cluster.get()
        auth = cluster.get("status", {}).get("auth") or {}
        condition = etcd_cluster.condition("AuthApplied")
        ok = (
            auth.get("enabled") is enabled
            and [u["name"] for u in auth.get("users", [])] == users
            and condition.get("status") == "True"
        )
        return ok and auth

    return wait_until(f"spec.auth applied: enabled={enabled}, users={users}", applied, 120)


def test_auth_on_a_running_cluster_scopes_each_user_and_keeps_the_operator_working(
    etcd_cluster, s3, s3_port
):
    kube, ns, name = etcd_cluster.kube, etcd_cluster.namespace, etcd_cluster.name
    etcd_cluster.create(1)
    etcd_cluster.wait_available(1)
    etcd_cluster.put("/app/before", "written before auth")

    etcd_cluster.patch_spec(auth={"users": [APP]})
    auth = wait_auth_applied(etcd_cluster, True, ["app"])
    assert auth["rootSecretName"] == f"{name}-user-root"
    assert {"AuthenticationChanged", "CredentialsCreated"} <= etcd_cluster.event_reasons()
    app = f"app:{password(kube, ns, f'{name}-user-app')}"

    anonymous = etcd_cluster.etcdctl("get", "/app/before", check=False)
    assert anonymous.returncode != 0 and "user name is empty" in anonymous.stderr
    assert etcd_cluster.etcdctl(f"--user={app}", "put", "/app/k", "v").returncode == 0
    got = etcd_cluster.etcdctl(f"--user={app}", "get", "/app/before", "--print-value-only")
    assert got.stdout.strip() == "written before auth"
    outside = etcd_cluster.etcdctl(f"--user={app}", "put", "/other", "v", check=False)
    assert outside.returncode != 0 and "permission denied" in outside.stderr

    # The operator keeps managing the cluster as root: learners are added and promoted.
    etcd_cluster.scale(3)
    etcd_cluster.wait_available(3, timeout=240)
    assert etcd_cluster.condition("AuthApplied")["status"] == "True"

    # ... and backs it up.
    kube.apply(credentials_secret(), namespace=ns)
    template = object_url(BUCKET, s3_port)
    kube.apply(backup_manifest("with-auth", {"clusterName": name}, template), namespace=ns)
    status = wait_backup(kube, ns, "with-auth", "Completed", 120)
    assert status["keys"] >= 2
    assert kube.get(BACKUPS, "with-auth", namespace=ns)["status"]["phase"] == "Completed"

    # Restored into a new cluster: the snapshot keeps the users and root's password, which the
    # restore carries over so that the operator can log in; app gets the new cluster's Secret.
    template = etcd_cluster.manifest(1)["spec"] | {"auth": {"users": [APP]}}
    restore = {
        "apiVersion": "etcd.quorumkeeper.dev/v1alpha1",
        "kind": "EtcdRestore",
        "metadata": {"name": "auth-restore"},
        "spec": {
            "source": {"backupName": "with-auth"},
            "clusterName": "restored",
            "clusterTemplate": template,
        },
    }
    kube.apply(restore, namespace=ns)
    wait_until(
        "EtcdRestore auth-restore Completed",
        lambda: (
            kube.get(RESTORES, "auth-restore", ns).get("status", {}).get("phase") == "Completed"
        ),
        300,
    )
    restored = type(etcd_cluster)(kube, ns, "restored")
    wait_auth_applied(restored, True, ["app"])
    assert password(kube, ns, "restored-user-root") == password(kube, ns, f"{name}-user-root")
    restored_app = f"app:{password(kube, ns, 'restored-user-app')}"
    got = restored.etcdctl(f"--user={restored_app}", "get", "/app/before", "--print-value-only")
    assert got.stdout.strip() == "written before auth"

    # Root's Secret changed by hand while authentication is on: once the operator reads it again
    # (here because spec.auth changes), etcd refuses the new password. The status says so at once
    # (health unknown, Degraded) instead of staying Available, and nothing is done to the
    # cluster, which keeps serving; with the old password back, everything converges again.
    root_secret = f"{name}-user-root"
    root_password = password(kube, ns, root_secret)
    set_password(kube, ns, root_secret, "not-what-etcd-has")
    etcd_cluster.patch_spec(auth={"users": [APP, READER]})
    wait_until(
        "the cluster Degraded by refused credentials",
        lambda: (
            etcd_cluster.condition("Degraded").get("reason") == "CredentialsRefused"
            and etcd_cluster.condition("Available").get("status") == "Unknown"
        ),
        120,
    )
    assert etcd_cluster.get()["status"]["readyReplicas"] == 3, "last seen health is kept"
    assert {"AuthFailed", "CredentialsRefused"} <= etcd_cluster.event_reasons()
    got = etcd_cluster.etcdctl(f"--user={app}", "get", "/app/k", "--print-value-only")
    assert got.stdout.strip() == "v", "etcd itself keeps serving its users"
    set_password(kube, ns, root_secret, root_password)
    wait_auth_applied(etcd_cluster, True, ["app", "reader"])
    etcd_cluster.wait_available(3, timeout=120)
    assert etcd_cluster.condition("Degraded")["status"] == "False"

    # Users converge: app removed (its user and role), reader added with read only.
    etcd_cluster.patch_spec(auth={"users": [READER]})
    wait_auth_applied(etcd_cluster, True, ["reader"])
    reader = f"reader:{password(kube, ns, f'{name}-user-reader')}"
    got = etcd_cluster.etcdctl(f"--user={reader}", "get", "/app/k", "--print-value-only")
    assert got.stdout.strip() == "v"
    denied = etcd_cluster.etcdctl(f"--user={reader}", "put", "/app/k", "w", check=False)
    assert denied.returncode != 0 and "permission denied" in denied.stderr
    gone = etcd_cluster.etcdctl(f"--user={app}", "get", "/app/k", check=False)
    assert gone.returncode != 0

    # Turned off: anyone may use etcd again; the users stay for when it is turned back on.
    etcd_cluster.patch_spec(auth={"enabled": False, "users": [READER]})
    wait_auth_applied(etcd_cluster, False, ["reader"])
    assert etcd_cluster.etcdctl("put", "/open", "again").returncode == 0


def test_with_tls_each_user_authenticates_with_its_own_certificate(etcd_cluster):
    kube, ns, name = etcd_cluster.kube, etcd_cluster.namespace, etcd_cluster.name
    manifest = etcd_cluster.manifest(1)
    manifest["spec"]["tls"] = {"client": {}, "peer": {}}
    manifest["spec"]["auth"] = {"users": [APP]}
    kube.apply(manifest)
    etcd_cluster.wait_available(1, timeout=240)
    wait_auth_applied(etcd_cluster, True, ["app"])
    status = etcd_cluster.get()["status"]
    users = [c for c in status["tls"]["certificates"] if c["purpose"] == "user"]
    assert [(c["secretName"], c["subject"]) for c in users] == [(f"{name}-user-app", "app")]

    pod = etcd_cluster.pod_of(f"{name}-0")["metadata"]["name"]
    client = InPodClient(kube, ns, pod, name)
    files = secret_files(kube, ns, f"{name}-user-app")
    assert files["username"] == "app" and files["password"]
    client.install("/tmp/app", {k: files[k] for k in ("ca.crt", "tls.crt", "tls.key")})
    put = client.etcdctl_once_reachable("/tmp/app", "put", "/app/cert", "by certificate")
    assert put.returncode == 0, put.stderr
    outside = client.etcdctl("/tmp/app", "put", "/elsewhere", "x")
    assert outside.returncode != 0 and "permission denied" in outside.stderr

    # Backed up to a claim: the pod that writes it reaches etcd with the operator's client
    # certificate and root's password from the Secrets it mounts (none in its spec).
    kube.apply(claim(), namespace=ns)
    url = f"pvc://{CLAIM}/secure/snap.db"
    kube.apply(backup_manifest("to-claim", {"clusterName": name}, url, secret=None), namespace=ns)
    status = wait_backup(kube, ns, "to-claim", "Completed", 180)
    assert status["keys"] >= 1 and status["objectURL"] == url
    wait_until(
        "EtcdBackup to-claim Verified",
        lambda: any(
            c["type"] == "Verified" and c["status"] == "True"
            for c in (kube.get(BACKUPS, "to-claim", namespace=ns).get("status") or {}).get(
                "conditions", []
            )
        ),
        180,
    )
