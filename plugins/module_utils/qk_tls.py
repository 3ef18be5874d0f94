# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The certificate core of quorumkeeper's TLS support (etcd client and peer TLS): make a CA,
issue leaves from it, read what a certificate says, judge whether a certificate will work for
an etcd member or client, and decide when to renew it.

Pure functions on PEM strings, built on the ``cryptography`` package only: no openssl
subprocess, no files, no Ansible, so modules, action plugins and tests share one set of rules
and the operator image needs no openssl binary. Keys are ECDSA P-256: fast to generate and
accepted by etcd and every Go or OpenSSL client. Problems are reported as sentences a person can
act on, because they end up in the EtcdCluster's status.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import socket
import ssl
from datetime import UTC, datetime, timedelta

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    format_timestamp,
)
from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY_DAYS = 3650
LEAF_VALIDITY_DAYS = 365
RENEW_FRACTION = 2 / 3  # a leaf is due for renewal once 2/3 of its validity has passed

# Backdating not_before keeps a certificate usable on a member whose clock is a little behind
# the operator's.
CLOCK_SKEW = timedelta(minutes=5)


class CertificateError(ValueError):
    """A certificate, key or bundle that cannot be used; the message says what to do."""


# --------------------------------------------------------------------------------------------
# Parsing and serializing
# --------------------------------------------------------------------------------------------


def _pem_bytes(pem: str | bytes) -> bytes:
    return pem if isinstance(pem, bytes) else str(pem or "").encode("ascii", "replace")


def _reason(err: Exception) -> str:
    # cryptography appends a link to its FAQ, which is noise in a status condition.
    return str(err).split(" See https://", 1)[0].rstrip(". ") or type(err).__name__


def _load_certificates(pem: str | bytes) -> list[x509.Certificate]:
    data = _pem_bytes(pem)
    if not data.strip():
        raise CertificateError("not a PEM certificate: it is empty")
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise CertificateError("not a PEM certificate: it has no BEGIN CERTIFICATE block")
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError as err:
        raise CertificateError(f"not a PEM certificate: {_reason(err)}") from None


def _load_certificate(pem: str | bytes) -> x509.Certificate:
    return _load_certificates(pem)[0]


def _load_private_key(pem: str | bytes):
    try:
        return serialization.load_pem_private_key(_pem_bytes(pem), password=None)
    except TypeError:
        # load_pem_private_key says "password was not given" for an encrypted key.
        raise CertificateError(
            "the private key is encrypted; etcd needs it unencrypted (PEM 'PRIVATE KEY')"
        ) from None
    except (ValueError, UnsupportedAlgorithm) as err:
        raise CertificateError(f"not a PEM private key: {_reason(err)}") from None


def _cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def _key_pem(key) -> str:
    # etcd reads PKCS8 ("PRIVATE KEY"); Kubernetes Secrets hold it unencrypted.
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode("ascii")


def _public_der(public_key) -> bytes:
    return public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _signature_hash(key):
    # Ed25519/Ed448 sign without a separate digest; everything else gets SHA-256.
    if isinstance(key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey):
        return None
    return hashes.SHA256()


def _utc(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now(UTC)
    # A naive moment is taken as UTC, the way parse_timestamp reads one.
    return now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)


def _common_name(name: x509.Name) -> str:
    attributes = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attributes[0].value) if attributes else ""


def _describe_name(name: x509.Name) -> str:
    return name.rfc4514_string() or "(empty)"


def _extension(cert: x509.Certificate, kind):
    try:
        return cert.extensions.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return None


def _is_ca(cert: x509.Certificate) -> bool:
    constraints = _extension(cert, x509.BasicConstraints)
    return bool(constraints and constraints.ca)


def _allows(cert: x509.Certificate, usage) -> bool:
    # Without the extension a certificate may be used for anything; anyExtendedKeyUsage says so
    # explicitly. Go (etcd) and OpenSSL both read it this way.
    usages = _extension(cert, x509.ExtendedKeyUsage)
    if usages is None:
        return True
    return usage in usages or ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE in usages


def _san_values(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    sans = _extension(cert, x509.SubjectAlternativeName)
    if sans is None:
        return [], []
    dns_names = list(sans.get_values_for_type(x509.DNSName))
    ips = [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    return dns_names, ips


def _ip_or_none(text: str):
    try:
        return ipaddress.ip_address(str(text).strip())
    except ValueError:
        return None


def _unique(values) -> list:
    seen: list = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


# --------------------------------------------------------------------------------------------
# Making certificates
# --------------------------------------------------------------------------------------------


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _subject(common_name: str) -> x509.Name:
    try:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, str(common_name))])
    except ValueError as err:
        # cryptography insists on 1 to 64 characters for a common name.
        raise CertificateError(f"unusable common name {common_name!r}: {err}") from None


def new_ca(
    common_name: str, *, now: datetime | None = None, days: int = CA_VALIDITY_DAYS
) -> tuple[str, str]:
    """(cert_pem, key_pem) of a self-signed CA valid for ``days`` from ``now``."""
    now = _utc(now)
    key = _new_key()
    name = _subject(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _cert_pem(cert), _key_pem(key)


def issue_leaf(
    ca_cert_pem: str,
    ca_key_pem: str,
    common_name: str,
    *,
    dns_names=(),
    ip_addresses=(),
    server: bool = True,
    client: bool = True,
    now: datetime | None = None,
    days: int = LEAF_VALIDITY_DAYS,
) -> tuple[str, str]:
    """(cert_pem, key_pem) of a leaf for a server and/or client, signed by the CA.

    The leaf never outlives its CA: a chain is only as valid as its shortest link, and a leaf
    that claims more would hide the CA's expiry from renewal_due.
    """
    now = _utc(now)
    ca_cert = _load_certificate(ca_cert_pem)
    ca_key = _load_private_key(ca_key_pem)
    if _public_der(ca_key.public_key()) != _public_der(ca_cert.public_key()):
        raise CertificateError(
            f"the CA key does not belong to the CA certificate "
            f"({_describe_name(ca_cert.subject)}); store the key that was issued with it"
        )
    constraints = _extension(ca_cert, x509.BasicConstraints)
    if constraints is not None and not constraints.ca:
        raise CertificateError(
            f"{_describe_name(ca_cert.subject)} is not a CA certificate (BasicConstraints ca=False)"
        )
    not_before = now - CLOCK_SKEW
    not_after = min(now + timedelta(days=days), ca_cert.not_valid_after_utc)
    if not_after <= now:
        raise CertificateError(
            f"the CA {_describe_name(ca_cert.subject)} expired at "
            f"{format_timestamp(ca_cert.not_valid_after_utc)}; rotate the CA first"
        )
    if not (server or client):
        raise CertificateError("a leaf must be usable by a server, a client or both")

    sans: list[x509.GeneralName] = []
    try:
        sans += [x509.DNSName(str(name).strip()) for name in _unique(dns_names)]
        sans += [
            x509.IPAddress(ipaddress.ip_address(str(ip).strip())) for ip in _unique(ip_addresses)
        ]
    except ValueError as err:
        raise CertificateError(f"unusable subject alternative name: {err}") from None

    ca_ski = _extension(ca_cert, x509.SubjectKeyIdentifier)
    authority_key_id = (
        x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski)
        if ca_ski is not None
        else x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key())
    )
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    key = _new_key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(_subject(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(authority_key_id, critical=False)
    )
    if sans:
        # An empty SubjectAlternativeName is invalid (RFC 5280), so it is left out entirely.
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, _signature_hash(ca_key))
    return _cert_pem(cert), _key_pem(key)


# --------------------------------------------------------------------------------------------
# Reading certificates
# --------------------------------------------------------------------------------------------


def certificate_der(cert_pem: str) -> bytes:
    """The DER encoding of the first certificate of a PEM (what a TLS handshake carries)."""
    return _load_certificate(cert_pem).public_bytes(serialization.Encoding.DER)


def presented_certificate(host: str, port: int, timeout: float = 3.0) -> bytes | None:
    """The certificate (DER) a TLS server at ``host:port`` presents, or None when none could be
    had. Nothing is verified: the caller compares it with the one it expects. With TLS 1.3 the
    client's certificate is sent after the server's, so a server that requires one still
    presents its own first."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            return tls.getpeercert(binary_form=True)
    except OSError:
        return None


def certificate_facts(cert_pem: str) -> dict:
    """What the first certificate of a PEM says, for status and reports.

    ``serial`` is lower-case hex without separators; ``serverAuth``/``clientAuth`` say whether
    the certificate may be used that way, so both are true without an ExtendedKeyUsage.
    """
    cert = _load_certificate(cert_pem)
    dns_names, ips = _san_values(cert)
    return {
        "subject": _common_name(cert.subject),
        "issuer": _common_name(cert.issuer),
        "serial": format(cert.serial_number, "x"),
        "notBefore": format_timestamp(cert.not_valid_before_utc),
        "notAfter": format_timestamp(cert.not_valid_after_utc),
        "dnsNames": dns_names,
        "ipAddresses": ips,
        "isCA": _is_ca(cert),
        "serverAuth": _allows(cert, ExtendedKeyUsageOID.SERVER_AUTH),
        "clientAuth": _allows(cert, ExtendedKeyUsageOID.CLIENT_AUTH),
    }


def bundle_certificates(pem: str) -> list[str]:
    """Each certificate of a PEM bundle, as PEM; during a CA rotation ca.crt holds old and new."""
    return [_cert_pem(cert) for cert in _load_certificates(pem)]


def ca_fingerprint(ca: x509.Certificate | str) -> str:
    """A short fingerprint of one CA (16 hex digits): of its name and key, which are what
    verifying a certificate it signed looks at, so that a CA certificate renewed with the same
    key is the same CA."""
    if isinstance(ca, str):
        ca = _load_certificate(ca)
    digest = hashlib.sha256(ca.subject.public_bytes())
    digest.update(_public_der(ca.public_key()))
    return digest.hexdigest()[:16]


def bundle_fingerprints(bundle_pem: str) -> list[str]:
    """The fingerprint of each CA certificate of a bundle, in its order."""
    return [ca_fingerprint(ca) for ca in _load_certificates(bundle_pem)]


def signing_cas(cert_pem: str, bundle_pem: str) -> list[dict]:
    """The CAs of ``bundle_pem`` that signed the certificate ``cert_pem``, each
    ``{fingerprint, subject}``; [] when none did or either cannot be read."""
    try:
        cert, cas = _load_certificate(cert_pem), _load_certificates(bundle_pem)
    except CertificateError:
        return []
    return [
        {"fingerprint": ca_fingerprint(ca), "subject": _describe_name(ca.subject)}
        for ca in cas
        if _signed_by(cert, ca)
    ]


def name_covered(patterns, name: str) -> bool:
    """Whether DNS SANs ``patterns`` cover ``name`` the way Go and OpenSSL clients check it.

    A wildcard stands for exactly one whole left-most label (``*.a.b`` covers ``x.a.b``, not
    ``a.b`` nor ``x.y.a.b``); partial wildcards such as ``f*.a.b`` only match literally, as Go
    does. An IP address is never covered by DNS names: clients check it against IP SANs only.
    """
    if isinstance(patterns, str):
        patterns = [patterns]
    host = str(name or "").strip().rstrip(".").lower()
    if not host or _ip_or_none(host) is not None:
        return False
    label, _, rest = host.partition(".")
    for pattern in patterns or ():
        pattern = str(pattern or "").strip().rstrip(".").lower()
        if not pattern:
            continue
        if pattern == host:
            return True
        if pattern.startswith("*.") and label and rest and pattern[2:] == rest:
            return True
    return False


# --------------------------------------------------------------------------------------------
# Judging certificates
# --------------------------------------------------------------------------------------------


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        # Checks issuer == CA subject and the signature (RSA, ECDSA, Ed25519) in one step.
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def certificate_problems(
    cert_pem: str,
    key_pem: str | None,
    ca_bundle_pem: str,
    *,
    dns_names=(),
    server: bool = False,
    client: bool = False,
    now: datetime | None = None,
) -> list[str]:
    """Everything wrong with a leaf as an etcd member or client would use it; [] when fine.

    ``key_pem`` None skips the key check (e.g. when only the certificate is at hand). Names of
    ``dns_names`` that are IP addresses are checked against the IP SANs, as clients do.
    """
    now = _utc(now)
    problems: list[str] = []
    try:
        cert = _load_certificate(cert_pem)
    except CertificateError as err:
        problems.append(f"The certificate cannot be read ({err}); store a PEM certificate.")
        cert = None
    key = None
    if key_pem is not None:
        try:
            key = _load_private_key(key_pem)
        except CertificateError as err:
            problems.append(f"The private key cannot be read ({err}).")
    try:
        cas = _load_certificates(ca_bundle_pem)
    except CertificateError as err:
        problems.append(f"The CA bundle cannot be read ({err}); store the CA certificate(s).")
        cas = None
    if cert is None:
        return problems

    if key is not None and _public_der(key.public_key()) != _public_der(cert.public_key()):
        problems.append(
            "The private key does not belong to the certificate; store the key that was issued "
            "with it, or issue a new certificate."
        )

    if cas is not None:
        signers = [ca for ca in cas if _signed_by(cert, ca)]
        if not signers:
            known = "; ".join(_describe_name(ca.subject) for ca in cas)
            problems.append(
                f"The certificate (issuer {_describe_name(cert.issuer)}) is not signed by any CA "
                f"of the bundle ({known}); issue it from the cluster's CA or add its CA to the "
                f"bundle."
            )
        elif all(ca.not_valid_after_utc < now for ca in signers):
            problems.append(
                f"The CA that signed the certificate expired at "
                f"{format_timestamp(max(ca.not_valid_after_utc for ca in signers))}; rotate the CA."
            )

    if now < cert.not_valid_before_utc:
        problems.append(
            f"The certificate is not valid before {format_timestamp(cert.not_valid_before_utc)} "
            f"(now {format_timestamp(now)}); check the clocks or wait."
        )
    if now > cert.not_valid_after_utc:
        problems.append(
            f"The certificate expired at {format_timestamp(cert.not_valid_after_utc)} "
            f"(now {format_timestamp(now)}); renew it."
        )

    san_dns, san_ips = _san_values(cert)
    covered_ips = {ipaddress.ip_address(ip) for ip in san_ips}
    for name in _unique(dns_names):
        ip = _ip_or_none(name)
        if ip is not None:
            if ip not in covered_ips:
                listed = ", ".join(san_ips) or "none"
                problems.append(
                    f"The certificate does not cover the IP address {name} "
                    f"(its IP addresses: {listed}); issue it with that address."
                )
        elif not name_covered(san_dns, name):
            listed = ", ".join(san_dns) or "none"
            problems.append(
                f"The certificate does not cover the name {name!r} (its DNS names: {listed}); "
                f"issue it with that name."
            )

    if server and not _allows(cert, ExtendedKeyUsageOID.SERVER_AUTH):
        problems.append(
            "The certificate may not be used by a server: its extended key usage lacks "
            "serverAuth; issue it for server use."
        )
    if client and not _allows(cert, ExtendedKeyUsageOID.CLIENT_AUTH):
        problems.append(
            "The certificate may not be used by a client: its extended key usage lacks "
            "clientAuth; issue it for client use."
        )
    return problems


# --------------------------------------------------------------------------------------------
# Renewal
# --------------------------------------------------------------------------------------------


def _renewal_moment(cert: x509.Certificate, fraction: float) -> datetime:
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be between 0 and 1, not {fraction!r}")
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    # Whole seconds, rounded up: renewal_time is written with seconds, and renewal_due must
    # turn true exactly at the moment renewal_time names, not up to a second before it.
    seconds = math.ceil((end - start).total_seconds() * fraction)
    return min(start + timedelta(seconds=seconds), end)


def renewal_due(
    cert_pem: str, *, now: datetime | None = None, fraction: float = RENEW_FRACTION
) -> bool:
    """Whether ``fraction`` of the certificate's validity has passed (or it has expired)."""
    cert = _load_certificate(cert_pem)
    return _utc(now) >= _renewal_moment(cert, fraction)


def renewal_time(cert_pem: str, *, fraction: float = RENEW_FRACTION) -> str:
    """The RFC 3339 moment at which renewal_due becomes true."""
    return format_timestamp(_renewal_moment(_load_certificate(cert_pem), fraction))
