"""The soak's workload and checker against a real 3-member etcd on this host: a history recorded
while members are killed is linearizable and every acknowledged write reads back; a history or a
write that was tampered with is caught."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
import time
import urllib.request

import pytest

os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from etcdharness import REPO, EtcdCluster, etcd_binary  # noqa: E402

sys.path.insert(0, str(REPO / "hack"))

from soak.history import History, check  # noqa: E402
from soak.workload import Workload  # noqa: E402

# The checker is the toolchain's: `make test` builds it beside the tests (a cold run once spent
# this module's 300 s waiting for it inside the test).
pytestmark = pytest.mark.toolchain("soak_checker")


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    binary = etcd_binary("3.6.16")
    if binary is None:
        pytest.fail("etcd 3.6.16 is not in the toolchain: run `make toolchain`")
    cluster = EtcdCluster(binary, "3.6.16", tmp_path_factory.mktemp("etcd")).start(3)
    yield cluster
    cluster.teardown()


def restart(cluster: EtcdCluster, name: str) -> None:
    initial = ",".join(f"{n}={node.peer_url}" for n, node in cluster.nodes.items())
    cluster.join(name, initial)


def until(description, predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {description}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def recorded(etcd, tmp_path_factory):
    """A history of 4 clients talking to member n1 while n1 is killed and restarted and then
    the leader is killed; with the final reads and the read-back."""
    history = History()
    workload = Workload(etcd.nodes["n1"].client_url, history, clients=4, keys=2, rate=40)
    with workload:
        until("traffic", lambda: history.counts()["ok"] > 50)
        etcd.stop("n1")  # the clients' member: requests in flight are cut, new ones fail
        seen = history.counts()
        until("failed requests", lambda: history.counts()["failed"] > seen["failed"])
        restart(etcd, "n1")
        workload.set_round("second")
        until("traffic again", lambda: history.counts()["ok"] > seen["ok"] + 50)
        leader = until_a_leader_other_than(etcd, "n1")
        etcd.stop(leader)
        seen = history.counts()
        until("traffic after the leader died", lambda: history.counts()["ok"] > seen["ok"] + 50)
        restart(etcd, leader)
    final = workload.final_reads(timeout=30)
    readback = workload.read_back(timeout=60)
    path = history.dump(tmp_path_factory.mktemp("history") / "history.json")
    return history, final, readback, path


def statuses(cluster: EtcdCluster) -> dict[str, dict]:
    """What each running member says of itself (etcd's JSON gateway, no client needed)."""
    found = {}
    for name, node in cluster.nodes.items():
        if not node.running():
            continue
        try:
            found[name] = gateway(node.client_url, "/v3/maintenance/status", {})
        except OSError:
            continue
    return found


def leader_of(cluster: EtcdCluster) -> str | None:
    for name, status in statuses(cluster).items():
        if status["header"]["member_id"] == status.get("leader"):
            return name
    return None


def until_a_leader_other_than(cluster: EtcdCluster, name: str) -> str:
    """The clients talk to `name` alone: killing it as the leader would leave them no member
    to talk to (an election after its restart on a busy machine can make it the leader), so
    leadership is handed to another member first."""
    leader = None

    def found() -> bool:
        nonlocal leader
        leader = leader_of(cluster)
        if leader != name:
            return leader is not None
        others = {n: s for n, s in statuses(cluster).items() if n != name}
        if others:
            target = others[min(others)]["header"]["member_id"]
            # Refused during an election: asked again on the next look.
            with contextlib.suppress(OSError):
                gateway(
                    cluster.nodes[name].client_url,
                    "/v3/maintenance/transfer-leadership",
                    {"targetID": target},
                )
        return False

    until(f"a leader other than {name}", found)
    return leader


def test_history_under_member_kills_is_linearizable(recorded):
    history, final, readback, path = recorded
    counts = history.counts()
    assert counts["ok"] > 150
    assert counts["failed"] + counts["indeterminate"] > 0, "the kills had no effect on clients"
    assert {op for op, c in counts["by_op"].items() if c["ok"]} == {"get", "put", "cas"}
    assert sum(counts["served_by"].values()) == counts["ok"]  # every answer names its member
    assert final["unread"] == [] and final["keys"] == 4
    assert readback["lost"] == [] and readback["unverified"] == []
    assert readback["verified"] == readback["acknowledged"] > 50
    verdict = check(path, timeout_s=120)
    assert verdict["result"] == "linearizable", verdict
    assert verdict["checked"] + verdict["ignored"] + verdict["unobserved"] == counts["total"]


def test_tampered_history_is_not_linearizable(recorded, tmp_path):
    *_, path = recorded
    document = json.loads(path.read_text())
    # One read now returns a value that was never written to its key.
    read = next(
        r
        for r in document["operations"]
        if r["op"] == "get" and r["outcome"] == "ok" and r["result"]["found"]
    )
    read["result"]["value"] = "never-written"
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(document))
    verdict = check(tampered, html=tmp_path / "tampered.html", timeout_s=120)
    assert verdict["result"] == "not-linearizable"
    assert [k["key"] for k in verdict["illegal_keys"]] == [read["key"]]
    assert (tmp_path / "tampered.html").stat().st_size > 1000


def test_a_lost_write_is_found(etcd, recorded):
    write = recorded[0].acknowledged_writes()[0]
    # A real acknowledged write, and one claimed at the same revision that etcd never made:
    # the read-back must find the first and miss the second.
    history = History()
    for value in (write["value"], "forged"):
        record = history.begin(0, "put", write["key"], value=value)
        history.finish(record, "ok", revision=write["revision"])
    readback = Workload(etcd.nodes["n0"].client_url, history).read_back(timeout=30)
    assert readback["acknowledged"] == 2 and readback["verified"] == 1
    assert [w["value"] for w in readback["lost"]] == ["forged"]
    assert readback["lost"][0]["found_at_revision"]["value"] == write["value"]


def gateway(url: str, path: str, body: dict) -> dict:
    """One call of etcd's JSON gateway (keys and values base64)."""
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - loopback
        return json.loads(response.read())


def test_writes_are_read_back_once_and_a_compacted_one_is_told_apart(tmp_path):
    """The soak reads back every round's writes before the next NOSPACE compacts them; a write
    compacted first is neither verified nor lost (reading at its revision is refused)."""
    single = EtcdCluster(etcd_binary("3.6.16"), "3.6.16", tmp_path).start(1)
    try:
        url = single.nodes["n0"].client_url
        history = History()
        workload = Workload(url, history)

        def put(value: str) -> int:
            body = {"key": "/k", "value": value}
            encoded = {k: base64.b64encode(v.encode()).decode() for k, v in body.items()}
            revision = int(gateway(url, "/v3/kv/put", encoded)["header"]["revision"])
            record = history.begin(0, "put", "/k", value=value)
            history.finish(record, "ok", revision=revision)
            return revision

        put("first")
        first = workload.read_back(timeout=10)
        assert (first["acknowledged"], first["verified"], first["compacted"]) == (1, 1, [])
        put("second")
        third = put("third")
        gateway(url, "/v3/kv/compaction", {"revision": str(third), "physical": True})
        after = workload.read_back(timeout=10)
        assert after["acknowledged"] == 3 and after["verified"] == 2
        assert [w["value"] for w in after["compacted"]] == ["second"]
        assert after["lost"] == [] and after["unverified"] == []
    finally:
        single.teardown()
