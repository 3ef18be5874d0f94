# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The options of k8s_status, k8s_event and k8s_report that name the object written about
(qk_k8s.OBJECT_OPTIONS), documented once:

    extends_documentation_fragment:
      - quorumkeeper.etcd.kube_client
      - quorumkeeper.etcd.k8s_object
      - quorumkeeper.etcd.k8s_object.conditions   # modules that merge status conditions

A module's own entry for an option is merged over the fragment's."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  api_version:
    description: apiVersion of the object, e.g. C(etcd.quorumkeeper.dev/v1alpha1).
    type: str
    required: true
  kind:
    description: Kind of the object.
    type: str
    required: true
  name:
    description: Name of the object.
    type: str
    required: true
  namespace:
    description: Namespace of the object (omit for cluster-scoped kinds).
    type: str
  ignore_missing:
    description:
      - When the object does not exist (any more), or its namespace is being deleted, do
        nothing and return C(gone=true) instead of failing. For controllers reporting on an
        object that may be deleted while they work.
    type: bool
    default: false
"""

    CONDITIONS = r"""
options:
  status:
    description: Fields merged into the object's existing status (recursively; a null value
      deletes a key).
    type: dict
    default: {}
  conditions:
    description: Conditions merged by type into the object's C(status.conditions).
    type: list
    elements: dict
    default: []
    suboptions:
      type:
        description: Condition type, e.g. C(Available).
        type: str
        required: true
      status:
        description: C(True), C(False) or C(Unknown) (booleans are accepted).
        type: raw
        required: true
      reason:
        description: Short CamelCase reason.
        type: str
        required: true
      message:
        description: Human-readable message.
        type: str
        default: ""
"""
