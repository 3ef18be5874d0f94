"""Object stores as host processes for the module tests: a real MinIO server from the toolchain
(hack/toolchain/minio), moto servers, and clients of them and of fake-gcs-server."""

from __future__ import annotations

import contextlib
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from kubehelpers import toolchain_component
from moto.server import ThreadedMotoServer

import etcdharness


def minio_binary() -> Path:
    return Path(toolchain_component("minio")) / "minio"


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


@contextlib.contextmanager
def moto_server(server_class: type[ThreadedMotoServer] = ThreadedMotoServer) -> Iterator[str]:
    """A moto S3 server (or a subclass such as DamagingMotoServer) on a free loopback port; its
    endpoint URL."""
    port = etcdharness.free_port()
    server = server_class(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def s3_client(endpoint: str, credentials: dict[str, str]):
    """A boto3 S3 client of ``endpoint`` with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=credentials["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=credentials["AWS_SECRET_ACCESS_KEY"],
    )


def gcs_client(endpoint: str) -> storage.Client:
    """An anonymous Google Cloud Storage client of a fake-gcs-server."""
    return storage.Client(
        project="test",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": endpoint},
    )
