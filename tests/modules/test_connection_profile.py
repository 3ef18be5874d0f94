"""The connection seam against real etcd: ``etcd_client(ConnectionProfile(...))`` reaches a
member that serves TLS and requires client certificates, and a member with authentication
enabled, with the right profile, and fails in words with a wrong one; the modules' connection
options and a helper pod's profile (QK_ETCD_CONNECTION) reach the same client.

The certificates are made with the operator's own qk_tls (a CA, a server certificate for
127.0.0.1 and localhost, a client certificate)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys

import grpc.aio
import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    PROFILE_ENV,
    ConnectionProfile,
    etcd_client,
    profile_env,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    EtcdOperationError,
    EtcdUnreachable,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_tls import (
    certificate_der,
    issue_leaf,
    new_ca,
    presented_certificate,
)
from etcd3aio.auth import AuthService

import etcdharness

ROOT_PASSWORD = "s3cret-root"
# How the modules' options reach the client does not depend on etcd's version (the client is
# tested against each version above them): those tests, which run Ansible, take the one that
# is always there.
ONE_VERSION = pytest.mark.parametrize(
    "etcd_version", sorted(etcdharness.ALWAYS_REQUIRED), ids=lambda v: f"etcd-{v}"
)


# ---------------------------------------------------------------------------------------------
# A throwaway PKI
# ---------------------------------------------------------------------------------------------


def _write(path, pem):
    path.write_text(pem)
    return path


def make_ca(directory, name="qk-test-ca"):
    """A self-signed CA: ``(certificate PEM, key PEM, certificate path)``."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = new_ca(name)
    return cert, key, _write(directory / f"{name}.crt", cert)


def issue(directory, name, ca_cert, ca_key, **usage):
    """A certificate signed by the CA (qk_tls.issue_leaf's ``usage`` keywords): its
    ``(certificate path, key path)``."""
    cert, key = issue_leaf(ca_cert, ca_key, name, **usage)
    return _write(directory / f"{name}.crt", cert), _write(directory / f"{name}.key", key)


def make_pki(directory):
    """A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate."""
    ca_cert, ca_key, ca_path = make_ca(directory)
    server = issue(
        directory,
        "server",
        ca_cert,
        ca_key,
        dns_names=["localhost"],
        ip_addresses=["127.0.0.1"],
        server=True,
        client=False,
    )
    client = issue(directory, "client", ca_cert, ca_key, server=False, client=True)
    return etcdharness.ClientTLS(ca_path, *server, *client)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls_member(etcd_factory, pki):
    """A member serving clients on https:// only, asking them for a certificate."""
    cluster = etcd_factory(1, tls=pki)
    (url,) = cluster.endpoints()
    assert url.startswith("https://127.0.0.1:")
    return url


def tls_profile(pki, url, **overrides):
    files = {"ca_cert": pki.ca, "client_cert": pki.client_cert, "client_key": pki.client_key}
    files.update(overrides)
    return ConnectionProfile(
        [url], timeout=3, **{k: str(v) if v else None for k, v in files.items()}
    )


# ---------------------------------------------------------------------------------------------
# TLS
# ---------------------------------------------------------------------------------------------


def test_a_tls_profile_reads_and_writes_a_member_that_requires_client_certificates(tls_member, pki):
    with etcd_client(tls_profile(pki, tls_member)) as client:
        status = client.status(tls_member)
        assert status["id"] and status["leader"] == status["id"]
        members, used, errors = client.member_list()
        assert used == tls_member and not errors
        assert [m["client_urls"] for m in members] == [[tls_member]]
        client.put("/tls/key", "over TLS")
        assert client.get("/tls/key") == b"over TLS"


def test_a_tls_profile_reaches_a_plain_member_by_its_http_url(etcd_factory, pki):
    # While client TLS is turned on or off, one profile reaches members of either scheme: the
    # endpoint's scheme says whether to dial TLS.
    (url,) = etcd_factory(1).endpoints()
    assert url.startswith("http://")
    with etcd_client(tls_profile(pki, url)) as client:
        client.put("/plain/key", "no TLS")
        assert client.get("/plain/key") == b"no TLS"


def test_a_member_presents_its_certificate_to_a_handshake_without_one(tls_member, pki):
    # A CA rotation checks which certificate each member presents; members require a client
    # certificate, and TLS 1.3 shows theirs first.
    host, port = tls_member.removeprefix("https://").split(":")
    served = presented_certificate(host, int(port))
    assert served == certificate_der(pki.server_cert.read_text())
    assert presented_certificate(host, etcdharness.free_port(), timeout=1) is None


def test_a_tls_profile_without_the_client_certificate_is_refused_in_words(tls_member, pki):
    profile = tls_profile(pki, tls_member, client_cert=None, client_key=None)
    with etcd_client(profile) as client, pytest.raises(EtcdUnreachable) as refused:
        client.member_list()
    assert tls_member in refused.value.errors
    assert "requires a client certificate" in str(refused.value)
    assert "check client_cert and client_key" in str(refused.value)


def test_a_tls_profile_with_another_ca_does_not_trust_the_member(tls_member, pki, tmp_path):
    other_ca = make_ca(tmp_path / "other", "another-ca")[2]
    with (
        etcd_client(tls_profile(pki, tls_member, ca_cert=other_ca)) as client,
        pytest.raises(EtcdUnreachable) as refused,
    ):
        client.member_list()
    assert "certificate is not trusted: check that ca_cert" in str(refused.value)


@ONE_VERSION
def test_the_modules_tls_options_reach_the_client(tls_member, pki, run_module):
    res = run_module(
        "etcd_cluster_info",
        {
            "endpoints": [tls_member],
            "ca_cert": str(pki.ca),
            "client_cert": str(pki.client_cert),
            "client_key": str(pki.client_key),
        },
    )
    assert not res["failed"], res.get("msg")
    assert res["healthy"] is True
    assert [m["client_urls"] for m in res["members"]] == [[tls_member]]


# ---------------------------------------------------------------------------------------------
# etcd authentication
# ---------------------------------------------------------------------------------------------


def enable_auth(url, password, tls=None):
    """User root (role root) with ``password``, and authentication on: what
    ``etcdctl user add root && etcdctl user grant-role root root && etcdctl auth enable``
    does."""
    target = url.split("://", 1)[1]

    async def setup():
        if tls:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=tls.ca.read_bytes(),
                private_key=tls.client_key.read_bytes(),
                certificate_chain=tls.client_cert.read_bytes(),
            )
            channel = grpc.aio.secure_channel(target, credentials)
        else:
            channel = grpc.aio.insecure_channel(target)
        async with channel:
            auth = AuthService(channel, max_attempts=1)
            await auth.user_add("root", password, timeout=5)
            await auth.user_grant_role("root", "root", timeout=5)
            await auth.auth_enable(timeout=5)

    asyncio.run(setup())


@pytest.fixture
def auth_member(etcd_factory):
    """A plain member with authentication enabled (user root)."""
    cluster = etcd_factory(1)
    (url,) = cluster.endpoints()
    enable_auth(url, ROOT_PASSWORD)
    return url


def test_a_profile_with_the_right_credentials_reads_and_writes(auth_member):
    with (
        etcd_client(ConnectionProfile([auth_member], timeout=3)) as anonymous,
        pytest.raises(EtcdOperationError, match="user name is empty"),
    ):
        anonymous.put("/auth/key", "as nobody")
    profile = ConnectionProfile([auth_member], timeout=3, username="root", password=ROOT_PASSWORD)
    with etcd_client(profile) as client:
        client.put("/auth/key", "as root")
        assert client.get("/auth/key") == b"as root"
        members, _, _ = client.member_list()
        assert [m["client_urls"] for m in members] == [[auth_member]]
        assert client.status(auth_member)["id"] == members[0]["id"]


def test_a_snapshot_streams_with_the_users_token_and_is_refused_in_words_without(auth_member):
    """The snapshot is read on a channel of gRPC's blocking stack, outside the services that
    carry the token: it must send the token too."""
    with (
        etcd_client(ConnectionProfile([auth_member], timeout=3)) as anonymous,
        pytest.raises(EtcdOperationError) as refused,
    ):
        next(anonymous.snapshot(auth_member, timeout=10))
    assert str(refused.value).startswith(f"Maintenance.Snapshot via {auth_member} failed: ")
    assert "user name is empty" in str(refused.value)
    profile = ConnectionProfile([auth_member], timeout=3, username="root", password=ROOT_PASSWORD)
    with etcd_client(profile) as client:
        snapshot = b"".join(client.snapshot(auth_member, timeout=10))
    # A bolt database: its meta page's magic number, then etcd's SHA-256 of it appended.
    assert snapshot[16:20] == (0xED0CDAED).to_bytes(4, "little"), snapshot[:32]
    assert len(snapshot) % 4096 == 32


def test_a_wrong_password_is_refused_in_words_naming_the_user(auth_member):
    profile = ConnectionProfile([auth_member], timeout=3, username="root", password="wrong")
    with pytest.raises(EtcdOperationError) as refused, etcd_client(profile):
        pass
    message = str(refused.value)
    assert message.startswith(f"authenticating as root via {auth_member} failed: etcdserver: ")
    assert "authentication failed" in message
    assert "wrong" not in message, "the password is never said"


@ONE_VERSION
def test_the_modules_credentials_reach_the_client(auth_member, run_module):
    res = run_module(
        "etcd_cluster_info", {"endpoints": [auth_member], "username": "root", "password": "nope"}
    )
    assert res["failed"]
    assert f"authenticating as root via {auth_member} failed" in res["msg"]


# ---------------------------------------------------------------------------------------------
# A helper pod's profile
# ---------------------------------------------------------------------------------------------


def run_writer(env, *args):
    """``qk_objectstore write`` as the pvc:// writer pod runs it, in ``env``."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore",
            "write",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_a_writer_pods_profile_reaches_a_member_with_tls_and_authentication(
    tls_member, pki, tmp_path
):
    """What the pvc:// writer pod runs, with the profile in its environment: TLS files and
    credentials reach its etcd client without another call site. The pod spec itself never
    carries a password (profile_env refuses one): credentials are to come from a Secret into
    the same variable, as the JSON written here."""
    enable_auth(tls_member, ROOT_PASSWORD, tls=pki)
    profile = ConnectionProfile(
        [tls_member],
        timeout=3,
        ca_cert=str(pki.ca),
        client_cert=str(pki.client_cert),
        client_key=str(pki.client_key),
        username="root",
        password=ROOT_PASSWORD,
    )
    with etcd_client(profile) as client:
        for i in range(10):
            client.put(f"/pod/{i}", f"value-{i}")
    claim = tmp_path / "claim"
    claim.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(etcdharness.REPO / "collections"),
        "HOME": str(tmp_path),
        "QK_CLAIM_MOUNT": str(claim),
    }
    with pytest.raises(ValueError, match="Secret"):
        profile_env(profile)
    env[PROFILE_ENV] = profile.with_endpoints(()).to_json()
    assert tls_member not in env["QK_ETCD_CONNECTION"], "the pod is told its endpoint apart"
    url = "pvc://backups/c/snap.db"
    res = run_writer(env, "--url", url, "--endpoint", tls_member, "--timeout", "30")
    assert res.returncode == 0, res.stderr
    data = (claim / "c" / "snap.db").read_bytes()
    assert json.loads(res.stdout.strip().splitlines()[-1]) == {
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }

    # Without the profile the pod cannot even verify the member's certificate, and says so.
    del env["QK_ETCD_CONNECTION"]
    res = run_writer(env, "--url", url, "--endpoint", tls_member)
    assert res.returncode == 2
    assert "certificate is not trusted: check that ca_cert" in res.stderr, res.stderr


# ---------------------------------------------------------------------------------------------
# Options a module cannot honour yet are refused, not dropped
# ---------------------------------------------------------------------------------------------


def test_a_pvc_destination_takes_etcd_credentials_only_from_secrets(run_module, tmp_path):
    """The writer pod would carry a password in its spec: only a Secret it mounts will do,
    refused before anything runs."""
    pvc = {
        "endpoints": ["http://127.0.0.1:1"],
        "object_url": "pvc://backups/c/snap.db",
        "namespace": "default",
    }
    given = run_module("etcd_snapshot", {**pvc, "username": "root", "password": ROOT_PASSWORD})
    assert given["failed"] and "not password" in given["msg"], given["msg"]
    assert ROOT_PASSWORD not in json.dumps(given)
    password_file = tmp_path / "root.password"
    password_file.write_text(ROOT_PASSWORD)
    no_secret = run_module(
        "etcd_snapshot", {**pvc, "username": "root", "password_file": str(password_file)}
    )
    assert no_secret["failed"] and "needs pod_password_secret" in no_secret["msg"]
    no_tls_secret = run_module("etcd_snapshot", {**pvc, "ca_cert": str(password_file)})
    assert no_tls_secret["failed"] and "needs pod_tls_secret" in no_tls_secret["msg"]


def test_backup_verification_refuses_tls_options(run_module, pki):
    """The verification pod's etcd serves plain HTTP: a TLS client could only fail to reach
    it, and the failure would read as a network problem."""
    res = run_module(
        "etcd_snapshot_verify",
        {"name": "nightly", "namespace": "default", "ca_cert": str(pki.ca)},
    )
    assert res["failed"]
    assert "serves plain HTTP: TLS options do not apply" in res["msg"]
