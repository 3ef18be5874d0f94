"""A throw-away etcd + kube-apiserver on 127.0.0.1 for tests that need a real API server.

Usable as a context manager (no pytest dependency here; tests/crd/conftest.py wraps it in a
fixture):

    with LocalAPIServer(tmpdir) as api:
        api.kubectl("get", "namespaces")

Only the API server runs (no controller-manager, scheduler or kubelet): objects are validated,
defaulted and stored, nothing is reconciled. Binaries come from $QK_CACHE (default
~/.cache/quorumkeeper); override with QK_KUBE_APISERVER, QK_KUBECTL, QK_ETCD.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack" / "cluster"))
from pki import service_account_key  # noqa: E402  (the local cluster's own key maker)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from freeports import free_port  # noqa: E402

KUBERNETES_VERSION = "v1.35.4"
SERVICE_CLUSTER_IP_RANGE = "10.214.0.0/16"


def qk_cache() -> Path:
    return Path(os.environ.get("QK_CACHE", Path.home() / ".cache" / "quorumkeeper"))


def find_kube_binary(name: str) -> Path:
    env = os.environ.get("QK_" + name.upper().replace("-", "_"))
    if env:
        return Path(env)
    return qk_cache() / "bin" / f"kubernetes-{KUBERNETES_VERSION}" / name


def find_etcd() -> Path:
    """Prefer the pinned etcd 3.6 build, then 3.5, then the distribution's etcd."""
    if os.environ.get("QK_ETCD"):
        return Path(os.environ["QK_ETCD"])
    bin_dir = qk_cache() / "bin"
    for candidate in sorted(bin_dir.glob("etcd-v3.*/etcd"), reverse=True):
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("etcd")
    if found:
        return Path(found)
    raise FileNotFoundError(f"no etcd binary found (looked in {bin_dir} and PATH)")


def missing_binaries() -> list[str]:
    """Names of the binaries this module needs that are not present (empty when usable)."""
    missing = []
    for path in (find_kube_binary("kube-apiserver"), find_kube_binary("kubectl")):
        if not os.access(path, os.X_OK):
            missing.append(str(path))
    try:
        find_etcd()
    except FileNotFoundError as exc:
        missing.append(str(exc))
    return missing


def _etcd_version(etcd: Path) -> tuple[int, int]:
    out = subprocess.run(
        [str(etcd), "--version"], capture_output=True, text=True, timeout=30
    ).stdout
    for line in out.splitlines():
        if line.startswith("etcd Version:"):
            major, minor = line.split(":", 1)[1].strip().split(".")[:2]
            return int(major), int(minor)
    return (3, 4)


class StartupError(RuntimeError):
    pass


class LocalAPIServer:
    """etcd + kube-apiserver bound to 127.0.0.1 on free ports, state under `workdir`."""

    def __init__(self, workdir: Path | str, startup_timeout: float = 90.0):
        self.workdir = Path(workdir)
        self.startup_timeout = startup_timeout
        self.kubectl_bin = find_kube_binary("kubectl")
        self.apiserver_bin = find_kube_binary("kube-apiserver")
        self.etcd_bin = find_etcd()
        self.token = uuid.uuid4().hex
        self.procs: list[subprocess.Popen] = []
        self._logs = []
        self.secure_port: int | None = None
        self.etcd_port: int | None = None
        self.kubeconfig = self.workdir / "kubeconfig"

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> LocalAPIServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.secure_port}"

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.workdir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        self._start_etcd()
        self._start_apiserver()
        self._write_kubeconfig()
        self._wait_ready()

    def _start_etcd(self) -> None:
        self.etcd_port = free_port()
        peer_port = free_port()
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        argv = [
            str(self.etcd_bin),
            "--name",
            "default",
            "--data-dir",
            str(self.workdir / "etcd-data"),
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"default={peer}",
            "--listen-metrics-urls",
            f"http://127.0.0.1:{free_port()}",
        ]
        if _etcd_version(self.etcd_bin) >= (3, 5):
            argv.append("--unsafe-no-fsync")  # throw-away data; much faster on slow disks
        self._spawn("etcd", argv)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with urllib.request.urlopen(client + "/health", timeout=2) as resp:
                    if json.loads(resp.read()).get("health") == "true":
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.2)
        raise StartupError("etcd did not become healthy:\n" + self.log_tail("etcd"))

    def _start_apiserver(self) -> None:
        self.secure_port = free_port()
        sa_key, sa_public = service_account_key(self.workdir)
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{self.token},admin,admin,"system:masters"\n')
        tokens.chmod(0o600)
        cert_dir = self.workdir / "certs"
        cert_dir.mkdir(exist_ok=True)
        argv = [
            str(self.apiserver_bin),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--cert-dir={cert_dir}",
            f"--secure-port={self.secure_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--authorization-mode=RBAC",
            f"--token-auth-file={tokens}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={sa_public}",
            f"--service-account-signing-key-file={sa_key}",
            "--allow-privileged=true",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
        ]
        self._spawn("kube-apiserver", argv)

    def _write_kubeconfig(self) -> None:
        # The serving certificate is self-signed and generated at startup; skip verification
        # (loopback only, throw-away server).
        self.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "local",
                            "cluster": {"server": self.url, "insecure-skip-tls-verify": True},
                        }
                    ],
                    "users": [{"name": "admin", "user": {"token": self.token}}],
                    "contexts": [
                        {
                            "name": "local",
                            "context": {
                                "cluster": "local",
                                "user": "admin",
                                "namespace": "default",
                            },
                        }
                    ],
                    "current-context": "local",
                }
            )
        )
        self.kubeconfig.chmod(0o600)

    def _check_alive(self) -> None:
        for proc, name in zip(self.procs, ("etcd", "kube-apiserver"), strict=False):
            if proc.poll() is not None:
                raise StartupError(f"{name} exited with {proc.returncode}:\n" + self.log_tail(name))

    def _wait_ready(self) -> None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + self.startup_timeout
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            req = urllib.request.Request(
                self.url + "/readyz", headers={"Authorization": f"Bearer {self.token}"}
            )
            try:
                with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
                    if resp.status == 200:
                        break
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.3)
        else:
            raise StartupError(
                f"kube-apiserver not ready after {self.startup_timeout}s ({last}):\n"
                + self.log_tail("kube-apiserver")
            )
        # /readyz can pass a moment before the bootstrap controller creates "default".
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.kubectl("get", "namespace", "default", check=False).returncode == 0:
                return
            time.sleep(0.3)
        raise StartupError("namespace default never appeared")

    def stop(self) -> None:
        # One at a time, newest first: the API server shuts down quickly while etcd is still
        # up, but hangs retrying when etcd goes away first.
        for proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
        self.procs.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()
        atexit.unregister(self.stop)

    # -- helpers ---------------------------------------------------------------------------
    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        """Run kubectl against this server. With check=True a non-zero exit raises with the
        command's stderr in the message."""
        argv = [str(self.kubectl_bin), f"--kubeconfig={self.kubeconfig}", *args]
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(
                proc.returncode, argv, proc.stdout, proc.stderr
            ) from RuntimeError(proc.stderr)
        return proc

    def get_json(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply_crds(self, paths, timeout: float = 60) -> list[str]:
        """Server-side apply CRD files/directories and wait until all are Established."""
        names = []
        for path in paths:
            out = self.kubectl(
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=qk-tests",
                "-f",
                str(path),
                "-o",
                "name",
            ).stdout
            names += [line.strip() for line in out.splitlines() if line.strip()]
        if names:
            self.kubectl(
                "wait",
                "--for=condition=Established",
                f"--timeout={int(timeout)}s",
                *names,
                timeout=timeout + 10,
            )
        return names
