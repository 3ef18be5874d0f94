"""An EtcdCluster's TLS: Secret names, what the members mount and run with, and the certificate
manager against an in-memory Secret store (issuing, renewing, refusing the user's bad ones)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_tls import (
    REISSUING,
    TRUSTING,
    CertificateManager,
    MembersView,
    ensure_certificates,
    member_dns_names,
    peer_tls_spec,
    resolve,
    write_operator_credentials,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import ClusterNetwork
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import (
    render_replicaset,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_tls import (
    bundle_certificates,
    certificate_facts,
    certificate_problems,
    issue_leaf,
    new_ca,
)

NETWORK = ClusterNetwork("c", "ns", client_scheme="https", peer_scheme="https")


class SecretStore:
    """The few Secret calls the manager makes, kept in a dict."""

    def __init__(self):
        self.secrets, self.calls = {}, []

    def get(self, api_version, kind, name, namespace=None):
        return self.secrets.get(name)

    def create(self, obj, namespace=None):
        self.calls.append(("create", obj["metadata"]["name"]))
        self.secrets[obj["metadata"]["name"]] = obj
        return obj

    def patch(self, api_version, kind, name, patch, namespace=None):
        # A merge patch, as the API server applies it: data keys and annotations merge.
        self.calls.append(("patch", name))
        secret = self.secrets[name]
        metadata = dict(secret.get("metadata") or {})
        annotations = (patch.get("metadata") or {}).get("annotations")
        if annotations:
            metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
        data = {**(secret.get("data") or {}), **(patch.get("data") or {})}
        self.secrets[name] = {**secret, "metadata": metadata, "data": data}
        return self.secrets[name]

    def delete(self, name):
        del self.secrets[name]

    def files(self, name):
        data = self.secrets[name]["data"]
        return {k: base64.b64decode(v).decode() for k, v in data.items()}

    def put(self, name, files):
        data = {k: base64.b64encode(v.encode()).decode() for k, v in files.items()}
        self.secrets[name] = {"metadata": {"name": name}, "data": data}


def test_resolve_names_operator_managed_and_own_secrets():
    assert resolve("c", None) == {} and peer_tls_spec({}) == {}
    managed = resolve("c", {"client": {}, "peer": {}})
    assert managed["client"]["secretName"] == "c-server-tls" and managed["client"]["managed"]
    assert managed["client"]["clientCertAuth"] is True
    assert peer_tls_spec(managed) == {
        "client": {"secretName": "c-server-tls", "clientCertAuth": True},
        "peer": {"secretName": "c-peer-tls"},
    }
    own = resolve("c", {"client": {"serverSecretName": "s", "operatorSecretName": "o"}})
    assert own["client"] == {
        "managed": False,
        "secretName": "s",
        "operatorSecretName": "o",
        "clientCertAuth": True,
    }
    assert "peer" not in own


def test_member_pod_mounts_its_secrets_and_runs_with_tls_flags():
    spec = {
        "clusterName": "c",
        "version": "3.6.16",
        "bootstrap": {"static": {"initialCluster": [{"name": "c-0", "host": "c-0.c.ns.svc"}]}},
        "tls": peer_tls_spec(resolve("c", {"client": {}, "peer": {}})),
    }
    pod = render_replicaset("c-0", "ns", spec)["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--initial-advertise-peer-urls=https://c-0.c.ns.svc:2380" in args
    assert "--listen-client-urls=https://0.0.0.0:2379" in args
    assert "--client-cert-auth=true" in args and "--peer-client-cert-auth=true" in args
    assert "--listen-metrics-urls=http://0.0.0.0:2381" in args
    assert {v["name"]: v.get("secret", {}).get("secretName") for v in pod["volumes"]} == {
        "data": None,
        "client-tls": "c-server-tls",
        "peer-tls": "c-peer-tls",
    }
    plain = render_replicaset("c-0", "ns", {**spec, "tls": {}})["spec"]["template"]["spec"]
    assert not any("tls" in a or "cert" in a for a in plain["containers"][0]["args"])
    # Metrics on their own plain-HTTP port whether or not the clients use TLS.
    assert "--listen-metrics-urls=http://0.0.0.0:2381" in plain["containers"][0]["args"]
    assert [v["name"] for v in plain["volumes"]] == ["data"]


def test_manager_issues_every_secret_once_and_writes_the_operator_files(tmp_path):
    store = SecretStore()
    resolved = resolve("c", {"client": {}, "peer": {}})
    report = ensure_certificates(CertificateManager(store, NETWORK, None), resolved, 3)
    assert report.problems == []
    assert {e["reason"] for e in report.as_dict()["events"]} == {"CertificateIssued"}
    assert {i["secret"] for i in report.issued} == {
        "c-client-ca", "c-server-tls", "c-client-tls", "c-operator-tls", "c-peer-ca", "c-peer-tls"
    }  # fmt: skip
    server = store.files("c-server-tls")
    assert certificate_problems(
        server["tls.crt"], server["tls.key"], store.files("c-client-ca")["tls.crt"],
        dns_names=["c-1.c.ns.svc.cluster.local", "c-client.ns.svc.cluster.local"], server=True,
    ) == []  # fmt: skip
    # Client and peer traffic have separate CAs: an application certificate is no peer's.
    assert certificate_problems(
        store.files("c-client-tls")["tls.crt"], None, store.files("c-peer-ca")["tls.crt"]
    )
    assert certificate_facts(store.files("c-operator-tls")["tls.crt"])["subject"] == "root"

    manager = CertificateManager(store, NETWORK, None)
    again = ensure_certificates(manager, resolved, 3)
    assert again.issued == [] and len(store.calls) == 6
    paths = write_operator_credentials(manager, resolved, str(tmp_path / "ns" / "c"))
    written = (tmp_path / "ns" / "c" / "tls.crt").read_text()
    assert paths["client_cert"].endswith("tls.crt")
    assert written == store.files("c-operator-tls")["tls.crt"]
    assert (tmp_path / "ns" / "c" / "tls.key").stat().st_mode & 0o777 == 0o600


def test_manager_renews_a_leaf_past_two_thirds_of_its_validity():
    store = SecretStore()
    resolved = resolve("c", {"peer": {}})
    ensure_certificates(CertificateManager(store, NETWORK, None), resolved, 3)
    ca = store.files("c-peer-ca")
    old = datetime.now(UTC) - timedelta(days=300)
    cert, key = issue_leaf(
        ca["tls.crt"], ca["tls.key"], "c", dns_names=member_dns_names(NETWORK), now=old
    )
    store.put("c-peer-tls", {"tls.crt": cert, "tls.key": key, "ca.crt": ca["tls.crt"]})
    report = ensure_certificates(CertificateManager(store, NETWORK, None), resolved, 3)
    assert report.issued == [{"secret": "c-peer-tls", "reason": "renewed"}]
    assert report.as_dict()["events"] == [
        {"reason": "CertificateRenewed", "message": "Secret c-peer-tls: certificate renewed"}
    ]
    assert store.files("c-peer-tls")["tls.crt"] != cert


def test_own_secrets_are_checked_never_written():
    store = SecretStore()
    ca, ca_key = new_ca("mine")
    wrong, wrong_key = issue_leaf(ca, ca_key, "x", dns_names=["elsewhere.example"], client=False)
    store.put("mine", {"tls.crt": wrong, "tls.key": wrong_key, "ca.crt": ca})
    resolved = resolve("c", {"client": {"serverSecretName": "mine", "operatorSecretName": "gone"}})
    report = ensure_certificates(CertificateManager(store, NETWORK, None), resolved, 3)
    assert store.calls == [] and report.issued == []
    text = " ".join(report.problems)
    assert "c-0.c.ns.svc.cluster.local" in text and "serverSecretName" in text
    assert "operatorSecretName: Secret ns/gone does not exist" in text


class Members(MembersView):
    """Members as a test says they are: started with the CA bundle of ``bundle[part]``, and
    presenting ``serving[part]``; ``asked`` records the questions (a steady cluster asks none)."""

    def __init__(self):
        self.bundle, self.serving, self.asked = {}, {}, []

    def run_bundle(self, part, fingerprint):
        self.asked.append(("run_bundle", part))
        return self.bundle.get(part) == fingerprint

    def serve(self, part, cert_pem):
        self.asked.append(("serve", part))
        return self.serving.get(part) == cert_pem


def signed_by(store, leaf, ca_pem):
    files = store.files(leaf)
    return certificate_problems(files["tls.crt"], files["tls.key"], ca_pem) == []


def test_a_ca_rotation_trusts_the_new_ca_then_reissues_then_drops_the_old_one():
    store, members = SecretStore(), Members()
    resolved = resolve("c", {"client": {}, "peer": {}})

    def run(rotate_for="r1"):
        manager = CertificateManager(store, NETWORK, None)
        return ensure_certificates(
            manager, resolved, 3, ["app"], rotate_for=rotate_for, members=members
        )

    run(rotate_for="")
    assert members.asked == [], "a steady cluster asks its members nothing"
    old = {part: store.files(f"c-{part}-ca")["tls.crt"] for part in ("client", "peer")}
    leaves = {"client": ["c-server-tls", "c-client-tls", "c-operator-tls", "c-user-app"],
              "peer": ["c-peer-tls"]}  # fmt: skip
    before = {leaf: store.files(leaf)["tls.crt"] for part in leaves for leaf in leaves[part]}

    # 1. Asked for: new CAs, trusted next to the old ones; the leaves keep their certificates
    # and get the bundle as ca.crt, for members to be restarted with (report.trust).
    report = run()
    assert report.rotation == {"client": TRUSTING, "peer": TRUSTING}
    for part in ("client", "peer"):
        ca = store.files(f"c-{part}-ca")
        assert ca["tls.crt"] != old[part]
        assert bundle_certificates(ca["ca.crt"]) == [ca["tls.crt"], old[part]]
        for leaf in leaves[part]:
            assert store.files(leaf)["tls.crt"] == before[leaf]
            assert store.files(leaf)["ca.crt"] == ca["ca.crt"]
    annotations = store.secrets["c-client-ca"]["metadata"]["annotations"]
    assert annotations["etcd.quorumkeeper.dev/rotated-for"] == "r1"
    assert {i["reason"].split(":")[0] for i in report.issued} == {"rotated", "trust updated"}
    assert run().issued == [], "nothing more until the members run with the bundle"

    # 2. Every member restarted with the bundle: every leaf is reissued from the new CA.
    members.bundle = dict(report.trust)
    report = run()
    assert report.rotation == {"client": REISSUING, "peer": REISSUING}
    for part in ("client", "peer"):
        ca = store.files(f"c-{part}-ca")
        for leaf in leaves[part]:
            assert signed_by(store, leaf, ca["tls.crt"]), leaf
            assert store.files(leaf)["ca.crt"] == ca["ca.crt"]
    assert run().rotation == {"client": REISSUING, "peer": REISSUING}, "not served yet"

    # 3. Every member presents its new certificate: the old CA is trusted no more.
    members.serving = {"client": store.files("c-server-tls")["tls.crt"],
                       "peer": store.files("c-peer-tls")["tls.crt"]}  # fmt: skip
    report = run()
    assert report.rotation == {} and report.trust == {}
    for part in ("client", "peer"):
        ca = store.files(f"c-{part}-ca")
        assert ca["ca.crt"] == ca["tls.crt"]
        assert all(store.files(leaf)["ca.crt"] == ca["tls.crt"] for leaf in leaves[part])
    assert store.files("c-user-app")["tls.crt"] != before["c-user-app"]
    asked = len(members.asked)
    assert run().issued == [] and len(members.asked) == asked, "r1 is answered"


def test_a_deleted_ca_is_replaced_by_a_rotation_not_under_the_members_feet():
    store, members = SecretStore(), Members()
    resolved = resolve("c", {"peer": {}})
    ensure_certificates(CertificateManager(store, NETWORK, None), resolved, 3, members=members)
    old_ca, old_leaf = store.files("c-peer-ca")["tls.crt"], store.files("c-peer-tls")["tls.crt"]
    store.delete("c-peer-ca")
    report = ensure_certificates(
        CertificateManager(store, NETWORK, None), resolved, 3, members=members
    )
    new_ca_pem = store.files("c-peer-ca")["tls.crt"]
    assert bundle_certificates(store.files("c-peer-ca")["ca.crt"]) == [new_ca_pem, old_ca]
    assert report.rotation == {"peer": TRUSTING}
    # The members' certificate stays the one the running members trust, until they trust both.
    assert store.files("c-peer-tls")["tls.crt"] == old_leaf
    assert "missing or unusable" in report.issued[0]["reason"]


def test_a_backup_reading_the_certificates_never_starts_a_rotation():
    store = SecretStore()
    resolved = resolve("c", {"client": {}})
    ensure_certificates(CertificateManager(store, NETWORK, None), resolved, 3)
    reader = CertificateManager(store, NETWORK, None, issue=False)
    report = ensure_certificates(reader, resolved, 3, rotate_for="r1")
    assert report.issued == [] and report.problems == [] and report.rotation == {}


def test_members_run_the_ca_bundle_of_a_rotation_as_part_of_their_configuration():
    trust = {"client": "f00d"}
    assert peer_tls_spec(resolve("c", {"client": {}, "peer": {}}), trust) == {
        "client": {"secretName": "c-server-tls", "clientCertAuth": True, "trust": "f00d"},
        "peer": {"secretName": "c-peer-tls"},
    }
