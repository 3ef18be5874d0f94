#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_event
short_description: Record a core/v1 Event about an object, aggregating repeats
description:
  - Emits an Event about the object (as C(kubectl describe) shows them). When an Event for the
    same object, reason, message, type and component exists, its C(count) is incremented and
    C(lastTimestamp) updated instead of creating another one (like client-go's correlator).
  - Configuration as in C(k8s_status): I(kubeconfig), C(K8S_AUTH_KUBECONFIG), C(KUBECONFIG),
    in-cluster.
options:
  api_version:
    description: apiVersion of the involved object.
    type: str
    required: true
  kind:
    description: Kind of the involved object.
    type: str
    required: true
  name:
    description: Name of the involved object.
    type: str
    required: true
  namespace:
    description: Namespace of the involved object, and of the Event (C(default) if omitted).
    type: str
  uid:
    description: UID of the involved object; looked up when omitted.
    type: str
  reason:
    description: Short CamelCase reason, e.g. C(MemberAdded).
    type: str
    required: true
  message:
    description: Human-readable message.
    type: str
    required: true
  type:
    description: Event type.
    type: str
    choices: [Normal, Warning]
    default: Normal
  component:
    description: Reporting component (C(source.component)).
    type: str
    default: quorumkeeper
  kubeconfig:
    description: Path to a kubeconfig file.
    type: path
  context:
    description: kubeconfig context to use.
    type: str
requirements: [kubernetes]
"""

EXAMPLES = r"""
- name: Tell the user
  k8s_event:
    api_version: etcd.quorumkeeper.dev/v1alpha1
    kind: EtcdCluster
    name: "{{ ansible_operator_meta.name }}"
    namespace: "{{ ansible_operator_meta.namespace }}"
    reason: MemberRemoved
    message: removed etcd-2 (id 8e9e05c52164694d)
    type: Warning
"""

RETURN = r"""
event:
  description: The Event as written (or as it would be written in check mode).
  type: dict
  returned: success
"""

import socket
import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.qk_k8s import (
    HAS_K8S,
    K8S_IMPORT_ERROR,
    ApiException,
    ConflictError,
    NotFoundError,
    ResourceNotFoundError,
    api_error_text,
    dynamic_client,
    event_matches,
    k8s_argument_spec,
    now_rfc3339,
)


def main():
    spec = k8s_argument_spec()
    spec.update(
        api_version={"type": "str", "required": True},
        kind={"type": "str", "required": True},
        name={"type": "str", "required": True},
        namespace={"type": "str"},
        uid={"type": "str"},
        reason={"type": "str", "required": True},
        message={"type": "str", "required": True},
        type={"type": "str", "choices": ["Normal", "Warning"], "default": "Normal"},
        component={"type": "str", "default": "quorumkeeper"},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    if not HAS_K8S:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=str(K8S_IMPORT_ERROR))
    p = module.params
    namespace = p["namespace"] or "default"
    what = f"{p['kind']} {p['namespace'] + '/' if p['namespace'] else ''}{p['name']}"
    try:
        client = dynamic_client(p["kubeconfig"], p["context"])
        events = client.resources.get(api_version="v1", kind="Event")
    except Exception as exc:  # noqa: BLE001 - config/connection errors of any kind
        module.fail_json(msg=f"cannot connect to Kubernetes: {exc}")

    uid = p["uid"]
    resource_version = None
    if not uid:
        try:
            resource = client.resources.get(api_version=p["api_version"], kind=p["kind"])
            obj = client.get(resource, name=p["name"], namespace=p["namespace"]).to_dict()
        except ResourceNotFoundError:
            module.fail_json(
                msg=f"the API server does not serve kind {p['kind']} in {p['api_version']}"
            )
        except NotFoundError:
            module.fail_json(msg=f"cannot record an event about {what}: it does not exist")
        except ApiException as exc:
            module.fail_json(msg=f"cannot read {what}: {api_error_text(exc)}")
        uid = obj["metadata"]["uid"]
        resource_version = obj["metadata"].get("resourceVersion")

    now = now_rfc3339()
    selector = f"involvedObject.uid={uid},reason={p['reason']}"
    try:
        existing = client.get(events, namespace=namespace, field_selector=selector).to_dict()
    except ApiException as exc:
        module.fail_json(msg=f"cannot list events in {namespace}: {api_error_text(exc)}")
    match = None
    for ev in existing.get("items") or []:
        if not event_matches(ev, uid, p["reason"], p["message"], p["type"], p["component"]):
            continue
        if match is None or (ev.get("lastTimestamp") or "") > (match.get("lastTimestamp") or ""):
            match = ev

    if match is not None:
        patch = {"count": int(match.get("count") or 1) + 1, "lastTimestamp": now}
        if module.check_mode:
            match.update(patch)
            module.exit_json(changed=True, event=match)
        try:
            written = client.patch(
                events,
                name=match["metadata"]["name"],
                namespace=namespace,
                body=patch,
                content_type="application/merge-patch+json",
            ).to_dict()
        except ApiException as exc:
            module.fail_json(
                msg=f"cannot update event {match['metadata']['name']}: {api_error_text(exc)}"
            )
        module.exit_json(changed=True, event=written)

    involved = {
        "apiVersion": p["api_version"],
        "kind": p["kind"],
        "name": p["name"],
        "uid": uid,
    }
    if p["namespace"]:
        involved["namespace"] = p["namespace"]
    if resource_version:
        involved["resourceVersion"] = resource_version
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{p['name']}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": involved,
        "reason": p["reason"],
        "message": p["message"],
        "type": p["type"],
        "source": {"component": p["component"]},
        "reportingComponent": p["component"],
        "reportingInstance": socket.gethostname(),
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    if module.check_mode:
        module.exit_json(changed=True, event=body)
    try:
        written = client.create(events, body=body, namespace=namespace).to_dict()
    except ConflictError:
        body["metadata"]["name"] = f"{p['name']}.{time.time_ns():x}"
        written = client.create(events, body=body, namespace=namespace).to_dict()
    except ApiException as exc:
        module.fail_json(msg=f"cannot create an event in {namespace}: {api_error_text(exc)}")
    module.exit_json(changed=True, event=written)


if __name__ == "__main__":
    main()
