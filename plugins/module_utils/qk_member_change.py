# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Quorum-safe etcd membership changes (add a learner, promote, remove, move the leader), as
etcd_member and etcd_member_join make them."""

from __future__ import annotations

import time

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    ERR_LEARNER_NOT_READY,
    ERR_MEMBER_NOT_FOUND,
    ERR_NOT_ENOUGH_STARTED,
    ERR_NOT_LEARNER,
    ERR_PEER_URL_EXISTS,
    ERR_TOO_MANY_LEARNERS,
    EtcdOperationError,
    EtcdUnreachable,
    is_transient_cluster_error,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_members import (
    describe_member,
    find_member,
    initial_cluster,
    pick_new_leader,
    preferred_endpoints,
    public_member,
    removal_check,
    wait_for_leader_change,
)

TRANSIENT_RETRY_SECONDS = 10.0


class Runner:
    """One membership change (``params['state']``: present, promoted, absent, leader) of the
    member ``params`` names, through ``client``; failures end the module with fail_json."""

    def __init__(self, module, client, params=None):
        self.module = module
        self.client = client
        self.p = params or module.params
        self.result = {"changed": False, "actions": []}
        # IDs of the members this module run promoted: see require_quorum.
        self.promoted_here = set()

    def label(self):
        return self.p["name"] or self.p["id"] or ",".join(self.p["peer_urls"])

    def fail(self, msg, **extra):
        out = dict(self.result)
        out.update(extra)
        self.module.fail_json(msg=msg, **out)

    def info(self):
        try:
            return self.client.cluster_info(joining=self.promoted_here)
        except EtcdUnreachable as exc:
            self.fail(f"cannot reach etcd: {exc}")

    def require_quorum(self, info, what):
        """End the module unless the cluster has a leader and a quorum of healthy voting
        members. A member this run promoted a moment ago counts as healthy while it does not
        serve clients yet: etcd promoted it because it had caught up with the leader, and a
        member that joined through a snapshot (any cluster whose raft log was compacted, and
        every one after a disaster recovery) serves clients only once its own publication
        through raft has timed out and been retried, 7 s after it started. Adding and
        promoting the next caught-up member keeps whatever quorum the cluster has: the leader
        that answers is the proof that it has one."""
        publishing = [
            m
            for m in info["members"]
            if m["id"] in self.promoted_here and not m["is_learner"] and not m["healthy"]
        ]
        q = info["quorum"]
        if not info["healthy"] and not (
            publishing and info["leader"] and q["healthy_voting"] + len(publishing) >= q["required"]
        ):
            self.fail(
                f"cannot {what}: the cluster has no quorum or no leader "
                f"({q['healthy_voting']} healthy voting members of {q['voting']}, "
                f"quorum needs {q['required']}); membership changes need a healthy cluster"
            )

    def retrying(self, fn):
        """Call ``fn`` and retry while etcd reports a transient cluster condition.

        etcd's strict reconfiguration check refuses membership changes ("unhealthy cluster")
        until the leader has been connected to every voter for 5 seconds, e.g. right after a
        member (re)started. Retries for max(wait_timeout, 10) seconds.
        """
        deadline = time.monotonic() + max(self.p["wait_timeout"], TRANSIENT_RETRY_SECONDS)
        while True:
            try:
                return fn()
            except EtcdOperationError as exc:
                if not is_transient_cluster_error(exc.details) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.25)

    def explain(self, exc):
        text = str(exc)
        if ERR_NOT_ENOUGH_STARTED in text:
            text += (
                " (etcd's strict reconfiguration check: too few voting members are started for"
                " the change to keep quorum; bring the down members back or remove them first)"
            )
        elif is_transient_cluster_error(text):
            text += (
                " (etcd needs the leader connected to every voting member for 5s before a"
                " membership change; is a voting member down? remove it or bring it back first)"
            )
        return text

    def find(self, members):
        return find_member(
            members,
            name=self.p["name"],
            peer_urls=self.p["peer_urls"],
            member_id=self.p["id"],
        )

    # -- present ------------------------------------------------------------------------------
    def present(self):
        if not self.p["name"] or not self.p["peer_urls"]:
            self.fail("state=present needs both name and peer_urls")
        info = self.info()
        members = info["members"]
        target = self.find(members)
        name = self.p["name"]
        if target is not None:
            if target["name"] and target["name"] != name:
                self.module.warn(
                    f"peer URLs {self.p['peer_urls']} belong to {describe_member(target)}, "
                    f"not {name}; nothing changed"
                )
            elif set(target["peer_urls"]) != set(self.p["peer_urls"]):
                if self.p["update_peer_urls"]:
                    target, members = self.update_peer_urls(info, target)
                else:
                    self.module.warn(
                        f"{describe_member(target)} has peer URLs {target['peer_urls']}, not "
                        f"{self.p['peer_urls']}; set update_peer_urls to change them"
                    )
            self.result["member"] = public_member(target)
            self.result["initial_cluster"] = initial_cluster(
                members, target["id"], target["name"] or name
            )
            return
        kind = "learner" if self.p["learner"] else "voting member"
        self.result["actions"].append(f"add {name} ({', '.join(self.p['peer_urls'])}) as {kind}")
        self.result["changed"] = True
        learners = [m for m in members if m["is_learner"]]
        if self.module.check_mode:
            planned = {
                "id": None,
                "name": name,
                "peer_urls": list(self.p["peer_urls"]),
                "is_learner": self.p["learner"],
            }
            self.result["member"] = planned
            self.result["initial_cluster"] = initial_cluster(members + [planned], None, name)
            if self.p["learner"] and learners:
                self.module.warn(
                    "the cluster already has a learner ("
                    + ", ".join(describe_member(m) for m in learners)
                    + "); etcd will most likely refuse a second one"
                )
            return
        self.require_quorum(info, f"add {name}")
        endpoints = preferred_endpoints(self.client, members)
        try:
            member, members_after = self.retrying(
                lambda: self.client.member_add(
                    self.p["peer_urls"], self.p["learner"], endpoints=endpoints
                )
            )
        except EtcdOperationError as exc:
            if ERR_TOO_MANY_LEARNERS in exc.details:
                self.result["changed"] = False
                self.fail(
                    f"cannot add {name} as a learner: the cluster already has a learner ("
                    + ", ".join(describe_member(m) for m in learners)
                    + "); etcd allows only one learner at a time: promote or remove it first"
                    + f" [{exc.details}]"
                )
            if ERR_PEER_URL_EXISTS in exc.details:
                # Raced with another writer (or a retried call): report the existing member.
                again = self.client.member_list()[0]
                target = self.find(again)
                if target is not None:
                    self.result["changed"] = False
                    self.result["actions"] = []
                    self.result["member"] = public_member(target)
                    self.result["initial_cluster"] = initial_cluster(again, target["id"], name)
                    return
            self.result["changed"] = False
            self.fail(f"could not add {name}: {self.explain(exc)}")
        except EtcdUnreachable as exc:
            self.result["changed"] = False
            self.fail(f"could not add {name}: {exc}")
        self.result["member"] = public_member(dict(member, name=name))
        self.result["initial_cluster"] = initial_cluster(members_after, member["id"], name)

    def update_peer_urls(self, info, target):
        """MemberUpdate of ``target`` to I(peer_urls): (the member, the member list) after it."""
        label = describe_member(target)
        urls = list(self.p["peer_urls"])
        self.result["actions"].append(f"update the peer URLs of {label} to {', '.join(urls)}")
        self.result["changed"] = True
        updated = dict(target, peer_urls=urls)
        members = [updated if m["id"] == target["id"] else m for m in info["members"]]
        if self.module.check_mode:
            return updated, members
        self.require_quorum(info, f"update the peer URLs of {label}")
        endpoints = preferred_endpoints(self.client, info["members"])
        try:
            members = self.retrying(
                lambda: self.client.member_update(target["id"], urls, endpoints=endpoints)
            )
        except (EtcdOperationError, EtcdUnreachable) as exc:
            self.result["changed"] = False
            self.fail(f"could not update the peer URLs of {label}: {self.explain(exc)}")
        return next((m for m in members if m["id"] == target["id"]), updated), members

    # -- promoted -----------------------------------------------------------------------------
    def promoted(self):
        info = self.info()
        target = self.find(info["members"])
        if target is None:
            self.fail(
                f"cannot promote {self.label()}: no such member; add it with state=present"
                " (a member that has not started yet has no name in etcd: pass peer_urls or id)"
            )
        self.result["member"] = public_member(target)
        if not target["is_learner"]:
            return
        label = describe_member(target)
        self.result["actions"].append(f"promote {label} to a voting member")
        self.result["changed"] = True
        if self.module.check_mode:
            return
        self.require_quorum(info, f"promote {label}")
        endpoints = preferred_endpoints(self.client, info["members"])
        deadline = time.monotonic() + max(self.p["wait_timeout"], 0)
        attempts = 0
        while True:
            attempts += 1
            try:
                members = self.retrying(
                    lambda: self.client.member_promote(target["id"], endpoints=endpoints)
                )
                break
            except EtcdOperationError as exc:
                if ERR_NOT_LEARNER in exc.details and ERR_LEARNER_NOT_READY not in exc.details:
                    # promoted concurrently
                    self.result["changed"] = False
                    self.result["actions"] = []
                    self.result["member"]["is_learner"] = False
                    return
                if ERR_LEARNER_NOT_READY not in exc.details:
                    self.result["changed"] = False
                    self.fail(f"could not promote {label}: {self.explain(exc)}")
                if time.monotonic() >= deadline:
                    self.result["changed"] = False
                    self.fail(self.not_caught_up_message(target, attempts))
                time.sleep(min(0.2, max(deadline - time.monotonic(), 0.05)))
            except EtcdUnreachable as exc:
                self.result["changed"] = False
                self.fail(f"could not promote {label}: {exc}")
        after = find_member(members, member_id=target["id"])
        self.result["member"] = public_member(after or dict(target, is_learner=False))

    def not_caught_up_message(self, target, attempts):
        label = describe_member(target)
        detail = "raft index unknown"
        try:
            info = self.client.cluster_info()
            now = find_member(info["members"], member_id=target["id"]) or target
            leader = next((m for m in info["members"] if m.get("is_leader")), None)
            mine = now.get("raft_index")
            theirs = leader.get("raft_index") if leader else None
            mine_text = (
                str(mine)
                if mine is not None
                else "unknown (" + "; ".join(now.get("errors") or ["no status"]) + ")"
            )
            detail = f"learner raft index {mine_text} vs leader's {theirs}"
        except EtcdUnreachable:
            pass
        return (
            f"cannot promote {label}: the learner has not caught up with the leader after "
            f"{self.p['wait_timeout']:g}s ({attempts} attempts); {detail}. Is the learner "
            "process running and able to reach its peers? Retry later or raise wait_timeout."
        )

    # -- absent -------------------------------------------------------------------------------
    def absent(self):
        info = self.info()
        members = info["members"]
        target = self.find(members)
        if target is None:
            return
        label = describe_member(target)
        self.result["member"] = public_member(target)
        ok, why = removal_check(members, target["id"])
        if not ok:
            self.fail(why)
        new_leader = None
        if target.get("is_leader") and self.p["move_leader"] and not target["is_learner"]:
            new_leader = pick_new_leader(members, target["id"])
            if new_leader is None:
                self.fail(
                    f"refusing to remove {label}: it leads and no healthy voter can take over"
                )
            self.result["actions"].append(
                f"move leadership from {label} to {describe_member(new_leader)}"
            )
        self.result["actions"].append(f"remove {label}")
        self.result["changed"] = True
        if self.module.check_mode:
            return
        if new_leader is not None:
            members = self.transfer_leadership(target, new_leader)
            ok, why = removal_check(members, target["id"])
            if not ok:
                self.result["changed"] = True  # leadership did move
                self.fail(why)
        endpoints = preferred_endpoints(self.client, members, exclude_id=target["id"])
        if not endpoints:
            self.fail(f"cannot remove {label}: no other member's endpoint to send the request to")
        try:
            self.retrying(lambda: self.client.member_remove(target["id"], endpoints=endpoints))
        except EtcdOperationError as exc:
            if ERR_MEMBER_NOT_FOUND in exc.details:
                self.result["actions"] = [a for a in self.result["actions"] if "remove" not in a]
                self.result["changed"] = new_leader is not None
                return
            self.result["changed"] = new_leader is not None
            self.fail(f"could not remove {label}: {self.explain(exc)}")
        except EtcdUnreachable as exc:
            self.result["changed"] = new_leader is not None
            self.fail(f"could not remove {label}: {exc}")

    # -- leader -------------------------------------------------------------------------------
    def leader(self):
        info = self.info()
        target = self.find(info["members"])
        if target is None:
            self.fail(f"cannot move leadership to {self.label()}: no such member")
        self.result["member"] = public_member(target)
        if target.get("is_leader"):
            return
        label = describe_member(target)
        if target["is_learner"] or not target.get("healthy"):
            why = "a learner" if target["is_learner"] else "not healthy"
            self.fail(f"cannot move leadership to {label}: it is {why}")
        current = next((m for m in info["members"] if m.get("is_leader")), None)
        if current is None:
            self.fail(f"cannot move leadership to {label}: the cluster has no leader now")
        self.result["actions"].append(f"move leadership from {describe_member(current)} to {label}")
        self.result["changed"] = True
        if self.module.check_mode:
            return
        try:
            self.retrying(lambda: self.client.move_leader(current["client_urls"], target["id"]))
        except (EtcdOperationError, EtcdUnreachable) as exc:
            self.result["changed"] = False
            self.fail(f"could not move leadership to {label}: {exc}")
        deadline = time.monotonic() + max(self.p["timeout"], 1.0) * 2
        try:
            info = wait_for_leader_change(self.client, current["id"], deadline)
        except EtcdUnreachable as exc:
            self.fail(f"lost contact with etcd after moving leadership: {exc}")
        if not info["leader"] or info["leader"]["id"] != target["id"]:
            self.fail(
                f"leadership did not move to {label} in time (leader now: "
                f"{(info['leader'] or {}).get('name') or 'none'})"
            )
        self.result["leader_moved_to"] = dict(info["leader"])

    def transfer_leadership(self, target, new_leader):
        label = describe_member(target)
        try:
            self.retrying(lambda: self.client.move_leader(target["client_urls"], new_leader["id"]))
        except (EtcdOperationError, EtcdUnreachable) as exc:
            self.result["changed"] = False
            self.fail(
                f"refusing to remove {label}: moving leadership to "
                f"{describe_member(new_leader)} failed: {exc}"
            )
        deadline = time.monotonic() + max(self.p["timeout"], 1.0) * 2
        try:
            info = wait_for_leader_change(self.client, target["id"], deadline)
        except EtcdUnreachable as exc:
            self.fail(f"lost contact with etcd after moving leadership: {exc}")
        if not info["leader"] or info["leader"]["id"] == target["id"]:
            self.result["changed"] = False
            self.fail(f"refusing to remove {label}: leadership did not move away from it in time")
        self.result["leader_moved_to"] = dict(info["leader"])
        return info["members"]
