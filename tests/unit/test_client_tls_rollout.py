"""Client TLS turned on and off on a running cluster (qk_plan_config.staged_config): two rolling
restarts through a bridge where members serve https and http on the same port, so that at every
moment one scheme reaches every member; the member pods that say it, and the URLs the operator
reaches each member by."""

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_tls import (
    SERVE_PLAIN_HTTP,
    kept_client,
    member_client_url,
    schemes,
    served_client_schemes,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import ClusterNetwork
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import (
    render_replicaset,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    cluster_config,
    config_hash,
    peer_config,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan import (
    etcd_cluster_plan as plan,
)
from test_config_plan import member, observation, pod
from test_config_plan import peer as config_plan_peer

OPTIONS = {"snapshotCount": 10000}
MANAGED_CLIENT = {"secretName": "c-server-tls", "clientCertAuth": True}


def config_of(tls):
    return peer_config({"options": OPTIONS, "tls": tls})


def peer(i, tls):
    """An EtcdPeer asking for and seen serving with the options and ``tls``."""
    digest = config_hash(config_of(tls))
    return {**config_plan_peer(i, digest, digest), "tls": tls}


def rollout(tls_of_members, final_tls, leader=0):
    """Run the planner on three healthy members, applying each restart and peer URL change it
    asks for (the member back at once), until it has nothing to do: (step, members' tls,
    the schemes etcd lists their peer URLs with) after each restart."""
    final = config_of(final_tls)
    members = list(tls_of_members)
    listed = [schemes(tls)["peer_scheme"] for tls in members]
    history = []
    for _ in range(10):
        etcd_members = []
        for i in range(3):
            entry = member(i, leader=i == leader)
            entry["peer_urls"] = [f"{listed[i]}://c-{i}.c.ns.svc.cluster.local:2380"]
            etcd_members.append(entry)
        observed = observation(
            [peer(i, members[i]) for i in range(3)],
            etcd_members,
            {f"c-{i}": pod(i, config_hash(config_of(members[i]))) for i in range(3)},
            config=final,
        )
        step = plan(observed)
        if step["action"] == "none":
            return history
        assert step["action"] == "restart_member", step
        i = int(step["peer"].rsplit("-", 1)[1])
        if step["move_leader_to"]:
            leader = int(step["move_leader_to"].rsplit("-", 1)[1])
        if "peer_urls" in step:
            listed[i] = step["peer_urls"][0].split("://", 1)[0]
        members[i] = step["config"].get("tls") or {}
        history.append((step, [dict(t) for t in members], list(listed)))
    raise AssertionError(f"the rollout did not end: {history}")


def roll(tls_of_members, final_tls, leader=0):
    """rollout without the peer URLs: (step, members' tls) after each restart."""
    return [(step, members) for step, members, _ in rollout(tls_of_members, final_tls, leader)]


def reachable_by_one_scheme(members):
    return bool(frozenset.intersection(*(served_client_schemes(t) for t in members)))


def test_turning_client_tls_on_bridges_through_both_schemes_then_serves_only_tls():
    history = roll([{}, {}, {}], {"client": MANAGED_CLIENT})
    assert len(history) == 6, [s["message"] for s, _ in history]
    bridge = {"client": {**MANAGED_CLIENT, SERVE_PLAIN_HTTP: True}}
    assert [members for _, members in history][2] == [bridge] * 3
    assert all(reachable_by_one_scheme(members) for _, members in history)
    assert history[-1][1] == [{"client": MANAGED_CLIENT}] * 3
    first = history[0][0]
    assert first["peer"] == "c-2" and first["reason"] == "RollingRestart"
    assert "first serving https and http side by side" in first["message"]
    assert "client TLS is turned on in two rolling restarts" in first["message"]
    assert "side by side" not in history[3][0]["message"]
    # The leader goes last in each round, after handing its leadership over.
    assert history[2][0]["peer"] == "c-0" and history[2][0]["move_leader_to"]


def test_turning_client_tls_off_keeps_the_members_certificates_until_they_serve_http_too():
    tls = {"client": MANAGED_CLIENT}
    history = roll([tls] * 3, {})
    assert len(history) == 6
    assert history[2][1] == [{"client": {**MANAGED_CLIENT, SERVE_PLAIN_HTTP: True}}] * 3
    assert all(reachable_by_one_scheme(members) for _, members in history)
    assert history[-1][1] == [{}] * 3
    assert "client TLS is turned off" in history[0][0]["message"]


def test_peer_tls_is_kept_while_client_tls_turns_on():
    peer_tls = {"peer": {"secretName": "c-peer-tls"}}
    history = roll([peer_tls] * 3, {**peer_tls, "client": MANAGED_CLIENT})
    assert all(m["peer"] == peer_tls["peer"] for _, members in history for m in members)
    assert history[-1][1] == [{**peer_tls, "client": MANAGED_CLIENT}] * 3


def test_members_already_serving_both_schemes_go_straight_to_the_end():
    bridge = {"client": {**MANAGED_CLIENT, SERVE_PLAIN_HTTP: True}}
    assert len(roll([bridge] * 3, {"client": MANAGED_CLIENT})) == 3
    assert len(roll([bridge] * 3, {})) == 3


def test_a_cluster_as_its_spec_says_has_nothing_to_restart():
    assert roll([{"client": MANAGED_CLIENT}] * 3, {"client": MANAGED_CLIENT}) == []
    assert roll([{}] * 3, {}) == []


def test_a_plain_members_configuration_hash_is_what_it_was_before_tls_could_change():
    # Members created before: their pods' annotation must still match (no restart on upgrade).
    legacy = {"options": OPTIONS, "podTemplate": {}}
    assert config_of({}) == legacy
    assert cluster_config({"options": OPTIONS}, "c")["options"]["snapshotCount"] == 10000
    assert "tls" not in cluster_config({"options": OPTIONS}, "c")
    assert cluster_config({"tls": {"client": {}}}, "c")["tls"] == {"client": MANAGED_CLIENT}


def args_of(tls):
    spec = {
        "clusterName": "c",
        "version": "3.6.16",
        "bootstrap": {
            "initialClusterState": "New",
            "static": {"initialCluster": [{"name": "c-0", "host": "c-0.c.ns.svc.cluster.local"}]},
        },
        "tls": tls,
    }
    (container,) = render_replicaset("c-0", "ns", spec)["spec"]["template"]["spec"]["containers"]
    return dict(a.removeprefix("--").split("=", 1) for a in container["args"] if "=" in a)


def test_a_bridge_member_listens_and_advertises_both_schemes_on_the_client_port():
    args = args_of({"client": {**MANAGED_CLIENT, SERVE_PLAIN_HTTP: True}})
    assert args["listen-client-urls"] == "https://0.0.0.0:2379,http://0.0.0.0:2379"
    host = "c-0.c.ns.svc.cluster.local:2379"
    assert args["advertise-client-urls"] == f"https://{host},http://{host}"
    assert args["cert-file"].endswith("tls.crt") and args["client-cert-auth"] == "true"
    assert args_of({"client": MANAGED_CLIENT})["listen-client-urls"] == "https://0.0.0.0:2379"
    assert args_of({})["listen-client-urls"] == "http://0.0.0.0:2379"


@pytest.mark.parametrize(
    ("tls", "have_certificate", "scheme"),
    [
        ({}, True, "http"),
        ({"client": MANAGED_CLIENT}, True, "https"),
        ({"client": MANAGED_CLIENT}, False, "https"),
        ({"client": {**MANAGED_CLIENT, SERVE_PLAIN_HTTP: True}}, True, "https"),
        ({"client": {**MANAGED_CLIENT, SERVE_PLAIN_HTTP: True}}, False, "http"),
    ],
)
def test_the_operator_reaches_each_member_by_what_it_serves(tls, have_certificate, scheme):
    url = member_client_url(ClusterNetwork("c", "ns"), "c-1", tls, have_certificate)
    assert url == f"{scheme}://c-1.c.ns.svc.cluster.local:2379"


def test_turning_off_keeps_the_client_side_of_the_first_member_still_serving_it():
    peers = [
        {"spec": {}},
        {"spec": {"tls": {"client": {**MANAGED_CLIENT, SERVE_PLAIN_HTTP: True}}}},
    ]
    kept = kept_client("c", peers)
    assert kept == {
        "managed": True,
        "secretName": "c-server-tls",
        "operatorSecretName": "c-operator-tls",
        "clientCertAuth": True,
    }
    own = kept_client("c", [{"spec": {"tls": {"client": {"secretName": "mine"}}}}])
    assert own["managed"] is False and own["operatorSecretName"] == ""
    assert (
        kept_client("c", [{"spec": {}}, {"spec": {"tls": {"peer": {"secretName": "p"}}}}]) is None
    )


@pytest.mark.parametrize(
    "before,final_tls",
    [({}, {"client": MANAGED_CLIENT}), ({"client": MANAGED_CLIENT}, {})],
    ids=["turned on", "turned off"],
)
def test_the_last_member_onto_the_bridge_is_waited_for_before_the_next_stage(before, final_tls):
    """Every EtcdPeer on the bridge moves the stage on, the member restarted last not back yet:
    it is waited for, not restarted onto the next stage before it has served."""
    final = config_of(final_tls)
    bridge = {"client": {**MANAGED_CLIENT, SERVE_PLAIN_HTTP: True}}
    bridged, old = config_hash(config_of(bridge)), config_hash(config_of(before))
    peers = [peer(i, bridge) for i in range(3)]
    peers[0] = {**config_plan_peer(0, bridged, old), "tls": bridge}
    pods = {f"c-{i}": pod(i, bridged) for i in range(3)}
    pods["c-0"] = pod(0, bridged, ready=False)
    members = [member(0, healthy=False), member(1, leader=True), member(2)]
    step = plan(observation(peers, members, pods, config=final))
    assert step["action"] == "wait" and "waiting for c-0 to come back" in step["message"], step
