# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""qk_tls, the certificate core of etcd client and peer TLS: making CAs and leaves, reading and
judging them, renewal timing, and one in-process TLS handshake with Python's ssl module to show
that what qk_tls makes is accepted by OpenSSL (no network, no openssl binary)."""

from __future__ import annotations

import socket
import ssl
import threading
from datetime import UTC, datetime, timedelta

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import parse_timestamp
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_tls import (
    CA_VALIDITY_DAYS,
    LEAF_VALIDITY_DAYS,
    RENEW_FRACTION,
    CertificateError,
    bundle_certificates,
    certificate_facts,
    certificate_problems,
    issue_leaf,
    name_covered,
    new_ca,
    renewal_due,
    renewal_time,
)
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
MEMBER = "etcd-0.etcd.default.svc.cluster.local"


@pytest.fixture(scope="module")
def ca():
    return new_ca("quorumkeeper etcd CA", now=NOW)


@pytest.fixture(scope="module")
def other_ca():
    return new_ca("some other CA", now=NOW)


@pytest.fixture(scope="module")
def leaf(ca):
    return issue_leaf(
        *ca,
        "etcd-0",
        dns_names=[MEMBER, "*.etcd.default.svc", "localhost"],
        ip_addresses=["127.0.0.1", "::1"],
        now=NOW,
    )


def _extension(cert_pem: str, kind):
    cert = x509.load_pem_x509_certificate(cert_pem.encode())
    return cert.extensions.get_extension_for_class(kind)


# --------------------------------------------------------------------------------------------
# Making and reading
# --------------------------------------------------------------------------------------------


def test_ca_and_leaf_round_trip(ca, leaf):
    ca_pem, ca_key = ca
    assert ca_pem.startswith("-----BEGIN CERTIFICATE-----")
    assert ca_key.startswith("-----BEGIN PRIVATE KEY-----")  # PKCS8, as etcd reads it
    facts = certificate_facts(ca_pem)
    assert facts["subject"] == facts["issuer"] == "quorumkeeper etcd CA"
    assert facts["isCA"] is True
    assert facts["notBefore"] == "2026-03-01T11:55:00Z"  # five minutes of clock skew
    assert parse_timestamp(facts["notAfter"]) == NOW + timedelta(days=CA_VALIDITY_DAYS)
    constraints = _extension(ca_pem, x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca
    usage = _extension(ca_pem, x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    assert not usage.value.digital_signature

    cert_pem, key_pem = leaf
    assert key_pem.startswith("-----BEGIN PRIVATE KEY-----")
    facts = certificate_facts(cert_pem)
    assert facts["subject"] == "etcd-0" and facts["issuer"] == "quorumkeeper etcd CA"
    assert facts["dnsNames"] == [MEMBER, "*.etcd.default.svc", "localhost"]
    assert facts["ipAddresses"] == ["127.0.0.1", "::1"]
    assert facts["isCA"] is False and facts["serverAuth"] and facts["clientAuth"]
    assert int(facts["serial"], 16) > 0
    assert facts["notBefore"] == "2026-03-01T11:55:00Z"
    assert parse_timestamp(facts["notAfter"]) == NOW + timedelta(days=LEAF_VALIDITY_DAYS)
    assert not _extension(cert_pem, x509.BasicConstraints).value.ca
    usage = _extension(cert_pem, x509.KeyUsage).value
    assert usage.digital_signature and usage.key_encipherment and not usage.key_cert_sign
    # The leaf names its CA's key, which is how clients find the issuer during a rotation.
    assert (
        _extension(cert_pem, x509.AuthorityKeyIdentifier).value.key_identifier
        == _extension(ca_pem, x509.SubjectKeyIdentifier).value.digest
    )
    assert (
        certificate_problems(
            cert_pem,
            key_pem,
            ca_pem,
            dns_names=[MEMBER, "127.0.0.1"],
            server=True,
            client=True,
            now=NOW,
        )
        == []
    )


def test_leaf_usage_flags_and_no_empty_sans(ca):
    server_pem, _ = issue_leaf(*ca, "server", dns_names=["a.example"], client=False, now=NOW)
    client_pem, _ = issue_leaf(*ca, "root", server=False, now=NOW)
    server_facts, client_facts = certificate_facts(server_pem), certificate_facts(client_pem)
    assert server_facts["serverAuth"] and not server_facts["clientAuth"]
    assert client_facts["clientAuth"] and not client_facts["serverAuth"]
    assert client_facts["dnsNames"] == [] and client_facts["ipAddresses"] == []
    client = x509.load_pem_x509_certificate(client_pem.encode())
    with pytest.raises(x509.ExtensionNotFound):
        client.extensions.get_extension_for_class(x509.SubjectAlternativeName)


def test_leaf_validity_is_clipped_at_the_ca_expiry():
    short_ca = new_ca("short-lived CA", now=NOW, days=30)
    cert_pem, _ = issue_leaf(*short_ca, "member", now=NOW + timedelta(days=10))
    assert certificate_facts(cert_pem)["notAfter"] == certificate_facts(short_ca[0])["notAfter"]
    with pytest.raises(CertificateError, match="expired"):
        issue_leaf(*short_ca, "member", now=NOW + timedelta(days=31))


def test_issue_leaf_rejects_a_key_of_another_ca(ca, other_ca):
    with pytest.raises(CertificateError, match="does not belong"):
        issue_leaf(ca[0], other_ca[1], "member", now=NOW)
    with pytest.raises(CertificateError):
        issue_leaf(ca[0], "garbage", "member", now=NOW)


def test_bundles(ca, other_ca, leaf):
    bundle = ca[0] + "\n" + other_ca[0]
    certs = bundle_certificates(bundle)
    assert [certificate_facts(pem)["subject"] for pem in certs] == [
        "quorumkeeper etcd CA",
        "some other CA",
    ]
    # Facts read the first certificate: a leaf followed by its chain.
    assert certificate_facts(leaf[0] + ca[0])["subject"] == "etcd-0"
    with pytest.raises(CertificateError):
        bundle_certificates("")
    with pytest.raises(CertificateError, match="^not a PEM certificate: "):
        certificate_facts("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    with pytest.raises(CertificateError, match="^not a PEM certificate: "):
        certificate_facts("garbage")


def test_a_bundle_of_two_cas_verifies_leaves_of_either(ca, other_ca):
    # During a CA rotation ca.crt holds the old and the new CA, and members carry leaves of both.
    bundle = ca[0] + other_ca[0]
    for authority in (ca, other_ca):
        cert_pem, key_pem = issue_leaf(*authority, "member", dns_names=[MEMBER], now=NOW)
        assert (
            certificate_problems(
                cert_pem, key_pem, bundle, dns_names=[MEMBER], server=True, client=True, now=NOW
            )
            == []
        )
    cert_pem, key_pem = issue_leaf(*other_ca, "member", now=NOW)
    assert certificate_problems(cert_pem, key_pem, ca[0], now=NOW)  # old bundle alone: not


# --------------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------------


def test_name_coverage():
    sans = ["etcd-client.default.svc", "*.etcd.default.svc", "*.a.b"]
    assert name_covered(sans, "etcd-client.default.svc")
    assert name_covered(sans, "ETCD-CLIENT.Default.svc.")  # case and a trailing root dot
    assert name_covered(sans, "etcd-0.etcd.default.svc")
    assert name_covered(sans, "x.a.b")
    assert not name_covered(sans, "x.y.a.b")  # one label only
    assert not name_covered(sans, "a.b")  # the wildcard is not the empty label
    assert not name_covered(sans, "etcd.default.svc")
    assert not name_covered(sans, "other.default.svc")
    assert not name_covered(["f*.a.b"], "foo.a.b")  # partial wildcards: not as Go sees them
    assert not name_covered(["*.0.0.1", "127.0.0.1"], "127.0.0.1")  # IPs need IP SANs
    assert not name_covered([], "a.b") and not name_covered(sans, "")
    assert name_covered("x.a.b", "x.a.b")  # one pattern, not its characters


# --------------------------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------------------------


def test_problems_wrong_key(ca, leaf):
    _, other_key = issue_leaf(*ca, "someone else", now=NOW)
    problems = certificate_problems(leaf[0], other_key, ca[0], now=NOW)
    assert len(problems) == 1 and "does not belong to the certificate" in problems[0]
    # Without a key, the key is not judged.
    assert certificate_problems(leaf[0], None, ca[0], now=NOW) == []


def test_problems_other_ca(other_ca, leaf):
    problems = certificate_problems(leaf[0], leaf[1], other_ca[0], now=NOW)
    assert len(problems) == 1 and "not signed by any CA" in problems[0]
    assert "some other CA" in problems[0]


def test_problems_forged_issuer_name(ca, leaf):
    # A CA with the right name but another key must not pass: the signature is what counts.
    impostor, _ = new_ca("quorumkeeper etcd CA", now=NOW)
    problems = certificate_problems(leaf[0], leaf[1], impostor, now=NOW)
    assert len(problems) == 1 and "not signed by any CA" in problems[0]


def test_problems_expired_and_not_yet_valid(ca, leaf):
    later = NOW + timedelta(days=LEAF_VALIDITY_DAYS + 1)
    problems = certificate_problems(leaf[0], leaf[1], ca[0], now=later)
    assert problems == [
        f"The certificate expired at {certificate_facts(leaf[0])['notAfter']} "
        f"(now {later.strftime('%Y-%m-%dT%H:%M:%SZ')}); renew it."
    ]
    earlier = NOW - timedelta(hours=1)
    problems = certificate_problems(leaf[0], leaf[1], ca[0], now=earlier)
    assert len(problems) == 1 and "not valid before 2026-03-01T11:55:00Z" in problems[0]
    # Within the five minutes of skew it is fine.
    assert certificate_problems(leaf[0], leaf[1], ca[0], now=NOW - timedelta(minutes=4)) == []


def test_problems_uncovered_names(ca, leaf):
    problems = certificate_problems(
        leaf[0], leaf[1], ca[0], dns_names=[MEMBER, "etcd-9.etcd.other.svc", "10.0.0.1"], now=NOW
    )
    assert len(problems) == 2
    assert "'etcd-9.etcd.other.svc'" in problems[0]
    assert "10.0.0.1" in problems[1]


def test_problems_missing_extended_key_usage(ca):
    client_pem, client_key = issue_leaf(*ca, "root", server=False, now=NOW)
    problems = certificate_problems(client_pem, client_key, ca[0], server=True, now=NOW)
    assert len(problems) == 1 and "serverAuth" in problems[0]
    assert certificate_problems(client_pem, client_key, ca[0], client=True, now=NOW) == []
    server_pem, server_key = issue_leaf(*ca, "srv", client=False, now=NOW)
    problems = certificate_problems(server_pem, server_key, ca[0], client=True, now=NOW)
    assert len(problems) == 1 and "clientAuth" in problems[0]


def test_problems_rsa_ca_and_no_extended_key_usage():
    # A user-provided RSA CA, and a leaf without ExtendedKeyUsage: that leaf allows every use.
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rsa CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(NOW - timedelta(days=1))
        .not_valid_after(NOW + timedelta(days=10))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM).decode()
    ca_key_pem = ca_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,  # "RSA PRIVATE KEY" is accepted too
        serialization.NoEncryption(),
    ).decode()
    cert_pem, key_pem = issue_leaf(ca_pem, ca_key_pem, "member", dns_names=["m"], now=NOW)
    assert (
        certificate_problems(
            cert_pem, key_pem, ca_pem, dns_names=["m"], server=True, client=True, now=NOW
        )
        == []
    )

    leaf_key = x509.load_pem_x509_certificate(cert_pem.encode())
    bare = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bare")]))
        .issuer_name(name)
        .public_key(leaf_key.public_key())
        .serial_number(2)
        .not_valid_before(NOW - timedelta(days=1))
        .not_valid_after(NOW + timedelta(days=5))
        .sign(ca_key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
        .decode()
    )
    facts = certificate_facts(bare)
    assert facts["serverAuth"] and facts["clientAuth"] and not facts["isCA"]
    assert certificate_problems(bare, key_pem, ca_pem, server=True, client=True, now=NOW) == []
    assert certificate_problems(bare, None, ca_pem, now=NOW + timedelta(days=20)) == [
        "The CA that signed the certificate expired at 2026-03-11T12:00:00Z; rotate the CA.",
        "The certificate expired at 2026-03-06T12:00:00Z (now 2026-03-21T12:00:00Z); renew it.",
    ]


def test_problems_garbage(ca, leaf):
    problems = certificate_problems("garbage", None, ca[0], now=NOW)
    assert len(problems) == 1 and problems[0].startswith("The certificate cannot be read")
    problems = certificate_problems(leaf[0], "not a key", "not a bundle", now=NOW)
    assert len(problems) == 2
    assert "private key cannot be read" in problems[0] and "CA bundle" in problems[1]


def test_problems_encrypted_key(ca, leaf):
    key = serialization.load_pem_private_key(leaf[1].encode(), password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    ).decode()
    problems = certificate_problems(leaf[0], encrypted, ca[0], now=NOW)
    assert len(problems) == 1 and "encrypted" in problems[0]


# --------------------------------------------------------------------------------------------
# Renewal
# --------------------------------------------------------------------------------------------


def test_renewal(leaf):
    cert_pem = leaf[0]
    start = NOW - timedelta(minutes=5)
    span = timedelta(days=LEAF_VALIDITY_DAYS, minutes=5)
    due = parse_timestamp(renewal_time(cert_pem))
    assert abs(due - (start + span * RENEW_FRACTION)) <= timedelta(seconds=1)
    assert not renewal_due(cert_pem, now=NOW)
    assert not renewal_due(cert_pem, now=due - timedelta(seconds=1))
    assert renewal_due(cert_pem, now=due)  # exactly when renewal_time says
    assert renewal_due(cert_pem, now=NOW + timedelta(days=LEAF_VALIDITY_DAYS + 10))  # expired
    assert not renewal_due(cert_pem, now=NOW + timedelta(days=200), fraction=0.9)
    assert renewal_due(cert_pem, now=NOW + timedelta(days=200), fraction=0.5)
    assert renewal_time(cert_pem, fraction=1) == certificate_facts(cert_pem)["notAfter"]
    with pytest.raises(ValueError):
        renewal_due(cert_pem, fraction=1.5)
    with pytest.raises(CertificateError):
        renewal_due("garbage")


# --------------------------------------------------------------------------------------------
# Interoperability: OpenSSL (Python's ssl) accepts what qk_tls makes
# --------------------------------------------------------------------------------------------


def _write_pair(tmp_path, name: str, pair: tuple[str, str]) -> tuple[str, str]:
    cert_file, key_file = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert_file.write_text(pair[0])
    key_file.write_text(pair[1])
    return str(cert_file), str(key_file)


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> tuple[bool, object]:
    """Whether a client gets an echo from a server over a socketpair, and the server's error.

    The echo matters: with TLS 1.3 the client's handshake completes before the server has
    judged the client certificate, so a rejected client only notices on its first read.
    """
    server_sock, client_sock = socket.socketpair()
    server_sock.settimeout(5)
    client_sock.settimeout(5)
    server_error: list[object] = []

    def serve():
        try:
            with server_ctx.wrap_socket(server_sock, server_side=True) as tls:
                tls.sendall(tls.recv(4))
        except (OSError, ssl.SSLError) as err:
            server_error.append(err)
            server_sock.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    echoed = False
    try:
        with client_ctx.wrap_socket(client_sock, server_hostname="localhost") as tls:
            tls.sendall(b"ping")
            echoed = tls.recv(4) == b"ping"
    except (OSError, ssl.SSLError):
        pass
    finally:
        client_sock.close()
        thread.join(5)
    assert not thread.is_alive()
    return echoed, (server_error[0] if server_error else None)


def _contexts(tmp_path, ca_pem, server_pair, client_pair):
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(*_write_pair(tmp_path, "server", server_pair))
    server_ctx.load_verify_locations(cadata=ca_pem)
    server_ctx.verify_mode = ssl.CERT_REQUIRED  # etcd's --client-cert-auth
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the hostname
    client_ctx.load_cert_chain(*_write_pair(tmp_path, "client", client_pair))
    client_ctx.load_verify_locations(cadata=ca_pem)
    for ctx in (server_ctx, client_ctx):
        # RFC 5280 strictness, as recent Python and Go apply it, on both sides.
        ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    return server_ctx, client_ctx


def test_ssl_handshake_with_client_certificates(tmp_path):
    # Real time, since OpenSSL checks validity against its own clock.
    authority = new_ca("interop CA")
    server_pair = issue_leaf(*authority, "server", dns_names=["localhost"], client=False)
    client_pair = issue_leaf(*authority, "root", server=False)
    echoed, error = _handshake(*_contexts(tmp_path, authority[0], server_pair, client_pair))
    assert error is None and echoed

    stranger = issue_leaf(*new_ca("stranger CA"), "root", server=False)
    echoed, error = _handshake(*_contexts(tmp_path, authority[0], server_pair, stranger))
    assert isinstance(error, ssl.SSLError) and not echoed
    assert "certificate" in str(error).lower()


def test_extended_key_usage_is_enforced_by_openssl(tmp_path):
    # The missing-EKU problem is real: OpenSSL refuses a client-only leaf as a server's.
    authority = new_ca("interop CA")
    client_only = issue_leaf(*authority, "server", dns_names=["localhost"], server=False)
    client_pair = issue_leaf(*authority, "root", server=False)
    echoed, _ = _handshake(*_contexts(tmp_path, authority[0], client_only, client_pair))
    assert not echoed
    assert certificate_problems(*client_only, authority[0], server=True)
