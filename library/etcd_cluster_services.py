#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_cluster_services
short_description: Ensure an EtcdCluster's Services, and that its members' readiness wakes it up
description:
  - Creates the headless Service C(<name>) (one stable DNS name per member, not-ready addresses
    published), the client Service C(<name>-client) and the headless metrics Service
    C(<name>-metrics) (every member's C(metrics) port, for ServiceMonitors) when they are
    missing, through ansible-operator's proxy so that they are owned by the EtcdCluster and
    watched.
  - Makes sure the client Service's Endpoints carry the C(operator-sdk/primary-resource)
    annotations naming the EtcdCluster. Kubernetes rewrites those Endpoints whenever a member's
    pod becomes ready or unready or goes away; with the annotations, ansible-operator turns
    each such change into a reconcile of the EtcdCluster, so the status follows the members
    within seconds without polling. The Endpoints controller keeps annotations it did not set.
  - Existing Services are left as they are.
options:
  client_port:
    description: etcd client port.
    type: int
    default: 2379
  peer_port:
    description: etcd peer port.
    type: int
    default: 2380
extends_documentation_fragment:
  - quorumkeeper.etcd.etcd_cluster
  - quorumkeeper.etcd.kube_client
requirements: [PyYAML]
"""

EXAMPLES = r"""
- name: Ensure the Services of my-cluster
  etcd_cluster_services:
    name: my-cluster
    namespace: default
"""

RETURN = r"""
created:
  description: Names of the objects created (C(Service/<name>), C(Endpoints/<name>)).
  type: list
  elements: str
  returned: always
patched:
  description: Names of the objects patched.
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    DEFAULT_CLIENT_PORT,
    DEFAULT_PEER_PORT,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KUBE_CLIENT_ARGUMENT_SPEC,
    KubeConfigError,
    KubeError,
    operator_clients,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import (
    PRIMARY_RESOURCE_TYPE,
    client_service_name,
    cluster_annotations,
    render_services,
)


def ensure(module, cached, direct):
    p = module.params
    result = {"changed": False, "created": [], "patched": []}
    for service in render_services(p["name"], p["namespace"], p["client_port"], p["peer_port"]):
        name = service["metadata"]["name"]
        if cached.get("v1", "Service", name, p["namespace"]) is None:
            result["created"].append(f"Service/{name}")
            if not module.check_mode:
                try:
                    cached.create(service)
                except KubeError as exc:
                    if not exc.already_exists:
                        raise
    annotations = cluster_annotations(p["name"], p["namespace"])
    endpoints_name = client_service_name(p["name"])
    endpoints = direct.get("v1", "Endpoints", endpoints_name, p["namespace"])
    if endpoints is None:
        result["created"].append(f"Endpoints/{endpoints_name}")
        body = {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {
                "name": endpoints_name,
                "namespace": p["namespace"],
                "annotations": annotations,
            },
        }
        if not module.check_mode:
            try:
                direct.create(body)
                endpoints = None
            except KubeError as exc:
                if not exc.already_exists:
                    raise
                endpoints = direct.get("v1", "Endpoints", endpoints_name, p["namespace"])
                result["created"].pop()
    current = ((endpoints or {}).get("metadata") or {}).get("annotations") or {}
    if (
        endpoints is not None
        and current.get(PRIMARY_RESOURCE_TYPE) != annotations[PRIMARY_RESOURCE_TYPE]
    ):
        result["patched"].append(f"Endpoints/{endpoints_name}")
        if not module.check_mode:
            direct.patch(
                "v1",
                "Endpoints",
                endpoints_name,
                {"metadata": {"annotations": annotations}},
                p["namespace"],
            )
    result["changed"] = bool(result["created"] or result["patched"])
    return result


ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "client_port": {"type": "int", "default": DEFAULT_CLIENT_PORT},
    "peer_port": {"type": "int", "default": DEFAULT_PEER_PORT},
    **KUBE_CLIENT_ARGUMENT_SPEC,
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        cached, direct = operator_clients(p)
        result = ensure(module, cached, direct)
    except (KubeConfigError, KubeError) as exc:
        module.fail_json(msg=f"Services of EtcdCluster {p['namespace']}/{p['name']}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
