#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_cluster_monitoring
short_description: Write or delete an EtcdCluster's PodMonitor and PrometheusRule
description:
  - >-
    Writes the Prometheus operator objects C(spec.monitoring) asks for, named after the cluster
    and owned by it (garbage collected with it): a PodMonitor over the members' C(metrics) port,
    and a PrometheusRule with the cluster groups of I(alert_rules), every expression limited to
    this cluster (C(namespace) and C(etcdcluster) matchers).
  - >-
    Deletes those the spec no longer asks for, only when this cluster owns them; an object of
    the same name that belongs to someone else is never touched.
  - >-
    Written straight to the API server, not through ansible-operator's proxy: the operator does
    not watch them. The etcdcluster role runs this module only when C(etcd_cluster_observe)
    found them different from what is wanted (their hash annotation), so a steady reconcile
    does not run it.
  - Check mode reports what would be written or deleted.
options:
  owner_uid:
    required: true
  monitoring:
    description: The EtcdCluster's C(spec.monitoring) (C({}) for none).
    type: dict
    required: true
  alert_rules:
    description: >-
      The PrometheusRule whose cluster groups are written (config/prometheus/rules.yaml, as
      text); needed when I(monitoring) asks for a PrometheusRule.
    type: str
  write:
    description: Kinds (C(PodMonitor), C(PrometheusRule)) to create or replace.
    type: list
    elements: str
    choices: [PodMonitor, PrometheusRule]
    default: []
  delete:
    description: Kinds to delete, when this cluster owns them.
    type: list
    elements: str
    choices: [PodMonitor, PrometheusRule]
    default: []
extends_documentation_fragment:
  - quorumkeeper.etcd.etcd_cluster
  - quorumkeeper.etcd.etcd_cluster.owned
  - quorumkeeper.etcd.kube_client
  - quorumkeeper.etcd.kube_client.api_version
requirements: [PyYAML]
"""

EXAMPLES = r"""
- name: Write my-cluster's PodMonitor and PrometheusRule
  etcd_cluster_monitoring:
    name: my-cluster
    namespace: default
    owner_uid: "{{ cluster.metadata.uid }}"
    monitoring: {podMonitor: true, prometheusRule: true, labels: {release: prometheus}}
    alert_rules: "{{ lookup('file', 'alert-rules.yaml') }}"
    write: [PodMonitor, PrometheusRule]
"""

RETURN = r"""
written:
  description: Kinds created or replaced.
  type: list
  elements: str
  returned: always
deleted:
  description: Kinds deleted.
  type: list
  elements: str
  returned: always
events:
  description: >-
    An Event (reason, type, message) per object written or deleted, for the role to record.
  type: list
  elements: dict
  returned: always
"""

import yaml
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import API_VERSION
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KUBE_CLIENT_ARGUMENT_SPEC,
    KubeConfigError,
    KubeError,
    api_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_monitoring import (
    MONITORING_API_VERSION,
    MONITORING_KINDS,
    monitoring_object_name,
    render_monitoring_objects,
)


def write(client, obj):
    """Create ``obj``, or replace the one there (labels and spec as wanted: a label dropped from
    spec.monitoring.labels goes too). Returns whether it was created."""
    meta = obj["metadata"]
    existing = client.get(MONITORING_API_VERSION, obj["kind"], meta["name"], meta["namespace"])
    if existing is None:
        try:
            client.create(obj)
            return True
        except KubeError as exc:
            if not exc.already_exists:
                raise
            existing = client.get(
                MONITORING_API_VERSION, obj["kind"], meta["name"], meta["namespace"]
            )
    replaced = {
        **obj,
        "metadata": {**meta, "resourceVersion": existing["metadata"]["resourceVersion"]},
    }
    client.request(
        "PUT",
        client.path(MONITORING_API_VERSION, obj["kind"], meta["namespace"], meta["name"]),
        body=replaced,
    )
    return False


def delete(client, kind, name, namespace, owner_uid):
    """Delete the object if this cluster owns it (the uid precondition makes a replaced one
    safe). Returns whether it was deleted."""
    existing = client.get(MONITORING_API_VERSION, kind, name, namespace)
    refs = (existing or {}).get("metadata", {}).get("ownerReferences") or []
    if not any(ref.get("uid") == owner_uid for ref in refs):
        return False
    try:
        client.delete(
            MONITORING_API_VERSION, kind, name, namespace, uid=existing["metadata"]["uid"]
        )
    except KubeError as exc:
        if not (exc.not_found or exc.conflict):
            raise
        return False
    return True


def ensure(module, client):
    p = module.params
    rules = yaml.safe_load(p["alert_rules"]) if p["alert_rules"] else {}
    wanted = render_monitoring_objects(
        p["name"], p["namespace"], p["owner_uid"], p["monitoring"], rules, p["api_version"]
    )
    name = monitoring_object_name(p["name"])
    result = {"changed": False, "written": [], "deleted": [], "events": []}
    for kind in p["write"]:
        if kind not in wanted:
            module.fail_json(msg=f"{kind} is to be written but spec.monitoring does not ask for it")
        result["changed"] = True
        created = module.check_mode or write(client, wanted[kind])
        result["written"].append(kind)
        result["events"].append(
            {
                "reason": "MonitoringObjectCreated" if created else "MonitoringObjectUpdated",
                "type": "Normal",
                "message": f"{kind} {p['namespace']}/{name} {'created' if created else 'updated'}",
            }
        )
    for kind in p["delete"]:
        if module.check_mode or delete(client, kind, name, p["namespace"], p["owner_uid"]):
            result["changed"] = True
            result["deleted"].append(kind)
            result["events"].append(
                {
                    "reason": "MonitoringObjectDeleted",
                    "type": "Normal",
                    "message": f"{kind} {p['namespace']}/{name} deleted: spec.monitoring no "
                    f"longer asks for it",
                }
            )
    return result


ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "owner_uid": {"type": "str", "required": True},
    "monitoring": {"type": "dict", "required": True},
    "alert_rules": {"type": "str"},
    "write": {"type": "list", "elements": "str", "default": [], "choices": list(MONITORING_KINDS)},
    "delete": {"type": "list", "elements": "str", "default": [], "choices": list(MONITORING_KINDS)},
    "api_version": {"type": "str", "default": API_VERSION},
    **KUBE_CLIENT_ARGUMENT_SPEC,
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        result = ensure(module, api_client(p, fresh=True))
    except (KubeConfigError, KubeError, yaml.YAMLError) as exc:
        module.fail_json(
            msg=f"monitoring objects of EtcdCluster {p['namespace']}/{p['name']}: {exc}"
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
