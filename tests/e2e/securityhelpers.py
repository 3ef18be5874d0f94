"""etcd clients for the security e2e tests: etcdctl run inside a member pod with the
certificate files of a Secret; whether client TLS was turned on or off on every member, and a
CA rotation is done (shared with bench/run.py, client_tls and ca_rotation)."""

from __future__ import annotations

import base64
import json
import time

ETCDCTL = "/usr/local/bin/etcdctl"


def secret_files(kube, namespace, name):
    data = kube.get("secret", name, namespace)["data"]
    return {key: base64.b64decode(value).decode() for key, value in data.items()}


class InPodClient:
    """etcdctl run inside a member pod, so that the client Service's name resolves and is the
    name the server certificate is checked against, with the certificate files it is given."""

    def __init__(self, kube, namespace, pod, cluster):
        self.kube, self.namespace, self.pod = kube, namespace, pod
        self.endpoint = f"https://{cluster}-client.{namespace}.svc.cluster.local:2379"

    def install(self, directory, files):
        self.kube.exec(self.namespace, self.pod, "mkdir", "-p", directory)
        for key, content in files.items():
            self.kube.run(
                "exec", "-i", "-n", self.namespace, self.pod, "--",
                "sh", "-c", f"cat > {directory}/{key}",
                stdin=content,
            )  # fmt: skip

    def etcdctl(self, directory, *args, with_certificate=True):
        tls = [f"--cacert={directory}/ca.crt"]
        if with_certificate:
            tls += [f"--cert={directory}/tls.crt", f"--key={directory}/tls.key"]
        return self.kube.run(
            "exec", "-n", self.namespace, self.pod, "--",
            ETCDCTL, f"--endpoints={self.endpoint}", "--dial-timeout=3s", "--command-timeout=5s",
            *tls, *args,
            check=False, timeout=60,
        )  # fmt: skip

    def etcdctl_once_reachable(self, directory, *args, timeout=60):
        """``etcdctl`` retried until it succeeds or ``timeout`` passes (the last result), for
        a first call: the client Service's endpoints may trail the cluster's Available."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.etcdctl(directory, *args)
            if result.returncode == 0 or time.monotonic() > deadline:
                return result
            time.sleep(1)


def members_serve(cluster, tls: bool) -> bool:
    """Whether every member of the 3 runs its cluster's configuration, healthy, and serves
    clients over TLS only (``tls``) or plain HTTP only, and the cluster is Available."""
    status = cluster.get().get("status", {})
    members = status.get("members", [])
    clients = [(p["spec"].get("tls") or {}).get("client") for p in cluster.peers()]
    return (
        len(members) == 3
        and all(m.get("configUpToDate") and m["healthy"] for m in members)
        and len(clients) == 3
        and all(
            (c is not None and not c.get("servePlainHTTP")) if tls else c is None for c in clients
        )
        and cluster.condition("Available").get("status") == "True"
    )


def use_application_certificate(cluster, writer) -> None:
    """Make ``writer`` (upgradehelpers.AckedWriter) write with the application certificate in
    ``<cluster>-client-tls`` now, as an application that reads its mounted Secret again for new
    connections."""
    files = secret_files(cluster.kube, cluster.namespace, f"{cluster.name}-client-tls")
    server_name = f"{cluster.name}-client.{cluster.namespace}.svc.cluster.local"
    writer.use_tls(files["ca.crt"], files["tls.crt"], files["tls.key"], server_name)


def ca_rotated(cluster, request: str) -> bool:
    """Whether the CA rotation asked for with ``request`` is over: answered, no stage left, and
    every member of the 3 healthy, restarted onto the new CA alone, and Available."""
    status = cluster.get().get("status", {})
    tls, members = status.get("tls", {}), status.get("members", [])
    return (
        tls.get("rotatedFor") == request
        and not tls.get("rotation")
        and len(members) == 3
        and all(m.get("configUpToDate") and m["healthy"] for m in members)
        and not [p for p in cluster.peers() if "trust" in str(p["spec"].get("tls"))]
        and cluster.condition("Available").get("status") == "True"
    )


def peer_traffic_on(cluster, scheme: str, members: int) -> bool:
    """Whether the cluster is Available with ``members`` members, each running its cluster's
    configuration with peer TLS on (``https``) or off (``http``), and listed in etcd with peer
    URLs of that scheme."""
    status = cluster.get().get("status", {})
    if not (
        len(status.get("members", [])) == members
        and all(m.get("configUpToDate") and m["healthy"] for m in status["members"])
        and any(c["type"] == "Available" and c["status"] == "True" for c in status["conditions"])
    ):
        return False
    peers = cluster.peers()
    if len(peers) != members or any(
        bool((p["spec"].get("tls") or {}).get("peer")) != (scheme == "https") for p in peers
    ):
        return False
    listed = cluster.etcdctl("member", "list", "-w", "json", check=False)
    if listed.returncode != 0:
        return False
    urls = [u for m in json.loads(listed.stdout)["members"] for u in m.get("peerURLs", [])]
    return len(urls) == members and all(u.startswith(f"{scheme}://") for u in urls)
