"""TLS end to end: a cluster created with operator-managed certificates serves only clients with
a certificate from its CA, keeps working through a scale-up, serves metrics without one; client
TLS turned on and off on a live cluster under a writer loses no write, and so do peer TLS turned
on and off (with a member joining and one leaving meanwhile), a rotation of both CAs and one of
the CA in the user's own Secret, changed in place; and a cluster whose own Secrets are missing,
or changed in a way that would make its members refuse each other, says so and changes
nothing."""

from __future__ import annotations

import base64
import re
import urllib.request

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_tls import (
    ca_fingerprint,
    issue_leaf,
    new_ca,
)
from certmanagerhelpers import CertManager
from kubehelpers import CLUSTERS, PEERS, wait_until
from securityhelpers import (
    InPodClient,
    ca_rotated,
    members_serve,
    peer_traffic_on,
    secret_files,
    use_application_certificate,
)
from upgradehelpers import AckedWriter

pytestmark = pytest.mark.toolchain("cert_manager")

PARTS = ("client", "peer")
MANAGED_SECRETS = {"client-ca", "server-tls", "client-tls", "operator-tls", "peer-ca", "peer-tls"}


def test_tls_cluster_accepts_only_clients_with_its_certificates(etcd_cluster):
    kube, namespace, name = etcd_cluster.kube, etcd_cluster.namespace, etcd_cluster.name
    manifest = etcd_cluster.manifest(1)
    manifest["spec"]["tls"] = {"client": {}, "peer": {}}
    kube.apply(manifest)
    status = etcd_cluster.wait_available(1, timeout=240)

    secrets = {s["metadata"]["name"] for s in kube.get("secret", namespace=namespace)["items"]}
    assert {f"{name}-{suffix}" for suffix in MANAGED_SECRETS} <= secrets
    purposes = {c["purpose"] for c in status["tls"]["certificates"]}
    assert purposes == {"ca", "server", "peer", "client", "operator"}
    assert all(c["notAfter"] > c["renewalTime"] for c in status["tls"]["certificates"])
    # One Event per Secret written, recorded with the cluster's other Events.
    issued = etcd_cluster.kube(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector=reason=CertificateIssued",
        "-o",
        "jsonpath={.items[*].message}",
    )
    assert all(f"Secret {name}-{suffix}:" in issued for suffix in MANAGED_SECRETS), issued

    # Learners join and are promoted over TLS, with https peer URLs.
    etcd_cluster.scale(3)
    etcd_cluster.wait_available(3, timeout=240)
    pod = etcd_cluster.pod_of(f"{name}-0")
    args = pod["spec"]["containers"][0]["args"]
    assert "--client-cert-auth=true" in args and "--peer-client-cert-auth=true" in args
    assert any(a.startswith("--initial-advertise-peer-urls=https://") for a in args)

    client = InPodClient(kube, namespace, pod["metadata"]["name"], name)
    client.install("/tmp/app", secret_files(kube, namespace, f"{name}-client-tls"))
    put = client.etcdctl_once_reachable("/tmp/app", "put", "tls-key", "tls-value")
    assert put.returncode == 0, put.stderr
    members = client.etcdctl("/tmp/app", "member", "list")
    assert members.returncode == 0 and members.stdout.count("https://") == 6, members.stdout

    refused = client.etcdctl("/tmp/app", "get", "tls-key", with_certificate=False)
    assert refused.returncode != 0 and "tls-value" not in refused.stdout

    other_ca, other_key = new_ca("not this cluster's CA")
    cert, key = issue_leaf(other_ca, other_key, "intruder", server=False, client=True)
    ca = secret_files(kube, namespace, f"{name}-client-tls")["ca.crt"]
    client.install("/tmp/intruder", {"ca.crt": ca, "tls.crt": cert, "tls.key": key})
    intruder = client.etcdctl("/tmp/intruder", "get", "tls-key")
    assert intruder.returncode != 0 and "tls-value" not in intruder.stdout

    # Metrics and health stay reachable without a certificate, on their own plain-HTTP port.
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:2381/metrics", timeout=10) as r:
        assert b"etcd_server_has_leader" in r.read()


def test_missing_own_secrets_are_reported_and_nothing_starts(etcd_cluster):
    kube, namespace = etcd_cluster.kube, etcd_cluster.namespace
    manifest = etcd_cluster.manifest(3)
    manifest["spec"]["tls"] = {
        "client": {"serverSecretName": "no-such-server", "operatorSecretName": "no-such-client"}
    }
    kube.apply(manifest)

    def degraded():
        condition = etcd_cluster.condition("Degraded")
        return condition.get("reason") == "CertificatesInvalid" and condition

    condition = wait_until("Degraded CertificatesInvalid", degraded, 120)
    assert "no-such-server" in condition["message"] and "does not exist" in condition["message"]
    assert "CertificatesInvalid" in etcd_cluster.event_reasons()
    # Nothing is started, and the status says so rather than keeping a stale Available.
    available = etcd_cluster.condition("Available")
    assert (available["status"], available["reason"]) == ("False", "CertificatesInvalid")
    assert kube.get(PEERS, namespace=namespace)["items"] == []


def test_client_tls_turned_on_and_off_live_loses_no_acknowledged_write(etcd_cluster):
    kube, namespace, name = etcd_cluster.kube, etcd_cluster.namespace, etcd_cluster.name
    etcd_cluster.create(3)
    etcd_cluster.wait_available(3)
    ids = etcd_cluster.member_ids()
    endpoint = etcd_cluster.client_endpoint()
    with AckedWriter(endpoint, "/tls/", retry_for=5) as writer:
        wait_until("the first writes", lambda: len(writer.acknowledged) >= 20, 30)
        etcd_cluster.patch_spec(tls={"client": {}})
        wait_until(
            "the application's client certificate",
            lambda: kube.exists("secret", f"{name}-client-tls", namespace),
            60,
        )
        use_application_certificate(etcd_cluster, writer)
        files = secret_files(kube, namespace, f"{name}-client-tls")
        wait_until("every member serving TLS only", lambda: members_serve(etcd_cluster, True), 300)
        on = writer.summary()

        # Plain HTTP is refused now, a client with the application's certificate is served.
        assert etcd_cluster.etcdctl("get", "/tls/00000001", check=False).returncode != 0
        pod = etcd_cluster.pod_of(f"{name}-0")
        client = InPodClient(kube, namespace, pod["metadata"]["name"], name)
        client.install("/tmp/app", files)
        put = client.etcdctl_once_reachable("/tmp/app", "put", "after-tls-on", "yes")
        assert put.returncode == 0, put.stderr
        restarts = [
            e["message"] for e in kube.events(namespace, name) if e["reason"] == "RollingRestart"
        ]
        bridged = [m for m in restarts if "client TLS is turned on in two rolling restarts" in m]
        assert len(bridged) == 3, restarts

        etcd_cluster.patch_spec(tls=None)
        wait_until(
            "every member serving plain HTTP", lambda: members_serve(etcd_cluster, False), 300
        )
    summary = writer.summary()
    assert writer.lost() == [], f"acknowledged writes lost: {summary}"
    assert summary["acknowledged_percent"] >= 99.0, summary
    assert summary["acknowledged_by_scheme"]["https"] > 0, summary
    assert summary["acknowledged_by_scheme"]["http"] > on["acknowledged_by_scheme"]["http"]
    assert etcd_cluster.member_ids() == ids, "members keep their IDs"
    assert etcd_cluster.value("after-tls-on") == "yes"
    wait_until("status.tls gone", lambda: "tls" not in etcd_cluster.get()["status"], 60)
    restarts = [
        e["message"] for e in kube.events(namespace, name) if e["reason"] == "RollingRestart"
    ]
    assert len([m for m in restarts if "client TLS is turned off" in m]) == 3, restarts


def test_peer_tls_turned_on_and_off_live_with_a_scale_loses_no_acknowledged_write(etcd_cluster):
    name = etcd_cluster.name
    etcd_cluster.create(3)
    etcd_cluster.wait_available(3)
    ids = etcd_cluster.member_ids()
    first_three = set(ids)
    with AckedWriter(etcd_cluster.client_endpoint(), "/peer-tls/", retry_for=5) as writer:
        wait_until("the first writes", lambda: len(writer.acknowledged) >= 20, 30)
        # Scaled up in the same change: the new member joins first, then every member gets the
        # peer certificate, then each moves to TLS, one at a time.
        etcd_cluster.patch_spec(tls={"peer": {}}, replicas=4)
        wait_until(
            "peer TLS on every member", lambda: peer_traffic_on(etcd_cluster, "https", 4), 300
        )
        on = writer.summary()
        # The three first get the certificate (the new member joined with it, serving plain
        # HTTP: not every member could reach it over TLS yet), then all four move to TLS.
        assert restarted_members(etcd_cluster, "still serving peers plain HTTP") == first_three
        assert restarted_members(etcd_cluster, "peer URLs moved to https") == first_three | {
            f"{name}-3"
        }
        # Once each: the member given the certificate last is waited for before the second
        # round, not restarted again while it comes back (CI once saw that, "which is down").
        second_round = restarts_reported(etcd_cluster, "peer URLs moved to https")
        assert sorted(second_round) == sorted(first_three | {f"{name}-3"}), second_round

        etcd_cluster.patch_spec(tls=None, replicas=3)
        wait_until("peer TLS off again", lambda: peer_traffic_on(etcd_cluster, "http", 3), 300)
    summary = writer.summary()
    assert writer.lost() == [], f"acknowledged writes lost: {summary}"
    assert summary["acknowledged_percent"] >= 99.0, summary
    assert summary["acknowledged"] > on["acknowledged"], summary
    assert etcd_cluster.member_ids() == ids, "the first three members keep their IDs"
    assert restarted_members(etcd_cluster, "peer URLs moved to http ") == first_three


def restarted_members(cluster, saying: str) -> set[str]:
    """The members a RollingRestart Event whose message says ``saying`` was about."""
    return set(restarts_reported(cluster, saying))


def restarts_reported(cluster, saying: str) -> list[str]:
    """The member of each restart a RollingRestart Event whose message says ``saying`` reported
    (``restarting member NAME onto ...``, or ``restarting member NAME, which is down, onto ...``
    for one the plan found down, which it restarts without waiting for the others), as many
    times as the Event counts."""
    return [
        re.match(r"restarting member ([^\s,]+)[ ,]", e["message"]).group(1)
        for e in cluster.kube.events(cluster.namespace, cluster.name)
        if e["reason"] == "RollingRestart" and saying in e["message"]
        for _ in range(e.get("count") or 1)
    ]


def test_both_cas_rotated_on_request_under_a_writer_lose_no_acknowledged_write(etcd_cluster):
    kube, namespace, name = etcd_cluster.kube, etcd_cluster.namespace, etcd_cluster.name
    manifest = etcd_cluster.manifest(3)
    manifest["spec"]["tls"] = {"client": {}, "peer": {}}
    kube.apply(manifest)
    etcd_cluster.wait_available(3, timeout=240)
    ids = etcd_cluster.member_ids()
    old_cas = {p: secret_files(kube, namespace, f"{name}-{p}-ca")["tls.crt"] for p in PARTS}
    old_app = secret_files(kube, namespace, f"{name}-client-tls")
    endpoint = etcd_cluster.client_endpoint()
    with AckedWriter(endpoint, "/rotation/", retry_for=5) as writer:
        use_application_certificate(etcd_cluster, writer)
        wait_until("the first writes", lambda: len(writer.acknowledged) >= 20, 60)
        kube("annotate", CLUSTERS, name, "-n", namespace, "etcd.quorumkeeper.dev/rotate-ca=first")
        wait_until(
            "both CAs rotated",
            lambda: (
                use_application_certificate(etcd_cluster, writer)
                or ca_rotated(etcd_cluster, "first")
            ),
            600,
            interval=1,
        )
    summary = writer.summary()
    assert writer.lost() == [], f"acknowledged writes lost: {summary}"
    assert summary["acknowledged_percent"] >= 99.0, summary
    assert summary["acknowledged_by_scheme"]["http"] == 0, "TLS all along"
    assert etcd_cluster.member_ids() == ids, "members keep their IDs"

    for part in PARTS:
        ca = secret_files(kube, namespace, f"{name}-{part}-ca")
        assert ca["tls.crt"] != old_cas[part] and ca["ca.crt"] == ca["tls.crt"], part
    app = secret_files(kube, namespace, f"{name}-client-tls")
    assert app["ca.crt"] == secret_files(kube, namespace, f"{name}-client-ca")["tls.crt"]
    reasons = etcd_cluster.event_reasons()
    assert {"CARotation", "CertificateTrustUpdated", "RollingRestart"} <= reasons, reasons

    # The new application certificate is served; the one from before the rotation is refused.
    pod = etcd_cluster.pod_of(f"{name}-0")
    client = InPodClient(kube, namespace, pod["metadata"]["name"], name)
    client.install("/tmp/new", app)
    put = client.etcdctl_once_reachable("/tmp/new", "put", "after-rotation", "yes")
    assert put.returncode == 0, put.stderr
    client.install("/tmp/old", {**old_app, "ca.crt": app["ca.crt"]})
    refused = client.etcdctl("/tmp/old", "get", "after-rotation")
    assert refused.returncode != 0 and "yes" not in refused.stdout


def put_secret(kube, namespace, name, files):
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in files.items()},
        }
    )


def own_peer_trust_settled(cluster, cas, signer):
    """Whether the members run with exactly the CAs ``cas`` trusted and present certificates
    from ``signer`` alone (status.tls.ownTrust.peer), all 3 healthy on their configuration."""
    status = cluster.get().get("status", {})
    trust = (status.get("tls", {}).get("ownTrust") or {}).get("peer") or {}
    members = status.get("members", [])
    return (
        trust.get("pending") is False
        and set(trust.get("trustedByAll") or ()) == {ca_fingerprint(c) for c in cas}
        and [s["subject"] for s in trust.get("signers") or ()] == [f"CN={signer}"]
        and len(members) == 3
        and all(m.get("configUpToDate") and m["healthy"] for m in members)
    )


def test_the_ca_of_the_users_own_peer_secret_rotated_in_place_loses_no_write(etcd_cluster):
    """A user (cert-manager, by hand) rotates the CA of their own peer Secret in three changes
    made in place: both CAs in ca.crt (members restart to load it), certificates from the new
    CA (picked up without a restart), the old CA removed (members restart again), then names
    another Secret. The health watch has each change checked at once. A change that would make
    members refuse each other is refused with Degraded and restarts nothing."""
    kube, namespace, name = etcd_cluster.kube, etcd_cluster.namespace, etcd_cluster.name
    names = [f"*.{name}.{namespace}.svc.cluster.local"]
    first, first_key = new_ca("first")
    second, second_key = new_ca("second")

    def leaf(ca, key):
        cert, leaf_key = issue_leaf(ca, key, name, dns_names=names, server=True, client=True)
        return {"tls.crt": cert, "tls.key": leaf_key}

    secret = f"{name}-my-peer"
    old_leaf, new_leaf = leaf(first, first_key), leaf(second, second_key)
    put_secret(kube, namespace, secret, {**old_leaf, "ca.crt": first})
    manifest = etcd_cluster.manifest(3)
    manifest["spec"]["tls"] = {"peer": {"secretName": secret}}
    kube.apply(manifest)
    etcd_cluster.wait_available(3, timeout=240)
    wait_until(
        "the Secret recorded", lambda: own_peer_trust_settled(etcd_cluster, [first], "first"), 120
    )
    ids = etcd_cluster.member_ids()
    with AckedWriter(etcd_cluster.client_endpoint(), "/own-ca/", retry_for=5) as writer:
        wait_until("the first writes", lambda: len(writer.acknowledged) >= 20, 30)
        put_secret(kube, namespace, secret, {**old_leaf, "ca.crt": first + second})
        wait_until(
            "both CAs trusted by every member",
            lambda: own_peer_trust_settled(etcd_cluster, [first, second], "first"),
            300,
        )
        loaded = restarted_members(etcd_cluster, "to load a new CA bundle")
        assert loaded == set(ids), loaded
        put_secret(kube, namespace, secret, {**new_leaf, "ca.crt": first + second})
        wait_until(
            "every member presents its certificate from the new CA",
            lambda: own_peer_trust_settled(etcd_cluster, [first, second], "second"),
            180,
        )
        # Dropping the CA now in use instead of the old one: refused, nothing restarts.
        pods = {p["metadata"]["uid"] for p in etcd_cluster.pods()}
        trust = etcd_cluster.get()["status"]["tls"]["ownTrust"]
        third, _ = new_ca("third")
        put_secret(kube, namespace, secret, {**new_leaf, "ca.crt": first + third})

        def refused():
            condition = etcd_cluster.condition("Degraded")
            return condition.get("reason") == "CertificatesInvalid" and condition

        condition = wait_until("the change refused", refused, 120)
        assert "(issuer CN=second) is not signed by any CA of the bundle" in condition["message"]
        assert etcd_cluster.condition("Available").get("status") == "True"
        assert etcd_cluster.get()["status"]["tls"]["ownTrust"] == trust
        assert {p["metadata"]["uid"] for p in etcd_cluster.pods()} == pods, "nothing restarted"
        put_secret(kube, namespace, secret, {**new_leaf, "ca.crt": second})
        wait_until(
            "the old CA dropped by every member",
            lambda: (
                own_peer_trust_settled(etcd_cluster, [second], "second")
                and etcd_cluster.condition("Degraded").get("status") == "False"
            ),
            300,
        )
        # Another Secret of the user's, from the same CA: the members move to it one at a time.
        put_secret(kube, namespace, f"{secret}-2", {**leaf(second, second_key), "ca.crt": second})
        etcd_cluster.patch_spec(tls={"peer": {"secretName": f"{secret}-2"}})

        def moved():
            peers = etcd_cluster.peers()
            return all(
                p["spec"]["tls"]["peer"]["secretName"] == f"{secret}-2" for p in peers
            ) and own_peer_trust_settled(etcd_cluster, [second], "second")

        wait_until("every member on the other Secret", moved, 300)
    summary = writer.summary()
    assert writer.lost() == [], f"acknowledged writes lost: {summary}"
    assert summary["acknowledged_percent"] >= 99.0, summary
    assert etcd_cluster.member_ids() == ids, "members keep their IDs"
    # Each EtcdPeer keeps the last bundle's fingerprint: removing it would restart the member.
    assert len({p["spec"]["tls"]["peer"]["trust"] for p in etcd_cluster.peers()}) == 1


def test_a_cluster_signed_by_a_cert_manager_issuer_serves_its_certificates(etcd_cluster, tmp_path):
    """spec.tls.<part>.issuerRef with cert-manager's real controllers: the operator writes the
    Certificates, cert-manager the Secrets; only clients with a certificate from the issuer's CA
    are served, and a certificate cert-manager issues again is taken without a restart."""
    kube, namespace, name = etcd_cluster.kube, etcd_cluster.namespace, etcd_cluster.name
    with CertManager(kube, namespace, tmp_path) as cert_manager:
        issuer = cert_manager.ca_issuer("etcd-ca", "etcd CA from cert-manager")
        manifest = etcd_cluster.manifest(3)
        reference = {"issuerRef": {"name": issuer}}
        manifest["spec"]["tls"] = {"client": reference, "peer": reference}
        kube.apply(manifest)
        status = etcd_cluster.wait_available(3, timeout=240)
        for suffix in ("server-tls", "operator-tls", "client-tls", "peer-tls"):
            assert cert_manager.ready("certificate", f"{name}-{suffix}"), suffix
        assert not kube.exists("secret", f"{name}-client-ca", namespace), "no CA of the operator's"
        ca = secret_files(kube, namespace, "etcd-ca-ca")["tls.crt"]
        app = secret_files(kube, namespace, f"{name}-client-tls")
        assert app["ca.crt"] == ca
        assert set(status["tls"]["ownTrust"]) == {"client", "peer"}

        pod = etcd_cluster.pod_of(f"{name}-0")
        client = InPodClient(kube, namespace, pod["metadata"]["name"], name)
        client.install("/tmp/app", app)
        put = client.etcdctl_once_reachable("/tmp/app", "put", "issued-by", "cert-manager")
        assert put.returncode == 0, put.stderr
        refused = client.etcdctl("/tmp/app", "get", "issued-by", with_certificate=False)
        assert refused.returncode != 0 and "cert-manager" not in refused.stdout

        # cert-manager issues the peer certificate again (its Secret deleted): the health watch
        # has it checked, and the same CA signed it, so no member restarts.
        pods = {p["metadata"]["uid"] for p in etcd_cluster.pods()}
        before = secret_files(kube, namespace, f"{name}-peer-tls")["tls.crt"]
        kube("delete", "secret", f"{name}-peer-tls", "-n", namespace)

        def reissued_and_checked():
            if not kube.exists("secret", f"{name}-peer-tls", namespace):
                return False
            current = kube.get("secret", f"{name}-peer-tls", namespace)["metadata"]
            tls = etcd_cluster.get()["status"].get("tls", {})
            recorded = {c["secretName"]: c.get("resourceVersion") for c in tls["certificates"]}
            return recorded.get(f"{name}-peer-tls") == current["resourceVersion"]

        wait_until("the new peer certificate checked", reissued_and_checked, 120)
        assert secret_files(kube, namespace, f"{name}-peer-tls")["tls.crt"] != before
        etcd_cluster.wait_available(3, timeout=60)
        assert etcd_cluster.condition("Degraded").get("status") == "False"
        assert {p["metadata"]["uid"] for p in etcd_cluster.pods()} == pods, "nothing restarted"

        # An etcd user of spec.auth gets its client certificate from the issuer (CN the user):
        # it may write under its prefix and nowhere else, with no password.
        billing = {
            "name": "billing",
            "permissions": [{"keyPrefix": "/billing/", "access": "readwrite"}],
        }
        etcd_cluster.patch_spec(auth={"users": [billing]})

        def auth_applied():
            auth = etcd_cluster.get().get("status", {}).get("auth") or {}
            applied = etcd_cluster.condition("AuthApplied").get("status") == "True"
            return (
                applied
                and auth.get("enabled")
                and [u["name"] for u in auth["users"]] == ["billing"]
            )

        wait_until("spec.auth applied with the user billing", auth_applied, 120)
        assert cert_manager.ready("certificate", f"{name}-usercert-billing")
        user = secret_files(kube, namespace, f"{name}-usercert-billing")
        client.install("/tmp/billing", user)
        put = client.etcdctl_once_reachable("/tmp/billing", "put", "/billing/invoice-1", "42")
        assert put.returncode == 0, put.stderr
        outside = client.etcdctl("/tmp/billing", "put", "/payroll/x", "1")
        assert outside.returncode != 0 and "permission denied" in outside.stderr, outside
