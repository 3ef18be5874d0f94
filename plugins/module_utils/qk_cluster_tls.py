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
import hashlib
import os
import tempfile
from dataclasses import asdict, dataclass, field, replace

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_GROUP,
    ClusterNetwork,
    client_service_name,
    member_labels,
    peer_name,
    user_certificate_secret_name,
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
# In an EtcdPeer's tls.peer: the member still serves its peers plain HTTP, and has its
# certificate only to reach peers that serve TLS, while peer TLS is turned on
# (qk_plan_config.staged_config).
LISTEN_PLAIN_HTTP = "listenPlainHTTP"
# On the EtcdCluster: a new value asks for new CAs (a rotation of both, without downtime). On a
# CA Secret: the request the rotation that made it answered.
ROTATE_ANNOTATION = f"{API_GROUP}/rotate-ca"
ROTATED_FOR_ANNOTATION = f"{API_GROUP}/rotated-for"
# The stages of a CA rotation, as status.tls.rotation says them: members first trust the new CA
# next to the old one, then the leaves are reissued from it, then the old CA is dropped.
TRUSTING, REISSUING = "TrustingNewCA", "ReissuingCertificates"
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
    on; ``{}`` for a plain cluster. A part signed by a cert-manager issuer has its ``issuer``
    (``issuerRef``) and the operator-managed Secret names, and is not ``managed``: cert-manager
    writes those Secrets. The EtcdPeer spec carries the members' part of it."""
    tls_spec = tls_spec or {}
    names = secret_names(cluster)
    resolved = {}
    client = tls_spec.get("client")
    if client is not None:
        own, issuer = client.get("serverSecretName"), client.get("issuerRef")
        resolved["client"] = {
            "managed": not own and not issuer,
            "secretName": own or names["server"],
            "operatorSecretName": client.get("operatorSecretName") or names["operator"],
            "clientCertAuth": client.get("clientCertAuth", True),
            **({"issuer": issuer} if issuer else {}),
        }
    peer = tls_spec.get("peer")
    if peer is not None:
        own, issuer = peer.get("secretName"), peer.get("issuerRef")
        resolved["peer"] = {
            "managed": not own and not issuer,
            "secretName": own or names["peer"],
            **({"issuer": issuer} if issuer else {}),
        }
    return resolved


def peer_tls_spec(resolved: dict, trust: dict | None = None) -> dict:
    """The ``tls`` of an EtcdPeer spec: the Secrets its pod mounts, and while a CA is rotated
    the fingerprint of the CA bundle it must have loaded (``trust``, by part: etcd reads its
    trusted CAs once, at start, so a member restarts to take a new bundle)."""
    trust = trust or {}
    spec = {}
    if "client" in resolved:
        spec["client"] = {
            "secretName": resolved["client"]["secretName"],
            "clientCertAuth": resolved["client"]["clientCertAuth"],
        }
    if "peer" in resolved:
        spec["peer"] = {"secretName": resolved["peer"]["secretName"]}
    for part, settings in spec.items():
        if trust.get(part):
            settings["trust"] = trust[part]
    return spec


def schemes(tls_spec: dict | None) -> dict:
    """ClusterNetwork's schemes for an EtcdCluster or EtcdPeer ``tls``."""
    tls_spec = tls_spec or {}
    peer = tls_spec.get("peer")
    return {
        "client_scheme": "https" if tls_spec.get("client") is not None else "http",
        "peer_scheme": "https" if peer is not None and not peer.get(LISTEN_PLAIN_HTTP) else "http",
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
    # By part (client, peer) while its CA is rotated: the bundle's fingerprint members must
    # run with, and the stage (TRUSTING, REISSUING).
    trust: dict = field(default_factory=dict)
    rotation: dict = field(default_factory=dict)
    rotated_for: str = ""
    # By part whose certificates are the user's own: what the members were started with and
    # present (status.tls.ownTrust, see _ensure_own_trust).
    own_trust: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {**asdict(self), "events": certificate_events(self.issued)}


def certificate_event_reason(reason: str) -> str:
    """The Event reason for what happened to a certificate (``issued``'s ``reason``)."""
    if reason == "renewed":
        return "CertificateRenewed"
    if reason.startswith("rotat"):
        return "CARotation"
    if reason.startswith("trust"):
        return "CertificateTrustUpdated"
    return "CertificateIssued"


def certificate_events(issued: list) -> list:
    """One Event per certificate issued, renewed or rotated, for the round's report to write
    with its own (one task, not one per certificate)."""
    return [
        {
            "reason": certificate_event_reason(item["reason"]),
            "message": f"Secret {item['secret']}: certificate {item['reason']}",
        }
        for item in issued
    ]


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
        self._annotations: dict = {}
        self._versions: dict = {}

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
            metadata = (secret or {}).get("metadata") or {}
            self._annotations[name] = dict(metadata.get("annotations") or {})
            self._versions[name] = str(metadata.get("resourceVersion") or "")
        return self._cache[name]

    def annotations(self, name: str) -> dict:
        self.read(name)
        return self._annotations.get(name) or {}

    def write(self, name: str, files: dict, reason: str, existed: bool, annotations=None):
        self.report.issued.append({"secret": name, "reason": reason})
        # Keys not written stay, in the Secret (a merge patch) as here.
        self._cache[name] = {**(self._cache.get(name) or {}), **files}
        if annotations:
            self._annotations[name] = {**self._annotations.get(name, {}), **annotations}
        if self.check:
            return
        metadata = {"annotations": annotations} if annotations else {}
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": SECRET_TYPE,
            "metadata": {
                "name": name,
                "namespace": self.network.namespace,
                "labels": member_labels(self.network.cluster),
                **({"ownerReferences": [self.owner]} if self.owner else {}),
                **metadata,
            },
            "data": _encode(files),
        }
        if existed:
            patch = {"data": body["data"], **({"metadata": metadata} if metadata else {})}
            self.kube.patch("v1", "Secret", name, patch, self.network.namespace)
        else:
            self.kube.create(body)

    def record(self, name: str, purpose: str, files: dict, *, own=False):
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
                # What the health watch compares the user's own Secrets with, to have a change
                # made in place checked at once (qk_health_watch.changed_secrets).
                **({"resourceVersion": self._versions.get(name, "")} if own else {}),
            }
        )

    # -- operator-managed ---------------------------------------------------------------------

    def ensure_ca(self, name: str, common_name: str, *, rotate_for="", leaves=()) -> dict | None:
        """The CA Secret ``name``: ``tls.crt``/``tls.key`` the CA that signs, ``ca.crt`` the
        bundle members and clients trust (the signing CA, and the one it replaces while a
        rotation goes on).

        A rotation starts when ``rotate_for`` (the EtcdCluster's ROTATE_ANNOTATION) is not the
        request the Secret answered last, when two thirds of the CA's validity have passed, or
        when the CA is gone or unusable while ``leaves`` (Secret names) still hold the CA that
        running members trust: a new CA is made and trusted next to the old one, never in its
        place (members would refuse each other's certificates)."""
        existing = self.read(name)
        valid = bool(existing) and not _certs().certificate_problems(
            existing.get(CERT_KEY, ""), existing.get(KEY_KEY), existing.get(CERT_KEY, "")
        )
        if valid:
            rotating = len(_certs().bundle_certificates(existing.get(CA_KEY) or "")) > 1
            asked = rotate_for and self.annotations(name).get(ROTATED_FOR_ANNOTATION) != rotate_for
            due = asked or _certs().renewal_due(existing[CERT_KEY])
            if rotating or not due or not self.issue:
                self.record(name, "ca", existing)
                return existing
            old_trust = [existing[CERT_KEY]]
            reason = "rotated: a new CA, trusted next to the old one until every member uses it"
        else:
            old_trust = self._trust_of(leaves)
            reason = (
                "replaced: the CA was missing or unusable; the new one is trusted next to the "
                "one the members' certificates were signed by until every member uses it"
                if old_trust
                else ("replaced" if existing else "created")
            )
        if not self.issue:
            self.report.problems.append(f"Secret {name} (the cluster's CA) is missing or invalid")
            return None
        cert, key = _certs().new_ca(common_name)
        bundle = "".join([cert, *[c for c in old_trust if c != cert]])
        files = {CERT_KEY: cert, KEY_KEY: key, CA_KEY: bundle}
        annotations = {ROTATED_FOR_ANNOTATION: rotate_for} if rotate_for else None
        self.write(name, files, reason, existing is not None, annotations)
        self.record(name, "ca", files)
        return files

    def _trust_of(self, leaves) -> list[str]:
        """The CA certificates the ``leaves`` Secrets say they were signed by and trust (what
        running members have loaded), each once."""
        found = []
        for leaf in leaves:
            try:
                bundle = _certs().bundle_certificates((self.read(leaf) or {}).get(CA_KEY) or "")
            except _certs().CertificateError:
                continue
            found.extend(c for c in bundle if c not in found)
        return found

    def ensure_leaf(self, name, purpose, ca, common_name, *, dns_names=(), server, client):
        """The leaf Secret ``name``, signed by ``ca`` (``signers``: the CA certificates it may
        be signed by, ``ca[CERT_KEY]`` unless a rotation still accepts the old one) and with
        ``ca.crt`` the bundle ``ca[CA_KEY]``: issued, renewed or replaced when wrong; only its
        ``ca.crt`` rewritten when that is all that changed (the key stays, no new leaf)."""
        signers = ca.get("signers") or ca[CERT_KEY]
        trust = ca.get(CA_KEY) or ca[CERT_KEY]
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
                signers,
                dns_names=[n for n in dns_names if not n.startswith("*.")],
                server=server,
                client=client,
            )
            if problems:
                reason = "replaced: " + "; ".join(problems)
            elif _certs().renewal_due(files[CERT_KEY]):
                reason = "renewed"
            elif files.get(CA_KEY) != trust and self.issue:
                self.write(name, {CA_KEY: trust}, "trust updated: ca.crt is the CA bundle", True)
                files = self.read(name)
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
            files = {CERT_KEY: cert, KEY_KEY: key, CA_KEY: trust}
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
        self.record(name, purpose, files, own=True)
        return None if problems else files


class MembersView:
    """What a CA rotation must know of the members (the module reading EtcdPeers and shaking
    hands with the members gives the real one; tests give their own)."""

    def run_bundle(self, part: str, fingerprint: str) -> bool:
        """Whether every member was started with the CA bundle of ``fingerprint`` for ``part``
        (client or peer) and has been seen serving since."""
        raise NotImplementedError

    def serve(self, part: str, cert_pem: str) -> bool:
        """Whether every member presents ``cert_pem`` on ``part``'s port."""
        raise NotImplementedError


def ensure_certificates(
    manager: CertificateManager,
    resolved: dict,
    replicas: int,
    users=(),
    *,
    rotate_for: str = "",
    members: MembersView | None = None,
    own_trust: dict | None = None,
) -> TLSReport:
    """Make the cluster's certificate Secrets what ``resolved`` asks for (operator-managed ones
    issued, renewed once two thirds of their validity has passed, or replaced when wrong; the
    user's own ones only checked), and return what was found and done. ``users``: the etcd
    users of spec.auth, each given a client certificate whose CN is the user in its credential
    Secret (only with an operator-managed client CA, which can sign one).

    An operator-managed CA is rotated (``rotate_for``, see ensure_ca) in three stages, each only
    once ``members`` say the one before has reached every member: the new CA is trusted next to
    the old one (``status.tls.trust`` changes, and the planner restarts the members one at a time
    to load the bundle: etcd reads trusted CAs only at start), the leaves are reissued from it
    (etcd reads its own certificate again for each connection), and once every member presents
    its new certificate the old CA is dropped from the bundle (another rolling restart).

    The user's own Secrets may change in place, or be replaced by others: ``own_trust`` (the
    last report's, status.tls.ownTrust) says which CAs the members were started with and which
    signed what they present, and a change that would make members refuse each other is
    refused (see _ensure_own_trust)."""
    own_trust = own_trust or {}
    network, names = manager.network, secret_names(manager.network.cluster)
    cluster = network.cluster
    members_names = member_dns_names(network)
    client = resolved.get("client")
    if client and client["managed"]:
        leaves = [
            (names["server"], "server", cluster, members_names, True),
            (names["client"], "client", f"{cluster}-client", (), False),
            (names["operator"], "operator", OPERATOR_USER, (), False),
            *[(user_secret_name(cluster, u), "user", u, (), False) for u in users],
        ]
        _ensure_managed(
            manager, "client", names["client_ca"], f"{cluster} etcd client CA", leaves,
            rotate_for, members,
        )  # fmt: skip
    elif client and _issued_by_cert_manager(manager, "client", client, replicas, own_trust, users):
        _check_own_client(manager, client, replicas, own_trust.get("client"), members, users)
    peer = resolved.get("peer")
    if peer and peer["managed"]:
        leaves = [(names["peer"], "peer", cluster, members_names, True)]
        _ensure_managed(
            manager, "peer", names["peer_ca"], f"{cluster} etcd peer CA", leaves,
            rotate_for, members,
        )  # fmt: skip
    elif peer and _issued_by_cert_manager(manager, "peer", peer, replicas, own_trust):
        _check_own_peer(manager, peer, replicas, own_trust.get("peer"), members)
    manager.report.rotated_for = rotate_for
    return manager.report


def _check_own_client(manager, client, replicas, known, members, users=()):
    """The client part's Secrets that the operator does not write (the user's, or
    cert-manager's), checked, and followed as they change (_ensure_own_trust). With an issuer,
    the ``users``' certificates too (cert-manager writes them; the user's own Secrets have none)."""
    issued = "issuer" in client
    server = manager.check_own(
        client["secretName"],
        "server",
        dns_names=names_to_cover(manager.network, replicas, client=True),
        server=True,
        client=False,
        field_path="spec.tls.client." + ("issuerRef" if issued else "serverSecretName"),
    )
    operator = manager.check_own(
        client["operatorSecretName"],
        "operator",
        server=False,
        client=True,
        field_path="spec.tls.client." + ("issuerRef" if issued else "operatorSecretName"),
    )
    clients = [(client["operatorSecretName"], operator)]
    for user in users if issued else ():
        name = user_certificate_secret_name(manager.network.cluster, user)
        clients.append(
            (
                name,
                manager.check_own(
                    name, "user", server=False, client=True, field_path="spec.tls.client.issuerRef"
                ),
            )
        )
    if not (server and all(files for _, files in clients)):
        _keep_own_trust(manager, "client", known)
        return
    signed = [(client["secretName"], server)]
    if client["clientCertAuth"]:
        # Members check client certificates against their own Secret's ca.crt.
        field = "issuerRef" if issued else "operatorSecretName"
        for name, files in clients:
            problems = _certs().certificate_problems(files[CERT_KEY], None, server[CA_KEY])
            manager.report.problems.extend(
                f"spec.tls.client.{field}: Secret {name}: the members check client "
                f"certificates against ca.crt of Secret {client['secretName']}: {p}"
                for p in problems
            )
        signed.extend(clients)
    _ensure_own_trust(
        manager, "client", client["secretName"], signed, known, members, issued=issued
    )


def _check_own_peer(manager, peer, replicas, known, members):
    """The peer Secret that the operator does not write, as _check_own_client."""
    issued = "issuer" in peer
    files = manager.check_own(
        peer["secretName"],
        "peer",
        dns_names=names_to_cover(manager.network, replicas, client=False),
        server=True,
        client=True,
        field_path="spec.tls.peer." + ("issuerRef" if issued else "secretName"),
    )
    if not files:
        _keep_own_trust(manager, "peer", known)
        return
    signed = [(peer["secretName"], files)]
    _ensure_own_trust(manager, "peer", peer["secretName"], signed, known, members, issued=issued)


def _ensure_managed(manager, part, ca_name, ca_subject, leaves, rotate_for, members):
    """One operator-managed CA (``part``: client or peer) and the ``leaves`` it signs, each
    ``(secret, purpose, common name, DNS names, server)``, through the stages of a rotation."""
    signed = [leaf[0] for leaf in leaves]
    ca = manager.ensure_ca(ca_name, ca_subject, rotate_for=rotate_for, leaves=signed)
    if not ca:
        return
    if len(_certs().bundle_certificates(ca[CA_KEY])) > 1:
        fingerprint = trust_fingerprint(ca[CA_KEY])
        manager.report.trust[part] = fingerprint
        if members is None or not members.run_bundle(part, fingerprint):
            # Members not restarted yet trust only the old CA: leaves it signed stay.
            manager.report.rotation[part] = TRUSTING
            ca = {**ca, "signers": ca[CA_KEY]}
        else:
            manager.report.rotation[part] = REISSUING
    issued = {}
    for secret, purpose, common_name, dns_names, server in leaves:
        issued[secret] = manager.ensure_leaf(
            secret, purpose, ca, common_name, dns_names=dns_names, server=server, client=True
        )
    if manager.report.rotation.get(part) != REISSUING or not manager.issue:
        return
    served = issued.get(leaves[0][0])
    if not served or not members.serve(part, served[CERT_KEY]):
        return
    # Every member presents its certificate from the new CA: the old one is trusted no more.
    manager.write(
        ca_name, {CA_KEY: ca[CERT_KEY]}, "rotation finished: only the new CA is trusted", True
    )
    done = {**ca, CA_KEY: ca[CERT_KEY]}
    for secret, purpose, common_name, dns_names, server in leaves:
        manager.report.certificates = [
            c for c in manager.report.certificates if c["secretName"] != secret
        ]
        manager.ensure_leaf(
            secret, purpose, done, common_name, dns_names=dns_names, server=server, client=True
        )
    del manager.report.trust[part], manager.report.rotation[part]


def _ensure_own_trust(manager, part, secret, signed, known, members, *, issued=False):
    """Follow the user's own Secrets of ``part`` (client or peer) as they change in place or
    are replaced: ``secret`` holds the ca.crt members trust, ``signed`` is each ``(Secret name,
    files)`` whose certificate members must accept (the one they present first). ``known`` is
    the last report's ``{bundle, trustedByAll, signers, pinned, pending}``; ``issued``: the
    Secrets are cert-manager's (spec.tls.<part>.issuerRef).

    etcd loads its trusted CAs once, at start, and its own certificate again for each new
    connection (the kubelet refreshes a Secret's files in the pod). So, without downtime:
    - a new ca.crt is loaded by restarting the members one at a time (the bundle's fingerprint
      goes to status.tls.trust and the EtcdPeers, as in a CA rotation); only the CAs both
      bundles hold are trusted by every member meanwhile (``trustedByAll``);
    - a certificate is accepted only if a CA every member trusts signed it;
    - a CA leaves ca.crt only once no member presents a certificate it signed (``signers``).
    Anything else is refused with a problem saying what to do, and nothing changes. The first
    report for a part only records what is there: the members run with it."""
    files = manager.read(secret)
    bundle = files[CA_KEY]
    fingerprint, cas = trust_fingerprint(bundle), _certs().bundle_fingerprints(bundle)
    found = {}
    for name, leaf in signed:
        found[name] = _certs().signing_cas(leaf[CERT_KEY], bundle)
    signers = list({ca["fingerprint"]: ca for cas_ in found.values() for ca in cas_}.values())
    if not known:
        manager.report.own_trust[part] = {
            "bundle": fingerprint,
            "trustedByAll": cas,
            "signers": signers,
            "pinned": False,
            "pending": False,
        }
        return
    field_path = f"spec.tls.{part}." + (
        "issuerRef" if issued else "serverSecretName" if part == "client" else "secretName"
    )
    problems = []
    trusted = set(known.get("trustedByAll") or ())
    for name, cas_ in found.items():
        if cas_ and not any(ca["fingerprint"] in trusted for ca in cas_):
            subject = cas_[0]["subject"]
            problems.append(
                f"{field_path}: the certificate of Secret {name} is signed by {subject}, "
                f"a CA some members do not trust yet (their ca.crt did not hold it when they "
                f"started), so they would refuse it: put the old certificate back, add the new "
                f"CA to ca.crt of Secret {secret} next to the old one, wait until "
                f"status.tls.ownTrust.{part}.pending is false, then change the certificate"
            )
    for ca in known.get("signers") or ():
        if ca["fingerprint"] not in cas:
            problems.append(
                f"{field_path}: ca.crt of Secret {secret} no longer holds {ca['subject']}, which "
                f"signed certificates the members may still present, so a member restarted "
                f"with it would refuse the others: keep that CA in ca.crt until every member "
                f"presents a certificate from the new one (status.tls.ownTrust.{part}.pending "
                f"false), then remove it"
            )
    if problems:
        manager.report.problems.extend(problems)
        _keep_own_trust(manager, part, known)
        return
    entry = dict(known)
    if fingerprint != known.get("bundle"):
        # Restarted with the new bundle or not, every member trusts what both bundles hold.
        entry.update(bundle=fingerprint, trustedByAll=[c for c in cas if c in trusted], pinned=True)
        restarting = True
    else:
        restarting = set(entry.get("trustedByAll") or ()) != set(cas)
    if restarting and members is not None and members.run_bundle(part, fingerprint):
        entry["trustedByAll"], restarting = cas, False
    known_signers = [s for s in known.get("signers") or () if s["fingerprint"] in cas]
    new = {ca["fingerprint"] for ca in signers}
    presenting_old = any(s["fingerprint"] not in new for s in known_signers)
    presented = signed[0][1][CERT_KEY]
    if presenting_old and members is not None and members.serve(part, presented):
        entry["signers"], presenting_old = signers, False
    else:
        entry["signers"] = known_signers + [s for s in signers if s not in known_signers]
    entry["pending"] = restarting or presenting_old
    manager.report.own_trust[part] = entry
    if entry.get("pinned"):
        manager.report.trust[part] = fingerprint


def _issued_by_cert_manager(manager, part, resolved_part, replicas, own_trust, users=()) -> bool:
    """For a part with a cert-manager issuer: create or correct its Certificates (for the
    client part, one per etcd user of ``users`` too, CN the user) and wait a little for them to
    be issued. False (and a problem) while they are not, or cert-manager is not there; True
    when the Secrets are there to check, and for a part without an issuer."""
    issuer = resolved_part.get("issuer")
    if not issuer or not manager.issue:
        return True
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils import (  # noqa: PLC0415
        qk_cert_manager,
    )

    network, names = manager.network, secret_names(manager.network.cluster)
    cluster = network.cluster
    if part == "client":
        wanted = [
            (names["server"], "server", cluster, names_to_cover(network, replicas, client=True)),
            (names["operator"], "operator", OPERATOR_USER, ()),
            (names["client"], "client", f"{cluster}-client", ()),
            *[(user_certificate_secret_name(cluster, u), "user", u, ()) for u in users],
        ]
    else:
        wanted = [(names["peer"], "peer", cluster, names_to_cover(network, replicas, client=False))]
    objects = [
        qk_cert_manager.certificate(
            secret, purpose, common_name, dns_names, issuer, cluster, network.namespace,
            manager.owner,
        )
        for secret, purpose, common_name, dns_names in wanted
    ]  # fmt: skip
    if manager.check:
        return True
    changed, problems = qk_cert_manager.ensure(manager.kube, objects)
    manager.report.issued.extend(
        {"secret": name, "reason": "requested from cert-manager (Certificate written)"}
        for name in changed
    )
    if problems:
        manager.report.problems.extend(problems)
        _keep_own_trust(manager, part, own_trust.get(part))
        return False
    return True


def _keep_own_trust(manager, part, known):
    """What the members run with stays as the last report said, while the Secrets have a
    problem: forgetting it would take whatever comes next as what the members run."""
    if not known:
        return
    manager.report.own_trust[part] = known
    if known.get("pinned"):
        manager.report.trust[part] = known["bundle"]


def trust_fingerprint(bundle_pem: str) -> str:
    """A short fingerprint of a CA bundle, whatever the order of its certificates."""
    digest = hashlib.sha256()
    for cert in sorted(_certs().bundle_certificates(bundle_pem)):
        digest.update(cert.encode())
    return digest.hexdigest()[:16]


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
