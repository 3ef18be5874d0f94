"""A real MinIO server as a host process, from the toolchain (hack/toolchain/minio)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import etcdharness

CACHE = Path(os.environ.get("QK_CACHE", Path.home() / ".cache" / "quorumkeeper"))


def minio_binary() -> Path:
    manifest = CACHE / "toolchain.json"
    tools = json.loads(manifest.read_text()) if manifest.exists() else {}
    if "minio" not in tools:
        raise RuntimeError(
            f"{manifest} lists no minio: run `python3 hack/toolchain/install.py --only minio`"
        )
    return Path(tools["minio"]) / "minio"


class MinioServer:
    """`minio server` on a free loopback port over a fresh data directory."""

    def __init__(self, data_dir: Path, access_key: str, secret_key: str):
        self.data_dir, self.access_key, self.secret_key = data_dir, access_key, secret_key
        self.port = etcdharness.free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> MinioServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log = open(self.data_dir.with_suffix(".log"), "wb")  # noqa: SIM115 - closed in __exit__
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.data_dir.parent),
            "MINIO_ROOT_USER": self.access_key,
            "MINIO_ROOT_PASSWORD": self.secret_key,
            "MINIO_BROWSER": "off",  # no console: one port, nothing else to bind
            "MINIO_UPDATE": "off",
        }
        self.process = subprocess.Popen(
            [
                str(minio_binary()),
                "server",
                str(self.data_dir),
                "--address",
                f"127.0.0.1:{self.port}",
                "--quiet",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + 60
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                log = self.data_dir.with_suffix(".log").read_text(errors="replace")
                raise RuntimeError(f"MinIO did not become ready on {self.endpoint}:\n{log}")
            time.sleep(0.2)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/minio/health/ready", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def __exit__(self, *exc) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
