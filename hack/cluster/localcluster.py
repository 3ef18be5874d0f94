#!/usr/bin/env python3
"""A local Kubernetes cluster made of real components running as host processes.

    localcluster.py up [--nodes N]     start (or finish starting) the cluster; prints the kubeconfig
    localcluster.py down               stop everything, remove namespaces, bridge, mounts and state
    localcluster.py status             what runs, and the nodes as the API server sees them
    localcluster.py deploy-operator    "build" the operator image and deploy config/default into it
    localcluster.py undeploy-operator  remove the operator (CRDs stay: they may hold user data)

Components: an etcd for the control plane, kube-apiserver (RBAC + Node authorizer, ServiceAccount
tokens), kube-controller-manager, kube-scheduler, kube-proxy (iptables mode, ClusterIPs), CoreDNS
(cluster.local), one node agent per node (pods as host processes in their own network and mount
namespaces) and the local-path volume provisioner. Binaries come from `hack/toolchain/install.py`
(see its manifest). Addresses: see docs/local-cluster.md.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "toolchain"))
import manifest as toolchain_manifest  # noqa: E402 - hack/toolchain/manifest.py
from pki import CertificateAuthority, service_account_key  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("QK_CACHE", Path.home() / ".cache" / "quorumkeeper"))
STATE = Path(os.environ.get("QK_STATE", "/var/lib/quorumkeeper"))
MANIFEST = CACHE / "toolchain.json"

BRIDGE = "qk0"
GATEWAY = "10.213.0.1"
POD_CIDR = "10.213.0.0/16"
SERVICE_CIDR = "10.214.0.0/16"
KUBERNETES_SERVICE_IP = "10.214.0.1"
CLUSTER_DOMAIN = "cluster.local"
APISERVER_PORT = 6443
CONTROL_PLANE_ETCD_PORT = 12379
FORWARD_CHAIN = "QK-FORWARD"
OPERATOR_IMAGE = "quay.io/quorumkeeper/etcd-operator:0.1.0"
# The files the Dockerfile copies one by one (the directories are copied whole).
IMAGE_FILES = ("watches.yaml", "requirements.yml", "ansible.cfg", "config/prometheus/rules.yaml")
ETCD_REPOSITORY = "quay.io/coreos/etcd"
OLM_REPOSITORY = "quay.io/operator-framework/olm"
OPM_REPOSITORY = "quay.io/operator-framework/opm"
DEFAULT_NODES = 3


def log(message: str) -> None:
    print(f"[localcluster] {message}", file=sys.stderr, flush=True)


def run(cmd: list[str], check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, text=True, capture_output=True, **kwargs)
    if check and result.returncode != 0:
        raise SystemExit(f"command failed ({result.returncode}): {' '.join(cmd)}\n{result.stderr}")
    return result


def wait_for(description: str, predicate, timeout: float = 60.0, interval: float = 0.25):
    """Poll predicate until it returns a truthy value; fail with the description after timeout."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as error:  # noqa: BLE001 - any failure means "not yet"
            last_error = error
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {description}: {last_error}")


def toolchain() -> dict:
    if not MANIFEST.exists():
        raise SystemExit(f"{MANIFEST} is missing: run `python3 hack/toolchain/install.py` first")
    return json.loads(MANIFEST.read_text())


def toolchain_component(key: str):
    """One component of the toolchain, waited for while `make test` builds it in the
    background (MinIO, Prometheus, OLM, ...: hack/toolchain/manifest.py)."""
    return toolchain_manifest.component(key)


# --------------------------------------------------------------------------- processes


@dataclass
class Component:
    """A long-running host process, supervised through a pid file and its recorded argv."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    directory: Path = STATE / "components"

    @property
    def pid_file(self) -> Path:
        return self.directory / self.name / "pid"

    @property
    def cmdline_file(self) -> Path:
        return self.directory / self.name / "cmdline"

    @property
    def log_file(self) -> Path:
        return STATE / "logs" / f"{self.name}.log"

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        # A recycled pid that runs something else is not ours. What runs is what was started,
        # as recorded: after a rebuild (a new binary path) the old process is still ours, to be
        # stopped before the new one starts, not left running beside it.
        started = _recorded_argv(self.pid_file)[0] or self.argv[0]
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            return None
        return pid if cmdline == started else None

    def start(self) -> bool:
        """Start unless already running with the same argv; True when it was (re)started."""
        running = self.pid()
        recorded = self.cmdline_file.read_text() if self.cmdline_file.exists() else ""
        if running and recorded == json.dumps(self.argv):
            return False
        if running:
            self.stop()
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as output:
            process = subprocess.Popen(
                self.argv,
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, **self.env),
                start_new_session=True,
            )
        self.pid_file.write_text(str(process.pid))
        self.cmdline_file.write_text(json.dumps(self.argv))
        return True

    def stop(self, timeout: float = 15.0) -> None:
        pid = self.pid()
        if pid is None:
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
                    return
                time.sleep(0.1)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


# --------------------------------------------------------------------------- configuration


def write_kubeconfig(path: Path, ca: Path, cert: Path, key: Path, server: str) -> Path:
    # JSON is valid YAML, and every Kubernetes client reads it.
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "quorumkeeper",
                "cluster": {"server": server, "certificate-authority": str(ca)},
            }
        ],
        "users": [
            {"name": "user", "user": {"client-certificate": str(cert), "client-key": str(key)}}
        ],
        "contexts": [
            {"name": "quorumkeeper", "context": {"cluster": "quorumkeeper", "user": "user"}}
        ],
        "current-context": "quorumkeeper",
    }
    # Written aside and renamed into place: `up` on a running cluster writes it again, and a
    # kubectl reading it meanwhile found it empty and asked localhost:8080 (a CI run lost an
    # e2e test to that while a local-cluster test ran `up` beside it).
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(config, indent=2) + "\n")
    partial.chmod(0o600)
    partial.replace(path)
    return path


@dataclass
class Layout:
    """Where everything of a running cluster lives under QK_STATE."""

    state: Path = STATE

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    def component_kubeconfig(self, name: str) -> Path:
        return self.state / "kubeconfigs" / f"{name}.kubeconfig"

    def node_dir(self, node: str) -> Path:
        return self.state / "nodes" / node


def prepare_pki(layout: Layout, nodes: list[str]) -> dict[str, Path]:
    ca = CertificateAuthority(layout.pki)
    server = f"https://127.0.0.1:{APISERVER_PORT}"
    (layout.state / "kubeconfigs").mkdir(parents=True, exist_ok=True)
    apiserver_names = (
        "127.0.0.1",
        GATEWAY,
        KUBERNETES_SERVICE_IP,
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        f"kubernetes.default.svc.{CLUSTER_DOMAIN}",
    )
    paths = {"ca": ca.cert_path}
    paths["apiserver.crt"], paths["apiserver.key"] = ca.issue(
        "apiserver", "kube-apiserver", server_names=apiserver_names
    )
    paths["kubelet-client.crt"], paths["kubelet-client.key"] = ca.issue(
        "apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",)
    )
    paths["sa.key"], paths["sa.pub"] = service_account_key(layout.pki)
    identities = {
        "admin": ("kubernetes-admin", ("system:masters",)),
        "controller-manager": ("system:kube-controller-manager", ()),
        "scheduler": ("system:kube-scheduler", ()),
        "kube-proxy": ("system:kube-proxy", ()),
        # CoreDNS and the provisioner are cluster add-ons we run on the host; they get admin rights
        # rather than hand-written ClusterRoles that would only mirror their upstream manifests.
        "coredns": ("quorumkeeper:coredns", ("system:masters",)),
        "provisioner": ("quorumkeeper:local-path-provisioner", ("system:masters",)),
    }
    for node in nodes:
        identities[node] = (f"system:node:{node}", ("system:nodes",))
    for name, (common_name, groups) in identities.items():
        cert, key = ca.issue(name, common_name, groups)
        target = layout.kubeconfig if name == "admin" else layout.component_kubeconfig(name)
        write_kubeconfig(target, ca.cert_path, cert, key, server)
    return paths


# The real MinIO image's /usr/bin/docker-entrypoint.sh (minio/minio dockerscripts/) without its
# deprecated user switch: arguments that do not start with `minio` are given to minio.
MINIO_ENTRYPOINT = """#!/bin/sh
if [ "${1}" != "minio" ] && [ -n "${1}" ]; then
    set -- minio "$@"
fi
exec "$@"
"""


def image_map(tools: dict, operator_root: Path, minio_entrypoint: Path | None = None) -> dict:
    """Image references -> host directories, for the node agents (see docs/local-cluster.md)."""
    base_path = "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
    images = []
    for version, directory in sorted(tools["etcd"].items()):
        images.append(
            {
                "image": f"{ETCD_REPOSITORY}:v{version}",
                "binds": {"/usr/local/bin": directory},
                "env": {"PATH": base_path},
                "cmd": ["/usr/local/bin/etcd"],
            }
        )
    # A shell image for tests and debugging: the host's own userland (sh, sleep, getent, ...).
    for reference in ("busybox:*", "docker.io/library/busybox:*"):
        images.append({"image": reference, "binds": {}, "env": {"PATH": base_path}})
    venv_bin = str(Path(tools["venv"]) / "bin")
    images.append(
        {
            "image": OPERATOR_IMAGE,
            "binds": {
                "/opt/ansible": str(operator_root),
                "/usr/local/bin/ansible-operator": str(
                    Path(tools["ansible_operator"]) / "ansible-operator"
                ),
            },
            "env": {
                # /opt/ansible/bin first: ansible-operator runs its warm-start ansible-runner,
                # and the modules run in its warm interpreter (as the Dockerfile sets them).
                "PATH": f"/opt/ansible/bin:{venv_bin}:{base_path}",
                "QK_MODULE_PYTHON": "/opt/ansible/bin/module-python",
                "HOME": "/opt/ansible",
                "ANSIBLE_CONFIG": "/opt/ansible/ansible.cfg",
                "ANSIBLE_LOCAL_TEMP": "/tmp/ansible",
            },
            "entrypoint": [
                "/usr/local/bin/ansible-operator",
                "run",
                "--watches-file=/opt/ansible/watches.yaml",
            ],
            "workingDir": "/opt/ansible",
        }
    )
    images += object_store_images(tools, base_path, minio_entrypoint)
    images += olm_images(tools, base_path)
    return {"images": images}


def olm_images(tools: dict, base_path: str) -> list:
    """OLM v0's image (olm and catalog operators, laid out as upstream's /bin) and opm's, both
    only at the version the toolchain built: a manifest naming another stays ErrImagePull."""
    images = []
    if tools.get("olm"):
        images.append(
            {
                "image": f"{OLM_REPOSITORY}:{tools['olm']['version']}",
                "binds": {"/bin/olm": tools["olm"]["olm"], "/bin/catalog": tools["olm"]["catalog"]},
                "env": {"PATH": base_path},
            }
        )
    if tools.get("opm"):
        images.append(
            {
                "image": f"{OPM_REPOSITORY}:{tools['opm']['version']}",
                "binds": {"/bin/opm": tools["opm"]["opm"]},
                "env": {"PATH": base_path},
                "entrypoint": ["/bin/opm"],
            }
        )
    return images


def object_store_images(tools: dict, base_path: str, minio_entrypoint: Path | None) -> list:
    """The object stores of `make object-stores`, laid out and started as their real images are."""
    images = []
    if tools.get("minio") and minio_entrypoint:
        for reference in ("quay.io/minio/minio:*", "minio/minio:*", "docker.io/minio/minio:*"):
            images.append(
                {
                    "image": reference,
                    "binds": {
                        "/usr/bin/minio": str(Path(tools["minio"]) / "minio"),
                        "/usr/bin/docker-entrypoint.sh": str(minio_entrypoint),
                    },
                    "env": {"PATH": base_path, "MC_CONFIG_DIR": "/tmp/.mc"},
                    "entrypoint": ["/usr/bin/docker-entrypoint.sh"],
                    "cmd": ["minio"],
                }
            )
    venv_bin = Path(tools["venv"]) / "bin"
    for reference in ("motoserver/moto:*", "docker.io/motoserver/moto:*"):
        images.append(
            {
                # The venv's moto_server script; its interpreter line names the venv's python,
                # which the container sees because its root is an overlay of the host's.
                "image": reference,
                "binds": {"/usr/local/bin/moto_server": str(venv_bin / "moto_server")},
                "env": {"PATH": base_path, "PYTHONUNBUFFERED": "1"},
                "entrypoint": ["/usr/local/bin/moto_server", "-H", "0.0.0.0"],
            }
        )
    if tools.get("fake_gcs_server"):
        for reference in ("fsouza/fake-gcs-server:*", "docker.io/fsouza/fake-gcs-server:*"):
            images.append(
                {
                    "image": reference,
                    "binds": {"/bin/fake-gcs-server": tools["fake_gcs_server"]},
                    "env": {"PATH": base_path},
                    "entrypoint": ["/bin/fake-gcs-server", "-data", "/data"],
                }
            )
    return images


COREFILE = """\
{domain}:53 in-addr.arpa:53 {{
    bind {address}
    errors
    kubernetes {domain} in-addr.arpa {{
        kubeconfig {kubeconfig} quorumkeeper
        pods verified
        ttl 2
    }}
    loadbalance
}}
.:53 {{
    bind {address}
    errors
    # No upstream: nothing but the cluster's own names resolves, so no query leaves the machine.
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""


# --------------------------------------------------------------------------- network


def ensure_network() -> None:
    if run(["ip", "link", "show", BRIDGE], check=False).returncode != 0:
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    addresses = run(["ip", "-o", "-4", "addr", "show", "dev", BRIDGE]).stdout
    if f"{GATEWAY}/16" not in addresses:
        run(["ip", "addr", "add", f"{GATEWAY}/16", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
    # Forwarding is on so pods reach ClusterIPs through the host; this chain makes sure nothing
    # from the pod network is ever forwarded anywhere but back into the pod network.
    if run(["iptables", "-N", FORWARD_CHAIN], check=False).returncode == 0:
        run(["iptables", "-A", FORWARD_CHAIN, "-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"])
        run(["iptables", "-A", FORWARD_CHAIN, "!", "-i", BRIDGE, "-o", BRIDGE, "-j", "DROP"])
    if run(["iptables", "-C", "FORWARD", "-j", FORWARD_CHAIN], check=False).returncode != 0:
        run(["iptables", "-I", "FORWARD", "1", "-j", FORWARD_CHAIN])


def remove_network() -> None:
    while run(["iptables", "-D", "FORWARD", "-j", FORWARD_CHAIN], check=False).returncode == 0:
        pass
    run(["iptables", "-F", FORWARD_CHAIN], check=False)
    run(["iptables", "-X", FORWARD_CHAIN], check=False)
    run(["ip", "link", "delete", BRIDGE], check=False)


def kill_recorded_containers(state: Path) -> None:
    """SIGKILL the container process groups the node agents recorded (hostNetwork pods too)."""
    for record in state.glob("nodes/*/pods/*/pod.json"):
        try:
            pids = json.loads(record.read_text()).get("containers", {}).values()
        except (OSError, ValueError):
            continue
        for pid in (p for p in pids if isinstance(p, int) and p > 0):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def remove_pod_namespaces() -> None:
    """Kill whatever still runs in a pod network namespace, then delete the namespaces and veths."""
    names = [line.split()[0] for line in run(["ip", "netns", "list"]).stdout.splitlines() if line]
    for name in (n for n in names if n.startswith("qk-")):
        pids = run(["ip", "netns", "pids", name], check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        run(["ip", "netns", "delete", name], check=False)
    for line in run(["ip", "-o", "link", "show"]).stdout.splitlines():
        ifname = line.split(":")[1].strip().split("@")[0]
        if ifname.startswith("qkh"):
            run(["ip", "link", "delete", ifname], check=False)


def unmount_under(path: Path) -> None:
    mounts = [
        line.split()[1]
        for line in Path("/proc/mounts").read_text().splitlines()
        if line.split()[1].startswith(str(path) + "/") or line.split()[1] == str(path)
    ]
    for mountpoint in sorted(mounts, key=len, reverse=True):
        run(["umount", "-l", mountpoint], check=False)


# --------------------------------------------------------------------------- cluster


class LocalCluster:
    def __init__(self, nodes: int = DEFAULT_NODES, layout: Layout | None = None):
        self.layout = layout or Layout()
        self.node_names = [f"node-{i}" for i in range(1, nodes + 1)]

    # components ------------------------------------------------------------

    def components(self, tools: dict, pki: dict[str, Path]) -> list[Component]:
        state = self.layout.state
        kube = Path(tools["kubernetes"])
        etcd_binary = Path(tools["etcd"][max(tools["etcd"], key=_version_key)]) / "etcd"
        kubeconfig = self.layout.component_kubeconfig
        control_plane_peer = f"http://127.0.0.1:{CONTROL_PLANE_ETCD_PORT + 1}"
        components = [
            Component(
                "etcd",
                [
                    str(etcd_binary),
                    "--name=control-plane",
                    f"--data-dir={state / 'etcd'}",
                    f"--listen-client-urls=http://127.0.0.1:{CONTROL_PLANE_ETCD_PORT}",
                    f"--advertise-client-urls=http://127.0.0.1:{CONTROL_PLANE_ETCD_PORT}",
                    f"--listen-peer-urls=http://127.0.0.1:{CONTROL_PLANE_ETCD_PORT + 1}",
                    f"--initial-advertise-peer-urls={control_plane_peer}",
                    f"--initial-cluster=control-plane={control_plane_peer}",
                    "--listen-metrics-urls=http://127.0.0.1:12381",
                    "--unsafe-no-fsync",  # a throwaway test control plane: speed over durability
                    "--quota-backend-bytes=4294967296",
                ],
            ),
            Component(
                "kube-apiserver",
                [
                    str(kube / "kube-apiserver"),
                    f"--etcd-servers=http://127.0.0.1:{CONTROL_PLANE_ETCD_PORT}",
                    "--bind-address=0.0.0.0",
                    f"--advertise-address={GATEWAY}",
                    f"--secure-port={APISERVER_PORT}",
                    f"--service-cluster-ip-range={SERVICE_CIDR}",
                    "--authorization-mode=Node,RBAC",
                    "--enable-admission-plugins=NodeRestriction",
                    "--allow-privileged=true",
                    f"--client-ca-file={pki['ca']}",
                    f"--tls-cert-file={pki['apiserver.crt']}",
                    f"--tls-private-key-file={pki['apiserver.key']}",
                    f"--kubelet-client-certificate={pki['kubelet-client.crt']}",
                    f"--kubelet-client-key={pki['kubelet-client.key']}",
                    "--kubelet-preferred-address-types=InternalIP",
                    f"--service-account-issuer=https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
                    f"--service-account-key-file={pki['sa.pub']}",
                    f"--service-account-signing-key-file={pki['sa.key']}",
                    # Pods on a lost node are evicted after 20s instead of 5 minutes, so node-loss
                    # tests finish; a real cluster keeps the default.
                    "--default-not-ready-toleration-seconds=20",
                    "--default-unreachable-toleration-seconds=20",
                    "--profiling=false",
                ],
            ),
            Component(
                "kube-controller-manager",
                [
                    str(kube / "kube-controller-manager"),
                    f"--kubeconfig={kubeconfig('controller-manager')}",
                    f"--authentication-kubeconfig={kubeconfig('controller-manager')}",
                    f"--authorization-kubeconfig={kubeconfig('controller-manager')}",
                    "--bind-address=127.0.0.1",
                    "--secure-port=10257",
                    "--leader-elect=false",
                    "--use-service-account-credentials=true",
                    f"--root-ca-file={pki['ca']}",
                    f"--service-account-private-key-file={pki['sa.key']}",
                    f"--cluster-signing-cert-file={pki['ca']}",
                    f"--cluster-signing-key-file={self.layout.pki / 'ca.key'}",
                    f"--service-cluster-ip-range={SERVICE_CIDR}",
                    "--controllers=*",
                    "--node-monitor-period=2s",
                    "--node-monitor-grace-period=20s",
                    "--concurrent-gc-syncs=5",
                ],
            ),
            Component(
                "kube-scheduler",
                [
                    str(kube / "kube-scheduler"),
                    f"--kubeconfig={kubeconfig('scheduler')}",
                    f"--authentication-kubeconfig={kubeconfig('scheduler')}",
                    f"--authorization-kubeconfig={kubeconfig('scheduler')}",
                    "--bind-address=127.0.0.1",
                    "--secure-port=10259",
                    "--leader-elect=false",
                ],
            ),
            Component(
                "kube-proxy",
                [
                    str(kube / "kube-proxy"),
                    f"--kubeconfig={kubeconfig('kube-proxy')}",
                    "--proxy-mode=iptables",
                    f"--cluster-cidr={POD_CIDR}",
                    "--masquerade-all",
                    f"--hostname-override={self.node_names[0] if self.node_names else 'host'}",
                    "--bind-address=127.0.0.1",
                    "--healthz-bind-address=127.0.0.1:10256",
                    "--metrics-bind-address=127.0.0.1:10249",
                    "--conntrack-max-per-core=0",
                ],
            ),
            Component(
                "coredns",
                [str(Path(tools["coredns"]) / "coredns"), "-conf", str(state / "Corefile")],
            ),
        ]
        if not self.node_names:
            return components  # control plane only: no pods, so no volumes either
        components += [
            Component(
                "provisioner",
                [
                    str(Path(tools["nodeagent"]) / "nodeagent"),
                    "provision",
                    f"--kubeconfig={kubeconfig('provisioner')}",
                    f"--base-dir={state / 'volumes'}",
                    "--storage-class=local-path",
                    # For volume growth: the default class cannot expand, this one can.
                    "--expandable-storage-class=local-path-expandable",
                ],
            ),
        ]
        for index, node in enumerate(self.node_names, start=1):
            components.append(
                Component(
                    f"nodeagent-{node}",
                    [
                        str(Path(tools["nodeagent"]) / "nodeagent"),
                        "run",
                        f"--node-name={node}",
                        f"--kubeconfig={kubeconfig(node)}",
                        f"--pod-cidr=10.213.{index}.0/24",
                        f"--bridge={BRIDGE}",
                        f"--gateway={GATEWAY}",
                        f"--dns-server={GATEWAY}",
                        f"--cluster-domain={CLUSTER_DOMAIN}",
                        f"--image-map={state / 'images.yaml'}",
                        f"--state-dir={self.layout.node_dir(node)}",
                        f"--listen-address=127.0.0.1:{10250 + index}",
                        f"--kubernetes-service-host={KUBERNETES_SERVICE_IP}",
                        "--kubernetes-service-port=443",
                    ],
                    directory=self.layout.state / "nodes",
                )
            )
        return components

    # lifecycle -------------------------------------------------------------

    def up(self) -> None:
        started = time.monotonic()
        tools = toolchain()
        needed = ["kubernetes", "etcd", "coredns", "venv"] + (
            ["nodeagent"] if self.node_names else []
        )
        missing = [k for k in needed if k not in tools]
        if missing:
            raise SystemExit(f"toolchain incomplete ({', '.join(missing)}): run install.py")
        self.layout.state.mkdir(parents=True, exist_ok=True)
        pki = prepare_pki(self.layout, self.node_names)
        ensure_network()
        (self.layout.state / "Corefile").write_text(
            COREFILE.format(
                domain=CLUSTER_DOMAIN,
                address=GATEWAY,
                kubeconfig=self.layout.component_kubeconfig("coredns"),
            )
        )
        self.write_image_map(tools)
        components = {c.name: c for c in self.components(tools, pki)}
        components["etcd"].start()
        wait_for(
            "control-plane etcd",
            lambda: _http_ok(f"http://127.0.0.1:{CONTROL_PLANE_ETCD_PORT}/health"),
        )
        components["kube-apiserver"].start()
        wait_for("kube-apiserver /readyz", self.apiserver_ready, timeout=90)
        for name, component in components.items():
            if name not in ("etcd", "kube-apiserver"):
                component.start()
        self.record_agents(components)
        wait_for("all nodes Ready", self.nodes_ready, timeout=90)
        if self.node_names:
            wait_for("the default StorageClass", self.storage_class_ready, timeout=60)
        wait_for("the default ServiceAccount", self.default_service_account, timeout=60)
        log(f"cluster up in {time.monotonic() - started:.1f}s, nodes: {', '.join(self.node_names)}")
        print(self.layout.kubeconfig)

    def record_agents(self, components: dict[str, Component]) -> None:
        """Write the agent.pid / agent.cmdline contract of hack/cluster/faults.py."""
        for node in self.node_names:
            component = components[f"nodeagent-{node}"]
            node_dir = self.layout.node_dir(node)
            node_dir.mkdir(parents=True, exist_ok=True)
            (node_dir / "agent.pid").write_text(str(component.pid() or ""))
            (node_dir / "agent.cmdline").write_text(json.dumps(component.argv))

    def write_image_map(self, tools: dict) -> None:
        operator_root = self.layout.state / "images" / "operator" / "opt-ansible"
        operator_root.mkdir(parents=True, exist_ok=True)
        minio_entrypoint = self.layout.state / "images" / "minio" / "docker-entrypoint.sh"
        minio_entrypoint.parent.mkdir(parents=True, exist_ok=True)
        if not minio_entrypoint.exists() or minio_entrypoint.read_text() != MINIO_ENTRYPOINT:
            minio_entrypoint.write_text(MINIO_ENTRYPOINT)
        minio_entrypoint.chmod(0o755)
        target = self.layout.state / "images.yaml"
        content = json.dumps(image_map(tools, operator_root, minio_entrypoint), indent=2) + "\n"
        if not target.exists() or target.read_text() != content:
            target.write_text(content)

    def down(self) -> None:
        state = self.layout.state
        component_dirs = [state / "components", state / "nodes"]
        # Node agents first so nothing restarts pods while they are being removed.
        for directory in component_dirs[::-1]:
            for pid_file in sorted(directory.glob("*/pid")) if directory.exists() else []:
                Component(
                    pid_file.parent.name, _recorded_argv(pid_file), directory=directory
                ).stop()
        kill_recorded_containers(state)
        remove_pod_namespaces()
        kube_proxy = toolchain().get("kubernetes") if MANIFEST.exists() else None
        if kube_proxy:
            run([str(Path(kube_proxy) / "kube-proxy"), "--cleanup"], check=False)
        remove_network()
        unmount_under(state)
        if state.exists():
            shutil.rmtree(state)
        log("cluster down")

    def status(self) -> int:
        state = self.layout.state
        healthy = True
        for directory in (state / "components", state / "nodes"):
            for pid_file in sorted(directory.glob("*/pid")) if directory.exists() else []:
                component = Component(
                    pid_file.parent.name, _recorded_argv(pid_file), directory=directory
                )
                pid = component.pid()
                healthy &= pid is not None
                print(f"{component.name:28} {'running pid ' + str(pid) if pid else 'STOPPED'}")
        if not (state / "components").exists():
            print("no local cluster (run `make cluster-up`)")
            return 1
        print(f"kubeconfig: {self.layout.kubeconfig}")
        result = self.kubectl("get", "nodes", "-o", "wide", check=False)
        print(result.stdout or result.stderr)
        return 0 if healthy else 1

    # checks ---------------------------------------------------------------

    def kubectl(self, *args: str, check: bool = True, stdin: str | None = None):
        kubectl = Path(toolchain()["kubernetes"]) / "kubectl"
        return run(
            [str(kubectl), f"--kubeconfig={self.layout.kubeconfig}", *args],
            check=check,
            input=stdin,
        )

    def apiserver_ready(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.layout.pki / "ca.crt"))
        context.load_cert_chain(self.layout.pki / "admin.crt", self.layout.pki / "admin.key")
        url = f"https://127.0.0.1:{APISERVER_PORT}/readyz"
        with urllib.request.urlopen(url, context=context, timeout=3) as response:
            return response.status == 200

    def nodes_ready(self) -> bool:
        result = self.kubectl("get", "nodes", "-o", "json", check=False)
        if result.returncode != 0:
            return False
        ready = {
            node["metadata"]["name"]
            for node in json.loads(result.stdout)["items"]
            for condition in node["status"].get("conditions", [])
            if condition["type"] == "Ready" and condition["status"] == "True"
        }
        return set(self.node_names) <= ready

    def storage_class_ready(self) -> bool:
        return self.kubectl("get", "storageclass", "local-path", check=False).returncode == 0

    def default_service_account(self) -> bool:
        return self.kubectl("get", "serviceaccount", "default", check=False).returncode == 0

    # operator --------------------------------------------------------------

    def build_operator_image(self) -> Path:
        """Do what the Dockerfile does: copy the operator's files into the image's /opt/ansible."""
        image_root = self.layout.state / "images" / "operator" / "opt-ansible"
        staging = image_root.with_name("opt-ansible.new")
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        for name in ("bin", "playbooks", "roles", "library", "plugins", "collections"):
            shutil.copytree(
                ROOT / name,
                staging / name,
                symlinks=True,  # collections/.../plugins links to plugins/, as COPY keeps it
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        for name in IMAGE_FILES:
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, staging / name)
        # Unchanged files stay untouched: the running operator reads them (test sessions running
        # side by side each deploy the operator they need).
        if image_root.exists() and tree_digest(staging) == tree_digest(image_root):
            shutil.rmtree(staging)
            return image_root
        # Swap in place so the path the image map binds stays the same.
        if image_root.exists():
            for child in image_root.iterdir():
                if child.is_dir():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        for child in staging.iterdir():
            child.rename(image_root / child.name)
        staging.rmdir()
        return image_root

    def deploy_operator(self) -> None:
        self.build_operator_image()
        self.write_image_map(toolchain())
        rendered = self.kubectl("kustomize", str(ROOT / "config" / "default")).stdout
        # A re-deploy of an unchanged manifest must still pick up the freshly copied files: the
        # digest of the "image" goes into the pod template, in the same apply (one rollout, so
        # the new pod does not wait out the leader lease of a pod that only lived a moment).
        digest = tree_digest(self.layout.state / "images" / "operator")
        documents = [d for d in yaml.safe_load_all(rendered) if d]
        for document in documents:
            if document.get("kind") == "Deployment":
                template = document["spec"]["template"]["metadata"]
                template.setdefault("annotations", {})["quorumkeeper.dev/image-digest"] = digest
        manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": documents})
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=manifest)
        self.kubectl(
            "-n",
            "quorumkeeper-system",
            "rollout",
            "status",
            "deployment/quorumkeeper-controller-manager",
            "--timeout=180s",
        )
        log("operator deployed and available")

    def undeploy_operator(self) -> None:
        self.kubectl(
            "delete", "namespace", "quorumkeeper-system", "--ignore-not-found", "--wait=true"
        )


LOCK = Path(tempfile.gettempdir()) / "quorumkeeper-localcluster.lock"


def _recorded_argv(pid_file: Path) -> list[str]:
    try:
        return json.loads((pid_file.parent / "cmdline").read_text())
    except (OSError, ValueError):
        return [""]


def tree_digest(path: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as response:
        return response.status == 200


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the local cluster (idempotent)")
    up.add_argument("--nodes", type=int, default=int(os.environ.get("QK_NODES", DEFAULT_NODES)))
    sub.add_parser("down", help="stop it and remove everything it created")
    sub.add_parser("status", help="show components and nodes")
    sub.add_parser("deploy-operator", help="deploy config/default with the operator image")
    sub.add_parser("undeploy-operator", help="remove the operator namespace")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the local cluster needs root (network namespaces, bridge, mounts)")
    cluster = LocalCluster(nodes=getattr(args, "nodes", DEFAULT_NODES))
    if args.command != "status":
        # One change at a time: test sessions running side by side all bring the cluster up and
        # deploy the operator before their first test.
        lock = open(LOCK, "a")  # noqa: SIM115 - held until the process exits
        fcntl.flock(lock, fcntl.LOCK_EX)
    if args.command == "up":
        cluster.up()
    elif args.command == "down":
        cluster.down()
    elif args.command == "status":
        return cluster.status()
    elif args.command == "deploy-operator":
        cluster.deploy_operator()
    elif args.command == "undeploy-operator":
        cluster.undeploy_operator()
    return 0


if __name__ == "__main__":
    sys.exit(main())
