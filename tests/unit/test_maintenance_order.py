"""The order and the safety rules of a defragmentation (qk_maintenance.reclaim_space, the core
of the etcd_defragment module), against an etcd client faked in memory: learners and followers
first by ordinal, the leader last and only after its leadership moved to a healthy voter
(a member already defragmented first, never a learner); only the members named; nothing
without every member healthy; and a run that fails part-way stops there and says what it had
done, where it stopped and what it did not get to."""

from __future__ import annotations

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_maintenance import (
    MaintenanceFailed,
    MaintenanceRefused,
    _new_leader,
    defragment_order,
    describe,
    describe_failure,
    reclaim_space,
    status_of,
)

MIB = 1 << 20


def url(name):
    return f"http://{name}.etcd.ns.svc:2379"


class FakeEtcd:
    """What reclaim_space asks of qk_etcd.EtcdClient, over members held in memory: who leads,
    each database's size, and every call in order (``calls``). Like etcd, it refuses to move
    leadership unless asked through the leader, or to a learner. ``defragmenting`` maps a
    member's name to a function called during its defragmentation (to raise, or to change who
    leads); ``silent_after`` names members that do not answer once defragmented."""

    def __init__(self, names, leader, learners=(), unhealthy=(), raft_index=None):
        self.members = {
            name: {
                "name": name,
                "id": f"{i + 1:x}a",
                "client_urls": [url(name)],
                "is_learner": name in learners,
                "healthy": name not in unhealthy,
                "raft_index": (raft_index or {}).get(name, 100),
                "db_size": 64 * MIB,
                "db_size_in_use": 8 * MIB,
            }
            for i, name in enumerate(names)
        }
        self.leader = leader
        self.calls = []
        self.defragmenting = {}
        self.silent_after = set()
        self.compact_answer = True
        self.active_alarms = []
        self.defragmented = set()

    def _by_id(self, member_id):
        return next(m for m in self.members.values() if m["id"] == member_id)

    def cluster_info(self):
        self.calls.append(("cluster_info",))
        members = [
            {**m, "is_leader": m["name"] == self.leader and m["healthy"]}
            for m in self.members.values()
        ]
        voters = [m for m in members if not m["is_learner"]]
        healthy_voters = [m for m in voters if m["healthy"]]
        leader = self.members.get(self.leader)
        return {
            "members": members,
            "leader": {"id": leader["id"], "name": leader["name"]} if leader else None,
            "healthy": bool(leader) and len(healthy_voters) > len(voters) // 2,
        }

    def statuses(self, members):
        answers = []
        for asked in members:
            m = self._by_id(asked["id"])
            self.calls.append(("status", m["name"]))
            if not m["healthy"] or m["name"] in self.silent_after & self.defragmented:
                answers.append((None, [f"{url(m['name'])}: context deadline exceeded"]))
                continue
            leader = self.members.get(self.leader)
            answers.append(
                (
                    {
                        "endpoint": url(m["name"]),
                        "id": m["id"],
                        "leader": leader["id"] if leader else None,
                        "db_size": m["db_size"],
                        "db_size_in_use": m["db_size_in_use"],
                    },
                    [],
                )
            )
        return answers

    def revision(self, endpoint):
        self.calls.append(("revision", endpoint))
        return 4242

    def compact(self, revision):
        self.calls.append(("compact", revision))
        return self.compact_answer

    def move_leader(self, leader_endpoints, target_id):
        target = self._by_id(target_id)
        self.calls.append(("move_leader", target["name"]))
        if url(self.leader) not in leader_endpoints:
            raise RuntimeError("etcdserver: not leader")
        if target["is_learner"]:
            raise RuntimeError("etcdserver: bad leader transferee")
        self.leader = target["name"]

    def defragment(self, endpoint, timeout):
        name = next(n for n in self.members if url(n) == endpoint)
        # Who led while this member was busy: the rule is never itself.
        self.calls.append(("defragment", name, self.leader, timeout))
        if name in self.defragmenting:
            self.defragmenting[name](self)
        m = self.members[name]
        m["db_size"] = m["db_size_in_use"]
        self.defragmented.add(name)

    def alarms(self):
        self.calls.append(("alarms",))
        return list(self.active_alarms)

    def alarm_disarm(self, member_id, alarm):
        self.calls.append(("alarm_disarm", self._by_id(member_id)["name"], alarm))

    # -- what the tests look at -----------------------------------------------------------------
    def defragmented_in_order(self):
        return [c[1] for c in self.calls if c[0] == "defragment"]

    def kinds(self):
        return [c[0] for c in self.calls]


def names_of(result):
    return [m["name"] for m in result["members"]]


def assert_never_defragmented_while_leading(etcd):
    for call in etcd.calls:
        if call[0] == "defragment":
            assert call[1] != call[2], f"{call[1]} defragmented while it led"


# -- the order -----------------------------------------------------------------------------------


def test_followers_by_ordinal_first_the_leader_last():
    names = ["etcd-10", "etcd-2", "etcd-0", "etcd-1", "etcd-9"]
    etcd = FakeEtcd(names, leader="etcd-1")
    result = reclaim_space(etcd, compact=False)
    # By the ordinal's number (etcd-10 after etcd-9), not as text or in etcd's member order.
    assert names_of(result) == ["etcd-0", "etcd-2", "etcd-9", "etcd-10", "etcd-1"]
    assert etcd.defragmented_in_order() == names_of(result)


def test_the_order_is_stable_whatever_the_order_members_are_listed_in():
    members = [
        {"id": "1", "name": "etcd-2"},
        {"id": "2", "name": "etcd-0", "is_leader": True},
        {"id": "3", "name": "etcd-3", "is_learner": True},
        {"id": "4", "name": "etcd-1"},
    ]
    expected = ["etcd-3", "etcd-1", "etcd-2", "etcd-0"]
    assert [m["name"] for m in defragment_order(members)] == expected
    assert [m["name"] for m in defragment_order(members[::-1])] == expected
    assert [m["name"] for m in defragment_order(members[1:] + members[:1])] == expected


def test_learners_before_the_followers():
    etcd = FakeEtcd(["etcd-0", "etcd-1", "etcd-2", "etcd-3"], leader="etcd-0", learners={"etcd-3"})
    result = reclaim_space(etcd, compact=False)
    assert names_of(result) == ["etcd-3", "etcd-1", "etcd-2", "etcd-0"]


# -- leadership ----------------------------------------------------------------------------------


def test_leadership_moves_to_the_first_member_defragmented_before_the_leader_is():
    etcd = FakeEtcd(["etcd-0", "etcd-1", "etcd-2"], leader="etcd-0")
    result = reclaim_space(etcd, compact=False)
    assert names_of(result) == ["etcd-1", "etcd-2", "etcd-0"]
    assert result["leader_moved_to"] == "etcd-1"
    assert etcd.leader == "etcd-1"
    moved = etcd.calls.index(("move_leader", "etcd-1"))
    last = [c[:2] for c in etcd.calls].index(("defragment", "etcd-0"))
    assert moved < last, "leadership moved away before the leader's defragmentation"
    assert_never_defragmented_while_leading(etcd)


def test_leadership_never_moves_to_a_learner():
    # The learner is defragmented first, so it is the first member done: the new leader is the
    # first *voter* done.
    etcd = FakeEtcd(["etcd-0", "etcd-1", "etcd-2", "etcd-3"], leader="etcd-0", learners={"etcd-3"})
    result = reclaim_space(etcd, compact=False)
    assert names_of(result)[0] == "etcd-3"
    assert result["leader_moved_to"] == "etcd-1"
    assert ("move_leader", "etcd-3") not in etcd.calls
    assert_never_defragmented_while_leading(etcd)


def test_leader_alone_named_hands_over_to_the_healthy_voter_furthest_along():
    # Nobody defragmented before it: the voter with the highest raft index, never the learner
    # (further along still) nor a member that does not answer.
    etcd = FakeEtcd(
        ["etcd-0", "etcd-1", "etcd-2", "etcd-3"],
        leader="etcd-0",
        learners={"etcd-3"},
        raft_index={"etcd-1": 90, "etcd-2": 120, "etcd-3": 500},
    )
    result = reclaim_space(etcd, compact=False, names=["etcd-0"])
    assert names_of(result) == ["etcd-0"]
    assert result["leader_moved_to"] == "etcd-2"
    assert etcd.defragmented_in_order() == ["etcd-0"]
    assert_never_defragmented_while_leading(etcd)


def test_new_leader_choice():
    def m(i, **kw):
        return {"id": str(i), "name": f"etcd-{i}", "healthy": True, "raft_index": 10, **kw}

    leader = m(0)
    members = [leader, m(1, raft_index=5), m(2, raft_index=7), m(3, is_learner=True, raft_index=9)]
    # A voter already defragmented first, the earliest one; never a learner, never the leader.
    assert _new_leader(leader, [members[3], members[2], members[1]], members)["name"] == "etcd-2"
    assert _new_leader(leader, [leader, members[1]], members)["name"] == "etcd-1"
    # Else the healthy voter furthest along the log.
    assert _new_leader(leader, [], members)["name"] == "etcd-2"
    assert _new_leader(leader, [members[3]], members)["name"] == "etcd-2"
    unhealthy = [leader, m(1, raft_index=5), m(2, raft_index=7, healthy=False)]
    assert _new_leader(leader, [], unhealthy)["name"] == "etcd-1"
    # Alone (or with learners only): nobody to hand over to.
    assert _new_leader(leader, [], [leader]) is None
    assert _new_leader(leader, [], [leader, m(3, is_learner=True)]) is None
    # Other voters, none healthy: never defragment the leader without handing over.
    with pytest.raises(RuntimeError, match="no other voting member is healthy"):
        _new_leader(leader, [], [leader, m(1, healthy=False)])


def test_a_single_member_is_defragmented_without_moving_leadership():
    etcd = FakeEtcd(["etcd-0"], leader="etcd-0")
    result = reclaim_space(etcd, compact=False)
    assert names_of(result) == ["etcd-0"]
    assert result["leader_moved_to"] is None
    assert "move_leader" not in etcd.kinds()


def test_a_member_that_became_leader_during_the_run_hands_over_first():
    # While etcd-1 is defragmented, etcd-2 (not done yet) wins an election: at its turn it is
    # the leader, and the leader of the start (etcd-0) is not any more.
    etcd = FakeEtcd(["etcd-0", "etcd-1", "etcd-2"], leader="etcd-0")
    etcd.defragmenting["etcd-1"] = lambda e: setattr(e, "leader", "etcd-2")
    result = reclaim_space(etcd, compact=False)
    assert names_of(result) == ["etcd-1", "etcd-2", "etcd-0"]
    assert [c for c in etcd.calls if c[0] == "move_leader"] == [("move_leader", "etcd-1")]
    assert result["leader_moved_to"] == "etcd-1"
    assert_never_defragmented_while_leading(etcd)


# -- which members, and when not at all ----------------------------------------------------------


def test_only_the_members_named():
    etcd = FakeEtcd(["etcd-0", "etcd-1", "etcd-2"], leader="etcd-0")
    result = reclaim_space(etcd, compact=False, names=["etcd-2", "etcd-1"])
    assert names_of(result) == ["etcd-1", "etcd-2"]
    assert etcd.defragmented_in_order() == ["etcd-1", "etcd-2"]
    # The leader is not named: it keeps its leadership.
    assert result["leader_moved_to"] is None and "move_leader" not in etcd.kinds()


def test_an_unknown_member_named_refuses_before_anything():
    etcd = FakeEtcd(["etcd-0", "etcd-1", "etcd-2"], leader="etcd-0")
    with pytest.raises(MaintenanceRefused, match="no such members: etcd-7"):
        reclaim_space(etcd, names=["etcd-1", "etcd-7"])
    assert etcd.kinds() == ["cluster_info"]


@pytest.mark.parametrize(
    ("unhealthy", "why"),
    [
        ({"etcd-2"}, "members not healthy: etcd-2"),
        ({"etcd-3"}, "members not healthy: etcd-3"),  # a learner counts too
        ({"etcd-1", "etcd-2"}, "no healthy quorum"),
    ],
)
def test_refused_unless_every_member_is_healthy(unhealthy, why):
    etcd = FakeEtcd(
        ["etcd-0", "etcd-1", "etcd-2", "etcd-3"],
        leader="etcd-0",
        learners={"etcd-3"},
        unhealthy=unhealthy,
    )
    with pytest.raises(MaintenanceRefused, match=why):
        reclaim_space(etcd, disarm=True)
    assert etcd.kinds() == ["cluster_info"], "nothing compacted, defragmented or disarmed"


def test_check_mode_says_the_order_and_does_nothing():
    etcd = FakeEtcd(["etcd-0", "etcd-1", "etcd-2"], leader="etcd-1")
    result = reclaim_space(etcd, disarm=True, check=True)
    assert result["members"] == [
        {"name": "etcd-0", "id": "1a"},
        {"name": "etcd-2", "id": "3a"},
        {"name": "etcd-1", "id": "2a"},
    ]
    assert result["compacted_revision"] is None and result["leader_moved_to"] is None
    assert etcd.kinds() == ["cluster_info"]


# -- compaction, sizes, the alarm ----------------------------------------------------------------


def test_compacts_at_the_leaders_revision_first_and_disarms_nospace_last():
    etcd = FakeEtcd(["etcd-0", "etcd-1", "etcd-2"], leader="etcd-2")
    etcd.active_alarms = [
        {"member_id": "1a", "alarm": "NOSPACE"},
        {"member_id": "2a", "alarm": "CORRUPT"},
        {"member_id": "3a", "alarm": "NOSPACE"},
    ]
    result = reclaim_space(etcd, disarm=True, defrag_timeout=7)
    assert etcd.calls[1:3] == [("revision", url("etcd-2")), ("compact", 4242)]
    assert result["compacted_revision"] == 4242
    kinds = etcd.kinds()
    assert kinds.index("compact") < kinds.index("defragment")
    assert max(i for i, k in enumerate(kinds) if k == "defragment") < kinds.index("alarms")
    disarmed = [c for c in etcd.calls if c[0] == "alarm_disarm"]
    assert disarmed == [
        ("alarm_disarm", "etcd-0", "NOSPACE"),
        ("alarm_disarm", "etcd-2", "NOSPACE"),
    ]
    assert result["disarmed"] == ["etcd-0", "etcd-2"]
    assert {c[3] for c in etcd.calls if c[0] == "defragment"} == {7}, "its own timeout"
    assert result["members"][0] == {
        "name": "etcd-0",
        "id": "1a",
        "db_size_before": 64 * MIB,
        "db_size_after": 8 * MIB,
        "db_size_in_use": 8 * MIB,
        "seconds": result["members"][0]["seconds"],
    }


def test_no_compaction_nor_disarming_unless_asked():
    etcd = FakeEtcd(["etcd-0", "etcd-1", "etcd-2"], leader="etcd-0")
    etcd.active_alarms = [{"member_id": "1a", "alarm": "NOSPACE"}]
    result = reclaim_space(etcd, compact=False)
    assert not {"revision", "compact", "alarms", "alarm_disarm"} & set(etcd.kinds())
    assert result["compacted_revision"] is None and result["disarmed"] == []


def test_a_history_compacted_already_is_not_reported_as_compacted():
    etcd = FakeEtcd(["etcd-0"], leader="etcd-0")
    etcd.compact_answer = False
    assert reclaim_space(etcd)["compacted_revision"] is None


# -- a run that fails part-way -------------------------------------------------------------------


def test_a_defragmentation_that_fails_stops_and_reports_what_was_done():
    etcd = FakeEtcd(["etcd-0", "etcd-1", "etcd-2", "etcd-3"], leader="etcd-0")

    def timeout(_):
        raise RuntimeError("Defragment via http://etcd-2:2379 failed: deadline exceeded")

    etcd.defragmenting["etcd-2"] = timeout
    with pytest.raises(MaintenanceFailed) as failure:
        reclaim_space(etcd, disarm=True, defrag_timeout=3)
    result = failure.value.result
    assert str(failure.value) == (
        "defragmenting etcd-2 failed: Defragment via http://etcd-2:2379 failed: deadline exceeded"
    )
    # What was done before it, with its sizes; where it stopped, with the error; the rest.
    assert names_of(result) == ["etcd-1"]
    assert result["members"][0]["db_size_before"] == 64 * MIB
    assert result["compacted_revision"] == 4242
    assert result["stopped_at"] == {
        "name": "etcd-2",
        "id": "3a",
        "stage": "defragmenting etcd-2",
        "error": "Defragment via http://etcd-2:2379 failed: deadline exceeded",
    }
    assert result["not_started"] == ["etcd-3", "etcd-0"]
    # Stopped there: the others untouched, the leader kept, nothing disarmed.
    assert etcd.defragmented_in_order() == ["etcd-1", "etcd-2"]
    assert not {"move_leader", "alarms", "alarm_disarm"} & set(etcd.kinds())
    assert result["leader_moved_to"] is None and result["disarmed"] == []
    # As the module says it (its msg, which the converge reports) and records it.
    assert status_of(result) == {
        "compactedRevision": 4242,
        "members": [
            {
                "name": "etcd-1",
                "dbSizeBefore": 64 * MIB,
                "dbSizeAfter": 8 * MIB,
                "seconds": result["members"][0]["seconds"],
            }
        ],
    }
    line = describe_failure(str(failure.value), result)
    assert line.startswith("defragmenting etcd-2 failed: Defragment via http://etcd-2:2379")
    assert "; done before: compacted to revision 4242; defragmented etcd-1 64.0 MiB -> 8.0 MiB" in (
        line
    )
    assert line.endswith("; not started: etcd-3, etcd-0")


def test_a_member_that_does_not_answer_after_its_defragmentation_stops_the_run():
    etcd = FakeEtcd(["etcd-0", "etcd-1", "etcd-2"], leader="etcd-0")
    etcd.silent_after = {"etcd-1"}
    with pytest.raises(MaintenanceFailed) as failure:
        reclaim_space(etcd, compact=False)
    result = failure.value.result
    assert result["members"] == []
    assert result["stopped_at"]["name"] == "etcd-1"
    assert result["stopped_at"]["stage"] == "waiting for etcd-1 to answer after its defragmentation"
    assert "context deadline exceeded" in result["stopped_at"]["error"]
    assert result["not_started"] == ["etcd-2", "etcd-0"]
    assert etcd.defragmented_in_order() == ["etcd-1"]


def test_leadership_that_cannot_be_moved_leaves_the_leader_alone():
    etcd = FakeEtcd(["etcd-0", "etcd-1", "etcd-2"], leader="etcd-0")

    def refuse(leader_endpoints, target_id):
        etcd.calls.append(("move_leader", "refused"))
        raise RuntimeError("etcdserver: request timed out, leader transfer took too long")

    etcd.move_leader = refuse
    with pytest.raises(MaintenanceFailed) as failure:
        reclaim_space(etcd, compact=False)
    result = failure.value.result
    assert names_of(result) == ["etcd-1", "etcd-2"]
    assert result["stopped_at"]["name"] == "etcd-0"
    assert result["stopped_at"]["stage"] == "moving leadership from etcd-0 to etcd-1"
    assert result["not_started"] == []
    assert "etcd-0" not in etcd.defragmented_in_order(), "never while it leads"
    assert result["leader_moved_to"] is None


def test_a_compaction_that_fails_defragments_nothing():
    etcd = FakeEtcd(["etcd-0", "etcd-1", "etcd-2"], leader="etcd-0")

    def fail(revision):
        raise RuntimeError("etcdserver: request timed out")

    etcd.compact = fail
    with pytest.raises(MaintenanceFailed) as failure:
        reclaim_space(etcd)
    result = failure.value.result
    assert result["stopped_at"] == {
        "name": None,
        "id": None,
        "stage": "compacting",
        "error": "etcdserver: request timed out",
    }
    assert result["members"] == [] and result["not_started"] == ["etcd-1", "etcd-2", "etcd-0"]
    assert "defragment" not in etcd.kinds()
    assert describe_failure(str(failure.value), result) == (
        "compacting failed: etcdserver: request timed out; done before: nothing; "
        "not started: etcd-1, etcd-2, etcd-0"
    )


def test_a_disarming_that_fails_keeps_every_member_done():
    etcd = FakeEtcd(["etcd-0", "etcd-1", "etcd-2"], leader="etcd-0")
    etcd.active_alarms = [{"member_id": "1a", "alarm": "NOSPACE"}]

    def fail(member_id, alarm):
        raise RuntimeError("etcdserver: request timed out")

    etcd.alarm_disarm = fail
    with pytest.raises(MaintenanceFailed) as failure:
        reclaim_space(etcd, disarm=True)
    result = failure.value.result
    assert names_of(result) == ["etcd-1", "etcd-2", "etcd-0"]
    assert result["stopped_at"]["name"] is None
    assert result["stopped_at"]["stage"] == "disarming the NOSPACE alarm"
    assert result["not_started"] == []
    assert "not started" not in describe_failure(str(failure.value), result)
    assert describe(result).startswith("compacted to revision 4242; defragmented etcd-1 ")
