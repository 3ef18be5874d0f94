# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""What the EtcdCluster planner's rules read and what they return (qk_plan orders the rules).

A rule reads one ``PlanContext`` (an observation, read-only) and returns a ``Step`` or None.
Every step is made by ``make_step``, which refuses an action that is not in ``STEP_ACTIONS`` or
a field that ``Step`` does not declare: the role includes ``<action>.yml`` for every action but
``wait`` and ``none``, so an undeclared action would be a task file that does not exist.
"""

# No ``from __future__ import annotations`` here: TypedDict reads Required[...] only from
# evaluated annotations, and Step.__required_keys__ is what check_step relies on.

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Required, Self, TypedDict

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    data_lost,
    member_peer_name,
    ordinal_of,
    peer_name,
)

# Every action the planner can return, and what it does. The role takes a step by including
# roles/etcdcluster/tasks/<action>.yml; the NON_STEP_ACTIONS have no task file.
STEP_ACTIONS = MappingProxyType(
    {
        "repair_members": "recreate the ReplicaSets of members whose ReplicaSet is gone",
        "update_peers": "point the peers of a cluster that never formed at the corrected image",
        "bootstrap": "create the missing initial peers with the static initial cluster",
        "hand_over_members": "delete data-less peers so that an in-place EtcdRestore restores",
        "force_new_cluster": "restart the surviving member with --force-new-cluster",
        "finish_force_new_cluster": "restart the survivor without --force-new-cluster",
        "restore_from_backup": "create the in-place EtcdRestore of the newest verified backup",
        "upgrade_member": "restart one member on another version (rolling upgrade)",
        "restart_member": "restart one member with the cluster's options and pod template",
        "create_peer": "create the EtcdPeer of a member etcd has but no peer stands for",
        "replace_member": "remove a member whose data is gone, and its peer, to re-add it",
        "promote": "promote a learner that has caught up to a voting member",
        "add_member": "add the lowest free ordinals as learners, one at a time, each started and "
        "promoted before the next",
        "remove_member": "remove a member moved to a new volume, else the highest ordinals one "
        "at a time (leadership moved first)",
        "defragment": "defragment member by member (NOSPACE: compact first, disarm after)",
        "grow_volumes": "raise the members' claims to the size spec.storage asks for (or, for "
        "NOSPACE, spec.maintenance.spaceRecovery allows)",
        "wait": "nothing can be done safely now; the message says what is waited for",
        "none": "the cluster matches its spec",
    }
)
NON_STEP_ACTIONS = frozenset({"wait", "none"})

# When the next reconcile should come: a named period of the role (etcdcluster_requeue_periods),
# or a countdown of whole seconds ("42s") that the planner computed.
REQUEUE_PERIODS = frozenset({"next", "event", "poll", "degraded", "steady"})
_COUNTDOWN = re.compile(r"^\d+s$")


class Step(TypedDict, total=False):
    """One step, as the role reads it (``etcdcluster_step``)."""

    action: Required[str]  # a key of STEP_ACTIONS
    reason: Required[str]  # the Event and condition reason
    message: Required[str]  # what a person reads
    # next: a following step can be taken at once; event: a watched change will come (a pod
    # becoming ready; the period is only a fallback); poll: something without an event (etcd
    # answering) is checked soon; degraded: waiting for something outside the operator;
    # steady: nothing to do; "<n>s": a countdown.
    requeue: Required[str]
    # False: the step's result shows only later (pods starting), observing right after it
    # would only cost time.
    observe_after: bool
    # Members whose pod the observation after the step waits to be ready for (a few seconds):
    # when the step finishes a change, reporting it done in this reconcile rather than the
    # next one that the pod's readiness would wake.
    wait_ready: list[str]
    peer: str  # the member the step is about
    member: dict | None  # its entry in etcd's member list (None: etcd no longer lists it)
    version: str  # the version it starts with
    repository: str
    from_version: str  # upgrade_member: the version it ran
    move_leader_to: (
        str  # upgrade_member, restart_member: leadership moves there first ("" for none)
    )
    config: dict  # restart_member: the peer_config it restarts with (qk_options)
    # restart_member: the member's peer URLs in the scheme of that configuration, when peer TLS
    # is turned on or off (etcd's MemberUpdate, just before its pod is replaced)
    peer_urls: list[str]
    voters_after: int  # add_member
    # add_member: "http" when the new member must serve its peers plain HTTP while peer TLS is
    # turned on (qk_plan_config.new_member_peer_scheme)
    peer_scheme: str
    # repair_members, defragment, grow_volumes: [{name}]; remove_member, replace_member:
    # [{name, id}], every member the step removes, in turn (peer and member are the first; id
    # None for a member etcd no longer lists)
    members: list[dict]
    # defragment: compact, disarm (bools), reason (NOSPACE, Requested, Scheduled, Threshold),
    # request (the annotation's value a Requested one answers)
    maintenance: dict
    # grow_volumes, restart_member for NOSPACE (spec.maintenance.spaceRecovery): what the
    # step records in status.maintenance.spaceRecovery (volumeSize, grownFrom;
    # quotaBackendBytes, raisedFrom)
    space_recovery: dict
    # hand_over_members; add_member: every member a scale-up adds, in turn (peer is the first)
    peers: list[str]
    peers_to_create: list[str]  # bootstrap
    peers_to_update: list[str]  # update_peers
    initial_cluster: list[str]  # bootstrap, update_peers
    quorum_lost: dict  # without a quorum: data_lost, down, survivors, backup, unrecoverable
    recovery: dict  # disaster recovery: source, member, backup, restore, time
    backup: str  # restore_from_backup
    restore: str  # restore_from_backup: the EtcdRestore's name
    upgrade: dict  # waiting on an upgraded member: member, target


def check_step(step: Mapping) -> None:
    """Raise ValueError when ``step`` is not a Step of a declared action."""
    missing = Step.__required_keys__ - set(step)
    undeclared = set(step) - Step.__required_keys__ - Step.__optional_keys__
    if missing or undeclared:
        raise ValueError(
            f"step {dict(step)!r}: missing {sorted(missing)}, undeclared {sorted(undeclared)}"
        )
    if step["action"] not in STEP_ACTIONS:
        raise ValueError(f"step action {step['action']!r} is not in STEP_ACTIONS")
    requeue = str(step["requeue"])
    if requeue not in REQUEUE_PERIODS and not _COUNTDOWN.match(requeue):
        raise ValueError(f"step requeue {requeue!r} is neither a period nor a countdown")


def make_step(action: str, reason: str, message: str, requeue: str = "next", **details) -> Step:
    step = {"action": action, "reason": reason, "message": message, "requeue": requeue, **details}
    check_step(step)
    return step


@dataclass(frozen=True)
class PlanContext:
    """One observation as the rules read it: etcd_cluster_observe's result with the role's
    context (cluster, replicas, version, repository, settings, ``current`` status, ``now``).

    Built from a private copy: no rule can change what the role passed, and a step shares
    nothing with it.
    """

    observed: dict
    cluster: str
    replicas: int
    peers: dict  # every EtcdPeer by name, those being deleted too
    live_peers: dict  # the EtcdPeers not being deleted
    pvcs: dict
    pods: dict
    replicasets: dict
    etcd: dict  # etcd's answer: reachable, healthy, members, quorum, cluster_version, alarms
    members: list  # etcd's member list; empty when no member answers
    by_peer: dict  # the members by the name of their EtcdPeer (member_peer_name)
    voters: list
    learners: list

    @classmethod
    def from_observed(cls, observed: Mapping) -> Self:
        observed = copy.deepcopy(dict(observed))
        cluster = observed["cluster"]
        etcd = observed.get("etcd") or {}
        members = (etcd.get("members") or []) if etcd.get("reachable") else []
        peers = {p["name"]: p for p in observed.get("peers") or []}
        return cls(
            observed=observed,
            cluster=cluster,
            replicas=int(observed["replicas"]),
            peers=peers,
            live_peers={n: p for n, p in peers.items() if not p.get("deleting")},
            pvcs=observed.get("pvcs") or {},
            pods=observed.get("pods") or {},
            replicasets=observed.get("replicasets") or {},
            etcd=etcd,
            members=members,
            by_peer={member_peer_name(m, cluster): m for m in members},
            voters=[m for m in members if not m.get("is_learner")],
            learners=[m for m in members if m.get("is_learner")],
        )

    @property
    def reachable(self) -> bool:
        """Whether an etcd member answered."""
        return bool(self.etcd.get("reachable"))

    @property
    def has_quorum(self) -> bool:
        """Whether etcd answered with a healthy quorum: membership can change."""
        return self.reachable and bool(self.etcd.get("healthy"))

    def lost_data(self, name: str) -> bool:
        """Whether the member ``name`` lost the data it ran on (qk_domain.data_lost)."""
        return data_lost((self.peers.get(name) or {}).get("pvc_uid"), self.pvcs.get(name))

    def live_peers_by_ordinal(self) -> list[tuple[str, dict]]:
        return sorted(self.live_peers.items(), key=lambda item: ordinal_of(item[0]))

    def free_peer_name(self) -> str:
        """The name of a new member: the lowest ordinal no peer or etcd member has."""
        return self.free_peer_names(1)[0]

    def free_peer_names(self, count: int) -> list[str]:
        """The names of ``count`` new members: the lowest ordinals no peer or etcd member has."""
        taken = {ordinal_of(n) for n in list(self.peers) + list(self.by_peer)}
        free = (i for i in range(len(taken) + count) if i not in taken)
        return [peer_name(self.cluster, next(free)) for _ in range(count)]


Rule = Callable[[PlanContext], Step | None]
