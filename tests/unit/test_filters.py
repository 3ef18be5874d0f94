from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.quorumkeeper.etcd.plugins.filter.etcd import (
    FilterModule,
    etcd_client_url,
    etcd_image,
    etcd_initial_cluster,
    etcd_ordinal,
    etcd_peer_spec,
    etcd_peer_url,
    etcd_version_compare,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import ClusterNetwork
from ansibleenv import ansible_json_env

REPO = Path(__file__).resolve().parents[2]


NETWORK = {"cluster": "c", "namespace": "ns"}


def test_urls():
    assert etcd_peer_url("c-0", NETWORK) == "http://c-0.c.ns.svc.cluster.local:2380"
    assert etcd_client_url("c-0", NETWORK) == "http://c-0.c.ns.svc.cluster.local:2379"
    other = dict(NETWORK, domain="example.org", client_port="12379", peer_port=12380)
    assert etcd_peer_url("c-0", other) == "http://c-0.c.ns.svc.example.org:12380"
    assert etcd_client_url("c-0", other) == "http://c-0.c.ns.svc.example.org:12379"
    assert etcd_client_url("c-0", dict(NETWORK, client_scheme="https")).startswith("https://")
    for bad in ({"cluster": "c"}, dict(NETWORK, peer_port=0), dict(NETWORK, peer_scheme="ftp")):
        with pytest.raises(AnsibleFilterError):
            etcd_peer_url("c-0", bad)
    with pytest.raises(AnsibleFilterError):
        etcd_peer_url("", NETWORK)


def test_initial_cluster():
    assert etcd_initial_cluster(["c-0", "c-1"], NETWORK) == (
        "c-0=http://c-0.c.ns.svc.cluster.local:2380,c-1=http://c-1.c.ns.svc.cluster.local:2380"
    )
    assert etcd_initial_cluster([], NETWORK) == ""


def test_ordinal():
    assert etcd_ordinal("my-etcd-12") == 12
    assert etcd_ordinal("etcd-0") == 0
    with pytest.raises(AnsibleFilterError):
        etcd_ordinal("etcd")


def test_image():
    assert etcd_image("3.6.16", "quay.io/coreos/etcd") == "quay.io/coreos/etcd:v3.6.16"
    assert etcd_image("v3.5.35") == "quay.io/coreos/etcd:v3.5.35"
    assert etcd_image("3.5.35", "registry.local/etcd") == "registry.local/etcd:v3.5.35"
    with pytest.raises(AnsibleFilterError):
        etcd_image("")


NAMING = {"cluster": "e", "namespace": "ns", "domain": "cluster.local", "repository": "r/etcd"}


def test_peer_spec_copies_what_the_pod_needs():
    cluster_spec = {
        "replicas": 3,
        "version": "3.6.16",
        "storage": {"volumeClaimTemplate": {"resources": {"requests": {"storage": "1Gi"}}}},
        "podTemplate": {"resources": {"limits": {"cpu": "1"}}},
        "paused": False,
    }
    spec = etcd_peer_spec("e-1", cluster_spec, "Existing", ["e-0", "e-1"], NAMING)
    assert spec == {
        "clusterName": "e",
        "version": "3.6.16",
        "repository": "r/etcd",
        "bootstrap": {
            "initialClusterState": "Existing",
            "static": {
                "initialCluster": [
                    {"name": "e-0", "host": "e-0.e.ns.svc.cluster.local"},
                    {"name": "e-1", "host": "e-1.e.ns.svc.cluster.local"},
                ]
            },
        },
        "storage": cluster_spec["storage"],
        "podTemplate": cluster_spec["podTemplate"],
        # The defaults resolved: the member keeps them whatever the operator's become.
        "options": {
            "quotaBackendBytes": 512 << 20,
            "autoCompaction": {"mode": "periodic", "retention": "5m"},
        },
    }
    own = etcd_peer_spec("e-0", dict(cluster_spec, repository="mine/etcd"), "New", ["e-0"], NAMING)
    assert own["repository"] == "mine/etcd", "the cluster's own repository wins"


def test_a_joining_member_lists_each_member_with_the_scheme_etcd_has_for_it():
    """While peer TLS is turned on, a member that joins with it lists the members not moved
    yet with http: etcd refuses a joiner whose --initial-cluster differs from its member list."""
    cluster_spec = {"version": "3.6.16", "tls": {"peer": {}}}
    members = [
        "e-0=http://e-0.e.ns.svc.cluster.local:2380",
        "e-1=https://e-1.e.ns.svc.cluster.local:2380",
        "=https://e-9.e.ns.svc.cluster.local:2380",
        {"name": "e-2", "peer_urls": ["http://e-2.e.ns.svc.cluster.local:2380"]},
        "e-3",
    ]
    spec = etcd_peer_spec("e-3", cluster_spec, "Existing", members, NAMING)
    initial = spec["bootstrap"]["static"]["initialCluster"]
    assert initial == [
        {"name": "e-0", "host": "e-0.e.ns.svc.cluster.local", "scheme": "http"},
        {"name": "e-1", "host": "e-1.e.ns.svc.cluster.local"},
        {"name": "e-2", "host": "e-2.e.ns.svc.cluster.local", "scheme": "http"},
        {"name": "e-3", "host": "e-3.e.ns.svc.cluster.local"},
    ]
    network = ClusterNetwork("e", "ns", peer_scheme="https")
    assert network.initial_cluster(initial) == (
        "e-0=http://e-0.e.ns.svc.cluster.local:2380,e-1=https://e-1.e.ns.svc.cluster.local:2380,"
        "e-2=http://e-2.e.ns.svc.cluster.local:2380,e-3=https://e-3.e.ns.svc.cluster.local:2380"
    )


@pytest.mark.parametrize(
    ("state", "members"), [("new", ["e-0"]), ("New", ["e-1"]), ("Existing", [])]
)
def test_peer_spec_rejects(state, members):
    with pytest.raises(AnsibleFilterError):
        etcd_peer_spec("e-0", {"version": "3.6.16"}, state, members, NAMING)


@pytest.mark.parametrize(
    "a,b,cmp",
    [
        ("3.5.9", "3.5.10", -1),
        ("3.6.0", "3.5.35", 1),
        ("v3.5.0", "3.5.0", 0),
        ("3.5", "3.5.0", 0),
        ("3.6.0-rc.1", "3.6.0", -1),
        ("3.6.0-rc.2", "3.6.0-rc.10", -1),
        ("3.4.23", "3.4.3", 1),
    ],
)
def test_version_compare(a, b, cmp):
    assert etcd_version_compare(a, b) == cmp


def test_version_compare_ops():
    assert etcd_version_compare("3.5.0", "3.6.0", "<")
    assert etcd_version_compare("3.6.16", "3.6.0", ">=")
    assert not etcd_version_compare("3.6.16", "3.6.0", "eq")
    with pytest.raises(AnsibleFilterError):
        etcd_version_compare("3.5.0", "3.6.0", "~")
    with pytest.raises(AnsibleFilterError):
        etcd_version_compare("three", "3.6.0")


def test_filter_module_exports():
    names = set(FilterModule().filters())
    assert {
        "etcd_peer_url",
        "etcd_client_url",
        "etcd_initial_cluster",
        "etcd_ordinal",
        "etcd_image",
        "etcd_peer_spec",
        "etcd_version_compare",
    } <= names


def test_filters_through_ansible(tmp_path):
    """The plugin loads in Ansible as the project's ansible.cfg configures it and works in
    templates."""
    expr = (
        "{{ ['e-0','e-1'] | etcd_initial_cluster({'cluster': 'e', 'namespace': 'ns'}) }}|"
        "{{ 'e-1' | etcd_ordinal }}|"
        "{{ '3.6.16' | etcd_image('quay.io/coreos/etcd') }}|"
        "{{ '3.5.35' | etcd_version_compare('3.6.0', '<') }}"
    )
    env = ansible_json_env(tmp_path)
    ansible = str(Path(sys.executable).parent / "ansible")
    out = subprocess.run(
        [ansible, "localhost", "-m", "debug", "-a", f"msg={expr}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    result = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result["msg"] == (
        "e-0=http://e-0.e.ns.svc.cluster.local:2380,e-1=http://e-1.e.ns.svc.cluster.local:2380"
        "|1|quay.io/coreos/etcd:v3.6.16|True"
    ), out.stderr
