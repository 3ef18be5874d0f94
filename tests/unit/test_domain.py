"""qk_domain, the one home of the etcd domain, and qk_connection's profile (no etcd needed)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    PROFILE_ENV,
    ConnectionProfile,
    connection_argument_spec,
    profile_env,
    profile_from_env,
    profile_from_params,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    ClusterNetwork,
    claim_facts,
    compare_versions,
    data_lost,
    image_reference,
    keeps_quorum,
    member_labels,
    minor_version,
    ordinal_of,
    parse_timestamp,
    parse_version,
    peer_name,
    quorum_size,
    seconds_between,
    tolerable_failures,
    version_or_none,
)


def test_names_and_labels():
    assert peer_name("etcd", 2) == "etcd-2"
    assert ordinal_of("my-etcd-12") == 12 and ordinal_of("etcd") == -1 and ordinal_of("") == -1
    assert member_labels("c")["etcd.quorumkeeper.dev/cluster"] == "c"
    assert "etcd.quorumkeeper.dev/peer" not in member_labels("c")
    assert member_labels("c", "c-0")["etcd.quorumkeeper.dev/peer"] == "c-0"


def test_network_makes_every_url_from_one_setting():
    network = ClusterNetwork.from_settings(
        {"cluster": "c", "namespace": "ns", "client_port": "12379", "peer_port": 12380, "x": 1}
    )
    assert network.member_host("c-0") == "c-0.c.ns.svc.cluster.local"
    assert network.peer_url("c-0") == "http://c-0.c.ns.svc.cluster.local:12380"
    assert network.client_url("c-0") == "http://c-0.c.ns.svc.cluster.local:12379"
    assert network.client_service_url() == "http://c-client.ns.svc.cluster.local:12379"
    assert network.initial_cluster(["c-0", {"name": "c-1", "host": "h"}]) == (
        "c-0=http://c-0.c.ns.svc.cluster.local:12380,c-1=http://h:12380"
    )
    assert network.listen_client_url() == "http://0.0.0.0:12379"
    tls = ClusterNetwork("c", "ns", client_scheme="https", peer_scheme="https")
    assert tls.peer_url("c-0").startswith("https://") and tls.listen_peer_url().startswith("https")
    for bad in ({"namespace": ""}, {"peer_port": 70000}, {"client_scheme": "grpc"}):
        with pytest.raises(ValueError):
            ClusterNetwork(**{"cluster": "c", "namespace": "ns", **bad})


def test_versions_and_images():
    assert parse_version("v3.4") == (3, 4, 0) and parse_version("3.6.0-rc.1") == (3, 6, 0)
    assert version_or_none("") is None and version_or_none("3.5.9") == (3, 5, 9)
    assert compare_versions("3.6.0-rc.2", "3.6.0-rc.10") == -1
    assert compare_versions("3.6.0", "3.6.0-rc.1") == 1
    assert minor_version("3.5.9") == "3.5" and minor_version("unknown") == "unknown"
    assert image_reference("v3.5.35") == "quay.io/coreos/etcd:v3.5.35"
    assert image_reference("3.6.16", "r/etcd") == "r/etcd:v3.6.16"
    with pytest.raises(ValueError):
        image_reference("")


@pytest.mark.parametrize(
    ("voters", "healthy", "quorum", "keeps", "spare"),
    [
        (1, 1, 1, True, 0),
        (3, 2, 2, True, 0),
        (3, 3, 2, True, 1),
        (5, 2, 3, False, 0),
        (0, 0, 1, False, 0),
    ],
)
def test_quorum(voters, healthy, quorum, keeps, spare):
    assert quorum_size(voters) == quorum
    assert keeps_quorum(healthy, voters) is keeps
    assert tolerable_failures(healthy, voters) == spare


def test_data_lost_rule():
    claim = {"exists": True, "uid": "u1", "deleting": False}
    assert not data_lost("u1", claim)
    assert not data_lost("", None), "a member that never recorded a claim lost nothing"
    assert data_lost("u1", None)
    assert data_lost("u1", dict(claim, uid="u2"))
    assert data_lost("u1", dict(claim, deleting=True))
    pvc = {"metadata": {"uid": "u1"}}
    assert claim_facts(pvc) == claim and not data_lost("u1", claim_facts(pvc))
    pvc["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert data_lost("u1", claim_facts(pvc)) and data_lost("u1", claim_facts(None))


def test_timestamps():
    moment = parse_timestamp("2026-01-01T00:00:10Z")
    assert moment == datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)
    assert parse_timestamp("2026-01-01T01:00:10.5+01:00") == moment.replace(microsecond=500000)
    assert seconds_between("2026-01-01T00:00:00Z", "2026-01-01T00:00:10Z") == 10
    assert seconds_between(None) is None


def test_profile_from_module_options_and_for_helper_pods():
    spec = connection_argument_spec()
    assert spec["endpoints"]["required"] and spec["password"]["no_log"]
    assert "endpoints" not in connection_argument_spec(endpoints_required=False)
    params = {"endpoints": ["https://e:2379/"], "timeout": 2.0, "ca_cert": "/ca", "username": None}
    profile = profile_from_params(params)
    assert profile.endpoints == ("https://e:2379",) and profile.secure and profile.timeout == 2.0
    (env,) = profile_env(profile)
    assert env["name"] == PROFILE_ENV
    passed = profile_from_env(["https://m:2379"], {PROFILE_ENV: env["value"]})
    assert passed == profile.with_endpoints(["https://m:2379"])
    assert profile_from_env(["http://m:2379"], {}) == ConnectionProfile(("http://m:2379",))
    with pytest.raises(ValueError, match="Secret"):
        profile_env(ConnectionProfile(("http://e",), username="u", password="p"))
    with pytest.raises(ValueError):
        ConnectionProfile(("http://e",), client_cert="/c")
    assert "s3cret" not in repr(ConnectionProfile(("http://e",), username="u", password="s3cret"))
