"""The health watch's probe against real etcd 3.4/3.5/3.6: what ``/health`` says of a member
that serves, of a cluster that raised NOSPACE, of a member left without a leader, and of a
member that does not answer; each is what makes the watch wake the reconcile (or not). And a
round of the prober over several members: connections kept from round to round, a restarted
member asked again within the round, a hung one costing the round its timeout alone."""

from __future__ import annotations

import time
import urllib.request

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_health_watch import (
    HealthProber,
    address_of,
    probe,
)
from test_defragment_module import QUOTA, fill_to_nospace


def health_url(cluster, name):
    return cluster.nodes[name].client_url + "/health"


def test_a_serving_member_is_healthy_and_an_alarm_is_named_on_every_member(
    etcd_factory, etcd_version
):
    cluster = etcd_factory(3, flags=[f"--quota-backend-bytes={QUOTA}"])
    assert [probe(health_url(cluster, n)) for n in cluster.nodes] == ["", "", ""]
    fill_to_nospace(cluster)
    # The alarm is the cluster's: every member answers with it, whichever raised it (etcd 3.4
    # says only that it is not healthy).
    reason = "not healthy (/health: 503)" if etcd_version.startswith("3.4.") else "ALARM NOSPACE"
    # Raised through raft: a member answers with it once it has applied the alarm, a moment
    # after the write that was refused (seen on 3.4 in CI).
    deadline = time.monotonic() + 10
    answers = [probe(health_url(cluster, n)) for n in cluster.nodes]
    while answers != [reason] * 3 and time.monotonic() < deadline:
        time.sleep(0.2)
        answers = [probe(health_url(cluster, n)) for n in cluster.nodes]
    assert answers == [reason] * 3


def test_a_member_without_leader_and_a_hung_member_are_not_healthy(etcd_factory, etcd_version):
    cluster = etcd_factory(3)
    cluster.freeze("n2")
    try:
        # Its port still accepts connections (so a TCP readiness probe passes), but it answers
        # nothing.
        verdict = probe(health_url(cluster, "n2"), timeout=1)
        assert verdict.startswith("no answer to /health: "), verdict
        cluster.stop("n1")
        # One member of three has no quorum: until its election timeout it cannot complete the
        # read /health makes (no answer within the probe's timeout), then it has no leader.
        seen = [probe(health_url(cluster, "n0"))]
        deadline = time.monotonic() + 30
        while seen[-1].startswith("no answer") and time.monotonic() < deadline:
            seen.append(probe(health_url(cluster, "n0")))
        assert all(seen), seen
        no_leader = (
            "not healthy (/health: 503)" if etcd_version.startswith("3.4.") else ("RAFT NO LEADER")
        )
        assert seen[-1] == no_leader, seen
    finally:
        cluster.thaw("n2")
    cluster.stop("n2")
    stopped = probe(health_url(cluster, "n2"))
    assert stopped.startswith("no answer to /health: ConnectionRefusedError"), stopped


# The watch asks members from etcd 3.5 on (qk_health_watch.member_probes): not 3.4's.
@pytest.mark.parametrize("etcd_version", ["3.5.35", "3.6.16"])
def test_rounds_keep_their_connections_and_a_restarted_member_is_asked_again(etcd_factory):
    cluster = etcd_factory(3)
    urls = [health_url(cluster, n) for n in cluster.nodes]
    prober = HealthProber()
    try:
        assert prober.probe_all(urls) == ["", "", ""]
        kept = dict(prober.connections)
        assert len(kept) == 3
        assert prober.probe_all(urls) == ["", "", ""]
        assert prober.connections == kept, "each round opened new connections"
        # The member's end of the kept connection is gone with its process: the next round
        # finds it closed and asks the restarted member on a new one, within the round.
        cluster.stop("n1")
        initial = ",".join(f"{name}={node.peer_url}" for name, node in cluster.nodes.items())
        cluster.join("n1", initial)
        cluster.wait_healthy("n1")
        assert prober.probe_all(urls) == ["", "", ""]
        assert prober.connections[address_of(urls[0])] is kept[address_of(urls[0])]
        # A member no longer asked about loses its connection.
        prober.probe_all(urls[:2])
        assert len(prober.connections) == 2
    finally:
        prober.close()


def a_follower(cluster) -> str:
    """A member that is not the leader: freezing the leader would make the others' /health
    fail too, for the election."""
    for name, node in cluster.nodes.items():
        with urllib.request.urlopen(node.client_url + "/metrics", timeout=5) as answer:
            if "\netcd_server_is_leader 0" in answer.read().decode():
                return name
    raise AssertionError("no follower")


# The watch asks members from etcd 3.5 on (qk_health_watch.member_probes): not 3.4's.
@pytest.mark.parametrize("etcd_version", ["3.5.35", "3.6.16"])
def test_a_hung_member_delays_its_round_by_the_timeout_alone(etcd_factory):
    cluster = etcd_factory(3)
    hung = a_follower(cluster)
    names = [n for n in cluster.nodes if n != hung] + [hung]
    urls = [health_url(cluster, n) for n in names]
    prober = HealthProber(timeout=1.0)
    try:
        assert prober.probe_all(urls) == ["", "", ""]
        cluster.freeze(hung)
        try:
            started = time.monotonic()
            verdicts = prober.probe_all(urls)
            took = time.monotonic() - started
        finally:
            cluster.thaw(hung)
        assert verdicts[:2] == ["", ""], verdicts
        assert verdicts[2] == "no answer to /health: TimeoutError: timed out", verdicts
        assert 1.0 <= took < 1.9, took
        # Its late answer would be read as the next round's: the connection was dropped.
        assert address_of(urls[2]) not in prober.connections
        cluster.wait_healthy(hung)
        assert prober.probe_all(urls) == ["", "", ""]
    finally:
        prober.close()
