#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_peer_upgrade
short_description: Restart one etcd member on another version or configuration by replacing its pod
description:
  - Sets the EtcdPeer's C(spec.version) (and C(spec.repository)) to I(version) (I(repository)),
    and its C(spec.options) and C(spec.podTemplate) to I(config), then replaces the member's pod
    so that etcd runs the new image and configuration on the same PersistentVolumeClaim, with
    the same name and therefore the same member ID.
  - The old pod is gone before the new one starts. The member's ReplicaSet is deleted in the
    foreground (the ReplicaSet controller does not replace the pod of a ReplicaSet being
    deleted, and the ReplicaSet is only gone once its pod is), then created again from the
    EtcdPeer, owned by it; the module returns once the new pod exists. Two etcd processes never
    share the data directory, and the member's DNS name never points at the old pod and the new
    one at once.
  - >-
    Idempotent: a member whose pods already run the new image (and, with I(config), were started
    with that configuration: their C(etcd.quorumkeeper.dev/config-hash) annotation) is not
    restarted (at most its ReplicaSet's template is patched); a ReplicaSet left deleted or
    half-deleted by an interrupted run is waited for and created again.
  - Quorum is the caller's business (the etcdcluster role restarts one member at a time, only
    when all the others are healthy, after moving leadership away from it).
  - Check mode reports what would be patched and whether the pod would be replaced.
options:
  name:
    description: Name of the EtcdPeer (the member's name).
    type: str
    required: true
  namespace:
    description: Namespace of the EtcdPeer.
    type: str
    required: true
  version:
    description: etcd version to run (the image tag without its leading C(v)); the EtcdPeer's own
      when omitted.
    type: str
  config:
    description:
      - The configuration to restart with, C(options) (etcd's settings, defaults resolved),
        C(podTemplate) and C(tls), as C(qk_options.cluster_config) computes it from the
        EtcdCluster's spec (C(qk_plan_config.staged_config) on the way to it).
      - Each replaces the EtcdPeer's (a key left out of one is removed; without C(tls) the
        member is a plain one). When omitted, the EtcdPeer's configuration is kept and pods
        started with another one are not restarted.
    type: dict
    suboptions:
      options:
        description: etcd's settings (C(spec.options) of the EtcdPeer).
        type: dict
        required: true
      podTemplate:
        description: The member pod's template (C(spec.podTemplate) of the EtcdPeer).
        type: dict
        required: true
      tls:
        description:
          - The certificate Secrets the member mounts (C(spec.tls) of the EtcdPeer), with
            C(client.servePlainHTTP) while client TLS is turned on or off; omitted, none.
        type: dict
  repository:
    description: Image repository; the EtcdPeer's own when omitted.
    type: str
  wait_timeout:
    description: Seconds to wait for the old pod to be gone, and then for the new one to exist.
    type: float
    default: 120
  settings:
    description:
      - Ports, data directory, grace period, default repository and default storage of the
        member's pod (see C(qk_members.DEFAULTS)); the etcdcluster role passes its defaults, as
        it does to etcd_peer, so that both render the same ReplicaSet.
    type: dict
    default: {}
extends_documentation_fragment:
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.kube_client.api_version
requirements: [PyYAML]
"""

EXAMPLES = r"""
- name: Run member my-cluster-2 on etcd 3.6.16
  etcd_peer_upgrade:
    name: my-cluster-2
    namespace: default
    version: 3.6.16

- name: Restart member my-cluster-1 with a larger quota and a 10-minute compaction window
  etcd_peer_upgrade:
    name: my-cluster-1
    namespace: default
    config:
      options:
        quotaBackendBytes: 4294967296
        autoCompaction: {mode: periodic, retention: 10m}
      podTemplate: {}
"""

RETURN = r"""
patched:
  description: Whether the EtcdPeer's spec was changed.
  type: bool
  returned: always
restarted:
  description: Whether the member's pod was replaced.
  type: bool
  returned: always
replaced_pods:
  description: Names of the pods that ran another image and were replaced.
  type: list
  elements: str
  returned: always
pod:
  description: Name of the member's pod afterwards (empty in check mode when it is replaced).
  type: str
  returned: always
image:
  description: The image the member runs now.
  type: str
  returned: always
gone:
  description: The EtcdPeer does not exist or is being deleted; nothing was done.
  type: bool
  returned: when true
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_VERSION,
    image_reference,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KUBE_CLIENT_ARGUMENT_SPEC,
    KubeConfigError,
    KubeError,
    api_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import (
    PEER_LABEL,
    is_subset,
    member_settings,
    owner_reference,
    render_replicaset,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    config_hash,
    peer_config,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_upgrade import restart_plan

POLL_SECONDS = 0.2


class Upgrade:
    def __init__(self, module, client):
        self.module, self.client, self.p = module, client, module.params
        self.result = {
            "changed": False,
            "patched": False,
            "restarted": False,
            "replaced_pods": [],
            "pod": "",
            "image": "",
        }

    def pods(self):
        selector = f"{PEER_LABEL}={self.p['name']}"
        return self.client.list("v1", "Pod", self.p["namespace"], label_selector=selector)

    def replicaset(self):
        return self.client.get("apps/v1", "ReplicaSet", self.p["name"], self.p["namespace"])

    def run(self):
        p = self.p
        peer = self.client.get(p["api_version"], "EtcdPeer", p["name"], p["namespace"])
        if peer is None or peer["metadata"].get("deletionTimestamp"):
            self.result["gone"] = True
            return self.result
        changes = {k: p[k] for k in ("version", "repository") if p[k]}
        config = {k: v for k, v in (p["config"] or {}).items() if v is not None}
        changes.update(config)
        changes = {k: v for k, v in changes.items() if peer["spec"].get(k, {}) != v}
        # A configuration without tls is a plain member's: its certificates go.
        removed = [k for k in ("tls",) if config and k not in config and k in peer["spec"]]
        if changes or removed:
            self.result.update(changed=True, patched=True)
            if self.module.check_mode:
                spec = {k: v for k, v in peer["spec"].items() if k not in removed}
                peer = dict(peer, spec={**spec, **changes})
            else:
                # First, so that an interrupted run leaves what is wanted where the planner
                # (and the etcdpeer role, which renders the same ReplicaSet) reads it. A JSON
                # patch: a merge patch would keep the keys the new options leave out.
                patch = [
                    {"op": "add", "path": f"/spec/{k}", "value": v} for k, v in changes.items()
                ] + [{"op": "remove", "path": f"/spec/{k}"} for k in removed]
                peer = self.client.patch(
                    p["api_version"], "EtcdPeer", p["name"], patch, p["namespace"], "json"
                )
        settings = member_settings(p["settings"])
        wanted = render_replicaset(p["name"], p["namespace"], peer["spec"], settings)
        wanted["metadata"]["ownerReferences"] = [owner_reference(peer)]
        image = image_reference(
            peer["spec"]["version"],
            peer["spec"].get("repository") or settings["default_repository"],
        )
        self.result["image"] = image
        replicaset = self.replicaset()
        wanted_hash = config_hash(peer_config(peer["spec"])) if config else None
        plan = restart_plan(replicaset, self.pods(), image, wanted_hash)
        if plan["stale"] or plan["create"]:
            self.result.update(changed=True, restarted=bool(plan["stale"]))
            self.result["replaced_pods"] = plan["stale"]
            if not self.module.check_mode:
                self.replace(replicaset, plan, wanted)
            return self.result
        if replicaset is not None and not is_subset(
            wanted["spec"]["template"], replicaset["spec"]["template"]
        ):
            self.result["changed"] = True
            if not self.module.check_mode:
                self.client.patch(
                    "apps/v1",
                    "ReplicaSet",
                    p["name"],
                    {"spec": {"template": wanted["spec"]["template"]}},
                    p["namespace"],
                )
        self.result["pod"] = next(
            (
                x["metadata"]["name"]
                for x in self.pods()
                if not x["metadata"].get("deletionTimestamp")
            ),
            "",
        )
        return self.result

    def replace(self, replicaset, plan, wanted):
        p = self.p
        if plan["delete"]:
            self.client.delete("apps/v1", "ReplicaSet", p["name"], p["namespace"], "Foreground")
        elif replicaset is None:
            # Pods without their ReplicaSet (deleted with orphaning, by hand): nothing else
            # would ever stop them.
            for name in plan["stale"]:
                self.client.delete("v1", "Pod", name, p["namespace"])
        old_uid = (replicaset or {}).get("metadata", {}).get("uid")
        self.wait("the old pod and its ReplicaSet to be gone", lambda: self.old_gone(old_uid, plan))
        try:
            self.client.create(wanted)
        except KubeError as exc:
            # The etcdpeer role recreates a member's missing ReplicaSet too, from the same
            # EtcdPeer: either one is the same ReplicaSet.
            if not exc.already_exists:
                raise
        self.result["pod"] = self.wait(
            "the new pod to be created",
            lambda: next(
                (
                    x["metadata"]["name"]
                    for x in self.pods()
                    if not x["metadata"].get("deletionTimestamp")
                ),
                "",
            ),
        )

    def old_gone(self, old_uid, plan):
        """Whether the old ReplicaSet and its pods are gone. The etcdpeer role, woken by the
        EtcdPeer's patch, may already have created the ReplicaSet again from the patched spec
        (it can only once the old one, and so its pods, are gone): that one and its new pod
        count as the replacement, not as what is waited for."""
        current = self.replicaset()
        if current is not None and (
            current["metadata"].get("uid") == old_uid
            or current["metadata"].get("deletionTimestamp")
        ):
            return False
        return not any(
            x["metadata"]["name"] in plan["stale"] or x["metadata"].get("deletionTimestamp")
            for x in self.pods()
        )

    def wait(self, what, predicate):
        deadline = time.monotonic() + self.p["wait_timeout"]
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                pods = ", ".join(x["metadata"]["name"] for x in self.pods()) or "none"
                self.module.fail_json(
                    msg=f"member {self.p['name']}: waited {self.p['wait_timeout']:.0f}s for {what} "
                    f"(its pods now: {pods}); check kubectl describe replicaset,pod -l "
                    f"{PEER_LABEL}={self.p['name']} and the node they run on. The next "
                    "reconcile carries on from there",
                    **self.result,
                )
            time.sleep(POLL_SECONDS)


ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "version": {"type": "str"},
    "config": {
        "type": "dict",
        "options": {
            "options": {"type": "dict", "required": True},
            "podTemplate": {"type": "dict", "required": True},
            "tls": {"type": "dict"},
        },
    },
    "repository": {"type": "str"},
    "wait_timeout": {"type": "float", "default": 120},
    "settings": {"type": "dict", "default": {}},
    "api_version": {"type": "str", "default": API_VERSION},
    **KUBE_CLIENT_ARGUMENT_SPEC,
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    if (p["version"] or "").startswith("v"):
        module.fail_json(msg=f"version {p['version']!r}: give it without the leading v")
    try:
        result = Upgrade(module, api_client(p, fresh=True)).run()
    except (KubeConfigError, KubeError, ValueError) as exc:
        module.fail_json(msg=f"upgrading member {p['namespace']}/{p['name']}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
