#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_cluster_tls
short_description: Ensure an EtcdCluster's certificates and the operator's client certificate
description:
  - >-
    For the parts of I(tls) (an EtcdCluster's C(spec.tls)) that the operator manages, creates a
    CA per kind of traffic (Secrets C(<name>-client-ca), C(<name>-peer-ca)) and the leaves it
    signs: C(<name>-server-tls) and C(<name>-peer-tls) for the members (SANs covering every
    member, C(*.<name>.<namespace>.svc.<domain>), and the client Service),
    C(<name>-client-tls) for applications and C(<name>-operator-tls) for the operator (CN
    C(root)). All are C(kubernetes.io/tls) Secrets with C(tls.crt), C(tls.key) and C(ca.crt),
    owned by the EtcdCluster.
  - >-
    A leaf is re-issued when two thirds of its validity has passed, when it is invalid (wrong
    key, not signed by the CA, expired, names missing) or when its C(ca.crt) is not the CA.
    Members pick a renewed certificate up without a restart: the Secret volume is refreshed and
    etcd reads its certificate files again for each new connection.
  - >-
    The user's own Secrets (I(tls.client.serverSecretName), I(tls.client.operatorSecretName),
    I(tls.peer.secretName)) are only checked, never written: each problem (missing Secret or
    key, a key that does not match, a CA that did not sign the certificate, an expired
    certificate, member names the certificate does not cover) is returned in C(problems).
  - >-
    A part with a cert-manager issuer (I(tls.client.issuerRef), I(tls.peer.issuerRef)) gets
    cert-manager C(Certificate) objects instead, owned by the EtcdCluster and named like the
    operator-managed Secrets they make cert-manager write; the module waits up to 10 s for
    them to be issued, then checks those Secrets as the user's own. A missing cert-manager, or
    a Certificate not issued in time, is a problem.
  - >-
    The user's own Secrets may change in place (a new C(ca.crt), certificates from another CA)
    or be replaced by others. etcd loads C(ca.crt) only at start: a new bundle's fingerprint is
    returned in C(trust), for the members to be restarted with it one at a time. A change that
    would make members refuse each other (a certificate from a CA some members did not load, a
    CA dropped from C(ca.crt) while members may still present a certificate it signed) is a
    problem, and nothing changes. I(own_trust) carries what the last run returned in
    C(own_trust).
  - >-
    With client TLS, writes the operator's client certificate, key and the CA that verifies the
    members into I(credentials_dir)/<namespace>/<name>/ (mode 0600) and returns their paths in
    C(connection), the options every etcd module takes (doc fragment
    quorumkeeper.etcd.etcd_connection).
  - Secrets are read from and written to the API server itself, never the operator's cache.
  - Check mode reports what would be issued and writes nothing.
options:
  tls:
    description:
      - The EtcdCluster's C(spec.tls) (client and peer parts; absent parts are off).
      - When omitted, read from the EtcdCluster (backups and restores, which do not have it);
        a cluster that does not exist has no TLS.
    type: dict
  replicas:
    description: Members the user's own certificates must cover (ordinals 0 to I(replicas) - 1).
    type: int
    default: 3
  users:
    description:
      - The etcd users of the EtcdCluster's C(spec.auth). With an operator-managed client CA,
        each gets a client certificate whose CN is the user in its credential Secret
        C(<name>-user-<user>) (keys C(tls.crt), C(tls.key), C(ca.crt), next to the password
        etcd_cluster_auth keeps there), renewed like the others.
    type: list
    elements: str
    default: []
  issue:
    description:
      - Whether to create and renew the operator-managed Secrets. False (backups, restores)
        only reads them and reports a missing one as a problem.
    type: bool
    default: true
  credentials_dir:
    description:
      - Directory under which the operator's client certificates are written. Default
        C(quorumkeeper-credentials) in the temporary directory.
    type: path
  cluster_domain:
    description: DNS domain of the Kubernetes cluster, for the certificates' names.
    type: str
    default: cluster.local
  client_port:
    description: Client port of the members, for C(client_service_url).
    type: int
    default: 2379
  peer_port:
    description: Peer port of the members, where a CA rotation checks the certificate each presents.
    type: int
    default: 2380
  rotate_for:
    description:
      - The EtcdCluster's C(etcd.quorumkeeper.dev/rotate-ca) annotation. A value the CA Secrets
        have not answered yet (their C(etcd.quorumkeeper.dev/rotated-for) annotation) starts a
        rotation of each operator-managed CA, as two thirds of a CA's validity passing does.
      - >-
        A rotation goes in stages, each once the members have taken the one before (their
        EtcdPeers, and a TLS handshake with each): the new CA is trusted next to the old one
        (C(trust) gives the bundle's fingerprint, which members must be restarted with), then
        every leaf is reissued from it, then the old CA is dropped from every C(ca.crt).
        A CA Secret deleted or broken while members run is replaced the same way, never
        abruptly.
    type: str
    default: ""
  own_trust:
    description:
      - What the last run returned in C(own_trust) (the EtcdCluster's C(status.tls.ownTrust)).
        Empty the first time, when what the user's own Secrets hold is taken as what the
        members run.
    type: dict
    default: {}
  keep_served_client:
    description:
      - Without client TLS in I(tls), whether to keep writing the operator's client
        certificate while an EtcdPeer of the cluster still serves client TLS (client TLS being
        turned off, one member at a time); the EtcdPeers are listed for it (C(client_kept)).
    type: bool
    default: false
extends_documentation_fragment:
  - quorumkeeper.etcd.etcd_cluster
  - quorumkeeper.etcd.etcd_cluster.owned
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.kube_client.api_version
requirements: [cryptography]
"""

EXAMPLES = r"""
- name: Issue my-cluster's certificates and get the operator's connection
  etcd_cluster_tls:
    name: my-cluster
    namespace: default
    owner_uid: "{{ cluster.metadata.uid }}"
    tls:
      client: {}
      peer: {}
  register: cluster_tls

- name: Read the members through it
  etcd_cluster_info:
    endpoints: ["{{ cluster_tls.client_service_url }}"]
    ca_cert: "{{ cluster_tls.connection.ca_cert }}"
    client_cert: "{{ cluster_tls.connection.client_cert }}"
    client_key: "{{ cluster_tls.connection.client_key }}"
"""

RETURN = r"""
connection:
  description: C(ca_cert), C(client_cert) and C(client_key) paths for the etcd modules; empty
    without client TLS or when the operator's Secret is not usable.
  type: dict
  returned: always
operator_secret:
  description: The Secret holding the operator's client certificate (what I(connection)'s
    files were written from), for helper pods that mount it; empty when I(connection) is.
  type: str
  returned: always
client_service_url:
  description: The cluster's client Service URL, C(https) with client TLS.
  type: str
  returned: always
peer_tls:
  description: The C(tls) of the cluster's EtcdPeer specs (the Secrets member pods mount).
  type: dict
  returned: always
trust:
  description: By part (C(client), C(peer)) while its CA is rotated, or once the C(ca.crt) of the
    user's own Secret has changed, the fingerprint of the CA
    bundle every member must be started with (the EtcdPeers' C(tls.<part>.trust)).
  type: dict
  returned: always
own_trust:
  description:
    - By part whose certificates are the user's own Secrets, C(bundle) (the fingerprint of the
      C(ca.crt) members are to run with), C(trustedByAll) (fingerprints of the CAs every member
      trusts), C(signers) (each CA, C(fingerprint) and C(subject), that signed a certificate a
      member may present or must accept), C(pinned) (the EtcdPeers carry the bundle's
      fingerprint since its first change) and C(pending) (members still restart with a new
      C(ca.crt), or may still present a certificate from a CA on its way out).
  type: dict
  returned: always
rotation:
  description: By part while its CA is rotated, the stage (C(TrustingNewCA),
    C(ReissuingCertificates)).
  type: dict
  returned: always
rotated_for:
  description: The I(rotate_for) the CA Secrets answer.
  type: str
  returned: always
client_kept:
  description: Whether I(keep_served_client) kept the client certificate (C(connection)) for
    members still serving client TLS.
  type: bool
  returned: always
issued:
  description: Secrets created or rewritten, each C(secret) and C(reason) (created, renewed,
    replaced with why).
  type: list
  elements: dict
  returned: always
events:
  description: One Event (C(reason), C(message)) per entry of I(issued) - C(CertificateIssued),
    C(CertificateRenewed), C(CARotation) or C(CertificateTrustUpdated) - for the caller to record
    with the others it writes.
  type: list
  elements: dict
  returned: always
problems:
  description: What is wrong with the certificates, one sentence each naming the Secret; the
    cluster must not start members while there are any.
  type: list
  elements: str
  returned: always
certificates:
  description: Each certificate's C(secretName), C(purpose), C(subject), C(notAfter) and
    C(renewalTime), for the EtcdCluster's C(status.tls).
  type: list
  elements: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_tls import (
    CertificateManager,
    MembersView,
    credentials_dir,
    ensure_certificates,
    kept_client,
    peer_tls_spec,
    resolve,
    schemes,
    write_operator_credentials,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_VERSION,
    CLUSTER_KIND,
    CLUSTER_LABEL,
    ClusterNetwork,
    cluster_owner_reference,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KUBE_CLIENT_ARGUMENT_SPEC,
    KubeConfigError,
    KubeError,
    api_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    config_hash,
    peer_config,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_tls import (
    CertificateError,
    certificate_der,
    presented_certificate,
)

ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "owner_uid": {"type": "str"},
    "tls": {"type": "dict"},
    "replicas": {"type": "int", "default": 3},
    "users": {"type": "list", "elements": "str", "default": []},
    "issue": {"type": "bool", "default": True},
    "credentials_dir": {"type": "path"},
    "cluster_domain": {"type": "str", "default": "cluster.local"},
    "client_port": {"type": "int", "default": 2379},
    "peer_port": {"type": "int", "default": 2380},
    "rotate_for": {"type": "str", "default": ""},
    "keep_served_client": {"type": "bool", "default": False},
    "own_trust": {"type": "dict", "default": {}},
    "api_version": {"type": "str", "default": API_VERSION},
    **KUBE_CLIENT_ARGUMENT_SPEC,
}


class ClusterMembers(MembersView):
    """The cluster's members as a CA rotation sees them: their EtcdPeers (listed once, only
    when a rotation asks) and the certificates they present (a TLS handshake with each)."""

    def __init__(self, kube, p, network):
        self.kube, self.p, self.network = kube, p, network
        self._peers = None

    def peers(self):
        if self._peers is None:
            selector = f"{CLUSTER_LABEL}={self.p['name']}"
            listed = self.kube.list(
                self.p["api_version"], "EtcdPeer", self.p["namespace"], label_selector=selector
            )
            self._peers = [x for x in listed if not x["metadata"].get("deletionTimestamp")]
        return self._peers

    def run_bundle(self, part, fingerprint):
        for peer in self.peers():
            spec = peer.get("spec") or {}
            if ((spec.get("tls") or {}).get(part) or {}).get("trust") != fingerprint:
                return False
            # Seen serving with that configuration since (written while the member is healthy).
            if (peer.get("status") or {}).get("configHash") != config_hash(peer_config(spec)):
                return False
        return True

    def serve(self, part, cert_pem):
        port = self.p["client_port"] if part == "client" else self.p["peer_port"]
        wanted = certificate_der(cert_pem)
        return all(
            presented_certificate(self.network.member_host(x["metadata"]["name"]), port) == wanted
            for x in self.peers()
        )


def run(module, kube):
    p = module.params
    if p["tls"] is None:
        cluster = kube.get(p["api_version"], CLUSTER_KIND, p["name"], p["namespace"]) or {}
        p["tls"] = (cluster.get("spec") or {}).get("tls") or {}
    resolved = resolve(p["name"], p["tls"])
    network = ClusterNetwork(
        p["name"],
        p["namespace"],
        p["cluster_domain"],
        p["client_port"],
        **schemes(p["tls"]),
    )
    owner = None
    if p["owner_uid"]:
        owner = cluster_owner_reference(p["name"], p["owner_uid"], p["api_version"])
    manager = CertificateManager(kube, network, owner, issue=p["issue"], check=module.check_mode)
    # The EtcdPeers are listed at most once, by whichever asks first.
    members = ClusterMembers(kube, p, network)
    report = ensure_certificates(
        manager,
        resolved,
        p["replicas"],
        p["users"],
        rotate_for=p["rotate_for"],
        members=members,
        own_trust=p["own_trust"],
    )
    kept = None
    if "client" not in resolved and p["keep_served_client"]:
        kept = kept_client(p["name"], members.peers())
    report.connection = write_operator_credentials(
        manager,
        {**resolved, "client": kept} if kept else resolved,
        credentials_dir(p["credentials_dir"], p["namespace"], p["name"]),
    )
    client = resolved.get("client") or {}
    return {
        "changed": bool(report.issued),
        # For helper pods, which mount the certificate rather than read the operator's files.
        "operator_secret": client.get("operatorSecretName", "") if report.connection else "",
        "client_service_url": network.client_service_url(),
        "peer_tls": peer_tls_spec(resolved, report.trust),
        "client_kept": bool(kept),
        **report.as_dict(),
    }


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        result = run(module, api_client(p, fresh=True))
    except (KubeConfigError, KubeError, CertificateError) as exc:
        module.fail_json(msg=f"certificates of EtcdCluster {p['namespace']}/{p['name']}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
