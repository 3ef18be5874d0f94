# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The options that name the EtcdCluster a module works on, documented once:

    extends_documentation_fragment:
      - quorumkeeper.etcd.etcd_cluster
      - quorumkeeper.etcd.etcd_cluster.owned   # modules that create objects it owns

A module's own entry for an option is merged over the fragment's."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  name:
    description: Name of the EtcdCluster.
    type: str
    required: true
  namespace:
    description: Namespace of the EtcdCluster.
    type: str
    required: true
"""

    OWNED = r"""
options:
  owner_uid:
    description:
      - UID of the EtcdCluster, for the owner reference of the objects the module creates
        (deleted with the cluster by Kubernetes' garbage collector).
    type: str
"""
