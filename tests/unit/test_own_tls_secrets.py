"""The user's own TLS Secrets changed in place or replaced: a new ca.crt is loaded by a rolling
restart, a certificate is accepted only from a CA every member trusts, and a CA leaves ca.crt
only once no member presents a certificate it signed (qk_cluster_tls._ensure_own_trust), driven
through ensure_certificates against an in-memory Secret store, as the module runs it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_tls import (
    CertificateManager,
    MembersView,
    ensure_certificates,
    names_to_cover,
    peer_tls_spec,
    resolve,
    trust_fingerprint,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import ClusterNetwork
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_tls import (
    ca_fingerprint,
    issue_leaf,
    new_ca,
)
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from test_cluster_tls import SecretStore

NETWORK = ClusterNetwork("c", "ns", client_scheme="https", peer_scheme="https")
PEER = resolve("c", {"peer": {"secretName": "mine"}})
CA1, CA1_KEY = new_ca("first")
CA2, CA2_KEY = new_ca("second")


class Members(MembersView):
    """Members as the test says they are: started with the bundle ``bundle[part]`` and
    presenting ``serving[part]``."""

    def __init__(self):
        self.bundle, self.serving = {}, {}

    def run_bundle(self, part, fingerprint):
        return self.bundle.get(part) == fingerprint

    def serve(self, part, cert_pem):
        return self.serving.get(part) == cert_pem


def peer_leaf(ca, ca_key):
    cert, key = issue_leaf(
        ca, ca_key, "c", dns_names=names_to_cover(NETWORK, 3, client=False), server=True
    )
    return {"tls.crt": cert, "tls.key": key}


class Cluster:
    """One cluster's checks in a row: each passes the last report's own_trust, as status does."""

    def __init__(self, resolved=PEER):
        self.store, self.members, self.resolved = SecretStore(), Members(), resolved
        self.own_trust = {}

    def check(self):
        manager = CertificateManager(self.store, NETWORK, None, issue=False)
        report = ensure_certificates(
            manager, self.resolved, 3, members=self.members, own_trust=self.own_trust
        )
        self.own_trust = report.own_trust
        return report


def test_a_ca_rotated_in_the_users_secret_in_three_safe_steps_restarts_members_twice():
    cluster = Cluster()
    leaf1 = peer_leaf(CA1, CA1_KEY)
    cluster.store.put("mine", {**leaf1, "ca.crt": CA1})
    first = cluster.check()
    # What is there when first seen is what the members run: nothing to restart.
    assert first.problems == [] and first.trust == {}
    assert first.own_trust["peer"]["trustedByAll"] == [ca_fingerprint(CA1)]
    assert first.own_trust["peer"]["pending"] is False
    assert peer_tls_spec(PEER, first.trust) == {"peer": {"secretName": "mine"}}

    # 1. Both CAs in ca.crt: the members restart to load the bundle; until they all have, only
    #    the first CA is trusted by every member.
    both = CA1 + CA2
    cluster.store.put("mine", {**leaf1, "ca.crt": both})
    trusting = cluster.check()
    assert trusting.problems == []
    assert trusting.trust == {"peer": trust_fingerprint(both)}
    assert peer_tls_spec(PEER, trusting.trust)["peer"]["trust"] == trust_fingerprint(both)
    assert trusting.own_trust["peer"]["pending"] is True
    assert trusting.own_trust["peer"]["trustedByAll"] == [ca_fingerprint(CA1)]
    # A certificate from the new CA now would be refused by members not restarted yet.
    leaf2 = peer_leaf(CA2, CA2_KEY)
    cluster.store.put("mine", {**leaf2, "ca.crt": both})
    early = cluster.check()
    assert any("a CA some members do not trust yet" in p for p in early.problems)
    assert early.own_trust == trusting.own_trust and early.trust == trusting.trust
    cluster.store.put("mine", {**leaf1, "ca.crt": both})
    cluster.members.bundle["peer"] = trust_fingerprint(both)
    loaded = cluster.check()
    assert loaded.own_trust["peer"]["pending"] is False
    assert set(loaded.own_trust["peer"]["trustedByAll"]) == {
        ca_fingerprint(CA1),
        ca_fingerprint(CA2),
    }

    # 2. Certificates from the new CA: no restart (etcd reads its certificate per connection);
    #    the old CA must stay until every member presents the new certificate.
    cluster.store.put("mine", {**leaf2, "ca.crt": both})
    reissued = cluster.check()
    assert reissued.problems == [] and reissued.trust == loaded.trust
    assert reissued.own_trust["peer"]["pending"] is True
    cluster.store.put("mine", {**leaf2, "ca.crt": CA2})
    too_soon = cluster.check()
    assert any("no longer holds CN=first" in p for p in too_soon.problems)
    cluster.store.put("mine", {**leaf2, "ca.crt": both})
    cluster.members.serving["peer"] = leaf2["tls.crt"]
    presented = cluster.check()
    assert presented.own_trust["peer"]["pending"] is False
    assert [s["subject"] for s in presented.own_trust["peer"]["signers"]] == ["CN=second"]

    # 3. The old CA leaves ca.crt: the members restart once more to drop it.
    cluster.store.put("mine", {**leaf2, "ca.crt": CA2})
    dropped = cluster.check()
    assert dropped.problems == [] and dropped.trust == {"peer": trust_fingerprint(CA2)}
    assert dropped.own_trust["peer"]["pending"] is True
    cluster.members.bundle["peer"] = trust_fingerprint(CA2)
    done = cluster.check()
    assert done.own_trust["peer"]["pending"] is False
    assert done.own_trust["peer"]["trustedByAll"] == [ca_fingerprint(CA2)]
    # The EtcdPeers keep the fingerprint: removing it would restart every member again.
    assert done.trust == {"peer": trust_fingerprint(CA2)}


def test_a_ca_replaced_at_once_is_refused_and_changes_nothing():
    cluster = Cluster()
    cluster.store.put("mine", {**peer_leaf(CA1, CA1_KEY), "ca.crt": CA1})
    first = cluster.check()
    cluster.store.put("mine", {**peer_leaf(CA2, CA2_KEY), "ca.crt": CA2})
    refused = cluster.check()
    text = " ".join(refused.problems)
    assert "spec.tls.peer.secretName" in text
    assert "a CA some members do not trust yet" in text and "no longer holds CN=first" in text
    assert refused.trust == {} and refused.own_trust == first.own_trust
    # A Secret that cannot be used at all keeps what the members run, too.
    cluster.store.put("mine", {**peer_leaf(CA2, CA2_KEY), "ca.crt": CA1})
    broken = cluster.check()
    assert any("is not signed by any CA of the bundle" in p for p in broken.problems)
    assert broken.own_trust == first.own_trust


def test_another_secret_from_the_same_ca_needs_no_trust_change():
    cluster = Cluster()
    cluster.store.put("mine", {**peer_leaf(CA1, CA1_KEY), "ca.crt": CA1})
    cluster.check()
    cluster.resolved = resolve("c", {"peer": {"secretName": "other"}})
    cluster.store.put("other", {**peer_leaf(CA1, CA1_KEY), "ca.crt": CA1})
    moved = cluster.check()
    assert moved.problems == [] and moved.trust == {}
    # Its secretName changed: the EtcdPeers change, and the members restart onto it anyway.
    assert peer_tls_spec(cluster.resolved, moved.trust) == {"peer": {"secretName": "other"}}


def test_the_operators_own_certificate_must_be_signed_by_a_ca_the_members_trust():
    resolved = resolve("c", {"client": {"serverSecretName": "srv", "operatorSecretName": "op"}})
    cluster = Cluster(resolved)
    server, key = issue_leaf(
        CA1, CA1_KEY, "c", dns_names=names_to_cover(NETWORK, 3, client=True), client=False
    )
    cluster.store.put("srv", {"tls.crt": server, "tls.key": key, "ca.crt": CA1})
    operator, operator_key = issue_leaf(CA2, CA2_KEY, "root", server=False)
    cluster.store.put("op", {"tls.crt": operator, "tls.key": operator_key, "ca.crt": CA2})
    refused = cluster.check()
    assert any(
        "operatorSecretName: Secret op: the members check client certificates against ca.crt of "
        "Secret srv" in p
        for p in refused.problems
    )
    operator, operator_key = issue_leaf(CA1, CA1_KEY, "root", server=False)
    cluster.store.put("op", {"tls.crt": operator, "tls.key": operator_key, "ca.crt": CA1})
    accepted = cluster.check()
    assert accepted.problems == []
    assert [s["subject"] for s in accepted.own_trust["client"]["signers"]] == ["CN=first"]


def test_own_secrets_are_recorded_with_their_resource_version():
    cluster = Cluster()
    cluster.store.put("mine", {**peer_leaf(CA1, CA1_KEY), "ca.crt": CA1})
    cluster.store.secrets["mine"]["metadata"]["resourceVersion"] = "42"
    report = cluster.check()
    assert [(c["secretName"], c["resourceVersion"]) for c in report.certificates] == [
        ("mine", "42")
    ]


def renewed_with_the_same_key(ca_pem, key_pem):
    """The CA certificate renewed as cert-manager does with rotationPolicy Never."""
    ca = x509.load_pem_x509_certificate(ca_pem.encode())
    key = serialization.load_pem_private_key(key_pem.encode(), None)
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(ca.subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + timedelta(days=3650))
    )
    for extension in ca.extensions:
        builder = builder.add_extension(extension.value, extension.critical)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode()


def test_a_ca_renewed_with_the_same_key_is_the_same_ca():
    cluster = Cluster()
    leaf = peer_leaf(CA1, CA1_KEY)
    cluster.store.put("mine", {**leaf, "ca.crt": CA1})
    cluster.check()
    renewed = renewed_with_the_same_key(CA1, CA1_KEY)
    assert renewed != CA1 and ca_fingerprint(renewed) == ca_fingerprint(CA1)
    # Only the renewed certificate in ca.crt: the members' certificates still verify, and the
    # members restart to load it (its validity is new).
    cluster.store.put("mine", {**leaf, "ca.crt": renewed})
    report = cluster.check()
    assert report.problems == []
    assert report.trust == {"peer": trust_fingerprint(renewed)}
