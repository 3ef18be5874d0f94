"""Certificates of the local cluster: a CA, the API server's serving cert, per-component clients.

Kubernetes identifies a client by its certificate's CN (user) and O (groups), so each component gets
the identity the real one has (system:kube-controller-manager, system:node:<name> in system:nodes,
...). That way the Node authorizer, NodeRestriction and RBAC all apply as on a real cluster.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(key: rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


class CertificateAuthority:
    """Loads the CA from `directory` or creates it there (ca.crt / ca.key)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.cert_path = directory / "ca.crt"
        key_path = directory / "ca.key"
        if self.cert_path.exists() and key_path.exists():
            self.key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            self.cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
            return
        directory.mkdir(parents=True, exist_ok=True)
        self.key = _key()
        now = datetime.datetime.now(datetime.UTC)
        name = _name("quorumkeeper-local-ca")
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY * 10)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        _write_key(self.key, key_path)
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        stem: str,
        common_name: str,
        organizations: tuple[str, ...] = (),
        server_names: tuple[str, ...] = (),
    ) -> tuple[Path, Path]:
        """Create `<stem>.crt`/`<stem>.key` unless present; server_names makes it a serving cert."""
        cert_path = self.directory / f"{stem}.crt"
        key_path = self.directory / f"{stem}.key"
        if cert_path.exists() and key_path.exists():
            return cert_path, key_path
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
        )
        if server_names:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
            alternative_names: list[x509.GeneralName] = []
            for entry in server_names:
                try:
                    alternative_names.append(x509.IPAddress(ipaddress.ip_address(entry)))
                except ValueError:
                    alternative_names.append(x509.DNSName(entry))
            builder = builder.add_extension(
                x509.SubjectAlternativeName(alternative_names), critical=False
            )
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        _write_key(key, key_path)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cert_path, key_path


def service_account_key(directory: Path) -> tuple[Path, Path]:
    """The key pair the API server signs ServiceAccount tokens with (sa.key / sa.pub)."""
    private_path = directory / "sa.key"
    public_path = directory / "sa.pub"
    if private_path.exists() and public_path.exists():
        return private_path, public_path
    key = _key()
    _write_key(key, private_path)
    public_path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private_path, public_path
