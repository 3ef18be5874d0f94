"""spec.tls.<part>.issuerRef: the cert-manager Certificates the operator writes (qk_cert_manager),
and ensure_certificates with an issuer against a fake API server on which the test plays
cert-manager (it issues a Certificate's Secret from a CA when told to)."""

from __future__ import annotations

import base64

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cert_manager import (
    NOT_INSTALLED,
    certificate,
    ensure,
    ready,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_tls import (
    CertificateManager,
    ensure_certificates,
    peer_tls_spec,
    resolve,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import ClusterNetwork
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import KubeError
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_tls import (
    certificate_facts,
    issue_leaf,
    new_ca,
)
from fakeclock import Clock

NETWORK = ClusterNetwork("c", "ns", client_scheme="https", peer_scheme="https")
ISSUER = {"name": "ca-issuer"}
CA, CA_KEY = new_ca("issuer CA")


def ensure_now(api, wanted, **options):
    clock = Clock()
    return ensure(api, wanted, clock=clock, sleep=clock.sleep, **options)


class FakeAPI:
    """Certificates and Secrets in dicts. ``issue`` plays cert-manager: a Certificate becomes
    Ready with its Secret signed by CA; ``installed`` False is a cluster without its CRDs."""

    def __init__(self, installed=True, issue=True):
        self.objects, self.calls = {}, []
        self.installed, self.issue = installed, issue

    def get(self, api_version, kind, name, namespace=None):
        if kind == "Certificate" and not self.installed:
            return None  # what the API server answers for an unknown resource: 404
        return self.objects.get((kind, name))

    def create(self, obj, namespace=None):
        if obj["kind"] == "Certificate" and not self.installed:
            raise KubeError(404, "NotFound", "the server could not find the requested resource")
        self.calls.append(("create", obj["metadata"]["name"]))
        obj = {**obj, "metadata": {**obj["metadata"], "generation": 1}}
        self.objects[(obj["kind"], obj["metadata"]["name"])] = obj
        if obj["kind"] == "Certificate" and self.issue:
            self.cert_manager_issues(obj)
        return obj

    def patch(self, api_version, kind, name, patch, namespace=None):
        self.calls.append(("patch", name))
        obj = self.objects[(kind, name)]
        obj["spec"] = {**obj["spec"], **patch["spec"]}
        obj["metadata"]["generation"] += 1
        return obj

    def cert_manager_issues(self, obj):
        spec = obj["spec"]
        cert, key = issue_leaf(
            CA,
            CA_KEY,
            spec["commonName"],
            dns_names=spec.get("dnsNames", ()),
            server="server auth" in spec["usages"],
            client="client auth" in spec["usages"],
        )
        files = {"tls.crt": cert, "tls.key": key, "ca.crt": CA}
        data = {k: base64.b64encode(v.encode()).decode() for k, v in files.items()}
        self.objects[("Secret", spec["secretName"])] = {
            "metadata": {"name": spec["secretName"], "resourceVersion": "1"},
            "data": data,
        }
        obj["status"] = {
            "conditions": [
                {"type": "Ready", "status": "True", "observedGeneration": 1, "reason": "Ready"}
            ]
        }


def test_a_certificate_names_its_secret_issuer_usages_and_the_cluster():
    obj = certificate(
        "c-peer-tls", "peer", "c", ["*.c.ns.svc.cluster.local"], ISSUER, "c", "ns", {"uid": "u"}
    )
    assert obj["kind"] == "Certificate" and obj["metadata"]["ownerReferences"] == [{"uid": "u"}]
    spec = obj["spec"]
    assert spec["secretName"] == "c-peer-tls" and spec["dnsNames"] == ["*.c.ns.svc.cluster.local"]
    assert spec["issuerRef"] == {"name": "ca-issuer", "kind": "Issuer", "group": "cert-manager.io"}
    assert {"server auth", "client auth"} <= set(spec["usages"])
    assert spec["secretTemplate"]["labels"]["etcd.quorumkeeper.dev/cluster"] == "c"
    operator = certificate("c-operator-tls", "operator", "root", (), ISSUER, "c", "ns", None)
    assert "dnsNames" not in operator["spec"] and "server auth" not in operator["spec"]["usages"]


def test_ready_needs_the_current_generation():
    obj = {"metadata": {"generation": 2}, "status": {"conditions": []}}
    assert ready(obj) == (False, "not issued yet")
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "observedGeneration": 1},
    ]
    assert ready(obj)[0] is False
    obj["status"]["conditions"][0]["observedGeneration"] = 2
    assert ready(obj) == (True, "")
    failed = {"type": "Ready", "status": "False", "reason": "Pending", "message": "no issuer"}
    assert ready({"metadata": {}, "status": {"conditions": [failed]}}) == (
        False,
        "Pending: no issuer",
    )


def test_ensure_writes_each_certificate_once_and_ignores_what_the_api_server_defaulted():
    api = FakeAPI()
    wanted = [certificate("c-peer-tls", "peer", "c", ["x"], ISSUER, "c", "ns", None)]
    assert ensure_now(api, wanted) == (["c-peer-tls"], [])
    api.objects[("Certificate", "c-peer-tls")]["spec"]["privateKey"]["rotationPolicy"] = "Always"
    assert ensure_now(api, wanted) == ([], [])
    other = [certificate("c-peer-tls", "peer", "c", ["x"], {"name": "other"}, "c", "ns", None)]
    changed, _ = ensure_now(api, other)
    assert changed == ["c-peer-tls"] and api.calls[-1] == ("patch", "c-peer-tls")


def test_ensure_says_what_cert_manager_has_not_done_or_that_it_is_missing():
    wanted = [certificate("c-peer-tls", "peer", "c", ["x"], ISSUER, "c", "ns", None)]
    changed, problems = ensure_now(FakeAPI(issue=False), wanted, wait_seconds=1)
    assert changed == ["c-peer-tls"]
    assert problems == [
        "spec.tls issuerRef: cert-manager has not issued Certificate c-peer-tls yet "
        "(not issued yet)"
    ]
    assert ensure_now(FakeAPI(installed=False), wanted) == ([], [NOT_INSTALLED])


def test_a_cluster_with_an_issuer_gets_certificates_from_cert_manager_and_checks_them():
    api = FakeAPI()
    resolved = resolve("c", {"client": {"issuerRef": ISSUER}, "peer": {"issuerRef": ISSUER}})
    assert not resolved["client"]["managed"] and resolved["peer"]["issuer"] == ISSUER
    report = ensure_certificates(CertificateManager(api, NETWORK, None), resolved, 3)
    assert report.problems == []
    assert {c for kind, c in api.objects if kind == "Certificate"} == {
        "c-server-tls",
        "c-operator-tls",
        "c-client-tls",
        "c-peer-tls",
    }
    # Checked as the user's own: recorded with their resourceVersion, followed by ownTrust.
    assert {c["secretName"] for c in report.certificates} == {
        "c-server-tls",
        "c-operator-tls",
        "c-peer-tls",
    }
    assert set(report.own_trust) == {"client", "peer"}
    assert peer_tls_spec(resolved, report.trust) == {
        "client": {"secretName": "c-server-tls", "clientCertAuth": True},
        "peer": {"secretName": "c-peer-tls"},
    }
    operator = api.objects[("Secret", "c-operator-tls")]["data"]["tls.crt"]
    assert certificate_facts(base64.b64decode(operator).decode())["subject"] == "root"


def test_without_cert_manager_a_cluster_with_an_issuer_says_so_and_writes_no_secret():
    api = FakeAPI(installed=False)
    resolved = resolve("c", {"peer": {"issuerRef": ISSUER}})
    report = ensure_certificates(CertificateManager(api, NETWORK, None), resolved, 3)
    assert report.problems == [NOT_INSTALLED]
    assert not [key for key in api.objects if key[0] == "Secret"]


def test_with_an_issuer_each_etcd_user_gets_a_certificate_of_its_own_checked_like_the_rest():
    api = FakeAPI()
    resolved = resolve("c", {"client": {"issuerRef": ISSUER}})
    report = ensure_certificates(
        CertificateManager(api, NETWORK, None), resolved, 3, users=["billing"]
    )
    assert report.problems == []
    certificate = api.objects[("Certificate", "c-usercert-billing")]
    assert certificate["spec"]["commonName"] == "billing"
    assert "server auth" not in certificate["spec"]["usages"]
    records = {c["secretName"]: c for c in report.certificates}
    assert records["c-usercert-billing"]["purpose"] == "user"
    assert records["c-usercert-billing"]["subject"] == "billing"

    # A user's certificate from a CA the members do not trust is refused like the operator's.
    other, other_key = new_ca("not the issuer's CA")
    cert, key = issue_leaf(other, other_key, "billing", server=False, client=True)
    files = {"tls.crt": cert, "tls.key": key, "ca.crt": other}
    api.objects[("Secret", "c-usercert-billing")]["data"] = {
        k: base64.b64encode(v.encode()).decode() for k, v in files.items()
    }
    again = ensure_certificates(
        CertificateManager(api, NETWORK, None), resolved, 3, users=["billing"]
    )
    assert any(
        p.startswith("spec.tls.client.issuerRef: Secret c-usercert-billing:")
        for p in again.problems
    ), again.problems

    # The user's own Secrets (no issuer) carry no user certificates: nothing is asked of them.
    own = ensure_certificates(
        CertificateManager(api, NETWORK, None),
        resolve("c", {"client": {"serverSecretName": "c-server-tls",
                                 "operatorSecretName": "c-operator-tls"}}),
        3, users=["billing"],
    )  # fmt: skip
    assert not [p for p in own.problems if "usercert" in p], own.problems
