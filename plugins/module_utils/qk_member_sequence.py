# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Several members added (etcd_member_join) or removed (etcd_member_leave) one at a time, each
with its Kubernetes objects, in one module run: the membership changes are qk_member_change's
(quorum checked before each), the objects qk_peer's. The first member that fails ends the
module with an error that names it, and the result says what was done before."""

from __future__ import annotations

import time

from ansible.module_utils.basic import missing_required_lib
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    etcd_client,
    profile_from_params,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    ETCD3AIO_IMPORT_ERROR,
    HAS_ETCD3AIO,
    EtcdOperationError,
    EtcdUnreachable,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KubeConfigError,
    KubeError,
    operator_clients,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_member_change import Runner
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_peer import (
    Member,
    parse_members,
    spec_up_to,
)


class MemberSequence:
    """What the two modules share: the clients, one result, failures that name the member."""

    done_key = ""  # the result's list of members done

    def __init__(self, module, client, cached, direct):
        self.module, self.client = module, client
        self.cached, self.direct = cached, direct
        self.p = module.params
        self.current = ""  # the member being worked on
        self.result = {"changed": False, self.done_key: [], "actions": []}
        self.promoted = set()  # the IDs of the members this run promoted

    def fail(self, msg, runner=None):
        if runner is not None:
            self.result["actions"] += runner.result["actions"]
        # etcd names a learner only once it has started: say which member this is.
        about = f"{self.current}: " if self.current and not msg.startswith(self.current) else ""
        self.module.fail_json(msg=about + msg, **self.result)

    def membership(self, state, name, peer_urls=(), member_id=None):
        """One qk_member_change.Runner change (present, promoted, absent) of member ``name``."""
        params = {
            **self.p,
            "name": name,
            "id": member_id,
            "peer_urls": list(peer_urls),
            "state": state,
            "learner": True,
            "update_peer_urls": False,
        }
        runner = Runner(self.module, self.client, params)
        runner.promoted_here = self.promoted
        # Runner.fail ends the module with the runner's own result: add what was done before.
        runner.fail = lambda msg, **extra: self.fail(msg, runner)
        getattr(runner, state)()
        if state == "promoted" and runner.result["changed"]:
            self.promoted.add(runner.result["member"]["id"])
        self.result["actions"] += runner.result["actions"]
        self.result["changed"] |= runner.result["changed"]
        return runner.result

    def objects(self, state, name, **params):
        """qk_peer.Member ``state`` (present, absent) for member ``name``."""
        what = "create the EtcdPeer, claim and ReplicaSet" if state == "present" else "delete"
        try:
            member = Member(
                self.module, self.cached, self.direct, {**self.p, "name": name, **params}
            )
            outcome = member.present() if state == "present" else member.absent()
        except (KubeError, ValueError) as exc:
            self.fail(f"cannot {what} of {name}: {exc}")
        self.result["changed"] |= outcome["changed"]
        return outcome


class Join(MemberSequence):
    """etcd_member_join: each member added as a learner, its objects created, promoted."""

    done_key = "joined"

    def run(self, members, spec):
        names = [name for name, _ in members]
        for index, (name, url) in enumerate(members):
            self.current = name
            started = time.monotonic()
            added = self.membership("present", name, [url])
            added_at = time.monotonic()
            created = self.objects(
                "present",
                name,
                spec=spec_up_to(spec, names, index),
                labels={},
                update_image=False,
            )
            if created.get("data_lost") or created.get("deleting"):
                why = "its recorded claim is gone" if created.get("data_lost") else "it is deleted"
                self.fail(f"cannot start {name}: its EtcdPeer exists and {why}")
            self.result["actions"] += [f"create {kind} {name}" for kind in created["created"]]
            created_at = time.monotonic()
            if self.module.check_mode and added["changed"]:
                # Not added, so nothing to promote; the next one would wait for it.
                promoted = {"changed": False, "member": added.get("member")}
                self.result["actions"].append(f"promote {name} once it has caught up")
            else:
                promoted = self.membership("promoted", name, [url])
            self.result["joined"].append(
                {
                    "name": name,
                    "added": added["changed"],
                    "created": created["created"],
                    "promoted": promoted["changed"],
                    "member": promoted.get("member") or added.get("member") or {},
                    "seconds": {
                        "add": round(added_at - started, 3),
                        "create": round(created_at - added_at, 3),
                        "promote": round(time.monotonic() - created_at, 3),
                    },
                }
            )
        return self.result


class Leave(MemberSequence):
    """etcd_member_leave: each member removed from etcd, then its objects deleted."""

    done_key = "left"

    def run(self, members):
        for wanted in members:
            name = self.current = wanted["name"]
            removed = (
                self.membership("absent", name, member_id=wanted["id"]) if wanted["id"] else {}
            )
            deleted = self.objects("absent", name, spec=None)
            left = {
                "name": name,
                "removed": bool(removed.get("changed")),
                "deleted": deleted["deleted"],
            }
            if removed.get("leader_moved_to"):
                left["leader_moved_to"] = removed["leader_moved_to"]
            self.result["left"].append(left)
        return self.result


def run_sequence(module, sequence, *args):
    """Run ``sequence`` (Join or Leave) with the module's etcd and Kubernetes clients, and end
    the module with its result."""
    if not HAS_ETCD3AIO:
        module.fail_json(msg=missing_required_lib("etcd3aio"), exception=str(ETCD3AIO_IMPORT_ERROR))
    p = module.params
    try:
        client = etcd_client(profile_from_params(p))
        cached, direct = operator_clients(p)
    except (ValueError, OSError, KubeConfigError) as exc:
        module.fail_json(msg=f"invalid options: {exc}")
    steps = sequence(module, client, cached, direct)
    try:
        with client:
            steps.run(*args)
    except (EtcdUnreachable, EtcdOperationError) as exc:
        reached = not isinstance(exc, EtcdUnreachable)
        steps.fail(str(exc) if reached else f"cannot reach etcd: {exc}")
    module.exit_json(**steps.result)


def join_members(module):
    try:
        members = parse_members(module.params["members"])
    except ValueError as exc:
        module.fail_json(msg=f"invalid options: {exc}")
    run_sequence(module, Join, members, module.params["spec"])


def leave_members(module):
    run_sequence(module, Leave, module.params["members"])
