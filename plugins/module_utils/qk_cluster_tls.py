# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""An EtcdCluster's TLS: which Secrets hold its certificates, what each must say, and making
them so.

``spec.tls.client`` and ``spec.tls.peer`` are each either operator-managed (a CA per cluster and
per kind of traffic, and leaves it issues) or the user's own Secrets in the layout cert-manager
writes (``tls.crt``, ``tls.key``, ``ca.crt``). Client and peer traffic get separate CAs on
purpose: with one CA, an application's client certificate would also be accepted on the peer
port, and could speak raft to the members.

``resolve`` turns the spec into names (pure); ``ensure_certificates`` reads the Secrets, issues
or renews what the operator manages, checks what the user brought, and writes the operator's
own client certificate where its etcd modules read it.
"""

from __future__ import annotations

import base64
import os
import tempfile
from dataclasses import asdict, dataclass, field, replace

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    ClusterNetwork,
    client_service_name,
    member_labels,
    peer_name,
    user_secret_name,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import secret_data


def _certs():
    """qk_tls, imported on first use: pod rendering needs this module's names, and should not
    pay for loading the cryptography package."""
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils import qk_tls  # noqa: PLC0415

    return qk_tls


SECRET_TYPE = "kubernetes.io/tls"
CA_KEY, CERT_KEY, KEY_KEY = "ca.crt", "tls.crt", "tls.key"
# Where a member's pod mounts its certificates (render_replicaset).
CLIENT_TLS_DIR = "/etc/etcd/tls/client"
PEER_TLS_DIR = "/etc/etcd/tls/peer"
# In an EtcdPeer's tls.client: the member also serves plain HTTP on the client port, while
# client TLS is turned on or off (qk_plan_config.staged_config).
SERVE_PLAIN_HTTP = "servePlainHTTP"
# etcd authenticates a client certificate as the user its CN names once auth is on: the
# operator's is root.
OPERATOR_USER = "root"
DEFAULT_METRICS_PORT = 2381


def secret_names(cluster: str) -> dict:
    """The Secrets the operator makes for ``cluster`` when it manages its certificates."""
    return {
        "client_ca": f"{cluster}-client-ca",
        "server": f"{cluster}-server-tls",
        "client": f"{cluster}-client-tls",
        "operator": f"{cluster}-operator-tls",
        "peer_ca": f"{cluster}-peer-ca",
        "peer": f"{cluster}-peer-tls",
    }


def resolve(cluster: str, tls_spec: dict | None) -> dict:
    """What ``spec.tls`` means for the members: ``{client: {secretName, operatorSecretName,
    clientCertAuth, managed}, peer: {secretName, managed}}``, each present only when that TLS is
    on; ``{}`` for a plain cluster. The EtcdPeer spec carries the members' part of it."""
    tls_spec = tls_spec or {}
    names = secret_names(cluster)
    resolved = {}
    client = tls_spec.get("client")
    if client is not None:
        own = client.get("serverSecretName")
        resolved["client"] = {
            "managed": not own,
            "secretName": own or names["server"],
            "operatorSecretName": client.get("operatorSecretName") or names["operator"],
            "clientCertAuth": client.get("clientCertAuth", True),
        }
    peer = tls_spec.get("peer")
    if peer is not None:
        own = peer.get("secretName")
        resolved["peer"] = {"managed": not own, "secretName": own or names["peer"]}
    return resolved


def peer_tls_spec(resolved: dict) -> dict:
    """The ``tls`` of an EtcdPeer spec: the Secrets its pod mounts."""
    spec = {}
    if "client" in resolved:
        spec["client"] = {
            "secretName": resolved["client"]["secretName"],
            "clientCertAuth": resolved["client"]["clientCertAuth"],
        }
    if "peer" in resolved:
        spec["peer"] = {"secretName": resolved["peer"]["secretName"]}
    return spec


def schemes(tls_spec: dict | None) -> dict:
    """ClusterNetwork's schemes for an EtcdCluster or EtcdPeer ``tls``."""
    tls_spec = tls_spec or {}
    return {
        "client_scheme": "https" if tls_spec.get("client") is not None else "http",
        "peer_scheme": "https" if tls_spec.get("peer") is not None else "http",
    }


def served_client_schemes(peer_tls: dict | None) -> frozenset:
    """The schemes a member whose EtcdPeer ``tls`` is ``peer_tls`` serves clients with."""
    client = (peer_tls or {}).get("client")
    if client is None:
        return frozenset({"http"})
    return frozenset({"https", "http"} if client.get(SERVE_PLAIN_HTTP) else {"https"})


def member_client_scheme(peer_tls: dict | None, have_certificate: bool) -> str:
    """The scheme the operator reaches a member by: https where the member serves it and the
    operator has a client certificate for it (or the member serves nothing else), else http."""
    served = served_client_schemes(peer_tls)
    if "https" in served and (have_certificate or "http" not in served):
        return "https"
    return "http"


def member_client_url(
    network: ClusterNetwork, peer: str, peer_tls: dict | None, have_certificate: bool
) -> str:
    """The client URL the operator reaches member ``peer`` by (member_client_scheme)."""
    scheme = member_client_scheme(peer_tls, have_certificate)
    return replace(network, client_scheme=scheme).client_url(peer)


def member_dns_names(network: ClusterNetwork) -> list[str]:
    """The SANs of an operator-issued member certificate: any member of the cluster (a wildcard,
    so that scaling and replacing members needs no new certificate), its client Service, and
    localhost for etcd's own gateway and for kubectl exec."""
    service = client_service_name(network.cluster)
    domain_suffix = f"{network.namespace}.svc.{network.domain}"
    return [
        f"*.{network.cluster}.{domain_suffix}",
        f"*.{network.cluster}.{network.namespace}.svc",
        f"{service}.{domain_suffix}",
        f"{service}.{network.namespace}.svc",
        f"{service}.{network.namespace}",
        service,
        "localhost",
    ]


def names_to_cover(network: ClusterNetwork, replicas: int, client: bool) -> list[str]:
    """Names a member certificate must cover to serve the cluster at ``replicas`` members (the
    client Service too for the client port): what a user's own certificate is checked for."""
    names = [network.member_host(peer_name(network.cluster, i)) for i in range(replicas)]
    if client:
        service = client_service_name(network.cluster)
        names.append(f"{service}.{network.namespace}.svc.{network.domain}")
    return names


def credentials_dir(base: str | None, namespace: str, cluster: str) -> str:
    """Where the operator keeps its client certificate for ``cluster`` (private to its user)."""
    root = base or os.path.join(tempfile.gettempdir(), "quorumkeeper-credentials")
    return os.path.join(root, namespace, cluster)


@dataclass
class TLSReport:
    """What ``ensure_certificates`` found and did."""

    issued: list = field(default_factory=list)  # [{secret, reason}]
    problems: list = field(default_factory=list)  # sentences naming the Secret
    certificates: list = field(default_factory=list)  # status.tls.certificates entries
    connection: dict = field(default_factory=dict)  # ca_cert, client_cert, client_key paths

    def as_dict(self) -> dict:
        return asdict(self)


def _encode(files: dict) -> dict:
    return {k: base64.b64encode(v.encode()).decode() for k, v in files.items()}


class CertificateManager:
    """Reads, issues and checks one cluster's certificate Secrets through ``kube`` (a
    qk_kube client talking to the API server itself: Secrets are never cached by the operator)."""

    def __init__(self, kube, network: ClusterNetwork, owner: dict, *, issue=True, check=False):
        self.kube = kube
        self.network = network
        self.owner = owner  # ownerReference to the EtcdCluster, or None
        self.issue = issue
        self.check = check  # check mode: say what would be issued, write nothing
        self.report = TLSReport()
        self._cache: dict = {}

    # -- Secrets ------------------------------------------------------------------------------

    def read(self, name: str) -> dict | None:
        if name not in self._cache:
            secret = self.kube.get("v1", "Secret", name, self.network.namespace)
            try:
                files = None if secret is None else secret_data(secret)
            except ValueError:
                # Undecodable data counts as missing: reported for the user's own Secrets,
                # rewritten for the operator's.
                files = {}
            self._cache[name] = files
        return self._cache[name]

    def write(self, name: str, files: dict, reason: str, existed: bool):
        self.report.issued.append({"secret": name, "reason": reason})
        self._cache[name] = files
        if self.check:
            return
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": SECRET_TYPE,
            "metadata": {
                "name": name,
                "namespace": self.network.namespace,
                "labels": member_labels(self.network.cluster),
                **({"ownerReferences": [self.owner]} if self.owner else {}),
            },
            "data": _encode(files),
        }
        if existed:
            self.kube.patch("v1", "Secret", name, {"data": body["data"]}, self.network.namespace)
        else:
            self.kube.create(body)

    def record(self, name: str, purpose: str, files: dict):
        try:
            facts = _certs().certificate_facts(files[CERT_KEY])
        except (_certs().CertificateError, KeyError):
            return
        self.report.certificates.append(
            {
                "secretName": name,
                "purpose": purpose,
                "subject": facts["subject"],
                "notAfter": facts["notAfter"],
                "renewalTime": _certs().renewal_time(files[CERT_KEY]),
            }
        )

    # -- operator-managed ---------------------------------------------------------------------

    def ensure_ca(self, name: str, common_name: str) -> dict | None:
        existing = self.read(name)
        if existing and not _certs().certificate_problems(
            existing.get(CERT_KEY, ""), existing.get(KEY_KEY), existing.get(CERT_KEY, "")
        ):
            self.record(name, "ca", existing)
            return existing
        if not self.issue:
            self.report.problems.append(f"Secret {name} (the cluster's CA) is missing or invalid")
            return None
        cert, key = _certs().new_ca(common_name)
        files = {CERT_KEY: cert, KEY_KEY: key, CA_KEY: cert}
        self.write(name, files, "replaced" if existing else "created", existing is not None)
        self.record(name, "ca", files)
        return files

    def ensure_leaf(self, name, purpose, ca, common_name, *, dns_names=(), server, client):
        files = self.read(name)
        existed = files is not None
        reason = None
        if not files or not files.get(CERT_KEY):
            # Absent, or a Secret holding something else so far (a user's password).
            reason = "created"
        else:
            problems = _certs().certificate_problems(
                files.get(CERT_KEY, ""),
                files.get(KEY_KEY),
                ca[CERT_KEY],
                dns_names=[n for n in dns_names if not n.startswith("*.")],
                server=server,
                client=client,
            )
            if problems:
                reason = "replaced: " + "; ".join(problems)
            elif _certs().renewal_due(files[CERT_KEY]):
                reason = "renewed"
            elif files.get(CA_KEY) != ca[CERT_KEY]:
                reason = "replaced: its ca.crt is not the cluster's CA"
        if reason and self.issue:
            cert, key = _certs().issue_leaf(
                ca[CERT_KEY],
                ca[KEY_KEY],
                common_name,
                dns_names=dns_names,
                ip_addresses=["127.0.0.1"] if server else [],
                server=server,
                client=client,
            )
            files = {CERT_KEY: cert, KEY_KEY: key, CA_KEY: ca[CERT_KEY]}
            self.write(name, files, reason, existed)
        elif reason and not files:
            self.report.problems.append(f"Secret {name} ({purpose} certificate) does not exist")
            return None
        self.record(name, purpose, files)
        return files

    # -- the user's own -----------------------------------------------------------------------

    def check_own(self, name, purpose, *, dns_names=(), server, client, field_path):
        files = self.read(name)
        if files is None:
            self.report.problems.append(
                f"{field_path}: Secret {self.network.namespace}/{name} does not exist"
            )
            return None
        missing = [k for k in (CA_KEY, CERT_KEY, KEY_KEY) if not files.get(k)]
        if missing:
            self.report.problems.append(
                f"{field_path}: Secret {name} has no {', '.join(missing)} (it needs tls.crt, "
                "tls.key and ca.crt, as cert-manager writes them)"
            )
            return None
        problems = _certs().certificate_problems(
            files[CERT_KEY],
            files[KEY_KEY],
            files[CA_KEY],
            dns_names=dns_names,
            server=server,
            client=client,
        )
        self.report.problems.extend(f"{field_path}: Secret {name}: {p}" for p in problems)
        self.record(name, purpose, files)
        return None if problems else files


def ensure_certificates(
    manager: CertificateManager, resolved: dict, replicas: int, users=()
) -> TLSReport:
    """Make the cluster's certificate Secrets what ``resolved`` asks for (operator-managed ones
    issued, renewed once two thirds of their validity has passed, or replaced when wrong; the
    user's own ones only checked), and return what was found and done. ``users``: the etcd
    users of spec.auth, each given a client certificate whose CN is the user in its credential
    Secret (only with an operator-managed client CA, which can sign one)."""
    network, names = manager.network, secret_names(manager.network.cluster)
    cluster = network.cluster
    members = member_dns_names(network)
    client = resolved.get("client")
    if client and client["managed"]:
        ca = manager.ensure_ca(names["client_ca"], f"{cluster} etcd client CA")
        if ca:
            manager.ensure_leaf(
                names["server"], "server", ca, cluster, dns_names=members, server=True, client=True
            )
            manager.ensure_leaf(
                names["client"], "client", ca, f"{cluster}-client", server=False, client=True
            )
            manager.ensure_leaf(
                names["operator"], "operator", ca, OPERATOR_USER, server=False, client=True
            )
            for user in users:
                manager.ensure_leaf(
                    user_secret_name(cluster, user), "user", ca, user, server=False, client=True
                )
    elif client:
        manager.check_own(
            client["secretName"],
            "server",
            dns_names=names_to_cover(network, replicas, client=True),
            server=True,
            client=False,
            field_path="spec.tls.client.serverSecretName",
        )
        manager.check_own(
            client["operatorSecretName"],
            "operator",
            server=False,
            client=True,
            field_path="spec.tls.client.operatorSecretName",
        )
    peer = resolved.get("peer")
    if peer and peer["managed"]:
        ca = manager.ensure_ca(names["peer_ca"], f"{cluster} etcd peer CA")
        if ca:
            manager.ensure_leaf(
                names["peer"], "peer", ca, cluster, dns_names=members, server=True, client=True
            )
    elif peer:
        manager.check_own(
            peer["secretName"],
            "peer",
            dns_names=names_to_cover(network, replicas, client=False),
            server=True,
            client=True,
            field_path="spec.tls.peer.secretName",
        )
    return manager.report


def kept_client(cluster: str, peers) -> dict | None:
    """While spec.tls.client is gone but a member still serves client TLS (turning it off):
    the resolved client part the operator keeps reaching members with, from the first such
    EtcdPeer (``peers``, as listed). Its operator Secret is known for operator-managed
    certificates; for the user's own ones the files written before are used (``""``)."""
    names = secret_names(cluster)
    for peer in peers:
        client = ((peer.get("spec") or {}).get("tls") or {}).get("client")
        if client:
            managed = client["secretName"] == names["server"]
            return {
                "managed": managed,
                "secretName": client["secretName"],
                "operatorSecretName": names["operator"] if managed else "",
                "clientCertAuth": client.get("clientCertAuth", True),
            }
    return None


def _credential_paths(directory: str) -> dict:
    return {
        option: os.path.join(directory, key)
        for option, key in (("ca_cert", CA_KEY), ("client_cert", CERT_KEY), ("client_key", KEY_KEY))
    }


def write_operator_credentials(manager: CertificateManager, resolved: dict, directory: str):
    """Put the operator's client certificate where its etcd modules read it, rewriting a file
    only when its content changed (modules of a running reconcile may be reading it)."""
    client = resolved.get("client")
    if not client:
        return {}
    if not client["operatorSecretName"]:
        paths = _credential_paths(directory)
        return paths if all(os.path.isfile(path) for path in paths.values()) else {}
    files = manager.read(client["operatorSecretName"])
    if not files or not all(files.get(k) for k in (CA_KEY, CERT_KEY, KEY_KEY)):
        return {}
    # The server certificate's CA, which a user's operator Secret may not carry in its ca.crt
    # when another CA signed the operator's own certificate.
    server = manager.read(client["secretName"]) or {}
    trust = files[CA_KEY] if client["managed"] else (server.get(CA_KEY) or files[CA_KEY])
    try:
        _certs().bundle_certificates(trust)
    except _certs().CertificateError:
        return {}
    paths = _credential_paths(directory)
    if not manager.check:
        for option, content in (
            ("ca_cert", trust),
            ("client_cert", files[CERT_KEY]),
            ("client_key", files[KEY_KEY]),
        ):
            write_private_file(paths[option], content)
    return paths


def write_private_file(path: str, content: str) -> bool:
    """Write ``content`` to ``path`` (mode 0600, its directory 0700) unless it already holds
    it, atomically: modules of a running reconcile may be reading it. True when written."""
    try:
        with open(path) as existing:
            if existing.read() == content:
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    temporary = f"{path}.{os.getpid()}"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(content)
    os.replace(temporary, path)
    return True
