"""The object stores' URLs and credentials, their image map entries and MinIO's version stamp."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack" / "cluster"))
sys.path.insert(0, str(REPO / "hack" / "toolchain"))

import install  # noqa: E402
import localcluster  # noqa: E402
import object_stores  # noqa: E402
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore import (  # noqa: E402
    parse_object_url,
)


def test_object_urls_name_the_service_and_parse_as_the_operator_parses_them():
    stores = object_stores.stores()
    minio = parse_object_url(stores["minio"].object_url("c/x.db"))
    assert (minio.scheme, minio.bucket, minio.key) == ("s3", "etcd-backups", "c/x.db")
    assert minio.endpoint == "http://minio.object-stores.svc.cluster.local:9000"
    assert minio.region == "us-east-1"
    gcs = parse_object_url(stores["fake-gcs"].object_url("c/x.db", bucket="other"))
    assert (gcs.scheme, gcs.bucket, gcs.endpoint) == (
        "gs",
        "other",
        "http://fake-gcs.object-stores.svc.cluster.local:4443",
    )
    assert stores["moto"].url == "http://moto.object-stores.svc.cluster.local:5000"


def test_every_store_has_a_deployment_and_service_on_its_port():
    documents = list(yaml.safe_load_all(object_stores.MANIFEST.read_text()))
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in documents}
    for store in object_stores.stores().values():
        assert ("Deployment", store.name) in by_kind
        service = by_kind[("Service", store.name)]
        assert service["metadata"]["namespace"] == object_stores.NAMESPACE
        assert [p["port"] for p in service["spec"]["ports"]] == [store.port]


def test_minio_backup_credentials_are_the_root_credentials_of_the_manifest():
    root = object_stores._minio_root()
    assert object_stores.stores()["minio"].credentials == {
        "AWS_ACCESS_KEY_ID": root["MINIO_ROOT_USER"],
        "AWS_SECRET_ACCESS_KEY": root["MINIO_ROOT_PASSWORD"],
    }
    assert len(root["MINIO_ROOT_PASSWORD"]) >= 8, "MinIO refuses shorter root passwords"


def test_image_map_runs_the_stores_with_their_real_entrypoints(tmp_path):
    tools = {
        "etcd": {},
        "venv": "/cache/venv",
        "ansible_operator": "/cache/ao",
        "minio": "/cache/minio-v0",
        "fake_gcs_server": "/cache/venv/fake-gcs-server-linux-amd64",
    }
    entrypoint = tmp_path / "docker-entrypoint.sh"
    images = {i["image"]: i for i in localcluster.image_map(tools, tmp_path, entrypoint)["images"]}
    minio = images["quay.io/minio/minio:*"]
    assert minio["binds"]["/usr/bin/minio"] == "/cache/minio-v0/minio"
    assert (minio["entrypoint"], minio["cmd"]) == (["/usr/bin/docker-entrypoint.sh"], ["minio"])
    moto = images["motoserver/moto:*"]
    assert moto["entrypoint"] == ["/usr/local/bin/moto_server", "-H", "0.0.0.0"]
    assert moto["binds"]["/usr/local/bin/moto_server"] == "/cache/venv/bin/moto_server"
    gcs = images["fsouza/fake-gcs-server:*"]
    assert gcs["entrypoint"] == ["/bin/fake-gcs-server", "-data", "/data"]
    assert gcs["binds"]["/bin/fake-gcs-server"] == tools["fake_gcs_server"]


def test_image_map_leaves_out_what_the_toolchain_has_not_built(tmp_path):
    tools = {"etcd": {}, "venv": "/cache/venv", "ansible_operator": "/cache/ao"}
    images = [i["image"] for i in localcluster.image_map(tools, tmp_path)["images"]]
    assert not [i for i in images if "minio" in i or "fake-gcs" in i]
    assert "motoserver/moto:*" in images


def test_minio_entrypoint_gives_arguments_to_minio_as_upstreams_does(tmp_path):
    script = tmp_path / "docker-entrypoint.sh"
    script.write_text(localcluster.MINIO_ENTRYPOINT.replace('exec "$@"', 'echo "$@"'))

    def run(*args):
        return subprocess.run(["/bin/sh", str(script), *args], capture_output=True, text=True)

    assert run("server", "/data").stdout.split() == ["minio", "server", "/data"]
    assert run("minio", "--version").stdout.split() == ["minio", "--version"]


def test_minio_is_stamped_with_the_commit_and_time_of_its_pseudo_version():
    flags = install.minio_ldflags("v0.0.0-20260212201848-7aac2a2c5b7c").split()
    assert "github.com/minio/minio/cmd.Version=2026-02-12T20:18:48Z" in flags
    assert "github.com/minio/minio/cmd.ReleaseTag=DEVELOPMENT.2026-02-12T20-18-48Z" in flags
    assert "github.com/minio/minio/cmd.CommitID=7aac2a2c5b7c" in flags
    assert flags[:2] == ["-s", "-w"]


def _s3_client(port: int, config=None):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name=object_stores.REGION,
        aws_access_key_id="k",
        aws_secret_access_key="s",
        config=config,
    )


def test_ensure_bucket_creates_a_missing_bucket_and_keeps_an_existing_one():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        client = _s3_client(server.get_host_and_port()[1])
        store = object_stores.stores()["moto"]
        object_stores.ensure_bucket(client, store, "etcd-backups", timeout=10)
        client.put_object(Bucket="etcd-backups", Key="kept", Body=b"1")
        object_stores.ensure_bucket(client, store, "etcd-backups", timeout=10)
        assert client.get_object(Bucket="etcd-backups", Key="kept")["Body"].read() == b"1"
    finally:
        server.stop()


def test_ensure_bucket_names_the_store_and_the_last_error_when_it_gives_up():
    import socket

    import botocore.config
    import pytest

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    no_retries = botocore.config.Config(retries={"max_attempts": 1}, connect_timeout=1)
    client = _s3_client(port, no_retries)
    with pytest.raises(RuntimeError, match=r"bucket etcd-backups in moto .* still missing.*"):
        object_stores.ensure_bucket(client, object_stores.stores()["moto"], timeout=1)


def test_ensure_bucket_restarts_a_store_that_keeps_refusing_once_and_says_who_answered():
    """CI saw every call to moto in the cluster answered 404 for two minutes."""
    import http.server
    import threading

    import botocore.config
    import pytest

    class Stranger(http.server.BaseHTTPRequestHandler):
        def answer(self):
            self.send_response(404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", "9")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(b"not here\n")

        do_HEAD = do_PUT = do_GET = answer

        def version_string(self):
            return "stranger/1.0"

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stranger)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    restarted = []
    try:
        client = _s3_client(
            server.server_address[1], botocore.config.Config(retries={"max_attempts": 1})
        )
        store = object_stores.stores()["moto"]
        with pytest.raises(RuntimeError) as refused:
            object_stores.ensure_bucket(client, store, timeout=3, on_stuck=restarted.append)
    finally:
        server.shutdown()
    assert restarted == [store]
    message = str(refused.value)
    assert "and a restart of the store" in message
    assert "HTTP 404, server stranger/1.0, content-type text/html" in message
